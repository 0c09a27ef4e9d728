//! Common subexpression elimination: identical pure op nodes (same op, same arguments) are
//! merged into the first one.

use crate::{Changed, Cx, Pass};
use fxhlo_ir::{Arg, Graph, IrError, NodeKind, Op, ValueRef};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// Merges identical pure op nodes.
pub struct Cse;

impl Pass for Cse {
    fn name(&self) -> &'static str {
        "cse"
    }

    fn run(&self, g: &mut Graph, _cx: &mut Cx) -> Result<Changed, IrError> {
        // Nodes by the hash of their op and arguments: the first node of each hash, and the
        // later ones whose hash was taken by a node with other arguments (rare).
        let mut first: HashMap<u64, usize> = HashMap::with_capacity(g.nodes.len());
        let mut more: HashMap<u64, Vec<usize>> = HashMap::new();
        let mut changed = false;
        for i in 0..g.nodes.len() {
            let NodeKind::Op(op) = g.nodes[i].kind else {
                continue;
            };
            if op.is_random() {
                continue;
            }
            let args = &g.nodes[i].args;
            let h = key_hash(op, args);
            // (A node in the maps is never rewritten later: only the users of a merged node
            // are, and they come after it.)
            let same = (first.get(&h).into_iter())
                .chain(more.get(&h).into_iter().flatten())
                .copied()
                .find(|&j| g.nodes[j].op() == Some(op) && same_args(&g.nodes[j].args, args));
            match same {
                Some(first) => {
                    for r in 0..g.nodes[i].results.len() {
                        crate::rewrite::replace_all_uses(
                            g,
                            ValueRef::new(i, r),
                            ValueRef::new(first, r),
                        );
                    }
                    changed = true;
                }
                None if first.contains_key(&h) => more.entry(h).or_default().push(i),
                None => {
                    first.insert(h, i);
                }
            }
        }
        if changed {
            crate::dce::Dce.run(g, &mut Cx::default())?;
        }
        Ok(changed)
    }
}

/// A float as CSE compares it: by its bits, every NaN alike (as the arguments' `Debug` text,
/// which CSE compared before, did).
fn float_key(x: f64) -> u64 {
    if x.is_nan() {
        f64::NAN.to_bits()
    } else {
        x.to_bits()
    }
}

/// Whether two argument lists are the same for CSE: equal, floats compared by [`float_key`].
fn same_args(a: &[Arg], b: &[Arg]) -> bool {
    let floats = |x: &[f64], y: &[f64]| {
        x.len() == y.len() && x.iter().zip(y).all(|(&p, &q)| float_key(p) == float_key(q))
    };
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| match (x, y) {
            (Arg::Float(p), Arg::Float(q)) => float_key(*p) == float_key(*q),
            (Arg::Floats(p), Arg::Floats(q)) => floats(p, q),
            _ => x == y,
        })
}

/// A hash of an op and its arguments, consistent with [`same_args`].
fn key_hash(op: Op, args: &[Arg]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    op.hash(&mut h);
    args.len().hash(&mut h);
    for a in args {
        std::mem::discriminant(a).hash(&mut h);
        match a {
            Arg::None => {}
            Arg::Tensor(v) => (v.node, v.index).hash(&mut h),
            Arg::Tensors(vs) => {
                vs.len().hash(&mut h);
                for v in vs {
                    v.map(|v| (v.node, v.index)).hash(&mut h);
                }
            }
            Arg::Int(x) => x.hash(&mut h),
            Arg::Float(x) => float_key(*x).hash(&mut h),
            Arg::Bool(x) => x.hash(&mut h),
            Arg::Ints(x) => x.hash(&mut h),
            Arg::Floats(x) => {
                x.len().hash(&mut h);
                x.iter().for_each(|&x| float_key(x).hash(&mut h));
            }
            Arg::Bools(x) => x.hash(&mut h),
            Arg::Str(s) | Arg::Layout(s) | Arg::Device(s) | Arg::MemoryFormat(s) => s.hash(&mut h),
            Arg::DType(d) => d.hash(&mut h),
        }
    }
    h.finish()
}

// Tests: tests/filetests/cse/*.fxir (input and expected IR side by side).
