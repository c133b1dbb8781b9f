//! collapse and rmsnorm (SPEC section 4), and the layer-input epilogue shared by every op that
//! produces a sublayer input.

use super::{rms_factor, tree_sum_squares};
use half::bf16;
use rayon::prelude::*;

with_fma! {
    /// One token of collapse: `c[h] = sum_j p[j] * r[j][h]`, from j = 0 upward, in f32 (the first
    /// term a product, each next one a fused multiply-add). Returns the f32 sums (before rounding)
    /// in `out`.
    pub fn collapse_token_f32, collapse_token_fma(
        n: usize, h: usize, r: &[bf16], p: &[f32], out: &mut [f32]
    ) {
        for (hh, o) in out.iter_mut().enumerate().take(h) {
            let mut acc = p[0] * r[hh].to_f32();
            for j in 1..n {
                acc = p[j].mul_add(r[j * h + hh].to_f32(), acc);
            }
            *o = acc;
        }
    }
}

/// collapse(r, p) for T tokens: residual `[T,n,H]`, p `[T,n]` -> out `[T,H]` (bf16, rounded once).
pub fn collapse(n: usize, h: usize, residual: &[bf16], p: &[f32], out: &mut [bf16]) {
    if h == 0 || n == 0 {
        return;
    }
    out.par_chunks_mut(h)
        .zip(residual.par_chunks(n * h))
        .zip(p.par_chunks(n))
        .for_each(|((o, r), p)| {
            let mut f = vec![0f32; h];
            collapse_token_f32(n, h, r, p, &mut f);
            for (o, v) in o.iter_mut().zip(&f) {
                *o = bf16::from_f32(*v);
            }
        });
}

/// One token of rmsnorm: `bf16(f32(c) * rinv * w)` with `rinv` from the f64 sum of squares of the
/// bf16 values `c`, in the canonical order ([`super::tree_sum_squares`]). Writes the f32 products
/// (before rounding) to `vals`.
#[inline]
pub fn rmsnorm_token_f32(c: &[bf16], w: &[f32], eps: f32, vals: &mut [f32]) {
    let rinv = rms_factor(tree_sum_squares(c, c.len()), c.len(), eps);
    for ((v, c), w) in vals.iter_mut().zip(c).zip(w) {
        *v = (c.to_f32() * rinv) * *w;
    }
}

/// rmsnorm for T tokens: c `[T,H]`, w `[H]` -> out `[T,H]`.
pub fn rmsnorm(h: usize, eps: f32, c: &[bf16], w: &[f32], out: &mut [bf16]) {
    if h == 0 {
        return;
    }
    out.par_chunks_mut(h)
        .zip(c.par_chunks(h))
        .for_each(|(o, c)| {
            let mut f = vec![0f32; h];
            rmsnorm_token_f32(c, w, eps, &mut f);
            for (o, v) in o.iter_mut().zip(&f) {
                *o = bf16::from_f32(*v);
            }
        });
}

/// What the layer-input epilogue produces for one token.
pub struct LayerInputToken<'a> {
    /// The bf16 layer input `[H]`.
    pub li: &'a mut [bf16],
    /// The last f32 values before the bf16 rounding `[H]` (what MXFP8 quantizes).
    pub vals: &'a mut [f32],
}

/// Collapse one token's streams with `p`, round to bf16, then apply the optional RMSNorm.
/// This is the tail of pre, pre_delayed, seam, head and final.
pub fn layer_input_token(
    n: usize,
    h: usize,
    r: &[bf16],
    p: &[f32],
    norm: Option<(&[f32], f32)>,
    out: LayerInputToken<'_>,
) {
    collapse_token_f32(n, h, r, p, out.vals);
    for (o, v) in out.li.iter_mut().zip(out.vals.iter()) {
        *o = bf16::from_f32(*v);
    }
    if let Some((w, eps)) = norm {
        let c = out.li.to_vec();
        rmsnorm_token_f32(&c, w, eps, out.vals);
        for (o, v) in out.li.iter_mut().zip(out.vals.iter()) {
            *o = bf16::from_f32(*v);
        }
    }
}
