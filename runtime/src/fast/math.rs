//! Vectorizable `f32` math for the fused kernels.
//!
//! Every function here is branch-free straight-line code on one `f32` (special values are
//! chosen with selects, not branches) and `#[inline(always)]`, so a loop `for (o, &x) in
//! out.iter_mut().zip(xs) { *o = exp(x) }` compiles to SIMD code on any x86-64 baseline and to
//! 8-wide AVX2 code where the caller is compiled with that feature. Polynomials are evaluated
//! with fused multiply-adds ([`fma`], exactly rounded: one instruction where the caller is
//! compiled with FMA, the C library's `fmaf` elsewhere), so results are bitwise the same on
//! every CPU; their long tails are split into independent halves (Estrin's scheme) so that
//! neighbouring vectors do not wait on one long chain of dependent operations.
//!
//! Accuracy, measured against `f64` references by `runtime/tests/fast_expr.rs` (relative error
//! unless stated; "ulp" is of the `f32` result):
//!
//! | function | error |
//! |---|---|
//! | [`exp`] | ≤ 2 ulp (≤ 2.4e-7), denormal results included; `inf`/`0` outside `[-104, 89]` |
//! | [`expm1`] | ≤ 3e-7 |
//! | [`log`], [`log2`], [`log10`] | ≤ 3e-7 (log near 1: ≤ 3e-7 relative) |
//! | [`log1p`] | ≤ 4e-7 |
//! | [`tanh`] | ≤ 5e-7 |
//! | [`sigmoid`] | ≤ 5e-7 |
//! | [`erfc`] | ≤ 5e-7 for `x ≤ 9` (relative, deep into the tail) |
//! | [`erf`] | ≤ 4e-7 |
//! | [`silu`] | ≤ 3e-7 |
//! | [`gelu_erf`] | ≤ 2.5e-7 for `x ≥ 0`; ≤ 1e-7 `\|x\|` absolute for `x < 0` (see its doc) |
//! | [`gelu_tanh`] | ≤ 5e-6 (for `x < -4` the `f32` rounding of `k(x + 0.044715x³)`, as in PyTorch, dominates) |
//!
//! All of these are far inside the `rtol 1e-4 / atol 1e-5` used against eager PyTorch.

const LOG2E: f32 = std::f32::consts::LOG2_E;
/// `ln 2` in two parts for the Cody-Waite reduction of [`exp`] (also of `vmath::exp`): the
/// high part has trailing zero bits, so `n * LN2_HI` is exact for the `n` that occur.
pub(super) const LN2_HI: f32 = 0.693_145_75;
/// The rest of `ln 2`.
pub(super) const LN2_LO: f32 = 1.428_606_8e-6;
/// 1.5 * 2^23: adding and subtracting it rounds to an integer (ties to even).
pub(super) const ROUND_MAGIC: f32 = 12_582_912.0;

/// `a * b + c` with one rounding.
#[inline(always)]
pub fn fma(a: f32, b: f32, c: f32) -> f32 {
    a.mul_add(b, c)
}

/// `if c { a } else { b }`, written so that it lowers to a blend.
#[inline(always)]
fn sel(c: bool, a: f32, b: f32) -> f32 {
    if c {
        a
    } else {
        b
    }
}

/// `2^n` for `n` in `[-126, 127]` from its exponent bits.
#[inline(always)]
fn pow2i(n: i32) -> f32 {
    f32::from_bits((n.wrapping_add(127) as u32) << 23)
}

/// `e^x`. Cody-Waite reduction `x = n ln2 + r`, `|r| ≤ ln2/2`, the polynomial of `exp_poly`,
/// and a two-step scale so that denormal results and overflow to `inf` come out right.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    let xc = x.clamp(-104.0, 89.0);
    let (n, nf) = round_log2e(xc);
    let r = fma(-nf, LN2_LO, fma(-nf, LN2_HI, xc));
    scale_exp(exp_poly(r), n, x)
}

/// `n = round(x log2(e))` as an integer and as a float, rounded once from the exact product
/// (the rounding constant is added in the same fused operation); `x` in `[-104, 89]`.
#[inline(always)]
fn round_log2e(x: f32) -> (i32, f32) {
    let t = fma(x, LOG2E, ROUND_MAGIC);
    let n = (t.to_bits() as i32).wrapping_sub(ROUND_MAGIC.to_bits() as i32);
    (n, t - ROUND_MAGIC)
}

/// `e^r` for `|r| ≤ ln2/2`: `1 + r + r² q(r)` with `q` the degree-4 polynomial
/// [`EXP_Q`] (a minimax fit for the relative error of `e^r`: 3e-9 before rounding, so `exp`
/// stays within 1 ulp, as with the degree-7 Taylor polynomial it replaces, with one fused
/// multiply-add fewer), its terms in independent pairs.
#[inline(always)]
fn exp_poly(r: f32) -> f32 {
    let [q0, q1, q2, q3, q4] = EXP_Q;
    let r2 = r * r;
    let tail = fma(fma(q4, r2, fma(q3, r, q2)), r2, fma(q1, r, q0));
    fma(r, fma(r, tail, 1.0), 1.0)
}

/// The coefficients of [`exp_poly`]'s `q` (also of `vmath`'s copy), from `r⁰` on.
pub(super) const EXP_Q: [f32; 5] = [0.49999994, 0.16666521, 0.04166839, 0.00836871, 0.0013814612];

/// `p * 2^n` for `n` in `[-150, 129]`, in two exact steps so that denormal results round once
/// and overflow gives `inf`; NaN where `x` is NaN.
#[inline(always)]
fn scale_exp(p: f32, n: i32, x: f32) -> f32 {
    sel(x.is_nan(), x, scale2(p, n))
}

/// `p * 2^n` for `n` in `[-252, 254]` (see [`scale_exp`]; each step's factor is a normal
/// power of two, and a result below the denormals rounds to zero in the second step).
#[inline(always)]
fn scale2(p: f32, n: i32) -> f32 {
    let n1 = n >> 1;
    p * pow2i(n1) * pow2i(n.wrapping_sub(n1))
}

/// `e^(hi + lo)` for a small correction `lo` (an argument carried in two parts, so that the
/// reduction subtracts `n ln2` from `hi` exactly before `lo` is added). Only for arguments
/// known to be finite and in `[-120, 89]` (its callers' are bounded by construction), so it
/// neither clamps nor checks for NaN; below about `-104` the result underflows to zero.
#[inline(always)]
fn exp_hilo(hi: f32, lo: f32) -> f32 {
    let (n, nf) = round_log2e(hi + lo);
    let r = fma(-nf, LN2_LO, fma(-nf, LN2_HI, hi) + lo);
    scale2(exp_poly(r), n)
}

/// `e^x - 1`, accurate near zero (a degree-8 Taylor polynomial for `|x| < 0.35`).
#[inline(always)]
pub fn expm1(x: f32) -> f32 {
    let small = x
        * (1.0
            + x * (0.5
                + x * (1.0 / 6.0
                    + x * (1.0 / 24.0
                        + x * (1.0 / 120.0
                            + x * (1.0 / 720.0 + x * (1.0 / 5040.0 + x * (1.0 / 40320.0))))))));
    let big = exp(x) - 1.0;
    sel(x.abs() < 0.35, small, big)
}

/// Splits a positive finite `x` into `(e, m)` with `x = 2^e * m`, `m` in `[sqrt(1/2), sqrt(2))`
/// (denormals included).
#[inline(always)]
fn frexp_sqrt2(x: f32) -> (f32, f32) {
    let tiny = x < f32::MIN_POSITIVE;
    let xs = sel(tiny, x * 8_388_608.0, x);
    let bits = xs.to_bits();
    let mut e = ((bits >> 23) & 0xff) as i32 - 127;
    e -= if tiny { 23 } else { 0 };
    let m = f32::from_bits((bits & 0x007f_ffff) | 0x3f80_0000);
    let big = m > std::f32::consts::SQRT_2;
    let m = sel(big, m * 0.5, m);
    let e = e + big as i32;
    (e as f32, m)
}

/// `ln(m)` for `m` in `[sqrt(1/2), sqrt(2))` as `2 atanh((m-1)/(m+1))`.
#[inline(always)]
fn log_mantissa(m: f32) -> f32 {
    let f = m - 1.0;
    let s = f / (2.0 + f);
    let z = s * s;
    let q =
        z * (1.0 / 3.0 + z * (1.0 / 5.0 + z * (1.0 / 7.0 + z * (1.0 / 9.0 + z * (1.0 / 11.0)))));
    // 2s + 2s*q, with f - s*f = 2s exactly enough: use f - s*(f - 2sq) form for accuracy near 1.
    f - s * (f - 2.0 * q)
}

/// Special results of the logarithms: `ln(0) = -inf`, `ln(x<0) = NaN`, `ln(inf) = inf`.
#[inline(always)]
fn log_special(x: f32, y: f32) -> f32 {
    let y = sel(x == f32::INFINITY, x, y);
    let y = sel(x == 0.0, f32::NEG_INFINITY, y);
    sel(x < 0.0 || x.is_nan(), f32::NAN, y)
}

/// Natural logarithm.
#[inline(always)]
pub fn log(x: f32) -> f32 {
    let (e, m) = frexp_sqrt2(x);
    let y = e * LN2_HI + (log_mantissa(m) + e * LN2_LO);
    log_special(x, y)
}

/// Base-2 logarithm (exact on powers of two).
#[inline(always)]
pub fn log2(x: f32) -> f32 {
    let (e, m) = frexp_sqrt2(x);
    let y = e + log_mantissa(m) * LOG2E;
    log_special(x, y)
}

/// Base-10 logarithm.
#[inline(always)]
pub fn log10(x: f32) -> f32 {
    const LOG10_2_HI: f32 = 0.301_025_4;
    const LOG10_2_LO: f32 = 4.605_039_3e-6;
    let (e, m) = frexp_sqrt2(x);
    let y = e * LOG10_2_HI + (log_mantissa(m) * std::f32::consts::LOG10_E + e * LOG10_2_LO);
    log_special(x, y)
}

/// `ln(1 + x)`, accurate near zero (Goldberg's correction `ln(u) * x / (u - 1)`).
#[inline(always)]
pub fn log1p(x: f32) -> f32 {
    let u = 1.0 + x;
    let d = u - 1.0;
    let l = log(u);
    let y = sel(d == 0.0, x, l * (x / sel(d == 0.0, 1.0, d)));
    let y = sel(x == f32::INFINITY, x, y);
    let y = sel(x == -1.0, f32::NEG_INFINITY, y);
    sel(x < -1.0 || x.is_nan(), f32::NAN, y)
}

/// Hyperbolic tangent: `expm1(2x) / (expm1(2x) + 2)` on `x` clamped to `[-9, 9]`.
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let c = x.clamp(-9.0, 9.0);
    let e = expm1(2.0 * c);
    let y = e / (e + 2.0);
    sel(x.is_nan(), x, y)
}

/// Logistic sigmoid `1 / (1 + e^-x)`, as `e/(1+e)` with `e = e^x` for negative `x` (so tiny
/// results keep their relative accuracy, denormals included).
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    let e = exp(-x.abs());
    let s = 1.0 / (1.0 + e);
    sel(x < 0.0, e * s, s)
}

/// `x * sigmoid(x)` (SiLU).
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    x * sigmoid(x)
}

/// The fit of [`erfc_pos`]: its coefficients from `t²` on, in pairs
/// `(k, c)` taken as `t k + c`, ...
const ERFC_PAIRS: [(f32, f32); 4] = [
    (0.096_784_18, 0.374_091_96),
    (0.278_868_07, -0.186_288_06),
    (1.488_515_9, -1.135_204),
    (0.170_872_77, -0.822_152_23),
];
/// ... its coefficient of `t`, ...
const ERFC_C1: f32 = 1.000_023_7;
/// ... and its constant term.
const ERFC_C0: f32 = -1.265_512_2;

/// `erfc(|x|)`, with `|x|` clamped to 10 (where the result is below 3e-45): the Chebyshev fit
/// of Numerical Recipes' `erfcc` (fractional error below 1.2e-7 before rounding), `t e^(-z² +
/// p(t))` with `t = 1 / (1 + z/2)`, where `-z²` is carried as `hi + lo` (`lo` the exact
/// rounding error of `hi`, from one fused multiply-add), so the steep factor sees no rounding
/// of its argument and [`exp_hilo`]'s argument stays in range (`hi ≥ -100`).
#[inline(always)]
fn erfc_pos(x: f32) -> f32 {
    let z = x.abs().min(10.0);
    let m = -z;
    let hi = m * z;
    let lo = fma(m, z, -hi);
    let t = 1.0 / fma(z, 0.5, 1.0);
    // The tail from t² on in independent pairs, then the two leading terms.
    let t2 = t * t;
    let [a0, a1, a2, a3] = ERFC_PAIRS.map(|(k, c)| fma(t, k, c));
    let tail = fma(fma(a3, t2, a2), t2 * t2, fma(a1, t2, a0));
    let p = fma(t, fma(t, tail, ERFC_C1), lo + ERFC_C0);
    t * exp_hilo(hi, p)
}

/// Complementary error function `1 - erf(x)`.
#[inline(always)]
pub fn erfc(x: f32) -> f32 {
    let c = erfc_pos(x);
    let y = sel(x < 0.0, 2.0 - c, c);
    sel(x.is_nan(), x, y)
}

/// Error function: an odd Taylor polynomial for `|x| < 0.5`, else `±(1 - erfc(|x|))`.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    const TWO_OVER_SQRT_PI: f32 = std::f32::consts::FRAC_2_SQRT_PI;
    let z = x * x;
    let small = TWO_OVER_SQRT_PI
        * x
        * (1.0
            + z * (-1.0 / 3.0
                + z * (1.0 / 10.0
                    + z * (-1.0 / 42.0
                        + z * (1.0 / 216.0 + z * (-1.0 / 1320.0 + z * (1.0 / 9360.0)))))));
    let big = 1.0 - erfc_pos(x);
    let big = sel(x < 0.0, -big, big);
    let y = sel(x.abs() < 0.5, small, big);
    sel(x.is_nan(), x, y)
}

/// GELU with the exact `erf`: `0.5 x (1 + erf(x/√2))`, computed as `0.5 x + |x| F(|x|)` with
/// `F(a) = erf(a/√2) / 2` (`x erf(x/√2)` is even), so no `erf`, `exp` or division is evaluated:
/// `F` is a degree-5 polynomial on each of 16 intervals of width 1/2 centred on `k/2`
/// (`GELU_F`, fitted for the smallest absolute error; `k` is `2a` rounded, the argument is
/// `a - k/2`), whose coefficients the AVX-512 form picks with one register permute each.
/// `|x|` is clamped to 7.5 in `F` only (where `F` is 1/2 in `f32`), so `inf` gives `inf`,
/// `-inf` gives NaN (`inf/2 - inf`, as PyTorch's `0.5 * -inf * (1 + erf(-inf))`) and NaN gives
/// NaN. The sign of `x` is put on the result, which for negative `x` is never positive (a
/// result that rounds to zero is `-0`, as in PyTorch).
///
/// For `x ≥ 0` the error is a few `1e-7` relative. For `x < 0` the two terms cancel, as
/// `1 + erf` does in PyTorch's formula: the error is at most about `5e-8 |x|` absolute (below
/// `1.5e-7`; PyTorch's own `erf` is accurate to about `1.5e-7`, so `|x|` times that).
#[inline(always)]
pub fn gelu_erf(x: f32) -> f32 {
    let a = x.abs();
    // `f32::min` gives 7.5 for a NaN `a`, as `vminps(a, 7.5)` does; the final product is NaN.
    let ac = a.min(7.5);
    let t = fma(ac, 2.0, ROUND_MAGIC);
    let k = (t.to_bits() & 15) as usize;
    let r = fma(t - ROUND_MAGIC, -0.5, ac);
    let c = |j: usize| GELU_F[j][k];
    let f = fma(
        fma(fma(fma(fma(c(5), r, c(4)), r, c(3)), r, c(2)), r, c(1)),
        r,
        c(0),
    );
    let g = fma(a, f, 0.5 * x);
    f32::from_bits(g.to_bits() | (x.to_bits() & 0x8000_0000))
}

/// The coefficients of [`gelu_erf`]'s `F` (also of `vmath`'s copy): `GELU_F[j][k]` is the
/// coefficient of `r^j` on interval `k`; intervals 13-15 are the constant 1/2.
pub(super) const GELU_F: [[f32; 16]; 6] = [
    [
        0.0, 0.19146244, 0.34134474, 0.4331928, 0.4772499, 0.49379033, 0.4986501, 0.49976736,
        0.49996832, 0.4999966, 0.4999997, 0.49999997, 0.5, 0.5, 0.5, 0.5,
    ],
    [
        0.39894226,
        0.35206532,
        0.24197076,
        0.12951761,
        0.05399096,
        0.017528288,
        0.0044318447,
        8.7268365e-04,
        1.3383139e-04,
        1.5984187e-05,
        1.4868208e-06,
        1.0771302e-07,
        6.07754e-09,
        0.0,
        0.0,
        0.0,
    ],
    [
        0.0,
        -0.08800966,
        -0.12098096,
        -0.0971396,
        -0.053993907,
        -0.021911507,
        -0.0066475403,
        -0.0015268003,
        -2.6747835e-04,
        -3.591393e-05,
        -3.7077564e-06,
        -2.9499796e-07,
        -1.8117372e-08,
        0.0,
        0.0,
        0.0,
    ],
    [
        -0.066486366,
        -0.04400666,
        -3.511558e-06,
        0.026980275,
        0.026996009,
        0.015338471,
        0.0059095235,
        0.001636184,
        3.344576e-04,
        5.123599e-05,
        5.936638e-06,
        5.234688e-07,
        3.5275534e-08,
        0.0,
        0.0,
        0.0,
    ],
    [
        0.0,
        0.019884933,
        0.019976106,
        0.0061314544,
        -0.004373522,
        -0.0058857608,
        -0.0033339502,
        -0.0011940681,
        -2.9772805e-04,
        -5.380243e-05,
        -7.1979166e-06,
        -7.221117e-07,
        -5.478417e-08,
        0.0,
        0.0,
        0.0,
    ],
    [
        0.00984473,
        0.0045435475,
        -0.0039378405,
        -0.005799502,
        -0.0022639434,
        6.33808e-04,
        0.0010973725,
        5.812153e-04,
        1.849673e-04,
        4.0050756e-05,
        6.1968913e-06,
        7.0273114e-07,
        5.9297584e-08,
        0.0,
        0.0,
        0.0,
    ],
];

/// GELU with the `tanh` approximation: `0.5 x (1 + tanh(k (x + 0.044715 x³)))`, computed as
/// `x * sigmoid(2u)` (the same function, without the cancellation for negative `x`).
#[inline(always)]
pub fn gelu_tanh(x: f32) -> f32 {
    const K: f32 = 0.797_884_6; // sqrt(2/pi)
    let xc = x.clamp(-20.0, 20.0);
    let u = K * (xc + 0.044_715 * xc * xc * xc);
    let y = x / (1.0 + exp(-2.0 * u));
    let y = sel(x < -20.0, 0.0 * x, y);
    sel(x.is_nan(), x, y)
}

/// `x^n` for an integer `n` by repeated squaring (exact-ish: at most `2 log2 |n|` roundings);
/// negative `n` gives the reciprocal.
#[inline(always)]
pub fn powi(x: f32, n: i32) -> f32 {
    let mut e = n.unsigned_abs();
    let mut b = x;
    let mut r = 1.0f32;
    while e > 0 {
        if e & 1 == 1 {
            r *= b;
        }
        b *= b;
        e >>= 1;
    }
    if n < 0 {
        1.0 / r
    } else {
        r
    }
}

/// NaN-propagating maximum (`torch.maximum`).
#[inline(always)]
pub fn max_nan(a: f32, b: f32) -> f32 {
    let m = sel(a > b, a, b);
    sel(a.is_nan(), a, sel(b.is_nan(), b, m))
}

/// NaN-propagating minimum (`torch.minimum`).
#[inline(always)]
pub fn min_nan(a: f32, b: f32) -> f32 {
    let m = sel(a < b, a, b);
    sel(a.is_nan(), a, sel(b.is_nan(), b, m))
}

/// Python's `%` on floats (the result has the sign of the divisor), as ATen's `remainder`.
#[inline(always)]
pub fn remainder(a: f32, b: f32) -> f32 {
    let m = a % b;
    sel(m != 0.0 && ((b < 0.0) != (m < 0.0)), m + b, m)
}

/// Floor division of floats, as ATen's `div_floor_floating` (computed in `f64`, rounded).
#[inline(always)]
pub fn div_floor(a: f32, b: f32) -> f32 {
    let (a, b) = (a as f64, b as f64);
    if b == 0.0 {
        return (a / b) as f32;
    }
    let m = a % b;
    let mut div = (a - m) / b;
    if m != 0.0 && ((b < 0.0) != (m < 0.0)) {
        div -= 1.0;
    }
    let r = if div != 0.0 {
        let mut fl = div.floor();
        if div - fl > 0.5 {
            fl += 1.0;
        }
        fl
    } else {
        0.0f64.copysign(a / b)
    };
    r as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_values() {
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert!(exp(f32::NAN).is_nan());
        assert_eq!(log(1.0), 0.0);
        assert_eq!(log(0.0), f32::NEG_INFINITY);
        assert!(log(-1.0).is_nan());
        assert_eq!(log2(8.0), 3.0);
        assert_eq!(tanh(f32::INFINITY), 1.0);
        assert_eq!(tanh(f32::NEG_INFINITY), -1.0);
        assert_eq!(sigmoid(f32::NEG_INFINITY), 0.0);
        assert_eq!(sigmoid(f32::INFINITY), 1.0);
        assert_eq!(erf(f32::INFINITY), 1.0);
        assert_eq!(erf(f32::NEG_INFINITY), -1.0);
        assert_eq!(gelu_erf(f32::INFINITY), f32::INFINITY);
        assert_eq!(gelu_tanh(f32::INFINITY), f32::INFINITY);
        assert_eq!(powi(2.0, -2), 0.25);
        assert!(max_nan(1.0, f32::NAN).is_nan());
        assert!(min_nan(f32::NAN, 1.0).is_nan());
    }
}
