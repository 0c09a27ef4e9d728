//! Composite-pattern recognition: every form of every kind is found, with its nodes, inputs
//! and output; groups whose interior values escape are not reported.

use fxhlo_ir::text::parse_graph;
use fxhlo_passes::composite::{find, print, CompositeKind};
use fxhlo_passes::{Cx, PassManager};

/// `(kind, output name, node names)` of every composite of `src`.
fn found(src: &str) -> Vec<(CompositeKind, String, Vec<String>)> {
    let g = parse_graph(src).unwrap();
    g.verify().unwrap();
    find(&g)
        .into_iter()
        .map(|c| {
            (
                c.kind,
                g.value_name(c.output).to_string(),
                c.nodes.iter().map(|&n| g.nodes[n].name.clone()).collect(),
            )
        })
        .collect()
}

fn kinds(src: &str) -> Vec<CompositeKind> {
    found(src).into_iter().map(|c| c.0).collect()
}

fn graph(body: &str, ret: &str) -> String {
    format!("graph {{\n  %x: f32[2, 8] = input\n{body}  return {ret}\n}}\n")
}

#[test]
fn softmax_op_and_decomposed() {
    let op = graph(
        "  %s: f32[2, 8] = aten._softmax.default(%x, dim=-1, half_to_float=false)\n",
        "%s",
    );
    assert_eq!(
        found(&op),
        vec![(CompositeKind::Softmax, "s".into(), vec!["s".into()])]
    );
    let dec = graph(
        "  %m: f32[2, 1] = aten.amax.default(%x, dim=[-1], keepdim=true)\n  %d: f32[2, 8] = aten.sub.Tensor(%x, %m)\n  %e: f32[2, 8] = aten.exp.default(%d)\n  %s: f32[2, 1] = aten.sum.dim_IntList(%e, dim=[-1], keepdim=true)\n  %r: f32[2, 8] = aten.div.Tensor(%e, %s)\n",
        "%r",
    );
    let f = found(&dec);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].0, CompositeKind::Softmax);
    assert_eq!(f[0].1, "r");
    assert_eq!(f[0].2, ["m", "d", "e", "s", "r"]);
    // exp(x) * reciprocal(sum(exp(x))), without the max shift
    let recip = graph(
        "  %e: f32[2, 8] = aten.exp.default(%x)\n  %s: f32[2, 1] = aten.sum.dim_IntList(%e, dim=[1], keepdim=true)\n  %q: f32[2, 1] = aten.reciprocal.default(%s)\n  %r: f32[2, 8] = aten.mul.Tensor(%e, %q)\n",
        "%r",
    );
    assert_eq!(kinds(&recip), [CompositeKind::Softmax]);
    // A max shift over other dims than the sum is not a softmax.
    let wrong = graph(
        "  %m: f32[2, 1] = aten.amax.default(%x, dim=[-1], keepdim=true)\n  %d: f32[2, 8] = aten.sub.Tensor(%x, %m)\n  %e: f32[2, 8] = aten.exp.default(%d)\n  %s: f32[1, 8] = aten.sum.dim_IntList(%e, dim=[0], keepdim=true)\n  %r: f32[2, 8] = aten.div.Tensor(%e, %s)\n",
        "%r",
    );
    assert!(kinds(&wrong).is_empty());
}

#[test]
fn escaping_interior_value_is_not_a_composite() {
    let src = graph(
        "  %e: f32[2, 8] = aten.exp.default(%x)\n  %s: f32[2, 1] = aten.sum.dim_IntList(%e, dim=[-1], keepdim=true)\n  %r: f32[2, 8] = aten.div.Tensor(%e, %s)\n",
        "%r, %e",
    );
    assert!(kinds(&src).is_empty());
}

#[test]
fn log_softmax_op_and_decomposed() {
    let op = graph(
        "  %s: f32[2, 8] = aten._log_softmax.default(%x, dim=1, half_to_float=false)\n",
        "%s",
    );
    assert_eq!(kinds(&op), [CompositeKind::LogSoftmax]);
    let dec = graph(
        "  %m: f32[2, 1] = aten.amax.default(%x, dim=[-1], keepdim=true)\n  %d: f32[2, 8] = aten.sub.Tensor(%x, %m)\n  %e: f32[2, 8] = aten.exp.default(%d)\n  %s: f32[2, 1] = aten.sum.dim_IntList(%e, dim=[-1], keepdim=true)\n  %l: f32[2, 1] = aten.log.default(%s)\n  %r: f32[2, 8] = aten.sub.Tensor(%d, %l)\n",
        "%r",
    );
    let f = found(&dec);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].0, CompositeKind::LogSoftmax);
    assert_eq!(f[0].2.len(), 6);
}

#[test]
fn layer_norm_op_and_decomposed() {
    let op = "graph {\n  %x: f32[2, 8] = input\n  %w: f32[8] = input\n  %b: f32[8] = input\n  ln: %y: f32[2, 8], %m: f32[2, 1], %r: f32[2, 1] = aten.native_layer_norm.default(%x, %w, %b, normalized_shape=[8], eps=1e-5)\n  return %y\n}\n";
    assert_eq!(kinds(op), [CompositeKind::LayerNorm]);
    // mean / var(correction=0) / rsqrt, then * w + b
    let dec = "graph {\n  %x: f32[2, 8] = input\n  %w: f32[8] = input\n  %b: f32[8] = input\n  %m: f32[2, 1] = aten.mean.dim(%x, dim=[-1], keepdim=true)\n  %d: f32[2, 8] = aten.sub.Tensor(%x, %m)\n  %v: f32[2, 1] = aten.var.correction(%x, dim=[-1], correction=0, keepdim=true)\n  %ve: f32[2, 1] = aten.add.Scalar(%v, other=1e-5)\n  %rs: f32[2, 1] = aten.rsqrt.default(%ve)\n  %n: f32[2, 8] = aten.mul.Tensor(%d, %rs)\n  %nw: f32[2, 8] = aten.mul.Tensor(%n, %w)\n  %y: f32[2, 8] = aten.add.Tensor(%nw, %b)\n  return %y\n}\n";
    let f = found(dec);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].0, CompositeKind::LayerNorm);
    assert_eq!(f[0].1, "y");
    assert_eq!(f[0].2.len(), 8);
    // mean of squares, / sqrt, no affine
    let sq = "graph {\n  %x: f32[2, 8] = input\n  %m: f32[2, 1] = aten.mean.dim(%x, dim=[1], keepdim=true)\n  %d: f32[2, 8] = aten.sub.Tensor(%x, %m)\n  %p: f32[2, 8] = aten.pow.Tensor_Scalar(%d, exponent=2)\n  %v: f32[2, 1] = aten.mean.dim(%p, dim=[1], keepdim=true)\n  %ve: f32[2, 1] = aten.add.Scalar(%v, other=1e-5)\n  %s: f32[2, 1] = aten.sqrt.default(%ve)\n  %y: f32[2, 8] = aten.div.Tensor(%d, %s)\n  return %y\n}\n";
    let f = found(sq);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!((f[0].0, f[0].2.len()), (CompositeKind::LayerNorm, 7));
    // A residual add of a full-shape tensor is not taken as the bias.
    let res = "graph {\n  %x: f32[2, 8] = input\n  %m: f32[2, 1] = aten.mean.dim(%x, dim=[1], keepdim=true)\n  %d: f32[2, 8] = aten.sub.Tensor(%x, %m)\n  %q: f32[2, 8] = aten.mul.Tensor(%d, %d)\n  %v: f32[2, 1] = aten.mean.dim(%q, dim=[1], keepdim=true)\n  %ve: f32[2, 1] = aten.add.Scalar(%v, other=1e-5)\n  %rs: f32[2, 1] = aten.rsqrt.default(%ve)\n  %n: f32[2, 8] = aten.mul.Tensor(%rs, %d)\n  %y: f32[2, 8] = aten.add.Tensor(%n, %x)\n  return %y\n}\n";
    let f = found(res);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].1, "n");
    // Normalizing over a leading dim is not a layer norm.
    let lead = "graph {\n  %x: f32[2, 8] = input\n  %m: f32[1, 8] = aten.mean.dim(%x, dim=[0], keepdim=true)\n  %d: f32[2, 8] = aten.sub.Tensor(%x, %m)\n  %v: f32[1, 8] = aten.var.correction(%x, dim=[0], correction=0, keepdim=true)\n  %ve: f32[1, 8] = aten.add.Scalar(%v, other=1e-5)\n  %rs: f32[1, 8] = aten.rsqrt.default(%ve)\n  %n: f32[2, 8] = aten.mul.Tensor(%d, %rs)\n  return %n\n}\n";
    assert!(kinds(lead).is_empty());
}

#[test]
fn gelu_op_erf_and_tanh_forms() {
    let op = graph(
        "  %g: f32[2, 8] = aten.gelu.default(%x, approximate=\"tanh\")\n",
        "%g",
    );
    assert_eq!(kinds(&op), [CompositeKind::Gelu]);
    // torch: x * 0.5 * (1 + erf(x * M_SQRT1_2))
    let erf = graph(
        "  %a: f32[2, 8] = aten.mul.Scalar(%x, other=0.5)\n  %b: f32[2, 8] = aten.mul.Scalar(%x, other=0.7071067811865476)\n  %c: f32[2, 8] = aten.erf.default(%b)\n  %d: f32[2, 8] = aten.add.Scalar(%c, other=1)\n  %g: f32[2, 8] = aten.mul.Tensor(%a, %d)\n",
        "%g",
    );
    let f = found(&erf);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!((f[0].0, f[0].2.len()), (CompositeKind::Gelu, 5));
    // (x * (1 + erf(x / sqrt 2))) * 0.5
    let erf2 = graph(
        "  %b: f32[2, 8] = aten.div.Scalar(%x, other=1.4142135623730951)\n  %c: f32[2, 8] = aten.erf.default(%b)\n  %d: f32[2, 8] = aten.add.Scalar(%c, other=1.0)\n  %e: f32[2, 8] = aten.mul.Tensor(%d, %x)\n  %g: f32[2, 8] = aten.mul.Scalar(%e, other=0.5)\n",
        "%g",
    );
    assert_eq!(
        found(&erf2),
        vec![(
            CompositeKind::Gelu,
            "g".into(),
            ["b", "c", "d", "e", "g"].map(String::from).to_vec()
        )]
    );
    // GPT-2: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
    let tanh = graph(
        "  %a: f32[2, 8] = aten.mul.Scalar(%x, other=0.5)\n  %p: f32[2, 8] = aten.pow.Tensor_Scalar(%x, exponent=3.0)\n  %q: f32[2, 8] = aten.mul.Scalar(%p, other=0.044715)\n  %r: f32[2, 8] = aten.add.Tensor(%x, %q)\n  %s: f32[2, 8] = aten.mul.Scalar(%r, other=0.7978845608028654)\n  %t: f32[2, 8] = aten.tanh.default(%s)\n  %u: f32[2, 8] = aten.add.Scalar(%t, other=1.0)\n  %g: f32[2, 8] = aten.mul.Tensor(%a, %u)\n",
        "%g",
    );
    let f = found(&tanh);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!((f[0].0, f[0].2.len()), (CompositeKind::Gelu, 8));
    // x^3 as x * x * x
    let cube = graph(
        "  %a: f32[2, 8] = aten.mul.Scalar(%x, other=0.5)\n  %p1: f32[2, 8] = aten.mul.Tensor(%x, %x)\n  %p: f32[2, 8] = aten.mul.Tensor(%p1, %x)\n  %q: f32[2, 8] = aten.mul.Scalar(%p, other=0.044715)\n  %r: f32[2, 8] = aten.add.Tensor(%q, %x)\n  %s: f32[2, 8] = aten.mul.Scalar(%r, other=0.7978845608028654)\n  %t: f32[2, 8] = aten.tanh.default(%s)\n  %u: f32[2, 8] = aten.add.Scalar(%t, other=1.0)\n  %g: f32[2, 8] = aten.mul.Tensor(%u, %a)\n",
        "%g",
    );
    assert_eq!(kinds(&cube), [CompositeKind::Gelu]);
    // A wrong constant is not a GELU.
    let wrong = graph(
        "  %a: f32[2, 8] = aten.mul.Scalar(%x, other=0.25)\n  %b: f32[2, 8] = aten.mul.Scalar(%x, other=0.7071067811865476)\n  %c: f32[2, 8] = aten.erf.default(%b)\n  %d: f32[2, 8] = aten.add.Scalar(%c, other=1)\n  %g: f32[2, 8] = aten.mul.Tensor(%a, %d)\n",
        "%g",
    );
    assert!(kinds(&wrong).is_empty());
}

#[test]
fn silu() {
    let src = graph(
        "  %s: f32[2, 8] = aten.sigmoid.default(%x)\n  %y: f32[2, 8] = aten.mul.Tensor(%s, %x)\n",
        "%y",
    );
    assert_eq!(
        found(&src),
        vec![(
            CompositeKind::Silu,
            "y".into(),
            vec!["s".into(), "y".into()]
        )]
    );
    let other = "graph {\n  %x: f32[2, 8] = input\n  %z: f32[2, 8] = input\n  %s: f32[2, 8] = aten.sigmoid.default(%x)\n  %y: f32[2, 8] = aten.mul.Tensor(%z, %s)\n  return %y\n}\n";
    assert!(kinds(other).is_empty());
}

/// The attention of torch's decomposition of `F.scaled_dot_product_attention`-style code:
/// views/expands around bmm, scale, additive mask, softmax.
const ATTENTION: &str = "graph {
  %q: f32[1, 2, 8, 16] = input
  %k: f32[1, 2, 8, 16] = input
  %v: f32[1, 2, 8, 16] = input
  %mask: f32[1, 1, 8, 8] = input
  %kt: f32[1, 2, 16, 8] = aten.permute.default(%k, dims=[0, 1, 3, 2])
  %qe: f32[1, 2, 8, 16] = aten.expand.default(%q, size=[1, 2, 8, 16])
  %qv: f32[2, 8, 16] = aten.view.default(%qe, size=[2, 8, 16])
  %ke: f32[1, 2, 16, 8] = aten.expand.default(%kt, size=[1, 2, 16, 8])
  %kv: f32[2, 16, 8] = aten.view.default(%ke, size=[2, 16, 8])
  %s: f32[2, 8, 8] = aten.bmm.default(%qv, %kv)
  %s4: f32[1, 2, 8, 8] = aten.view.default(%s, size=[1, 2, 8, 8])
  %sc: f32[1, 2, 8, 8] = aten.mul.Scalar(%s4, other=0.25)
  %sm: f32[1, 2, 8, 8] = aten.add.Tensor(%sc, %mask)
  %p: f32[1, 2, 8, 8] = aten._softmax.default(%sm, dim=-1, half_to_float=false)
  %pe: f32[1, 2, 8, 8] = aten.expand.default(%p, size=[1, 2, 8, 8])
  %pv: f32[2, 8, 8] = aten.view.default(%pe, size=[2, 8, 8])
  %ve: f32[1, 2, 8, 16] = aten.expand.default(%v, size=[1, 2, 8, 16])
  %vv: f32[2, 8, 16] = aten.view.default(%ve, size=[2, 8, 16])
  %o: f32[2, 8, 16] = aten.bmm.default(%pv, %vv)
  return %o
}
";

#[test]
fn attention_through_views() {
    let g = parse_graph(ATTENTION).unwrap();
    let cs = find(&g);
    let text = print(&g, &cs);
    assert_eq!(
        text,
        "softmax %p: [p] (%sm)\nattention %o: [s, s4, sc, sm, p, pe, pv, o] (%qv, %kv, %mask, %vv)\n"
    );
}

#[test]
fn attention_with_decomposed_softmax_and_masked_row_guard() {
    let src = "graph {
  %q: f32[2, 8, 16] = input
  %k: f32[2, 16, 8] = input
  %v: f32[2, 8, 16] = input
  %s: f32[2, 8, 8] = aten.bmm.default(%q, %k)
  %sc: f32[2, 8, 8] = aten.div.Scalar(%s, other=4.0)
  %m: f32[2, 8, 1] = aten.amax.default(%sc, dim=[-1], keepdim=true)
  %d: f32[2, 8, 8] = aten.sub.Tensor(%sc, %m)
  %e: f32[2, 8, 8] = aten.exp.default(%d)
  %z: f32[2, 8, 1] = aten.sum.dim_IntList(%e, dim=[-1], keepdim=true)
  %p: f32[2, 8, 8] = aten.div.Tensor(%e, %z)
  %inf: bool[2, 8, 8] = aten.eq.Scalar(%sc, other=-inf)
  %fin: bool[2, 8, 8] = aten.logical_not.default(%inf)
  %any: bool[2, 8, 1] = aten.any.dim(%fin, dim=-1, keepdim=true)
  %none: bool[2, 8, 1] = aten.logical_not.default(%any)
  %zero: f32[2, 8, 8] = aten.full_like.default(%p, fill_value=0)
  %w: f32[2, 8, 8] = aten.where.self(%none, %zero, %p)
  %o: f32[2, 8, 16] = aten.bmm.default(%w, %v)
  return %o
}
";
    let f = found(src);
    assert_eq!(f.len(), 2, "{f:?}");
    assert_eq!(f[0].0, CompositeKind::Softmax);
    assert_eq!(f[1].0, CompositeKind::Attention);
    assert_eq!(f[1].2.len(), 14, "{f:?}");
    let g = parse_graph(src).unwrap();
    let att = &find(&g)[1];
    let names: Vec<&str> = att.inputs.iter().map(|&v| g.value_name(v)).collect();
    assert_eq!(names, ["q", "k", "v"]);
}

#[test]
fn bmm_without_softmax_is_not_attention() {
    let src = "graph {
  %a: f32[2, 8, 8] = input
  %b: f32[2, 8, 8] = input
  %s: f32[2, 8, 8] = aten.bmm.default(%a, %b)
  %r: f32[2, 8, 8] = aten.relu.default(%s)
  %o: f32[2, 8, 8] = aten.bmm.default(%r, %b)
  return %o
}
";
    assert!(kinds(src).is_empty());
}

#[test]
fn o2_pipeline_stores_composites_on_cx() {
    let mut g = parse_graph(ATTENTION).unwrap();
    let mut cx = Cx::default();
    PassManager::for_level(2)
        .run(&mut g, &mut cx, &mut |_, _| {})
        .unwrap();
    let kinds: Vec<CompositeKind> = cx.composites.iter().map(|c| c.kind).collect();
    assert_eq!(kinds, [CompositeKind::Softmax, CompositeKind::Attention]);
    assert_eq!(cx.composites, find(&g));
}
