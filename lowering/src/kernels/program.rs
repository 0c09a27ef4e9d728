//! Builds a runtime [`Program`] from a graph and its fusion plan: one step per fusion kernel,
//! compiled by the kernel families that cover it, else a fallback step that runs the kernel's
//! nodes in the reference interpreter (listed with its reason by `--stats`).

use fxhlo_ir::{Arg, Graph, InputKind, Node, NodeId, NodeKind, ValueRef};
use fxhlo_passes::fusion::{FusionPlan, Kernel as FusionKernel};
use fxhlo_runtime::fast::program::{BlockSpec, Kernel, Launch, Program, Step, TensorSpec, ValueId};
use std::collections::{BTreeMap, BTreeSet};

/// Counts of how the kernels of a plan were compiled.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BuildReport {
    /// Steps by kernel kind.
    pub by_kind: BTreeMap<String, usize>,
    /// Fallback steps: first node and reason.
    pub fallbacks: Vec<(String, String)>,
}

/// The program's value table under construction.
pub struct Values<'g> {
    g: &'g Graph,
    ids: BTreeMap<ValueRef, ValueId>,
    /// Specs of the values, by id.
    pub specs: Vec<TensorSpec>,
}

impl<'g> Values<'g> {
    /// The id of `v`, added if new.
    pub fn id(&mut self, v: ValueRef) -> Result<ValueId, String> {
        if let Some(&id) = self.ids.get(&v) {
            return Ok(id);
        }
        let t = self.g.ty(v);
        let mut shape = Vec::with_capacity(t.shape.len());
        for d in &t.shape {
            let n = d
                .as_static()
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| {
                    format!(
                        "value '{}' has a symbolic shape; the fast runtime needs static shapes",
                        self.g.value_name(v)
                    )
                })?;
            shape.push(n);
        }
        let id = self.specs.len() as ValueId;
        self.specs.push(TensorSpec {
            name: self.g.value_name(v).to_string(),
            dtype: t.dtype,
            shape,
        });
        self.ids.insert(v, id);
        Ok(id)
    }

    /// An internal value (no graph counterpart), e.g. a matmul result before its epilogue.
    pub fn internal(&mut self, spec: TensorSpec) -> ValueId {
        self.specs.push(spec);
        (self.specs.len() - 1) as ValueId
    }
}

/// Builds the program of `g` (already optimized) from its fusion `plan`.
pub fn build_program(g: &Graph, plan: &FusionPlan) -> Result<(Program, BuildReport), String> {
    let mut vals = Values {
        g,
        ids: BTreeMap::new(),
        specs: vec![],
    };
    let mut program = Program::default();
    for (i, n) in g.nodes.iter().enumerate() {
        match &n.kind {
            NodeKind::Input {
                kind: InputKind::User,
                ..
            } => {
                let id = vals.id(ValueRef::new(i, 0))?;
                program.inputs.push(id);
            }
            NodeKind::Input { target, .. } => {
                let id = vals.id(ValueRef::new(i, 0))?;
                let target = target.clone().unwrap_or_else(|| n.name.clone());
                program.constants.push((id, target));
            }
            NodeKind::Unsupported { target, .. } => {
                return Err(format!(
                    "node {i} '{}': op {target} is not supported by fxhlo",
                    n.name
                ));
            }
            NodeKind::Op(_) => {}
        }
    }
    let mut report = BuildReport::default();
    for k in &plan.kernels {
        let steps = build_kernel(g, k, &mut vals)?;
        for s in steps {
            *report
                .by_kind
                .entry(s.kernel.kind().to_string())
                .or_insert(0) += 1;
            if let Kernel::Fallback { reason, .. } = &s.kernel {
                report
                    .fallbacks
                    .push((s.name().to_string(), reason.clone()));
            }
            program.steps.push(s);
        }
    }
    for &o in &g.outputs {
        program.outputs.push(vals.id(o)?);
    }
    program.values = vals.specs;
    Ok((program, report))
}

/// The steps of one fusion kernel: the fast families first, the fallback otherwise.
fn build_kernel(g: &Graph, k: &FusionKernel, vals: &mut Values<'_>) -> Result<Vec<Step>, String> {
    let reason = "no fast kernel for this kind yet".to_string();
    fallback_step(g, k, vals, reason).map(|s| vec![s])
}

/// Names of a kernel's nodes, in order.
pub fn node_names(g: &Graph, k: &FusionKernel) -> Vec<String> {
    k.nodes
        .iter()
        .chain(&k.recomputed)
        .copied()
        .collect::<BTreeSet<NodeId>>()
        .into_iter()
        .map(|i| g.nodes[i].name.clone())
        .collect()
}

/// A step that runs the kernel's nodes in the reference interpreter.
pub fn fallback_step(
    g: &Graph,
    k: &FusionKernel,
    vals: &mut Values<'_>,
    reason: String,
) -> Result<Step, String> {
    let sub = subgraph(g, k);
    let mut srcs = vec![];
    for &v in &k.inputs {
        srcs.push(vals.id(v)?);
    }
    let mut dsts = vec![];
    for &v in &k.outputs {
        dsts.push(vals.id(v)?);
    }
    let blocks = srcs
        .iter()
        .chain(&dsts)
        .map(|&v| BlockSpec::whole(&vals.specs[v as usize].shape))
        .collect();
    Ok(Step {
        nodes: node_names(g, k),
        srcs,
        dsts,
        launch: Launch {
            grid: vec![1],
            blocks,
        },
        kernel: Kernel::Fallback {
            graph: fxhlo_ir::text::print_graph(&sub),
            reason,
        },
    })
}

/// The graph of a kernel's nodes alone: inputs `in0..` for the kernel's inputs (in order), the
/// kernel's outputs as outputs.
pub fn subgraph(g: &Graph, k: &FusionKernel) -> Graph {
    let mut sub = Graph::default();
    let mut map: BTreeMap<ValueRef, ValueRef> = BTreeMap::new();
    for (j, &v) in k.inputs.iter().enumerate() {
        sub.nodes.push(Node {
            name: format!("in{j}"),
            kind: NodeKind::Input {
                kind: InputKind::User,
                target: None,
            },
            args: vec![],
            result_names: vec![format!("in{j}")],
            results: vec![g.ty(v).clone()],
        });
        map.insert(v, ValueRef::new(j, 0));
    }
    let members: BTreeSet<NodeId> = k.nodes.iter().chain(&k.recomputed).copied().collect();
    for i in members {
        let n = &g.nodes[i];
        let id = sub.nodes.len();
        let args = n.args.iter().map(|a| remap(a, &map)).collect();
        sub.nodes.push(Node { args, ..n.clone() });
        for r in 0..n.results.len() {
            map.insert(ValueRef::new(i, r), ValueRef::new(id, r));
        }
    }
    sub.outputs = k.outputs.iter().map(|v| map[v]).collect();
    sub
}

fn remap(a: &Arg, map: &BTreeMap<ValueRef, ValueRef>) -> Arg {
    match a {
        Arg::Tensor(v) => Arg::Tensor(map[v]),
        Arg::Tensors(vs) => Arg::Tensors(vs.iter().map(|v| v.map(|v| map[&v])).collect()),
        other => other.clone(),
    }
}
