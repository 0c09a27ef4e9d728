//! Every testdata model: -O2 agrees with -O0 in the reference interpreter (stored and seeded
//! random inputs), the fusion plan is valid, and snapshots of the -O2 IR and the fusion plan.

mod common;

use common::*;
use fxhlo_ir::read::read_model;
use fxhlo_ir::read::safetensors_io::read_safetensors;
use fxhlo_ir::text::print_graph;
use fxhlo_passes::fusion;

#[test]
fn o2_matches_o0_and_snapshots() {
    let dirs = testdata_dirs();
    assert!(!dirs.is_empty(), "no testdata models");
    for dir in dirs {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let model = read_model(&dir).unwrap();
        let inputs = read_safetensors(&dir.join("inputs.safetensors")).unwrap();
        let (o2, cx) = optimize(&model.graph, 2);
        let before = run(&model.graph, &model.weights, &inputs);
        let after = run(&o2, &model.weights, &inputs);
        assert_close(&format!("{name} stored inputs"), &after, &before);
        let mut rng = Rng(0x5eed ^ name.len() as u64);
        for round in 0..2 {
            let rin = randomize_inputs(&model.graph, &inputs, &mut rng);
            let b = run(&model.graph, &model.weights, &rin);
            let a = run(&o2, &model.weights, &rin);
            assert_close(&format!("{name} random inputs {round}"), &a, &b);
        }
        let plan = fusion::plan(&o2);
        check_plan(&o2, &plan);
        let plan0 = fusion::plan(&model.graph);
        check_plan(&model.graph, &plan0);
        let report = &cx.egraph[0];
        eprintln!(
            "{name}: ops {} -> {}, kernels {}, bytes {:.0} -> {:.0}\n{}",
            op_count(&model.graph),
            op_count(&o2),
            plan.kernels.len(),
            plan.bytes_before,
            plan.bytes_after,
            report
        );
        insta::assert_snapshot!(format!("{name}_o2"), print_graph(&o2));
        insta::assert_snapshot!(format!("{name}_fusion"), plan.to_string());
    }
}
