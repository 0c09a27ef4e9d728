//! The compiled program's text form (`fxhlo_runtime::fast::text`, `fxhlo compile
//! --print-program`): on every testdata model, print -> parse gives the same program, prints
//! the same text, and runs to the same output bits; gpt2's and resnet18's texts are snapshots.

use fxhlo::{compile, load_case, CompileOptions};
use fxhlo_runtime::fast::{text, Executor};
mod common;

use common::testdata;

#[test]
fn program_text_round_trips_and_runs_the_same() {
    for dir in testdata() {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let case = load_case(&dir, None).unwrap();
        let a = compile(&case.model, &CompileOptions::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let printed = text::print(&a.header.program);
        let parsed = text::parse(&printed).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(parsed == a.header.program, "{name}: parse(print(p)) != p");
        assert_eq!(
            text::print(&parsed),
            printed,
            "{name}: print(parse(t)) != t"
        );
        let mut b = a.clone();
        b.header.program = parsed;
        let want = Executor::new(a, &Default::default())
            .unwrap()
            .run(&case.inputs)
            .unwrap();
        let got = Executor::new(b, &Default::default())
            .unwrap()
            .run(&case.inputs)
            .unwrap();
        assert_eq!(want.len(), got.len(), "{name}");
        for (k, (w, g)) in want.iter().zip(&got).enumerate() {
            assert!(w.bytes == g.bytes, "{name}: output {k} differs");
        }
        if name == "gpt2" || name == "resnet18" {
            insta::assert_snapshot!(format!("program_{name}"), printed);
        }
    }
}
