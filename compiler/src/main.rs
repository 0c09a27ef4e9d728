//! The `fxhlo` command line.

use clap::{Parser, Subcommand};
use fxhlo::{
    check_case, check_outputs, load_case, load_model, name_outputs, run_reference, DriverError,
    Tolerance,
};
use fxhlo_ir::read::safetensors_io::{read_safetensors, write_safetensors};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Writes to standard output through its lock; a failed write (a closed pipe, a full disk)
/// returns `DriverError::Stdout` from the enclosing function, which ends the command.
macro_rules! out {
    ($($t:tt)*) => {
        write_stdout(format_args!($($t)*))?
    };
}

/// `out!` with a newline.
macro_rules! outln {
    ($($t:tt)*) => {
        write_stdout(format_args!("{}\n", format_args!($($t)*)))?
    };
}

/// Writes to standard error; a failed write is ignored (there is nowhere left to report it),
/// never a panic as `eprintln!`'s.
macro_rules! errln {
    ($($t:tt)*) => {{
        let _ = writeln!(std::io::stderr().lock(), $($t)*);
    }};
}

/// `errln!` without the newline.
macro_rules! err {
    ($($t:tt)*) => {{
        let _ = write!(std::io::stderr().lock(), $($t)*);
    }};
}

/// An error message as one line of bounded length: control characters escaped (names that
/// hold a newline), at most 4096 characters (names are quoted shortened by
/// `fxhlo_ir::quote_name`; this bounds what any other text adds).
fn one_line(msg: &str) -> String {
    fxhlo_ir::escape_cut(msg, 4096)
}

fn write_stdout(args: std::fmt::Arguments<'_>) -> Result<(), DriverError> {
    let mut o = std::io::stdout().lock();
    o.write_fmt(args).map_err(DriverError::Stdout)
}

/// Flushes standard output (buffered by line): the last write's error, if any.
fn flush_stdout() -> Result<(), DriverError> {
    std::io::stdout()
        .lock()
        .flush()
        .map_err(DriverError::Stdout)
}

/// fxhlo: a compiler from PyTorch FX graphs of core ATen ops to StableHLO and fast CPU kernels.
#[derive(Parser)]
#[command(name = "fxhlo", version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    /// The allocation budget in bytes, for every command: files read, constants built by the
    /// lowering, the reference interpreter's live tensors and the fast runtime's memory plan
    /// are checked against it before allocating (default: the smallest of the address-space
    /// limit, the cgroup memory limit and physical memory).
    #[arg(long, global = true)]
    max_memory: Option<u64>,
}

/// Flags that choose and observe the pass pipeline (`opt`, `lower`, `compile`).
#[derive(clap::Args, Clone, Debug, Default)]
struct PipelineArgs {
    /// Optimization level (0, 1 or 2; default: 1 for `opt`, 0 for `lower`, 2 for `compile`).
    #[arg(short = 'O')]
    level: Option<u8>,
    /// Run these passes instead of a level's pipeline (comma-separated).
    #[arg(long, value_delimiter = ',')]
    passes: Option<Vec<String>>,
    /// Print the IR to standard error after this pass (repeatable).
    #[arg(long)]
    print_after: Vec<String>,
    /// Print the IR to standard error after every pass.
    #[arg(long)]
    print_after_all: bool,
    /// Verify the graph after every pass (always on in debug builds).
    #[arg(long)]
    verify_each: bool,
    /// Print each pass's time to standard error (for `compile`, also each phase: reading,
    /// lowering, building the program, folding, serializing, writing).
    #[arg(long)]
    time_passes: bool,
}

impl PipelineArgs {
    fn options(&self, default_level: u8) -> fxhlo::CompileOptions {
        let mut print_after = self.print_after.clone();
        if self.print_after_all {
            print_after.push("*".into());
        }
        fxhlo::CompileOptions {
            opt_level: self.level.unwrap_or(default_level),
            passes: self.passes.clone(),
            verify_each: self.verify_each,
            print_after,
        }
    }
}

/// Which runtime executes a model.
#[derive(clap::Args, Clone, Debug, Default)]
struct RuntimeArgs {
    /// Use the reference interpreter instead of the fast runtime.
    #[arg(long)]
    reference: bool,
    /// Worker threads of the fast runtime (default: FXHLO_NUM_THREADS, else every core).
    #[arg(long)]
    threads: Option<usize>,
    /// Print the program's steps, fallbacks and memory plan to standard error.
    #[arg(long)]
    stats: bool,
}

#[derive(Subcommand)]
enum Cmd {
    /// Print a model's IR text and an op histogram.
    Inspect {
        /// A fxjson file, a testdata folder or a .pt2 archive.
        model: PathBuf,
        /// Print only the histogram.
        #[arg(long)]
        histogram_only: bool,
        /// Write a picture of the graph as Graphviz DOT here (kernels as clusters with
        /// `--fusion`; docs/pictures.md).
        #[arg(long)]
        dot: Option<PathBuf>,
        /// Write a picture of the graph as SVG here (drawn without Graphviz; kernels as fill
        /// colours with `--fusion`).
        #[arg(long)]
        svg: Option<PathBuf>,
        /// Draw the graph after the -O2 pipeline with its fusion kernels and the steps that run
        /// on the reference interpreter (compiles the model).
        #[arg(long)]
        fusion: bool,
    },
    /// Run a model (compiled in memory), a compiled artifact (.fxa) or a program text
    /// (`compile --print-program`) with the fast runtime.
    Run {
        /// A fxjson file, a testdata folder, a .pt2 archive, an artifact from `fxhlo compile` or
        /// a program text (with `--weights`).
        model: PathBuf,
        /// For a program text: the tensors its constants name, a safetensors file or an
        /// artifact (whose constants include those the compiler computed).
        #[arg(long)]
        weights: Option<PathBuf>,
        /// Inputs (safetensors), keyed by the user-input names `inspect` prints.
        #[arg(long)]
        inputs: PathBuf,
        /// Where to write the outputs (safetensors, keys output0, output1, ...).
        #[arg(long)]
        out: PathBuf,
        #[command(flatten)]
        runtime: RuntimeArgs,
    },
    /// Compile a model into an artifact for the fast runtime.
    Compile {
        /// A fxjson file, a testdata folder or a .pt2 archive.
        model: PathBuf,
        /// The artifact to write (optional with `--print-program`).
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Print the compiled program's text form (docs/runtime.md) to standard output.
        #[arg(long)]
        print_program: bool,
        /// Print the fusion plan the program was built from to standard error (its kernel
        /// numbers are those of the program text's `kernels`).
        #[arg(long)]
        print_fusion: bool,
        #[command(flatten)]
        pipeline: PipelineArgs,
        /// Print the compile time, the steps by kernel kind and every fallback to standard error.
        #[arg(long)]
        stats: bool,
    },
    /// Run a testdata folder and compare with its stored eager outputs.
    Check {
        /// The folder (graph.json, inputs.safetensors, expected.safetensors).
        dir: PathBuf,
        /// Read the model from this file instead of graph.json (e.g. model.pt2).
        #[arg(long)]
        model: Option<PathBuf>,
        /// Relative tolerance (default: meta.json's, else per dtype).
        #[arg(long, requires = "atol")]
        rtol: Option<f64>,
        /// Absolute tolerance.
        #[arg(long, requires = "rtol")]
        atol: Option<f64>,
        #[command(flatten)]
        runtime: RuntimeArgs,
    },
    /// Find the first node whose value differs between the fast runtime and the reference
    /// interpreter (a lockstep numerics debugger; docs/compare.md).
    Compare {
        /// A fxjson file, a testdata folder or a .pt2 archive.
        model: PathBuf,
        /// Inputs (safetensors), keyed by the user-input names; default: a testdata folder's
        /// inputs.safetensors.
        #[arg(long)]
        inputs: Option<PathBuf>,
        /// Relative tolerance (default: per dtype, docs/numerics.md).
        #[arg(long, requires = "atol")]
        rtol: Option<f64>,
        /// Absolute tolerance.
        #[arg(long, requires = "rtol")]
        atol: Option<f64>,
        /// Print every value, not only the first outside tolerance.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        pipeline: PipelineArgs,
        /// Worker threads of the fast runtime (default: FXHLO_NUM_THREADS, else every core).
        #[arg(long)]
        threads: Option<usize>,
    },
    /// Optimize a model with a pass pipeline and print the resulting IR.
    Opt {
        /// A fxjson file, a testdata folder or a .pt2 archive.
        model: PathBuf,
        #[command(flatten)]
        pipeline: PipelineArgs,
        /// Print op counts before and after, the e-graph reports, kernels after fusion and
        /// estimated bytes moved, to standard error.
        #[arg(long)]
        stats: bool,
        /// Print the fusion plan of the optimized graph to standard error.
        #[arg(long)]
        print_fusion: bool,
        /// Print the composite patterns (softmax, layer norm, GELU, SiLU, attention) of the
        /// optimized graph to standard error, one line each: kind, output, nodes, inputs.
        #[arg(long)]
        print_composites: bool,
        /// Output file for the IR text (`-` for standard output).
        #[arg(short, long, default_value = "-")]
        output: PathBuf,
    },
    /// Compile a model and time repeated runs of the fast runtime (prints JSON).
    Bench {
        /// A testdata folder, fxjson file, .pt2 archive or artifact.
        model: PathBuf,
        /// Inputs (default: inputs.safetensors in the model's folder).
        #[arg(long)]
        inputs: Option<PathBuf>,
        /// Timed runs.
        #[arg(long, default_value_t = 20)]
        iters: usize,
        /// Untimed runs first.
        #[arg(long, default_value_t = 3)]
        warmup: usize,
        /// Also print, on standard error, the time of each step (mean over the timed runs),
        /// slowest first.
        #[arg(long)]
        profile: bool,
        #[command(flatten)]
        pipeline: PipelineArgs,
        #[command(flatten)]
        runtime: RuntimeArgs,
    },
    /// Time the fast runtime's streaming copy (non-temporal stores) of `--mib` MiB of f32 and
    /// print each copy's milliseconds as JSON: the benchmark's copy-bandwidth peak.
    CopyPeak {
        /// Size of the source (and of the destination), MiB.
        #[arg(long, default_value_t = 256)]
        mib: usize,
        /// Timed copies.
        #[arg(long, default_value_t = 5)]
        iters: usize,
        /// Worker threads (default: FXHLO_NUM_THREADS, else every core).
        #[arg(long)]
        threads: Option<usize>,
    },
    /// Print the op coverage table (docs/ops.md) generated from the op table.
    Ops,
    /// Lower a model to a StableHLO module (MLIR text).
    Lower {
        /// A fxjson file, a testdata folder or a .pt2 archive.
        model: PathBuf,
        /// Output file (`-` for standard output).
        #[arg(short, long, default_value = "-")]
        output: PathBuf,
        /// Fold parameters into the module as constants.
        #[arg(long)]
        inline_constants: bool,
        /// Write the stablehlo/chlo ops in MLIR's generic syntax.
        #[arg(long)]
        generic: bool,
        #[command(flatten)]
        pipeline: PipelineArgs,
    },
}

fn main() -> ExitCode {
    let filter = std::env::var("FXHLO_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| "warn".into());
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    if let Some(bytes) = cli.max_memory {
        fxhlo_ir::budget::set_limit(bytes.max(1));
    }
    match run(cli.cmd).and_then(|code| flush_stdout().map(|_| code)) {
        Ok(code) => code,
        // The reader of standard output went away (`fxhlo ops | head`): nothing more to say,
        // as for `yes | head`.
        Err(DriverError::Stdout(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            ExitCode::SUCCESS
        }
        Err(e) => {
            errln!("error: {}", one_line(&e.to_string()));
            ExitCode::from(2)
        }
    }
}

/// Writes the pictures of `inspect --dot/--svg` (`fxhlo::picture`).
fn draw(
    m: &fxhlo_ir::Model,
    fusion: bool,
    dot: Option<&Path>,
    svg: Option<&Path>,
) -> Result<(), DriverError> {
    use fxhlo::picture::{self, Overlay};
    let compiled;
    let (g, overlay) = if fusion {
        compiled = fxhlo::compile_with(m, &fxhlo::CompileOptions::default(), &mut |_, _| {})?;
        let fallbacks = compiled.report.fallbacks.iter().cloned().collect();
        (
            &compiled.graph,
            Overlay {
                plan: Some(&compiled.plan),
                fallbacks,
            },
        )
    } else {
        (&m.graph, Overlay::default())
    };
    if let Some(p) = dot {
        write_text(p, &picture::dot(g, &overlay, true))?;
    }
    if let Some(p) = svg {
        write_text(p, &picture::svg(g, &overlay).map_err(DriverError::Other)?)?;
    }
    Ok(())
}

fn write_text(path: &Path, text: &str) -> Result<(), DriverError> {
    if path == Path::new("-") {
        out!("{text}");
        return Ok(());
    }
    fxhlo_ir::read::safetensors_io::write_atomic(path, text.as_bytes())
        .map_err(|e| DriverError::Other(format!("{}: {e}", path.display())))
}

fn dump_ir(name: &str, g: &fxhlo_ir::Graph) {
    errln!(
        "// ----- IR after {name} -----\n{}",
        fxhlo_ir::text::print_graph(g)
    );
}

/// A writer that counts the bytes written through it.
struct CountingWriter<'a> {
    w: &'a mut dyn std::io::Write,
    n: u64,
}

impl std::io::Write for CountingWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let k = self.w.write(buf)?;
        self.n += k as u64;
        Ok(k)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.w.flush()
    }
}

fn print_timings(cx: &fxhlo_passes::Cx) {
    for (name, t, changed) in &cx.timings {
        errln!(
            "{:>10.3} ms  {name}{}",
            t.as_secs_f64() * 1e3,
            if *changed { "" } else { "  (no change)" }
        );
    }
}

fn exec_options(rt: &RuntimeArgs) -> fxhlo_runtime::fast::ExecOptions {
    fxhlo_runtime::fast::ExecOptions {
        threads: rt.threads,
        max_memory: None,
    }
}

fn new_executor(
    a: fxhlo_runtime::fast::Artifact,
    rt: &RuntimeArgs,
) -> Result<fxhlo_runtime::fast::Executor, DriverError> {
    let ex = fxhlo_runtime::fast::Executor::new(a, &exec_options(rt))?;
    if rt.stats {
        err!("{}", ex.stats());
    }
    Ok(ex)
}

/// Compiles a model at -O2 for the fast runtime.
fn compile_for_run(
    m: &fxhlo_ir::Model,
    rt: &RuntimeArgs,
) -> Result<fxhlo_runtime::fast::Executor, DriverError> {
    let a = fxhlo::compile(m, &fxhlo::CompileOptions::default())?;
    new_executor(a, rt)
}

/// Runs a model file, an artifact or a program text (its constants from `weights`), with the
/// runtime `rt` asks for.
fn run_model(
    path: &Path,
    weights: Option<&Path>,
    inputs: &fxhlo_ir::Weights,
    rt: &RuntimeArgs,
) -> Result<Vec<fxhlo_ir::HostTensor>, DriverError> {
    // A regular file is read once (a FIFO or a device is refused, never read without end);
    // a folder is a testdata folder.
    let bytes = if path.is_dir() {
        None
    } else {
        Some(
            fxhlo_ir::budget::read_regular_file(path, u64::MAX)
                .map_err(|e| DriverError::Other(format!("{}: {e}", path.display())))?,
        )
    };
    if let Some(bytes) =
        (bytes.as_deref()).filter(|b| b.starts_with(fxhlo_runtime::fast::artifact::MAGIC))
    {
        if rt.reference {
            return Err(DriverError::Other(
                "--reference needs a model, not a compiled artifact".into(),
            ));
        }
        let a = fxhlo_runtime::fast::Artifact::from_bytes(bytes)?;
        return Ok(new_executor(a, rt)?.run(inputs)?);
    }
    if let Some(text) = bytes.as_deref().and_then(program_text) {
        if rt.reference {
            return Err(DriverError::Other(
                "--reference needs a model, not a program text".into(),
            ));
        }
        let w = weights.ok_or_else(|| {
            DriverError::Other(
                "a program text needs --weights (a safetensors file or an artifact)".into(),
            )
        })?;
        let a = fxhlo::artifact_from_program_text(text, read_weights(w)?)?;
        return Ok(new_executor(a, rt)?.run(inputs)?);
    }
    if weights.is_some() {
        return Err(DriverError::Other(
            "--weights is for a program text; a model carries its own weights".into(),
        ));
    }
    let m = load_model(path)?;
    if rt.reference {
        return run_reference(&m, inputs);
    }
    Ok(compile_for_run(&m, rt)?.run(inputs)?)
}

/// The text of a file that is a program text (starts with its first line), else `None`.
fn program_text(bytes: &[u8]) -> Option<&str> {
    let magic = fxhlo_runtime::fast::text::MAGIC;
    if !bytes.starts_with(magic.as_bytes()) {
        return None;
    }
    std::str::from_utf8(bytes).ok()
}

/// Tensors by name from a safetensors file or an artifact (its constants).
fn read_weights(path: &Path) -> Result<fxhlo_ir::Weights, DriverError> {
    let bytes = fxhlo_ir::budget::read_regular_file(path, u64::MAX)
        .map_err(|e| DriverError::Other(format!("{}: {e}", path.display())))?;
    if bytes.starts_with(fxhlo_runtime::fast::artifact::MAGIC) {
        return Ok(fxhlo_runtime::fast::Artifact::from_bytes(&bytes)?.constants);
    }
    let name = path.display().to_string();
    Ok(fxhlo_ir::read::safetensors_io::parse_safetensors(
        &bytes, &name,
    )?)
}

/// How `fxhlo bench` times runs.
struct BenchOptions {
    iters: usize,
    warmup: usize,
    profile: bool,
}

/// `fxhlo bench`: compile time, then the median and minimum of timed runs, as one JSON line;
/// with `profile`, a table of step times on standard error.
fn bench(
    model: &Path,
    inputs: Option<PathBuf>,
    opts: &BenchOptions,
    pipeline: &PipelineArgs,
    rt: &RuntimeArgs,
) -> Result<(), DriverError> {
    let (iters, warmup) = (opts.iters, opts.warmup);
    // Counts are checked before anything runs: `warmup + iters` must not wrap, and the timed
    // runs' times are kept in memory.
    const MAX_RUNS: usize = 1_000_000_000;
    let runs = warmup
        .checked_add(iters.max(1))
        .filter(|&n| n <= MAX_RUNS)
        .ok_or_else(|| {
            DriverError::Other(format!(
                "--warmup {warmup} plus --iters {iters}: at most {MAX_RUNS} runs in all"
            ))
        })?;
    let dir = if model.is_dir() {
        model.to_path_buf()
    } else {
        model.parent().unwrap_or(Path::new(".")).to_path_buf()
    };
    let ins = read_safetensors(&inputs.unwrap_or_else(|| dir.join("inputs.safetensors")))?;
    let t0 = std::time::Instant::now();
    let m = load_model(model)?;
    let read_ms = t0.elapsed().as_secs_f64() * 1e3;
    let c = fxhlo::compile_owned(m, &pipeline.options(2), &mut dump_ir)?;
    let compile_ms = c.time.as_secs_f64() * 1e3;
    let steps = c.artifact.header.program.steps.len();
    let fallbacks = c.report.fallbacks.len();
    let ex = new_executor(c.artifact, rt)?;
    let a = ex.artifact();
    // Inputs and outputs in 64-byte aligned buffers, as torch's allocator gives them to the
    // peers (the inputs as read are 16-byte aligned: row loads straddle cache lines, which
    // made the elementwise and layer norm + softmax workloads 3-4% slower); the outputs are
    // then written in place and whole cache lines at a time.
    let mut in_lines: Vec<(Vec<Line>, usize)> = vec![];
    for s in a.inputs() {
        let t = ins
            .get(&s.name)
            .ok_or_else(|| DriverError::Other(format!("no input '{}' in the inputs", s.name)))?;
        let mut lines = vec![Line([0; 64]); t.bytes.len().div_ceil(64)];
        bytes_of(&mut lines)[..t.bytes.len()].copy_from_slice(&t.bytes);
        in_lines.push((lines, t.bytes.len()));
    }
    let in_bytes: Vec<&[u8]> = in_lines
        .iter_mut()
        .map(|(lines, n)| &bytes_of(lines)[..*n])
        .collect();
    let mut outs: Vec<Vec<Line>> = a
        .outputs()
        .iter()
        .map(|s| vec![Line([0; 64]); s.bytes().div_ceil(64)])
        .collect();
    let sizes: Vec<usize> = a.outputs().iter().map(|s| s.bytes()).collect();
    let mut times = Vec::with_capacity(iters.clamp(1, 1 << 20));
    for i in 0..runs {
        if i == warmup && opts.profile {
            ex.enable_profiling();
        }
        let mut refs: Vec<&mut [u8]> = outs
            .iter_mut()
            .zip(&sizes)
            .map(|(o, &n)| &mut bytes_of(o)[..n])
            .collect();
        let t = std::time::Instant::now();
        ex.run_raw(&in_bytes, &mut refs)?;
        if i >= warmup {
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    times.sort_by(f64::total_cmp);
    if opts.profile {
        err!("{}", profile_table(a, &ex.step_seconds(), times.len()));
    }
    let json = serde_json::json!({
        "model": model.display().to_string(),
        "read_ms": read_ms,
        "compile_ms": compile_ms,
        "run_ms_median": times[times.len() / 2],
        "run_ms_min": times[0],
        "times_ms": times,
        "iters": times.len(),
        "threads": ex.threads(),
        "steps": steps,
        "fallbacks": fallbacks,
        "peak_bytes": ex.memory_plan().peak_bytes(),
    });
    outln!("{json}");
    Ok(())
}

/// Steps by mean time per run, slowest first, with their kind, result shape, share and, for a
/// convolution, its geometry and the nodes fused into it; then the time per kind.
fn profile_table(a: &fxhlo_runtime::fast::Artifact, secs: &[f64], runs: usize) -> String {
    let p = &a.header.program;
    let total: f64 = secs.iter().sum::<f64>().max(1e-12);
    let per_run = |t: f64| t * 1e3 / runs.max(1) as f64;
    let mut order: Vec<usize> = (0..secs.len()).collect();
    order.sort_by(|&x, &y| secs[y].total_cmp(&secs[x]));
    let mut out = format!(
        "step profile (mean of {runs} runs; {:.3} ms in steps per run)\n",
        per_run(total)
    );
    let mut kinds: Vec<(String, f64, usize)> = vec![];
    for i in order {
        let s = &p.steps[i];
        let shape = s
            .dsts
            .first()
            .map(|&v| p.values[v as usize].type_string())
            .unwrap_or_default();
        let (kind, detail) = step_detail(&s.kernel, s.nodes.len());
        out.push_str(&format!(
            "  {:9.3} ms {:5.1}%  step {i:3} {:<11} {:<24} {shape}{detail}\n",
            per_run(secs[i]),
            100.0 * secs[i] / total,
            s.kernel.kind(),
            s.name(),
        ));
        match kinds.iter_mut().find(|k| k.0 == kind) {
            Some(k) => (k.1, k.2) = (k.1 + secs[i], k.2 + 1),
            None => kinds.push((kind, secs[i], 1)),
        }
    }
    kinds.sort_by(|x, y| y.1.total_cmp(&x.1));
    out.push_str("by kind:");
    for (kind, t, n) in kinds {
        out.push_str(&format!("  {kind} {:.3} ms ({n})", per_run(t)));
    }
    out.push('\n');
    out
}

/// A step's kind for the profile's totals (convolutions as depthwise, 1x1 or k x k) and, for a
/// convolution, `  [cin->cout kh x kw s sh g groups] +N fused`.
fn step_detail(k: &fxhlo_runtime::fast::Kernel, nodes: usize) -> (String, String) {
    let fxhlo_runtime::fast::Kernel::Conv { spec: c, .. } = k else {
        return (k.kind().to_string(), String::new());
    };
    let kind = if c.groups > 1 && c.groups == c.cin {
        "conv depthwise"
    } else if c.kh == 1 && c.kw == 1 {
        "conv 1x1"
    } else {
        "conv kxk"
    };
    let fused = match nodes.saturating_sub(1) {
        0 => String::new(),
        n => format!(" +{n} fused"),
    };
    let detail = format!(
        "  [{}->{} {}x{} s{} g{}]{fused}",
        c.cin, c.cout, c.kh, c.kw, c.stride[0], c.groups
    );
    (kind.to_string(), detail)
}

/// One 64-byte aligned cache line of a benchmark's input or output buffer.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

fn bytes_of(v: &mut [Line]) -> &mut [u8] {
    // SAFETY: `Line` is 64 plain bytes with no padding (size 64, align 64), so the lines are
    // one run of initialized bytes.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, v.len() * 64) }
}

fn run(cmd: Cmd) -> Result<ExitCode, DriverError> {
    match cmd {
        Cmd::Inspect {
            model,
            histogram_only,
            dot,
            svg,
            fusion,
        } => {
            let m = load_model(&model)?;
            if dot.is_some() || svg.is_some() {
                draw(&m, fusion, dot.as_deref(), svg.as_deref())?;
            }
            if !histogram_only {
                out!("{}", fxhlo_ir::text::print_graph(&m.graph));
            }
            outln!("\nop histogram:");
            for (op, n) in m.graph.op_histogram() {
                outln!("  {n:5}  {op}");
            }
            let unsupported = m.graph.unsupported_ops();
            if !unsupported.is_empty() {
                let names: Vec<&str> = unsupported.keys().map(String::as_str).collect();
                outln!(
                    "\nnot in the op table ({}): {}",
                    names.len(),
                    names.join(", ")
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Run {
            model,
            weights,
            inputs,
            out,
            runtime,
        } => {
            let ins = read_safetensors(&inputs)?;
            let outs = run_model(&model, weights.as_deref(), &ins, &runtime)?;
            write_safetensors(&out, &name_outputs(outs))?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Compile {
            model,
            output,
            print_program,
            print_fusion,
            pipeline,
            stats,
        } => {
            if output.is_none() && !print_program {
                return Err(DriverError::Other(
                    "compile: give the artifact to write (-o FILE) or --print-program".into(),
                ));
            }
            let t = std::time::Instant::now();
            let m = load_model(&model)?;
            let read = t.elapsed();
            let c = fxhlo::compile_owned(m, &pipeline.options(2), &mut dump_ir)?;
            if print_fusion {
                errln!("{}", c.plan);
            }
            if print_program {
                out!(
                    "{}",
                    fxhlo_runtime::fast::text::print(&c.artifact.header.program)
                );
            }
            let t = std::time::Instant::now();
            // Written as it is serialized: the constants are not copied into one buffer first.
            let mut size = 0u64;
            if let Some(output) = &output {
                fxhlo_ir::read::safetensors_io::write_atomic_with(output, &mut |w| {
                    let mut w = CountingWriter { w, n: 0 };
                    c.artifact.write_to(&mut w)?;
                    size = w.n;
                    Ok(())
                })
                .map_err(|e| DriverError::Other(format!("{}: {e}", output.display())))?;
            }
            if pipeline.time_passes {
                print_timings(&c.cx);
                errln!("phases:");
                let io = [("read model", read)];
                let out = [("serialize and write", t.elapsed())];
                for (name, d) in io.iter().chain(&c.phases).chain(&out) {
                    errln!("{:>10.3} ms  {name}", d.as_secs_f64() * 1e3);
                }
            }
            if stats {
                let kinds: Vec<String> = c
                    .report
                    .by_kind
                    .iter()
                    .map(|(k, n)| format!("{k} {n}"))
                    .collect();
                errln!(
                    "compiled in {:.2} ms: {} fusion kernels -> {} steps ({}); {}",
                    c.time.as_secs_f64() * 1e3,
                    c.plan.kernels.len(),
                    c.artifact.header.program.steps.len(),
                    kinds.join(", "),
                    match output {
                        Some(_) => format!("artifact {size} bytes"),
                        None => "no artifact written".into(),
                    }
                );
                errln!(
                    "fallbacks to the reference interpreter: {}",
                    c.report.fallbacks.len()
                );
                for (name, why) in &c.report.fallbacks {
                    errln!("  {name}: {why}");
                }
                if !c.report.folded.is_empty() {
                    errln!(
                        "steps of constants only, run at compile time: {} ({})",
                        c.report.folded.len(),
                        c.report.folded.join(", ")
                    );
                }
            }
            // The command ends here: its graph, plan and program (millions of small
            // allocations for a large graph, 9% of a 1M-node compile) are left to the exit
            // instead of being freed one by one.
            std::mem::forget(c);
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Compare {
            model,
            inputs,
            rtol,
            atol,
            all,
            pipeline,
            threads,
        } => {
            let m = load_model(&model)?;
            let inputs = match inputs {
                Some(p) => read_safetensors(&p)?,
                None if model.is_dir() => read_safetensors(&model.join("inputs.safetensors"))?,
                None => {
                    return Err(DriverError::Other(
                        "compare: --inputs is required unless MODEL is a testdata folder".into(),
                    ))
                }
            };
            let tol = rtol.zip(atol).map(|(rtol, atol)| Tolerance { rtol, atol });
            let r =
                fxhlo::lockstep::compare_nodes(&m, &inputs, &pipeline.options(2), threads, tol)?;
            let bad_outs = r.outputs.iter().filter(|c| !c.ok()).count();
            outln!(
                "outputs of the compiled program: {} of {} within tolerance",
                r.outputs.len() - bad_outs,
                r.outputs.len()
            );
            for c in r.outputs.iter().filter(|c| !c.ok()) {
                outln!(
                    "  {}: max abs error {:.3e}, max rel {:.3e}, {} of {} elements out{}",
                    c.name,
                    c.max_abs,
                    c.max_rel,
                    c.bad,
                    c.numel,
                    c.mismatch
                        .as_ref()
                        .map(|m| format!(" ({m})"))
                        .unwrap_or_default()
                );
            }
            if all {
                for v in &r.values {
                    outln!(
                        "  {:<6} {} = {} {}: max abs {:.3e}, max rel {:.3e}",
                        if v.cmp.ok() { "ok" } else { "OUT" },
                        fxhlo_ir::quote_name(&v.cmp.name),
                        v.op,
                        v.ty,
                        v.cmp.max_abs,
                        v.cmp.max_rel
                    );
                }
            }
            match r.first_bad {
                Some(k) => {
                    let v = &r.values[k];
                    outln!(
                        "value by value ({} values, each an output of an instrumented program): \
                         first outside tolerance: {} = {} {} (node {}, value {} of {}): \
                         max abs error {:.3e}, max rel {:.3e}, {} of {} elements out; \
                         tolerance rtol {:e} atol {:e}; it would need rtol {:.3e}",
                        r.values.len(),
                        fxhlo_ir::quote_name(&v.cmp.name),
                        v.op,
                        v.ty,
                        fxhlo_ir::quote_name(&v.node),
                        k + 1,
                        r.values.len(),
                        v.cmp.max_abs,
                        v.cmp.max_rel,
                        v.cmp.bad,
                        v.cmp.numel,
                        v.tol.rtol,
                        v.tol.atol,
                        v.needed_rtol.unwrap_or(f64::INFINITY)
                    );
                    Ok(ExitCode::from(1))
                }
                None => {
                    outln!(
                        "value by value: all {} values within tolerance",
                        r.values.len()
                    );
                    Ok(if bad_outs == 0 {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::from(1)
                    })
                }
            }
        }
        Cmd::Check {
            dir,
            model,
            rtol,
            atol,
            runtime,
        } => {
            let case = load_case(&dir, model.as_deref())?;
            let tol = rtol.zip(atol).map(|(rtol, atol)| Tolerance { rtol, atol });
            let results = if runtime.reference {
                check_case(&case, tol)?
            } else {
                let ex = compile_for_run(&case.model, &runtime)?;
                let outs = ex.run(&case.inputs)?;
                check_outputs(&case, &outs, tol)?
            };
            let mut ok = true;
            outln!(
                "{:<10} {:>12} {:>12} {:>10}  status",
                "output",
                "max_abs",
                "max_rel",
                "bad"
            );
            for c in &results {
                ok &= c.ok();
                match &c.mismatch {
                    Some(m) => outln!("{:<10} {m}  FAIL", c.name),
                    None => outln!(
                        "{:<10} {:>12.3e} {:>12.3e} {:>10}  {}",
                        c.name,
                        c.max_abs,
                        c.max_rel,
                        format!("{}/{}", c.bad, c.numel),
                        if c.ok() { "ok" } else { "FAIL" }
                    ),
                }
            }
            Ok(if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Cmd::Opt {
            model,
            pipeline,
            stats,
            print_fusion,
            print_composites,
            output,
        } => {
            let mut m = load_model(&model)?;
            let pm = fxhlo::pass_manager(&pipeline.options(1))?;
            let before =
                m.graph.nodes.len() - m.graph.user_inputs().len() - m.graph.weight_inputs().len();
            let mut cx = fxhlo_passes::Cx::default();
            pm.run(&mut m.graph, &mut cx, &mut dump_ir)?;
            if pipeline.time_passes {
                print_timings(&cx);
            }
            if stats {
                let after = m.graph.nodes.len()
                    - m.graph.user_inputs().len()
                    - m.graph.weight_inputs().len();
                errln!("ops: {before} before, {after} after");
                for r in &cx.egraph {
                    errln!("{r}");
                }
                let plan = fxhlo_passes::fusion::plan(&m.graph);
                errln!(
                    "kernels after fusion: {}; estimated bytes moved: {} unfused, {} fused",
                    plan.kernels.len(),
                    plan.bytes_before,
                    plan.bytes_after
                );
            }
            if print_fusion {
                errln!("{}", fxhlo_passes::fusion::plan(&m.graph));
            }
            if print_composites {
                let found = fxhlo_passes::composite::find(&m.graph);
                err!("{}", fxhlo_passes::composite::print(&m.graph, &found));
            }
            write_text(&output, &fxhlo_ir::text::print_graph(&m.graph))?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Bench {
            model,
            inputs,
            iters,
            warmup,
            profile,
            pipeline,
            runtime,
        } => {
            let opts = BenchOptions {
                iters,
                warmup,
                profile,
            };
            bench(&model, inputs, &opts, &pipeline, &runtime)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::CopyPeak {
            mib,
            iters,
            threads,
        } => {
            let threads = threads.unwrap_or_else(fxhlo_runtime::fast::exec::default_threads);
            let ms = fxhlo_runtime::fast::exec::time_stream_copy(mib, threads, iters)
                .map_err(fxhlo::DriverError::Other)?;
            let bytes = 2.0 * (mib as f64) * (1 << 20) as f64;
            let best = ms.iter().copied().fold(f64::INFINITY, f64::min);
            let json = serde_json::json!({
                "mib": mib,
                "threads": threads,
                "times_ms": ms,
                "gbs": bytes / (best * 1e-3) / 1e9,
            });
            outln!("{json}");
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Ops => {
            out!("{}", fxhlo::opsdoc::ops_markdown());
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Lower {
            model,
            output,
            inline_constants,
            generic,
            pipeline,
        } => {
            let mut m = load_model(&model)?;
            fxhlo::remove_dead_nodes(&mut m.graph)?;
            let pm = fxhlo::pass_manager(&pipeline.options(0))?;
            let mut cx = fxhlo_passes::Cx::default();
            pm.run(&mut m.graph, &mut cx, &mut dump_ir)?;
            if pipeline.time_passes {
                print_timings(&cx);
            }
            let opts = fxhlo_lowering::stablehlo::EmitOptions {
                inline_constants,
                generic,
            };
            let text = fxhlo_lowering::stablehlo::emit(&m, &opts)?;
            write_text(&output, &text)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
