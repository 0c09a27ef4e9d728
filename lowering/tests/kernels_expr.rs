//! Fused elementwise and row-reduction kernels built from small graphs, run by the fast
//! runtime and compared with the reference interpreter on random inputs
//! (`|a - e| <= 1e-5 + 1e-4 |e|` per element).

use fxhlo_ir::text::parse_graph;
use fxhlo_ir::{DType, Graph, Model, NodeId, NodeKind, ValueRef};
use fxhlo_lowering::kernels::expr::build;
use fxhlo_lowering::kernels::Slots;
use fxhlo_passes::fusion::{self, KernelKind};
use fxhlo_runtime::fast::expr::run_elementwise;
use fxhlo_runtime::fast::Src;
use fxhlo_runtime::{Data, Options, Tensor};
use std::collections::{BTreeMap, BTreeSet};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn shape_of(g: &Graph, v: ValueRef) -> Vec<usize> {
    g.ty(v)
        .shape
        .iter()
        .map(|d| d.as_static().unwrap() as usize)
        .collect()
}

/// Random user inputs (f32 in [-3, 3), bools, small ints) and every value of the graph from
/// the reference interpreter.
fn reference(g: &Graph, seed: u64) -> BTreeMap<ValueRef, Tensor> {
    let mut rng = Rng(seed);
    let mut inputs = BTreeMap::new();
    for i in g.user_inputs() {
        let v = ValueRef::new(i, 0);
        let t = g.ty(v);
        let shape = shape_of(g, v);
        let n: usize = shape.iter().product();
        let x = match t.dtype {
            DType::Bool => Tensor::from_bools(
                DType::Bool,
                shape,
                (0..n).map(|_| rng.next() < 0.5).collect(),
            ),
            DType::I64 => Tensor::from_i64s(
                DType::I64,
                shape,
                (0..n).map(|_| (rng.next() * 10.0) as i64).collect(),
            ),
            d => Tensor::from_f64s(d, shape, (0..n).map(|_| rng.next() * 6.0 - 3.0).collect()),
        };
        inputs.insert(g.nodes[i].name.clone(), x);
    }
    let mut all = g.clone();
    all.outputs = (0..g.nodes.len())
        .flat_map(|i| (0..g.nodes[i].results.len()).map(move |r| ValueRef::new(i, r)))
        .collect();
    let model = Model {
        graph: all.clone(),
        weights: Default::default(),
    };
    let outs = fxhlo_runtime::eval(&model, &inputs, &Options::default()).unwrap();
    all.outputs.into_iter().zip(outs).collect()
}

enum Buf {
    F(Vec<f32>),
    B(Vec<bool>),
    I(Vec<i64>),
}

fn buf(t: &Tensor) -> Buf {
    match &t.data {
        Data::B(v) => Buf::B(v.clone()),
        Data::I(v) => Buf::I(v.clone()),
        Data::F(v) => Buf::F(v.iter().map(|&x| x as f32).collect()),
    }
}

fn src(b: &Buf) -> Src<'_> {
    match b {
        Buf::F(v) => Src::F32(v),
        Buf::B(v) => Src::Bool(v),
        Buf::I(v) => Src::I64(v),
    }
}

fn close(got: &[f32], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (k, (&a, &e)) in got.iter().zip(want).enumerate() {
        let a = a as f64;
        let ok = if e.is_nan() {
            a.is_nan()
        } else if e.is_infinite() {
            a == e
        } else {
            (a - e).abs() <= 1e-5 + 1e-4 * e.abs()
        };
        assert!(ok, "{what}[{k}]: got {a:e}, expected {e:e}");
    }
}

fn graph(body: &str) -> Graph {
    parse_graph(&format!("graph {{\n{body}\n}}\n")).unwrap()
}

fn members(k: &fusion::Kernel) -> BTreeSet<NodeId> {
    k.nodes.iter().chain(&k.recomputed).copied().collect()
}

/// Compiles every elementwise kernel of `g` (one expression per distinct output shape, the
/// f32 outputs), runs it on the reference values of its operands and compares. Returns the
/// number of expressions run.
fn check_elementwise(g: &Graph) -> usize {
    let plan = fusion::plan(g);
    let vals = reference(g, 7);
    let mut count = 0;
    for k in plan
        .kernels
        .iter()
        .filter(|k| k.kind == KernelKind::Elementwise)
    {
        let mut by_shape: BTreeMap<Vec<usize>, Vec<ValueRef>> = BTreeMap::new();
        for &o in &k.outputs {
            if g.ty(o).dtype == DType::F32 {
                by_shape.entry(shape_of(g, o)).or_default().push(o);
            }
        }
        for (shape, roots) in by_shape {
            let mut slots = Slots::default();
            let e = build(g, &members(k), &roots, &shape, &mut slots)
                .unwrap_or_else(|m| panic!("{m}\n{plan}"));
            let bufs: Vec<Buf> = slots.values.iter().map(|v| buf(&vals[v])).collect();
            let srcs: Vec<Src> = bufs.iter().map(src).collect();
            e.validate(&srcs).unwrap();
            let n: usize = shape.iter().product();
            let mut outs: Vec<Vec<f32>> = roots.iter().map(|_| vec![f32::NAN; n]).collect();
            let mut refs: Vec<&mut [f32]> = outs.iter_mut().map(|o| o.as_mut_slice()).collect();
            run_elementwise(&e, &srcs, &mut refs);
            for (r, out) in roots.iter().zip(&outs) {
                close(out, &vals[r].f64s(), g.value_name(*r));
            }
            count += 1;
        }
    }
    count
}

#[test]
fn gelu_chain_with_broadcast_bias() {
    let g = graph(
        "  %x: f32[64, 300] = input
  %w: f32[300] = input
  %b: f32[300] = input
  %m: f32[64, 300] = aten.mul.Tensor(%x, %w)
  %a: f32[64, 300] = aten.add.Tensor(%m, %b)
  %g: f32[64, 300] = aten.gelu.default(%a)
  %s: f32[64, 300] = aten.sigmoid.default(%x)
  %p: f32[64, 300] = aten.mul.Tensor(%g, %s)
  %o: f32[64, 300] = aten.add.Tensor(%p, %x, alpha=2)
  %t: f32[64, 300] = aten.gelu.default(%o, approximate=\"tanh\")
  return %o, %t",
    );
    assert_eq!(check_elementwise(&g), 1);
}

#[test]
fn permute_expand_and_slice_fold_into_leaves() {
    let g = graph(
        "  %x: f32[8, 16, 32] = input
  %y: f32[32, 16, 8] = input
  %z: f32[4, 1, 6] = input
  %u: f32[5, 6] = input
  %w: f32[10, 40] = input
  %p: f32[8, 16, 32] = aten.permute.default(%y, dims=[2, 1, 0])
  %a: f32[8, 16, 32] = aten.add.Tensor(%p, %x)
  %r: f32[8, 16, 32] = aten.relu.default(%a)
  %e: f32[4, 5, 6] = aten.expand.default(%z, size=[4, 5, 6])
  %f: f32[4, 5, 6] = aten.mul.Tensor(%e, %u)
  %s: f32[10, 12] = aten.slice.Tensor(%w, dim=1, start=3, end=-1, step=3)
  %q: f32[10, 12] = aten.sub.Tensor(%s, %s, alpha=0.5)
  %sel: f32[12] = aten.select.int(%s, dim=0, index=-2)
  %t: f32[12] = aten.exp.default(%sel)
  %fl: f32[10, 40] = aten.flip.default(%w, dims=[0, 1])
  %fa: f32[10, 40] = aten.add.Tensor(%fl, %w)
  return %r, %f, %q, %t, %fa",
    );
    assert_eq!(check_elementwise(&g), 5);
}

#[test]
fn reshapes_of_computed_values_split_the_iteration_space() {
    // The heads merge of attention: view(permute(x * s)) with a split of the iteration dim.
    let g = graph(
        "  %x: f32[2, 8, 4, 6] = input
  %m: f32[2, 8, 4, 6] = aten.mul.Scalar(%x, other=0.5)
  %p: f32[2, 4, 8, 6] = aten.permute.default(%m, dims=[0, 2, 1, 3])
  %v: f32[8, 48] = aten.view.default(%p, size=[8, 48])
  %o: f32[8, 48] = aten.tanh.default(%v)
  %u: f32[2, 4, 8, 2, 3] = aten.view.default(%p, size=[2, 4, 8, 2, 3])
  %n: f32[2, 4, 8, 2, 3] = aten.neg.default(%u)
  %y: f32[16, 6, 8] = input
  %yy: f32[16, 6, 8] = aten.exp.default(%y)
  %yv: f32[4, 4, 48] = aten.view.default(%yy, size=[4, 4, 48])
  %yt: f32[4, 48, 4] = aten.permute.default(%yv, dims=[0, 2, 1])
  %ys: f32[4, 48, 4] = aten.sqrt.default(%yt)
  return %o, %n, %ys",
    );
    assert!(check_elementwise(&g) >= 3);
}

#[test]
fn masks_comparisons_and_where() {
    let g = graph(
        "  %x: f32[16, 24] = input
  %y: f32[16, 24] = input
  %mask: bool[16, 24] = input
  %gt: bool[16, 24] = aten.gt.Scalar(%x, other=0.5)
  %le: bool[16, 24] = aten.le.Tensor(%x, %y)
  %and: bool[16, 24] = aten.logical_and.default(%gt, %mask)
  %or: bool[16, 24] = aten.logical_or.default(%and, %le)
  %not: bool[16, 24] = aten.logical_not.default(%or)
  %z: f32[] = aten.scalar_tensor.default(s=-1.5, dtype=f32)
  %w: f32[16, 24] = aten.where.self(%not, %x, %z)
  %c: f32[16, 24] = aten._to_copy.default(%mask, dtype=f32)
  %o: f32[16, 24] = aten.add.Tensor(%w, %c)
  %eq: bool[16, 24] = aten.eq.Scalar(%y, other=0)
  %ne: bool[16, 24] = aten.ne.Tensor(%eq, %mask)
  %full: f32[16, 24] = aten.full.default(size=[16, 24], fill_value=2, dtype=f32)
  %fl: f32[16, 24] = aten.full_like.default(%x, fill_value=-3.25)
  %w2: f32[16, 24] = aten.where.self(%ne, %full, %fl)
  return %o, %w2",
    );
    assert!(check_elementwise(&g) >= 1);
}

#[test]
fn math_ops_match_the_interpreter() {
    let g = graph(
        "  %x: f32[7, 33] = input
  %y: f32[7, 33] = input
  %a: f32[7, 33] = aten.abs.default(%x)
  %l: f32[7, 33] = aten.log1p.default(%a)
  %e: f32[7, 33] = aten.expm1.default(%y)
  %r: f32[7, 33] = aten.rsqrt.default(%a)
  %sq: f32[7, 33] = aten.sqrt.default(%a)
  %p2: f32[7, 33] = aten.pow.Tensor_Scalar(%x, exponent=2)
  %p3: f32[7, 33] = aten.pow.Tensor_Scalar(%x, exponent=3)
  %pm: f32[7, 33] = aten.pow.Tensor_Scalar(%a, exponent=-1.5)
  %pt: f32[7, 33] = aten.pow.Tensor_Tensor(%a, %y)
  %d: f32[7, 33] = aten.div.Tensor(%x, %y)
  %df: f32[7, 33] = aten.div.Tensor_mode(%x, %y, rounding_mode=\"floor\")
  %dt: f32[7, 33] = aten.div.Tensor_mode(%x, %y, rounding_mode=\"trunc\")
  %mx: f32[7, 33] = aten.maximum.default(%x, %y)
  %mn: f32[7, 33] = aten.minimum.default(%x, %y)
  %cl: f32[7, 33] = aten.clamp.default(%x, min=-1, max=0.5)
  %cm: f32[7, 33] = aten.clamp.default(%y, min=0)
  %lr: f32[7, 33] = aten.leaky_relu.default(%x, negative_slope=0.2)
  %ht: f32[7, 33] = aten.hardtanh.default(%y, min_val=-0.5, max_val=2)
  %el: f32[7, 33] = aten.elu.default(%x)
  %ng: f32[7, 33] = aten.neg.default(%y)
  %rc: f32[7, 33] = aten.reciprocal.default(%x)
  %th: f32[7, 33] = aten.tanh.default(%x)
  %er: f32[7, 33] = aten.erf.default(%y)
  %lg: f32[7, 33] = aten.log.default(%a)
  %sg: f32[7, 33] = aten.sign.default(%x)
  %fm: f32[7, 33] = aten.fmod.Tensor(%x, %y)
  %rm: f32[7, 33] = aten.remainder.Scalar(%x, other=0.7)
  %ct: f32[7, 33] = aten.clamp.Tensor(%x, %y)
  %rl: f32[7, 33] = aten.relu.default(%y)
  %fl: f32[7, 33] = aten.floor.default(%x)
  %rn: f32[7, 33] = aten.round.default(%y)
  %at: f32[7, 33] = aten.atan2.default(%x, %y)
  %sn: f32[7, 33] = aten.sin.default(%x)
  %ps: f32[7, 33] = aten.pow.Scalar(%y, self=2.5)
  %sub: f32[7, 33] = aten.sub.Scalar(%x, other=1.25, alpha=3)
  return %l, %e, %r, %sq, %p2, %p3, %pm, %pt, %d, %df, %dt, %mx, %mn, %cl, %cm, %lr, %ht, %el, %ng, %rc, %th, %er, %lg, %sg, %fm, %rm, %ct, %rl, %fl, %rn, %at, %sn, %ps, %sub",
    );
    check_elementwise(&g);
}

#[test]
fn inference_batch_norm_and_iota() {
    let g = graph(
        "  %x: f32[2, 3, 4, 5] = input
  %mean: f32[3] = input
  %var0: f32[3] = input
  %w: f32[3] = input
  %b: f32[3] = input
  %var: f32[3] = aten.abs.default(%var0)
  bn: %o: f32[2, 3, 4, 5], %m: f32[0], %r: f32[0] = aten._native_batch_norm_legit_no_training.default(%x, %w, %b, %mean, %var, momentum=0.1, eps=1e-5)
  %ar: i64[5] = aten.arange.start_step(start=2, end=12, step=2)
  %af: f32[5] = aten._to_copy.default(%ar, dtype=f32)
  %y: f32[2, 3, 4, 5] = aten.add.Tensor(%o, %af)
  %fr: f32[4] = aten.arange.start_step(start=0.5, end=2.5, step=0.5, dtype=f32)
  %fv: f32[4, 1] = aten.unsqueeze.default(%fr, dim=1)
  %z: f32[2, 3, 4, 5] = aten.mul.Tensor(%y, %fv)
  return %z",
    );
    assert_eq!(check_elementwise(&g), 1);
}

#[test]
fn unsupported_ops_and_dtypes_are_errors_naming_the_node() {
    let g = graph(
        "  %x: f32[4, 6] = input
  %i: i64[4, 6] = input
  %r: f32[8, 6] = aten.repeat.default(%x, repeats=[2, 1])
  %e: f32[8, 6] = aten.exp.default(%r)
  %j: i64[4, 6] = aten.add.Tensor(%i, %i)
  %f: f32[4, 6] = aten._to_copy.default(%j, dtype=f32)
  %o: f32[4, 6] = aten.mul.Tensor(%f, %x)
  return %e, %o",
    );
    let plan = fusion::plan(&g);
    let mut errors = vec![];
    for k in plan
        .kernels
        .iter()
        .filter(|k| k.kind == KernelKind::Elementwise)
    {
        let root = *k.outputs.last().unwrap();
        let shape = shape_of(&g, root);
        let mut slots = Slots::default();
        match build(&g, &members(k), &[root], &shape, &mut slots) {
            Ok(_) => panic!("kernel {k:?} should not compile"),
            Err(m) => errors.push(m),
        }
    }
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors
            .iter()
            .any(|m| m.contains("'r' (aten.repeat.default)")),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|m| m.contains("'j' (aten.add.Tensor)") && m.contains("i64")),
        "{errors:?}"
    );
    // A root whose shape is not the iteration space is refused; a bool root is built (its
    // 0/1 values are stored as bools by the runtime).
    let g = graph(
        "  %x: f32[4, 6] = input
  %b: bool[4, 6] = aten.gt.Scalar(%x, other=0)
  return %b",
    );
    let all: BTreeSet<NodeId> = (0..g.nodes.len())
        .filter(|&i| matches!(g.nodes[i].kind, NodeKind::Op(_)))
        .collect();
    let x = ValueRef::new(0, 0);
    assert!(build(&g, &all, &[x], &[6, 4], &mut Slots::default()).is_err());
    assert!(build(
        &g,
        &all,
        &[ValueRef::new(1, 0)],
        &[4, 6],
        &mut Slots::default()
    )
    .is_ok());
}

/// Compiles every reduction kernel of `g`, runs it on the reference values of its operands
/// and compares every output. Returns the number of kernels run.
/// Runs a row reduction whose outputs are `outputs` and compares each with the reference.
fn run_and_compare(
    g: &Graph,
    rr: &fxhlo_runtime::fast::reduce::RowReduce,
    srcs: &[Src],
    outputs: &[ValueRef],
    vals: &BTreeMap<ValueRef, Tensor>,
) -> Vec<Vec<f32>> {
    use fxhlo_runtime::fast::reduce::run_row_reduce;
    use fxhlo_runtime::fast::Dst;
    let mut outs: Vec<Vec<f32>> = outputs
        .iter()
        .map(|&o| vec![f32::NAN; shape_of(g, o).iter().product()])
        .collect();
    let mut dsts: Vec<Dst> = outs.iter_mut().map(|o| Dst::F32(o)).collect();
    run_row_reduce(rr, srcs, &mut dsts).unwrap_or_else(|m| panic!("{m}\n{rr:?}"));
    for (o, out) in outputs.iter().zip(&outs) {
        close(out, &vals[o].f64s(), g.value_name(*o));
    }
    outs
}

fn check_reductions(g: &Graph, seed: u64) -> usize {
    use fxhlo_runtime::fast::reduce::run_row_reduce;
    use fxhlo_runtime::fast::Dst;
    let plan = fusion::plan(g);
    let vals = reference(g, seed);
    let mut count = 0;
    for k in plan
        .kernels
        .iter()
        .filter(|k| k.kind == KernelKind::Reduction)
    {
        let mut slots = Slots::default();
        let rr = fxhlo_lowering::kernels::reduce::build(g, k, &mut slots)
            .unwrap_or_else(|m| panic!("{m}\n{plan}"));
        let bufs: Vec<Buf> = slots.values.iter().map(|v| buf(&vals[v])).collect();
        let srcs: Vec<Src> = bufs.iter().map(src).collect();
        let outs = run_and_compare(g, &rr, &srcs, &k.outputs, &vals);
        // A second run gives bitwise the same results (fixed blocks and summation order).
        let mut again: Vec<Vec<f32>> = outs.iter().map(|o| vec![0.0; o.len()]).collect();
        let mut dsts: Vec<Dst> = again.iter_mut().map(|o| Dst::F32(o)).collect();
        run_row_reduce(&rr, &srcs, &mut dsts).unwrap();
        for (a, b) in outs.iter().zip(&again) {
            assert!(a.iter().zip(b).all(|(p, q)| p.to_bits() == q.to_bits()));
        }
        count += 1;
    }
    count
}

#[test]
fn softmax_of_scaled_masked_scores_with_epilogue() {
    let g = graph(
        "  %x: f32[6, 8192] = input
  %mask: f32[8192] = input
  %s: f32[6, 8192] = aten.mul.Scalar(%x, other=4.0)
  %a: f32[6, 8192] = aten.add.Tensor(%s, %mask)
  %sm: f32[6, 8192] = aten._softmax.default(%a, dim=-1, half_to_float=false)
  %o: f32[6, 8192] = aten.mul.Scalar(%sm, other=0.5)
  %y: f32[3, 5, 7] = input
  %ls: f32[3, 5, 7] = aten._log_softmax.default(%y, dim=2, half_to_float=false)
  %y2: f32[3, 5, 7] = aten.mul.Scalar(%y, other=0.25)
  %sm2: f32[3, 5, 7] = aten._softmax.default(%y2, dim=2, half_to_float=false)
  return %o, %ls, %sm2",
    );
    assert_eq!(check_reductions(&g, 3), 3);
}

#[test]
fn layer_norm_with_residual_and_affine_epilogue() {
    let g = graph(
        "  %x: f32[2, 10, 64] = input
  %r: f32[2, 10, 64] = input
  %w: f32[64] = input
  %b: f32[64] = input
  %g2: f32[64] = input
  %y: f32[2, 10, 64] = aten.add.Tensor(%x, %r)
  ln: %n: f32[2, 10, 64], %mean: f32[2, 10, 1], %rstd: f32[2, 10, 1] = aten.native_layer_norm.default(%y, %w, %b, normalized_shape=[64], eps=1e-5)
  %m: f32[2, 10, 64] = aten.mul.Tensor(%n, %g2)
  %o: f32[2, 10, 64] = aten.add.Tensor(%m, %y)
  %z: f32[4, 3, 8192] = input
  ln2: %n2: f32[4, 3, 8192], %mean2: f32[4, 1, 1], %rstd2: f32[4, 1, 1] = aten.native_layer_norm.default(%z, none, none, normalized_shape=[3, 8192], eps=1e-6)
  return %o, %mean, %rstd, %y, %n2",
    );
    assert_eq!(check_reductions(&g, 4), 2);
}

#[test]
fn sums_means_extrema_and_variances() {
    let g = graph(
        "  %x: f32[5, 6, 8192] = input
  %e: f32[5, 6, 8192] = aten.exp.default(%x)
  %s: f32[5, 6] = aten.sum.dim_IntList(%e, dim=[-1])
  %l: f32[5, 6] = aten.log.default(%s)
  %t: f32[5] = input
  %m: f32[5, 1, 1] = aten.mean.dim(%x, dim=[1, 2], keepdim=true)
  %c: f32[6, 8192] = aten.sum.dim_IntList(%x, dim=[0])
  %mx: f32[5, 6, 1] = aten.amax.default(%x, dim=[2], keepdim=true)
  %d: f32[5, 6, 8192] = aten.sub.Tensor(%x, %mx)
  %de: f32[5, 6, 8192] = aten.exp.default(%d)
  %mn: f32[6] = aten.amin.default(%x, dim=[0, 2])
  %v: f32[5, 6] = aten.var.correction(%x, dim=[2], correction=1)
  %vb: f32[5, 8192] = aten.var.correction(%x, dim=[1], correction=0, keepdim=false)
  %n: f32[2, 3, 4, 5] = input
  %nm: f32[2, 3, 1, 1] = aten.mean.dim(%n, dim=[2, 3], keepdim=true)
  %all: f32[] = aten.mean.default(%n)
  return %l, %m, %c, %de, %mn, %v, %vb, %nm, %all",
    );
    assert!(check_reductions(&g, 5) >= 8);
}

#[test]
fn unsupported_reductions_are_errors() {
    let g = graph(
        "  %x: f32[4, 6] = input
  %s: f32[4, 6] = aten._softmax.default(%x, dim=0, half_to_float=false)
  %p: f32[4] = aten.prod.dim_int(%x, dim=1)
  %a: i64[4] = aten.argmax.default(%x, dim=1)
  return %s, %p, %a",
    );
    let plan = fusion::plan(&g);
    let mut n = 0;
    for k in plan
        .kernels
        .iter()
        .filter(|k| k.kind == KernelKind::Reduction)
    {
        let e = fxhlo_lowering::kernels::reduce::build(&g, k, &mut Slots::default()).unwrap_err();
        assert!(e.contains(&g.nodes[k.root].name), "{e}");
        n += 1;
    }
    assert_eq!(n, 3);
}

#[test]
fn corrupted_row_reductions_are_rejected_before_running() {
    use fxhlo_runtime::fast::reduce::run_row_reduce;
    use fxhlo_runtime::fast::Dst;
    let g = graph(
        "  %x: f32[4, 16] = input
  %m: f32[4, 1] = aten.amax.default(%x, dim=[1], keepdim=true)
  %d: f32[4, 16] = aten.sub.Tensor(%x, %m)
  %e: f32[4, 16] = aten.exp.default(%d)
  return %e, %m",
    );
    let plan = fusion::plan(&g);
    let k = plan
        .kernels
        .iter()
        .find(|k| k.kind == KernelKind::Reduction)
        .unwrap();
    let mut slots = Slots::default();
    let rr = fxhlo_lowering::kernels::reduce::build(&g, k, &mut slots).unwrap();
    let x = vec![0.5f32; 64];
    let srcs = [Src::F32(&x)];
    rr.validate(&srcs).unwrap();
    let mut bad_rows = rr.clone();
    bad_rows.rows = 3;
    let mut bad_len = rr.clone();
    bad_len.stages[0].len = 17;
    let mut bad_slot = rr.clone();
    bad_slot.stages[0].prologue.map_slots(|s| s + 5);
    // A prologue may read earlier stages' outputs only; a first stage has none.
    let mut bad_scratch = rr.clone();
    bad_scratch.stages[0].prologue.map_slots(|s| s + 5);
    let mut no_stage = rr.clone();
    no_stage.stages.clear();
    // An earlier stage whose output would be a whole (non-row) expression.
    let mut whole_early = rr.clone();
    let mut early = rr.stages[0].clone();
    early.outputs = vec![fxhlo_runtime::fast::reduce::RowOut::Whole {
        expr: rr.stages[0].prologue.clone(),
    }];
    whole_early.stages.insert(0, early);
    for bad in [
        bad_rows,
        bad_len,
        bad_slot,
        bad_scratch,
        no_stage,
        whole_early,
    ] {
        assert!(bad.validate(&srcs).is_err(), "{bad:?}");
        let mut a = vec![0f32; 64];
        let mut b = vec![0f32; 4];
        let mut dsts = [Dst::F32(&mut a), Dst::F32(&mut b)];
        assert!(run_row_reduce(&bad, &srcs, &mut dsts).is_err());
    }
    // Buffers of the wrong size are refused too.
    let mut a = vec![0f32; 64];
    let mut b = vec![0f32; 5];
    assert!(run_row_reduce(&rr, &srcs, &mut [Dst::F32(&mut a), Dst::F32(&mut b)]).is_err());
}

/// Compiles the reduction kernels of `g` as the stages of one row kernel (the earlier kernels'
/// outputs kept in scratch), runs it and compares the last kernel's outputs; `Err` where the
/// kernels do not chain.
fn check_chain(g: &Graph, seed: u64) -> Result<usize, String> {
    let plan = fusion::plan(g);
    let vals = reference(g, seed);
    let ks: Vec<&fusion::Kernel> = plan
        .kernels
        .iter()
        .filter(|k| k.kind == KernelKind::Reduction)
        .collect();
    let last = ks.last().expect("a reduction");
    let mut slots = Slots::default();
    let rr = fxhlo_lowering::kernels::reduce::build_chain(g, &ks, &mut slots)?;
    let bufs: Vec<Buf> = slots.values.iter().map(|v| buf(&vals[v])).collect();
    let srcs: Vec<Src> = bufs.iter().map(src).collect();
    // No earlier reduction's output is read: each stays inside.
    for v in &slots.values {
        let inner = ks.iter().any(|k| k.outputs.contains(v));
        assert!(!inner, "{} is read", g.value_name(*v));
    }
    run_and_compare(g, &rr, &srcs, &last.outputs, &vals);
    Ok(rr.stages.len())
}

#[test]
fn chained_row_reductions_keep_earlier_outputs_in_scratch() {
    // Layer norm, then softmax of its scaled rows (several row blocks).
    let g = graph(
        "  %x: f32[64, 1024] = input
  %w: f32[1024] = input
  %b: f32[1024] = input
  ln: %n: f32[64, 1024], %mean: f32[64, 1], %rstd: f32[64, 1] = aten.native_layer_norm.default(%x, %w, %b, normalized_shape=[1024], eps=1e-5)
  %s: f32[64, 1024] = aten.mul.Scalar(%n, other=3.0)
  %sm: f32[64, 1024] = aten._softmax.default(%s, dim=-1, half_to_float=false)
  return %sm",
    );
    assert_eq!(check_chain(&g, 6), Ok(2));
    // Softmax under the all-masked-row guard. Rows whose first element is <= 0 are masked
    // whole (-inf): the guard gives them zeros, where a bare softmax gives NaN.
    let masked = "  %x0: f32[3, 5, 40] = input
  %c: f32[3, 5, 1] = aten.slice.Tensor(%x0, dim=2, start=0, end=1, step=1)
  %le: bool[3, 5, 1] = aten.le.Scalar(%c, other=0.0)
  %ninf: f32[3, 5, 1] = aten.full.default(size=[3, 5, 1], fill_value=-inf, dtype=f32)
  %zero: f32[3, 5, 1] = aten.full.default(size=[3, 5, 1], fill_value=0, dtype=f32)
  %pad: f32[3, 5, 1] = aten.where.self(%le, %ninf, %zero)
  %x: f32[3, 5, 40] = aten.add.Tensor(%x0, %pad)
  %eq: bool[3, 5, 40] = aten.eq.Scalar(%x, other=-inf)
  %ne: bool[3, 5, 40] = aten.logical_not.default(%eq)
  %any: bool[3, 5, 1] = aten.any.dim(%ne, dim=-1, keepdim=true)
  %masked: bool[3, 5, 1] = aten.logical_not.default(%any)
  %z: f32[3, 5, 40] = aten.full.default(size=[3, 5, 40], fill_value=0, dtype=f32)
  %sm: f32[3, 5, 40] = aten._softmax.default(%x, dim=-1, half_to_float=false)
  %p: f32[3, 5, 40] = aten.where.self(%masked, %z, %sm)
";
    // The guard and the softmax read the same rows: one safe-softmax stage, no `any` stage.
    let g = graph(&format!("{masked}  return %p"));
    assert_eq!(check_chain(&g, 7), Ok(1));
    // A log-softmax of an exp on top takes the `where` into its prologue: then the guard is
    // a stage of its own, kept in scratch (three stages).
    let g = graph(&format!(
        "{masked}  %e: f32[3, 5, 40] = aten.exp.default(%p)
  %ls: f32[3, 5, 40] = aten._log_softmax.default(%e, dim=-1, half_to_float=false)
  return %ls"
    ));
    assert_eq!(check_chain(&g, 7), Ok(3));
    // Rows that differ (a softmax over the last dim, then a sum over the first) do not chain.
    let g = graph(
        "  %x: f32[4, 8] = input
  %sm: f32[4, 8] = aten._softmax.default(%x, dim=-1, half_to_float=false)
  %t: f32[8] = aten.sum.dim_IntList(%sm, dim=[0])
  return %t",
    );
    assert!(check_chain(&g, 8).is_err());
}
