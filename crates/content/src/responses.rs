//! Scripted answers: responses.yml maps the last user message to what the
//! server says.
//!
//! Gateways and streaming clients are tested against content they can
//! predict: "say: hello" must come back as "hello", a weather question as a
//! weather answer, a long-form request as a long answer. The file is an
//! ordered list of entries, first match wins, plus a required `default`:
//!
//! ```yaml
//! seed: 7                      # optional, default 0; a request's `seed` wins
//! responses:
//!   - id: weather              # optional; default `responses[<index>]`
//!     regex: '(?i)weather in (?P<city>\w+)'
//!     variants: ["Sunny in {city}.", "Rain in {city}."]
//! default:
//!   synthetic: {tokens: [20, 80]}
//! ```
//!
//! Matchers (exactly one per entry) see the last user message with
//! surrounding whitespace trimmed: `exact` (a string or a list),
//! `starts_with`, `contains` (these three take `ignore_case: true`, which
//! compares both sides lowercased character by character) and `regex` (the
//! `regex` crate's syntax, unanchored unless it says `^`/`$`; named groups
//! become template variables). Answers (exactly one): `content`, a template;
//! `variants`, a list of templates of which one is picked; `synthetic:
//! {tokens: [lo, hi]}`, filler text of a token count picked in `[lo, hi]`
//! that the built-in tokenizer counts exactly. Picks are a fixed function of
//! the seed, the entry id and the trimmed message (see `choice`), so a
//! conversation replays word for word. Templates substitute `{group}`,
//! `{last_user_message}` and `{model}`; `{{`/`}}` are literal braces.
//!
//! An entry may answer with a tool call instead of text (`tool_call:`, see
//! [`ToolCallAnswer`]): `tool_call: get_weather`, or `tool_call: {name:
//! get_weather, arguments: {city: "{city}"}}` (string values are templates).
//! Such an entry matches only when the request offers that tool and may be
//! answered with a call ([`Query::tools`]); the arguments it does not give
//! are made up from the tool's schema (`args`).
//!
//! Everything is checked at load (`build`); regexes are compiled once and
//! each gets a literal prefilter (`prefilter`) so most prompts skip it.

pub mod args;
mod build;
mod choice;
mod prefilter;
mod raw;
mod template;

use std::cell::OnceCell;
use std::path::Path;

use regex::{Captures, Regex};

use llmsim_scenario::config::{self, ConfigError};
use prefilter::Prefilter;
use template::{Template, Vars};

/// The seed when the file gives none.
pub const DEFAULT_SEED: u64 = 0;

/// Synthetic answers are at most this many tokens.
pub const MAX_SYNTHETIC_TOKENS: u64 = 1_000_000;

/// The script the server uses without `--responses`: "say: X" (also
/// "repeat:", "echo:", any case) answers X, anything else gets 64 to 512
/// tokens of filler, about the length of a typical chat answer.
pub const BUILTIN_YAML: &str = r#"
seed: 0
responses:
  - id: echo
    regex: '(?is)^(?:say|repeat|echo)\s*:\s*(?P<text>.+)$'
    content: "{text}"
default:
  synthetic: {tokens: [64, 512]}
"#;

/// A validated responses file.
#[derive(Clone, Debug)]
pub struct Responses {
    seed: u64,
    entries: Vec<Entry>,
    default: AnswerKind,
}

/// What the server knows about a request when it picks the answer.
#[derive(Clone, Copy, Debug)]
pub struct Query<'a> {
    /// The content of the last `user` message (or the completions prompt);
    /// it is trimmed before matching.
    pub last_user_message: &'a str,
    /// The model name of the request, for `{model}`.
    pub model: &'a str,
    /// The request's `seed`, which overrides the file's.
    pub seed: Option<u64>,
    /// The tools the answer may call (the request's, when its
    /// `tool_choice` and the model allow a call); empty for text only.
    pub tools: &'a [String],
}

/// The answer to a query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The full answer text; the server tokenizes it and may truncate it to
    /// `max_tokens`. It can be empty only when a template renders nothing
    /// (say `{group}` with an empty capture).
    pub text: String,
    /// id of the entry that matched, or "default".
    pub entry: String,
    /// A `tool_call:` entry's call (`text` is then empty).
    pub tool_call: Option<ToolCallAnswer>,
}

/// A scripted tool call: the tool and the arguments the script gives
/// (string values rendered); the server fills in the rest from the tool's
/// schema with [`args::arguments`], seeded by `hash`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCallAnswer {
    pub name: String,
    pub arguments: serde_json::Map<String, serde_json::Value>,
    /// The answer's hash (seed, entry, message): seeds the made-up values.
    pub hash: u64,
}

#[derive(Clone, Debug)]
struct Entry {
    id: String,
    matcher: Matcher,
    answer: AnswerKind,
}

#[derive(Clone, Debug)]
enum Matcher {
    /// Any of the strings; lowercased at load when `ignore_case`.
    Exact {
        patterns: Vec<String>,
        ignore_case: bool,
    },
    StartsWith {
        pattern: String,
        ignore_case: bool,
    },
    Contains {
        pattern: String,
        ignore_case: bool,
    },
    Regex {
        regex: Regex,
        prefilter: Option<Prefilter>,
    },
}

#[derive(Clone, Debug)]
enum AnswerKind {
    Content(Template),
    Variants(Vec<Template>),
    Synthetic { lo: u64, hi: u64 },
    ToolCall(ToolCallSpec),
}

/// A `tool_call:` answer as loaded.
#[derive(Clone, Debug)]
struct ToolCallSpec {
    name: String,
    /// Given arguments, in file order; strings are templates.
    arguments: Vec<(String, ArgSpec)>,
}

#[derive(Clone, Debug)]
enum ArgSpec {
    Template(Template),
    Json(serde_json::Value),
}

/// The trimmed message, lowercased only if some matcher needs it.
struct Prompt<'a> {
    text: &'a str,
    lower: OnceCell<String>,
}

impl Prompt<'_> {
    fn lower(&self) -> &str {
        self.lower.get_or_init(|| prefilter::lowercase(self.text))
    }
}

impl Responses {
    /// Reads and validates responses.yml; errors are [`ConfigError`]s naming
    /// the file, the key path (e.g. `responses[3].regex`), the value and
    /// what is allowed.
    pub fn load(path: &Path) -> Result<Responses, ConfigError> {
        Responses::from_yaml(&llmsim_scenario::input::read_text(llmsim_scenario::input::Kind::Responses, path)?, path)
    }

    /// Validates responses YAML given as text; `file` names it in errors.
    pub fn from_yaml(text: &str, file: &Path) -> Result<Responses, ConfigError> {
        build::responses(config::parse_str(text, file)?, file)
    }

    /// What the server uses without `--responses`: [`BUILTIN_YAML`].
    pub fn builtin() -> Responses {
        // invariant: BUILTIN_YAML is a constant that a unit test loads.
        Responses::from_yaml(BUILTIN_YAML, Path::new("<built-in responses>")).expect("the built-in responses load")
    }

    /// The seed used when a query has none.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The answer of the first entry that matches, or the default.
    pub fn answer(&self, q: &Query<'_>) -> Answer {
        let prompt = Prompt { text: q.last_user_message.trim(), lower: OnceCell::new() };
        for e in &self.entries {
            if let AnswerKind::ToolCall(t) = &e.answer
                && !q.tools.contains(&t.name)
            {
                continue;
            }
            if let Some(groups) = e.matcher.matches(&prompt) {
                return self.render(&e.id, &e.answer, groups.as_ref(), q, prompt.text);
            }
        }
        self.render("default", &self.default, None, q, prompt.text)
    }

    fn render(&self, id: &str, kind: &AnswerKind, groups: Option<&Captures<'_>>, q: &Query<'_>, msg: &str) -> Answer {
        let hash = || choice::answer_hash(q.seed.unwrap_or(self.seed), id, msg);
        let vars = Vars { groups, message: msg, model: q.model };
        let mut text = String::new();
        let mut tool_call = None;
        match kind {
            AnswerKind::Content(t) => t.render(&vars, &mut text),
            AnswerKind::Variants(ts) => {
                // invariant: variants are never empty (checked at load), so the index is in range.
                let i = choice::in_range(hash(), 0, ts.len() as u64 - 1) as usize;
                ts[i].render(&vars, &mut text);
            }
            AnswerKind::Synthetic { lo, hi } => {
                let h = hash();
                text = choice::filler(choice::in_range(h, *lo, *hi) as usize, h);
            }
            AnswerKind::ToolCall(t) => {
                let arguments = t
                    .arguments
                    .iter()
                    .map(|(k, a)| {
                        let v = match a {
                            ArgSpec::Json(v) => v.clone(),
                            ArgSpec::Template(t) => {
                                let mut s = String::new();
                                t.render(&vars, &mut s);
                                serde_json::Value::String(s)
                            }
                        };
                        (k.clone(), v)
                    })
                    .collect();
                tool_call = Some(ToolCallAnswer { name: t.name.clone(), arguments, hash: hash() });
            }
        }
        Answer { text, entry: id.to_string(), tool_call }
    }
}

impl Matcher {
    /// None if the prompt does not match; otherwise the regex's captures,
    /// if the matcher is a regex.
    fn matches<'p>(&self, p: &'p Prompt<'p>) -> Option<Option<Captures<'p>>> {
        let subject = |ignore_case: bool| if ignore_case { p.lower() } else { p.text };
        let hit = match self {
            Matcher::Exact { patterns, ignore_case } => patterns.iter().any(|s| s == subject(*ignore_case)),
            Matcher::StartsWith { pattern, ignore_case } => subject(*ignore_case).starts_with(pattern.as_str()),
            Matcher::Contains { pattern, ignore_case } => subject(*ignore_case).contains(pattern.as_str()),
            Matcher::Regex { regex, prefilter } => {
                if prefilter.as_ref().is_some_and(|f| !f.admits(p.text, || p.lower())) {
                    return None;
                }
                return regex.captures(p.text).map(Some);
            }
        };
        hit.then_some(None)
    }
}

/// Filler text of exactly `tokens` tokens (built-in tokenizer), the same
/// for the same `seed`: what `synthetic` answers are made of, for a server
/// that must pad an answer (`ignore_eos`, `min_tokens`).
pub use choice::FillerTokens;

pub fn filler(tokens: usize, seed: u64) -> String {
    choice::filler(tokens, seed)
}

#[cfg(test)]
mod tests;
