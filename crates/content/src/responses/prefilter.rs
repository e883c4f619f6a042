//! A cheap test that lets most prompts skip a regex entry.
//!
//! At load, each regex is analysed for a literal that every match must
//! contain (the longest one found); a prompt without it cannot match, and a
//! substring search is much cheaper than running the regex. The analysis is
//! conservative: when in doubt it finds nothing, and the regex always runs.
//!
//! Case-insensitive regexes (`(?i)`) have no plain literals, only classes
//! like `[Ww]`. A class all of whose members lowercase to the same single
//! character counts as that character, "folded": such a literal is searched
//! for in the prompt lowercased character by character. That is sound
//! because any character the class matches lowercases to the literal's
//! character, and lowercasing each character separately keeps a matching
//! substring contiguous. Classes that fail the test (`(?i)σ`, which also
//! matches `ς`) simply end the literal.

use regex_syntax::hir::{Class, Hir, HirKind};

/// A literal every match contains.
#[derive(Clone, Debug, PartialEq)]
pub struct Prefilter {
    needle: String,
    /// True when `needle` is lowercase and must be searched for in the
    /// lowercased prompt.
    folded: bool,
}

/// Classes larger than this are never a single folded character.
const MAX_FOLD_CLASS: usize = 8;

impl Prefilter {
    /// The prefilter of a regex, if its syntax tree requires a literal.
    pub fn of(hir: &Hir) -> Option<Prefilter> {
        required(hir).filter(|p| !p.needle.is_empty())
    }

    /// False only when the prompt cannot match. `lower` gives the prompt
    /// lowercased (see [`lowercase`]); it is called only for folded needles.
    pub fn admits<'a>(&self, prompt: &str, lower: impl FnOnce() -> &'a str) -> bool {
        if self.folded { lower().contains(&self.needle) } else { prompt.contains(&self.needle) }
    }

    #[cfg(test)]
    pub fn needle(&self) -> &str {
        &self.needle
    }

    #[cfg(test)]
    pub fn is_folded(&self) -> bool {
        self.folded
    }
}

/// `text` lowercased one character at a time (no context-dependent rules,
/// so the final-sigma rule of `str::to_lowercase` does not apply), with the
/// long s `ſ` as `s`: `(?i)s` matches it, and without this every folded
/// literal would end at an `s`.
pub fn lowercase(text: &str) -> String {
    text.chars().flat_map(fold).collect()
}

fn fold(c: char) -> std::char::ToLowercase {
    if c == 'ſ' { 's'.to_lowercase() } else { c.to_lowercase() }
}

/// One character of a literal: as written, or any of a case-folded class.
type Piece = (char, bool);

/// A literal that every match of `hir` contains.
fn required(hir: &Hir) -> Option<Prefilter> {
    match hir.kind() {
        HirKind::Capture(c) => required(&c.sub),
        HirKind::Repetition(r) if r.min >= 1 => required(&r.sub),
        HirKind::Concat(subs) => concat(subs),
        _ => pieces(hir).and_then(|p| literal(&p)),
    }
}

/// The best literal of a concatenation: adjacent literal parts joined into
/// runs, and whatever the other parts require.
fn concat(subs: &[Hir]) -> Option<Prefilter> {
    let mut best = None;
    let mut run: Vec<Piece> = Vec::new();
    for sub in subs {
        match pieces(sub) {
            Some(p) => run.extend(p),
            None => {
                best = better(best, literal(&run));
                run.clear();
                best = better(best, required(sub));
            }
        }
    }
    better(best, literal(&run))
}

/// The characters of a part that matches exactly one string (up to case),
/// or None. Zero-width parts (`^`, `\b`) match the empty string.
fn pieces(hir: &Hir) -> Option<Vec<Piece>> {
    match hir.kind() {
        HirKind::Empty | HirKind::Look(_) => Some(Vec::new()),
        HirKind::Literal(lit) => std::str::from_utf8(&lit.0).ok().map(|s| s.chars().map(|c| (c, false)).collect()),
        HirKind::Class(Class::Unicode(class)) => {
            let mut members = class.ranges().iter().flat_map(|r| r.start()..=r.end());
            let size: usize = class.ranges().iter().map(|r| r.end() as usize - r.start() as usize + 1).sum();
            if size > MAX_FOLD_CLASS {
                return None;
            }
            let first = single_lowercase(members.next()?)?;
            members.all(|c| single_lowercase(c) == Some(first)).then(|| vec![(first, true)])
        }
        _ => None,
    }
}

fn single_lowercase(c: char) -> Option<char> {
    let mut lower = fold(c);
    match (lower.next(), lower.next()) {
        (Some(l), None) => Some(l),
        _ => None,
    }
}

/// The literal a run of pieces spells, lowercased if any piece is folded.
fn literal(run: &[Piece]) -> Option<Prefilter> {
    if run.is_empty() {
        return None;
    }
    let folded = run.iter().any(|&(_, f)| f);
    let needle =
        if folded { run.iter().flat_map(|&(c, _)| fold(c)).collect() } else { run.iter().map(|&(c, _)| c).collect() };
    Some(Prefilter { needle, folded })
}

/// The longer literal; on a tie the case-sensitive one, then the first.
fn better(a: Option<Prefilter>, b: Option<Prefilter>) -> Option<Prefilter> {
    match (a, b) {
        (Some(a), Some(b)) => {
            let key = |p: &Prefilter| (p.needle.chars().count(), !p.folded);
            Some(if key(&b) > key(&a) { b } else { a })
        }
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use rand::{RngExt, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;

    fn of(pattern: &str) -> Option<(String, bool)> {
        Prefilter::of(&regex_syntax::parse(pattern).unwrap()).map(|p| (p.needle, p.folded))
    }

    fn exact(s: &str) -> Option<(String, bool)> {
        Some((s.to_string(), false))
    }

    fn folded(s: &str) -> Option<(String, bool)> {
        Some((s.to_string(), true))
    }

    #[test]
    fn the_longest_required_literal_is_found() {
        assert_eq!(of(r"^hello (world|there)$"), exact("hello "));
        assert_eq!(of(r"weather in (?P<city>\w+)"), exact("weather in "));
        assert_eq!(of(r"(?:ab)+cd"), exact("ab"), "ties go to the first");
        assert_eq!(of(r"x(?:abcdef)+y"), exact("abcdef"));
        assert_eq!(of(r"(?P<q>refund please)"), exact("refund please"));
        assert_eq!(of(r"\bfoo\b"), exact("foo"));
        assert_eq!(of(r"price: \$\d+"), exact("price: $"));
    }

    #[test]
    fn case_insensitive_regexes_get_a_folded_literal() {
        assert_eq!(of(r"(?i)weather in (?P<city>\w+)"), folded("weather in "));
        assert_eq!(of(r"(?i)Hello"), folded("hello"));
        assert_eq!(of(r"(?i)straße"), folded("straße"), "(?i)s also matches ſ, folded to s");
        assert_eq!(of(r"(?i)12 apples"), folded("12 apples"));
    }

    #[test]
    fn a_class_whose_members_lowercase_differently_ends_the_literal() {
        // (?i)σ also matches ς, whose lowercase is itself.
        assert_eq!(of(r"(?i)abσcd"), folded("ab"));
    }

    #[test]
    fn regexes_without_a_required_literal_get_no_prefilter() {
        assert_eq!(of(r"\d+"), None);
        assert_eq!(of(r"cat|dog"), None);
        assert_eq!(of(r"(?:hello)?"), None);
        assert_eq!(of(r"[a-z]+"), None);
        assert_eq!(of(r""), None);
    }

    #[test]
    fn folded_literals_admit_every_spelling_the_regex_matches() {
        for (pattern, prompt) in [
            (r"(?i)straße", "ſTRAẞE"),
            (r"(?i)kelvin", "\u{212a}ELVIN"),
            (r"(?i)weather in", "WEATHER IN"),
            (r"(?i)abσcd", "ABςCD"),
            (r"(?i)İstanbul", "İSTANBUL"),
        ] {
            assert!(regex::Regex::new(pattern).unwrap().is_match(prompt), "{pattern} should match {prompt}");
            let pre = Prefilter::of(&regex_syntax::parse(pattern).unwrap()).unwrap();
            let lower = lowercase(prompt);
            assert!(pre.admits(prompt, || &lower), "{pattern}: {pre:?} rejects {prompt:?}");
        }
    }

    /// A regex that matches always passes its prefilter, over random prompts
    /// built from the regexes' own pieces in random case.
    #[test]
    fn a_prefilter_never_rejects_a_prompt_its_regex_matches() {
        let patterns = [
            r"(?i)weather in (?P<city>\w+)",
            r"^hello (world|there)$",
            r"(?i)ΣΟΦΙΑ σοφία",
            r"(?i)stra(?:ße|sse)",
            r"(?i)kelvins? \d+k",
            r"(?:ab)+cd",
            r"(?i)İstanbul",
            r"price: \$\d+",
        ];
        let pieces = [
            "weather",
            " in ",
            "Paris",
            "hello",
            "world",
            "there",
            "ΣΟΦΙΑ",
            "σοφία",
            "σοφιας",
            " ",
            "straße",
            "STRASSE",
            "kelvin",
            "kelvins",
            "\u{212a}",
            "s",
            "stra",
            "tra",
            " 42k",
            "K",
            "k",
            "ſ",
            "42",
            "ab",
            "cd",
            "İstanbul",
            "istanbul",
            "price: $",
            "7",
            "x",
        ];
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut matched = 0;
        for p in patterns {
            let re = regex::Regex::new(p).unwrap();
            let Some(pre) = Prefilter::of(&regex_syntax::parse(p).unwrap()) else { continue };
            for _ in 0..3_000 {
                let prompt: String = (0..rng.random_range(1..8))
                    .map(|_| {
                        let s = pieces[rng.random_range(0..pieces.len())];
                        match rng.random_range(0..3) {
                            0 => s.to_uppercase(),
                            1 => s.to_lowercase(),
                            _ => s.to_string(),
                        }
                    })
                    .collect();
                if re.is_match(&prompt) {
                    matched += 1;
                    let lower = lowercase(&prompt);
                    assert!(pre.admits(&prompt, || &lower), "{p} matches {prompt:?} but {pre:?} rejects it");
                }
            }
        }
        assert!(matched > 500, "too few matching prompts to mean anything: {matched}");
    }
}
