//! `fxhlo._native`: the Rust compiler, called in-process from Python.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::path::PathBuf;

fn to_py(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// The compiler's version.
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// Reads a model (fxjson file, testdata folder or .pt2) and returns its IR text.
#[pyfunction]
fn inspect(path: PathBuf) -> PyResult<String> {
    let m = fxhlo_ir::read::read_model(&path).map_err(to_py)?;
    Ok(fxhlo_ir::text::print_graph(&m.graph))
}

/// ATen names of every op in the op table.
#[pyfunction]
fn supported_ops() -> Vec<&'static str> {
    fxhlo_ir::OPS.iter().map(|i| i.aten).collect()
}

/// Runs a model in the reference interpreter on inputs from a safetensors file and writes the
/// outputs (`output0`, ...) to another.
#[pyfunction]
fn run_reference(model: PathBuf, inputs: PathBuf, out: PathBuf) -> PyResult<()> {
    use fxhlo_ir::read::safetensors_io::{read_safetensors, write_safetensors};
    let m = fxhlo_ir::read::read_model(&model).map_err(to_py)?;
    let ins = read_safetensors(&inputs).map_err(to_py)?;
    let outs = fxhlo_runtime::run(&m, &ins).map_err(to_py)?;
    let named = outs
        .into_iter()
        .enumerate()
        .map(|(i, t)| (format!("output{i}"), t))
        .collect();
    write_safetensors(&out, &named).map_err(to_py)
}

/// The native module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add_function(wrap_pyfunction!(inspect, m)?)?;
    m.add_function(wrap_pyfunction!(supported_ops, m)?)?;
    m.add_function(wrap_pyfunction!(run_reference, m)?)?;
    Ok(())
}
