//! The CUDA engine: one entry point per op that picks the fastest path able to serve the call and
//! says so in a [`Route`]; a raw-pointer API for engines that own their memory and stream; typed
//! buffer helpers on top of it; and the workspace the fused kernels reduce through.
//!
//! Nothing here allocates, compiles or synchronizes during a call, except that the workspace grows
//! (with a device synchronization) the first time a call needs more than was reserved: call
//! [`CudaEngine::reserve`] before capturing a graph, and a call that would grow it during a capture
//! fails with a clear error instead.

use super::device::{Device, DeviceBuffer, DeviceInfo, Elem};
use super::plan::{self, KernelShape, SeamPlan};
use crate::error::{Error, Result};
use crate::ops::{Declined, Op, Route};
use crate::spec::Config;
use cudarc::driver::sys::{self, CUdeviceptr, CUstream};
use std::cell::RefCell;
use std::ffi::c_void;

/// Which path serves a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
pub enum PathChoice {
    /// The fastest path that supports the inputs.
    Auto,
    /// Only the fused kernels (error if they cannot serve the call).
    Fused,
    /// Only the one-kernel-per-step path.
    Unfused,
    /// The CPU reference (host-level calls only).
    Cpu,
}

impl PathChoice {
    /// Parses `auto`, `fused`, `unfused` or `cpu`.
    pub fn parse(s: &str) -> Result<Self> {
        match s.trim() {
            "auto" | "" => Ok(PathChoice::Auto),
            "fused" => Ok(PathChoice::Fused),
            "unfused" => Ok(PathChoice::Unfused),
            "cpu" => Ok(PathChoice::Cpu),
            other => Err(Error::Invalid(format!(
                "path `{other}`: expected auto, fused, unfused or cpu"
            ))),
        }
    }

    /// The `MHC_PATH` environment variable, or auto.
    pub fn from_env() -> Result<Self> {
        match std::env::var("MHC_PATH") {
            Ok(s) => Self::parse(&s),
            Err(_) => Ok(PathChoice::Auto),
        }
    }

    /// The name used in routes.
    pub fn name(self) -> &'static str {
        match self {
            PathChoice::Auto => "auto",
            PathChoice::Fused => "fused",
            PathChoice::Unfused => "unfused",
            PathChoice::Cpu => "cpu",
        }
    }
}

/// Engine options.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    /// CUDA device ordinal.
    pub device: usize,
    /// Forced path (default: `MHC_PATH` or auto).
    pub path: PathChoice,
    /// Programmatic dependent launch for the fused seam-family kernels but the entry seam, and
    /// for the fused projection (default: on; `MHC_PDL=0` turns it off). Such a kernel may
    /// start while the previous kernel of the stream still runs and reads its weights (fn,
    /// scale, base; the projection's w) before waiting for it, so a kernel that writes those
    /// weights must not immediately precede it in the stream. Activations are only touched
    /// after the wait, outputs only written after it.
    pub pdl: bool,
    /// Compile the instrumented kernels that write phase timestamps (`mhc bench --timeline`);
    /// `MHC_TIMELINE=1`. Off for normal use: the production kernels carry no instrumentation.
    pub timeline: bool,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            device: 0,
            path: PathChoice::Auto,
            pdl: true,
            timeline: false,
        }
    }
}

/// A boolean environment variable: unset gives `default`; 0/1, false/true, off/on.
fn env_flag(name: &str, default: bool) -> Result<bool> {
    match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(v) => match v.trim() {
            "" => Ok(default),
            "1" | "true" | "on" => Ok(true),
            "0" | "false" | "off" => Ok(false),
            other => Err(Error::Invalid(format!("{name}=`{other}`: expected 0 or 1"))),
        },
    }
}

impl EngineOptions {
    /// Device 0, the path from `MHC_PATH`, `MHC_PDL` and `MHC_TIMELINE`.
    pub fn from_env() -> Result<Self> {
        Ok(EngineOptions {
            device: 0,
            path: PathChoice::from_env()?,
            pdl: env_flag("MHC_PDL", true)?,
            timeline: env_flag("MHC_TIMELINE", false)?,
        })
    }
}

/// One fused launch's rows in the timeline buffer (instrumented engines only).
#[derive(Clone, Debug)]
pub struct TimelineLaunch {
    /// Kernel name (with " (tails)" for the second launch of a split plan).
    pub kernel: String,
    /// Offset of the launch's first stamp in the buffer, in u64 elements.
    pub offset: usize,
    /// Blocks of the launch: each has `TIMELINE_SLOTS` (global ns, cycles) pairs.
    pub blocks: usize,
}

/// Stamp slots per block (TL_SLOTS in kernels/common.cuh); see `mhc bench --timeline`.
pub const TIMELINE_SLOTS: usize = 24;

#[derive(Default)]
struct Timeline {
    base: CUdeviceptr,
    cap: usize,
    log: Vec<TimelineLaunch>,
}

/// Device pointers of one call's tensors; 0 where the op does not use a tensor. All tensors are
/// dense and row-major with SPEC section 1 shapes; `layer_input` is `out` for head and final.
#[derive(Clone, Copy, Debug, Default)]
pub struct RawIo {
    pub x: CUdeviceptr,
    pub residual: CUdeviceptr,
    pub post: CUdeviceptr,
    pub comb: CUdeviceptr,
    pub pre: CUdeviceptr,
    pub residual_out: CUdeviceptr,
    pub layer_input: CUdeviceptr,
    pub post_out: CUdeviceptr,
    pub comb_out: CUdeviceptr,
    pub pre_out: CUdeviceptr,
    /// MXFP8 values `[T,H]` (u8); 0 = no MXFP8 output.
    pub fp8_values: CUdeviceptr,
    /// MXFP8 scales [T,H/32] (u8).
    pub fp8_scales: CUdeviceptr,
}

/// Device pointers of one seam's weights (f32). `fnb` is the entry seam's folded weight
/// [mixes, H] (see [`CudaEngine::fold_entry_weight`]); `fn_split` is fn prepared by
/// [`CudaEngine::split_fn_weight`] (0 = none: the kernels read fn in its own layout; same
/// results either way); `norm_weight` 0 = no fused RMSNorm.
#[derive(Clone, Copy, Debug, Default)]
pub struct RawWeights {
    pub fn_: CUdeviceptr,
    pub fnb: CUdeviceptr,
    pub fn_split: CUdeviceptr,
    pub scale: CUdeviceptr,
    pub base: CUdeviceptr,
    pub norm_weight: CUdeviceptr,
}

/// Operands of the compressor projection: y `[m,n]` = a `[m,k]` . w `[n,k]`^T (bf16 inputs, f32
/// accumulation), y f32, or bf16 where `y_bf16` (the f32 result rounded once to nearest even: the
/// same bits as rounding the f32 output). With programmatic dependent launch on (the engine's
/// `pdl`), the fused kernel starts reading w while the previous kernel of the stream still runs:
/// w must not be written by that kernel.
#[derive(Clone, Copy, Debug, Default)]
pub struct RawProjection {
    pub a: CUdeviceptr,
    pub w: CUdeviceptr,
    pub y: CUdeviceptr,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// y holds bf16 (m x n x 2 bytes) instead of f32.
    pub y_bf16: bool,
}

/// One call of the raw API.
#[derive(Clone, Copy, Debug)]
pub struct RawCall {
    /// The op.
    pub op: Op,
    /// Tokens (rows of a for the projection).
    pub t: usize,
    /// Tensors.
    pub io: RawIo,
    /// Weights.
    pub w: RawWeights,
    /// Projection operands (op = projection only).
    pub proj: RawProjection,
}

impl RawCall {
    /// A projection call: y `[m,n]` = a `[m,k]` . w `[n,k]`^T (no seam tensors or weights).
    pub fn projection(p: RawProjection) -> Self {
        RawCall {
            op: Op::Projection,
            t: p.m,
            io: RawIo::default(),
            w: RawWeights::default(),
            proj: p,
        }
    }
}

/// The fused kernels' parameter block (mirrors `struct FusedParams` in kernels/seam.cu).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct FusedParams {
    x: u64,
    residual: u64,
    post: u64,
    comb: u64,
    pre_in: u64,
    fn_: u64,
    fn_split: u64,
    scale: u64,
    base: u64,
    norm_w: u64,
    residual_out: u64,
    layer_input: u64,
    post_out: u64,
    comb_out: u64,
    pre_out: u64,
    fp8_q: u64,
    fp8_s: u64,
    rec_m: u64,
    rec_ss: u64,
    counters: u64,
    t: i32,
    h: i32,
    tt: i32,
    tiles: i32,
    w: i32,
    nrec: i32,
    rpad: i32,
    rows_batch: i32,
    iters: i32,
    mode: i32,
    hc_eps: f32,
    rms_eps: f32,
    norm_eps: f32,
    post_mult: f32,
    timeline: u64,
    /// The split tails (`tails_kernel`): blocks per tile.
    parts: i32,
    /// The cluster kernels' PS variants: chunk warps a block with fn presplit.
    presplit: i32,
}

/// Scratch the kernels reduce through. Grows on demand outside captures; never shrinks.
#[derive(Default)]
struct Workspace {
    rec_m: Option<DeviceBuffer<f32>>,
    rec_ss: Option<DeviceBuffer<f64>>,
    counters: Option<DeviceBuffer<u32>>,
    uf_m: Option<DeviceBuffer<f32>>,
    uf_rinv: Option<DeviceBuffer<f32>>,
    uf_c: Option<DeviceBuffer<u16>>,
    uf_vals: Option<DeviceBuffer<f32>>,
}

/// A kernel argument, stored so that its address can be handed to cuLaunchKernel.
#[derive(Clone, Copy)]
enum Arg {
    P(u64),
    I(i32),
    F(f32),
    Z(usize),
}

/// The CUDA engine. One engine serializes its calls through one workspace: give each concurrent
/// stream its own engine.
pub struct CudaEngine {
    pub(crate) dev: Device,
    path: std::cell::Cell<PathChoice>,
    pdl: std::cell::Cell<bool>,
    plan_override: std::cell::Cell<Option<plan::PlanOverride>>,
    cluster_override: std::cell::Cell<Option<u32>>,
    cluster_mtiles: std::cell::Cell<Option<u32>>,
    channels: std::cell::Cell<bool>,
    use_prepared: std::cell::Cell<bool>,
    presplit: std::cell::Cell<u32>,
    proj_plan_override: std::cell::Cell<Option<plan::ProjOverride>>,
    /// `MHC_PLAN`, `MHC_CLUSTER`, `MHC_CLUSTER_MTILES` and `MHC_PROJ_PLAN`, read once here
    /// rather than in every call.
    env_plan: Option<plan::PlanOverride>,
    env_cluster: Option<u32>,
    /// `MHC_CLUSTER_SIZES`: the cluster sizes tried, in order (default `plan::CLUSTER_SIZES`).
    env_cluster_sizes: Option<Vec<u32>>,
    env_mtiles: Option<u32>,
    /// `MHC_CLUSTER_SPREAD` (default on; `set_cluster_spread`): a call's rows spread over more
    /// clusters than whole tiles need: the seam's tiles of 32 tokens over every cluster that runs
    /// at once, and with PDL at small T (`plan::small_tile_tokens`: T <= 48) up to three clusters:
    /// the seam in tiles of 1, 2 or 4 tokens with lanes by channels up to T = 12, the ops without
    /// that variant (the V4 seam, pre_delayed) past 8 tokens.
    spread: std::cell::Cell<bool>,
    /// Whether the seams' tiles launch at large T takes the stream variant (default on;
    /// `set_stream_tiles`; `MHC_STREAM` at start).
    stream: std::cell::Cell<bool>,
    /// Blocks a tile's tails take, where forced (`set_tail_parts`; `MHC_TAIL_PARTS` at start);
    /// `None`: `plan::tail_parts`.
    tail_parts: std::cell::Cell<Option<u32>>,
    /// Waves of clusters an op that forms its collapse after the gates may take, where forced
    /// (`set_cluster_waves`; `MHC_CLUSTER_WAVES` at start); `None`:
    /// `plan::collapse_after_gates_waves`.
    cluster_waves: std::cell::Cell<Option<u32>>,
    /// Fewest tiles for the seams' stream variant, where forced (`set_stream_min_tiles`;
    /// `MHC_STREAM_MIN_TILES` at start); `None`: `plan::STREAM_MIN_TILES`.
    stream_min_tiles: std::cell::Cell<Option<u32>>,
    /// Multiprocessors the seams' stream launch deals its groups over, where forced
    /// (`set_stream_sms`; `MHC_STREAM_SMS` at start); `None`: the device's.
    stream_sms: std::cell::Cell<Option<u32>>,
    /// The fewest tokens from which the seams take the two-launch plan ahead of the cluster
    /// kernel, where forced (`set_two_launch_from`; `MHC_TWO_LAUNCH_FROM_T` at start); `None`:
    /// clusters where they fit, else one launch up to `plan::ONE_LAUNCH_MAX_T`.
    two_launch_from: std::cell::Cell<Option<usize>>,
    env_proj_plan: Option<plan::ProjOverride>,
    instrumented: bool,
    timeline: RefCell<Timeline>,
    ws: RefCell<Workspace>,
}

/// The kernel and its shape for each fused op.
fn fused_kernel(op: Op) -> Option<(&'static str, KernelShape)> {
    let s = |nin, nmix| KernelShape { nin, nmix };
    Some(match op {
        Op::Seam => ("mhc_seam", s(4, 24)),
        Op::SeamV4 => ("mhc_seam_v4", s(4, 24)),
        Op::PreDelayed => ("mhc_pre_delayed", s(4, 24)),
        Op::Pre => ("mhc_pre", s(4, 24)),
        Op::Entry => ("mhc_entry", s(1, 24)),
        Op::Head => ("mhc_head", s(4, 4)),
        Op::Final | Op::Collapse => ("mhc_final", s(4, 0)),
        _ => return None,
    })
}

/// Whether the fused op's tile kernel forms the collapse after the gates (the op's own pre-mix,
/// CARRIED = 0 in kernels/seam.cu): in its finisher, one block a tile, after the gates, the
/// collapse from r' in memory, then the norm: a serial chain the cluster kernel keeps on 16 SMs
/// with r' in registers. For such an op the cluster kernel stays the faster one further: in
/// waves (`plan::collapse_after_gates_waves`) and without PDL at small T (PERF_NOTES.md attempts
/// 52 and 53, the V4 seam: the one such op with a cluster kernel).
fn collapse_after_gates(op: Op) -> bool {
    matches!(op, Op::SeamV4 | Op::Pre | Op::Head)
}

/// The tails launch split over several blocks a tile (kernels/seam.cu, `seam_tails_body`), for
/// the carried ops with a norm: their RMSNorm pass does not wait for the gates.
fn tails_kernel(op: Op) -> Option<&'static str> {
    match op {
        Op::Seam => Some("mhc_seam_tails"),
        Op::PreDelayed => Some("mhc_pre_delayed_tails"),
        Op::Entry => Some("mhc_entry_tails"),
        Op::Final | Op::Collapse => Some("mhc_final_tails"),
        _ => None,
    }
}

/// The stream variant of a seam's tiles launch (kernels/seam.cu; `plan::stream_plan`), for the
/// ops that have one.
fn stream_kernel(op: Op) -> Option<&'static str> {
    match op {
        Op::Seam => Some("mhc_seam_st"),
        Op::SeamV4 => Some("mhc_seam_v4_st"),
        _ => None,
    }
}

/// The cluster kernel of a fused op for tiles of 16 tokens (`mtiles` = 1) or 32 (2), where it
/// has one (the ops with 24 gates), and its variant that reads fn prepared by `mhc_fn_split`,
/// where it has one.
fn cluster_kernel(op: Op, mtiles: u32) -> Option<(&'static str, Option<&'static str>)> {
    Some(match (op, mtiles) {
        (Op::Seam, 1) => ("mhc_seam_cl", Some("mhc_seam_clp")),
        (Op::Seam, 2) => ("mhc_seam_cl2", Some("mhc_seam_clp2")),
        (Op::PreDelayed, 1) => ("mhc_pre_delayed_cl", Some("mhc_pre_delayed_clp")),
        (Op::SeamV4, 1) => ("mhc_seam_v4_cl", Some("mhc_seam_v4_clp")),
        (Op::Entry, 1) => ("mhc_entry_cl", None),
        _ => return None,
    })
}

/// The seam's cluster kernel with lanes by channels in the elementwise phase (the `_ch1`, `_ch2`
/// and `_ch4` variants of kernels/seam.cu, the same bits) for tiles of `tt` <= 4 tokens, where
/// `kname` has one.
fn channel_variant(kname: &str, tt: u32) -> Option<&'static str> {
    Some(match (kname, tt) {
        ("mhc_seam_cl", 1) => "mhc_seam_cl_ch1",
        ("mhc_seam_cl", 2) => "mhc_seam_cl_ch2",
        ("mhc_seam_cl", 3 | 4) => "mhc_seam_cl_ch4",
        ("mhc_seam_clp", 1) => "mhc_seam_clp_ch1",
        ("mhc_seam_clp", 2) => "mhc_seam_clp_ch2",
        ("mhc_seam_clp", 3 | 4) => "mhc_seam_clp_ch4",
        _ => return None,
    })
}

/// The cluster kernels with the presplit path (kernels/seam.cu, PS: prepared fn, tiles of up to
/// 16 tokens, carried pre, the unswapped projection). Not the lanes-by-channels variants (T <= 12):
/// there it measured +0.1 to +0.5 us at every H (PERF_NOTES.md attempts 158 and 162).
fn presplit_kernel(kname: &str) -> bool {
    matches!(kname, "mhc_seam_clp" | "mhc_pre_delayed_clp")
}

fn aligned(p: CUdeviceptr, a: u64) -> bool {
    p.is_multiple_of(a)
}

impl CudaEngine {
    /// Opens the GPU, compiles (or loads from the disk cache) every kernel.
    pub fn new(opts: EngineOptions) -> Result<Self> {
        let defines: &[&str] = if opts.timeline {
            &["MHC_TIMELINE"]
        } else {
            &[]
        };
        let dev = Device::open(opts.device, defines)?;
        Ok(CudaEngine {
            dev,
            path: std::cell::Cell::new(opts.path),
            pdl: std::cell::Cell::new(opts.pdl),
            plan_override: std::cell::Cell::new(None),
            cluster_override: std::cell::Cell::new(None),
            cluster_mtiles: std::cell::Cell::new(None),
            channels: std::cell::Cell::new(plan::cluster_channels_setting()?),
            use_prepared: std::cell::Cell::new(plan::prepared_fn_setting()?),
            presplit: std::cell::Cell::new(plan::presplit_setting()?),
            proj_plan_override: std::cell::Cell::new(None),
            env_plan: plan::seam_override()?,
            env_cluster: plan::cluster_override()?,
            env_cluster_sizes: plan::cluster_sizes_override()?,
            env_mtiles: plan::cluster_mtiles_override()?,
            spread: std::cell::Cell::new(plan::cluster_spread_setting()?),
            stream: std::cell::Cell::new(plan::stream_setting()?.unwrap_or(true)),
            tail_parts: std::cell::Cell::new(plan::tail_parts_override()?),
            cluster_waves: std::cell::Cell::new(plan::cluster_waves_override()?),
            stream_min_tiles: std::cell::Cell::new(plan::stream_min_tiles_override()?),
            stream_sms: std::cell::Cell::new(plan::stream_sms_override()?),
            two_launch_from: std::cell::Cell::new(plan::two_launch_from_override()?),
            env_proj_plan: plan::projection_override()?,
            instrumented: opts.timeline,
            timeline: RefCell::new(Timeline::default()),
            ws: RefCell::new(Workspace::default()),
        })
    }

    /// Forces the fused kernels' launch shape (W, warps, tt, gridy) instead of the heuristic (and
    /// of `MHC_PLAN`); `None` restores it. Every plan computes the same bits, so this is for
    /// tuning and for the tests that check exactly that.
    pub fn set_plan_override(&self, p: Option<plan::PlanOverride>) {
        self.plan_override.set(p);
    }

    /// Whether the seams' tiles launch at large T (two launches: tiles, then tails) runs the
    /// stream variant (`mhc_seam_st`, `mhc_seam_v4_st`; same bits) where its plan applies
    /// (`plan::stream_plan`); on by default, `MHC_STREAM=0|1` sets it at start.
    pub fn set_stream_tiles(&self, on: bool) {
        self.stream.set(on);
    }

    /// Forces the blocks each tile's tails take in a two-launch plan of a carried op with a norm
    /// (`Some(n)`, n >= 1; 1: one block a tile) instead of `plan::tail_parts` (and of
    /// `MHC_TAIL_PARTS`); `None` restores it. Every count gives the same bits.
    pub fn set_tail_parts(&self, n: Option<u32>) {
        self.tail_parts.set(n.map(|n| n.max(1)));
    }

    /// Forces the waves of clusters the cluster kernel may take for an op that forms its collapse
    /// after the gates (the V4 seam; `Some(n)`, n >= 1) instead of
    /// `plan::collapse_after_gates_waves` (and of `MHC_CLUSTER_WAVES`); `None` restores it. Every
    /// count gives the same bits.
    pub fn set_cluster_waves(&self, n: Option<u32>) {
        self.cluster_waves.set(n.map(|n| n.max(1)));
    }

    /// Forces the fewest tiles for which the seams' tiles launch takes its stream variant
    /// (`Some(n)`) instead of `plan::STREAM_MIN_TILES` (and of `MHC_STREAM_MIN_TILES`); `None`
    /// restores it. Every value gives the same bits.
    pub fn set_stream_min_tiles(&self, n: Option<u32>) {
        self.stream_min_tiles.set(n);
    }

    /// Forces the multiprocessors the seams' stream launch deals its groups over (`Some(n)`,
    /// 1 <= n; at most the device's count is used) instead of every one the device has (and of
    /// `MHC_STREAM_SMS`); `None` restores it. Fewer SMs mean fewer blocks along the tiles
    /// (`plan::stream_plan`), so more rounds: for measuring how the launch scales. Every value
    /// gives the same bits.
    pub fn set_stream_sms(&self, n: Option<u32>) {
        self.stream_sms.set(n.map(|n| n.max(1)));
    }

    /// Forces the seams (the ops with a stream tiles launch: the V4.1 and the V4 seam) to take
    /// the two-launch plan from T = max(t, `plan::MIN_SPLIT_T`) up (`Some(t)`), ahead of the
    /// cluster kernel and of the one-launch plan, unless a cluster size or a tile plan is forced;
    /// `None` restores the default (and `MHC_TWO_LAUNCH_FROM_T`'s value, if set, is dropped).
    /// Every value gives the same bits.
    pub fn set_two_launch_from(&self, t: Option<usize>) {
        self.two_launch_from.set(t);
    }

    /// Blocks a tile's tails take in a two-launch plan of `tiles` tiles at hidden size `h`, for
    /// the carried ops with a norm (the forced count, else `plan::tail_parts`).
    pub fn tail_parts_for(&self, tiles: u32, h: u32) -> u32 {
        self.tail_parts
            .get()
            .unwrap_or_else(|| plan::tail_parts(tiles, h, self.dev.info.sm_count))
    }

    /// Forces the cluster kernel (`Some(n)`: clusters of n blocks at every T, for the ops that
    /// have one; an error where n blocks cannot run) or the tile kernel (`Some(0)`) instead of the
    /// heuristic (and of `MHC_CLUSTER`); `None` restores it. Both kernels compute the same bits.
    pub fn set_cluster_override(&self, n: Option<u32>) {
        self.cluster_override.set(n);
    }

    /// Forces the cluster kernel's tiles to 16 tokens (`Some(1)`) or 32 (`Some(2)`, clusters of
    /// 16 blocks of at most 10 chunk warps, H <= 5120; the seam only) wherever it runs, instead of the heuristic (and of
    /// `MHC_CLUSTER_MTILES`); `None` restores it. Both compute the same bits.
    pub fn set_cluster_mtiles(&self, m: Option<u32>) {
        self.cluster_mtiles.set(m);
    }

    /// Whether the seam's cluster kernel in tiles of at most 4 tokens runs its elementwise phase
    /// with lanes by channels (the `_ch` variants; default on, `MHC_CLUSTER_CHANNELS=0` at start
    /// turns it off). Off, the lanes keep the MMA's layout and small T keeps tiles of up to 16
    /// tokens: the same bits, for A/B timings and the tests that check exactly that.
    pub fn set_cluster_channels(&self, on: bool) {
        self.channels.set(on);
    }

    /// Whether a call's rows spread over more clusters than whole tiles need (default on;
    /// `MHC_CLUSTER_SPREAD=0` at start turns it off): tiles of 32 tokens over every cluster that
    /// runs at once, and with PDL at small T (T <= 48) up to three clusters of smaller tiles
    /// (`plan::small_tile_tokens`). The same bits either way.
    pub fn set_cluster_spread(&self, on: bool) {
        self.spread.set(on);
    }

    /// Whether the cluster kernels read a call's prepared fn ([`RawWeights::fn_split`]) when it
    /// has one (default on; `MHC_PREPARED_FN=0` at start turns it off). Off, they read fn in its
    /// own layout: the same bits, for A/B timings and for the tests that check exactly that.
    pub fn set_use_prepared_fn(&self, on: bool) {
        self.use_prepared.set(on);
    }

    /// How many chunk warps a block of the cluster kernels that read prepared fn split their fn
    /// into the MMA's TF32 pieces in shared memory before the PDL wait, at most: as many as fit
    /// below `max` (`plan::with_presplit`; only with PDL, where that work overlaps the previous
    /// kernel). 0: none. Default `u32::MAX` (as many as fit); `MHC_PRESPLIT=n` at start sets it.
    /// The same bits for every count.
    pub fn set_presplit(&self, max: u32) {
        self.presplit.set(max);
    }

    /// Forces the projection's plan (`kpw` k-blocks per warp per stage, `nst` ring slots, `tpb`
    /// n-tiles per block, rows of w per n-tile; see `plan::ProjOverride`) instead of the heuristic
    /// (and of `MHC_PROJ_PLAN`); `None` restores it. A plan that does not fit the shared memory
    /// makes the call fail. Every plan computes the same bits.
    pub fn set_projection_plan_override(&self, p: Option<plan::ProjOverride>) {
        self.proj_plan_override.set(p);
    }

    /// Whether programmatic dependent launch is on.
    pub fn pdl(&self) -> bool {
        self.pdl.get()
    }

    /// Turns programmatic dependent launch on or off (the benchmark times both).
    pub fn set_pdl(&self, on: bool) {
        self.pdl.set(on);
    }

    /// Points the instrumented fused kernels at a stamp buffer of `cap` u64 elements (each
    /// fused launch takes the next `blocks * TIMELINE_SLOTS * 2`; launches past the end write
    /// nothing), or detaches it. Clears the launch log.
    pub fn set_timeline(&self, buf: Option<(CUdeviceptr, usize)>) -> Result<()> {
        if !self.instrumented {
            return Err(Error::Invalid(
                "the timeline needs an engine built with EngineOptions::timeline (MHC_TIMELINE=1)"
                    .into(),
            ));
        }
        let (base, cap) = buf.unwrap_or((0, 0));
        *self.timeline.borrow_mut() = Timeline {
            base,
            cap,
            log: Vec::new(),
        };
        Ok(())
    }

    /// The fused launches that took stamp rows since `set_timeline`, in launch order.
    pub fn timeline_log(&self) -> Vec<TimelineLaunch> {
        self.timeline.borrow().log.clone()
    }

    /// The stamp rows for a launch of `blocks` blocks (0: none).
    fn timeline_rows(&self, kernel: String, blocks: usize) -> u64 {
        let mut tl = self.timeline.borrow_mut();
        let offset = tl
            .log
            .last()
            .map_or(0, |l| l.offset + l.blocks * TIMELINE_SLOTS * 2);
        if tl.base == 0 || offset + blocks * TIMELINE_SLOTS * 2 > tl.cap {
            return 0;
        }
        tl.log.push(TimelineLaunch {
            kernel,
            offset,
            blocks,
        });
        tl.base + offset as u64 * 8
    }

    /// An engine on device 0 with the path from `MHC_PATH`.
    pub fn from_env() -> Result<Self> {
        Self::new(EngineOptions::from_env()?)
    }

    /// The GPU.
    pub fn info(&self) -> &DeviceInfo {
        &self.dev.info
    }

    /// The forced path, if any.
    pub fn path(&self) -> PathChoice {
        self.path.get()
    }

    /// Changes the forced path (the benchmark runs the fused and unfused paths side by side).
    pub fn set_path(&self, p: PathChoice) {
        self.path.set(p);
    }

    /// How many kernel modules came from the disk cache at start.
    pub fn cached_modules(&self) -> usize {
        self.dev.cached_modules
    }

    /// The engine's stream (pass it to the raw API, or capture graphs on it).
    pub fn stream(&self) -> CUstream {
        self.dev.stream()
    }

    /// The CUDA context.
    pub fn context(&self) -> &std::sync::Arc<cudarc::driver::CudaContext> {
        &self.dev.ctx
    }

    /// Waits for the engine's stream.
    pub fn sync(&self) -> Result<()> {
        self.dev.sync()
    }

    /// Fills the fused kernels' records (the workspace the two-launch plans reduce through) with
    /// NaN, for tests that compare two routes of one engine: a tiles launch that leaves a row's
    /// record unwritten then shows in the outputs instead of passing on the record an earlier
    /// call wrote. Waits for the stream first.
    pub fn poison_records(&self) -> Result<()> {
        self.sync()?;
        let mut ws = self.ws.borrow_mut();
        if let Some(b) = ws.rec_m.as_mut() {
            b.poison()?;
        }
        if let Some(b) = ws.rec_ss.as_mut() {
            b.poison()?;
        }
        Ok(())
    }

    /// Allocates a zeroed device buffer.
    pub fn zeros<T: Elem>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        DeviceBuffer::zeros(&self.dev.ctx, len)
    }

    /// Copies host data to a new device buffer.
    pub fn upload<T: Elem>(&self, data: &[T]) -> Result<DeviceBuffer<T>> {
        DeviceBuffer::from_host(&self.dev.ctx, data)
    }

    /// Grows the workspace for every op at up to `max_t` tokens of `cfg` (call before capturing),
    /// whichever plan a call takes: the tile kernel's in one launch or two (the cluster kernel
    /// needs no records), at any `set_two_launch_from` setting.
    pub fn reserve(&self, cfg: &Config, max_t: usize) -> Result<()> {
        let stream = self.stream();
        let mut need = (0, 0, 0);
        for op in [Op::Seam, Op::Entry, Op::Head, Op::Final] {
            let Some((name, shape)) = fused_kernel(op) else {
                continue;
            };
            if cfg.n != 4 || !cfg.hidden.is_multiple_of(plan::CHUNK) {
                continue;
            }
            // Needs are piecewise in T (the plan changes with T): plan::reserve_points.
            for t in plan::reserve_points(max_t) {
                for split_from in [plan::ONE_LAUNCH_MAX_T + 1, plan::MIN_SPLIT_T] {
                    let p = self.plan(name, shape, t, cfg.hidden, split_from)?;
                    let (m, ss, cnt) = plan::workspace_need(shape, t, &p);
                    need = (need.0.max(m), need.1.max(ss), need.2.max(cnt));
                }
            }
        }
        if need.0 > 0 {
            self.ensure_fused_workspace(need, stream)?;
        }
        self.unfused_workspace(cfg, max_t, true, stream)?;
        self.sync()
    }

    fn plan(
        &self,
        name: &str,
        shape: KernelShape,
        t: usize,
        h: usize,
        split_from: usize,
    ) -> Result<SeamPlan> {
        plan::plan_split_from(
            shape,
            t,
            h,
            self.dev.info.sm_count,
            &|warps, smem| self.dev.occupancy(name, warps * 32, smem),
            self.plan_override.get().or(self.env_plan),
            split_from,
        )
    }

    /// The plan the fused kernel of `op` would use for T tokens of hidden size H, for a call
    /// with (`prepared`) or without fn prepared by [`CudaEngine::split_fn_weight`].
    pub fn plan_for(&self, op: Op, t: usize, h: usize, prepared: bool) -> Result<Option<SeamPlan>> {
        let prepared = prepared && self.use_prepared.get();
        Ok(self.fused_plan(op, t, h, prepared)?.map(|(_, _, p)| p))
    }

    /// Whether the fused launch of `op` carries programmatic dependent launch: the engine's
    /// setting, except for the entry seam, which runs once per forward pass, often right after
    /// `fold_entry_weight` wrote its weight on the same stream, and so waits for its predecessor
    /// like a plain launch.
    fn fused_pdl(&self, op: Op) -> bool {
        self.pdl.get() && op != Op::Entry
    }

    /// The fused kernel of `op` for T tokens of hidden size H and its plan: the cluster kernel
    /// (clusters of 16 blocks, else 12 or 8, in tiles of 16 tokens, else clusters of 16 in tiles
    /// of 32) where the device runs all of the call's clusters at once (on the H200, seven
    /// clusters of 16: T <= 112, or T <= 224 in tiles of 32; an op whose tile kernel forms the
    /// collapse after the gates, the V4 seam, in up to `plan::collapse_after_gates_waves` waves:
    /// T <= 560 at H = 4096, 672 at 5120 and 7168; where tiles of 32 do not fit, the other ops in
    /// up to `plan::CARRIED_WAVES` waves of tiles of 16: T <= 224 at H = 7168), unless a tile
    /// plan is forced or the call runs without PDL at T <= 4 without prepared fn (not such an
    /// op), else the tile kernel. The seam's tiles of at most 4 tokens take the lanes-by-channels
    /// variants, and with PDL at T <= 48 the rows spread over up to three clusters, the seam's in
    /// tiles of 1, 2 or 4 tokens up to T = 12, the V4 seam's and pre_delayed's past T = 8
    /// (`plan::small_tile_tokens`); `set_cluster_override` or `MHC_CLUSTER` forces the
    /// choice, `set_cluster_mtiles` or `MHC_CLUSTER_MTILES` the cluster kernel's tiles,
    /// `set_cluster_spread` / `MHC_CLUSTER_SPREAD` and `set_cluster_channels` /
    /// `MHC_CLUSTER_CHANNELS` turn the spreading and the channel variants off. The seams' two-launch
    /// plans take the stream variant of the tiles launch where `plan::stream_plan` applies and it
    /// fits the device (`set_stream_tiles` / `MHC_STREAM`, `set_stream_min_tiles` /
    /// `MHC_STREAM_MIN_TILES`; a forced tile plan keeps the tile kernel). With PDL and nothing
    /// forced, the V4.1 seam's two-launch plan also goes ahead of a cluster plan past one wave of
    /// tiles of 16 where its stream launch takes no more rounds than the clusters take waves
    /// (`plan::stream_ahead_of_clusters`; on the H200 T = 113-192 at H = 5120, 113-224 at 4096 and
    /// 7168); `set_two_launch_from` / `MHC_TWO_LAUNCH_FROM_T` moves the seams' two-launch plans
    /// down to a smaller T, ahead of the cluster kernel.
    fn fused_plan(
        &self,
        op: Op,
        t: usize,
        h: usize,
        prepared: bool,
    ) -> Result<Option<(&'static str, KernelShape, SeamPlan)>> {
        let Some((name, shape)) = fused_kernel(op) else {
            return Ok(None);
        };
        // The seams' two-launch plan from a forced T (set_two_launch_from), ahead of the clusters;
        // by default the clusters where they fit (the V4 seam's waves reach past
        // ONE_LAUNCH_MAX_T), else one launch up to ONE_LAUNCH_MAX_T.
        let early_split = match self.two_launch_from.get() {
            Some(n) if stream_kernel(op).is_some() => Some(n.max(plan::MIN_SPLIT_T)),
            _ => None,
        };
        let split_from = early_split.unwrap_or(plan::ONE_LAUNCH_MAX_T + 1);
        if cluster_kernel(op, 1).is_some() {
            let forced = self.cluster_override.get().or(self.env_cluster);
            let tile_forced = self.plan_override.get().or(self.env_plan).is_some()
                || early_split.is_some_and(|n| t >= n);
            // Without programmatic dependent launch each of a cluster's 16 SMs stages its slice
            // of fn (123 KB at H = 5120) on the critical path: at T <= 4 the tile kernel is
            // faster there (H200, same run: +3 to +14 % for the cluster kernel at H = 5120 and
            // 7168; PERF_NOTES.md attempt 30), unless the cluster kernel reads prepared fn (then
            // -8 % at H = 5120 and -17 % at 4096 at T = 1, attempt 33). Not where the tile kernel
            // forms the collapse after the gates (the V4 seam at H = 7168, where the prepared
            // variant does not fit: 20.0 us at T = 1 and 28.8 at T = 4 on the tile kernel without
            // PDL against 20.3 at T = 16 on the cluster kernel; attempt 53).
            let pdl = self.fused_pdl(op);
            let sizes: &[u32] = match forced {
                Some(0) => &[],
                Some(ref n) => std::slice::from_ref(n),
                None if !tile_forced => self
                    .env_cluster_sizes
                    .as_deref()
                    .unwrap_or(&plan::CLUSTER_SIZES),
                None => &[],
            };
            let unprepared_ok = forced.is_some() || pdl || t > 4 || collapse_after_gates(op);
            let mts: &[u32] = match self.cluster_mtiles.get().or(self.env_mtiles) {
                Some(1) => &[1],
                Some(_) => &[2],
                None => &[1, 2],
            };
            // Passes of (waves of clusters, tiles of 32 allowed). The V4 seam's (collapse after
            // the gates): up to `collapse_after_gates_waves` waves. The carried ops': one wave of
            // any tiles, then up to `CARRIED_WAVES` waves of tiles of 16 (H = 7168 at T = 113-224).
            // By default (nothing forced, PDL on) the V4.1 seam may take its two launches ahead
            // of a cluster plan (plan::stream_ahead_of_clusters); not the V4 seam, whose tails
            // form its collapse after the gates (2x slower there, attempt 85).
            let stream_may_lead = forced.is_none()
                && !tile_forced
                && early_split.is_none()
                && self.cluster_mtiles.get().or(self.env_mtiles).is_none()
                && pdl
                && stream_kernel(op).is_some()
                && !collapse_after_gates(op)
                && t >= plan::MIN_SPLIT_T;
            let passes = if collapse_after_gates(op) {
                let waves = self
                    .cluster_waves
                    .get()
                    .unwrap_or(plan::collapse_after_gates_waves(h));
                [(waves, true), (0, false)]
            } else {
                [(1, true), (plan::CARRIED_WAVES, false)]
            };
            for (waves, mt2_ok) in passes {
                for &mt in mts {
                    if waves == 0 || (mt == 2 && !mt2_ok) {
                        continue;
                    }
                    let Some((cname, pname)) = cluster_kernel(op, mt) else {
                        continue;
                    };
                    // With prepared fn, its variant first (fn staged by one copy a chunk and loaded
                    // in fragment order), where its slice of fn fits in shared memory.
                    let kernels = [
                        pname.filter(|_| prepared),
                        Some(cname).filter(|_| unprepared_ok),
                    ];
                    for &cl in sizes {
                        for kname in kernels.into_iter().flatten() {
                            let budget = self.dev.max_dynamic_smem(kname)?;
                            let prep = kname != cname;
                            if let Some(p) =
                                plan::cluster_plan(shape, t, h, cl, budget, prep, mt, 0)
                            {
                                let active = self.dev.max_active_clusters(
                                    kname,
                                    cl,
                                    p.warps * 32,
                                    p.smem,
                                )?;
                                // Forced: wherever it can run at all; else in the pass's waves.
                                let need = if forced.is_some() {
                                    1
                                } else {
                                    p.tiles.div_ceil(waves)
                                };
                                if active >= need {
                                    let cl_waves = p.tiles.div_ceil(active);
                                    // How many clusters the call's rows spread over (0: whole
                                    // tiles). Tiles of 32 tokens: smaller tiles over as many
                                    // clusters as run at once (never more shared memory a block, so
                                    // they all still run). Measured on the H200 at H = 5120
                                    // (PERF_NOTES.md attempt 36): -4.5 % at T = 128; with tiles of
                                    // 16 tokens it lost up to 9 % (T = 64) and is not taken. With
                                    // PDL at small T (plan::small_tile_tokens, attempts 42, 143
                                    // and 144), up to three clusters: the seam's tiles of 1, 2 or
                                    // 4 tokens with lanes by channels, then of ceil(T / 3) up to
                                    // 16; the other ops' past 8 tokens.
                                    let channels =
                                        self.channels.get() && channel_variant(kname, 1).is_some();
                                    let spread = if forced.is_some() || !self.spread.get() {
                                        0
                                    } else if mt == 2 {
                                        active
                                    } else if pdl
                                        && let Some(tt) =
                                            plan::small_tile_tokens(t, active, channels)
                                    {
                                        t.div_ceil(tt) as u32
                                    } else {
                                        0
                                    };
                                    let p = (spread > 0)
                                        .then(|| {
                                            plan::cluster_plan(
                                                shape, t, h, cl, budget, prep, mt, spread,
                                            )
                                        })
                                        .flatten()
                                        .unwrap_or(p);
                                    // Past one wave of tiles of 16 tokens, the V4.1 seam's
                                    // two launches where their stream launch takes no more
                                    // rounds than the clusters take waves (attempt 85).
                                    if stream_may_lead && plan::clusters_past_one_wave(mt, cl_waves)
                                    {
                                        let two = self.tile_plan(
                                            op,
                                            name,
                                            shape,
                                            t,
                                            h,
                                            plan::MIN_SPLIT_T,
                                        )?;
                                        if plan::stream_ahead_of_clusters(&two, mt, cl_waves) {
                                            return Ok(Some((name, shape, two)));
                                        }
                                    }
                                    // Tiles of at most 4 tokens: lanes by channels (attempt 39).
                                    let kname = channel_variant(kname, p.tt)
                                        .filter(|_| channels)
                                        .unwrap_or(kname);
                                    // With PDL, fn presplit where it fits, on at most
                                    // PRESPLIT_MAX_TILES clusters (attempts 158 and 162).
                                    let p = if pdl
                                        && presplit_kernel(kname)
                                        && t.div_ceil(p.tt as usize) <= plan::PRESPLIT_MAX_TILES
                                    {
                                        plan::with_presplit(
                                            shape,
                                            p,
                                            self.dev.max_dynamic_smem(kname)?,
                                            self.presplit.get(),
                                        )
                                    } else {
                                        p
                                    };
                                    return Ok(Some((kname, shape, p)));
                                }
                            }
                        }
                    }
                }
            }
            if let Some(n) = forced
                && n > 0
            {
                return Err(Error::Unsupported(format!(
                    "`{op}` at H={h}, T={t} in clusters of {n} blocks: no cluster plan fits this device"
                )));
            }
        }
        Ok(Some((
            name,
            shape,
            self.tile_plan(op, name, shape, t, h, split_from)?,
        )))
    }

    /// The tile kernel's plan for `op` (one launch below `split_from`, else two), its tiles
    /// launch the stream variant where `plan::stream_plan` applies and it fits the device.
    fn tile_plan(
        &self,
        op: Op,
        name: &str,
        shape: KernelShape,
        t: usize,
        h: usize,
        split_from: usize,
    ) -> Result<SeamPlan> {
        let p = self.plan(name, shape, t, h, split_from)?;
        if let Some(st_name) = stream_kernel(op)
            && let min_tiles = self.stream_min_tiles.get().unwrap_or(plan::STREAM_MIN_TILES)
            && self.stream.get()
            && self.plan_override.get().or(self.env_plan).is_none()
            && let sms = self.stream_sms.get().map_or(self.dev.info.sm_count, |n| n.min(self.dev.info.sm_count))
            && let Some(sp) = plan::stream_plan(shape, &p, sms, min_tiles)
            // Its 220 KB fit the H100 and H200, not every GPU.
            && sp.smem <= self.dev.max_dynamic_smem(st_name)?
        {
            return Ok(sp);
        }
        Ok(p)
    }

    fn ensure<T: Elem>(
        &self,
        slot: &mut Option<DeviceBuffer<T>>,
        len: usize,
        stream: CUstream,
        what: &str,
    ) -> Result<CUdeviceptr> {
        if let Some(b) = slot
            && b.len() >= len
        {
            return Ok(b.ptr());
        }
        if Device::is_capturing(stream)? {
            return Err(Error::Invalid(format!(
                "the workspace ({what}) must grow to {len} elements during a graph capture; call reserve() before capturing"
            )));
        }
        // The old buffer may still be read by queued work.
        self.dev.ctx.synchronize()?;
        *slot = None;
        let b = DeviceBuffer::<T>::zeros(&self.dev.ctx, len)?;
        let p = b.ptr();
        *slot = Some(b);
        Ok(p)
    }

    fn fused_workspace(
        &self,
        shape: KernelShape,
        t: usize,
        p: &SeamPlan,
        stream: CUstream,
    ) -> Result<(CUdeviceptr, CUdeviceptr, CUdeviceptr)> {
        self.ensure_fused_workspace(plan::workspace_need(shape, t, p), stream)
    }

    /// The fused kernels' workspace grown to `(records of m, records of sums of squares,
    /// counters)` bytes (`plan::workspace_need`).
    fn ensure_fused_workspace(
        &self,
        (m, ss, cnt): (usize, usize, usize),
        stream: CUstream,
    ) -> Result<(CUdeviceptr, CUdeviceptr, CUdeviceptr)> {
        let mut ws = self.ws.borrow_mut();
        let ws = &mut *ws;
        Ok((
            self.ensure(&mut ws.rec_m, m / 4, stream, "records")?,
            self.ensure(&mut ws.rec_ss, ss / 8, stream, "records")?,
            self.ensure(&mut ws.counters, cnt / 4, stream, "tile counters")?,
        ))
    }

    fn unfused_workspace(
        &self,
        cfg: &Config,
        t: usize,
        vals: bool,
        stream: CUstream,
    ) -> Result<[CUdeviceptr; 4]> {
        let mut ws = self.ws.borrow_mut();
        let ws = &mut *ws;
        let t = t.max(1);
        Ok([
            self.ensure(&mut ws.uf_m, t * cfg.mixes().max(cfg.n), stream, "mixes")?,
            self.ensure(&mut ws.uf_rinv, t, stream, "rms factors")?,
            self.ensure(&mut ws.uf_c, t * cfg.hidden, stream, "collapse")?,
            if vals {
                self.ensure(
                    &mut ws.uf_vals,
                    t * cfg.hidden,
                    stream,
                    "layer-input values",
                )?
            } else {
                0
            },
        ])
    }

    /// Why the fused path cannot serve `call`, if it cannot.
    fn fused_declines(&self, cfg: &Config, call: &RawCall) -> Option<String> {
        let io = &call.io;
        if call.op == Op::Projection {
            let p = &call.proj;
            if p.k == 0 {
                return Some("K = 0 (the generic kernel writes the zeros)".into());
            }
            if !p.k.is_multiple_of(8) {
                return Some(format!("K = {} is not a multiple of 8", p.k));
            }
            if !aligned(p.a, 16) || !aligned(p.w, 16) {
                return Some("a or w is not 16-byte aligned".into());
            }
            return None;
        }
        if matches!(call.op, Op::Gates | Op::Rmsnorm) {
            return Some(format!(
                "no fused kernel for `{}` alone (it runs inside the seam kernels)",
                call.op
            ));
        }
        if cfg.n != 4 && call.op != Op::Expand {
            return Some(format!("n = {} (the fused kernels serve n = 4)", cfg.n));
        }
        if !cfg.hidden.is_multiple_of(plan::CHUNK) {
            return Some(format!(
                "H = {} is not a multiple of {}",
                cfg.hidden,
                plan::CHUNK
            ));
        }
        let vec_ptrs = [
            ("x", io.x),
            ("residual", io.residual),
            ("residual_out", io.residual_out),
            ("layer_input", io.layer_input),
            ("fn", call.w.fn_),
            ("fn (folded)", call.w.fnb),
            ("fn (prepared)", call.w.fn_split),
            ("norm_weight", call.w.norm_weight),
            ("layer_input_fp8", io.fp8_values),
        ];
        for (name, p) in vec_ptrs {
            if p != 0 && !aligned(p, 16) {
                return Some(format!(
                    "`{name}` is not 16-byte aligned (strided or offset buffer)"
                ));
            }
        }
        None
    }

    /// Why the unfused path cannot serve `call`, if it cannot.
    fn unfused_declines(&self, cfg: &Config, call: &RawCall) -> Option<String> {
        let io = &call.io;
        for (name, p, a) in [
            ("x", io.x, 2),
            ("residual", io.residual, 2),
            ("post", io.post, 4),
            ("comb", io.comb, 4),
            ("pre", io.pre, 4),
            ("residual_out", io.residual_out, 2),
            ("layer_input", io.layer_input, 2),
            ("fn", call.w.fn_, 4),
            ("norm_weight", call.w.norm_weight, 4),
        ] {
            if p != 0 && !aligned(p, a) {
                return Some(format!("`{name}` is not {a}-byte aligned"));
            }
        }
        if cfg.n > 64 {
            return Some(format!("n = {} exceeds 64", cfg.n));
        }
        None
    }

    /// The reasons each GPU path gives for not serving `call` (empty when both can).
    pub fn declines(&self, cfg: &Config, call: &RawCall) -> Vec<Declined> {
        [
            ("fused", self.fused_declines(cfg, call)),
            ("unfused", self.unfused_declines(cfg, call)),
        ]
        .into_iter()
        .filter_map(|(p, r)| {
            r.map(|reason| Declined {
                path: p.into(),
                reason,
            })
        })
        .collect()
    }

    /// Chooses the path for a call: the fused path if it can serve it, else the unfused one;
    /// a forced path that cannot serve the call is an error, never a silent substitute.
    pub fn select(&self, cfg: &Config, call: &RawCall) -> Result<(PathChoice, Vec<Declined>)> {
        let fused = self.fused_declines(cfg, call);
        let unfused = self.unfused_declines(cfg, call);
        let unavailable = |path: &str, reason: String| Error::PathUnavailable {
            path: path.into(),
            reason,
        };
        match self.path.get() {
            PathChoice::Fused => match fused {
                None => Ok((PathChoice::Fused, vec![])),
                Some(r) => Err(unavailable("fused", r)),
            },
            PathChoice::Unfused => match unfused {
                None => Ok((PathChoice::Unfused, vec![])),
                Some(r) => Err(unavailable("unfused", r)),
            },
            PathChoice::Cpu => Err(unavailable(
                "cpu",
                "device pointers can only be served on the GPU; use the host-level backend".into(),
            )),
            PathChoice::Auto => {
                let mut declined = vec![];
                if let Some(r) = fused {
                    declined.push(Declined {
                        path: "fused".into(),
                        reason: r,
                    });
                } else {
                    return Ok((PathChoice::Fused, declined));
                }
                if let Some(r) = unfused {
                    declined.push(Declined {
                        path: "unfused".into(),
                        reason: r,
                    });
                    let why: Vec<String> = declined
                        .iter()
                        .map(|d| format!("{}: {}", d.path, d.reason))
                        .collect();
                    return Err(Error::Unsupported(format!(
                        "no GPU path serves `{}`: {}",
                        call.op,
                        why.join("; ")
                    )));
                }
                Ok((PathChoice::Unfused, declined))
            }
        }
    }

    /// Runs one op on device pointers, ordered on `stream`. Returns the route taken.
    ///
    /// # Safety
    /// Every non-zero pointer of `call` must point to device memory of the shape SPEC section 1
    /// gives for `cfg` and `call.t`, valid until the work completes; outputs must not alias
    /// inputs. No other call may use this engine's workspace concurrently.
    pub unsafe fn launch_raw(
        &self,
        cfg: &Config,
        call: &RawCall,
        stream: CUstream,
    ) -> Result<Route> {
        cfg.validate()?;
        let (path, declined) = self.select(cfg, call)?;
        let mut kernels: Vec<String> = Vec::new();
        if call.t > 0 && !(call.op == Op::Projection && (call.proj.n == 0 || call.proj.m == 0)) {
            match path {
                PathChoice::Fused => unsafe { self.fused(cfg, call, stream, &mut kernels)? },
                _ => unsafe { self.unfused(cfg, call, stream, &mut kernels)? },
            }
        }
        Ok(Route {
            backend: "cuda".into(),
            path: path.name().into(),
            kernels,
            declined,
        })
    }

    /// A launch in plain stream order without dynamic shared memory.
    unsafe fn run(
        &self,
        name: &str,
        grid: (u32, u32, u32),
        block: u32,
        stream: CUstream,
        args: &[Arg],
        kernels: &mut Vec<String>,
    ) -> Result<()> {
        unsafe { self.run_ex(name, grid, block, 0, false, 0, stream, args, kernels) }
    }

    /// A launch with `smem` bytes of dynamic shared memory, with programmatic dependent launch
    /// when `pdl` (the kernel must call pdl_wait() before touching what earlier kernels write),
    /// in clusters of `cluster` blocks along x (0: no clusters).
    #[allow(clippy::too_many_arguments)]
    unsafe fn run_ex(
        &self,
        name: &str,
        grid: (u32, u32, u32),
        block: u32,
        smem: u32,
        pdl: bool,
        cluster: u32,
        stream: CUstream,
        args: &[Arg],
        kernels: &mut Vec<String>,
    ) -> Result<()> {
        let mut store: Vec<[u8; 8]> = args
            .iter()
            .map(|a| {
                let mut b = [0u8; 8];
                match *a {
                    Arg::P(p) => b.copy_from_slice(&p.to_le_bytes()),
                    Arg::Z(z) => b.copy_from_slice(&(z as u64).to_le_bytes()),
                    Arg::I(i) => b[..4].copy_from_slice(&i.to_le_bytes()),
                    Arg::F(f) => b[..4].copy_from_slice(&f.to_le_bytes()),
                }
                b
            })
            .collect();
        let mut ptrs: Vec<*mut c_void> = store
            .iter_mut()
            .map(|b| b.as_mut_ptr() as *mut c_void)
            .collect();
        unsafe {
            self.dev
                .launch_cluster(name, grid, block, smem, stream, &mut ptrs, pdl, cluster)?
        };
        if !kernels.iter().any(|k| k == name) {
            kernels.push(name.to_string());
        }
        Ok(())
    }

    /// An elementwise launch of `total` threads in blocks of 256.
    unsafe fn run1d(
        &self,
        name: &str,
        total: usize,
        stream: CUstream,
        args: &[Arg],
        kernels: &mut Vec<String>,
    ) -> Result<()> {
        let blocks = total.div_ceil(256).max(1);
        if blocks > i32::MAX as usize {
            return Err(Error::Unsupported(format!(
                "{total} elements exceed one launch"
            )));
        }
        unsafe { self.run(name, (blocks as u32, 1, 1), 256, stream, args, kernels) }
    }

    unsafe fn fused(
        &self,
        cfg: &Config,
        call: &RawCall,
        stream: CUstream,
        kernels: &mut Vec<String>,
    ) -> Result<()> {
        let (t, h, io) = (call.t, cfg.hidden, &call.io);
        use Arg::*;
        match call.op {
            Op::PostMap => {
                return unsafe {
                    self.run1d(
                        "mhc_post",
                        t * h / 8,
                        stream,
                        &[
                            P(io.x),
                            P(io.residual),
                            P(io.post),
                            P(io.comb),
                            P(io.residual_out),
                            I(t as i32),
                            I(h as i32),
                        ],
                        kernels,
                    )
                };
            }
            Op::Expand => {
                return unsafe {
                    self.run1d(
                        "mhc_expand",
                        t * h / 8,
                        stream,
                        &[
                            P(io.x),
                            P(io.residual_out),
                            I(t as i32),
                            I(cfg.n as i32),
                            I(h as i32),
                        ],
                        kernels,
                    )
                };
            }
            Op::Projection => {
                let p = &call.proj;
                // Blocks that each own whole n-tiles of 8 or 16 rows of w (kernels/projection.cu);
                // the plan picks the variant (rows of a resident or staged, w through a ring or in
                // registers), the stage width, the ring depth and the grid. The arithmetic depends
                // on K only.
                let pp = plan::projection_plan(
                    p.m,
                    p.k,
                    p.n,
                    self.dev.info.sm_count,
                    self.pdl.get(),
                    self.dev.max_dynamic_smem("mhc_projection_m16")? as usize,
                    self.proj_plan_override.get().or(self.env_proj_plan),
                )?;
                let grid = (pp.blocks, p.m.div_ceil(16) as u32, 1);
                let kernel = if p.y_bf16 {
                    super::kernels::projection_ybf16(pp.kernel).ok_or_else(|| {
                        Error::Cuda(format!("`{}` has no bf16-output twin", pp.kernel))
                    })?
                } else {
                    pp.kernel
                };
                return unsafe {
                    self.run_ex(
                        kernel,
                        grid,
                        256,
                        pp.smem,
                        // w is read before the kernel waits for the previous one (a weight).
                        self.pdl.get(),
                        pp.cluster,
                        stream,
                        &[
                            P(p.a),
                            P(p.w),
                            P(p.y),
                            I(p.m as i32),
                            I(p.n as i32),
                            I(p.k as i32),
                            I(pp.kpw as i32),
                            I(pp.nst as i32),
                            P(if self.instrumented {
                                self.timeline_rows(kernel.to_string(), (grid.0 * grid.1) as usize)
                            } else {
                                0
                            }),
                        ],
                        kernels,
                    )
                };
            }
            _ => {}
        }
        if call.op == Op::Entry && call.w.fnb == 0 {
            return Err(Error::missing("fn (folded entry weight)"));
        }
        let Some((name, shape, plan)) = self.fused_plan(
            call.op,
            t,
            h,
            call.w.fn_split != 0 && self.use_prepared.get(),
        )?
        else {
            return Err(Error::Unsupported(format!(
                "no fused kernel for `{}`",
                call.op
            )));
        };
        // The stream variant copies the carried coefficients in 16-byte pieces.
        // (A stream plan is a two-launch plan; its tile plan is the same from any split point.)
        let plan = if plan.stream && ![io.post, io.comb, io.pre].iter().all(|&p| aligned(p, 16)) {
            self.plan(name, shape, t, h, plan::MIN_SPLIT_T)?
        } else {
            plan
        };
        let (rec_m, rec_ss, counters) = self.fused_workspace(shape, t, &plan, stream)?;
        let mut params = FusedParams {
            x: io.x,
            residual: io.residual,
            post: io.post,
            comb: io.comb,
            pre_in: io.pre,
            fn_: if call.op == Op::Entry {
                call.w.fnb
            } else {
                call.w.fn_
            },
            fn_split: if plan.prepared { call.w.fn_split } else { 0 },
            scale: call.w.scale,
            base: call.w.base,
            norm_w: call.w.norm_weight,
            residual_out: io.residual_out,
            layer_input: io.layer_input,
            post_out: io.post_out,
            comb_out: io.comb_out,
            pre_out: io.pre_out,
            fp8_q: io.fp8_values,
            fp8_s: if io.fp8_values != 0 { io.fp8_scales } else { 0 },
            rec_m,
            rec_ss,
            counters,
            t: t as i32,
            h: h as i32,
            tt: plan.tt as i32,
            tiles: plan.tiles as i32,
            w: plan.w as i32,
            nrec: plan.nrec as i32,
            rpad: plan.rpad as i32,
            rows_batch: plan.rows_batch as i32,
            iters: cfg.sinkhorn_iters as i32,
            mode: if plan.split { 1 } else { 0 },
            hc_eps: cfg.hc_eps,
            rms_eps: cfg.rms_eps,
            norm_eps: cfg.norm_eps,
            post_mult: cfg.post_mult,
            timeline: 0,
            parts: 1,
            presplit: plan.presplit as i32,
        };
        if self.instrumented {
            params.timeline =
                self.timeline_rows(name.to_string(), (plan.nrec * plan.grid_y) as usize);
        }
        let pdl = self.fused_pdl(call.op);
        let tiles_name = match stream_kernel(call.op) {
            Some(st) if plan.stream => st,
            _ => name,
        };
        let mut ptrs = [&mut params as *mut FusedParams as *mut c_void];
        unsafe {
            self.dev.launch_cluster(
                tiles_name,
                (plan.nrec, plan.grid_y, 1),
                plan.warps * 32,
                plan.smem,
                stream,
                &mut ptrs,
                pdl,
                plan.cluster,
            )?
        };
        kernels.push(tiles_name.to_string());
        let carried = matches!(
            call.op,
            Op::Seam | Op::PreDelayed | Op::Entry | Op::Final | Op::Collapse
        );
        let needs_tail = shape.nmix > 0 || call.w.norm_weight != 0 || !carried;
        if plan.split && needs_tail {
            // The tails: one block per tile, after every tile's records are written.
            let mut fin = params;
            fin.mode = 2;
            fin.rows_batch = plan.finish_rows_batch as i32;
            // Carried ops with a norm: the RMSNorm pass does not wait for the gates, so a tile's
            // tails split over several blocks by slices of H.
            let tails = tails_kernel(call.op).filter(|_| call.w.norm_weight != 0);
            fin.parts = if tails.is_some() {
                self.tail_parts_for(plan.tiles, h as u32)
            } else {
                1
            } as i32;
            // The split kernel where it takes more than one block a tile, and the launch's label
            // (the route's and the timeline's).
            let split = tails.filter(|_| fin.parts > 1);
            let label = match split {
                Some(k) => format!("{k} x{}", fin.parts),
                None => format!("{name} (tails)"),
            };
            if self.instrumented {
                fin.timeline =
                    self.timeline_rows(label.clone(), (plan.tiles * fin.parts as u32) as usize);
            }
            let mut ptrs = [&mut fin as *mut FusedParams as *mut c_void];
            unsafe {
                self.dev.launch(
                    split.unwrap_or(name),
                    (plan.tiles * fin.parts as u32, 1, 1),
                    // The stream variant's halves: the tails take one half's threads.
                    if plan.stream {
                        plan.warps / 2
                    } else {
                        plan.warps
                    } * 32,
                    plan.finish_smem,
                    stream,
                    &mut ptrs,
                    pdl,
                )?
            };
            kernels.push(label);
        }
        Ok(())
    }

    /// gates on the unfused path: src [T, K] against fn [mixes, K].
    #[allow(clippy::too_many_arguments)]
    unsafe fn uf_gates(
        &self,
        cfg: &Config,
        t: usize,
        src: CUdeviceptr,
        k: usize,
        fn_: CUdeviceptr,
        w: &RawWeights,
        io: &RawIo,
        head: bool,
        ws: [CUdeviceptr; 4],
        stream: CUstream,
        kernels: &mut Vec<String>,
    ) -> Result<()> {
        use Arg::*;
        let (n, mixes) = (cfg.n, if head { cfg.n } else { cfg.mixes() });
        let [m, rinv, _, _] = ws;
        unsafe {
            self.run(
                "uf_rms",
                (t as u32, 1, 1),
                256,
                stream,
                &[
                    P(src),
                    P(rinv),
                    I(t as i32),
                    I(k as i32),
                    I(cfg.hidden as i32),
                    F(cfg.rms_eps),
                ],
                kernels,
            )?;
            self.run(
                "uf_project",
                ((t * mixes) as u32, 1, 1),
                256,
                stream,
                &[
                    P(src),
                    P(fn_),
                    P(rinv),
                    P(m),
                    I(t as i32),
                    I(k as i32),
                    I(mixes as i32),
                ],
                kernels,
            )?;
            let common = |out: CUdeviceptr| {
                [
                    P(m),
                    P(w.scale),
                    P(w.base),
                    P(out),
                    I(t as i32),
                    I(n as i32),
                    I(mixes as i32),
                ]
            };
            let mut a = common(io.pre_out).to_vec();
            a.push(F(cfg.hc_eps));
            self.run1d("uf_gate_pre", t * n, stream, &a, kernels)?;
            if head {
                return Ok(());
            }
            let mut a = common(io.post_out).to_vec();
            a.push(F(cfg.post_mult));
            self.run1d("uf_gate_post", t * n, stream, &a, kernels)?;
            self.run1d(
                "uf_comb_logits",
                t * n * n,
                stream,
                &common(io.comb_out),
                kernels,
            )?;
            let rows = [
                P(io.comb_out),
                I((t * n) as i32),
                I(n as i32),
                F(cfg.hc_eps),
            ];
            self.run1d("uf_row_softmax", t * n, stream, &rows, kernels)?;
            for it in 0..cfg.sinkhorn_iters {
                if it > 0 {
                    self.run1d("uf_row_norm", t * n, stream, &rows, kernels)?;
                }
                self.run1d(
                    "uf_col_norm",
                    t * n,
                    stream,
                    &[P(io.comb_out), I(t as i32), I(n as i32), F(cfg.hc_eps)],
                    kernels,
                )?;
            }
        }
        Ok(())
    }

    /// The layer input on the unfused path: collapse(src, p) (+ rmsnorm) (+ MXFP8).
    #[allow(clippy::too_many_arguments)]
    unsafe fn uf_layer_input(
        &self,
        cfg: &Config,
        t: usize,
        src: CUdeviceptr,
        p: CUdeviceptr,
        w: &RawWeights,
        io: &RawIo,
        ws: [CUdeviceptr; 4],
        stream: CUstream,
        kernels: &mut Vec<String>,
    ) -> Result<()> {
        use Arg::*;
        let (n, h) = (cfg.n, cfg.hidden);
        let [_, _, c, vals] = ws; // vals is 0 unless the call wants MXFP8
        unsafe {
            if w.norm_weight != 0 {
                self.run1d(
                    "uf_collapse",
                    t * h,
                    stream,
                    &[
                        P(src),
                        P(p),
                        P(c),
                        P(0),
                        I(t as i32),
                        I(n as i32),
                        I(h as i32),
                    ],
                    kernels,
                )?;
                self.uf_rmsnorm(
                    cfg,
                    t,
                    c,
                    w.norm_weight,
                    io.layer_input,
                    vals,
                    stream,
                    kernels,
                )?;
            } else {
                self.run1d(
                    "uf_collapse",
                    t * h,
                    stream,
                    &[
                        P(src),
                        P(p),
                        P(io.layer_input),
                        P(vals),
                        I(t as i32),
                        I(n as i32),
                        I(h as i32),
                    ],
                    kernels,
                )?;
            }
            self.uf_fp8(t, h, vals, io, stream, kernels)
        }
    }

    /// rmsnorm of src [T,H] into out (and the f32 values into vals when non-zero).
    #[allow(clippy::too_many_arguments)]
    unsafe fn uf_rmsnorm(
        &self,
        cfg: &Config,
        t: usize,
        src: CUdeviceptr,
        norm_w: CUdeviceptr,
        out: CUdeviceptr,
        vals: CUdeviceptr,
        stream: CUstream,
        kernels: &mut Vec<String>,
    ) -> Result<()> {
        use Arg::*;
        let args = [
            P(src),
            P(norm_w),
            P(out),
            P(vals),
            I(t as i32),
            I(cfg.hidden as i32),
            F(cfg.norm_eps),
        ];
        unsafe { self.run("uf_rmsnorm", (t as u32, 1, 1), 256, stream, &args, kernels) }
    }

    unsafe fn uf_fp8(
        &self,
        t: usize,
        h: usize,
        vals: CUdeviceptr,
        io: &RawIo,
        stream: CUstream,
        kernels: &mut Vec<String>,
    ) -> Result<()> {
        if io.fp8_values == 0 {
            return Ok(());
        }
        if !h.is_multiple_of(32) {
            return Err(Error::Unsupported(format!(
                "MXFP8 needs H divisible by 32 (H = {h})"
            )));
        }
        let blocks = t * h / 32;
        unsafe {
            self.run1d(
                "uf_mxfp8",
                blocks,
                stream,
                &[
                    Arg::P(vals),
                    Arg::P(io.fp8_values),
                    Arg::P(io.fp8_scales),
                    Arg::Z(blocks),
                ],
                kernels,
            )
        }
    }

    unsafe fn unfused(
        &self,
        cfg: &Config,
        call: &RawCall,
        stream: CUstream,
        kernels: &mut Vec<String>,
    ) -> Result<()> {
        use Arg::*;
        let (t, n, h, io, w) = (call.t, cfg.n, cfg.hidden, &call.io, &call.w);
        let (ti, ni, hi) = (t as i32, n as i32, h as i32);
        let ws = self.unfused_workspace(cfg, t, io.fp8_values != 0, stream)?;
        // The f32 layer-input values only feed the MXFP8 output.
        let vals = if io.fp8_values != 0 { ws[3] } else { 0 };
        let ws = [ws[0], ws[1], ws[2], vals];
        let k = cfg.k();
        unsafe {
            // gates of src [T, k] against fn_, then the layer input from src and pre p (the
            // arguments every op shares bound once).
            let gates = |src, k, fn_, head, kernels: &mut Vec<String>| {
                self.uf_gates(cfg, t, src, k, fn_, w, io, head, ws, stream, kernels)
            };
            let layer_input = |src, p, kernels: &mut Vec<String>| {
                self.uf_layer_input(cfg, t, src, p, w, io, ws, stream, kernels)
            };
            let post_map = |kernels: &mut Vec<String>| {
                self.run1d(
                    "uf_post_map",
                    t * n * h,
                    stream,
                    &[
                        P(io.x),
                        P(io.residual),
                        P(io.post),
                        P(io.comb),
                        P(io.residual_out),
                        I(ti),
                        I(ni),
                        I(hi),
                    ],
                    kernels,
                )
            };
            match call.op {
                Op::PostMap => post_map(kernels)?,
                Op::Expand => self.run1d(
                    "uf_expand",
                    t * n * h,
                    stream,
                    &[P(io.x), P(io.residual_out), I(ti), I(ni), I(hi)],
                    kernels,
                )?,
                Op::Gates => gates(io.residual, k, w.fn_, false, kernels)?,
                Op::Seam | Op::SeamV4 => {
                    post_map(kernels)?;
                    gates(io.residual_out, k, w.fn_, false, kernels)?;
                    let p = if call.op == Op::Seam {
                        io.pre
                    } else {
                        io.pre_out
                    };
                    layer_input(io.residual_out, p, kernels)?;
                }
                Op::Pre | Op::PreDelayed => {
                    gates(io.residual, k, w.fn_, false, kernels)?;
                    let p = if call.op == Op::PreDelayed {
                        io.pre
                    } else {
                        io.pre_out
                    };
                    layer_input(io.residual, p, kernels)?;
                }
                Op::Head => {
                    gates(io.residual, k, w.fn_, true, kernels)?;
                    layer_input(io.residual, io.pre_out, kernels)?;
                }
                Op::Final | Op::Collapse => layer_input(io.residual, io.pre, kernels)?,
                Op::Rmsnorm => {
                    self.uf_rmsnorm(
                        cfg,
                        t,
                        io.x,
                        w.norm_weight,
                        io.layer_input,
                        vals,
                        stream,
                        kernels,
                    )?;
                    self.uf_fp8(t, h, vals, io, stream, kernels)?;
                }
                Op::Entry => {
                    if w.fnb == 0 {
                        return Err(Error::missing("fn (folded entry weight)"));
                    }
                    self.run1d(
                        "uf_expand",
                        t * n * h,
                        stream,
                        &[P(io.x), P(io.residual_out), I(ti), I(ni), I(hi)],
                        kernels,
                    )?;
                    gates(io.x, h, w.fnb, false, kernels)?;
                    if w.norm_weight != 0 {
                        self.uf_rmsnorm(
                            cfg,
                            t,
                            io.x,
                            w.norm_weight,
                            io.layer_input,
                            vals,
                            stream,
                            kernels,
                        )?;
                    } else {
                        sys::cuMemcpyDtoDAsync_v2(io.layer_input, io.x, t * h * 2, stream)
                            .result()?;
                        if vals != 0 {
                            self.run1d(
                                "uf_widen",
                                t * h,
                                stream,
                                &[P(io.x), P(vals), Z(t * h)],
                                kernels,
                            )?;
                        }
                    }
                    self.uf_fp8(t, h, vals, io, stream, kernels)?;
                }
                Op::Projection => {
                    let p = &call.proj;
                    self.run1d(
                        if p.y_bf16 {
                            "uf_projection_ybf16"
                        } else {
                            "uf_projection"
                        },
                        p.m * p.n,
                        stream,
                        &[
                            P(p.a),
                            P(p.w),
                            P(p.y),
                            I(p.m as i32),
                            I(p.n as i32),
                            I(p.k as i32),
                        ],
                        kernels,
                    )?;
                }
            }
        }
        Ok(())
    }

    /// Computes the entry seam's folded weight fnb [mixes, H] from fn [mixes, n*H] on `stream`.
    /// (The entry seam is launched without programmatic dependent launch, so it may follow this
    /// kernel directly on the same stream.)
    ///
    /// # Safety
    /// `fn_` and `fnb` must hold mixes*n*H and mixes*H f32 elements.
    pub unsafe fn fold_entry_weight(
        &self,
        cfg: &Config,
        fn_: CUdeviceptr,
        fnb: CUdeviceptr,
        stream: CUstream,
    ) -> Result<()> {
        let m = cfg.mixes();
        let mut k = vec![];
        unsafe {
            self.run1d(
                "uf_fold",
                m * cfg.hidden,
                stream,
                &[
                    Arg::P(fn_),
                    Arg::P(fnb),
                    Arg::I(m as i32),
                    Arg::I(cfg.n as i32),
                    Arg::I(cfg.hidden as i32),
                ],
                &mut k,
            )
        }
    }

    /// 32-bit words of fn prepared by [`CudaEngine::split_fn_weight`] for `cfg` (n = 4, 24
    /// mixes): the bytes of fn.
    pub fn fn_split_words(cfg: &Config) -> usize {
        plan::fn_split_words(cfg.n, cfg.hidden)
    }

    /// Prepares fn [24, 4H] for the cluster kernels on `stream`: the f32 weights permuted into the
    /// projection's tensor-core fragment order (kernels/seam.cu, `mhc_fn_split`), so that the
    /// kernels stage it with one copy per chunk and load each step's weights with three 16-byte
    /// loads a lane. Run it once per seam's weights, as they are uploaded; pass the
    /// result as [`RawWeights::fn_split`] beside fn. Like fn, it must not be written by the
    /// kernel that precedes a seam on its stream.
    ///
    /// # Safety
    /// `fn_` must hold 24 x n x H f32 elements and `out` [`CudaEngine::fn_split_words`] u32
    /// elements, 16-byte aligned.
    pub unsafe fn split_fn_weight(
        &self,
        cfg: &Config,
        fn_: CUdeviceptr,
        out: CUdeviceptr,
        stream: CUstream,
    ) -> Result<()> {
        if cfg.n != 4 || cfg.mixes() != 24 || !cfg.hidden.is_multiple_of(plan::CHUNK) {
            return Err(Error::Unsupported(format!(
                "prepared fn is for n = 4, 24 mixes and H a multiple of {} (n = {}, {} mixes, H = {})",
                plan::CHUNK,
                cfg.n,
                cfg.mixes(),
                cfg.hidden
            )));
        }
        if !aligned(out, 16) {
            return Err(Error::Invalid(
                "prepared fn: the output is not 16-byte aligned".into(),
            ));
        }
        let mut k = vec![];
        unsafe {
            self.run1d(
                "mhc_fn_split",
                Self::fn_split_words(cfg),
                stream,
                &[
                    Arg::P(fn_),
                    Arg::P(out),
                    Arg::I(cfg.n as i32),
                    Arg::I(cfg.hidden as i32),
                ],
                &mut k,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::FusedParams;
    use std::mem::{offset_of, size_of};

    /// The offsets and size of `struct FusedParams` in kernels/seam.cu, computed from its
    /// declaration by the C rules (a pointer, u64 or double 8 bytes, int, u32 or float 4, each
    /// aligned to its size, the struct to its widest member).
    fn cuda_layout() -> (Vec<(String, usize)>, usize) {
        let src = crate::cuda::kernels::SEAM.source;
        let body = src
            .split_once("struct FusedParams {")
            .and_then(|(_, rest)| rest.split_once("};"))
            .expect("struct FusedParams in seam.cu")
            .0;
        let (mut fields, mut off, mut align) = (Vec::new(), 0usize, 1usize);
        for line in body.lines() {
            let decl = line
                .split("//")
                .next()
                .unwrap()
                .trim()
                .trim_end_matches(';');
            if decl.is_empty() {
                continue;
            }
            // "type name, name, ...": the type is the first part's words but its last.
            let decl = decl.trim_start_matches("const ");
            let (first, rest) = decl.split_once(',').unwrap_or((decl, ""));
            let (ty, first) = first.trim().rsplit_once(' ').expect("a type and a name");
            let names =
                std::iter::once(first).chain(rest.split(',').filter(|n| !n.trim().is_empty()));
            for name in names {
                let name = name.trim();
                let pointer = ty.ends_with('*') || name.starts_with('*');
                let size = match ty.trim() {
                    _ if pointer => 8,
                    "int" | "float" | "u32" => 4,
                    "u64" | "double" | "unsigned long long" => 8,
                    other => panic!("FusedParams: unknown type `{other}`"),
                };
                off = off.next_multiple_of(size);
                fields.push((name.trim_start_matches('*').to_string(), off));
                off += size;
                align = align.max(size);
            }
        }
        (fields, off.next_multiple_of(align))
    }

    /// `FusedParams` mirrors the kernels' struct field for field: the same offsets in the same
    /// order and the same size, so a field added on one side only fails here, before a GPU reads
    /// the parameters shifted.
    #[test]
    fn fused_params_match_the_kernels_struct() {
        let (cuda, cuda_size) = cuda_layout();
        let rust = [
            offset_of!(FusedParams, x),
            offset_of!(FusedParams, residual),
            offset_of!(FusedParams, post),
            offset_of!(FusedParams, comb),
            offset_of!(FusedParams, pre_in),
            offset_of!(FusedParams, fn_),
            offset_of!(FusedParams, fn_split),
            offset_of!(FusedParams, scale),
            offset_of!(FusedParams, base),
            offset_of!(FusedParams, norm_w),
            offset_of!(FusedParams, residual_out),
            offset_of!(FusedParams, layer_input),
            offset_of!(FusedParams, post_out),
            offset_of!(FusedParams, comb_out),
            offset_of!(FusedParams, pre_out),
            offset_of!(FusedParams, fp8_q),
            offset_of!(FusedParams, fp8_s),
            offset_of!(FusedParams, rec_m),
            offset_of!(FusedParams, rec_ss),
            offset_of!(FusedParams, counters),
            offset_of!(FusedParams, t),
            offset_of!(FusedParams, h),
            offset_of!(FusedParams, tt),
            offset_of!(FusedParams, tiles),
            offset_of!(FusedParams, w),
            offset_of!(FusedParams, nrec),
            offset_of!(FusedParams, rpad),
            offset_of!(FusedParams, rows_batch),
            offset_of!(FusedParams, iters),
            offset_of!(FusedParams, mode),
            offset_of!(FusedParams, hc_eps),
            offset_of!(FusedParams, rms_eps),
            offset_of!(FusedParams, norm_eps),
            offset_of!(FusedParams, post_mult),
            offset_of!(FusedParams, timeline),
            offset_of!(FusedParams, parts),
            offset_of!(FusedParams, presplit),
        ];
        let names: Vec<&str> = cuda.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(cuda.len(), rust.len(), "fields: {names:?}");
        for ((name, off), r) in cuda.iter().zip(rust) {
            assert_eq!(
                *off, r,
                "FusedParams.{name}: offset {off} in CUDA, {r} in Rust"
            );
        }
        assert_eq!(cuda_size, size_of::<FusedParams>());
        // The first fields as the kernels name them (a parse that went wrong would not).
        assert_eq!(names[..3], ["x", "residual", "post"]);
        assert_eq!(names[names.len() - 1], "presplit");
    }
}
