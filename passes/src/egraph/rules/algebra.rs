//! Algebraic identities on elementwise ops. Exact in floating point unless noted; the ones
//! that reassociate (`mul-scalar-fold`) need a float dtype.

use super::*;

/// The algebra rules.
pub fn rules() -> Vec<Rule> {
    vec![
        rule(
            "neg-neg",
            "(aten.neg.default (aten.neg.default ?x))",
            neg_neg,
        ),
        rule("relu-relu", "(aten.relu.default ?y)", relu_relu),
        rule("add-self", "(aten.add.Tensor ?x ?x 1)", add_self),
        rule(
            "add-neg-to-sub",
            "(aten.add.Tensor ?a (aten.neg.default ?b) 1)",
            add_neg,
        ),
        rule("add-commute", "(aten.add.Tensor ?a ?b 1)", add_commute),
        rule("mul-commute", "(aten.mul.Tensor ?a ?b)", mul_commute),
        reassociating(
            "mul-scalar-fold",
            "(aten.mul.Scalar (aten.mul.Scalar ?x ?a) ?b)",
            mul_scalar_fold,
        ),
        rule("div-pow2-to-mul", "(aten.div.Scalar ?x ?c)", div_pow2),
        rule("pow2-to-mul", "(aten.pow.Tensor_Scalar ?x ?e)", pow2),
    ]
}

/// `-(-x) = x`.
fn neg_neg(_: &mut EGraph, _: Id, s: &Subst) -> Option<Id> {
    Some(at(s, "?x"))
}

/// `relu(relu(x)) = relu(x)`: the outer relu is the inner one.
fn relu_relu(eg: &mut EGraph, _: Id, s: &Subst) -> Option<Id> {
    let y = at(s, "?y");
    find_op(eg, y, Op::Relu).map(|_| y)
}

/// `x + x = x * 2` (exact for floats; integers too).
fn add_self(eg: &mut EGraph, _: Id, s: &Subst) -> Option<Id> {
    let x = at(s, "?x");
    ty(eg, x)?;
    let two = mk_attr(eg, AttrVal::Int(2));
    Some(mk(eg, Op::MulScalar, vec![x, two]))
}

/// `a + (-b) = a - b`.
fn add_neg(eg: &mut EGraph, _: Id, s: &Subst) -> Option<Id> {
    let (a, b) = (at(s, "?a"), at(s, "?b"));
    let one = mk_attr(eg, AttrVal::Int(1));
    Some(mk(eg, Op::SubTensor, vec![a, b, one]))
}

/// `a + b = b + a` (same broadcast shape and promoted dtype).
fn add_commute(eg: &mut EGraph, _: Id, s: &Subst) -> Option<Id> {
    let (a, b) = (at(s, "?a"), at(s, "?b"));
    let one = mk_attr(eg, AttrVal::Int(1));
    Some(mk(eg, Op::AddTensor, vec![b, a, one]))
}

/// `a * b = b * a`.
fn mul_commute(eg: &mut EGraph, _: Id, s: &Subst) -> Option<Id> {
    let (a, b) = (at(s, "?a"), at(s, "?b"));
    Some(mk(eg, Op::MulTensor, vec![b, a]))
}

/// `(x * a) * b = x * (a * b)` for a float `x` (reassociates: one rounding instead of two).
fn mul_scalar_fold(eg: &mut EGraph, _: Id, s: &Subst) -> Option<Id> {
    let x = at(s, "?x");
    let t = ty(eg, x)?;
    let (a, b) = (scalar(eg, at(s, "?a"))?, scalar(eg, at(s, "?b"))?);
    if !is_float(&t) || !(a * b).is_finite() {
        return None;
    }
    let c = mk_attr(eg, AttrVal::float(a * b));
    Some(mk(eg, Op::MulScalar, vec![x, c]))
}

/// `x / c = x * (1/c)` when `c` is a power of two, so `1/c` is exact (float `x`).
fn div_pow2(eg: &mut EGraph, _: Id, s: &Subst) -> Option<Id> {
    let x = at(s, "?x");
    let t = ty(eg, x)?;
    let c = scalar(eg, at(s, "?c"))?;
    let (m, _) = frexp(c);
    if !is_float(&t) || c == 0.0 || !c.is_finite() || m.abs() != 0.5 {
        return None;
    }
    let r = mk_attr(eg, AttrVal::float(1.0 / c));
    Some(mk(eg, Op::MulScalar, vec![x, r]))
}

/// Mantissa and exponent: `x = m * 2^e` with `0.5 <= |m| < 1`.
fn frexp(x: f64) -> (f64, i32) {
    if x == 0.0 || !x.is_finite() {
        return (x, 0);
    }
    let e = x.abs().log2().floor() as i32 + 1;
    (x / 2f64.powi(e), e)
}

/// `x ** 2 = x * x` (float `x`; one correctly rounded product either way).
fn pow2(eg: &mut EGraph, _: Id, s: &Subst) -> Option<Id> {
    let x = at(s, "?x");
    let t = ty(eg, x)?;
    if !is_float(&t) || scalar(eg, at(s, "?e"))? != 2.0 {
        return None;
    }
    Some(mk(eg, Op::MulTensor, vec![x, x]))
}
