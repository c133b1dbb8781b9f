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
    softmax_eps(n, eps, c);
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

/// The Sinkhorn's start on the logits `c` `[n,n]`: each row's softmax (max-subtracted), + eps.
pub fn softmax_eps(n: usize, eps: f32, c: &mut [f32]) {
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
}

/// A CPU model of the GPU gates' fast-path passes (common.cuh, `sinkhorn4_scaled`), for tests of
/// its range and accuracy: `k` holds the matrix after the softmax + eps on entry and the result on
/// return. The scaled form: C = diag(r) K diag(c) with K fixed; a row pass is
/// q_a <- sum_b K_ab c_b + eps q_a, r_a = 1 / q_a, a column pass the same on c. The sums are f32
/// fused multiply-adds in the kernel's order (from the eps term, b = 0 up); the reciprocals are
/// correctly rounded here (the kernel's approximate ones are within one ulp of them). Returns the
/// smallest and largest scale the passes produced.
pub fn sinkhorn_scaled_model(iters: usize, eps: f32, k: &mut [f32; 16]) -> (f32, f32) {
    let half = |k: &[f32; 16], rows: bool, x: &[f32; 4], y: &mut [f32; 4], e: &mut [f32; 4]| {
        for a in 0..4 {
            let mut q = e[a];
            for b in 0..4 {
                q = (if rows { k[4 * a + b] } else { k[4 * b + a] }).mul_add(x[b], q);
            }
            y[a] = 1.0 / q;
            e[a] = eps * q;
        }
    };
    let (mut rs, mut cs) = ([1f32; 4], [0f32; 4]);
    let (mut er, mut ec) = ([eps; 4], [eps; 4]);
    let (mut lo, mut hi) = (f32::INFINITY, 0f32);
    let mut seen = |v: &[f32; 4]| {
        for &x in v {
            lo = lo.min(x);
            hi = hi.max(x);
        }
    };
    half(k, false, &rs, &mut cs, &mut ec);
    seen(&cs);
    for _ in 1..iters {
        half(k, true, &cs, &mut rs, &mut er);
        seen(&rs);
        half(k, false, &rs, &mut cs, &mut ec);
        seen(&cs);
    }
    for a in 0..4 {
        for b in 0..4 {
            k[4 * a + b] *= rs[a] * cs[b];
        }
    }
    (lo, hi)
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

    /// The GPU's fast-path Sinkhorn (the scaled form, modelled by `sinkhorn_scaled_model`) over
    /// random and adversarial logits at every eps its path takes ([2^-30, 1]): every scale stays
    /// within [2^-40, 2^40], far inside f32's normal range (the kernel's reciprocals are not
    /// range-tested), and the result within 1e-6 of the f64 passes from the same matrix (SPEC
    /// section 8 allows 1e-5).
    #[test]
    fn scaled_sinkhorn_model_stays_in_range_and_near_f64() {
        use rand::{RngExt, SeedableRng};
        use rand_distr::Distribution;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(114);
        let normal = rand_distr::StandardNormal;
        for eps in [2f32.powi(-30), 1e-9, 1e-6, 0.5, 1.0] {
            let (mut lo, mut hi, mut worst) = (f32::INFINITY, 0f32, 0f64);
            for trial in 0..3000 {
                let scale = 10f32.powf(rng.random_range(-1.0f32..3.0));
                let mut l = [0f32; 16];
                for v in l.iter_mut() {
                    let z: f32 = normal.sample(&mut rng);
                    *v = z * scale;
                }
                if trial % 3 == 0 {
                    let b = rng.random_range(0..4);
                    for a in 0..4 {
                        l[4 * a + b] -= 1e4;
                    }
                }
                if trial % 5 == 0 {
                    let a = rng.random_range(0..4);
                    for b in 0..4 {
                        let z: f32 = normal.sample(&mut rng);
                        l[4 * a + b] += z * 1e3;
                    }
                }
                // The softmax + eps as `sinkhorn` forms it, then the passes both ways.
                let mut k = l;
                softmax_eps(4, eps, &mut k);
                let mut c64: Vec<f64> = k.iter().map(|&v| v as f64).collect();
                crate::reference::oracle::sinkhorn_passes(4, 20, eps as f64, &mut c64);
                let (l0, h0) = sinkhorn_scaled_model(20, eps, &mut k);
                lo = lo.min(l0);
                hi = hi.max(h0);
                for i in 0..16 {
                    worst = worst.max((k[i] as f64 - c64[i]).abs());
                }
            }
            assert!(
                lo >= 2f32.powi(-40) && hi <= 2f32.powi(40),
                "eps {eps:e}: scales in [{lo:e}, {hi:e}]"
            );
            assert!(worst <= 1e-6, "eps {eps:e}: {worst:e} from the f64 passes");
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
