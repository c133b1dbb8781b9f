//! Seam weights: loading them from a DeepSeek-V4 safetensors checkpoint (single file or sharded
//! with `model.safetensors.index.json`), and seeded synthetic weights at realistic scale.
//!
//! Checkpoint files are memory-mapped; only the mHC tensors are copied out (a few MB per seam),
//! never whole shards. Every tensor is checked for presence, dtype and shape against the config,
//! and the error names it.

use crate::error::{Error, Result};
use crate::reference::gates::MixWeights;
use crate::spec::Config;
use crate::tensor::HostTensor;
use half::bf16;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal, Uniform};
use safetensors::{Dtype, SafeTensors, tensor::Metadata};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The weights of one seam (or of the V4 head): the projection and the norm that follows.
#[derive(Clone, Debug, PartialEq)]
pub struct SeamWeights {
    /// fn [mixes, n*H] (f32).
    pub fn_: Vec<f32>,
    /// scale `[3]` (seam) or `[1]` (head).
    pub scale: Vec<f32>,
    /// base `[mixes]`.
    pub base: Vec<f32>,
    /// RMSNorm weight `[H]` of the sublayer that follows (the final model norm for the head).
    pub norm_weight: Vec<f32>,
}

impl SeamWeights {
    /// The projection weights as borrowed slices.
    pub fn mix(&self) -> MixWeights<'_> {
        MixWeights {
            fn_: &self.fn_,
            scale: &self.scale,
            base: &self.base,
        }
    }

    /// Seeded synthetic seam weights at the scale of a trained model: fn ~ N(0, 0.01),
    /// scale ~ U(0.5, 1.5), base ~ N(0, 0.1), norm weight ~ bf16(N(1, 0.1)).
    pub fn synthetic(cfg: &Config, seed: u64) -> Self {
        Self::synthetic_with(cfg, cfg.mixes(), 3, seed)
    }

    /// Seeded synthetic head weights (fn [n, n*H], scale `[1]`, base `[n]`).
    pub fn synthetic_head(cfg: &Config, seed: u64) -> Self {
        Self::synthetic_with(cfg, cfg.n, 1, seed)
    }

    fn synthetic_with(cfg: &Config, mixes: usize, scales: usize, seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6d68_635f_7765_6967);
        let fn_d = normal(0.0, 0.01);
        let base_d = normal(0.0, 0.1);
        let norm_d = normal(1.0, 0.1);
        let scale_d = Uniform::new(0.5f32, 1.5).unwrap_or_else(|_| unreachable!());
        SeamWeights {
            fn_: (0..mixes * cfg.k())
                .map(|_| fn_d.sample(&mut rng))
                .collect(),
            scale: (0..scales).map(|_| scale_d.sample(&mut rng)).collect(),
            base: (0..mixes).map(|_| base_d.sample(&mut rng)).collect(),
            norm_weight: (0..cfg.hidden)
                .map(|_| bf16::from_f32(norm_d.sample(&mut rng)).to_f32())
                .collect(),
        }
    }
}

/// A normal distribution with constant, valid parameters.
pub(crate) fn normal(mean: f32, std: f32) -> Normal<f32> {
    // Only called with finite mean and positive std literals.
    Normal::new(mean, std).unwrap_or_else(|_| unreachable!())
}

/// The two seams of a layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeamKind {
    /// Before attention (`hc_attn_*`, followed by `attn_norm`).
    Attn,
    /// Before the FFN (`hc_ffn_*`, followed by `ffn_norm`).
    Ffn,
}

impl SeamKind {
    fn tag(self) -> &'static str {
        match self {
            SeamKind::Attn => "attn",
            SeamKind::Ffn => "ffn",
        }
    }
    /// Checkpoint names of (fn, base, scale, norm weight) for layer `i`.
    pub fn names(self, i: usize) -> [String; 4] {
        let t = self.tag();
        [
            format!("layers.{i}.hc_{t}_fn"),
            format!("layers.{i}.hc_{t}_base"),
            format!("layers.{i}.hc_{t}_scale"),
            format!("layers.{i}.{t}_norm.weight"),
        ]
    }
}

/// A checkpoint's tensor, borrowed from its memory map.
pub struct TensorRef<'a> {
    /// Stored element type.
    pub dtype: Dtype,
    /// Stored shape.
    pub shape: &'a [usize],
    /// Raw little-endian bytes.
    pub bytes: &'a [u8],
}

struct Shard {
    path: PathBuf,
    mmap: memmap2::Mmap,
    header_len: usize,
    meta: Metadata,
}

/// A memory-mapped safetensors checkpoint: one file, a directory holding
/// `model.safetensors.index.json` (or a single `*.safetensors`), or an index json itself.
pub struct Checkpoint {
    shards: Vec<Shard>,
    /// tensor name -> shard index
    index: BTreeMap<String, usize>,
    /// What was opened (for messages).
    pub origin: PathBuf,
}

impl Checkpoint {
    /// Opens a checkpoint; every shard's header is parsed and validated, tensor data is not read.
    pub fn open(path: &Path) -> Result<Self> {
        let io = |source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        let files: Vec<PathBuf> = if path.is_dir() {
            let idx = path.join("model.safetensors.index.json");
            if idx.exists() {
                shard_files(&idx)?
            } else {
                let mut v: Vec<PathBuf> = std::fs::read_dir(path)
                    .map_err(io)?
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
                    .collect();
                v.sort();
                if v.is_empty() {
                    return Err(Error::File {
                        path: path.to_path_buf(),
                        message: "no model.safetensors.index.json and no .safetensors file here"
                            .into(),
                    });
                }
                v
            }
        } else if path.extension().is_some_and(|e| e == "json") {
            shard_files(path)?
        } else {
            vec![path.to_path_buf()]
        };
        let mut shards = Vec::with_capacity(files.len());
        let mut index = BTreeMap::new();
        for (si, f) in files.iter().enumerate() {
            let file = std::fs::File::open(f).map_err(|source| Error::Io {
                path: f.clone(),
                source,
            })?;
            // SAFETY: read-only map of a file we do not modify; see tensor::read_safetensors.
            let mmap = unsafe { memmap2::Mmap::map(&file) }.map_err(|source| Error::Io {
                path: f.clone(),
                source,
            })?;
            let (header_len, meta) =
                SafeTensors::read_metadata(&mmap).map_err(|e| Error::File {
                    path: f.clone(),
                    message: format!("not a valid safetensors file (truncated or corrupted?): {e}"),
                })?;
            for name in meta.tensors().keys() {
                index.insert(name.clone(), si);
            }
            shards.push(Shard {
                path: f.clone(),
                mmap,
                header_len,
                meta,
            });
        }
        Ok(Checkpoint {
            shards,
            index,
            origin: path.to_path_buf(),
        })
    }

    /// All tensor names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.index.keys().map(|s| s.as_str())
    }

    /// A tensor's metadata and bytes, or an error naming it.
    pub fn tensor(&self, name: &str) -> Result<TensorRef<'_>> {
        let si = *self.index.get(name).ok_or_else(|| Error::Missing {
            tensor: name.to_string(),
            where_: Some(self.origin.display().to_string()),
        })?;
        let s = &self.shards[si];
        let info = s.meta.info(name).ok_or_else(|| Error::missing(name))?;
        let start = 8 + s.header_len + info.data_offsets.0;
        let end = 8 + s.header_len + info.data_offsets.1;
        let bytes = s.mmap.get(start..end).ok_or_else(|| Error::File {
            path: s.path.clone(),
            message: format!("tensor `{name}` lies outside the file"),
        })?;
        Ok(TensorRef {
            dtype: info.dtype,
            shape: &info.shape,
            bytes,
        })
    }

    /// Copies out an f32 tensor of exactly `shape`.
    pub fn read_f32(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let t = self.tensor(name)?;
        if t.shape != shape {
            return Err(Error::shape(name, shape, t.shape));
        }
        if t.dtype != Dtype::F32 {
            return Err(Error::DType {
                tensor: name.into(),
                expected: "f32".into(),
                found: format!("{:?}", t.dtype),
            });
        }
        Ok(bytemuck::pod_collect_to_vec(t.bytes))
    }

    /// Copies out a tensor of exactly `shape` stored as bf16 or f32, widened to f32 (norm weights).
    pub fn read_bf16_or_f32(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let t = self.tensor(name)?;
        if t.shape != shape {
            return Err(Error::shape(name, shape, t.shape));
        }
        match t.dtype {
            Dtype::F32 | Dtype::BF16 => {
                HostTensor::from_view(name, t.dtype, t.shape, t.bytes)?.to_f32_lossless(name)
            }
            other => Err(Error::DType {
                tensor: name.into(),
                expected: "bf16 or f32".into(),
                found: format!("{other:?}"),
            }),
        }
    }

    /// Number of layers that have mHC attention weights (`layers.{i}.hc_attn_fn`).
    pub fn layer_count(&self) -> usize {
        (0..)
            .take_while(|i| self.index.contains_key(&format!("layers.{i}.hc_attn_fn")))
            .count()
    }

    /// Loads the weights of seam `kind` of layer `i`, checked against `cfg`.
    pub fn seam(&self, cfg: &Config, i: usize, kind: SeamKind) -> Result<SeamWeights> {
        let [f, b, s, w] = kind.names(i);
        Ok(SeamWeights {
            fn_: self.read_f32(&f, &[cfg.mixes(), cfg.k()])?,
            base: self.read_f32(&b, &[cfg.mixes()])?,
            scale: self.read_f32(&s, &[3])?,
            norm_weight: self.read_bf16_or_f32(&w, &[cfg.hidden])?,
        })
    }

    /// Loads the V4 head (`hc_head_*` with the final `norm.weight`).
    pub fn head(&self, cfg: &Config) -> Result<SeamWeights> {
        Ok(SeamWeights {
            fn_: self.read_f32("hc_head_fn", &[cfg.n, cfg.k()])?,
            base: self.read_f32("hc_head_base", &[cfg.n])?,
            scale: self.read_f32("hc_head_scale", &[1])?,
            norm_weight: self.read_bf16_or_f32("norm.weight", &[cfg.hidden])?,
        })
    }

    /// Loads every seam of the model (attn then ffn for each layer) in decode order.
    pub fn all_seams(&self, cfg: &Config) -> Result<Vec<SeamWeights>> {
        let mut v = Vec::with_capacity(2 * cfg.layers);
        for i in 0..cfg.layers {
            v.push(self.seam(cfg, i, SeamKind::Attn)?);
            v.push(self.seam(cfg, i, SeamKind::Ffn)?);
        }
        Ok(v)
    }
}

fn shard_files(index_json: &Path) -> Result<Vec<PathBuf>> {
    let text = std::fs::read_to_string(index_json).map_err(|source| Error::Io {
        path: index_json.to_path_buf(),
        source,
    })?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| Error::File {
        path: index_json.to_path_buf(),
        message: format!("not valid JSON: {e}"),
    })?;
    let map = v
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| Error::File {
            path: index_json.to_path_buf(),
            message: "no `weight_map` object".into(),
        })?;
    let dir = index_json.parent().unwrap_or(Path::new("."));
    let mut files: Vec<PathBuf> = map
        .values()
        .filter_map(|f| f.as_str().map(|s| dir.join(s)))
        .collect();
    files.sort();
    files.dedup();
    if files.is_empty() {
        return Err(Error::File {
            path: index_json.to_path_buf(),
            message: "`weight_map` names no shard".into(),
        });
    }
    Ok(files)
}

/// Writes a small checkpoint with DeepSeek's tensor names (for tests, examples and `mhc sample`).
pub fn write_checkpoint(
    path: &Path,
    cfg: &Config,
    seams: &[SeamWeights],
    head: Option<&SeamWeights>,
) -> Result<()> {
    let mut m = crate::tensor::TensorMap::new();
    for (s, w) in seams.iter().enumerate() {
        let kind = if s % 2 == 0 {
            SeamKind::Attn
        } else {
            SeamKind::Ffn
        };
        let [f, b, sc, nw] = kind.names(s / 2);
        m.insert(
            f.clone(),
            HostTensor::f32(&f, &[cfg.mixes(), cfg.k()], w.fn_.clone())?,
        );
        m.insert(
            b.clone(),
            HostTensor::f32(&b, &[cfg.mixes()], w.base.clone())?,
        );
        m.insert(sc.clone(), HostTensor::f32(&sc, &[3], w.scale.clone())?);
        let wb: Vec<bf16> = w.norm_weight.iter().map(|v| bf16::from_f32(*v)).collect();
        m.insert(nw.clone(), HostTensor::bf16(&nw, &[cfg.hidden], wb)?);
    }
    if let Some(h) = head {
        m.insert(
            "hc_head_fn".into(),
            HostTensor::f32("hc_head_fn", &[cfg.n, cfg.k()], h.fn_.clone())?,
        );
        m.insert(
            "hc_head_base".into(),
            HostTensor::f32("hc_head_base", &[cfg.n], h.base.clone())?,
        );
        m.insert(
            "hc_head_scale".into(),
            HostTensor::f32("hc_head_scale", &[1], h.scale.clone())?,
        );
        let wb: Vec<bf16> = h.norm_weight.iter().map(|v| bf16::from_f32(*v)).collect();
        m.insert(
            "norm.weight".into(),
            HostTensor::bf16("norm.weight", &[cfg.hidden], wb)?,
        );
    }
    crate::tensor::write_safetensors(path, &m)
}
