//! The one-launch attention and the o projection in one kernel (`kernels/attn_o.cu`):
//! [`AttentionDecode::decode_qkv_o`], a decode-bench experiment
//! (`cuda_decode_bench --attn fused-o`), not yet used by the chat.
//!
//! Key design choice: the blocks of the attention are also the o GEMV's blocks, one
//! row tile each, and copy their tile's weights into shared memory before the PDL wait,
//! so the o projection's bytes arrive while the attention's latency chain runs; a
//! device counter of finished kv heads replaces the kernel boundary. That needs every
//! block resident at once: the launch refuses a grid larger than the kernel's
//! occupancy allows.

use cudarc::driver::{CudaFunction, DevicePtr, DevicePtrMut, LaunchConfig, sys};
use favlo_mx::ElementFormat;

use super::onepass::{Dims, MAX_SPLITS, Ptrs, QkvRope, THREADS};
use super::{AttentionDecode, AttnOut, KvCache, shape};
use crate::cuda::compile::{LoadedModule, Module};
use crate::cuda::context::{CudaContext, DeviceBuffer};
use crate::cuda::gemv::XPrep;
use crate::cuda::launch::{arg_ptr, launch_raw};
use crate::cuda::{CudaError, Epilogue, MxTiled, driver_err};

/// The kernels' module: the one-pass attention's device code and the GEMV's chunk
/// arithmetic and epilogue, compiled on first use.
pub(crate) const FUSED_O_MODULE: Module = Module {
    name: "attention_fused_o",
    src: concat!(
        include_str!("../../../kernels/prep32.cuh"),
        include_str!("../../../kernels/fp8_sw.cuh"),
        include_str!("../../../kernels/attn_common.cuh"),
        "#define A1_NO_KERNELS 1\n",
        include_str!("../../../kernels/attention_onepass.cu"),
        include_str!("../../../kernels/gemv_common.cuh"),
        include_str!("../../../kernels/gemv_chunk.cuh"),
        include_str!("../../../kernels/attn_o.cu")
    ),
};

/// Bytes of shared memory per 128-byte chunk of a row tile: 4 KB of MXFP4 codes, 256
/// of scales, 1056 of the x slice (`AO_XSTRIDE`).
const SMEM_PER_CHUNK: usize = 4096 + 256 + 1056;

/// The loaded kernels (head size 128, group 4; f32 and f16 caches) and their occupancy.
pub(super) struct FusedO {
    f: [CudaFunction; 2],
    occ: [u32; 2],
    /// Dynamic shared memory each launch asks for (chunks × [`SMEM_PER_CHUNK`]).
    smem: usize,
}

/// The o projection a [`AttentionDecode::decode_qkv_o`] launch finishes with.
pub struct OTail<'a> {
    /// The o weights, MXFP4, [`crate::cuda::tile_mx`]-tiled.
    pub w: &'a MxTiled,
    /// Its rows (the residual, with an accumulating epilogue).
    pub y: &'a mut DeviceBuffer<f32>,
    /// The GEMV epilogue (`Epilogue::plain(true)` or `Epilogue::residual_norm`).
    pub epi: Epilogue<'a>,
    /// Two u32 counters, zero between launches (a fresh buffer is; launches leave them
    /// so).
    pub sync: &'a mut DeviceBuffer<u32>,
}

impl FusedO {
    fn load(ctx: &CudaContext, chunks: usize) -> Result<FusedO, CudaError> {
        let m = LoadedModule::load(ctx, FUSED_O_MODULE)?;
        let smem = chunks * SMEM_PER_CHUNK;
        let dyn_smem = i32::try_from(smem).map_err(|_| shape(format!("{smem} bytes")))?;
        let mut occ = [0u32; 2];
        let mut f = Vec::with_capacity(2);
        for (t, o) in ["f32", "f16"].iter().zip(occ.iter_mut()) {
            let func = m
                .module
                .load_function(&format!("attn_o_{t}_g4_hd128"))
                .map_err(driver_err("cuModuleGetFunction"))?;
            func.set_attribute(
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                dyn_smem,
            )
            .map_err(driver_err("cuFuncSetAttribute"))?;
            *o = func
                .occupancy_max_active_blocks_per_multiprocessor(THREADS, smem, None)
                .map_err(driver_err("cuOccupancyMaxActiveBlocksPerMultiprocessor"))?;
            f.push(func);
        }
        let f = f
            .try_into()
            .map_err(|_| shape("two fused kernels expected".into()))?;
        Ok(FusedO { f, occ, smem })
    }
}

impl AttentionDecode {
    /// Loads the fused kernels for o projections of `k` columns (compiled on first use).
    pub fn load_fused_o(&mut self, k: usize) -> Result<(), CudaError> {
        let chunks = k / 256;
        if self
            .fused_o
            .as_ref()
            .is_none_or(|f| f.smem != chunks * SMEM_PER_CHUNK)
        {
            self.fused_o = Some(FusedO::load(&self.ctx, chunks)?);
        }
        Ok(())
    }

    /// [`Self::decode_qkv`] into `prep` (the o projection's x preparation), then, in
    /// the same launch, `tail.y` (+)= o·attention with `tail.epi`. Heads of 128 in
    /// groups of 4, MXFP4 o weights; [`Self::load_fused_o`] first.
    #[allow(clippy::too_many_arguments)]
    pub fn decode_qkv_o(
        &self,
        src: &QkvRope<'_>,
        cache: &mut KvCache,
        capacity: usize,
        n_heads: usize,
        n_kv_heads: usize,
        pos: &DeviceBuffer<i32>,
        scale: f32,
        partials: &mut DeviceBuffer<f32>,
        prep: &mut XPrep,
        tail: OTail<'_>,
    ) -> Result<(), CudaError> {
        let d = Dims {
            capacity,
            n_heads,
            n_kv_heads,
            head_dim: 128,
            len_add: 1,
            scale,
        };
        let out = AttnOut::Prep(prep);
        self.qkv_launch(src, cache, d, pos, partials, out, Some(tail))
    }

    /// The fused launch, from the pointers `qkv_launch` set (x prep out) and the
    /// attention's own blocks per kv head.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fused_o_launch(
        &self,
        p: &Ptrs,
        f16: bool,
        gi: usize,
        d: Dims,
        splits: usize,
        (interleaved, eps): (bool, f32),
        mut t: OTail<'_>,
    ) -> Result<(), CudaError> {
        let fo = self
            .fused_o
            .as_ref()
            .ok_or_else(|| shape("load_fused_o was not called".into()))?;
        let l = t.w.layout;
        let tiles = l.rows.div_ceil(32);
        let chunks = l.data_row_bytes() / 128;
        let sms = self.one().sms;
        // Every o tile needs a block, and every block must be resident at once.
        let per_kv = splits.max(tiles.div_ceil(d.n_kv_heads.max(1)));
        let blocks = per_kv * d.n_kv_heads;
        let resident = fo.occ[usize::from(f16)] as usize * sms;
        if d.head_dim != 128
            || gi != 3
            || l.format != ElementFormat::Fp4E2M1
            || l.cols != d.n_heads * d.head_dim
            || chunks * SMEM_PER_CHUNK != fo.smem
            || !l.rows.is_multiple_of(32)
            || t.y.len() < l.rows
            || t.sync.len() < 2
            || p.xhl == 0
            || per_kv > MAX_SPLITS
            || per_kv > d.capacity.div_ceil(super::KEYS_PER_BLOCK)
            || blocks > resident
        {
            return Err(shape(format!(
                "attention + o: {}x{} {:?} o weights, {} heads of {} over {} kv heads, \
                 {blocks} blocks ({resident} resident), y {}",
                l.rows,
                l.cols,
                l.format,
                d.n_heads,
                d.head_dim,
                d.n_kv_heads,
                t.y.len()
            )));
        }
        let s = self.ctx.stream();
        let mut guards = Vec::new();
        let e = t.epi.raw(l.rows, l.cols, s, &mut guards)?;
        let (wd, _g0) = t.w.data.slice.device_ptr(s);
        let (wsc, _g1) = t.w.scales.slice.device_ptr(s);
        let (yp, _g2) = t.y.slice.device_ptr_mut(s);
        let (sp, _g3) = t.sync.slice.device_ptr_mut(s);
        let cap = i32::try_from(d.capacity).map_err(|_| shape("capacity".into()))?;
        let nkv = d.n_kv_heads as i32;
        let il = i32::from(interleaved);
        let mk = i32::try_from(self.min_keys.max(1)).unwrap_or(i32::MAX);
        let light = i32::from(self.light_fence);
        let rows = l.rows as i32;
        let nch = chunks as i32;
        let early = self.fused_o_early;
        let mut args = [
            arg_ptr(&p.qkv),
            arg_ptr(&p.bias),
            arg_ptr(&p.qw),
            arg_ptr(&p.kw),
            arg_ptr(&p.cos),
            arg_ptr(&p.sin),
            arg_ptr(&p.k),
            arg_ptr(&p.v),
            arg_ptr(&p.part),
            arg_ptr(&p.cnt),
            arg_ptr(&p.len),
            arg_ptr(&cap),
            arg_ptr(&nkv),
            arg_ptr(&il),
            arg_ptr(&mk),
            arg_ptr(&light),
            arg_ptr(&eps),
            arg_ptr(&d.scale),
            arg_ptr(&p.xhl),
            arg_ptr(&p.xs),
            arg_ptr(&wd),
            arg_ptr(&wsc),
            arg_ptr(&yp),
            arg_ptr(&rows),
            arg_ptr(&nch),
            arg_ptr(&e),
            arg_ptr(&sp),
            arg_ptr(&early),
        ];
        let cfg = LaunchConfig {
            grid_dim: (per_kv as u32, d.n_kv_heads as u32, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: fo.smem as u32,
        };
        // SAFETY: the kernel's parameters in order and type. The attention's buffers
        // were checked by `qkv_launch` (per_kv ≤ capacity / 32 blocks per kv head fit
        // the partials); the o tiles hold rows / 32 × chunks tiles of 4 KB + 256 bytes
        // (`MxTiled`), y ≥ rows, sync ≥ 2 counters, the epilogue's buffers by
        // `Epilogue::raw`; the grid fits the resident blocks the kernel's spin needs.
        unsafe { launch_raw(s, &fo.f[usize::from(f16)], cfg, &mut args, self.pdl) }
            .map_err(driver_err("cuLaunchKernelEx(attn_o)"))?;
        drop(guards);
        Ok(())
    }
}
