//! Specs of the dense kernels (`fast::{gemm, conv, pool, gather, concat, index}`) from graph
//! nodes.
//!
//! Each function reads one node's arguments and returns the runtime spec plus the values the
//! kernel reads. Matmul operands look through layout-only producers (`permute`, `view`,
//! `expand`, `unsqueeze`, `squeeze`, `alias`, `clone`) back to the buffer they view and give
//! its strides instead, so `x @ w.t()` reads `w` transposed in place. Everything else refuses
//! with `Err` naming the node (non-`f32`, symbolic shapes, transposed or 3-D convolution, ...).

use super::expr::is_f32_stored;
use super::layout::Layout;
use fxhlo_ir::{Arg, DType, Graph, NodeId, NodeKind, Op, ValueRef};
use fxhlo_runtime::fast::concat::ConcatSpec;
use fxhlo_runtime::fast::conv::ConvSpec;
use fxhlo_runtime::fast::gather::{GatherNdSpec, GatherSpec};
use fxhlo_runtime::fast::gemm::{MatmulSpec, Operand};
use fxhlo_runtime::fast::index::{ArgSpec, GatherDimSpec, ScanSpec};
use fxhlo_runtime::fast::pool::{PoolKind, PoolSpec};
use fxhlo_runtime::fast::program::Kernel;

/// A matmul node as a kernel: the spec and the values behind its operands.
#[derive(Clone, Debug, PartialEq)]
pub struct MatmulKernel {
    /// The product, with each operand's strides inside the buffer of `a` / `b` / `bias`.
    pub spec: MatmulSpec,
    /// The buffer the left operand is read from (the node's operand or a value it views).
    pub a: ValueRef,
    /// The buffer the right operand is read from.
    pub b: ValueRef,
    /// The buffer of the bias (`addmm`'s `self`), broadcast by `spec.bias`'s strides.
    pub bias: Option<ValueRef>,
}

/// A convolution node as a kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct ConvKernel {
    /// The geometry (1-D convolutions as 2-D with unit height).
    pub spec: ConvSpec,
    /// The input, contiguous NCHW.
    pub input: ValueRef,
    /// The weight `[cout, cin / groups, kh, kw]`.
    pub weight: ValueRef,
    /// The bias `[cout]`, if any.
    pub bias: Option<ValueRef>,
}

/// A pooling node as a kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolKernel {
    /// The geometry; leading dimensions are folded into `planes`.
    pub spec: PoolSpec,
    /// The input.
    pub input: ValueRef,
    /// True for `max_pool2d_with_indices`: result 1 of the node is the `i64` indices.
    pub indices: bool,
}

/// A gather node as a kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct GatherKernel {
    /// The geometry.
    pub spec: GatherSpec,
    /// The table read from (`embedding`'s `weight`, `index_select`'s `self`).
    pub table: ValueRef,
    /// The `i64` indices.
    pub indices: ValueRef,
}

/// The node's op, or `Err` for inputs and unsupported nodes.
fn op_of(g: &Graph, node: NodeId) -> Result<Op, String> {
    let n = g
        .nodes
        .get(node)
        .ok_or_else(|| format!("node {node} does not exist"))?;
    match n.kind {
        NodeKind::Op(op) => Ok(op),
        _ => Err(format!(
            "node '{}' ({}) is not a table op",
            n.name,
            n.op_name()
        )),
    }
}

/// Reads the arguments of one node with messages that name it.
struct Args<'g> {
    g: &'g Graph,
    node: NodeId,
}

impl<'g> Args<'g> {
    fn err(&self, msg: impl std::fmt::Display) -> String {
        let n = &self.g.nodes[self.node];
        format!("node '{}' ({}): {msg}", n.name, n.op_name())
    }

    fn arg(&self, name: &str) -> Result<&'g Arg, String> {
        self.g.nodes[self.node]
            .arg(name)
            .ok_or_else(|| self.err(format!("has no argument '{name}'")))
    }

    fn tensor(&self, name: &str) -> Result<ValueRef, String> {
        self.arg(name)?
            .as_tensor()
            .ok_or_else(|| self.err(format!("argument '{name}' is not a tensor")))
    }

    fn opt_tensor(&self, name: &str) -> Result<Option<ValueRef>, String> {
        match self.arg(name)? {
            Arg::None => Ok(None),
            Arg::Tensor(v) => Ok(Some(*v)),
            a => Err(self.err(format!("argument '{name}' is a {}", a.kind_name()))),
        }
    }

    fn int(&self, name: &str) -> Result<i64, String> {
        match self.arg(name)? {
            Arg::Int(v) => Ok(*v),
            a => Err(self.err(format!("argument '{name}' is a {}", a.kind_name()))),
        }
    }

    fn opt_int(&self, name: &str) -> Result<Option<i64>, String> {
        match self.arg(name)? {
            Arg::None => Ok(None),
            Arg::Int(v) => Ok(Some(*v)),
            a => Err(self.err(format!("argument '{name}' is a {}", a.kind_name()))),
        }
    }

    fn bool(&self, name: &str) -> Result<bool, String> {
        match self.arg(name)? {
            Arg::Bool(v) => Ok(*v),
            a => Err(self.err(format!("argument '{name}' is a {}", a.kind_name()))),
        }
    }

    fn scalar(&self, name: &str) -> Result<f32, String> {
        match self.arg(name)? {
            Arg::Int(v) => Ok(*v as f32),
            Arg::Float(v) => Ok(*v as f32),
            Arg::Bool(v) => Ok(*v as u8 as f32),
            a => Err(self.err(format!("argument '{name}' is a {}", a.kind_name()))),
        }
    }

    fn ints(&self, name: &str) -> Result<&'g [i64], String> {
        match self.arg(name)? {
            Arg::Ints(v) => Ok(v),
            a => Err(self.err(format!("argument '{name}' is a {}", a.kind_name()))),
        }
    }

    /// A pair of non-negative window parameters (one entry stands for both); `empty` when the
    /// list is empty (`None`: refuse).
    fn pair(&self, name: &str, empty: Option<[usize; 2]>) -> Result<[usize; 2], String> {
        let v = self.ints(name)?;
        let u = |x: i64| {
            usize::try_from(x)
                .map_err(|_| self.err(format!("'{name}' must be non-negative, found {v:?}")))
        };
        match (v.len(), empty) {
            (0, Some(e)) => Ok(e),
            (1, _) => Ok([u(v[0])?; 2]),
            (2, _) => Ok([u(v[0])?, u(v[1])?]),
            _ => Err(self.err(format!("'{name}' has {} entries, expected 1 or 2", v.len()))),
        }
    }

    /// Dimension argument `name` of a tensor of `rank` (at least 1), a negative one counted
    /// from the end.
    fn dim(&self, name: &str, rank: usize) -> Result<usize, String> {
        let d = self.int(name)?;
        let r = rank as i64;
        let dim = if d < 0 { d + r } else { d };
        if dim < 0 || dim >= r {
            return Err(self.err(format!("dim {d} is out of range for rank {rank}")));
        }
        Ok(dim as usize)
    }

    /// The static shape of `v`, which must be `f32` (or `dtype`).
    fn shape_of(&self, v: ValueRef, dtype: DType, what: &str) -> Result<Vec<usize>, String> {
        let t = self.g.ty(v);
        // bf16 and f16 are stored widened in f32: the f32 kernels read and write them.
        if t.dtype != dtype && !(dtype == DType::F32 && is_f32_stored(t.dtype)) {
            return Err(self.err(format!(
                "{what} has dtype {}, the fast kernel needs {dtype}",
                t.dtype
            )));
        }
        static_shape(self.g, v).ok_or_else(|| self.err(format!("{what} has a symbolic shape")))
    }

    /// Checks that result `i` has the shape the kernel computes.
    fn check_result(&self, i: usize, dtype: DType, shape: &[usize]) -> Result<(), String> {
        let v = ValueRef::new(self.node, i);
        let got = self.shape_of(v, dtype, &format!("result {i}"))?;
        if got != shape {
            return Err(self.err(format!(
                "result {i} has shape {got:?}, but the kernel computes {shape:?}"
            )));
        }
        Ok(())
    }
}

pub(crate) fn static_shape(g: &Graph, v: ValueRef) -> Option<Vec<usize>> {
    g.ty(v)
        .shape
        .iter()
        .map(|d| d.as_static().and_then(|n| usize::try_from(n).ok()))
        .collect()
}

/// Where a value's elements lie: a [`Layout`] inside the buffer of `value`, and a factor the
/// view's elements are multiplied by (folded `mul.Scalar`s).
struct Strided {
    value: ValueRef,
    layout: Layout,
    scale: f32,
}

/// One step of a view chain: the layout of `val` (shape `new`) from its operand's `layout`,
/// and the factor it multiplies by; `None` if it is not a strided view.
fn view_step(g: &Graph, val: ValueRef, layout: &Layout, new: &[usize]) -> Option<(Layout, f32)> {
    let n = &g.nodes[val.node];
    let ints = |name: &str| match n.arg(name) {
        Some(Arg::Int(v)) => Some(*v),
        _ => None,
    };
    let opt_int = |name: &str| match n.arg(name) {
        Some(Arg::Int(v)) => Some(Some(*v)),
        Some(Arg::None) | None => Some(None),
        _ => None,
    };
    let (l, scale) = match n.op()? {
        Op::Permute => match n.arg("dims") {
            Some(Arg::Ints(dims)) => (layout.permute(dims)?, 1.0),
            _ => return None,
        },
        Op::Expand => (layout.expand(new)?, 1.0),
        Op::SelectInt => (layout.select(ints("dim")?, ints("index")?)?, 1.0),
        Op::SliceTensor => (
            layout.slice(
                ints("dim").unwrap_or(0),
                opt_int("start")?,
                opt_int("end")?,
                ints("step").unwrap_or(1),
            )?,
            1.0,
        ),
        Op::MulScalar => match n.arg("other") {
            Some(Arg::Float(c)) => (layout.clone(), *c as f32),
            Some(Arg::Int(c)) => (layout.clone(), *c as f32),
            _ => return None,
        },
        _ => (layout.reshape(new)?, 1.0),
    };
    (l.shape() == new).then_some((l, scale))
}

/// The values `v` may be read through, source first: `v`, then back through layout-only
/// producers (and, with `scales`, `mul` by a number) while they keep the dtype, and through
/// conversions of bf16 or f16 to f32 (the same f32 values where the runtime stores them).
fn view_chain(g: &Graph, v: ValueRef, scales: bool) -> Vec<ValueRef> {
    let mut chain = vec![v];
    let mut cur = v;
    while chain.len() < 32 {
        let n = &g.nodes[cur.node];
        let widening = fxhlo_passes::fusion::is_widening(g, cur.node);
        let view_op = match n.kind {
            NodeKind::Op(op) if op.is_strided_view() => true,
            NodeKind::Op(Op::MulScalar) => scales && fxhlo_passes::fusion::is_scale(g, cur.node),
            _ => widening,
        };
        let src = match n.arg("self").and_then(Arg::as_tensor) {
            Some(s)
                if view_op && cur.index == 0 && (widening || g.ty(s).dtype == g.ty(cur).dtype) =>
            {
                s
            }
            _ => break,
        };
        if static_shape(g, src).is_none() {
            break;
        }
        chain.push(src);
        cur = src;
    }
    chain.reverse();
    chain
}

/// Where the last value of `chain` (source first, as from [`view_chain`]) lies: composes the
/// steps' layouts forward from the source; `None` at a step that is not a strided view
/// ([`read_through`] then starts further along the chain).
fn compose(g: &Graph, chain: &[ValueRef]) -> Option<Strided> {
    let (&first, rest) = chain.split_first()?;
    let mut at = Strided {
        value: first,
        layout: Layout::contiguous(&static_shape(g, first)?),
        scale: 1.0,
    };
    for &val in rest {
        let (layout, scale) = view_step(g, val, &at.layout, &static_shape(g, val)?)?;
        at.layout = layout;
        at.scale *= scale;
    }
    Some(at)
}

/// The first view of `v` along its [`view_chain`], from the deepest source on, that composes
/// and that `accept` turns into an operand; `v` itself, read contiguously, when none does.
fn read_through<T>(
    g: &Graph,
    v: ValueRef,
    scales: bool,
    accept: impl Fn(&Layout) -> Option<T>,
) -> Option<(ValueRef, T, f32)> {
    let chain = view_chain(g, v, scales);
    (0..chain.len()).find_map(|start| {
        let s = compose(g, &chain[start..])?;
        Some((s.value, accept(&s.layout)?, s.scale))
    })
}

/// `layout` (rank 2 or 3) as a matmul operand: rows and columns one stride each, the batch at
/// most two (a grouped batch).
pub(crate) fn as_operand(layout: &Layout) -> Option<Operand> {
    let r = layout.dims.len();
    if !(2..=3).contains(&r) {
        return None;
    }
    let mut op = Operand {
        offset: layout.offset,
        row_stride: layout.stride(r - 2)?,
        col_stride: layout.stride(r - 1)?,
        ..Operand::default()
    };
    if r == 3 {
        match layout.levels(0, 2)?.as_slice() {
            [] => {}
            [(_, t)] => op.batch_stride = *t,
            [(_, outer), (inner, t)] => {
                op.group = *inner;
                op.group_stride = *outer;
                op.batch_stride = *t;
            }
            _ => return None,
        }
    }
    Some(op)
}

/// A matmul operand: the source buffer, its strided view, the factor folded into the product
/// and the shape the node sees (`rank` 2 or 3, `f32`). A view that is not a strided operand is
/// read from the operand value itself.
fn operand(
    a: &Args,
    v: ValueRef,
    what: &str,
) -> Result<(ValueRef, Operand, f32, Vec<usize>), String> {
    let shape = a.shape_of(v, DType::F32, what)?;
    if !(2..=3).contains(&shape.len()) {
        return Err(a.err(format!("{what} has rank {}, expected 2 or 3", shape.len())));
    }
    let (src, op, scale) = read_through(a.g, v, true, as_operand)
        .ok_or_else(|| a.err(format!("{what} is not a strided matrix")))?;
    a.shape_of(src, DType::F32, what)?;
    Ok((src, op, scale, shape))
}

/// `mm`, `bmm` and `addmm` as a [`MatmulKernel`] (f32 only).
pub fn matmul_spec(g: &Graph, node: NodeId) -> Result<MatmulKernel, String> {
    let op = op_of(g, node)?;
    let a = Args { g, node };
    let (lhs, rhs, rank) = match op {
        Op::Mm => ("self", "mat2", 2),
        Op::Bmm => ("self", "mat2", 3),
        Op::Addmm => ("mat1", "mat2", 2),
        _ => return Err(a.err("is not mm, bmm or addmm")),
    };
    let (av, ao, a_scale, ash) = operand(&a, a.tensor(lhs)?, "the left operand")?;
    let (bv, bo, b_scale, bsh) = operand(&a, a.tensor(rhs)?, "the right operand")?;
    if ash.len() != rank || bsh.len() != rank {
        return Err(a.err(format!("operands have shapes {ash:?} and {bsh:?}")));
    }
    let (batch, m, k) = if rank == 3 {
        (ash[0], ash[1], ash[2])
    } else {
        (1, ash[0], ash[1])
    };
    let (kb, n) = (bsh[rank - 2], bsh[rank - 1]);
    if kb != k || (rank == 3 && bsh[0] != batch) {
        return Err(a.err(format!(
            "operands have shapes {ash:?} and {bsh:?}, which do not multiply"
        )));
    }
    let out: Vec<usize> = if rank == 3 {
        vec![batch, m, n]
    } else {
        vec![m, n]
    };
    a.check_result(0, DType::F32, &out)?;
    let mut spec = MatmulSpec {
        batch,
        m,
        n,
        k,
        a: ao,
        b: bo,
        bias: None,
        alpha: a_scale * b_scale,
        beta: 1.0,
    };
    let mut bias = None;
    if op == Op::Addmm {
        spec.alpha *= a.scalar("alpha")?;
        spec.beta = a.scalar("beta")?;
        let v = a.tensor("self")?;
        let shape = a.shape_of(v, DType::F32, "the bias")?;
        let (src, view, _) = read_through(g, v, false, |l| as_operand(&l.expand(&[m, n])?))
            .ok_or_else(|| {
                a.err(format!(
                    "the bias of shape {shape:?} does not broadcast to [{m}, {n}]"
                ))
            })?;
        a.shape_of(src, DType::F32, "the bias")?;
        spec.bias = Some(view);
        bias = Some(src);
    }
    Ok(MatmulKernel {
        spec,
        a: av,
        b: bv,
        bias,
    })
}

/// Folds `add(product, bias)` after an `mm`/`bmm` into the product's own bias (`beta = 1`),
/// when the add is the product's only use, no other kernel reads the bare product (one that
/// recomputes the add would: it is in `written`, the kernel's outputs), the add has
/// `alpha = 1` and the bias is read from outside `inside` (the kernel's nodes) and broadcasts to
/// the product's shape without broadcasting the product. Returns the add node, now computed
/// by the matmul; the sum is the same single rounding as the add's.
pub fn fold_bias(
    g: &Graph,
    k: &mut MatmulKernel,
    root: NodeId,
    inside: &std::collections::BTreeSet<NodeId>,
    written: &[ValueRef],
) -> Option<NodeId> {
    if k.spec.bias.is_some() {
        return None;
    }
    let product = ValueRef::new(root, 0);
    if g.outputs.contains(&product) || written.contains(&product) {
        return None;
    }
    let users: Vec<NodeId> = (0..g.nodes.len())
        .filter(|&i| {
            g.nodes[i]
                .args
                .iter()
                .any(|a| a.values().any(|v| v == product))
        })
        .collect();
    let [add] = users[..] else { return None };
    let n = &g.nodes[add];
    if n.op() != Some(Op::AddTensor) || !inside.contains(&add) {
        return None;
    }
    if !matches!(n.arg("alpha"), None | Some(Arg::Int(1))) {
        return None;
    }
    let (x, y) = (
        n.arg("self").and_then(Arg::as_tensor)?,
        n.arg("other").and_then(Arg::as_tensor)?,
    );
    let bias = match (x == product, y == product) {
        (true, false) => y,
        (false, true) => x,
        _ => return None,
    };
    let shape = static_shape(g, product)?;
    if inside.contains(&bias.node)
        || !is_f32_stored(g.ty(bias).dtype)
        || static_shape(g, ValueRef::new(add, 0))? != shape
    {
        return None;
    }
    let (src, view, _) = read_through(g, bias, false, |l| {
        let e = l.expand(&shape)?;
        match shape.len() {
            2 => as_operand(&e),
            _ => as_operand(&e.reshape(&[k.spec.batch, k.spec.m, k.spec.n])?),
        }
    })?;
    if inside.contains(&src.node) {
        return None;
    }
    k.spec.bias = Some(view);
    k.spec.beta = 1.0;
    k.bias = Some(src);
    Some(add)
}

/// `convolution` as a [`ConvKernel`]: 1-D or 2-D, not transposed, f32.
pub fn conv_spec(g: &Graph, node: NodeId) -> Result<ConvKernel, String> {
    let a = Args { g, node };
    if op_of(g, node)? != Op::Convolution {
        return Err(a.err("is not a convolution"));
    }
    if a.bool("transposed")? {
        return Err(a.err("transposed convolutions have no fast kernel"));
    }
    let (input, weight, bias) = (
        a.tensor("input")?,
        a.tensor("weight")?,
        a.opt_tensor("bias")?,
    );
    let xs = a.shape_of(input, DType::F32, "the input")?;
    let ws = a.shape_of(weight, DType::F32, "the weight")?;
    if let Some(b) = bias {
        let bs = a.shape_of(b, DType::F32, "the bias")?;
        if ws.first().is_none_or(|&c| bs != [c]) {
            return Err(a.err(format!("bias has shape {bs:?} for weight {ws:?}")));
        }
    }
    let one_d = match (xs.len(), ws.len()) {
        (4, 4) => false,
        (3, 3) => true,
        _ => {
            return Err(a.err(format!(
                "input {xs:?} and weight {ws:?}: only 1-D and 2-D convolutions have a fast kernel"
            )))
        }
    };
    let params = |name: &str| -> Result<[usize; 2], String> {
        let v = a.ints(name)?;
        let u = |x: i64| {
            usize::try_from(x).map_err(|_| a.err(format!("'{name}' {v:?} must be non-negative")))
        };
        let n = if one_d { 1 } else { 2 };
        let vals = match v.len() {
            1 => vec![u(v[0])?; n],
            l if l == n => v.iter().map(|&x| u(x)).collect::<Result<_, _>>()?,
            l => return Err(a.err(format!("'{name}' has {l} entries, expected 1 or {n}"))),
        };
        let unit = if name == "padding" { 0 } else { 1 };
        Ok(if one_d {
            [unit, vals[0]]
        } else {
            [vals[0], vals[1]]
        })
    };
    let (stride, padding, dilation) = (params("stride")?, params("padding")?, params("dilation")?);
    let groups = usize::try_from(a.int("groups")?).map_err(|_| a.err("groups must be positive"))?;
    let (x4, w4) = if one_d {
        ([xs[0], xs[1], 1, xs[2]], [ws[0], ws[1], 1, ws[2]])
    } else {
        ([xs[0], xs[1], xs[2], xs[3]], [ws[0], ws[1], ws[2], ws[3]])
    };
    let spec = ConvSpec::new(x4, w4, stride, padding, dilation, groups).map_err(|e| a.err(e))?;
    let out: Vec<usize> = if one_d {
        vec![spec.n, spec.cout, spec.ow]
    } else {
        vec![spec.n, spec.cout, spec.oh, spec.ow]
    };
    a.check_result(0, DType::F32, &out)?;
    Ok(ConvKernel {
        spec,
        input,
        weight,
        bias,
    })
}

/// `max_pool2d_with_indices`, `avg_pool2d` and `_adaptive_avg_pool2d` as a [`PoolKernel`]
/// (f32, input `[..., H, W]` with one or two leading dimensions).
pub fn pool_spec(g: &Graph, node: NodeId) -> Result<PoolKernel, String> {
    let op = op_of(g, node)?;
    let a = Args { g, node };
    if !matches!(
        op,
        Op::MaxPool2dWithIndices | Op::AvgPool2d | Op::AdaptiveAvgPool2d
    ) {
        return Err(a.err("is not a 2-D pooling"));
    }
    let input = a.tensor("self")?;
    let xs = a.shape_of(input, DType::F32, "the input")?;
    if xs.len() != 3 && xs.len() != 4 {
        return Err(a.err(format!(
            "input has shape {xs:?}, expected 3 or 4 dimensions"
        )));
    }
    let lead = xs.len() - 2;
    let planes: usize = xs[..lead].iter().product();
    let hw = [xs[lead], xs[lead + 1]];
    let spec = if op == Op::AdaptiveAvgPool2d {
        let o = a.pair("output_size", None)?;
        PoolSpec::adaptive(planes, hw, o)
    } else {
        let kernel = a.pair("kernel_size", None)?;
        let stride = a.pair("stride", Some(kernel))?;
        let padding = a.pair("padding", None)?;
        let ceil = a.bool("ceil_mode")?;
        if op == Op::MaxPool2dWithIndices {
            let dilation = a.pair("dilation", None)?;
            PoolSpec::new(
                PoolKind::Max,
                planes,
                hw,
                kernel,
                stride,
                padding,
                dilation,
                ceil,
            )
        } else {
            let kind = PoolKind::Avg {
                count_include_pad: a.bool("count_include_pad")?,
                divisor_override: a.opt_int("divisor_override")?,
            };
            PoolSpec::new(kind, planes, hw, kernel, stride, padding, [1, 1], ceil)
        }
    }
    .map_err(|e| a.err(e))?;
    let mut out = xs[..lead].to_vec();
    out.extend([spec.oh, spec.ow]);
    a.check_result(0, DType::F32, &out)?;
    let indices = op == Op::MaxPool2dWithIndices;
    if indices {
        a.check_result(1, DType::I64, &out)?;
    }
    Ok(PoolKernel {
        spec,
        input,
        indices,
    })
}

/// The spec of a `cat` node and its inputs (in order): every input of the result's element
/// type (f32, i64 or bool; a promoting `cat` is refused), viewed around the concatenated
/// dimension. A 1-D empty input, which `cat` skips whatever the others' rank, contributes
/// nothing.
pub fn concat_spec(g: &Graph, node: NodeId) -> Result<(ConcatSpec, Vec<ValueRef>), String> {
    let a = Args { g, node };
    let inputs: Vec<ValueRef> = match a.arg("tensors")? {
        Arg::Tensors(vs) => vs
            .iter()
            .copied()
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| a.err("a missing tensor in the list"))?,
        other => return Err(a.err(format!("'tensors' is a {}", other.kind_name()))),
    };
    let out = ValueRef::new(node, 0);
    let dtype = g.ty(out).dtype;
    if !(is_f32_stored(dtype) || matches!(dtype, DType::I64 | DType::Bool)) {
        return Err(a.err(format!(
            "result is {dtype}; the fast kernel copies f32, bf16, f16, i64 or bool"
        )));
    }
    let out_shape = a.shape_of(out, dtype, "the result")?;
    let dim = a.dim("dim", out_shape.len())?;
    let outer: usize = out_shape[..dim].iter().product();
    let inner: usize = out_shape[dim + 1..].iter().product();
    let mut runs = Vec::with_capacity(inputs.len());
    for (k, &v) in inputs.iter().enumerate() {
        let s = a.shape_of(v, dtype, &format!("input {k}"))?;
        let run = if s.iter().product::<usize>() == 0 {
            0
        } else if s.len() == out_shape.len() {
            s[dim] * inner
        } else {
            return Err(a.err(format!("input {k} has shape {s:?}, result {out_shape:?}")));
        };
        runs.push(run);
    }
    let spec = ConcatSpec { outer, runs };
    if spec.runs.iter().sum::<usize>() != out_shape[dim] * inner {
        return Err(a.err("the inputs do not add up to the result"));
    }
    Ok((spec, inputs))
}

/// `embedding` and `index_select` (any dimension) as a [`GatherKernel`] (f32 table, i64
/// indices).
pub fn gather_spec(g: &Graph, node: NodeId) -> Result<GatherKernel, String> {
    let op = op_of(g, node)?;
    let a = Args { g, node };
    let (table, indices, spec, out) = match op {
        Op::Embedding => {
            let (t, i) = (a.tensor("weight")?, a.tensor("indices")?);
            let ts = a.shape_of(t, DType::F32, "the weight")?;
            let is = a.shape_of(i, DType::I64, "the indices")?;
            if ts.len() != 2 {
                return Err(a.err(format!("weight has shape {ts:?}, expected a matrix")));
            }
            let spec = GatherSpec::embedding(ts[0], ts[1], is.iter().product());
            let mut out = is;
            out.push(ts[1]);
            (t, i, spec, out)
        }
        Op::IndexSelect => {
            let (t, i) = (a.tensor("self")?, a.tensor("index")?);
            let ts = a.shape_of(t, DType::F32, "self")?;
            let is = a.shape_of(i, DType::I64, "the index")?;
            if is.len() > 1 {
                return Err(a.err(format!("index has shape {is:?}, expected at most 1-D")));
            }
            let count: usize = is.iter().product();
            let rank = ts.len().max(1) as i64;
            let d = a.int("dim")?;
            let dim = if d < 0 { d + rank } else { d };
            if dim < 0 || dim >= rank {
                return Err(a.err(format!("dim {d} is out of range for rank {}", ts.len())));
            }
            let dim = dim as usize;
            if ts.is_empty() {
                (
                    t,
                    i,
                    GatherSpec {
                        outer: 1,
                        rows: 1,
                        inner: 1,
                        indices: count,
                        wrap: false,
                    },
                    vec![],
                )
            } else {
                let spec = GatherSpec {
                    outer: ts[..dim].iter().product(),
                    rows: ts[dim],
                    inner: ts[dim + 1..].iter().product(),
                    indices: count,
                    wrap: false,
                };
                let mut out = ts.clone();
                out[dim] = count;
                (t, i, spec, out)
            }
        }
        _ => return Err(a.err("is not embedding or index_select")),
    };
    a.check_result(0, DType::F32, &out)?;
    Ok(GatherKernel {
        spec,
        table,
        indices,
    })
}

/// A node of the index kernels as one step: the runtime kernel, the values it reads and the
/// node's results it writes (in the kernel's order).
#[derive(Clone, Debug, PartialEq)]
pub struct IndexKernel {
    /// The kernel.
    pub kernel: Kernel,
    /// Its sources.
    pub operands: Vec<ValueRef>,
    /// Its destinations.
    pub results: Vec<ValueRef>,
}

/// `(outer, len, inner)`: the products of the dimensions before `dim`, its size, and the
/// product of those after it.
fn lanes(shape: &[usize], dim: usize) -> (usize, usize, usize) {
    let p = |s: &[usize]| s.iter().product::<usize>();
    (p(&shape[..dim]), shape[dim], p(&shape[dim + 1..]))
}

/// The element type of a tensor a copying kernel moves (f32, i64 or bool).
fn copied_dtype(a: &Args<'_>, v: ValueRef, what: &str) -> Result<DType, String> {
    match a.g.ty(v).dtype {
        d if is_f32_stored(d) || matches!(d, DType::I64 | DType::Bool) => Ok(d),
        d => Err(a.err(format!(
            "{what} is {d}; the fast kernel copies f32, bf16, f16, i64 or bool"
        ))),
    }
}

/// `argmax`/`argmin` (`dim` given or none: the flattened input) and `max.dim`/`min.dim` of an
/// `f32` input, `cumsum` of `f32` or `i64`, `gather` along a dimension, and `index.Tensor` with
/// one `i64` index tensor after any number of full slices (`x[idx]`, `x[:, idx]`: a row
/// gather that wraps negative indices). Anything else, a 0-d input included, is refused
/// with the reason.
pub fn index_kernel(g: &Graph, node: NodeId) -> Result<IndexKernel, String> {
    let op = op_of(g, node)?;
    let a = Args { g, node };
    let res = |i: usize| ValueRef::new(node, i);
    let nonscalar = |s: &[usize]| {
        if s.is_empty() {
            Err(a.err("a 0-d input has no fast kernel"))
        } else {
            Ok(())
        }
    };
    let (kernel, operands, results) = match op {
        Op::Argmax | Op::Argmin | Op::MaxDim | Op::MinDim => {
            let values = matches!(op, Op::MaxDim | Op::MinDim);
            let x = a.tensor("self")?;
            let xs = a.shape_of(x, DType::F32, "self")?;
            nonscalar(&xs)?;
            let keep = a.bool("keepdim")?;
            let dim = if values {
                Some(a.dim("dim", xs.len())?)
            } else {
                match a.opt_int("dim")? {
                    Some(_) => Some(a.dim("dim", xs.len())?),
                    None => None,
                }
            };
            let ((outer, len, inner), out) = match dim {
                Some(d) => {
                    let mut out = xs.clone();
                    if keep {
                        out[d] = 1;
                    } else {
                        out.remove(d);
                    }
                    (lanes(&xs, d), out)
                }
                None => (
                    (1, xs.iter().product(), 1),
                    if keep { vec![1; xs.len()] } else { vec![] },
                ),
            };
            if len == 0 && outer * inner > 0 {
                return Err(a.err("reduces over a dimension of size zero"));
            }
            let max = matches!(op, Op::Argmax | Op::MaxDim);
            let spec = ArgSpec {
                outer,
                len,
                inner,
                max,
            };
            let results = if values {
                a.check_result(0, DType::F32, &out)?;
                a.check_result(1, DType::I64, &out)?;
                vec![res(0), res(1)]
            } else {
                a.check_result(0, DType::I64, &out)?;
                vec![res(0)]
            };
            (Kernel::ArgReduce(spec), vec![x], results)
        }
        Op::Cumsum => {
            let x = a.tensor("self")?;
            let dtype = g.ty(res(0)).dtype;
            if !(is_f32_stored(dtype) || dtype == DType::I64) || g.ty(x).dtype != dtype {
                return Err(a.err(format!(
                    "sums {} into {dtype}; the fast kernel sums f32 (bf16, f16) or i64 in their \
                     own type",
                    g.ty(x).dtype
                )));
            }
            let xs = a.shape_of(x, dtype, "self")?;
            nonscalar(&xs)?;
            let (outer, len, inner) = lanes(&xs, a.dim("dim", xs.len())?);
            a.check_result(0, dtype, &xs)?;
            let spec = ScanSpec { outer, len, inner };
            (Kernel::Cumsum(spec), vec![x], vec![res(0)])
        }
        Op::Gather => {
            let (x, i) = (a.tensor("self")?, a.tensor("index")?);
            let dtype = copied_dtype(&a, x, "self")?;
            let xs = a.shape_of(x, dtype, "self")?;
            let is = a.shape_of(i, DType::I64, "the index")?;
            nonscalar(&xs)?;
            let spec = GatherDimSpec {
                dim: a.dim("dim", xs.len())?,
                x_shape: xs,
                index_shape: is.clone(),
            };
            let n = is.iter().product();
            spec.validate(spec.x_shape.iter().product(), n, n)
                .map_err(|e| a.err(e))?;
            a.check_result(0, dtype, &is)?;
            (Kernel::GatherDim(spec), vec![x, i], vec![res(0)])
        }
        Op::IndexTensor => {
            let x = a.tensor("self")?;
            let dtype = copied_dtype(&a, x, "self")?;
            let xs = a.shape_of(x, dtype, "self")?;
            let list = match a.arg("indices")? {
                Arg::Tensors(vs) => vs,
                other => return Err(a.err(format!("'indices' is a {}", other.kind_name()))),
            };
            // Index tensors in adjacent dimensions, after full slices (`None`) only; trailing
            // full slices are the dimensions not listed.
            let p = list.iter().take_while(|v| v.is_none()).count();
            let k = list[p..].iter().take_while(|v| v.is_some()).count();
            if k == 0 || list[p + k..].iter().any(Option::is_some) || p + k > xs.len() {
                return Err(a.err(
                    "the fast kernels take index tensors in adjacent dimensions after full \
                     slices only",
                ));
            }
            if k > 1 {
                let idx: Vec<ValueRef> = list[p..p + k].iter().flatten().copied().collect();
                let mut shapes = vec![];
                for &i in &idx {
                    shapes.push(a.shape_of(i, DType::I64, "an index")?);
                }
                let rank = shapes.iter().map(Vec::len).max().unwrap_or(0);
                let mut bshape = vec![1usize; rank];
                for s in &shapes {
                    for (b, &d) in bshape[rank - s.len()..].iter_mut().zip(s) {
                        if *b == 1 {
                            *b = d;
                        } else if d != 1 && d != *b {
                            return Err(a.err(format!("index shapes {shapes:?} do not broadcast")));
                        }
                    }
                }
                let spec = GatherNdSpec {
                    outer: xs[..p].iter().product(),
                    dims: xs[p..p + k].to_vec(),
                    inner: xs[p + k..].iter().product(),
                    bshape: bshape.clone(),
                    index_shapes: shapes,
                };
                let out = [&xs[..p], &bshape[..], &xs[p + k..]].concat();
                a.check_result(0, dtype, &out)?;
                let mut operands = vec![x];
                operands.extend(idx);
                return Ok(IndexKernel {
                    kernel: Kernel::GatherNd(spec),
                    operands,
                    results: vec![res(0)],
                });
            }
            let Some(i) = list[p] else {
                unreachable!("k >= 1 index tensors at p")
            };
            let is = a.shape_of(i, DType::I64, "the index")?;
            let (outer, rows, inner) = lanes(&xs, p);
            let spec = GatherSpec {
                outer,
                rows,
                inner,
                indices: is.iter().product(),
                wrap: true,
            };
            let out = [&xs[..p], &is[..], &xs[p + 1..]].concat();
            a.check_result(0, dtype, &out)?;
            (Kernel::Gather(spec), vec![x, i], vec![res(0)])
        }
        _ => return Err(a.err("is not an index op")),
    };
    Ok(IndexKernel {
        kernel,
        operands,
        results,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fxhlo_ir::text::parse_graph;

    /// The last node of a parsed graph.
    fn last(text: &str) -> (Graph, NodeId) {
        let g = parse_graph(text).expect("graph parses");
        let n = g.nodes.len() - 1;
        (g, n)
    }

    #[test]
    fn linear_reads_the_weight_transposed_in_place() {
        let (g, n) = last(
            r#"graph {
  %x: f32[4, 3] = input
  %w: f32[5, 3] = parameter "fc.weight"
  %b: f32[5] = parameter "fc.bias"
  %t: f32[3, 5] = aten.permute.default(%w, dims=[1, 0])
  %y: f32[4, 5] = aten.addmm.default(%b, %x, %t, beta=2, alpha=0.5)
  return %y
}"#,
        );
        let k = matmul_spec(&g, n).unwrap();
        assert_eq!((k.spec.m, k.spec.n, k.spec.k), (4, 5, 3));
        assert_eq!(k.a, ValueRef::new(0, 0));
        assert_eq!(k.b, ValueRef::new(1, 0));
        assert_eq!(k.spec.b.row_stride, 1);
        assert_eq!(k.spec.b.col_stride, 3);
        assert_eq!(k.bias, Some(ValueRef::new(2, 0)));
        let bias = k.spec.bias.unwrap();
        assert_eq!((bias.row_stride, bias.col_stride), (0, 1));
        assert_eq!((k.spec.alpha, k.spec.beta), (0.5, 2.0));
        k.spec.validate(12, 15, Some(5), 20).unwrap();
    }

    #[test]
    fn attention_scores_look_through_view_and_permute() {
        // q @ k^T with k viewed from [2, 4, 8, 16] heads as [8, 16, 8] after a permute.
        let (g, n) = last(
            r#"graph {
  %q: f32[8, 8, 16] = input
  %k: f32[2, 4, 8, 16] = input
  %kv: f32[8, 8, 16] = aten.view.default(%k, size=[8, 8, 16])
  %kt: f32[8, 16, 8] = aten.permute.default(%kv, dims=[0, 2, 1])
  %s: f32[8, 8, 8] = aten.bmm.default(%q, %kt)
  return %s
}"#,
        );
        let k = matmul_spec(&g, n).unwrap();
        assert_eq!(k.b, ValueRef::new(1, 0));
        assert_eq!(
            (
                k.spec.b.batch_stride,
                k.spec.b.row_stride,
                k.spec.b.col_stride
            ),
            (128, 1, 16)
        );
        assert_eq!(k.spec.a, Operand::contiguous(8, 16));
    }

    #[test]
    fn attention_reads_scaled_heads_of_a_packed_projection_in_place() {
        // [seq 4, batch 2, 3 * heads 3 * dim 2]: q and k are selects of the projection with
        // batch * heads merged (two strides: groups of 3 heads) and scaled by numbers.
        let (g, n) = last(
            r#"graph {
  %y: f32[4, 2, 18] = input
  %v: f32[4, 2, 3, 6] = aten.view.default(%y, size=[4, 2, 3, 6])
  %u: f32[1, 4, 2, 3, 6] = aten.unsqueeze.default(%v, dim=0)
  %p: f32[3, 4, 2, 1, 6] = aten.permute.default(%u, dims=[3, 1, 2, 0, 4])
  %sq: f32[3, 4, 2, 6] = aten.squeeze.dims(%p, dim=[-2])
  %q: f32[4, 2, 6] = aten.select.int(%sq, dim=0, index=0)
  %k: f32[4, 2, 6] = aten.select.int(%sq, dim=0, index=1)
  %qv: f32[4, 6, 2] = aten.view.default(%q, size=[4, 6, 2])
  %qt: f32[6, 4, 2] = aten.permute.default(%qv, dims=[1, 0, 2])
  %qs: f32[6, 4, 2] = aten.mul.Scalar(%qt, other=0.5)
  %kv: f32[4, 6, 2] = aten.view.default(%k, size=[4, 6, 2])
  %kt: f32[6, 2, 4] = aten.permute.default(%kv, dims=[1, 2, 0])
  %ks: f32[6, 2, 4] = aten.mul.Scalar(%kt, other=0.25)
  %s: f32[6, 4, 4] = aten.bmm.default(%qs, %ks)
  return %s
}"#,
        );
        let k = matmul_spec(&g, n).unwrap();
        assert_eq!((k.a, k.b), (ValueRef::new(0, 0), ValueRef::new(0, 0)));
        let grouped = |offset, row_stride, col_stride| Operand {
            offset,
            batch_stride: 2,
            row_stride,
            col_stride,
            group: 3,
            group_stride: 18,
        };
        assert_eq!(k.spec.a, grouped(0, 36, 1));
        assert_eq!(k.spec.b, grouped(6, 1, 36));
        assert_eq!(k.spec.alpha, 0.125);
        k.spec.validate(144, 144, None, 96).unwrap();
    }

    #[test]
    fn view_of_a_permutation_that_needs_a_copy_reads_the_permutation() {
        // [2, 3, 4] permuted to [3, 2, 4] then flattened to [6, 4]: not a strided view.
        let (g, n) = last(
            r#"graph {
  %x: f32[2, 3, 4] = input
  %y: f32[5, 4] = input
  %p: f32[3, 2, 4] = aten.permute.default(%x, dims=[1, 0, 2])
  %v: f32[6, 4] = aten.view.default(%p, size=[6, 4])
  %t: f32[4, 5] = aten.permute.default(%y, dims=[1, 0])
  %m: f32[6, 5] = aten.mm.default(%v, %t)
  return %m
}"#,
        );
        let k = matmul_spec(&g, n).unwrap();
        assert_eq!(k.a, ValueRef::new(2, 0));
        assert_eq!(
            k.spec.a,
            Operand {
                offset: 0,
                batch_stride: 0,
                row_stride: 4,
                col_stride: 1,
                ..Operand::default()
            }
        );
        assert_eq!(k.b, ValueRef::new(1, 0));
    }

    #[test]
    fn bmm_of_an_expanded_operand_has_batch_stride_zero() {
        let (g, n) = last(
            r#"graph {
  %x: f32[3, 4, 5] = input
  %w: f32[5, 6] = input
  %u: f32[1, 5, 6] = aten.unsqueeze.default(%w, dim=0)
  %e: f32[3, 5, 6] = aten.expand.default(%u, size=[3, 5, 6])
  %m: f32[3, 4, 6] = aten.bmm.default(%x, %e)
  return %m
}"#,
        );
        let k = matmul_spec(&g, n).unwrap();
        assert_eq!(k.b, ValueRef::new(1, 0));
        assert_eq!(
            k.spec.b,
            Operand {
                offset: 0,
                batch_stride: 0,
                row_stride: 6,
                col_stride: 1,
                ..Operand::default()
            }
        );
    }

    #[test]
    fn conv_pool_and_gather_specs() {
        let (g, n) = last(
            r#"graph {
  %x: f32[2, 3, 16, 16] = input
  %w: f32[8, 3, 3, 3] = parameter "w"
  %b: f32[8] = parameter "b"
  %y: f32[2, 8, 8, 8] = aten.convolution.default(%x, %w, %b, stride=[2, 2], padding=[1, 1], dilation=[1, 1], transposed=false, output_padding=[0, 0], groups=1)
  return %y
}"#,
        );
        let c = conv_spec(&g, n).unwrap();
        assert_eq!((c.spec.oh, c.spec.ow, c.spec.cout), (8, 8, 8));
        assert_eq!(c.bias, Some(ValueRef::new(2, 0)));

        let (g, n) = last(
            r#"graph {
  %x: f32[2, 4, 9, 9] = input
  %p: f32[2, 4, 5, 5], %i: i64[2, 4, 5, 5] = aten.max_pool2d_with_indices.default(%x, kernel_size=[3, 3], stride=[2, 2], padding=[1, 1])
  return %p, %i
}"#,
        );
        let p = pool_spec(&g, n).unwrap();
        assert!(p.indices);
        assert_eq!((p.spec.planes, p.spec.oh, p.spec.ow), (8, 5, 5));

        let (g, n) = last(
            r#"graph {
  %w: f32[10, 4] = parameter "emb"
  %i: i64[2, 3] = input
  %e: f32[2, 3, 4] = aten.embedding.default(%w, %i)
  return %e
}"#,
        );
        let e = gather_spec(&g, n).unwrap();
        assert_eq!(e.spec, GatherSpec::embedding(10, 4, 6));

        let (g, n) = last(
            r#"graph {
  %x: f32[3, 7, 5] = input
  %i: i64[4] = input
  %s: f32[3, 4, 5] = aten.index_select.default(%x, %i, dim=-2)
  return %s
}"#,
        );
        let s = gather_spec(&g, n).unwrap();
        assert_eq!(
            s.spec,
            GatherSpec {
                outer: 3,
                rows: 7,
                inner: 5,
                indices: 4,
                wrap: false
            }
        );
    }

    #[test]
    fn refusals_are_errors() {
        let (g, n) = last(
            r#"graph {
  %x: f32[1, 4, 5, 5] = input
  %w: f32[4, 2, 3, 3] = input
  %y: f32[1, 2, 7, 7] = aten.convolution.default(%x, %w, bias=none, stride=[1, 1], padding=[0, 0], dilation=[1, 1], transposed=true, output_padding=[0, 0], groups=1)
  return %y
}"#,
        );
        assert!(conv_spec(&g, n).unwrap_err().contains("transposed"));
        assert!(matmul_spec(&g, n).is_err());
        assert!(matmul_spec(&g, 0).is_err());
        let (g, n) = last(
            r#"graph {
  %x: f64[4, 3] = input
  %y: f64[3, 2] = input
  %m: f64[4, 2] = aten.mm.default(%x, %y)
  return %m
}"#,
        );
        assert!(matmul_spec(&g, n).unwrap_err().contains("dtype"));
    }

    /// The index kernels' geometry from their nodes, and what they refuse (with the node
    /// named): a 0-d input, index tensors that are not adjacent, an i32 index, a promoting
    /// `cumsum`.
    #[test]
    fn index_specs_and_refusals() {
        let text = r#"graph {
  %x: f32[2, 3, 4] = input
  %i: i64[5] = input
  %j: i64[2, 2, 4] = input
  %m: i32[2] = input
  %s: f32[] = input
  %xi: i64[2, 3, 4] = input
  %am: i64[2, 4] = aten.argmax.default(%x, dim=-2)
  %an: i64[1, 1, 1] = aten.argmin.default(%x, dim=none, keepdim=true)
  md: %mv: f32[2, 3], %mi: i64[2, 3] = aten.max.dim(%x, dim=2)
  %cs: f32[2, 3, 4] = aten.cumsum.default(%x, dim=1)
  %g: f32[2, 2, 4] = aten.gather.default(%x, dim=1, index=%j)
  %ix: f32[2, 5, 4] = aten.index.Tensor(%x, [none, %i])
  %a0: i64[] = aten.argmax.default(%s, dim=none)
  %i2: f32[5] = aten.index.Tensor(%x, [%i, %i, %i])
  %in: f32[5, 3] = aten.index.Tensor(%x, [%i, none, %i])
  %im: f32[2, 3, 4] = aten.index.Tensor(%x, [%m])
  %cf: f32[2, 3, 4] = aten.cumsum.default(%xi, dim=0, dtype=f32)
  return %am, %an, %mv, %mi, %cs, %g, %ix, %a0, %i2, %in, %im, %cf
}"#;
        let g = parse_graph(text).expect("graph parses");
        let at = |name: &str| g.nodes.iter().position(|n| n.name == name).unwrap();
        let k = |name: &str| index_kernel(&g, at(name));
        let arg = |o, l, i, max| ArgSpec {
            outer: o,
            len: l,
            inner: i,
            max,
        };
        assert_eq!(
            k("am").unwrap().kernel,
            Kernel::ArgReduce(arg(2, 3, 4, true))
        );
        assert_eq!(
            k("an").unwrap().kernel,
            Kernel::ArgReduce(arg(1, 24, 1, false))
        );
        let md = k("md").unwrap();
        assert_eq!(md.kernel, Kernel::ArgReduce(arg(6, 4, 1, true)));
        assert_eq!(md.results.len(), 2);
        let scan = ScanSpec {
            outer: 2,
            len: 3,
            inner: 4,
        };
        assert_eq!(k("cs").unwrap().kernel, Kernel::Cumsum(scan));
        let g_spec = GatherDimSpec {
            x_shape: vec![2, 3, 4],
            index_shape: vec![2, 2, 4],
            dim: 1,
        };
        assert_eq!(k("g").unwrap().kernel, Kernel::GatherDim(g_spec));
        let rows = GatherSpec {
            outer: 2,
            rows: 3,
            inner: 4,
            indices: 5,
            wrap: true,
        };
        assert_eq!(k("ix").unwrap().kernel, Kernel::Gather(rows));
        let nd = GatherNdSpec {
            outer: 1,
            dims: vec![2, 3, 4],
            inner: 1,
            bshape: vec![5],
            index_shapes: vec![vec![5]; 3],
        };
        assert_eq!(k("i2").unwrap().kernel, Kernel::GatherNd(nd));
        for (name, why) in [
            ("a0", "0-d"),
            ("in", "adjacent"),
            ("im", "dtype i32"),
            ("cf", "sums i64 into f32"),
        ] {
            let e = k(name).unwrap_err();
            assert!(
                e.contains(&format!("'{name}'")) && e.contains(why),
                "{name}: {e}"
            );
        }
    }

    /// Runs the last node of `text` through the fast matmul reading the looked-through
    /// sources, and compares with the interpreter (user inputs only, filled by index).
    fn check_matmul_numerics(text: &str) {
        use fxhlo_runtime::fast::gemm::matmul;
        use fxhlo_runtime::{eval, Options, Tensor};
        let (g, n) = last(text);
        let k = matmul_spec(&g, n).unwrap();
        let mut inputs = std::collections::BTreeMap::new();
        let mut data = std::collections::BTreeMap::new();
        for (i, node) in g.nodes.iter().enumerate() {
            if matches!(node.kind, NodeKind::Input { .. }) {
                let v = ValueRef::new(i, 0);
                let shape = static_shape(&g, v).unwrap();
                let len: usize = shape.iter().product();
                let vals: Vec<f64> = (0..len)
                    .map(|j| ((j * 7 + i * 3) % 11) as f64 - 5.0)
                    .collect();
                data.insert(v, vals.iter().map(|&x| x as f32).collect::<Vec<f32>>());
                inputs.insert(
                    node.name.clone(),
                    Tensor::from_f64s(DType::F32, shape, vals),
                );
            }
        }
        let model = fxhlo_ir::Model {
            graph: g.clone(),
            weights: Default::default(),
        };
        let want = eval(&model, &inputs, &Options::default())
            .unwrap()
            .remove(0)
            .f64s();
        // Every source the kernel reads must be a graph input here.
        let buf = |v: ValueRef| {
            data.get(&v)
                .unwrap_or_else(|| panic!("{v:?} is not an input"))
        };
        let mut c = vec![0.0f32; k.spec.out_len().unwrap()];
        let bias = k.bias.map(|v| &buf(v)[..]);
        matmul(&k.spec, buf(k.a), buf(k.b), bias, &mut c, &|_| {}).unwrap();
        let got: Vec<f64> = c.iter().map(|&x| x as f64).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn looked_through_operands_compute_the_same_product() {
        check_matmul_numerics(
            r#"graph {
  %q: f32[2, 3, 4, 5] = input
  %k: f32[2, 3, 6, 5] = input
  %qv: f32[6, 4, 5] = aten.view.default(%q, size=[6, 4, 5])
  %kp: f32[2, 3, 5, 6] = aten.permute.default(%k, dims=[0, 1, 3, 2])
  %kv: f32[6, 5, 6] = aten.view.default(%kp, size=[6, 5, 6])
  %s: f32[6, 4, 6] = aten.bmm.default(%qv, %kv)
  return %s
}"#,
        );
        check_matmul_numerics(
            r#"graph {
  %x: f32[2, 3, 4] = input
  %w: f32[5, 4] = input
  %b: f32[5] = input
  %xv: f32[6, 4] = aten.view.default(%x, size=[6, 4])
  %t: f32[4, 5] = aten.permute.default(%w, dims=[1, 0])
  %y: f32[6, 5] = aten.addmm.default(%b, %xv, %t, beta=0.5, alpha=2)
  return %y
}"#,
        );
        check_matmul_numerics(
            r#"graph {
  %x: f32[4, 3] = input
  %w: f32[3, 5] = input
  %b: f32[4, 1] = input
  %y: f32[4, 5] = aten.addmm.default(%b, %x, %w)
  return %y
}"#,
        );
    }

    #[test]
    fn one_d_convolution_is_2d_with_unit_height() {
        let (g, n) = last(
            r#"graph {
  %x: f32[2, 3, 10] = input
  %w: f32[4, 3, 3] = input
  %y: f32[2, 4, 5] = aten.convolution.default(%x, %w, bias=none, stride=[2], padding=[1], dilation=[1], transposed=false, output_padding=[0], groups=1)
  return %y
}"#,
        );
        let c = conv_spec(&g, n).unwrap();
        assert_eq!((c.spec.h, c.spec.kh, c.spec.oh, c.spec.ow), (1, 1, 1, 5));
        assert_eq!((c.spec.stride, c.spec.padding), ([1, 2], [0, 1]));
    }
}
