//! Row sums and the hottest loops of [`super::math`], with hand-written AVX-512 forms that give
//! the same bits as the portable ones.
//!
//! **Row sums** ([`row_dev_sums`], [`exp_sub_sum`]) add element `i` of a row into
//! `f32` lane `i % 64` (four AVX-512 registers, so consecutive registers go into independent
//! chains of additions), and every [`SUM_BLOCK`] elements add those lanes into 64 `f64` lanes,
//! which a fixed tree adds at the end. So no lane adds more than 16 values in `f32` whatever the
//! row's length (an error of at most about `16 ε` of the sum of the terms' magnitudes: a
//! relative error for the terms that do not cancel, the squares and the exponentials), one
//! addition per 16 elements does the work of the `f64` conversions and additions that a sum
//! all in `f64` would need, and the order is fixed: the same bits for any thread count and in
//! every compiled copy. Layer norm's sums that cancel (the row and its deviations) come out
//! exact enough as corrected moments (see [`row_dev_sums`] and [`row_moments`]).
//!
//! **`exp`**: the portable functions of [`super::math`] are scalar code that the compiler
//! vectorizes; for `exp` it cannot see that the final scaling by `2^n` (eight integer and float
//! operations, in two steps so that denormal results round once) is one `vscalefps`, which
//! scales by a power of two with one rounding, denormals and overflow included. [`exp`] here is
//! the same algorithm as [`super::math::exp`], operation for operation, with that one
//! instruction in place of the two-step scale: 16 vector operations per 16 values instead of 30.
//! Its results are the same bits (checked over every exponent range, denormal results,
//! infinities and NaN by the tests below). [`sigmoid`] is `math`'s the same way, [`gelu_erf`]
//! is `math`'s operation for operation with one `vpermps` per read of its coefficient table,
//! and [`map_fast`] runs the three over slices for the elementwise engine, [`fused`] a binary
//! op of them (and a sum) in one loop for its fused instructions. The row loops
//! here run four registers at a time: one register per iteration leaves the core waiting on
//! each `exp`'s chain of dependent operations.

use super::math;

/// `f32` lanes of a row sum.
pub const SUM_LANES: usize = 64;
/// Elements of a row after which the `f32` lanes are added into the `f64` lanes.
pub const SUM_BLOCK: usize = 16 * SUM_LANES;

/// The fixed tree that adds `N` (a power of two) `f64` lanes: `v[i] += v[i + w]` for
/// `w` = N/2, ..., 1; also the row sums' tree of [`super::reduce`].
#[inline(always)]
pub(crate) fn tree<const N: usize>(v: &mut [f64; N]) -> f64 {
    let mut w = N;
    while w > 1 {
        w /= 2;
        for i in 0..w {
            v[i] += v[i + w];
        }
    }
    v[0]
}

/// The portable form of the row sums: `acc = step(acc, x[i])` on lane `i % 64`.
#[inline(always)]
fn blocked(x: &[f32], step: impl Fn(f32, f32) -> f32) -> f64 {
    let mut wide = [0f64; SUM_LANES];
    for blk in x.chunks(SUM_BLOCK) {
        let mut acc = [0f32; SUM_LANES];
        for (i, &v) in blk.iter().enumerate() {
            acc[i % SUM_LANES] = step(acc[i % SUM_LANES], v);
        }
        for (w, &a) in wide.iter_mut().zip(&acc) {
            *w += a as f64;
        }
    }
    tree(&mut wide)
}

/// `(Σ d, Σ d²)` over a row for `d = x[i] - m`, each `d` rounded once and each square added by
/// one fused multiply-add, in the order of the row sums: the corrected two-pass mean and
/// variance (`mean = m + Σd / n`, `var = (Σd² - (Σd)² / n) / n`), exact but for the rounding of
/// the deviations, whatever the error of the estimate `m`.
#[inline(always)]
pub fn row_dev_sums(x: &[f32], m: f32) -> (f64, f64) {
    #[cfg(target_arch = "x86_64")]
    if super::simd::has_avx512() {
        // SAFETY: as above.
        return unsafe { avx512::dev_sums(x, m) };
    }
    (
        blocked(x, |a, v| a + (v - m)),
        blocked(x, |a, v| {
            let d = v - m;
            math::fma(d, d, a)
        }),
    )
}

/// Layer norm's mean and variance from a first mean `m1` and the sums of [`row_dev_sums`]
/// about it over `n` elements: `(m1 + Σd/n, (Σd² - (Σd)²/n)/n)`, or `None` where an input is
/// not finite (an infinity or NaN in the row, or `f32` lane sums that overflowed), for the
/// caller's exact fallback.
#[inline(always)]
pub fn corrected_moments(m1: f32, (sd, sq): (f64, f64), n: f64) -> Option<(f64, f64)> {
    (m1.is_finite() && sd.is_finite() && sq.is_finite())
        .then(|| (m1 as f64 + sd / n, ((sq - sd * sd / n) / n).max(0.0)))
}

/// Layer norm's mean and variance of a row (`n` its length), in one pass where the row allows:
/// the deviations are taken from a shift, the mean of the row's first 16 values, and
/// [`corrected_moments`] makes the mean and variance of their sums. Where the mean found is
/// further than the row's spread from that shift (the deviations' squares would then be
/// large against the variance and their rounding would show), a second pass takes the
/// deviations from that mean instead, as the corrected two-pass moments do. `None` as
/// [`corrected_moments`] gives it (an infinity or NaN in the row).
#[inline(always)]
pub fn row_moments(x: &[f32]) -> Option<(f64, f64)> {
    let n = x.len() as f64;
    let head = &x[..x.len().min(16)];
    let k = (head.iter().map(|&v| v as f64).sum::<f64>() / head.len().max(1) as f64) as f32;
    let (m, var) = corrected_moments(k, row_dev_sums(x, k), n)?;
    let d = m - k as f64;
    if d * d <= var {
        return Some((m, var));
    }
    let m1 = m as f32;
    corrected_moments(m1, row_dev_sums(x, m1), n)
}

/// Layer norm's output row, `out[i] = ((x[i] - m) * r) * w[i] + b[i]` (each operation rounded,
/// in that order; a missing `w` or `b` leaves its operation out), and the largest of the
/// results that are not NaN (`-inf` if none is): the row's maximum for the softmax after it,
/// found as the row is written. A row with a NaN is the caller's to check (its softmax sum is
/// NaN). `x`, `out` and the given `w`, `b` have the same length.
#[inline(always)]
pub fn normalize_max(
    x: &[f32],
    (m, r): (f32, f32),
    w: Option<&[f32]>,
    b: Option<&[f32]>,
    out: &mut [f32],
) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if super::simd::has_avx512() {
        // SAFETY: as above.
        return unsafe { avx512::normalize_max(x, (m, r), w, b, out) };
    }
    normalize(x, (m, r), w, b, out);
    out.iter()
        .fold(f32::NEG_INFINITY, |a, &v| if v > a { v } else { a })
}

/// [`normalize_max`] without the maximum: the portable loops, which the compiler vectorizes.
#[inline(always)]
pub fn normalize(
    x: &[f32],
    (m, r): (f32, f32),
    w: Option<&[f32]>,
    b: Option<&[f32]>,
    out: &mut [f32],
) {
    match (w, b) {
        (Some(w), Some(b)) => {
            for ((o, &v), (&g, &c)) in out.iter_mut().zip(x).zip(w.iter().zip(b)) {
                *o = (v - m) * r * g + c;
            }
        }
        (Some(w), None) => {
            for ((o, &v), &g) in out.iter_mut().zip(x).zip(w) {
                *o = (v - m) * r * g;
            }
        }
        (None, Some(b)) => {
            for ((o, &v), &c) in out.iter_mut().zip(x).zip(b) {
                *o = (v - m) * r + c;
            }
        }
        (None, None) => {
            for (o, &v) in out.iter_mut().zip(x) {
                *o = (v - m) * r;
            }
        }
    }
}

/// `out[i] = math::exp(x[i] - m)`, and the sum of `out` in the order of the row sums, for `m`
/// at least every `x[i]` (the row's maximum) or NaN. `x` and `out` have the same length.
/// `tick` is called after each 64 elements of the AVX-512 loop (never by the portable one): a
/// caller hides other work there, spread over the loop.
#[inline(always)]
pub fn exp_sub_sum(x: &[f32], m: f32, out: &mut [f32], tick: impl FnMut()) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if super::simd::has_avx512() {
        // SAFETY: as above.
        return unsafe { avx512::exp_sub_sum(x, m, out, tick) };
    }
    let _ = tick;
    for (o, &v) in out.iter_mut().zip(x) {
        *o = math::exp(v - m);
    }
    blocked(out, |a, v| a + v)
}

#[cfg(target_arch = "x86_64")]
pub use avx512::{exp, gelu_erf, sigmoid, silu, tanh};

/// `out[i] = math::exp(x[i])`, `math::sigmoid`, `math::gelu_erf` or `math::silu` (the same
/// bits), in the
/// AVX-512 forms: `None` (nothing done) for another function or on a CPU without AVX-512.
pub fn map_fast(f: Fast, out: &mut [f32], x: &[f32]) -> Option<()> {
    #[cfg(target_arch = "x86_64")]
    if super::simd::has_avx512() {
        // SAFETY: the CPU has AVX-512F (checked just now).
        unsafe {
            match f {
                Fast::Exp => avx512::map(out, x, |v| exp(v)),
                Fast::Sigmoid => avx512::map(out, x, |v| sigmoid(v)),
                Fast::GeluErf => avx512::map(out, x, |v| gelu_erf(v)),
                Fast::Silu => avx512::map(out, x, |v| silu(v)),
                Fast::Tanh => avx512::map(out, x, |v| tanh(v)),
            }
        }
        return Some(());
    }
    let _ = (f, out, x);
    None
}

/// The arithmetic of [`fused`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arith {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b`.
    Div,
}

/// `out[i] = (fa(a[i]) op fb(b[i])) + c[i]` (without the `+ c[i]` when `c` is `None`), where
/// `fa`, `fb` are [`Fast`] functions or the identity (`None`), in one AVX-512 loop: the
/// elementwise engine's fused instruction, the same bits as the steps one at a time (every
/// operation rounds on its own, as in the scalar code). `None` (nothing done) on a CPU without
/// AVX-512. The slices are cut to the shortest.
pub fn fused(
    out: &mut [f32],
    (a, fa): (&[f32], Option<Fast>),
    op: Arith,
    (b, fb): (&[f32], Option<Fast>),
    c: Option<&[f32]>,
) -> Option<()> {
    #[cfg(target_arch = "x86_64")]
    if super::simd::has_avx512() {
        // SAFETY: the CPU has AVX-512F (checked just now).
        unsafe { avx512::fused(out, (a, fa), op, (b, fb), c) };
        return Some(());
    }
    let _ = (out, a, fa, op, b, fb, c);
    None
}

/// The functions of [`map_fast`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fast {
    /// `math::exp`.
    Exp,
    /// `math::sigmoid`.
    Sigmoid,
    /// `math::gelu_erf`.
    GeluErf,
    /// `math::silu`.
    Silu,
    /// `math::tanh`.
    Tanh,
}

/// The AVX-512 forms.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{tree, SUM_BLOCK};
    use std::arch::x86_64::*;

    /// `e^x` on 16 lanes, bitwise equal to [`super::math::exp`] on each lane: `exp_core`
    /// of `x` clamped at 89, and a NaN `x` returned as it is.
    ///
    /// # Safety
    /// The CPU must have AVX-512F.
    #[target_feature(enable = "avx512f")]
    #[inline]
    pub unsafe fn exp(x: __m512) -> __m512 {
        // `min` returns its second operand when either is NaN: a NaN `x` goes on, and is
        // replaced by itself at the end.
        let y = exp_core(_mm512_min_ps(_mm512_set1_ps(89.0), x));
        let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x);
        _mm512_mask_mov_ps(y, nan, x)
    }

    /// [`exp`]'s bits for `x ≤ 89` or a quiet NaN, without its clamp at 89 and its select of a
    /// NaN: a quiet NaN comes out of the arithmetic as itself. That holds because nothing here
    /// negates a NaN: `r = x - n ln2` (Cody-Waite) is a multiply-add by the negated constants,
    /// not a negated multiply-add (which flips a NaN's sign depending on the operand order the
    /// compiler picks), and every NaN operand along the way has `x`'s bits. Three operations
    /// fewer for the softmax's `x - max` and the sigmoid's `-|x|`, never positive.
    ///
    /// # Safety
    /// The CPU must have AVX-512F.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn exp_core(x: __m512) -> __m512 {
        use super::math::{LN2_HI, LN2_LO, ROUND_MAGIC as MAGIC};
        use std::f32::consts::LOG2_E as LOG2E;
        let s = _mm512_set1_ps;
        // `max` gives its second operand when either is NaN: the NaN goes on.
        let xc = _mm512_max_ps(s(-104.0), x);
        // n = round(x log2 e) as a float, from one fused rounding with the magic constant.
        let t = _mm512_fmadd_ps(xc, s(LOG2E), s(MAGIC));
        let nf = _mm512_sub_ps(t, s(MAGIC));
        // `fma(-n, LN2_LO, fma(-n, LN2_HI, x))`, as `math::exp`.
        let r = _mm512_fmadd_ps(nf, s(-LN2_LO), _mm512_fmadd_ps(nf, s(-LN2_HI), xc));
        // p * 2^n, rounded once (what `math::scale2` does in two exact steps).
        _mm512_scalef_ps(poly(r), nf)
    }

    /// The polynomial of `math::exp_poly`, in the same order.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn poly(r: __m512) -> __m512 {
        let s = _mm512_set1_ps;
        let [q0, q1, q2, q3, q4] = super::math::EXP_Q.map(|c| s(c));
        let r2 = _mm512_mul_ps(r, r);
        let tail = _mm512_fmadd_ps(
            _mm512_fmadd_ps(q4, r2, _mm512_fmadd_ps(q3, r, q2)),
            r2,
            _mm512_fmadd_ps(q1, r, q0),
        );
        _mm512_fmadd_ps(r, _mm512_fmadd_ps(r, tail, s(1.0)), s(1.0))
    }

    /// `math::sigmoid` on 16 lanes, bitwise (NaN in, NaN out).
    ///
    /// # Safety
    /// The CPU must have AVX-512F.
    #[target_feature(enable = "avx512f")]
    #[inline]
    pub unsafe fn sigmoid(x: __m512) -> __m512 {
        let one = _mm512_set1_ps(1.0);
        // -|x|: the sign bit set (an integer `or`: `_mm512_or_ps` needs AVX-512DQ).
        let sign = _mm512_set1_epi32(i32::MIN);
        let e = exp_core(_mm512_castsi512_ps(_mm512_or_si512(
            _mm512_castps_si512(x),
            sign,
        )));
        let s = _mm512_div_ps(one, _mm512_add_ps(one, e));
        let neg = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_setzero_ps());
        _mm512_mask_mov_ps(s, neg, _mm512_mul_ps(e, s))
    }

    /// `math::silu` on 16 lanes, bitwise: `x * sigmoid(x)`.
    ///
    /// # Safety
    /// The CPU must have AVX-512F.
    #[target_feature(enable = "avx512f")]
    #[inline]
    pub unsafe fn silu(x: __m512) -> __m512 {
        // SAFETY: the caller has AVX-512F.
        _mm512_mul_ps(x, unsafe { sigmoid(x) })
    }

    /// `math::tanh` on 16 lanes, bitwise (NaN in, NaN out), operation for operation:
    /// `expm1(2c) / (expm1(2c) + 2)` for `x` clamped to `c` in `[-9, 9]`, with `expm1`'s
    /// Taylor polynomial below 0.35 in magnitude (as separate multiplies and adds, as the
    /// portable code rounds them) and `exp(t) - 1` above.
    ///
    /// # Safety
    /// The CPU must have AVX-512F.
    #[target_feature(enable = "avx512f")]
    #[inline]
    pub unsafe fn tanh(x: __m512) -> __m512 {
        let s = _mm512_set1_ps;
        // A NaN `x` becomes -9 here and is put back at the end.
        let c = _mm512_min_ps(_mm512_max_ps(x, s(-9.0)), s(9.0));
        let t = _mm512_mul_ps(s(2.0), c);
        let mut p = _mm512_mul_ps(t, s(1.0 / 40320.0));
        for k in [
            1.0 / 5040.0,
            1.0 / 720.0,
            1.0 / 120.0,
            1.0 / 24.0,
            1.0 / 6.0,
            0.5,
        ] {
            p = _mm512_mul_ps(t, _mm512_add_ps(s(k), p));
        }
        let small = _mm512_mul_ps(t, _mm512_add_ps(s(1.0), p));
        // SAFETY: the caller has AVX-512F.
        let big = _mm512_sub_ps(unsafe { exp(t) }, s(1.0));
        let near = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(_mm512_abs_ps(t), s(0.35));
        let e = _mm512_mask_mov_ps(big, near, small);
        let y = _mm512_div_ps(e, _mm512_add_ps(e, s(2.0)));
        let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x);
        _mm512_mask_mov_ps(y, nan, x)
    }

    /// `math::gelu_erf` on 16 lanes, bitwise (NaN in, NaN out), operation for operation: the
    /// interval index `k` is the low four bits of `t`, which `vpermps` reads as its lane
    /// index, so each coefficient of `F` is one permute of a register of 16.
    ///
    /// # Safety
    /// The CPU must have AVX-512F.
    #[target_feature(enable = "avx512f")]
    #[inline]
    pub unsafe fn gelu_erf(x: __m512) -> __m512 {
        use super::math::{GELU_F, ROUND_MAGIC};
        let s = _mm512_set1_ps;
        let a = _mm512_abs_ps(x);
        // `min` gives its second operand for a NaN `a`, as `f32::min` does.
        let ac = _mm512_min_ps(a, s(7.5));
        let t = _mm512_fmadd_ps(ac, s(2.0), s(ROUND_MAGIC));
        let r = _mm512_fmadd_ps(_mm512_sub_ps(t, s(ROUND_MAGIC)), s(-0.5), ac);
        let k = _mm512_castps_si512(t);
        // SAFETY: each row of `GELU_F` holds 16 floats.
        let c = |j: usize| _mm512_permutexvar_ps(k, unsafe { _mm512_loadu_ps(GELU_F[j].as_ptr()) });
        let mut f = c(5);
        for j in (0..5).rev() {
            f = _mm512_fmadd_ps(f, r, c(j));
        }
        let g = _mm512_fmadd_ps(a, f, _mm512_mul_ps(s(0.5), x));
        // `g | (x & sign)`: the sign of `x` on the result (0xF8: `A | (B & C)`).
        let sign = _mm512_set1_epi32(i32::MIN);
        _mm512_castsi512_ps(_mm512_ternarylogic_epi32::<0xF8>(
            _mm512_castps_si512(g),
            _mm512_castps_si512(x),
            sign,
        ))
    }

    /// `out[i] = f(x[i])` over two slices of the same length, four registers at a time (one
    /// per iteration leaves the core waiting on each call's chain of dependent operations),
    /// then 16 lanes at a time, then a masked last step.
    #[target_feature(enable = "avx512f")]
    #[inline]
    pub(super) unsafe fn map(out: &mut [f32], x: &[f32], f: impl Fn(__m512) -> __m512) {
        let n = out.len().min(x.len());
        let (p, o) = (x.as_ptr(), out.as_mut_ptr());
        let mut i = 0;
        while i + 64 <= n {
            // SAFETY: `i + 64 <= n` for both.
            unsafe {
                let a = f(_mm512_loadu_ps(p.add(i)));
                let b = f(_mm512_loadu_ps(p.add(i + 16)));
                let c = f(_mm512_loadu_ps(p.add(i + 32)));
                let d = f(_mm512_loadu_ps(p.add(i + 48)));
                _mm512_storeu_ps(o.add(i), a);
                _mm512_storeu_ps(o.add(i + 16), b);
                _mm512_storeu_ps(o.add(i + 32), c);
                _mm512_storeu_ps(o.add(i + 48), d);
            }
            i += 64;
        }
        while i + 16 <= n {
            // SAFETY: `i + 16 <= n` for both.
            unsafe { _mm512_storeu_ps(o.add(i), f(_mm512_loadu_ps(p.add(i)))) };
            i += 16;
        }
        if i < n {
            // SAFETY: within both.
            let (mask, v) = unsafe { load_tail(x, i, n) };
            unsafe { _mm512_mask_storeu_ps(o.add(i), mask, f(v)) };
        }
    }

    /// [`pre`]'s code of `f`: 0 for the identity.
    fn code(f: Option<super::Fast>) -> u8 {
        use super::Fast;
        match f {
            None => 0,
            Some(Fast::Exp) => 1,
            Some(Fast::Sigmoid) => 2,
            Some(Fast::GeluErf) => 3,
            Some(Fast::Silu) => 4,
            Some(Fast::Tanh) => 5,
        }
    }

    /// The function of code `F` (see [`code`]) at `x`: a constant parameter, so that each
    /// instance of [`fused_k`] is straight-line code.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn pre<const F: u8>(x: __m512) -> __m512 {
        // SAFETY: the caller has AVX-512F.
        unsafe {
            match F {
                1 => exp(x),
                2 => sigmoid(x),
                3 => gelu_erf(x),
                4 => silu(x),
                5 => tanh(x),
                _ => x,
            }
        }
    }

    /// [`super::fused`]: one instance per pair of functions, picked by `fa` here and by `fb`
    /// in [`fused_a`].
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn fused(
        out: &mut [f32],
        (a, fa): (&[f32], Option<super::Fast>),
        op: super::Arith,
        (b, fb): (&[f32], Option<super::Fast>),
        c: Option<&[f32]>,
    ) {
        let fb = code(fb);
        // SAFETY (each): the caller has AVX-512F.
        unsafe {
            match code(fa) {
                0 => fused_a::<0>(out, a, op, (b, fb), c),
                1 => fused_a::<1>(out, a, op, (b, fb), c),
                2 => fused_a::<2>(out, a, op, (b, fb), c),
                3 => fused_a::<3>(out, a, op, (b, fb), c),
                4 => fused_a::<4>(out, a, op, (b, fb), c),
                _ => fused_a::<5>(out, a, op, (b, fb), c),
            }
        }
    }

    /// [`fused`] with the function of code `FA` on `a`, picking the instance for `fb`'s code.
    #[target_feature(enable = "avx512f")]
    unsafe fn fused_a<const FA: u8>(
        out: &mut [f32],
        a: &[f32],
        op: super::Arith,
        (b, fb): (&[f32], u8),
        c: Option<&[f32]>,
    ) {
        // SAFETY (each): the caller has AVX-512F.
        unsafe {
            match fb {
                0 => fused_k::<FA, 0>(out, a, op, b, c),
                1 => fused_k::<FA, 1>(out, a, op, b, c),
                2 => fused_k::<FA, 2>(out, a, op, b, c),
                3 => fused_k::<FA, 3>(out, a, op, b, c),
                4 => fused_k::<FA, 4>(out, a, op, b, c),
                _ => fused_k::<FA, 5>(out, a, op, b, c),
            }
        }
    }

    /// [`super::fused`] with functions of codes `FA`, `FB`: two registers at a time (the
    /// functions' chains of dependent operations overlap), then a masked last step.
    #[target_feature(enable = "avx512f")]
    unsafe fn fused_k<const FA: u8, const FB: u8>(
        out: &mut [f32],
        a: &[f32],
        op: super::Arith,
        b: &[f32],
        c: Option<&[f32]>,
    ) {
        use super::Arith;
        let n = out.len().min(a.len()).min(b.len());
        let n = c.map_or(n, |c| n.min(c.len()));
        let (pa, pb, o) = (a.as_ptr(), b.as_ptr(), out.as_mut_ptr());
        let pc = c.map(<[f32]>::as_ptr);
        // One register of results at element `i`, under `mask` (lanes outside it load zero):
        // a macro, not a closure, which the compiler does not inline.
        macro_rules! one {
            ($i:expr, $mask:expr) => {{
                let (i, mask): (usize, __mmask16) = ($i, $mask);
                // SAFETY: the masked lanes lie below `n`, within every operand.
                unsafe {
                    let x = pre::<FA>(_mm512_maskz_loadu_ps(mask, pa.add(i)));
                    let y = pre::<FB>(_mm512_maskz_loadu_ps(mask, pb.add(i)));
                    let r = match op {
                        Arith::Add => _mm512_add_ps(x, y),
                        Arith::Sub => _mm512_sub_ps(x, y),
                        Arith::Mul => _mm512_mul_ps(x, y),
                        Arith::Div => _mm512_div_ps(x, y),
                    };
                    match pc {
                        Some(pc) => _mm512_add_ps(r, _mm512_maskz_loadu_ps(mask, pc.add(i))),
                        None => r,
                    }
                }
            }};
        }
        let mut i = 0;
        while i + 32 <= n {
            let (u, v) = (one!(i, !0), one!(i + 16, !0));
            // SAFETY: `i + 32 <= n`.
            unsafe {
                _mm512_storeu_ps(o.add(i), u);
                _mm512_storeu_ps(o.add(i + 16), v);
            }
            i += 32;
        }
        while i < n {
            let mask = tail_mask(i, n);
            let v = one!(i, mask);
            // SAFETY: the masked lanes lie within `out`.
            unsafe { _mm512_mask_storeu_ps(o.add(i), mask, v) };
            i += 16;
        }
    }

    /// The four `f32` accumulators of a row sum, added into the `f64` lanes every
    /// [`SUM_BLOCK`] elements.
    struct Acc {
        a: [__m512; 4],
        wide: [__m512d; 8],
    }

    impl Acc {
        #[inline(always)]
        fn new() -> Acc {
            // SAFETY: no preconditions beyond the feature the callers have.
            unsafe {
                Acc {
                    a: [_mm512_setzero_ps(); 4],
                    wide: [_mm512_setzero_pd(); 8],
                }
            }
        }

        /// Adds the `f32` lanes into the `f64` lanes (lane order: register `j`'s lanes 0-7, then
        /// 8-15, are `f64` registers `2j`, `2j + 1`) and clears them.
        #[inline]
        #[target_feature(enable = "avx512f")]
        fn flush(&mut self) {
            for j in 0..4 {
                let v = self.a[j];
                let lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
                let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
                self.wide[2 * j] = _mm512_add_pd(self.wide[2 * j], lo);
                self.wide[2 * j + 1] = _mm512_add_pd(self.wide[2 * j + 1], _mm512_cvtps_pd(hi));
                self.a[j] = _mm512_setzero_ps();
            }
        }

        /// The total, by the fixed tree of [`tree`] on registers: its steps of width 32, 16
        /// and 8 add whole registers, and the last three the halves of one.
        #[inline]
        #[target_feature(enable = "avx512f")]
        fn finish(mut self) -> f64 {
            self.flush();
            let w = &mut self.wide;
            for k in [4, 2, 1] {
                for i in 0..k {
                    w[i] = _mm512_add_pd(w[i], w[i + k]);
                }
            }
            let mut v = [0f64; 8];
            // SAFETY: `v` has room for 8 `f64`.
            unsafe { _mm512_storeu_pd(v.as_mut_ptr(), w[0]) };
            tree(&mut v)
        }
    }

    /// The lanes of the register at element `i` that lie below `n` (`i < n`), as a mask.
    #[inline(always)]
    fn tail_mask(i: usize, n: usize) -> __mmask16 {
        let k = (n - i).min(16);
        if k == 16 {
            !0
        } else {
            (1u16 << k) - 1
        }
    }

    /// The lanes of `x[i..]` that lie within `n`, as a mask, and the values loaded under it
    /// (zero elsewhere).
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn load_tail(x: &[f32], i: usize, n: usize) -> (__mmask16, __m512) {
        let mask = tail_mask(i, n);
        // SAFETY: the masked lanes lie within `x`.
        (mask, unsafe {
            _mm512_maskz_loadu_ps(mask, x.as_ptr().add(i))
        })
    }

    /// Row sums over `x` into `N` accumulator sets: `step(&mut acc, v)` takes each register of
    /// `x` (whole, or the masked lanes of a tail; a step's results in lanes outside the mask are
    /// dropped) and updates the `j`-th lane register of each set.
    #[inline(always)]
    unsafe fn sums<const N: usize>(x: &[f32], step: impl Fn(&mut [__m512; N], __m512)) -> [f64; N] {
        let mut acc: [Acc; N] = std::array::from_fn(|_| Acc::new());
        for blk in x.chunks(SUM_BLOCK) {
            let n = blk.len();
            let p = blk.as_ptr();
            let mut i = 0;
            while i + 64 <= n {
                for j in 0..4 {
                    // SAFETY: `i + 64 <= n`.
                    let v = unsafe { _mm512_loadu_ps(p.add(i + 16 * j)) };
                    let mut a: [__m512; N] = std::array::from_fn(|k| acc[k].a[j]);
                    step(&mut a, v);
                    for k in 0..N {
                        acc[k].a[j] = a[k];
                    }
                }
                i += 64;
            }
            while i < n {
                let j = (i / 16) % 4;
                // SAFETY: within `blk`.
                let (mask, v) = unsafe { load_tail(blk, i, n) };
                let mut a: [__m512; N] = std::array::from_fn(|k| acc[k].a[j]);
                step(&mut a, v);
                for k in 0..N {
                    acc[k].a[j] = _mm512_mask_mov_ps(acc[k].a[j], mask, a[k]);
                }
                i += 16;
            }
            for a in &mut acc {
                // SAFETY: the callers have AVX-512F.
                unsafe { a.flush() };
            }
        }
        // SAFETY: as above.
        acc.map(|a| unsafe { a.finish() })
    }

    /// [`super::row_dev_sums`].
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn dev_sums(x: &[f32], m: f32) -> (f64, f64) {
        let mv = _mm512_set1_ps(m);
        // SAFETY: as above.
        let [s, q] = unsafe {
            sums(x, |[s, q], v| {
                let d = _mm512_sub_ps(v, mv);
                *s = _mm512_add_ps(*s, d);
                *q = _mm512_fmadd_ps(d, d, *q);
            })
        };
        (s, q)
    }

    /// [`super::normalize_max`]: four maxima side by side, each kept by one `vmaxps` whose
    /// NaN operand loses.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn normalize_max(
        x: &[f32],
        (m, r): (f32, f32),
        w: Option<&[f32]>,
        b: Option<&[f32]>,
        out: &mut [f32],
    ) -> f32 {
        let n = x.len().min(out.len());
        let n = w.map_or(n, |w| n.min(w.len()));
        let n = b.map_or(n, |b| n.min(b.len()));
        let (mv, rv) = (_mm512_set1_ps(m), _mm512_set1_ps(r));
        let (px, po) = (x.as_ptr(), out.as_mut_ptr());
        // One register of results at element `i`, under `mask`: loads of lanes outside it
        // are not made (zero).
        let y = |i: usize, mask: __mmask16| {
            // SAFETY: the masked lanes lie below `n`, within every operand.
            unsafe {
                let v = _mm512_maskz_loadu_ps(mask, px.add(i));
                let mut y = _mm512_mul_ps(_mm512_sub_ps(v, mv), rv);
                if let Some(w) = w {
                    y = _mm512_mul_ps(y, _mm512_maskz_loadu_ps(mask, w.as_ptr().add(i)));
                }
                if let Some(b) = b {
                    y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(mask, b.as_ptr().add(i)));
                }
                y
            }
        };
        let mut acc = [_mm512_set1_ps(f32::NEG_INFINITY); 4];
        let mut i = 0;
        while i + 64 <= n {
            for (j, a) in acc.iter_mut().enumerate() {
                let v = y(i + 16 * j, !0);
                // SAFETY: `i + 64 <= n`.
                unsafe { _mm512_storeu_ps(po.add(i + 16 * j), v) };
                // `vmaxps` returns its second operand where either is NaN.
                *a = _mm512_max_ps(v, *a);
            }
            i += 64;
        }
        while i < n {
            let mask = tail_mask(i, n);
            let v = y(i, mask);
            // SAFETY: the masked lanes lie within `out`.
            unsafe { _mm512_mask_storeu_ps(po.add(i), mask, v) };
            acc[0] = _mm512_mask_max_ps(acc[0], mask, v, acc[0]);
            i += 16;
        }
        let a = _mm512_max_ps(_mm512_max_ps(acc[0], acc[1]), _mm512_max_ps(acc[2], acc[3]));
        _mm512_reduce_max_ps(a)
    }

    /// [`super::exp_sub_sum`].
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn exp_sub_sum(
        x: &[f32],
        m: f32,
        out: &mut [f32],
        mut tick: impl FnMut(),
    ) -> f64 {
        let n = x.len().min(out.len());
        let (x, out) = (&x[..n], &mut out[..n]);
        let mv = _mm512_set1_ps(m);
        let mut acc = Acc::new();
        for (bx, bo) in x.chunks(SUM_BLOCK).zip(out.chunks_mut(SUM_BLOCK)) {
            let n = bx.len();
            let (p, o) = (bx.as_ptr(), bo.as_mut_ptr());
            let mut i = 0;
            while i + 64 <= n {
                // Four independent `exp`s side by side.
                // SAFETY: `i + 64 <= n` for both.
                let e = unsafe {
                    [0, 1, 2, 3]
                        .map(|j| exp_core(_mm512_sub_ps(_mm512_loadu_ps(p.add(i + 16 * j)), mv)))
                };
                for (j, e) in e.into_iter().enumerate() {
                    unsafe { _mm512_storeu_ps(o.add(i + 16 * j), e) };
                    acc.a[j] = _mm512_add_ps(acc.a[j], e);
                }
                tick();
                i += 64;
            }
            while i < n {
                let j = (i / 16) % 4;
                // SAFETY: within the block.
                let (mask, v) = unsafe { load_tail(bx, i, n) };
                let e = exp_core(_mm512_sub_ps(v, mv));
                unsafe { _mm512_mask_storeu_ps(o.add(i), mask, e) };
                acc.a[j] = _mm512_add_ps(acc.a[j], _mm512_maskz_mov_ps(mask, e));
                i += 16;
            }
            acc.flush();
        }
        acc.finish()
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use std::arch::x86_64::*;

    fn has() -> bool {
        crate::fast::simd::has_avx512()
    }

    /// Every input below, through both forms, lane by lane.
    fn check(xs: &[f32]) {
        for c in xs.chunks(16) {
            let mut buf = [0f32; 16];
            buf[..c.len()].copy_from_slice(c);
            let mut out = [0f32; 16];
            // SAFETY: checked by the caller (`has()`).
            unsafe { _mm512_storeu_ps(out.as_mut_ptr(), exp(_mm512_loadu_ps(buf.as_ptr()))) };
            for (&x, &y) in c.iter().zip(&out) {
                let want = math::exp(x);
                assert!(
                    y.to_bits() == want.to_bits() || (y.is_nan() && want.is_nan()),
                    "exp({x:e}): {y:e} vs math::exp {want:e}"
                );
            }
        }
    }

    #[test]
    fn exp_is_bitwise_math_exp() {
        if !has() {
            return;
        }
        // A dense sweep of [-110, 95] (denormal results below -87.3, inf above 88.7), the
        // edges of the clamp and of the scale's steps, and the special values.
        let mut xs: Vec<f32> = (0..2_000_000)
            .map(|i| -110.0 + i as f32 * 1.025e-4)
            .collect();
        let mut bits = 0x3f80_0000u32;
        while bits < 0x4300_0000 {
            let v = f32::from_bits(bits);
            xs.extend([v, -v]);
            bits += 977;
        }
        xs.extend([
            0.0,
            -0.0,
            f32::MIN_POSITIVE,
            -87.336_54,
            -87.336_55,
            -103.972_08,
            -103.972_09,
            -104.0,
            88.722_83,
            88.722_84,
            89.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::MAX,
            f32::MIN,
        ]);
        check(&xs);
    }

    /// `sigmoid` and `gelu_erf` (and `exp`) through `map_fast` give `math`'s bits over a dense
    /// sweep of [-30, 30], the edges of their selects and clamps, tiny and huge magnitudes and
    /// the special values, for slice lengths that end in a partial register.
    #[test]
    fn fast_maps_are_bitwise_math() {
        if !has() {
            return;
        }
        let mut xs: Vec<f32> = (0..1_200_001).map(|i| -30.0 + i as f32 * 5e-5).collect();
        let mut bits = 0x0000_0001u32;
        while bits < 0x7f80_0000 {
            let v = f32::from_bits(bits);
            xs.extend([v, -v]);
            bits += 99_991;
        }
        xs.extend([
            0.0,
            -0.0,
            // GELU's clamp and interval edges.
            7.5,
            -7.5,
            7.500_001,
            -7.500_001,
            7.499_999,
            0.25,
            -0.25,
            0.250_000_02,
            0.75,
            -6.25,
            // tanh's clamp and the edge of its polynomial (|2x| < 0.35).
            9.0,
            -9.0,
            9.000_001,
            0.175,
            -0.175,
            f32::from_bits(0.175f32.to_bits() + 1),
            f32::from_bits(0.175f32.to_bits() - 1),
            1e-30,
            -1e-30,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            f32::MAX,
            f32::MIN,
            f32::MIN_POSITIVE,
        ]);
        type Scalar = fn(f32) -> f32;
        let cases: [(Fast, Scalar); 5] = [
            (Fast::Exp, math::exp),
            (Fast::Sigmoid, math::sigmoid),
            (Fast::GeluErf, math::gelu_erf),
            (Fast::Silu, math::silu),
            (Fast::Tanh, math::tanh),
        ];
        for (f, scalar) in cases {
            for len in [xs.len(), 7] {
                let x = &xs[xs.len() - len..];
                let mut out = vec![0f32; len];
                assert!(map_fast(f, &mut out, x).is_some());
                for (&v, &y) in x.iter().zip(&out) {
                    let want = scalar(v);
                    assert!(
                        y.to_bits() == want.to_bits() || (y.is_nan() && want.is_nan()),
                        "{f:?}({v:e}): {y:e} vs {want:e}"
                    );
                }
            }
        }
    }

    /// Rows of every length class: empty, within one register, a partial last register,
    /// exactly one block, and blocks with a tail.
    fn rows() -> Vec<Vec<f32>> {
        [
            0usize,
            1,
            5,
            16,
            17,
            63,
            64,
            100,
            1024,
            1031,
            2048 + 77,
            5000,
        ]
        .iter()
        .map(|&n| {
            (0..n)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.7 + (i % 7) as f32 * 1e-3)
                .collect()
        })
        .collect()
    }

    #[test]
    fn avx512_row_sums_are_the_portable_bits() {
        if !has() {
            return;
        }
        // Also rows whose `x - max` reach the denormal results and past them, and rows with a
        // NaN of either sign (`x - max` is then `x`'s NaN at that element and the maximum's
        // elsewhere), a -inf, a +inf, or only -inf (the softmax's special cases).
        let mut extra: Vec<Vec<f32>> = vec![(0..300).map(|i| -0.4 * i as f32).collect()];
        for v in [f32::NAN, -f32::NAN, f32::NEG_INFINITY, f32::INFINITY] {
            let mut r: Vec<f32> = (0..100).map(|i| i as f32 * 0.3 - 10.0).collect();
            r[37] = v;
            extra.push(r);
        }
        extra.push(vec![f32::NEG_INFINITY; 40]);
        for x in rows().into_iter().chain(extra) {
            let n = x.len();
            let m = 0.37f32;
            // SAFETY: checked above.
            let (s, q) = unsafe { avx512::dev_sums(&x, m) };
            let want = blocked(&x, |a, v| math::fma(v - m, v - m, a));
            assert_eq!(q.to_bits(), want.to_bits(), "sq dev, n = {n}");
            let want = blocked(&x, |a, v| a + (v - m));
            assert_eq!(s.to_bits(), want.to_bits(), "dev sum, n = {n}");
            // Layer norm's rows, with and without weight and bias, and their maxima.
            let w: Vec<f32> = (0..n).map(|i| 0.5 + (i % 13) as f32 * 0.1).collect();
            let b: Vec<f32> = (0..n).map(|i| (i % 5) as f32 * 0.3 - 0.6).collect();
            for (w, b) in [(None, None), (Some(&w[..]), None), (None, Some(&b[..]))]
                .into_iter()
                .chain([(Some(&w[..]), Some(&b[..]))])
            {
                let mut got = vec![0f32; n];
                let mx = unsafe { avx512::normalize_max(&x, (m, 1.7), w, b, &mut got) };
                let mut want = vec![0f32; n];
                normalize(&x, (m, 1.7), w, b, &mut want);
                assert!(
                    got.iter()
                        .zip(&want)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "normalize, n = {n}"
                );
                let want_max = want
                    .iter()
                    .filter(|v| !v.is_nan())
                    .fold(f32::NEG_INFINITY, |a, &v| a.max(v));
                assert_eq!(mx, want_max, "normalize's maximum, n = {n}");
            }
            // The maximum as the kernels find it: NaN if any element is.
            let mx = x.iter().copied().fold(f32::NEG_INFINITY, |m, v| {
                if m.is_nan() || v.is_nan() {
                    f32::NAN
                } else {
                    m.max(v)
                }
            });
            let want: Vec<f32> = x.iter().map(|&v| math::exp(v - mx)).collect();
            let mut got = vec![0f32; n];
            let e = unsafe { avx512::exp_sub_sum(&x, mx, &mut got, || ()) };
            assert!(got
                .iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits()));
            assert_eq!(
                e.to_bits(),
                blocked(&want, |a, v| a + v).to_bits(),
                "exp, n = {n}"
            );
        }
    }

    /// Layer norm's corrected moments, [`row_moments`] (deviations from the mean of the first
    /// 16 values, and a second pass from the mean found where that shift was far from it),
    /// are within `1e-6` of the row's spread of the `f64` mean, and the variance within `1e-6`
    /// relative, also for rows far from zero, with an outlier first or last, rising rows
    /// (whose first values are far from the mean: the second pass) and constant rows.
    #[test]
    fn corrected_moments_are_accurate() {
        let noise = |i: usize| ((i * 7919 % 1009) as f32 / 1009.0 - 0.5) * 2.0;
        let cases: Vec<Vec<f32>> = vec![
            (0..1024).map(noise).collect(),
            (0..1024).map(|i| 1000.0 + noise(i)).collect(),
            (0..3000).map(|i| -3.0e4 + 10.0 * noise(i)).collect(),
            (0..1024)
                .map(|i| if i == 0 { 1.0e6 } else { noise(i) })
                .collect(),
            (0..777)
                .map(|i| if i == 776 { -4.0e5 } else { 7.0 + noise(i) })
                .collect(),
            vec![3.25; 1024],
            (0..1024).map(|i| 5.0e3 + i as f32 * 0.25).collect(),
            (0..10).map(|i| 100.0 - i as f32).collect(),
        ];
        for x in cases {
            let n = x.len() as f64;
            let mean = x.iter().map(|&v| v as f64).sum::<f64>() / n;
            let var = x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
            let (m, v) = row_moments(&x).unwrap();
            assert!(
                (m - mean).abs() <= 1e-6 * var.sqrt() + 1e-7 * mean.abs() * f32::EPSILON as f64,
                "mean {m} vs {mean} (sd {})",
                var.sqrt()
            );
            assert!((v - var).abs() <= 1e-6 * var + 1e-30, "var {v} vs {var}");
        }
        // An infinity or NaN gives `None` (the caller's exact fallback).
        assert!(row_moments(&[1.0, f32::INFINITY, 2.0]).is_none());
        assert!(row_moments(&[f32::NAN; 20]).is_none());
    }

    #[test]
    fn row_sums_are_accurate() {
        // Against f64 sums: within 16 ε, for any length.
        for x in rows() {
            let m = x.iter().map(|&v| v as f64).sum::<f64>() / x.len().max(1) as f64;
            let sq: f64 = x
                .iter()
                .map(|&v| (v as f64 - m as f32 as f64).powi(2))
                .sum();
            let (_, got) = row_dev_sums(&x, m as f32);
            assert!((got - sq).abs() <= 16.0 * f32::EPSILON as f64 * sq + 1e-30);
            let mx = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut out = vec![0f32; x.len()];
            let got = exp_sub_sum(&x, mx, &mut out, || ());
            let want: f64 = out.iter().map(|&v| v as f64).sum();
            assert!((got - want).abs() <= 16.0 * f32::EPSILON as f64 * want + 1e-30);
        }
    }
}
