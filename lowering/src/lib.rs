//! Lowering of the fxhlo IR: StableHLO emission and the fused-kernel plans of the fast runtime.
#![warn(missing_docs)]

pub mod constfold;
pub mod kernels;
#[cfg(feature = "mlir")]
pub mod mlir;
pub mod stablehlo;
