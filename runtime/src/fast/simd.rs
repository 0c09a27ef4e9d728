//! Run-time CPU feature checks shared by the kernels that keep several compiled copies of
//! their hot loops (one per instruction set, picked when they run).

/// Defines a function that runs `$body` (an `#[inline(always)]` function with the same
/// parameters) in the best copy compiled for this CPU: AVX-512 (F/BW/DQ/VL, with FMA), AVX2
/// with FMA, or the baseline (an optional `-> T` after the parameters is the result type). The copies differ only in the instructions the compiler may use;
/// the compiler never contracts `a * b + c` on its own, and the explicit `mul_add`s of
/// [`super::math`] are exactly rounded everywhere (an instruction in the SIMD copies, the C
/// library's `fmaf` in the baseline one), so every copy gives the same bits.
macro_rules! multiversion {
    ($(#[$m:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)?
        => $body:path) => {
        $(#[$m])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
                unsafe fn avx512($($arg: $ty),*) $(-> $ret)? {
                    $body($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($arg: $ty),*) $(-> $ret)? {
                    $body($($arg),*)
                }
                if $crate::fast::simd::has_avx512() {
                    // SAFETY: the CPU has these features (checked just now).
                    return unsafe { avx512($($arg),*) };
                }
                if $crate::fast::simd::has_avx2() {
                    // SAFETY: as above.
                    return unsafe { avx2($($arg),*) };
                }
            }
            $body($($arg),*)
        }
    };
    // The same with lifetime parameters.
    ($(#[$m:meta])* $vis:vis fn $name:ident<$($lt:lifetime),+>($($arg:ident: $ty:ty),* $(,)?)
        $(-> $ret:ty)? => $body:path) => {
        $(#[$m])*
        $vis fn $name<$($lt),+>($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
                unsafe fn avx512<$($lt),+>($($arg: $ty),*) $(-> $ret)? {
                    $body($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2<$($lt),+>($($arg: $ty),*) $(-> $ret)? {
                    $body($($arg),*)
                }
                if $crate::fast::simd::has_avx512() {
                    // SAFETY: the CPU has these features (checked just now).
                    return unsafe { avx512($($arg),*) };
                }
                if $crate::fast::simd::has_avx2() {
                    // SAFETY: as above.
                    return unsafe { avx2($($arg),*) };
                }
            }
            $body($($arg),*)
        }
    };
}
pub(crate) use multiversion;

/// Asks for the cache lines of the `len` floats at `p` ahead of use (one prefetch per 64-byte
/// line). A prefetch is a hint and never faults, so `p` may point anywhere.
#[inline(always)]
pub(crate) fn prefetch(p: *const f32, len: usize) {
    #[cfg(target_arch = "x86_64")]
    prefetch_lines::<{ std::arch::x86_64::_MM_HINT_T0 }>(p, len);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, len);
}

/// [`prefetch`] for writing (`prefetchw`: the lines come in exclusive, so the stores that
/// follow do not wait for memory).
#[inline(always)]
pub(crate) fn prefetch_write(p: *const f32, len: usize) {
    #[cfg(target_arch = "x86_64")]
    prefetch_lines::<{ std::arch::x86_64::_MM_HINT_ET0 }>(p, len);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, len);
}

/// One `_mm_prefetch` with hint `H` per 64-byte line of the `len` floats at `p`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_lines<const H: i32>(p: *const f32, len: usize) {
    for i in (0..len).step_by(16) {
        // SAFETY: a prefetch is a hint and never faults.
        unsafe { std::arch::x86_64::_mm_prefetch::<H>(p.wrapping_add(i) as *const i8) };
    }
}

/// The cache lines of a run of floats, prefetched a few at a time over the steps of the work
/// done before the run is read: a burst of a whole run's prefetches (dozens of lines) stalls
/// on the core's miss buffers, while a few per step overlap the work.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Spread {
    p: *const f32,
    lines: usize,
    next: usize,
    per: usize,
}

impl Spread {
    /// The `n` floats at `p` (any address: a prefetch never faults), over `steps` steps.
    #[inline(always)]
    pub(crate) fn new(p: *const f32, n: usize, steps: usize) -> Spread {
        let lines = n.div_ceil(16);
        Spread {
            p,
            lines,
            next: 0,
            per: lines.div_ceil(steps.max(1)),
        }
    }

    /// Nothing to prefetch.
    pub(crate) const NONE: Spread = Spread {
        p: std::ptr::null(),
        lines: 0,
        next: 0,
        per: 0,
    };

    /// Prefetches the next step's lines.
    #[inline(always)]
    pub(crate) fn step(&mut self) {
        self.upto((self.next + self.per).min(self.lines));
    }

    /// Prefetches the lines not asked for yet.
    #[inline(always)]
    pub(crate) fn finish(&mut self) {
        self.upto(self.lines);
    }

    /// Prefetches the lines from the next one not asked for up to line `hi`.
    #[inline(always)]
    fn upto(&mut self, hi: usize) {
        prefetch(self.p.wrapping_add(self.next * 16), (hi - self.next) * 16);
        self.next = hi;
    }
}

/// `dst.copy_from_slice(src)` with non-temporal stores (the lines go to memory without being
/// read first): 64-byte ones where the CPU has AVX-512, 16-byte ones where `dst` is 16-byte
/// aligned elsewhere; call [`stream_fence`] before another thread reads `dst`.
#[inline(always)]
pub(crate) fn copy_nt(dst: &mut [f32], src: &[f32]) {
    let n = dst.len().min(src.len());
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_loadu_ps, _mm_stream_ps};
        if has_avx512() {
            // SAFETY: the CPU has AVX-512F (checked just now).
            unsafe { map_nt512(dst, src, |v| v) };
            return;
        }
        let head = dst.as_ptr().align_offset(16).min(n);
        dst[..head].copy_from_slice(&src[..head]);
        let mut i = head;
        while i + 4 <= n {
            // SAFETY: `i + 4 <= n` for both slices; `dst + i` is 16-byte aligned.
            unsafe { _mm_stream_ps(dst.as_mut_ptr().add(i), _mm_loadu_ps(src.as_ptr().add(i))) };
            i += 4;
        }
        dst[i..n].copy_from_slice(&src[i..n]);
    }
    #[cfg(not(target_arch = "x86_64"))]
    dst[..n].copy_from_slice(&src[..n]);
}

/// `dst.copy_from_slice(src)` split into 1 MiB pieces over the current rayon pool, each piece
/// a page at a time with the non-temporal stores of `copy_nt`, the pages `WARM_FLOATS` on
/// warmed (`warm_page`), and a fence: the fastest copy this runtime knows (see
/// `exec::time_stream_copy`).
pub fn copy_streaming(dst: &mut [f32], src: &[f32]) {
    use rayon::prelude::*;
    const PIECE: usize = 1 << 18;
    let n = dst.len().min(src.len());
    dst[..n]
        .par_chunks_mut(PIECE)
        .zip(src[..n].par_chunks(PIECE))
        .for_each(|(d, s)| {
            for (d, s) in d.chunks_mut(PAGE_FLOATS).zip(s.chunks(PAGE_FLOATS)) {
                warm_page(d.as_ptr().wrapping_add(WARM_FLOATS));
                warm_page(s.as_ptr().wrapping_add(WARM_FLOATS));
                copy_nt(d, s);
            }
            stream_fence();
        });
}

/// `dst[i] = src[i] * k` with 64-byte non-temporal stores where the CPU has AVX-512 (plain
/// stores elsewhere); call [`stream_fence`] before another thread reads `dst`.
#[inline(always)]
pub(crate) fn scale_nt(dst: &mut [f32], src: &[f32], k: f32) {
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        // SAFETY: the CPU has AVX-512F (checked just now).
        unsafe { scale_nt512(dst, src, k) };
        return;
    }
    for (o, &x) in dst.iter_mut().zip(src) {
        *o = x * k;
    }
}

/// [`scale_nt`] spread over other work: [`ScaleNt::lines`] writes the next few whole lines of
/// `dst` (AVX-512 only; elsewhere it does nothing), [`ScaleNt::finish`] the rest, with the same
/// values and stores as one `scale_nt`.
pub(crate) struct ScaleNt<'a> {
    dst: &'a mut [f32],
    src: &'a [f32],
    k: f32,
    /// Elements of `dst` written so far (the partial first line included, once started).
    done: usize,
}

impl<'a> ScaleNt<'a> {
    /// `dst[i] = src[i] * k`, nothing written yet.
    pub(crate) fn new(dst: &'a mut [f32], src: &'a [f32], k: f32) -> ScaleNt<'a> {
        let n = dst.len().min(src.len());
        ScaleNt {
            dst: &mut dst[..n],
            src: &src[..n],
            k,
            done: 0,
        }
    }

    /// Writes up to `lines` more 64-byte lines (the partial first line too, the first time).
    #[inline(always)]
    pub(crate) fn lines(&mut self, lines: usize) {
        #[cfg(target_arch = "x86_64")]
        if has_avx512() {
            // SAFETY: the CPU has AVX-512F (checked just now).
            self.done = unsafe { scale_lines512(self.dst, self.src, self.k, self.done, lines) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = lines;
    }

    /// Writes the rest.
    pub(crate) fn finish(self) {
        let i = self.done;
        scale_nt(&mut self.dst[i..], &self.src[i..], self.k);
    }
}

/// `dst[j] = f(src[j])` from element `i` over up to `lines` whole 64-byte lines of `dst`, by
/// non-temporal stores; `i` 0 means not started, when the partial first line (up to the first
/// 64-byte boundary of `dst`) is written first, by a masked store. The new `i`. Shared by
/// [`ScaleNt::lines`] and [`map_nt512`].
///
/// # Safety
/// The CPU must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn lines512(
    dst: &mut [f32],
    src: &[f32],
    mut i: usize,
    lines: usize,
    f: impl Fn(std::arch::x86_64::__m512) -> std::arch::x86_64::__m512,
) -> usize {
    use std::arch::x86_64::*;
    let n = dst.len().min(src.len());
    if i == 0 {
        let head = dst.as_ptr().align_offset(64).min(n).min(15);
        // SAFETY: `head < 16`, inside both slices; the caller's CPU has AVX-512F.
        unsafe { part512(dst, src, 0, head, &f) };
        i = head;
    }
    let end = n.min(i + 16 * lines);
    while i + 16 <= end {
        // SAFETY: `i + 16 <= n` for both slices; `dst + i` is 64-byte aligned (past the head).
        unsafe {
            _mm512_stream_ps(
                dst.as_mut_ptr().add(i),
                f(_mm512_loadu_ps(src.as_ptr().add(i))),
            )
        };
        i += 16;
    }
    i
}

/// [`lines512`] of `src[j] * k`.
///
/// # Safety
/// The CPU must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn scale_lines512(dst: &mut [f32], src: &[f32], k: f32, i: usize, lines: usize) -> usize {
    use std::arch::x86_64::*;
    let kv = _mm512_set1_ps(k);
    // SAFETY: the caller's CPU has AVX-512F.
    unsafe { lines512(dst, src, i, lines, |v| _mm512_mul_ps(v, kv)) }
}

/// `dst[j] = f(src[j])` for the `len` (below 16) elements from `i`, by one masked (plain) store:
/// one instruction instead of a scalar loop, whose stores each waited for the line's memory.
///
/// # Safety
/// The CPU must have AVX-512F, and `i + len` must lie within both slices.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn part512(
    dst: &mut [f32],
    src: &[f32],
    i: usize,
    len: usize,
    f: impl Fn(std::arch::x86_64::__m512) -> std::arch::x86_64::__m512,
) {
    use std::arch::x86_64::*;
    if len > 0 {
        let m: __mmask16 = ((1u32 << len) - 1) as u16;
        // SAFETY: the mask covers `i..i + len`, inside both slices (the caller's promise).
        unsafe {
            let v = f(_mm512_maskz_loadu_ps(m, src.as_ptr().add(i)));
            _mm512_mask_storeu_ps(dst.as_mut_ptr().add(i), m, v);
        }
    }
}

/// [`scale_nt`] with AVX-512.
///
/// # Safety
/// The CPU must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn scale_nt512(dst: &mut [f32], src: &[f32], k: f32) {
    use std::arch::x86_64::*;
    let kv = _mm512_set1_ps(k);
    // SAFETY: the caller's CPU has AVX-512F.
    unsafe { map_nt512(dst, src, |v| _mm512_mul_ps(v, kv)) }
}

/// `dst[i] = f(src[i])` 16 lanes at a time, with 64-byte non-temporal stores of the whole
/// lines of `dst` and masked (plain) stores of its partial first and last lines.
///
/// # Safety
/// The CPU must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn map_nt512(
    dst: &mut [f32],
    src: &[f32],
    f: impl Fn(std::arch::x86_64::__m512) -> std::arch::x86_64::__m512,
) {
    let n = dst.len().min(src.len());
    // SAFETY (both): the caller's CPU has AVX-512F; fewer than 16 elements are left after the
    // whole lines, inside both slices.
    let i = unsafe { lines512(dst, src, 0, n / 16 + 1, &f) };
    unsafe { part512(dst, src, i, n - i, &f) };
}

/// Floats in a 4 KiB page.
const PAGE_FLOATS: usize = 1024;
/// How far ahead of a stream its pages are warmed ([`warm_page`]): four 4 KiB pages.
pub(crate) const WARM_FLOATS: usize = 4 * PAGE_FLOATS;

/// Prefetches the line at `p` (any address: a prefetch never faults), so that the address
/// translation of its page is found (a page-table walk, under a hypervisor a two-level one) a
/// few pages before a streaming loop reaches it. A stream of 4 KiB pages otherwise stalls on
/// one walk per page: its non-temporal stores and the first loads of each page wait on them,
/// and the hardware prefetcher stops at each page's end. Measured on a 2-core Zen 4 under
/// KVM: a 32 MiB streaming copy 1.3x faster, workloads c and d (the elementwise chain, and
/// layer norm then softmax) 1.07-1.1x. Transparent huge pages make walks rare, but the
/// buffers a runtime is given are usually not on them.
#[inline(always)]
pub(crate) fn warm_page(p: *const f32) {
    prefetch(p, 1);
}

/// Orders the non-temporal stores of [`copy_nt`] before the stores that follow.
#[inline(always)]
pub(crate) fn stream_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a store fence has no preconditions.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

/// Whether the CPU runs the AVX-512 copies (F, BW, DQ and VL, as `x86-64-v4`), checked once.
#[cfg(target_arch = "x86_64")]
pub fn has_avx512() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512dq")
            && std::is_x86_feature_detected!("avx512vl")
            && std::is_x86_feature_detected!("fma")
            && std::env::var_os("FXHLO_NO_AVX512").is_none()
    })
}

/// Whether the CPU runs the AVX2 copies (AVX2 and FMA, as `x86-64-v3`), checked once.
#[cfg(target_arch = "x86_64")]
pub fn has_avx2() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
    })
}

/// `dst.copy_from_slice(src)` for the short runs of im2col and packing (up to 48 elements), as
/// AVX-512 moves inlined into the caller (no library call per run); longer runs call the
/// library.
///
/// # Safety
/// The CPU must have AVX-512F; `dst` and `src` have the same length.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub unsafe fn copy_avx512(dst: &mut [f32], src: &[f32]) {
    use std::arch::x86_64::*;
    let n = dst.len().min(src.len());
    if n > 48 {
        dst[..n].copy_from_slice(&src[..n]);
        return;
    }
    let (d, s) = (dst.as_mut_ptr(), src.as_ptr());
    // Straight-line code for the short runs (a loop would be turned into a `memmove` call).
    let mut i = 0;
    if n >= 16 {
        _mm512_storeu_ps(d, _mm512_loadu_ps(s));
        i = 16;
    }
    if n >= 32 {
        _mm512_storeu_ps(d.add(16), _mm512_loadu_ps(s.add(16)));
        i = 32;
    }
    if n >= 48 {
        _mm512_storeu_ps(d.add(32), _mm512_loadu_ps(s.add(32)));
        i = 48;
    }
    if i < n {
        let m: __mmask16 = ((1u32 << (n - i)) - 1) as __mmask16;
        _mm512_mask_storeu_ps(d.add(i), m, _mm512_maskz_loadu_ps(m, s.add(i)));
    }
}

/// [`Moves::copy_every2`] with AVX-512: 16 results from two loads (masked where `src` ends)
/// and one two-register permute, where the scalar loop made one load and one store each (the
/// stride-2 rows of resnet18's first convolution spent a fifth of the model's time there).
///
/// # Safety
/// The CPU must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub unsafe fn copy_every2_avx512(dst: &mut [f32], src: &[f32]) {
    use std::arch::x86_64::*;
    let n = dst.len().min(src.len().div_ceil(2));
    let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let mask = |k: usize| -> __mmask16 { ((1u32 << k.min(16)) - 1) as __mmask16 };
    let (d, s) = (dst.as_mut_ptr(), src.as_ptr());
    let mut j = 0;
    while j < n {
        // Elements `2j..2j + 32` of `src`, those past its end not loaded (zero).
        let left = src.len() - 2 * j;
        // SAFETY: the masked lanes lie within `src` and `dst` (`j + 16` capped at `n`).
        unsafe {
            let lo = _mm512_maskz_loadu_ps(mask(left), s.add(2 * j));
            let hi = _mm512_maskz_loadu_ps(mask(left.saturating_sub(16)), s.add(2 * j + 16));
            let v = _mm512_permutex2var_ps(lo, even, hi);
            _mm512_mask_storeu_ps(d.add(j), mask(n - j), v);
        }
        j += 16;
    }
}

/// `dst.fill(0.0)` as [`copy_avx512`] does copies.
///
/// # Safety
/// The CPU must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub unsafe fn zero_avx512(dst: &mut [f32]) {
    use std::arch::x86_64::*;
    let n = dst.len();
    if n > 48 {
        dst.fill(0.0);
        return;
    }
    let d = dst.as_mut_ptr();
    let z = _mm512_setzero_ps();
    let mut i = 0;
    while i + 16 <= n {
        _mm512_storeu_ps(d.add(i), z);
        i += 16;
    }
    if i < n {
        let m: __mmask16 = ((1u32 << (n - i)) - 1) as __mmask16;
        _mm512_mask_storeu_ps(d.add(i), m, z);
    }
}

/// `dst.copy_from_slice(src)` for short runs (up to 32 elements) as AVX2 moves inlined into the
/// caller, as [`copy_avx512`] does with AVX-512; longer runs call the library.
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
pub unsafe fn copy_avx2(dst: &mut [f32], src: &[f32]) {
    use std::arch::x86_64::*;
    let n = dst.len().min(src.len());
    if n > 32 {
        dst[..n].copy_from_slice(&src[..n]);
        return;
    }
    let (d, s) = (dst.as_mut_ptr(), src.as_ptr());
    // Full vectors, then the tail as one more (overlapping) vector, in straight-line code (a
    // loop would be turned into a `memcpy` call).
    if n >= 8 {
        _mm256_storeu_ps(d, _mm256_loadu_ps(s));
        if n >= 16 {
            _mm256_storeu_ps(d.add(8), _mm256_loadu_ps(s.add(8)));
        }
        if n >= 24 {
            _mm256_storeu_ps(d.add(16), _mm256_loadu_ps(s.add(16)));
        }
        if n == 32 {
            _mm256_storeu_ps(d.add(24), _mm256_loadu_ps(s.add(24)));
        }
        if !n.is_multiple_of(8) {
            _mm256_storeu_ps(d.add(n - 8), _mm256_loadu_ps(s.add(n - 8)));
        }
    } else if n >= 4 {
        _mm_storeu_ps(d, _mm_loadu_ps(s));
        _mm_storeu_ps(d.add(n - 4), _mm_loadu_ps(s.add(n - 4)));
    } else if n >= 2 {
        (d as *mut u64).write_unaligned((s as *const u64).read_unaligned());
        (d.add(n - 2) as *mut u64).write_unaligned((s.add(n - 2) as *const u64).read_unaligned());
    } else if n == 1 {
        *d = *s;
    }
}

/// `dst.fill(0.0)` as [`copy_avx2`] does copies.
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
pub unsafe fn zero_avx2(dst: &mut [f32]) {
    use std::arch::x86_64::*;
    let n = dst.len();
    if n > 32 {
        dst.fill(0.0);
        return;
    }
    let d = dst.as_mut_ptr();
    if n >= 8 {
        let z = _mm256_setzero_ps();
        _mm256_storeu_ps(d, z);
        if n >= 16 {
            _mm256_storeu_ps(d.add(8), z);
        }
        if n >= 24 {
            _mm256_storeu_ps(d.add(16), z);
        }
        if n == 32 {
            _mm256_storeu_ps(d.add(24), z);
        }
        if !n.is_multiple_of(8) {
            _mm256_storeu_ps(d.add(n - 8), z);
        }
    } else if n >= 4 {
        _mm_storeu_ps(d, _mm_setzero_ps());
        _mm_storeu_ps(d.add(n - 4), _mm_setzero_ps());
    } else if n >= 2 {
        (d as *mut u64).write_unaligned(0);
        (d.add(n - 2) as *mut u64).write_unaligned(0);
    } else if n == 1 {
        *d = 0.0;
    }
}

/// How a kernel body copies and clears short runs of `f32` (a type parameter, so each
/// compiled copy of the body inlines its own moves).
pub trait Moves {
    /// `dst.copy_from_slice(src)`.
    fn copy(dst: &mut [f32], src: &[f32]);
    /// `dst.fill(0.0)`.
    fn zero(dst: &mut [f32]);
    /// `dst[j] = src[2 * j]` (a stride-2 convolution's input row): `src` holds at least
    /// `2 * dst.len() - 1` elements.
    #[inline(always)]
    fn copy_every2(dst: &mut [f32], src: &[f32]) {
        for (j, v) in dst.iter_mut().enumerate() {
            *v = src[2 * j];
        }
    }
}

/// Moves through the standard library.
pub struct PlainMoves;

impl Moves for PlainMoves {
    #[inline(always)]
    fn copy(dst: &mut [f32], src: &[f32]) {
        dst.copy_from_slice(src)
    }
    #[inline(always)]
    fn zero(dst: &mut [f32]) {
        dst.fill(0.0)
    }
}

/// Masked AVX-512 moves; only used inside functions compiled for AVX-512 on CPUs that have it.
#[cfg(target_arch = "x86_64")]
pub struct Avx512Moves;

#[cfg(target_arch = "x86_64")]
impl Moves for Avx512Moves {
    #[inline(always)]
    fn copy(dst: &mut [f32], src: &[f32]) {
        // SAFETY: this type is only used by code paths taken when `has_avx512()` holds.
        unsafe { copy_avx512(dst, src) }
    }
    #[inline(always)]
    fn zero(dst: &mut [f32]) {
        // SAFETY: as above.
        unsafe { zero_avx512(dst) }
    }
    #[inline(always)]
    fn copy_every2(dst: &mut [f32], src: &[f32]) {
        // SAFETY: as above.
        unsafe { copy_every2_avx512(dst, src) }
    }
}

/// AVX2 moves; only used inside functions compiled for AVX2 on CPUs that have it.
#[cfg(target_arch = "x86_64")]
pub struct Avx2Moves;

#[cfg(target_arch = "x86_64")]
impl Moves for Avx2Moves {
    #[inline(always)]
    fn copy(dst: &mut [f32], src: &[f32]) {
        // SAFETY: this type is only used by code paths taken when `has_avx2()` holds.
        unsafe { copy_avx2(dst, src) }
    }
    #[inline(always)]
    fn zero(dst: &mut [f32]) {
        // SAFETY: as above.
        unsafe { zero_avx2(dst) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every stride-2 copy picks the even elements, for lengths around whole registers and
    /// sources that end right after the last element picked, or later.
    #[test]
    fn copy_every2_takes_the_even_elements() {
        let src: Vec<f32> = (0..200).map(|i| i as f32 * 0.5 - 3.0).collect();
        for n in [0usize, 1, 2, 15, 16, 17, 31, 32, 33, 64, 70] {
            for extra in [0, 1, 5] {
                let s = &src[..(2 * n).saturating_sub(1) + extra];
                let want: Vec<f32> = (0..n).map(|j| s[2 * j]).collect();
                let mut got = vec![f32::NAN; n + 3];
                PlainMoves::copy_every2(&mut got[..n], s);
                assert_eq!(&got[..n], &want[..], "portable, {n} {extra}");
                #[cfg(target_arch = "x86_64")]
                if has_avx512() {
                    let mut got = vec![f32::NAN; n + 3];
                    Avx512Moves::copy_every2(&mut got[..n], s);
                    assert_eq!(&got[..n], &want[..], "avx512, {n} {extra}");
                    assert!(got[n..].iter().all(|v| v.is_nan()), "wrote past the end");
                }
            }
        }
    }

    /// `copy_streaming` over pieces of 1 MiB, from a source and into a destination that start
    /// off a line, with a length that ends inside one: every element, nothing past the end.
    #[test]
    fn copy_streaming_copies_every_element() {
        let n = (3 << 18) + 37;
        let src: Vec<f32> = (0..n + 3).map(|i| i as f32 * 0.25 - 7.0).collect();
        let mut dst = vec![f32::NAN; n + 8];
        super::copy_streaming(&mut dst[5..5 + n], &src[3..3 + n]);
        assert!(dst[5..5 + n]
            .iter()
            .zip(&src[3..])
            .all(|(a, b)| a.to_bits() == b.to_bits()));
        assert!(dst[..5].iter().chain(&dst[5 + n..]).all(|v| v.is_nan()));
    }

    /// `scale_nt`, and `ScaleNt` written a few lines at a time (0 to 3 per call, then
    /// `finish`), at every alignment and for lengths around whole lines: the scaled values in
    /// the window (head and tail by masked stores, the middle streamed), nothing outside it.
    #[test]
    fn scale_nt_any_alignment_and_length() {
        let src: Vec<f32> = (0..80).map(|i| i as f32 - 20.5).collect();
        let mut buf = vec![0f32; 128];
        for (off, len, per) in
            (0..16).flat_map(|o| (0..=80).flat_map(move |l| (0..5).map(move |p| (o, l, p))))
        {
            buf.fill(7.0);
            // The window starts `off` floats past a 64-byte boundary.
            let base = buf.as_ptr().align_offset(64);
            let start = base + off;
            if start + len > buf.len() {
                continue;
            }
            {
                let (dst, src) = (&mut buf[start..start + len], &src[..len]);
                if per == 4 {
                    super::scale_nt(dst, src, 0.5);
                } else {
                    let mut w = super::ScaleNt::new(dst, src, 0.5);
                    for _ in 0..2 {
                        w.lines(per);
                    }
                    w.finish();
                }
                super::stream_fence();
            }
            for (i, &v) in buf.iter().enumerate() {
                let want = if (start..start + len).contains(&i) {
                    src[i - start] * 0.5
                } else {
                    7.0
                };
                assert_eq!(
                    v, want,
                    "offset {off}, length {len}, {per} lines a call, element {i}"
                );
            }
        }
    }
}
