//! Generates `docs/ops.md`: op-table coverage of the core ATen overloads, from the table itself.

use fxhlo_ir::ops::NO_STABLEHLO;
use fxhlo_ir::ops::{MISSING, NOT_IN_TABLE};
use fxhlo_ir::{Op, OPS};
use std::fmt::Write;

/// The core ATen overload list (`torch._decomp` core ATen opset, 189 overloads).
pub const CORE_ATEN_OPS: &str = include_str!("../../ir/core_aten_ops.txt");

/// Renders the coverage table as markdown.
pub fn ops_markdown() -> String {
    let core: Vec<&str> = CORE_ATEN_OPS
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let covered = core.iter().filter(|n| Op::from_aten(n).is_some()).count();
    let mut s = String::new();
    let _ = writeln!(s, "# Op coverage\n");
    let _ = writeln!(
        s,
        "Generated from the op table (`ir/src/ops.rs`) by `fxhlo ops > docs/ops.md`; a test fails when\nthis file is out of date. Do not edit by hand.\n"
    );
    let _ = writeln!(
        s,
        "- op table: {} ops\n- core ATen overloads covered: {covered} / {}\n",
        OPS.len(),
        core.len()
    );
    let _ = writeln!(
        s,
        "| core ATen overload | in table | type rule | parameters |"
    );
    let _ = writeln!(s, "| --- | --- | --- | --- |");
    for name in &core {
        match Op::from_aten(name) {
            Some(op) => {
                let info = op.info();
                let params: Vec<&str> = info.params.iter().map(|p| p.name).collect();
                let _ = writeln!(
                    s,
                    "| `{name}` | yes | `{}` | {} |",
                    info.rule,
                    params.join(", ")
                );
            }
            None => {
                let why = NOT_IN_TABLE
                    .iter()
                    .find(|(n, _)| n == name)
                    .map_or("not in the table yet", |(_, w)| w);
                let _ = writeln!(s, "| `{name}` | **no** | | {why} |");
            }
        }
    }
    let extra: Vec<&str> = OPS
        .iter()
        .map(|i| i.aten)
        .filter(|a| !core.contains(a))
        .collect();
    if !extra.is_empty() {
        let _ = writeln!(
            s,
            "\nOps in the table beyond the core set: {}",
            extra.join(", ")
        );
    }
    let _ = writeln!(
        s,
        "\n## Ops without a StableHLO lowering\n\nThe fast runtime and the reference interpreter run \
         them; `fxhlo lower` stops with an error naming the node and the op.\n"
    );
    let _ = writeln!(s, "| op | why |\n| --- | --- |");
    for (op, why) in NO_STABLEHLO {
        let _ = writeln!(s, "| `{op}` | {why} |");
    }
    let _ = writeln!(
        s,
        "\n## Known missing ops beyond the core set\n\nUsed by models or by PyTorch's OpInfo \
         samples (ranked by `tools/missing_ops.py`); `fxhlo inspect` lists such ops as \
         unsupported, and the `torch.compile` backend runs them in eager.\n"
    );
    let _ = writeln!(s, "| ATen overload | why |\n| --- | --- |");
    for (name, why) in MISSING {
        let _ = writeln!(s, "| `{name}` | {why} |");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_core_op_is_covered_or_explained() {
        for name in CORE_ATEN_OPS.lines().filter(|l| !l.trim().is_empty()) {
            let explained = NOT_IN_TABLE.iter().any(|(n, _)| *n == name.trim());
            assert!(
                Op::from_aten(name.trim()).is_some() != explained,
                "{name}: must be either in the table or in NOT_IN_TABLE, not both or neither"
            );
        }
    }

    #[test]
    fn docs_ops_md_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/ops.md");
        let on_disk = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            on_disk == ops_markdown(),
            "docs/ops.md is out of date: run `cargo run --bin fxhlo -- ops > docs/ops.md`"
        );
    }
}
