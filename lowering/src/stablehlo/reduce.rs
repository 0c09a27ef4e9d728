//! Reductions: `sum`, `mean`, `prod`, `amax`/`amin`, `any`, `argmax`/`argmin`, `max.dim`/
//! `min.dim`, `var` and `cumsum`, with half types accumulated in f32.

use super::emitter::{Em, Num, V};
use super::{norm_dim, opmath, Cx, R};
use fxhlo_ir::{Arg, DType};

/// The reduced dims of `dim` (None or empty: all dims), sorted and deduplicated.
pub(crate) fn reduce_dims(dims: Option<Vec<i64>>, rank: usize) -> R<Vec<usize>> {
    let dims = dims.unwrap_or_default();
    if dims.is_empty() {
        return Ok((0..rank).collect());
    }
    let mut out = vec![];
    for d in dims {
        let d = norm_dim(d, rank)?;
        if rank > 0 && !out.contains(&d) {
            out.push(d);
        }
    }
    out.sort();
    Ok(out)
}

fn dims_of(cx: &Cx) -> R<Vec<usize>> {
    let x = cx.t("self")?;
    let op = cx.node.op().expect("op node");
    let dims = if op.param_index("dim").is_none() {
        None
    } else {
        match cx.node.arg("dim") {
            Some(Arg::Int(d)) => Some(vec![*d]),
            _ => cx.opt_ints("dim")?,
        }
    };
    reduce_dims(dims, x.rank())
}

/// Identity of a reduction in dtype `d`.
pub(crate) fn init_max(d: DType, max: bool) -> Num {
    if d.is_float() {
        Num::F(if max {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        })
    } else if d == DType::Bool {
        Num::B(!max)
    } else {
        let (lo, hi) = match d {
            DType::I64 => (i64::MIN, i64::MAX),
            DType::I32 => (i32::MIN as i64, i32::MAX as i64),
            DType::I16 => (i16::MIN as i64, i16::MAX as i64),
            DType::I8 => (i8::MIN as i64, i8::MAX as i64),
            _ => (0, 255),
        };
        Num::I(if max { lo } else { hi })
    }
}

/// `reduce` with one op, then reshaped to `out_shape` (keepdim).
pub(crate) fn reduce_op(
    em: &mut Em,
    x: &V,
    dims: &[usize],
    op: &str,
    init: Num,
    out_shape: &[i64],
) -> V {
    let i = em.scalar(x.dtype, init);
    let r = em.reduce1(x, &i, dims, op);
    em.reshape(&r, out_shape)
}

/// Shape of `x` with `dims` kept as size 1.
pub(crate) fn keep_shape(x: &V, dims: &[usize]) -> Vec<i64> {
    (0..x.rank())
        .map(|d| if dims.contains(&d) { 1 } else { x.shape[d] })
        .collect()
}

/// `sum` (and `mean` when `mean`).
pub(crate) fn sum(cx: &mut Cx, mean: bool) -> R<V> {
    let x = cx.t("self")?;
    let dims = dims_of(cx)?;
    let od = cx.out_dtype(0);
    let os = cx.out_shape(0)?;
    let em = &mut *cx.em;
    let acc = opmath(od);
    let xc = em.convert(&x, acc);
    let mut r = reduce_op(em, &xc, &dims, "add", Num::I(0), &os);
    if mean {
        let n: i64 = dims.iter().map(|&d| x.shape[d]).product();
        let c = em.splat_like(&r, Num::I(n));
        r = em.div(&r, &c);
    }
    Ok(r)
}

/// `prod`.
pub(crate) fn prod(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let dims = dims_of(cx)?;
    let od = cx.out_dtype(0);
    let os = cx.out_shape(0)?;
    let em = &mut *cx.em;
    let xc = em.convert(&x, opmath(od));
    Ok(reduce_op(em, &xc, &dims, "multiply", Num::I(1), &os))
}

/// `amax`/`amin` (NaN propagates).
pub(crate) fn extremum(cx: &mut Cx, max: bool) -> R<V> {
    let x = cx.t("self")?;
    let dims = dims_of(cx)?;
    let os = cx.out_shape(0)?;
    let em = &mut *cx.em;
    let (op, init) = if max {
        ("maximum", init_max(x.dtype, true))
    } else {
        ("minimum", init_max(x.dtype, false))
    };
    Ok(reduce_op(em, &x, &dims, op, init, &os))
}

/// `any`.
pub(crate) fn any(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let dims = dims_of(cx)?;
    let os = cx.out_shape(0)?;
    let em = &mut *cx.em;
    let b = em.convert(&x, DType::Bool);
    Ok(reduce_op(em, &b, &dims, "or", Num::B(false), &os))
}

/// Value and index of the max (or min) of `x` along `dim`, NaN counting as the extreme and
/// ties going to the smaller index, as in PyTorch.
pub(crate) fn arg_reduce(em: &mut Em, x: &V, dim: usize, max: bool) -> (V, V) {
    let idx = em.iota(DType::I64, &x.shape, dim);
    let iv = em.scalar(x.dtype, init_max(x.dtype, max));
    let ii = em.scalar(DType::I64, Num::I(0));
    let dir = if max { "GT" } else { "LT" };
    let float = x.dtype.is_float();
    let r = em.reduce(&[x.clone(), idx], &[iv, ii], &[dim], |em, acc, new| {
        let (a, ai, b, bi) = (&acc[0], &acc[1], &new[0], &new[1]);
        let mut pick_a = em.compare(dir, a, b);
        if float {
            let nan = em.compare("NE", a, a);
            pick_a = em.binary("or", &pick_a, &nan);
        }
        let eq = em.compare("EQ", a, b);
        let lt = em.compare("LT", ai, bi);
        let tie = em.binary("and", &eq, &lt);
        let pick_i = em.binary("or", &pick_a, &tie);
        let v = em.select(&pick_a, a, b);
        let i = em.select(&pick_i, ai, bi);
        vec![v, i]
    });
    (r[0].clone(), r[1].clone())
}

/// `argmax`/`argmin` (no dim: over the flattened tensor).
pub(crate) fn arg(cx: &mut Cx, max: bool) -> R<V> {
    let x = cx.t("self")?;
    let dim = cx.opt_int("dim")?;
    let os = cx.out_shape(0)?;
    let em = &mut *cx.em;
    let (x, d) = match dim {
        Some(d) if x.rank() > 0 => {
            let d = norm_dim(d, x.rank())?;
            (x, d)
        }
        _ => {
            let n = x.numel();
            (em.reshape(&x, &[n]), 0)
        }
    };
    let (_, i) = arg_reduce(em, &x, d, max);
    Ok(em.reshape(&i, &os))
}

/// `max.dim`/`min.dim`: values and indices.
pub(crate) fn values_indices(cx: &mut Cx, max: bool) -> R<Vec<V>> {
    let x = cx.t("self")?;
    let os = cx.out_shape(0)?;
    let dim_arg = cx.int("dim");
    let em = &mut *cx.em;
    if x.rank() == 0 {
        let z = em.scalar(DType::I64, Num::I(0));
        return Ok(vec![x, z]);
    }
    let d = norm_dim(dim_arg?, x.rank())?;
    let (v, i) = arg_reduce(em, &x, d, max);
    let v = em.reshape(&v, &os);
    let i = em.reshape(&i, &os);
    Ok(vec![v, i])
}

/// `var.correction`/`var.dim`: `sum((x - mean)^2) / max(N - correction, 0)`.
pub(crate) fn var(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let dims = dims_of(cx)?;
    let os = cx.out_shape(0)?;
    let op = cx.node.op().expect("op node");
    let correction = if op.param_index("unbiased").is_some() {
        if cx.bool("unbiased")? {
            1.0
        } else {
            0.0
        }
    } else {
        cx.opt_num("correction")?.map_or(1.0, Num::f64)
    };
    let em = &mut *cx.em;
    let xc = em.convert(&x, opmath(x.dtype));
    let ks = keep_shape(&xc, &dims);
    let n: i64 = dims.iter().map(|&d| x.shape[d]).product();
    let s = reduce_op(em, &xc, &dims, "add", Num::I(0), &ks);
    let nv = em.splat_like(&s, Num::I(n));
    let m = em.div(&s, &nv);
    let mb = em.bcast_to(&m, &xc.shape);
    let d = em.sub(&xc, &mb);
    let d2 = em.mul(&d, &d);
    let ss = reduce_op(em, &d2, &dims, "add", Num::I(0), &os);
    let den = em.splat_like(&ss, Num::F((n as f64 - correction).max(0.0)));
    Ok(em.div(&ss, &den))
}

/// Inclusive prefix sum along `dim` as a `reduce_window` (as XLA lowers cumsum).
pub(crate) fn prefix_sum(em: &mut Em, x: &V, dim: usize) -> V {
    let r = x.rank();
    let n = x.shape[dim];
    let mut window = vec![1; r];
    window[dim] = n.max(1);
    let mut pad = vec![(0, 0); r];
    pad[dim] = ((n - 1).max(0), 0);
    let init = em.scalar(x.dtype, Num::I(0));
    let ones = vec![1; r];
    let out = em.reduce_window(
        std::slice::from_ref(x),
        &[init],
        &window,
        &ones,
        &ones,
        &pad,
        |em, a, b| vec![em.add(&a[0], &b[0])],
    );
    out[0].clone()
}

/// `cumsum(self, dim, dtype)`.
pub(crate) fn cumsum(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let od = cx.out_dtype(0);
    let dim_arg = cx.int("dim");
    let em = &mut *cx.em;
    let xc = em.convert(&x, opmath(od));
    if x.rank() == 0 {
        return Ok(xc);
    }
    let d = norm_dim(dim_arg?, x.rank())?;
    Ok(prefix_sum(em, &xc, d))
}
