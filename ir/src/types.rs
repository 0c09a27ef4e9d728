//! Tensor types: a dtype and a shape of static or symbolic dimensions.

use crate::DType;
use std::fmt;

/// One dimension of a shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dim {
    /// A known size.
    Static(i64),
    /// A symbolic size, named (`s0`).
    Sym(String),
}

impl Dim {
    /// The static size, if known.
    pub fn as_static(&self) -> Option<i64> {
        match self {
            Dim::Static(n) => Some(*n),
            Dim::Sym(_) => None,
        }
    }
}

impl From<i64> for Dim {
    fn from(n: i64) -> Self {
        Dim::Static(n)
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Static(n) => write!(f, "{n}"),
            Dim::Sym(s) => f.write_str(s),
        }
    }
}

/// A tensor's element type and shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    /// Element type.
    pub dtype: DType,
    /// Dimensions, outermost first; empty for a 0-d tensor.
    pub shape: Vec<Dim>,
}

impl TensorType {
    /// A type with all-static dimensions.
    pub fn new(dtype: DType, shape: &[i64]) -> Self {
        TensorType {
            dtype,
            shape: shape.iter().map(|&d| Dim::Static(d)).collect(),
        }
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The shape as static sizes, if every dimension is static.
    pub fn static_shape(&self) -> Option<Vec<i64>> {
        self.shape.iter().map(Dim::as_static).collect()
    }

    /// Number of elements, if static and representable; `None` if symbolic or overflowing.
    pub fn numel(&self) -> Option<i64> {
        self.shape
            .iter()
            .try_fold(1i64, |acc, d| acc.checked_mul(d.as_static()?))
    }

    /// Same shape, another dtype.
    pub fn with_dtype(&self, dtype: DType) -> Self {
        TensorType {
            dtype,
            shape: self.shape.clone(),
        }
    }
}

/// Formats a shape as `[2, 3, s0]`.
pub fn shape_string(shape: &[Dim]) -> String {
    let parts: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dtype, shape_string(&self.shape))
    }
}
