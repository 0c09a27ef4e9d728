//! The fused attention step (`fast::attention`) against the reference interpreter, on
//! attentions written the ways exported models spell them, and the attentions it must leave to
//! the separate matmul and softmax steps.

#[path = "../passes/tests/common/mod.rs"]
mod pcommon;

use fxhlo::{compile, CompileOptions};
use fxhlo_ir::HostTensor;
use fxhlo_ir::{text::parse_graph, Model};
use fxhlo_runtime::fast::{ExecOptions, Executor, Kernel};
use pcommon::{assert_close, random_inputs, Rng};
use std::collections::BTreeMap;

/// Compiles `text` at -O2, runs it on 2 threads against the interpreter on `inputs` (random
/// where not given) and returns the kinds of its steps.
fn run(text: &str, given: &[(&str, HostTensor)]) -> Vec<&'static str> {
    let g = parse_graph(text).unwrap();
    let model = Model {
        graph: g.clone(),
        weights: Default::default(),
    };
    let a = compile(&model, &CompileOptions::default()).unwrap();
    let kinds = a
        .header
        .program
        .steps
        .iter()
        .map(|s| s.kernel.kind())
        .collect();
    let mut inputs: BTreeMap<String, HostTensor> = random_inputs(&g, &mut Rng(7));
    for (name, t) in given {
        inputs.insert(name.to_string(), t.clone());
    }
    let want = fxhlo_runtime::run(&model, &inputs).unwrap();
    let opts = ExecOptions {
        threads: Some(2),
        max_memory: None,
    };
    let got = Executor::new(a, &opts).unwrap().run(&inputs).unwrap();
    assert_close(text, &got, &want);
    kinds
}

/// `softmax(q @ k^T / 4 + mask) @ v` over `[2, 3]` heads of 40 queries and 50 keys, the mask
/// `[1, 1, 40, 50]` broadcast over batch and heads.
const MASKED: &str = r#"graph {
  %q: f32[2, 3, 40, 16] = input
  %k: f32[2, 3, 50, 16] = input
  %v: f32[2, 3, 50, 24] = input
  %mask: f32[1, 1, 40, 50] = input
  %qv: f32[6, 40, 16] = aten.view.default(%q, size=[6, 40, 16])
  %kt: f32[2, 3, 16, 50] = aten.permute.default(%k, dims=[0, 1, 3, 2])
  %ktv: f32[6, 16, 50] = aten.view.default(%kt, size=[6, 16, 50])
  %s: f32[6, 40, 50] = aten.bmm.default(%qv, %ktv)
  %s4: f32[2, 3, 40, 50] = aten.view.default(%s, size=[2, 3, 40, 50])
  %sc: f32[2, 3, 40, 50] = aten.div.Scalar(%s4, other=4)
  %sm: f32[2, 3, 40, 50] = aten.add.Tensor(%sc, %mask)
  %p: f32[2, 3, 40, 50] = aten._softmax.default(%sm, dim=-1, half_to_float=false)
  %pv: f32[6, 40, 50] = aten.view.default(%p, size=[6, 40, 50])
  %vv: f32[6, 50, 24] = aten.view.default(%v, size=[6, 50, 24])
  %o: f32[6, 40, 24] = aten.bmm.default(%pv, %vv)
  return %o
}"#;

#[test]
fn a_scaled_and_masked_attention_is_one_step() {
    assert_eq!(run(MASKED, &[]), ["attention"]);
    // A banded causal mask: -inf more than 5 keys past each query.
    let mask: Vec<f64> = (0..40 * 50)
        .map(|i| {
            let (r, c) = (i / 50, i % 50);
            if c > r + 5 {
                f64::NEG_INFINITY
            } else {
                0.0
            }
        })
        .collect();
    let mask = HostTensor::from_f64(fxhlo_ir::DType::F32, vec![1, 1, 40, 50], &mask);
    assert_eq!(run(MASKED, &[("mask", mask)]), ["attention"]);
}

#[test]
fn the_guard_of_torchs_decomposition_zeroes_fully_masked_rows() {
    let text = r#"graph {
  %q: f32[4, 33, 8] = input
  %k: f32[4, 8, 70] = input
  %v: f32[4, 70, 8] = input
  %mask: f32[4, 33, 70] = input
  %s: f32[4, 33, 70] = aten.bmm.default(%q, %k)
  %sm: f32[4, 33, 70] = aten.add.Tensor(%mask, %s)
  %p: f32[4, 33, 70] = aten._softmax.default(%sm, dim=2, half_to_float=false)
  %eq: bool[4, 33, 70] = aten.eq.Scalar(%sm, other=-inf)
  %ne: bool[4, 33, 70] = aten.logical_not.default(%eq)
  %any: bool[4, 33, 1] = aten.any.dim(%ne, dim=-1, keepdim=true)
  %dead: bool[4, 33, 1] = aten.logical_not.default(%any)
  %zeros: f32[4, 33, 70] = aten.full.default(size=[4, 33, 70], fill_value=0, dtype=f32)
  %w: f32[4, 33, 70] = aten.where.self(%dead, %zeros, %p)
  %o: f32[4, 33, 8] = aten.bmm.default(%w, %v)
  return %o
}"#;
    // Rows 0 and 17 of every batch entry fully masked.
    let mask: Vec<f64> = (0..4 * 33 * 70)
        .map(|i| {
            let r = (i / 70) % 33;
            if r == 0 || r == 17 || (i % 7 == 3) {
                f64::NEG_INFINITY
            } else {
                0.0
            }
        })
        .collect();
    let mask = HostTensor::from_f64(fxhlo_ir::DType::F32, vec![4, 33, 70], &mask);
    assert_eq!(run(text, &[("mask", mask)]), ["attention"]);
}

#[test]
fn attentions_it_cannot_fuse_keep_their_separate_steps() {
    // The probabilities are returned too: they must be written, so no fused step.
    let returned = MASKED.replace("return %o", "return %o, %p");
    let kinds = run(&returned, &[]);
    assert!(!kinds.contains(&"attention"), "{kinds:?}");
    // The mask is added after a scale applied to it as well, `(s + mask) / 4`: not the
    // kernel's `s * scale + mask`.
    let scaled_mask = MASKED
        .replace(
            "%sc: f32[2, 3, 40, 50] = aten.div.Scalar(%s4, other=4)",
            "%sc: f32[2, 3, 40, 50] = aten.add.Tensor(%s4, %mask)",
        )
        .replace(
            "%sm: f32[2, 3, 40, 50] = aten.add.Tensor(%sc, %mask)",
            "%sm: f32[2, 3, 40, 50] = aten.div.Scalar(%sc, other=4)",
        );
    let kinds = run(&scaled_mask, &[]);
    assert!(!kinds.contains(&"attention"), "{kinds:?}");
    // A `where` that is not the fully-masked-row guard (rows with any score above 1 zeroed).
    let other_guard = r#"graph {
  %q: f32[4, 9, 8] = input
  %k: f32[4, 8, 12] = input
  %v: f32[4, 12, 8] = input
  %s: f32[4, 9, 12] = aten.bmm.default(%q, %k)
  %p: f32[4, 9, 12] = aten._softmax.default(%s, dim=-1, half_to_float=false)
  %gt: bool[4, 9, 12] = aten.gt.Scalar(%s, other=1)
  %any: bool[4, 9, 1] = aten.any.dim(%gt, dim=-1, keepdim=true)
  %zeros: f32[4, 9, 12] = aten.full.default(size=[4, 9, 12], fill_value=0, dtype=f32)
  %w: f32[4, 9, 12] = aten.where.self(%any, %zeros, %p)
  %o: f32[4, 9, 8] = aten.bmm.default(%w, %v)
  return %o
}"#;
    let kinds = run(other_guard, &[]);
    assert!(!kinds.contains(&"attention"), "{kinds:?}");
}

#[test]
fn the_result_goes_where_the_out_projection_reads_it() {
    // Heads back to `[seq, batch, heads * dim]` rows through view, permute and view, then a
    // linear layer: the attention writes those rows itself, so there is no copy step.
    let text = r#"graph {
  %q: f32[6, 20, 8] = input
  %k: f32[6, 8, 20] = input
  %v: f32[6, 20, 8] = input
  %w: f32[16, 24] = input
  %s: f32[6, 20, 20] = aten.bmm.default(%q, %k)
  %p: f32[6, 20, 20] = aten._softmax.default(%s, dim=-1, half_to_float=false)
  %o: f32[6, 20, 8] = aten.bmm.default(%p, %v)
  %o4: f32[2, 3, 20, 8] = aten.view.default(%o, size=[2, 3, 20, 8])
  %op: f32[20, 2, 3, 8] = aten.permute.default(%o4, dims=[2, 0, 1, 3])
  %rows: f32[40, 24] = aten.view.default(%op, size=[40, 24])
  %wt: f32[24, 16] = aten.permute.default(%w, dims=[1, 0])
  %y: f32[40, 16] = aten.mm.default(%rows, %wt)
  return %y
}"#;
    assert_eq!(run(text, &[]), ["attention", "matmul"]);
}

#[test]
fn every_compiled_attention_step_is_checked_before_it_runs() {
    // A damaged spec (an output view that writes two heads to the same place) is refused when
    // the executor is built, not run.
    let g = parse_graph(MASKED).unwrap();
    let model = Model {
        graph: g,
        weights: Default::default(),
    };
    let mut a = compile(&model, &CompileOptions::default()).unwrap();
    let Kernel::Attention(spec) = &mut a.header.program.steps[0].kernel else {
        panic!("not an attention");
    };
    spec.out.batch_stride = 0;
    let err = Executor::new(a, &ExecOptions::default()).err().unwrap();
    assert!(err.to_string().contains("twice"), "{err}");
}

#[test]
fn a_mask_computed_inside_the_softmax_kernel_is_computed_first() {
    // GPT-2's causal mask, `where(keep, 0, -inf)`, is cheap enough that the softmax's fusion
    // kernel computes it itself and nothing stores it: an elementwise step computes it before
    // the attention step. (Random `keep`: some rows are fully masked, NaN on both sides.)
    let text = r#"graph {
  %q: f32[1, 2, 8, 4] = input
  %k: f32[1, 2, 8, 4] = input
  %v: f32[1, 2, 8, 4] = input
  %keep: bool[1, 1, 8, 8] = input
  %zero: f32[] = aten.full.default(size=[], fill_value=0, dtype=f32)
  %ninf: f32[] = aten.full.default(size=[], fill_value=-inf, dtype=f32)
  %mask: f32[1, 1, 8, 8] = aten.where.self(%keep, %zero, %ninf)
  %qv: f32[2, 8, 4] = aten.view.default(%q, size=[2, 8, 4])
  %kt: f32[1, 2, 4, 8] = aten.permute.default(%k, dims=[0, 1, 3, 2])
  %ktv: f32[2, 4, 8] = aten.view.default(%kt, size=[2, 4, 8])
  %s: f32[2, 8, 8] = aten.bmm.default(%qv, %ktv)
  %s4: f32[1, 2, 8, 8] = aten.view.default(%s, size=[1, 2, 8, 8])
  %sc: f32[1, 2, 8, 8] = aten.mul.Scalar(%s4, other=0.5)
  %sm: f32[1, 2, 8, 8] = aten.add.Tensor(%mask, %sc)
  %p: f32[1, 2, 8, 8] = aten._softmax.default(%sm, dim=-1, half_to_float=false)
  %pv: f32[2, 8, 8] = aten.view.default(%p, size=[2, 8, 8])
  %vv: f32[2, 8, 4] = aten.view.default(%v, size=[2, 8, 4])
  %o: f32[2, 8, 4] = aten.bmm.default(%pv, %vv)
  return %o
}"#;
    assert_eq!(run(text, &[]), ["elementwise", "attention"]);
}
