//! Normalizations: `_softmax`/`_log_softmax` (max-subtracted), `native_layer_norm`,
//! batch norm (inference and training statistics), `native_group_norm` and the layer/group
//! norm backward ops; half types compute in f32.

use super::emitter::{Em, Num, V};
use super::reduce::{keep_shape, reduce_op};
use super::{norm_dim, opmath, Cx, R};
use fxhlo_ir::Arg;

/// `_softmax`/`_log_softmax(self, dim, half_to_float)`.
pub(crate) fn softmax(cx: &mut Cx, log: bool) -> R<V> {
    let x = cx.t("self")?;
    let od = cx.out_dtype(0);
    let dim_arg = cx.int("dim");
    let em = &mut *cx.em;
    let xc = em.convert(&x, opmath(x.dtype));
    if x.rank() == 0 {
        let r = if log {
            em.splat_like(&xc, Num::F(0.0))
        } else {
            em.splat_like(&xc, Num::F(1.0))
        };
        return Ok(em.convert(&r, od));
    }
    let d = norm_dim(dim_arg?, x.rank())?;
    let ks = keep_shape(&xc, &[d]);
    let m = reduce_op(em, &xc, &[d], "maximum", Num::F(f64::NEG_INFINITY), &ks);
    // a row of -inf must not give nan from (-inf) - (-inf)
    let inf = em.splat_like(&m, Num::F(f64::NEG_INFINITY));
    let isinf = em.compare("EQ", &m, &inf);
    let z = em.splat_like(&m, Num::F(0.0));
    let m = em.select(&isinf, &z, &m);
    let mb = em.bcast_to(&m, &xc.shape);
    let s = em.sub(&xc, &mb);
    let e = em.unary("exponential", &s);
    let sum = reduce_op(em, &e, &[d], "add", Num::I(0), &ks);
    let r = if log {
        let l = em.unary("log", &sum);
        let lb = em.bcast_to(&l, &xc.shape);
        em.sub(&s, &lb)
    } else {
        let sb = em.bcast_to(&sum, &xc.shape);
        em.div(&e, &sb)
    };
    Ok(em.convert(&r, od))
}

/// Mean and `1 / sqrt(var + eps)` (biased variance) of `x` over `dims`, kept as size 1.
fn moments(em: &mut Em, x: &V, dims: &[usize], eps: f64) -> (V, V) {
    let ks = keep_shape(x, dims);
    let n: i64 = dims.iter().map(|&d| x.shape[d]).product();
    let s = reduce_op(em, x, dims, "add", Num::I(0), &ks);
    let nv = em.splat_like(&s, Num::I(n));
    let mean = em.div(&s, &nv);
    let mb = em.bcast_to(&mean, &x.shape);
    let dx = em.sub(x, &mb);
    let d2 = em.mul(&dx, &dx);
    let ss = reduce_op(em, &d2, dims, "add", Num::I(0), &ks);
    let var = em.div(&ss, &nv);
    let e = em.splat_like(&var, Num::F(eps));
    let ve = em.add(&var, &e);
    let rstd = em.unary("rsqrt", &ve);
    (mean, rstd)
}

/// `native_layer_norm(input, normalized_shape, weight, bias, eps)`: output, mean, rstd.
pub(crate) fn layer_norm(cx: &mut Cx) -> R<Vec<V>> {
    let x = cx.t("input")?;
    let k = cx.ints("normalized_shape")?.len();
    let w = cx.opt_t("weight")?;
    let b = cx.opt_t("bias")?;
    let eps = cx.float("eps")?;
    let stat_shape = cx.out_shape(1)?;
    let em = &mut *cx.em;
    let d = x.dtype;
    let cd = opmath(d);
    let xc = em.convert(&x, cd);
    let dims: Vec<usize> = (x.rank() - k..x.rank()).collect();
    let (mean, rstd) = moments(em, &xc, &dims, eps);
    let mb = em.bcast_to(&mean, &xc.shape);
    let rb = em.bcast_to(&rstd, &xc.shape);
    let c = em.sub(&xc, &mb);
    let mut y = em.mul(&c, &rb);
    if let Some(w) = w {
        let w = em.convert(&w, cd);
        let w = em.bcast_to(&w, &xc.shape);
        y = em.mul(&y, &w);
    }
    if let Some(b) = b {
        let b = em.convert(&b, cd);
        let b = em.bcast_to(&b, &xc.shape);
        y = em.add(&y, &b);
    }
    let y = em.convert(&y, d);
    let mean = em.reshape(&mean, &stat_shape);
    let rstd = em.reshape(&rstd, &stat_shape);
    Ok(vec![y, mean, rstd])
}

fn output_mask(cx: &Cx) -> R<Vec<bool>> {
    match cx.node.arg("output_mask") {
        Some(Arg::Bools(m)) if m.len() == 3 => Ok(m.clone()),
        _ => Err("output_mask must be 3 bools".into()),
    }
}

/// `native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias, mask)`.
pub(crate) fn layer_norm_backward(cx: &mut Cx) -> R<Vec<V>> {
    let g = cx.t("grad_out")?;
    let x = cx.t("input")?;
    let k = cx.ints("normalized_shape")?.len();
    let mean = cx.t("mean")?;
    let rstd = cx.t("rstd")?;
    let w = cx.opt_t("weight")?;
    let mask = output_mask(cx)?;
    let shapes = [cx.out_shape(0)?, cx.out_shape(1)?, cx.out_shape(2)?];
    let em = &mut *cx.em;
    let d = x.dtype;
    let cd = opmath(d);
    let (g, x) = (em.convert(&g, cd), em.convert(&x, cd));
    let r = x.rank();
    let inner: Vec<usize> = (r - k..r).collect();
    let outer: Vec<usize> = (0..r - k).collect();
    let mut ks = x.shape[..r - k].to_vec();
    ks.extend(vec![1; k]);
    let mean = em.convert(&mean, cd);
    let mean = em.reshape(&mean, &ks);
    let rstd = em.convert(&rstd, cd);
    let rstd = em.reshape(&rstd, &ks);
    let mb = em.bcast_to(&mean, &x.shape);
    let rb = em.bcast_to(&rstd, &x.shape);
    let c = em.sub(&x, &mb);
    let xhat = em.mul(&c, &rb);
    let gw = match &w {
        Some(w) => {
            let w = em.convert(w, cd);
            let w = em.bcast_to(&w, &x.shape);
            em.mul(&g, &w)
        }
        None => g.clone(),
    };
    let mut outs = vec![];
    if mask[0] {
        let n: i64 = inner.iter().map(|&i| x.shape[i]).product();
        let ks2 = keep_shape(&x, &inner);
        let s1 = reduce_op(em, &gw, &inner, "add", Num::I(0), &ks2);
        let gx = em.mul(&gw, &xhat);
        let s2 = reduce_op(em, &gx, &inner, "add", Num::I(0), &ks2);
        let nv = em.splat_like(&s1, Num::I(n));
        let m1 = em.div(&s1, &nv);
        let m2 = em.div(&s2, &nv);
        let m1b = em.bcast_to(&m1, &x.shape);
        let m2b = em.bcast_to(&m2, &x.shape);
        let t = em.mul(&xhat, &m2b);
        let a = em.sub(&gw, &m1b);
        let a = em.sub(&a, &t);
        outs.push(em.mul(&a, &rb));
    } else {
        outs.push(em.splat(cd, &shapes[0], Num::I(0)));
    }
    if mask[1] && w.is_some() {
        let gx = em.mul(&g, &xhat);
        outs.push(reduce_op(em, &gx, &outer, "add", Num::I(0), &shapes[1]));
    } else {
        outs.push(em.splat(cd, &shapes[1], Num::I(0)));
    }
    if mask[2] && shapes[2].iter().product::<i64>() > 0 {
        outs.push(reduce_op(em, &g, &outer, "add", Num::I(0), &shapes[2]));
    } else {
        outs.push(em.splat(cd, &shapes[2], Num::I(0)));
    }
    Ok(outs.iter().map(|o| em.convert(o, d)).collect())
}

/// Batch norm: running statistics (`no_training`, or `training=False`) or batch statistics.
pub(crate) fn batch_norm(cx: &mut Cx) -> R<Vec<V>> {
    let x = cx.t("input")?;
    let w = cx.opt_t("weight")?;
    let b = cx.opt_t("bias")?;
    let op = cx.node.op().expect("op node");
    let training = if op.param_index("training").is_some() {
        cx.bool("training")?
    } else {
        false
    };
    let running = if op.param_index("running_mean").is_some() {
        Some((cx.t("running_mean")?, cx.t("running_var")?))
    } else {
        None
    };
    let eps = cx.float("eps")?;
    let s1 = cx.out_shape(1)?;
    let em = &mut *cx.em;
    let d = x.dtype;
    let cd = opmath(d);
    let xc = em.convert(&x, cd);
    let dims: Vec<usize> = (0..x.rank()).filter(|&i| i != 1).collect();
    let ks = keep_shape(&xc, &dims);
    let (mean, rstd) = match (&running, training) {
        (Some((rm, rv)), false) => {
            let rm = em.convert(rm, cd);
            let rv = em.convert(rv, cd);
            let e = em.splat_like(&rv, Num::F(eps));
            let ve = em.add(&rv, &e);
            let rs = em.unary("rsqrt", &ve);
            (em.reshape(&rm, &ks), em.reshape(&rs, &ks))
        }
        _ => moments(em, &xc, &dims, eps),
    };
    let mb = em.bcast_to(&mean, &xc.shape);
    let rb = em.bcast_to(&rstd, &xc.shape);
    let c = em.sub(&xc, &mb);
    let mut y = em.mul(&c, &rb);
    let c_dim = [1usize];
    if let Some(w) = w {
        let w = em.convert(&w, cd);
        let w = em.bcast_in_dim(&w, &xc.shape, &c_dim);
        y = em.mul(&y, &w);
    }
    if let Some(b) = b {
        let b = em.convert(&b, cd);
        let b = em.bcast_in_dim(&b, &xc.shape, &c_dim);
        y = em.add(&y, &b);
    }
    let y = em.convert(&y, d);
    let (m, r) = if s1.iter().product::<i64>() == 0 {
        (em.splat(d, &s1, Num::I(0)), em.splat(d, &s1, Num::I(0)))
    } else {
        (em.reshape(&mean, &s1), em.reshape(&rstd, &s1))
    };
    Ok(vec![y, m, r])
}

/// `native_group_norm(input, weight, bias, N, C, HxW, group, eps)`: output, mean, rstd `[N, G]`.
pub(crate) fn group_norm(cx: &mut Cx) -> R<Vec<V>> {
    let x = cx.t("input")?;
    let w = cx.opt_t("weight")?;
    let b = cx.opt_t("bias")?;
    let (n, c, hw, g) = (cx.int("N")?, cx.int("C")?, cx.int("HxW")?, cx.int("group")?);
    let eps = cx.float("eps")?;
    let em = &mut *cx.em;
    let d = x.dtype;
    let cd = opmath(d);
    let xc = em.convert(&x, cd);
    let xr = em.reshape(&xc, &[n, g, (c / g) * hw]);
    let (mean, rstd) = moments(em, &xr, &[2], eps);
    let mb = em.bcast_to(&mean, &xr.shape);
    let rb = em.bcast_to(&rstd, &xr.shape);
    let cc = em.sub(&xr, &mb);
    let y = em.mul(&cc, &rb);
    let mut y = em.reshape(&y, &[n, c, hw]);
    if let Some(w) = w {
        let w = em.convert(&w, cd);
        let w = em.bcast_in_dim(&w, &[n, c, hw], &[1]);
        y = em.mul(&y, &w);
    }
    if let Some(b) = b {
        let b = em.convert(&b, cd);
        let b = em.bcast_in_dim(&b, &[n, c, hw], &[1]);
        y = em.add(&y, &b);
    }
    let y = em.reshape(&y, &x.shape);
    let y = em.convert(&y, d);
    let m = em.reshape(&mean, &[n, g]);
    let r = em.reshape(&rstd, &[n, g]);
    Ok(vec![y, m, r])
}

/// `native_group_norm_backward(grad_out, input, mean, rstd, weight, N, C, HxW, group, mask)`.
pub(crate) fn group_norm_backward(cx: &mut Cx) -> R<Vec<V>> {
    let go = cx.t("grad_out")?;
    let x = cx.t("input")?;
    let mean = cx.t("mean")?;
    let rstd = cx.t("rstd")?;
    let w = cx.opt_t("weight")?;
    let (n, c, hw, g) = (cx.int("N")?, cx.int("C")?, cx.int("HxW")?, cx.int("group")?);
    let mask = output_mask(cx)?;
    let shapes = [cx.out_shape(0)?, cx.out_shape(1)?, cx.out_shape(2)?];
    let em = &mut *cx.em;
    let d = x.dtype;
    let cd = opmath(d);
    let cg = c / g;
    let s4 = [n, g, cg, hw];
    let gv = em.convert(&go, cd);
    let gv = em.reshape(&gv, &s4);
    let xv = em.convert(&x, cd);
    let xv = em.reshape(&xv, &s4);
    let mean = em.convert(&mean, cd);
    let mean = em.reshape(&mean, &[n, g, 1, 1]);
    let rstd = em.convert(&rstd, cd);
    let rstd = em.reshape(&rstd, &[n, g, 1, 1]);
    let mb = em.bcast_to(&mean, &s4);
    let rb = em.bcast_to(&rstd, &s4);
    let cdiff = em.sub(&xv, &mb);
    let xhat = em.mul(&cdiff, &rb);
    let gw = match &w {
        Some(w) => {
            let w = em.convert(w, cd);
            let w = em.reshape(&w, &[g, cg]);
            let w = em.bcast_in_dim(&w, &s4, &[1, 2]);
            em.mul(&gv, &w)
        }
        None => gv.clone(),
    };
    let mut outs = vec![];
    if mask[0] {
        let cnt = cg * hw;
        let ks = [n, g, 1, 1];
        let s1 = reduce_op(em, &gw, &[2, 3], "add", Num::I(0), &ks);
        let gx = em.mul(&gw, &xhat);
        let s2 = reduce_op(em, &gx, &[2, 3], "add", Num::I(0), &ks);
        let nv = em.splat_like(&s1, Num::I(cnt));
        let m1 = em.div(&s1, &nv);
        let m2 = em.div(&s2, &nv);
        let m1b = em.bcast_to(&m1, &s4);
        let m2b = em.bcast_to(&m2, &s4);
        let t = em.mul(&xhat, &m2b);
        let a = em.sub(&gw, &m1b);
        let a = em.sub(&a, &t);
        let dx = em.mul(&a, &rb);
        outs.push(em.reshape(&dx, &shapes[0]));
    } else {
        outs.push(em.splat(cd, &shapes[0], Num::I(0)));
    }
    if mask[1] && shapes[1].iter().product::<i64>() > 0 {
        let gx = em.mul(&gv, &xhat);
        let r = reduce_op(em, &gx, &[0, 3], "add", Num::I(0), &[g, cg]);
        outs.push(em.reshape(&r, &shapes[1]));
    } else {
        outs.push(em.splat(cd, &shapes[1], Num::I(0)));
    }
    if mask[2] && shapes[2].iter().product::<i64>() > 0 {
        let r = reduce_op(em, &gv, &[0, 3], "add", Num::I(0), &[g, cg]);
        outs.push(em.reshape(&r, &shapes[2]));
    } else {
        outs.push(em.splat(cd, &shapes[2], Num::I(0)));
    }
    Ok(outs.iter().map(|o| em.convert(o, d)).collect())
}
