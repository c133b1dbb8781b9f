//! Launch plans of the fused seam kernels: how many chunks a block owns (W), tokens per tile,
//! how many blocks walk the tiles, and whether a block stages its slice of fn in shared memory.
//!
//! Every plan computes the same bits (see kernels/seam.cu), so a plan is chosen freely from T
//! for speed alone; `MHC_PLAN=W,warps,tt,gridy` overrides the heuristic (for tuning).

use crate::error::{Error, Result};

/// Channels per chunk (one warp's share of H).
pub const CHUNK: usize = 32;
/// Most tokens in one tile (the MMA's M).
pub const MAXTT: usize = 16;
/// Per-token coefficients staged in shared memory.
const COEF: usize = 24;

/// The shape of one fused launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SeamPlan {
    /// Chunks (warps doing channel work) per block: 1, 2, 4 or 8.
    pub w: u32,
    /// Warps per block (>= w; the extra warps help with the per-token tail).
    pub warps: u32,
    /// Tokens per tile.
    pub tt: u32,
    /// Tiles.
    pub tiles: u32,
    /// Blocks along the tiles (gridDim.y); fewer than `tiles` makes blocks persistent.
    pub grid_y: u32,
    /// Records per token (= gridDim.x, the groups of w chunks).
    pub nrec: u32,
    /// nrec rounded up to a power of two (the tail's tree width).
    pub rpad: u32,
    /// Rows the tail reduces at once.
    pub rows_batch: u32,
    /// The block stages its slice of fn in shared memory (every op with mixes).
    pub fn_smem: bool,
    /// Dynamic shared memory bytes.
    pub smem: u32,
    /// Two launches: the tiles (mode 1), then one block per tile for the tails (mode 2).
    pub split: bool,
    /// Rows the tail reduces at once in the finish launch.
    pub finish_rows_batch: u32,
    /// Dynamic shared memory of the finish launch.
    pub finish_smem: u32,
    /// Blocks per thread-block cluster of the cluster kernel (one cluster per tile, `nrec` = this
    /// many blocks of `w` chunks and one gate warp); 0: the tile kernel.
    pub cluster: u32,
    /// The cluster kernel reads fn prepared by `mhc_fn_split` (its `_clp` variant).
    pub prepared: bool,
    /// Groups of 16 rows (the MMA's M) in a tile: 2 in the cluster kernel's tiles of 32 tokens
    /// (its `_cl2` and `_clp2` variants), else 1.
    pub mtiles: u32,
    /// The tiles launch (mode 1) runs the stream variant (`mhc_seam_st`, `mhc_seam_v4_st`): one
    /// block of two halves of `w` warps a multiprocessor, `warps` counting both; the tails launch
    /// keeps `w` warps a block.
    pub stream: bool,
    /// The cluster kernel's first `presplit` chunk warps a block hold their prepared fn split into
    /// the MMA's hi and lo fragments, done before the PDL wait (`with_presplit`); 0: none.
    pub presplit: u32,
}

/// Shared memory of one half of the stream variant (ST_HALF_BYTES in kernels/seam.cu): the stage
/// of the next tile's rows (10 blocks of 8 rows, 36 slots of 16 bytes apart), two buffers of
/// coefficients, the warps' partials and sums of squares.
const ST_HALF_BYTES: usize =
    10 * 8 * 36 * 16 + 2 * MAXTT * COEF * 4 + 8 * MAXTT * 24 * 4 + 8 * MAXTT * 2 * 8;

/// `MHC_STREAM=0|1`, if set: whether the seams' tiles launch at large T takes the stream variant
/// (default on).
pub fn stream_setting() -> Result<Option<bool>> {
    Ok(env_numbers("MHC_STREAM", "0 or 1", &[1])?.map(|v| v[0] != 0))
}

/// `MHC_STREAM_MIN_TILES=n`, if set: the fewest tiles for the stream variant of both seams,
/// instead of `STREAM_MIN_TILES` (the engine reads it once, when it is created). Every value gives
/// the same bits.
pub fn stream_min_tiles_override() -> Result<Option<u32>> {
    Ok(env_numbers("MHC_STREAM_MIN_TILES", "a tile count", &[1])?.map(|v| v[0]))
}

/// `MHC_STREAM_SMS=n`, if set: the multiprocessors the seams' stream launch deals its groups over
/// (at most the device's; `stream_plan`'s `sms`), for measuring how its time scales with the SMs
/// it keeps busy (the engine reads it once, when it is created). Every value gives the same bits.
pub fn stream_sms_override() -> Result<Option<u32>> {
    Ok(env_numbers("MHC_STREAM_SMS", "a multiprocessor count", &[1])?.map(|v| v[0].max(1)))
}

/// `MHC_TAIL_PARTS=n`, if set: the blocks each tile's tails take (`tail_parts`; 1 = one block a
/// tile, as before the split; the engine reads it once, when it is created).
pub fn tail_parts_override() -> Result<Option<u32>> {
    Ok(env_numbers("MHC_TAIL_PARTS", "a block count >= 1", &[1])?.map(|v| v[0].max(1)))
}

/// Blocks the tails launch of a two-launch plan gives each tile of a carried op with a norm
/// (kernels/seam.cu, `seam_tails_body`): every part sums the tile's norm records and runs the
/// RMSNorm pass over its slice of H, part 0 also the gates. One block a tile ran the pass over
/// 16 rows x H alone, a chain of six memory round trips on 32-128 SMs at T = 512-2048 (the tails
/// launch took 20-24 us there, PERF_NOTES.md attempt 62). As many parts as fill two blocks a
/// multiprocessor, each slice at least 64 vectors of 8 channels, at most 4 (8 lost to 4 at
/// T = 300 by 4-17 % and matched it at T = 512 on the H200), but up to 8 where eight a tile stay
/// within three quarters of the multiprocessors (tiles <= 12 on the H200, T = 113-192, where the
/// stream launch leaves SMs idle): -0.2 to -1.9 % against 4 at every H but one point (+0.1 %),
/// while from 14 tiles on 8 lost 0.3-1.8 % (attempt 124). Where one block a tile already
/// takes more than one a multiprocessor (tiles in (sms, 2 sms], T = 2113-4224 on the H200), still
/// two: against one, -0.5 to -6.8 % at T = 2500-4096 at every H, where 4 lost at T >= 3500
/// (attempt 67).
///
/// One part fewer where the tails' blocks would otherwise take more than 3/4 of the
/// multiprocessors but one part fewer keeps them within 9/10, and the narrower count still gives
/// every thread of the norm pass one vector at most (`tail_slice` <= `TAIL_NORM_THREADS`): the
/// tails' blocks leave a multiprocessor only when they end, and the next seam's stream launch (a
/// block a multiprocessor) lands and stages its fn only where none is left. On the H200 that is
/// 4 -> 3 parts at 25-39 tiles (T = 385-624) at H = 4096 and 5120. Measured against 4 parts: at
/// H = 5120 -1.2 to -5.0 % at T = 400 and 448-624 (T = 512 29.1 -> 28.3-28.6 us) but +1.6 % at
/// T = 416, at H = 4096 -0.2 to -2.0 %; 3 parts forced at 24 tiles were even, at 40-56 tiles +0.3
/// to +1.4 % at H = 4096, and at H = 7168 (two vectors a thread) +4 to +8 % (PERF_NOTES.md
/// attempt 135). (A tails block has 256 threads on every default plan.)
pub fn tail_parts(tiles: u32, h: u32, sms: u32) -> u32 {
    let most = if 8 * 4 * tiles <= 3 * sms { 8 } else { 4 };
    let widest = (h / 8 / 64).clamp(1, most);
    let parts = if tiles <= 2 * sms {
        ((2 * sms) / tiles.max(1)).max(2)
    } else {
        1
    };
    let parts = parts.min(widest);
    if parts > 2
        && 4 * tiles * parts > 3 * sms
        && 10 * tiles * (parts - 1) <= 9 * sms
        && tail_slice(h, parts - 1) <= TAIL_NORM_THREADS
    {
        parts - 1
    } else {
        parts
    }
}

/// Threads of a split-tails block that run the RMSNorm pass in every part: its 256 threads less
/// part 0's gate warp (kernels/seam.cu, `finish_tile`).
const TAIL_NORM_THREADS: u32 = 256 - 32;

/// Vectors of 8 channels in one part's slice of H when a tile's tails take `parts` blocks: whole
/// MXFP8 blocks of 4 vectors (kernels/seam.cu, `finish_tile`'s `per`).
fn tail_slice(h: u32, parts: u32) -> u32 {
    let h8 = h / 8;
    (h8.div_ceil(parts.max(1)) + 3) & !3
}

/// Fewest tiles for the stream variant of the seams' tiles launch (V4.1 and V4): one, so every
/// two-launch plan where `stream_plan` applies takes it. Measured on the H200 with PDL against the
/// tile kernel (PERF_NOTES.md, attempt 84), once the stream launch kept every block of its grid
/// where the tiles do not fill two a half: the V4.1 seam at T = 225-496 -2 to -20 % at most T at
/// every H (+1 to +3.8 % at H = 5120, T = 225-256, and at T = 288-304 at 4096 and 7168); the V4
/// seam at T = 561-1536 -1.6 to -6.5 % at most T (up to +4.3 % at a few, with five waves).
/// Before that change the minimum was 32 tiles (V4: 128), where the tile kernel had won at fewer
/// with two tiles a half.
pub const STREAM_MIN_TILES: u32 = 1;

/// The stream variant of a two-launch plan of the seams (kernels/seam.cu, `mhc_seam_st` and
/// `mhc_seam_v4_st`), where it applies: the tiles launch of a split plan with groups of 8 chunks
/// and tiles of 16 tokens, with at least `min_tiles` tiles. One block (two halves, each walking
/// its own tiles) a multiprocessor, `sms / nrec` blocks along the tiles so that every block of the
/// launch is resident at once, but no more than the tiles fill (one a half). The halves take the
/// tiles round-robin, so the launch takes ceil(tiles / (2 grid_y)) rounds: with fewer tiles a half
/// may hold one or none (a smaller grid would only add rounds). Measured on the H200 in
/// PERF_NOTES.md, attempts 60, 84, 119 and 126 (halves claiming the last round's tiles from a
/// counter instead lost 1.8-3.3 % where the tiles deal unevenly, once the kernel copied whole
/// rows).
pub fn stream_plan(shape: KernelShape, p: &SeamPlan, sms: u32, min_tiles: u32) -> Option<SeamPlan> {
    if !p.split
        || p.w != 8
        || p.warps != 8
        || p.tt as usize != MAXTT
        || shape.nin != 4
        || shape.nmix != 24
    {
        return None;
    }
    if p.tiles < min_tiles.max(1) {
        return None;
    }
    let grid_y = (sms / p.nrec).clamp(1, p.tiles.div_ceil(2));
    let fn_bytes = shape.nin * shape.nmixp() * p.w as usize * CHUNK * 4;
    Some(SeamPlan {
        warps: 2 * p.w,
        grid_y,
        smem: (fn_bytes + 2 * ST_HALF_BYTES) as u32,
        stream: true,
        ..*p
    })
}

/// Rounds of a stream plan's tiles launch: its busiest half's tiles (two halves a block).
pub fn stream_rounds(p: &SeamPlan) -> u32 {
    p.tiles.div_ceil(2 * p.grid_y.max(1))
}

/// Whether the V4.1 seam takes its two-launch plan `two` ahead of a cluster plan in tiles of
/// `cluster_mt` x 16 tokens over `cluster_waves` waves: only where `two`'s tiles launch is the
/// stream variant, the clusters cannot hold the call in one wave of tiles of 16 (they take tiles of
/// 32, or more waves), and the stream launch takes no more rounds than the clusters take waves
/// (tiles of 32 in one wave count as one). Measured on the H200 with PDL (PERF_NOTES.md attempt
/// 85): one round of the stream launch costs about 15-16 us at every H against 16.5-19.4 for one
/// wave of tiles of 32 at H = 5120 (T = 113-176); two rounds (23-24 us) beat two waves of tiles of
/// 16 (23.5-33.3 us at H = 7168, T = 113-224) but not one wave of tiles of 32 (20.0 us at H = 5120,
/// T = 224); one wave of tiles of 16 (T <= 112) stays ahead of either.
pub fn stream_ahead_of_clusters(two: &SeamPlan, cluster_mt: u32, cluster_waves: u32) -> bool {
    two.stream
        && clusters_past_one_wave(cluster_mt, cluster_waves)
        && stream_rounds(two) <= cluster_waves.max(1)
}

/// Whether a cluster plan in tiles of `cluster_mt` x 16 tokens over `cluster_waves` waves is past
/// one wave of tiles of 16 (where `stream_ahead_of_clusters` may prefer the two launches; below,
/// the engine need not form the two-launch plan at all).
pub fn clusters_past_one_wave(cluster_mt: u32, cluster_waves: u32) -> bool {
    cluster_mt > 1 || cluster_waves > 1
}

/// Bytes of fn prepared by `mhc_fn_split` per chunk of 32 channels and stream: the weights of
/// the chunk's two projection steps in the lanes' fragment order, 12 a lane each (kernels/seam.cu,
/// FNP_WORDS): the bytes of fn itself.
pub const FN_SPLIT_STREAM_BYTES: usize = 2 * 12 * 32 * 4;

/// 32-bit words of fn [24, nin * H] prepared by `mhc_fn_split` (H a multiple of 32).
pub fn fn_split_words(nin: usize, h: usize) -> usize {
    h.div_ceil(CHUNK) * nin * FN_SPLIT_STREAM_BYTES / 4
}

/// For word `idx` of prepared fn (kernels/seam.cu has the layout: per chunk, stream j and half u,
/// [pair st][n-tile][lane][2]): the index into fn [24, nin * H] of its weight (None past H).
pub(crate) fn fn_split_source(idx: usize, nin: usize, h: usize) -> Option<usize> {
    const STEP: usize = 12 * 32; // words per (chunk, stream, half)
    let (rem, cju) = (idx % STEP, idx / STEP);
    let (c, j, u) = (cju / 2 / nin, cju / 2 % nin, cju % 2);
    let (sn, lane, b) = (rem / 64, rem % 64 / 2, rem % 2);
    let (st, nt) = (sn / 3, sn % 3);
    let (g, q) = (lane / 4, lane % 4);
    let ch = c * CHUNK + 8 * q + 4 * u + 2 * st + b;
    (ch < h).then(|| (nt * 8 + g) * nin * h + j * h + ch)
}

/// The CPU twin of `mhc_fn_split`: fn [24, nin * H] permuted into the cluster kernel's fragment
/// order (the kernels split each weight into its two TF32 pieces as they load it), as f32 bits.
pub fn fn_split_reference(fn_: &[f32], nin: usize, h: usize) -> Vec<u32> {
    (0..fn_split_words(nin, h))
        .map(|idx| fn_split_source(idx, nin, h).map_or(0, |a| fn_[a].to_bits()))
        .collect()
}

/// The op's shape as the kernel sees it.
#[derive(Clone, Copy, Debug)]
pub struct KernelShape {
    /// Streams the projection reads (4, or 1 for the entry seam).
    pub nin: usize,
    /// Mixes (24, 4 for the head, 0 for final/collapse).
    pub nmix: usize,
}

impl KernelShape {
    fn nmixp(&self) -> usize {
        if self.nmix == 0 {
            8
        } else {
            self.nmix.div_ceil(8) * 8
        }
    }
    fn nm(&self) -> usize {
        self.nmix.max(1)
    }
}

/// The largest T a tile plan runs in one launch (`default_shape`). On the H200 the cluster kernel
/// serves T <= 224, and at T = 225-256 two launches measured 23-37 % faster than one (PERF_NOTES.md
/// attempt 83).
pub const ONE_LAUNCH_MAX_T: usize = 224;

/// The fewest tokens a two-launch plan takes: two tiles of `MAXTT` (a single tile runs in one).
pub const MIN_SPLIT_T: usize = MAXTT + 1;

/// `MHC_TWO_LAUNCH_FROM_T=n`, if set: the seams (the ops with a stream tiles launch) take the
/// two-launch plan from T = max(n, `MIN_SPLIT_T`) up, ahead of the cluster kernel and of the
/// one-launch plan (the engine reads it once, when it is created). Every value gives the same
/// bits.
pub fn two_launch_from_override() -> Result<Option<usize>> {
    Ok(env_numbers("MHC_TWO_LAUNCH_FROM_T", "a token count", &[1])?.map(|v| v[0] as usize))
}

/// The heuristic's choice of (w, warps, tt, persistent) for T tokens. Small T: one launch, tiles
/// of at most 8 tokens so the tail (on the critical path) stays short (16 where tiles of 8 would
/// take a second wave of blocks, see `plan`), and whole groups of 8 chunks per block, which keeps
/// the records (and the tail's tree) small: on the H200 this beat 1, 2 and 4 chunks per block at
/// T = 1 to 128 (PERF_NOTES.md, attempts 3 and 9). From `split_from` tokens (past
/// `ONE_LAUNCH_MAX_T` unless the engine asks for fewer): persistent blocks with fn staged in
/// shared memory, and the tails in a second launch.
fn default_shape(t: usize, split_from: usize) -> (u32, u32, u32, bool) {
    if t < split_from.max(MIN_SPLIT_T) {
        (8, 8, t.clamp(1, 8) as u32, false)
    } else {
        (8, 8, 16, true)
    }
}

/// An environment override of `n` comma-separated integers (`what` names them), if set.
fn env_numbers(name: &str, what: &str, lens: &[usize]) -> Result<Option<Vec<u32>>> {
    let Ok(s) = std::env::var(name) else {
        return Ok(None);
    };
    let bad = || Error::Invalid(format!("{name} `{s}`: expected {what}"));
    let v: Vec<u32> = s
        .split(',')
        .map(|x| x.trim().parse::<u32>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| bad())?;
    if !lens.contains(&v.len()) {
        return Err(bad());
    }
    Ok(Some(v))
}

/// `MHC_PLAN=W,warps,tt,gridy`, if set (the engine reads it once, when it is created).
pub fn seam_override() -> Result<Option<PlanOverride>> {
    Ok(env_numbers("MHC_PLAN", "W,warps,tt,gridy", &[4])?.map(|v| (v[0], v[1], v[2], v[3])))
}

/// A forced launch shape (W, warps, tt, gridy; gridy 0: one block row per tile), as in
/// `MHC_PLAN`.
pub type PlanOverride = (u32, u32, u32, u32);

/// Plans a fused launch for T tokens of hidden size H. `occupancy(warps, smem)` returns blocks per
/// SM; `sms` is the multiprocessor count; `forced` (the engine's override, else `MHC_PLAN`)
/// replaces the heuristic.
pub fn plan(
    shape: KernelShape,
    t: usize,
    h: usize,
    sms: u32,
    occupancy: &dyn Fn(u32, u32) -> Result<u32>,
    forced: Option<PlanOverride>,
) -> Result<SeamPlan> {
    plan_split_from(shape, t, h, sms, occupancy, forced, ONE_LAUNCH_MAX_T + 1)
}

/// `plan`, with the heuristic's two-launch plans from `split_from` tokens up (at least
/// `MIN_SPLIT_T`) instead of past `ONE_LAUNCH_MAX_T`.
pub fn plan_split_from(
    shape: KernelShape,
    t: usize,
    h: usize,
    sms: u32,
    occupancy: &dyn Fn(u32, u32) -> Result<u32>,
    forced: Option<PlanOverride>,
    split_from: usize,
) -> Result<SeamPlan> {
    let chunks = h.div_ceil(CHUNK);
    let (w, warps, tt, persistent, gy_override) = match forced {
        Some((w, warps, tt, gy)) => {
            if ![1, 2, 4, 8].contains(&w)
                || ![1, 2, 4, 8].contains(&warps)
                || warps < w
                || tt == 0
                || tt as usize > MAXTT
            {
                return Err(Error::Invalid(format!(
                    "MHC_PLAN: need W and warps in 1,2,4,8, W <= warps, 1 <= tt <= {MAXTT}"
                )));
            }
            (w, warps, tt, gy > 0, gy)
        }
        None => {
            let (w, warps, mut tt, p) = default_shape(t, split_from);
            // One launch: tiles of 16 tokens when tiles of 8 would need a second wave of blocks
            // (on the H200 at H = 5120: T = 128 30.6 -> 29.3 us, T = 192 35.8 -> 30.4 us, the
            // same at T = 64, slower at T = 32; BENCHMARKS.md, plan tuning).
            if !p && tt == 8 {
                let blocks8 = t.div_ceil(8) * chunks.div_ceil(w as usize);
                if blocks8 > 2 * sms as usize {
                    tt = 16;
                }
            }
            (w, warps, tt, p, 0)
        }
    };
    // The tail splits a block's threads evenly over the tile's rows in multiples of 4.
    let tt = tt.min(warps * 8);
    let tiles = t.div_ceil(tt as usize).max(1) as u32;
    let nrec = chunks.div_ceil(w as usize) as u32;
    let rpad = nrec.next_power_of_two();
    let nm = shape.nm();
    let fn_bytes_if = |on: bool| -> usize {
        if on && shape.nmix > 0 {
            shape.nin * shape.nmixp() * w as usize * CHUNK * 4
        } else {
            0
        }
    };
    let partials = warps as usize * MAXTT * nm * 4 + warps as usize * MAXTT * 2 * 8;
    let red = 2 * warps as usize * 32 * 8;
    let smem_for = |fn_smem: bool, rows_batch: usize| -> usize {
        let tree = rows_batch * nm * rpad as usize * 4;
        fn_bytes_if(fn_smem) + partials.max(tree).max(red).max(MAXTT * COEF * 4)
    };
    // Every launch that runs tiles stages its group's slice of fn in shared memory (asynchronous
    // copies at kernel start). Rows per tail batch: as many as fit in the partials' space; two
    // blocks must fit on a multiprocessor.
    let fn_smem = shape.nmix > 0;
    let rows_batch = (partials / (nm * rpad as usize * 4)).clamp(1, tt as usize);
    let mut grid_y = tiles;
    if persistent {
        let smem = smem_for(fn_smem, rows_batch) as u32;
        let occ = occupancy(warps, smem)?.max(1);
        let cap = ((occ * sms) / nrec).max(1);
        grid_y = if gy_override > 0 {
            gy_override.min(tiles)
        } else {
            tiles.min(cap)
        };
    }
    let split = persistent && tiles > 1;
    // The finish launch has no fn to stage: its whole tile's tree fits in shared memory.
    let finish_rows_batch = ((96 * 1024) / (nm * rpad as usize * 4)).clamp(1, tt as usize);
    let finish_smem = (finish_rows_batch * nm * rpad as usize * 4).max(red) as u32;
    Ok(SeamPlan {
        w,
        warps,
        tt,
        tiles,
        grid_y,
        nrec,
        rpad,
        rows_batch: rows_batch as u32,
        fn_smem,
        smem: smem_for(fn_smem, rows_batch) as u32,
        split,
        finish_rows_batch: finish_rows_batch as u32,
        finish_smem,
        cluster: 0,
        prepared: false,
        mtiles: 1,
        stream: false,
        presplit: 0,
    })
}

/// Leaves of the chunk tree one thread of the cluster kernel sums (CL_GROUP in kernels/seam.cu).
const CL_GROUP: usize = 16;
/// Groups of leaves the cluster kernel sums at most (CL_MAXGRP in kernels/seam.cu).
const CL_MAXGRP: usize = 32;
/// Most blocks in a cluster (sm_90's non-portable limit; CL_MAX in kernels/seam.cu).
pub const CL_MAX: u32 = 16;
/// Most warps in a cluster kernel's block (its launch bounds).
const CL_WARPS: u32 = 16;
/// The same for the kernel's tiles of 32 tokens (CL_WARPS2: more registers a thread).
const CL_WARPS2: u32 = 11;

/// `MHC_CLUSTER=n`, if set: 0 keeps the fused ops on the tile kernel, n > 1 runs the ops that
/// have a cluster kernel in clusters of n blocks at every T (for tuning and tests).
pub fn cluster_override() -> Result<Option<u32>> {
    Ok(env_numbers("MHC_CLUSTER", "a cluster size (0: off)", &[1])?.map(|v| v[0]))
}

/// The cluster sizes the engine tries for the cluster kernel, in order: the first whose plan fits
/// and whose clusters run in the pass's waves.
pub const CLUSTER_SIZES: [u32; 3] = [CL_MAX, 12, 8];

/// `MHC_CLUSTER_SIZES=a[,b...]`, if set: the cluster sizes the engine tries, in order, instead of
/// `CLUSTER_SIZES` (each 2..=CL_MAX). Unlike `MHC_CLUSTER` it forces nothing else: the other
/// rules (the rows spread over clusters, the waves, the two launches) still apply.
pub fn cluster_sizes_override() -> Result<Option<Vec<u32>>> {
    let v = env_numbers(
        "MHC_CLUSTER_SIZES",
        "1 to 8 cluster sizes, each 2..=16",
        &[1, 2, 3, 4, 5, 6, 7, 8],
    )?;
    if let Some(bad) = v.iter().flatten().find(|&&c| !(2..=CL_MAX).contains(&c)) {
        return Err(Error::Invalid(format!(
            "MHC_CLUSTER_SIZES: cluster size {bad} is outside 2..={CL_MAX}"
        )));
    }
    Ok(v)
}

/// `MHC_CLUSTER_MTILES=m`, if set: the cluster kernel's tiles are 16 (m = 1) or 32 (m = 2)
/// tokens at every T where it runs (for tuning and tests).
pub fn cluster_mtiles_override() -> Result<Option<u32>> {
    let v = env_numbers("MHC_CLUSTER_MTILES", "1 or 2", &[1])?.map(|v| v[0]);
    if let Some(m) = v
        && !(1..=2).contains(&m)
    {
        return Err(Error::Invalid(format!(
            "MHC_CLUSTER_MTILES `{m}`: expected 1 or 2"
        )));
    }
    Ok(v)
}

/// `MHC_CLUSTER_SPREAD`: 0 keeps the cluster kernel's tiles at 32 tokens (tiles of 32) or 16
/// (with PDL at small T, where `small_tile_tokens` would spread a call over up to three clusters)
/// (default 1).
pub fn cluster_spread_setting() -> Result<bool> {
    Ok(env_numbers("MHC_CLUSTER_SPREAD", "0 or 1", &[1])?.is_none_or(|v| v[0] != 0))
}

/// `MHC_CLUSTER_CHANNELS`: 0 keeps the seam's cluster kernel at T <= 4 in the MMA's lane layout
/// for the elementwise phase instead of lanes by channels (default 1).
pub fn cluster_channels_setting() -> Result<bool> {
    Ok(env_numbers("MHC_CLUSTER_CHANNELS", "0 or 1", &[1])?.is_none_or(|v| v[0] != 0))
}

/// Clusters a call takes at most at small T. The H200 runs 7 clusters of 16 blocks at once, so
/// two consecutive seams of 3 clusters each run side by side (the next one's blocks land and stage
/// fn while this one computes), where with a fourth cluster one of them lands only once the
/// previous seam's clusters exit and stages its fn on the critical path (PERF_NOTES.md attempts
/// 42 and 143).
const SMALL_TILE_CLUSTERS: usize = 3;

/// Tokens per tile for the cluster kernel at small T with PDL, spread over at most
/// SMALL_TILE_CLUSTERS clusters (fewer where fewer run at once: `active`); None: whole tiles of
/// up to 16 tokens. With `channels` (the seam's lanes-by-channels variants): the smallest of 1, 2
/// and 4 that fits those clusters, else ceil(T / their count) tokens where that is at most 16 (the
/// MMA lane layout). Without (the V4 seam, pre_delayed, or channels turned off): the MMA lane layout
/// costs about the same for any tile of up to 8 tokens (one row a lane) and more from 9 (a second
/// row a lane), so past 8 tokens the fewest clusters that keep tiles at 8 or fewer, else tiles of
/// ceil(T / their count) up to 16. Measured on the H200 with PDL: the seam (attempt 143, against
/// tiles of 4 over up to 7 clusters, attempt 42's rule) -3.6 to -21.5 % at T = 13-28 and -3.9 to
/// -11.7 % at T = 29-40 at every H, T = 16 at H = 5120 7.51 -> 7.00 us; the V4 seam (attempt 144,
/// against whole tiles of 16) -15.5 to -28.4 % at T = 9-24 and -3.1 to -11.8 % at T = 25-40, T = 16
/// at H = 5120 9.20 -> 6.99 us.
pub fn small_tile_tokens(t: usize, active: u32, channels: bool) -> Option<usize> {
    let clusters = SMALL_TILE_CLUSTERS.min(active as usize).max(1);
    if channels {
        return [1, 2, 4]
            .into_iter()
            .find(|&tt| t.div_ceil(tt) <= clusters)
            .or_else(|| Some(t.div_ceil(clusters)).filter(|&tt| tt <= MAXTT));
    }
    let n = t.div_ceil(MAXTT / 2).min(clusters);
    Some(t.div_ceil(n)).filter(|&tt| n > 1 && tt <= MAXTT)
}

/// Waves of clusters the cluster kernel may take at hidden size `h`, for an op whose tile kernel
/// forms the collapse after the gates (the V4 seam), before the two-launch plan is faster. Past
/// one wave (T > 112 on the H200) its clusters of 16 tokens run in waves. Measured on the H200 with
/// PDL: after attempt 79 against the tile kernel (PERF_NOTES.md attempt 81), four waves
/// (T = 337-448) -16 to -30 %, five (T = 449-560) -5 to -18 % at every H, seven or more lose
/// everywhere; six (T = 561-672), against the stream variant that attempt 84 brought to those T,
/// -1.0 to -7.3 % at H = 7168, -2.9 to +0.1 % at 5120, +3.8 to +10.6 % at 4096. (Attempt 52,
/// before attempts 69-79: four waves even, five +8 %.)
pub fn collapse_after_gates_waves(h: usize) -> u32 {
    if h >= 5120 { 6 } else { 5 }
}

/// Waves of clusters of tiles of 16 tokens the cluster kernel may take for the ops that carry
/// their pre-mix (the V4.1 seam) where no plan fits one wave: on the H200 that is H = 7168 at
/// T = 113-224, whose tiles of 32 tokens do not fit the kernel's 11 warps. Measured there with PDL
/// (PERF_NOTES.md attempt 81): -6.5 to -21.7 % against the tile kernel. Where tiles of 32 fit
/// (H = 4096 and 5120), one wave of them serves T <= 224 and is tried first (two waves of tiles of
/// 16 measured 17-36 % slower there), and past T = 224 two waves do not hold the tiles.
pub const CARRIED_WAVES: u32 = 2;

/// `MHC_CLUSTER_WAVES=n`, if set: the waves of clusters the cluster kernel may take for an op that
/// forms its collapse after the gates, instead of `collapse_after_gates_waves` (n >= 1; the engine
/// reads it once, when it is created). Every count gives the same bits.
pub fn cluster_waves_override() -> Result<Option<u32>> {
    Ok(env_numbers("MHC_CLUSTER_WAVES", "a wave count >= 1", &[1])?.map(|v| v[0].max(1)))
}

/// `MHC_PREPARED_FN`: 0 makes the engine ignore prepared fn (default 1).
pub fn prepared_fn_setting() -> Result<bool> {
    Ok(env_numbers("MHC_PREPARED_FN", "0 or 1", &[1])?.is_none_or(|v| v[0] != 0))
}

/// `MHC_PRESPLIT=n`: the engine presplits at most n chunk warps of prepared fn a block
/// (`with_presplit`; 0: none; default: as many as fit).
pub fn presplit_setting() -> Result<u32> {
    Ok(env_numbers("MHC_PRESPLIT", "a count of chunk warps", &[1])?.map_or(u32::MAX, |v| v[0]))
}

/// The cluster kernel's plan (kernels/seam.cu): clusters of `cl` blocks, one per tile of up to
/// 16 tokens (`mtiles` = 1) or 32 (`mtiles` = 2, the `_cl2` variants, clusters of 16 only), each
/// block with ceil(chunks / cl) chunk warps and a gate warp, its slice of fn in shared memory.
/// None where the kernel does not apply: an op without 24 mixes, fewer than CL_GROUP / 2 + 1 or
/// more than CL_GROUP * CL_MAXGRP chunks (the kernel's tree groups), more than CL_WARPS warps a
/// block (CL_WARPS2 with `mtiles` = 2), or more shared memory than `budget`. `prepared`: the block
/// stages its chunks of fn prepared by `mhc_fn_split` (fn permuted into fragment order, the same
/// bytes) instead.
/// `spread` > 1: tiles of ceil(T / spread) tokens where that is fewer (the call's rows spread
/// over up to `spread` clusters, so over more multiprocessors).
#[allow(clippy::too_many_arguments)]
pub fn cluster_plan(
    shape: KernelShape,
    t: usize,
    h: usize,
    cl: u32,
    budget: u32,
    prepared: bool,
    mtiles: u32,
    spread: u32,
) -> Option<SeamPlan> {
    let chunks = h.div_ceil(CHUNK);
    let max_warps = match mtiles {
        1 => CL_WARPS,
        2 if cl == CL_MAX => CL_WARPS2,
        _ => return None,
    };
    if shape.nmix != 24
        || chunks <= CL_GROUP / 2
        || chunks.next_power_of_two() > CL_GROUP * CL_MAXGRP
        || !(2..=CL_MAX).contains(&cl)
    {
        return None;
    }
    let w = chunks.div_ceil(cl as usize);
    if w as u32 + 1 > max_warps {
        return None;
    }
    let max_tt = MAXTT * mtiles as usize;
    let tt = t.div_ceil(spread.max(1) as usize).clamp(1, max_tt);
    let tiles = t.div_ceil(tt).max(1) as u32;
    let nm = shape.nm();
    let groups = chunks.next_power_of_two() / CL_GROUP;
    // The rows a block finishes at most; the layout of kernels/seam.cu, seam_cluster_body: fn,
    // whose space the upper tree's buffers reuse, then the leaves, the gate sums of squares, the
    // warps' norm sums (tiles of 32) and the norm's leaves.
    let own = tt.div_ceil(cl as usize);
    let fn_bytes = if prepared {
        w * shape.nin * FN_SPLIT_STREAM_BYTES
    } else {
        shape.nin * shape.nmix * (w * CHUNK * 4 + 16)
    };
    let upper = own * groups * (8 + nm * 4);
    // (The gate sums of squares' rows padded to whole groups: kernels/seam.cu, lssrow.)
    let lss_row = chunks.next_multiple_of(CL_GROUP);
    let smem =
        fn_bytes.max(upper) + own * chunks * nm * 4 + own * (lss_row + chunks) * 8 + w * max_tt * 8;
    if smem > budget as usize {
        return None;
    }
    Some(SeamPlan {
        w: w as u32,
        warps: w as u32 + 1,
        tt: tt as u32,
        tiles,
        grid_y: tiles,
        nrec: cl,
        rpad: cl,
        rows_batch: 1,
        fn_smem: true,
        smem: smem as u32,
        split: false,
        finish_rows_batch: 1,
        finish_smem: 0,
        cluster: cl,
        prepared,
        mtiles,
        stream: false,
        presplit: 0,
    })
}

/// The most clusters (tiles) a call may have for the engine to presplit fn (`with_presplit`). The
/// next seam's clusters do their presplit while this one's run, so both seams' clusters must fit
/// the GPU at once: at T = 64 (4 clusters of 16 blocks) the presplit measured +2 to +6.5 % (H200,
/// PERF_NOTES.md attempt 162), at T = 16 (3 clusters) -1 to -3.7 %.
pub const PRESPLIT_MAX_TILES: usize = 3;

/// A prepared cluster plan (`p.prepared`, tiles of 16: the PS kernels of kernels/seam.cu) with as
/// many of a block's chunk warps presplit as `budget` holds: each such chunk's slot of prepared fn
/// takes twice the bytes (its TF32 pieces, rewritten in place before the PDL wait, so that the
/// projection loads the MMA's operands and splits nothing; PERF_NOTES.md attempt 158). The first
/// warps take them: warp i runs on sub-partition i mod 4, so where W is not a multiple of 4 the
/// sub-partitions with the most chunk warps get the most presplit ones. Any count gives the same
/// bits.
pub fn with_presplit(shape: KernelShape, p: SeamPlan, budget: u32, max: u32) -> SeamPlan {
    if !p.prepared || p.mtiles != 1 || p.cluster == 0 || max == 0 {
        return p;
    }
    let chunk = (shape.nin * FN_SPLIT_STREAM_BYTES) as u32;
    let room = budget.saturating_sub(p.smem) / chunk;
    let n = room.min(p.w).min(max);
    SeamPlan {
        presplit: n,
        smem: p.smem + n * chunk,
        ..p
    }
}

/// The token counts at which `CudaEngine::reserve` sizes the tile kernel's workspace for calls of
/// up to `max_t` tokens: every T up to `ONE_LAUNCH_MAX_T + 1`, where a plan's tiles change with T
/// (tiles of 8 or 16 tokens, one launch or two) and its counters are not monotone in T, then
/// `max_t` (past `ONE_LAUNCH_MAX_T` the two-launch plan's needs grow with T).
pub fn reserve_points(max_t: usize) -> impl Iterator<Item = usize> {
    let dense = max_t.min(ONE_LAUNCH_MAX_T + 1);
    (1..=dense).chain((max_t > dense).then_some(max_t))
}

/// Workspace bytes a plan needs: (records of m, records of sums of squares, counters).
pub fn workspace_need(shape: KernelShape, t: usize, p: &SeamPlan) -> (usize, usize, usize) {
    if p.cluster > 0 {
        // Reduces through distributed shared memory: no records (one element each, never read).
        return (4, 8, 4);
    }
    let rows = t.max(1);
    (
        rows * p.nrec as usize * shape.nm() * 4,
        rows * p.nrec as usize * 2 * 8,
        // The tile kernel's counter a tile.
        p.tiles as usize * 4,
    )
}

/// The compressor projection's launch (kernels/projection.cu): which variant, how many k-blocks
/// each warp takes per stage (`kpw`: the stage is `kpw * 1024` columns of an n-tile of 8 rows of
/// w, or 16 in the W16 variants, one bulk copy per row), how many ring slots (`nst`), the dynamic
/// shared memory, and how many blocks (each owns a contiguous share of the n-tiles). Every plan
/// computes the same bits (the k order depends on K only), so it is chosen for speed alone;
/// `MHC_PROJ_PLAN=kpw,nst[,tpb[,rows[,regs]]]` overrides the heuristic (for tuning).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProjPlan {
    pub kernel: &'static str,
    pub kpw: u32,
    pub nst: u32,
    pub smem: u32,
    pub blocks: u32,
    /// Blocks a cluster (along the grid's x) for the multicast variant; 0 launches no clusters.
    pub cluster: u32,
}

/// A forced projection plan: (kpw, nst, tpb, rows, regs). kpw = nst = 0 keeps the heuristic's
/// stage and ring; tpb = 0 keeps its grid, else the grid is ceil(n-tiles / tpb) blocks (several
/// may share an SM); rows is the n-tile's rows of w: 16 takes the W16 variant (w as the MMA's
/// 16-row operand, M <= 8 with resident rows of a only), 8 or 0 the default 8; regs = 1 takes the
/// register-resident variant (no ring: a tile of 16 rows of w held in registers, and past
/// K = 5120 partly in shared memory; K <= 7168, M <= 8; nst is ignored, and kpw = 1 at
/// K <= 4096 takes rr1_c4, whose loads of w all test their row and column, else kpw is
/// ignored), regs = 2 the same where a block has two tiles (tpb 2, or more tiles than SMs), the
/// second whole in shared memory (K <= 5120), regs = 3 the rows dealt evenly over min(SMs, n-tiles)
/// blocks (at most 20 a block: 16 in registers as with regs = 1, the rest in shared memory; tpb is
/// ignored; kpw = 2 at 4096 < K <= 5120 multicasts the rows of a over clusters of two blocks,
/// rrb_c5_mc2, and needs K a multiple of 16 and an even number of blocks; kpw = 3 past K = 5120
/// copies and computes the compact rows first, rrb_c7_xf; kpw = 5 has the last warp wait and copy
/// a before its own loads of w, rrb_c4_aw, rrb_c5_aw, or past K = 5120 rrb_c7_xf_aw (the compact
/// rows first as well); kpw = 6 at K <= 5120 has the last warp wait and copy a and the other
/// warps copy its share of w into shared memory, rrb_c4_as, rrb_c5_as; kpw = 7 at K <= 5120
/// does that with the rows of a multicast over clusters of two as with kpw = 2, rrb_c4_as_mc2,
/// rrb_c5_as_mc2 (K a multiple of 16 and an even number of blocks); any other kpw is ignored),
/// regs = 4
/// w streamed through registers, 2 k-blocks a warp in flight and two blocks an SM (any K, M <= 8;
/// one tile a block unless tpb is set), regs = 6 tiles of 8 rows in registers (the operands as
/// the ring kernel's; K <= 7168, M <= 8; two blocks an SM up to K = 5120; tpb = 0 as many blocks
/// as run at once, else tpb tiles a block).
pub type ProjOverride = (u32, u32, u32, u32, u32);

/// Plans measured faster than the heuristic on the H200 (132 SMs), applied on GPUs with 132 SMs
/// (an H100 SXM has as many: not measured there): (K, N) -> (kpw, nst, tpb, rows, regs) as in
/// `ProjOverride`, whether the entry needs programmatic dependent launch, and the largest M it
/// applies to (the first entry for (K, N) that applies wins, so an entry may have a fallback
/// after it). Every plan gives the same bits, so a choice by M keeps the batch invariance.
///
/// w in registers (regs = 1; PERF_NOTES.md attempts 25-27, two runs on two machines, M = 1, 2, 4
/// and 8, PDL on and off): at N = 1024 and 2048, -7 to -35 % against the ring with PDL and -0.4 to
/// -13 % without it. With PDL it stays at 4096 x 1024, 7168 x 1024 and 7168 x 2048; without PDL at
/// every N <= 2048.
///
/// The ring at N = 2560 without PDL (attempts 21 and 24): tiles of 8 rows with two blocks of two
/// tiles each sharing an SM.
///
/// The rows dealt evenly (regs = 3; attempts 41, 90, 92; one run each, two alternating rounds
/// within 1 %): min(SMs, 16-row tiles) blocks of at most 20 rows, with PDL at K = 4096 and 5120,
/// M <= 8, except 4096 x 1024. Against the plans they replaced, M = 1 / 2 / 4 / 8: 5120 x 2048
/// -6.4 / -7.5 / -8.9 / -13.6 % (tiles of 8 rows, two blocks an SM, attempt 88, at M <= 4), 4096
/// x 2048 -3.9 / -3.3 / -2.5 / -10.1 % (two register tiles a block at M <= 4), 5120 x 1024 -3.2 /
/// -2.2 / -1.2 / -2.7 % (w in registers), 4096 x 2560 -4.8 / -5.6 / -4.7 / -16.3 % (the ring at
/// M = 1 and 8, w streamed through registers at M = 2, 4), 5120 x 2560 -1.6 to -4.3 % at M <= 4
/// and -19.1 % at M = 8 (the ring). At 4096 x 1024 +4.5 to +8.1 %; at K = 7168 +9 to +13 %, and
/// since attempt 93 even with w streamed through registers at N = 2560 and 3-5 % slower than w
/// in registers at N = 1024 and 2048: not taken there. (Attempt 41's loss at K = 4096 measured
/// a kernel whose loads of w sat below the wait, attempt 89.)
///
/// w streamed through registers (regs = 4, attempt 55): at 7168 x 2560 with PDL, M <= 4, 160
/// blocks of one tile, two an SM: -2.7 / -4.5 / -5.2 % against the ring at M = 1, 2, 4 (in the
/// table until attempt 102).
///
/// Two tiles a block (regs = 2, attempt 26) and tiles of 8 rows (regs = 6, attempt 88) left the
/// table to the rows dealt evenly; they remain plans to force.
///
/// w in registers with a test on every load of w (kpw = 1, regs = 1: RR's code before attempt 93,
/// rr1_c4; attempt 97, one run, two rounds): at 4096 x 1024 with PDL, M = 3..8, -2.8 % at M = 4
/// and -7.4 % at M = 8 against RR (+3.7 / +2.4 % at M = 1 / 2, where RR stayed); in the table
/// until attempt 138 (below).
///
/// The rows dealt evenly with a multicast over clusters of two (kpw = 2, regs = 3, rrb_c5_mc2;
/// attempt 101, three sessions, two or three rounds each): at 5120 x 1024 with PDL, M = 2..4,
/// -3.0 / -2.3 / -2.7 % at M = 2, -1.2 / -2.2 % at M = 3, -6.7 / -5.7 / -6.9 % at M = 4 against
/// rrb_c5 (M = 1 +0.0 / +2.0 / +0.7 % and M = 8 +0.3 / +1.5 %, where rrb_c5 stays). It lost at
/// every other shape tried (N = 2048 and 2560, 4096 x 1024), and clusters of four everywhere.
///
/// The rows dealt evenly with the compact rows first (kpw = 3, regs = 3, rrb_c7_xf; attempt 102,
/// two sessions, three rounds each): at 7168 x 2560 with PDL, M <= 4, -5.2 / -4.5 / -3.4 % and
/// -5.3 / -4.6 / -3.7 / -3.0 % (M = 1 / 2 / (3) / 4) against w streamed through registers (in the
/// table until attempt 103).
///
/// The last warp waiting and copying a first (kpw = 5, regs = 3; attempt 103, three runs of two
/// rounds each, each on a fresh machine start, M = 1 / 2 / 4): 7168 x 2560 -6.6 / -8.0 / -10.4 %, -6.6 / -8.0 /
/// -11.5 % and -6.0 / -7.6 / -10.2 % against the compact rows first alone (86-89 % of copy);
/// 5120 x 2560 -1.6 / -3.4 / -4.3 %, -4.5 / -5.3 / -6.6 % and -1.7 / -3.9 / -4.6 %, and -7.4 % at
/// M = 8 (one run); 4096 x 2560 at M = 8 -5.1 % (one run; +2.3 to +3.1 % at M = 1, -0.1 to
/// -0.9 % at M = 4, where rrb_c4 stays). Not taken at 7168 x 2048 (-1.9 to -3.7 % in one run,
/// +1.0 to -0.9 % in the next), N = 1024 (+0.5 to +3 % at K = 7168, +12 to +22 % at K <= 5120).
///
/// The last warp's share of w copied by the other warps (kpw = 6, regs = 3; attempt 104, two runs
/// of two rounds): 5120 x 2048 -6.0 / -6.6 / -6.8 % and -4.9 / -4.9 / -5.5 %, -4.4 % at M = 8;
/// 4096 x 2048 -3.4 / -3.8 / -3.9 % and -2.2 / -2.6 / -3.4 %, -2.7 % at M = 8; 5120 x 1024 at
/// M = 1 / 2 -4.9 / -4.1 % and -2.0 / -2.6 % (+3.0 and +3.7 % at M = 4 against the multicast).
/// It loses at N = 2560 (+1 to +4 %) and past K = 5120 (+17 to +35 %, rrb_c7_xf_as, not kept).
///
/// The two together, the last warp waiting and multicasting a over clusters of two while the
/// other warps copy its share of w (kpw = 7, regs = 3, rrb_c5_as_mc2; attempt 138, an A/B of three
/// rounds against the table it replaced, the last warp's share copied at M <= 2 and the multicast
/// at M = 3, 4): at 5120 x 1024 with PDL, M = 1 / 2 / 3 / 4, -2.1 / -4.2 / -2.6 / -1.6 %; +0.5 to
/// +0.8 % at M = 8 (rrb_c5 stays) and +10 % at 5120 x 2048. Its K = 4096 twin
/// (rrb_c4_as_mc2; one run of three rounds): at 4096 x 1024 with PDL, M = 1 / 2 / 3 / 4 / 8,
/// -2.4 / -6.1 / -5.3 / -5.2 / -3.3 % against the table before (RR at M <= 2, rr1_c4 past it), the
/// first plan there at 80 % of copy at every M <= 4; +6 % at 4096 x 2048 and +12 % at 4096 x 2560.
///
/// The kernels the table runs at N = 2560, K <= 5120 (rrb_c4, rrb_c4_aw, rrb_c5_aw) end a block's
/// two tiles behind one barrier since attempt 139 (-2.3 to -3.6 % there at M = 1-8, three rounds);
/// the plans did not change.
///
/// Tiles of 8 rows in registers (regs = 6, rr8_c7, one block an SM) at 7168 x 2560 with PDL,
/// M = 5-8, where the rows dealt evenly do not fit (attempt 141; A/B of two rounds against the
/// ring kernel of the heuristic): -5.6 / -5.4 / -4.3 / -3.7 % at M = 5 / 6 / 7 / 8 (M = 8 14.76 ->
/// 14.22 us; cuBLAS 13.6-13.7, ahead at M = 7 and 8, even at 6).
const PROJ_TUNED_H200: [((usize, usize), ProjOverride, bool, usize); 18] = [
    ((4096, 1024), (7, 0, 0, 0, 3), true, 8),
    ((4096, 1024), (0, 0, 0, 0, 1), false, 8),
    ((5120, 1024), (7, 0, 0, 0, 3), true, 4),
    ((5120, 1024), (0, 0, 0, 0, 3), true, 8),
    ((5120, 1024), (0, 0, 0, 0, 1), false, 8),
    ((7168, 1024), (0, 0, 0, 0, 1), false, 8),
    ((4096, 2048), (6, 0, 0, 0, 3), true, 8),
    ((4096, 2048), (0, 0, 0, 0, 1), false, 8),
    ((5120, 2048), (6, 0, 0, 0, 3), true, 8),
    ((5120, 2048), (0, 0, 0, 0, 1), false, 8),
    ((7168, 2048), (0, 0, 0, 0, 1), false, 8),
    ((4096, 2560), (0, 0, 0, 0, 3), true, 4),
    ((4096, 2560), (5, 0, 0, 0, 3), true, 8),
    ((4096, 2560), (2, 2, 2, 0, 0), false, 4),
    ((5120, 2560), (5, 0, 0, 0, 3), true, 8),
    ((5120, 2560), (2, 2, 2, 0, 0), false, 4),
    ((7168, 2560), (5, 0, 0, 0, 3), true, 4),
    ((7168, 2560), (0, 0, 0, 0, 6), true, 8),
];

/// Most rows of w a block of the balanced register-resident variant takes (PBAL_MAX in
/// kernels/projection.cu).
const PROJ_BAL_ROWS: usize = 20;

/// Most ring slots (PMAXST in kernels/projection.cu).
const PROJ_MAX_SLOTS: usize = 8;
/// Widest stage the heuristic picks, in k-blocks per warp (copies of up to 16 KB per row).
const PROJ_MAX_KPW: usize = 8;

/// The projection plan for `m` rows of a, `k` columns and `n` rows of w on `sms` multiprocessors,
/// within `budget` bytes of dynamic shared memory. A measured entry of `PROJ_TUNED_H200` wins
/// where it applies; otherwise the heuristic: rows of a stay resident (the whole K) at m <= 8 when
/// they fit beside a ring of two one-k-block stages, else they travel with each stage (the 16-row
/// variant); the stage is as wide as the ring allows with two slots, up to 8 k-blocks per warp
/// and never wider than K (on the H200 the copy count, not the ring depth, bounded the
/// throughput, PERF_NOTES.md); one block per SM at most, each with whole n-tiles.
#[allow(clippy::too_many_arguments)]
pub fn projection_plan(
    m: usize,
    k: usize,
    n: usize,
    sms: u32,
    pdl: bool,
    budget: usize,
    forced: Option<ProjOverride>,
) -> Result<ProjPlan> {
    let row = |kpw: usize| kpw * 2048 + 64;
    // One block per SM, each with whole n-tiles, unless the override asks for tpb tiles a block.
    let grid = |tiles: usize, tpb: usize| {
        (if tpb == 0 {
            tiles.min(sms.max(1) as usize)
        } else {
            tiles.div_ceil(tpb)
        }) as u32
    };
    let (mut kernel, mut ar, mut res) = match m {
        0..=4 => ("mhc_projection_m4", 4, true),
        5..=8 => ("mhc_projection_m8", 8, true),
        _ => ("mhc_projection_m16", 16, false),
    };
    let a_res = |ar: usize| ar * (2 * k + 64);
    if res && a_res(ar) + 2 * 8 * row(1) > budget {
        (kernel, ar, res) = ("mhc_projection_m16", 16, false);
    }
    // Rows of w per n-tile: 16 (the W16 variants) only when asked for, and only with resident a.
    let th = match forced.map_or(0, |f| f.3) {
        0 | 8 => 8,
        16 if res => {
            kernel = if ar == 4 {
                "mhc_projection_w16_m4"
            } else {
                "mhc_projection_w16_m8"
            };
            16
        }
        r => {
            return Err(Error::Unsupported(format!(
                "projection plan with n-tiles of {r} rows at M={m}, K={k}: tiles have 8 rows, or 16 where the rows of a stay resident (M <= 8)"
            )));
        }
    };
    let (regs, rows) = forced.map_or((0, 0), |f| (f.4, f.3));
    // The register variants keep a's rows resident and unpadded.
    let a_unpadded = ar.min(8) * 2 * k;
    // regs = 4: w streamed through registers, 2 k-blocks a warp in flight, two blocks an SM; any
    // K; one tile a block unless tpb says otherwise.
    if regs == 4 {
        let smem = a_unpadded;
        if !res || !matches!(rows, 0 | 16) || smem > budget {
            return Err(Error::Unsupported(format!(
                "projection plan with w streamed through registers (regs = 4) at M={m}, K={k}, N={n}: needs tiles of 16 rows, M <= 8 and {smem} bytes of shared memory ({budget} available)"
            )));
        }
        return Ok(ProjPlan {
            kernel: "mhc_projection_rs2",
            kpw: 0,
            nst: 0,
            smem: smem as u32,
            blocks: grid(
                n.div_ceil(16).max(1),
                forced.map_or(0, |f| f.2 as usize).max(1),
            ),
            cluster: 0,
        });
    }
    // regs = 6: tiles of 8 rows in registers (the operands as the ring kernel's), up to 7
    // k-blocks a warp; two blocks an SM up to K = 5120; tpb = 0 spreads the tiles over as many
    // blocks as run at once, else tpb tiles a block.
    if regs == 6 {
        let ck = k.div_ceil(128).div_ceil(8);
        let (kernel, per_sm) = match ck {
            0..=4 => ("mhc_projection_rr8_c4", 2),
            5 => ("mhc_projection_rr8_c5", 2),
            _ => ("mhc_projection_rr8_c7", 1),
        };
        let smem = a_unpadded;
        if !res || ck > 7 || !matches!(rows, 0 | 8) || smem > budget {
            return Err(Error::Unsupported(format!(
                "projection plan with tiles of 8 rows in registers (regs = 6) at M={m}, K={k}, N={n}: needs tiles of 8 rows, M <= 8, K <= 7168 and {smem} bytes of shared memory ({budget} available)"
            )));
        }
        let tiles = n.div_ceil(8).max(1);
        let blocks = match forced.map_or(0, |f| f.2 as usize) {
            0 => tiles.min(per_sm * sms.max(1) as usize),
            tpb => tiles.div_ceil(tpb),
        };
        return Ok(ProjPlan {
            kernel,
            kpw: 0,
            nst: 0,
            smem: smem as u32,
            blocks: blocks as u32,
            cluster: 0,
        });
    }
    // The register-resident variants: tiles of 16 rows, up to 5 k-blocks per warp in registers
    // and 2 more in shared memory (32 KB each; K <= 7168); regs = 2: two tiles a block, the
    // second whole in shared memory (K <= 5120).
    if regs != 0 {
        let ck = k.div_ceil(128).div_ceil(8);
        // regs = 3: the rows dealt evenly, at most PROJ_BAL_ROWS a block, the 16 first as the
        // register tile and the rest in a compact area (8 KB per k-block a warp takes).
        // (kernel, lane-private bytes, blocks a cluster: 2 for the multicast of a, else none), by
        // regs, the forced kpw (0 if none) and K's k-blocks a warp.
        let forced_kpw = forced.map_or(0, |f| f.0);
        let (kernel, lane_private, cluster) = match (regs, forced_kpw, ck) {
            (1, 1, 0..=4) => ("mhc_projection_rr1_c4", 0, 0),
            (3, 5, 0..=4) => ("mhc_projection_rrb_c4_aw", 4 * 8192, 0),
            (3, 5, 5) => ("mhc_projection_rrb_c5_aw", 5 * 8192, 0),
            (3, 5, 6..) => ("mhc_projection_rrb_c7_xf_aw", 2 * 32768 + 7 * 8192, 0),
            (3, 6, 0..=4) => ("mhc_projection_rrb_c4_as", 4 * 8192 + 4 * 4096, 0),
            (3, 6, 5) => ("mhc_projection_rrb_c5_as", 5 * 8192 + 5 * 4096, 0),
            (3, 7, 0..=4) => ("mhc_projection_rrb_c4_as_mc2", 4 * 8192 + 4 * 4096, 2),
            (3, 7, 5) => ("mhc_projection_rrb_c5_as_mc2", 5 * 8192 + 5 * 4096, 2),
            (3, 7, 6..) => {
                return Err(Error::Unsupported(format!(
                    "projection plan with the rows of a multicast and the last warp's share of w copied by the others (kpw = 7, regs = 3) at M={m}, K={k}, N={n}: needs K <= 5120"
                )));
            }
            (3, 6, 6..) => {
                return Err(Error::Unsupported(format!(
                    "projection plan with the last warp's share of w copied by the others (kpw = 6, regs = 3) at M={m}, K={k}, N={n}: needs K <= 5120 (past K = 5120 kpw = 5)"
                )));
            }
            (1, _, 0..=4) => ("mhc_projection_rr_c4", 0, 0),
            (1, _, 5) => ("mhc_projection_rr_c5", 0, 0),
            (1, _, _) => ("mhc_projection_rr_c7", 2 * 32768, 0),
            (3, 2, 5) => ("mhc_projection_rrb_c5_mc2", 5 * 8192, 2),
            (3, 3, 6..) => ("mhc_projection_rrb_c7_xf", 2 * 32768 + 7 * 8192, 0),
            (3, _, 0..=4) => ("mhc_projection_rrb_c4", 4 * 8192, 0),
            (3, _, 5) => ("mhc_projection_rrb_c5", 5 * 8192, 0),
            (3, _, _) => ("mhc_projection_rrb_c7", 2 * 32768 + 7 * 8192, 0),
            (_, _, 0..=4) => ("mhc_projection_rr2_c4", 4 * 32768, 0),
            _ => ("mhc_projection_rr2_c5", 5 * 32768, 0),
        };
        let smem = a_unpadded + lane_private;
        let kmax = if regs == 2 { 5 } else { 7 };
        let blocks = if regs == 3 {
            (n.div_ceil(16).min(sms.max(1) as usize)).max(1) as u32
        } else {
            grid(n.div_ceil(16).max(1), forced.map_or(0, |f| f.2 as usize))
        };
        let bal_ok = regs != 3 || n.div_ceil(blocks as usize) <= PROJ_BAL_ROWS;
        if !res || ck > kmax || !matches!(rows, 0 | 16) || regs > 3 || smem > budget || !bal_ok {
            return Err(Error::Unsupported(format!(
                "projection plan with w in registers (regs = {regs}) at M={m}, K={k}, N={n}: needs regs = 1, 2 or 3, tiles of 16 rows, M <= 8, K <= {} and {smem} bytes of shared memory ({budget} available), and with regs = 3 at most {PROJ_BAL_ROWS} rows a block",
                kmax * 1024
            )));
        }
        // The multicast variant: clusters of two along x, each block with rows (it waits for
        // the other at its exit), and a's rows in two 16-byte-aligned halves.
        if cluster != 0
            && (!blocks.is_multiple_of(cluster) || !k.is_multiple_of(8 * cluster as usize))
        {
            return Err(Error::Unsupported(format!(
                "projection plan with the rows of a multicast (kpw = 2, regs = 3) at M={m}, K={k}, N={n}: needs K a multiple of {} and an even number of blocks ({blocks})",
                8 * cluster
            )));
        }
        return Ok(ProjPlan {
            kernel,
            kpw: 0,
            nst: 0,
            smem: smem as u32,
            blocks,
            cluster,
        });
    }
    let slot = |kpw: usize| (th + if res { 0 } else { ar }) * row(kpw);
    let avail = budget.saturating_sub(if res { a_res(ar) } else { 0 });
    let tiles = n.div_ceil(th).max(1);
    // A measured plan where there is one (falling back to the heuristic if it does not fit).
    let tuned = (forced.is_none() && sms == 132 && res)
        .then(|| {
            PROJ_TUNED_H200
                .iter()
                .find(|e| e.0 == (k, n) && (pdl || !e.2) && m <= e.3)
        })
        .flatten();
    if let Some(Ok(p)) = tuned.map(|e| projection_plan(m, k, n, sms, pdl, budget, Some(e.1))) {
        return Ok(p);
    }
    let (kpw, nst, tpb) = match forced {
        Some((kpw, nst, tpb, _, _)) if kpw != 0 || nst != 0 => {
            (kpw as usize, nst as usize, tpb as usize)
        }
        _ => {
            let widest = k.div_ceil(1024).clamp(1, PROJ_MAX_KPW);
            let kpw = (1..=widest)
                .rev()
                .find(|&kpw| avail / slot(kpw) >= 2)
                .unwrap_or(1);
            let tpb = forced.map_or(0, |f| f.2 as usize);
            (kpw, (avail / slot(kpw)).min(PROJ_MAX_SLOTS), tpb)
        }
    };
    if kpw == 0 || !(1..=PROJ_MAX_SLOTS).contains(&nst) || nst * slot(kpw) > avail {
        return Err(Error::Unsupported(format!(
            "projection plan kpw={kpw}, nst={nst} at M={m}, K={k}: needs 1 <= kpw, 1 <= nst <= {PROJ_MAX_SLOTS} and {} bytes of shared memory ({} available)",
            nst * slot(kpw.max(1)) + if res { a_res(ar) } else { 0 },
            budget
        )));
    }
    Ok(ProjPlan {
        kernel,
        kpw: kpw as u32,
        nst: nst as u32,
        smem: (nst * slot(kpw) + if res { a_res(ar) } else { 0 }) as u32,
        blocks: grid(tiles, tpb),
        cluster: 0,
    })
}

/// `MHC_PROJ_PLAN=kpw,nst[,tpb[,rows[,regs]]]`, if set (the engine reads it once, when it is
/// created).
pub fn projection_override() -> Result<Option<ProjOverride>> {
    Ok(env_numbers(
        "MHC_PROJ_PLAN",
        "kpw,nst[,tpb[,rows[,regs]]]",
        &[2, 3, 4, 5],
    )?
    .map(|v| {
        let at = |i: usize| v.get(i).copied().unwrap_or(0);
        (v[0], v[1], at(2), at(3), at(4))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_are_consistent() {
        let shape = KernelShape { nin: 4, nmix: 24 };
        let occ = |_w: u32, _s: u32| -> Result<u32> { Ok(2) };
        for t in [1, 2, 3, 7, 16, 33, 128, 1000, 16384] {
            for h in [4096, 5120, 7168] {
                let p = plan(shape, t, h, 132, &occ, None).unwrap();
                assert!(p.tt as usize <= MAXTT && p.tt >= 1);
                assert!(p.tiles as usize * p.tt as usize >= t);
                assert!(p.grid_y >= 1 && p.grid_y <= p.tiles);
                assert!(p.rpad >= p.nrec && p.rpad.is_power_of_two());
                // The tail's threads per row stay a multiple of 4.
                let rows_pad = (p.tt as usize).next_power_of_two();
                assert_eq!((p.warps as usize * 32 / rows_pad) % 4, 0);
                assert!(p.smem <= 227 * 1024, "{t} {h} {p:?}");
                // Two blocks per SM: 2 x (dynamic + ~2.2 KB static + 1 KB reserved) <= 228 KB.
                assert!(
                    2 * (p.smem as usize + 2200 + 1024) <= 228 * 1024,
                    "{t} {h} {p:?}"
                );
            }
        }
    }

    #[test]
    fn tail_parts_fill_the_multiprocessors_with_wide_slices() {
        for h in [4096u32, 5120, 7168, 512, 64] {
            for tiles in [
                1u32, 8, 12, 13, 19, 32, 63, 128, 129, 133, 188, 264, 265, 1024,
            ] {
                let n = tail_parts(tiles, h, 132);
                // At most 8, and 8 only while the tails' blocks stay within 3/4 of the SMs.
                assert!((1..=8).contains(&n), "{h} {tiles}: {n}");
                assert!(n <= 4 || 4 * tiles * n <= 3 * 132, "{h} {tiles}: {n}");
                // Each slice at least 64 vectors of 8 channels where H has them.
                assert!(n == 1 || h / 8 / n >= 64, "{h} {tiles}: {n}");
                // No more blocks than two a multiprocessor take at once, or two such waves
                // where one block a tile already takes more than one a multiprocessor.
                assert!(
                    n == 1 || tiles * n <= 2 * 132 || (tiles > 132 && n == 2),
                    "{h} {tiles}: {n}"
                );
                // Never one block a tile while the tiles fit two a multiprocessor (H wide enough).
                assert!(
                    n > 1 || tiles > 2 * 132 || h / 8 / 2 < 64,
                    "{h} {tiles}: {n}"
                );
            }
        }
        assert_eq!(tail_parts(8, 5120, 132), 8); // T = 128 at V4.1-Flash
        assert_eq!(tail_parts(12, 4096, 132), 8); // T = 192
        assert_eq!(tail_parts(13, 7168, 132), 4); // T = 208
        assert_eq!(tail_parts(8, 512, 132), 1); // H too narrow for two slices of 64 vectors
        assert_eq!(tail_parts(24, 5120, 132), 4); // T = 384: 96 blocks, within 3/4 of the SMs
        assert_eq!(tail_parts(28, 5120, 132), 3); // T = 448: 112 blocks with 4 parts, 84 with 3
        assert_eq!(tail_parts(32, 5120, 132), 3); // T = 512 at V4.1-Flash
        assert_eq!(tail_parts(32, 4096, 132), 3);
        assert_eq!(tail_parts(32, 7168, 132), 4); // 3 parts: 300 vectors a part, two a thread
        assert_eq!(tail_parts(39, 5120, 132), 3); // T = 624
        assert_eq!(tail_parts(40, 5120, 132), 4); // T = 640: 120 blocks with 3 parts
        assert_eq!(tail_parts(63, 5120, 132), 4); // T = 1001
        assert_eq!(tail_parts(128, 5120, 132), 2); // T = 2048
        assert_eq!(tail_parts(188, 5120, 132), 2); // T = 3000
        assert_eq!(tail_parts(264, 7168, 132), 2); // T = 4224
        assert_eq!(tail_parts(265, 4096, 132), 1); // T = 4240
        assert_eq!(tail_parts(1024, 5120, 132), 1); // T = 16384: one block a tile
    }

    #[test]
    fn two_launch_plans_start_where_asked_and_at_two_tiles() {
        let shape = KernelShape { nin: 4, nmix: 24 };
        let occ = |_w: u32, _s: u32| -> Result<u32> { Ok(2) };
        let at = |t, from| plan_split_from(shape, t, 5120, 132, &occ, None, from).unwrap();
        // The default: one launch up to ONE_LAUNCH_MAX_T.
        assert!(
            !plan(shape, ONE_LAUNCH_MAX_T, 5120, 132, &occ, None)
                .unwrap()
                .split
        );
        assert!(
            plan(shape, ONE_LAUNCH_MAX_T + 1, 5120, 132, &occ, None)
                .unwrap()
                .split
        );
        // From a smaller T: tiles of 16 and the tails in a second launch, the same plan as past
        // ONE_LAUNCH_MAX_T would be for that T; never one tile (T <= 16) in two launches.
        for (t, from, split) in [
            (100, 100, true),
            (99, 100, false),
            (17, 1, true),
            (16, 1, false),
        ] {
            let p = at(t, from);
            assert_eq!(p.split, split, "T={t} from {from}");
            if split {
                assert_eq!((p.tt, p.tiles), (16, t.div_ceil(16) as u32));
                assert_eq!(p, at(t, MIN_SPLIT_T));
                // Its stream variant: at most one block a two tiles.
                let s = stream_plan(shape, &p, 132, STREAM_MIN_TILES).unwrap();
                assert_eq!(s.grid_y, 6.min(p.tiles.div_ceil(2)), "T={t}");
            }
        }
    }

    /// `reserve_points` find the largest workspace any call of up to max_t tokens needs, under
    /// either split point (brute force over every T), at H where the one-launch tiles are 8
    /// tokens (more tiles than a two-launch plan of a larger T) and where they are 16.
    #[test]
    fn reserve_points_cover_every_smaller_t() {
        let occ = |_w: u32, _s: u32| -> Result<u32> { Ok(2) };
        let max3 = |a: (usize, usize, usize), b: (usize, usize, usize)| {
            (a.0.max(b.0), a.1.max(b.1), a.2.max(b.2))
        };
        for shape in [
            KernelShape { nin: 4, nmix: 24 },
            KernelShape { nin: 1, nmix: 24 },
            KernelShape { nin: 4, nmix: 0 },
        ] {
            for h in [256, 1024, 4096, 5120, 7168] {
                for sms in [16, 132] {
                    for max_t in [1, 16, 17, 100, 224, 225, 300, 433, 1000] {
                        let need = |t, from| {
                            let p = plan_split_from(shape, t, h, sms, &occ, None, from).unwrap();
                            workspace_need(shape, t, &p)
                        };
                        let both = |t| max3(need(t, ONE_LAUNCH_MAX_T + 1), need(t, MIN_SPLIT_T));
                        let all = (1..=max_t).map(both).fold((0, 0, 0), max3);
                        let at_points = reserve_points(max_t).map(both).fold((0, 0, 0), max3);
                        assert_eq!(at_points, all, "H={h} sms={sms} max_t={max_t} {shape:?}");
                    }
                }
            }
        }
        // The points the engine once used missed T = 224's counters (28 tiles of 8 at H = 1024)
        // when max_t = 300 (19 tiles of 16).
        let shape = KernelShape { nin: 4, nmix: 24 };
        let p224 = plan(shape, 224, 1024, 132, &occ, None).unwrap();
        let p300 = plan(shape, 300, 1024, 132, &occ, None).unwrap();
        assert!(p224.tiles > p300.tiles, "{p224:?} {p300:?}");
        assert!(reserve_points(300).any(|t| t == 224));
    }

    #[test]
    fn the_stream_launch_leads_the_clusters_where_it_takes_fewer_rounds() {
        // The H200's shapes: 132 SMs, seven clusters of 16 at once, tiles of 32 tokens fit the
        // cluster kernel at H = 4096 and 5120, not at 7168 (two waves of tiles of 16 there).
        let shape = KernelShape { nin: 4, nmix: 24 };
        let occ = |_w: u32, _s: u32| -> Result<u32> { Ok(2) };
        let leads = |h: usize, t: usize| {
            let p = plan_split_from(shape, t, h, 132, &occ, None, MIN_SPLIT_T).unwrap();
            let two = stream_plan(shape, &p, 132, STREAM_MIN_TILES).unwrap_or(p);
            let tiles16 = t.div_ceil(MAXTT) as u32;
            let (mt, waves) = if tiles16 <= 7 {
                (1, 1)
            } else if h == 7168 {
                (1, tiles16.div_ceil(7))
            } else {
                (2, 1)
            };
            stream_ahead_of_clusters(&two, mt, waves)
        };
        // One wave of tiles of 16: the clusters.
        for h in [4096, 5120, 7168] {
            for t in [17, 64, 100, 112] {
                assert!(!leads(h, t), "H={h} T={t}");
            }
        }
        // H = 5120: 12 halves, one round up to 12 tiles (T = 192); two rounds lose to one wave of
        // tiles of 32.
        for t in [113, 128, 176, 192] {
            assert!(leads(5120, t), "T={t}");
        }
        for t in [193, 208, 224] {
            assert!(!leads(5120, t), "T={t}");
        }
        // H = 4096: 16 halves, one round up to T = 256.
        for t in [113, 128, 176, 224] {
            assert!(leads(4096, t), "T={t}");
        }
        // H = 7168: 8 halves, two rounds up to T = 256 against two waves of clusters.
        for t in [113, 128, 129, 176, 224] {
            assert!(leads(7168, t), "T={t}");
        }
        // Not where the tiles launch is not the stream variant.
        let p = plan_split_from(shape, 128, 5120, 132, &occ, None, MIN_SPLIT_T).unwrap();
        assert!(!p.stream && !stream_ahead_of_clusters(&p, 2, 1));
        let sp = stream_plan(shape, &p, 132, STREAM_MIN_TILES).unwrap();
        assert_eq!(stream_rounds(&sp), 1);
        assert_eq!(
            stream_rounds(
                &stream_plan(
                    shape,
                    &plan_split_from(shape, 400, 5120, 132, &occ, None, MIN_SPLIT_T).unwrap(),
                    132,
                    STREAM_MIN_TILES
                )
                .unwrap()
            ),
            3
        );
    }

    #[test]
    fn stream_plans_fit_and_keep_the_tiles_shape() {
        let shape = KernelShape { nin: 4, nmix: 24 };
        let occ = |_w: u32, _s: u32| -> Result<u32> { Ok(2) };
        for h in [4096, 5120, 7168] {
            for t in [257, 300, 497, 1000, 2053, 16384] {
                let p = plan(shape, t, h, 132, &occ, None).unwrap();
                let Some(s) = stream_plan(shape, &p, 132, STREAM_MIN_TILES) else {
                    // Only below the fewest tiles.
                    assert!(p.tiles < STREAM_MIN_TILES, "{t} {h} {p:?}");
                    continue;
                };
                // The tails launch and the records keep the tile plan's shape.
                assert_eq!(
                    (s.w, s.tt, s.tiles, s.nrec, s.split),
                    (p.w, p.tt, p.tiles, p.nrec, true)
                );
                assert_eq!(s.warps, 16);
                // One block a multiprocessor, all resident, every block with a tile.
                assert!(s.nrec * s.grid_y <= 132 && s.tiles > 2 * (s.grid_y - 1));
                assert_eq!(s.grid_y, (132 / s.nrec).min(s.tiles.div_ceil(2)), "{t} {h}");
                assert!(s.tiles >= STREAM_MIN_TILES);
                // A higher minimum (MHC_STREAM_MIN_TILES) keeps the tile kernel below it.
                let min128 = stream_plan(shape, &p, 132, 128);
                assert_eq!(min128.is_some(), p.tiles >= 128, "{t} {h}");
                // Within the opt-in limit (227 KB), the kernel having no static shared memory.
                assert!(s.smem as usize <= 227 * 1024, "{t} {h} {s:?}");
            }
        }
        assert!(
            stream_plan(
                shape,
                &plan(shape, 16384, 5120, 132, &occ, None).unwrap(),
                132,
                128
            )
            .is_some()
        );
        // Not the entry seam, not the gates-free ops, not a one-launch plan.
        let entry = KernelShape { nin: 1, nmix: 24 };
        let p = plan(entry, 16384, 5120, 132, &occ, None).unwrap();
        assert!(stream_plan(entry, &p, 132, STREAM_MIN_TILES).is_none());
        let p = plan(shape, 200, 5120, 132, &occ, None).unwrap();
        assert!(stream_plan(shape, &p, 132, STREAM_MIN_TILES).is_none());
        // A lower minimum (MHC_STREAM_MIN_TILES): at H = 5120 six blocks of two halves along the
        // tiles (20 groups of chunks), fewer only where the tiles do not fill them (one a half).
        let at = |t, min| {
            stream_plan(
                shape,
                &plan(shape, t, 5120, 132, &occ, None).unwrap(),
                132,
                min,
            )
            .map(|s| (s.tiles, s.grid_y))
        };
        assert_eq!(at(384, 24), Some((24, 6)));
        assert_eq!(at(368, 24), None);
        assert_eq!(at(368, 1), Some((23, 6)));
        assert_eq!(at(257, 1), Some((17, 6)));
        assert_eq!(at(160, 1), None); // one launch: no tails launch to finish the tiles
        // Fewer SMs (MHC_STREAM_SMS): fewer blocks along the tiles, at least one a group.
        let p = plan(shape, 1001, 5120, 132, &occ, None).unwrap();
        let gy = |sms| stream_plan(shape, &p, sms, 1).map(|s| s.grid_y);
        assert_eq!(
            [132, 100, 40, 21, 1].map(gy),
            [Some(6), Some(5), Some(2), Some(1), Some(1)]
        );
    }

    #[test]
    fn prepared_fn_holds_every_weight_exactly_once() {
        // Distinct weights, with signs, tiny, huge and exactly-bf16 values among them.
        let (nin, h) = (4, 64);
        let fn_: Vec<f32> = (0..24 * nin * h)
            .map(|i| {
                let x = (i as f32 + 1.0) * 1.000_123_4 * if i % 3 == 0 { -1.0 } else { 1.0 };
                match i % 7 {
                    0 => x * 1e-30,
                    1 => x * 1e20,
                    2 => 1.5 * (i as f32).signum(),
                    _ => x,
                }
            })
            .collect();
        let s = fn_split_reference(&fn_, nin, h);
        assert_eq!(s.len(), fn_split_words(nin, h));
        assert_eq!(s.len(), fn_.len());
        let mut seen = vec![0u32; fn_.len()];
        for (idx, &w) in s.iter().enumerate() {
            let at = fn_split_source(idx, nin, h).expect("H is a multiple of 32: no padding");
            assert_eq!(w, fn_[at].to_bits());
            seen[at] += 1;
        }
        // A permutation: every weight exactly once, bit for bit.
        assert!(seen.iter().all(|&n| n == 1));
    }

    #[test]
    fn cluster_plans_fit() {
        // The dynamic limit beside the cluster kernel's ~5.4 KB of static shared memory.
        let budget = 227 * 1024 - 5500;
        let gates = KernelShape { nin: 4, nmix: 24 };
        let entry = KernelShape { nin: 1, nmix: 24 };
        for shape in [gates, entry] {
            for h in [1024, 4096, 5120, 7168] {
                for t in [1, 2, 7, 16, 17, 100, 128, 300] {
                    for cl in [16, 15, 12, 8] {
                        let chunks = h / CHUNK;
                        let Some(p) = cluster_plan(shape, t, h, cl, budget, false, 1, 0) else {
                            // Only where a block would need more than 15 chunk warps, or (15
                            // warps of fn and the leaves of two rows) more shared memory.
                            assert!(
                                chunks.div_ceil(cl as usize) + 1 > CL_WARPS as usize
                                    || (shape.nin, h, cl) == (4, 7168, 15) && t > 8,
                                "{h} {t} {cl}"
                            );
                            continue;
                        };
                        assert_eq!(p.cluster, cl);
                        assert_eq!(p.nrec, cl);
                        // Every chunk has a warp.
                        assert!(p.w as usize * cl as usize >= chunks);
                        assert_eq!(p.warps, p.w + 1);
                        assert!(p.warps <= CL_WARPS);
                        assert!(p.tt as usize <= MAXTT && p.tiles as usize * p.tt as usize >= t);
                        assert!(p.smem <= budget, "{h} {t} {cl} {p:?}");
                        assert!(!p.split);
                    }
                }
            }
        }
        // No cluster kernel for the head (4 mixes), too few chunks for a tree group, or a
        // cluster of 1 or more than 16 blocks.
        assert!(
            cluster_plan(
                KernelShape { nin: 4, nmix: 4 },
                1,
                5120,
                16,
                budget,
                false,
                1,
                0
            )
            .is_none()
        );
        assert!(cluster_plan(gates, 1, 256, 16, budget, false, 1, 0).is_none());
        assert!(cluster_plan(gates, 1, 5120, 1, budget, false, 1, 0).is_none());
        assert!(cluster_plan(gates, 1, 5120, 32, budget, false, 1, 0).is_none());
        // The H200's sizes: 16 blocks of 8, 10 and 14 chunk warps.
        for (h, w) in [(4096, 8), (5120, 10), (7168, 14)] {
            assert_eq!(
                cluster_plan(gates, 1, h, 16, budget, false, 1, 0)
                    .unwrap()
                    .w,
                w
            );
        }
        // Prepared fn (12 KB a chunk warp, fn's own bytes): fits wherever the plain kernel does,
        // at H = 7168 (14 warps) and in clusters of 12 at 5120 (14 warps) too.
        for t in [1, 16, 100] {
            for (h, cl, fits) in [
                (4096, 16, true),
                (5120, 16, true),
                (7168, 16, true),
                (5120, 12, true),
            ] {
                let p = cluster_plan(gates, t, h, cl, budget, true, 1, 0);
                assert_eq!(p.is_some(), fits, "{h} {cl} {t}");
                if let Some(p) = p {
                    assert!(p.prepared && p.smem <= budget);
                    assert!(p.smem as usize >= p.w as usize * 4 * FN_SPLIT_STREAM_BYTES);
                }
            }
        }
        assert_eq!(fn_split_words(4, 5120), 160 * 4 * 6 * 32 * 4);
        assert_eq!(fn_split_words(4, 5120), 24 * 4 * 5120);
        // Tiles of 32 tokens: clusters of 16 blocks of at most 10 chunk warps (H <= 5120), both
        // with prepared fn and without; never other cluster sizes, nor 3 groups of 16 rows. The
        // dynamic limit beside this variant's ~5.5 KB of static shared memory.
        let budget = 227 * 1024 - 5650;
        for prepared in [false, true] {
            for (h, fits) in [(4096, true), (5120, true), (5632, false), (7168, false)] {
                for t in [1, 16, 17, 113, 224, 300] {
                    let p = cluster_plan(gates, t, h, 16, budget, prepared, 2, 0);
                    assert_eq!(p.is_some(), fits, "{h} {t} {prepared}");
                    if let Some(p) = p {
                        assert_eq!(p.mtiles, 2);
                        assert_eq!(p.tt as usize, t.min(2 * MAXTT));
                        assert_eq!(p.tiles as usize, t.div_ceil(2 * MAXTT));
                        assert!(p.warps <= CL_WARPS2 && p.smem <= budget, "{h} {t} {p:?}");
                    }
                }
            }
            assert!(cluster_plan(gates, 128, 5120, 12, budget, prepared, 2, 0).is_none());
            assert!(cluster_plan(gates, 128, 5120, 16, budget, prepared, 3, 0).is_none());
        }
    }

    /// Presplit fn (attempt 158) takes what shared memory is left, never more than the budget nor
    /// more chunks than the block has, and only in prepared plans of tiles of 16.
    #[test]
    fn presplit_chunks_fit_the_budget() {
        let gates = KernelShape { nin: 4, nmix: 24 };
        let budget = 227 * 1024 - 5500;
        let chunk = (4 * FN_SPLIT_STREAM_BYTES) as u32;
        // The H200 at T = 1, 16 and 64 in clusters of 16: 8 of 8 chunk warps at H = 4096, 6 of 10
        // at 5120, 2 of 14 at 7168.
        for t in [1, 6, 16] {
            for (h, n) in [(4096, 8), (5120, 6), (7168, 2)] {
                let p = cluster_plan(gates, t, h, 16, budget, true, 1, 0).unwrap();
                let q = with_presplit(gates, p, budget, u32::MAX);
                assert_eq!(q.presplit, n, "H={h} T={t}");
                assert_eq!(q.smem, p.smem + n * chunk);
                assert!(q.smem <= budget && q.presplit <= q.w);
                assert!(
                    n == q.w || q.smem + chunk > budget,
                    "H={h}: room for one more"
                );
                assert_eq!(
                    SeamPlan {
                        presplit: 0,
                        smem: p.smem,
                        ..q
                    },
                    p
                );
            }
        }
        // Not without prepared fn, nor in tiles of 32, nor in the tile kernel.
        let p = cluster_plan(gates, 1, 5120, 16, budget, false, 1, 0).unwrap();
        assert_eq!(with_presplit(gates, p, budget, u32::MAX), p);
        let p = cluster_plan(gates, 100, 4096, 16, budget, true, 2, 0).unwrap();
        assert_eq!(with_presplit(gates, p, budget, u32::MAX), p);
        // No room: none.
        let p = cluster_plan(gates, 1, 5120, 16, budget, true, 1, 0).unwrap();
        assert_eq!(
            with_presplit(gates, p, p.smem + chunk - 1, u32::MAX).presplit,
            0
        );
        assert_eq!(with_presplit(gates, p, p.smem - 1, u32::MAX).presplit, 0);
    }

    #[test]
    fn small_tiles_follow_the_measured_rule() {
        let tt = |t| small_tile_tokens(t, 7, true);
        assert_eq!([tt(1), tt(2), tt(3)], [Some(1); 3]);
        assert_eq!([tt(4), tt(5), tt(6)], [Some(2); 3]);
        assert_eq!([tt(7), tt(12)], [Some(4); 2]);
        // Past tiles of 4 on three clusters: three clusters of ceil(T / 3) tokens, up to 16.
        assert_eq!(
            [tt(13), tt(16), tt(28), tt(48)],
            [Some(5), Some(6), Some(10), Some(16)]
        );
        assert_eq!(tt(49), None);
        // Fewer clusters where fewer run at once.
        assert_eq!(small_tile_tokens(4, 2, true), Some(2));
        assert_eq!(small_tile_tokens(16, 2, true), Some(8));
        assert_eq!(small_tile_tokens(33, 2, true), None);
        assert_eq!(small_tile_tokens(3, 1, true), Some(4));
        assert_eq!(small_tile_tokens(17, 1, true), None);
        // Without lanes by channels: one tile up to 8 tokens, then the fewest clusters (at most
        // three) that keep tiles at 8, then three up to 16.
        let mma = |t| small_tile_tokens(t, 7, false);
        assert_eq!([mma(1), mma(8)], [None, None]);
        assert_eq!([mma(9), mma(16)], [Some(5), Some(8)]);
        assert_eq!([mma(17), mma(24)], [Some(6), Some(8)]);
        assert_eq!([mma(25), mma(48), mma(49)], [Some(9), Some(16), None]);
        assert_eq!(small_tile_tokens(16, 1, false), None);
        assert_eq!(small_tile_tokens(24, 2, false), Some(12));
    }

    #[test]
    fn register_tiles_of_8_rows() {
        let budget = 227 * 1024 - 4200;
        let pp =
            |m, k, n, tpb| projection_plan(m, k, n, 132, true, budget, Some((0, 0, tpb, 0, 6)));
        for (k, n, tpb, kernel, blocks) in [
            (4096, 1024, 0, "mhc_projection_rr8_c4", 128),
            (4096, 2560, 0, "mhc_projection_rr8_c4", 264),
            (4096, 2560, 1, "mhc_projection_rr8_c4", 320),
            (5120, 2048, 2, "mhc_projection_rr8_c5", 128),
            (7168, 2048, 0, "mhc_projection_rr8_c7", 132),
            (1032, 33, 0, "mhc_projection_rr8_c4", 5),
        ] {
            let p = pp(4, k, n, tpb).unwrap();
            assert_eq!(
                (p.kernel, p.blocks, p.smem),
                (kernel, blocks, 4 * 2 * k as u32),
                "{k} {n} {tpb}"
            );
        }
        // Refused by name: K past 7168, M past 8, tiles of 16 rows.
        assert!(
            pp(1, 8192, 1024, 0)
                .unwrap_err()
                .to_string()
                .contains("tiles of 8 rows in registers")
        );
        assert!(
            pp(9, 4096, 1024, 0)
                .unwrap_err()
                .to_string()
                .contains("tiles of 8 rows in registers")
        );
        let e = projection_plan(1, 4096, 1024, 132, true, budget, Some((0, 0, 0, 16, 6)));
        assert!(
            e.unwrap_err()
                .to_string()
                .contains("tiles of 8 rows in registers")
        );
    }

    #[test]
    fn projection_plans_fit() {
        let budget = 227 * 1024 - 4200;
        for m in [1, 3, 4, 5, 8, 9, 16, 17, 100] {
            for k in [8, 1000, 4096, 4104, 5120, 7168, 16384, 65536] {
                let p = projection_plan(m, k, 2560, 132, true, budget, None).unwrap();
                assert!(p.smem as usize <= budget, "{m} {k} {p:?}");
                // A ring of two slots or more, unless w is in registers (the table's choice at
                // K = 4096, 5120 and 7168, M <= 8).
                let regs = p.kernel.starts_with("mhc_projection_r");
                let table_m = 8;
                assert!(
                    regs && m <= table_m && (k == 4096 || k == 5120 || k == 7168)
                        || (2..=8).contains(&p.nst) && p.kpw >= 1,
                    "{m} {k} {p:?}"
                );
                if regs && k == 5120 {
                    // The rows dealt evenly, the last warp waiting first: 19 or 20 a block on 132
                    // SMs.
                    assert_eq!((p.kernel, p.blocks), ("mhc_projection_rrb_c5_aw", 132));
                }
                // Rows of a up to 16 in the 16-row variant, to 4 or 8 in the resident ones.
                let rows = match p.kernel {
                    "mhc_projection_m4" | "mhc_projection_w16_m4" => 4,
                    "mhc_projection_m8" | "mhc_projection_w16_m8" => 8,
                    _ if regs => 8,
                    _ => 16,
                };
                assert!(m.min(16) <= rows, "{m} {k} {p:?}");
            }
        }
        // The heuristic keeps a resident at the decode shapes and streams w in copies of 8 KB or
        // more (N = 3000: no measured entry).
        for k in [4096, 5120, 7168] {
            let p = projection_plan(4, k, 3000, 132, true, budget, None).unwrap();
            assert_eq!(p.kernel, "mhc_projection_m4");
            assert!(p.kpw >= 4 && p.nst >= 2, "{k} {p:?}");
        }
        // Very long rows of a no longer fit beside the ring: they travel with the stages.
        assert_eq!(
            projection_plan(2, 65536, 2560, 132, true, budget, None)
                .unwrap()
                .kernel,
            "mhc_projection_m16"
        );
        // A forced plan that does not fit is an error, not a silent change.
        let pp = |m, k, n, f| projection_plan(m, k, n, 132, true, budget, f);
        // The rows dealt evenly: at most 20 a block, and at K = 7168 with M <= 4 only.
        assert!(pp(1, 4096, 2640, Some((0, 0, 0, 0, 3))).is_ok());
        assert!(pp(1, 4096, 2641, Some((0, 0, 0, 0, 3))).is_err());
        assert!(pp(4, 7168, 2560, Some((0, 0, 0, 0, 3))).is_ok());
        assert!(pp(5, 7168, 2560, Some((0, 0, 0, 0, 3))).is_err());
        assert!(pp(1, 4096, 2560, Some((8, 8, 0, 0, 0))).is_err());
        assert!(pp(1, 4096, 2560, Some((1, 0, 0, 0, 0))).is_err());
        assert!(pp(1, 4096, 2560, Some((0, 1, 0, 0, 0))).is_err());
        assert_eq!(pp(1, 4096, 2560, Some((1, 4, 0, 0, 0))).unwrap().nst, 4);
        // The grid: one block per SM at most by default; ceil(tiles / tpb) when forced.
        assert_eq!(pp(5, 7168, 2560, None).unwrap().blocks, 132);
        assert_eq!(pp(1, 4096, 1000, None).unwrap().blocks, 125);
        assert_eq!(
            pp(1, 4096, 2560, Some((0, 0, 2, 0, 0))).unwrap().blocks,
            160
        );
        assert_eq!(
            pp(1, 4096, 2560, Some((2, 2, 1, 0, 0))).unwrap().blocks,
            320
        );
        assert_eq!(
            pp(5, 7168, 3000, Some((0, 0, 2, 0, 0))).unwrap().kpw,
            pp(5, 7168, 3000, None).unwrap().kpw
        );
        // Tiles of 16 rows: the W16 variants, for resident rows of a only; other sizes refused.
        let p = pp(1, 4096, 1024, Some((0, 0, 0, 16, 0))).unwrap();
        assert_eq!((p.kernel, p.blocks), ("mhc_projection_w16_m4", 64));
        assert_eq!(
            pp(5, 4096, 1000, Some((0, 0, 0, 16, 0))).unwrap().kernel,
            "mhc_projection_w16_m8"
        );
        assert_eq!(
            pp(1, 4096, 2560, Some((1, 2, 1, 16, 0))).unwrap().blocks,
            160
        );
        assert!(pp(9, 4096, 1024, Some((0, 0, 0, 16, 0))).is_err());
        assert!(pp(1, 4096, 1024, Some((0, 0, 0, 12, 0))).is_err());
        assert_eq!(
            pp(1, 4096, 1024, Some((0, 0, 0, 8, 0))).unwrap(),
            pp(1, 4096, 1024, Some((0, 0, 0, 0, 0))).unwrap()
        );
        // The measured table applies on 132 SMs up to its M: the first entry for (K, N) that
        // applies (PDL-only entries need PDL), else the heuristic; every entry fits.
        for ((k, n), _, _, _) in PROJ_TUNED_H200 {
            for pdl in [true, false] {
                for m in 1..=8 {
                    let entry = PROJ_TUNED_H200
                        .iter()
                        .find(|e| e.0 == (k, n) && (pdl || !e.2) && m <= e.3)
                        .map_or((0, 0, 0, 0, 0), |e| e.1);
                    let got = projection_plan(m, k, n, 132, pdl, budget, None).unwrap();
                    let want = projection_plan(m, k, n, 132, pdl, budget, Some(entry)).unwrap();
                    assert_eq!(got, want, "{k} {n} {m} {pdl}");
                }
            }
            let heuristic = |m, sms| {
                projection_plan(m, k, n, sms, true, budget, Some((0, 0, 0, 0, 0))).unwrap()
            };
            let other = projection_plan(1, k, n, 114, true, budget, None).unwrap();
            assert_eq!(other, heuristic(1, 114));
            assert_eq!(pp(9, k, n, None).unwrap(), heuristic(9, 132));
        }
        // w in registers: tiles of 16 rows, the variant by K, a's rows in shared memory (and at
        // K = 7168 two k-blocks a warp); refused past K = 7168, past M = 8 and with tiles of 8 rows.
        let p = pp(3, 4096, 1024, Some((0, 0, 0, 0, 1))).unwrap();
        assert_eq!(
            (p.kernel, p.blocks, p.smem),
            ("mhc_projection_rr_c4", 64, 4 * 2 * 4096)
        );
        // kpw = 1: every load of w tested (rr1_c4), at K <= 4096 only.
        let p = pp(3, 4096, 1024, Some((1, 0, 0, 0, 1))).unwrap();
        assert_eq!((p.kernel, p.blocks), ("mhc_projection_rr1_c4", 64));
        let p = pp(3, 5120, 1024, Some((1, 0, 0, 0, 1))).unwrap();
        assert_eq!(p.kernel, "mhc_projection_rr_c5");
        let p = pp(5, 5120, 2048, Some((0, 0, 2, 16, 1))).unwrap();
        assert_eq!(
            (p.kernel, p.blocks, p.smem),
            ("mhc_projection_rr_c5", 64, 8 * 2 * 5120)
        );
        let p = pp(1, 7168, 1024, Some((0, 0, 0, 0, 1))).unwrap();
        assert_eq!(
            (p.kernel, p.smem),
            ("mhc_projection_rr_c7", 4 * 2 * 7168 + 65536)
        );
        assert!(pp(1, 7176, 1024, Some((0, 0, 0, 0, 1))).is_err());
        let p = pp(4, 4096, 2048, Some((0, 0, 2, 0, 2))).unwrap();
        assert_eq!(
            (p.kernel, p.blocks, p.smem),
            ("mhc_projection_rr2_c4", 64, 4 * 2 * 4096 + 131072)
        );
        let p = pp(1, 5120, 2560, Some((0, 0, 0, 16, 2))).unwrap();
        assert_eq!((p.kernel, p.blocks), ("mhc_projection_rr2_c5", 132));
        // 8 rows of a beside a 160 KB tile do not fit; nor does a second tile at K = 7168.
        assert!(pp(5, 5120, 2560, Some((0, 0, 0, 0, 2))).is_err());
        assert!(pp(1, 7168, 2048, Some((0, 0, 0, 0, 2))).is_err());
        let p = pp(1, 4096, 1024, Some((0, 0, 0, 0, 3))).unwrap();
        assert_eq!(
            (p.kernel, p.blocks, p.cluster),
            ("mhc_projection_rrb_c4", 64, 0)
        );
        assert!(pp(1, 4096, 1024, Some((0, 0, 0, 0, 5))).is_err());
        // kpw = 2 with regs = 3: a multicast over clusters of two, at 4096 < K <= 5120 only, K a
        // multiple of 16 and an even number of blocks.
        let p = pp(3, 5120, 1024, Some((2, 0, 0, 0, 3))).unwrap();
        assert_eq!(
            (p.kernel, p.blocks, p.cluster, p.smem),
            ("mhc_projection_rrb_c5_mc2", 64, 2, 4 * 2 * 5120 + 5 * 8192)
        );
        assert_eq!(pp(1, 5120, 2560, Some((2, 0, 0, 0, 3))).unwrap().cluster, 2);
        assert_eq!(pp(1, 4096, 1024, Some((2, 0, 0, 0, 3))).unwrap().cluster, 0);
        assert!(pp(1, 5112, 1024, Some((2, 0, 0, 0, 3))).is_err());
        // kpw = 7: the multicast with the last warp's share of w copied by the others, the same
        // needs, up to K = 5120.
        let p = pp(3, 5120, 1024, Some((7, 0, 0, 0, 3))).unwrap();
        assert_eq!(
            (p.kernel, p.blocks, p.cluster, p.smem),
            (
                "mhc_projection_rrb_c5_as_mc2",
                64,
                2,
                4 * 2 * 5120 + 5 * 8192 + 5 * 4096
            )
        );
        assert!(pp(1, 5112, 1024, Some((7, 0, 0, 0, 3))).is_err());
        assert_eq!(
            pp(1, 4096, 1024, Some((7, 0, 0, 0, 3))).unwrap().kernel,
            "mhc_projection_rrb_c4_as_mc2"
        );
        assert!(pp(1, 7168, 1024, Some((7, 0, 0, 0, 3))).is_err());
        assert!(pp(1, 5120, 1000, Some((2, 0, 0, 0, 3))).is_err());
        // kpw = 3 with regs = 3: the compact rows first, past K = 5120 only (M <= 4 there).
        let p = pp(4, 7168, 2560, Some((3, 0, 0, 0, 3))).unwrap();
        assert_eq!(
            (p.kernel, p.blocks, p.cluster, p.smem),
            (
                "mhc_projection_rrb_c7_xf",
                132,
                0,
                4 * 2 * 7168 + 65536 + 7 * 8192
            )
        );
        assert_eq!(
            pp(4, 5120, 2560, Some((3, 0, 0, 0, 3))).unwrap().kernel,
            "mhc_projection_rrb_c5"
        );
        assert!(pp(5, 7168, 2560, Some((3, 0, 0, 0, 3))).is_err());
        // kpw = 5 with regs = 3: the last warp waits and copies a first (every K up to 7168, the
        // compact rows first past 5120); kpw = 6: the other warps copy its share of w, K <= 5120.
        for (k, kernel) in [
            (4096, "mhc_projection_rrb_c4_aw"),
            (5120, "mhc_projection_rrb_c5_aw"),
            (7168, "mhc_projection_rrb_c7_xf_aw"),
        ] {
            let p = pp(4, k, 2560, Some((5, 0, 0, 0, 3))).unwrap();
            assert_eq!((p.kernel, p.blocks, p.cluster), (kernel, 132, 0), "{k}");
        }
        let p = pp(4, 5120, 2048, Some((6, 0, 0, 0, 3))).unwrap();
        assert_eq!(
            (p.kernel, p.blocks, p.smem),
            (
                "mhc_projection_rrb_c5_as",
                128,
                4 * 2 * 5120 + 5 * 8192 + 5 * 4096
            )
        );
        assert_eq!(
            pp(1, 4096, 1000, Some((6, 0, 0, 0, 3))).unwrap().kernel,
            "mhc_projection_rrb_c4_as"
        );
        let err = pp(1, 7168, 2048, Some((6, 0, 0, 0, 3))).unwrap_err();
        assert!(err.to_string().contains("kpw = 6"), "{err}");
        // w streamed through registers: one tile a block (or tpb), any K, M <= 8.
        let p = pp(4, 7168, 2560, Some((0, 0, 0, 0, 4))).unwrap();
        assert_eq!(
            (p.kernel, p.blocks, p.smem),
            ("mhc_projection_rs2", 160, 4 * 2 * 7168)
        );
        let p = pp(1, 9000, 2500, Some((0, 0, 2, 16, 4))).unwrap();
        assert_eq!((p.kernel, p.blocks), ("mhc_projection_rs2", 79));
        assert!(pp(9, 4096, 1024, Some((0, 0, 0, 0, 4))).is_err());
        assert!(pp(1, 4096, 1024, Some((0, 0, 0, 8, 4))).is_err());
        assert!(pp(9, 4096, 1024, Some((0, 0, 0, 0, 1))).is_err());
        assert!(pp(1, 4096, 1024, Some((0, 0, 0, 8, 1))).is_err());
        // The table with PDL: the rows dealt evenly at K = 4096 and 5120, M <= 8 (at N = 2048
        // with the last warp's share of w copied by the others; at 4096 x 1024, M <= 8, and at
        // 5120 x 1024, M <= 4, that and a's rows multicast; at 5120 x 2560 and at 4096 x 2560
        // from M = 5 with the last warp waiting first); past M = 8 and without PDL the
        // heuristic's ring or w in registers; at K = 7168, N = 2560 the rows dealt evenly with
        // the compact rows first and the last warp waiting first, at M <= 4.
        for (m, k, n, kernel, blocks) in [
            (1, 4096, 1024, "mhc_projection_rrb_c4_as_mc2", 64),
            (3, 4096, 1024, "mhc_projection_rrb_c4_as_mc2", 64),
            (8, 4096, 1024, "mhc_projection_rrb_c4_as_mc2", 64),
            (1, 4096, 2560, "mhc_projection_rrb_c4", 132),
            (4, 4096, 2560, "mhc_projection_rrb_c4", 132),
            (5, 4096, 2560, "mhc_projection_rrb_c4_aw", 132),
            (8, 4096, 2560, "mhc_projection_rrb_c4_aw", 132),
            (4, 4096, 2048, "mhc_projection_rrb_c4_as", 128),
            (8, 4096, 2048, "mhc_projection_rrb_c4_as", 128),
            (1, 5120, 2560, "mhc_projection_rrb_c5_aw", 132),
            (8, 5120, 2560, "mhc_projection_rrb_c5_aw", 132),
            (1, 5120, 2048, "mhc_projection_rrb_c5_as", 128),
            (8, 5120, 2048, "mhc_projection_rrb_c5_as", 128),
            (8, 5120, 1024, "mhc_projection_rrb_c5", 64),
            (1, 5120, 1024, "mhc_projection_rrb_c5_as_mc2", 64),
            (2, 5120, 1024, "mhc_projection_rrb_c5_as_mc2", 64),
            (3, 5120, 1024, "mhc_projection_rrb_c5_as_mc2", 64),
            (4, 5120, 1024, "mhc_projection_rrb_c5_as_mc2", 64),
            (1, 7168, 2560, "mhc_projection_rrb_c7_xf_aw", 132),
            (4, 7168, 2560, "mhc_projection_rrb_c7_xf_aw", 132),
        ] {
            let p = pp(m, k, n, None).unwrap();
            assert_eq!((p.kernel, p.blocks), (kernel, blocks), "{m} {k} {n}");
            assert_eq!(p.cluster, if kernel.ends_with("_mc2") { 2 } else { 0 });
        }
        let p = projection_plan(2, 4096, 1024, 132, false, budget, None).unwrap();
        assert_eq!((p.kernel, p.blocks), ("mhc_projection_rr_c4", 64));
        let p = pp(9, 4096, 2560, None).unwrap();
        assert_eq!(p.kernel, "mhc_projection_m16");
        let p = projection_plan(1, 4096, 2560, 132, false, budget, None).unwrap();
        assert_eq!((p.kpw, p.nst, p.blocks), (2, 2, 160));
        let p = projection_plan(4, 4096, 1024, 132, false, budget, None).unwrap();
        assert_eq!(p.kernel, "mhc_projection_rr_c4");
        // Past M = 4 at 7168 x 2560: tiles of 8 rows in registers with PDL, the ring without.
        let p = pp(5, 7168, 2560, None).unwrap();
        assert_eq!(p.kernel, "mhc_projection_rr8_c7");
        let p = pp(8, 7168, 2560, None).unwrap();
        assert_eq!(p.kernel, "mhc_projection_rr8_c7");
        let p = projection_plan(5, 7168, 2560, 132, false, budget, None).unwrap();
        assert_eq!(p.kernel, "mhc_projection_m8");
        let p = projection_plan(4, 7168, 2560, 132, false, budget, None).unwrap();
        assert_eq!(p.kernel, "mhc_projection_m4");
        let p = projection_plan(4, 4096, 2560, 132, false, budget, None).unwrap();
        assert_eq!((p.kpw, p.nst, p.blocks), (2, 2, 160));
        let p = pp(9, 5120, 2560, None).unwrap();
        assert_eq!(p.kernel, "mhc_projection_m16");
        let p = projection_plan(4, 5120, 2560, 132, false, budget, None).unwrap();
        assert_eq!((p.kernel, p.kpw, p.nst), ("mhc_projection_m4", 2, 2));
        let p = projection_plan(4, 5120, 2048, 132, false, budget, None).unwrap();
        assert_eq!((p.kernel, p.blocks), ("mhc_projection_rr_c5", 128));
    }
}
