//! The CPU reference against the f64 oracle on fresh random inputs, known answers, and red arms
//! that prove each comparison can fail.

mod common;

use common::{
    SEAM_FAMILY, cfg, order_sensitive_token, put_order_sensitive, run_all, same_bits, seam_inputs,
};
use half::bf16;
use mhc::check::{self, Case};
use mhc::ops::{Backend, CpuBackend, Op, OpArgs};
use mhc::reference::{self, gates};
use mhc::synth::{self, InputSpec};

#[test]
fn every_op_small_t_every_n_and_h() {
    for n in [1, 2, 4] {
        for h in [64, 4096, 5120, 7168] {
            let c = cfg(n, h);
            run_all(&CpuBackend, &c, &check::standard_cases(&[0, 1, 3, 17]));
        }
    }
}

#[test]
fn seam_family_large_t() {
    let ops: Vec<Op> = SEAM_FAMILY
        .into_iter()
        .chain([Op::PostMap, Op::Gates])
        .collect();
    for (n, h, ts) in [
        (4, 64, &[128, 1000][..]),
        (2, 64, &[1000]),
        (4, 5120, &[128, 1000]),
        (4, 7168, &[128]),
    ] {
        let c = cfg(n, h);
        let cases: Vec<Case> = check::standard_cases(ts)
            .into_iter()
            .filter(|k| {
                ops.contains(&k.op)
                    && (k.norm || !k.op.takes_norm())
                    && (k.fp8 || !k.op.has_layer_input())
            })
            .collect();
        run_all(&CpuBackend, &c, &cases);
    }
    let c = cfg(4, 7168);
    run_all(
        &CpuBackend,
        &c,
        &[Case {
            op: Op::Seam,
            t: 1000,
            norm: true,
            fp8: true,
            bf16_out: false,
        }],
    );
}

#[test]
fn one_hot_pre_collapses_to_a_bit_exact_copy() {
    for n in [1, 2, 4] {
        let c = cfg(n, 320);
        let mut m = synth::inputs(
            &c,
            &InputSpec {
                op: Op::Collapse,
                t: 5,
                norm: false,
                proj_nk: (0, 0),
            },
            3,
        );
        for j in 0..n {
            let mut pre = vec![0f32; 5 * n];
            for t in 0..5 {
                pre[t * n + j] = 1.0;
            }
            m.insert(
                "pre".into(),
                mhc::tensor::HostTensor::f32("pre", &[5, n], pre).unwrap(),
            );
            let args = OpArgs::from_map(Op::Collapse, &c, &m, false).unwrap();
            let (out, _) = CpuBackend.execute(&args).unwrap();
            let li = out.layer_input.unwrap();
            let r = args.residual.unwrap();
            for t in 0..5 {
                let want = &r[(t * n + j) * 320..(t * n + j + 1) * 320];
                assert!(
                    same_bits(&li[t * 320..(t + 1) * 320], want),
                    "n={n} stream {j} token {t}"
                );
            }
        }
    }
}

#[test]
fn equal_logits_give_comb_one_over_n() {
    for n in [1, 2, 4] {
        let c = cfg(n, 64);
        let fn_ = vec![0f32; c.mixes() * c.k()];
        let base = vec![0.25f32; c.mixes()];
        let scale = [1.0f32, 1.0, 1.0];
        let r: Vec<bf16> = (0..3 * c.k())
            .map(|i| bf16::from_f32((i as f32 * 0.37).sin()))
            .collect();
        let g = gates::gates(
            &c,
            &r,
            gates::MixWeights {
                fn_: &fn_,
                scale: &scale,
                base: &base,
            },
        );
        for v in &g.comb {
            assert!((v - 1.0 / n as f32).abs() < 1e-5, "n={n}: {v}");
        }
    }
}

#[test]
fn identity_comb_and_zero_post_copy_the_residual() {
    let c = cfg(4, 256);
    let m = seam_inputs(&c, 3, 5);
    let x = m["x"].as_bf16("x").unwrap();
    let r = m["residual"].as_bf16("residual").unwrap();
    let post = vec![0f32; 3 * 4];
    let mut comb = vec![0f32; 3 * 16];
    for t in 0..3 {
        for i in 0..4 {
            comb[t * 16 + i * 4 + i] = 1.0;
        }
    }
    let args = OpArgs::post_map(&c, x, r, &post, &comb).unwrap();
    let out = CpuBackend.execute(&args).unwrap().0.residual_out.unwrap();
    assert!(same_bits(&out, r));
}

#[test]
fn entry_folded_gates_agree_with_gates_of_the_broadcast() {
    let c = cfg(4, 1024);
    let w = mhc::SeamWeights::synthetic(&c, 9);
    let x = mhc::bench::gpu::random_bf16(7 * 1024, 1.0, 4);
    let fnb = gates::fold_entry_weight(&c, &w.fn_);
    let folded = gates::entry_gates(&c, &x, &fnb, &w.scale, &w.base);
    let mut r = vec![bf16::ZERO; 7 * 4 * 1024];
    reference::post_map::expand(4, 1024, &x, &mut r);
    let full = gates::gates(&c, &r, w.mix());
    for (a, b) in folded
        .comb
        .iter()
        .chain(&folded.pre)
        .chain(&folded.post)
        .zip(full.comb.iter().chain(&full.pre).chain(&full.post))
    {
        assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{a} vs {b}");
    }
}

/// Verifies tampered outputs (or outputs of a tampered config) against the true arguments.
fn verify_fails(args: &OpArgs<'_>, out: &mhc::OpOutputs, what: &str) {
    let ms = check::verify(args, out).unwrap();
    assert!(
        ms.iter().any(|m| !m.pass),
        "red arm `{what}` passed: {ms:?}"
    );
}

#[test]
fn red_arms_fail() {
    let c = cfg(4, 512);
    let m = seam_inputs(&c, 9, 21);
    let args = OpArgs::from_map(Op::Seam, &c, &m, true).unwrap();
    let (good, _) = CpuBackend.execute(&args).unwrap();
    assert!(
        check::verify(&args, &good).unwrap().iter().all(|m| m.pass),
        "green arm must pass"
    );

    // Too few Sinkhorn iterations. (19 instead of 20 is not a usable red arm: on inputs at
    // realistic scale the iteration has converged to within 1e-7 by then.)
    let mut bad_cfg = c.clone();
    bad_cfg.sinkhorn_iters = 2;
    let bad_args = OpArgs::from_map(Op::Seam, &bad_cfg, &m, true).unwrap();
    verify_fails(
        &args,
        &CpuBackend.execute(&bad_args).unwrap().0,
        "2 Sinkhorn iterations",
    );

    // A wrong post multiplier.
    let mut bad_cfg = c.clone();
    bad_cfg.post_mult = 1.0;
    let bad_args = OpArgs::from_map(Op::Seam, &bad_cfg, &m, true).unwrap();
    verify_fails(
        &args,
        &CpuBackend.execute(&bad_args).unwrap().0,
        "post_mult 1",
    );

    // The 64-wide-wavefront bug: the norm comes out sqrt(2) too large.
    let mut out = good.clone();
    for v in out.layer_input.as_mut().unwrap() {
        *v = bf16::from_f32(v.to_f32() * std::f32::consts::SQRT_2);
    }
    verify_fails(&args, &out, "layer input scaled by sqrt(2)");

    // One element never written (the poison survives).
    let mut out = good.clone();
    out.residual_out.as_mut().unwrap()[77] = bf16::NAN;
    verify_fails(&args, &out, "one unwritten residual element");

    // One element off by two ulps.
    let mut out = good.clone();
    let li = out.layer_input.as_mut().unwrap();
    li[5] = check::from_ordered(check::ordered(li[5]) + 2);
    verify_fails(&args, &out, "a 2-ulp error");

    // The norm skipped entirely.
    let mut no_norm = m.clone();
    no_norm.remove("norm_weight");
    let nn_args = OpArgs::from_map(Op::Seam, &c, &no_norm, true).unwrap();
    verify_fails(
        &args,
        &CpuBackend.execute(&nn_args).unwrap().0,
        "norm skipped",
    );

    // A wrong MXFP8 scale.
    let mut out = good.clone();
    out.fp8.as_mut().unwrap().scales[3] ^= 1;
    verify_fails(&args, &out, "an MXFP8 scale off by a factor of 2");

    // Gates off by more than 1e-5.
    let mut out = good.clone();
    out.comb_out.as_mut().unwrap()[2] += 3e-5;
    verify_fails(&args, &out, "a comb entry off by 3e-5");
}

#[test]
fn zero_tokens_is_a_valid_no_op() {
    let c = cfg(4, 256);
    for op in mhc::Op::ALL {
        let m = synth::inputs(
            &c,
            &InputSpec {
                op,
                t: 0,
                norm: op == Op::Rmsnorm,
                proj_nk: (16, 256),
            },
            1,
        );
        let args = OpArgs::from_map(op, &c, &m, false).unwrap();
        let (out, _) = CpuBackend.execute(&args).unwrap();
        let map = out.to_map(&args).unwrap();
        assert!(map.values().all(|t| t.is_empty()), "{op}");
    }
}

/// K = 0 is an empty product: every output is +0 (what the GPU's generic kernel writes too).
#[test]
fn projection_with_k_zero_is_all_zeros() {
    let c = cfg(4, 256);
    let args = OpArgs::projection(&c, 3, 5, 0, &[], &[]).unwrap();
    let (out, _) = CpuBackend.execute(&args).unwrap();
    assert!(check::verify(&args, &out).unwrap().iter().all(|m| m.pass));
    let y = out.out_f32.unwrap();
    assert_eq!(y.len(), 15);
    assert!(y.iter().all(|v| v.to_bits() == 0), "{y:?}");
}

/// The bf16 output is the f32 output rounded once to nearest even, element for element; it passes
/// the check's bf16 bound, and nothing else is written. An op other than the projection refuses
/// the choice by name.
#[test]
fn projection_bf16_output_is_the_f32_output_rounded() {
    let c = cfg(4, 256);
    for (m, n, k) in [(1, 33, 1032), (3, 100, 4096), (17, 7, 200)] {
        let spec = InputSpec {
            op: Op::Projection,
            t: m,
            norm: false,
            proj_nk: (n, k),
        };
        let inputs = synth::inputs(&c, &spec, (m + n + k) as u64);
        let args = OpArgs::from_map(Op::Projection, &c, &inputs, false).unwrap();
        let y = CpuBackend.execute(&args).unwrap().0.out_f32.unwrap();
        let args_b = args.clone().with_bf16_out(true).unwrap();
        let (out, _) = CpuBackend.execute(&args_b).unwrap();
        assert!(out.out_f32.is_none());
        let yb = out.out_bf16.clone().unwrap();
        assert_eq!(yb.len(), m * n);
        assert!(
            yb.iter()
                .zip(&y)
                .all(|(b, f)| b.to_bits() == bf16::from_f32(*f).to_bits()),
            "M={m} N={n} K={k}"
        );
        // Some elements must differ from their f32 value, or the test would not see a missing
        // rounding.
        assert!(yb.iter().zip(&y).any(|(b, f)| b.to_f32() != *f));
        let ms = check::verify(&args_b, &out).unwrap();
        assert!(ms.iter().all(|x| x.pass), "M={m} N={n} K={k}: {ms:?}");
        let map = out.to_map(&args_b).unwrap();
        assert_eq!(map["out"].shape, vec![m, n]);
        assert_eq!(map["out"].as_bf16("out").unwrap(), &yb[..]);
        // A wrong finite value fails: 5 % of the element's sum of magnitudes off, far past half
        // a bf16 ulp of it (at most 2^-8 of the value) plus 1e-5 of the sum.
        let p = args.projection.unwrap();
        let sums = reference::projection::abs_dot(m, n, k, p.a, p.w);
        let mut bad = out.clone();
        let i = m * n / 2;
        bad.out_bf16.as_mut().unwrap()[i] = bf16::from_f64(f64::from(y[i]) + 0.05 * sums[i]);
        assert!(!check::verify(&args_b, &bad).unwrap().iter().all(|x| x.pass));
        // NaN (a poisoned element) fails.
        let mut nan = out.clone();
        nan.out_bf16.as_mut().unwrap()[0] = bf16::NAN;
        assert!(!check::verify(&args_b, &nan).unwrap().iter().all(|x| x.pass));
    }
    let seam = synth::inputs(
        &c,
        &InputSpec {
            op: Op::Seam,
            t: 2,
            norm: false,
            proj_nk: (0, 0),
        },
        1,
    );
    let args = OpArgs::from_map(Op::Seam, &c, &seam, false).unwrap();
    let err = args.with_bf16_out(true).unwrap_err().to_string();
    assert!(err.contains("`seam`") && err.contains("bf16"), "{err}");
}

#[test]
fn nan_and_inf_inputs_do_not_panic() {
    let c = cfg(4, 256);
    let mut m = seam_inputs(&c, 2, 3);
    if let mhc::tensor::TensorData::BF16(v) = &mut m.get_mut("residual").unwrap().data {
        v[0] = bf16::NAN;
        v[1] = bf16::INFINITY;
        v[300] = bf16::NEG_INFINITY;
    }
    if let mhc::tensor::TensorData::F32(v) = &mut m.get_mut("comb").unwrap().data {
        v[3] = f32::NAN;
    }
    let args = OpArgs::from_map(Op::Seam, &c, &m, true).unwrap();
    let _ = CpuBackend.execute(&args).unwrap();
    let args = OpArgs::from_map(Op::SeamV4, &c, &m, true).unwrap();
    let _ = CpuBackend.execute(&args).unwrap();
}

/// The fused kernels multiply fn on TF32 tensor cores after splitting each f32 weight into two
/// pieces (kernels/seam.cu, `project_step`): hi = the f32 with its low 13 bits cleared (a TF32
/// value), lo = the exact remainder, of which the tensor cores read the top 19 bits (a TF32
/// truncation: 11 significant bits). This checks, on the host with the same operations, that hi is
/// a TF32 value, that hi + lo is the weight exactly, and that hi + TF32(lo) is within 2^-21 of
/// it relative (what SPEC's 1e-5 on the projection leaves room for many times over), for weights
/// of magnitude 2^-97 to 2^108 with random significands (lo stays normal).
#[test]
fn two_piece_tf32_split_is_within_2_pow_21() {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let tf32 = |f: f32| f32::from_bits(f.to_bits() & 0xffff_e000);
    let mut checked = 0;
    let mut exact = 0;
    for exp in 30u32..=235 {
        for _ in 0..2000 {
            let bits = (next() as u32 & 0x807f_ffff) | (exp << 23);
            let f = f32::from_bits(bits);
            let hi = tf32(f);
            let lo = f - hi;
            assert_eq!(
                hi.to_bits() & 0x1fff,
                0,
                "{f:e}: hi {hi:e} is not a TF32 value"
            );
            assert_eq!(
                hi as f64 + lo as f64,
                f as f64,
                "{f:e}: the remainder is not exact"
            );
            let err = (hi as f64 + tf32(lo) as f64 - f as f64).abs();
            assert!(
                err < (f as f64).abs() * 2f64.powi(-21),
                "{f:e}: error {err:e}"
            );
            exact += (err == 0.0) as usize;
            checked += 1;
        }
    }
    assert!(checked > 400_000);
    // About half the weights lose nothing (their remainder has at most 11 significant bits: with
    // random significands, a quarter outright and a quarter more by its dropped bits being zero);
    // the rest lose their last bits, so the bound above is what was checked, not exactness.
    assert!(
        exact > checked / 3 && exact < checked,
        "{exact} of {checked} exact"
    );
}

/// The reference sums squares in the canonical order of the GPU kernels
/// (`reference::tree_sum_squares`): on a token whose RMS factors depend on the order of the adds
/// (built so that the canonical and the sequential order give different norm factors, and
/// different layer inputs at `flips` channels), every op with a layer input gives the layer input
/// of the canonical factor, in every row of a batch, at H = 4096, 5120 and 7168.
#[test]
fn the_reference_sums_squares_in_the_canonical_order() {
    for h in [4096, 5120, 7168] {
        let c = cfg(4, h);
        let tok = order_sensitive_token(&c, 7);
        let want = tok.layer_input();
        for op in SEAM_FAMILY {
            if op == Op::Head {
                continue; // no norm: the collapse with the head's gates
            }
            let spec = InputSpec {
                op,
                t: 3,
                norm: true,
                proj_nk: (0, 0),
            };
            let mut m = synth::inputs(&c, &spec, 11);
            put_order_sensitive(&mut m, op, &[0, 2], &tok);
            let args = OpArgs::from_map(op, &c, &m, false).unwrap();
            let (out, _) = CpuBackend.execute(&args).unwrap();
            let li = out.layer_input.as_ref().or(out.out.as_ref()).unwrap();
            for row in [0, 2] {
                assert!(
                    same_bits(&li[row * h..(row + 1) * h], &want),
                    "{op} H={h}: row {row} is not the layer input of the canonical factor ({} channels tell the factors apart)",
                    tok.flips
                );
            }
        }
    }
}
