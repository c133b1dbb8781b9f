//! Helpers shared by the integration tests.
#![allow(dead_code)]

use mhc::check::{self, Case, CaseReport};
use mhc::ops::Backend;
use mhc::ops::Op;
use mhc::spec::{Config, Preset};
use mhc::synth::{self, InputSpec};
use mhc::tensor::TensorMap;

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
