//! Graph surgery shared by the passes: replacing uses and removing nodes.

use fxhlo_ir::{Arg, Graph, ValueRef};

/// Calls `f` on every tensor value `args` read.
pub fn for_each_value_mut(args: &mut [Arg], mut f: impl FnMut(&mut ValueRef)) {
    for a in args {
        match a {
            Arg::Tensor(v) => f(v),
            Arg::Tensors(vs) => vs.iter_mut().flatten().for_each(&mut f),
            _ => {}
        }
    }
}

/// Replaces every use of `from` (in arguments and outputs) by `to`.
pub fn replace_all_uses(g: &mut Graph, from: ValueRef, to: ValueRef) {
    let swap = |v: &mut ValueRef| {
        if *v == from {
            *v = to;
        }
    };
    for n in &mut g.nodes {
        for_each_value_mut(&mut n.args, swap);
    }
    g.outputs.iter_mut().for_each(swap);
}

/// Removes the nodes whose `keep` entry is false, renumbering references. Callers guarantee
/// that no kept node uses a removed one.
pub fn retain_nodes(g: &mut Graph, keep: &[bool]) {
    let mut new_index = vec![usize::MAX; g.nodes.len()];
    let mut next = 0;
    for (i, &k) in keep.iter().enumerate() {
        if k {
            new_index[i] = next;
            next += 1;
        }
    }
    let remap = |v: &mut ValueRef| {
        debug_assert!(
            new_index[v.node] != usize::MAX,
            "a kept node uses a removed one"
        );
        v.node = new_index[v.node];
    };
    let old = std::mem::take(&mut g.nodes);
    for (i, mut n) in old.into_iter().enumerate() {
        if !keep[i] {
            continue;
        }
        for_each_value_mut(&mut n.args, remap);
        g.nodes.push(n);
    }
    g.outputs.iter_mut().for_each(remap);
}
