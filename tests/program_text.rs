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

/// The program accounts for every kernel of the fusion plan it was built from (the plan
/// `compile --print-fusion` prints): each kernel with outputs is named by some step's
/// `kernels`, or was folded at compile time; and every step names its kernels. A kernel
/// merged into another step or split into several is visible there, with the decision.
#[test]
fn every_fusion_kernel_is_accounted_for() {
    use std::collections::BTreeSet;
    for dir in testdata() {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let case = load_case(&dir, None).unwrap();
        let c = fxhlo::compile_with(&case.model, &CompileOptions::default(), &mut |_, _| {})
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let p = &c.artifact.header.program;
        let mut seen: BTreeSet<u32> = p.folded.iter().copied().collect();
        for (i, s) in p.steps.iter().enumerate() {
            assert!(
                !s.origin.kernels.is_empty(),
                "{name}: step {i} names no kernel"
            );
            seen.extend(&s.origin.kernels);
        }
        for (k, kern) in c.plan.kernels.iter().enumerate() {
            if !kern.outputs.is_empty() {
                assert!(seen.contains(&(k as u32)), "{name}: kernel {k} has no step");
            }
        }
        assert!(
            seen.iter().all(|&k| (k as usize) < c.plan.kernels.len()),
            "{name}"
        );
    }
}

/// The CLI: `compile --print-program -o a.fxa` writes the text and the artifact; `run p.fxp
/// --weights a.fxa` (the artifact's constants include the folded ones) writes the same bytes
/// as `run a.fxa`; the model's own weights lack the folded constants, which the error names.
#[test]
fn cli_runs_a_program_text_like_its_artifact() {
    use std::process::Command;
    let bin = env!("CARGO_BIN_EXE_fxhlo");
    let dir = common::testdata()
        .into_iter()
        .find(|d| d.ends_with("gpt2"))
        .unwrap();
    let tmp = std::env::temp_dir().join(format!("fxhlo-progtext-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let (a, p) = (tmp.join("a.fxa"), tmp.join("p.fxp"));
    let out = Command::new(bin)
        .args(["compile", "--print-program", "-o"])
        .arg(&a)
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(&p, &out.stdout).unwrap();
    let inputs = dir.join("inputs.safetensors");
    let run = |model: &std::path::Path, weights: Option<&std::path::Path>, o: &str| {
        let mut c = Command::new(bin);
        c.arg("run").arg(model);
        if let Some(w) = weights {
            c.arg("--weights").arg(w);
        }
        c.arg("--inputs").arg(&inputs).arg("--out").arg(tmp.join(o));
        c.output().unwrap()
    };
    assert!(run(&a, None, "a.safetensors").status.success());
    let r = run(&p, Some(&a), "p.safetensors");
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let read = |o: &str| std::fs::read(tmp.join(o)).unwrap();
    assert!(read("a.safetensors") == read("p.safetensors"));
    let r = run(&p, Some(&dir.join("weights.safetensors")), "w.safetensors");
    assert_eq!(r.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&r.stderr).contains("is not in the weights"));
    let _ = std::fs::remove_dir_all(&tmp);
}
