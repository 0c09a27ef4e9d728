//! The emitted modules loaded through MLIR's C API (melior, upstream MLIR 22, unregistered
//! dialects allowed): generic-form modules parse, verify and round-trip; broken ones are refused
//! with MLIR's diagnostic.
#![cfg(feature = "mlir")]

use fxhlo_ir::text::parse_graph;
use fxhlo_ir::Model;
use fxhlo_lowering::mlir::check_module;
use fxhlo_lowering::stablehlo::{emit, EmitOptions};
use std::path::Path;

const GENERIC: EmitOptions = EmitOptions {
    inline_constants: false,
    generic: true,
};

#[test]
fn every_testdata_model_round_trips() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("graph.json").exists())
        .collect();
    names.sort();
    assert!(!names.is_empty(), "no testdata models in {}", dir.display());
    for path in names {
        let m = fxhlo_ir::read::read_model(&path).unwrap();
        for inline_constants in [false, true] {
            let opts = EmitOptions {
                inline_constants,
                ..GENERIC
            };
            let text = emit(&m, &opts).unwrap();
            let printed = check_module(&text)
                .unwrap_or_else(|e| panic!("{} (inline {inline_constants}): {e}", path.display()));
            assert!(printed.contains("\"stablehlo."), "{}", path.display());
        }
    }
}

/// Ops with regions and dialect attributes that the testdata models may not reach.
#[test]
fn region_and_attribute_ops_round_trip() {
    let g = r#"graph {
  %x: f32[2, 3, 6, 6] = input
  %w: f32[4, 3, 3, 3] = input
  %i: i64[2, 5] = input
  %c: f32[2, 4, 4, 4] = aten.convolution.default(%x, %w, none, stride=[1, 1], padding=[0, 0], dilation=[1, 1], transposed=false, output_padding=[0, 0], groups=1)
  pool: %p: f32[2, 4, 2, 2], %pi: i64[2, 4, 2, 2] = aten.max_pool2d_with_indices.default(%c, kernel_size=[2, 2], stride=[2, 2])
  %f: f32[2, 16] = aten.view.default(%p, size=[2, 16])
  sort: %s: f32[2, 16], %si: i64[2, 16] = aten.sort.default(%f, descending=true)
  %gth: f32[2, 5] = aten.gather.default(%s, dim=1, index=%i)
  %sc: f32[2, 16] = aten.scatter_add.default(%s, dim=1, index=%i, src=%gth)
  %r: f32[2, 16] = aten.randn.default(size=[2, 16])
  %gt: bool[2, 16] = aten.gt.Tensor(%sc, %r)
  %e: f32[2, 16] = aten.erf.default(%sc)
  %y: f32[2, 16] = aten.where.self(%gt, %e, %r)
  %cs: f32[2, 16] = aten.cumsum.default(%y, dim=1)
  %am: i64[2] = aten.argmax.default(%cs, dim=1)
  return %cs, %am, %pi
}"#;
    let m = Model {
        graph: parse_graph(g).unwrap(),
        weights: Default::default(),
    };
    let text = emit(&m, &GENERIC).unwrap();
    for op in [
        "convolution",
        "reduce_window",
        "sort",
        "gather",
        "scatter",
        "rng",
        "reduce",
    ] {
        assert!(
            text.contains(&format!("\"stablehlo.{op}\"")),
            "{op}:\n{text}"
        );
    }
    check_module(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
}

#[test]
fn result_type_mismatch_is_refused() {
    let text = r#"module {
  func.func public @main(%arg0: tensor<2xf32>) -> (tensor<3xf32>) {
    %0 = "stablehlo.add"(%arg0, %arg0) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    return %0 : tensor<2xf32>
  }
}"#;
    let err = check_module(text).unwrap_err();
    assert!(err.contains("does not parse and verify"), "{err}");
    assert!(err.contains("doesn't match function result type"), "{err}");
}

#[test]
fn pretty_form_needs_the_stablehlo_dialect() {
    let text = r#"module {
  func.func public @main(%arg0: tensor<2xf32>) -> (tensor<2xf32>) {
    %0 = stablehlo.add %arg0, %arg0 : tensor<2xf32>
    return %0 : tensor<2xf32>
  }
}"#;
    let err = check_module(text).unwrap_err();
    assert!(err.contains("does not parse"), "{err}");
    assert!(err.contains("custom op 'stablehlo.add'"), "{err}");
}
