//! # mhc
//!
//! The mHC ("manifold-constrained hyper-connection") seams of DeepSeek-V4-family models, exact and
//! fast: a CPU reference that follows SPEC.md operation by operation (with an f64 oracle to check
//! it), and fused CUDA kernels for NVIDIA GPUs (module [`cuda`]), compiled with NVRTC when an
//! engine starts.
//!
//! The layers of the crate:
//! - [`spec`]: model constants ([`Config`], [`Preset`]) and call dimensions;
//! - [`ops`]: the op interface every backend implements ([`Op`], [`OpArgs`], [`Backend`]);
//! - [`reference`](mod@reference): the CPU backend and the f64 oracle;
//! - [`cuda`]: the GPU backend (raw-pointer and buffer APIs, routes, CUDA graphs);
//! - [`weights`], [`tensor`]: checkpoints and safetensors files;
//! - [`check`], [`synth`]: the accuracy contract of SPEC section 8 and realistic random inputs;
//! - [`bench`](mod@bench): the benchmark harness behind `mhc bench`.
//!
//! ```
//! use mhc::{CpuBackend, Backend, OpArgs, Preset, SeamWeights};
//! use half::bf16;
//!
//! let cfg = Preset::V41Flash.config().with_hidden(256); // a small hidden size for the example
//! let t = 3;
//! let w = SeamWeights::synthetic(&cfg, 7);
//! let x = vec![bf16::from_f32(0.5); t * cfg.hidden];
//! let residual = vec![bf16::from_f32(-0.25); t * cfg.n * cfg.hidden];
//! let (post, comb, pre) = mhc::synth::carried(&cfg, t, 1);
//! let args = OpArgs::seam(&cfg, &x, &residual, &post, &comb, &pre, w.mix(), Some(&w.norm_weight))?;
//! let (out, route) = CpuBackend.execute(&args)?;
//! assert_eq!(out.layer_input.unwrap().len(), t * cfg.hidden);
//! assert_eq!(out.pre_out.unwrap().len(), t * cfg.n); // carried to the next seam
//! println!("{route}");
//! # Ok::<(), mhc::Error>(())
//! ```

pub mod bench;
pub mod check;
pub mod cuda;
pub mod error;
pub mod ops;
pub mod reference;
pub mod spec;
pub mod synth;
pub mod tensor;
pub mod weights;

pub use error::{Error, Result};

/// The README's Rust examples run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
pub use ops::{Backend, CpuBackend, Op, OpArgs, OpOutputs, Route};
pub use spec::{Config, Dims, Preset};
pub use weights::SeamWeights;
