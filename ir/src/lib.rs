//! fxhlo's graph IR: dtypes, tensor types, the op table, the graph, readers and the text form.
#![warn(missing_docs)]

pub mod arg;
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
