//! Every kernel compiles with NVRTC for sm_90 without register spills. Runs wherever NVRTC can be
//! loaded (no GPU needed); CI sets MHC_REQUIRE_NVRTC=1 so that a missing NVRTC fails instead of
//! skipping.

use mhc::cuda::nvrtc::FunctionReport;
use mhc::cuda::{kernels, nvrtc};

/// Whether NVRTC can be loaded; a missing NVRTC skips the test unless MHC_REQUIRE_NVRTC is set.
fn nvrtc_here() -> bool {
    if nvrtc::available() {
        return true;
    }
    assert!(
        std::env::var("MHC_REQUIRE_NVRTC").is_err(),
        "MHC_REQUIRE_NVRTC is set but NVRTC cannot be loaded"
    );
    eprintln!("skipped: NVRTC not available");
    false
}

/// Whether to run a report-reading test in this process: yes when `CUDA_CACHE_DISABLE=1` is set.
/// Otherwise the test runs in a child process of this test binary with it set, and this process
/// only checks that the child ran it and passed: where a CUDA driver is installed, NVRTC may serve
/// a compile from the driver's compute cache, and such a compile has no ptxas report
/// (`nvrtc::compile_fresh`). Setting the variable here instead would race the other test threads.
fn here_with_compute_cache_disabled(test: &str) -> bool {
    if std::env::var_os("CUDA_CACHE_DISABLE").is_some_and(|v| v == "1") {
        return true;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env("CUDA_CACHE_DISABLE", "1")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.contains("1 passed"),
        "{test} with CUDA_CACHE_DISABLE=1:\n{text}"
    );
    eprint!("{text}");
    false
}

/// The ptxas report of kernel `f` in a compile log.
fn report_of(c: &nvrtc::Compiled, f: &str) -> FunctionReport {
    nvrtc::parse_report(&c.log)
        .into_iter()
        .find(|r| r.name == f)
        .unwrap_or_else(|| {
            panic!(
                "no ptxas report for {f} (was the compile served from the CUDA driver's compute \
                 cache? CUDA_CACHE_DISABLE=1 prevents that) in:\n{}",
                c.log
            )
        })
}

#[test]
fn every_kernel_compiles_for_sm90_without_spills() {
    if !nvrtc_here()
        || !here_with_compute_cache_disabled("every_kernel_compiles_for_sm90_without_spills")
    {
        return;
    }
    for m in kernels::ALL {
        // Compiled now, not read from the kernel cache: the report must be this compile's.
        let c = nvrtc::compile_fresh(&m, "sm_90", &[]).unwrap_or_else(|e| panic!("{e}"));
        for f in m.entry_points() {
            let r = report_of(&c, f);
            eprintln!(
                "{:<18} regs {:>3} stack {:>4} spill st/ld {}/{} smem {}",
                r.name, r.registers, r.stack, r.spill_stores, r.spill_loads, r.smem
            );
            assert_eq!(
                (r.spill_stores, r.spill_loads),
                (0, 0),
                "{f} spills registers:\n{}",
                c.log
            );
            // The stream kernels' dynamic shared memory (fn's slice, the stages) must start on a
            // 128-byte boundary: static data that moved it to 16 mod 128 cost them 10-16 % on the
            // H200 (PERF_NOTES.md attempt 119), so their static part is none or whole lines.
            if f.starts_with("mhc_seam") && f.ends_with("_st") {
                assert_eq!(
                    r.smem % 128,
                    0,
                    "{f}: {} bytes of static shared memory",
                    r.smem
                );
            }
        }
    }
}

/// The instrumented build of `mhc bench --timeline` compiles too (it may use more registers; it
/// is a measuring tool, not a production kernel).
#[test]
fn timeline_build_compiles() {
    if !nvrtc_here() || !here_with_compute_cache_disabled("timeline_build_compiles") {
        return;
    }
    for m in [&kernels::SEAM, &kernels::PROJECTION] {
        let c =
            nvrtc::compile_fresh(m, "sm_90", &["MHC_TIMELINE"]).unwrap_or_else(|e| panic!("{e}"));
        for f in m.entry_points() {
            let r = report_of(&c, f);
            eprintln!(
                "{:<18} regs {:>3} spill st/ld {}/{} (MHC_TIMELINE)",
                r.name, r.registers, r.spill_stores, r.spill_loads
            );
        }
    }
}

/// The kernel cache: a warm compile reads the CUBIN and its log from the cache, and no temporary
/// file is left behind.
#[test]
fn the_cache_serves_a_warm_start() {
    if !nvrtc_here() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("mhc-cache-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let m = &kernels::UNFUSED;
    let first = nvrtc::compile_cached_in(m, "sm_90", &[], &dir).unwrap();
    assert!(!first.cached);
    let warm = nvrtc::compile_cached_in(m, "sm_90", &[], &dir).unwrap();
    assert!(warm.cached, "the second compile should come from the cache");
    assert_eq!(warm.cubin, first.cubin);
    assert_eq!(warm.log, first.log);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names.len(), 2, "one CUBIN and one log: {names:?}");
    assert!(
        names[0].ends_with(".cubin") && names[1].ends_with(".log"),
        "{names:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
