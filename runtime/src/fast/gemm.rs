//! Dense `f32` matrix products (`mm`, `bmm`, `addmm`) over strided operands.
//!
//! This module maps a [`MatmulSpec`] (batch, strided operands, bias, scale) onto the packed
//! GEMM of [`super::sgemm`], which runs on the executor's rayon pool and never splits `k`, so
//! results are bitwise the same for any thread count. Each finished tile of `C` gets its scale
//! and bias and then the caller's epilogue while it is still in cache.

use super::memory::{try_collect, KernelError};
use super::sgemm::{self, Mat, PackedB, Problem};
use super::SendPtr;
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// A strided view of a batch of matrices inside a flat buffer: element `(b, i, j)` is at
/// `offset + batch_offset(b) + i * row_stride + j * col_stride`, where `batch_offset(b)` is
/// `b * batch_stride`, or with groups `(b / group) * group_stride + (b % group) *
/// batch_stride` (a batch index that is two dimensions of the source, like attention's
/// `batch * heads` over a `[seq, batch, heads * dim]` buffer). Strides may be zero
/// (broadcast), and a transposed operand is just swapped strides.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operand {
    /// Index of element `(0, 0, 0)`.
    pub offset: usize,
    /// Distance between consecutive matrices of the batch.
    pub batch_stride: usize,
    /// Distance between consecutive rows.
    pub row_stride: usize,
    /// Distance between consecutive columns.
    pub col_stride: usize,
    /// Batch entries per group (0 or 1: no groups, `batch_stride` alone).
    #[serde(default)]
    pub group: usize,
    /// Distance between consecutive groups of batch entries (with `group > 1`).
    #[serde(default)]
    pub group_stride: usize,
}

impl Operand {
    /// A contiguous row-major batch of `rows x cols` matrices.
    pub fn contiguous(rows: usize, cols: usize) -> Self {
        Operand {
            offset: 0,
            batch_stride: rows * cols,
            row_stride: cols,
            col_stride: 1,
            ..Operand::default()
        }
    }

    /// Whether batch entries are addressed in groups (two strides).
    pub fn grouped(&self) -> bool {
        self.group > 1
    }

    /// Whether every batch entry is the same matrix (all batch strides zero).
    pub fn batch_shared(&self) -> bool {
        self.batch_stride == 0 && (!self.grouped() || self.group_stride == 0)
    }

    /// Offset of batch entry `bi` from element `(0, 0, 0)` (wrapping: only ever used as a
    /// pointer offset after [`MatmulSpec::validate`]).
    pub fn batch_offset(&self, bi: usize) -> usize {
        if self.grouped() {
            (bi / self.group)
                .wrapping_mul(self.group_stride)
                .wrapping_add((bi % self.group).wrapping_mul(self.batch_stride))
        } else {
            bi.wrapping_mul(self.batch_stride)
        }
    }

    /// The largest batch offset over `batch` entries (> 0), or `None` on overflow.
    fn max_batch_offset(&self, batch: usize) -> Option<usize> {
        let last = batch - 1;
        if !self.grouped() {
            return last.checked_mul(self.batch_stride);
        }
        let at = |outer: usize, inner: usize| {
            outer
                .checked_mul(self.group_stride)?
                .checked_add(inner.checked_mul(self.batch_stride)?)
        };
        let (outer, inner) = (last / self.group, last % self.group);
        let mut best = at(outer, inner)?;
        if outer > 0 {
            best = best.max(at(outer - 1, self.group - 1)?);
        }
        Some(best)
    }

    /// The largest index read for a `batch x rows x cols` view, or `None` when the view is
    /// empty; `Err` on overflow.
    pub(crate) fn max_index(
        &self,
        batch: usize,
        rows: usize,
        cols: usize,
    ) -> Result<Option<usize>, String> {
        if batch == 0 || rows == 0 || cols == 0 {
            return Ok(None);
        }
        let over = || "operand strides overflow".to_string();
        let b = self.max_batch_offset(batch).ok_or_else(over)?;
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

    pub(crate) fn check(
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

/// A finished tile of a result handed to an epilogue: rows `rows` and columns `cols` of the
/// result viewed as a row-major matrix of rows of `n` elements (a matmul's `[batch, m, n]` as
/// `[batch * m, n]`; a convolution's `[n, cout, oh, ow]` as `[n * cout, oh * ow]`), complete
/// (bias and scale applied) and owned by this call alone. The flat index of element `(r, c)`
/// is `r * n + c`.
pub struct Tile {
    /// Rows of `C` viewed as `[batch * m, n]`.
    pub rows: Range<usize>,
    /// Columns.
    pub cols: Range<usize>,
    /// Row length of `C`.
    pub n: usize,
    c: *mut f32,
}

impl Tile {
    /// A tile of the row-major matrix at `c` with rows of `n` elements.
    ///
    /// # Safety
    /// The tile must lie inside the matrix, and nothing else may access it while the tile is
    /// alive.
    pub(crate) unsafe fn new(
        c: *mut f32,
        n: usize,
        rows: Range<usize>,
        cols: Range<usize>,
    ) -> Tile {
        Tile { rows, cols, n, c }
    }

    /// Row `r` of the tile, read-only (see [`Tile::row`]).
    ///
    /// # Panics
    /// If `r` is outside the tile.
    pub fn row_ref(&self, r: usize) -> &[f32] {
        assert!(self.rows.contains(&r), "row {r} is outside the tile");
        // SAFETY: as in `row`; shared borrows of `self` only read.
        unsafe {
            std::slice::from_raw_parts(self.c.add(r * self.n + self.cols.start), self.cols.len())
        }
    }

    /// The whole tile as one run of the matrix where it spans whole rows (`cols` is `0..n`):
    /// its first flat index and its elements, rows after rows.
    pub fn as_run(&mut self) -> Option<(usize, &mut [f32])> {
        let whole = self.cols.start == 0 && self.cols.end == self.n;
        // SAFETY: as in `row`: whole rows of the tile, contiguous in `C`.
        whole.then(|| unsafe {
            let start = self.rows.start * self.n;
            let len = self.rows.len() * self.n;
            (
                start,
                std::slice::from_raw_parts_mut(self.c.add(start), len),
            )
        })
    }

    /// Row `r` of the tile (`r` in [`Tile::rows`]), restricted to [`Tile::cols`].
    ///
    /// # Panics
    /// If `r` is outside the tile.
    pub fn row(&mut self, r: usize) -> &mut [f32] {
        assert!(self.rows.contains(&r), "row {r} is outside the tile");
        // SAFETY: `matmul` hands each tile of C to one call only, and the tile lies inside C.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.c.add(r * self.n + self.cols.start),
                self.cols.len(),
            )
        }
    }
}

/// `C = alpha * A @ B (+ beta * bias)` on the packed GEMM of [`super::sgemm`].
///
/// C is contiguous `[batch, m, n]`. A batch whose right operand is shared (`b.batch_stride ==
/// 0`, as in a linear layer over a `[batch, seq, features]` input) is one product of
/// `batch * m` rows, even when `A`'s rows are not evenly strided across the batch. After each
/// tile of C is complete (bias applied), `epilogue(tile)` is called on it while it is hot in
/// cache, from the worker that computed it; the tiles cover C exactly once.
///
/// # Panics
/// If [`MatmulSpec::validate`] fails for these buffers: callers validate first.
pub fn matmul(
    spec: &MatmulSpec,
    a: &[f32],
    b: &[f32],
    bias: Option<&[f32]>,
    c: &mut [f32],
    epilogue: &(dyn Fn(&mut Tile) + Sync),
) -> Result<(), KernelError> {
    matmul_prepacked(spec, a, b, None, bias, c, false, epilogue)
}

/// Packs the right operand of `spec` ahead of time (a constant weight), when every batch
/// entry reads the same one. `b` must pass [`MatmulSpec::validate`] for this spec.
pub fn prepack_b(spec: &MatmulSpec, b: &[f32]) -> Option<PackedB> {
    if spec.batch > 1 && !spec.b.batch_shared() {
        return None;
    }
    let nonempty = spec.k > 0 && spec.n > 0;
    if !nonempty || spec.b.max_index(1, spec.k, spec.n).ok()?? >= b.len() {
        return None;
    }
    let m = Mat::new(
        b.as_ptr().wrapping_add(spec.b.offset),
        spec.b.row_stride as isize,
        spec.b.col_stride as isize,
    );
    // SAFETY: the view's last index is inside `b` (checked above).
    Some(unsafe { PackedB::new(&m, spec.k, spec.n) })
}

/// [`matmul`] with the right operand packed by [`prepack_b`] (then `b` is not read), and with
/// `relu`, `max(x, 0)` (NaN propagating), applied to `C` after the scale and bias and before
/// the epilogue.
///
/// # Panics
/// If [`MatmulSpec::validate`] fails for these buffers, or `packed` is not `b` packed for
/// this spec's shape.
#[allow(clippy::too_many_arguments)] // the operands, their packing, the fused ReLU and the epilogue
pub fn matmul_prepacked(
    spec: &MatmulSpec,
    a: &[f32],
    b: &[f32],
    packed: Option<&PackedB>,
    bias: Option<&[f32]>,
    c: &mut [f32],
    relu: bool,
    epilogue: &(dyn Fn(&mut Tile) + Sync),
) -> Result<(), KernelError> {
    if let Err(e) = spec.validate(a.len(), b.len(), bias.map(|x| x.len()), c.len()) {
        panic!("invalid matmul: {e}");
    }
    if let Some(pk) = packed {
        assert!(
            pk.k == spec.k && pk.n == spec.n && (spec.batch == 1 || spec.b.batch_shared()),
            "prepacked operand does not fit the matmul"
        );
    }
    let (m, n, k) = (spec.m, spec.n, spec.k);
    if c.is_empty() {
        return Ok(());
    }
    let cptr = c.as_mut_ptr();
    // Batch entry `bi` of an operand (pointers only: an entry that reads nothing, k == 0, may
    // lie past the buffer's end).
    let mat = |base: &[f32], op: &Operand, bi: usize| -> Mat {
        Mat::new(
            base.as_ptr()
                .wrapping_add(op.offset.wrapping_add(op.batch_offset(bi))),
            op.row_stride as isize,
            op.col_stride as isize,
        )
    };
    let bias_shared = spec
        .bias
        .is_none_or(|o| o.batch_shared() || spec.beta == 0.0);
    // Rows of A in groups of `m` at a single stride: one product of `batch * m` rows.
    let merged = spec.batch > 1 && spec.b.batch_shared() && !spec.a.grouped() && bias_shared;
    let problems: Vec<Problem> = if merged || spec.batch == 1 {
        let mut am = mat(a, &spec.a, 0);
        if merged {
            am.group = m;
            am.group_stride = spec.a.batch_stride as isize;
        }
        vec![Problem::new(
            spec.batch * m,
            n,
            k,
            am,
            mat(b, &spec.b, 0),
            cptr,
            n,
        )]
    } else {
        // (One problem per batch entry: as many as the shape says, allocated fallibly.)
        let each = (0..spec.batch).map(|bi| {
            Problem::new(
                m,
                n,
                k,
                mat(a, &spec.a, bi),
                mat(b, &spec.b, bi),
                cptr.wrapping_add(bi * m * n),
                n,
            )
        });
        try_collect(spec.batch, each)?
    };
    let mut problems = problems;
    if let Some(pk) = packed {
        for p in &mut problems {
            p.packed_b = pk.as_ptr();
        }
    }
    // The scale, a bias per column and the ReLU go to the GEMM, which applies them to each
    // micro-tile as it stores it (not with `k == 0`: nothing is computed to apply them to).
    let column_bias = spec.bias.filter(|op| {
        spec.beta != 0.0 && op.row_stride == 0 && op.col_stride == 1 && op.batch_shared()
    });
    let folded = k > 0;
    // The ReLU comes after the bias: in the GEMM only if the bias is too.
    let bias_in_gemm = folded && column_bias.is_some();
    let bias_applies = spec.bias.is_some() && spec.beta != 0.0;
    let relu_in_gemm = relu && folded && (bias_in_gemm || !bias_applies);
    if folded {
        let post = sgemm::ColPost {
            alpha: spec.alpha,
            bias: match (column_bias, bias) {
                (Some(op), Some(x)) => x.as_ptr().wrapping_add(op.offset),
                _ => std::ptr::null(),
            },
            beta: spec.beta,
            relu: relu_in_gemm,
        };
        for p in &mut problems {
            p.post = post;
        }
    }
    let single = problems.len() == 1;
    let bias = bias.map(|x| (spec.bias.expect("validated"), x));
    let cp = SendPtr(cptr);
    let finish = |index: usize, rows: Range<usize>, cols: Range<usize>| {
        // Global rows of C viewed as [batch * m, n].
        let base = if single { 0 } else { index * m };
        let rows = base + rows.start..base + rows.end;
        // SAFETY: the GEMM hands each tile of C to one `finish` call.
        let mut tile = unsafe { Tile::new(cp.get(), n, rows.clone(), cols.clone()) };
        for r in rows {
            let (bi, i) = (r / m, r % m);
            let seg = tile.row(r);
            if spec.alpha != 1.0 && !folded {
                seg.iter_mut().for_each(|v| *v *= spec.alpha);
            }
            if let Some((op, bv)) = bias {
                if spec.beta != 0.0 && !bias_in_gemm {
                    add_bias(seg, bi, i, cols.start, &op, bv, spec.beta);
                }
            }
            if relu && !relu_in_gemm {
                seg.iter_mut()
                    .for_each(|v| *v = super::math::max_nan(*v, 0.0));
            }
        }
        epilogue(&mut tile);
    };
    // SAFETY: `validate` checked that every element of A and B the problems read is inside
    // `a` and `b`, and C (`batch * m * n`, the problems' disjoint row blocks) is `c`, borrowed
    // mutably for the whole call and distinct from `a` and `b`.
    unsafe { sgemm::try_gemm(&problems, &finish) }
}

/// `seg[j] += beta * bias[bi, i, j0 + j]` for one row segment of C.
fn add_bias(
    seg: &mut [f32],
    bi: usize,
    i: usize,
    j0: usize,
    op: &Operand,
    bias: &[f32],
    beta: f32,
) {
    let base = op.offset + op.batch_offset(bi) + i * op.row_stride + j0 * op.col_stride;
    if op.col_stride == 1 {
        let src = &bias[base..base + seg.len()];
        if beta == 1.0 {
            for (o, &s) in seg.iter_mut().zip(src) {
                *o += s;
            }
        } else {
            for (o, &s) in seg.iter_mut().zip(src) {
                *o += beta * s;
            }
        }
    } else {
        for (j, o) in seg.iter_mut().enumerate() {
            *o += beta * bias[base + j * op.col_stride];
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

    #[test]
    fn grouped_batches_reach_their_largest_offset() {
        // Entries 0..5 in groups of 2: offsets 0, 3, 10, 13, 20.
        let op = Operand {
            batch_stride: 3,
            group: 2,
            group_stride: 10,
            ..Operand::contiguous(1, 1)
        };
        let offsets: Vec<usize> = (0..5).map(|b| op.batch_offset(b)).collect();
        assert_eq!(offsets, [0, 3, 10, 13, 20]);
        assert_eq!(op.max_batch_offset(5), Some(20));
        assert_eq!(op.max_batch_offset(4), Some(13));
        let wide = Operand {
            batch_stride: 30,
            ..op
        };
        // Entries 0..3: 0, 30, 10; the last group's second entry is not the largest.
        assert_eq!(wide.max_batch_offset(3), Some(30));
        let mut s = MatmulSpec::contiguous(5, 1, 1, 1);
        s.a = op;
        assert!(s.validate(21, 5, None, 5).is_ok());
        assert!(s.validate(20, 5, None, 5).is_err());
    }
}
