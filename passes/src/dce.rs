//! Dead code elimination: removes op nodes none of whose results is used.

use crate::{Changed, Cx, Pass};
use fxhlo_ir::{Graph, IrError, NodeKind};

/// Removes unused op nodes (graph inputs are kept: they are the calling convention).
pub struct Dce;

impl Pass for Dce {
    fn name(&self) -> &'static str {
        "dce"
    }

    fn run(&self, g: &mut Graph, _cx: &mut Cx) -> Result<Changed, IrError> {
        let mut live = vec![false; g.nodes.len()];
        for o in &g.outputs {
            live[o.node] = true;
        }
        for i in (0..g.nodes.len()).rev() {
            let n = &g.nodes[i];
            if matches!(n.kind, NodeKind::Input { .. }) {
                live[i] = true;
            }
            if live[i] {
                for a in &n.args {
                    for v in a.values() {
                        live[v.node] = true;
                    }
                }
            }
        }
        let changed = live.iter().any(|l| !l);
        if changed {
            crate::rewrite::retain_nodes(g, &live);
        }
        Ok(changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fxhlo_ir::text::{parse_graph, print_graph};

    #[test]
    fn removes_unused_nodes_and_keeps_inputs() {
        let mut g = parse_graph(
            "graph {\n  %x: f32[3] = input\n  %unused: f32[3] = input\n  %a: f32[3] = aten.neg.default(%x)\n  %b: f32[3] = aten.relu.default(%x)\n  return %b\n}\n",
        )
        .unwrap();
        assert!(Dce.run(&mut g, &mut Cx::default()).unwrap());
        let text = print_graph(&g);
        assert!(
            !text.contains("aten.neg") && text.contains("%unused"),
            "{text}"
        );
        g.verify().unwrap();
        assert!(!Dce.run(&mut g, &mut Cx::default()).unwrap());
    }
}
