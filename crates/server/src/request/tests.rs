//! The three validation layers against vLLM's wording, written out by hand.

use serde_json::json;

use super::*;

fn chat(extra: Value) -> Value {
    let mut v = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

fn options(v: Value) -> Result<Options, ApiError> {
    read(Api::Chat, &v)?.fields.options()
}

#[test]
fn wrong_types_get_vllm_0_33s_validation_format_and_name_the_field() {
    // vLLM 0.33's validation_exception_handler: each pydantic error as
    // Python prints its dict, with the location dotted
    // (clean_loc_for_param) and the input summarised; param = that location.
    let e = read(Api::Chat, &chat(json!({"temperature": "hot"}))).unwrap_err();
    assert_eq!((e.status.as_u16(), e.kind(), e.param.as_deref()), (400, "Bad Request", Some("body.temperature")));
    assert_eq!(
        e.message,
        "1 validation error:\n  {'type': 'float_parsing', 'loc': 'body.temperature', 'msg': 'Input should be a \
         valid number, unable to parse string as a number', 'input': 'hot'}"
    );
    // A number is shown as Python's str() of it (so quoted); a list by size.
    let e = read(Api::Chat, &chat(json!({"max_tokens": 1.5, "stream": [1, 2]}))).unwrap_err();
    assert!(e.message.starts_with("2 validation errors:\n  {"), "{}", e.message);
    assert!(e.message.contains("{'type': 'int_from_float', 'loc': 'body.max_tokens', 'msg': 'Input should be a valid integer, got a number with a fractional part', 'input': '1.5'}"), "{}", e.message);
    assert!(e.message.contains("{'type': 'bool_type', 'loc': 'body.stream', 'msg': 'Input should be a valid boolean', 'input': '<list of 2 items>'}"), "{}", e.message);
    let e = read(Api::Chat, &json!({"messages": [{"role": "user", "content": 5}]})).unwrap_err();
    assert_eq!(e.param.as_deref(), Some("body.messages.0.content"));
    assert!(e.message.contains("'loc': 'body.messages.0.content'"), "{}", e.message);
    // `missing`'s input is the whole body: a dict of 1 item here.
    let e = read(Api::Chat, &json!({"model": "m"})).unwrap_err();
    assert!(
        e.message.contains(
            "{'type': 'missing', 'loc': 'body.messages', 'msg': 'Field required', 'input': '<dict of 1 items>'}"
        ),
        "{}",
        e.message
    );
    let e = read(Api::Completion, &json!({"prompt": "x", "stop": ["a", 3]})).unwrap_err();
    assert_eq!(e.param.as_deref(), Some("body.stop.1"));
    // A long string input is cut at 200 characters.
    let long = "x".repeat(300);
    let e = read(Api::Chat, &chat(json!({"temperature": long}))).unwrap_err();
    assert!(e.message.contains(&format!("'input': '{}...[truncated]'}}", "x".repeat(200))), "{}", e.message);
    // At most 10 errors are listed, then a count of the rest.
    let messages: Vec<Value> = (0..12).map(|_| json!({"role": "user", "content": 1})).collect();
    let e = read(Api::Chat, &json!({"model": "m", "messages": messages})).unwrap_err();
    assert!(e.message.starts_with("12 validation errors:\n"), "{}", e.message);
    assert_eq!(e.message.matches("{'type': 'string_type'").count(), 10, "{}", e.message);
    assert!(e.message.ends_with("\n  ...and 2 more errors"), "{}", e.message);
}

#[test]
fn lax_mode_accepts_what_pydantic_accepts() {
    let o = options(chat(json!({"max_tokens": "5", "stream": "true", "n": 1.0, "temperature": 1}))).unwrap();
    assert_eq!((o.max_tokens, o.stream, o.n), (Some(5), true, 1));
    // Unknown fields (and vLLM's removed best_of) are accepted and ignored.
    assert!(options(chat(json!({"best_of": 3, "whatever": {"x": 1}}))).is_ok());
}

#[test]
fn model_validators_run_on_the_raw_body() {
    // vLLM 0.33's validators raise VLLMValidationError, which pydantic
    // passes through: a plain BadRequestError with the parameter suffix.
    let e = read(Api::Chat, &chat(json!({"stream_options": {"include_usage": true}}))).unwrap_err();
    assert_eq!((e.kind(), e.param.as_deref()), ("BadRequestError", Some("stream_options")));
    assert_eq!(e.message, "Stream options can only be defined when `stream=True`. (parameter=stream_options)");
    let e = read(Api::Chat, &chat(json!({"prompt_logprobs": -2}))).unwrap_err();
    assert_eq!(e.message, "`prompt_logprobs` must be a positive value or -1. (parameter=prompt_logprobs, value=-2)");
    let e = read(Api::Chat, &chat(json!({"top_logprobs": 3}))).unwrap_err();
    assert!(e.message.contains("when using `top_logprobs`, `logprobs` must be set to true."), "{}", e.message);
    let e = read(Api::Chat, &chat(json!({"tool_choice": "auto"}))).unwrap_err();
    assert!(e.message.contains("When using `tool_choice`, `tools` must be set."));
    let e = read(Api::Chat, &chat(json!({"tools": []}))).unwrap_err();
    assert_eq!(e.param.as_deref(), Some("tools"));
    let e = read(Api::Completion, &json!({"prompt": ""})).unwrap_err();
    assert!(e.message.contains("Either prompt or prompt_embeds must be provided and non-empty."));
    let e = read(Api::Completion, &json!({"prompt": "x", "logprobs": "many"})).unwrap_err();
    assert_eq!(e.message, "`logprobs` must be an integer. (parameter=logprobs, value=many)");
    let tools = json!([{"type": "function", "function": {"name": "f"}}]);
    let choice = |extra: Value| read(Api::Chat, &chat(extra)).unwrap().tools.map(|t| t.choice);
    use crate::tools::ToolChoice;
    assert_eq!(choice(json!({"tools": tools})), Some(ToolChoice::Auto), "tools default to auto");
    assert_eq!(choice(json!({"tools": tools, "tool_choice": "none"})), Some(ToolChoice::None));
    assert_eq!(choice(json!({"tools": tools, "tool_choice": "required"})), Some(ToolChoice::Required));
    let named = json!({"type": "function", "function": {"name": "f"}});
    assert_eq!(choice(json!({"tools": tools, "tool_choice": named})), Some(ToolChoice::Named("f".into())));
    assert_eq!(choice(json!({})), None);
}

#[test]
fn each_tool_is_checked_as_pydantic_checks_it() {
    let e = read(
        Api::Chat,
        &chat(json!({"tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function"}]})),
    )
    .unwrap_err();
    assert_eq!(e.param.as_deref(), Some("body.tools.1.function"));
    assert!(
        e.message.contains("{'type': 'missing', 'loc': 'body.tools.1.function', 'msg': 'Field required'"),
        "{}",
        e.message
    );
    let e = read(Api::Chat, &chat(json!({"tools": [{"function": {"name": 5}}]}))).unwrap_err();
    assert_eq!(e.param.as_deref(), Some("body.tools.0.function.name"));
    let e = read(Api::Chat, &chat(json!({"tools": [{"function": {"name": "f", "parameters": [1]}}]}))).unwrap_err();
    assert_eq!(e.param.as_deref(), Some("body.tools.0.function.parameters"));
    let t = read(Api::Chat, &chat(json!({"tools": [{"function": {"name": "f", "parameters": {"type": "object"}}}]})))
        .unwrap()
        .tools
        .unwrap();
    assert_eq!((t.tools[0].name.as_str(), t.tools[0].parameters.clone()), ("f", Some(json!({"type": "object"}))));
}

#[test]
fn sampling_params_are_checked_with_vllms_sentences() {
    let msg = |extra: Value| options(chat(extra)).unwrap_err().message;
    assert_eq!(
        msg(json!({"temperature": -1})),
        "temperature must be non-negative, got -1.0. (parameter=temperature, value=-1.0)"
    );
    assert_eq!(
        msg(json!({"temperature": 3})),
        "temperature must be in [0, 2], got 3.0. (parameter=temperature, value=3.0)"
    );
    assert_eq!(msg(json!({"top_p": 7})), "top_p must be in (0, 1], got 7.0. (parameter=top_p, value=7.0)");
    assert_eq!(msg(json!({"top_p": 0})), "top_p must be in (0, 1], got 0.0. (parameter=top_p, value=0.0)");
    assert_eq!(msg(json!({"presence_penalty": 2.5})), "presence_penalty must be in [-2, 2], got 2.5.");
    assert_eq!(msg(json!({"frequency_penalty": -3})), "frequency_penalty must be in [-2, 2], got -3.0.");
    assert_eq!(msg(json!({"repetition_penalty": 0})), "repetition_penalty must be greater than zero, got 0.0.");
    assert_eq!(msg(json!({"top_k": -2})), "top_k must be 0 (disable), or at least 1, got -2.");
    assert_eq!(msg(json!({"min_p": 1.5})), "min_p must be in [0, 1], got 1.5.");
    assert_eq!(msg(json!({"n": 0})), "n must be at least 1, got 0.");
    assert_eq!(msg(json!({"max_tokens": 0})), "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)");
    assert_eq!(msg(json!({"min_tokens": -1})), "min_tokens must be greater than or equal to 0, got -1.");
    // Checked later, against max_tokens clamped to the context.
    assert_eq!(min_tokens_over_max(4, 3).message, "min_tokens must be less than or equal to max_tokens=3, got 4.");
    assert_eq!(
        max_tokens_below_one("0").message,
        "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)"
    );
    // max_completion_tokens' value is the sampling parameter max_tokens.
    let e = options(chat(json!({"max_completion_tokens": 0}))).unwrap_err();
    assert_eq!(
        (e.message.as_str(), e.param.as_deref()),
        ("max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)", Some("max_tokens"))
    );
    assert_eq!(msg(json!({"stop": ["a", ""]})), "stop cannot contain an empty string.");
    assert_eq!(msg(json!({"n": 2, "temperature": 0})), "n must be 1 when using greedy sampling, got 2.");
    let e = options(chat(json!({"logprobs": true, "top_logprobs": 21}))).unwrap_err();
    assert_eq!(e.message, "Requested sample logprobs of 21, which is greater than max allowed: 20");
    assert_eq!(e.param.as_deref(), Some("top_logprobs"));
    let e = options(chat(json!({"temperature": -1}))).unwrap_err();
    assert_eq!((e.kind(), e.param.as_deref()), ("BadRequestError", Some("temperature")));
    let o = options(chat(json!({"logprobs": true, "top_logprobs": 20, "n": 3, "ignore_eos": true}))).unwrap();
    assert_eq!((o.logprobs, o.n, o.ignore_eos), (Some(20), 3, true));
    let o = options(chat(json!({"max_completion_tokens": 4, "max_tokens": 100}))).unwrap();
    assert_eq!((o.max_tokens, o.max_tokens_param), (Some(4), "max_completion_tokens"));
}

#[test]
fn completions_take_a_list_of_prompts_or_token_ids() {
    let p = read(Api::Completion, &json!({"prompt": ["a", "b c"]})).unwrap();
    assert_eq!(p.prompts, vec![PromptIn::Text("a".into()), PromptIn::Text("b c".into())]);
    let p = read(Api::Completion, &json!({"prompt": [1, 2, 3]})).unwrap();
    assert_eq!(p.prompts, vec![PromptIn::Ids(vec![1, 2, 3])]);
    let p = read(Api::Completion, &json!({"prompt": [[1], [2, 3]]})).unwrap();
    assert_eq!(p.prompts, vec![PromptIn::Ids(vec![1]), PromptIn::Ids(vec![2, 3])]);
}

#[test]
fn python_reprs() {
    assert_eq!(py_repr(&json!({"a": [1, 2.5, true, null, "it's"]})), r#"{'a': [1, 2.5, True, None, "it's"]}"#);
    assert_eq!(py_float(7.0), "7.0");
    assert_eq!(py_float(f64::NAN), "nan");
}
