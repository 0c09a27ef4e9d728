//! StableHLO emission: signature, constants, errors and determinism. Numerics are checked by
//! XLA itself in python/tests/test_ops_xla.py and test_models_xla.py.

use fxhlo_ir::text::parse_graph;
use fxhlo_ir::{HostTensor, Model};
use fxhlo_lowering::stablehlo::{emit, EmitOptions, LowerError};
use std::path::Path;

fn model(text: &str) -> Model {
    Model {
        graph: parse_graph(text).expect("graph parses"),
        weights: Default::default(),
    }
}

const MLP: &str = r#"graph {
  %x: f32[4, 3] = input
  %w: f32[5, 3] = parameter "fc.weight"
  %b: f32[5] = parameter "fc.bias"
  %t: f32[3, 5] = aten.permute.default(%w, dims=[1, 0])
  %y: f32[4, 5] = aten.addmm.default(%b, %x, %t)
  %r: f32[4, 5] = aten.relu.default(%y)
  return %r
}"#;

fn mlp() -> Model {
    let mut m = model(MLP);
    let ones = |n: usize, shape: Vec<usize>| {
        HostTensor::from_f64(fxhlo_ir::DType::F32, shape, &vec![1.0; n])
    };
    m.weights.insert("fc.weight".into(), ones(15, vec![5, 3]));
    m.weights.insert("fc.bias".into(), ones(5, vec![5]));
    m
}

#[test]
fn main_takes_user_inputs_then_weights() {
    let text = emit(&mlp(), &EmitOptions::default()).unwrap();
    assert!(text.contains(
        "func.func public @main(%arg0: tensor<4x3xf32>, %arg1: tensor<5x3xf32>, %arg2: tensor<5xf32>) -> (tensor<4x5xf32>)"
    ));
    assert!(text.contains("stablehlo.dot_general"));
    // addmm(b, x, permute(w, [1, 0])): the transpose is the dot's contracting dims.
    assert!(!text.contains("stablehlo.transpose"), "{text}");
    assert!(text.contains("stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [1]"));
    assert!(text.contains("stablehlo.maximum"));
}

#[test]
fn inline_constants_fold_weights() {
    let text = emit(
        &mlp(),
        &EmitOptions {
            inline_constants: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(text.contains("func.func public @main(%arg0: tensor<4x3xf32>) -> (tensor<4x5xf32>)"));
    assert!(text.contains("stablehlo.constant dense<\"0x0000803F"));
}

#[test]
fn missing_weight_is_an_error() {
    let err = emit(
        &model(MLP),
        &EmitOptions {
            inline_constants: true,
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("fc.weight"), "{err}");
}

#[test]
fn unsupported_op_is_named() {
    let g = r#"graph {
  %x: f32[2] = input
  %y: f32[2] = unsupported "aten.frobnicate.default"(self=%x)
  return %y
}"#;
    match emit(&model(g), &EmitOptions::default()) {
        Err(LowerError::Node { op, msg, .. }) => {
            assert_eq!(op, "aten.frobnicate.default");
            assert!(msg.contains("not in the op table"), "{msg}");
        }
        other => panic!("expected a node error, got {other:?}"),
    }
}

#[test]
fn ops_without_a_stablehlo_lowering_are_named() {
    for (op, arg, args) in [
        ("aten.special_bessel_j0.default", "self", ""),
        ("aten.special_modified_bessel_k1.default", "self", ""),
        ("aten.special_scaled_modified_bessel_k0.default", "x", ""),
        ("aten.special_ndtri.default", "self", ""),
        ("aten.special_erfcx.default", "self", ""),
        ("aten.special_log_ndtr.default", "self", ""),
        ("aten.igamma.default", "self", ", other=%x"),
        ("aten.igammac.default", "self", ", other=%x"),
        ("aten.special_hermite_polynomial_h.default", "x", ", n=%x"),
    ] {
        let g = format!(
            "graph {{\n  %x: f32[2] = input\n  %y: f32[2] = {op}({arg}=%x{args})\n  return %y\n}}"
        );
        match emit(&model(&g), &EmitOptions::default()) {
            Err(LowerError::Node { op: o, msg, .. }) => {
                assert_eq!(o, op);
                assert!(msg.contains("no StableHLO lowering"), "{op}: {msg}");
                assert!(msg.contains(op), "{op}: {msg}");
            }
            other => panic!("{op}: expected a node error, got {other:?}"),
        }
    }
}

#[test]
fn matrix_factorizations_are_named_as_not_lowered() {
    for line in [
        "inv: %y: f32[3, 3], %info: i32[] = aten.linalg_inv_ex.default(%x)",
        "lu: %y: f32[3, 3], %p: i32[3], %info: i32[] = aten.linalg_lu_factor_ex.default(%x)",
        "eigh: %y: f32[3], %v: f32[3, 3] = aten._linalg_eigh.default(%x)",
        "svd: %u: f32[3, 3], %y: f32[3], %vh: f32[3, 3] = aten._linalg_svd.default(%x)",
        "exp: %y: f32[3, 3] = aten.linalg_matrix_exp.default(%x)",
    ] {
        let g = format!("graph {{\n  %x: f32[3, 3] = input\n  {line}\n  return %y\n}}");
        let op = line.split(" = ").nth(1).unwrap().split('(').next().unwrap();
        match emit(&model(&g), &EmitOptions::default()) {
            Err(LowerError::Node { op: o, msg, .. }) => {
                assert_eq!(o, op);
                assert!(
                    msg.contains("no StableHLO lowering") && msg.contains("LAPACK")
                        || msg.contains("exponential"),
                    "{op}: {msg}"
                );
            }
            other => panic!("{op}: expected a node error, got {other:?}"),
        }
    }
}

#[test]
fn dtypes_and_constants_print_as_mlir() {
    let g = r#"graph {
  %x: bool[3] = input
  %y: i64[3] = aten._to_copy.default(%x, dtype=i64)
  %z: i64[3] = aten.add.Scalar(%y, other=2)
  %m: f16[3] = aten._to_copy.default(%z, dtype=f16)
  %n: f16[3] = aten.mul.Scalar(%m, other=-inf)
  return %n
}"#;
    let text = emit(&model(g), &EmitOptions::default()).unwrap();
    assert!(text.contains("%arg0: tensor<3xi1>"));
    assert!(text.contains("dense<2> : tensor<3xi64>"));
    assert!(text.contains("dense<0xFC00> : tensor<3xf16>"), "{text}");
}

#[test]
fn emission_is_deterministic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata");
    for name in ["mlp", "gpt2", "resnet18"] {
        let m = fxhlo_ir::read::read_model(&dir.join(name)).unwrap();
        let a = emit(&m, &EmitOptions::default()).unwrap();
        let b = emit(&m, &EmitOptions::default()).unwrap();
        assert_eq!(a, b, "{name}");
        assert!(a.starts_with("module @fxhlo"));
    }
}

#[test]
fn generic_form_writes_every_op_quoted() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata");
    let opts = EmitOptions {
        generic: true,
        ..Default::default()
    };
    for name in ["mlp", "gpt2", "resnet18", "reductions"] {
        let m = fxhlo_ir::read::read_model(&dir.join(name)).unwrap();
        let text = emit(&m, &opts).unwrap();
        for line in text.lines().map(str::trim) {
            // `%3 = "stablehlo.add"(...)`, `"stablehlo.return"(...)`; `return` is func's
            let op = line.split_once(" = ").map_or(line, |(_, rhs)| rhs);
            let pretty = op.starts_with("stablehlo.") || op.starts_with("chlo.");
            assert!(!pretty, "{name}: pretty op in generic form: {line}");
        }
        let pretty = emit(&m, &EmitOptions::default()).unwrap();
        assert_ne!(text, pretty, "{name}");
    }
}
