//! The fxhlo driver: loading models, running them and checking them against stored outputs.
//! The `fxhlo` binary (`main.rs`) is a thin clap layer over these functions.
#![warn(missing_docs)]

pub mod lockstep;
pub mod opsdoc;
pub mod picture;

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
    /// Writing to standard output failed (a closed pipe, a full disk).
    #[error("writing standard output: {0}")]
    Stdout(std::io::Error),
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

/// Builds a model from fxjson bytes and the weights it names (e.g. a graph handed over
/// in-process by the torch backend).
pub fn model_from_fxjson(bytes: &[u8], weights: Weights) -> Result<Model> {
    let (graph, _) = fxhlo_ir::read::fxjson::parse_fxjson(bytes, "<fxjson>")?;
    let model = Model { graph, weights };
    model.verify_weights()?;
    Ok(model)
}

/// How to compile.
#[derive(Clone, Debug)]
pub struct CompileOptions {
    /// Optimization level (0, 1 or 2).
    pub opt_level: u8,
    /// Run these passes instead of the level's pipeline.
    pub passes: Option<Vec<String>>,
    /// Verify the graph after every pass.
    pub verify_each: bool,
    /// Dump the IR after these passes (`*`: all) through the dump callback.
    pub print_after: Vec<String>,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            opt_level: 2,
            passes: None,
            verify_each: false,
            print_after: vec![],
        }
    }
}

/// The pass manager `opts` asks for.
pub fn pass_manager(opts: &CompileOptions) -> Result<fxhlo_passes::PassManager> {
    let mut pm = match &opts.passes {
        Some(names) => {
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            fxhlo_passes::PassManager::from_names(&names).map_err(DriverError::Other)?
        }
        None => fxhlo_passes::PassManager::for_level(opts.opt_level),
    };
    pm.verify_each |= opts.verify_each;
    pm.print_after = opts.print_after.clone();
    Ok(pm)
}

/// Everything compilation produced, for the CLI's reports.
pub struct Compiled {
    /// The artifact.
    pub artifact: fxhlo_runtime::fast::Artifact,
    /// The optimized graph.
    pub graph: fxhlo_ir::Graph,
    /// Pass timings and e-graph reports.
    pub cx: fxhlo_passes::Cx,
    /// The fusion plan the program was built from.
    pub plan: fxhlo_passes::fusion::FusionPlan,
    /// How the kernels were compiled.
    pub report: fxhlo_lowering::kernels::BuildReport,
    /// Wall time of the whole compilation.
    pub time: std::time::Duration,
    /// Wall time of each phase outside the passes (`cx.timings`), in order: `dce`, `passes` (their sum), `stablehlo`, `graph text`, `shape constants`, `fusion
    /// plan`, `build program`, `constants`, `fold constants`, `validate`.
    pub phases: Vec<(&'static str, std::time::Duration)>,
}

/// Compiles `model` into an artifact for the fast runtime.
pub fn compile(model: &Model, opts: &CompileOptions) -> Result<fxhlo_runtime::fast::Artifact> {
    Ok(compile_with(model, opts, &mut |_, _| {})?.artifact)
}

/// [`compile`], returning every intermediate result; `dump` receives the IR after the passes
/// named in `opts.print_after`.
pub fn compile_with(
    model: &Model,
    opts: &CompileOptions,
    dump: &mut dyn FnMut(&str, &fxhlo_ir::Graph),
) -> Result<Compiled> {
    compile_impl(model.graph.clone(), opts, dump, &mut |name| {
        model.weights.get(name).cloned()
    })
}

/// [`compile_with`] on a model it owns: the weights move into the artifact instead of being
/// copied (for a large model, most of the compile time otherwise).
pub fn compile_owned(
    mut model: Model,
    opts: &CompileOptions,
    dump: &mut dyn FnMut(&str, &fxhlo_ir::Graph),
) -> Result<Compiled> {
    let graph = std::mem::take(&mut model.graph);
    compile_impl(graph, opts, dump, &mut |name| model.weights.remove(name))
}

/// The compiler, on a graph it owns; `weight(name)` gives the tensor of a constant the program
/// reads (asked once per name).
fn compile_impl(
    graph: fxhlo_ir::Graph,
    opts: &CompileOptions,
    dump: &mut dyn FnMut(&str, &fxhlo_ir::Graph),
    weight: &mut dyn FnMut(&str) -> Option<HostTensor>,
) -> Result<Compiled> {
    let t0 = std::time::Instant::now();
    let _span = tracing::info_span!("compile").entered();
    let mut phases: Vec<(&'static str, std::time::Duration)> = vec![];
    let mut t = std::time::Instant::now();
    let mut phase = |name: &'static str| {
        phases.push((name, t.elapsed()));
        t = std::time::Instant::now();
    };
    // The weights are not part of the model: they move (or are copied once) into the artifact
    // (a model's weights can be most of its bytes, and the emitter reads them only to inline
    // them).
    let mut m = Model {
        graph,
        weights: Default::default(),
    };
    remove_dead_nodes(&mut m.graph)?;
    phase("dce");
    if let Some((op, _)) = m.graph.unsupported_ops().into_iter().next() {
        return Err(DriverError::Other(format!(
            "op {op} is not supported by fxhlo (`fxhlo inspect` lists every unsupported op)"
        )));
    }
    let pm = pass_manager(opts)?;
    let mut cx = fxhlo_passes::Cx::default();
    pm.run(&mut m.graph, &mut cx, dump)?;
    phase("passes");
    let stablehlo = fxhlo_lowering::stablehlo::emit(
        &m,
        &fxhlo_lowering::stablehlo::EmitOptions {
            inline_constants: false,
            generic: false,
        },
    )
    .map_err(|e| e.to_string());
    phase("stablehlo");
    let graph_text = fxhlo_ir::text::print_graph(&m.graph);
    phase("graph text");
    // Values computed from the shapes alone (positions, masks) are computed now, whatever
    // their ops; the program reads them as constants.
    let mut shape_consts = fxhlo_lowering::constfold::fold_shape_constants(&mut m.graph)
        .map_err(DriverError::Other)?;
    phase("shape constants");
    let plan = fxhlo_passes::fusion::plan(&m.graph);
    phase("fusion plan");
    let (mut program, mut report) =
        fxhlo_lowering::kernels::build_program(&m.graph, &plan).map_err(DriverError::Other)?;
    phase("build program");
    let mut constants: Weights = program
        .constants
        .iter()
        .filter_map(|(_, name)| {
            let t = shape_consts.remove(name).or_else(|| weight(name));
            t.map(|t| (name.clone(), t))
        })
        .collect();
    phase("constants");
    // Steps that read only constants run now; their results become constants. Not those of
    // random ops, whose values belong to the run.
    let random: std::collections::HashSet<&str> = (m.graph.nodes.iter())
        .filter(|n| matches!(n.kind, fxhlo_ir::NodeKind::Op(op) if op.is_random()))
        .map(|n| n.name.as_str())
        .collect();
    let pure = |s: &fxhlo_runtime::fast::Step| !s.nodes.iter().any(|n| random.contains(n.as_str()));
    let folded =
        fxhlo_runtime::fast::fold::fold_constant_steps(&mut program, &mut constants, &pure)
            .map_err(DriverError::Other)?;
    phase("fold constants");
    report.count(&program.steps);
    report.folded = folded;
    let artifact = fxhlo_runtime::fast::Artifact {
        header: fxhlo_runtime::fast::ArtifactHeader {
            compiler_version: env!("CARGO_PKG_VERSION").to_string(),
            opt_level: opts.opt_level,
            program,
            graph: graph_text,
            stablehlo,
        },
        constants,
    };
    artifact.validate()?;
    phase("validate");
    Ok(Compiled {
        artifact,
        graph: m.graph,
        cx,
        plan,
        report,
        time: t0.elapsed(),
        phases,
    })
}

/// An artifact from a program text (`fxhlo compile --print-program`, `fxhlo_runtime::fast::text`)
/// and the tensors its constants name, taken from `weights` (a model's weights, or an
/// artifact's constants where the compiler folded some). Checked as a loaded artifact is.
pub fn artifact_from_program_text(
    text: &str,
    mut weights: Weights,
) -> Result<fxhlo_runtime::fast::Artifact> {
    let program =
        fxhlo_runtime::fast::text::parse(text).map_err(|e| DriverError::Other(e.to_string()))?;
    let mut constants = Weights::default();
    for (_, name) in &program.constants {
        if constants.contains_key(name) {
            continue;
        }
        let t = weights.remove(name).ok_or_else(|| {
            DriverError::Other(format!(
                "the program's constant '{name}' is not in the weights (constants the compiler computed, `fxhlo.folded.*` and `fxhlo.shape.*`, are in the artifact: pass it as the weights)"
            ))
        })?;
        constants.insert(name.clone(), t);
    }
    let artifact = fxhlo_runtime::fast::Artifact {
        header: fxhlo_runtime::fast::ArtifactHeader {
            compiler_version: env!("CARGO_PKG_VERSION").to_string(),
            opt_level: 0,
            program,
            graph: String::new(),
            stablehlo: Err("the artifact was made from a program text".into()),
        },
        constants,
    };
    artifact.validate()?;
    Ok(artifact)
}

/// Runs `model` on `inputs` with the fast runtime (compiled at `-O2`).
pub fn run_fast(model: &Model, inputs: &Weights) -> Result<Vec<HostTensor>> {
    let a = compile(model, &CompileOptions::default())?;
    let ex = fxhlo_runtime::fast::Executor::new(a, &Default::default())?;
    Ok(ex.run(inputs)?)
}

/// Runs `model` on `inputs` in the reference interpreter.
pub fn run_reference(model: &Model, inputs: &Weights) -> Result<Vec<HostTensor>> {
    let _span = tracing::info_span!("interpret").entered();
    if model.graph.unsupported_ops().is_empty() {
        return Ok(fxhlo_runtime::run(model, inputs)?);
    }
    let mut m = Model {
        graph: model.graph.clone(),
        weights: model.weights.clone(),
    };
    remove_dead_nodes(&mut m.graph)?;
    Ok(fxhlo_runtime::run(&m, inputs)?)
}

/// Removes op nodes whose results nobody uses (the `dce` pass), before any stage that must
/// execute or lower every node looks at them: an op fxhlo does not know whose result is
/// never used is no reason to refuse a graph (`inspect` still lists it).
pub fn remove_dead_nodes(g: &mut fxhlo_ir::Graph) -> Result<()> {
    use fxhlo_passes::Pass;
    fxhlo_passes::dce::Dce.run(g, &mut fxhlo_passes::Cx::default())?;
    Ok(())
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
    let tolerance = match fxhlo_ir::budget::read_regular_file(&dir.join("meta.json"), 1 << 20) {
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
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(DriverError::Other(format!(
                "{}: {e}",
                dir.join("meta.json").display()
            )))
        }
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
    check_outputs(case, &outputs, tol)
}

/// Compares `outputs` with the case's expected outputs.
pub fn check_outputs(
    case: &TestCase,
    outputs: &[HostTensor],
    tol: Option<Tolerance>,
) -> Result<Vec<Comparison>> {
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
