//! Optimized graphs compute what the unoptimized ones do: for every testdata model, the -O2
//! graph gives the -O0 graph's outputs in the reference interpreter (bit for bit without
//! `conv-bn`, at the model's tolerance of eager with it).

use fxhlo::{compare, load_case, run_reference, Tolerance};
use fxhlo_passes::{Cx, PassManager};

mod common;

use common::testdata;

/// `model` after the passes of `pm`, verified after each.
fn optimized(model: &fxhlo_ir::Model, mut pm: PassManager) -> fxhlo_ir::Model {
    let mut opt = model.clone();
    pm.verify_each = true;
    pm.run(&mut opt.graph, &mut Cx::default(), &mut |_, _| {})
        .unwrap();
    opt
}

/// The -O2 passes other than `conv-bn` only drop identities and merge equal nodes: on every
/// testdata model the graph does not grow and gives the -O0 graph's outputs bit for bit.
#[test]
fn o2_without_conv_bn_matches_o0_bitwise() {
    let names: Vec<&str> = (PassManager::level_names(2).iter().copied())
        .filter(|&n| n != "conv-bn")
        .collect();
    for dir in testdata() {
        let case = load_case(&dir, None).unwrap();
        let reference = run_reference(&case.model, &case.inputs).unwrap();
        let opt = optimized(&case.model, PassManager::from_names(&names).unwrap());
        assert!(opt.graph.nodes.len() <= case.model.graph.nodes.len());
        let got = run_reference(&opt, &case.inputs).unwrap();
        for (i, (a, e)) in got.iter().zip(&reference).enumerate() {
            let c = compare(
                &format!("output{i}"),
                a,
                e,
                Tolerance {
                    rtol: 0.0,
                    atol: 0.0,
                },
            );
            assert!(
                c.ok(),
                "{}: output{i} differs after -O2: {c:?}",
                dir.display()
            );
        }
    }
}

/// All of -O2, `conv-bn` included: it moves each inference batch norm's scale into the
/// weights of the convolution before it (a rounding difference inside the sums), so outputs
/// are checked against eager at each model's stated tolerance; and no batch norm after such a
/// convolution is left (resnet18 has 20, the cnn model 2).
#[test]
fn o2_matches_eager_and_folds_batch_norms() {
    let mut folded = 0;
    for dir in testdata() {
        let case = load_case(&dir, None).unwrap();
        let opt = optimized(&case.model, PassManager::for_level(2));
        let bn = |m: &fxhlo_ir::Model| {
            (m.graph.nodes.iter())
                .filter(|n| n.op() == Some(fxhlo_ir::Op::NativeBatchNormLegitNoTraining))
                .count()
        };
        assert_eq!(bn(&opt), 0, "{}: a batch norm is left", dir.display());
        folded += bn(&case.model);
        let tol = case
            .tolerance
            .expect("every testdata model states a tolerance");
        let got = run_reference(&opt, &case.inputs).unwrap();
        for (i, a) in got.iter().enumerate() {
            let e = &case.expected[&format!("output{i}")];
            let c = compare(&format!("output{i}"), a, e, tol);
            assert!(c.ok(), "{}: output{i} after -O2: {c:?}", dir.display());
        }
    }
    assert!(
        folded >= 22,
        "only {folded} batch norms in the testdata models"
    );
}

/// The composite patterns (softmax, layer norm, GELU, SiLU, attention) of every testdata
/// model, unoptimized and after -O2, as `fxhlo opt --print-composites` prints them.
#[test]
fn composites_of_every_model() {
    for dir in testdata() {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let case = load_case(&dir, None).unwrap();
        let g0 = &case.model.graph;
        let mut text = format!(
            "-O0:\n{}",
            fxhlo_passes::composite::print(g0, &fxhlo_passes::composite::find(g0))
        );
        let mut opt = case.model.graph.clone();
        let mut cx = Cx::default();
        PassManager::for_level(2)
            .run(&mut opt, &mut cx, &mut |_, _| {})
            .unwrap();
        assert_eq!(cx.composites, fxhlo_passes::composite::find(&opt));
        text.push_str("-O2:\n");
        text.push_str(&fxhlo_passes::composite::print(&opt, &cx.composites));
        insta::assert_snapshot!(format!("composites_{name}"), text);
    }
}
