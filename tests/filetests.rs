//! File tests: each `tests/filetests/**/*.fxir` file holds a command, an input graph in the IR
//! text form and the command's expected output, side by side (as Cranelift's filetests and
//! LLVM's lit tests do). See `docs/filetests.md` for the format.
//!
//! The harness runs the `fxhlo` binary on each file and compares what it prints with the
//! file's expected section. `FXHLO_BLESS=1 cargo test -p fxhlo --test filetests` rewrites the
//! expected sections with what the commands print now (review the diff before committing).

use std::path::{Path, PathBuf};
use std::process::Command;

/// One parsed file test.
struct FileTest {
    /// The command's arguments (`%s` is the file's path; appended when absent).
    args: Vec<String>,
    /// Which stream is checked: `stdout` (the default) or `stderr`.
    stream: String,
    /// The file up to (not including) its expected section.
    head: String,
    /// The expected output, `# ` prefixes removed; `None` when the file has no section yet.
    expected: Option<String>,
}

const EXPECTED: &str = "# expected:";

fn parse(path: &Path, text: &str) -> Result<FileTest, String> {
    let (head, expected) = match text.find(&format!("\n{EXPECTED}\n")) {
        Some(i) => (&text[..i + 1], Some(&text[i + EXPECTED.len() + 2..])),
        None => (text, None),
    };
    let mut args = None;
    let mut stream = "stdout".to_string();
    for line in head.lines() {
        if let Some(r) = line.strip_prefix("# run:") {
            args = Some(r.split_whitespace().map(String::from).collect::<Vec<_>>());
        } else if let Some(s) = line.strip_prefix("# stream:") {
            stream = s.trim().to_string();
        }
    }
    let args = args.ok_or_else(|| format!("{}: no '# run:' line", path.display()))?;
    if !matches!(stream.as_str(), "stdout" | "stderr") {
        return Err(format!(
            "{}: stream must be stdout or stderr",
            path.display()
        ));
    }
    let expected = expected.map(|e| {
        e.lines()
            .map(|l| {
                l.strip_prefix("# ")
                    .unwrap_or(l.strip_prefix('#').unwrap_or(l))
            })
            .map(|l| format!("{l}\n"))
            .collect()
    });
    Ok(FileTest {
        args,
        stream,
        head: head.to_string(),
        expected,
    })
}

/// Runs the test's command; returns what it printed on the checked stream, with the file's
/// path written as `%s`, and `exit N` first when it failed.
fn run(path: &Path, t: &FileTest) -> String {
    let p = path.display().to_string();
    let mut args: Vec<String> = t.args.iter().map(|a| a.replace("%s", &p)).collect();
    if !t.args.iter().any(|a| a.contains("%s")) {
        args.push(p.clone());
    }
    let out = Command::new(env!("CARGO_BIN_EXE_fxhlo"))
        .args(&args)
        .output()
        .expect("fxhlo runs");
    let bytes = if t.stream == "stderr" {
        &out.stderr
    } else {
        &out.stdout
    };
    let mut s = String::from_utf8_lossy(bytes).replace(&p, "%s");
    if !s.is_empty() && !s.ends_with('\n') {
        s.push('\n');
    }
    match out.status.code() {
        Some(0) => s,
        code => format!(
            "exit {}\n{s}",
            code.map_or("signal".into(), |c| c.to_string())
        ),
    }
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("filetests folder")
        .map(|e| e.expect("entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|e| e == "fxir") {
            out.push(p);
        }
    }
}

fn commented(text: &str) -> String {
    text.lines()
        .map(|l| {
            if l.is_empty() {
                "#\n".to_string()
            } else {
                format!("# {l}\n")
            }
        })
        .collect()
}

#[test]
fn filetests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/filetests");
    let mut paths = vec![];
    files(&root, &mut paths);
    assert!(paths.len() >= 10, "{} file tests found", paths.len());
    let bless = std::env::var_os("FXHLO_BLESS").is_some_and(|v| v == "1");
    let mut failures = vec![];
    for path in &paths {
        let text = std::fs::read_to_string(path).expect("readable");
        let t = match parse(path, &text) {
            Ok(t) => t,
            Err(e) => {
                failures.push(e);
                continue;
            }
        };
        let got = run(path, &t);
        if t.expected.as_deref() == Some(got.as_str()) {
            continue;
        }
        if bless {
            let new = format!("{}{EXPECTED}\n{}", t.head, commented(&got));
            std::fs::write(path, new).expect("writable");
            continue;
        }
        failures.push(format!(
            "{}: the output differs from the expected section\n--- expected\n{}--- got\n{got}",
            path.display(),
            t.expected.as_deref().unwrap_or("(no expected section)\n"),
        ));
    }
    assert!(
        failures.is_empty(),
        "{} of {} file tests failed (FXHLO_BLESS=1 rewrites them):\n{}",
        failures.len(),
        paths.len(),
        failures.join("\n")
    );
}

#[test]
fn the_expected_section_round_trips() {
    let text = "# run: opt\ngraph {\n}\n# expected:\n# a\n#\n# b\n";
    let t = parse(Path::new("x.fxir"), text).unwrap();
    assert_eq!(t.expected.as_deref(), Some("a\n\nb\n"));
    assert_eq!(t.args, ["opt"]);
    assert_eq!(
        format!("{}{EXPECTED}\n{}", t.head, commented("a\n\nb\n")),
        text
    );
}
