//! The fast dense kernels (`fast::{gemm, conv, pool, gather}`) against the reference
//! interpreter and naive loops: odd sizes, strided and transposed operands, groups, padding,
//! and bitwise determinism across thread counts.

mod common;

use common::*;
use fxhlo_runtime::fast::gemm::{matmul, MatmulSpec, Operand};
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
        + (batch - 1) * o.batch_stride
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
                        + bi * s.a.batch_stride
                        + i * s.a.row_stride
                        + l * s.a.col_stride];
                    let y = b[s.b.offset
                        + bi * s.b.batch_stride
                        + l * s.b.row_stride
                        + j * s.b.col_stride];
                    acc += x as f64 * y as f64;
                }
                let mut v = s.alpha as f64 * acc;
                if let (Some(o), Some(bv)) = (&s.bias, bias) {
                    if s.beta != 0.0 {
                        v += s.beta as f64
                            * bv[o.offset
                                + bi * o.batch_stride
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
    let seen = Mutex::new(vec![0u32; spec.batch * spec.m]);
    let n = spec.n;
    matmul(spec, &a, &b, bias.as_deref(), &mut c, &|bi, row0, rows| {
        assert_eq!(rows.len() % n, 0);
        let mut s = seen.lock().unwrap();
        for r in 0..rows.len() / n {
            s[bi * spec.m + row0 + r] += 1;
        }
        // The block is complete when the epilogue sees it.
        for (j, v) in rows.iter().enumerate() {
            let w = want[(bi * spec.m + row0) * n + j];
            assert!(
                close(*v as f64, w, 1e-4),
                "{what}: epilogue saw {v}, want {w}"
            );
        }
        for v in rows.iter_mut() {
            *v *= 2.0;
        }
    });
    if spec.m * spec.n > 0 {
        assert!(
            seen.into_inner().unwrap().iter().all(|&x| x == 1),
            "{what}: epilogue rows"
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
    });
    let bias = [1.0f32, 2.0, 3.0, 4.0];
    let mut c = vec![f32::NAN; 24];
    matmul(&s, &[], &[], Some(&bias), &mut c, &|_, _, _| {});
    assert_eq!(&c[..4], &bias);
    assert_eq!(&c[20..], &bias);
    let s = MatmulSpec::contiguous(2, 0, 4, 5);
    let mut c: Vec<f32> = vec![];
    matmul(&s, &[], &rnd(40, 1), None, &mut c, &|_, _, _| {
        panic!("no rows")
    });
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
    };
    check_matmul(&s, "A^T @ B");
    // B^T (a linear layer's weight [n, k]).
    let mut s = MatmulSpec::contiguous(1, m, n, k);
    s.b = Operand {
        offset: 0,
        batch_stride: 0,
        row_stride: 1,
        col_stride: k,
    };
    check_matmul(&s, "A @ B^T");
    // Both transposed, batched, with offsets and padded rows.
    let mut s = MatmulSpec::contiguous(4, m, n, k);
    s.a = Operand {
        offset: 5,
        batch_stride: (m + 3) * k,
        row_stride: 1,
        col_stride: m + 3,
    };
    s.b = Operand {
        offset: 11,
        batch_stride: n * (k + 2),
        row_stride: 1,
        col_stride: k + 2,
    };
    check_matmul(&s, "batched A^T @ B^T with offsets");
    // Broadcast rhs over the batch (batch stride 0), padded lhs rows.
    let mut s = MatmulSpec::contiguous(3, m, n, k);
    s.a = Operand {
        offset: 0,
        batch_stride: m * (k + 9),
        row_stride: k + 9,
        col_stride: 1,
    };
    s.b.batch_stride = 0;
    check_matmul(&s, "broadcast rhs");
    // Element-strided columns (every other element).
    let mut s = MatmulSpec::contiguous(1, 9, 17, 33);
    s.b = Operand {
        offset: 1,
        batch_stride: 0,
        row_stride: 2 * 17,
        col_stride: 2,
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
    });
    let (a, b) = (rnd(35, 1), rnd(42, 2));
    let mut c = vec![0.0; 30];
    matmul(&s, &a, &b, Some(&[f32::NAN; 6]), &mut c, &|_, _, _| {});
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
        &|_, _, _| {},
    );
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
    });
    s.alpha = 2.0;
    s.beta = 0.5;
    matmul(&s, &a, &b, Some(&bias), &mut c, &|_, _, _| {});
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
        &|_, _, _| {},
    );
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
    ] {
        let a = rnd(spec.batch * spec.m * spec.k, 1);
        let b = rnd(spec.batch * spec.k * spec.n, 2);
        let run = |threads: usize| {
            let mut c = vec![0.0f32; spec.batch * spec.m * spec.n];
            pool(threads).install(|| matmul(&spec, &a, &b, None, &mut c, &|_, _, _| {}));
            c
        };
        let (c1, c2) = (run(1), run(2));
        assert!(
            c1.iter().zip(&c2).all(|(x, y)| x.to_bits() == y.to_bits()),
            "{spec:?}: results differ between 1 and 2 threads"
        );
    }
}
