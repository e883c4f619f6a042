use std::path::{Path, PathBuf};

use super::*;
use crate::tokenizer::count;

fn load(yaml: &str) -> Responses {
    Responses::from_yaml(yaml, Path::new("r.yml")).unwrap_or_else(|e| panic!("{e}"))
}

fn error(yaml: &str) -> String {
    match Responses::from_yaml(yaml, Path::new("r.yml")) {
        Ok(_) => panic!("loaded, but should not have:\n{yaml}"),
        Err(e) => e.to_string(),
    }
}

fn ask(r: &Responses, message: &str) -> Answer {
    r.answer(&Query { last_user_message: message, model: "sim-7b", seed: None, tools: &[] })
}

fn ask_seeded(r: &Responses, message: &str, seed: u64) -> Answer {
    r.answer(&Query { last_user_message: message, model: "sim-7b", seed: Some(seed), tools: &[] })
}

fn example_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join("scenarios/serve/responses.yml")
}

const SCRIPT: &str = r#"
responses:
  - id: hi
    exact: [hello, hi]
    content: "Hello from {model}."
  - id: shout
    exact: STOP
    ignore_case: true
    content: stopped
  - id: city
    regex: '(?i)weather in (?P<city>\w+)'
    content: "Sunny in {city}."
  - starts_with: "Tell me"
    content: "You said: {last_user_message}"
  - contains: refund
    content: "Refunds take a week."
default:
  content: "I don't know."
"#;

#[test]
fn the_first_matching_entry_answers_and_names_itself() {
    let r = load(SCRIPT);
    assert_eq!(ask(&r, "hello"), Answer { text: "Hello from sim-7b.".into(), entry: "hi".into(), tool_call: None });
    assert_eq!(ask(&r, "What's the weather in Oslo?").text, "Sunny in Oslo.");
    assert_eq!(ask(&r, "Tell me about a refund").entry, "responses[3]", "starts_with comes before contains");
    assert_eq!(ask(&r, "I want a refund").entry, "responses[4]");
    assert_eq!(
        ask(&r, "something else"),
        Answer { text: "I don't know.".into(), entry: "default".into(), tool_call: None }
    );
}

#[test]
fn the_message_is_trimmed_before_matching_and_substitution() {
    let r = load(SCRIPT);
    assert_eq!(ask(&r, "  hi \n").entry, "hi");
    assert_eq!(ask(&r, "\tTell me  more  ").text, "You said: Tell me  more");
}

#[test]
fn matching_is_case_sensitive_unless_ignore_case_is_set() {
    let r = load(SCRIPT);
    assert_eq!(ask(&r, "Hello").entry, "default");
    assert_eq!(ask(&r, "stop").entry, "shout");
    assert_eq!(ask(&r, "Stop").entry, "shout");
    assert_eq!(ask(&r, "WEATHER IN ROME").text, "Sunny in ROME.", "(?i) in the regex");
    assert_eq!(ask(&r, "tell me").entry, "default");
}

#[test]
fn a_prompt_without_the_regex_literal_falls_through_to_later_entries() {
    let r = load(SCRIPT);
    let Matcher::Regex { prefilter: Some(p), .. } = &r.entries[2].matcher else { panic!("no prefilter") };
    assert_eq!((p.needle(), p.is_folded()), ("weather in ", true));
    assert_eq!(ask(&r, "weather forecast, refund").entry, "responses[4]");
}

const VARIED: &str = r#"
seed: 11
responses:
  - id: pick
    exact: pick
    variants: [a, b, c, d, e, f, g, h]
  - id: long
    exact: long
    synthetic: {tokens: [10, 500]}
default:
  synthetic: {tokens: [5, 5]}
"#;

#[test]
fn variants_are_a_fixed_function_of_seed_entry_and_message() {
    let r = load(VARIED);
    let first = ask(&r, "pick").text;
    assert!((0..10).all(|_| ask(&r, "pick").text == first), "same query, same variant");
    assert_eq!(ask(&r, "pick").text, ask_seeded(&r, "pick", 11).text, "the file's seed is the default");
    let seen: std::collections::BTreeSet<String> = (0..200).map(|s| ask_seeded(&r, "pick", s).text).collect();
    assert_eq!(seen.len(), 8, "every variant is reachable by seed: {seen:?}");
}

#[test]
fn variant_picks_are_pinned_so_a_change_of_algorithm_is_noticed() {
    let r = load(VARIED);
    let picks: String = (0..16).map(|s| ask_seeded(&r, "pick", s).text).collect();
    assert_eq!(picks, "ahdfceaachaceebd");
}

#[test]
fn synthetic_answers_have_a_token_count_in_range_that_depends_on_the_seed() {
    let r = load(VARIED);
    let counts: Vec<usize> = (0..100).map(|s| count(&ask_seeded(&r, "long", s).text)).collect();
    assert!(counts.iter().all(|n| (10..=500).contains(n)), "{counts:?}");
    assert!(counts.iter().collect::<std::collections::BTreeSet<_>>().len() > 50, "{counts:?}");
    assert_eq!(ask_seeded(&r, "long", 3), ask_seeded(&r, "long", 3));
    assert_eq!(count(&ask(&r, "anything").text), 5);
}

#[test]
fn the_example_file_loads_and_answers_as_its_comments_say() {
    let r = Responses::load(&example_path()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.seed(), 42);
    assert!(ask(&r, "Good Morning").text.starts_with("Hello! I am sim-7b"));
    assert_eq!(ask(&r, "ping").text, "pong");
    assert_eq!(ask(&r, "Ping").entry, "default");
    let weather = ask(&r, "What's the weather in New York?");
    assert_eq!(weather.entry, "weather");
    assert!(weather.text.contains("New York") && !weather.text.contains('?'), "{}", weather.text);
    // With get_weather on offer the entry before it answers with a call.
    let offered = ["get_weather".to_string()];
    let q = Query { last_user_message: "What's the weather in New York?", model: "m", seed: None, tools: &offered };
    let call = r.answer(&q);
    assert_eq!(call.entry, "weather-call");
    assert_eq!(call.tool_call.map(|c| c.arguments["city"].clone()), Some(serde_json::json!("New York")));
    assert_eq!(ask(&r, "Say: the quick\nbrown fox").text, "the quick\nbrown fox");
    let essay = ask(&r, "write an essay on queues");
    assert!((600..=1200).contains(&count(&essay.text)), "{}", count(&essay.text));
    assert!(ask(&r, "I need a REFUND now").text.contains("\"I need a REFUND now\""));
    assert_eq!(
        ask(&r, "give me JSON"),
        Answer { text: r#"{"model": "sim-7b", "ok": true}"#.into(), entry: "responses[7]".into(), tool_call: None }
    );
    assert!((32..=256).contains(&count(&ask(&r, "tell me a joke").text)));
}

#[test]
fn the_builtin_script_echoes_say_and_otherwise_gives_filler() {
    let r = Responses::builtin();
    assert_eq!(
        ask(&r, "say: Hello, world!"),
        Answer { text: "Hello, world!".into(), entry: "echo".into(), tool_call: None }
    );
    assert_eq!(ask(&r, "ECHO:  two\nlines").text, "two\nlines");
    let other = ask(&r, "How are you?");
    assert_eq!(other.entry, "default");
    assert!((64..=512).contains(&count(&other.text)));
}

#[test]
fn a_query_seed_changes_the_filler_text() {
    let r = Responses::builtin();
    assert_ne!(ask_seeded(&r, "hi", 1).text, ask_seeded(&r, "hi", 2).text);
    assert_eq!(ask_seeded(&r, "hi", 1).text, ask_seeded(&r, "hi", 1).text);
}

// ---- load errors: file, key path, value, what is allowed ----

fn one_entry(entry: &str) -> String {
    format!("responses:\n  - id: e\n{entry}\ndefault:\n  content: x\n")
}

#[test]
fn a_bad_regex_names_the_key_and_includes_the_regex_error() {
    let e = error(&one_entry("    regex: '(unclosed'\n    content: x"));
    assert!(e.starts_with("r.yml: responses[0].regex: '(unclosed' is not a valid regex"), "{e}");
    assert!(e.contains("unclosed group"), "{e}");
}

#[test]
fn a_template_variable_that_is_not_a_named_group_is_a_load_error() {
    let e = error(&one_entry("    regex: 'in (?P<city>\\w+)'\n    variants: [\"ok {city}\", \"bad {cty}\"]"));
    assert!(e.contains("responses[0].variants[1]: `{cty}` is not a known variable; known: {city}"), "{e}");
    let e = error("responses: []\ndefault:\n  content: 'for {city}'\n");
    assert!(e.contains("default.content: `{city}` is not a known variable"), "{e}");
}

#[test]
fn a_group_named_like_a_builtin_variable_is_a_load_error() {
    let e = error(&one_entry("    regex: '(?P<model>\\w+)'\n    content: x"));
    assert!(e.contains("responses[0].regex: the group name `model` is reserved"), "{e}");
}

#[test]
fn synthetic_bounds_are_checked() {
    let e = error(&one_entry("    exact: a\n    synthetic: {tokens: [50, 10]}"));
    assert!(
        e.contains("responses[0].synthetic.tokens: [50, 10] is not allowed: the upper bound must be >= the lower"),
        "{e}"
    );
    let e = error(&one_entry("    exact: a\n    synthetic: {tokens: [0, 10]}"));
    assert!(
        e.contains("responses[0].synthetic.tokens[0]: 0 is not allowed: must be a whole number from 1 to 1000000"),
        "{e}"
    );
    let e = error(&one_entry("    exact: a\n    synthetic: {tokens: [1, 2000000]}"));
    assert!(e.contains("synthetic.tokens[1]: 2000000 is not allowed"), "{e}");
    let e = error(&one_entry("    exact: a\n    synthetic: {tokens: [1]}"));
    assert!(e.contains("responses[0].synthetic.tokens"), "{e}");
}

#[test]
fn an_entry_needs_exactly_one_matcher_and_one_answer() {
    let e = error(&one_entry("    content: x"));
    assert!(e.contains("responses[0]: no matcher: give one of exact, regex, starts_with, contains"), "{e}");
    let e = error(&one_entry("    exact: a\n    contains: b\n    content: x"));
    assert!(e.contains("responses[0]: both exact and contains: give exactly one matcher"), "{e}");
    let e = error(&one_entry("    exact: a"));
    assert!(e.contains("responses[0]: no answer: give one of content, variants, synthetic"), "{e}");
    let e = error(&one_entry("    exact: a\n    content: x\n    variants: [y]"));
    assert!(e.contains("responses[0]: both content and variants"), "{e}");
}

#[test]
fn unknown_keys_are_rejected_with_the_allowed_ones() {
    let e = error(&one_entry("    exact: a\n    content: x\n    answer: y"));
    assert!(e.contains("responses[0]") && e.contains("unknown field `answer`") && e.contains("content"), "{e}");
    let e = error("entries: []\ndefault:\n  content: x\n");
    assert!(e.contains("unknown field `entries`, expected one of `seed`, `responses`, `default`"), "{e}");
    let e = error("responses: []\ndefault:\n  exact: a\n  content: x\n");
    assert!(e.contains("default") && e.contains("unknown field `exact`"), "{e}");
}

#[test]
fn the_default_answer_is_required() {
    let e = error("responses: []\n");
    assert!(e.contains("missing field `default`"), "{e}");
}

#[test]
fn ids_are_unique_and_default_is_reserved() {
    let e = error(
        "responses:\n  - {id: a, exact: x, content: y}\n  - {id: a, exact: z, content: y}\ndefault: {content: d}\n",
    );
    assert!(e.contains("responses[1].id: \"a\" is already the id of responses[0]"), "{e}");
    let e = error("responses:\n  - {id: default, exact: x, content: y}\ndefault: {content: d}\n");
    assert!(e.contains("responses[0].id: \"default\" is reserved"), "{e}");
}

#[test]
fn patterns_that_could_never_match_are_rejected() {
    let e = error(&one_entry("    exact: [ok, ' padded']\n    content: x"));
    assert!(e.contains("responses[0].exact[1]: \" padded\" starts or ends with whitespace"), "{e}");
    let e = error(&one_entry("    starts_with: ' x'\n    content: x"));
    assert!(e.contains("responses[0].starts_with"), "{e}");
    let e = error(&one_entry("    contains: ''\n    content: x"));
    assert!(e.contains("responses[0].contains: an empty string matches every message"), "{e}");
    let e = error(&one_entry("    exact: []\n    content: x"));
    assert!(e.contains("responses[0].exact: an empty list is not allowed"), "{e}");
}

#[test]
fn exact_takes_only_strings() {
    let e = error(&one_entry("    exact: [a, 42]\n    content: x"));
    assert!(e.contains("responses[0].exact[1]: expected a string, got the number 42: quote it, \"42\""), "{e}");
    let e = error(&one_entry("    exact: {a: b}\n    content: x"));
    assert!(e.contains("responses[0].exact: expected a string or a list of strings, got a mapping"), "{e}");
}

#[test]
fn ignore_case_with_a_regex_points_to_the_inline_flag() {
    let e = error(&one_entry("    regex: a\n    ignore_case: true\n    content: x"));
    assert!(e.contains("responses[0].ignore_case: not allowed with regex: start the regex with (?i)"), "{e}");
}

#[test]
fn empty_answers_and_empty_variant_lists_are_rejected() {
    let e = error(&one_entry("    exact: a\n    content: ''"));
    assert!(e.contains("responses[0].content: an empty answer is not allowed"), "{e}");
    let e = error(&one_entry("    exact: a\n    variants: []"));
    assert!(e.contains("responses[0].variants: an empty list is not allowed"), "{e}");
}

#[test]
fn a_missing_file_and_broken_yaml_name_the_file() {
    let e = Responses::load(Path::new("/nonexistent/responses.yml")).unwrap_err().to_string();
    assert_eq!(e, "/nonexistent/responses.yml: cannot read the file: no such file");
    let e = error("responses: [\ndefault: {content: x}\n");
    assert!(e.starts_with("r.yml:"), "{e}");
}

#[test]
fn responses_can_be_shared_between_server_tasks() {
    fn shareable<T: Send + Sync + 'static>() {}
    shareable::<Responses>();
}

#[test]
fn the_builtin_echo_regex_skips_prompts_without_a_colon() {
    let r = Responses::builtin();
    let Matcher::Regex { prefilter: Some(p), .. } = &r.entries[0].matcher else { panic!("no prefilter") };
    assert_eq!((p.needle(), p.is_folded()), (":", false));
}

const TOOLS: &str = r#"
responses:
  - id: weather
    regex: '(?i)weather in (?P<city>\w+)'
    tool_call: {name: get_weather, arguments: {city: "{city}", days: 3, opts: {metric: true}}}
  - id: ping
    contains: ping
    tool_call: ping
  - id: weather-text
    contains: weather
    content: "No forecast."
default:
  content: "plain"
"#;

fn ask_tools(r: &Responses, message: &str, tools: &[&str]) -> Answer {
    let tools: Vec<String> = tools.iter().map(|t| t.to_string()).collect();
    r.answer(&Query { last_user_message: message, model: "m", seed: Some(5), tools: &tools })
}

#[test]
fn a_tool_call_entry_answers_only_when_its_tool_is_offered() {
    let r = load(TOOLS);
    let a = ask_tools(&r, "What is the weather in Paris?", &["get_weather"]);
    let call = a.tool_call.expect("a call");
    assert_eq!((a.text.as_str(), a.entry.as_str(), call.name.as_str()), ("", "weather", "get_weather"));
    let args = serde_json::Value::Object(call.arguments);
    assert_eq!(args, serde_json::json!({"city": "Paris", "days": 3, "opts": {"metric": true}}));
    // Without the tool on offer the next entry that matches answers, in text.
    let a = ask_tools(&r, "What is the weather in Paris?", &["other"]);
    assert_eq!((a.text.as_str(), a.entry.as_str(), a.tool_call), ("No forecast.", "weather-text", None));
    let a = ask_tools(&r, "ping", &["ping", "get_weather"]);
    assert_eq!(a.tool_call.map(|c| (c.name, c.arguments.len())), Some(("ping".to_string(), 0)));
    assert_eq!(ask_tools(&r, "ping", &[]).text, "plain");
}

#[test]
fn tool_call_entries_are_checked_at_load() {
    let base = "responses:\n  - contains: x\n    tool_call: TC\ndefault: {content: d}\n";
    let e = error(&base.replace("TC", "{name: f, argz: {}}"));
    assert!(e.contains("responses[0].tool_call.argz: unknown key"), "{e}");
    let e = error(&base.replace("TC", "{arguments: {a: 1}}"));
    assert!(e.contains("responses[0].tool_call.name: missing"), "{e}");
    let e = error(&base.replace("TC", "[f]"));
    assert!(e.contains("responses[0].tool_call: expected a tool name or {name, arguments}"), "{e}");
    let e = error(&base.replace("TC", "{name: f, arguments: {a: \"{nope}\"}}"));
    assert!(e.contains("responses[0].tool_call.arguments.a:"), "{e}");
    let e = error(&base.replace("TC", "f\n    content: y"));
    assert!(e.contains("both content and tool_call"), "{e}");
    let e = error(&base.replace("TC", "\" f\""));
    assert!(e.contains("responses[0].tool_call: \" f\" is not allowed"), "{e}");
}
