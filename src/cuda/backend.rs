//! The CUDA engine as a host-level [`Backend`]: uploads the inputs, poisons every output buffer
//! with NaN (so an element no kernel writes fails the check), runs the op through the same
//! dispatch as the raw API, and downloads the results. When no GPU path serves the inputs (and no
//! path is forced) it falls back to the CPU reference and says why in the route.

use super::device::DeviceBuffer;
use super::engine::{CudaEngine, PathChoice, RawCall, RawIo, RawProjection, RawWeights};
use crate::error::{Error, Result};
use crate::ops::{Backend, CpuBackend, Declined, Mxfp8, Op, OpArgs, OpOutputs, Route};
use half::bf16;

fn poisoned<T: super::device::Elem>(e: &CudaEngine, len: usize) -> Result<DeviceBuffer<T>> {
    let mut b = e.zeros::<T>(len)?;
    b.poison()?;
    Ok(b)
}

fn ptr<T: super::device::Elem>(b: &Option<DeviceBuffer<T>>) -> u64 {
    b.as_ref().map_or(0, |b| b.ptr())
}

fn down<T: super::device::Elem>(b: &Option<DeviceBuffer<T>>) -> Result<Option<Vec<T>>> {
    b.as_ref().map(|b| b.to_host()).transpose()
}

impl Backend for CudaEngine {
    fn name(&self) -> &str {
        "cuda"
    }

    fn execute(&self, args: &OpArgs<'_>) -> Result<(OpOutputs, Route)> {
        args.validate()?;
        let cpu = |declined: Vec<Declined>| -> Result<(OpOutputs, Route)> {
            let (o, mut r) = CpuBackend.execute(args)?;
            r.declined = declined;
            Ok((o, r))
        };
        if self.path() == PathChoice::Cpu {
            return cpu(vec![]);
        }
        let cfg = &args.cfg;
        let d = args.dims();
        let (t, n, h, op) = (d.t, d.n, d.h, args.op);
        let up_bf = |v: Option<&[bf16]>| v.map(|v| self.upload(v)).transpose();
        let up_f = |v: Option<&[f32]>| v.map(|v| self.upload(v)).transpose();
        let x = up_bf(args.x)?;
        let residual = up_bf(args.residual)?;
        let post = up_f(args.post)?;
        let comb = up_f(args.comb)?;
        let pre = up_f(args.pre)?;
        let fn_ = up_f(args.mix.map(|m| m.fn_))?;
        let scale = up_f(args.mix.map(|m| m.scale))?;
        let base = up_f(args.mix.map(|m| m.base))?;
        let norm = up_f(args.norm_weight.as_deref())?;
        let fnb = match (op, &fn_) {
            (Op::Entry, Some(f)) => {
                let b = self.zeros::<f32>(cfg.mixes() * h)?;
                // SAFETY: fn holds mixes*n*H elements (validated), fnb mixes*H.
                unsafe { self.fold_entry_weight(cfg, f.ptr(), b.ptr(), self.stream())? };
                Some(b)
            }
            _ => None,
        };
        // fn prepared for the cluster kernels, as DeviceSeamWeights does it at upload.
        let fn_split = match (op, &fn_) {
            (Op::Seam | Op::PreDelayed | Op::SeamV4, Some(f)) => {
                super::buffers::prepare_fn(self, cfg, f)?
            }
            _ => None,
        };
        let writes_residual = matches!(
            op,
            Op::PostMap | Op::Seam | Op::SeamV4 | Op::Entry | Op::Expand
        );
        let writes_li = op.has_layer_input() || matches!(op, Op::Head | Op::Final);
        let writes_gates = matches!(
            op,
            Op::Gates | Op::Pre | Op::PreDelayed | Op::Seam | Op::SeamV4 | Op::Entry
        );
        let residual_out = if writes_residual {
            Some(poisoned::<bf16>(self, t * n * h)?)
        } else {
            None
        };
        let li = if writes_li {
            Some(poisoned::<bf16>(self, t * h)?)
        } else {
            None
        };
        let post_out = if writes_gates {
            Some(poisoned::<f32>(self, t * n)?)
        } else {
            None
        };
        let comb_out = if writes_gates {
            Some(poisoned::<f32>(self, t * n * n)?)
        } else {
            None
        };
        let pre_out = if writes_gates || op == Op::Head {
            Some(poisoned::<f32>(self, t * n)?)
        } else {
            None
        };
        let fp8 = if args.fp8 {
            Some((
                poisoned::<u8>(self, t * h)?,
                poisoned::<u8>(self, t * h / 32)?,
            ))
        } else {
            None
        };
        let (a, w, y, yb) = match &args.projection {
            Some(p) => (
                Some(self.upload(p.a)?),
                Some(self.upload(p.w)?),
                (!p.bf16_out)
                    .then(|| poisoned::<f32>(self, p.m * p.n))
                    .transpose()?,
                p.bf16_out
                    .then(|| poisoned::<bf16>(self, p.m * p.n))
                    .transpose()?,
            ),
            None => (None, None, None, None),
        };
        let io = RawIo {
            x: ptr(&x),
            residual: ptr(&residual),
            post: ptr(&post),
            comb: ptr(&comb),
            pre: ptr(&pre),
            residual_out: ptr(&residual_out),
            layer_input: ptr(&li),
            post_out: ptr(&post_out),
            comb_out: ptr(&comb_out),
            pre_out: ptr(&pre_out),
            fp8_values: fp8.as_ref().map_or(0, |f| f.0.ptr()),
            fp8_scales: fp8.as_ref().map_or(0, |f| f.1.ptr()),
        };
        let proj = args
            .projection
            .map_or(RawProjection::default(), |p| RawProjection {
                a: ptr(&a),
                w: ptr(&w),
                y: if p.bf16_out { ptr(&yb) } else { ptr(&y) },
                m: p.m,
                n: p.n,
                k: p.k,
                y_bf16: p.bf16_out,
            });
        let call = RawCall {
            op,
            t,
            io,
            w: RawWeights {
                fn_: ptr(&fn_),
                fnb: ptr(&fnb),
                fn_split: ptr(&fn_split),
                scale: ptr(&scale),
                base: ptr(&base),
                norm_weight: ptr(&norm),
            },
            proj,
        };
        // SAFETY: every buffer was allocated above for the validated shapes of `args`.
        let route = match unsafe { self.launch_raw(cfg, &call, self.stream()) } {
            Ok(r) => r,
            Err(Error::Unsupported(_)) if self.path() == PathChoice::Auto => {
                return cpu(self.declines(cfg, &call));
            }
            Err(e) => return Err(e),
        };
        self.sync()?;
        let mut out = OpOutputs {
            residual_out: down(&residual_out)?,
            post_out: down(&post_out)?,
            comb_out: down(&comb_out)?,
            pre_out: down(&pre_out)?,
            out_f32: down(&y)?,
            out_bf16: down(&yb)?,
            ..Default::default()
        };
        let li = down(&li)?;
        if matches!(op, Op::Head | Op::Final) {
            out.out = li;
        } else {
            out.layer_input = li;
        }
        if let Some((q, s)) = &fp8 {
            out.fp8 = Some(Mxfp8 {
                values: q.to_host()?,
                scales: s.to_host()?,
            });
        }
        Ok((out, route))
    }
}
