//! One lookup for the three kinds of file a scenario names instead of
//! spelling out: hardware profiles (`hardware: NAME`), models (`model:
//! NAME`) and calibrations (`calibration: NAME`).
//!
//! A name is looked up as `FOLDER/NAME.yml` in the scenario's directory and
//! each directory above it, first as the scenario's path gives them (so a
//! relative path stays relative in messages), then above that from the
//! canonical path; then among the files compiled into the binary (copies of
//! the repository's), so the binary works from anywhere. A name that is not
//! found gets the nearest known name as a hint and the list of every known
//! one; each kind words that message itself.

use std::path::{Path, PathBuf};

use super::ConfigError;
use crate::input::{Kind, read_text};

/// One kind of named file.
pub struct Shelf {
    /// The folder looked for in each directory: `hardware`, `models`,
    /// `hardware/calibrations`.
    pub folder: &'static str,
    /// Where the built-in copies come from in the repository, as messages
    /// name them (`<built-in hardware/h200.yml>`).
    pub shipped_from: &'static str,
    /// The built-in files, by name.
    pub builtin: &'static [(&'static str, &'static str)],
    /// The input limit a found file is read under.
    pub kind: Kind,
    /// Whether a name may hold a `.` (`qwen2.5-7b`); calibration names may
    /// not, since a reference ending in `.yml` is a path.
    pub dots: bool,
}

/// A named file, found.
pub struct Found {
    pub file: PathBuf,
    pub text: String,
}

/// Why a name was not found: the nearest known name as a hint (empty, or
/// ` (did you mean `x`?)`) and every known name.
pub struct Unknown {
    pub hint: String,
    pub known: Vec<String>,
}

impl Shelf {
    /// Finds `name` for the scenario in `scenario_file`: the file, or why
    /// not. A file that is found but cannot be read is an error.
    pub fn find(&self, name: &str, scenario_file: &Path) -> Result<Result<Found, Unknown>, ConfigError> {
        let valid = !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_') || (self.dots && c == '.'));
        if valid {
            for dir in self.search_dirs(scenario_file) {
                let file = dir.join(format!("{name}.yml"));
                if super::is_a_file(&file) {
                    let text = read_text(self.kind, &file)?;
                    return Ok(Ok(Found { file, text }));
                }
            }
            if let Some((_, text)) = self.builtin.iter().find(|(n, _)| *n == name) {
                let file = PathBuf::from(format!("<built-in {}/{name}.yml>", self.shipped_from));
                return Ok(Ok(Found { file, text: (*text).to_string() }));
            }
        }
        let known = self.known_names(scenario_file);
        let hint = llmsim_core::util::nearest(name, known.iter().map(String::as_str))
            .map(|n| format!(" (did you mean `{n}`?)"))
            .unwrap_or_default();
        Ok(Err(Unknown { hint, known }))
    }

    /// Every name reachable from this scenario, sorted.
    pub fn known_names(&self, scenario_file: &Path) -> Vec<String> {
        super::yml_names(self.builtin.iter().map(|(n, _)| *n), &self.search_dirs(scenario_file))
    }

    /// The folder in the scenario's directory and every directory above it:
    /// first as the scenario's path gives them, then from the canonical path.
    fn search_dirs(&self, scenario_file: &Path) -> Vec<PathBuf> {
        let start = scenario_file.parent().map(Path::to_path_buf).unwrap_or_default();
        let canonical = std::fs::canonicalize(&start).unwrap_or_else(|_| start.clone());
        start.ancestors().chain(canonical.ancestors()).map(|d| d.join(self.folder)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHELF: Shelf = Shelf {
        folder: "kits",
        shipped_from: "shipped/kits",
        builtin: &[("shipped", "a: 1\n")],
        kind: Kind::Hardware,
        dots: false,
    };

    fn found(r: Result<Result<Found, Unknown>, ConfigError>) -> Found {
        r.unwrap().unwrap_or_else(|u| panic!("not found; known {:?}", u.known))
    }

    #[test]
    fn a_name_is_found_beside_the_scenario_or_above_it_before_the_built_in_one() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::create_dir_all(dir.path().join("kits")).unwrap();
        std::fs::write(dir.path().join("kits/mine.yml"), "x: 2\n").unwrap();
        std::fs::write(dir.path().join("kits/shipped.yml"), "local: 3\n").unwrap();
        let scenario = dir.path().join("a/b/s.yml");
        // Two folders up, as the scenario's path gives it.
        let mine = found(SHELF.find("mine", &scenario));
        assert_eq!(mine.file, dir.path().join("kits/mine.yml"));
        assert_eq!(mine.text, "x: 2\n");
        // A file of the same name shadows the built-in one.
        assert_eq!(found(SHELF.find("shipped", &scenario)).text, "local: 3\n");
        // Elsewhere, the built-in one.
        let elsewhere = tempfile::tempdir().unwrap();
        let built_in = found(SHELF.find("shipped", &elsewhere.path().join("s.yml")));
        assert_eq!(built_in.file, PathBuf::from("<built-in shipped/kits/shipped.yml>"));
        assert_eq!(built_in.text, "a: 1\n");
        assert_eq!(SHELF.known_names(&scenario), ["mine", "shipped"]);
    }

    #[test]
    fn an_unknown_or_ill_formed_name_gets_the_nearest_known_one_and_the_list() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("kits")).unwrap();
        std::fs::write(dir.path().join("kits/v1.5.yml"), "x: 2\n").unwrap();
        let scenario = dir.path().join("s.yml");
        let Err(u) = SHELF.find("shiped", &scenario).unwrap() else { panic!("found") };
        assert_eq!(u.hint, " (did you mean `shipped`?)");
        assert_eq!(u.known, ["shipped", "v1.5"]);
        // Without `dots`, a name with a dot is not looked up, though the file exists.
        assert!(SHELF.find("v1.5", &scenario).unwrap().is_err());
        let dotted = Shelf { dots: true, ..SHELF };
        assert_eq!(found(dotted.find("v1.5", &scenario)).text, "x: 2\n");
        for bad in ["", "../x", "a b"] {
            assert!(dotted.find(bad, &scenario).unwrap().is_err(), "{bad:?}");
        }
    }
}
