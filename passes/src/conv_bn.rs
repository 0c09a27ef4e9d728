//! Folding an inference batch norm into the convolution before it (`conv-bn`).
//!
//! `batch_norm(conv(x, W, c), γ, β, μ, σ², ε)` in evaluation mode is
//! `conv(x, W · s, (c - μ) · s + β)` with `s = γ / sqrt(σ² + ε)` per output channel (`c` is
//! the convolution's bias, 0 when absent): the normalization becomes part of the weights and
//! bias. The pass rewrites the pair that way when the weights, the bias and the batch norm's
//! statistics and affine parameters are all parameters, buffers or constants, so the scaled
//! weights and the new bias are computed from constants only: the compiler computes them once,
//! when it makes the artifact (constant folding of the kernel program), and the convolution's
//! kernel applies the bias (and a following ReLU) as it stores each tile, instead of an
//! elementwise epilogue doing four operations per element. PyTorch's own evaluation-mode
//! batch norm multiplies by `s` and adds `β - μ s` the same way; here the product by `s`
//! moves inside the convolution's sums, a rounding difference of an ulp or so per weight.
//!
//! Left alone: transposed convolutions, convolutions whose result has another use, batch
//! norms whose saved statistics (results 1 and 2) are used, training-mode batch norms, and
//! dtypes other than `f32` and `f64`.

use crate::{Changed, Cx, Pass};
use fxhlo_ir::{Arg, DType, Graph, InputKind, IrError, Node, NodeKind, Op, ValueRef};
use std::collections::{HashMap, HashSet};

/// The `conv-bn` pass.
pub struct ConvBn;

impl Pass for ConvBn {
    fn name(&self) -> &'static str {
        "conv-bn"
    }

    fn run(&self, g: &mut Graph, _cx: &mut Cx) -> Result<Changed, IrError> {
        let pairs = foldable(g);
        if pairs.is_empty() {
            return Ok(false);
        }
        rebuild(g, &pairs)?;
        Ok(true)
    }
}

/// The tensors of one foldable pair.
struct Pair {
    conv: usize,
    input: ValueRef,
    weight: ValueRef,
    conv_bias: Option<ValueRef>,
    gamma: Option<ValueRef>,
    beta: Option<ValueRef>,
    mean: ValueRef,
    var: ValueRef,
    eps: f64,
}

/// Foldable pairs, keyed by the batch norm's node.
fn foldable(g: &Graph) -> HashMap<usize, Pair> {
    let uses = g.use_counts();
    let used = |v: ValueRef| uses.get(&v).copied().unwrap_or(0);
    let constant = |v: ValueRef| matches!(g.nodes[v.node].kind, NodeKind::Input { kind, .. } if kind != InputKind::User);
    let tensor = |n: &Node, name: &str| match n.arg(name) {
        Some(Arg::Tensor(v)) => Some(Some(*v)),
        Some(Arg::None) | None => Some(None),
        _ => None,
    };
    let mut pairs = HashMap::new();
    for (i, bn) in g.nodes.iter().enumerate() {
        if bn.op() != Some(Op::NativeBatchNormLegitNoTraining) {
            continue;
        }
        let Some(Some(y)) = tensor(bn, "input") else {
            continue;
        };
        let conv = &g.nodes[y.node];
        if conv.op() != Some(Op::Convolution)
            || used(y) != 1
            || used(ValueRef::new(i, 1)) + used(ValueRef::new(i, 2)) != 0
            || !matches!(conv.arg("transposed"), Some(Arg::Bool(false)))
        {
            continue;
        }
        let (Some(Some(input)), Some(Some(weight)), Some(conv_bias)) = (
            tensor(conv, "input"),
            tensor(conv, "weight"),
            tensor(conv, "bias"),
        ) else {
            continue;
        };
        let (Some(gamma), Some(beta), Some(Some(mean)), Some(Some(var))) = (
            tensor(bn, "weight"),
            tensor(bn, "bias"),
            tensor(bn, "running_mean"),
            tensor(bn, "running_var"),
        ) else {
            continue;
        };
        let Some(Arg::Float(eps)) = bn.arg("eps") else {
            continue;
        };
        let wt = g.ty(weight);
        let Some(cout) = wt.static_shape().and_then(|s| s.first().copied()) else {
            continue;
        };
        let per_channel = [conv_bias, gamma, beta, Some(mean), Some(var)];
        let fits = matches!(wt.dtype, DType::F32 | DType::F64)
            && constant(weight)
            && per_channel.iter().flatten().all(|&v| {
                let t = g.ty(v);
                constant(v) && t.dtype == wt.dtype && t.static_shape() == Some(vec![cout])
            });
        if fits {
            pairs.insert(
                i,
                Pair {
                    conv: y.node,
                    input,
                    weight,
                    conv_bias,
                    gamma,
                    beta,
                    mean,
                    var,
                    eps: *eps,
                },
            );
        }
    }
    pairs
}

/// The graph again, each pair's convolution and batch norm replaced by the scale and bias
/// computations and a convolution of the scaled weights, at the batch norm's place. Built
/// beside the old graph, which is left as it was on an error.
fn rebuild(graph: &mut Graph, pairs: &HashMap<usize, Pair>) -> Result<(), IrError> {
    let folded_convs: HashSet<usize> = pairs.values().map(|p| p.conv).collect();
    let mut names: HashSet<String> = graph
        .nodes
        .iter()
        .flat_map(|n| std::iter::once(n.name.clone()).chain(n.result_names.iter().cloned()))
        .collect();
    let old = &graph.nodes;
    let mut g = Graph {
        nodes: Vec::with_capacity(old.len()),
        outputs: graph.outputs.clone(),
    };
    let g = &mut g;
    // Where each old value is now.
    let mut map: HashMap<ValueRef, ValueRef> = HashMap::new();
    let remap = |map: &HashMap<ValueRef, ValueRef>, v: &mut ValueRef| {
        if let Some(&n) = map.get(v) {
            *v = n;
        }
    };
    for (i, mut n) in old.iter().cloned().enumerate() {
        if folded_convs.contains(&i) {
            continue;
        }
        crate::rewrite::for_each_value_mut(&mut n.args, |v| remap(&map, v));
        let Some(p) = pairs.get(&i) else {
            let here = g.nodes.len();
            for k in 0..n.results.len() {
                map.insert(ValueRef::new(i, k), ValueRef::new(here, k));
            }
            g.nodes.push(n);
            continue;
        };
        let at = |v: ValueRef| map[&v];
        let mut b = Builder {
            g,
            names: &mut names,
            base: format!("{}_bn", old[p.conv].name),
        };
        let ve = b.push(
            Op::AddScalar,
            vec![Arg::Tensor(at(p.var)), Arg::Float(p.eps), Arg::Int(1)],
            "var_eps",
        )?;
        let mut s = b.push(Op::Rsqrt, vec![Arg::Tensor(ve)], "rstd")?;
        if let Some(gm) = p.gamma {
            s = b.push(
                Op::MulTensor,
                vec![Arg::Tensor(at(gm)), Arg::Tensor(s)],
                "scale",
            )?;
        }
        // Static: checked by `foldable`.
        let wshape = b.g.ty(at(p.weight)).static_shape().unwrap_or_default();
        let mut sshape = vec![1i64; wshape.len()];
        sshape[0] = wshape.first().copied().unwrap_or(1);
        let s_w = b.push(Op::View, vec![Arg::Tensor(s), Arg::Ints(sshape)], "scale_w")?;
        let w = b.push(
            Op::MulTensor,
            vec![Arg::Tensor(at(p.weight)), Arg::Tensor(s_w)],
            "weight",
        )?;
        // (c - μ) s + β, or β - μ s without a convolution bias.
        let sub = |b: &mut Builder, x: ValueRef, y: ValueRef, name: &str| {
            b.push(
                Op::SubTensor,
                vec![Arg::Tensor(x), Arg::Tensor(y), Arg::Int(1)],
                name,
            )
        };
        let bias = match p.conv_bias {
            Some(c) => {
                let d = sub(&mut b, at(c), at(p.mean), "centered_bias")?;
                let t = b.push(Op::MulTensor, vec![Arg::Tensor(d), Arg::Tensor(s)], "bias")?;
                match p.beta {
                    Some(be) => b.push(
                        Op::AddTensor,
                        vec![Arg::Tensor(t), Arg::Tensor(at(be)), Arg::Int(1)],
                        "shifted_bias",
                    )?,
                    None => t,
                }
            }
            None => {
                let ms = b.push(
                    Op::MulTensor,
                    vec![Arg::Tensor(at(p.mean)), Arg::Tensor(s)],
                    "mean_scaled",
                )?;
                match p.beta {
                    Some(be) => sub(&mut b, at(be), ms, "bias")?,
                    None => b.push(Op::Neg, vec![Arg::Tensor(ms)], "bias")?,
                }
            }
        };
        let mut conv = old[p.conv].clone();
        let slot = |name: &str| {
            Op::Convolution
                .param_index(name)
                .expect("convolution schema")
        };
        conv.args[slot("input")] = Arg::Tensor(at(p.input));
        conv.args[slot("weight")] = Arg::Tensor(w);
        conv.args[slot("bias")] = Arg::Tensor(bias);
        // The batch norm's result keeps its name: later nodes and dumps read the same value.
        conv.result_names = vec![n.result_names[0].clone()];
        let folded = b.push_node(conv)?;
        map.insert(ValueRef::new(i, 0), folded);
    }
    g.outputs.iter_mut().for_each(|v| remap(&map, v));
    *graph = std::mem::take(g);
    Ok(())
}

/// Appends op nodes with fresh names derived from the convolution's (`<conv>_bn_scale`, ...).
struct Builder<'a> {
    g: &'a mut Graph,
    names: &'a mut HashSet<String>,
    base: String,
}

impl Builder<'_> {
    fn push(&mut self, op: Op, args: Vec<Arg>, what: &str) -> Result<ValueRef, IrError> {
        let mut name = format!("{}_{what}", self.base);
        let mut k = 1;
        while self.names.contains(&name) {
            name = format!("{}_{what}_{k}", self.base);
            k += 1;
        }
        self.names.insert(name.clone());
        self.push_node(Node {
            name: name.clone(),
            kind: NodeKind::Op(op),
            args,
            result_names: vec![name],
            results: vec![],
        })
    }

    /// Appends `node` with its result types inferred; its first result.
    fn push_node(&mut self, node: Node) -> Result<ValueRef, IrError> {
        self.g.nodes.push(node);
        let i = self.g.nodes.len() - 1;
        self.g.nodes[i].results = self.g.infer_node(i)?;
        Ok(ValueRef::new(i, 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fxhlo_ir::text::{parse_graph, print_graph};

    const CONV_BN: &str = "graph {
  %x: f32[1, 2, 4, 4] = input
  %w: f32[3, 2, 3, 3] = parameter \"w\"
  %g: f32[3] = parameter \"g\"
  %b: f32[3] = parameter \"b\"
  %m: f32[3] = buffer \"m\"
  %v: f32[3] = buffer \"v\"
  %y: f32[1, 3, 4, 4] = aten.convolution.default(%x, %w, none, stride=[1, 1], padding=[1, 1], dilation=[1, 1], transposed=false, output_padding=[0, 0], groups=1)
  norm: %bn: f32[1, 3, 4, 4], %bn_mean: f32[0], %bn_rstd: f32[0] = aten._native_batch_norm_legit_no_training.default(%y, %g, %b, %m, %v, momentum=0.1, eps=1e-5)
  %r: f32[1, 3, 4, 4] = aten.relu.default(%bn)
  return %r
}
";

    #[test]
    fn folds_a_batch_norm_into_the_convolution() {
        let mut g = parse_graph(CONV_BN).unwrap();
        assert!(ConvBn.run(&mut g, &mut Cx::default()).unwrap());
        g.verify().unwrap();
        let text = print_graph(&g);
        assert!(!text.contains("batch_norm"), "{text}");
        assert_eq!(text.matches("aten.convolution").count(), 1, "{text}");
        // The convolution reads scaled weights and a new bias; its result keeps the name `bn`.
        assert!(
            text.contains(
                "y: %bn: f32[1, 3, 4, 4] = aten.convolution.default(%x, %y_bn_weight, %y_bn_bias"
            ),
            "{text}"
        );
        assert!(!ConvBn.run(&mut g, &mut Cx::default()).unwrap());
    }

    #[test]
    fn leaves_pairs_it_cannot_fold() {
        // Weights passed at run time, the saved statistics used, the convolution's result
        // read twice.
        let cases = [
            CONV_BN.replace(
                "%w: f32[3, 2, 3, 3] = parameter \"w\"",
                "%w: f32[3, 2, 3, 3] = input",
            ),
            CONV_BN.replace("return %r", "return %r, %bn_mean"),
            CONV_BN.replace("return %r", "return %r, %y"),
        ];
        for src in cases {
            let mut g = parse_graph(&src).unwrap();
            assert!(!ConvBn.run(&mut g, &mut Cx::default()).unwrap(), "{src}");
        }
    }
}
