//! Strings a regular expression matches in full, generated from its
//! syntax tree (`regex_syntax`'s HIR).
//!
//! A concatenation writes each part; an alternation picks a branch; a
//! repetition takes its minimum plus up to three more (never past its
//! maximum); a class picks a character, printable ASCII when the class has
//! any (so `.` and `\w` give plain text), else any of its characters.
//! Anchors and word boundaries write nothing: a pattern whose match depends
//! on a look-around (`\b` between two word characters) may come out
//! unmatched, the one case not covered. A match longer than
//! [`Limits::TEXT`] bytes (`a{100000}{100000}`) is refused.

use regex_syntax::hir::{Class, Hir, HirKind};

use super::{Limits, Refused, Rng};

/// Parses a pattern as vLLM's backends read it (Unicode, no flags).
pub fn parse(re: &str) -> Result<Hir, Refused> {
    regex_syntax::Parser::new()
        .parse(re)
        .map_err(|e| Refused(format!("Failed to transform regex into a grammar: {}", one_line(&e.to_string()))))
}

/// regex_syntax's multi-line error (the pattern, a caret, the reason) as
/// one line: its last line, the reason.
fn one_line(msg: &str) -> String {
    let reason = msg.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or(msg);
    reason.trim().trim_start_matches("error: ").to_string()
}

/// A string `hir` matches in full.
pub fn generate(hir: &Hir, rng: &mut Rng) -> Result<String, Refused> {
    let mut out = String::new();
    write(hir, rng, &mut out)?;
    Ok(out)
}

fn too_long() -> Refused {
    Refused(format!("the regex only matches strings longer than llmsim generates ({} bytes)", Limits::TEXT))
}

fn write(hir: &Hir, rng: &mut Rng, out: &mut String) -> Result<(), Refused> {
    if out.len() > Limits::TEXT {
        return Err(too_long());
    }
    match hir.kind() {
        HirKind::Empty | HirKind::Look(_) => {}
        HirKind::Literal(lit) => out.push_str(&String::from_utf8_lossy(&lit.0)),
        HirKind::Class(class) => out.push(pick(class, rng)?),
        HirKind::Repetition(rep) => {
            let extra_max = rep.max.map_or(3, |m| m.saturating_sub(rep.min).min(3));
            let n = u64::from(rep.min) + rng.below(extra_max as usize + 1) as u64;
            if n > Limits::TEXT as u64 {
                return Err(too_long());
            }
            for _ in 0..n {
                write(&rep.sub, rng, out)?;
                if out.len() > Limits::TEXT {
                    return Err(too_long());
                }
            }
        }
        HirKind::Capture(cap) => write(&cap.sub, rng, out)?,
        HirKind::Concat(parts) => {
            for p in parts {
                write(p, rng, out)?;
            }
        }
        HirKind::Alternation(branches) => write(&branches[rng.below(branches.len())], rng, out)?,
    }
    Ok(())
}

/// A character of `class`: printable ASCII when it has some.
fn pick(class: &Class, rng: &mut Rng) -> Result<char, Refused> {
    let ranges: Vec<(u32, u32)> = match class {
        Class::Unicode(c) => c.ranges().iter().map(|r| (r.start() as u32, r.end() as u32)).collect(),
        Class::Bytes(c) => c
            .ranges()
            .iter()
            .filter(|r| r.start() < 0x80)
            .map(|r| (u32::from(r.start()), u32::from(r.end().min(0x7F))))
            .collect(),
    };
    let printable: Vec<(u32, u32)> =
        ranges.iter().map(|&(a, b)| (a.max(0x20), b.min(0x7E))).filter(|&(a, b)| a <= b).collect();
    let from = if printable.is_empty() { &ranges } else { &printable };
    let total: u64 = from.iter().map(|&(a, b)| u64::from(b - a) + 1).sum();
    if total == 0 {
        return Err(Refused("the regex has a character class that matches no character llmsim can write".into()));
    }
    let mut k = rng.draw() % total;
    for &(a, b) in from {
        let size = u64::from(b - a) + 1;
        if k < size {
            // Ranges from regex_syntax skip the surrogates, so this is a char.
            return char::from_u32(a + k as u32).ok_or_else(|| Refused("the regex's class has no character".into()));
        }
        k -= size;
    }
    Err(Refused("the regex's class has no character".into()))
}
