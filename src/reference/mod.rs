//! The CPU backend: SPEC.md operation by operation, in f32 with the rounding points SPEC gives,
//! plus an f64 [`oracle`] to check everything else against.
//!
//! Every function works for any `n` and any `H` and runs in parallel over tokens (rayon). The
//! reductions whose result decides a bf16 rounding (the sums of squares of the RMS factors) are
//! accumulated in f64 (each square of a bf16 value is exact in f32) and in one fixed order,
//! [`tree_sum_squares`], the order every GPU kernel takes (fused and unfused). The order matters: an f64 sum
//! drops the low bits of squares far below the running sum (elements below about 2^-12 of a row
//! of N(0, 1) values), so two orders can differ in the last f64 bit, and rarely (about 10^-10 of
//! rows) in the f32 mean that the RMS factor rounds it to.
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

/// Whether this x86-64 CPU has FMA, so that post_map's and the collapse's `f32::mul_add` can run
/// as one instruction instead of a libm call (the bits are the same either way: IEEE fma).
#[cfg(target_arch = "x86_64")]
fn cpu_has_fma() -> bool {
    std::is_x86_feature_detected!("fma")
}

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

/// Channels per chunk of the canonical order (a warp's chunk in the fused GPU kernels).
pub const SS_CHUNK: usize = 32;

/// The f64 sum of squares of one token's bf16 values `v` (`v.len() / h` streams of `h` channels,
/// stream-major) in the canonical order that every fused GPU kernel takes, whatever its launch
/// plan, tile or batch size:
///
/// 1. the channels are cut into chunks of [`SS_CHUNK`]; in chunk `c`, part `q` (0..4) is the sum,
///    one f64 add at a time from zero, of the squares of channels `32c + 8q + e`, e = 0..8, of
///    stream 0, then of stream 1, and so on (channels past `h` add nothing);
/// 2. the chunk's value is `(part0 + part1) + (part2 + part3)`;
/// 3. the chunks' values are added by a pairwise tree over the chunk index, padded with zeros to
///    a power of two: (c0 + c1) + (c2 + c3), and so on up.
///
/// A square is exact in f32 and the f64 adds round only where a square's low bits fall below the
/// running sum's last bit, so every order agrees except in such rows; fixing the order makes the
/// kernels, their plans and this reference agree in every row.
pub fn tree_sum_squares(v: &[bf16], h: usize) -> f64 {
    if h == 0 || v.is_empty() {
        return 0.0;
    }
    let streams = v.len() / h;
    let chunks = h.div_ceil(SS_CHUNK);
    let mut level: Vec<f64> = (0..chunks.next_power_of_two())
        .map(|c| {
            let mut parts = [0f64; 4];
            if c < chunks {
                for (q, part) in parts.iter_mut().enumerate() {
                    for j in 0..streams {
                        for e in 0..8 {
                            let ch = c * SS_CHUNK + 8 * q + e;
                            if ch < h {
                                let f = v[j * h + ch].to_f32();
                                *part += (f * f) as f64;
                            }
                        }
                    }
                }
            }
            (parts[0] + parts[1]) + (parts[2] + parts[3])
        })
        .collect();
    while level.len() > 1 {
        level = level.chunks(2).map(|p| p[0] + p[1]).collect();
    }
    level[0]
}

/// The plain sum of squares, one element at a time in index order: the order SPEC's formula
/// reads, kept for the tests that show it can differ from [`tree_sum_squares`].
pub fn sequential_sum_squares(v: &[bf16]) -> f64 {
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
