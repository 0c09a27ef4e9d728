//! bf16 and f16 in the fast runtime (`fast::lowp`): every kernel family, on graphs of bf16
//! (or f16) values, runs with no step on the reference interpreter and gives the float64
//! result rounded once to the type: each element that result or one of its neighbours (the
//! kernels compute in f32, which can move a value across a rounding boundary), most of them
//! exactly; the same bits on any thread count.

#[path = "../passes/tests/common/mod.rs"]
mod pcommon;

use fxhlo::{compile, CompileOptions};
use fxhlo_ir::{text::parse_graph, DType, HostTensor, InputKind, Model, NodeKind, Weights};
use fxhlo_runtime::fast::{ExecOptions, Executor, Kernel};
use pcommon::Rng;
use std::collections::BTreeMap;

/// Uniform in `[-2, 2)`.
fn value(rng: &mut Rng) -> f64 {
    rng.unit() * 4.0 - 2.0
}

/// `x` as the nearest value of `d` (a float type), little-endian bytes.
fn encode(d: DType, x: f64) -> Vec<u8> {
    match d {
        DType::BF16 => half::bf16::from_f64(x).to_le_bytes().to_vec(),
        DType::F16 => half::f16::from_f64(x).to_le_bytes().to_vec(),
        DType::F32 => (x as f32).to_le_bytes().to_vec(),
        DType::F64 => x.to_le_bytes().to_vec(),
        DType::I64 => (x as i64).to_le_bytes().to_vec(),
        d => panic!("no test values of {d}"),
    }
}

/// The elements of a float tensor.
fn decode(t: &HostTensor) -> Vec<f64> {
    let c = t.bytes.chunks_exact(t.dtype.size_bytes());
    match t.dtype {
        DType::BF16 => c
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f64())
            .collect(),
        DType::F16 => c
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f64())
            .collect(),
        DType::F32 => c
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64)
            .collect(),
        DType::F64 => c
            .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
            .collect(),
        d => panic!("no float values of {d}"),
    }
}

fn tensor(d: DType, shape: &[usize], xs: &[f64]) -> HostTensor {
    HostTensor {
        dtype: d,
        shape: shape.to_vec(),
        bytes: xs.iter().flat_map(|&x| encode(d, x)).collect(),
    }
}

/// Random user inputs and parameters of `g`: floats uniform in `[-2, 2)` rounded to their type,
/// integers (indices) in `[0, 10)`.
fn random_values(g: &fxhlo_ir::Graph, seed: u64) -> (Vec<(String, bool, HostTensor)>, Rng) {
    let mut rng = Rng(seed);
    let mut out = vec![];
    for n in &g.nodes {
        let NodeKind::Input { kind, target, .. } = &n.kind else {
            continue;
        };
        let t = &n.results[0];
        let shape: Vec<usize> = t
            .shape
            .iter()
            .map(|d| d.as_static().unwrap() as usize)
            .collect();
        let count: usize = shape.iter().product();
        let xs: Vec<f64> = (0..count)
            .map(|_| match t.dtype {
                DType::I64 => (rng.next_u64() % 10) as f64,
                _ => value(&mut rng),
            })
            .collect();
        let user = *kind == InputKind::User;
        let name = if user {
            n.name.clone()
        } else {
            target.clone().unwrap_or_else(|| n.name.clone())
        };
        out.push((name, user, tensor(t.dtype, &shape, &xs)));
    }
    (out, rng)
}

fn model(
    text: &str,
    values: &[(String, bool, HostTensor)],
) -> (Model, BTreeMap<String, HostTensor>) {
    let graph = parse_graph(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let mut weights = Weights::new();
    let mut inputs = BTreeMap::new();
    for (name, user, t) in values {
        if *user {
            inputs.insert(name.clone(), t.clone());
        } else {
            weights.insert(name.clone(), t.clone());
        }
    }
    (Model { graph, weights }, inputs)
}

/// `t` with its floats of type `d` widened to f64.
fn widened(t: &HostTensor, d: DType) -> HostTensor {
    if t.dtype != d {
        return t.clone();
    }
    tensor(DType::F64, &t.shape, &decode(t))
}

/// Ordered position of a value's bits (sign-magnitude to a line), for ulp distances.
fn ordinal(bits: u16) -> i32 {
    if bits & 0x8000 != 0 {
        -((bits & 0x7fff) as i32)
    } else {
        bits as i32
    }
}

fn bits(d: DType, x: f64) -> u16 {
    match d {
        DType::BF16 => half::bf16::from_f64(x).to_bits(),
        _ => half::f16::from_f64(x).to_bits(),
    }
}

/// Compiles `text` (its values of the low-precision type `d`), checks that no step falls back
/// to the interpreter and that the steps are `kinds`, runs it on 2 threads, and compares each
/// output with the float64 run of the same graph (`d` replaced by f64) rounded once to `d`:
/// every element within one ulp, at least `min_exact` of them equal. Runs on 1 and 3 threads
/// must give the same bytes.
fn check(text: &str, d: DType, kinds: &[&str], min_exact: f64) {
    let g = parse_graph(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let (values, _) = random_values(&g, 17);
    let (m, inputs) = model(text, &values);
    let a = compile(&m, &CompileOptions::default()).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let steps: Vec<&str> = a
        .header
        .program
        .steps
        .iter()
        .map(|s| s.kernel.kind())
        .collect();
    for s in &a.header.program.steps {
        if let Kernel::Fallback { reason, .. } = &s.kernel {
            panic!("step {} falls back: {reason}\n{text}", s.name());
        }
    }
    assert_eq!(steps, kinds, "{text}");
    let run = |threads: usize| {
        let opts = ExecOptions {
            threads: Some(threads),
            max_memory: None,
        };
        Executor::new(a.clone(), &opts)
            .unwrap()
            .run(&inputs)
            .unwrap_or_else(|e| panic!("{e}\n{text}"))
    };
    let got = run(2);
    for t in [1, 3] {
        assert!(run(t) == got, "{t} threads give other bits\n{text}");
    }
    // The reference: the graph in f64 on the same values, in the interpreter.
    let text64 =
        (text.replace(&format!("{d}["), "f64[")).replace(&format!("dtype={d}"), "dtype=f64");
    let values64: Vec<(String, bool, HostTensor)> = (values.iter())
        .map(|(n, u, t)| (n.clone(), *u, widened(t, d)))
        .collect();
    let (m64, inputs64) = model(&text64, &values64);
    let want = fxhlo_runtime::run(&m64, &inputs64).unwrap_or_else(|e| panic!("{e}\n{text64}"));
    assert_eq!(got.len(), want.len());
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        if g.dtype != d {
            assert_eq!(g, w, "output {k} ({})\n{text}", g.dtype);
            continue;
        }
        let (gv, wv) = (decode(g), decode(w));
        let mut exact = 0usize;
        for (j, (&x, &y)) in gv.iter().zip(&wv).enumerate() {
            let (bx, by) = (bits(d, x), bits(d, y));
            if bx == by || x.is_nan() && y.is_nan() {
                exact += 1;
                continue;
            }
            let ulps = (ordinal(bx) - ordinal(by)).abs();
            assert!(
                ulps <= 1,
                "output {k} element {j}: {x} vs {y} rounded once ({ulps} ulps of {d})\n{text}"
            );
        }
        let frac = exact as f64 / gv.len().max(1) as f64;
        assert!(
            frac >= min_exact,
            "output {k}: {exact} of {} equal to the f64 result rounded once\n{text}",
            gv.len()
        );
    }
}

const BF16: DType = DType::BF16;

#[test]
fn elementwise_chains() {
    // Odd sizes (partial vector tails), a broadcast operand, two outputs; computed in f32,
    // each output rounded once.
    check(
        "graph {
  %x: bf16[3, 343] = input
  %y: bf16[343] = input
  %a: bf16[3, 343] = aten.mul.Tensor(%x, %y)
  %b: bf16[3, 343] = aten.gelu.default(%x)
  %c: bf16[3, 343] = aten.add.Tensor(%a, %b)
  %s: bf16[3, 343] = aten.sigmoid.default(%c)
  %e: bf16[3, 343] = aten.exp.default(%s)
  %t: bf16[3, 343] = aten.tanh.default(%e)
  return %t, %c
}",
        BF16,
        &["elementwise"],
        0.97,
    );
    check(
        "graph {
  %x: bf16[1] = input
  %y: bf16[1] = aten.mul.Scalar(%x, other=0.1)
  return %y
}",
        BF16,
        &["elementwise"],
        1.0,
    );
    check(
        "graph {
  %x: f16[1000] = input
  %y: f16[1000] = input
  %a: f16[1000] = aten.div.Tensor(%x, %y)
  %s: f16[1000] = aten.sigmoid.default(%a)
  %b: f16[1000] = aten.mul.Tensor(%a, %s)
  return %b
}",
        DType::F16,
        &["elementwise"],
        0.97,
    );
}

/// Conversions between f32 and bf16/f16 round once to nearest even (`_to_copy` fused into the
/// chain), and a conversion inside a chain rounds there.
#[test]
fn conversions_round_to_nearest_even() {
    let text = "graph {
  %x: f32[4099] = input
  %b: bf16[4099] = aten._to_copy.default(%x, dtype=bf16)
  %h: f16[4099] = aten._to_copy.default(%x, dtype=f16)
  %d: bf16[4099] = aten.mul.Scalar(%b, other=3)
  %w: f32[4099] = aten._to_copy.default(%d, dtype=f32)
  return %b, %h, %w
}";
    let g = parse_graph(text).unwrap();
    // f32 values around the rounding boundaries: ties, just above and below, and large ones.
    let mut rng = Rng(3);
    let mut xs: Vec<f32> = (0..4099)
        .map(|i| {
            let r = rng.next_u64();
            let base = f32::from_bits((r as u32 & 0x3fff_0000) | 0x3800_0000);
            match i % 4 {
                0 => f32::from_bits(base.to_bits() | 0x8000), // a bf16 tie
                1 => f32::from_bits(base.to_bits() | 0x8001),
                2 => f32::from_bits(base.to_bits() | 0x7fff),
                _ => value(&mut rng) as f32 * 7e4,
            }
        })
        .collect();
    xs[0] = f32::INFINITY;
    xs[1] = -0.0;
    xs[2] = f32::from_bits(0x7f7f_8000); // rounds to infinity in bf16
    let x = HostTensor {
        dtype: DType::F32,
        shape: vec![xs.len()],
        bytes: xs.iter().flat_map(|v| v.to_le_bytes()).collect(),
    };
    let m = Model {
        graph: g,
        weights: Default::default(),
    };
    let a = compile(&m, &CompileOptions::default()).unwrap();
    assert!(a
        .header
        .program
        .steps
        .iter()
        .all(|s| s.kernel.kind() == "elementwise"));
    let inputs = BTreeMap::from([("x".to_string(), x)]);
    let got = Executor::new(a, &ExecOptions::default())
        .unwrap()
        .run(&inputs)
        .unwrap();
    let (b, h, w) = (decode(&got[0]), decode(&got[1]), decode(&got[2]));
    for (j, &x) in xs.iter().enumerate() {
        let rb = half::bf16::from_f32(x).to_f32();
        assert_eq!(b[j].to_bits(), (rb as f64).to_bits(), "bf16 of {x:e}");
        let rh = half::f16::from_f32(x).to_f32();
        assert_eq!(h[j].to_bits(), (rh as f64).to_bits(), "f16 of {x:e}");
        // The product of the rounded value, rounded again: stored as bf16, read back as f32.
        let rd = half::bf16::from_f32(rb * 3.0).to_f32();
        assert_eq!(w[j].to_bits(), (rd as f64).to_bits(), "3 * bf16 of {x:e}");
    }
}

#[test]
fn matmuls() {
    // A linear layer with constant weights (packed once, as f32) and its bias and ReLU.
    check(
        "graph {
  %x: bf16[5, 37] = input
  %w: bf16[19, 37] = parameter \"fc.weight\"
  %b: bf16[19] = parameter \"fc.bias\"
  %t: bf16[37, 19] = aten.permute.default(%w, dims=[1, 0])
  %mm: bf16[5, 19] = aten.addmm.default(%b, %x, %t)
  %r: bf16[5, 19] = aten.relu.default(%mm)
  return %r
}",
        BF16,
        &["matmul"],
        0.95,
    );
    // Long sums in f32 from activations, and a batched product with edge shapes.
    check(
        "graph {
  %a: bf16[17, 300] = input
  %b: bf16[300, 33] = input
  %mm: bf16[17, 33] = aten.mm.default(%a, %b)
  return %mm
}",
        BF16,
        &["matmul"],
        0.95,
    );
    check(
        "graph {
  %a: bf16[3, 7, 33] = input
  %b: bf16[3, 33, 1] = input
  %mm: bf16[3, 7, 1] = aten.bmm.default(%a, %b)
  return %mm
}",
        BF16,
        &["matmul"],
        0.95,
    );
    check(
        "graph {
  %a: f16[9, 64] = input
  %b: f16[64, 31] = input
  %mm: f16[9, 31] = aten.mm.default(%a, %b)
  return %mm
}",
        DType::F16,
        &["matmul"],
        0.95,
    );
}

#[test]
fn row_kernels() {
    check(
        "graph {
  %x: bf16[4, 1000] = input
  %s: bf16[4, 1000] = aten._softmax.default(%x, dim=-1, half_to_float=false)
  return %s
}",
        BF16,
        &["reduction"],
        0.95,
    );
    check(
        "graph {
  %x: bf16[3, 65] = input
  %w: bf16[65] = parameter \"ln.weight\"
  %b: bf16[65] = parameter \"ln.bias\"
  ln: %y: bf16[3, 65], %mean: bf16[3, 1], %rstd: bf16[3, 1] = aten.native_layer_norm.default(%x, normalized_shape=[65], weight=%w, bias=%b, eps=1e-5)
  return %y
}",
        BF16,
        &["reduction"],
        0.95,
    );
    // Llama's RMS norm: f32 inside, converted back to bf16 before the weight (rounded there,
    // which the f64 reference does not: a lower share exact).
    check(
        "graph {
  %x: bf16[6, 96] = input
  %w: bf16[96] = parameter \"norm.weight\"
  %xf: f32[6, 96] = aten._to_copy.default(%x, dtype=f32)
  %p: f32[6, 96] = aten.pow.Tensor_Scalar(%xf, exponent=2)
  %m: f32[6, 1] = aten.mean.dim(%p, dim=[-1], keepdim=true)
  %e: f32[6, 1] = aten.add.Scalar(%m, other=1e-6)
  %r: f32[6, 1] = aten.rsqrt.default(%e)
  %n: f32[6, 96] = aten.mul.Tensor(%xf, %r)
  %nb: bf16[6, 96] = aten._to_copy.default(%n, dtype=bf16)
  %o: bf16[6, 96] = aten.mul.Tensor(%w, %nb)
  return %o
}",
        BF16,
        &["reduction"],
        0.6,
    );
    check(
        "graph {
  %x: bf16[5, 301] = input
  %s: bf16[5] = aten.sum.dim_IntList(%x, dim=[1])
  %m: bf16[301] = aten.mean.dim(%x, dim=[0])
  %a: bf16[5, 1] = aten.amax.default(%x, dim=[1], keepdim=true)
  return %s, %m, %a
}",
        BF16,
        &["reduction", "reduction", "reduction"],
        0.95,
    );
}

#[test]
fn attention() {
    check(
        "graph {
  %q: bf16[2, 3, 40, 16] = input
  %k: bf16[2, 3, 50, 16] = input
  %v: bf16[2, 3, 50, 24] = input
  %mask: bf16[1, 1, 40, 50] = input
  %qv: bf16[6, 40, 16] = aten.view.default(%q, size=[6, 40, 16])
  %kt: bf16[2, 3, 16, 50] = aten.permute.default(%k, dims=[0, 1, 3, 2])
  %ktv: bf16[6, 16, 50] = aten.view.default(%kt, size=[6, 16, 50])
  %s: bf16[6, 40, 50] = aten.bmm.default(%qv, %ktv)
  %s4: bf16[2, 3, 40, 50] = aten.view.default(%s, size=[2, 3, 40, 50])
  %sc: bf16[2, 3, 40, 50] = aten.div.Scalar(%s4, other=4)
  %sm: bf16[2, 3, 40, 50] = aten.add.Tensor(%sc, %mask)
  %p: bf16[2, 3, 40, 50] = aten._softmax.default(%sm, dim=-1, half_to_float=false)
  %pv: bf16[6, 40, 50] = aten.view.default(%p, size=[6, 40, 50])
  %vv: bf16[6, 50, 24] = aten.view.default(%v, size=[6, 50, 24])
  %o: bf16[6, 40, 24] = aten.bmm.default(%pv, %vv)
  return %o
}",
        BF16,
        &["attention"],
        0.95,
    );
}

#[test]
fn convolution_and_pooling() {
    check(
        "graph {
  %x: bf16[2, 3, 9, 9] = input
  %w: bf16[8, 3, 3, 3] = parameter \"conv.weight\"
  %b: bf16[8] = parameter \"conv.bias\"
  %y: bf16[2, 8, 5, 5] = aten.convolution.default(%x, %w, %b, stride=[2, 2], padding=[1, 1], dilation=[1, 1], transposed=false, output_padding=[0, 0], groups=1)
  %r: bf16[2, 8, 5, 5] = aten.relu.default(%y)
  return %r
}",
        BF16,
        &["conv"],
        0.95,
    );
    // Max pooling selects values: exact.
    check(
        "graph {
  %x: bf16[2, 4, 9, 9] = input
  mp: %y: bf16[2, 4, 4, 4], %i: i64[2, 4, 4, 4] = aten.max_pool2d_with_indices.default(%x, kernel_size=[3, 3], stride=[2, 2], padding=[0, 0], dilation=[1, 1], ceil_mode=false)
  return %y
}",
        BF16,
        &["pool"],
        1.0,
    );
}

/// Gathers and concatenations move bf16 values as they are.
#[test]
fn copies_are_exact() {
    check(
        "graph {
  %w: bf16[10, 24] = parameter \"emb.weight\"
  %idx: i64[3, 5] = input
  %e: bf16[3, 5, 24] = aten.embedding.default(%w, %idx)
  %f: bf16[3, 5, 24] = input
  %c: bf16[3, 10, 24] = aten.cat.default([%e, %f], dim=1)
  return %c
}",
        BF16,
        &["gather", "concat"],
        1.0,
    );
}
