//! The fxjson reader (`docs/graph-format.md`).

use super::safetensors_io::read_safetensors;
use super::GraphBuilder;
use crate::arg::Arg;
use crate::error::{IrError, Result};
use crate::graph::{InputKind, Model, ValueRef, Weights};
use crate::types::{Dim, TensorType};
use crate::DType;
use serde_json::Value;
use std::path::Path;

/// The fxjson schema version this reader writes and reads.
pub const VERSION: i64 = 1;

struct Cx<'a> {
    file: &'a str,
}

impl Cx<'_> {
    fn err(&self, at: &str, msg: impl std::fmt::Display) -> IrError {
        IrError::Format {
            file: self.file.to_string(),
            msg: format!("{at}: {msg}"),
        }
    }

    fn obj<'v>(&self, v: &'v Value, at: &str) -> Result<&'v serde_json::Map<String, Value>> {
        v.as_object()
            .ok_or_else(|| self.err(at, format!("expected an object, found {}", kind(v))))
    }

    fn field<'v>(
        &self,
        o: &'v serde_json::Map<String, Value>,
        key: &str,
        at: &str,
    ) -> Result<&'v Value> {
        o.get(key)
            .ok_or_else(|| self.err(at, format!("missing field `{key}`")))
    }

    fn str<'v>(
        &self,
        o: &'v serde_json::Map<String, Value>,
        key: &str,
        at: &str,
    ) -> Result<&'v str> {
        let v = self.field(o, key, at)?;
        v.as_str().ok_or_else(|| {
            self.err(
                &format!("{at}.{key}"),
                format!("expected a string, found {}", kind(v)),
            )
        })
    }

    fn arr<'v>(&self, v: &'v Value, at: &str) -> Result<&'v Vec<Value>> {
        v.as_array()
            .ok_or_else(|| self.err(at, format!("expected a list, found {}", kind(v))))
    }

    fn ty(&self, v: &Value, at: &str) -> Result<TensorType> {
        let o = self.obj(v, at)?;
        let d = self.str(o, "dtype", at)?;
        let dtype = DType::parse(d)
            .ok_or_else(|| self.err(&format!("{at}.dtype"), format!("unknown dtype '{d}'")))?;
        let shape = self
            .arr(self.field(o, "shape", at)?, &format!("{at}.shape"))?
            .iter()
            .enumerate()
            .map(|(i, d)| match d {
                Value::Number(n) => match n.as_i64() {
                    Some(x) if x >= 0 => Ok(Dim::Static(x)),
                    _ => Err(self.err(
                        &format!("{at}.shape[{i}]"),
                        format!("invalid dimension {n}"),
                    )),
                },
                Value::String(s) if !s.is_empty() => Ok(Dim::Sym(s.clone())),
                v => Err(self.err(
                    &format!("{at}.shape[{i}]"),
                    format!("expected a size or a symbol, found {}", kind(v)),
                )),
            })
            .collect::<Result<Vec<_>>>()?;
        let t = TensorType { dtype, shape };
        if t.static_shape().is_some() && t.numel().is_none() {
            return Err(self.err(at, format!("shape {t} has more elements than fit in i64")));
        }
        Ok(t)
    }

    fn float(&self, v: &Value, at: &str) -> Result<f64> {
        match v {
            Value::Number(n) => n.as_f64().ok_or_else(|| self.err(at, "invalid number")),
            Value::String(s) => match s.as_str() {
                "inf" => Ok(f64::INFINITY),
                "-inf" => Ok(f64::NEG_INFINITY),
                "nan" => Ok(f64::NAN),
                _ => Err(self.err(at, format!("expected a number, found string '{s}'"))),
            },
            v => Err(self.err(at, format!("expected a number, found {}", kind(v)))),
        }
    }

    fn int(&self, v: &Value, at: &str) -> Result<i64> {
        v.as_i64()
            .ok_or_else(|| self.err(at, format!("expected an integer, found {v}")))
    }

    fn arg(&self, b: &GraphBuilder, v: &Value, at: &str) -> Result<Arg> {
        let o = self.obj(v, at)?;
        if o.len() != 1 {
            return Err(self.err(at, "an argument is an object with exactly one key"));
        }
        let (k, v) = o.iter().next().expect("one key, checked above");
        let at = format!("{at}.{k}");
        let value = |name: &Value, at: &str| -> Result<ValueRef> {
            let n = name.as_str().ok_or_else(|| {
                self.err(at, format!("expected a value name, found {}", kind(name)))
            })?;
            b.value(n).ok_or_else(|| {
                self.err(
                    at,
                    format!(
                        "unknown value '{}' (not defined by an earlier input or node)",
                        crate::quote_name(n)
                    ),
                )
            })
        };
        let list = |f: &dyn Fn(&Value, &str) -> Result<()>| -> Result<()> {
            for (i, x) in self.arr(v, &at)?.iter().enumerate() {
                f(x, &format!("{at}[{i}]"))?;
            }
            Ok(())
        };
        Ok(match k.as_str() {
            "tensor" => Arg::Tensor(value(v, &at)?),
            "tensors" => {
                let mut out = vec![];
                for (i, x) in self.arr(v, &at)?.iter().enumerate() {
                    out.push(if x.is_null() {
                        None
                    } else {
                        Some(value(x, &format!("{at}[{i}]"))?)
                    });
                }
                Arg::Tensors(out)
            }
            "int" => Arg::Int(self.int(v, &at)?),
            "float" => Arg::Float(self.float(v, &at)?),
            "bool" => Arg::Bool(
                v.as_bool()
                    .ok_or_else(|| self.err(&at, "expected a boolean"))?,
            ),
            "ints" => {
                let cell = std::cell::RefCell::new(vec![]);
                list(&|x, at| {
                    cell.borrow_mut().push(self.int(x, at)?);
                    Ok(())
                })?;
                Arg::Ints(cell.into_inner())
            }
            "floats" => {
                let cell = std::cell::RefCell::new(vec![]);
                list(&|x, at| {
                    cell.borrow_mut().push(self.float(x, at)?);
                    Ok(())
                })?;
                Arg::Floats(cell.into_inner())
            }
            "bools" => {
                let cell = std::cell::RefCell::new(vec![]);
                list(&|x, at| {
                    cell.borrow_mut().push(
                        x.as_bool()
                            .ok_or_else(|| self.err(at, "expected a boolean"))?,
                    );
                    Ok(())
                })?;
                Arg::Bools(cell.into_inner())
            }
            "str" => Arg::Str(
                v.as_str()
                    .ok_or_else(|| self.err(&at, "expected a string"))?
                    .to_string(),
            ),
            "dtype" => {
                let s = v
                    .as_str()
                    .ok_or_else(|| self.err(&at, "expected a dtype name"))?;
                Arg::DType(
                    DType::parse(s).ok_or_else(|| self.err(&at, format!("unknown dtype '{s}'")))?,
                )
            }
            "layout" | "device" | "memory_format" => {
                let s = v
                    .as_str()
                    .ok_or_else(|| self.err(&at, "expected a string"))?
                    .to_string();
                match k.as_str() {
                    "layout" => Arg::Layout(s),
                    "device" => Arg::Device(s),
                    _ => Arg::MemoryFormat(s),
                }
            }
            "none" => Arg::None,
            other => return Err(self.err(&at, format!("unknown argument kind '{other}'"))),
        })
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Parses fxjson text into a graph and the weights file it names (relative to `dir`).
pub fn parse_fxjson(text: &[u8], file: &str) -> Result<(crate::Graph, Option<String>)> {
    let cx = Cx { file };
    let doc: Value = serde_json::from_slice(text).map_err(|e| IrError::Format {
        file: file.to_string(),
        msg: format!("invalid JSON: {e}"),
    })?;
    let top = cx.obj(&doc, "top level")?;
    let format = cx.str(top, "format", "top level")?;
    if format != "fxhlo-graph" {
        return Err(cx.err("format", format!("'{format}' is not 'fxhlo-graph'")));
    }
    let version = cx.int(cx.field(top, "version", "top level")?, "version")?;
    if version != VERSION {
        return Err(cx.err(
            "version",
            format!(
                "schema version {version} is not supported (this fxhlo reads version {VERSION})"
            ),
        ));
    }
    let weights = match top.get("weights") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(v) => {
            return Err(cx.err(
                "weights",
                format!("expected a file name, found {}", kind(v)),
            ))
        }
    };
    let mut b = GraphBuilder::default();
    for (i, inp) in cx
        .arr(cx.field(top, "inputs", "top level")?, "inputs")?
        .iter()
        .enumerate()
    {
        let at = format!("inputs[{i}]");
        let o = cx.obj(inp, &at)?;
        let name = cx.str(o, "name", &at)?;
        let k = cx.str(o, "kind", &at)?;
        let kind = match k {
            "user_input" => InputKind::User,
            "parameter" => InputKind::Parameter,
            "buffer" => InputKind::Buffer,
            "constant" => InputKind::Constant,
            _ => return Err(cx.err(&format!("{at}.kind"), format!("unknown input kind '{k}'"))),
        };
        let target = match kind {
            InputKind::User => None,
            _ => Some(cx.str(o, "target", &at)?.to_string()),
        };
        let ty = cx.ty(cx.field(o, "type", &at)?, &format!("{at}.type"))?;
        b.input(name, kind, target, ty)
            .map_err(|e| cx.err(&at, e))?;
    }
    for (i, node) in cx
        .arr(cx.field(top, "nodes", "top level")?, "nodes")?
        .iter()
        .enumerate()
    {
        let at = format!("nodes[{i}]");
        let o = cx.obj(node, &at)?;
        let name = cx.str(o, "name", &at)?;
        let at = format!("nodes[{i}] '{name}'");
        let op = cx.str(o, "op", &at)?;
        let mut named = vec![];
        if let Some(args) = o.get("args") {
            for (k, v) in cx.obj(args, &format!("{at}.args"))? {
                named.push((k.clone(), cx.arg(&b, v, &format!("{at}.args.{k}"))?));
            }
        }
        let mut names = vec![];
        let mut types = vec![];
        for (j, r) in cx
            .arr(cx.field(o, "results", &at)?, &format!("{at}.results"))?
            .iter()
            .enumerate()
        {
            let rat = format!("{at}.results[{j}]");
            let ro = cx.obj(r, &rat)?;
            names.push(cx.str(ro, "name", &rat)?.to_string());
            types.push(cx.ty(cx.field(ro, "type", &rat)?, &format!("{rat}.type"))?);
        }
        b.op(name, op, named, names, Some(types))?;
    }
    let mut outputs = vec![];
    for (i, o) in cx
        .arr(cx.field(top, "outputs", "top level")?, "outputs")?
        .iter()
        .enumerate()
    {
        let at = format!("outputs[{i}]");
        let n = o
            .as_str()
            .ok_or_else(|| cx.err(&at, "expected a value name"))?;
        outputs.push(
            b.value(n)
                .ok_or_else(|| cx.err(&at, format!("unknown value '{}'", crate::quote_name(n))))?,
        );
    }
    Ok((b.finish(outputs)?, weights))
}

/// Reads fxjson bytes from `path`, and the weights file it names.
pub fn read_fxjson_bytes(bytes: &[u8], path: &Path) -> Result<Model> {
    let (graph, weights_file) = parse_fxjson(bytes, &path.display().to_string())?;
    let weights = match weights_file {
        Some(w) => {
            let wp = path.parent().unwrap_or(Path::new(".")).join(w);
            read_safetensors(&wp)?
        }
        None => Weights::new(),
    };
    let model = Model { graph, weights };
    model.verify_weights()?;
    Ok(model)
}

/// Reads a fxjson file and its weights.
pub fn read_fxjson(path: &Path) -> Result<Model> {
    let bytes = crate::budget::read_regular_file(path, u64::MAX).map_err(|e| IrError::Io {
        path: path.display().to_string(),
        source: e,
    })?;
    read_fxjson_bytes(&bytes, path)
}
