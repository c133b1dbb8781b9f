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

/// The ptxas report of kernel `f` in a compile log.
fn report_of(c: &nvrtc::Compiled, f: &str) -> FunctionReport {
    nvrtc::parse_report(&c.log)
        .into_iter()
        .find(|r| r.name == f)
        .unwrap_or_else(|| panic!("no ptxas report for {f} in:\n{}", c.log))
}

#[test]
fn every_kernel_compiles_for_sm90_without_spills() {
    if !nvrtc_here() {
        return;
    }
    for m in kernels::ALL {
        // Compiled now, not read from the kernel cache: the report must be this compile's.
        let c = nvrtc::compile_fresh(&m, "sm_90", &[]).unwrap_or_else(|e| panic!("{e}"));
        for f in m.functions {
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
        }
    }
}

/// The instrumented build of `mhc bench --timeline` compiles too (it may use more registers; it
/// is a measuring tool, not a production kernel).
#[test]
fn timeline_build_compiles() {
    if !nvrtc_here() {
        return;
    }
    for m in [&kernels::SEAM, &kernels::PROJECTION] {
        let c =
            nvrtc::compile_fresh(m, "sm_90", &["MHC_TIMELINE"]).unwrap_or_else(|e| panic!("{e}"));
        for f in m.functions {
            let r = report_of(&c, f);
            eprintln!(
                "{:<18} regs {:>3} spill st/ld {}/{} (MHC_TIMELINE)",
                r.name, r.registers, r.spill_stores, r.spill_loads
            );
        }
    }
}

/// The kernel cache: a warm compile reads the CUBIN and its report from the cache; an entry whose
/// log lost its ptxas report (a broken or partly written entry) is compiled again and rewritten.
#[test]
fn the_cache_serves_whole_entries_only() {
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
    for f in m.functions {
        report_of(&warm, f);
    }
    // Cut every cached log to its front-end part (no ptxas lines).
    let mut cut = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "log") {
            let log = std::fs::read_to_string(&p).unwrap();
            let front: String = log
                .lines()
                .filter(|l| !l.contains("ptxas"))
                .map(|l| format!("{l}\n"))
                .collect();
            std::fs::write(&p, front).unwrap();
            cut += 1;
        }
    }
    assert_eq!(cut, 1, "one module, one log");
    let again = nvrtc::compile_cached_in(m, "sm_90", &[], &dir).unwrap();
    assert!(
        !again.cached,
        "an entry without its report must be compiled again"
    );
    for f in m.functions {
        report_of(&again, f);
    }
    assert!(
        nvrtc::compile_cached_in(m, "sm_90", &[], &dir)
            .unwrap()
            .cached
    );
    // No temporary files are left behind.
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let ext = p.extension().unwrap().to_string_lossy().into_owned();
        assert!(
            ext == "log" || ext == "cubin",
            "left behind: {}",
            p.display()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
