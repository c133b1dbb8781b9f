//! The op interface every backend implements: [`Op`] names an operation of SPEC section 5,
//! [`OpArgs`] holds its validated inputs, [`OpOutputs`] its results, and [`Route`] says which
//! path and kernels produced them (and why faster paths declined).
//!
//! Validation lives here, once, for all backends: every missing tensor, wrong length or wrong
//! shape is reported with the tensor's SPEC name before any backend runs. T = 0 is valid and
//! produces empty outputs.

use crate::error::{Error, Result};
use crate::reference::gates::MixWeights;
use crate::spec::{Config, Dims};
use crate::tensor::{self, HostTensor, TensorMap};
use half::bf16;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::fmt;

/// The operations of SPEC.md. The same name is used by the reference function, the kernel, the
/// CLI word and the tests.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// gates(r) -> (pre, post, comb).
    Gates,
    /// post_map(x, r, post, comb) -> r' (SPEC's "post").
    #[value(name = "post_map", alias = "post")]
    PostMap,
    /// collapse(r, pre), optional RMSNorm.
    Collapse,
    /// rmsnorm(x, w).
    Rmsnorm,
    /// V4 pre: gates(r), layer_input = collapse(r, pre').
    Pre,
    /// V4.1 pre_delayed: gates(r), layer_input = collapse(r, carried pre).
    #[value(name = "pre_delayed")]
    PreDelayed,
    /// V4.1 entry seam: residual = broadcast(x), folded-weight gates, layer_input = x.
    Entry,
    /// The fused V4.1 seam.
    Seam,
    /// The V4 variant of the seam: the layer input uses this seam's pre.
    #[value(name = "seam_v4")]
    SeamV4,
    /// V4 head: out = collapse(r, head gates).
    Head,
    /// V4.1 final: out = collapse(r, carried pre), then the model norm.
    Final,
    /// Broadcast x to n streams.
    Expand,
    /// The compressor projection y = a . w^T (SPEC section 7).
    Projection,
}

impl Op {
    /// Every op, in SPEC order.
    pub const ALL: [Op; 13] = [
        Op::Gates,
        Op::PostMap,
        Op::Collapse,
        Op::Rmsnorm,
        Op::Pre,
        Op::PreDelayed,
        Op::Entry,
        Op::Seam,
        Op::SeamV4,
        Op::Head,
        Op::Final,
        Op::Expand,
        Op::Projection,
    ];

    /// The op's name (CLI word, file and report name).
    pub fn name(self) -> &'static str {
        match self {
            Op::Gates => "gates",
            Op::PostMap => "post_map",
            Op::Collapse => "collapse",
            Op::Rmsnorm => "rmsnorm",
            Op::Pre => "pre",
            Op::PreDelayed => "pre_delayed",
            Op::Entry => "entry",
            Op::Seam => "seam",
            Op::SeamV4 => "seam_v4",
            Op::Head => "head",
            Op::Final => "final",
            Op::Expand => "expand",
            Op::Projection => "projection",
        }
    }

    /// Parses an op name (SPEC's `post` is accepted for `post_map`).
    pub fn parse(s: &str) -> Result<Op> {
        if s == "post" {
            return Ok(Op::PostMap);
        }
        Op::ALL.into_iter().find(|o| o.name() == s).ok_or_else(|| {
            let names: Vec<_> = Op::ALL.iter().map(|o| o.name()).collect();
            Error::Invalid(format!("unknown op `{s}`; ops are {}", names.join(", ")))
        })
    }

    /// Ops that produce a `layer_input` (and may emit it as MXFP8).
    pub fn has_layer_input(self) -> bool {
        matches!(
            self,
            Op::Collapse
                | Op::Rmsnorm
                | Op::Pre
                | Op::PreDelayed
                | Op::Entry
                | Op::Seam
                | Op::SeamV4
        )
    }

    /// Ops whose layer input may be followed by a fused RMSNorm (`norm_weight`).
    pub fn takes_norm(self) -> bool {
        matches!(
            self,
            Op::Collapse
                | Op::Pre
                | Op::PreDelayed
                | Op::Entry
                | Op::Seam
                | Op::SeamV4
                | Op::Head
                | Op::Final
        )
    }

    /// Ops that run the projection (and so need fn, scale and base).
    pub fn takes_mix(self) -> bool {
        matches!(
            self,
            Op::Gates | Op::Pre | Op::PreDelayed | Op::Entry | Op::Seam | Op::SeamV4 | Op::Head
        )
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The operands of the compressor projection.
#[derive(Clone, Copy, Debug)]
pub struct ProjectionArgs<'a> {
    /// Rows of a (tokens).
    pub m: usize,
    /// Rows of w (outputs per token).
    pub n: usize,
    /// Reduction length.
    pub k: usize,
    /// a `[M,K]`.
    pub a: &'a [bf16],
    /// w `[N,K]`.
    pub w: &'a [bf16],
    /// Output y in bf16 (the f32 result rounded once to nearest even) instead of f32.
    pub bf16_out: bool,
}

/// The validated inputs of one op call. Build with the constructors ([`OpArgs::seam`], ...) or
/// from named tensors with [`OpArgs::from_map`]; both run [`OpArgs::validate`].
#[derive(Clone, Debug)]
pub struct OpArgs<'a> {
    /// The operation.
    pub op: Op,
    /// Model constants (n and hidden must match the tensors).
    pub cfg: Config,
    /// Tokens.
    pub t: usize,
    /// x `[T,H]`: sublayer output (or the embedding for entry/expand, the input of rmsnorm).
    pub x: Option<&'a [bf16]>,
    /// residual `[T,n,H]`.
    pub residual: Option<&'a [bf16]>,
    /// Carried post `[T,n]`.
    pub post: Option<&'a [f32]>,
    /// Carried comb `[T,n,n]`.
    pub comb: Option<&'a [f32]>,
    /// Carried pre `[T,n]`.
    pub pre: Option<&'a [f32]>,
    /// Projection weights (fn, scale, base) of this seam or of the head.
    pub mix: Option<MixWeights<'a>>,
    /// RMSNorm weight `[H]` of the sublayer that follows; None = no fused norm.
    pub norm_weight: Option<Cow<'a, [f32]>>,
    /// Also emit the layer input as MXFP8.
    pub fp8: bool,
    /// Operands of the compressor projection.
    pub projection: Option<ProjectionArgs<'a>>,
}

impl<'a> OpArgs<'a> {
    fn empty(op: Op, cfg: &Config, t: usize) -> Self {
        OpArgs {
            op,
            cfg: cfg.clone(),
            t,
            x: None,
            residual: None,
            post: None,
            comb: None,
            pre: None,
            mix: None,
            norm_weight: None,
            fp8: false,
            projection: None,
        }
    }

    /// Dimensions of the call.
    pub fn dims(&self) -> Dims {
        Dims::new(&self.cfg, self.t)
    }

    /// The fused V4.1 seam: r' = post_map(x, r, post, comb); layer_input = rmsnorm(collapse(r',
    /// pre)); (pre', post', comb') = gates(r').
    #[allow(clippy::too_many_arguments)]
    pub fn seam(
        cfg: &Config,
        x: &'a [bf16],
        residual: &'a [bf16],
        post: &'a [f32],
        comb: &'a [f32],
        pre: &'a [f32],
        mix: MixWeights<'a>,
        norm_weight: Option<&'a [f32]>,
    ) -> Result<Self> {
        let t = x.len() / cfg.hidden.max(1);
        let mut a = Self::empty(Op::Seam, cfg, t);
        a.x = Some(x);
        a.residual = Some(residual);
        a.post = Some(post);
        a.comb = Some(comb);
        a.pre = Some(pre);
        a.mix = Some(mix);
        a.norm_weight = norm_weight.map(Cow::Borrowed);
        a.validate()?;
        Ok(a)
    }

    /// The V4 seam variant (layer input from this seam's own pre).
    #[allow(clippy::too_many_arguments)]
    pub fn seam_v4(
        cfg: &Config,
        x: &'a [bf16],
        residual: &'a [bf16],
        post: &'a [f32],
        comb: &'a [f32],
        mix: MixWeights<'a>,
        norm_weight: Option<&'a [f32]>,
    ) -> Result<Self> {
        let t = x.len() / cfg.hidden.max(1);
        let mut a = Self::empty(Op::SeamV4, cfg, t);
        a.x = Some(x);
        a.residual = Some(residual);
        a.post = Some(post);
        a.comb = Some(comb);
        a.mix = Some(mix);
        a.norm_weight = norm_weight.map(Cow::Borrowed);
        a.validate()?;
        Ok(a)
    }

    /// The V4.1 entry seam on the embedding x `[T,H]`.
    pub fn entry(
        cfg: &Config,
        x: &'a [bf16],
        mix: MixWeights<'a>,
        norm_weight: Option<&'a [f32]>,
    ) -> Result<Self> {
        let t = x.len() / cfg.hidden.max(1);
        let mut a = Self::empty(Op::Entry, cfg, t);
        a.x = Some(x);
        a.mix = Some(mix);
        a.norm_weight = norm_weight.map(Cow::Borrowed);
        a.validate()?;
        Ok(a)
    }

    /// V4 pre (carried = None) or V4.1 pre_delayed (carried = Some(pre)).
    pub fn pre(
        cfg: &Config,
        residual: &'a [bf16],
        carried: Option<&'a [f32]>,
        mix: MixWeights<'a>,
        norm_weight: Option<&'a [f32]>,
    ) -> Result<Self> {
        let t = residual.len() / cfg.k().max(1);
        let op = if carried.is_some() {
            Op::PreDelayed
        } else {
            Op::Pre
        };
        let mut a = Self::empty(op, cfg, t);
        a.residual = Some(residual);
        a.pre = carried;
        a.mix = Some(mix);
        a.norm_weight = norm_weight.map(Cow::Borrowed);
        a.validate()?;
        Ok(a)
    }

    /// gates(r) alone.
    pub fn gates(cfg: &Config, residual: &'a [bf16], mix: MixWeights<'a>) -> Result<Self> {
        let t = residual.len() / cfg.k().max(1);
        let mut a = Self::empty(Op::Gates, cfg, t);
        a.residual = Some(residual);
        a.mix = Some(mix);
        a.validate()?;
        Ok(a)
    }

    /// post_map alone.
    pub fn post_map(
        cfg: &Config,
        x: &'a [bf16],
        residual: &'a [bf16],
        post: &'a [f32],
        comb: &'a [f32],
    ) -> Result<Self> {
        let t = x.len() / cfg.hidden.max(1);
        let mut a = Self::empty(Op::PostMap, cfg, t);
        a.x = Some(x);
        a.residual = Some(residual);
        a.post = Some(post);
        a.comb = Some(comb);
        a.validate()?;
        Ok(a)
    }

    /// The compressor projection y = a . w^T.
    pub fn projection(
        cfg: &Config,
        m: usize,
        n: usize,
        k: usize,
        a: &'a [bf16],
        w: &'a [bf16],
    ) -> Result<Self> {
        let mut args = Self::empty(Op::Projection, cfg, m);
        args.projection = Some(ProjectionArgs {
            m,
            n,
            k,
            a,
            w,
            bf16_out: false,
        });
        args.validate()?;
        Ok(args)
    }

    /// Asks for the projection's output in bf16 (`out_bf16`: the f32 result rounded once to
    /// nearest even) instead of f32 (`out_f32`). Only the projection has this choice.
    pub fn with_bf16_out(mut self, bf16_out: bool) -> Result<Self> {
        match self.projection.as_mut() {
            Some(p) => p.bf16_out = bf16_out,
            None if bf16_out => {
                return Err(Error::Invalid(format!(
                    "op `{}` has no bf16 output choice (only projection, whose out is f32 by default)",
                    self.op
                )));
            }
            None => {}
        }
        Ok(self)
    }

    /// Asks for the MXFP8 copy of the layer input.
    pub fn with_fp8(mut self, fp8: bool) -> Result<Self> {
        self.fp8 = fp8;
        self.validate()?;
        Ok(self)
    }

    /// Checks that every input the op needs is present with the right length, and that nothing
    /// is asked of an op that cannot give it.
    pub fn validate(&self) -> Result<()> {
        self.cfg.validate()?;
        let d = self.dims();
        let (op, n) = (self.op, d.n);
        fn need<'b, T>(v: Option<&'b [T]>, name: &str, shape: &[usize]) -> Result<&'b [T]> {
            let v = v.ok_or_else(|| Error::missing(name))?;
            Error::check_len(name, shape, v.len())?;
            Ok(v)
        }
        if op == Op::Projection {
            let p = self
                .projection
                .as_ref()
                .ok_or_else(|| Error::missing("a"))?;
            need(Some(p.a), "a", &[p.m, p.k])?;
            need(Some(p.w), "w", &[p.n, p.k])?;
            if self.fp8 {
                return Err(Error::Invalid("projection has no MXFP8 output".into()));
            }
            return Ok(());
        }
        let uses_x = matches!(
            op,
            Op::PostMap | Op::Rmsnorm | Op::Entry | Op::Seam | Op::SeamV4 | Op::Expand
        );
        let uses_residual = !matches!(op, Op::Rmsnorm | Op::Entry | Op::Expand);
        let uses_post_comb = matches!(op, Op::PostMap | Op::Seam | Op::SeamV4);
        let uses_pre = matches!(op, Op::Collapse | Op::PreDelayed | Op::Seam | Op::Final);
        if uses_x {
            need(self.x, "x", &d.hidden())?;
        }
        if uses_residual {
            need(self.residual, "residual", &d.residual())?;
        }
        if uses_post_comb {
            need(self.post, "post", &d.gate())?;
            need(self.comb, "comb", &d.comb())?;
        }
        if uses_pre {
            need(self.pre, "pre", &d.gate())?;
        }
        if op.takes_mix() {
            let m = self.mix.as_ref().ok_or_else(|| Error::missing("fn"))?;
            let (mixes, scales) = if op == Op::Head {
                (n, 1)
            } else {
                (self.cfg.mixes(), 3)
            };
            need(Some(m.fn_), "fn", &[mixes, self.cfg.k()])?;
            need(Some(m.base), "base", &[mixes])?;
            need(Some(m.scale), "scale", &[scales])?;
        }
        let norm_ok = op.takes_norm() || op == Op::Rmsnorm;
        match &self.norm_weight {
            Some(w) if norm_ok => {
                need(Some(w.as_ref()), "norm_weight", &[d.h])?;
            }
            Some(_) => {
                return Err(Error::Invalid(format!(
                    "op `{op}` takes no norm_weight (no RMSNorm follows it)"
                )));
            }
            None if op == Op::Rmsnorm => return Err(Error::missing("norm_weight")),
            None => {}
        }
        if self.fp8 {
            if !op.has_layer_input() {
                return Err(Error::Invalid(format!(
                    "op `{op}` produces no layer_input to emit as MXFP8"
                )));
            }
            if !d.h.is_multiple_of(crate::reference::mxfp8::BLOCK) {
                return Err(Error::Unsupported(format!(
                    "MXFP8 needs H divisible by {} (H = {})",
                    crate::reference::mxfp8::BLOCK,
                    d.h
                )));
            }
        }
        Ok(())
    }

    /// Builds the arguments of `op` from named tensors (SPEC section 9). n, T and H come from the
    /// tensors; the other constants from `base`.
    pub fn from_map(op: Op, base: &Config, map: &'a TensorMap, fp8: bool) -> Result<Self> {
        let mut cfg = base.clone();
        let get = |name: &str| tensor::get(map, name);
        let opt_bf16 = |name: &str| -> Result<Option<&'a [bf16]>> {
            map.get(name).map(|t| t.as_bf16(name)).transpose()
        };
        let opt_f32 = |name: &str| -> Result<Option<&'a [f32]>> {
            map.get(name).map(|t| t.as_f32(name)).transpose()
        };
        if op == Op::Projection {
            let a = get("a")?;
            let w = get("w")?;
            let (&[m, k], &[nn, k2]) = (a.shape.as_slice(), w.shape.as_slice()) else {
                return Err(if a.shape.len() != 2 {
                    Error::shape("a", &[0, 0], &a.shape)
                } else {
                    Error::shape("w", &[0, 0], &w.shape)
                });
            };
            if k2 != k {
                return Err(Error::shape("w", &[nn, k], &w.shape));
            }
            return Self::projection(&cfg, m, nn, k, a.as_bf16("a")?, w.as_bf16("w")?);
        }
        // Dimensions: the residual gives T, n, H; otherwise x gives T, H, and fn (if any) gives n.
        let t;
        if let Some(r) = map.get("residual") {
            let &[tt, nn, hh] = r.shape.as_slice() else {
                return Err(Error::shape("residual", &[0, cfg.n, cfg.hidden], &r.shape));
            };
            (t, cfg.n, cfg.hidden) = (tt, nn, hh);
        } else if let Some(x) = map.get("x") {
            let &[tt, hh] = x.shape.as_slice() else {
                return Err(Error::shape("x", &[0, cfg.hidden], &x.shape));
            };
            (t, cfg.hidden) = (tt, hh);
            if let Some(f) = map.get("fn")
                && let Some(&rows) = f.shape.first()
            {
                // rows = n (n + 2) for a seam projection.
                if let Some(n) = (1..=64).find(|n| n * (n + 2) == rows) {
                    cfg.n = n;
                }
            }
        } else {
            let name = if matches!(op, Op::Rmsnorm | Op::Entry | Op::Expand) {
                "x"
            } else {
                "residual"
            };
            return Err(Error::missing(name));
        }
        let d = Dims::new(&cfg, t);
        let shaped = |name: &str, shape: &[usize]| -> Result<()> {
            match map.get(name) {
                Some(ten) => ten.expect_shape(name, shape),
                None => Ok(()),
            }
        };
        shaped("x", &d.hidden())?;
        shaped("post", &d.gate())?;
        shaped("comb", &d.comb())?;
        shaped("pre", &d.gate())?;
        shaped("norm_weight", &[d.h])?;
        let mut a = Self::empty(op, &cfg, t);
        a.x = opt_bf16("x")?;
        a.residual = opt_bf16("residual")?;
        a.post = opt_f32("post")?;
        a.comb = opt_f32("comb")?;
        a.pre = opt_f32("pre")?;
        if op.takes_mix() {
            let (mixes, scales) = if op == Op::Head {
                (cfg.n, 1)
            } else {
                (cfg.mixes(), 3)
            };
            get("fn")?.expect_shape("fn", &[mixes, cfg.k()])?;
            get("base")?.expect_shape("base", &[mixes])?;
            get("scale")?.expect_shape("scale", &[scales])?;
            a.mix = Some(MixWeights {
                fn_: get("fn")?.as_f32("fn")?,
                scale: get("scale")?.as_f32("scale")?,
                base: get("base")?.as_f32("base")?,
            });
        }
        if (op.takes_norm() || op == Op::Rmsnorm)
            && let Some(w) = map.get("norm_weight")
        {
            a.norm_weight = Some(match &w.data {
                crate::tensor::TensorData::F32(v) => Cow::Borrowed(v.as_slice()),
                _ => Cow::Owned(w.to_f32_lossless("norm_weight")?),
            });
        }
        a.fp8 = fp8;
        a.validate()?;
        Ok(a)
    }
}

/// The MXFP8 copy of a layer input: E4M3 bytes `[T,H]` and E8M0 scales [T,H/32].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Mxfp8 {
    /// E4M3 values.
    pub values: Vec<u8>,
    /// E8M0 block scales.
    pub scales: Vec<u8>,
}

/// Results of one op call. Which fields are set depends on the op (SPEC section 9 names).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OpOutputs {
    /// r' `[T,n,H]` (post_map, seam, entry, expand).
    pub residual_out: Option<Vec<bf16>>,
    /// The next sublayer's input `[T,H]`.
    pub layer_input: Option<Vec<bf16>>,
    /// head/final output `[T,H]`.
    pub out: Option<Vec<bf16>>,
    /// projection output `[M,N]` (f32, the default).
    pub out_f32: Option<Vec<f32>>,
    /// projection output `[M,N]` in bf16, when asked for ([`OpArgs::with_bf16_out`]).
    pub out_bf16: Option<Vec<bf16>>,
    /// post `[T,n]` of this seam.
    pub post_out: Option<Vec<f32>>,
    /// comb `[T,n,n]` of this seam.
    pub comb_out: Option<Vec<f32>>,
    /// pre `[T,n]` of this seam (carried to the next seam in V4.1).
    pub pre_out: Option<Vec<f32>>,
    /// The MXFP8 layer input, when asked for.
    pub fp8: Option<Mxfp8>,
}

impl OpOutputs {
    /// The outputs as named tensors with SPEC section 9 names and shapes.
    pub fn to_map(&self, args: &OpArgs<'_>) -> Result<TensorMap> {
        let d = args.dims();
        let mut m = TensorMap::new();
        let mut bf = |name: &str, shape: &[usize], v: &Option<Vec<bf16>>| -> Result<()> {
            if let Some(v) = v {
                m.insert(name.into(), HostTensor::bf16(name, shape, v.clone())?);
            }
            Ok(())
        };
        bf("residual_out", &d.residual(), &self.residual_out)?;
        bf("layer_input", &d.hidden(), &self.layer_input)?;
        bf("out", &d.hidden(), &self.out)?;
        let mut f = |name: &str, shape: &[usize], v: &Option<Vec<f32>>| -> Result<()> {
            if let Some(v) = v {
                m.insert(name.into(), HostTensor::f32(name, shape, v.clone())?);
            }
            Ok(())
        };
        f("post_out", &d.gate(), &self.post_out)?;
        f("comb_out", &d.comb(), &self.comb_out)?;
        f("pre_out", &d.gate(), &self.pre_out)?;
        if let (Some(y), Some(p)) = (&self.out_f32, &args.projection) {
            m.insert(
                "out".into(),
                HostTensor::f32("out", &[p.m, p.n], y.clone())?,
            );
        }
        if let (Some(y), Some(p)) = (&self.out_bf16, &args.projection) {
            m.insert(
                "out".into(),
                HostTensor::bf16("out", &[p.m, p.n], y.clone())?,
            );
        }
        if let Some(q) = &self.fp8 {
            m.insert(
                "layer_input_fp8".into(),
                HostTensor::u8("layer_input_fp8", &d.hidden(), q.values.clone())?,
            );
            m.insert(
                "layer_input_scale".into(),
                HostTensor::u8("layer_input_scale", &d.fp8_scales(), q.scales.clone())?,
            );
        }
        Ok(m)
    }
}

/// A path that was not taken, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Declined {
    /// The path's name (`fused`, `unfused`, ...).
    pub path: String,
    /// Why it could not serve these inputs.
    pub reason: String,
}

/// Which backend, path and kernels served a call, and which faster paths declined.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    /// `cpu` or `cuda`.
    pub backend: String,
    /// The path taken: `cpu`, `fused` or `unfused`.
    pub path: String,
    /// The kernels (or reference functions) that ran, in order, without repeats.
    pub kernels: Vec<String>,
    /// Every path tried before the one taken, with its reason.
    pub declined: Vec<Declined>,
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{} [{}]",
            self.backend,
            self.path,
            self.kernels.join(", ")
        )?;
        for d in &self.declined {
            write!(f, "; declined {}: {}", d.path, d.reason)?;
        }
        Ok(())
    }
}

/// A backend runs ops. The CPU reference and the CUDA engine implement it.
pub trait Backend {
    /// `cpu` or `cuda`.
    fn name(&self) -> &str;
    /// Runs one op on validated arguments.
    fn execute(&self, args: &OpArgs<'_>) -> Result<(OpOutputs, Route)>;
}

/// The CPU reference as a [`Backend`].
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuBackend;

impl Backend for CpuBackend {
    fn name(&self) -> &str {
        "cpu"
    }
    fn execute(&self, args: &OpArgs<'_>) -> Result<(OpOutputs, Route)> {
        let out = crate::reference::execute(args)?;
        Ok((
            out,
            Route {
                backend: "cpu".into(),
                path: "cpu".into(),
                kernels: vec![format!("reference::{}", args.op)],
                declined: vec![],
            },
        ))
    }
}

/// Runs `op` on named tensors and returns named outputs: the `mhc run` path.
pub fn run_map(
    backend: &dyn Backend,
    op: Op,
    base: &Config,
    inputs: &TensorMap,
    fp8: bool,
    bf16_out: bool,
) -> Result<(TensorMap, Route)> {
    let args = OpArgs::from_map(op, base, inputs, fp8)?.with_bf16_out(bf16_out)?;
    let (out, route) = backend.execute(&args)?;
    Ok((out.to_map(&args)?, route))
}
