//! Matrix products and distances: `mm`, `bmm`, `addmm`, `_cdist_forward`, `_pdist_forward`.
//! Floats accumulate in `f64` and round once; integers wrap.

use super::tensor::{broadcast_shapes, numel, Scalar, Tensor, R};
use super::Ctx;

/// Batched `[batch, m, k] @ [batch, k, n]` in the result dtype `d`, as `f64` or `i64` values.
enum Prod {
    F(Vec<f64>),
    I(Vec<i64>),
}

fn matmul(a: &Tensor, b: &Tensor, dims: (usize, usize, usize, usize), float: bool) -> Prod {
    let (batch, m, k, n) = dims;
    if float {
        let (x, y) = (a.f64s(), b.f64s());
        let mut out = vec![0.0; batch * m * n];
        for bi in 0..batch {
            for i in 0..m {
                let row = &mut out[(bi * m + i) * n..(bi * m + i + 1) * n];
                for l in 0..k {
                    let av = x[(bi * m + i) * k + l];
                    let brow = &y[(bi * k + l) * n..(bi * k + l + 1) * n];
                    for (o, &bv) in row.iter_mut().zip(brow) {
                        *o += av * bv;
                    }
                }
            }
        }
        Prod::F(out)
    } else {
        let (x, y) = (a.i64s(), b.i64s());
        let mut out = vec![0i64; batch * m * n];
        for bi in 0..batch {
            for i in 0..m {
                for l in 0..k {
                    let av = x[(bi * m + i) * k + l];
                    for j in 0..n {
                        let o = &mut out[(bi * m + i) * n + j];
                        *o = o.wrapping_add(av.wrapping_mul(y[(bi * k + l) * n + j]));
                    }
                }
            }
        }
        Prod::I(out)
    }
}

fn check_mats(a: &Tensor, b: &Tensor, rank: usize) -> R<()> {
    let ok = a.rank() == rank
        && b.rank() == rank
        && a.shape[rank - 1] == b.shape[rank - 2]
        && (rank == 2 || a.shape[0] == b.shape[0]);
    if !ok {
        return Err(format!(
            "operands have shapes {:?} and {:?}, which do not multiply",
            a.shape, b.shape
        ));
    }
    Ok(())
}

fn finish(d: fxhlo_ir::DType, shape: Vec<usize>, p: Prod) -> Tensor {
    match p {
        Prod::F(v) => Tensor::from_f64s(d, shape, v),
        Prod::I(v) => Tensor::from_i64s(d, shape, v),
    }
}

/// `mm(self, mat2)`.
pub(crate) fn mm(cx: &Ctx) -> R<Tensor> {
    let (a, b) = (cx.t("self")?, cx.t("mat2")?);
    check_mats(a, b, 2)?;
    let d = cx.out_dtype();
    let dims = (1, a.shape[0], a.shape[1], b.shape[1]);
    let p = matmul(a, b, dims, d.is_float());
    Ok(finish(d, vec![dims.1, dims.3], p))
}

/// `bmm(self, mat2)`.
pub(crate) fn bmm(cx: &Ctx) -> R<Tensor> {
    let (a, b) = (cx.t("self")?, cx.t("mat2")?);
    check_mats(a, b, 3)?;
    let d = cx.out_dtype();
    let dims = (a.shape[0], a.shape[1], a.shape[2], b.shape[2]);
    let p = matmul(a, b, dims, d.is_float());
    Ok(finish(d, vec![dims.0, dims.1, dims.3], p))
}

/// `addmm(self, mat1, mat2, beta, alpha) = beta * self + alpha * (mat1 @ mat2)`; with
/// `beta == 0`, `self` is ignored (its NaNs do not propagate), as in PyTorch.
pub(crate) fn addmm(cx: &Ctx) -> R<Tensor> {
    let (a, b) = (cx.t("mat1")?, cx.t("mat2")?);
    check_mats(a, b, 2)?;
    let d = cx.out_dtype();
    let dims = (1, a.shape[0], a.shape[1], b.shape[1]);
    let shape = vec![dims.1, dims.3];
    let bias = cx.t("self")?.cast(d).broadcast_to(&shape)?;
    let (beta, alpha) = (cx.scalar("beta")?, cx.scalar("alpha")?);
    match matmul(a, b, dims, d.is_float()) {
        Prod::F(p) => {
            let (be, al) = (beta.f64(), alpha.f64());
            let v = p
                .iter()
                .zip(bias.f64s())
                .map(|(&m, c)| if be == 0.0 { al * m } else { be * c + al * m })
                .collect();
            Ok(Tensor::from_f64s(d, shape, v))
        }
        Prod::I(p) => {
            if matches!(beta, Scalar::Float(_)) || matches!(alpha, Scalar::Float(_)) {
                return Err("beta and alpha must be integers for integer tensors".into());
            }
            let (be, al) = (beta.i64(), alpha.i64());
            let v = p
                .iter()
                .zip(bias.i64s())
                .map(|(&m, c)| be.wrapping_mul(c).wrapping_add(al.wrapping_mul(m)))
                .collect();
            Ok(Tensor::from_i64s(d, shape, v))
        }
    }
}

/// The p-norm of `diff` (p = 0 counts nonzeros, p = inf takes the maximum).
fn p_norm(diff: impl Iterator<Item = f64>, p: f64) -> f64 {
    if p == 0.0 {
        diff.filter(|d| *d != 0.0).count() as f64
    } else if p == f64::INFINITY {
        diff.map(f64::abs)
            .fold(0.0, |a, b| if b.is_nan() || b > a { b } else { a })
    } else if p == 1.0 {
        diff.map(f64::abs).sum()
    } else if p == 2.0 {
        diff.map(|d| d * d).sum::<f64>().sqrt()
    } else {
        diff.map(|d| d.abs().powf(p)).sum::<f64>().powf(1.0 / p)
    }
}

/// `_cdist_forward(x1 [.., P, M], x2 [.., R, M], p)`: pairwise p-norm distances, batch
/// dimensions broadcast.
pub(crate) fn cdist(cx: &Ctx) -> R<Tensor> {
    let (a, b) = (cx.t("x1")?, cx.t("x2")?);
    let p = cx.float("p")?;
    if p.is_nan() || p < 0.0 {
        return Err(format!("cdist needs a non-negative p, found {p}"));
    }
    if a.rank() < 2 || b.rank() < 2 || a.shape[a.rank() - 1] != b.shape[b.rank() - 1] {
        return Err(format!(
            "x1 {:?} and x2 {:?} must be [.., P, M] and [.., R, M]",
            a.shape, b.shape
        ));
    }
    let (ra, rb) = (a.rank(), b.rank());
    let batch = broadcast_shapes(&a.shape[..ra - 2], &b.shape[..rb - 2])?;
    let (pp, rr, m) = (a.shape[ra - 2], b.shape[rb - 2], a.shape[ra - 1]);
    let mut sa = batch.clone();
    sa.extend([pp, m]);
    let mut sb = batch.clone();
    sb.extend([rr, m]);
    for s in [&sa, &sb] {
        let n = s.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        cx.check_size(n.unwrap_or(usize::MAX), "a broadcast operand")?;
    }
    let (x, y) = (a.broadcast_to(&sa)?.f64s(), b.broadcast_to(&sb)?.f64s());
    let nb = numel(&batch);
    let mut out = Vec::with_capacity(nb * pp * rr);
    for bi in 0..nb {
        for i in 0..pp {
            let xi = &x[(bi * pp + i) * m..(bi * pp + i + 1) * m];
            for j in 0..rr {
                let yj = &y[(bi * rr + j) * m..(bi * rr + j + 1) * m];
                out.push(p_norm(xi.iter().zip(yj).map(|(u, v)| u - v), p));
            }
        }
    }
    let mut shape = batch;
    shape.extend([pp, rr]);
    Ok(Tensor::from_f64s(cx.out_dtype(), shape, out))
}

/// `_pdist_forward(self [N, M], p)`: distances between rows `i < j`, in row-major pair order.
pub(crate) fn pdist(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    let p = cx.float("p")?;
    if p.is_nan() || p < 0.0 {
        return Err(format!("pdist needs a non-negative p, found {p}"));
    }
    if x.rank() != 2 {
        return Err(format!("input has shape {:?}, expected a matrix", x.shape));
    }
    let (n, m) = (x.shape[0], x.shape[1]);
    let v = x.f64s();
    let mut out = vec![];
    for i in 0..n {
        for j in i + 1..n {
            let (a, b) = (&v[i * m..(i + 1) * m], &v[j * m..(j + 1) * m]);
            out.push(p_norm(a.iter().zip(b).map(|(u, w)| u - w), p));
        }
    }
    let len = out.len();
    Ok(Tensor::from_f64s(cx.out_dtype(), vec![len], out))
}
