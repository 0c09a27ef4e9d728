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
    let bytes = crate::budget::read_regular_file(path, u64::MAX).map_err(|e| IrError::Io {
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

/// A tensor's type and byte count for the safetensors header, without its bytes.
struct HeaderView<'a>(&'a HostTensor);

impl safetensors::View for HeaderView<'_> {
    fn dtype(&self) -> StDtype {
        to_st(self.0.dtype)
    }
    fn shape(&self) -> &[usize] {
        &self.0.shape
    }
    fn data(&self) -> std::borrow::Cow<'_, [u8]> {
        std::borrow::Cow::Borrowed(&[])
    }
    fn data_len(&self) -> usize {
        self.0.bytes.len()
    }
}

/// The safetensors file of `tensors` in parts, to be written without assembling it: its
/// beginning (length and JSON header) and the tensors whose bytes follow, in file order. The
/// parts concatenated are [`to_safetensors_bytes`]'s bytes.
pub fn safetensors_parts(tensors: &Weights) -> Result<(Vec<u8>, Vec<&HostTensor>)> {
    for (k, t) in tensors {
        let numel = t.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        if numel.and_then(|n| n.checked_mul(t.dtype.size_bytes())) != Some(t.bytes.len()) {
            return Err(IrError::Weight {
                name: k.clone(),
                msg: format!(
                    "{} bytes for {}{:?}",
                    t.bytes.len(),
                    t.dtype.name(),
                    t.shape
                ),
            });
        }
    }
    let views = tensors.iter().map(|(k, t)| (k.as_str(), HeaderView(t)));
    let head = safetensors::serialize(views, None).map_err(|e| IrError::Graph(e.to_string()))?;
    // The safetensors crate's order: by descending dtype alignment, then by name (the map's
    // order, kept by the stable sort).
    let mut order: Vec<(&String, &HostTensor)> = tensors.iter().collect();
    order.sort_by_key(|(_, t)| std::cmp::Reverse(to_st(t.dtype)));
    Ok((head, order.into_iter().map(|(_, t)| t).collect()))
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
///
/// The temporary file is created in the target's folder with a random name, exclusively
/// (`O_CREAT | O_EXCL`, which never follows a symlink at that name: `tempfile` retries another
/// name), so a symlink planted at a predictable name cannot redirect the write, and two writers
/// racing to one path each write their own file: the last rename wins and the target always
/// holds one writer's whole output. It is created with mode 0666 less the umask, as
/// `std::fs::write` creates files.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic_with(path, &mut |w| w.write_all(bytes))
}

/// [`write_atomic`] of what `write` writes (through a buffer), so a large output need not be
/// assembled in memory first.
pub fn write_atomic_with(
    path: &Path,
    write: &mut dyn FnMut(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    use std::io::Write;
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => {
            // A device or a pipe named by the user: written in place, never created.
            let f = std::fs::OpenOptions::new().write(true).open(path)?;
            let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
            write(&mut w)?;
            return w.flush();
        }
        _ => {}
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let prefix = format!(".{name}.");
    let mut b = tempfile::Builder::new();
    b.prefix(&prefix).suffix(".fxhlo-tmp");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        b.permissions(std::fs::Permissions::from_mode(0o666));
    }
    let mut tmp = b.tempfile_in(dir)?;
    {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, tmp.as_file_mut());
        write(&mut w)?;
        w.flush()?;
    }
    // On error the temporary file is removed when `tmp` (or the error holding it) drops.
    tmp.persist(path).map(|_| ()).map_err(|e| e.error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_the_serialized_bytes() {
        let mut w = Weights::new();
        for (name, dtype, n) in [
            ("b", DType::F32, 3),
            ("a", DType::I64, 2),
            ("c", DType::U8, 5),
            ("d", DType::F32, 0),
            ("e", DType::F16, 1),
        ] {
            let bytes = (0..n * dtype.size_bytes()).map(|i| i as u8).collect();
            w.insert(
                name.into(),
                HostTensor {
                    dtype,
                    shape: vec![n],
                    bytes,
                },
            );
        }
        let (mut head, tensors) = safetensors_parts(&w).unwrap();
        tensors
            .iter()
            .for_each(|t| head.extend_from_slice(&t.bytes));
        assert_eq!(head, to_safetensors_bytes(&w).unwrap());
        w.get_mut("b").unwrap().bytes.pop();
        assert!(safetensors_parts(&w).is_err());
    }

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

    #[cfg(unix)]
    #[test]
    fn a_planted_symlink_at_the_old_temporary_name_is_not_followed() {
        let dir = std::env::temp_dir().join(format!("fxhlo-plant-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim.txt");
        std::fs::write(&victim, b"precious").unwrap();
        // The names a writer could predict: the old fixed temporary name, and the output itself.
        std::os::unix::fs::symlink(&victim, dir.join(".out.fxa.fxhlo-tmp")).unwrap();
        let out = dir.join("out.fxa");
        write_atomic(&out, b"artifact").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(!std::fs::symlink_metadata(&out).unwrap().is_symlink());
        assert_eq!(std::fs::read(&out).unwrap(), b"artifact");
        // An output that is a symlink is replaced by the file, the file it pointed to untouched.
        let link = dir.join("link.fxa");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        write_atomic(&link, b"new").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(std::fs::read(&link).unwrap(), b"new");
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .filter(|n| n.ends_with(".fxhlo-tmp") && n != ".out.fxa.fxhlo-tmp")
            .collect();
        assert!(left.is_empty(), "temporary files left: {left:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn racing_writers_leave_one_whole_output() {
        let dir = std::env::temp_dir().join(format!("fxhlo-race-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("out.bin");
        // Writers of distinct payloads of different lengths, many rounds.
        let payloads: Vec<Vec<u8>> = (0..8u8)
            .map(|i| vec![i; 100_000 + 7919 * i as usize])
            .collect();
        for _round in 0..20 {
            std::thread::scope(|s| {
                for p in &payloads {
                    let out = &out;
                    s.spawn(move || write_atomic(out, p).unwrap());
                }
            });
            let got = std::fs::read(&out).unwrap();
            assert!(
                payloads.contains(&got),
                "the output is not one writer's whole payload"
            );
        }
        let n = std::fs::read_dir(&dir).unwrap().count();
        assert_eq!(n, 1, "temporary files were left");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn new_files_get_the_usual_mode() {
        use std::os::unix::fs::PermissionsExt;
        let p = std::env::temp_dir().join(format!("fxhlo-mode-{}.bin", std::process::id()));
        write_atomic(&p, b"x").unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        let q = p.with_extension("ref");
        std::fs::write(&q, b"x").unwrap();
        let want = std::fs::metadata(&q).unwrap().permissions().mode() & 0o777;
        std::fs::remove_file(&q).unwrap();
        assert_eq!(mode, want, "mode {mode:o}, std::fs::write gives {want:o}");
        std::fs::remove_file(&p).unwrap();
    }
}
