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
