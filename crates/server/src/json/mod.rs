//! JSON-constrained decoding for `response_format` (`json_object`, `json_schema`).
//!
//! Key design choice: a small engine of our own (schema subset → byte pushdown
//! machine → token mask over a trie of the model's token bytes) instead of the
//! `llguidance` crate: the whole engine is a few hundred lines the server owns,
//! builds in seconds on the 2-core build machine, and covers what OpenAI's
//! structured outputs accept in practice (objects with properties/required,
//! arrays, strings, numbers, integers, booleans, null, enums, unions). Output is
//! compact JSON (no whitespace), which also keeps small models from looping.

mod machine;
mod mask;
mod schema;

pub use machine::Machine;
pub use mask::{JsonMask, TokenTrie};
pub use schema::Compiled;
