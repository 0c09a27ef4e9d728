//! Values computed from the shapes alone, folded before the program is built.
//!
//! A node is *shape-only* when it is an op of the table that reads no graph input, parameter,
//! buffer or constant, directly or through other nodes, and is not random: `arange`, `full`,
//! `triu_indices` and whatever the graph computes from them (a causal mask, the positions of a
//! positional embedding, the pattern of `block_diag` or `diag_embed`). Such a value is the same
//! on every run, so the compiler computes it once, in the reference interpreter, and the graph
//! reads it as a constant. Whatever the op, and whether or not a fast kernel covers it: a
//! kernel that would have mixed it with run-time values (an `i64` arange compared with a float
//! tensor) no longer has to compute it.
//!
//! Left as they are: values no larger than one splat (a `full` or `scalar_tensor`, or a view
//! of one), which kernels read as immediates and which the kernel builders recognize by their
//! op (the zeros of a guarded softmax); values of more than [`FOLD_MAX_ELEMS`] elements; and
//! graph outputs (a program returns what its steps write).

use fxhlo_ir::{Arg, Graph, InputKind, Node, NodeId, NodeKind, Op, ValueRef, Weights};
use fxhlo_passes::fusion::{classify, Class};
use fxhlo_passes::rewrite::for_each_value_mut;
use fxhlo_runtime::fast::fold::FOLD_MAX_ELEMS;
use std::collections::{BTreeMap, BTreeSet};

/// How the targets of folded values begin.
pub const SHAPE_CONST_PREFIX: &str = "fxhlo.shape.";

/// Folds the shape-only values of `g` that other nodes read (see the module doc): each becomes
/// a constant input whose tensor is returned, keyed by its target. Returns no tensors (and
/// leaves `g` as it was) when there is nothing to fold; an error when the interpreter fails on
/// them (the run would have failed the same way).
pub fn fold_shape_constants(g: &mut Graph) -> Result<Weights, String> {
    let n = g.nodes.len();
    let mut shape_only = vec![false; n];
    for (i, node) in g.nodes.iter().enumerate() {
        let NodeKind::Op(op) = node.kind else {
            continue;
        };
        if op.is_random() {
            continue;
        }
        shape_only[i] = node
            .args
            .iter()
            .flat_map(Arg::values)
            .all(|v| shape_only[v.node]);
    }
    // Values read by nodes that are not shape-only: the candidates.
    let mut boundary: BTreeSet<ValueRef> = BTreeSet::new();
    for (i, node) in g.nodes.iter().enumerate() {
        if !shape_only[i] {
            boundary.extend(
                node.args
                    .iter()
                    .flat_map(Arg::values)
                    .filter(|v| shape_only[v.node]),
            );
        }
    }
    let outputs: BTreeSet<ValueRef> = g.outputs.iter().copied().collect();
    let fold: Vec<ValueRef> = boundary
        .into_iter()
        .filter(|v| {
            !outputs.contains(v)
                && !is_splat(g, v.node)
                && (g.ty(*v).numel()).is_some_and(|e| e <= FOLD_MAX_ELEMS as i64)
        })
        .collect();
    if fold.is_empty() {
        return Ok(Weights::new());
    }
    // The nodes to evaluate: the folded values' shape-only ancestors.
    let mut needed: BTreeSet<NodeId> = BTreeSet::new();
    let mut work: Vec<NodeId> = fold.iter().map(|v| v.node).collect();
    while let Some(i) = work.pop() {
        if needed.insert(i) {
            work.extend(g.nodes[i].args.iter().flat_map(Arg::values).map(|v| v.node));
        }
    }
    let sub = fxhlo_passes::fusion::Kernel {
        kind: fxhlo_passes::fusion::KernelKind::Other,
        root: *needed.last().expect("not empty"),
        nodes: needed.iter().copied().collect(),
        recomputed: vec![],
        inputs: vec![],
        outputs: fold.clone(),
    };
    let model = fxhlo_ir::Model {
        graph: crate::kernels::program::subgraph(g, &sub),
        weights: Weights::new(),
    };
    let names: Vec<&str> = fold.iter().map(|v| g.value_name(*v)).collect();
    let tensors = fxhlo_runtime::interp::run(&model, &BTreeMap::new()).map_err(|e| {
        format!(
            "values computed from the shapes alone ({}): {e}",
            names.join(", ")
        )
    })?;
    let mut weights = Weights::new();
    let mut consts: Vec<(ValueRef, Node)> = vec![];
    let taken: BTreeSet<&str> = g
        .nodes
        .iter()
        .flat_map(|n| {
            n.result_names
                .iter()
                .map(String::as_str)
                .chain([n.name.as_str()])
        })
        .collect();
    for (&v, t) in fold.iter().zip(tensors) {
        let name = unique(&taken, &format!("{}_folded", g.value_name(v)));
        let target = format!("{SHAPE_CONST_PREFIX}{name}");
        weights.insert(target.clone(), t);
        consts.push((
            v,
            Node {
                name: name.clone(),
                kind: NodeKind::Input {
                    kind: InputKind::Constant,
                    target: Some(target),
                },
                args: vec![],
                result_names: vec![name],
                results: vec![g.ty(v).clone()],
            },
        ));
    }
    rebuild(g, consts);
    Ok(weights)
}

/// Whether node `i` is a splat (`full`, `full_like`, `scalar_tensor`) or a view of one.
fn is_splat(g: &Graph, mut i: NodeId) -> bool {
    loop {
        match g.nodes[i].op() {
            Some(Op::Full | Op::FullLike | Op::ScalarTensor) => return true,
            Some(op) if classify(op) == Class::View => {
                match g.nodes[i].args.iter().flat_map(Arg::values).next() {
                    Some(v) => i = v.node,
                    None => return false,
                }
            }
            _ => return false,
        }
    }
}

/// `base`, or `base_N` for the first N that no name in `taken` has.
fn unique(taken: &BTreeSet<&str>, base: &str) -> String {
    if !taken.contains(base) {
        return base.to_string();
    }
    (1..)
        .map(|k| format!("{base}_{k}"))
        .find(|s| !taken.contains(s.as_str()))
        .expect("some suffix is free")
}

/// `g` with each value of `consts` read from its constant node (placed after the existing
/// inputs) and the op nodes nothing reads any more removed.
fn rebuild(g: &mut Graph, consts: Vec<(ValueRef, Node)>) {
    let first_op = g
        .nodes
        .iter()
        .position(|n| !matches!(n.kind, NodeKind::Input { .. }))
        .unwrap_or(g.nodes.len());
    let old = std::mem::take(&mut g.nodes);
    let k = consts.len();
    let mut replaced: BTreeMap<ValueRef, ValueRef> = BTreeMap::new();
    let mut nodes: Vec<Node> = Vec::with_capacity(old.len() + k);
    let mut index = vec![0usize; old.len()];
    for (i, n) in old.iter().enumerate().take(first_op) {
        index[i] = nodes.len();
        nodes.push(n.clone());
    }
    for (j, (v, node)) in consts.into_iter().enumerate() {
        replaced.insert(v, ValueRef::new(first_op + j, 0));
        nodes.push(node);
    }
    for (i, n) in old.into_iter().enumerate().skip(first_op) {
        index[i] = nodes.len();
        nodes.push(n);
    }
    let remap = |v: &mut ValueRef| {
        *v = match replaced.get(v) {
            Some(&c) => c,
            None => ValueRef::new(index[v.node], v.index),
        }
    };
    for n in nodes.iter_mut() {
        for_each_value_mut(&mut n.args, remap);
    }
    g.outputs.iter_mut().for_each(remap);
    g.nodes = nodes;
    // Dead op nodes (the folded values' producers that nothing else reads).
    let mut used = vec![false; g.nodes.len()];
    for v in &g.outputs {
        used[v.node] = true;
    }
    for i in (0..g.nodes.len()).rev() {
        let live = used[i] || !matches!(g.nodes[i].kind, NodeKind::Op(_));
        if live {
            used[i] = true;
            for v in g.nodes[i].args.iter().flat_map(Arg::values) {
                used[v.node] = true;
            }
        }
    }
    fxhlo_passes::rewrite::retain_nodes(g, &used);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(text: &str) -> Graph {
        fxhlo_ir::text::parse_graph(text).expect("parses")
    }

    #[test]
    fn an_arange_read_by_a_gather_becomes_a_constant() {
        let mut g = graph(
            "graph {
  %w: f32[8, 2] = parameter \"w\"
  %x: f32[4, 2] = input
  %arange: i64[4] = aten.arange.start_step(start=0, end=4)
  %e: f32[4, 2] = aten.embedding.default(%w, %arange)
  %add: f32[4, 2] = aten.add.Tensor(%x, %e)
  return %add
}",
        );
        let w = fold_shape_constants(&mut g).expect("folds");
        assert_eq!(w.len(), 1);
        let t: &fxhlo_ir::HostTensor = w.values().next().expect("one");
        assert_eq!(t.shape, vec![4]);
        assert_eq!(t.to_f64_vec(), vec![0.0, 1.0, 2.0, 3.0]);
        assert!(g.nodes.iter().all(|n| n.op() != Some(Op::ArangeStartStep)));
        g.verify().expect("verifies");
    }

    #[test]
    fn splats_outputs_and_run_time_values_stay() {
        let text = "graph {
  %x: f32[4] = input
  %z: f32[4] = aten.full.default(size=[4], fill_value=0.0)
  %a: f32[4] = aten.add.Tensor(%x, %z)
  %r: f32[4] = aten.arange.start_step(start=0, end=4, dtype=f32)
  return %a, %r
}";
        let mut g = graph(text);
        let before = g.clone();
        assert!(fold_shape_constants(&mut g).expect("ok").is_empty());
        assert_eq!(g, before);
    }
}
