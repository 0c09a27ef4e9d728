//! Row reductions with a fused prologue and epilogue.
//!
//! A [`RowReduce`] reduces `rows` rows of `len` elements each. The rows are the values of its
//! `prologue` expression (over `rows * len` flat indices, the reduced dimensions innermost),
//! evaluated one row block at a time into a scratch buffer, so the reduction's input is never
//! written to memory. Per row block the kernel then computes the op's results (a per-row
//! statistic, or for softmax and layer norm a full row) into scratch, and writes each kernel
//! output: a result of the op directly, or an epilogue [`Expr`] evaluated on the hot rows that
//! reads the scratch buffers as extra operand slots (see [`RowOut`]).
//!
//! Row blocks run in parallel (rayon); a block is a fixed number of whole rows and every sum in
//! a row is accumulated in `f64` over 16 lanes in a fixed order, so results are bitwise the same
//! for any thread count and match the `f64` reference interpreter to well within `1e-6`.

use super::expr::{run_elementwise, Expr, LeafSrc};
use super::math;
use super::{Dst, Src};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// Target elements per row block.
const BLOCK_ELEMS: usize = 16 * 1024;

/// What a row reduction computes.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum ReduceOp {
    /// Sum of the row (result 0: one per row).
    Sum,
    /// Mean of the row.
    Mean,
    /// NaN-propagating maximum.
    Max,
    /// NaN-propagating minimum.
    Min,
    /// `Σ (x - mean)² / max(0, len - correction)`.
    Var {
        /// Bessel's correction (1 for the unbiased estimate).
        correction: f64,
    },
    /// Softmax of the row (result 0: the full row), with the row maximum subtracted.
    Softmax,
    /// Log-softmax of the row.
    LogSoftmax,
    /// Logical or of `x != 0` over the row (NaN is true); the result is a bool (`0`/`1`).
    Any,
    /// Layer norm: result 0 `(x - mean) * rstd * weight + bias` (full row), result 1 the mean,
    /// result 2 `1 / sqrt(var + eps)` with the biased variance (one per row each).
    LayerNorm {
        /// Added to the variance.
        eps: f64,
    },
}

impl ReduceOp {
    /// Elements per row of result `r`, or `None` if the op has no such result.
    pub fn result_per_row(&self, r: usize, len: usize) -> Option<usize> {
        match (self, r) {
            (ReduceOp::Softmax | ReduceOp::LogSoftmax | ReduceOp::LayerNorm { .. }, 0) => Some(len),
            (ReduceOp::LayerNorm { .. }, 1 | 2) => Some(1),
            (_, 0) => Some(1),
            _ => None,
        }
    }

    fn num_results(&self) -> usize {
        match self {
            ReduceOp::LayerNorm { .. } => 3,
            _ => 1,
        }
    }
}

/// How one kernel output is produced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum RowOut {
    /// Result `r` of the reduction, written as computed.
    Result(u32),
    /// An epilogue evaluated per row block over the output's own shape (`rows * per` elements,
    /// row-major with the rows outermost). Besides the kernel's operands (slots `0..n`, `n` =
    /// number of `srcs`) it reads scratch slots: `n` the row block's input rows (`len` per row),
    /// `n + 1 + r` result `r` of the reduction (see [`ReduceOp::result_per_row`]); each is
    /// indexed as if it were the whole buffer, and must be read row by row (checked).
    Rows {
        /// The expression (one output).
        expr: Expr,
    },
    /// An expression that reads no scratch slot, run once over the whole output.
    Whole {
        /// The expression (one output).
        expr: Expr,
    },
}

/// A row reduction kernel with its prologue and epilogue.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RowReduce {
    /// The reduction.
    pub op: ReduceOp,
    /// Number of rows.
    pub rows: usize,
    /// Elements per row.
    pub len: usize,
    /// The rows: one output over `rows * len` flat indices.
    pub prologue: Expr,
    /// Layer norm's weight over the `len` elements of a row (one output), if any.
    pub weight: Option<Expr>,
    /// Layer norm's bias, if any.
    pub bias: Option<Expr>,
    /// One entry per kernel output (`dsts[j]`).
    pub outputs: Vec<RowOut>,
}

/// Scratch slot `n + k` of an epilogue: elements per row.
fn scratch_per_row(k: &RowReduce, s: usize) -> Option<usize> {
    if s == 0 {
        Some(k.len)
    } else {
        k.op.result_per_row(s - 1, k.len)
    }
}

impl RowReduce {
    /// Elements of the kernel's output `j` (as the destination buffer must have).
    fn out_len(&self, j: usize) -> usize {
        match &self.outputs[j] {
            RowOut::Result(r) => self
                .rows
                .saturating_mul(self.op.result_per_row(*r as usize, self.len).unwrap_or(0)),
            RowOut::Rows { expr } | RowOut::Whole { expr } => expr.numel(),
        }
    }

    /// Checks every expression against operands of these lengths and kinds, and every scratch
    /// read against the row structure, so that running cannot read out of bounds.
    pub fn validate(&self, srcs: &[Src<'_>]) -> Result<(), String> {
        let n = self
            .rows
            .checked_mul(self.len)
            .filter(|&n| n <= i64::MAX as usize / 4)
            .ok_or("row reduction is too large")?;
        if self.len == 0 && matches!(self.op, ReduceOp::Max | ReduceOp::Min) && self.rows > 0 {
            return Err("cannot take the maximum or minimum of empty rows".into());
        }
        let one = |e: &Expr, numel: usize, what: &str| -> Result<(), String> {
            if e.num_outputs() != 1 || e.numel() != numel {
                return Err(format!(
                    "{what} must have one output over {numel} elements, it has {} over {}",
                    e.num_outputs(),
                    e.numel()
                ));
            }
            e.validate(srcs).map_err(|m| format!("{what}: {m}"))
        };
        one(&self.prologue, n, "prologue")?;
        if let Some(w) = &self.weight {
            one(w, self.len, "weight")?;
        }
        if let Some(b) = &self.bias {
            one(b, self.len, "bias")?;
        }
        if (self.weight.is_some() || self.bias.is_some())
            && !matches!(self.op, ReduceOp::LayerNorm { .. })
        {
            return Err("only layer norm has a weight and bias".into());
        }
        let ns = srcs.len();
        for (j, o) in self.outputs.iter().enumerate() {
            match o {
                RowOut::Result(r) => {
                    if self.op.result_per_row(*r as usize, self.len).is_none() {
                        return Err(format!("output {j}: the reduction has no result {r}"));
                    }
                }
                RowOut::Whole { expr } => one(expr, expr.numel(), &format!("output {j}"))?,
                RowOut::Rows { expr } => {
                    self.validate_rows(expr, srcs, ns)
                        .map_err(|m| format!("output {j}: {m}"))?;
                }
            }
        }
        Ok(())
    }

    fn validate_rows(&self, e: &Expr, srcs: &[Src<'_>], ns: usize) -> Result<(), String> {
        self.check_scratch_reads(e, ns)?;
        // The operand leaves, checked against the operands (scratch slots are checked above).
        e.validate_operands(srcs, ns)
    }

    /// Checks everything that does not depend on the operands' lengths: the expressions'
    /// programs and sizes, and that every epilogue reads its scratch slots row by row, for a
    /// kernel with `num_srcs` operands. Kernel builders call it so that a kernel that would
    /// fail [`validate`](RowReduce::validate) is refused when it is built.
    pub fn check_structure(&self, num_srcs: usize) -> Result<(), String> {
        self.rows
            .checked_mul(self.len)
            .filter(|&n| n <= i64::MAX as usize / 4)
            .ok_or("row reduction is too large")?;
        for (e, n) in [
            (Some(&self.prologue), self.rows * self.len),
            (self.weight.as_ref(), self.len),
            (self.bias.as_ref(), self.len),
        ] {
            if let Some(e) = e {
                e.validate_program()?;
                if e.num_outputs() != 1 || e.numel() != n {
                    return Err("an expression has the wrong size".into());
                }
                if e.slots().iter().any(|&(s, _)| s as usize >= num_srcs) {
                    return Err("the prologue reads a scratch slot".into());
                }
            }
        }
        for (j, o) in self.outputs.iter().enumerate() {
            match o {
                RowOut::Result(r) => {
                    if self.op.result_per_row(*r as usize, self.len).is_none() {
                        return Err(format!("output {j}: the reduction has no result {r}"));
                    }
                }
                RowOut::Whole { expr } => {
                    expr.validate_program()?;
                    if expr.slots().iter().any(|&(s, _)| s as usize >= num_srcs) {
                        return Err(format!("output {j} reads a scratch slot"));
                    }
                }
                RowOut::Rows { expr } => self
                    .check_scratch_reads(expr, num_srcs)
                    .map_err(|m| format!("output {j}: {m}"))?,
            }
        }
        Ok(())
    }

    #[allow(clippy::needless_range_loop)]
    fn check_scratch_reads(&self, e: &Expr, ns: usize) -> Result<(), String> {
        e.validate_program()?;
        if e.num_outputs() != 1 {
            return Err("an epilogue has one output".into());
        }
        let total = e.numel();
        if self.rows == 0 || !total.is_multiple_of(self.rows) {
            return Err(format!(
                "{total} elements are not whole rows of {} rows",
                self.rows
            ));
        }
        // The leading iteration dims that span the rows.
        let dims = e.dims();
        let mut k = 0;
        let mut p = 1usize;
        while p < self.rows && k < dims.len() {
            p *= dims[k];
            k += 1;
        }
        if p != self.rows {
            return Err("the iteration space does not split at the rows".into());
        }
        let mut row_strides = vec![0i64; k];
        let mut s = 1i64;
        for d in (0..k).rev() {
            row_strides[d] = s;
            s *= dims[d] as i64;
        }
        for (i, l) in e.leaves().iter().enumerate() {
            let LeafSrc::Slot { slot, .. } = l.src else {
                continue;
            };
            let slot = slot as usize;
            if slot < ns {
                continue;
            }
            let per = scratch_per_row(self, slot - ns)
                .ok_or_else(|| format!("leaf {i} reads scratch slot {slot}, which is not one"))?
                as i64;
            for d in 0..k {
                if dims[d] != 1 && l.strides[d] != per * row_strides[d] {
                    return Err(format!(
                        "leaf {i} does not read scratch slot {slot} row by row"
                    ));
                }
            }
            let (mut lo, mut hi) = (l.offset as i128, l.offset as i128);
            for d in k..dims.len() {
                let span = (dims[d] as i128 - 1) * l.strides[d] as i128;
                if span < 0 {
                    lo += span;
                } else {
                    hi += span;
                }
            }
            if lo < 0 || hi >= per as i128 {
                return Err(format!(
                    "leaf {i} reads scratch slot {slot} outside its row of {per}"
                ));
            }
        }
        Ok(())
    }
}

/// A row block's destination: a chunk of an output buffer.
enum Chunk<'a> {
    F(&'a mut [f32]),
    B(&'a mut [bool]),
}

/// Lanes of the row sums: two AVX-512 registers of `f64`, so the additions of consecutive
/// elements are independent (the sum order is fixed: lane by lane, then a fixed tree).
const LANES: usize = 16;

/// The fixed tree that adds the lanes.
#[inline(always)]
fn tree(acc: &[f64; LANES]) -> f64 {
    let mut v = *acc;
    let mut w = LANES;
    while w > 1 {
        w /= 2;
        for i in 0..w {
            v[i] += v[i + w];
        }
    }
    v[0]
}

#[inline(always)]
fn sum_f64(x: &[f32]) -> f64 {
    let mut acc = [0f64; LANES];
    let mut it = x.chunks_exact(LANES);
    for c in &mut it {
        for k in 0..LANES {
            acc[k] += c[k] as f64;
        }
    }
    for (k, &v) in it.remainder().iter().enumerate() {
        acc[k] += v as f64;
    }
    tree(&acc)
}

#[inline(always)]
fn sq_dev_f64(x: &[f32], m: f64) -> f64 {
    let mut acc = [0f64; LANES];
    let mut it = x.chunks_exact(LANES);
    for c in &mut it {
        for k in 0..LANES {
            let d = c[k] as f64 - m;
            acc[k] += d * d;
        }
    }
    for (k, &v) in it.remainder().iter().enumerate() {
        let d = v as f64 - m;
        acc[k] += d * d;
    }
    tree(&acc)
}

#[inline(always)]
fn fold_f32(x: &[f32], f: fn(f32, f32) -> f32) -> f32 {
    let mut acc = [x.first().copied().unwrap_or(0.0); 16];
    let mut it = x.chunks_exact(16);
    for c in &mut it {
        for k in 0..LANES {
            acc[k] = f(acc[k], c[k]);
        }
    }
    for (k, &v) in it.remainder().iter().enumerate() {
        acc[k] = f(acc[k], v);
    }
    acc.iter().copied().fold(acc[0], f)
}

/// Runs the kernel: `dsts[j]` receives output `j` (full size, row-major). Validates first.
pub fn run_row_reduce(k: &RowReduce, srcs: &[Src<'_>], dsts: &mut [Dst<'_>]) -> Result<(), String> {
    k.validate(srcs)?;
    if dsts.len() != k.outputs.len() {
        return Err(format!(
            "the kernel has {} outputs, {} buffers were given",
            k.outputs.len(),
            dsts.len()
        ));
    }
    for (j, d) in dsts.iter().enumerate() {
        let want = k.out_len(j);
        // Results of `any` are bools; every other result is f32; epilogues write either.
        let is_result = matches!(k.outputs[j], RowOut::Result(_));
        let bool_result = k.op == ReduceOp::Any;
        let (len, ok) = match d {
            Dst::F32(b) => (b.len(), !(is_result && bool_result)),
            Dst::Bool(b) => (b.len(), !is_result || bool_result),
            Dst::I64(b) => (b.len(), false),
        };
        if !ok || len != want {
            let ty = if is_result && bool_result {
                "bool"
            } else {
                "f32"
            };
            return Err(format!(
                "output {j}: the buffer has {len} elements of the wrong type or count (expected {want} {ty})"
            ));
        }
    }
    let eval_vec = |e: &Expr| {
        let mut v = vec![0f32; e.numel()];
        run_elementwise(e, srcs, &mut [&mut v]);
        v
    };
    let weight = k.weight.as_ref().map(eval_vec);
    let bias = k.bias.as_ref().map(eval_vec);
    // Whole outputs first, then the row blocks.
    for (j, o) in k.outputs.iter().enumerate() {
        if let RowOut::Whole { expr } = o {
            match &mut dsts[j] {
                Dst::F32(b) => run_elementwise(expr, srcs, &mut [b]),
                Dst::Bool(b) => {
                    let v = eval_vec(expr);
                    for (o, x) in b.iter_mut().zip(v) {
                        *o = x != 0.0;
                    }
                }
                Dst::I64(_) => {}
            }
        }
    }
    if k.rows == 0 {
        return Ok(());
    }
    let br = (BLOCK_ELEMS / k.len.max(1)).max(1);
    let blocks = k.rows.div_ceil(br);
    let mut per_block: Vec<Vec<Option<Chunk<'_>>>> = (0..blocks).map(|_| vec![]).collect();
    for (j, d) in dsts.iter_mut().enumerate() {
        let per = if matches!(k.outputs[j], RowOut::Whole { .. }) {
            None
        } else {
            Some(k.out_len(j) / k.rows)
        };
        match (per, d) {
            (Some(per), Dst::F32(b)) if per > 0 => {
                for (c, s) in b.chunks_mut(br * per).enumerate() {
                    per_block[c].push(Some(Chunk::F(s)));
                }
            }
            (Some(per), Dst::Bool(b)) if per > 0 => {
                for (c, s) in b.chunks_mut(br * per).enumerate() {
                    per_block[c].push(Some(Chunk::B(s)));
                }
            }
            _ => per_block.iter_mut().for_each(|p| p.push(None)),
        }
    }
    let (w, b) = (weight.as_deref(), bias.as_deref());
    per_block
        .into_par_iter()
        .enumerate()
        .for_each(|(c, mut outs)| {
            let r0 = c * br;
            let r1 = (r0 + br).min(k.rows);
            run_block(k, srcs, w, b, r0, r1, &mut outs);
        });
    Ok(())
}

super::simd::multiversion! {
    /// [`run_block_body`] in the best compiled copy for this CPU.
    fn run_block(
        k: &RowReduce,
        srcs: &[Src<'_>],
        weight: Option<&[f32]>,
        bias: Option<&[f32]>,
        r0: usize,
        r1: usize,
        outs: &mut [Option<Chunk<'_>>],
    ) => run_block_body
}

#[inline(always)]
fn run_block_body(
    k: &RowReduce,
    srcs: &[Src<'_>],
    weight: Option<&[f32]>,
    bias: Option<&[f32]>,
    r0: usize,
    r1: usize,
    outs: &mut [Option<Chunk<'_>>],
) {
    let (len, nb) = (k.len, r1 - r0);
    let per0 = k.op.result_per_row(0, len).unwrap_or(1);
    let mut scratch = ROWS.with(|c| std::mem::take(&mut *c.borrow_mut()));
    // The input rows: read in place when the prologue is a plain contiguous load.
    let direct = k.prologue.as_contiguous_load().and_then(|(slot, off)| {
        let (s0, s1) = (off + r0 * len, off + r1 * len);
        match srcs.get(slot as usize) {
            Some(Src::F32(v)) if s1 <= v.len() => Some(&v[s0..s1]),
            _ => None,
        }
    });
    let xin: &[f32] = match direct {
        Some(x) => x,
        None => {
            scratch.x.resize(nb * len, 0.0);
            k.prologue
                .eval_range(srcs, r0 * len, r1 * len, &mut [&mut scratch.x[..nb * len]]);
            &scratch.x[..nb * len]
        }
    };
    // Result 0: computed straight into the output that returns it, where there is one.
    let into = k.outputs.iter().zip(outs.iter()).position(|(o, c)| {
        matches!(o, RowOut::Result(0)) && matches!(c, Some(Chunk::F(d)) if d.len() == nb * per0)
    });
    let mut taken = into.and_then(|j| outs[j].take());
    let res0: &mut [f32] = match &mut taken {
        Some(Chunk::F(d)) => d,
        _ => {
            scratch.r0.resize(nb * per0, 0.0);
            &mut scratch.r0[..nb * per0]
        }
    };
    let (res1, res2) = (&mut scratch.r1, &mut scratch.r2);
    res1.clear();
    res2.clear();
    let lf = len as f64;
    for r in 0..nb {
        let x = &xin[r * len..(r + 1) * len];
        match k.op {
            ReduceOp::Sum => res0[r] = sum_f64(x) as f32,
            ReduceOp::Mean => res0[r] = (sum_f64(x) / lf) as f32,
            ReduceOp::Max => res0[r] = fold_f32(x, math::max_nan),
            ReduceOp::Min => res0[r] = fold_f32(x, math::min_nan),
            ReduceOp::Any => {
                res0[r] = if x.iter().any(|&v| v != 0.0) {
                    1.0
                } else {
                    0.0
                }
            }
            ReduceOp::Var { correction } => {
                let m = sum_f64(x) / lf;
                res0[r] = (sq_dev_f64(x, m) / (lf - correction).max(0.0)) as f32;
            }
            ReduceOp::Softmax | ReduceOp::LogSoftmax => {
                let m = fold_f32(x, math::max_nan);
                let out = &mut res0[r * len..(r + 1) * len];
                for (o, &v) in out.iter_mut().zip(x) {
                    *o = math::exp(v - m);
                }
                let s = sum_f64(out);
                if k.op == ReduceOp::Softmax {
                    let inv = (1.0 / s) as f32;
                    out.iter_mut().for_each(|o| *o *= inv);
                } else {
                    let ls = s.ln() as f32;
                    for (o, &v) in out.iter_mut().zip(x) {
                        *o = (v - m) - ls;
                    }
                }
            }
            ReduceOp::LayerNorm { eps } => {
                let m = sum_f64(x) / lf;
                let var = sq_dev_f64(x, m) / lf;
                let rstd = 1.0 / (var + eps).sqrt();
                let (mf, rf) = (m as f32, rstd as f32);
                let out = &mut res0[r * len..(r + 1) * len];
                // One pass, in the op order `((x - mean) * rstd) * weight + bias`.
                match (weight, bias) {
                    (Some(w), Some(b)) => {
                        for ((o, &v), (&g, &c)) in out.iter_mut().zip(x).zip(w.iter().zip(b)) {
                            *o = (v - mf) * rf * g + c;
                        }
                    }
                    (Some(w), None) => {
                        for ((o, &v), &g) in out.iter_mut().zip(x).zip(w) {
                            *o = (v - mf) * rf * g;
                        }
                    }
                    (None, Some(b)) => {
                        for ((o, &v), &c) in out.iter_mut().zip(x).zip(b) {
                            *o = (v - mf) * rf + c;
                        }
                    }
                    (None, None) => {
                        for (o, &v) in out.iter_mut().zip(x) {
                            *o = (v - mf) * rf;
                        }
                    }
                }
                res1.push(mf);
                res2.push(rf);
            }
        }
    }
    let results: [&[f32]; 3] = [res0, res1, res2];
    let ns = srcs.len();
    let mut ext: Vec<Src<'_>> = srcs.to_vec();
    let mut shift = vec![0i64; ns];
    ext.push(Src::F32(xin));
    shift.push((r0 * len) as i64);
    for (r, v) in results.iter().enumerate().take(k.op.num_results()) {
        ext.push(Src::F32(v));
        let per = k.op.result_per_row(r, len).unwrap_or(1);
        shift.push((r0 * per) as i64);
    }
    for (o, chunk) in k.outputs.iter().zip(outs.iter_mut()) {
        let Some(chunk) = chunk else { continue };
        match o {
            RowOut::Result(r) => {
                let v = results[*r as usize];
                match chunk {
                    Chunk::F(d) => d.copy_from_slice(&v[..d.len()]),
                    Chunk::B(d) => {
                        for (o, &x) in d.iter_mut().zip(v) {
                            *o = x != 0.0;
                        }
                    }
                }
            }
            RowOut::Rows { expr } => {
                let per = expr.numel() / k.rows;
                let (s, e) = (r0 * per, r1 * per);
                match chunk {
                    Chunk::F(d) => expr.eval_range_shifted(&ext, &shift, s, e, &mut [d]),
                    Chunk::B(d) => {
                        let mut t = vec![0f32; e - s];
                        expr.eval_range_shifted(&ext, &shift, s, e, &mut [&mut t]);
                        for (o, x) in d.iter_mut().zip(t) {
                            *o = x != 0.0;
                        }
                    }
                }
            }
            RowOut::Whole { .. } => {}
        }
    }
    if let (Some(j), Some(c)) = (into, taken) {
        outs[j] = Some(c);
    }
    ROWS.with(|c| *c.borrow_mut() = scratch);
}

/// Per-thread buffers of a row block: input rows, results 0, 1 and 2.
#[derive(Default)]
struct RowScratch {
    x: Vec<f32>,
    r0: Vec<f32>,
    r1: Vec<f32>,
    r2: Vec<f32>,
}

thread_local! {
    static ROWS: std::cell::RefCell<RowScratch> = std::cell::RefCell::new(RowScratch::default());
}
