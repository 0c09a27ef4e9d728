//! fxhlo runtime: the reference interpreter (the oracle every optimization is checked against).
#![warn(missing_docs)]

pub mod error;
pub mod fast;
pub mod interp;

pub use error::RuntimeError;
pub use interp::{eval, run, run_with, Data, Options, Scalar, Tensor};
