//! Dense kernel throughput in GFLOP/s: `cargo bench -p fxhlo-runtime --bench dense`.
//!
//! Plain `Instant`-based timing, best of a few runs, for 1 and 2 threads (or only the count in
//! `FXHLO_NUM_THREADS`). Peers (torch, numpy) are compared elsewhere. `FXHLO_BENCH_ATTENTION=1`
//! times only the fused attention (on `FXHLO_NUM_THREADS`, default 1); `FXHLO_BENCH_CONV=1` only
//! the convolutions.

use fxhlo_runtime::fast::attention::{attention, AttentionSpec};
use fxhlo_runtime::fast::conv::{conv2d, ConvSpec};
use fxhlo_runtime::fast::gemm::{matmul, matmul_prepacked, prepack_b, MatmulSpec, Operand};
use std::time::Instant;

fn fill(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7 + seed * 13) % 17) as f32 / 17.0 - 0.5)
        .collect()
}

/// Best time of `reps` runs after one warm-up, in seconds.
fn time(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut best = f64::MAX;
    for _ in 0..reps {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed().as_secs_f64());
    }
    best
}

fn report(name: &str, threads: usize, flops: f64, secs: f64) {
    println!(
        "{name:<40} threads={threads}  {:8.2} ms  {:7.1} GFLOP/s",
        secs * 1e3,
        flops / secs / 1e9
    );
}

/// `A @ W^T`: `A` is `m x k` and the weight `W` `n x k`, both row-major (a linear layer).
fn linear(m: usize, n: usize, k: usize) -> MatmulSpec {
    let mut spec = MatmulSpec::contiguous(1, m, n, k);
    spec.b = Operand {
        offset: 0,
        batch_stride: 0,
        row_stride: 1,
        col_stride: k,
        ..Operand::default()
    };
    spec
}

/// `relu(A @ W^T + bias)` with `W` (`n x k`) packed ahead of time.
fn bench_prepacked(threads: usize, m: usize, n: usize, k: usize) {
    let mut spec = linear(m, n, k);
    spec.bias = Some(Operand {
        col_stride: 1,
        ..Operand::default()
    });
    let (a, w, bias) = (fill(m * k, 1), fill(k * n, 2), fill(n, 3));
    let mut c = vec![0f32; m * n];
    let packed = prepack_b(&spec, &w).expect("a shared weight packs");
    let flops = 2.0 * (m * n * k) as f64;
    let secs = time(5, || {
        matmul_prepacked(
            &spec,
            &a,
            &w,
            Some(&packed),
            Some(&bias),
            &mut c,
            true,
            &|_| {},
        )
        .unwrap()
    });
    report(
        &format!("prepacked {m}x{k} @ ({n}x{k})^T +b relu"),
        threads,
        flops,
        secs,
    );
}

fn bench_matmul(threads: usize, name: &str, spec: &MatmulSpec, reps: usize) {
    let lens = (spec.batch * spec.m * spec.k, spec.batch * spec.k * spec.n);
    bench_matmul_in(threads, name, spec, lens, reps);
}

/// [`bench_matmul`] with operand buffers of the given lengths (views into larger buffers).
fn bench_matmul_in(
    threads: usize,
    name: &str,
    spec: &MatmulSpec,
    (a_len, b_len): (usize, usize),
    reps: usize,
) {
    let a = fill(a_len, 1);
    let b = fill(b_len, 2);
    let mut c = vec![0f32; spec.batch * spec.m * spec.n];
    let flops = 2.0 * (spec.batch * spec.m * spec.n * spec.k) as f64;
    let secs = time(reps, || {
        matmul(spec, &a, &b, None, &mut c, &|_| {}).unwrap()
    });
    report(name, threads, flops, secs);
}

fn bench_conv(threads: usize, name: &str, spec: &ConvSpec, reps: usize) {
    let x = fill(spec.input_len(), 1);
    let w = fill(spec.weight_len(), 2);
    let bias = fill(spec.cout, 3);
    let mut out = vec![0f32; spec.output_len()];
    let secs = time(reps, || {
        conv2d(spec, &x, &w, Some(&bias), &mut out, &|_| {}).unwrap()
    });
    report(name, threads, spec.flops() as f64, secs);
}

/// Head `h` of sequence `b` of a packed QKV projection (`[seq 256, batch 8, 3 x 512]`, at `b *
/// 1536 + h * 64`) from `offset` (0 for q, 512 for k, 1024 for v), transposed for k.
fn qkv_head(offset: usize, transposed: bool) -> Operand {
    Operand {
        offset,
        batch_stride: 64,
        row_stride: if transposed { 1 } else { 8 * 1536 },
        col_stride: if transposed { 8 * 1536 } else { 1 },
        group: 8,
        group_stride: 1536,
    }
}

/// The encoder's whole attention fused (scores, softmax and `@ V` per block of rows): heads
/// of the packed QKV projection in, `[seq, batch, heads * 64]` out (as the output projection
/// reads it).
fn bench_attention(threads: usize) {
    let head = qkv_head;
    let spec = AttentionSpec {
        batch: 64,
        m: 256,
        n: 256,
        d: 64,
        dv: 64,
        q: head(0, false),
        k: head(512, true),
        v: head(1024, false),
        scale: 0.125,
        mask: None,
        guard: true,
        out: Operand {
            offset: 0,
            batch_stride: 64,
            row_stride: 8 * 512,
            col_stride: 1,
            group: 8,
            group_stride: 512,
        },
    };
    let qkv = fill(256 * 8 * 1536, 1);
    let mut out = vec![0f32; 256 * 8 * 512];
    let secs = time(10, || {
        attention(&spec, &qkv, &qkv, &qkv, None, &mut out).unwrap()
    });
    let flops = 4.0 * (64 * 256 * 256 * 64) as f64;
    report(
        "attention 64 x softmax(QK^T) @ V, fused",
        threads,
        flops,
        secs,
    );
}

fn main() {
    if std::env::var("FXHLO_BENCH_ATTENTION").is_ok() {
        let threads = std::env::var("FXHLO_NUM_THREADS").map_or(1, |s| s.parse().expect("threads"));
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("pool");
        pool.install(|| bench_attention(threads));
        return;
    }
    let counts: Vec<usize> = match std::env::var("FXHLO_NUM_THREADS") {
        Ok(s) => vec![s.parse().expect("FXHLO_NUM_THREADS must be a number")],
        Err(_) => vec![1, 2],
    };
    let quick = std::env::var("FXHLO_BENCH_QUICK").is_ok();
    let conv_only = std::env::var("FXHLO_BENCH_CONV").is_ok();
    for &threads in &counts {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("thread pool");
        pool.install(|| {
            if conv_only {
                bench_convs(threads, quick);
                return;
            }
            for n in [512usize, 1024, 2048, 4096] {
                if quick && n > 1024 {
                    continue;
                }
                let reps = if n >= 4096 {
                    2
                } else if n >= 2048 {
                    3
                } else {
                    10
                };
                let spec = MatmulSpec::contiguous(1, n, n, n);
                bench_matmul(threads, &format!("sgemm {n}^3"), &spec, reps);
            }
            // Linear layers (x @ W^T, W row-major [out, in]): the MLP and encoder workloads.
            for (m, k, n) in [
                (256, 1024, 4096),
                (256, 4096, 4096),
                (2048, 512, 1536),
                (2048, 2048, 512),
            ] {
                if quick && m * n * k > 1 << 30 {
                    continue;
                }
                let spec = linear(m, n, k);
                bench_matmul(threads, &format!("linear {m}x{k} @ ({n}x{k})^T"), &spec, 5);
                if std::env::var("FXHLO_BENCH_PLAIN").is_ok() {
                    let spec = MatmulSpec::contiguous(1, m, n, k);
                    bench_matmul(threads, &format!("plain {m}x{k} @ {k}x{n}"), &spec, 5);
                }
            }
            // Linear layers over a weight packed once (as the executor does), with the bias
            // and ReLU in the GEMM: the encoder's (2048 rows) and the MLP's (256 rows).
            for (m, n, k) in [
                (2048usize, 1536usize, 512usize),
                (2048, 2048, 512),
                (2048, 512, 2048),
                (256, 4096, 1024),
                (256, 4096, 4096),
            ] {
                if quick && m * n * k > 1 << 30 {
                    continue;
                }
                bench_prepacked(threads, m, n, k);
            }
            // Attention scores: 8 sequences x 8 heads, [256, 64] @ [64, 256].
            let spec = MatmulSpec::contiguous(64, 256, 256, 64);
            bench_matmul(threads, "bmm 64 x (256x64 @ 64x256)", &spec, 10);
            // ... and the same with K transposed ([256, 64] read as [64, 256]).
            let mut spec_t = spec.clone();
            spec_t.b.row_stride = 1;
            spec_t.b.col_stride = 64;
            bench_matmul(threads, "bmm 64 x (256x64 @ (256x64)^T)", &spec_t, 10);
            // ... and both read as heads of a packed QKV projection, as the encoder's attention
            // does.
            let head = qkv_head;
            let mut spec_qkv = spec.clone();
            spec_qkv.a = head(0, false);
            spec_qkv.b = head(512, true);
            spec_qkv.alpha = 0.125;
            bench_matmul_in(
                threads,
                "bmm 64 x (Q @ K^T) from a QKV projection",
                &spec_qkv,
                (256 * 8 * 1536, 256 * 8 * 1536),
                10,
            );
            bench_attention(threads);
            // Attention values: the softmax [256, 256] of each head @ its V, read as heads of
            // the QKV projection ([seq, batch, 3 x 512], V at 1024).
            let mut spec_v = MatmulSpec::contiguous(64, 256, 64, 256);
            spec_v.b = head(1024, false);
            bench_matmul_in(
                threads,
                "bmm 64 x (P @ V) from a QKV projection",
                &spec_v,
                (64 * 256 * 256, 256 * 8 * 1536),
                10,
            );
            bench_convs(threads, quick);
        });
    }
}

/// The convolutions: a ResNet-style set, and the 32 -> 32 layer of the benchmark's workload e.
fn bench_convs(threads: usize, quick: bool) {
    for (name, n, cin, hw, cout, k, s, p, groups) in [
        ("conv3x3 8x64x56x56 -> 64", 8, 64, 56, 64, 3, 1, 1, 1),
        ("conv3x3 s2 8x128x56x56 -> 128", 8, 128, 56, 128, 3, 2, 1, 1),
        ("conv1x1 8x256x56x56 -> 64", 8, 256, 56, 64, 1, 1, 0, 1),
        ("conv7x7 s2 8x3x224x224 -> 64", 8, 3, 224, 64, 7, 2, 3, 1),
        ("depthwise3x3 8x256x56x56", 8, 256, 56, 256, 3, 1, 1, 256),
        (
            "conv3x3 8x32x128x128 -> 32 (workload e)",
            8,
            32,
            128,
            32,
            3,
            1,
            1,
            1,
        ),
    ] {
        let spec = ConvSpec::new(
            [n, cin, hw, hw],
            [cout, cin / groups, k, k],
            [s, s],
            [p, p],
            [1, 1],
            groups,
        )
        .expect("conv geometry");
        bench_conv(threads, name, &spec, if quick { 1 } else { 3 });
    }
}
