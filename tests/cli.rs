//! The `mhc` binary: run round-trips a safetensors file, bad inputs give named errors, check and
//! bench work on the CPU, and asking for CUDA without a GPU ends with a clear message.

use half::bf16;
use mhc::ops::{Backend, CpuBackend, Op, OpArgs};
use mhc::tensor::{HostTensor, read_safetensors, write_safetensors};
use std::process::Command;

fn mhc(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_mhc"))
        .args(args)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn run_roundtrips_a_seam() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.safetensors");
    let output = dir.path().join("out.safetensors");
    let (i, o) = (input.to_str().unwrap(), output.to_str().unwrap());
    let (code, _, err) = mhc(&[
        "sample", "--op", "seam", "--tokens", "5", "--norm", "--hidden", "256", "--output", i,
    ]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = mhc(&[
        "run",
        "--op",
        "seam",
        "--input",
        i,
        "--output",
        o,
        "--backend",
        "cpu",
        "--fp8",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("route cpu/cpu"), "{err}");
    let inputs = read_safetensors(&input).unwrap();
    let outputs = read_safetensors(&output).unwrap();
    let cfg = mhc::Preset::V41Flash.config();
    let args = OpArgs::from_map(Op::Seam, &cfg, &inputs, true).unwrap();
    let want = CpuBackend.execute(&args).unwrap().0.to_map(&args).unwrap();
    assert_eq!(outputs, want);
    for name in [
        "residual_out",
        "layer_input",
        "post_out",
        "comb_out",
        "pre_out",
        "layer_input_fp8",
        "layer_input_scale",
    ] {
        assert!(outputs.contains_key(name), "{name} missing");
    }
    assert_eq!(outputs["layer_input_scale"].shape, vec![5, 8]);
}

/// `mhc run --op projection --bf16-out` writes `out` as bf16 [M,N], the reference's f32 output
/// rounded; without the flag `out` is f32; `--bf16-out` on another op is refused by name.
#[test]
fn run_projection_with_bf16_output() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.safetensors");
    let output = dir.path().join("out.safetensors");
    let (i, o) = (input.to_str().unwrap(), output.to_str().unwrap());
    let (code, _, err) = mhc(&[
        "sample",
        "--op",
        "projection",
        "--tokens",
        "3",
        "--hidden",
        "256",
        "--output",
        i,
    ]);
    assert_eq!(code, 0, "{err}");
    let inputs = read_safetensors(&input).unwrap();
    let cfg = mhc::Preset::V41Flash.config();
    let args = OpArgs::from_map(Op::Projection, &cfg, &inputs, false).unwrap();
    let y = CpuBackend.execute(&args).unwrap().0.out_f32.unwrap();
    for bf16_out in [false, true] {
        let mut cmd = vec![
            "run",
            "--op",
            "projection",
            "--input",
            i,
            "--output",
            o,
            "--backend",
            "cpu",
        ];
        if bf16_out {
            cmd.push("--bf16-out");
        }
        let (code, _, err) = mhc(&cmd);
        assert_eq!(code, 0, "{err}");
        let out = &read_safetensors(&output).unwrap()["out"];
        assert_eq!(out.shape, vec![3, 1024]);
        if bf16_out {
            let got = out.as_bf16("out").unwrap();
            assert!(
                got.iter()
                    .zip(&y)
                    .all(|(b, f)| b.to_bits() == bf16::from_f32(*f).to_bits())
            );
        } else {
            assert_eq!(out.as_f32("out").unwrap(), &y[..]);
        }
    }
    let seam = dir.path().join("seam.safetensors");
    let s = seam.to_str().unwrap();
    sample_seam(s);
    let err = run_seam_error(s, &["--bf16-out"]);
    assert!(err.contains("`seam`") && err.contains("bf16"), "{err}");
}

/// `mhc sample` of a small seam (T = 2, H = 256) into `path`.
fn sample_seam(path: &str) {
    let args = [
        "sample", "--op", "seam", "--tokens", "2", "--hidden", "256", "--output", path,
    ];
    assert_eq!(mhc(&args).0, 0);
}

/// `mhc run --op seam` on the CPU with `extra` arguments, expected to fail with exit code 2:
/// returns stderr.
fn run_seam_error(input: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "run",
        "--op",
        "seam",
        "--input",
        input,
        "--output",
        "/dev/null",
        "--backend",
        "cpu",
    ];
    args.extend_from_slice(extra);
    let (code, _, err) = mhc(&args);
    assert_eq!(code, 2, "{err}");
    err
}

#[test]
fn run_names_the_bad_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.safetensors");
    let i = input.to_str().unwrap();
    sample_seam(i);
    let mut m = read_safetensors(&input).unwrap();
    m.insert(
        "pre".into(),
        HostTensor::f32("pre", &[2, 3], vec![0.5; 6]).unwrap(),
    );
    write_safetensors(&input, &m).unwrap();
    let err = run_seam_error(i, &[]);
    assert!(
        err.contains("`pre`") && err.contains("[2, 4]") && err.contains("[2, 3]"),
        "{err}"
    );

    m.insert(
        "pre".into(),
        HostTensor::bf16("pre", &[2, 4], vec![bf16::ONE; 8]).unwrap(),
    );
    write_safetensors(&input, &m).unwrap();
    let err = run_seam_error(i, &[]);
    assert!(err.contains("`pre`") && err.contains("dtype"), "{err}");

    m.insert(
        "pre".into(),
        HostTensor::f32("pre", &[2, 4], vec![0.5; 8]).unwrap(),
    );
    m.remove("fn");
    write_safetensors(&input, &m).unwrap();
    let err = run_seam_error(i, &[]);
    assert!(err.contains("`fn`") && err.contains("missing"), "{err}");

    std::fs::write(&input, b"not a safetensors file").unwrap();
    let (code, _, err) = mhc(&["run", "--op", "seam", "--input", i, "--output", "/dev/null"]);
    assert_eq!(code, 2);
    assert!(err.contains("safetensors"), "{err}");
}

/// `mhc check` on the CPU at V4-Flash's shapes with `extra` arguments.
fn cpu_check(extra: &[&str]) -> (i32, String, String) {
    let base = ["check", "--backend", "cpu", "--preset", "v4-flash"];
    mhc(&[&base[..], extra].concat())
}

#[test]
fn check_passes_on_the_cpu() {
    let (code, out, err) = cpu_check(&["--tokens", "1,2", "--ops", "seam,entry,head"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("0 failed, 0 errors"), "{out}");
}

#[test]
fn check_takes_the_projection_at_other_n_and_refuses_n_0() {
    let proj = |n: &str| cpu_check(&["--tokens", "3", "--ops", "projection", "--proj-n", n]);
    let (code, out, err) = proj("300");
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("2 cases: 2 passed, 0 failed, 0 errors"),
        "{out}"
    );
    // The report names the N the backend received, for both outputs.
    assert!(out.contains("projection N=300 "), "{out}");
    assert!(out.contains("projection bf16 N=300 "), "{out}");
    let (code, _, err) = proj("0");
    assert_ne!(code, 0);
    assert!(
        err.contains("--proj-n") && err.contains("at least 1"),
        "{err}"
    );
}

#[test]
fn inspect_lists_and_checks_a_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("model.safetensors");
    let mut c = mhc::Preset::V4Flash.config();
    c.layers = 1;
    let seams = vec![
        mhc::SeamWeights::synthetic(&c, 1),
        mhc::SeamWeights::synthetic(&c, 2),
    ];
    mhc::weights::write_checkpoint(
        &p,
        &c,
        &seams,
        Some(&mhc::SeamWeights::synthetic_head(&c, 3)),
    )
    .unwrap();
    let (code, out, err) = mhc(&["inspect", p.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("layers.0.hc_attn_fn") && out.contains("match the preset"),
        "{out}"
    );
    // Against the wrong preset the shapes are reported.
    let (code, out, _) = mhc(&["inspect", p.to_str().unwrap(), "--preset", "v4-pro"]);
    assert_eq!(code, 1);
    assert!(
        out.contains("MISMATCH") && out.contains("[24, 28672]"),
        "{out}"
    );
    // Without norm weights the preset is guessed from a seam's fn, [24, 4 H].
    let fn_only = dir.path().join("fn-only.safetensors");
    let mut m = mhc::tensor::TensorMap::new();
    let h = mhc::Preset::V4Pro.config().hidden;
    m.insert(
        "layers.0.hc_attn_fn".into(),
        HostTensor::f32("layers.0.hc_attn_fn", &[24, 4 * h], vec![0.0; 24 * 4 * h]).unwrap(),
    );
    write_safetensors(&fn_only, &m).unwrap();
    let (_, out, err) = mhc(&["inspect", fn_only.to_str().unwrap()]);
    assert!(out.contains("checking against v4-pro"), "{out}{err}");
    // A corrupted file is refused with a message, not a crash.
    let mut bytes = std::fs::read(&p).unwrap();
    bytes.truncate(bytes.len() / 3);
    std::fs::write(&p, &bytes).unwrap();
    let (code, _, err) = mhc(&["inspect", p.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("safetensors"), "{err}");
}

#[test]
fn cuda_without_a_gpu_is_a_clear_error() {
    if mhc::cuda::available() {
        eprintln!("skipped: a GPU is present");
        return;
    }
    let (code, _, err) = mhc(&["check", "--backend", "cuda"]);
    assert_eq!(code, 2);
    assert!(err.contains("no CUDA GPU available"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn cpu_bench_writes_json_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("b.json");
    let plot = dir.path().join("b");
    let (code, out, err) = mhc(&[
        "bench",
        "--backend",
        "cpu",
        "--hidden",
        "256",
        "--tokens",
        "1,8",
        "--json",
        json.to_str().unwrap(),
        "--plot",
        plot.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(rows.len(), 2);
    for k in [
        "backend",
        "path",
        "hidden",
        "tokens",
        "us_per_seam",
        "launches_per_seam",
        "bytes_per_seam",
        "gbps",
        "pct_of_copy_bw",
        "gpu",
        "commit",
    ] {
        assert!(rows[0].get(k).is_some(), "{k}");
    }
    assert!(rows[0]["us_per_seam"].as_f64().unwrap() > 0.0);
    assert!(std::fs::metadata(plot.with_extension("svg")).unwrap().len() > 1000);
    assert!(std::fs::metadata(plot.with_extension("png")).unwrap().len() > 1000);
}

/// `--op seam-v4` times the V4 seam (its rows say so); the projection and the V4 timeline are
/// clear errors on the CPU.
#[test]
fn cpu_bench_times_the_v4_seam_and_refuses_what_it_cannot_time() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("v4.json");
    let (code, out, err) = mhc(&[
        "bench",
        "--backend",
        "cpu",
        "--op",
        "seam-v4",
        "--hidden",
        "256",
        "--tokens",
        "1,5",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r["op"] == "seam_v4"), "{rows:?}");
    assert!(out.contains("seam_v4"), "{out}");
    for args in [
        &["bench", "--backend", "cpu", "--op", "projection"][..],
        &[
            "bench",
            "--backend",
            "cuda",
            "--op",
            "seam-v4",
            "--timeline",
        ][..],
    ] {
        let (code, _, err) = mhc(args);
        assert_ne!(code, 0, "{args:?}");
        assert!(err.contains("--op"), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn timeline_on_the_cpu_is_a_clear_error() {
    let (code, _, err) = mhc(&["bench", "--backend", "cpu", "--timeline"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--timeline"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// Model overrides that no backend can run (no streams, H = 0) and benchmarks of nothing (no
/// tokens, no seams) are one clear error before any work, in every command that takes them.
#[test]
fn impossible_overrides_and_empty_benchmarks_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s.safetensors");
    let out = out.to_str().unwrap();
    let cases: [(&[&str], &str); 7] = [
        (
            &["sample", "--op", "seam", "--output", out, "--streams", "0"],
            "n (streams)",
        ),
        (
            &["sample", "--op", "gates", "--output", out, "--hidden", "0"],
            "hidden size H",
        ),
        (
            &["check", "--backend", "cpu", "--streams", "0"],
            "n (streams)",
        ),
        (
            &["check", "--backend", "cpu", "--hidden", "0"],
            "hidden size H",
        ),
        (
            &["bench", "--backend", "cpu", "--streams", "0"],
            "n (streams)",
        ),
        (
            &["bench", "--backend", "cpu", "--tokens", "3,0"],
            "--tokens",
        ),
        (&["bench", "--backend", "cpu", "--seams", "0"], "--seams"),
    ];
    for (args, names) in cases {
        let (code, _, err) = mhc(args);
        assert_ne!(code, 0, "{args:?}");
        assert!(err.contains(names), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // A plot of no rows is refused too, and writes nothing.
    let empty = dir.path().join("empty.json");
    std::fs::write(&empty, "[]").unwrap();
    let stem = dir.path().join("plot");
    let (code, _, err) = mhc(&[
        "plot",
        "--out",
        stem.to_str().unwrap(),
        empty.to_str().unwrap(),
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("no benchmark rows"), "{err}");
    assert!(!stem.with_extension("svg").exists());
    // Nothing was written by the refused sample.
    assert!(!std::path::Path::new(out).exists());
}
