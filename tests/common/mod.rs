//! Helpers shared by the integration tests.
#![allow(dead_code)]

use half::bf16;
use mhc::check::{self, Case, CaseReport};
use mhc::ops::Backend;
use mhc::ops::Op;
use mhc::spec::{Config, Preset};
use mhc::synth::{self, InputSpec};
use mhc::tensor::{TensorData, TensorMap};

/// A config with `n` streams and hidden size `h` (V4.1 constants otherwise).
pub fn cfg(n: usize, h: usize) -> Config {
    let mut c = Preset::V41Flash.config().with_hidden(h);
    c.n = n;
    c
}

/// Runs `cases` on `backend` with fresh seeds; panics with a readable report on any failure.
pub fn run_all(backend: &dyn Backend, cfg: &Config, cases: &[Case]) -> Vec<CaseReport> {
    let base = check::fresh_seed();
    let mut out = Vec::new();
    let mut failures = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let seed = base.wrapping_add(i as u64 * 7919);
        match check::run_case(backend, cfg, *c, seed) {
            Ok(r) => {
                if !r.pass() {
                    let bad: Vec<String> = r
                        .metrics
                        .iter()
                        .filter(|m| !m.pass)
                        .map(|m| {
                            format!("{} = {} (bound {}) {}", m.name, m.value, m.bound, m.detail)
                        })
                        .collect();
                    failures.push(format!(
                        "{} n={} H={} T={} norm={} fp8={} seed={} route={}: {}",
                        c.op,
                        cfg.n,
                        cfg.hidden,
                        c.t,
                        c.norm,
                        c.fp8,
                        seed,
                        r.route,
                        bad.join("; ")
                    ));
                }
                out.push(r);
            }
            Err(e) => failures.push(format!(
                "{} n={} H={} T={}: error {e}",
                c.op, cfg.n, cfg.hidden, c.t
            )),
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    out
}

/// Random inputs of the V4.1 seam (with a norm weight) for `t` tokens.
pub fn seam_inputs(c: &Config, t: usize, seed: u64) -> TensorMap {
    seam_inputs_norm(c, t, true, seed)
}

/// The same, with or without the norm weight.
pub fn seam_inputs_norm(c: &Config, t: usize, norm: bool, seed: u64) -> TensorMap {
    synth::inputs(
        c,
        &InputSpec {
            op: Op::Seam,
            t,
            norm,
            proj_nk: (0, 0),
        },
        seed,
    )
}

/// Whether two bf16 slices hold the same bits (the same length, every element bit-equal).
pub fn same_bits(a: &[half::bf16], b: &[half::bf16]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// The seam family: the ops with a fused kernel that take the residual streams and the weights.
pub const SEAM_FAMILY: [Op; 7] = [
    Op::Seam,
    Op::SeamV4,
    Op::Pre,
    Op::PreDelayed,
    Op::Entry,
    Op::Head,
    Op::Final,
];

/// One token whose f64 sums of squares depend on the order of their adds, built so that the
/// canonical order (`mhc::reference::tree_sum_squares`, the order of every fused GPU kernel) and
/// others give different RMS factors. H = 4096, 5120 or 7168: the means (over H and over 4H)
/// divide a sum built as H times an f32 midpoint exactly, so the f32 rounding of the mean depends
/// on the sum's last bits alone.
pub struct OrderSensitiveToken {
    /// Stream 0 of the residual (the token's other streams are zeros), and its x for the entry
    /// seam. Channels 0..2048 hold values of [2^-8, 2) whose squares sum exactly (in any order)
    /// to M = H (2^24 + 2j + 1) 2^-25, H times a midpoint between two f32 values with j even, so
    /// M / H rounds down; M lies in [2^11, 2^12), where an f64 ulp is 2^-41. Chunks 64..79
    /// (channels 2048..2560) hold two values of +-2^-23 each, squares of 2^-46: the tree adds a
    /// chunk's pair, then 16 chunks, to 2^-41, so it gives M + 2^-41 and (M + 2^-41) / H rounds
    /// up; adding them one at a time (or 8 chunks at a time, as the tile kernel once did: a tie,
    /// rounded to M's even last bit) loses them and gives M.
    pub stream0: Vec<bf16>,
    /// RMSNorm weights (f32) for the channels: where one exists, a weight for which
    /// bf16((c * rinv) * w) differs between the canonical factor and the sequential one.
    pub norm_weight: Vec<f32>,
    /// The norm's factor from the canonical order (`tree_sum_squares`).
    pub rinv_norm: f32,
    /// Channels whose layer input differs between the two factors.
    pub flips: usize,
}

impl OrderSensitiveToken {
    /// The token's four streams (stream-major: stream 0, then zeros).
    pub fn streams(&self) -> Vec<bf16> {
        let mut r = self.stream0.clone();
        r.resize(4 * self.stream0.len(), bf16::ZERO);
        r
    }

    /// Its layer input: the RMSNorm of stream 0 (what the carried pre-mix (1, 0, 0, 0), or a
    /// V4 pre of (1 + 1e-6, 1e-6, ...) over zero streams, collapses it to), with the canonical
    /// factor, as SPEC section 4 rounds it.
    pub fn layer_input(&self) -> Vec<bf16> {
        self.stream0
            .iter()
            .zip(&self.norm_weight)
            .map(|(c, w)| bf16::from_f32((c.to_f32() * self.rinv_norm) * w))
            .collect()
    }
}

/// Builds an [`OrderSensitiveToken`] for config `c` (H = 4096, 5120 or 7168); panics if none of
/// 200 candidates makes every factor (the norm's over H, the gates' over 4H and, for the entry
/// seam, over H) differ between the canonical and the sequential order.
pub fn order_sensitive_token(c: &Config, seed: u64) -> OrderSensitiveToken {
    use mhc::reference::{rms_factor, sequential_sum_squares, tree_sum_squares};
    use rand::{RngExt, SeedableRng, seq::SliceRandom};
    let h = c.hidden;
    assert!(
        [4096, 5120, 7168].contains(&h),
        "the construction needs H = 4096, 5120 or 7168"
    );
    for j in (0u64..400).step_by(2) {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed.wrapping_add(j));
        // Squares in units of 2^-16: a bf16 value k / 128 (k in 128..256) squares to 4 k^2 units.
        let target: u64 = h as u64 * ((1 << 24) + 2 * j + 1) / 512;
        assert!(
            (2048 << 16..4096 << 16).contains(&target),
            "the sum lies in [2^11, 2^12)"
        );
        let mut vals: Vec<f32> = Vec::new();
        let mut sum = 0u64;
        while target - sum > 8 * 65536 {
            let k: u64 = rng.random_range(128..256);
            sum += 4 * k * k;
            vals.push(k as f32 / 128.0);
        }
        while target - sum >= 65536 {
            sum += 65536;
            vals.push(1.0);
        }
        let rem = target - sum;
        for b in 0..16i32 {
            if (rem >> b) & 1 == 1 {
                if b % 2 == 0 {
                    vals.push(2f32.powi((b - 16) / 2));
                } else {
                    vals.extend([2f32.powi((b - 17) / 2); 2]);
                }
            }
        }
        assert!(vals.len() <= 2048, "{} values", vals.len());
        let mut pos: Vec<usize> = (0..2048).collect();
        pos.shuffle(&mut rng);
        let mut v = vec![bf16::ZERO; h];
        for (p, x) in pos.iter().zip(&vals) {
            let s = if rng.random::<bool>() { -1.0 } else { 1.0 };
            v[*p] = bf16::from_f32(s * x);
        }
        for chunk in 64..80 {
            let mut ch: Vec<usize> = (chunk * 32..chunk * 32 + 32).collect();
            ch.shuffle(&mut rng);
            for &p in &ch[..2] {
                let s = if rng.random::<bool>() { -1.0 } else { 1.0 };
                v[p] = bf16::from_f32(s * 2f32.powi(-23));
            }
        }
        let mut four = v.clone();
        four.resize(4 * h, bf16::ZERO);
        let (tn, sn) = (tree_sum_squares(&v, h), sequential_sum_squares(&v));
        let (t4, s4) = (tree_sum_squares(&four, h), sequential_sum_squares(&four));
        assert_eq!(tn, t4, "zero streams add nothing");
        let differs = |t: f64, s: f64, count: usize, eps: f32| {
            rms_factor(t, count, eps) != rms_factor(s, count, eps)
        };
        if !(differs(tn, sn, h, c.norm_eps)
            && differs(t4, s4, 4 * h, c.rms_eps)
            && differs(tn, sn, h, c.rms_eps))
        {
            continue;
        }
        let rt = rms_factor(tn, h, c.norm_eps);
        let rs = rms_factor(sn, h, c.norm_eps);
        // An f32 weight (SPEC accepts them) near B / (c * rinv), B halfway between two bf16
        // values: the products (c * rt) * w and (c * rs) * w then straddle B.
        let ln = |x: f32, r: f32, w: f32| bf16::from_f32((x * r) * w).to_bits();
        let mut flips = 0;
        let norm_weight: Vec<f32> = v
            .iter()
            .map(|c| {
                let x = c.to_f32();
                let a = (x * rt).abs();
                if a != 0.0 {
                    let b = bf16::from_f32(a * rng.random_range(0.6f32..1.6));
                    let mid =
                        b.to_f32() + (bf16::from_bits(b.to_bits() + 1).to_f32() - b.to_f32()) / 2.0;
                    let w0 = mid / a;
                    for k in -64i32..64 {
                        let w = f32::from_bits((w0.to_bits() as i32 + k) as u32);
                        if ln(x, rt, w) != ln(x, rs, w) {
                            flips += 1;
                            return w;
                        }
                    }
                }
                rng.random_range(0.5f32..1.5)
            })
            .collect();
        assert!(
            flips >= 64,
            "only {flips} channels tell the two factors apart"
        );
        return OrderSensitiveToken {
            stream0: v,
            norm_weight,
            rinv_norm: rt,
            flips,
        };
    }
    panic!("no candidate separates the canonical and the sequential factors");
}

/// Puts `tok` into rows `rows` of an op's inputs `m` (H = 4096, n = 4), with coefficients under
/// which the op's layer input (or `out` of final) is [`OrderSensitiveToken::layer_input`]: the
/// residual's stream 0 (x for the entry seam and the rmsnorm op), post 0 and comb the identity (r' = r), the carried
/// pre (1, 0, 0, 0); and for the whole batch the norm weight, and for the V4 ops a pre scale of
/// 0 with pre bases (30, -30, -30, -30), so pre is (1 + 1e-6, 1e-6, 1e-6, 1e-6) and the collapse
/// of the zero streams is stream 0 again.
pub fn put_order_sensitive(m: &mut TensorMap, op: Op, rows: &[usize], tok: &OrderSensitiveToken) {
    let h = tok.stream0.len();
    // Rows `rows` of a per-token tensor of v.len() elements a token set to `v`.
    fn set_rows<T: Copy>(d: &mut [T], rows: &[usize], v: &[T]) {
        for &r in rows {
            d[r * v.len()..(r + 1) * v.len()].copy_from_slice(v);
        }
    }
    if let Some(TensorData::BF16(d)) = m.get_mut("residual").map(|t| &mut t.data) {
        set_rows(d, rows, &tok.streams());
    }
    let x = if matches!(op, Op::Entry | Op::Rmsnorm) {
        tok.stream0.clone()
    } else {
        vec![bf16::ONE; h]
    };
    if let Some(TensorData::BF16(d)) = m.get_mut("x").map(|t| &mut t.data) {
        set_rows(d, rows, &x);
    }
    let mut set_f = |name: &str, v: &[f32]| {
        if let Some(TensorData::F32(d)) = m.get_mut(name).map(|t| &mut t.data) {
            set_rows(d, rows, v);
        }
    };
    set_f("post", &[0.0; 4]);
    let mut eye = [0f32; 16];
    for i in 0..4 {
        eye[i * 4 + i] = 1.0;
    }
    set_f("comb", &eye);
    set_f("pre", &[1.0, 0.0, 0.0, 0.0]);
    if m.contains_key("norm_weight") {
        let w = mhc::tensor::HostTensor::f32("norm_weight", &[h], tok.norm_weight.clone()).unwrap();
        m.insert("norm_weight".into(), w);
    }
    if matches!(op, Op::Pre | Op::SeamV4) {
        if let Some(TensorData::F32(d)) = m.get_mut("scale").map(|t| &mut t.data) {
            d[0] = 0.0;
        }
        if let Some(TensorData::F32(d)) = m.get_mut("base").map(|t| &mut t.data) {
            d[..4].copy_from_slice(&[30.0, -30.0, -30.0, -30.0]);
        }
    }
}
