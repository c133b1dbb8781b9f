//! The composite ops of SPEC section 5, built from the elementary functions exactly as SPEC
//! composes them. [`execute`] is the CPU backend's entry point.

use super::collapse::{LayerInputToken, layer_input_token, rmsnorm_token_f32};
use super::gates::{Gates, entry_gates, fold_entry_weight, gates, head_gates};
use super::mxfp8::{BLOCK, quantize_row};
use super::post_map::{expand, post_map};
use super::projection::projection;
use crate::error::{Error, Result};
use crate::ops::{Mxfp8, Op, OpArgs, OpOutputs};
use half::bf16;
use rayon::prelude::*;

/// A layer input for T tokens (`li`) and the f32 values it was rounded from (`vals`).
pub struct LayerInput {
    pub li: Vec<bf16>,
    pub vals: Vec<f32>,
}

/// collapse(r, p) (+ rmsnorm) for every token.
pub fn layer_inputs(
    n: usize,
    h: usize,
    r: &[bf16],
    p: &[f32],
    norm: Option<(&[f32], f32)>,
) -> LayerInput {
    let t = r.len() / (n * h).max(1);
    let mut li = vec![bf16::ZERO; t * h];
    let mut vals = vec![0f32; t * h];
    if h > 0 {
        li.par_chunks_mut(h)
            .zip(vals.par_chunks_mut(h))
            .zip(r.par_chunks(n * h).zip(p.par_chunks(n)))
            .for_each(|((li, vals), (r, p))| {
                layer_input_token(n, h, r, p, norm, LayerInputToken { li, vals });
            });
    }
    LayerInput { li, vals }
}

/// rmsnorm(x) for every token (also the entry seam's layer input with a norm).
pub fn normed(h: usize, x: &[bf16], w: &[f32], eps: f32) -> LayerInput {
    let mut vals = vec![0f32; x.len()];
    if h > 0 {
        vals.par_chunks_mut(h)
            .zip(x.par_chunks(h))
            .for_each(|(v, x)| rmsnorm_token_f32(x, w, eps, v));
    }
    LayerInput {
        li: vals.iter().map(|v| bf16::from_f32(*v)).collect(),
        vals,
    }
}

/// MXFP8 of the f32 values behind a layer input.
pub fn mxfp8_rows(h: usize, vals: &[f32]) -> Mxfp8 {
    let mut q = Mxfp8 {
        values: vec![0u8; vals.len()],
        scales: vec![0u8; vals.len() / BLOCK],
    };
    if h > 0 {
        q.values
            .par_chunks_mut(h)
            .zip(q.scales.par_chunks_mut(h / BLOCK))
            .zip(vals.par_chunks(h))
            .for_each(|((qv, qs), v)| quantize_row(v, qv, qs));
    }
    q
}

fn req<'b, T>(v: Option<&'b [T]>, name: &str) -> Result<&'b [T]> {
    v.ok_or_else(|| Error::missing(name))
}

/// Runs one op on the CPU. `args` must have been validated (the constructors do).
pub fn execute(args: &OpArgs<'_>) -> Result<OpOutputs> {
    args.validate()?;
    let cfg = &args.cfg;
    let d = args.dims();
    let (n, h) = (d.n, d.h);
    let norm = args.norm_weight.as_deref().map(|w| (w, cfg.norm_eps));
    let mut o = OpOutputs::default();
    let set_gates = |o: &mut OpOutputs, g: Gates| {
        o.pre_out = Some(g.pre);
        o.post_out = Some(g.post);
        o.comb_out = Some(g.comb);
    };
    let mix = || args.mix.ok_or_else(|| Error::missing("fn"));
    let layer: Option<LayerInput> = match args.op {
        Op::Gates => {
            set_gates(&mut o, gates(cfg, req(args.residual, "residual")?, mix()?));
            None
        }
        Op::PostMap => {
            o.residual_out = Some(post_mapped(args)?);
            None
        }
        Op::Collapse => Some(layer_inputs(
            n,
            h,
            req(args.residual, "residual")?,
            req(args.pre, "pre")?,
            norm,
        )),
        Op::Rmsnorm => {
            let w = args
                .norm_weight
                .as_deref()
                .ok_or_else(|| Error::missing("norm_weight"))?;
            Some(normed(h, req(args.x, "x")?, w, cfg.norm_eps))
        }
        Op::Pre | Op::PreDelayed => {
            let r = req(args.residual, "residual")?;
            let g = gates(cfg, r, mix()?);
            let p = if args.op == Op::Pre {
                &g.pre
            } else {
                req(args.pre, "pre")?
            };
            let li = layer_inputs(n, h, r, p, norm);
            set_gates(&mut o, g);
            Some(li)
        }
        Op::Entry => {
            let x = req(args.x, "x")?;
            let m = mix()?;
            let fnb = fold_entry_weight(cfg, m.fn_);
            set_gates(&mut o, entry_gates(cfg, x, &fnb, m.scale, m.base));
            let mut r = vec![bf16::ZERO; d.t * n * h];
            expand(n, h, x, &mut r);
            o.residual_out = Some(r);
            Some(match norm {
                Some((w, eps)) => normed(h, x, w, eps),
                // One-hot carried pre-mix: the layer input is stream 0, i.e. x itself.
                None => LayerInput {
                    li: x.to_vec(),
                    vals: x.iter().map(|v| v.to_f32()).collect(),
                },
            })
        }
        Op::Seam | Op::SeamV4 => {
            let r2 = post_mapped(args)?;
            let g = gates(cfg, &r2, mix()?);
            let p = if args.op == Op::SeamV4 {
                &g.pre
            } else {
                req(args.pre, "pre")?
            };
            let li = layer_inputs(n, h, &r2, p, norm);
            set_gates(&mut o, g);
            o.residual_out = Some(r2);
            Some(li)
        }
        Op::Head => {
            let r = req(args.residual, "residual")?;
            let p = head_gates(cfg, r, mix()?);
            let li = layer_inputs(n, h, r, &p, norm);
            o.out = Some(li.li);
            o.pre_out = Some(p);
            None
        }
        Op::Final => {
            let li = layer_inputs(
                n,
                h,
                req(args.residual, "residual")?,
                req(args.pre, "pre")?,
                norm,
            );
            o.out = Some(li.li);
            None
        }
        Op::Expand => {
            let mut r = vec![bf16::ZERO; d.t * n * h];
            expand(n, h, req(args.x, "x")?, &mut r);
            o.residual_out = Some(r);
            None
        }
        Op::Projection => {
            let p = args.projection.ok_or_else(|| Error::missing("a"))?;
            let y = projection(p.m, p.n, p.k, p.a, p.w);
            if p.bf16_out {
                o.out_bf16 = Some(y.into_iter().map(bf16::from_f32).collect());
            } else {
                o.out_f32 = Some(y);
            }
            None
        }
    };
    if let Some(l) = layer {
        if args.fp8 {
            o.fp8 = Some(mxfp8_rows(h, &l.vals));
        }
        o.layer_input = Some(l.li);
    }
    Ok(o)
}

pub(crate) fn post_mapped(args: &OpArgs<'_>) -> Result<Vec<bf16>> {
    let d = args.dims();
    let mut r2 = vec![bf16::ZERO; d.t * d.n * d.h];
    post_map(
        d.n,
        d.h,
        req(args.x, "x")?,
        req(args.residual, "residual")?,
        req(args.post, "post")?,
        req(args.comb, "comb")?,
        &mut r2,
    );
    Ok(r2)
}
