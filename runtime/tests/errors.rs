//! Input validation and robustness: clear errors, never a panic or an abort.

mod common;

use common::*;
use fxhlo_ir::read::GraphBuilder;
use fxhlo_ir::{Arg, DType, Dim, HostTensor, InputKind, Model, TensorType, ValueRef};
use fxhlo_runtime::{eval, run, Options, RuntimeError};
use std::collections::BTreeMap;

fn relu_model(ty: TensorType) -> Model {
    let mut b = GraphBuilder::default();
    let x = b.input("x", InputKind::User, None, ty).unwrap();
    b.op(
        "relu",
        "aten.relu.default",
        vec![("self".into(), Arg::Tensor(x))],
        vec!["y".into()],
        None,
    )
    .unwrap();
    Model {
        graph: b.finish(vec![ValueRef::new(1, 0)]).unwrap(),
        weights: Default::default(),
    }
}

fn host(shape: &[usize], dtype: DType) -> HostTensor {
    let n: usize = shape.iter().product();
    t(dtype, shape, &vec![1.0; n]).to_host()
}

#[test]
fn input_errors_name_the_input() {
    let m = relu_model(TensorType::new(DType::F32, &[4, 32]));
    let e = run(&m, &BTreeMap::new()).unwrap_err();
    assert_eq!(e.to_string(), "missing input 'x'");
    let mut ins = BTreeMap::new();
    ins.insert("x".to_string(), host(&[4, 32], DType::F32));
    ins.insert("y".to_string(), host(&[1], DType::F32));
    let e = run(&m, &ins).unwrap_err();
    assert_eq!(
        e.to_string(),
        "unexpected input 'y' (the graph's inputs are: x)"
    );
    let mut ins = BTreeMap::new();
    ins.insert("x".to_string(), host(&[2, 3], DType::F32));
    let e = run(&m, &ins).unwrap_err();
    assert_eq!(
        e.to_string(),
        "input 'x' has shape [2, 3] and dtype f32, expected [4, 32] f32"
    );
    let mut ins = BTreeMap::new();
    ins.insert("x".to_string(), host(&[4, 32], DType::F64));
    let e = run(&m, &ins).unwrap_err();
    assert_eq!(
        e.to_string(),
        "input 'x' has shape [4, 32] and dtype f64, expected [4, 32] f32"
    );
    let mut ins = BTreeMap::new();
    ins.insert(
        "x".to_string(),
        HostTensor {
            dtype: DType::F32,
            shape: vec![4, 32],
            bytes: vec![0; 7],
        },
    );
    let e = run(&m, &ins).unwrap_err();
    assert!(e.to_string().starts_with("input 'x' has 7 bytes"), "{e}");
}

#[test]
fn symbolic_dimensions_bind_at_run_time() {
    let ty = TensorType {
        dtype: DType::F32,
        shape: vec![Dim::Sym("s0".into()), Dim::Static(2)],
    };
    let mut b = GraphBuilder::default();
    let x = b.input("x", InputKind::User, None, ty.clone()).unwrap();
    let y = b.input("y", InputKind::User, None, ty).unwrap();
    b.op(
        "add",
        "aten.add.Tensor",
        vec![
            ("self".into(), Arg::Tensor(x)),
            ("other".into(), Arg::Tensor(y)),
        ],
        vec!["z".into()],
        None,
    )
    .unwrap();
    let m = Model {
        graph: b.finish(vec![ValueRef::new(2, 0)]).unwrap(),
        weights: Default::default(),
    };
    for n in [1, 3] {
        let mut ins = BTreeMap::new();
        ins.insert("x".to_string(), f32t(&[n, 2], &vec![1.0; n * 2]));
        ins.insert("y".to_string(), f32t(&[n, 2], &vec![2.0; n * 2]));
        let out = eval(&m, &ins, &Options::default()).unwrap();
        assert_tensor(&out[0], &[n, 2], &vec![3.0; n * 2], 0.0);
    }
    let mut ins = BTreeMap::new();
    ins.insert("x".to_string(), f32t(&[1, 2], &[1.0; 2]));
    ins.insert("y".to_string(), f32t(&[3, 2], &[2.0; 6]));
    let e = eval(&m, &ins, &Options::default()).unwrap_err();
    assert!(matches!(e, RuntimeError::InputType { .. }), "{e}");
    assert!(e.to_string().contains("expected [s0, 2] f32"), "{e}");
}

#[test]
fn weights_are_checked() {
    let mut b = GraphBuilder::default();
    let w = b
        .input(
            "p_w",
            InputKind::Parameter,
            Some("w".into()),
            TensorType::new(DType::F32, &[2]),
        )
        .unwrap();
    b.op(
        "neg",
        "aten.neg.default",
        vec![("self".into(), Arg::Tensor(w))],
        vec!["y".into()],
        None,
    )
    .unwrap();
    let mut m = Model {
        graph: b.finish(vec![ValueRef::new(1, 0)]).unwrap(),
        weights: Default::default(),
    };
    let e = run(&m, &BTreeMap::new()).unwrap_err();
    assert_eq!(e.to_string(), "weight 'w': missing (needed by input 'p_w')");
    m.weights.insert("w".into(), host(&[3], DType::F32));
    let e = run(&m, &BTreeMap::new()).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("weight 'w': has shape [3] and dtype f32"),
        "{e}"
    );
    m.weights.insert("w".into(), host(&[2], DType::F32));
    let out = run(&m, &BTreeMap::new()).unwrap();
    assert_eq!(out[0], f32t(&[2], &[-1.0, -1.0]).to_host());
}

#[test]
fn unsupported_nodes_are_refused_by_name() {
    let mut b = GraphBuilder::default();
    let x = b
        .input(
            "x",
            InputKind::User,
            None,
            TensorType::new(DType::F32, &[2]),
        )
        .unwrap();
    b.op(
        "foo",
        "aten.foo.default",
        vec![("self".into(), Arg::Tensor(x))],
        vec!["y".into()],
        Some(vec![TensorType::new(DType::F32, &[2])]),
    )
    .unwrap();
    let m = Model {
        graph: b.finish(vec![ValueRef::new(1, 0)]).unwrap(),
        weights: Default::default(),
    };
    let mut ins = BTreeMap::new();
    ins.insert("x".to_string(), host(&[2], DType::F32));
    let e = run(&m, &ins).unwrap_err().to_string();
    assert!(
        e.starts_with(
            "node 1 'foo' (aten.foo.default): op is not supported by the reference interpreter"
        ),
        "{e}"
    );
}

#[test]
fn huge_results_are_errors_not_aborts() {
    let e = call_err(
        "aten.full.default",
        vec![("size", ints(&[1 << 40, 1 << 20])), ("fill_value", int(0))],
    );
    assert!(e.contains("limit"), "{e}");
    let e = call_err(
        "aten.arange.start_step",
        vec![("start", int(0)), ("end", int(i64::MAX)), ("step", int(1))],
    );
    assert!(e.contains("limit"), "{e}");
    let e = call_err(
        "aten.expand.default",
        vec![
            ("self", f32t(&[1], &[1.0]).into()),
            ("size", ints(&[1 << 31, 1 << 31])),
        ],
    );
    assert!(e.contains("limit"), "{e}");
    let e = call_err(
        "aten.repeat.default",
        vec![
            ("self", f32t(&[2], &[1.0, 2.0]).into()),
            ("repeats", ints(&[1 << 40])),
        ],
    );
    assert!(e.contains("limit"), "{e}");
    // A smaller limit applies to everything the interpreter creates.
    let (m, ins) = one_op(
        "aten.full.default",
        vec![("size", ints(&[1000])), ("fill_value", int(0))],
    )
    .unwrap();
    let opts = Options {
        max_tensor_bytes: 100,
        ..Options::default()
    };
    let e = eval(&m, &ins, &opts).unwrap_err().to_string();
    assert!(e.contains("limit of 100 bytes"), "{e}");
}

/// Each of these must fail cleanly (or succeed), never panic: the error must not be internal.
#[test]
fn absurd_arguments_never_panic() {
    let x = || f32t(&[2, 3], &[1.0, f64::NAN, f64::INFINITY, -0.0, 5.0, -6.0]);
    let img = || f32t(&[1, 1, 3, 3], &[1.0; 9]);
    let tries: Vec<(&str, Vec<(&str, A)>)> = vec![
        (
            "aten.slice.Tensor",
            vec![
                ("self", x().into()),
                ("dim", int(1)),
                ("start", int(i64::MIN)),
                ("end", int(i64::MAX)),
                ("step", int(i64::MAX)),
            ],
        ),
        (
            "aten.select.int",
            vec![
                ("self", x().into()),
                ("dim", int(0)),
                ("index", int(i64::MIN)),
            ],
        ),
        (
            "aten.as_strided.default",
            vec![
                ("self", x().into()),
                ("size", ints(&[2, 2])),
                ("stride", ints(&[i64::MAX, 1])),
            ],
        ),
        (
            "aten.as_strided.default",
            vec![
                ("self", x().into()),
                ("size", ints(&[1])),
                ("stride", ints(&[1])),
                ("storage_offset", int(i64::MAX)),
            ],
        ),
        (
            "aten.constant_pad_nd.default",
            vec![("self", x().into()), ("pad", ints(&[i64::MIN, i64::MAX]))],
        ),
        (
            "aten.constant_pad_nd.default",
            vec![("self", x().into()), ("pad", ints(&[-5, 0]))],
        ),
        (
            "aten.view.default",
            vec![("self", x().into()), ("size", ints(&[-1, -1]))],
        ),
        (
            "aten.view.default",
            vec![("self", x().into()), ("size", ints(&[i64::MAX, 2]))],
        ),
        (
            "aten.topk.default",
            vec![("self", x().into()), ("k", int(i64::MAX))],
        ),
        (
            "aten.diagonal.default",
            vec![("self", x().into()), ("offset", int(i64::MIN + 1))],
        ),
        (
            "aten.diagonal.default",
            vec![("self", x().into()), ("offset", int(i64::MAX))],
        ),
        (
            "aten.embedding.default",
            vec![
                ("weight", x().into()),
                ("indices", i64t(&[1], &[i64::MIN]).into()),
            ],
        ),
        (
            "aten.index.Tensor",
            vec![
                ("self", x().into()),
                ("indices", A::L(vec![Some(i64t(&[1], &[i64::MIN]))])),
            ],
        ),
        (
            "aten.gather.default",
            vec![
                ("self", x().into()),
                ("dim", int(0)),
                ("index", i64t(&[2, 4], &[0; 8]).into()),
            ],
        ),
        (
            "aten.div.Tensor_mode",
            vec![
                ("self", i64t(&[1], &[i64::MIN]).into()),
                ("other", i64t(&[1], &[-1]).into()),
                ("rounding_mode", str_("floor")),
            ],
        ),
        (
            "aten.remainder.Tensor",
            vec![
                ("self", i64t(&[1], &[i64::MIN]).into()),
                ("other", i64t(&[1], &[-1]).into()),
            ],
        ),
        (
            "aten.pow.Tensor_Tensor",
            vec![
                ("self", i64t(&[1], &[3]).into()),
                ("exponent", i64t(&[1], &[i64::MAX]).into()),
            ],
        ),
        (
            "aten.abs.default",
            vec![("self", i64t(&[1], &[i64::MIN]).into())],
        ),
        (
            "aten.neg.default",
            vec![("self", i64t(&[1], &[i64::MIN]).into())],
        ),
        (
            "aten.arange.start_step",
            vec![
                ("start", float(0.0)),
                ("end", float(f64::INFINITY)),
                ("step", float(1.0)),
            ],
        ),
        (
            "aten.arange.start_step",
            vec![
                ("start", float(0.0)),
                ("end", float(1.0)),
                ("step", float(f64::NAN)),
            ],
        ),
        (
            "aten.arange.start_step",
            vec![
                ("start", int(i64::MIN)),
                ("end", int(i64::MAX)),
                ("step", int(i64::MAX)),
            ],
        ),
        (
            "aten.convolution.default",
            vec![
                ("input", img().into()),
                ("weight", f32t(&[1, 1, 2, 2], &[1.0; 4]).into()),
                ("bias", none()),
                ("stride", ints(&[i64::MAX])),
                ("padding", ints(&[0])),
                ("dilation", ints(&[1])),
                ("transposed", bool_(false)),
                ("output_padding", ints(&[0])),
                ("groups", int(1)),
            ],
        ),
        (
            "aten.convolution.default",
            vec![
                ("input", img().into()),
                ("weight", f32t(&[1, 1, 2, 2], &[1.0; 4]).into()),
                ("bias", none()),
                ("stride", ints(&[1])),
                ("padding", ints(&[1 << 40])),
                ("dilation", ints(&[1])),
                ("transposed", bool_(false)),
                ("output_padding", ints(&[0])),
                ("groups", int(1)),
            ],
        ),
        (
            "aten.convolution.default",
            vec![
                ("input", img().into()),
                ("weight", f32t(&[1, 1, 2, 2], &[1.0; 4]).into()),
                ("bias", none()),
                ("stride", ints(&[1])),
                ("padding", ints(&[0])),
                ("dilation", ints(&[1 << 40])),
                ("transposed", bool_(true)),
                ("output_padding", ints(&[0])),
                ("groups", int(1)),
            ],
        ),
        (
            "aten.max_pool2d_with_indices.default",
            vec![
                ("self", img().into()),
                ("kernel_size", ints(&[i64::MAX])),
                ("stride", ints(&[1])),
            ],
        ),
        (
            "aten.avg_pool2d.default",
            vec![
                ("self", img().into()),
                ("kernel_size", ints(&[2])),
                ("divisor_override", int(0)),
            ],
        ),
        (
            "aten._adaptive_avg_pool2d.default",
            vec![
                ("self", img().into()),
                ("output_size", ints(&[1 << 40, 1 << 40])),
            ],
        ),
        (
            "aten.upsample_nearest2d.vec",
            vec![
                ("input", img().into()),
                ("output_size", none()),
                ("scale_factors", A::V(Arg::Floats(vec![1e300, 1e300]))),
            ],
        ),
        (
            "aten.upsample_bilinear2d.vec",
            vec![
                ("input", img().into()),
                ("output_size", none()),
                ("align_corners", bool_(false)),
                ("scale_factors", A::V(Arg::Floats(vec![f64::NAN, 2.0]))),
            ],
        ),
        (
            "aten.grid_sampler_2d.default",
            vec![
                ("input", img().into()),
                (
                    "grid",
                    f32t(
                        &[1, 1, 2, 2],
                        &[f64::INFINITY, f64::NEG_INFINITY, 1e300, -1e300],
                    )
                    .into(),
                ),
                ("interpolation_mode", int(2)),
                ("padding_mode", int(2)),
                ("align_corners", bool_(false)),
            ],
        ),
        (
            "aten.grid_sampler_2d.default",
            vec![
                ("input", img().into()),
                ("grid", f32t(&[1, 1, 1, 2], &[1e30, -1e30]).into()),
                ("interpolation_mode", int(0)),
                ("padding_mode", int(0)),
                ("align_corners", bool_(false)),
            ],
        ),
        (
            "aten.col2im.default",
            vec![
                ("self", f32t(&[1, 4, 1], &[1.0; 4]).into()),
                ("output_size", ints(&[i64::MAX, 2])),
                ("kernel_size", ints(&[2, 2])),
                ("dilation", ints(&[1])),
                ("padding", ints(&[0])),
                ("stride", ints(&[1])),
            ],
        ),
        ("aten.randperm.default", vec![("n", int(i64::MAX))]),
        (
            "aten.native_group_norm.default",
            vec![
                ("input", img().into()),
                ("weight", none()),
                ("bias", none()),
                ("N", int(i64::MAX)),
                ("C", int(1)),
                ("HxW", int(9)),
                ("group", int(1)),
                ("eps", float(1e-5)),
            ],
        ),
        (
            "aten.embedding_dense_backward.default",
            vec![
                ("grad_output", f32t(&[1, 2], &[1.0; 2]).into()),
                ("indices", i64t(&[1], &[i64::MAX]).into()),
                ("num_weights", int(2)),
                ("padding_idx", int(-1)),
                ("scale_grad_by_freq", bool_(false)),
            ],
        ),
        (
            "aten.max_pool2d_with_indices_backward.default",
            vec![
                ("grad_output", f32t(&[1, 1, 1, 1], &[1.0]).into()),
                ("self", img().into()),
                ("kernel_size", ints(&[3])),
                ("stride", ints(&[3])),
                ("padding", ints(&[0])),
                ("dilation", ints(&[1])),
                ("ceil_mode", bool_(false)),
                ("indices", i64t(&[1, 1, 1, 1], &[99]).into()),
            ],
        ),
        (
            "aten.scatter_reduce.two",
            vec![
                ("self", x().into()),
                ("dim", int(1)),
                ("index", i64t(&[1, 1], &[0]).into()),
                ("src", x().into()),
                ("reduce", str_("median")),
            ],
        ),
        (
            "aten.reflection_pad2d.default",
            vec![
                ("self", img().into()),
                ("padding", ints(&[i64::MAX, 0, 0, 0])),
            ],
        ),
        (
            "aten.replication_pad2d.default",
            vec![("self", img().into()), ("padding", ints(&[-1, 0, 0, 0]))],
        ),
        (
            "aten.split_with_sizes.default",
            vec![("self", x().into()), ("split_sizes", ints(&[i64::MAX, 1]))],
        ),
        (
            "aten.diagonal.default",
            vec![("self", x().into()), ("offset", int(i64::MIN))],
        ),
        (
            "aten.convolution.default",
            vec![
                ("input", img().into()),
                ("weight", f32t(&[1, 1, 2, 2], &[1.0; 4]).into()),
                ("bias", none()),
                ("stride", ints(&[i64::MAX])),
                ("padding", ints(&[0])),
                ("dilation", ints(&[1])),
                ("transposed", bool_(true)),
                ("output_padding", ints(&[0])),
                ("groups", int(1)),
            ],
        ),
        (
            "aten.max_pool2d_with_indices.default",
            vec![
                ("self", img().into()),
                ("kernel_size", ints(&[i64::MAX])),
                ("stride", ints(&[1])),
                ("padding", ints(&[i64::MAX / 2])),
                ("dilation", ints(&[2])),
            ],
        ),
        (
            "aten.avg_pool2d.default",
            vec![
                ("self", img().into()),
                ("kernel_size", ints(&[1 << 40])),
                ("stride", ints(&[1])),
                ("padding", ints(&[1 << 39])),
            ],
        ),
        (
            "aten._cdist_forward.default",
            vec![
                ("x1", x().into()),
                ("x2", x().into()),
                ("p", float(-1.0)),
                ("compute_mode", none()),
            ],
        ),
    ];
    let mut ir_panics = vec![];
    for (i, (target, args)) in tries.into_iter().enumerate() {
        // Building the graph runs the ir's inference rules, some of which overflow on these
        // arguments; that is the ir's problem, recorded here, not the interpreter's.
        let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| one_op(target, args)));
        let Ok(Ok((m, ins))) = built else {
            if built.is_err() {
                ir_panics.push(format!("#{i} {target}"));
            }
            continue;
        };
        if let Err(e) = eval(&m, &ins, &Options::default()) {
            assert!(
                !matches!(e, RuntimeError::Internal { .. }),
                "#{i} {target}: {e}"
            );
        }
    }
    eprintln!("ir inference panicked while building: {ir_panics:?}");
}

#[test]
fn index_put_with_huge_broadcast_indices_is_an_error() {
    let e = call_err(
        "aten.index_put.default",
        vec![
            ("self", f32t(&[4, 4], &[0.0; 16]).into()),
            (
                "indices",
                A::L(vec![
                    Some(i64t(&[1 << 16, 1], &vec![0; 1 << 16])),
                    Some(i64t(&[1, 1 << 16], &vec![0; 1 << 16])),
                ]),
            ),
            ("values", f32t(&[], &[1.0]).into()),
        ],
    );
    assert!(e.contains("memory limit"), "{e}");
}

/// The interpreter limits the sum of the tensors alive at once, not just each one: two live
/// results of 800 bytes each (8 per element) pass a per-tensor limit of 1000 bytes but not a
/// live limit below what is alive.
#[test]
fn the_live_tensors_are_limited_in_sum() {
    let g = fxhlo_ir::text::parse_graph(
        "graph {\n  %x: f32[100] = input\n  %a: f32[100] = aten.exp.default(%x)\n  \
         %b: f32[100] = aten.neg.default(%x)\n  %c: f32[100] = aten.add.Tensor(%a, %b)\n  \
         return %c\n}\n",
    )
    .unwrap();
    let m = Model {
        graph: g,
        weights: Default::default(),
    };
    let x = HostTensor {
        dtype: DType::F32,
        shape: vec![100],
        bytes: vec![0; 400],
    };
    let ins = BTreeMap::from([("x".to_string(), x)]);
    // Alive at %b: x, a and b (2400 bytes); x is freed after b, so c needs a + b + c.
    let opts = |live: u64| Options {
        max_tensor_bytes: 1000,
        max_live_bytes: live,
        ..Options::default()
    };
    fxhlo_runtime::run_with(&m, &ins, &opts(2400)).unwrap();
    let e = fxhlo_runtime::run_with(&m, &ins, &opts(2399))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("node 2 'b'") && e.contains("1600 bytes already live") && e.contains("2399"),
        "{e}"
    );
}
