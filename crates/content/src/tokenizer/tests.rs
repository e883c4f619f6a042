use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::*;

fn splits(text: &str, want: &[&str]) {
    assert_eq!(tokenize(text), want, "tokens of {text:?}");
    assert_eq!(count(text), want.len(), "count of {text:?}");
}

#[test]
fn english_splits_into_words_with_their_leading_spaces_and_punctuation() {
    splits("Hello, world! How are you?", &["Hello", ",", " world", "!", " How", " are", " you", "?"]);
}

#[test]
fn the_readme_pangram_is_ten_tokens() {
    assert_eq!(count("The quick brown fox jumps over the lazy dog."), 10);
    assert_eq!(count_chat([("user", "Hi!")]), 10);
}

#[test]
fn contractions_are_split_off_in_any_case() {
    splits("I'm sure you'll see it's done", &["I", "'m", " sure", " you", "'ll", " see", " it", "'s", " done"]);
    splits("WE'RE THEY'VE she'D", &["WE", "'RE", " THEY", "'VE", " she", "'D"]);
    splits("don't", &["don", "'t"]);
}

#[test]
fn an_apostrophe_that_is_not_a_contraction_is_punctuation() {
    splits("'quoted'", &["'", "quoted", "'"]);
    splits("rock 'n' roll", &["rock", " '", "n", "'", " roll"]);
    splits("'tis", &["'t", "is"]);
}

#[test]
fn numbers_go_in_groups_of_up_to_three_digits_without_a_leading_space() {
    splits("1234567", &["123", "456", "7"]);
    splits("pay 12 now", &["pay", " ", "12", " now"]);
    splits("$1,000.50", &["$", "1", ",", "000", ".", "50"]);
    splits("v2", &["v", "2"]);
}

#[test]
fn cjk_kana_and_hangul_are_one_character_a_token() {
    splits("你好世界", &["你", "好", "世", "界"]);
    splits("日本語のテキスト", &["日", "本", "語", "の", "テ", "キ", "ス", "ト"]);
    splits("안녕하세요", &["안", "녕", "하", "세", "요"]);
    splits("ok 中文。", &["ok", " 中", "文", "。"]);
    splits("abc中", &["abc", "中"]);
}

#[test]
fn punctuation_runs_stay_together_and_take_a_leading_space() {
    splits("f(x) == {y};", &["f", "(", "x", ")", " ==", " {", "y", "};"]);
    splits("wait...?!", &["wait", "...?!"]);
}

#[test]
fn a_whitespace_run_leaves_its_last_space_to_the_next_word() {
    splits("a   b", &["a", "  ", " b"]);
    splits("x\t\ty", &["x", "\t", "\t", "y"]);
    splits("tail   ", &["tail", "   "]);
    splits("   ", &["   "]);
    splits("a  1", &["a", " ", " ", "1"]);
}

#[test]
fn newlines_end_a_whitespace_token() {
    splits("one\n\ntwo", &["one", "\n\n", "two"]);
    splits("a\r\nb", &["a", "\r\n", "b"]);
    splits("line\n    indented", &["line", "\n", "   ", " indented"]);
    splits("end  \n", &["end", "  \n"]);
    splits("x\n  ", &["x", "\n", "  "]);
}

#[test]
fn combining_marks_stay_with_their_letter() {
    splits("cafe\u{301} ok", &["cafe\u{301}", " ok"]);
    splits("नमस्ते दुनिया", &["नमस्ते", " दुनिया"]);
    splits("か\u{3099}", &["か\u{3099}"]);
    splits("\u{301}x", &["\u{301}", "x"]);
}

#[test]
fn emoji_are_punctuation() {
    splits("👍🏽 great", &["👍🏽", " great"]);
    splits("hi 👋", &["hi", " 👋"]);
}

#[test]
fn empty_text_has_no_tokens() {
    splits("", &[]);
}

#[test]
fn a_chat_costs_its_contents_plus_the_stated_overheads() {
    let messages = [("system", "You are helpful."), ("user", "Hi!")];
    // "You are helpful." = 4 tokens, "Hi!" = 2 tokens.
    assert_eq!(count_chat(messages), 4 + 2 + 2 * 5 + 3);
    assert_eq!(count_chat([("user", "")]), PER_MESSAGE_OVERHEAD + PER_PROMPT_OVERHEAD);
    assert_eq!(count_chat(std::iter::empty()), PER_PROMPT_OVERHEAD);
}

/// Pieces the random strings are built from: every class, and the joins
/// between them that the rules treat specially.
const PIECES: &[&str] = &[
    "a",
    "Z",
    "word",
    " ",
    "  ",
    "\t",
    "\n",
    "\r\n",
    "\r",
    "\u{a0}",
    "\u{3000}",
    "0",
    "42",
    "12345",
    "'",
    "'s",
    "'LL",
    "'re",
    ".",
    ",",
    "!?",
    "(",
    ")",
    "\"",
    "-",
    "_",
    "中",
    "文",
    "の",
    "カ",
    "한",
    "\u{301}",
    "\u{94d}",
    "é",
    "Ж",
    "😀",
    "👍🏽",
    "\u{200d}",
    "\u{fe0f}",
    "½",
    "٣",
    "\0",
    "\u{7f}",
    "\u{10ffff}",
];

fn random_text(rng: &mut ChaCha8Rng) -> String {
    let len = rng.random_range(0..24);
    (0..len)
        .map(|_| {
            if rng.random_range(0..8) == 0 {
                // Any code point at all, now and then.
                rng.random_range(0..=char::MAX as u32).try_into().map_or(String::from("?"), |c: char| c.to_string())
            } else {
                PIECES[rng.random_range(0..PIECES.len())].to_string()
            }
        })
        .collect()
}

#[test]
fn tokens_of_random_text_are_never_empty_and_join_back_to_the_text() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    for case in 0..20_000 {
        let text = random_text(&mut rng);
        let toks = tokenize(&text);
        assert!(toks.iter().all(|t| !t.is_empty()), "case {case}: empty token in {text:?}: {toks:?}");
        assert_eq!(toks.concat(), text, "case {case}");
        assert_eq!(count(&text), toks.len(), "case {case}");
    }
}

/// A rough speed figure: `cargo test --release -p llmsim-content --lib tokenizer_speed -- --ignored --nocapture`.
#[test]
#[ignore]
fn tokenizer_speed() {
    let english = "The quick brown fox jumps over the lazy dog. It's 12,345 metres away!\n".repeat(20_000);
    let mixed = "日本語のテキストと English words, 한국어 텍스트 and emoji 👍🏽.\n".repeat(20_000);
    for (name, text) in [("english", &english), ("mixed", &mixed)] {
        let start = std::time::Instant::now();
        let mut n = 0;
        for _ in 0..5 {
            n += count(text);
        }
        let secs = start.elapsed().as_secs_f64();
        let mb = 5.0 * text.len() as f64 / 1e6;
        println!("{name}: {:.0} MB/s, {:.1} M tokens/s", mb / secs, n as f64 / secs / 1e6);
    }
}
