//! Builds a fused elementwise [`Expr`] from graph nodes.
//!
//! The walk starts at the roots with the identity access and goes down through the producers
//! that are kernel members. Each value is reached with an *access*: for every dimension of the
//! value, its index as an affine function of the iteration indices. View ops transform the
//! access (permute swaps rows, slice scales and shifts, expand and broadcasting zero rows,
//! select fixes a row, reshape regroups rows), so they cost nothing at run time; every value
//! that is not computed by a member becomes a leaf reading its operand slot at the flattened
//! access. A reshape that splits a dimension whose index is not a digit of the iteration space
//! makes the walk split the iteration dimension and start over (bounded), so `view` of a
//! `permute` and similar chains stay affine.

// Index loops over access matrices read better than iterator chains here.
#![allow(clippy::needless_range_loop)]

use super::Slots;
use fxhlo_ir::{Arg, DType, Graph, Node, NodeId, NodeKind, Op, ValueRef};
use fxhlo_runtime::fast::expr::{
    apply_un, BinOp, Expr, ExprBuilder, Leaf, LeafKind, LeafSrc, UnOp, Val,
};
use fxhlo_runtime::fast::lowp;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Whether the fast runtime keeps values of `d` in `f32` buffers: f32, and bf16 and f16 stored
/// widened (`fxhlo_runtime::fast::lowp`), which the engine loads as f32, computes in f32 and
/// rounds when it stores them.
pub fn is_f32_stored(d: DType) -> bool {
    d == DType::F32 || lowp::is_lowp(d)
}

/// The instruction that rounds an f32 value to `d`, for bf16 and f16.
fn lowp_round(d: DType) -> Option<UnOp> {
    match d {
        DType::BF16 => Some(UnOp::ToBf16),
        DType::F16 => Some(UnOp::ToF16),
        _ => None,
    }
}

/// Expresses each of `roots` (values of f32, bf16, f16 or bool type whose shape equals `shape`; a bool
/// root is computed as `0`/`1` values, which the runtime stores as bools) as an Expr over
/// iteration space `shape`. The walk follows only producers that are nodes in `members`; every
/// other value reached is a leaf loaded from the operand slot `slots.slot(v)` (a contiguous
/// row-major buffer of v's own type). View ops on the way are folded into each leaf's affine
/// access; creation ops become constants or iotas. Returns Err naming the node and op for
/// anything not supported.
pub fn build(
    g: &Graph,
    members: &BTreeSet<NodeId>,
    roots: &[ValueRef],
    shape: &[usize],
    slots: &mut Slots,
) -> Result<Expr, String> {
    build_impl(
        g,
        members,
        roots,
        shape,
        None,
        slots,
        &BTreeMap::new(),
        true,
    )
}

/// [`build`] where each value in `subst` is read from the given operand slot (a contiguous
/// row-major buffer of the value's type) instead of being computed or assigned a slot from
/// `slots`, even when its producer is a member. Used by kernels that keep some values in
/// scratch buffers (a reduction's result, its input rows).
pub fn build_with(
    g: &Graph,
    members: &BTreeSet<NodeId>,
    roots: &[ValueRef],
    shape: &[usize],
    slots: &mut Slots,
    subst: &BTreeMap<ValueRef, u32>,
) -> Result<Expr, String> {
    build_impl(g, members, roots, shape, None, slots, subst, true)
}

/// [`build_with`] for one root iterated in permuted order: iteration dimension `k` is the
/// root's dimension `perm[k]` (so a reduction over leading dimensions can see its rows
/// innermost).
pub fn build_permuted(
    g: &Graph,
    members: &BTreeSet<NodeId>,
    root: ValueRef,
    perm: &[usize],
    slots: &mut Slots,
    subst: &BTreeMap<ValueRef, u32>,
) -> Result<Expr, String> {
    let s = static_shape(g, root)?;
    if perm.len() != s.len() || perm.iter().any(|&p| p >= s.len()) {
        return Err(format!(
            "{}: bad permutation {perm:?}",
            describe(g, root.node)
        ));
    }
    let shape: Vec<usize> = perm.iter().map(|&p| s[p]).collect();
    build_impl(g, members, &[root], &shape, Some(perm), slots, subst, true)
}

/// `bool_roots`: the caller reads the outputs as `0`/`1` values (a reduction's prologue, or an
/// epilogue it converts to bool itself), so bool roots are allowed besides f32 ones.
#[allow(clippy::too_many_arguments)]
fn build_impl(
    g: &Graph,
    members: &BTreeSet<NodeId>,
    roots: &[ValueRef],
    shape: &[usize],
    perm: Option<&[usize]>,
    slots: &mut Slots,
    subst: &BTreeMap<ValueRef, u32>,
    bool_roots: bool,
) -> Result<Expr, String> {
    let ident: Vec<usize> = (0..shape.len()).collect();
    let perm = perm.unwrap_or(&ident);
    for &r in roots {
        let t = g.ty(r);
        if !(is_f32_stored(t.dtype) || bool_roots && t.dtype == DType::Bool) {
            return Err(format!(
                "{}: the result is {}, the elementwise engine writes f32, bf16 and f16",
                describe(g, r.node),
                t.dtype
            ));
        }
        let rs = static_shape(g, r)?;
        if rs.len() != perm.len() || perm.iter().map(|&p| rs[p]).collect::<Vec<_>>() != shape {
            return Err(format!(
                "{}: the result has shape {:?}, the kernel iterates over {shape:?}",
                describe(g, r.node),
                static_shape(g, r)?
            ));
        }
    }
    // Iteration dims: each dimension of `shape` as a list of factors (outermost first).
    let mut split: Vec<Vec<usize>> = shape.iter().map(|&n| vec![n]).collect();
    for _attempt in 0..32 {
        let dims: Vec<usize> = split.iter().flatten().copied().collect();
        let mut w = Walk {
            g,
            members,
            subst,
            slots: slots.clone(),
            b: ExprBuilder::with_dims(shape, &dims),
            memo: HashMap::new(),
            nd: dims.len(),
            dims: dims.clone(),
            depth: 0,
        };
        // Root access: index k = Σ sub-dim index × stride inside dimension k.
        let mut acc = Access {
            off: vec![0; shape.len()],
            coef: vec![vec![0; dims.len()]; shape.len()],
        };
        let mut d = 0;
        for (k, f) in split.iter().enumerate() {
            let mut s = 1i64;
            for j in (0..f.len()).rev() {
                acc.coef[perm[k]][d + j] = s;
                s *= f[j] as i64;
            }
            d += f.len();
        }
        let mut outs = vec![];
        let mut need = None;
        for &r in roots {
            match w.value_deep(r, &acc) {
                Ok(v) => outs.push(v),
                Err(Fail::Split { dim, factor }) => {
                    need = Some((dim, factor));
                    break;
                }
                Err(Fail::Msg(m)) => return Err(m),
                Err(Fail::Deep(..)) => unreachable!("value_deep resolves every hand-back"),
            }
        }
        match need {
            None => {
                *slots = w.slots;
                return Ok(w.b.finish(&outs));
            }
            Some((dim, factor)) => {
                // Find iteration dim `dim` in `split` and split it by `factor` (inner part).
                let mut d = 0;
                for f in split.iter_mut() {
                    if dim < d + f.len() {
                        let n = f[dim - d];
                        f[dim - d] = n / factor;
                        f.insert(dim - d + 1, factor);
                        break;
                    }
                    d += f.len();
                }
            }
        }
    }
    Err(format!(
        "{}: the reshapes on the way do not fold into an affine access",
        describe(g, roots.first().map_or(0, |r| r.node))
    ))
}

/// `node 7 'add' (aten.add.Tensor)`.
pub fn describe(g: &Graph, n: NodeId) -> String {
    let node = &g.nodes[n];
    format!(
        "node {n} '{}' ({})",
        fxhlo_ir::quote_name(&node.name),
        fxhlo_ir::quote_name(&node.op_name())
    )
}

fn static_shape(g: &Graph, v: ValueRef) -> Result<Vec<usize>, String> {
    g.ty(v)
        .shape
        .iter()
        .map(|d| d.as_static().and_then(|n| usize::try_from(n).ok()))
        .collect::<Option<Vec<usize>>>()
        .ok_or_else(|| format!("{}: symbolic shape", describe(g, v.node)))
}

fn row_major(shape: &[usize]) -> Vec<i64> {
    let mut s = vec![0i64; shape.len()];
    let mut acc = 1i64;
    for k in (0..shape.len()).rev() {
        s[k] = acc;
        acc = acc.saturating_mul(shape[k] as i64);
    }
    s
}

/// For each dimension of a value, its index as `off + Σ coef[d] * i[d]` over iteration dims.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Access {
    off: Vec<i64>,
    coef: Vec<Vec<i64>>,
}

impl Access {
    fn zero_row(nd: usize) -> (i64, Vec<i64>) {
        (0, vec![0; nd])
    }

    /// The access of an operand of `shape` broadcast (numpy style) to this value's dims
    /// `out_shape`.
    fn broadcast(&self, out_shape: &[usize], shape: &[usize], nd: usize) -> Access {
        let lead = out_shape.len() - shape.len();
        let mut a = Access {
            off: vec![],
            coef: vec![],
        };
        for (j, &n) in shape.iter().enumerate() {
            if n == 1 && out_shape[lead + j] != 1 {
                let (o, c) = Access::zero_row(nd);
                a.off.push(o);
                a.coef.push(c);
            } else {
                a.off.push(self.off[lead + j]);
                a.coef.push(self.coef[lead + j].clone());
            }
        }
        a
    }

    /// The flat address in a row-major buffer of `shape`.
    fn flatten(&self, shape: &[usize], nd: usize) -> (i64, Vec<i64>) {
        let rs = row_major(shape);
        let mut off = 0i64;
        let mut st = vec![0i64; nd];
        for k in 0..shape.len() {
            off += self.off[k] * rs[k];
            for d in 0..nd {
                st[d] += self.coef[k][d] * rs[k];
            }
        }
        (off, st)
    }
}

enum Fail {
    /// Split iteration dimension `dim` into `(n / factor, factor)` and start over.
    Split {
        dim: usize,
        factor: usize,
    },
    Msg(String),
    /// The walk reached [`MAX_DEPTH`] nested nodes: build this value first (its result is
    /// memoized), then resume. Keeps the native stack bounded on long chains.
    Deep(ValueRef, Access, bool),
}

/// How many nodes the walk nests on the native stack before it hands the deepest value back
/// to [`Walk::value_deep`]'s explicit stack (a 10,000-node chain needs 79 hand-backs). A level
/// takes about 32 KB of stack in a debug build (`Walk::node`'s frame), so 256 levels were the
/// whole 8 MB main-thread stack.
const MAX_DEPTH: usize = 128;

impl From<String> for Fail {
    fn from(m: String) -> Fail {
        Fail::Msg(m)
    }
}

type R<T> = Result<T, Fail>;

struct Walk<'a> {
    g: &'a Graph,
    members: &'a BTreeSet<NodeId>,
    subst: &'a BTreeMap<ValueRef, u32>,
    slots: Slots,
    b: ExprBuilder,
    memo: HashMap<(ValueRef, Access), Val>,
    nd: usize,
    dims: Vec<usize>,
    /// Nodes being built on the native stack now.
    depth: usize,
}

fn scalar_of(a: &Arg) -> Option<f64> {
    match a {
        Arg::Int(i) => Some(*i as f64),
        Arg::Float(f) => Some(*f),
        Arg::Bool(b) => Some(if *b { 1.0 } else { 0.0 }),
        _ => None,
    }
}

impl<'a> Walk<'a> {
    fn err(&self, n: NodeId, msg: impl std::fmt::Display) -> Fail {
        Fail::Msg(format!("{}: {msg}", describe(self.g, n)))
    }

    fn shape(&self, v: ValueRef) -> R<Vec<usize>> {
        Ok(static_shape(self.g, v)?)
    }

    fn leaf_kind(&self, v: ValueRef, allow_i64: bool) -> R<LeafKind> {
        match self.g.ty(v).dtype {
            d if is_f32_stored(d) => Ok(LeafKind::F32),
            DType::Bool => Ok(LeafKind::Bool),
            DType::I64 if allow_i64 => Ok(LeafKind::I64),
            d => Err(self.err(
                v.node,
                format!(
                    "value '{}' is {d}; the elementwise engine reads f32, bf16, f16 and bool",
                    self.g.value_name(v)
                ),
            )),
        }
    }

    fn leaf(&mut self, v: ValueRef, acc: &Access, allow_i64: bool) -> R<Val> {
        let kind = self.leaf_kind(v, allow_i64)?;
        let shape = self.shape(v)?;
        let slot = match self.subst.get(&v) {
            Some(&s) => s,
            None => self.slots.slot(v),
        };
        let (offset, strides) = acc.flatten(&shape, self.nd);
        Ok(self.b.leaf(Leaf {
            src: LeafSrc::Slot { slot, kind },
            offset,
            strides,
        }))
    }

    fn computed(&self, v: ValueRef) -> bool {
        !self.subst.contains_key(&v)
            && self.members.contains(&v.node)
            && matches!(self.g.nodes[v.node].kind, NodeKind::Op(_))
    }

    fn value(&mut self, v: ValueRef, acc: &Access) -> R<Val> {
        self.value_as(v, acc, false)
    }

    fn value_as(&mut self, v: ValueRef, acc: &Access, allow_i64: bool) -> R<Val> {
        let key = (v, acc.clone());
        if let Some(&x) = self.memo.get(&key) {
            return Ok(x);
        }
        let x = if self.computed(v) {
            if self.depth >= MAX_DEPTH {
                return Err(Fail::Deep(v, acc.clone(), allow_i64));
            }
            self.depth += 1;
            let x = self.node(v, acc, allow_i64);
            self.depth -= 1;
            x?
        } else {
            self.leaf(v, acc, allow_i64)?
        };
        self.memo.insert(key, x);
        Ok(x)
    }

    /// [`Walk::value`] without recursion past [`MAX_DEPTH`]: a value the walk hands back as
    /// too deep goes on an explicit stack and is built first, then the one that needed it is
    /// tried again (it finds the deep value memoized). The work stays linear in the chain's
    /// length: each retry walks at most `MAX_DEPTH` nodes that were not memoized.
    fn value_deep(&mut self, v: ValueRef, acc: &Access) -> R<Val> {
        let mut stack: Vec<(ValueRef, Access, bool)> = vec![(v, acc.clone(), false)];
        while let Some((tv, tacc, ti)) = stack.last().cloned() {
            match self.value_as(tv, &tacc, ti) {
                Ok(x) => {
                    stack.pop();
                    if stack.is_empty() {
                        return Ok(x);
                    }
                }
                Err(Fail::Deep(dv, dacc, di)) => stack.push((dv, dacc, di)),
                Err(e) => return Err(e),
            }
        }
        unreachable!("the loop returns when the stack empties")
    }

    fn tensor_arg(&self, n: &Node, name: &str) -> Option<ValueRef> {
        n.arg(name).and_then(Arg::as_tensor)
    }

    /// Operand `name` of node `i` broadcast to the node's result: a tensor or a scalar.
    fn operand(&mut self, i: NodeId, name: &str, acc: &Access) -> R<Val> {
        let n = &self.g.nodes[i];
        let a = n
            .arg(name)
            .ok_or_else(|| self.err(i, format!("no argument `{name}`")))?;
        if let Some(c) = scalar_of(a) {
            return Ok(self.b.constant(c as f32));
        }
        let Some(t) = a.as_tensor() else {
            return Err(self.err(i, format!("argument `{name}` is {}", a.kind_name())));
        };
        let out = self.shape(ValueRef::new(i, 0))?;
        let shape = self.shape(t)?;
        if shape.len() > out.len() {
            return Err(self.err(
                i,
                format!("operand `{name}` has a higher rank than the result"),
            ));
        }
        let sub = acc.broadcast(&out, &shape, self.nd);
        self.value(t, &sub)
    }

    fn scalar(&self, i: NodeId, name: &str) -> R<f64> {
        self.g.nodes[i]
            .arg(name)
            .and_then(scalar_of)
            .ok_or_else(|| self.err(i, format!("argument `{name}` is not a number")))
    }

    fn int(&self, i: NodeId, name: &str) -> R<i64> {
        match self.g.nodes[i].arg(name) {
            Some(Arg::Int(x)) => Ok(*x),
            _ => Err(self.err(i, format!("argument `{name}` is not an int"))),
        }
    }

    fn opt_int(&self, i: NodeId, name: &str) -> R<Option<i64>> {
        match self.g.nodes[i].arg(name) {
            Some(Arg::Int(x)) => Ok(Some(*x)),
            Some(Arg::None) | None => Ok(None),
            _ => Err(self.err(i, format!("argument `{name}` is not an int"))),
        }
    }

    fn ints(&self, i: NodeId, name: &str) -> R<Vec<i64>> {
        match self.g.nodes[i].arg(name) {
            Some(Arg::Ints(x)) => Ok(x.clone()),
            Some(Arg::Int(x)) => Ok(vec![*x]),
            _ => Err(self.err(i, format!("argument `{name}` is not an int list"))),
        }
    }

    fn norm_dim(&self, i: NodeId, d: i64, rank: usize) -> R<usize> {
        fxhlo_ir::infer::norm_dim(d, rank).map_err(|e| self.err(i, e))
    }

    fn node(&mut self, v: ValueRef, acc: &Access, allow_i64: bool) -> R<Val> {
        let i = v.node;
        let g = self.g;
        let n = &g.nodes[i];
        let NodeKind::Op(op) = n.kind else {
            return Err(self.err(i, "not an op"));
        };
        let out_dtype = self.g.ty(v).dtype;
        if v.index != 0 && op != Op::SplitWithSizes {
            return Err(self.err(i, format!("result {} is not elementwise", v.index)));
        }
        let int_ok = allow_i64 && op == Op::ArangeStartStep;
        if !is_f32_stored(out_dtype) && out_dtype != DType::Bool && !int_ok {
            return Err(self.err(
                i,
                format!(
                    "the result is {out_dtype}; the elementwise engine computes f32 (also for \
                     bf16 and f16 results) and bool"
                ),
            ));
        }
        if int_ok && out_dtype != DType::I64 && lowp_round(out_dtype).is_some() {
            return Err(self.err(i, format!("an arange of {out_dtype}")));
        }
        let f32_out = is_f32_stored(out_dtype);
        let need_f32 = |w: &Walk| -> R<()> {
            if f32_out {
                Ok(())
            } else {
                Err(w.err(
                    i,
                    format!("arithmetic with a {out_dtype} result is not supported"),
                ))
            }
        };
        use Op::*;
        let un = |w: &mut Walk, u: UnOp| -> R<Val> {
            let x = w.operand(i, "self", acc)?;
            Ok(w.b.un(u, x))
        };
        let bin = |w: &mut Walk, o: BinOp, other: &str| -> R<Val> {
            let x = w.operand(i, "self", acc)?;
            let y = w.operand(i, other, acc)?;
            Ok(w.b.bin(o, x, y))
        };
        let r = match op {
            Abs => un(self, UnOp::Abs)?,
            Neg => {
                need_f32(self)?;
                un(self, UnOp::Neg)?
            }
            Exp | Expm1 | Log | Log1p | Log2 | Log10 | Sqrt | Rsqrt | Reciprocal | Sigmoid
            | Tanh | Erf | Sin | Cos | Tan | Asin | Acos | Atan | Sinh | Cosh | Asinh | Acosh
            | Atanh => {
                need_f32(self)?;
                let u = match op {
                    Exp => UnOp::Exp,
                    Expm1 => UnOp::Expm1,
                    Log => UnOp::Log,
                    Log1p => UnOp::Log1p,
                    Log2 => UnOp::Log2,
                    Log10 => UnOp::Log10,
                    Sqrt => UnOp::Sqrt,
                    Rsqrt => UnOp::Rsqrt,
                    Reciprocal => UnOp::Recip,
                    Sigmoid => UnOp::Sigmoid,
                    Tanh => UnOp::Tanh,
                    Erf => UnOp::Erf,
                    Sin => UnOp::Sin,
                    Cos => UnOp::Cos,
                    Tan => UnOp::Tan,
                    Asin => UnOp::Asin,
                    Acos => UnOp::Acos,
                    Atan => UnOp::Atan,
                    Sinh => UnOp::Sinh,
                    Cosh => UnOp::Cosh,
                    Asinh => UnOp::Asinh,
                    Acosh => UnOp::Acosh,
                    _ => UnOp::Atanh,
                };
                un(self, u)?
            }
            Ceil => un(self, UnOp::Ceil)?,
            Floor => un(self, UnOp::Floor)?,
            Round => un(self, UnOp::Round)?,
            Trunc => un(self, UnOp::Trunc)?,
            Sign => un(self, UnOp::Sign)?,
            Relu => un(self, UnOp::Relu)?,
            Isnan => un(self, UnOp::IsNan)?,
            Isinf => un(self, UnOp::IsInf)?,
            LogicalNot => un(self, UnOp::Not)?,
            BitwiseNot if out_dtype == DType::Bool => un(self, UnOp::Not)?,
            Gelu => {
                need_f32(self)?;
                let approx = match n.arg("approximate") {
                    Some(Arg::Str(s)) => s.as_str(),
                    _ => "none",
                };
                match approx {
                    "none" => un(self, UnOp::GeluErf)?,
                    "tanh" => un(self, UnOp::GeluTanh)?,
                    other => return Err(self.err(i, format!("unknown approximation '{other}'"))),
                }
            }
            LeakyRelu => {
                need_f32(self)?;
                let s = self.scalar(i, "negative_slope")? as f32;
                let x = self.operand(i, "self", acc)?;
                let pos = self.b.bin_c(BinOp::Gt, x, 0.0);
                let neg = self.b.bin_c(BinOp::Mul, x, s);
                self.b.select(pos, x, neg)
            }
            Hardtanh => {
                need_f32(self)?;
                let lo = self.scalar(i, "min_val")? as f32;
                let hi = self.scalar(i, "max_val")? as f32;
                let x = self.operand(i, "self", acc)?;
                let y = self.b.bin_c(BinOp::Max, x, lo);
                self.b.bin_c(BinOp::Min, y, hi)
            }
            Elu => {
                need_f32(self)?;
                let alpha = self.scalar(i, "alpha")? as f32;
                let scale = self.scalar(i, "scale")? as f32;
                let is = self.scalar(i, "input_scale")? as f32;
                let x = self.operand(i, "self", acc)?;
                let le = self.b.bin_c(BinOp::Le, x, 0.0);
                let xs = self.b.bin_c(BinOp::Mul, x, is);
                let e = self.b.un(UnOp::Expm1, xs);
                let e = self.b.bin_c(BinOp::Mul, e, alpha);
                let e = self.b.bin_c(BinOp::Mul, e, scale);
                let p = self.b.bin_c(BinOp::Mul, x, scale);
                self.b.select(le, e, p)
            }
            AddTensor | AddScalar | SubTensor | SubScalar => {
                need_f32(self)?;
                let alpha = self.scalar(i, "alpha")? as f32;
                let x = self.operand(i, "self", acc)?;
                let mut y = self.operand(i, "other", acc)?;
                if alpha != 1.0 {
                    y = self.b.bin_c(BinOp::Mul, y, alpha);
                }
                let o = if matches!(op, AddTensor | AddScalar) {
                    BinOp::Add
                } else {
                    BinOp::Sub
                };
                self.b.bin(o, x, y)
            }
            MulTensor | MulScalar => {
                need_f32(self)?;
                bin(self, BinOp::Mul, "other")?
            }
            DivTensor | DivScalar => {
                need_f32(self)?;
                bin(self, BinOp::Div, "other")?
            }
            DivTensorMode | DivScalarMode => {
                need_f32(self)?;
                let o = match n.arg("rounding_mode") {
                    Some(Arg::Str(s)) if s == "trunc" => BinOp::DivTrunc,
                    Some(Arg::Str(s)) if s == "floor" => BinOp::DivFloor,
                    Some(Arg::None) | None => BinOp::Div,
                    Some(other) => {
                        return Err(self.err(i, format!("rounding_mode {other:?}")));
                    }
                };
                bin(self, o, "other")?
            }
            Maximum => {
                need_f32(self)?;
                bin(self, BinOp::Max, "other")?
            }
            Minimum => {
                need_f32(self)?;
                bin(self, BinOp::Min, "other")?
            }
            Atan2 => {
                need_f32(self)?;
                bin(self, BinOp::Atan2, "other")?
            }
            FmodTensor | FmodScalar => {
                need_f32(self)?;
                bin(self, BinOp::Fmod, "other")?
            }
            RemainderTensor | RemainderScalar => {
                need_f32(self)?;
                bin(self, BinOp::Remainder, "other")?
            }
            PowTensorScalar | PowTensorTensor => {
                need_f32(self)?;
                bin(self, BinOp::Pow, "exponent")?
            }
            PowScalar => {
                need_f32(self)?;
                let base = self.scalar(i, "self")? as f32;
                let c = self.b.constant(base);
                let e = self.operand(i, "exponent", acc)?;
                self.b.bin(BinOp::Pow, c, e)
            }
            EqTensor | EqScalar | NeTensor | NeScalar | LtTensor | LtScalar | LeTensor
            | LeScalar | GtTensor | GtScalar | GeTensor | GeScalar => {
                let o = match op {
                    EqTensor | EqScalar => BinOp::Eq,
                    NeTensor | NeScalar => BinOp::Ne,
                    LtTensor | LtScalar => BinOp::Lt,
                    LeTensor | LeScalar => BinOp::Le,
                    GtTensor | GtScalar => BinOp::Gt,
                    _ => BinOp::Ge,
                };
                bin(self, o, "other")?
            }
            LogicalAnd => bin(self, BinOp::And, "other")?,
            LogicalOr => bin(self, BinOp::Or, "other")?,
            LogicalXor => bin(self, BinOp::Xor, "other")?,
            BitwiseAndTensor if out_dtype == DType::Bool => bin(self, BinOp::And, "other")?,
            BitwiseOrTensor if out_dtype == DType::Bool => bin(self, BinOp::Or, "other")?,
            BitwiseXorTensor if out_dtype == DType::Bool => bin(self, BinOp::Xor, "other")?,
            WhereSelf => {
                let c = self.operand(i, "condition", acc)?;
                let a = self.operand(i, "self", acc)?;
                let b = self.operand(i, "other", acc)?;
                self.b.select(c, a, b)
            }
            ClampTensor | Clamp => {
                need_f32(self)?;
                let mut x = self.operand(i, "self", acc)?;
                let mut any = false;
                for (name, o) in [("min", BinOp::Max), ("max", BinOp::Min)] {
                    match n.arg(name) {
                        Some(Arg::None) | None => {}
                        Some(_) => {
                            let b = self.operand(i, name, acc)?;
                            x = self.b.bin(o, x, b);
                            any = true;
                        }
                    }
                }
                if !any {
                    return Err(self.err(i, "neither min nor max is given"));
                }
                x
            }
            ToCopy => {
                let src = self
                    .tensor_arg(n, "self")
                    .ok_or_else(|| self.err(i, "no tensor operand"))?;
                let in_dtype = self.g.ty(src).dtype;
                let x = match in_dtype {
                    d if is_f32_stored(d) || d == DType::Bool => self.value(src, acc)?,
                    // As f32: exact for a bool result too (no nonzero i64 rounds to 0).
                    DType::I64 if f32_out || out_dtype == DType::Bool => {
                        self.value_as(src, acc, true)?
                    }
                    d => {
                        return Err(self.err(i, format!("conversion from {d} is not supported")));
                    }
                };
                // A conversion sees the value as of its type: a bf16 or f16 value computed
                // here in f32 is rounded to its type first (a loaded one already is), and a
                // conversion into bf16 or f16 rounds (where later instructions read it; a
                // result is rounded when stored anyway).
                let x = match lowp_round(in_dtype) {
                    Some(r) if in_dtype != out_dtype && self.computed(src) => self.b.un(r, x),
                    _ => x,
                };
                match lowp_round(out_dtype) {
                    _ if out_dtype == DType::Bool && in_dtype != DType::Bool => {
                        self.b.un(UnOp::ToBool, x)
                    }
                    Some(r) if in_dtype != out_dtype && in_dtype != DType::Bool => self.b.un(r, x),
                    _ => x,
                }
            }
            Clone | Alias => {
                let src = self
                    .tensor_arg(n, "self")
                    .ok_or_else(|| self.err(i, "no tensor operand"))?;
                self.same_dtype(i, src, out_dtype)?;
                self.value(src, acc)?
            }
            NativeBatchNormLegitNoTraining => {
                need_f32(self)?;
                self.batch_norm(i, acc)?
            }
            Full | ScalarTensor | FullLike | FillScalar => {
                let name = match op {
                    Full | FullLike => "fill_value",
                    ScalarTensor => "s",
                    _ => "value",
                };
                let c = self.scalar(i, name)?;
                let c = if f32_out {
                    lowp_round(out_dtype).map_or(c as f32, |r| apply_un(r, c as f32))
                } else if c != 0.0 {
                    1.0
                } else {
                    0.0
                };
                self.b.constant(c)
            }
            ArangeStartStep => {
                let start = self.scalar(i, "start")?;
                let step = self.scalar(i, "step")?;
                if !(start.is_finite() && step.is_finite()) {
                    return Err(self.err(i, "non-finite start or step"));
                }
                if out_dtype == DType::Bool {
                    return Err(self.err(i, "a bool arange"));
                }
                // An integer arange (converted to f32 by `_to_copy`) has integer bounds.
                if !f32_out && (start.fract() != 0.0 || step.fract() != 0.0) {
                    return Err(self.err(i, "an integer arange with fractional bounds"));
                }
                let (offset, strides) = (acc.off[0], acc.coef[0].clone());
                self.b.leaf(Leaf {
                    src: LeafSrc::Iota { start, step },
                    offset,
                    strides,
                })
            }
            View | Unsqueeze | SqueezeDim | SqueezeDims | Expand | Permute | SliceTensor
            | SelectInt | Flip | SplitWithSizes => {
                let src = self
                    .tensor_arg(n, "self")
                    .ok_or_else(|| self.err(i, "no tensor operand"))?;
                self.same_dtype(i, src, out_dtype)?;
                let sub = self.view_access(v, op, src, acc)?;
                match sub {
                    Some(sub) => self.value_as(src, &sub, allow_i64)?,
                    None => {
                        // A reshape of a value read from memory: same flat addresses.
                        let shape = self.shape(src)?;
                        let kind = self.leaf_kind(src, allow_i64)?;
                        let slot = match self.subst.get(&src) {
                            Some(&s) => s,
                            None => self.slots.slot(src),
                        };
                        let out = self.shape(v)?;
                        let (offset, strides) = acc.flatten(&out, self.nd);
                        debug_assert_eq!(
                            shape.iter().product::<usize>(),
                            out.iter().product::<usize>()
                        );
                        self.b.leaf(Leaf {
                            src: LeafSrc::Slot { slot, kind },
                            offset,
                            strides,
                        })
                    }
                }
            }
            _ => return Err(self.err(i, "op is not supported by the elementwise engine")),
        };
        Ok(r)
    }

    fn same_dtype(&self, i: NodeId, src: ValueRef, out: DType) -> R<()> {
        let d = self.g.ty(src).dtype;
        if d != out {
            return Err(self.err(i, format!("changes dtype {d} -> {out}")));
        }
        Ok(())
    }

    /// `(x - mean[c]) * rsqrt(var[c] + eps) * w[c] + b[c]` with channels on dimension 1.
    fn batch_norm(&mut self, i: NodeId, acc: &Access) -> R<Val> {
        let out = self.shape(ValueRef::new(i, 0))?;
        if out.len() < 2 {
            return Err(self.err(i, "input must be (N, C, ...)"));
        }
        let eps = self.scalar(i, "eps")? as f32;
        let x = self.operand(i, "input", acc)?;
        let chan = Access {
            off: vec![acc.off[1]],
            coef: vec![acc.coef[1].clone()],
        };
        let c = out[1];
        let per_channel = |w: &mut Walk, name: &str| -> R<Option<Val>> {
            let n = &w.g.nodes[i];
            match n.arg(name) {
                Some(Arg::Tensor(t)) => {
                    let t = *t;
                    if w.shape(t)? != [c] {
                        return Err(w.err(i, format!("`{name}` must have shape [{c}]")));
                    }
                    Ok(Some(w.value(t, &chan)?))
                }
                _ => Ok(None),
            }
        };
        let mean = per_channel(self, "running_mean")?
            .ok_or_else(|| self.err(i, "running_mean is required"))?;
        let var = per_channel(self, "running_var")?
            .ok_or_else(|| self.err(i, "running_var is required"))?;
        let w = per_channel(self, "weight")?;
        let b = per_channel(self, "bias")?;
        let d = self.b.bin(BinOp::Sub, x, mean);
        let ve = self.b.bin_c(BinOp::Add, var, eps);
        let rstd = self.b.un(UnOp::Rsqrt, ve);
        let mut y = self.b.bin(BinOp::Mul, d, rstd);
        if let Some(w) = w {
            y = self.b.bin(BinOp::Mul, y, w);
        }
        if let Some(b) = b {
            y = self.b.bin(BinOp::Add, y, b);
        }
        Ok(y)
    }

    /// The access of a view op's input, or `None` for a reshape whose input is read from
    /// memory as is (its flat addresses are the output's).
    fn view_access(
        &mut self,
        v: ValueRef,
        op: Op,
        src: ValueRef,
        acc: &Access,
    ) -> R<Option<Access>> {
        let i = v.node;
        let xs = self.shape(src)?;
        let ys = self.shape(v)?;
        let nd = self.nd;
        let zero = || (0i64, vec![0i64; nd]);
        let mut a = Access {
            off: vec![],
            coef: vec![],
        };
        let push = |a: &mut Access, (o, c): (i64, Vec<i64>)| {
            a.off.push(o);
            a.coef.push(c);
        };
        let row = |k: usize| (acc.off[k], acc.coef[k].clone());
        match op {
            Op::Permute => {
                let dims = self.ints(i, "dims")?;
                if dims.len() != xs.len() {
                    return Err(self.err(i, "dims do not match the rank"));
                }
                let mut rows = vec![None; xs.len()];
                for (k, &d) in dims.iter().enumerate() {
                    let d = self.norm_dim(i, d, xs.len())?;
                    rows[d] = Some(row(k));
                }
                for r in rows {
                    push(
                        &mut a,
                        r.ok_or_else(|| self.err(i, "dims repeat a dimension"))?,
                    );
                }
            }
            Op::Expand => {
                if xs.len() > ys.len() {
                    return Err(self.err(i, "expand to a lower rank"));
                }
                a = acc.broadcast(&ys, &xs, nd);
            }
            Op::SliceTensor => {
                let d = self.norm_dim(i, self.int(i, "dim")?, xs.len())?;
                let step = self.int(i, "step")?;
                if step <= 0 {
                    return Err(self.err(i, "slice step must be positive"));
                }
                let size = xs[d] as i128;
                let clamp = |v: i64| {
                    let v = v as i128;
                    let v = if v < 0 { v + size } else { v };
                    v.clamp(0, size) as i64
                };
                let start = self.opt_int(i, "start")?.map_or(0, clamp);
                for k in 0..xs.len() {
                    if k == d {
                        let (o, c) = row(k);
                        push(
                            &mut a,
                            (start + step * o, c.iter().map(|&x| x * step).collect()),
                        );
                    } else {
                        push(&mut a, row(k));
                    }
                }
            }
            Op::SplitWithSizes => {
                // Result `r` is the slice of `split_sizes[r]` after the earlier ones.
                let d = self.norm_dim(i, self.int(i, "dim")?, xs.len())?;
                let sizes = self.ints(i, "split_sizes")?;
                let start: i64 = sizes.iter().take(v.index).sum();
                for k in 0..xs.len() {
                    let (o, c) = row(k);
                    push(&mut a, if k == d { (start + o, c) } else { (o, c) });
                }
            }
            Op::SelectInt => {
                let d = self.norm_dim(i, self.int(i, "dim")?, xs.len())?;
                let n = xs[d] as i64;
                let idx = self.int(i, "index")?;
                let j = if idx < 0 { idx + n } else { idx };
                if j < 0 || j >= n {
                    return Err(self.err(i, format!("index {idx} is out of range")));
                }
                for k in 0..xs.len() {
                    match k.cmp(&d) {
                        std::cmp::Ordering::Less => push(&mut a, row(k)),
                        std::cmp::Ordering::Equal => push(&mut a, (j, vec![0; nd])),
                        std::cmp::Ordering::Greater => push(&mut a, row(k - 1)),
                    }
                }
            }
            Op::Flip => {
                let dims = self.ints(i, "dims")?;
                let mut flip = vec![false; xs.len()];
                for d in dims {
                    flip[self.norm_dim(i, d, xs.len())?] = true;
                }
                for k in 0..xs.len() {
                    let (o, c) = row(k);
                    if flip[k] {
                        push(
                            &mut a,
                            (xs[k] as i64 - 1 - o, c.iter().map(|&x| -x).collect()),
                        );
                    } else {
                        push(&mut a, (o, c));
                    }
                }
            }
            Op::Unsqueeze | Op::SqueezeDim | Op::SqueezeDims | Op::View => {
                // Only size-1 dimensions differ: drop or add zero rows.
                let nz_x: Vec<usize> = (0..xs.len()).filter(|&k| xs[k] != 1).collect();
                let nz_y: Vec<usize> = (0..ys.len()).filter(|&k| ys[k] != 1).collect();
                let same = nz_x.len() == nz_y.len()
                    && nz_x.iter().zip(&nz_y).all(|(&p, &q)| xs[p] == ys[q]);
                if same {
                    let mut m = nz_y.iter();
                    for &n in &xs {
                        if n == 1 {
                            push(&mut a, zero());
                        } else {
                            let &q = m.next().expect("same count");
                            push(&mut a, row(q));
                        }
                    }
                } else if !self.computed(src) {
                    return Ok(None);
                } else {
                    return self.reshape(i, &xs, &ys, acc).map(Some);
                }
            }
            _ => return Err(self.err(i, "not a view op")),
        }
        Ok(Some(a))
    }

    /// A general reshape `ys -> xs` (same element count) as digit extraction per group of
    /// dimensions with equal products; asks for an iteration split where a digit does not
    /// line up with iteration dimensions.
    fn reshape(&self, i: NodeId, xs: &[usize], ys: &[usize], acc: &Access) -> R<Access> {
        let nd = self.nd;
        let mut a = Access {
            off: vec![0; xs.len()],
            coef: vec![vec![0; nd]; xs.len()],
        };
        let (mut p, mut q) = (0usize, 0usize);
        while p < ys.len() || q < xs.len() {
            // Skip size-1 dims (their index is 0).
            if p < ys.len() && ys[p] == 1 {
                p += 1;
                continue;
            }
            if q < xs.len() && xs[q] == 1 {
                q += 1;
                continue;
            }
            if p >= ys.len() || q >= xs.len() {
                return Err(self.err(i, "reshape sizes do not match"));
            }
            // Grow the group until the products match.
            let (p0, q0) = (p, q);
            let (mut py, mut px) = (ys[p] as u128, xs[q] as u128);
            p += 1;
            q += 1;
            while py != px {
                if py < px {
                    if p >= ys.len() {
                        return Err(self.err(i, "reshape sizes do not match"));
                    }
                    py *= ys[p] as u128;
                    p += 1;
                } else {
                    if q >= xs.len() {
                        return Err(self.err(i, "reshape sizes do not match"));
                    }
                    px *= xs[q] as u128;
                    q += 1;
                }
            }
            // Flat index inside the group, from the y rows.
            let mut go = 0i64;
            let mut gc = vec![0i64; nd];
            let mut s = 1i64;
            for k in (p0..p).rev() {
                go += acc.off[k] * s;
                for d in 0..nd {
                    gc[d] += acc.coef[k][d] * s;
                }
                s *= ys[k] as i64;
            }
            // Strides of the x digits in the group.
            let xd: Vec<usize> = (q0..q).filter(|&k| xs[k] != 1).collect();
            let mut xstr = vec![0i64; xd.len()];
            let mut s = 1i64;
            for j in (0..xd.len()).rev() {
                xstr[j] = s;
                s *= xs[xd[j]] as i64;
            }
            if go < 0 || go >= s {
                return Err(self.err(i, "reshape offset out of range"));
            }
            // Offset digits.
            let mut rem = go;
            for j in 0..xd.len() {
                a.off[xd[j]] = rem / xstr[j];
                rem %= xstr[j];
            }
            // Each iteration dim goes to the outermost digit whose stride divides its
            // coefficient.
            let mut maxd = vec![0i64; xd.len()];
            for j in 0..xd.len() {
                maxd[j] = a.off[xd[j]];
            }
            for d in 0..nd {
                let c = gc[d];
                if c == 0 {
                    continue;
                }
                if c < 0 {
                    return Err(self.err(i, "reshape of a flipped dimension"));
                }
                let j = (0..xd.len())
                    .find(|&j| c % xstr[j] == 0)
                    .expect("the innermost stride is 1");
                a.coef[xd[j]][d] = c / xstr[j];
                maxd[j] += c / xstr[j] * (self.dims[d] as i64 - 1);
            }
            for j in 0..xd.len() {
                if maxd[j] < xs[xd[j]] as i64 {
                    continue;
                }
                // Digit j overflows: split an iteration dim feeding it at the digit boundary.
                let bound = xstr[j] * xs[xd[j]] as i64;
                for d in 0..nd {
                    let c = gc[d];
                    if c <= 0 {
                        continue;
                    }
                    let n = self.dims[d] as i64;
                    // Split where c * inner reaches the next digit boundary above c.
                    for &b in xstr.iter().rev().chain(std::iter::once(&bound)) {
                        if b > c && b % c == 0 {
                            let f = b / c;
                            if f < n && n % f == 0 {
                                return Err(Fail::Split {
                                    dim: d,
                                    factor: f as usize,
                                });
                            }
                        }
                    }
                }
                return Err(self.err(
                    i,
                    format!("reshape {ys:?} -> {xs:?} is not an affine access here"),
                ));
            }
        }
        Ok(a)
    }
}
