//! Accuracy checks of SPEC section 8, shared by `mhc check` and the test suite.
//!
//! Every output of a backend is compared against an expectation computed from the *same inputs*
//! the backend saw, including its own upstream outputs: gates are checked on the backend's own r'
//! against the f64 oracle, the V4 layer input on the backend's own pre, and so on. That keeps a
//! one-ulp difference upstream from being blamed downstream, and it is what SPEC section 8 means
//! by "same bf16 inputs".
//!
//! The bf16 contract (at most 1 ulp, at least 99.99 % bit-equal) is statistical; for fewer than
//! 10 000 elements we allow a single element to differ by one ulp, the smallest count the
//! percentage can be read as.

use crate::error::{Error, Result};
use crate::ops::{Backend, Op, OpArgs, OpOutputs, Route};
use crate::reference::{self, oracle};
use crate::spec::Config;
use crate::synth::{self, InputSpec};
use half::bf16;
use serde::Serialize;

/// A monotone integer key of a bf16 value: adjacent finite values differ by one.
pub fn ordered(v: bf16) -> i32 {
    let b = v.to_bits() as i32;
    if b & 0x8000 != 0 { -(b & 0x7fff) } else { b }
}

/// Inverse of [`ordered`].
pub fn from_ordered(k: i32) -> bf16 {
    if k < 0 {
        bf16::from_bits(((-k) as u16) | 0x8000)
    } else {
        bf16::from_bits(k as u16)
    }
}

/// How two bf16 tensors differ.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct UlpStats {
    /// Elements compared.
    pub n: usize,
    /// Elements whose bits differ.
    pub n_diff: usize,
    /// Largest distance in ulps (u32::MAX when a NaN appears on either side but not both).
    pub max_ulp: u32,
}

impl UlpStats {
    /// Fraction of bit-equal elements.
    pub fn frac_equal(&self) -> f64 {
        if self.n == 0 {
            1.0
        } else {
            1.0 - self.n_diff as f64 / self.n as f64
        }
    }
    /// SPEC section 8: <= 1 ulp, >= 99.99 % bit-equal (see module docs for small tensors).
    pub fn within_contract(&self) -> bool {
        let allowed = ((self.n as f64 * 1e-4).floor() as usize).max(1);
        self.max_ulp <= 1 && self.n_diff <= allowed
    }
}

/// Compares bf16 tensors element by element (lengths must match). Parallel over elements.
pub fn compare_bf16(got: &[bf16], want: &[bf16]) -> UlpStats {
    use rayon::prelude::*;
    let n = got.len().max(want.len());
    if got.len() != want.len() {
        return UlpStats {
            n,
            n_diff: n,
            max_ulp: u32::MAX,
        };
    }
    let (n_diff, max_ulp) = got
        .par_iter()
        .zip(want)
        .map(|(g, w)| {
            if g.to_bits() == w.to_bits() {
                return (0usize, 0u32);
            }
            let d = if g.is_nan() || w.is_nan() {
                u32::MAX
            } else {
                (ordered(*g) - ordered(*w)).unsigned_abs()
            };
            (usize::from(d != 0), d) // d == 0: +0 and -0
        })
        .reduce(|| (0, 0), |a, b| (a.0 + b.0, a.1.max(b.1)));
    UlpStats { n, n_diff, max_ulp }
}

/// Largest `|got - oracle| / max(1, |oracle|)`; infinite when `got` has a NaN or the lengths
/// differ. SPEC section 8 bounds it by 1e-5 for the gates.
pub fn max_rel_err(got: &[f32], oracle: &[f64]) -> f64 {
    if got.len() != oracle.len() {
        return f64::INFINITY;
    }
    got.iter()
        .zip(oracle)
        .map(|(g, o)| {
            let e = (*g as f64 - o).abs() / o.abs().max(1.0);
            if e.is_nan() { f64::INFINITY } else { e }
        })
        .fold(0.0, f64::max)
}

/// Gate tolerance of SPEC section 8.
pub const GATE_TOL: f64 = 1e-5;

/// One measured quantity of a check.
#[derive(Clone, Debug, Serialize)]
pub struct Metric {
    /// What was compared (`layer_input vs reference`, `comb vs oracle`, ...).
    pub name: String,
    /// The measured error (ulps, relative error, or count).
    pub value: f64,
    /// The bound it must respect.
    pub bound: f64,
    /// Human-readable detail (fraction equal, ...).
    pub detail: String,
    /// Whether it is within the bound.
    pub pass: bool,
}

/// One checked call.
#[derive(Clone, Debug, Serialize)]
pub struct CaseReport {
    /// The op.
    pub op: Op,
    /// Tokens.
    pub t: usize,
    /// Streams.
    pub n: usize,
    /// Hidden size.
    pub h: usize,
    /// Fused norm on.
    pub norm: bool,
    /// MXFP8 on.
    pub fp8: bool,
    /// The projection's output in bf16.
    pub bf16_out: bool,
    /// The projection's rows of w (N) as the backend received them; None for the other ops.
    pub proj_n: Option<usize>,
    /// The seed of the random inputs (reproduce with MHC_SEED).
    pub seed: u64,
    /// The route the backend took.
    pub route: Route,
    /// The comparisons.
    pub metrics: Vec<Metric>,
}

impl CaseReport {
    /// The op as `mhc check` names it in its report: `projection bf16 N=2600` where the output is
    /// bf16 and the op has an N.
    pub fn label(&self) -> String {
        let mut s = self.op.name().to_string();
        if self.bf16_out {
            s.push_str(" bf16");
        }
        if let Some(n) = self.proj_n {
            s.push_str(&format!(" N={n}"));
        }
        s
    }

    /// True when every metric passes.
    pub fn pass(&self) -> bool {
        self.metrics.iter().all(|m| m.pass)
    }
    /// The worst metric (the first failing one, else the one closest to its bound).
    pub fn worst(&self) -> Option<&Metric> {
        self.metrics.iter().find(|m| !m.pass).or_else(|| {
            self.metrics.iter().max_by(|a, b| {
                let ra = if a.bound > 0.0 {
                    a.value / a.bound
                } else {
                    0.0
                };
                let rb = if b.bound > 0.0 {
                    b.value / b.bound
                } else {
                    0.0
                };
                ra.total_cmp(&rb)
            })
        })
    }
}

fn ulp_metric(name: &str, s: UlpStats) -> Metric {
    Metric {
        name: name.into(),
        value: if s.max_ulp == u32::MAX {
            f64::INFINITY
        } else {
            s.max_ulp as f64
        },
        bound: 1.0,
        detail: format!(
            "{:.4}% bit-equal ({} of {} differ)",
            100.0 * s.frac_equal(),
            s.n_diff,
            s.n
        ),
        pass: s.within_contract(),
    }
}

/// One bf16 ulp at the magnitude of `v`.
fn bf16_ulp(v: f64) -> f64 {
    let a = v.abs();
    if a < f64::from(f32::MIN_POSITIVE) {
        return 2f64.powi(-133);
    }
    2f64.powi(a.log2().floor() as i32 - 7)
}

/// A bf16 output against exact values: the error must stay within half a bf16 ulp (the final
/// rounding) plus `k` f32 roundings of the summed magnitudes (`sums.s`; the value itself when
/// there is no sum). That is the rigorous bound of f32 evaluation followed by one rounding; a
/// 1-ulp bound against exact values would fail wherever a sum cancels.
fn oracle_metric(name: &str, got: &[bf16], exact: &[f64], mags: Option<&[f64]>, k: f64) -> Metric {
    use rayon::prelude::*;
    let u = 2f64.powi(-24);
    let (worst, equal) = if got.len() != exact.len() {
        (f64::INFINITY, 0)
    } else {
        got.par_iter()
            .zip(exact)
            .enumerate()
            .map(|(i, (g, e))| {
                let mag = mags.map_or(e.abs(), |m| m[i]);
                let bound = 0.5 * bf16_ulp(*e) + k * u * mag;
                let err = (g.to_f64() - e).abs();
                let r = if err.is_nan() {
                    f64::INFINITY
                } else {
                    err / bound
                };
                (r, usize::from(oracle::round_bf16(*e) == *g))
            })
            .reduce(|| (0.0, 0), |a, b| (a.0.max(b.0), a.1 + b.1))
    };
    Metric {
        name: name.into(),
        value: worst,
        bound: 1.0,
        detail: format!(
            "error / (ulp/2 + {k} u |terms|); {:.4}% equal to the exact rounding",
            100.0 * equal as f64 / got.len().max(1) as f64
        ),
        pass: worst <= 1.0,
    }
}

fn exact_metric(name: &str, got: &[bf16], want: &[bf16]) -> Metric {
    let s = compare_bf16(got, want);
    Metric {
        name: name.into(),
        value: s.n_diff as f64,
        bound: 0.0,
        detail: format!("{} of {} differ (must be bit-exact)", s.n_diff, s.n),
        pass: s.n_diff == 0,
    }
}

fn rel_metric(name: &str, got: &[f32], oracle: &[f64]) -> Metric {
    let e = max_rel_err(got, oracle);
    Metric {
        name: name.into(),
        value: e,
        bound: GATE_TOL,
        detail: String::new(),
        pass: e <= GATE_TOL,
    }
}

fn need<'a, T>(v: &'a Option<Vec<T>>, name: &str) -> Result<&'a [T]> {
    v.as_deref()
        .ok_or_else(|| Error::Invalid(format!("the backend returned no `{name}`")))
}

/// Checks one backend result against the reference and the oracle, given the inputs it ran on.
pub fn verify(args: &OpArgs<'_>, out: &OpOutputs) -> Result<Vec<Metric>> {
    let cfg = &args.cfg;
    let d = args.dims();
    let (n, h) = (d.n, d.h);
    let norm = args.norm_weight.as_deref();
    let mut ms = Vec::new();
    let x: &[bf16] = args.x.unwrap_or(&[]);
    let residual: &[bf16] = args.residual.unwrap_or(&[]);

    // r' against the reference post_map of the same inputs, and against the oracle.
    let mut stream_input: Option<Vec<bf16>> = None;
    if matches!(args.op, Op::PostMap | Op::Seam | Op::SeamV4) {
        let got = need(&out.residual_out, "residual_out")?;
        let want = reference::ops::post_mapped(args)?;
        ms.push(ulp_metric(
            "residual_out vs reference",
            compare_bf16(got, &want),
        ));
        let (post, comb) = (args.post.unwrap_or(&[]), args.comb.unwrap_or(&[]));
        let orc = oracle::post_map(n, h, x, residual, post, comb);
        // n + 1 products and n additions, each one f32 rounding.
        let k = (2 * n + 1) as f64;
        ms.push(oracle_metric(
            "residual_out vs oracle",
            got,
            &orc.v,
            Some(&orc.s),
            k,
        ));
        stream_input = Some(got.to_vec());
    }
    if matches!(args.op, Op::Entry | Op::Expand) {
        let got = need(&out.residual_out, "residual_out")?;
        let mut want = vec![bf16::ZERO; got.len()];
        reference::post_map::expand(n, h, x, &mut want);
        ms.push(exact_metric("residual_out (broadcast)", got, &want));
    }
    // The streams the gates and the collapse read.
    let streams: &[bf16] = stream_input.as_deref().unwrap_or(residual);

    // Gates against the f64 oracle on the same streams.
    let gate_oracle = match args.op {
        Op::Gates | Op::Pre | Op::PreDelayed | Op::Seam | Op::SeamV4 => {
            args.mix.map(|m| oracle::gates(cfg, streams, m))
        }
        Op::Entry => args.mix.map(|m| oracle::entry_gates(cfg, x, m)),
        _ => None,
    };
    if let Some(g) = &gate_oracle {
        ms.push(rel_metric(
            "pre vs oracle",
            need(&out.pre_out, "pre_out")?,
            &g.pre,
        ));
        ms.push(rel_metric(
            "post vs oracle",
            need(&out.post_out, "post_out")?,
            &g.post,
        ));
        ms.push(rel_metric(
            "comb vs oracle",
            need(&out.comb_out, "comb_out")?,
            &g.comb,
        ));
    }
    if args.op == Op::Head
        && let Some(m) = args.mix
    {
        let p = oracle::head_gates(cfg, residual, m);
        ms.push(rel_metric(
            "head p vs oracle",
            need(&out.pre_out, "pre_out")?,
            &p,
        ));
    }

    // The layer input (or head/final out) against the reference of the same streams and mix.
    let coeffs: Option<&[f32]> = match args.op {
        Op::Collapse | Op::PreDelayed | Op::Seam | Op::Final => args.pre,
        Op::Pre | Op::SeamV4 | Op::Head => out.pre_out.as_deref(),
        _ => None,
    };
    let (li_name, li_got) = match args.op {
        Op::Head | Op::Final => ("out", out.out.as_deref()),
        _ => ("layer_input", out.layer_input.as_deref()),
    };
    let expected: Option<reference::ops::LayerInput> = match (args.op, coeffs) {
        (_, Some(p)) => Some(reference::ops::layer_inputs(
            n,
            h,
            streams,
            p,
            norm.map(|w| (w, cfg.norm_eps)),
        )),
        (Op::Rmsnorm, _) => norm.map(|w| reference::ops::normed(h, x, w, cfg.norm_eps)),
        (Op::Entry, _) => Some(match norm {
            Some(w) => reference::ops::normed(h, x, w, cfg.norm_eps),
            None => reference::ops::LayerInput {
                li: x.to_vec(),
                vals: x.iter().map(|v| v.to_f32()).collect(),
            },
        }),
        _ => None,
    };
    if let Some(e) = &expected {
        let got =
            li_got.ok_or_else(|| Error::Invalid(format!("the backend returned no `{li_name}`")))?;
        ms.push(ulp_metric(
            &format!("{li_name} vs reference"),
            compare_bf16(got, &e.li),
        ));
        // The oracle, stage by stage on the stage's own bf16 inputs: the collapse against exact
        // sums; the norm against exact math over the reference's rounded collapse.
        let u_norm = 8.0; // mean, eps, sqrt, division, two products
        match (args.op, coeffs) {
            (Op::Rmsnorm, _) | (Op::Entry, _) => {
                if let Some(w) = norm {
                    let orc = oracle::rmsnorm(h, cfg.norm_eps, x, w);
                    ms.push(oracle_metric(
                        &format!("{li_name} vs oracle"),
                        got,
                        &orc,
                        None,
                        u_norm,
                    ));
                }
            }
            (_, Some(p)) => {
                let orc = oracle::collapse(n, h, streams, p);
                let k = (2 * n - 1) as f64;
                match norm {
                    None => ms.push(oracle_metric(
                        &format!("{li_name} vs oracle"),
                        got,
                        &orc.v,
                        Some(&orc.s),
                        k,
                    )),
                    Some(w) => {
                        let c = reference::ops::layer_inputs(n, h, streams, p, None).li;
                        ms.push(oracle_metric(
                            "collapse (reference) vs oracle",
                            &c,
                            &orc.v,
                            Some(&orc.s),
                            k,
                        ));
                        let orn = oracle::rmsnorm(h, cfg.norm_eps, &c, w);
                        ms.push(oracle_metric(
                            &format!("{li_name} vs oracle"),
                            got,
                            &orn,
                            None,
                            u_norm,
                        ));
                    }
                }
            }
            _ => {}
        }
        if matches!(args.op, Op::Entry) && norm.is_none() {
            ms.push(exact_metric("layer_input = x (one-hot pre)", got, x));
        }
        if args.fp8 {
            let q = out
                .fp8
                .as_ref()
                .ok_or_else(|| Error::Invalid("the backend returned no MXFP8 output".into()))?;
            let want = reference::ops::mxfp8_rows(h, &e.vals);
            let bad_scales = q
                .scales
                .iter()
                .zip(&want.scales)
                .filter(|(a, b)| a != b)
                .count()
                + q.scales.len().abs_diff(want.scales.len());
            ms.push(Metric {
                name: "fp8 scales".into(),
                value: bad_scales as f64,
                bound: 0.0,
                detail: format!("{} scales must be exact", want.scales.len()),
                pass: bad_scales == 0,
            });
            let worst = q
                .values
                .iter()
                .zip(&want.values)
                .map(|(a, b)| e4m3_distance(*a, *b))
                .max()
                .unwrap_or(0)
                .max(if q.values.len() == want.values.len() {
                    0
                } else {
                    u32::MAX
                });
            ms.push(Metric {
                name: "fp8 values (e4m3 steps)".into(),
                value: worst as f64,
                bound: 1.0,
                detail: String::new(),
                pass: worst <= 1,
            });
        }
    }

    if args.op == Op::Projection {
        let p = args.projection.ok_or_else(|| Error::missing("a"))?;
        // f32 output: |y - oracle| <= 1e-5 sum|a w|. bf16 output (that y rounded once): the same
        // plus half a bf16 ulp of the output (y's ulp is never larger than its rounding's).
        let (got, half_ulp): (Vec<f64>, Vec<f64>) = if p.bf16_out {
            let y = need(&out.out_bf16, "out")?;
            y.iter()
                .map(|v| (v.to_f64(), 0.5 * bf16_ulp(v.to_f64())))
                .unzip()
        } else {
            let y = need(&out.out_f32, "out")?;
            (y.iter().map(|&v| v as f64).collect(), vec![0.0; y.len()])
        };
        let orc = oracle::projection(p.m, p.n, p.k, p.a, p.w);
        let scale = reference::projection::abs_dot(p.m, p.n, p.k, p.a, p.w);
        let worst = got
            .iter()
            .zip(&half_ulp)
            .zip(orc.iter().zip(&scale))
            .map(|((g, h), (o, s))| {
                // (A NaN or infinite output fails: max would drop the NaN.)
                let e = (g - o).abs();
                if e.is_finite() {
                    (e - h).max(0.0) / s.max(f64::MIN_POSITIVE)
                } else {
                    f64::INFINITY
                }
            })
            .fold(0.0, f64::max);
        ms.push(Metric {
            name: if p.bf16_out {
                "bf16 out - ulp/2 vs oracle/sum|aw|".into()
            } else {
                "out vs oracle / sum|a w|".into()
            },
            value: worst,
            bound: 1e-5,
            detail: String::new(),
            pass: worst <= 1e-5 && got.len() == orc.len(),
        });
    }
    if ms.is_empty() {
        return Err(Error::Invalid(format!(
            "nothing to check for op `{}`",
            args.op
        )));
    }
    Ok(ms)
}

/// Distance between two E4M3 codes in representable steps (same sign ordering as bf16).
fn e4m3_distance(a: u8, b: u8) -> u32 {
    let key = |v: u8| -> i32 {
        if v & 0x80 != 0 {
            -((v & 0x7f) as i32)
        } else {
            v as i32
        }
    };
    if (a & 0x7f) == 0x7f || (b & 0x7f) == 0x7f {
        return if a == b { 0 } else { u32::MAX };
    }
    (key(a) - key(b)).unsigned_abs()
}

/// One case of a check run.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    /// The op.
    pub op: Op,
    /// Tokens.
    pub t: usize,
    /// Fused norm.
    pub norm: bool,
    /// MXFP8 output.
    pub fp8: bool,
    /// The projection's output in bf16 instead of f32.
    pub bf16_out: bool,
}

/// Rows of w in the projection's cases unless asked otherwise (K is the config's H).
pub const PROJ_N: usize = 256;

/// Generates fresh inputs for `case`, runs `backend`, verifies the outputs.
pub fn run_case(backend: &dyn Backend, cfg: &Config, case: Case, seed: u64) -> Result<CaseReport> {
    run_case_n(backend, cfg, case, seed, PROJ_N)
}

/// `run_case` with `proj_n` rows of w in a projection case (the decode shapes' N = 1024-2560 take
/// other kernels' paths than the default 256: several tiles a block, the rows dealt evenly).
pub fn run_case_n(
    backend: &dyn Backend,
    cfg: &Config,
    case: Case,
    seed: u64,
    proj_n: usize,
) -> Result<CaseReport> {
    let spec = InputSpec {
        op: case.op,
        t: case.t,
        norm: case.norm,
        proj_nk: (proj_n, cfg.hidden),
    };
    let inputs = synth::inputs(cfg, &spec, seed);
    let args = OpArgs::from_map(case.op, cfg, &inputs, case.fp8)?.with_bf16_out(case.bf16_out)?;
    let (out, route) = backend.execute(&args)?;
    let metrics = verify(&args, &out)?;
    Ok(CaseReport {
        op: case.op,
        t: case.t,
        n: args.cfg.n,
        h: args.cfg.hidden,
        norm: case.norm,
        fp8: case.fp8,
        bf16_out: case.bf16_out,
        proj_n: args.projection.as_ref().map(|pa| pa.n),
        seed,
        route,
        metrics,
    })
}

/// The cases `mhc check` runs: every op, with and without norm and MXFP8 where they apply, at
/// each of `tokens`.
pub fn standard_cases(tokens: &[usize]) -> Vec<Case> {
    let mut v = Vec::new();
    for &t in tokens {
        for op in Op::ALL {
            let norms: &[bool] = if op == Op::Rmsnorm {
                &[true]
            } else if op.takes_norm() {
                &[false, true]
            } else {
                &[false]
            };
            for &norm in norms {
                let fp8s: &[bool] = if op.has_layer_input() {
                    &[false, true]
                } else {
                    &[false]
                };
                // The projection with f32 and with bf16 output.
                let bf16s: &[bool] = if op == Op::Projection {
                    &[false, true]
                } else {
                    &[false]
                };
                for &fp8 in fp8s {
                    for &bf16_out in bf16s {
                        v.push(Case {
                            op,
                            t,
                            norm,
                            fp8,
                            bf16_out,
                        });
                    }
                }
            }
        }
    }
    v
}

/// A seed for fresh random inputs: `MHC_SEED` if set (to reproduce a failure), else the clock.
pub fn fresh_seed() -> u64 {
    if let Some(s) = std::env::var("MHC_SEED").ok().and_then(|s| s.parse().ok()) {
        return s;
    }
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0x5eed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordered_keys_are_adjacent() {
        let a = bf16::from_f32(1.0);
        let b = from_ordered(ordered(a) + 1);
        assert!(b > a);
        assert_eq!(ordered(bf16::from_f32(-0.0)), 0);
        assert_eq!(ordered(from_ordered(-5)), -5);
        let s = compare_bf16(&[a], &[b]);
        assert_eq!((s.n_diff, s.max_ulp), (1, 1));
        let s = compare_bf16(&[bf16::NAN], &[a]);
        assert_eq!(s.max_ulp, u32::MAX);
        assert!(!s.within_contract());
    }

    #[test]
    fn contract_allows_rare_single_ulp_only() {
        let s = UlpStats {
            n: 100_000,
            n_diff: 10,
            max_ulp: 1,
        };
        assert!(s.within_contract());
        let s = UlpStats {
            n: 100_000,
            n_diff: 11,
            max_ulp: 1,
        };
        assert!(!s.within_contract());
        let s = UlpStats {
            n: 100_000,
            n_diff: 1,
            max_ulp: 2,
        };
        assert!(!s.within_contract());
    }

    #[test]
    fn nan_fails_relative_check() {
        assert!(max_rel_err(&[f32::NAN], &[0.5]).is_infinite());
        assert_eq!(max_rel_err(&[0.5], &[0.5]), 0.0);
    }
}
