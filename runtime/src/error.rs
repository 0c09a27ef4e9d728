//! Errors of the runtime crate.

use thiserror::Error;

/// Everything that can go wrong while running a model.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum RuntimeError {
    /// A user input of the graph was not passed.
    #[error("missing input '{}'", fxhlo_ir::quote_name(.0))]
    MissingInput(String),
    /// An input was passed that the graph does not have.
    #[error("unexpected input '{}' (the graph's inputs are: {})", fxhlo_ir::quote_name(.name), fxhlo_ir::quote_name(.expected))]
    UnexpectedInput {
        /// The name passed.
        name: String,
        /// The graph's user inputs, comma-separated.
        expected: String,
    },
    /// An input's shape or dtype differs from the graph's declaration.
    #[error("input '{}' has shape {found} and dtype {found_dtype}, expected {expected}", fxhlo_ir::quote_name(.name))]
    InputType {
        /// The input's name.
        name: String,
        /// The shape passed (`[2, 3]`).
        found: String,
        /// The dtype passed.
        found_dtype: String,
        /// The declared shape and dtype (`[4, 32] f32`).
        expected: String,
    },
    /// An input's bytes do not match its shape and dtype.
    #[error("input '{}' {msg}", fxhlo_ir::quote_name(.name))]
    InputBytes {
        /// The input's name.
        name: String,
        /// What is wrong.
        msg: String,
    },
    /// A weight (parameter, buffer or constant) is missing or does not match its input node.
    #[error("weight '{}': {msg}", fxhlo_ir::quote_name(.name))]
    Weight {
        /// Target name of the weight.
        name: String,
        /// What is wrong.
        msg: String,
    },
    /// A node failed: names the node, its op and what went wrong.
    #[error("node {index} '{}' ({}): {msg}", fxhlo_ir::quote_name(.name), fxhlo_ir::quote_name(.op))]
    Node {
        /// Position of the node in the graph.
        index: usize,
        /// The node's name.
        name: String,
        /// The op's ATen name.
        op: String,
        /// What went wrong.
        msg: String,
    },
    /// A bug in the interpreter itself (a panic caught, or a result of the wrong type).
    #[error("node {index} '{}' ({}): internal error in the reference interpreter: {msg}", fxhlo_ir::quote_name(.name), fxhlo_ir::quote_name(.op))]
    Internal {
        /// Position of the node in the graph.
        index: usize,
        /// The node's name.
        name: String,
        /// The op's ATen name.
        op: String,
        /// What went wrong.
        msg: String,
    },
    /// A problem with the graph as a whole.
    #[error("graph: {0}")]
    Graph(String),
    /// An allocation of the runtime failed (the process is near its memory limit).
    #[error("out of memory: {0}")]
    OutOfMemory(String),
    /// A setting the runtime cannot honour (a thread count out of range).
    #[error("{0}")]
    Options(String),
    /// An artifact could not be read: wrong magic, another format version, corrupted bytes or an
    /// inconsistent program.
    #[error("artifact: {0}")]
    Artifact(String),
    /// A step of a compiled program failed: names the step, its first node and what went wrong.
    #[error("step {step} '{}' ({kernel}): {msg}", fxhlo_ir::quote_name(.name))]
    Step {
        /// Position of the step in the program.
        step: usize,
        /// The name of the step (its first graph node).
        name: String,
        /// The kind of kernel.
        kernel: String,
        /// What went wrong.
        msg: String,
    },
    /// The memory plan needs more than the limit given.
    #[error("the memory plan needs {needed} bytes at peak, more than the limit of {limit} bytes (set it with --max-memory); the largest value is {largest}")]
    Memory {
        /// The largest value of the program: name, type and bytes.
        largest: String,
        /// Peak bytes of the plan (intermediates, constants and outputs).
        needed: u64,
        /// The limit.
        limit: u64,
    },
}
