//! Op-by-op tests of the reference interpreter: small one-op graphs with hand-checked values,
//! plus the PyTorch-computed cases of `common/torch_cases.rs`.

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
                    failures.push(format!("{}: {} results, want {}", c.name, res.len(), c.outputs.len()));
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
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
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
    let r = call1("aten.add.Tensor", vec![("self", i64t(&[3], &[1, 2, 3]).into()), ("other", int(1))]);
    assert_eq!(r.dtype, DType::I64);
    assert_ints(&r, &[3], &[2, 3, 4]);
    // int tensor * float scalar promotes to f32
    let r = call1("aten.mul.Scalar", vec![("self", i64t(&[2], &[1, 3]).into()), ("other", float(0.5))]);
    assert_eq!(r.dtype, DType::F32);
    assert_tensor(&r, &[2], &[0.5, 1.5], 0.0);
}

#[test]
fn mixed_dtypes_promote() {
    let r = call1(
        "aten.sub.Tensor",
        vec![("self", i64t(&[2], &[5, 7]).into()), ("other", f32t(&[2], &[0.5, 0.25]).into())],
    );
    assert_eq!(r.dtype, DType::F32);
    assert_tensor(&r, &[2], &[4.5, 6.75], 0.0);
    // A 0-d tensor of a higher category wins; one of the same category does not.
    let r = call1(
        "aten.mul.Tensor",
        vec![("self", it(DType::I32, &[2], &[2, 3]).into()), ("other", i64t(&[], &[4]).into())],
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
        vec![("self", it(DType::U8, &[1], &[0]).into()), ("other", it(DType::U8, &[1], &[1]).into())],
    );
    assert_ints(&r, &[1], &[255]);
}

#[test]
fn true_division_of_integers_is_float() {
    let r = call1(
        "aten.div.Tensor",
        vec![("self", i64t(&[3], &[7, -7, 1]).into()), ("other", i64t(&[3], &[2, 2, 0]).into())],
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
        vec![("self", a().into()), ("other", b().into()), ("rounding_mode", str_("trunc"))],
    );
    assert_ints(&trunc, &[4], &[3, -3, -3, 3]);
    let floor = call1(
        "aten.div.Tensor_mode",
        vec![("self", a().into()), ("other", b().into()), ("rounding_mode", str_("floor"))],
    );
    assert_ints(&floor, &[4], &[3, -4, -4, 3]);
    let rem = call1("aten.remainder.Tensor", vec![("self", a().into()), ("other", i64t(&[4], &[3, 3, -3, -3]).into())]);
    assert_ints(&rem, &[4], &[1, 2, -2, -1]);
    let fmod = call1("aten.fmod.Tensor", vec![("self", a().into()), ("other", i64t(&[4], &[3, 3, -3, -3]).into())]);
    assert_ints(&fmod, &[4], &[1, -1, 1, -1]);
    let fmod_s = call1("aten.fmod.Scalar", vec![("self", a().into()), ("other", int(3))]);
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
        let mut args = vec![("self", A::T(i64t(&[2], &[1, 2]))), ("other", A::T(i64t(&[2], &[1, 0])))];
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
        vec![("self", f32t(&[3], &[7.5, -7.5, 1.0]).into()), ("other", float(2.0)), ("rounding_mode", str_("floor"))],
    );
    assert_tensor(&r, &[3], &[3.0, -4.0, 0.0], 0.0);
    let r = call1("aten.remainder.Scalar", vec![("self", f32t(&[2], &[-1.0, 5.0]).into()), ("other", float(3.0))]);
    assert_tensor(&r, &[2], &[2.0, 2.0], 0.0);
}

#[test]
fn pow_variants() {
    let r = call1("aten.pow.Tensor_Scalar", vec![("self", f32t(&[3], &[2.0, -3.0, 4.0]).into()), ("exponent", int(2))]);
    assert_tensor(&r, &[3], &[4.0, 9.0, 16.0], 0.0);
    let r = call1("aten.pow.Scalar", vec![("self", int(2)), ("exponent", i64t(&[3], &[0, 3, 10]).into())]);
    assert_eq!(r.dtype, DType::I64);
    assert_ints(&r, &[3], &[1, 8, 1024]);
    let r = call1(
        "aten.pow.Tensor_Tensor",
        vec![("self", i64t(&[4], &[2, -1, 1, 3]).into()), ("exponent", i64t(&[4], &[-1, -3, -2, 2]).into())],
    );
    assert_ints(&r, &[4], &[0, -1, 1, 9]);
    let e = call_err("aten.pow.Tensor_Scalar", vec![("self", i64t(&[1], &[2]).into()), ("exponent", int(-1))]);
    assert!(e.contains("negative integer powers"), "{e}");
}

#[test]
fn nan_propagates_through_arithmetic_and_min_max() {
    let nan = f64::NAN;
    let a = || f32t(&[3], &[nan, 1.0, 2.0]);
    let b = || f32t(&[3], &[1.0, nan, 1.0]);
    let r = call1("aten.maximum.default", vec![("self", a().into()), ("other", b().into())]);
    assert_tensor(&r, &[3], &[nan, nan, 2.0], 0.0);
    let r = call1("aten.minimum.default", vec![("self", a().into()), ("other", b().into())]);
    assert_tensor(&r, &[3], &[nan, nan, 1.0], 0.0);
    let r = call1("aten.mul.Tensor", vec![("self", a().into()), ("other", f32t(&[1], &[f64::INFINITY]).into())]);
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
        vec![("self", i64t(&[2, 1], &[1, 5]).into()), ("other", f32t(&[3], &[0.5, 1.5, 7.0]).into())],
    );
    assert_eq!(r.shape, vec![2, 3]);
    assert_eq!(r.bools(), vec![false, true, true, false, false, true]);
    // Large i64 values compare exactly (not through f64).
    let r = call1(
        "aten.ge.Tensor",
        vec![("self", i64t(&[1], &[(1 << 53) + 1]).into()), ("other", i64t(&[1], &[1 << 53]).into())],
    );
    assert_eq!(r.bools(), vec![true]);
    let r = call1("aten.eq.Tensor", vec![("self", i64t(&[1], &[(1 << 53) + 1]).into()), ("other", i64t(&[1], &[1 << 53]).into())]);
    assert_eq!(r.bools(), vec![false]);
}

#[test]
fn logical_and_bitwise() {
    let a = || f32t(&[4], &[0.0, 1.0, f64::NAN, -2.0]);
    let b = || boolt(&[4], &[true, true, false, false]);
    let r = call1("aten.logical_and.default", vec![("self", a().into()), ("other", b().into())]);
    assert_eq!(r.bools(), vec![false, true, false, false]);
    let r = call1("aten.logical_or.default", vec![("self", a().into()), ("other", b().into())]);
    assert_eq!(r.bools(), vec![true, true, true, true]);
    let r = call1("aten.logical_xor.default", vec![("self", a().into()), ("other", b().into())]);
    assert_eq!(r.bools(), vec![true, false, true, true]);
    let r = call1("aten.logical_not.default", vec![("self", a().into())]);
    assert_eq!(r.bools(), vec![true, false, false, false]);
    let x = || it(DType::I32, &[3], &[12, -1, 5]);
    let r = call1("aten.bitwise_and.Scalar", vec![("self", x().into()), ("other", int(6))]);
    assert_ints(&r, &[3], &[4, 6, 4]);
    let r = call1("aten.bitwise_or.Tensor", vec![("self", x().into()), ("other", it(DType::I32, &[3], &[1, 0, 2]).into())]);
    assert_ints(&r, &[3], &[13, -1, 7]);
    let r = call1("aten.bitwise_xor.Scalar", vec![("self", x().into()), ("other", int(1))]);
    assert_ints(&r, &[3], &[13, -2, 4]);
    let r = call1("aten.bitwise_not.default", vec![("self", it(DType::U8, &[2], &[0, 200]).into())]);
    assert_ints(&r, &[2], &[255, 55]);
    let r = call1("aten.bitwise_not.default", vec![("self", boolt(&[2], &[true, false]).into())]);
    assert_eq!(r.bools(), vec![false, true]);
    let r = call1(
        "aten.bitwise_and.Tensor",
        vec![("self", boolt(&[2], &[true, true]).into()), ("other", boolt(&[2], &[true, false]).into())],
    );
    assert_eq!(r.bools(), vec![true, false]);
    let e = call_err("aten.bitwise_and.Tensor", vec![("self", f32t(&[1], &[1.0]).into()), ("other", f32t(&[1], &[1.0]).into())]);
    assert!(e.contains("bitwise"), "{e}");
}

#[test]
fn bool_arithmetic() {
    let a = || boolt(&[4], &[true, true, false, false]);
    let b = || boolt(&[4], &[true, false, true, false]);
    let r = call1("aten.add.Tensor", vec![("self", a().into()), ("other", b().into())]);
    assert_eq!(r.dtype, DType::Bool);
    assert_eq!(r.bools(), vec![true, true, true, false]);
    let r = call1("aten.mul.Tensor", vec![("self", a().into()), ("other", b().into())]);
    assert_eq!(r.bools(), vec![true, false, false, false]);
    let e = call_err("aten.sub.Tensor", vec![("self", a().into()), ("other", b().into())]);
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
    check("aten.exp.default", &[0.22313016, 0.60653066, 1.64872127, 12.18249396]);
    check("aten.sin.default", &[-0.99749499, -0.47942554, 0.47942554, 0.59847214]);
    check("aten.reciprocal.default", &[-0.6666667, -2.0, 2.0, 0.4]);
    check("aten.sqrt.default", &[f64::NAN, f64::NAN, 0.70710678, 1.58113883]);
    check("aten.log.default", &[f64::NAN, f64::NAN, -0.69314718, 0.91629073]);
    check("aten.asin.default", &[f64::NAN, -0.52359878, 0.52359878, f64::NAN]);
    check("aten.cosh.default", &[2.35240962, 1.12762597, 1.12762597, 6.13228948]);
    check("aten.log2.default", &[f64::NAN, f64::NAN, -1.0, 1.32192809]);
    check("aten.log10.default", &[f64::NAN, f64::NAN, -0.30103, 0.39794001]);
    check("aten.acosh.default", &[f64::NAN, f64::NAN, f64::NAN, 1.56679924]);
    check("aten.asinh.default", &[-1.19476322, -0.48121183, 0.48121183, 1.64723115]);
    check("aten.atan.default", &[-0.98279372, -0.46364761, 0.46364761, 1.19028995]);
    check("aten.acos.default", &[f64::NAN, 2.0943951, 1.04719755, f64::NAN]);
    check("aten.cos.default", &[0.0707372, 0.87758256, 0.87758256, -0.80114362]);
    check("aten.tan.default", &[-14.10141995, -0.54630249, 0.54630249, -0.74702230]);
    check("aten.sinh.default", &[-2.12927946, -0.52109531, 0.52109531, 6.05020448]);
    check("aten.leaky_relu.default", &[-0.015, -0.005, 0.5, 2.5]);
    check("aten.hardtanh.default", &[-1.0, -0.5, 0.5, 1.0]);
    // Integer inputs of float functions give f32.
    let r = call1("aten.sqrt.default", vec![("self", i64t(&[2], &[4, 2]).into())]);
    assert_eq!(r.dtype, DType::F32);
    assert_tensor(&r, &[2], &[2.0, 1.41421356], 1e-6);
    let r = call1("aten.abs.default", vec![("self", i64t(&[2], &[-4, i64::MIN]).into())]);
    assert_ints(&r, &[2], &[4, i64::MIN]);
    let r = call1("aten.isnan.default", vec![("self", f32t(&[3], &[f64::NAN, f64::INFINITY, 1.0]).into())]);
    assert_eq!(r.bools(), vec![true, false, false]);
    let r = call1("aten.isinf.default", vec![("self", f32t(&[3], &[f64::NAN, f64::NEG_INFINITY, 1.0]).into())]);
    assert_eq!(r.bools(), vec![false, true, false]);
    let r = call1("aten.isinf.default", vec![("self", i64t(&[1], &[1]).into())]);
    assert_eq!(r.bools(), vec![false]);
}

#[test]
fn results_round_to_the_dtype() {
    // 1 + 2^-11 is not representable in f16 (ties to even: 1.0); in bf16 neither is 1 + 2^-8.
    let r = call1(
        "aten.add.Tensor",
        vec![("self", t(DType::F16, &[2], &[1.0, 2048.0]).into()), ("other", t(DType::F16, &[2], &[0.00048828125, 1.0]).into())],
    );
    assert_eq!(r.dtype, DType::F16);
    assert_tensor(&r, &[2], &[1.0, 2048.0], 0.0);
    let r = call1("aten.add.Scalar", vec![("self", t(DType::BF16, &[1], &[1.0]).into()), ("other", float(0.00390625))]);
    assert_tensor(&r, &[1], &[1.0], 0.0);
    let r = call1("aten.mul.Scalar", vec![("self", t(DType::F16, &[1], &[60000.0]).into()), ("other", int(2))]);
    assert_tensor(&r, &[1], &[f64::INFINITY], 0.0);
    let r = call1("aten.div.Tensor", vec![("self", f32t(&[1], &[1.0]).into()), ("other", f32t(&[1], &[3.0]).into())]);
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
    let r = call1("aten.clamp.default", vec![("self", x().into()), ("min", float(-1.0)), ("max", int(2))]);
    assert_tensor(&r, &[4], &[nan, -1.0, 0.5, 2.0], 0.0);
    let r = call1("aten.clamp.default", vec![("self", x().into()), ("min", int(3)), ("max", int(2))]);
    assert_tensor(&r, &[4], &[nan, 2.0, 2.0, 2.0], 0.0);
    let r = call1("aten.clamp.default", vec![("self", i64t(&[3], &[-5, 0, 5]).into()), ("min", int(-1))]);
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
    assert_tensor(&r, &[4], &[-0.04550026389635842, -0.15426876936299344, 0.0, 1.399789198096713], 1e-12);
    let r = call1("aten.gelu.default", vec![("self", x().into()), ("approximate", str_("tanh"))]);
    assert_tensor(&r, &[4], &[-0.04540230591222494, -0.15428599017485606, 0.0, 1.3995715769802328], 1e-12);
    let r = call1("aten.elu.default", vec![("self", x().into())]);
    assert_tensor(&r, &[4], &[-0.8646647167633873, -0.3934693402873666, 0.0, 1.5], 1e-12);
    let r = call1("aten.sigmoid.default", vec![("self", x().into())]);
    assert_tensor(&r, &[4], &[0.11920292202211755, 0.3775406687981454, 0.5, 0.8175744761936437], 1e-12);
    let e = call_err("aten.gelu.default", vec![("self", x().into()), ("approximate", str_("fast"))]);
    assert!(e.contains("fast"), "{e}");
}

#[test]
fn casts() {
    let x = || f32t(&[5], &[1.9, -1.9, 0.0, 300.0, f64::NAN]);
    let r = call1("aten._to_copy.default", vec![("self", x().into()), ("dtype", dtype(DType::I64))]);
    assert_ints(&r, &[5], &[1, -1, 0, 300, i64::MIN]);
    let r = call1("aten._to_copy.default", vec![("self", x().into()), ("dtype", dtype(DType::U8))]);
    assert_ints(&r, &[5], &[1, 255, 0, 44, 0]);
    let r = call1("aten._to_copy.default", vec![("self", x().into()), ("dtype", dtype(DType::Bool))]);
    assert_eq!(r.bools(), vec![true, true, false, true, true]);
    let r = call1("aten._to_copy.default", vec![("self", i64t(&[1], &[16_777_217]).into()), ("dtype", dtype(DType::F32))]);
    assert_tensor(&r, &[1], &[16_777_216.0], 0.0);
    let r = call1("aten._to_copy.default", vec![("self", x().into()), ("dtype", dtype(DType::F16))]);
    assert_tensor(&r, &[5], &[1.900390625, -1.900390625, 0.0, 300.0, f64::NAN], 0.0);
}
