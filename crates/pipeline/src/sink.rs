//! Where generated tokens go, and how a generation is told to stop.
//!
//! Key design choice: the disconnect shell is the sink. The server's sink sends
//! each piece into the client's channel; when that channel is closed the sink
//! returns [`RequestClosed`] and the pipeline returns at once (use `?`: it
//! converts to [`crate::PipelineError::Closed`]), leaving its runtime usable for
//! the next request. [`StopFlag`] is the other direction: the server raises it
//! (a stop string matched, shutdown) and the pipeline checks it once per token.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::language::TokenLogprob;

/// The client that asked for this generation has gone away.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the client closed the request")]
pub struct RequestClosed;

/// Receives a generation's text as it is produced.
pub trait TokenSink: Send {
    /// One decoded piece of text (valid UTF-8: a pipeline holds back the bytes
    /// of a character split across tokens until it is whole), with its
    /// log-probability when the request asked for them. May be empty when the
    /// token's bytes are still incomplete; then `logprob` still counts it.
    fn token(&mut self, piece: &str, logprob: Option<TokenLogprob>) -> Result<(), RequestClosed>;
}

/// A sink that keeps everything (tests, non-streaming callers).
#[derive(Debug, Default)]
pub struct CollectSink {
    /// All pieces concatenated.
    pub text: String,
    /// Every logprob received.
    pub logprobs: Vec<TokenLogprob>,
    /// Number of `token` calls.
    pub calls: usize,
    /// When set, `token` fails with [`RequestClosed`] once `calls` reaches it.
    pub close_after: Option<usize>,
}

impl TokenSink for CollectSink {
    fn token(&mut self, piece: &str, logprob: Option<TokenLogprob>) -> Result<(), RequestClosed> {
        if self.close_after.is_some_and(|n| self.calls >= n) {
            return Err(RequestClosed);
        }
        self.calls += 1;
        self.text.push_str(piece);
        self.logprobs.extend(logprob);
        Ok(())
    }
}

/// A shared "stop after this token" flag. Cloning shares the flag.
#[derive(Clone, Debug, Default)]
pub struct StopFlag(Arc<AtomicBool>);

impl StopFlag {
    /// A lowered flag.
    pub fn new() -> Self {
        Self::default()
    }

    /// Raise the flag: the pipeline ends the generation after the token it is
    /// on and returns `Ok` with [`crate::FinishReason::Stop`].
    pub fn raise(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether the flag is raised. Pipelines check this once per decoded token.
    pub fn is_raised(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// Lower the flag (the server does this before reusing it).
    pub fn clear(&self) {
        self.0.store(false, Ordering::Release);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn stop_flag_is_shared() {
        let a = StopFlag::new();
        let b = a.clone();
        assert!(!b.is_raised());
        a.raise();
        assert!(b.is_raised());
        b.clear();
        assert!(!a.is_raised());
    }

    #[test]
    fn collect_sink_closes() {
        let mut s = CollectSink {
            close_after: Some(2),
            ..Default::default()
        };
        assert!(s.token("a", None).is_ok());
        assert!(s.token("b", None).is_ok());
        assert_eq!(s.token("c", None), Err(RequestClosed));
        assert_eq!(s.text, "ab");
    }
}
