//! Builds a [`RowReduce`] from a fusion kernel whose root is a reduction.
//!
//! The reduction's input becomes the prologue expression, iterated with the kept dimensions
//! outermost and the reduced ones innermost (a permuted order for reductions over leading
//! dimensions). Every kernel output other than the root's own results becomes an epilogue
//! expression over its shape, where the root's results and its input rows are read from the
//! kernel's scratch slots; one that reads neither is run on its own over the whole output.
//!
//! Several reduction kernels over the same rows, each read only by the later ones (a layer
//! norm feeding a softmax, the `any` guard of a softmax), compile as one [`RowReduce`] of
//! several stages ([`build_chain`]): the earlier kernels' outputs stay in per-block scratch.

use super::expr::{build as build_expr, build_permuted, build_with, describe, is_f32_stored};
use super::Slots;
use fxhlo_ir::{Arg, DType, Graph, NodeId, NodeKind, Op, ValueRef};
use fxhlo_passes::fusion::{Kernel, KernelKind};
use fxhlo_runtime::fast::expr::{Expr, LeafSrc};
use fxhlo_runtime::fast::reduce::{ReduceOp, RowOut, RowReduce, RowStage};
use std::collections::{BTreeMap, BTreeSet};

/// Placeholder slot of scratch buffer `k` until the operand count is known.
fn placeholder(k: u32) -> u32 {
    u32::MAX - k
}

/// Scratch buffers a stage can name: its input rows, three results, and the outputs of the
/// earlier stages.
const MAX_SCRATCH: u32 = 64;

/// Scratch slots `0..OWN` of a stage are its own input rows and results; `OWN + j` is output
/// `j` of the earlier stages.
const OWN: u32 = 4;

fn is_placeholder(slot: u32) -> bool {
    slot > u32::MAX - MAX_SCRATCH
}

fn shape(g: &Graph, v: ValueRef) -> Result<Vec<usize>, String> {
    g.ty(v)
        .shape
        .iter()
        .map(|d| d.as_static().and_then(|n| usize::try_from(n).ok()))
        .collect::<Option<Vec<usize>>>()
        .ok_or_else(|| format!("{}: symbolic shape", describe(g, v.node)))
}

fn norm_dim(d: i64, rank: usize) -> Option<usize> {
    fxhlo_ir::infer::norm_dim(d, rank).ok()
}

/// Compiles a fusion kernel of kind [`KernelKind::Reduction`] whole: `dsts[j]` of
/// [`run_row_reduce`](fxhlo_runtime::fast::reduce::run_row_reduce) is `k.outputs[j]`, and
/// `srcs[i]` is `slots.values[i]`. Returns Err (the caller falls back) for reductions,
/// dimensions, dtypes or epilogues it cannot compile.
pub fn build(g: &Graph, k: &Kernel, slots: &mut Slots) -> Result<RowReduce, String> {
    build_chain(g, &[k], slots)
}

/// Compiles reduction kernels over the same rows as the stages of one kernel, in order: the
/// outputs of every kernel but the last stay in scratch, where the later ones read them, and
/// `dsts[j]` is `ks.last().outputs[j]`. The caller checks that nothing else reads those
/// outputs; Err where the rows differ or a later kernel does not read them row by row.
///
/// PyTorch's guard of an attention softmax, `where(!any(x != -inf), 0, softmax(x))`, becomes
/// one [`ReduceOp::SafeSoftmax`] stage: the `any` kernel runs no stage of its own, where the
/// softmax kernel reads its result only through that `where`.
pub fn build_chain(g: &Graph, ks: &[&Kernel], slots: &mut Slots) -> Result<RowReduce, String> {
    let guards = masked_row_guards(g, ks);
    if !guards.is_empty() {
        let before = slots.clone();
        if let Ok(rr) = build_stages(g, ks, slots, &guards) {
            return Ok(rr);
        }
        *slots = before;
    }
    build_stages(g, ks, slots, &BTreeMap::new())
}

/// The kernels before the last of `ks` that compute PyTorch's all-masked-row guard, `any(x !=
/// -inf)` over the last dim with `keepdim` (as `logical_not(eq(x, -inf))` or `ne(x, -inf)`) and
/// nothing else: their output, and `x`.
fn masked_row_guards(g: &Graph, ks: &[&Kernel]) -> BTreeMap<ValueRef, ValueRef> {
    let mut guards = BTreeMap::new();
    for k in ks.iter().take(ks.len().saturating_sub(1)) {
        let root = &g.nodes[k.root];
        let out = ValueRef::new(k.root, 0);
        if !matches!(root.op(), Some(Op::AnyDim | Op::AnyDims)) || k.outputs != [out] {
            continue;
        }
        let Some(t) = root.arg("self").and_then(Arg::as_tensor) else {
            continue;
        };
        let rank = g.ty(t).shape.len();
        let last_dim = match root.arg("dim") {
            Some(Arg::Int(d)) => norm_dim(*d, rank) == Some(rank.saturating_sub(1)),
            Some(Arg::Ints(ds)) => {
                ds.len() == 1 && norm_dim(ds[0], rank) == Some(rank.saturating_sub(1))
            }
            _ => false,
        };
        if !last_dim || !matches!(root.arg("keepdim"), Some(Arg::Bool(true))) {
            continue;
        }
        let is_neg_inf = |n: &fxhlo_ir::Node| matches!(n.arg("other"), Some(Arg::Float(f)) if *f == f64::NEG_INFINITY);
        let tn = &g.nodes[t.node];
        let x = match tn.op() {
            Some(Op::NeScalar) if is_neg_inf(tn) => tn.arg("self").and_then(Arg::as_tensor),
            Some(Op::LogicalNot) => tn
                .arg("self")
                .and_then(Arg::as_tensor)
                .map(|e| &g.nodes[e.node])
                .filter(|e| e.op() == Some(Op::EqScalar) && is_neg_inf(e))
                .and_then(|e| e.arg("self").and_then(Arg::as_tensor)),
            _ => None,
        };
        if let Some(x) = x.filter(|x| is_f32_stored(g.ty(*x).dtype)) {
            guards.insert(out, x);
        }
    }
    guards
}

/// The guard `a` where `o` is `where(logical_not(a), 0, sm)` with `guards[a] == x`: the
/// guarded softmax `sm` of `x`.
fn safe_softmax_guard(
    g: &Graph,
    o: ValueRef,
    sm: ValueRef,
    x: ValueRef,
    guards: &BTreeMap<ValueRef, ValueRef>,
) -> Option<ValueRef> {
    let n = &g.nodes[o.node];
    if n.op() != Some(Op::WhereSelf) || o.index != 0 || g.ty(o).shape != g.ty(sm).shape {
        return None;
    }
    let arg = |name: &str| n.arg(name).and_then(Arg::as_tensor);
    let (c, z, v) = (arg("condition")?, arg("self")?, arg("other")?);
    let zn = &g.nodes[z.node];
    let zero = matches!(zn.op(), Some(Op::Full | Op::FullLike))
        && matches!(
            zn.arg("fill_value"),
            Some(Arg::Int(0)) | Some(Arg::Float(0.0))
        );
    let cn = &g.nodes[c.node];
    if v != sm || !zero || cn.op() != Some(Op::LogicalNot) {
        return None;
    }
    cn.arg("self")
        .and_then(Arg::as_tensor)
        .filter(|a| guards.get(a) == Some(&x))
}

fn build_stages(
    g: &Graph,
    ks: &[&Kernel],
    slots: &mut Slots,
    guards: &BTreeMap<ValueRef, ValueRef>,
) -> Result<RowReduce, String> {
    let mut carried: BTreeMap<ValueRef, u32> = BTreeMap::new();
    let mut stages = vec![];
    let mut rows = None;
    let mut used = BTreeSet::new();
    for (i, k) in ks.iter().enumerate() {
        if guards.contains_key(&ValueRef::new(k.root, 0)) {
            continue;
        }
        let (st, r) = stage(g, k, slots, &carried, guards, &mut used)?;
        if rows.is_some_and(|x| x != r) {
            return Err(format!(
                "{}: its rows are not those of the reduction before it",
                describe(g, k.root)
            ));
        }
        rows = Some(r);
        if i + 1 < ks.len() {
            for &o in &k.outputs {
                let j = carried.len() as u32;
                if OWN + j >= MAX_SCRATCH {
                    return Err("too many values kept between reductions".into());
                }
                carried.insert(o, placeholder(OWN + j));
            }
        }
        stages.push(st);
    }
    // Every guard went into a safe softmax, and none is read as an operand.
    if used.len() != guards.len() || slots.values.iter().any(|v| guards.contains_key(v)) {
        return Err("the masked-row guard is read other than by its softmax".into());
    }
    let n = slots.values.len() as u32;
    let remap = |e: &mut Expr| {
        e.map_slots(|s| {
            if is_placeholder(s) {
                n + (u32::MAX - s)
            } else {
                s
            }
        })
    };
    for st in stages.iter_mut() {
        remap(&mut st.prologue);
        for o in st.outputs.iter_mut() {
            if let RowOut::Rows { expr } = o {
                remap(expr);
            }
        }
    }
    let rr = RowReduce {
        rows: rows.unwrap_or(0),
        stages,
    };
    let last = ks.last().map_or(0, |k| k.root);
    rr.check_structure(n as usize)
        .map_err(|m| format!("{}: {m}", describe(g, last)))?;
    Ok(rr)
}

/// One stage from a reduction kernel, with its rows; values of `carried` (outputs of earlier
/// stages) are read from their scratch placeholders.
fn stage(
    g: &Graph,
    k: &Kernel,
    slots: &mut Slots,
    carried: &BTreeMap<ValueRef, u32>,
    guards: &BTreeMap<ValueRef, ValueRef>,
    used: &mut BTreeSet<ValueRef>,
) -> Result<(RowStage, usize), String> {
    if k.kind != KernelKind::Reduction {
        return Err(format!(
            "kernel of {} is not a reduction",
            describe(g, k.root)
        ));
    }
    let ri = k.root;
    let node = &g.nodes[ri];
    let err = |m: &str| format!("{}: {m}", describe(g, ri));
    let NodeKind::Op(op) = node.kind else {
        return Err(err("not an op"));
    };
    let input_name = if op == Op::NativeLayerNorm {
        "input"
    } else {
        "self"
    };
    let x = node
        .arg(input_name)
        .and_then(Arg::as_tensor)
        .ok_or_else(|| err("no input tensor"))?;
    // `any` reads bools (or floats) and gives bools; every other reduction reads and writes
    // f32, or bf16 and f16 (stored widened, computed in f32, results rounded when stored).
    let is_any = matches!(op, Op::Any | Op::AnyDim | Op::AnyDims);
    let in_dtype = g.ty(x).dtype;
    let in_ok = is_f32_stored(in_dtype) || is_any && in_dtype == DType::Bool;
    if !in_ok {
        return Err(err(&format!("the input is {in_dtype}")));
    }
    for (r, t) in node.results.iter().enumerate() {
        let ok = if is_any {
            t.dtype == DType::Bool
        } else {
            is_f32_stored(t.dtype)
        };
        if !ok {
            let want = if is_any { "bool" } else { "f32, bf16 or f16" };
            return Err(err(&format!("result {r} is {}, not {want}", t.dtype)));
        }
    }
    let xs = shape(g, x)?;
    let rank = xs.len();
    let dtype_ok = match node.arg("dtype") {
        None | Some(Arg::None) => true,
        Some(Arg::DType(d)) => is_f32_stored(*d),
        _ => false,
    };
    if !dtype_ok {
        return Err(err("accumulation dtype other than f32"));
    }
    // Which dims are reduced, and the op.
    let dims_arg = |name: &str| -> Result<Vec<usize>, String> {
        let list = match node.arg(name) {
            Some(Arg::Ints(v)) => v.clone(),
            Some(Arg::Int(v)) => vec![*v],
            None | Some(Arg::None) => vec![],
            Some(_) => return Err(err("bad dim argument")),
        };
        if list.is_empty() {
            return Ok((0..rank).collect());
        }
        let mut ds = vec![];
        for d in list {
            let d = norm_dim(d, rank).ok_or_else(|| err("dimension out of range"))?;
            if rank > 0 && !ds.contains(&d) {
                ds.push(d);
            }
        }
        Ok(ds)
    };
    let scalar = |name: &str| -> Option<f64> {
        match node.arg(name) {
            Some(Arg::Int(i)) => Some(*i as f64),
            Some(Arg::Float(f)) => Some(*f),
            Some(Arg::Bool(b)) => Some(*b as i64 as f64),
            _ => None,
        }
    };
    let (rop, red): (ReduceOp, Vec<usize>) = match op {
        Op::SumDimIntList => (ReduceOp::Sum, dims_arg("dim")?),
        Op::MeanDim => (ReduceOp::Mean, dims_arg("dim")?),
        Op::Mean => (ReduceOp::Mean, (0..rank).collect()),
        Op::Amax => (ReduceOp::Max, dims_arg("dim")?),
        Op::Amin => (ReduceOp::Min, dims_arg("dim")?),
        Op::Any => (ReduceOp::Any, (0..rank).collect()),
        Op::AnyDim | Op::AnyDims => (ReduceOp::Any, dims_arg("dim")?),
        Op::VarCorrection => (
            ReduceOp::Var {
                correction: scalar("correction").unwrap_or(1.0),
            },
            dims_arg("dim")?,
        ),
        Op::VarDim => {
            let unbiased = !matches!(node.arg("unbiased"), Some(Arg::Bool(false)));
            (
                ReduceOp::Var {
                    correction: if unbiased { 1.0 } else { 0.0 },
                },
                dims_arg("dim")?,
            )
        }
        Op::Softmax | Op::LogSoftmax => {
            let d = match node.arg("dim") {
                Some(Arg::Int(d)) => norm_dim(*d, rank).ok_or_else(|| err("bad dim"))?,
                _ => return Err(err("bad dim")),
            };
            if rank > 0 && d != rank - 1 {
                return Err(err("softmax over a dimension other than the last"));
            }
            let o = if op == Op::Softmax {
                ReduceOp::Softmax
            } else {
                ReduceOp::LogSoftmax
            };
            (o, if rank > 0 { vec![rank - 1] } else { vec![] })
        }
        Op::NativeLayerNorm => {
            let ns = match node.arg("normalized_shape") {
                Some(Arg::Ints(v)) => v.clone(),
                Some(Arg::Int(v)) => vec![*v],
                _ => return Err(err("bad normalized_shape")),
            };
            if ns.len() > rank
                || ns
                    .iter()
                    .zip(&xs[rank - ns.len()..])
                    .any(|(&a, &b)| a != b as i64)
            {
                return Err(err(
                    "normalized_shape does not match the trailing dimensions",
                ));
            }
            let eps = match node.arg("eps") {
                Some(Arg::Float(f)) => *f,
                Some(Arg::Int(i)) => *i as f64,
                _ => return Err(err("bad eps")),
            };
            (
                ReduceOp::LayerNorm { eps },
                (rank - ns.len()..rank).collect(),
            )
        }
        _ => return Err(err("this reduction has no fast kernel")),
    };
    let kept: Vec<usize> = (0..rank).filter(|d| !red.contains(d)).collect();
    let mut red_sorted = red.clone();
    red_sorted.sort_unstable();
    let perm: Vec<usize> = kept.iter().chain(&red_sorted).copied().collect();
    let identity = perm.iter().enumerate().all(|(i, &p)| i == p);
    let rows: usize = kept.iter().map(|&d| xs[d]).product();
    let len: usize = red_sorted.iter().map(|&d| xs[d]).product();

    let members: BTreeSet<NodeId> = k.nodes.iter().chain(&k.recomputed).copied().collect();
    let prologue = build_permuted(g, &members, x, &perm, slots, carried)?;
    // Layer norm's weight and bias over a row.
    let (mut weight, mut bias) = (None, None);
    if op == Op::NativeLayerNorm {
        let row_shape: Vec<usize> = red_sorted.iter().map(|&d| xs[d]).collect();
        for (name, slot) in [("weight", &mut weight), ("bias", &mut bias)] {
            if let Some(Arg::Tensor(t)) = node.arg(name) {
                if shape(g, *t)? != row_shape {
                    return Err(err(&format!("{name} does not have the normalized shape")));
                }
                *slot = Some(build_expr(g, &members, &[*t], &row_shape, slots)?);
            }
        }
    }
    // Outputs.
    let mut subst: BTreeMap<ValueRef, u32> = carried.clone();
    if identity {
        subst.insert(x, placeholder(0));
    }
    for r in 0..node.results.len() {
        subst.insert(ValueRef::new(ri, r), placeholder(1 + r as u32));
    }
    // A softmax read only through the masked-row guard's `where`s: a safe softmax, whose
    // result 0 is each of those `where`s.
    let sm = ValueRef::new(ri, 0);
    let mut rop = rop;
    // Each such `where` and its guard.
    let wheres: BTreeMap<ValueRef, ValueRef> = members
        .iter()
        .map(|&i| ValueRef::new(i, 0))
        .filter_map(|w| Some((w, safe_softmax_guard(g, w, sm, x, guards)?)))
        .collect();
    let reads_sm = |i: &NodeId| {
        g.nodes[*i]
            .args
            .iter()
            .flat_map(|a| a.values())
            .any(|v| v == sm)
    };
    if rop == ReduceOp::Softmax
        && !wheres.is_empty()
        && !k.outputs.contains(&sm)
        && members
            .iter()
            .filter(|i| reads_sm(i))
            .all(|&i| wheres.contains_key(&ValueRef::new(i, 0)))
    {
        rop = ReduceOp::SafeSoftmax;
        for (&w, &a) in &wheres {
            subst.insert(w, placeholder(1));
            used.insert(a);
        }
    }
    let mut outputs = vec![];
    for &o in &k.outputs {
        if o.node == ri {
            outputs.push(RowOut::Result(o.index as u32));
            continue;
        }
        if rop == ReduceOp::SafeSoftmax && wheres.contains_key(&o) {
            outputs.push(RowOut::Result(0));
            continue;
        }
        let os = shape(g, o)?;
        // Where o is the reduction's input itself, read it back from the rows.
        let expr = build_with(g, &members, &[o], &os, slots, &subst)?;
        let scratch = expr
            .leaves()
            .iter()
            .any(|l| matches!(l.src, LeafSrc::Slot { slot, .. } if is_placeholder(slot)));
        outputs.push(if scratch {
            RowOut::Rows { expr }
        } else {
            RowOut::Whole { expr }
        });
    }
    Ok((
        RowStage {
            op: rop,
            len,
            prologue,
            weight,
            bias,
            outputs,
        },
        rows,
    ))
}
