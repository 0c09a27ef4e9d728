//! The memory plan: where each value of a program lives during a run.
//!
//! User inputs are read in place and outputs are written in place (the caller's memory);
//! constants live in the executor. Intermediates of the fast element types share a small set of
//! arena buffers assigned by liveness: a buffer is reused as soon as the last step that reads
//! its value has run (best fit by size, per element type). The product of a matmul or
//! convolution that only its fused epilogue reads gets no buffer at all ([`Loc::InEpilogue`]).

use super::program::{Kernel, Program, Step, ValueId};
use fxhlo_ir::DType;

/// Element kinds the arena holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ElemKind {
    /// `f32`.
    F32,
    /// `i64`.
    I64,
    /// `bool`.
    Bool,
}

impl ElemKind {
    /// The arena kind of a dtype, if the fast runtime stores it natively.
    pub fn of(d: DType) -> Option<ElemKind> {
        match d {
            DType::F32 => Some(ElemKind::F32),
            DType::I64 => Some(ElemKind::I64),
            DType::Bool => Some(ElemKind::Bool),
            _ => None,
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            ElemKind::F32 => 4,
            ElemKind::I64 => 8,
            ElemKind::Bool => 1,
        }
    }
}

/// Where a value lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loc {
    /// The k-th user input (caller's memory).
    Input(usize),
    /// A constant held by the executor.
    Const,
    /// The k-th output (caller's memory), written by the step that computes it.
    Output(usize),
    /// An arena buffer.
    Arena(usize),
    /// A buffer of its own, allocated during the run (element types the arena does not hold,
    /// values returned more than once).
    Owned,
    /// The product of a matmul or convolution read by nothing but the step's fused epilogue:
    /// the kernel writes it into the epilogue's first result, and the epilogue runs there in
    /// place, tile by tile (see [`product_in_epilogue`]).
    InEpilogue,
}

/// Whether step `s` can compute its product (`dsts[0]`) straight into its epilogue's first
/// result: a matmul or convolution with a fused epilogue whose first result is f32 of the
/// product's size. The memory plan also needs the product to be read by no step and returned
/// by none.
pub fn product_in_epilogue(p: &Program, s: &Step) -> bool {
    let fused = matches!(
        &s.kernel,
        Kernel::Matmul {
            epilogue: Some(_),
            ..
        } | Kernel::Conv {
            epilogue: Some(_),
            ..
        }
    );
    let spec = |k: usize| s.dsts.get(k).and_then(|&v| p.values.get(v as usize));
    fused
        && matches!((spec(0), spec(1)), (Some(c), Some(o))
            if c.dtype == DType::F32 && o.dtype == DType::F32 && c.numel() == o.numel())
        && s.dsts[0] != s.dsts[1]
}

/// The memory plan of a program.
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryPlan {
    /// Location of each value.
    pub loc: Vec<Loc>,
    /// Arena buffers: element kind and size in elements.
    pub buffers: Vec<(ElemKind, usize)>,
    /// Bytes of the arena.
    pub arena_bytes: u64,
    /// Bytes of all intermediates if each had its own buffer.
    pub intermediate_bytes: u64,
    /// Bytes of intermediates that live outside the arena.
    pub owned_bytes: u64,
    /// Bytes of the outputs.
    pub output_bytes: u64,
    /// Bytes of the constants.
    pub constant_bytes: u64,
}

impl MemoryPlan {
    /// Plans `p`'s memory.
    pub fn new(p: &Program) -> MemoryPlan {
        let n = p.values.len();
        let mut loc = vec![Loc::Owned; n];
        for (k, &v) in p.inputs.iter().enumerate() {
            loc[v as usize] = Loc::Input(k);
        }
        for (v, _) in &p.constants {
            loc[*v as usize] = Loc::Const;
        }
        let mut output_bytes = 0u64;
        for (k, &v) in p.outputs.iter().enumerate() {
            // A value returned twice is written to the first output and copied to the other.
            if loc[v as usize] == Loc::Owned {
                loc[v as usize] = Loc::Output(k);
            }
            output_bytes += p.values[v as usize].bytes() as u64;
        }
        let constant_bytes = p
            .constants
            .iter()
            .map(|(v, _)| p.values[*v as usize].bytes() as u64)
            .sum();
        // Last step reading each value.
        let mut last: Vec<Option<usize>> = vec![None; n];
        for (i, s) in p.steps.iter().enumerate() {
            for &v in &s.srcs {
                last[v as usize] = Some(i);
            }
        }
        let mut buffers: Vec<(ElemKind, usize)> = vec![];
        let mut free: Vec<usize> = vec![];
        let mut holder: Vec<Option<ValueId>> = vec![];
        let mut intermediate_bytes = 0u64;
        let mut owned_bytes = 0u64;
        for (i, s) in p.steps.iter().enumerate() {
            for (k, &v) in s.dsts.iter().enumerate() {
                let spec = &p.values[v as usize];
                if loc[v as usize] != Loc::Owned {
                    continue;
                }
                intermediate_bytes += spec.bytes() as u64;
                if k == 0 && last[v as usize].is_none() && product_in_epilogue(p, s) {
                    loc[v as usize] = Loc::InEpilogue;
                    continue;
                }
                let Some(kind) = ElemKind::of(spec.dtype) else {
                    owned_bytes += spec.bytes() as u64;
                    continue;
                };
                let need = spec.numel();
                // Best fit among free buffers of the kind; else grow the largest free one; else new.
                let fit = free
                    .iter()
                    .enumerate()
                    .filter(|(_, &b)| buffers[b].0 == kind && buffers[b].1 >= need)
                    .min_by_key(|(_, &b)| buffers[b].1)
                    .map(|(j, _)| j)
                    .or_else(|| {
                        free.iter()
                            .enumerate()
                            .filter(|(_, &b)| buffers[b].0 == kind)
                            .max_by_key(|(_, &b)| buffers[b].1)
                            .map(|(j, _)| j)
                    });
                let b = match fit {
                    Some(j) => {
                        let b = free.swap_remove(j);
                        buffers[b].1 = buffers[b].1.max(need);
                        b
                    }
                    None => {
                        buffers.push((kind, need));
                        holder.push(None);
                        buffers.len() - 1
                    }
                };
                holder[b] = Some(v);
                loc[v as usize] = Loc::Arena(b);
            }
            // Free what this step read for the last time, and results nobody reads.
            for &v in s.srcs.iter().chain(&s.dsts) {
                if let Loc::Arena(b) = loc[v as usize] {
                    let dead = last[v as usize].is_none_or(|l| l <= i);
                    if dead && holder[b] == Some(v) {
                        holder[b] = None;
                        free.push(b);
                    }
                }
            }
        }
        let arena_bytes = buffers.iter().map(|(k, e)| (k.size() * e) as u64).sum();
        MemoryPlan {
            loc,
            buffers,
            arena_bytes,
            intermediate_bytes,
            owned_bytes,
            output_bytes,
            constant_bytes,
        }
    }

    /// Peak bytes a run holds besides its inputs: constants, arena, owned intermediates (at
    /// most) and outputs.
    pub fn peak_bytes(&self) -> u64 {
        self.constant_bytes + self.arena_bytes + self.owned_bytes + self.output_bytes
    }
}
