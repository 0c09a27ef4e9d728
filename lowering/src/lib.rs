//! Lowering of the fxhlo IR: StableHLO emission (and, later, fused-kernel plans).
#![warn(missing_docs)]

#[cfg(feature = "mlir")]
pub mod mlir;
pub mod kernels;
pub mod stablehlo;
