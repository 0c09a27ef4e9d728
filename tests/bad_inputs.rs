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
