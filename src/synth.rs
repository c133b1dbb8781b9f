//! Random op inputs at realistic scale (SPEC section 8): residual and x ~ N(0,1), carried
//! coefficients shaped like real gates (pre in (0,1), post in (0,2), comb from a Sinkhorn of
//! random logits), weights from [`SeamWeights::synthetic`]. Never zeros.

use crate::ops::Op;
use crate::reference::gates::sinkhorn;
use crate::spec::Config;
use crate::tensor::{HostTensor, TensorMap};
use crate::weights::{SeamWeights, normal};
use half::bf16;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::Distribution;

/// What to put in a random input set.
#[derive(Clone, Copy, Debug)]
pub struct InputSpec {
    /// The op the inputs are for.
    pub op: Op,
    /// Tokens (rows of a for the projection).
    pub t: usize,
    /// Include a norm weight (for ops that take one).
    pub norm: bool,
    /// Projection only: N and K.
    pub proj_nk: (usize, usize),
}

/// `len` values of N(0, std) as bf16, generated in parallel chunks, each seeded from `rng` and
/// its index (so the result depends only on the seed).
fn bf16_normal(rng: &mut ChaCha8Rng, len: usize, std: f32) -> Vec<bf16> {
    use rand::Rng;
    use rayon::prelude::*;
    const CHUNK: usize = 1 << 16;
    let base = rng.next_u64();
    let d = normal(0.0, std);
    let mut v = vec![bf16::ZERO; len];
    v.par_chunks_mut(CHUNK).enumerate().for_each(|(i, c)| {
        let mut r =
            ChaCha8Rng::seed_from_u64(base ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        for x in c {
            *x = bf16::from_f32(d.sample(&mut r));
        }
    });
    v
}

fn sigmoid(z: f32) -> f32 {
    1.0 / (1.0 + (-z).exp())
}

/// Carried (post, comb, pre) for `t` tokens, shaped like real gate outputs.
pub fn carried(cfg: &Config, t: usize, seed: u64) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let n = cfg.n;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6361_7272_6965_6400);
    let d = normal(0.0, 1.0);
    let pre = (0..t * n)
        .map(|_| sigmoid(d.sample(&mut rng)) + cfg.hc_eps)
        .collect();
    let post = (0..t * n)
        .map(|_| sigmoid(d.sample(&mut rng)) * cfg.post_mult)
        .collect();
    let mut comb: Vec<f32> = (0..t * n * n).map(|_| d.sample(&mut rng)).collect();
    // n = 0 (which Config::validate rejects) leaves comb empty; max(1) keeps chunks_mut defined.
    for c in comb.chunks_mut((n * n).max(1)) {
        sinkhorn(n, cfg.sinkhorn_iters, cfg.hc_eps, c);
    }
    (post, comb, pre)
}

/// Random inputs (and weights) for one op, named as SPEC section 9 names them.
pub fn inputs(cfg: &Config, spec: &InputSpec, seed: u64) -> TensorMap {
    let (t, n, h) = (spec.t, cfg.n, cfg.hidden);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut m = TensorMap::new();
    let mut put = |name: &str, ten: crate::error::Result<HostTensor>| {
        // Shapes here are built from the same dims as the data, so this cannot fail.
        if let Ok(ten) = ten {
            m.insert(name.to_string(), ten);
        }
    };
    if spec.op == Op::Projection {
        let (nn, k) = spec.proj_nk;
        put(
            "a",
            HostTensor::bf16("a", &[t, k], bf16_normal(&mut rng, t * k, 1.0)),
        );
        put(
            "w",
            HostTensor::bf16("w", &[nn, k], bf16_normal(&mut rng, nn * k, 0.02)),
        );
        return m;
    }
    put(
        "x",
        HostTensor::bf16("x", &[t, h], bf16_normal(&mut rng, t * h, 1.0)),
    );
    put(
        "residual",
        HostTensor::bf16(
            "residual",
            &[t, n, h],
            bf16_normal(&mut rng, t * n * h, 1.0),
        ),
    );
    let (post, comb, pre) = carried(cfg, t, seed);
    put("post", HostTensor::f32("post", &[t, n], post));
    put("comb", HostTensor::f32("comb", &[t, n, n], comb));
    put("pre", HostTensor::f32("pre", &[t, n], pre));
    let w = if spec.op == Op::Head {
        SeamWeights::synthetic_head(cfg, seed.wrapping_add(1))
    } else {
        SeamWeights::synthetic(cfg, seed.wrapping_add(1))
    };
    if spec.op.takes_mix() {
        let rows = w.base.len();
        put("fn", HostTensor::f32("fn", &[rows, cfg.k()], w.fn_.clone()));
        put(
            "scale",
            HostTensor::f32("scale", &[w.scale.len()], w.scale.clone()),
        );
        put("base", HostTensor::f32("base", &[rows], w.base.clone()));
    }
    if spec.norm && (spec.op.takes_norm() || spec.op == Op::Rmsnorm) {
        let wb: Vec<bf16> = w.norm_weight.iter().map(|v| bf16::from_f32(*v)).collect();
        put("norm_weight", HostTensor::bf16("norm_weight", &[h], wb));
    }
    // Drop what the op does not read, so a file written from this is exactly the op's inputs.
    let keep: &[&str] = match spec.op {
        Op::Gates => &["residual", "fn", "scale", "base"],
        Op::PostMap => &["x", "residual", "post", "comb"],
        Op::Collapse | Op::Final => &["residual", "pre", "norm_weight"],
        Op::Rmsnorm => &["x", "norm_weight"],
        Op::Pre | Op::Head => &["residual", "fn", "scale", "base", "norm_weight"],
        Op::PreDelayed => &["residual", "pre", "fn", "scale", "base", "norm_weight"],
        Op::Entry => &["x", "fn", "scale", "base", "norm_weight"],
        Op::Seam => &[
            "x",
            "residual",
            "post",
            "comb",
            "pre",
            "fn",
            "scale",
            "base",
            "norm_weight",
        ],
        Op::SeamV4 => &[
            "x",
            "residual",
            "post",
            "comb",
            "fn",
            "scale",
            "base",
            "norm_weight",
        ],
        Op::Expand => &["x"],
        Op::Projection => &["a", "w"],
    };
    m.retain(|k, _| keep.contains(&k.as_str()));
    m
}
