//! Transposes and permutes: compose, drop identities, and move them through elementwise ops
//! (both ways, so extraction can cancel them or gather them where they are cheapest).

use super::*;

/// The layout rules.
pub fn rules() -> Vec<Rule> {
    vec![
        rule(
            "permute-permute",
            "(aten.permute.default (aten.permute.default ?x ?p) ?q)",
            permute_permute,
        ),
        rule(
            "permute-identity",
            "(aten.permute.default ?x ?p)",
            permute_identity,
        ),
        rule(
            "permute-through-unary",
            "(aten.permute.default ?y ?p)",
            permute_through_unary,
        ),
        rule(
            "unary-through-permute",
            "(aten.relu.default (aten.permute.default ?x ?p))",
            unary_through_permute,
        ),
        rule(
            "permute-binary",
            "(aten.add.Tensor (aten.permute.default ?a ?p) (aten.permute.default ?b ?p) ?alpha)",
            permute_add,
        ),
        rule(
            "permute-binary-mul",
            "(aten.mul.Tensor (aten.permute.default ?a ?p) (aten.permute.default ?b ?p))",
            permute_mul,
        ),
    ]
}

/// `permute(permute(x, p), q) = permute(x, p∘q)`.
fn permute_permute(eg: &mut EGraph, _: Id, s: &Subst) -> Option<Id> {
    let x = at(s, "?x");
    let r = ty(eg, x)?.rank();
    let p = norm_perm(&ints(eg, at(s, "?p"))?, r)?;
    let q = norm_perm(&ints(eg, at(s, "?q"))?, r)?;
    let composed: Vec<i64> = q.iter().map(|&d| p[d] as i64).collect();
    let c = mk_attr(eg, AttrVal::Ints(composed));
    Some(mk(eg, Op::Permute, vec![x, c]))
}

/// `permute(x, [0, 1, ..]) = x`.
fn permute_identity(eg: &mut EGraph, _: Id, s: &Subst) -> Option<Id> {
    let x = at(s, "?x");
    let p = norm_perm(&ints(eg, at(s, "?p"))?, ty(eg, x)?.rank())?;
    p.iter().enumerate().all(|(i, &d)| i == d).then_some(x)
}

/// `permute(u(x), p) = u(permute(x, p))` for an elementwise `u` of one tensor.
fn permute_through_unary(eg: &mut EGraph, _: Id, s: &Subst) -> Option<Id> {
    let (y, p) = (at(s, "?y"), at(s, "?p"));
    let (op, cs) = eg[y].nodes.iter().find_map(|n| match n {
        ENode::Op(op, cs) if op.is_unary_elementwise() => Some((*op, cs.clone())),
        _ => None,
    })?;
    let px = mk(eg, Op::Permute, vec![cs[0], p]);
    let mut args = cs;
    args[0] = px;
    Some(mk(eg, op, args))
}

/// `relu(permute(x, p)) = permute(relu(x), p)` (gathers permutes toward their producers).
fn unary_through_permute(eg: &mut EGraph, _: Id, s: &Subst) -> Option<Id> {
    let (x, p) = (at(s, "?x"), at(s, "?p"));
    let r = mk(eg, Op::Relu, vec![x]);
    Some(mk(eg, Op::Permute, vec![r, p]))
}

fn same_shape(eg: &EGraph, a: Id, b: Id) -> Option<()> {
    (ty(eg, a)?.shape == ty(eg, b)?.shape).then_some(())
}

/// `permute(a, p) + permute(b, p) = permute(a + b, p)` when `a` and `b` have one shape.
fn permute_add(eg: &mut EGraph, _: Id, s: &Subst) -> Option<Id> {
    let (a, b, p, alpha) = (at(s, "?a"), at(s, "?b"), at(s, "?p"), at(s, "?alpha"));
    same_shape(eg, a, b)?;
    let sum = mk(eg, Op::AddTensor, vec![a, b, alpha]);
    Some(mk(eg, Op::Permute, vec![sum, p]))
}

/// `permute(a, p) * permute(b, p) = permute(a * b, p)` when `a` and `b` have one shape.
fn permute_mul(eg: &mut EGraph, _: Id, s: &Subst) -> Option<Id> {
    let (a, b, p) = (at(s, "?a"), at(s, "?b"), at(s, "?p"));
    same_shape(eg, a, b)?;
    let prod = mk(eg, Op::MulTensor, vec![a, b]);
    Some(mk(eg, Op::Permute, vec![prod, p]))
}
