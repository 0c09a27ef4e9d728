//! Helpers shared by the integration tests: deterministic pipelines, the reference
//! interpreter as oracle, seeded random inputs and output comparison.
#![allow(dead_code)]

pub mod random;

use fxhlo_ir::{DType, Graph, HostTensor, Model, NodeKind, TensorType};
use fxhlo_passes::egraph::{Config, Egraph};
use fxhlo_passes::{Cx, PassManager};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// `-O<level>` with the e-graph's time limit off, so results are deterministic.
pub fn pipeline(level: u8) -> PassManager {
    PassManager::for_level(level).with_pass(|| {
        Box::new(Egraph {
            config: Config::deterministic(),
        })
    })
}

/// Optimizes a copy of `g` at `level`.
pub fn optimize(g: &Graph, level: u8) -> (Graph, Cx) {
    let mut g = g.clone();
    let mut cx = Cx::default();
    pipeline(level)
        .run(&mut g, &mut cx, &mut |_, _| {})
        .expect("pipeline runs");
    g.verify().expect("optimized graph verifies");
    (g, cx)
}

/// The testdata folders, sorted.
pub fn testdata_dirs() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    dirs.retain(|p| p.join("graph.json").exists());
    dirs.sort();
    dirs
}

/// A small deterministic generator (SplitMix64).
pub struct Rng(pub u64);

impl Rng {
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in [-1, 1).
    pub fn sym(&mut self) -> f64 {
        self.unit() * 2.0 - 1.0
    }
    /// Uniform in 0..n.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Random values for a float tensor type.
pub fn random_tensor(t: &TensorType, rng: &mut Rng) -> HostTensor {
    let shape: Vec<usize> = t
        .static_shape()
        .expect("static")
        .iter()
        .map(|&d| d as usize)
        .collect();
    let n: usize = shape.iter().product();
    let vals: Vec<f64> = (0..n).map(|_| rng.sym()).collect();
    HostTensor::from_f64(t.dtype, shape, &vals)
}

/// Replaces every float user input by random values; other inputs are kept.
pub fn randomize_inputs(
    g: &Graph,
    inputs: &BTreeMap<String, HostTensor>,
    rng: &mut Rng,
) -> BTreeMap<String, HostTensor> {
    let mut out = inputs.clone();
    for i in g.user_inputs() {
        let n = &g.nodes[i];
        if n.results[0].dtype.is_float() {
            out.insert(n.name.clone(), random_tensor(&n.results[0], rng));
        }
    }
    out
}

/// Random values for every user input of `g`.
pub fn random_inputs(g: &Graph, rng: &mut Rng) -> BTreeMap<String, HostTensor> {
    g.user_inputs()
        .into_iter()
        .map(|i| {
            let n = &g.nodes[i];
            (n.name.clone(), random_tensor(&n.results[0], rng))
        })
        .collect()
}

/// Runs `g` with `weights` in the reference interpreter.
pub fn run(
    g: &Graph,
    weights: &fxhlo_ir::Weights,
    inputs: &BTreeMap<String, HostTensor>,
) -> Vec<HostTensor> {
    let m = Model {
        graph: g.clone(),
        weights: weights.clone(),
    };
    fxhlo_runtime::run(&m, inputs).unwrap_or_else(|e| panic!("interpreter: {e}"))
}

/// Checks two output lists agree: same dtype/shape, and `|a-b| <= atol + rtol*|b|` (NaNs must
/// match).
pub fn assert_close(what: &str, a: &[HostTensor], b: &[HostTensor]) {
    let (rtol, atol) = (1e-4, 1e-5);
    assert_eq!(a.len(), b.len(), "{what}: output count");
    for (k, (x, y)) in a.iter().zip(b).enumerate() {
        assert_eq!(
            (x.dtype, &x.shape),
            (y.dtype, &y.shape),
            "{what}: output {k} type"
        );
        let (xs, ys) = (x.to_f64_vec(), y.to_f64_vec());
        let exact = !matches!(x.dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16);
        for (j, (p, q)) in xs.iter().zip(&ys).enumerate() {
            let ok = if p.is_nan() || q.is_nan() {
                p.is_nan() && q.is_nan()
            } else if exact {
                p == q
            } else {
                p == q || (p - q).abs() <= atol + rtol * q.abs()
            };
            assert!(ok, "{what}: output {k} element {j}: {p} vs {q}");
        }
    }
}

/// Number of op nodes (inputs excluded).
pub fn op_count(g: &Graph) -> usize {
    g.nodes
        .iter()
        .filter(|n| !matches!(n.kind, NodeKind::Input { .. }))
        .count()
}

/// Checks that a fusion plan owns every op node exactly once, that recomputed nodes are owned
/// elsewhere, and that kernels read only graph inputs or values of earlier kernels.
pub fn check_plan(g: &Graph, plan: &fxhlo_passes::fusion::FusionPlan) {
    let mut owner = vec![None; g.nodes.len()];
    for (k, kern) in plan.kernels.iter().enumerate() {
        assert!(
            kern.nodes.contains(&kern.root),
            "kernel {k}: root not in nodes"
        );
        for &i in &kern.nodes {
            assert!(owner[i].is_none(), "node {i} owned twice");
            owner[i] = Some(k);
        }
    }
    for (i, n) in g.nodes.iter().enumerate() {
        let is_op = !matches!(n.kind, NodeKind::Input { .. });
        assert_eq!(owner[i].is_some(), is_op, "node {i} ({}) ownership", n.name);
    }
    for (k, kern) in plan.kernels.iter().enumerate() {
        for &i in &kern.recomputed {
            assert!(
                owner[i].is_some_and(|o| o != k),
                "recomputed {i} must be owned elsewhere"
            );
        }
        let computed = |i: usize| kern.nodes.contains(&i) || kern.recomputed.contains(&i);
        for &i in kern.nodes.iter().chain(&kern.recomputed) {
            for a in &g.nodes[i].args {
                for v in a.values() {
                    if !computed(v.node) {
                        assert!(kern.inputs.contains(&v), "kernel {k}: {v:?} not an input");
                    }
                }
            }
        }
        for v in &kern.inputs {
            if let Some(o) = owner[v.node] {
                assert!(o < k, "kernel {k} reads {v:?} of later kernel {o}");
                assert!(
                    plan.kernels[o].outputs.contains(v),
                    "kernel {k} reads {v:?} that kernel {o} does not write"
                );
            }
        }
    }
    for o in &g.outputs {
        if let Some(k) = owner[o.node] {
            assert!(
                plan.kernels[k].outputs.contains(o),
                "graph output {o:?} not written"
            );
        }
    }
}
