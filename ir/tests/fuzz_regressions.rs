//! Inputs the fuzzers once crashed on (`tests/fuzz_regressions/<target>/`), replayed as plain tests
//! with the same properties the fuzz targets check.

use fxhlo_ir::text::{parse_graph, print_graph};
use std::path::PathBuf;

fn files(target: &str) -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fuzz_regressions")
        .join(target);
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

fn round_trips(g: &fxhlo_ir::Graph) {
    let text = print_graph(g);
    let back =
        parse_graph(&text).unwrap_or_else(|e| panic!("printed IR does not parse: {e}\n{text}"));
    // Through `Debug`, so a NaN attribute (`eps=nan`) equals itself.
    assert_eq!(format!("{back:?}"), format!("{g:?}"));
}

#[test]
fn fxjson_regressions() {
    for f in files("fxjson") {
        let data = std::fs::read(&f).unwrap();
        if let Ok((g, _)) = fxhlo_ir::read::fxjson::parse_fxjson(&data, "fuzz.json") {
            round_trips(&g);
        }
    }
}

#[test]
fn ir_text_regressions() {
    for f in files("ir_text") {
        if let Ok(g) = parse_graph(&String::from_utf8_lossy(&std::fs::read(&f).unwrap())) {
            round_trips(&g);
        }
    }
}

#[test]
fn pt2_regressions() {
    for f in files("pt2") {
        let _ = fxhlo_ir::read::pt2::read_pt2_bytes(&std::fs::read(&f).unwrap(), "fuzz.pt2");
    }
}
