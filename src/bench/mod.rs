//! The benchmark behind `mhc bench` (protocol of GUIDE.md).
//!
//! A seam is post_map + collapse with the carried pre + rmsnorm + gates (the V4.1 seam). On the
//! GPU a chain of S = 40 seams with distinct weights is captured in one CUDA graph and replayed;
//! each replay is timed with events and the median over rounds x replays, divided by S, is the
//! time per seam. Launches per seam are counted from the captured graph's kernel nodes. The bytes
//! of the floor model (GUIDE.md) over the copy bandwidth measured in the same run give the floor.
//! The same chain built from the unfused path is the baseline, and the same seams called eagerly
//! show the host overhead per call. Without a GPU the CPU reference is timed in the same format.

pub mod cpu;
pub mod gpu;
pub mod plot;

use serde::{Deserialize, Serialize};

/// One measured configuration (the JSON row of GUIDE.md, plus context).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BenchRow {
    /// `cuda` or `cpu`.
    pub backend: String,
    /// `fused`, `unfused`, `cpu`, `cublas-f32`, `cublas-bf16`; for the projection also `fused-bf16`
    /// (ours with bf16 output) and `w-stream` (a pure read of w).
    pub path: String,
    /// `graph` (replayed CUDA graph), `eager` (one host call per seam) or `host`.
    pub mode: String,
    /// The op timed (`seam` or `projection`).
    pub op: String,
    /// Hidden size (K for the projection).
    pub hidden: usize,
    /// Tokens (M for the projection).
    pub tokens: usize,
    /// N (projection only).
    #[serde(default)]
    pub n: usize,
    /// Microseconds per seam (per call for the projection): the median.
    pub us_per_seam: f64,
    /// Spread: (max - min) / median of the samples.
    pub spread: f64,
    /// Kernel launches per seam, from the graph's nodes (0 when not captured).
    pub launches_per_seam: f64,
    /// Bytes per seam under the floor model.
    pub bytes_per_seam: f64,
    /// Achieved GB/s under the floor model.
    pub gbps: f64,
    /// gbps over the copy bandwidth of the same run, in percent.
    pub pct_of_copy_bw: f64,
    /// The copy bandwidth of the same run (GB/s, bytes read + written).
    pub copy_gbps: f64,
    /// Floor: bytes over copy bandwidth, in microseconds.
    pub floor_us: f64,
    /// GPU (or CPU) name.
    pub gpu: String,
    /// Driver version (GPU only).
    pub driver: String,
    /// Commit of the binary.
    pub commit: String,
    /// UTC date of the run.
    pub date: String,
    /// The fused kernel's launch plan, when relevant.
    #[serde(default)]
    pub plan: String,
    /// Timed samples behind the median.
    #[serde(default)]
    pub samples: usize,
    /// Host time per call in eager mode (enqueue cost), microseconds.
    #[serde(default)]
    pub host_us_per_call: f64,
    /// Whether the fused kernels ran with programmatic dependent launch (each call's launch and
    /// weight fetch overlapping the end of the previous kernel in the stream).
    #[serde(default)]
    pub pdl: bool,
}

/// GUIDE.md's bytes per seam: fn once (24 x 4H f32) plus, per token, x and r read and r' and the
/// layer input written (20 H bytes of bf16).
pub fn seam_bytes(cfg: &crate::Config, t: usize) -> f64 {
    (cfg.mixes() * cfg.k() * 4) as f64 + (t as f64) * (2 * cfg.hidden * (2 * cfg.n + 2)) as f64
}

/// The default token sweep.
pub const TOKENS: [usize; 9] = [1, 4, 16, 64, 128, 512, 2048, 8192, 16384];

/// Median and relative spread of samples.
pub fn median_spread(v: &mut [f64]) -> (f64, f64) {
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let med = if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        0.5 * (v[v.len() / 2 - 1] + v[v.len() / 2])
    };
    (med, (v[v.len() - 1] - v[0]) / med)
}

/// The commit the binary was built from.
pub fn commit() -> String {
    std::env::var("MHC_COMMIT").unwrap_or_else(|_| env!("MHC_GIT_COMMIT").to_string())
}

/// Today's UTC date (YYYY-MM-DD).
pub fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0) as i64;
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = secs.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Prints rows as a table.
pub fn print_table(rows: &[BenchRow]) {
    println!(
        "{:<6} {:<12} {:<6} {:>4} {:>7} {:>6} {:>6} {:>11} {:>7} {:>9} {:>11} {:>9} {:>8} {:>7}",
        "back",
        "path",
        "mode",
        "pdl",
        "op",
        "H",
        "T",
        "us/seam",
        "spread",
        "launches",
        "bytes",
        "GB/s",
        "%copy",
        "floor"
    );
    for r in rows {
        let t = if r.op == "projection" {
            format!("{}x{}", r.tokens, r.n)
        } else {
            r.tokens.to_string()
        };
        println!(
            "{:<6} {:<12} {:<6} {:>4} {:>7} {:>6} {:>6} {:>11.2} {:>6.1}% {:>9.1} {:>11.3e} {:>9.1} {:>7.1}% {:>7.2}",
            r.backend,
            r.path,
            r.mode,
            if r.pdl { "on" } else { "off" },
            if r.op == "projection" {
                "proj"
            } else {
                r.op.as_str()
            },
            r.hidden,
            t,
            r.us_per_seam,
            100.0 * r.spread,
            r.launches_per_seam,
            r.bytes_per_seam,
            r.gbps,
            r.pct_of_copy_bw,
            r.floor_us
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_bytes_match_the_guide() {
        let cfg = crate::Preset::V41Flash.config();
        // GUIDE.md: H=5120: T=1 -> 2.08 MB, T=128 -> 15.1 MB, T=16384 -> 1.68 GB.
        assert!((seam_bytes(&cfg, 1) / 1e6 - 2.07).abs() < 0.02);
        assert!((seam_bytes(&cfg, 128) / 1e6 - 15.1).abs() < 0.1);
        assert!((seam_bytes(&cfg, 16384) / 1e9 - 1.68).abs() < 0.01);
    }

    #[test]
    fn median_and_date() {
        let mut v = vec![3.0, 1.0, 2.0];
        assert_eq!(median_spread(&mut v), (2.0, 1.0));
        assert_eq!(today().len(), 10);
    }
}
