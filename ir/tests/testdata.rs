//! Every testdata model reads, verifies, and round-trips through the IR text form.

use fxhlo_ir::read::read_model;
use fxhlo_ir::text::{parse_graph, print_graph};
use std::path::PathBuf;

fn testdata() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("testdata/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("graph.json").exists())
        .collect();
    dirs.sort();
    dirs
}

#[test]
fn every_model_reads_and_round_trips() {
    let dirs = testdata();
    assert!(
        dirs.len() >= 6,
        "expected at least 6 testdata models, found {dirs:?}"
    );
    for dir in dirs {
        let m = read_model(&dir.join("graph.json"))
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let text = print_graph(&m.graph);
        let back = parse_graph(&text).unwrap_or_else(|e| panic!("{}: {e}\n{text}", dir.display()));
        assert_eq!(back, m.graph, "{}", dir.display());
        assert!(
            m.graph.unsupported_ops().is_empty(),
            "{}: {:?}",
            dir.display(),
            m.graph.unsupported_ops()
        );
    }
}

#[test]
fn pt2_archives_read_to_the_same_graph() {
    for dir in testdata() {
        let pt2 = dir.join("model.pt2");
        if !pt2.exists() {
            continue;
        }
        let a = read_model(&dir.join("graph.json")).unwrap();
        let b = read_model(&pt2).unwrap_or_else(|e| panic!("{}: {e}", pt2.display()));
        assert_eq!(
            print_graph(&a.graph),
            print_graph(&b.graph),
            "{}",
            dir.display()
        );
        assert_eq!(a.graph, b.graph, "{}", dir.display());
        assert_eq!(a.weights, b.weights, "{}", dir.display());
    }
}
