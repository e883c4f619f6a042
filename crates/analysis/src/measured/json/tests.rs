use std::io::Read;

use super::*;

#[test]
fn bare_non_finite_tokens_become_strings_outside_strings_only() {
    let text = r#"{"a": Infinity, "b": -Infinity, "c": NaN, "d": "NaN Infinity \" Infinity"}"#;
    let docs = documents(text, Path::new("x.json")).unwrap();
    let d = &docs[0];
    assert_eq!(num_at(d, "a"), Some(f64::INFINITY));
    assert_eq!(num_at(d, "b"), Some(f64::NEG_INFINITY));
    assert!(num_at(d, "c").unwrap().is_nan());
    assert_eq!(d["d"], Value::String("NaN Infinity \" Infinity".into()));
}

#[test]
fn several_objects_and_top_level_arrays_are_split_into_documents() {
    let docs = documents("{\"a\":1}\n{\"a\":2}", Path::new("x")).unwrap();
    assert_eq!(docs.len(), 2);
    let docs = documents("[{\"a\":1},{\"a\":2},{\"a\":3}]", Path::new("x")).unwrap();
    assert_eq!(docs.len(), 3);
}

#[test]
fn broken_json_names_the_file_and_line() {
    let e = documents("{\"a\": 1,\n \"b\": }", Path::new("r.json")).unwrap_err().to_string();
    assert!(e.starts_with("r.json:2: column"), "{e}");
    assert!(e.contains("not valid JSON"), "{e}");
    let e = documents("  \n", Path::new("r.json")).unwrap_err().to_string();
    assert!(e.contains("empty"), "{e}");
}

#[test]
fn numbers_may_be_written_as_strings() {
    let v: Value = serde_json::json!({"tp": "1", "rate": "inf", "x": 2.5, "s": "abc"});
    assert_eq!(num_at(&v, "tp"), Some(1.0));
    assert_eq!(num_at(&v, "rate"), Some(f64::INFINITY));
    assert_eq!(finite_at(&v, "rate"), None);
    assert_eq!(num_at(&v, "x"), Some(2.5));
    assert_eq!(num_at(&v, "s"), None);
}

/// The rewrite as it was done on the whole text before streaming: the
/// reference the streaming adapter must agree with byte for byte.
fn quote_bare_tokens(text: &str) -> String {
    const TOKENS: [&str; 3] = ["-Infinity", "Infinity", "NaN"];
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if in_string {
            out.push(c);
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            rest = &rest[c.len_utf8()..];
            continue;
        }
        if let Some(tok) = TOKENS.iter().find(|t| rest.starts_with(**t)) {
            out.push('"');
            out.push_str(tok);
            out.push('"');
            rest = &rest[tok.len()..];
            continue;
        }
        if c == '"' {
            in_string = true;
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// `text` through the adapter, its input handed over `chunk` bytes at a time.
fn streamed(text: &str, chunk: usize) -> String {
    let mut out = String::new();
    let inner = std::io::BufReader::with_capacity(chunk, text.as_bytes());
    QuoteBare::new(inner).read_to_string(&mut out).unwrap();
    out
}

#[test]
fn the_streaming_rewrite_agrees_with_the_whole_text_one_however_the_input_is_cut() {
    use rand::{RngExt, SeedableRng};
    let pieces = [
        "NaN",
        "Infinity",
        "-Infinity",
        "-",
        "N",
        "Na",
        "In",
        "Inf",
        "-I",
        "-N",
        "\"",
        "\\",
        "\\\"",
        " ",
        ",",
        "[",
        "]",
        "{",
        "}",
        ":",
        "1",
        "-2.5e-3",
        "x",
        "é",
        "\n",
        "\"NaN\"",
        "true",
        "null",
    ];
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(34);
    for case in 0..3000 {
        let n = rng.random_range(0..40);
        let text: String = (0..n).map(|_| pieces[rng.random_range(0..pieces.len())]).collect();
        let want = quote_bare_tokens(&text);
        for chunk in [1, 2, 3, 7, 64] {
            assert_eq!(streamed(&text, chunk), want, "case {case}, chunks of {chunk}: {text:?}");
        }
    }
}

#[test]
fn per_request_arrays_hold_what_the_json_tree_holds() {
    // The same object read as a tree (the old way: num_list, errors as
    // strings) and as a Doc: every list agrees, numeric strings, "inf" and
    // bad entries included.
    let text = r#"{"backend": "vllm", "ttfts": [0.5, "0.25", "inf", 3], "latencies": [1, null],
        "input_lens": "many", "output_lens": [[1]], "start_times": [],
        "itls": [[0.1, 0.2], [], ["NaN"]], "errors": ["", "boom", null, 3],
        "generated_texts": ["long text"], "queue_times": [0.1], "extra": {"k": [1, 2]}}"#;
    let tree: Value = serde_json::from_str(&quote_bare_tokens(text)).unwrap();
    let docs = read_docs(text.as_bytes(), Path::new("r.json"), Kind::Measured).unwrap();
    let d = &docs[0];
    let a = &d.arrays;
    for (key, got) in [
        ("ttfts", &a.ttfts),
        ("latencies", &a.latencies),
        ("input_lens", &a.input_lens),
        ("output_lens", &a.output_lens),
        ("start_times", &a.start_times),
    ] {
        let want = num_list(&tree, key);
        assert_eq!(
            got.as_ref().map(|v| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>()),
            want.map(|v| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>()),
            "{key}"
        );
    }
    let rows = a.itls.as_ref().unwrap();
    assert_eq!((rows.len(), rows.row(0), rows.row(1)), (3, &[0.1, 0.2][..], &[][..]));
    assert!(rows.row(2)[0].is_nan());
    let want: Vec<bool> =
        tree["errors"].as_array().unwrap().iter().map(|e| e.as_str().is_none_or(str::is_empty)).collect();
    assert_eq!(a.errors, Errors::Ok(want));
    assert_eq!(d.head.get("extra"), tree.get("extra"), "other keys stay as JSON");
    for gone in ["generated_texts", "queue_times", "ttfts", "itls", "errors"] {
        assert!(d.head.get(gone).is_none(), "{gone}");
    }
    let d = &read_docs(&b"{\"errors\": null, \"itls\": [[1], 2]}"[..], Path::new("r"), Kind::Measured).unwrap()[0];
    assert_eq!((&d.arrays.errors, &d.arrays.itls), (&Errors::NotAList, &None));
}

#[test]
fn streamed_documents_split_objects_and_arrays_as_the_tree_did() {
    let docs = read_docs(&b"{\"a\":1}\n{\"a\":2}"[..], Path::new("x"), Kind::Measured).unwrap();
    assert_eq!(docs.len(), 2);
    let docs = read_docs(&b"[{\"a\":1},{\"a\":2},{\"a\":3}]"[..], Path::new("x"), Kind::Measured).unwrap();
    assert_eq!(docs.len(), 3);
    // An array that is not all objects stays one (refused later as not a result).
    let docs = read_docs(&b"[{\"a\":1}, 2]"[..], Path::new("x"), Kind::Measured).unwrap();
    assert_eq!(docs.len(), 1);
    assert_eq!(docs[0].head, serde_json::json!([{"a": 1}, 2]));
    let e = read_docs(&b"{\"a\": 1,\n \"b\": }"[..], Path::new("r.json"), Kind::Measured).unwrap_err().to_string();
    assert!(e.starts_with("r.json:2: column") && e.contains("not valid JSON"), "{e}");
}

#[test]
fn a_stream_past_its_limit_says_so_instead_of_a_json_error() {
    let endless = std::io::repeat(b' ');
    let bounded = llmsim_scenario::input::Bounded::new(endless, 1 << 20);
    let e = read_docs(bounded, Path::new("big.json"), Kind::Measured).unwrap_err().to_string();
    assert_eq!(
        e,
        "big.json: the file is larger than 1,073,741,824 bytes (1 GiB), the most llmsim reads for a measured file"
    );
}
