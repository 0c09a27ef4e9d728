//! The e-graph optimizer: translates a graph into an `egg` e-graph ([`lang`]), saturates the
//! rule set ([`rules`]) within bounds, extracts the cheapest graph under the cost model
//! ([`cost`]: bytes moved plus FLOPs) and translates it back, re-inferring every type through
//! the op table. The result is kept only if it verifies and costs no more than the input.
//!
//! Deterministic: egg hashes with a fixed hasher, rules run in a fixed order, extraction
//! breaks ties by e-node order, and names come from the source graph. Only the optional time
//! limit can make two runs differ; tests leave it off.

pub mod cost;
mod extract;
pub mod lang;
pub mod rules;

use crate::{Changed, Cx, Pass};
use egg::{Id, Runner, StopReason};
use fxhlo_ir::{Arg, Graph, IrError, Node, NodeKind, ValueRef};
use lang::{AttrVal, Data, ENode};
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::time::{Duration, Instant};

/// Bounds of one saturation run.
#[derive(Clone, Debug)]
pub struct Config {
    /// Most rule-application iterations.
    pub iter_limit: usize,
    /// Most e-nodes.
    pub node_limit: usize,
    /// Wall-clock limit; `None` for deterministic runs (tests).
    pub time_limit: Option<Duration>,
    /// Run the rules that reassociate or move a rounding too (not only the exact ones; see
    /// [`rules::Rule::exact`]).
    pub reassociate: bool,
    /// Most op nodes of one e-graph. A larger graph is optimized in windows of this many
    /// consecutive op nodes (in topological order), each an e-graph of its own whose inputs
    /// are the values it reads from before it and whose outputs are the values read after it
    /// (see [`optimize`]). Translating the whole graph would cost time and memory for nothing:
    /// its e-nodes alone exceed `node_limit`, so saturation stops before its first iteration.
    pub window_ops: usize,
    /// Most op nodes optimized in one run of the pass: the windows after them are kept as they
    /// are, so the pass stays within a bounded time on very large graphs (about 10 µs per op
    /// node on elementwise chains).
    pub max_ops: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            iter_limit: 16,
            node_limit: 20_000,
            time_limit: Some(Duration::from_millis(500)),
            reassociate: false,
            window_ops: 10_000,
            max_ops: 100_000,
        }
    }
}

impl Config {
    /// The default bounds without the time limit: results depend only on the input.
    pub fn deterministic() -> Config {
        Config {
            time_limit: None,
            ..Config::default()
        }
    }
}

/// What one e-graph run did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EgraphReport {
    /// Why saturation stopped (`saturated`, `iteration limit 16`, `node limit ...`, ...).
    pub stop_reason: String,
    /// Iterations run.
    pub iterations: usize,
    /// E-nodes and e-classes at the end.
    pub enodes: usize,
    /// E-classes at the end.
    pub eclasses: usize,
    /// Cost of the input graph ([`cost::graph_cost`]).
    pub cost_before: f64,
    /// Cost of the output graph (equal to `cost_before` when the input was kept).
    pub cost_after: f64,
    /// Whether the extracted graph replaced the input.
    pub accepted: bool,
    /// How many times each rule fired (new unions), by rule name; rules that never fired are
    /// listed with 0.
    pub rule_counts: BTreeMap<String, usize>,
    /// Time spent.
    pub time: Duration,
}

impl fmt::Display for EgraphReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "egraph: stopped: {}, {} iterations, {} e-nodes, {} e-classes, {:.3} ms",
            self.stop_reason,
            self.iterations,
            self.enodes,
            self.eclasses,
            self.time.as_secs_f64() * 1e3
        )?;
        writeln!(
            f,
            "egraph: cost {:.0} -> {:.0}{}",
            self.cost_before,
            self.cost_after,
            if self.accepted { "" } else { " (input kept)" }
        )?;
        for (r, n) in self.rule_counts.iter().filter(|(_, &n)| n > 0) {
            writeln!(f, "egraph: rule {r}: {n}")?;
        }
        Ok(())
    }
}

/// The e-graph pass (`egraph`).
#[derive(Default)]
pub struct Egraph {
    /// Saturation bounds.
    pub config: Config,
}

impl Egraph {
    /// The pass that runs every rule, exact or not (`egraph-reassoc`).
    pub fn reassociating() -> Egraph {
        Egraph {
            config: Config {
                reassociate: true,
                ..Config::default()
            },
        }
    }
}

impl Pass for Egraph {
    fn name(&self) -> &'static str {
        if self.config.reassociate {
            "egraph-reassoc"
        } else {
            "egraph"
        }
    }

    fn run(&self, g: &mut Graph, cx: &mut Cx) -> Result<Changed, IrError> {
        let (out, report) = optimize(g, &self.config)?;
        let changed = report.accepted && out != *g;
        if changed {
            *g = out;
        }
        cx.egraph.push(report);
        Ok(changed)
    }
}

fn stop_reason(r: &Option<StopReason>) -> String {
    match r {
        None => "not run".into(),
        Some(StopReason::Saturated) => "saturated".into(),
        Some(StopReason::IterationLimit(n)) => format!("iteration limit {n}"),
        Some(StopReason::NodeLimit(n)) => format!("node limit {n}"),
        Some(StopReason::TimeLimit(t)) => format!("time limit {t:.3}s"),
        Some(StopReason::Other(s)) => s.clone(),
    }
}

/// Runs the e-graph optimizer on `g`: the best graph found (or a copy of `g` when nothing
/// cheaper verified) and the report.
///
/// A graph of more than `config.window_ops` op nodes is optimized in windows of that many
/// consecutive op nodes, one e-graph each, and only its first `config.max_ops` op nodes are
/// (the rest are kept as they are). What windows lose: a rewrite whose pattern spans two
/// windows (e.g. `exp(log(x))` with `log` the last node of one window and `exp` the first of
/// the next) is not found; common subexpressions across windows are left to the `cse` pass.
pub fn optimize(g: &Graph, config: &Config) -> Result<(Graph, EgraphReport), IrError> {
    let ops = g
        .nodes
        .iter()
        .filter(|n| !matches!(n.kind, NodeKind::Input { .. }))
        .count();
    if ops <= config.window_ops.max(1) {
        optimize_one(g, config, &|_| false)
    } else {
        optimize_windows(g, config)
    }
}

/// [`optimize`] on `g` as one e-graph; fresh names avoid those `reserved` says are taken.
fn optimize_one(
    g: &Graph,
    config: &Config,
    reserved: &dyn Fn(&str) -> bool,
) -> Result<(Graph, EgraphReport), IrError> {
    let start = Instant::now();
    let _span = tracing::debug_span!("egraph").entered();
    let tr = lang::to_egraph(g);
    let roots: Vec<Id> = g
        .outputs
        .iter()
        .map(|o| tr.values[o.node][o.index])
        .collect();
    let rules: Vec<rules::Rw> = (rules::all().into_iter())
        .filter(|r| r.exact || config.reassociate)
        .map(|r| r.rw)
        .collect();
    let mut runner = Runner::default()
        .with_egraph(tr.egraph)
        .with_iter_limit(config.iter_limit)
        .with_node_limit(config.node_limit)
        .with_time_limit(config.time_limit.unwrap_or(Duration::from_secs(1 << 30)));
    runner.roots = roots.clone();
    let runner = runner.run(&rules);
    let mut rule_counts: BTreeMap<String, usize> =
        rules.iter().map(|r| (r.name.to_string(), 0)).collect();
    for it in &runner.iterations {
        for (name, n) in &it.applied {
            *rule_counts.entry(name.to_string()).or_default() += n;
        }
    }
    let eg = &runner.egraph;
    let extractor = extract::Extractor::new(eg, cost::CostFn::new(eg));
    let out = extract(
        g,
        &tr.values,
        &tr.node_class,
        eg,
        &extractor,
        &roots,
        reserved,
    )?;
    let cost_before = cost::graph_cost(g);
    let cost_after = cost::graph_cost(&out);
    let verified = out.verify();
    if let Err(e) = &verified {
        tracing::warn!("egraph: the extracted graph does not verify, keeping the input: {e}");
    }
    let accepted = verified.is_ok() && cost_after <= cost_before;
    let report = EgraphReport {
        stop_reason: stop_reason(&runner.stop_reason),
        iterations: runner.iterations.len(),
        enodes: eg.total_number_of_nodes(),
        eclasses: eg.number_of_classes(),
        cost_before,
        cost_after: if accepted { cost_after } else { cost_before },
        accepted,
        rule_counts,
        time: start.elapsed(),
    };
    Ok((if accepted { out } else { g.clone() }, report))
}

/// [`optimize`] on a graph larger than one window: every window of `config.window_ops`
/// consecutive op nodes becomes a graph of its own (an input per value it reads from outside,
/// an output per value read after it or returned), is optimized as one e-graph while the
/// pass's `config.max_ops` last, and its result is spliced into the output graph in its
/// place. Each window is kept only if cheaper or equal, so the whole is too.
fn optimize_windows(g: &Graph, config: &Config) -> Result<(Graph, EgraphReport), IrError> {
    let start = Instant::now();
    let is_input = |n: &Node| matches!(n.kind, NodeKind::Input { .. });
    // The last node reading each node's results (`usize::MAX`: a graph output).
    let mut last_use = vec![0usize; g.nodes.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        for v in n.args.iter().flat_map(Arg::values) {
            last_use[v.node] = last_use[v.node].max(i);
        }
    }
    for o in &g.outputs {
        last_use[o.node] = usize::MAX;
    }
    // Names fresh ones must avoid: the source's and those made by the windows spliced so far.
    let src_names: FxHashSet<&str> = (g.nodes.iter())
        .flat_map(|n| {
            std::iter::once(n.name.as_str()).chain(n.result_names.iter().map(String::as_str))
        })
        .collect();
    let mut made: FxHashSet<String> = FxHashSet::default();
    let mut out = Graph::default();
    // The output graph's value for each source value (filled as windows are spliced).
    let mut map: Vec<Vec<ValueRef>> = vec![vec![]; g.nodes.len()];
    for (i, n) in g.nodes.iter().enumerate().filter(|(_, n)| is_input(n)) {
        map[i] = vec![ValueRef::new(out.nodes.len(), 0)];
        out.nodes.push(n.clone());
    }
    let ops: Vec<usize> = (0..g.nodes.len())
        .filter(|&i| !is_input(&g.nodes[i]))
        .collect();
    let w = config.window_ops.max(1);
    let mut report = EgraphReport::default();
    // Op nodes optimized so far; windows: all, optimized, changed, kept as they are.
    let mut optimized = 0usize;
    let mut cost_saved = 0.0;
    let (mut windows, mut n_opt, mut accepted, mut kept) = (0usize, 0usize, 0usize, 0usize);
    let mut stops: BTreeMap<String, usize> = BTreeMap::new();
    for win in ops.chunks(w) {
        windows += 1;
        if optimized >= config.max_ops {
            // Past the budget: the window's nodes are copied as they are.
            kept += 1;
            for &i in win {
                let mut n = g.nodes[i].clone();
                remap_args(&mut n.args, |v| map[v.node][v.index]);
                map[i] = (0..n.results.len())
                    .map(|r| ValueRef::new(out.nodes.len(), r))
                    .collect();
                out.nodes.push(n);
            }
            continue;
        }
        let (lo, hi) = (win[0], win[win.len() - 1]);
        // The window as a graph: inputs for the values it reads from outside, then its ops.
        let mut sg = Graph::default();
        let mut ext: Vec<ValueRef> = vec![];
        let mut ext_index: FxHashMap<ValueRef, usize> = FxHashMap::default();
        for &i in win {
            for v in g.nodes[i].args.iter().flat_map(Arg::values) {
                if (v.node < lo || is_input(&g.nodes[v.node])) && !ext_index.contains_key(&v) {
                    ext_index.insert(v, ext.len());
                    ext.push(v);
                }
            }
        }
        for &v in &ext {
            let src = &g.nodes[v.node];
            let kind = match &src.kind {
                NodeKind::Input { .. } => src.kind.clone(),
                _ => NodeKind::Input {
                    kind: fxhlo_ir::InputKind::User,
                    target: None,
                },
            };
            let name = g.value_name(v).to_string();
            sg.nodes.push(Node {
                name: name.clone(),
                kind,
                args: vec![],
                result_names: vec![name],
                results: vec![g.ty(v).clone()],
            });
        }
        let mut local: FxHashMap<usize, usize> = FxHashMap::default();
        for &i in win {
            let mut n = g.nodes[i].clone();
            remap_args(&mut n.args, |v| match ext_index.get(&v) {
                Some(&k) => ValueRef::new(k, 0),
                None => ValueRef::new(local[&v.node], v.index),
            });
            local.insert(i, sg.nodes.len());
            sg.nodes.push(n);
        }
        let mut outs: Vec<ValueRef> = vec![];
        for &i in win {
            if last_use[i] > hi {
                for r in 0..g.nodes[i].results.len() {
                    outs.push(ValueRef::new(i, r));
                    sg.outputs.push(ValueRef::new(local[&i], r));
                }
            }
        }
        if outs.is_empty() {
            continue; // nothing of it is read: dropped, as one e-graph would drop it
        }
        optimized += win.len();
        n_opt += 1;
        let (og, r) = optimize_one(&sg, config, &|n| src_names.contains(n) || made.contains(n))?;
        cost_saved += r.cost_before - r.cost_after;
        report.iterations = report.iterations.max(r.iterations);
        report.enodes += r.enodes;
        report.eclasses += r.eclasses;
        accepted += usize::from(r.accepted);
        *stops.entry(r.stop_reason).or_default() += 1;
        for (k, n) in r.rule_counts {
            *report.rule_counts.entry(k).or_default() += n;
        }
        // Splice: the window's inputs are its external values, in order (extraction emits the
        // inputs first in source order).
        let mut lmap: Vec<Vec<ValueRef>> = Vec::with_capacity(og.nodes.len());
        for (j, n) in og.nodes.iter().enumerate() {
            if j < ext.len() {
                let v = ext[j];
                lmap.push(vec![map[v.node][v.index]]);
                continue;
            }
            let mut n = n.clone();
            remap_args(&mut n.args, |v| lmap[v.node][v.index]);
            lmap.push(
                (0..n.results.len())
                    .map(|r| ValueRef::new(out.nodes.len(), r))
                    .collect(),
            );
            for nm in std::iter::once(&n.name).chain(&n.result_names) {
                if !src_names.contains(nm.as_str()) {
                    made.insert(nm.clone());
                }
            }
            out.nodes.push(n);
        }
        for (v, o) in outs.iter().zip(&og.outputs) {
            let m = &mut map[v.node];
            if m.is_empty() {
                *m = vec![ValueRef::new(usize::MAX, 0); g.nodes[v.node].results.len()];
            }
            m[v.index] = lmap[o.node][o.index];
        }
    }
    out.outputs = g.outputs.iter().map(|o| map[o.node][o.index]).collect();
    // Each window verified and cost no more than before; the cost is a sum over nodes (inputs
    // cost nothing) and fresh names avoid every other name, so the whole verifies and costs
    // the source's less what the windows saved, without a pass over the whole graph again.
    let cost_before = cost::graph_cost(g);
    let stops: Vec<String> = stops.iter().map(|(r, n)| format!("{r} x{n}")).collect();
    report.stop_reason = format!(
        "{windows} windows of at most {w} op nodes: {n_opt} optimized ({accepted} accepted; {}), \
         {kept} kept as they are (past the pass's {} op nodes)",
        stops.join(", "),
        config.max_ops
    );
    report.cost_before = cost_before;
    report.cost_after = cost_before - cost_saved;
    report.accepted = accepted > 0;
    report.time = start.elapsed();
    Ok((out, report))
}

/// Replaces every tensor reference of `args` by `f` of it.
fn remap_args(args: &mut [Arg], mut f: impl FnMut(ValueRef) -> ValueRef) {
    for a in args {
        match a {
            Arg::Tensor(v) => *v = f(*v),
            Arg::Tensors(vs) => {
                for v in vs.iter_mut().flatten() {
                    *v = f(*v);
                }
            }
            _ => {}
        }
    }
}

/// Builds the extracted graph: inputs first in source order, then every needed e-class in
/// post-order from the outputs. Names come from the source node whose value is in the class
/// (the earliest one), or are fresh.
fn extract(
    src: &Graph,
    values: &[Vec<Id>],
    node_class: &[Id],
    eg: &lang::EGraph,
    ex: &extract::Extractor<'_>,
    roots: &[Id],
    reserved: &dyn Fn(&str) -> bool,
) -> Result<Graph, IrError> {
    // Source names of each class: (node name, result names) for op/tuple classes, value name
    // for Get classes of multi-result nodes.
    let mut node_names: HashMap<Id, usize> = HashMap::new();
    for (i, &c) in node_class.iter().enumerate() {
        node_names.entry(eg.find(c)).or_insert(i);
    }
    let mut value_src: HashMap<Id, ValueRef> = HashMap::new();
    for (i, vs) in values.iter().enumerate() {
        for (r, &c) in vs.iter().enumerate() {
            value_src.entry(eg.find(c)).or_insert(ValueRef::new(i, r));
        }
    }
    let mut used: HashSet<String> = src
        .nodes
        .iter()
        .flat_map(|n| std::iter::once(n.name.clone()).chain(n.result_names.iter().cloned()))
        .collect();
    let mut taken: HashSet<String> = HashSet::new();
    let mut counter = 0usize;
    let mut fresh = |base: &str, used: &mut HashSet<String>| loop {
        counter += 1;
        let n = format!("{base}_{counter}");
        if !reserved(&n) && used.insert(n.clone()) {
            return n;
        }
    };

    let mut g = Graph::default();
    // class -> emitted node (for tuples and tensors: the value is (node, 0) or Get).
    let mut emitted: HashMap<Id, ValueRef> = HashMap::new();
    for (i, n) in src.nodes.iter().enumerate() {
        if matches!(n.kind, NodeKind::Input { .. }) {
            emitted.insert(eg.find(node_class[i]), ValueRef::new(g.nodes.len(), 0));
            for nm in std::iter::once(&n.name).chain(&n.result_names) {
                taken.insert(nm.clone());
            }
            g.nodes.push(n.clone());
        }
    }

    // Tensor children of the chosen e-node, through lists.
    let deps = |c: Id| -> Vec<Id> {
        let node = ex.find_best_node(c);
        let mut out = vec![];
        let push_tensor = |id: Id, out: &mut Vec<Id>| {
            if matches!(eg[id].data, Data::Tensor(_) | Data::Tuple(_)) {
                out.push(eg.find(id));
            }
        };
        match node {
            ENode::Op(_, cs) | ENode::Opaque(_, cs) | ENode::List(_, cs) => {
                for &k in cs {
                    if let Data::List(_) = eg[k].data {
                        if let ENode::List(_, items) = ex.find_best_node(k) {
                            for &it in items {
                                push_tensor(it, &mut out);
                            }
                        }
                    } else {
                        push_tensor(k, &mut out);
                    }
                }
            }
            ENode::Get(_, [t]) => out.push(eg.find(*t)),
            ENode::Input(_) | ENode::Attr(_) => {}
        }
        out
    };

    // Iterative post-order DFS.
    let mut stack: Vec<(Id, bool)> = roots.iter().rev().map(|&r| (eg.find(r), false)).collect();
    while let Some((c, ready)) = stack.pop() {
        if emitted.contains_key(&c) {
            continue;
        }
        if !ready {
            stack.push((c, true));
            for d in deps(c).into_iter().rev() {
                if !emitted.contains_key(&d) {
                    stack.push((d, false));
                }
            }
            continue;
        }
        let node = ex.find_best_node(c).clone();
        let tensor = |id: Id, emitted: &HashMap<Id, ValueRef>| -> Result<ValueRef, IrError> {
            emitted
                .get(&eg.find(id))
                .copied()
                .ok_or_else(|| IrError::Graph(format!("egraph: e-class {id} was not emitted")))
        };
        let arg_of = |k: Id, emitted: &HashMap<Id, ValueRef>| -> Result<Arg, IrError> {
            Ok(match &eg[k].data {
                Data::Attr(a) => a.to_arg(),
                Data::Tensor(_) => Arg::Tensor(tensor(k, emitted)?),
                Data::List(_) => {
                    let ENode::List(_, items) = ex.find_best_node(k) else {
                        return Err(IrError::Graph("egraph: a list class without a list".into()));
                    };
                    let mut vs = vec![];
                    for &it in items {
                        vs.push(match &eg[it].data {
                            Data::Attr(AttrVal::None) => None,
                            _ => Some(tensor(it, emitted)?),
                        });
                    }
                    Arg::Tensors(vs)
                }
                d => return Err(IrError::Graph(format!("egraph: bad argument data {d:?}"))),
            })
        };
        let value = match node {
            ENode::Get(r, [t]) => {
                let tv = tensor(t, &emitted)?;
                ValueRef::new(tv.node, r)
            }
            ENode::Input(i) => {
                return Err(IrError::Graph(format!(
                    "egraph: input {i} was not emitted first"
                )))
            }
            ENode::Attr(_) | ENode::List(..) => {
                return Err(IrError::Graph(
                    "egraph: an attribute used as a value".into(),
                ))
            }
            ENode::Op(op, cs) => {
                let mut args = vec![];
                for &k in &cs {
                    args.push(arg_of(k, &emitted)?);
                }
                let (name, result_names) = names_for(
                    src,
                    c,
                    &eg[c].data,
                    &node_names,
                    &value_src,
                    &mut taken,
                    &mut |base| fresh(base, &mut used),
                    op_short(op.aten()),
                );
                push_node(&mut g, name, NodeKind::Op(op), args, result_names)?
            }
            ENode::Opaque(i, cs) => {
                let mut n = src.nodes[i].clone();
                let mut it = cs.iter();
                for a in &mut n.args {
                    match a {
                        Arg::Tensor(v) => *v = tensor(*it.next().expect("arity"), &emitted)?,
                        Arg::Tensors(vs) => {
                            for v in vs.iter_mut().flatten() {
                                *v = tensor(*it.next().expect("arity"), &emitted)?;
                            }
                        }
                        _ => {}
                    }
                }
                for nm in std::iter::once(&n.name).chain(&n.result_names) {
                    taken.insert(nm.clone());
                }
                g.nodes.push(n);
                ValueRef::new(g.nodes.len() - 1, 0)
            }
        };
        emitted.insert(c, value);
    }
    for &r in roots {
        g.outputs.push(emitted[&eg.find(r)]);
    }
    Ok(g)
}

/// `aten.addmm.default` -> `addmm`.
fn op_short(aten: &str) -> &str {
    aten.split('.').nth(1).unwrap_or(aten)
}

/// Node and result names for an emitted op class: the source node's when the class holds a
/// source value whose names are still free, fresh ones otherwise.
#[allow(clippy::too_many_arguments)]
fn names_for(
    src: &Graph,
    c: Id,
    data: &Data,
    node_names: &HashMap<Id, usize>,
    value_src: &HashMap<Id, ValueRef>,
    taken: &mut HashSet<String>,
    fresh: &mut dyn FnMut(&str) -> String,
    base: &str,
) -> (String, Vec<String>) {
    let count = match data {
        Data::Tuple(ts) => ts.len(),
        _ => 1,
    };
    let candidate = match data {
        Data::Tuple(_) => node_names.get(&c).map(|&i| &src.nodes[i]).and_then(|n| {
            (n.result_names.len() == count).then(|| (n.name.clone(), n.result_names.clone()))
        }),
        _ => value_src.get(&c).and_then(|v| {
            let n = &src.nodes[v.node];
            if matches!(n.kind, NodeKind::Input { .. }) {
                return None;
            }
            let rn = n.result_names[v.index].clone();
            let nn = if n.results.len() == 1 {
                n.name.clone()
            } else {
                rn.clone()
            };
            Some((nn, vec![rn]))
        }),
    };
    if let Some((n, rs)) = candidate {
        let all_free = !taken.contains(&n) && rs.iter().all(|r| !taken.contains(r) || *r == n);
        if all_free {
            taken.insert(n.clone());
            taken.extend(rs.iter().cloned());
            return (n, rs);
        }
    }
    let n = fresh(base);
    let rs = if count == 1 {
        vec![n.clone()]
    } else {
        (0..count).map(|i| format!("{n}_{i}")).collect()
    };
    taken.insert(n.clone());
    taken.extend(rs.iter().cloned());
    (n, rs)
}

fn push_node(
    g: &mut Graph,
    name: String,
    kind: NodeKind,
    args: Vec<Arg>,
    result_names: Vec<String>,
) -> Result<ValueRef, IrError> {
    g.nodes.push(Node {
        name,
        kind,
        args,
        result_names,
        results: vec![],
    });
    let i = g.nodes.len() - 1;
    let results = g.infer_node(i)?;
    if results.len() != g.nodes[i].result_names.len() {
        let n = &mut g.nodes[i];
        n.result_names = (0..results.len())
            .map(|k| format!("{}_{k}", n.name))
            .collect();
    }
    g.nodes[i].results = results;
    Ok(ValueRef::new(i, 0))
}
