//! The step graphs a CUDA chat opening keeps: captured on first use, at most a fixed
//! number of each kind, the least recently used dropped to make room for a new one.
//!
//! Key design choice: the driver allocates each instantiated graph's memory outside the
//! ledger's spans (about 0.5 MiB per decode step graph of an 8B model on an H200, in 2
//! MiB chunks), and an opening of several sequences can step any set of them in any
//! attention bucket (up to 15 × 11 batched graphs), so the count is bounded and the open
//! reserves [`GRAPH_BYTES`] per graph it may keep. Dropping a graph that is still
//! running is safe: the driver frees it when its launch completes.

use crate::error::LlamaError;

/// Device memory set aside at open per step graph an opening may keep (measured: 6 MiB
/// for 13 step graphs of a Qwen3-8B opening of 4 sequences, the driver taking 2 MiB at
/// a time).
pub(super) const GRAPH_BYTES: u64 = 1 << 20;

/// Batch-1 step graphs kept (keyed by sequence and bucket): a chat growing through
/// every bucket needs 11, a lone sequence of another slot more.
pub(super) const MAX_STEP_GRAPHS: usize = 16;

/// Batched step graphs kept (keyed by sequence mask and bucket).
pub(super) const MAX_BATCH_GRAPHS: usize = 16;

/// Graphs keyed by `K`, most recently used last.
pub(super) struct GraphCache<K, G> {
    cap: usize,
    kept: Vec<(K, G)>,
}

impl<K: PartialEq + Copy, G> GraphCache<K, G> {
    /// An empty cache keeping at most `cap` graphs (at least one).
    pub(super) fn new(cap: usize) -> GraphCache<K, G> {
        GraphCache {
            cap: cap.max(1),
            kept: Vec::new(),
        }
    }

    /// The graph of `key`, made by `make` if it is not kept (dropping the least
    /// recently used one when full); it becomes the most recently used.
    pub(super) fn get_or_make(
        &mut self,
        key: K,
        make: impl FnOnce() -> Result<G, LlamaError>,
    ) -> Result<&G, LlamaError> {
        match self.kept.iter().position(|(k, _)| *k == key) {
            Some(i) => {
                let hit = self.kept.remove(i);
                self.kept.push(hit);
            }
            None => {
                let g = make()?;
                if self.kept.len() >= self.cap {
                    self.kept.remove(0);
                }
                self.kept.push((key, g));
            }
        }
        self.kept
            .last()
            .map(|(_, g)| g)
            .ok_or_else(|| LlamaError::Device {
                message: "step graph missing".into(),
            })
    }

    /// Graphs kept now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.kept.len()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::GraphCache;
    use crate::error::LlamaError;

    #[test]
    fn the_cache_makes_each_graph_once_and_drops_the_least_recently_used() {
        let mut c: GraphCache<u32, String> = GraphCache::new(2);
        let mut made = Vec::new();
        let mut get = |c: &mut GraphCache<u32, String>, k: u32| -> String {
            c.get_or_make(k, || {
                made.push(k);
                Ok(format!("g{k}"))
            })
            .unwrap()
            .clone()
        };
        assert_eq!(get(&mut c, 1), "g1");
        assert_eq!(get(&mut c, 2), "g2");
        assert_eq!(get(&mut c, 1), "g1"); // kept: 1 is now the most recent
        assert_eq!(get(&mut c, 3), "g3"); // full: drops 2, the least recent
        assert_eq!(c.len(), 2);
        assert_eq!(get(&mut c, 1), "g1");
        assert_eq!(get(&mut c, 2), "g2"); // made again
        assert_eq!(made, [1, 2, 3, 2]);
    }

    #[test]
    fn a_failed_capture_keeps_what_was_there() {
        let mut c: GraphCache<u32, u32> = GraphCache::new(1);
        c.get_or_make(7, || Ok(70)).unwrap();
        let failed = c.get_or_make(8, || {
            Err(LlamaError::Device {
                message: "capture failed".into(),
            })
        });
        assert!(failed.is_err());
        assert_eq!(c.len(), 1);
        assert_eq!(*c.get_or_make(7, || Ok(0)).unwrap(), 70);
    }
}
