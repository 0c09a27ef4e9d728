//! The bad-input corpus: every case in `tests/bad_inputs/` runs the CLI verbs its `expect.json`
//! lists and checks the exit code and a substring of the message. A panic anywhere fails.
//! Regenerate the corpus with `python3 tools/make_bad_inputs.py`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

#[test]
fn every_bad_input_gets_a_clear_error() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/bad_inputs");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("expect.json").exists())
        .collect();
    cases.sort();
    assert!(cases.len() >= 30, "the corpus has {} cases", cases.len());
    let scratch = std::env::temp_dir().join(format!("fxhlo-bad-inputs-{}", std::process::id()));
    let mut failures = vec![];
    let mut runs = 0;
    for case in &cases {
        let name = case.file_name().unwrap().to_string_lossy().to_string();
        let dir = scratch.join(&name);
        copy_dir(case, &dir);
        let expect: serde_json::Value =
            serde_json::from_slice(&std::fs::read(case.join("expect.json")).unwrap()).unwrap();
        for run in expect["runs"].as_array().unwrap() {
            runs += 1;
            let args: Vec<&str> = run["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap())
                .collect();
            let out = Command::new(env!("CARGO_BIN_EXE_fxhlo"))
                .args(&args)
                .current_dir(&dir)
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            let what = format!("{name}: fxhlo {}", args.join(" "));
            if stderr.contains("panicked") {
                failures.push(format!("{what}: PANIC\n{stderr}"));
                continue;
            }
            let code = out.status.code().unwrap_or(-1) as i64;
            if code != run["exit"].as_i64().unwrap() {
                failures.push(format!(
                    "{what}: exit {code}, expected {}\nstderr: {stderr}",
                    run["exit"]
                ));
            }
            for (key, text) in [("stderr", &stderr), ("stdout", &stdout)] {
                if let Some(want) = run[key].as_str() {
                    if !text.contains(want) {
                        failures.push(format!("{what}: {key} lacks {want:?}\n{key}: {text}"));
                    }
                }
            }
            if code == 2 && !stderr.starts_with("error: ") {
                failures.push(format!(
                    "{what}: an error must be one 'error: ...' message\n{stderr}"
                ));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(
        failures.is_empty(),
        "{} of {runs} runs failed:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// A symlink planted at the old fixed temporary name (and at the output) never redirects
/// `compile -o`, and compiles of two models racing to one `-o` each leave one whole artifact.
#[cfg(unix)]
#[test]
fn outputs_are_written_exclusively_and_renamed() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata");
    let dir = std::env::temp_dir().join(format!("fxhlo-outputs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let compile = |model: &str, out: &Path| {
        Command::new(env!("CARGO_BIN_EXE_fxhlo"))
            .args(["compile", root.join(model).to_str().unwrap(), "-o"])
            .arg(out)
            .output()
            .unwrap()
    };
    // The artifacts each model compiles to alone (compiles are deterministic).
    let want: Vec<Vec<u8>> = ["mlp", "cnn"]
        .iter()
        .map(|m| {
            let p = dir.join(format!("{m}.fxa"));
            assert!(compile(m, &p).status.success());
            std::fs::read(&p).unwrap()
        })
        .collect();
    assert_ne!(want[0], want[1]);

    let victim = dir.join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let out = dir.join("out.fxa");
    std::os::unix::fs::symlink(&victim, dir.join(".out.fxa.fxhlo-tmp")).unwrap();
    let o = compile("mlp", &out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert!(!std::fs::symlink_metadata(&out).unwrap().is_symlink());
    assert_eq!(std::fs::read(&out).unwrap(), want[0]);

    // Racing compiles of the two models: every one succeeds and the output is one whole
    // artifact, never a mix or a missing file.
    for round in 0..10 {
        let kids: Vec<_> = (0..6)
            .map(|k| {
                Command::new(env!("CARGO_BIN_EXE_fxhlo"))
                    .args([
                        "compile",
                        root.join(["mlp", "cnn"][k % 2]).to_str().unwrap(),
                        "-o",
                    ])
                    .arg(&out)
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for k in kids {
            let o = k.wait_with_output().unwrap();
            assert!(
                o.status.success(),
                "round {round}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        let got = std::fs::read(&out).unwrap();
        assert!(
            want.contains(&got),
            "round {round}: the output is not one whole artifact"
        );
    }
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    let stray: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".fxhlo-tmp") && n != ".out.fxa.fxhlo-tmp")
        .collect();
    assert!(stray.is_empty(), "temporary files left: {stray:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
