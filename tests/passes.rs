//! Optimized graphs compute what the unoptimized ones do: for every testdata model, the -O2
//! graph and the -O0 graph give the same outputs in the reference interpreter.

use fxhlo::{compare, load_case, run_reference, Tolerance};
use fxhlo_passes::{Cx, PassManager};

mod common;

use common::testdata;

#[test]
fn o2_matches_o0_on_every_model() {
    for dir in testdata() {
        let case = load_case(&dir, None).unwrap();
        let reference = run_reference(&case.model, &case.inputs).unwrap();
        let mut opt = case.model.clone();
        let mut pm = PassManager::for_level(2);
        pm.verify_each = true;
        pm.run(&mut opt.graph, &mut Cx::default(), &mut |_, _| {})
            .unwrap();
        assert!(opt.graph.nodes.len() <= case.model.graph.nodes.len());
        let got = run_reference(&opt, &case.inputs).unwrap();
        for (i, (a, e)) in got.iter().zip(&reference).enumerate() {
            // The passes only drop identities and merge equal nodes: results are bit-identical.
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
