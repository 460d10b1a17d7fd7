//! Listener settings and the safety check on where it may bind.
//!
//! Key design choice: loopback by default; a bind that other machines can
//! reach is refused unless an API key is set or the operator says
//! `insecure_public` explicitly, so an unauthenticated model server never ends
//! up on a network by accident.

use std::net::IpAddr;
use std::time::Duration;

use crate::error::ServerError;

/// What to do when a request names a model that is not pulled yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PullPolicy {
    /// Pull it on first use (the request waits).
    #[default]
    Auto,
    /// Refuse with a message naming `favlo pull <id>`.
    Never,
}

impl std::str::FromStr for PullPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" | "always" => Ok(PullPolicy::Auto),
            "never" => Ok(PullPolicy::Never),
            other => Err(format!("unknown pull policy `{other}` (auto, never)")),
        }
    }
}

/// `favlo serve` settings.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Interface to bind (default `127.0.0.1`).
    pub host: String,
    /// Port (default 8129; 0 picks a free one).
    pub port: u16,
    /// Required `Authorization: Bearer` key for `/v1/*`, `/metrics`.
    pub api_key: Option<String>,
    /// Allow a non-loopback bind without a key.
    pub insecure_public: bool,
    /// Largest request body in bytes (413 above).
    pub max_body_bytes: usize,
    /// Longest a non-streaming request may take (including queueing).
    pub request_timeout: Duration,
    /// How long a graceful shutdown waits for open requests.
    pub shutdown_grace: Duration,
    /// Chat requests that may wait behind the running one (429 beyond).
    pub queue_capacity: usize,
    /// Unpulled model handling.
    pub pull: PullPolicy,
    /// Extra `Host` names `/mcp` accepts (loopback and the bound host always).
    pub mcp_allowed_hosts: Vec<String>,
    /// Extra browser origins `/mcp` accepts (`http://localhost:*` and the
    /// loopback addresses always).
    pub mcp_allowed_origins: Vec<String>,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            host: "127.0.0.1".into(),
            port: 8129,
            api_key: None,
            insecure_public: false,
            max_body_bytes: 8 * 1024 * 1024,
            request_timeout: Duration::from_secs(600),
            shutdown_grace: Duration::from_secs(10),
            queue_capacity: 16,
            pull: PullPolicy::Auto,
            mcp_allowed_hosts: Vec::new(),
            mcp_allowed_origins: Vec::new(),
        }
    }
}

impl ServeConfig {
    /// Refuse unsafe or invalid settings before binding.
    pub fn check(&self) -> Result<(), ServerError> {
        if self.api_key.as_deref().is_some_and(|k| k.trim().is_empty()) {
            return Err(ServerError::Config {
                message: "--api-key is empty".into(),
            });
        }
        if self.queue_capacity == 0 {
            return Err(ServerError::Config {
                message: "the queue capacity must be at least 1".into(),
            });
        }
        if !is_loopback(&self.host) && self.api_key.is_none() && !self.insecure_public {
            return Err(ServerError::Config {
                message: format!(
                    "refusing to listen on {} without an API key: other machines could use it. \
                     Pass --api-key <key>, or --insecure-public to allow it anyway, \
                     or bind 127.0.0.1",
                    self.host
                ),
            });
        }
        Ok(())
    }

    /// `host:port` for binding (IPv6 hosts bracketed).
    pub fn addr(&self) -> String {
        if self.host.contains(':') && !self.host.starts_with('[') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// Whether `host` only reaches this machine (`localhost`, 127.0.0.0/8, ::1).
pub fn is_loopback(host: &str) -> bool {
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn bind_safety() {
        let mut c = ServeConfig::default();
        assert!(c.check().is_ok());
        c.host = "0.0.0.0".into();
        let err = c.check().unwrap_err().to_string();
        assert!(err.contains("--api-key"), "{err}");
        c.insecure_public = true;
        assert!(c.check().is_ok());
        c.insecure_public = false;
        c.api_key = Some("k".into());
        assert!(c.check().is_ok());
        assert!(is_loopback("::1") && is_loopback("[::1]") && is_loopback("127.0.0.2"));
        assert!(!is_loopback("192.168.1.2") && !is_loopback("example.com"));
        c.host = "::1".into();
        assert_eq!(c.addr(), "[::1]:8129");
    }
}
