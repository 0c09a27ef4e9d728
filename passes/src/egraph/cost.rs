//! The cost model: bytes moved plus floating-point operations, from the tensor types.
//!
//! Every op reads its tensor arguments and writes its results once; metadata-only views
//! (`view`, `unsqueeze`, `squeeze`, `expand`, `alias`) cost one unit. FLOPs: one per output
//! element for cheap elementwise ops, more for transcendental ones, `2·M·N·K` for matmuls and
//! `2·out·(C_in/groups)·kernel` for convolutions.

use super::lang::{Data, EGraph, ENode};
use egg::Language;
use fxhlo_ir::{Graph, NodeKind, Op, TensorType};
use std::collections::HashMap;

/// Bytes of a tensor (0 when its shape is symbolic).
pub fn bytes(t: &TensorType) -> f64 {
    t.numel().unwrap_or(0) as f64 * t.dtype.size_bytes() as f64
}

fn numel(t: &TensorType) -> f64 {
    t.numel().unwrap_or(0) as f64
}

/// Estimated FLOPs of one op, from its tensor argument types and result types.
pub fn flops(op: Op, inputs: &[&TensorType], outputs: &[TensorType]) -> f64 {
    let out = outputs.first().map(numel).unwrap_or(0.0);
    let dim =
        |t: &TensorType, i: usize| t.shape.get(i).and_then(|d| d.as_static()).unwrap_or(0) as f64;
    match op {
        Op::Mm => inputs.first().map_or(0.0, |a| 2.0 * out * dim(a, 1)),
        Op::Addmm => inputs.get(1).map_or(0.0, |a| 2.0 * out * dim(a, 1) + out),
        Op::Bmm => inputs.first().map_or(0.0, |a| 2.0 * out * dim(a, 2)),
        Op::Convolution => inputs.get(1).map_or(0.0, |w| {
            let per_out: f64 = w
                .shape
                .iter()
                .skip(1)
                .map(|d| d.as_static().unwrap_or(0) as f64)
                .product();
            2.0 * out * per_out
        }),
        _ if op.is_view() => 0.0,
        _ => {
            let inp = inputs.iter().map(|t| numel(t)).fold(0.0, f64::max);
            out.max(inp) * op.cost_weight()
        }
    }
}

/// Cost of one op: bytes read and written plus FLOPs; views cost 1.
pub fn op_cost(op: Op, inputs: &[&TensorType], outputs: &[TensorType]) -> f64 {
    if op.is_view() {
        return 1.0;
    }
    let moved: f64 =
        inputs.iter().map(|t| bytes(t)).sum::<f64>() + outputs.iter().map(bytes).sum::<f64>();
    1.0 + moved + flops(op, inputs, outputs)
}

/// Cost of a whole graph: the sum of its nodes' costs (every value computed once).
pub fn graph_cost(g: &Graph) -> f64 {
    g.nodes
        .iter()
        .map(|n| {
            let ins: Vec<&TensorType> = n
                .args
                .iter()
                .flat_map(|a| a.values())
                .map(|v| g.ty(v))
                .collect();
            match &n.kind {
                NodeKind::Input { .. } => 0.0,
                NodeKind::Op(op) => op_cost(*op, &ins, &n.results),
                NodeKind::Unsupported { .. } => {
                    1.0 + ins.iter().map(|t| bytes(t)).sum::<f64>()
                        + n.results.iter().map(bytes).sum::<f64>()
                }
            }
        })
        .sum()
}

/// egg cost function: the tree cost of [`op_cost`] (a shared value counts once per use).
pub struct CostFn {
    local: HashMap<ENode, f64>,
}

impl CostFn {
    /// Precomputes the local cost of every e-node, with its e-class's result types.
    pub fn new(egraph: &EGraph) -> CostFn {
        let mut local = HashMap::new();
        for class in egraph.classes() {
            let outs = match &class.data {
                Data::Tensor(t) => vec![t.clone()],
                Data::Tuple(ts) => ts.clone(),
                Data::Attr(_) | Data::List(_) => vec![],
                Data::Invalid(_) => {
                    for n in &class.nodes {
                        local.insert(n.clone(), f64::INFINITY);
                    }
                    continue;
                }
            };
            for n in &class.nodes {
                let mut ins = vec![];
                for c in n.children() {
                    match &egraph[*c].data {
                        Data::Tensor(t) => ins.push(t),
                        Data::List(l) => ins.extend(l.iter().flatten()),
                        _ => {}
                    }
                }
                let c = match n {
                    ENode::Input(_) | ENode::Attr(_) | ENode::List(..) | ENode::Get(..) => 0.0,
                    ENode::Op(op, _) => op_cost(*op, &ins, &outs),
                    ENode::Opaque(..) => {
                        1.0 + ins.iter().map(|t| bytes(t)).sum::<f64>()
                            + outs.iter().map(bytes).sum::<f64>()
                    }
                };
                local.insert(n.clone(), c);
            }
        }
        CostFn { local }
    }
}

impl egg::CostFunction<ENode> for CostFn {
    type Cost = f64;

    fn cost<C>(&mut self, enode: &ENode, mut costs: C) -> f64
    where
        C: FnMut(egg::Id) -> f64,
    {
        let local = self.local.get(enode).copied().unwrap_or(f64::INFINITY);
        enode
            .children()
            .iter()
            .fold(local, |acc, &c| acc + costs(c))
    }
}
