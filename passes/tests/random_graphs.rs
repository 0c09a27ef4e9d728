//! Seeded random graphs of elementwise, reduction, matmul, reshape and permute ops with valid
//! shapes: -O2 must agree with -O0 in the reference interpreter, and the fusion plans of both
//! must own every op exactly once and respect data dependencies.

mod common;

use common::random::random_graph;
use common::*;
use fxhlo_passes::fusion;

#[test]
fn random_graphs_o2_matches_o0() {
    let weights = Default::default();
    let mut fired = std::collections::BTreeMap::<String, usize>::new();
    for seed in 0..300u64 {
        let g = random_graph(seed);
        let (o2, cx) = optimize(&g, 2);
        for (r, n) in &cx.egraph[0].rule_counts {
            *fired.entry(r.clone()).or_default() += n;
        }
        for round in 0..2 {
            let inputs = random_inputs(&g, &mut Rng(seed * 31 + round));
            let before = run(&g, &weights, &inputs);
            let after = run(&o2, &weights, &inputs);
            assert_close(
                &format!(
                    "seed {seed} round {round}\n{}\n{}",
                    fxhlo_ir::text::print_graph(&g),
                    fxhlo_ir::text::print_graph(&o2)
                ),
                &after,
                &before,
            );
        }
        check_plan(&g, &fusion::plan(&g));
        check_plan(&o2, &fusion::plan(&o2));
    }
    let silent: Vec<&String> = fired
        .iter()
        .filter(|(_, &n)| n == 0)
        .map(|(r, _)| r)
        .collect();
    eprintln!("rules fired over the random graphs: {fired:?}; never: {silent:?}");
}

#[test]
fn a_view_read_by_a_recomputed_consumer_is_written_early() {
    // Random graph seed 80: the view `v8` is recomputed by the kernels of `v9`, `v10` and
    // `v30`, but the softmax `v19` recomputes `v9` and reads `v8`. Left to the first kernel
    // that recomputes it (that of `v30`, which reads the layer norm after `v19`), `v8` tied the
    // kernel graph into a cycle.
    let g = fxhlo_ir::text::parse_graph(
        "graph {
  %in1: f32[4, 4, 4] = input
  %v2: f32[4, 4, 4] = aten.pow.Tensor_Scalar(%in1, exponent=2)
  %v3: f32[4, 4, 4] = aten.neg.default(%v2)
  %v4: f32[4, 4, 4] = aten.add.Tensor(%v2, %v3)
  %v5: f32[4, 4, 4] = aten.relu.default(%in1)
  %in6: f32[4, 4, 2] = input
  %v7: f32[4, 4, 2] = aten.bmm.default(%v4, %in6)
  %v8: f32[4, 2, 4] = aten.permute.default(%v7, dims=[0, 2, 1])
  %v9: f32[4, 2, 4] = aten.sigmoid.default(%v8)
  %v10: f32[4, 2, 4] = aten._softmax.default(%v8, dim=-1, half_to_float=false)
  %v11: f32[4, 2, 4] = aten.mul.Scalar(%v10, other=4.0)
  %v12: bool[4, 2, 4] = aten.eq.Scalar(%v11, other=-inf)
  %v13: bool[4, 2, 4] = aten.logical_not.default(%v12)
  %v14: bool[4, 2, 1] = aten.any.dim(%v13, dim=-1, keepdim=true)
  %v15: bool[4, 2, 1] = aten.logical_not.default(%v14)
  %v16: f32[4, 2, 4] = aten.full.default(size=[4, 2, 4], fill_value=0, dtype=f32)
  %v17: f32[4, 2, 4] = aten._softmax.default(%v11, dim=-1, half_to_float=false)
  %v18: f32[4, 2, 4] = aten.where.self(%v15, %v16, %v17)
  %v19: f32[4, 2, 4] = aten._softmax.default(%v9, dim=-1, half_to_float=false)
  %v20: f32[4, 2, 4] = aten.exp.default(%v19)
  %in21: f32[4] = input
  %in22: f32[4] = input
  %ln23: f32[4, 2, 4], %ln23_mean: f32[4, 2, 1], %ln23_rstd: f32[4, 2, 1] = aten.native_layer_norm.default(%v20, %in21, %in22, normalized_shape=[4], eps=1e-5)
  %v24: f32[4, 2, 4] = aten.relu.default(%ln23)
  %in25: f32[4, 4, 4] = input
  %v26: f32[4, 2, 4] = aten.bmm.default(%v9, %in25)
  %v27: f32[4, 4, 2] = aten.permute.default(%v26, dims=[0, 2, 1])
  %v28: f32[4, 2, 4] = aten.add.Scalar(%ln23, other=3.0)
  %v29: f32[4, 2, 4] = aten.mul.Scalar(%v28, other=0.25)
  %v30: f32[4, 2, 4] = aten.sub.Tensor(%v24, %v8)
  %v31: f32[4, 2, 4, 1] = aten.unsqueeze.default(%v24, dim=3)
  %v32: f32[4, 2, 4, 2] = aten.expand.default(%v31, size=[4, 2, 4, 2])
  %v33: f32[4, 2, 4, 2] = aten.permute.default(%v32, dims=[2, 1, 0, 3])
  %v34: f32[8, 4, 2] = aten.view.default(%v33, size=[8, 4, 2])
  %in35: f32[8, 2, 3] = input
  %v36: f32[8, 4, 3] = aten.bmm.default(%v34, %in35)
  %v37: f32[4, 2, 4] = aten.view.default(%v29, size=[4, 2, 4])
  %v38: f32[4, 2, 4] = aten.relu.default(%v37)
  %v39: f32[3, 4, 8] = aten.view.default(%v36, size=[3, 4, 8])
  return %v39
}
",
    )
    .unwrap();
    check_plan(&g, &fusion::plan(&g));
}
