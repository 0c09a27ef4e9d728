//! Runs every model in `testdata/` through the reference interpreter and compares with the
//! eager PyTorch outputs stored beside it.

use fxhlo_ir::read::read_model;
use fxhlo_ir::read::safetensors_io::read_safetensors;
use fxhlo_runtime::{run, Tensor};
use std::path::Path;

#[test]
fn testdata_models_match_eager_outputs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata");
    let Ok(dirs) = std::fs::read_dir(&root) else {
        eprintln!("no testdata folder at {}", root.display());
        return;
    };
    let mut dirs: Vec<_> = dirs
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("graph.json").exists())
        .collect();
    dirs.sort();
    let mut failures = vec![];
    let mut checked = 0;
    for dir in dirs {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        // Reading is the ir crate's job; a reader problem is reported, not counted here.
        let loaded = read_model(&dir).and_then(|m| {
            Ok((
                m,
                read_safetensors(&dir.join("inputs.safetensors"))?,
                read_safetensors(&dir.join("expected.safetensors"))?,
            ))
        });
        let (model, inputs, expected) = match loaded {
            Ok(x) => x,
            Err(e) => {
                eprintln!("{name}: skipped, cannot be read: {e}");
                continue;
            }
        };
        let outs = match run(&model, &inputs) {
            Ok(o) => o,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        checked += 1;
        for (i, o) in outs.iter().enumerate() {
            let Some(e) = expected.get(&format!("output{i}")) else {
                failures.push(format!("{name}: expected.safetensors has no output{i}"));
                continue;
            };
            let (a, e) = (Tensor::from_host(o).unwrap(), Tensor::from_host(e).unwrap());
            if a.shape != e.shape || a.dtype != e.dtype {
                failures.push(format!(
                    "{name} output{i}: {} {:?}, expected {} {:?}",
                    a.dtype, a.shape, e.dtype, e.shape
                ));
                continue;
            }
            let (av, ev) = (a.f64s(), e.f64s());
            let tol = if e.dtype.is_float() { 1e-4 } else { 0.0 };
            let worst = av
                .iter()
                .zip(&ev)
                .enumerate()
                .filter(|(_, (x, y))| {
                    !((x.is_nan() && y.is_nan()) || (*x - *y).abs() <= tol + tol * y.abs())
                })
                .map(|(k, (x, y))| (k, *x, *y))
                .next();
            if let Some((k, x, y)) = worst {
                failures.push(format!(
                    "{name} output{i}: element {k} is {x}, expected {y}"
                ));
            }
        }
        eprintln!("{name}: {} outputs checked", outs.len());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    eprintln!("{checked} models checked");
}
