//! Stop strings over a token stream.
//!
//! Key design choice: text that could still be the start of a stop string is
//! held back, so a client never sees part of a stop string; when one completes,
//! everything from its start on is dropped and the generation is told to stop.

/// Incremental stop-string matcher.
#[derive(Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
    stopped: bool,
}

impl StopMatcher {
    /// Match these strings (empty strings ignored).
    pub fn new(stops: &[String]) -> Self {
        StopMatcher {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            held: String::new(),
            stopped: false,
        }
    }

    /// Whether a stop string completed.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Feed a piece; returns the text now safe to emit.
    pub fn push(&mut self, piece: &str) -> String {
        if self.stopped {
            return String::new();
        }
        if self.stops.is_empty() {
            return piece.to_owned();
        }
        self.held.push_str(piece);
        // Earliest complete stop string.
        if let Some(at) = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min()
        {
            self.stopped = true;
            let out = self.held[..at].to_owned();
            self.held.clear();
            return out;
        }
        // Keep the longest suffix that is a proper prefix of some stop string.
        let mut keep = 0;
        for s in &self.stops {
            for (i, _) in s.char_indices().skip(1) {
                if i > keep && self.held.ends_with(&s[..i]) {
                    keep = i;
                }
            }
        }
        let cut = self.held.len() - keep;
        let out = self.held[..cut].to_owned();
        self.held.drain(..cut);
        out
    }

    /// The generation ended: release what was held.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
        let mut m = StopMatcher::new(&stops);
        let mut out = String::new();
        for p in pieces {
            out += &m.push(p);
        }
        out += &m.finish();
        (out, m.stopped())
    }

    #[test]
    fn stops_across_pieces() {
        assert_eq!(
            run(&["END"], &["hello E", "N", "D more"]),
            ("hello ".into(), true)
        );
        assert_eq!(
            run(&["END"], &["hello E", "N", "x"]),
            ("hello ENx".into(), false)
        );
        assert_eq!(run(&[], &["a", "b"]), ("ab".into(), false));
        assert_eq!(run(&["\n\n", "ö!"], &["xyö", "!z"]), ("xy".into(), true));
        // Held text is never emitted early.
        let mut m = StopMatcher::new(&["abc".to_string()]);
        assert_eq!(m.push("xab"), "x");
        assert_eq!(m.push("d"), "abd");
    }
}
