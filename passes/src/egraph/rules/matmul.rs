//! Matmul patterns: bias adds become `addmm`, scalar multiplications move through matmuls
//! (both ways; extraction keeps the side with fewer elements), and transposes move through
//! matmuls (`AᵀBᵀ = (BA)ᵀ`).

use super::*;

/// The matmul rules.
pub fn rules() -> Vec<Rule> {
    vec![
        reassociating(
            "mm-bias-to-addmm",
            "(aten.add.Tensor (aten.mm.default ?a ?b) ?c 1)",
            mm_bias,
        ),
        reassociating(
            "mm-pull-scalar-lhs",
            "(aten.mm.default (aten.mul.Scalar ?a ?s) ?b)",
            pull_lhs_mm,
        ),
        reassociating(
            "mm-pull-scalar-rhs",
            "(aten.mm.default ?a (aten.mul.Scalar ?b ?s))",
            pull_rhs_mm,
        ),
        reassociating(
            "bmm-pull-scalar-lhs",
            "(aten.bmm.default (aten.mul.Scalar ?a ?s) ?b)",
            pull_lhs_bmm,
        ),
        reassociating(
            "bmm-pull-scalar-rhs",
            "(aten.bmm.default ?a (aten.mul.Scalar ?b ?s))",
            pull_rhs_bmm,
        ),
        reassociating(
            "mm-push-scalar",
            "(aten.mul.Scalar (aten.mm.default ?a ?b) ?s)",
            push_mm,
        ),
        reassociating(
            "bmm-push-scalar",
            "(aten.mul.Scalar (aten.bmm.default ?a ?b) ?s)",
            push_bmm,
        ),
        rule(
            "mm-transposes",
            "(aten.mm.default (aten.permute.default ?a ?p) (aten.permute.default ?b ?q))",
            mm_transposes,
        ),
        rule(
            "transpose-of-mm",
            "(aten.permute.default (aten.mm.default ?a ?b) ?p)",
            transpose_of_mm,
        ),
        rule(
            "transpose-of-bmm",
            "(aten.permute.default (aten.bmm.default ?a ?b) ?p)",
            transpose_of_bmm,
        ),
    ]
}

/// `mm(a, b) + c = addmm(c, a, b)` when `c` has the matmul's dtype and broadcasts to its shape.
fn mm_bias(eg: &mut EGraph, id: Id, s: &Subst) -> Option<Id> {
    let (a, b, c) = (at(s, "?a"), at(s, "?b"), at(s, "?c"));
    let out = ty(eg, id)?;
    let ct = ty(eg, c)?;
    if ct.dtype != out.dtype || ct.rank() > 2 || !is_float(&out) {
        return None;
    }
    let one = mk_attr(eg, AttrVal::Int(1));
    Some(mk(eg, Op::Addmm, vec![c, a, b, one, one]))
}

/// The scalar of `?s` if the matmul's inputs are floats of one dtype.
fn float_scalar(eg: &EGraph, s: &Subst) -> Option<()> {
    let (a, b) = (ty(eg, at(s, "?a"))?, ty(eg, at(s, "?b"))?);
    scalar(eg, at(s, "?s"))?;
    (is_float(&a) && a.dtype == b.dtype).then_some(())
}

fn pull(eg: &mut EGraph, s: &Subst, op: Op) -> Option<Id> {
    float_scalar(eg, s)?;
    let m = mk(eg, op, vec![at(s, "?a"), at(s, "?b")]);
    Some(mk(eg, Op::MulScalar, vec![m, at(s, "?s")]))
}

/// `mm(a*s, b) = mm(a, b)*s`.
fn pull_lhs_mm(eg: &mut EGraph, _: Id, s: &Subst) -> Option<Id> {
    pull(eg, s, Op::Mm)
}

/// `mm(a, b*s) = mm(a, b)*s`.
fn pull_rhs_mm(eg: &mut EGraph, _: Id, s: &Subst) -> Option<Id> {
    pull(eg, s, Op::Mm)
}

/// `bmm(a*s, b) = bmm(a, b)*s`.
fn pull_lhs_bmm(eg: &mut EGraph, _: Id, s: &Subst) -> Option<Id> {
    pull(eg, s, Op::Bmm)
}

/// `bmm(a, b*s) = bmm(a, b)*s`.
fn pull_rhs_bmm(eg: &mut EGraph, _: Id, s: &Subst) -> Option<Id> {
    pull(eg, s, Op::Bmm)
}

fn push(eg: &mut EGraph, s: &Subst, op: Op) -> Option<Id> {
    float_scalar(eg, s)?;
    let (a, b) = (at(s, "?a"), at(s, "?b"));
    // Scale the smaller operand.
    let (na, nb) = (ty(eg, a)?.numel()?, ty(eg, b)?.numel()?);
    let args = if na <= nb {
        let sa = mk(eg, Op::MulScalar, vec![a, at(s, "?s")]);
        vec![sa, b]
    } else {
        let sb = mk(eg, Op::MulScalar, vec![b, at(s, "?s")]);
        vec![a, sb]
    };
    Some(mk(eg, op, args))
}

/// `mm(a, b)*s = mm(a*s, b)` (or `mm(a, b*s)`, scaling the smaller operand).
fn push_mm(eg: &mut EGraph, _: Id, s: &Subst) -> Option<Id> {
    push(eg, s, Op::Mm)
}

/// `bmm(a, b)*s = bmm(a*s, b)` (or the other operand, whichever is smaller).
fn push_bmm(eg: &mut EGraph, _: Id, s: &Subst) -> Option<Id> {
    push(eg, s, Op::Bmm)
}

fn is_transpose(eg: &EGraph, p: Id, rank: usize) -> bool {
    let want: Vec<usize> = match rank {
        2 => vec![1, 0],
        3 => vec![0, 2, 1],
        _ => return false,
    };
    ints(eg, p).and_then(|p| norm_perm(&p, rank)) == Some(want)
}

/// `mm(aᵀ, bᵀ) = (b·a)ᵀ`.
fn mm_transposes(eg: &mut EGraph, _: Id, s: &Subst) -> Option<Id> {
    let (a, b, p, q) = (at(s, "?a"), at(s, "?b"), at(s, "?p"), at(s, "?q"));
    if !is_transpose(eg, p, 2) || !is_transpose(eg, q, 2) {
        return None;
    }
    let m = mk(eg, Op::Mm, vec![b, a]);
    Some(mk(eg, Op::Permute, vec![m, p]))
}

fn transpose_of(eg: &mut EGraph, s: &Subst, op: Op, rank: usize) -> Option<Id> {
    let (a, b, p) = (at(s, "?a"), at(s, "?b"), at(s, "?p"));
    if !is_transpose(eg, p, rank) {
        return None;
    }
    let bt = mk(eg, Op::Permute, vec![b, p]);
    let at_ = mk(eg, Op::Permute, vec![a, p]);
    Some(mk(eg, op, vec![bt, at_]))
}

/// `(a·b)ᵀ = bᵀ·aᵀ`.
fn transpose_of_mm(eg: &mut EGraph, _: Id, s: &Subst) -> Option<Id> {
    transpose_of(eg, s, Op::Mm, 2)
}

/// Batched `(a·b)ᵀ = bᵀ·aᵀ` (transposing the last two dimensions).
fn transpose_of_bmm(eg: &mut EGraph, _: Id, s: &Subst) -> Option<Id> {
    transpose_of(eg, s, Op::Bmm, 3)
}
