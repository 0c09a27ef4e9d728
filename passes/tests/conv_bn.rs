//! `conv-bn` on every form of the pair it folds: with and without the convolution's bias and
//! the batch norm's weight and bias, grouped (depthwise) and 1-D convolutions. The folded graph
//! gives the unfolded one's outputs in the reference interpreter, and no batch norm is left.

mod common;

use common::*;
use fxhlo_ir::text::parse_graph;
use fxhlo_ir::{HostTensor, NodeKind, Op};
use fxhlo_passes::conv_bn::ConvBn;
use fxhlo_passes::{Cx, Pass};

/// A convolution of `x` (shape `x`, weight `w`, `groups`) then a batch norm over `c` channels;
/// `bias`, `gamma`, `beta` say which optional tensors are present.
fn graph(
    x: &str,
    w: &str,
    y: &str,
    c: usize,
    groups: usize,
    [bias, gamma, beta]: [bool; 3],
) -> String {
    let nd = w.matches(',').count() - 1;
    let ints = |v: i64| format!("[{}]", vec![v.to_string(); nd].join(", "));
    let opt = |on: bool, name: &str| {
        if on {
            format!("%{name}")
        } else {
            "none".into()
        }
    };
    format!(
        "graph {{
  %x: f32{x} = input
  %w: f32{w} = parameter \"w\"
  %cb: f32[{c}] = parameter \"cb\"
  %g: f32[{c}] = parameter \"g\"
  %b: f32[{c}] = parameter \"b\"
  %m: f32[{c}] = buffer \"m\"
  %v: f32[{c}] = buffer \"v\"
  %y: f32{y} = aten.convolution.default(%x, %w, {}, stride={}, padding={}, dilation={}, transposed=false, output_padding={}, groups={groups})
  norm: %n: f32{y}, %n1: f32[0], %n2: f32[0] = aten._native_batch_norm_legit_no_training.default(%y, {}, {}, %m, %v, momentum=0.1, eps=1e-5)
  %r: f32{y} = aten.relu.default(%n)
  return %r
}}
",
        opt(bias, "cb"),
        ints(1),
        ints(1),
        ints(1),
        ints(0),
        opt(gamma, "g"),
        opt(beta, "b"),
    )
}

#[test]
fn folded_pairs_compute_what_the_pairs_did() {
    let shapes = [
        ("[2, 4, 6, 6]", "[8, 4, 3, 3]", "[2, 8, 6, 6]", 8, 1),
        ("[1, 6, 5, 7]", "[6, 1, 3, 3]", "[1, 6, 5, 7]", 6, 6),
        ("[2, 3, 9]", "[5, 3, 3]", "[2, 5, 9]", 5, 1),
    ];
    let mut rng = Rng(0xb17);
    let mut cases = 0;
    for (x, w, y, c, groups) in shapes {
        for present in 0..8u32 {
            let flags = [present & 1 != 0, present & 2 != 0, present & 4 != 0];
            let src = graph(x, w, y, c, groups, flags);
            let g = parse_graph(&src).unwrap_or_else(|e| panic!("{e}\n{src}"));
            g.verify().unwrap();
            let mut weights = fxhlo_ir::Weights::new();
            for n in &g.nodes {
                if let NodeKind::Input {
                    target: Some(t), ..
                } = &n.kind
                {
                    let mut h: HostTensor = random_tensor(&n.results[0], &mut rng);
                    if t == "v" {
                        // A variance: positive.
                        let vals: Vec<f64> = h.to_f64_vec().iter().map(|v| v.abs() + 0.1).collect();
                        h = HostTensor::from_f64(h.dtype, h.shape.clone(), &vals);
                    }
                    weights.insert(t.clone(), h);
                }
            }
            let inputs = random_inputs(&g, &mut rng);
            let want = run(&g, &weights, &inputs);
            let mut folded = g.clone();
            assert!(
                ConvBn.run(&mut folded, &mut Cx::default()).unwrap(),
                "{src}"
            );
            folded.verify().unwrap();
            assert!(
                !folded
                    .nodes
                    .iter()
                    .any(|n| n.op() == Some(Op::NativeBatchNormLegitNoTraining)),
                "{src}"
            );
            assert_close(
                &format!("{x} {w} {flags:?}"),
                &run(&folded, &weights, &inputs),
                &want,
            );
            cases += 1;
        }
    }
    assert_eq!(cases, 24);
}
