//! The graph: an arena of nodes in topological order, with explicit inputs, constants and outputs.

use crate::arg::{Arg, ParamKind};
use crate::error::{IrError, Result};
use crate::infer::{ArgType, InferCx};
use crate::ops::{Op, Results};
use crate::types::{shape_string, TensorType};
use crate::DType;
use std::collections::{BTreeMap, HashMap};

/// Index of a node in [`Graph::nodes`].
pub type NodeId = usize;

/// The readers of each node of a graph ([`Graph::users`]): `users[n]` is the ascending list
/// of the nodes that read a result of node `n`, each once. One flat list for all nodes (a set
/// per node was a million allocations for a graph of a million nodes).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Users {
    /// Where each node's readers start in `ids` (one more entry than nodes).
    start: Vec<usize>,
    ids: Vec<NodeId>,
}

impl Users {
    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.start.len().saturating_sub(1)
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl std::ops::Index<NodeId> for Users {
    type Output = [NodeId];
    fn index(&self, n: NodeId) -> &[NodeId] {
        &self.ids[self.start[n]..self.start[n + 1]]
    }
}

/// One result of one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueRef {
    /// The producing node.
    pub node: NodeId,
    /// Which of its results.
    pub index: usize,
}

impl ValueRef {
    /// Result `index` of `node`.
    pub fn new(node: NodeId, index: usize) -> Self {
        ValueRef { node, index }
    }
}

/// What a graph input is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InputKind {
    /// Passed by the caller at run time.
    User,
    /// A trainable parameter (bytes in the weights file).
    Parameter,
    /// A buffer such as a batch-norm running mean.
    Buffer,
    /// A lifted tensor constant.
    Constant,
}

impl InputKind {
    /// Name used in fxjson and the IR text.
    pub fn name(self) -> &'static str {
        match self {
            InputKind::User => "input",
            InputKind::Parameter => "parameter",
            InputKind::Buffer => "buffer",
            InputKind::Constant => "constant",
        }
    }
}

/// What a node does.
#[derive(Clone, Debug, PartialEq)]
pub enum NodeKind {
    /// A graph input; `target` names the weight of a non-user input.
    Input {
        /// User input, parameter, buffer or constant.
        kind: InputKind,
        /// Key of the tensor in the weights (None for user inputs).
        target: Option<String>,
    },
    /// An op of the table; `args` are bound to its schema.
    Op(Op),
    /// An op the table does not know, kept with its ATen name and argument names.
    Unsupported {
        /// The ATen overload name as read.
        target: String,
        /// Argument names, parallel to `Node::args`.
        arg_names: Vec<String>,
    },
}

/// One node of the graph.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// Unique node name (from FX).
    pub name: String,
    /// What it does.
    pub kind: NodeKind,
    /// Arguments: one per schema parameter for `Op`, as read for `Unsupported`, none for inputs.
    pub args: Vec<Arg>,
    /// Result names, unique across the graph.
    pub result_names: Vec<String>,
    /// Result types.
    pub results: Vec<TensorType>,
}

impl Node {
    /// The op, if this is a table op.
    pub fn op(&self) -> Option<Op> {
        match self.kind {
            NodeKind::Op(op) => Some(op),
            _ => None,
        }
    }

    /// The op name for messages: ATen name, `input`, or the unsupported target.
    pub fn op_name(&self) -> String {
        match &self.kind {
            NodeKind::Input { kind, .. } => kind.name().to_string(),
            NodeKind::Op(op) => op.aten().to_string(),
            NodeKind::Unsupported { target, .. } => target.clone(),
        }
    }

    /// The argument bound to schema parameter `name` (table ops only).
    pub fn arg(&self, name: &str) -> Option<&Arg> {
        let i = self.op()?.param_index(name)?;
        self.args.get(i)
    }
}

/// A computation graph of core ATen ops.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Graph {
    /// Nodes in topological order; inputs first.
    pub nodes: Vec<Node>,
    /// Values returned, in order.
    pub outputs: Vec<ValueRef>,
}

/// A dense, contiguous, little-endian host tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub shape: Vec<usize>,
    /// `numel * dtype.size_bytes()` bytes, row-major.
    pub bytes: Vec<u8>,
}

impl HostTensor {
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// Named weights: parameters, buffers and constants, keyed by target.
pub type Weights = BTreeMap<String, HostTensor>;

/// A graph with the bytes of its weights.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Model {
    /// The graph.
    pub graph: Graph,
    /// Weights keyed by target.
    pub weights: Weights,
}

impl Graph {
    /// Type of a value.
    pub fn ty(&self, v: ValueRef) -> &TensorType {
        &self.nodes[v.node].results[v.index]
    }

    /// Name of a value.
    pub fn value_name(&self, v: ValueRef) -> &str {
        &self.nodes[v.node].result_names[v.index]
    }

    /// For each node, the nodes that read any of its results (`users[n]`, ascending, each
    /// once).
    pub fn users(&self) -> Users {
        // Readers are visited in ascending order, so each node's list comes out sorted; a
        // reader of several of a node's results (or of one twice) is counted once.
        let reads = |f: &mut dyn FnMut(NodeId, NodeId)| {
            for (i, n) in self.nodes.iter().enumerate() {
                for a in &n.args {
                    match a {
                        Arg::Tensor(v) => f(v.node, i),
                        Arg::Tensors(vs) => vs.iter().flatten().for_each(|v| f(v.node, i)),
                        _ => {}
                    }
                }
            }
        };
        let n = self.nodes.len();
        let mut last = vec![usize::MAX; n];
        let mut start = vec![0usize; n + 1];
        reads(&mut |node, reader| {
            if node < n && last[node] != reader {
                last[node] = reader;
                start[node + 1] += 1;
            }
        });
        for k in 0..n {
            start[k + 1] += start[k];
        }
        let mut ids = vec![0; start[n]];
        let mut next = start.clone();
        last.fill(usize::MAX);
        reads(&mut |node, reader| {
            if node < n && last[node] != reader {
                last[node] = reader;
                ids[next[node]] = reader;
                next[node] += 1;
            }
        });
        Users { start, ids }
    }

    /// Node ids of the user inputs, in calling order.
    pub fn user_inputs(&self) -> Vec<NodeId> {
        self.inputs_where(|k| k == InputKind::User)
    }

    /// Node ids of parameters, buffers and constants.
    pub fn weight_inputs(&self) -> Vec<NodeId> {
        self.inputs_where(|k| k != InputKind::User)
    }

    fn inputs_where(&self, f: impl Fn(InputKind) -> bool) -> Vec<NodeId> {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| matches!(n.kind, NodeKind::Input { kind, .. } if f(kind)))
            .map(|(i, _)| i)
            .collect()
    }

    /// Names of ops that are not in the table, with their counts.
    pub fn unsupported_ops(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for n in &self.nodes {
            if let NodeKind::Unsupported { target, .. } = &n.kind {
                *m.entry(target.clone()).or_insert(0) += 1;
            }
        }
        m
    }

    /// Histogram of op names (inputs excluded).
    pub fn op_histogram(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for n in &self.nodes {
            if !matches!(n.kind, NodeKind::Input { .. }) {
                *m.entry(n.op_name()).or_insert(0) += 1;
            }
        }
        m
    }

    /// Map from value name to value.
    pub fn value_names(&self) -> HashMap<&str, ValueRef> {
        let mut m = HashMap::with_capacity(self.nodes.len());
        for (i, n) in self.nodes.iter().enumerate() {
            for (j, r) in n.result_names.iter().enumerate() {
                m.insert(r.as_str(), ValueRef::new(i, j));
            }
        }
        m
    }

    /// Number of uses of every value (outputs count as uses).
    pub fn use_counts(&self) -> HashMap<ValueRef, usize> {
        let mut m = HashMap::with_capacity(self.nodes.len());
        for n in &self.nodes {
            for a in &n.args {
                for v in a.values() {
                    *m.entry(v).or_insert(0) += 1;
                }
            }
        }
        for &o in &self.outputs {
            *m.entry(o).or_insert(0) += 1;
        }
        m
    }

    fn node_err(&self, index: usize, msg: impl Into<String>) -> IrError {
        let n = &self.nodes[index];
        IrError::Node {
            index,
            name: n.name.clone(),
            op: n.op_name(),
            msg: msg.into(),
        }
    }

    /// Infers the result types of node `index` from its arguments (table ops only).
    pub fn infer_node(&self, index: usize) -> Result<Vec<TensorType>> {
        let n = &self.nodes[index];
        let NodeKind::Op(op) = n.kind else {
            return Ok(n.results.clone());
        };
        let types: Vec<ArgType> = n
            .args
            .iter()
            .map(|a| match a {
                Arg::Tensor(v) => ArgType::One(self.ty(*v).clone()),
                Arg::Tensors(vs) => {
                    ArgType::List(vs.iter().map(|v| v.map(|v| self.ty(v).clone())).collect())
                }
                _ => ArgType::NotTensor,
            })
            .collect();
        let cx = InferCx {
            op,
            args: &n.args,
            types: &types,
        };
        (op.info().infer)(&cx).map_err(|m| self.node_err(index, m))
    }

    /// Checks references, argument kinds, result types and names. Errors name the node.
    pub fn verify(&self) -> Result<()> {
        // (Sized up front: growing a map of a million names rehashes it twenty times.)
        let mut names = HashMap::with_capacity(self.nodes.len());
        for (i, n) in self.nodes.iter().enumerate() {
            if n.result_names.len() != n.results.len() {
                return Err(self.node_err(i, "result names and types differ in count"));
            }
            for r in &n.result_names {
                if let Some(prev) = names.insert(r.as_str(), i) {
                    return Err(self.node_err(
                        i,
                        format!("value name '{r}' is already defined by node {prev}"),
                    ));
                }
            }
            for a in &n.args {
                for v in a.values() {
                    if v.node >= i {
                        return Err(self.node_err(
                            i,
                            format!(
                                "uses node {} which does not come before it (cycle or bad order)",
                                v.node
                            ),
                        ));
                    }
                    if v.index >= self.nodes[v.node].results.len() {
                        return Err(self.node_err(
                            i,
                            format!(
                                "uses result {} of node {}, which has {}",
                                v.index,
                                v.node,
                                self.nodes[v.node].results.len()
                            ),
                        ));
                    }
                }
            }
            match &n.kind {
                NodeKind::Input { kind, target } => {
                    if !n.args.is_empty() || n.results.len() != 1 {
                        return Err(self.node_err(i, "an input has no arguments and one result"));
                    }
                    if (*kind == InputKind::User) != target.is_none() {
                        return Err(self.node_err(i, "only non-user inputs have a target"));
                    }
                }
                NodeKind::Unsupported { arg_names, .. } => {
                    if arg_names.len() != n.args.len() {
                        return Err(self.node_err(i, "argument names and values differ in count"));
                    }
                }
                NodeKind::Op(op) => {
                    let info = op.info();
                    if n.args.len() != info.params.len() {
                        return Err(self.node_err(
                            i,
                            format!(
                                "has {} arguments, the op takes {}",
                                n.args.len(),
                                info.params.len()
                            ),
                        ));
                    }
                    for (p, a) in info.params.iter().zip(&n.args) {
                        if !p.kind.accepts(a) {
                            return Err(self.node_err(
                                i,
                                format!(
                                    "argument `{}` is {}, expected {}",
                                    p.name,
                                    a.kind_name(),
                                    kind_desc(p.kind)
                                ),
                            ));
                        }
                    }
                    if let Results::Fixed(k) = info.results {
                        if n.results.len() != k {
                            return Err(self.node_err(
                                i,
                                format!("has {} results, the op has {k}", n.results.len()),
                            ));
                        }
                    }
                    let inferred = self.infer_node(i)?;
                    if inferred != n.results {
                        return Err(self.node_err(i, type_mismatch(&n.results, &inferred)));
                    }
                }
            }
            for t in &n.results {
                if let Some(d) = t
                    .shape
                    .iter()
                    .find(|d| d.as_static().is_some_and(|x| x < 0))
                {
                    return Err(self.node_err(
                        i,
                        format!(
                            "result has negative dimension {d} in {}",
                            shape_string(&t.shape)
                        ),
                    ));
                }
                if t.static_shape().is_some() && t.numel().is_none() {
                    return Err(self.node_err(
                        i,
                        format!(
                            "result shape {} has more elements than fit in i64",
                            shape_string(&t.shape)
                        ),
                    ));
                }
            }
        }
        if self.outputs.is_empty() {
            return Err(IrError::Graph("the graph has no outputs".into()));
        }
        for o in &self.outputs {
            if o.node >= self.nodes.len() || o.index >= self.nodes[o.node].results.len() {
                return Err(IrError::Graph(format!(
                    "output refers to missing value {o:?}"
                )));
            }
        }
        Ok(())
    }
}

/// The message for result types that disagree with what the op table infers.
pub(crate) fn type_mismatch(declared: &[TensorType], inferred: &[TensorType]) -> String {
    let show = |ts: &[TensorType]| {
        ts.iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "declared result type {} but the op gives {}",
        show(declared),
        show(inferred)
    )
}

/// Human-readable description of a parameter kind, for messages.
pub fn kind_desc(k: ParamKind) -> &'static str {
    use ParamKind as K;
    match k {
        K::Tensor => "a tensor",
        K::OptTensor => "a tensor or none",
        K::Tensors => "a tensor list",
        K::OptTensors => "a list of optional tensors",
        K::Int => "an int",
        K::OptInt => "an int or none",
        K::Ints => "an int list",
        K::OptInts => "an int list or none",
        K::Float => "a float",
        K::OptFloat => "a float or none",
        K::OptFloats => "a float list or none",
        K::Bool => "a bool",
        K::OptBool => "a bool or none",
        K::Bools => "a bool list",
        K::Scalar => "a number",
        K::OptScalar => "a number or none",
        K::Str => "a string",
        K::OptStr => "a string or none",
        K::DType => "a dtype or none",
        K::Layout => "a layout or none",
        K::Device => "a device or none",
        K::MemoryFormat => "a memory format or none",
    }
}

impl Model {
    /// Checks that every weight input has a tensor of its declared dtype and shape.
    pub fn verify_weights(&self) -> Result<()> {
        for i in self.graph.weight_inputs() {
            let n = &self.graph.nodes[i];
            let NodeKind::Input {
                target: Some(t), ..
            } = &n.kind
            else {
                continue;
            };
            let ty = &n.results[0];
            let w = self.weights.get(t).ok_or_else(|| IrError::Weight {
                name: t.clone(),
                msg: format!("missing (needed by input '{}' of type {ty})", n.name),
            })?;
            let want = ty
                .static_shape()
                .map(|s| s.iter().map(|&d| d as usize).collect::<Vec<_>>());
            if w.dtype != ty.dtype || want.as_deref() != Some(&w.shape[..]) {
                return Err(IrError::Weight {
                    name: t.clone(),
                    msg: format!(
                        "has {}{:?}, but input '{}' declares {ty}",
                        w.dtype, w.shape, n.name
                    ),
                });
            }
            if w.bytes.len() != w.numel() * w.dtype.size_bytes() {
                return Err(IrError::Weight {
                    name: t.clone(),
                    msg: format!(
                        "has {} bytes, expected {}",
                        w.bytes.len(),
                        w.numel() * w.dtype.size_bytes()
                    ),
                });
            }
        }
        Ok(())
    }
}

impl HostTensor {
    /// A tensor from f64 values, converted to `dtype` (rounded, or truncated and wrapped for
    /// integers, as a cast in PyTorch would).
    pub fn from_f64(dtype: DType, shape: Vec<usize>, values: &[f64]) -> HostTensor {
        let mut bytes = Vec::with_capacity(values.len() * dtype.size_bytes());
        for &v in values {
            match dtype {
                DType::F32 => bytes.extend((v as f32).to_le_bytes()),
                DType::F64 => bytes.extend(v.to_le_bytes()),
                DType::F16 => bytes.extend(half::f16::from_f64(v).to_le_bytes()),
                DType::BF16 => bytes.extend(half::bf16::from_f64(v).to_le_bytes()),
                DType::I64 => bytes.extend((v as i64).to_le_bytes()),
                DType::I32 => bytes.extend((v as i64 as i32).to_le_bytes()),
                DType::I16 => bytes.extend((v as i64 as i16).to_le_bytes()),
                DType::I8 => bytes.extend((v as i64 as i8).to_le_bytes()),
                DType::U8 => bytes.extend((v as i64 as u8).to_le_bytes()),
                DType::Bool => bytes.push((v != 0.0) as u8),
            }
        }
        HostTensor {
            dtype,
            shape,
            bytes,
        }
    }

    /// The elements as f64 (exact for every dtype but i64 values beyond 2^53).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        let n = self.dtype.size_bytes();
        self.bytes
            .chunks_exact(n)
            .map(|c| match self.dtype {
                DType::F32 => f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64,
                DType::F64 => f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]),
                DType::F16 => half::f16::from_le_bytes([c[0], c[1]]).to_f64(),
                DType::BF16 => half::bf16::from_le_bytes([c[0], c[1]]).to_f64(),
                DType::I64 => {
                    i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) as f64
                }
                DType::I32 => i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64,
                DType::I16 => i16::from_le_bytes([c[0], c[1]]) as f64,
                DType::I8 => c[0] as i8 as f64,
                DType::U8 => c[0] as f64,
                DType::Bool => (c[0] != 0) as u8 as f64,
            })
            .collect()
    }
}

#[cfg(test)]
mod users_tests {
    use crate::text::parse_graph;

    /// Each node's readers, ascending and once each (a node reading two results of one node,
    /// or one value twice, counts once); a node nobody reads has none.
    #[test]
    fn users_are_ascending_and_unique() {
        let g = parse_graph(
            "graph {
  %x: f32[4, 2] = input
  %w: f32[2] = input
  %y: f32[4, 2] = input
  %ln: f32[4, 2], %m: f32[4, 1], %r: f32[4, 1] = aten.native_layer_norm.default(%x, %w, %w, normalized_shape=[2], eps=1e-5)
  %s: f32[4, 1] = aten.add.Tensor(%m, %r)
  %e: f32[4, 2] = aten.mul.Tensor(%ln, %x)
  return %e, %s
}",
        )
        .unwrap();
        let u = g.users();
        assert_eq!(u.len(), g.nodes.len());
        let of = |name: &str| g.nodes.iter().position(|n| n.name == name).unwrap();
        let names = |name: &str| -> Vec<&str> {
            u[of(name)]
                .iter()
                .map(|&i| g.nodes[i].name.as_str())
                .collect()
        };
        assert_eq!(names("x"), ["ln", "e"]);
        assert_eq!(names("w"), ["ln"]);
        assert!(names("y").is_empty());
        assert_eq!(names("ln"), ["s", "e"]);
        assert!(names("s").is_empty());
        assert!(names("e").is_empty());
    }
}
