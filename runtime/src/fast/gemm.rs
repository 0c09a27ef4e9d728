//! Dense `f32` matrix products (`mm`, `bmm`, `addmm`) over strided operands.
//!
//! The product itself is computed by the [`gemm`](https://crates.io/crates/gemm) crate (packed
//! panels, AVX2/FMA or AVX-512 micro-kernels chosen at run time), which measured faster than
//! `matrixmultiply` on this project's machines and runs on rayon, so it honors the thread pool
//! the executor installs. This module adds the grid: `C` is cut into blocks of whole rows per
//! batch entry, with a block size that depends on the problem shape only, so the result is
//! bitwise the same for any thread count (no split of `k`). Each block gets its bias and then
//! the caller's epilogue while it is still in cache.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// A strided view of a batch of matrices inside a flat buffer: element `(b, i, j)` is at
/// `offset + b * batch_stride + i * row_stride + j * col_stride`. Strides may be zero
/// (broadcast), and a transposed operand is just swapped strides.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operand {
    /// Index of element `(0, 0, 0)`.
    pub offset: usize,
    /// Distance between consecutive matrices of the batch.
    pub batch_stride: usize,
    /// Distance between consecutive rows.
    pub row_stride: usize,
    /// Distance between consecutive columns.
    pub col_stride: usize,
}

impl Operand {
    /// A contiguous row-major batch of `rows x cols` matrices.
    pub fn contiguous(rows: usize, cols: usize) -> Self {
        Operand {
            offset: 0,
            batch_stride: rows * cols,
            row_stride: cols,
            col_stride: 1,
        }
    }

    /// The largest index read for a `batch x rows x cols` view, or `None` when the view is
    /// empty; `Err` on overflow.
    fn max_index(&self, batch: usize, rows: usize, cols: usize) -> Result<Option<usize>, String> {
        if batch == 0 || rows == 0 || cols == 0 {
            return Ok(None);
        }
        let over = || "operand strides overflow".to_string();
        let b = (batch - 1)
            .checked_mul(self.batch_stride)
            .ok_or_else(over)?;
        let r = (rows - 1).checked_mul(self.row_stride).ok_or_else(over)?;
        let c = (cols - 1).checked_mul(self.col_stride).ok_or_else(over)?;
        let last = self
            .offset
            .checked_add(b)
            .and_then(|v| v.checked_add(r))
            .and_then(|v| v.checked_add(c))
            .ok_or_else(over)?;
        // Keep every address representable as an `isize` offset for the GEMM crate.
        if last > isize::MAX as usize / 4 {
            return Err(over());
        }
        Ok(Some(last))
    }

    fn check(
        &self,
        what: &str,
        batch: usize,
        rows: usize,
        cols: usize,
        len: usize,
    ) -> Result<(), String> {
        if let Some(last) = self.max_index(batch, rows, cols)? {
            if last >= len {
                return Err(format!(
                    "{what}: a {batch}x{rows}x{cols} view {self:?} reads index {last}, \
                     but the buffer has {len} elements"
                ));
            }
        }
        Ok(())
    }
}

/// One (batched) matrix product `C[b] = alpha * A[b] @ B[b]` (+ `beta * bias[b]`), with `A`
/// `m x k`, `B` `k x n`, and `C` a contiguous `[batch, m, n]` buffer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MatmulSpec {
    /// Number of independent products.
    pub batch: usize,
    /// Rows of `A` and `C`.
    pub m: usize,
    /// Columns of `B` and `C`.
    pub n: usize,
    /// Columns of `A`, rows of `B`.
    pub k: usize,
    /// The left operand, `batch x m x k`.
    pub a: Operand,
    /// The right operand, `batch x k x n`.
    pub b: Operand,
    /// addmm: out = beta * bias + alpha * (a @ b); bias broadcast by its own strides (row
    /// vector: row_stride 0). With `beta == 0` the bias is not read (its NaNs do not
    /// propagate), as in PyTorch.
    pub bias: Option<Operand>,
    /// Scale of the product (1 for `mm`/`bmm`).
    pub alpha: f32,
    /// Scale of the bias (ignored without one).
    pub beta: f32,
}

impl MatmulSpec {
    /// A plain contiguous `[batch, m, k] @ [batch, k, n]` product.
    pub fn contiguous(batch: usize, m: usize, n: usize, k: usize) -> Self {
        MatmulSpec {
            batch,
            m,
            n,
            k,
            a: Operand::contiguous(m, k),
            b: Operand::contiguous(k, n),
            bias: None,
            alpha: 1.0,
            beta: 1.0,
        }
    }

    /// Number of elements of `C` (`batch * m * n`), or `Err` on overflow.
    pub fn out_len(&self) -> Result<usize, String> {
        self.batch
            .checked_mul(self.m)
            .and_then(|v| v.checked_mul(self.n))
            .ok_or_else(|| "matmul output size overflows".to_string())
    }

    /// Checks that every element the product reads is inside buffers of the given lengths,
    /// that a bias buffer is given exactly when the spec has a bias, and that `C` has
    /// `batch * m * n` elements.
    pub fn validate(
        &self,
        a_len: usize,
        b_len: usize,
        bias_len: Option<usize>,
        c_len: usize,
    ) -> Result<(), String> {
        let out = self.out_len()?;
        if c_len != out {
            return Err(format!(
                "matmul output has {c_len} elements, expected {} x {} x {} = {out}",
                self.batch, self.m, self.n
            ));
        }
        // An empty product reads nothing.
        if out == 0 {
            return Ok(());
        }
        self.a
            .check("matmul lhs", self.batch, self.m, self.k, a_len)?;
        self.b
            .check("matmul rhs", self.batch, self.k, self.n, b_len)?;
        match (&self.bias, bias_len) {
            (None, None) => Ok(()),
            (Some(bias), Some(len)) => bias.check("matmul bias", self.batch, self.m, self.n, len),
            (Some(_), None) => Err("matmul spec has a bias, but no bias buffer was given".into()),
            (None, Some(_)) => Err("a bias buffer was given to a matmul without a bias".into()),
        }
    }

    /// Rows of `C` per grid block: a function of the shape only (never of the thread count),
    /// aiming at about 16 blocks in all, at least 2 MFLOP each, in multiples of 16 rows.
    pub fn block_rows(&self) -> usize {
        const TARGET_BLOCKS: usize = 16;
        const MIN_BLOCK_FLOPS: usize = 1 << 21;
        const MAX_ROWS: usize = 512;
        let m = self.m.max(1);
        let row_flops = (2 * self.n * self.k).max(1);
        let per_batch = TARGET_BLOCKS.div_ceil(self.batch.max(1));
        let rows = m
            .div_ceil(per_batch)
            .max(MIN_BLOCK_FLOPS.div_ceil(row_flops))
            .min(MAX_ROWS)
            .next_multiple_of(16);
        rows.min(m)
    }
}

/// Raw pointers sent across rayon workers; every access goes through bounds that
/// [`MatmulSpec::validate`] established.
#[derive(Clone, Copy)]
struct SendPtr(*const f32);
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

/// `C = alpha * A @ B (+ beta * bias)` over the spec's grid.
///
/// C is contiguous [batch, m, n]. After each block of rows of C is complete (bias applied),
/// `epilogue(batch_index, row0, c_rows)` is called on that block (c_rows = rows row0.. of that
/// batch, contiguous, len = rows*n) while it is hot in cache, from the worker that computed it.
///
/// # Panics
/// If [`MatmulSpec::validate`] fails for these buffers: callers validate first.
pub fn matmul(
    spec: &MatmulSpec,
    a: &[f32],
    b: &[f32],
    bias: Option<&[f32]>,
    c: &mut [f32],
    epilogue: &(dyn Fn(usize, usize, &mut [f32]) + Sync),
) {
    if let Err(e) = spec.validate(a.len(), b.len(), bias.map(|x| x.len()), c.len()) {
        panic!("invalid matmul: {e}");
    }
    let (m, n, k) = (spec.m, spec.n, spec.k);
    if c.is_empty() {
        return;
    }
    let rows = spec.block_rows();
    let blocks = spec.batch * m.div_ceil(rows);
    // Large matrices in few batches: one GEMM call per batch entry over all rows, split over
    // the pool by the GEMM crate (which packs each panel of B once for all threads; measured
    // 5-10% faster than row blocks at 1024^3-4096^3), then bias and epilogue per row block
    // (such a C is far larger than L2, so no block would have been hot anyway).
    let whole = spec.batch < 4 && blocks > 1 && m * n * 4 > WHOLE_MIN_BYTES;
    // Few blocks: let the GEMM crate split each one over the pool too. It splits rows and
    // columns, never `k`, so the bits do not depend on the thread count either; the choice
    // between these paths depends on the shape only.
    let inner = if whole || blocks < 4 {
        gemm::Parallelism::Rayon(0)
    } else {
        gemm::Parallelism::None
    };
    let (pa, pb) = (SendPtr(a.as_ptr()), SendPtr(b.as_ptr()));
    let bias = bias.map(|x| (spec.bias.expect("validated"), x));
    // The product of rows `row0..` of batch entry `bi` into `cr` (whole rows).
    let product = |bi: usize, row0: usize, cr: &mut [f32]| {
        let nrows = cr.len() / n;
        if k == 0 {
            cr.fill(0.0);
            return;
        }
        let (pa, pb) = (pa, pb);
        let a0 = spec.a.offset + bi * spec.a.batch_stride + row0 * spec.a.row_stride;
        let b0 = spec.b.offset + bi * spec.b.batch_stride;
        // SAFETY: `validate` checked that every `(i, l)` of A with `i < m, l < k` and every
        // `(l, j)` of B with `l < k, j < n` is in bounds, and `cr` is exactly `nrows x n`
        // contiguous.
        unsafe {
            gemm::gemm(
                nrows,
                n,
                k,
                cr.as_mut_ptr(),
                1,
                n as isize,
                false,
                pa.0.add(a0),
                spec.a.col_stride as isize,
                spec.a.row_stride as isize,
                pb.0.add(b0),
                spec.b.col_stride as isize,
                spec.b.row_stride as isize,
                0.0,
                spec.alpha,
                false,
                false,
                false,
                inner,
            );
        }
    };
    let finish = |bi: usize, row0: usize, cr: &mut [f32]| {
        if let Some((op, bv)) = bias {
            if spec.beta != 0.0 {
                add_bias(cr, n, bi, row0, &op, bv, spec.beta);
            }
        }
        epilogue(bi, row0, cr);
    };
    c.par_chunks_mut(m * n).enumerate().for_each(|(bi, cb)| {
        if whole {
            product(bi, 0, cb);
        }
        cb.par_chunks_mut(rows * n)
            .enumerate()
            .for_each(|(blk, cr)| {
                if !whole {
                    product(bi, blk * rows, cr);
                }
                finish(bi, blk * rows, cr);
            });
    });
}

/// Above this size of one `m x n` result (bytes), few-batch products run as one GEMM call.
const WHOLE_MIN_BYTES: usize = 1 << 20;

/// `c[i, j] += beta * bias[bi, row0 + i, j]` for the rows of one block.
fn add_bias(
    c: &mut [f32],
    n: usize,
    bi: usize,
    row0: usize,
    op: &Operand,
    bias: &[f32],
    beta: f32,
) {
    for (i, row) in c.chunks_exact_mut(n).enumerate() {
        let base = op.offset + bi * op.batch_stride + (row0 + i) * op.row_stride;
        if op.col_stride == 1 {
            let src = &bias[base..base + n];
            if beta == 1.0 {
                for (o, &s) in row.iter_mut().zip(src) {
                    *o += s;
                }
            } else {
                for (o, &s) in row.iter_mut().zip(src) {
                    *o += beta * s;
                }
            }
        } else {
            for (j, o) in row.iter_mut().enumerate() {
                *o += beta * bias[base + j * op.col_stride];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_rows_is_shape_only_and_covers_m() {
        let s = MatmulSpec::contiguous(1, 4096, 4096, 4096);
        assert_eq!(s.block_rows(), 256);
        let s = MatmulSpec::contiguous(64, 256, 256, 64);
        assert!(s.block_rows() >= 16 && s.block_rows() <= 256);
        let s = MatmulSpec::contiguous(1, 7, 3, 2);
        assert_eq!(s.block_rows(), 7);
    }

    #[test]
    fn validate_rejects_out_of_bounds_views() {
        let s = MatmulSpec::contiguous(2, 3, 4, 5);
        assert!(s.validate(30, 40, None, 24).is_ok());
        assert!(s.validate(29, 40, None, 24).is_err());
        assert!(s.validate(30, 40, None, 23).is_err());
        assert!(s.validate(30, 40, Some(4), 24).is_err());
        let mut s2 = s.clone();
        s2.a.row_stride = usize::MAX / 2;
        assert!(s2.validate(30, 40, None, 24).is_err());
    }
}
