//! Answer templates: `{name}` is replaced by a named group of the entry's
//! regex, `{last_user_message}` or `{model}`; `{{` and `}}` are literal
//! braces. Templates are parsed once at load, so a misspelt variable or a
//! stray brace is a load error, never a surprise in a response.

use regex::{Captures, Regex};

/// Variables every template may use, besides its regex's named groups.
pub const LAST_USER_MESSAGE: &str = "last_user_message";
pub const MODEL: &str = "model";

/// A parsed template: literal text and variables, in order.
#[derive(Clone, Debug, PartialEq)]
pub struct Template {
    parts: Vec<Part>,
}

#[derive(Clone, Debug, PartialEq)]
enum Part {
    Text(String),
    Var(Var),
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Var {
    /// A capture group of the entry's regex, by index.
    Group(usize),
    LastUserMessage,
    Model,
}

/// The values a template is rendered with.
pub struct Vars<'a> {
    /// The entry's regex match, for entries that have a regex.
    pub groups: Option<&'a Captures<'a>>,
    /// The last user message, whitespace-trimmed.
    pub message: &'a str,
    pub model: &'a str,
}

/// What is wrong with a template, and how to write it instead.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TemplateError {
    #[error("a `}}` that closes nothing: write `}}}}` for a literal brace")]
    StrayClose,
    /// A `{` with no `}` after it; `after` is the text that follows.
    #[error("the `{{` before `{after}` is never closed: write `{{{{` for a literal brace")]
    Unclosed { after: String },
    #[error(
        "`{{{name}}}` is not a variable: variables look like {{model}}; write `{{{{` and `}}}}` for literal braces"
    )]
    NotAVariable { name: String },
    /// `known` lists every variable the template may use; `hint` says
    /// why a group name is missing, if one is.
    #[error("`{{{name}}}` is not a known variable; known: {known}{hint}")]
    Unknown { name: String, known: String, hint: &'static str },
}

impl Template {
    /// Parses `src`. `regex` is the entry's regex, whose named groups the
    /// template may use. The error says what is wrong and how to fix it.
    pub fn parse(src: &str, regex: Option<&Regex>) -> Result<Template, TemplateError> {
        let mut parts = Vec::new();
        let mut text = String::new();
        let mut rest = src;
        while let Some(k) = rest.find(['{', '}']) {
            text.push_str(&rest[..k]);
            let brace = rest.as_bytes()[k];
            let after = &rest[k + 1..];
            match (brace, after.as_bytes().first()) {
                (b'{', Some(b'{')) | (b'}', Some(b'}')) => {
                    text.push(brace as char);
                    rest = &after[1..];
                }
                (b'}', _) => return Err(TemplateError::StrayClose),
                _ => {
                    let end = after.find('}').ok_or_else(|| TemplateError::Unclosed { after: preview(after) })?;
                    let var = resolve(&after[..end], regex)?;
                    if !text.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut text)));
                    }
                    parts.push(Part::Var(var));
                    rest = &after[end + 1..];
                }
            }
        }
        text.push_str(rest);
        if !text.is_empty() {
            parts.push(Part::Text(text));
        }
        Ok(Template { parts })
    }

    /// Appends the rendered template to `out`. A named group that took no
    /// part in the match renders as nothing.
    pub fn render(&self, vars: &Vars<'_>, out: &mut String) {
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Var(Var::LastUserMessage) => out.push_str(vars.message),
                Part::Var(Var::Model) => out.push_str(vars.model),
                Part::Var(Var::Group(i)) => {
                    out.push_str(vars.groups.and_then(|c| c.get(*i)).map_or("", |m| m.as_str()));
                }
            }
        }
    }
}

fn resolve(name: &str, regex: Option<&Regex>) -> Result<Var, TemplateError> {
    let is_name = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !is_name {
        return Err(TemplateError::NotAVariable { name: name.to_string() });
    }
    match name {
        LAST_USER_MESSAGE => return Ok(Var::LastUserMessage),
        MODEL => return Ok(Var::Model),
        _ => {}
    }
    let group = regex.and_then(|r| r.capture_names().position(|n| n == Some(name)));
    group.map(Var::Group).ok_or_else(|| unknown(name, regex))
}

fn unknown(name: &str, regex: Option<&Regex>) -> TemplateError {
    let groups: Vec<String> =
        regex.map_or_else(Vec::new, |r| r.capture_names().flatten().map(|n| format!("{{{n}}}")).collect());
    let mut known = groups.clone();
    known.extend([format!("{{{LAST_USER_MESSAGE}}}"), format!("{{{MODEL}}}")]);
    let hint = match regex {
        None => " (named groups need a `regex` matcher)",
        Some(_) if groups.is_empty() => " (the regex has no named groups; name one like (?P<city>\\w+))",
        Some(_) => "",
    };
    TemplateError::Unknown { name: name.to_string(), known: known.join(", "), hint }
}

/// The first few characters of `s`, for messages.
fn preview(s: &str) -> String {
    let short: String = s.chars().take(20).collect();
    if short.len() < s.len() { format!("{short}...") } else { short }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(src: &str, regex: Option<&Regex>, message: &str) -> String {
        let t = Template::parse(src, regex).unwrap();
        let caps = regex.and_then(|r| r.captures(message));
        let mut out = String::new();
        t.render(&Vars { groups: caps.as_ref(), message, model: "m1" }, &mut out);
        out
    }

    #[test]
    fn variables_are_replaced_and_doubled_braces_are_literal() {
        let re = Regex::new(r"in (?P<city>\w+)(?: on (?P<day>\w+))?").unwrap();
        assert_eq!(
            render("{city}! {model} {{ok}} {last_user_message}", Some(&re), "in Paris"),
            "Paris! m1 {ok} in Paris"
        );
        assert_eq!(render("[{day}]", Some(&re), "in Rome"), "[]", "an unmatched group is empty");
        assert_eq!(render("plain", None, "x"), "plain");
        assert_eq!(render("", None, "x"), "");
    }

    #[test]
    fn unknown_variables_are_errors_that_list_the_known_ones() {
        let re = Regex::new(r"(?P<city>\w+)").unwrap();
        let e = Template::parse("{cty}", Some(&re)).unwrap_err().to_string();
        assert!(e.contains("`{cty}` is not a known variable; known: {city}, {last_user_message}, {model}"), "{e}");
        let e = Template::parse("{city}", None).unwrap_err().to_string();
        assert!(e.contains("named groups need a `regex` matcher"), "{e}");
        let e = Template::parse("{1}", Some(&Regex::new("(a)").unwrap())).unwrap_err().to_string();
        assert!(e.contains("the regex has no named groups"), "{e}");
    }

    #[test]
    fn stray_braces_are_errors_that_say_how_to_write_a_literal_brace() {
        let e = Template::parse("json: {\"a\": 1}", None).unwrap_err().to_string();
        assert!(e.contains("is not a variable") && e.contains("`{{`"), "{e}");
        let e = Template::parse("open { never closed", None).unwrap_err().to_string();
        assert!(e.contains("never closed"), "{e}");
        let e = Template::parse("close }", None).unwrap_err().to_string();
        assert!(e.contains("`}}`"), "{e}");
    }
}
