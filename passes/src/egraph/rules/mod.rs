//! The rule set, by theme. Every rule is a pattern plus a Rust applier that checks its
//! dtype/shape conditions and builds the replacement; [`guarded_union`] only merges e-classes
//! whose inferred types are equal, so no rule can change a value's type.

pub mod algebra;
pub mod layout;
pub mod matmul;
pub mod reduce;
pub mod reshape;

use super::lang::{AttrVal, Data, EGraph, ENode, TensorAnalysis};
use egg::{Applier, Id, Pattern, PatternAst, Rewrite, Subst, Symbol, Var};
use fxhlo_ir::{Op, TensorType};

/// A rewrite of this language.
pub type Rw = Rewrite<ENode, TensorAnalysis>;

/// Builds the replacement of a match, or `None` when the rule's condition fails.
pub type BuildFn = fn(&mut EGraph, Id, &Subst) -> Option<Id>;

/// Applier that runs a [`BuildFn`] and unions its result through [`guarded_union`].
pub struct FnApplier(pub BuildFn);

impl Applier<ENode, TensorAnalysis> for FnApplier {
    fn apply_one(
        &self,
        egraph: &mut EGraph,
        eclass: Id,
        subst: &Subst,
        _ast: Option<&PatternAst<ENode>>,
        _rule: Symbol,
    ) -> Vec<Id> {
        match (self.0)(egraph, eclass, subst) {
            Some(new) if guarded_union(egraph, eclass, new) => vec![new],
            _ => vec![],
        }
    }
}

/// Unions two e-classes if their types are equal and valid; reports whether anything changed.
pub fn guarded_union(eg: &mut EGraph, a: Id, b: Id) -> bool {
    let (da, db) = (&eg[a].data, &eg[b].data);
    if da != db || matches!(da, Data::Invalid(_)) {
        return false;
    }
    eg.union(a, b)
}

/// A rule and whether it keeps results bit for bit.
pub struct Rule {
    /// The rewrite.
    pub rw: Rw,
    /// Whether the rewritten expression has the value of the original in every evaluation
    /// that rounds each op once (the reference interpreter's semantics): `x + x -> x * 2`,
    /// layout rules. A rule that is not exact reassociates or moves a rounding (`(x * a) * b
    /// -> x * (a * b)`, `mm(a, b) + c -> addmm`): `-O2` leaves it out, the `egraph-reassoc`
    /// pass runs it (see README.md beside this file).
    pub exact: bool,
}

fn rewrite(name: &str, lhs: &str, build: BuildFn) -> Rw {
    let pat: Pattern<ENode> = lhs.parse().unwrap_or_else(|e| panic!("rule {name}: {e:?}"));
    Rewrite::new(name, pat, FnApplier(build)).unwrap_or_else(|e| panic!("rule {name}: {e}"))
}

/// An exact rule from a pattern and a builder.
pub fn rule(name: &str, lhs: &str, build: BuildFn) -> Rule {
    Rule {
        rw: rewrite(name, lhs, build),
        exact: true,
    }
}

/// A rule that reassociates or moves a rounding (see [`Rule::exact`]).
pub fn reassociating(name: &str, lhs: &str, build: BuildFn) -> Rule {
    Rule {
        rw: rewrite(name, lhs, build),
        exact: false,
    }
}

/// Every rule, in a fixed order.
pub fn all() -> Vec<Rule> {
    let mut v = algebra::rules();
    v.extend(layout::rules());
    v.extend(reshape::rules());
    v.extend(matmul::rules());
    v.extend(reduce::rules());
    v
}

// ---- helpers for builders ---------------------------------------------------------------------

/// The e-class bound to pattern variable `name` (`"?x"`).
pub fn at(s: &Subst, name: &str) -> Id {
    let v: Var = name.parse().expect("pattern variable");
    s[v]
}

/// The tensor type of an e-class.
pub fn ty(eg: &EGraph, id: Id) -> Option<TensorType> {
    eg[id].data.tensor().cloned()
}

/// The attribute of an e-class.
pub fn attr(eg: &EGraph, id: Id) -> Option<AttrVal> {
    match &eg[id].data {
        Data::Attr(a) => Some(a.clone()),
        _ => None,
    }
}

/// An int-list attribute.
pub fn ints(eg: &EGraph, id: Id) -> Option<Vec<i64>> {
    match attr(eg, id)? {
        AttrVal::Ints(v) => Some(v),
        _ => None,
    }
}

/// A numeric scalar attribute.
pub fn scalar(eg: &EGraph, id: Id) -> Option<f64> {
    attr(eg, id)?.as_f64()
}

/// Adds an attribute leaf.
pub fn mk_attr(eg: &mut EGraph, a: AttrVal) -> Id {
    eg.add(ENode::Attr(a))
}

/// Adds an op e-node; `args` has one e-class per schema parameter.
pub fn mk(eg: &mut EGraph, op: Op, args: Vec<Id>) -> Id {
    debug_assert_eq!(args.len(), op.info().params.len(), "{op}");
    eg.add(ENode::Op(op, args))
}

/// Adds `op` with its tensor parameters bound to `tensors` and every other parameter at its
/// default (all other parameters must have one).
pub fn mk_default(eg: &mut EGraph, op: Op, tensors: &[Id]) -> Option<Id> {
    let mut it = tensors.iter();
    let mut args = vec![];
    for p in op.info().params {
        if p.kind.is_tensor() {
            args.push(*it.next()?);
        } else {
            let a = AttrVal::from_arg(&p.default.to_arg()?)?;
            args.push(mk_attr(eg, a));
        }
    }
    Some(mk(eg, op, args))
}

/// The first op e-node of `op` in an e-class, with its children.
pub fn find_op(eg: &EGraph, id: Id, op: Op) -> Option<Vec<Id>> {
    eg[id].nodes.iter().find_map(|n| match n {
        ENode::Op(o, cs) if *o == op => Some(cs.clone()),
        _ => None,
    })
}

/// True for floating dtypes (rules that reassociate or move scalars require them).
pub fn is_float(t: &TensorType) -> bool {
    t.dtype.is_float()
}

/// A permutation normalized to `0..rank`, if valid.
pub fn norm_perm(p: &[i64], rank: usize) -> Option<Vec<usize>> {
    let r = rank as i64;
    let mut seen = vec![false; rank];
    let mut out = vec![];
    for &d in p {
        let d = if d < 0 { d + r } else { d };
        if d < 0 || d >= r || std::mem::replace(&mut seen[d as usize], true) {
            return None;
        }
        out.push(d as usize);
    }
    (out.len() == rank).then_some(out)
}

/// The static shape of a type as an int list.
pub fn static_dims(t: &TensorType) -> Option<Vec<i64>> {
    t.static_shape()
}
