//! The documentation resolves inside the repository: every relative link in
//! `docs/` and the README (file and `#anchor`) points at something that
//! exists, every `docs/...` page the code cites exists, and nothing cites
//! the design notes that never were in the repository.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Markdown files whose links are checked, each with the directory its
/// links are relative to.
fn pages() -> Vec<(PathBuf, PathBuf)> {
    let mut out = vec![(root().join("README.md"), root())];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/ exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    for p in docs {
        out.push((p, root().join("docs")));
    }
    out
}

/// Link targets outside code: `[text](target)` and `![alt](target)`.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fence = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
            continue;
        }
        if fence {
            continue;
        }
        // Inline code spans hold examples, not links.
        let plain: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = plain.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            out.push((n + 1, after[..end].to_string()));
            rest = &after[end..];
        }
    }
    out
}

/// GitHub's anchor for a heading: lowercase, punctuation dropped, spaces
/// to hyphens; a repeated heading gets `-1`, `-2`, ...
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
            continue;
        }
        let Some(title) = line.strip_prefix('#').filter(|_| !fence) else { continue };
        let title = title.trim_start_matches('#');
        if !title.starts_with(' ') {
            continue;
        }
        let slug: String = title
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut candidate = slug.clone();
        let mut k = 0;
        while out.contains(&candidate) {
            k += 1;
            candidate = format!("{slug}-{k}");
        }
        out.insert(candidate);
    }
    out
}

fn check_link(page: &Path, base: &Path, line: usize, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (file, anchor) = match target.split_once('#') {
        Some((f, a)) => (f, Some(a)),
        None => (target, None),
    };
    let path = if file.is_empty() { page.to_path_buf() } else { base.join(file) };
    let shown = format!("{}:{line}: `{target}`", page.strip_prefix(root()).unwrap_or(page).display());
    if !path.exists() {
        return Some(format!("{shown}: {} does not exist", path.display()));
    }
    let anchor = anchor?;
    if path.extension().is_none_or(|e| e != "md") {
        return None;
    }
    let text = std::fs::read_to_string(&path).unwrap();
    (!anchors(&text).contains(anchor)).then(|| format!("{shown}: no heading `#{anchor}` in {}", path.display()))
}

#[test]
fn every_relative_link_in_the_docs_and_the_readme_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for (page, base) in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (line, target) in links(&text) {
            checked += 1;
            broken.extend(check_link(&page, &base, line, &target));
        }
    }
    assert!(checked > 100, "only {checked} links found: is the link parser broken?");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// Every text file of the repository that code or docs live in.
fn sources() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|e| ["rs", "yml", "md", "toml"].contains(&e.to_str().unwrap())) {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    for d in ["src", "tests", "benches", "scenarios", "hardware", "docs"] {
        walk(&root().join(d), &mut out);
    }
    out.push(root().join("README.md"));
    out.push(root().join("Cargo.toml"));
    out
}

#[test]
fn every_docs_page_the_code_cites_exists() {
    let mut missing = Vec::new();
    let mut cited = 0;
    for file in sources() {
        let text = std::fs::read_to_string(&file).unwrap();
        let mut rest = text.as_str();
        while let Some(i) = rest.find("docs/") {
            let start = text.len() - rest.len() + i;
            let tail = &rest[i..];
            let len = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '-' | '_')))
                .unwrap_or(tail.len());
            let cite = tail[..len].trim_end_matches('.');
            rest = &tail[len..];
            // `mydocs/x.md` and the like are not citations of a page.
            if start > 0 && text.as_bytes()[start - 1].is_ascii_alphanumeric() {
                continue;
            }
            if cite.ends_with(".md") {
                cited += 1;
                if !root().join(cite).exists() {
                    missing.push(format!("{}: {cite}", file.strip_prefix(root()).unwrap().display()));
                }
            }
        }
    }
    assert!(cited > 50, "only {cited} citations found: is the scan broken?");
    assert!(missing.is_empty(), "cited pages that do not exist:\n{}", missing.join("\n"));
}

#[test]
fn nothing_cites_notes_outside_the_repository() {
    // Spelled in pieces so this file does not match itself.
    let gone = [
        ["ENGINE", ".md"].concat(),
        ["SCENARIO", ".md"].concat(),
        ["DEPLOYMENT", ".md"].concat(),
        ["BENCH-FORMATS", ".md"].concat(),
        ["research", " notes"].concat(),
        ["the issue", " list"].concat(),
    ];
    let mut found = Vec::new();
    for file in sources() {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            for g in &gone {
                if line.contains(g.as_str()) {
                    found.push(format!("{}:{}: {g}", file.strip_prefix(root()).unwrap().display(), n + 1));
                }
            }
        }
    }
    assert!(found.is_empty(), "citations of notes that are not in the repository:\n{}", found.join("\n"));
}

#[test]
fn the_link_checker_finds_a_broken_link_and_a_missing_anchor() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("a.md");
    std::fs::write(&page, "# Title\n\n## A `b` c, d\n\nsee [x](a.md#a-b-c-d) [y](nope.md) [z](#title) [w](#missing)\n")
        .unwrap();
    let text = std::fs::read_to_string(&page).unwrap();
    let results: Vec<Option<String>> =
        links(&text).into_iter().map(|(l, t)| check_link(&page, dir.path(), l, &t)).collect();
    assert_eq!(results.len(), 4);
    assert!(results[0].is_none(), "{:?}", results[0]);
    assert!(results[1].as_deref().is_some_and(|m| m.contains("does not exist")));
    assert!(results[2].is_none(), "{:?}", results[2]);
    assert!(results[3].as_deref().is_some_and(|m| m.contains("no heading `#missing`")));
}
