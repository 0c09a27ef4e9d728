//! Matrix products (`mm`, `bmm`, `addmm` as `dot_general`) and pairwise distances.

use super::emitter::{Em, Num, V};
use super::reduce::reduce_op;
use super::shape::take_flat;
use super::{opmath, Cx, R};

/// `a @ b` over the last dim of `a` and dim `-2` of `b`, with `batch` leading batch dims,
/// accumulated in f32 for half types.
pub(crate) fn matmul(em: &mut Em, a: &V, b: &V, batch: usize) -> V {
    let d = a.dtype;
    let ac = em.convert(a, opmath(d));
    let bc = em.convert(b, opmath(d));
    let bd: Vec<usize> = (0..batch).collect();
    let r = em.dot_general(&ac, &bc, &bd, &bd, &[a.rank() - 1], &[batch]);
    em.convert(&r, d)
}

/// `mm`, `bmm`.
pub(crate) fn mm(cx: &mut Cx) -> R<V> {
    let a = cx.t("self")?;
    let b = cx.t("mat2")?;
    let batch = a.rank() - 2;
    Ok(matmul(cx.em, &a, &b, batch))
}

/// `addmm(self, mat1, mat2, beta, alpha) = beta * self + alpha * (mat1 @ mat2)`.
pub(crate) fn addmm(cx: &mut Cx) -> R<V> {
    let bias = cx.t("self")?;
    let a = cx.t("mat1")?;
    let b = cx.t("mat2")?;
    let beta = cx.num("beta")?;
    let alpha = cx.num("alpha")?;
    let em = &mut *cx.em;
    let d = a.dtype;
    let cd = opmath(d);
    let ac = em.convert(&a, cd);
    let bc = em.convert(&b, cd);
    let mut p = em.dot_general(&ac, &bc, &[], &[], &[1], &[0]);
    if alpha.f64() != 1.0 {
        let s = em.splat_like(&p, alpha);
        p = em.mul(&p, &s);
    }
    let shape = p.shape.clone();
    let bias = em.convert(&bias, cd);
    let mut bias = em.bcast_to(&bias, &shape);
    if beta.f64() == 0.0 {
        return Ok(em.convert(&p, d));
    }
    if beta.f64() != 1.0 {
        let s = em.splat_like(&bias, beta);
        bias = em.mul(&bias, &s);
    }
    let r = em.add(&p, &bias);
    Ok(em.convert(&r, d))
}

/// p-norm over the last dim of `diff` (`p` = 0 counts non-zeros, inf is the max).
fn p_norm(em: &mut Em, diff: &V, p: f64, out_shape: &[i64]) -> V {
    let last = diff.rank() - 1;
    let a = em.unary("abs", diff);
    if p == 0.0 {
        let z = em.splat_like(&a, Num::I(0));
        let nz = em.compare("NE", &a, &z);
        let f = em.convert(&nz, a.dtype);
        return reduce_op(em, &f, &[last], "add", Num::I(0), out_shape);
    }
    if p.is_infinite() {
        return reduce_op(
            em,
            &a,
            &[last],
            "maximum",
            Num::F(f64::NEG_INFINITY),
            out_shape,
        );
    }
    if p == 1.0 {
        return reduce_op(em, &a, &[last], "add", Num::I(0), out_shape);
    }
    if p == 2.0 {
        let sq = em.mul(&a, &a);
        let s = reduce_op(em, &sq, &[last], "add", Num::I(0), out_shape);
        return em.unary("sqrt", &s);
    }
    let pv = em.splat_like(&a, Num::F(p));
    let ap = em.binary("power", &a, &pv);
    let s = reduce_op(em, &ap, &[last], "add", Num::I(0), out_shape);
    let inv = em.splat_like(&s, Num::F(1.0 / p));
    em.binary("power", &s, &inv)
}

/// `_cdist_forward(x1 [.., P, M], x2 [.., R, M], p)`.
pub(crate) fn cdist(cx: &mut Cx) -> R<V> {
    let a = cx.t("x1")?;
    let b = cx.t("x2")?;
    let p = cx.float("p")?;
    let os = cx.out_shape(0)?;
    let em = &mut *cx.em;
    let d = a.dtype;
    let a = em.convert(&a, opmath(d));
    let b = em.convert(&b, opmath(d));
    let m = *a.shape.last().expect("rank >= 2");
    let batch = &os[..os.len() - 2];
    let (pp, rr) = (os[os.len() - 2], os[os.len() - 1]);
    let mut full = batch.to_vec();
    full.extend([pp, rr, m]);
    let mut sa = batch.to_vec();
    sa.extend([pp, 1, m]);
    let mut sb = batch.to_vec();
    sb.extend([1, rr, m]);
    let a = em.bcast_to(&a, &{
        let mut s = batch.to_vec();
        s.extend([pp, m]);
        s
    });
    let b = em.bcast_to(&b, &{
        let mut s = batch.to_vec();
        s.extend([rr, m]);
        s
    });
    let a = em.reshape(&a, &sa);
    let b = em.reshape(&b, &sb);
    let a = em.bcast_to(&a, &full);
    let b = em.bcast_to(&b, &full);
    let diff = em.sub(&a, &b);
    let r = p_norm(em, &diff, p, &os);
    Ok(em.convert(&r, d))
}

/// `_pdist_forward(self [N, M], p)`: the upper triangle of the distance matrix, row-major.
pub(crate) fn pdist(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let p = cx.float("p")?;
    let os = cx.out_shape(0)?;
    let em = &mut *cx.em;
    let d = x.dtype;
    let x = em.convert(&x, opmath(d));
    let (n, m) = (x.shape[0], x.shape[1]);
    if os[0] == 0 {
        return Ok(em.splat(d, &os, Num::I(0)));
    }
    let a = em.reshape(&x, &[n, 1, m]);
    let b = em.reshape(&x, &[1, n, m]);
    let a = em.bcast_to(&a, &[n, n, m]);
    let b = em.bcast_to(&b, &[n, n, m]);
    let diff = em.sub(&a, &b);
    let dist = p_norm(em, &diff, p, &[n, n]);
    let mut idx = vec![];
    for i in 0..n {
        for j in i + 1..n {
            idx.push(i * n + j);
        }
    }
    let r = take_flat(em, &dist, &idx, &os);
    Ok(em.convert(&r, d))
}
