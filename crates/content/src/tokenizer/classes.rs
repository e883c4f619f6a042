//! What kind of character each code point is, for the tokenizer.
//!
//! The pre-tokenizer rules of GPT-style tokenizers are written with Unicode
//! properties (`\p{L}`, `\p{N}`, `\s`). std has no general-category lookup,
//! so the table is built once from regex-syntax's own Unicode tables (the
//! same data the `regex` crate matches with): each property is parsed into a
//! class of code-point ranges and the classes are merged into one sorted
//! table. The Basic Multilingual Plane, where nearly all text lives, is
//! expanded into a direct 64 KiB array; the rare code points above it are
//! found by binary search.

use std::sync::OnceLock;

use regex_syntax::hir::{Class as HirClass, HirKind};

/// The kind of a character. When a code point has several properties the
/// first in this order wins: whitespace, CJK, digit, letter, mark, other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// `\s` (Unicode White_Space).
    Space,
    /// Han, Hiragana, Katakana or Hangul script: one character a token.
    Cjk,
    /// `\p{N}`: numbers go in groups of up to three.
    Digit,
    /// `\p{L}` outside the CJK scripts: runs of letters.
    Letter,
    /// `\p{M}` (combining marks): they stay with the letter or CJK
    /// character they follow; elsewhere they count as punctuation.
    Mark,
    /// Everything else: punctuation, symbols, emoji, controls.
    Other,
}

impl Class {
    /// The class as a one-bit set, for testing membership in several.
    #[inline]
    pub fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// Code points below this have a direct entry.
const DIRECT: usize = 0x10000;

/// The merged table: the BMP directly, the rest as sorted, disjoint ranges.
pub struct Table {
    direct: Box<[Class]>,
    /// `(first, last, class)`, sorted by `first`; code points in no range
    /// are `Class::Other`.
    ranges: Vec<(u32, u32, Class)>,
}

impl Table {
    /// The class of `c`.
    #[inline(always)]
    pub fn of(&self, c: char) -> Class {
        let cp = c as u32;
        if let Some(&class) = self.direct.get(cp as usize) {
            return class;
        }
        let i = self.ranges.partition_point(|&(first, _, _)| first <= cp);
        match i.checked_sub(1).map(|i| self.ranges[i]) {
            Some((_, last, class)) if cp <= last => class,
            _ => Class::Other,
        }
    }
}

/// The table, built on first use.
pub fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(build)
}

/// The properties, in order of precedence.
const SOURCES: [(&str, Class); 5] = [
    (r"\s", Class::Space),
    (r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}]", Class::Cjk),
    (r"\p{N}", Class::Digit),
    (r"\p{L}", Class::Letter),
    (r"\p{M}", Class::Mark),
];

fn build() -> Table {
    let sets: Vec<(Vec<(u32, u32)>, Class)> = SOURCES.iter().map(|&(p, class)| (ranges_of(p), class)).collect();
    let class_of = |cp: u32| sets.iter().find(|(r, _)| contains(r, cp)).map_or(Class::Other, |&(_, class)| class);
    // Every range start and every first code point after a range end cuts
    // the code space into segments of one class each.
    let mut cuts: Vec<u32> = sets.iter().flat_map(|(r, _)| r.iter().flat_map(|&(a, b)| [a, b + 1])).collect();
    cuts.push(0);
    cuts.sort_unstable();
    cuts.dedup();
    let mut ranges: Vec<(u32, u32, Class)> = Vec::new();
    for (i, &start) in cuts.iter().enumerate() {
        let end = cuts.get(i + 1).map_or(char::MAX as u32, |next| next - 1);
        let class = class_of(start);
        match ranges.last_mut() {
            Some(last) if last.2 == class && last.1 + 1 == start => last.1 = end,
            _ => ranges.push((start, end, class)),
        }
    }
    ranges.retain(|r| r.2 != Class::Other);
    let mut direct = vec![Class::Other; DIRECT].into_boxed_slice();
    for &(first, last, class) in &ranges {
        let (first, last) = (first as usize, (last as usize).min(DIRECT - 1));
        if first < DIRECT {
            direct[first..=last].fill(class);
        }
    }
    Table { direct, ranges }
}

/// The code-point ranges of a one-class regex.
fn ranges_of(pattern: &str) -> Vec<(u32, u32)> {
    // invariant: SOURCES are fixed, valid Unicode classes (a unit test parses them all).
    let hir = regex_syntax::parse(pattern).expect("built-in Unicode class parses");
    match hir.kind() {
        HirKind::Class(HirClass::Unicode(c)) => c.ranges().iter().map(|r| (r.start() as u32, r.end() as u32)).collect(),
        // invariant: every source above is a Unicode class, never a literal or bytes.
        other => unreachable!("{pattern} is not a Unicode class: {other:?}"),
    }
}

fn contains(ranges: &[(u32, u32)], cp: u32) -> bool {
    let i = ranges.partition_point(|&(first, _)| first <= cp);
    i > 0 && cp <= ranges[i - 1].1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_characters_have_the_expected_classes() {
        let t = table();
        assert_eq!(t.of(' '), Class::Space);
        assert_eq!(t.of('\n'), Class::Space);
        assert_eq!(t.of('\x0b'), Class::Space);
        assert_eq!(t.of('a'), Class::Letter);
        assert_eq!(t.of('Z'), Class::Letter);
        assert_eq!(t.of('7'), Class::Digit);
        assert_eq!(t.of('\''), Class::Other);
        assert_eq!(t.of('_'), Class::Other);
        assert_eq!(t.of('\0'), Class::Other);
    }

    #[test]
    fn non_ascii_characters_follow_unicode_properties() {
        let t = table();
        assert_eq!(t.of('é'), Class::Letter);
        assert_eq!(t.of('Ж'), Class::Letter);
        assert_eq!(t.of('\u{301}'), Class::Mark);
        assert_eq!(t.of('\u{94d}'), Class::Mark, "Devanagari virama");
        assert_eq!(t.of('٣'), Class::Digit, "Arabic-Indic three");
        assert_eq!(t.of('½'), Class::Digit);
        assert_eq!(t.of('\u{3000}'), Class::Space, "ideographic space");
        assert_eq!(t.of('\u{a0}'), Class::Space, "no-break space");
        assert_eq!(t.of('中'), Class::Cjk);
        assert_eq!(t.of('の'), Class::Cjk);
        assert_eq!(t.of('カ'), Class::Cjk);
        assert_eq!(t.of('한'), Class::Cjk);
        assert_eq!(t.of('\u{20000}'), Class::Cjk, "CJK extension B");
        assert_eq!(t.of('。'), Class::Other);
        assert_eq!(t.of('😀'), Class::Other);
        assert_eq!(t.of(char::MAX), Class::Other);
    }

    #[test]
    fn the_merged_table_agrees_with_the_properties_on_every_code_point() {
        let sets: Vec<(Vec<(u32, u32)>, Class)> = SOURCES.iter().map(|&(p, c)| (ranges_of(p), c)).collect();
        let t = table();
        for c in (0..=char::MAX as u32).step_by(7).filter_map(char::from_u32) {
            let want = sets.iter().find(|(r, _)| contains(r, c as u32)).map_or(Class::Other, |&(_, k)| k);
            assert_eq!(t.of(c), want, "U+{:04X}", c as u32);
        }
    }
}
