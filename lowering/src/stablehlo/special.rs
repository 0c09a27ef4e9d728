//! Special functions. Those that XLA expands itself are CHLO ops (`chlo.lgamma`,
//! `chlo.digamma`, `chlo.polygamma`, `chlo.zeta`, `chlo.erf_inv`, `chlo.erfc`,
//! `chlo.bessel_i1e`); `i0e` is the Cephes Chebyshev expansion (as jax writes it); `i0`, `i1`,
//! `exp2` and `spherical_bessel_j0` follow from those. The ops of `fxhlo_ir::ops::NO_STABLEHLO`
//! (Bessel `j0`, `j1`, `y0`, `y1`, `k0`, `k1`, `ndtri`, `log_ndtr`, `erfcx`, `igamma`, ...) are
//! refused before dispatch, with the reason.

use super::elementwise::float_math;
use super::emitter::{Em, Num, V};
use super::{Cx, R};
use fxhlo_ir::Op;

/// Cephes' Chebyshev coefficients of `i0e` on [0, 8] (in `x / 2 - 2`).
const I0E_A: [f64; 30] = [
    -4.4153416464793395e-18,
    3.330794518822238e-17,
    -2.431279846547955e-16,
    1.715391285555133e-15,
    -1.1685332877993451e-14,
    7.676185498604936e-14,
    -4.85644678311193e-13,
    2.95505266312964e-12,
    -1.7268262914415555e-11,
    9.675809035373237e-11,
    -5.189795601635263e-10,
    2.6598237246823866e-09,
    -1.300025009986248e-08,
    6.046995022541919e-08,
    -2.670793853940612e-07,
    1.1173875391201037e-06,
    -4.4167383584587505e-06,
    1.6448448070728896e-05,
    -5.754195010082104e-05,
    0.00018850288509584165,
    -0.0005763755745385824,
    0.0016394756169413357,
    -0.004324309995050576,
    0.010546460394594998,
    -0.02373741480589947,
    0.04930528423967071,
    -0.09490109704804764,
    0.17162090152220877,
    -0.3046826723431984,
    0.6767952744094761,
];

/// Cephes' Chebyshev coefficients of `i0e(x) sqrt(x)` on (8, inf) (in `32 / x - 2`).
const I0E_B: [f64; 25] = [
    -7.233180487874754e-18,
    -4.830504485944182e-18,
    4.46562142029676e-17,
    3.461222867697461e-17,
    -2.8276239805165836e-16,
    -3.425485619677219e-16,
    1.7725601330565263e-15,
    3.8116806693526224e-15,
    -9.554846698828307e-15,
    -4.150569347287222e-14,
    1.54008621752141e-14,
    3.8527783827421426e-13,
    7.180124451383666e-13,
    -1.7941785315068062e-12,
    -1.3215811840447713e-11,
    -3.1499165279632416e-11,
    1.1889147107846439e-11,
    4.94060238822497e-10,
    3.3962320257083865e-09,
    2.266668990498178e-08,
    2.0489185894690636e-07,
    2.8913705208347567e-06,
    6.889758346916825e-05,
    0.003369116478255694,
    0.8044904110141088,
];

/// Clenshaw's recurrence for a Chebyshev series, as Cephes' `chbevl`.
fn chbevl(em: &mut Em, x: &V, coeffs: &[f64]) -> V {
    let mut b0 = em.splat_like(x, Num::F(coeffs[0]));
    let mut b1 = em.splat_like(x, Num::F(0.0));
    let mut b2 = b1.clone();
    for &c in &coeffs[1..] {
        b2 = b1;
        b1 = b0;
        let t = em.mul(x, &b1);
        let t = em.sub(&t, &b2);
        let c = em.splat_like(x, Num::F(c));
        b0 = em.add(&t, &c);
    }
    let d = em.sub(&b0, &b2);
    let half = em.splat_like(x, Num::F(0.5));
    em.mul(&half, &d)
}

/// `i0e(x) = i0(x) e^-|x|`.
fn i0e(em: &mut Em, x: &V) -> V {
    let a = em.unary("abs", x);
    let half = em.splat_like(&a, Num::F(0.5));
    let two = em.splat_like(&a, Num::F(2.0));
    let y = em.mul(&half, &a);
    let y = em.sub(&y, &two);
    let small = chbevl(em, &y, &I0E_A);
    let k = em.splat_like(&a, Num::F(32.0));
    let y = em.div(&k, &a);
    let y = em.sub(&y, &two);
    let big = chbevl(em, &y, &I0E_B);
    let s = em.unary("sqrt", &a);
    let big = em.div(&big, &s);
    let eight = em.splat_like(&a, Num::F(8.0));
    let le = em.compare("LE", &a, &eight);
    em.select(&le, &small, &big)
}

/// `f(x) e^|x|` (unscaling a scaled Bessel function).
fn unscale(em: &mut Em, x: &V, scaled: V) -> V {
    let a = em.unary("abs", x);
    let e = em.unary("exponential", &a);
    em.mul(&scaled, &e)
}

/// `chlo.<op> %a, %b`.
fn chlo2(em: &mut Em, op: &str, a: &V, b: &V) -> V {
    em.chlo_binary(op, a, b)
}

/// Lowers a unary special function (`polygamma` reads its `n` too).
pub(crate) fn unary(cx: &mut Cx, op: Op) -> R<V> {
    let n = if op == Op::Polygamma {
        Some(cx.int("n")?)
    } else {
        None
    };
    let x = cx.t(if op.param_index("x").is_some() {
        "x"
    } else {
        "self"
    })?;
    let od = cx.out_dtype(0);
    let em = &mut *cx.em;
    let x = em.convert(&x, od);
    Ok(float_math(em, &x, |em, x| match op {
        Op::Lgamma => em.chlo("lgamma", x),
        Op::Digamma => em.chlo("digamma", x),
        Op::Erfinv => em.chlo("erf_inv", x),
        Op::Erfc => em.chlo("erfc", x),
        Op::SpecialI1e => em.chlo("bessel_i1e", x),
        Op::SpecialI1 | Op::SpecialModifiedBesselI1 => {
            let s = em.chlo("bessel_i1e", x);
            unscale(em, x, s)
        }
        Op::SpecialI0e => i0e(em, x),
        Op::I0 | Op::SpecialModifiedBesselI0 => {
            let s = i0e(em, x);
            unscale(em, x, s)
        }
        Op::Exp2 => {
            let two = em.splat_like(x, Num::F(2.0));
            em.binary("power", &two, x)
        }
        Op::SpecialSphericalBesselJ0 => {
            let s = em.unary("sine", x);
            let q = em.div(&s, x);
            let zero = em.splat_like(x, Num::F(0.0));
            let one = em.splat_like(x, Num::F(1.0));
            let is0 = em.compare("EQ", x, &zero);
            let q = em.select(&is0, &one, &q);
            let a = em.unary("abs", x);
            let inf = em.splat_like(x, Num::F(f64::INFINITY));
            let isinf = em.compare("EQ", &a, &inf);
            em.select(&isinf, &zero, &q)
        }
        Op::Polygamma => {
            let nv = em.splat_like(x, Num::F(n.unwrap_or(0) as f64));
            chlo2(em, "polygamma", &nv, x)
        }
        _ => unreachable!("{op} is not a unary special function"),
    }))
}

/// `self` and `other` converted to the result's dtype and broadcast to its shape, and that
/// dtype: the operands of the binary ops of this file.
fn self_other(cx: &mut Cx) -> R<(V, V, fxhlo_ir::DType)> {
    let (a, b) = (cx.t("self")?, cx.t("other")?);
    let od = cx.out_dtype(0);
    let shape = cx.out_shape(0)?;
    let em = &mut *cx.em;
    let a = em.convert(&a, od);
    let a = em.bcast_to(&a, &shape);
    let b = em.convert(&b, od);
    let b = em.bcast_to(&b, &shape);
    Ok((a, b, od))
}

/// Lowers a binary special function of `self` and `other` (`special_zeta`).
pub(crate) fn binary(cx: &mut Cx, op: Op) -> R<V> {
    let (a, b, od) = self_other(cx)?;
    let em = &mut *cx.em;
    let cd = super::opmath(od);
    let (a, b) = (em.convert(&a, cd), em.convert(&b, cd));
    let r = match op {
        Op::SpecialZeta => chlo2(em, "zeta", &a, &b),
        _ => unreachable!("{op} is not a binary special function"),
    };
    Ok(em.convert(&r, od))
}

/// The sign bit of floats (`-0.0` and negative NaN included) through their bits; `x < 0` for
/// integers.
fn sign_bit(em: &mut Em, x: &V) -> V {
    use fxhlo_ir::DType;
    let bits = match x.dtype {
        DType::F64 => Some(DType::I64),
        DType::F32 => Some(DType::I32),
        DType::F16 | DType::BF16 => Some(DType::I16),
        _ => None,
    };
    match (bits, x.dtype) {
        (Some(b), _) => {
            let i = em.bitcast(x, b);
            let z = em.splat_like(&i, Num::I(0));
            em.compare("LT", &i, &z)
        }
        (None, DType::Bool | DType::U8) => em.splat(DType::Bool, &x.shape, Num::B(false)),
        _ => {
            let z = em.splat_like(x, Num::I(0));
            em.compare("LT", x, &z)
        }
    }
}

/// `signbit(self)`.
pub(crate) fn signbit(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    Ok(sign_bit(cx.em, &x))
}

/// `copysign(self, other)`: `|self|` with the sign bit of `other`, in the result dtype.
pub(crate) fn copysign(cx: &mut Cx) -> R<V> {
    let (a, b, _) = self_other(cx)?;
    let em = &mut *cx.em;
    let m = em.unary("abs", &a);
    let n = em.unary("negate", &m);
    let s = sign_bit(em, &b);
    Ok(em.select(&s, &n, &m))
}

/// `nextafter(self, other)`: `chlo.next_after` in the result dtype.
pub(crate) fn nextafter(cx: &mut Cx) -> R<V> {
    let (a, b, _) = self_other(cx)?;
    let em = &mut *cx.em;
    Ok(chlo2(em, "next_after", &a, &b))
}
