//! Matrix factorizations and solves: LU (`linalg_lu_factor_ex`, `linalg_lu`, `lu_unpack`,
//! `linalg_lu_solve`, `_linalg_solve_ex`, `linalg_inv_ex`, `_linalg_det`, `_linalg_slogdet`),
//! Cholesky (`linalg_cholesky_ex`), Householder QR (`geqrf`, `linalg_householder_product`,
//! `ormqr`, `linalg_qr`), the symmetric eigendecomposition (`_linalg_eigh`) and the SVD
//! (`_linalg_svd`), Bunch-Kaufman LDL (`linalg_ldl_factor_ex`, `linalg_ldl_solve`: `sytrf`,
//! `sytrs`), and the matrix exponential (`linalg_matrix_exp`).
//!
//! Matrices are the last two dimensions; the others are batch dimensions. Everything is
//! computed in `f64` and rounded once, by small unblocked kernels that follow LAPACK's
//! algorithms where its results are unique, so that they agree with its conventions: LU with
//! partial pivoting picks the first largest |value| of the column (`getrf`; 1-based i32 pivots,
//! `info` the first zero pivot), Householder reflectors as `geqrf`/`larfg` make them (`beta =
//! -sign(alpha) * norm`), Cholesky of the lower triangle (`info` the first non-positive pivot),
//! ascending eigenvalues and descending singular values. Eigenvectors and singular vectors
//! come from Jacobi rotations, accurate to `f64` rounding; LAPACK's are the same up to the sign
//! of each vector (its sign is a by-product of its algorithm, not a convention), and, for
//! repeated values or the complement columns of `full_matrices`, up to a basis of the same
//! subspace. Hand-written rather than from nalgebra or faer: those pivot, reflect and order
//! differently, and LAPACK's conventions (pivot vectors, `geqrf`'s reflectors and `tau`) would
//! need the kernels rewritten anyway; the matrices this runs are small.

use super::tensor::{numel, Tensor, R};
use super::Ctx;
use fxhlo_ir::DType;

/// A batch of `m x n` row-major matrices in `f64`.
struct Mats {
    batch: Vec<usize>,
    m: usize,
    n: usize,
    v: Vec<f64>,
}

impl Mats {
    fn of(t: &Tensor, what: &str) -> R<Mats> {
        let r = t.rank();
        if r < 2 {
            return Err(format!("{what} has shape {:?}, expected matrices", t.shape));
        }
        Ok(Mats {
            batch: t.shape[..r - 2].to_vec(),
            m: t.shape[r - 2],
            n: t.shape[r - 1],
            v: t.f64s(),
        })
    }

    fn count(&self) -> usize {
        numel(&self.batch)
    }

    fn get(&self, b: usize) -> &[f64] {
        let sz = self.m * self.n;
        &self.v[b * sz..(b + 1) * sz]
    }

    fn square(&self, what: &str) -> R<usize> {
        if self.m != self.n {
            return Err(format!(
                "{what} is {}x{}, expected square matrices",
                self.m, self.n
            ));
        }
        Ok(self.n)
    }
}

fn shape_of(batch: &[usize], dims: &[usize]) -> Vec<usize> {
    let mut s = batch.to_vec();
    s.extend_from_slice(dims);
    s
}

fn transpose(a: &[f64], m: usize, n: usize) -> Vec<f64> {
    let mut t = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            t[j * m + i] = a[i * n + j];
        }
    }
    t
}

fn identity(n: usize) -> Vec<f64> {
    let mut e = vec![0.0; n * n];
    for i in 0..n {
        e[i * n + i] = 1.0;
    }
    e
}

fn matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for l in 0..k {
            let x = a[i * k + l];
            for j in 0..n {
                c[i * n + j] += x * b[l * n + j];
            }
        }
    }
    c
}

fn i32s(d: DType, shape: Vec<usize>, v: Vec<i64>) -> Tensor {
    Tensor::from_i64s(d, shape, v)
}

// ---------------------------------------------------------------------------------------------
// LU

/// LU with partial pivoting of an `m x n` matrix in place (LAPACK's `getf2`): the unit lower
/// factor below the diagonal, U on and above it. Returns the 1-based pivots (row `i` was
/// swapped with row `piv[i] - 1`) and `info`, the 1-based column of the first zero pivot (0
/// if none). Without `pivot`, rows are never swapped (pivots `1..=k`).
fn lu_in_place(a: &mut [f64], m: usize, n: usize, pivot: bool) -> (Vec<i64>, i64) {
    let k = m.min(n);
    let mut piv = Vec::with_capacity(k);
    let mut info = 0;
    for j in 0..k {
        let mut p = j;
        if pivot {
            let mut best = a[j * n + j].abs();
            for i in j + 1..m {
                let v = a[i * n + j].abs();
                if v > best || (best.is_nan() && !v.is_nan()) {
                    best = v;
                    p = i;
                }
            }
        }
        piv.push(p as i64 + 1);
        if a[p * n + j] != 0.0 {
            if p != j {
                for c in 0..n {
                    a.swap(j * n + c, p * n + c);
                }
            }
            let d = a[j * n + j];
            for i in j + 1..m {
                a[i * n + j] /= d;
            }
        } else if info == 0 {
            info = j as i64 + 1;
        }
        for i in j + 1..m {
            let l = a[i * n + j];
            if l != 0.0 {
                for c in j + 1..n {
                    a[i * n + c] -= l * a[j * n + c];
                }
            }
        }
    }
    (piv, info)
}

/// The row permutation of 1-based LAPACK pivots: row `i` of `P_r A` is row `perm[i]` of A.
fn permutation(piv: &[i64], m: usize) -> R<Vec<usize>> {
    let mut perm: Vec<usize> = (0..m).collect();
    for (i, &p) in piv.iter().enumerate() {
        if p < 1 || p as usize > m {
            return Err(format!("pivot {p} at {i} is out of range 1..={m}"));
        }
        perm.swap(i, p as usize - 1);
    }
    Ok(perm)
}

/// Solves `A X = B` (or `A^T X = B` with `adjoint`) for `n x k` B in place, A given by its LU
/// factors and pivots (LAPACK's `getrs`).
fn lu_solve_in_place(lu: &[f64], piv: &[i64], n: usize, b: &mut [f64], k: usize, adjoint: bool) {
    let swap_rows = |b: &mut [f64], i: usize, p: usize| {
        if i != p {
            for c in 0..k {
                b.swap(i * k + c, p * k + c);
            }
        }
    };
    if !adjoint {
        for (i, &p) in piv.iter().enumerate() {
            swap_rows(b, i, p as usize - 1);
        }
        for i in 0..n {
            for l in 0..i {
                let f = lu[i * n + l];
                for c in 0..k {
                    b[i * k + c] -= f * b[l * k + c];
                }
            }
        }
        for i in (0..n).rev() {
            for l in i + 1..n {
                let f = lu[i * n + l];
                for c in 0..k {
                    b[i * k + c] -= f * b[l * k + c];
                }
            }
            let d = lu[i * n + i];
            for c in 0..k {
                b[i * k + c] /= d;
            }
        }
    } else {
        // A^T = U^T L^T P_r
        for i in 0..n {
            for l in 0..i {
                let f = lu[l * n + i];
                for c in 0..k {
                    b[i * k + c] -= f * b[l * k + c];
                }
            }
            let d = lu[i * n + i];
            for c in 0..k {
                b[i * k + c] /= d;
            }
        }
        for i in (0..n).rev() {
            for l in i + 1..n {
                let f = lu[l * n + i];
                for c in 0..k {
                    b[i * k + c] -= f * b[l * k + c];
                }
            }
        }
        for (i, &p) in piv.iter().enumerate().rev() {
            swap_rows(b, i, p as usize - 1);
        }
    }
}

/// Solves `op(A) X = B` (left) or `X op(A) = B` for `m x k` B, `op` the transpose with
/// `adjoint`; returns X.
fn lu_solve_side(
    lu: &[f64],
    piv: &[i64],
    n: usize,
    b: &[f64],
    (m, k): (usize, usize),
    left: bool,
    adjoint: bool,
) -> Vec<f64> {
    if left {
        let mut x = b.to_vec();
        lu_solve_in_place(lu, piv, n, &mut x, k, adjoint);
        x
    } else {
        // X op(A) = B  <=>  op(A)^T X^T = B^T
        let mut xt = transpose(b, m, k);
        lu_solve_in_place(lu, piv, n, &mut xt, m, !adjoint);
        transpose(&xt, k, m)
    }
}

fn check_info(cx: &Ctx, infos: &[i64], what: &str) -> R<()> {
    if cx.has("check_errors") && cx.bool("check_errors")? {
        if let Some((b, i)) = infos.iter().enumerate().find(|(_, &i)| i != 0) {
            return Err(format!(
                "{what} failed for matrix {b} of the batch (info = {i})"
            ));
        }
    }
    Ok(())
}

/// `linalg_lu_factor_ex(A, pivot, check_errors)`.
pub(crate) fn lu_factor_ex(cx: &Ctx) -> R<Vec<Tensor>> {
    let a = Mats::of(cx.t("A")?, "A")?;
    let pivot = cx.bool("pivot")?;
    let (m, n) = (a.m, a.n);
    let mut lu = a.v.clone();
    let (mut pivs, mut infos) = (vec![], vec![]);
    for b in 0..a.count() {
        let (p, info) = lu_in_place(&mut lu[b * m * n..(b + 1) * m * n], m, n, pivot);
        pivs.extend(p);
        infos.push(info);
    }
    check_info(cx, &infos, "the LU factorization")?;
    Ok(vec![
        Tensor::from_f64s(cx.out_dtype_of(0), shape_of(&a.batch, &[m, n]), lu),
        i32s(cx.out_dtype_of(1), shape_of(&a.batch, &[m.min(n)]), pivs),
        i32s(cx.out_dtype_of(2), a.batch.clone(), infos),
    ])
}

/// P (`[.., m, m]`), L (`[.., m, k]`) and U (`[.., k, n]`) of LU factors and pivots.
fn unpack(
    lu: &Mats,
    pivs: &[i64],
    want_p: bool,
    want_lu: bool,
) -> R<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    let (m, n) = (lu.m, lu.n);
    let k = m.min(n);
    let (mut p, mut l, mut u) = (vec![], vec![], vec![]);
    for b in 0..lu.count() {
        let a = lu.get(b);
        if want_p {
            let perm = permutation(&pivs[b * k..(b + 1) * k], m)?;
            let mut pm = vec![0.0; m * m];
            for (i, &r) in perm.iter().enumerate() {
                pm[r * m + i] = 1.0;
            }
            p.extend(pm);
        }
        if want_lu {
            for i in 0..m {
                for j in 0..k {
                    l.push(match i.cmp(&j) {
                        std::cmp::Ordering::Greater => a[i * n + j],
                        std::cmp::Ordering::Equal => 1.0,
                        std::cmp::Ordering::Less => 0.0,
                    });
                }
            }
            for i in 0..k {
                for j in 0..n {
                    u.push(if j >= i { a[i * n + j] } else { 0.0 });
                }
            }
        }
    }
    Ok((p, l, u))
}

/// `lu_unpack(LU_data, LU_pivots, unpack_data, unpack_pivots)`.
pub(crate) fn lu_unpack(cx: &Ctx) -> R<Vec<Tensor>> {
    let lu = Mats::of(cx.t("LU_data")?, "LU_data")?;
    let pivs = cx.t("LU_pivots")?.i64s();
    let (wp, wd) = (cx.bool("unpack_pivots")?, cx.bool("unpack_data")?);
    let (p, l, u) = unpack(&lu, &pivs, wp, wd)?;
    Ok(vec![
        Tensor::from_f64s(cx.out_dtype_of(0), cx.out_shape_of(0), p),
        Tensor::from_f64s(cx.out_dtype_of(1), cx.out_shape_of(1), l),
        Tensor::from_f64s(cx.out_dtype_of(2), cx.out_shape_of(2), u),
    ])
}

/// `linalg_lu(A, pivot)`.
pub(crate) fn linalg_lu(cx: &Ctx) -> R<Vec<Tensor>> {
    let mut a = Mats::of(cx.t("A")?, "A")?;
    let pivot = cx.bool("pivot")?;
    let (m, n) = (a.m, a.n);
    let mut pivs = vec![];
    for b in 0..a.count() {
        pivs.extend(lu_in_place(&mut a.v[b * m * n..(b + 1) * m * n], m, n, pivot).0);
    }
    let (p, l, u) = unpack(&a, &pivs, pivot, true)?;
    Ok(vec![
        Tensor::from_f64s(cx.out_dtype_of(0), cx.out_shape_of(0), p),
        Tensor::from_f64s(cx.out_dtype_of(1), cx.out_shape_of(1), l),
        Tensor::from_f64s(cx.out_dtype_of(2), cx.out_shape_of(2), u),
    ])
}

/// Index of the batch element of an operand with batch shape `from` that broadcasts to
/// element `flat` of batch shape `to`.
fn broadcast_index(to: &[usize], from: &[usize], mut flat: usize) -> usize {
    let off = to.len() - from.len();
    let (mut idx, mut stride) = (0, 1);
    for d in (0..to.len()).rev() {
        let i = flat % to[d].max(1);
        flat /= to[d].max(1);
        if d >= off {
            let f = from[d - off];
            if f != 1 {
                idx += i * stride;
            }
            stride *= f;
        }
    }
    idx
}

/// `linalg_lu_solve(LU, pivots, B, left, adjoint)`.
pub(crate) fn lu_solve(cx: &Ctx) -> R<Vec<Tensor>> {
    let lu = Mats::of(cx.t("LU")?, "LU")?;
    let n = lu.square("LU")?;
    let pivs = cx.t("pivots")?.i64s();
    let b = Mats::of(cx.t("B")?, "B")?;
    let (left, adjoint) = (cx.bool("left")?, cx.bool("adjoint")?);
    let shape = cx.out_shape_of(0);
    let out_batch = shape[..shape.len() - 2].to_vec();
    let mut out = Vec::with_capacity(numel(&shape));
    for o in 0..numel(&out_batch) {
        let (ia, ib) = (
            broadcast_index(&out_batch, &lu.batch, o),
            broadcast_index(&out_batch, &b.batch, o),
        );
        let piv = &pivs[ia * n..(ia + 1) * n];
        permutation(piv, n)?;
        out.extend(lu_solve_side(
            lu.get(ia),
            piv,
            n,
            b.get(ib),
            (b.m, b.n),
            left,
            adjoint,
        ));
    }
    Ok(vec![Tensor::from_f64s(cx.out_dtype(), shape, out)])
}

/// `_linalg_solve_ex(A, B, left, check_errors)`.
pub(crate) fn solve_ex(cx: &Ctx) -> R<Vec<Tensor>> {
    let at = cx.t("A")?;
    let a = Mats::of(at, "A")?;
    let n = a.square("A")?;
    let bt = cx.t("B")?;
    let vector =
        bt.rank() == 1 || (at.rank() == bt.rank() + 1 && bt.shape[..] == at.shape[..at.rank() - 1]);
    let b = if vector {
        let mut s = bt.shape.clone();
        s.push(1);
        Mats::of(
            &Tensor {
                shape: s,
                ..bt.clone()
            },
            "B",
        )?
    } else {
        Mats::of(bt, "B")?
    };
    let left = cx.bool("left")?;
    let mut lu = a.v.clone();
    let (mut pivs, mut infos) = (vec![], vec![]);
    for i in 0..a.count() {
        let (p, info) = lu_in_place(&mut lu[i * n * n..(i + 1) * n * n], n, n, true);
        pivs.extend(p);
        infos.push(info);
    }
    check_info(cx, &infos, "solve (A is singular)")?;
    let shape = cx.out_shape_of(0);
    let out_batch = shape[..shape.len() - if vector { 1 } else { 2 }].to_vec();
    let mut out = Vec::with_capacity(numel(&shape));
    for o in 0..numel(&out_batch) {
        let (ia, ib) = (
            broadcast_index(&out_batch, &a.batch, o),
            broadcast_index(&out_batch, &b.batch, o),
        );
        let m = &lu[ia * n * n..(ia + 1) * n * n];
        let piv = &pivs[ia * n..(ia + 1) * n];
        out.extend(lu_solve_side(
            m,
            piv,
            n,
            b.get(ib),
            (b.m, b.n),
            left || vector,
            false,
        ));
    }
    Ok(vec![
        Tensor::from_f64s(cx.out_dtype_of(0), shape, out),
        Tensor::from_f64s(cx.out_dtype_of(1), cx.out_shape_of(1), lu),
        i32s(cx.out_dtype_of(2), cx.out_shape_of(2), pivs),
        i32s(cx.out_dtype_of(3), cx.out_shape_of(3), infos),
    ])
}

/// `linalg_inv_ex(A, check_errors)`.
pub(crate) fn inv_ex(cx: &Ctx) -> R<Vec<Tensor>> {
    let a = Mats::of(cx.t("A")?, "A")?;
    let n = a.square("A")?;
    let (mut out, mut infos) = (Vec::with_capacity(a.v.len()), vec![]);
    for b in 0..a.count() {
        let mut lu = a.get(b).to_vec();
        let (piv, info) = lu_in_place(&mut lu, n, n, true);
        let mut x = identity(n);
        lu_solve_in_place(&lu, &piv, n, &mut x, n, false);
        out.extend(x);
        infos.push(info);
    }
    check_info(cx, &infos, "the inversion (the matrix is singular)")?;
    Ok(vec![
        Tensor::from_f64s(cx.out_dtype_of(0), cx.out_shape_of(0), out),
        i32s(cx.out_dtype_of(1), cx.out_shape_of(1), infos),
    ])
}

/// LU values, pivots, and (sign, log |det|, det) of each matrix.
type DetParts = (Vec<f64>, Vec<i64>, Vec<(f64, f64, f64)>);

/// LU of each square matrix: (LU values, pivots, sign of the permutation times the product
/// of U's diagonal's signs, log |det|, det).
fn det_parts(a: &Mats) -> R<DetParts> {
    let n = a.square("A")?;
    let mut lu = a.v.clone();
    let (mut pivs, mut dets) = (vec![], vec![]);
    for b in 0..a.count() {
        let m = &mut lu[b * n * n..(b + 1) * n * n];
        let (piv, _) = lu_in_place(m, n, n, true);
        let mut sign = 1.0;
        let (mut logabs, mut det) = (0.0, 1.0);
        for (i, &p) in piv.iter().enumerate() {
            if p as usize != i + 1 {
                sign = -sign;
            }
            let d = m[i * n + i];
            det *= d;
            logabs += d.abs().ln();
            if d < 0.0 {
                sign = -sign;
            } else if d.is_nan() {
                sign = f64::NAN;
            }
        }
        if det == 0.0 {
            sign = 0.0;
        }
        let s = if piv
            .iter()
            .enumerate()
            .filter(|(i, &p)| p as usize != i + 1)
            .count()
            % 2
            == 1
        {
            -det
        } else {
            det
        };
        pivs.extend(piv);
        dets.push((sign, logabs, s));
    }
    Ok((lu, pivs, dets))
}

/// `_linalg_det(A)`.
pub(crate) fn det(cx: &Ctx) -> R<Vec<Tensor>> {
    let a = Mats::of(cx.t("A")?, "A")?;
    let (lu, pivs, dets) = det_parts(&a)?;
    Ok(vec![
        Tensor::from_f64s(
            cx.out_dtype_of(0),
            a.batch.clone(),
            dets.iter().map(|d| d.2).collect(),
        ),
        Tensor::from_f64s(cx.out_dtype_of(1), cx.out_shape_of(1), lu),
        i32s(cx.out_dtype_of(2), cx.out_shape_of(2), pivs),
    ])
}

/// `_linalg_slogdet(A)`: sign 0 and log|det| -inf for a singular matrix.
pub(crate) fn slogdet(cx: &Ctx) -> R<Vec<Tensor>> {
    let a = Mats::of(cx.t("A")?, "A")?;
    let (lu, pivs, dets) = det_parts(&a)?;
    Ok(vec![
        Tensor::from_f64s(
            cx.out_dtype_of(0),
            a.batch.clone(),
            dets.iter().map(|d| d.0).collect(),
        ),
        Tensor::from_f64s(
            cx.out_dtype_of(1),
            a.batch.clone(),
            dets.iter().map(|d| d.1).collect(),
        ),
        Tensor::from_f64s(cx.out_dtype_of(2), cx.out_shape_of(2), lu),
        i32s(cx.out_dtype_of(3), cx.out_shape_of(3), pivs),
    ])
}

// ---------------------------------------------------------------------------------------------
// Cholesky

/// The lower Cholesky factor of the lower triangle of `a` (`potrf`), and `info`: the 1-based
/// column of the first pivot that is not positive (its column and the ones after it are then
/// left zero).
fn cholesky_lower(a: &[f64], n: usize) -> (Vec<f64>, i64) {
    let mut l = vec![0.0; n * n];
    for j in 0..n {
        let d = a[j * n + j] - (0..j).map(|k| l[j * n + k] * l[j * n + k]).sum::<f64>();
        if d.is_nan() || d <= 0.0 {
            return (l, j as i64 + 1);
        }
        let d = d.sqrt();
        l[j * n + j] = d;
        for i in j + 1..n {
            let s = a[i * n + j] - (0..j).map(|k| l[i * n + k] * l[j * n + k]).sum::<f64>();
            l[i * n + j] = s / d;
        }
    }
    (l, 0)
}

/// `linalg_cholesky_ex(self, upper, check_errors)`: with `upper`, U (`U^T U = A`) from A's
/// upper triangle.
pub(crate) fn cholesky_ex(cx: &Ctx) -> R<Vec<Tensor>> {
    let a = Mats::of(cx.t("self")?, "self")?;
    let n = a.square("self")?;
    let upper = cx.bool("upper")?;
    let (mut out, mut infos) = (Vec::with_capacity(a.v.len()), vec![]);
    for b in 0..a.count() {
        let m = a.get(b);
        let (l, info) = if upper {
            let (l, info) = cholesky_lower(&transpose(m, n, n), n);
            (transpose(&l, n, n), info)
        } else {
            cholesky_lower(m, n)
        };
        out.extend(l);
        infos.push(info);
    }
    check_info(
        cx,
        &infos,
        "the Cholesky factorization (the matrix is not positive-definite)",
    )?;
    Ok(vec![
        Tensor::from_f64s(cx.out_dtype_of(0), cx.out_shape_of(0), out),
        i32s(cx.out_dtype_of(1), cx.out_shape_of(1), infos),
    ])
}

// ---------------------------------------------------------------------------------------------
// Householder QR

/// Householder QR of an `m x n` matrix in place (LAPACK's `geqr2` with `larfg`): R on and
/// above the diagonal, reflector `j`'s vector `v` (with `v[j] = 1` implied) below it; returns
/// `tau`, `H_j = I - tau_j v v^T`, `A = H_1 ... H_k R`.
fn geqrf_in_place(a: &mut [f64], m: usize, n: usize) -> Vec<f64> {
    let k = m.min(n);
    let mut tau = vec![0.0; k];
    for j in 0..k {
        let alpha = a[j * n + j];
        let xnorm = (j + 1..m)
            .map(|i| a[i * n + j] * a[i * n + j])
            .sum::<f64>()
            .sqrt();
        if xnorm == 0.0 {
            continue; // H = I
        }
        let beta = -alpha.hypot(xnorm).copysign(alpha);
        tau[j] = (beta - alpha) / beta;
        let scale = 1.0 / (alpha - beta);
        for i in j + 1..m {
            a[i * n + j] *= scale;
        }
        a[j * n + j] = beta;
        for c in j + 1..n {
            let w = a[j * n + c] + (j + 1..m).map(|i| a[i * n + j] * a[i * n + c]).sum::<f64>();
            a[j * n + c] -= tau[j] * w;
            for i in j + 1..m {
                a[i * n + c] -= tau[j] * w * a[i * n + j];
            }
        }
    }
    tau
}

/// Applies `H_1 ... H_k` (reflectors in the columns of `v`, `rows x cols`, as `geqrf` writes
/// them) from the left to the `rows x c` matrix `x`, in place.
fn apply_q(v: &[f64], cols: usize, tau: &[f64], x: &mut [f64], rows: usize, c: usize) {
    for j in (0..tau.len()).rev() {
        if tau[j] == 0.0 {
            continue;
        }
        for col in 0..c {
            let w = x[j * c + col]
                + (j + 1..rows)
                    .map(|i| v[i * cols + j] * x[i * c + col])
                    .sum::<f64>();
            x[j * c + col] -= tau[j] * w;
            for i in j + 1..rows {
                x[i * c + col] -= tau[j] * w * v[i * cols + j];
            }
        }
    }
}

/// The `rows x rows` product `H_1 ... H_k` of the reflectors of `v` (`rows x cols`).
fn q_full(v: &[f64], rows: usize, cols: usize, tau: &[f64]) -> Vec<f64> {
    let mut q = identity(rows);
    apply_q(v, cols, tau, &mut q, rows, rows);
    q
}

/// `geqrf(self)`.
pub(crate) fn geqrf(cx: &Ctx) -> R<Vec<Tensor>> {
    let mut a = Mats::of(cx.t("self")?, "self")?;
    let (m, n) = (a.m, a.n);
    let mut taus = vec![];
    for b in 0..a.count() {
        taus.extend(geqrf_in_place(&mut a.v[b * m * n..(b + 1) * m * n], m, n));
    }
    Ok(vec![
        Tensor::from_f64s(cx.out_dtype_of(0), cx.out_shape_of(0), a.v),
        Tensor::from_f64s(cx.out_dtype_of(1), cx.out_shape_of(1), taus),
    ])
}

/// `linalg_householder_product(input, tau)`: the first `n` columns of `H_1 ... H_k`.
pub(crate) fn householder_product(cx: &Ctx) -> R<Vec<Tensor>> {
    let a = Mats::of(cx.t("input")?, "input")?;
    let tau = cx.t("tau")?;
    let k = *tau.shape.last().unwrap_or(&0);
    let taus = tau.f64s();
    let (m, n) = (a.m, a.n);
    let mut out = Vec::with_capacity(a.v.len());
    for b in 0..a.count() {
        let mut q = vec![0.0; m * n];
        for i in 0..n {
            q[i * n + i] = 1.0;
        }
        apply_q(a.get(b), n, &taus[b * k..(b + 1) * k], &mut q, m, n);
        out.extend(q);
    }
    Ok(vec![Tensor::from_f64s(cx.out_dtype(), cx.out_shape(), out)])
}

/// `ormqr(self, input2, input3, left, transpose)`: `op(Q) C` (left) or `C op(Q)`, Q the
/// product of the reflectors of `self`, `op` the transpose with `transpose`.
pub(crate) fn ormqr(cx: &Ctx) -> R<Vec<Tensor>> {
    let a = Mats::of(cx.t("self")?, "self")?;
    let tau = cx.t("input2")?;
    let k = *tau.shape.last().unwrap_or(&0);
    let taus = tau.f64s();
    let c = Mats::of(cx.t("input3")?, "input3")?;
    let (left, tr) = (cx.bool("left")?, cx.bool("transpose")?);
    let mut out = Vec::with_capacity(c.v.len());
    for b in 0..a.count() {
        let q = q_full(a.get(b), a.m, a.n, &taus[b * k..(b + 1) * k]);
        let q = if tr { transpose(&q, a.m, a.m) } else { q };
        out.extend(if left {
            matmul(&q, c.get(b), a.m, a.m, c.n)
        } else {
            matmul(c.get(b), &q, c.m, a.m, a.m)
        });
    }
    Ok(vec![Tensor::from_f64s(cx.out_dtype(), cx.out_shape(), out)])
}

/// `linalg_qr(A, mode)`: Q `H_1 ... H_k` (its first `k` columns when `reduced`), R the upper
/// triangle of `geqrf`'s result (its first `k` rows unless `complete`).
pub(crate) fn linalg_qr(cx: &Ctx) -> R<Vec<Tensor>> {
    let mut a = Mats::of(cx.t("A")?, "A")?;
    let (m, n) = (a.m, a.n);
    let k = m.min(n);
    let mode = cx.str("mode")?;
    let (qc, rr) = match mode {
        "complete" => (m, m),
        _ => (k, k),
    };
    let (mut qs, mut rs) = (vec![], vec![]);
    for b in 0..a.count() {
        let mat = &mut a.v[b * m * n..(b + 1) * m * n];
        let tau = geqrf_in_place(mat, m, n);
        if mode != "r" {
            let q = q_full(mat, m, n, &tau);
            for i in 0..m {
                qs.extend_from_slice(&q[i * m..i * m + qc]);
            }
        }
        for i in 0..rr {
            for j in 0..n {
                rs.push(if j >= i { mat[i * n + j] } else { 0.0 });
            }
        }
    }
    Ok(vec![
        Tensor::from_f64s(cx.out_dtype_of(0), cx.out_shape_of(0), qs),
        Tensor::from_f64s(cx.out_dtype_of(1), cx.out_shape_of(1), rs),
    ])
}

// ---------------------------------------------------------------------------------------------
// eigh and SVD

/// Sweeps of Jacobi rotations before giving up on convergence (a few suffice in practice;
/// NaN inputs never converge and stop here).
const MAX_SWEEPS: usize = 80;

/// `(cos, sin)` of the Jacobi rotation that zeroes the off-diagonal `g` of the symmetric 2x2
/// `[[a, g], [g, b]]`.
fn rotation(a: f64, b: f64, g: f64) -> (f64, f64) {
    let zeta = (b - a) / (2.0 * g);
    let t = if zeta.is_infinite() {
        0.0
    } else {
        zeta.signum() / (zeta.abs() + (1.0 + zeta * zeta).sqrt())
    };
    let c = 1.0 / (1.0 + t * t).sqrt();
    (c, c * t)
}

/// Eigenvalues (ascending) and eigenvectors (columns of the row-major `n x n` result) of the
/// symmetric matrix `a`, by cyclic Jacobi rotations.
fn jacobi_eigh(a: &[f64], n: usize) -> (Vec<f64>, Vec<f64>) {
    let mut a = a.to_vec();
    let mut v = identity(n);
    for _ in 0..MAX_SWEEPS {
        let off: f64 = (0..n)
            .flat_map(|i| (0..n).filter(move |&j| j != i).map(move |j| (i, j)))
            .map(|(i, j)| a[i * n + j] * a[i * n + j])
            .sum();
        let diag: f64 = (0..n).map(|i| a[i * n + i] * a[i * n + i]).sum();
        let tiny = f64::EPSILON * f64::EPSILON * 1e-4 * diag;
        // converged (or NaN: no comparison holds)
        if off.partial_cmp(&tiny) != Some(std::cmp::Ordering::Greater) || off == 0.0 {
            break;
        }
        for p in 0..n {
            for q in p + 1..n {
                let g = a[p * n + q];
                if g == 0.0 {
                    continue;
                }
                let (c, s) = rotation(a[p * n + p], a[q * n + q], g);
                for r in 0..n {
                    let (x, y) = (a[r * n + p], a[r * n + q]);
                    a[r * n + p] = c * x - s * y;
                    a[r * n + q] = s * x + c * y;
                }
                for r in 0..n {
                    let (x, y) = (a[p * n + r], a[q * n + r]);
                    a[p * n + r] = c * x - s * y;
                    a[q * n + r] = s * x + c * y;
                }
                a[p * n + q] = 0.0;
                a[q * n + p] = 0.0;
                for r in 0..n {
                    let (x, y) = (v[r * n + p], v[r * n + q]);
                    v[r * n + p] = c * x - s * y;
                    v[r * n + q] = s * x + c * y;
                }
            }
        }
    }
    let w: Vec<f64> = (0..n).map(|i| a[i * n + i]).collect();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&i, &j| w[i].total_cmp(&w[j]));
    let vals = order.iter().map(|&i| w[i]).collect();
    let mut vecs = vec![0.0; n * n];
    for (c, &i) in order.iter().enumerate() {
        for r in 0..n {
            vecs[r * n + c] = v[r * n + i];
        }
    }
    (vals, vecs)
}

/// `_linalg_eigh(A, UPLO, compute_v)`: of the symmetric matrix given by A's lower (`L`) or
/// upper (`U`) triangle.
pub(crate) fn eigh(cx: &Ctx) -> R<Vec<Tensor>> {
    let a = Mats::of(cx.t("A")?, "A")?;
    let n = a.square("A")?;
    let lower = cx.str("UPLO")? != "U";
    let (mut ws, mut vs) = (vec![], vec![]);
    for b in 0..a.count() {
        let m = a.get(b);
        let mut s = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..n {
                let (r, c) = if (i >= j) == lower { (i, j) } else { (j, i) };
                s[i * n + j] = m[r * n + c];
            }
        }
        let (w, v) = jacobi_eigh(&s, n);
        ws.extend(w);
        vs.extend(v);
    }
    let vs = if cx.bool("compute_v")? { vs } else { vec![] };
    Ok(vec![
        Tensor::from_f64s(cx.out_dtype_of(0), cx.out_shape_of(0), ws),
        Tensor::from_f64s(cx.out_dtype_of(1), cx.out_shape_of(1), vs),
    ])
}

/// Extends the orthonormal columns `cols` (each `m` long) to `want` columns, with the
/// standard basis vector farthest from their span each time (Gram-Schmidt, twice).
fn complete_basis(cols: &mut Vec<Vec<f64>>, m: usize, want: usize) {
    while cols.len() < want {
        let mut best: Option<(f64, Vec<f64>)> = None;
        for e in 0..m {
            let mut r = vec![0.0; m];
            r[e] = 1.0;
            for _ in 0..2 {
                for c in cols.iter() {
                    let d: f64 = c.iter().zip(&r).map(|(x, y)| x * y).sum();
                    for (ri, ci) in r.iter_mut().zip(c) {
                        *ri -= d * ci;
                    }
                }
            }
            let norm = r.iter().map(|x| x * x).sum::<f64>().sqrt();
            if best.as_ref().is_none_or(|(b, _)| norm > *b) {
                best = Some((norm, r));
            }
        }
        let (norm, r) = best.unwrap_or((1.0, vec![0.0; m]));
        cols.push(r.iter().map(|x| x / norm).collect());
    }
}

/// SVD of the `m x n` matrix `a` with `m >= n` by one-sided Jacobi rotations: U's columns
/// (`ucols` of them, `>= n`), the descending singular values and V's `n` columns.
fn jacobi_svd_tall(
    a: &[f64],
    m: usize,
    n: usize,
    ucols: usize,
) -> (Vec<Vec<f64>>, Vec<f64>, Vec<Vec<f64>>) {
    let mut w: Vec<Vec<f64>> = (0..n)
        .map(|j| (0..m).map(|i| a[i * n + j]).collect())
        .collect();
    let mut v: Vec<Vec<f64>> = (0..n)
        .map(|j| (0..n).map(|i| if i == j { 1.0 } else { 0.0 }).collect())
        .collect();
    let dot = |x: &[f64], y: &[f64]| x.iter().zip(y).map(|(p, q)| p * q).sum::<f64>();
    for _ in 0..MAX_SWEEPS {
        let mut rotated = false;
        for p in 0..n {
            for q in p + 1..n {
                let (alpha, beta, gamma) =
                    (dot(&w[p], &w[p]), dot(&w[q], &w[q]), dot(&w[p], &w[q]));
                let tiny = f64::EPSILON * (alpha * beta).sqrt();
                if gamma == 0.0
                    || gamma.abs().partial_cmp(&tiny) != Some(std::cmp::Ordering::Greater)
                {
                    continue;
                }
                rotated = true;
                let (c, s) = rotation(alpha, beta, gamma);
                for cols in [&mut w, &mut v] {
                    let (lo, hi) = cols.split_at_mut(q);
                    for (x, y) in lo[p].iter_mut().zip(hi[0].iter_mut()) {
                        let (a0, b0) = (*x, *y);
                        *x = c * a0 - s * b0;
                        *y = s * a0 + c * b0;
                    }
                }
            }
        }
        if !rotated {
            break;
        }
    }
    let sig: Vec<f64> = w.iter().map(|c| dot(c, c).sqrt()).collect();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&i, &j| sig[j].total_cmp(&sig[i]));
    let s: Vec<f64> = order.iter().map(|&i| sig[i]).collect();
    let vv: Vec<Vec<f64>> = order.iter().map(|&i| v[i].clone()).collect();
    let mut u: Vec<Vec<f64>> = vec![];
    for &i in &order {
        if sig[i] > 0.0 && sig[i].is_finite() {
            u.push(w[i].iter().map(|x| x / sig[i]).collect());
        } else {
            break;
        }
    }
    complete_basis(&mut u, m, ucols);
    (u, s, vv)
}

/// `_linalg_svd(A, full_matrices, compute_uv, driver)`: `A = U diag(S) Vh` (`driver` is for
/// CUDA only and ignored, as on the CPU).
pub(crate) fn svd(cx: &Ctx) -> R<Vec<Tensor>> {
    let a = Mats::of(cx.t("A")?, "A")?;
    let (m, n) = (a.m, a.n);
    let k = m.min(n);
    let full = cx.bool("full_matrices")?;
    let (mut us, mut ss, mut vhs) = (vec![], vec![], vec![]);
    for b in 0..a.count() {
        let mat = a.get(b);
        // U: m x uc, Vh: vr x n
        let (uc, vr) = if full { (m, n) } else { (k, k) };
        let (ucols, s, vcols) = if m >= n {
            let (u, s, v) = jacobi_svd_tall(mat, m, n, uc);
            (u, s, v)
        } else {
            // A^T = U' S V'^T, so A = V' S U'^T
            let (u2, s, v2) = jacobi_svd_tall(&transpose(mat, m, n), n, m, vr);
            (v2, s, u2)
        };
        for i in 0..m {
            for c in ucols.iter().take(uc) {
                us.push(c[i]);
            }
        }
        ss.extend(s);
        for r in vcols.iter().take(vr) {
            vhs.extend_from_slice(&r[..n]);
        }
    }
    let uv = cx.bool("compute_uv")?;
    Ok(vec![
        Tensor::from_f64s(
            cx.out_dtype_of(0),
            cx.out_shape_of(0),
            if uv { us } else { vec![] },
        ),
        Tensor::from_f64s(cx.out_dtype_of(1), cx.out_shape_of(1), ss),
        Tensor::from_f64s(
            cx.out_dtype_of(2),
            cx.out_shape_of(2),
            if uv { vhs } else { vec![] },
        ),
    ])
}

// ---------------------------------------------------------------------------------------------
// LDL (Bunch-Kaufman)

/// Bunch-Kaufman `L D L^T` of the lower triangle of the symmetric `n x n` matrix `a`, in
/// place (LAPACK's `sytf2` with `uplo = 'L'`): D's 1x1 and 2x2 blocks on the diagonal and
/// sub-diagonal, L's multipliers below them. Returns the 1-based LAPACK pivots (`k` for a 1x1
/// block whose row and column `k` were interchanged with `kp`; `-kp` twice for a 2x2 block)
/// and `info`, the first zero diagonal block (1-based).
fn sytf2_lower(a: &mut [f64], n: usize) -> (Vec<i64>, i64) {
    let alpha = (1.0 + 17f64.sqrt()) / 8.0;
    let mut piv = vec![0i64; n];
    let mut info = 0;
    let at = |i: usize, j: usize| i * n + j;
    // first index of the largest |value| among `idx`
    let amax = |a: &[f64], idx: &mut dyn Iterator<Item = (usize, usize)>| {
        let mut best: Option<((usize, usize), f64)> = None;
        for (i, j) in idx {
            let v = a[at(i, j)].abs();
            if best.is_none_or(|(_, b)| v > b) {
                best = Some(((i, j), v));
            }
        }
        best
    };
    let mut k = 0;
    while k < n {
        let mut kstep = 1;
        let absakk = a[at(k, k)].abs();
        let (imax, colmax) = match amax(a, &mut (k + 1..n).map(|i| (i, k))) {
            Some(((i, _), v)) => (i, v),
            None => (k, 0.0),
        };
        let kp;
        if absakk.max(colmax) == 0.0 || absakk.is_nan() {
            if info == 0 {
                info = k as i64 + 1;
            }
            kp = k;
        } else {
            if absakk >= alpha * colmax {
                kp = k;
            } else {
                let mut rowmax = amax(a, &mut (k..imax).map(|j| (imax, j))).map_or(0.0, |b| b.1);
                if let Some((_, v)) = amax(a, &mut (imax + 1..n).map(|i| (i, imax))) {
                    rowmax = rowmax.max(v);
                }
                if absakk >= alpha * colmax * (colmax / rowmax) {
                    kp = k;
                } else if a[at(imax, imax)].abs() >= alpha * rowmax {
                    kp = imax;
                } else {
                    kp = imax;
                    kstep = 2;
                }
            }
            let kk = k + kstep - 1;
            if kp != kk {
                for i in kp + 1..n {
                    a.swap(at(i, kk), at(i, kp));
                }
                for j in kk + 1..kp {
                    a.swap(at(j, kk), at(kp, j));
                }
                a.swap(at(kk, kk), at(kp, kp));
                if kstep == 2 {
                    a.swap(at(k + 1, k), at(kp, k));
                }
            }
            if kstep == 1 {
                let d11 = 1.0 / a[at(k, k)];
                for j in k + 1..n {
                    let xj = a[at(j, k)];
                    for i in j..n {
                        a[at(i, j)] -= d11 * a[at(i, k)] * xj;
                    }
                }
                for i in k + 1..n {
                    a[at(i, k)] *= d11;
                }
            } else if k + 2 < n {
                let d21 = a[at(k + 1, k)];
                let d11 = a[at(k + 1, k + 1)] / d21;
                let d22 = a[at(k, k)] / d21;
                let t = 1.0 / (d11 * d22 - 1.0);
                let d21 = t / d21;
                for j in k + 2..n {
                    let wk = d21 * (d11 * a[at(j, k)] - a[at(j, k + 1)]);
                    let wkp1 = d21 * (d22 * a[at(j, k + 1)] - a[at(j, k)]);
                    for i in j..n {
                        a[at(i, j)] -= a[at(i, k)] * wk + a[at(i, k + 1)] * wkp1;
                    }
                    a[at(j, k)] = wk;
                    a[at(j, k + 1)] = wkp1;
                }
            }
        }
        if kstep == 1 {
            piv[k] = kp as i64 + 1;
        } else {
            piv[k] = -(kp as i64 + 1);
            piv[k + 1] = -(kp as i64 + 1);
        }
        k += kstep;
    }
    (piv, info)
}

/// Solves `A X = B` for `n x c` B in place, A given by [`sytf2_lower`]'s factors and pivots
/// (LAPACK's `sytrs` with `uplo = 'L'`).
fn sytrs_lower(ld: &[f64], piv: &[i64], n: usize, b: &mut [f64], c: usize) -> R<()> {
    let at = |i: usize, j: usize| i * n + j;
    let swap = |b: &mut [f64], i: usize, p: usize| {
        if i != p {
            for col in 0..c {
                b.swap(i * c + col, p * c + col);
            }
        }
    };
    let target = |p: i64| -> R<usize> {
        let q = p.unsigned_abs() as usize;
        if q == 0 || q > n {
            return Err(format!("pivot {p} is out of range for {n}x{n} matrices"));
        }
        Ok(q - 1)
    };
    let mut k = 0;
    while k < n {
        if piv[k] > 0 {
            swap(b, k, target(piv[k])?);
            for i in k + 1..n {
                for col in 0..c {
                    b[i * c + col] -= ld[at(i, k)] * b[k * c + col];
                }
            }
            for col in 0..c {
                b[k * c + col] /= ld[at(k, k)];
            }
            k += 1;
        } else {
            if k + 1 >= n {
                return Err(format!("a 2x2 pivot block starts at the last row {k}"));
            }
            swap(b, k + 1, target(piv[k])?);
            for i in k + 2..n {
                for col in 0..c {
                    b[i * c + col] -=
                        ld[at(i, k)] * b[k * c + col] + ld[at(i, k + 1)] * b[(k + 1) * c + col];
                }
            }
            let akm1k = ld[at(k + 1, k)];
            let akm1 = ld[at(k, k)] / akm1k;
            let ak = ld[at(k + 1, k + 1)] / akm1k;
            let denom = akm1 * ak - 1.0;
            for col in 0..c {
                let bkm1 = b[k * c + col] / akm1k;
                let bk = b[(k + 1) * c + col] / akm1k;
                b[k * c + col] = (ak * bkm1 - bk) / denom;
                b[(k + 1) * c + col] = (akm1 * bk - bkm1) / denom;
            }
            k += 2;
        }
    }
    let mut k = n;
    while k > 0 {
        let kk = k - 1;
        if piv[kk] > 0 {
            for col in 0..c {
                let s: f64 = (kk + 1..n).map(|i| ld[at(i, kk)] * b[i * c + col]).sum();
                b[kk * c + col] -= s;
            }
            swap(b, kk, target(piv[kk])?);
            k -= 1;
        } else {
            if kk == 0 {
                return Err("a 2x2 pivot block ends at the first row".into());
            }
            for col in 0..c {
                let s: f64 = (kk + 1..n).map(|i| ld[at(i, kk)] * b[i * c + col]).sum();
                let s1: f64 = (kk + 1..n)
                    .map(|i| ld[at(i, kk - 1)] * b[i * c + col])
                    .sum();
                b[kk * c + col] -= s;
                b[(kk - 1) * c + col] -= s1;
            }
            swap(b, kk, target(piv[kk])?);
            k -= 2;
        }
    }
    Ok(())
}

/// `linalg_ldl_factor_ex(self, hermitian, check_errors)`: LD is the factorization of the
/// lower triangle (its strict upper triangle zero), as ATen leaves it.
pub(crate) fn ldl_factor_ex(cx: &Ctx) -> R<Vec<Tensor>> {
    let a = Mats::of(cx.t("self")?, "self")?;
    let n = a.square("self")?;
    let (mut lds, mut pivs, mut infos) = (Vec::with_capacity(a.v.len()), vec![], vec![]);
    for b in 0..a.count() {
        let mut m = a.get(b).to_vec();
        for i in 0..n {
            for j in i + 1..n {
                m[i * n + j] = 0.0;
            }
        }
        let (p, info) = sytf2_lower(&mut m, n);
        lds.extend(m);
        pivs.extend(p);
        infos.push(info);
    }
    check_info(cx, &infos, "the LDL factorization (the matrix is singular)")?;
    Ok(vec![
        Tensor::from_f64s(cx.out_dtype_of(0), cx.out_shape_of(0), lds),
        i32s(cx.out_dtype_of(1), cx.out_shape_of(1), pivs),
        i32s(cx.out_dtype_of(2), cx.out_shape_of(2), infos),
    ])
}

/// `linalg_ldl_solve(LD, pivots, B, hermitian)`: batch dimensions broadcast.
pub(crate) fn ldl_solve(cx: &Ctx) -> R<Vec<Tensor>> {
    let ld = Mats::of(cx.t("LD")?, "LD")?;
    let n = ld.square("LD")?;
    let pivs = cx.t("pivots")?.i64s();
    let b = Mats::of(cx.t("B")?, "B")?;
    let shape = cx.out_shape_of(0);
    let out_batch = shape[..shape.len() - 2].to_vec();
    let mut out = Vec::with_capacity(numel(&shape));
    for o in 0..numel(&out_batch) {
        let (il, ib) = (
            broadcast_index(&out_batch, &ld.batch, o),
            broadcast_index(&out_batch, &b.batch, o),
        );
        let mut x = b.get(ib).to_vec();
        sytrs_lower(ld.get(il), &pivs[il * n..(il + 1) * n], n, &mut x, b.n)?;
        out.extend(x);
    }
    Ok(vec![Tensor::from_f64s(cx.out_dtype(), shape, out)])
}

// ---------------------------------------------------------------------------------------------
// matrix exponential

/// `exp(A)` of an `n x n` matrix: scaled until its 1-norm is at most 1/4, a Taylor
/// polynomial of degree 18 (truncation error below 1e-28 relative), squared back.
fn expm(a: &[f64], n: usize) -> Vec<f64> {
    let norm = (0..n)
        .map(|j| (0..n).map(|i| a[i * n + j].abs()).sum::<f64>())
        .fold(0.0, f64::max);
    let squarings = if norm > 0.25 && norm.is_finite() {
        ((norm / 0.25).log2().ceil() as i32).clamp(0, 1100)
    } else {
        0
    };
    let scale = 0.5f64.powi(squarings);
    let b: Vec<f64> = a.iter().map(|x| x * scale).collect();
    let mut result = identity(n);
    let mut term = identity(n);
    for k in 1..=18 {
        term = matmul(&term, &b, n, n, n);
        for t in term.iter_mut() {
            *t /= k as f64;
        }
        for (r, t) in result.iter_mut().zip(&term) {
            *r += t;
        }
    }
    for _ in 0..squarings {
        result = matmul(&result, &result, n, n, n);
    }
    if !norm.is_finite() {
        result.iter_mut().for_each(|x| *x = f64::NAN);
    }
    result
}

/// `linalg_matrix_exp(self)`.
pub(crate) fn matrix_exp(cx: &Ctx) -> R<Vec<Tensor>> {
    let a = Mats::of(cx.t("self")?, "self")?;
    let n = a.square("self")?;
    let mut out = Vec::with_capacity(a.v.len());
    for b in 0..a.count() {
        out.extend(expm(a.get(b), n));
    }
    Ok(vec![Tensor::from_f64s(cx.out_dtype(), cx.out_shape(), out)])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f64], b: &[f64], tol: f64) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= tol)
    }

    #[test]
    fn lu_picks_the_first_largest_pivot_and_reports_singular_columns() {
        // column 0: |-4| is the largest (first of the two 4s)
        let mut a = vec![1.0, 2.0, -4.0, 5.0, 4.0, 6.0];
        let (piv, info) = lu_in_place(&mut a, 3, 2, true);
        assert_eq!(piv, vec![2, 3]);
        assert_eq!(info, 0);
        let mut s = vec![1.0, 2.0, 2.0, 4.0];
        let (piv, info) = lu_in_place(&mut s, 2, 2, true);
        assert_eq!((piv, info), (vec![2, 2], 2));
        let mut z = vec![0.0; 4];
        assert_eq!(lu_in_place(&mut z, 2, 2, true).1, 1);
        // 1x1 and empty
        let mut one = vec![3.0];
        assert_eq!(lu_in_place(&mut one, 1, 1, true), (vec![1], 0));
        assert_eq!(lu_in_place(&mut [], 0, 0, true), (vec![], 0));
    }

    #[test]
    fn lu_solve_and_inverse() {
        let a = vec![2.0, 1.0, 1.0, 1.0, 3.0, 2.0, 1.0, 0.0, 0.0];
        let mut lu = a.clone();
        let (piv, _) = lu_in_place(&mut lu, 3, 3, true);
        let mut x = identity(3);
        lu_solve_in_place(&lu, &piv, 3, &mut x, 3, false);
        assert!(close(&matmul(&a, &x, 3, 3, 3), &identity(3), 1e-12));
        let mut xt = identity(3);
        lu_solve_in_place(&lu, &piv, 3, &mut xt, 3, true);
        assert!(close(
            &matmul(&transpose(&a, 3, 3), &xt, 3, 3, 3),
            &identity(3),
            1e-12
        ));
        // right side: X A = B
        let b = vec![1.0, 2.0, 3.0];
        let xr = lu_solve_side(&lu, &piv, 3, &b, (1, 3), false, false);
        assert!(close(&matmul(&xr, &a, 1, 3, 3), &b, 1e-12));
    }

    #[test]
    fn cholesky_factors_and_fails_on_indefinite() {
        let a = vec![4.0, 2.0, 2.0, 3.0];
        let (l, info) = cholesky_lower(&a, 2);
        assert_eq!(info, 0);
        assert!(close(&l, &[2.0, 0.0, 1.0, 2f64.sqrt()], 1e-15));
        assert_eq!(cholesky_lower(&[1.0, 2.0, 2.0, 1.0], 2).1, 2);
        assert_eq!(cholesky_lower(&[-1.0], 1).1, 1);
    }

    #[test]
    fn qr_follows_geqrf_signs_and_reconstructs() {
        // tall 3x2: R's diagonal has the sign opposite to the column's head (larfg)
        let a = vec![1.0, 2.0, 3.0, 4.0, 5.0, 7.0];
        let mut f = a.clone();
        let tau = geqrf_in_place(&mut f, 3, 2);
        assert!(f[0] < 0.0 && tau[0] > 1.0 && tau[0] <= 2.0);
        let q = q_full(&f, 3, 2, &tau);
        let r: Vec<f64> = (0..3)
            .flat_map(|i| (0..2).map(move |j| (i, j)))
            .map(|(i, j)| if j >= i { f[i * 2 + j] } else { 0.0 })
            .collect();
        assert!(close(&matmul(&q, &r, 3, 3, 2), &a, 1e-12));
        assert!(close(
            &matmul(&transpose(&q, 3, 3), &q, 3, 3, 3),
            &identity(3),
            1e-12
        ));
        // a zero column below the diagonal: tau 0 (H = I)
        let mut e = vec![2.0, 1.0, 0.0, 3.0];
        assert_eq!(geqrf_in_place(&mut e, 2, 2)[0], 0.0);
    }

    #[test]
    fn eigh_is_ascending_and_orthonormal() {
        let a = vec![2.0, 1.0, 0.0, 1.0, 2.0, 1.0, 0.0, 1.0, 2.0];
        let (w, v) = jacobi_eigh(&a, 3);
        let r2 = 2f64.sqrt();
        assert!(close(&w, &[2.0 - r2, 2.0, 2.0 + r2], 1e-14));
        let av = matmul(&a, &v, 3, 3, 3);
        for c in 0..3 {
            for r in 0..3 {
                assert!((av[r * 3 + c] - w[c] * v[r * 3 + c]).abs() < 1e-13);
            }
        }
        assert!(close(
            &matmul(&transpose(&v, 3, 3), &v, 3, 3, 3),
            &identity(3),
            1e-13
        ));
        assert_eq!(jacobi_eigh(&[5.0], 1), (vec![5.0], vec![1.0]));
    }

    #[test]
    fn svd_is_descending_and_reconstructs_rank_deficient() {
        // rank 1, 3x2: the second singular value is 0 and U is completed to orthonormal
        let a = vec![1.0, 2.0, 2.0, 4.0, 3.0, 6.0];
        let (u, s, v) = jacobi_svd_tall(&a, 3, 2, 3);
        assert!(
            (s[0] - 70f64.sqrt()).abs() < 1e-13 && s[1].abs() < 1e-13,
            "{s:?}"
        );
        assert_eq!(u.len(), 3);
        for i in 0..3 {
            for j in 0..3 {
                let d: f64 = u[i].iter().zip(&u[j]).map(|(x, y)| x * y).sum();
                assert!((d - if i == j { 1.0 } else { 0.0 }).abs() < 1e-13);
            }
        }
        for i in 0..3 {
            for j in 0..2 {
                let x: f64 = (0..2).map(|l| u[l][i] * s[l] * v[l][j]).sum();
                assert!((x - a[i * 2 + j]).abs() < 1e-13);
            }
        }
    }

    #[test]
    fn expm_of_diagonal_and_nilpotent() {
        let e = expm(&[1.0, 0.0, 0.0, -30.0], 2);
        assert!(
            (e[0] / 1f64.exp() - 1.0).abs() < 1e-12 && (e[3] / (-30f64).exp() - 1.0).abs() < 1e-12
        );
        let e = expm(&[0.0, 5.0, 0.0, 0.0], 2);
        assert!(close(&e, &[1.0, 5.0, 0.0, 1.0], 1e-13));
        assert!(expm(&[f64::NAN], 1)[0].is_nan());
    }

    #[test]
    fn ldl_solves_with_1x1_and_2x2_blocks() {
        // a zero diagonal forces a 2x2 block
        let a = vec![0.0, 1.0, 2.0, 1.0, 0.0, 3.0, 2.0, 3.0, 1.0];
        let mut f = a.clone();
        let (piv, info) = sytf2_lower(&mut f, 3);
        assert_eq!(info, 0);
        assert!(piv.iter().any(|&p| p < 0), "{piv:?}");
        let mut x = identity(3);
        sytrs_lower(&f, &piv, 3, &mut x, 3).unwrap();
        assert!(close(&matmul(&a, &x, 3, 3, 3), &identity(3), 1e-12));
        // diagonally dominant: 1x1 blocks, no interchange
        let d = vec![4.0, 1.0, 1.0, 3.0];
        let mut g = d.clone();
        assert_eq!(sytf2_lower(&mut g, 2), (vec![1, 2], 0));
        let mut z = vec![0.0; 4];
        assert_eq!(sytf2_lower(&mut z, 2).1, 1);
        assert!(sytrs_lower(&g, &[5, 2], 2, &mut [1.0, 1.0], 1).is_err());
    }

    #[test]
    fn broadcast_index_maps_batch_elements() {
        assert_eq!(broadcast_index(&[2, 3], &[3], 4), 1);
        assert_eq!(broadcast_index(&[2, 3], &[2, 1], 4), 1);
        assert_eq!(broadcast_index(&[2, 3], &[], 5), 0);
    }
}
