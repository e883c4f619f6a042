//! HTTP errors in vLLM's JSON envelope.
//!
//! vLLM answers `{"error": {"message", "type", "param", "code"}}` where
//! `type` is an SDK-class-like name (`BadRequestError`, `NotFoundError`) and
//! `code` is the integer HTTP status (OpenAI itself uses string codes; we
//! follow vLLM, which is what the server imitates). Messages that clients
//! match on (context length, unknown model) use vLLM's exact wording.
//!
//! Errors raised before a request reaches an endpoint's code take the type
//! vLLM's FastAPI handlers give them: a body that is not one JSON value is
//! pydantic's `json_invalid` through vLLM's `validation_exception_handler`
//! (type `Bad Request`, `param` `body.<offset>`), and an HTTP-level error
//! (no such path, wrong method, a body too slow to arrive) is vLLM's
//! `http_exception_handler` shape: type and message are the status phrase.
//! (Stock FastAPI answers an unknown path with `{"detail": "Not Found"}`
//! before vLLM's handler sees it; llmsim keeps every error in the envelope
//! so a client reads all of them one way.)

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// An error answer: status, message and the offending parameter.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub param: Option<String>,
    /// The `type` when it is not the one [`ApiError::kind`] derives from
    /// the status.
    pub kind: Option<&'static str>,
    /// Seconds for a `retry-after` header (injected 429s).
    pub retry_after: Option<u64>,
}

#[derive(Serialize)]
struct Envelope<'a> {
    error: Body<'a>,
}

#[derive(Serialize)]
struct Body<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<&'a str>,
    code: u16,
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            param: None,
            kind: None,
            retry_after: None,
        }
    }

    pub fn with_param(mut self, param: &str) -> ApiError {
        self.param = Some(param.to_string());
        self
    }

    /// vLLM: 404 "The model `x` does not exist."
    pub fn unknown_model(name: &str) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("The model `{name}` does not exist."),
            param: Some("model".into()),
            kind: None,
            retry_after: None,
        }
    }

    /// A completions prompt of no tokens (`[""]`, `[[]]`, `[]`; `""`
    /// itself is refused earlier, by the request's validator): vLLM's
    /// input processor refuses it with this sentence, a 400 with no
    /// `param`.
    pub fn empty_prompt() -> ApiError {
        ApiError::bad_request("The decoder prompt cannot be empty".to_string())
    }

    /// A prompt longer than the whole context: vLLM 0.33's renderer
    /// (`TokenizeParams._token_len_check`). A prompt of text (or a chat) is
    /// tokenized with truncation at one token past the context, so vLLM
    /// reports `at least` context + 1 tokens for it; a prompt of token ids
    /// is counted as sent.
    pub fn prompt_too_long(context: u32, prompt: u64, at_least: bool) -> ApiError {
        let (qualifier, count) = if at_least { ("at least ", u64::from(context) + 1) } else { ("", prompt) };
        ApiError::bad_request(format!(
            "This model's maximum context length is {context} tokens. However, your prompt contains \
             {qualifier}{count} input tokens, which exceeds this limit even without any output tokens. Please \
             reduce the length of the input prompt. (parameter=input_tokens, value={count})"
        ))
        .with_param("input_tokens")
    }

    /// `max_tokens` (or `max_completion_tokens`, named by `param`) over the
    /// whole context, as sent: vLLM 0.33 refuses it before reading the
    /// prompt (`TokenizeParams.__post_init__`); below that it clamps.
    pub fn max_tokens_over_context(param: &str, sent: &str, context: u32) -> ApiError {
        ApiError::bad_request(format!(
            "{param}={sent} cannot be greater than max_model_len={context}. Please request fewer output tokens. \
             (parameter={param}, value={sent})"
        ))
        .with_param(param)
    }

    /// Prompt plus `max_tokens` over the context (vLLM's wording), with the
    /// value the client sent.
    pub fn max_tokens_too_large(context: u32, prompt: u32, max_tokens: &str) -> ApiError {
        ApiError::bad_request(format!(
            "'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's maximum context \
             length is {context} tokens and your request has {prompt} input tokens ({max_tokens} > {context} - \
             {prompt})."
        ))
        .with_param("max_tokens")
    }

    pub fn too_large(len: u64, limit: usize) -> ApiError {
        ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            message: format!(
                "The request body is {len} bytes; this server accepts at most {limit} (see --max-body-bytes)."
            ),
            param: None,
            kind: None,
            retry_after: None,
        }
    }

    /// A body over the limit whose length was not declared: the reading
    /// stopped at the limit, so its length is not known.
    pub fn too_large_unknown(limit: usize) -> ApiError {
        ApiError {
            message: format!(
                "The request body is over {limit} bytes, the most this server accepts (see --max-body-bytes)."
            ),
            ..ApiError::too_large(0, limit)
        }
    }

    /// The engine can never hold the request's KV (docs/engine.md section 2).
    pub fn never_fits(prompt: u32, num_blocks: u32, block_size: u32, watermark: u32) -> ApiError {
        ApiError::bad_request(format!(
            "This request's {prompt} prompt tokens can never fit in the KV cache: it has {num_blocks} blocks of \
             {block_size} tokens and keeps {watermark} free as a watermark. Please reduce the length of the input."
        ))
        .with_param("input_tokens")
    }

    /// An HTTP-level error in vLLM's `http_exception_handler` shape: the
    /// status phrase as `type` and as message (`Not Found`, `Method Not
    /// Allowed`).
    pub fn http(status: StatusCode) -> ApiError {
        let phrase = status.canonical_reason().unwrap_or("Error");
        ApiError { status, message: phrase.to_string(), param: None, kind: Some(phrase), retry_after: None }
    }

    /// A body that did not arrive in time (408, `--body-timeout`).
    pub fn body_timeout(secs: f64) -> ApiError {
        ApiError {
            message: format!("The request body did not arrive within {secs} s (see --body-timeout)."),
            ..ApiError::http(StatusCode::REQUEST_TIMEOUT)
        }
    }

    /// A body with something after its JSON value: vLLM's answer, which is
    /// FastAPI's `json_invalid` error with Python's `Extra data` and the
    /// character offset where the extra data starts, as vLLM 0.33's handler
    /// writes it (location dotted, the empty input described).
    pub fn extra_data(offset: usize) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: format!(
                "1 validation error:\n  {{'type': 'json_invalid', 'loc': 'body.{offset}', 'msg': 'JSON decode \
                 error', 'input': '<dict of 0 items>', 'ctx': {{'error': 'Extra data'}}}}"
            ),
            param: Some(format!("body.{offset}")),
            kind: Some("Bad Request"),
            retry_after: None,
        }
    }

    /// A body whose `Content-Type` is missing or not `application/json`:
    /// vLLM 0.33's `validate_json_request` raises a validation error whose
    /// one entry is this sentence, and its handler lists it as pydantic's
    /// (type `Bad Request`, no `param`).
    pub fn unsupported_media_type() -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed".into(),
            param: None,
            kind: Some("Bad Request"),
            retry_after: None,
        }
    }

    /// A prompt token id outside the model's vocabulary (vLLM 0.33's
    /// `validate_token_ids`: a negative id is reported first, else the
    /// largest; no `param`).
    pub fn out_of_vocabulary(id: i64) -> ApiError {
        ApiError::bad_request(format!("Token id {id} is out of vocabulary"))
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
            param: None,
            kind: None,
            retry_after: None,
        }
    }

    /// The class-like name vLLM puts in `type`.
    pub fn kind(&self) -> &'static str {
        if let Some(kind) = self.kind {
            return kind;
        }
        match self.status {
            StatusCode::BAD_REQUEST => "BadRequestError",
            StatusCode::NOT_FOUND => "NotFoundError",
            StatusCode::PAYLOAD_TOO_LARGE => "RequestEntityTooLargeError",
            StatusCode::UNPROCESSABLE_ENTITY => "UnprocessableEntityError",
            _ => "InternalServerError",
        }
    }

    /// The envelope as JSON text.
    pub fn json(&self) -> String {
        let env = Envelope {
            error: Body {
                message: &self.message,
                kind: self.kind(),
                param: self.param.as_deref(),
                code: self.status.as_u16(),
            },
        };
        // invariant: a struct of strings and integers always serialises.
        serde_json::to_string(&env).unwrap_or_default()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, self.json()).into_response();
        resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(secs) = self.retry_after {
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.status == StatusCode::REQUEST_TIMEOUT {
            // The rest of the body may still come: the connection cannot be reused.
            resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_envelope_carries_type_param_and_integer_code() {
        let e = ApiError::unknown_model("gpt-9");
        let v: serde_json::Value = serde_json::from_str(&e.json()).unwrap();
        assert_eq!(v["error"]["message"], "The model `gpt-9` does not exist.");
        assert_eq!(v["error"]["type"], "NotFoundError");
        assert_eq!(v["error"]["param"], "model");
        assert_eq!(v["error"]["code"], 404);
    }

    #[test]
    fn context_messages_use_vllm_wording() {
        let e = ApiError::max_tokens_too_large(4096, 4000, "100");
        assert_eq!(
            e.message,
            "'max_tokens' or 'max_completion_tokens' is too large: 100. This model's maximum context length is \
             4096 tokens and your request has 4000 input tokens (100 > 4096 - 4000)."
        );
        let e = ApiError::prompt_too_long(4096, 5000, false);
        assert_eq!(
            e.message,
            "This model's maximum context length is 4096 tokens. However, your prompt contains 5000 input tokens, \
             which exceeds this limit even without any output tokens. Please reduce the length of the input prompt. \
             (parameter=input_tokens, value=5000)"
        );
        let e = ApiError::prompt_too_long(4096, 5000, true);
        assert!(e.message.contains("your prompt contains at least 4097 input tokens, which"), "{}", e.message);
        assert!(e.message.ends_with("(parameter=input_tokens, value=4097)"), "{}", e.message);
        let e = ApiError::max_tokens_over_context("max_completion_tokens", "5000", 4096);
        assert_eq!(
            e.message,
            "max_completion_tokens=5000 cannot be greater than max_model_len=4096. Please request fewer output \
             tokens. (parameter=max_completion_tokens, value=5000)"
        );
        assert_eq!(e.param.as_deref(), Some("max_completion_tokens"));
    }
}
