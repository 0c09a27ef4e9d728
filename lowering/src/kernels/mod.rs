//! Kernel plans: turns each kernel of the fusion plan into a step of a runtime program.

pub mod attention;
pub mod dense;
pub mod expr;
pub mod layout;
pub mod program;
pub mod reduce;

pub use program::{build_program, BuildReport};

use fxhlo_ir::ValueRef;

/// The operands of one kernel being built: each value read from outside the kernel gets the
/// next slot number, which indexes the `srcs` the runtime passes to the kernel.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Slots {
    /// The value behind each slot, in slot order.
    pub values: Vec<ValueRef>,
}

impl Slots {
    /// The slot of `v`, added if new.
    pub fn slot(&mut self, v: ValueRef) -> u32 {
        if let Some(i) = self.values.iter().position(|&x| x == v) {
            return i as u32;
        }
        self.values.push(v);
        (self.values.len() - 1) as u32
    }
}
