//! A generator of seeded random graphs with valid shapes (shared with the fast runtime's test
//! in `tests/fast_random.rs`).

use super::Rng;
use fxhlo_ir::read::GraphBuilder;
use fxhlo_ir::{Arg, DType, Graph, InputKind, TensorType, ValueRef};

struct Gen {
    b: GraphBuilder,
    rng: Rng,
    pool: Vec<ValueRef>,
    next: usize,
}

impl Gen {
    fn name(&mut self, base: &str) -> String {
        self.next += 1;
        format!("{base}{}", self.next)
    }

    fn input(&mut self, shape: &[i64]) -> ValueRef {
        let n = self.name("in");
        self.b
            .input(
                &n,
                InputKind::User,
                None,
                TensorType::new(DType::F32, shape),
            )
            .unwrap()
    }

    fn op(&mut self, aten: &str, args: Vec<(&str, Arg)>) -> ValueRef {
        let n = self.name("v");
        let named = args.into_iter().map(|(k, a)| (k.to_string(), a)).collect();
        self.b
            .op(&n, aten, named, vec![n.clone()], None)
            .unwrap_or_else(|e| panic!("generator built an invalid {aten}: {e}"));
        self.b.value(&n).unwrap()
    }

    fn shape(&self, v: ValueRef) -> Vec<i64> {
        self.b.ty(v).static_shape().unwrap()
    }

    fn pick(&mut self) -> ValueRef {
        // Prefer recent values so graphs are deep rather than wide.
        let n = self.pool.len();
        let k = self.rng.below(n.min(4));
        self.pool[n - 1 - k]
    }

    fn same_shape_partner(&mut self, v: ValueRef) -> ValueRef {
        let s = self.shape(v);
        let cands: Vec<ValueRef> = self
            .pool
            .iter()
            .copied()
            .filter(|&w| w != v && self.shape(w) == s)
            .collect();
        if cands.is_empty() || self.rng.below(3) == 0 {
            self.input(&s)
        } else {
            cands[self.rng.below(cands.len())]
        }
    }

    fn step(&mut self) {
        let x = self.pick();
        let s = self.shape(x);
        let r = s.len();
        let t = |v: ValueRef| Arg::Tensor(v);
        let v = match self.rng.below(16) {
            0 => {
                let ops = [
                    "aten.relu.default",
                    "aten.neg.default",
                    "aten.tanh.default",
                    "aten.sigmoid.default",
                    "aten.exp.default",
                ];
                let op = ops[self.rng.below(ops.len())];
                self.op(op, vec![("self", t(x))])
            }
            1 => {
                let c = [0.5, 2.0, 3.0, -1.5][self.rng.below(4)];
                let op =
                    ["aten.mul.Scalar", "aten.add.Scalar", "aten.div.Scalar"][self.rng.below(3)];
                let y = self.op(op, vec![("self", t(x)), ("other", Arg::Float(c))]);
                if self.rng.below(2) == 0 {
                    self.op(
                        "aten.mul.Scalar",
                        vec![("self", t(y)), ("other", Arg::Float(0.25))],
                    )
                } else {
                    y
                }
            }
            2 => {
                let y = self.same_shape_partner(x);
                let op =
                    ["aten.add.Tensor", "aten.mul.Tensor", "aten.sub.Tensor"][self.rng.below(3)];
                self.op(op, vec![("self", t(x)), ("other", t(y))])
            }
            3 => {
                let n = self.op("aten.neg.default", vec![("self", t(x))]);
                let y = if self.rng.below(2) == 0 {
                    x
                } else {
                    self.same_shape_partner(x)
                };
                self.op("aten.add.Tensor", vec![("self", t(y)), ("other", t(n))])
            }
            4 => self.op(
                "aten.pow.Tensor_Scalar",
                vec![("self", t(x)), ("exponent", Arg::Int(2))],
            ),
            5 if r >= 2 => {
                let mut p: Vec<i64> = (0..r as i64).collect();
                for i in (1..r).rev() {
                    let j = self.rng.below(i + 1);
                    p.swap(i, j);
                }
                let y = self.op(
                    "aten.permute.default",
                    vec![("self", t(x)), ("dims", Arg::Ints(p.clone()))],
                );
                if self.rng.below(2) == 0 {
                    let inv: Vec<i64> = (0..r as i64)
                        .map(|d| p.iter().position(|&q| q == d).unwrap() as i64)
                        .collect();
                    let z = self.op("aten.relu.default", vec![("self", t(y))]);
                    self.op(
                        "aten.permute.default",
                        vec![("self", t(z)), ("dims", Arg::Ints(inv))],
                    )
                } else {
                    y
                }
            }
            6 => {
                let numel: i64 = s.iter().product();
                let size = match self.rng.below(3) {
                    0 => vec![numel],
                    1 if r >= 2 => {
                        let mut rev = s.clone();
                        rev.reverse();
                        rev
                    }
                    _ => vec![-1, *s.last().unwrap_or(&1)],
                };
                let y = self.op(
                    "aten.view.default",
                    vec![("self", t(x)), ("size", Arg::Ints(size))],
                );
                if self.rng.below(2) == 0 {
                    self.op(
                        "aten.view.default",
                        vec![("self", t(y)), ("size", Arg::Ints(s.clone()))],
                    )
                } else {
                    y
                }
            }
            7 if r <= 3 => {
                let d = self.rng.below(r + 1) as i64;
                let u = self.op(
                    "aten.unsqueeze.default",
                    vec![("self", t(x)), ("dim", Arg::Int(d))],
                );
                match self.rng.below(3) {
                    0 => self.op(
                        "aten.squeeze.dim",
                        vec![("self", t(u)), ("dim", Arg::Int(d))],
                    ),
                    1 => {
                        let mut size = self.shape(u);
                        size[d as usize] = 3;
                        self.op(
                            "aten.expand.default",
                            vec![("self", t(u)), ("size", Arg::Ints(size))],
                        )
                    }
                    _ => u,
                }
            }
            8 | 9 if r >= 1 => {
                let d = self.rng.below(r) as i64;
                let keep = self.rng.below(2) == 0;
                let src = if self.rng.below(2) == 0 {
                    self.op(
                        "aten.mul.Scalar",
                        vec![("self", t(x)), ("other", Arg::Float(3.0))],
                    )
                } else {
                    x
                };
                let src = if r >= 2 && self.rng.below(2) == 0 {
                    let p: Vec<i64> = (0..r as i64).rev().collect();
                    self.op(
                        "aten.permute.default",
                        vec![("self", t(src)), ("dims", Arg::Ints(p))],
                    )
                } else {
                    src
                };
                match self.rng.below(4) {
                    0 => self.op(
                        "aten.sum.dim_IntList",
                        vec![
                            ("self", t(src)),
                            ("dim", Arg::Ints(vec![d])),
                            ("keepdim", Arg::Bool(keep)),
                        ],
                    ),
                    1 => self.op(
                        "aten.mean.dim",
                        vec![
                            ("self", t(src)),
                            ("dim", Arg::Ints(vec![d])),
                            ("keepdim", Arg::Bool(keep)),
                        ],
                    ),
                    2 => self.op(
                        "aten.amax.default",
                        vec![
                            ("self", t(src)),
                            ("dim", Arg::Ints(vec![d])),
                            ("keepdim", Arg::Bool(keep)),
                        ],
                    ),
                    _ => self.op(
                        "aten._softmax.default",
                        vec![
                            ("self", t(src)),
                            ("dim", Arg::Int(d)),
                            ("half_to_float", Arg::Bool(false)),
                        ],
                    ),
                }
            }
            10..=12 if r == 2 => {
                let n = [2, 3, 5][self.rng.below(3)];
                let w = self.input(&[s[1], n]);
                let lhs = if self.rng.below(2) == 0 {
                    self.op(
                        "aten.mul.Scalar",
                        vec![("self", t(x)), ("other", Arg::Float(0.5))],
                    )
                } else {
                    x
                };
                let m = if self.rng.below(3) == 0 {
                    let wt = self.input(&[n, s[1]]);
                    let p = self.op(
                        "aten.permute.default",
                        vec![("self", t(wt)), ("dims", Arg::Ints(vec![1, 0]))],
                    );
                    self.op("aten.mm.default", vec![("self", t(lhs)), ("mat2", t(p))])
                } else {
                    self.op("aten.mm.default", vec![("self", t(lhs)), ("mat2", t(w))])
                };
                match self.rng.below(3) {
                    0 => {
                        let bias = self.input(&[n]);
                        self.op("aten.add.Tensor", vec![("self", t(m)), ("other", t(bias))])
                    }
                    1 => self.op(
                        "aten.mul.Scalar",
                        vec![("self", t(m)), ("other", Arg::Float(2.0))],
                    ),
                    _ => self.op(
                        "aten.permute.default",
                        vec![("self", t(m)), ("dims", Arg::Ints(vec![1, 0]))],
                    ),
                }
            }
            13 if r == 3 => {
                let n = [2, 4][self.rng.below(2)];
                let w = self.input(&[s[0], s[2], n]);
                let lhs = if self.rng.below(2) == 0 {
                    self.op(
                        "aten.mul.Scalar",
                        vec![("self", t(x)), ("other", Arg::Float(0.125))],
                    )
                } else {
                    x
                };
                let m = self.op("aten.bmm.default", vec![("self", t(lhs)), ("mat2", t(w))]);
                if self.rng.below(2) == 0 {
                    self.op(
                        "aten.permute.default",
                        vec![("self", t(m)), ("dims", Arg::Ints(vec![0, 2, 1]))],
                    )
                } else {
                    m
                }
            }
            14 if r == 3 => self.attention_like(x),
            15 if r >= 2 => self.row_chain(x),
            _ => self.op("aten.relu.default", vec![("self", t(x))]),
        };
        self.pool.push(v);
    }
}

impl Gen {
    /// Two or three reductions over the last dimension of `x`, each read only by the later
    /// ones (a layer norm feeding a softmax, a softmax under PyTorch's all-masked-row guard):
    /// one row kernel of several stages in the fast runtime.
    fn row_chain(&mut self, x: ValueRef) -> ValueRef {
        let t = |v: ValueRef| Arg::Tensor(v);
        let first = if self.rng.below(2) == 0 {
            self.layer_norm(x)
        } else {
            self.softmax(x, "aten._softmax.default")
        };
        let mid = match self.rng.below(3) {
            0 => self.op(
                "aten.mul.Scalar",
                vec![("self", t(first)), ("other", Arg::Float(4.0))],
            ),
            1 => self.op("aten.exp.default", vec![("self", t(first))]),
            _ => first,
        };
        match self.rng.below(5) {
            0 => self.softmax(mid, "aten._softmax.default"),
            1 => self.softmax(mid, "aten._log_softmax.default"),
            2 => self.layer_norm(mid),
            3 => self.op(
                "aten.sum.dim_IntList",
                vec![
                    ("self", t(mid)),
                    ("dim", Arg::Ints(vec![-1])),
                    ("keepdim", Arg::Bool(true)),
                ],
            ),
            _ => {
                // where(!any(x != -inf), 0, softmax(x)), as torch's attention writes it.
                let eq = self.op(
                    "aten.eq.Scalar",
                    vec![("self", t(mid)), ("other", Arg::Float(f64::NEG_INFINITY))],
                );
                let ne = self.op("aten.logical_not.default", vec![("self", t(eq))]);
                let any = self.op(
                    "aten.any.dim",
                    vec![
                        ("self", t(ne)),
                        ("dim", Arg::Int(-1)),
                        ("keepdim", Arg::Bool(true)),
                    ],
                );
                let masked = self.op("aten.logical_not.default", vec![("self", t(any))]);
                let size = self.shape(mid);
                let zeros = self.op(
                    "aten.full.default",
                    vec![
                        ("size", Arg::Ints(size)),
                        ("fill_value", Arg::Int(0)),
                        ("dtype", Arg::DType(DType::F32)),
                    ],
                );
                let sm = self.softmax(mid, "aten._softmax.default");
                self.op(
                    "aten.where.self",
                    vec![
                        ("condition", t(masked)),
                        ("self", t(zeros)),
                        ("other", t(sm)),
                    ],
                )
            }
        }
    }

    /// `softmax` (or `log_softmax`, by `aten`) over the last dimension.
    fn softmax(&mut self, x: ValueRef, aten: &str) -> ValueRef {
        self.op(
            aten,
            vec![
                ("self", Arg::Tensor(x)),
                ("dim", Arg::Int(-1)),
                ("half_to_float", Arg::Bool(false)),
            ],
        )
    }

    /// Layer norm over the last dimension, with a weight and bias half the time.
    fn layer_norm(&mut self, x: ValueRef) -> ValueRef {
        let n = *self.shape(x).last().expect("rank >= 1");
        let mut args = vec![
            ("input", Arg::Tensor(x)),
            ("normalized_shape", Arg::Ints(vec![n])),
            ("weight", Arg::None),
            ("bias", Arg::None),
            ("eps", Arg::Float(1e-5)),
        ];
        if self.rng.below(2) == 0 {
            args[2].1 = Arg::Tensor(self.input(&[n]));
            args[3].1 = Arg::Tensor(self.input(&[n]));
        }
        let name = self.name("ln");
        let results = vec![name.clone(), format!("{name}_mean"), format!("{name}_rstd")];
        let named = args.into_iter().map(|(k, a)| (k.to_string(), a)).collect();
        self.b
            .op(
                &name,
                "aten.native_layer_norm.default",
                named,
                results,
                None,
            )
            .unwrap_or_else(|e| panic!("generator built an invalid layer norm: {e}"));
        self.b.value(&name).unwrap()
    }

    /// Products reading strided views of one rank-3 value `x` in place, the way attention reads
    /// its heads: an offset (`slice`, `select`), a scale folded into the product, two operands
    /// viewing the same value, or a batch two strides apart.
    fn attention_like(&mut self, x: ValueRef) -> ValueRef {
        let t = |v: ValueRef| Arg::Tensor(v);
        let s = self.shape(x);
        let src = match self.rng.below(3) {
            0 if s[0] > 1 => self.op(
                "aten.slice.Tensor",
                vec![
                    ("self", t(x)),
                    ("dim", Arg::Int(0)),
                    ("start", Arg::Int(1)),
                    ("end", Arg::None),
                    ("step", Arg::Int(1)),
                ],
            ),
            1 => {
                // [2, a, b, c] holding x twice (stride 0), then one of the two.
                let u = self.op(
                    "aten.unsqueeze.default",
                    vec![("self", t(x)), ("dim", Arg::Int(0))],
                );
                let e = self.op(
                    "aten.expand.default",
                    vec![
                        ("self", t(u)),
                        ("size", Arg::Ints(vec![2, s[0], s[1], s[2]])),
                    ],
                );
                self.op(
                    "aten.select.int",
                    vec![("self", t(e)), ("dim", Arg::Int(0)), ("index", Arg::Int(1))],
                )
            }
            _ => x,
        };
        let [a, b, c] = self.shape(src)[..] else {
            unreachable!("rank 3")
        };
        let scaled = if self.rng.below(2) == 0 {
            self.op(
                "aten.mul.Scalar",
                vec![("self", t(src)), ("other", Arg::Float(0.5))],
            )
        } else {
            src
        };
        let permute = |g: &mut Self, v: ValueRef, dims: Vec<i64>| {
            g.op(
                "aten.permute.default",
                vec![("self", Arg::Tensor(v)), ("dims", Arg::Ints(dims))],
            )
        };
        if self.rng.below(2) == 0 {
            // q @ k^T with q and k both views of `src`: [b, a, c] @ [b, c, a].
            let q = permute(self, scaled, vec![1, 0, 2]);
            let kt = permute(self, src, vec![1, 2, 0]);
            self.op("aten.bmm.default", vec![("self", t(q)), ("mat2", t(kt))])
        } else {
            // A batch of c * b entries whose index is two strides apart in `src`.
            let u = self.op(
                "aten.unsqueeze.default",
                vec![("self", t(scaled)), ("dim", Arg::Int(3))],
            );
            let e = self.op(
                "aten.expand.default",
                vec![("self", t(u)), ("size", Arg::Ints(vec![a, b, c, 2]))],
            );
            let p = permute(self, e, vec![2, 1, 0, 3]);
            let v = self.op(
                "aten.view.default",
                vec![("self", t(p)), ("size", Arg::Ints(vec![c * b, a, 2]))],
            );
            let w = self.input(&[c * b, 2, 3]);
            self.op("aten.bmm.default", vec![("self", t(v)), ("mat2", t(w))])
        }
    }
}

/// A seeded random graph of elementwise, reduction, matmul, reshape and permute ops.
pub fn random_graph(seed: u64) -> Graph {
    let mut rng = Rng(seed);
    let dims = [2i64, 3, 4];
    let rank = 2 + rng.below(2);
    let shape: Vec<i64> = (0..rank).map(|_| dims[rng.below(3)]).collect();
    let mut g = Gen {
        b: GraphBuilder::default(),
        rng,
        pool: vec![],
        next: 0,
    };
    let x = g.input(&shape);
    g.pool.push(x);
    let steps = 6 + g.rng.below(10);
    for _ in 0..steps {
        g.step();
    }
    let last = *g.pool.last().unwrap();
    let mut outs = vec![last];
    let other = g.pool[g.rng.below(g.pool.len())];
    if other != last && other.node != 0 {
        outs.push(other);
    }
    g.b.finish(outs).unwrap()
}
