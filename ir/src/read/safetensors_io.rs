//! Reading and writing safetensors files as [`HostTensor`]s.

use crate::error::{IrError, Result};
use crate::graph::{HostTensor, Weights};
use crate::DType;
use safetensors::{Dtype as StDtype, SafeTensors};
use std::path::Path;

fn from_st(d: StDtype) -> Option<DType> {
    Some(match d {
        StDtype::F32 => DType::F32,
        StDtype::F64 => DType::F64,
        StDtype::F16 => DType::F16,
        StDtype::BF16 => DType::BF16,
        StDtype::I64 => DType::I64,
        StDtype::I32 => DType::I32,
        StDtype::I16 => DType::I16,
        StDtype::I8 => DType::I8,
        StDtype::U8 => DType::U8,
        StDtype::BOOL => DType::Bool,
        _ => return None,
    })
}

fn to_st(d: DType) -> StDtype {
    match d {
        DType::F32 => StDtype::F32,
        DType::F64 => StDtype::F64,
        DType::F16 => StDtype::F16,
        DType::BF16 => StDtype::BF16,
        DType::I64 => StDtype::I64,
        DType::I32 => StDtype::I32,
        DType::I16 => StDtype::I16,
        DType::I8 => StDtype::I8,
        DType::U8 => StDtype::U8,
        DType::Bool => StDtype::BOOL,
    }
}

/// Parses safetensors bytes; `file` names the source in errors.
pub fn parse_safetensors(bytes: &[u8], file: &str) -> Result<Weights> {
    let st = SafeTensors::deserialize(bytes).map_err(|e| IrError::Format {
        file: file.to_string(),
        msg: format!("not a valid safetensors file: {e}"),
    })?;
    let mut out = Weights::new();
    for (name, view) in st.tensors() {
        let dtype = from_st(view.dtype()).ok_or_else(|| IrError::Weight {
            name: name.clone(),
            msg: format!("{file}: unsupported dtype {:?}", view.dtype()),
        })?;
        out.insert(
            name,
            HostTensor {
                dtype,
                shape: view.shape().to_vec(),
                bytes: view.data().to_vec(),
            },
        );
    }
    Ok(out)
}

/// Reads a safetensors file.
pub fn read_safetensors(path: &Path) -> Result<Weights> {
    let bytes = std::fs::read(path).map_err(|e| IrError::Io {
        path: path.display().to_string(),
        source: e,
    })?;
    parse_safetensors(&bytes, &path.display().to_string())
}

/// Serializes tensors to safetensors bytes (keys in sorted order, so output is deterministic).
pub fn to_safetensors_bytes(tensors: &Weights) -> Result<Vec<u8>> {
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .map(|(k, t)| {
            safetensors::tensor::TensorView::new(to_st(t.dtype), t.shape.clone(), &t.bytes)
                .map(|v| (k.clone(), v))
                .map_err(|e| IrError::Weight {
                    name: k.clone(),
                    msg: e.to_string(),
                })
        })
        .collect::<Result<_>>()?;
    safetensors::serialize(views, None).map_err(|e| IrError::Graph(e.to_string()))
}

/// Writes tensors to a safetensors file, via a temporary file so a failed write loses nothing.
pub fn write_safetensors(path: &Path, tensors: &Weights) -> Result<()> {
    let bytes = to_safetensors_bytes(tensors)?;
    let tmp = path.with_extension("safetensors.tmp");
    let io = |e| IrError::Io {
        path: path.display().to_string(),
        source: e,
    };
    std::fs::write(&tmp, bytes).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}
