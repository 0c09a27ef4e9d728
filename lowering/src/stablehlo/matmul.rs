//! Matrix products (`mm`, `bmm`, `addmm` as `dot_general`) and pairwise distances.

use super::emitter::{Em, Num, V};
use super::reduce::reduce_op;
use super::shape::take_flat;
use super::{opmath, Cx, R};

/// `a @ b` over the last dim of `a` and dim `-2` of `b`, with `batch` leading batch dims,
/// accumulated in f32 for half types. `ta`/`tb`: `a`/`b` hold the operand with its last two
/// dims swapped; the transpose becomes the `dot_general`'s contracting dimension (lhs dim `-2`
/// instead of `-1`, rhs dim `-1` instead of `-2`), so none is emitted.
pub(crate) fn matmul_t(em: &mut Em, a: &V, ta: bool, b: &V, tb: bool, batch: usize) -> V {
    let d = a.dtype;
    let ac = em.convert(a, opmath(d));
    let bc = em.convert(b, opmath(d));
    let bd: Vec<usize> = (0..batch).collect();
    let lc = if ta { a.rank() - 2 } else { a.rank() - 1 };
    let rc = if tb { b.rank() - 1 } else { batch };
    let r = em.dot_general(&ac, &bc, &bd, &bd, &[lc], &[rc]);
    em.convert(&r, d)
}

/// `mm`, `bmm`; an operand that is a transpose of the last two dims is read untransposed.
pub(crate) fn mm(cx: &mut Cx) -> R<V> {
    let (a, ta) = cx.t_dot("self")?;
    let (b, tb) = cx.t_dot("mat2")?;
    let batch = a.rank() - 2;
    Ok(matmul_t(cx.em, &a, ta, &b, tb, batch))
}

/// `addmm(self, mat1, mat2, beta, alpha) = beta * self + alpha * (mat1 @ mat2)`.
pub(crate) fn addmm(cx: &mut Cx) -> R<V> {
    let bias = cx.t("self")?;
    let (a, ta) = cx.t_dot("mat1")?;
    let (b, tb) = cx.t_dot("mat2")?;
    let beta = cx.num("beta")?;
    let alpha = cx.num("alpha")?;
    let em = &mut *cx.em;
    let d = a.dtype;
    let cd = opmath(d);
    let ac = em.convert(&a, cd);
    let bc = em.convert(&b, cd);
    let (lc, rc) = (usize::from(!ta), usize::from(tb));
    let mut p = em.dot_general(&ac, &bc, &[], &[], &[lc], &[rc]);
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

#[cfg(test)]
mod tests {
    use crate::stablehlo::{emit, EmitOptions};
    use fxhlo_ir::text::parse_graph;
    use fxhlo_ir::Model;

    fn lower(src: &str) -> String {
        let graph = parse_graph(src).unwrap();
        graph.verify().unwrap();
        let model = Model {
            graph,
            weights: Default::default(),
        };
        emit(&model, &EmitOptions::default()).unwrap()
    }

    fn dots(text: &str) -> Vec<&str> {
        text.lines()
            .filter(|l| l.contains("stablehlo.dot_general"))
            .collect()
    }

    #[test]
    fn mm_of_t_contracts_the_lhs_first_dim() {
        // mm(t(a), b): a is [K, M] = [3, 4]
        let text = lower("graph {\n  %a: f32[3, 4] = input\n  %b: f32[3, 5] = input\n  %t: f32[4, 3] = aten.permute.default(%a, dims=[1, 0])\n  %c: f32[4, 5] = aten.mm.default(%t, %b)\n  return %c\n}\n");
        assert!(!text.contains("stablehlo.transpose"), "{text}");
        let d = dots(&text);
        assert_eq!(d.len(), 1, "{text}");
        assert!(
            d[0].contains("contracting_dims = [0] x [0]")
                && d[0].contains("(tensor<3x4xf32>, tensor<3x5xf32>) -> tensor<4x5xf32>"),
            "{text}"
        );
    }

    #[test]
    fn bmm_of_transposed_rhs_contracts_its_last_dim() {
        // bmm(x, transpose(y, -1, -2)) with views of the batch dims in between
        let text = lower("graph {\n  %x: f32[6, 4, 8] = input\n  %y: f32[2, 3, 5, 8] = input\n  %t: f32[2, 3, 8, 5] = aten.permute.default(%y, dims=[0, 1, 3, 2])\n  %e: f32[2, 3, 8, 5] = aten.expand.default(%t, size=[2, 3, 8, 5])\n  %v: f32[6, 8, 5] = aten.view.default(%e, size=[6, 8, 5])\n  %c: f32[6, 4, 5] = aten.bmm.default(%x, %v)\n  return %c\n}\n");
        assert!(!text.contains("stablehlo.transpose"), "{text}");
        let d = dots(&text);
        assert_eq!(d.len(), 1, "{text}");
        assert!(
            d[0].contains("batching_dims = [0] x [0]")
                && d[0].contains("contracting_dims = [2] x [2]")
                && d[0].contains("(tensor<6x4x8xf32>, tensor<6x5x8xf32>) -> tensor<6x4x5xf32>"),
            "{text}"
        );
        assert!(
            text.contains("tensor<2x3x5x8xf32>) -> tensor<6x5x8xf32>"),
            "{text}"
        );
    }

    #[test]
    fn addmm_of_transposed_weight_and_both_operands() {
        let text = lower("graph {\n  %x: f32[5, 3] = input\n  %w: f32[4, 3] = input\n  %b: f32[4] = input\n  %xt: f32[3, 5] = aten.permute.default(%x, dims=[1, 0])\n  %y: f32[3, 5] = input\n  %wt: f32[3, 4] = aten.permute.default(%w, dims=[1, 0])\n  %c: f32[5, 4] = aten.addmm.default(%b, %x, %wt)\n  %tt: f32[5, 3] = aten.permute.default(%y, dims=[1, 0])\n  %d: f32[5, 5] = aten.mm.default(%tt, %xt)\n  return %c, %d\n}\n");
        assert!(!text.contains("stablehlo.transpose"), "{text}");
        let d = dots(&text);
        assert!(d[0].contains("contracting_dims = [1] x [1]"), "{text}");
        assert!(d[1].contains("contracting_dims = [0] x [1]"), "{text}");
    }

    #[test]
    fn transpose_with_other_uses_is_still_emitted() {
        let text = lower("graph {\n  %a: f32[3, 4] = input\n  %b: f32[3, 5] = input\n  %t: f32[4, 3] = aten.permute.default(%a, dims=[1, 0])\n  %c: f32[4, 5] = aten.mm.default(%t, %b)\n  %r: f32[4, 3] = aten.relu.default(%t)\n  return %c, %r\n}\n");
        assert_eq!(text.matches("stablehlo.transpose").count(), 1, "{text}");
        assert!(
            dots(&text)[0].contains("contracting_dims = [0] x [0]"),
            "{text}"
        );
        // A permute of other dims, or a view that mixes the last two dims, is not folded.
        let text = lower("graph {\n  %a: f32[2, 3, 4] = input\n  %b: f32[3, 4, 5] = input\n  %t: f32[3, 2, 4] = aten.permute.default(%a, dims=[1, 0, 2])\n  %c: f32[3, 2, 5] = aten.bmm.default(%t, %b)\n  return %c\n}\n");
        assert_eq!(text.matches("stablehlo.transpose").count(), 1, "{text}");
    }

    #[test]
    fn bmm_of_broadcast_transposed_weight() {
        // bmm(x, expand(t(w))): the weight is broadcast untransposed and contracted on dim 2.
        let text = lower("graph {\n  %x: f32[8, 2, 32] = input\n  %w: f32[96, 32] = input\n  %t: f32[32, 96] = aten.permute.default(%w, dims=[1, 0])\n  %e: f32[8, 32, 96] = aten.expand.default(%t, size=[8, 32, 96])\n  %v: f32[8, 32, 96] = aten.view.default(%e, size=[8, 32, 96])\n  %c: f32[8, 2, 96] = aten.bmm.default(%x, %v)\n  return %c\n}\n");
        assert!(!text.contains("stablehlo.transpose"), "{text}");
        assert!(
            text.contains("(tensor<96x32xf32>) -> tensor<8x96x32xf32>"),
            "{text}"
        );
        let d = dots(&text);
        assert!(
            d[0].contains("batching_dims = [0] x [0], contracting_dims = [2] x [2]")
                && d[0].contains("-> tensor<8x2x96xf32>"),
            "{text}"
        );
    }
}
