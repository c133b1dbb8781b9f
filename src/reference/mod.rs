//! The CPU backend: SPEC.md operation by operation, in f32 with the rounding points SPEC gives,
//! plus an f64 [`oracle`] to check everything else against.
//!
//! Every function works for any `n` and any `H` and runs in parallel over tokens (rayon). The
//! reductions whose result decides a bf16 rounding (the sums of squares of the RMS factors) are
//! accumulated in f64: each square of a bf16 value is exact in f32, so the f64 sum is exact for
//! all but extreme dynamic ranges and therefore independent of summation order. That is what
//! lets the GPU kernels, which sum in another order, produce the same bits as this reference.
//!
//! Elementwise sums (post_map, collapse) are written as separate multiplies and adds, never fused:
//! the CUDA kernels use `__fmul_rn`/`__fadd_rn` for the same expressions, so both round alike.

pub mod collapse;
pub mod gates;
pub mod mxfp8;
pub mod ops;
pub mod oracle;
pub mod post_map;
pub mod projection;

pub use ops::execute;

use half::bf16;

/// The RMS factor `1 / sqrt(ss / count + eps)` with `ss` an f64 sum of squares.
///
/// The mean is rounded to f32 once, then everything is f32 and IEEE (the GPU computes the same
/// expression with correctly rounded sqrt and division).
#[inline]
pub fn rms_factor(ss: f64, count: usize, eps: f32) -> f32 {
    let ms = (ss / count as f64) as f32;
    1.0f32 / (ms + eps).sqrt()
}

/// Sum of squares of bf16 values in f64 (exact for all practical inputs; see module docs).
#[inline]
pub fn sum_squares(v: &[bf16]) -> f64 {
    v.iter()
        .map(|x| {
            let f = x.to_f32();
            (f * f) as f64
        })
        .sum()
}

/// The logistic function, as SPEC writes it.
#[inline]
pub fn sigmoid(z: f32) -> f32 {
    1.0 / (1.0 + (-z).exp())
}
