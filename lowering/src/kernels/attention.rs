//! Attention steps: an attention composite (see [`fxhlo_passes::composite`]) whose fusion
//! kernels can be replaced as a whole becomes one step of the fused attention kernel
//! ([`fxhlo_runtime::fast::attention`]), so that its scores never reach memory.
//!
//! What is fused: `bmm(softmax(bmm(q, k) * s + mask, -1), v)`, the `bmm`s read through views
//! (heads of a packed projection in place), `s` any product of `mul`/`div` by numbers (folded
//! with the operands' own), `mask` an optional `f32` tensor that broadcasts to the scores, and
//! the optional `where(all(scores == -inf), 0, softmax)` guard of `torch`'s decomposition
//! (checked node by node). The result is written where a view chain after it (a `view` then
//! `permute`, as before an output projection) wants it, when the next matmul reads that view
//! as its operand, which saves the copy the permutation would need. Anything else stays with
//! the separate matmul and softmax steps.

use super::dense::{as_operand, matmul_spec, static_shape};
use super::expr::is_f32_stored;
use super::layout::Layout;
use fxhlo_ir::{Arg, DType, Graph, NodeId, NodeKind, Op, Users, ValueRef};
use fxhlo_passes::composite::{Composite, CompositeKind};
use fxhlo_passes::fusion::FusionPlan;
use fxhlo_runtime::fast::attention::AttentionSpec;
use fxhlo_runtime::fast::gemm::Operand;
use std::collections::BTreeSet;

/// An attention that replaces some kernels of a fusion plan.
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionGroup {
    /// The plan's kernels it replaces, in plan order; the step runs in place of the last.
    pub kernels: Vec<usize>,
    /// The kernel.
    pub spec: AttentionSpec,
    /// The values read: queries, keys, values and, with a mask, the mask.
    pub inputs: Vec<ValueRef>,
    /// The value written: the second `bmm`, or a permuted view of it.
    pub output: ValueRef,
    /// The nodes it computes.
    pub nodes: Vec<NodeId>,
}

/// The attentions of `g` that can run as one step each.
pub fn find(g: &Graph, plan: &FusionPlan) -> Vec<AttentionGroup> {
    let attentions: Vec<Composite> = fxhlo_passes::composite::find(g)
        .into_iter()
        .filter(|c| c.kind == CompositeKind::Attention)
        .collect();
    if attentions.is_empty() {
        // (The users of every node, a set per node, cost more than the search itself.)
        return vec![];
    }
    let users = g.users();
    (attentions.iter())
        .filter_map(|c| group(g, plan, c, &users))
        .collect()
}

fn op(g: &Graph, v: ValueRef) -> Option<Op> {
    (v.index == 0).then(|| g.nodes[v.node].op()).flatten()
}

fn tensor(g: &Graph, n: NodeId, name: &str) -> Option<ValueRef> {
    g.nodes[n].arg(name).and_then(Arg::as_tensor)
}

fn number(g: &Graph, n: NodeId, name: &str) -> Option<f64> {
    match g.nodes[n].arg(name)? {
        Arg::Int(i) => Some(*i as f64),
        Arg::Float(f) => Some(*f),
        _ => None,
    }
}

/// Whether dimension argument `name` of node `n` is the last of a rank-`rank` tensor.
fn last_dim(g: &Graph, n: NodeId, name: &str, rank: usize) -> bool {
    match g.nodes[n].arg(name) {
        Some(Arg::Int(d)) => *d == -1 || *d == rank as i64 - 1,
        Some(Arg::Ints(ds)) => ds.len() == 1 && (ds[0] == -1 || ds[0] == rank as i64 - 1),
        _ => false,
    }
}

fn group(g: &Graph, plan: &FusionPlan, c: &Composite, users: &Users) -> Option<AttentionGroup> {
    let inside: BTreeSet<NodeId> = c.nodes.iter().copied().collect();
    let o = c.output.node;
    let first = *c
        .nodes
        .iter()
        .find(|&&i| i != o && g.nodes[i].op() == Some(Op::Bmm))?;
    let pv = matmul_spec(g, o).ok()?;
    let qk = matmul_spec(g, first).ok()?;
    let (batch, m, n) = (qk.spec.batch, qk.spec.m, qk.spec.n);
    if pv.spec.alpha != 1.0
        || pv.spec.batch != batch
        || pv.spec.m != m
        || pv.spec.k != n
        || pv.spec.a
            != (Operand {
                batch_stride: m * n,
                ..Operand::contiguous(m, n)
            })
    {
        return None;
    }
    // The probabilities, guarded or not.
    let (probs, guard_of) = match op(g, pv.a)? {
        Op::WhereSelf => {
            let w = pv.a.node;
            (tensor(g, w, "other")?, Some(w))
        }
        _ => (pv.a, None),
    };
    let sm = probs.node;
    if op(g, probs)? != Op::Softmax
        || !inside.contains(&sm)
        || g.nodes[sm].arg("half_to_float") != Some(&Arg::Bool(false))
    {
        return None;
    }
    let x = tensor(g, sm, "self")?;
    let rank = g.ty(x).shape.len();
    if !last_dim(g, sm, "dim", rank) || !is_f32_stored(g.ty(x).dtype) {
        return None;
    }
    if let Some(w) = guard_of {
        if !is_guard(g, w, x, rank) {
            return None;
        }
    }
    let (scale, mask) = scores(g, x, ValueRef::new(first, 0), n, &inside)?;
    let mut inputs = vec![qk.a, qk.b, pv.b];
    let mask_op = match mask {
        Some(mv) => {
            let xs = static_shape(g, x)?;
            let ms = static_shape(g, mv)?;
            let l = Layout::contiguous(&ms)
                .expand(&xs)?
                .reshape(&[batch, m, n])?;
            inputs.push(mv);
            Some(as_operand(&l)?)
        }
        None => None,
    };
    let kernels: Vec<usize> = plan
        .kernels
        .iter()
        .enumerate()
        .filter(|(_, k)| k.nodes.iter().any(|i| inside.contains(i)))
        .map(|(i, _)| i)
        .collect();
    let tail = (kernels.iter())
        .find(|&&ki| plan.kernels[ki].nodes.contains(&o))
        .and_then(|&ki| lowp_tail(g, o, users, &plan.kernels[ki].nodes));
    let in_tail = |i: NodeId| tail.as_ref().is_some_and(|(_, t)| t.contains(&i));
    for &ki in &kernels {
        let k = &plan.kernels[ki];
        // Only the result leaves the group, and nothing after the second `bmm` is in it
        // (but its conversion to bf16 or f16, which the step's rounding makes).
        let leaves = k.outputs.iter().any(|v| {
            v.node != o && !in_tail(v.node) && users[v.node].iter().any(|u| !inside.contains(u))
        });
        let after = k.nodes.iter().any(|&i| {
            i != o
                && !in_tail(i)
                && g.nodes[i]
                    .args
                    .iter()
                    .flat_map(|a| a.values())
                    .any(|v| v.node == o)
        });
        if leaves || after {
            return None;
        }
    }
    // The operands must be values the program stores: inputs, constants or results of
    // kernels outside the group.
    let stored = |v: ValueRef| {
        !matches!(g.nodes[v.node].kind, NodeKind::Op(_))
            || plan
                .kernels
                .iter()
                .enumerate()
                .any(|(i, k)| !kernels.contains(&i) && k.outputs.contains(&v))
    };
    for (slot, &v) in inputs.iter().enumerate() {
        if stored(v) {
            continue;
        }
        // A mask that no kernel stores (recomputed inside the softmax's kernel, as GPT-2's
        // causal mask is) is computed by an elementwise step first, from stored values.
        if slot != 3 || !computable(g, v, &inside, &stored) {
            return None;
        }
    }
    let result = tail.map_or(ValueRef::new(o, 0), |(v, _)| v);
    let (output, out) = placement(g, result, [batch, m, pv.spec.n], users)
        .unwrap_or((result, Operand::contiguous(m, pv.spec.n)));
    Some(AttentionGroup {
        kernels,
        spec: AttentionSpec {
            batch,
            m,
            n,
            d: qk.spec.k,
            dv: pv.spec.n,
            q: qk.spec.a,
            k: qk.spec.b,
            v: pv.spec.b,
            scale: qk.spec.alpha * scale,
            mask: mask_op,
            guard: guard_of.is_some(),
            out,
        },
        inputs,
        output,
        nodes: c.nodes.clone(),
    })
}

/// The conversion of the attention's result (node `o`) to bf16 or f16 through reshapes, all in
/// the kernel of `kernel_nodes` and used nowhere else: the converted value and its nodes. The
/// attention step then writes the converted value (its bf16 or f16 result is rounded when
/// stored), with the elements in the same order.
fn lowp_tail(
    g: &Graph,
    o: NodeId,
    users: &Users,
    kernel_nodes: &[NodeId],
) -> Option<(ValueRef, Vec<NodeId>)> {
    let mut cur = ValueRef::new(o, 0);
    let mut nodes = vec![];
    while nodes.len() < 8 {
        let &[u] = &users[cur.node] else {
            return None;
        };
        if g.outputs.contains(&cur)
            || !kernel_nodes.contains(&u)
            || tensor(g, u, "self") != Some(cur)
        {
            return None;
        }
        nodes.push(u);
        let next = ValueRef::new(u, 0);
        match op(g, next)? {
            Op::View | Op::Unsqueeze | Op::SqueezeDim | Op::SqueezeDims | Op::Alias => cur = next,
            Op::ToCopy
                if g.ty(cur).dtype == DType::F32
                    && matches!(g.ty(next).dtype, DType::BF16 | DType::F16) =>
            {
                return Some((next, nodes));
            }
            _ => return None,
        }
    }
    None
}

/// Whether `v` can be computed by elementwise and view ops alone, outside the group
/// (`inside`), from values that are `stored` (at most 64 nodes).
fn computable(
    g: &Graph,
    v: ValueRef,
    inside: &BTreeSet<NodeId>,
    stored: &dyn Fn(ValueRef) -> bool,
) -> bool {
    use fxhlo_passes::fusion::{classify, Class};
    let mut seen = BTreeSet::new();
    let mut work = vec![v];
    while let Some(x) = work.pop() {
        if stored(x) || !seen.insert(x.node) {
            continue;
        }
        let Some(op) = g.nodes[x.node].op() else {
            return false;
        };
        if inside.contains(&x.node)
            || seen.len() > 64
            || !matches!(classify(op), Class::Elementwise | Class::View)
        {
            return false;
        }
        work.extend(g.nodes[x.node].args.iter().flat_map(|a| a.values()));
    }
    true
}

/// Whether `where` node `w` is `where(logical_not(any(logical_not(x == -inf), -1, keepdim)),
/// 0, softmax)`: rows of `x` that are all `-inf` give zeros.
fn is_guard(g: &Graph, w: NodeId, x: ValueRef, rank: usize) -> bool {
    let check = || -> Option<()> {
        let zeros = tensor(g, w, "self")?;
        match op(g, zeros)? {
            Op::Full | Op::FullLike => {
                (number(g, zeros.node, "fill_value")? == 0.0).then_some(())?
            }
            _ => return None,
        }
        let c = tensor(g, w, "condition")?;
        (op(g, c)? == Op::LogicalNot).then_some(())?;
        let any = tensor(g, c.node, "self")?;
        (op(g, any)? == Op::AnyDim
            && last_dim(g, any.node, "dim", rank)
            && g.nodes[any.node].arg("keepdim") == Some(&Arg::Bool(true)))
        .then_some(())?;
        let not = tensor(g, any.node, "self")?;
        (op(g, not)? == Op::LogicalNot).then_some(())?;
        let eq = tensor(g, not.node, "self")?;
        (op(g, eq)? == Op::EqScalar
            && tensor(g, eq.node, "self")? == x
            && number(g, eq.node, "other")? == f64::NEG_INFINITY)
            .then_some(())
    };
    check().is_some()
}

/// Walks from the softmax's input `x` back to the first product `s0`: views that keep rows of
/// `n`, `mul`/`div` by numbers, and at most one `add` of a mask before any scale (`s0 * c +
/// mask`, not `(s0 + mask) * c`). Returns the scale and the mask.
fn scores(
    g: &Graph,
    x: ValueRef,
    s0: ValueRef,
    n: usize,
    inside: &BTreeSet<NodeId>,
) -> Option<(f32, Option<ValueRef>)> {
    let mut scale = 1f64;
    let mut mask = None;
    let mut scaled = false;
    let mut cur = x;
    let shape = static_shape(g, s0)?;
    let numel: usize = shape.iter().product();
    while cur != s0 {
        if !inside.contains(&cur.node) || cur.index != 0 {
            return None;
        }
        let sh = static_shape(g, cur)?;
        if sh.last() != Some(&n) || sh.iter().product::<usize>() != numel {
            return None;
        }
        let node = cur.node;
        cur = match g.nodes[node].op()? {
            Op::View | Op::Unsqueeze | Op::SqueezeDim | Op::SqueezeDims | Op::Alias => {
                tensor(g, node, "self")?
            }
            Op::MulScalar => {
                scale *= number(g, node, "other")?;
                scaled = true;
                tensor(g, node, "self")?
            }
            Op::DivScalar => {
                scale /= number(g, node, "other")?;
                scaled = true;
                tensor(g, node, "self")?
            }
            Op::AddTensor if !scaled && mask.is_none() && number(g, node, "alpha")? == 1.0 => {
                let (a, b) = (tensor(g, node, "self")?, tensor(g, node, "other")?);
                // The scores are the operand computed inside the group.
                let (s, mk) = if inside.contains(&a.node) && !inside.contains(&b.node) {
                    (a, b)
                } else if inside.contains(&b.node) && !inside.contains(&a.node) {
                    (b, a)
                } else {
                    return None;
                };
                if !is_f32_stored(g.ty(mk).dtype) || static_shape(g, s)? != sh {
                    return None;
                }
                mask = Some(mk);
                s
            }
            _ => return None,
        };
    }
    Some((scale as f32, mask))
}

/// Where to write the result `r` (`[batch, m, dv]`): when its only use is a chain of views and
/// permutations that a matmul reads as an operand, that chain's last value, contiguous, and
/// where `r`'s elements lie in it.
fn placement(
    g: &Graph,
    r: ValueRef,
    shape: [usize; 3],
    users: &Users,
) -> Option<(ValueRef, Operand)> {
    let mut chain = vec![r];
    let mut cur = r;
    // Each value of the chain has one user, and is not returned.
    while let &[u] = &users[cur.node] {
        if g.outputs.contains(&cur) {
            break;
        }
        match g.nodes[u].op() {
            Some(Op::View | Op::Permute | Op::Unsqueeze | Op::SqueezeDim | Op::SqueezeDims) => {
                cur = ValueRef::new(u, 0);
                chain.push(cur);
            }
            Some(Op::Mm | Op::Bmm | Op::Addmm) => {
                let spec = matmul_spec(g, u).ok()?;
                let target = *chain[1..].iter().find(|&&v| v == spec.a || v == spec.b)?;
                return inverse(g, &chain, target, shape);
            }
            _ => break,
        }
    }
    None
}

/// The layout of `chain[0]` inside a contiguous `target` (a later value of the chain).
fn inverse(
    g: &Graph,
    chain: &[ValueRef],
    target: ValueRef,
    shape: [usize; 3],
) -> Option<(ValueRef, Operand)> {
    let end = chain.iter().position(|&v| v == target)?;
    let mut l = Layout::contiguous(&static_shape(g, target)?);
    for w in chain[..=end].windows(2).rev() {
        let (src, v) = (w[0], w[1]);
        l = match g.nodes[v.node].op()? {
            Op::Permute => {
                let Some(Arg::Ints(dims)) = g.nodes[v.node].arg("dims") else {
                    return None;
                };
                let r = dims.len() as i64;
                let mut inv = vec![0i64; dims.len()];
                for (k, &d) in dims.iter().enumerate() {
                    let d = if d < 0 { d + r } else { d };
                    *inv.get_mut(usize::try_from(d).ok()?)? = k as i64;
                }
                l.permute(&inv)?
            }
            _ => l.reshape(&static_shape(g, src)?)?,
        };
    }
    (l.shape() == shape).then_some(())?;
    Some((target, as_operand(&l)?))
}
