//! The CPU backend: SPEC.md operation by operation, in f32 with the rounding points SPEC gives,
//! plus an f64 [`oracle`] to check everything else against.
//!
//! Every function works for any `n` and any `H` and runs in parallel over tokens (rayon). The
//! reductions whose result decides a bf16 rounding (the sums of squares of the RMS factors) are
//! taken in one fixed order, [`tree_sum_squares`], the order every GPU kernel takes (fused and
//! unfused): f32 fused multiply-adds over each lane's 8 channels, then f64 over the chunks. The
//! order matters: two orders round differently, so only one order for everything keeps every
//! kernel, plan and batch size on the same RMS factors.
//!
//! Elementwise sums (post_map, collapse) take a product, then fused multiply-adds (`f32::mul_add`;
//! the CUDA kernels `__fmul_rn` and `__fmaf_rn`), so both round alike.

/// Defines `$name` with the body given, and `$fma`, the same body compiled with FMA enabled, which
/// `$name` runs where the x86-64 CPU has it: `f32::mul_add` as one instruction instead of a libm
/// call (the same bits either way: IEEE fma). One signature and one body for both.
macro_rules! with_fma {
    ($(#[$m:meta])* $vis:vis fn $name:ident, $fma:ident ($($arg:ident : $ty:ty),* $(,)?)
     $(-> $ret:ty)? $body:block) => {
        $(#[$m])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            if $crate::reference::cpu_has_fma() {
                // SAFETY: the CPU has FMA (checked above).
                return unsafe { $fma($($arg),*) };
            }
            $body
        }

        #[doc = concat!("[`", stringify!($name), "`] with `f32::mul_add` as one instruction.")]
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "fma")]
        fn $fma($($arg: $ty),*) $(-> $ret)? $body
    };
}

pub mod collapse;
pub mod gates;
pub mod mxfp8;
pub mod ops;
pub mod oracle;
pub mod post_map;
pub mod projection;

/// Whether this x86-64 CPU has FMA, so that `f32::mul_add` (post_map, the collapse, the sums of
/// squares) can run as one instruction instead of a libm call (the same bits either way: IEEE
/// fma). [`with_fma`] dispatches on it.
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

with_fma! {
    /// The f64 sum of squares of one token's bf16 values `v` (`v.len() / h` streams of `h`
    /// channels, stream-major) in the canonical order that every fused GPU kernel takes, whatever
    /// its launch plan, tile or batch size:
    ///
    /// 1. the channels are cut into chunks of [`SS_CHUNK`]; in chunk `c`, part `q` (0..4) is the
    ///    f32 sum, one fused multiply-add at a time from zero (`part = f.mul_add(f, part)`), of the
    ///    squares of channels `32c + 8q + e`, e = 0..8, of stream 0, then of stream 1, and so on
    ///    (channels past `h` add nothing), converted to f64 once it is complete;
    /// 2. the chunk's value is `(part0 + part1) + (part2 + part3)` in f64;
    /// 3. the chunks' values are added in f64 by a pairwise tree over the chunk index, padded with
    ///    zeros to a power of two: (c0 + c1) + (c2 + c3), and so on up.
    ///
    /// A part adds at most 8 n squares (32 at n = 4) in f32: within 8 n f32 roundings of the exact
    /// sum, far inside SPEC section 8's 1e-5 on the gates (the factor is a square root of it). The
    /// parts were f64 sums until PERF_NOTES.md attempt 107: the kernels' conversions of every
    /// square to f64 ran on a pipe a quarter as fast as f32 arithmetic, on the small-T seam's
    /// critical path. Fixing the order (f32 rounds in every row, and the f64 adds above round where
    /// a part's low bits fall below the running sum's last bit) makes the kernels, their plans and
    /// this reference agree in every row.
    pub fn tree_sum_squares, tree_sum_squares_fma(v: &[bf16], h: usize) -> f64 {
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
                        let mut s = 0f32;
                        for j in 0..streams {
                            for e in 0..8 {
                                let ch = c * SS_CHUNK + 8 * q + e;
                                if ch < h {
                                    let f = v[j * h + ch].to_f32();
                                    s = f.mul_add(f, s);
                                }
                            }
                        }
                        *part = s as f64;
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
