//! Composite-pattern recognition: finds groups of nodes that compute one well-known function
//! (softmax, log-softmax, layer norm, GELU, SiLU, attention), either as the single op of the
//! table (`aten._softmax`, `aten.native_layer_norm`, `aten.gelu`, ...) or written out the way
//! torch's decompositions and hand-written models spell them:
//!
//! - softmax: `exp(x - amax(x)) / sum(exp(x - amax(x)))` (the `amax` shift optional, `/ s` or
//!   `* reciprocal(s)`), reductions with `keepdim` over the same dims;
//! - log-softmax: `(x - amax(x)) - log(sum(exp(x - amax(x))))`;
//! - layer norm: `(x - mean(x)) * rsqrt(var + eps)` or `/ sqrt(var + eps)`, with `var` as
//!   `var(x, correction=0)` or `mean((x - mean(x))^2)`, then an optional `* weight` and
//!   `+ bias` of trailing-dim shape;
//! - GELU: `0.5 * x * (1 + erf(x / sqrt 2))` and `0.5 * x * (1 + tanh(sqrt(2/pi) * (x +
//!   0.044715 x^3)))`, any association and order of the products;
//! - SiLU: `x * sigmoid(x)`;
//! - attention: `bmm(softmax(bmm(q, k) * s + mask), v)` through the `view`/`expand`/`clone`
//!   chains torch's decompositions put around batched matmuls, with an optional
//!   `where(fully-masked row, 0, softmax)` guard whose condition is computed from the scores.
//!
//! The result is data ([`Composite`]), not a rewrite: a group is reported only when its
//! interior values have no use outside it, so a later stage (fusion planning, a kernel library)
//! can treat it as one unit. [`CompositePass`] stores the groups on [`Cx::composites`].

use crate::{Changed, Cx, Pass};
use fxhlo_ir::{Arg, Graph, IrError, NodeId, NodeKind, Op, OpKind, Users, ValueRef, ViewKind};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// What a composite computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CompositeKind {
    /// `softmax(x, dim)`.
    Softmax,
    /// `log_softmax(x, dim)`.
    LogSoftmax,
    /// Layer normalization over trailing dims, with optional affine weight and bias.
    LayerNorm,
    /// GELU, exact (erf) or tanh-approximated.
    Gelu,
    /// SiLU (swish): `x * sigmoid(x)`.
    Silu,
    /// Scaled dot-product attention: `softmax(q @ k * s + mask) @ v`.
    Attention,
}

impl CompositeKind {
    /// Short lower-case name, as printed by `fxhlo opt --print-composites`.
    pub fn name(self) -> &'static str {
        match self {
            CompositeKind::Softmax => "softmax",
            CompositeKind::LogSoftmax => "log_softmax",
            CompositeKind::LayerNorm => "layer_norm",
            CompositeKind::Gelu => "gelu",
            CompositeKind::Silu => "silu",
            CompositeKind::Attention => "attention",
        }
    }
}

/// One recognized group of nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Composite {
    /// What the group computes.
    pub kind: CompositeKind,
    /// The group's nodes, in graph order; the output's node is the last.
    pub nodes: Vec<NodeId>,
    /// Values the group reads that it does not compute, in order of first use.
    pub inputs: Vec<ValueRef>,
    /// The value the group computes; no other value of the group is used outside it.
    pub output: ValueRef,
}

/// Finds every composite of `g`, ordered by output node (then kind). Groups may nest: an
/// attention contains its softmax, which is also reported alone.
pub fn find(g: &Graph) -> Vec<Composite> {
    let m = Matcher::new(g);
    let mut found = vec![];
    for i in 0..g.nodes.len() {
        let NodeKind::Op(op) = g.nodes[i].kind else {
            continue;
        };
        let candidates = [
            m.softmax(i, op),
            m.log_softmax(i, op),
            m.layer_norm(i, op),
            m.gelu(i, op),
            m.silu(i, op),
        ];
        for (kind, nodes) in candidates.into_iter().flatten() {
            if let Some(c) = m.finish(kind, nodes, ValueRef::new(i, 0)) {
                found.push(c);
            }
        }
    }
    let softmaxes: BTreeMap<ValueRef, Composite> = found
        .iter()
        .filter(|c| c.kind == CompositeKind::Softmax)
        .map(|c| (c.output, c.clone()))
        .collect();
    for i in 0..g.nodes.len() {
        if let Some(nodes) = m.attention(i, &softmaxes) {
            if let Some(c) = m.finish(CompositeKind::Attention, nodes, ValueRef::new(i, 0)) {
                found.push(c);
            }
        }
    }
    // A group whose output is interior to a larger group of the same kind is part of it
    // (a layer norm without its affine epilogue, a partial product of a GELU).
    let interior: BTreeSet<(CompositeKind, NodeId)> = found
        .iter()
        .flat_map(|c| {
            c.nodes
                .iter()
                .filter(move |&&n| n != c.output.node)
                .map(move |&n| (c.kind, n))
        })
        .collect();
    found.retain(|c| !interior.contains(&(c.kind, c.output.node)));
    found.sort_by_key(|c| (c.output.node, c.kind));
    found
}

/// One line per composite: kind, output name, the nodes' names and the inputs' names.
pub fn print(g: &Graph, composites: &[Composite]) -> String {
    let mut s = String::new();
    for c in composites {
        let nodes: Vec<&str> = c.nodes.iter().map(|&n| g.nodes[n].name.as_str()).collect();
        let inputs: Vec<String> = c
            .inputs
            .iter()
            .map(|&v| format!("%{}", g.value_name(v)))
            .collect();
        let _ = writeln!(
            s,
            "{} %{}: [{}] ({})",
            c.kind.name(),
            g.value_name(c.output),
            nodes.join(", "),
            inputs.join(", ")
        );
    }
    if composites.is_empty() {
        s.push_str("no composites\n");
    }
    s
}

/// The analysis as a pass: stores [`find`]'s result on [`Cx::composites`]; never changes the
/// graph.
pub struct CompositePass;

impl Pass for CompositePass {
    fn name(&self) -> &'static str {
        "composites"
    }

    fn run(&self, g: &mut Graph, cx: &mut Cx) -> Result<Changed, IrError> {
        cx.composites = find(g);
        Ok(false)
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * b.abs().max(1.0)
}

struct Matcher<'g> {
    g: &'g Graph,
    /// Users of each node (any result), graph outputs not included.
    users: Users,
    /// Whether any result of the node is a graph output.
    is_output: Vec<bool>,
}

impl<'g> Matcher<'g> {
    fn new(g: &'g Graph) -> Self {
        let users = g.users();
        let mut is_output = vec![false; g.nodes.len()];
        for o in &g.outputs {
            is_output[o.node] = true;
        }
        Matcher {
            g,
            users,
            is_output,
        }
    }

    /// The node computing `v` if it is result 0 of `op`.
    fn is(&self, v: ValueRef, op: Op) -> Option<NodeId> {
        (v.index == 0 && self.g.nodes[v.node].op() == Some(op)).then_some(v.node)
    }

    fn op_of(&self, v: ValueRef) -> Option<Op> {
        (v.index == 0).then(|| self.g.nodes[v.node].op()).flatten()
    }

    fn t(&self, n: NodeId, name: &str) -> Option<ValueRef> {
        self.g.nodes[n].arg(name)?.as_tensor()
    }

    fn num(&self, n: NodeId, name: &str) -> Option<f64> {
        match self.g.nodes[n].arg(name)? {
            Arg::Int(k) => Some(*k as f64),
            Arg::Float(x) => Some(*x),
            _ => None,
        }
    }

    /// `alpha` of add/sub is 1.
    fn unit_alpha(&self, n: NodeId) -> bool {
        self.g.nodes[n].arg("alpha").is_none() || self.num(n, "alpha") == Some(1.0)
    }

    /// `v = op(x)` for a unary op: `(node, x)`.
    fn un(&self, v: ValueRef, op: Op) -> Option<(NodeId, ValueRef)> {
        let n = self.is(v, op)?;
        Some((n, self.t(n, "self")?))
    }

    /// `v = op(a, b)` for a binary tensor op (alpha 1): `(node, a, b)`.
    fn bin(&self, v: ValueRef, op: Op) -> Option<(NodeId, ValueRef, ValueRef)> {
        let n = self.is(v, op)?;
        if !self.unit_alpha(n) {
            return None;
        }
        Some((n, self.t(n, "self")?, self.t(n, "other")?))
    }

    /// `v = op(x, other=c)` for a scalar op: `(node, x, c)`.
    fn scalar(&self, v: ValueRef, op: Op) -> Option<(NodeId, ValueRef, f64)> {
        let n = self.is(v, op)?;
        if !self.unit_alpha(n) {
            return None;
        }
        let c = if op == Op::PowTensorScalar {
            self.num(n, "exponent")?
        } else {
            self.num(n, "other")?
        };
        Some((n, self.t(n, "self")?, c))
    }

    /// Normalized reduced dims of a keepdim reduction `v = op(x, dim, keepdim=true)`.
    fn reduce(&self, v: ValueRef, op: Op) -> Option<(NodeId, ValueRef, Vec<usize>)> {
        let n = self.is(v, op)?;
        let x = self.t(n, "self")?;
        if !matches!(self.g.nodes[n].arg("keepdim"), Some(Arg::Bool(true))) {
            return None;
        }
        let rank = self.g.ty(x).shape.len();
        let dims = match self.g.nodes[n].arg("dim")? {
            Arg::Ints(d) if !d.is_empty() => d.clone(),
            Arg::Int(d) => vec![*d],
            _ => (0..rank as i64).collect(),
        };
        let mut dims = dims
            .iter()
            .map(|&d| fxhlo_ir::infer::norm_dim(d, rank).ok())
            .collect::<Option<Vec<usize>>>()?;
        dims.sort_unstable();
        dims.dedup();
        Some((n, x, dims))
    }

    /// `x - amax(x, dims)`: `(nodes, x, dims)`.
    fn shifted(&self, v: ValueRef) -> Option<(Vec<NodeId>, ValueRef, Vec<usize>)> {
        let (sub, x, mx) = self.bin(v, Op::SubTensor)?;
        let (amax, x2, dims) = self.reduce(mx, Op::Amax)?;
        (x == x2).then(|| (vec![amax, sub], x, dims))
    }

    fn softmax(&self, i: NodeId, op: Op) -> Option<(CompositeKind, Vec<NodeId>)> {
        let k = CompositeKind::Softmax;
        match op {
            Op::Softmax => Some((k, vec![i])),
            Op::DivTensor | Op::MulTensor => {
                let v = ValueRef::new(i, 0);
                let (e, s, mut nodes) = if op == Op::DivTensor {
                    let (_, e, s) = self.bin(v, Op::DivTensor)?;
                    (e, s, vec![i])
                } else {
                    let (_, a, b) = self.bin(v, Op::MulTensor)?;
                    let (r, s) = self
                        .un(b, Op::Reciprocal)
                        .map(|r| (a, r))
                        .or_else(|| self.un(a, Op::Reciprocal).map(|r| (b, r)))?;
                    (r, s.1, vec![s.0, i])
                };
                let (exp, sh) = self.un(e, Op::Exp)?;
                let (sum, e2, dims) = self.reduce(s, Op::SumDimIntList)?;
                if e2 != e {
                    return None;
                }
                nodes.extend([exp, sum]);
                if let Some((shift, _, d)) = self.shifted(sh) {
                    if d != dims {
                        return None;
                    }
                    nodes.extend(shift);
                }
                Some((k, nodes))
            }
            _ => None,
        }
    }

    fn log_softmax(&self, i: NodeId, op: Op) -> Option<(CompositeKind, Vec<NodeId>)> {
        let k = CompositeKind::LogSoftmax;
        match op {
            Op::LogSoftmax => Some((k, vec![i])),
            Op::SubTensor => {
                let (_, sh, l) = self.bin(ValueRef::new(i, 0), Op::SubTensor)?;
                let (log, s) = self.un(l, Op::Log)?;
                let (sum, e, dims) = self.reduce(s, Op::SumDimIntList)?;
                let (exp, sh2) = self.un(e, Op::Exp)?;
                if sh2 != sh {
                    return None;
                }
                let mut nodes = vec![i, log, sum, exp];
                if let Some((shift, _, d)) = self.shifted(sh) {
                    if d != dims {
                        return None;
                    }
                    nodes.extend(shift);
                }
                Some((k, nodes))
            }
            _ => None,
        }
    }

    /// `x - mean(x, dims)`: `(nodes, x, dims)`.
    fn centered(&self, v: ValueRef) -> Option<(Vec<NodeId>, ValueRef, Vec<usize>)> {
        let (sub, x, mean) = self.bin(v, Op::SubTensor)?;
        let (mn, x2, dims) = self.reduce(mean, Op::MeanDim)?;
        (x == x2).then(|| (vec![mn, sub], x, dims))
    }

    /// The biased variance of `x` over `dims`, computed as `var(x, correction=0)` or as the
    /// mean of the square of `centered` (`d * d` or `d ^ 2`).
    fn variance(
        &self,
        v: ValueRef,
        x: ValueRef,
        d: ValueRef,
        dims: &[usize],
    ) -> Option<Vec<NodeId>> {
        if let Some((n, x2, dv)) = self
            .reduce(v, Op::VarCorrection)
            .or_else(|| self.reduce(v, Op::VarDim))
        {
            let biased = match self.g.nodes[n].op()? {
                Op::VarCorrection => self.num(n, "correction") == Some(0.0),
                _ => matches!(self.g.nodes[n].arg("unbiased"), Some(Arg::Bool(false))),
            };
            return (biased && x2 == x && dv == dims).then(|| vec![n]);
        }
        let (mn, sq, dv) = self.reduce(v, Op::MeanDim)?;
        if dv != dims {
            return None;
        }
        if let Some((p, d2, e)) = self.scalar(sq, Op::PowTensorScalar) {
            return (d2 == d && e == 2.0).then(|| vec![mn, p]);
        }
        let (p, a, b) = self.bin(sq, Op::MulTensor)?;
        (a == d && b == d).then(|| vec![mn, p])
    }

    fn layer_norm(&self, i: NodeId, op: Op) -> Option<(CompositeKind, Vec<NodeId>)> {
        let k = CompositeKind::LayerNorm;
        if op == Op::NativeLayerNorm {
            return Some((k, vec![i]));
        }
        // The normalization itself, then an optional affine epilogue when `i` is its end.
        let core = |v: ValueRef| -> Option<(Vec<NodeId>, usize)> {
            let n = v.node;
            let (d, den, rsqrt) = match self.op_of(v)? {
                Op::MulTensor => {
                    let (_, a, b) = self.bin(v, Op::MulTensor)?;
                    if self.is(b, Op::Rsqrt).is_some() {
                        (a, b, true)
                    } else {
                        (b, a, true)
                    }
                }
                Op::DivTensor => {
                    let (_, a, b) = self.bin(v, Op::DivTensor)?;
                    (a, b, false)
                }
                _ => return None,
            };
            let (root, s) = self.un(den, if rsqrt { Op::Rsqrt } else { Op::Sqrt })?;
            let (add, var, _eps) = self.scalar(s, Op::AddScalar)?;
            let (mut nodes, x, dims) = self.centered(d)?;
            let rank = self.g.ty(x).shape.len();
            if dims.iter().copied().ne(rank - dims.len()..rank) {
                return None;
            }
            nodes.extend(self.variance(var, x, d, &dims)?);
            nodes.extend([root, add, n]);
            Some((nodes, dims.len()))
        };
        let v = ValueRef::new(i, 0);
        // `norm * w + b`, `norm * w`, `norm + b`: w and b broadcast over the normalized dims.
        let affine = |t: ValueRef, ndims: usize| self.g.ty(t).shape.len() <= ndims;
        if let Some((nodes, _)) = core(v) {
            return Some((k, nodes));
        }
        // Affine forms: the end `i` is `add(mul(norm, w), b)` or `mul(norm, w)` or `add(norm, b)`.
        let scaled = |v: ValueRef| -> Option<(Vec<NodeId>, usize)> {
            let (n, a, b) = self.bin(v, Op::MulTensor)?;
            for (x, w) in [(a, b), (b, a)] {
                if let Some((mut nodes, nd)) = core(x) {
                    if affine(w, nd) {
                        nodes.push(n);
                        return Some((nodes, nd));
                    }
                }
            }
            None
        };
        if op == Op::MulTensor {
            return scaled(v).map(|(n, _)| (k, n));
        }
        if op == Op::AddTensor {
            let (n, a, b) = self.bin(v, Op::AddTensor)?;
            for (x, bias) in [(a, b), (b, a)] {
                let inner = scaled(x)
                    .or_else(|| core(x))
                    .filter(|(_, nd)| affine(bias, *nd));
                if let Some((mut nodes, _)) = inner {
                    nodes.push(n);
                    return Some((k, nodes));
                }
            }
        }
        None
    }

    /// Flattens a product of `mul.Tensor`/`mul.Scalar`/`div.Scalar` nodes rooted at `v` into
    /// its constant factor and tensor leaves; interior products must be used only here.
    fn product(
        &self,
        v: ValueRef,
        root: bool,
        nodes: &mut Vec<NodeId>,
        leaves: &mut Vec<ValueRef>,
    ) -> f64 {
        let single = root || self.users[v.node].len() == 1 && !self.is_output[v.node];
        if single {
            if let Some((n, a, b)) = self.bin(v, Op::MulTensor) {
                nodes.push(n);
                return self.product(a, false, nodes, leaves)
                    * self.product(b, false, nodes, leaves);
            }
            if let Some((n, a, c)) = self.scalar(v, Op::MulScalar) {
                nodes.push(n);
                return c * self.product(a, false, nodes, leaves);
            }
            if let Some((n, a, c)) = self.scalar(v, Op::DivScalar) {
                if c != 0.0 {
                    nodes.push(n);
                    return self.product(a, false, nodes, leaves) / c;
                }
            }
        }
        leaves.push(v);
        1.0
    }

    /// `op(c * x)` (also `op(x / c)`) for a unary `op`: `(nodes, x, c)`.
    fn unary_of_scaled(&self, v: ValueRef, op: Op) -> Option<(Vec<NodeId>, ValueRef, f64)> {
        let (u, y) = self.un(v, op)?;
        let mut nodes = vec![u];
        let mut leaves = vec![];
        let c = self.product(y, true, &mut nodes, &mut leaves);
        (leaves.len() == 1).then(|| (nodes, leaves[0], c))
    }

    fn gelu(&self, i: NodeId, op: Op) -> Option<(CompositeKind, Vec<NodeId>)> {
        let k = CompositeKind::Gelu;
        match op {
            Op::Gelu => return Some((k, vec![i])),
            Op::MulTensor | Op::MulScalar => {}
            _ => return None,
        }
        let mut nodes = vec![];
        let mut leaves = vec![];
        let c = self.product(ValueRef::new(i, 0), true, &mut nodes, &mut leaves);
        if !close(c, 0.5) || leaves.len() != 2 {
            return None;
        }
        for (x, t) in [(leaves[0], leaves[1]), (leaves[1], leaves[0])] {
            // t = 1 + f(x)
            let Some((add, f, one)) = self.scalar(t, Op::AddScalar) else {
                continue;
            };
            if one != 1.0 {
                continue;
            }
            if let Some((erf_nodes, x2, s)) = self.unary_of_scaled(f, Op::Erf) {
                if x2 == x && close(s, std::f64::consts::FRAC_1_SQRT_2) {
                    nodes.push(add);
                    nodes.extend(erf_nodes);
                    return Some((k, nodes));
                }
            }
            if let Some((tanh_nodes, inner, s)) = self.unary_of_scaled(f, Op::Tanh) {
                // inner = x + 0.044715 * x^3
                let Some((a, p, q)) = self.bin(inner, Op::AddTensor) else {
                    continue;
                };
                let cube = if p == x { q } else { p };
                if p != x && q != x {
                    continue;
                }
                let mut cube_nodes = vec![];
                let mut cube_leaves = vec![];
                let cc = self.product(cube, false, &mut cube_nodes, &mut cube_leaves);
                let cubed = match cube_leaves[..] {
                    [l] => self
                        .scalar(l, Op::PowTensorScalar)
                        .filter(|&(_, b, e)| b == x && e == 3.0)
                        .map(|(n, _, _)| vec![n]),
                    [a1, a2, a3] if a1 == x && a2 == x && a3 == x => Some(vec![]),
                    _ => None,
                };
                let sqrt_2_pi = (2.0 / std::f64::consts::PI).sqrt();
                if let Some(cn) = cubed {
                    if close(cc, 0.044715) && close(s, sqrt_2_pi) {
                        nodes.push(add);
                        nodes.extend(tanh_nodes);
                        nodes.push(a);
                        nodes.extend(cube_nodes);
                        nodes.extend(cn);
                        return Some((k, nodes));
                    }
                }
            }
        }
        None
    }

    fn silu(&self, i: NodeId, op: Op) -> Option<(CompositeKind, Vec<NodeId>)> {
        if op != Op::MulTensor {
            return None;
        }
        let (_, a, b) = self.bin(ValueRef::new(i, 0), Op::MulTensor)?;
        for (x, s) in [(a, b), (b, a)] {
            if let Some((sig, x2)) = self.un(s, Op::Sigmoid) {
                if x2 == x {
                    return Some((CompositeKind::Silu, vec![sig, i]));
                }
            }
        }
        None
    }

    /// Walks back from `v` through view-like ops, collecting their nodes.
    fn through_views(&self, mut v: ValueRef, nodes: &mut Vec<NodeId>) -> ValueRef {
        while let Some(op) = self.op_of(v) {
            // views that keep the logical tensor's element order (or broadcast it), and
            // copies: attention looks through them between its matmuls and its softmax
            if !matches!(
                op.kind(),
                OpKind::View(ViewKind::Reshape | ViewKind::Broadcast | ViewKind::Copy)
            ) {
                break;
            }
            let Some(x) = self.t(v.node, "self") else {
                break;
            };
            nodes.push(v.node);
            v = x;
        }
        v
    }

    /// From the softmax input back to the scores matmul, through views, scalar scales and
    /// additive masks: the nodes on the way, the matmul included.
    fn scores(&self, v: ValueRef, depth: usize) -> Option<Vec<NodeId>> {
        if depth > 12 {
            return None;
        }
        let mut nodes = vec![];
        let v = self.through_views(v, &mut nodes);
        let op = self.op_of(v)?;
        let rest = match op {
            Op::Bmm | Op::Mm => vec![],
            Op::MulScalar | Op::DivScalar => self.scores(self.t(v.node, "self")?, depth + 1)?,
            Op::AddTensor | Op::WhereSelf => {
                let names: &[&str] = if op == Op::AddTensor {
                    if !self.unit_alpha(v.node) {
                        return None;
                    }
                    &["self", "other"]
                } else {
                    &["self", "other"]
                };
                names
                    .iter()
                    .find_map(|n| self.scores(self.t(v.node, n)?, depth + 1))?
            }
            _ => return None,
        };
        nodes.push(v.node);
        nodes.extend(rest);
        Some(nodes)
    }

    fn attention(
        &self,
        i: NodeId,
        softmaxes: &BTreeMap<ValueRef, Composite>,
    ) -> Option<Vec<NodeId>> {
        if self.g.nodes[i].op() != Some(Op::Bmm) {
            return None;
        }
        let mut nodes = vec![i];
        let p = self.through_views(self.t(i, "self")?, &mut nodes);
        // An optional `where(cond, zeros, softmax)` guard (fully masked rows give 0).
        let p = if let Some(w) = self.is(p, Op::WhereSelf) {
            let a = self.t(w, "self")?;
            let b = self.t(w, "other")?;
            nodes.push(w);
            if softmaxes.contains_key(&b) {
                b
            } else {
                a
            }
        } else {
            p
        };
        let sm = softmaxes.get(&p)?;
        nodes.extend(&sm.nodes);
        nodes.extend(self.scores(*sm.inputs.first()?, 0)?);
        Some(nodes)
    }

    /// Whether `v` can be computed from values of `set` alone (a node with at least one
    /// tensor operand, every operand in `set` or itself absorbable); collects the nodes.
    fn absorbable(
        &self,
        v: ValueRef,
        set: &BTreeSet<NodeId>,
        out: &mut BTreeSet<NodeId>,
        depth: usize,
    ) -> bool {
        if set.contains(&v.node) || out.contains(&v.node) {
            return true;
        }
        if depth > 8 || !matches!(self.g.nodes[v.node].kind, NodeKind::Op(_)) {
            return false;
        }
        let operands: Vec<ValueRef> = self.g.nodes[v.node]
            .args
            .iter()
            .flat_map(|a| a.values())
            .collect();
        if operands.is_empty() {
            return false;
        }
        let mut mine = out.clone();
        for x in operands {
            if !self.absorbable(x, set, &mut mine, depth + 1) {
                return false;
            }
        }
        mine.insert(v.node);
        *out = mine;
        true
    }

    /// Validates a candidate: absorbs external values computed only from the group's own
    /// values, checks that only the output leaves the group, and collects the inputs.
    fn finish(
        &self,
        kind: CompositeKind,
        nodes: Vec<NodeId>,
        output: ValueRef,
    ) -> Option<Composite> {
        let mut set: BTreeSet<NodeId> = nodes.into_iter().collect();
        loop {
            let mut extra = BTreeSet::new();
            for &n in &set {
                for a in &self.g.nodes[n].args {
                    for v in a.values() {
                        if !set.contains(&v.node) {
                            self.absorbable(v, &set, &mut extra, 0);
                        }
                    }
                }
            }
            if extra.is_empty() {
                break;
            }
            set.extend(extra);
        }
        if set.iter().any(|&n| n > output.node) {
            return None;
        }
        for &n in &set {
            if n == output.node {
                continue;
            }
            if self.is_output[n] || self.users[n].iter().any(|u| !set.contains(u)) {
                return None;
            }
        }
        let mut inputs = vec![];
        for &n in &set {
            for a in &self.g.nodes[n].args {
                for v in a.values() {
                    if !set.contains(&v.node) && !inputs.contains(&v) {
                        inputs.push(v);
                    }
                }
            }
        }
        Some(Composite {
            kind,
            nodes: set.into_iter().collect(),
            inputs,
            output,
        })
    }
}
