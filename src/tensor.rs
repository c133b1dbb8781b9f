//! Host tensors and safetensors files.
//!
//! `mhc run` and `mhc check` move whole sets of named tensors between files, backends and
//! comparisons; [`TensorMap`] is that set. Typed Rust callers never need it: the ops take slices.
//! Only the three dtypes of SPEC section 1 exist here (bf16, f32, u8); a file holding anything
//! else for a tensor we read is refused with an error that names the tensor.

use crate::error::{Error, Result};
use half::bf16;
use safetensors::{Dtype, SafeTensors, tensor::TensorView};
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

/// Element types that cross the interfaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DType {
    /// bfloat16.
    BF16,
    /// IEEE f32.
    F32,
    /// Raw bytes (E4M3 values and E8M0 scales of the MXFP8 output).
    U8,
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::U8 => "u8",
        })
    }
}

/// The elements of a host tensor.
#[derive(Clone, Debug, PartialEq)]
pub enum TensorData {
    /// bf16 elements.
    BF16(Vec<bf16>),
    /// f32 elements.
    F32(Vec<f32>),
    /// Raw bytes.
    U8(Vec<u8>),
}

/// A dense, row-major host tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    /// The shape; the product is the element count.
    pub shape: Vec<usize>,
    /// The elements.
    pub data: TensorData,
}

/// Named tensors, as in a safetensors file (SPEC section 9 names).
pub type TensorMap = BTreeMap<String, HostTensor>;

impl HostTensor {
    /// A bf16 tensor; the data must fill the shape.
    pub fn bf16(name: &str, shape: &[usize], data: Vec<bf16>) -> Result<Self> {
        Error::check_len(name, shape, data.len())?;
        Ok(HostTensor {
            shape: shape.to_vec(),
            data: TensorData::BF16(data),
        })
    }

    /// An f32 tensor; the data must fill the shape.
    pub fn f32(name: &str, shape: &[usize], data: Vec<f32>) -> Result<Self> {
        Error::check_len(name, shape, data.len())?;
        Ok(HostTensor {
            shape: shape.to_vec(),
            data: TensorData::F32(data),
        })
    }

    /// A byte tensor; the data must fill the shape.
    pub fn u8(name: &str, shape: &[usize], data: Vec<u8>) -> Result<Self> {
        Error::check_len(name, shape, data.len())?;
        Ok(HostTensor {
            shape: shape.to_vec(),
            data: TensorData::U8(data),
        })
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        match self.data {
            TensorData::BF16(_) => DType::BF16,
            TensorData::F32(_) => DType::F32,
            TensorData::U8(_) => DType::U8,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// True when the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn dtype_error(&self, name: &str, expected: &str) -> Error {
        Error::DType {
            tensor: name.to_string(),
            expected: expected.to_string(),
            found: self.dtype().to_string(),
        }
    }

    /// The bf16 elements, or an error naming `name` if the tensor is not bf16.
    pub fn as_bf16(&self, name: &str) -> Result<&[bf16]> {
        match &self.data {
            TensorData::BF16(v) => Ok(v),
            _ => Err(self.dtype_error(name, "bf16")),
        }
    }

    /// The f32 elements, or an error naming `name` if the tensor is not f32.
    pub fn as_f32(&self, name: &str) -> Result<&[f32]> {
        match &self.data {
            TensorData::F32(v) => Ok(v),
            _ => Err(self.dtype_error(name, "f32")),
        }
    }

    /// The bytes, or an error naming `name` if the tensor is not u8.
    pub fn as_u8(&self, name: &str) -> Result<&[u8]> {
        match &self.data {
            TensorData::U8(v) => Ok(v),
            _ => Err(self.dtype_error(name, "u8")),
        }
    }

    /// The elements widened to f32, for tensors where SPEC accepts bf16 or f32 (norm weights).
    pub fn to_f32_lossless(&self, name: &str) -> Result<Vec<f32>> {
        match &self.data {
            TensorData::F32(v) => Ok(v.clone()),
            TensorData::BF16(v) => Ok(v.iter().map(|x| x.to_f32()).collect()),
            TensorData::U8(_) => Err(self.dtype_error(name, "bf16 or f32")),
        }
    }

    /// Errors unless the shape is exactly `expected`.
    pub fn expect_shape(&self, name: &str, expected: &[usize]) -> Result<()> {
        if self.shape == expected {
            Ok(())
        } else {
            Err(Error::shape(name, expected, &self.shape))
        }
    }

    fn bytes(&self) -> &[u8] {
        match &self.data {
            TensorData::BF16(v) => bytemuck::cast_slice(v),
            TensorData::F32(v) => bytemuck::cast_slice(v),
            TensorData::U8(v) => v,
        }
    }

    /// Builds a host tensor from the raw little-endian bytes of a safetensors view.
    pub fn from_view(name: &str, dtype: Dtype, shape: &[usize], bytes: &[u8]) -> Result<Self> {
        // pod_collect_to_vec copies through an aligned buffer: mapped files give no alignment
        // guarantee for a tensor's first byte.
        match dtype {
            Dtype::BF16 => Self::bf16(name, shape, bytemuck::pod_collect_to_vec(bytes)),
            Dtype::F32 => Self::f32(name, shape, bytemuck::pod_collect_to_vec(bytes)),
            Dtype::U8 | Dtype::F8_E4M3 | Dtype::F8_E8M0 => Self::u8(name, shape, bytes.to_vec()),
            other => Err(Error::DType {
                tensor: name.to_string(),
                expected: "bf16, f32 or u8".into(),
                found: format!("{other:?}"),
            }),
        }
    }
}

/// Looks up `name`, or errors naming it.
pub fn get<'a>(map: &'a TensorMap, name: &str) -> Result<&'a HostTensor> {
    map.get(name).ok_or_else(|| Error::missing(name))
}

fn st_dtype(d: DType) -> Dtype {
    match d {
        DType::BF16 => Dtype::BF16,
        DType::F32 => Dtype::F32,
        DType::U8 => Dtype::U8,
    }
}

/// Reads every tensor of a safetensors file. Truncated or corrupted files give an error.
pub fn read_safetensors(path: &Path) -> Result<TensorMap> {
    let file = std::fs::File::open(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    // SAFETY: the map is read-only and dropped before this function returns; a file truncated
    // underneath us by another process could still fault, as for any mmap reader.
    let mmap = unsafe { memmap2::Mmap::map(&file) }.map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let st = SafeTensors::deserialize(&mmap).map_err(|e| Error::File {
        path: path.to_path_buf(),
        message: format!("not a valid safetensors file: {e}"),
    })?;
    let mut map = TensorMap::new();
    for (name, view) in st.iter() {
        let t = HostTensor::from_view(name, view.dtype(), view.shape(), view.data())?;
        map.insert(name.to_string(), t);
    }
    Ok(map)
}

/// Writes tensors to a safetensors file (atomically: a temporary file is renamed into place).
pub fn write_safetensors(path: &Path, map: &TensorMap) -> Result<()> {
    let mut views = Vec::with_capacity(map.len());
    for (name, t) in map {
        let view =
            TensorView::new(st_dtype(t.dtype()), t.shape.clone(), t.bytes()).map_err(|e| {
                Error::File {
                    path: path.to_path_buf(),
                    message: format!("tensor `{name}`: {e}"),
                }
            })?;
        views.push((name.clone(), view));
    }
    safetensors::serialize_to_file(views, None, path).map_err(|e| Error::File {
        path: path.to_path_buf(),
        message: format!("could not write: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_wrong_dtype() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.safetensors");
        let mut m = TensorMap::new();
        let x: Vec<bf16> = (0..6).map(|i| bf16::from_f32(i as f32 * 0.5)).collect();
        m.insert("x".into(), HostTensor::bf16("x", &[2, 3], x).unwrap());
        m.insert("e".into(), HostTensor::f32("e", &[0, 4], vec![]).unwrap());
        write_safetensors(&p, &m).unwrap();
        let back = read_safetensors(&p).unwrap();
        assert_eq!(back, m);
        let err = back["x"].as_f32("x").unwrap_err().to_string();
        assert!(
            err.contains("`x`") && err.contains("f32") && err.contains("bf16"),
            "{err}"
        );
    }

    #[test]
    fn truncated_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.safetensors");
        let mut m = TensorMap::new();
        m.insert(
            "w".into(),
            HostTensor::f32("w", &[64], vec![1.0; 64]).unwrap(),
        );
        write_safetensors(&p, &m).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        for cut in [0, 5, 8, 20, bytes.len() - 1] {
            std::fs::write(&p, &bytes[..cut]).unwrap();
            let err = read_safetensors(&p).unwrap_err().to_string();
            assert!(err.contains("safetensors"), "{err}");
        }
    }

    #[test]
    fn length_mismatch_names_the_tensor() {
        let err = HostTensor::f32("pre", &[3, 4], vec![0.0; 11]).unwrap_err();
        assert!(err.to_string().contains("`pre`"));
    }
}
