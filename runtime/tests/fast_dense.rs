//! The fast dense kernels (`fast::{gemm, conv, pool, gather}`) against the reference
//! interpreter and naive loops: odd sizes, strided and transposed operands, groups, padding,
//! and bitwise determinism across thread counts.

mod common;

use common::*;
use fxhlo_runtime::fast::conv::{conv2d, ConvSpec};
use fxhlo_runtime::fast::gather::{gather, GatherSpec};
use fxhlo_runtime::fast::gemm::{matmul, MatmulSpec, Operand};
use fxhlo_runtime::fast::pool::{pool2d, PoolKind, PoolSpec};
use std::sync::Mutex;

/// Deterministic values in [-1, 1).
fn rnd(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
}

fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

fn assert_close(got: &[f32], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            close(g as f64, w, tol),
            "{what}: element {i}: got {g}, want {w}"
        );
    }
}

/// The largest element index of a strided `batch x rows x cols` view, plus one.
fn extent(o: &Operand, batch: usize, rows: usize, cols: usize) -> usize {
    o.offset
        + (0..batch).map(|b| o.batch_offset(b)).max().unwrap_or(0)
        + (rows - 1) * o.row_stride
        + (cols - 1) * o.col_stride
        + 1
}

/// The spec's product by the definition, in f64.
fn naive_matmul(s: &MatmulSpec, a: &[f32], b: &[f32], bias: Option<&[f32]>) -> Vec<f64> {
    let mut c = vec![0.0; s.batch * s.m * s.n];
    for bi in 0..s.batch {
        for i in 0..s.m {
            for j in 0..s.n {
                let mut acc = 0.0f64;
                for l in 0..s.k {
                    let x = a[s.a.offset
                        + s.a.batch_offset(bi)
                        + i * s.a.row_stride
                        + l * s.a.col_stride];
                    let y = b[s.b.offset
                        + s.b.batch_offset(bi)
                        + l * s.b.row_stride
                        + j * s.b.col_stride];
                    acc += x as f64 * y as f64;
                }
                let mut v = s.alpha as f64 * acc;
                if let (Some(o), Some(bv)) = (&s.bias, bias) {
                    if s.beta != 0.0 {
                        v += s.beta as f64
                            * bv[o.offset
                                + o.batch_offset(bi)
                                + i * o.row_stride
                                + j * o.col_stride] as f64;
                    }
                }
                c[(bi * s.m + i) * s.n + j] = v;
            }
        }
    }
    c
}

/// Runs `spec` on random operands of just the needed extent and checks it against the naive
/// product; also checks that the epilogue saw every row exactly once, in complete blocks.
fn check_matmul(spec: &MatmulSpec, what: &str) {
    let a = rnd(extent(&spec.a, spec.batch, spec.m, spec.k), 1);
    let b = rnd(extent(&spec.b, spec.batch, spec.k, spec.n), 2);
    let bias = spec
        .bias
        .map(|o| rnd(extent(&o, spec.batch, spec.m, spec.n), 3));
    spec.validate(
        a.len(),
        b.len(),
        bias.as_ref().map(|v| v.len()),
        spec.batch * spec.m * spec.n,
    )
    .unwrap();
    let want = naive_matmul(spec, &a, &b, bias.as_deref());
    let mut c = vec![f32::NAN; spec.batch * spec.m * spec.n];
    let seen = Mutex::new(vec![0u32; spec.batch * spec.m * spec.n]);
    let n = spec.n;
    matmul(spec, &a, &b, bias.as_deref(), &mut c, &|t| {
        assert_eq!(t.n, n);
        for r in t.rows.clone() {
            let c0 = t.cols.start;
            let row = t.row(r);
            let mut s = seen.lock().unwrap();
            // The tile is complete when the epilogue sees it.
            for (j, v) in row.iter_mut().enumerate() {
                s[r * n + c0 + j] += 1;
                let w = want[r * n + c0 + j];
                assert!(
                    close(*v as f64, w, 1e-4),
                    "{what}: epilogue saw {v}, want {w}"
                );
                *v *= 2.0;
            }
        }
    })
    .unwrap();
    if spec.m * spec.n > 0 {
        assert!(
            seen.into_inner().unwrap().iter().all(|&x| x == 1),
            "{what}: the epilogue saw every element once"
        );
    }
    let want2: Vec<f64> = want.iter().map(|v| v * 2.0).collect();
    assert_close(&c, &want2, 1e-4, what);
}

#[test]
fn matmul_odd_sizes() {
    for &m in &[1usize, 7, 16, 33, 129] {
        for &n in &[1usize, 7, 129] {
            for &k in &[1usize, 7, 129] {
                check_matmul(
                    &MatmulSpec::contiguous(1, m, n, k),
                    &format!("{m}x{k} @ {k}x{n}"),
                );
            }
        }
    }
    check_matmul(
        &MatmulSpec::contiguous(3, 300, 65, 257),
        "batched 300x257x65",
    );
    // Large enough to run as one GEMM call per batch entry, then per-block epilogues.
    check_matmul(&MatmulSpec::contiguous(2, 600, 520, 9), "whole 600x9x520");
}

/// A constant right operand packed ahead of time (the executor's path for linear layers)
/// gives the bits of the unpacked product, including products whose column tiles share one
/// packing of `A` (wide ones, and narrow ones of few rows split by columns), a transposed
/// `A`, a shared `B` over a batch and several thread counts.
#[test]
fn matmul_with_prepacked_weights_gives_the_same_bits() {
    use fxhlo_runtime::fast::gemm::{matmul_prepacked, prepack_b};
    let mut cases = vec![
        (
            MatmulSpec::contiguous(1, 70, 1100, 300),
            "70x300 @ 300x1100",
        ),
        (MatmulSpec::contiguous(1, 256, 2048, 64), "256x64 @ 64x2048"),
        (MatmulSpec::contiguous(1, 9, 40, 5), "small"),
        // Several blocks of rows read each column block of the weight (its micro-panels
        // then stream past each micro-panel of `A`), the last block and panel partial.
        (
            MatmulSpec::contiguous(1, 600, 300, 200),
            "600x200 @ 200x300",
        ),
        // Few rows and at most 512 columns, whose tasks split the columns: `A` packed once
        // for all of them (a transformer's down projection, 197 tokens).
        (
            MatmulSpec::contiguous(1, 197, 256, 1024),
            "197x1024 @ 1024x256",
        ),
    ];
    let mut t = MatmulSpec::contiguous(1, 37, 700, 129);
    t.a = Operand {
        offset: 0,
        batch_stride: 0,
        row_stride: 1,
        col_stride: 37,
        ..Operand::default()
    };
    cases.push((t, "A^T, 700 columns"));
    let mut shared = MatmulSpec::contiguous(3, 20, 600, 33);
    shared.b.batch_stride = 0;
    cases.push((shared, "batch of 3 sharing B"));
    for (spec, what) in cases {
        let a = rnd(extent(&spec.a, spec.batch, spec.m, spec.k), 4);
        let b = rnd(extent(&spec.b, spec.batch, spec.k, spec.n), 5);
        let len = spec.batch * spec.m * spec.n;
        let mut want = vec![0f32; len];
        matmul(&spec, &a, &b, None, &mut want, &|_| {}).unwrap();
        assert_close(&want, &naive_matmul(&spec, &a, &b, None), 1e-4, what);
        let pk = prepack_b(&spec, &b).expect("a shared right operand");
        for threads in [1, 2, 3] {
            let mut got = vec![f32::NAN; len];
            pool(threads)
                .install(|| {
                    matmul_prepacked(&spec, &a, &b, Some(&pk), None, &mut got, false, &|_| {})
                })
                .unwrap();
            assert!(
                got.iter()
                    .zip(&want)
                    .all(|(g, w)| g.to_bits() == w.to_bits()),
                "{what}, {threads} threads: prepacked bits differ"
            );
        }
    }
}

#[test]
fn scale_column_bias_and_relu_in_the_gemm_give_the_bits_of_applying_them_after() {
    use fxhlo_runtime::fast::gemm::{matmul_prepacked, prepack_b};
    // Every path of the GEMM: serial (tiny), one shared product (large), products per batch
    // entry (B not shared), B packed ahead (two panels of k), and k = 0.
    let mut per_entry = MatmulSpec::contiguous(4, 40, 50, 70);
    per_entry.alpha = 0.125;
    let mut cases = vec![
        (MatmulSpec::contiguous(1, 5, 7, 3), false, "serial"),
        (MatmulSpec::contiguous(1, 256, 520, 300), false, "shared"),
        (per_entry, false, "per batch entry"),
        (
            MatmulSpec::contiguous(1, 64, 100, 600),
            true,
            "prepacked, two panels of k",
        ),
        (MatmulSpec::contiguous(1, 9, 33, 0), false, "k = 0"),
    ];
    let mut shared_b = MatmulSpec::contiguous(3, 20, 70, 33);
    shared_b.b.batch_stride = 0;
    cases.push((shared_b, true, "batch sharing a prepacked B"));
    // A bias per column goes to the GEMM with the ReLU; a bias per element does not, and then
    // neither may the ReLU, which comes after it.
    for ((mut spec, prepack, what), per_element) in cases
        .into_iter()
        .flat_map(|c| [(c.clone(), false), (c, true)])
    {
        let (m, n) = (spec.m, spec.n);
        let a = rnd(extent(&spec.a, spec.batch, m, spec.k.max(1)), 7);
        let b = rnd(extent(&spec.b, spec.batch, spec.k.max(1), n), 8);
        let bias = rnd(m * n + 3, 9);
        let bias_at = |i: usize| 3 + if per_element { i % (m * n) } else { i % n };
        let len = spec.batch * m * n;
        // The plain product, then the scale, bias and ReLU applied as separate passes.
        let alpha = if spec.alpha == 1.0 { 0.5 } else { spec.alpha };
        let beta = 0.75f32;
        let mut want = vec![0f32; len];
        spec.alpha = 1.0;
        matmul(&spec, &a, &b, None, &mut want, &|_| {}).unwrap();
        for (i, v) in want.iter_mut().enumerate() {
            *v *= alpha;
            *v += beta * bias[bias_at(i)];
            *v = if v.is_nan() || *v > 0.0 { *v } else { 0.0 };
        }
        spec.alpha = alpha;
        spec.beta = beta;
        spec.bias = Some(Operand {
            offset: 3,
            batch_stride: 0,
            row_stride: if per_element { n } else { 0 },
            col_stride: 1,
            ..Operand::default()
        });
        let pk = if prepack { prepack_b(&spec, &b) } else { None };
        assert_eq!(pk.is_some(), prepack, "{what}");
        for threads in [1, 2] {
            let mut got = vec![f32::NAN; len];
            pool(threads)
                .install(|| {
                    matmul_prepacked(
                        &spec,
                        &a,
                        &b,
                        pk.as_ref(),
                        Some(&bias),
                        &mut got,
                        true,
                        &|_| {},
                    )
                })
                .unwrap();
            for (j, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(
                    g.to_bits(),
                    w.to_bits(),
                    "{what} (bias per element: {per_element}), {threads} threads, element {j}"
                );
            }
        }
    }
}

#[test]
fn matmul_zero_sizes() {
    // k = 0: all zeros (then bias); m or n = 0: nothing to do.
    let mut s = MatmulSpec::contiguous(2, 3, 4, 0);
    s.bias = Some(Operand {
        offset: 0,
        batch_stride: 0,
        row_stride: 0,
        col_stride: 1,
        ..Operand::default()
    });
    let bias = [1.0f32, 2.0, 3.0, 4.0];
    let mut c = vec![f32::NAN; 24];
    matmul(&s, &[], &[], Some(&bias), &mut c, &|_| {}).unwrap();
    assert_eq!(&c[..4], &bias);
    assert_eq!(&c[20..], &bias);
    let s = MatmulSpec::contiguous(2, 0, 4, 5);
    let mut c: Vec<f32> = vec![];
    matmul(&s, &[], &rnd(40, 1), None, &mut c, &|_| panic!("no rows")).unwrap();
}

#[test]
fn matmul_strided_and_transposed() {
    // A^T: A stored as [k, m].
    let (m, n, k) = (37, 45, 129);
    let mut s = MatmulSpec::contiguous(1, m, n, k);
    s.a = Operand {
        offset: 0,
        batch_stride: 0,
        row_stride: 1,
        col_stride: m,
        ..Operand::default()
    };
    check_matmul(&s, "A^T @ B");
    // B^T (a linear layer's weight [n, k]).
    let mut s = MatmulSpec::contiguous(1, m, n, k);
    s.b = Operand {
        offset: 0,
        batch_stride: 0,
        row_stride: 1,
        col_stride: k,
        ..Operand::default()
    };
    check_matmul(&s, "A @ B^T");
    // Both transposed, batched, with offsets and padded rows.
    let mut s = MatmulSpec::contiguous(4, m, n, k);
    s.a = Operand {
        offset: 5,
        batch_stride: (m + 3) * k,
        row_stride: 1,
        col_stride: m + 3,
        ..Operand::default()
    };
    s.b = Operand {
        offset: 11,
        batch_stride: n * (k + 2),
        row_stride: 1,
        col_stride: k + 2,
        ..Operand::default()
    };
    check_matmul(&s, "batched A^T @ B^T with offsets");
    // Broadcast rhs over the batch (batch stride 0), padded lhs rows.
    let mut s = MatmulSpec::contiguous(3, m, n, k);
    s.a = Operand {
        offset: 0,
        batch_stride: m * (k + 9),
        row_stride: k + 9,
        col_stride: 1,
        ..Operand::default()
    };
    s.b.batch_stride = 0;
    check_matmul(&s, "broadcast rhs");
    // A shared rhs under a lhs whose batch is its inner dimension (a sequence-first view of a
    // batch-first activation): one product of batch * m rows addressed in two levels, with
    // a row bias.
    let mut s = MatmulSpec::contiguous(5, m, n, k);
    s.a = Operand {
        offset: 0,
        batch_stride: k,
        row_stride: 5 * k,
        col_stride: 1,
        ..Operand::default()
    };
    s.b.batch_stride = 0;
    s.bias = Some(Operand {
        offset: 0,
        batch_stride: 0,
        row_stride: 0,
        col_stride: 1,
        ..Operand::default()
    });
    check_matmul(&s, "sequence-first lhs, shared rhs");
    // Attention over a [seq, batch, 3 * heads * dim] projection: the batch index is
    // batch * heads, two strides in the buffer (groups of `heads`); q and k^T read in place.
    let (seq, nb, heads, dim) = (19, 2, 3, 8);
    let row = 3 * heads * dim;
    let mut s = MatmulSpec::contiguous(nb * heads, seq, seq, dim);
    s.a = Operand {
        offset: 0,
        batch_stride: dim,
        row_stride: nb * row,
        col_stride: 1,
        group: heads,
        group_stride: row,
    };
    s.b = Operand {
        offset: heads * dim,
        batch_stride: dim,
        row_stride: 1,
        col_stride: nb * row,
        group: heads,
        group_stride: row,
    };
    check_matmul(&s, "grouped batch: q @ k^T of a packed projection");
    s.bias = Some(Operand {
        offset: 1,
        batch_stride: 2,
        row_stride: 0,
        col_stride: 1,
        group: 2,
        group_stride: 7,
    });
    check_matmul(&s, "grouped batch with a grouped bias");
    // Element-strided columns (every other element).
    let mut s = MatmulSpec::contiguous(1, 9, 17, 33);
    s.b = Operand {
        offset: 1,
        batch_stride: 0,
        row_stride: 2 * 17,
        col_stride: 2,
        ..Operand::default()
    };
    check_matmul(&s, "column stride 2");
}

#[test]
fn matmul_bias_alpha_beta() {
    let (m, n, k) = (70, 33, 20);
    for (alpha, beta) in [(1.0f32, 1.0f32), (0.5, 2.0), (-1.5, 0.25)] {
        // Row-vector bias (nn.Linear).
        let mut s = MatmulSpec::contiguous(1, m, n, k);
        s.alpha = alpha;
        s.beta = beta;
        s.bias = Some(Operand {
            offset: 0,
            batch_stride: 0,
            row_stride: 0,
            col_stride: 1,
            ..Operand::default()
        });
        check_matmul(&s, "row bias");
        // Full matrix bias, and a column-vector bias.
        s.bias = Some(Operand::contiguous(m, n));
        check_matmul(&s, "full bias");
        s.bias = Some(Operand {
            offset: 0,
            batch_stride: 0,
            row_stride: 1,
            col_stride: 0,
            ..Operand::default()
        });
        check_matmul(&s, "column bias");
    }
    // beta = 0: the bias is not read, its NaNs do not propagate.
    let mut s = MatmulSpec::contiguous(1, 5, 6, 7);
    s.beta = 0.0;
    s.bias = Some(Operand {
        offset: 0,
        batch_stride: 0,
        row_stride: 0,
        col_stride: 1,
        ..Operand::default()
    });
    let (a, b) = (rnd(35, 1), rnd(42, 2));
    let mut c = vec![0.0; 30];
    matmul(&s, &a, &b, Some(&[f32::NAN; 6]), &mut c, &|_| {}).unwrap();
    assert!(c.iter().all(|v| v.is_finite()));
}

#[test]
fn matmul_matches_interpreter() {
    let (a, b, bias) = (rnd(7 * 129, 1), rnd(129 * 33, 2), rnd(33, 3));
    let want = call1(
        "aten.mm.default",
        vec![
            ("self", f32t(&[7, 129], &f64s(&a)).into()),
            ("mat2", f32t(&[129, 33], &f64s(&b)).into()),
        ],
    );
    let mut c = vec![0.0; 7 * 33];
    matmul(
        &MatmulSpec::contiguous(1, 7, 33, 129),
        &a,
        &b,
        None,
        &mut c,
        &|_| {},
    )
    .unwrap();
    assert_close(&c, &want.f64s(), 1e-5, "mm");

    let want = call1(
        "aten.addmm.default",
        vec![
            ("self", f32t(&[33], &f64s(&bias)).into()),
            ("mat1", f32t(&[7, 129], &f64s(&a)).into()),
            ("mat2", f32t(&[129, 33], &f64s(&b)).into()),
            ("beta", float(0.5)),
            ("alpha", float(2.0)),
        ],
    );
    let mut s = MatmulSpec::contiguous(1, 7, 33, 129);
    s.bias = Some(Operand {
        offset: 0,
        batch_stride: 0,
        row_stride: 0,
        col_stride: 1,
        ..Operand::default()
    });
    s.alpha = 2.0;
    s.beta = 0.5;
    matmul(&s, &a, &b, Some(&bias), &mut c, &|_| {}).unwrap();
    assert_close(&c, &want.f64s(), 1e-5, "addmm");

    let (a, b) = (rnd(3 * 17 * 9, 4), rnd(3 * 9 * 129, 5));
    let want = call1(
        "aten.bmm.default",
        vec![
            ("self", f32t(&[3, 17, 9], &f64s(&a)).into()),
            ("mat2", f32t(&[3, 9, 129], &f64s(&b)).into()),
        ],
    );
    let mut c = vec![0.0; 3 * 17 * 129];
    matmul(
        &MatmulSpec::contiguous(3, 17, 129, 9),
        &a,
        &b,
        None,
        &mut c,
        &|_| {},
    )
    .unwrap();
    assert_close(&c, &want.f64s(), 1e-5, "bmm");
}

#[test]
fn matmul_validate_errors() {
    let s = MatmulSpec::contiguous(2, 3, 4, 5);
    assert!(s.validate(30, 40, None, 24).is_ok());
    assert!(s.validate(29, 40, None, 24).unwrap_err().contains("lhs"));
    assert!(s.validate(30, 39, None, 24).unwrap_err().contains("rhs"));
    assert!(s.validate(30, 40, None, 25).is_err());
    assert!(s.validate(30, 40, Some(12), 24).is_err());
    let mut s2 = s.clone();
    s2.bias = Some(Operand::contiguous(3, 4));
    assert!(s2.validate(30, 40, None, 24).is_err());
    assert!(s2
        .validate(30, 40, Some(12), 24)
        .unwrap_err()
        .contains("bias"));
    assert!(s2.validate(30, 40, Some(24), 24).is_ok());
    let mut s3 = s.clone();
    s3.b.batch_stride = usize::MAX / 3;
    assert!(s3.validate(30, 40, None, 24).is_err());
    let mut s4 = s.clone();
    s4.m = usize::MAX;
    assert!(s4.validate(30, 40, None, 24).is_err());
}

#[test]
fn matmul_bitwise_same_on_1_and_2_threads() {
    for spec in [
        MatmulSpec::contiguous(1, 512, 384, 1000),
        MatmulSpec::contiguous(1, 64, 2048, 512),
        MatmulSpec::contiguous(16, 129, 65, 300),
        MatmulSpec::contiguous(1, 3, 3000, 700),
        MatmulSpec::contiguous(1, 700, 600, 300),
    ] {
        let a = rnd(spec.batch * spec.m * spec.k, 1);
        let b = rnd(spec.batch * spec.k * spec.n, 2);
        let run = |threads: usize| {
            let mut c = vec![0.0f32; spec.batch * spec.m * spec.n];
            pool(threads)
                .install(|| matmul(&spec, &a, &b, None, &mut c, &|_| {}))
                .unwrap();
            c
        };
        let (c1, c2) = (run(1), run(2));
        assert!(
            c1.iter().zip(&c2).all(|(x, y)| x.to_bits() == y.to_bits()),
            "{spec:?}: results differ between 1 and 2 threads"
        );
    }
}

// ---------------------------------------------------------------- convolution

/// Runs `spec` and the interpreter's `aten.convolution` on the same random data.
fn check_conv(spec: &ConvSpec, with_bias: bool, what: &str) {
    let x = rnd(spec.input_len(), 11);
    let w = rnd(spec.weight_len(), 12);
    let b = rnd(spec.cout, 13);
    let cin_g = spec.cin / spec.groups;
    let xs = [spec.n, spec.cin, spec.h, spec.w];
    let ws = [spec.cout, cin_g, spec.kh, spec.kw];
    let i = |v: [usize; 2]| ints(&[v[0] as i64, v[1] as i64]);
    let want = call1(
        "aten.convolution.default",
        vec![
            ("input", f32t(&xs, &f64s(&x)).into()),
            ("weight", f32t(&ws, &f64s(&w)).into()),
            (
                "bias",
                if with_bias {
                    f32t(&[spec.cout], &f64s(&b)).into()
                } else {
                    none()
                },
            ),
            ("stride", i(spec.stride)),
            ("padding", i(spec.padding)),
            ("dilation", i(spec.dilation)),
            ("transposed", bool_(false)),
            ("output_padding", ints(&[0, 0])),
            ("groups", int(spec.groups as i64)),
        ],
    );
    assert_eq!(
        want.shape,
        [spec.n, spec.cout, spec.oh, spec.ow],
        "{what}: shape"
    );
    let mut out = vec![f32::NAN; spec.output_len()];
    let seen = Mutex::new(vec![0u32; spec.output_len()]);
    let wv = want.f64s();
    conv2d(spec, &x, &w, with_bias.then_some(&b[..]), &mut out, &|t| {
        let c0 = t.cols.start;
        let n = t.n;
        for r in t.rows.clone() {
            let row = t.row(r);
            let mut s = seen.lock().unwrap();
            for (j, v) in row.iter_mut().enumerate() {
                s[r * n + c0 + j] += 1;
                let w = wv[r * n + c0 + j];
                assert!(
                    close(*v as f64, w, 1e-4),
                    "{what}: epilogue saw {v}, want {w}"
                );
                *v = -*v;
            }
        }
    })
    .unwrap();
    assert!(
        seen.into_inner().unwrap().iter().all(|&c| c == 1),
        "{what}: the epilogue saw every element once"
    );
    let neg: Vec<f64> = wv.iter().map(|v| -v).collect();
    assert_close(&out, &neg, 1e-4, what);
}

fn conv(
    x: [usize; 4],
    cout: usize,
    k: [usize; 2],
    s: usize,
    p: usize,
    d: usize,
    g: usize,
) -> ConvSpec {
    ConvSpec::new(x, [cout, x[1] / g, k[0], k[1]], [s, s], [p, p], [d, d], g).unwrap()
}

#[test]
fn conv_resnet_shapes() {
    check_conv(
        &conv([2, 3, 29, 31], 8, [7, 7], 2, 3, 1, 1),
        true,
        "7x7 s2 stem",
    );
    check_conv(
        &conv([2, 16, 14, 14], 16, [3, 3], 1, 1, 1, 1),
        true,
        "3x3 s1",
    );
    check_conv(
        &conv([2, 16, 15, 15], 32, [3, 3], 2, 1, 1, 1),
        false,
        "3x3 s2",
    );
    check_conv(
        &conv([2, 32, 9, 9], 16, [1, 1], 1, 0, 1, 1),
        true,
        "1x1 pointwise",
    );
    check_conv(
        &conv([2, 32, 9, 9], 16, [1, 1], 2, 0, 1, 1),
        true,
        "1x1 s2 downsample",
    );
    // More output positions than one column tile.
    check_conv(
        &conv([1, 8, 70, 75], 5, [3, 3], 1, 1, 1, 1),
        true,
        "many tiles",
    );
    // One image, one tile: the GEMM itself runs in parallel.
    check_conv(
        &conv([1, 64, 7, 7], 32, [3, 3], 1, 1, 1, 1),
        true,
        "one tile, inner-parallel",
    );
}

/// Stride-1 and stride-2 convolutions whose output rows are whole 16-position panels: on AVX2
/// CPUs they run as an implicit GEMM over a zero-padded input, split into phase planes for
/// stride 2 (4- and 6-row tiles, several `k` blocks, dilation, groups, a partial last tile,
/// several bands, kernels of even and odd size, a 7x7 stride-2 stem, and a 1x1 kernel or a
/// dilation of 2 that read one phase), elsewhere through im2col.
#[test]
fn conv_implicit_gemm_shapes() {
    for (x, cout, k, s, p, d, g) in [
        ([2, 8, 16, 16], 32, [3, 3], 1, 1, 1, 1),
        ([1, 5, 7, 16], 6, [3, 3], 1, 1, 1, 1),
        ([1, 64, 9, 16], 40, [3, 3], 1, 1, 1, 1),
        ([1, 6, 20, 32], 10, [5, 5], 1, 2, 1, 1),
        ([1, 4, 21, 32], 8, [3, 3], 1, 2, 2, 1),
        ([2, 8, 12, 16], 12, [3, 3], 1, 1, 1, 2),
        ([1, 16, 41, 48], 32, [3, 3], 1, 1, 1, 1),
        ([1, 3, 64, 64], 16, [7, 7], 2, 3, 1, 1),
        ([2, 4, 17, 32], 8, [3, 3], 2, 1, 1, 1),
        ([1, 5, 31, 63], 6, [5, 5], 2, 2, 1, 1),
        ([1, 4, 20, 64], 8, [3, 3], 2, 2, 2, 1),
        ([2, 8, 12, 32], 12, [3, 3], 2, 1, 1, 2),
        ([1, 6, 32, 32], 8, [4, 4], 2, 1, 1, 1),
        ([1, 16, 130, 64], 32, [3, 3], 2, 1, 1, 1),
        ([1, 8, 32, 32], 16, [1, 1], 2, 0, 1, 1),
    ] {
        let spec = conv(x, cout, k, s, p, d, g);
        assert_eq!(spec.ow % 16, 0, "{spec:?}");
        check_conv(
            &spec,
            true,
            &format!("implicit {x:?} cout {cout} k{k:?} s{s} p{p} d{d} g{g}"),
        );
    }
}

/// 3x3 stride-1 convolutions that run as Winograd F(2x2, 3x3) on AVX-512 CPUs (elsewhere, or
/// with `FXHLO_NO_AVX512`, directly): odd output sizes (a last tile row of one output row, a
/// last tile of one column), padding 0 to 2, channel counts that fill no micro-panel, several
/// jobs per image with a short last one, and rows of tiles padded to whole micro-panels.
#[test]
#[cfg(target_arch = "x86_64")]
fn conv_winograd_shapes() {
    use fxhlo_runtime::fast::winograd;
    for (x, cout, p) in [
        ([2, 8, 16, 32], 8, 1),
        ([1, 5, 9, 25], 7, 1),
        ([1, 6, 13, 27], 4, 0),
        ([1, 4, 12, 30], 9, 2),
        ([1, 8, 70, 32], 8, 1),
        ([1, 33, 10, 56], 20, 1),
        ([2, 16, 7, 128], 16, 1),
    ] {
        let spec = conv(x, cout, [3, 3], 1, p, 1, 1);
        let avx512 = fxhlo_runtime::fast::simd::has_avx512();
        assert_eq!(winograd::applies(&spec), avx512, "{spec:?}");
        check_conv(&spec, true, &format!("winograd {x:?} cout {cout} p{p}"));
        check_conv(
            &spec,
            false,
            &format!("winograd {x:?} cout {cout} p{p}, no bias"),
        );
    }
    // Forty more shapes drawn at random (fixed seed) among those Winograd takes.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut draw = |lo: usize, hi: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        lo + (seed % (hi - lo + 1) as u64) as usize
    };
    let mut taken = 0;
    for _ in 0..40 {
        let (n, cin, cout, p) = (draw(1, 2), draw(4, 19), draw(4, 19), draw(0, 2));
        let (h, w) = (draw(2, 30), draw(24, 72));
        let Ok(spec) = ConvSpec::new([n, cin, h, w], [cout, cin, 3, 3], [1, 1], [p, p], [1, 1], 1)
        else {
            continue;
        };
        taken += usize::from(winograd::applies(&spec));
        check_conv(&spec, true, &format!("winograd random {spec:?}"));
    }
    if fxhlo_runtime::fast::simd::has_avx512() {
        assert!(
            taken >= 20,
            "only {taken} of the random shapes ran as Winograd"
        );
    }
    // Not for these: 5x5, stride 2, dilation 2, groups, too narrow an output.
    for spec in [
        conv([1, 8, 16, 32], 8, [5, 5], 1, 2, 1, 1),
        conv([1, 8, 32, 64], 8, [3, 3], 2, 1, 1, 1),
        conv([1, 8, 16, 32], 8, [3, 3], 1, 2, 2, 1),
        conv([1, 8, 16, 32], 8, [3, 3], 1, 1, 1, 2),
        conv([1, 8, 16, 16], 8, [3, 3], 1, 1, 1, 1),
    ] {
        assert!(!winograd::applies(&spec), "{spec:?}");
    }
}

/// A ReLU applied by the convolution itself (fused into the implicit GEMM's store, or after
/// the bias elsewhere) gives the bits of the convolution followed by `max_nan(x, 0)`, NaN
/// included, on every path: implicit GEMM, im2col, pointwise, grouped, depthwise.
#[test]
fn conv_fused_relu_is_conv_then_relu() {
    use fxhlo_runtime::fast::conv::{conv2d_prepacked, prepack_weights, Post};
    use fxhlo_runtime::fast::math::max_nan;
    for (x, cout, k, s, p, g, bias) in [
        ([2, 8, 16, 16], 32, [3, 3], 1, 1, 1, true),
        ([1, 16, 9, 32], 12, [3, 3], 1, 1, 1, false),
        ([1, 6, 11, 13], 5, [3, 3], 2, 1, 1, true),
        ([1, 16, 7, 7], 8, [1, 1], 1, 0, 1, true),
        ([2, 8, 12, 16], 12, [3, 3], 1, 1, 2, true),
        ([1, 8, 10, 10], 8, [3, 3], 1, 1, 8, true),
        // Winograd (on AVX-512 CPUs).
        ([1, 8, 9, 32], 12, [3, 3], 1, 1, 1, true),
        // Implicit GEMM of stride 2.
        ([1, 3, 20, 32], 16, [7, 7], 2, 3, 1, true),
    ] {
        let spec = conv(x, cout, k, s, p, 1, g);
        let mut xv = rnd(spec.input_len(), 21);
        xv[5] = f32::NAN;
        let wv = rnd(spec.weight_len(), 22);
        let bv = rnd(spec.cout, 23);
        let b = bias.then_some(&bv[..]);
        let mut want = vec![0f32; spec.output_len()];
        conv2d(&spec, &xv, &wv, b, &mut want, &|_| {}).unwrap();
        for v in want.iter_mut() {
            *v = max_nan(*v, 0.0);
        }
        let pk = prepack_weights(&spec, &wv);
        let mut got = vec![f32::INFINITY; spec.output_len()];
        let post = Post {
            bias: b,
            relu: true,
        };
        conv2d_prepacked(&spec, &xv, &wv, pk.as_ref(), post, &mut got, &|_| {}).unwrap();
        let what = format!("{x:?} cout {cout} k{k:?} s{s} g{g} bias {bias}");
        assert!(
            want.iter().any(|v| v.is_nan()),
            "{what}: a NaN reaches the output"
        );
        assert!(want.contains(&0.0), "{what}: some outputs are clamped");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                "{what}: element {i}: {g} vs {w}"
            );
        }
    }
}

#[test]
fn conv_odd_geometry() {
    for (x, cout, k, s, p, d, g) in [
        ([1, 1, 1, 1], 1, [1, 1], 1, 0, 1, 1),
        ([1, 7, 7, 7], 3, [3, 3], 1, 0, 1, 1),
        ([3, 5, 13, 6], 7, [2, 3], 1, 1, 1, 1),
        ([1, 4, 17, 19], 6, [3, 3], 3, 1, 2, 2),
        ([2, 6, 12, 12], 9, [3, 3], 1, 2, 2, 3),
        ([1, 3, 10, 9], 2, [5, 5], 2, 2, 1, 1),
        ([1, 129, 5, 5], 7, [3, 3], 1, 1, 1, 1),
        ([1, 2, 3, 40], 4, [1, 7], 1, 3, 1, 1),
    ] {
        check_conv(
            &conv(x, cout, k, s, p, d, g),
            true,
            &format!("{x:?} k{k:?} s{s} p{p} d{d} g{g}"),
        );
    }
    // Asymmetric stride/padding/dilation.
    let s = ConvSpec::new([1, 4, 11, 13], [6, 4, 3, 2], [2, 1], [1, 0], [1, 2], 1).unwrap();
    check_conv(&s, true, "asymmetric");
}

#[test]
fn conv_depthwise() {
    check_conv(
        &conv([2, 8, 14, 14], 8, [3, 3], 1, 1, 1, 8),
        true,
        "depthwise 3x3",
    );
    check_conv(
        &conv([2, 8, 15, 15], 8, [3, 3], 2, 1, 1, 8),
        true,
        "depthwise 3x3 s2",
    );
    check_conv(
        &conv([1, 4, 9, 9], 4, [5, 5], 1, 4, 2, 4),
        false,
        "depthwise 5x5 d2",
    );
    check_conv(
        &conv([1, 4, 9, 9], 12, [3, 3], 1, 1, 1, 4),
        true,
        "depthwise multiplier 3",
    );
    check_conv(
        &conv([1, 1, 6, 5], 3, [3, 3], 1, 1, 1, 1),
        true,
        "one input channel",
    );
}

/// The depthwise kernel's edges: odd planes, every stride with padding and dilation, kernels
/// wider than the input, one output, channels over several jobs (small planes) and planes
/// split over the pool (large ones), multipliers, asymmetric geometry, with and without bias.
#[test]
fn conv_depthwise_edge_shapes() {
    for (x, cout, k, s, p, d) in [
        ([1, 3, 1, 1], 3, [1, 1], 1, 0, 1),
        ([1, 3, 1, 1], 3, [3, 3], 1, 1, 1),
        ([2, 5, 7, 9], 5, [3, 3], 1, 0, 1),
        ([1, 5, 7, 9], 5, [3, 3], 2, 1, 1),
        ([1, 5, 13, 11], 10, [5, 5], 2, 2, 1),
        ([1, 4, 10, 10], 4, [3, 3], 3, 1, 1),
        ([1, 4, 12, 17], 4, [3, 3], 2, 2, 2),
        ([1, 4, 9, 9], 4, [7, 7], 1, 3, 1),
        ([1, 2, 3, 4], 2, [5, 5], 1, 2, 1),
        ([1, 6, 4, 3], 6, [3, 3], 1, 3, 2),
        ([1, 200, 7, 7], 200, [5, 5], 1, 2, 1),
        ([1, 96, 14, 14], 96, [3, 3], 2, 1, 1),
        ([1, 8, 113, 97], 8, [3, 3], 2, 1, 1),
        ([2, 3, 64, 70], 6, [3, 3], 1, 1, 1),
    ] {
        let g = x[1];
        for bias in [true, false] {
            check_conv(
                &conv(x, cout, k, s, p, d, g),
                bias,
                &format!("depthwise {x:?} cout {cout} k{k:?} s{s} p{p} d{d} bias {bias}"),
            );
        }
    }
    // Asymmetric stride, padding, dilation and kernel.
    let s = ConvSpec::new([1, 3, 11, 14], [3, 1, 3, 2], [2, 1], [1, 0], [1, 2], 3).unwrap();
    check_conv(&s, true, "depthwise asymmetric");
    let s = ConvSpec::new([1, 4, 9, 8], [4, 1, 1, 5], [1, 3], [0, 2], [1, 1], 4).unwrap();
    check_conv(&s, false, "depthwise 1x5 stride 1x3");
}

#[test]
fn conv_validate_errors() {
    assert!(ConvSpec::new([1, 4, 5, 5], [4, 3, 3, 3], [1, 1], [0, 0], [1, 1], 1).is_err());
    assert!(ConvSpec::new([1, 4, 2, 2], [4, 4, 3, 3], [1, 1], [0, 0], [1, 1], 1).is_err());
    assert!(ConvSpec::new([1, 4, 5, 5], [4, 4, 3, 3], [0, 1], [0, 0], [1, 1], 1).is_err());
    assert!(ConvSpec::new([1, 4, 5, 5], [3, 2, 3, 3], [1, 1], [0, 0], [1, 1], 2).is_err());
    let huge = usize::MAX / 2 + 1;
    assert!(ConvSpec::new([1, 4, 5, 5], [4, 4, 3, 3], [1, 1], [huge, 0], [1, 1], 1).is_err());
    assert!(ConvSpec::new([1, 4, 5, 5], [4, 4, 3, 3], [1, 1], [0, 0], [huge, 1], 1).is_err());
    let s = conv([2, 4, 5, 5], 6, [3, 3], 1, 1, 1, 2);
    let (x, w, o) = (s.input_len(), s.weight_len(), s.output_len());
    assert!(s.validate(x, w, Some(6), o).is_ok());
    assert!(s.validate(x - 1, w, None, o).is_err());
    assert!(s.validate(x, w + 1, None, o).is_err());
    assert!(s.validate(x, w, Some(5), o).is_err());
    assert!(s.validate(x, w, None, o + 1).is_err());
    // A corrupted output size would read outside the padded input.
    let mut bad = s.clone();
    bad.oh += 1;
    assert!(bad.validate(x, w, None, bad.output_len()).is_err());
    let mut bad = s.clone();
    bad.groups = 0;
    assert!(bad.validate(x, w, None, o).is_err());
    let mut bad = s.clone();
    bad.n = usize::MAX / 2;
    assert!(bad.validate(x, w, None, o).is_err());
}

#[test]
fn conv_bitwise_same_on_1_and_2_threads() {
    for spec in [
        conv([3, 16, 20, 20], 24, [3, 3], 1, 1, 1, 1),
        conv([1, 32, 40, 40], 16, [3, 3], 2, 1, 1, 1),
        conv([2, 8, 30, 30], 8, [3, 3], 1, 1, 1, 8),
        // Depthwise over several jobs, on the pool (many outputs) and not.
        conv([1, 16, 112, 112], 16, [3, 3], 2, 1, 1, 16),
        conv([1, 64, 120, 120], 64, [3, 3], 1, 1, 1, 64),
        conv([1, 576, 7, 7], 576, [5, 5], 1, 2, 1, 576),
        conv([1, 64, 16, 16], 32, [1, 1], 1, 0, 1, 1),
        // One image, one tile: the GEMM itself is split over the pool.
        conv([1, 256, 7, 7], 128, [3, 3], 1, 1, 1, 1),
        conv([1, 256, 7, 7], 512, [1, 1], 1, 0, 1, 1),
        // Winograd (on AVX-512 CPUs), several jobs per image.
        conv([2, 8, 70, 32], 12, [3, 3], 1, 1, 1, 1),
    ] {
        let x = rnd(spec.input_len(), 1);
        let w = rnd(spec.weight_len(), 2);
        let b = rnd(spec.cout, 3);
        let run = |threads: usize| {
            let mut o = vec![0.0f32; spec.output_len()];
            pool(threads).install(|| conv2d(&spec, &x, &w, Some(&b), &mut o, &|_| {}).unwrap());
            o
        };
        let (a, c) = (run(1), run(2));
        assert!(
            a.iter().zip(&c).all(|(x, y)| x.to_bits() == y.to_bits()),
            "{spec:?}"
        );
    }
}

// ---------------------------------------------------------------- pooling

fn check_pool(spec: &PoolSpec, x: &[f32], args: Vec<(&str, A)>, target: &str, what: &str) {
    let shape = [spec.planes, spec.h, spec.w];
    let mut all = vec![("self", f32t(&shape, &f64s(x)).into())];
    all.extend(args);
    let want = call(target, all).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(
        want[0].shape,
        [spec.planes, spec.oh, spec.ow],
        "{what}: shape"
    );
    let mut out = vec![f32::NAN; spec.output_len()];
    if spec.kind == PoolKind::Max {
        let mut idx = vec![-7i64; spec.output_len()];
        pool2d(spec, x, &mut out, Some(&mut idx));
        assert_eq!(idx, want[1].i64s(), "{what}: indices");
        let mut out2 = vec![0.0; spec.output_len()];
        pool2d(spec, x, &mut out2, None);
        assert!(out
            .iter()
            .zip(&out2)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
    } else {
        pool2d(spec, x, &mut out, None);
    }
    assert_close(&out, &want[0].f64s(), 1e-5, what);
}

fn i2(v: [usize; 2]) -> A {
    ints(&[v[0] as i64, v[1] as i64])
}

#[test]
fn max_pool_matches_interpreter() {
    for (hw, k, s, p, d, ceil) in [
        ([112, 112], [3, 3], [2, 2], [1, 1], [1, 1], false),
        ([7, 9], [2, 2], [2, 2], [0, 0], [1, 1], true),
        ([7, 9], [3, 2], [2, 1], [1, 1], [1, 1], true),
        ([11, 10], [3, 3], [2, 3], [1, 0], [2, 3], false),
        ([1, 1], [1, 1], [1, 1], [0, 0], [1, 1], false),
        ([5, 5], [5, 5], [1, 1], [2, 2], [1, 1], false),
        // Column stride 2 (one permute of two loads per tap on AVX-512): odd and even kernel
        // widths, padding, rows of odd and even width, the last window cut by ceil_mode, and
        // rows of more than 16 outputs (several runs of 16, the last one partial).
        ([9, 10], [3, 5], [2, 2], [1, 2], [1, 1], true),
        ([6, 11], [2, 4], [2, 2], [0, 1], [1, 1], false),
        ([5, 8], [1, 1], [2, 2], [0, 0], [1, 1], false),
        ([7, 7], [3, 3], [2, 2], [0, 0], [1, 1], true),
        ([8, 13], [2, 3], [1, 2], [1, 1], [1, 1], true),
        ([5, 75], [3, 3], [2, 2], [1, 1], [1, 1], false),
        ([4, 64], [3, 7], [1, 2], [1, 3], [1, 1], true),
    ] {
        let spec = PoolSpec::new(PoolKind::Max, 6, hw, k, s, p, d, ceil).unwrap();
        let mut x = rnd(spec.input_len(), 5);
        // Ties, infinities and NaNs: first maximum wins, NaN wins.
        for (j, v) in x.iter_mut().enumerate() {
            match j % 17 {
                3 => *v = 0.5,
                5 => *v = 0.5,
                11 if j % 3 == 0 => *v = f32::NAN,
                13 => *v = f32::NEG_INFINITY,
                _ => {}
            }
        }
        let args = vec![
            ("kernel_size", i2(k)),
            ("stride", i2(s)),
            ("padding", i2(p)),
            ("dilation", i2(d)),
            ("ceil_mode", bool_(ceil)),
        ];
        let what = format!("max {hw:?} k{k:?} s{s:?} p{p:?} d{d:?} ceil={ceil}");
        check_pool(
            &spec,
            &x,
            args,
            "aten.max_pool2d_with_indices.default",
            &what,
        );
    }
}

#[test]
fn avg_pool_matches_interpreter() {
    for (hw, k, s, p, ceil) in [
        ([8, 8], [2, 2], [2, 2], [0, 0], false),
        ([7, 9], [3, 3], [2, 2], [1, 1], true),
        ([7, 9], [3, 2], [2, 1], [1, 1], false),
        ([6, 5], [2, 3], [3, 2], [1, 1], true),
        ([1, 1], [1, 1], [1, 1], [0, 0], true),
    ] {
        for cip in [true, false] {
            for dov in [None, Some(3i64)] {
                let kind = PoolKind::Avg {
                    count_include_pad: cip,
                    divisor_override: dov,
                };
                let spec = PoolSpec::new(kind, 5, hw, k, s, p, [1, 1], ceil).unwrap();
                let x = rnd(spec.input_len(), 6);
                let args = vec![
                    ("kernel_size", i2(k)),
                    ("stride", i2(s)),
                    ("padding", i2(p)),
                    ("ceil_mode", bool_(ceil)),
                    ("count_include_pad", bool_(cip)),
                    ("divisor_override", dov.map_or_else(none, int)),
                ];
                let what =
                    format!("avg {hw:?} k{k:?} s{s:?} p{p:?} ceil={ceil} cip={cip} dov={dov:?}");
                check_pool(&spec, &x, args, "aten.avg_pool2d.default", &what);
            }
        }
    }
}

#[test]
fn adaptive_avg_pool_matches_interpreter() {
    for (hw, o) in [
        ([7, 7], [1, 1]),
        ([10, 7], [3, 4]),
        ([5, 5], [7, 6]),
        ([1, 9], [1, 2]),
    ] {
        let spec = PoolSpec::adaptive(4, hw, o).unwrap();
        let x = rnd(spec.input_len(), 7);
        let args = vec![("output_size", i2(o))];
        check_pool(
            &spec,
            &x,
            args,
            "aten._adaptive_avg_pool2d.default",
            &format!("adaptive {hw:?} -> {o:?}"),
        );
    }
}

#[test]
fn pool_validate_errors() {
    assert!(PoolSpec::new(
        PoolKind::Max,
        1,
        [4, 4],
        [0, 2],
        [1, 1],
        [0, 0],
        [1, 1],
        false
    )
    .is_err());
    assert!(PoolSpec::new(
        PoolKind::Max,
        1,
        [4, 4],
        [2, 2],
        [1, 1],
        [2, 0],
        [1, 1],
        false
    )
    .is_err());
    assert!(PoolSpec::new(
        PoolKind::Max,
        1,
        [2, 2],
        [5, 5],
        [1, 1],
        [0, 0],
        [1, 1],
        false
    )
    .is_err());
    let kind = PoolKind::Avg {
        count_include_pad: true,
        divisor_override: Some(0),
    };
    assert!(PoolSpec::new(kind, 1, [4, 4], [2, 2], [2, 2], [0, 0], [1, 1], false).is_err());
    assert!(PoolSpec::adaptive(1, [0, 4], [2, 2]).is_err());
    let s = PoolSpec::new(
        PoolKind::Max,
        3,
        [6, 6],
        [2, 2],
        [2, 2],
        [0, 0],
        [1, 1],
        false,
    )
    .unwrap();
    assert!(s.validate(108, 27, Some(27)).is_ok());
    assert!(s.validate(107, 27, None).is_err());
    assert!(s.validate(108, 28, None).is_err());
    assert!(s.validate(108, 27, Some(26)).is_err());
    let a = PoolSpec::adaptive(3, [6, 6], [2, 2]).unwrap();
    assert!(a
        .validate(108, 12, Some(12))
        .unwrap_err()
        .contains("indices"));
    let mut bad = s.clone();
    bad.stride = [0, 2];
    assert!(bad.validate(108, 27, None).is_err());
}

#[test]
fn pool_bitwise_same_on_1_and_2_threads() {
    let kind = PoolKind::Avg {
        count_include_pad: false,
        divisor_override: None,
    };
    let spec = PoolSpec::new(kind, 64, [56, 56], [3, 3], [2, 2], [1, 1], [1, 1], true).unwrap();
    let x = rnd(spec.input_len(), 1);
    let run = |t: usize| {
        let mut o = vec![0.0f32; spec.output_len()];
        pool(t).install(|| pool2d(&spec, &x, &mut o, None));
        o
    };
    assert!(run(1)
        .iter()
        .zip(&run(2))
        .all(|(a, b)| a.to_bits() == b.to_bits()));
}

// ---------------------------------------------------------------- gathers

#[test]
fn embedding_matches_interpreter() {
    let (v, d) = (50, 129);
    let table = rnd(v * d, 8);
    let idx: Vec<i64> = (0..37).map(|i| (i * 13 % 50) as i64).collect();
    let want = call1(
        "aten.embedding.default",
        vec![
            ("weight", f32t(&[v, d], &f64s(&table)).into()),
            ("indices", i64t(&[37], &idx).into()),
        ],
    );
    let spec = GatherSpec::embedding(v, d, idx.len());
    let mut out = vec![0.0; spec.output_len()];
    gather(&spec, &table, &idx, &mut out).unwrap();
    assert_close(&out, &want.f64s(), 0.0, "embedding");
    // Many indices (several parallel jobs), bitwise across thread counts.
    let idx: Vec<i64> = (0..5000).map(|i| (i * 7 % 50) as i64).collect();
    let spec = GatherSpec::embedding(v, d, idx.len());
    let run = |t: usize| {
        let mut o = vec![0.0f32; spec.output_len()];
        pool(t)
            .install(|| gather(&spec, &table, &idx, &mut o))
            .unwrap();
        o
    };
    let o = run(2);
    assert_eq!(run(1), o);
    assert_eq!(
        &o[4999 * d..],
        &table[(4999 * 7 % 50) * d..(4999 * 7 % 50 + 1) * d]
    );
}

#[test]
fn index_select_matches_interpreter() {
    let shape = [3usize, 7, 5];
    let x = rnd(105, 9);
    let idx = [6i64, 0, 3, 3];
    for dim in 0..3 {
        let idx: Vec<i64> = idx.iter().map(|&i| i % shape[dim] as i64).collect();
        let want = call1(
            "aten.index_select.default",
            vec![
                ("self", f32t(&shape, &f64s(&x)).into()),
                ("dim", int(dim as i64)),
                ("index", i64t(&[idx.len()], &idx).into()),
            ],
        );
        let spec = GatherSpec {
            outer: shape[..dim].iter().product(),
            rows: shape[dim],
            inner: shape[dim + 1..].iter().product(),
            indices: idx.len(),
            wrap: false,
        };
        let mut out = vec![0.0; spec.output_len()];
        gather(&spec, &x, &idx, &mut out).unwrap();
        assert_close(&out, &want.f64s(), 0.0, &format!("index_select dim {dim}"));
    }
}

#[test]
fn gather_errors() {
    let spec = GatherSpec::embedding(4, 3, 2);
    let t = rnd(12, 1);
    let mut out = vec![0.0; 6];
    assert!(gather(&spec, &t, &[0, 4], &mut out)
        .unwrap_err()
        .contains("out of range"));
    assert!(gather(&spec, &t, &[-1, 0], &mut out).is_err());
    assert!(gather(&spec, &t, &[0], &mut out).is_err());
    assert!(gather(&spec, &t[..11], &[0, 1], &mut out).is_err());
    assert!(gather(&spec, &t, &[0, 1], &mut out[..5]).is_err());
    let huge = GatherSpec {
        outer: usize::MAX,
        rows: 2,
        inner: 2,
        indices: 1,
        wrap: false,
    };
    assert!(gather(&huge, &t, &[0], &mut out).is_err());
    // A wrapping spec takes -rows..rows: -1 is the last row, -5 is out of range.
    let wrap = GatherSpec { wrap: true, ..spec };
    gather(&wrap, &t, &[-1, 0], &mut out).unwrap();
    assert_eq!(out, [&t[9..12], &t[0..3]].concat());
    assert!(gather(&wrap, &t, &[-5, 0], &mut out).is_err());
    assert!(gather(&wrap, &t, &[4, 0], &mut out).is_err());
    // Empty rows and no indices are fine.
    let e = GatherSpec::embedding(4, 0, 2);
    gather::<f32>(&e, &[], &[1, 2], &mut []).unwrap();
    let e = GatherSpec::embedding(4, 3, 0);
    gather(&e, &t, &[], &mut []).unwrap();
}

#[test]
fn conv_with_prepacked_weights_gives_the_same_bits() {
    use fxhlo_runtime::fast::conv::{conv2d_prepacked, prepack_weights, Post};
    // Normal, pointwise, strided, grouped, and small outputs (run transposed: out^T).
    for (x, w, s, p, g) in [
        ([2, 8, 9, 9], [6, 8, 3, 3], 1, 1, 1),
        ([1, 16, 4, 4], [32, 16, 1, 1], 1, 0, 1),
        ([1, 12, 4, 4], [40, 12, 3, 3], 2, 1, 1),
        ([1, 64, 2, 2], [128, 64, 3, 3], 1, 1, 1),
        ([2, 8, 6, 6], [8, 4, 3, 3], 1, 1, 2),
        ([1, 8, 3, 3], [16, 4, 3, 3], 1, 0, 2),
        ([1, 8, 11, 32], [16, 8, 3, 3], 1, 1, 1),
    ] {
        let spec = ConvSpec::new(x, w, [s, s], [p, p], [1, 1], g).unwrap();
        let xv = rnd(spec.input_len(), 1);
        let wv = rnd(spec.weight_len(), 2);
        let bv = rnd(spec.cout, 3);
        let mut want = vec![0f32; spec.output_len()];
        conv2d(&spec, &xv, &wv, Some(&bv), &mut want, &|_| {}).unwrap();
        let pk = prepack_weights(&spec, &wv).expect("a GEMM convolution");
        let mut got = vec![f32::NAN; spec.output_len()];
        conv2d_prepacked(
            &spec,
            &xv,
            &wv,
            Some(&pk),
            Post {
                bias: Some(&bv),
                relu: false,
            },
            &mut got,
            &|_| {},
        )
        .unwrap();
        assert!(
            got.iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{spec:?}"
        );
    }
}
