//! Lowering of the fxhlo IR: StableHLO emission (and, later, fused-kernel plans).
#![warn(missing_docs)]

pub mod stablehlo;
