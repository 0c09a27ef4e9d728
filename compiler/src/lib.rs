//! The fxhlo driver: loading models, running them and checking them against stored outputs.
//! The `fxhlo` binary (`main.rs`) is a thin clap layer over these functions.
#![warn(missing_docs)]

pub mod opsdoc;

use fxhlo_ir::read::safetensors_io::read_safetensors;
use fxhlo_ir::{HostTensor, Model, Weights};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Errors of the driver: each stage's error, or a bad command-line input.
#[derive(Debug, Error)]
pub enum DriverError {
    /// Reading or verifying the model failed.
    #[error(transparent)]
    Ir(#[from] fxhlo_ir::IrError),
    /// Running the model failed.
    #[error(transparent)]
    Runtime(#[from] fxhlo_runtime::RuntimeError),
    /// Lowering failed.
    #[error(transparent)]
    Lower(#[from] fxhlo_lowering::stablehlo::LowerError),
    /// Anything else, described.
    #[error("{0}")]
    Other(String),
}

/// Result type of the driver.
pub type Result<T> = std::result::Result<T, DriverError>;

/// Reads a model: a fxjson file, a testdata folder or a `.pt2` archive (chosen by content).
pub fn load_model(path: &Path) -> Result<Model> {
    let _span = tracing::info_span!("read", path = %path.display()).entered();
    Ok(fxhlo_ir::read::read_model(path)?)
}

/// Runs `model` on `inputs` in the reference interpreter.
pub fn run_reference(model: &Model, inputs: &Weights) -> Result<Vec<HostTensor>> {
    let _span = tracing::info_span!("interpret").entered();
    Ok(fxhlo_runtime::run(model, inputs)?)
}

/// Names outputs `output0`, `output1`, ...
pub fn name_outputs(outputs: Vec<HostTensor>) -> Weights {
    outputs
        .into_iter()
        .enumerate()
        .map(|(i, t)| (format!("output{i}"), t))
        .collect()
}

/// Tolerance for comparing outputs: `|a - e| <= atol + rtol * |e|`, as `torch.allclose`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    /// Relative tolerance.
    pub rtol: f64,
    /// Absolute tolerance.
    pub atol: f64,
}

impl Tolerance {
    /// The project's default for a dtype (`docs/numerics.md`); integers and bools are exact.
    pub fn for_dtype(d: fxhlo_ir::DType) -> Tolerance {
        use fxhlo_ir::DType::*;
        match d {
            F32 => Tolerance {
                rtol: 1e-4,
                atol: 1e-5,
            },
            F64 => Tolerance {
                rtol: 1e-7,
                atol: 1e-9,
            },
            F16 => Tolerance {
                rtol: 1e-2,
                atol: 1e-3,
            },
            BF16 => Tolerance {
                rtol: 1.6e-2,
                atol: 1e-2,
            },
            _ => Tolerance {
                rtol: 0.0,
                atol: 0.0,
            },
        }
    }
}

/// How one output compares with its expected value.
#[derive(Clone, Debug)]
pub struct Comparison {
    /// Output name (`output0`).
    pub name: String,
    /// Largest absolute error.
    pub max_abs: f64,
    /// Largest relative error `|a - e| / |e|` over elements with `e != 0`.
    pub max_rel: f64,
    /// Elements outside tolerance (NaN/Inf must match exactly).
    pub bad: usize,
    /// Number of elements.
    pub numel: usize,
    /// A shape or dtype mismatch, which fails the output outright.
    pub mismatch: Option<String>,
}

impl Comparison {
    /// True if the output is within tolerance.
    pub fn ok(&self) -> bool {
        self.mismatch.is_none() && self.bad == 0
    }
}

/// Compares `actual` with `expected` element by element.
pub fn compare(
    name: &str,
    actual: &HostTensor,
    expected: &HostTensor,
    tol: Tolerance,
) -> Comparison {
    let mut c = Comparison {
        name: name.to_string(),
        max_abs: 0.0,
        max_rel: 0.0,
        bad: 0,
        numel: expected.numel(),
        mismatch: None,
    };
    if actual.shape != expected.shape || actual.dtype != expected.dtype {
        c.mismatch = Some(format!(
            "got {}{:?}, expected {}{:?}",
            actual.dtype, actual.shape, expected.dtype, expected.shape
        ));
        return c;
    }
    for (a, e) in actual.to_f64_vec().into_iter().zip(expected.to_f64_vec()) {
        if !a.is_finite() || !e.is_finite() {
            let same = (a.is_nan() && e.is_nan()) || a == e;
            if !same {
                c.bad += 1;
                c.max_abs = f64::INFINITY;
            }
            continue;
        }
        let abs = (a - e).abs();
        c.max_abs = c.max_abs.max(abs);
        if e != 0.0 {
            c.max_rel = c.max_rel.max(abs / e.abs());
        }
        if abs > tol.atol + tol.rtol * e.abs() {
            c.bad += 1;
        }
    }
    c
}

/// A testdata folder: `graph.json` (or `model.pt2`), `inputs.safetensors`,
/// `expected.safetensors` and optionally `meta.json` with a tolerance.
pub struct TestCase {
    /// The model.
    pub model: Model,
    /// Inputs keyed by user-input name.
    pub inputs: Weights,
    /// Expected outputs keyed `output0`, ...
    pub expected: Weights,
    /// Tolerance from `meta.json`, if it states one.
    pub tolerance: Option<Tolerance>,
}

/// Loads a testdata folder; `model_file` picks `graph.json` (default) or `model.pt2`.
pub fn load_case(dir: &Path, model_file: Option<&Path>) -> Result<TestCase> {
    let model_path: PathBuf = match model_file {
        Some(p) => p.to_path_buf(),
        None => dir.join("graph.json"),
    };
    let model = load_model(&model_path)?;
    let inputs = read_safetensors(&dir.join("inputs.safetensors"))?;
    let expected = read_safetensors(&dir.join("expected.safetensors"))?;
    let tolerance = match std::fs::read(dir.join("meta.json")) {
        Ok(bytes) => {
            let v: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
                DriverError::Other(format!(
                    "{}: invalid JSON: {e}",
                    dir.join("meta.json").display()
                ))
            })?;
            let t = &v["tolerance"];
            match (t["rtol"].as_f64(), t["atol"].as_f64()) {
                (Some(rtol), Some(atol)) => Some(Tolerance { rtol, atol }),
                _ => None,
            }
        }
        Err(_) => None,
    };
    Ok(TestCase {
        model,
        inputs,
        expected,
        tolerance,
    })
}

/// Runs a test case in the reference interpreter and compares every output.
pub fn check_case(case: &TestCase, tol: Option<Tolerance>) -> Result<Vec<Comparison>> {
    let outputs = run_reference(&case.model, &case.inputs)?;
    if outputs.len() != case.expected.len() {
        return Err(DriverError::Other(format!(
            "the model has {} outputs but expected.safetensors holds {}",
            outputs.len(),
            case.expected.len()
        )));
    }
    let mut out = vec![];
    for (i, a) in outputs.iter().enumerate() {
        let name = format!("output{i}");
        let e = case
            .expected
            .get(&name)
            .ok_or_else(|| DriverError::Other(format!("expected.safetensors has no '{name}'")))?;
        let t = tol
            .or(case.tolerance)
            .unwrap_or(Tolerance::for_dtype(e.dtype));
        let t = if e.dtype.is_float() {
            t
        } else {
            Tolerance::for_dtype(e.dtype)
        };
        out.push(compare(&name, a, e, t));
    }
    Ok(out)
}
