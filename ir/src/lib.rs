//! fxhlo's graph IR: dtypes, tensor types, the op table, the graph, readers and the text form.
#![warn(missing_docs)]

pub mod arg;
pub mod budget;
pub mod dtype;
pub mod error;
pub mod graph;
pub mod infer;
pub mod ops;
pub mod read;
pub mod text;
pub mod traits;
pub mod types;

pub use arg::{Arg, Param, ParamKind};
pub use dtype::DType;
pub use error::{IrError, Result};
pub use graph::{
    Graph, HostTensor, InputKind, Model, Node, NodeId, NodeKind, Users, ValueRef, Weights,
};
pub use ops::{Op, OpInfo, Results, OPS};
pub use traits::{OpKind, Purity, ViewKind};
pub use types::{Dim, TensorType};

/// A name as error messages quote it: control characters escaped (a newline is `\n`, so a
/// message stays one line) and at most 80 characters, then `…` (a 50 MB name is not echoed).
pub fn quote_name(name: &str) -> String {
    escape_cut(name, 80)
}

/// `text` with control characters escaped and cut after `max` characters (then `…`): one
/// line of bounded length, for names in errors ([`quote_name`]) and whole error lines.
pub fn escape_cut(text: &str, max: usize) -> String {
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == max {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}
