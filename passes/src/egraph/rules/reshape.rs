//! Views: `unsqueeze`/`squeeze` are views of a static shape, chains of views and expands fold
//! into one, and views or expands that keep the type are dropped. New size lists are always
//! the static result shape, so no `-1` is re-resolved against another input.

use super::*;

/// The reshape rules.
pub fn rules() -> Vec<Rule> {
    vec![
        rule(
            "view-view",
            "(aten.view.default (aten.view.default ?x ?s1) ?s2)",
            view_of,
        ),
        rule("view-noop", "(aten.view.default ?x ?s)", noop),
        rule("expand-noop", "(aten.expand.default ?x ?s ?i)", noop),
        rule(
            "expand-expand",
            "(aten.expand.default (aten.expand.default ?x ?s1 false) ?s2 false)",
            expand_expand,
        ),
        rule(
            "unsqueeze-to-view",
            "(aten.unsqueeze.default ?x ?d)",
            as_view,
        ),
        rule("squeeze-dim-to-view", "(aten.squeeze.dim ?x ?d)", as_view),
        rule("squeeze-dims-to-view", "(aten.squeeze.dims ?x ?d)", as_view),
        rule(
            "view-of-unsqueeze",
            "(aten.view.default (aten.unsqueeze.default ?x ?d) ?s2)",
            view_of,
        ),
    ]
}

/// A view of `?x` with the matched e-class's static shape.
fn view_of(eg: &mut EGraph, id: Id, s: &Subst) -> Option<Id> {
    let x = at(s, "?x");
    let dims = static_dims(&ty(eg, id)?)?;
    ty(eg, x)?.static_shape()?;
    let size = mk_attr(eg, AttrVal::Ints(dims));
    Some(mk(eg, Op::View, vec![x, size]))
}

/// The same as [`view_of`], for `unsqueeze`/`squeeze`.
fn as_view(eg: &mut EGraph, id: Id, s: &Subst) -> Option<Id> {
    view_of(eg, id, s)
}

/// An op that keeps `?x`'s type (and its elements in order) is `?x`.
fn noop(eg: &mut EGraph, id: Id, s: &Subst) -> Option<Id> {
    let x = at(s, "?x");
    (ty(eg, x)? == ty(eg, id)?).then_some(x)
}

/// `expand(expand(x, s1), s2) = expand(x, shape)`: both broadcast `x` the same way.
fn expand_expand(eg: &mut EGraph, id: Id, s: &Subst) -> Option<Id> {
    let x = at(s, "?x");
    ty(eg, x)?;
    let dims = static_dims(&ty(eg, id)?)?;
    let size = mk_attr(eg, AttrVal::Ints(dims));
    let no = mk_attr(eg, AttrVal::Bool(false));
    Some(mk(eg, Op::Expand, vec![x, size, no]))
}
