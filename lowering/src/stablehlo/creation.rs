//! Tensor creation: `full`, `empty`, `arange`, `scalar_tensor` and the random ops.
//!
//! Random ops lower to `stablehlo.rng` (XLA's generator, fixed state): shapes, dtypes and
//! distributions match PyTorch, the values do not, and every call of a compiled module may
//! return the same numbers.

use super::emitter::{Num, V};
use super::{Cx, R};
use fxhlo_ir::DType;

/// `full`, `full_like`, `fill.Scalar`, `scalar_tensor`: a splat of the fill value.
pub(crate) fn full(cx: &mut Cx) -> R<V> {
    let op = cx.node.op().expect("op node");
    let name = ["fill_value", "value", "s"]
        .into_iter()
        .find(|n| op.param_index(n).is_some())
        .ok_or("no fill value")?;
    let n = cx.num(name)?;
    let d = cx.out_dtype(0);
    let s = cx.out_shape(0)?;
    Ok(cx.em.splat(d, &s, n))
}

/// `empty`, `empty_strided`: zeros (the contents are unspecified in PyTorch).
pub(crate) fn empty(cx: &mut Cx) -> R<V> {
    let d = cx.out_dtype(0);
    let s = cx.out_shape(0)?;
    Ok(cx.em.splat(d, &s, Num::I(0)))
}

/// `tril_indices`/`triu_indices(row, col, offset)` (`lower`): a constant.
pub(crate) fn tri_indices(cx: &mut Cx, lower: bool) -> R<V> {
    let (row, col, offset) = (cx.int("row")?, cx.int("col")?, cx.int("offset")?);
    let d = cx.out_dtype(0);
    let rows = fxhlo_ir::infer::tri_coordinates(row, col, offset, lower);
    let n = rows.len() as i64 / 2;
    let v = cx.em.dense_i64(&[2, n], &rows);
    Ok(cx.em.convert(&v, d))
}

/// `arange(start, end, step)`: `start + i * step`, computed in i64 or f64 and converted.
pub(crate) fn arange(cx: &mut Cx) -> R<V> {
    let start = cx.num("start")?;
    let step = cx.num("step")?;
    let d = cx.out_dtype(0);
    let s = cx.out_shape(0)?;
    let all_int = matches!((start, step), (Num::I(_), Num::I(_)));
    let cd = if all_int && !d.is_float() {
        DType::I64
    } else {
        DType::F64
    };
    let em = &mut *cx.em;
    let i = em.iota(cd, &s, 0);
    let st = em.splat(cd, &s, step);
    let a = em.splat(cd, &s, start);
    let m = em.mul(&i, &st);
    let r = em.add(&a, &m);
    Ok(em.convert(&r, d))
}

/// `rand`/`randn`: uniform in [0, 1) or standard normal.
pub(crate) fn rand(cx: &mut Cx, normal: bool) -> R<V> {
    let d = cx.out_dtype(0);
    let s = cx.out_shape(0)?;
    let em = &mut *cx.em;
    let cd = if d == DType::F64 { d } else { DType::F32 };
    let a = em.scalar(cd, Num::F(0.0));
    let b = em.scalar(cd, Num::F(1.0));
    let r = em.rng(if normal { "NORMAL" } else { "UNIFORM" }, &a, &b, &s);
    Ok(em.convert(&r, d))
}

/// `randperm(n)`: iota sorted by random keys.
pub(crate) fn randperm(cx: &mut Cx) -> R<V> {
    let d = cx.out_dtype(0);
    let s = cx.out_shape(0)?;
    let em = &mut *cx.em;
    let a = em.scalar(DType::F32, Num::F(0.0));
    let b = em.scalar(DType::F32, Num::F(1.0));
    let keys = em.rng("UNIFORM", &a, &b, &s);
    let i = em.iota(DType::I64, &s, 0);
    let r = em.sort(&[keys, i], 0, |em, a| em.compare("LT", &a[0], &a[1]));
    Ok(em.convert(&r[1], d))
}

/// `native_dropout(input, p, train)`: keep with probability `1 - p`, scaled by `1 / (1 - p)`.
pub(crate) fn native_dropout(cx: &mut Cx) -> R<Vec<V>> {
    let x = cx.t("input")?;
    let p = cx.float("p")?;
    let train = match cx.node.arg("train") {
        Some(fxhlo_ir::Arg::Bool(b)) => *b,
        _ => true,
    };
    let em = &mut *cx.em;
    if !train || p == 0.0 {
        let m = em.splat(DType::Bool, &x.shape, Num::B(true));
        return Ok(vec![x, m]);
    }
    let a = em.scalar(DType::F32, Num::F(0.0));
    let b = em.scalar(DType::F32, Num::F(1.0));
    let u = em.rng("UNIFORM", &a, &b, &x.shape);
    let pp = em.splat(DType::F32, &x.shape, Num::F(p));
    let keep = em.compare("GE", &u, &pp);
    let scale = if p >= 1.0 { 0.0 } else { 1.0 / (1.0 - p) };
    let sc = em.splat_like(&x, Num::F(scale));
    let xs = em.mul(&x, &sc);
    let z = em.splat_like(&x, Num::I(0));
    let out = em.select(&keep, &xs, &z);
    Ok(vec![out, keep])
}
