//! Errors of the IR crate.

use thiserror::Error;

/// Everything that can go wrong while reading, building or verifying a graph.
#[derive(Debug, Error)]
pub enum IrError {
    /// A problem with one node: names the node, its op and what is wrong.
    #[error("node {index} '{}' ({}): {msg}", crate::quote_name(.name), crate::quote_name(.op))]
    Node {
        /// Position of the node in the graph.
        index: usize,
        /// The node's name.
        name: String,
        /// The op's ATen name.
        op: String,
        /// What is wrong.
        msg: String,
    },
    /// A malformed file: `path` says where in the document.
    #[error("{file}: {msg}")]
    Format {
        /// The file (or member) being read.
        file: String,
        /// What is wrong, with its location.
        msg: String,
    },
    /// A problem with the graph as a whole (outputs, names).
    #[error("graph: {0}")]
    Graph(String),
    /// A weight or constant tensor is missing or does not match its declaration.
    #[error("weight '{}': {msg}", crate::quote_name(.name))]
    Weight {
        /// Target name of the tensor.
        name: String,
        /// What is wrong.
        msg: String,
    },
    /// An I/O error while reading `path`.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A syntax error in the IR text form.
    #[error("line {line}: {msg}")]
    Parse {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        msg: String,
    },
}

/// Result type of the IR crate.
pub type Result<T, E = IrError> = std::result::Result<T, E>;
