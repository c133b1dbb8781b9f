//! gates (SPEC section 2): the RMS-scaled projection, the sigmoid gates and the Sinkhorn-normalized
//! comb matrix; the head gates of V4; and the folded-weight gates of the V4.1 entry seam.

use super::{rms_factor, sigmoid, tree_sum_squares};
use crate::spec::Config;
use half::bf16;
use rayon::prelude::*;

/// Borrowed projection weights of one seam (or of the head).
#[derive(Clone, Copy, Debug)]
pub struct MixWeights<'a> {
    /// fn [mixes, n*H], row c = mix c, column j*H + h = stream j, channel h.
    pub fn_: &'a [f32],
    /// (pre, post, comb) scales: 3 for a seam, 1 for the head.
    pub scale: &'a [f32],
    /// base `[mixes]`.
    pub base: &'a [f32],
}

impl MixWeights<'_> {
    /// Number of mixes (rows of fn).
    pub fn mixes(&self) -> usize {
        self.base.len()
    }
}

/// Accumulator lanes of the f32 dot products: a fixed blocking that vectorizes and keeps the
/// rounding error near sqrt(K/LANES) ulps.
const LANES: usize = 16;

/// `sum_k a[k] * b[k]` with a bf16 and b f32, accumulated in `LANES` (16) f32 partial sums.
#[inline]
pub fn dot_bf16_f32(a: &[bf16], b: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let mut ac = a.chunks_exact(LANES);
    let mut bc = b.chunks_exact(LANES);
    for (a, b) in (&mut ac).zip(&mut bc) {
        for l in 0..LANES {
            acc[l] += a[l].to_f32() * b[l];
        }
    }
    for (l, (a, b)) in ac.remainder().iter().zip(bc.remainder()).enumerate() {
        acc[l] += a.to_f32() * b;
    }
    let mut w = LANES;
    while w > 1 {
        w /= 2;
        for l in 0..w {
            acc[l] += acc[l + w];
        }
    }
    acc[0]
}

/// Step 2-3 for one token: `m[c] = rinv * sum_k xf[k] * fn[c][k]` with `rinv` over `count`
/// elements. `xs` is the token's flattened input (K elements: streams of `h` channels), its sum
/// of squares taken in the canonical order ([`tree_sum_squares`]).
pub fn project_token(xs: &[bf16], h: usize, fn_: &[f32], count: usize, eps: f32, m: &mut [f32]) {
    let k = xs.len();
    let rinv = rms_factor(tree_sum_squares(xs, h), count, eps);
    for (c, mc) in m.iter_mut().enumerate() {
        *mc = rinv * dot_bf16_f32(xs, &fn_[c * k..(c + 1) * k]);
    }
}

/// Steps 4-7 for one token: from the mixes `m` to pre `[n]`, post `[n]` and comb `[n,n]`.
pub fn gates_from_mixes(
    cfg: &Config,
    m: &[f32],
    scale: &[f32],
    base: &[f32],
    pre: &mut [f32],
    post: &mut [f32],
    comb: &mut [f32],
) {
    let n = cfg.n;
    for j in 0..n {
        pre[j] = sigmoid(m[j] * scale[0] + base[j]) + cfg.hc_eps;
        post[j] = sigmoid(m[n + j] * scale[1] + base[n + j]) * cfg.post_mult;
    }
    for a in 0..n * n {
        comb[a] = m[2 * n + a] * scale[2] + base[2 * n + a];
    }
    sinkhorn(n, cfg.sinkhorn_iters, cfg.hc_eps, comb);
}

/// Step 7 in place on the logits `c` `[n,n]`: row softmax + eps, a column pass, then
/// (iters - 1) row and column passes. `c[a*n + b]`: row a = input stream, column b = output.
pub fn sinkhorn(n: usize, iters: usize, eps: f32, c: &mut [f32]) {
    for row in c.chunks_mut(n) {
        let mx = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut s = 0f32;
        for v in row.iter_mut() {
            *v = (*v - mx).exp();
            s += *v;
        }
        for v in row.iter_mut() {
            *v = *v / s + eps;
        }
    }
    col_pass(n, eps, c);
    for _ in 1..iters {
        for row in c.chunks_mut(n) {
            let s: f32 = row.iter().sum::<f32>() + eps;
            for v in row.iter_mut() {
                *v /= s;
            }
        }
        col_pass(n, eps, c);
    }
}

fn col_pass(n: usize, eps: f32, c: &mut [f32]) {
    for b in 0..n {
        let mut s = 0f32;
        for a in 0..n {
            s += c[a * n + b];
        }
        s += eps;
        for a in 0..n {
            c[a * n + b] /= s;
        }
    }
}

/// Output of [`gates`]: pre `[T,n]`, post `[T,n]`, comb `[T,n,n]`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Gates {
    /// Pre-mix coefficients.
    pub pre: Vec<f32>,
    /// Post gates.
    pub post: Vec<f32>,
    /// The Sinkhorn-normalized mixing matrix.
    pub comb: Vec<f32>,
}

impl Gates {
    /// Zero-filled gates for `t` tokens of `n` streams.
    pub fn zeros(t: usize, n: usize) -> Self {
        Gates {
            pre: vec![0.0; t * n],
            post: vec![0.0; t * n],
            comb: vec![0.0; t * n * n],
        }
    }
}

/// gates(r) for T tokens of residual `[T,n,H]`.
pub fn gates(cfg: &Config, residual: &[bf16], w: MixWeights<'_>) -> Gates {
    gates_rows(cfg, residual, cfg.k(), w.fn_, w.scale, w.base)
}

/// Gates of rows of `k` elements against fn [mixes, k], the RMS factor taken over the row.
fn gates_rows(
    cfg: &Config,
    rows: &[bf16],
    k: usize,
    fn_: &[f32],
    scale: &[f32],
    base: &[f32],
) -> Gates {
    let n = cfg.n;
    let t = rows.len() / k.max(1);
    let mut g = Gates::zeros(t, n);
    g.pre
        .par_chunks_mut(n)
        .zip(g.post.par_chunks_mut(n))
        .zip(g.comb.par_chunks_mut(n * n))
        .zip(rows.par_chunks(k.max(1)))
        .for_each(|(((pre, post), comb), r)| {
            let mut m = vec![0f32; cfg.mixes()];
            project_token(r, cfg.hidden, fn_, k, cfg.rms_eps, &mut m);
            gates_from_mixes(cfg, &m, scale, base, pre, post, comb);
        });
    g
}

/// The entry seam's folded weight `fnb[c][h] = sum_j fn[c][j*H + h]` (f32, j = 0 upward).
pub fn fold_entry_weight(cfg: &Config, fn_: &[f32]) -> Vec<f32> {
    let (n, h) = (cfg.n, cfg.hidden);
    let mut out = vec![0f32; cfg.mixes() * h];
    for (c, o) in out.chunks_mut(h).enumerate() {
        let row = &fn_[c * n * h..(c + 1) * n * h];
        for (hh, v) in o.iter_mut().enumerate() {
            let mut acc = row[hh];
            for j in 1..n {
                acc += row[j * h + hh];
            }
            *v = acc;
        }
    }
    out
}

/// Gates of the entry seam: the residual is x broadcast to n streams, computed on x alone with the
/// folded weight and an RMS over H elements (equal to gates(broadcast(x)) up to rounding).
pub fn entry_gates(cfg: &Config, x: &[bf16], fnb: &[f32], scale: &[f32], base: &[f32]) -> Gates {
    gates_rows(cfg, x, cfg.hidden, fnb, scale, base)
}

/// Head gates of V4: `p[j] = sigmoid(m[j] * scale[0] + base[j]) + hc_eps` with fn_head [n, n*H].
pub fn head_gates(cfg: &Config, residual: &[bf16], w: MixWeights<'_>) -> Vec<f32> {
    let (n, k) = (cfg.n, cfg.k());
    let t = residual.len() / k.max(1);
    let mut p = vec![0f32; t * n];
    p.par_chunks_mut(n)
        .zip(residual.par_chunks(k))
        .for_each(|(p, r)| {
            let mut m = vec![0f32; n];
            project_token(r, cfg.hidden, w.fn_, k, cfg.rms_eps, &mut m);
            for j in 0..n {
                p[j] = sigmoid(m[j] * w.scale[0] + w.base[j]) + cfg.hc_eps;
            }
        });
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Preset;

    #[test]
    fn equal_logits_give_uniform_comb() {
        for n in [1, 2, 4] {
            let mut c = vec![0.3f32; n * n];
            sinkhorn(n, 20, 1e-6, &mut c);
            for v in &c {
                assert!((v - 1.0 / n as f32).abs() < 1e-5, "n={n}: {v}");
            }
        }
    }

    #[test]
    fn sinkhorn_ends_close_to_doubly_stochastic() {
        let n = 4;
        let mut c: Vec<f32> = (0..16).map(|i| ((i * 7) % 5) as f32 * 0.7 - 1.0).collect();
        sinkhorn(n, 20, 1e-6, &mut c);
        for b in 0..n {
            let s: f32 = (0..n).map(|a| c[a * n + b]).sum();
            assert!((s - 1.0).abs() < 1e-4, "column {b} sums to {s}");
        }
        for a in 0..n {
            let s: f32 = c[a * n..(a + 1) * n].iter().sum();
            assert!((s - 1.0).abs() < 1e-2, "row {a} sums to {s}");
        }
    }

    #[test]
    fn dot_matches_f64() {
        let a: Vec<bf16> = (0..1000)
            .map(|i| bf16::from_f32((i as f32).sin()))
            .collect();
        let b: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.37).cos() * 0.01).collect();
        let exact: f64 = a.iter().zip(&b).map(|(a, b)| a.to_f64() * *b as f64).sum();
        assert!((dot_bf16_f32(&a, &b) as f64 - exact).abs() < 1e-6);
    }

    #[test]
    fn fold_sums_streams() {
        let mut cfg = Preset::V4Flash.config();
        cfg.hidden = 2;
        let fn_: Vec<f32> = (0..24 * 8).map(|i| i as f32).collect();
        let f = fold_entry_weight(&cfg, &fn_);
        // row 0: columns 0..8 are 0..8; h=0 sums 0+2+4+6.
        assert_eq!(f[0], 12.0);
        assert_eq!(f[1], 16.0);
    }
}
