//! The fast runtime against the reference interpreter on the optimizer's seeded random graphs
//! (elementwise, reductions and chains of them over the same rows, matmuls, reshapes, permutes,
//! attention-like strided views): every
//! kernel family the program builder picks must agree with the oracle, at -O0 and -O2.

#[path = "../passes/tests/common/mod.rs"]
mod pcommon;

use fxhlo::{compile, CompileOptions};
use fxhlo_ir::Model;
use fxhlo_runtime::fast::memory::Loc;
use fxhlo_runtime::fast::{ExecOptions, Executor};
use pcommon::random::random_graph;
use pcommon::{assert_close, random_inputs, Rng};
use std::collections::BTreeMap;

#[test]
fn random_graphs_agree_with_the_interpreter() {
    let mut kinds = BTreeMap::<&'static str, usize>::new();
    for seed in 0..200u64 {
        let g = random_graph(seed);
        let model = Model {
            graph: g.clone(),
            weights: Default::default(),
        };
        for level in [0u8, 2] {
            let opts = CompileOptions {
                opt_level: level,
                ..Default::default()
            };
            let a = compile(&model, &opts).unwrap_or_else(|e| {
                panic!("seed {seed}: {e}\n{}", fxhlo_ir::text::print_graph(&g))
            });
            for s in &a.header.program.steps {
                *kinds.entry(s.kernel.kind()).or_default() += 1;
                if let fxhlo_runtime::fast::Kernel::RowReduce(r) = &s.kernel {
                    if r.stages.len() > 1 {
                        *kinds.entry("reduction of several stages").or_default() += 1;
                    }
                }
                if let fxhlo_runtime::fast::Kernel::Matmul { spec, .. } = &s.kernel {
                    if spec.a.grouped() || spec.b.grouped() {
                        *kinds.entry("matmul, grouped batch").or_default() += 1;
                    }
                    if spec.a.offset + spec.b.offset > 0 {
                        *kinds.entry("matmul, operand at an offset").or_default() += 1;
                    }
                    if spec.alpha != 1.0 {
                        *kinds.entry("matmul, folded scale").or_default() += 1;
                    }
                    // The random graphs make `mm`/`bmm` only: a bias is a folded `add`.
                    if spec.bias.is_some() {
                        *kinds.entry("matmul, folded bias").or_default() += 1;
                    }
                }
            }
            let ex = Executor::new(
                a,
                &ExecOptions {
                    threads: Some(2),
                    max_memory: None,
                },
            )
            .unwrap();
            let plan = ex.memory_plan();
            let p = &ex.artifact().header.program;
            for s in &p.steps {
                if s.dsts.first().map(|&v| plan.loc[v as usize]) == Some(Loc::InEpilogue) {
                    *kinds.entry("matmul/conv in place").or_default() += 1;
                }
            }
            let inputs = random_inputs(&g, &mut Rng(seed * 7 + level as u64));
            let want = fxhlo_runtime::run(&model, &inputs).unwrap();
            let got = ex
                .run(&inputs)
                .unwrap_or_else(|e| panic!("seed {seed} -O{level}: {e}"));
            assert_close(
                &format!("seed {seed} -O{level}\n{}", fxhlo_ir::text::print_graph(&g)),
                &got,
                &want,
            );
        }
    }
    eprintln!("steps by kernel kind over the random graphs: {kinds:?}");
    for (k, min) in [
        ("elementwise", 20),
        ("reduction", 20),
        ("reduction of several stages", 10),
        ("matmul", 20),
        ("matmul/conv in place", 20),
        ("matmul, grouped batch", 10),
        ("matmul, operand at an offset", 10),
        ("matmul, folded scale", 10),
        ("matmul, folded bias", 10),
    ] {
        assert!(
            kinds.get(k).copied().unwrap_or(0) >= min,
            "few {k} steps: {kinds:?}"
        );
    }
}

#[test]
fn split_results_are_elementwise_steps() {
    // Each result of `split_with_sizes` is a slice of its operand: an elementwise copy (one
    // step per result shape), not a fallback to the interpreter.
    let g = fxhlo_ir::text::parse_graph(
        "graph {
  %y: f32[4, 6] = input
  split: %p: f32[4, 2], %q: f32[4, 4] = aten.split_with_sizes.default(%y, split_sizes=[2, 4], dim=1)
  %r: f32[4, 4] = aten.relu.default(%q)
  split2: %s: f32[1, 6], %t: f32[3, 6] = aten.split_with_sizes.default(%y, split_sizes=[1, 3], dim=0)
  %u: f32[3, 6] = aten.exp.default(%t)
  return %p, %r, %s, %u
}
",
    )
    .unwrap();
    let model = Model {
        graph: g.clone(),
        weights: Default::default(),
    };
    let a = compile(&model, &CompileOptions::default()).unwrap();
    let kinds: Vec<&str> = a
        .header
        .program
        .steps
        .iter()
        .map(|s| s.kernel.kind())
        .collect();
    let reasons: Vec<String> = a
        .header
        .program
        .steps
        .iter()
        .filter_map(|s| match &s.kernel {
            fxhlo_runtime::fast::Kernel::Fallback { reason, .. } => Some(reason.clone()),
            _ => None,
        })
        .collect();
    assert!(
        kinds.iter().all(|k| *k == "elementwise"),
        "{kinds:?} {reasons:?}"
    );
    let ex = Executor::new(a, &ExecOptions::default()).unwrap();
    for seed in 0..4 {
        let inputs = random_inputs(&g, &mut Rng(seed));
        let want = fxhlo_runtime::run(&model, &inputs).unwrap();
        let got = ex.run(&inputs).unwrap();
        assert_close(&format!("seed {seed}"), &got, &want);
    }
}
