//! The compressor projection (SPEC section 7): `y[M,N] = a[M,K] . w[N,K]^T`, bf16 inputs, f32
//! output. The reference accumulates in f64 (products of bf16 values are exact in f64, so this is
//! as close to the exact dot product as an f32 result can be) and rounds once to f32. The bf16
//! output the engines may ask for is that f32 result rounded to nearest even (reference::ops).

use half::bf16;
use rayon::prelude::*;

/// y `[M,N]` (f32) from a `[M,K]` and w `[N,K]` (bf16).
pub fn projection(m: usize, n: usize, k: usize, a: &[bf16], w: &[bf16]) -> Vec<f32> {
    dots(m, n, k, a, w, |p| p)
        .into_iter()
        .map(|v| v as f32)
        .collect()
}

/// `sum_k |a_k w_k|` for every output: the scale of SPEC's projection accuracy bound.
pub fn abs_dot(m: usize, n: usize, k: usize, a: &[bf16], w: &[bf16]) -> Vec<f64> {
    dots(m, n, k, a, w, f64::abs)
}

/// `sum_k f(a[i][k] * w[j][k])` in f64 for every (i, j).
fn dots(
    m: usize,
    n: usize,
    k: usize,
    a: &[bf16],
    w: &[bf16],
    f: impl Fn(f64) -> f64 + Sync,
) -> Vec<f64> {
    let mut y = vec![0f64; m * n];
    if n == 0 || k == 0 {
        return y;
    }
    y.par_chunks_mut(n).enumerate().for_each(|(i, row)| {
        let ai = &a[i * k..(i + 1) * k];
        for (j, y) in row.iter_mut().enumerate() {
            let wj = &w[j * k..(j + 1) * k];
            *y = ai
                .iter()
                .zip(wj)
                .map(|(a, w)| f(a.to_f64() * w.to_f64()))
                .sum::<f64>();
        }
    });
    y
}
