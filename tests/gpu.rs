//! GPU correctness: every op and path against the CPU reference (SPEC section 8), routes with
//! positive controls, forced paths, determinism, batch invariance, graph replay against eager
//! calls, the raw API on a foreign stream, and the compressor projection.
//!
//! Without a GPU every test prints "skipped" and passes, unless MHC_REQUIRE_GPU is set (the GPU
//! session script sets it, so a missing GPU there is a failure, not a silent pass).

mod common;

use common::{
    SEAM_FAMILY, cfg, order_sensitive_token, put_order_sensitive, run_all, same_bits, seam_inputs,
    seam_inputs_norm,
};
use half::bf16;
use mhc::check::{self, Case};
use mhc::cuda::{
    Coeffs, CudaEngine, DeviceSeamWeights, EngineOptions, PathChoice, RawCall, RawIo,
    RawProjection, SeamBuffers,
};
use mhc::ops::{Backend, CpuBackend, Op, OpArgs};
use mhc::synth::{self, InputSpec};
use mhc::{Error, SeamWeights};
use std::sync::Mutex;

/// One GPU test at a time: they share the device and its memory.
static GPU: Mutex<()> = Mutex::new(());

fn engine(path: PathChoice) -> Option<CudaEngine> {
    if !mhc::cuda::available() {
        assert!(
            std::env::var("MHC_REQUIRE_GPU").is_err(),
            "MHC_REQUIRE_GPU is set but no GPU is usable"
        );
        eprintln!("skipped: no GPU");
        return None;
    }
    Some(
        CudaEngine::new(EngineOptions {
            path,
            ..EngineOptions::default()
        })
        .expect("engine"),
    )
}

/// Whether the GPU runs thread-block clusters (sm_90 and later); says "skipped" where not.
fn has_clusters(e: &CudaEngine) -> bool {
    let yes = e.info().cc.0 >= 9;
    if !yes {
        eprintln!("skipped: no thread-block clusters before sm_90");
    }
    yes
}

/// The tile kernel's outputs for `args` (the cluster kernel forced off), the reference that every
/// cluster plan must match bit for bit.
fn tile_kernel_outputs(e: &CudaEngine, args: &OpArgs) -> mhc::OpOutputs {
    e.set_cluster_override(Some(0));
    let out = e.execute(args).unwrap().0;
    e.set_cluster_override(None);
    out
}

macro_rules! gpu {
    ($e:ident, $path:expr) => {
        let _guard = GPU.lock().unwrap_or_else(|p| p.into_inner());
        let Some($e) = engine($path) else { return };
    };
}

/// `gpu!` on the fused path for a test of the cluster kernels: returns where the GPU has none.
macro_rules! gpu_clusters {
    ($e:ident) => {
        gpu!($e, PathChoice::Fused);
        if !has_clusters(&$e) {
            return;
        }
    };
}

#[test]
fn fused_every_op_every_t_h4096() {
    fused_every_op_every_t(4096);
}

#[test]
fn fused_every_op_every_t_h5120() {
    fused_every_op_every_t(5120);
}

#[test]
fn fused_every_op_every_t_h7168() {
    fused_every_op_every_t(7168);
}

fn fused_every_op_every_t(h: usize) {
    gpu!(e, PathChoice::Auto);
    let c = cfg(4, h);
    let mut cases = check::standard_cases(&[1, 2, 3, 7, 16, 33, 128]);
    // T = 1000 for the seam family with everything on, and T = 300 (19 tiles: the seams' stream
    // launch with halves of one and two tiles, plan::stream_plan).
    for t in [300, 1000] {
        for op in SEAM_FAMILY {
            cases.push(Case {
                op,
                t,
                norm: true,
                fp8: op.has_layer_input(),
                bf16_out: false,
            });
        }
    }
    cases.push(Case {
        op: Op::Seam,
        t: 16384,
        norm: true,
        fp8: true,
        bf16_out: false,
    });
    cases.push(Case {
        op: Op::Seam,
        t: 16384,
        norm: false,
        fp8: false,
        bf16_out: false,
    });
    let reports = run_all(&e, &c, &cases);
    // Positive control: these ops really ran fused, so declines elsewhere mean something.
    for r in &reports {
        let fused_op = !matches!(r.op, Op::Gates | Op::Rmsnorm);
        if fused_op {
            assert_eq!(
                r.route.path, "fused",
                "{} T={} H={h}: {}",
                r.op, r.t, r.route
            );
            assert!(r.route.declined.is_empty());
        } else {
            assert_eq!(r.route.path, "unfused", "{}", r.route);
            assert!(r.route.declined[0].reason.contains("alone"), "{}", r.route);
        }
    }
}

/// The gates' fast path (the Sinkhorn in the scaled form, no range test a reciprocal) runs when
/// hc_eps is in [2^-30, 1] and the logits are finite; other eps values take the checked path
/// (and, out of range, the IEEE recomputation). Every one agrees with the CPU reference; 1e-9 is
/// the fast path near its smallest eps.
#[test]
fn gates_agree_with_the_reference_for_any_eps() {
    gpu!(e, PathChoice::Auto);
    for eps in [0.0f32, 1e-30, 1e-9, 1e-6, 0.5, 2.0] {
        let mut c = cfg(4, 4096);
        c.hc_eps = eps;
        let cases: Vec<Case> = [Op::Seam, Op::Pre, Op::Gates]
            .into_iter()
            .map(|op| Case {
                op,
                t: 7,
                norm: op.has_layer_input(),
                fp8: false,
                bf16_out: false,
            })
            .collect();
        run_all(&e, &c, &cases);
    }
}

/// The cluster kernel's gates (a quad of lanes per token, gates4_quad) give the tile kernel's bits
/// (one thread per token, gates4) for every eps: the fast path, the checked one and the IEEE redo.
#[test]
fn gate_quads_give_the_tile_kernels_bits_for_any_eps() {
    gpu_clusters!(e);
    for eps in [0.0f32, 1e-30, 1e-9, 1e-6, 0.5, 2.0] {
        let mut c = cfg(4, 5120);
        c.hc_eps = eps;
        for (t, cl) in [(1, 16), (7, 16), (33, 16), (16, 12), (224, 16)] {
            let m = seam_inputs(&c, t, (t * 11) as u64 + eps.to_bits() as u64);
            let args = OpArgs::from_map(Op::Seam, &c, &m, false).unwrap();
            let want = tile_kernel_outputs(&e, &args);
            e.set_cluster_override(Some(cl));
            let (got, route) = e.execute(&args).unwrap();
            let k = route.kernels.join(",");
            assert!(k.starts_with("mhc_seam_cl"), "{k}");
            assert!(
                got == want,
                "eps={eps} T={t} {k} in clusters of {cl} differs from the tile kernel"
            );
        }
        e.set_cluster_override(None);
    }
}

/// The V4 seam's cluster kernels send each lane's pre to every block before the Sinkhorn where it
/// is final, and after the IEEE recomputation where its sigmoid left the fast path's range
/// (gates4_quad's pre sink). Two of pre's logits pushed far below zero take the second way: at
/// base -120 the fast reciprocal of 1 + exp(120) = inf gives NaN, so a pre sent too early would
/// poison the collapse. Both ways must give the tile kernel's bits, in one wave of clusters and in
/// two.
#[test]
fn v4_cluster_pre_sent_early_or_after_the_redo_gives_the_tile_kernels_bits() {
    use mhc::tensor::TensorData;
    gpu_clusters!(e);
    let c = cfg(4, 5120);
    for t in [1, 7, 33, 200] {
        let spec = InputSpec {
            op: Op::SeamV4,
            t,
            norm: true,
            proj_nk: (0, 0),
        };
        let mut m = synth::inputs(&c, &spec, 40 + t as u64);
        match m.get_mut("base").map(|b| &mut b.data) {
            Some(TensorData::F32(b)) => {
                b[0] = -120.0;
                b[3] = -87.5;
            }
            _ => panic!("no f32 base in the V4 seam's inputs"),
        }
        let args = OpArgs::from_map(Op::SeamV4, &c, &m, false).unwrap();
        let want = tile_kernel_outputs(&e, &args);
        e.set_cluster_override(Some(16));
        let (got, route) = e.execute(&args).unwrap();
        e.set_cluster_override(None);
        let k = route.kernels.join(",");
        assert!(k.starts_with("mhc_seam_v4_cl"), "T={t}: {k}");
        assert!(got == want, "T={t} {k} differs from the tile kernel");
    }
}

#[test]
fn unfused_every_op() {
    gpu!(e, PathChoice::Unfused);
    let c = cfg(4, 5120);
    let reports = run_all(&e, &c, &check::standard_cases(&[1, 3, 33, 128]));
    assert!(
        reports
            .iter()
            .all(|r| r.route.path == "unfused"
                && r.route.kernels.iter().all(|k| k.starts_with("uf_")))
    );
    let seam = reports
        .iter()
        .find(|r| r.op == Op::Seam && r.t == 1)
        .unwrap();
    assert!(seam.route.kernels.contains(&"uf_col_norm".to_string()));
}

#[test]
fn other_n_and_odd_h_decline_to_the_generic_kernels() {
    gpu!(e, PathChoice::Auto);
    for (n, h, why) in [
        (2, 4096, "n = 2"),
        (1, 512, "n = 1"),
        (4, 1000, "not a multiple of 32"),
        (4, 200, "not a multiple of 32"),
    ] {
        let c = cfg(n, h);
        let cases: Vec<Case> = check::standard_cases(&[1, 5, 33])
            .into_iter()
            .filter(|k| !k.fp8 || h % 32 == 0)
            .collect();
        for r in run_all(&e, &c, &cases) {
            if matches!(r.op, Op::Projection) || (r.op == Op::Expand && h % 32 == 0) {
                continue;
            }
            assert_eq!(r.route.path, "unfused", "n={n} H={h} {}: {}", r.op, r.route);
            let reason = &r.route.declined[0].reason;
            assert!(reason.contains(why) || reason.contains("alone"), "{reason}");
        }
    }
}

/// Which fused kernel serves a V4.1 seam: the cluster kernel at small T on an sm_90+ GPU that can
/// run clusters of 16 one-block-per-SM blocks (so a silent fallback to the tile kernel fails
/// here), in tiles of 16 tokens up to T = 112 and of 32 up to 224; the tile kernel past that (its
/// tiles launch as the stream variant), without programmatic dependent launch at T <= 4, and when
/// forced with `set_cluster_override(Some(0))`; an impossible forced cluster size is an error.
/// The V4 seam's clusters in waves, and H = 7168's two waves of tiles of 16.
#[test]
fn the_cluster_kernel_serves_small_t() {
    gpu!(e, PathChoice::Fused);
    let c = cfg(4, 5120);
    let c7 = cfg(4, 7168);
    let kernels_at = |c: &mhc::Config, op: Op, t: usize| {
        let spec = InputSpec {
            op,
            t,
            norm: true,
            proj_nk: (0, 0),
        };
        let m = synth::inputs(c, &spec, t as u64);
        let args = OpArgs::from_map(op, c, &m, false).unwrap();
        let (_, r) = e.execute(&args).unwrap();
        r.kernels.join(",")
    };
    let kernels_of = |op: Op, t: usize| kernels_at(&c, op, t);
    let kernel = |t: usize| kernels_of(Op::Seam, t);
    let clusters = e.info().cc.0 >= 9;
    assert_eq!(
        clusters,
        e.plan_for(Op::Seam, 1, 5120, false)
            .unwrap()
            .unwrap()
            .cluster
            == 16
    );
    e.set_pdl(true);
    // The cluster kernel's name where the device has clusters, else the tile kernel's.
    let or_tile = |cl: &'static str, tile: &'static str| if clusters { cl } else { tile };
    // The call brings fn prepared by split_fn_weight (the backend prepares it like
    // DeviceSeamWeights): its variant (fn's own bytes); off, the plain cluster kernel.
    let small = or_tile("mhc_seam_clp", "mhc_seam");
    // T <= 4: lanes by channels in the elementwise phase (rows of at most 1, 2 or 4 tokens).
    let ch = |v: &str| {
        if clusters {
            format!("mhc_seam_clp_{v}")
        } else {
            "mhc_seam".to_string()
        }
    };
    // With PDL up to T = 48 the rows spread over up to 3 clusters (plan.rs, small_tile_tokens):
    // tiles of 1, 2 or 4 tokens with lanes by channels up to T = 12, then of ceil(T / 3) tokens
    // in the MMA's lane layout.
    assert_eq!(kernel(1), ch("ch1"));
    assert_eq!(kernel(2), ch("ch1"));
    assert_eq!(kernel(3), ch("ch1"));
    assert_eq!(kernel(4), ch("ch2"));
    assert_eq!(kernel(6), ch("ch2"));
    assert_eq!(kernel(7), ch("ch4"));
    assert_eq!(kernel(12), ch("ch4"));
    assert_eq!(kernel(13), small);
    assert_eq!(kernel(16), small);
    assert_eq!(kernel(29), small);
    e.set_cluster_spread(false);
    assert_eq!(kernel(2), ch("ch2"));
    assert_eq!(kernel(3), ch("ch4"));
    assert_eq!(kernel(5), small);
    assert_eq!(kernel(16), small);
    e.set_cluster_spread(true);
    e.set_cluster_channels(false);
    assert_eq!(kernel(1), small);
    assert_eq!(kernel(16), small);
    e.set_cluster_channels(true);
    assert_eq!(kernel(33), small);
    assert_eq!(kernel(112), small);
    // Past seven clusters of 16 tokens, tiles of 32 tokens: T <= 224 in one wave, unless the
    // stream tiles launch takes the call in one round (plan::stream_ahead_of_clusters; its
    // sms / 20 blocks of two halves at H = 5120, 12 halves on the H200: T <= 192).
    let small2 = or_tile("mhc_seam_clp2", "mhc_seam");
    // Past that the tile kernel in two launches (tiles, then their tails: plan.rs,
    // ONE_LAUNCH_MAX_T), the tiles by the stream variant where it fits the device
    // (plan::stream_plan), the tails split by slices of H (plan::tail_parts: several blocks a
    // tile).
    let two_launches = |k: &str| {
        k.starts_with("mhc_seam,mhc_seam_tails") || k.starts_with("mhc_seam_st,mhc_seam_tails")
    };
    let streams = |k: &str| k.starts_with("mhc_seam_st,mhc_seam_tails");
    let sms = e.info().sm_count as usize;
    let halves_5120 = 2 * (sms / 20);
    for t in [113, 176, 224] {
        let k = kernel(t);
        let rounds = t.div_ceil(16).div_ceil(halves_5120);
        if clusters && rounds == 1 {
            assert!(streams(&k), "T={t}: {k}");
        } else {
            assert_eq!(k, small2, "T={t}");
        }
    }
    assert!(two_launches(&kernel(225)), "{}", kernel(225));
    assert!(kernel(300).contains(",mhc_seam_tails x"), "{}", kernel(300));
    if clusters {
        // (Every sm_90 GPU has the stream variant's 210 KB of shared memory a block.)
        assert!(kernel(225).starts_with("mhc_seam_st,"), "{}", kernel(225));
    }
    // The V4 seam (its own pre-mix): clusters in tiles of 16 tokens (no lanes by channels, no
    // tiles of 32) in up to six waves of seven clusters at H = 5120 and 7168, five at 4096
    // (plan::collapse_after_gates_waves), then the tile kernel.
    let kernel_v4 = |t: usize| kernels_of(Op::SeamV4, t);
    // The tile kernel: one launch up to T = 224, then the tiles (the stream variant where it
    // fits) and their tails.
    let tile_v4_at = |h: usize, t: usize| {
        if t <= 224 {
            "mhc_seam_v4".to_string()
        } else if e.plan_for(Op::SeamV4, t, h, false).unwrap().unwrap().stream {
            "mhc_seam_v4_st,mhc_seam_v4 (tails)".to_string()
        } else {
            "mhc_seam_v4,mhc_seam_v4 (tails)".to_string()
        }
    };
    let tile_v4 = |t: usize| tile_v4_at(5120, t);
    let v4 = |t: usize| {
        if clusters {
            "mhc_seam_v4_clp".to_string()
        } else {
            tile_v4(t)
        }
    };
    for t in [1, 16, 112, 113, 336, 337, 449, 560, 561, 672] {
        assert_eq!(kernel_v4(t), v4(t), "V4 T={t}");
    }
    assert_eq!(kernel_v4(673), tile_v4(673));
    if clusters {
        assert!(tile_v4(673).starts_with("mhc_seam_v4_st,"));
        // H = 7168 the same; H = 4096 five waves: T <= 560.
        let c4 = cfg(4, 4096);
        let in_clusters = |k: String| k.starts_with("mhc_seam_v4_cl") && !k.contains(',');
        assert!(in_clusters(kernels_at(&c7, Op::SeamV4, 672)));
        assert_eq!(kernels_at(&c7, Op::SeamV4, 673), tile_v4_at(7168, 673));
        assert!(in_clusters(kernels_at(&c4, Op::SeamV4, 560)));
        assert_eq!(kernels_at(&c4, Op::SeamV4, 561), tile_v4_at(4096, 561));
    }
    // Forced waves (set_cluster_waves / MHC_CLUSTER_WAVES): four waves take T = 337-448, one
    // wave T <= 112.
    e.set_cluster_waves(Some(4));
    assert_eq!(kernel_v4(337), v4(337));
    assert_eq!(kernel_v4(448), v4(448));
    assert_eq!(kernel_v4(449), tile_v4(449));
    e.set_cluster_waves(Some(1));
    assert_eq!(kernel_v4(112), v4(112));
    assert_eq!(kernel_v4(113), tile_v4(113));
    e.set_cluster_waves(None);
    assert_eq!(kernel_v4(449), v4(449));
    assert_eq!(kernel_v4(673), tile_v4(673));
    e.set_use_prepared_fn(false);
    assert_eq!(kernel(1), or_tile("mhc_seam_cl_ch1", "mhc_seam"));
    assert_eq!(kernel(224), or_tile("mhc_seam_cl2", "mhc_seam"));
    e.set_use_prepared_fn(true);
    // Tiles of 32 forced at small T, and of 16 at T = 128 (8 clusters: then two waves of them,
    // plan::CARRIED_WAVES, up to 14 tiles; past that the tile kernel).
    e.set_cluster_mtiles(Some(2));
    assert_eq!(kernel(1), small2);
    e.set_cluster_mtiles(Some(1));
    assert_eq!(kernel(128), small);
    assert_eq!(kernel(224), small);
    assert!(two_launches(&kernel(225)), "{}", kernel(225));
    e.set_cluster_mtiles(None);
    // Without PDL at T <= 4 only the prepared variant beats the tile kernel; the rows do not
    // spread.
    e.set_pdl(false);
    assert_eq!(kernel(1), ch("ch1"));
    assert_eq!(kernel(16), small);
    e.set_use_prepared_fn(false);
    assert_eq!(kernel(1), "mhc_seam");
    // The V4 seam's tile kernel is slower at every small T: its cluster kernel either way.
    assert_eq!(kernel_v4(1), or_tile("mhc_seam_v4_cl", "mhc_seam_v4"));
    assert_eq!(kernel_v4(4), or_tile("mhc_seam_v4_cl", "mhc_seam_v4"));
    e.set_use_prepared_fn(true);
    e.set_pdl(true);
    e.set_cluster_override(Some(0));
    assert_eq!(kernel(1), "mhc_seam");
    e.set_cluster_override(Some(40));
    let spec = InputSpec {
        op: Op::Seam,
        t: 1,
        norm: true,
        proj_nk: (0, 0),
    };
    let m = synth::inputs(&c, &spec, 5);
    let args = OpArgs::from_map(Op::Seam, &c, &m, false).unwrap();
    let err = e.execute(&args).map(|_| ()).unwrap_err().to_string();
    assert!(err.contains("clusters of 40"), "{err}");
    e.set_cluster_override(None);
    // H = 7168: tiles of 32 do not fit the kernel's warps, so past one wave (T > 112) two waves of
    // tiles of 16 (plan::CARRIED_WAVES) up to T = 224, then the tile kernel; the stream tiles
    // launch goes ahead of those two waves where it takes at most two rounds (sms / 28 blocks of
    // two halves: T <= 256 on the H200).
    let kernel7 = |t: usize| kernels_at(&c7, Op::Seam, t);
    let halves_7168 = 2 * (sms / 28);
    for t in [33, 112, 113, 224] {
        let k = kernel7(t);
        let rounds = t.div_ceil(16).div_ceil(halves_7168);
        if clusters && t > 112 && rounds <= 2 {
            assert!(streams(&k), "H=7168 T={t}: {k}");
            continue;
        }
        assert!(
            if clusters {
                k.starts_with("mhc_seam_cl") && !k.contains("cl2") && !k.contains(',')
            } else {
                k == "mhc_seam"
            },
            "H=7168 T={t}: {k}"
        );
    }
    assert!(two_launches(&kernel7(225)), "{}", kernel7(225));
    // Without PDL the clusters keep T <= 224 (the rule was measured with PDL only).
    e.set_pdl(false);
    assert!(!kernel7(113).contains(','), "{}", kernel7(113));
    e.set_pdl(true);
}

/// mhc_fn_split against its CPU twin, bit for bit, on weights with signs, zeros, subnormals,
/// huge and exactly-bf16 values, at H = 4096 and 5120.
#[test]
fn prepared_fn_matches_its_cpu_twin() {
    gpu!(e, PathChoice::Fused);
    for h in [4096, 5120] {
        let c = cfg(4, h);
        let fn_: Vec<f32> = SeamWeights::synthetic(&c, h as u64)
            .fn_
            .iter()
            .enumerate()
            .map(|(i, &v)| match i % 11 {
                0 => 0.0,
                1 => -0.0,
                2 => 1e-40 * (i as f32),
                3 => v * 3e30,
                4 => -1.5,
                _ => v,
            })
            .collect();
        let d_fn = e.upload(&fn_).unwrap();
        let mut d_out = e.zeros::<u32>(CudaEngine::fn_split_words(&c)).unwrap();
        d_out.poison().unwrap();
        unsafe {
            e.split_fn_weight(&c, d_fn.ptr(), d_out.ptr(), e.stream())
                .unwrap()
        };
        e.sync().unwrap();
        let want = mhc::cuda::plan::fn_split_reference(&fn_, 4, h);
        let got = d_out.to_host().unwrap();
        assert_eq!(got.len(), want.len());
        if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
            panic!(
                "H={h}: word {i} is {:#010x}, the CPU twin says {:#010x}",
                got[i], want[i]
            );
        }
    }
    // Only n = 4 with 24 mixes has a prepared form.
    let c = cfg(2, 512);
    let err = unsafe { e.split_fn_weight(&c, 0, 0, e.stream()) }.unwrap_err();
    assert!(err.to_string().contains("n = 2"), "{err}");
}

#[test]
fn forced_paths_fail_clearly_instead_of_substituting() {
    gpu!(e, PathChoice::Fused);
    let c = cfg(2, 512);
    let m = synth::inputs(
        &c,
        &InputSpec {
            op: Op::Seam,
            t: 3,
            norm: true,
            proj_nk: (0, 0),
        },
        1,
    );
    let args = OpArgs::from_map(Op::Seam, &c, &m, false).unwrap();
    match e.execute(&args) {
        Err(Error::PathUnavailable { path, reason }) => {
            assert_eq!(path, "fused");
            assert!(reason.contains("n = 2"), "{reason}");
        }
        other => panic!(
            "forced fused on n = 2 must fail, got {:?}",
            other.map(|o| o.1)
        ),
    }
    e.set_path(PathChoice::Cpu);
    let (_, r) = e.execute(&args).unwrap();
    assert_eq!(r.path, "cpu");
    e.set_path(PathChoice::Unfused);
    let (_, r) = e.execute(&args).unwrap();
    assert_eq!(r.path, "unfused");
}

/// Every launch plan (chunks per block, warps, tile size, persistent or not, one launch or two)
/// gives the same bits for every op of the seam family: the tail's register tree over 1, 2 or 4
/// groups of records, the shared-memory tree, and the split tails launch all pair the chunks in
/// the canonical order. So does the cluster kernel (the default at small T for the ops that have
/// one, compared here with every tile plan, and forced at every T in clusters of 16, and at H = 5120 of 12).
#[test]
fn every_plan_gives_the_same_bits() {
    gpu!(e, PathChoice::Fused);
    let plans: [(u32, u32, u32, u32); 11] = [
        (8, 8, 8, 0),
        (8, 8, 16, 0),
        (4, 4, 8, 0),
        (4, 8, 4, 0),
        (2, 2, 8, 0),
        (2, 4, 16, 0),
        (1, 1, 8, 0),
        (1, 2, 4, 0),
        (8, 8, 16, 3),
        (2, 4, 16, 5),
        (1, 2, 8, 7),
    ];
    for h in [5120, 7168] {
        let c = cfg(4, h);
        for op in SEAM_FAMILY {
            for t in [1, 7, 33, 300] {
                let spec = InputSpec {
                    op,
                    t,
                    norm: op != Op::Head,
                    proj_nk: (0, 0),
                };
                let m = synth::inputs(&c, &spec, (h + t) as u64 * 13 + op as u64);
                let args = OpArgs::from_map(op, &c, &m, op == Op::Seam).unwrap();
                e.set_plan_override(None);
                let want = e.execute(&args).unwrap().0;
                for p in plans {
                    e.set_plan_override(Some(p));
                    // No record of an earlier call may stand in for one this plan missed.
                    e.poison_records().unwrap();
                    let (got, route) = e.execute(&args).unwrap();
                    assert_eq!(route.path, "fused");
                    assert!(
                        got == want,
                        "{op} H={h} T={t} plan {p:?} differs from the default"
                    );
                }
                e.set_plan_override(None);
                // Clusters of 16, and at H = 5120 of 12 (two rows a block; at H = 7168 no other
                // size fits: at most 15 chunk warps a block, and 15 do not fit beside two rows).
                // Each with and without prepared fn (seam, seam_v4 and pre_delayed have a variant
                // that reads it; fn's own bytes, so it fits wherever the plain kernel does).
                let sizes: &[u32] = if h == 5120 { &[0, 16, 12] } else { &[0, 16] };
                for &cl in sizes {
                    for prepared in [true, false] {
                        e.set_cluster_override(Some(cl));
                        e.set_use_prepared_fn(prepared);
                        e.poison_records().unwrap();
                        let (got, route) = e.execute(&args).unwrap();
                        assert_eq!(route.path, "fused");
                        assert!(
                            got == want,
                            "{op} H={h} T={t} in clusters of {cl} (0: the tile kernel), prepared fn {prepared}: differs from the default"
                        );
                        // Positive control: the prepared variant really ran where it fits.
                        let clp = route.kernels.iter().any(|k| k.contains("_clp"));
                        let fits = prepared
                            && cl != 0
                            && matches!(op, Op::Seam | Op::PreDelayed | Op::SeamV4)
                            && e.info().cc.0 >= 9;
                        assert_eq!(clp, fits, "{op} H={h} T={t} cl={cl} {:?}", route.kernels);
                    }
                }
                e.set_cluster_override(None);
                e.set_use_prepared_fn(true);
            }
        }
    }
    e.set_plan_override(None);
}

/// The cluster kernel's tiles of 32 tokens (the seam's `_cl2` and `_clp2` variants) give the bits
/// of the default plan: a second group of 16 rows empty (T = 7), with rows in its first half
/// only (T = 20), full (T = 32), a last tile of one row (T = 33) or of 12 (T = 300), in one wave
/// (T = 224); with and without prepared fn, at H = 4096 (8 chunk warps a block) and 5120 (10).
#[test]
fn tiles_of_32_tokens_give_the_same_bits() {
    gpu_clusters!(e);
    for h in [4096, 5120] {
        let c = cfg(4, h);
        for t in [1, 7, 20, 32, 33, 224, 300] {
            let m = seam_inputs(&c, t, (h * 3 + t) as u64);
            let args = OpArgs::from_map(Op::Seam, &c, &m, true).unwrap();
            let want = tile_kernel_outputs(&e, &args);
            e.set_cluster_override(Some(16));
            e.set_cluster_mtiles(Some(2));
            for prepared in [true, false] {
                e.set_use_prepared_fn(prepared);
                let (got, route) = e.execute(&args).unwrap();
                let k = if prepared {
                    "mhc_seam_clp2"
                } else {
                    "mhc_seam_cl2"
                };
                assert_eq!(route.kernels, [k], "H={h} T={t}");
                assert!(got == want, "H={h} T={t} {k} differs from the tile kernel");
            }
            e.set_cluster_mtiles(None);
            e.set_cluster_override(None);
            e.set_use_prepared_fn(true);
        }
    }
}

/// The seams' tiles launch in its stream variant (`mhc_seam_st`, `mhc_seam_v4_st`: one block of
/// two halves a multiprocessor, each walking its own tiles with the next tile's x, r and
/// coefficients copied ahead) gives the bits of the tile kernel's: the V4.1 and the V4 seam, with
/// and without the fused RMSNorm and MXFP8 output, at every H, at T whose last tile is full or
/// not, with the halves' tile counts equal or not; where the plan takes it, it really ran (at
/// T = 2053 it must, on any GPU with at least 32 SMs), and where not, it did not; two calls give
/// the same bits.
#[test]
fn the_stream_tiles_launch_gives_the_same_bits() {
    gpu!(e, PathChoice::Fused);
    for (op, names) in [
        (Op::Seam, ["mhc_seam_st", "mhc_seam (tails)"]),
        (Op::SeamV4, ["mhc_seam_v4_st", "mhc_seam_v4 (tails)"]),
    ] {
        // On the H200 the tiles deal evenly over the halves at H = 4096, T = 497 (32 tiles over
        // 16 halves) and T = 4096 (256), unevenly at H = 5120, T = 497 (32 over 12). Which of
        // these T take the stream launch is the plan's; at T >= 2053 both ops must.
        for h in [4096, 5120, 7168] {
            let c = cfg(4, h);
            let even: &[usize] = if h == 4096 { &[4096] } else { &[] };
            for &t in [300, 497, 1001, 2053].iter().chain(even) {
                e.set_stream_tiles(true);
                let sp = e.plan_for(op, t, h, false).unwrap().unwrap();
                let stream = sp.stream;
                assert!(stream || t < 2053, "{op} H={h} T={t}: no stream plan");
                for (norm, fp8) in [(true, true), (true, false), (false, false)] {
                    let spec = InputSpec {
                        op,
                        t,
                        norm,
                        proj_nk: (0, 0),
                    };
                    let m = synth::inputs(&c, &spec, (h * 7 + t) as u64 + norm as u64);
                    let args = OpArgs::from_map(op, &c, &m, fp8).unwrap();
                    e.set_stream_tiles(false);
                    let (want, route) = e.execute(&args).unwrap();
                    assert!(
                        !route.kernels.iter().any(|k| k.ends_with("_st")),
                        "{:?}",
                        route.kernels
                    );
                    e.set_stream_tiles(true);
                    // The tile kernel's records must not stand in for a row the stream launch
                    // missed.
                    e.poison_records().unwrap();
                    let (got, route) = e.execute(&args).unwrap();
                    // The tails of the seam split over several blocks a tile (`mhc_seam_tails xN`).
                    let labels: Vec<String> = route
                        .kernels
                        .iter()
                        .map(|k| {
                            if k.starts_with("mhc_seam_tails x") {
                                "mhc_seam (tails)".to_string()
                            } else {
                                k.clone()
                            }
                        })
                        .collect();
                    assert_eq!(
                        labels == names,
                        stream,
                        "{op} H={h} T={t}: {:?}",
                        route.kernels
                    );
                    let again = e.execute(&args).unwrap().0;
                    assert!(again == got, "{op} H={h} T={t}: not deterministic");
                    assert!(
                        got == want,
                        "{op} H={h} T={t} norm={norm} fp8={fp8}: the stream variant differs from the tile kernel"
                    );
                }
            }
        }
    }
    // Below the default fewest tiles (set_stream_min_tiles / MHC_STREAM_MIN_TILES), down to one
    // tile: the stream variant with the tile kernel's bits where the tiles do not fill the halves
    // evenly. On the H200: H = 5120, T = 400 is 25 tiles on six blocks of two halves (three rounds,
    // the last partly idle); H = 4096, T = 232 is 15 tiles on eight blocks (one half without a
    // tile); H = 7168, T = 257 is 17 tiles on four blocks; the V4 seam at T = 601 is 38 tiles.
    e.set_stream_min_tiles(Some(1));
    for (op, h, t) in [
        (Op::Seam, 5120, 400),
        (Op::Seam, 4096, 232),
        (Op::Seam, 7168, 257),
        (Op::SeamV4, 4096, 601),
    ] {
        let c = cfg(4, h);
        let spec = InputSpec {
            op,
            t,
            norm: true,
            proj_nk: (0, 0),
        };
        let m = synth::inputs(&c, &spec, (h + t) as u64);
        let args = OpArgs::from_map(op, &c, &m, true).unwrap();
        let p = e.plan_for(op, t, h, false).unwrap().unwrap();
        assert!(p.stream, "{op} H={h} T={t}: no stream plan ({p:?})");
        e.set_stream_tiles(false);
        let (want, _) = e.execute(&args).unwrap();
        e.set_stream_tiles(true);
        e.poison_records().unwrap();
        let (got, route) = e.execute(&args).unwrap();
        assert!(route.kernels[0].ends_with("_st"), "{:?}", route.kernels);
        assert!(
            got == want,
            "{op} H={h} T={t}: the stream variant differs from the tile kernel"
        );
    }
    // A minimum above the call's tiles keeps the tile kernel; the default (plan::STREAM_MIN_TILES)
    // takes the stream variant.
    let stream_at_400 = || {
        e.plan_for(Op::Seam, 400, 5120, false)
            .unwrap()
            .unwrap()
            .stream
    };
    e.set_stream_min_tiles(Some(26));
    assert!(!stream_at_400());
    e.set_stream_min_tiles(None);
    assert!(stream_at_400());
    // Fewer multiprocessors for the stream launch (set_stream_sms / MHC_STREAM_SMS): fewer blocks
    // along the tiles, more rounds, the same bits. H = 5120 has 20 groups: 40 SMs give two blocks
    // a group, 21 (and 1) one, 100 five.
    let (h, t) = (5120, 1001);
    let c = cfg(4, h);
    let spec = InputSpec {
        op: Op::Seam,
        t,
        norm: true,
        proj_nk: (0, 0),
    };
    let m = synth::inputs(&c, &spec, 11);
    let args = OpArgs::from_map(Op::Seam, &c, &m, true).unwrap();
    let (want, _) = e.execute(&args).unwrap();
    for (sms, grid_y) in [(100, 5), (40, 2), (21, 1), (1, 1)] {
        e.set_stream_sms(Some(sms));
        let p = e.plan_for(Op::Seam, t, h, false).unwrap().unwrap();
        assert!(p.stream && p.grid_y == grid_y, "{sms} SMs: {p:?}");
        e.poison_records().unwrap();
        let (got, route) = e.execute(&args).unwrap();
        assert!(route.kernels[0].ends_with("_st"), "{:?}", route.kernels);
        assert!(got == want, "{sms} SMs: the stream launch differs");
    }
    e.set_stream_sms(None);
}

/// `set_two_launch_from` (`MHC_TWO_LAUNCH_FROM_T`): the seams take the two-launch plan from the
/// asked T (its tiles launch the stream variant where that fits the device) ahead of the cluster
/// kernel, with the bits of the default route, at T of two tiles up and with a part tile; the
/// ops without a stream variant keep their route, and T = 16 (one tile) runs in one launch.
#[test]
fn two_launches_from_a_small_t_give_the_default_routes_bits() {
    gpu!(e, PathChoice::Fused);
    for (op, h, t) in [
        (Op::Seam, 4096, 17),
        (Op::Seam, 5120, 100),
        (Op::Seam, 7168, 100),
        (Op::Seam, 5120, 224),
        (Op::SeamV4, 5120, 300),
        (Op::SeamV4, 7168, 33),
    ] {
        let c = cfg(4, h);
        let spec = InputSpec {
            op,
            t,
            norm: true,
            proj_nk: (0, 0),
        };
        let m = synth::inputs(&c, &spec, (3 * h + t) as u64);
        let args = OpArgs::from_map(op, &c, &m, true).unwrap();
        e.set_two_launch_from(None);
        let (want, before) = e.execute(&args).unwrap();
        e.set_two_launch_from(Some(1));
        let p = e.plan_for(op, t, h, false).unwrap().unwrap();
        assert!(p.split && p.cluster == 0, "{op} H={h} T={t}: {p:?}");
        e.poison_records().unwrap();
        let (got, route) = e.execute(&args).unwrap();
        assert_eq!(route.kernels.len(), 2, "{:?}", route.kernels);
        assert_eq!(
            route.kernels[0].ends_with("_st"),
            p.stream,
            "{:?}",
            route.kernels
        );
        assert!(
            got == want,
            "{op} H={h} T={t}: two launches ({:?}) differ from {:?}",
            route.kernels,
            before.kernels
        );
    }
    e.set_two_launch_from(Some(1));
    let one_tile = e.plan_for(Op::Seam, 16, 5120, false).unwrap().unwrap();
    assert!(!one_tile.split, "{one_tile:?}");
    if e.info().cc.0 >= 9 {
        let p = e
            .plan_for(Op::PreDelayed, 100, 5120, false)
            .unwrap()
            .unwrap();
        assert!(p.cluster > 0, "pre_delayed left its clusters: {p:?}");
    }
    e.set_two_launch_from(None);
}

/// The tails launch of a two-launch plan split over several blocks a tile (the RMSNorm pass by
/// slices of H, part 0 also the gates: carried ops with a norm) gives the bits of one block a
/// tile, for every part count (odd ones, and more parts than vectors to slice), with and without
/// MXFP8 output, with the tile kernel's and the stream variant's tiles launch, at T not a power of
/// two; the split really ran (its label), and the other ops stay at one block a tile.
#[test]
fn the_tails_split_by_slices_gives_the_same_bits() {
    gpu!(e, PathChoice::Fused);
    for h in [4096, 5120, 7168] {
        let c = cfg(4, h);
        for op in SEAM_FAMILY {
            let carried = matches!(op, Op::Seam | Op::PreDelayed | Op::Entry | Op::Final);
            for t in [300, 1001, 2053] {
                for fp8 in [false, true] {
                    if fp8 && !op.has_layer_input() {
                        continue;
                    }
                    let spec = InputSpec {
                        op,
                        t,
                        norm: op != Op::Head,
                        proj_nk: (0, 0),
                    };
                    let m =
                        synth::inputs(&c, &spec, (h * 3 + t) as u64 * 17 + op as u64 + fp8 as u64);
                    let args = OpArgs::from_map(op, &c, &m, fp8).unwrap();
                    for stream in [false, true] {
                        e.set_stream_tiles(stream);
                        e.set_tail_parts(Some(1));
                        let (want, route) = e.execute(&args).unwrap();
                        let k = route.kernels.join(",");
                        if !k.contains(" (tails)") {
                            // One launch at this T (the V4 seam's clusters in waves up to T = 560).
                            assert!(op == Op::SeamV4 && t <= 560, "{op} H={h} T={t}: {k}");
                            continue;
                        }
                        for parts in [None, Some(2), Some(3), Some(8), Some(200)] {
                            e.set_tail_parts(parts);
                            e.poison_records().unwrap();
                            let (got, route) = e.execute(&args).unwrap();
                            let k = route.kernels.join(",");
                            // Forced counts run as asked on the carried ops (the default's
                            // count depends on the GPU's multiprocessors); the others never split.
                            match parts {
                                Some(n) if carried => assert!(
                                    k.contains(&format!("_tails x{n}")),
                                    "{op} H={h} T={t}: {k}"
                                ),
                                _ if !carried => {
                                    assert!(!k.contains("_tails x"), "{op} H={h} T={t}: {k}")
                                }
                                _ => {}
                            }
                            assert!(
                                got == want,
                                "{op} H={h} T={t} fp8={fp8} stream={stream} parts {parts:?}: {k} differs from one block a tile"
                            );
                        }
                    }
                }
            }
        }
    }
    e.set_tail_parts(None);
    e.set_stream_tiles(true);
}

/// The seam's cluster kernel with lanes by channels (`_ch1`, `_ch2`, `_ch4`: tiles of up to 1, 2
/// or 4 tokens, one or several clusters, T <= 12) gives the bits of the same kernel with the MMA's
/// lane layout and of the tile kernel, with and without the fused RMSNorm, with and without MXFP8
/// output, with and without prepared fn, at every H (7168 has no prepared variant), and the
/// variant really ran.
#[test]
fn lanes_by_channels_give_the_same_bits() {
    gpu_clusters!(e);
    e.set_pdl(true);
    for h in [4096, 5120, 7168] {
        let c = cfg(4, h);
        // T <= 3 in tiles of 1, 4-6 of 2, 7-12 of 4 (PDL on); without channels, tiles of up to 16.
        for (t, suffix) in [
            (1, "_ch1"),
            (2, "_ch1"),
            (3, "_ch1"),
            (4, "_ch2"),
            (5, "_ch2"),
            (7, "_ch4"),
            (11, "_ch4"),
            (12, "_ch4"),
        ] {
            for (norm, fp8) in [(true, false), (true, true), (false, false), (false, true)] {
                let m = seam_inputs_norm(&c, t, norm, (h * 5 + t * 3 + norm as usize) as u64);
                let args = OpArgs::from_map(Op::Seam, &c, &m, fp8).unwrap();
                let want = tile_kernel_outputs(&e, &args);
                for prepared in [true, false] {
                    e.set_use_prepared_fn(prepared);
                    let mut kernels = Vec::new();
                    for channels in [true, false] {
                        e.set_cluster_channels(channels);
                        let (got, route) = e.execute(&args).unwrap();
                        let k = route.kernels.join(",");
                        assert_eq!(
                            k.contains("_ch"),
                            channels,
                            "H={h} T={t} norm={norm} fp8={fp8}: {k}"
                        );
                        assert!(k.starts_with("mhc_seam_cl"), "{k}");
                        assert!(
                            got == want,
                            "H={h} T={t} norm={norm} fp8={fp8} prepared={prepared}: {k} differs from the tile kernel"
                        );
                        kernels.push(k);
                    }
                    let plain = &kernels[1];
                    assert_eq!(kernels[0], format!("{plain}{suffix}"), "H={h} T={t}");
                }
                e.set_cluster_channels(true);
                e.set_use_prepared_fn(true);
            }
        }
    }
}

/// fn's TF32 split done in shared memory before the PDL wait (`set_presplit`,
/// `plan::with_presplit`; PERF_NOTES.md attempts 158 and 162) gives the tile kernel's bits: the
/// seam and pre_delayed in tiles of up to 16 tokens on up to `PRESPLIT_MAX_TILES` clusters, with
/// and without the norm, at H = 4096 (every chunk warp presplit on the H200), 5120 (six of ten)
/// and 7168 (two of fourteen), and with at most three presplit (the others' fn on the block's
/// shared mbarrier). Where the engine does not presplit (lanes by channels, T <= 12; more
/// clusters, T = 64 and 100) the plan says none. Positive controls: the plan presplits where it
/// should at H = 4096 and 5120 (where any sm_90 has the room), the kernels are those of the run
/// without it, and nothing is presplit without PDL.
#[test]
fn presplit_fn_gives_the_same_bits() {
    gpu_clusters!(e);
    e.set_pdl(true);
    for h in [4096, 5120, 7168] {
        let c = cfg(4, h);
        for (op, t, presplit) in [
            (Op::Seam, 1, false),
            (Op::Seam, 12, false),
            (Op::Seam, 13, true),
            (Op::Seam, 16, true),
            (Op::Seam, 37, true),
            (Op::Seam, 48, true),
            (Op::Seam, 64, false),
            (Op::PreDelayed, 16, true),
            (Op::PreDelayed, 33, true),
            (Op::PreDelayed, 100, false),
        ] {
            for norm in [true, false] {
                let spec = InputSpec {
                    op,
                    t,
                    norm,
                    proj_nk: (0, 0),
                };
                let m = synth::inputs(&c, &spec, (h * 11 + t * 5) as u64 + norm as u64);
                let args = OpArgs::from_map(op, &c, &m, false).unwrap();
                let want = tile_kernel_outputs(&e, &args);
                e.set_presplit(0);
                assert_eq!(e.plan_for(op, t, h, true).unwrap().unwrap().presplit, 0);
                let (plain, r0) = e.execute(&args).unwrap();
                e.set_presplit(3);
                let p3 = e.plan_for(op, t, h, true).unwrap().unwrap();
                let (got3, _) = e.execute(&args).unwrap();
                e.set_presplit(u32::MAX);
                let p = e.plan_for(op, t, h, true).unwrap().unwrap();
                let (got, r1) = e.execute(&args).unwrap();
                let what = format!("{op} H={h} T={t} norm={norm} {:?}", r1.kernels);
                assert_eq!(r0.kernels, r1.kernels, "{what}");
                assert!(r1.kernels.iter().any(|k| k.contains("_clp")), "{what}");
                assert!(
                    p.cluster > 0 && p.prepared && p.mtiles == 1,
                    "{what}: {p:?}"
                );
                assert!(p.presplit <= p.w, "{what}: {p:?}");
                assert_eq!(p3.presplit, p.presplit.min(3), "{what}");
                if !presplit {
                    assert_eq!(p.presplit, 0, "{what}");
                } else if h <= 5120 {
                    assert!(p.presplit > 3, "{what}: {} presplit", p.presplit);
                }
                assert!(
                    plain == want,
                    "{what}: differs from the tile kernel without presplit"
                );
                assert!(
                    got == want,
                    "{what}: differs from the tile kernel with {} presplit",
                    p.presplit
                );
                assert!(
                    got3 == want,
                    "{what}: differs from the tile kernel with 3 presplit"
                );
            }
        }
    }
    e.set_pdl(false);
    assert_eq!(
        e.plan_for(Op::Seam, 16, 5120, true)
            .unwrap()
            .unwrap()
            .presplit,
        0
    );
    e.set_pdl(true);
}

/// With PDL a small T spreads over up to three clusters (plan::small_tile_tokens): the seam past
/// its tiles of 4 tokens on three clusters in three clusters of ceil(T / 3) tokens (attempt 143),
/// the V4 seam and pre_delayed (no lanes-by-channels variant) past 8 tokens in the fewest clusters
/// that keep tiles at 8 tokens, then three of up to 16 (attempt 144). Tiles of 5 to 16 tokens, the
/// second row half empty or not, a last tile shorter than the others: each gives the tile kernel's
/// bits with and without the fused RMSNorm (and MXFP8 where the op has it), with and without
/// prepared fn, at every H, and the plan really was that spread.
#[test]
fn small_t_spread_over_clusters_gives_the_tile_kernels_bits() {
    gpu_clusters!(e);
    e.set_pdl(true);
    for h in [4096, 5120, 7168] {
        let c = cfg(4, h);
        for (op, ts) in [
            (Op::Seam, &[13usize, 14, 16, 24, 29, 40, 47][..]),
            (Op::SeamV4, &[9, 16, 17, 25, 47][..]),
            (Op::PreDelayed, &[12, 24, 33][..]),
        ] {
            for &t in ts {
                let (tt, tiles) = if op == Op::Seam {
                    (t.div_ceil(3), 3)
                } else {
                    let n = t.div_ceil(8).min(3);
                    (t.div_ceil(n), n as u32)
                };
                for (norm, fp8) in [(true, false), (true, true), (false, false)] {
                    if fp8 && !op.has_layer_input() {
                        continue;
                    }
                    let spec = InputSpec {
                        op,
                        t,
                        norm,
                        proj_nk: (0, 0),
                    };
                    let m = synth::inputs(&c, &spec, (h * 7 + t * 5 + norm as usize) as u64);
                    let args = OpArgs::from_map(op, &c, &m, fp8).unwrap();
                    let want = tile_kernel_outputs(&e, &args);
                    for prepared in [true, false] {
                        e.set_use_prepared_fn(prepared);
                        let plan = e.plan_for(op, t, h, true).unwrap().unwrap();
                        assert_eq!(
                            (plan.cluster, plan.tt as usize, plan.tiles),
                            (16, tt, tiles),
                            "{op} H={h} T={t}: {plan:?}"
                        );
                        let (got, route) = e.execute(&args).unwrap();
                        let k = route.kernels.join(",");
                        assert!(
                            k.contains("_cl") && !k.contains("_ch"),
                            "{op} H={h} T={t}: {k}"
                        );
                        assert!(
                            got == want,
                            "{op} H={h} T={t} norm={norm} fp8={fp8} prepared={prepared}: {k} differs from the tile kernel"
                        );
                    }
                    e.set_use_prepared_fn(true);
                }
            }
        }
    }
}

/// Every projection plan (stage width, ring depth, one slot or eight, one to three n-tiles per
/// block, n-tiles of 8 or 16 rows of w (the operands swapped), w held in registers (one or
/// several tiles per block, a second tile in shared memory, the rows dealt evenly with up to 4
/// past the register tile, tiles of 8 rows in registers), the heuristic's and the measured
/// table's) gives the bits of the
/// default plan, at shapes with a part tile (N = 300, 1000, 33, 2500),
/// several tiles per block and a part of a stage (K = 4104), for resident and staged rows of a.
#[test]
fn every_projection_plan_gives_the_same_bits() {
    gpu!(e, PathChoice::Fused);
    let c = cfg(4, 5120);
    let plans: [(u32, u32, u32, u32, u32); 34] = [
        (0, 0, 0, 0, 0),
        (1, 1, 0, 0, 0),
        (1, 8, 0, 0, 0),
        (2, 2, 0, 0, 0),
        (3, 1, 0, 0, 0),
        (4, 2, 0, 0, 0),
        (5, 1, 0, 0, 0),
        (0, 0, 1, 0, 0),
        (2, 2, 2, 0, 0),
        (1, 3, 3, 0, 0),
        (0, 0, 0, 16, 0),
        (1, 1, 0, 16, 0),
        (1, 2, 1, 16, 0),
        (1, 4, 0, 16, 0),
        (2, 2, 2, 16, 0),
        (0, 0, 0, 0, 1),
        (0, 0, 1, 16, 1),
        (0, 0, 3, 0, 1),
        (1, 0, 0, 0, 1),
        (0, 0, 0, 0, 2),
        (0, 0, 2, 0, 2),
        (0, 0, 3, 16, 2),
        (0, 0, 0, 0, 3),
        (2, 0, 0, 0, 3),
        (3, 0, 0, 0, 3),
        (5, 0, 0, 0, 3),
        (6, 0, 0, 0, 3),
        (7, 0, 0, 0, 3),
        (0, 0, 0, 16, 3),
        (0, 0, 0, 0, 4),
        (0, 0, 3, 16, 4),
        (0, 0, 0, 0, 6),
        (0, 0, 1, 0, 6),
        (0, 0, 3, 8, 6),
    ];
    // (1, 2560, 7168), (2, 2560, 4096), (4, 2560, 5120), (4, 1024, 5120) and (3, 2048, 5120) take
    // measured plans by default (plan.rs: the rows dealt evenly, at 7168 x 2560 with the compact
    // rows first and the last warp waiting first, at 5120 x 2560 with the last warp waiting first,
    // at 5120 x 2048 with its share of w copied by the others, at 5120 x 1024 with the rows of a
    // multicast); (0, 0, 0, 0, 0) is the heuristic's. (7, 2600, 4096): two tiles a block with the
    // rows dealt evenly (19-20 rows), their ends joined (JE) where the kernel has it, at M = 7.
    for (m, n, k) in [
        (1, 2560, 7168),
        (2, 2560, 4096),
        (4, 2560, 5120),
        (7, 2600, 4096),
        (3, 2500, 7168),
        (4, 1024, 5120),
        (3, 2048, 5120),
        (4, 300, 4104),
        (7, 1000, 5120),
        (16, 2048, 4096),
        (3, 33, 1032),
        (8, 1100, 4000),
        (5, 1000, 4096),
        (1, 1056, 4112),
    ] {
        let spec = InputSpec {
            op: Op::Projection,
            t: m,
            norm: false,
            proj_nk: (n, k),
        };
        let inputs = synth::inputs(&c, &spec, (m * 7 + n + k) as u64);
        let args = OpArgs::from_map(Op::Projection, &c, &inputs, false).unwrap();
        e.set_projection_plan_override(None);
        let want = e.execute(&args).unwrap().0.out_f32.unwrap();
        let want_b: Vec<u16> = want.iter().map(|v| bf16::from_f32(*v).to_bits()).collect();
        let args_b = args.clone().with_bf16_out(true).unwrap();
        let mut ran = 0;
        for p in plans {
            e.set_projection_plan_override(Some(p));
            // Plans too large for the shared memory (16 staged rows of a, or a second tile in
            // registers' shared memory beside 8 rows of a or past K = 5120), and tiles of 16 rows
            // of w without resident rows of a, are refused, by name.
            let (got, route) = match e.execute(&args) {
                Ok(r) => r,
                Err(err) => {
                    assert!(
                        (m > 8
                            || p.4 == 2 && (k > 5120 || m > 4 && k > 4104)
                            || p.4 == 3 && m > 4 && k > 5120
                            // the multicast needs K a multiple of 16 and an even grid
                            || matches!(p.0, 2 | 7)
                                && p.4 == 3
                                && (k % 16 != 0 || n.div_ceil(16).min(132) % 2 != 0)
                            // the last warp's share of w copied by the others: K <= 5120
                            || matches!(p.0, 6 | 7) && p.4 == 3 && k > 5120)
                            && err.to_string().contains("projection plan"),
                        "M={m} N={n} K={k} plan {p:?}: {err}"
                    );
                    continue;
                }
            };
            assert_eq!(route.path, "fused", "{route}");
            let got = got.out_f32.unwrap();
            assert!(
                got.iter()
                    .map(|v| v.to_bits())
                    .eq(want.iter().map(|v| v.to_bits())),
                "M={m} N={n} K={k}: plan {p:?} differs from the default"
            );
            // The plan's kernel with bf16 output (its `_ybf16` twin, over a poisoned buffer):
            // the f32 bits rounded once to nearest even.
            let (got_b, route_b) = e.execute(&args_b).unwrap();
            assert_eq!(route_b.path, "fused", "{route_b}");
            assert_eq!(
                route_b.kernels,
                route
                    .kernels
                    .iter()
                    .map(|k| format!("{k}_ybf16"))
                    .collect::<Vec<_>>()
            );
            assert!(
                got_b
                    .out_bf16
                    .unwrap()
                    .iter()
                    .map(|v| v.to_bits())
                    .eq(want_b.iter().copied()),
                "M={m} N={n} K={k}: plan {p:?}, bf16 output: not the f32 output rounded"
            );
            ran += 1;
        }
        assert!(ran >= 5, "M={m} N={n} K={k}: only {ran} plans ran");
    }
    e.set_projection_plan_override(None);
}

fn seam_outputs(e: &CudaEngine, c: &mhc::Config, m: &mhc::tensor::TensorMap) -> mhc::OpOutputs {
    let args = OpArgs::from_map(Op::Seam, c, m, true).unwrap();
    e.execute(&args).unwrap().0
}

#[test]
fn deterministic_and_batch_invariant() {
    gpu!(e, PathChoice::Auto);
    for (h, ts) in [(5120, &[128, 1000, 16384][..]), (7168, &[128, 3000][..])] {
        let c = cfg(4, h);
        for &t in ts {
            let m = seam_inputs(&c, t, 40 + t as u64);
            let a = seam_outputs(&e, &c, &m);
            let b = seam_outputs(&e, &c, &m);
            // Compared without printing the (huge) tensors.
            assert!(a == b, "two runs differ (H={h} T={t})");
            // Each probed row alone (T = 1: a different launch plan) gives the same bits.
            for row in [0, 1, t / 2 + 3, t - 1] {
                let one = slice_tokens(&m, &c, row, 1);
                let o = seam_outputs(&e, &c, &one);
                let (n, hh) = (c.n, c.hidden);
                let same_bf = |x: &Option<Vec<bf16>>, y: &Option<Vec<bf16>>, w: usize| {
                    let (x, y) = (x.as_ref().unwrap(), y.as_ref().unwrap());
                    x[row * w..(row + 1) * w]
                        .iter()
                        .zip(y)
                        .all(|(p, q)| p.to_bits() == q.to_bits())
                };
                let same_f = |x: &Option<Vec<f32>>, y: &Option<Vec<f32>>, w: usize| {
                    let (x, y) = (x.as_ref().unwrap(), y.as_ref().unwrap());
                    x[row * w..(row + 1) * w]
                        .iter()
                        .zip(y)
                        .all(|(p, q)| p.to_bits() == q.to_bits())
                };
                assert!(
                    same_bf(&a.residual_out, &o.residual_out, n * hh),
                    "r' row {row} T={t}"
                );
                assert!(
                    same_bf(&a.layer_input, &o.layer_input, hh),
                    "layer_input row {row} T={t}"
                );
                assert!(
                    same_f(&a.pre_out, &o.pre_out, n),
                    "pre row {row} T={t} H={h}"
                );
                assert!(same_f(&a.post_out, &o.post_out, n), "post row {row} T={t}");
                assert!(
                    same_f(&a.comb_out, &o.comb_out, n * n),
                    "comb row {row} T={t}"
                );
            }
        }
    }
}

/// Batch invariance at every row: for each op of the seam family (norm on, MXFP8 where the op has
/// a layer input), every token of a batch of 128 gives, in every output tensor, the bits it gives
/// when it runs alone (T = 1: another launch plan).
#[test]
fn every_row_of_a_batch_of_128_matches_the_token_alone() {
    use mhc::tensor::TensorData;
    gpu!(e, PathChoice::Auto);
    let t = 128;
    let rows_of = |x: &mhc::tensor::HostTensor| -> Vec<u32> {
        match &x.data {
            TensorData::BF16(v) => v.iter().map(|b| b.to_bits() as u32).collect(),
            TensorData::F32(v) => v.iter().map(|f| f.to_bits()).collect(),
            TensorData::U8(v) => v.iter().map(|&b| b as u32).collect(),
        }
    };
    for h in [5120, 7168] {
        let c = cfg(4, h);
        for op in SEAM_FAMILY {
            let spec = InputSpec {
                op,
                t,
                norm: op != Op::Head,
                proj_nk: (0, 0),
            };
            let fp8 = op.has_layer_input();
            let m = synth::inputs(&c, &spec, (h * 7 + op as usize) as u64);
            let args = OpArgs::from_map(op, &c, &m, fp8).unwrap();
            let all = e.execute(&args).unwrap().0.to_map(&args).unwrap();
            assert!(!all.is_empty(), "{op}: no outputs");
            for row in 0..t {
                let one_in = slice_tokens(&m, &c, row, 1);
                let one_args = OpArgs::from_map(op, &c, &one_in, fp8).unwrap();
                let one = e.execute(&one_args).unwrap().0.to_map(&one_args).unwrap();
                assert_eq!(
                    one.keys().collect::<Vec<_>>(),
                    all.keys().collect::<Vec<_>>(),
                    "{op}"
                );
                for (name, x) in &all {
                    assert_eq!(x.shape[0], t, "{op} {name} {:?}", x.shape);
                    let (xa, xo) = (rows_of(x), rows_of(&one[name]));
                    let w = xa.len() / t;
                    assert_eq!(xo.len(), w, "{op} {name}");
                    assert!(
                        xa[row * w..(row + 1) * w] == xo[..],
                        "{op} H={h}: {name} of row {row} in a batch of {t} differs from the token alone"
                    );
                }
            }
        }
    }
}

/// The sums of squares take the canonical order on every path. A token whose RMS factors depend
/// on the order of the adds (common::order_sensitive_token: the canonical order and the
/// sequential one give different factors for the norm and the gates, and the orders the tile and
/// cluster kernels took before they shared the canonical one gave different gate factors) gives,
/// for every op of the seam family, at several rows of batches of 1 to 2000 tokens, in the default
/// plan, the tile kernel, clusters of 16 and three other tile plans (two of them persistent, one
/// with W = 1, whose records take the long tree), the same gates and layer input everywhere, and
/// the layer input of the canonical factor (the CPU reference's); at H = 4096, and at fewer T at
/// H = 5120 and 7168.
#[test]
fn sums_of_squares_take_the_canonical_order_everywhere() {
    gpu!(e, PathChoice::Fused);
    let clusters = has_clusters(&e);
    type Forced = (&'static str, Option<u32>, Option<(u32, u32, u32, u32)>);
    let forced: [Forced; 6] = [
        ("the default plan", None, None),
        ("the tile kernel", Some(0), None),
        ("clusters of 16", Some(16), None),
        ("tile plan (1, 2, 8, 7)", Some(0), Some((1, 2, 8, 7))),
        ("tile plan (2, 4, 16, 5)", Some(0), Some((2, 4, 16, 5))),
        ("tile plan (4, 4, 8, 0)", Some(0), Some((4, 4, 8, 0))),
    ];
    for (h, ts) in [
        (4096, &[1usize, 2, 5, 20, 40, 150, 300, 2000][..]),
        (5120, &[1, 5, 40, 150, 2000][..]),
        (7168, &[1, 5, 40, 300][..]),
    ] {
        let c = cfg(4, h);
        let tok = order_sensitive_token(&c, 7);
        let want_li = tok.layer_input();
        for op in SEAM_FAMILY {
            let mut first: Option<(Vec<u32>, String)> = None;
            for &t in ts {
                let spec = InputSpec {
                    op,
                    t,
                    norm: op != Op::Head,
                    proj_nk: (0, 0),
                };
                // One seed for every T: the same weights (synth draws them from the seed alone).
                let mut m = synth::inputs(&c, &spec, 100);
                let mut rows = vec![0, t / 2, t - 1];
                rows.dedup();
                put_order_sensitive(&mut m, op, &rows, &tok);
                let args = OpArgs::from_map(op, &c, &m, false).unwrap();
                for (name, cl, plan) in forced {
                    if cl == Some(16) && !clusters {
                        continue;
                    }
                    e.set_cluster_override(cl);
                    e.set_plan_override(plan);
                    let (out, route) = e.execute(&args).unwrap();
                    assert_eq!(route.path, "fused");
                    let li = out.layer_input.as_ref().or(out.out.as_ref()).unwrap();
                    for &r in &rows {
                        let at = format!(
                            "H={h} T={t} row {r} in {name} ({})",
                            route.kernels.join(", ")
                        );
                        let li_r = &li[r * h..(r + 1) * h];
                        if op != Op::Head {
                            assert!(
                                same_bits(li_r, &want_li),
                                "{op} at {at}: the layer input is not that of the canonical factor"
                            );
                        }
                        let mut bits: Vec<u32> = li_r.iter().map(|b| b.to_bits() as u32).collect();
                        for v in [&out.pre_out, &out.post_out, &out.comb_out]
                            .into_iter()
                            .flatten()
                        {
                            let w = v.len() / t;
                            bits.extend(v[r * w..(r + 1) * w].iter().map(|f| f.to_bits()));
                        }
                        match &first {
                            None => first = Some((bits, at)),
                            Some((b0, at0)) => assert!(
                                bits == *b0,
                                "{op}: the token's gates or layer input at {at} differ from those at {at0}"
                            ),
                        }
                    }
                }
                e.set_cluster_override(None);
                e.set_plan_override(None);
            }
        }
    }
}

/// The unfused kernels (the path for any n and H, and the only GPU path of the standalone rmsnorm
/// and gates ops) sum squares in the canonical order too. On the order-sensitive token:
/// - every seam op and the rmsnorm op give the layer input of the canonical norm factor;
/// - the gates op's first post gate follows the canonical factor of the 4H streams: its fn row
///   reads channel `k0` of stream 0 alone (so the projection is that value exactly, whatever the
///   order of its adds), and a scale of 8 with a base near -8 m - 20 puts the sigmoid where a one
///   ulp change of m moves the gate by about 30 ulps.
#[test]
fn the_unfused_path_sums_squares_in_the_canonical_order() {
    use mhc::reference::{rms_factor, sequential_sum_squares, tree_sum_squares};
    use mhc::tensor::TensorData;
    gpu!(e, PathChoice::Unfused);
    for h in [4096, 5120, 7168] {
        let c = cfg(4, h);
        let tok = order_sensitive_token(&c, 7);
        let want_li = tok.layer_input();
        let four = tok.streams();
        let rinv_tree = rms_factor(tree_sum_squares(&four, h), 4 * h, c.rms_eps);
        let rinv_seq = rms_factor(sequential_sum_squares(&four), 4 * h, c.rms_eps);
        let k0 = (0..h)
            .find(|&k| {
                let x = tok.stream0[k].to_f32();
                x.abs() >= 1.0 && rinv_tree * x != rinv_seq * x
            })
            .expect("a channel whose gate input tells the factors apart");
        let x0 = tok.stream0[k0].to_f32();
        let m_tree = rinv_tree * x0;
        let base = -(m_tree * 8.0).round() - 20.0;
        let post = |m: f32| c.post_mult as f64 / (1.0 + (-((m * 8.0 + base) as f64)).exp());
        let (want_post, seq_post) = (post(m_tree), post(rinv_seq * x0));
        assert!(
            ((want_post - seq_post) / want_post).abs() > 1.5e-6,
            "H={h}: the two factors' gates are too close to tell apart"
        );
        for t in [1usize, 5, 300] {
            let mut rows = vec![0, t / 2, t - 1];
            rows.dedup();
            for op in SEAM_FAMILY.iter().copied().chain([Op::Rmsnorm, Op::Gates]) {
                let spec = InputSpec {
                    op,
                    t,
                    norm: op != Op::Head,
                    proj_nk: (0, 0),
                };
                let mut m = synth::inputs(&c, &spec, 100);
                put_order_sensitive(&mut m, op, &rows, &tok);
                if op == Op::Gates {
                    if let Some(TensorData::F32(d)) = m.get_mut("fn").map(|t| &mut t.data) {
                        let row = &mut d[c.n * 4 * h..(c.n + 1) * 4 * h];
                        row.fill(0.0);
                        row[k0] = 1.0;
                    }
                    if let Some(TensorData::F32(d)) = m.get_mut("scale").map(|t| &mut t.data) {
                        d[1] = 8.0;
                    }
                    if let Some(TensorData::F32(d)) = m.get_mut("base").map(|t| &mut t.data) {
                        d[c.n] = base;
                    }
                }
                let args = OpArgs::from_map(op, &c, &m, false).unwrap();
                let (out, route) = e.execute(&args).unwrap();
                assert_eq!(route.path, "unfused", "{op}: {route}");
                for &r in &rows {
                    let at = format!("{op} at H={h} T={t} row {r}");
                    if op == Op::Gates {
                        let got = out.post_out.as_ref().unwrap()[r * c.n] as f64;
                        assert!(
                            ((got - want_post) / want_post).abs() < 5e-7,
                            "{at}: post gate {got:e}, the canonical factor's {want_post:e}, \
                             the sequential one's {seq_post:e}"
                        );
                    } else if op != Op::Head {
                        let li = out.layer_input.as_ref().or(out.out.as_ref()).unwrap();
                        assert!(
                            same_bits(&li[r * h..(r + 1) * h], &want_li),
                            "{at}: the layer input is not that of the canonical factor"
                        );
                    }
                }
            }
        }
    }
}

/// The inputs of tokens [start, start + len) of a seam input set (the per-token tensors the op
/// takes; the weights are shared).
fn slice_tokens(
    m: &mhc::tensor::TensorMap,
    c: &mhc::Config,
    start: usize,
    len: usize,
) -> mhc::tensor::TensorMap {
    use mhc::tensor::{HostTensor, TensorData};
    let mut out = m.clone();
    for (name, per) in [
        ("x", c.hidden),
        ("residual", c.n * c.hidden),
        ("post", c.n),
        ("comb", c.n * c.n),
        ("pre", c.n),
    ] {
        let Some(t) = m.get(name) else { continue };
        let mut shape = t.shape.clone();
        shape[0] = len;
        let nt = match &t.data {
            TensorData::BF16(v) => {
                HostTensor::bf16(name, &shape, v[start * per..(start + len) * per].to_vec())
            }
            TensorData::F32(v) => {
                HostTensor::f32(name, &shape, v[start * per..(start + len) * per].to_vec())
            }
            TensorData::U8(_) => unreachable!(),
        };
        out.insert(name.into(), nt.unwrap());
    }
    out
}

/// A chain of dependent seams gives the same bits eagerly without programmatic dependent launch,
/// eagerly with it, and replayed from a graph captured with it (programmatic edges): a seam that
/// read its inputs before its predecessor finished would differ.
#[test]
fn graph_replay_and_pdl_match_plain_eager_calls_bit_for_bit() {
    gpu!(e, PathChoice::Auto);
    let c = cfg(4, 5120);
    for t in [1, 37, 2048] {
        e.reserve(&c, t).unwrap();
        let ws: Vec<DeviceSeamWeights> = (0..4)
            .map(|s| {
                DeviceSeamWeights::upload(&e, &c, &SeamWeights::synthetic(&c, 70 + s), true, false)
                    .unwrap()
            })
            .collect();
        let x = e
            .upload(&mhc::bench::gpu::random_bf16(t * c.hidden, 1.0, 5))
            .unwrap();
        let r0 = mhc::bench::gpu::random_bf16(t * 4 * c.hidden, 1.0, 6);
        let (post, comb, pre) = synth::carried(&c, t, 7);
        let init = |e: &CudaEngine| -> [SeamBuffers; 2] {
            let mut a = SeamBuffers::zeros(e, &c, t, false).unwrap();
            a.residual = e.upload(&r0).unwrap();
            a.coeffs = Coeffs::upload(e, &post, &comb, &pre).unwrap();
            [a, SeamBuffers::zeros(e, &c, t, false).unwrap()]
        };
        let chain = |e: &CudaEngine, b: &mut [SeamBuffers; 2]| -> mhc::Result<()> {
            for (s, w) in ws.iter().enumerate() {
                let (lo, hi) = b.split_at_mut(1);
                let (src, dst) = if s % 2 == 0 {
                    (&lo[0], &mut hi[0])
                } else {
                    (&hi[0], &mut lo[0])
                };
                e.seam(&c, t, &x, &src.residual, &src.coeffs, w, dst)?;
            }
            Ok(())
        };
        e.set_pdl(false);
        let mut eager = init(&e);
        chain(&e, &mut eager).unwrap();
        e.sync().unwrap();
        e.set_pdl(true);
        let mut eager_pdl = init(&e);
        chain(&e, &mut eager_pdl).unwrap();
        e.sync().unwrap();
        let mut replayed = init(&e);
        let g = e.capture(|e| chain(e, &mut replayed)).unwrap();
        // One launch per seam, two where the plan splits the tails into their own launch.
        let per_seam = if e
            .plan_for(Op::Seam, t, c.hidden, true)
            .unwrap()
            .unwrap()
            .split
        {
            2
        } else {
            1
        };
        assert_eq!(
            g.kernel_nodes().unwrap(),
            4 * per_seam,
            "launches of 4 seams at T={t}"
        );
        g.launch().unwrap();
        e.sync().unwrap();
        for other in [&eager_pdl, &replayed] {
            for i in 0..2 {
                assert_eq!(
                    eager[i].residual.to_host().unwrap(),
                    other[i].residual.to_host().unwrap(),
                    "T={t}"
                );
                assert_eq!(
                    eager[i].layer_input.to_host().unwrap(),
                    other[i].layer_input.to_host().unwrap(),
                    "T={t}"
                );
                assert_eq!(
                    eager[i].coeffs.comb.to_host().unwrap(),
                    other[i].coeffs.comb.to_host().unwrap(),
                    "T={t}"
                );
                assert_eq!(
                    eager[i].coeffs.pre.to_host().unwrap(),
                    other[i].coeffs.pre.to_host().unwrap(),
                    "T={t}"
                );
            }
        }
    }
}

/// A seam launched with programmatic dependent launch lets the next kernel start early; a
/// projection (itself launched with it, streaming w before it waits) that consumes the seam's
/// layer input (poisoned beforehand) must still read the seam's output: the same bits as with it
/// off.
#[test]
fn a_consumer_after_a_pdl_seam_reads_its_output() {
    gpu!(e, PathChoice::Auto);
    let c = cfg(4, 5120);
    let (t, n) = (7, 1024);
    let w = e
        .upload(&mhc::bench::gpu::random_bf16(n * c.hidden, 0.02, 41))
        .unwrap();
    let ws =
        DeviceSeamWeights::upload(&e, &c, &SeamWeights::synthetic(&c, 42), true, false).unwrap();
    let x = e
        .upload(&mhc::bench::gpu::random_bf16(t * c.hidden, 1.0, 43))
        .unwrap();
    let (post, comb, pre) = synth::carried(&c, t, 44);
    let mut src = SeamBuffers::zeros(&e, &c, t, false).unwrap();
    src.residual = e
        .upload(&mhc::bench::gpu::random_bf16(t * 4 * c.hidden, 1.0, 45))
        .unwrap();
    src.coeffs = Coeffs::upload(&e, &post, &comb, &pre).unwrap();
    let mut got = Vec::new();
    for pdl in [false, true] {
        e.set_pdl(pdl);
        let mut dst = SeamBuffers::zeros(&e, &c, t, false).unwrap();
        dst.layer_input.poison().unwrap();
        let mut y = e.zeros::<f32>(t * n).unwrap();
        y.poison().unwrap();
        e.seam(&c, t, &x, &src.residual, &src.coeffs, &ws, &mut dst)
            .unwrap();
        let call = RawCall {
            op: Op::Projection,
            t,
            io: RawIo::default(),
            w: Default::default(),
            proj: RawProjection {
                a: dst.layer_input.ptr(),
                w: w.ptr(),
                y: y.ptr(),
                m: t,
                n,
                k: c.hidden,
                y_bf16: false,
            },
        };
        // SAFETY: a holds t x H, w n x H and y t x n elements.
        unsafe { e.launch_raw(&c, &call, e.stream()) }.unwrap();
        let y = y.to_host().unwrap();
        assert!(
            y.iter().all(|v| v.is_finite()),
            "pdl={pdl}: non-finite output"
        );
        got.push(y.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
    }
    assert_eq!(got[0], got[1]);
}

/// K = 0 is an empty product: y is all zeros (over poisoned outputs), from the generic kernel;
/// the fused one declines and says why.
#[test]
fn projection_with_k_zero_writes_zeros() {
    gpu!(e, PathChoice::Auto);
    let c = cfg(4, 5120);
    let args = OpArgs::projection(&c, 3, 5, 0, &[], &[]).unwrap();
    let (out, route) = e.execute(&args).unwrap();
    assert_eq!(route.path, "unfused", "{route}");
    assert!(
        route.declined.iter().any(|d| d.reason.contains("K = 0")),
        "{route}"
    );
    let y = out.out_f32.unwrap();
    assert_eq!(y.len(), 15);
    assert!(y.iter().all(|v| v.to_bits() == 0), "{y:?}");
    let (out, route) = e.execute(&args.with_bf16_out(true).unwrap()).unwrap();
    assert_eq!(route.kernels, ["uf_projection_ybf16"], "{route}");
    let y = out.out_bf16.unwrap();
    assert_eq!(y.len(), 15);
    assert!(y.iter().all(|v| v.to_bits() == 0), "{y:?}");
}

/// Back-to-back projections (each may start, and stream its w, while the one before it runs):
/// eager calls with programmatic dependent launch and a graph replay of them give the same bits
/// as plain eager calls, including a call that overwrites the previous call's output.
#[test]
fn projection_chains_with_pdl_and_graphs_match_plain_calls() {
    gpu!(e, PathChoice::Auto);
    let c = cfg(4, 5120);
    for (m, n, k) in [
        (1, 2560, 5120),
        (5, 1000, 4104),
        (16, 2048, 7168),
        (17, 300, 4096),
    ] {
        let ws: Vec<_> = (0..3)
            .map(|s| {
                e.upload(&mhc::bench::gpu::random_bf16(n * k, 0.02, 60 + s))
                    .unwrap()
            })
            .collect();
        let a = e
            .upload(&mhc::bench::gpu::random_bf16(m * k, 1.0, 64))
            .unwrap();
        let run = |e: &CudaEngine, ys: &[mhc::cuda::DeviceBuffer<f32>]| -> mhc::Result<()> {
            // w0 -> y0, w1 -> y1, w2 -> y0 (overwrites the first call's output).
            for (w, y) in [(&ws[0], &ys[0]), (&ws[1], &ys[1]), (&ws[2], &ys[0])] {
                let call = RawCall {
                    op: Op::Projection,
                    t: m,
                    io: RawIo::default(),
                    w: Default::default(),
                    proj: RawProjection {
                        a: a.ptr(),
                        w: w.ptr(),
                        y: y.ptr(),
                        m,
                        n,
                        k,
                        y_bf16: false,
                    },
                };
                // SAFETY: a holds m x k, w n x k and y m x n elements.
                unsafe { e.launch_raw(&c, &call, e.stream()) }?;
            }
            Ok(())
        };
        let outputs = |pdl: bool, graph: bool| -> Vec<Vec<u32>> {
            e.set_pdl(pdl);
            let mut ys = [
                e.zeros::<f32>(m * n).unwrap(),
                e.zeros::<f32>(m * n).unwrap(),
            ];
            for y in ys.iter_mut() {
                y.poison().unwrap();
            }
            if graph {
                e.capture(|e| run(e, &ys)).unwrap().launch().unwrap();
            } else {
                run(&e, &ys).unwrap();
            }
            ys.iter()
                .map(|y| y.to_host().unwrap().iter().map(|v| v.to_bits()).collect())
                .collect()
        };
        let plain = outputs(false, false);
        assert!(
            plain
                .iter()
                .flatten()
                .all(|b| f32::from_bits(*b).is_finite()),
            "M={m} N={n} K={k}: poisoned output left"
        );
        assert_eq!(
            outputs(true, false),
            plain,
            "M={m} N={n} K={k}: eager with PDL"
        );
        assert_eq!(
            outputs(true, true),
            plain,
            "M={m} N={n} K={k}: graph with PDL"
        );
    }
    e.set_pdl(true);
}

#[test]
fn capture_never_allocates_it_fails_clearly_instead() {
    gpu!(e, PathChoice::Auto);
    let c = cfg(4, 4096);
    let t = 3000; // never reserved on this fresh engine
    let w = DeviceSeamWeights::upload(&e, &c, &SeamWeights::synthetic(&c, 1), true, false).unwrap();
    let x = e.zeros::<bf16>(t * c.hidden).unwrap();
    let r = e.zeros::<bf16>(t * 4 * c.hidden).unwrap();
    let carried = Coeffs::zeros(&e, &c, t).unwrap();
    let mut out = SeamBuffers::zeros(&e, &c, t, false).unwrap();
    let err = match e.capture(|e| e.seam(&c, t, &x, &r, &carried, &w, &mut out).map(|_| ())) {
        Err(err) => err.to_string(),
        Ok(_) => panic!("a capture that needed a larger workspace succeeded"),
    };
    assert!(err.contains("reserve"), "{err}");
    // After reserve() the same capture works.
    e.reserve(&c, t).unwrap();
    let g = e
        .capture(|e| e.seam(&c, t, &x, &r, &carried, &w, &mut out).map(|_| ()))
        .unwrap();
    g.launch().unwrap();
    e.sync().unwrap();
}

#[test]
fn raw_api_on_a_foreign_stream() {
    gpu!(e, PathChoice::Auto);
    let c = cfg(4, 5120);
    let t = 9;
    let m = seam_inputs(&c, t, 77);
    let args = OpArgs::from_map(Op::Seam, &c, &m, false).unwrap();
    let want = CpuBackend.execute(&args).unwrap().0;
    let up_b = |n: &str| e.upload(m[n].as_bf16(n).unwrap()).unwrap();
    let up_f = |n: &str| e.upload(m[n].as_f32(n).unwrap()).unwrap();
    let (x, r, post, comb, pre) = (
        up_b("x"),
        up_b("residual"),
        up_f("post"),
        up_f("comb"),
        up_f("pre"),
    );
    let w = mhc::SeamWeights {
        fn_: m["fn"].as_f32("fn").unwrap().to_vec(),
        scale: m["scale"].as_f32("scale").unwrap().to_vec(),
        base: m["base"].as_f32("base").unwrap().to_vec(),
        norm_weight: m["norm_weight"].to_f32_lossless("norm_weight").unwrap(),
    };
    let dw = DeviceSeamWeights::upload(&e, &c, &w, true, false).unwrap();
    let out = SeamBuffers::zeros(&e, &c, t, false).unwrap();
    let mut stream: cudarc::driver::sys::CUstream = std::ptr::null_mut();
    unsafe { cudarc::driver::sys::cuStreamCreate(&mut stream, 1) }
        .result()
        .unwrap();
    let call = RawCall {
        op: Op::Seam,
        t,
        io: RawIo {
            x: x.ptr(),
            residual: r.ptr(),
            post: post.ptr(),
            comb: comb.ptr(),
            pre: pre.ptr(),
            residual_out: out.residual.ptr(),
            layer_input: out.layer_input.ptr(),
            post_out: out.coeffs.post.ptr(),
            comb_out: out.coeffs.comb.ptr(),
            pre_out: out.coeffs.pre.ptr(),
            ..Default::default()
        },
        w: dw.raw(),
        proj: RawProjection::default(),
    };
    let route = unsafe { e.launch_raw(&c, &call, stream) }.unwrap();
    assert_eq!(route.path, "fused");
    unsafe { cudarc::driver::sys::cuStreamSynchronize(stream) }
        .result()
        .unwrap();
    let s = check::compare_bf16(
        &out.layer_input.to_host().unwrap(),
        want.layer_input.as_ref().unwrap(),
    );
    assert!(s.within_contract(), "{s:?}");
    let s = check::compare_bf16(
        &out.residual.to_host().unwrap(),
        want.residual_out.as_ref().unwrap(),
    );
    assert!(s.within_contract(), "{s:?}");
    // T = 0 launches nothing and succeeds.
    let zero = RawCall { t: 0, ..call };
    let route = unsafe { e.launch_raw(&c, &zero, stream) }.unwrap();
    assert!(route.kernels.is_empty());
    unsafe { cudarc::driver::sys::cuStreamDestroy_v2(stream) }
        .result()
        .unwrap();
}

#[test]
fn one_hot_pre_is_a_bit_exact_copy_on_the_gpu() {
    gpu!(e, PathChoice::Auto);
    let c = cfg(4, 7168);
    let t = 33;
    let mut m = synth::inputs(
        &c,
        &InputSpec {
            op: Op::Collapse,
            t,
            norm: false,
            proj_nk: (0, 0),
        },
        3,
    );
    let mut pre = vec![0f32; t * 4];
    for i in 0..t {
        pre[i * 4 + (i % 4)] = 1.0;
    }
    m.insert(
        "pre".into(),
        mhc::tensor::HostTensor::f32("pre", &[t, 4], pre).unwrap(),
    );
    let args = OpArgs::from_map(Op::Collapse, &c, &m, true).unwrap();
    let (out, route) = e.execute(&args).unwrap();
    assert_eq!(route.path, "fused");
    let li = out.layer_input.unwrap();
    let r = args.residual.unwrap();
    for i in 0..t {
        let j = i % 4;
        let src = &r[(i * 4 + j) * 7168..(i * 4 + j + 1) * 7168];
        assert!(same_bits(&li[i * 7168..(i + 1) * 7168], src), "token {i}");
    }
}

/// The bf16 output on the generic kernel (`uf_projection_ybf16`) and through the device-buffer
/// API (`CudaEngine::projection_bf16`, over a poisoned buffer): each the f32 output of the same
/// path rounded once to nearest even, within the check's bound; a wrong length is refused by name.
#[test]
fn projection_bf16_output_on_every_path() {
    gpu!(e, PathChoice::Auto);
    let c = cfg(4, 5120);
    let (m, n, k) = (5, 300, 4104);
    let spec = InputSpec {
        op: Op::Projection,
        t: m,
        norm: false,
        proj_nk: (n, k),
    };
    let inputs = synth::inputs(&c, &spec, 77);
    let args = OpArgs::from_map(Op::Projection, &c, &inputs, false).unwrap();
    let args_b = args.clone().with_bf16_out(true).unwrap();
    let rounded =
        |y: &[f32]| -> Vec<u16> { y.iter().map(|v| bf16::from_f32(*v).to_bits()).collect() };
    for path in [PathChoice::Unfused, PathChoice::Fused] {
        e.set_path(path);
        let y = e.execute(&args).unwrap().0.out_f32.unwrap();
        let (out, route) = e.execute(&args_b).unwrap();
        assert!(
            route.kernels.iter().all(|k| k.ends_with("_ybf16")),
            "{path:?}: {route}"
        );
        let ms = check::verify(&args_b, &out).unwrap();
        assert!(ms.iter().all(|x| x.pass), "{path:?}: {ms:?}");
        let yb: Vec<u16> = out.out_bf16.unwrap().iter().map(|v| v.to_bits()).collect();
        assert_eq!(yb, rounded(&y), "{path:?}");
        if path == PathChoice::Fused {
            let p = args.projection.unwrap();
            let (a, w) = (e.upload(p.a).unwrap(), e.upload(p.w).unwrap());
            let mut yd = e.zeros::<bf16>(m * n).unwrap();
            yd.poison().unwrap();
            e.projection_bf16(&c, (m, n, k), &a, &w, &mut yd).unwrap();
            e.sync().unwrap();
            let got: Vec<u16> = yd.to_host().unwrap().iter().map(|v| v.to_bits()).collect();
            assert_eq!(got, rounded(&y), "device-buffer API");
            let mut short = e.zeros::<bf16>(m * n - 1).unwrap();
            let err = e
                .projection_bf16(&c, (m, n, k), &a, &w, &mut short)
                .unwrap_err()
                .to_string();
            assert!(err.contains("`out`"), "{err}");
        }
    }
    e.set_path(PathChoice::Auto);
}

#[test]
fn projection_shapes_accuracy_and_invariance() {
    gpu!(e, PathChoice::Auto);
    let c = cfg(4, 5120);
    for (k, n) in [
        (4096, 1024),
        (5120, 2560),
        (7168, 2048),
        (7168, 100),
        (4104, 33),
    ] {
        for m in [1, 2, 4, 8, 16, 33] {
            let spec = InputSpec {
                op: Op::Projection,
                t: m,
                norm: false,
                proj_nk: (n, k),
            };
            let inputs = synth::inputs(&c, &spec, (m * 31 + n) as u64);
            let args = OpArgs::from_map(Op::Projection, &c, &inputs, false).unwrap();
            let (out, route) = e.execute(&args).unwrap();
            assert_eq!(route.path, "fused", "{route}");
            let ms = check::verify(&args, &out).unwrap();
            assert!(ms.iter().all(|x| x.pass), "M={m} K={k} N={n}: {ms:?}");
            // bf16 output: within the check's bound, and the f32 output rounded.
            let args_b = args.clone().with_bf16_out(true).unwrap();
            let (out_b, route_b) = e.execute(&args_b).unwrap();
            assert_eq!(route_b.path, "fused", "{route_b}");
            let ms = check::verify(&args_b, &out_b).unwrap();
            assert!(ms.iter().all(|x| x.pass), "M={m} K={k} N={n} bf16: {ms:?}");
            let yb = out_b.out_bf16.unwrap();
            let y32 = out.out_f32.as_ref().unwrap();
            assert!(
                yb.iter()
                    .zip(y32)
                    .all(|(b, f)| b.to_bits() == bf16::from_f32(*f).to_bits()),
                "M={m} K={k} N={n}: bf16 output is not the f32 output rounded"
            );
            // Row 0 alone gives the same bits as inside the batch.
            let a = inputs["a"].as_bf16("a").unwrap();
            let one = OpArgs::projection(&c, 1, n, k, &a[..k], args.projection.unwrap().w).unwrap();
            let y1 = e.execute(&one).unwrap().0.out_f32.unwrap();
            let y = out.out_f32.unwrap();
            assert_eq!(
                y1.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                y[..n].iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            );
        }
    }
}
