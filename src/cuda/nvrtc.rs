//! Kernel compilation with NVRTC, an on-disk cache, and the compiler's resource report.
//!
//! Kernels are compiled straight to a CUBIN for the device's architecture (no PTX JIT in the
//! driver), once per engine start, never inside a seam call or a graph capture. The CUBIN and the
//! ptxas report are cached under `$MHC_CACHE_DIR` (default `$XDG_CACHE_HOME/mhc` or
//! `~/.cache/mhc`), keyed by a SHA-256 of the source, the options, the NVRTC version and the
//! architecture, so a warm start compiles nothing.

use super::kernels::KernelModule;
use crate::error::{Error, Result};
use cudarc::nvrtc::{result as nr, sys as ns};
use sha2::{Digest, Sha256};
use std::ffi::CString;
use std::path::PathBuf;

/// True when the NVRTC library can be loaded (checked without panicking).
pub fn available() -> bool {
    // SAFETY: only tries to dlopen the library.
    unsafe { ns::is_culib_present() }
}

/// NVRTC's (major, minor) version.
pub fn version() -> Result<(i32, i32)> {
    if !available() {
        return Err(Error::Cuda(
            "NVRTC (libnvrtc.so) not found: set LD_LIBRARY_PATH to the CUDA or nvidia-cuda-nvrtc lib folder".into(),
        ));
    }
    let (mut a, mut b) = (0, 0);
    // SAFETY: plain out-parameters.
    unsafe { ns::nvrtcVersion(&mut a, &mut b) }
        .result()
        .map_err(|e| Error::Cuda(format!("nvrtcVersion: {e:?}")))?;
    Ok((a, b))
}

/// The options every kernel is compiled with (besides the architecture).
pub fn options(arch: &str) -> Vec<String> {
    vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".into(),
        "--ptxas-options=-v".into(),
        "-lineinfo".into(),
    ]
}

/// A compiled module.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The CUBIN image.
    pub cubin: Vec<u8>,
    /// NVRTC's log (with the ptxas resource report).
    pub log: String,
    /// Whether it came from the disk cache.
    pub cached: bool,
}

/// Where compiled kernels are cached.
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("MHC_CACHE_DIR") {
        return Some(PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(d).join("mhc"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache").join("mhc"))
}

fn cache_key(source: &str, opts: &[String], ver: (i32, i32), arch: &str) -> String {
    let mut h = Sha256::new();
    h.update(source.as_bytes());
    for o in opts {
        h.update(b"\0");
        h.update(o.as_bytes());
    }
    h.update(format!("\0nvrtc {}.{}\0{arch}", ver.0, ver.1).as_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Compiles `module` for `arch` (e.g. `sm_90`), from the cache when possible, with preprocessor
/// macros defined (`-D`; none for the production kernels, `MHC_TIMELINE` for the instrumented
/// build of `mhc bench --timeline`). The macros are part of the cache key.
pub fn compile_with(module: &KernelModule, arch: &str, defines: &[&str]) -> Result<Compiled> {
    compile_opt(module, arch, defines, true, cache_dir())
}

/// [`compile_with`] with the cache in `dir` instead of [`cache_dir`].
pub fn compile_cached_in(
    module: &KernelModule,
    arch: &str,
    defines: &[&str],
    dir: &std::path::Path,
) -> Result<Compiled> {
    compile_opt(module, arch, defines, true, Some(dir.to_path_buf()))
}

/// Compiles `module` with NVRTC now, never from this crate's cache (the result still refreshes
/// it): for checks of the compiler's own report (`mhc kernels`, the spill test), which must
/// describe this compile and not an earlier one.
///
/// Where a CUDA driver is installed, NVRTC also consults the driver's compute cache
/// (`~/.nv/ComputeCache`), and a compile served from it runs no ptxas and so has no resource report
/// in its log (NVIDIA/cuda-python#1124; seen on the H200 machine, where the spill test failed with
/// empty logs whenever the same kernels had been compiled before on that machine). A compile for
/// the report therefore needs `CUDA_CACHE_DISABLE=1` in the environment: `mhc kernels` sets it,
/// and the spill and timeline tests re-run themselves in a child process with it set.
pub fn compile_fresh(module: &KernelModule, arch: &str, defines: &[&str]) -> Result<Compiled> {
    compile_opt(module, arch, defines, false, cache_dir())
}

fn compile_opt(
    module: &KernelModule,
    arch: &str,
    defines: &[&str],
    read_cache: bool,
    dir: Option<PathBuf>,
) -> Result<Compiled> {
    let ver = version()?;
    let src = module.full_source();
    let mut opts = options(arch);
    opts.extend(defines.iter().map(|d| format!("-D{d}")));
    let key = cache_key(&src, &opts, ver, arch);
    let paths = dir.map(|d| {
        let stem = format!("{}-{arch}-{}", module.name, &key[..24]);
        (
            d.join(format!("{stem}.cubin")),
            d.join(format!("{stem}.log")),
            d,
        )
    });
    if read_cache
        && let Some((cubin_p, log_p, _)) = &paths
        && let (Ok(cubin), Ok(log)) = (std::fs::read(cubin_p), std::fs::read_to_string(log_p))
        && !cubin.is_empty()
    {
        return Ok(Compiled {
            cubin,
            log,
            cached: true,
        });
    }
    let (cubin, log) = compile_uncached(module.name, &src, &opts, arch)?;
    if let Some((cubin_p, log_p, dir)) = &paths {
        // A cache that cannot be written only costs a recompile next time. Each file is written
        // under a name of this process and thread and renamed into place (readers never see a part
        // of a file), the log first: a CUBIN in place means its log is too.
        let tag = format!(
            "tmp{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        )
        .replace(|c: char| !c.is_ascii_alphanumeric(), "");
        let _ = std::fs::create_dir_all(dir).and_then(|_| {
            for (path, bytes) in [(log_p, log.as_bytes()), (cubin_p, &cubin[..])] {
                let mut tmp = path.as_os_str().to_owned();
                tmp.push(format!(".{tag}"));
                std::fs::write(&tmp, bytes)?;
                std::fs::rename(&tmp, path)?;
            }
            Ok(())
        });
    }
    Ok(Compiled {
        cubin,
        log,
        cached: false,
    })
}

fn compile_uncached(
    name: &str,
    src: &str,
    opts: &[String],
    arch: &str,
) -> Result<(Vec<u8>, String)> {
    let err = |what: &str, e: nr::NvrtcError| Error::Cuda(format!("{what} ({name}): {e:?}"));
    let csrc =
        CString::new(src).map_err(|_| Error::Invalid("kernel source has a NUL byte".into()))?;
    let cname =
        CString::new(name).map_err(|_| Error::Invalid("kernel name has a NUL byte".into()))?;
    let prog = nr::create_program(&csrc, Some(&cname)).map_err(|e| err("nvrtcCreateProgram", e))?;
    // SAFETY: `prog` is live until destroy_program below; csrc/cname outlive it.
    let result = unsafe { nr::compile_program(prog, opts) };
    let log = unsafe { nr::get_program_log(prog) }
        .map(|v| {
            let bytes: Vec<u8> = v
                .iter()
                .take_while(|c| **c != 0)
                .map(|c| *c as u8)
                .collect();
            String::from_utf8_lossy(&bytes).into_owned()
        })
        .unwrap_or_default();
    let out = match result {
        Err(_) => Err(Error::Compile {
            kernel: name.into(),
            arch: arch.into(),
            log: log.clone(),
        }),
        Ok(()) => {
            let mut size = 0usize;
            // SAFETY: compiled program; the buffer has the size NVRTC reports.
            unsafe { ns::nvrtcGetCUBINSize(prog, &mut size) }
                .result()
                .map_err(|e| err("nvrtcGetCUBINSize", e))
                .and_then(|_| {
                    let mut buf = vec![0u8; size];
                    unsafe { ns::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut _) }
                        .result()
                        .map_err(|e| err("nvrtcGetCUBIN", e))?;
                    Ok(buf)
                })
        }
    };
    // SAFETY: destroyed once.
    let _ = unsafe { nr::destroy_program(prog) };
    Ok((out?, log))
}

/// One kernel's resources as ptxas reports them.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct FunctionReport {
    /// Kernel (entry point) name.
    pub name: String,
    /// Registers per thread.
    pub registers: u32,
    /// Stack frame bytes.
    pub stack: u32,
    /// Spill stores (bytes).
    pub spill_stores: u32,
    /// Spill loads (bytes).
    pub spill_loads: u32,
    /// Static shared memory (bytes).
    pub smem: u32,
}

/// Parses the ptxas `-v` lines of an NVRTC log.
pub fn parse_report(log: &str) -> Vec<FunctionReport> {
    let mut out: Vec<FunctionReport> = Vec::new();
    let num_before = |s: &str, key: &str| -> Option<u32> {
        let i = s.find(key)?;
        s[..i].split_whitespace().last()?.parse().ok()
    };
    for line in log.lines() {
        if let Some(i) = line.find("Compiling entry function '") {
            let rest = &line[i + "Compiling entry function '".len()..];
            let name = rest.split('\'').next().unwrap_or("").to_string();
            out.push(FunctionReport {
                name,
                ..Default::default()
            });
        } else if let Some(cur) = out.last_mut() {
            if line.contains("bytes stack frame") {
                cur.stack = num_before(line, "bytes stack frame").unwrap_or(0);
                cur.spill_stores = num_before(line, "bytes spill stores").unwrap_or(0);
                cur.spill_loads = num_before(line, "bytes spill loads").unwrap_or(0);
            } else if line.contains("Used") && line.contains("registers") {
                cur.registers = num_before(line, "registers").unwrap_or(0);
                if let Some(i) = line.find("bytes smem") {
                    cur.smem = line[..i]
                        .split([',', ' '])
                        .rfind(|s| !s.is_empty())
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ptxas_lines() {
        let log = "ptxas info    : Compiling entry function 'mhc_seam' for 'sm_90'\n\
                   ptxas info    : Function properties for mhc_seam\n\
                   \x20   16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n\
                   ptxas info    : Used 128 registers, used 1 barriers, 2304 bytes smem, 480 bytes cmem[0]\n";
        let r = parse_report(log);
        assert_eq!(r.len(), 1);
        assert_eq!(
            r[0],
            FunctionReport {
                name: "mhc_seam".into(),
                registers: 128,
                stack: 16,
                spill_stores: 8,
                spill_loads: 4,
                smem: 2304,
            }
        );
    }
}
