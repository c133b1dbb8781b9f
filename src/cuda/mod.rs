//! The CUDA backend: fused kernels compiled with NVRTC at engine start (cached on disk), a
//! dispatch that returns a [`crate::Route`] for every call, a raw-pointer API for engines that own
//! their memory and stream, typed device buffers, and CUDA graphs.
//!
//! Built on cudarc with dynamic loading: the crate builds and runs where there is no GPU, no
//! driver and no CUDA toolkit; [`probe`] and [`CudaEngine::new`] then return [`crate::Error::NoGpu`].

mod backend;
mod buffers;
mod device;
mod engine;
pub mod graph;
pub mod kernels;
pub mod nvrtc;
pub mod plan;

pub use buffers::{Coeffs, DeviceSeamWeights, SeamBuffers};
pub use device::{DeviceBuffer, DeviceInfo, Elem, probe};
pub use engine::{
    CudaEngine, EngineOptions, PathChoice, RawCall, RawIo, RawProjection, RawWeights,
    TIMELINE_SLOTS, TimelineLaunch,
};
pub use graph::Graph;

/// True when a CUDA GPU can be used here.
pub fn available() -> bool {
    probe(0).is_ok()
}
