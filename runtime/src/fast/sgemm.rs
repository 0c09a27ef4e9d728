//! A packed, register-blocked `f32` GEMM in the BLIS style: `C = A @ B` for strided `A` and
//! `B` and a row-major `C`.
//!
//! `B` is packed into panels of [`Arch::nr`] columns and `A` into panels of [`Arch::mr`] rows,
//! [`kc_for`]`(k)` elements of `k` deep, and a micro-kernel keeps an `mr x nr` tile of `C` in registers
//! while it walks `k` (AVX-512: 12 x 32 with 24 accumulators; AVX2/FMA: 6 x 16; other CPUs: a
//! portable 4 x 8). Every element of `C` is the same sequence of fused multiply-adds for any
//! tiling and thread count (`k` is never split between threads, and the panel depth depends on
//! `k` alone), so
//! results are bitwise the same on 1 or 64 threads.
//!
//! Work is cut two ways. A few large products share each packed panel of `B` between all
//! threads, which then compute row blocks of `C` against it; many small products (the heads
//! of an attention) run one per task, each packing privately. After the last panel of `k`, a
//! tile of `C` is handed to the caller's `finish` callback while it is still in cache (bias,
//! fused epilogue).

use super::memory::{line_zeros, try_aligned, KernelError, LineVec};
use rayon::prelude::*;
use std::cell::RefCell;
use std::ops::Range;

/// Deepest packed panel (elements of `k`) of a deep product.
pub const KC: usize = 512;

/// The panel depth for a product over `k`: all of `k` up to 384 (one panel, so a shallow
/// product such as a 3x3 convolution over 32 channels, `k = 288`, has no short tail panel),
/// else [`KC`] (then a tail). Panels of 512 rather than 256 halve how often each tile of `C`
/// is reloaded and stored: the linear layers of the MLP and encoder benchmarks ran 5-7% faster
/// on one thread (256, 384, 512, 768 and 1024 measured). Splitting `k` evenly instead (576 as
/// 2 x 288) moved the torchvision resnet18 training test's `conv1.weight` gradient to 2e-2
/// from float64 (eager's own distance; 1e-5 otherwise) and is not used. A function of `k`
/// alone, so results do not depend on tiling or threads.
pub fn kc_for(k: usize) -> usize {
    if k <= 384 {
        k.max(1)
    } else {
        KC
    }
}

/// Largest width of a shared packed panel of `B` (columns): `KC * NC * 4` bytes stay in L3.
const NC: usize = 4096;

/// A strided matrix inside a buffer. Row `r` starts at `ptr + (r / group) * group_stride + (r
/// % group) * rs`: rows may come in groups (a batch of matrices that share the other operand,
/// or a view whose rows are two dimensions), and element `(r, c)` is `cs` further per column.
#[derive(Clone, Copy, Debug)]
pub struct Mat {
    /// Element `(0, 0)`.
    pub ptr: *const f32,
    /// Distance between consecutive rows of a group.
    pub rs: isize,
    /// Distance between consecutive columns.
    pub cs: isize,
    /// Rows per group (`usize::MAX`: one group).
    pub group: usize,
    /// Distance between consecutive groups.
    pub group_stride: isize,
}

// SAFETY: a `Mat` is a read-only view; the callers of `gemm` guarantee the memory outlives the
// call and is not written during it.
unsafe impl Send for Mat {}
unsafe impl Sync for Mat {}

impl Mat {
    /// A plain strided matrix.
    pub fn new(ptr: *const f32, rs: isize, cs: isize) -> Mat {
        Mat {
            ptr,
            rs,
            cs,
            group: usize::MAX,
            group_stride: 0,
        }
    }

    #[inline(always)]
    fn row(&self, r: usize) -> *const f32 {
        let (g, i) = if self.group == usize::MAX {
            (0, r)
        } else {
            (r / self.group, r % self.group)
        };
        self.ptr
            .wrapping_offset(g as isize * self.group_stride + i as isize * self.rs)
    }
}

/// One product `C[m x n] = A[m x k] @ B[k x n]`, `C` row-major with row stride `ldc`.
#[derive(Clone, Copy, Debug)]
pub struct Problem {
    /// Rows of `A` and `C`.
    pub m: usize,
    /// Columns of `B` and `C`.
    pub n: usize,
    /// Columns of `A`, rows of `B`.
    pub k: usize,
    /// The left operand.
    pub a: Mat,
    /// The right operand.
    pub b: Mat,
    /// Element `(0, 0)` of `C`.
    pub c: *mut f32,
    /// Row stride of `C`.
    pub ldc: usize,
    /// `B` already packed by [`PackedB`] for this CPU (then `b` is not read), or null.
    pub packed_b: *const f32,
    /// `A` already packed by [`PackedA`] for this CPU and `m` (then `a` is not read), or null.
    pub packed_a: *const f32,
    /// Applied to each tile of `C` right after its last panel of `k`, while it is in L1.
    pub post: ColPost,
}

/// What a product applies to each element of `C` after its last panel of `k`, in this order:
/// `x * alpha`, then `+ beta * bias[j]` (a bias per column `j`), then `max(x, 0)` (NaN
/// propagating) — the same operations, in the same order, as applying them to the finished
/// product, so the results are the same bits.
#[derive(Clone, Copy, Debug)]
pub struct ColPost {
    /// Scale of the product (1: none).
    pub alpha: f32,
    /// Element `j` is column `j`'s bias (null: none).
    pub bias: *const f32,
    /// Scale of the bias.
    pub beta: f32,
    /// Whether a ReLU follows.
    pub relu: bool,
}

impl ColPost {
    /// Nothing to apply.
    pub const NONE: ColPost = ColPost {
        alpha: 1.0,
        bias: std::ptr::null(),
        beta: 1.0,
        relu: false,
    };

    /// Whether there is nothing to apply.
    pub fn is_none(&self) -> bool {
        self.alpha == 1.0 && self.bias.is_null() && !self.relu
    }
}

/// Applies `post` to rows `0..rows`, columns `0..cols` of the tile at `c` (row stride `ldc`),
/// whose first column is column `j0` of the product: for the micro-kernels that do not apply
/// it themselves (see [`Arch::post_in_kernel`]).
///
/// # Safety
/// The tile must be writable; a bias must hold `j0 + cols` elements.
unsafe fn apply_post(c: *mut f32, ldc: usize, rows: usize, cols: usize, post: &ColPost, j0: usize) {
    let bias = |j: usize| {
        let s = *post.bias.add(j0 + j);
        if post.beta == 1.0 {
            s
        } else {
            post.beta * s
        }
    };
    for i in 0..rows {
        let row = std::slice::from_raw_parts_mut(c.add(i * ldc), cols);
        for (j, v) in row.iter_mut().enumerate() {
            if post.alpha != 1.0 {
                *v *= post.alpha;
            }
            if !post.bias.is_null() {
                *v += bias(j);
            }
            if post.relu {
                *v = super::math::max_nan(*v, 0.0);
            }
        }
    }
}

impl Problem {
    /// A product of strided operands (nothing pre-packed).
    pub fn new(m: usize, n: usize, k: usize, a: Mat, b: Mat, c: *mut f32, ldc: usize) -> Problem {
        Problem {
            m,
            n,
            k,
            a,
            b,
            c,
            ldc,
            packed_b: std::ptr::null(),
            packed_a: std::ptr::null(),
            post: ColPost::NONE,
        }
    }
}

/// A right operand packed once for all the products that read it (a constant weight), in the
/// layout the micro-kernel reads: for each block of [`kc_for`]`(k)` rows, in order, panels of
/// [`Arch::nr`] columns (the last zero-padded), each `kc x nr` row-major.
pub struct PackedB {
    data: LineVec<f32>,
    /// Rows (`k`).
    pub k: usize,
    /// Columns (`n`).
    pub n: usize,
}

impl PackedB {
    /// Packs the `k x n` matrix `b`.
    ///
    /// # Safety
    /// Every element of `b` must be readable.
    pub unsafe fn new(b: &Mat, k: usize, n: usize) -> PackedB {
        let mut data = line_zeros(Self::len_for(k, n));
        Self::pack_into(b, k, n, &mut data);
        PackedB { data, k, n }
    }

    /// Packs the `k x n` matrix `b` into `dst` ([`PackedB::len_for`]`(k, n)` elements), in
    /// the same layout as [`PackedB::new`], for a caller that reuses its buffer.
    ///
    /// # Safety
    /// Every element of `b` must be readable.
    pub unsafe fn pack_into(b: &Mat, k: usize, n: usize, dst: &mut [f32]) {
        let nr = arch().nr;
        let np = n.next_multiple_of(nr);
        let kb = kc_for(k);
        for p0 in (0..k).step_by(kb) {
            let kc = kb.min(k - p0);
            pack_b(b, p0, kc, 0, n, nr, &mut dst[p0 * np..(p0 + kc) * np]);
        }
    }

    /// Elements of the packed layout of a `k x n` matrix for this CPU's micro-kernel.
    pub fn len_for(k: usize, n: usize) -> usize {
        k * n.next_multiple_of(arch().nr)
    }

    /// The index of element `(l, j)` of a `k x n` matrix in the packed layout, and how many
    /// elements from there on are contiguous in the same row (up to the panel's end).
    #[inline(always)]
    pub fn index(k: usize, n: usize, l: usize, j: usize) -> (usize, usize) {
        let nr = arch().nr;
        let np = n.next_multiple_of(nr);
        let kb = kc_for(k);
        let (b0, lb) = (l - l % kb, l % kb);
        let kcb = kb.min(k - b0);
        let (q, off) = (j / nr, j % nr);
        (b0 * np + q * nr * kcb + lb * nr + off, nr - off)
    }

    /// The packed values.
    pub fn as_ptr(&self) -> *const f32 {
        self.data.as_ptr()
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.data.len() * 4
    }
}

/// A left operand packed once for all the products that read it (a convolution's weights), in
/// the layout the micro-kernel reads: for each block of [`kc_for`]`(k)` columns, in order,
/// panels of the micro-kernel's rows for this `m` ([`arch_for`]), the last zero-padded.
pub struct PackedA {
    data: LineVec<f32>,
    /// Rows (`m`).
    pub m: usize,
    /// Columns (`k`).
    pub k: usize,
}

impl PackedA {
    /// Packs the `m x k` matrix `a`.
    ///
    /// # Safety
    /// Every element of `a` must be readable.
    pub unsafe fn new(a: &Mat, m: usize, k: usize) -> PackedA {
        let mut data = line_zeros(Self::len_for(m, k));
        Self::pack_into(a, m, k, &mut data);
        PackedA { data, m, k }
    }

    /// Elements of the packed layout of an `m x k` matrix for this CPU's micro-kernel.
    pub fn len_for(m: usize, k: usize) -> usize {
        k * m.next_multiple_of(arch_for(m).mr)
    }

    /// Packs the `m x k` matrix `a` into `dst` ([`PackedA::len_for`]`(m, k)` elements), in
    /// the same layout as [`PackedA::new`], for a caller that reuses its buffer.
    ///
    /// # Safety
    /// Every element of `a` must be readable.
    pub unsafe fn pack_into(a: &Mat, m: usize, k: usize, dst: &mut [f32]) {
        let mr = arch_for(m).mr;
        let mp = m.next_multiple_of(mr);
        let kb = kc_for(k);
        for p0 in (0..k).step_by(kb) {
            let kc = kb.min(k - p0);
            pack_a(a, 0, m, p0, kc, mr, &mut dst[p0 * mp..(p0 + kc) * mp]);
        }
    }

    /// The packed values.
    pub fn as_ptr(&self) -> *const f32 {
        self.data.as_ptr()
    }
}

/// The packed block of rows `r0..r0+mc` (`r0` a multiple of `mr`), columns `p0..p0+kc` of
/// `p`'s `A`: a window of its pre-packed `A`, else packed now into `buf`.
#[allow(clippy::too_many_arguments)]
unsafe fn a_block<'s>(
    p: &Problem,
    buf: &'s mut LineVec<f32>,
    r0: usize,
    mc: usize,
    p0: usize,
    kc: usize,
    mr: usize,
) -> Result<&'s [f32], KernelError> {
    let len = mc.div_ceil(mr) * mr * kc;
    if !p.packed_a.is_null() {
        let mp = p.m.next_multiple_of(mr);
        return Ok(std::slice::from_raw_parts(
            p.packed_a.add(p0 * mp + r0 * kc),
            len,
        ));
    }
    let pa = try_aligned(buf, len)?;
    pack_a(&p.a, r0, mc, p0, kc, mr, pa);
    Ok(pa)
}

// SAFETY: the callers of `gemm` guarantee that the problems' `C` regions are disjoint and that
// nothing else touches them during the call.
unsafe impl Send for Problem {}
unsafe impl Sync for Problem {}

/// A micro-kernel: `C[mr x nr] (+)= Apanel @ Bpanel` over `kc`, storing only the first `m`
/// rows and `n` columns. `pf` is `(p, lines)`: cache lines from `p` that a later call reads,
/// which the kernel may ask into L2 along the way (a hint; never read). `post` is
/// `(post, j0)`: a [`ColPost`] for the tile, whose first column is column `j0` of the product;
/// kernels with [`Arch::post_in_kernel`] apply it in registers before storing (the same
/// operations as [`apply_post`], so the same bits), the others ignore it.
type MicroKernel = unsafe fn(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
    m: usize,
    n: usize,
    pf: (*const f32, usize),
    post: Option<(&ColPost, usize)>,
);

/// The micro-kernel in use and its tile.
#[derive(Clone, Copy)]
pub struct Arch {
    /// Rows of the register tile.
    pub mr: usize,
    /// Columns of the register tile.
    pub nr: usize,
    kernel: MicroKernel,
    /// Whether `kernel` applies the [`ColPost`] it is given.
    post_in_kernel: bool,
    /// A short name (`avx512`, `avx2`, `portable`).
    pub name: &'static str,
}

/// The best micro-kernel this CPU runs (detected once).
pub fn arch() -> Arch {
    static ARCH: std::sync::OnceLock<Arch> = std::sync::OnceLock::new();
    *ARCH.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            // `FXHLO_NO_AVX512` forces the AVX2 kernels here as in the other loops.
            if std::is_x86_feature_detected!("avx512f")
                && std::is_x86_feature_detected!("fma")
                && std::env::var_os("FXHLO_NO_AVX512").is_none()
            {
                return Arch {
                    mr: 12,
                    nr: 32,
                    kernel: x86::kernel_12x32,
                    post_in_kernel: true,
                    name: "avx512",
                };
            }
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                return Arch {
                    mr: 6,
                    nr: 16,
                    kernel: x86::kernel_6x16,
                    post_in_kernel: false,
                    name: "avx2",
                };
            }
        }
        Arch {
            mr: 4,
            nr: 8,
            kernel: kernel_portable,
            post_in_kernel: false,
            name: "portable",
        }
    })
}

/// The micro-kernel for a product of `m` rows: on AVX-512, 4 x 32 for at most four rows (the
/// few output positions of a late convolution layer, run transposed: 8-row tiles computed
/// twice the work), 8 x 32 where it pads `m` less than 12 x 32 (e.g. 32 or 64 output channels
/// of a convolution). Every kernel computes each element of `C` with the same sequence of
/// operations, so the choice never changes results.
pub fn arch_for(m: usize) -> Arch {
    let a = arch();
    #[cfg(target_arch = "x86_64")]
    if a.name == "avx512" && m <= 4 {
        return Arch {
            mr: 4,
            nr: 32,
            kernel: x86::kernel_4x32,
            post_in_kernel: true,
            name: "avx512",
        };
    }
    #[cfg(target_arch = "x86_64")]
    if a.name == "avx512" && m.next_multiple_of(8) < m.next_multiple_of(12) {
        return Arch {
            mr: 8,
            nr: 32,
            kernel: x86::kernel_8x32,
            post_in_kernel: true,
            name: "avx512",
        };
    }
    // AVX2: 4 x 16 where 6-row tiles would pad more than a sixteenth of the rows (m = 32:
    // 36 rows computed) and 4-row ones pad fewer.
    #[cfg(target_arch = "x86_64")]
    if a.name == "avx2"
        && m.next_multiple_of(4) < m.next_multiple_of(6)
        && (m.next_multiple_of(6) - m) * 16 > m
    {
        return Arch {
            mr: 4,
            nr: 16,
            kernel: x86::kernel_4x16,
            post_in_kernel: false,
            name: "avx2",
        };
    }
    let _ = m;
    a
}

/// The portable 4 x 8 micro-kernel (`mul_add`, so its sums equal the SIMD kernels').
#[allow(clippy::too_many_arguments)] // the micro-kernel signature (see `MicroKernel`)
unsafe fn kernel_portable(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
    m: usize,
    n: usize,
    _pf: (*const f32, usize),
    _post: Option<(&ColPost, usize)>,
) {
    const MR: usize = 4;
    const NR: usize = 8;
    let mut acc = [[0f32; NR]; MR];
    for l in 0..kc {
        for (i, row) in acc.iter_mut().enumerate() {
            let x = *a.add(l * MR + i);
            for (j, v) in row.iter_mut().enumerate() {
                *v = x.mul_add(*b.add(l * NR + j), *v);
            }
        }
    }
    for (i, row) in acc.iter().enumerate().take(m) {
        for (j, &v) in row.iter().enumerate().take(n) {
            let p = c.add(i * ldc + j);
            *p = if accumulate { *p + v } else { v };
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{ColPost, Post};
    use std::arch::x86_64::*;

    /// An AVX-512 micro-kernel of `$mr` rows x 32 columns: `2 * $mr` `zmm` accumulators, two
    /// vector loads of `B` and `$mr` broadcasts of `A` per step of `k`.
    macro_rules! avx512_kernel {
        ($name:ident, $mr:literal, $($i:literal)*) => {
            #[target_feature(enable = "avx512f,avx2,fma")]
            #[allow(clippy::too_many_arguments)] // the micro-kernel signature (see `MicroKernel`)
            pub(super) unsafe fn $name(
                kc: usize,
                a: *const f32,
                b: *const f32,
                c: *mut f32,
                ldc: usize,
                accumulate: bool,
                m: usize,
                n: usize,
                pf: (*const f32, usize),
                post: Option<(&ColPost, usize)>,
            ) {
                let mut acc = [_mm512_setzero_ps(); 2 * $mr];
                let (mut ap, mut bp) = (a, b);
                // One step of `k`.
                macro_rules! step {
                    () => {{
                        _mm_prefetch::<_MM_HINT_T0>(bp.wrapping_add(PF) as *const i8);
                        _mm_prefetch::<_MM_HINT_T0>(bp.wrapping_add(PF + 16) as *const i8);
                        let b0 = _mm512_loadu_ps(bp);
                        let b1 = _mm512_loadu_ps(bp.add(16));
                        $(
                            let x = _mm512_set1_ps(*ap.add($i));
                            acc[2 * $i] = _mm512_fmadd_ps(x, b0, acc[2 * $i]);
                            acc[2 * $i + 1] = _mm512_fmadd_ps(x, b1, acc[2 * $i + 1]);
                        )*
                        ap = ap.add($mr);
                        bp = bp.add(32);
                    }};
                }
                // The `pf.1` cache lines at `pf.0` (data of a later call) are asked into L2
                // one at a time, spread evenly over the steps, so that only a few are in
                // flight at once. (Unrolling the steps by four was measured too: the MLP
                // workload gained nothing and the encoder lost 1-2%.)
                let lines = pf.1.min(kc);
                let stride = if lines > 0 { kc / lines } else { 0 };
                for j in 0..lines {
                    _mm_prefetch::<_MM_HINT_T1>(pf.0.wrapping_add(16 * j) as *const i8);
                    for _ in 0..stride {
                        step!();
                    }
                }
                for _ in lines * stride..kc {
                    step!();
                }
                let mask = |w: usize| -> __mmask16 {
                    if w >= 16 {
                        0xffff
                    } else {
                        ((1u32 << w) - 1) as __mmask16
                    }
                };
                let (k0, k1) = (mask(n), mask(n.saturating_sub(16)));
                let post = post.map(|(p, j0)| TilePost::new(p, j0, k0, k1));
                // Rows are stored by constant index (`$i`), never by a loop over `acc`: an
                // accumulator indexed at run time keeps `acc` in memory, and the 12-row
                // kernel then stored all 24 accumulators to the stack on every step of `k`
                // (45% slower).
                if m == $mr && n == 32 {
                    $({
                        let p = c.add($i * ldc);
                        let (mut v0, mut v1) = (acc[2 * $i], acc[2 * $i + 1]);
                        if accumulate {
                            v0 = _mm512_add_ps(_mm512_loadu_ps(p), v0);
                            v1 = _mm512_add_ps(_mm512_loadu_ps(p.add(16)), v1);
                        }
                        if let Some(t) = &post {
                            (v0, v1) = t.apply(v0, v1);
                        }
                        _mm512_storeu_ps(p, v0);
                        _mm512_storeu_ps(p.add(16), v1);
                    })*
                    return;
                }
                $(
                    if $i < m {
                        let p = c.add($i * ldc);
                        let (mut v0, mut v1) = (acc[2 * $i], acc[2 * $i + 1]);
                        if accumulate {
                            v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(k0, p), v0);
                            if k1 != 0 {
                                v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(k1, p.add(16)), v1);
                            }
                        }
                        if let Some(t) = &post {
                            (v0, v1) = t.apply(v0, v1);
                        }
                        _mm512_mask_storeu_ps(p, k0, v0);
                        if k1 != 0 {
                            _mm512_mask_storeu_ps(p.add(16), k1, v1);
                        }
                    }
                )*
            }
        };
    }

    const PF: usize = 32 * 16;
    avx512_kernel!(kernel_12x32, 12, 0 1 2 3 4 5 6 7 8 9 10 11);
    avx512_kernel!(kernel_8x32, 8, 0 1 2 3 4 5 6 7);
    avx512_kernel!(kernel_4x32, 4, 0 1 2 3);

    /// A [`ColPost`] ready for the 32 columns of one tile: the scale, and the scaled bias of
    /// each half (zero past the tile's columns), computed as [`super::apply_post`] does.
    struct TilePost {
        alpha: Option<__m512>,
        bias: Option<(__m512, __m512)>,
        relu: bool,
    }

    impl TilePost {
        #[inline(always)]
        unsafe fn new(p: &ColPost, j0: usize, k0: __mmask16, k1: __mmask16) -> TilePost {
            let bias = (!p.bias.is_null()).then(|| {
                let half = |k: __mmask16, off: usize| {
                    let s = _mm512_maskz_loadu_ps(k, p.bias.wrapping_add(j0 + off));
                    if p.beta == 1.0 {
                        s
                    } else {
                        _mm512_mul_ps(_mm512_set1_ps(p.beta), s)
                    }
                };
                (half(k0, 0), half(k1, 16))
            });
            TilePost {
                alpha: (p.alpha != 1.0).then(|| _mm512_set1_ps(p.alpha)),
                bias,
                relu: p.relu,
            }
        }

        /// `relu(x * alpha + bias)` of both halves of a row, each step only where asked.
        #[inline(always)]
        unsafe fn apply(&self, mut v0: __m512, mut v1: __m512) -> (__m512, __m512) {
            if let Some(a) = self.alpha {
                (v0, v1) = (_mm512_mul_ps(v0, a), _mm512_mul_ps(v1, a));
            }
            if let Some((b0, b1)) = self.bias {
                (v0, v1) = (_mm512_add_ps(v0, b0), _mm512_add_ps(v1, b1));
            }
            if self.relu {
                (v0, v1) = (relu16(v0), relu16(v1));
            }
            (v0, v1)
        }
    }

    /// An AVX-512 micro-kernel of `$mr` rows x 32 columns over an implicit `B`: row `l` is the
    /// 16 floats at `b0 + offs[l]` then the 16 at `b1 + offs[l]` (see `gemm_indirect`); only
    /// the first 16 columns are stored when `wide` is false.
    macro_rules! avx512_indirect {
        ($name:ident, $mr:literal, $($i:literal)*) => {
            #[target_feature(enable = "avx512f,avx2,fma")]
            #[allow(clippy::too_many_arguments)] // the micro-kernel signature, plus the offsets
            pub(super) unsafe fn $name(
                kc: usize,
                a: *const f32,
                (b0p, b1p): (*const f32, *const f32),
                offs: *const usize,
                c: *mut f32,
                ldc: usize,
                accumulate: bool,
                (m, wide): (usize, bool),
                post: Post,
            ) {
                let mut acc = [_mm512_setzero_ps(); 2 * $mr];
                let mut ap = a;
                for l in 0..kc {
                    let o = *offs.add(l);
                    let b0 = _mm512_loadu_ps(b0p.add(o));
                    let b1 = _mm512_loadu_ps(b1p.add(o));
                    $(
                        let x = _mm512_set1_ps(*ap.add($i));
                        acc[2 * $i] = _mm512_fmadd_ps(x, b0, acc[2 * $i]);
                        acc[2 * $i + 1] = _mm512_fmadd_ps(x, b1, acc[2 * $i + 1]);
                    )*
                    ap = ap.add($mr);
                }
                // Rows by constant index, as in `avx512_kernel!` (a loop kept `acc` in
                // memory: the 12-row kernel stored its accumulators at every step of `k`).
                $(
                    if $i < m {
                        let p = c.add($i * ldc);
                        let (mut v0, mut v1) = (acc[2 * $i], acc[2 * $i + 1]);
                        if accumulate {
                            v0 = _mm512_add_ps(_mm512_loadu_ps(p), v0);
                            if wide {
                                v1 = _mm512_add_ps(_mm512_loadu_ps(p.add(16)), v1);
                            }
                        }
                        if !post.bias.is_null() {
                            let b = _mm512_set1_ps(*post.bias.add($i));
                            (v0, v1) = (_mm512_add_ps(v0, b), _mm512_add_ps(v1, b));
                        }
                        if post.relu {
                            (v0, v1) = (relu16(v0), relu16(v1));
                        }
                        _mm512_storeu_ps(p, v0);
                        if wide {
                            _mm512_storeu_ps(p.add(16), v1);
                        }
                    }
                )*
            }
        };
    }

    /// `max(x, 0)` propagating NaN (as [`math::max_nan`](crate::fast::math::max_nan)).
    #[inline(always)]
    unsafe fn relu16(x: __m512) -> __m512 {
        let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x);
        _mm512_mask_mov_ps(_mm512_max_ps(x, _mm512_setzero_ps()), nan, x)
    }

    avx512_indirect!(kernel_12x32_indirect, 12, 0 1 2 3 4 5 6 7 8 9 10 11);
    avx512_indirect!(kernel_8x32_indirect, 8, 0 1 2 3 4 5 6 7);
    avx512_indirect!(kernel_4x32_indirect, 4, 0 1 2 3);

    /// Packs 16 columns of a column-contiguous `B` (column `j` is `kc` floats at `src + j *
    /// cs`) into `panel` at column offset `jbase` (row stride `nr`), through 16 x 16 register
    /// transposes.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn pack_cols16(
        src: *const f32,
        cs: isize,
        kc: usize,
        nr: usize,
        panel: *mut f32,
        jbase: usize,
    ) {
        let mut l0 = 0;
        while l0 + 16 <= kc {
            let mut r = [_mm512_setzero_ps(); 16];
            for (j, v) in r.iter_mut().enumerate() {
                *v = _mm512_loadu_ps(src.offset(j as isize * cs).add(l0));
            }
            let t = transpose16(r);
            for (ll, v) in t.iter().enumerate() {
                _mm512_storeu_ps(panel.add((l0 + ll) * nr + jbase), *v);
            }
            l0 += 16;
        }
        for l in l0..kc {
            for j in 0..16 {
                *panel.add(l * nr + jbase + j) = *src.offset(j as isize * cs).add(l);
            }
        }
    }

    /// Packs `rows <= 16` rows of a row-contiguous `A` (row `i` is `kc` floats at `src + i *
    /// rs`) into a panel of `mr` rows (`rows <= mr <= 16`; rows past `rows` are zero): for
    /// each `l`, the `mr` values of column `l`, through 16 x 16 register transposes.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn pack_rows16(
        src: *const f32,
        rs: isize,
        rows: usize,
        kc: usize,
        mr: usize,
        panel: *mut f32,
    ) {
        let lanes = ((1u32 << mr) - 1) as __mmask16;
        let mut l0 = 0;
        while l0 + 16 <= kc {
            let mut r = [_mm512_setzero_ps(); 16];
            for (i, v) in r.iter_mut().enumerate().take(rows) {
                *v = _mm512_loadu_ps(src.offset(i as isize * rs).add(l0));
            }
            let t = transpose16(r);
            for (ll, v) in t.iter().enumerate() {
                _mm512_mask_storeu_ps(panel.add((l0 + ll) * mr), lanes, *v);
            }
            l0 += 16;
        }
        for l in l0..kc {
            for i in 0..mr {
                *panel.add(l * mr + i) = if i < rows {
                    *src.offset(i as isize * rs).add(l)
                } else {
                    0.0
                };
            }
        }
    }

    /// Packs `rows <= 16` rows of a column-contiguous `A` (column `l` is the `rows` floats
    /// from `src.offset(l * cs)` on) into a panel of `mr` rows (`rows <= mr <= 16`; rows past
    /// `rows` are zero): one masked load and store per column, where a copy and a fill of a
    /// few values each were two calls into the C library (a third of a 3x3 convolution's time
    /// over a 2x2 output, whose transposed product reads its im2col matrix this way).
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn pack_a_cols(
        src: *const f32,
        cs: isize,
        rows: usize,
        kc: usize,
        mr: usize,
        panel: *mut f32,
    ) {
        let (have, lanes) = (
            ((1u32 << rows) - 1) as __mmask16,
            ((1u32 << mr) - 1) as __mmask16,
        );
        for l in 0..kc {
            // Lanes past `rows` are neither read nor written as anything but zero.
            let v = _mm512_maskz_loadu_ps(have, src.offset(l as isize * cs));
            _mm512_mask_storeu_ps(panel.add(l * mr), lanes, v);
        }
    }

    /// The transpose of a 16 x 16 block held as 16 rows.
    #[inline(always)]
    unsafe fn transpose16(r: [__m512; 16]) -> [__m512; 16] {
        let mut t = [_mm512_setzero_ps(); 16];
        for i in 0..8 {
            t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
            t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
        }
        let mut u = [_mm512_setzero_ps(); 16];
        for i in 0..4 {
            let b = 4 * i;
            u[b] = _mm512_shuffle_ps::<0x44>(t[b], t[b + 2]);
            u[b + 1] = _mm512_shuffle_ps::<0xEE>(t[b], t[b + 2]);
            u[b + 2] = _mm512_shuffle_ps::<0x44>(t[b + 1], t[b + 3]);
            u[b + 3] = _mm512_shuffle_ps::<0xEE>(t[b + 1], t[b + 3]);
        }
        for h in 0..2 {
            let b = 8 * h;
            for i in 0..4 {
                t[b + i] = _mm512_shuffle_f32x4::<0x88>(u[b + i], u[b + 4 + i]);
                t[b + 4 + i] = _mm512_shuffle_f32x4::<0xDD>(u[b + i], u[b + 4 + i]);
            }
        }
        for i in 0..8 {
            u[i] = _mm512_shuffle_f32x4::<0x88>(t[i], t[8 + i]);
            u[8 + i] = _mm512_shuffle_f32x4::<0xDD>(t[i], t[8 + i]);
        }
        u
    }

    /// An `MR x 16` AVX2+FMA micro-kernel (`2 MR` `ymm` accumulators) and its variant with an
    /// implicit `B`, whose row `l` is the 16 floats at `b + offs[l]` (see `gemm_indirect`).
    macro_rules! avx2_kernel {
        ($name:ident, $indirect:ident, $mr:literal, $($i:literal)*) => {
            #[target_feature(enable = "avx2,fma")]
            #[allow(clippy::too_many_arguments)] // the micro-kernel signature (see `MicroKernel`)
            pub(super) unsafe fn $name(
                kc: usize,
                a: *const f32,
                b: *const f32,
                c: *mut f32,
                ldc: usize,
                accumulate: bool,
                m: usize,
                n: usize,
                _pf: (*const f32, usize),
                _post: Option<(&ColPost, usize)>,
            ) {
                let mut acc = [_mm256_setzero_ps(); 2 * $mr];
                let (mut ap, mut bp) = (a, b);
                for _ in 0..kc {
                    let b0 = _mm256_loadu_ps(bp);
                    let b1 = _mm256_loadu_ps(bp.add(8));
                    $(
                        let x = _mm256_set1_ps(*ap.add($i));
                        acc[2 * $i] = _mm256_fmadd_ps(x, b0, acc[2 * $i]);
                        acc[2 * $i + 1] = _mm256_fmadd_ps(x, b1, acc[2 * $i + 1]);
                    )*
                    ap = ap.add($mr);
                    bp = bp.add(16);
                }
                store_x16(&acc, c, ldc, accumulate, m, n);
            }

            #[target_feature(enable = "avx2,fma")]
            #[allow(clippy::too_many_arguments)] // the micro-kernel signature, plus the offsets
            pub(super) unsafe fn $indirect(
                kc: usize,
                a: *const f32,
                b: *const f32,
                offs: *const usize,
                c: *mut f32,
                ldc: usize,
                accumulate: bool,
                m: usize,
                post: Post,
            ) {
                let mut acc = [_mm256_setzero_ps(); 2 * $mr];
                let mut ap = a;
                for l in 0..kc {
                    let bp = b.add(*offs.add(l));
                    let b0 = _mm256_loadu_ps(bp);
                    let b1 = _mm256_loadu_ps(bp.add(8));
                    $(
                        let x = _mm256_set1_ps(*ap.add($i));
                        acc[2 * $i] = _mm256_fmadd_ps(x, b0, acc[2 * $i]);
                        acc[2 * $i + 1] = _mm256_fmadd_ps(x, b1, acc[2 * $i + 1]);
                    )*
                    ap = ap.add($mr);
                }
                if post.is_none() {
                    store_x16(&acc, c, ldc, accumulate, m, 16);
                    return;
                }
                for i in 0..m.min($mr) {
                    let p = c.add(i * ldc);
                    let (mut v0, mut v1) = (acc[2 * i], acc[2 * i + 1]);
                    if accumulate {
                        v0 = _mm256_add_ps(_mm256_loadu_ps(p), v0);
                        v1 = _mm256_add_ps(_mm256_loadu_ps(p.add(8)), v1);
                    }
                    if !post.bias.is_null() {
                        let b = _mm256_set1_ps(*post.bias.add(i));
                        (v0, v1) = (_mm256_add_ps(v0, b), _mm256_add_ps(v1, b));
                    }
                    if post.relu {
                        (v0, v1) = (relu8(v0), relu8(v1));
                    }
                    _mm256_storeu_ps(p, v0);
                    _mm256_storeu_ps(p.add(8), v1);
                }
            }
        };
    }

    /// `max(x, 0)` propagating NaN (as [`math::max_nan`](crate::fast::math::max_nan)).
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn relu8(x: __m256) -> __m256 {
        let nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x);
        _mm256_blendv_ps(_mm256_max_ps(x, _mm256_setzero_ps()), x, nan)
    }

    avx2_kernel!(kernel_6x16, kernel_6x16_indirect, 6, 0 1 2 3 4 5);
    avx2_kernel!(kernel_4x16, kernel_4x16_indirect, 4, 0 1 2 3);

    /// Stores (or adds) the first `m` rows and `n` columns of an accumulator tile of 16-column
    /// rows (two `ymm` per row).
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn store_x16(
        acc: &[__m256],
        c: *mut f32,
        ldc: usize,
        accumulate: bool,
        m: usize,
        n: usize,
    ) {
        let rows = m.min(acc.len() / 2);
        if n == 16 {
            for i in 0..rows {
                let p = c.add(i * ldc);
                let (mut v0, mut v1) = (acc[2 * i], acc[2 * i + 1]);
                if accumulate {
                    v0 = _mm256_add_ps(_mm256_loadu_ps(p), v0);
                    v1 = _mm256_add_ps(_mm256_loadu_ps(p.add(8)), v1);
                }
                _mm256_storeu_ps(p, v0);
                _mm256_storeu_ps(p.add(8), v1);
            }
            return;
        }
        let mut tile = [0f32; 16];
        for i in 0..rows {
            _mm256_storeu_ps(tile.as_mut_ptr(), acc[2 * i]);
            _mm256_storeu_ps(tile.as_mut_ptr().add(8), acc[2 * i + 1]);
            let p = c.add(i * ldc);
            for (j, &v) in tile.iter().enumerate().take(n) {
                *p.add(j) = if accumulate { *p.add(j) + v } else { v };
            }
        }
    }
}

/// Whether this CPU has the kernels of [`gemm_indirect`] (AVX-512 or AVX2).
pub fn has_indirect() -> bool {
    matches!(arch().name, "avx512" | "avx2")
}

/// An implicit product on AVX-512 and AVX2 CPUs: `C = A @ B`, `A` packed as [`PackedA`]
/// (`m x k`) and `B` (`k x 16 * bases.len()`) never materialized: its element `(l, 16 jb + j)`
/// is `*(bases[jb] + offs[l] + j)`. A stride-1 convolution reads its taps this way straight
/// from a zero-padded input (no im2col copy). `k` is split in blocks of [`kc_for`] as the packed `A` is, so the sums are
/// the same as those of [`gemm`] on the materialized `B`. Returns `false` (nothing done)
/// when this CPU has no such kernel.
///
/// `post` is applied to `C` as it is stored after the last panel of `k`: a bias per row of
/// `C`, then a ReLU. `between(jg, qi)` is called before each micro-tile, that of the columns
/// of bases `jg * g .. (jg + 1) * g` (`g` = 2 with AVX-512, else 1) and rows `qi * mr ..`
/// (`mr` = [`arch_for`]`(m).mr`), the tiles of a group of bases in turn (a caller prefetches
/// what its next steps read or write there, a little at a time).
///
/// # Safety
/// `a` must be packed for `m x k`; every `bases[jb] + offs[l] + 0..16` readable; `C` (`m`
/// rows of `16 * bases.len()` at row stride `ldc`) writable and disjoint from the rest; a
/// `post` bias readable for `m` rows.
pub unsafe fn gemm_indirect(
    a: &PackedA,
    bases: &[*const f32],
    offs: &[usize],
    c: *mut f32,
    ldc: usize,
    post: Post,
    between: &mut dyn FnMut(usize, usize),
) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let arch = arch_for(a.m);
        if offs.len() != a.k || !has_indirect() {
            return false;
        }
        let (m, k, mr) = (a.m, a.k, arch.mr);
        // The kernels, picked once: AVX-512 tiles read two 16-position bases, AVX2 ones one.
        let k512 = (arch.name == "avx512").then_some(match mr {
            4 => x86::kernel_4x32_indirect,
            8 => x86::kernel_8x32_indirect,
            _ => x86::kernel_12x32_indirect,
        });
        let k256 = if mr == 4 {
            x86::kernel_4x16_indirect
        } else {
            x86::kernel_6x16_indirect
        };
        // One micro-tile of `rows` rows over a group of bases (a last group may be narrower).
        let tile = |kc: usize,
                    ap: *const f32,
                    group: &[*const f32],
                    o: *const usize,
                    cp: *mut f32,
                    acc: bool,
                    rows: usize,
                    post: Post| match k512 {
            Some(kernel) => kernel(
                kc,
                ap,
                (group[0], group[group.len() - 1]),
                o,
                cp,
                ldc,
                acc,
                (rows, group.len() == 2),
                post,
            ),
            None => k256(kc, ap, group[0], o, cp, ldc, acc, rows, post),
        };
        let per = arch.nr / 16;
        let mp = m.next_multiple_of(mr);
        let kb = kc_for(k);
        for p0 in (0..k).step_by(kb) {
            let kc = kb.min(k - p0);
            let blk = a.as_ptr().add(p0 * mp);
            let last = p0 + kc == k;
            for (jg, group) in bases.chunks(per).enumerate() {
                for qi in 0..m.div_ceil(mr) {
                    between(jg, qi);
                    let post = match last {
                        true => post.rows_from(qi * mr),
                        false => Post::NONE,
                    };
                    tile(
                        kc,
                        blk.add(qi * mr * kc),
                        group,
                        offs.as_ptr().add(p0),
                        c.add(qi * mr * ldc + jg * per * 16),
                        p0 > 0,
                        mr.min(m - qi * mr),
                        post,
                    );
                }
            }
        }
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (a, bases, offs, c, ldc, post, between);
        false
    }
}

/// What a product applies to `C` as it stores the last panel (see [`gemm_indirect`]): a bias
/// per row, then a ReLU.
#[derive(Clone, Copy, Debug)]
pub struct Post {
    /// The bias of row 0 (null: none); row `i`'s is `bias + i`.
    pub bias: *const f32,
    /// Whether `max(x, 0)` (NaN propagating) follows.
    pub relu: bool,
}

impl Post {
    /// Nothing to apply.
    pub const NONE: Post = Post {
        bias: std::ptr::null(),
        relu: false,
    };

    /// Whether there is nothing to apply.
    pub fn is_none(&self) -> bool {
        self.bias.is_null() && !self.relu
    }

    /// The same for the rows from `r` on.
    ///
    /// # Safety
    /// The bias, if any, must hold more than `r` rows.
    unsafe fn rows_from(self, r: usize) -> Post {
        Post {
            bias: if self.bias.is_null() {
                self.bias
            } else {
                self.bias.add(r)
            },
            relu: self.relu,
        }
    }
}

/// Per-thread packing buffers, reused across calls.
struct Scratch {
    a: LineVec<f32>,
    b: LineVec<f32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch { a: LineVec::new(64), b: LineVec::new(64) });
}

/// Packs rows `r0..r0+mc`, columns `p0..p0+kc` of `a` into panels of `mr` rows: panel `q`
/// holds, for each `l`, the `mr` values of column `p0 + l` (rows past `mc` are zero).
unsafe fn pack_a(a: &Mat, r0: usize, mc: usize, p0: usize, kc: usize, mr: usize, dst: &mut [f32]) {
    for (q, panel) in dst.chunks_mut(mr * kc).enumerate().take(mc.div_ceil(mr)) {
        let rows = mr.min(mc - q * mr);
        // Rows of one group are `rs` apart: a panel inside one group goes through transposes.
        let r = r0 + q * mr;
        // The next panel's rows, which may lie far apart (the heads of a packed projection),
        // are fetched while this one is packed.
        if a.cs == 1 && r + mr < r0 + mc {
            for i in r + mr..(r + 2 * mr).min(r0 + mc) {
                super::simd::prefetch(a.row(i).wrapping_add(p0), kc);
            }
        }
        // A transposed operand (columns contiguous): each step of `k` is `rows` contiguous
        // values.
        if a.rs == 1 && a.group == usize::MAX {
            let src = a.ptr.wrapping_add(r);
            #[cfg(target_arch = "x86_64")]
            if mr <= 16 && arch().name == "avx512" {
                let at = src.wrapping_offset(p0 as isize * a.cs);
                x86::pack_a_cols(at, a.cs, rows, kc, mr, panel.as_mut_ptr());
                continue;
            }
            for l in 0..kc {
                let col = src.wrapping_offset((p0 + l) as isize * a.cs);
                let d = &mut panel[l * mr..(l + 1) * mr];
                d[..rows].copy_from_slice(std::slice::from_raw_parts(col, rows));
                d[rows..].fill(0.0);
            }
            continue;
        }
        let one_group = a.group == usize::MAX || r / a.group == (r + rows - 1) / a.group;
        #[cfg(target_arch = "x86_64")]
        if a.cs == 1 && mr <= 16 && one_group && arch().name == "avx512" {
            x86::pack_rows16(a.row(r).add(p0), a.rs, rows, kc, mr, panel.as_mut_ptr());
            continue;
        }
        for i in 0..mr {
            if i >= rows {
                for l in 0..kc {
                    panel[l * mr + i] = 0.0;
                }
                continue;
            }
            let src = a.row(r0 + q * mr + i).wrapping_offset(p0 as isize * a.cs);
            if a.cs == 1 {
                let s = std::slice::from_raw_parts(src, kc);
                for (l, &v) in s.iter().enumerate() {
                    panel[l * mr + i] = v;
                }
            } else {
                for l in 0..kc {
                    panel[l * mr + i] = *src.offset(l as isize * a.cs);
                }
            }
        }
    }
}

/// Packs rows `p0..p0+kc`, columns `c0..c0+nc` of `b` into panels of `nr` columns: panel `q`
/// holds, for each `l`, the `nr` values of row `p0 + l` (columns past `nc` are zero).
unsafe fn pack_b(b: &Mat, p0: usize, kc: usize, c0: usize, nc: usize, nr: usize, dst: &mut [f32]) {
    for (q, panel) in dst.chunks_mut(nr * kc).enumerate().take(nc.div_ceil(nr)) {
        pack_b_panel(b, p0, kc, c0 + q * nr, nr.min(nc - q * nr), nr, panel);
    }
}

/// One panel of [`pack_b`]: columns `j0..j0+cols` (`cols <= nr`).
unsafe fn pack_b_panel(
    b: &Mat,
    p0: usize,
    kc: usize,
    j0: usize,
    cols: usize,
    nr: usize,
    panel: &mut [f32],
) {
    if b.cs == 1 {
        for l in 0..kc {
            // A row some steps ahead (rows of a head of a packed projection lie far apart).
            if l + 8 < kc {
                super::simd::prefetch(b.row(p0 + l + 8).wrapping_add(j0), cols);
            }
            let src = b.row(p0 + l).add(j0);
            let d = &mut panel[l * nr..(l + 1) * nr];
            d[..cols].copy_from_slice(std::slice::from_raw_parts(src, cols));
            d[cols..].fill(0.0);
        }
    } else if b.group == usize::MAX {
        // Column-major-like B (a transposed weight): read each column along `k`, 16 columns at
        // a time through register transposes where AVX-512 is there.
        let mut j_done = 0;
        #[cfg(target_arch = "x86_64")]
        if b.rs == 1 && arch().name == "avx512" {
            while j_done + 16 <= cols {
                // The next 16 columns (rows of a transposed operand, perhaps far apart).
                for j in j_done + 16..(j_done + 32).min(cols) {
                    let col = b
                        .ptr
                        .wrapping_offset(p0 as isize + (j0 + j) as isize * b.cs);
                    super::simd::prefetch(col, kc);
                }
                let src = b
                    .ptr
                    .wrapping_offset(p0 as isize + (j0 + j_done) as isize * b.cs);
                x86::pack_cols16(src, b.cs, kc, nr, panel.as_mut_ptr(), j_done);
                j_done += 16;
            }
        }
        for j in j_done..nr {
            if j >= cols {
                for l in 0..kc {
                    panel[l * nr + j] = 0.0;
                }
                continue;
            }
            let src = b
                .ptr
                .wrapping_offset(p0 as isize * b.rs + (j0 + j) as isize * b.cs);
            if b.rs == 1 {
                let s = std::slice::from_raw_parts(src, kc);
                for (l, &v) in s.iter().enumerate() {
                    panel[l * nr + j] = v;
                }
            } else {
                for l in 0..kc {
                    panel[l * nr + j] = *src.offset(l as isize * b.rs);
                }
            }
        }
    } else {
        for l in 0..kc {
            let src = b.row(p0 + l);
            for j in 0..nr {
                panel[l * nr + j] = if j < cols {
                    *src.offset((j0 + j) as isize * b.cs)
                } else {
                    0.0
                };
            }
        }
    }
}

/// Columns `c0..c0 + nc` of the panel of `k` rows `p0..p0 + kc` of `p`'s pre-packed `B`
/// (see [`PackedB`]), as packed for micro-panels of `nr` columns.
///
/// # Safety
/// `p.packed_b` must be `B` packed for `p.k x p.n`, and the ranges inside it.
unsafe fn prepacked_block<'a>(
    p: &Problem,
    nr: usize,
    (p0, kc): (usize, usize),
    (c0, nc): (usize, usize),
) -> &'a [f32] {
    let np = p.n.next_multiple_of(nr);
    std::slice::from_raw_parts(p.packed_b.add(p0 * np + c0 * kc), nc.div_ceil(nr) * nr * kc)
}

/// The micro-tiles of one block: `C[r0.., c0..]` (`mc x nc`) `(+)=` packed A (`mc` rows) @
/// packed B (`nc` columns), over the panel of `k` `p0..p0 + kc` (added to `C` after the
/// first; `p.post` applied after the last). `b_outer` swaps the loops: each micro-panel of B
/// (streamed once from memory) then meets every micro-panel of A (which stay in L2), while
/// the next one (from `next` after the last) is asked into L2; else each micro-panel of A
/// stays in L1 while the micro-panels of B stream from L2.
#[allow(clippy::too_many_arguments)]
unsafe fn block(
    arch: &Arch,
    p: &Problem,
    pa: &[f32],
    pb: &[f32],
    (r0, mc): (usize, usize),
    (c0, nc): (usize, usize),
    (p0, kc): (usize, usize),
    b_outer: bool,
    next: &[f32],
) {
    let (mr, nr) = (arch.mr, arch.nr);
    let (ta, tb) = (mc.div_ceil(mr), nc.div_ceil(nr));
    // Earlier panels of `k` were stored: add to them; after the last, the post-processing.
    let accumulate = p0 > 0;
    let post = p0 + kc == p.k && !p.post.is_none();
    let tile = |qi: usize, qj: usize, pf: (*const f32, usize)| {
        let c = p.c.add((r0 + qi * mr) * p.ldc + c0 + qj * nr);
        let (rows, cols) = (mr.min(mc - qi * mr), nr.min(nc - qj * nr));
        let j0 = c0 + qj * nr;
        (arch.kernel)(
            kc,
            pa.as_ptr().add(qi * mr * kc),
            pb.as_ptr().add(qj * nr * kc),
            c,
            p.ldc,
            accumulate,
            rows,
            cols,
            pf,
            post.then_some((&p.post, j0)),
        );
        if post && !arch.post_in_kernel {
            apply_post(c, p.ldc, rows, cols, &p.post, j0);
        }
    };
    if b_outer {
        for qj in 0..tb {
            // The next micro-panel of B (or the first of the next block), asked into L2
            // while this one meets every micro-panel of A: its first use would otherwise wait
            // on memory at the kernel's full rate.
            let upcoming: &[f32] = if qj + 1 < tb {
                &pb[(qj + 1) * nr * kc..((qj + 2) * nr * kc).min(pb.len())]
            } else {
                &next[..next.len().min(nr * kc)]
            };
            let lines = upcoming.len().div_ceil(16);
            let per = lines.div_ceil(ta);
            for qi in 0..ta {
                let from = (qi * per).min(lines);
                let count = per.min(lines - from);
                tile(qi, qj, (upcoming.as_ptr().wrapping_add(16 * from), count));
            }
        }
    } else {
        for qi in 0..ta {
            for qj in 0..tb {
                tile(qi, qj, (std::ptr::null(), 0));
            }
        }
    }
}

/// A finished tile of problem `index`: rows and columns of its `C`.
pub type Finish<'a> = dyn Fn(usize, Range<usize>, Range<usize>) + Sync + 'a;

/// [`try_gemm`] for callers that cannot report a failed allocation of packing buffers: the
/// process aborts then, as the allocator does.
///
/// # Safety
/// As for [`try_gemm`].
pub unsafe fn gemm(problems: &[Problem], finish: &Finish<'_>) {
    if let Err(e) = try_gemm(problems, finish) {
        abort_on(e)
    }
}

/// Ends the process for an allocation failure that its caller cannot report (see [`gemm`]).
fn abort_on(e: KernelError) -> ! {
    eprintln!("{e}");
    std::process::abort()
}

/// Computes every problem on the current rayon pool; after the last panel of `k` of each tile
/// of `C`, calls `finish(problem, rows, cols)` from the worker that computed it (a `k == 0`
/// product is zero-filled first). An allocation of packing buffers that fails is
/// [`KernelError::OutOfMemory`]; `C` is then partly written.
///
/// # Safety
/// Every `A` and `B` element of every problem must be readable, every `C` region (`m` rows of
/// `n` elements at row stride `ldc`) writable, the `C` regions disjoint from each other and from
/// every `A` and `B`, and nothing else may access them during the call.
pub unsafe fn try_gemm(problems: &[Problem], finish: &Finish<'_>) -> Result<(), KernelError> {
    let arch = arch_for(problems.first().map_or(0, |p| p.m));
    let threads = rayon::current_num_threads().max(1);
    let flops: f64 = problems
        .iter()
        .map(|p| 2.0 * p.m as f64 * p.n as f64 * p.k as f64)
        .sum();
    if flops < SERIAL_FLOPS {
        // Less work than waking another thread costs: all of it here, in order.
        for (i, p) in problems.iter().enumerate() {
            if p.m > 0 && p.n > 0 {
                rows_serial(&arch, p, 0, p.m)?;
                finish(i, 0..p.m, 0..p.n);
            }
        }
        return Ok(());
    }
    if problems.iter().all(|p| !p.packed_b.is_null()) {
        return prepacked(&arch, problems, threads, finish);
    }
    let big = |p: &Problem| 2.0 * p.m as f64 * p.n as f64 * p.k as f64 > 64e6;
    if problems.len() < 2 * threads && problems.iter().any(big) {
        for (i, p) in problems.iter().enumerate() {
            shared(&arch, i, p, threads, finish)?;
        }
        Ok(())
    } else {
        private(&arch, problems, threads, finish)
    }
}

/// Products (and attentions, see `attention::attention`) of fewer floating-point operations
/// than this run on the calling thread: about ten microseconds of work, what waking a sleeping
/// worker of the pool can cost.
pub const SERIAL_FLOPS: f64 = 1e6;

/// Products whose `B` was packed ahead of time: one task per tile of `C`, each looping over
/// `k` with its own packed block of `A`, the tile of `C` staying in L2 between blocks.
unsafe fn prepacked(
    arch: &Arch,
    problems: &[Problem],
    threads: usize,
    finish: &Finish<'_>,
) -> Result<(), KernelError> {
    let (mr, nr) = (arch.mr, arch.nr);
    let want = 4 * threads;
    let mut tasks: Vec<(usize, usize, usize, usize, usize)> = vec![];
    let total_tiles: usize = problems
        .iter()
        .map(|p| p.m.div_ceil(mr) * p.n.div_ceil(nr))
        .sum();
    for (i, p) in problems.iter().enumerate() {
        if p.m == 0 || p.n == 0 {
            continue;
        }
        let (tm, tn) = (p.m.div_ceil(mr), p.n.div_ceil(nr));
        // This product's share of the tasks.
        let share = (want * tm * tn).div_ceil(total_tiles.max(1)).max(1);
        let (row_tiles, col_tiles) = task_tiles(tm, tn, share, threads, (mr, nr));
        let rows = tm.div_ceil(row_tiles) * mr;
        let cols = tn.div_ceil(col_tiles) * nr;
        for r0 in (0..p.m).step_by(rows) {
            for c0 in (0..p.n).step_by(cols) {
                tasks.push((i, r0, rows.min(p.m - r0), c0, cols.min(p.n - c0)));
            }
        }
    }
    // Where several column tiles share rows, each would pack the same blocks of `A`: pack
    // each such `A` once, by all threads, and let the tiles read it. Always where the columns
    // take more than one block of tiles; for fewer columns, where they were split to make
    // enough tasks (a product of few rows: 197 x 1024 by 1024 x 256 on 2 threads was 8
    // column tasks, each packing all of `A`) and `A` is large enough to be worth the
    // parallel packing: 688 -> 522 us, a ViT-style model 5.88 -> 5.02 ms on 2 threads
    // (interleaved medians).
    let mut problems = problems.to_vec();
    let mut shared_a: Vec<LineVec<f32>> = vec![];
    for (i, p) in problems.iter_mut().enumerate() {
        let size = p.m.next_multiple_of(mr).saturating_mul(p.k);
        // A task of this product starting past its first column.
        let split = || tasks.iter().any(|t| t.0 == i && t.3 > 0);
        let worth = p.n > 16 * nr || size >= SHARED_A_MIN && split();
        if p.packed_a.is_null() && worth && p.k > 0 && size <= SHARED_A_MAX {
            let mut buf = take_shared(size);
            let dst = try_aligned(&mut buf, size)?;
            pack_a_parallel(p, mr, dst);
            p.packed_a = dst.as_ptr();
            shared_a.push(buf);
        }
    }
    let problems = &problems[..];
    let run = tasks.par_iter().try_for_each(|&(i, r0, mc, c0, nc)| {
        let p = &problems[i];
        // Where this task is the only one to read its columns of the weight (one block of
        // rows), the weight streams from memory: each micro-panel of it meets every
        // micro-panel of `A` while the next is fetched. Where several blocks of rows read
        // them, they are in cache: each micro-panel of `A` then stays in L1 while those of
        // the weight come from L2 (the encoder's linear layers, 2048 rows: 8-15% faster;
        // the MLP's, 256 rows: 6% slower that way).
        let b_outer = mc == p.m;
        if p.k == 0 {
            for r in r0..r0 + mc {
                std::slice::from_raw_parts_mut(p.c.add(r * p.ldc + c0), nc).fill(0.0);
            }
        }
        SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            let kb = kc_for(p.k);
            for p0 in (0..p.k).step_by(kb) {
                let kc = kb.min(p.k - p0);
                let pa = a_block(p, &mut s.a, r0, mc, p0, kc, mr)?;
                let pb = prepacked_block(p, nr, (p0, kc), (c0, nc));
                let next = if p0 + kc < p.k {
                    prepacked_block(p, nr, (p0 + kc, kb.min(p.k - p0 - kc)), (c0, nc))
                } else {
                    &[]
                };
                block(arch, p, pa, pb, (r0, mc), (c0, nc), (p0, kc), b_outer, next);
            }
            Ok::<_, KernelError>(())
        })?;
        finish(i, r0..r0 + mc, c0..c0 + nc);
        Ok(())
    });
    let mut kept = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    kept.extend(shared_a);
    // The oldest beyond the bound are dropped.
    let extra = kept.len().saturating_sub(SHARED_KEPT);
    kept.drain(..extra);
    run
}

/// Buffers of [`prepacked`]'s shared packed `A`, kept for the next products: a fresh buffer of
/// several MiB is zeroed by the kernel page by page as it is first written, on every call (the
/// encoder's linear layers allocated 24 MiB per run, 3% of its time on one thread in page
/// faults). At most [`SHARED_KEPT`] are kept.
static SHARED: std::sync::Mutex<Vec<LineVec<f32>>> = std::sync::Mutex::new(Vec::new());

/// Buffers [`SHARED`] keeps (a product takes one per problem; models have one or two).
const SHARED_KEPT: usize = 4;

/// A kept buffer for at least `len` floats (see [`aligned`]): the smallest that fits, else the
/// largest (grown), else a new one.
fn take_shared(len: usize) -> LineVec<f32> {
    let mut kept = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    let fit = (0..kept.len())
        .filter(|&i| kept[i].len() >= len)
        .min_by_key(|&i| kept[i].len());
    match fit {
        Some(i) => kept.remove(i),
        // The largest, grown (its old contents are overwritten by the packing).
        None => (0..kept.len())
            .max_by_key(|&i| kept[i].len())
            .map(|i| kept.remove(i))
            .unwrap_or_else(|| LineVec::new(64)),
    }
}

/// How [`prepacked`] cuts a product of `tm x tn` micro-tiles into at least `share` tasks:
/// `(row blocks, column blocks)`. Columns in blocks of at most 16 panels and rows in blocks of
/// at most 256 (a tile of `C` of at most 512 KiB stays in L2, and each panel of `B` streams
/// from memory once per block of rows), split further until the share is met; then, where
/// that leaves tiles of unequal size or a task count that is not a multiple of the threads,
/// the fewest equal tiles (squarest first) whose count is, up to twice the share.
fn task_tiles(
    tm: usize,
    tn: usize,
    share: usize,
    threads: usize,
    (mr, nr): (usize, usize),
) -> (usize, usize) {
    let min_cols = tn.div_ceil(16).max(1);
    let min_rows = tm.div_ceil((256 / mr).max(1)).max(1);
    let (mut row_tiles, mut col_tiles) = (min_rows, min_cols);
    while row_tiles * col_tiles < share && (row_tiles < tm || col_tiles < tn) {
        if row_tiles < tm && (row_tiles <= col_tiles || col_tiles >= tn) {
            row_tiles += 1;
        } else {
            col_tiles += 1;
        }
    }
    // Rather tiles of one size, as many as a multiple of the threads (9 tasks on 2
    // threads leave one thread a fifth of the time idle), up to twice the share.
    let even = |t: usize, d: usize| t.is_multiple_of(d);
    if !even(row_tiles * col_tiles, threads) || !even(tm, row_tiles) || !even(tn, col_tiles) {
        let mut best: Option<(usize, usize, usize)> = None;
        for rt in (min_rows..=tm.min(2 * share)).filter(|&rt| even(tm, rt)) {
            for ct in (min_cols..=tn.min(2 * share)).filter(|&ct| even(tn, ct)) {
                let t = rt * ct;
                if t < share || t > 2 * share || !even(t, threads) {
                    continue;
                }
                // Fewest tasks, then the squarest tiles (in elements of `C`).
                let skew = (tm / rt * mr).abs_diff(tn / ct * nr);
                if best.is_none_or(|(bt, bs, _)| (t, skew) < (bt, bs)) {
                    best = Some((t, skew, rt));
                }
            }
        }
        if let Some((t, _, rt)) = best {
            (row_tiles, col_tiles) = (rt, t / rt);
        }
    }
    (row_tiles, col_tiles)
}

/// Largest `A` (floats, padded) that [`prepacked`] packs once for all its column tiles.
const SHARED_A_MAX: usize = 16 << 20;
/// Smallest `A` (floats, padded) that [`prepacked`] packs once for its column tiles when they
/// are one block of at most 16 panels split for more tasks (see there).
const SHARED_A_MIN: usize = 16 << 10;

/// Packs all of `p.a` into `dst` in the layout of [`PackedA`] for `mr`-row panels, blocks of
/// 16 panels of one `k` block per task.
unsafe fn pack_a_parallel(p: &Problem, mr: usize, dst: &mut [f32]) {
    let mp = p.m.next_multiple_of(mr);
    let kb = kc_for(p.k);
    let mut jobs: Vec<(usize, usize, usize, &mut [f32])> = vec![];
    let mut rest = dst;
    for p0 in (0..p.k).step_by(kb) {
        let kc = kb.min(p.k - p0);
        let (blk, tail) = rest.split_at_mut(kc * mp);
        rest = tail;
        for (j, part) in blk.chunks_mut(16 * mr * kc).enumerate() {
            jobs.push((p0, kc, j * 16 * mr, part));
        }
    }
    let a = p.a;
    let m = p.m;
    jobs.into_par_iter().for_each(|(p0, kc, r0, part)| {
        let mc = (16 * mr).min(m - r0);
        // SAFETY: the caller's `A` is readable for `m x k`; `part` holds these panels.
        unsafe { pack_a(&a, r0, mc, p0, kc, mr, part) }
    });
}

/// One product whose packed `B` panels are shared by all threads.
unsafe fn shared(
    arch: &Arch,
    index: usize,
    p: &Problem,
    threads: usize,
    finish: &Finish<'_>,
) -> Result<(), KernelError> {
    let (m, n, k) = (p.m, p.n, p.k);
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        zero_and_finish(p, index, finish);
        return Ok(());
    }
    let (mr, nr) = (arch.mr, arch.nr);
    // Tiles of C per panel: rows in multiples of mr, columns in multiples of nr, at least
    // 4 tiles per thread where the shape allows.
    let nc_max = NC.min(n.next_multiple_of(nr));
    let kb = kc_for(k);
    let mut packed_b = LineVec::new(64);
    let pb_all = try_aligned(&mut packed_b, kb * nc_max)?;
    for c0 in (0..n).step_by(nc_max) {
        let nc = nc_max.min(n - c0);
        let tn = nc.div_ceil(nr);
        let tm = m.div_ceil(mr);
        let want = 4 * threads;
        // Column tiles of at most 512 columns; rows split until there are enough tiles.
        let col_tiles = tn.div_ceil(16).max(1);
        let row_tiles = want.div_ceil(col_tiles).clamp(1, tm).max(tm.div_ceil(16));
        let rows_per = tm.div_ceil(row_tiles) * mr;
        let cols_per = tn.div_ceil(col_tiles) * nr;
        let tiles: Vec<(usize, usize)> = (0..m)
            .step_by(rows_per)
            .flat_map(|r| (0..nc).step_by(cols_per).map(move |c| (r, c)))
            .collect();
        for p0 in (0..k).step_by(kb) {
            let kc = kb.min(k - p0);
            let last = p0 + kc == k;
            let pb = &mut pb_all[..kc * nc.div_ceil(nr) * nr];
            let bref = &p.b;
            pb.par_chunks_mut(nr * kc)
                .enumerate()
                .for_each(|(q, panel)| {
                    pack_b_panel(bref, p0, kc, c0 + q * nr, nr.min(nc - q * nr), nr, panel)
                });
            let pb: &[f32] = pb;
            tiles.par_iter().try_for_each(|&(r0, cc)| {
                let mc = rows_per.min(m - r0);
                let ncs = cols_per.min(nc - cc);
                SCRATCH.with(|s| {
                    let mut s = s.borrow_mut();
                    let pa = a_block(p, &mut s.a, r0, mc, p0, kc, mr)?;
                    let pbs = &pb[(cc / nr) * nr * kc..];
                    block(
                        arch,
                        p,
                        pa,
                        pbs,
                        (r0, mc),
                        (c0 + cc, ncs),
                        (p0, kc),
                        false,
                        &[],
                    );
                    Ok::<_, KernelError>(())
                })?;
                if last {
                    finish(index, r0..r0 + mc, c0 + cc..c0 + cc + ncs);
                }
                Ok::<_, KernelError>(())
            })?;
        }
    }
    Ok(())
}

/// Many products: one task per product (or per row block of one), each packing privately.
unsafe fn private(
    arch: &Arch,
    problems: &[Problem],
    threads: usize,
    finish: &Finish<'_>,
) -> Result<(), KernelError> {
    let mr = arch.mr;
    // Row blocks: split a product's rows until there are about 4 tasks per thread.
    let want = 4 * threads;
    let per_problem = want.div_ceil(problems.len().max(1)).max(1);
    let mut tasks: Vec<(usize, usize, usize)> = vec![];
    for (i, p) in problems.iter().enumerate() {
        if p.m == 0 || p.n == 0 {
            continue;
        }
        let rows = p.m.div_ceil(per_problem).next_multiple_of(mr).max(mr);
        let rows = rows
            .max((p.m / 8).next_multiple_of(mr))
            .min(p.m.next_multiple_of(mr));
        for r0 in (0..p.m).step_by(rows) {
            tasks.push((i, r0, rows.min(p.m - r0)));
        }
    }
    tasks.par_iter().try_for_each(|&(i, r0, mc)| {
        let p = &problems[i];
        rows_serial(arch, p, r0, mc)?;
        finish(i, r0..r0 + mc, 0..p.n);
        Ok(())
    })
}

/// Rows `r0..r0+mc` of a product, all columns, on the calling thread with its own packing
/// buffers (a `k == 0` product is zero-filled).
unsafe fn rows_serial(arch: &Arch, p: &Problem, r0: usize, mc: usize) -> Result<(), KernelError> {
    let (mr, nr) = (arch.mr, arch.nr);
    let (n, k) = (p.n, p.k);
    if k == 0 {
        for r in r0..r0 + mc {
            std::slice::from_raw_parts_mut(p.c.add(r * p.ldc), n).fill(0.0);
        }
        return Ok(());
    }
    // Column blocks keep the packed B block near L2.
    let kb = kc_for(k);
    let ncb = (512 * 256 / kb)
        .next_multiple_of(nr)
        .min(n.next_multiple_of(nr));
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        let s = &mut *s;
        for c0 in (0..n).step_by(ncb) {
            let nc = ncb.min(n - c0);
            for p0 in (0..k).step_by(kb) {
                let kc = kb.min(k - p0);
                let pb: &[f32] = if p.packed_b.is_null() {
                    let pb = try_aligned(&mut s.b, nc.div_ceil(nr) * nr * kc)?;
                    pack_b(&p.b, p0, kc, c0, nc, nr, pb);
                    pb
                } else {
                    prepacked_block(p, nr, (p0, kc), (c0, nc))
                };
                let pa = a_block(p, &mut s.a, r0, mc, p0, kc, mr)?;
                block(arch, p, pa, pb, (r0, mc), (c0, nc), (p0, kc), false, &[]);
            }
        }
        Ok(())
    })
}

/// One product on the calling thread alone (for callers that already split their work over
/// the pool); a failed allocation of packing buffers aborts, as in [`gemm`].
///
/// # Safety
/// As for [`gemm`].
pub unsafe fn gemm_serial(p: &Problem) {
    if let Err(e) = try_gemm_serial(p) {
        abort_on(e)
    }
}

/// [`gemm_serial`] that reports a failed allocation of its packing buffers (see [`try_gemm`]).
///
/// # Safety
/// As for [`gemm`].
pub unsafe fn try_gemm_serial(p: &Problem) -> Result<(), KernelError> {
    if p.m > 0 && p.n > 0 {
        rows_serial(&arch_for(p.m), p, 0, p.m)?;
    }
    Ok(())
}

unsafe fn zero_and_finish(p: &Problem, index: usize, finish: &Finish<'_>) {
    for r in 0..p.m {
        std::slice::from_raw_parts_mut(p.c.add(r * p.ldc), p.n).fill(0.0);
    }
    finish(index, 0..p.m, 0..p.n);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(m: usize, n: usize, k: usize, a: &[f32], b: &[f32]) -> Vec<f64> {
        let mut c = vec![0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                for l in 0..k {
                    c[i * n + j] += a[i * k + l] as f64 * b[l * n + j] as f64;
                }
            }
        }
        c
    }

    #[test]
    fn packing_a_transposed_b_matches_the_scalar_order() {
        let (k, n) = (37, 45);
        // B[l, j] at j * k + l (a transposed row-major [n, k] weight).
        let w = fill(n * k, 3);
        let b = Mat::new(w.as_ptr(), 1, k as isize);
        let nr = arch().nr;
        let mut got = vec![f32::NAN; n.div_ceil(nr) * nr * 20];
        unsafe { pack_b(&b, 5, 20, 3, n - 3, nr, &mut got) };
        for q in 0..(n - 3).div_ceil(nr) {
            for l in 0..20 {
                for j in 0..nr {
                    let col = 3 + q * nr + j;
                    let want = if col < n { w[col * k + 5 + l] } else { 0.0 };
                    assert_eq!(got[q * nr * 20 + l * nr + j], want, "panel {q} l {l} j {j}");
                }
            }
        }
    }

    fn fill(n: usize, seed: u64) -> Vec<f32> {
        let mut x = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((x >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            })
            .collect()
    }

    #[test]
    fn tasks_are_equal_tiles_in_multiples_of_the_threads() {
        // The MLP's last layer (256 x 1024, 8 x 32 tiles) on 2 threads: not 3 x 3 unequal
        // tasks but 8 equal ones.
        let (rt, ct) = task_tiles(32, 32, 8, 2, (8, 32));
        assert_eq!((rt * ct, 32 % rt, 32 % ct), (8, 0, 0), "{rt} x {ct}");
        // Shapes that already split evenly keep their tiles (the encoder's linear layers).
        assert_eq!(task_tiles(256, 64, 8, 2, (8, 32)), (8, 4));
        assert_eq!(task_tiles(256, 16, 8, 2, (8, 32)), (8, 1));
        // No even split within twice the share: the first cut stands.
        let (rt, ct) = task_tiles(7, 3, 8, 2, (8, 32));
        assert!(rt * ct >= 8, "{rt} x {ct}");
    }

    /// Products of at most four rows (the 4 x 32 kernel on AVX-512) give the bits of the same
    /// rows in a product of twelve (the 12 x 32 kernel), with the left operand row- or
    /// column-contiguous (the second packed by masked moves), over one and several blocks
    /// of `k`.
    #[test]
    fn few_rows_give_the_bits_of_many() {
        for &(n, k) in &[(1, 1), (31, 7), (33, 385), (70, 600)] {
            let a = fill(12 * k, 5);
            let b = fill(k * n, 6);
            let bm = Mat::new(b.as_ptr(), n as isize, 1);
            let product = |m: usize, a: Mat| {
                let mut c = vec![f32::NAN; m * n];
                let p = Problem::new(m, n, k, a, bm, c.as_mut_ptr(), n);
                // SAFETY: `a` and `b` hold the operands, `c` the result.
                unsafe { gemm_serial(&p) };
                c
            };
            let want = product(12, Mat::new(a.as_ptr(), k as isize, 1));
            // The first rows of `a`, transposed: element (i, l) at `l * m + i`.
            for m in 1..=4 {
                let at: Vec<f32> = (0..k)
                    .flat_map(|l| (0..m).map(move |i| (l, i)))
                    .map(|(l, i)| a[i * k + l])
                    .collect();
                let rows = product(m, Mat::new(a.as_ptr(), k as isize, 1));
                let cols = product(m, Mat::new(at.as_ptr(), 1, m as isize));
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&rows), bits(&want[..m * n]), "{m}x{n}x{k}");
                assert_eq!(bits(&cols), bits(&want[..m * n]), "{m}x{n}x{k}, transposed");
            }
        }
    }

    #[test]
    fn matches_naive_on_edge_shapes() {
        for &(m, n, k) in &[
            (1, 1, 1),
            (13, 33, 7),
            (12, 32, 256),
            (25, 70, 300),
            (100, 3, 513),
            (3, 100, 1),
            (0, 5, 5),
            (5, 5, 0),
        ] {
            let a = fill(m * k, 1);
            let b = fill(k * n, 2);
            let bm = Mat::new(b.as_ptr(), n as isize, 1);
            let packed = unsafe { PackedB::new(&bm, k, n) };
            let want = naive(m, n, k, &a, &b);
            for pre in [false, true] {
                let mut c = vec![f32::NAN; m * n];
                let mut p = Problem::new(
                    m,
                    n,
                    k,
                    Mat::new(a.as_ptr(), k as isize, 1),
                    bm,
                    c.as_mut_ptr(),
                    n,
                );
                if pre {
                    p.packed_b = packed.as_ptr();
                }
                unsafe { gemm(&[p], &|_, _, _| {}) };
                for (x, y) in c.iter().zip(&want) {
                    assert!(
                        (*x as f64 - y).abs() <= 1e-5 * (1.0 + y.abs()) * (k as f64).sqrt(),
                        "{m}x{n}x{k} (prepacked {pre}): {x} vs {y}"
                    );
                }
            }
        }
    }
}
