//! The compiled artifact: a versioned container holding the program, its constants and, for
//! reference, the optimized graph and its StableHLO.
//!
//! Layout (all integers little-endian):
//! ```text
//! b"FXHLOFXA"           magic, 8 bytes
//! u32                   format version (FORMAT_VERSION)
//! u64, bytes            header: JSON of ArtifactHeader
//! u64, bytes            constants: a safetensors file
//! u32                   CRC-32 of everything before it
//! ```
//! Loading checks the magic, the version, every length against the file size and the checksum
//! before it parses anything, then validates the program against its constants.

use super::program::{Program, TensorSpec};
use crate::RuntimeError;
use fxhlo_ir::read::safetensors_io::{parse_safetensors, safetensors_parts};
use fxhlo_ir::Weights;
use serde::{Deserialize, Serialize};
use std::io::Write;

/// The first bytes of every artifact.
pub const MAGIC: &[u8; 8] = b"FXHLOFXA";
/// The artifact format this build reads and writes.
pub const FORMAT_VERSION: u32 = 11;

/// Everything a run needs, loadable without the compiler.
#[derive(Clone, Debug, PartialEq)]
pub struct Artifact {
    /// The JSON header.
    pub header: ArtifactHeader,
    /// Constant tensors (weights), keyed by the names in `header.program.constants`.
    pub constants: Weights,
}

/// The serialized part of an artifact besides its constants.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArtifactHeader {
    /// Version of the compiler that wrote it.
    pub compiler_version: String,
    /// The optimization level it was compiled at.
    pub opt_level: u8,
    /// The program.
    pub program: Program,
    /// IR text of the optimized graph the program was planned from.
    pub graph: String,
    /// The StableHLO of the optimized graph (weights as arguments), or why it could not be
    /// emitted.
    pub stablehlo: Result<String, String>,
}

/// A writer that keeps the CRC-32 of what went through it.
struct CrcWriter<'a> {
    w: &'a mut dyn Write,
    crc: crc32fast::Hasher,
}

impl Write for CrcWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.w.write(buf)?;
        self.crc.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.w.flush()
    }
}

fn err(msg: impl Into<String>) -> RuntimeError {
    RuntimeError::Artifact(msg.into())
}

impl Artifact {
    /// The user inputs, in call order.
    pub fn inputs(&self) -> Vec<&TensorSpec> {
        let p = &self.header.program;
        p.inputs.iter().map(|&v| &p.values[v as usize]).collect()
    }

    /// The outputs, in order.
    pub fn outputs(&self) -> Vec<&TensorSpec> {
        let p = &self.header.program;
        p.outputs.iter().map(|&v| &p.values[v as usize]).collect()
    }

    /// The artifact's bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>, RuntimeError> {
        let mut out = Vec::new();
        self.write_to(&mut out)
            .map_err(|e| err(format!("serializing: {e}")))?;
        Ok(out)
    }

    /// Writes the artifact's bytes to `w` as it makes them: the constants' bytes are written
    /// from where they are, not gathered into one buffer first.
    pub fn write_to(&self, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        let io = |e: String| std::io::Error::other(e);
        let header = serde_json::to_vec(&self.header).map_err(|e| io(e.to_string()))?;
        let (head, tensors) = safetensors_parts(&self.constants).map_err(|e| io(e.to_string()))?;
        let consts_len = (tensors.iter()).fold(head.len() as u64, |a, t| a + t.bytes.len() as u64);
        let mut w = CrcWriter {
            w,
            crc: crc32fast::Hasher::new(),
        };
        w.write_all(MAGIC)?;
        w.write_all(&FORMAT_VERSION.to_le_bytes())?;
        w.write_all(&(header.len() as u64).to_le_bytes())?;
        w.write_all(&header)?;
        w.write_all(&consts_len.to_le_bytes())?;
        w.write_all(&head)?;
        for t in tensors {
            w.write_all(&t.bytes)?;
        }
        let crc = w.crc.finalize();
        w.w.write_all(&crc.to_le_bytes())
    }

    /// Reads an artifact, checking magic, version, lengths, checksum and the program.
    pub fn from_bytes(b: &[u8]) -> Result<Artifact, RuntimeError> {
        if b.len() < 8 || &b[..8] != MAGIC {
            return Err(err(
                "not an fxhlo artifact (the file does not start with FXHLOFXA)",
            ));
        }
        let mut r = Reader { b, pos: 8 };
        let version = u32::from_le_bytes(r.take(4, "format version")?.try_into().unwrap_or([0; 4]));
        if version != FORMAT_VERSION {
            return Err(err(format!(
                "format version {version}, but this build of fxhlo reads version {FORMAT_VERSION}; recompile the model with this fxhlo"
            )));
        }
        let hlen = r.len("header")?;
        let header = r.take(hlen, "header")?;
        let clen = r.len("constants")?;
        let consts = r.take(clen, "constants")?;
        let body_end = r.pos;
        let crc = u32::from_le_bytes(r.take(4, "checksum")?.try_into().unwrap_or([0; 4]));
        if r.pos != b.len() {
            return Err(err(format!(
                "{} unexpected bytes after the checksum",
                b.len() - r.pos
            )));
        }
        if crc32fast::hash(&b[..body_end]) != crc {
            return Err(err("checksum mismatch: the file is corrupted"));
        }
        let header: ArtifactHeader =
            serde_json::from_slice(header).map_err(|e| err(format!("header: {e}")))?;
        let constants =
            parse_safetensors(consts, "artifact constants").map_err(|e| err(e.to_string()))?;
        let a = Artifact { header, constants };
        a.validate()?;
        Ok(a)
    }

    /// Checks the program's references and the constants against their specs.
    pub fn validate(&self) -> Result<(), RuntimeError> {
        let p = &self.header.program;
        let n = p.values.len();
        let check = |v: u32, what: &str| -> Result<(), RuntimeError> {
            if (v as usize) < n {
                Ok(())
            } else {
                Err(err(format!(
                    "{what} refers to value {v}, but there are {n}"
                )))
            }
        };
        for v in p.values.iter() {
            // Every size computed from a value (its bytes, offsets, memory plan sums) fits.
            let bytes = v
                .shape
                .iter()
                .try_fold(1usize, |a, &d| a.checked_mul(d))
                .and_then(|n| n.checked_mul(v.dtype.size_bytes()))
                .filter(|&b| b <= isize::MAX as usize);
            if bytes.is_none() {
                return Err(err(format!(
                    "value '{}' of type {} has more than {} bytes",
                    fxhlo_ir::quote_name(&v.name),
                    v.type_string(),
                    isize::MAX
                )));
            }
        }
        let mut produced = vec![false; n];
        for &v in &p.inputs {
            check(v, "an input")?;
            produced[v as usize] = true;
        }
        for (v, name) in &p.constants {
            check(*v, "a constant")?;
            produced[*v as usize] = true;
            let spec = &p.values[*v as usize];
            let t = self
                .constants
                .get(name)
                .ok_or_else(|| err(format!("constant '{name}' is missing")))?;
            if t.dtype != spec.dtype || t.shape != spec.shape {
                return Err(err(format!(
                    "constant '{name}' is {}, the program expects {}",
                    TensorSpec {
                        name: name.clone(),
                        dtype: t.dtype,
                        shape: t.shape.clone()
                    }
                    .type_string(),
                    spec.type_string()
                )));
            }
        }
        for (i, s) in p.steps.iter().enumerate() {
            for &v in &s.srcs {
                check(v, &format!("step {i}"))?;
                if !produced[v as usize] {
                    return Err(err(format!(
                        "step {i} reads value '{}' before it is computed",
                        p.values[v as usize].name
                    )));
                }
            }
            for &v in &s.dsts {
                check(v, &format!("step {i}"))?;
                if produced[v as usize] {
                    return Err(err(format!(
                        "step {i} writes value '{}' a second time",
                        p.values[v as usize].name
                    )));
                }
                produced[v as usize] = true;
            }
        }
        for &v in &p.outputs {
            check(v, "an output")?;
            if !produced[v as usize] {
                return Err(err(format!(
                    "output '{}' is never computed",
                    p.values[v as usize].name
                )));
            }
        }
        Ok(())
    }
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], RuntimeError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or_else(|| {
                err(format!(
                    "truncated: the {what} needs {n} bytes at offset {}, the file has {}",
                    self.pos,
                    self.b.len()
                ))
            })?;
        let s = &self.b[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn len(&mut self, what: &str) -> Result<usize, RuntimeError> {
        let raw = self.take(8, &format!("length of the {what}"))?;
        let n = u64::from_le_bytes(raw.try_into().unwrap_or([0; 8]));
        usize::try_from(n).map_err(|_| err(format!("the {what} length {n} is absurd")))
    }
}
