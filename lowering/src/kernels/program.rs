//! Builds a runtime [`Program`] from a graph and its fusion plan: the steps of each fusion
//! kernel, compiled by the kernel families that cover it, else a fallback step that runs the
//! kernel's nodes in the reference interpreter (listed with its reason by `--stats`). Kernels
//! are merged (reduction chains, attentions, epilogues into their matmul/convolution) or split
//! (materialized operands, one elementwise step per output shape, ...) here; each such
//! decision is recorded on the steps it shapes, with its reason (`Step::origin`, printed by the
//! program's text form).

use super::Slots;
use fxhlo_ir::{Arg, Graph, InputKind, Node, NodeId, NodeKind, ValueRef};
use fxhlo_passes::fusion::{FusionPlan, Kernel as FusionKernel, KernelKind};
use fxhlo_runtime::fast::program::{
    BlockSpec, Epilogue, Kernel, Launch, Origin, Program, Step, TensorSpec, ValueId,
};
use fxhlo_runtime::fast::reduce::RowReduce;
use std::collections::{BTreeMap, BTreeSet};

/// Counts of how the kernels of a plan were compiled.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BuildReport {
    /// Steps by kernel kind.
    pub by_kind: BTreeMap<String, usize>,
    /// Fallback steps: first node and reason.
    pub fallbacks: Vec<(String, String)>,
    /// Steps that read only constants, run when the artifact was made (see
    /// `fxhlo_runtime::fast::fold`): their first nodes. The counts above leave them out.
    pub folded: Vec<String>,
}

impl BuildReport {
    /// Sets the counts by kind and the fallbacks to those of `steps` (`folded` stays as it
    /// is): after `build_program`, and again once the compiler has folded steps away.
    pub fn count(&mut self, steps: &[Step]) {
        self.by_kind.clear();
        self.fallbacks.clear();
        for s in steps {
            *self.by_kind.entry(s.kernel.kind().to_string()).or_insert(0) += 1;
            if let Kernel::Fallback { reason, .. } = &s.kernel {
                self.fallbacks.push((s.name().to_string(), reason.clone()));
            }
        }
    }
}

/// The program's value table under construction.
#[derive(Clone)]
pub struct Values<'g> {
    g: &'g Graph,
    ids: BTreeMap<ValueRef, ValueId>,
    /// Specs of the values, by id.
    pub specs: Vec<TensorSpec>,
    /// The graph value behind each id (none for internal values).
    refs: Vec<Option<ValueRef>>,
    /// Values some earlier step (or the caller) has computed: inputs, constants, step results.
    ready: BTreeSet<ValueRef>,
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
        self.refs.push(Some(v));
        self.ids.insert(v, id);
        Ok(id)
    }

    /// An internal value (no graph counterpart), e.g. a matmul result before its epilogue.
    pub fn internal(&mut self, spec: TensorSpec) -> ValueId {
        self.specs.push(spec);
        self.refs.push(None);
        (self.specs.len() - 1) as ValueId
    }
}

/// Builds the program of `g` (already optimized) from its fusion `plan`.
pub fn build_program(g: &Graph, plan: &FusionPlan) -> Result<(Program, BuildReport), String> {
    let mut vals = Values {
        g,
        ids: BTreeMap::new(),
        specs: vec![],
        refs: vec![],
        ready: BTreeSet::new(),
    };
    let mut program = Program::default();
    for (i, n) in g.nodes.iter().enumerate() {
        match &n.kind {
            NodeKind::Input {
                kind: InputKind::User,
                ..
            } => {
                let id = vals.id(ValueRef::new(i, 0))?;
                vals.ready.insert(ValueRef::new(i, 0));
                program.inputs.push(id);
            }
            NodeKind::Input { target, .. } => {
                let id = vals.id(ValueRef::new(i, 0))?;
                vals.ready.insert(ValueRef::new(i, 0));
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
    let (mut chains, mut absorbed) = reduction_chains(g, plan);
    // Fused attentions, each in place of the last of its kernels; not where a reduction chain
    // would take some of its kernels together with kernels outside it.
    let mut attentions: BTreeMap<usize, super::attention::AttentionGroup> = BTreeMap::new();
    // Decisions about a kernel made before its steps exist, recorded on them when they do.
    let mut notes: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for a in super::attention::find(g, plan) {
        let mixed = chains.values().any(|c| {
            let n = c.kernels.iter().filter(|j| a.kernels.contains(j)).count();
            n > 0 && n < c.kernels.len()
        });
        if mixed {
            for &j in &a.kernels {
                notes.entry(j).or_default().push(format!(
                    "not merged into a fused attention of kernels {}: a row-reduction chain takes some of them together with kernels outside it",
                    list(&a.kernels)
                ));
            }
            continue;
        }
        let Some(&last) = a.kernels.last() else {
            continue;
        };
        for &j in &a.kernels {
            chains.remove(&j);
            absorbed.insert(j);
        }
        absorbed.remove(&last);
        attentions.insert(last, a);
    }
    for (i, k) in plan.kernels.iter().enumerate() {
        if absorbed.contains(&i) {
            continue;
        }
        let mut group = vec![i];
        let steps = if let Some(a) = attentions.remove(&i) {
            group = a.kernels.clone();
            match attention_steps(g, &a, &mut vals) {
                Ok(mut steps) => {
                    if let Some(last) = steps.last_mut() {
                        last.origin.decisions.push(format!(
                            "kernels {} merged into one fused attention step: an attention composite whose kernels only feed each other",
                            list(&a.kernels)
                        ));
                    }
                    steps
                }
                // A mask the elementwise engine cannot compute: the kernels as they are.
                Err(e) => {
                    let mut steps =
                        each_kernel(g, a.kernels.iter().map(|&j| &plan.kernels[j]), &mut vals)?;
                    note(
                        &mut steps,
                        format!(
                            "not merged into a fused attention of kernels {}: {e}",
                            list(&a.kernels)
                        ),
                    );
                    steps
                }
            }
        } else {
            match chains.remove(&i) {
                Some(Chain {
                    kernels,
                    kernel,
                    slots,
                }) => {
                    let ks: Vec<&FusionKernel> =
                        kernels.iter().map(|&j| &plan.kernels[j]).collect();
                    let stages = kernel.stages.len();
                    group = kernels.clone();
                    match row_step(g, &ks, kernel, &slots, &mut vals) {
                        Ok(mut s) => {
                            s.origin.decisions.push(format!(
                                "reduction kernels {} merged into one row-reduction step of {stages} stages: the outputs of each but the last are read only by later ones over the same rows, and none is returned",
                                list(&kernels)
                            ));
                            vec![s]
                        }
                        // Not expected (the chain compiled when it was found): the kernels alone.
                        Err(e) => {
                            let mut steps = each_kernel(g, ks, &mut vals)?;
                            note(
                                &mut steps,
                                format!(
                                    "reduction chain of kernels {} not built: {e}",
                                    list(&kernels)
                                ),
                            );
                            steps
                        }
                    }
                }
                None => build_kernel(g, k, &mut vals)?,
            }
        };
        let mut steps = materialize_unready(g, steps, &mut vals)?;
        for s in &mut steps {
            if s.origin.kernels.is_empty() {
                s.origin.kernels = group.iter().map(|&j| j as u32).collect();
            }
            for j in &group {
                if let Some(ns) = notes.get(j) {
                    s.origin.decisions.extend(ns.iter().cloned());
                }
            }
        }
        mark_ready(&mut vals, &steps);
        program.steps.extend(steps);
    }
    for &o in &g.outputs {
        program.outputs.push(vals.id(o)?);
    }
    program.values = vals.specs;
    report.count(&program.steps);
    Ok((program, report))
}

/// `[1, 2, 3]`: kernel numbers for decisions.
fn list(ks: &[usize]) -> String {
    format!(
        "[{}]",
        ks.iter()
            .map(|k| k.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Records decision `why` on each of `steps`.
fn note(steps: &mut [Step], why: impl Into<String>) {
    let why = why.into();
    for s in steps {
        s.origin.decisions.push(why.clone());
    }
}

/// The step of a fused attention, after an elementwise step for an operand that no earlier
/// step stored (a mask recomputed inside the softmax's kernel).
fn attention_steps(
    g: &Graph,
    a: &super::attention::AttentionGroup,
    vals: &mut Values<'_>,
) -> Result<Vec<Step>, String> {
    // On failure nothing counts as computed (the caller builds the kernels instead).
    let ready = vals.ready.clone();
    let steps = attention_steps_in(g, a, vals);
    if steps.is_err() {
        vals.ready = ready;
    }
    steps
}

fn attention_steps_in(
    g: &Graph,
    a: &super::attention::AttentionGroup,
    vals: &mut Values<'_>,
) -> Result<Vec<Step>, String> {
    let mut steps = vec![];
    for &v in &a.inputs {
        if !vals.ready.contains(&v) {
            steps.extend(recompute(g, v, vals)?);
        }
    }
    let srcs = operand_ids(g, &a.inputs, &BTreeSet::new(), vals)?;
    let dst = vals.id(a.output)?;
    let launch = launch(vals, &srcs, &[dst], vec![a.spec.batch, 1]);
    steps.push(Step {
        origin: Default::default(),
        nodes: a.nodes.iter().map(|&i| g.nodes[i].name.clone()).collect(),
        srcs,
        dsts: vec![dst],
        launch,
        kernel: Kernel::Attention(Box::new(a.spec.clone())),
    });
    Ok(steps)
}

/// Elementwise steps computing `v` from values some earlier step (or the caller) computed,
/// through the nodes between them (a view chain or a mask that other kernels only recomputed);
/// their results count as computed from then on.
fn recompute(g: &Graph, v: ValueRef, vals: &mut Values<'_>) -> Result<Vec<Step>, String> {
    let mut chain = BTreeSet::new();
    let mut work = vec![v.node];
    while let Some(i) = work.pop() {
        if !matches!(g.nodes[i].kind, NodeKind::Op(_)) {
            return Err(format!("value '{}' is not computed", g.value_name(v)));
        }
        if chain.insert(i) {
            for a in reads(g, i) {
                if !vals.ready.contains(&a) {
                    work.push(a.node);
                }
            }
        }
    }
    // What the elementwise engine cannot compute (an `i64` arange, say) runs in the
    // interpreter; a chain of constants only is folded when the artifact is made.
    let mut steps = match all_or_nothing(vals, |vals| {
        elementwise_steps(g, &chain, &[v], &BTreeSet::new(), vals)
    }) {
        Ok(steps) => steps,
        Err(reason) => {
            let k = nodes_kernel(g, &chain, vec![v]);
            vec![fallback_step(g, &k, vals, reason)?]
        }
    };
    note(
        &mut steps,
        format!(
            "split: materializes '{}', which the fusion plan only recomputes inside kernels, as a later step reads it as an operand",
            g.value_name(v)
        ),
    );
    mark_ready(vals, &steps);
    Ok(steps)
}

/// `steps` (one kernel's), each preceded by steps that compute the operands it reads that no
/// earlier step computed: a value the fusion plan recomputes inside a kernel (an `arange` or a
/// `full` built from the shapes alone, a view chain) which the kernel's step reads as an
/// operand instead (a gather's indices, say). Without them the step would read a value no
/// step writes.
fn materialize_unready(
    g: &Graph,
    steps: Vec<Step>,
    vals: &mut Values<'_>,
) -> Result<Vec<Step>, String> {
    let mut out = Vec::with_capacity(steps.len());
    let mut written: BTreeSet<ValueId> = BTreeSet::new();
    for step in steps {
        for &s in &step.srcs {
            if written.contains(&s) {
                continue;
            }
            if let Some(Some(v)) = vals.refs.get(s as usize).copied() {
                if !vals.ready.contains(&v) {
                    let more = recompute(g, v, vals)?;
                    written.extend(more.iter().flat_map(|m| m.dsts.iter().copied()));
                    out.extend(more);
                }
            }
        }
        written.extend(step.dsts.iter().copied());
        out.push(step);
    }
    Ok(out)
}

/// The steps of each of `ks` alone (where one step meant to replace them cannot be built).
fn each_kernel<'k>(
    g: &Graph,
    ks: impl IntoIterator<Item = &'k FusionKernel>,
    vals: &mut Values<'_>,
) -> Result<Vec<Step>, String> {
    let mut steps = vec![];
    for k in ks {
        steps.extend(build_kernel(g, k, vals)?);
    }
    Ok(steps)
}

/// The steps of one fusion kernel: the fast families first, the fallback otherwise.
fn build_kernel(g: &Graph, k: &FusionKernel, vals: &mut Values<'_>) -> Result<Vec<Step>, String> {
    // Dead code (nothing reads the kernel's results): nothing to run.
    if k.outputs.is_empty() {
        return Ok(vec![]);
    }
    let fast = match k.kind {
        KernelKind::Elementwise => {
            let members = members(k);
            elementwise_steps(g, &members, &k.outputs, &BTreeSet::new(), vals)
        }
        KernelKind::Matmul | KernelKind::Conv => heavy_steps(g, k, vals),
        KernelKind::Other => other_steps(g, k, vals),
        KernelKind::Reduction if is_arg_reduction(g, k.root) => arg_steps(g, k, vals),
        KernelKind::Reduction => reduction_step(g, &[k], vals)
            .map(|s| vec![s])
            .or_else(|e| {
                let mut steps = reduction_then_epilogue(g, k, vals).ok_or(e.clone())?;
                note(
                    &mut steps,
                    format!("split: the reduction writes its results, then its epilogue runs as elementwise steps; as one row-reduction step: {e}"),
                );
                Ok(steps)
            }),
    };
    match fast {
        Ok(steps) => Ok(steps),
        Err(reason) => fallback_step(g, k, vals, reason).map(|s| vec![s]),
    }
}

fn members(k: &FusionKernel) -> BTreeSet<NodeId> {
    k.nodes.iter().chain(&k.recomputed).copied().collect()
}

/// A step's operand values, each of which must be computed outside the kernel (`inside` holds
/// the nodes whose values exist only within it).
fn operand_ids(
    g: &Graph,
    vs: &[ValueRef],
    inside: &BTreeSet<NodeId>,
    vals: &mut Values<'_>,
) -> Result<Vec<ValueId>, String> {
    vs.iter()
        .map(|v| {
            if inside.contains(&v.node) {
                Err(format!(
                    "value '{}' would have to be materialized inside the kernel",
                    g.value_name(*v)
                ))
            } else {
                vals.id(*v)
            }
        })
        .collect()
}

fn launch(vals: &Values<'_>, srcs: &[ValueId], dsts: &[ValueId], grid: Vec<usize>) -> Launch {
    Launch {
        grid,
        blocks: srcs
            .iter()
            .chain(dsts)
            .map(|&v| BlockSpec::whole(&vals.specs[v as usize].shape))
            .collect(),
    }
}

/// Elementwise steps computing `outputs` from `members`: one fused expression per output
/// shape. Values in `given` are read from the program (computed by an earlier step).
fn elementwise_steps(
    g: &Graph,
    members: &BTreeSet<NodeId>,
    outputs: &[ValueRef],
    given: &BTreeSet<ValueRef>,
    vals: &mut Values<'_>,
) -> Result<Vec<Step>, String> {
    let mut by_shape: BTreeMap<Vec<i64>, Vec<ValueRef>> = BTreeMap::new();
    for &o in outputs {
        let shape = g
            .ty(o)
            .shape
            .iter()
            .map(|d| d.as_static().ok_or("symbolic shape"))
            .collect::<Result<Vec<i64>, _>>()?;
        by_shape.entry(shape).or_default().push(o);
    }
    let mut steps = vec![];
    let shapes = by_shape.len();
    for (shape, roots) in by_shape {
        let shape: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
        let mut slots = Slots::default();
        let e = super::expr::build(g, members, &roots, &shape, &mut slots)?;
        let inside: BTreeSet<NodeId> = members
            .iter()
            .copied()
            .filter(|n| !given.iter().any(|v| v.node == *n))
            .collect();
        let srcs = operand_ids(g, &slots.values, &inside, vals)?;
        let dsts = operand_ids(g, &roots, &BTreeSet::new(), vals)?;
        let numel: usize = shape.iter().product();
        let grid = vec![numel.div_ceil(fxhlo_runtime::fast::expr::TASK).max(1)];
        let launch = launch(vals, &srcs, &dsts, grid);
        steps.push(Step {
            origin: Default::default(),
            nodes: members.iter().map(|&i| g.nodes[i].name.clone()).collect(),
            srcs,
            dsts,
            launch,
            kernel: Kernel::Elementwise(e),
        });
    }
    if shapes > 1 {
        note(
            &mut steps,
            format!("split: the outputs have {shapes} shapes; one elementwise step per shape"),
        );
    }
    Ok(steps)
}

/// A matmul or convolution, then its epilogue (the kernel's nodes that depend on it) as an
/// elementwise step over its result.
fn heavy_steps(g: &Graph, k: &FusionKernel, vals: &mut Values<'_>) -> Result<Vec<Step>, String> {
    let root = k.root;
    let all = members(k);
    // The node whose value the product step writes: the root, or an add of a bias folded
    // into the product.
    let mut computed = root;
    let mut decisions = vec![];
    let (kernel, operands, grid) = match k.kind {
        KernelKind::Matmul => {
            let mut m = super::dense::matmul_spec(g, root)?;
            if let Some(add) = super::dense::fold_bias(g, &mut m, root, &all, &k.outputs) {
                computed = add;
                decisions.push(format!(
                    "bias add '{}' folded into the product (its only reader)",
                    g.nodes[add].name
                ));
            }
            let mut ops = vec![m.a, m.b];
            ops.extend(m.bias);
            let grid = vec![m.spec.batch, m.spec.m.div_ceil(m.spec.block_rows().max(1))];
            (
                Kernel::Matmul {
                    spec: m.spec,
                    epilogue: None,
                },
                ops,
                grid,
            )
        }
        _ => {
            let c = super::dense::conv_spec(g, root)?;
            let mut ops = vec![c.input, c.weight];
            ops.extend(c.bias);
            let grid = vec![c.spec.n, c.spec.groups];
            (
                Kernel::Conv {
                    spec: c.spec,
                    bias: c.bias.is_some(),
                    epilogue: None,
                },
                ops,
                grid,
            )
        }
    };
    // The prologue: members the root depends on (views folded into its operands); every
    // other member is epilogue, computed after the product.
    let mut prologue = BTreeSet::new();
    let mut work = vec![root];
    while let Some(i) = work.pop() {
        for v in reads(g, i) {
            if all.contains(&v.node) && prologue.insert(v.node) {
                work.push(v.node);
            }
        }
    }
    // Operands the spec could not read through (a view that is not a stride pattern) are
    // materialized first by an elementwise step over the prologue.
    // A view chain recomputed in several kernels may be materialized by the first of them
    // already: read it then.
    let mut steps = vec![];
    let mut unfolded: Vec<ValueRef> = operands
        .iter()
        .copied()
        .filter(|v| all.contains(&v.node) && !vals.ready.contains(v))
        .collect();
    unfolded.sort();
    unfolded.dedup();
    if !unfolded.is_empty() {
        let mut more = elementwise_steps(g, &prologue, &unfolded, &BTreeSet::new(), vals)?;
        let names: Vec<&str> = unfolded.iter().map(|&v| g.value_name(v)).collect();
        note(
            &mut more,
            format!(
                "split: operands {names:?} of the product are not a stride pattern over stored values; materialized first"
            ),
        );
        vals.ready.extend(unfolded);
        steps.extend(more);
    }
    // Operands read through views of another kernel's internal values: recompute that view
    // chain from values already computed.
    for &v in &operands {
        if all.contains(&v.node) || vals.ready.contains(&v) {
            continue;
        }
        steps.extend(recompute(g, v, vals)?);
    }
    let srcs = operand_ids(g, &operands, &BTreeSet::new(), vals)?;
    let product = ValueRef::new(computed, 0);
    let dst = vals.id(product)?;
    steps.push(Step {
        nodes: prologue
            .iter()
            .chain([&root])
            .chain((computed != root).then_some(&computed))
            .map(|&i| g.nodes[i].name.clone())
            .collect(),
        launch: launch(vals, &srcs, &[dst], grid),
        srcs,
        dsts: vec![dst],
        kernel,
        origin: Origin {
            kernels: vec![],
            decisions,
        },
    });
    let epilogue: BTreeSet<NodeId> = all
        .iter()
        .copied()
        .filter(|i| *i != root && *i != computed && !prologue.contains(i))
        .collect();
    let outs: Vec<ValueRef> = k
        .outputs
        .iter()
        .copied()
        .filter(|v| v.node != root && v.node != computed)
        .collect();
    if outs.iter().any(|v| prologue.contains(&v.node)) {
        return Err("a value of the matmul/conv prologue is used outside the kernel".into());
    }
    if !outs.is_empty() {
        let mut epi = elementwise_steps(g, &epilogue, &outs, &BTreeSet::from([product]), vals)?;
        let heavy = steps.last_mut().expect("pushed above");
        let fused = if epi.len() == 1 {
            fuse_epilogue(heavy, &epi[0], dst, vals)
        } else {
            Err(format!("it is {} steps (one per output shape)", epi.len()))
        };
        match fused {
            Ok(()) => {
                heavy.origin.decisions.push(
                    "epilogue fused into the product step: it reads the product elementwise over the product's index space and writes f32"
                        .into(),
                );
                epi.clear();
            }
            Err(why) => note(
                &mut epi,
                format!("split: the epilogue runs as its own step after the product: {why}"),
            ),
        }
        steps.extend(epi);
    }
    Ok(steps)
}

/// Moves an elementwise epilogue step into the matmul/conv step before it when the epilogue
/// iterates over the product's flat index space and reads the product only elementwise (so it
/// can run on each tile while the tile is hot). Returns why it did not.
fn fuse_epilogue(
    heavy: &mut Step,
    epi: &Step,
    product: ValueId,
    vals: &Values<'_>,
) -> Result<(), String> {
    let Kernel::Elementwise(e) = &epi.kernel else {
        return Err("it is not an elementwise step".into());
    };
    if e.numel() != vals.specs[product as usize].numel() {
        return Err("it iterates over a different number of elements than the product".into());
    }
    // The fused epilogue stores f32 tiles (bf16 and f16 widened, rounded after the step); a
    // bool result (a mask) stays a step of its own.
    if (epi.dsts.iter()).any(|&v| !super::expr::is_f32_stored(vals.specs[v as usize].dtype)) {
        return Err("a result is not stored as f32 (a mask)".into());
    }
    // Slots: the heavy step's operands, then the epilogue's other operands, then the product.
    let mut srcs = heavy.srcs.clone();
    let mut map = Vec::with_capacity(epi.srcs.len());
    for &v in &epi.srcs {
        if v == product {
            map.push(None);
        } else {
            map.push(Some(srcs.len() as u32));
            srcs.push(v);
        }
    }
    let product_slot = srcs.len() as u32;
    let mut expr = e.clone();
    expr.map_slots(|s| map[s as usize].unwrap_or(product_slot));
    if !expr.reads_slot_elementwise(product_slot) {
        return Err("it reads the product at other elements than the one it computes".into());
    }
    let epilogue = Some(Box::new(Epilogue { expr }));
    match &mut heavy.kernel {
        Kernel::Matmul { epilogue: slot, .. } | Kernel::Conv { epilogue: slot, .. } => {
            *slot = epilogue
        }
        _ => return Err("the step before it is not a matmul or convolution".into()),
    }
    heavy.srcs = srcs;
    heavy.dsts.extend(&epi.dsts);
    heavy.nodes.extend(epi.nodes.iter().cloned());
    heavy.launch.blocks = heavy
        .srcs
        .iter()
        .chain(&heavy.dsts)
        .map(|&v| BlockSpec::whole(&vals.specs[v as usize].shape))
        .collect();
    Ok(())
}

/// A reduction kernel with its prologue and epilogue.
fn reduction_step(g: &Graph, ks: &[&FusionKernel], vals: &mut Values<'_>) -> Result<Step, String> {
    let mut slots = Slots::default();
    let r = super::reduce::build_chain(g, ks, &mut slots)?;
    row_step(g, ks, r, &slots, vals)
}

/// Whether node `n` is an arg-reduction (`argmax`, `argmin`, `max.dim`, `min.dim`), which
/// runs as its own step (see [`arg_steps`]) rather than in the row-reduction kernel.
fn is_arg_reduction(g: &Graph, n: NodeId) -> bool {
    use fxhlo_ir::Op;
    matches!(
        g.nodes[n].op(),
        Some(Op::Argmax | Op::Argmin | Op::MaxDim | Op::MinDim)
    )
}

/// The nodes of kernel `k` that read its root's results, directly or through each other (the
/// epilogue).
fn after_root(g: &Graph, k: &FusionKernel) -> BTreeSet<NodeId> {
    let mut after: BTreeSet<NodeId> = BTreeSet::new();
    for &n in &k.nodes {
        let reads_inside = reads(g, n).any(|v| v.node == k.root || after.contains(&v.node));
        if n != k.root && reads_inside {
            after.insert(n);
        }
    }
    after
}

/// An arg-reduction kernel as steps: its prologue (if any) as elementwise steps that
/// materialize the reduction's input, the arg-reduction step, then its epilogue as
/// elementwise steps, or, where those cannot run it (arithmetic on the `i64` indices, say), as
/// a fallback step of the epilogue's nodes alone. The value table is restored on an error.
fn arg_steps(g: &Graph, k: &FusionKernel, vals: &mut Values<'_>) -> Result<Vec<Step>, String> {
    all_or_nothing(vals, |vals| arg_steps_of(g, k, vals))
}

/// [`arg_steps`], leaving the value table changed on an error.
fn arg_steps_of(g: &Graph, k: &FusionKernel, vals: &mut Values<'_>) -> Result<Vec<Step>, String> {
    let after = after_root(g, k);
    let ik = super::dense::index_kernel(g, k.root)?;
    let mut steps = vec![];
    // The prologue: the input and the kernel's other outputs computed before the root, each
    // from the values already computed.
    let before = k
        .outputs
        .iter()
        .filter(|v| v.node != k.root && !after.contains(&v.node));
    for &v in ik.operands.iter().chain(before) {
        if !vals.ready.contains(&v) {
            steps.extend(recompute(g, v, vals)?);
        }
    }
    let arg = (ik.kernel, &ik.operands[..], &ik.results[..]);
    steps.push(node_step(g, k.root, arg, vals)?);
    if !after.is_empty() {
        note(
            &mut steps,
            "split: an arg-reduction runs as a step of its own, its epilogue as later steps",
        );
    }
    mark_ready(vals, &steps);
    let tail = outputs_of(k, &after);
    if tail.is_empty() {
        return Ok(steps);
    }
    let members: BTreeSet<NodeId> = after.iter().chain(&k.recomputed).copied().collect();
    let epilogue = all_or_nothing(vals, |vals| {
        if computed_before(g, &members, &BTreeSet::new(), vals) {
            elementwise_steps(g, &members, &tail, &BTreeSet::new(), vals)
        } else {
            Err("the epilogue reads a value computed later".to_string())
        }
    });
    match epilogue {
        Ok(s) => steps.extend(s),
        Err(reason) => {
            let rest = nodes_kernel(g, &after, tail);
            if let Some(v) = rest.inputs.iter().find(|v| !vals.ready.contains(v)) {
                return Err(format!(
                    "{reason}; and its epilogue reads '{}', computed inside the kernel",
                    g.value_name(*v)
                ));
            }
            steps.push(fallback_step(g, &rest, vals, reason)?);
        }
    }
    Ok(steps)
}

/// The outputs of kernel `k` that the nodes `of` compute.
fn outputs_of(k: &FusionKernel, of: &BTreeSet<NodeId>) -> Vec<ValueRef> {
    k.outputs
        .iter()
        .copied()
        .filter(|v| of.contains(&v.node))
        .collect()
}

/// Whether every value the nodes `members` read from outside them is in `given` or already
/// computed.
fn computed_before(
    g: &Graph,
    members: &BTreeSet<NodeId>,
    given: &BTreeSet<ValueRef>,
    vals: &Values<'_>,
) -> bool {
    members.iter().all(|&n| {
        reads(g, n)
            .all(|v| members.contains(&v.node) || given.contains(&v) || vals.ready.contains(&v))
    })
}

/// Marks the results of `steps` computed.
fn mark_ready(vals: &mut Values<'_>, steps: &[Step]) {
    for st in steps {
        for &d in &st.dsts {
            if let Some(Some(r)) = vals.refs.get(d as usize) {
                vals.ready.insert(*r);
            }
        }
    }
}

/// A fusion kernel of `nodes` alone with `outputs`: its inputs are the values they read from
/// outside.
fn nodes_kernel(g: &Graph, nodes: &BTreeSet<NodeId>, outputs: Vec<ValueRef>) -> FusionKernel {
    let mut inputs: Vec<ValueRef> = vec![];
    for &n in nodes {
        for v in reads(g, n) {
            if !nodes.contains(&v.node) && !inputs.contains(&v) {
                inputs.push(v);
            }
        }
    }
    FusionKernel {
        kind: KernelKind::Elementwise,
        root: nodes.last().copied().unwrap_or_default(),
        nodes: nodes.iter().copied().collect(),
        recomputed: vec![],
        inputs,
        outputs,
    }
}

/// A reduction kernel whose nodes after the reduction (its epilogue) cannot run row by row (a
/// layer norm over channels written back permuted, say), as two steps: the reduction with its
/// results materialized, then the epilogue as elementwise steps reading them. `None` when the
/// kernel has no such epilogue or either part fails (the caller's error stands).
fn reduction_then_epilogue(
    g: &Graph,
    k: &FusionKernel,
    vals: &mut Values<'_>,
) -> Option<Vec<Step>> {
    let after = after_root(g, k);
    if after.is_empty() {
        return None;
    }
    let results: Vec<ValueRef> = (0..g.nodes[k.root].results.len())
        .map(|i| ValueRef::new(k.root, i))
        .filter(|v| k.outputs.contains(v) || after.iter().any(|&n| reads(g, n).any(|r| r == *v)))
        .collect();
    // The reduction's results the epilogue reads, and the kernel's outputs before it.
    let head_outputs: Vec<ValueRef> = k
        .outputs
        .iter()
        .copied()
        .filter(|v| !after.contains(&v.node) && v.node != k.root)
        .chain(results.iter().copied())
        .collect();
    let head = FusionKernel {
        nodes: k
            .nodes
            .iter()
            .copied()
            .filter(|n| !after.contains(n))
            .collect(),
        outputs: head_outputs,
        ..k.clone()
    };
    let tail = outputs_of(k, &after);
    let given: BTreeSet<ValueRef> = results.into_iter().collect();
    // The epilogue with the cheap nodes the kernel recomputes; every other value it reads
    // must have been computed by an earlier step.
    let members: BTreeSet<NodeId> = after.iter().chain(&k.recomputed).copied().collect();
    if !computed_before(g, &members, &given, vals) {
        return None;
    }
    // Both parts or neither: a failed second part leaves the value table as it was.
    all_or_nothing(vals, |vals| {
        let mut steps = vec![reduction_step(g, &[&head], vals)?];
        steps.extend(elementwise_steps(g, &members, &tail, &given, vals)?);
        Ok::<_, String>(steps)
    })
    .ok()
}

/// `f` on the value table, which is left as it was where `f` fails.
fn all_or_nothing<'g, T, E>(
    vals: &mut Values<'g>,
    f: impl FnOnce(&mut Values<'g>) -> Result<T, E>,
) -> Result<T, E> {
    let saved = vals.clone();
    let r = f(vals);
    if r.is_err() {
        *vals = saved;
    }
    r
}

/// The values node `n` reads.
fn reads(g: &Graph, n: NodeId) -> impl Iterator<Item = ValueRef> + '_ {
    g.nodes[n].args.iter().flat_map(|a| a.values())
}

/// The step of row-reduction kernel `r` compiled from the kernels `ks` with operand `slots`.
fn row_step(
    g: &Graph,
    ks: &[&FusionKernel],
    r: RowReduce,
    slots: &Slots,
    vals: &mut Values<'_>,
) -> Result<Step, String> {
    let last = ks.last().ok_or("no kernel")?;
    let inside: BTreeSet<NodeId> = ks.iter().flat_map(|k| members(k)).collect();
    let srcs = operand_ids(g, &slots.values, &inside, vals)?;
    let dsts = operand_ids(g, &last.outputs, &BTreeSet::new(), vals)?;
    let launch = launch(vals, &srcs, &dsts, vec![r.rows.max(1)]);
    Ok(Step {
        origin: Default::default(),
        nodes: ks.iter().flat_map(|k| node_names(g, k)).collect(),
        srcs,
        dsts,
        launch,
        kernel: Kernel::RowReduce(Box::new(r)),
    })
}

/// Reduction kernels compiled as one (see [`build_chain`](super::reduce::build_chain)).
struct Chain {
    /// The kernels of the plan, in plan order; the last one's outputs are the step's.
    kernels: Vec<usize>,
    /// The compiled kernel.
    kernel: RowReduce,
    /// Its operands.
    slots: Slots,
}

/// Reduction kernels that run as the earlier stages of a later one over the same rows: the
/// chain of each last kernel (compiled once, here), and the set of kernels taken into a chain.
/// A kernel joins when every reader of its outputs is in the chain already and none is a graph
/// output (so its outputs need never be written), and the chain with it still compiles.
fn reduction_chains(g: &Graph, plan: &FusionPlan) -> (BTreeMap<usize, Chain>, BTreeSet<usize>) {
    let ks = &plan.kernels;
    let mut readers: BTreeMap<ValueRef, BTreeSet<usize>> = BTreeMap::new();
    for (i, k) in ks.iter().enumerate() {
        for &v in &k.inputs {
            readers.entry(v).or_default().insert(i);
        }
    }
    let returned: BTreeSet<ValueRef> = g.outputs.iter().copied().collect();
    let reduction = |i: usize| ks[i].kind == KernelKind::Reduction && !ks[i].outputs.is_empty();
    let (mut chains, mut absorbed) = (BTreeMap::new(), BTreeSet::new());
    for b in (0..ks.len()).rev() {
        if !reduction(b) || absorbed.contains(&b) {
            continue;
        }
        let mut chain = BTreeSet::from([b]);
        let mut built = None;
        for a in (0..b).rev() {
            let joins = reduction(a)
                && ks[a].outputs.iter().all(|v| {
                    !returned.contains(v) && readers.get(v).is_some_and(|r| r.is_subset(&chain))
                });
            if !joins {
                continue;
            }
            let mut with: Vec<usize> = chain.iter().copied().collect();
            with.push(a);
            with.sort_unstable();
            let kernels: Vec<&FusionKernel> = with.iter().map(|&j| &ks[j]).collect();
            let mut slots = Slots::default();
            if let Ok(kernel) = super::reduce::build_chain(g, &kernels, &mut slots) {
                chain.insert(a);
                built = Some(Chain {
                    kernels: with,
                    kernel,
                    slots,
                });
            }
        }
        if let Some(c) = built {
            absorbed.extend(c.kernels.iter().copied().filter(|&j| j != b));
            chains.insert(b, c);
        }
    }
    (chains, absorbed)
}

/// Pooling and gathers (single-node kernels), and view-like ops as elementwise copies.
fn other_steps(g: &Graph, k: &FusionKernel, vals: &mut Values<'_>) -> Result<Vec<Step>, String> {
    all_or_nothing(vals, |vals| other_steps_of(g, k, vals))
}

/// [`other_steps`], leaving the value table changed on an error.
fn other_steps_of(g: &Graph, k: &FusionKernel, vals: &mut Values<'_>) -> Result<Vec<Step>, String> {
    let root = k.root;
    let op = g.nodes[root].op();
    use fxhlo_ir::Op;
    let (kernel, operands, results) = match op {
        Some(Op::MaxPool2dWithIndices | Op::AvgPool2d | Op::AdaptiveAvgPool2d) => {
            let p = super::dense::pool_spec(g, root)?;
            let mut results = vec![ValueRef::new(root, 0)];
            let want_idx = p.indices && k.outputs.contains(&ValueRef::new(root, 1));
            if want_idx {
                results.push(ValueRef::new(root, 1));
            }
            (Kernel::Pool(p.spec), vec![p.input], results)
        }
        Some(Op::Cat) => {
            let (spec, inputs) = super::dense::concat_spec(g, root)?;
            (Kernel::Concat(spec), inputs, vec![ValueRef::new(root, 0)])
        }
        Some(Op::Cumsum | Op::Gather | Op::IndexTensor) => {
            let ik = super::dense::index_kernel(g, root)?;
            (ik.kernel, ik.operands, ik.results)
        }
        Some(Op::Embedding | Op::IndexSelect) => {
            let gk = super::dense::gather_spec(g, root)?;
            (
                Kernel::Gather(gk.spec),
                vec![gk.table, gk.indices],
                vec![ValueRef::new(root, 0)],
            )
        }
        _ => {
            // View-like ops (split, ...) may still be expressible as elementwise copies (one
            // step per result shape).
            return elementwise_steps(g, &members(k), &k.outputs, &BTreeSet::new(), vals)
                .map_err(|e| format!("no fast kernel for this op yet ({e})"));
        }
    };
    // Operands the kernel only recomputes (the positions `arange` of an embedding) are
    // computed first by `materialize_unready`, from values already computed.
    node_step(g, root, (kernel, &operands, &results), vals).map(|s| vec![s])
}

/// The step of node `n` alone: `kernel` reading `operands` (computed by earlier steps) and
/// writing `results`, in one grid point.
fn node_step(
    g: &Graph,
    n: NodeId,
    (kernel, operands, results): (Kernel, &[ValueRef], &[ValueRef]),
    vals: &mut Values<'_>,
) -> Result<Step, String> {
    let srcs = operand_ids(g, operands, &BTreeSet::from([n]), vals)?;
    let dsts = operand_ids(g, results, &BTreeSet::new(), vals)?;
    Ok(Step {
        origin: Default::default(),
        nodes: vec![g.nodes[n].name.clone()],
        launch: launch(vals, &srcs, &dsts, vec![1]),
        srcs,
        dsts,
        kernel,
    })
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
        origin: Default::default(),
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
