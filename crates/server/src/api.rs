//! Which OpenAI endpoint a request came to: the response shapes, the
//! validation rules and the logprobs' layout all differ between the two.

/// Which endpoint, for the response shapes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Api {
    Chat,
    Completion,
}
