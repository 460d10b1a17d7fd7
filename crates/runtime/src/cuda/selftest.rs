//! `favlo selftest cuda`: the kernels a chat runs, checked on the user's own GPU
//! against the float64 CPU references ([`crate::cpu::reference`]) on random inputs,
//! each check with its stated bound.
//!
//! Key design choice: the kernels are launched exactly as the chat pipeline picks
//! them on this GPU (the `Auto` GEMV kernel, PDL where the arch has it, the batched
//! GEMV's own warps, the default attention kernel), from fixed seeds and with the
//! test suite's bounds, so a GPU or driver the project never ran (an RTX 30xx, a new
//! driver) is checked in seconds by anyone with the binary, without cargo. A failed
//! check is a result, not an error: every check runs and the caller decides.

use std::sync::Arc;

use favlo_mx::{ElementFormat, MxView};

use super::bench::{Rng, random_mx};
use super::{
    AttentionDecode, AttnOut, BlasLt, CudaContext, CudaError, CudaKernels, DeviceSampler, GemvMma,
    KernelSet, KvCache, MxTiled, SAMPLE_OUT_LEN, SampleParams, WarmReport, XPrep,
    attn_partials_len, tile_mx, warm_kernels,
};
use crate::cpu::{AttnShape, WeightRef, reference};
use crate::ledger::{Owner, SpanKind};

/// One check's outcome: its error in the stated measure against its bound.
#[derive(Debug, Clone)]
pub struct Check {
    /// What ran, e.g. `MX GEMV MXFP4 1000×3072`.
    pub name: String,
    /// How the error is measured (the bound's meaning).
    pub measure: &'static str,
    pub error: f64,
    pub bound: f64,
}

impl Check {
    /// Within the bound (a NaN or infinite error fails).
    pub fn passed(&self) -> bool {
        self.error.is_finite() && self.error <= self.bound
    }
}

/// max |got − want| / max |want|: the GEMV's measure (x keeps ~22 bits per block).
const REL_MAX: &str = "max|err| / max|ref|";
/// max |got − want| / (1 + |want|): element-wise f32 arithmetic.
const ABS_SCALED: &str = "max|err| / (1 + |ref|)";

/// `measure` of a finite output of the reference's length, else infinite (a NaN or an
/// unwritten value fails the check).
fn checked(got: &[f32], want: &[f64], measure: fn(&[f32], &[f64]) -> f64) -> f64 {
    if got.len() != want.len() || got.iter().any(|v| !v.is_finite()) {
        return f64::INFINITY;
    }
    measure(got, want)
}

fn values(rng: &mut Rng, n: usize, amp: f32) -> Vec<f32> {
    (0..n).map(|_| rng.uniform(-amp, amp)).collect()
}

/// Compiles the kernel modules the checks load into the disk cache, side by side, where
/// it does not hold them yet (a first run on a GPU; the loads then read the cache).
pub fn warm(ctx: &CudaContext) -> Result<WarmReport, CudaError> {
    warm_kernels(&ctx.arch(), KernelSet::Selftest)
}

/// Runs every check on `ctx`'s GPU, calling `progress` after each; the checks' memory
/// is swept from the device ledger before this returns.
pub fn run(
    ctx: &Arc<CudaContext>,
    progress: &mut dyn FnMut(&Check),
) -> Result<Vec<Check>, CudaError> {
    let owner = Owner::mint("selftest");
    let result = run_all(ctx, &owner, progress);
    ctx.sweep(&owner)?;
    result
}

fn run_all(
    ctx: &Arc<CudaContext>,
    owner: &Owner,
    progress: &mut dyn FnMut(&Check),
) -> Result<Vec<Check>, CudaError> {
    let mut out = Vec::new();
    let mut push = |c: Check, out: &mut Vec<Check>| {
        progress(&c);
        out.push(c);
    };
    let mut rng = Rng::new(0x5e1f_7e57);
    let mut g = GemvMma::load(ctx)?;
    // As the chat pipeline launches them: PDL from sm_90.
    g.pdl = ctx.compute_capability().0 >= 9;
    for format in [ElementFormat::Fp4E2M1, ElementFormat::Fp8E4M3] {
        for (rows, cols) in [(67, 1000), (1000, 3072), (4096, 4096)] {
            for c in gemv(ctx, owner, &g, format, rows, cols, &mut rng)? {
                push(c, &mut out);
            }
        }
    }
    let k = CudaKernels::load(ctx)?;
    push(rms_norm(ctx, owner, &k, &mut rng)?, &mut out);
    let a = AttentionDecode::load(ctx)?;
    for f16_cache in [true, false] {
        push(attention(ctx, owner, &a, f16_cache, &mut rng)?, &mut out);
    }
    push(greedy(ctx, owner, &mut rng)?, &mut out);
    push(blas_bf16(ctx, owner, &mut rng)?, &mut out);
    Ok(out)
}

/// The MX GEMV (`Auto`), one vector and the batched 2..=4, against f64.
fn gemv(
    ctx: &Arc<CudaContext>,
    owner: &Owner,
    g: &GemvMma,
    format: ElementFormat,
    rows: usize,
    cols: usize,
    rng: &mut Rng,
) -> Result<Vec<Check>, CudaError> {
    let (layout, packed) = random_mx(format, rows, cols, (118, 126), rng);
    let view = MxView::new(layout, &packed).map_err(|e| CudaError::Shape {
        op: "selftest",
        detail: e.to_string(),
    })?;
    let w = MxTiled::upload(ctx, owner, &tile_mx(view))?;
    let pc = layout.padded_cols();
    let name = super::bench::format_name(format);
    let mut preps = Vec::new();
    let mut wants = Vec::new();
    for _ in 0..super::GEMV_BATCH_MAX {
        let x = values(rng, cols, 2.0);
        wants.push(reference::linear(&x, &WeightRef::Mx(view), None));
        let mut xp = x;
        xp.resize(pc, 0.0);
        let xd = ctx.upload(owner, SpanKind::Scratch, &xp)?;
        let mut prep = XPrep::new(ctx, owner, pc)?;
        g.prep_x(&xd, pc, &mut prep)?;
        preps.push(prep);
    }
    let mut ys = (0..super::GEMV_BATCH_MAX)
        .map(|_| ctx.upload(owner, SpanKind::Scratch, &vec![f32::NAN; rows]))
        .collect::<Result<Vec<_>, _>>()?;
    let mut checks = Vec::new();
    let batches: &[usize] = if rows >= 1000 { &[1, 2, 3, 4] } else { &[1] };
    for &n in batches {
        let xs: Vec<&XPrep> = preps[..n].iter().collect();
        let mut yr: Vec<_> = ys[..n].iter_mut().collect();
        g.gemv_batch(&w, &xs, &mut yr, false)?;
        let mut error = 0f64;
        for (y, want) in ys[..n].iter().zip(&wants) {
            error = error.max(checked(&ctx.download(y)?, want, reference::max_rel_err));
        }
        checks.push(Check {
            name: if n == 1 {
                // The kernel `Auto` picks here, for a bug report.
                let k = g.resolve(format, rows.div_ceil(32), layout.data_row_bytes() / 128);
                format!("MX GEMV {name} {rows}×{cols} ({k:?})")
            } else {
                format!("MX GEMV {name} {rows}×{cols}, {n} vectors")
            },
            measure: REL_MAX,
            error,
            bound: 1e-5,
        });
    }
    Ok(checks)
}

fn rms_norm(
    ctx: &Arc<CudaContext>,
    owner: &Owner,
    k: &CudaKernels,
    rng: &mut Rng,
) -> Result<Check, CudaError> {
    let (rows, dim) = (7, 4096);
    let x = values(rng, rows * dim, 3.0);
    let w = values(rng, dim, 1.5);
    let xd = ctx.upload(owner, SpanKind::Scratch, &x)?;
    let wd = ctx.upload(owner, SpanKind::Scratch, &w)?;
    let mut od = ctx.upload(owner, SpanKind::Scratch, &vec![f32::NAN; rows * dim])?;
    k.rms_norm(&xd, &wd, 1e-6, &mut od)?;
    Ok(Check {
        name: format!("RMSNorm {rows}×{dim}"),
        measure: ABS_SCALED,
        error: checked(
            &ctx.download(&od)?,
            &reference::rms_norm(&x, &w, 1e-6),
            reference::max_abs_scaled_err,
        ),
        bound: 1e-5,
    })
}

/// Decode attention (the default kernel for this capacity) over a cache of 1000 keys
/// in 2048, 32 query heads on 8 kv heads of 128, as Qwen3-8B.
fn attention(
    ctx: &Arc<CudaContext>,
    owner: &Owner,
    a: &AttentionDecode,
    f16_cache: bool,
    rng: &mut Rng,
) -> Result<Check, CudaError> {
    let (nh, nkv, hd, len, cap) = (32, 8, 128, 1000, 2048);
    let q = values(rng, nh * hd, 1.0);
    let k = values(rng, cap * nkv * hd, 1.0);
    let v = values(rng, cap * nkv * hd, 2.0);
    let mut cache = KvCache::new(ctx, owner, f16_cache, cap, nkv)?;
    // The reference sees the values the cache holds.
    let (k, v) = cache.fill(ctx, &k, &v)?;
    let scale = 1.0 / (hd as f32).sqrt();
    let shape = AttnShape {
        n_heads: nh,
        n_kv_heads: nkv,
        head_dim: hd,
    };
    let kv = len * nkv * hd;
    let want = reference::attention_causal(&q, &k[..kv], &v[..kv], shape, len - 1, 1, scale);
    let qd = ctx.upload(owner, SpanKind::Scratch, &q)?;
    let lenp = ctx.upload(owner, SpanKind::Scratch, &[len as i32 - 1])?;
    let mut part = ctx.alloc::<f32>(owner, SpanKind::Scratch, attn_partials_len(nh, cap))?;
    let mut o = ctx.upload(owner, SpanKind::Scratch, &vec![f32::NAN; nh * hd])?;
    a.decode(
        &qd,
        &cache,
        cap,
        nh,
        nkv,
        &lenp,
        1,
        scale,
        &mut part,
        AttnOut::F32(&mut o),
    )?;
    Ok(Check {
        name: format!(
            "decode attention, {} cache, {nh}/{nkv} heads, {len} keys",
            if f16_cache { "f16" } else { "f32" }
        ),
        measure: ABS_SCALED,
        error: checked(&ctx.download(&o)?, &want, reference::max_abs_scaled_err),
        bound: 1e-5,
    })
}

/// The device's greedy pick over a 151936-token vocabulary against the host argmax
/// (error 0 when they agree, 1 when not).
fn greedy(ctx: &Arc<CudaContext>, owner: &Owner, rng: &mut Rng) -> Result<Check, CudaError> {
    let vocab = 151_936;
    let logits = values(rng, vocab, 20.0);
    let want = reference::argmax(&logits);
    let s = DeviceSampler::load(ctx)?;
    let ld = ctx.upload(owner, SpanKind::Scratch, &logits)?;
    let mut od = ctx.alloc::<u32>(owner, SpanKind::Scratch, SAMPLE_OUT_LEN)?;
    s.sample(&ld, vocab, &SampleParams::GREEDY, 0.0, &mut od)?;
    let (id, _) = s.read(&od)?;
    Ok(Check {
        name: format!("greedy token on the device, vocabulary {vocab}"),
        measure: "0 = same token as the host",
        error: if id as usize == want { 0.0 } else { 1.0 },
        bound: 0.0,
    })
}

/// The cuBLASLt bf16 GEMM (f32 out) of the chat prefill against f64: each element's
/// error over the sum of its products' magnitudes.
fn blas_bf16(ctx: &Arc<CudaContext>, owner: &Owner, rng: &mut Rng) -> Result<Check, CudaError> {
    let (m, n, k) = (64, 512, 1024);
    let bf = |v: f32| half::bf16::from_f32(v).to_bits();
    let x: Vec<u16> = values(rng, m * k, 2.0).into_iter().map(bf).collect();
    let w: Vec<u16> = values(rng, n * k, 0.5).into_iter().map(bf).collect();
    let mut blas = BlasLt::new(ctx, owner)?;
    let xd = ctx.upload(owner, SpanKind::Scratch, &x)?;
    let wd = ctx.upload(owner, SpanKind::Scratch, &w)?;
    let mut yd = ctx.upload(owner, SpanKind::Scratch, &vec![f32::NAN; m * n])?;
    blas.gemm_bf16(&xd, &wd, &mut yd, m, n, k, false)?;
    let y = ctx.download(&yd)?;
    let f = |b: u16| f64::from(half::bf16::from_bits(b).to_f32());
    let mut error = 0f64;
    for i in 0..m {
        for j in 0..n {
            let (mut s, mut a) = (0f64, 0f64);
            for t in 0..k {
                let p = f(x[i * k + t]) * f(w[j * k + t]);
                s += p;
                a += p.abs();
            }
            let got = f64::from(y[i * n + j]);
            let e = if got.is_finite() {
                (got - s).abs() / a.max(1e-30)
            } else {
                f64::INFINITY
            };
            error = error.max(e);
        }
    }
    Ok(Check {
        name: format!("bf16 GEMM (cuBLASLt) {m}×{k} · {k}×{n}"),
        measure: "max|err| / Σ|x·w|",
        error,
        bound: 2e-5,
    })
}
