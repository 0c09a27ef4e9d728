//! -O2 compile time on every testdata model (the default pipeline, time limit included).
//! Release builds must stay under one second per model; debug builds get ten.

mod common;

use fxhlo_ir::read::read_model;
use fxhlo_passes::{Cx, PassManager};
use std::time::Instant;

#[test]
fn o2_is_fast_on_every_testdata_model() {
    let limit = if cfg!(debug_assertions) { 10.0 } else { 1.0 };
    for dir in common::testdata_dirs() {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let mut g = read_model(&dir).unwrap().graph;
        let t = Instant::now();
        PassManager::for_level(2)
            .run(&mut g, &mut Cx::default(), &mut |_, _| {})
            .unwrap();
        let s = t.elapsed().as_secs_f64();
        eprintln!("{name}: -O2 took {:.1} ms", s * 1e3);
        assert!(s < limit, "{name}: -O2 took {s:.3} s");
    }
}
