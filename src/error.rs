//! One error type for the whole crate.
//!
//! Every variant that concerns a tensor names it, and shape errors carry both the expected and the
//! found shape, so that a user who passes a wrong file or buffer learns which one and how it is
//! wrong without reading our code. Nothing on a path that user input reaches panics; it returns
//! one of these.

use std::path::PathBuf;

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in mhc.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A tensor has the wrong shape.
    #[error("tensor `{tensor}`: expected shape {expected:?}, found {found:?}")]
    Shape {
        tensor: String,
        expected: Vec<usize>,
        found: Vec<usize>,
    },
    /// A tensor has the wrong element type.
    #[error("tensor `{tensor}`: expected dtype {expected}, found {found}")]
    DType {
        tensor: String,
        expected: String,
        found: String,
    },
    /// A tensor that the operation needs was not given.
    #[error("tensor `{tensor}` is missing{}", where_.as_ref().map(|w| format!(" from {w}")).unwrap_or_default())]
    Missing {
        tensor: String,
        where_: Option<String>,
    },
    /// A buffer has the wrong number of elements for the shape it stands for.
    #[error("tensor `{tensor}`: expected {expected} elements (shape {shape:?}), found {found}")]
    Length {
        tensor: String,
        shape: Vec<usize>,
        expected: usize,
        found: usize,
    },
    /// A configuration value or dimension that no backend supports.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// An argument that makes no sense (an unknown op name, a bad flag value).
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A checkpoint or tensor file could not be read or parsed.
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
    /// An I/O error with the path it concerns.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// No usable CUDA device or driver.
    #[error("no CUDA GPU available: {0}")]
    NoGpu(String),
    /// A forced execution path cannot serve these inputs.
    #[error("path `{path}` was forced but cannot run this call: {reason}")]
    PathUnavailable { path: String, reason: String },
    /// A CUDA driver, NVRTC or cuBLAS call failed.
    #[error("CUDA: {0}")]
    Cuda(String),
    /// A kernel failed to compile (the NVRTC log is included).
    #[error("kernel `{kernel}` failed to compile for {arch}:\n{log}")]
    Compile {
        kernel: String,
        arch: String,
        log: String,
    },
}

impl Error {
    /// Shorthand for [`Error::Shape`].
    pub fn shape(tensor: &str, expected: &[usize], found: &[usize]) -> Self {
        Error::Shape {
            tensor: tensor.to_string(),
            expected: expected.to_vec(),
            found: found.to_vec(),
        }
    }

    /// Shorthand for [`Error::Missing`] without a location.
    pub fn missing(tensor: &str) -> Self {
        Error::Missing {
            tensor: tensor.to_string(),
            where_: None,
        }
    }

    /// Checks that a flat buffer has exactly the elements of `shape`.
    pub fn check_len(tensor: &str, shape: &[usize], found: usize) -> Result<()> {
        let expected: usize = shape.iter().product();
        if expected == found {
            Ok(())
        } else {
            Err(Error::Length {
                tensor: tensor.to_string(),
                shape: shape.to_vec(),
                expected,
                found,
            })
        }
    }
}
