//! The `.pt2` reader: archives written by `torch.export.save`, read with no Python.
//!
//! Layout (torch 2.x): a zip (stored, 64-byte aligned) with `<name>/models/model.json` holding
//! `graph_module` (`graph` with `inputs`, `nodes`, `outputs`, `tensor_values`; `signature` with
//! `input_specs` and `output_specs`) and `schema_version`; weights under `<name>/data/weights/`
//! described by `model_weights_config.json` (each entry: `path_name`, `use_pickle`,
//! `tensor_meta` with sizes, strides and storage offset into the raw bytes of the whole storage);
//! lifted constants likewise under `data/constants/`. Every argument is a one-key union
//! (`as_tensor`, `as_ints`, `as_float`, ...); dtypes are `ScalarType` codes.

use super::GraphBuilder;
use crate::arg::Arg;
use crate::error::{IrError, Result};
use crate::graph::{HostTensor, InputKind, Model, Weights};
use crate::types::{Dim, TensorType};
use crate::DType;
use serde_json::Value;
use std::collections::HashMap;
use std::io::Read;

/// Schema major versions of `model.json` this reader knows.
pub const SCHEMA_MAJOR: std::ops::RangeInclusive<i64> = 5..=8;

/// Largest archive member read into memory (bytes).
const MAX_MEMBER: u64 = 16 << 30;

struct Archive<'a> {
    zip: zip::ZipArchive<std::io::Cursor<&'a [u8]>>,
    file: String,
    len: usize,
}

impl Archive<'_> {
    fn err(&self, msg: impl Into<String>) -> IrError {
        IrError::Format {
            file: self.file.clone(),
            msg: msg.into(),
        }
    }

    fn names(&self) -> Vec<String> {
        self.zip.file_names().map(str::to_string).collect()
    }

    fn read(&mut self, name: &str) -> Result<Vec<u8>> {
        let file = self.file.clone();
        let mut f = self.zip.by_name(name).map_err(|e| IrError::Format {
            file: file.clone(),
            msg: format!("member '{name}': {e}"),
        })?;
        let declared = f.size();
        if declared > MAX_MEMBER {
            return Err(IrError::Format {
                file,
                msg: format!("member '{name}' declares {declared} bytes, more than the limit"),
            });
        }
        crate::budget::check(declared, || format!("member '{name}' of {file}")).map_err(|e| {
            IrError::Format {
                file: file.clone(),
                msg: e.to_string(),
            }
        })?;
        // Never trust the declared size for the allocation: a stored member cannot be larger
        // than the archive. The declared size is enforced: reading stops one byte past it, and
        // a member that inflates beyond it is an error as soon as it does.
        let mut buf = Vec::with_capacity((declared as usize).min(self.len));
        (&mut f)
            .take(declared + 1)
            .read_to_end(&mut buf)
            .map_err(|e| IrError::Format {
                file: file.clone(),
                msg: format!("member '{name}' is corrupt or truncated: {e}"),
            })?;
        if buf.len() as u64 > declared {
            return Err(IrError::Format {
                file,
                msg: format!(
                    "member '{name}' inflates beyond its declared size of {declared} bytes"
                ),
            });
        }
        Ok(buf)
    }

    fn json(&mut self, name: &str) -> Result<Value> {
        let bytes = self.read(name)?;
        parse_json(&bytes).map_err(|e| self.err(format!("member '{name}': invalid JSON: {e}")))
    }
}

/// Parses JSON that Python's `json` may have written with bare `NaN`/`Infinity` tokens.
fn parse_json(bytes: &[u8]) -> std::result::Result<Value, serde_json::Error> {
    match serde_json::from_slice(bytes) {
        Ok(v) => Ok(v),
        Err(e) => {
            let text = String::from_utf8_lossy(bytes);
            if !(text.contains("NaN") || text.contains("Infinity")) {
                return Err(e);
            }
            // Quote the non-standard tokens outside strings; `float` below reads them back.
            let mut out = String::with_capacity(text.len() + 16);
            let mut in_str = false;
            let mut escaped = false;
            let mut rest = text.as_ref();
            while let Some(c) = rest.chars().next() {
                if in_str {
                    out.push(c);
                    match (escaped, c) {
                        (true, _) => escaped = false,
                        (false, '\\') => escaped = true,
                        (false, '"') => in_str = false,
                        _ => {}
                    }
                    rest = &rest[c.len_utf8()..];
                    continue;
                }
                let tok = ["-Infinity", "Infinity", "NaN"]
                    .into_iter()
                    .find(|t| rest.starts_with(t));
                match tok {
                    Some(t) => {
                        out.push('"');
                        out.push_str(t);
                        out.push('"');
                        rest = &rest[t.len()..];
                    }
                    None => {
                        in_str = c == '"';
                        out.push(c);
                        rest = &rest[c.len_utf8()..];
                    }
                }
            }
            serde_json::from_str(&out)
        }
    }
}

fn one_key(v: &Value) -> Option<(&str, &Value)> {
    let o = v.as_object()?;
    if o.len() != 1 {
        return None;
    }
    o.iter().next().map(|(k, v)| (k.as_str(), v))
}

fn float(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.as_str() {
            "Infinity" | "inf" => Some(f64::INFINITY),
            "-Infinity" | "-inf" => Some(f64::NEG_INFINITY),
            "NaN" | "nan" => Some(f64::NAN),
            _ => None,
        },
        _ => None,
    }
}

fn layout_name(code: i64) -> Option<&'static str> {
    // torch/_export/serde/schema.py: Layout
    Some(match code {
        7 => "strided",
        1 => "sparse_coo",
        2 => "sparse_csr",
        3 => "sparse_csc",
        4 => "sparse_bsr",
        5 => "sparse_bsc",
        6 => "_mkldnn",
        _ => return None,
    })
}

fn memory_format_name(code: i64) -> Option<&'static str> {
    // torch/_export/serde/schema.py: MemoryFormat
    Some(match code {
        1 => "contiguous_format",
        2 => "channels_last",
        3 => "channels_last_3d",
        4 => "preserve_format",
        _ => return None,
    })
}

fn sym_int(v: &Value) -> std::result::Result<Dim, String> {
    match one_key(v) {
        Some(("as_int", n)) => n
            .as_i64()
            .map(Dim::Static)
            .ok_or_else(|| format!("invalid size {n}")),
        Some(("as_expr", e)) => {
            let expr = e
                .get("expr_str")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string();
            Ok(Dim::Sym(expr))
        }
        Some(("as_name", n)) => Ok(Dim::Sym(n.as_str().unwrap_or("?").to_string())),
        _ => Err(format!("invalid symbolic int {v}")),
    }
}

fn tensor_meta(v: &Value) -> std::result::Result<TensorType, String> {
    let code = v
        .get("dtype")
        .and_then(Value::as_i64)
        .ok_or("tensor meta without a dtype")?;
    let dtype = DType::from_scalar_type(code)
        .ok_or_else(|| format!("dtype code {code} is not supported (fxhlo knows f32 f64 f16 bf16 i64 i32 i16 i8 u8 bool)"))?;
    let sizes = v
        .get("sizes")
        .and_then(Value::as_array)
        .ok_or("tensor meta without sizes")?;
    let shape = sizes
        .iter()
        .map(sym_int)
        .collect::<std::result::Result<Vec<_>, _>>()?;
    if shape.iter().any(|d| d.as_static().is_some_and(|x| x < 0)) {
        return Err(format!("negative size in {sizes:?}"));
    }
    let t = TensorType { dtype, shape };
    if t.static_shape().is_some() && t.numel().is_none() {
        return Err(format!("shape {t} has more elements than fit in i64"));
    }
    Ok(t)
}

fn ints_of(meta: &Value, key: &str) -> std::result::Result<Vec<i64>, String> {
    meta.get(key)
        .and_then(Value::as_array)
        .ok_or_else(|| format!("tensor meta without {key}"))?
        .iter()
        .map(|x| match sym_int(x)? {
            Dim::Static(n) => Ok(n),
            Dim::Sym(s) => Err(format!("symbolic {key} '{s}' in a stored tensor")),
        })
        .collect()
}

/// Copies a strided view out of a storage's raw bytes into a contiguous tensor.
fn gather_view(
    storage: &[u8],
    meta: &Value,
    tally: &mut crate::budget::Tally,
) -> std::result::Result<HostTensor, String> {
    let ty = tensor_meta(meta)?;
    let sizes = ints_of(meta, "sizes")?;
    let strides = ints_of(meta, "strides")?;
    let offset = match meta.get("storage_offset") {
        Some(v) => match sym_int(v)? {
            Dim::Static(n) => n,
            Dim::Sym(s) => return Err(format!("symbolic storage offset '{s}'")),
        },
        None => 0,
    };
    if strides.len() != sizes.len() {
        return Err(format!(
            "sizes {sizes:?} and strides {strides:?} differ in length"
        ));
    }
    let es = ty.dtype.size_bytes() as i64;
    let numel = sizes
        .iter()
        .try_fold(1i64, |a, &d| a.checked_mul(d))
        .ok_or("element count overflows")?;
    // Largest element offset the view touches.
    let mut max_off = offset;
    if numel > 0 {
        for (&s, &st) in sizes.iter().zip(&strides) {
            if st < 0 {
                return Err(format!("negative stride in {strides:?}"));
            }
            max_off = (s - 1)
                .checked_mul(st)
                .and_then(|x| x.checked_add(max_off))
                .ok_or("view extent overflows")?;
        }
        let need = (max_off + 1)
            .checked_mul(es)
            .ok_or("view extent overflows")?;
        if offset < 0 || need as u128 > storage.len() as u128 {
            return Err(format!(
                "view needs {need} bytes of storage (sizes {sizes:?}, strides {strides:?}, offset {offset}) but the file has {}",
                storage.len()
            ));
        }
    }
    // A view with zero strides can describe far more elements than its storage holds.
    let total = numel.checked_mul(es).ok_or("element count overflows")?;
    if total as u128 > (MAX_MEMBER as u128).min(storage.len() as u128 * 1024 + 4096) {
        return Err(format!(
            "view of {numel} elements (sizes {sizes:?}, strides {strides:?}) is too large for its {}-byte storage",
            storage.len()
        ));
    }
    // Every view is a copy: the sum over all views (20,000 views of one storage) is counted
    // against the budget before each is allocated.
    tally
        .add(total as u64, || {
            format!("view of {numel} elements (sizes {sizes:?}, strides {strides:?})")
        })
        .map_err(|e| e.to_string())?;
    let mut bytes = Vec::with_capacity(total as usize);
    let contiguous = {
        let mut expect = 1i64;
        let mut ok = true;
        for (&s, &st) in sizes.iter().zip(&strides).rev() {
            if s != 1 && st != expect {
                ok = false;
            }
            expect *= s;
        }
        ok
    };
    if numel > 0 && contiguous {
        let start = (offset * es) as usize;
        bytes.extend_from_slice(&storage[start..start + (numel * es) as usize]);
    } else if numel > 0 {
        let mut idx = vec![0i64; sizes.len()];
        for _ in 0..numel {
            let off = offset + idx.iter().zip(&strides).map(|(i, s)| i * s).sum::<i64>();
            let b = (off * es) as usize;
            bytes.extend_from_slice(&storage[b..b + es as usize]);
            for d in (0..idx.len()).rev() {
                idx[d] += 1;
                if idx[d] < sizes[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
    }
    Ok(HostTensor {
        dtype: ty.dtype,
        shape: sizes.iter().map(|&d| d as usize).collect(),
        bytes,
    })
}

fn convert_arg(b: &GraphBuilder, v: &Value) -> std::result::Result<Arg, String> {
    let (k, x) = one_key(v).ok_or_else(|| format!("argument {v} is not a one-key union"))?;
    let tensor = |t: &Value| -> std::result::Result<crate::ValueRef, String> {
        let name = t
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("tensor argument {t} has no name"))?;
        b.value(name).ok_or_else(|| {
            format!(
                "unknown value '{}' (not defined by an earlier input or node)",
                crate::quote_name(name)
            )
        })
    };
    let list = |x: &Value| {
        x.as_array()
            .cloned()
            .ok_or_else(|| format!("`{k}` is not a list"))
    };
    Ok(match k {
        "as_none" => Arg::None,
        "as_tensor" => Arg::Tensor(tensor(x)?),
        "as_tensors" => Arg::Tensors(
            list(x)?
                .iter()
                .map(|t| tensor(t).map(Some))
                .collect::<std::result::Result<_, _>>()?,
        ),
        "as_optional_tensors" => Arg::Tensors(
            list(x)?
                .iter()
                .map(|t| match one_key(t) {
                    Some(("as_tensor", t)) => tensor(t).map(Some),
                    Some(("as_none", _)) => Ok(None),
                    _ => Err(format!("invalid optional tensor {t}")),
                })
                .collect::<std::result::Result<_, _>>()?,
        ),
        "as_int" => Arg::Int(x.as_i64().ok_or_else(|| format!("invalid int {x}"))?),
        "as_ints" => Arg::Ints(
            list(x)?
                .iter()
                .map(|n| n.as_i64().ok_or_else(|| format!("invalid int {n}")))
                .collect::<std::result::Result<_, _>>()?,
        ),
        "as_sym_int" => match sym_int(x)? {
            Dim::Static(n) => Arg::Int(n),
            Dim::Sym(s) => return Err(format!("symbolic int argument '{s}' is not supported yet")),
        },
        "as_sym_ints" => Arg::Ints(
            list(x)?
                .iter()
                .map(|n| match sym_int(n)? {
                    Dim::Static(n) => Ok(n),
                    Dim::Sym(s) => Err(format!("symbolic int argument '{s}' is not supported yet")),
                })
                .collect::<std::result::Result<_, _>>()?,
        ),
        "as_float" => Arg::Float(float(x).ok_or_else(|| format!("invalid float {x}"))?),
        "as_floats" => Arg::Floats(
            list(x)?
                .iter()
                .map(|f| float(f).ok_or_else(|| format!("invalid float {f}")))
                .collect::<std::result::Result<_, _>>()?,
        ),
        "as_bool" => Arg::Bool(x.as_bool().ok_or_else(|| format!("invalid bool {x}"))?),
        "as_bools" => Arg::Bools(
            list(x)?
                .iter()
                .map(|f| f.as_bool().ok_or_else(|| format!("invalid bool {f}")))
                .collect::<std::result::Result<_, _>>()?,
        ),
        "as_string" => Arg::Str(
            x.as_str()
                .ok_or_else(|| format!("invalid string {x}"))?
                .to_string(),
        ),
        "as_scalar_type" => {
            let c = x.as_i64().ok_or_else(|| format!("invalid dtype {x}"))?;
            Arg::DType(
                DType::from_scalar_type(c)
                    .ok_or_else(|| format!("dtype code {c} is not supported"))?,
            )
        }
        "as_layout" => {
            let c = x.as_i64().ok_or_else(|| format!("invalid layout {x}"))?;
            Arg::Layout(
                layout_name(c)
                    .ok_or_else(|| format!("unknown layout code {c}"))?
                    .to_string(),
            )
        }
        "as_memory_format" => {
            let c = x
                .as_i64()
                .ok_or_else(|| format!("invalid memory format {x}"))?;
            Arg::MemoryFormat(
                memory_format_name(c)
                    .ok_or_else(|| format!("unknown memory format code {c}"))?
                    .to_string(),
            )
        }
        "as_device" => {
            let ty = x
                .get("type")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("invalid device {x}"))?;
            Arg::Device(match x.get("index").and_then(Value::as_i64) {
                Some(i) => format!("{ty}:{i}"),
                None => ty.to_string(),
            })
        }
        other => return Err(format!("argument kind '{other}' is not supported")),
    })
}

/// Ops that only assert metadata and produce nothing; the verifier checks types anyway.
const ASSERTIONS: &[&str] = &[
    "aten._assert_tensor_metadata.default",
    "aten._assert_async.msg",
    "aten._assert_scalar.default",
];

/// Reads a `.pt2` archive from its bytes; `file` names it in errors.
pub fn read_pt2_bytes(bytes: &[u8], file: &str) -> Result<Model> {
    let zip = zip::ZipArchive::new(std::io::Cursor::new(bytes)).map_err(|e| IrError::Format {
        file: file.to_string(),
        msg: format!("not a readable .pt2 (zip) archive: {e}"),
    })?;
    let mut ar = Archive {
        zip,
        file: file.to_string(),
        len: bytes.len(),
    };
    let names = ar.names();
    let model_json = names
        .iter()
        .find(|n| n.ends_with("/models/model.json"))
        .or_else(|| {
            names
                .iter()
                .find(|n| n.contains("/models/") && n.ends_with(".json"))
        })
        .cloned()
        .ok_or_else(|| ar.err("no models/*.json member: not a torch.export archive"))?;
    let prefix = model_json[..model_json.find("/models/").unwrap_or(0)].to_string();
    let doc = ar.json(&model_json)?;
    // Weights and constants (read first: tied parameters are recognized by their storage).
    let mut weights = Weights::new();
    let mut cache: HashMap<String, Vec<u8>> = HashMap::new();
    // Bytes of the storages read and the views gathered from them, against the budget.
    let mut tally = crate::budget::Tally::new();
    let mut storage_of: HashMap<String, (String, String)> = HashMap::new();
    for (dir, cfg_name) in [
        ("weights", "model_weights_config.json"),
        ("constants", "model_constants_config.json"),
    ] {
        let cfg_path = format!("{prefix}/data/{dir}/{cfg_name}");
        if !names.contains(&cfg_path) {
            continue;
        }
        let cfg = ar.json(&cfg_path)?;
        let entries = cfg
            .get("config")
            .and_then(Value::as_object)
            .ok_or_else(|| ar.err(format!("{cfg_path}: missing `config` object")))?;
        for (fqn, e) in entries {
            let werr = |msg: String| IrError::Weight {
                name: fqn.clone(),
                msg,
            };
            if e.get("use_pickle").and_then(Value::as_bool) == Some(true) {
                return Err(werr("stored as a pickle, which fxhlo does not read".into()));
            }
            let path = e
                .get("path_name")
                .and_then(Value::as_str)
                .ok_or_else(|| werr(format!("{cfg_path}: no path_name")))?;
            let meta = e
                .get("tensor_meta")
                .ok_or_else(|| werr(format!("{cfg_path}: no tensor_meta")))?;
            let member = format!("{prefix}/data/{dir}/{path}");
            if !cache.contains_key(&member) {
                let data = ar.read(&member).map_err(|e| werr(e.to_string()))?;
                tally
                    .add(data.len() as u64, || format!("storage {member}"))
                    .map_err(|e| werr(e.to_string()))?;
                cache.insert(member.clone(), data);
            }
            let t = gather_view(&cache[&member], meta, &mut tally)
                .map_err(|m| werr(format!("{member}: {m}")))?;
            weights.insert(fqn.clone(), t);
            storage_of.insert(fqn.clone(), (member, meta.to_string()));
        }
    }
    // Tied parameters (one storage, same view) get the target of the first input naming them,
    // which is what `fxhlo.dump` writes to fxjson.
    let mut first_target: HashMap<(String, String), String> = HashMap::new();
    let mut canonical = |t: String| -> String {
        match storage_of.get(&t) {
            Some(key) => first_target.entry(key.clone()).or_insert(t).clone(),
            None => t,
        }
    };

    let at = |what: &str| format!("{model_json}: {what}");
    let major = doc
        .pointer("/schema_version/major")
        .and_then(Value::as_i64)
        .ok_or_else(|| ar.err(at("missing schema_version.major")))?;
    if !SCHEMA_MAJOR.contains(&major) {
        return Err(ar.err(at(&format!(
            "schema version {major} is not supported (this fxhlo reads {}..={})",
            SCHEMA_MAJOR.start(),
            SCHEMA_MAJOR.end()
        ))));
    }
    let g = doc
        .pointer("/graph_module/graph")
        .ok_or_else(|| ar.err(at("missing graph_module.graph")))?;
    let sig = doc
        .pointer("/graph_module/signature")
        .ok_or_else(|| ar.err(at("missing graph_module.signature")))?;
    let tv = g
        .get("tensor_values")
        .and_then(Value::as_object)
        .ok_or_else(|| ar.err(at("missing graph.tensor_values")))?;
    let ty_of = |name: &str| -> Result<TensorType> {
        let meta = tv
            .get(name)
            .ok_or_else(|| ar.err(at(&format!("value '{name}' has no entry in tensor_values"))))?;
        tensor_meta(meta).map_err(|m| ar.err(at(&format!("value '{name}': {m}"))))
    };
    let arr = |v: Option<&Value>, what: &str| -> Result<Vec<Value>> {
        v.and_then(Value::as_array)
            .cloned()
            .ok_or_else(|| ar.err(at(&format!("missing list {what}"))))
    };

    // Inputs, in graph order, classified by the signature.
    let mut b = GraphBuilder::default();
    for (i, spec) in arr(sig.get("input_specs"), "signature.input_specs")?
        .iter()
        .enumerate()
    {
        let (kind, body) =
            one_key(spec).ok_or_else(|| ar.err(at(&format!("input_specs[{i}] is not a union"))))?;
        let (ik, name, target) = match kind {
            "user_input" => {
                let name = body
                    .pointer("/arg/as_tensor/name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        ar.err(at(&format!(
                            "input_specs[{i}]: user inputs other than tensors are not supported"
                        )))
                    })?;
                (InputKind::User, name, None)
            }
            "parameter" | "buffer" | "tensor_constant" => {
                let name = body.pointer("/arg/name").and_then(Value::as_str);
                let key = match kind {
                    "parameter" => "parameter_name",
                    "buffer" => "buffer_name",
                    _ => "tensor_constant_name",
                };
                let target = body.get(key).and_then(Value::as_str);
                match (name, target) {
                    (Some(n), Some(t)) => (
                        match kind {
                            "parameter" => InputKind::Parameter,
                            "buffer" => InputKind::Buffer,
                            _ => InputKind::Constant,
                        },
                        n,
                        Some(canonical(t.to_string())),
                    ),
                    _ => {
                        return Err(ar.err(at(&format!(
                            "input_specs[{i}] ({kind}) lacks arg.name or {key}"
                        ))))
                    }
                }
            }
            other => {
                return Err(ar.err(at(&format!(
                    "input_specs[{i}]: input kind '{other}' is not supported"
                ))))
            }
        };
        b.input(name, ik, target, ty_of(name)?)?;
    }

    for (i, n) in arr(g.get("nodes"), "graph.nodes")?.iter().enumerate() {
        let target = n.get("target").and_then(Value::as_str).unwrap_or("?");
        let target = target.strip_prefix("torch.ops.").unwrap_or(target);
        let name = n
            .get("name")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| format!("node{i}"));
        let nerr = |msg: String| IrError::Node {
            index: b.len(),
            name: name.clone(),
            op: target.to_string(),
            msg,
        };
        let outputs = arr(n.get("outputs"), &format!("nodes[{i}].outputs"))?;
        if outputs.is_empty() {
            if ASSERTIONS.contains(&target) {
                tracing::debug!(node = %name, "dropping assertion node {target}");
                continue;
            }
            return Err(nerr(
                "node has no outputs (side effects are not supported)".into(),
            ));
        }
        let mut named = vec![];
        for inp in arr(n.get("inputs"), &format!("nodes[{i}].inputs"))? {
            let k = inp
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| nerr("an input has no name".into()))?;
            let a = inp
                .get("arg")
                .ok_or_else(|| nerr(format!("input `{k}` has no arg")))?;
            named.push((
                k.to_string(),
                convert_arg(&b, a).map_err(|m| nerr(format!("argument `{k}`: {m}")))?,
            ));
        }
        // `as_none` results (masked-off gradients) have no tensor meta: infer all types then.
        let mut result_names = vec![];
        let mut has_none = false;
        for (j, o) in outputs.iter().enumerate() {
            let name_of = |t: &Value| {
                t.get("name")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .ok_or_else(|| nerr("output without a name".into()))
            };
            match one_key(o) {
                Some(("as_tensor", t)) => result_names.push(name_of(t)?),
                Some(("as_tensors", ts)) => {
                    for t in ts
                        .as_array()
                        .ok_or_else(|| nerr("as_tensors output is not a list".into()))?
                    {
                        result_names.push(name_of(t)?);
                    }
                }
                Some(("as_none", _)) => {
                    has_none = true;
                    result_names.push(format!("{name}_none_{j}"));
                }
                _ => {
                    return Err(nerr(format!(
                        "output {j} ({o}) is not a tensor; non-tensor results are not supported"
                    )))
                }
            }
        }
        let declared = if has_none {
            None
        } else {
            Some(
                result_names
                    .iter()
                    .map(|r| ty_of(r))
                    .collect::<Result<Vec<_>>>()?,
            )
        };
        b.op(&name, target, named, result_names, declared)?;
    }

    let mut outputs = vec![];
    for (i, spec) in arr(sig.get("output_specs"), "signature.output_specs")?
        .iter()
        .enumerate()
    {
        match one_key(spec) {
            Some(("user_output", body)) => {
                let name = body
                    .pointer("/arg/as_tensor/name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| ar.err(at(&format!("output_specs[{i}]: only tensor outputs are supported"))))?;
                outputs.push(b.value(name).ok_or_else(|| ar.err(at(&format!("output '{name}' is not defined"))))?);
            }
            Some((kind, _)) => return Err(ar.err(at(&format!("output_specs[{i}]: output kind '{kind}' (a mutation) is not supported; export the model in eval mode")))),
            None => return Err(ar.err(at(&format!("output_specs[{i}] is not a union")))),
        }
    }
    let graph = b.finish(outputs)?;

    // Keep only what the graph uses, as the fxjson reader does.
    let used: std::collections::BTreeSet<String> = graph
        .weight_inputs()
        .iter()
        .filter_map(|&i| match &graph.nodes[i].kind {
            crate::NodeKind::Input { target, .. } => target.clone(),
            _ => None,
        })
        .collect();
    weights.retain(|k, _| used.contains(k));
    let model = Model { graph, weights };
    model.verify_weights()?;
    Ok(model)
}
