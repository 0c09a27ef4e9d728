//! Reductions: scalar factors move out of sums and means, reductions read through permutes
//! when the kept dimensions stay in order, and reductions over size-1 dimensions are views.

use super::*;

/// The reduction rules.
pub fn rules() -> Vec<Rule> {
    vec![
        reassociating(
            "sum-pull-scalar",
            "(aten.sum.dim_IntList (aten.mul.Scalar ?x ?c) ?d ?k none)",
            |eg, _, s| pull_scalar(eg, s, Op::SumDimIntList),
        ),
        reassociating(
            "mean-pull-scalar",
            "(aten.mean.dim (aten.mul.Scalar ?x ?c) ?d ?k none)",
            |eg, _, s| pull_scalar(eg, s, Op::MeanDim),
        ),
        rule(
            "sum-of-permute",
            "(aten.sum.dim_IntList (aten.permute.default ?x ?p) ?d false none)",
            |eg, _, s| of_permute(eg, s, Op::SumDimIntList, true),
        ),
        rule(
            "mean-of-permute",
            "(aten.mean.dim (aten.permute.default ?x ?p) ?d false none)",
            |eg, _, s| of_permute(eg, s, Op::MeanDim, true),
        ),
        rule(
            "amax-of-permute",
            "(aten.amax.default (aten.permute.default ?x ?p) ?d false)",
            |eg, _, s| of_permute(eg, s, Op::Amax, false),
        ),
        rule(
            "sum-unit-dims",
            "(aten.sum.dim_IntList ?x ?d ?k none)",
            unit_dims,
        ),
        rule("mean-unit-dims", "(aten.mean.dim ?x ?d ?k none)", unit_dims),
        rule("amax-unit-dims", "(aten.amax.default ?x ?d ?k)", unit_dims),
    ]
}

/// `sum(x * c) = sum(x) * c` for float `x` (reassociates the products).
fn pull_scalar(eg: &mut EGraph, s: &Subst, op: Op) -> Option<Id> {
    let (x, c, d, k) = (at(s, "?x"), at(s, "?c"), at(s, "?d"), at(s, "?k"));
    if !is_float(&ty(eg, x)?) || !scalar(eg, c)?.is_finite() {
        return None;
    }
    let none = mk_attr(eg, AttrVal::None);
    let r = mk(eg, op, vec![x, d, k, none]);
    Some(mk(eg, Op::MulScalar, vec![r, c]))
}

/// Normalized, sorted reduction dims; `None` for "all dims" (absent or empty lists).
fn reduce_dims(eg: &EGraph, d: Id, rank: usize) -> Option<Vec<usize>> {
    let v = ints(eg, d)?;
    if v.is_empty() {
        return None;
    }
    let r = rank as i64;
    let mut out: Vec<usize> = v
        .iter()
        .map(|&x| if x < 0 { x + r } else { x })
        .map(|x| (0..r).contains(&x).then_some(x as usize))
        .collect::<Option<_>>()?;
    out.sort_unstable();
    out.dedup();
    Some(out)
}

/// `reduce(permute(x, p), d) = reduce(x, p[d])` when `keepdim` is false and the kept dims
/// appear in `x` in the same order as in the permuted tensor.
fn of_permute(eg: &mut EGraph, s: &Subst, op: Op, has_dtype: bool) -> Option<Id> {
    let (x, p, d) = (at(s, "?x"), at(s, "?p"), at(s, "?d"));
    let rank = ty(eg, x)?.rank();
    let p = norm_perm(&ints(eg, p)?, rank)?;
    let dims = reduce_dims(eg, d, rank)?;
    let kept: Vec<usize> = (0..rank)
        .filter(|i| !dims.contains(i))
        .map(|i| p[i])
        .collect();
    if !kept.windows(2).all(|w| w[0] < w[1]) {
        return None;
    }
    let mut new_dims: Vec<i64> = dims.iter().map(|&i| p[i] as i64).collect();
    new_dims.sort_unstable();
    let nd = mk_attr(eg, AttrVal::Ints(new_dims));
    let f = mk_attr(eg, AttrVal::Bool(false));
    let mut args = vec![x, nd, f];
    if has_dtype {
        args.push(mk_attr(eg, AttrVal::None));
    }
    Some(mk(eg, op, args))
}

/// A reduction over size-1 dims only moves no data: `x` with `keepdim`, a view without.
fn unit_dims(eg: &mut EGraph, id: Id, s: &Subst) -> Option<Id> {
    let (x, d) = (at(s, "?x"), at(s, "?d"));
    let t = ty(eg, x)?;
    let dims = reduce_dims(eg, d, t.rank())?;
    if !dims.iter().all(|&i| t.shape[i].as_static() == Some(1)) {
        return None;
    }
    let out = ty(eg, id)?;
    if out == t {
        return Some(x);
    }
    let size = mk_attr(eg, AttrVal::Ints(static_dims(&out)?));
    Some(mk(eg, Op::View, vec![x, size]))
}
