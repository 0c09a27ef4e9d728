//! Loading emitted modules through MLIR's C API (melior), behind the cargo feature `mlir`.
//!
//! Upstream MLIR has no StableHLO dialect, so the context allows unregistered dialects and the
//! module must be in the generic form ([`EmitOptions::generic`](crate::stablehlo::EmitOptions)):
//! `func.func` and `return` are checked by their real verifiers, every `stablehlo.*`/`chlo.*` op
//! only structurally (operand and result types, SSA dominance, regions).

use melior::dialect::DialectRegistry;
use melior::ir::operation::OperationLike;
use melior::ir::Module;
use melior::Context;
use std::cell::RefCell;
use std::rc::Rc;

/// Parses `text` with unregistered dialects allowed, verifies it, prints it, parses and verifies
/// the printed text again and checks that it prints the same (a round trip). Returns the printed
/// module; an error carries MLIR's diagnostics.
pub fn check_module(text: &str) -> Result<String, String> {
    let ctx = context();
    let diags = Rc::new(RefCell::new(Vec::<String>::new()));
    let sink = diags.clone();
    ctx.attach_diagnostic_handler(move |d| {
        sink.borrow_mut().push(format!("{}: {d}", d.location()));
        true
    });
    let fail = |what: &str| {
        let d = diags.borrow();
        if d.is_empty() {
            what.to_string()
        } else {
            format!("{what}:\n{}", d.join("\n"))
        }
    };
    let first = parse_print(&ctx, text).map_err(fail)?;
    let second = parse_print(&ctx, &first).map_err(|e| fail(&format!("printed module {e}")))?;
    if first != second {
        return Err(format!(
            "round trip changed the module:\n--- first print\n{first}\n--- second print\n{second}"
        ));
    }
    Ok(first)
}

/// A context with every upstream dialect loaded and unregistered dialects allowed.
fn context() -> Context {
    let registry = DialectRegistry::new();
    melior::utility::register_all_dialects(&registry);
    let ctx = Context::new();
    ctx.append_dialect_registry(&registry);
    ctx.load_all_available_dialects();
    ctx.set_allow_unregistered_dialects(true);
    ctx
}

fn parse_print(ctx: &Context, text: &str) -> Result<String, &'static str> {
    if text.contains('\0') {
        return Err("contains a NUL byte");
    }
    // The parser also runs the verifier: a module that parses is already verified once.
    let m = Module::parse(ctx, text).ok_or("does not parse and verify")?;
    if !m.as_operation().verify() {
        return Err("does not verify");
    }
    Ok(m.as_operation().to_string())
}
