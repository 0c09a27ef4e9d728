//! The fast runtime: compiled artifacts executed by fused, tiled, Pallas-style kernels.
//!
//! A [`program::Program`] is a list of steps over value slots; each step is one kernel of the
//! fusion plan, compiled for a block-wise executor, or a fallback to the reference interpreter
//! for what no fast kernel covers yet (listed by `fxhlo run --stats`).

pub mod attention;
pub mod concat;
pub mod conv;
pub mod expr;
pub mod gather;
pub mod gemm;
pub mod index;
pub mod lowp;
pub mod math;
pub mod pool;
pub mod reduce;
pub mod sgemm;
pub mod simd;
pub mod vmath;
#[cfg(target_arch = "x86_64")]
pub mod winograd;

/// A read-only operand of a kernel: a contiguous row-major buffer of one of the element types
/// the fast kernels work on.
#[derive(Clone, Copy, Debug)]
pub enum Src<'a> {
    /// `f32` elements.
    F32(&'a [f32]),
    /// `i64` elements (indices).
    I64(&'a [i64]),
    /// Booleans (masks).
    Bool(&'a [bool]),
}

impl Src<'_> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Src::F32(s) => s.len(),
            Src::I64(s) => s.len(),
            Src::Bool(s) => s.len(),
        }
    }

    /// True if there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A result buffer of a kernel: contiguous, row-major, of the result's full size.
#[derive(Debug)]
pub enum Dst<'a> {
    /// `f32` elements.
    F32(&'a mut [f32]),
    /// `i64` elements (indices).
    I64(&'a mut [i64]),
    /// Booleans (masks).
    Bool(&'a mut [bool]),
}

/// A raw pointer to a buffer (of `f32` unless said) shared by workers that each write their
/// own disjoint part of it (tiles of a product, planes of a convolution, tiles of an
/// epilogue's outputs, column strips of a scan).
#[derive(Debug)]
pub(crate) struct SendPtr<T = f32>(pub(crate) *mut T);
// SAFETY: the users only touch the elements their task owns, and the buffer outlives the tasks.
unsafe impl<T: Send> Send for SendPtr<T> {}
unsafe impl<T: Send> Sync for SendPtr<T> {}

// By hand: a derive would ask `T: Clone` of the pointee.
impl<T> Clone for SendPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SendPtr<T> {}

impl<T> SendPtr<T> {
    /// The pointer (a method, so closures capture the whole `Send` wrapper).
    pub(crate) fn get(self) -> *mut T {
        self.0
    }
}

/// [`par_jobs`] of jobs that can fail: the first error (by job order where several fail).
pub(crate) fn try_par_jobs<T: Send, E: Send>(
    out: &mut [T],
    size: usize,
    f: impl Fn(usize, &mut [T]) -> Result<(), E> + Sync,
) -> Result<(), E> {
    use rayon::prelude::*;
    if out.len() <= size {
        f(0, out)
    } else {
        out.par_chunks_mut(size)
            .enumerate()
            .try_for_each(|(j, c)| f(j * size, c))
    }
}

/// `f(start, chunk)` over `out` cut into chunks of `size` elements (`start` the index of the
/// chunk's first element): on this thread where one chunk holds all of `out`, else as parallel
/// jobs (the copying kernels' split of their output).
pub(crate) fn par_jobs<T: Send>(out: &mut [T], size: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    use rayon::prelude::*;
    if out.len() <= size {
        f(0, out);
    } else {
        out.par_chunks_mut(size)
            .enumerate()
            .for_each(|(j, c)| f(j * size, c));
    }
}

pub mod artifact;
pub mod exec;
pub mod fold;
pub mod memory;
pub mod program;
pub mod text;

pub use artifact::{Artifact, ArtifactHeader};
pub use exec::{ExecOptions, Executor};
pub use program::{Kernel, Program, Step, TensorSpec};
