//! Row gathers: `embedding`, `index_select` and `index.Tensor` with one index tensor, on
//! tables of any element type.
//!
//! The table is viewed as `[outer, rows, inner]`; the output is `[outer, indices, inner]` with
//! `out[o, i, :] = table[o, idx[i], :]`. `embedding` is `outer = 1`, `rows = V`, `inner = D`;
//! `index_select(x, dim, idx)` has `outer` the product of the dimensions before `dim`, `rows`
//! the size of `dim` and `inner` the product of those after it; `x[:, idx]` likewise. Indices
//! must lie in `0..rows`, or in `-rows..rows` for a spec that wraps negative ones (advanced
//! indexing does, `embedding` and `index_select` do not); any other is an error, not a
//! panic.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// The geometry of one gather.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatherSpec {
    /// Independent leading blocks of the table (1 for `embedding`).
    pub outer: usize,
    /// Size of the indexed dimension (the embedding table's number of rows).
    pub rows: usize,
    /// Contiguous elements per selected row (the embedding dimension).
    pub inner: usize,
    /// Number of indices.
    pub indices: usize,
    /// Whether an index `i < 0` means `i + rows` (advanced indexing, `x[idx]`).
    #[serde(default)]
    pub wrap: bool,
}

impl GatherSpec {
    /// An embedding lookup of `indices` rows of a `[rows, dim]` table.
    pub fn embedding(rows: usize, dim: usize, indices: usize) -> Self {
        GatherSpec {
            outer: 1,
            rows,
            inner: dim,
            indices,
            wrap: false,
        }
    }

    /// Elements of the table.
    pub fn table_len(&self) -> usize {
        self.outer * self.rows * self.inner
    }

    /// Elements of the output.
    pub fn output_len(&self) -> usize {
        self.outer * self.indices * self.inner
    }

    /// Checks that the buffers have the sizes the spec implies (index values are checked by
    /// [`gather`] itself).
    pub fn validate(&self, table_len: usize, idx_len: usize, out_len: usize) -> Result<(), String> {
        let prod = |v: &[usize]| v.iter().try_fold(1usize, |a, &b| a.checked_mul(b));
        let (Some(t), Some(o)) = (
            prod(&[self.outer, self.rows, self.inner, 8]),
            prod(&[self.outer, self.indices, self.inner, 8]),
        ) else {
            return Err(format!("gather {self:?} is too large"));
        };
        let (t, o) = (t / 8, o / 8);
        if table_len != t || idx_len != self.indices || out_len != o {
            return Err(format!(
                "gather {self:?} needs a table of {t}, {} indices and an output of {o} \
                 elements; got {table_len}, {idx_len} and {out_len}",
                self.indices
            ));
        }
        Ok(())
    }
}

/// `out[o, i, :] = table[o, idx[i], :]`; `Err` (with nothing written) if the buffers do not fit
/// the spec or an index is outside `0..rows`.
pub fn gather<T: Copy + Send + Sync>(
    spec: &GatherSpec,
    table: &[T],
    idx: &[i64],
    out: &mut [T],
) -> Result<(), String> {
    spec.validate(table.len(), idx.len(), out.len())?;
    let rows = spec.rows as i64;
    let row = |i: i64| if spec.wrap && i < 0 { i + rows } else { i };
    if let Some(&bad) = idx.iter().find(|&&i| !(0..rows).contains(&row(i))) {
        return Err(format!(
            "index {bad} is out of range for {} rows",
            spec.rows
        ));
    }
    let inner = spec.inner;
    if out.is_empty() {
        return Ok(());
    }
    // Jobs of about 16K output elements: whole selected rows, never split.
    let per = (16384 / inner).max(1);
    out.par_chunks_mut(per * inner)
        .enumerate()
        .for_each(|(j, o)| {
            for (q, dst) in o.chunks_exact_mut(inner).enumerate() {
                let r = j * per + q;
                let (ob, i) = (r / spec.indices, r % spec.indices);
                let src = (ob * spec.rows + row(idx[i]) as usize) * inner;
                dst.copy_from_slice(&table[src..src + inner]);
            }
        });
    Ok(())
}
