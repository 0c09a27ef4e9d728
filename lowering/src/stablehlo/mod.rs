//! StableHLO emission: the pretty MLIR syntax XLA prints.
//!
//! [`emit`] writes one `func.func public @main` whose arguments are the user inputs (graph order)
//! and then the weights (graph order; unless [`EmitOptions::inline_constants`] folds them in as
//! `stablehlo.constant`), and whose results are the graph outputs. Each op is lowered by one
//! function of its family module; the dispatch in [`lower_op`] is an exhaustive `match` over the
//! op table, so a new op cannot be skipped silently. Composite ops lower the way XLA does
//! (softmax as max/exp/sum, pooling as `reduce_window`, indexing as `gather`/`scatter`, ...).
//! Half-precision floats are computed in f32 where PyTorch does (reductions, transcendental
//! functions, matmuls) and rounded once. Random ops use `stablehlo.rng`: the values are
//! XLA's, not PyTorch's, only the distribution matches.

mod conv;
mod creation;
mod elementwise;
pub mod emitter;
mod index;
mod matmul;
mod norm;
mod pool;
mod reduce;
mod shape;
mod special;

use emitter::{tensor_ty, Em, Num, V};
use fxhlo_ir::{Arg, DType, Graph, Model, Node, NodeId, NodeKind, Op, ValueRef};
use std::collections::BTreeMap;
use std::fmt::Write;
use thiserror::Error;

/// Options of [`emit`].
#[derive(Clone, Debug, Default)]
pub struct EmitOptions {
    /// Fold parameters, buffers and constants into the module as `stablehlo.constant`.
    pub inline_constants: bool,
    /// Write every `stablehlo`/`chlo` op in MLIR's generic syntax (`"stablehlo.add"(%a, %b) :
    /// (T, T) -> T`) instead of the pretty one, so that an MLIR without the StableHLO dialect
    /// (unregistered dialects allowed) parses the module; jaxlib reads both as the same module.
    pub generic: bool,
}

/// Why a graph could not be lowered.
#[derive(Debug, Error)]
pub enum LowerError {
    /// A node that cannot be lowered, named.
    #[error("node {index} '{}' ({}): {msg}", fxhlo_ir::quote_name(.name), fxhlo_ir::quote_name(.op))]
    Node {
        /// Position in the graph.
        index: usize,
        /// Node name.
        name: String,
        /// Op name.
        op: String,
        /// What is wrong.
        msg: String,
    },
    /// A problem with the graph as a whole.
    #[error("{0}")]
    Graph(String),
}

type R<T> = Result<T, String>;

/// What an op lowering sees: the node, its tensor operands (already emitted) and the builder.
pub(crate) struct Cx<'a> {
    /// The builder.
    pub em: &'a mut Em,
    /// The node being lowered.
    pub node: &'a Node,
    vals: &'a [Vec<V>],
    /// This node's matmul operands that are transposes folded into `dot_general`.
    folded: Option<&'a Folded>,
}

/// A matmul operand `(view|expand)*(permute(y, swap of the last two dims))` whose views and
/// expands only reshape or broadcast the leading (batch) dims: the matmul reads `y` reshaped
/// and broadcast the same way (last two dims kept in `y`'s order) and contracts the other dim,
/// so no `stablehlo.transpose` is emitted.
#[derive(Clone, Debug)]
pub(crate) struct FoldedOperand {
    /// The untransposed source.
    pub source: ValueRef,
    /// Reshapes (`false`) and broadcasts (`true`) to apply to `source`, in order; the last
    /// gives the operand with its last two dims swapped.
    pub steps: Vec<(bool, Vec<i64>)>,
}

/// Folded operands of one node, by argument name.
type Folded = BTreeMap<&'static str, FoldedOperand>;

impl Cx<'_> {
    fn arg(&self, name: &str) -> R<&Arg> {
        self.node
            .arg(name)
            .ok_or_else(|| format!("missing argument `{name}`"))
    }

    fn value(&self, v: ValueRef) -> R<V> {
        self.vals
            .get(v.node)
            .and_then(|r| r.get(v.index))
            .cloned()
            .ok_or_else(|| format!("operand {v:?} was not lowered"))
    }

    /// Tensor argument `name`.
    pub fn t(&self, name: &str) -> R<V> {
        match self.arg(name)? {
            Arg::Tensor(v) => self.value(*v),
            a => Err(format!(
                "argument `{name}` is {}, expected a tensor",
                a.kind_name()
            )),
        }
    }

    /// Matmul operand `name`: `(value, false)`, or `(source, true)` when the operand is a
    /// transpose of the last two dims of `source` folded into the `dot_general`.
    pub fn t_dot(&mut self, name: &str) -> R<(V, bool)> {
        if let Some(f) = self.folded.and_then(|f| f.get(name)) {
            let mut y = self.value(f.source)?;
            for (bcast, shape) in &f.steps {
                y = if *bcast {
                    self.em.bcast_to(&y, shape)
                } else {
                    self.em.reshape(&y, shape)
                };
            }
            return Ok((y, true));
        }
        Ok((self.t(name)?, false))
    }

    /// Optional tensor argument `name`.
    pub fn opt_t(&self, name: &str) -> R<Option<V>> {
        match self.arg(name)? {
            Arg::None => Ok(None),
            _ => self.t(name).map(Some),
        }
    }

    /// Tensor-list argument `name`.
    pub fn ts(&self, name: &str) -> R<Vec<Option<V>>> {
        match self.arg(name)? {
            Arg::Tensors(vs) => vs
                .iter()
                .map(|v| v.map(|v| self.value(v)).transpose())
                .collect(),
            a => Err(format!(
                "argument `{name}` is {}, expected a tensor list",
                a.kind_name()
            )),
        }
    }

    /// Int argument `name`.
    pub fn int(&self, name: &str) -> R<i64> {
        match self.arg(name)? {
            Arg::Int(n) => Ok(*n),
            a => Err(format!(
                "argument `{name}` is {}, expected an int",
                a.kind_name()
            )),
        }
    }

    /// Optional int argument `name`.
    pub fn opt_int(&self, name: &str) -> R<Option<i64>> {
        match self.arg(name)? {
            Arg::None => Ok(None),
            _ => self.int(name).map(Some),
        }
    }

    /// Int-list argument `name`.
    pub fn ints(&self, name: &str) -> R<Vec<i64>> {
        match self.arg(name)? {
            Arg::Ints(v) => Ok(v.clone()),
            Arg::Int(n) => Ok(vec![*n]),
            a => Err(format!(
                "argument `{name}` is {}, expected an int list",
                a.kind_name()
            )),
        }
    }

    /// Optional int-list argument `name`.
    pub fn opt_ints(&self, name: &str) -> R<Option<Vec<i64>>> {
        match self.arg(name)? {
            Arg::None => Ok(None),
            _ => self.ints(name).map(Some),
        }
    }

    /// Bool argument `name`.
    pub fn bool(&self, name: &str) -> R<bool> {
        match self.arg(name)? {
            Arg::Bool(b) => Ok(*b),
            a => Err(format!(
                "argument `{name}` is {}, expected a bool",
                a.kind_name()
            )),
        }
    }

    /// Float argument `name` (ints accepted).
    pub fn float(&self, name: &str) -> R<f64> {
        self.num(name).map(Num::f64)
    }

    /// Scalar argument `name`.
    pub fn num(&self, name: &str) -> R<Num> {
        self.opt_num(name)?
            .ok_or_else(|| format!("argument `{name}` must be a number"))
    }

    /// Optional scalar argument `name`.
    pub fn opt_num(&self, name: &str) -> R<Option<Num>> {
        Ok(match self.arg(name)? {
            Arg::Int(n) => Some(Num::I(*n)),
            Arg::Float(x) => Some(Num::F(*x)),
            Arg::Bool(b) => Some(Num::B(*b)),
            Arg::None => None,
            a => {
                return Err(format!(
                    "argument `{name}` is {}, expected a number",
                    a.kind_name()
                ))
            }
        })
    }

    /// Optional string argument `name`.
    pub fn opt_str(&self, name: &str) -> R<Option<String>> {
        match self.arg(name)? {
            Arg::Str(s) => Ok(Some(s.clone())),
            Arg::None => Ok(None),
            a => Err(format!(
                "argument `{name}` is {}, expected a string",
                a.kind_name()
            )),
        }
    }

    /// Dtype of result `i`.
    pub fn out_dtype(&self, i: usize) -> DType {
        self.node.results[i].dtype
    }

    /// Static shape of result `i`.
    pub fn out_shape(&self, i: usize) -> R<Vec<i64>> {
        self.node.results[i]
            .static_shape()
            .ok_or_else(|| "symbolic result shapes are not supported".to_string())
    }
}

/// Normalizes a possibly negative dim against `rank` (0-d tensors accept 0 and -1).
pub(crate) fn norm_dim(d: i64, rank: usize) -> R<usize> {
    fxhlo_ir::infer::norm_dim(d, rank)
}

/// The dtype PyTorch computes in for `d` (half types in f32).
pub(crate) fn opmath(d: DType) -> DType {
    match d {
        DType::F16 | DType::BF16 => DType::F32,
        d => d,
    }
}

/// Emits a StableHLO module for `model`.
pub fn emit(model: &Model, opts: &EmitOptions) -> Result<String, LowerError> {
    let g = &model.graph;
    let node_err = |index: usize, msg: String| {
        let n = &g.nodes[index];
        LowerError::Node {
            index,
            name: n.name.clone(),
            op: n.op_name(),
            msg,
        }
    };
    let mut em = if opts.generic {
        Em::generic()
    } else {
        Em::new()
    };
    let mut vals: Vec<Vec<V>> = vec![vec![]; g.nodes.len()];
    let (folded, skip) = fold_transposes(g);
    let mut params: Vec<V> = vec![];
    let mut order = g.user_inputs();
    if !opts.inline_constants {
        order.extend(g.weight_inputs());
    }
    for (k, &i) in order.iter().enumerate() {
        let t = &g.nodes[i].results[0];
        let shape = t
            .static_shape()
            .ok_or_else(|| node_err(i, format!("symbolic input shape {t} is not supported")))?;
        let v = V {
            name: format!("%arg{k}"),
            dtype: t.dtype,
            shape,
        };
        params.push(v.clone());
        vals[i] = vec![v];
    }
    for (i, n) in g.nodes.iter().enumerate() {
        match &n.kind {
            NodeKind::Input { kind, target } => {
                if !vals[i].is_empty() {
                    continue;
                }
                let t = target.as_deref().unwrap_or("");
                let w = model.weights.get(t).ok_or_else(|| {
                    node_err(
                        i,
                        format!("{} '{t}' has no tensor in the weights", kind.name()),
                    )
                })?;
                let shape: Vec<i64> = w.shape.iter().map(|&d| d as i64).collect();
                let want = n.results[0].static_shape();
                if want.as_deref() != Some(&shape[..]) || w.dtype != n.results[0].dtype {
                    return Err(node_err(
                        i,
                        format!(
                            "weight '{t}' is {}{:?}, input declares {}",
                            w.dtype, w.shape, n.results[0]
                        ),
                    ));
                }
                vals[i] = vec![em.dense_bytes(w.dtype, &shape, &w.bytes)];
            }
            NodeKind::Unsupported { target, .. } => {
                return Err(node_err(
                    i,
                    format!("op '{target}' is not in the op table, so it cannot be lowered"),
                ))
            }
            NodeKind::Op(_) if skip[i] => {}
            NodeKind::Op(op) => {
                for t in &n.results {
                    if t.static_shape().is_none() {
                        return Err(node_err(i, format!("symbolic shape {t} is not supported")));
                    }
                }
                let mut cx = Cx {
                    em: &mut em,
                    node: n,
                    vals: &vals,
                    folded: folded.get(&i),
                };
                let outs = lower_op(*op, &mut cx).map_err(|m| node_err(i, m))?;
                let outs = fit_results(&mut em, n, outs).map_err(|m| node_err(i, m))?;
                vals[i] = outs;
            }
        }
    }
    let mut results = vec![];
    for o in &g.outputs {
        let v = vals
            .get(o.node)
            .and_then(|r| r.get(o.index))
            .cloned()
            .ok_or_else(|| LowerError::Graph(format!("output {o:?} is not a lowered value")))?;
        results.push(v);
    }
    Ok(module_text(g, &params, &results, em.text()))
}

/// The last-two-dims transpose behind a matmul operand `v`: walks `view`s that keep the last
/// two dims (reshaping only the leading ones), `expand`s that broadcast only leading dims,
/// `clone`s and `alias`es down to a `permute` that swaps the last two dims. Returns the folded
/// operand and the nodes of the chain.
fn transposed_source(g: &Graph, v: ValueRef) -> Option<(FoldedOperand, Vec<NodeId>)> {
    let shape = |v: ValueRef| g.ty(v).static_shape();
    let swapped = |s: &[i64]| {
        let r = s.len();
        let mut t = s[..r - 2].to_vec();
        t.extend([s[r - 1], s[r - 2]]);
        t
    };
    let mut chain = vec![];
    let mut steps = vec![];
    let mut cur = v;
    loop {
        let n = &g.nodes[cur.node];
        let x = n.arg("self")?.as_tensor()?;
        let (xs, cs) = (shape(x)?, shape(cur)?);
        let (xr, cr) = (xs.len(), cs.len());
        if xr < 2 || cr < 2 || cur.index != 0 {
            return None;
        }
        chain.push(cur.node);
        let last_two_kept = xs[xr - 2..] == cs[cr - 2..];
        match n.op()? {
            Op::Alias | Op::Clone => {}
            Op::Expand if last_two_kept && cr >= xr => steps.push((true, swapped(&cs))),
            Op::View if last_two_kept => steps.push((false, swapped(&cs))),
            Op::Permute => {
                let Some(Arg::Ints(dims)) = n.arg("dims") else {
                    return None;
                };
                let perm = dims
                    .iter()
                    .map(|&d| norm_dim(d, xr).ok())
                    .collect::<Option<Vec<usize>>>()?;
                let swap = (0..xr - 2).chain([xr - 1, xr - 2]).eq(perm.iter().copied());
                if !swap {
                    return None;
                }
                steps.reverse();
                return Some((FoldedOperand { source: x, steps }, chain));
            }
            _ => return None,
        }
        cur = x;
    }
}

/// Plans which matmul operands (`mm`, `bmm`, `addmm`) read a transpose that `dot_general`'s
/// contracting dimensions can absorb, and which nodes then need no emission at all (every use
/// is such a folded chain). Returns the folded operands by node and the nodes to skip.
fn fold_transposes(g: &Graph) -> (BTreeMap<NodeId, Folded>, Vec<bool>) {
    let mut folded: BTreeMap<NodeId, Folded> = BTreeMap::new();
    let mut in_chain = vec![false; g.nodes.len()];
    let mut sources = vec![];
    // Uses of each node that are the head of a folded chain of the using node.
    let mut folded_uses: BTreeMap<(NodeId, NodeId), ()> = BTreeMap::new();
    for (i, n) in g.nodes.iter().enumerate() {
        let names: &[&'static str] = match n.op() {
            Some(Op::Mm | Op::Bmm) => &["self", "mat2"],
            Some(Op::Addmm) => &["mat1", "mat2"],
            _ => continue,
        };
        for &name in names {
            let Some(v) = n.arg(name).and_then(Arg::as_tensor) else {
                continue;
            };
            // The other operand must not read the same value unfolded.
            let shared = n
                .args
                .iter()
                .flat_map(|a| a.values())
                .filter(|&u| u == v)
                .count()
                > 1;
            if shared {
                continue;
            }
            if let Some((f, chain)) = transposed_source(g, v) {
                sources.push(f.source.node);
                for &c in &chain {
                    in_chain[c] = true;
                }
                folded_uses.insert((v.node, i), ());
                folded.entry(i).or_default().insert(name, f);
            }
        }
    }
    let mut skip = in_chain.clone();
    for s in sources {
        skip[s] = false;
    }
    for o in &g.outputs {
        skip[o.node] = false;
    }
    let mut users: Vec<Vec<NodeId>> = vec![vec![]; g.nodes.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        for a in &n.args {
            for v in a.values() {
                users[v.node].push(i);
            }
        }
    }
    // A chain node is emitted after all if anything else reads it.
    loop {
        let mut changed = false;
        for i in (0..g.nodes.len()).rev() {
            if skip[i]
                && users[i]
                    .iter()
                    .any(|&u| !skip[u] && !folded_uses.contains_key(&(i, u)))
            {
                skip[i] = false;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    (folded, skip)
}

/// Checks the lowered results against the node's types (converting dtypes where a family
/// computed in a wider type).
fn fit_results(em: &mut Em, n: &Node, outs: Vec<V>) -> R<Vec<V>> {
    if outs.len() != n.results.len() {
        return Err(format!(
            "lowering produced {} results, the node has {}",
            outs.len(),
            n.results.len()
        ));
    }
    let mut fitted = vec![];
    for (v, t) in outs.into_iter().zip(&n.results) {
        let shape = t.static_shape().unwrap_or_default();
        if v.shape != shape {
            return Err(format!(
                "internal error: lowering gives {}, the node's type is {}",
                v.ty(),
                tensor_ty(t.dtype, &shape)
            ));
        }
        fitted.push(em.convert(&v, t.dtype));
    }
    Ok(fitted)
}

fn module_text(_g: &Graph, params: &[V], results: &[V], body: &str) -> String {
    let mut s = String::new();
    s.push_str(
        "module @fxhlo attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {\n",
    );
    let args: Vec<String> = params
        .iter()
        .map(|p| format!("{}: {}", p.name, p.ty()))
        .collect();
    let rtys: Vec<String> = results.iter().map(V::ty).collect();
    let _ = writeln!(
        s,
        "  func.func public @main({}) -> ({}) {{",
        args.join(", "),
        rtys.join(", ")
    );
    s.push_str(body);
    let rn: Vec<String> = results.iter().map(|r| r.name.clone()).collect();
    let _ = writeln!(s, "    return {} : {}", rn.join(", "), rtys.join(", "));
    s.push_str("  }\n}\n");
    s
}

/// Lowers one op: the exhaustive dispatch over the op table.
fn lower_op(op: Op, cx: &mut Cx) -> R<Vec<V>> {
    use elementwise::{Bin, Un};
    if let Some(why) = op.no_stablehlo() {
        return Err(format!(
            "{op} has no StableHLO lowering yet ({why}); the fxhlo runtime and interpreter run it"
        ));
    }
    let one = |r: R<V>| r.map(|v| vec![v]);
    match op {
        // ---------------------------------------------------------------- elementwise
        Op::Abs => one(elementwise::unary(cx, Un::Abs)),
        Op::Acos => one(elementwise::unary(cx, Un::Acos)),
        Op::Acosh => one(elementwise::unary(cx, Un::Acosh)),
        Op::Asin => one(elementwise::unary(cx, Un::Asin)),
        Op::Asinh => one(elementwise::unary(cx, Un::Asinh)),
        Op::Atan => one(elementwise::unary(cx, Un::Atan)),
        Op::Atanh => one(elementwise::unary(cx, Un::Atanh)),
        Op::Ceil => one(elementwise::unary(cx, Un::Ceil)),
        Op::Cos => one(elementwise::unary(cx, Un::Cos)),
        Op::Cosh => one(elementwise::unary(cx, Un::Cosh)),
        Op::Erf => one(elementwise::unary(cx, Un::Erf)),
        Op::Exp => one(elementwise::unary(cx, Un::Exp)),
        Op::Expm1 => one(elementwise::unary(cx, Un::Expm1)),
        Op::Floor => one(elementwise::unary(cx, Un::Floor)),
        Op::Log => one(elementwise::unary(cx, Un::Log)),
        Op::Log10 => one(elementwise::unary(cx, Un::Log10)),
        Op::Log1p => one(elementwise::unary(cx, Un::Log1p)),
        Op::Log2 => one(elementwise::unary(cx, Un::Log2)),
        Op::Neg => one(elementwise::unary(cx, Un::Neg)),
        Op::Reciprocal => one(elementwise::unary(cx, Un::Reciprocal)),
        Op::Relu => one(elementwise::unary(cx, Un::Relu)),
        Op::Round => one(elementwise::unary(cx, Un::Round)),
        Op::RoundDecimals => one(elementwise::round_decimals(cx)),
        Op::Rsqrt => one(elementwise::unary(cx, Un::Rsqrt)),
        Op::Sigmoid => one(elementwise::unary(cx, Un::Sigmoid)),
        Op::Sign => one(elementwise::unary(cx, Un::Sign)),
        Op::Sin => one(elementwise::unary(cx, Un::Sin)),
        Op::Sinh => one(elementwise::unary(cx, Un::Sinh)),
        Op::Sqrt => one(elementwise::unary(cx, Un::Sqrt)),
        Op::Tan => one(elementwise::unary(cx, Un::Tan)),
        Op::Tanh => one(elementwise::unary(cx, Un::Tanh)),
        Op::Trunc => one(elementwise::unary(cx, Un::Trunc)),
        Op::BitwiseNot => one(elementwise::unary(cx, Un::BitwiseNot)),
        Op::LogicalNot => one(elementwise::unary(cx, Un::LogicalNot)),
        Op::Isnan => one(elementwise::unary(cx, Un::Isnan)),
        Op::Isinf => one(elementwise::unary(cx, Un::Isinf)),
        Op::AddTensor | Op::AddScalar => one(elementwise::binary(cx, Bin::Add)),
        Op::SubTensor | Op::SubScalar => one(elementwise::binary(cx, Bin::Sub)),
        Op::MulTensor | Op::MulScalar => one(elementwise::binary(cx, Bin::Mul)),
        Op::DivTensor | Op::DivScalar | Op::DivTensorMode | Op::DivScalarMode => {
            one(elementwise::binary(cx, Bin::Div))
        }
        Op::Maximum => one(elementwise::binary(cx, Bin::Max)),
        Op::Minimum => one(elementwise::binary(cx, Bin::Min)),
        Op::PowTensorTensor | Op::PowTensorScalar | Op::PowScalar => {
            one(elementwise::binary(cx, Bin::Pow))
        }
        Op::Atan2 => one(elementwise::binary(cx, Bin::Atan2)),
        Op::FmodTensor | Op::FmodScalar => one(elementwise::binary(cx, Bin::Fmod)),
        Op::RemainderTensor | Op::RemainderScalar => one(elementwise::binary(cx, Bin::Rem)),
        Op::BitwiseAndTensor | Op::BitwiseAndScalar => one(elementwise::binary(cx, Bin::And)),
        Op::BitwiseOrTensor | Op::BitwiseOrScalar => one(elementwise::binary(cx, Bin::Or)),
        Op::BitwiseXorTensor | Op::BitwiseXorScalar => one(elementwise::binary(cx, Bin::Xor)),
        Op::LogicalAnd => one(elementwise::binary(cx, Bin::LAnd)),
        Op::LogicalOr => one(elementwise::binary(cx, Bin::LOr)),
        Op::LogicalXor => one(elementwise::binary(cx, Bin::LXor)),
        Op::EqTensor | Op::EqScalar => one(elementwise::binary(cx, Bin::Cmp("EQ"))),
        Op::NeTensor | Op::NeScalar => one(elementwise::binary(cx, Bin::Cmp("NE"))),
        Op::LtTensor | Op::LtScalar => one(elementwise::binary(cx, Bin::Cmp("LT"))),
        Op::LeTensor | Op::LeScalar => one(elementwise::binary(cx, Bin::Cmp("LE"))),
        Op::GtTensor | Op::GtScalar => one(elementwise::binary(cx, Bin::Cmp("GT"))),
        Op::GeTensor | Op::GeScalar => one(elementwise::binary(cx, Bin::Cmp("GE"))),
        Op::WhereSelf => one(elementwise::where_self(cx)),
        Op::Clamp | Op::ClampTensor => one(elementwise::clamp(cx)),
        Op::Hardtanh => one(elementwise::hardtanh(cx)),
        Op::Gelu => one(elementwise::gelu(cx)),
        Op::Elu => one(elementwise::elu(cx)),
        Op::LeakyRelu => one(elementwise::leaky_relu(cx)),
        Op::ToCopy | Op::Clone | Op::Alias | Op::LiftFreshCopy => {
            one(elementwise::copy_of(cx, "self"))
        }
        Op::Copy => one(elementwise::copy(cx)),
        // ---------------------------------------------------------------- special functions
        Op::Lgamma
        | Op::Digamma
        | Op::Polygamma
        | Op::Erfinv
        | Op::Erfc
        | Op::Exp2
        | Op::I0
        | Op::SpecialI0e
        | Op::SpecialI1
        | Op::SpecialI1e
        | Op::SpecialModifiedBesselI0
        | Op::SpecialModifiedBesselI1
        | Op::SpecialModifiedBesselK0
        | Op::SpecialModifiedBesselK1
        | Op::SpecialScaledModifiedBesselK0
        | Op::SpecialScaledModifiedBesselK1
        | Op::SpecialBesselJ0
        | Op::SpecialBesselJ1
        | Op::SpecialBesselY0
        | Op::SpecialBesselY1
        | Op::SpecialSphericalBesselJ0
        | Op::SpecialNdtri
        | Op::SpecialLogNdtr
        | Op::SpecialErfcx => one(special::unary(cx, op)),
        Op::SpecialZeta | Op::Igamma | Op::Igammac => one(special::binary(cx, op)),
        Op::CopysignTensor => one(special::copysign(cx)),
        Op::Signbit => one(special::signbit(cx)),
        Op::Nextafter => one(special::nextafter(cx)),
        Op::SpecialChebyshevPolynomialT
        | Op::SpecialChebyshevPolynomialU
        | Op::SpecialChebyshevPolynomialV
        | Op::SpecialChebyshevPolynomialW
        | Op::SpecialHermitePolynomialH
        | Op::SpecialHermitePolynomialHe
        | Op::SpecialLaguerrePolynomialL
        | Op::SpecialLegendrePolynomialP
        | Op::SpecialShiftedChebyshevPolynomialT
        | Op::SpecialShiftedChebyshevPolynomialU
        | Op::SpecialShiftedChebyshevPolynomialV
        | Op::SpecialShiftedChebyshevPolynomialW => {
            unreachable!("refused above: {op} is in NO_STABLEHLO")
        }
        // ---------------------------------------------------------------- creation
        Op::Full | Op::FullLike | Op::FillScalar | Op::ScalarTensor => one(creation::full(cx)),
        Op::EmptyMemoryFormat | Op::EmptyStrided | Op::EmptyPermuted => one(creation::empty(cx)),
        Op::TrilIndices => one(creation::tri_indices(cx, true)),
        Op::TriuIndices => one(creation::tri_indices(cx, false)),
        Op::ArangeStartStep => one(creation::arange(cx)),
        Op::Rand => one(creation::rand(cx, false)),
        Op::Randn => one(creation::rand(cx, true)),
        Op::Randperm => one(creation::randperm(cx)),
        Op::NativeDropout => creation::native_dropout(cx),
        // ---------------------------------------------------------------- reductions
        Op::SumDimIntList => one(reduce::sum(cx, false)),
        Op::MeanDim | Op::Mean => one(reduce::sum(cx, true)),
        Op::Prod | Op::ProdDimInt => one(reduce::prod(cx)),
        Op::Amax => one(reduce::extremum(cx, true)),
        Op::Amin => one(reduce::extremum(cx, false)),
        Op::Any | Op::AnyDim | Op::AnyDims => one(reduce::any(cx)),
        Op::Argmax => one(reduce::arg(cx, true)),
        Op::Argmin => one(reduce::arg(cx, false)),
        Op::MaxDim => reduce::values_indices(cx, true),
        Op::MinDim => reduce::values_indices(cx, false),
        Op::VarCorrection | Op::VarDim => one(reduce::var(cx)),
        Op::Cumsum => one(reduce::cumsum(cx)),
        Op::Cumprod => one(reduce::cumprod(cx)),
        Op::Cummax => reduce::cumulative_extremum(cx, true),
        Op::Cummin => reduce::cumulative_extremum(cx, false),
        Op::Histc => one(reduce::histc(cx)),
        // ---------------------------------------------------------------- shapes
        Op::View => one(shape::view(cx)),
        Op::Permute => one(shape::permute(cx)),
        Op::Expand => one(shape::expand(cx)),
        Op::Unsqueeze | Op::SqueezeDim | Op::SqueezeDims => one(shape::view(cx)),
        Op::SliceTensor => one(shape::slice(cx)),
        Op::SelectInt => one(shape::select(cx)),
        Op::Cat => one(shape::cat(cx)),
        Op::SplitWithSizes => shape::split_with_sizes(cx),
        Op::Repeat => one(shape::repeat(cx)),
        Op::ConstantPadNd => one(shape::constant_pad(cx)),
        Op::ReflectionPad1d | Op::ReflectionPad2d | Op::ReflectionPad3d => {
            one(shape::edge_pad(cx, true))
        }
        Op::ReplicationPad2d | Op::ReplicationPad3d => one(shape::edge_pad(cx, false)),
        Op::Diagonal => one(shape::diagonal(cx)),
        Op::AsStrided => one(shape::as_strided(cx)),
        Op::Flip => one(shape::flip(cx)),
        Op::Unfold => one(shape::unfold(cx)),
        Op::SliceScatter => one(shape::slice_scatter(cx)),
        Op::SelectScatter => one(shape::select_scatter(cx)),
        // ---------------------------------------------------------------- matmul
        Op::Mm | Op::Bmm => one(matmul::mm(cx)),
        Op::Addmm => one(matmul::addmm(cx)),
        Op::CdistForward => one(matmul::cdist(cx)),
        Op::PdistForward => one(matmul::pdist(cx)),
        // ---------------------------------------------------------------- convolution
        Op::Convolution => one(conv::convolution(cx)),
        Op::ConvolutionBackward => conv::convolution_backward(cx),
        Op::Col2im => one(conv::col2im(cx)),
        // ---------------------------------------------------------------- pooling, resizing
        Op::MaxPool2dWithIndices | Op::MaxPool3dWithIndices => pool::max_pool(cx),
        Op::MaxPool2dWithIndicesBackward => one(pool::max_pool_backward(cx)),
        Op::AvgPool2d | Op::AvgPool3d => one(pool::avg_pool(cx)),
        Op::AvgPool2dBackward => one(pool::avg_pool_backward(cx)),
        Op::AdaptiveAvgPool2d | Op::AdaptiveAvgPool3d => one(pool::adaptive_avg_pool(cx)),
        Op::AdaptiveAvgPool2dBackward => one(pool::adaptive_avg_pool_backward(cx)),
        Op::UpsampleNearest2dVec => one(pool::upsample(cx, false)),
        // in NO_STABLEHLO: refused above
        Op::LinalgCholeskyEx
        | Op::LinalgDet
        | Op::LinalgEigh
        | Op::LinalgHouseholderProduct
        | Op::LinalgInvEx
        | Op::LinalgLu
        | Op::LinalgLuFactorEx
        | Op::LinalgLuSolve
        | Op::LinalgQr
        | Op::LinalgSlogdet
        | Op::LinalgSolveEx
        | Op::LinalgSvd
        | Op::Geqrf
        | Op::Ormqr
        | Op::LuUnpack
        | Op::LinalgMatrixExp
        | Op::LinalgLdlFactorEx
        | Op::LinalgLdlSolve => Err(format!("{op} has no StableHLO lowering")),
        Op::UpsampleBilinear2dVec => one(pool::upsample(cx, true)),
        Op::GridSampler2d => one(pool::grid_sampler_2d(cx)),
        // ---------------------------------------------------------------- normalization
        Op::Softmax => one(norm::softmax(cx, false)),
        Op::LogSoftmax => one(norm::softmax(cx, true)),
        Op::NativeLayerNorm => norm::layer_norm(cx),
        Op::NativeLayerNormBackward => norm::layer_norm_backward(cx),
        Op::NativeBatchNormLegit | Op::NativeBatchNormLegitNoStats => norm::batch_norm(cx),
        Op::NativeBatchNormLegitNoTraining => norm::batch_norm(cx),
        Op::NativeGroupNorm => norm::group_norm(cx),
        Op::NativeGroupNormBackward => norm::group_norm_backward(cx),
        // ---------------------------------------------------------------- indexing
        Op::Embedding => one(index::embedding(cx)),
        Op::EmbeddingDenseBackward => one(index::embedding_dense_backward(cx)),
        Op::Gather => one(index::gather(cx)),
        Op::IndexSelect => one(index::index_select(cx)),
        Op::IndexTensor => one(index::index_tensor(cx)),
        Op::IndexPut => one(index::index_put(cx)),
        Op::ScatterSrc | Op::ScatterValue => one(index::scatter(cx, "none")),
        Op::ScatterAdd => one(index::scatter(cx, "sum")),
        Op::ScatterReduceTwo => one(index::scatter_reduce(cx)),
        Op::MaskedScatter => one(index::masked_scatter(cx)),
        Op::Sort | Op::SortStable => index::sort(cx),
        Op::SearchsortedTensor => one(index::searchsorted(cx)),
        Op::Topk => index::topk(cx),
    }
}
