//! Common subexpression elimination: identical pure op nodes (same op, same arguments) are
//! merged into the first one.

use crate::{Changed, Cx, Pass};
use fxhlo_ir::{Graph, IrError, NodeKind, Op, ValueRef};
use std::collections::HashMap;

/// Merges identical pure op nodes.
pub struct Cse;

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
            if op.is_random() {
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

// Tests: tests/filetests/cse/*.fxir (input and expected IR side by side).
