//! Reductions and ops along one dimension: sum, mean, prod, amax/amin, any, var, argmax/argmin,
//! max/min with indices, cumsum, softmax, sort, topk.

use super::elementwise::{fmax_nan, fmin_nan};
use super::tensor::{lanes, numel, permute_map, Data, Tensor, R};
use super::{norm_dim, to_usize, Ctx};
use fxhlo_ir::DType;
use std::cmp::Ordering;

/// A tensor laid out for reduction: `outer` groups of `r` consecutive elements, one group per
/// output element, and the output shape.
struct Plan {
    data: Tensor,
    outer: usize,
    r: usize,
    out_shape: Vec<usize>,
}

/// Lays `t` out so that the dimensions to reduce (`None` or empty: all) come last.
fn plan(t: &Tensor, dims: Option<&[i64]>, keepdim: bool) -> R<Plan> {
    let rank = t.rank();
    let all = dims.is_none_or(|d| d.is_empty());
    let mut mask = vec![all; rank];
    if !all {
        for &d in dims.into_iter().flatten() {
            let d = norm_dim(d, rank)?;
            if rank > 0 {
                mask[d] = true;
            }
        }
    }
    let kept: Vec<usize> = (0..rank).filter(|&i| !mask[i]).collect();
    let red: Vec<usize> = (0..rank).filter(|&i| mask[i]).collect();
    let perm: Vec<usize> = kept.iter().chain(&red).copied().collect();
    let map = permute_map(&t.shape, &perm);
    let outer = numel(&kept.iter().map(|&i| t.shape[i]).collect::<Vec<_>>());
    let r = numel(&red.iter().map(|&i| t.shape[i]).collect::<Vec<_>>());
    let out_shape = (0..rank)
        .filter_map(|i| match (mask[i], keepdim) {
            (false, _) => Some(t.shape[i]),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect();
    Ok(Plan {
        data: t.take(vec![t.numel()], &map),
        outer,
        r,
        out_shape,
    })
}

fn dims_arg(cx: &Ctx) -> R<Option<Vec<i64>>> {
    if cx.has("dim") {
        cx.opt_ints("dim")
    } else {
        Ok(None)
    }
}

fn keepdim(cx: &Ctx) -> R<bool> {
    if cx.has("keepdim") {
        cx.bool("keepdim")
    } else {
        Ok(false)
    }
}

/// Reduces groups of floats with `f` and integers with `g`, in the result dtype.
fn reduce_with(cx: &Ctx, f: impl Fn(&[f64]) -> f64, g: impl Fn(&[i64]) -> i64) -> R<Tensor> {
    let d = cx.out_dtype();
    let x = cx.t("self")?.cast(d);
    let p = plan(&x, dims_arg(cx)?.as_deref(), keepdim(cx)?)?;
    if d.is_float() {
        let v = p.data.f64s();
        let out = (0..p.outer)
            .map(|o| f(&v[o * p.r..(o + 1) * p.r]))
            .collect();
        Ok(Tensor::from_f64s(d, p.out_shape, out))
    } else {
        let v = p.data.i64s();
        let out = (0..p.outer)
            .map(|o| g(&v[o * p.r..(o + 1) * p.r]))
            .collect();
        Ok(Tensor::from_i64s(d, p.out_shape, out))
    }
}

/// `sum.dim_IntList`: integers and bool accumulate in i64 (wrapping).
pub(crate) fn sum(cx: &Ctx) -> R<Tensor> {
    reduce_with(
        cx,
        |v| v.iter().sum(),
        |v| v.iter().fold(0i64, |a, &b| a.wrapping_add(b)),
    )
}

/// `prod`, `prod.dim_int`.
pub(crate) fn prod(cx: &Ctx) -> R<Tensor> {
    reduce_with(
        cx,
        |v| v.iter().product(),
        |v| v.iter().fold(1i64, |a, &b| a.wrapping_mul(b)),
    )
}

/// `mean`, `mean.dim`: the mean of an empty set is NaN.
pub(crate) fn mean(cx: &Ctx) -> R<Tensor> {
    reduce_with(
        cx,
        |v| v.iter().sum::<f64>() / v.len() as f64,
        |v| v.iter().sum::<i64>() / (v.len().max(1) as i64),
    )
}

/// `amax`/`amin`: NaN propagates; reducing an empty dimension is an error.
pub(crate) fn amax_amin(cx: &Ctx, max: bool) -> R<Tensor> {
    let x = cx.t("self")?;
    let p = plan(x, dims_arg(cx)?.as_deref(), keepdim(cx)?)?;
    if p.r == 0 && p.outer > 0 {
        return Err(
            "cannot reduce over a dimension of size zero (the result has no identity)".into(),
        );
    }
    reduce_with(
        cx,
        |v| {
            v.iter()
                .copied()
                .reduce(if max { fmax_nan } else { fmin_nan })
                .unwrap_or(f64::NAN)
        },
        |v| {
            let it = v.iter().copied();
            if max { it.max() } else { it.min() }.unwrap_or(0)
        },
    )
}

/// `any`, `any.dim`, `any.dims`.
pub(crate) fn any(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    let b = Tensor::from_bools(DType::Bool, x.shape.clone(), x.bools());
    let p = plan(&b, dims_arg(cx)?.as_deref(), keepdim(cx)?)?;
    let v = p.data.bools();
    let out = (0..p.outer)
        .map(|o| v[o * p.r..(o + 1) * p.r].iter().any(|&b| b))
        .collect();
    Ok(Tensor::from_bools(cx.out_dtype(), p.out_shape, out))
}

/// `var.correction`, `var.dim`: `sum((x - mean)^2) / max(0, n - correction)`.
pub(crate) fn var(cx: &Ctx) -> R<Tensor> {
    let corr = if cx.has("correction") {
        cx.opt_scalar("correction")?.map_or(1.0, |s| s.f64())
    } else if cx.bool("unbiased")? {
        1.0
    } else {
        0.0
    };
    reduce_with(
        cx,
        |v| {
            let n = v.len() as f64;
            let m = v.iter().sum::<f64>() / n;
            let ss: f64 = v.iter().map(|x| (x - m) * (x - m)).sum();
            ss / (n - corr).max(0.0)
        },
        |_| 0,
    )
}

/// Index of the first maximum (or minimum) in `v`; a NaN wins (the first one). (The fast
/// runtime's arg-reductions are tested against it.)
pub(crate) fn best_f(v: &[f64], max: bool) -> usize {
    let mut best = 0;
    for j in 1..v.len() {
        let (b, x) = (v[best], v[j]);
        if b.is_nan() {
            break;
        }
        if x.is_nan() || (max && x > b) || (!max && x < b) {
            best = j;
        }
    }
    best
}

fn best_i(v: &[i64], max: bool) -> usize {
    let mut best = 0;
    for j in 1..v.len() {
        if (max && v[j] > v[best]) || (!max && v[j] < v[best]) {
            best = j;
        }
    }
    best
}

/// Per group: the position of the best element within the group.
fn best_positions(p: &Plan, max: bool) -> R<Vec<usize>> {
    if p.r == 0 && p.outer > 0 {
        return Err("cannot reduce over a dimension of size zero".into());
    }
    Ok(match &p.data.data {
        Data::F(v) => (0..p.outer)
            .map(|o| best_f(&v[o * p.r..(o + 1) * p.r], max))
            .collect(),
        _ => {
            let v = p.data.i64s();
            (0..p.outer)
                .map(|o| best_i(&v[o * p.r..(o + 1) * p.r], max))
                .collect()
        }
    })
}

/// `argmax`/`argmin`: first occurrence; no `dim` means over the flattened tensor.
pub(crate) fn argmax_argmin(cx: &Ctx, max: bool) -> R<Tensor> {
    let x = cx.t("self")?;
    let keep = cx.bool("keepdim")?;
    let p = match cx.opt_int("dim")? {
        Some(d) => plan(x, Some(&[d]), keep)?,
        None => {
            let mut p = plan(x, None, keep)?;
            if !keep {
                p.out_shape = vec![];
            }
            p
        }
    };
    let best = best_positions(&p, max)?;
    let v = best.into_iter().map(|b| b as i64).collect();
    Ok(Tensor::from_i64s(DType::I64, p.out_shape, v))
}

/// `max.dim`/`min.dim`: values and the index of the first best element (NaN wins).
pub(crate) fn max_min_dim(cx: &Ctx, max: bool) -> R<Vec<Tensor>> {
    let x = cx.t("self")?;
    let p = plan(x, Some(&[cx.int("dim")?]), cx.bool("keepdim")?)?;
    let best = best_positions(&p, max)?;
    let idx: Vec<usize> = best.iter().enumerate().map(|(o, &b)| o * p.r + b).collect();
    let values = p.data.take(p.out_shape.clone(), &idx);
    let indices = Tensor::from_i64s(
        DType::I64,
        p.out_shape,
        best.into_iter().map(|b| b as i64).collect(),
    );
    Ok(vec![values, indices])
}

/// `cumsum`/`cumprod(self, dim, dtype)` (`prod`): floats accumulate in `f64` with each prefix
/// rounded to the result dtype (as ATen's CPU kernels accumulate in double), integers wrap.
pub(crate) fn cumulative(cx: &Ctx, prod: bool) -> R<Tensor> {
    let d = cx.out_dtype();
    let x = cx.t("self")?.cast(d);
    let dim = norm_dim(cx.int("dim")?, x.rank())?;
    let (outer, len, inner) = lanes(&x.shape, dim);
    let at = |o: usize, i: usize, n: usize| (o * len + i) * inner + n;
    if d.is_float() {
        let v = x.f64s();
        let mut out = vec![0.0; v.len()];
        for o in 0..outer {
            for n in 0..inner {
                let mut acc = if prod { 1.0 } else { 0.0 };
                for i in 0..len {
                    let e = v[at(o, i, n)];
                    acc = if prod { acc * e } else { acc + e };
                    out[at(o, i, n)] = acc;
                }
            }
        }
        Ok(Tensor::from_f64s(d, x.shape, out))
    } else {
        let v = x.i64s();
        let mut out = vec![0; v.len()];
        for o in 0..outer {
            for n in 0..inner {
                let mut acc = i64::from(prod);
                for i in 0..len {
                    let e = v[at(o, i, n)];
                    acc = if prod {
                        acc.wrapping_mul(e)
                    } else {
                        acc.wrapping_add(e)
                    };
                    out[at(o, i, n)] = acc;
                }
            }
        }
        Ok(Tensor::from_i64s(d, x.shape, out))
    }
}

/// `cummax`/`cummin(self, dim)` (`max`): the running extremum and the index it came from; as
/// ATen, an element equal to the running one takes its place (the later index), and NaN takes
/// the place of anything (a later NaN too).
pub(crate) fn cumulative_extremum(cx: &Ctx, max: bool) -> R<Vec<Tensor>> {
    let x = cx.t("self")?;
    let dim = norm_dim(cx.int("dim")?, x.rank())?;
    let (outer, len, inner) = lanes(&x.shape, dim);
    let at = |o: usize, i: usize, n: usize| (o * len + i) * inner + n;
    let v = x.f64s();
    let ints = x.i64s();
    let float = x.dtype.is_float();
    let mut src = vec![0usize; v.len()];
    let mut ind = vec![0i64; v.len()];
    for o in 0..outer {
        for n in 0..inner {
            let mut best = 0;
            for i in 0..len {
                let (e, b) = (at(o, i, n), at(o, best, n));
                let take = if float {
                    let (xe, xb) = (v[e], v[b]);
                    xe.is_nan() || (!xb.is_nan() && if max { xe >= xb } else { xe <= xb })
                } else if max {
                    ints[e] >= ints[b]
                } else {
                    ints[e] <= ints[b]
                };
                if i == 0 || take {
                    best = i;
                }
                src[e] = at(o, best, n);
                ind[e] = best as i64;
            }
        }
    }
    Ok(vec![
        x.take(x.shape.clone(), &src),
        Tensor::from_i64s(DType::I64, x.shape.clone(), ind),
    ])
}

/// The `bins + 1` edges of `histc` as ATen's `linspace` computes them in dtype `d`: the first
/// half counted up from `lo`, the second down from `hi`, each step rounded to `d`.
pub(crate) fn histc_edges(d: DType, lo: f64, hi: f64, bins: usize) -> Vec<f64> {
    let r = |x: f64| super::tensor::round_float(d, x);
    let step = r((hi - lo) / bins as f64);
    let half = bins.div_ceil(2);
    (0..=bins)
        .map(|i| {
            if i < half {
                r(lo + r(step * i as f64))
            } else {
                r(hi - r(step * (bins - i) as f64))
            }
        })
        .collect()
}

/// `histc(self, bins, min, max)`: counts of the elements in `bins` equal bins over `[min, max]`
/// (the data's own range where `min == max`, widened by 1 each side if that is one value);
/// elements outside the range and NaN are not counted, the last bin includes its right edge.
pub(crate) fn histc(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    let d = cx.out_dtype();
    let bins = to_usize(cx.int("bins")?, "bins")?;
    let r = |v: f64| super::tensor::round_float(d, v);
    let (mut lo, mut hi) = (r(cx.scalar("min")?.f64()), r(cx.scalar("max")?.f64()));
    let v = x.f64s();
    if lo == hi && !v.is_empty() {
        lo = v.iter().copied().fold(f64::INFINITY, fmin_nan);
        hi = v.iter().copied().fold(f64::NEG_INFINITY, fmax_nan);
    }
    if lo == hi {
        lo -= 1.0;
        hi += 1.0;
    }
    if !(lo.is_finite() && hi.is_finite()) {
        return Err(format!("range of [{lo}, {hi}] is not finite"));
    }
    if lo > hi {
        return Err(format!("max ({hi}) must be larger than min ({lo})"));
    }
    let edges = histc_edges(d, lo, hi, bins);
    let mut counts = vec![0.0; bins];
    for &e in &v {
        if !(e >= lo && e <= hi) {
            continue;
        }
        let pos = edges.partition_point(|&b| b <= e).saturating_sub(1);
        counts[pos.min(bins - 1)] += 1.0;
    }
    Ok(Tensor::from_f64s(d, vec![bins], counts))
}

/// `_softmax`/`_log_softmax(self, dim, half_to_float)`: subtracts the lane maximum first.
pub(crate) fn softmax(cx: &Ctx, log: bool) -> R<Tensor> {
    let x = cx.t("self")?;
    let d = cx.out_dtype();
    let dim = norm_dim(cx.int("dim")?, x.rank())?;
    let (outer, len, inner) = lanes(&x.shape, dim);
    let at = |o: usize, i: usize, n: usize| (o * len + i) * inner + n;
    let v = x.f64s();
    let mut out = vec![0.0; v.len()];
    for o in 0..outer {
        for n in 0..inner {
            let m = (0..len)
                .map(|i| v[at(o, i, n)])
                .reduce(fmax_nan)
                .unwrap_or(0.0);
            let s: f64 = (0..len).map(|i| (v[at(o, i, n)] - m).exp()).sum();
            for i in 0..len {
                let k = at(o, i, n);
                out[k] = if log {
                    v[k] - m - s.ln()
                } else {
                    (v[k] - m).exp() / s
                };
            }
        }
    }
    Ok(Tensor::from_f64s(d, x.shape.clone(), out))
}

/// Orders floats with NaN above everything (as torch's sort and topk do).
fn cmp_nan_last(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

/// For each lane along `dim`, the lane positions in stable sorted order.
fn sorted_lanes(x: &Tensor, dim: usize, descending: bool) -> Vec<Vec<usize>> {
    let (outer, len, inner) = lanes(&x.shape, dim);
    let at = |o: usize, i: usize, n: usize| (o * len + i) * inner + n;
    let f = match &x.data {
        Data::F(v) => Some(v.clone()),
        _ => None,
    };
    let ints = x.i64s();
    let mut out = Vec::with_capacity(outer * inner);
    if x.numel() == 0 {
        return out;
    }
    for o in 0..outer {
        for n in 0..inner {
            let mut pos: Vec<usize> = (0..len).collect();
            pos.sort_by(|&a, &b| {
                let c = match &f {
                    Some(v) => cmp_nan_last(v[at(o, a, n)], v[at(o, b, n)]),
                    None => ints[at(o, a, n)].cmp(&ints[at(o, b, n)]),
                };
                if descending {
                    c.reverse()
                } else {
                    c
                }
            });
            out.push(pos);
        }
    }
    out
}

/// Gathers the first `k` sorted positions of each lane into values and indices of `shape`.
fn gather_sorted(x: &Tensor, dim: usize, k: usize, sorted: &[Vec<usize>]) -> Vec<Tensor> {
    let (_, len, inner) = lanes(&x.shape, dim);
    let mut shape = x.shape.clone();
    if !shape.is_empty() {
        shape[dim] = k;
    }
    let n_out = numel(&shape);
    let mut src = vec![0usize; n_out];
    let mut ind = vec![0i64; n_out];
    for (lane, pos) in sorted.iter().enumerate() {
        let (o, n) = (lane / inner.max(1), lane % inner.max(1));
        for (i, &p) in pos.iter().take(k).enumerate() {
            let dst = (o * k + i) * inner + n;
            src[dst] = (o * len + p) * inner + n;
            ind[dst] = p as i64;
        }
    }
    vec![
        x.take(shape.clone(), &src),
        Tensor::from_i64s(DType::I64, shape, ind),
    ]
}

/// `sort(self, dim, descending)`: stable; NaN sorts as the largest value.
pub(crate) fn sort(cx: &Ctx) -> R<Vec<Tensor>> {
    let x = cx.t("self")?;
    let dim = norm_dim(cx.int("dim")?, x.rank())?;
    let s = sorted_lanes(x, dim, cx.bool("descending")?);
    let len = lanes(&x.shape, dim).1;
    Ok(gather_sorted(x, dim, len, &s))
}

/// `topk(self, k, dim, largest, sorted)`: always sorted; ties keep the lower index first.
pub(crate) fn topk(cx: &Ctx) -> R<Vec<Tensor>> {
    let x = cx.t("self")?;
    let dim = norm_dim(cx.int("dim")?, x.rank())?;
    let k = to_usize(cx.int("k")?, "k")?;
    let len = lanes(&x.shape, dim).1;
    if k > len {
        return Err(format!("k={k} is larger than the dimension size {len}"));
    }
    let s = sorted_lanes(x, dim, cx.bool("largest")?);
    Ok(gather_sorted(x, dim, k, &s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nan_counts_as_the_best_element() {
        assert_eq!(best_f(&[1.0, 3.0, 3.0], true), 1);
        assert_eq!(best_f(&[1.0, f64::NAN, 9.0, f64::NAN], true), 1);
        assert_eq!(best_f(&[1.0, f64::NAN, -9.0], false), 1);
        assert_eq!(best_i(&[2, 0, 0], false), 1);
        assert_eq!(cmp_nan_last(f64::NAN, f64::INFINITY), Ordering::Greater);
        assert_eq!(cmp_nan_last(-0.0, 0.0), Ordering::Equal);
    }

    #[test]
    fn reduction_layout_moves_reduced_dims_last() {
        let t = Tensor::from_i64s(DType::I64, vec![2, 3], (0..6).collect());
        let p = plan(&t, Some(&[0]), false).unwrap();
        assert_eq!((p.outer, p.r, p.out_shape.clone()), (3, 2, vec![3]));
        assert_eq!(p.data.i64s(), vec![0, 3, 1, 4, 2, 5]);
        let p = plan(&t, None, true).unwrap();
        assert_eq!((p.outer, p.r, p.out_shape), (1, 6, vec![1, 1]));
        assert!(plan(&t, Some(&[2]), false).is_err());
    }
}
