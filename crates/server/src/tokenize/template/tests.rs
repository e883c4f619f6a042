use super::*;

fn compile(source: &str) -> ChatTemplate {
    let specials = vec![("bos_token".to_string(), Value::from("<s>"))];
    ChatTemplate::compile(vec![("default".into(), source.into())], specials, "test".into()).unwrap()
}

fn input(body: &str) -> ChatInput {
    ChatInput::from_body(body.as_bytes()).unwrap()
}

#[test]
fn strftime_formats_a_known_instant() {
    // 2024-07-26 is 19,930 days after 1970-01-01, a Friday; 13:05:09 UTC.
    let secs = 19_930 * 86_400 + 13 * 3600 + 5 * 60 + 9;
    assert_eq!(strftime("%d %b %Y", secs), "26 Jul 2024");
    assert_eq!(
        strftime("%A %B %e, %y %H:%M:%S %I%p day %j %% %q", secs),
        "Friday July 26, 24 13:05:09 01PM day 208 % %q"
    );
    // 2000-02-29 (a leap day, 11,016 days in): day 60 of the year, a Tuesday.
    assert_eq!(strftime("%Y-%m-%d %a %j", 11_016 * 86_400), "2000-02-29 Tue 060");
    assert_eq!(strftime("%Y-%m-%d %a", 0), "1970-01-01 Thu");
}

#[test]
fn tojson_writes_what_pythons_json_dumps_writes() {
    let t =
        compile("{{ x | tojson }}|{{ x | tojson(indent=2) }}|{{ x | tojson(sort_keys=true, separators=[',', ':']) }}");
    // Key order as sent (z before a), non-ASCII kept, control characters escaped.
    let chat = input(r#"{"messages":[],"chat_template_kwargs":{"x":{"z":[1,2.5,null,true],"a":"é\n\u0001\"<"}}}"#);
    let out = t.render(&chat).unwrap();
    let expected = concat!(
        r#"{"z": [1, 2.5, null, true], "a": "é\n\u0001\"<"}|"#,
        "{\n  \"z\": [\n    1,\n    2.5,\n    null,\n    true\n  ],\n  \"a\": \"é\\n\\u0001\\\"<\"\n}|",
        r#"{"a":"é\n\u0001\"<","z":[1,2.5,null,true]}"#,
    );
    assert_eq!(out, expected);
    assert_eq!(py_float(1e20), "1e+20");
    assert_eq!(py_float(1e-7), "1e-7");
}

#[test]
fn messages_are_shaped_as_vllm_hands_them_to_a_template() {
    let t = compile(
        "{% for m in messages %}[{{ m.role }}|{{ m.content }}|{{ m.tool_calls[0].function.arguments | tojson if m.tool_calls }}|{{ m.tool_call_id }}|{{ m.name }}]{% endfor %}",
    );
    let chat = input(
        r#"{"messages":[
            {"role":"user","name":"ann","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"b"}]},
            {"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"b\": 1, \"a\": 2}"}}]},
            {"role":"tool","tool_call_id":"c","content":"ok"}]}"#,
    );
    assert_eq!(
        t.render(&chat).unwrap(),
        r#"[user|a\nb|||ann][assistant||{"b": 1, "a": 2}||][tool|ok||c|]"#.replace("\\n", "\n")
    );
    // A template that loops over a message's content gets the parts.
    let parts = compile(
        "{% for m in messages %}{% for p in m['content'] %}<{{ p.type }}:{{ p.text }}>{% endfor %}{% endfor %}",
    );
    assert!(parts.content_parts);
    // The tool result stays a string (vLLM joins its parts), so it iterates by character.
    assert_eq!(parts.render(&chat).unwrap(), "<text:a><text:b><:><:>");
    assert!(!t.content_parts);
}

#[test]
fn tools_are_dumped_as_vllms_pydantic_model_dumps_them() {
    let t = compile("{{ tools | tojson }}");
    let chat = input(r#"{"messages":[],"tools":[{"function":{"strict":true,"name":"f"}}]}"#);
    assert_eq!(
        t.render(&chat).unwrap(),
        r#"[{"type": "function", "function": {"name": "f", "description": null, "parameters": null, "strict": true}}]"#
    );
    assert_eq!(t.render(&input(r#"{"messages":[]}"#)).unwrap(), "null");
}

#[test]
fn flags_kwargs_and_continue_final_message() {
    let t = compile(
        "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}</{{ m.role }}>\n{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}{{ extra }}",
    );
    let msgs = r#""messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"One, two, "}]"#;
    assert_eq!(
        t.render(&input(&format!("{{{msgs}}}"))).unwrap(),
        "<s><user>hi</user>\n<assistant>One, two,</assistant>\n<assistant>"
    );
    // Cut after the final message's content (its trailing space was trimmed
    // by the template, so the cut is after "One, two,").
    let cont = input(&format!(r#"{{{msgs},"add_generation_prompt":false,"continue_final_message":true}}"#));
    assert_eq!(t.render(&cont).unwrap(), "<s><user>hi</user>\n<assistant>One, two,");
    // chat_template_kwargs reach the template and override a special token.
    let kw = input(&format!(r#"{{{msgs},"chat_template_kwargs":{{"extra":"!","bos_token":"<B>"}}}}"#));
    assert!(t.render(&kw).unwrap().starts_with("<B><user>") && t.render(&kw).unwrap().ends_with("<assistant>!"));
    // A final message the template drops: transformers' error.
    let drops = compile("{% for m in messages[:-1] %}{{ m.content }}{% endfor %}");
    let e = drops.render(&cont).unwrap_err();
    assert!(e.0.starts_with("continue_final_message is set but the final message does not appear"), "{e}");
}

#[test]
fn errors_are_clear_and_bounded() {
    let e = ChatTemplate::compile(vec![("default".into(), "{% if %}".into())], vec![], "cfg".into()).unwrap_err();
    assert!(e.0.starts_with("cfg: the chat template `default` does not parse:"), "{e}");
    let t = compile("{{ raise_exception('Only user and assistant roles are supported!') }}");
    assert_eq!(t.render(&input(r#"{"messages":[]}"#)).unwrap_err().0, "Only user and assistant roles are supported!");
    let t = compile("{{ messages[0].content.nope() }}");
    let e = t.render(&input(r#"{"messages":[{"role":"user","content":"x"}]}"#)).unwrap_err();
    assert!(e.0.starts_with("the chat template failed to render:"), "{e}");
    // Python string methods (pycompat).
    let t = compile("{{ messages[0].content.strip().upper() }}{{ messages[0].content.startswith(' a') }}");
    assert_eq!(t.render(&input(r#"{"messages":[{"role":"user","content":" ab "}]}"#)).unwrap(), "ABTrue");
    // A body that is not an object gives no template input.
    assert!(ChatInput::from_body(b"[1]").is_none() && ChatInput::from_body(b"{").is_none());
}

#[test]
fn find_reads_the_config_next_to_the_tokenizer_and_prefers_a_jinja_file() {
    let dir = tempfile::tempdir().unwrap();
    let tok = dir.path().join("tokenizer.json");
    assert!(ChatTemplate::find(&tok, None).unwrap().is_none(), "no config, no template");
    let cfg = dir.path().join("tokenizer_config.json");
    std::fs::write(&cfg, r#"{"bos_token":{"content":"<B>"},"chat_template":[{"name":"default","template":"d{{ bos_token }}"},{"name":"tool_use","template":"t"}]}"#).unwrap();
    let t = ChatTemplate::find(&tok, None).unwrap().unwrap();
    assert_eq!(t.render(&input(r#"{"messages":[]}"#)).unwrap(), "d<B>");
    assert_eq!(t.render(&input(r#"{"messages":[],"tools":[]}"#)).unwrap(), "t", "tool_use when tools are sent");
    std::fs::write(dir.path().join("chat_template.jinja"), "j").unwrap();
    assert_eq!(ChatTemplate::find(&tok, None).unwrap().unwrap().render(&input("{}")).unwrap(), "j");
    std::fs::write(&cfg, r#"{"chat_template":[{"name":"tool_use","template":"t"}]}"#).unwrap();
    std::fs::remove_file(dir.path().join("chat_template.jinja")).unwrap();
    let e = ChatTemplate::find(&tok, None).unwrap_err();
    assert!(e.0.contains("no template named `default` (named: tool_use)"), "{e}");
    std::fs::write(&cfg, "{").unwrap();
    assert!(ChatTemplate::find(&tok, None).unwrap_err().0.contains("tokenizer_config.json is not JSON"));
    std::fs::write(&cfg, "{}").unwrap();
    let e = ChatTemplate::find(&tok, Some(&dir.path().join("missing.jinja"))).unwrap_err();
    assert!(e.0.starts_with("cannot read") && e.0.contains("missing.jinja"), "{e}");
}
