//! The lockstep numerics debugger behind `fxhlo compare`: runs a model on the fast runtime and
//! on the reference interpreter and names the first node whose value leaves tolerance.
//!
//! Two runs of the fast runtime are compared with the interpreter (the oracle, `f64` inside):
//! the program as `compile` builds it (its outputs), and an instrumented copy of the graph in
//! which every value a node computes is also a graph output, so that the runtime writes each
//! one out. Walking the nodes in topological order, the first value outside tolerance is where
//! the divergence starts: its inputs were still within tolerance. The instrumented program
//! fuses differently (a kernel writes every value it computes), which is why the first run is
//! kept: it is what users run.

use crate::{compare, remove_dead_nodes, Comparison, CompileOptions, Result, Tolerance};
use fxhlo_ir::graph::{NodeKind, ValueRef};
use fxhlo_ir::{HostTensor, Model, Weights};

/// One value compared by [`compare_nodes`].
#[derive(Clone, Debug)]
pub struct NodeComparison {
    /// The producing node's name.
    pub node: String,
    /// Its op (ATen name).
    pub op: String,
    /// The value's type, as the IR text writes it.
    pub ty: String,
    /// The tolerance it was judged with (per dtype unless given).
    pub tol: Tolerance,
    /// The comparison (`name` is the value's name).
    pub cmp: Comparison,
    /// For a value outside tolerance, the smallest relative tolerance (at `tol.atol`) that
    /// would accept it.
    pub needed_rtol: Option<f64>,
}

/// The smallest relative tolerance (with `tol.atol` kept) that would accept `fast` against
/// `reference`; infinite where NaN/Inf differ or the shapes do.
fn needed_rtol(c: &Comparison, tol: Tolerance, fast: &HostTensor, reference: &HostTensor) -> f64 {
    if c.mismatch.is_some() {
        return f64::INFINITY;
    }
    let mut need = 0.0f64;
    for (a, e) in fast.to_f64_vec().into_iter().zip(reference.to_f64_vec()) {
        if !a.is_finite() || !e.is_finite() {
            if !((a.is_nan() && e.is_nan()) || a == e) {
                return f64::INFINITY;
            }
            continue;
        }
        let over = (a - e).abs() - tol.atol;
        if over > 0.0 {
            need = need.max(if e == 0.0 {
                f64::INFINITY
            } else {
                over / e.abs()
            });
        }
    }
    need
}

/// What [`compare_nodes`] found.
#[derive(Debug)]
pub struct Lockstep {
    /// The compiled program's outputs against the interpreter's.
    pub outputs: Vec<Comparison>,
    /// Every value of the instrumented program, in topological order.
    pub values: Vec<NodeComparison>,
    /// Index into `values` of the first value outside tolerance.
    pub first_bad: Option<usize>,
}

/// The graph of `model` with every floating or integer value an op node computes added to its
/// outputs (after the original outputs, in node order), and the nodes of those values.
fn instrumented(model: &Model) -> Result<(Model, Vec<(usize, usize)>)> {
    let mut g = model.graph.clone();
    remove_dead_nodes(&mut g)?;
    let mut extra = Vec::new();
    for (i, n) in g.nodes.iter().enumerate() {
        if !matches!(n.kind, NodeKind::Op(_)) {
            continue;
        }
        for r in 0..n.results.len() {
            extra.push((i, r));
        }
    }
    for &(i, r) in &extra {
        g.outputs.push(ValueRef::new(i, r));
    }
    Ok((
        Model {
            graph: g,
            weights: model.weights.clone(),
        },
        extra,
    ))
}

/// Runs `model` on `inputs` with the fast runtime (compiled with `opts`) and with the reference
/// interpreter, output by output and then value by value (see the module doc). `tol` replaces
/// the per-dtype defaults of [`Tolerance::for_dtype`].
pub fn compare_nodes(
    model: &Model,
    inputs: &Weights,
    opts: &CompileOptions,
    threads: Option<usize>,
    tol: Option<Tolerance>,
) -> Result<Lockstep> {
    let exec_opts = fxhlo_runtime::fast::ExecOptions {
        threads,
        ..Default::default()
    };
    // 1. the program users run
    let ex = fxhlo_runtime::fast::Executor::new(crate::compile(model, opts)?, &exec_opts)?;
    let fast = ex.run(inputs)?;
    let reference = crate::run_reference(model, inputs)?;
    let outputs = fast
        .iter()
        .zip(&reference)
        .enumerate()
        .map(|(i, (a, e))| {
            compare(
                &format!("output{i}"),
                a,
                e,
                tol.unwrap_or(Tolerance::for_dtype(e.dtype)),
            )
        })
        .collect();
    // 2. every value
    let (inst, values) = instrumented(model)?;
    let skip = inst.graph.outputs.len() - values.len();
    let ex = fxhlo_runtime::fast::Executor::new(crate::compile(&inst, opts)?, &exec_opts)?;
    let fast = ex.run(inputs)?;
    let reference = crate::run_reference(&inst, inputs)?;
    let out: Vec<NodeComparison> = values
        .iter()
        .enumerate()
        .map(|(k, &(i, r))| {
            let node = &inst.graph.nodes[i];
            let (a, e) = (&fast[skip + k], &reference[skip + k]);
            let t = tol.unwrap_or(Tolerance::for_dtype(e.dtype));
            let cmp = compare(&node.result_names[r], a, e, t);
            let needed_rtol = (!cmp.ok()).then(|| needed_rtol(&cmp, t, a, e));
            NodeComparison {
                node: node.name.clone(),
                op: node.op_name(),
                ty: node.results[r].to_string(),
                tol: t,
                cmp,
                needed_rtol,
            }
        })
        .collect();
    Ok(Lockstep {
        outputs,
        first_bad: out.iter().position(|v| !v.cmp.ok()),
        values: out,
    })
}
