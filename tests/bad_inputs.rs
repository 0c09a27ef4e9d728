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

/// A run that takes longer than this is a hang.
const HANG_SECS: u64 = 120;

/// Makes what `expect.json`'s `setup` asks for: FIFOs and symlinks (git holds neither a FIFO
/// nor, safely, a link to /dev/zero).
fn setup(dir: &Path, setup: &serde_json::Value) {
    #[cfg(unix)]
    {
        for f in setup["fifo"].as_array().into_iter().flatten() {
            let p = dir.join(f.as_str().unwrap());
            let _ = std::fs::remove_file(&p);
            let ok = Command::new("mkfifo").arg(&p).status().unwrap().success();
            assert!(ok, "mkfifo {}", p.display());
        }
        for (name, target) in setup["symlink"].as_object().into_iter().flatten() {
            let p = dir.join(name);
            let _ = std::fs::remove_file(&p);
            std::os::unix::fs::symlink(target.as_str().unwrap(), &p).unwrap();
        }
    }
}

/// Runs fxhlo in `dir` as `run` asks (stdout to a file such as /dev/full, or closed by its
/// reader at once); exit code (negative: killed by a signal), stdout, stderr; None on a hang.
fn run_fxhlo(args: &[&str], dir: &Path, run: &serde_json::Value) -> Option<(i64, String, String)> {
    use std::io::Read;
    use std::process::Stdio;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fxhlo"));
    cmd.args(args).current_dir(dir).stderr(Stdio::piped());
    cmd.env("FXHLO_NUM_THREADS", "1");
    let close_stdout = run["close_stdout"].as_bool() == Some(true);
    if let Some(f) = run["stdout_file"].as_str() {
        cmd.stdout(std::fs::OpenOptions::new().write(true).open(f).unwrap());
    } else {
        cmd.stdout(Stdio::piped());
    }
    let mut child = cmd.spawn().unwrap();
    let mut out_pipe = child.stdout.take();
    if close_stdout {
        drop(out_pipe.take());
    }
    let mut err_pipe = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        if let Some(mut p) = out_pipe {
            let _ = p.read_to_end(&mut s);
        }
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err_pipe.read_to_end(&mut s);
        s
    });
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if start.elapsed().as_secs() > HANG_SECS {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    let stdout = String::from_utf8_lossy(&out_reader.join().unwrap()).to_string();
    let stderr = String::from_utf8_lossy(&err_reader.join().unwrap()).to_string();
    let status = status?;
    #[cfg(unix)]
    let code = {
        use std::os::unix::process::ExitStatusExt;
        status
            .code()
            .map(i64::from)
            .unwrap_or_else(|| -i64::from(status.signal().unwrap_or(0)))
    };
    #[cfg(not(unix))]
    let code = status.code().map(i64::from).unwrap_or(-1);
    Some((code, stdout, stderr))
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
    assert!(cases.len() >= 80, "the corpus has {} cases", cases.len());
    let scratch = std::env::temp_dir().join(format!("fxhlo-bad-inputs-{}", std::process::id()));
    let mut failures = vec![];
    let mut runs = 0;
    let mut table = String::new();
    for case in &cases {
        let name = case.file_name().unwrap().to_string_lossy().to_string();
        let dir = scratch.join(&name);
        copy_dir(case, &dir);
        let expect: serde_json::Value =
            serde_json::from_slice(&std::fs::read(case.join("expect.json")).unwrap()).unwrap();
        setup(&dir, &expect["setup"]);
        for run in expect["runs"].as_array().unwrap() {
            runs += 1;
            let args: Vec<&str> = run["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap())
                .collect();
            let what = format!("{name}: fxhlo {}", args.join(" "));
            let Some((code, stdout, stderr)) = run_fxhlo(&args, &dir, run) else {
                failures.push(format!("{what}: HANG (killed after {HANG_SECS} s)"));
                continue;
            };
            let first = stderr.lines().next().unwrap_or("").to_string();
            let first: String = first.chars().take(150).collect();
            table.push_str(&format!("{code:>4}  {what}  | {first}\n"));
            if stderr.contains("panicked") || code == 101 || code < 0 {
                failures.push(format!("{what}: PANIC or signal (exit {code})\n{stderr}"));
                continue;
            }
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
            if let Some(max) = run["max_stderr"].as_u64() {
                if stderr.len() as u64 > max {
                    failures.push(format!("{what}: stderr is {} bytes", stderr.len()));
                }
            }
            if code == 2 && (!stderr.starts_with("error: ") || stderr.trim_end().contains('\n')) {
                failures.push(format!(
                    "{what}: an error must be one 'error: ...' line\n{stderr}"
                ));
            }
        }
    }
    // `cargo test --test bad_inputs -- --nocapture` shows each run's exit code and first line.
    eprintln!("{} cases, {runs} runs:\n{table}", cases.len());
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
