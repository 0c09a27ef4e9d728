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

/// Writes tensors to a safetensors file without losing what was there if the write fails.
pub fn write_safetensors(path: &Path, tensors: &Weights) -> Result<()> {
    let bytes = to_safetensors_bytes(tensors)?;
    write_atomic(path, &bytes).map_err(|e| IrError::Io {
        path: path.display().to_string(),
        source: e,
    })
}

/// Writes `bytes` to `path`. A regular file (or a new one) is written through a temporary file
/// and renamed over, so a failed write loses nothing; anything else (`/dev/null`, a pipe) is
/// written directly, never replaced.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => return std::fs::write(path, bytes),
        _ => {}
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.fxhlo-tmp"));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn writing_to_a_device_does_not_replace_it() {
        use std::os::unix::fs::FileTypeExt;
        write_atomic(Path::new("/dev/null"), b"x").unwrap();
        assert!(std::fs::metadata("/dev/null")
            .unwrap()
            .file_type()
            .is_char_device());
    }

    #[test]
    fn regular_files_are_replaced_whole() {
        let p = std::env::temp_dir().join(format!("fxhlo-write-{}.bin", std::process::id()));
        write_atomic(&p, b"first").unwrap();
        write_atomic(&p, b"second").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"second");
        std::fs::remove_file(&p).unwrap();
    }
}
