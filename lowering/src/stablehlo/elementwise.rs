//! Elementwise ops: unary math, binary arithmetic with PyTorch promotion, comparisons,
//! activations, `where`, `clamp` and dtype conversion.

use super::emitter::{Em, Num, V};
use super::{opmath, Cx, R};
use fxhlo_ir::infer::{promote_scalar, promote_tensors};
use fxhlo_ir::{DType, TensorType};

/// Unary ops.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Un {
    Abs,
    Neg,
    Ceil,
    Floor,
    Round,
    Trunc,
    Sign,
    Sqrt,
    Rsqrt,
    Exp,
    Expm1,
    Log,
    Log1p,
    Log2,
    Log10,
    Sin,
    Cos,
    Tan,
    Tanh,
    Sigmoid,
    Erf,
    Asin,
    Acos,
    Atan,
    Asinh,
    Acosh,
    Atanh,
    Sinh,
    Cosh,
    Reciprocal,
    BitwiseNot,
    LogicalNot,
    Isnan,
    Isinf,
    Relu,
}

/// Binary ops.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Bin {
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min,
    Pow,
    Atan2,
    Fmod,
    Rem,
    And,
    Or,
    Xor,
    LAnd,
    LOr,
    LXor,
    Cmp(&'static str),
}

/// Floating math of `x` in PyTorch's compute type (f32 for half types), rounded back.
pub(crate) fn float_math(em: &mut Em, x: &V, f: impl FnOnce(&mut Em, &V) -> V) -> V {
    let d = x.dtype;
    let xc = em.convert(x, opmath(d));
    let r = f(em, &xc);
    em.convert(&r, d)
}

/// Truncation toward zero.
pub(crate) fn trunc(em: &mut Em, x: &V) -> V {
    if !x.dtype.is_float() {
        return x.clone();
    }
    let z = em.splat_like(x, Num::I(0));
    let neg = em.compare("LT", x, &z);
    let c = em.unary("ceil", x);
    let f = em.unary("floor", x);
    em.select(&neg, &c, &f)
}

/// Lowers a unary op.
pub(crate) fn unary(cx: &mut Cx, u: Un) -> R<V> {
    let x = cx.t("self")?;
    let od = cx.out_dtype(0);
    let em = &mut *cx.em;
    Ok(match u {
        Un::Isnan => {
            if x.dtype.is_float() {
                em.compare("NE", &x, &x)
            } else {
                em.splat(DType::Bool, &x.shape, Num::B(false))
            }
        }
        Un::Isinf => {
            if x.dtype.is_float() {
                let a = em.unary("abs", &x);
                let inf = em.splat_like(&x, Num::F(f64::INFINITY));
                em.compare("EQ", &a, &inf)
            } else {
                em.splat(DType::Bool, &x.shape, Num::B(false))
            }
        }
        Un::LogicalNot => {
            let b = em.convert(&x, DType::Bool);
            em.unary("not", &b)
        }
        Un::BitwiseNot => em.unary("not", &x),
        Un::Abs if x.dtype == DType::Bool => x,
        Un::Abs => em.unary("abs", &x),
        Un::Neg => em.unary("negate", &x),
        Un::Ceil | Un::Floor | Un::Round | Un::Trunc if !x.dtype.is_float() => x,
        Un::Ceil => em.unary("ceil", &x),
        Un::Floor => em.unary("floor", &x),
        Un::Round => em.unary("round_nearest_even", &x),
        Un::Trunc => trunc(em, &x),
        Un::Sign if x.dtype == DType::Bool => x,
        Un::Sign if x.dtype == DType::U8 => {
            let z = em.splat_like(&x, Num::I(0));
            let nz = em.compare("NE", &x, &z);
            em.convert(&nz, DType::U8)
        }
        Un::Sign => em.unary("sign", &x),
        Un::Relu => {
            let z = em.splat_like(&x, Num::I(0));
            em.max(&x, &z)
        }
        _ => {
            let x = em.convert(&x, od);
            float_math(em, &x, |em, x| match u {
                Un::Sqrt => em.unary("sqrt", x),
                Un::Rsqrt => em.unary("rsqrt", x),
                Un::Exp => em.unary("exponential", x),
                Un::Expm1 => em.unary("exponential_minus_one", x),
                Un::Log => em.unary("log", x),
                Un::Log1p => em.unary("log_plus_one", x),
                Un::Log2 | Un::Log10 => {
                    let l = em.unary("log", x);
                    let base: f64 = if u == Un::Log2 { 2.0 } else { 10.0 };
                    let c = em.splat_like(x, Num::F(base.ln()));
                    em.div(&l, &c)
                }
                Un::Sin => em.unary("sine", x),
                Un::Cos => em.unary("cosine", x),
                Un::Tan => em.unary("tan", x),
                Un::Tanh => em.unary("tanh", x),
                Un::Sigmoid => em.unary("logistic", x),
                Un::Erf => em.chlo("erf", x),
                Un::Asin => em.chlo("asin", x),
                Un::Acos => em.chlo("acos", x),
                Un::Atan => em.chlo("atan", x),
                Un::Asinh => em.chlo("asinh", x),
                Un::Acosh => em.chlo("acosh", x),
                Un::Atanh => em.chlo("atanh", x),
                Un::Sinh => em.chlo("sinh", x),
                Un::Cosh => em.chlo("cosh", x),
                Un::Reciprocal => {
                    let one = em.splat_like(x, Num::I(1));
                    em.div(&one, x)
                }
                _ => unreachable!("handled above"),
            })
        }
    })
}

/// `round.decimals(self, decimals)`: `round(x * 10^d) / 10^d` (`round(x / 10^-d) * 10^-d`
/// for negative `d`), ties to even, each step in the input dtype (f32 for half types) as ATen
/// computes it.
pub(crate) fn round_decimals(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let dec = cx.int("decimals")?;
    let em = &mut *cx.em;
    if !x.dtype.is_float() {
        return Ok(x);
    }
    let ten = 10f64.powi(dec.unsigned_abs().min(400) as i32);
    Ok(float_math(em, &x, |em, x| {
        let p = em.splat_like(x, Num::F(ten));
        if dec >= 0 {
            let y = em.mul(x, &p);
            let y = em.unary("round_nearest_even", &y);
            em.div(&y, &p)
        } else {
            let y = em.div(x, &p);
            let y = em.unary("round_nearest_even", &y);
            em.mul(&y, &p)
        }
    }))
}

/// The second operand of a binary op: a tensor, or a scalar argument.
enum Other {
    T(V),
    S(Num),
}

fn other_of(cx: &Cx) -> R<(V, Other, &'static str)> {
    let op = cx.node.op().expect("op node");
    if op == fxhlo_ir::Op::PowScalar {
        // pow(scalar base, tensor exponent)
        let e = cx.t("exponent")?;
        return Ok((e, Other::S(cx.num("self")?), "swap"));
    }
    let name = if op.param_index("exponent").is_some() {
        "exponent"
    } else {
        "other"
    };
    let x = cx.t("self")?;
    let o = match cx.node.arg(name) {
        Some(fxhlo_ir::Arg::Tensor(_)) => Other::T(cx.t(name)?),
        _ => Other::S(cx.num(name)?),
    };
    Ok((x, o, ""))
}

fn scalar_category(n: Num) -> u8 {
    match n {
        Num::B(_) => 0,
        Num::I(_) => 1,
        Num::F(_) => 2,
    }
}

/// Materializes the second operand in dtype `d` with the shape of `shape`.
fn operand(em: &mut Em, o: &Other, d: DType, shape: &[i64]) -> V {
    match o {
        Other::T(v) => {
            let v = em.convert(v, d);
            em.bcast_to(&v, shape)
        }
        Other::S(n) => em.splat(d, shape, *n),
    }
}

fn tt(v: &V) -> TensorType {
    TensorType::new(v.dtype, &v.shape)
}

/// Lowers a binary op (tensor-tensor or tensor-scalar).
pub(crate) fn binary(cx: &mut Cx, b: Bin) -> R<V> {
    let (x, o, mode) = other_of(cx)?;
    let od = cx.out_dtype(0);
    let shape = cx.out_shape(0)?;
    let alpha = match cx.node.op().and_then(|op| op.param_index("alpha")) {
        Some(_) => cx.opt_num("alpha")?,
        None => None,
    };
    let rounding = match cx.node.op().and_then(|op| op.param_index("rounding_mode")) {
        Some(_) => cx.opt_str("rounding_mode")?,
        None => None,
    };
    let em = &mut *cx.em;
    // compute dtype
    let cd = match b {
        Bin::Cmp(_) => match &o {
            Other::T(v) => promote_tensors(&[&tt(&x), &tt(v)]),
            Other::S(n) => promote_scalar(x.dtype, Some(scalar_category(*n))),
        },
        Bin::LAnd | Bin::LOr | Bin::LXor => DType::Bool,
        _ => od,
    };
    let a = em.convert(&x, cd);
    let a = em.bcast_to(&a, &shape);
    let mut c = operand(em, &o, cd, &shape);
    let (a, c0) = if mode == "swap" {
        (c.clone(), a)
    } else {
        (a, c.clone())
    };
    c = c0;
    if let Some(al) = alpha {
        if al != Num::I(1) && cd != DType::Bool {
            let s = em.splat(cd, &shape, al);
            c = em.mul(&c, &s);
        }
    }
    Ok(match b {
        Bin::Add if cd == DType::Bool => em.binary("or", &a, &c),
        Bin::Add => em.add(&a, &c),
        Bin::Sub => em.sub(&a, &c),
        Bin::Mul if cd == DType::Bool => em.binary("and", &a, &c),
        Bin::Mul => em.mul(&a, &c),
        Bin::Div => match rounding.as_deref() {
            None => em.div(&a, &c),
            Some("trunc") => {
                let q = em.div(&a, &c);
                trunc(em, &q)
            }
            Some("floor") => floor_div(em, &a, &c),
            Some(m) => return Err(format!("unknown rounding_mode '{m}'")),
        },
        Bin::Max => em.max(&a, &c),
        Bin::Min => em.min(&a, &c),
        Bin::Pow => pow(em, &a, &c, &o, mode),
        Bin::Atan2 => float_math(em, &a, |em, a| {
            let c = em.convert(&c, a.dtype);
            em.binary("atan2", a, &c)
        }),
        Bin::Fmod => em.binary("remainder", &a, &c),
        Bin::Rem => remainder(em, &a, &c),
        Bin::And | Bin::LAnd => em.binary("and", &a, &c),
        Bin::Or | Bin::LOr => em.binary("or", &a, &c),
        Bin::Xor | Bin::LXor => em.binary("xor", &a, &c),
        Bin::Cmp(dir) => em.compare(dir, &a, &c),
    })
}

fn pow(em: &mut Em, a: &V, c: &V, o: &Other, mode: &str) -> V {
    if mode != "swap" {
        if let Other::S(n) = o {
            let e = n.f64();
            if e == 1.0 {
                return a.clone();
            }
            if e == 2.0 {
                return em.mul(a, a);
            }
            if e == 3.0 {
                let sq = em.mul(a, a);
                return em.mul(&sq, a);
            }
            if e == 0.5 && a.dtype.is_float() {
                return float_math(em, a, |em, a| em.unary("sqrt", a));
            }
        }
    }
    if a.dtype.is_float() {
        float_math(em, a, |em, a| {
            let c = em.convert(c, a.dtype);
            em.binary("power", a, &c)
        })
    } else {
        em.binary("power", a, c)
    }
}

/// Python-style remainder: the sign of the divisor.
pub(crate) fn remainder(em: &mut Em, a: &V, b: &V) -> V {
    let r = em.binary("remainder", a, b);
    if a.dtype == DType::Bool || a.dtype == DType::U8 {
        return r;
    }
    let z = em.splat_like(a, Num::I(0));
    let nz = em.compare("NE", &r, &z);
    let rn = em.compare("LT", &r, &z);
    let bn = em.compare("LT", b, &z);
    let diff = em.compare_as("NE", &rn, &bn, "UNSIGNED");
    let fix = em.binary("and", &nz, &diff);
    let rb = em.add(&r, b);
    em.select(&fix, &rb, &r)
}

/// Floor division as PyTorch computes it.
pub(crate) fn floor_div(em: &mut Em, a: &V, b: &V) -> V {
    let z = em.splat_like(a, Num::I(0));
    if !a.dtype.is_float() {
        let q = em.div(a, b);
        if a.dtype == DType::U8 || a.dtype == DType::Bool {
            return q;
        }
        let r = em.binary("remainder", a, b);
        let nz = em.compare("NE", &r, &z);
        let an = em.compare("LT", a, &z);
        let bn = em.compare("LT", b, &z);
        let diff = em.compare_as("NE", &an, &bn, "UNSIGNED");
        let fix = em.binary("and", &nz, &diff);
        let one = em.splat_like(a, Num::I(1));
        let q1 = em.sub(&q, &one);
        return em.select(&fix, &q1, &q);
    }
    float_math(em, a, |em, a| {
        let b = em.convert(b, a.dtype);
        let z = em.splat_like(a, Num::I(0));
        let m = em.binary("remainder", a, &b);
        let am = em.sub(a, &m);
        let div = em.div(&am, &b);
        let mnz = em.compare("NE", &m, &z);
        let bn = em.compare("LT", &b, &z);
        let mn = em.compare("LT", &m, &z);
        let diff = em.compare_as("NE", &bn, &mn, "UNSIGNED");
        let fix = em.binary("and", &mnz, &diff);
        let one = em.splat_like(a, Num::I(1));
        let d1 = em.sub(&div, &one);
        let div = em.select(&fix, &d1, &div);
        let fl = em.unary("floor", &div);
        let frac = em.sub(&div, &fl);
        let half = em.splat_like(a, Num::F(0.5));
        let up = em.compare("GT", &frac, &half);
        let fl1 = em.add(&fl, &one);
        let fl = em.select(&up, &fl1, &fl);
        // b == 0: a / b (inf or nan)
        let bz = em.compare("EQ", &b, &z);
        let q = em.div(a, &b);
        let r = em.select(&bz, &q, &fl);
        // a zero quotient keeps the sign of a / b
        let rz = em.compare("EQ", &r, &z);
        let sgn = em.mul(&q, &z);
        em.select(&rz, &sgn, &r)
    })
}

/// `where(condition, self, other)`.
pub(crate) fn where_self(cx: &mut Cx) -> R<V> {
    let c = cx.t("condition")?;
    let a = cx.t("self")?;
    let b = cx.t("other")?;
    let d = cx.out_dtype(0);
    let s = cx.out_shape(0)?;
    let em = &mut *cx.em;
    let c = em.bcast_to(&c, &s);
    let a = em.convert(&a, d);
    let a = em.bcast_to(&a, &s);
    let b = em.convert(&b, d);
    let b = em.bcast_to(&b, &s);
    Ok(em.select(&c, &a, &b))
}

/// `clamp` with scalar or tensor bounds (NaN in `self` propagates).
pub(crate) fn clamp(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let d = cx.out_dtype(0);
    let s = cx.out_shape(0)?;
    let bound = |cx: &mut Cx, name: &str| -> R<Option<V>> {
        Ok(match cx.node.arg(name) {
            Some(fxhlo_ir::Arg::Tensor(_)) => {
                let v = cx.t(name)?;
                let v = cx.em.convert(&v, d);
                Some(cx.em.bcast_to(&v, &s))
            }
            _ => cx.opt_num(name)?.map(|n| cx.em.splat(d, &s, n)),
        })
    };
    let lo = bound(cx, "min")?;
    let hi = bound(cx, "max")?;
    let em = &mut *cx.em;
    let x = em.convert(&x, d);
    let mut r = em.bcast_to(&x, &s);
    if let Some(lo) = lo {
        r = em.max(&r, &lo);
    }
    if let Some(hi) = hi {
        r = em.min(&r, &hi);
    }
    Ok(r)
}

/// `hardtanh(self, min_val, max_val)`.
pub(crate) fn hardtanh(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let lo = cx.num("min_val")?;
    let hi = cx.num("max_val")?;
    let em = &mut *cx.em;
    let l = em.splat_like(&x, lo);
    let h = em.splat_like(&x, hi);
    let r = em.max(&x, &l);
    Ok(em.min(&r, &h))
}

/// `gelu(self, approximate)`: exact (erf) or tanh form.
pub(crate) fn gelu(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let approx = cx.opt_str("approximate")?.unwrap_or_else(|| "none".into());
    if approx != "none" && approx != "tanh" {
        return Err(format!("unknown approximate='{approx}'"));
    }
    let em = &mut *cx.em;
    Ok(float_math(em, &x, |em, x| {
        let half = em.splat_like(x, Num::F(0.5));
        let one = em.splat_like(x, Num::F(1.0));
        let inner = if approx == "tanh" {
            let k = em.splat_like(x, Num::F((2.0 / std::f64::consts::PI).sqrt()));
            let c = em.splat_like(x, Num::F(0.044715));
            let x2 = em.mul(x, x);
            let x3 = em.mul(&x2, x);
            let cx3 = em.mul(&c, &x3);
            let s = em.add(x, &cx3);
            let ks = em.mul(&k, &s);
            em.unary("tanh", &ks)
        } else {
            let r = em.splat_like(x, Num::F(std::f64::consts::FRAC_1_SQRT_2));
            let xs = em.mul(x, &r);
            em.chlo("erf", &xs)
        };
        let p = em.add(&one, &inner);
        let hx = em.mul(&half, x);
        em.mul(&hx, &p)
    }))
}

/// `elu(self, alpha, scale, input_scale)`.
pub(crate) fn elu(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let alpha = cx.num("alpha")?;
    let scale = cx.num("scale")?;
    let iscale = cx.num("input_scale")?;
    let em = &mut *cx.em;
    Ok(float_math(em, &x, |em, x| {
        let z = em.splat_like(x, Num::I(0));
        let pos = em.compare("GT", x, &z);
        let is = em.splat_like(x, iscale);
        let xi = em.mul(x, &is);
        let e = em.unary("exponential_minus_one", &xi);
        let a = em.splat_like(x, Num::F(alpha.f64() * scale.f64()));
        let neg = em.mul(&e, &a);
        let s = em.splat_like(x, scale);
        let p = em.mul(x, &s);
        em.select(&pos, &p, &neg)
    }))
}

/// `leaky_relu(self, negative_slope)`.
pub(crate) fn leaky_relu(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let slope = cx.num("negative_slope")?;
    let em = &mut *cx.em;
    Ok(float_math(em, &x, |em, x| {
        let z = em.splat_like(x, Num::I(0));
        let pos = em.compare("GT", x, &z);
        let s = em.splat_like(x, slope);
        let n = em.mul(x, &s);
        em.select(&pos, x, &n)
    }))
}

/// `_to_copy`, `clone`, `alias`: the value converted to the result dtype.
pub(crate) fn copy_of(cx: &mut Cx, name: &str) -> R<V> {
    let x = cx.t(name)?;
    let d = cx.out_dtype(0);
    Ok(cx.em.convert(&x, d))
}

/// `copy(self, src)`: `src` converted and broadcast to `self`'s type.
pub(crate) fn copy(cx: &mut Cx) -> R<V> {
    let src = cx.t("src")?;
    let d = cx.out_dtype(0);
    let s = cx.out_shape(0)?;
    let v = cx.em.convert(&src, d);
    Ok(cx.em.bcast_to(&v, &s))
}
