//! Fusion planning: groups the op nodes of a graph into kernels, the way XLA does.
//!
//! - Elementwise, creation and view ops fuse into their consumers.
//! - Reductions (`sum`, `mean`, `amax`, `softmax`, `log_softmax`, layer norm, `var`, ...) are
//!   fusion roots that take their elementwise prologue and epilogue.
//! - `mm`/`bmm`/`addmm`/`convolution` are roots that take elementwise epilogues (bias,
//!   activation, residual add); their prologue may only be views (transposes and reshapes are
//!   folded into the operand's indexing) and, for a matmul, `mul`s by a number (folded into its
//!   scale). A chain of strided views feeding a matmul is recomputed in it, whatever its size,
//!   even when other kernels read the chain too.
//! - A kernel has at most one such root. A producer used outside the kernel is recomputed in
//!   it when cheap (an elementwise or view op on at most [`DUPLICATE_MAX_ELEMENTS`] elements
//!   whose operands come before the kernel), else it stays in its own kernel and is written.
//!
//! Kernels are built from the outputs upward (reverse topological order), which keeps every
//! kernel convex, and listed in a topological order of the kernel graph.

use crate::egraph::cost::bytes;
use fxhlo_ir::{Arg, DType, Graph, NodeId, NodeKind, Op, OpKind, Users, ValueRef};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Producers up to this many elements may be recomputed in each consumer kernel.
pub const DUPLICATE_MAX_ELEMENTS: i64 = 4096;

/// What a kernel computes, by its root.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum KernelKind {
    /// Only elementwise, view and creation ops.
    Elementwise,
    /// A reduction with its prologue and epilogue.
    Reduction,
    /// A matmul with its epilogue.
    Matmul,
    /// A convolution with its epilogue.
    Conv,
    /// An op that fuses with nothing (gather, scatter, sort, pooling, unknown ops, ...).
    Other,
}

impl fmt::Display for KernelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KernelKind::Elementwise => "elementwise",
            KernelKind::Reduction => "reduction",
            KernelKind::Matmul => "matmul",
            KernelKind::Conv => "conv",
            KernelKind::Other => "other",
        })
    }
}

/// One kernel of the plan.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    /// Kind, from the root.
    pub kind: KernelKind,
    /// The root: the reduction/matmul/conv node, else the last node.
    pub root: NodeId,
    /// The op nodes this kernel computes and owns, in topological order. Every op node of the
    /// graph is owned by exactly one kernel.
    pub nodes: Vec<NodeId>,
    /// Cheap nodes owned by another kernel that this one recomputes instead of reading.
    pub recomputed: Vec<NodeId>,
    /// Values read from outside (graph inputs, weights, other kernels' outputs).
    pub inputs: Vec<ValueRef>,
    /// Values written: used by another kernel or returned by the graph.
    pub outputs: Vec<ValueRef>,
}

/// The fusion plan of a graph.
#[derive(Clone, Debug, PartialEq)]
pub struct FusionPlan {
    /// Kernels in a topological order (each reads only values of earlier kernels or inputs).
    pub kernels: Vec<Kernel>,
    /// Estimated bytes moved without fusion: every non-view op reads its tensor arguments and
    /// writes its results.
    pub bytes_before: f64,
    /// Estimated bytes moved with fusion: each kernel reads its inputs and writes its outputs
    /// once.
    pub bytes_after: f64,
    names: Vec<Vec<String>>,
    node_names: Vec<String>,
}

/// How a node takes part in fusion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Elementwise or creation op: fuses into consumers.
    Elementwise,
    /// A view, permute or other pure data-movement op with static indexing.
    View,
    /// Reduction root.
    Reduction,
    /// Matmul root.
    Matmul,
    /// Convolution root.
    Conv,
    /// Fuses with nothing.
    Other,
}

/// The fusion class of an op, from its traits in the op table (`fxhlo_ir::traits`): views,
/// contractions, convolutions and reductions by kind; elementwise if the fast runtime's
/// expression engine computes it (`Op::fast_elementwise`); random ops and the rest fuse with
/// nothing.
pub fn classify(op: Op) -> Class {
    match op.kind() {
        OpKind::View(_) => Class::View,
        OpKind::Contraction => Class::Matmul,
        OpKind::Convolution => Class::Conv,
        OpKind::Reduction => Class::Reduction,
        _ if op.is_random() => Class::Other,
        _ if op.fast_elementwise() => Class::Elementwise,
        _ => Class::Other,
    }
}

fn kind_of(c: Class) -> KernelKind {
    match c {
        Class::Elementwise | Class::View => KernelKind::Elementwise,
        Class::Reduction => KernelKind::Reduction,
        Class::Matmul => KernelKind::Matmul,
        Class::Conv => KernelKind::Conv,
        Class::Other => KernelKind::Other,
    }
}

fn class_of(g: &Graph, i: NodeId) -> Option<Class> {
    match &g.nodes[i].kind {
        NodeKind::Input { .. } => None,
        NodeKind::Op(op) => Some(classify(*op)),
        NodeKind::Unsupported { .. } => Some(Class::Other),
    }
}

fn is_heavy(c: Class) -> bool {
    matches!(c, Class::Reduction | Class::Matmul | Class::Conv)
}

struct Building {
    members: BTreeSet<NodeId>,
    recomputed: BTreeSet<NodeId>,
    heavy: Option<NodeId>,
    /// The heavy node and the views fused in front of it (a matmul/conv prologue).
    prologue: BTreeSet<NodeId>,
    min: NodeId,
}

/// Plans the fusion of `g`.
pub fn plan(g: &Graph) -> FusionPlan {
    let n = g.nodes.len();
    // Consumers of each node (by node), and whether a node is a graph output.
    let users = g.users();
    let mut is_output = vec![false; n];
    for o in &g.outputs {
        is_output[o.node] = true;
    }
    // The nodes a node reads, ascending, each once.
    let producers = |i: NodeId| -> Vec<NodeId> {
        let mut ps: Vec<NodeId> = (g.nodes[i].args.iter())
            .flat_map(|a| a.values())
            .map(|v| v.node)
            .collect();
        ps.sort_unstable();
        ps.dedup();
        ps
    };
    let small = |i: NodeId| {
        g.nodes[i]
            .results
            .iter()
            .all(|t| t.numel().is_some_and(|e| e <= DUPLICATE_MAX_ELEMENTS))
    };

    // Up to two heavy nodes (matmul, conv, ...) reachable from each node upstream through
    // fusible ones: the region `preferred_heavy` walks. With fewer than two it prefers none, so
    // the walk (which is as long as the graph on an elementwise chain: quadratic over all
    // roots) is skipped. Owners only shrink the region, so the count is an upper bound.
    let mut up_heavy: Vec<[Option<NodeId>; 2]> = vec![[None; 2]; n];
    for i in 0..n {
        let mut s: [Option<NodeId>; 2] = [None; 2];
        let add = |h: NodeId, s: &mut [Option<NodeId>; 2]| {
            if s[0].is_none() {
                s[0] = Some(h);
            } else if s[0] != Some(h) && s[1].is_none() {
                s[1] = Some(h);
            }
        };
        for p in g.nodes[i]
            .args
            .iter()
            .flat_map(|a| a.values())
            .map(|v| v.node)
        {
            match class_of(g, p) {
                Some(c) if is_heavy(c) => add(p, &mut s),
                Some(Class::Other) | None => {}
                Some(_) => {
                    for h in up_heavy[p].into_iter().flatten() {
                        add(h, &mut s);
                    }
                }
            }
        }
        up_heavy[i] = s;
    }

    let mut owner: Vec<Option<usize>> = vec![None; n];
    // The kernels that recompute each node.
    let mut recomputed_by: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); n];
    let mut built: Vec<Building> = vec![];
    for root in (0..n).rev() {
        let Some(rc) = class_of(g, root) else {
            continue;
        };
        if owner[root].is_some() {
            continue;
        }
        // Every kernel that computes a consumer (owns it, or recomputes it) recomputes this
        // node too: no kernel of its own (adopted below). A kernel that recomputes a consumer
        // but not this node reads it, so it must be written; a creation op without operands
        // is recomputed by every kernel that reads it (below), so that does not count.
        let by = &recomputed_by[root];
        let creation = producers(root).is_empty();
        let recomputed_everywhere = !is_output[root]
            && !users[root].is_empty()
            && users[root].iter().all(|u| match owner[*u] {
                Some(k) => by.contains(&k) && (creation || recomputed_by[*u].is_subset(by)),
                None => !recomputed_by[*u].is_empty() && recomputed_by[*u].is_subset(by),
            });
        if recomputed_everywhere {
            continue;
        }
        let k = built.len();
        let mut b = Building {
            members: BTreeSet::from([root]),
            recomputed: BTreeSet::new(),
            heavy: is_heavy(rc).then_some(root),
            prologue: if is_heavy(rc) {
                BTreeSet::from([root])
            } else {
                BTreeSet::new()
            },
            min: root,
        };
        owner[root] = Some(k);
        let reserved = if is_heavy(rc) || up_heavy[root][1].is_none() {
            None
        } else {
            preferred_heavy(g, root, &users, &owner)
        };
        if rc != Class::Other {
            let mut work: Vec<NodeId> = producers(root).into_iter().rev().collect();
            while let Some(p) = work.pop() {
                if owner[p].is_some() || b.members.contains(&p) || b.recomputed.contains(&p) {
                    continue;
                }
                let Some(pc) = class_of(g, p) else { continue };
                if pc == Class::Other {
                    continue;
                }
                let inside = |u: &NodeId| b.members.contains(u) || b.recomputed.contains(u);
                let all_inside = users[p].iter().all(inside);
                // Consumers of p inside the kernel that are in the heavy op's prologue.
                let feeds_prologue = users[p]
                    .iter()
                    .filter(|u| inside(u))
                    .all(|u| b.prologue.contains(u));
                let heavy_class = b.heavy.and_then(|h| class_of(g, h));
                let ok = if is_heavy(pc) {
                    b.heavy.is_none() && all_inside && reserved.is_none_or(|h| h == p)
                } else if feeds_prologue && heavy_class == Some(Class::Matmul) {
                    pc == Class::View || is_scale(g, p) || is_widening(g, p)
                } else if feeds_prologue && heavy_class == Some(Class::Conv) {
                    pc == Class::View
                } else {
                    true
                };
                if !ok {
                    continue;
                }
                if all_inside {
                    b.members.insert(p);
                    owner[p] = Some(k);
                    b.min = b.min.min(p);
                    if is_heavy(pc) {
                        b.heavy = Some(p);
                        b.prologue.insert(p);
                    } else if feeds_prologue
                        && b.heavy.is_some()
                        && (pc == Class::View || is_scale(g, p) || is_widening(g, p))
                    {
                        b.prologue.insert(p);
                    }
                    work.extend(producers(p).into_iter().rev());
                } else if let Some(chain) = (feeds_prologue && heavy_class == Some(Class::Matmul))
                    .then(|| strided_view_chain(g, p, b.min))
                    .flatten()
                    .filter(|c| !c.is_empty())
                {
                    // A matmul reads a strided view of any size in place: recompute the view
                    // chain here instead of writing it.
                    for q in chain {
                        if !b.members.contains(&q) && b.recomputed.insert(q) {
                            recomputed_by[q].insert(k);
                            b.prologue.insert(q);
                        }
                    }
                } else if !is_heavy(pc) && small(p) && producers(p).iter().all(|&q| q < b.min) {
                    b.recomputed.insert(p);
                    recomputed_by[p].insert(k);
                    if feeds_prologue && b.heavy.is_some() {
                        b.prologue.insert(p);
                    }
                }
            }
        }
        built.push(b);
    }
    // A recomputed node nobody owns is owned by the first kernel that recomputes it.
    for (k, b) in built.iter_mut().enumerate() {
        let adopt: Vec<NodeId> = b
            .recomputed
            .iter()
            .copied()
            .filter(|&p| owner[p].is_none())
            .collect();
        for p in adopt {
            owner[p] = Some(k);
            b.recomputed.remove(&p);
            b.members.insert(p);
        }
    }

    // Creation ops without tensor operands (scalar_tensor, full, arange) are recomputed by every
    // kernel that reads them: they cost nothing and, read from another kernel, they could tie
    // kernels into a cycle (a kernel recomputing a producer whose operand is owned downstream).
    for b in built.iter_mut() {
        let mut add = vec![];
        for &i in b.members.iter().chain(&b.recomputed) {
            for v in g.nodes[i].args.iter().flat_map(|a| a.values()) {
                let p = v.node;
                let creation =
                    matches!(class_of(g, p), Some(Class::Elementwise)) && producers(p).is_empty();
                if creation && !b.members.contains(&p) && !b.recomputed.contains(&p) {
                    add.push(p);
                }
            }
        }
        b.recomputed.extend(add);
    }

    // Inputs of each kernel; outputs are the values some other kernel reads or the graph returns.
    let inputs: Vec<BTreeSet<ValueRef>> = built
        .iter()
        .map(|b| {
            let computed = |i: &NodeId| b.members.contains(i) || b.recomputed.contains(i);
            let mut inputs = BTreeSet::new();
            for &i in b.members.iter().chain(&b.recomputed) {
                for a in &g.nodes[i].args {
                    for v in a.values() {
                        if !computed(&v.node) {
                            inputs.insert(v);
                        }
                    }
                }
            }
            inputs
        })
        .collect();
    let mut read: BTreeSet<ValueRef> = inputs.iter().flatten().copied().collect();
    read.extend(g.outputs.iter().copied());
    let mut kernels: Vec<Kernel> = built
        .iter()
        .zip(inputs)
        .map(|(b, inputs)| {
            let outputs: Vec<ValueRef> = b
                .members
                .iter()
                .flat_map(|&i| (0..g.nodes[i].results.len()).map(move |r| ValueRef::new(i, r)))
                .filter(|v| read.contains(v))
                .collect();
            let root = b
                .heavy
                .unwrap_or_else(|| *b.members.iter().next_back().expect("a root"));
            Kernel {
                kind: kind_of(class_of(g, root).expect("an op")),
                root,
                nodes: b.members.iter().copied().collect(),
                recomputed: b.recomputed.iter().copied().collect(),
                inputs: inputs.into_iter().collect(),
                outputs,
            }
        })
        .collect();
    kernels = topo_order(kernels, &owner);

    let bytes_before: f64 = g
        .nodes
        .iter()
        .filter_map(|node| match &node.kind {
            NodeKind::Input { .. } => None,
            NodeKind::Op(op) if op.is_view() => Some(0.0),
            _ => Some(
                node.args
                    .iter()
                    .flat_map(|a| a.values())
                    .map(|v| bytes(g.ty(v)))
                    .sum::<f64>()
                    + node.results.iter().map(bytes).sum::<f64>(),
            ),
        })
        .sum();
    let bytes_after: f64 = kernels
        .iter()
        .map(|k| {
            k.inputs
                .iter()
                .chain(&k.outputs)
                .map(|v| bytes(g.ty(*v)))
                .sum::<f64>()
        })
        .sum();
    FusionPlan {
        kernels,
        bytes_before,
        bytes_after,
        names: g.nodes.iter().map(|n| n.result_names.clone()).collect(),
        node_names: g.nodes.iter().map(|n| n.name.clone()).collect(),
    }
}

/// Whether node `i` multiplies an `f32` (or bf16, f16) tensor by a number (folded into a
/// matmul's scale).
pub fn is_scale(g: &Graph, i: NodeId) -> bool {
    let n = &g.nodes[i];
    n.op() == Some(Op::MulScalar)
        && n.results
            .first()
            .is_some_and(|t| matches!(t.dtype, DType::F32 | DType::BF16 | DType::F16))
        && matches!(n.arg("other"), Some(Arg::Int(_) | Arg::Float(_)))
}

/// Whether node `i` converts a bf16 or f16 tensor to f32: exact, and free where the fast
/// runtime keeps bf16 and f16 widened in f32 (a matmul reads the source in place, as through
/// a view).
pub fn is_widening(g: &Graph, i: NodeId) -> bool {
    let n = &g.nodes[i];
    n.op() == Some(Op::ToCopy)
        && n.results.first().is_some_and(|t| t.dtype == DType::F32)
        && n.arg("self")
            .and_then(Arg::as_tensor)
            .is_some_and(|s| matches!(g.ty(s).dtype, DType::BF16 | DType::F16))
        && matches!(n.arg("memory_format"), None | Some(Arg::None))
}

/// `p` and the strided views it reads through (see [`Op::is_strided_view`]), when every value the
/// chain starts from is an input or a node before `min` (so recomputing the chain in a kernel
/// whose first node is `min` keeps the kernel graph acyclic).
fn strided_view_chain(g: &Graph, p: NodeId, min: NodeId) -> Option<Vec<NodeId>> {
    let mut chain = vec![];
    let mut cur = p;
    loop {
        let node = &g.nodes[cur];
        match node.kind {
            NodeKind::Input { .. } => return Some(chain),
            NodeKind::Op(op) if op.is_strided_view() || is_widening(g, cur) => {
                chain.push(cur);
                let srcs: Vec<ValueRef> = node.args.iter().flat_map(|a| a.values()).collect();
                match srcs.as_slice() {
                    [s] => cur = s.node,
                    _ => return None,
                }
            }
            _ => return (cur < min).then_some(chain),
        }
    }
}

/// The heavy producer an elementwise kernel rooted at `root` should take when it can reach
/// several through its elementwise producers: the one with the largest result (if one is
/// strictly the largest), whose other
/// results then stay small kernels of their own (in `where(!any(mask), 0, softmax(x))`, the
/// softmax, not the `any`, so the full-size softmax is never written and read back). Only
/// when every user of that producer lies between it and the root (else the walk may not take
/// it, and no candidate is preferred).
fn preferred_heavy(
    g: &Graph,
    root: NodeId,
    users: &Users,
    owner: &[Option<usize>],
) -> Option<NodeId> {
    let mut region = BTreeSet::from([root]);
    let mut heavy = BTreeSet::new();
    let mut work = vec![root];
    while let Some(i) = work.pop() {
        for p in g.nodes[i]
            .args
            .iter()
            .flat_map(|a| a.values())
            .map(|v| v.node)
        {
            if owner[p].is_some() || region.contains(&p) {
                continue;
            }
            match class_of(g, p) {
                Some(c) if is_heavy(c) => {
                    heavy.insert(p);
                }
                Some(Class::Other) | None => {}
                Some(_) => {
                    region.insert(p);
                    work.push(p);
                }
            }
        }
    }
    if heavy.len() < 2 {
        return None;
    }
    let size = |h: &NodeId| -> i64 {
        g.nodes[*h]
            .results
            .iter()
            .map(|t| t.numel().unwrap_or(0))
            .sum()
    };
    let best = heavy.iter().copied().max_by_key(size)?;
    // A tie keeps the walk's own choice.
    let unique = heavy.iter().filter(|h| size(h) == size(&best)).count() == 1;
    (unique && users[best].iter().all(|u| region.contains(u))).then_some(best)
}

/// Orders kernels so that each comes after the kernels whose outputs it reads (Kahn's
/// algorithm, smallest root first among the ready ones).
fn topo_order(kernels: Vec<Kernel>, owner: &[Option<usize>]) -> Vec<Kernel> {
    let m = kernels.len();
    let mut deps: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); m];
    for (k, kern) in kernels.iter().enumerate() {
        for v in &kern.inputs {
            if let Some(o) = owner[v.node] {
                if o != k {
                    deps[k].insert(o);
                }
            }
        }
    }
    let mut indeg: Vec<usize> = deps.iter().map(|d| d.len()).collect();
    let mut rdeps: Vec<Vec<usize>> = vec![vec![]; m];
    for (k, d) in deps.iter().enumerate() {
        for &o in d {
            rdeps[o].push(k);
        }
    }
    let mut ready: BTreeMap<NodeId, usize> = BTreeMap::new();
    for k in 0..m {
        if indeg[k] == 0 {
            ready.insert(kernels[k].nodes[0], k);
        }
    }
    let mut order = vec![];
    while let Some((_, k)) = ready.pop_first() {
        order.push(k);
        for &r in &rdeps[k] {
            indeg[r] -= 1;
            if indeg[r] == 0 {
                ready.insert(kernels[r].nodes[0], r);
            }
        }
    }
    // A cycle would leave kernels out; the builder keeps kernels convex, so none is expected.
    debug_assert_eq!(order.len(), m, "the kernel graph has a cycle");
    let mut slots: Vec<Option<Kernel>> = kernels.into_iter().map(Some).collect();
    let mut out: Vec<Kernel> = order.into_iter().filter_map(|k| slots[k].take()).collect();
    out.extend(slots.into_iter().flatten());
    out
}

impl FusionPlan {
    /// Number of op nodes owned by the kernels.
    pub fn node_count(&self) -> usize {
        self.kernels.iter().map(|k| k.nodes.len()).sum()
    }

    fn value(&self, v: &ValueRef) -> String {
        format!("%{}", self.names[v.node][v.index])
    }

    fn node(&self, i: NodeId) -> String {
        format!("%{}", self.names[i].first().unwrap_or(&self.node_names[i]))
    }
}

impl fmt::Display for FusionPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |xs: Vec<String>| {
            if xs.is_empty() {
                "-".to_string()
            } else {
                xs.join(", ")
            }
        };
        for (k, kern) in self.kernels.iter().enumerate() {
            writeln!(
                f,
                "kernel {k} {} root {} ({} nodes)",
                kern.kind,
                self.node(kern.root),
                kern.nodes.len()
            )?;
            writeln!(
                f,
                "  nodes: {}",
                list(kern.nodes.iter().map(|&i| self.node(i)).collect())
            )?;
            if !kern.recomputed.is_empty() {
                writeln!(
                    f,
                    "  recomputed: {}",
                    list(kern.recomputed.iter().map(|&i| self.node(i)).collect())
                )?;
            }
            writeln!(
                f,
                "  inputs: {}",
                list(kern.inputs.iter().map(|v| self.value(v)).collect())
            )?;
            writeln!(
                f,
                "  outputs: {}",
                list(kern.outputs.iter().map(|v| self.value(v)).collect())
            )?;
        }
        let ratio = if self.bytes_after > 0.0 {
            self.bytes_before / self.bytes_after
        } else {
            1.0
        };
        writeln!(
            f,
            "{} kernels for {} ops; bytes moved: {:.0} before fusion, {:.0} after ({ratio:.2}x less)",
            self.kernels.len(),
            self.node_count(),
            self.bytes_before,
            self.bytes_after
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fxhlo_ir::text::parse_graph;

    fn plan_of(body: &str) -> (Graph, FusionPlan) {
        let g = parse_graph(&format!("graph {{\n{body}\n}}\n")).unwrap();
        let p = plan(&g);
        (g, p)
    }

    #[test]
    fn matmul_takes_bias_activation_and_residual_epilogue() {
        let (_, p) = plan_of("  %x: f32[4, 8] = input\n  %w: f32[16, 8] = parameter \"w\"\n  %b: f32[16] = parameter \"b\"\n  %r: f32[4, 16] = input\n  %t: f32[8, 16] = aten.permute.default(%w, dims=[1, 0])\n  %m: f32[4, 16] = aten.mm.default(%x, %t)\n  %a: f32[4, 16] = aten.add.Tensor(%m, %b)\n  %g: f32[4, 16] = aten.gelu.default(%a)\n  %o: f32[4, 16] = aten.add.Tensor(%g, %r)\n  return %o");
        assert_eq!(p.kernels.len(), 1, "{p}");
        assert_eq!(p.kernels[0].kind, KernelKind::Matmul);
        assert_eq!(p.kernels[0].nodes.len(), 5);
        assert!(p.bytes_after < p.bytes_before, "{p}");
    }

    #[test]
    fn matmuls_read_a_shared_view_chain_in_place() {
        // q and k are scaled selects of one projection: both products recompute the views
        // (of any size) and fold the scales, so only the projection is written.
        let (_, p) = plan_of(
            "  %x: f32[4, 6] = input
  %b: f32[6] = input
  %y: f32[4, 6] = aten.add.Tensor(%x, %b)
  %v: f32[4, 2, 3] = aten.view.default(%y, size=[4, 2, 3])
  %t: f32[2, 4, 3] = aten.permute.default(%v, dims=[1, 0, 2])
  %q: f32[4, 3] = aten.select.int(%t, dim=0, index=0)
  %k: f32[4, 3] = aten.select.int(%t, dim=0, index=1)
  %qs: f32[4, 3] = aten.mul.Scalar(%q, other=0.5)
  %kt: f32[3, 4] = aten.permute.default(%k, dims=[1, 0])
  %s: f32[4, 4] = aten.mm.default(%qs, %kt)
  %s2: f32[4, 4] = aten.mm.default(%q, %kt)
  %o: f32[4, 4] = aten.add.Tensor(%s, %s2)
  return %o",
        );
        let writes_y = p.kernels.iter().find(|k| k.nodes.contains(&2)).unwrap();
        assert_eq!(writes_y.outputs, vec![ValueRef::new(2, 0)], "{p}");
        assert_eq!(p.kernels.len(), 3, "{p}");
        for k in p.kernels.iter().filter(|k| k.kind == KernelKind::Matmul) {
            assert!(k.inputs.contains(&ValueRef::new(2, 0)), "{p}");
            assert!(k.inputs.iter().all(|v| !(3..=8).contains(&v.node)), "{p}");
        }
        let qs = p.kernels.iter().find(|k| k.nodes.contains(&7)).unwrap();
        assert_eq!(qs.root, 9, "the scale is in the product's prologue: {p}");
    }

    #[test]
    fn an_epilogue_joins_the_producer_with_the_largest_result() {
        // The small `amax` comes first in node order (the walk would take it); the softmax's
        // full-size result is the one worth not writing.
        let (_, p) = plan_of("  %x: f32[4, 8] = input\n  %a: f32[4, 1] = aten.amax.default(%x, dim=[1], keepdim=true)\n  %s: f32[4, 8] = aten._softmax.default(%x, dim=-1, half_to_float=false)\n  %o: f32[4, 8] = aten.add.Tensor(%a, %s)\n  return %o");
        assert_eq!(p.kernels.len(), 2, "{p}");
        let with_add = p.kernels.iter().find(|k| k.nodes.contains(&3)).unwrap();
        assert_eq!(with_add.root, 2, "the softmax's kernel takes the add: {p}");
        assert_eq!(with_add.outputs, vec![ValueRef::new(3, 0)], "{p}");
    }

    #[test]
    fn reductions_take_prologue_and_epilogue_but_not_each_other() {
        let (_, p) = plan_of("  %x: f32[4, 8] = input\n  %e: f32[4, 8] = aten.exp.default(%x)\n  %s: f32[4] = aten.sum.dim_IntList(%e, dim=[1])\n  %l: f32[4] = aten.log.default(%s)\n  %m: f32[] = aten.amax.default(%l, dim=[0])\n  return %m");
        let kinds: Vec<KernelKind> = p.kernels.iter().map(|k| k.kind).collect();
        assert_eq!(
            kinds,
            vec![KernelKind::Reduction, KernelKind::Reduction],
            "{p}"
        );
        // exp is the sum's prologue; log, between two reductions, joins its consumer.
        assert_eq!(p.kernels[0].nodes, vec![1, 2], "{p}");
        assert_eq!(p.kernels[1].nodes, vec![3, 4], "{p}");
    }

    #[test]
    fn cheap_shared_producers_are_recomputed_large_ones_written() {
        let small = "  %x: f32[4, 8] = input\n  %n: f32[4, 8] = aten.neg.default(%x)\n  %s: f32[4] = aten.sum.dim_IntList(%n, dim=[1])\n  %m: f32[4] = aten.amax.default(%n, dim=[1])\n  return %s, %m";
        let (_, p) = plan_of(small);
        assert_eq!(p.kernels.len(), 2, "{p}");
        assert_eq!(
            p.kernels.iter().map(|k| k.recomputed.len()).sum::<usize>(),
            1,
            "{p}"
        );
        let large = small.replace("[4, 8]", "[4, 8192]");
        let (_, p) = plan_of(&large);
        assert_eq!(p.kernels.len(), 3, "{p}");
        assert!(p.kernels.iter().all(|k| k.recomputed.is_empty()), "{p}");
    }
}
