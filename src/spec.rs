//! The constants and shapes of SPEC.md: [`Config`] for one model's seams, the published presets,
//! and [`Dims`] for one call.
//!
//! `n` (streams) and `hidden` are free in the CPU reference; the fused GPU kernels serve `n = 4`
//! and hidden sizes that are multiples of 256 and fall back otherwise (see `cuda::dispatch`).

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// The constants of one model's mHC seams (SPEC section 1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// Residual streams per token (`hc_mult`).
    pub n: usize,
    /// Hidden size H.
    pub hidden: usize,
    /// Sinkhorn iterations (20 in every published model).
    pub sinkhorn_iters: usize,
    /// Added to the pre gates and used as the Sinkhorn epsilon.
    pub hc_eps: f32,
    /// Epsilon of the RMS factor of the projection.
    pub rms_eps: f32,
    /// Epsilon of the RMSNorm of the sublayer that follows.
    pub norm_eps: f32,
    /// Multiplier of the post gates.
    pub post_mult: f32,
    /// Transformer layers (each has two seams: attention and FFN).
    pub layers: usize,
}

impl Config {
    /// Mixes per token: n pre + n post + n*n comb.
    pub fn mixes(&self) -> usize {
        self.n * (self.n + 2)
    }

    /// Length of one token's flattened residual, n*H.
    pub fn k(&self) -> usize {
        self.n * self.hidden
    }

    /// Seams per decode step (two per layer).
    pub fn seams(&self) -> usize {
        2 * self.layers
    }

    /// Rejects configurations no backend can run.
    pub fn validate(&self) -> Result<()> {
        if self.n == 0 {
            return Err(Error::Unsupported("n (streams) must be at least 1".into()));
        }
        if self.hidden == 0 {
            return Err(Error::Unsupported(
                "hidden size H must be at least 1".into(),
            ));
        }
        if self.sinkhorn_iters == 0 {
            return Err(Error::Unsupported(
                "sinkhorn_iters must be at least 1 (SPEC section 2 ends on a column pass)".into(),
            ));
        }
        for (name, v) in [
            ("hc_eps", self.hc_eps),
            ("rms_eps", self.rms_eps),
            ("norm_eps", self.norm_eps),
            ("post_mult", self.post_mult),
        ] {
            if !v.is_finite() || v < 0.0 {
                return Err(Error::Invalid(format!(
                    "{name} must be finite and >= 0, got {v}"
                )));
            }
        }
        Ok(())
    }

    /// The same constants with another hidden size (used for `--hidden` and custom models).
    pub fn with_hidden(mut self, hidden: usize) -> Self {
        self.hidden = hidden;
        self
    }
}

/// The published DeepSeek-V4-family models.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
pub enum Preset {
    /// DeepSeek-V4-Flash: H = 4096, eps 1e-6.
    #[value(name = "v4-flash")]
    V4Flash,
    /// DeepSeek-V4.1-Flash: H = 5120, eps 1e-20, 40 layers (80 seams), delayed pre-mix.
    #[value(name = "v4.1-flash")]
    V41Flash,
    /// DeepSeek-V4-Pro: H = 7168, eps 1e-6.
    #[value(name = "v4-pro")]
    V4Pro,
}

impl Preset {
    /// All presets, in a stable order.
    pub const ALL: [Preset; 3] = [Preset::V4Flash, Preset::V41Flash, Preset::V4Pro];

    /// The preset's constants.
    pub fn config(self) -> Config {
        let base = Config {
            n: 4,
            hidden: 4096,
            sinkhorn_iters: 20,
            hc_eps: 1e-6,
            rms_eps: 1e-6,
            norm_eps: 1e-6,
            post_mult: 2.0,
            layers: 43,
        };
        match self {
            Preset::V4Flash => base,
            Preset::V41Flash => Config {
                hidden: 5120,
                rms_eps: 1e-20,
                norm_eps: 1e-20,
                layers: 40,
                ..base
            },
            Preset::V4Pro => Config {
                hidden: 7168,
                layers: 61,
                ..base
            },
        }
    }

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Preset::V4Flash => "v4-flash",
            Preset::V41Flash => "v4.1-flash",
            Preset::V4Pro => "v4-pro",
        }
    }

    /// The preset whose hidden size is `hidden`, if any.
    pub fn for_hidden(hidden: usize) -> Option<Preset> {
        Preset::ALL
            .into_iter()
            .find(|p| p.config().hidden == hidden)
    }
}

/// The dimensions of one call: tokens, streams, hidden size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dims {
    /// Tokens T (0 is a valid no-op).
    pub t: usize,
    /// Streams n.
    pub n: usize,
    /// Hidden size H.
    pub h: usize,
}

impl Dims {
    /// Dims of a call on `t` tokens of a model with config `cfg`.
    pub fn new(cfg: &Config, t: usize) -> Self {
        Dims {
            t,
            n: cfg.n,
            h: cfg.hidden,
        }
    }
    /// Shape of a residual, [T, n, H].
    pub fn residual(&self) -> [usize; 3] {
        [self.t, self.n, self.h]
    }
    /// Shape of a sublayer input or output, [T, H].
    pub fn hidden(&self) -> [usize; 2] {
        [self.t, self.h]
    }
    /// Shape of pre or post, [T, n].
    pub fn gate(&self) -> [usize; 2] {
        [self.t, self.n]
    }
    /// Shape of comb, [T, n, n].
    pub fn comb(&self) -> [usize; 3] {
        [self.t, self.n, self.n]
    }
    /// Shape of the MXFP8 scales, [T, H/32].
    pub fn fp8_scales(&self) -> [usize; 2] {
        [self.t, self.h / crate::reference::mxfp8::BLOCK]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_match_the_spec() {
        let f = Preset::V41Flash.config();
        assert_eq!((f.hidden, f.layers, f.seams()), (5120, 40, 80));
        assert_eq!((f.rms_eps, f.norm_eps), (1e-20, 1e-20));
        assert_eq!(f.mixes(), 24);
        assert_eq!(Preset::V4Flash.config().hidden, 4096);
        assert_eq!(Preset::V4Pro.config().hidden, 7168);
        assert_eq!(Preset::V4Pro.config().norm_eps, 1e-6);
        for p in Preset::ALL {
            p.config().validate().unwrap();
            assert_eq!(Preset::for_hidden(p.config().hidden), Some(p));
        }
    }

    #[test]
    fn bad_configs_are_refused() {
        let mut c = Preset::V4Flash.config();
        c.n = 0;
        assert!(c.validate().is_err());
        let mut c = Preset::V4Flash.config();
        c.norm_eps = f32::NAN;
        assert!(c.validate().is_err());
    }
}
