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
pub use graph::{Graph, HostTensor, InputKind, Model, Node, NodeId, NodeKind, ValueRef, Weights};
pub use ops::{Op, OpInfo, Results, OPS};
pub use traits::{OpKind, Purity, ViewKind};
pub use types::{Dim, TensorType};

/// A name as error messages quote it: control characters escaped (a newline is `\n`, so a
/// message stays one line) and at most 80 characters, then `…` (a 50 MB name is not echoed).
pub fn quote_name(name: &str) -> String {
    const MAX: usize = 80;
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if i == MAX {
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
