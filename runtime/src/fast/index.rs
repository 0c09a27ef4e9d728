//! Ops that produce or consume indices along one dimension: `argmax`/`argmin` and the indices
//! and values of `max.dim`/`min.dim`, `cumsum`, and `gather(x, dim, index)`.
//!
//! The arg-reductions and the scan view their input as `[outer, len, inner]`, the dimension
//! they work along in the middle (`outer` the product of the dimensions before it, `inner` of
//! those after it). Results are bitwise the reference interpreter's: an arg-reduction picks
//! the first maximum (minimum), a NaN beating everything and the first NaN winning; `cumsum`
//! of `f32` accumulates in `f64` in order and rounds each prefix sum, of `i64` wraps; `gather`
//! refuses (never wraps) an index outside its dimension. Work is split into parallel jobs
//! (rayon) of at least 64 Ki elements where there are enough, and every result is computed in
//! the same order whatever the split, so results do not depend on the thread count.

use super::memory::{try_vec, KernelError};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// Input elements per parallel job, at least (whole rows or columns where possible).
const JOB_ELEMS: usize = 1 << 16;

/// Lanes of a contiguous arg-reduction: lane `j` sees elements `j, j + 16, ...` of the run.
const LANES: usize = 16;

/// Fewest columns a job takes of each row when the dimension worked along is not the
/// innermost (4 KiB of `f32`): each row's part is read as one contiguous run, so narrower
/// strips of many jobs defeat the prefetchers. A `cumsum` of `[1, 3216, 1000]` took 0.8 ms in
/// one strip, 1.9 ms in 16 strips of 64 columns on 2 threads; of `[1, 392, 8192]`, 0.9 ms in
/// strips of 1024 columns, 1.5 ms in one.
const STRIP_COLS: usize = 1024;

/// A row of an `inner == 1` arg-reduction longer than this is reduced as pieces of
/// [`JOB_ELEMS`] elements in parallel, their results combined in order.
const SPLIT_ROW: usize = 2 * JOB_ELEMS;

/// The product of `dims`, or `None` if it, or its size in bytes at 8 bytes per element,
/// overflows.
fn checked_numel(dims: &[usize]) -> Option<usize> {
    dims.iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|n| n.checked_mul(8).is_some())
}

/// The geometry of one arg-reduction: the input viewed as `[outer, len, inner]`, reduced over
/// its middle dimension to `[outer, inner]` indices (and values).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArgSpec {
    /// Product of the dimensions before the reduced one.
    pub outer: usize,
    /// Size of the reduced dimension.
    pub len: usize,
    /// Product of the dimensions after the reduced one.
    pub inner: usize,
    /// The first maximum (`argmax`, `max.dim`) rather than the first minimum.
    pub max: bool,
}

impl ArgSpec {
    /// Checks that `x` has `outer * len * inner` elements and the indices (and the values, when
    /// given) `outer * inner`, and that a non-empty result does not reduce over nothing.
    pub fn validate(
        &self,
        x_len: usize,
        idx_len: usize,
        values_len: Option<usize>,
    ) -> Result<(), String> {
        let (Some(n), Some(m)) = (
            checked_numel(&[self.outer, self.len, self.inner]),
            checked_numel(&[self.outer, self.inner]),
        ) else {
            return Err(format!("arg-reduction {self:?} is too large"));
        };
        if x_len != n {
            return Err(format!(
                "arg-reduction input has {x_len} elements, expected {} x {} x {}",
                self.outer, self.len, self.inner
            ));
        }
        for (what, got) in [("indices", Some(idx_len)), ("values", values_len)] {
            if let Some(got) = got.filter(|&g| g != m) {
                return Err(format!(
                    "arg-reduction {what} have {got} elements, expected {} x {}",
                    self.outer, self.inner
                ));
            }
        }
        if self.len == 0 && m > 0 {
            return Err("cannot reduce over a dimension of size zero".into());
        }
        Ok(())
    }
}

/// A position along the reduced dimension and the element there.
type Best = (usize, f32);

/// Whether `x`, met after the best so far `b`, replaces it: never after a NaN, always when a
/// NaN, else when strictly greater (`MAX`) or less. Branch-free, so lanes of it vectorize.
#[inline(always)]
fn takes<const MAX: bool>(b: f32, x: f32) -> bool {
    let beats = if MAX { x > b } else { x < b };
    beats | (x.is_nan() & !b.is_nan())
}

/// The result of two consecutive runs from the results `a` of the first and `b` of the second.
#[inline(always)]
fn combine<const MAX: bool>(a: Best, b: Best) -> Best {
    if takes::<MAX>(a.1, b.1) {
        b
    } else {
        a
    }
}

/// Whether lane result `c` beats lane result `b` of another lane of the same run: a NaN beats
/// a number, else the better value; among NaNs, or equal values, the earlier position wins.
#[inline(always)]
fn lane_beats<const MAX: bool>(c: Best, b: Best) -> bool {
    match (c.1.is_nan(), b.1.is_nan()) {
        (true, true) => c.0 < b.0,
        (true, false) => true,
        (false, true) => false,
        (false, false) => takes::<MAX>(b.1, c.1) || (c.1 == b.1 && c.0 < b.0),
    }
}

/// One step of side-by-side arg-reductions: lane `j` (best value `bv[j]`, found at `bi[j]`)
/// meets `row[j]`, found at `at`.
#[inline(always)]
fn update_lanes<const MAX: bool>(bv: &mut [f32], bi: &mut [u32], row: &[f32], at: u32) {
    for ((v, i), &x) in bv.iter_mut().zip(bi.iter_mut()).zip(row) {
        let t = takes::<MAX>(*v, x);
        *v = if t { x } else { *v };
        *i = if t { at } else { *i };
    }
}

/// The first best element of a non-empty contiguous run of at most `16 * u32::MAX` elements:
/// 16 lanes side by side, each keeping its best value and the block it is in, then the lanes
/// combined, then the tail that fills no block.
fn run_best<const MAX: bool>(x: &[f32]) -> Best {
    let full = x.len() / LANES;
    debug_assert!(!x.is_empty() && full <= u32::MAX as usize);
    let mut best = (0, x[0]);
    if full > 0 {
        let mut bv = [0f32; LANES];
        let mut bi = [0u32; LANES];
        bv.copy_from_slice(&x[..LANES]);
        for (b, c) in x[LANES..full * LANES].chunks_exact(LANES).enumerate() {
            update_lanes::<MAX>(&mut bv, &mut bi, c, b as u32 + 1);
        }
        best = (bi[0] as usize * LANES, bv[0]);
        for (j, (&v, &b)) in bv.iter().zip(&bi).enumerate().skip(1) {
            let c = (b as usize * LANES + j, v);
            if lane_beats::<MAX>(c, best) {
                best = c;
            }
        }
    }
    for (k, &v) in x.iter().enumerate().skip(full * LANES) {
        best = combine::<MAX>(best, (k, v));
    }
    best
}

/// Per column `j < best.len()`, the first best of `x[at + k * inner + j]` over `k in 0..len`
/// (`len >= 1`), into `best[j]`: the columns side by side (best values `bv` and rows `bi`, of
/// the width of `best`), so the updates vectorize; the rows are taken in pieces of fewer than
/// `2^32`, combined in order.
fn cols_best<const MAX: bool>(
    x: &[f32],
    (at, len, inner): (usize, usize, usize),
    bv: &mut [f32],
    bi: &mut [u32],
    best: &mut [Best],
) {
    let w = best.len();
    let piece = u32::MAX as usize;
    for k0 in (0..len).step_by(piece) {
        let rows = piece.min(len - k0);
        let first = at + k0 * inner;
        bv.copy_from_slice(&x[first..first + w]);
        bi.fill(0);
        for k in 1..rows {
            update_lanes::<MAX>(bv, bi, &x[first + k * inner..][..w], k as u32);
        }
        for (b, (&v, &i)) in best.iter_mut().zip(bv.iter().zip(bi.iter())) {
            let here = (k0 + i as usize, v);
            *b = if k0 == 0 {
                here
            } else {
                combine::<MAX>(*b, here)
            };
        }
    }
}

/// `idx[o, n]` = the position `k` of the first maximum (minimum when `!spec.max`) of
/// `x[o, k, n]`, a NaN beating everything and the first NaN winning; `values[o, n]` (when
/// given) that element. `Err` (nothing written) if the buffers do not fit the spec.
pub fn arg_reduce(
    spec: &ArgSpec,
    x: &[f32],
    idx: &mut [i64],
    values: Option<&mut [f32]>,
) -> Result<(), KernelError> {
    spec.validate(x.len(), idx.len(), values.as_deref().map(<[f32]>::len))?;
    if idx.is_empty() {
        return Ok(());
    }
    if spec.max {
        arg_run::<true>(spec, x, idx, values)
    } else {
        arg_run::<false>(spec, x, idx, values)
    }
}

/// [`arg_reduce`] on validated, non-empty buffers.
fn arg_run<const MAX: bool>(
    spec: &ArgSpec,
    x: &[f32],
    idx: &mut [i64],
    mut values: Option<&mut [f32]>,
) -> Result<(), KernelError> {
    let (len, inner) = (spec.len, spec.inner);
    if inner == 1 && len > SPLIT_ROW {
        // Long rows: pieces of every row in parallel, then each row's pieces in order.
        let pieces = len.div_ceil(JOB_ELEMS);
        let mut parts: Vec<Best> = try_vec(spec.outer * pieces, (0, 0f32))?;
        parts.par_iter_mut().enumerate().for_each(|(j, part)| {
            let (o, k0) = (j / pieces, j % pieces * JOB_ELEMS);
            let (k, v) = run_best::<MAX>(&x[o * len + k0..o * len + len.min(k0 + JOB_ELEMS)]);
            *part = (k0 + k, v);
        });
        for (o, p) in parts.chunks_exact(pieces).enumerate() {
            let (k, v) = p[1..].iter().fold(p[0], |a, &b| combine::<MAX>(a, b));
            idx[o] = k as i64;
            if let Some(vs) = values.as_deref_mut() {
                vs[o] = v;
            }
        }
        return Ok(());
    }
    // Jobs of consecutive results: whole rows (`inner == 1`) or strips of columns of rows.
    let per = (JOB_ELEMS / len)
        .max(1)
        .next_multiple_of(inner.min(STRIP_COLS));
    let job = |s: usize, ix: &mut [i64], mut vs: Option<&mut [f32]>| {
        let wide = ix.len().min(inner);
        let (mut bv, mut bi, mut best) = (
            try_vec(wide, 0f32)?,
            try_vec(wide, 0u32)?,
            try_vec(wide, (0, 0f32))?,
        );
        let mut q = 0;
        while q < ix.len() {
            let (o, n) = ((s + q) / inner, (s + q) % inner);
            let w = (inner - n).min(ix.len() - q);
            let at = o * len * inner + n;
            if inner == 1 {
                best[0] = run_best::<MAX>(&x[at..at + len]);
            } else {
                cols_best::<MAX>(
                    x,
                    (at, len, inner),
                    &mut bv[..w],
                    &mut bi[..w],
                    &mut best[..w],
                );
            }
            for (j, &(k, v)) in best[..w].iter().enumerate() {
                ix[q + j] = k as i64;
                if let Some(vs) = vs.as_deref_mut() {
                    vs[q + j] = v;
                }
            }
            q += w;
        }
        Ok::<_, KernelError>(())
    };
    if idx.len() <= per {
        return job(0, idx, values);
    }
    match values {
        Some(vs) => idx
            .par_chunks_mut(per)
            .zip(vs.par_chunks_mut(per))
            .enumerate()
            .try_for_each(|(j, (ix, vs))| job(j * per, ix, Some(vs))),
        None => idx
            .par_chunks_mut(per)
            .enumerate()
            .try_for_each(|(j, ix)| job(j * per, ix, None)),
    }
}

/// The geometry of one cumulative sum: input and output viewed as `[outer, len, inner]`,
/// summed along the middle dimension.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanSpec {
    /// Product of the dimensions before the summed one.
    pub outer: usize,
    /// Size of the summed dimension.
    pub len: usize,
    /// Product of the dimensions after the summed one.
    pub inner: usize,
}

impl ScanSpec {
    /// Checks that the input and the output both have `outer * len * inner` elements.
    pub fn validate(&self, x_len: usize, out_len: usize) -> Result<(), String> {
        let n = checked_numel(&[self.outer, self.len, self.inner])
            .ok_or_else(|| format!("scan {self:?} is too large"))?;
        if x_len != n || out_len != n {
            return Err(format!(
                "scan {self:?} needs an input and an output of {n} elements; got {x_len} and \
                 {out_len}"
            ));
        }
        Ok(())
    }
}

/// One row of side-by-side scans: `acc[j] = add(acc[j], x[j])`, `out[j] = emit(acc[j])`.
#[inline(always)]
fn scan_row<T: Copy, A: Copy>(
    acc: &mut [A],
    x: &[T],
    out: &mut [T],
    add: &impl Fn(A, T) -> A,
    emit: &impl Fn(A) -> T,
) {
    for ((a, &v), o) in acc.iter_mut().zip(x).zip(out) {
        *a = add(*a, v);
        *o = emit(*a);
    }
}

/// The inclusive scan along the middle dimension: from `zero`, `acc = add(acc, x[o, k, n])`
/// for `k` in order, `out[o, k, n] = emit(acc)`. `Err` (nothing written) if the buffers do not
/// fit the spec.
fn scan<T, A>(
    spec: &ScanSpec,
    x: &[T],
    out: &mut [T],
    zero: A,
    add: impl Fn(A, T) -> A + Sync,
    emit: impl Fn(A) -> T + Sync,
) -> Result<(), KernelError>
where
    T: Copy + Send + Sync,
    A: Copy + Send + Sync,
{
    spec.validate(x.len(), out.len())?;
    if out.is_empty() {
        return Ok(());
    }
    let (len, inner) = (spec.len, spec.inner);
    let block = len * inner;
    if inner <= STRIP_COLS || block <= JOB_ELEMS {
        // Jobs of whole `[len, inner]` blocks.
        let per = (JOB_ELEMS / block).max(1);
        let blocks = |o0: usize, dst: &mut [T]| {
            let mut acc = try_vec(inner, zero)?;
            for (q, d) in dst.chunks_exact_mut(block).enumerate() {
                let src = &x[(o0 + q) * block..][..block];
                if inner == 1 {
                    let mut a = zero;
                    for (o, &v) in d.iter_mut().zip(src) {
                        a = add(a, v);
                        *o = emit(a);
                    }
                } else {
                    acc.fill(zero);
                    for (s, o) in src.chunks_exact(inner).zip(d.chunks_exact_mut(inner)) {
                        scan_row(&mut acc, s, o, &add, &emit);
                    }
                }
            }
            Ok::<_, KernelError>(())
        };
        return super::try_par_jobs(out, per * block, |s, d| blocks(s / block, d));
    }
    // Large, wide blocks: jobs of a strip of columns of one block, all its rows.
    let cols = (JOB_ELEMS / len).max(STRIP_COLS).min(inner);
    let strips = inner.div_ceil(cols);
    let dst = super::SendPtr(out.as_mut_ptr());
    (0..spec.outer * strips).into_par_iter().try_for_each(|j| {
        let (o, n0) = (j / strips, j % strips * cols);
        let w = cols.min(inner - n0);
        let mut acc = try_vec(w, zero)?;
        for k in 0..len {
            let at = (o * len + k) * inner + n0;
            // SAFETY: `at..at + w` lies inside `out` (validated: `at + w <= outer * len *
            // inner`), and only this job touches row `k`, columns `n0..n0 + w` of block `o`.
            let d = unsafe { std::slice::from_raw_parts_mut(dst.get().add(at), w) };
            scan_row(&mut acc, &x[at..at + w], d, &add, &emit);
        }
        Ok(())
    })
}

/// `cumsum` of `f32`: each prefix sum accumulated in `f64` from `0.0`, in order, and rounded
/// to `f32`. `Err` (nothing written) if the buffers do not fit the spec.
pub fn cumsum_f32(spec: &ScanSpec, x: &[f32], out: &mut [f32]) -> Result<(), KernelError> {
    scan(spec, x, out, 0f64, |a, v| a + v as f64, |a| a as f32)
}

/// `cumsum` of `i64`, wrapping on overflow. `Err` (nothing written) if the buffers do not fit
/// the spec.
pub fn cumsum_i64(spec: &ScanSpec, x: &[i64], out: &mut [i64]) -> Result<(), KernelError> {
    scan(spec, x, out, 0i64, i64::wrapping_add, |a| a)
}

/// The geometry of one `gather(x, dim, index)`: the output has the index's shape.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatherDimSpec {
    /// Shape of `x` (rank at least 1).
    pub x_shape: Vec<usize>,
    /// Shape of the index tensor and of the output (the rank of `x`).
    pub index_shape: Vec<usize>,
    /// The dimension the indices select along.
    pub dim: usize,
}

impl GatherDimSpec {
    /// Checks the shapes (same rank, at least 1; `dim` in range; the index no larger than `x`
    /// outside `dim`) and that the buffers have the elements they imply (index values are
    /// checked by [`gather_dim`] itself).
    pub fn validate(&self, x_len: usize, idx_len: usize, out_len: usize) -> Result<(), String> {
        let (xs, is, dim) = (&self.x_shape, &self.index_shape, self.dim);
        let rank = xs.len();
        if rank == 0 || is.len() != rank {
            return Err(format!(
                "gather needs an index of the rank of x, at least 1; got shapes {is:?} and {xs:?}"
            ));
        }
        if dim >= rank {
            return Err(format!(
                "gather dimension {dim} is out of range for rank {rank}"
            ));
        }
        if let Some(d) = (0..rank).find(|&d| d != dim && is[d] > xs[d]) {
            return Err(format!(
                "index has shape {is:?}, larger than x {xs:?} in dimension {d}"
            ));
        }
        let (Some(xn), Some(n)) = (checked_numel(xs), checked_numel(is)) else {
            return Err(format!("gather {self:?} is too large"));
        };
        if x_len != xn || idx_len != n || out_len != n {
            return Err(format!(
                "gather {self:?} needs x of {xn} elements and an index and an output of {n}; got \
                 {x_len}, {idx_len} and {out_len}"
            ));
        }
        Ok(())
    }
}

/// `gather`'s loop nest: the index shape with adjacent dimensions merged where `x` is
/// contiguous across them (to `[outer, len, inner]` when the shapes agree outside `dim`) and
/// dimensions of size 1 outside `dim` dropped, with the stride of `x` along each.
#[derive(Debug, PartialEq)]
struct Nest {
    /// Sizes (of the index) of the merged dimensions.
    sizes: Vec<usize>,
    /// Strides of `x` along them.
    strides: Vec<usize>,
    /// The position of the gathered dimension among them.
    dim: usize,
}

impl Nest {
    /// The nest of validated, non-empty shapes with every index in range (so `x` is not
    /// empty).
    fn new(x_shape: &[usize], index_shape: &[usize], dim: usize) -> Nest {
        let mut xst = vec![1usize; x_shape.len()];
        for d in (1..x_shape.len()).rev() {
            xst[d - 1] = xst[d] * x_shape[d];
        }
        let (mut sizes, mut strides, mut at) = (vec![], vec![], None);
        for (d, (&m, &s)) in index_shape.iter().zip(&xst).enumerate() {
            if d == dim {
                at = Some(sizes.len());
            } else if m == 1 {
                continue;
            } else if let Some(l) = sizes.len().checked_sub(1) {
                if at != Some(l) && strides[l] == s * m {
                    sizes[l] *= m;
                    strides[l] = s;
                    continue;
                }
            }
            sizes.push(m);
            strides.push(s);
        }
        Nest {
            sizes,
            strides,
            dim: at.unwrap_or(0),
        }
    }

    /// Output elements `s..s + dst.len()` (their indices `idx`, checked in range): an odometer
    /// over the nest, the innermost dimension as runs.
    fn run<T: Copy>(&self, x: &[T], idx: &[i64], s: usize, dst: &mut [T]) {
        let (sizes, strides) = (&self.sizes, &self.strides);
        let last = sizes.len() - 1;
        let mut c = vec![0usize; sizes.len()];
        let mut rem = s;
        for d in (0..sizes.len()).rev() {
            c[d] = rem % sizes[d];
            rem /= sizes[d];
        }
        // Offset of `c` in `x` without the gathered dimension's part.
        let mut base: usize = (0..sizes.len())
            .filter(|&d| d != self.dim)
            .map(|d| c[d] * strides[d])
            .sum();
        let step = if last == self.dim { 0 } else { strides[last] };
        let sd = strides[self.dim];
        let mut q = 0;
        while q < dst.len() {
            let run = (sizes[last] - c[last]).min(dst.len() - q);
            for (t, (o, &i)) in dst[q..q + run].iter_mut().zip(&idx[q..q + run]).enumerate() {
                *o = x[base + t * step + i as usize * sd];
            }
            q += run;
            c[last] += run;
            base += run * step;
            let mut d = last;
            while d > 0 && c[d] == sizes[d] {
                if d != self.dim {
                    base -= c[d] * strides[d];
                }
                c[d] = 0;
                d -= 1;
                c[d] += 1;
                if d != self.dim {
                    base += strides[d];
                }
            }
        }
    }
}

/// `out[c] = x[c with c[dim] = idx[c]]` for every multi-index `c` of the index shape; `Err`
/// (with nothing written) if the buffers do not fit the spec or an index is outside
/// `0..x_shape[dim]` (the first such index is named).
pub fn gather_dim<T: Copy + Send + Sync>(
    spec: &GatherDimSpec,
    x: &[T],
    idx: &[i64],
    out: &mut [T],
) -> Result<(), String> {
    spec.validate(x.len(), idx.len(), out.len())?;
    let (dim, n) = (spec.dim, spec.x_shape[spec.dim]);
    let bad = idx
        .par_chunks(JOB_ELEMS)
        .find_map_first(|c| c.iter().copied().find(|&i| i < 0 || i as u64 >= n as u64));
    if let Some(i) = bad {
        return Err(format!(
            "index {i} is out of bounds for dimension {dim} with size {n}"
        ));
    }
    if out.is_empty() {
        return Ok(());
    }
    let nest = Nest::new(&spec.x_shape, &spec.index_shape, dim);
    super::par_jobs(out, JOB_ELEMS, |s, d| {
        nest.run(x, &idx[s..s + d.len()], s, d)
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic stream of pseudo-random numbers (a 64-bit LCG's high bits).
    fn lcg(seed: u64) -> impl FnMut() -> u64 {
        let mut s = seed;
        move || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            s >> 33
        }
    }

    /// `n` values among `range` integers (many ties when `range` is small); one in `rare` is
    /// a NaN, an infinity or a negative zero when `rare > 0`.
    fn data(n: usize, seed: u64, range: u64, rare: u64) -> Vec<f32> {
        let mut r = lcg(seed);
        (0..n)
            .map(|_| {
                let (v, s) = (r(), r());
                match (rare > 0).then(|| s % rare) {
                    Some(0) => f32::NAN,
                    Some(1) => f32::INFINITY,
                    Some(2) => f32::NEG_INFINITY,
                    Some(3) => -0.0,
                    _ => (v % range) as f32 - (range / 2) as f32,
                }
            })
            .collect()
    }

    /// The interpreter's choice (`best_f`): the first best, a NaN winning (the first one).
    fn best_ref(v: &[f32], max: bool) -> usize {
        let wide: Vec<f64> = v.iter().map(|&x| x as f64).collect();
        crate::interp::reduce::best_f(&wide, max)
    }

    /// The indices and values of an arg-reduction, lane by lane.
    fn arg_ref(spec: &ArgSpec, x: &[f32]) -> (Vec<i64>, Vec<u32>) {
        let (mut idx, mut val) = (vec![], vec![]);
        for o in 0..spec.outer {
            for n in 0..spec.inner {
                let lane: Vec<f32> = (0..spec.len)
                    .map(|k| x[(o * spec.len + k) * spec.inner + n])
                    .collect();
                let b = best_ref(&lane, spec.max);
                idx.push(b as i64);
                val.push(lane[b].to_bits());
            }
        }
        (idx, val)
    }

    /// Runs the kernel with and without values; the indices and the values' bits.
    fn arg_fast(spec: &ArgSpec, x: &[f32]) -> (Vec<i64>, Vec<u32>) {
        let m = spec.outer * spec.inner;
        let (mut idx, mut val) = (vec![-1i64; m], vec![0f32; m]);
        arg_reduce(spec, x, &mut idx, Some(&mut val)).unwrap();
        let mut only = vec![-1i64; m];
        arg_reduce(spec, x, &mut only, None).unwrap();
        assert_eq!(only, idx, "{spec:?} without values");
        (idx, val.iter().map(|v| v.to_bits()).collect())
    }

    /// The argmax and argmin of one row.
    fn row_args(x: &[f32]) -> (i64, i64) {
        let arg = |max| {
            let spec = ArgSpec {
                outer: 1,
                len: x.len(),
                inner: 1,
                max,
            };
            arg_fast(&spec, x).0[0]
        };
        (arg(true), arg(false))
    }

    #[test]
    fn arg_reductions_match_the_interpreters_rule() {
        // Rows (inner == 1) short, not a multiple of 16, long and split into pieces; columns
        // (inner > 1) narrower and wider than 64, parallel over outer and over columns.
        for (outer, len, inner) in [
            (1usize, 1usize, 1usize),
            (3, 1, 5),
            (4, 7, 1),
            (2, 16, 1),
            (3, 17, 1),
            (5, 33, 1),
            (300, 1000, 1),
            (2, 50_001, 1),
            (1, 200_003, 1),
            (3, 140_001, 1),
            (2, 9, 3),
            (3, 100, 70),
            (2, 5000, 20),
            (1, 3, 200_000),
            (4, 40, 1000),
            (3, 50, 2500),
        ] {
            for (seed, (range, rare)) in [(7u64, 0u64), (100_000, 0), (1000, 20_000), (5, 7)]
                .into_iter()
                .enumerate()
            {
                let x = data(outer * len * inner, seed as u64 + 1, range, rare);
                for max in [true, false] {
                    let spec = ArgSpec {
                        outer,
                        len,
                        inner,
                        max,
                    };
                    assert!(
                        arg_fast(&spec, &x) == arg_ref(&spec, &x),
                        "{spec:?}, data {seed}"
                    );
                }
            }
        }
    }

    #[test]
    fn arg_ties_go_to_the_first_index_and_nans_win() {
        let mut x = vec![0f32; 40];
        // Maxima in several lanes and blocks, and in the tail: the first (lane 3) wins.
        for k in [37, 21, 5, 3, 20, 35] {
            x[k] = 5.0;
        }
        x[9] = -2.0;
        x[30] = -2.0;
        assert_eq!(row_args(&x), (3, 9));
        // Lane 15 of block 0 (index 15) against lane 0 of block 1 (index 16).
        let mut x = vec![0f32; 48];
        x[16] = 1.0;
        x[15] = 1.0;
        x[31] = -1.0;
        x[32] = -1.0;
        assert_eq!(row_args(&x), (15, 31));
        x[17] = f32::NAN;
        x[30] = f32::NAN;
        assert_eq!(row_args(&x), (17, 17));
        x[2] = f32::NAN;
        assert_eq!(row_args(&x), (2, 2));
        // A NaN only in the tail beats infinities in the blocks.
        let mut x = vec![f32::NEG_INFINITY; 37];
        assert_eq!(row_args(&x), (0, 0));
        x[20] = f32::INFINITY;
        assert_eq!(row_args(&x), (20, 0));
        x[34] = f32::NAN;
        assert_eq!(row_args(&x), (34, 34));
        // Zeros of either sign are equal: the first is taken, with its sign.
        let spec = ArgSpec {
            outer: 2,
            len: 2,
            inner: 1,
            max: true,
        };
        let (idx, val) = arg_fast(&spec, &[-0.0, 0.0, 0.0, -0.0]);
        assert_eq!(idx, vec![0, 0]);
        assert_eq!(val, vec![(-0f32).to_bits(), 0f32.to_bits()]);
    }

    #[test]
    fn long_rows_combine_their_pieces_in_order() {
        let mut x = data(200_003, 9, 1000, 0);
        x[150_000] = 1e6;
        x[70_000] = 1e6;
        x[199_999] = -1e6;
        x[131_073] = -1e6;
        assert_eq!(row_args(&x), (70_000, 131_073));
        x[199_990] = f32::NAN;
        assert_eq!(row_args(&x), (199_990, 199_990));
        x[140_000] = f32::NAN;
        assert_eq!(row_args(&x), (140_000, 140_000));
        x[200_002] = f32::NAN;
        x[1] = f32::NAN;
        assert_eq!(row_args(&x), (1, 1));
    }

    #[test]
    fn arg_buffers_that_do_not_fit_are_refused_unwritten() {
        let spec = ArgSpec {
            outer: 2,
            len: 3,
            inner: 4,
            max: true,
        };
        let x = vec![1f32; 24];
        let (mut idx, mut val) = (vec![-1i64; 8], vec![9f32; 8]);
        assert!(arg_reduce(&spec, &x[..23], &mut idx, Some(&mut val)).is_err());
        assert!(arg_reduce(&spec, &x, &mut idx[..7], Some(&mut val)).is_err());
        let e = arg_reduce(&spec, &x, &mut idx, Some(&mut val[..7])).unwrap_err();
        assert!(e.to_string().contains("values have 7"), "{e}");
        assert_eq!((idx.clone(), val.clone()), (vec![-1; 8], vec![9.0; 8]));
        let empty = ArgSpec { len: 0, ..spec };
        let e = arg_reduce(&empty, &[], &mut idx, None).unwrap_err();
        assert_eq!(e, "cannot reduce over a dimension of size zero".into());
        assert_eq!(idx, vec![-1; 8]);
        let nothing = ArgSpec { outer: 0, ..empty };
        arg_reduce(&nothing, &[], &mut [], None).unwrap();
        let huge = ArgSpec {
            outer: usize::MAX / 2,
            len: 4,
            inner: 1,
            max: false,
        };
        assert!(huge.validate(0, 0, None).unwrap_err().contains("too large"));
        let huge = ArgSpec {
            outer: 1 << 61,
            len: 1,
            inner: 1,
            max: false,
        };
        assert!(huge.validate(0, 0, None).unwrap_err().contains("too large"));
    }

    /// The interpreter's `cumsum`: lane by lane, accumulated in order from `zero`.
    fn scan_ref<T: Copy, A: Copy>(
        spec: &ScanSpec,
        x: &[T],
        zero: A,
        add: impl Fn(A, T) -> A,
        emit: impl Fn(A) -> T,
    ) -> Vec<T> {
        let mut out = x.to_vec();
        for o in 0..spec.outer {
            for n in 0..spec.inner {
                let mut acc = zero;
                for k in 0..spec.len {
                    let at = (o * spec.len + k) * spec.inner + n;
                    acc = add(acc, x[at]);
                    out[at] = emit(acc);
                }
            }
        }
        out
    }

    /// Shapes of the scan tests: rows (serial and parallel), small blocks (one job, several),
    /// large narrow blocks (whole), large wide blocks split into column strips.
    const SCAN_SHAPES: [(usize, usize, usize); 11] = [
        (1, 1, 1),
        (3, 10, 1),
        (2, 100_000, 1),
        (4, 7, 5),
        (2, 300, 70),
        (200, 30, 40),
        (1, 2000, 300),
        (3, 70_000, 2),
        (2, 1000, 129),
        (2, 100, 2500),
        (1, 40, 5000),
    ];

    #[test]
    fn cumsum_f32_accumulates_in_f64_and_rounds_each_prefix() {
        for (outer, len, inner) in SCAN_SHAPES {
            let spec = ScanSpec { outer, len, inner };
            let mut r = lcg(len as u64);
            let x: Vec<f32> = (0..outer * len * inner)
                .map(|_| match r() % 50 {
                    0 => 3e7,
                    1 => -0.0,
                    v => (v as f32 - 25.0) * 0.013,
                })
                .collect();
            let want = scan_ref(&spec, &x, 0f64, |a, v| a + v as f64, |a| a as f32);
            let mut out = vec![f32::NAN; x.len()];
            cumsum_f32(&spec, &x, &mut out).unwrap();
            let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert!(bits(&out) == bits(&want), "{spec:?}");
        }
        // An f32 accumulator would lose the ones (and end at 0); a leading -0 sums to +0.
        let spec = ScanSpec {
            outer: 1,
            len: 5,
            inner: 1,
        };
        let mut out = [0f32; 5];
        cumsum_f32(&spec, &[1e8, 1.0, 1.0, -1e8, -0.0], &mut out).unwrap();
        assert_eq!(out, [1e8, 1e8, 1e8, 2.0, 2.0]);
        let spec = ScanSpec {
            outer: 2,
            len: 1,
            inner: 1,
        };
        cumsum_f32(&spec, &[-0.0, 1.5], &mut out[..2]).unwrap();
        assert_eq!(out[0].to_bits(), 0f32.to_bits());
    }

    #[test]
    fn cumsum_i64_wraps() {
        for (outer, len, inner) in SCAN_SHAPES {
            let spec = ScanSpec { outer, len, inner };
            let mut r = lcg(inner as u64 + 5);
            let x: Vec<i64> = (0..outer * len * inner)
                .map(|_| (r() << 31) as i64 ^ r() as i64)
                .collect();
            let want = scan_ref(&spec, &x, 0i64, i64::wrapping_add, |a| a);
            let mut out = vec![7i64; x.len()];
            cumsum_i64(&spec, &x, &mut out).unwrap();
            assert!(out == want, "{spec:?}");
        }
        let spec = ScanSpec {
            outer: 1,
            len: 4,
            inner: 1,
        };
        let mut out = [0i64; 4];
        cumsum_i64(&spec, &[i64::MAX, 1, -1, i64::MIN], &mut out).unwrap();
        assert_eq!(out, [i64::MAX, i64::MIN, i64::MAX, -1]);
        // Two lanes side by side (inner == 2) each wrap on their own.
        let spec = ScanSpec {
            outer: 1,
            len: 2,
            inner: 2,
        };
        cumsum_i64(&spec, &[i64::MAX, 3, 1, 4], &mut out).unwrap();
        assert_eq!(out, [i64::MAX, 3, i64::MIN, 7]);
    }

    #[test]
    fn scan_buffers_that_do_not_fit_are_refused_unwritten() {
        let spec = ScanSpec {
            outer: 2,
            len: 3,
            inner: 2,
        };
        let x = vec![1i64; 12];
        let mut out = vec![0i64; 12];
        assert!(cumsum_i64(&spec, &x[..11], &mut out).is_err());
        assert!(cumsum_i64(&spec, &x, &mut out[..11]).is_err());
        assert_eq!(out, vec![0; 12]);
        let huge = ScanSpec {
            outer: 2,
            len: usize::MAX / 2,
            inner: 1,
        };
        assert!(huge.validate(0, 0).unwrap_err().contains("too large"));
        let empty = ScanSpec {
            outer: 0,
            len: usize::MAX,
            inner: 3,
        };
        cumsum_f32(&empty, &[], &mut []).unwrap();
    }

    /// `gather` element by element: an odometer over the index shape.
    fn gather_ref<T: Copy>(spec: &GatherDimSpec, x: &[T], idx: &[i64]) -> Vec<T> {
        let (xs, is) = (&spec.x_shape, &spec.index_shape);
        let mut c = vec![0usize; is.len()];
        let mut out = vec![];
        for &i in idx {
            let mut at = 0;
            for d in 0..xs.len() {
                at = at * xs[d] + if d == spec.dim { i as usize } else { c[d] };
            }
            out.push(x[at]);
            for d in (0..is.len()).rev() {
                c[d] += 1;
                if c[d] < is[d] {
                    break;
                }
                c[d] = 0;
            }
        }
        out
    }

    /// A gather spec.
    fn gspec(x_shape: &[usize], index_shape: &[usize], dim: usize) -> GatherDimSpec {
        GatherDimSpec {
            x_shape: x_shape.to_vec(),
            index_shape: index_shape.to_vec(),
            dim,
        }
    }

    #[test]
    fn gather_dim_matches_an_element_by_element_gather() {
        // Rank 1; shapes equal outside dim (the [outer, len, inner] nest); an index smaller
        // than x outside dim (the general odometer), serial and parallel; size-1 dimensions.
        for (xs, is, dim) in [
            (vec![10usize], vec![7usize], 0usize),
            (vec![1000], vec![100_000], 0),
            (vec![3, 5], vec![3, 8], 1),
            (vec![3, 5], vec![2, 5], 0),
            (vec![4, 5, 6], vec![3, 5, 2], 1),
            (vec![4, 5, 6], vec![2, 5, 6], 0),
            (vec![4, 5, 6], vec![4, 3, 6], 2),
            (vec![4, 5, 6], vec![4, 9, 6], 1),
            (vec![8, 50, 300], vec![8, 60, 300], 1),
            (vec![40, 30, 70], vec![39, 50, 65], 1),
            (vec![2, 1, 5, 3], vec![2, 1, 4, 3], 2),
            (vec![2, 3, 5, 1], vec![1, 3, 4, 1], 0),
            (vec![300, 600], vec![300, 400], 1),
        ] {
            let spec = gspec(&xs, &is, dim);
            let n = xs[dim] as u64;
            let x: Vec<i64> = (0..xs.iter().product::<usize>() as i64).collect();
            let mut r = lcg(n);
            let idx: Vec<i64> = (0..is.iter().product::<usize>())
                .map(|_| (r() % n) as i64)
                .collect();
            let mut out = vec![-1i64; idx.len()];
            gather_dim(&spec, &x, &idx, &mut out).unwrap();
            assert!(out == gather_ref(&spec, &x, &idx), "{spec:?}");
            let xf: Vec<f32> = x.iter().map(|&v| v as f32 * 0.5).collect();
            let mut outf = vec![f32::NAN; idx.len()];
            gather_dim(&spec, &xf, &idx, &mut outf).unwrap();
            assert!(outf == gather_ref(&spec, &xf, &idx), "{spec:?}");
        }
    }

    #[test]
    fn gather_dim_nests_shapes_equal_outside_dim_as_outer_len_inner() {
        let nest = Nest::new(&[2, 5, 3, 7], &[2, 9, 3, 7], 1);
        assert_eq!(nest.sizes, vec![2, 9, 21]);
        assert_eq!(nest.strides, vec![105, 21, 1]);
        assert_eq!(nest.dim, 1);
        // Dimensions 2 and 3 still merge (3 is whole); a partial innermost one does not.
        let nest = Nest::new(&[2, 5, 3, 7], &[2, 9, 2, 7], 1);
        assert_eq!(nest.sizes, vec![2, 9, 14]);
        let nest = Nest::new(&[2, 5, 3, 7], &[2, 9, 3, 6], 1);
        assert_eq!(nest.sizes, vec![2, 9, 3, 6]);
        assert_eq!(nest.strides, vec![105, 21, 7, 1]);
        let nest = Nest::new(&[4, 1, 6], &[4, 1, 6], 2);
        assert_eq!(
            (nest.sizes, nest.strides, nest.dim),
            (vec![4, 6], vec![6, 1], 1)
        );
    }

    #[test]
    fn gather_dim_refuses_an_index_out_of_range_unwritten() {
        let spec = gspec(&[3, 4], &[3, 4], 1);
        let x = vec![1f32; 12];
        let mut out = vec![5f32; 12];
        let mut idx = vec![0i64; 12];
        idx[3] = 4;
        idx[10] = -1;
        let e = gather_dim(&spec, &x, &idx, &mut out).unwrap_err();
        assert_eq!(e, "index 4 is out of bounds for dimension 1 with size 4");
        idx[3] = 3;
        let e = gather_dim(&spec, &x, &idx, &mut out).unwrap_err();
        assert_eq!(e, "index -1 is out of bounds for dimension 1 with size 4");
        assert_eq!(out, vec![5.0; 12]);
        // The first bad index of a large (parallel) gather.
        let spec = gspec(&[10], &[200_000], 0);
        let mut idx = vec![9i64; 200_000];
        idx[150_000] = -3;
        idx[70_000] = 10;
        let mut out = vec![false; 200_000];
        let e = gather_dim(&spec, &[true; 10], &idx, &mut out).unwrap_err();
        assert!(e.starts_with("index 10 "), "{e}");
        assert!(out.iter().all(|&b| !b));
    }

    #[test]
    fn gather_dim_specs_that_do_not_fit_are_refused() {
        let ok = gspec(&[3, 4], &[2, 5], 1);
        ok.validate(12, 10, 10).unwrap();
        let bad = |s: GatherDimSpec, lens: (usize, usize, usize), what: &str| {
            let e = s.validate(lens.0, lens.1, lens.2).unwrap_err();
            assert!(e.contains(what), "{s:?}: {e}");
        };
        bad(gspec(&[3, 4], &[2, 5], 1), (11, 10, 10), "needs x of 12");
        bad(gspec(&[3, 4], &[2, 5], 1), (12, 9, 10), "needs x of 12");
        bad(gspec(&[3, 4], &[2, 5], 1), (12, 10, 11), "needs x of 12");
        bad(gspec(&[3, 4], &[2, 5], 2), (12, 10, 10), "out of range");
        bad(gspec(&[3, 4], &[4, 4], 1), (12, 16, 16), "in dimension 0");
        bad(gspec(&[3, 4], &[12], 0), (12, 12, 12), "rank");
        bad(gspec(&[], &[], 0), (1, 1, 1), "rank");
        bad(
            gspec(&[usize::MAX / 2, 4], &[1, 1], 0),
            (0, 1, 1),
            "too large",
        );
        bad(
            gspec(&[4, usize::MAX / 2], &[4, usize::MAX / 2], 0),
            (0, 0, 0),
            "too large",
        );
        let mut out = [0i64; 10];
        assert!(gather_dim(&ok, &[0i64; 12], &[0; 10], &mut out[..9]).is_err());
    }
}
