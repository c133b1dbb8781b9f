//! `mhc`: check, run, inspect and benchmark the mHC seams. A thin layer over the library.

use clap::{Args, Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use mhc::check::{self, Case, CaseReport};
use mhc::cuda::{self, CudaEngine, PathChoice};
use mhc::ops::{self, Backend, CpuBackend, Op};
use mhc::spec::{Config, Preset};
use mhc::{Error, Result};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "mhc",
    version,
    about = "mHC seams of DeepSeek-V4-family models: exact CPU reference and fused CUDA kernels"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Check every op at several T against the f64 oracle and the f32 reference (default command).
    Check(CheckArgs),
    /// Run one op on tensors from a safetensors file and write its outputs.
    Run(RunArgs),
    /// List the mHC tensors of a checkpoint and check them against a preset.
    Inspect(InspectArgs),
    /// Time the seam (or the compressor projection) across T.
    Bench(BenchArgs),
    /// Write random inputs for an op (realistic scale) to a safetensors file, for `mhc run`.
    Sample(SampleArgs),
    /// Compile every kernel with NVRTC and print registers and spills (fails on a spill).
    Kernels(KernelsArgs),
    /// Draw the benchmark plot from JSON rows written by `mhc bench --json`.
    Plot(PlotArgs),
    /// Show the GPU, driver and NVRTC this machine has.
    Info,
}

#[derive(Args)]
struct PlotArgs {
    /// JSON files of benchmark rows.
    #[arg(required = true)]
    json: Vec<PathBuf>,
    /// Write STEM.svg and STEM.png.
    #[arg(long)]
    out: PathBuf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum BackendChoice {
    /// CUDA when a GPU is found, CPU otherwise.
    Auto,
    /// The CPU reference.
    Cpu,
    /// The CUDA engine (fails clearly without a GPU).
    Cuda,
}

#[derive(Args, Clone)]
struct ModelArgs {
    /// Model presets (repeatable); default: all three for check, v4.1-flash otherwise.
    #[arg(long = "preset", value_enum)]
    presets: Vec<Preset>,
    /// Hidden sizes instead of presets' (repeatable; other constants from the first preset).
    #[arg(long = "hidden")]
    hiddens: Vec<usize>,
    /// Override hc_eps.
    #[arg(long)]
    hc_eps: Option<f32>,
    /// Override rms_eps.
    #[arg(long)]
    rms_eps: Option<f32>,
    /// Override norm_eps.
    #[arg(long)]
    norm_eps: Option<f32>,
    /// Override the Sinkhorn iterations.
    #[arg(long)]
    sinkhorn_iters: Option<usize>,
    /// Override post_mult.
    #[arg(long)]
    post_mult: Option<f32>,
    /// Streams n where the tensors do not say (expand).
    #[arg(long)]
    streams: Option<usize>,
}

impl ModelArgs {
    /// The configurations these flags ask for, each validated, so that a bad override (no
    /// streams, H = 0, a NaN eps) is one clear error before any work starts.
    fn configs(&self, default: &[Preset]) -> Result<Vec<Config>> {
        let presets = if self.presets.is_empty() {
            default.to_vec()
        } else {
            self.presets.clone()
        };
        let mut cfgs: Vec<Config> = if self.hiddens.is_empty() {
            presets.iter().map(|p| p.config()).collect()
        } else {
            self.hiddens
                .iter()
                .map(|h| presets[0].config().with_hidden(*h))
                .collect()
        };
        for c in &mut cfgs {
            if let Some(v) = self.hc_eps {
                c.hc_eps = v;
            }
            if let Some(v) = self.rms_eps {
                c.rms_eps = v;
            }
            if let Some(v) = self.norm_eps {
                c.norm_eps = v;
            }
            if let Some(v) = self.sinkhorn_iters {
                c.sinkhorn_iters = v;
            }
            if let Some(v) = self.post_mult {
                c.post_mult = v;
            }
            if let Some(v) = self.streams {
                c.n = v;
            }
            c.validate()?;
        }
        Ok(cfgs)
    }
}

#[derive(Args)]
struct CheckArgs {
    /// Backend to check.
    #[arg(long, value_enum, default_value = "auto")]
    backend: BackendChoice,
    /// Force a GPU path (auto, fused, unfused, cpu); default MHC_PATH or auto.
    #[arg(long, value_enum)]
    path: Option<PathChoice>,
    #[command(flatten)]
    model: ModelArgs,
    /// Token counts (comma-separated); default 1,3,17,128 on the CPU, more on the GPU.
    #[arg(long, value_delimiter = ',')]
    tokens: Vec<usize>,
    /// Only these ops (comma-separated).
    #[arg(long, value_delimiter = ',', value_enum)]
    ops: Vec<Op>,
    /// Seed of the random inputs (default: fresh, or MHC_SEED).
    #[arg(long)]
    seed: Option<u64>,
    /// Write every case's metrics as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Rows of w (N) in the projection's cases (K is each preset's H).
    #[arg(long, default_value_t = check::PROJ_N, value_parser = at_least_one)]
    proj_n: usize,
}

/// A count that must be positive (an empty projection checks nothing; a benchmark of no tokens,
/// seams or rounds times nothing).
fn at_least_one(s: &str) -> std::result::Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

#[derive(Args)]
struct RunArgs {
    /// The op (SPEC section 5 name; `post` = post_map).
    #[arg(long, value_enum)]
    op: Op,
    /// Input tensors (SPEC section 9 names).
    #[arg(long)]
    input: PathBuf,
    /// Where to write the outputs.
    #[arg(long)]
    output: PathBuf,
    /// Also emit the layer input as MXFP8.
    #[arg(long)]
    fp8: bool,
    /// projection: write `out` in bf16 (the f32 result rounded once) instead of f32.
    #[arg(long)]
    bf16_out: bool,
    #[arg(long, value_enum, default_value = "auto")]
    backend: BackendChoice,
    /// Force a GPU path.
    #[arg(long, value_enum)]
    path: Option<PathChoice>,
    #[command(flatten)]
    model: ModelArgs,
}

#[derive(Args)]
struct InspectArgs {
    /// A safetensors file, a checkpoint directory, or its model.safetensors.index.json.
    checkpoint: PathBuf,
    /// The preset to check shapes against (default: guessed from the hidden size).
    #[arg(long, value_enum)]
    preset: Option<Preset>,
    /// Write the listing as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum BenchOp {
    /// The V4.1 seam (carried pre-mix): issue 5's targets.
    Seam,
    /// The V4 seam (this seam's own pre-mix).
    SeamV4,
    /// The compressor projection, beside cuBLAS (GPU only).
    Projection,
    /// The V4.1 seam and the projection.
    All,
}

impl BenchOp {
    /// The seam op it times (the V4.1 seam unless `seam-v4`).
    fn seam_op(self) -> Op {
        if self == BenchOp::SeamV4 {
            Op::SeamV4
        } else {
            Op::Seam
        }
    }
}

#[derive(Args)]
struct BenchArgs {
    #[arg(long, value_enum, default_value = "auto")]
    backend: BackendChoice,
    #[command(flatten)]
    model: ModelArgs,
    /// Token counts (default: 1,4,16,64,128,512,2048,8192,16384 on the GPU; up to 2048 on the CPU).
    #[arg(long, value_delimiter = ',', value_parser = at_least_one)]
    tokens: Vec<usize>,
    /// What to time.
    #[arg(long, value_enum, default_value = "seam")]
    op: BenchOp,
    /// Seams in the captured chain.
    #[arg(long, default_value_t = 40, value_parser = at_least_one)]
    seams: usize,
    /// Timing rounds.
    #[arg(long, default_value_t = 5, value_parser = at_least_one)]
    rounds: usize,
    /// Replays per round.
    #[arg(long, default_value_t = 20, value_parser = at_least_one)]
    reps: usize,
    /// Skip the unfused baseline (and, with `--op projection`, cuBLAS).
    #[arg(long)]
    no_baseline: bool,
    /// Skip eager (uncaptured) timing.
    #[arg(long)]
    no_eager: bool,
    /// Programmatic dependent launch for the fused kernels under the graph: time with it on,
    /// off, or both side by side.
    #[arg(long, value_enum, default_value = "both")]
    pdl: PdlChoice,
    /// Projection rows M (default: 1,2,4,8,16).
    #[arg(long, value_delimiter = ',', value_parser = at_least_one)]
    proj_m: Vec<usize>,
    /// Projection K (default: 4096,5120,7168).
    #[arg(long, value_delimiter = ',', value_parser = at_least_one)]
    proj_k: Vec<usize>,
    /// Projection N (default: 1024,2048,2560).
    #[arg(long, value_delimiter = ',', value_parser = at_least_one)]
    proj_n: Vec<usize>,
    /// Instead of timing, print where the time of a fused seam (or, with `--op projection`, of a
    /// projection call) goes: phase timestamps from an instrumented build of the kernels, inside
    /// the replayed chain (`MHC_TIMELINE_RAW=dir`: the seam's every block's stamps as JSON there).
    #[arg(long)]
    timeline: bool,
    /// Write the rows as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the plot to STEM.svg and STEM.png.
    #[arg(long)]
    plot: Option<PathBuf>,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum PdlChoice {
    On,
    Off,
    Both,
}

impl PdlChoice {
    fn modes(self) -> Vec<bool> {
        match self {
            PdlChoice::On => vec![true],
            PdlChoice::Off => vec![false],
            PdlChoice::Both => vec![false, true],
        }
    }
}

#[derive(Args)]
struct SampleArgs {
    #[arg(long, value_enum)]
    op: Op,
    #[arg(long, default_value_t = 4)]
    tokens: usize,
    /// Include a norm_weight.
    #[arg(long)]
    norm: bool,
    #[arg(long)]
    output: PathBuf,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    model: ModelArgs,
}

#[derive(Args)]
struct KernelsArgs {
    /// Target architecture.
    #[arg(long, default_value = "sm_90")]
    arch: String,
    #[arg(long)]
    json: Option<PathBuf>,
    /// Compile the instrumented kernels of `mhc bench --timeline` (MHC_TIMELINE) instead, which
    /// also fills the kernel cache for them (MHC_CACHE_DIR), e.g. to carry it to a GPU machine.
    /// Their spills are reported but do not fail the command (a measuring build).
    #[arg(long)]
    timeline: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let cmd = cli.cmd.unwrap_or(Cmd::Check(CheckArgs {
        backend: BackendChoice::Auto,
        path: None,
        model: ModelArgs {
            presets: vec![],
            hiddens: vec![],
            hc_eps: None,
            rms_eps: None,
            norm_eps: None,
            sinkhorn_iters: None,
            post_mult: None,
            streams: None,
        },
        tokens: vec![],
        ops: vec![],
        seed: None,
        json: None,
        proj_n: check::PROJ_N,
    }));
    let r = match cmd {
        Cmd::Check(a) => cmd_check(a),
        Cmd::Run(a) => cmd_run(a).map(|_| true),
        Cmd::Inspect(a) => cmd_inspect(a),
        Cmd::Bench(a) => cmd_bench(a).map(|_| true),
        Cmd::Sample(a) => cmd_sample(a).map(|_| true),
        Cmd::Kernels(a) => cmd_kernels(a),
        Cmd::Plot(a) => cmd_plot(a).map(|_| true),
        Cmd::Info => cmd_info().map(|_| true),
    };
    match r {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// The backend a command runs on, and a description of it.
fn backend(choice: BackendChoice, path: Option<PathChoice>) -> Result<(Box<dyn Backend>, String)> {
    let gpu = || -> Result<(Box<dyn Backend>, String)> {
        let e = CudaEngine::from_env()?;
        if let Some(p) = path {
            e.set_path(p);
        }
        let d = format!(
            "cuda: {} ({}, driver {}, {} kernel modules from cache)",
            e.info().name,
            e.info().arch,
            e.info().driver_version,
            e.cached_modules()
        );
        Ok((Box::new(e), d))
    };
    match choice {
        BackendChoice::Cpu => Ok((Box::new(CpuBackend), "cpu: the reference".into())),
        BackendChoice::Cuda => gpu(),
        BackendChoice::Auto => match cuda::probe(0) {
            Ok(_) => gpu(),
            Err(why) => Ok((
                Box::new(CpuBackend),
                format!("cpu: the reference (no GPU: {why})"),
            )),
        },
    }
}

fn bar(len: u64) -> ProgressBar {
    let b = ProgressBar::new(len);
    if let Ok(s) = ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed} {msg}") {
        b.set_style(s);
    }
    b
}

fn cmd_check(a: CheckArgs) -> Result<bool> {
    let (be, desc) = backend(a.backend, a.path)?;
    println!("backend {desc}");
    let gpu = be.name() == "cuda";
    let tokens = if !a.tokens.is_empty() {
        a.tokens.clone()
    } else if gpu {
        vec![1, 2, 3, 7, 16, 33, 128, 300, 1000]
    } else {
        vec![1, 3, 17, 128]
    };
    let seed = a.seed.unwrap_or_else(check::fresh_seed);
    println!("seed {seed} (reproduce with --seed {seed})");
    let cfgs = a.model.configs(&Preset::ALL)?;
    let mut cases: Vec<(Config, Case)> = Vec::new();
    for cfg in &cfgs {
        for c in check::standard_cases(&tokens) {
            if a.ops.is_empty() || a.ops.contains(&c.op) {
                cases.push((cfg.clone(), c));
            }
        }
    }
    let pb = bar(cases.len() as u64);
    let mut reports: Vec<CaseReport> = Vec::new();
    let mut errors = 0;
    for (i, (cfg, c)) in cases.iter().enumerate() {
        pb.set_message(format!("H={} {} T={}", cfg.hidden, c.op, c.t));
        match check::run_case_n(be.as_ref(), cfg, *c, seed.wrapping_add(i as u64), a.proj_n) {
            Ok(r) => reports.push(r),
            Err(e) => {
                pb.suspend(|| eprintln!("H={} {} T={}: error: {e}", cfg.hidden, c.op, c.t));
                errors += 1;
            }
        }
        pb.inc(1);
    }
    pb.finish_and_clear();
    println!(
        "{:<6} {:<22} {:>6} {:>5} {:>4} {:<8} {:<34} {:>11} {:>9}  result",
        "H", "op", "T", "norm", "fp8", "path", "worst metric", "value", "bound"
    );
    let mut fails = 0;
    for r in &reports {
        let w = r.worst();
        let pass = r.pass();
        fails += usize::from(!pass);
        println!(
            "{:<6} {:<22} {:>6} {:>5} {:>4} {:<8} {:<34} {:>11.3e} {:>9.1e}  {}",
            r.h,
            r.label(),
            r.t,
            if r.norm { "yes" } else { "no" },
            if r.fp8 { "yes" } else { "no" },
            r.route.path,
            w.map(|m| m.name.as_str()).unwrap_or("-"),
            w.map(|m| m.value).unwrap_or(0.0),
            w.map(|m| m.bound).unwrap_or(0.0),
            if pass { "pass" } else { "FAIL" }
        );
        if !pass {
            for m in r.metrics.iter().filter(|m| !m.pass) {
                println!(
                    "        {}: {} (bound {}) {}",
                    m.name, m.value, m.bound, m.detail
                );
            }
        }
    }
    if let Some(p) = &a.json {
        write_json(p, &reports)?;
    }
    println!(
        "{} cases: {} passed, {} failed, {} errors",
        cases.len(),
        reports.len() - fails,
        fails,
        errors
    );
    Ok(fails == 0 && errors == 0)
}

fn cmd_run(a: RunArgs) -> Result<()> {
    let (be, desc) = backend(a.backend, a.path)?;
    let cfg = a.model.configs(&[Preset::V41Flash])?.remove(0);
    let inputs = mhc::tensor::read_safetensors(&a.input)?;
    let (outputs, route) = ops::run_map(be.as_ref(), a.op, &cfg, &inputs, a.fp8, a.bf16_out)?;
    mhc::tensor::write_safetensors(&a.output, &outputs)?;
    eprintln!("backend {desc}");
    eprintln!("route {route}");
    for (name, t) in &outputs {
        eprintln!("wrote {name} {:?} {}", t.shape, t.dtype());
    }
    Ok(())
}

fn stats(v: &[f32]) -> (f32, f32, f32, f32) {
    let n = v.len().max(1) as f64;
    let mean = v.iter().map(|x| *x as f64).sum::<f64>() / n;
    let var = v.iter().map(|x| (*x as f64 - mean).powi(2)).sum::<f64>() / n;
    let (mn, mx) = v
        .iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), x| {
            (a.min(*x), b.max(*x))
        });
    (mn, mx, mean as f32, var.sqrt() as f32)
}

fn cmd_inspect(a: InspectArgs) -> Result<bool> {
    let ck = mhc::weights::Checkpoint::open(&a.checkpoint)?;
    let names: Vec<String> = ck
        .names()
        .filter(|n| n.contains("hc_") || n.ends_with("norm.weight"))
        .map(|s| s.to_string())
        .collect();
    let preset = match a.preset {
        Some(p) => p,
        None => {
            // Guess H from an attention norm weight's length, else from a seam's fn, [n (n + 2),
            // n H] with the presets' n = 4.
            let shape_of = |suffix: &str| {
                names
                    .iter()
                    .find(|n| n.ends_with(suffix))
                    .and_then(|n| ck.tensor(n).ok().map(|t| t.shape.to_vec()))
            };
            let c = Preset::V41Flash.config();
            let from_norm = shape_of("attn_norm.weight").and_then(|s| s.first().copied());
            let from_fn = || {
                ["hc_attn_fn", "hc_ffn_fn"].iter().find_map(|suffix| {
                    shape_of(suffix)
                        .filter(|s| s.len() == 2 && s[0] == c.mixes() && s[1] % c.n == 0)
                        .map(|s| s[1] / c.n)
                })
            };
            from_norm
                .or_else(from_fn)
                .and_then(Preset::for_hidden)
                .ok_or_else(|| {
                    Error::Invalid(
                        "cannot guess the preset from the checkpoint (no attn_norm.weight, \
                         hc_attn_fn or hc_ffn_fn of a preset's hidden size); pass --preset"
                            .into(),
                    )
                })?
        }
    };
    let mut cfg = preset.config();
    let layers = ck.layer_count();
    println!(
        "{}: {} mHC tensors, {} layers with mHC weights; checking against {} (H={}, n={}, {} layers)",
        a.checkpoint.display(),
        names.len(),
        layers,
        preset.name(),
        cfg.hidden,
        cfg.n,
        cfg.layers
    );
    println!(
        "{:<34} {:<6} {:<16} {:>11} {:>11} {:>11} {:>11}",
        "tensor", "dtype", "shape", "min", "max", "mean", "std"
    );
    let mut rows = Vec::new();
    for n in &names {
        let t = ck.tensor(n)?;
        let ht = mhc::tensor::HostTensor::from_view(n, t.dtype, t.shape, t.bytes)?;
        let v = ht.to_f32_lossless(n).unwrap_or_default();
        let (mn, mx, mean, std) = stats(&v);
        println!(
            "{:<34} {:<6} {:<16} {:>11.4e} {:>11.4e} {:>11.4e} {:>11.4e}",
            n,
            ht.dtype().to_string(),
            format!("{:?}", t.shape),
            mn,
            mx,
            mean,
            std
        );
        rows.push(
            serde_json::json!({"name": n, "dtype": ht.dtype().to_string(), "shape": t.shape,
            "min": mn, "max": mx, "mean": mean, "std": std}),
        );
    }
    // Load every seam the checkpoint has against the preset: shapes and dtypes are checked there.
    cfg.layers = layers;
    let mut ok = layers > 0;
    let mut problems = Vec::new();
    if layers == 0 {
        problems.push("no layers.{i}.hc_attn_fn tensor found".to_string());
    }
    for i in 0..layers {
        for kind in [mhc::weights::SeamKind::Attn, mhc::weights::SeamKind::Ffn] {
            if let Err(e) = ck.seam(&cfg, i, kind) {
                ok = false;
                problems.push(e.to_string());
            }
        }
    }
    if ck.names().any(|n| n == "hc_head_fn")
        && let Err(e) = ck.head(&cfg)
    {
        ok = false;
        problems.push(e.to_string());
    }
    for p in &problems {
        println!("problem: {p}");
    }
    println!(
        "{}",
        if ok {
            "all mHC tensors match the preset"
        } else {
            "MISMATCH"
        }
    );
    if let Some(p) = &a.json {
        let s = serde_json::json!({"preset": preset.name(), "layers": layers, "tensors": rows, "problems": problems});
        std::fs::write(p, s.to_string()).map_err(|source| Error::Io {
            path: p.clone(),
            source,
        })?;
    }
    Ok(ok)
}

fn cmd_bench(a: BenchArgs) -> Result<()> {
    if a.timeline && a.op == BenchOp::SeamV4 {
        return Err(Error::Unsupported(
            "--timeline follows the V4.1 seam (--op seam) or the projection (--op projection)"
                .into(),
        ));
    }
    let (be, desc) = backend(a.backend, None)?;
    println!("backend {desc}");
    let cfgs = a.model.configs(&[Preset::V41Flash])?;
    let mut rows = Vec::new();
    if a.timeline && be.name() != "cuda" {
        return Err(Error::Unsupported(
            "--timeline instruments the CUDA kernels: it needs --backend cuda and a GPU".into(),
        ));
    }
    if be.name() == "cuda" && a.timeline {
        let e = CudaEngine::new(cuda::EngineOptions {
            timeline: true,
            ..cuda::EngineOptions::from_env()?
        })?;
        if a.op == BenchOp::Projection {
            // Every (M, K, N) of the lists (default: M = 1, K = 4096, N = 1024).
            let or = |v: &Vec<usize>, d: usize| if v.is_empty() { vec![d] } else { v.clone() };
            let mut rows = Vec::new();
            for m in or(&a.proj_m, 1) {
                for k in or(&a.proj_k, 4096) {
                    for n in or(&a.proj_n, 1024) {
                        rows.extend(mhc::bench::gpu::projection_timeline(
                            &e,
                            (m, k, n),
                            &a.pdl.modes(),
                            a.seams,
                        )?);
                    }
                }
            }
            mhc::bench::gpu::print_projection_timeline(&rows);
            if let Some(p) = &a.json {
                write_json(p, &rows)?;
            }
            return Ok(());
        }
        let tokens = if a.tokens.is_empty() {
            vec![1, 4, 16, 64, 128, 512, 2048]
        } else {
            a.tokens.clone()
        };
        let mut rows = Vec::new();
        for cfg in &cfgs {
            rows.extend(mhc::bench::gpu::seam_timeline(
                &e,
                cfg,
                &tokens,
                &a.pdl.modes(),
                a.seams,
            )?);
        }
        mhc::bench::gpu::print_timeline(&rows);
        if let Some(p) = &a.json {
            write_json(p, &rows)?;
        }
        return Ok(());
    }
    if be.name() == "cuda" {
        let e = CudaEngine::from_env()?;
        let o = mhc::bench::gpu::GpuBenchOptions {
            seams: a.seams,
            rounds: a.rounds,
            reps: a.reps,
            baseline: !a.no_baseline,
            eager: !a.no_eager,
            pdl: a.pdl.modes(),
            ..Default::default()
        };
        let copy = mhc::bench::gpu::copy_bandwidth(&e, 1 << 30)?;
        println!("copy bandwidth {copy:.0} GB/s (1 GiB, read + write)");
        let nodes = mhc::bench::gpu::node_rows(&e, copy, &o)?;
        for r in &nodes {
            println!(
                "graph node (empty kernel, {} block(s), PDL {}): {:.2} us",
                r.tokens,
                if r.pdl { "on" } else { "off" },
                r.us_per_seam
            );
        }
        rows.extend(nodes);
        let tokens = if a.tokens.is_empty() {
            mhc::bench::TOKENS.to_vec()
        } else {
            a.tokens.clone()
        };
        if a.op != BenchOp::Projection {
            let op = a.op.seam_op();
            let pb = bar((tokens.len() * cfgs.len()) as u64);
            for cfg in &cfgs {
                rows.extend(mhc::bench::gpu::seam_rows(
                    &e, op, cfg, &tokens, copy, &o, &pb,
                )?);
            }
            pb.finish_and_clear();
        }
        if matches!(a.op, BenchOp::Projection | BenchOp::All) {
            let or =
                |v: &Vec<usize>, d: &[usize]| if v.is_empty() { d.to_vec() } else { v.clone() };
            let ms = or(&a.proj_m, &[1, 2, 4, 8, 16]);
            let ks = or(&a.proj_k, &[4096, 5120, 7168]);
            let ns = or(&a.proj_n, &[1024, 2048, 2560]);
            let pb = bar((ms.len() * ks.len() * ns.len()) as u64);
            rows.extend(mhc::bench::gpu::projection_rows(
                &e, &ms, &ks, &ns, copy, &o, &pb,
            )?);
            pb.finish_and_clear();
        }
    } else {
        let tokens = if a.tokens.is_empty() {
            vec![1, 4, 16, 64, 128, 512, 2048]
        } else {
            a.tokens.clone()
        };
        if a.op == BenchOp::Projection {
            return Err(Error::Unsupported(
                "--op projection times the CUDA kernels against cuBLAS: it needs --backend cuda and a GPU"
                    .into(),
            ));
        }
        let op = a.op.seam_op();
        let pb = bar((tokens.len() * cfgs.len()) as u64);
        for cfg in &cfgs {
            rows.extend(mhc::bench::cpu::seam_rows(op, cfg, &tokens, 5, &pb)?);
        }
        pb.finish_and_clear();
    }
    mhc::bench::print_table(&rows);
    if let Some(p) = &a.json {
        write_json(p, &rows)?;
    }
    if let Some(stem) = &a.plot {
        mhc::bench::plot::write(&rows, stem)?;
    }
    Ok(())
}

fn cmd_sample(a: SampleArgs) -> Result<()> {
    let cfg = a.model.configs(&[Preset::V41Flash])?.remove(0);
    let spec = mhc::synth::InputSpec {
        op: a.op,
        t: a.tokens,
        norm: a.norm || a.op == Op::Rmsnorm,
        proj_nk: (1024, cfg.hidden),
    };
    let m = mhc::synth::inputs(&cfg, &spec, a.seed);
    mhc::tensor::write_safetensors(&a.output, &m)?;
    for (name, t) in &m {
        eprintln!("wrote {name} {:?} {}", t.shape, t.dtype());
    }
    Ok(())
}

fn cmd_kernels(a: KernelsArgs) -> Result<bool> {
    // The report comes from ptxas, which a compile served from the CUDA driver's compute cache
    // does not run (nvrtc::compile_fresh).
    // SAFETY: set before this command starts any thread; nothing else reads the environment now.
    unsafe { std::env::set_var("CUDA_CACHE_DISABLE", "1") };
    let v = cuda::nvrtc::version()?;
    let defines: &[&str] = if a.timeline { &["MHC_TIMELINE"] } else { &[] };
    println!(
        "NVRTC {}.{}, target {}{}",
        v.0,
        v.1,
        a.arch,
        if a.timeline {
            ", instrumented (MHC_TIMELINE)"
        } else {
            ""
        }
    );
    // The kernel column fits the longest entry point's name.
    let wk = cuda::kernels::ALL
        .iter()
        .flat_map(|m| m.entry_points())
        .map(str::len)
        .max()
        .unwrap_or(24);
    println!(
        "{:<wk$} {:>5} {:>6} {:>8} {:>8} {:>7}",
        "kernel", "regs", "stack", "spill st", "spill ld", "smem"
    );
    let mut ok = true;
    let mut all = Vec::new();
    for m in cuda::kernels::ALL {
        let c = cuda::nvrtc::compile_fresh(&m, &a.arch, defines)?;
        let rep = cuda::nvrtc::parse_report(&c.log);
        for f in m.entry_points() {
            match rep.iter().find(|r| r.name == *f) {
                Some(r) => {
                    let spill = r.spill_stores + r.spill_loads > 0;
                    // The instrumented build may spill (its stamps take registers): it measures,
                    // it does not serve; its spills are shown, not failed.
                    ok &= !spill || a.timeline;
                    println!(
                        "{:<wk$} {:>5} {:>6} {:>8} {:>8} {:>7}{}",
                        r.name,
                        r.registers,
                        r.stack,
                        r.spill_stores,
                        r.spill_loads,
                        r.smem,
                        if spill { "  SPILL" } else { "" }
                    );
                    all.push(r.clone());
                }
                None => {
                    ok = false;
                    println!("{f:<18} no ptxas report");
                }
            }
        }
    }
    if let Some(p) = &a.json {
        write_json(p, &all)?;
    }
    println!(
        "{}",
        if ok && a.timeline {
            "all kernels compile (instrumented: spills shown, not failed)"
        } else if ok {
            "all kernels compile without spills"
        } else {
            "FAILED"
        }
    );
    Ok(ok)
}

fn cmd_plot(a: PlotArgs) -> Result<()> {
    let mut rows: Vec<mhc::bench::BenchRow> = Vec::new();
    for p in &a.json {
        let text = std::fs::read_to_string(p).map_err(|source| Error::Io {
            path: p.clone(),
            source,
        })?;
        let mut r: Vec<mhc::bench::BenchRow> =
            serde_json::from_str(&text).map_err(|e| Error::File {
                path: p.clone(),
                message: format!("not a list of benchmark rows: {e}"),
            })?;
        rows.append(&mut r);
    }
    if rows.is_empty() {
        return Err(Error::Invalid(
            "no benchmark rows in the JSON given: nothing to plot".into(),
        ));
    }
    mhc::bench::plot::write(&rows, &a.out)?;
    eprintln!("wrote {0}.svg and {0}.png", a.out.display());
    Ok(())
}

fn cmd_info() -> Result<()> {
    match cuda::nvrtc::version() {
        Ok(v) => println!("NVRTC {}.{}", v.0, v.1),
        Err(e) => println!("NVRTC: {e}"),
    }
    match cuda::probe(0) {
        Ok(d) => println!(
            "GPU {} ({}), {} SMs, {} MiB, driver {}",
            d.name,
            d.arch,
            d.sm_count,
            d.total_mem >> 20,
            d.driver_version
        ),
        Err(e) => println!("GPU: {e}"),
    }
    println!("CPU threads {}", rayon::current_num_threads());
    Ok(())
}

/// Writes `v` as pretty JSON to `path`.
fn write_json<T: serde::Serialize>(path: &std::path::Path, v: &T) -> Result<()> {
    let s = serde_json::to_string_pretty(v).map_err(|e| Error::Invalid(e.to_string()))?;
    std::fs::write(path, s).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}
