//! `fxhlo compare` (fxhlo::lockstep): every value of the testdata models within tolerance
//! between the fast runtime and the reference interpreter, and, in a build with the
//! `fault-injection` feature (`cargo test -p fxhlo --features fault-injection --test compare`),
//! the node of a kernel made wrong on purpose named as the first divergence.

use std::path::{Path, PathBuf};
use std::process::Command;

fn testdata(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata")
        .join(name)
}

fn compare(model: &Path, fault: Option<&str>) -> (i32, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fxhlo"));
    c.arg("compare").arg(model).env("FXHLO_NUM_THREADS", "2");
    match fault {
        Some(n) => c.env("FXHLO_FAULT_NODE", n),
        None => c.env_remove("FXHLO_FAULT_NODE"),
    };
    let out = c.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.is_empty() || out.status.code() == Some(1),
        "{stderr}"
    );
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn every_value_of_the_testdata_models_is_within_tolerance() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata");
    let mut seen = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if !p.join("inputs.safetensors").is_file() {
            continue;
        }
        let (code, out) = compare(&p, None);
        assert_eq!(code, 0, "{}: {out}", p.display());
        assert!(
            out.contains("value by value: all "),
            "{}: {out}",
            p.display()
        );
        assert!(out.contains("values within tolerance"), "{out}");
        seen += 1;
    }
    assert!(seen >= 5, "only {seen} testdata models");
}

#[test]
fn library_walks_values_in_node_order() {
    let m = fxhlo::load_model(&testdata("mlp")).unwrap();
    let ins = fxhlo_ir::read::safetensors_io::read_safetensors(
        &testdata("mlp").join("inputs.safetensors"),
    )
    .unwrap();
    let r =
        fxhlo::lockstep::compare_nodes(&m, &ins, &fxhlo::CompileOptions::default(), Some(1), None)
            .unwrap();
    let names: Vec<&str> = r.values.iter().map(|v| v.node.as_str()).collect();
    assert_eq!(
        names,
        [
            "permute",
            "addmm",
            "gelu",
            "permute_1",
            "addmm_1",
            "gelu_1",
            "permute_2",
            "addmm_2"
        ]
    );
    assert!(r.first_bad.is_none());
    assert!(r.outputs.iter().all(|c| c.ok()));
}

/// A wrong kernel (the step writing `gelu`, a matmul epilogue; or `addmm_1`) is found at that
/// value, not before it and not only at the output.
#[cfg(feature = "fault-injection")]
#[test]
fn a_perturbed_kernel_is_named_as_the_first_divergence() {
    for node in ["gelu", "addmm_1"] {
        let (code, out) = compare(&testdata("mlp"), Some(node));
        assert_eq!(code, 1, "{out}");
        // `gelu` is a value of the program users run (addmm_1 is not: its matmul's epilogue
        // applies the GELU to each tile before anything is written)
        if node == "gelu" {
            assert!(
                out.contains("outputs of the compiled program: 0 of 1 within tolerance"),
                "{out}"
            );
        }
        assert!(
            out.contains(&format!("first outside tolerance: {node} = ")),
            "{node}: {out}"
        );
    }
}

#[cfg(feature = "fault-injection")]
#[test]
fn without_a_fault_the_fault_build_agrees() {
    let (code, out) = compare(&testdata("mlp"), None);
    assert_eq!(code, 0, "{out}");
}
