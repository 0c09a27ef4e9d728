//! Fused scaled dot-product attention: `softmax(scale * q @ k + mask) @ v` for each entry of a
//! batch (attention's `batch * heads`), a block of query rows at a time, so that the scores
//! never leave the cache.
//!
//! A task takes one batch entry and a range of its query rows. It packs that entry's keys (as
//! the left operand of the scores) and values (as the right operand of the output) once, then
//! for each block of one register tile's width of queries: computes the block's scores
//! transposed, `k @ q^T`, with the GEMM's micro-kernel (the scale applied as each tile is
//! stored), adds the mask, runs the softmax down the columns into the packed left operand of
//! `p @ v`, multiplies by `v`, and stores each row divided by its sum into the output, which
//! may be strided (attention's `[seq, batch, heads * dim]` layout for the output projection).
//! Rows are independent and no product splits its `k`, so results do not depend on the thread
//! count.

use super::gemm::Operand;
use super::math::{exp, max_nan};
use super::memory::{try_aligned, try_collect, KernelError, LineVec};
use super::sgemm::{self, ColPost, Mat, PackedA, PackedB, Problem};
use super::SendPtr;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;

/// One attention: for each batch entry `b`, `out[b] = softmax(scale * q[b] @ k[b] + mask[b])
/// @ v[b]`, the softmax over each row of `n` scores; with `guard`, a row whose scores are all
/// `-inf` gives zeros (the `where` that `torch`'s decomposition puts around the softmax)
/// instead of NaN.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttentionSpec {
    /// Batch entries (batch times heads).
    pub batch: usize,
    /// Queries (rows of the scores and of the output).
    pub m: usize,
    /// Keys (columns of the scores, rows of `v`).
    pub n: usize,
    /// Depth of the query-key product.
    pub d: usize,
    /// Columns of `v` and of the output.
    pub dv: usize,
    /// The queries, `batch x m x d`.
    pub q: Operand,
    /// The keys as the right operand of the scores, `batch x d x n`.
    pub k: Operand,
    /// The values, `batch x n x dv`.
    pub v: Operand,
    /// The factor of the scores.
    pub scale: f32,
    /// An additive mask, `batch x m x n` (broadcast by zero strides), added after the scale.
    pub mask: Option<Operand>,
    /// Whether rows whose scores are all `-inf` give zeros.
    pub guard: bool,
    /// Where element `(b, i, j)` of the `batch x m x dv` result goes in the output buffer
    /// (columns contiguous, every element at its own place, the buffer covered exactly).
    pub out: Operand,
}

impl AttentionSpec {
    /// Elements of the result (`batch * m * dv`), or `Err` on overflow.
    pub fn out_len(&self) -> Result<usize, String> {
        self.batch
            .checked_mul(self.m)
            .and_then(|v| v.checked_mul(self.dv))
            .ok_or_else(|| "attention output size overflows".to_string())
    }

    /// Checks that every element read lies inside the given buffers, that a mask buffer is
    /// given exactly when the spec has a mask, and that the output view writes each element of
    /// an output buffer of `out_len` elements exactly once.
    pub fn validate(
        &self,
        q_len: usize,
        k_len: usize,
        v_len: usize,
        mask_len: Option<usize>,
        out_len: usize,
    ) -> Result<(), String> {
        let total = self.out_len()?;
        if out_len != total {
            return Err(format!(
                "attention output has {out_len} elements, expected {} x {} x {} = {total}",
                self.batch, self.m, self.dv
            ));
        }
        if total == 0 {
            return Ok(());
        }
        // Each worker packs one entry's keys and values and keeps a block of scores: a spec
        // of absurd sizes over broadcast (zero-stride) views is refused, not allocated.
        let scratch = self
            .d
            .checked_add(self.dv)
            .and_then(|x| x.checked_add(4 * 32))
            .and_then(|x| x.checked_mul(self.n.max(1)))
            .and_then(|x| x.checked_add(32 * (self.d + self.dv)));
        match scratch {
            Some(f) if f <= MAX_SCRATCH => {}
            _ => {
                return Err(format!(
                    "an attention over {} keys of depth {} with {} value columns needs more \
                     than {} MiB of scratch per thread",
                    self.n,
                    self.d,
                    self.dv,
                    (MAX_SCRATCH * 4) >> 20
                ))
            }
        }
        let (b, m, n) = (self.batch, self.m, self.n);
        self.q.check("attention queries", b, m, self.d, q_len)?;
        self.k.check("attention keys", b, self.d, n, k_len)?;
        self.v.check("attention values", b, n, self.dv, v_len)?;
        match (&self.mask, mask_len) {
            (None, None) => {}
            (Some(mask), Some(len)) => mask.check("attention mask", b, m, n, len)?,
            (Some(_), None) => return Err("attention spec has a mask, but no mask buffer".into()),
            (None, Some(_)) => {
                return Err("a mask buffer was given to an attention without one".into())
            }
        }
        self.out.check("attention output", b, m, self.dv, out_len)?;
        if self.dv > 1 && self.out.col_stride != 1 {
            return Err("attention output columns must be contiguous".into());
        }
        if !one_to_one(&self.out, b, m, self.dv) {
            return Err(format!(
                "attention output view {:?} writes some element twice",
                self.out
            ));
        }
        Ok(())
    }
}

/// The most floats of scratch one worker may need (packed keys and values, a block of scores
/// and probabilities, the block's queries and output): 256 MiB.
const MAX_SCRATCH: usize = 1 << 26;

/// Whether a `batch x rows x cols` view puts every element at its own index: sorted by
/// stride, each dimension's stride passes the furthest index of the dimensions below it.
fn one_to_one(o: &Operand, batch: usize, rows: usize, cols: usize) -> bool {
    let mut dims = vec![(cols, o.col_stride), (rows, o.row_stride)];
    if o.grouped() {
        dims.push((o.group.min(batch), o.batch_stride));
        dims.push((batch.div_ceil(o.group), o.group_stride));
    } else {
        dims.push((batch, o.batch_stride));
    }
    dims.retain(|&(size, _)| size > 1);
    dims.sort_by_key(|&(_, stride)| stride);
    let mut reach = 0usize;
    for (size, stride) in dims {
        if stride <= reach {
            return false;
        }
        let Some(r) = (size - 1)
            .checked_mul(stride)
            .and_then(|x| x.checked_add(reach))
        else {
            return false;
        };
        reach = r;
    }
    true
}

thread_local! {
    /// Each worker's buffers, reused across calls.
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch {
        kp: LineVec::new(64),
        vp: LineVec::new(64),
        qt: LineVec::new(64),
        st: LineVec::new(64),
        p: LineVec::new(64),
        o: LineVec::new(64),
    });
}

/// A worker's buffers for one block of queries.
struct Scratch {
    /// The entry's keys, packed as the left operand of the scores.
    kp: LineVec<f32>,
    /// The entry's values, packed as the right operand of the output.
    vp: LineVec<f32>,
    /// The block's queries, transposed and packed as the right operand of the scores.
    qt: LineVec<f32>,
    /// The block's scores, transposed (`n x nr`: one row per key).
    st: LineVec<f32>,
    /// The block's unnormalized probabilities, packed as the left operand of the output.
    p: LineVec<f32>,
    /// The block's output rows (`nr x dv`), before the division by their sums.
    o: LineVec<f32>,
}

/// Runs `spec` on the current rayon pool.
///
/// # Panics
/// If [`AttentionSpec::validate`] fails for these buffers: callers validate first.
pub fn attention(
    spec: &AttentionSpec,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask: Option<&[f32]>,
    out: &mut [f32],
) -> Result<(), KernelError> {
    if let Err(e) = spec.validate(q.len(), k.len(), v.len(), mask.map(<[f32]>::len), out.len()) {
        panic!("invalid attention: {e}");
    }
    if out.is_empty() {
        return Ok(());
    }
    if spec.n == 0 {
        // No keys: every row is an empty sum.
        out.fill(0.0);
        return Ok(());
    }
    // Whole entries per task where there are enough of them (`k` and `v` packed once per
    // entry), else blocks of rows, about 4 tasks per thread.
    let threads = rayon::current_num_threads().max(1);
    let nr = sgemm::arch().nr;
    let per_entry = (4 * threads).div_ceil(spec.batch);
    let rows = spec.m.div_ceil(per_entry).next_multiple_of(nr);
    let tasks = try_collect(
        spec.batch * spec.m.div_ceil(rows),
        (0..spec.batch).flat_map(|b| (0..spec.m).step_by(rows).map(move |r0| (b, r0))),
    )?;
    let outp = SendPtr(out.as_mut_ptr());
    let task = |&(b, r0): &(usize, usize)| {
        // SAFETY: `validate` checked every read against its buffer and that the output view
        // is one-to-one inside `out`; tasks write disjoint rows of it.
        unsafe { entry_rows(spec, (q, k, v, mask), outp, b, r0..(r0 + rows).min(spec.m)) }
    };
    // Less work than waking a sleeping worker costs (GPT-2's small attentions, a few
    // microseconds each, took 13 on 2 threads as the first parallel step after the
    // interpreter's): all of it here, in order (the same results: tasks are independent).
    let flops = 2.0 * (spec.batch * spec.m * spec.n * (spec.d + spec.dv)) as f64;
    if flops < sgemm::SERIAL_FLOPS {
        tasks.iter().try_for_each(task)
    } else {
        tasks.par_iter().try_for_each(task)
    }
}

/// The queries', keys', values' and mask's buffers.
type Buffers<'a> = (&'a [f32], &'a [f32], &'a [f32], Option<&'a [f32]>);

/// Rows `rows` of batch entry `b`, in blocks of one register tile's width (`nr`) of queries.
/// Each block's scores are computed transposed (`k @ q^T`, one row per key), so that the
/// softmax runs down the columns with one vector lane per query and no horizontal
/// reductions; it writes `exp(x - max)` straight into the packed layout of the left operand
/// of `p @ v`, and each output row is divided by its sum at the end.
///
/// # Safety
/// As for [`attention`], after validation; no other task writes these rows.
unsafe fn entry_rows(
    spec: &AttentionSpec,
    (q, k, v, mask): Buffers<'_>,
    out: SendPtr,
    b: usize,
    rows: std::ops::Range<usize>,
) -> Result<(), KernelError> {
    let at = |buf: *const f32, op: &Operand| {
        buf.wrapping_add(op.offset.wrapping_add(op.batch_offset(b)))
    };
    let (n, d, dv) = (spec.n, spec.d, spec.dv);
    let nr = sgemm::arch().nr;
    let mr = sgemm::arch_for(nr).mr;
    // `k` as the `n x d` left operand of the scores, `v` as the right one of the output.
    let kt = Mat::new(
        at(k.as_ptr(), &spec.k),
        spec.k.col_stride as isize,
        spec.k.row_stride as isize,
    );
    let vm = Mat::new(
        at(v.as_ptr(), &spec.v),
        spec.v.row_stride as isize,
        spec.v.col_stride as isize,
    );
    let q0 = at(q.as_ptr(), &spec.q);
    let o0 = at(out.get(), &spec.out) as *mut f32;
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        let Scratch {
            kp,
            vp,
            qt: qtb,
            st,
            p,
            o,
        } = &mut *s;
        // 64-byte aligned windows, so that no operand row of the micro-kernel splits a line.
        let kp = try_aligned(kp, PackedA::len_for(n, d))?;
        let vp = try_aligned(vp, PackedB::len_for(n, dv))?;
        let qtb = try_aligned(qtb, PackedB::len_for(d, nr))?;
        let st = try_aligned(st, n * nr)?;
        let p = try_aligned(p, n * nr)?;
        let o = try_aligned(o, nr * dv)?;
        PackedA::pack_into(&kt, n, d, kp);
        PackedB::pack_into(&vm, n, dv, vp);
        let mut inv = [0f32; 32];
        for r in rows.clone().step_by(nr) {
            let cols = nr.min(rows.end - r);
            let qt = Mat::new(
                q0.wrapping_add(r * spec.q.row_stride),
                spec.q.col_stride as isize,
                spec.q.row_stride as isize,
            );
            PackedB::pack_into(&qt, d, cols, qtb);
            let mut scores = Problem::new(n, nr, d, NONE, NONE, st.as_mut_ptr(), nr);
            scores.packed_a = kp.as_ptr();
            scores.packed_b = qtb.as_ptr();
            scores.post = ColPost {
                alpha: spec.scale,
                ..ColPost::NONE
            };
            sgemm::gemm_serial(&scores);
            let mask_cols = spec.mask.zip(mask).map(|(op, buf)| MaskCols {
                buf,
                base: op.offset.wrapping_add(op.batch_offset(b)) + r * op.row_stride,
                row_stride: op.row_stride,
                col_stride: op.col_stride,
                cols,
            });
            softmax_cols(st, p, (nr, mr), mask_cols, spec.guard, &mut inv[..nr]);
            let mut values = Problem::new(nr, dv, n, NONE, NONE, o.as_mut_ptr(), dv);
            values.packed_a = p.as_ptr();
            values.packed_b = vp.as_ptr();
            sgemm::gemm_serial(&values);
            for (j, &w) in inv.iter().enumerate().take(cols) {
                let dst = std::slice::from_raw_parts_mut(
                    o0.wrapping_add((r + j) * spec.out.row_stride),
                    dv,
                );
                scaled_copy(dst, &o[j * dv..(j + 1) * dv], w);
            }
        }
        Ok(())
    })
}

super::simd::multiversion! {
    /// `dst = src * w`, in the best compiled copy for this CPU.
    fn scaled_copy(dst: &mut [f32], src: &[f32], w: f32) => scaled_copy_body
}

#[inline(always)]
fn scaled_copy_body(dst: &mut [f32], src: &[f32], w: f32) {
    for (o, &x) in dst.iter_mut().zip(src) {
        *o = x * w;
    }
}

/// An operand that is given packed (never read through its view).
const NONE: Mat = Mat {
    ptr: std::ptr::null(),
    rs: 0,
    cs: 0,
    group: usize::MAX,
    group_stride: 0,
};

/// The mask of one block of queries, read transposed: query `j` (`j < cols`), key `l` at
/// `base + j * row_stride + l * col_stride` in `buf`.
#[derive(Clone, Copy)]
struct MaskCols<'a> {
    buf: &'a [f32],
    base: usize,
    row_stride: usize,
    col_stride: usize,
    cols: usize,
}

super::simd::multiversion! {
    /// [`softmax_cols_body`] in the best compiled copy for this CPU.
    fn softmax_cols<'a>(
        st: &mut [f32],
        p: &mut [f32],
        tile: (usize, usize),
        mask: Option<MaskCols<'a>>,
        guard: bool,
        inv: &mut [f32],
    ) => softmax_cols_body
}

/// For each column `j` of the row-major scores `st` (rows of `nr`, one per key): adds the
/// mask, writes `exp(x - max)` down the column into `p`, packed as the left operand of a
/// product over the keys with `mr`-row micro-panels (see [`PackedA`]), and sets `inv[j]` to
/// one over the column's sum. A column of `-inf` gives zeros and `inv[j] = 0` when `guard`
/// (NaN otherwise, as softmax gives).
#[inline(always)]
fn softmax_cols_body(
    st: &mut [f32],
    p: &mut [f32],
    (nr, mr): (usize, usize),
    mask: Option<MaskCols<'_>>,
    guard: bool,
    inv: &mut [f32],
) {
    if let Some(mk) = mask {
        for (l, row) in st.chunks_exact_mut(nr).enumerate() {
            for (j, x) in row.iter_mut().enumerate().take(mk.cols) {
                *x += mk.buf[mk.base + j * mk.row_stride + l * mk.col_stride];
            }
        }
    }
    match (nr, mr) {
        (32, 8) => softmax_cols_n::<32, 8>(st, p, guard, inv),
        (16, 4) => softmax_cols_n::<16, 4>(st, p, guard, inv),
        (8, 4) => softmax_cols_n::<8, 4>(st, p, guard, inv),
        _ => unreachable!("no micro-kernel has a {mr} x {nr} tile"),
    }
}

/// [`softmax_cols_body`] for `NR` columns and `MR`-row panels.
#[inline(always)]
fn softmax_cols_n<const NR: usize, const MR: usize>(
    st: &[f32],
    p: &mut [f32],
    guard: bool,
    inv: &mut [f32],
) {
    let n = st.len() / NR;
    // Two partial maxima per column (even and odd rows), so that the maxima of consecutive
    // rows do not wait on each other.
    let mut mx = [[f32::NEG_INFINITY; NR]; 2];
    let mut pairs = st.chunks_exact(2 * NR);
    for pr in &mut pairs {
        for h in 0..2 {
            for j in 0..NR {
                mx[h][j] = max_nan(mx[h][j], pr[h * NR + j]);
            }
        }
    }
    for (j, &x) in pairs.remainder().iter().enumerate() {
        mx[0][j] = max_nan(mx[0][j], x);
    }
    let mut m = [0f32; NR];
    let mut dead = [false; NR];
    for j in 0..NR {
        m[j] = max_nan(mx[0][j], mx[1][j]);
        // A fully masked column: exp(-inf - 0) = 0 everywhere, and no division by its sum.
        dead[j] = guard && m[j] == f32::NEG_INFINITY;
        if dead[j] {
            m[j] = 0.0;
        }
    }
    // Key `l`, query `j` of the packed operand: in the block of `kc_for(n)` keys that holds
    // `l`, micro-panel `j / MR`, step `l` of it, lane `j % MR`.
    let kb = sgemm::kc_for(n);
    let mut sum = [0f32; NR];
    for (l, row) in st.chunks_exact(NR).enumerate() {
        let b0 = l - l % kb;
        let kcb = kb.min(n - b0);
        let base = b0 * NR + (l - b0) * MR;
        let mut e = [0f32; NR];
        for j in 0..NR {
            e[j] = exp(row[j] - m[j]);
            sum[j] += e[j];
        }
        for q in 0..NR / MR {
            let at = base + q * kcb * MR;
            p[at..at + MR].copy_from_slice(&e[q * MR..(q + 1) * MR]);
        }
    }
    for j in 0..NR {
        inv[j] = if dead[j] { 0.0 } else { 1.0 / sum[j] };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// The attention in `f64`, element by element from the spec's views.
    fn naive(
        spec: &AttentionSpec,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        mask: Option<&[f32]>,
    ) -> Vec<f64> {
        let at = |op: &Operand, b: usize, i: usize, j: usize| {
            op.offset + op.batch_offset(b) + i * op.row_stride + j * op.col_stride
        };
        let mut out = vec![f64::NAN; spec.out_len().unwrap()];
        for b in 0..spec.batch {
            for i in 0..spec.m {
                let mut s: Vec<f64> = (0..spec.n)
                    .map(|j| {
                        let dot: f64 = (0..spec.d)
                            .map(|l| {
                                q[at(&spec.q, b, i, l)] as f64 * k[at(&spec.k, b, l, j)] as f64
                            })
                            .sum();
                        let mut x = dot * spec.scale as f64;
                        if let (Some(op), Some(mk)) = (&spec.mask, mask) {
                            x += mk[at(op, b, i, j)] as f64;
                        }
                        x
                    })
                    .collect();
                let mx = s.iter().fold(f64::NEG_INFINITY, |a, &x| a.max(x));
                if spec.guard && mx == f64::NEG_INFINITY {
                    s.iter_mut().for_each(|x| *x = 0.0);
                } else {
                    s.iter_mut().for_each(|x| *x = (*x - mx).exp());
                    let sum: f64 = s.iter().sum();
                    s.iter_mut().for_each(|x| *x /= sum);
                }
                for j in 0..spec.dv {
                    let o: f64 = (0..spec.n)
                        .map(|l| s[l] * v[at(&spec.v, b, l, j)] as f64)
                        .sum();
                    out[at(&spec.out, b, i, j)] = o;
                }
            }
        }
        out
    }

    /// Heads of a packed `[seq, batch, 3 * heads * dim]` projection, read in place, and the
    /// output written as `[seq, batch, heads * dim]`: the encoder benchmark's layout.
    fn packed_heads(batch: usize, heads: usize, seq: usize, dim: usize) -> AttentionSpec {
        let e = heads * dim;
        let row = batch * 3 * e;
        let head = |part: usize| Operand {
            offset: part * e,
            batch_stride: dim,
            row_stride: row,
            col_stride: 1,
            group: heads,
            group_stride: 3 * e,
        };
        let mut k = head(1);
        (k.row_stride, k.col_stride) = (1, row);
        AttentionSpec {
            batch: batch * heads,
            m: seq,
            n: seq,
            d: dim,
            dv: dim,
            q: head(0),
            k,
            v: head(2),
            scale: 1.0 / (dim as f32).sqrt(),
            mask: None,
            guard: true,
            out: Operand {
                offset: 0,
                batch_stride: dim,
                row_stride: batch * e,
                col_stride: 1,
                group: heads,
                group_stride: e,
            },
        }
    }

    fn check(spec: &AttentionSpec, mask: Option<Vec<f32>>, threads: usize) -> Vec<f32> {
        let len = |op: &Operand, r: usize, c: usize| {
            op.max_index(spec.batch, r, c).unwrap().map_or(0, |x| x + 1)
        };
        let q = fill(len(&spec.q, spec.m, spec.d), 1);
        let k = fill(len(&spec.k, spec.d, spec.n), 2);
        let v = fill(len(&spec.v, spec.n, spec.dv), 3);
        let mut out = vec![f32::NAN; spec.out_len().unwrap()];
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| attention(spec, &q, &k, &v, mask.as_deref(), &mut out))
            .unwrap();
        let want = naive(spec, &q, &k, &v, mask.as_deref());
        for (i, (&got, &w)) in out.iter().zip(&want).enumerate() {
            assert!(
                (got as f64 - w).abs() <= 1e-5 + 1e-5 * w.abs(),
                "element {i}: {got} vs {w} ({spec:?})"
            );
        }
        out
    }

    #[test]
    fn packed_projection_heads_match_f64_on_any_thread_count() {
        // 100 rows: blocks of 48 and a tail of 4 that is not a whole register tile.
        let spec = packed_heads(2, 3, 100, 20);
        let one = check(&spec, None, 1);
        let three = check(&spec, None, 3);
        assert_eq!(one, three, "results depend on the thread count");
    }

    #[test]
    fn long_rows_broadcast_mask_and_guard() {
        // 700 keys: the scores' product runs two panels of the value product's depth.
        let (m, n) = (30, 700);
        let mut spec = AttentionSpec {
            batch: 2,
            m,
            n,
            d: 8,
            dv: 5,
            q: Operand::contiguous(m, 8),
            k: Operand::contiguous(8, n),
            v: Operand::contiguous(n, 5),
            scale: 0.5,
            mask: None,
            guard: true,
            out: Operand::contiguous(m, 5),
        };
        // A causal mask shared by the batch, with row 3 masked out entirely.
        let mut mask = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                if j > i + 600 || i == 3 {
                    mask[i * n + j] = f32::NEG_INFINITY;
                }
            }
        }
        spec.mask = Some(Operand {
            batch_stride: 0,
            ..Operand::contiguous(m, n)
        });
        let out = check(&spec, Some(mask.clone()), 2);
        assert!(out[3 * 5..4 * 5].iter().all(|&x| x == 0.0), "guarded row");
        // Without the guard, a fully masked row is NaN, as softmax gives it.
        spec.guard = false;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let (q, k, v) = (fill(2 * m * 8, 1), fill(2 * 8 * n, 2), fill(2 * n * 5, 3));
        let mut out = vec![0f32; 2 * m * 5];
        pool.install(|| attention(&spec, &q, &k, &v, Some(&mask), &mut out))
            .unwrap();
        assert!(out[3 * 5..4 * 5].iter().all(|x| x.is_nan()));
        assert!(out[..3 * 5].iter().all(|x| x.is_finite()));
    }

    #[test]
    fn validation_rejects_overlapping_or_short_views() {
        let spec = packed_heads(2, 2, 16, 8);
        let e = 2 * 8;
        let n_qkv = 16 * 2 * 3 * e;
        let ok = spec.validate(n_qkv, n_qkv, n_qkv, None, 4 * 16 * 8);
        assert_eq!(ok, Ok(()));
        assert!(spec.validate(n_qkv, n_qkv, n_qkv - 1, None, 512).is_err());
        assert!(spec.validate(n_qkv, n_qkv, n_qkv, Some(10), 512).is_err());
        let mut bad = spec.clone();
        bad.out.group_stride = 8; // heads land on each other
        let err = bad.validate(n_qkv, n_qkv, n_qkv, None, 512).unwrap_err();
        assert!(err.contains("twice"), "{err}");
        let mut bad = spec.clone();
        bad.out.col_stride = 2;
        assert!(bad.validate(n_qkv, n_qkv, n_qkv, None, 512).is_err());
        // A billion keys read through zero strides: refused before any scratch is allocated.
        let mut huge = spec.clone();
        huge.n = 1 << 30;
        (huge.k.col_stride, huge.v.row_stride) = (0, 0);
        let err = huge.validate(n_qkv, n_qkv, n_qkv, None, 512).unwrap_err();
        assert!(err.contains("scratch"), "{err}");
    }
}
