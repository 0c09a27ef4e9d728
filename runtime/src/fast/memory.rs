//! The memory plan: where each value of a program lives during a run.
//!
//! User inputs are read in place and outputs are written in place (the caller's memory);
//! constants live in the executor. Intermediates of the fast element types share a small set of
//! arena buffers assigned by liveness: a buffer is reused as soon as the last step that reads
//! its value has run (best fit by size, per element type). The product of a matmul or
//! convolution that only its fused epilogue reads gets no buffer at all ([`Loc::InEpilogue`]).

use super::program::{Kernel, Program, Step, ValueId};
use fxhlo_ir::DType;

/// Storage whose first element starts a 64-byte cache line: the arena's, owned and constant
/// buffers and the kernels' scratch. A whole-register (64-byte) load or store at a multiple of
/// 16 elements then never straddles two lines, and streamed rows are stored as whole lines.
/// The system allocator gives large buffers 16-byte alignment: the layer norm + softmax
/// benchmark ran 10% slower that way, the others 2-4%.
pub type LineVec<T> = aligned_vec::AVec<T, aligned_vec::ConstAlign<64>>;

/// `n` zeros in a [`LineVec`].
pub fn line_zeros<T: bytemuck::Zeroable + Copy>(n: usize) -> LineVec<T> {
    let mut v = LineVec::new(64);
    grow_zeroed(&mut v, n);
    v
}

/// A [`LineVec`] holding a copy of `x`.
pub fn line_copy<T: Copy>(x: &[T]) -> LineVec<T> {
    LineVec::from_slice(64, x)
}

/// Lengthens `v` to `n` elements (no change if it is as long), the new ones zero: one
/// `memset`, where [`LineVec::resize`] writes element by element.
pub fn grow_zeroed<T: bytemuck::Zeroable + Copy>(v: &mut LineVec<T>, n: usize) {
    let len = v.len();
    if n <= len {
        return;
    }
    v.reserve(n - len);
    // SAFETY: `reserve` made room for `n` elements; the new ones are written as zero bytes,
    // a valid value of a `Zeroable` type, before the length covers them.
    unsafe {
        v.as_mut_ptr().add(len).write_bytes(0, n - len);
        v.set_len(n);
    }
}

/// [`grow_zeroed`] that reports an allocation failure instead of aborting the process (a run
/// near the memory limit, from Python: raised as `MemoryError`).
pub fn try_grow_zeroed<T: bytemuck::Zeroable + Copy>(
    v: &mut LineVec<T>,
    n: usize,
) -> Result<(), String> {
    let len = v.len();
    if n > len {
        line_reserve(v, n - len).map_err(|e| {
            format!(
                "cannot allocate {n} elements of {} bytes: {e}",
                std::mem::size_of::<T>()
            )
        })?;
    }
    grow_zeroed(v, n);
    Ok(())
}

/// Why a kernel failed: a problem with its operands, or an allocation of its scratch memory
/// that failed (near the process's memory limit: `RuntimeError::OutOfMemory` naming the step,
/// a Python `MemoryError`).
#[derive(Debug, Clone, PartialEq)]
pub enum KernelError {
    /// The operands or results do not fit the kernel.
    Msg(String),
    /// An allocation failed: what was asked for.
    OutOfMemory(String),
}

impl From<String> for KernelError {
    fn from(m: String) -> Self {
        KernelError::Msg(m)
    }
}

impl std::fmt::Display for KernelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KernelError::Msg(m) => f.write_str(m),
            KernelError::OutOfMemory(m) => write!(f, "out of memory: {m}"),
        }
    }
}

impl From<&str> for KernelError {
    fn from(m: &str) -> Self {
        KernelError::Msg(m.into())
    }
}

/// The error of a failed scratch allocation of `n` elements of `T`.
fn alloc_error<T>(n: usize, e: impl std::fmt::Display) -> KernelError {
    KernelError::OutOfMemory(format!(
        "scratch of {n} elements of {} bytes: {e}",
        std::mem::size_of::<T>()
    ))
}

/// `n` copies of `x` in a new vector, allocated fallibly: every allocation of a call sized by
/// the program's shapes (kernel scratch, per-worker buffers, the fallback interpreter's
/// tensors) goes through this or [`try_resize`], so that running out of memory is an error,
/// not an abort.
pub fn try_vec<T: Clone>(n: usize, x: T) -> Result<Vec<T>, KernelError> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|e| alloc_error::<T>(n, e))?;
    v.resize(n, x);
    Ok(v)
}

/// A vector of the items of `it`, allocated fallibly for `n` of them (see [`try_vec`]).
pub fn try_collect<T>(n: usize, it: impl IntoIterator<Item = T>) -> Result<Vec<T>, KernelError> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|e| alloc_error::<T>(n, e))?;
    v.extend(it);
    Ok(v)
}

/// Storage that [`try_resize`] can lengthen fallibly.
pub trait Growable<T> {
    /// Makes room for `extra` more elements, or fails.
    fn try_reserve_more(&mut self, extra: usize) -> Result<(), String>;
    /// Sets the length to `n` (room for it was made), new elements `x`.
    fn set_len_to(&mut self, n: usize, x: T);
    /// The length.
    fn length(&self) -> usize;
}

impl<T: Clone> Growable<T> for Vec<T> {
    fn try_reserve_more(&mut self, extra: usize) -> Result<(), String> {
        self.try_reserve(extra).map_err(|e| e.to_string())
    }
    fn set_len_to(&mut self, n: usize, x: T) {
        self.resize(n, x);
    }
    fn length(&self) -> usize {
        self.len()
    }
}

impl<T: Clone> Growable<T> for LineVec<T> {
    fn try_reserve_more(&mut self, extra: usize) -> Result<(), String> {
        line_reserve(self, extra).map_err(Into::into)
    }
    fn set_len_to(&mut self, n: usize, x: T) {
        self.resize(n, x);
    }
    fn length(&self) -> usize {
        self.len()
    }
}

/// `v.resize(n, x)` (shorter: cut), allocating fallibly (see [`try_vec`]).
pub fn try_resize<T, V: Growable<T>>(v: &mut V, n: usize, x: T) -> Result<(), KernelError> {
    let len = v.length();
    if n > len {
        v.try_reserve_more(n - len)
            .map_err(|e| alloc_error::<T>(n, e))?;
    }
    v.set_len_to(n, x);
    Ok(())
}

/// The first `len` elements of `v`, grown with zeros as needed, allocating fallibly: a
/// 64-byte aligned scratch block (see [`try_vec`]).
pub fn try_aligned<T: bytemuck::Zeroable + Copy>(
    v: &mut LineVec<T>,
    len: usize,
) -> Result<&mut [T], KernelError> {
    let have = v.len();
    if len > have {
        line_reserve(v, len - have).map_err(|e| alloc_error::<T>(len, e))?;
    }
    grow_zeroed(v, len);
    Ok(&mut v[..len])
}

/// Reserves room for `extra` more elements in `v`, or says why not. A size past `isize::MAX`
/// bytes is refused here: `aligned_vec` would build an invalid layout for it (a debug
/// build's precondition check aborts the process).
fn line_reserve<T>(v: &mut LineVec<T>, extra: usize) -> Result<(), &'static str> {
    let bytes = v
        .len()
        .checked_add(extra)
        .and_then(|n| n.checked_mul(std::mem::size_of::<T>()));
    match bytes {
        Some(b) if b <= isize::MAX as usize - 64 => v.try_reserve(extra).map_err(reserve_error),
        _ => Err("capacity overflow"),
    }
}

/// What a failed [`LineVec`] reservation means, in words.
fn reserve_error(e: aligned_vec::TryReserveError) -> &'static str {
    match e {
        aligned_vec::TryReserveError::CapacityOverflow => "capacity overflow",
        aligned_vec::TryReserveError::AllocError { .. } => {
            "memory allocation failed because the memory allocator returned an error"
        }
    }
}

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
    /// The arena kind of a dtype, if the fast runtime stores it natively (bf16 and f16 widened
    /// in `f32`, see [`super::lowp`]).
    pub fn of(d: DType) -> Option<ElemKind> {
        match d {
            DType::F32 | DType::BF16 | DType::F16 => Some(ElemKind::F32),
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
/// result: a matmul or convolution with a fused epilogue whose first result is stored as f32
/// (f32, or bf16/f16 widened) of the product's size. The memory plan also needs the product to be read by no step and returned
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
            if ElemKind::of(c.dtype) == Some(ElemKind::F32)
                && ElemKind::of(o.dtype) == Some(ElemKind::F32)
                && c.numel() == o.numel())
        && s.dsts[0] != s.dsts[1]
}

/// Bytes a value takes where the runtime holds it (bf16 and f16 widened to 4 bytes).
fn stored_bytes(spec: &super::program::TensorSpec) -> u64 {
    match ElemKind::of(spec.dtype) {
        Some(k) => (k.size() as u64).saturating_mul(spec.numel() as u64),
        None => spec.bytes() as u64,
    }
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
            output_bytes = output_bytes.saturating_add(p.values[v as usize].bytes() as u64);
        }
        let constant_bytes = p
            .constants
            .iter()
            .map(|(v, _)| stored_bytes(&p.values[*v as usize]))
            .fold(0u64, u64::saturating_add);
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
                intermediate_bytes = intermediate_bytes.saturating_add(stored_bytes(spec));
                if k == 0 && last[v as usize].is_none() && product_in_epilogue(p, s) {
                    loc[v as usize] = Loc::InEpilogue;
                    continue;
                }
                let Some(kind) = ElemKind::of(spec.dtype) else {
                    owned_bytes = owned_bytes.saturating_add(spec.bytes() as u64);
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
        let arena_bytes = buffers
            .iter()
            .map(|(k, e)| (k.size() as u64).saturating_mul(*e as u64))
            .fold(0u64, u64::saturating_add);
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
    /// most) and outputs. The sums saturate: a plan past `u64::MAX` bytes is over any limit.
    pub fn peak_bytes(&self) -> u64 {
        self.constant_bytes
            .saturating_add(self.arena_bytes)
            .saturating_add(self.owned_bytes)
            .saturating_add(self.output_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Line buffers start a cache line at every size and after every growth, and the elements
    /// a growth adds are zero while the old ones keep their values.
    #[test]
    fn line_buffers_are_aligned_and_grow_with_zeros() {
        for n in [0, 1, 15, 16, 17, 1000, 1 << 16, (1 << 20) + 3] {
            let v: LineVec<f32> = line_zeros(n);
            assert_eq!(v.len(), n);
            assert!(v.iter().all(|&x| x.to_bits() == 0));
            assert_eq!(v.as_ptr() as usize % 64, 0, "{n} zeros");
            let c = line_copy(&[1.5f32, -2.0, 3.25][..n.min(3)]);
            assert_eq!(c.as_ptr() as usize % 64, 0);
            assert_eq!(c.as_slice(), &[1.5f32, -2.0, 3.25][..n.min(3)]);
        }
        let mut v: LineVec<i64> = line_zeros(3);
        v.copy_from_slice(&[7, -8, 9]);
        for n in [2, 40, 100_000] {
            grow_zeroed(&mut v, n);
            assert_eq!(v.len(), n.max(3));
            assert_eq!(v.as_ptr() as usize % 64, 0);
            assert_eq!(&v[..3], &[7, -8, 9]);
            assert!(v[3..].iter().all(|&x| x == 0));
        }
        let mut b: LineVec<bool> = line_zeros(5);
        b[4] = true;
        grow_zeroed(&mut b, 70);
        assert_eq!(b.iter().filter(|&&x| x).count(), 1);
        assert!(b[4]);
    }
}
