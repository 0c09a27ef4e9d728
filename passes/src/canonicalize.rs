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

// Tests: tests/filetests/canonicalize/*.fxir (input and expected IR side by side).
