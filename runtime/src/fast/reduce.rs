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
//! a row is accumulated in a fixed order, so results are bitwise the same for any thread count
//! (and in every compiled copy). Sums that may cancel (`sum`, `mean`, `var`) are accumulated in
//! `f64` over 16 lanes, and match the `f64` reference interpreter to well within `1e-6`; sums
//! of non-negative terms (a softmax's denominator) use the faster blocked `f32` lanes of
//! [`super::vmath`], within `16 ε` of their exact value, and layer norm takes its mean and
//! variance as the corrected two-pass moments over those lanes (within `1e-6` of the row's
//! spread of its `f64` mean).

use super::expr::{run_elementwise, Expr, LeafSrc, STREAM_ELEMS};
use super::memory::{try_resize, try_vec, Growable, KernelError, LineVec};
use super::simd::{warm_page, ScaleNt, Spread};
use super::vmath::{exp_sub_sum, normalize, normalize_max, row_dev_sums, row_moments, tree};
use super::{Dst, Src};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use std::borrow::Cow;

/// Most elements per row block (a block is one parallel task, and its stages run one after
/// the other over its rows). Each block ends with costs no row hides (its last streamed row
/// stored in one burst, a store fence, a first row not yet in cache): blocks of 64 Ki rather
/// than 16 Ki elements took the layer norm + softmax workload from 2.39 to 2.24 ms on 2
/// threads (32 Ki: 2.27, 128 Ki: 2.39, 256 Ki: 2.61, when a block's intermediate rows no
/// longer sit in L2).
const BLOCK_ELEMS: usize = 64 * 1024;

/// Fewest elements per row block where [`BLOCK_ELEMS`] would leave fewer than four blocks per
/// thread.
const MIN_BLOCK_ELEMS: usize = 16 * 1024;

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
    /// Softmax where a row of only `-inf` (fully masked) gives zeros instead of NaN: PyTorch's
    /// `_safe_softmax`, `where(!any(x != -inf), 0, softmax(x))` as its attention writes it.
    SafeSoftmax,
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
    /// Softmax, safe softmax or log-softmax.
    pub fn is_softmax(&self) -> bool {
        matches!(
            self,
            ReduceOp::Softmax | ReduceOp::SafeSoftmax | ReduceOp::LogSoftmax
        )
    }

    /// Elements per row of result `r`, or `None` if the op has no such result.
    pub fn result_per_row(&self, r: usize, len: usize) -> Option<usize> {
        match (self, r) {
            (
                ReduceOp::Softmax
                | ReduceOp::SafeSoftmax
                | ReduceOp::LogSoftmax
                | ReduceOp::LayerNorm { .. },
                0,
            ) => Some(len),
            (ReduceOp::LayerNorm { .. }, 1 | 2) => Some(1),
            (_, 0) => Some(1),
            _ => None,
        }
    }
}

/// How one output of a stage is produced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum RowOut {
    /// Result `r` of the stage's reduction, written as computed.
    Result(u32),
    /// An epilogue evaluated per row block over the output's own shape (`rows * per` elements,
    /// row-major with the rows outermost). Besides the kernel's operands (slots `0..n`, `n` =
    /// number of `srcs`) it reads scratch slots (see [`RowReduce::stages`]): `n` the row block's
    /// input rows of its stage (`len` per row), `n + 1 + r` result `r` of its stage's reduction
    /// (see [`ReduceOp::result_per_row`]), `n + 4 + j` output `j` of the earlier stages; each is
    /// indexed as if it were the whole buffer, and must be read row by row (checked).
    Rows {
        /// The expression (one output).
        expr: Expr,
    },
    /// An expression that reads no scratch slot, run once over the whole output (last stage
    /// only).
    Whole {
        /// The expression (one output).
        expr: Expr,
    },
}

/// One reduction over the rows of a [`RowReduce`], with its prologue and epilogue.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RowStage {
    /// The reduction.
    pub op: ReduceOp,
    /// Elements per row of its input.
    pub len: usize,
    /// The input rows: one output over `rows * len` flat indices. Besides the operands it may
    /// read the outputs of earlier stages (scratch slots `n + 4 + j`), row by row.
    pub prologue: Expr,
    /// Layer norm's weight over the `len` elements of a row (one output), if any.
    pub weight: Option<Expr>,
    /// Layer norm's bias, if any.
    pub bias: Option<Expr>,
    /// The stage's outputs: the kernel's outputs (`dsts[j]`) for the last stage, scratch
    /// buffers read by the later stages for the others.
    pub outputs: Vec<RowOut>,
}

/// A row reduction kernel: one or more reductions over the same rows, each with a prologue
/// and an epilogue, computed one row block at a time. The outputs of every stage but the last
/// stay in per-block scratch, where the later stages read them (a layer norm feeding a softmax
/// over the same rows, or the `any` guard of a softmax, never goes to memory).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RowReduce {
    /// Number of rows.
    pub rows: usize,
    /// The stages, in order (at least one).
    pub stages: Vec<RowStage>,
}

/// Scratch slots `n..n + OWN` of an expression are its own stage's input rows and results.
const OWN: usize = 4;

/// Elements per row of a stage's output `o`.
fn out_per_row(st: &RowStage, o: &RowOut, rows: usize) -> Option<usize> {
    match o {
        RowOut::Result(r) => st.op.result_per_row(*r as usize, st.len),
        RowOut::Rows { expr } | RowOut::Whole { expr } => {
            (rows > 0 && expr.numel().is_multiple_of(rows)).then(|| expr.numel() / rows)
        }
    }
}

impl RowReduce {
    /// The last stage, whose outputs are the kernel's.
    fn last(&self) -> Option<&RowStage> {
        self.stages.last()
    }

    /// Elements of the kernel's output `j` (as the destination buffer must have).
    fn out_len(&self, j: usize) -> usize {
        let Some(st) = self.last() else { return 0 };
        match &st.outputs[j] {
            RowOut::Result(r) => self
                .rows
                .saturating_mul(st.op.result_per_row(*r as usize, st.len).unwrap_or(0)),
            RowOut::Rows { expr } | RowOut::Whole { expr } => expr.numel(),
        }
    }

    /// Elements per row of the scratch outputs of the stages before `s`, in slot order.
    fn carried_per_row(&self, s: usize) -> Vec<Option<usize>> {
        self.stages[..s]
            .iter()
            .flat_map(|st| st.outputs.iter().map(move |o| (st, o)))
            .map(|(st, o)| out_per_row(st, o, self.rows))
            .collect()
    }

    /// Scratch slot `n + rel` of an expression of stage `s`: elements per row (`own`: whether
    /// the stage's own input rows and results may be read).
    fn scratch_per_row(&self, s: usize, rel: usize, own: bool) -> Option<usize> {
        let st = &self.stages[s];
        match rel {
            0 if own => Some(st.len),
            1..OWN if own => st.op.result_per_row(rel - 1, st.len),
            _ if rel >= OWN => self.carried_per_row(s).get(rel - OWN).copied().flatten(),
            _ => None,
        }
    }

    /// Checks everything that does not depend on the operands' lengths: the stages' programs
    /// and sizes, and that every expression reads its scratch slots row by row, for a kernel
    /// with `num_srcs` operands. Kernel builders call it so that a kernel that would fail
    /// [`validate`](RowReduce::validate) is refused when it is built.
    pub fn check_structure(&self, num_srcs: usize) -> Result<(), String> {
        if self.stages.is_empty() {
            return Err("a row reduction has at least one stage".into());
        }
        let last = self.stages.len() - 1;
        for (s, st) in self.stages.iter().enumerate() {
            let at = |m: String| {
                if last == 0 {
                    m
                } else {
                    format!("stage {s}: {m}")
                }
            };
            let n = self
                .rows
                .checked_mul(st.len)
                .filter(|&n| n <= i64::MAX as usize / 4)
                .ok_or_else(|| at("row reduction is too large".into()))?;
            if st.len == 0 && matches!(st.op, ReduceOp::Max | ReduceOp::Min) && self.rows > 0 {
                return Err(at("cannot take the maximum or minimum of empty rows".into()));
            }
            if (st.weight.is_some() || st.bias.is_some())
                && !matches!(st.op, ReduceOp::LayerNorm { .. })
            {
                return Err(at("only layer norm has a weight and bias".into()));
            }
            for (e, numel) in [(&st.weight, st.len), (&st.bias, st.len)] {
                if let Some(e) = e {
                    one_output(e, numel).map_err(&at)?;
                    if reads_scratch(e, num_srcs) {
                        return Err(at("a weight or bias reads a scratch slot".into()));
                    }
                }
            }
            one_output(&st.prologue, n).map_err(&at)?;
            self.check_scratch_reads(&st.prologue, num_srcs, s, false)
                .map_err(|m| at(format!("prologue: {m}")))?;
            for (j, o) in st.outputs.iter().enumerate() {
                match o {
                    RowOut::Result(r) => {
                        if st.op.result_per_row(*r as usize, st.len).is_none() {
                            return Err(at(format!("output {j}: the reduction has no result {r}")));
                        }
                    }
                    RowOut::Whole { expr } => {
                        if s != last {
                            return Err(at(format!(
                                "output {j}: only the last stage runs whole outputs"
                            )));
                        }
                        expr.validate_program()?;
                        if expr.num_outputs() != 1 {
                            return Err(format!("output {j} must have one value"));
                        }
                        if reads_scratch(expr, num_srcs) {
                            return Err(format!("output {j} reads a scratch slot"));
                        }
                    }
                    RowOut::Rows { expr } => self
                        .check_scratch_reads(expr, num_srcs, s, true)
                        .map_err(|m| at(format!("output {j}: {m}")))?,
                }
            }
        }
        Ok(())
    }

    /// Checks the structure (see [`check_structure`](RowReduce::check_structure)), then every
    /// operand read against the operands' kinds and lengths, so that running cannot read out
    /// of bounds.
    pub fn validate(&self, srcs: &[Src<'_>]) -> Result<(), String> {
        let ns = srcs.len();
        self.check_structure(ns)?;
        for st in &self.stages {
            for e in [Some(&st.prologue), st.weight.as_ref(), st.bias.as_ref()]
                .into_iter()
                .flatten()
            {
                e.validate_operands(srcs, ns)?;
            }
            for (j, o) in st.outputs.iter().enumerate() {
                if let RowOut::Rows { expr } | RowOut::Whole { expr } = o {
                    expr.validate_operands(srcs, ns)
                        .map_err(|m| format!("output {j}: {m}"))?;
                }
            }
        }
        Ok(())
    }

    /// Checks that `e`, an expression of stage `s` over whole rows (rows outermost), reads
    /// each scratch slot row by row and inside its row (`own`: whether it may read its stage's
    /// own input rows and results, as an epilogue does).
    #[allow(clippy::needless_range_loop)]
    fn check_scratch_reads(&self, e: &Expr, ns: usize, s: usize, own: bool) -> Result<(), String> {
        e.validate_program()?;
        if e.num_outputs() != 1 {
            return Err("an expression of a row reduction has one output".into());
        }
        if !own && !reads_scratch(e, ns) {
            return Ok(());
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
        let mut stride = 1i64;
        for d in (0..k).rev() {
            row_strides[d] = stride;
            stride *= dims[d] as i64;
        }
        for (i, l) in e.leaves().iter().enumerate() {
            let LeafSrc::Slot { slot, .. } = l.src else {
                continue;
            };
            let slot = slot as usize;
            if slot < ns {
                continue;
            }
            let per = self
                .scratch_per_row(s, slot - ns, own)
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

/// Whether `e` reads a slot past the kernel's `num_srcs` operands (a scratch buffer).
fn reads_scratch(e: &Expr, num_srcs: usize) -> bool {
    e.slots().iter().any(|&(slot, _)| slot as usize >= num_srcs)
}

/// Checks that `e` is a valid program with one output over `numel` elements.
fn one_output(e: &Expr, numel: usize) -> Result<(), String> {
    e.validate_program()?;
    if e.num_outputs() != 1 || e.numel() != numel {
        return Err(format!(
            "an expression must have one output over {numel} elements, it has {} over {}",
            e.num_outputs(),
            e.numel()
        ));
    }
    Ok(())
}

/// A row block's destination: a chunk of an output buffer.
enum Chunk<'a> {
    F(&'a mut [f32]),
    B(&'a mut [bool]),
}

/// Lanes of the row sums and of a row maximum or minimum: two AVX-512 registers of `f64`, one
/// of `f32`, so the additions of consecutive elements are independent (the sum order is
/// fixed: lane by lane, then a fixed tree). Four registers were slower on workload d.
const LANES: usize = 16;

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
    tree(&mut acc)
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
    tree(&mut acc)
}

/// The NaN-propagating maximum (`max`) or minimum of a row (`0` for an empty row). Each lane
/// keeps its extreme with one compare and select, and whether it saw a NaN apart from it, so
/// a lane's chain of dependent operations is one select long; of two equal values (`0` and
/// `-0`) the later is kept, as when [`math::max_nan`] is folded over the row.
#[inline(always)]
fn extreme(x: &[f32], max: bool) -> f32 {
    let pick = |a: f32, v: f32| {
        if (max && a > v) || (!max && a < v) {
            a
        } else {
            v
        }
    };
    let mut acc = [x.first().copied().unwrap_or(0.0); LANES];
    let mut nan = [false; LANES];
    let mut it = x.chunks_exact(LANES);
    for c in &mut it {
        for k in 0..LANES {
            acc[k] = pick(acc[k], c[k]);
            nan[k] |= c[k].is_nan();
        }
    }
    for (k, &v) in it.remainder().iter().enumerate() {
        acc[k] = pick(acc[k], v);
        nan[k] |= v.is_nan();
    }
    if nan.iter().any(|&n| n) {
        return f32::NAN;
    }
    acc.iter().copied().fold(acc[0], pick)
}

/// Layer norm's weight and bias of one stage, evaluated over a row.
type WeightBias<'a> = (Option<&'a [f32]>, Option<&'a [f32]>);

/// Runs the kernel: `dsts[j]` receives output `j` of the last stage (full size, row-major).
/// Validates first.
pub fn run_row_reduce(
    k: &RowReduce,
    srcs: &[Src<'_>],
    dsts: &mut [Dst<'_>],
) -> Result<(), KernelError> {
    k.validate(srcs)?;
    let last = k.last().ok_or("a row reduction has at least one stage")?;
    if dsts.len() != last.outputs.len() {
        return Err(format!(
            "the kernel has {} outputs, {} buffers were given",
            last.outputs.len(),
            dsts.len()
        )
        .into());
    }
    for (j, d) in dsts.iter().enumerate() {
        let want = k.out_len(j);
        // Results of `any` are bools; every other result is f32; epilogues write either.
        let is_result = matches!(last.outputs[j], RowOut::Result(_));
        let bool_result = last.op == ReduceOp::Any;
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
            )
            .into());
        }
    }
    let eval_vec = |e: &Expr| -> Result<Vec<f32>, KernelError> {
        let mut v = try_vec(e.numel(), 0f32)?;
        run_elementwise(e, srcs, &mut [&mut v]);
        Ok(v)
    };
    // Each stage's weight and bias: an operand's contiguous run (a layer norm's weight, say)
    // read in place, anything else evaluated once per run.
    let in_place_or_eval = |e: &Expr| {
        let run = e
            .as_contiguous_load()
            .and_then(|(slot, off)| match srcs.get(slot as usize) {
                Some(Src::F32(v)) => v.get(off..off.checked_add(e.numel())?),
                _ => None,
            });
        Ok::<_, KernelError>(match run {
            Some(v) => Cow::Borrowed(v),
            None => Cow::Owned(eval_vec(e)?),
        })
    };
    let affine: SmallVec<[Affine<'_>; 2]> = k
        .stages
        .iter()
        .map(|st| {
            Ok([
                st.weight.as_ref().map(in_place_or_eval).transpose()?,
                st.bias.as_ref().map(in_place_or_eval).transpose()?,
            ])
        })
        .collect::<Result<_, KernelError>>()?;
    let wb: SmallVec<[WeightBias<'_>; 2]> = affine
        .iter()
        .map(|[w, b]| (w.as_deref(), b.as_deref()))
        .collect();
    // Whole outputs first, then the row blocks.
    for (j, o) in last.outputs.iter().enumerate() {
        if let RowOut::Whole { expr } = o {
            match &mut dsts[j] {
                Dst::F32(b) => run_elementwise(expr, srcs, &mut [b]),
                Dst::Bool(b) => {
                    let v = eval_vec(expr)?;
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
    // Rows per block: blocks of up to `BLOCK_ELEMS`, at least four per thread where blocks of
    // `MIN_BLOCK_ELEMS` allow. (Rows are computed one by one, so the blocks never change the
    // results.)
    let widest = k.stages.iter().map(|st| st.len).max().unwrap_or(1).max(1);
    let threads = rayon::current_num_threads().max(1);
    let br = (BLOCK_ELEMS / widest)
        .min(k.rows.div_ceil(4 * threads))
        .max(MIN_BLOCK_ELEMS / widest)
        .max(1);
    let blocks = k.rows.div_ceil(br);
    // A softmax into outputs far larger than the caches streams its rows (see `reduce_rows`).
    let stream = last.op.is_softmax() && (0..dsts.len()).any(|j| k.out_len(j) >= STREAM_ELEMS);
    // Each block's chunks of the outputs, inline (a heap vector per block was a malloc and a
    // free per block, 2% of the layer norm + softmax workload).
    let mut per_block: Vec<SmallVec<[Option<Chunk<'_>>; 4]>> =
        (0..blocks).map(|_| SmallVec::new()).collect();
    for (j, d) in dsts.iter_mut().enumerate() {
        let per = if matches!(last.outputs[j], RowOut::Whole { .. }) {
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
    let carried_per: Vec<usize> = k
        .carried_per_row(k.stages.len())
        .into_iter()
        .map(|p| p.unwrap_or(0))
        .collect();
    // A block whose scratch cannot be allocated fails the kernel (the others may run on).
    per_block
        .into_par_iter()
        .enumerate()
        .try_for_each(|(c, mut outs)| {
            let r0 = c * br;
            let r1 = (r0 + br).min(k.rows);
            run_block(k, srcs, &wb, &carried_per, (r0, r1, stream), &mut outs)
        })
}

super::simd::multiversion! {
    /// [`run_block_body`] in the best compiled copy for this CPU.
    fn run_block(
        k: &RowReduce,
        srcs: &[Src<'_>],
        wb: &[WeightBias<'_>],
        carried_per: &[usize],
        rows: (usize, usize, bool),
        outs: &mut [Option<Chunk<'_>>],
    ) -> Result<(), KernelError> => run_block_body
}

/// Rows of a buffer: the elements and the elements per row.
type Rows<'a> = (&'a [f32], usize);

/// A stage's sources and their shifts (see [`stage_srcs`]), inline for the usual counts.
type StageSrcs<'b> = (SmallVec<[Src<'b>; 8]>, SmallVec<[i64; 8]>);

/// The sources of a stage's expressions over the rows from `r0` on: the operands, then the
/// stage's own input rows and results (`own`, each with its elements per row; empty for a
/// prologue), then the outputs of the earlier stages, each with the shift that makes a
/// scratch buffer of the block's rows read as the whole buffer.
fn stage_srcs<'b>(
    srcs: &[Src<'b>],
    own: [(&'b [f32], usize); OWN],
    carried: &'b [LineVec<f32>],
    carried_per: &[usize],
    r0: usize,
) -> StageSrcs<'b> {
    let mut ext: SmallVec<[Src<'b>; 8]> = srcs.iter().copied().collect();
    let mut shift: SmallVec<[i64; 8]> = std::iter::repeat_n(0, srcs.len()).collect();
    for (v, per) in own.into_iter().chain(
        carried
            .iter()
            .map(|v| &v[..])
            .zip(carried_per.iter().copied()),
    ) {
        ext.push(Src::F32(v));
        shift.push((r0 * per) as i64);
    }
    (ext, shift)
}

#[inline(always)]
fn run_block_body(
    k: &RowReduce,
    srcs: &[Src<'_>],
    wb: &[WeightBias<'_>],
    carried_per: &[usize],
    (r0, r1, stream): (usize, usize, bool),
    outs: &mut [Option<Chunk<'_>>],
) -> Result<(), KernelError> {
    let (nb, ns) = (r1 - r0, srcs.len());
    // With `stream`: the first stage's input rows of the next block, when they are an
    // operand read in place; the last stage prefetches them (see `reduce_rows`).
    let next_rows = k.stages.first().filter(|_| stream).and_then(|st| {
        let (slot, off) = st.prologue.as_contiguous_load()?;
        let Some(Src::F32(v)) = srcs.get(slot as usize) else {
            return None;
        };
        let s0 = off.checked_add(r1.checked_mul(st.len)?)?;
        let s1 = off.checked_add((r1 + nb).checked_mul(st.len)?)?;
        Some((v.get(s0..s1.min(v.len()))?, st.len))
    });
    // (The thread's scratch is put back for the next block unless an allocation failed.)
    let mut scratch = ROWS.with(|c| std::mem::take(&mut *c.borrow_mut()));
    if stream && ln_softmax_rows(k, srcs, wb[0], (r0, r1), outs, &mut scratch)? {
        super::simd::stream_fence();
        ROWS.with(|c| *c.borrow_mut() = scratch);
        return Ok(());
    }
    let last = k.stages.len() - 1;
    // Scratch outputs of the stages so far.
    let mut done = 0;
    // The carried output whose rows' maxima are in `scratch.maxes`.
    let mut max_of: Option<usize> = None;
    for (s, st) in k.stages.iter().enumerate() {
        let len = st.len;
        let mine = if s == last { 0 } else { st.outputs.len() };
        if scratch.carried.len() < done + mine {
            scratch
                .carried
                .resize_with(done + mine, || LineVec::new(64));
        }
        let RowScratch {
            x,
            rows,
            r0: sr0,
            r1: sr1,
            r2: sr2,
            carried,
            maxes,
        } = &mut scratch;
        let (before, after) = carried.split_at_mut(done);
        let before: &[LineVec<f32>] = before;
        let per = &carried_per[..done];
        // The input rows: read in place when the prologue is a plain contiguous load (of an
        // operand, or of an earlier stage's output).
        // (The earlier stage's output read in place, if that is what the rows are.)
        let mut from_carried = None;
        let direct = st.prologue.as_contiguous_load().and_then(|(slot, off)| {
            let slot = slot as usize;
            if slot < ns {
                let (s0, s1) = (off + r0 * len, off + r1 * len);
                match srcs.get(slot) {
                    Some(Src::F32(v)) if s1 <= v.len() => Some(&v[s0..s1]),
                    _ => None,
                }
            } else {
                let j = slot.checked_sub(ns + OWN)?;
                let rows = (off == 0 && per.get(j) == Some(&len)).then(|| &before[j][..nb * len]);
                from_carried = rows.map(|_| j);
                rows
            }
        });
        // A layer norm whose rows a softmax reads next finds their maxima; that softmax reads
        // them (found as the rows were written) instead of its own pass.
        let find_max = matches!(st.op, ReduceOp::LayerNorm { .. })
            && k.stages.get(s + 1).is_some_and(|n| n.op.is_softmax());
        let maxima = if find_max {
            maxes.clear();
            try_room(maxes, nb)?;
            (None, Some(&mut *maxes))
        } else {
            let known = max_of.is_some() && from_carried == max_of;
            (known.then_some(&maxes[..]), None)
        };
        let xin: &[f32] = match direct {
            Some(v) => v,
            None => {
                try_resize(x, nb * len, 0.0)?;
                let out = &mut [&mut x[..nb * len]];
                if !reads_scratch(&st.prologue, ns) {
                    st.prologue.eval_range(srcs, r0 * len, r1 * len, out);
                } else {
                    let empty = [(&[][..], 0); OWN];
                    let (ext, shift) = stage_srcs(srcs, empty, before, per, r0);
                    st.prologue
                        .eval_range_shifted(&ext, &shift, r0 * len, r1 * len, out);
                }
                &x[..nb * len]
            }
        };
        // Result 0: computed straight into the output that returns it, where there is one.
        let per0 = st.op.result_per_row(0, len).unwrap_or(1);
        let into = (s == last)
            .then(|| {
                st.outputs.iter().zip(outs.iter()).position(|(o, c)| {
                    matches!(o, RowOut::Result(0))
                        && matches!(c, Some(Chunk::F(d)) if d.len() == nb * per0)
                })
            })
            .flatten();
        let mut taken = into.and_then(|j| outs[j].take());
        let to_output = taken.is_some();
        let res0: &mut [f32] = match &mut taken {
            Some(Chunk::F(d)) => d,
            _ => {
                try_resize(sr0, nb * per0, 0.0)?;
                &mut sr0[..nb * per0]
            }
        };
        // Results 1 and 2 (layer norm's mean and rstd) are pushed, one per row.
        sr1.clear();
        sr2.clear();
        if matches!(st.op, ReduceOp::LayerNorm { .. }) {
            try_room(sr1, nb)?;
            try_room(sr2, nb)?;
        }
        // Only rows computed straight into the (last stage's) output are streamed.
        let streamed = stream && to_output;
        if streamed {
            for b in rows.iter_mut() {
                try_resize(b, len, 0.0)?;
            }
        }
        reduce_rows(
            st,
            nb,
            wb[s],
            xin,
            res0,
            (sr1, sr2),
            streamed.then_some((rows, next_rows.filter(|_| s == last && s > 0))),
            maxima,
        );
        if find_max {
            max_of = None;
        }
        let results: [&[f32]; 3] = [res0, sr1, sr2];
        let own = [
            (xin, len),
            (results[0], per0),
            (results[1], st.op.result_per_row(1, len).unwrap_or(0)),
            (results[2], st.op.result_per_row(2, len).unwrap_or(0)),
        ];
        // The sources of the stage's row epilogues, made only where it has one.
        let epilogues = st.outputs.iter().any(|o| matches!(o, RowOut::Rows { .. }));
        let (ext, shift) = if epilogues {
            stage_srcs(srcs, own, before, per, r0)
        } else {
            Default::default()
        };
        if s == last {
            for (o, chunk) in st.outputs.iter().zip(outs.iter_mut()) {
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
                                let mut t = try_vec(e - s, 0f32)?;
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
            // (The sources borrow the results; a `SmallVec` holds its borrows until dropped.)
            drop((ext, shift));
            if let (Some(j), Some(c)) = (into, taken) {
                outs[j] = Some(c);
            }
        } else {
            // The outputs this stage hands on, in the scratch buffers after the earlier ones:
            // epilogues first (they read the results), then the results themselves, each
            // moved into its buffer the first time (no copy) and copied after that.
            for (o, buf) in st.outputs.iter().zip(after.iter_mut()) {
                if let RowOut::Rows { expr } = o {
                    let per = expr.numel() / k.rows;
                    try_resize(buf, nb * per, 0.0)?;
                    expr.eval_range_shifted(&ext, &shift, r0 * per, r1 * per, &mut [buf]);
                }
            }
            drop((ext, shift));
            let mut moved: [Option<usize>; 3] = [None; 3];
            for j in 0..mine {
                let RowOut::Result(r) = st.outputs[j] else {
                    continue;
                };
                let r = r as usize;
                if let Some(first) = moved[r] {
                    let (a, b) = after.split_at_mut(j);
                    try_resize(&mut b[0], a[first].len(), 0.0)?;
                    b[0].copy_from_slice(&a[first]);
                } else {
                    let res = match r {
                        0 => &mut *sr0,
                        1 => &mut *sr1,
                        _ => &mut *sr2,
                    };
                    std::mem::swap(&mut after[j], res);
                    moved[r] = Some(j);
                    if r == 0 && find_max {
                        max_of = Some(done + j);
                    }
                }
            }
            done += mine;
        }
    }
    if stream {
        super::simd::stream_fence();
    }
    ROWS.with(|c| *c.borrow_mut() = scratch);
    Ok(())
}

/// Makes room in `v` for `n` elements (it is empty), allocating fallibly: what
/// [`reduce_rows`] then pushes does not allocate.
fn try_room<V: Growable<f32>>(v: &mut V, n: usize) -> Result<(), KernelError> {
    try_resize(v, n, 0.0)?;
    try_resize(v, 0, 0.0)
}

/// Computes a stage's results over the rows `x` (`len` each): result 0 into `res0` (one value
/// or one row per row), results 1 and 2 (layer norm's mean and rstd) pushed onto `res1`, `res2`.
/// With `stream` (a softmax whose `res0` is an output far larger than the caches), each row is
/// computed in one of those two L1 buffers and written to `res0` once, with non-temporal stores
/// made during the next row's exp loop: written in place, the stores of the fast exp loop miss
/// in a burst and stall the core on them. A streamed softmax that is the last stage of several
/// also gets the first stage's input rows of the next block (when read in place), and
/// prefetches row `r` of them during its row `r`'s exp loop: that block's first stage (a layer
/// norm) then reads its rows from L2 instead of stalling on memory with only the math
/// of one row to hide it, and the reads of memory overlap this stage's writes.
///
/// `maxes`: for a softmax, the maxima of the rows `x` when known (no pass to find them); for
/// a layer norm, where to push the maxima of its result rows, found in the pass that writes
/// them (the same values as [`extreme`], so the softmax after it gives the same bits).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn reduce_rows(
    st: &RowStage,
    rows: usize,
    (weight, bias): WeightBias<'_>,
    x: &[f32],
    res0: &mut [f32],
    (res1, res2): (&mut LineVec<f32>, &mut LineVec<f32>),
    stream: Option<(&mut [LineVec<f32>; 2], Option<Rows<'_>>)>,
    (known, mut found): (Option<&[f32]>, Option<&mut Vec<f32>>),
) {
    let (mut stream, next_block) = match stream {
        Some((bufs, next)) => (Some(Stream::new(bufs, st.len)), next),
        None => (None, None),
    };
    // Row `r` of the next block's input, spread over the calls of the exp loop's tick (one
    // per 64 elements).
    let next_block_row = |r: usize| -> Spread {
        let row =
            next_block.and_then(|(v, n)| v.get((r * n).min(v.len())..((r + 1) * n).min(v.len())));
        let row = row.unwrap_or(&[]);
        Spread::new(row.as_ptr(), row.len(), (st.len / 64).max(1))
    };
    let len = st.len;
    let lf = len as f64;
    // The passes over a row before the last: layer norm's moments and its output row; three
    // for the others (at most).
    let passes = if matches!(st.op, ReduceOp::LayerNorm { .. }) {
        2
    } else {
        3
    };
    for r in 0..rows {
        // The next row, from memory while this one is computed in cache: a share of its lines
        // before each of this row's passes (ops of one pass ask for all of them at once); a
        // burst of a whole row's prefetches stalls on the core's miss buffers.
        let next = x.get((r + 1) * len..(r + 2) * len).unwrap_or(&[]);
        let mut ahead = Spread::new(next.as_ptr(), next.len(), passes);
        let x = &x[r * len..(r + 1) * len];
        ahead.step();
        match st.op {
            ReduceOp::Sum => res0[r] = sum_f64(x) as f32,
            ReduceOp::Mean => res0[r] = (sum_f64(x) / lf) as f32,
            ReduceOp::Max => res0[r] = extreme(x, true),
            ReduceOp::Min => res0[r] = extreme(x, false),
            ReduceOp::Any => {
                res0[r] = if x.iter().any(|&v| v != 0.0) {
                    1.0
                } else {
                    0.0
                }
            }
            ReduceOp::Var { correction } => {
                let m = sum_f64(x) / lf;
                ahead.step();
                res0[r] = (sq_dev_f64(x, m) / (lf - correction).max(0.0)) as f32;
            }
            ReduceOp::Softmax | ReduceOp::SafeSoftmax | ReduceOp::LogSoftmax => {
                let stream = stream.as_mut().map(|s| (s, next_block_row(r)));
                softmax_row(st.op, x, known.map(|k| k[r]), (res0, r), &mut ahead, stream);
            }
            ReduceOp::LayerNorm { eps } => {
                let (mf, rf) = ln_moments(x, eps);
                ahead.step();
                let out = &mut res0[r * len..(r + 1) * len];
                // One pass, in the op order `((x - mean) * rstd) * weight + bias`.
                match found.as_deref_mut() {
                    Some(f) => f.push(normalize_max(x, (mf, rf), weight, bias, out)),
                    None => normalize(x, (mf, rf), weight, bias, out),
                }
                res1.push(mf);
                res2.push(rf);
            }
        }
        // Ops of one pass: the rest of the lines.
        ahead.finish();
    }
    if let Some(s) = stream {
        s.finish(res0);
    }
}

/// Layer norm's mean and `1 / sqrt(var + eps)` of a row: the corrected moments, in one pass
/// where the row allows (see `row_moments`); for an infinity or NaN in the row, or `f32` lane
/// sums that overflowed (values beyond about 2e37), the `f64` mean and the squared deviations
/// from it, whose infinities and NaN are the op's.
#[inline(always)]
fn ln_moments(x: &[f32], eps: f64) -> (f32, f32) {
    let lf = x.len() as f64;
    let (m, var) = row_moments(x).unwrap_or_else(|| {
        let m = sum_f64(x) / lf;
        (m, row_dev_sums(x, m as f32).1 / lf)
    });
    (m as f32, (1.0 / (var + eps).sqrt()) as f32)
}

/// The rows of a streamed softmax in flight (see [`reduce_rows`]): two L1 rows, the one being
/// computed and the one whose scaled copy is still to be written, with that row's index and
/// `1/sum`.
struct Stream<'s> {
    bufs: &'s mut [LineVec<f32>; 2],
    /// A row whose scaled copy is still to be written, from `bufs[1]`: (row, 1/sum).
    pending: Option<(usize, f32)>,
}

impl<'s> Stream<'s> {
    /// Rows of `len` in `bufs`, none pending.
    fn new(bufs: &'s mut [LineVec<f32>; 2], len: usize) -> Stream<'s> {
        bufs.iter_mut().for_each(|t| t.resize(len, 0.0));
        Stream {
            bufs,
            pending: None,
        }
    }

    /// Writes the pending row into its place in `res` (rows of the buffers' length).
    fn finish(self, res: &mut [f32]) {
        if let Some((pr, k)) = self.pending {
            let len = self.bufs[1].len();
            ScaleNt::new(&mut res[pr * len..(pr + 1) * len], &self.bufs[1], k).finish();
        }
    }
}

/// Softmax, safe softmax or log-softmax (`op`) of the row `x` into row `r` of `res`, the row's
/// maximum taken from `known` where given and not `-inf`. `ahead` (the next row's lines) steps
/// after the maximum and after the exp loop. With `stream`, the row is computed in its L1 row
/// and written during the next row's exp loop (see [`reduce_rows`]), and the given lines are
/// prefetched over this row's exp loop.
///
/// Maxima found by a layer norm leave NaN out (see `normalize_max`): a row of them that is
/// all `-inf` gets its exact maximum here, and one with a NaN (whose sum is then NaN) after
/// the sum, with the sum made again from it, so every row gives the bits it would with its
/// exact maximum.
#[inline(always)]
fn softmax_row(
    op: ReduceOp,
    x: &[f32],
    known: Option<f32>,
    (res, r): (&mut [f32], usize),
    ahead: &mut Spread,
    mut stream: Option<(&mut Stream<'_>, Spread)>,
) {
    let len = x.len();
    let mut m = match known {
        Some(k) if k != f32::NEG_INFINITY => k,
        _ => extreme(x, true),
    };
    ahead.step();
    let (before, out) = res.split_at_mut(r * len);
    let out = &mut out[..len];
    if op == ReduceOp::SafeSoftmax && m == f32::NEG_INFINITY {
        out.fill(0.0);
        return;
    }
    // A row streamed to memory is computed in an L1 row and written once, with non-temporal
    // stores; otherwise in place. The stores of a streamed row are made during the next row's
    // exp loop, four lines per 64 elements: written after its own loop, a row's 64 stores came
    // in a burst and stalled the core on the line fill buffers (a quarter of layer norm +
    // softmax's time). This row goes into `bufs[0]`, which then swaps places with the pending
    // row's `bufs[1]`.
    let mut s = match stream.as_mut() {
        Some((st, pre)) => {
            let [t, prev] = &mut *st.bufs;
            let mut w = st
                .pending
                .take()
                .map(|(pr, k)| ScaleNt::new(&mut before[pr * len..(pr + 1) * len], prev, k));
            // The pages of the row written `WARM_ROWS` rows on (its first and last line: a
            // row may straddle two), so that its non-temporal stores find their address
            // translations (see `simd::warm_page`).
            let on = out.as_ptr().wrapping_add(WARM_ROWS * len);
            warm_page(on);
            warm_page(on.wrapping_add(len.max(16) - 16));
            let s = exp_sub_sum(x, m, t, || {
                if let Some(w) = w.as_mut() {
                    w.lines(4);
                }
                pre.step();
            });
            pre.finish();
            if let Some(w) = w {
                w.finish();
            }
            st.bufs.swap(0, 1);
            s
        }
        None => exp_sub_sum(x, m, out, || ()),
    };
    if known.is_some() && s.is_nan() && !m.is_nan() {
        let e = extreme(x, true);
        if e.is_nan() {
            m = e;
            let row = match stream.as_mut() {
                Some((st, _)) => &mut st.bufs[1][..],
                None => &mut *out,
            };
            s = exp_sub_sum(x, m, row, || ());
        }
    }
    ahead.step();
    if op != ReduceOp::LogSoftmax {
        let inv = (1.0 / s) as f32;
        match stream {
            Some((st, _)) => st.pending = Some((r, inv)),
            None => out.iter_mut().for_each(|o| *o *= inv),
        }
    } else {
        let ls = s.ln() as f32;
        for (o, &v) in out.iter_mut().zip(x) {
            *o = (v - m) - ls;
        }
    }
}

/// A stage's weight and bias (see [`run_row_reduce`]): read in place or evaluated.
type Affine<'a> = [Option<Cow<'a, [f32]>>; 2];

/// Runs a row block of a layer norm whose only output is the rows that a streamed softmax
/// (see [`reduce_rows`]) reads next, the kernel's only output, row by row instead of stage by
/// stage: each row's layer norm goes to an L1 row and straight into its softmax, and the next
/// row's lines are prefetched over all of a row's passes. Stage by stage, the block's layer
/// norm read rows that the softmax had prefetched into L2 and moved nothing to or from memory,
/// then its softmax made all of the memory traffic, reads and writes, in about half of the
/// time. The same operations on each row as the stages, so the same bits. Workload d (8192
/// rows of 1024, layer norm then softmax) on a 2-core Zen 4 under KVM, alternating runs in one
/// process: 1.10-1.16x faster on 2 threads, 1.10x on one.
///
/// `false` (nothing done) for other kernels: the stage-by-stage path runs them.
fn ln_softmax_rows(
    k: &RowReduce,
    srcs: &[Src<'_>],
    (weight, bias): WeightBias<'_>,
    (r0, r1): (usize, usize),
    outs: &mut [Option<Chunk<'_>>],
    scratch: &mut RowScratch,
) -> Result<bool, KernelError> {
    let [ln, sm] = &k.stages[..] else {
        return Ok(false);
    };
    let ReduceOp::LayerNorm { eps } = ln.op else {
        return Ok(false);
    };
    let len = ln.len;
    let only_rows = |st: &RowStage| st.outputs[..] == [RowOut::Result(0)];
    // The softmax's input is the layer norm's output, row by row.
    let chained = sm
        .prologue
        .as_contiguous_load()
        .is_some_and(|(s, o)| s as usize == srcs.len() + OWN && o == 0);
    if !sm.op.is_softmax() || sm.len != len || !only_rows(ln) || !only_rows(sm) || !chained {
        return Ok(false);
    }
    // The layer norm's input: an operand read in place.
    let Some((slot, off)) = ln.prologue.as_contiguous_load() else {
        return Ok(false);
    };
    let Some(Src::F32(v)) = srcs.get(slot as usize) else {
        return Ok(false);
    };
    let nb = r1 - r0;
    let Some(xin) = v.get(off + r0 * len..off + r1 * len) else {
        return Ok(false);
    };
    let [Some(Chunk::F(out))] = outs else {
        return Ok(false);
    };
    if out.len() != nb * len {
        return Ok(false);
    }
    let RowScratch { x: row, rows, .. } = scratch;
    try_resize(row, len, 0.0)?;
    for b in rows.iter_mut() {
        try_resize(b, len, 0.0)?;
    }
    let mut stream = Stream::new(rows, len);
    // (The next row's lines are `pre`'s, given to the softmax's exp loop.)
    let mut ahead = Spread::NONE;
    for r in 0..nb {
        let x = &xin[r * len..(r + 1) * len];
        // The next row (the next block's first after the last), a share of its lines before
        // each of the layer norm's two passes and the rest over the softmax's exp loop.
        let a = (off + (r0 + r + 1) * len).min(v.len());
        let next = &v[a..(a + len).min(v.len())];
        let mut pre = Spread::new(next.as_ptr(), next.len(), len / 64 + 2);
        pre.step();
        let mr = ln_moments(x, eps);
        pre.step();
        let m = normalize_max(x, mr, weight, bias, row);
        softmax_row(
            sm.op,
            row,
            Some(m),
            (out, r),
            &mut ahead,
            Some((&mut stream, pre)),
        );
    }
    stream.finish(out);
    Ok(true)
}

/// How many rows ahead a streamed softmax warms the pages of its output (see
/// `simd::warm_page`): 1.07x faster on workload d (8192 rows of 1024) on a Zen 4 under KVM.
const WARM_ROWS: usize = 4;

/// Per-thread buffers of a row block: input rows, one streamed softmax row, results 0, 1 and 2
/// of the current stage, and the outputs of the earlier stages (cache-line aligned).
struct RowScratch {
    x: LineVec<f32>,
    rows: [LineVec<f32>; 2],
    r0: LineVec<f32>,
    r1: LineVec<f32>,
    r2: LineVec<f32>,
    carried: Vec<LineVec<f32>>,
    /// The row maxima of a layer norm's result whose next stage is a softmax (see
    /// `reduce_rows`).
    maxes: Vec<f32>,
}

impl Default for RowScratch {
    fn default() -> RowScratch {
        let v = || LineVec::new(64);
        RowScratch {
            x: v(),
            rows: [v(), v()],
            r0: v(),
            r1: v(),
            r2: v(),
            carried: vec![],
            maxes: vec![],
        }
    }
}

thread_local! {
    static ROWS: std::cell::RefCell<RowScratch> = std::cell::RefCell::new(RowScratch::default());
}
