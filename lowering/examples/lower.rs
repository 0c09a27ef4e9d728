//! `cargo run -p fxhlo-lowering --example lower -- MODEL OUT.mlir [--inline-constants] [--generic]`:
//! reads a fxjson model (file or testdata folder) and writes its StableHLO module.

use fxhlo_lowering::stablehlo::{emit, EmitOptions};
use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let inline = args.iter().any(|a| a == "--inline-constants");
    let generic = args.iter().any(|a| a == "--generic");
    // Accepts `MODEL OUT` and the CLI's `lower MODEL -o OUT`.
    let mut pos: Vec<&String> = vec![];
    let mut out_flag = None;
    let mut it = args.iter().skip_while(|a| *a == "lower");
    while let Some(a) = it.next() {
        if a == "-o" {
            out_flag = it.next();
        } else if !a.starts_with("--") {
            pos.push(a);
        }
    }
    if let Some(o) = out_flag {
        pos.push(o);
    }
    if pos.len() != 2 {
        eprintln!("usage: lower MODEL OUT.mlir [--inline-constants] [--generic]");
        return ExitCode::from(2);
    }
    let model = match fxhlo_ir::read::read_model(Path::new(pos[0])) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let opts = EmitOptions {
        inline_constants: inline,
        generic,
    };
    match emit(&model, &opts) {
        Ok(text) => {
            let out = pos[1];
            let res = if out == "-" {
                print!("{text}");
                Ok(())
            } else {
                std::fs::write(out, text)
            };
            if let Err(e) = res {
                eprintln!("error: cannot write {out}: {e}");
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
