//! The kernel sources, embedded at build time, and the entry points each module exports.
//!
//! One `.cu` file per kernel family under `kernels/`; `common.cuh` is prepended to each, so NVRTC
//! needs no include path and no CUDA header.

/// Shared device helpers.
pub const COMMON: &str = include_str!("kernels/common.cuh");

/// A kernel family compiled as one module.
#[derive(Clone, Copy, Debug)]
pub struct KernelModule {
    /// Module name (also the NVRTC program name and the cache file stem).
    pub name: &'static str,
    /// The family's own source (without the common header).
    pub source: &'static str,
    /// Entry points loaded from the module.
    pub functions: &'static [&'static str],
    /// Entry points launched in thread-block clusters of up to 16 blocks, beyond the portable 8
    /// (loaded too, with the non-portable cluster size allowed).
    pub clusters: &'static [&'static str],
}

impl KernelModule {
    /// Every entry point of the module: `functions`, then `clusters`.
    pub fn entry_points(&self) -> impl Iterator<Item = &'static str> + use<> {
        self.functions.iter().chain(self.clusters).copied()
    }

    /// The full source NVRTC compiles.
    pub fn full_source(&self) -> String {
        format!("{COMMON}\n// ---- {}.cu ----\n{}", self.name, self.source)
    }
}

/// The fused seam kernels.
pub const SEAM: KernelModule = KernelModule {
    name: "seam",
    source: include_str!("kernels/seam.cu"),
    functions: &[
        "mhc_seam",
        "mhc_seam_v4",
        "mhc_pre_delayed",
        "mhc_pre",
        "mhc_entry",
        "mhc_head",
        "mhc_final",
        "mhc_seam_tails",
        "mhc_pre_delayed_tails",
        "mhc_entry_tails",
        "mhc_final_tails",
        "mhc_seam_st",
        "mhc_seam_v4_st",
        "mhc_fn_split",
        "mhc_post",
        "mhc_expand",
    ],
    clusters: &[
        "mhc_seam_cl",
        "mhc_pre_delayed_cl",
        "mhc_entry_cl",
        "mhc_seam_clp",
        "mhc_pre_delayed_clp",
        "mhc_seam_cl2",
        "mhc_seam_clp2",
        "mhc_seam_cl_ch1",
        "mhc_seam_cl_ch2",
        "mhc_seam_cl_ch4",
        "mhc_seam_clp_ch1",
        "mhc_seam_clp_ch2",
        "mhc_seam_clp_ch4",
        "mhc_seam_v4_cl",
        "mhc_seam_v4_clp",
    ],
};

/// The unfused (generic and baseline) kernels and utilities.
pub const UNFUSED: KernelModule = KernelModule {
    name: "unfused",
    source: include_str!("kernels/unfused.cu"),
    functions: &[
        "uf_post_map",
        "uf_rms",
        "uf_project",
        "uf_gate_pre",
        "uf_gate_post",
        "uf_comb_logits",
        "uf_row_softmax",
        "uf_row_norm",
        "uf_col_norm",
        "uf_collapse",
        "uf_rmsnorm",
        "uf_mxfp8",
        "uf_expand",
        "uf_widen",
        "uf_fold",
        "mhc_copy",
        "uf_projection",
        "uf_projection_ybf16",
        "mhc_node_probe",
        "mhc_read_probe",
    ],
    clusters: &[],
};

/// The projection's entry points, each twice: `<name>` with f32 output and `<name>_ybf16`, the
/// same kernel with bf16 output (kernels/projection.cu); and the map from one to the other.
macro_rules! projection_kernels {
    ($($name:literal),* $(,)?) => {
        /// The compressor projection.
        pub const PROJECTION: KernelModule = KernelModule {
            name: "projection",
            source: include_str!("kernels/projection.cu"),
            functions: &[$($name,)* $(concat!($name, "_ybf16"),)*],
            clusters: &[],
        };

        /// The bf16-output twin of projection kernel `name` (None for a name that is not one).
        pub fn projection_ybf16(name: &str) -> Option<&'static str> {
            match name {
                $($name => Some(concat!($name, "_ybf16")),)*
                _ => None,
            }
        }
    };
}

projection_kernels!(
    "mhc_projection_m4",
    "mhc_projection_m8",
    "mhc_projection_m16",
    "mhc_projection_w16_m4",
    "mhc_projection_w16_m8",
    "mhc_projection_rr_c4",
    "mhc_projection_rr1_c4",
    "mhc_projection_rr_c5",
    "mhc_projection_rr_c7",
    "mhc_projection_rr2_c4",
    "mhc_projection_rr2_c5",
    "mhc_projection_rrb_c4",
    "mhc_projection_rrb_c5",
    "mhc_projection_rrb_c7",
    "mhc_projection_rrb_c5_mc2",
    "mhc_projection_rrb_c7_xf",
    "mhc_projection_rrb_c4_aw",
    "mhc_projection_rrb_c5_aw",
    "mhc_projection_rrb_c7_xf_aw",
    "mhc_projection_rrb_c4_as",
    "mhc_projection_rrb_c5_as",
    "mhc_projection_rrb_c4_as_mc2",
    "mhc_projection_rrb_c5_as_mc2",
    "mhc_projection_rs2",
    "mhc_projection_rr8_c4",
    "mhc_projection_rr8_c5",
    "mhc_projection_rr8_c7",
);

/// Every module, in load order.
pub const ALL: [KernelModule; 3] = [SEAM, UNFUSED, PROJECTION];

#[cfg(test)]
mod tests {
    use super::*;

    /// Every projection kernel has its bf16-output twin in the module, and only those.
    #[test]
    fn every_projection_kernel_has_a_bf16_twin() {
        let f = PROJECTION.functions;
        let (f32s, twins): (Vec<&str>, Vec<&str>) = f.iter().partition(|n| !n.ends_with("_ybf16"));
        assert_eq!(f32s.len(), 27);
        assert_eq!(f32s.len(), twins.len());
        for n in &f32s {
            let t = projection_ybf16(n).unwrap();
            assert_eq!(t, format!("{n}_ybf16"));
            assert!(twins.contains(&t), "{t}");
        }
        assert_eq!(projection_ybf16("mhc_projection_m4_ybf16"), None);
        assert_eq!(projection_ybf16("mhc_seam"), None);
    }
}
