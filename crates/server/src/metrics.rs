//! Counters for `GET /metrics`, rendered as Prometheus text.
//!
//! Key design choice: plain atomics in one struct, no metrics crate: the set is
//! small and fixed, and the ledger figures are read live at scrape time.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use favlo_runtime::ledger::Ledger;

/// Process-wide counters.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Requests per route class.
    pub chat_requests: AtomicU64,
    /// Embeddings requests.
    pub embeddings_requests: AtomicU64,
    /// Error replies (any status >= 400).
    pub errors: AtomicU64,
    /// Prompt tokens processed.
    pub prompt_tokens: AtomicU64,
    /// Tokens generated.
    pub completion_tokens: AtomicU64,
    /// Embedding input tokens.
    pub embedding_tokens: AtomicU64,
    /// Chat jobs waiting or running.
    pub queue_depth: AtomicU64,
    /// Resident model switches.
    pub switches: AtomicU64,
    /// Milliseconds of the last switch (close + sweep).
    pub last_switch_ms: AtomicU64,
    /// Milliseconds of the last model open.
    pub last_load_ms: AtomicU64,
    /// Runtimes whose sweep found leaked spans.
    pub leaks: AtomicU64,
    /// Generations stopped because the client went away.
    pub disconnects: AtomicU64,
}

impl Metrics {
    /// Add to a counter.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Prometheus text exposition (version 0.0.4).
    pub fn render(&self, ledger: &Ledger) -> String {
        let mut out = String::new();
        let mut line = |name: &str, kind: &str, help: &str, value: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        };
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        line(
            "favlo_chat_requests_total",
            "counter",
            "Chat completion requests.",
            get(&self.chat_requests),
        );
        line(
            "favlo_embeddings_requests_total",
            "counter",
            "Embeddings requests.",
            get(&self.embeddings_requests),
        );
        line(
            "favlo_errors_total",
            "counter",
            "Error replies.",
            get(&self.errors),
        );
        line(
            "favlo_prompt_tokens_total",
            "counter",
            "Prompt tokens processed.",
            get(&self.prompt_tokens),
        );
        line(
            "favlo_completion_tokens_total",
            "counter",
            "Tokens generated.",
            get(&self.completion_tokens),
        );
        line(
            "favlo_embedding_tokens_total",
            "counter",
            "Embedding input tokens.",
            get(&self.embedding_tokens),
        );
        line(
            "favlo_queue_depth",
            "gauge",
            "Chat jobs waiting or running.",
            get(&self.queue_depth),
        );
        line(
            "favlo_model_switches_total",
            "counter",
            "Resident model switches.",
            get(&self.switches),
        );
        line(
            "favlo_last_switch_milliseconds",
            "gauge",
            "Duration of the last close and sweep.",
            get(&self.last_switch_ms),
        );
        line(
            "favlo_last_load_milliseconds",
            "gauge",
            "Duration of the last model open.",
            get(&self.last_load_ms),
        );
        line(
            "favlo_ledger_leaks_total",
            "counter",
            "Closes whose sweep found live spans.",
            get(&self.leaks),
        );
        line(
            "favlo_client_disconnects_total",
            "counter",
            "Generations stopped by a closed client.",
            get(&self.disconnects),
        );
        line(
            "favlo_ledger_budget_bytes",
            "gauge",
            "Ledger budget.",
            ledger.budget(),
        );
        line(
            "favlo_ledger_live_bytes",
            "gauge",
            "Ledger live bytes.",
            ledger.live(),
        );
        line(
            "favlo_ledger_pending_bytes",
            "gauge",
            "Ledger pending bytes.",
            ledger.pending(),
        );
        line(
            "favlo_ledger_room_bytes",
            "gauge",
            "Ledger room.",
            ledger.room(),
        );
        // The accelerator ledgers of open models, one labelled series per device.
        let devices = favlo_runtime::device_ledgers::snapshots();
        if !devices.is_empty() {
            for (name, help) in [
                ("budget", "Device ledger budget."),
                ("live", "Device ledger live bytes."),
                ("room", "Device ledger room."),
            ] {
                let metric = format!("favlo_device_ledger_{name}_bytes");
                let _ = writeln!(out, "# HELP {metric} {help}\n# TYPE {metric} gauge");
                for d in &devices {
                    let v = match name {
                        "budget" => d.budget,
                        "live" => d.live,
                        _ => d.room,
                    };
                    let _ = writeln!(out, "{metric}{{device=\"{}\"}} {v}", d.device);
                }
            }
        }
        out
    }
}
