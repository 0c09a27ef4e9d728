//! Elementwise ops: unary math, broadcasting binary arithmetic, comparisons, logical and bitwise
//! ops, `where` and `clamp`.
//!
//! Operands are cast to the compute dtype (the result dtype that type inference gives, or the
//! promoted operand dtype for comparisons), computed in `f64` or `i64`, and rounded to the result
//! dtype. Integer results wrap to their width.

use super::tensor::{numel, Data, Scalar, Tensor, R};
use super::Ctx;
use fxhlo_ir::infer::{promote_scalar, promote_tensors};
use fxhlo_ir::DType;

/// A tensor operand or a Python-number operand.
pub(crate) enum Operand<'a> {
    T(&'a Tensor),
    S(Scalar),
}

/// Argument `name` as an operand: a tensor if it is one, else a scalar.
pub(crate) fn operand<'a>(cx: &'a Ctx, name: &str) -> R<Operand<'a>> {
    match cx.t(name) {
        Ok(t) => Ok(Operand::T(t)),
        Err(_) => Ok(Operand::S(cx.scalar(name)?)),
    }
}

/// A scalar converted to dtype `d` (0-d).
pub(crate) fn scalar_as(d: DType, s: Scalar) -> Tensor {
    Tensor::full(d, vec![], s)
}

/// The operand cast to `d` and broadcast to `shape`.
pub(crate) fn operand_tensor(o: &Operand, d: DType, shape: &[usize]) -> R<Tensor> {
    match o {
        Operand::T(t) => t.cast(d).broadcast_to(shape),
        Operand::S(s) => scalar_as(d, *s).broadcast_to(shape),
    }
}

fn promoted(a: &Operand, b: &Operand) -> DType {
    match (a, b) {
        (Operand::T(x), Operand::T(y)) => promote_tensors(&[&x.ty(), &y.ty()]),
        (Operand::T(x), Operand::S(s)) | (Operand::S(s), Operand::T(x)) => {
            promote_scalar(x.dtype, Some(s.category()))
        }
        (Operand::S(x), Operand::S(y)) => match x.category().max(y.category()) {
            2 => DType::F64,
            1 => DType::I64,
            _ => DType::Bool,
        },
    }
}

/// Floating unary functions: the input is cast to the (floating) result dtype first.
pub(crate) fn float_unary(cx: &Ctx, f: fn(f64) -> f64) -> R<Tensor> {
    float_unary_with(cx, f)
}

/// [`float_unary`] with a closure (of the operand `self`, or `x` where the schema names it so).
pub(crate) fn float_unary_with(cx: &Ctx, f: impl Fn(f64) -> f64) -> R<Tensor> {
    let d = cx.out_dtype();
    let x = cx.t(if cx.has("x") { "x" } else { "self" })?.cast(d);
    let v = x.f64s().into_iter().map(f).collect();
    Ok(Tensor::from_f64s(d, x.shape, v))
}

/// Floating binary functions of `self` and `other` (`x` and `n` for the polynomials),
/// broadcast and cast to the result dtype.
pub(crate) fn float_binary(cx: &Ctx, f: impl Fn(f64, f64) -> f64) -> R<Tensor> {
    let d = cx.out_dtype();
    let shape = cx.out_shape();
    let (p, q) = if cx.has("n") {
        ("x", "n")
    } else {
        ("self", "other")
    };
    let a = cx.t(p)?.cast(d).broadcast_to(&shape)?.f64s();
    let b = cx.t(q)?.cast(d).broadcast_to(&shape)?.f64s();
    let v = a.into_iter().zip(b).map(|(p, q)| f(p, q)).collect();
    Ok(Tensor::from_f64s(d, shape, v))
}

/// Applies `ff` to floats and `fi` to integers (booleans as 0/1), keeping the dtype.
fn same_unary(cx: &Ctx, ff: impl Fn(f64) -> f64, fi: impl Fn(i64) -> i64) -> R<Tensor> {
    let x = cx.t("self")?;
    let d = cx.out_dtype();
    let x = x.cast(d);
    Ok(match &x.data {
        Data::F(v) => Tensor::from_f64s(d, x.shape.clone(), v.iter().map(|&a| ff(a)).collect()),
        _ => Tensor::from_i64s(d, x.shape.clone(), x.i64s().into_iter().map(fi).collect()),
    })
}

/// `ceil`, `floor`, `round` (half to even), `trunc`: identity on integers.
pub(crate) fn rounding(cx: &Ctx, f: fn(f64) -> f64) -> R<Tensor> {
    same_unary(cx, f, |x| x)
}

/// `round.decimals(self, decimals)`: as ATen, in the result dtype step by step: `round(x *
/// 10^d) / 10^d`, or `round(x / 10^-d) * 10^-d` for negative `d` (ties to even), in f32 for
/// half types.
pub(crate) fn round_decimals(cx: &Ctx) -> R<Tensor> {
    let dec = cx.int("decimals")?;
    let d = cx.out_dtype();
    let x = cx.t("self")?.cast(d);
    if !d.is_float() {
        return Ok(x);
    }
    // half types compute in f32, as ATen's kernel does
    let cd = if matches!(d, DType::F16 | DType::BF16) {
        DType::F32
    } else {
        d
    };
    let r = |v: f64| super::tensor::round_float(cd, v);
    let p = r(10f64.powi(dec.unsigned_abs().min(400) as i32));
    let v = x
        .f64s()
        .into_iter()
        .map(|a| {
            if dec >= 0 {
                r(a * p).round_ties_even() / p
            } else {
                r(a / p).round_ties_even() * p
            }
        })
        .collect();
    Ok(Tensor::from_f64s(d, x.shape, v))
}

/// `abs`.
pub(crate) fn abs(cx: &Ctx) -> R<Tensor> {
    same_unary(cx, f64::abs, i64::wrapping_abs)
}

/// `neg`: not defined for bool, as in PyTorch.
pub(crate) fn neg(cx: &Ctx) -> R<Tensor> {
    if cx.t("self")?.dtype == DType::Bool {
        return Err("negation is not supported on bool tensors; use logical_not".into());
    }
    same_unary(cx, |x| -x, i64::wrapping_neg)
}

/// `sign`: -1, 0 or 1 (NaN gives 0, as torch's `(0 < x) - (x < 0)`).
pub(crate) fn sign(cx: &Ctx) -> R<Tensor> {
    same_unary(
        cx,
        |x| ((0.0 < x) as i64 - (x < 0.0) as i64) as f64,
        i64::signum,
    )
}

/// `relu`: NaN stays NaN.
pub(crate) fn relu(cx: &Ctx) -> R<Tensor> {
    same_unary(
        cx,
        |x| if x.is_nan() { x } else { x.max(0.0) },
        |x| x.max(0),
    )
}

/// `bitwise_not`: integers and bool only.
pub(crate) fn bitwise_not(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    match &x.data {
        Data::F(_) => Err(format!(
            "bitwise_not is not defined for {} tensors",
            x.dtype
        )),
        Data::B(v) => Ok(Tensor::from_bools(
            x.dtype,
            x.shape.clone(),
            v.iter().map(|b| !b).collect(),
        )),
        Data::I(v) => Ok(Tensor::from_i64s(
            x.dtype,
            x.shape.clone(),
            v.iter().map(|a| !a).collect(),
        )),
    }
}

/// Computes a float activation in `f64` and converts to the result dtype (also for integer
/// inputs, where PyTorch refuses most of these).
fn activation(cx: &Ctx, f: impl Fn(f64) -> f64) -> R<Tensor> {
    let x = cx.t("self")?;
    let v = x.f64s().into_iter().map(f).collect();
    Ok(Tensor::from_f64s(cx.out_dtype(), x.shape.clone(), v))
}

fn scalar_f(cx: &Ctx, name: &str) -> R<f64> {
    Ok(cx.scalar(name)?.f64())
}

/// `elu(self, alpha, scale, input_scale)`.
pub(crate) fn elu(cx: &Ctx) -> R<Tensor> {
    let (alpha, scale, input_scale) = (
        scalar_f(cx, "alpha")?,
        scalar_f(cx, "scale")?,
        scalar_f(cx, "input_scale")?,
    );
    activation(cx, |x| {
        if x <= 0.0 {
            (x * input_scale).exp_m1() * alpha * scale
        } else {
            x * scale
        }
    })
}

/// `gelu(self, approximate)`: exact (`erf`) or the `tanh` approximation.
pub(crate) fn gelu(cx: &Ctx) -> R<Tensor> {
    match cx.str("approximate")? {
        "none" => activation(cx, |x| {
            x * 0.5 * (1.0 + libm::erf(x * std::f64::consts::FRAC_1_SQRT_2))
        }),
        "tanh" => {
            let k = (2.0 / std::f64::consts::PI).sqrt();
            activation(cx, move |x| {
                0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
            })
        }
        other => Err(format!(
            "unknown gelu approximation '{other}' (expected none or tanh)"
        )),
    }
}

/// `leaky_relu(self, negative_slope)`.
pub(crate) fn leaky_relu(cx: &Ctx) -> R<Tensor> {
    let s = scalar_f(cx, "negative_slope")?;
    activation(cx, |x| if x > 0.0 { x } else { x * s })
}

/// `hardtanh(self, min_val, max_val)`: a clamp.
pub(crate) fn hardtanh(cx: &Ctx) -> R<Tensor> {
    let lo = Some(cx.scalar("min_val")?);
    let hi = Some(cx.scalar("max_val")?);
    clamp_scalars(cx, cx.t("self")?, lo, hi)
}

/// `signbit`: the sign bit of floats (set for -0.0 and negative NaN), `x < 0` for integers.
pub(crate) fn signbit(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    let v = match &x.data {
        Data::F(v) => v.iter().map(|a| a.is_sign_negative()).collect(),
        Data::I(v) => v.iter().map(|&a| a < 0).collect(),
        Data::B(v) => vec![false; v.len()],
    };
    Ok(Tensor::from_bools(DType::Bool, x.shape.clone(), v))
}

/// `isinf`.
pub(crate) fn isinf(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    let v = match &x.data {
        Data::F(v) => v.iter().map(|a| a.is_infinite()).collect(),
        _ => vec![false; x.numel()],
    };
    Ok(Tensor::from_bools(DType::Bool, x.shape.clone(), v))
}

/// `isnan`.
pub(crate) fn isnan(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    let v = match &x.data {
        Data::F(v) => v.iter().map(|a| a.is_nan()).collect(),
        _ => vec![false; x.numel()],
    };
    Ok(Tensor::from_bools(DType::Bool, x.shape.clone(), v))
}

/// `logical_not`.
pub(crate) fn logical_not(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    let v = x.bools().into_iter().map(|b| !b).collect();
    Ok(Tensor::from_bools(cx.out_dtype(), x.shape.clone(), v))
}

/// Logical binary ops.
#[derive(Clone, Copy, Debug)]
pub(crate) enum LogicOp {
    And,
    Or,
    Xor,
}

/// `logical_and`/`or`/`xor`: operands are true where nonzero.
pub(crate) fn logical(cx: &Ctx, op: LogicOp) -> R<Tensor> {
    let shape = cx.out_shape();
    let a = cx.t("self")?.broadcast_to(&shape)?.bools();
    let b = cx.t("other")?.broadcast_to(&shape)?.bools();
    let v = a
        .iter()
        .zip(&b)
        .map(|(&p, &q)| match op {
            LogicOp::And => p && q,
            LogicOp::Or => p || q,
            LogicOp::Xor => p != q,
        })
        .collect();
    Ok(Tensor::from_bools(cx.out_dtype(), shape, v))
}

/// Comparison ops.
#[derive(Clone, Copy, Debug)]
pub(crate) enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// Comparisons, computed in the promoted dtype of the operands (NaN compares unequal).
pub(crate) fn compare(cx: &Ctx, op: CmpOp) -> R<Tensor> {
    let a = operand(cx, "self")?;
    let b = operand(cx, "other")?;
    let d = promoted(&a, &b);
    let shape = cx.out_shape();
    let x = operand_tensor(&a, d, &shape)?;
    let y = operand_tensor(&b, d, &shape)?;
    fn cmp<T: PartialOrd>(op: CmpOp, p: T, q: T) -> bool {
        match op {
            CmpOp::Eq => p == q,
            CmpOp::Ne => p != q,
            CmpOp::Lt => p < q,
            CmpOp::Le => p <= q,
            CmpOp::Gt => p > q,
            CmpOp::Ge => p >= q,
        }
    }
    let v = if d.is_float() {
        x.f64s()
            .into_iter()
            .zip(y.f64s())
            .map(|(p, q)| cmp(op, p, q))
            .collect()
    } else {
        x.i64s()
            .into_iter()
            .zip(y.i64s())
            .map(|(p, q)| cmp(op, p, q))
            .collect()
    };
    Ok(Tensor::from_bools(cx.out_dtype(), shape, v))
}

/// Binary arithmetic ops.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    DivMode,
    Max,
    Min,
    Fmod,
    Remainder,
    Pow,
    BitAnd,
    BitOr,
    BitXor,
    Atan2,
}

/// NaN-propagating maximum, as `torch.maximum`.
pub(crate) fn fmax_nan(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// NaN-propagating minimum, as `torch.minimum`.
pub(crate) fn fmin_nan(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.min(b)
    }
}

/// Floor division of floats, as ATen's `div_floor_floating`.
pub(crate) fn div_floor_f(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        return a / b;
    }
    let m = a % b;
    let mut div = (a - m) / b;
    if m != 0.0 && ((b < 0.0) != (m < 0.0)) {
        div -= 1.0;
    }
    if div != 0.0 {
        let mut fl = div.floor();
        if div - fl > 0.5 {
            fl += 1.0;
        }
        fl
    } else {
        (0.0f64).copysign(a / b)
    }
}

/// Python's `%` for floats, as ATen's `remainder`.
pub(crate) fn remainder_f(a: f64, b: f64) -> f64 {
    let mut m = a % b;
    if m != 0.0 && ((b < 0.0) != (m < 0.0)) {
        m += b;
    }
    m
}

const DIV_ZERO: &str = "integer division by zero";

/// Python's `//` for integers.
pub(crate) fn div_floor_i(a: i64, b: i64) -> R<i64> {
    if b == 0 {
        return Err(DIV_ZERO.into());
    }
    let q = a.wrapping_div(b);
    Ok(if a.wrapping_rem(b) != 0 && ((a < 0) != (b < 0)) {
        q.wrapping_sub(1)
    } else {
        q
    })
}

/// Python's `%` for integers (the result has the sign of the divisor).
pub(crate) fn remainder_i(a: i64, b: i64) -> R<i64> {
    if b == 0 {
        return Err(DIV_ZERO.into());
    }
    let r = a.wrapping_rem(b);
    Ok(if r != 0 && ((r < 0) != (b < 0)) {
        r.wrapping_add(b)
    } else {
        r
    })
}

/// Integer power as ATen's `powi`: negative exponents give 0 except for bases 1 and -1.
pub(crate) fn pow_i(base: i64, exp: i64) -> i64 {
    if exp < 0 {
        return match base {
            1 => 1,
            -1 => {
                if exp % 2 == 0 {
                    1
                } else {
                    -1
                }
            }
            _ => 0,
        };
    }
    let (mut result, mut b, mut e) = (1i64, base, exp);
    while e > 0 {
        if e & 1 == 1 {
            result = result.wrapping_mul(b);
        }
        b = b.wrapping_mul(b);
        e >>= 1;
    }
    result
}

/// Broadcasting binary arithmetic (`add`, `sub` with `alpha`, `mul`, `div` with rounding modes,
/// `maximum`, `fmod`, `remainder`, `pow`, bitwise ops, `atan2`), tensor or scalar operands.
pub(crate) fn binary(cx: &Ctx, op: BinOp) -> R<Tensor> {
    let a = operand(cx, "self")?;
    let b = operand(
        cx,
        if cx.has("exponent") {
            "exponent"
        } else {
            "other"
        },
    )?;
    let out = cx.out_dtype();
    let shape = cx.out_shape();
    let alpha = if cx.has("alpha") {
        Some(cx.scalar("alpha")?)
    } else {
        None
    };
    let mode = if cx.has("rounding_mode") {
        cx.opt_str("rounding_mode")?
    } else {
        None
    };
    if let Some(m) = mode {
        if m != "trunc" && m != "floor" {
            return Err(format!(
                "unknown rounding_mode '{m}' (expected trunc, floor or none)"
            ));
        }
    }
    // True division always computes in floating point, even where the result dtype is integral.
    let true_div = op == BinOp::Div || (op == BinOp::DivMode && mode.is_none());
    let cd = if true_div && !out.is_float() {
        DType::F64
    } else {
        out
    };
    if cd.is_float() {
        if matches!(op, BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor) {
            return Err(format!("bitwise ops are not defined for {cd} tensors"));
        }
        let x = operand_tensor(&a, cd, &shape)?.f64s();
        let y = operand_tensor(&b, cd, &shape)?.f64s();
        let al = alpha.map_or(1.0, |s| scalar_as(cd, s).f64s()[0]);
        let f = |p: f64, q: f64| -> f64 {
            match op {
                BinOp::Add => p + al * q,
                BinOp::Sub => p - al * q,
                BinOp::Mul => p * q,
                BinOp::Div => p / q,
                BinOp::DivMode => match mode {
                    Some("trunc") => (p / q).trunc(),
                    Some(_) => div_floor_f(p, q),
                    None => p / q,
                },
                BinOp::Max => fmax_nan(p, q),
                BinOp::Min => fmin_nan(p, q),
                BinOp::Fmod => p % q,
                BinOp::Remainder => remainder_f(p, q),
                BinOp::Pow => {
                    if q == 2.0 {
                        p * p
                    } else {
                        p.powf(q)
                    }
                }
                BinOp::Atan2 => p.atan2(q),
                // Refused above.
                BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor => f64::NAN,
            }
        };
        let v = x.into_iter().zip(y).map(|(p, q)| f(p, q)).collect();
        return Ok(Tensor::from_f64s(out, shape, v));
    }
    if out == DType::Bool && op == BinOp::Sub {
        return Err("subtraction of bool tensors is not supported; use logical_xor".into());
    }
    let al = match alpha {
        Some(Scalar::Float(x)) => {
            return Err(format!(
                "alpha must be an integer for {out} tensors, found {x}"
            ))
        }
        Some(s) => s.i64(),
        None => 1,
    };
    if op == BinOp::Pow && cx.op() == fxhlo_ir::Op::PowTensorScalar {
        if let Operand::S(s) = &b {
            if s.i64() < 0 {
                return Err("integers to negative integer powers are not allowed".into());
            }
        }
    }
    let x = operand_tensor(&a, out, &shape)?.i64s();
    let y = operand_tensor(&b, out, &shape)?.i64s();
    let f = |p: i64, q: i64| -> R<i64> {
        Ok(match op {
            BinOp::Add => p.wrapping_add(al.wrapping_mul(q)),
            BinOp::Sub => p.wrapping_sub(al.wrapping_mul(q)),
            BinOp::Mul => p.wrapping_mul(q),
            BinOp::DivMode => match mode {
                Some("trunc") => {
                    if q == 0 {
                        return Err(DIV_ZERO.into());
                    }
                    p.wrapping_div(q)
                }
                _ => div_floor_i(p, q)?,
            },
            BinOp::Max => p.max(q),
            BinOp::Min => p.min(q),
            BinOp::Fmod => {
                if q == 0 {
                    return Err(DIV_ZERO.into());
                }
                p.wrapping_rem(q)
            }
            BinOp::Remainder => remainder_i(p, q)?,
            BinOp::Pow => pow_i(p, q),
            BinOp::BitAnd => p & q,
            BinOp::BitOr => p | q,
            BinOp::BitXor => p ^ q,
            // True division and atan2 compute in floating point (handled above).
            BinOp::Div | BinOp::Atan2 => return Err(format!("{op:?} needs a floating result")),
        })
    };
    let v = x
        .into_iter()
        .zip(y)
        .map(|(p, q)| f(p, q))
        .collect::<R<Vec<i64>>>()?;
    Ok(Tensor::from_i64s(out, shape, v))
}

/// `where(condition, self, other)`.
pub(crate) fn where_self(cx: &Ctx) -> R<Tensor> {
    let d = cx.out_dtype();
    let shape = cx.out_shape();
    let c = cx.t("condition")?.broadcast_to(&shape)?.bools();
    let a = cx.t("self")?.cast(d).broadcast_to(&shape)?;
    let b = cx.t("other")?.cast(d).broadcast_to(&shape)?;
    let n = numel(&shape);
    let mut both = a.data;
    both.extend_range(&b.data, 0, n);
    let idx: Vec<usize> = c
        .iter()
        .enumerate()
        .map(|(i, &k)| if k { i } else { n + i })
        .collect();
    Ok(Tensor::from_data(d, shape, both.take(&idx)))
}

fn clamp_scalars(cx: &Ctx, x: &Tensor, lo: Option<Scalar>, hi: Option<Scalar>) -> R<Tensor> {
    if lo.is_none() && hi.is_none() {
        return Err("at least one of min and max must be given".into());
    }
    let d = cx.out_dtype();
    let x = x.cast(d);
    if d.is_float() {
        let lo = lo.map(|s| scalar_as(d, s).f64s()[0]);
        let hi = hi.map(|s| scalar_as(d, s).f64s()[0]);
        let v = x
            .f64s()
            .into_iter()
            .map(|a| {
                if a.is_nan() {
                    return a;
                }
                let mut y = a;
                if let Some(l) = lo {
                    y = if l.is_nan() { l } else { y.max(l) };
                }
                if let Some(h) = hi {
                    y = if h.is_nan() { h } else { y.min(h) };
                }
                y
            })
            .collect();
        Ok(Tensor::from_f64s(d, x.shape, v))
    } else {
        let lo = lo.map(|s| scalar_as(d, s).i64s()[0]);
        let hi = hi.map(|s| scalar_as(d, s).i64s()[0]);
        let v = x
            .i64s()
            .into_iter()
            .map(|a| {
                let mut y = a;
                if let Some(l) = lo {
                    y = y.max(l);
                }
                if let Some(h) = hi {
                    y = y.min(h);
                }
                y
            })
            .collect();
        Ok(Tensor::from_i64s(d, x.shape, v))
    }
}

/// `clamp(self, min, max)` with scalar bounds; NaN inputs stay NaN, a NaN bound gives NaN.
pub(crate) fn clamp(cx: &Ctx) -> R<Tensor> {
    clamp_scalars(
        cx,
        cx.t("self")?,
        cx.opt_scalar("min")?,
        cx.opt_scalar("max")?,
    )
}

/// `clamp(self, min, max)` with tensor bounds: `minimum(maximum(self, min), max)`.
pub(crate) fn clamp_tensor(cx: &Ctx) -> R<Tensor> {
    let d = cx.out_dtype();
    let shape = cx.out_shape();
    let lo = cx.opt_t("min")?;
    let hi = cx.opt_t("max")?;
    if lo.is_none() && hi.is_none() {
        return Err("at least one of min and max must be given".into());
    }
    let x = cx.t("self")?.cast(d).broadcast_to(&shape)?;
    let bound = |t: Option<&Tensor>| t.map(|t| t.cast(d).broadcast_to(&shape)).transpose();
    let (lo, hi) = (bound(lo)?, bound(hi)?);
    if d.is_float() {
        let mut v = x.f64s();
        if let Some(l) = lo {
            v = v
                .into_iter()
                .zip(l.f64s())
                .map(|(a, b)| fmax_nan(a, b))
                .collect();
        }
        if let Some(h) = hi {
            v = v
                .into_iter()
                .zip(h.f64s())
                .map(|(a, b)| fmin_nan(a, b))
                .collect();
        }
        Ok(Tensor::from_f64s(d, shape, v))
    } else {
        let mut v = x.i64s();
        if let Some(l) = lo {
            v = v.into_iter().zip(l.i64s()).map(|(a, b)| a.max(b)).collect();
        }
        if let Some(h) = hi {
            v = v.into_iter().zip(h.i64s()).map(|(a, b)| a.min(b)).collect();
        }
        Ok(Tensor::from_i64s(d, shape, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_division_rules() {
        assert_eq!(div_floor_i(-7, 2), Ok(-4));
        assert_eq!(div_floor_i(7, -2), Ok(-4));
        assert_eq!(div_floor_i(6, 3), Ok(2));
        assert!(div_floor_i(1, 0).is_err());
        assert_eq!(remainder_i(-7, 3), Ok(2));
        assert_eq!(remainder_i(7, -3), Ok(-2));
        assert_eq!(div_floor_i(i64::MIN, -1), Ok(i64::MIN));
        assert_eq!(pow_i(2, -1), 0);
        assert_eq!(pow_i(-1, -3), -1);
        assert_eq!(pow_i(3, 3), 27);
    }

    #[test]
    fn float_division_rules() {
        assert_eq!(div_floor_f(-7.0, 2.0), -4.0);
        assert_eq!(div_floor_f(7.5, -2.0), -4.0);
        assert!(div_floor_f(1.0, 0.0).is_infinite());
        assert_eq!(remainder_f(-7.0, 3.0), 2.0);
        assert_eq!(remainder_f(7.0, -3.0), -2.0);
        assert!(remainder_f(1.0, 0.0).is_nan());
        assert!(fmax_nan(f64::NAN, 1.0).is_nan());
        assert!(fmin_nan(1.0, f64::NAN).is_nan());
    }
}
