//! The e-graph language: one e-node per IR op, its non-tensor arguments as attribute leaves,
//! and tensor types as e-class analysis data (so rules can check shapes and dtypes).
//!
//! - `Op(op, children)` has one child per schema parameter: a tensor e-class for a tensor
//!   argument, an [`ENode::Attr`] leaf for any other (including an absent optional tensor),
//!   and an [`ENode::List`] for a tensor list.
//! - An op with several results is a tuple e-class; [`ENode::Get`] selects one result.
//! - Graph inputs are [`ENode::Input`] leaves; ops that must not be merged or rewritten (random
//!   ops, ops the table does not know) are [`ENode::Opaque`], keyed by their source node, so
//!   any graph round-trips.

use fxhlo_ir::infer::{ArgType, InferCx};
use fxhlo_ir::ops::Results;
use fxhlo_ir::{Arg, DType, Graph, NodeKind, Op, TensorType, ValueRef};
use std::fmt;

pub use egg::Id;

/// A non-tensor argument value, hashable and totally ordered (floats compare by their bits).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(missing_docs)]
pub enum AttrVal {
    None,
    Int(i64),
    Float(u64),
    Bool(bool),
    Ints(Vec<i64>),
    Floats(Vec<u64>),
    Bools(Vec<bool>),
    Str(String),
    DType(DType),
    Layout(String),
    Device(String),
    MemoryFormat(String),
}

impl AttrVal {
    /// The attribute of a non-tensor argument (`None` for tensor arguments).
    pub fn from_arg(a: &Arg) -> Option<AttrVal> {
        Some(match a {
            Arg::None => AttrVal::None,
            Arg::Tensor(_) | Arg::Tensors(_) => return None,
            Arg::Int(n) => AttrVal::Int(*n),
            Arg::Float(x) => AttrVal::Float(x.to_bits()),
            Arg::Bool(b) => AttrVal::Bool(*b),
            Arg::Ints(v) => AttrVal::Ints(v.clone()),
            Arg::Floats(v) => AttrVal::Floats(v.iter().map(|x| x.to_bits()).collect()),
            Arg::Bools(v) => AttrVal::Bools(v.clone()),
            Arg::Str(s) => AttrVal::Str(s.clone()),
            Arg::DType(d) => AttrVal::DType(*d),
            Arg::Layout(s) => AttrVal::Layout(s.clone()),
            Arg::Device(s) => AttrVal::Device(s.clone()),
            Arg::MemoryFormat(s) => AttrVal::MemoryFormat(s.clone()),
        })
    }

    /// Back to an argument.
    pub fn to_arg(&self) -> Arg {
        match self {
            AttrVal::None => Arg::None,
            AttrVal::Int(n) => Arg::Int(*n),
            AttrVal::Float(b) => Arg::Float(f64::from_bits(*b)),
            AttrVal::Bool(b) => Arg::Bool(*b),
            AttrVal::Ints(v) => Arg::Ints(v.clone()),
            AttrVal::Floats(v) => Arg::Floats(v.iter().map(|b| f64::from_bits(*b)).collect()),
            AttrVal::Bools(v) => Arg::Bools(v.clone()),
            AttrVal::Str(s) => Arg::Str(s.clone()),
            AttrVal::DType(d) => Arg::DType(*d),
            AttrVal::Layout(s) => Arg::Layout(s.clone()),
            AttrVal::Device(s) => Arg::Device(s.clone()),
            AttrVal::MemoryFormat(s) => Arg::MemoryFormat(s.clone()),
        }
    }

    /// A float attribute.
    pub fn float(x: f64) -> AttrVal {
        AttrVal::Float(x.to_bits())
    }

    /// The value of a numeric scalar attribute.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            AttrVal::Int(n) => Some(*n as f64),
            AttrVal::Float(b) => Some(f64::from_bits(*b)),
            _ => None,
        }
    }
}

/// An e-node.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ENode {
    /// A graph input: the index of its node in the source graph.
    Input(usize),
    /// A non-tensor argument.
    Attr(AttrVal),
    /// A tensor list (`Tensor[]`, `Tensor?[]`): its length, then tensors or `Attr(None)`.
    List(usize, Vec<Id>),
    /// A table op: one child per schema parameter.
    Op(Op, Vec<Id>),
    /// Result `.0` of a multi-result op.
    Get(usize, [Id; 1]),
    /// A source node kept as is (random or unknown op): its index, then its tensor arguments.
    Opaque(usize, Vec<Id>),
}

/// What e-nodes with equal discriminants have in common (everything but the children).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum Disc {
    Input(usize),
    Attr(AttrVal),
    List(usize),
    Op(Op),
    Get(usize),
    Opaque(usize),
}

impl egg::Language for ENode {
    type Discriminant = Disc;

    fn discriminant(&self) -> Disc {
        match self {
            ENode::Input(i) => Disc::Input(*i),
            ENode::Attr(a) => Disc::Attr(a.clone()),
            ENode::List(n, _) => Disc::List(*n),
            ENode::Op(op, _) => Disc::Op(*op),
            ENode::Get(i, _) => Disc::Get(*i),
            ENode::Opaque(i, _) => Disc::Opaque(*i),
        }
    }

    fn matches(&self, other: &Self) -> bool {
        self.discriminant() == other.discriminant()
            && self.children().len() == other.children().len()
    }

    fn children(&self) -> &[Id] {
        match self {
            ENode::Input(_) | ENode::Attr(_) => &[],
            ENode::List(_, c) | ENode::Op(_, c) | ENode::Opaque(_, c) => c,
            ENode::Get(_, c) => c,
        }
    }

    fn children_mut(&mut self) -> &mut [Id] {
        match self {
            ENode::Input(_) | ENode::Attr(_) => &mut [],
            ENode::List(_, c) | ENode::Op(_, c) | ENode::Opaque(_, c) => c,
            ENode::Get(_, c) => c,
        }
    }
}

impl fmt::Display for ENode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ENode::Input(i) => write!(f, "input{i}"),
            ENode::Attr(a) => write!(f, "{a:?}"),
            ENode::List(..) => f.write_str("list"),
            ENode::Op(op, _) => f.write_str(op.aten()),
            ENode::Get(i, _) => write!(f, "get.{i}"),
            ENode::Opaque(i, _) => write!(f, "opaque{i}"),
        }
    }
}

/// Error of [`egg::FromOp`] for [`ENode`].
#[derive(Debug)]
pub struct ParseENodeError(pub String);

impl egg::FromOp for ENode {
    type Error = ParseENodeError;

    /// Pattern syntax: `aten.<name>.<overload>` with one child per parameter, `get.N`,
    /// `list`, and attribute literals `none`, `true`, `false`, integers and floats.
    fn from_op(op: &str, children: Vec<Id>) -> Result<Self, Self::Error> {
        let err = || {
            ParseENodeError(format!(
                "bad e-node '{op}' with {} children",
                children.len()
            ))
        };
        if let Some(o) = Op::from_aten(op) {
            return if o.info().params.len() == children.len() {
                Ok(ENode::Op(o, children))
            } else {
                Err(err())
            };
        }
        if let Some(i) = op.strip_prefix("get.") {
            let i = i.parse().map_err(|_| err())?;
            let c: [Id; 1] = children
                .try_into()
                .map_err(|_| ParseENodeError(op.into()))?;
            return Ok(ENode::Get(i, c));
        }
        if op == "list" {
            return Ok(ENode::List(children.len(), children));
        }
        if !children.is_empty() {
            return Err(err());
        }
        let a = match op {
            "none" => AttrVal::None,
            "true" => AttrVal::Bool(true),
            "false" => AttrVal::Bool(false),
            _ => {
                if let Ok(n) = op.parse::<i64>() {
                    AttrVal::Int(n)
                } else if let Ok(x) = op.parse::<f64>() {
                    AttrVal::float(x)
                } else {
                    return Err(err());
                }
            }
        };
        Ok(ENode::Attr(a))
    }
}

/// Analysis data of an e-class.
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    /// A tensor value.
    Tensor(TensorType),
    /// The results of a multi-result op.
    Tuple(Vec<TensorType>),
    /// An attribute.
    Attr(AttrVal),
    /// A tensor list.
    List(Vec<Option<TensorType>>),
    /// An e-node whose types could not be inferred (never extracted).
    Invalid(String),
}

impl Data {
    /// The tensor type, if a tensor.
    pub fn tensor(&self) -> Option<&TensorType> {
        match self {
            Data::Tensor(t) => Some(t),
            _ => None,
        }
    }
}

/// The analysis: infers the types of every e-node through the op table.
#[derive(Debug, Default)]
pub struct TensorAnalysis {
    /// Result types of the source graph's nodes (for inputs and opaque nodes).
    pub source_types: Vec<Vec<TensorType>>,
}

/// The e-graph of this language.
pub type EGraph = egg::EGraph<ENode, TensorAnalysis>;

fn tuple_or_tensor(mut ts: Vec<TensorType>, fixed_one: bool) -> Data {
    if fixed_one && ts.len() == 1 {
        Data::Tensor(ts.remove(0))
    } else {
        Data::Tuple(ts)
    }
}

/// Infers the result types of `op` applied to e-classes with `children`'s data.
pub fn infer_op(op: Op, children: &[&Data]) -> Data {
    let dummy = ValueRef::new(0, 0);
    let mut args = Vec::with_capacity(children.len());
    let mut types = Vec::with_capacity(children.len());
    for d in children {
        match d {
            Data::Attr(a) => {
                args.push(a.to_arg());
                types.push(ArgType::NotTensor);
            }
            Data::Tensor(t) => {
                args.push(Arg::Tensor(dummy));
                types.push(ArgType::One(t.clone()));
            }
            Data::List(ts) => {
                args.push(Arg::Tensors(
                    ts.iter().map(|t| t.as_ref().map(|_| dummy)).collect(),
                ));
                types.push(ArgType::List(ts.clone()));
            }
            Data::Tuple(_) => return Data::Invalid("a tuple used as an argument".into()),
            Data::Invalid(m) => return Data::Invalid(m.clone()),
        }
    }
    let info = op.info();
    for (p, a) in info.params.iter().zip(&args) {
        if !p.kind.accepts(a) {
            return Data::Invalid(format!("argument `{}` of {op} has the wrong kind", p.name));
        }
    }
    let cx = InferCx {
        op,
        args: &args,
        types: &types,
    };
    match (info.infer)(&cx) {
        Ok(ts) => tuple_or_tensor(ts, info.results == Results::Fixed(1)),
        Err(m) => Data::Invalid(m),
    }
}

impl egg::Analysis<ENode> for TensorAnalysis {
    type Data = Data;

    fn make(egraph: &mut EGraph, enode: &ENode) -> Data {
        let src = |i: usize| {
            egraph
                .analysis
                .source_types
                .get(i)
                .cloned()
                .unwrap_or_default()
        };
        match enode {
            ENode::Input(i) => tuple_or_tensor(src(*i), true),
            ENode::Opaque(i, _) => tuple_or_tensor(src(*i), true),
            ENode::Attr(a) => Data::Attr(a.clone()),
            ENode::List(_, cs) => {
                let mut ts = vec![];
                for c in cs {
                    match &egraph[*c].data {
                        Data::Tensor(t) => ts.push(Some(t.clone())),
                        Data::Attr(AttrVal::None) => ts.push(None),
                        _ => return Data::Invalid("bad tensor list entry".into()),
                    }
                }
                Data::List(ts)
            }
            ENode::Get(i, [c]) => match &egraph[*c].data {
                Data::Tuple(ts) if *i < ts.len() => Data::Tensor(ts[*i].clone()),
                _ => Data::Invalid(format!("get.{i} of a non-tuple")),
            },
            ENode::Op(op, cs) => {
                let ds: Vec<&Data> = cs.iter().map(|c| &egraph[*c].data).collect();
                infer_op(*op, &ds)
            }
        }
    }

    fn merge(&mut self, a: &mut Data, b: Data) -> egg::DidMerge {
        if *a == b {
            return egg::DidMerge(false, false);
        }
        // Rules only union e-classes of equal types (see `rules::guarded_union`); an invalid
        // side takes the valid one's data.
        if matches!(a, Data::Invalid(_)) {
            *a = b;
            return egg::DidMerge(true, false);
        }
        egg::DidMerge(false, true)
    }
}

/// Whether a source node is kept opaque in the e-graph.
pub fn is_opaque(kind: &NodeKind) -> bool {
    match kind {
        NodeKind::Op(op) => op.is_random(),
        NodeKind::Unsupported { .. } => true,
        NodeKind::Input { .. } => false,
    }
}

/// The e-graph of a graph, with the e-class of every value of the source graph.
pub struct Translation {
    /// The e-graph.
    pub egraph: EGraph,
    /// E-class of each value: `values[node][result]`.
    pub values: Vec<Vec<Id>>,
    /// E-class of each op node (its tuple class for multi-result ops).
    pub node_class: Vec<Id>,
}

/// Translates a graph into an e-graph.
pub fn to_egraph(g: &Graph) -> Translation {
    let analysis = TensorAnalysis {
        source_types: g.nodes.iter().map(|n| n.results.clone()).collect(),
    };
    let mut eg = EGraph::new(analysis);
    let mut values: Vec<Vec<Id>> = Vec::with_capacity(g.nodes.len());
    let mut node_class = Vec::with_capacity(g.nodes.len());
    for (i, n) in g.nodes.iter().enumerate() {
        let id = if matches!(n.kind, NodeKind::Input { .. }) {
            eg.add(ENode::Input(i))
        } else if is_opaque(&n.kind) {
            let cs = n
                .args
                .iter()
                .flat_map(|a| a.values())
                .map(|v| values[v.node][v.index])
                .collect();
            eg.add(ENode::Opaque(i, cs))
        } else {
            let NodeKind::Op(op) = n.kind else {
                unreachable!("handled above")
            };
            let mut cs = Vec::with_capacity(n.args.len());
            for a in &n.args {
                cs.push(match a {
                    Arg::Tensor(v) => values[v.node][v.index],
                    Arg::Tensors(vs) => {
                        let items: Vec<Id> = vs
                            .iter()
                            .map(|v| match v {
                                Some(v) => values[v.node][v.index],
                                None => eg.add(ENode::Attr(AttrVal::None)),
                            })
                            .collect();
                        eg.add(ENode::List(items.len(), items))
                    }
                    a => eg.add(ENode::Attr(AttrVal::from_arg(a).expect("not a tensor"))),
                });
            }
            eg.add(ENode::Op(op, cs))
        };
        node_class.push(id);
        let vs = match &eg[id].data {
            Data::Tuple(ts) => (0..ts.len()).map(|r| eg.add(ENode::Get(r, [id]))).collect(),
            _ => vec![id],
        };
        values.push(vs);
    }
    eg.rebuild();
    Translation {
        egraph: eg,
        values,
        node_class,
    }
}
