//! Canonicalization: drops identity ops and folds chains of views.
//!
//! - `alias`, `clone`, and `_to_copy` that keeps the dtype are forwarded to their input;
//! - `view`, `expand` and `permute` that do not change the shape or order are dropped;
//! - `view(view(x))` becomes one `view` of `x`, `permute(permute(x))` one `permute`;
//! - `mul`/`div` by a scalar 1 and `add`/`sub` of a scalar 0 are dropped when the type is kept;
//! - `full_like(x)` of a static shape becomes `full(shape)`: it reads only `x`'s type, and as a
//!   data dependency it would tie its kernel to `x`'s (a `where(mask, 0, softmax)` guard then
//!   keeps the softmax out of the kernel that writes the result).

use crate::{Changed, Cx, Pass};
use fxhlo_ir::{Arg, Graph, IrError, NodeKind, Op, ValueRef};

/// Removes identity ops and folds view chains.
pub struct Canonicalize;

fn arg(g: &Graph, node: usize, name: &str) -> Arg {
    g.nodes[node].arg(name).cloned().unwrap_or(Arg::None)
}

fn tensor(g: &Graph, node: usize, name: &str) -> Option<ValueRef> {
    arg(g, node, name).as_tensor()
}

fn is_scalar(a: &Arg, v: f64) -> bool {
    match a {
        Arg::Int(n) => *n as f64 == v,
        Arg::Float(x) => *x == v,
        _ => false,
    }
}

/// The input a node can be replaced by, if it is an identity.
fn identity_input(g: &Graph, i: usize, op: Op) -> Option<ValueRef> {
    let x = tensor(g, i, "self")?;
    let same_type = g.ty(x) == &g.nodes[i].results[0];
    let forwards = match op {
        Op::Alias | Op::Clone => true,
        Op::ToCopy => matches!(arg(g, i, "dtype"), Arg::None | Arg::DType(_)),
        Op::View | Op::Expand => true,
        Op::Permute => match arg(g, i, "dims") {
            Arg::Ints(d) => {
                let r = d.len() as i64;
                d.iter()
                    .enumerate()
                    .all(|(k, &p)| (p + r) % r.max(1) == k as i64)
            }
            _ => false,
        },
        Op::MulScalar | Op::DivScalar => is_scalar(&arg(g, i, "other"), 1.0),
        Op::AddScalar | Op::SubScalar => is_scalar(&arg(g, i, "other"), 0.0),
        _ => false,
    };
    (forwards && same_type).then_some(x)
}

impl Pass for Canonicalize {
    fn name(&self) -> &'static str {
        "canonicalize"
    }

    fn run(&self, g: &mut Graph, _cx: &mut Cx) -> Result<Changed, IrError> {
        let mut changed = false;
        for i in 0..g.nodes.len() {
            let NodeKind::Op(op) = g.nodes[i].kind else {
                continue;
            };
            if let Some(x) = identity_input(g, i, op) {
                crate::rewrite::replace_all_uses(g, ValueRef::new(i, 0), x);
                changed = true;
                continue;
            }
            if op == Op::FullLike {
                let t = &g.nodes[i].results[0];
                let shape: Option<Vec<i64>> = t.shape.iter().map(|d| d.as_static()).collect();
                if let Some(shape) = shape {
                    let (fill, dtype) = (arg(g, i, "fill_value"), t.dtype);
                    let node = &mut g.nodes[i];
                    node.kind = NodeKind::Op(Op::Full);
                    node.args = vec![Arg::Ints(shape), fill, Arg::DType(dtype)];
                    node.args.resize(Op::Full.info().params.len(), Arg::None);
                    changed = true;
                }
                continue;
            }
            // view(view(x)) -> view(x); permute(permute(x)) -> permute(x)
            let Some(x) = tensor(g, i, "self") else {
                continue;
            };
            let inner = &g.nodes[x.node];
            match (op, inner.op()) {
                (Op::View, Some(Op::View)) => {
                    let src = inner.args[0].clone();
                    g.nodes[i].args[0] = src;
                    changed = true;
                }
                (Op::Permute, Some(Op::Permute)) => {
                    let (Arg::Ints(outer), Arg::Ints(inn)) =
                        (arg(g, i, "dims"), inner.args[1].clone())
                    else {
                        continue;
                    };
                    let r = inn.len() as i64;
                    let norm = |d: i64| ((d + r) % r.max(1)) as usize;
                    let composed: Vec<i64> = outer
                        .iter()
                        .map(|&d| inn[norm(d)])
                        .map(|d| norm(d) as i64)
                        .collect();
                    let src = inner.args[0].clone();
                    g.nodes[i].args = vec![src, Arg::Ints(composed)];
                    changed = true;
                }
                _ => {}
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

    fn canon(src: &str) -> String {
        let mut g = parse_graph(src).unwrap();
        Canonicalize.run(&mut g, &mut Cx::default()).unwrap();
        g.verify().unwrap();
        print_graph(&g)
    }

    #[test]
    fn drops_identities() {
        let out = canon("graph {\n  %x: f32[2, 3] = input\n  %a: f32[2, 3] = aten.clone.default(%x)\n  %b: f32[2, 3] = aten.mul.Scalar(%a, other=1)\n  %c: f32[2, 3] = aten.add.Scalar(%b, other=0.0)\n  %d: f32[2, 3] = aten.permute.default(%c, dims=[0, 1])\n  %e: f32[2, 3] = aten._to_copy.default(%d, dtype=f32)\n  %f: f32[2, 3] = aten.relu.default(%e)\n  return %f\n}\n");
        assert!(out.contains("aten.relu.default(%x)"), "{out}");
        assert_eq!(out.lines().count(), 5, "{out}");
    }

    #[test]
    fn full_like_of_a_static_shape_becomes_full() {
        let out = canon("graph {\n  %x: f32[2, 3] = input\n  %s: f32[2, 3] = aten.exp.default(%x)\n  %z: f32[2, 3] = aten.full_like.default(%s, fill_value=0, pin_memory=false)\n  %w: f32[2, 3] = aten.add.Tensor(%s, %z)\n  return %w\n}\n");
        assert!(
            out.contains("%z: f32[2, 3] = aten.full.default(size=[2, 3], fill_value=0, dtype=f32)"),
            "{out}"
        );
        let out = canon("graph {\n  %x: f32[2, 3] = input\n  %z: i64[2, 3] = aten.full_like.default(%x, fill_value=7, dtype=i64)\n  return %z\n}\n");
        assert!(
            out.contains("i64[2, 3] = aten.full.default(size=[2, 3], fill_value=7, dtype=i64)"),
            "{out}"
        );
    }

    #[test]
    fn keeps_type_changing_ops() {
        let out = canon("graph {\n  %x: i64[3] = input\n  %a: f32[3] = aten.mul.Scalar(%x, other=1.0)\n  %b: f32[3] = aten._to_copy.default(%a, dtype=f32)\n  return %b\n}\n");
        assert!(out.contains("aten.mul.Scalar"), "{out}");
        assert!(!out.contains("_to_copy"), "{out}");
    }

    #[test]
    fn folds_view_and_permute_chains() {
        let out = canon("graph {\n  %x: f32[2, 3, 4] = input\n  %a: f32[6, 4] = aten.view.default(%x, size=[6, 4])\n  %b: f32[24] = aten.view.default(%a, size=[24])\n  %p: f32[3, 4, 2] = aten.permute.default(%x, dims=[1, 2, 0])\n  %q: f32[2, 4, 3] = aten.permute.default(%p, dims=[2, 1, 0])\n  return %b, %q\n}\n");
        assert!(
            out.contains("%b: f32[24] = aten.view.default(%x, size=[24])"),
            "{out}"
        );
        assert!(
            out.contains("%q: f32[2, 4, 3] = aten.permute.default(%x, dims=[0, 2, 1])"),
            "{out}"
        );
        assert!(!out.contains("%a:") && !out.contains("%p:"), "{out}");
    }
}
