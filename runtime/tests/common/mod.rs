//! Helpers shared by the runtime's integration tests: one-op graphs, tensors, comparisons.
#![allow(dead_code)]

#[rustfmt::skip]
pub mod torch_cases;

use fxhlo_ir::ops::Results;
use fxhlo_ir::read::GraphBuilder;
use fxhlo_ir::{Arg, DType, Graph, InputKind, Model, Op, ValueRef};
use fxhlo_runtime::{eval, Options, Tensor};
use std::collections::BTreeMap;

/// The deterministic input pattern of `torch_expected.py`: multiples of 1/4 in [-1.5, 1.5].
pub fn gen(n: usize, seed: u64) -> Vec<f64> {
    (0..n as u64)
        .map(|i| (((i * 7 + seed * 5) % 13) as f64 - 6.0) / 4.0)
        .collect()
}

pub fn t(dtype: DType, shape: &[usize], vals: &[f64]) -> Tensor {
    Tensor::from_f64s(dtype, shape.to_vec(), vals.to_vec())
}
pub fn f32t(shape: &[usize], vals: &[f64]) -> Tensor {
    t(DType::F32, shape, vals)
}
pub fn f64t(shape: &[usize], vals: &[f64]) -> Tensor {
    t(DType::F64, shape, vals)
}
pub fn i64t(shape: &[usize], vals: &[i64]) -> Tensor {
    Tensor::from_i64s(DType::I64, shape.to_vec(), vals.to_vec())
}
pub fn it(dtype: DType, shape: &[usize], vals: &[i64]) -> Tensor {
    Tensor::from_i64s(dtype, shape.to_vec(), vals.to_vec())
}
pub fn boolt(shape: &[usize], vals: &[bool]) -> Tensor {
    Tensor::from_bools(DType::Bool, shape.to_vec(), vals.to_vec())
}

/// An argument of [`call`]: a tensor, a tensor list, or a plain value.
pub enum A {
    T(Tensor),
    L(Vec<Option<Tensor>>),
    V(Arg),
}

impl From<Tensor> for A {
    fn from(t: Tensor) -> A {
        A::T(t)
    }
}
impl From<Arg> for A {
    fn from(a: Arg) -> A {
        A::V(a)
    }
}

/// Builds a one-op model; tensor arguments become user inputs named after their parameter
/// (list entries `name0`, `name1`, ...). Returns the model and its inputs.
pub fn one_op(
    target: &str,
    args: Vec<(&str, A)>,
) -> Result<(Model, BTreeMap<String, Tensor>), String> {
    let mut b = GraphBuilder::default();
    let mut inputs = BTreeMap::new();
    let mut named = vec![];
    let mut n_split = None;
    for (name, a) in args {
        let arg = match a {
            A::T(t) => {
                let v = b
                    .input(name, InputKind::User, None, t.ty())
                    .map_err(|e| e.to_string())?;
                inputs.insert(name.to_string(), t);
                Arg::Tensor(v)
            }
            A::L(ts) => {
                let mut vs = vec![];
                for (i, t) in ts.into_iter().enumerate() {
                    vs.push(match t {
                        Some(t) => {
                            let n = format!("{name}{i}");
                            let v = b
                                .input(&n, InputKind::User, None, t.ty())
                                .map_err(|e| e.to_string())?;
                            inputs.insert(n, t);
                            Some(v)
                        }
                        None => None,
                    });
                }
                Arg::Tensors(vs)
            }
            A::V(v) => {
                if name == "split_sizes" {
                    if let Arg::Ints(s) = &v {
                        n_split = Some(s.len());
                    }
                }
                v
            }
        };
        named.push((name.to_string(), arg));
    }
    let op = Op::from_aten(target).ok_or_else(|| format!("unknown op {target}"))?;
    let k = match op.info().results {
        Results::Fixed(k) => k,
        Results::List => n_split.unwrap_or(1),
    };
    let node = b.len();
    let names = (0..k).map(|j| format!("r{j}")).collect();
    b.op("the_op", target, named, names, None)
        .map_err(|e| e.to_string())?;
    let graph: Graph = b
        .finish((0..k).map(|j| ValueRef::new(node, j)).collect())
        .map_err(|e| e.to_string())?;
    Ok((
        Model {
            graph,
            weights: Default::default(),
        },
        inputs,
    ))
}

/// Runs a one-op graph (see [`one_op`]); build and run errors are both returned as text.
pub fn call(target: &str, args: Vec<(&str, A)>) -> Result<Vec<Tensor>, String> {
    let (m, inputs) = one_op(target, args)?;
    eval(&m, &inputs, &Options::default()).map_err(|e| e.to_string())
}

/// The first result of [`call`], which must succeed.
pub fn call1(target: &str, args: Vec<(&str, A)>) -> Tensor {
    match call(target, args) {
        Ok(mut r) => r.remove(0),
        Err(e) => panic!("{target}: {e}"),
    }
}

/// The error of [`call`], which must fail (and not with an internal error).
pub fn call_err(target: &str, args: Vec<(&str, A)>) -> String {
    match call(target, args) {
        Ok(r) => panic!("{target}: expected an error, got {r:?}"),
        Err(e) => {
            assert!(!e.contains("internal error"), "{target}: {e}");
            e
        }
    }
}

pub fn int(n: i64) -> A {
    A::V(Arg::Int(n))
}
pub fn float(x: f64) -> A {
    A::V(Arg::Float(x))
}
pub fn bool_(b: bool) -> A {
    A::V(Arg::Bool(b))
}
pub fn ints(v: &[i64]) -> A {
    A::V(Arg::Ints(v.to_vec()))
}
pub fn none() -> A {
    A::V(Arg::None)
}
pub fn str_(s: &str) -> A {
    A::V(Arg::Str(s.into()))
}
pub fn dtype(d: DType) -> A {
    A::V(Arg::DType(d))
}

/// True if `a` and `b` agree within `tol` (relative to magnitude), NaN matching NaN.
pub fn close(a: f64, b: f64, tol: f64) -> bool {
    if a.is_nan() || b.is_nan() {
        return a.is_nan() && b.is_nan();
    }
    if a.is_infinite() || b.is_infinite() {
        return a == b;
    }
    (a - b).abs() <= tol * (1.0 + b.abs())
}

/// Asserts shape and values (floats within `tol`).
pub fn assert_tensor(got: &Tensor, shape: &[usize], want: &[f64], tol: f64) {
    assert_eq!(got.shape, shape, "shape");
    let v = got.f64s();
    assert_eq!(v.len(), want.len(), "element count");
    for (i, (a, b)) in v.iter().zip(want).enumerate() {
        assert!(
            close(*a, *b, tol),
            "element {i}: got {a}, want {b}\n got {v:?}\nwant {want:?}"
        );
    }
}

/// Asserts shape and exact integer values.
pub fn assert_ints(got: &Tensor, shape: &[usize], want: &[i64]) {
    assert_eq!(got.shape, shape, "shape");
    assert_eq!(got.i64s(), want);
}
