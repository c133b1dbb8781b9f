//! The f64 oracle: every op of SPEC.md computed in f64 from the same bf16/f32 inputs, rounded
//! once at the end. The f32 reference and every GPU kernel are checked against it (SPEC section 8).
//! It is written for clarity, not speed, and shares no arithmetic code with the f32 reference.

use crate::reference::gates::MixWeights;
use crate::spec::Config;
use half::bf16;
use rayon::prelude::*;

/// Rounds an f64 to the nearest bf16, ties to even, in one step.
///
/// `half`'s f64 conversion looks only at the upper 32 bits of the f64 when it decides a tie, so
/// it can misround values within 2^-32 of a midpoint; an oracle must not, so the candidate is
/// corrected here by comparing exact distances to its neighbours.
pub fn round_bf16(v: f64) -> bf16 {
    let c = bf16::from_f64(v);
    if !v.is_finite() || !c.is_finite() {
        return c;
    }
    let mut best = c;
    let mut best_d = (v - c.to_f64()).abs();
    for nb in [step(c, -1), step(c, 1)] {
        if !nb.is_finite() {
            continue;
        }
        let d = (v - nb.to_f64()).abs(); // exact: v and nb are within a factor of 2 (Sterbenz)
        if d < best_d || (d == best_d && nb.to_bits() & 1 == 0 && best.to_bits() & 1 == 1) {
            best = nb;
            best_d = d;
        }
    }
    best
}

/// The bf16 next to `v` in direction `dir` (+1 towards +inf, -1 towards -inf).
fn step(v: bf16, dir: i32) -> bf16 {
    let key = crate::check::ordered(v) + dir;
    crate::check::from_ordered(key)
}

/// f64 sigmoid.
fn sigmoid(z: f64) -> f64 {
    1.0 / (1.0 + (-z).exp())
}

/// Exact-ish values and the magnitudes their f32 evaluation sums over: `v[i]` is the f64 result,
/// `s[i]` the sum of the absolute values of the terms that make it (the scale of f32 rounding error).
#[derive(Clone, Debug, Default)]
pub struct Sums {
    /// Values.
    pub v: Vec<f64>,
    /// Sum of |terms| per value.
    pub s: Vec<f64>,
}

/// post_map in f64, before rounding: `[T,n,H]`.
pub fn post_map(n: usize, h: usize, x: &[bf16], r: &[bf16], post: &[f32], comb: &[f32]) -> Sums {
    let t = x.len() / h.max(1);
    let mut out = vec![(0f64, 0f64); t * n * h];
    if h == 0 {
        return Sums::default();
    }
    out.par_chunks_mut(n * h).enumerate().for_each(|(tt, o)| {
        for j in 0..n {
            for hh in 0..h {
                let first = post[tt * n + j] as f64 * x[tt * h + hh].to_f64();
                let (mut acc, mut mag) = (first, first.abs());
                for i in 0..n {
                    let term =
                        comb[tt * n * n + i * n + j] as f64 * r[(tt * n + i) * h + hh].to_f64();
                    acc += term;
                    mag += term.abs();
                }
                o[j * h + hh] = (acc, mag);
            }
        }
    });
    Sums {
        v: out.iter().map(|p| p.0).collect(),
        s: out.iter().map(|p| p.1).collect(),
    }
}

/// Gates of one token in f64: the mixes m and (pre, post, comb).
#[derive(Clone, Debug, Default)]
pub struct GatesF64 {
    /// The RMS-scaled projections [T, mixes].
    pub m: Vec<f64>,
    /// pre `[T,n]`.
    pub pre: Vec<f64>,
    /// post `[T,n]`.
    pub post: Vec<f64>,
    /// comb `[T,n,n]`.
    pub comb: Vec<f64>,
}

/// m = rinv * fn . xf over `k` elements of `xs`, with rinv over `count` elements.
fn mixes(xs: &[f64], fn_: &[f64], mixes: usize, eps: f64) -> Vec<f64> {
    let k = xs.len();
    let ss: f64 = xs.iter().map(|v| v * v).sum();
    let rinv = 1.0 / (ss / k as f64 + eps).sqrt();
    (0..mixes)
        .map(|c| {
            let row = &fn_[c * k..(c + 1) * k];
            rinv * xs.iter().zip(row).map(|(a, b)| a * b).sum::<f64>()
        })
        .collect()
}

/// The Sinkhorn's passes of SPEC section 2 in f64 on `c` `[n,n]` (after the softmax + eps): a
/// column pass, then (iters - 1) row and column passes.
pub fn sinkhorn_passes(n: usize, iters: usize, eps: f64, c: &mut [f64]) {
    let colnorm = |c: &mut [f64]| {
        for b in 0..n {
            let s: f64 = (0..n).map(|a| c[a * n + b]).sum::<f64>() + eps;
            for a in 0..n {
                c[a * n + b] /= s;
            }
        }
    };
    colnorm(c);
    for _ in 1..iters {
        for a in 0..n {
            let s: f64 = c[a * n..(a + 1) * n].iter().sum::<f64>() + eps;
            for v in &mut c[a * n..(a + 1) * n] {
                *v /= s;
            }
        }
        colnorm(c);
    }
}

fn gates_from_m(cfg: &Config, m: &[f64], scale: &[f32], base: &[f32], g: &mut GatesF64) {
    let n = cfg.n;
    let eps = cfg.hc_eps as f64;
    for j in 0..n {
        g.pre
            .push(sigmoid(m[j] * scale[0] as f64 + base[j] as f64) + eps);
        g.post
            .push(sigmoid(m[n + j] * scale[1] as f64 + base[n + j] as f64) * cfg.post_mult as f64);
    }
    let mut c: Vec<f64> = (0..n * n)
        .map(|a| m[2 * n + a] * scale[2] as f64 + base[2 * n + a] as f64)
        .collect();
    for a in 0..n {
        let row = &mut c[a * n..(a + 1) * n];
        let mx = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = row.iter().map(|v| (v - mx).exp()).sum();
        for v in row.iter_mut() {
            *v = (*v - mx).exp() / s + eps;
        }
    }
    sinkhorn_passes(n, cfg.sinkhorn_iters, eps, &mut c);
    g.comb.extend(c);
}

fn concat(parts: Vec<GatesF64>) -> GatesF64 {
    let mut g = GatesF64::default();
    for p in parts {
        g.m.extend(p.m);
        g.pre.extend(p.pre);
        g.post.extend(p.post);
        g.comb.extend(p.comb);
    }
    g
}

/// gates(r) in f64 for residual `[T,n,H]`.
pub fn gates(cfg: &Config, residual: &[bf16], w: MixWeights<'_>) -> GatesF64 {
    let k = cfg.k();
    let fnd: Vec<f64> = w.fn_.iter().map(|v| *v as f64).collect();
    let parts = residual
        .par_chunks(k.max(1))
        .map(|r| {
            let xs: Vec<f64> = r.iter().map(|v| v.to_f64()).collect();
            let mut g = GatesF64 {
                m: mixes(&xs, &fnd, cfg.mixes(), cfg.rms_eps as f64),
                ..Default::default()
            };
            let m = g.m.clone();
            gates_from_m(cfg, &m, w.scale, w.base, &mut g);
            g
        })
        .collect();
    concat(parts)
}

/// Entry gates by their definition: gates of x broadcast to n streams (no folding).
pub fn entry_gates(cfg: &Config, x: &[bf16], w: MixWeights<'_>) -> GatesF64 {
    let h = cfg.hidden;
    let mut r = vec![bf16::ZERO; x.len() * cfg.n];
    for (tt, xt) in x.chunks(h.max(1)).enumerate() {
        for j in 0..cfg.n {
            r[(tt * cfg.n + j) * h..(tt * cfg.n + j + 1) * h].copy_from_slice(xt);
        }
    }
    gates(cfg, &r, w)
}

/// V4 head coefficients p `[T,n]` in f64.
pub fn head_gates(cfg: &Config, residual: &[bf16], w: MixWeights<'_>) -> Vec<f64> {
    let k = cfg.k();
    let fnd: Vec<f64> = w.fn_.iter().map(|v| *v as f64).collect();
    residual
        .par_chunks(k.max(1))
        .flat_map_iter(|r| {
            let xs: Vec<f64> = r.iter().map(|v| v.to_f64()).collect();
            let m = mixes(&xs, &fnd, cfg.n, cfg.rms_eps as f64);
            (0..cfg.n)
                .map(|j| sigmoid(m[j] * w.scale[0] as f64 + w.base[j] as f64) + cfg.hc_eps as f64)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// collapse(r, p) in f64, before rounding: `[T,H]`.
pub fn collapse(n: usize, h: usize, r: &[bf16], p: &[f32]) -> Sums {
    let t = r.len() / (n * h).max(1);
    let pairs: Vec<(f64, f64)> = (0..t * h)
        .into_par_iter()
        .map(|i| {
            let (tt, hh) = (i / h, i % h);
            (0..n).fold((0.0, 0.0), |(v, s), j| {
                let term = p[tt * n + j] as f64 * r[(tt * n + j) * h + hh].to_f64();
                (v + term, s + term.abs())
            })
        })
        .collect();
    Sums {
        v: pairs.iter().map(|p| p.0).collect(),
        s: pairs.iter().map(|p| p.1).collect(),
    }
}

/// rmsnorm(c, w) in f64, before rounding: `[T,H]`.
pub fn rmsnorm(h: usize, eps: f32, c: &[bf16], w: &[f32]) -> Vec<f64> {
    let mut out = vec![0f64; c.len()];
    if h == 0 {
        return out;
    }
    out.par_chunks_mut(h)
        .zip(c.par_chunks(h))
        .for_each(|(o, c)| {
            let ss: f64 = c.iter().map(|v| v.to_f64() * v.to_f64()).sum();
            let rinv = 1.0 / (ss / h as f64 + eps as f64).sqrt();
            for ((o, c), w) in o.iter_mut().zip(c).zip(w) {
                *o = c.to_f64() * rinv * *w as f64;
            }
        });
    out
}

/// The compressor projection in f64 (identical in method to the reference, which is f64 too).
pub fn projection(m: usize, n: usize, k: usize, a: &[bf16], w: &[bf16]) -> Vec<f64> {
    (0..m * n)
        .into_par_iter()
        .map(|i| {
            let (r, c) = (i / n, i % n);
            (0..k)
                .map(|q| a[r * k + q].to_f64() * w[c * k + q].to_f64())
                .sum()
        })
        .collect()
}

/// Rounds a whole f64 vector to bf16.
pub fn round_all(v: &[f64]) -> Vec<bf16> {
    v.par_iter().map(|x| round_bf16(*x)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_is_correct_near_ties() {
        // 1 + 2^-8 is exactly between 1 and the next bf16 (1 + 2^-7): ties to even -> 1.
        assert_eq!(round_bf16(1.0 + 2f64.powi(-8)).to_f64(), 1.0);
        // A hair above the tie, below f32 resolution: must round up.
        assert_eq!(
            round_bf16(1.0 + 2f64.powi(-8) + 2f64.powi(-40)).to_f64(),
            1.0 + 2f64.powi(-7)
        );
        assert_eq!(round_bf16(-3.0).to_f64(), -3.0);
        assert_eq!(round_bf16(0.0).to_f64(), 0.0);
    }
}
