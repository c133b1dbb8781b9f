//! The typed buffer API: device-resident weights and seam buffers, checked lengths, launched on
//! the engine's stream through the same dispatch as the raw API.

use super::device::DeviceBuffer;
use super::engine::{CudaEngine, RawCall, RawIo, RawProjection, RawWeights};
use crate::error::{Error, Result};
use crate::ops::{Op, Route};
use crate::spec::Config;
use crate::weights::SeamWeights;
use half::bf16;

/// One seam's weights on the device.
pub struct DeviceSeamWeights {
    /// fn [mixes, n*H].
    pub fn_: DeviceBuffer<f32>,
    /// The entry seam's folded weight [mixes, H], when uploaded for the entry seam.
    pub fnb: Option<DeviceBuffer<f32>>,
    /// fn prepared for the cluster kernels ([`CudaEngine::split_fn_weight`]), for the seams
    /// with four streams and 24 mixes.
    pub fn_split: Option<DeviceBuffer<u32>>,
    /// scale `[3]` (or `[1]` for the head).
    pub scale: DeviceBuffer<f32>,
    /// base `[mixes]`.
    pub base: DeviceBuffer<f32>,
    /// RMSNorm weight `[H]`, when the fused norm is wanted.
    pub norm_weight: Option<DeviceBuffer<f32>>,
}

impl DeviceSeamWeights {
    /// Uploads `w`; `norm` keeps its norm weight (fused RMSNorm), `entry` also folds fn for the
    /// entry seam. Other seams with four streams and 24 mixes also get fn prepared for the
    /// cluster kernels.
    pub fn upload(
        e: &CudaEngine,
        cfg: &Config,
        w: &SeamWeights,
        norm: bool,
        entry: bool,
    ) -> Result<Self> {
        let fn_ = e.upload(&w.fn_)?;
        let fnb = if entry {
            let b = e.zeros::<f32>(cfg.mixes() * cfg.hidden)?;
            // SAFETY: both buffers were sized for cfg just above.
            unsafe { e.fold_entry_weight(cfg, fn_.ptr(), b.ptr(), e.stream())? };
            e.sync()?;
            Some(b)
        } else {
            None
        };
        let fn_split = if entry {
            None
        } else {
            prepare_fn(e, cfg, &fn_)?
        };
        if fn_split.is_some() {
            e.sync()?;
        }
        Ok(DeviceSeamWeights {
            fnb,
            fn_split,
            fn_,
            scale: e.upload(&w.scale)?,
            base: e.upload(&w.base)?,
            norm_weight: if norm {
                Some(e.upload(&w.norm_weight)?)
            } else {
                None
            },
        })
    }

    /// The raw pointers.
    pub fn raw(&self) -> RawWeights {
        RawWeights {
            fn_: self.fn_.ptr(),
            fnb: self.fnb.as_ref().map_or(0, |b| b.ptr()),
            fn_split: self.fn_split.as_ref().map_or(0, |b| b.ptr()),
            scale: self.scale.ptr(),
            base: self.base.ptr(),
            norm_weight: self.norm_weight.as_ref().map_or(0, |b| b.ptr()),
        }
    }
}

/// fn prepared for the cluster kernels ([`CudaEngine::split_fn_weight`], queued on the engine's
/// stream), where fn is one they take prepared: four streams, 24 mixes, H a multiple of the
/// kernels' chunk; else None.
pub(crate) fn prepare_fn(
    e: &CudaEngine,
    cfg: &Config,
    fn_: &DeviceBuffer<f32>,
) -> Result<Option<DeviceBuffer<u32>>> {
    if cfg.n != 4
        || cfg.mixes() != 24
        || !cfg.hidden.is_multiple_of(super::plan::CHUNK)
        || fn_.len() != 24 * 4 * cfg.hidden
    {
        return Ok(None);
    }
    let b = e.zeros::<u32>(CudaEngine::fn_split_words(cfg))?;
    // SAFETY: fn holds 24 x 4H elements (checked above), b was sized for cfg just above.
    unsafe { e.split_fn_weight(cfg, fn_.ptr(), b.ptr(), e.stream())? };
    Ok(Some(b))
}

/// Per-token coefficients (post, comb, pre) on the device.
pub struct Coeffs {
    /// post `[T,n]`.
    pub post: DeviceBuffer<f32>,
    /// comb `[T,n,n]`.
    pub comb: DeviceBuffer<f32>,
    /// pre `[T,n]`.
    pub pre: DeviceBuffer<f32>,
}

impl Coeffs {
    /// Zeroed coefficients for `t` tokens.
    pub fn zeros(e: &CudaEngine, cfg: &Config, t: usize) -> Result<Self> {
        Ok(Coeffs {
            post: e.zeros(t * cfg.n)?,
            comb: e.zeros(t * cfg.n * cfg.n)?,
            pre: e.zeros(t * cfg.n)?,
        })
    }
    /// Copies of host coefficients.
    pub fn upload(e: &CudaEngine, post: &[f32], comb: &[f32], pre: &[f32]) -> Result<Self> {
        Ok(Coeffs {
            post: e.upload(post)?,
            comb: e.upload(comb)?,
            pre: e.upload(pre)?,
        })
    }
    fn check(&self, what: &str, cfg: &Config, t: usize) -> Result<()> {
        Error::check_len(&format!("{what}post"), &[t, cfg.n], self.post.len())?;
        Error::check_len(&format!("{what}comb"), &[t, cfg.n, cfg.n], self.comb.len())?;
        Error::check_len(&format!("{what}pre"), &[t, cfg.n], self.pre.len())
    }
}

/// The outputs of a seam on the device.
pub struct SeamBuffers {
    /// r' `[T,n,H]`.
    pub residual: DeviceBuffer<bf16>,
    /// layer_input `[T,H]`.
    pub layer_input: DeviceBuffer<bf16>,
    /// This seam's (post, comb, pre).
    pub coeffs: Coeffs,
    /// MXFP8 values and scales, when wanted.
    pub fp8: Option<(DeviceBuffer<u8>, DeviceBuffer<u8>)>,
}

impl SeamBuffers {
    /// Zeroed outputs for `t` tokens.
    pub fn zeros(e: &CudaEngine, cfg: &Config, t: usize, fp8: bool) -> Result<Self> {
        let h = cfg.hidden;
        Ok(SeamBuffers {
            residual: e.zeros(t * cfg.n * h)?,
            layer_input: e.zeros(t * h)?,
            coeffs: Coeffs::zeros(e, cfg, t)?,
            fp8: if fp8 {
                Some((e.zeros(t * h)?, e.zeros(t * h / 32)?))
            } else {
                None
            },
        })
    }
}

impl CudaEngine {
    #[allow(clippy::too_many_arguments)]
    /// The V4.1 seam on device buffers: r' = post_map(x, r, carried post/comb);
    /// layer_input = rmsnorm(collapse(r', carried pre)); this seam's gates into `out.coeffs`.
    pub fn seam(
        &self,
        cfg: &Config,
        t: usize,
        x: &DeviceBuffer<bf16>,
        residual: &DeviceBuffer<bf16>,
        carried: &Coeffs,
        w: &DeviceSeamWeights,
        out: &mut SeamBuffers,
    ) -> Result<Route> {
        self.seam_call(Op::Seam, cfg, t, x, residual, carried, w, out)
    }

    #[allow(clippy::too_many_arguments)]
    /// The V4 seam on device buffers: r' = post_map(x, r, carried post/comb); this seam's gates
    /// into `out.coeffs`; layer_input = rmsnorm(collapse(r', this seam's pre)). `carried.pre` is
    /// not read.
    pub fn seam_v4(
        &self,
        cfg: &Config,
        t: usize,
        x: &DeviceBuffer<bf16>,
        residual: &DeviceBuffer<bf16>,
        carried: &Coeffs,
        w: &DeviceSeamWeights,
        out: &mut SeamBuffers,
    ) -> Result<Route> {
        self.seam_call(Op::SeamV4, cfg, t, x, residual, carried, w, out)
    }

    #[allow(clippy::too_many_arguments)]
    fn seam_call(
        &self,
        op: Op,
        cfg: &Config,
        t: usize,
        x: &DeviceBuffer<bf16>,
        residual: &DeviceBuffer<bf16>,
        carried: &Coeffs,
        w: &DeviceSeamWeights,
        out: &mut SeamBuffers,
    ) -> Result<Route> {
        let (n, h) = (cfg.n, cfg.hidden);
        Error::check_len("x", &[t, h], x.len())?;
        Error::check_len("residual", &[t, n, h], residual.len())?;
        carried.check("", cfg, t)?;
        Error::check_len("residual_out", &[t, n, h], out.residual.len())?;
        Error::check_len("layer_input", &[t, h], out.layer_input.len())?;
        out.coeffs.check("", cfg, t)?;
        Error::check_len("fn", &[cfg.mixes(), cfg.k()], w.fn_.len())?;
        let io = RawIo {
            x: x.ptr(),
            residual: residual.ptr(),
            post: carried.post.ptr(),
            comb: carried.comb.ptr(),
            pre: if op == Op::Seam { carried.pre.ptr() } else { 0 },
            residual_out: out.residual.ptr(),
            layer_input: out.layer_input.ptr(),
            post_out: out.coeffs.post.ptr(),
            comb_out: out.coeffs.comb.ptr(),
            pre_out: out.coeffs.pre.ptr(),
            fp8_values: out.fp8.as_ref().map_or(0, |f| f.0.ptr()),
            fp8_scales: out.fp8.as_ref().map_or(0, |f| f.1.ptr()),
        };
        let call = RawCall {
            op,
            t,
            io,
            w: w.raw(),
            proj: RawProjection::default(),
        };
        // SAFETY: every buffer's length was checked against the shapes above.
        unsafe { self.launch_raw(cfg, &call, self.stream()) }
    }

    /// The compressor projection on device buffers: y `[m,n]` = a `[m,k]` . w `[n,k]`^T, y f32.
    pub fn projection(
        &self,
        cfg: &Config,
        (m, n, k): (usize, usize, usize),
        a: &DeviceBuffer<bf16>,
        w: &DeviceBuffer<bf16>,
        y: &mut DeviceBuffer<f32>,
    ) -> Result<Route> {
        self.projection_into(cfg, (m, n, k), a, w, (y.ptr(), y.len(), false))
    }

    /// The compressor projection with bf16 output: y `[m,n]` is the f32 result of
    /// [`CudaEngine::projection`] rounded once to nearest even (the same kernels, the same sums).
    pub fn projection_bf16(
        &self,
        cfg: &Config,
        (m, n, k): (usize, usize, usize),
        a: &DeviceBuffer<bf16>,
        w: &DeviceBuffer<bf16>,
        y: &mut DeviceBuffer<bf16>,
    ) -> Result<Route> {
        self.projection_into(cfg, (m, n, k), a, w, (y.ptr(), y.len(), true))
    }

    fn projection_into(
        &self,
        cfg: &Config,
        (m, n, k): (usize, usize, usize),
        a: &DeviceBuffer<bf16>,
        w: &DeviceBuffer<bf16>,
        (y, y_len, y_bf16): (u64, usize, bool),
    ) -> Result<Route> {
        Error::check_len("a", &[m, k], a.len())?;
        Error::check_len("w", &[n, k], w.len())?;
        Error::check_len("out", &[m, n], y_len)?;
        let call = RawCall::projection(RawProjection {
            a: a.ptr(),
            w: w.ptr(),
            y,
            m,
            n,
            k,
            y_bf16,
        });
        // SAFETY: lengths checked above; y holds m x n elements of the type y_bf16 names.
        unsafe { self.launch_raw(cfg, &call, self.stream()) }
    }
}
