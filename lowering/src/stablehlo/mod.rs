//! StableHLO emission: the pretty MLIR syntax XLA prints.

use fxhlo_ir::Model;
use thiserror::Error;

/// Options of [`emit`].
#[derive(Clone, Debug, Default)]
pub struct EmitOptions {
    /// Fold parameters, buffers and constants into the module as `stablehlo.constant`.
    pub inline_constants: bool,
}

/// Why a graph could not be lowered.
#[derive(Debug, Error)]
pub enum LowerError {
    /// A node that cannot be lowered, named.
    #[error("node {index} '{name}' ({op}): {msg}")]
    Node {
        /// Position in the graph.
        index: usize,
        /// Node name.
        name: String,
        /// Op name.
        op: String,
        /// What is wrong.
        msg: String,
    },
}

/// Emits a StableHLO module for `model`.
pub fn emit(model: &Model, _opts: &EmitOptions) -> Result<String, LowerError> {
    let (index, n) = model
        .graph
        .nodes
        .iter()
        .enumerate()
        .find(|(_, n)| n.op().is_some())
        .or_else(|| model.graph.nodes.iter().enumerate().next())
        .ok_or(LowerError::Node {
            index: 0,
            name: String::new(),
            op: String::new(),
            msg: "empty graph".into(),
        })?;
    Err(LowerError::Node {
        index,
        name: n.name.clone(),
        op: n.op_name(),
        msg: "StableHLO lowering is not implemented yet".into(),
    })
}
