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
