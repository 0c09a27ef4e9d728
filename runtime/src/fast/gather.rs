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

use super::memory::{try_vec, KernelError};
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

/// The geometry of `x[..., i_0, ..., i_{k-1}, ...]` with `k` adjacent index tensors after full
/// slices (`index.Tensor`, advanced indexing): the index tensors broadcast together to
/// `bshape`, and `out[o, b, :] = x[o, i_0[b], ..., i_{k-1}[b], :]` with `x` viewed as
/// `[outer, dims..., inner]`. Negative indices count from the end, as in PyTorch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatherNdSpec {
    /// Product of the dimensions of `x` before the indexed ones.
    pub outer: usize,
    /// The indexed dimensions of `x`.
    pub dims: Vec<usize>,
    /// Product of the dimensions of `x` after the indexed ones.
    pub inner: usize,
    /// The shape the index tensors broadcast to.
    pub bshape: Vec<usize>,
    /// The shape of each index tensor (one per indexed dimension).
    pub index_shapes: Vec<Vec<usize>>,
}

impl GatherNdSpec {
    /// Checks the shapes (one index tensor per indexed dimension, each broadcasting to
    /// `bshape`) and that the buffers have the elements they imply.
    pub fn validate(&self, x_len: usize, idx_lens: &[usize], out_len: usize) -> Result<(), String> {
        let prod = |v: &[usize]| v.iter().try_fold(1usize, |a, &b| a.checked_mul(b));
        if self.dims.is_empty() || self.index_shapes.len() != self.dims.len() {
            return Err(format!(
                "gather_nd needs one index tensor per indexed dimension; got {} for {:?}",
                self.index_shapes.len(),
                self.dims
            ));
        }
        for s in &self.index_shapes {
            let lead = self.bshape.len().checked_sub(s.len());
            let fits = lead.is_some_and(|l| {
                s.iter()
                    .zip(&self.bshape[l..])
                    .all(|(&a, &b)| a == b || a == 1)
            });
            if !fits {
                return Err(format!(
                    "index shape {s:?} does not broadcast to {:?}",
                    self.bshape
                ));
            }
        }
        let rows = prod(&self.dims);
        let nb = prod(&self.bshape);
        let (Some(xn), Some(on)) = (
            rows.and_then(|r| prod(&[self.outer, r, self.inner])),
            nb.and_then(|n| prod(&[self.outer, n, self.inner])),
        ) else {
            return Err(format!("gather_nd {self:?} is too large"));
        };
        let want: Vec<usize> = (self.index_shapes.iter())
            .map(|s| prod(s).unwrap_or(usize::MAX))
            .collect();
        if x_len != xn || out_len != on || idx_lens != want.as_slice() {
            return Err(format!(
                "gather_nd {self:?} needs x of {xn} elements, indices of {want:?} and an output \
                 of {on}; got {x_len}, {idx_lens:?} and {out_len}"
            ));
        }
        Ok(())
    }

    /// The flat row of `x` (as `[outer, rows, inner]`) each broadcast index position selects;
    /// `Err` naming the first index out of range.
    fn rows(&self, idx: &[&[i64]]) -> Result<Vec<i64>, KernelError> {
        let nb: usize = self.bshape.iter().product();
        let rank = self.bshape.len();
        let mut rows = try_vec(nb, 0i64)?;
        let mut scale = 1i64;
        for (j, (&n, (s, ix))) in (self.dims.iter())
            .zip(self.index_shapes.iter().zip(idx))
            .enumerate()
            .rev()
        {
            // Strides of index tensor j over the broadcast shape (0 where it broadcasts).
            let lead = rank - s.len();
            let mut strides = vec![0usize; rank];
            let mut st = 1usize;
            for d in (0..s.len()).rev() {
                if s[d] != 1 {
                    strides[lead + d] = st;
                }
                st *= s[d];
            }
            let mut c = vec![0usize; rank];
            let mut off = 0usize;
            for r in rows.iter_mut() {
                let i = ix[off];
                let w = if i < 0 { i + n as i64 } else { i };
                if !(0..n as i64).contains(&w) {
                    return Err(format!(
                        "index {i} is out of bounds for dimension {j} of the indexed ones, with \
                         size {n}"
                    )
                    .into());
                }
                *r += w * scale;
                // Next broadcast position.
                let mut d = rank;
                while d > 0 {
                    d -= 1;
                    c[d] += 1;
                    off += strides[d];
                    if c[d] < self.bshape[d] {
                        break;
                    }
                    off -= strides[d] * c[d];
                    c[d] = 0;
                }
            }
            scale *= n as i64;
        }
        Ok(rows)
    }
}

/// `out[o, b, :] = x[o, i_0[b], ..., i_{k-1}[b], :]` (see [`GatherNdSpec`]); `Err` (with
/// nothing written) if the buffers do not fit the spec or an index is out of range.
pub fn gather_nd<T: Copy + Send + Sync>(
    spec: &GatherNdSpec,
    x: &[T],
    idx: &[&[i64]],
    out: &mut [T],
) -> Result<(), KernelError> {
    let lens: Vec<usize> = idx.iter().map(|i| i.len()).collect();
    spec.validate(x.len(), &lens, out.len())?;
    let rows = spec.rows(idx)?;
    let flat = GatherSpec {
        outer: spec.outer,
        rows: spec.dims.iter().product(),
        inner: spec.inner,
        indices: rows.len(),
        wrap: false,
    };
    Ok(gather(&flat, x, &rows, out)?)
}

#[cfg(test)]
mod nd_tests {
    use super::*;

    /// The naive definition, element by element.
    fn naive(spec: &GatherNdSpec, x: &[i64], idx: &[&[i64]]) -> Vec<i64> {
        let nb: usize = spec.bshape.iter().product();
        let rank = spec.bshape.len();
        let mut out = vec![];
        for o in 0..spec.outer {
            for b in 0..nb {
                // Multi-index of b.
                let mut c = vec![0; rank];
                let mut r = b;
                for d in (0..rank).rev() {
                    c[d] = r % spec.bshape[d];
                    r /= spec.bshape[d];
                }
                let mut row = 0usize;
                for (j, s) in spec.index_shapes.iter().enumerate() {
                    let lead = rank - s.len();
                    let mut off = 0;
                    for d in 0..s.len() {
                        off = off * s[d] + if s[d] == 1 { 0 } else { c[lead + d] };
                    }
                    let n = spec.dims[j] as i64;
                    let i = idx[j][off];
                    row = row * spec.dims[j] + (if i < 0 { i + n } else { i }) as usize;
                }
                let rows: usize = spec.dims.iter().product();
                for t in 0..spec.inner {
                    out.push(x[(o * rows + row) * spec.inner + t]);
                }
            }
        }
        out
    }

    #[test]
    fn broadcast_indices_match_the_definition() {
        // x: [2, 3, 4, 5]; x[:, i0, i1] with i0: [2, 1] and i1: [3] (negative ones too).
        let spec = GatherNdSpec {
            outer: 2,
            dims: vec![3, 4],
            inner: 5,
            bshape: vec![2, 3],
            index_shapes: vec![vec![2, 1], vec![3]],
        };
        let x: Vec<i64> = (0..120).collect();
        let (i0, i1) = (vec![2i64, -3], vec![0i64, -1, 1]);
        let mut out = vec![0i64; 2 * 6 * 5];
        gather_nd(&spec, &x, &[&i0, &i1], &mut out).unwrap();
        assert_eq!(out, naive(&spec, &x, &[&i0, &i1]));
        // Out of range: an error, nothing written.
        let mut out2 = vec![7i64; 60];
        let bad = vec![0i64, 4, 1];
        assert!(gather_nd(&spec, &x, &[&i0, &bad], &mut out2).is_err());
        assert!(out2.iter().all(|&v| v == 7));
    }

    #[test]
    fn shapes_that_do_not_broadcast_are_refused() {
        let spec = GatherNdSpec {
            outer: 1,
            dims: vec![3, 4],
            inner: 1,
            bshape: vec![3],
            index_shapes: vec![vec![3], vec![2]],
        };
        assert!(spec.validate(12, &[3, 2], 3).is_err());
        let ok = GatherNdSpec {
            index_shapes: vec![vec![3], vec![1]],
            ..spec
        };
        ok.validate(12, &[3, 1], 3).unwrap();
        assert!(ok.validate(12, &[3, 1], 4).is_err());
    }
}
