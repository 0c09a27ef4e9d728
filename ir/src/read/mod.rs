//! Readers: fxjson (the project's format) and `.pt2` (torch.export archives).

pub mod fxjson;
pub mod pt2;
pub mod safetensors_io;

use crate::arg::{Arg, ParamKind};
use crate::dtype::DType;
use crate::error::{IrError, Result};
use crate::graph::{Graph, InputKind, Model, Node, NodeKind, ValueRef};
use crate::infer::{promote_scalar, promote_tensors};
use crate::ops::Op;
use crate::types::TensorType;
use std::collections::HashMap;
use std::path::Path;

/// Reads a model from a fxjson file, a testdata folder (its `graph.json`) or a `.pt2` archive,
/// chosen by content.
pub fn read_model(path: &Path) -> Result<Model> {
    let file = if path.is_dir() {
        path.join("graph.json")
    } else {
        path.to_path_buf()
    };
    let bytes = crate::budget::read_regular_file(&file, u64::MAX).map_err(|e| IrError::Io {
        path: file.display().to_string(),
        source: e,
    })?;
    if bytes.starts_with(b"PK\x03\x04") {
        pt2::read_pt2_bytes(&bytes, &file.display().to_string())
    } else if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
        fxjson::read_fxjson_bytes(&bytes, &file)
    } else if is_ir_text(&bytes) {
        let text = std::str::from_utf8(&bytes).map_err(|e| IrError::Format {
            file: file.display().to_string(),
            msg: format!("IR text that is not UTF-8: {e}"),
        })?;
        let graph = crate::text::parse_graph(text)?;
        // The text form holds no tensor bytes: a stage that needs a parameter's values says
        // so when it looks for them.
        Ok(Model {
            graph,
            weights: Default::default(),
        })
    } else {
        Err(IrError::Format {
            file: file.display().to_string(),
            msg: "neither a fxjson graph (JSON object), IR text ('graph {') nor a .pt2 archive \
                  (zip)"
                .into(),
        })
    }
}

/// Whether `bytes` begin, after blank lines and `#` comment lines, with `graph` (the IR text
/// form of `crate::text`).
fn is_ir_text(bytes: &[u8]) -> bool {
    bytes
        .split(|&b| b == b'\n')
        .map(|l| l.trim_ascii())
        .find(|l| !l.is_empty() && !l.starts_with(b"#"))
        .is_some_and(|l| l.starts_with(b"graph"))
}

/// Builds a graph node by node, resolving value names; used by both readers.
#[derive(Default)]
pub struct GraphBuilder {
    graph: Graph,
    names: HashMap<String, ValueRef>,
}

impl GraphBuilder {
    /// A builder with room for about `nodes` nodes, where it can be had (a hint: more may
    /// be added; a reservation that fails is skipped, not an abort).
    pub fn with_capacity(nodes: usize) -> GraphBuilder {
        let mut b = GraphBuilder::default();
        if b.graph.nodes.try_reserve(nodes).is_ok() {
            let _ = b.names.try_reserve(nodes);
        }
        b
    }

    /// The value of a name defined earlier.
    pub fn value(&self, name: &str) -> Option<ValueRef> {
        self.names.get(name).copied()
    }

    /// Type of a value defined earlier.
    pub fn ty(&self, v: ValueRef) -> &TensorType {
        self.graph.ty(v)
    }

    /// Number of nodes so far.
    pub fn len(&self) -> usize {
        self.graph.nodes.len()
    }

    /// True if no node was added yet.
    pub fn is_empty(&self) -> bool {
        self.graph.nodes.is_empty()
    }

    fn define(&mut self, names: &[String], node_index: usize) -> Result<()> {
        for (j, r) in names.iter().enumerate() {
            if self
                .names
                .insert(r.clone(), ValueRef::new(node_index, j))
                .is_some()
            {
                return Err(IrError::Graph(format!(
                    "value name '{}' is defined twice (node {node_index})",
                    crate::quote_name(r)
                )));
            }
        }
        Ok(())
    }

    /// Adds a graph input.
    pub fn input(
        &mut self,
        name: &str,
        kind: InputKind,
        target: Option<String>,
        ty: TensorType,
    ) -> Result<ValueRef> {
        let i = self.graph.nodes.len();
        self.define(&[name.to_string()], i)?;
        self.graph.nodes.push(Node {
            name: name.to_string(),
            kind: NodeKind::Input { kind, target },
            args: vec![],
            result_names: vec![name.to_string()],
            results: vec![ty],
        });
        Ok(ValueRef::new(i, 0))
    }

    /// Adds an op node from named arguments. Binds them to the op table's schema (filling in
    /// defaults), or keeps the node as `Unsupported` when the table does not know the op.
    /// `declared` result types, when given, are checked against type inference.
    pub fn op(
        &mut self,
        name: &str,
        target: &str,
        named: Vec<(String, Arg)>,
        result_names: Vec<String>,
        declared: Option<Vec<TensorType>>,
    ) -> Result<()> {
        let named = match Op::from_aten(target) {
            Some(op) => self.wrap_scalars(name, op, named)?,
            None => named,
        };
        let index = self.graph.nodes.len();
        let err = |msg: String| IrError::Node {
            index,
            name: name.to_string(),
            op: target.to_string(),
            msg,
        };
        let (kind, args) = match Op::from_aten(target) {
            Some(op) => {
                let (op, args) = bind(op, &named).map_err(err)?;
                (NodeKind::Op(op), args)
            }
            None => {
                let (names, args) = named.into_iter().unzip();
                (
                    NodeKind::Unsupported {
                        target: target.to_string(),
                        arg_names: names,
                    },
                    args,
                )
            }
        };
        let unsupported = matches!(kind, NodeKind::Unsupported { .. });
        if unsupported && declared.is_none() {
            return Err(err(format!(
                "op '{target}' is not in the op table and its result types are not declared"
            )));
        }
        self.graph.nodes.push(Node {
            name: name.to_string(),
            kind,
            args,
            result_names: result_names.clone(),
            results: declared.clone().unwrap_or_default(),
        });
        let inferred = self.graph.infer_node(index)?;
        let results = match declared {
            Some(d) if !unsupported && d != inferred => {
                return Err(err(crate::graph::type_mismatch(&d, &inferred)));
            }
            _ => inferred,
        };
        if results.len() != result_names.len() {
            return Err(err(format!(
                "{} result names for {} results",
                result_names.len(),
                results.len()
            )));
        }
        self.graph.nodes[index].results = results;
        self.define(&result_names, index)
    }

    /// Tensor arguments written as Python numbers that no scalar overload takes
    /// (`aten.sub.Tensor(1, x)`, as `torch.export` writes `1 - x`) become 0-d
    /// `aten.scalar_tensor` nodes, added before the node, whose dtype is the one ATen's
    /// promotion of a wrapped number with the op's tensor operands gives: the node's result
    /// type is unchanged.
    fn wrap_scalars(
        &mut self,
        name: &str,
        op: Op,
        mut named: Vec<(String, Arg)>,
    ) -> Result<Vec<(String, Arg)>> {
        let info = op.info();
        let is_tensor_param = |k: &str| {
            info.params
                .iter()
                .any(|p| p.name == k && p.kind == ParamKind::Tensor)
        };
        let wrapped: Vec<usize> = (0..named.len())
            .filter(|&i| {
                let (k, a) = &named[i];
                is_tensor_param(k)
                    && matches!(a, Arg::Int(_) | Arg::Float(_) | Arg::Bool(_))
                    && scalar_overload(op, k).is_none()
            })
            .collect();
        if wrapped.is_empty() {
            return Ok(named);
        }
        let tensors: Vec<TensorType> = named
            .iter()
            .filter_map(|(_, a)| match a {
                Arg::Tensor(v) => Some(self.ty(*v).clone()),
                _ => None,
            })
            .collect();
        let tensor_refs: Vec<&TensorType> = tensors.iter().collect();
        for i in wrapped {
            let (param, value) = named[i].clone();
            let category = match value {
                Arg::Bool(_) => 0,
                Arg::Int(_) => 1,
                _ => 2,
            };
            let dtype = if tensor_refs.is_empty() {
                [DType::Bool, DType::I64, DType::F32][category as usize]
            } else {
                promote_scalar(promote_tensors(&tensor_refs), Some(category))
            };
            let mut scalar_name = format!("{name}_{param}_scalar");
            while self.names.contains_key(&scalar_name) {
                scalar_name.push('_');
            }
            self.op(
                &scalar_name,
                Op::ScalarTensor.aten(),
                vec![("s".into(), value), ("dtype".into(), Arg::DType(dtype))],
                vec![scalar_name.clone()],
                None,
            )?;
            let v = self.value(&scalar_name).expect("defined just above");
            named[i].1 = Arg::Tensor(v);
        }
        Ok(named)
    }

    /// Finishes with the named outputs and verifies the graph.
    pub fn finish(mut self, outputs: Vec<ValueRef>) -> Result<Graph> {
        self.graph.outputs = outputs;
        self.graph.verify()?;
        Ok(self.graph)
    }
}

/// Binds named arguments to `op`'s schema: fills defaults, normalizes int lists, and moves a
/// `.Tensor` overload whose tensor operand is a Python scalar to its `.Scalar` sibling, as FX
/// graphs write `x + 1` as `aten.add.Tensor(x, 1)`.
pub fn bind(op: Op, named: &[(String, Arg)]) -> std::result::Result<(Op, Vec<Arg>), String> {
    let info = op.info();
    for (k, _) in named {
        if op.param_index(k).is_none() {
            let known: Vec<&str> = info.params.iter().map(|p| p.name).collect();
            return Err(format!(
                "unknown argument `{k}` (the op takes {})",
                known.join(", ")
            ));
        }
    }
    let get = |name: &str| named.iter().find(|(k, _)| k == name).map(|(_, v)| v);
    // A scalar where the schema wants a tensor: switch to the scalar overload.
    for p in info.params {
        if p.kind == ParamKind::Tensor {
            if let Some(Arg::Int(_) | Arg::Float(_) | Arg::Bool(_)) = get(p.name) {
                if let Some(alt) = scalar_overload(op, p.name) {
                    return bind(alt, named);
                }
                return Err(format!(
                    "argument `{}` is a scalar, expected a tensor",
                    p.name
                ));
            }
        }
    }
    let mut args = Vec::with_capacity(info.params.len());
    for p in info.params {
        let a = match get(p.name) {
            Some(a) => a.clone(),
            None => p
                .default
                .to_arg()
                .ok_or_else(|| format!("missing required argument `{}`", p.name))?,
        };
        let a = match (p.kind, a) {
            (ParamKind::Ints | ParamKind::OptInts, Arg::Int(n)) => Arg::Ints(vec![n]),
            (ParamKind::Float | ParamKind::OptFloat, Arg::Int(n)) => Arg::Float(n as f64),
            (_, a) => a,
        };
        if !p.kind.accepts(&a) {
            return Err(format!(
                "argument `{}` is {}, expected {}",
                p.name,
                a.kind_name(),
                crate::graph::kind_desc(p.kind)
            ));
        }
        args.push(a);
    }
    Ok((op, args))
}

fn scalar_overload(op: Op, param: &str) -> Option<Op> {
    let aten = op.aten();
    let alt = if let Some(base) = aten.strip_suffix(".Tensor") {
        format!("{base}.Scalar")
    } else if let Some(base) = aten.strip_suffix(".Tensor_mode") {
        format!("{base}.Scalar_mode")
    } else if aten == "aten.pow.Tensor_Tensor" && param == "exponent" {
        "aten.pow.Tensor_Scalar".to_string()
    } else {
        return None;
    };
    let alt = Op::from_aten(&alt)?;
    // The scalar overload must take a scalar in the same position (`aten.sub.Scalar` takes
    // its scalar as `other`, so `aten.sub.Tensor(1, x)` has none).
    let i = alt.param_index(param)?;
    (alt.info().params[i].kind != ParamKind::Tensor).then_some(alt)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One binary node `op(self=a, other=b)` on an input `x` of type `xty`, read from fxjson.
    fn read_binary(op: &str, a: &str, b: &str, xty: &str, out: &str) -> Result<Graph> {
        let json = format!(
            r#"{{"format": "fxhlo-graph", "version": 1,
              "inputs": [{{"name": "x", "kind": "user_input", "type": {xty}}}],
              "nodes": [{{"name": "y", "op": "{op}", "args": {{"self": {a}, "other": {b}}},
                          "results": [{{"name": "y", "type": {out}}}]}}],
              "outputs": ["y"]}}"#
        );
        fxjson::read_fxjson_bytes(json.as_bytes(), Path::new("t.json")).map(|m| m.graph)
    }

    /// `aten.sub.Tensor(6, x)` (torch.export's `6 - x`; `aten.sub.Scalar` takes its scalar as
    /// `other`) reads as a `scalar_tensor` of the dtype ATen's promotion gives, and the result
    /// type declared by torch is the inferred one.
    #[test]
    fn a_scalar_where_the_schema_wants_a_tensor_becomes_a_scalar_tensor() {
        let i64v = r#"{"dtype": "i64", "shape": [7]}"#;
        let f32v = r#"{"dtype": "f32", "shape": [7]}"#;
        let x = r#"{"tensor": "x"}"#;
        for (scalar, xty, out, dtype) in [
            (r#"{"int": 6}"#, i64v, i64v, DType::I64),
            (r#"{"int": 3}"#, f32v, f32v, DType::F32),
            (r#"{"float": 0.5}"#, i64v, f32v, DType::F32),
        ] {
            let g = read_binary("aten.sub.Tensor", scalar, x, xty, out).unwrap();
            let text = crate::text::print_graph(&g);
            assert!(text.contains("aten.scalar_tensor.default"), "{text}");
            let s = g.value_names()["y_self_scalar"];
            assert_eq!(g.ty(s).dtype, dtype, "{text}");
            assert!(g.ty(s).shape.is_empty(), "{text}");
        }
        // A scalar that a scalar overload takes still switches overloads (no new node).
        let g = read_binary("aten.sub.Tensor", x, r#"{"int": 2}"#, i64v, i64v).unwrap();
        let text = crate::text::print_graph(&g);
        assert!(
            text.contains("aten.sub.Scalar") && !text.contains("scalar_tensor"),
            "{text}"
        );
        // A declared result type that promotion contradicts is still an error.
        let e = read_binary("aten.sub.Tensor", r#"{"float": 0.5}"#, x, i64v, i64v).unwrap_err();
        assert!(e.to_string().contains("i64"), "{e}");
    }
}
