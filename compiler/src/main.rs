//! The `fxhlo` command line.

use clap::{Parser, Subcommand};
use fxhlo::{
    check_case, load_case, load_model, name_outputs, run_reference, DriverError, Tolerance,
};
use fxhlo_ir::read::safetensors_io::{read_safetensors, write_safetensors};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// fxhlo: a compiler from PyTorch FX graphs of core ATen ops to StableHLO and fast CPU kernels.
#[derive(Parser)]
#[command(name = "fxhlo", version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
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
    },
    /// Run a model in the reference interpreter.
    Run {
        /// A fxjson file, a testdata folder or a .pt2 archive.
        model: PathBuf,
        /// Inputs (safetensors), keyed by the user-input names `inspect` prints.
        #[arg(long)]
        inputs: PathBuf,
        /// Where to write the outputs (safetensors, keys output0, output1, ...).
        #[arg(long)]
        out: PathBuf,
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
    },
    /// Optimize a model with a pass pipeline and print the resulting IR.
    Opt {
        /// A fxjson file, a testdata folder or a .pt2 archive.
        model: PathBuf,
        /// Optimization level (0, 1 or 2).
        #[arg(short = 'O', default_value_t = 1)]
        level: u8,
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
        /// Print each pass's time to standard error.
        #[arg(long)]
        time_passes: bool,
        /// Print op counts before and after, the e-graph reports, kernels after fusion and
        /// estimated bytes moved, to standard error.
        #[arg(long)]
        stats: bool,
        /// Print the fusion plan of the optimized graph to standard error.
        #[arg(long)]
        print_fusion: bool,
        /// Output file for the IR text (`-` for standard output).
        #[arg(short, long, default_value = "-")]
        output: PathBuf,
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
    match run(cli.cmd) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn write_text(path: &Path, text: &str) -> Result<(), DriverError> {
    if path == Path::new("-") {
        print!("{text}");
        return Ok(());
    }
    fxhlo_ir::read::safetensors_io::write_atomic(path, text.as_bytes())
        .map_err(|e| DriverError::Other(format!("{}: {e}", path.display())))
}

fn run(cmd: Cmd) -> Result<ExitCode, DriverError> {
    match cmd {
        Cmd::Inspect {
            model,
            histogram_only,
        } => {
            let m = load_model(&model)?;
            if !histogram_only {
                print!("{}", fxhlo_ir::text::print_graph(&m.graph));
            }
            println!("\nop histogram:");
            for (op, n) in m.graph.op_histogram() {
                println!("  {n:5}  {op}");
            }
            let unsupported = m.graph.unsupported_ops();
            if !unsupported.is_empty() {
                let names: Vec<&str> = unsupported.keys().map(String::as_str).collect();
                println!(
                    "\nnot in the op table ({}): {}",
                    names.len(),
                    names.join(", ")
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Run { model, inputs, out } => {
            let m = load_model(&model)?;
            let ins = read_safetensors(&inputs)?;
            let outs = run_reference(&m, &ins)?;
            write_safetensors(&out, &name_outputs(outs))?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Check {
            dir,
            model,
            rtol,
            atol,
        } => {
            let case = load_case(&dir, model.as_deref())?;
            let tol = rtol.zip(atol).map(|(rtol, atol)| Tolerance { rtol, atol });
            let results = check_case(&case, tol)?;
            let mut ok = true;
            println!(
                "{:<10} {:>12} {:>12} {:>10}  status",
                "output", "max_abs", "max_rel", "bad"
            );
            for c in &results {
                ok &= c.ok();
                match &c.mismatch {
                    Some(m) => println!("{:<10} {m}  FAIL", c.name),
                    None => println!(
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
            level,
            passes,
            print_after,
            print_after_all,
            verify_each,
            time_passes,
            stats,
            print_fusion,
            output,
        } => {
            let mut m = load_model(&model)?;
            let mut pm = match passes {
                Some(names) => {
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    fxhlo_passes::PassManager::from_names(&names).map_err(DriverError::Other)?
                }
                None => fxhlo_passes::PassManager::for_level(level),
            };
            pm.verify_each |= verify_each;
            pm.print_after = print_after;
            if print_after_all {
                pm.print_after.push("*".into());
            }
            let before =
                m.graph.nodes.len() - m.graph.user_inputs().len() - m.graph.weight_inputs().len();
            let mut cx = fxhlo_passes::Cx::default();
            pm.run(&mut m.graph, &mut cx, &mut |name, g| {
                eprintln!(
                    "// ----- IR after {name} -----\n{}",
                    fxhlo_ir::text::print_graph(g)
                );
            })?;
            if time_passes {
                for (name, t, changed) in &cx.timings {
                    eprintln!(
                        "{:>10.3} ms  {name}{}",
                        t.as_secs_f64() * 1e3,
                        if *changed { "" } else { "  (no change)" }
                    );
                }
            }
            if stats {
                let after = m.graph.nodes.len()
                    - m.graph.user_inputs().len()
                    - m.graph.weight_inputs().len();
                eprintln!("ops: {before} before, {after} after");
                for r in &cx.egraph {
                    eprintln!("{r}");
                }
                let plan = fxhlo_passes::fusion::plan(&m.graph);
                eprintln!(
                    "kernels after fusion: {}; estimated bytes moved: {} unfused, {} fused",
                    plan.kernels.len(),
                    plan.bytes_before,
                    plan.bytes_after
                );
            }
            if print_fusion {
                eprintln!("{}", fxhlo_passes::fusion::plan(&m.graph));
            }
            write_text(&output, &fxhlo_ir::text::print_graph(&m.graph))?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Ops => {
            print!("{}", fxhlo::opsdoc::ops_markdown());
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Lower {
            model,
            output,
            inline_constants,
            generic,
        } => {
            let m = load_model(&model)?;
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
