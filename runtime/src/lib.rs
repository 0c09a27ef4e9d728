//! fxhlo runtime.
