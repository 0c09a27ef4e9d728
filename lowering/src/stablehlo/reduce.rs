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

/// Inclusive prefix sum (or product, `prod`) along `dim` as a `reduce_window` (as XLA lowers
/// cumsum).
pub(crate) fn prefix_scan(em: &mut Em, x: &V, dim: usize, prod: bool) -> V {
    let r = x.rank();
    let n = x.shape[dim];
    let mut window = vec![1; r];
    window[dim] = n.max(1);
    let mut pad = vec![(0, 0); r];
    pad[dim] = ((n - 1).max(0), 0);
    let init = em.scalar(x.dtype, Num::I(i64::from(prod)));
    let ones = vec![1; r];
    let out = em.reduce_window(
        std::slice::from_ref(x),
        &[init],
        &window,
        &ones,
        &ones,
        &pad,
        |em, a, b| {
            vec![if prod {
                em.mul(&a[0], &b[0])
            } else {
                em.add(&a[0], &b[0])
            }]
        },
    );
    out[0].clone()
}

/// Inclusive prefix sum along `dim`.
pub(crate) fn prefix_sum(em: &mut Em, x: &V, dim: usize) -> V {
    prefix_scan(em, x, dim, false)
}

/// `cumprod(self, dim, dtype)`: floats multiply in f64 (ATen's CPU kernel accumulates in
/// double), integers in their dtype.
pub(crate) fn cumprod(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let od = cx.out_dtype(0);
    let dim_arg = cx.int("dim");
    let em = &mut *cx.em;
    let cd = if od.is_float() { DType::F64 } else { od };
    let xc = em.convert(&x, cd);
    if x.rank() == 0 {
        return Ok(xc);
    }
    let d = norm_dim(dim_arg?, x.rank())?;
    Ok(prefix_scan(em, &xc, d, true))
}

/// `cummax`/`cummin(self, dim)` (`max`): a prefix `reduce_window` over (value, index) pairs
/// keeping the larger (smaller) value, NaN before anything, and on ties the later index; that
/// order is total, so the combination is associative and commutative as XLA needs, and it
/// gives ATen's sequential result.
pub(crate) fn cumulative_extremum(cx: &mut Cx, max: bool) -> R<Vec<V>> {
    let x = cx.t("self")?;
    let dim_arg = cx.int("dim");
    let em = &mut *cx.em;
    if x.rank() == 0 {
        let z = em.scalar(DType::I64, Num::I(0));
        return Ok(vec![x, z]);
    }
    let d = norm_dim(dim_arg?, x.rank())?;
    let r = x.rank();
    let n = x.shape[d];
    let idx = em.iota(DType::I64, &x.shape, d);
    let mut window = vec![1; r];
    window[d] = n.max(1);
    let mut pad = vec![(0, 0); r];
    pad[d] = ((n - 1).max(0), 0);
    let ones = vec![1; r];
    let init_v = em.scalar(x.dtype, init_max(x.dtype, max));
    let init_i = em.scalar(DType::I64, Num::I(-1));
    let float = x.dtype.is_float();
    let out = em.reduce_window(
        &[x.clone(), idx],
        &[init_v, init_i],
        &window,
        &ones,
        &ones,
        &pad,
        |em, a, b| {
            let (av, ai, bv, bi) = (&a[0], &a[1], &b[0], &b[1]);
            let later = em.compare("GT", bi, ai);
            let eq = em.compare("EQ", bv, av);
            let better = em.compare(if max { "GT" } else { "LT" }, bv, av);
            let tie = em.binary("and", &eq, &later);
            let mut take = em.binary("or", &better, &tie);
            if float {
                let an = em.compare("NE", av, av);
                let bn = em.compare("NE", bv, bv);
                // both NaN: the later; b NaN only: b; a NaN only: a
                let both = em.binary("and", &an, &bn);
                let both_later = em.binary("and", &both, &later);
                let a_num = em.unary("not", &an);
                let b_nan_only = em.binary("and", &bn, &a_num);
                let b_num = em.unary("not", &bn);
                let nums = em.binary("and", &a_num, &b_num);
                let num_take = em.binary("and", &nums, &take);
                let t = em.binary("or", &both_later, &b_nan_only);
                take = em.binary("or", &t, &num_take);
            }
            let v = em.select(&take, bv, av);
            let i = em.select(&take, bi, ai);
            vec![v, i]
        },
    );
    Ok(out)
}

/// `histc(self, bins, min, max)`: the bin of each element is the number of edges at or below it
/// less one (the edges computed in the input dtype as ATen's `linspace` does; the last bin
/// includes its right edge); elements outside `[min, max]` and NaN count nowhere. Where `min ==
/// max`, the range is the data's own, widened by 1 each side if that is one value.
pub(crate) fn histc(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let d = x.dtype;
    let bins = cx.int("bins")?;
    let (lo_a, hi_a) = (cx.num("min")?, cx.num("max")?);
    let em = &mut *cx.em;
    let n = x.numel();
    let xf = em.reshape(&x, &[n]);
    let mut lo = em.scalar(d, Num::F(lo_a.f64()));
    let mut hi = em.scalar(d, Num::F(hi_a.f64()));
    let same = em.compare("EQ", &lo, &hi);
    if n > 0 {
        // the data's range where min == max
        let big = em.scalar(d, Num::F(f64::INFINITY));
        let small = em.scalar(d, Num::F(f64::NEG_INFINITY));
        let dmin = em.reduce1(&xf, &big, &[0], "minimum");
        let dmax = em.reduce1(&xf, &small, &[0], "maximum");
        lo = em.select(&same, &dmin, &lo);
        hi = em.select(&same, &dmax, &hi);
    }
    let same = em.compare("EQ", &lo, &hi);
    let one = em.scalar(d, Num::F(1.0));
    let lo1 = em.sub(&lo, &one);
    let hi1 = em.add(&hi, &one);
    let lo = em.select(&same, &lo1, &lo);
    let hi = em.select(&same, &hi1, &hi);
    // edges: lo + step * i for the first half, hi - step * (bins - i) for the rest
    let ne = bins + 1;
    let nb = em.scalar(d, Num::I(bins));
    let width = em.sub(&hi, &lo);
    let step = em.div(&width, &nb);
    let step_e = em.bcast_to(&step, &[ne]);
    let i = em.iota(DType::I64, &[ne], 0);
    let bins_v = em.splat(DType::I64, &[ne], Num::I(bins));
    let back = em.sub(&bins_v, &i);
    let fi = em.convert(&i, d);
    let fb = em.convert(&back, d);
    let up = em.mul(&step_e, &fi);
    let lo_e = em.bcast_to(&lo, &[ne]);
    let up = em.add(&lo_e, &up);
    let down = em.mul(&step_e, &fb);
    let hi_e = em.bcast_to(&hi, &[ne]);
    let down = em.sub(&hi_e, &down);
    let half = em.splat(DType::I64, &[ne], Num::I(ne / 2));
    let first = em.compare("LT", &i, &half);
    let edges = em.select(&first, &up, &down);
    // bin of each element
    let xs = em.bcast_in_dim(&xf, &[n, ne], &[0]);
    let es = em.bcast_in_dim(&edges, &[n, ne], &[1]);
    let le = em.compare("LE", &es, &xs);
    let le = em.convert(&le, DType::I64);
    let zero = em.scalar(DType::I64, Num::I(0));
    let count = em.reduce1(&le, &zero, &[1], "add");
    let one_i = em.splat(DType::I64, &[n], Num::I(1));
    let pos = em.sub(&count, &one_i);
    let last = em.splat(DType::I64, &[n], Num::I(bins - 1));
    let pos = em.min(&pos, &last);
    let lo_n = em.bcast_to(&lo, &[n]);
    let hi_n = em.bcast_to(&hi, &[n]);
    let ge = em.compare("GE", &xf, &lo_n);
    let le_hi = em.compare("LE", &xf, &hi_n);
    let inside = em.binary("and", &ge, &le_hi);
    let ps = em.bcast_in_dim(&pos, &[n, bins], &[0]);
    let bi = em.iota(DType::I64, &[n, bins], 1);
    let hit = em.compare("EQ", &ps, &bi);
    let ins = em.bcast_in_dim(&inside, &[n, bins], &[0]);
    let hit = em.binary("and", &hit, &ins);
    let hit = em.convert(&hit, DType::F32);
    let zf = em.scalar(DType::F32, Num::F(0.0));
    let counts = em.reduce1(&hit, &zf, &[0], "add");
    Ok(em.convert(&counts, d))
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
