//! One test per e-graph rule: a small IR graph on which the rule fires, the expected IR after
//! the e-graph pass (all rules on), and a numerics check (reference interpreter, seeded random
//! inputs): bit for bit for the rules tagged exact, at the f32 tolerance for the ones that
//! reassociate, which `-O2` must not run.

mod common;

use common::*;
use fxhlo_ir::text::{parse_graph, print_graph};
use fxhlo_passes::egraph::{optimize, rules, Config};

fn check(rule: &str, body: &str, want: &[&str], absent: &[&str]) {
    let src = format!("graph {{\n{body}\n}}\n");
    let g = parse_graph(&src).unwrap_or_else(|e| panic!("{rule}: {e}\n{src}"));
    let all = Config {
        reassociate: true,
        ..Config::deterministic()
    };
    let (out, report) = optimize(&g, &all).unwrap();
    out.verify().unwrap();
    let text = print_graph(&out);
    let exact = rules::all()
        .iter()
        .find(|r| r.rw.name.as_str() == rule)
        .unwrap_or_else(|| panic!("no rule {rule}"))
        .exact;
    assert!(
        report.rule_counts.get(rule).copied().unwrap_or(0) > 0,
        "{rule} did not fire:\n{report}\n{text}"
    );
    for w in want {
        assert!(
            text.contains(w),
            "{rule}: expected `{w}` in\n{text}\n{report}"
        );
    }
    for a in absent {
        assert!(
            !text.contains(a),
            "{rule}: unexpected `{a}` in\n{text}\n{report}"
        );
    }
    let weights = Default::default();
    for seed in 0..3 {
        let inputs = random_inputs(&g, &mut Rng(seed));
        let before = run(&g, &weights, &inputs);
        let after = run(&out, &weights, &inputs);
        if exact {
            assert_eq!(after, before, "{rule} (exact) seed {seed}");
        } else {
            assert_close(&format!("{rule} seed {seed}"), &after, &before);
        }
    }
    // The exact rules alone (what -O2 runs) keep every bit.
    let (exact_out, _) = optimize(&g, &Config::deterministic()).unwrap();
    for seed in 0..3 {
        let inputs = random_inputs(&g, &mut Rng(seed));
        let before = run(&g, &weights, &inputs);
        let after = run(&exact_out, &weights, &inputs);
        assert_eq!(after, before, "{rule}: exact rules, seed {seed}");
    }
}

/// The rules that move a rounding, named: a rule added to this list, or dropped from it, is
/// a decision to review (and README.md beside the rules says why each one is here).
#[test]
fn the_reassociating_rules_are_these() {
    let mut names: Vec<String> = (rules::all().iter())
        .filter(|r| !r.exact)
        .map(|r| r.rw.name.to_string())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "bmm-pull-scalar-lhs",
            "bmm-pull-scalar-rhs",
            "bmm-push-scalar",
            "mean-pull-scalar",
            "mm-bias-to-addmm",
            "mm-pull-scalar-lhs",
            "mm-pull-scalar-rhs",
            "mm-push-scalar",
            "mul-scalar-fold",
            "sum-pull-scalar"
        ]
    );
}

macro_rules! rule_tests {
    ($( $f:ident: $rule:literal, $body:literal, [$($want:literal),*], [$($absent:literal),*]; )*) => {
        $( #[test] fn $f() { check($rule, $body, &[$($want),*], &[$($absent),*]); } )*
        const COVERED: &[&str] = &[$($rule),*];
    };
}

rule_tests! {
    neg_neg: "neg-neg", "  %x: f32[2, 3] = input\n  %a: f32[2, 3] = aten.neg.default(%x)\n  %b: f32[2, 3] = aten.neg.default(%a)\n  %c: f32[2, 3] = aten.relu.default(%b)\n  return %c",
        ["aten.relu.default(%x)"], ["aten.neg"];
    relu_relu: "relu-relu", "  %x: f32[2, 3] = input\n  %a: f32[2, 3] = aten.relu.default(%x)\n  %b: f32[2, 3] = aten.relu.default(%a)\n  return %b",
        ["aten.relu.default(%x)", "return %a"], [];
    add_self: "add-self", "  %x: f32[2, 3] = input\n  %a: f32[2, 3] = aten.add.Tensor(%x, %x)\n  return %a",
        ["aten.mul.Scalar(%x, other=2)"], ["aten.add"];
    add_neg_to_sub: "add-neg-to-sub", "  %x: f32[2, 3] = input\n  %y: f32[2, 3] = input\n  %n: f32[2, 3] = aten.neg.default(%y)\n  %a: f32[2, 3] = aten.add.Tensor(%x, %n)\n  return %a",
        ["aten.sub.Tensor(%x, %y)"], ["aten.neg"];
    add_commute: "add-commute", "  %x: f32[2, 3] = input\n  %y: f32[3] = input\n  %a: f32[2, 3] = aten.add.Tensor(%x, %y)\n  return %a",
        ["aten.add.Tensor"], [];
    mul_commute: "mul-commute", "  %x: f32[2, 3] = input\n  %y: f32[3] = input\n  %a: f32[2, 3] = aten.mul.Tensor(%x, %y)\n  return %a",
        ["aten.mul.Tensor"], [];
    mul_scalar_fold: "mul-scalar-fold", "  %x: f32[2, 3] = input\n  %a: f32[2, 3] = aten.mul.Scalar(%x, other=0.1)\n  %b: f32[2, 3] = aten.mul.Scalar(%a, other=3.0)\n  return %b",
        ["aten.mul.Scalar(%x, other=0.30000000000000004)"], [];
    div_pow2_to_mul: "div-pow2-to-mul", "  %x: f32[2, 3] = input\n  %a: f32[2, 3] = aten.div.Scalar(%x, other=4.0)\n  return %a",
        ["aten.mul.Scalar(%x, other=0.25)"], ["aten.div"];
    pow2_to_mul: "pow2-to-mul", "  %x: f32[2, 3] = input\n  %a: f32[2, 3] = aten.pow.Tensor_Scalar(%x, exponent=2)\n  return %a",
        ["aten.mul.Tensor(%x, %x)"], ["aten.pow"];
    permute_permute: "permute-permute", "  %x: f32[2, 3, 4] = input\n  %p: f32[3, 4, 2] = aten.permute.default(%x, dims=[1, 2, 0])\n  %q: f32[2, 4, 3] = aten.permute.default(%p, dims=[2, 1, 0])\n  %r: f32[2, 4, 3] = aten.relu.default(%q)\n  return %r",
        ["dims=[0, 2, 1])"], ["dims=[1, 2, 0]", "dims=[2, 1, 0]"];
    permute_identity: "permute-identity", "  %x: f32[2, 3] = input\n  %p: f32[3, 2] = aten.permute.default(%x, dims=[1, 0])\n  %q: f32[2, 3] = aten.permute.default(%p, dims=[1, 0])\n  %r: f32[2, 3] = aten.relu.default(%q)\n  return %r",
        ["aten.relu.default(%x)"], ["aten.permute"];
    permute_through_unary: "permute-through-unary", "  %x: f32[2, 3] = input\n  %e: f32[2, 3] = aten.exp.default(%x)\n  %p: f32[3, 2] = aten.permute.default(%e, dims=[1, 0])\n  return %p",
        ["aten.permute.default"], [];
    unary_through_permute: "unary-through-permute", "  %x: f32[2, 3] = input\n  %p: f32[3, 2] = aten.permute.default(%x, dims=[1, 0])\n  %r: f32[3, 2] = aten.relu.default(%p)\n  return %r",
        ["aten.relu.default"], [];
    permute_binary: "permute-binary", "  %x: f32[2, 3] = input\n  %y: f32[2, 3] = input\n  %p: f32[3, 2] = aten.permute.default(%x, dims=[1, 0])\n  %q: f32[3, 2] = aten.permute.default(%y, dims=[1, 0])\n  %a: f32[3, 2] = aten.add.Tensor(%p, %q)\n  return %a",
        ["aten.add.Tensor(%x, %y)"], ["permute.default(%y"];
    permute_binary_mul: "permute-binary-mul", "  %x: f32[2, 3] = input\n  %y: f32[2, 3] = input\n  %p: f32[3, 2] = aten.permute.default(%x, dims=[1, 0])\n  %q: f32[3, 2] = aten.permute.default(%y, dims=[1, 0])\n  %a: f32[3, 2] = aten.mul.Tensor(%p, %q)\n  return %a",
        ["aten.mul.Tensor("], ["permute.default(%y"];
    view_view: "view-view", "  %x: f32[2, 3, 4] = input\n  %a: f32[6, 4] = aten.view.default(%x, size=[6, 4])\n  %b: f32[24] = aten.view.default(%a, size=[-1])\n  %r: f32[24] = aten.relu.default(%b)\n  return %r",
        ["aten.view.default(%x, size=[24])"], ["size=[6, 4]"];
    view_noop: "view-noop", "  %x: f32[2, 3] = input\n  %a: f32[2, 3] = aten.view.default(%x, size=[2, -1])\n  %r: f32[2, 3] = aten.relu.default(%a)\n  return %r",
        ["aten.relu.default(%x)"], ["aten.view"];
    expand_noop: "expand-noop", "  %x: f32[2, 3] = input\n  %a: f32[2, 3] = aten.expand.default(%x, size=[2, 3])\n  %r: f32[2, 3] = aten.relu.default(%a)\n  return %r",
        ["aten.relu.default(%x)"], ["aten.expand"];
    expand_expand: "expand-expand", "  %x: f32[3] = input\n  %a: f32[2, 3] = aten.expand.default(%x, size=[2, 3])\n  %b: f32[4, 2, 3] = aten.expand.default(%a, size=[4, -1, -1])\n  %r: f32[4, 2, 3] = aten.relu.default(%b)\n  return %r",
        ["aten.expand.default(%x, size=[4, 2, 3])"], ["size=[2, 3]"];
    unsqueeze_to_view: "unsqueeze-to-view", "  %x: f32[2, 3] = input\n  %a: f32[2, 1, 3] = aten.unsqueeze.default(%x, dim=1)\n  %b: f32[2, 3, 1] = aten.view.default(%a, size=[2, 3, 1])\n  return %b",
        ["aten.view.default(%x, size=[2, 3, 1])"], ["unsqueeze"];
    squeeze_dim_to_view: "squeeze-dim-to-view", "  %x: f32[2, 1, 3] = input\n  %a: f32[2, 3] = aten.squeeze.dim(%x, dim=1)\n  %b: f32[6] = aten.view.default(%a, size=[6])\n  return %b",
        ["aten.view.default(%x, size=[6])"], ["squeeze"];
    squeeze_dims_to_view: "squeeze-dims-to-view", "  %x: f32[2, 1, 3] = input\n  %a: f32[2, 3] = aten.squeeze.dims(%x, dim=[1])\n  %b: f32[6] = aten.view.default(%a, size=[6])\n  return %b",
        ["aten.view.default(%x, size=[6])"], ["squeeze"];
    view_of_unsqueeze: "view-of-unsqueeze", "  %x: f32[2, 3] = input\n  %a: f32[1, 2, 3] = aten.unsqueeze.default(%x, dim=0)\n  %b: f32[6] = aten.view.default(%a, size=[6])\n  return %b",
        ["aten.view.default(%x, size=[6])"], ["unsqueeze"];
    mm_bias_to_addmm: "mm-bias-to-addmm", "  %a: f32[4, 8] = input\n  %b: f32[8, 5] = input\n  %c: f32[5] = input\n  %m: f32[4, 5] = aten.mm.default(%a, %b)\n  %r: f32[4, 5] = aten.add.Tensor(%m, %c)\n  return %r",
        ["aten.addmm.default(%c, %a, %b)"], ["aten.mm", "aten.add.Tensor"];
    mm_pull_scalar_lhs: "mm-pull-scalar-lhs", "  %a: f32[16, 32] = input\n  %b: f32[32, 2] = input\n  %s: f32[16, 32] = aten.mul.Scalar(%a, other=0.5)\n  %m: f32[16, 2] = aten.mm.default(%s, %b)\n  return %m",
        ["aten.mm.default(%a, %b)"], [];
    mm_pull_scalar_rhs: "mm-pull-scalar-rhs", "  %a: f32[2, 32] = input\n  %b: f32[32, 16] = input\n  %s: f32[32, 16] = aten.mul.Scalar(%b, other=0.5)\n  %m: f32[2, 16] = aten.mm.default(%a, %s)\n  return %m",
        ["aten.mm.default(%a, %b)"], [];
    bmm_pull_scalar_lhs: "bmm-pull-scalar-lhs", "  %a: f32[2, 16, 32] = input\n  %b: f32[2, 32, 2] = input\n  %s: f32[2, 16, 32] = aten.mul.Scalar(%a, other=0.5)\n  %m: f32[2, 16, 2] = aten.bmm.default(%s, %b)\n  return %m",
        ["aten.bmm.default(%a, %b)"], [];
    bmm_pull_scalar_rhs: "bmm-pull-scalar-rhs", "  %a: f32[2, 2, 32] = input\n  %b: f32[2, 32, 16] = input\n  %s: f32[2, 32, 16] = aten.mul.Scalar(%b, other=0.5)\n  %m: f32[2, 2, 16] = aten.bmm.default(%a, %s)\n  return %m",
        ["aten.bmm.default(%a, %b)"], [];
    mm_push_scalar: "mm-push-scalar", "  %a: f32[2, 3] = input\n  %b: f32[3, 64] = input\n  %m: f32[2, 64] = aten.mm.default(%a, %b)\n  %s: f32[2, 64] = aten.mul.Scalar(%m, other=0.5)\n  return %s",
        ["aten.mul.Scalar(%a, other=0.5)"], [];
    bmm_push_scalar: "bmm-push-scalar", "  %a: f32[2, 2, 3] = input\n  %b: f32[2, 3, 64] = input\n  %m: f32[2, 2, 64] = aten.bmm.default(%a, %b)\n  %s: f32[2, 2, 64] = aten.mul.Scalar(%m, other=0.5)\n  return %s",
        ["aten.mul.Scalar(%a, other=0.5)"], [];
    mm_transposes: "mm-transposes", "  %a: f32[8, 4] = input\n  %b: f32[6, 8] = input\n  %p: f32[4, 8] = aten.permute.default(%a, dims=[1, 0])\n  %q: f32[8, 6] = aten.permute.default(%b, dims=[1, 0])\n  %m: f32[4, 6] = aten.mm.default(%p, %q)\n  return %m",
        ["aten.mm.default(%b, %a)"], [];
    transpose_of_mm: "transpose-of-mm", "  %a: f32[4, 8] = input\n  %b: f32[8, 6] = input\n  %m: f32[4, 6] = aten.mm.default(%a, %b)\n  %t: f32[6, 4] = aten.permute.default(%m, dims=[1, 0])\n  return %t",
        ["aten.mm.default"], [];
    transpose_of_bmm: "transpose-of-bmm", "  %a: f32[2, 4, 8] = input\n  %b: f32[2, 8, 6] = input\n  %m: f32[2, 4, 6] = aten.bmm.default(%a, %b)\n  %t: f32[2, 6, 4] = aten.permute.default(%m, dims=[0, 2, 1])\n  return %t",
        ["aten.bmm.default"], [];
    sum_pull_scalar: "sum-pull-scalar", "  %x: f32[4, 16] = input\n  %s: f32[4, 16] = aten.mul.Scalar(%x, other=3.0)\n  %r: f32[4] = aten.sum.dim_IntList(%s, dim=[1])\n  return %r",
        ["aten.sum.dim_IntList(%x, dim=[1])"], [];
    mean_pull_scalar: "mean-pull-scalar", "  %x: f32[4, 16] = input\n  %s: f32[4, 16] = aten.mul.Scalar(%x, other=3.0)\n  %r: f32[4] = aten.mean.dim(%s, dim=[1])\n  return %r",
        ["aten.mean.dim(%x, dim=[1])"], [];
    sum_of_permute: "sum-of-permute", "  %x: f32[2, 3, 4] = input\n  %p: f32[3, 2, 4] = aten.permute.default(%x, dims=[1, 0, 2])\n  %r: f32[2, 4] = aten.sum.dim_IntList(%p, dim=[0])\n  return %r",
        ["aten.sum.dim_IntList(%x, dim=[1])"], ["permute"];
    mean_of_permute: "mean-of-permute", "  %x: f32[2, 3, 4] = input\n  %p: f32[3, 2, 4] = aten.permute.default(%x, dims=[1, 0, 2])\n  %r: f32[2, 4] = aten.mean.dim(%p, dim=[0])\n  return %r",
        ["aten.mean.dim(%x, dim=[1])"], ["permute"];
    amax_of_permute: "amax-of-permute", "  %x: f32[2, 3, 4] = input\n  %p: f32[4, 2, 3] = aten.permute.default(%x, dims=[2, 0, 1])\n  %r: f32[2, 3] = aten.amax.default(%p, dim=[0])\n  return %r",
        ["aten.amax.default(%x, dim=[2])"], ["permute"];
    sum_unit_dims: "sum-unit-dims", "  %x: f32[2, 1, 3] = input\n  %r: f32[2, 1, 3] = aten.sum.dim_IntList(%x, dim=[1], keepdim=true)\n  %e: f32[2, 1, 3] = aten.exp.default(%r)\n  return %e",
        ["aten.exp.default(%x)"], ["sum"];
    mean_unit_dims: "mean-unit-dims", "  %x: f32[2, 1, 3] = input\n  %r: f32[2, 3] = aten.mean.dim(%x, dim=[1])\n  %e: f32[2, 3] = aten.exp.default(%r)\n  return %e",
        ["aten.view.default(%x, size=[2, 3])"], ["mean"];
    amax_unit_dims: "amax-unit-dims", "  %x: f32[2, 1, 3] = input\n  %r: f32[2, 1, 3] = aten.amax.default(%x, dim=[1], keepdim=true)\n  %e: f32[2, 1, 3] = aten.exp.default(%r)\n  return %e",
        ["aten.exp.default(%x)"], ["amax"];
}

#[test]
fn every_rule_has_a_test() {
    let mut names: Vec<String> = rules::all().iter().map(|r| r.rw.name.to_string()).collect();
    names.sort();
    let mut covered: Vec<String> = COVERED.iter().map(|s| s.to_string()).collect();
    covered.sort();
    assert_eq!(names, covered);
}

#[test]
fn unsound_candidates_are_rejected() {
    // The kept dims would come out swapped: the reduction must stay on the permute.
    let g = parse_graph("graph {\n  %x: f32[3, 3, 4] = input\n  %p: f32[3, 3, 4] = aten.permute.default(%x, dims=[1, 0, 2])\n  %r: f32[3, 3] = aten.sum.dim_IntList(%p, dim=[2])\n  return %r\n}\n").unwrap();
    let (out, report) = optimize(&g, &Config::deterministic()).unwrap();
    assert_eq!(report.rule_counts["sum-of-permute"], 0, "{report}");
    assert!(print_graph(&out).contains("aten.permute"));
    // Integer tensors: no scalar moves through reductions.
    let g = parse_graph("graph {\n  %x: i64[4, 4] = input\n  %s: i64[4, 4] = aten.mul.Scalar(%x, other=3)\n  %r: i64[4] = aten.sum.dim_IntList(%s, dim=[1])\n  return %r\n}\n").unwrap();
    let all = Config {
        reassociate: true,
        ..Config::deterministic()
    };
    let (_, report) = optimize(&g, &all).unwrap();
    assert_eq!(report.rule_counts["sum-pull-scalar"], 0, "{report}");
}

#[test]
fn opaque_and_multi_result_nodes_round_trip() {
    let g = parse_graph("graph {\n  %x: f32[4, 6] = input\n  %r: f32[4, 6] = aten.rand.default(size=[4, 6])\n  %r2: f32[4, 6] = aten.rand.default(size=[4, 6])\n  %a: f32[4, 6] = aten.add.Tensor(%x, %r)\n  %b: f32[4, 6] = aten.add.Tensor(%a, %r2)\n  max: %v: f32[4], %i: i64[4] = aten.max.dim(%b, dim=1)\n  s: %s0: f32[4, 2], %s1: f32[4, 4] = aten.split_with_sizes.default(%b, split_sizes=[2, 4], dim=1)\n  %u: f32[4, 6] = unsupported \"aten.frob.default\"(self=%b)\n  return %v, %i, %s1, %u\n}\n");
    let g = g.unwrap();
    let (out, _) = optimize(&g, &Config::deterministic()).unwrap();
    out.verify().unwrap();
    let text = print_graph(&out);
    assert_eq!(text.matches("aten.rand").count(), 2, "{text}");
    assert!(
        text.contains("aten.max.dim") && text.contains("split_with_sizes"),
        "{text}"
    );
}

#[test]
fn deterministic_across_runs() {
    let g = parse_graph("graph {\n  %a: f32[4, 8] = input\n  %b: f32[8, 5] = input\n  %c: f32[5] = input\n  %m: f32[4, 5] = aten.mm.default(%a, %b)\n  %r: f32[4, 5] = aten.add.Tensor(%c, %m)\n  %s: f32[4, 5] = aten.mul.Scalar(%r, other=0.5)\n  %t: f32[5, 4] = aten.permute.default(%s, dims=[1, 0])\n  return %t\n}\n").unwrap();
    let first = print_graph(&optimize(&g, &Config::deterministic()).unwrap().0);
    for _ in 0..3 {
        assert_eq!(
            print_graph(&optimize(&g, &Config::deterministic()).unwrap().0),
            first
        );
    }
}

/// A graph over `window_ops` op nodes is optimized in windows: rewrites inside a window happen,
/// values read across windows (the input, a multi-result node, a value returned) stay right,
/// fresh names stay unique, and the windows past `max_ops` are kept as they are.
#[test]
fn windows_optimize_large_graphs() {
    let mut body = String::from(
        "  %x: f32[4, 6] = input\n  max: %mv: f32[4], %mi: i64[4] = aten.max.dim(%x, dim=1)\n",
    );
    let mut prev = "x".to_string();
    for i in 0..12 {
        // Per group of 5 ops: neg(neg(p)) inside one window, then tanh, `+ x`, `- (-x)`.
        body += &format!("  %a{i}: f32[4, 6] = aten.neg.default(%{prev})\n");
        body += &format!("  %b{i}: f32[4, 6] = aten.neg.default(%a{i})\n");
        body += &format!("  %c{i}: f32[4, 6] = aten.tanh.default(%b{i})\n");
        body += &format!("  %d{i}: f32[4, 6] = aten.add.Tensor(%c{i}, %x)\n");
        body += &format!("  %n{i}: f32[4, 6] = aten.neg.default(%x)\n");
        prev = format!("d{i}");
    }
    body += &format!("  %s: f32[4, 6] = aten.add.Tensor(%{prev}, %n0)\n");
    body += "  %m: f32[4] = aten.mul.Tensor(%mv, %mv)\n";
    body += "  return %s, %m, %mi, %c3\n";
    let g = parse_graph(&format!("graph {{\n{body}}}\n")).unwrap();
    let windowed = |window_ops, max_ops| Config {
        window_ops,
        max_ops,
        ..Config::deterministic()
    };
    let mut rng = Rng(7);
    let inputs = random_inputs(&g, &mut rng);
    let want = run(&g, &Default::default(), &inputs);
    for (w, max) in [
        (5, usize::MAX),
        (4, usize::MAX),
        (7, 14),
        (1000, usize::MAX),
    ] {
        let (out, report) = optimize(&g, &windowed(w, max)).unwrap();
        out.verify().unwrap();
        let text = print_graph(&out);
        assert_close(
            &format!("window {w}"),
            &run(&out, &Default::default(), &inputs),
            &want,
        );
        let negs = text.matches("aten.neg").count();
        if w == 5 {
            // Windows of 5 after the max node: a0/b0 are split, every later pair is whole.
            assert!(
                report.stop_reason.contains("windows of at most 5"),
                "{report}"
            );
            assert!(report.rule_counts["neg-neg"] >= 10, "{report}");
        }
        if max == 14 {
            // Only the first 14 op nodes are optimized: the last pairs stay.
            assert!(report.stop_reason.contains("kept as they are"), "{report}");
            assert!(negs > 12, "{text}");
        }
        if w == 1000 {
            assert!(!report.stop_reason.contains("windows"), "{report}");
        }
    }
}
