//! Op-by-op tests of the reference interpreter: small one-op graphs with hand-checked values,
//! plus the PyTorch-computed cases of `common/torch_cases.rs`.
// Expected values are written as computed, not as named constants.
#![allow(clippy::approx_constant)]

mod common;

use common::*;
use fxhlo_ir::{Arg, DType};

#[test]
fn torch_cases_match() {
    let mut failures = vec![];
    let cases = torch_cases::cases();
    for c in &cases {
        let mut args: Vec<(&str, A)> = vec![];
        for (name, d, shape, seed, vals) in &c.inputs {
            let n: usize = shape.iter().product();
            let v = vals.clone().unwrap_or_else(|| gen(n, *seed));
            args.push((name, A::T(t(*d, shape, &v))));
        }
        for (name, a) in &c.args {
            args.push((name, A::V(a.clone())));
        }
        match call(c.target, args) {
            Err(e) => failures.push(format!("{}: {e}", c.name)),
            Ok(res) => {
                if res.len() != c.outputs.len() {
                    failures.push(format!(
                        "{}: {} results, want {}",
                        c.name,
                        res.len(),
                        c.outputs.len()
                    ));
                    continue;
                }
                for (j, (r, (d, shape, want))) in res.iter().zip(&c.outputs).enumerate() {
                    let v = r.f64s();
                    if r.dtype != *d || &r.shape != shape {
                        failures.push(format!(
                            "{} result {j}: {} {:?}, want {d} {shape:?}",
                            c.name, r.dtype, r.shape
                        ));
                    } else if let Some(i) = (0..v.len()).find(|&i| !close(v[i], want[i], c.tol)) {
                        failures.push(format!(
                            "{} result {j}: element {i} is {}, want {}\n  got  {v:?}\n  want {want:?}",
                            c.name, v[i], want[i]
                        ));
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

// ---- elementwise ------------------------------------------------------------------------

#[test]
fn add_broadcasts_with_alpha() {
    let r = call1(
        "aten.add.Tensor",
        vec![
            ("self", f32t(&[2, 1], &[1.0, 2.0]).into()),
            ("other", f32t(&[3], &[10.0, 20.0, 30.0]).into()),
            ("alpha", int(2)),
        ],
    );
    assert_eq!(r.dtype, DType::F32);
    assert_tensor(&r, &[2, 3], &[21.0, 41.0, 61.0, 22.0, 42.0, 62.0], 0.0);
}

#[test]
fn scalar_operand_switches_to_scalar_overload() {
    // FX writes `x + 1` as add.Tensor(x, 1); the builder binds it to add.Scalar.
    let r = call1(
        "aten.add.Tensor",
        vec![("self", i64t(&[3], &[1, 2, 3]).into()), ("other", int(1))],
    );
    assert_eq!(r.dtype, DType::I64);
    assert_ints(&r, &[3], &[2, 3, 4]);
    // int tensor * float scalar promotes to f32
    let r = call1(
        "aten.mul.Scalar",
        vec![("self", i64t(&[2], &[1, 3]).into()), ("other", float(0.5))],
    );
    assert_eq!(r.dtype, DType::F32);
    assert_tensor(&r, &[2], &[0.5, 1.5], 0.0);
}

#[test]
fn mixed_dtypes_promote() {
    let r = call1(
        "aten.sub.Tensor",
        vec![
            ("self", i64t(&[2], &[5, 7]).into()),
            ("other", f32t(&[2], &[0.5, 0.25]).into()),
        ],
    );
    assert_eq!(r.dtype, DType::F32);
    assert_tensor(&r, &[2], &[4.5, 6.75], 0.0);
    // A 0-d tensor of a higher category wins; one of the same category does not.
    let r = call1(
        "aten.mul.Tensor",
        vec![
            ("self", it(DType::I32, &[2], &[2, 3]).into()),
            ("other", i64t(&[], &[4]).into()),
        ],
    );
    assert_eq!(r.dtype, DType::I32);
    assert_ints(&r, &[2], &[8, 12]);
}

#[test]
fn integer_arithmetic_wraps() {
    let r = call1(
        "aten.add.Tensor",
        vec![
            ("self", it(DType::I32, &[2], &[i32::MAX as i64, -5]).into()),
            ("other", it(DType::I32, &[2], &[1, 2]).into()),
        ],
    );
    assert_ints(&r, &[2], &[i32::MIN as i64, -3]);
    let r = call1(
        "aten.sub.Tensor",
        vec![
            ("self", it(DType::U8, &[1], &[0]).into()),
            ("other", it(DType::U8, &[1], &[1]).into()),
        ],
    );
    assert_ints(&r, &[1], &[255]);
}

#[test]
fn true_division_of_integers_is_float() {
    let r = call1(
        "aten.div.Tensor",
        vec![
            ("self", i64t(&[3], &[7, -7, 1]).into()),
            ("other", i64t(&[3], &[2, 2, 0]).into()),
        ],
    );
    assert_eq!(r.dtype, DType::F32);
    assert_tensor(&r, &[3], &[3.5, -3.5, f64::INFINITY], 0.0);
}

#[test]
fn integer_rounding_division() {
    let a = || i64t(&[4], &[7, -7, 7, -7]);
    let b = || i64t(&[4], &[2, 2, -2, -2]);
    let trunc = call1(
        "aten.div.Tensor_mode",
        vec![
            ("self", a().into()),
            ("other", b().into()),
            ("rounding_mode", str_("trunc")),
        ],
    );
    assert_ints(&trunc, &[4], &[3, -3, -3, 3]);
    let floor = call1(
        "aten.div.Tensor_mode",
        vec![
            ("self", a().into()),
            ("other", b().into()),
            ("rounding_mode", str_("floor")),
        ],
    );
    assert_ints(&floor, &[4], &[3, -4, -4, 3]);
    let rem = call1(
        "aten.remainder.Tensor",
        vec![
            ("self", a().into()),
            ("other", i64t(&[4], &[3, 3, -3, -3]).into()),
        ],
    );
    assert_ints(&rem, &[4], &[1, 2, -2, -1]);
    let fmod = call1(
        "aten.fmod.Tensor",
        vec![
            ("self", a().into()),
            ("other", i64t(&[4], &[3, 3, -3, -3]).into()),
        ],
    );
    assert_ints(&fmod, &[4], &[1, -1, 1, -1]);
    let fmod_s = call1(
        "aten.fmod.Scalar",
        vec![("self", a().into()), ("other", int(3))],
    );
    assert_ints(&fmod_s, &[4], &[1, -1, 1, -1]);
}

#[test]
fn integer_division_by_zero_is_an_error() {
    for (target, mode) in [
        ("aten.div.Tensor_mode", Some("floor")),
        ("aten.div.Tensor_mode", Some("trunc")),
        ("aten.remainder.Tensor", None),
        ("aten.fmod.Tensor", None),
    ] {
        let mut args = vec![
            ("self", A::T(i64t(&[2], &[1, 2]))),
            ("other", A::T(i64t(&[2], &[1, 0]))),
        ];
        if let Some(m) = mode {
            args.push(("rounding_mode", str_(m)));
        }
        let e = call_err(target, args);
        assert!(e.contains("integer division by zero"), "{e}");
        assert!(e.starts_with("node 2 'the_op' (aten."), "{e}");
    }
}

#[test]
fn float_rounding_division_and_remainder() {
    let r = call1(
        "aten.div.Scalar_mode",
        vec![
            ("self", f32t(&[3], &[7.5, -7.5, 1.0]).into()),
            ("other", float(2.0)),
            ("rounding_mode", str_("floor")),
        ],
    );
    assert_tensor(&r, &[3], &[3.0, -4.0, 0.0], 0.0);
    let r = call1(
        "aten.remainder.Scalar",
        vec![
            ("self", f32t(&[2], &[-1.0, 5.0]).into()),
            ("other", float(3.0)),
        ],
    );
    assert_tensor(&r, &[2], &[2.0, 2.0], 0.0);
}

#[test]
fn pow_variants() {
    let r = call1(
        "aten.pow.Tensor_Scalar",
        vec![
            ("self", f32t(&[3], &[2.0, -3.0, 4.0]).into()),
            ("exponent", int(2)),
        ],
    );
    assert_tensor(&r, &[3], &[4.0, 9.0, 16.0], 0.0);
    let r = call1(
        "aten.pow.Scalar",
        vec![
            ("self", int(2)),
            ("exponent", i64t(&[3], &[0, 3, 10]).into()),
        ],
    );
    assert_eq!(r.dtype, DType::I64);
    assert_ints(&r, &[3], &[1, 8, 1024]);
    let r = call1(
        "aten.pow.Tensor_Tensor",
        vec![
            ("self", i64t(&[4], &[2, -1, 1, 3]).into()),
            ("exponent", i64t(&[4], &[-1, -3, -2, 2]).into()),
        ],
    );
    assert_ints(&r, &[4], &[0, -1, 1, 9]);
    let e = call_err(
        "aten.pow.Tensor_Scalar",
        vec![("self", i64t(&[1], &[2]).into()), ("exponent", int(-1))],
    );
    assert!(e.contains("negative integer powers"), "{e}");
}

#[test]
fn nan_propagates_through_arithmetic_and_min_max() {
    let nan = f64::NAN;
    let a = || f32t(&[3], &[nan, 1.0, 2.0]);
    let b = || f32t(&[3], &[1.0, nan, 1.0]);
    let r = call1(
        "aten.maximum.default",
        vec![("self", a().into()), ("other", b().into())],
    );
    assert_tensor(&r, &[3], &[nan, nan, 2.0], 0.0);
    let r = call1(
        "aten.minimum.default",
        vec![("self", a().into()), ("other", b().into())],
    );
    assert_tensor(&r, &[3], &[nan, nan, 1.0], 0.0);
    let r = call1(
        "aten.mul.Tensor",
        vec![
            ("self", a().into()),
            ("other", f32t(&[1], &[f64::INFINITY]).into()),
        ],
    );
    assert_tensor(&r, &[3], &[nan, f64::INFINITY, f64::INFINITY], 0.0);
    let r = call1("aten.relu.default", vec![("self", a().into())]);
    assert_tensor(&r, &[3], &[nan, 1.0, 2.0], 0.0);
}

#[test]
fn comparisons() {
    let nan = f64::NAN;
    let x = || f32t(&[4], &[nan, 1.0, 2.0, 0.1]);
    let cases = [
        ("aten.eq.Scalar", vec![false, false, false, true]),
        ("aten.ne.Scalar", vec![true, true, true, false]),
        ("aten.gt.Scalar", vec![false, true, true, false]),
        ("aten.le.Scalar", vec![false, false, false, true]),
    ];
    for (target, want) in cases {
        // 0.1 is rounded to f32 before comparing, as torch does.
        let r = call1(target, vec![("self", x().into()), ("other", float(0.1))]);
        assert_eq!(r.dtype, DType::Bool);
        assert_eq!(r.bools(), want, "{target}");
    }
    let r = call1(
        "aten.lt.Tensor",
        vec![
            ("self", i64t(&[2, 1], &[1, 5]).into()),
            ("other", f32t(&[3], &[0.5, 1.5, 7.0]).into()),
        ],
    );
    assert_eq!(r.shape, vec![2, 3]);
    assert_eq!(r.bools(), vec![false, true, true, false, false, true]);
    // Large i64 values compare exactly (not through f64).
    let r = call1(
        "aten.ge.Tensor",
        vec![
            ("self", i64t(&[1], &[(1 << 53) + 1]).into()),
            ("other", i64t(&[1], &[1 << 53]).into()),
        ],
    );
    assert_eq!(r.bools(), vec![true]);
    let r = call1(
        "aten.eq.Tensor",
        vec![
            ("self", i64t(&[1], &[(1 << 53) + 1]).into()),
            ("other", i64t(&[1], &[1 << 53]).into()),
        ],
    );
    assert_eq!(r.bools(), vec![false]);
}

#[test]
fn logical_and_bitwise() {
    let a = || f32t(&[4], &[0.0, 1.0, f64::NAN, -2.0]);
    let b = || boolt(&[4], &[true, true, false, false]);
    let r = call1(
        "aten.logical_and.default",
        vec![("self", a().into()), ("other", b().into())],
    );
    assert_eq!(r.bools(), vec![false, true, false, false]);
    let r = call1(
        "aten.logical_or.default",
        vec![("self", a().into()), ("other", b().into())],
    );
    assert_eq!(r.bools(), vec![true, true, true, true]);
    let r = call1(
        "aten.logical_xor.default",
        vec![("self", a().into()), ("other", b().into())],
    );
    assert_eq!(r.bools(), vec![true, false, true, true]);
    let r = call1("aten.logical_not.default", vec![("self", a().into())]);
    assert_eq!(r.bools(), vec![true, false, false, false]);
    let x = || it(DType::I32, &[3], &[12, -1, 5]);
    let r = call1(
        "aten.bitwise_and.Scalar",
        vec![("self", x().into()), ("other", int(6))],
    );
    assert_ints(&r, &[3], &[4, 6, 4]);
    let r = call1(
        "aten.bitwise_or.Tensor",
        vec![
            ("self", x().into()),
            ("other", it(DType::I32, &[3], &[1, 0, 2]).into()),
        ],
    );
    assert_ints(&r, &[3], &[13, -1, 7]);
    let r = call1(
        "aten.bitwise_xor.Scalar",
        vec![("self", x().into()), ("other", int(1))],
    );
    assert_ints(&r, &[3], &[13, -2, 4]);
    let r = call1(
        "aten.bitwise_not.default",
        vec![("self", it(DType::U8, &[2], &[0, 200]).into())],
    );
    assert_ints(&r, &[2], &[255, 55]);
    let r = call1(
        "aten.bitwise_not.default",
        vec![("self", boolt(&[2], &[true, false]).into())],
    );
    assert_eq!(r.bools(), vec![false, true]);
    let r = call1(
        "aten.bitwise_and.Tensor",
        vec![
            ("self", boolt(&[2], &[true, true]).into()),
            ("other", boolt(&[2], &[true, false]).into()),
        ],
    );
    assert_eq!(r.bools(), vec![true, false]);
    let e = call_err(
        "aten.bitwise_and.Tensor",
        vec![
            ("self", f32t(&[1], &[1.0]).into()),
            ("other", f32t(&[1], &[1.0]).into()),
        ],
    );
    assert!(e.contains("bitwise"), "{e}");
}

#[test]
fn bool_arithmetic() {
    let a = || boolt(&[4], &[true, true, false, false]);
    let b = || boolt(&[4], &[true, false, true, false]);
    let r = call1(
        "aten.add.Tensor",
        vec![("self", a().into()), ("other", b().into())],
    );
    assert_eq!(r.dtype, DType::Bool);
    assert_eq!(r.bools(), vec![true, true, true, false]);
    let r = call1(
        "aten.mul.Tensor",
        vec![("self", a().into()), ("other", b().into())],
    );
    assert_eq!(r.bools(), vec![true, false, false, false]);
    let e = call_err(
        "aten.sub.Tensor",
        vec![("self", a().into()), ("other", b().into())],
    );
    assert!(e.contains("bool"), "{e}");
    let e = call_err("aten.neg.default", vec![("self", a().into())]);
    assert!(e.contains("bool"), "{e}");
}

#[test]
fn unary_functions() {
    let x = || f32t(&[4], &[-1.5, -0.5, 0.5, 2.5]);
    let check = |target: &str, want: &[f64]| {
        let r = call1(target, vec![("self", x().into())]);
        assert_tensor(&r, &[4], want, 1e-6);
    };
    check("aten.abs.default", &[1.5, 0.5, 0.5, 2.5]);
    check("aten.neg.default", &[1.5, 0.5, -0.5, -2.5]);
    check("aten.ceil.default", &[-1.0, -0.0, 1.0, 3.0]);
    check("aten.floor.default", &[-2.0, -1.0, 0.0, 2.0]);
    check("aten.round.default", &[-2.0, -0.0, 0.0, 2.0]);
    check("aten.trunc.default", &[-1.0, -0.0, 0.0, 2.0]);
    check("aten.sign.default", &[-1.0, -1.0, 1.0, 1.0]);
    check(
        "aten.exp.default",
        &[0.22313016, 0.60653066, 1.64872127, 12.18249396],
    );
    check(
        "aten.sin.default",
        &[-0.99749499, -0.47942554, 0.47942554, 0.59847214],
    );
    check("aten.reciprocal.default", &[-0.6666667, -2.0, 2.0, 0.4]);
    check(
        "aten.sqrt.default",
        &[f64::NAN, f64::NAN, 0.70710678, 1.58113883],
    );
    check(
        "aten.log.default",
        &[f64::NAN, f64::NAN, -0.69314718, 0.91629073],
    );
    check(
        "aten.asin.default",
        &[f64::NAN, -0.52359878, 0.52359878, f64::NAN],
    );
    check(
        "aten.cosh.default",
        &[2.35240962, 1.12762597, 1.12762597, 6.13228948],
    );
    check("aten.log2.default", &[f64::NAN, f64::NAN, -1.0, 1.32192809]);
    check(
        "aten.log10.default",
        &[f64::NAN, f64::NAN, -0.30103, 0.39794001],
    );
    check(
        "aten.acosh.default",
        &[f64::NAN, f64::NAN, f64::NAN, 1.56679924],
    );
    check(
        "aten.asinh.default",
        &[-1.19476322, -0.48121183, 0.48121183, 1.64723115],
    );
    check(
        "aten.atan.default",
        &[-0.98279372, -0.46364761, 0.46364761, 1.19028995],
    );
    check(
        "aten.acos.default",
        &[f64::NAN, 2.0943951, 1.04719755, f64::NAN],
    );
    check(
        "aten.cos.default",
        &[0.0707372, 0.87758256, 0.87758256, -0.80114362],
    );
    check(
        "aten.tan.default",
        &[-14.10141995, -0.54630249, 0.54630249, -0.74702230],
    );
    check(
        "aten.sinh.default",
        &[-2.12927946, -0.52109531, 0.52109531, 6.05020448],
    );
    check("aten.leaky_relu.default", &[-0.015, -0.005, 0.5, 2.5]);
    check("aten.hardtanh.default", &[-1.0, -0.5, 0.5, 1.0]);
    // Integer inputs of float functions give f32.
    let r = call1(
        "aten.sqrt.default",
        vec![("self", i64t(&[2], &[4, 2]).into())],
    );
    assert_eq!(r.dtype, DType::F32);
    assert_tensor(&r, &[2], &[2.0, 1.41421356], 1e-6);
    let r = call1(
        "aten.abs.default",
        vec![("self", i64t(&[2], &[-4, i64::MIN]).into())],
    );
    assert_ints(&r, &[2], &[4, i64::MIN]);
    let r = call1(
        "aten.isnan.default",
        vec![("self", f32t(&[3], &[f64::NAN, f64::INFINITY, 1.0]).into())],
    );
    assert_eq!(r.bools(), vec![true, false, false]);
    let r = call1(
        "aten.isinf.default",
        vec![(
            "self",
            f32t(&[3], &[f64::NAN, f64::NEG_INFINITY, 1.0]).into(),
        )],
    );
    assert_eq!(r.bools(), vec![false, true, false]);
    let r = call1(
        "aten.isinf.default",
        vec![("self", i64t(&[1], &[1]).into())],
    );
    assert_eq!(r.bools(), vec![false]);
}

#[test]
fn results_round_to_the_dtype() {
    // 1 + 2^-11 is not representable in f16 (ties to even: 1.0); in bf16 neither is 1 + 2^-8.
    let r = call1(
        "aten.add.Tensor",
        vec![
            ("self", t(DType::F16, &[2], &[1.0, 2048.0]).into()),
            ("other", t(DType::F16, &[2], &[0.00048828125, 1.0]).into()),
        ],
    );
    assert_eq!(r.dtype, DType::F16);
    assert_tensor(&r, &[2], &[1.0, 2048.0], 0.0);
    let r = call1(
        "aten.add.Scalar",
        vec![
            ("self", t(DType::BF16, &[1], &[1.0]).into()),
            ("other", float(0.00390625)),
        ],
    );
    assert_tensor(&r, &[1], &[1.0], 0.0);
    let r = call1(
        "aten.mul.Scalar",
        vec![
            ("self", t(DType::F16, &[1], &[60000.0]).into()),
            ("other", int(2)),
        ],
    );
    assert_tensor(&r, &[1], &[f64::INFINITY], 0.0);
    let r = call1(
        "aten.div.Tensor",
        vec![
            ("self", f32t(&[1], &[1.0]).into()),
            ("other", f32t(&[1], &[3.0]).into()),
        ],
    );
    assert_eq!(r.f64s(), vec![(1.0f32 / 3.0f32) as f64]);
}

#[test]
fn where_and_clamp() {
    let r = call1(
        "aten.where.self",
        vec![
            ("condition", boolt(&[2, 1], &[true, false]).into()),
            ("self", f32t(&[3], &[1.0, 2.0, 3.0]).into()),
            ("other", i64t(&[], &[7]).into()),
        ],
    );
    assert_eq!(r.dtype, DType::F32);
    assert_tensor(&r, &[2, 3], &[1.0, 2.0, 3.0, 7.0, 7.0, 7.0], 0.0);
    let nan = f64::NAN;
    let x = || f32t(&[4], &[nan, -3.0, 0.5, 9.0]);
    let r = call1(
        "aten.clamp.default",
        vec![("self", x().into()), ("min", float(-1.0)), ("max", int(2))],
    );
    assert_tensor(&r, &[4], &[nan, -1.0, 0.5, 2.0], 0.0);
    let r = call1(
        "aten.clamp.default",
        vec![("self", x().into()), ("min", int(3)), ("max", int(2))],
    );
    assert_tensor(&r, &[4], &[nan, 2.0, 2.0, 2.0], 0.0);
    let r = call1(
        "aten.clamp.default",
        vec![("self", i64t(&[3], &[-5, 0, 5]).into()), ("min", int(-1))],
    );
    assert_ints(&r, &[3], &[-1, 0, 5]);
    let r = call1(
        "aten.clamp.Tensor",
        vec![
            ("self", x().into()),
            ("min", f32t(&[4], &[0.0, 0.0, nan, 0.0]).into()),
            ("max", f32t(&[1], &[4.0]).into()),
        ],
    );
    assert_tensor(&r, &[4], &[nan, 0.0, nan, 4.0], 0.0);
    let e = call_err("aten.clamp.default", vec![("self", x().into())]);
    assert!(e.contains("min and max"), "{e}");
}

#[test]
fn activations() {
    let x = || f64t(&[4], &[-2.0, -0.5, 0.0, 1.5]);
    let r = call1("aten.gelu.default", vec![("self", x().into())]);
    assert_tensor(
        &r,
        &[4],
        &[
            -0.04550026389635842,
            -0.15426876936299344,
            0.0,
            1.399789198096713,
        ],
        1e-12,
    );
    let r = call1(
        "aten.gelu.default",
        vec![("self", x().into()), ("approximate", str_("tanh"))],
    );
    assert_tensor(
        &r,
        &[4],
        &[
            -0.04540230591222494,
            -0.15428599017485606,
            0.0,
            1.3995715769802328,
        ],
        1e-12,
    );
    let r = call1("aten.elu.default", vec![("self", x().into())]);
    assert_tensor(
        &r,
        &[4],
        &[-0.8646647167633873, -0.3934693402873666, 0.0, 1.5],
        1e-12,
    );
    let r = call1("aten.sigmoid.default", vec![("self", x().into())]);
    assert_tensor(
        &r,
        &[4],
        &[
            0.11920292202211755,
            0.3775406687981454,
            0.5,
            0.8175744761936437,
        ],
        1e-12,
    );
    let e = call_err(
        "aten.gelu.default",
        vec![("self", x().into()), ("approximate", str_("fast"))],
    );
    assert!(e.contains("fast"), "{e}");
}

#[test]
fn casts() {
    let x = || f32t(&[5], &[1.9, -1.9, 0.0, 300.0, f64::NAN]);
    let r = call1(
        "aten._to_copy.default",
        vec![("self", x().into()), ("dtype", dtype(DType::I64))],
    );
    assert_ints(&r, &[5], &[1, -1, 0, 300, i64::MIN]);
    let r = call1(
        "aten._to_copy.default",
        vec![("self", x().into()), ("dtype", dtype(DType::U8))],
    );
    assert_ints(&r, &[5], &[1, 255, 0, 44, 0]);
    let r = call1(
        "aten._to_copy.default",
        vec![("self", x().into()), ("dtype", dtype(DType::Bool))],
    );
    assert_eq!(r.bools(), vec![true, true, false, true, true]);
    let r = call1(
        "aten._to_copy.default",
        vec![
            ("self", i64t(&[1], &[16_777_217]).into()),
            ("dtype", dtype(DType::F32)),
        ],
    );
    assert_tensor(&r, &[1], &[16_777_216.0], 0.0);
    let r = call1(
        "aten._to_copy.default",
        vec![("self", x().into()), ("dtype", dtype(DType::F16))],
    );
    assert_tensor(
        &r,
        &[5],
        &[1.900390625, -1.900390625, 0.0, 300.0, f64::NAN],
        0.0,
    );
}

// ---- reductions -------------------------------------------------------------------------

fn m23() -> fxhlo_runtime::Tensor {
    f32t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
}

#[test]
fn sums_and_means() {
    let r = call1(
        "aten.sum.dim_IntList",
        vec![("self", m23().into()), ("dim", ints(&[-1]))],
    );
    assert_tensor(&r, &[2], &[6.0, 15.0], 0.0);
    let r = call1(
        "aten.sum.dim_IntList",
        vec![
            ("self", m23().into()),
            ("dim", none()),
            ("keepdim", bool_(true)),
        ],
    );
    assert_tensor(&r, &[1, 1], &[21.0], 0.0);
    let r = call1(
        "aten.sum.dim_IntList",
        vec![
            ("self", boolt(&[3], &[true, true, false]).into()),
            ("dim", ints(&[0])),
        ],
    );
    assert_eq!(r.dtype, DType::I64);
    assert_ints(&r, &[], &[2]);
    let r = call1(
        "aten.sum.dim_IntList",
        vec![("self", f32t(&[0, 3], &[]).into()), ("dim", ints(&[0]))],
    );
    assert_tensor(&r, &[3], &[0.0, 0.0, 0.0], 0.0);
    // (sum of a 0-d tensor with dim=[0] is not tested: the ir's inference rule panics on it.)
    let r = call1(
        "aten.sum.dim_IntList",
        vec![("self", f32t(&[], &[4.0]).into()), ("dim", none())],
    );
    assert_tensor(&r, &[], &[4.0], 0.0);
    let r = call1(
        "aten.sum.dim_IntList",
        vec![
            ("self", i64t(&[2], &[1, 2]).into()),
            ("dim", ints(&[0])),
            ("dtype", dtype(DType::F64)),
        ],
    );
    assert_eq!(r.dtype, DType::F64);
    let r = call1("aten.mean.default", vec![("self", m23().into())]);
    assert_tensor(&r, &[], &[3.5], 0.0);
    let r = call1(
        "aten.mean.dim",
        vec![("self", m23().into()), ("dim", ints(&[0]))],
    );
    assert_tensor(&r, &[3], &[2.5, 3.5, 4.5], 0.0);
    let r = call1(
        "aten.mean.dim",
        vec![("self", f32t(&[0, 2], &[]).into()), ("dim", ints(&[0]))],
    );
    assert_tensor(&r, &[2], &[f64::NAN, f64::NAN], 0.0);
    let r = call1(
        "aten.prod.default",
        vec![("self", i64t(&[3], &[2, 3, 4]).into())],
    );
    assert_ints(&r, &[], &[24]);
    let r = call1("aten.prod.default", vec![("self", f32t(&[0], &[]).into())]);
    assert_tensor(&r, &[], &[1.0], 0.0);
}

#[test]
fn max_min_any() {
    let r = call1(
        "aten.amax.default",
        vec![
            ("self", m23().into()),
            ("dim", ints(&[0])),
            ("keepdim", bool_(true)),
        ],
    );
    assert_tensor(&r, &[1, 3], &[4.0, 5.0, 6.0], 0.0);
    let r = call1(
        "aten.amin.default",
        vec![("self", i64t(&[2, 2], &[3, -1, 4, 2]).into())],
    );
    assert_ints(&r, &[], &[-1]);
    let e = call_err(
        "aten.amax.default",
        vec![("self", f32t(&[0, 3], &[]).into()), ("dim", ints(&[0]))],
    );
    assert!(e.contains("size zero"), "{e}");
    let r = call1(
        "aten.amax.default",
        vec![("self", f32t(&[0, 3], &[]).into()), ("dim", ints(&[1]))],
    );
    assert_eq!(r.shape, vec![0]);
    let r = call1(
        "aten.any.default",
        vec![("self", f32t(&[3], &[0.0, f64::NAN, 0.0]).into())],
    );
    assert_eq!(r.bools(), vec![true]);
    let r = call1(
        "aten.any.dim",
        vec![
            ("self", boolt(&[2, 2], &[false, false, true, false]).into()),
            ("dim", int(1)),
        ],
    );
    assert_eq!(r.bools(), vec![false, true]);
    let r = call1(
        "aten.any.dims",
        vec![("self", i64t(&[2, 0], &[]).into()), ("dim", ints(&[1]))],
    );
    assert_eq!(r.bools(), vec![false, false]);
    let r = call1(
        "aten.argmax.default",
        vec![("self", m23().into()), ("keepdim", bool_(true))],
    );
    assert_ints(&r, &[1, 1], &[5]);
    let r = call1(
        "aten.argmin.default",
        vec![
            ("self", i64t(&[2, 3], &[3, 1, 1, 0, 0, 2]).into()),
            ("dim", int(1)),
        ],
    );
    assert_ints(&r, &[2], &[1, 0]);
    let e = call_err(
        "aten.argmax.default",
        vec![("self", f32t(&[0], &[]).into())],
    );
    assert!(e.contains("size zero"), "{e}");
    let r = call(
        "aten.min.dim",
        vec![
            ("self", i64t(&[2, 2], &[5, 5, 7, 2]).into()),
            ("dim", int(1)),
        ],
    )
    .unwrap();
    assert_ints(&r[0], &[2], &[5, 2]);
    assert_ints(&r[1], &[2], &[0, 1]);
}

#[test]
fn variance_and_cumsum() {
    let r = call1("aten.var.correction", vec![("self", m23().into())]);
    assert_tensor(&r, &[], &[3.5], 1e-7);
    let r = call1(
        "aten.var.correction",
        vec![("self", f32t(&[1], &[2.0]).into())],
    );
    assert_tensor(&r, &[], &[f64::NAN], 0.0);
    let r = call1(
        "aten.var.correction",
        vec![
            ("self", f32t(&[2], &[1.0, 2.0]).into()),
            ("correction", int(3)),
        ],
    );
    assert_tensor(&r, &[], &[f64::INFINITY], 0.0);
    let r = call1(
        "aten.var.dim",
        vec![
            ("self", m23().into()),
            ("dim", ints(&[1])),
            ("unbiased", bool_(false)),
        ],
    );
    assert_tensor(&r, &[2], &[2.0 / 3.0, 2.0 / 3.0], 1e-7);
    let r = call1(
        "aten.cumsum.default",
        vec![
            ("self", i64t(&[2, 3], &[1, 2, 3, 4, 5, 6]).into()),
            ("dim", int(-1)),
        ],
    );
    assert_ints(&r, &[2, 3], &[1, 3, 6, 4, 9, 15]);
    let r = call1(
        "aten.cumsum.default",
        vec![
            ("self", boolt(&[3], &[true, false, true]).into()),
            ("dim", int(0)),
        ],
    );
    assert_eq!(r.dtype, DType::I64);
    assert_ints(&r, &[3], &[1, 1, 2]);
}

#[test]
fn softmax_is_stable() {
    let r = call1(
        "aten._softmax.default",
        vec![
            (
                "self",
                f32t(&[2, 2], &[1000.0, 1000.0, -1000.0, 0.0]).into(),
            ),
            ("dim", int(1)),
            ("half_to_float", bool_(false)),
        ],
    );
    assert_tensor(&r, &[2, 2], &[0.5, 0.5, 0.0, 1.0], 1e-7);
    let r = call1(
        "aten._log_softmax.default",
        vec![
            ("self", f32t(&[2], &[1000.0, 1000.0]).into()),
            ("dim", int(0)),
            ("half_to_float", bool_(false)),
        ],
    );
    assert_tensor(
        &r,
        &[2],
        &[-std::f64::consts::LN_2, -std::f64::consts::LN_2],
        1e-7,
    );
    let r = call1(
        "aten._softmax.default",
        vec![
            ("self", t(DType::F16, &[2], &[0.0, 0.0]).into()),
            ("dim", int(0)),
            ("half_to_float", bool_(true)),
        ],
    );
    assert_eq!(r.dtype, DType::F32);
}

#[test]
fn sort_and_topk() {
    let r = call(
        "aten.sort.default",
        vec![
            ("self", i64t(&[5], &[3, 1, 3, 0, 1]).into()),
            ("descending", bool_(true)),
        ],
    )
    .unwrap();
    assert_ints(&r[0], &[5], &[3, 3, 1, 1, 0]);
    assert_ints(&r[1], &[5], &[0, 2, 1, 4, 3]);
    let r = call(
        "aten.topk.default",
        vec![
            (
                "self",
                f32t(&[2, 3], &[1.0, 9.0, 5.0, f64::NAN, 0.0, 2.0]).into(),
            ),
            ("k", int(2)),
        ],
    )
    .unwrap();
    assert_tensor(&r[0], &[2, 2], &[9.0, 5.0, f64::NAN, 2.0], 0.0);
    assert_ints(&r[1], &[2, 2], &[1, 2, 0, 2]);
    let r = call(
        "aten.topk.default",
        vec![("self", f32t(&[3], &[1.0, 2.0, 3.0]).into()), ("k", int(0))],
    )
    .unwrap();
    assert_eq!(r[0].shape, vec![0]);
}

// ---- shape ops --------------------------------------------------------------------------

#[test]
fn views_and_permutes() {
    let x = || f32t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let r = call1(
        "aten.view.default",
        vec![("self", x().into()), ("size", ints(&[3, -1]))],
    );
    assert_tensor(&r, &[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 0.0);
    let r = call1(
        "aten.permute.default",
        vec![("self", x().into()), ("dims", ints(&[-1, 0]))],
    );
    assert_tensor(&r, &[3, 2], &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0], 0.0);
    let r = call1(
        "aten.expand.default",
        vec![
            ("self", f32t(&[2, 1], &[1.0, 2.0]).into()),
            ("size", ints(&[2, -1, 3])),
        ],
    );
    assert_tensor(
        &r,
        &[2, 2, 3],
        &[1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0],
        0.0,
    );
    let r = call1(
        "aten.unsqueeze.default",
        vec![("self", x().into()), ("dim", int(-1))],
    );
    assert_eq!(r.shape, vec![2, 3, 1]);
    let r = call1(
        "aten.squeeze.dims",
        vec![
            ("self", f32t(&[1, 2, 1], &[1.0, 2.0]).into()),
            ("dim", ints(&[0, 1, -1])),
        ],
    );
    assert_eq!(r.shape, vec![2]);
    let r = call1(
        "aten.squeeze.dim",
        vec![("self", f32t(&[], &[1.0]).into()), ("dim", int(0))],
    );
    assert_eq!(r.shape, Vec::<usize>::new());
    let r = call1("aten.alias.default", vec![("self", x().into())]);
    assert_eq!(r, x());
    let r = call1("aten.clone.default", vec![("self", x().into())]);
    assert_eq!(r, x());
}

#[test]
fn slices_and_selects() {
    let x = || i64t(&[2, 5], &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    let sl = |start: Arg, end: Arg, step: i64| {
        call1(
            "aten.slice.Tensor",
            vec![
                ("self", x().into()),
                ("dim", int(1)),
                ("start", A::V(start)),
                ("end", A::V(end)),
                ("step", int(step)),
            ],
        )
    };
    assert_ints(
        &sl(Arg::Int(1), Arg::Int(i64::MAX), 2),
        &[2, 2],
        &[1, 3, 6, 8],
    );
    assert_ints(&sl(Arg::Int(-2), Arg::None, 1), &[2, 2], &[3, 4, 8, 9]);
    assert_ints(&sl(Arg::Int(4), Arg::Int(2), 1), &[2, 0], &[]);
    assert_ints(&sl(Arg::Int(i64::MIN), Arg::Int(-4), 1), &[2, 1], &[0, 5]);
    let e = call_err(
        "aten.slice.Tensor",
        vec![("self", x().into()), ("dim", int(1)), ("step", int(0))],
    );
    assert!(e.contains("step"), "{e}");
    let r = call1(
        "aten.select.int",
        vec![("self", x().into()), ("dim", int(1)), ("index", int(-1))],
    );
    assert_ints(&r, &[2], &[4, 9]);
    let e = call_err(
        "aten.select.int",
        vec![("self", x().into()), ("dim", int(0)), ("index", int(2))],
    );
    assert!(e.contains("out of range"), "{e}");
    let r = call1(
        "aten.slice_scatter.default",
        vec![
            ("self", x().into()),
            ("src", f32t(&[2, 2], &[-1.0, -2.0, -3.0, -4.0]).into()),
            ("dim", int(1)),
            ("start", int(1)),
            ("step", int(3)),
        ],
    );
    assert_ints(&r, &[2, 5], &[0, -1, 2, 3, -2, 5, -3, 7, 8, -4]);
    let r = call1(
        "aten.select_scatter.default",
        vec![
            ("self", x().into()),
            ("src", i64t(&[5], &[9, 9, 9, 9, 9]).into()),
            ("dim", int(0)),
            ("index", int(-2)),
        ],
    );
    assert_ints(&r, &[2, 5], &[9, 9, 9, 9, 9, 5, 6, 7, 8, 9]);
}

#[test]
fn cat_and_split() {
    let r = call1(
        "aten.cat.default",
        vec![
            (
                "tensors",
                A::L(vec![
                    Some(i64t(&[2, 1], &[1, 2])),
                    Some(f32t(&[0], &[])),
                    Some(f32t(&[2, 2], &[0.5, 1.5, 2.5, 3.5])),
                ]),
            ),
            ("dim", int(-1)),
        ],
    );
    assert_eq!(r.dtype, DType::F32);
    assert_tensor(&r, &[2, 3], &[1.0, 0.5, 1.5, 2.0, 2.5, 3.5], 0.0);
    let r = call(
        "aten.split_with_sizes.default",
        vec![
            ("self", i64t(&[5, 1], &[0, 1, 2, 3, 4]).into()),
            ("split_sizes", ints(&[2, 0, 3])),
        ],
    )
    .unwrap();
    assert_eq!(r.len(), 3);
    assert_ints(&r[0], &[2, 1], &[0, 1]);
    assert_ints(&r[1], &[0, 1], &[]);
    assert_ints(&r[2], &[3, 1], &[2, 3, 4]);
}

#[test]
fn repeat_flip_diagonal_pads() {
    let x = || i64t(&[2, 2], &[1, 2, 3, 4]);
    let r = call1(
        "aten.repeat.default",
        vec![("self", x().into()), ("repeats", ints(&[1, 2, 1]))],
    );
    assert_ints(&r, &[1, 4, 2], &[1, 2, 3, 4, 1, 2, 3, 4]);
    let r = call1(
        "aten.flip.default",
        vec![("self", x().into()), ("dims", ints(&[1]))],
    );
    assert_ints(&r, &[2, 2], &[2, 1, 4, 3]);
    let r = call1(
        "aten.diagonal.default",
        vec![("self", x().into()), ("offset", int(1))],
    );
    assert_ints(&r, &[1], &[2]);
    let r = call1(
        "aten.diagonal.default",
        vec![("self", x().into()), ("offset", int(5))],
    );
    assert_ints(&r, &[0], &[]);
    let r = call1(
        "aten.constant_pad_nd.default",
        vec![
            ("self", x().into()),
            ("pad", ints(&[1, 0])),
            ("value", int(-1)),
        ],
    );
    assert_ints(&r, &[2, 3], &[-1, 1, 2, -1, 3, 4]);
    let r = call1(
        "aten.constant_pad_nd.default",
        vec![("self", x().into()), ("pad", ints(&[0, -1, -1, 0]))],
    );
    assert_ints(&r, &[1, 1], &[3]);
    let r = call1(
        "aten.reflection_pad1d.default",
        vec![
            ("self", i64t(&[1, 3], &[1, 2, 3]).into()),
            ("padding", ints(&[2, 2])),
        ],
    );
    assert_ints(&r, &[1, 7], &[3, 2, 1, 2, 3, 2, 1]);
    let r = call1(
        "aten.replication_pad2d.default",
        vec![("self", x().into()), ("padding", ints(&[1, 0, 0, 1]))],
    );
    assert_ints(&r, &[3, 3], &[1, 1, 2, 3, 3, 4, 3, 3, 4]);
    // Negative pads crop (values from torch.nn.functional.pad(x, pad, mode="replicate")).
    let row = || i64t(&[1, 1, 1, 5], &[0, 1, 2, 3, 4]);
    for (pad, want) in [
        ([-1, 2], &[1, 2, 3, 4, 4, 4][..]),
        ([2, -1], &[0, 0, 0, 1, 2, 3]),
        ([-2, -1], &[2, 3]),
        ([-5, 1], &[4]),
    ] {
        let r = call1(
            "aten.replication_pad2d.default",
            vec![
                ("self", row().into()),
                ("padding", ints(&[pad[0], pad[1], 0, 0])),
            ],
        );
        assert_ints(&r, &[1, 1, 1, want.len()], want);
    }
    let e = call_err(
        "aten.reflection_pad1d.default",
        vec![
            ("self", i64t(&[1, 2], &[1, 2]).into()),
            ("padding", ints(&[2, 0])),
        ],
    );
    assert!(e.contains("less than"), "{e}");
    let r = call1(
        "aten.as_strided.default",
        vec![
            ("self", x().into()),
            ("size", ints(&[2, 2])),
            ("stride", ints(&[1, 2])),
        ],
    );
    assert_ints(&r, &[2, 2], &[1, 3, 2, 4]);
    let e = call_err(
        "aten.as_strided.default",
        vec![
            ("self", x().into()),
            ("size", ints(&[2, 2])),
            ("stride", ints(&[2, 2])),
        ],
    );
    assert!(e.contains("reach element"), "{e}");
    let r = call1(
        "aten.copy.default",
        vec![
            ("self", f32t(&[2, 2], &[0.0; 4]).into()),
            ("src", i64t(&[2], &[7, 8]).into()),
        ],
    );
    assert_tensor(&r, &[2, 2], &[7.0, 8.0, 7.0, 8.0], 0.0);
}

// ---- indexing ---------------------------------------------------------------------------

#[test]
fn embedding_and_gather() {
    let w = || f32t(&[3, 2], &[0.0, 1.0, 10.0, 11.0, 20.0, 21.0]);
    let r = call1(
        "aten.embedding.default",
        vec![
            ("weight", w().into()),
            ("indices", i64t(&[2, 2], &[2, 0, 1, 1]).into()),
        ],
    );
    assert_tensor(
        &r,
        &[2, 2, 2],
        &[20.0, 21.0, 0.0, 1.0, 10.0, 11.0, 10.0, 11.0],
        0.0,
    );
    let e = call_err(
        "aten.embedding.default",
        vec![("weight", w().into()), ("indices", i64t(&[1], &[3]).into())],
    );
    assert!(
        e.contains("index 3 is out of range") && e.contains("'the_op'"),
        "{e}"
    );
    let e = call_err(
        "aten.embedding.default",
        vec![
            ("weight", w().into()),
            ("indices", i64t(&[1], &[-1]).into()),
        ],
    );
    assert!(e.contains("out of range"), "{e}");
    let r = call1(
        "aten.gather.default",
        vec![
            ("self", w().into()),
            ("dim", int(0)),
            ("index", i64t(&[1, 2], &[2, 0]).into()),
        ],
    );
    assert_tensor(&r, &[1, 2], &[20.0, 1.0], 0.0);
    let e = call_err(
        "aten.gather.default",
        vec![
            ("self", w().into()),
            ("dim", int(1)),
            ("index", i64t(&[1, 1], &[2]).into()),
        ],
    );
    assert!(e.contains("out of bounds"), "{e}");
}

#[test]
fn advanced_indexing() {
    let x = || i64t(&[2, 3, 4], &(0..24).collect::<Vec<_>>());
    // x[:, [2, -3]] -> [2, 2, 4]
    let r = call1(
        "aten.index.Tensor",
        vec![
            ("self", x().into()),
            ("indices", A::L(vec![None, Some(i64t(&[2], &[2, -3]))])),
        ],
    );
    assert_ints(
        &r,
        &[2, 2, 4],
        &[8, 9, 10, 11, 0, 1, 2, 3, 20, 21, 22, 23, 12, 13, 14, 15],
    );
    // x[[1, 0], :, [[3], [0]]] (non-adjacent: broadcast dims go first) -> [2, 2, 3]
    let r = call1(
        "aten.index.Tensor",
        vec![
            ("self", x().into()),
            (
                "indices",
                A::L(vec![
                    Some(i64t(&[2], &[1, 0])),
                    None,
                    Some(i64t(&[2, 1], &[3, 0])),
                ]),
            ),
        ],
    );
    assert_ints(&r, &[2, 2, 3], &[15, 19, 23, 3, 7, 11, 12, 16, 20, 0, 4, 8]);
    // adjacent index tensors broadcast in place: x[:, [[0], [2]], [1, 3]] -> [2, 2, 2]
    let r = call1(
        "aten.index.Tensor",
        vec![
            ("self", x().into()),
            (
                "indices",
                A::L(vec![
                    None,
                    Some(i64t(&[2, 1], &[0, 2])),
                    Some(i64t(&[2], &[1, 3])),
                ]),
            ),
        ],
    );
    assert_ints(&r, &[2, 2, 2], &[1, 3, 9, 11, 13, 15, 21, 23]);
    let e = call_err(
        "aten.index.Tensor",
        vec![
            ("self", x().into()),
            ("indices", A::L(vec![Some(i64t(&[1], &[2]))])),
        ],
    );
    assert!(e.contains("out of bounds"), "{e}");
    let r = call1(
        "aten.index_select.default",
        vec![
            ("self", x().into()),
            ("dim", int(2)),
            ("index", i64t(&[2], &[3, 3]).into()),
        ],
    );
    assert_eq!(r.shape, vec![2, 3, 2]);
    let e = call_err(
        "aten.index_select.default",
        vec![
            ("self", x().into()),
            ("dim", int(0)),
            ("index", i64t(&[1], &[-1]).into()),
        ],
    );
    assert!(e.contains("out of bounds"), "{e}");
}

#[test]
fn index_put_and_scatter() {
    let x = || f32t(&[4], &[0.0; 4]);
    let r = call1(
        "aten.index_put.default",
        vec![
            ("self", x().into()),
            ("indices", A::L(vec![Some(i64t(&[3], &[1, -1, 1]))])),
            ("values", f32t(&[3], &[1.0, 2.0, 3.0]).into()),
            ("accumulate", bool_(true)),
        ],
    );
    assert_tensor(&r, &[4], &[0.0, 4.0, 0.0, 2.0], 0.0);
    let r = call1(
        "aten.index_put.default",
        vec![
            ("self", x().into()),
            ("indices", A::L(vec![Some(i64t(&[2], &[0, 2]))])),
            ("values", f32t(&[], &[5.0]).into()),
        ],
    );
    assert_tensor(&r, &[4], &[5.0, 0.0, 5.0, 0.0], 0.0);
    // A boolean mask, as `x[x > 0] = -1` lowers.
    let r = call1(
        "aten.index_put.default",
        vec![
            ("self", f32t(&[2, 2], &[1.0, -1.0, 2.0, 0.0]).into()),
            (
                "indices",
                A::L(vec![Some(boolt(&[2, 2], &[true, false, true, false]))]),
            ),
            ("values", f32t(&[], &[9.0]).into()),
        ],
    );
    assert_tensor(&r, &[2, 2], &[9.0, -1.0, 9.0, 0.0], 0.0);
    let r = call1(
        "aten.scatter.src",
        vec![
            ("self", i64t(&[2, 3], &[0; 6]).into()),
            ("dim", int(1)),
            ("index", i64t(&[2, 1], &[2, 0]).into()),
            ("src", i64t(&[2, 2], &[7, 8, 9, 10]).into()),
        ],
    );
    assert_ints(&r, &[2, 3], &[0, 0, 7, 9, 0, 0]);
    let r = call1(
        "aten.scatter.value",
        vec![
            ("self", i64t(&[3], &[0; 3]).into()),
            ("dim", int(0)),
            ("index", i64t(&[2], &[2, 2]).into()),
            ("value", int(4)),
        ],
    );
    assert_ints(&r, &[3], &[0, 0, 4]);
    let e = call_err(
        "aten.scatter_add.default",
        vec![
            ("self", i64t(&[3], &[0; 3]).into()),
            ("dim", int(0)),
            ("index", i64t(&[1], &[3]).into()),
            ("src", i64t(&[1], &[1]).into()),
        ],
    );
    assert!(e.contains("out of bounds"), "{e}");
    let r = call1(
        "aten.scatter_reduce.two",
        vec![
            ("self", i64t(&[3], &[1, 2, 3]).into()),
            ("dim", int(0)),
            ("index", i64t(&[3], &[0, 0, 2]).into()),
            ("src", i64t(&[3], &[4, 5, 6]).into()),
            ("reduce", str_("mean")),
            ("include_self", bool_(false)),
        ],
    );
    assert_ints(&r, &[3], &[4, 2, 6]);
    let e = call_err(
        "aten.masked_scatter.default",
        vec![
            ("self", f32t(&[3], &[0.0; 3]).into()),
            ("mask", boolt(&[3], &[true; 3]).into()),
            ("source", f32t(&[2], &[1.0, 2.0]).into()),
        ],
    );
    assert!(e.contains("more elements"), "{e}");
}

// ---- creation and random ----------------------------------------------------------------

#[test]
fn creation_ops() {
    let r = call1(
        "aten.arange.start_step",
        vec![("start", int(2)), ("end", int(9)), ("step", int(3))],
    );
    assert_eq!(r.dtype, DType::I64);
    assert_ints(&r, &[3], &[2, 5, 8]);
    let r = call1(
        "aten.arange.start_step",
        vec![
            ("start", float(0.0)),
            ("end", float(1.0)),
            ("step", float(0.25)),
        ],
    );
    assert_eq!(r.dtype, DType::F32);
    assert_tensor(&r, &[4], &[0.0, 0.25, 0.5, 0.75], 0.0);
    let r = call1(
        "aten.arange.start_step",
        vec![("start", int(5)), ("end", int(0)), ("step", int(-2))],
    );
    assert_ints(&r, &[3], &[5, 3, 1]);
    let r = call1(
        "aten.full.default",
        vec![("size", ints(&[2, 0])), ("fill_value", float(1.5))],
    );
    assert_eq!((r.dtype, r.shape.clone()), (DType::F32, vec![2, 0]));
    let r = call1(
        "aten.full.default",
        vec![("size", ints(&[2])), ("fill_value", bool_(true))],
    );
    assert_eq!(r.bools(), vec![true, true]);
    let r = call1(
        "aten.full_like.default",
        vec![
            ("self", m23().into()),
            ("fill_value", int(7)),
            ("dtype", dtype(DType::I32)),
        ],
    );
    assert_ints(&r, &[2, 3], &[7; 6]);
    let r = call1(
        "aten.empty.memory_format",
        vec![("size", ints(&[2, 2])), ("dtype", dtype(DType::F64))],
    );
    assert_tensor(&r, &[2, 2], &[0.0; 4], 0.0);
    let r = call1(
        "aten.empty_strided.default",
        vec![("size", ints(&[3])), ("stride", ints(&[1]))],
    );
    assert_eq!(r.shape, vec![3]);
    let r = call1(
        "aten.scalar_tensor.default",
        vec![("s", float(2.5)), ("dtype", dtype(DType::I64))],
    );
    assert_ints(&r, &[], &[2]);
    let r = call1(
        "aten.fill.Scalar",
        vec![("self", i64t(&[2], &[1, 2]).into()), ("value", float(3.7))],
    );
    assert_ints(&r, &[2], &[3, 3]);
}

#[test]
fn random_ops_have_the_right_shape_and_distribution() {
    let r = call1("aten.rand.default", vec![("size", ints(&[100, 100]))]);
    assert_eq!((r.dtype, r.shape.clone()), (DType::F32, vec![100, 100]));
    let v = r.f64s();
    assert!(v.iter().all(|x| (0.0..1.0).contains(x)));
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    assert!((mean - 0.5).abs() < 0.02, "{mean}");
    let r = call1(
        "aten.randn.default",
        vec![("size", ints(&[10000])), ("dtype", dtype(DType::F64))],
    );
    let v = r.f64s();
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / v.len() as f64;
    assert!(
        mean.abs() < 0.05 && (var - 1.0).abs() < 0.05,
        "{mean} {var}"
    );
    let r = call1("aten.randperm.default", vec![("n", int(50))]);
    let mut v = r.i64s();
    v.sort();
    assert_eq!(v, (0..50).collect::<Vec<_>>());
    // Deterministic for the default seed.
    assert_eq!(call1("aten.randperm.default", vec![("n", int(50))]), r);
}

#[test]
fn dropout() {
    let x = || f32t(&[1000], &[1.0; 1000]);
    for (p, train) in [
        (0.5, Arg::Bool(false)),
        (0.0, Arg::Bool(true)),
        (0.0, Arg::None),
    ] {
        let r = call(
            "aten.native_dropout.default",
            vec![
                ("input", x().into()),
                ("p", float(p)),
                ("train", A::V(train)),
            ],
        )
        .unwrap();
        assert_eq!(r[0], x());
        assert!(r[1].bools().iter().all(|&b| b));
    }
    let r = call(
        "aten.native_dropout.default",
        vec![
            ("input", x().into()),
            ("p", float(0.25)),
            ("train", bool_(true)),
        ],
    )
    .unwrap();
    let kept = r[1].bools().iter().filter(|&&b| b).count();
    assert!((700..800).contains(&kept), "{kept}");
    for (v, m) in r[0].f64s().iter().zip(r[1].bools()) {
        let want = if m {
            (1.0f64 / 0.75) as f32 as f64
        } else {
            0.0
        };
        assert_eq!(*v, want);
    }
    let r = call(
        "aten.native_dropout.default",
        vec![
            ("input", x().into()),
            ("p", float(1.0)),
            ("train", bool_(true)),
        ],
    )
    .unwrap();
    assert!(r[0].f64s().iter().all(|&v| v == 0.0));
}

// ---- linear algebra ---------------------------------------------------------------------

#[test]
fn matrix_products() {
    let a = || f32t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let b = || f32t(&[3, 2], &[1.0, 0.0, 0.0, 1.0, 1.0, 1.0]);
    let r = call1(
        "aten.mm.default",
        vec![("self", a().into()), ("mat2", b().into())],
    );
    assert_tensor(&r, &[2, 2], &[4.0, 5.0, 10.0, 11.0], 0.0);
    let r = call1(
        "aten.addmm.default",
        vec![
            ("self", f32t(&[2], &[0.5, f64::NAN]).into()),
            ("mat1", a().into()),
            ("mat2", b().into()),
            ("beta", int(2)),
        ],
    );
    assert_tensor(&r, &[2, 2], &[5.0, f64::NAN, 11.0, f64::NAN], 0.0);
    let r = call1(
        "aten.addmm.default",
        vec![
            ("self", f32t(&[2], &[0.5, f64::NAN]).into()),
            ("mat1", a().into()),
            ("mat2", b().into()),
            ("beta", int(0)),
            ("alpha", float(0.5)),
        ],
    );
    assert_tensor(&r, &[2, 2], &[2.0, 2.5, 5.0, 5.5], 0.0);
    let r = call1(
        "aten.bmm.default",
        vec![
            ("self", i64t(&[2, 1, 2], &[1, 2, 3, 4]).into()),
            ("mat2", i64t(&[2, 2, 1], &[1, 1, 2, -1]).into()),
        ],
    );
    assert_ints(&r, &[2, 1, 1], &[3, 2]);
    let r = call1(
        "aten.mm.default",
        vec![
            ("self", f32t(&[2, 0], &[]).into()),
            ("mat2", f32t(&[0, 3], &[]).into()),
        ],
    );
    assert_tensor(&r, &[2, 3], &[0.0; 6], 0.0);
}

// ---- a small model ----------------------------------------------------------------------

#[test]
fn mlp_with_weights_and_shared_values() {
    use fxhlo_ir::read::GraphBuilder;
    use fxhlo_ir::{InputKind, Model, TensorType, ValueRef};
    let mut b = GraphBuilder::default();
    let x = b
        .input(
            "x",
            InputKind::User,
            None,
            TensorType::new(DType::F32, &[2, 3]),
        )
        .unwrap();
    let w = b
        .input(
            "p_w",
            InputKind::Parameter,
            Some("w".into()),
            TensorType::new(DType::F32, &[3, 2]),
        )
        .unwrap();
    let bias = b
        .input(
            "p_b",
            InputKind::Parameter,
            Some("b".into()),
            TensorType::new(DType::F32, &[2]),
        )
        .unwrap();
    let t = |v| Arg::Tensor(v);
    b.op(
        "addmm",
        "aten.addmm.default",
        vec![
            ("self".into(), t(bias)),
            ("mat1".into(), t(x)),
            ("mat2".into(), t(w)),
        ],
        vec!["h".into()],
        None,
    )
    .unwrap();
    let h = ValueRef::new(3, 0);
    b.op(
        "relu",
        "aten.relu.default",
        vec![("self".into(), t(h))],
        vec!["r".into()],
        None,
    )
    .unwrap();
    let r = ValueRef::new(4, 0);
    b.op(
        "ln",
        "aten.native_layer_norm.default",
        vec![
            ("input".into(), t(r)),
            ("normalized_shape".into(), Arg::Ints(vec![2])),
            ("weight".into(), Arg::None),
            ("bias".into(), Arg::None),
            ("eps".into(), Arg::Float(0.0)),
        ],
        vec!["y".into(), "mean".into(), "rstd".into()],
        None,
    )
    .unwrap();
    let g = b
        .finish(vec![ValueRef::new(5, 0), ValueRef::new(5, 1), h, h])
        .unwrap();
    let mut model = Model {
        graph: g,
        weights: Default::default(),
    };
    model.weights.insert(
        "w".into(),
        f32t(&[3, 2], &[1.0, -1.0, 0.0, 1.0, 1.0, 0.0]).to_host(),
    );
    model
        .weights
        .insert("b".into(), f32t(&[2], &[0.0, 1.0]).to_host());
    let mut inputs = std::collections::BTreeMap::new();
    inputs.insert(
        "x".to_string(),
        f32t(&[2, 3], &[1.0, 2.0, 3.0, -4.0, 5.0, 6.0]).to_host(),
    );
    let out = fxhlo_runtime::run(&model, &inputs).unwrap();
    assert_eq!(out.len(), 4);
    let y = fxhlo_runtime::Tensor::from_host(&out[0]).unwrap();
    // h = [[4, 2], [2, 10]]; relu keeps it; layer norm of each row: [1, -1], [-1, 1].
    assert_tensor(&y, &[2, 2], &[1.0, -1.0, -1.0, 1.0], 1e-6);
    let mean = fxhlo_runtime::Tensor::from_host(&out[1]).unwrap();
    assert_tensor(&mean, &[2, 1], &[3.0, 6.0], 0.0);
    assert_eq!(out[2], out[3]);
    let h = fxhlo_runtime::Tensor::from_host(&out[2]).unwrap();
    assert_tensor(&h, &[2, 2], &[4.0, 2.0, 2.0, 10.0], 0.0);
}

#[test]
fn remaining_overloads() {
    let x = || i64t(&[3], &[1, 2, 3]);
    assert_ints(
        &call1(
            "aten.bitwise_or.Scalar",
            vec![("self", x().into()), ("other", int(4))],
        ),
        &[3],
        &[5, 6, 7],
    );
    assert_ints(
        &call1(
            "aten.bitwise_xor.Tensor",
            vec![
                ("self", x().into()),
                ("other", i64t(&[3], &[3, 3, 3]).into()),
            ],
        ),
        &[3],
        &[2, 1, 0],
    );
    let r = call1(
        "aten.div.Scalar",
        vec![("self", x().into()), ("other", int(2))],
    );
    assert_eq!(r.dtype, DType::F32);
    assert_tensor(&r, &[3], &[0.5, 1.0, 1.5], 0.0);
    assert_eq!(
        call1(
            "aten.lt.Scalar",
            vec![("self", x().into()), ("other", float(2.5))]
        )
        .bools(),
        vec![true, true, false]
    );
    assert_eq!(
        call1(
            "aten.ne.Tensor",
            vec![("self", x().into()), ("other", i64t(&[1], &[2]).into())]
        )
        .bools(),
        vec![true, false, true]
    );
    let r = call1(
        "aten.sub.Scalar",
        vec![("self", x().into()), ("other", int(1)), ("alpha", int(3))],
    );
    assert_ints(&r, &[3], &[-2, -1, 0]);
    let e = call_err(
        "aten.sub.Scalar",
        vec![
            ("self", x().into()),
            ("other", int(1)),
            ("alpha", float(0.5)),
        ],
    );
    assert!(e.contains("alpha"), "{e}");
    let r = call1(
        "aten.reflection_pad3d.default",
        vec![
            ("self", i64t(&[1, 2, 1, 2], &[1, 2, 3, 4]).into()),
            ("padding", ints(&[1, 0, 0, 0, 1, 0])),
        ],
    );
    assert_ints(&r, &[1, 3, 1, 3], &[4, 3, 4, 2, 1, 2, 4, 3, 4]);
}
