//! `fxhlo._native`: the Rust compiler and runtime, called in-process from Python.
//!
//! The torch backend (`fxhlo/backend.py`) hands a graph over as fxjson text (plus, when the
//! graph names constants, their bytes as a safetensors file), gets back a [`Compiled`] program
//! and runs it on the data pointers of contiguous CPU tensors: inputs are read and outputs
//! written in place, with the GIL released while the program runs.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::path::PathBuf;

use fxhlo_runtime::fast::{Artifact, ExecOptions, Executor, Kernel, TensorSpec};

create_exception!(
    fxhlo,
    FxhloError,
    PyException,
    "Base class of every error fxhlo raises."
);
create_exception!(
    fxhlo,
    CompileError,
    FxhloError,
    "A graph could not be read, verified or compiled."
);
create_exception!(
    fxhlo,
    ExecutionError,
    FxhloError,
    "A compiled program could not be loaded or failed while running."
);

fn to_py(e: impl std::fmt::Display) -> PyErr {
    FxhloError::new_err(e.to_string())
}

fn compile_err(e: impl std::fmt::Display) -> PyErr {
    CompileError::new_err(e.to_string())
}

fn exec_err(e: impl std::fmt::Display) -> PyErr {
    ExecutionError::new_err(e.to_string())
}

/// The compiler's version and the artifact format it writes, as `0.1.0+fxa9`: the torch
/// backend's disk cache keys its entries on it, so a new format never reads an old entry.
#[pyfunction]
fn version() -> String {
    format!(
        "{}+fxa{}",
        env!("CARGO_PKG_VERSION"),
        fxhlo_runtime::fast::artifact::FORMAT_VERSION
    )
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

/// A compiled program, ready to run.
#[pyclass(module = "fxhlo", frozen)]
struct Compiled {
    exec: Executor,
    /// Byte sizes of the inputs and outputs, in order (from the specs).
    input_bytes: Vec<usize>,
    output_bytes: Vec<usize>,
    /// Wall time of the compilation in seconds (0 for a loaded artifact).
    compile_s: f64,
}

fn spec_tuple(s: &TensorSpec) -> (String, &'static str, Vec<usize>) {
    (s.name.clone(), s.dtype.name(), s.shape.clone())
}

impl Compiled {
    fn new(artifact: Artifact, threads: Option<usize>, compile_s: f64) -> PyResult<Compiled> {
        let input_bytes = artifact.inputs().iter().map(|s| s.bytes()).collect();
        let output_bytes = artifact.outputs().iter().map(|s| s.bytes()).collect();
        let exec = Executor::new(
            artifact,
            &ExecOptions {
                threads,
                ..Default::default()
            },
        )
        .map_err(exec_err)?;
        Ok(Compiled {
            exec,
            input_bytes,
            output_bytes,
            compile_s,
        })
    }
}

/// Builds a slice of `len` bytes at address `ptr` (a dangling, aligned pointer when empty).
///
/// # Safety
/// `ptr` must point to `len` readable (and, for `slice_mut`, writable) bytes that stay alive
/// and are not accessed by anyone else while the slice is used.
unsafe fn slice<'a>(ptr: usize, len: usize) -> &'a [u8] {
    if len == 0 {
        &[]
    } else {
        std::slice::from_raw_parts(ptr as *const u8, len)
    }
}

/// See [`slice`].
unsafe fn slice_mut<'a>(ptr: usize, len: usize) -> &'a mut [u8] {
    if len == 0 {
        &mut []
    } else {
        std::slice::from_raw_parts_mut(ptr as *mut u8, len)
    }
}

#[pymethods]
impl Compiled {
    /// The user inputs in call order: `[(name, dtype, shape), ...]`, dtype as in fxjson (`f32`).
    fn input_specs(&self) -> Vec<(String, &'static str, Vec<usize>)> {
        self.exec
            .artifact()
            .inputs()
            .into_iter()
            .map(spec_tuple)
            .collect()
    }

    /// The outputs in order: `[(name, dtype, shape), ...]`.
    fn output_specs(&self) -> Vec<(String, &'static str, Vec<usize>)> {
        self.exec
            .artifact()
            .outputs()
            .into_iter()
            .map(spec_tuple)
            .collect()
    }

    /// Runs the program on raw data pointers: `inputs` and `outputs` in spec order, each the
    /// address of a contiguous, row-major buffer of exactly the spec's size (the caller keeps
    /// them alive and checks dtype, shape and contiguity). Outputs are written in place. The GIL
    /// is released while the program runs.
    fn run_ptrs(&self, py: Python<'_>, inputs: Vec<usize>, outputs: Vec<usize>) -> PyResult<()> {
        if inputs.len() != self.input_bytes.len() || outputs.len() != self.output_bytes.len() {
            return Err(exec_err(format!(
                "{} inputs and {} outputs passed, the program takes {} and returns {}",
                inputs.len(),
                outputs.len(),
                self.input_bytes.len(),
                self.output_bytes.len()
            )));
        }
        for (what, ptrs, sizes) in [
            ("input", &inputs, &self.input_bytes),
            ("output", &outputs, &self.output_bytes),
        ] {
            for (i, (&p, &n)) in ptrs.iter().zip(sizes.iter()).enumerate() {
                if p == 0 && n != 0 {
                    return Err(exec_err(format!("{what} {i}: null data pointer")));
                }
            }
        }
        // Outputs must not overlap each other (they are written through &mut slices).
        let mut spans: Vec<(usize, usize)> = outputs
            .iter()
            .zip(&self.output_bytes)
            .filter(|(_, &n)| n > 0)
            .map(|(&p, &n)| (p, p.saturating_add(n)))
            .collect();
        spans.sort_unstable();
        if spans.windows(2).any(|w| w[1].0 < w[0].1) {
            return Err(exec_err("output buffers overlap"));
        }
        let exec = &self.exec;
        let (ib, ob) = (&self.input_bytes, &self.output_bytes);
        py.detach(move || {
            // SAFETY: the Python wrapper passes data pointers of live, contiguous CPU tensors
            // of exactly these sizes (from the same specs) and keeps them alive for the call;
            // output buffers were checked not to overlap.
            let ins: Vec<&[u8]> = inputs
                .iter()
                .zip(ib)
                .map(|(&p, &n)| unsafe { slice(p, n) })
                .collect();
            let mut outs: Vec<&mut [u8]> = outputs
                .iter()
                .zip(ob)
                .map(|(&p, &n)| unsafe { slice_mut(p, n) })
                .collect();
            exec.run_raw(&ins, &mut outs)
        })
        .map_err(|e| match e {
            // The runtime's buffers are allocated fallibly: near the memory limit a call raises
            // MemoryError (which the backend can catch) instead of aborting the process.
            fxhlo_runtime::RuntimeError::OutOfMemory(m) => {
                pyo3::exceptions::PyMemoryError::new_err(m)
            }
            e => exec_err(e),
        })
    }

    /// The artifact's bytes (what the compile cache stores; load with `load_artifact`).
    fn to_bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let b = self.exec.artifact().to_bytes().map_err(exec_err)?;
        Ok(PyBytes::new(py, &b))
    }

    /// The executor's statistics (steps, kernels, memory plan), as text.
    fn stats(&self) -> String {
        self.exec.stats()
    }

    /// The program's step count and the steps it runs on the reference interpreter (no fast
    /// kernel for them): `(steps, [(step name, node count, reason)])`.
    fn fallback_steps(&self) -> (usize, Vec<(String, usize, String)>) {
        let steps = &self.exec.artifact().header.program.steps;
        let fallbacks = steps
            .iter()
            .filter_map(|s| match &s.kernel {
                Kernel::Fallback { reason, .. } => {
                    Some((s.name().to_string(), s.nodes.len(), reason.clone()))
                }
                _ => None,
            })
            .collect();
        (steps.len(), fallbacks)
    }

    /// The optimized graph in the IR text form.
    fn graph_text(&self) -> String {
        self.exec.artifact().header.graph.clone()
    }

    /// Worker threads of the executor.
    #[getter]
    fn threads(&self) -> usize {
        self.exec.threads()
    }

    /// Wall time of the compilation in seconds (0.0 when loaded from bytes).
    #[getter]
    fn compile_seconds(&self) -> f64 {
        self.compile_s
    }

    fn __repr__(&self) -> String {
        let f = |v: Vec<&TensorSpec>| {
            v.iter()
                .map(|s| s.type_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "<fxhlo Compiled ({}) -> ({})>",
            f(self.exec.artifact().inputs()),
            f(self.exec.artifact().outputs())
        )
    }
}

/// Compiles an fxjson graph (text) with the weights it names (safetensors bytes, or None when it
/// names none) at `opt_level`; `threads` workers run it (None: `FXHLO_NUM_THREADS` or every
/// core). The GIL is released while compiling.
#[pyfunction]
#[pyo3(signature = (graph_json, weights_safetensors=None, opt_level=2, threads=None))]
fn compile(
    py: Python<'_>,
    graph_json: &str,
    weights_safetensors: Option<&[u8]>,
    opt_level: u8,
    threads: Option<usize>,
) -> PyResult<Compiled> {
    compile_with(
        py,
        graph_json,
        opt_level,
        threads,
        || match weights_safetensors {
            Some(b) => fxhlo_ir::read::safetensors_io::parse_safetensors(b, "<weights>")
                .map_err(|e| e.to_string()),
            None => Ok(Default::default()),
        },
    )
}

/// Compiles fxjson text with the weights `weights()` makes, the GIL released (both `compile`
/// and `compile_with_weights`); the compile time counts making the weights.
fn compile_with(
    py: Python<'_>,
    graph_json: &str,
    opt_level: u8,
    threads: Option<usize>,
    weights: impl FnOnce() -> Result<fxhlo_ir::Weights, String> + Send,
) -> PyResult<Compiled> {
    if opt_level > 2 {
        return Err(compile_err(format!(
            "opt_level must be 0, 1 or 2, got {opt_level}"
        )));
    }
    let json = graph_json.as_bytes();
    let (artifact, secs) = py
        .detach(|| -> Result<_, String> {
            let t0 = std::time::Instant::now();
            let model = fxhlo::model_from_fxjson(json, weights()?).map_err(|e| e.to_string())?;
            let opts = fxhlo::CompileOptions {
                opt_level,
                ..Default::default()
            };
            // The model moves in: its weights become the artifact's constants without a copy.
            let a = fxhlo::compile_owned(model, &opts, &mut |_, _| {})
                .map_err(|e| e.to_string())?
                .artifact;
            Ok((a, t0.elapsed().as_secs_f64()))
        })
        .map_err(compile_err)?;
    Compiled::new(artifact, threads, secs)
}

/// One weight handed over by address: `(name, dtype name, shape, data pointer, byte count)`.
type WeightRef = (String, String, Vec<usize>, usize, usize);

/// Compiles an fxjson graph whose weights are handed over by address instead of as
/// safetensors bytes (`compile`): each weight is `(name, dtype, shape, data_ptr, nbytes)` of a
/// contiguous CPU tensor that the caller keeps alive and unchanged during the call. Its bytes
/// are copied once, into the compiler's constant; serializing them first (as `compile` takes
/// them) cost a second copy and, for BERT-base's 417 MiB, 0.7-1.0 s.
#[pyfunction]
#[pyo3(signature = (graph_json, weights, opt_level=2, threads=None))]
fn compile_with_weights(
    py: Python<'_>,
    graph_json: &str,
    weights: Vec<WeightRef>,
    opt_level: u8,
    threads: Option<usize>,
) -> PyResult<Compiled> {
    compile_with(py, graph_json, opt_level, threads, || {
        let mut w = fxhlo_ir::Weights::new();
        for (name, dtype, shape, ptr, nbytes) in weights {
            let dt = fxhlo_ir::DType::parse(&dtype)
                .ok_or_else(|| format!("weight '{name}': unknown dtype '{dtype}'"))?;
            let numel = shape
                .iter()
                .try_fold(1usize, |a, &d| a.checked_mul(d))
                .ok_or_else(|| format!("weight '{name}': shape {shape:?} overflows"))?;
            if numel.checked_mul(dt.size_bytes()) != Some(nbytes) || (ptr == 0 && nbytes > 0) {
                return Err(format!(
                    "weight '{name}': {nbytes} bytes at {ptr:#x} for {dtype}{shape:?}"
                ));
            }
            let bytes = if nbytes == 0 {
                Vec::new()
            } else {
                // SAFETY: the caller hands over a live, contiguous tensor of `nbytes` bytes at
                // `ptr` and keeps it alive for the call (fxhlo.runner.compile_native)
                unsafe { std::slice::from_raw_parts(ptr as *const u8, nbytes) }.to_vec()
            };
            w.insert(
                name,
                fxhlo_ir::HostTensor {
                    dtype: dt,
                    shape,
                    bytes,
                },
            );
        }
        Ok(w)
    })
}

/// Loads an artifact written by `Compiled.to_bytes()`.
#[pyfunction]
#[pyo3(signature = (data, threads=None))]
fn load_artifact(py: Python<'_>, data: &[u8], threads: Option<usize>) -> PyResult<Compiled> {
    let a = py.detach(|| Artifact::from_bytes(data)).map_err(exec_err)?;
    Compiled::new(a, threads, 0.0)
}

/// The native module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("FxhloError", py.get_type::<FxhloError>())?;
    m.add("CompileError", py.get_type::<CompileError>())?;
    m.add("ExecutionError", py.get_type::<ExecutionError>())?;
    m.add_class::<Compiled>()?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add_function(wrap_pyfunction!(inspect, m)?)?;
    m.add_function(wrap_pyfunction!(supported_ops, m)?)?;
    m.add_function(wrap_pyfunction!(run_reference, m)?)?;
    m.add_function(wrap_pyfunction!(compile, m)?)?;
    m.add_function(wrap_pyfunction!(compile_with_weights, m)?)?;
    m.add_function(wrap_pyfunction!(load_artifact, m)?)?;
    Ok(())
}
