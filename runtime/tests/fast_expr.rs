//! The fast runtime's `f32` math against `f64` references over wide ranges and special values,
//! and the expression evaluator on strided, broadcast and masked programs.
//!
//! Throughput: `cargo test --release -p fxhlo-runtime --test fast_expr -- --ignored --nocapture`.

use fxhlo_runtime::fast::expr::{
    apply_bin, apply_un, run_elementwise, BinOp, Expr, ExprBuilder, InstOp, Leaf, LeafKind,
    LeafSrc, UnOp, Val,
};
use fxhlo_runtime::fast::math;
use fxhlo_runtime::fast::reduce::{run_row_reduce, ReduceOp, RowOut, RowReduce, RowStage};
use fxhlo_runtime::fast::{Dst, Src};

/// Test points: a sweep of every `step`-th bit pattern of both signs, plus special values.
fn points(step: u32) -> Vec<f32> {
    let mut v = vec![
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        1e-45,
        -1e-45,
        f32::MAX,
        f32::MIN,
        1.0,
        -1.0,
        0.5,
        -0.5,
        0.35,
        -0.35,
        88.72,
        88.73,
        -87.3,
        -103.9,
        -104.0,
        9.0,
        -9.0,
    ];
    let mut b = 0u32;
    while b < 0x7f80_0000 {
        let x = f32::from_bits(b);
        v.push(x);
        v.push(-x);
        b += step;
    }
    // Dense around the interesting range [-20, 20].
    for i in -200_000..=200_000 {
        v.push(i as f32 * 1e-4);
        v.push(i as f32 * 1e-1 / 1000.0 * 1.000_013);
    }
    v
}

/// Largest error of `f` against `r` over `xs`: `|f(x) - r(x)| / max(|r(x)|, floor)`, with
/// NaN/inf required to match exactly. Returns the error and the worst input.
fn max_err(xs: &[f32], f: impl Fn(f32) -> f32, r: impl Fn(f64) -> f64, floor: f64) -> (f64, f32) {
    max_err_by(xs, f, r, |_, e| e.abs().max(floor))
}

/// [`max_err`] with the error divided by `scale(x, r(x))`.
fn max_err_by(
    xs: &[f32],
    f: impl Fn(f32) -> f32,
    r: impl Fn(f64) -> f64,
    scale: impl Fn(f64, f64) -> f64,
) -> (f64, f32) {
    let mut worst = (0.0f64, 0.0f32);
    for &x in xs {
        let y = f(x) as f64;
        let e = r(x as f64);
        let ef = e as f32;
        if e.is_nan() {
            assert!(y.is_nan(), "f({x:e}) = {y:e}, expected NaN");
            continue;
        }
        if ef.is_infinite() {
            assert_eq!(y, ef as f64, "f({x:e}) = {y:e}, expected {ef}");
            continue;
        }
        assert!(y.is_finite(), "f({x:e}) = {y:e}, expected {e:e}");
        let err = (y - e).abs() / scale(x as f64, e);
        if err > worst.0 {
            worst = (err, x);
        }
    }
    worst
}

fn check(name: &str, f: impl Fn(f32) -> f32, r: impl Fn(f64) -> f64, floor: f64, bound: f64) {
    check_points(name, &points(4099), f, r, floor, bound);
}

/// [`check`] over the given points.
fn check_points(
    name: &str,
    xs: &[f32],
    f: impl Fn(f32) -> f32,
    r: impl Fn(f64) -> f64,
    floor: f64,
    bound: f64,
) {
    let (err, at) = max_err(xs, f, r, floor);
    println!("{name:<10} max error {err:.3e} at {at:e}");
    assert!(
        err <= bound,
        "{name}: error {err:e} at x = {at:e} exceeds {bound:e}"
    );
}

fn erf64(x: f64) -> f64 {
    libm::erf(x)
}

#[test]
fn exp_accuracy() {
    check("exp", math::exp, f64::exp, f32::MIN_POSITIVE as f64, 2.5e-7);
}

#[test]
fn expm1_accuracy() {
    check("expm1", math::expm1, f64::exp_m1, 1e-38, 3e-7);
}

#[test]
fn log_accuracy() {
    check("log", math::log, f64::ln, 1e-38, 3e-7);
    check("log2", math::log2, f64::log2, 1e-38, 3e-7);
    check("log10", math::log10, f64::log10, 1e-38, 3e-7);
}

#[test]
fn log1p_accuracy() {
    check("log1p", math::log1p, f64::ln_1p, 1e-38, 4e-7);
}

#[test]
fn tanh_sigmoid_accuracy() {
    check("tanh", math::tanh, f64::tanh, 1e-38, 5e-7);
    check(
        "sigmoid",
        math::sigmoid,
        |x| 1.0 / (1.0 + (-x).exp()),
        1e-38,
        5e-7,
    );
    check("silu", math::silu, |x| x / (1.0 + (-x).exp()), 1e-30, 5e-7);
}

#[test]
fn erf_accuracy() {
    check("erf", math::erf, erf64, 1e-38, 4e-7);
    // erfc keeps its relative accuracy into the tail (to ~1e-36 at x = 9).
    let xs: Vec<f32> = (0..90_000).map(|i| i as f32 * 1e-4).collect();
    let (e, at) = max_err(&xs, math::erfc, libm::erfc, 1e-38);
    println!("erfc       max error {e:.3e} at {at:e}");
    assert!(e < 5e-7, "erfc error {e:e} at {at}");
}

#[test]
fn gelu_accuracy() {
    let exact = |x: f64| {
        if x == f64::NEG_INFINITY {
            f64::NAN
        } else {
            0.5 * x * libm::erfc(-x * std::f64::consts::FRAC_1_SQRT_2)
        }
    };
    // x ≥ 0: relative. x < 0: the two terms 0.5x and |x| erf(|x|/√2)/2 cancel (as 1 + erf does
    // in PyTorch's formula), so the error is bounded against |x|, not against the tiny result.
    let xs = points(4099);
    let pos: Vec<f32> = xs
        .iter()
        .copied()
        .filter(|x| *x >= 0.0 || x.is_nan())
        .collect();
    check_points("gelu_erf", &pos, math::gelu_erf, exact, 1e-38, 2.5e-7);
    let neg: Vec<f32> = xs.iter().copied().filter(|x| *x < 0.0).collect();
    for &x in &neg {
        let y = math::gelu_erf(x);
        assert!(
            y <= 0.0 || x == f32::NEG_INFINITY,
            "gelu_erf({x:e}) = {y:e} is positive"
        );
    }
    // (Denormal x: half a denormal ulp of the halving is all there is.)
    let (e, at) = max_err_by(&neg, math::gelu_erf, exact, |x, _| x.abs().max(1e-37));
    println!("gelu_erf   x < 0: max error / |x| {e:.3e} at {at:e}");
    assert!(e <= 1e-7, "gelu_erf: error {e:e} |x| at x = {at:e}");
    let k = (2.0 / std::f64::consts::PI).sqrt();
    let tanh_form = |x: f64| {
        if x == f64::NEG_INFINITY {
            f64::NAN
        } else if x == f64::INFINITY {
            x
        } else {
            let u = k * (x + 0.044715 * x * x * x);
            x / (1.0 + (-2.0 * u).exp())
        }
    };
    // The argument k(x + 0.044715x³) is rounded to f32 (as in PyTorch), which for x < -4 costs a
    // few 1e-6 of relative error in the tiny result.
    check("gelu_tanh", math::gelu_tanh, tanh_form, 1e-12, 6e-6);
}

#[test]
fn special_values_match_torch() {
    assert!(math::exp(f32::NAN).is_nan());
    assert_eq!(math::exp(-1000.0), 0.0);
    assert_eq!(math::exp(1000.0), f32::INFINITY);
    assert!(math::exp(-100.0) > 0.0, "denormal results are kept");
    assert!(math::log(-0.0) == f32::NEG_INFINITY);
    assert!(math::log(f32::NEG_INFINITY).is_nan());
    assert_eq!(math::log(f32::INFINITY), f32::INFINITY);
    assert_eq!(math::log1p(-1.0), f32::NEG_INFINITY);
    assert!(math::log1p(-2.0).is_nan());
    assert_eq!(math::log1p(1e-30), 1e-30);
    assert_eq!(math::expm1(1e-30), 1e-30);
    assert!(math::gelu_erf(f32::NEG_INFINITY).is_nan());
    assert!(math::gelu_tanh(f32::NEG_INFINITY).is_nan());
    assert_eq!(math::gelu_erf(-30.0).to_bits(), (-0.0f32).to_bits());
    assert_eq!(math::gelu_erf(f32::INFINITY), f32::INFINITY);
    // Just above the clamp at -15: a tiny non-positive value, not a wrong large one.
    for x in [-14.2f32, -14.9, -15.0] {
        let g = math::gelu_erf(x);
        assert!(g <= 0.0 && g > -1e-40, "gelu_erf({x}) = {g:e}");
    }
    assert_eq!(math::tanh(-0.0).to_bits(), (-0.0f32).to_bits());
    assert_eq!(math::max_nan(-0.5, 0.0), 0.0);
    assert_eq!(math::remainder(-7.0, 3.0), 2.0);
    assert_eq!(math::div_floor(-7.0, 2.0), -4.0);
    assert_eq!(math::powi(3.0, 3), 27.0);
    assert_eq!(math::powi(2.0, -3), 0.125);
}

fn slot(slot: u32, offset: i64, strides: Vec<i64>) -> Leaf {
    Leaf {
        src: LeafSrc::Slot {
            slot,
            kind: LeafKind::F32,
        },
        offset,
        strides,
    }
}

fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 8.0 - 4.0
        })
        .collect()
}

/// Values that are the same along a whole block (per-row operands of a reduction's epilogue,
/// per-channel ones of a convolution's) are computed once per block by the reduction path
/// (`eval_range_shifted`); every op on them gives the bits of the element-by-element path.
#[test]
fn block_uniform_values_give_the_same_bits() {
    let (rows, len) = (6usize, 1100usize);
    let x = rand_vec(rows * len, 3);
    let m: Vec<f32> = rand_vec(rows, 4).iter().map(|v| v.abs() + 0.1).collect();
    let mask = [true, false, true, true, false, false];
    let k: Vec<i64> = vec![3, -2, 0, 7, 1, -5];
    let mut b = ExprBuilder::new(&[rows, len]);
    let xv = b.leaf(slot(0, 0, vec![len as i64, 1]));
    let mv = b.leaf(slot(1, 0, vec![1, 0]));
    let bv = b.leaf(Leaf {
        src: LeafSrc::Slot {
            slot: 2,
            kind: LeafKind::Bool,
        },
        offset: 0,
        strides: vec![1, 0],
    });
    let kv = b.leaf(Leaf {
        src: LeafSrc::Slot {
            slot: 3,
            kind: LeafKind::I64,
        },
        offset: 0,
        strides: vec![1, 0],
    });
    let eps = b.bin_c(BinOp::Add, mv, 1e-5);
    let r = b.un(UnOp::Rsqrt, eps);
    let scaled = b.bin(BinOp::Mul, xv, r);
    let cube = b.powi(mv, 3);
    let shifted = b.bin(BinOp::Sub, cube, kv);
    let picked = b.select(bv, scaled, shifted);
    let sg = b.un(UnOp::Sigmoid, mv);
    let all_uniform = b.select(bv, sg, cube);
    let out = b.bin(BinOp::Add, picked, sg);
    let e = b.finish(&[out, all_uniform, r]);
    let srcs = [Src::F32(&x), Src::F32(&m), Src::Bool(&mask), Src::I64(&k)];
    e.validate(&srcs).unwrap();
    let n = rows * len;
    let mut want = [vec![0f32; n], vec![0f32; n], vec![0f32; n]];
    let [w0, w1, w2] = &mut want;
    e.eval_range(&srcs, 0, n, &mut [w0, w1, w2]);
    for (s, t) in [(0, n), (5, 3 * len + 17), (len - 3, len + 2)] {
        let mut got = [vec![0f32; t - s], vec![0f32; t - s], vec![0f32; t - s]];
        let [g0, g1, g2] = &mut got;
        e.eval_range_shifted(&srcs, &[], s, t, &mut [g0, g1, g2]);
        for (g, w) in got.iter().zip(&want) {
            assert!(
                g.iter()
                    .zip(&w[s..t])
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "range {s}..{t}"
            );
        }
    }
    // Spot values: row 1 is masked off.
    let i = len + 4;
    assert_eq!(
        want[0][i],
        (m[1] * m[1] * m[1] - k[1] as f32) + math::sigmoid(m[1])
    );
}

/// The elementwise workload's chain, `gelu(x * w + b) * sigmoid(x) + x`.
fn gelu_chain(b: &mut ExprBuilder, x: Val, w: Val, bias: Val) -> Val {
    let t = b.bin(BinOp::Mul, x, w);
    let t = b.bin(BinOp::Add, t, bias);
    let g = b.un(UnOp::GeluErf, t);
    let s = b.un(UnOp::Sigmoid, x);
    let p = b.bin(BinOp::Mul, g, s);
    b.bin(BinOp::Add, p, x)
}

/// Chains whose intermediate values have no other use become fused instructions (the
/// elementwise workload `gelu(x * w + b) * sigmoid(x) + x` is two), values used twice or
/// returned stay as they are, and every output has the bits of its ops one at a time, through
/// the block loop, the streaming loop and the per-row loop with block-uniform operands.
#[test]
fn fused_chains_give_the_bits_of_their_steps() {
    let (rows, len) = (9usize, 1000usize);
    let n = rows * len;
    let x = rand_vec(n, 11);
    let y = rand_vec(n, 12);
    let w = rand_vec(len, 13);
    let m = rand_vec(rows, 14);
    let mut b = ExprBuilder::new(&[rows, len]);
    let xv = b.leaf(slot(0, 0, vec![len as i64, 1]));
    let yv = b.leaf(slot(1, 0, vec![len as i64, 1]));
    let wv = b.leaf(slot(2, 0, vec![0, 1]));
    let mv = b.leaf(slot(3, 0, vec![1, 0]));
    let o0 = gelu_chain(&mut b, xv, wv, yv);
    // A product on the right of the sum; a quotient of two unary ops.
    let ym = b.bin(BinOp::Mul, yv, mv);
    let o1 = b.bin(BinOp::Add, xv, ym);
    let ey = b.un(UnOp::Exp, yv);
    let sm = b.un(UnOp::Sigmoid, mv);
    let o2 = b.bin(BinOp::Div, ey, sm);
    // A unary op used twice, and one that is returned: neither is folded.
    let gx = b.un(UnOp::GeluErf, xv);
    let twice = b.bin(BinOp::Mul, gx, gx);
    let o3 = b.bin(BinOp::Sub, twice, yv);
    let ex = b.un(UnOp::Exp, xv);
    let o4 = b.bin(BinOp::Mul, ex, yv);
    // Every operand uniform along a row.
    let em = b.un(UnOp::Exp, mv);
    let o5 = b.bin(BinOp::Mul, em, sm);
    let outs = [o0, o1, o2, o3, o4, ex, o5];
    let e = b.finish(&outs);
    let fused: Vec<_> = e
        .insts()
        .iter()
        .filter_map(|i| match i.op {
            InstOp::Fused(f) => Some(f),
            _ => None,
        })
        .collect();
    // o0 (two), o1, o2 and o5 (sigmoid(m) feeds o2 and o5: each reads it unfused).
    assert_eq!(fused.len(), 5, "{:#?}", e.insts());
    assert!(fused
        .iter()
        .any(|f| f.pa == Some(UnOp::GeluErf) && f.pb == Some(UnOp::Sigmoid) && f.add.is_some()));
    // gelu(x), used twice, and exp(x), returned, are instructions of their own.
    let un_count = |u: UnOp| {
        e.insts()
            .iter()
            .filter(|i| matches!(i.op, InstOp::Un(v, _) if v == u))
            .count()
    };
    assert_eq!((un_count(UnOp::GeluErf), un_count(UnOp::Exp)), (1, 1));
    // The bits of the ops one at a time.
    let (un, bin) = (apply_un, apply_bin);
    let want = |k: usize, i: usize| {
        let (xi, yi, wi, mi) = (x[i], y[i], w[i % len], m[i / len]);
        match k {
            0 => bin(
                BinOp::Add,
                bin(
                    BinOp::Mul,
                    un(UnOp::GeluErf, bin(BinOp::Add, bin(BinOp::Mul, xi, wi), yi)),
                    un(UnOp::Sigmoid, xi),
                ),
                xi,
            ),
            1 => bin(BinOp::Add, xi, bin(BinOp::Mul, yi, mi)),
            2 => bin(BinOp::Div, un(UnOp::Exp, yi), un(UnOp::Sigmoid, mi)),
            3 => {
                let g = un(UnOp::GeluErf, xi);
                bin(BinOp::Sub, bin(BinOp::Mul, g, g), yi)
            }
            4 => bin(BinOp::Mul, un(UnOp::Exp, xi), yi),
            5 => un(UnOp::Exp, xi),
            _ => bin(BinOp::Mul, un(UnOp::Exp, mi), un(UnOp::Sigmoid, mi)),
        }
    };
    let srcs = [Src::F32(&x), Src::F32(&y), Src::F32(&w), Src::F32(&m)];
    e.validate(&srcs).unwrap();
    let check = |got: &[Vec<f32>], s: usize, how: &str| {
        for (k, g) in got.iter().enumerate() {
            for (j, v) in g.iter().enumerate() {
                let want = want(k, s + j);
                assert!(
                    v.to_bits() == want.to_bits() || v.is_nan() && want.is_nan(),
                    "{how}: output {k} at {}: {v} vs {want}",
                    s + j
                );
            }
        }
    };
    let mut got = vec![vec![0f32; n]; outs.len()];
    let mut refs: Vec<&mut [f32]> = got.iter_mut().map(|v| v.as_mut_slice()).collect();
    run_elementwise(&e, &srcs, &mut refs);
    check(&got, 0, "run_elementwise");
    for (s, t) in [(0, n), (7, 2 * len + 3), (len - 5, len + 40)] {
        let mut got = vec![vec![0f32; t - s]; outs.len()];
        let mut refs: Vec<&mut [f32]> = got.iter_mut().map(|v| v.as_mut_slice()).collect();
        e.eval_range_shifted(&srcs, &[], s, t, &mut refs);
        check(&got, s, "eval_range_shifted");
    }
}

#[test]
fn transposed_sliced_masked_program() {
    // out[i, j] = where(x^T[i, j] > 0, x^T[i, j] * s[j % 5 + 2] , iota) with x: [40, 30].
    let (m, n) = (30usize, 40usize);
    let x = rand_vec(n * m, 1);
    let s = rand_vec(50, 2);
    let mut b = ExprBuilder::new(&[m, n]);
    let xt = b.leaf(slot(0, 0, vec![1, m as i64]));
    let sv = b.leaf(slot(1, 3, vec![0, 1]));
    let io = b.leaf(Leaf {
        src: LeafSrc::Iota {
            start: 0.5,
            step: 0.25,
        },
        offset: 0,
        strides: vec![n as i64, 1],
    });
    let pos = b.bin_c(BinOp::Gt, xt, 0.0);
    let prod = b.bin(BinOp::Mul, xt, sv);
    let w = b.select(pos, prod, io);
    let e = b.finish(&[w, prod]);
    let srcs = [Src::F32(&x), Src::F32(&s)];
    e.validate(&srcs).unwrap();
    let mut o0 = vec![0.0; m * n];
    let mut o1 = vec![0.0; m * n];
    run_elementwise(&e, &srcs, &mut [&mut o0, &mut o1]);
    for i in 0..m {
        for j in 0..n {
            let xv = x[j * m + i];
            let p = xv * s[3 + j];
            let want = if xv > 0.0 {
                p
            } else {
                (0.5 + (i * n + j) as f64 * 0.25) as f32
            };
            assert_eq!(o0[i * n + j], want, "({i}, {j})");
            assert_eq!(o1[i * n + j], p);
        }
    }
    // A partial range writes only its slice.
    let mut part = vec![0.0; 7];
    let mut part1 = vec![0.0; 7];
    e.eval_range(&srcs, 33, 40, &mut [&mut part, &mut part1]);
    assert_eq!(&part[..], &o0[33..40]);
    // The slice s[3 + j] for j < 40 reads up to index 42 of 50; offset 11 would overrun.
    let mut b = ExprBuilder::new(&[m, n]);
    let bad = b.leaf(slot(1, 11, vec![0, 1]));
    let e = b.finish(&[bad]);
    assert!(e.validate(&srcs).is_err());
}

#[test]
fn corrupted_programs_are_rejected() {
    let mut b = ExprBuilder::new(&[4]);
    let x = b.leaf(slot(0, 0, vec![1]));
    let y = b.un(UnOp::Exp, x);
    let e = b.finish(&[y]);
    let xs = [1.0f32; 4];
    e.validate(&[Src::F32(&xs)]).unwrap();
    let json = serde_json::to_string(&e).unwrap();
    // A register read before it is written, a leaf past the end, a wrong operand kind.
    for (from, to) in [
        ("\"Exp\",0", "\"Exp\",5"),
        ("\"Load\":0", "\"Load\":3"),
        ("\"strides\":[1]", "\"strides\":[2]"),
        ("\"strides\":[1]", "\"strides\":[1,1]"),
        ("\"kind\":\"F32\"", "\"kind\":\"Bool\""),
    ] {
        assert!(json.contains(from), "{json}");
        let bad: Expr = serde_json::from_str(&json.replacen(from, to, 1)).unwrap();
        assert!(bad.validate(&[Src::F32(&xs)]).is_err(), "{from} -> {to}");
    }
    let bools = [true; 4];
    assert!(e.validate(&[Src::Bool(&bools)]).is_err());
}

#[test]
fn results_do_not_depend_on_the_thread_count() {
    let n = 100_003usize;
    let x = rand_vec(n, 3);
    let mut b = ExprBuilder::new(&[n]);
    let l = b.leaf(slot(0, 0, vec![1]));
    let g = b.un(UnOp::GeluErf, l);
    let t = b.un(UnOp::Tanh, g);
    let e = b.finish(&[t]);
    let srcs = [Src::F32(&x)];
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let mut out = vec![0.0; n];
        pool.install(|| run_elementwise(&e, &srcs, &mut [&mut out]));
        out
    };
    let a = run(1);
    let b2 = run(3);
    assert!(a.iter().zip(&b2).all(|(p, q)| p.to_bits() == q.to_bits()));
    for (i, &v) in a.iter().enumerate() {
        let want = math::tanh(math::gelu_erf(x[i]));
        assert_eq!(v.to_bits(), want.to_bits());
    }
}

/// GB/s of `gelu(x*w+b)*sigmoid(x)+x` on a 4096x4096 `x` with `[4096]` `w` and `b`.
#[test]
#[ignore]
fn throughput_gelu_chain() {
    let (m, n) = (4096usize, 4096usize);
    let x = rand_vec(m * n, 5);
    let w = rand_vec(n, 6);
    let bias = rand_vec(n, 7);
    let mut b = ExprBuilder::new(&[m, n]);
    let xv = b.leaf(slot(0, 0, vec![n as i64, 1]));
    let wv = b.leaf(slot(1, 0, vec![0, 1]));
    let bv = b.leaf(slot(2, 0, vec![0, 1]));
    let o = gelu_chain(&mut b, xv, wv, bv);
    let e = b.finish(&[o]);
    let srcs = [Src::F32(&x), Src::F32(&w), Src::F32(&bias)];
    e.validate(&srcs).unwrap();
    let mut out = vec![0.0; m * n];
    for threads in [1usize, 2] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let mut best = f64::MAX;
        for _ in 0..5 {
            let t0 = std::time::Instant::now();
            pool.install(|| run_elementwise(&e, &srcs, &mut [&mut out]));
            best = best.min(t0.elapsed().as_secs_f64());
        }
        let bytes = (2 * m * n * 4) as f64;
        println!(
            "gelu chain 4096x4096 threads={threads}: {:.2} ms, {:.2} GB/s (read x + write out)",
            best * 1e3,
            bytes / best / 1e9
        );
        // A plain copy for reference.
        let mut best_copy = f64::MAX;
        for _ in 0..5 {
            let t0 = std::time::Instant::now();
            pool.install(|| {
                use rayon::prelude::*;
                out.par_chunks_mut(1 << 16)
                    .zip(x.par_chunks(1 << 16))
                    .for_each(|(o, i)| o.copy_from_slice(i))
            });
            best_copy = best_copy.min(t0.elapsed().as_secs_f64());
        }
        println!(
            "memcpy     4096x4096 threads={threads}: {:.2} ms, {:.2} GB/s",
            best_copy * 1e3,
            bytes / best_copy / 1e9
        );
    }
}

#[test]
#[ignore]
fn throughput_per_op() {
    let n = 1 << 16;
    let x = rand_vec(n, 5);
    let srcs = [Src::F32(&x)];
    let mut out = vec![0.0; n];
    for op in [
        UnOp::Neg,
        UnOp::Exp,
        UnOp::Log,
        UnOp::Tanh,
        UnOp::Sigmoid,
        UnOp::Erf,
        UnOp::GeluErf,
        UnOp::GeluTanh,
    ] {
        let mut b = ExprBuilder::new(&[n]);
        let xv = b.leaf(slot(0, 0, vec![1]));
        let o = b.un(op, xv);
        let e = b.finish(&[o]);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let mut best = f64::MAX;
        for _ in 0..50 {
            let t0 = std::time::Instant::now();
            pool.install(|| run_elementwise(&e, &srcs, &mut [&mut out]));
            best = best.min(t0.elapsed().as_secs_f64());
        }
        println!("{op:?}: {:.3} ns/elem (in cache)", best * 1e9 / n as f64);
    }
}

/// One row reduction `op` over `rows` rows of `len` (read in place from `x`), returning its
/// result 0 (`per` elements per row).
fn reduce_rows(x: &[f32], rows: usize, len: usize, op: ReduceOp, per: usize) -> Vec<f32> {
    let mut b = ExprBuilder::new(&[rows, len]);
    let xv = b.leaf(slot(0, 0, vec![len as i64, 1]));
    let k = RowReduce {
        rows,
        stages: vec![RowStage {
            op,
            len,
            prologue: b.finish(&[xv]),
            weight: None,
            bias: None,
            outputs: vec![RowOut::Result(0)],
        }],
    };
    let mut out = vec![f32::NAN; rows * per];
    run_row_reduce(&k, &[Src::F32(x)], &mut [Dst::F32(&mut out)]).unwrap();
    out
}

/// A softmax (plain and safe) over `rows` rows of `len`.
fn softmax_rows(x: &[f32], rows: usize, len: usize, op: ReduceOp) -> Vec<f32> {
    reduce_rows(x, rows, len, op, len)
}

/// A softmax gives the same bits for a row whatever the number of rows around it (row blocks
/// and threads), matches an `f64` softmax, gives a fully masked row (all `-inf`) zeros when
/// safe and NaN when plain, and a row with one NaN all NaN. Both sizes stream their output
/// (each row's stores made during the next row's exp loop); rows of 1003 end inside a cache
/// line and inside a step of that loop.
#[test]
fn softmax_rows_agree_across_sizes_and_propagate_masks_and_nan() {
    for (rows, len) in [(8192usize, 1024usize), (8364, 1003)] {
        softmax_rows_case(rows, len);
    }
}

fn softmax_rows_case(rows: usize, len: usize) {
    assert!(rows * len >= fxhlo_runtime::fast::expr::STREAM_ELEMS);
    let mut x = rand_vec(rows * len, 7);
    x[3 * len..4 * len].fill(f32::NEG_INFINITY);
    x[5 * len + 700] = f32::NAN;
    for op in [ReduceOp::Softmax, ReduceOp::SafeSoftmax] {
        let big = softmax_rows(&x, rows, len, op);
        let small = softmax_rows(&x[..40 * len], 40, len, op);
        assert!(
            small
                .iter()
                .zip(&big)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{op:?}"
        );
        let masked = &big[3 * len..4 * len];
        if op == ReduceOp::SafeSoftmax {
            assert!(masked.iter().all(|&v| v == 0.0));
        } else {
            assert!(masked.iter().all(|v| v.is_nan()));
        }
        assert!(big[5 * len..6 * len].iter().all(|v| v.is_nan()), "{op:?}");
        for r in [0, 1, 4, 6, rows - 1] {
            let row = &x[r * len..(r + 1) * len];
            let m = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
            let e: Vec<f64> = row.iter().map(|&v| (v as f64 - m).exp()).collect();
            let s: f64 = e.iter().sum();
            for (j, (&got, &want)) in big[r * len..(r + 1) * len].iter().zip(&e).enumerate() {
                let want = want / s;
                assert!(
                    (got as f64 - want).abs() <= 1e-6 * want + 1e-12,
                    "{op:?} row {r} [{j}]: {got} vs {want}"
                );
            }
        }
        let row: f64 = big[..len].iter().map(|&v| v as f64).sum();
        assert!((row - 1.0).abs() < 1e-5, "{op:?}: row 0 sums to {row}");
    }
}

/// A layer norm whose rows a softmax reads next (one kernel: the softmax takes the rows'
/// maxima from the pass that wrote them, which leaves NaN out) gives the bits of the two run
/// as separate kernels, NaN bits included, with and without weight and bias, for rows long and
/// short, plain, safe and log softmax: with a NaN row (a NaN input), a NaN column (a NaN in
/// the bias: a NaN in every row next to finite values) and rows of only `-inf` (a bias of
/// `-inf`: zeros when safe, NaN otherwise); and rows streamed to memory (8192 x 1024).
#[test]
fn layer_norm_then_softmax_in_one_kernel_gives_the_bits_of_two() {
    for (rows, len) in [(300usize, 1024usize), (37, 5), (64, 100)] {
        let mut x = rand_vec(rows * len, 11);
        x[2 * len + len / 2] = f32::NAN;
        let w: Vec<f32> = rand_vec(len, 12).iter().map(|v| 1.0 + 0.1 * v).collect();
        let b = rand_vec(len, 13);
        let mut b_nan = b.clone();
        b_nan[len / 3] = -f32::NAN;
        let b_ninf = vec![f32::NEG_INFINITY; len];
        for (affine, b) in [(false, &b), (true, &b), (true, &b_nan), (true, &b_ninf)] {
            for op in [
                ReduceOp::Softmax,
                ReduceOp::SafeSoftmax,
                ReduceOp::LogSoftmax,
            ] {
                ln_softmax_case(rows, len, &x, &w, b, affine, op);
            }
        }
    }
    // Streamed rows (an output of `STREAM_ELEMS`: each row computed in an L1 buffer and
    // stored during the next row's loop; the layer norm and the softmax then run row by row),
    // where a NaN in every row makes each one computed again after its sum; rows of 1003 end
    // inside a cache line and inside a step of the exp loop.
    for (rows, len) in [(8192usize, 1024usize), (8364, 1003)] {
        assert!(rows * len >= fxhlo_runtime::fast::expr::STREAM_ELEMS);
        let mut x = rand_vec(rows * len, 14);
        x[2 * len + 9] = f32::NAN;
        // A row far from its first values (layer norm's moments in two passes).
        x[7 * len + 16..8 * len].iter_mut().for_each(|v| *v += 1e4);
        let w: Vec<f32> = rand_vec(len, 15).iter().map(|v| 1.0 + 0.1 * v).collect();
        let mut b = rand_vec(len, 16);
        for op in [
            ReduceOp::Softmax,
            ReduceOp::SafeSoftmax,
            ReduceOp::LogSoftmax,
        ] {
            ln_softmax_case(rows, len, &x, &w, &b, true, op);
        }
        ln_softmax_case(rows, len, &x, &w, &b, false, ReduceOp::Softmax);
        b[len - 1] = -f32::NAN;
        ln_softmax_case(rows, len, &x, &w, &b, true, ReduceOp::Softmax);
    }
    // Rows of only `-inf` (a bias of `-inf`), streamed: zeros when safe.
    let (rows, len) = (8192usize, 1024usize);
    let mut x = rand_vec(rows * len, 17);
    x[2 * len] = f32::NAN;
    let w = vec![1.0; len];
    let b = vec![f32::NEG_INFINITY; len];
    ln_softmax_case(rows, len, &x, &w, &b, true, ReduceOp::SafeSoftmax);
}

fn ln_softmax_case(
    rows: usize,
    len: usize,
    x: &[f32],
    w: &[f32],
    b: &[f32],
    affine: bool,
    op: ReduceOp,
) {
    let n = if affine { 3 } else { 1 };
    let stage = |op, prologue: Expr, outputs| {
        let mut e = ExprBuilder::new(&[len]);
        let (weight, bias) = if affine && matches!(op, ReduceOp::LayerNorm { .. }) {
            let wv = e.leaf(slot(1, 0, vec![1]));
            let weight = e.finish(&[wv]);
            let mut e = ExprBuilder::new(&[len]);
            let bv = e.leaf(slot(2, 0, vec![1]));
            (Some(weight), Some(e.finish(&[bv])))
        } else {
            (None, None)
        };
        RowStage {
            op,
            len,
            prologue,
            weight,
            bias,
            outputs,
        }
    };
    let load = |slot_no: u32| {
        let mut e = ExprBuilder::new(&[rows, len]);
        let v = e.leaf(slot(slot_no, 0, vec![len as i64, 1]));
        e.finish(&[v])
    };
    let ln = ReduceOp::LayerNorm { eps: 1e-5 };
    let srcs: Vec<Src<'_>> = if affine {
        vec![Src::F32(x), Src::F32(w), Src::F32(b)]
    } else {
        vec![Src::F32(x)]
    };
    // Separately: the layer norm, then a softmax over its result.
    let k1 = RowReduce {
        rows,
        stages: vec![stage(ln, load(0), vec![RowOut::Result(0)])],
    };
    let mut y = vec![0f32; rows * len];
    run_row_reduce(&k1, &srcs, &mut [Dst::F32(&mut y)]).unwrap();
    let k2 = RowReduce {
        rows,
        stages: vec![stage(op, load(0), vec![RowOut::Result(0)])],
    };
    let mut want = vec![0f32; rows * len];
    run_row_reduce(&k2, &[Src::F32(&y)], &mut [Dst::F32(&mut want)]).unwrap();
    // One kernel: the softmax reads stage 0's output (scratch slot n + 4).
    let k = RowReduce {
        rows,
        stages: vec![
            stage(ln, load(0), vec![RowOut::Result(0)]),
            stage(op, load(n + 4), vec![RowOut::Result(0)]),
        ],
    };
    let mut got = vec![0f32; rows * len];
    run_row_reduce(&k, &srcs, &mut [Dst::F32(&mut got)]).unwrap();
    assert!(got[2 * len..3 * len].iter().all(|v| v.is_nan()));
    if b[0] == f32::NEG_INFINITY && op == ReduceOp::SafeSoftmax {
        // (Row 2's NaN input makes its layer norm NaN, bias or not.)
        let (head, tail) = (&got[..2 * len], &got[3 * len..]);
        assert!(
            head.iter().chain(tail).all(|&v| v == 0.0),
            "{op:?}: rows of -inf"
        );
    }
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            g.to_bits() == w.to_bits(),
            "{rows}x{len} affine {affine} {op:?}: element {i}: {g} ({:#x}) vs {w} ({:#x})",
            g.to_bits(),
            w.to_bits()
        );
    }
}

/// A layer norm + softmax kernel gives the same bits on 1, 2 and 40 threads, whose row blocks
/// differ (up to 64 Ki elements each, but four blocks per thread where blocks of 16 Ki allow:
/// 16, 16 and 14 rows of 4096 here), streamed (8.6 M elements) and not.
#[test]
fn row_reductions_do_not_depend_on_the_thread_count() {
    for (rows, len) in [(2100usize, 4096usize), (300, 100)] {
        let x = rand_vec(rows * len, 21);
        let load = |slot_no: u32| {
            let mut e = ExprBuilder::new(&[rows, len]);
            let v = e.leaf(slot(slot_no, 0, vec![len as i64, 1]));
            e.finish(&[v])
        };
        let stage = |op, prologue| RowStage {
            op,
            len,
            prologue,
            weight: None,
            bias: None,
            outputs: vec![RowOut::Result(0)],
        };
        let k = RowReduce {
            rows,
            stages: vec![
                stage(ReduceOp::LayerNorm { eps: 1e-5 }, load(0)),
                stage(ReduceOp::Softmax, load(5)),
            ],
        };
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let mut out = vec![f32::NAN; rows * len];
            pool.install(|| run_row_reduce(&k, &[Src::F32(&x)], &mut [Dst::F32(&mut out)]))
                .unwrap();
            out
        };
        let one = run(1);
        assert!(one.iter().all(|v| v.is_finite()));
        for threads in [2, 40] {
            let got = run(threads);
            assert!(
                one.iter()
                    .zip(&got)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{rows}x{len} on {threads} threads"
            );
        }
    }
}

/// Layer norm's mean and rstd outputs: within 1e-6 of `f64` on ordinary rows; the op's
/// infinities and NaN for a row holding an infinity or a NaN (mean inf or NaN, rstd NaN); and
/// for a constant row of 3e37, whose `f32` lane sums overflow, the exact mean, `1/sqrt(eps)`
/// and the bias as the output.
#[test]
fn layer_norm_moments_of_special_rows() {
    let len = 1024;
    let rows = 5;
    let mut x = rand_vec(rows * len, 21);
    for v in &mut x[len..2 * len] {
        *v += 100.0;
    }
    x[2 * len..3 * len].fill(3e37);
    x[3 * len + 5] = f32::INFINITY;
    x[4 * len + 700] = f32::NAN;
    let w: Vec<f32> = rand_vec(len, 22).iter().map(|v| 1.0 + 0.1 * v).collect();
    let b = rand_vec(len, 23);
    let mut e = ExprBuilder::new(&[rows, len]);
    let xv = e.leaf(slot(0, 0, vec![len as i64, 1]));
    let prologue = e.finish(&[xv]);
    let mut e = ExprBuilder::new(&[len]);
    let wv = e.leaf(slot(1, 0, vec![1]));
    let weight = e.finish(&[wv]);
    let mut e = ExprBuilder::new(&[len]);
    let bv = e.leaf(slot(2, 0, vec![1]));
    let bias = e.finish(&[bv]);
    let k = RowReduce {
        rows,
        stages: vec![RowStage {
            op: ReduceOp::LayerNorm { eps: 1e-5 },
            len,
            prologue,
            weight: Some(weight),
            bias: Some(bias),
            outputs: vec![RowOut::Result(0), RowOut::Result(1), RowOut::Result(2)],
        }],
    };
    let (mut y, mut mean, mut rstd) = (vec![0f32; rows * len], vec![0f32; rows], vec![0f32; rows]);
    run_row_reduce(
        &k,
        &[Src::F32(&x), Src::F32(&w), Src::F32(&b)],
        &mut [Dst::F32(&mut y), Dst::F32(&mut mean), Dst::F32(&mut rstd)],
    )
    .unwrap();
    for r in 0..2 {
        let row = &x[r * len..(r + 1) * len];
        let m = row.iter().map(|&v| v as f64).sum::<f64>() / len as f64;
        let var = row.iter().map(|&v| (v as f64 - m).powi(2)).sum::<f64>() / len as f64;
        assert!(
            (mean[r] as f64 - m).abs() <= 1e-6 * var.sqrt(),
            "row {r}: mean {}",
            mean[r]
        );
        let want = 1.0 / (var + 1e-5).sqrt();
        assert!(
            (rstd[r] as f64 - want).abs() <= 1e-6 * want,
            "row {r}: rstd {}",
            rstd[r]
        );
    }
    assert_eq!(mean[2], 3e37);
    assert_eq!(rstd[2], (1.0 / 1e-5f64.sqrt()) as f32);
    assert_eq!(&y[2 * len..3 * len], &b[..]);
    assert_eq!(mean[3], f32::INFINITY);
    assert!(rstd[3].is_nan());
    assert!(mean[4].is_nan() && rstd[4].is_nan());
    assert!(y[3 * len..].iter().all(|v| v.is_nan()));
}

/// Row maxima and minima match a scalar fold, over rows long and short (lanes left over), with
/// `-inf` and `inf` present, and are NaN for a row holding a NaN anywhere (first, last or in
/// the leftover lanes).
#[test]
fn row_max_and_min_match_a_fold_and_propagate_nan() {
    for len in [1usize, 5, 16, 37, 1024] {
        let rows = 6;
        let mut x = rand_vec(rows * len, len as u64);
        x[0] = f32::NEG_INFINITY;
        x[len - 1] = f32::INFINITY;
        x[len] = f32::NAN;
        x[3 * len - 1] = f32::NAN;
        x[4 * len + len / 2] = f32::NAN;
        for op in [ReduceOp::Max, ReduceOp::Min] {
            let out = reduce_rows(&x, rows, len, op, 1);
            for r in 0..rows {
                let row = &x[r * len..(r + 1) * len];
                let want = if row.iter().any(|v| v.is_nan()) {
                    f32::NAN
                } else if op == ReduceOp::Max {
                    row.iter().copied().fold(f32::NEG_INFINITY, f32::max)
                } else {
                    row.iter().copied().fold(f32::INFINITY, f32::min)
                };
                assert!(
                    out[r] == want || (out[r].is_nan() && want.is_nan()),
                    "{op:?} len {len} row {r}: {} vs {want}",
                    out[r]
                );
            }
        }
    }
}

/// Only a row-major read of a slot from its start is a copy of it (a fused reshape, which the
/// executor drops when the product is written in place); a transposed or offset read, another
/// slot, or any arithmetic is not.
#[test]
fn only_a_plain_row_major_read_is_a_copy() {
    let copy = |l: Leaf| {
        let mut b = ExprBuilder::new(&[4, 6]);
        let v = b.leaf(l);
        b.finish(&[v])
    };
    assert!(copy(slot(2, 0, vec![6, 1])).is_copy_of(2));
    assert!(!copy(slot(2, 0, vec![6, 1])).is_copy_of(1));
    assert!(!copy(slot(2, 0, vec![1, 4])).is_copy_of(2));
    assert!(!copy(slot(2, 3, vec![6, 1])).is_copy_of(2));
    let mut b = ExprBuilder::new(&[4, 6]);
    let v = b.leaf(slot(2, 0, vec![6, 1]));
    let r = b.un(UnOp::Relu, v);
    assert!(!b.finish(&[r]).is_copy_of(2));
}

/// Outputs computed straight into their buffers: an output that a later instruction reads,
/// the same value returned twice, an output that is a plain read of an operand, and one that
/// is uniform over a block (a broadcast) all come out right, over several blocks and a short
/// last block.
#[test]
fn outputs_written_in_place_are_read_back_and_duplicated_correctly() {
    let n = 3 * fxhlo_runtime::fast::expr::BLOCK + 17;
    let x = rand_vec(n, 11);
    let c = rand_vec(1, 12);
    let mut b = ExprBuilder::new(&[n]);
    let xv = b.leaf(slot(0, 0, vec![1]));
    let cv = b.leaf(slot(1, 0, vec![0]));
    let p = b.bin(BinOp::Mul, xv, xv);
    let q = b.bin_c(BinOp::Add, p, 1.0);
    let e = b.finish(&[p, q, p, xv, cv]);
    let mut outs: Vec<Vec<f32>> = (0..5).map(|_| vec![f32::NAN; n]).collect();
    {
        let mut o: Vec<&mut [f32]> = outs.iter_mut().map(|v| &mut v[..]).collect();
        run_elementwise(&e, &[Src::F32(&x), Src::F32(&c)], &mut o);
    }
    for i in 0..n {
        let p = x[i] * x[i];
        assert_eq!(outs[0][i], p, "[{i}]");
        assert_eq!(outs[1][i], p + 1.0, "[{i}]");
        assert_eq!(outs[2][i], p, "[{i}]");
        assert_eq!(outs[3][i], x[i], "[{i}]");
        assert_eq!(outs[4][i], c[0], "[{i}]");
    }
}

/// Iteration spaces of `STREAM_ELEMS` elements or more stream (the next block's source runs
/// prefetched, outputs stored non-temporally): the results are still the per-element values,
/// for a computed output, a duplicate of it, a plain read of an operand and a broadcast one,
/// with one output buffer that starts off a 16-byte boundary; and for costly instructions, a
/// unary one and a fused one, which run in pieces with prefetches between them.
#[test]
fn streamed_outputs_match_per_element_values() {
    use fxhlo_runtime::fast::expr::STREAM_ELEMS;
    let cols = 1024usize;
    let rows = STREAM_ELEMS / cols + 1;
    let n = rows * cols;
    let x = rand_vec(n, 21);
    let w = rand_vec(cols, 22);
    let mut b = ExprBuilder::new(&[rows, cols]);
    let xv = b.leaf(slot(0, 0, vec![cols as i64, 1]));
    let wv = b.leaf(slot(1, 0, vec![0, 1]));
    let p = b.bin(BinOp::Mul, xv, wv);
    let y = b.bin_c(BinOp::Add, p, 1.0);
    let g = b.un(UnOp::GeluErf, xv);
    let s = b.un(UnOp::Sigmoid, xv);
    let sw = b.bin(BinOp::Mul, s, wv);
    let f = b.bin(BinOp::Add, sw, xv);
    let e = b.finish(&[y, xv, y, wv, g, f]);
    let mut outs: Vec<Vec<f32>> = (0..6).map(|_| vec![f32::NAN; n + 1]).collect();
    {
        // Output 2 starts one float past its buffer's start.
        let mut o: Vec<&mut [f32]> = outs
            .iter_mut()
            .enumerate()
            .map(|(k, v)| if k == 2 { &mut v[1..] } else { &mut v[..n] })
            .collect();
        run_elementwise(&e, &[Src::F32(&x), Src::F32(&w)], &mut o);
    }
    for i in 0..n {
        let want = x[i] * w[i % cols] + 1.0;
        assert_eq!(outs[0][i].to_bits(), want.to_bits(), "[{i}]");
        assert_eq!(outs[1][i].to_bits(), x[i].to_bits(), "[{i}]");
        assert_eq!(outs[2][i + 1].to_bits(), want.to_bits(), "[{i}]");
        assert_eq!(outs[3][i].to_bits(), w[i % cols].to_bits(), "[{i}]");
        assert_eq!(
            outs[4][i].to_bits(),
            math::gelu_erf(x[i]).to_bits(),
            "[{i}]"
        );
        let f = math::sigmoid(x[i]) * w[i % cols] + x[i];
        assert_eq!(outs[5][i].to_bits(), f.to_bits(), "[{i}]");
    }
}

/// A layer norm's weight and bias are read in place when they are an operand's contiguous run
/// (at any offset), and evaluated otherwise: both give the bits of the weights passed as they
/// are, so the offset is honoured and a strided read is not taken for a contiguous one.
#[test]
fn layer_norm_weights_in_place_or_evaluated_give_the_same_bits() {
    let (rows, len) = (6usize, 40usize);
    let x = rand_vec(rows * len, 31);
    let w: Vec<f32> = rand_vec(len, 32).iter().map(|v| 1.0 + 0.1 * v).collect();
    let b = rand_vec(len, 33);
    // `v` at offset 5 of a longer buffer, and `v` interleaved with junk (stride 2).
    let padded = |v: &[f32]| [vec![7.0; 5], v.to_vec(), vec![-7.0; 3]].concat();
    let strided = |v: &[f32]| v.iter().flat_map(|&a| [a, 9.0]).collect::<Vec<f32>>();
    let run = |wb: (&[f32], &[f32]), offset: i64, stride: i64| {
        let one = |slot_no: u32| {
            let mut e = ExprBuilder::new(&[len]);
            let v = e.leaf(slot(slot_no, offset, vec![stride]));
            e.finish(&[v])
        };
        let mut e = ExprBuilder::new(&[rows, len]);
        let xv = e.leaf(slot(0, 0, vec![len as i64, 1]));
        let k = RowReduce {
            rows,
            stages: vec![RowStage {
                op: ReduceOp::LayerNorm { eps: 1e-5 },
                len,
                prologue: e.finish(&[xv]),
                weight: Some(one(1)),
                bias: Some(one(2)),
                outputs: vec![RowOut::Result(0)],
            }],
        };
        let mut y = vec![0f32; rows * len];
        let srcs = [Src::F32(&x), Src::F32(wb.0), Src::F32(wb.1)];
        run_row_reduce(&k, &srcs, &mut [Dst::F32(&mut y)]).unwrap();
        y.iter().map(|v| v.to_bits()).collect::<Vec<u32>>()
    };
    let want = run((&w, &b), 0, 1);
    assert_eq!(
        run((&padded(&w), &padded(&b)), 5, 1),
        want,
        "in place at an offset"
    );
    assert_eq!(
        run((&strided(&w), &strided(&b)), 0, 2),
        want,
        "evaluated (strided)"
    );
    // The weights do change the result (the check above could not pass by ignoring them).
    let ones = vec![1.0; len];
    assert_ne!(run((&ones, &b), 0, 1), want);
}

/// An expression keeps its plans and its checked program between runs (see `Memo`): a second
/// run after `map_slots` swapped its operands reads them swapped, and the cache is neither
/// serialized nor part of equality.
#[test]
fn an_expression_runs_the_same_after_its_first_run_and_a_slot_remap() {
    let n = 3000;
    let (a, c) = (rand_vec(n, 41), rand_vec(n, 42));
    let mut e = ExprBuilder::new(&[n]);
    let av = e.leaf(slot(0, 0, vec![1]));
    let cv = e.leaf(slot(1, 0, vec![1]));
    let d = e.bin(BinOp::Sub, av, cv);
    let mut e = e.finish(&[d]);
    let fresh = e.clone();
    let mut out = vec![0f32; n];
    e.validate(&[Src::F32(&a), Src::F32(&c)]).unwrap();
    run_elementwise(&e, &[Src::F32(&a), Src::F32(&c)], &mut [&mut out]);
    assert!(out
        .iter()
        .zip(a.iter().zip(&c))
        .all(|(&o, (&x, &y))| o == x - y));
    // After a run, the expression still equals and serializes as a fresh one.
    assert_eq!(e, fresh);
    assert_eq!(
        serde_json::to_string(&e).unwrap(),
        serde_json::to_string(&fresh).unwrap()
    );
    e.map_slots(|s| 1 - s);
    run_elementwise(&e, &[Src::F32(&a), Src::F32(&c)], &mut [&mut out]);
    assert!(out
        .iter()
        .zip(a.iter().zip(&c))
        .all(|(&o, (&x, &y))| o == y - x));
}
