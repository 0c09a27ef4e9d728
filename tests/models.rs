//! Every testdata model, read from fxjson and (where saved) from `.pt2`, runs in the reference
//! interpreter within its stated tolerance of PyTorch eager; its IR text is snapshot-tested.

use fxhlo::{check_case, load_case};
mod common;

use common::testdata;

#[test]
fn models_match_eager_in_the_reference_interpreter() {
    let mut failures = vec![];
    let mut checked = 0;
    for dir in testdata() {
        for file in ["graph.json", "model.pt2"] {
            let path = dir.join(file);
            if !path.exists() {
                continue;
            }
            let case =
                load_case(&dir, Some(&path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let results =
                check_case(&case, None).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            checked += 1;
            for c in results {
                if !c.ok() {
                    failures.push(format!(
                        "{}: {} max_abs {:.3e} max_rel {:.3e} bad {}/{} {}",
                        path.display(),
                        c.name,
                        c.max_abs,
                        c.max_rel,
                        c.bad,
                        c.numel,
                        c.mismatch.unwrap_or_default()
                    ));
                }
            }
        }
    }
    assert!(checked >= 10, "only {checked} model files checked");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn ir_text_snapshots() {
    for dir in testdata() {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let m = fxhlo::load_model(&dir.join("graph.json")).unwrap();
        insta::assert_snapshot!(format!("ir_{name}"), fxhlo_ir::text::print_graph(&m.graph));
    }
}

#[test]
fn stablehlo_snapshots_are_deterministic() {
    use fxhlo_lowering::stablehlo::{emit, EmitOptions};
    for dir in testdata() {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let m = fxhlo::load_model(&dir.join("graph.json")).unwrap();
        let opts = EmitOptions::default();
        let text = emit(&m, &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
        let again = emit(&fxhlo::load_model(&dir.join("graph.json")).unwrap(), &opts).unwrap();
        assert_eq!(text, again, "{name}: emission is not deterministic");
        insta::assert_snapshot!(format!("stablehlo_{name}"), text);
    }
}
