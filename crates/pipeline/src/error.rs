//! The one error type every seam returns.
//!
//! Key design choice: the variants are the listener's status classes, not the
//! pipeline's internals. The server maps `InvalidRequest` to 400 (with `param`),
//! `DoesNotFit` to 503, `Closed` to "the client went away" (nothing to reply),
//! `Internal` to 500 with a generic message and the detail only in the log.

use crate::sink::RequestClosed;

/// What went wrong, as the listener needs to know it.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// The request itself is wrong (prompt longer than the context, token ids
    /// outside the vocabulary, an unsupported option). Status 400.
    #[error("{message}")]
    InvalidRequest {
        /// Human-readable, shown to the client as is.
        message: String,
        /// The request field at fault (`"messages"`, `"input"`, ...), if any.
        param: Option<String>,
    },
    /// The runtime (weights plus the minimum working set) does not fit in the
    /// ledger's room even at the smallest knob. `request` names what was asked
    /// (e.g. `"SmolLM2-135M-Instruct with a 512-token context"`). Status 503.
    #[error("{request} does not fit in the memory left")]
    DoesNotFit {
        /// What was asked, for the message.
        request: String,
    },
    /// The sink reported the client gone; generation stopped. Not a failure.
    #[error("request closed by the client")]
    Closed,
    /// Anything else: a corrupt checkpoint, a kernel error. Status 500; the
    /// message goes to the log only.
    #[error("internal pipeline error: {message}")]
    Internal {
        /// Detail for the log.
        message: String,
    },
}

/// The class of a [`PipelineError`], for matching without the payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// See [`PipelineError::InvalidRequest`].
    InvalidRequest,
    /// See [`PipelineError::DoesNotFit`].
    DoesNotFit,
    /// See [`PipelineError::Closed`].
    Closed,
    /// See [`PipelineError::Internal`].
    Internal,
}

impl PipelineError {
    /// A 400 naming the field at fault.
    pub fn invalid(message: impl Into<String>, param: Option<&str>) -> Self {
        PipelineError::InvalidRequest {
            message: message.into(),
            param: param.map(str::to_owned),
        }
    }

    /// A 500 with `detail` for the log (anything `Display`, e.g. a lower error).
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        PipelineError::Internal {
            message: detail.to_string(),
        }
    }

    /// A 503: `request` does not fit.
    pub fn does_not_fit(request: impl Into<String>) -> Self {
        PipelineError::DoesNotFit {
            request: request.into(),
        }
    }

    /// The class of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            PipelineError::InvalidRequest { .. } => ErrorKind::InvalidRequest,
            PipelineError::DoesNotFit { .. } => ErrorKind::DoesNotFit,
            PipelineError::Closed => ErrorKind::Closed,
            PipelineError::Internal { .. } => ErrorKind::Internal,
        }
    }
}

impl From<RequestClosed> for PipelineError {
    fn from(_: RequestClosed) -> Self {
        PipelineError::Closed
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_messages() {
        let e = PipelineError::invalid(
            "prompt is 900 tokens; the context holds 512",
            Some("messages"),
        );
        assert_eq!(e.kind(), ErrorKind::InvalidRequest);
        assert_eq!(e.to_string(), "prompt is 900 tokens; the context holds 512");
        let e = PipelineError::does_not_fit("m with a 128-token context");
        assert_eq!(e.kind(), ErrorKind::DoesNotFit);
        assert!(e.to_string().contains("does not fit"));
        let e: PipelineError = RequestClosed.into();
        assert_eq!(e.kind(), ErrorKind::Closed);
        assert_eq!(PipelineError::internal("x").kind(), ErrorKind::Internal);
    }
}
