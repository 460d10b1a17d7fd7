//! Progress reporting for pulls. The pull code only talks to the [`Progress`] trait; the CLI picks
//! an indicatif bar when stderr is a terminal and plain log lines otherwise ([`for_stderr`]).

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// Receives progress of a pull. Methods take `&self`; implementations use interior mutability.
pub trait Progress: Sync {
    /// A new byte-counting phase (one download or extraction). `total` when known.
    fn start(&self, label: &str, total: Option<u64>);
    /// `bytes` more bytes were processed in the current phase.
    fn advance(&self, bytes: u64);
    /// The current phase restarts at an absolute position (resumed downloads).
    fn set_position(&self, bytes: u64);
    /// The current phase is done.
    fn finish(&self);
    /// A one-line message (what is happening, warnings).
    fn note(&self, line: &str);
}

/// Discards everything (tests, library callers that do not care).
pub struct NoProgress;

impl Progress for NoProgress {
    fn start(&self, _: &str, _: Option<u64>) {}
    fn advance(&self, _: u64) {}
    fn set_position(&self, _: u64) {}
    fn finish(&self) {}
    fn note(&self, _: &str) {}
}

/// The right reporter for stderr: a progress bar on a terminal, log lines otherwise.
pub fn for_stderr() -> Box<dyn Progress> {
    if std::io::stderr().is_terminal() {
        Box::new(BarProgress::default())
    } else {
        Box::new(LogProgress::default())
    }
}

/// An indicatif progress bar with bytes, bytes/s and ETA.
#[derive(Default)]
pub struct BarProgress {
    bar: Mutex<Option<ProgressBar>>,
}

impl Progress for BarProgress {
    fn start(&self, label: &str, total: Option<u64>) {
        let bar = match total {
            Some(n) => {
                let bar = ProgressBar::new(n);
                if let Ok(style) = ProgressStyle::with_template(
                    "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
                ) {
                    bar.set_style(style.progress_chars("=> "));
                }
                bar
            }
            None => {
                let bar = ProgressBar::new_spinner();
                if let Ok(style) =
                    ProgressStyle::with_template("{spinner} {msg} {bytes} {bytes_per_sec}")
                {
                    bar.set_style(style);
                }
                bar
            }
        };
        bar.set_message(label.to_string());
        if let Ok(mut slot) = self.bar.lock()
            && let Some(old) = slot.replace(bar)
        {
            old.finish_and_clear();
        }
    }
    fn advance(&self, bytes: u64) {
        if let Ok(slot) = self.bar.lock()
            && let Some(bar) = slot.as_ref()
        {
            bar.inc(bytes);
        }
    }
    fn set_position(&self, bytes: u64) {
        if let Ok(slot) = self.bar.lock()
            && let Some(bar) = slot.as_ref()
        {
            bar.set_position(bytes);
            bar.reset_eta();
        }
    }
    fn finish(&self) {
        if let Ok(mut slot) = self.bar.lock()
            && let Some(bar) = slot.take()
        {
            bar.finish();
        }
    }
    fn note(&self, line: &str) {
        match self.bar.lock().ok().and_then(|s| s.clone()) {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }
}

/// Plain lines on stderr: one at the start, then at most one every 5 s or 25 %, one at the end.
#[derive(Default)]
pub struct LogProgress {
    state: Mutex<LogState>,
}

#[derive(Default)]
struct LogState {
    label: String,
    total: Option<u64>,
    done: u64,
    started: Option<Instant>,
    last_line: Option<Instant>,
    last_quarter: u64,
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

impl LogProgress {
    fn line(text: &str) {
        let mut err = std::io::stderr().lock();
        // Progress output is best effort: a closed stderr must not fail the pull.
        let _ = writeln!(err, "{text}");
    }
}

impl Progress for LogProgress {
    fn start(&self, label: &str, total: Option<u64>) {
        if let Ok(mut s) = self.state.lock() {
            *s = LogState {
                label: label.to_string(),
                total,
                started: Some(Instant::now()),
                last_line: Some(Instant::now()),
                ..LogState::default()
            };
        }
        match total {
            Some(n) => Self::line(&format!("{label}: {:.1} MiB", mib(n))),
            None => Self::line(label),
        }
    }
    fn advance(&self, bytes: u64) {
        let Ok(mut s) = self.state.lock() else { return };
        s.done += bytes;
        let quarter = s.total.filter(|&t| t > 0).map_or(0, |t| s.done * 4 / t);
        let due = s
            .last_line
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(5));
        if quarter > s.last_quarter || due {
            s.last_quarter = quarter;
            s.last_line = Some(Instant::now());
            let pct = s
                .total
                .filter(|&t| t > 0)
                .map_or(String::new(), |t| format!(" ({}%)", s.done * 100 / t));
            Self::line(&format!("{}: {:.1} MiB{pct}", s.label, mib(s.done)));
        }
    }
    fn set_position(&self, bytes: u64) {
        if let Ok(mut s) = self.state.lock() {
            s.done = bytes;
        }
    }
    fn finish(&self) {
        let Ok(s) = self.state.lock() else { return };
        let secs = s.started.map_or(0.0, |t| t.elapsed().as_secs_f64());
        let rate = if secs > 0.0 { mib(s.done) / secs } else { 0.0 };
        Self::line(&format!(
            "{}: done, {:.1} MiB in {secs:.1} s ({rate:.1} MiB/s)",
            s.label,
            mib(s.done)
        ));
    }
    fn note(&self, line: &str) {
        Self::line(line);
    }
}
