//! GPU timing: the copy-bandwidth yardstick, the graph-captured seam chain (fused and unfused),
//! eager calls, and the compressor projection against cuBLAS.

use super::{BenchRow, median_spread, seam_bytes};
use crate::cuda::{Coeffs, CudaEngine, DeviceBuffer, DeviceSeamWeights, PathChoice, SeamBuffers};
use crate::error::{Error, Result};
use crate::spec::Config;
use crate::weights::SeamWeights;
use cudarc::driver::sys;
use half::bf16;
use indicatif::ProgressBar;
use rand::SeedableRng;
use rand_distr::Distribution;

/// Knobs of a GPU benchmark run.
#[derive(Clone, Debug)]
pub struct GpuBenchOptions {
    /// Seams in the captured chain (40).
    pub seams: usize,
    /// Timing rounds (>= 5).
    pub rounds: usize,
    /// Replays per round (>= 20 for the fused path).
    pub reps: usize,
    /// Also time the unfused baseline.
    pub baseline: bool,
    /// Also time eager (uncaptured) calls.
    pub eager: bool,
    /// Seconds a configuration may spend on timed replays before replays per round are reduced
    /// (the slow baseline at large T); never fewer than 2 per round.
    pub budget_s: f64,
    /// Programmatic dependent launch settings to time the fused kernels with (one row each).
    pub pdl: Vec<bool>,
}

impl Default for GpuBenchOptions {
    fn default() -> Self {
        GpuBenchOptions {
            seams: 40,
            rounds: 5,
            reps: 20,
            baseline: true,
            eager: true,
            budget_s: 3.0,
            pdl: vec![false, true],
        }
    }
}

/// Random bf16 values (N(0, std)) filling `len` elements: 4 Mi fresh values, tiled.
pub fn random_bf16(len: usize, std: f32, seed: u64) -> Vec<bf16> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let d = crate::weights::normal(0.0, std);
    let block: Vec<bf16> = (0..len.min(1 << 22))
        .map(|_| bf16::from_f32(d.sample(&mut rng)))
        .collect();
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        let take = (len - v.len()).min(block.len());
        v.extend_from_slice(&block[..take]);
    }
    v
}

struct Events {
    pairs: Vec<(cudarc::driver::CudaEvent, cudarc::driver::CudaEvent)>,
}

impl Events {
    fn new(e: &CudaEngine, n: usize) -> Result<Self> {
        let ctx = e.context();
        let mk = || ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT));
        Ok(Events {
            pairs: (0..n).map(|_| Ok((mk()?, mk()?))).collect::<Result<_>>()?,
        })
    }
    /// Elapsed microseconds of every pair (after a sync).
    fn micros(&self, e: &CudaEngine) -> Result<Vec<f64>> {
        e.sync()?;
        self.pairs
            .iter()
            .map(|(a, b)| Ok(a.elapsed_ms(b)? as f64 * 1e3))
            .collect()
    }
}

/// Times `f` (which enqueues work on the engine's stream) `n` times with events.
fn time_each(e: &CudaEngine, n: usize, mut f: impl FnMut() -> Result<()>) -> Result<Vec<f64>> {
    let ev = Events::new(e, n)?;
    let stream = &e.dev.stream;
    for (a, b) in &ev.pairs {
        a.record(stream)?;
        f()?;
        b.record(stream)?;
    }
    ev.micros(e)
}

/// Times several captured graphs in interleaved rounds: in each of `rounds` rounds every graph
/// is replayed its own number of times (`reps`), the graphs' order reversed every other round, so
/// that no configuration is always the one timed after another on the same buffers. (Timed one
/// after the other, the second configuration at T = 16384 read 1.3-2.2 % slower whichever it
/// was: BENCHMARKS.md, "The timed configurations' order".) Returns each graph's samples.
fn time_interleaved(
    e: &CudaEngine,
    rounds: usize,
    graphs: &[(&crate::cuda::Graph, usize)],
) -> Result<Vec<Vec<f64>>> {
    let mut us = vec![Vec::new(); graphs.len()];
    for round in 0..rounds {
        for i in round_order(round, graphs.len()) {
            let (g, reps) = graphs[i];
            us[i].extend(time_each(e, reps, || g.launch())?);
        }
    }
    Ok(us)
}

/// The order of `n` configurations in timing round `round`: forward in even rounds, reversed in
/// odd ones.
fn round_order(round: usize, n: usize) -> Vec<usize> {
    if round.is_multiple_of(2) {
        (0..n).collect()
    } else {
        (0..n).rev().collect()
    }
}

/// Device-to-device copy bandwidth (GB/s, bytes read + written) of a vectorized copy kernel over
/// `bytes` (>= 1 GiB in the protocol): the median of 10 copies.
pub fn copy_bandwidth(e: &CudaEngine, bytes: usize) -> Result<f64> {
    let n16 = bytes / 16;
    let src = e.upload(&random_bf16(n16 * 8, 1.0, 7))?;
    let dst = e.zeros::<bf16>(n16 * 8)?;
    let blocks = e.info().sm_count * 8;
    let mut args: [u64; 3] = [src.ptr(), dst.ptr(), n16 as u64];
    let mut ptrs: Vec<*mut std::ffi::c_void> =
        args.iter_mut().map(|a| a as *mut u64 as *mut _).collect();
    let mut run = || -> Result<()> {
        // SAFETY: src/dst hold n16 16-byte vectors; the args match mhc_copy's signature.
        unsafe {
            e.dev.launch(
                "mhc_copy",
                (blocks, 1, 1),
                256,
                0,
                e.stream(),
                &mut ptrs,
                false,
            )
        }
    };
    run()?;
    let mut us = time_each(e, 10, run)?;
    let (med, _) = median_spread(&mut us);
    Ok(2.0 * (n16 * 16) as f64 / (med * 1e-6) / 1e9)
}

/// The state of a seam chain: the op (the V4.1 seam or the V4 seam), x, two residual/coefficient
/// buffers (ping-pong), S weights.
struct Chain {
    op: crate::Op,
    x: DeviceBuffer<bf16>,
    bufs: [SeamBuffers; 2],
}

impl Chain {
    fn new(e: &CudaEngine, op: crate::Op, cfg: &Config, t: usize) -> Result<Self> {
        let (n, h) = (cfg.n, cfg.hidden);
        let x = e.upload(&random_bf16(t * h, 1.0, 11))?;
        let mut a = SeamBuffers::zeros(e, cfg, t, false)?;
        a.residual = e.upload(&random_bf16(t * n * h, 1.0, 12))?;
        let (post, comb, pre) = crate::synth::carried(cfg, t, 13);
        a.coeffs = Coeffs::upload(e, &post, &comb, &pre)?;
        let b = SeamBuffers::zeros(e, cfg, t, false)?;
        Ok(Chain {
            op,
            x,
            bufs: [a, b],
        })
    }

    /// Enqueues the S seams; returns the last route.
    fn run(
        &mut self,
        e: &CudaEngine,
        cfg: &Config,
        t: usize,
        w: &[DeviceSeamWeights],
    ) -> Result<crate::Route> {
        let mut route = crate::Route::default();
        for (s, ws) in w.iter().enumerate() {
            let (lo, hi) = self.bufs.split_at_mut(1);
            let (src, dst) = if s % 2 == 0 {
                (&lo[0], &mut hi[0])
            } else {
                (&hi[0], &mut lo[0])
            };
            route = if self.op == crate::Op::SeamV4 {
                e.seam_v4(cfg, t, &self.x, &src.residual, &src.coeffs, ws, dst)?
            } else {
                e.seam(cfg, t, &self.x, &src.residual, &src.coeffs, ws, dst)?
            };
        }
        Ok(route)
    }
}

/// Uploads S distinct seams' weights (fn streams from HBM, as in a decode step).
pub fn chain_weights(e: &CudaEngine, cfg: &Config, seams: usize) -> Result<Vec<DeviceSeamWeights>> {
    (0..seams)
        .map(|s| {
            DeviceSeamWeights::upload(
                e,
                cfg,
                &SeamWeights::synthetic(cfg, 1000 + s as u64),
                true,
                false,
            )
        })
        .collect()
}

fn gpu_row(e: &CudaEngine, cfg: &Config, t: usize, copy_gbps: f64) -> BenchRow {
    let bytes = seam_bytes(cfg, t);
    BenchRow {
        backend: "cuda".into(),
        path: String::new(),
        mode: String::new(),
        op: "seam".into(),
        hidden: cfg.hidden,
        tokens: t,
        n: 0,
        us_per_seam: 0.0,
        spread: 0.0,
        launches_per_seam: 0.0,
        bytes_per_seam: bytes,
        gbps: 0.0,
        pct_of_copy_bw: 0.0,
        copy_gbps,
        floor_us: bytes / (copy_gbps * 1e3),
        gpu: e.info().name.clone(),
        driver: format!("{}", e.info().driver_version),
        commit: super::commit(),
        date: super::today(),
        plan: String::new(),
        samples: 0,
        host_us_per_call: 0.0,
        pdl: false,
    }
}

/// Fills the timing fields of `r` from samples that each timed `calls` seams (or calls).
fn finish(mut r: BenchRow, us: Vec<f64>, calls: usize) -> BenchRow {
    let mut us: Vec<f64> = us.into_iter().map(|v| v / calls as f64).collect();
    let (med, spread) = median_spread(&mut us);
    r.samples = us.len();
    r.us_per_seam = med;
    r.spread = spread;
    r.gbps = r.bytes_per_seam / (med * 1e3);
    r.pct_of_copy_bw = 100.0 * r.gbps / r.copy_gbps;
    r
}

/// What one node of a replayed chain costs by itself: a graph of `o.seams` launches of an empty
/// kernel that triggers its dependents and waits for the previous kernel, timed like the seam
/// chain, per launch; with one block and with one block per multiprocessor (rows with op "node",
/// T = blocks), with PDL on and off as in `o.pdl`. Issue 5 sets the seam's target at small T as
/// a multiple of (floor + one graph-node launch).
pub fn node_rows(e: &CudaEngine, copy_gbps: f64, o: &GpuBenchOptions) -> Result<Vec<BenchRow>> {
    let cfg = crate::Preset::V41Flash.config();
    let mut rows = Vec::new();
    for blocks in [1, e.info().sm_count] {
        for &pdl in &o.pdl {
            let launch = || -> Result<()> {
                // SAFETY: mhc_node_probe takes no parameters and touches no memory.
                unsafe {
                    e.dev.launch(
                        "mhc_node_probe",
                        (blocks, 1, 1),
                        256,
                        0,
                        e.stream(),
                        &mut [],
                        pdl,
                    )
                }
            };
            launch()?;
            e.sync()?;
            let graph = e.capture(|_| (0..o.seams).try_for_each(|_| launch()))?;
            graph.launch()?;
            let us = time_each(e, o.rounds * o.reps, || graph.launch())?;
            let mut r = gpu_row(e, &cfg, blocks as usize, copy_gbps);
            r.op = "node".into();
            r.path = "empty".into();
            r.mode = "graph".into();
            r.pdl = pdl;
            r.hidden = 0;
            r.bytes_per_seam = 0.0;
            r.floor_us = 0.0;
            r.launches_per_seam = graph.kernel_nodes()? as f64 / o.seams as f64;
            rows.push(finish(r, us, o.seams));
        }
    }
    Ok(rows)
}

/// Times the chain of `op` (the V4.1 seam, `Op::Seam`, or the V4 seam, `Op::SeamV4`) at every T:
/// fused under a graph, fused eagerly, and the unfused baseline. The rows' op is the op's name.
#[allow(clippy::too_many_arguments)]
pub fn seam_rows(
    e: &CudaEngine,
    op: crate::Op,
    cfg: &Config,
    tokens: &[usize],
    copy_gbps: f64,
    o: &GpuBenchOptions,
    bar: &ProgressBar,
) -> Result<Vec<BenchRow>> {
    let weights = chain_weights(e, cfg, o.seams)?;
    let mut rows = Vec::new();
    let paths: &[PathChoice] = if o.baseline {
        &[PathChoice::Fused, PathChoice::Unfused]
    } else {
        &[PathChoice::Fused]
    };
    let (saved, saved_pdl) = (e.path(), e.pdl());
    for &t in tokens {
        e.reserve(cfg, t)?;
        let mut chain = Chain::new(e, op, cfg, t)?;
        for &path in paths {
            e.set_path(path);
            // The unfused kernels never use programmatic dependent launch: time them once.
            let pdls: &[bool] = if path == PathChoice::Fused {
                &o.pdl
            } else {
                &[false]
            };
            // Every setting's graph first, then their timings interleaved (`time_interleaved`).
            let mut route = crate::Route::default();
            let mut timed = Vec::new();
            for &pdl in pdls {
                bar.set_message(format!("H={} T={t} {} pdl={pdl}", cfg.hidden, path.name()));
                e.set_pdl(pdl);
                route = chain.run(e, cfg, t, &weights)?; // warm-up, also checks the path
                e.sync()?;
                let graph = e.capture(|e| chain.run(e, cfg, t, &weights).map(|_| ()))?;
                let launches = graph.kernel_nodes()? as f64 / o.seams as f64;
                graph.launch()?;
                let one = time_each(e, 1, || graph.launch())?[0];
                let reps = if one * 1e-6 * (o.rounds * o.reps) as f64 > o.budget_s {
                    ((o.budget_s / (one * 1e-6 * o.rounds as f64)) as usize).max(2)
                } else {
                    o.reps
                };
                timed.push((pdl, route.clone(), graph, launches, reps));
            }
            let runs: Vec<_> = timed.iter().map(|x| (&x.2, x.4)).collect();
            let samples = time_interleaved(e, o.rounds, &runs)?;
            for ((pdl, route, _, launches, _), us) in timed.into_iter().zip(samples) {
                let mut r = gpu_row(e, cfg, t, copy_gbps);
                r.op = op.to_string();
                r.path = route.path.clone();
                r.mode = "graph".into();
                r.pdl = pdl; // the unfused path is timed with pdl = false only
                r.launches_per_seam = launches;
                if path == PathChoice::Fused
                    && let Some(p) = e.plan_for(
                        op,
                        t,
                        cfg.hidden,
                        weights.first().is_some_and(|w| w.fn_split.is_some()),
                    )?
                {
                    r.plan = format!(
                        "{} W={} warps={} tt={} grid={}x{} fn_smem={} cluster={} prepared_fn={}",
                        route.kernels.join("+"),
                        p.w,
                        p.warps,
                        p.tt,
                        p.nrec,
                        p.grid_y,
                        p.fn_smem,
                        p.cluster,
                        p.prepared
                    );
                }
                rows.push(finish(r, us, o.seams));
            }
            if o.eager && path == PathChoice::Fused {
                // Eager calls with the engine's own setting.
                e.set_pdl(saved_pdl);
                let mut host = Vec::new();
                let us = time_each(e, o.rounds, || {
                    let t0 = std::time::Instant::now();
                    chain.run(e, cfg, t, &weights)?;
                    host.push(t0.elapsed().as_secs_f64() * 1e6 / o.seams as f64);
                    Ok(())
                })?;
                let mut r = gpu_row(e, cfg, t, copy_gbps);
                r.op = op.to_string();
                r.path = route.path.clone();
                r.mode = "eager".into();
                r.pdl = saved_pdl;
                let (h, _) = median_spread(&mut host);
                r.host_us_per_call = h;
                rows.push(finish(r, us, o.seams));
            }
        }
        bar.inc(1);
    }
    e.set_path(saved);
    e.set_pdl(saved_pdl);
    Ok(rows)
}

/// The compressor projection at decode shapes, ours against cuBLAS (f32 and bf16 output), each
/// under a graph of calls that rotate over enough copies of w to stream it from HBM.
pub fn projection_rows(
    e: &CudaEngine,
    ms: &[usize],
    ks: &[usize],
    ns: &[usize],
    copy_gbps: f64,
    o: &GpuBenchOptions,
    bar: &ProgressBar,
) -> Result<Vec<BenchRow>> {
    let cfg = crate::Preset::V41Flash.config();
    let blas = if o.baseline {
        Blas::new(e)
            .map_err(|err| eprintln!("cuBLAS unavailable, timing ours only: {err}"))
            .ok()
    } else {
        None
    };
    let mut rows = Vec::new();
    let saved_pdl = e.pdl();
    let mmax = ms.iter().copied().max().unwrap_or(1);
    for &k in ks {
        for &n in ns {
            let ws = weight_copies(e, n, k, usize::MAX)?;
            let copies = ws.len();
            let a = e.upload(&random_bf16(mmax * k, 1.0, 99))?;
            let y = e.zeros::<f32>(mmax * n)?;
            let yb = e.zeros::<bf16>(mmax * n)?;
            let wp: Vec<u64> = ws.iter().map(|w| w.ptr()).collect();
            let (ap, yp, ybp) = (a.ptr(), y.ptr(), yb.ptr());
            rows.extend(w_stream_rows(e, &wp, (k, n), copy_gbps, o)?);
            for &m in ms {
                bar.set_message(format!("projection M={m} K={k} N={n}"));
                // w and a read, y written: 4 bytes an output, 2 with bf16 output.
                let bytes = |y_bytes: usize| (n * k * 2 + m * k * 2 + m * n * y_bytes) as f64;
                let wp = &wp;
                let cfg = &cfg;
                // (path, pdl, bytes of an output element, the call)
                let mut variants: Vec<(&str, bool, usize, Variant<'_>)> = Vec::new();
                // Ours with f32 output ("fused", the target) and with bf16 output.
                for (name, y_bf16) in [("fused", false), ("fused-bf16", true)] {
                    for &pdl in &o.pdl {
                        variants.push((
                            name,
                            pdl,
                            if y_bf16 { 2 } else { 4 },
                            Box::new(move |i: usize| -> Result<()> {
                                let call =
                                    crate::cuda::RawCall::projection(crate::cuda::RawProjection {
                                        a: ap,
                                        w: wp[i],
                                        y: if y_bf16 { ybp } else { yp },
                                        m,
                                        n,
                                        k,
                                        y_bf16,
                                    });
                                // SAFETY: buffers hold m*k, n*k and m*n elements (y and yb in
                                // the type y_bf16 names).
                                unsafe { e.launch_raw(cfg, &call, e.stream()) }.map(|_| ())
                            }),
                        ));
                    }
                }
                if let Some(b) = &blas {
                    variants.push((
                        "cublas-f32",
                        false,
                        4,
                        Box::new(move |i: usize| b.gemm(ap, wp[i], yp, m, n, k, false)),
                    ));
                    variants.push((
                        "cublas-bf16",
                        false,
                        2,
                        Box::new(move |i: usize| b.gemm(ap, wp[i], ybp, m, n, k, true)),
                    ));
                }
                // Every variant's graph first, then their timings interleaved.
                let mut graphs = Vec::new();
                for (_, pdl, _, f) in variants.iter_mut() {
                    e.set_pdl(*pdl);
                    f(0)?; // warm-up (cuBLAS picks its kernel and workspace outside the capture)
                    e.sync()?;
                    let graph = e.capture(|_| (0..copies).try_for_each(&mut *f))?;
                    graph.launch()?;
                    graphs.push(graph);
                }
                let runs: Vec<_> = graphs.iter().map(|g| (g, o.reps)).collect();
                let samples = time_interleaved(e, o.rounds, &runs)?;
                for (((name, pdl, y_bytes, _), graph), us) in
                    variants.iter().zip(&graphs).zip(samples)
                {
                    let launches = graph.kernel_nodes()? as f64 / copies as f64;
                    let mut r = gpu_row(e, cfg, m, copy_gbps);
                    r.op = "projection".into();
                    r.path = name.to_string();
                    r.mode = "graph".into();
                    r.pdl = *pdl; // cuBLAS: launched as the library does, recorded as false
                    r.hidden = k;
                    r.n = n;
                    r.bytes_per_seam = bytes(*y_bytes);
                    r.floor_us = r.bytes_per_seam / (copy_gbps * 1e3);
                    r.launches_per_seam = launches;
                    rows.push(finish(r, us, copies));
                }
                bar.inc(1);
            }
        }
    }
    e.set_pdl(saved_pdl);
    Ok(rows)
}

/// Distinct random copies of an N x K bf16 w, enough (>= 256 MB, at least 2, at most `max`) that a
/// graph rotating over them streams w from HBM rather than L2.
fn weight_copies(
    e: &CudaEngine,
    n: usize,
    k: usize,
    max: usize,
) -> Result<Vec<DeviceBuffer<bf16>>> {
    let copies = (256usize << 20).div_ceil(n * k * 2).clamp(2, max.max(2));
    (0..copies)
        .map(|i| e.upload(&random_bf16(n * k, 0.02, 100 + i as u64)))
        .collect()
}

/// The projection's bound without arithmetic: a graph of pure reads of the same rotating copies
/// of the K x N w (`mhc_read_probe`: 8 blocks per multiprocessor, vectorized loads, one store
/// per block after the wait), with PDL on and off as in `o.pdl`. Rows with path "w-stream" and
/// T = 0 (no rows of a).
fn w_stream_rows(
    e: &CudaEngine,
    ws: &[u64],
    (k, n): (usize, usize),
    copy_gbps: f64,
    o: &GpuBenchOptions,
) -> Result<Vec<BenchRow>> {
    let cfg = crate::Preset::V41Flash.config();
    let blocks = e.info().sm_count * 8;
    let out = e.zeros::<u32>(blocks as usize)?;
    let bytes = n * k * 2;
    let n16 = bytes / 16;
    let mut rows = Vec::new();
    for &pdl in &o.pdl {
        let launch = |i: usize| -> Result<()> {
            let mut args: [u64; 3] = [ws[i], n16 as u64, out.ptr()];
            let mut ptrs: Vec<*mut std::ffi::c_void> =
                args.iter_mut().map(|a| a as *mut u64 as *mut _).collect();
            // SAFETY: ws[i] holds `bytes` (n16 16-byte vectors), out one u32 per block; the
            // arguments match mhc_read_probe's signature.
            unsafe {
                e.dev.launch(
                    "mhc_read_probe",
                    (blocks, 1, 1),
                    256,
                    0,
                    e.stream(),
                    &mut ptrs,
                    pdl,
                )
            }
        };
        launch(0)?;
        e.sync()?;
        let graph = e.capture(|_| (0..ws.len()).try_for_each(launch))?;
        graph.launch()?;
        let us = time_each(e, o.rounds * o.reps, || graph.launch())?;
        let mut r = gpu_row(e, &cfg, 0, copy_gbps);
        r.op = "projection".into();
        r.path = "w-stream".into();
        r.mode = "graph".into();
        r.pdl = pdl;
        r.hidden = k;
        r.n = n;
        r.bytes_per_seam = bytes as f64;
        r.floor_us = bytes as f64 / (copy_gbps * 1e3);
        r.launches_per_seam = 1.0;
        rows.push(finish(r, us, ws.len()));
    }
    Ok(rows)
}

/// One timed projection implementation: enqueues a call on copy `i` of w.
type Variant<'a> = Box<dyn FnMut(usize) -> Result<()> + 'a>;

/// cuBLAS GEMM for the projection comparison.
struct Blas {
    handle: cudarc::cublas::CudaBlas,
}

impl Blas {
    fn new(e: &CudaEngine) -> Result<Self> {
        // SAFETY: only tries to dlopen libcublas.
        if !unsafe { cudarc::cublas::sys::is_culib_present() } {
            return Err(Error::Cuda("libcublas not found".into()));
        }
        let handle = cudarc::cublas::CudaBlas::new(e.dev.stream.clone())
            .map_err(|err| Error::Cuda(format!("cublasCreate: {err:?}")))?;
        Ok(Blas { handle })
    }

    /// y [m,n] = a [m,k] . w [n,k]^T, i.e. column-major y^T = w^T(as op T) . a.
    #[allow(clippy::too_many_arguments)]
    fn gemm(
        &self,
        a: u64,
        w: u64,
        y: u64,
        m: usize,
        n: usize,
        k: usize,
        bf16_out: bool,
    ) -> Result<()> {
        use cudarc::cublas::sys as cs;
        let alpha = 1.0f32;
        let beta = 0.0f32;
        // SAFETY: pointers hold the sizes above; scalars are host f32 for a 32F compute type.
        unsafe {
            cs::cublasGemmEx(
                *self.handle.handle(),
                cs::cublasOperation_t::CUBLAS_OP_T,
                cs::cublasOperation_t::CUBLAS_OP_N,
                n as i32,
                m as i32,
                k as i32,
                &alpha as *const f32 as *const _,
                w as *const _,
                cs::cudaDataType::CUDA_R_16BF,
                k as i32,
                a as *const _,
                cs::cudaDataType::CUDA_R_16BF,
                k as i32,
                &beta as *const f32 as *const _,
                y as *mut _,
                if bf16_out {
                    cs::cudaDataType::CUDA_R_16BF
                } else {
                    cs::cudaDataType::CUDA_R_32F
                },
                n as i32,
                cs::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cs::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .result()
        .map_err(|err| Error::Cuda(format!("cublasGemmEx: {err:?}")))
    }
}

/// Phase times of the fused seam inside a replayed chain (`mhc bench --timeline`), from the
/// stamps of the instrumented kernels (kernels/common.cuh, `MHC_TIMELINE`). Times are global-timer
/// nanoseconds relative to the seam's first block start, medians over the chain's seams.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TimelineRow {
    /// Hidden size.
    pub hidden: usize,
    /// Tokens.
    pub tokens: usize,
    /// Programmatic dependent launch on.
    pub pdl: bool,
    /// Start-to-start time of consecutive seams (the replay's time per seam).
    pub period_us: f64,
    /// First block start to last stamp of the seam (all its launches).
    pub span_us: f64,
    /// Last stamp of the previous seam to this seam's first block start (negative: overlap).
    pub gap_us: f64,
    /// Per stamp of a tile block (BLOCK_STAMPS): the median over blocks of the time the block's
    /// thread 0 passed it.
    pub block_us: Vec<f64>,
    /// The same, the latest block.
    pub block_max_us: Vec<f64>,
    /// The finisher's (or, split, the last tails block's) stamps (TAIL_STAMPS).
    pub tail_us: Vec<f64>,
    /// Smallest step between distinct stamps seen (the global timer's resolution, at most).
    pub timer_step_ns: f64,
    /// The finishing block's cycle counter over the global timer from its start stamp to its
    /// norm-pass stamp (GHz), the median over the chain's seams. Not always the SM clock: it read
    /// 1.87-1.90 in the small-T cluster kernels while nvidia-smi held 1980 MHz (PERF_NOTES.md
    /// attempt 116, unexplained).
    pub sm_ghz: f64,
    /// Per launch of the seam (one, or the tiles launch and the tails launch), per stamp of
    /// LAUNCH_STAMPS: the first, median and latest block's time (medians over the chain's seams).
    pub launches: Vec<LaunchSpans>,
}

/// One launch of a seam in a timeline: when its blocks passed each stamp of LAUNCH_STAMPS.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LaunchSpans {
    /// Kernel name as the engine logged it.
    pub kernel: String,
    /// Blocks of the launch.
    pub blocks: usize,
    /// Per stamp: [first, median, latest] block, us from the seam's first block start.
    pub stamps_us: Vec<[f64; 3]>,
}

/// Stamps every launch kind passes (tile, stream and tails kernels): the spans of a launch.
/// Slot 11 (gates done) is stamped by the gate thread of a block that runs gates (split tails:
/// part 0 only), slot 12 (norm pass) by thread 0 after its own share of the pass.
const LAUNCH_STAMPS: [(usize, &str); 6] = [
    (0, "start"),
    (2, "waited"),
    (9, "records loaded"),
    (11, "gates done"),
    (12, "norm pass"),
    (13, "exit"),
];

/// A tile block's stamps in program order (slot in kernels/seam.cu, name).
/// Where the two kernels differ, the name gives the tile kernel's phase, then the cluster
/// kernel's (kernels/seam.cu).
const BLOCK_STAMPS: [(usize, &str); 10] = [
    (0, "start"),
    (1, "fn issued"),
    (2, "waited"),
    (3, "coef"),
    (4, "elementwise"),
    (5, "fn landed"),
    (14, "mma|mma, gate sums of squares"),
    (6, "sums of squares"),
    (7, "records|leaves sent"),
    (8, "finisher?|leaves arrived"),
];
/// The finisher's (cluster kernel: block 0's) stamps, the gate thread's for the gates.
const TAIL_STAMPS: [(usize, &str); 10] = [
    (8, "tail start"),
    (9, "records loaded|leaf groups"),
    (10, "records summed|tree"),
    (15, "gates start"),
    (16, "sigmoids"),
    (17, "sinkhorn"),
    (18, "IEEE redo"),
    (11, "gates done"),
    (12, "norm pass"),
    (13, "exit"),
];

fn median(mut v: Vec<f64>) -> f64 {
    median_spread(&mut v).0
}

/// The median of `v`, NaN where it is empty (a stamp no block passed).
fn median_or_nan(v: &[f64]) -> f64 {
    if v.is_empty() {
        f64::NAN
    } else {
        median(v.to_vec())
    }
}

/// Runs the seam chain at each T under a graph with the instrumented kernels and reads the
/// stamps of one replay after warm-up replays.
pub fn seam_timeline(
    e: &CudaEngine,
    cfg: &Config,
    tokens: &[usize],
    pdls: &[bool],
    seams: usize,
) -> Result<Vec<TimelineRow>> {
    use crate::cuda::TIMELINE_SLOTS as S;
    let weights = chain_weights(e, cfg, seams)?;
    let (saved, saved_pdl) = (e.path(), e.pdl());
    e.set_path(PathChoice::Fused);
    let mut out = Vec::new();
    for &t in tokens {
        e.reserve(cfg, t)?;
        let mut chain = Chain::new(e, crate::Op::Seam, cfg, t)?;
        for &pdl in pdls {
            e.set_pdl(pdl);
            chain.run(e, cfg, t, &weights)?;
            e.sync()?;
            // Room for every launch of the chain: the largest grid is at most blocks of the plan.
            let plan = e
                .plan_for(crate::Op::Seam, t, cfg.hidden, true)?
                .ok_or_else(|| Error::Unsupported("no fused plan for the timeline".into()))?;
            // (The split tails take up to `tail_parts_for` blocks a tile.)
            let tails = plan.tiles * e.tail_parts_for(plan.tiles, cfg.hidden as u32);
            let per_seam = (plan.nrec * plan.grid_y + tails) as usize;
            let (log, st) = replay_stamps(e, seams * per_seam * S * 2, |e| {
                chain.run(e, cfg, t, &weights).map(|_| ())
            })?;
            // A launch past the buffer is not logged (and not stamped): the seams' launches
            // would no longer line up.
            if log.is_empty() || log.len() % seams != 0 {
                return Err(Error::Unsupported(format!(
                    "timeline at T = {t}: {} launches logged for {seams} seams (stamp buffer too small)",
                    log.len()
                )));
            }
            if let Some(dir) = std::env::var_os("MHC_TIMELINE_RAW") {
                write_raw_timeline(std::path::Path::new(&dir), cfg, t, pdl, &plan, &log, &st)?;
            }
            out.push(analyse(cfg, t, pdl, &log, &st, seams));
        }
    }
    e.set_path(saved);
    e.set_pdl(saved_pdl);
    Ok(out)
}

/// Slot of a block's stamp row that holds its multiprocessor's index + 1, not a time
/// (kernels/common.cuh, `TL_SMID`).
const SMID_SLOT: usize = 19;

/// `MHC_TIMELINE_RAW=dir`: every block's stamps of one timeline replay, as
/// `dir/timeline-raw-h{H}-t{T}-pdl{0|1}.json` (ns of the global timer, 0 where not stamped; slot
/// 19 the SM's index + 1; in the stream launch, slots 20-22 its first three tiles' records; in the
/// split tails, thread 0's norm pass: 20 the factors published, 21 its first batch's loads landed,
/// 22 that batch's stores issued, 23 the second batch's loads landed), with the plan's groups
/// (`nrec`, gridDim.x of the tiles launch) so that a block's group and row of the grid can be
/// recovered; `cycles`, the same slots' SM clock (clock64, taken right after the global timer),
/// for intervals inside one block finer than the global timer's steps (0.26 us on the H200). For
/// diagnostics; `analyse` reads the same stamps.
fn write_raw_timeline(
    dir: &std::path::Path,
    cfg: &Config,
    t: usize,
    pdl: bool,
    plan: &crate::cuda::plan::SeamPlan,
    log: &[crate::cuda::TimelineLaunch],
    st: &[u64],
) -> Result<()> {
    use crate::cuda::TIMELINE_SLOTS as S;
    let launches: Vec<serde_json::Value> = log
        .iter()
        .map(|l| {
            // Every block's slots, word `w` of each stamp's pair (0: global timer, 1: clock64).
            let slots = |w: usize| -> Vec<Vec<u64>> {
                (0..l.blocks)
                    .map(|b| (0..S).map(|k| st[l.offset + (b * S + k) * 2 + w]).collect())
                    .collect()
            };
            serde_json::json!({ "kernel": l.kernel, "blocks": slots(0), "cycles": slots(1) })
        })
        .collect();
    let v = serde_json::json!({
        "hidden": cfg.hidden, "tokens": t, "pdl": pdl, "nrec": plan.nrec, "grid_y": plan.grid_y,
        "tiles": plan.tiles, "smid_slot": SMID_SLOT, "launches": launches,
    });
    let path = dir.join(format!(
        "timeline-raw-h{}-t{t}-pdl{}.json",
        cfg.hidden, pdl as u8
    ));
    std::fs::create_dir_all(dir)
        .and_then(|_| std::fs::write(&path, v.to_string()))
        .map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })
}

/// Captures what `enqueue` launches into a graph with a stamp buffer of `cap` u64 elements
/// attached, replays it 20 times to warm up, then once more on a zeroed buffer, and returns the
/// launches' stamp rows and the stamps of that last replay.
fn replay_stamps(
    e: &CudaEngine,
    cap: usize,
    enqueue: impl FnOnce(&CudaEngine) -> Result<()>,
) -> Result<(Vec<crate::cuda::TimelineLaunch>, Vec<u64>)> {
    let mut buf = e.zeros::<u64>(cap)?;
    e.set_timeline(Some((buf.ptr(), cap)))?;
    let graph = e.capture(enqueue);
    let log = e.timeline_log();
    e.set_timeline(None)?;
    let graph = graph?;
    for _ in 0..20 {
        graph.launch()?;
    }
    e.sync()?;
    buf.write(&vec![0u64; cap])?;
    graph.launch()?;
    Ok((log, buf.to_host()?))
}

fn analyse(
    cfg: &Config,
    t: usize,
    pdl: bool,
    log: &[crate::cuda::TimelineLaunch],
    st: &[u64],
    seams: usize,
) -> TimelineRow {
    use crate::cuda::TIMELINE_SLOTS as S;
    let gt =
        |l: &crate::cuda::TimelineLaunch, b: usize, slot: usize| st[l.offset + (b * S + slot) * 2];
    // Launches of each seam: one, or a tile launch and a tails launch.
    let per = log.len() / seams.max(1);
    let mut starts = Vec::new();
    let mut ends = Vec::new();
    let mut block_us: Vec<Vec<f64>> = vec![Vec::new(); BLOCK_STAMPS.len()];
    let mut block_max: Vec<Vec<f64>> = vec![Vec::new(); BLOCK_STAMPS.len()];
    let mut tail: Vec<Vec<f64>> = vec![Vec::new(); TAIL_STAMPS.len()];
    let mut step = u64::MAX;
    let mut ghz = Vec::new();
    // [launch][stamp][first, median, latest] over the seams.
    let mut spans: Vec<Vec<[Vec<f64>; 3]>> = Vec::new();
    let clk = |l: &crate::cuda::TimelineLaunch, b: usize, slot: usize| {
        st[l.offset + (b * S + slot) * 2 + 1]
    };
    for s in 0..seams {
        let ls = &log[s * per..(s + 1) * per];
        let main = &ls[0];
        let start = (0..main.blocks)
            .map(|b| gt(main, b, 0))
            .filter(|&v| v > 0)
            .min()
            .unwrap_or(0);
        let mut end = 0;
        for l in ls {
            for b in 0..l.blocks {
                let mut stamps: Vec<u64> = (0..S)
                    .filter(|&k| k != SMID_SLOT)
                    .map(|k| gt(l, b, k))
                    .filter(|&v| v > 0)
                    .collect();
                end = end.max(stamps.iter().copied().max().unwrap_or(0));
                stamps.sort();
                for w in stamps.windows(2) {
                    if w[1] > w[0] {
                        step = step.min(w[1] - w[0]);
                    }
                }
            }
        }
        starts.push(start as f64);
        ends.push(end as f64);
        if s == 0 {
            continue; // the first seam follows the previous replay
        }
        let rel = |v: u64| (v as f64 - start as f64) / 1e3;
        if spans.len() < ls.len() {
            spans.resize_with(ls.len(), || {
                vec![[Vec::new(), Vec::new(), Vec::new()]; LAUNCH_STAMPS.len()]
            });
        }
        for (l, sp) in ls.iter().zip(spans.iter_mut()) {
            for (&(slot, _), acc) in LAUNCH_STAMPS.iter().zip(sp.iter_mut()) {
                let mut v: Vec<f64> = (0..l.blocks)
                    .map(|b| gt(l, b, slot))
                    .filter(|&v| v > 0)
                    .map(rel)
                    .collect();
                if v.is_empty() {
                    continue;
                }
                v.sort_by(f64::total_cmp);
                acc[0].push(v[0]);
                acc[2].push(v[v.len() - 1]);
                acc[1].push(median(v));
            }
        }
        for (k, (med, mx)) in block_us.iter_mut().zip(block_max.iter_mut()).enumerate() {
            let slot = BLOCK_STAMPS[k].0;
            let v: Vec<f64> = (0..main.blocks)
                .map(|b| gt(main, b, slot))
                .filter(|&v| v > 0)
                .map(rel)
                .collect();
            if !v.is_empty() {
                mx.push(v.iter().copied().fold(f64::MIN, f64::max));
                med.push(median(v));
            }
        }
        // The finisher: the tile launch's block with a norm-pass stamp, or the tails launch's
        // latest block.
        let last = ls.last().unwrap_or(main);
        let fin = (0..last.blocks)
            .filter(|&b| gt(last, b, 12) > 0)
            .max_by_key(|&b| gt(last, b, 12));
        if let Some(b) = fin {
            let (g0, g1) = (gt(last, b, 0), gt(last, b, 12));
            if g1 > g0 + 2000 {
                ghz.push((clk(last, b, 12) - clk(last, b, 0)) as f64 / (g1 - g0) as f64);
            }
            for (k, v) in tail.iter_mut().enumerate() {
                let slot = if k == 0 && per > 1 {
                    0
                } else {
                    TAIL_STAMPS[k].0
                };
                let x = gt(last, b, slot);
                if x > 0 {
                    v.push(rel(x));
                }
            }
        }
    }
    let med_of = |v: &Vec<Vec<f64>>| -> Vec<f64> { v.iter().map(|x| median_or_nan(x)).collect() };
    TimelineRow {
        hidden: cfg.hidden,
        tokens: t,
        pdl,
        period_us: median(starts.windows(2).map(|w| (w[1] - w[0]) / 1e3).collect()),
        span_us: median((1..seams).map(|s| (ends[s] - starts[s]) / 1e3).collect()),
        gap_us: median(
            (1..seams)
                .map(|s| (starts[s] - ends[s - 1]) / 1e3)
                .collect(),
        ),
        block_us: med_of(&block_us),
        block_max_us: med_of(&block_max),
        tail_us: med_of(&tail),
        timer_step_ns: step as f64,
        sm_ghz: if ghz.is_empty() {
            f64::NAN
        } else {
            median(ghz)
        },
        launches: log
            .iter()
            .take(per)
            .zip(&spans)
            .map(|(l, sp)| LaunchSpans {
                kernel: l.kernel.clone(),
                blocks: l.blocks,
                stamps_us: sp
                    .iter()
                    .map(|a| a.each_ref().map(|x| median_or_nan(x)))
                    .collect(),
            })
            .collect(),
    }
}

/// Prints timeline rows.
pub fn print_timeline(rows: &[TimelineRow]) {
    println!(
        "phase times in us from the seam's first block start (medians over the chain's seams); \
         blocks: median block [latest block]"
    );
    for r in rows {
        println!(
            "H={} T={} pdl={}: period {:.2}, span {:.2}, gap {:.2} (timer step {} ns, SM clock {:.2} GHz)",
            r.hidden,
            r.tokens,
            if r.pdl { "on" } else { "off" },
            r.period_us,
            r.span_us,
            r.gap_us,
            r.timer_step_ns,
            r.sm_ghz
        );
        let blocks: Vec<String> = BLOCK_STAMPS
            .iter()
            .zip(r.block_us.iter().zip(&r.block_max_us))
            .map(|((_, n), (a, b))| format!("{n} {a:.2} [{b:.2}]"))
            .collect();
        println!("  blocks: {}", blocks.join(", "));
        let t: Vec<String> = TAIL_STAMPS
            .iter()
            .zip(&r.tail_us)
            .map(|((_, n), a)| format!("{n} {a:.2}"))
            .collect();
        println!("  tail:   {}", t.join(", "));
        for l in &r.launches {
            let st: Vec<String> = LAUNCH_STAMPS
                .iter()
                .zip(&l.stamps_us)
                .filter(|(_, a)| !a[1].is_nan())
                .map(|((_, n), a)| format!("{n} {:.2}/{:.2}/{:.2}", a[0], a[1], a[2]))
                .collect();
            println!(
                "  launch {} ({} blocks; first/median/latest): {}",
                l.kernel,
                l.blocks,
                st.join(", ")
            );
        }
    }
}

/// The projection's stamps (kernels/projection.cu, PTL_*), in program order.
const PROJ_STAMPS: [(usize, &str); 8] = [
    (0, "start"),
    (1, "w issued"),
    (2, "waited"),
    (3, "a landed"),
    (4, "stage 0 landed"),
    (5, "last stage landed"),
    (6, "store"),
    (7, "exit"),
];

/// Where a projection call's time goes, from the instrumented kernel's stamps inside a replayed
/// graph of calls (rotating over copies of w as in the benchmark). Times are relative to the end
/// of the previous call (its latest block's exit stamp), medians over the chain's calls.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ProjTimelineRow {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub pdl: bool,
    /// End-to-end time of consecutive calls (the replay's time per call).
    pub period_us: f64,
    /// Per stamp (PROJ_STAMPS): the median over blocks, relative to the previous call's end.
    pub block_us: Vec<f64>,
    /// The same, the latest block.
    pub block_max_us: Vec<f64>,
    /// The same, the first block.
    pub block_min_us: Vec<f64>,
    /// The same, the block at the 90th percentile (nearest rank).
    pub block_p90_us: Vec<f64>,
}

/// Runs `calls` projections of M x K x N under a graph with the instrumented kernel and reads the
/// stamps of one replay after warm-up replays (an engine built with `EngineOptions::timeline`).
pub fn projection_timeline(
    e: &CudaEngine,
    (m, k, n): (usize, usize, usize),
    pdls: &[bool],
    calls: usize,
) -> Result<Vec<ProjTimelineRow>> {
    use crate::cuda::TIMELINE_SLOTS as S;
    let cfg = crate::Preset::V41Flash.config();
    let ws = weight_copies(e, n, k, calls)?;
    let copies = ws.len();
    let a = e.upload(&random_bf16(m * k, 1.0, 99))?;
    let y = e.zeros::<f32>(m * n)?;
    let call = |i: usize| -> Result<()> {
        let c = crate::cuda::RawCall::projection(crate::cuda::RawProjection {
            a: a.ptr(),
            w: ws[i % copies].ptr(),
            y: y.ptr(),
            m,
            n,
            k,
            y_bf16: false,
        });
        // SAFETY: the buffers hold m*k, n*k and m*n elements.
        unsafe { e.launch_raw(&cfg, &c, e.stream()) }.map(|_| ())
    };
    let saved_pdl = e.pdl();
    let mut out = Vec::new();
    for &pdl in pdls {
        e.set_pdl(pdl);
        call(0)?;
        e.sync()?;
        // Room for every launch: a plan has at most one block per n-tile.
        let cap = calls * n.div_ceil(8) * m.div_ceil(16) * S * 2;
        let (log, st) = replay_stamps(e, cap, |_| (0..calls).try_for_each(call))?;
        let gt = |l: &crate::cuda::TimelineLaunch, b: usize, slot: usize| {
            st[l.offset + (b * S + slot) * 2]
        };
        let ends: Vec<u64> = log
            .iter()
            .map(|l| (0..l.blocks).map(|b| gt(l, b, 7)).max().unwrap_or(0))
            .collect();
        let mut med: Vec<Vec<f64>> = vec![Vec::new(); PROJ_STAMPS.len()];
        let mut mx: Vec<Vec<f64>> = vec![Vec::new(); PROJ_STAMPS.len()];
        let mut mn: Vec<Vec<f64>> = vec![Vec::new(); PROJ_STAMPS.len()];
        let mut p90: Vec<Vec<f64>> = vec![Vec::new(); PROJ_STAMPS.len()];
        for c in 1..log.len() {
            let rel = |v: u64| (v as f64 - ends[c - 1] as f64) / 1e3;
            for (i, &(slot, _)) in PROJ_STAMPS.iter().enumerate() {
                let mut v: Vec<f64> = (0..log[c].blocks)
                    .map(|b| gt(&log[c], b, slot))
                    .filter(|&v| v > 0)
                    .map(rel)
                    .collect();
                if !v.is_empty() {
                    v.sort_by(f64::total_cmp);
                    mn[i].push(v[0]);
                    p90[i].push(v[(v.len() * 9).div_ceil(10) - 1]);
                    mx[i].push(v[v.len() - 1]);
                    med[i].push(median(v));
                }
            }
        }
        let of = |v: Vec<Vec<f64>>| -> Vec<f64> {
            v.into_iter()
                .map(|x| if x.is_empty() { f64::NAN } else { median(x) })
                .collect()
        };
        out.push(ProjTimelineRow {
            m,
            k,
            n,
            pdl,
            period_us: median(
                ends.windows(2)
                    .map(|w| (w[1] - w[0]) as f64 / 1e3)
                    .collect(),
            ),
            block_us: of(med),
            block_max_us: of(mx),
            block_min_us: of(mn),
            block_p90_us: of(p90),
        });
    }
    e.set_pdl(saved_pdl);
    Ok(out)
}

/// Prints `projection_timeline` rows.
pub fn print_projection_timeline(rows: &[ProjTimelineRow]) {
    println!(
        "projection stamps in us after the previous call's last block exited (medians over the \
         chain's calls); blocks: median block [first, 90th percentile, latest block]"
    );
    for r in rows {
        println!(
            "M={} K={} N={} pdl={}: period {:.2}",
            r.m,
            r.k,
            r.n,
            if r.pdl { "on" } else { "off" },
            r.period_us
        );
        let s: Vec<String> = PROJ_STAMPS
            .iter()
            .enumerate()
            .map(|(i, (_, n))| {
                format!(
                    "{n} {:.2} [{:.2}, {:.2}, {:.2}]",
                    r.block_us[i], r.block_min_us[i], r.block_p90_us[i], r.block_max_us[i]
                )
            })
            .collect();
        println!("  {}", s.join(", "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::{TIMELINE_SLOTS as S, TimelineLaunch};

    /// Over the protocol's 5 rounds each configuration takes every position; first and last are
    /// shared out as evenly as 5 rounds allow (3 and 2).
    #[test]
    fn the_rounds_interleave_the_configurations_both_ways() {
        assert_eq!(round_order(0, 3), [0, 1, 2]);
        assert_eq!(round_order(1, 3), [2, 1, 0]);
        assert_eq!(round_order(4, 2), [0, 1]);
        let firsts: Vec<usize> = (0..5).map(|r| round_order(r, 2)[0]).collect();
        assert_eq!(firsts, [0, 1, 0, 1, 0]);
        assert!(round_order(3, 0).is_empty());
    }

    /// `analyse` on synthetic stamps of three seams of two launches each (a tiles launch of two
    /// blocks, a tails launch of three): the seams split at the launch count, and each launch's
    /// first, median and latest block per stamp are taken relative to its seam's first block.
    #[test]
    fn the_timeline_spans_each_launch_of_each_seam() {
        let cfg = crate::spec::Preset::V41Flash.config();
        let seams = 3;
        let mut log = Vec::new();
        let mut st = vec![0u64; seams * 5 * S * 2];
        let mut offset = 0;
        for s in 0..seams {
            // Seam s starts at 100 us x (s + 1); a block stamps "start" (slot 0) and "exit" (13).
            let t0 = 100_000 * (s as u64 + 1);
            for (kernel, starts) in [
                ("tiles", vec![0u64, 500]),
                ("tails", vec![20_000, 21_000, 26_000]),
            ] {
                for (b, &d) in starts.iter().enumerate() {
                    let at = |slot: usize| offset + (b * S + slot) * 2;
                    st[at(0)] = t0 + d;
                    st[at(0) + 1] = 2 * (t0 + d); // cycles: 2 GHz
                    st[at(13)] = t0 + d + 4_000;
                    st[at(13) + 1] = 2 * (t0 + d + 4_000);
                }
                log.push(TimelineLaunch {
                    kernel: kernel.into(),
                    offset,
                    blocks: starts.len(),
                });
                offset += starts.len() * S * 2;
            }
        }
        let row = analyse(&cfg, 7, true, &log, &st, seams);
        assert_eq!(row.launches.len(), 2);
        let (tiles, tails) = (&row.launches[0], &row.launches[1]);
        assert_eq!((tiles.kernel.as_str(), tiles.blocks), ("tiles", 2));
        assert_eq!((tails.kernel.as_str(), tails.blocks), ("tails", 3));
        let close = |a: [f64; 3], b: [f64; 3]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9);
        // LAUNCH_STAMPS[0] is "start", [5] is "exit"; stamps no block passed are NaN.
        assert!(
            close(tiles.stamps_us[0], [0.0, 0.25, 0.5]),
            "{:?}",
            tiles.stamps_us
        );
        assert!(
            close(tails.stamps_us[0], [20.0, 21.0, 26.0]),
            "{:?}",
            tails.stamps_us
        );
        assert!(
            close(tails.stamps_us[5], [24.0, 25.0, 30.0]),
            "{:?}",
            tails.stamps_us
        );
        assert!(tails.stamps_us[3].iter().all(|x| x.is_nan()));
        assert!((row.period_us - 100.0).abs() < 1e-9);
        assert!((row.span_us - 30.0).abs() < 1e-9);
    }
}
