//! Pictures of a graph: Graphviz DOT (`fxhlo inspect --dot`) and SVG (`--svg`, drawn by the
//! `layout-rs` crate, no Graphviz needed).
//!
//! One box per op node with its name, op and result types; graph inputs as ellipses (weights
//! grey); unsupported ops red. With a fusion plan (`--fusion`: the -O2 pipeline and the plan
//! the compiled program is built from) each kernel of more than one node is a cluster in DOT
//! and a fill colour in SVG (layout-rs draws no clusters), labelled with its kernel index and
//! kind; nodes of steps that run on the reference interpreter are outlined red with the reason.

use fxhlo_ir::{Graph, InputKind, NodeKind};
use fxhlo_passes::fusion::FusionPlan;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

/// What to draw besides the graph.
#[derive(Default)]
pub struct Overlay<'a> {
    /// The fusion plan of `g` (kernels as clusters or colours).
    pub plan: Option<&'a FusionPlan>,
    /// Nodes (by name) that start a step run on the reference interpreter, with the reason.
    pub fallbacks: BTreeMap<String, String>,
}

const COLOURS: [&str; 8] = [
    "#cfe2f3", "#d9ead3", "#fff2cc", "#f4cccc", "#d9d2e9", "#fce5cd", "#d0e0e3", "#ead1dc",
];

fn esc(s: &str) -> String {
    let s = fxhlo_ir::quote_name(s);
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// The graph as Graphviz DOT; `clusters` draws kernels as clusters (else as fill colours).
pub fn dot(g: &Graph, overlay: &Overlay, clusters: bool) -> String {
    let mut kernel_of: HashMap<usize, usize> = HashMap::new();
    let mut kinds: Vec<String> = vec![];
    if let Some(plan) = overlay.plan {
        for (k, kern) in plan.kernels.iter().enumerate() {
            kinds.push(format!("{:?}", kern.kind));
            if kern.nodes.len() > 1 {
                for &n in &kern.nodes {
                    kernel_of.insert(n, k);
                }
            }
        }
    }
    let mut out = String::from("digraph fxhlo {\n  rankdir=TB;\n  node [fontsize=10];\n");
    let mut body: BTreeMap<Option<usize>, String> = BTreeMap::new();
    for (i, n) in g.nodes.iter().enumerate() {
        let types: Vec<String> = n.results.iter().map(|t| t.to_string()).collect();
        let (label, mut attrs) = match &n.kind {
            NodeKind::Input { kind, .. } => {
                let fill = if matches!(kind, InputKind::User) {
                    "white"
                } else {
                    "#eeeeee"
                };
                (
                    format!("{}\\n{}", esc(&n.name), types.join(", ")),
                    format!("shape=ellipse, style=filled, fillcolor=\"{fill}\""),
                )
            }
            NodeKind::Op(op) => (
                format!(
                    "{}\\n{}\\n{}",
                    esc(&n.name),
                    op.info().aten,
                    types.join(", ")
                ),
                "shape=box".to_string(),
            ),
            NodeKind::Unsupported { target, .. } => (
                format!(
                    "{}\\n{} (unsupported)\\n{}",
                    esc(&n.name),
                    esc(target),
                    types.join(", ")
                ),
                "shape=box, style=filled, fillcolor=\"#e06666\"".to_string(),
            ),
        };
        let k = kernel_of.get(&i).copied();
        if let (Some(k), false) = (k, clusters) {
            attrs = format!(
                "shape=box, style=filled, fillcolor=\"{}\"",
                COLOURS[k % COLOURS.len()]
            );
        }
        let mut label = label;
        if let Some(reason) = overlay.fallbacks.get(&n.name) {
            attrs.push_str(", color=\"#cc0000\", penwidth=2");
            let _ = write!(label, "\\ninterpreter: {}", esc(reason));
        }
        if let (Some(k), false) = (k, clusters) {
            let _ = write!(label, "\\n[kernel {k}: {}]", kinds[k]);
        }
        let group = if clusters { k } else { None };
        let indent = if group.is_some() { "    " } else { "  " };
        let line = format!("{indent}n{i} [label=\"{label}\", {attrs}];\n");
        body.entry(group).or_default().push_str(&line);
    }
    for (k, lines) in &body {
        match k {
            Some(k) => {
                let _ = write!(
                    out,
                    "  subgraph cluster_{k} {{\n    label=\"kernel {k}: {}\";\n    style=filled;\n    color=\"{}\";\n{}  }}\n",
                    kinds[*k],
                    COLOURS[k % COLOURS.len()],
                    lines
                );
            }
            None => out.push_str(lines),
        }
    }
    for (i, n) in g.nodes.iter().enumerate() {
        let mut seen = std::collections::BTreeSet::new();
        for v in n.args.iter().flat_map(|a| a.values()) {
            if seen.insert(v.node) {
                let _ = writeln!(out, "  n{} -> n{i};", v.node);
            }
        }
    }
    out.push_str("  out [label=\"outputs\", shape=doubleoctagon];\n");
    for v in &g.outputs {
        let _ = writeln!(out, "  n{} -> out;", v.node);
    }
    out.push_str("}\n");
    out
}

/// The graph drawn as SVG (kernels as fill colours).
pub fn svg(g: &Graph, overlay: &Overlay) -> Result<String, String> {
    use layout::backends::svg::SVGWriter;
    use layout::gv::{DotParser, GraphBuilder};
    let text = dot(g, overlay, false);
    let mut parser = DotParser::new(&text);
    let tree = parser
        .process()
        .map_err(|e| format!("drawing the graph: {e}"))?;
    let mut gb = GraphBuilder::new();
    gb.visit_graph(&tree);
    let mut vg = gb.get();
    let mut w = SVGWriter::new();
    vg.do_it(false, false, false, &mut w);
    Ok(w.finalize())
}
