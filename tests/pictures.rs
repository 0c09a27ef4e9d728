//! `fxhlo inspect --dot/--svg` (fxhlo::picture): the graph, its fusion kernels and the steps
//! that run on the reference interpreter.

use fxhlo::picture::{dot, svg, Overlay};
use std::path::Path;

fn model(name: &str) -> fxhlo_ir::Model {
    fxhlo::load_model(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../testdata")
            .join(name),
    )
    .unwrap()
}

#[test]
fn every_node_and_edge_is_drawn_and_kernels_are_clusters() {
    let m = model("gpt2");
    let c = fxhlo::compile_with(&m, &fxhlo::CompileOptions::default(), &mut |_, _| {}).unwrap();
    let overlay = Overlay {
        plan: Some(&c.plan),
        fallbacks: Default::default(),
    };
    let text = dot(&c.graph, &overlay, true);
    for (i, n) in c.graph.nodes.iter().enumerate() {
        assert!(
            text.contains(&format!("  n{i} [label=\"")),
            "node {i} {}",
            n.name
        );
    }
    let edges: usize = c
        .graph
        .nodes
        .iter()
        .map(|n| {
            let mut s: Vec<usize> = n
                .args
                .iter()
                .flat_map(|a| a.values())
                .map(|v| v.node)
                .collect();
            s.sort();
            s.dedup();
            s.len()
        })
        .sum();
    assert_eq!(text.matches(" -> n").count(), edges);
    let multi = c.plan.kernels.iter().filter(|k| k.nodes.len() > 1).count();
    assert!(multi > 0);
    assert_eq!(text.matches("subgraph cluster_").count(), multi);
    // without clusters (what the SVG draws), kernels are fill colours with their label
    let flat = dot(&c.graph, &overlay, false);
    assert!(!flat.contains("subgraph"));
    assert!(flat.contains("[kernel "));
    let pic = svg(&c.graph, &overlay).unwrap();
    assert!(pic.starts_with("<svg") || pic.contains("<svg"));
    assert!(pic.matches("<rect").count() >= c.graph.nodes.len() / 2);
}

#[test]
fn interpreter_steps_and_unsupported_ops_are_marked() {
    let m = model("reductions");
    let c = fxhlo::compile_with(&m, &fxhlo::CompileOptions::default(), &mut |_, _| {}).unwrap();
    assert!(
        !c.report.fallbacks.is_empty(),
        "reductions has an interpreter step"
    );
    let overlay = Overlay {
        plan: Some(&c.plan),
        fallbacks: c.report.fallbacks.iter().cloned().collect(),
    };
    let text = dot(&c.graph, &overlay, true);
    assert_eq!(
        text.matches("interpreter: ").count(),
        c.report.fallbacks.len()
    );
    let g = fxhlo_ir::text::parse_graph(
        "graph {\n  %x: f32[2] = input\n  %y: f32[2] = unsupported \"aten.frobnicate.default\"(self=%x)\n  return %y\n}\n",
    )
    .unwrap();
    let text = dot(&g, &Overlay::default(), true);
    assert!(
        text.contains("aten.frobnicate.default (unsupported)"),
        "{text}"
    );
}
