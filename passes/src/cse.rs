//! Common subexpression elimination: identical pure op nodes (same op, same arguments) are
//! merged into the first one.

use crate::{Changed, Cx, Pass};
use fxhlo_ir::{Graph, IrError, NodeKind, Op, ValueRef};
use std::collections::HashMap;

/// Merges identical pure op nodes.
pub struct Cse;

/// Ops whose results differ between two evaluations with the same arguments.
pub fn is_random(op: Op) -> bool {
    matches!(
        op,
        Op::Rand
            | Op::Randn
            | Op::Randperm
            | Op::NativeDropout
            | Op::EmptyMemoryFormat
            | Op::EmptyStrided
    )
}

impl Pass for Cse {
    fn name(&self) -> &'static str {
        "cse"
    }

    fn run(&self, g: &mut Graph, _cx: &mut Cx) -> Result<Changed, IrError> {
        // Arguments are compared through their Debug form, which is exact for floats too.
        let mut seen: HashMap<(Op, String), usize> = HashMap::new();
        let mut changed = false;
        for i in 0..g.nodes.len() {
            let NodeKind::Op(op) = g.nodes[i].kind else {
                continue;
            };
            if is_random(op) {
                continue;
            }
            let key = (op, format!("{:?}", g.nodes[i].args));
            match seen.get(&key) {
                Some(&first) => {
                    for r in 0..g.nodes[i].results.len() {
                        crate::rewrite::replace_all_uses(
                            g,
                            ValueRef::new(i, r),
                            ValueRef::new(first, r),
                        );
                    }
                    changed = true;
                }
                None => {
                    seen.insert(key, i);
                }
            }
        }
        if changed {
            crate::dce::Dce.run(g, &mut Cx::default())?;
        }
        Ok(changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fxhlo_ir::text::{parse_graph, print_graph};

    #[test]
    fn merges_identical_nodes_but_not_random_ones() {
        let mut g = parse_graph(
            "graph {\n  %x: f32[3] = input\n  %a: f32[3] = aten.exp.default(%x)\n  %b: f32[3] = aten.exp.default(%x)\n  %c: f32[3] = aten.add.Tensor(%a, %b)\n  %r1: f32[3] = aten.rand.default(size=[3])\n  %r2: f32[3] = aten.rand.default(size=[3])\n  %d: f32[3] = aten.add.Tensor(%r1, %r2)\n  return %c, %d\n}\n",
        )
        .unwrap();
        assert!(Cse.run(&mut g, &mut Cx::default()).unwrap());
        let text = print_graph(&g);
        assert_eq!(text.matches("aten.exp").count(), 1, "{text}");
        assert!(text.contains("aten.add.Tensor(%a, %a)"), "{text}");
        assert_eq!(text.matches("aten.rand").count(), 2, "{text}");
    }
}
