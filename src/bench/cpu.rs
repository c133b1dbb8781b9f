//! CPU timing of the reference, in the benchmark's format (no graph: each seam is one call).

use super::{BenchRow, median_spread, seam_bytes};
use crate::error::Result;
use crate::ops::{Backend, CpuBackend, Op, OpArgs};
use crate::spec::Config;
use crate::weights::SeamWeights;
use indicatif::ProgressBar;

/// Host memory copy bandwidth (GB/s, bytes read + written) over 256 MiB: the median of 5.
pub fn copy_bandwidth() -> f64 {
    let n = 32 << 20; // 8-byte words: 256 MiB
    let src: Vec<u64> = (0..n as u64).collect();
    let mut dst = vec![0u64; n];
    let mut us: Vec<f64> = (0..5)
        .map(|_| {
            let t0 = std::time::Instant::now();
            dst.copy_from_slice(&src);
            std::hint::black_box(&dst);
            t0.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    let (med, _) = median_spread(&mut us);
    2.0 * (n * 8) as f64 / (med * 1e-6) / 1e9
}

/// Times the reference seam (`Op::Seam`, the V4.1 seam, or `Op::SeamV4`) at each T: at least
/// `min_samples` calls, more while under ~1 s.
pub fn seam_rows(
    op: Op,
    cfg: &Config,
    tokens: &[usize],
    min_samples: usize,
    bar: &ProgressBar,
) -> Result<Vec<BenchRow>> {
    let copy = copy_bandwidth();
    let w = SeamWeights::synthetic(cfg, 1000);
    let cpu_name = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "cpu".into());
    let mut rows = Vec::new();
    for &t in tokens {
        bar.set_message(format!("cpu H={} T={t}", cfg.hidden));
        let (n, h) = (cfg.n, cfg.hidden);
        let x = super::gpu::random_bf16(t * h, 1.0, 11);
        let r = super::gpu::random_bf16(t * n * h, 1.0, 12);
        let (post, comb, pre) = crate::synth::carried(cfg, t, 13);
        let norm = Some(&w.norm_weight[..]);
        let args = if op == Op::SeamV4 {
            OpArgs::seam_v4(cfg, &x, &r, &post, &comb, w.mix(), norm)?
        } else {
            OpArgs::seam(cfg, &x, &r, &post, &comb, &pre, w.mix(), norm)?
        };
        let mut us = Vec::new();
        let start = std::time::Instant::now();
        while us.len() < min_samples || (start.elapsed().as_secs_f64() < 1.0 && us.len() < 100) {
            let t0 = std::time::Instant::now();
            std::hint::black_box(CpuBackend.execute(&args)?);
            us.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        let (med, spread) = median_spread(&mut us);
        let bytes = seam_bytes(cfg, t);
        let gbps = bytes / (med * 1e3);
        rows.push(BenchRow {
            backend: "cpu".into(),
            path: "cpu".into(),
            mode: "host".into(),
            op: op.to_string(),
            hidden: h,
            tokens: t,
            n: 0,
            us_per_seam: med,
            spread,
            launches_per_seam: 0.0,
            bytes_per_seam: bytes,
            gbps,
            pct_of_copy_bw: 100.0 * gbps / copy,
            copy_gbps: copy,
            floor_us: bytes / (copy * 1e3),
            gpu: format!("{cpu_name} ({} threads)", rayon::current_num_threads()),
            driver: String::new(),
            commit: super::commit(),
            date: super::today(),
            plan: String::new(),
            samples: us.len(),
            host_us_per_call: med,
            pdl: false,
        });
        bar.inc(1);
    }
    Ok(rows)
}
