//! Prediction expressions: `(weight_bytes + batch * ctx * kv) / bytes_per_s`.
//!
//! A small hand-written parser rather than a crate: the grammar is tiny
//! (numbers, `+ - * / ^`, parentheses, variables, a few functions), errors
//! must point at a column in our own words, variable names contain dots
//! (scenario key paths such as `model.kv_cache.bytes_per_token`), and `^`
//! goes through `libm` so results are the same bits on every machine.
//!
//! Grammar, loosest first: `sum := product (('+'|'-') product)*`,
//! `product := unary (('*'|'/') unary)*`, `unary := '-' unary | power`,
//! `power := atom ('^' unary)?` (so `-2^2` is -4 and `2^-1` is 0.5),
//! `atom := number | name | name '(' sum (',' sum)* ')' | '(' sum ')'`.
//!
//! Nesting is bounded: an expression may nest at most [`MAX_DEPTH`] levels,
//! where every pair of parentheses, sign, `^`, function call and operator
//! of a chain (`a + b + c` is two levels) adds one. The parser and the
//! evaluator recurse once per level, so without the bound 100,000 minus
//! signs would overflow the stack; a real derivation nests a dozen levels,
//! and a longer one reads better split into `let` names anyway.

use std::fmt;

/// The functions an expression may call, with their argument counts
/// (`None`: one or more).
pub const FUNCTIONS: &[(&str, Option<usize>)] = &[
    ("min", None),
    ("max", None),
    ("ceil", Some(1)),
    ("floor", Some(1)),
    ("round", Some(1)),
    ("abs", Some(1)),
    ("sqrt", Some(1)),
];

/// The deepest an expression may nest (see the module docs).
pub const MAX_DEPTH: usize = 100;

/// A parsed expression.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    Num(f64),
    Var(String),
    Neg(Box<Expr>),
    Bin(Op, Box<Expr>, Box<Expr>),
    Call(String, Vec<Expr>),
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
}

/// A syntax error and the 1-based column it was found at.
#[derive(Clone, Debug, PartialEq)]
pub struct ParseError {
    pub column: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at column {}: {}", self.column, self.message)
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Num(f64),
    Name(String),
    Sym(char),
    End,
}

/// Parses `text` into an expression.
pub fn parse(text: &str) -> Result<Expr, ParseError> {
    let mut p = Parser { toks: lex(text)?, pos: 0, nesting: 0 };
    let (e, _) = p.sum()?;
    match p.peek() {
        Tok::End => Ok(e),
        t => Err(p.error(format!("unexpected {} after a complete expression", describe(t)))),
    }
}

/// Splits text into tokens, each with its 1-based column.
fn lex(text: &str) -> Result<Vec<(Tok, usize)>, ParseError> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let column = i + 1;
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) {
            let (num, next) = lex_number(&chars, i)?;
            out.push((Tok::Num(num), column));
            i = next;
        } else if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || matches!(chars[i], '_' | '.')) {
                i += 1;
            }
            let name: String = chars[start..i].iter().collect();
            if name.ends_with('.') || name.contains("..") {
                return Err(ParseError { column, message: format!("`{name}` is not a name: dots join names") });
            }
            out.push((Tok::Name(name), column));
        } else if "+-*/^(),".contains(c) {
            out.push((Tok::Sym(c), column));
            i += 1;
        } else {
            return Err(ParseError { column, message: format!("unexpected character `{c}`") });
        }
    }
    out.push((Tok::End, chars.len() + 1));
    Ok(out)
}

/// A decimal number with an optional exponent (`1e9`, `2.5E-3`), starting at `i`.
fn lex_number(chars: &[char], mut i: usize) -> Result<(f64, usize), ParseError> {
    let start = i;
    let digits = |i: &mut usize| {
        while *i < chars.len() && chars[*i].is_ascii_digit() {
            *i += 1;
        }
    };
    digits(&mut i);
    if chars.get(i) == Some(&'.') {
        i += 1;
        digits(&mut i);
    }
    if matches!(chars.get(i), Some('e' | 'E')) {
        let mut j = i + 1;
        if matches!(chars.get(j), Some('+' | '-')) {
            j += 1;
        }
        if chars.get(j).is_some_and(char::is_ascii_digit) {
            i = j;
            digits(&mut i);
        }
    }
    let text: String = chars[start..i].iter().collect();
    let num = text
        .parse::<f64>()
        .map_err(|_| ParseError { column: start + 1, message: format!("`{text}` is not a number") })?;
    Ok((num, i))
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Num(n) => format!("number {n}"),
        Tok::Name(n) => format!("name `{n}`"),
        Tok::Sym(c) => format!("`{c}`"),
        Tok::End => "end of expression".into(),
    }
}

struct Parser {
    toks: Vec<(Tok, usize)>,
    pos: usize,
    /// Levels of parentheses, signs, powers and calls being parsed.
    nesting: usize,
}

/// An expression and the depth of its tree (a number or a name is 1).
type Parsed = (Expr, usize);

impl Parser {
    fn peek(&self) -> &Tok {
        &self.toks[self.pos.min(self.toks.len() - 1)].0
    }

    fn next(&mut self) -> Tok {
        let t = self.peek().clone();
        if self.pos < self.toks.len() - 1 {
            self.pos += 1;
        }
        t
    }

    fn error(&self, message: String) -> ParseError {
        ParseError { column: self.toks[self.pos.min(self.toks.len() - 1)].1, message }
    }

    fn eat(&mut self, c: char) -> bool {
        if *self.peek() == Tok::Sym(c) {
            self.next();
            true
        } else {
            false
        }
    }

    fn too_deep(&self) -> ParseError {
        self.error(format!(
            "the expression nests more than {MAX_DEPTH} levels deep (parentheses, signs, `^`, calls and each \
             operator of a chain add one): split it into `let` names"
        ))
    }

    /// A node over children of depth `d`, refused when it would nest too deep.
    fn node(&self, e: Expr, d: usize) -> Result<Parsed, ParseError> {
        if d + 1 > MAX_DEPTH { Err(self.too_deep()) } else { Ok((e, d + 1)) }
    }

    /// Parses `inner` one nesting level down, so recursion stops at
    /// [`MAX_DEPTH`] before the stack runs out.
    fn nested(&mut self, inner: fn(&mut Parser) -> Result<Parsed, ParseError>) -> Result<Parsed, ParseError> {
        if self.nesting >= MAX_DEPTH {
            return Err(self.too_deep());
        }
        self.nesting += 1;
        let out = inner(self);
        self.nesting -= 1;
        out
    }

    fn sum(&mut self) -> Result<Parsed, ParseError> {
        let (mut left, mut depth) = self.product()?;
        loop {
            let op = match self.peek() {
                Tok::Sym('+') => Op::Add,
                Tok::Sym('-') => Op::Sub,
                _ => return Ok((left, depth)),
            };
            self.next();
            let (right, d) = self.product()?;
            (left, depth) = self.node(Expr::Bin(op, Box::new(left), Box::new(right)), depth.max(d))?;
        }
    }

    fn product(&mut self) -> Result<Parsed, ParseError> {
        let (mut left, mut depth) = self.unary()?;
        loop {
            let op = match self.peek() {
                Tok::Sym('*') => Op::Mul,
                Tok::Sym('/') => Op::Div,
                _ => return Ok((left, depth)),
            };
            self.next();
            let (right, d) = self.unary()?;
            (left, depth) = self.node(Expr::Bin(op, Box::new(left), Box::new(right)), depth.max(d))?;
        }
    }

    fn unary(&mut self) -> Result<Parsed, ParseError> {
        if self.eat('-') {
            let (e, d) = self.nested(Parser::unary)?;
            return self.node(Expr::Neg(Box::new(e)), d);
        }
        let (base, bd) = self.atom()?;
        if self.eat('^') {
            let (exp, ed) = self.nested(Parser::unary)?;
            return self.node(Expr::Bin(Op::Pow, Box::new(base), Box::new(exp)), bd.max(ed));
        }
        Ok((base, bd))
    }

    fn atom(&mut self) -> Result<Parsed, ParseError> {
        match self.peek().clone() {
            Tok::Num(n) => {
                self.next();
                Ok((Expr::Num(n), 1))
            }
            Tok::Name(name) => {
                self.next();
                if *self.peek() == Tok::Sym('(') { self.call(name) } else { Ok((Expr::Var(name), 1)) }
            }
            Tok::Sym('(') => {
                self.next();
                let e = self.nested(Parser::sum)?;
                if !self.eat(')') {
                    return Err(self.error(format!("expected `)`, found {}", describe(self.peek()))));
                }
                Ok(e)
            }
            t => Err(self.error(format!("expected a number, a name or `(`, found {}", describe(&t)))),
        }
    }

    /// `name(` has been seen; reads the arguments and checks the function.
    fn call(&mut self, name: String) -> Result<Parsed, ParseError> {
        let at = self.pos - 1;
        self.next(); // `(`
        let (first, mut depth) = self.nested(Parser::sum)?;
        let mut args = vec![first];
        while self.eat(',') {
            let (arg, d) = self.nested(Parser::sum)?;
            args.push(arg);
            depth = depth.max(d);
        }
        if !self.eat(')') {
            return Err(self.error(format!("expected `,` or `)`, found {}", describe(self.peek()))));
        }
        let column = self.toks[at].1;
        let Some((_, arity)) = FUNCTIONS.iter().find(|(f, _)| *f == name) else {
            let known: Vec<&str> = FUNCTIONS.iter().map(|(f, _)| *f).collect();
            return Err(ParseError {
                column,
                message: format!("unknown function `{name}`; known functions: {}", known.join(", ")),
            });
        };
        if let Some(n) = arity.filter(|&n| n != args.len()) {
            return Err(ParseError {
                column,
                message: format!("`{name}` takes {n} argument{}, given {}", if n == 1 { "" } else { "s" }, args.len()),
            });
        }
        self.node(Expr::Call(name, args), depth)
    }
}

impl Expr {
    /// Every variable name the expression reads, in order of appearance.
    pub fn variables(&self) -> Vec<&str> {
        let mut out = Vec::new();
        self.collect_vars(&mut out);
        out
    }

    fn collect_vars<'a>(&'a self, out: &mut Vec<&'a str>) {
        match self {
            Expr::Num(_) => {}
            Expr::Var(v) => out.push(v),
            Expr::Neg(e) => e.collect_vars(out),
            Expr::Bin(_, a, b) => {
                a.collect_vars(out);
                b.collect_vars(out);
            }
            Expr::Call(_, args) => args.iter().for_each(|a| a.collect_vars(out)),
        }
    }

    /// Evaluates with `var` resolving names. Arithmetic follows IEEE 754;
    /// a non-finite result is the caller's to reject.
    pub fn eval<E>(&self, var: &mut dyn FnMut(&str) -> Result<f64, E>) -> Result<f64, E> {
        Ok(match self {
            Expr::Num(n) => *n,
            Expr::Var(v) => var(v)?,
            Expr::Neg(e) => -e.eval(var)?,
            Expr::Bin(op, a, b) => {
                let (a, b) = (a.eval(var)?, b.eval(var)?);
                match op {
                    Op::Add => a + b,
                    Op::Sub => a - b,
                    Op::Mul => a * b,
                    Op::Div => a / b,
                    Op::Pow => libm::pow(a, b),
                }
            }
            Expr::Call(f, args) => {
                let xs = args.iter().map(|a| a.eval(var)).collect::<Result<Vec<f64>, E>>()?;
                apply(f, &xs)
            }
        })
    }
}

/// Applies a function the parser has already checked.
fn apply(f: &str, xs: &[f64]) -> f64 {
    let first = xs.first().copied().unwrap_or(f64::NAN);
    match f {
        "min" => xs.iter().copied().fold(f64::INFINITY, f64::min),
        "max" => xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        "ceil" => first.ceil(),
        "floor" => first.floor(),
        "round" => first.round(),
        "abs" => first.abs(),
        "sqrt" => libm::sqrt(first),
        _ => f64::NAN,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(text: &str) -> f64 {
        let vars = [("a", 2.0), ("model.kv_cache.bytes_per_token", 524_288.0), ("level", 8.0)];
        parse(text)
            .unwrap()
            .eval::<String>(&mut |name| {
                vars.iter().find(|(n, _)| *n == name).map(|(_, v)| *v).ok_or_else(|| name.to_string())
            })
            .unwrap()
    }

    fn err(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn precedence_is_the_usual_one() {
        assert_eq!(eval("1 + 2 * 3"), 7.0);
        assert_eq!(eval("(1 + 2) * 3"), 9.0);
        assert_eq!(eval("8 / 4 / 2"), 1.0);
        assert_eq!(eval("10 - 4 - 3"), 3.0);
        assert_eq!(eval("2 ^ 3 ^ 2"), 512.0);
        assert_eq!(eval("-2 ^ 2"), -4.0);
        assert_eq!(eval("2 ^ -1"), 0.5);
        assert_eq!(eval("--3"), 3.0);
    }

    #[test]
    fn numbers_take_decimals_and_exponents() {
        assert_eq!(eval("1e9"), 1e9);
        assert_eq!(eval("2.5E-3"), 0.0025);
        assert_eq!(eval(".5 + 0.25"), 0.75);
    }

    #[test]
    fn variables_may_be_key_paths() {
        assert_eq!(eval("model.kv_cache.bytes_per_token / 1024"), 512.0);
        assert_eq!(eval("level * a"), 16.0);
        let e = parse("(x + y.z) * x").unwrap();
        assert_eq!(e.variables(), vec!["x", "y.z", "x"]);
    }

    #[test]
    fn functions_compute_what_their_names_say() {
        assert_eq!(eval("min(3, level, 5)"), 3.0);
        assert_eq!(eval("max(3, level, 5)"), 8.0);
        assert_eq!(eval("ceil(2000 / 16)"), 125.0);
        assert_eq!(eval("floor(2614 / 125)"), 20.0);
        assert_eq!(eval("round(2.5) + abs(-1) + sqrt(16)"), 8.0);
    }

    #[test]
    fn syntax_errors_name_the_column() {
        assert_eq!(err("1 +"), "at column 4: expected a number, a name or `(`, found end of expression");
        assert_eq!(err("(1 + 2"), "at column 7: expected `)`, found end of expression");
        assert_eq!(err("1 2"), "at column 3: unexpected number 2 after a complete expression");
        assert_eq!(err("a % 2"), "at column 3: unexpected character `%`");
        assert!(err("sin(1)").starts_with("at column 1: unknown function `sin`; known functions: min, max"));
        assert_eq!(err("ceil(1, 2)"), "at column 1: `ceil` takes 1 argument, given 2");
        assert_eq!(err("a..b"), "at column 1: `a..b` is not a name: dots join names");
    }

    #[test]
    fn nesting_is_bounded_by_a_clear_error_not_the_stack() {
        let deep = "nests more than 100 levels deep";
        // Each of these used to recurse once per character: 100,000 deep.
        for text in [
            format!("{}1", "-".repeat(100_000)),
            format!("{}1{}", "(".repeat(100_000), ")".repeat(100_000)),
            format!("{}1", "2 ^ ".repeat(100_000)),
            format!("{}1{}", "abs(".repeat(100_000), ")".repeat(100_000)),
            format!("{}1", "1 + ".repeat(100_000)),
            format!("{}1", "2 * ".repeat(100_000)),
        ] {
            assert!(err(&text).contains(deep), "{}...: {}", &text[..8], err(&text));
        }
        // The limit, by hand: a sign over 99 signs over a number is 101 nodes.
        assert_eq!(eval(&format!("{}1", "-".repeat(99))), -1.0);
        assert!(err(&format!("{}1", "-".repeat(100))).contains(deep));
        // 99 additions make a tree 100 deep; 100 make it 101.
        assert_eq!(eval(&format!("{}1", "1 + ".repeat(99))), 100.0);
        assert!(err(&format!("{}1", "1 + ".repeat(100))).contains(deep));
        // Parentheses add nesting, not nodes: 100 pairs pass, 101 do not.
        assert_eq!(eval(&format!("{}1{}", "(".repeat(100), ")".repeat(100))), 1.0);
        assert!(err(&format!("{}1{}", "(".repeat(101), ")".repeat(101))).contains(deep));
    }

    #[test]
    fn unknown_variables_reach_the_resolver() {
        let e = parse("a + nope").unwrap();
        let r = e.eval::<String>(&mut |n| if n == "a" { Ok(1.0) } else { Err(format!("unknown {n}")) });
        assert_eq!(r, Err("unknown nope".to_string()));
    }
}
