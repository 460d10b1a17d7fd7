//! How many prompt tokens a device prefill step takes: the default per prefill mode,
//! and the rule that a default never costs context.
//!
//! Key design choice: a pure policy over a `fit` callback (chunk → the context the
//! memory then allows), so it is tested without a GPU; the CUDA open supplies the
//! callback from its ledger.

use crate::runtime::PrefillMode;

/// The chunk every default falls back to when the larger one would shorten the context.
pub(crate) const SMALL_CHUNK: usize = 1024;

/// Prompt tokens per chunk by default. The exact path expands each projection's weights
/// to bf16 once per chunk, so on an 8B model 256-token chunks spent more on expansion and
/// small GEMMs than 1024-token ones, and 2048-token ones prefill 7% faster again (16.2k
/// against 15.1–15.4k tok/s, two H200 calls; 0.86 GB of scratch against 0.55). The FP8
/// path expands nothing and measured 7–10% slower with 2048-token chunks than with 1024
/// (docs/CUDA.md), so it keeps 1024 (0.25 GB).
pub fn default_chunk(mode: PrefillMode) -> usize {
    match mode {
        PrefillMode::Exact => 2048,
        PrefillMode::Fp8 => SMALL_CHUNK,
    }
}

/// The chunk and the context (from `fit`) to open with. `asked` (the user's chunk) is
/// kept as it is; a default larger than [`SMALL_CHUNK`] gives way to it when that leaves
/// a longer context, or fits where the default does not. Chunks never exceed
/// `max_context` (their scratch would idle).
pub(crate) fn choose<E>(
    asked: Option<usize>,
    mode: PrefillMode,
    max_context: usize,
    fit: impl Fn(usize) -> Result<usize, E>,
) -> Result<(usize, usize), E> {
    let clamp = |c: usize| c.min(max_context).max(1);
    let chunk = clamp(asked.unwrap_or_else(|| default_chunk(mode)));
    let got = fit(chunk);
    let small = clamp(SMALL_CHUNK);
    if asked.is_some() || small >= chunk {
        return got.map(|ctx| (chunk, ctx));
    }
    match (got, fit(small)) {
        (Ok(ctx), Ok(c2)) if c2 > ctx => Ok((small, c2)),
        (Ok(ctx), _) => Ok((chunk, ctx)),
        (Err(_), Ok(c2)) => Ok((small, c2)),
        (Err(e), Err(_)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A memory of `room` bytes: `per_chunk` per chunk token, `per_ctx` per context
    /// token, contexts up to `max`.
    fn memory(
        room: u64,
        per_chunk: u64,
        per_ctx: u64,
        max: usize,
    ) -> impl Fn(usize) -> Result<usize, String> {
        move |chunk| {
            let left = room
                .checked_sub(chunk as u64 * per_chunk)
                .ok_or("no room")?;
            let ctx = ((left / per_ctx) as usize).min(max);
            if ctx < 16 {
                Err("no room".into())
            } else {
                Ok(ctx)
            }
        }
    }

    #[test]
    fn defaults_per_mode() {
        assert_eq!(default_chunk(PrefillMode::Exact), 2048);
        assert_eq!(default_chunk(PrefillMode::Fp8), 1024);
    }

    #[test]
    fn default_keeps_its_size_when_the_context_is_whole() {
        let fit = memory(1 << 40, 100, 100, 8192);
        assert_eq!(
            choose(None, PrefillMode::Exact, 8192, &fit),
            Ok((2048, 8192))
        );
        assert_eq!(choose(None, PrefillMode::Fp8, 8192, &fit), Ok((1024, 8192)));
    }

    #[test]
    fn default_gives_way_when_it_would_cost_context() {
        // Room for 2048 chunk tokens + 4000 context, or 1024 + 5024.
        let fit = memory(6048 * 100, 100, 100, 8192);
        assert_eq!(
            choose(None, PrefillMode::Exact, 8192, &fit),
            Ok((1024, 5024))
        );
        // Room for the small chunk only.
        let fit = memory(1100 * 100, 100, 100, 8192);
        assert_eq!(choose(None, PrefillMode::Exact, 8192, &fit), Ok((1024, 76)));
    }

    #[test]
    fn an_asked_chunk_is_kept_or_the_error_stands() {
        let fit = memory(6048 * 100, 100, 100, 8192);
        assert_eq!(
            choose(Some(2048), PrefillMode::Exact, 8192, &fit),
            Ok((2048, 4000))
        );
        let fit = memory(1100 * 100, 100, 100, 8192);
        assert!(choose(Some(2048), PrefillMode::Exact, 8192, &fit).is_err());
        assert!(choose(None, PrefillMode::Exact, 8192, memory(10, 100, 100, 8192)).is_err());
    }

    #[test]
    fn chunks_never_exceed_the_context() {
        let fit = memory(1 << 40, 100, 100, 600);
        assert_eq!(choose(None, PrefillMode::Exact, 600, &fit), Ok((600, 600)));
        assert_eq!(
            choose(Some(4096), PrefillMode::Fp8, 600, &fit),
            Ok((600, 600))
        );
    }
}
