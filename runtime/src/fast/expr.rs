//! Fused elementwise expressions: a register program evaluated block by block.
//!
//! An [`Expr`] computes one or more `f32` outputs over a row-major iteration space
//! ([`Expr::shape`]; internally [`Expr::dims`], the same space with some dimensions split, which
//! keeps the flat order and lets reshapes that split a dimension stay affine). Its inputs are [`Leaf`] accesses: an operand slot read at
//! `offset + Σ index[d] * strides[d]` (so permutes, slices, broadcasts and reshapes of the
//! operand cost nothing), or an iota (`start + address * step`, for `arange`). The program is a
//! list of [`Inst`]s over virtual registers, each register a block of [`BLOCK`] `f32` values
//! (half that in programs of many registers):
//! every instruction runs as one tight loop over the block, so a chain of elementwise ops reads
//! each input once and writes each output once, all in L1. Booleans (masks from comparisons)
//! live in registers as `0.0` / `1.0`.
//!
//! Programs are built with [`ExprBuilder`] (constant folding, common-subexpression merging,
//! fusion of chains into [`Fused`] instructions, dead code removal and register allocation by
//! liveness happen in [`ExprBuilder::finish`]).
//! On x86-64 the block loops run in an AVX-512- or AVX2-compiled copy of the evaluator, picked
//! at run time; the compiler never contracts `a * b + c` into an FMA, and the math's explicit
//! fused multiply-adds are exactly rounded in every copy, so every copy gives bitwise-identical
//! results.

use super::math;
use super::memory::{line_zeros, LineVec};
use super::simd;
use super::vmath;
use super::Src;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use std::cell::RefCell;
use std::collections::HashMap;

/// Elements per register block, for programs of at most [`WIDE_REGS`] registers; larger
/// programs use blocks of half this, so that their registers stay in L1. Blocks of 1024 made
/// workload c (four registers) 1.05-1.15x faster than blocks of 512 in interleaved runs on a
/// Zen 4 (the per-block work of the loop is spread over twice the elements), and 2048 was
/// slower than 1024.
pub const BLOCK: usize = 1024;
/// The most registers a program may have to run in blocks of [`BLOCK`] elements (4 KiB each:
/// 24 KiB of a 32 KiB L1).
pub const WIDE_REGS: u32 = 6;
/// Elements per parallel task of [`run_elementwise`] (a multiple of [`BLOCK`]; independent of
/// the thread count).
pub const TASK: usize = 8 * BLOCK;
/// Iteration spaces of at least this many elements run by [`run_elementwise`] stream (see
/// `Plan::stream`): their operands and results are far larger than any cache level a core
/// shares with few others.
pub const STREAM_ELEMS: usize = 1 << 23;

/// The element type of an operand slot read by a leaf.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LeafKind {
    /// `f32`.
    F32,
    /// `bool`, loaded as `0.0` / `1.0`.
    Bool,
    /// `i64`, converted to the nearest `f32`.
    I64,
}

/// Where a leaf's values come from.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum LeafSrc {
    /// Operand slot `slot` (an index into the `srcs` of the kernel) of element type `kind`.
    Slot {
        /// Index into `srcs`.
        slot: u32,
        /// Its element type.
        kind: LeafKind,
    },
    /// The value `start + address * step` computed in `f64` and rounded (an `arange`).
    Iota {
        /// Value at address 0.
        start: f64,
        /// Increment per address.
        step: f64,
    },
}

/// An input of an expression: a source read with an affine access over the iteration space.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Leaf {
    /// What is read.
    pub src: LeafSrc,
    /// Address of iteration index `[0, ..., 0]`.
    pub offset: i64,
    /// Address step per iteration dimension (one per dimension of [`Expr::dims`]; 0 for a
    /// broadcast dimension, negative for a flip).
    pub strides: Vec<i64>,
}

impl Leaf {
    /// The smallest and largest address read over `shape` (`None` if `shape` is empty).
    fn address_range(&self, shape: &[usize]) -> Option<(i128, i128)> {
        if shape.contains(&0) {
            return None;
        }
        let (mut lo, mut hi) = (self.offset as i128, self.offset as i128);
        for (&n, &s) in shape.iter().zip(&self.strides) {
            let span = (n as i128 - 1) * s as i128;
            if span < 0 {
                lo += span;
            } else {
                hi += span;
            }
        }
        Some((lo, hi))
    }
}

/// Unary operations. Booleans are `0.0` / `1.0`.
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum UnOp {
    Neg,
    Abs,
    Exp,
    Expm1,
    Log,
    Log1p,
    Log2,
    Log10,
    Sqrt,
    /// `1 / sqrt(x)`.
    Rsqrt,
    /// `1 / x`.
    Recip,
    Sigmoid,
    /// `x * sigmoid(x)`.
    Silu,
    Tanh,
    Erf,
    /// GELU with `erf`.
    GeluErf,
    /// GELU with the `tanh` approximation.
    GeluTanh,
    /// `max(x, 0)`, NaN stays NaN.
    Relu,
    Floor,
    Ceil,
    /// Round half to even.
    Round,
    Trunc,
    /// -1, 0 or 1; NaN gives 0.
    Sign,
    /// 1 where NaN.
    IsNan,
    /// 1 where ±inf.
    IsInf,
    /// Logical not: 1 where `x == 0`.
    Not,
    /// Cast to bool: 1 where `x != 0` (NaN is true).
    ToBool,
    /// `x * x`.
    Square,
    Sin,
    Cos,
    Tan,
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Asinh,
    Acosh,
    Atanh,
    /// Round to the nearest bf16 (ties to even), kept as f32: a conversion to bf16.
    ToBf16,
    /// Round to the nearest f16 (ties to even), kept as f32.
    ToF16,
}

/// Binary operations. Comparisons and logical ops give `0.0` / `1.0`.
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    /// NaN-propagating maximum.
    Max,
    /// NaN-propagating minimum.
    Min,
    /// `a^b` (computed in `f64`).
    Pow,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    /// Logical and of `a != 0`, `b != 0`.
    And,
    Or,
    Xor,
    /// C `fmod`.
    Fmod,
    /// Python `%`.
    Remainder,
    /// Division rounded toward zero.
    DivTrunc,
    /// Division rounded down (Python `//`).
    DivFloor,
    Atan2,
}

/// What an instruction computes into its destination register.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum InstOp {
    /// Loads leaf `i` for the block.
    Load(u32),
    /// A constant.
    Const(#[serde(with = "json_f32")] f32),
    /// `op(a)`.
    Un(UnOp, u32),
    /// `op(a, b)`.
    Bin(BinOp, u32, u32),
    /// `op(a, c)` with a constant right operand.
    BinC(BinOp, u32, #[serde(with = "json_f32")] f32),
    /// `op(c, b)` with a constant left operand.
    CBin(BinOp, #[serde(with = "json_f32")] f32, u32),
    /// `if c != 0 { a } else { b }`.
    Select(u32, u32, u32),
    /// `a^n` for an integer `n` (repeated squaring).
    PowI(u32, i32),
    /// A chain of ops as one instruction (see [`Fused`]).
    Fused(Fused),
}

/// `(pa(a) op pb(b)) + add`, each step rounded on its own (the same bits as the ops one at a
/// time): what [`ExprBuilder::finish`] makes of a binary op whose operands are unary ops
/// (`gelu(t) * sigmoid(x)`) and of a product added to something (`x * w + b`), when the
/// intermediate values have no other use. One pass over the block instead of up to four,
/// each storing its block to L1 and the next loading it back: on AVX-512 it is one loop with
/// the intermediate values in registers (`vmath::fused`, for the ops of [`UnOp::fast`] and
/// [`BinOp::arith`]); elsewhere, and for other ops, it runs as the steps.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fused {
    /// The binary op.
    pub op: BinOp,
    /// Its left operand's register.
    pub a: u32,
    /// A unary op applied to `a` first.
    pub pa: Option<UnOp>,
    /// Its right operand's register.
    pub b: u32,
    /// A unary op applied to `b` first.
    pub pb: Option<UnOp>,
    /// A register added to the result.
    pub add: Option<u32>,
}

impl Fused {
    /// The value at one element, from the values of its registers there.
    #[inline(always)]
    fn apply(&self, x: f32, y: f32, z: Option<f32>) -> f32 {
        let pre = |f: Option<UnOp>, v: f32| f.map_or(v, |f| apply_un(f, v));
        let r = apply_bin(self.op, pre(self.pa, x), pre(self.pb, y));
        z.map_or(r, |z| r + z)
    }

    /// `self` with its registers renamed.
    fn map_regs(&self, f: impl Fn(u32) -> u32) -> Fused {
        Fused {
            a: f(self.a),
            b: f(self.b),
            add: self.add.map(&f),
            ..*self
        }
    }
}

/// `f32` constants in JSON: finite values as numbers, `inf`, `-inf` and `nan` as strings
/// (JSON has no such numbers; masks use `-inf`).
mod json_f32 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &f32, s: S) -> Result<S::Ok, S::Error> {
        if v.is_finite() {
            s.serialize_f32(*v)
        } else if v.is_nan() {
            s.serialize_str("nan")
        } else if *v > 0.0 {
            s.serialize_str("inf")
        } else {
            s.serialize_str("-inf")
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Num(f32),
        Str(String),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f32, D::Error> {
        match Repr::deserialize(d)? {
            Repr::Num(v) => Ok(v),
            Repr::Str(s) => match s.as_str() {
                "nan" => Ok(f32::NAN),
                "inf" => Ok(f32::INFINITY),
                "-inf" => Ok(f32::NEG_INFINITY),
                _ => Err(serde::de::Error::custom(format!("bad f32 constant '{s}'"))),
            },
        }
    }
}

impl UnOp {
    /// The op's hand-written AVX-512 form (`vmath`, the same bits), if it has one: the
    /// engine's loop for it, and the unary ops [`ExprBuilder::finish`] folds into [`Fused`]
    /// operands.
    pub fn fast(self) -> Option<vmath::Fast> {
        match self {
            UnOp::Exp => Some(vmath::Fast::Exp),
            UnOp::Sigmoid => Some(vmath::Fast::Sigmoid),
            UnOp::GeluErf => Some(vmath::Fast::GeluErf),
            UnOp::Silu => Some(vmath::Fast::Silu),
            UnOp::Tanh => Some(vmath::Fast::Tanh),
            _ => None,
        }
    }

    /// Whether the op costs much more than a load and a store per element (a polynomial, a
    /// division or a square root).
    fn costly(self) -> bool {
        use UnOp::*;
        !matches!(
            self,
            Neg | Abs
                | Relu
                | Floor
                | Ceil
                | Round
                | Trunc
                | Sign
                | IsNan
                | IsInf
                | Not
                | ToBool
                | Square
        )
    }
}

impl BinOp {
    /// The op as the arithmetic of `vmath::fused`, if it is one: the binary ops of [`Fused`]
    /// instructions.
    pub fn arith(self) -> Option<vmath::Arith> {
        match self {
            BinOp::Add => Some(vmath::Arith::Add),
            BinOp::Sub => Some(vmath::Arith::Sub),
            BinOp::Mul => Some(vmath::Arith::Mul),
            BinOp::Div => Some(vmath::Arith::Div),
            _ => None,
        }
    }
}

impl InstOp {
    /// Whether the instruction costs much more than a load and a store per element.
    fn costly(&self) -> bool {
        match *self {
            InstOp::Un(u, _) => u.costly(),
            InstOp::Fused(f) => f.pa.is_some() || f.pb.is_some(),
            _ => false,
        }
    }

    /// The registers the instruction reads, inline (no allocation: the block loop and each
    /// run's checks call this per instruction).
    fn reads(&self) -> SmallVec<[u32; 3]> {
        match *self {
            InstOp::Load(_) | InstOp::Const(_) => SmallVec::new(),
            InstOp::Un(_, a)
            | InstOp::BinC(_, a, _)
            | InstOp::CBin(_, _, a)
            | InstOp::PowI(a, _) => SmallVec::from_slice(&[a]),
            InstOp::Bin(_, a, b) => SmallVec::from_slice(&[a, b]),
            InstOp::Select(c, a, b) => SmallVec::from_slice(&[c, a, b]),
            InstOp::Fused(f) => [f.a, f.b].into_iter().chain(f.add).collect(),
        }
    }

    fn map_regs(&self, f: impl Fn(u32) -> u32) -> InstOp {
        match *self {
            InstOp::Load(l) => InstOp::Load(l),
            InstOp::Const(c) => InstOp::Const(c),
            InstOp::Un(o, a) => InstOp::Un(o, f(a)),
            InstOp::Bin(o, a, b) => InstOp::Bin(o, f(a), f(b)),
            InstOp::BinC(o, a, c) => InstOp::BinC(o, f(a), c),
            InstOp::CBin(o, c, a) => InstOp::CBin(o, c, f(a)),
            InstOp::Select(c, a, b) => InstOp::Select(f(c), f(a), f(b)),
            InstOp::PowI(a, n) => InstOp::PowI(f(a), n),
            InstOp::Fused(u) => InstOp::Fused(u.map_regs(f)),
        }
    }
}

/// One instruction: `regs[dst] = op(...)`. `dst` never equals a register the op reads.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Inst {
    /// Destination register.
    pub dst: u32,
    /// The operation.
    pub op: InstOp,
}

/// A fused elementwise expression over a row-major iteration space.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Expr {
    shape: Vec<usize>,
    dims: Vec<usize>,
    leaves: Vec<Leaf>,
    insts: Vec<Inst>,
    num_regs: u32,
    outputs: Vec<u32>,
    /// What is derived from the program once, on first use (not serialized; boxed, as it is
    /// larger than the program's own fields).
    #[serde(skip)]
    memo: Box<Memo>,
}

/// What an [`Expr`] derives from its program on first use and keeps: its [`Plan`]s in place
/// (`plans[0]`) and streaming (`plans[1]`), and the result of
/// [`validate_program`](Expr::validate_program). Every run of a compiled program would
/// otherwise make them again, several vectors each (a few percent of a small model's run).
/// Clones start empty, and any two compare equal: this is a cache, not part of the value.
#[derive(Default)]
struct Memo {
    plans: [std::sync::OnceLock<Plan>; 2],
    program: std::sync::OnceLock<Result<(), String>>,
}

impl Clone for Memo {
    fn clone(&self) -> Memo {
        Memo::default()
    }
}

impl PartialEq for Memo {
    fn eq(&self, _: &Memo) -> bool {
        true
    }
}

impl std::fmt::Debug for Memo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Memo")
    }
}

/// `1.0` if `c`, else `0.0`.
#[inline(always)]
fn b(c: bool) -> f32 {
    if c {
        1.0
    } else {
        0.0
    }
}

/// `f(x)` of a unary op (the one definition both the block loops and constant folding use).
#[inline(always)]
pub fn apply_un(op: UnOp, x: f32) -> f32 {
    let wide = |f: fn(f64) -> f64| f(x as f64) as f32;
    match op {
        UnOp::Neg => -x,
        UnOp::Abs => x.abs(),
        UnOp::Exp => math::exp(x),
        UnOp::Expm1 => math::expm1(x),
        UnOp::Log => math::log(x),
        UnOp::Log1p => math::log1p(x),
        UnOp::Log2 => math::log2(x),
        UnOp::Log10 => math::log10(x),
        UnOp::Sqrt => x.sqrt(),
        UnOp::Rsqrt => 1.0 / x.sqrt(),
        UnOp::Recip => 1.0 / x,
        UnOp::Sigmoid => math::sigmoid(x),
        UnOp::Silu => math::silu(x),
        UnOp::Tanh => math::tanh(x),
        UnOp::Erf => math::erf(x),
        UnOp::GeluErf => math::gelu_erf(x),
        UnOp::GeluTanh => math::gelu_tanh(x),
        UnOp::Relu => math::max_nan(x, 0.0),
        UnOp::Floor => x.floor(),
        UnOp::Ceil => x.ceil(),
        UnOp::Round => x.round_ties_even(),
        UnOp::Trunc => x.trunc(),
        UnOp::Sign => b(0.0 < x) - b(x < 0.0),
        UnOp::IsNan => b(x.is_nan()),
        UnOp::IsInf => b(x.is_infinite()),
        UnOp::Not => b(x == 0.0),
        UnOp::ToBool => b(x != 0.0),
        UnOp::Square => x * x,
        UnOp::Sin => wide(f64::sin),
        UnOp::Cos => wide(f64::cos),
        UnOp::Tan => wide(f64::tan),
        UnOp::Asin => wide(f64::asin),
        UnOp::Acos => wide(f64::acos),
        UnOp::Atan => wide(f64::atan),
        UnOp::Sinh => wide(f64::sinh),
        UnOp::Cosh => wide(f64::cosh),
        UnOp::Asinh => wide(f64::asinh),
        UnOp::Acosh => wide(f64::acosh),
        UnOp::Atanh => wide(f64::atanh),
        UnOp::ToBf16 => super::lowp::round_bf16(x),
        UnOp::ToF16 => super::lowp::round_f16(x),
    }
}

/// `f(a, b)` of a binary op.
#[inline(always)]
pub fn apply_bin(op: BinOp, x: f32, y: f32) -> f32 {
    match op {
        BinOp::Add => x + y,
        BinOp::Sub => x - y,
        BinOp::Mul => x * y,
        BinOp::Div => x / y,
        BinOp::Max => math::max_nan(x, y),
        BinOp::Min => math::min_nan(x, y),
        BinOp::Pow => {
            if y == 2.0 {
                x * x
            } else {
                (x as f64).powf(y as f64) as f32
            }
        }
        BinOp::Eq => b(x == y),
        BinOp::Ne => b(x != y),
        BinOp::Lt => b(x < y),
        BinOp::Le => b(x <= y),
        BinOp::Gt => b(x > y),
        BinOp::Ge => b(x >= y),
        BinOp::And => b(x != 0.0 && y != 0.0),
        BinOp::Or => b(x != 0.0 || y != 0.0),
        BinOp::Xor => b((x != 0.0) != (y != 0.0)),
        BinOp::Fmod => x % y,
        BinOp::Remainder => math::remainder(x, y),
        BinOp::DivTrunc => (x / y).trunc(),
        BinOp::DivFloor => math::div_floor(x, y),
        BinOp::Atan2 => (x as f64).atan2(y as f64) as f32,
    }
}

// The loops are macros, not generic functions taking closures: closures are not always
// inlined, and an element-wise call blocks vectorization. `apply_*` are `#[inline(always)]`,
// so each arm is one monomorphic loop that vectorizes on its own.
//
// Each loop is a plain indexed loop over slices cut to one length, the shape the loop
// vectorizer takes as it is (and unrolls itself). Fixed steps of 32 elements (an unrolled inner
// loop, meant to overlap the latency of neighbouring polynomial chains) made it vectorize
// across the steps instead, with a gather or scatter per element, or not at all: the binary
// and unary ops ran 1.5x slower (workload c, resnet18).
macro_rules! map1 {
    ($d:expr, $a:expr, |$x:ident| $body:expr) => {{
        let n = $d.len().min($a.len());
        let (d, a) = (&mut $d[..n], &$a[..n]);
        for i in 0..n {
            let $x = a[i];
            d[i] = $body;
        }
    }};
}

macro_rules! map2 {
    ($d:expr, $a:expr, $b:expr, |$x:ident, $y:ident| $body:expr) => {{
        let n = $d.len().min($a.len()).min($b.len());
        let (d, a, b) = (&mut $d[..n], &$a[..n], &$b[..n]);
        for i in 0..n {
            let ($x, $y) = (a[i], b[i]);
            d[i] = $body;
        }
    }};
}

#[inline(always)]
fn run_un(op: UnOp, d: &mut [f32], a: &[f32]) {
    // The hottest transcendental ops in hand-written AVX-512 (the same bits).
    if let Some(f) = op.fast() {
        if vmath::map_fast(f, d, a).is_some() {
            return;
        }
    }
    macro_rules! arm {
        ($($v:ident),*) => { match op { $(UnOp::$v => map1!(d, a, |x| apply_un(UnOp::$v, x)),)* } };
    }
    arm!(
        Neg, Abs, Exp, Expm1, Log, Log1p, Log2, Log10, Sqrt, Rsqrt, Recip, Sigmoid, Silu, Tanh,
        Erf, GeluErf, GeluTanh, Relu, Floor, Ceil, Round, Trunc, Sign, IsNan, IsInf, Not, ToBool,
        Square, Sin, Cos, Tan, Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh, ToBf16, ToF16
    )
}

macro_rules! bin_ops {
    ($arm:ident) => {
        $arm!(
            Add, Sub, Mul, Div, Max, Min, Pow, Eq, Ne, Lt, Le, Gt, Ge, And, Or, Xor, Fmod,
            Remainder, DivTrunc, DivFloor, Atan2
        )
    };
}

#[inline(always)]
fn run_bin(op: BinOp, d: &mut [f32], a: &[f32], b: &[f32]) {
    macro_rules! arm {
        ($($v:ident),*) => { match op { $(BinOp::$v => map2!(d, a, b, |x, y| apply_bin(BinOp::$v, x, y)),)* } };
    }
    bin_ops!(arm)
}

#[inline(always)]
fn run_bin_c(op: BinOp, d: &mut [f32], a: &[f32], c: f32) {
    macro_rules! arm {
        ($($v:ident),*) => { match op { $(BinOp::$v => map1!(d, a, |x| apply_bin(BinOp::$v, x, c)),)* } };
    }
    bin_ops!(arm)
}

#[inline(always)]
fn run_c_bin(op: BinOp, d: &mut [f32], c: f32, a: &[f32]) {
    macro_rules! arm {
        ($($v:ident),*) => { match op { $(BinOp::$v => map1!(d, a, |x| apply_bin(BinOp::$v, c, x)),)* } };
    }
    bin_ops!(arm)
}

#[inline(always)]
fn run_powi(d: &mut [f32], a: &[f32], n: i32) {
    match n {
        0 => d.fill(1.0),
        1 => d.copy_from_slice(a),
        2 => map1!(d, a, |x| x * x),
        3 => map1!(d, a, |x| x * x * x),
        4 => map1!(d, a, |x| (x * x) * (x * x)),
        -1 => map1!(d, a, |x| 1.0 / x),
        -2 => map1!(d, a, |x| 1.0 / (x * x)),
        _ => map1!(d, a, |x| math::powi(x, n)),
    }
}

/// `d = f(a, b, c)` of a fused instruction: one AVX-512 loop (`vmath::fused`) for the ops it
/// has, else the steps one loop each (the same bits either way).
#[inline(always)]
fn run_fused(f: &Fused, d: &mut [f32], a: &[f32], b: &[f32], c: Option<&[f32]>) {
    // `Some(None)` for no unary op, `None` for one without a hand-written form.
    let fast = |u: Option<UnOp>| u.map_or(Some(None), |u| u.fast().map(Some));
    if let (Some(fa), Some(op), Some(fb)) = (fast(f.pa), f.op.arith(), fast(f.pb)) {
        if vmath::fused(d, (a, fa), op, (b, fb), c).is_some() {
            return;
        }
    }
    run_fused_steps(f, d, a, b, c)
}

/// [`run_fused`] as its steps, a block at a time, through two blocks of scratch.
#[inline(always)]
fn run_fused_steps(f: &Fused, d: &mut [f32], a: &[f32], b: &[f32], c: Option<&[f32]>) {
    let n = d.len().min(a.len()).min(b.len());
    let n = c.map_or(n, |c| n.min(c.len()));
    let (mut ta, mut tb) = ([0f32; BLOCK], [0f32; BLOCK]);
    for s in (0..n).step_by(BLOCK) {
        let e = (s + BLOCK).min(n);
        let (x, y) = (&a[s..e], &b[s..e]);
        let x = match f.pa {
            Some(u) => {
                run_un(u, &mut ta[..e - s], x);
                &ta[..e - s]
            }
            None => x,
        };
        let y = match f.pb {
            Some(u) => {
                run_un(u, &mut tb[..e - s], y);
                &tb[..e - s]
            }
            None => y,
        };
        let d = &mut d[s..e];
        run_bin(f.op, d, x, y);
        if let Some(c) = c {
            for (o, &z) in d.iter_mut().zip(&c[s..e]) {
                *o += z;
            }
        }
    }
}

/// An expression's iteration plan (see [`Expr::plan`]), its leaves' offsets for the current
/// row, and the register blocks its calls use.
#[derive(Debug)]
pub struct EvalPlan<'e>(&'e Plan, Offsets, Vec<LineVec<f32>>);

/// The leaves' offsets of one call, inline for the usual leaf counts.
type Offsets = SmallVec<[i64; 8]>;

impl Drop for EvalPlan<'_> {
    /// Hands the register blocks back to this thread for the next plan.
    fn drop(&mut self) {
        give_back_regs(std::mem::take(&mut self.2));
    }
}

/// Hands register blocks (from [`Expr::take_regs`]) back to this thread's scratch.
fn give_back_regs(regs: Vec<LineVec<f32>>) {
    let _ = SCRATCH.try_with(|cell| *cell.borrow_mut() = regs);
}

/// The iteration space with unit dimensions dropped and mergeable neighbours merged, and each
/// leaf's strides over it (at least one dimension).
#[derive(Clone, Debug)]
struct Plan {
    dims: Vec<usize>,
    strides: Vec<Vec<i64>>,
    /// The leaves' offsets (a call shifts its own copy; see [`Offsets`]).
    offsets: Vec<i64>,
    /// Per instruction, the output it computes straight into (output `k`, the first that
    /// names its register, when no later instruction writes that register), so the value is
    /// not copied there from a register afterwards. All `None` when streaming.
    direct: Vec<Option<usize>>,
    /// Streaming: the lines of each contiguous source run of the next block are prefetched a
    /// few at a time between the instructions of this block (a burst of them would stall on
    /// the core's miss buffers; see `prefetch` for which programs and how), and outputs are copied out of their registers with
    /// non-temporal stores (their lines are not read from memory first, which stalls the
    /// stores behind them). Each block's loads and stores then overlap the math of its
    /// neighbours instead of waiting between them.
    stream: bool,
    /// Streaming with software prefetches: not for a program of cheap instructions (see
    /// [`InstOp::costly`]) whose leaves are all full-size reads (no broadcast), which the
    /// hardware prefetcher keeps fed on its own (measured on a Zen 4: `x + 1` 1.3x and `x + y`
    /// 1.1-1.4x faster without them); the others, `x * w + b` over rows and the math-heavy
    /// chains, leave memory idle during their math without them (1.1-1.2x slower).
    prefetch: bool,
    /// With `prefetch`, when the program has costly instructions: per instruction, how many
    /// pieces of costly instructions come after it. Each costly instruction then runs in
    /// [`SPLIT`] pieces, and the source runs of the block [`AHEAD`] blocks on are prefetched a
    /// few lines before each piece, spread over the math instead of issued between cheap
    /// instructions in bursts (with the broadcast runs, which are in cache, left out: workload
    /// c 9.19 -> 8.92 ms on 2 threads, 18.9 -> 17.7 on one; the cheap programs that prefetch
    /// still do it a few lines per instruction, one block ahead). Empty otherwise.
    pieces_after: Vec<usize>,
    /// Elements per block: [`BLOCK`], or half that for a program of more than [`WIDE_REGS`]
    /// registers.
    block: usize,
}

/// Pieces a costly instruction of a streaming block runs in (see `Plan::pieces_after`).
const SPLIT: usize = 4;
/// How many blocks ahead a streaming block with costly instructions prefetches: the next one
/// (two blocks on, the lines prefetched left the L1 before their block came: workload c on a
/// Zen 4, interleaved, 7.42 -> 7.03 ms on 2 threads and 14.7 -> 13.8 on one; GELU over 16M
/// elements 3.42 -> 3.08 ms on 2 threads).
const AHEAD: usize = 1;

impl Plan {
    fn new(e: &Expr, stream: bool) -> Plan {
        let mut dims: Vec<usize> = vec![];
        let mut strides: Vec<Vec<i64>> = vec![vec![]; e.leaves.len()];
        for (d, &n) in e.dims.iter().enumerate() {
            if n == 1 {
                continue;
            }
            let mergeable = !dims.is_empty()
                && e.leaves.iter().zip(&strides).all(|(l, s)| {
                    s.last()
                        .is_some_and(|&prev| prev == l.strides[d].saturating_mul(n as i64))
                });
            if mergeable {
                let last = dims.len() - 1;
                dims[last] *= n;
                for (l, s) in e.leaves.iter().zip(strides.iter_mut()) {
                    let k = s.len() - 1;
                    s[k] = l.strides[d];
                }
            } else {
                dims.push(n);
                for (l, s) in e.leaves.iter().zip(strides.iter_mut()) {
                    s.push(l.strides[d]);
                }
            }
        }
        if dims.is_empty() {
            dims.push(1);
            for s in strides.iter_mut() {
                s.push(0);
            }
        }
        let offsets = e.leaves.iter().map(|l| l.offset).collect();
        let last_def = |i: usize| !e.insts[i + 1..].iter().any(|j| j.dst == e.insts[i].dst);
        let direct = (0..e.insts.len())
            .map(|i| {
                let k = e.outputs.iter().position(|&o| o == e.insts[i].dst)?;
                (!stream && k < 64 && last_def(i)).then_some(k)
            })
            .collect();
        let broadcast = strides.iter().any(|s| s.contains(&0));
        let costly = e.insts.iter().any(|i| i.op.costly());
        let prefetch = stream && (broadcast || costly);
        let mut pieces_after = vec![];
        if prefetch && costly {
            let mut acc = 0;
            for i in e.insts.iter().rev() {
                pieces_after.push(acc);
                acc += if i.op.costly() { SPLIT } else { 0 };
            }
            pieces_after.reverse();
        }
        Plan {
            dims,
            strides,
            offsets,
            direct,
            stream,
            prefetch,
            pieces_after,
            block: if e.num_regs <= WIDE_REGS {
                BLOCK
            } else {
                BLOCK / 2
            },
        }
    }

    /// Multi-index of flat index `i`.
    fn unflatten(&self, mut i: usize, idx: &mut [usize]) {
        for (k, &n) in self.dims.iter().enumerate().rev() {
            idx[k] = i % n;
            i /= n;
        }
    }
}

thread_local! {
    static SCRATCH: RefCell<Vec<LineVec<f32>>> = const { RefCell::new(Vec::new()) };
}

impl Expr {
    /// The iteration space, row-major.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The iteration space the leaves index: [`Expr::shape`] with some dimensions split into
    /// several (same element count and flat order).
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// Number of outputs.
    pub fn num_outputs(&self) -> usize {
        self.outputs.len()
    }

    /// The leaves (inputs) of the expression.
    pub fn leaves(&self) -> &[Leaf] {
        &self.leaves
    }

    /// The instructions.
    pub fn insts(&self) -> &[Inst] {
        &self.insts
    }

    /// Number of elements of the iteration space.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Renumbers the operand slots of every slot leaf with `f` (used by kernel builders that
    /// place scratch buffers after the kernel's operands).
    pub fn map_slots(&mut self, f: impl Fn(u32) -> u32) {
        *self.memo = Memo::default();
        for l in &mut self.leaves {
            if let LeafSrc::Slot { slot, .. } = &mut l.src {
                *slot = f(*slot);
            }
        }
    }

    /// The operand slots read, with their kinds (sorted, deduplicated).
    pub fn slots(&self) -> Vec<(u32, LeafKind)> {
        let mut v: Vec<(u32, LeafKind)> = self
            .leaves
            .iter()
            .filter_map(|l| match l.src {
                LeafSrc::Slot { slot, kind } => Some((slot, kind)),
                LeafSrc::Iota { .. } => None,
            })
            .collect();
        v.sort_by_key(|&(s, k)| (s, k as u8));
        v.dedup();
        v
    }

    /// `Some((slot, offset))` when the expression is one output that is operand `slot` (f32)
    /// read contiguously from `offset` (flat index `i` at address `offset + i`), so a caller
    /// can read the operand in place instead of evaluating the expression.
    pub fn as_contiguous_load(&self) -> Option<(u32, usize)> {
        let [Inst {
            dst,
            op: InstOp::Load(l),
        }] = self.insts.as_slice()
        else {
            return None;
        };
        if self.outputs.as_slice() != [*dst] {
            return None;
        }
        let leaf = self.leaves.get(*l as usize)?;
        let LeafSrc::Slot {
            slot,
            kind: LeafKind::F32,
        } = leaf.src
        else {
            return None;
        };
        (leaf.offset >= 0 && self.row_major(&leaf.strides)).then_some((slot, leaf.offset as usize))
    }

    /// Whether the expression only copies operand slot `slot`, read row-major from its start
    /// (a reshape of a product fused as its epilogue).
    pub fn is_copy_of(&self, slot: u32) -> bool {
        match self.insts.as_slice() {
            [Inst {
                dst,
                op: InstOp::Load(l),
            }] => self.outputs.as_slice() == [*dst] && self.reads_whole(*l, slot),
            _ => false,
        }
    }

    /// Whether the expression is one output, `relu(x)` of operand `slot` (f32) read at the
    /// flat index being computed: a kernel that computes the operand can apply it itself.
    pub fn is_relu_of(&self, slot: u32) -> bool {
        match self.insts.as_slice() {
            [Inst {
                dst: d0,
                op: InstOp::Load(l),
            }, Inst {
                dst: d1,
                op: InstOp::Un(UnOp::Relu, a),
            }] => a == d0 && self.outputs.as_slice() == [*d1] && self.reads_whole(*l, slot),
            _ => false,
        }
    }

    /// Whether leaf `l` reads f32 operand `slot` row-major from its start (element `i` of the
    /// iteration space at flat index `i`).
    fn reads_whole(&self, l: u32, slot: u32) -> bool {
        self.leaves.get(l as usize).is_some_and(|leaf| {
            leaf.src
                == LeafSrc::Slot {
                    slot,
                    kind: LeafKind::F32,
                }
                && leaf.offset == 0
                && self.row_major(&leaf.strides)
        })
    }

    /// Whether `strides` are the row-major strides of [`Expr::dims`] (unit dims aside).
    fn row_major(&self, strides: &[i64]) -> bool {
        let mut want = 1i64;
        for (&n, &s) in self.dims.iter().zip(strides).rev() {
            if n != 1 && s != want {
                return false;
            }
            want = want.saturating_mul(n as i64);
        }
        strides.len() == self.dims.len()
    }

    /// Whether every leaf of operand slot `slot` reads it at the flat index being computed
    /// (offset 0, row-major strides over [`Expr::dims`]), so that the slot can be a window of
    /// the buffer holding just the indices evaluated (a tile of a matmul's product).
    pub fn reads_slot_elementwise(&self, slot: u32) -> bool {
        self.leaves.iter().all(|l| match l.src {
            LeafSrc::Slot { slot: s, kind } if s == slot => {
                kind == LeafKind::F32 && l.offset == 0 && self.row_major(&l.strides)
            }
            _ => true,
        })
    }

    /// Checks the program itself: dimensions, register numbering and def-before-use (once:
    /// later calls return the first call's result).
    pub fn validate_program(&self) -> Result<(), String> {
        self.memo
            .program
            .get_or_init(|| self.check_program())
            .clone()
    }

    /// [`validate_program`](Expr::validate_program)'s checks.
    fn check_program(&self) -> Result<(), String> {
        let n = self
            .shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .filter(|&n| n <= i64::MAX as usize)
            .ok_or_else(|| format!("expression shape {:?} is too large", self.shape))?;
        let m = self.dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        if m != Some(n) {
            return Err(format!(
                "expression dims {:?} do not cover shape {:?}",
                self.dims, self.shape
            ));
        }
        let nr = self.num_regs as usize;
        if nr > 1 << 16 {
            return Err(format!("expression has {nr} registers"));
        }
        for (i, l) in self.leaves.iter().enumerate() {
            if l.strides.len() != self.dims.len() {
                return Err(format!(
                    "leaf {i} has {} strides for a {}-d iteration space",
                    l.strides.len(),
                    self.dims.len()
                ));
            }
            if let LeafSrc::Iota { start, step } = l.src {
                if !start.is_finite() || !step.is_finite() {
                    return Err(format!(
                        "leaf {i} is an iota with a non-finite start or step"
                    ));
                }
            }
        }
        let mut defined = vec![false; nr];
        for (i, inst) in self.insts.iter().enumerate() {
            let d = inst.dst as usize;
            if d >= nr {
                return Err(format!("instruction {i} writes register {d} of {nr}"));
            }
            for r in inst.op.reads() {
                let r = r as usize;
                if r >= nr || !defined[r] {
                    return Err(format!(
                        "instruction {i} reads register {r} before it is written"
                    ));
                }
                if r == d {
                    return Err(format!("instruction {i} reads its own destination {d}"));
                }
            }
            if let InstOp::Load(l) = inst.op {
                if l as usize >= self.leaves.len() {
                    return Err(format!(
                        "instruction {i} loads leaf {l} of {}",
                        self.leaves.len()
                    ));
                }
            }
            defined[d] = true;
        }
        for &o in &self.outputs {
            if o as usize >= nr || !defined[o as usize] {
                return Err(format!("output register {o} is never written"));
            }
        }
        Ok(())
    }

    /// Checks every leaf access stays inside its source for sources of these lengths and kinds;
    /// called once before running (so a corrupted artifact is an error, never UB or a panic).
    pub fn validate(&self, srcs: &[Src<'_>]) -> Result<(), String> {
        self.validate_program()?;
        self.validate_operands(srcs, usize::MAX)
    }

    /// Checks the leaves of slots below `limit` against `srcs` (kinds and address ranges); the
    /// caller checks the others (scratch slots of a kernel).
    pub fn validate_operands(&self, srcs: &[Src<'_>], limit: usize) -> Result<(), String> {
        for (i, l) in self.leaves.iter().enumerate() {
            let LeafSrc::Slot { slot, kind } = l.src else {
                continue;
            };
            if slot as usize >= limit {
                continue;
            }
            let src = srcs.get(slot as usize).ok_or_else(|| {
                format!(
                    "leaf {i} reads operand {slot}, but the kernel has {}",
                    srcs.len()
                )
            })?;
            let ok = matches!(
                (kind, src),
                (LeafKind::F32, Src::F32(_))
                    | (LeafKind::Bool, Src::Bool(_))
                    | (LeafKind::I64, Src::I64(_))
            );
            if !ok {
                return Err(format!(
                    "leaf {i} reads operand {slot} as {kind:?}, but it has another element type"
                ));
            }
            if let Some((lo, hi)) = l.address_range(&self.dims) {
                if lo < 0 || hi >= src.len() as i128 {
                    return Err(format!(
                        "leaf {i} reads addresses {lo}..={hi} of operand {slot}, which has {} elements",
                        src.len()
                    ));
                }
            }
        }
        Ok(())
    }

    /// Evaluates flat iteration indices `start..end`; output `k`'s value at flat index `i` goes
    /// to `outs[k][i - start]`. The expression must have been validated against `srcs`.
    pub fn eval_range(&self, srcs: &[Src<'_>], start: usize, end: usize, outs: &mut [&mut [f32]]) {
        self.eval_range_with(srcs, &[], start, end, outs, false)
    }

    /// [`eval_range`](Expr::eval_range) where a leaf of slot `s` reads address
    /// `offset + Σ i·stride - shift[s]` (slots past `shift.len()` are not shifted): a source that
    /// holds only a window of the buffer the expression indexes, such as the rows of one
    /// block of a reduction. The caller has checked that every address read stays inside.
    /// Values uniform over a block (a row's own reduction result) are computed once per block.
    pub fn eval_range_shifted(
        &self,
        srcs: &[Src<'_>],
        shift: &[i64],
        start: usize,
        end: usize,
        outs: &mut [&mut [f32]],
    ) {
        self.eval_range_with(srcs, shift, start, end, outs, true)
    }

    fn eval_range_with(
        &self,
        srcs: &[Src<'_>],
        shift: &[i64],
        start: usize,
        end: usize,
        outs: &mut [&mut [f32]],
        uniform: bool,
    ) {
        assert_eq!(outs.len(), self.outputs.len(), "one buffer per output");
        let end = end.min(self.numel());
        if start >= end {
            return;
        }
        for o in outs.iter() {
            assert!(o.len() >= end - start, "output buffer too short");
        }
        let EvalPlan(plan, offsets, regs) = &mut self.plan();
        for (l, o) in self.leaves.iter().zip(offsets.iter_mut()) {
            if let LeafSrc::Slot { slot, .. } = l.src {
                *o -= shift.get(slot as usize).copied().unwrap_or(0);
            }
        }
        eval_blocks(
            self,
            (plan, offsets),
            srcs,
            (start, end),
            outs,
            regs,
            uniform,
        );
    }

    /// The iteration plan of [`eval_rows`](Expr::eval_rows), built once for many calls (one
    /// per tile of a product, say).
    pub fn plan(&self) -> EvalPlan<'_> {
        // The register blocks come from this thread's scratch (returned when the plan drops),
        // so the calls of a plan touch no thread-local state.
        let plan = self.cached_plan(false);
        EvalPlan(plan, Offsets::from_slice(&plan.offsets), self.take_regs())
    }

    /// The plan in place or streaming, made on the first call.
    fn cached_plan(&self, stream: bool) -> &Plan {
        self.memo.plans[usize::from(stream)].get_or_init(|| Plan::new(self, stream))
    }

    /// This thread's register blocks, at least this expression's count (handed back by
    /// [`EvalPlan`]'s drop, or by [`eval_task`](Expr::eval_task)).
    fn take_regs(&self) -> Vec<LineVec<f32>> {
        let mut regs = SCRATCH.with(|cell| std::mem::take(&mut *cell.borrow_mut()));
        if regs.len() < self.num_regs as usize {
            regs.resize_with(self.num_regs as usize, || line_zeros(BLOCK));
        }
        regs
    }

    /// One task of [`run_elementwise`]: flat indices `start..end` (inside the iteration space)
    /// into `outs`, with the plan all its tasks share (built once per call, not per task).
    fn eval_task(
        &self,
        plan: &Plan,
        srcs: &[Src<'_>],
        start: usize,
        end: usize,
        outs: &mut [&mut [f32]],
    ) {
        let mut regs = self.take_regs();
        let plan = (plan, &plan.offsets[..]);
        eval_blocks(self, plan, srcs, (start, end), outs, &mut regs, false);
        if plan.0.stream {
            // The non-temporal stores are weakly ordered: they reach memory before the task
            // is reported done.
            simd::stream_fence();
        }
        give_back_regs(regs);
    }

    /// Evaluates the flat ranges `start..start + w` of `rows` (the rows of one tile of a
    /// matmul or convolution product) in one call; operand slot `slot` is each row's own
    /// `&[f32]` (the element at flat index `start + j` is `row[j]`), which the caller sets in
    /// `srcs[slot]` for nothing else. Output `k` of row `i` goes to `outs[i * num_outputs + k]`.
    /// The expression must have been validated against `srcs`, and `plan` must be this
    /// expression's (from [`plan`](Expr::plan)).
    ///
    /// # Panics
    /// If a row or an output is shorter than `w`, a row ends past the iteration space, or
    /// `outs` does not hold one slice per row and output.
    pub fn eval_rows<'s>(
        &self,
        plan: &mut EvalPlan<'_>,
        srcs: &mut [Src<'s>],
        slot: u32,
        rows: &[(usize, &'s [f32])],
        w: usize,
        outs: &mut [&mut [f32]],
    ) {
        assert_eq!(
            outs.len(),
            rows.len() * self.outputs.len(),
            "one slice per row and output"
        );
        assert_eq!(plan.1.len(), self.leaves.len(), "a plan of this expression");
        assert!(
            (slot as usize) < srcs.len(),
            "slot {slot} is not an operand"
        );
        for &(start, row) in rows {
            assert!(
                row.len() >= w && start + w <= self.numel(),
                "row out of range"
            );
        }
        assert!(outs.iter().all(|o| o.len() >= w), "output buffer too short");
        if w == 0 {
            return;
        }
        let EvalPlan(plan, offsets, regs) = plan;
        eval_row_blocks(self, (plan, offsets), srcs, slot, rows, w, outs, regs);
    }

    /// The rows of [`eval_rows`](Expr::eval_rows), checked by it.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn eval_rows_generic<'s>(
        &self,
        (plan, offsets): (&Plan, &mut [i64]),
        srcs: &mut [Src<'s>],
        slot: u32,
        rows: &[(usize, &'s [f32])],
        w: usize,
        outs: &mut [&mut [f32]],
        regs: &mut [LineVec<f32>],
    ) {
        let no = self.outputs.len();
        for (i, &(start, row)) in rows.iter().enumerate() {
            srcs[slot as usize] = Src::F32(row);
            for (l, o) in self.leaves.iter().zip(offsets.iter_mut()) {
                *o = l.offset;
                if matches!(l.src, LeafSrc::Slot { slot: s, .. } if s == slot) {
                    *o -= start as i64;
                }
            }
            let outs = &mut outs[i * no..(i + 1) * no];
            let range = (start, start + w);
            self.eval_blocks_generic::<true>((plan, offsets), srcs, range, outs, regs);
        }
    }

    /// [`eval_blocks_generic`](Expr::eval_blocks_generic) with `UNIFORM` chosen at run time.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn eval_blocks_either(
        &self,
        plan: (&Plan, &[i64]),
        srcs: &[Src<'_>],
        range: (usize, usize),
        outs: &mut [&mut [f32]],
        regs: &mut [LineVec<f32>],
        uniform: bool,
    ) {
        if uniform {
            self.eval_blocks_generic::<true>(plan, srcs, range, outs, regs)
        } else {
            self.eval_blocks_generic::<false>(plan, srcs, range, outs, regs)
        }
    }

    /// With `UNIFORM`, registers that hold one value for the whole block (a per-channel
    /// operand along a row of a convolution's tile, say) are computed once per block; kernels
    /// where that never happens leave it off and keep their loops lean.
    #[inline(always)]
    fn eval_blocks_generic<const UNIFORM: bool>(
        &self,
        (plan, offsets): (&Plan, &[i64]),
        srcs: &[Src<'_>],
        (start, end): (usize, usize),
        outs: &mut [&mut [f32]],
        regs: &mut [LineVec<f32>],
    ) {
        // The multi-index, on the stack for the usual ranks.
        let mut small = [0usize; 8];
        let mut big = vec![];
        let idx: &mut [usize] = if plan.dims.len() <= small.len() {
            &mut small[..plan.dims.len()]
        } else {
            big.resize(plan.dims.len(), 0);
            &mut big
        };
        // A register's values for the current block: its own buffer, a contiguous f32 run of a
        // source read in place (not copied), or one value for the whole block (a broadcast
        // load, a constant, or an op on such values: computed once, not per element).
        let mut state_small = [Reg::Own; 16];
        let mut state_big = vec![];
        let state: &mut [Reg] = if regs.len() <= state_small.len() {
            &mut state_small[..regs.len()]
        } else {
            state_big.resize(regs.len(), Reg::Own);
            &mut state_big
        };
        // Streaming: the next block's lines of each block's source runs, prefetched a few per
        // instruction after the load that found each run.
        let mut ahead = Ahead::new();
        let mut pos = start;
        while pos < end {
            let n = (end - pos).min(plan.block);
            let off = pos - start;
            // Outputs written straight in this block (bit `k`).
            let mut written = 0u64;
            plan.unflatten(pos, idx);
            ahead.clear();
            if plan.stream {
                // The outputs' pages a few pages on (see `simd::warm_page`).
                for o in outs.iter() {
                    simd::warm_page(o.as_ptr().wrapping_add(off + simd::WARM_FLOATS));
                }
            }
            for (i, (inst, &direct)) in self.insts.iter().zip(&plan.direct).enumerate() {
                // Pieces with a prefetch step before each (see `Plan::pieces_after`), or one
                // step per instruction.
                let split = !plan.pieces_after.is_empty() && inst.op.costly();
                if plan.prefetch && plan.pieces_after.is_empty() {
                    ahead.step();
                }
                let di = inst.dst as usize;
                let done = match inst.op {
                    InstOp::Load(l) => {
                        let l = l as usize;
                        let (src, off, st) = (self.leaves[l].src, offsets[l], &plan.strides[l]);
                        contiguous(src, off, st, &plan.dims, idx, srcs, n)
                            .inspect(|&v| {
                                // A run with a broadcast dimension is re-read: it is in cache.
                                // (`prefetch` streams.)
                                if plan.stream && !st.contains(&0) {
                                    simd::warm_page(v.wrapping_add(simd::WARM_FLOATS));
                                    if plan.prefetch {
                                        match plan.pieces_after.get(i) {
                                            Some(&k) => ahead.add(v.wrapping_add(AHEAD * n), n, k),
                                            None => ahead.add(
                                                v.wrapping_add(n),
                                                n,
                                                self.insts.len() - i - 1,
                                            ),
                                        }
                                    }
                                }
                            })
                            .map(Reg::View)
                            .or_else(|| {
                                UNIFORM
                                    .then(|| uniform(src, off, st, &plan.dims, idx, srcs, n))
                                    .flatten()
                            })
                    }
                    InstOp::Const(c) if UNIFORM => Some(Reg::Uni(c)),
                    // Ops on block-uniform operands: one value (see `scalar`).
                    _ if UNIFORM => scalar(&inst.op, state).map(Reg::Uni),
                    _ => None,
                };
                if let Some(r) = done {
                    state[di] = r;
                    continue;
                }
                // A select reads its operands as slices (uniform ones are filled in); the
                // other ops here have at most one uniform operand, read as a constant.
                if UNIFORM && matches!(inst.op, InstOp::Select(..) | InstOp::Fused(_)) {
                    for a in inst.op.reads() {
                        fill_uniform(regs, state, a, n);
                    }
                }
                let uni = |a: u32| match state[a as usize] {
                    Reg::Uni(x) => Some(x),
                    _ => None,
                };
                let mut own = match direct {
                    Some(_) => None,
                    None => Some(std::mem::replace(&mut regs[di], LineVec::new(64))),
                };
                let dst: &mut [f32] = match (direct, own.as_mut()) {
                    (Some(k), _) => &mut outs[k][off..off + n],
                    (None, Some(d)) => &mut d[..n],
                    (None, None) => unreachable!("a register's own buffer was taken"),
                };
                let at = dst.as_ptr();
                let r = |a: u32| reg(regs, state, a, n);
                match inst.op {
                    InstOp::Load(l) => {
                        let l = l as usize;
                        let (src, off) = (self.leaves[l].src, offsets[l]);
                        load(src, off, &plan.strides[l], &plan.dims, idx, srcs, dst);
                    }
                    InstOp::Bin(op, a, b) if UNIFORM => match (uni(a), uni(b)) {
                        (None, Some(y)) => run_bin_c(op, dst, r(a), y),
                        (Some(x), None) => run_c_bin(op, dst, x, r(b)),
                        _ => run_bin(op, dst, r(a), r(b)),
                    },
                    InstOp::Bin(op, a, b) => run_bin(op, dst, r(a), r(b)),
                    InstOp::Const(c) => dst.fill(c),
                    InstOp::Un(op, a) if split => {
                        let a = r(a);
                        for q in pieces(n) {
                            ahead.step();
                            run_un(op, &mut dst[q.clone()], &a[q]);
                        }
                    }
                    InstOp::Fused(f) if split => {
                        let (a, b, c) = (r(f.a), r(f.b), f.add.map(r));
                        for q in pieces(n) {
                            ahead.step();
                            let c = c.map(|c| &c[q.clone()]);
                            run_fused(&f, &mut dst[q.clone()], &a[q.clone()], &b[q], c);
                        }
                    }
                    InstOp::Un(op, a) => run_un(op, dst, r(a)),
                    InstOp::BinC(op, a, c) => run_bin_c(op, dst, r(a), c),
                    InstOp::CBin(op, c, a) => run_c_bin(op, dst, c, r(a)),
                    InstOp::Select(c, a, b) => {
                        let (c, a, b) = (r(c), r(a), r(b));
                        for (o, ((&c, &x), &y)) in dst.iter_mut().zip(c.iter().zip(a).zip(b)) {
                            *o = if c != 0.0 { x } else { y };
                        }
                    }
                    InstOp::PowI(a, k) => run_powi(dst, r(a), k),
                    InstOp::Fused(f) => run_fused(&f, dst, r(f.a), r(f.b), f.add.map(r)),
                }
                match (direct, own) {
                    (Some(k), _) => {
                        // Later instructions read the value where it was written.
                        state[di] = Reg::View(at);
                        written |= 1 << k;
                    }
                    (None, Some(d)) => {
                        regs[di] = d;
                        state[di] = Reg::Own;
                    }
                    (None, None) => {}
                }
            }
            if plan.prefetch {
                // Lines of runs found after the last costly piece.
                ahead.finish();
            }
            for (k, (o, &r)) in outs.iter_mut().zip(&self.outputs).enumerate() {
                if k < 64 && written & (1 << k) != 0 {
                    continue;
                }
                let o = &mut o[off..off + n];
                match state[r as usize] {
                    Reg::Uni(x) => o.fill(x),
                    _ if plan.stream => simd::copy_nt(o, reg(regs, state, r, n)),
                    _ => o.copy_from_slice(reg(regs, state, r, n)),
                }
            }
            pos += n;
        }
    }
}

/// The [`SPLIT`] pieces of a block of `n` elements (whole registers of 16 but the last).
fn pieces(n: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    let per = n.div_ceil(SPLIT).next_multiple_of(16);
    (0..SPLIT).map(move |k| (k * per).min(n)..((k + 1) * per).min(n))
}

/// The source runs of a later block whose cache lines a streaming block loop prefetches, a
/// few lines per instruction or per piece of a costly one (see `Plan::prefetch`); runs past
/// the fourth are left to the hardware prefetcher.
struct Ahead {
    runs: [simd::Spread; 4],
    len: usize,
}

impl Ahead {
    fn new() -> Ahead {
        Ahead {
            runs: [simd::Spread::NONE; 4],
            len: 0,
        }
    }

    /// Forgets the runs of the last block.
    #[inline(always)]
    fn clear(&mut self) {
        self.len = 0;
    }

    /// Adds the run of `n` floats at `p`, to be prefetched over the next `steps` steps.
    #[inline(always)]
    fn add(&mut self, p: *const f32, n: usize, steps: usize) {
        if self.len < self.runs.len() {
            self.runs[self.len] = simd::Spread::new(p, n, steps);
            self.len += 1;
        }
    }

    /// Prefetches the next few lines of every run.
    #[inline(always)]
    fn step(&mut self) {
        for r in &mut self.runs[..self.len] {
            r.step();
        }
    }

    /// Prefetches every line not prefetched yet.
    #[inline(always)]
    fn finish(&mut self) {
        for r in &mut self.runs[..self.len] {
            r.finish();
        }
    }
}

/// The value of an op whose operands are all block-uniform registers, computed by the same
/// scalar functions as the vector loops (so the bits agree); `None` if one is not uniform.
/// Kept out of line: it runs once per block, and the vector loops stay small.
#[inline(never)]
fn scalar(op: &InstOp, state: &[Reg]) -> Option<f32> {
    let uni = |a: &u32| match state[*a as usize] {
        Reg::Uni(x) => Some(x),
        _ => None,
    };
    Some(match op {
        InstOp::Load(_) => return None,
        InstOp::Const(c) => *c,
        InstOp::Un(op, a) => apply_un(*op, uni(a)?),
        InstOp::Bin(op, a, b) => apply_bin(*op, uni(a)?, uni(b)?),
        InstOp::BinC(op, a, c) => apply_bin(*op, uni(a)?, *c),
        InstOp::CBin(op, c, a) => apply_bin(*op, *c, uni(a)?),
        InstOp::Select(c, a, b) => {
            let (c, x, y) = (uni(c)?, uni(a)?, uni(b)?);
            if c != 0.0 {
                x
            } else {
                y
            }
        }
        InstOp::PowI(a, k) => {
            let mut o = [0f32];
            run_powi(&mut o, &[uni(a)?], *k);
            o[0]
        }
        InstOp::Fused(f) => {
            let z = match f.add {
                Some(c) => Some(uni(&c)?),
                None => None,
            };
            f.apply(uni(&f.a)?, uni(&f.b)?, z)
        }
    })
}

/// Where a register's values for the current block are (see `eval_blocks_generic`).
#[derive(Clone, Copy, Debug)]
enum Reg {
    /// Its own buffer.
    Own,
    /// `n` floats of a source, from this address.
    View(*const f32),
    /// The same value at every element of the block.
    Uni(f32),
}

/// Writes a uniform register's value into its own buffer (which a vector loop then reads).
#[inline(always)]
fn fill_uniform(regs: &mut [LineVec<f32>], state: &mut [Reg], a: u32, n: usize) {
    if let Reg::Uni(x) = state[a as usize] {
        regs[a as usize][..n].fill(x);
        state[a as usize] = Reg::Own;
    }
}

/// The slot of a leaf and the address of its element at multi-index `idx`, when the leaf's
/// inner stride is `inner` and the `n` elements from `idx` stay inside one inner segment.
#[inline(always)]
fn block_base(
    src: LeafSrc,
    offset: i64,
    (strides, dims, idx): (&[i64], &[usize], &[usize]),
    n: usize,
    inner: i64,
) -> Option<(usize, usize)> {
    let last = dims.len() - 1;
    let LeafSrc::Slot { slot, .. } = src else {
        return None;
    };
    if strides[last] != inner || dims[last] - idx[last] < n {
        return None;
    }
    let mut base = offset;
    for (&i, &s) in idx.iter().zip(strides) {
        base += i as i64 * s;
    }
    Some((slot as usize, usize::try_from(base).ok()?))
}

/// The value of every one of the `n` iteration elements from multi-index `idx` of a leaf of
/// a source that does not move along them (inner stride 0, inside one inner segment).
#[inline(always)]
fn uniform(
    src: LeafSrc,
    offset: i64,
    strides: &[i64],
    dims: &[usize],
    idx: &[usize],
    srcs: &[Src<'_>],
    n: usize,
) -> Option<Reg> {
    let (slot, b) = block_base(src, offset, (strides, dims, idx), n, 0)?;
    let x = match srcs[slot] {
        Src::F32(v) => *v.get(b)?,
        Src::Bool(v) => f32::from(u8::from(*v.get(b)?)),
        Src::I64(v) => *v.get(b)? as f32,
    };
    Some(Reg::Uni(x))
}

/// The first `n` values of register `a`: its own buffer, or the source run it views (a
/// uniform register is filled in first, see [`fill_uniform`]).
#[inline(always)]
fn reg<'r>(regs: &'r [LineVec<f32>], state: &[Reg], a: u32, n: usize) -> &'r [f32] {
    match state[a as usize] {
        // SAFETY: `contiguous` checked that `n` floats from `v` lie in a source, which
        // outlives the evaluation (the caller's `srcs`).
        Reg::View(v) => unsafe { std::slice::from_raw_parts(v, n) },
        _ => &regs[a as usize][..n],
    }
}

/// Where the `n` consecutive iteration elements from multi-index `idx` of an f32 leaf lie, when
/// they are one contiguous run of its source (inner stride 1, inside one inner segment).
#[inline(always)]
fn contiguous(
    src: LeafSrc,
    offset: i64,
    strides: &[i64],
    dims: &[usize],
    idx: &[usize],
    srcs: &[Src<'_>],
    n: usize,
) -> Option<*const f32> {
    let (slot, b) = block_base(src, offset, (strides, dims, idx), n, 1)?;
    let Src::F32(v) = srcs[slot] else {
        return None;
    };
    v.get(b..b + n).map(<[f32]>::as_ptr)
}

simd::multiversion! {
    /// [`Expr::eval_rows_generic`] in the best compiled copy for this CPU.
    #[allow(clippy::too_many_arguments)]
    fn eval_row_blocks<'s>(
        e: &Expr,
        plan: (&Plan, &mut [i64]),
        srcs: &mut [Src<'s>],
        slot: u32,
        rows: &[(usize, &'s [f32])],
        w: usize,
        outs: &mut [&mut [f32]],
        regs: &mut [LineVec<f32>],
    ) => Expr::eval_rows_generic
}

simd::multiversion! {
    /// [`Expr::eval_blocks_generic`], with block-uniform values or without, in the best
    /// compiled copy for this CPU.
    #[allow(clippy::too_many_arguments)]
    fn eval_blocks(
        e: &Expr,
        plan: (&Plan, &[i64]),
        srcs: &[Src<'_>],
        range: (usize, usize),
        outs: &mut [&mut [f32]],
        regs: &mut [LineVec<f32>],
        uniform: bool,
    ) => Expr::eval_blocks_either
}

/// Loads `dst.len()` consecutive iteration elements starting at multi-index `idx0`.
#[inline(always)]
fn load(
    src: LeafSrc,
    offset: i64,
    strides: &[i64],
    dims: &[usize],
    idx0: &[usize],
    srcs: &[Src<'_>],
    dst: &mut [f32],
) {
    let last = dims.len() - 1;
    let inner = strides[last];
    // The multi-index, on the stack for the usual ranks.
    let mut small = [0usize; 8];
    let mut big = vec![];
    let idx: &mut [usize] = if idx0.len() <= small.len() {
        small[..idx0.len()].copy_from_slice(idx0);
        &mut small[..idx0.len()]
    } else {
        big.extend_from_slice(idx0);
        &mut big
    };
    let n = dst.len();
    let mut pos = 0;
    while pos < n {
        let len = (n - pos).min(dims[last] - idx[last]);
        let mut base = offset;
        for (&i, &s) in idx.iter().zip(strides) {
            base += i as i64 * s;
        }
        let out = &mut dst[pos..pos + len];
        match src {
            LeafSrc::Slot { slot, .. } => match srcs[slot as usize] {
                Src::F32(v) => gather(v, base, inner, out, |x| x),
                Src::Bool(v) => gather(v, base, inner, out, |x| if x { 1.0 } else { 0.0 }),
                Src::I64(v) => gather(v, base, inner, out, |x| x as f32),
            },
            LeafSrc::Iota { start, step } => {
                for (j, o) in out.iter_mut().enumerate() {
                    *o = (start + (base + j as i64 * inner) as f64 * step) as f32;
                }
            }
        }
        pos += len;
        // Advance the multi-index by `len` (the inner segment ends or the block does).
        idx[last] += len;
        let mut k = last;
        while idx[k] == dims[k] && k > 0 {
            idx[k] = 0;
            k -= 1;
            idx[k] += 1;
        }
    }
}

#[inline(always)]
fn gather<T: Copy>(v: &[T], base: i64, stride: i64, out: &mut [f32], f: impl Fn(T) -> f32) {
    let len = out.len();
    if stride == 1 {
        let b = base as usize;
        for (o, &x) in out.iter_mut().zip(&v[b..b + len]) {
            *o = f(x);
        }
    } else if stride == 0 {
        out.fill(f(v[base as usize]));
    } else {
        for (j, o) in out.iter_mut().enumerate() {
            *o = f(v[(base + j as i64 * stride) as usize]);
        }
    }
}

/// Runs the expression over its whole iteration space, in parallel (rayon) over fixed-size
/// blocks (block size independent of the thread count, so results are bitwise identical for
/// any number of threads). `outs[k]` has `numel(shape)` elements.
pub fn run_elementwise(e: &Expr, srcs: &[Src<'_>], outs: &mut [&mut [f32]]) {
    let total = e.numel();
    if total <= TASK {
        e.eval_range(srcs, 0, total, outs);
        return;
    }
    assert_eq!(outs.len(), e.outputs.len(), "one buffer per output");
    assert!(
        outs.iter().all(|o| o.len() >= total),
        "output buffer too short"
    );
    let tasks = total.div_ceil(TASK);
    // Each task's pieces of the outputs, inline (no allocation per task).
    let mut per_task: Vec<SmallVec<[&mut [f32]; 4]>> =
        (0..tasks).map(|_| SmallVec::new()).collect();
    for o in outs.iter_mut() {
        for (t, s) in o[..total].chunks_mut(TASK).enumerate() {
            per_task[t].push(s);
        }
    }
    let plan = e.cached_plan(total >= STREAM_ELEMS);
    per_task
        .into_par_iter()
        .enumerate()
        .for_each(|(t, mut os)| {
            let (s, end) = (t * TASK, ((t + 1) * TASK).min(total));
            e.eval_task(plan, srcs, s, end, &mut os);
        });
}

/// A value of an expression under construction.
pub type Val = u32;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Key {
    Leaf(u32),
    Const(u32),
    Un(UnOp, Val),
    Bin(BinOp, Val, Val),
    BinC(BinOp, Val, u32),
    CBin(BinOp, u32, Val),
    Select(Val, Val, Val),
    PowI(Val, i32),
}

/// Builds an [`Expr`]: values are SSA numbers; [`finish`](ExprBuilder::finish) removes dead
/// code and allocates registers.
#[derive(Clone, Debug)]
pub struct ExprBuilder {
    shape: Vec<usize>,
    dims: Vec<usize>,
    leaves: Vec<Leaf>,
    ops: Vec<InstOp>,
    consts: Vec<Option<f32>>,
    memo: HashMap<Key, Val>,
}

impl ExprBuilder {
    /// A builder over iteration space `shape`.
    pub fn new(shape: &[usize]) -> ExprBuilder {
        ExprBuilder::with_dims(shape, shape)
    }

    /// A builder over iteration space `shape` whose leaves index `dims` (`shape` with some
    /// dimensions split; the caller keeps the element counts equal, [`Expr::validate`] checks).
    pub fn with_dims(shape: &[usize], dims: &[usize]) -> ExprBuilder {
        ExprBuilder {
            shape: shape.to_vec(),
            dims: dims.to_vec(),
            leaves: vec![],
            ops: vec![],
            consts: vec![],
            memo: HashMap::new(),
        }
    }

    /// The iteration space.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The dimensions leaves index.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    fn push(&mut self, key: Key, op: InstOp, c: Option<f32>) -> Val {
        if let Some(&v) = self.memo.get(&key) {
            return v;
        }
        let v = self.ops.len() as Val;
        self.ops.push(op);
        self.consts.push(c);
        self.memo.insert(key, v);
        v
    }

    /// The constant value of `v`, if it is one.
    pub fn as_const(&self, v: Val) -> Option<f32> {
        self.consts.get(v as usize).copied().flatten()
    }

    /// A leaf (identical leaves are loaded once). `leaf.strides` has one entry per dimension.
    pub fn leaf(&mut self, leaf: Leaf) -> Val {
        let i = match self.leaves.iter().position(|l| *l == leaf) {
            Some(i) => i,
            None => {
                self.leaves.push(leaf);
                self.leaves.len() - 1
            }
        } as u32;
        self.push(Key::Leaf(i), InstOp::Load(i), None)
    }

    /// A constant.
    pub fn constant(&mut self, c: f32) -> Val {
        self.push(Key::Const(c.to_bits()), InstOp::Const(c), Some(c))
    }

    /// `op(a)`.
    pub fn un(&mut self, op: UnOp, a: Val) -> Val {
        if let Some(x) = self.as_const(a) {
            return self.constant(apply_un(op, x));
        }
        self.push(Key::Un(op, a), InstOp::Un(op, a), None)
    }

    /// `op(a, b)`.
    pub fn bin(&mut self, op: BinOp, a: Val, b: Val) -> Val {
        match (self.as_const(a), self.as_const(b)) {
            (Some(x), Some(y)) => self.constant(apply_bin(op, x, y)),
            (None, Some(y)) => self.bin_c(op, a, y),
            (Some(x), None) => {
                self.push(Key::CBin(op, x.to_bits(), b), InstOp::CBin(op, x, b), None)
            }
            (None, None) => self.push(Key::Bin(op, a, b), InstOp::Bin(op, a, b), None),
        }
    }

    /// `op(a, c)` with a constant `c`.
    pub fn bin_c(&mut self, op: BinOp, a: Val, c: f32) -> Val {
        if let Some(x) = self.as_const(a) {
            return self.constant(apply_bin(op, x, c));
        }
        match op {
            BinOp::Pow if c.fract() == 0.0 && c.abs() <= 64.0 => return self.powi(a, c as i32),
            BinOp::Pow if c == 0.5 => return self.un(UnOp::Sqrt, a),
            BinOp::Pow if c == -0.5 => return self.un(UnOp::Rsqrt, a),
            _ => {}
        }
        self.push(Key::BinC(op, a, c.to_bits()), InstOp::BinC(op, a, c), None)
    }

    /// `if c != 0 { a } else { b }`.
    pub fn select(&mut self, c: Val, a: Val, b: Val) -> Val {
        if let Some(k) = self.as_const(c) {
            return if k != 0.0 { a } else { b };
        }
        if a == b {
            return a;
        }
        self.push(Key::Select(c, a, b), InstOp::Select(c, a, b), None)
    }

    /// `a^n` for an integer `n`.
    pub fn powi(&mut self, a: Val, n: i32) -> Val {
        if let Some(x) = self.as_const(a) {
            return self.constant(math::powi(x, n));
        }
        if n == 1 {
            return a;
        }
        self.push(Key::PowI(a, n), InstOp::PowI(a, n), None)
    }

    /// The values reachable from `outputs`.
    fn live(ops: &[InstOp], outputs: &[Val]) -> Vec<bool> {
        let mut live = vec![false; ops.len()];
        for &o in outputs {
            live[o as usize] = true;
        }
        for v in (0..ops.len()).rev() {
            if live[v] {
                for r in ops[v].reads() {
                    live[r as usize] = true;
                }
            }
        }
        live
    }

    /// Rewrites chains of elementwise ops whose intermediate values have no other use as
    /// [`Fused`] instructions (the values they no longer read die): a binary op of
    /// [`BinOp::arith`] takes in its operands' unary ops of [`UnOp::fast`], and an `add`
    /// takes in a product (plain or fused) on either side as `p + c`.
    fn fuse(ops: &mut [InstOp], outputs: &[Val]) {
        let live = Self::live(ops, outputs);
        let mut uses = vec![0usize; ops.len()];
        for &o in outputs {
            uses[o as usize] += 1;
        }
        for (op, _) in ops.iter().zip(&live).filter(|(_, &l)| l) {
            for r in op.reads() {
                uses[r as usize] += 1;
            }
        }
        for v in 0..ops.len() {
            let InstOp::Bin(op, a, b) = ops[v] else {
                continue;
            };
            if !live[v] || op.arith().is_none() {
                continue;
            }
            // An operand's own unary op, when this is its only use.
            let pre = |x: Val| match ops[x as usize] {
                InstOp::Un(u, y) if uses[x as usize] == 1 && u.fast().is_some() => (y, Some(u)),
                _ => (x, None),
            };
            // A product (plain or fused, with nothing added yet) used only here.
            let product = |x: Val| match ops[x as usize] {
                _ if uses[x as usize] != 1 => None,
                InstOp::Bin(BinOp::Mul, a, b) => Some(Fused {
                    op: BinOp::Mul,
                    a,
                    pa: None,
                    b,
                    pb: None,
                    add: None,
                }),
                InstOp::Fused(f) if f.op == BinOp::Mul && f.add.is_none() => Some(f),
                _ => None,
            };
            if op == BinOp::Add {
                let sum = product(a)
                    .map(|p| (p, b))
                    .or_else(|| product(b).map(|p| (p, a)));
                if let Some((p, c)) = sum {
                    ops[v] = InstOp::Fused(Fused { add: Some(c), ..p });
                    continue;
                }
            }
            let ((a, pa), (b, pb)) = (pre(a), pre(b));
            if pa.is_some() || pb.is_some() {
                ops[v] = InstOp::Fused(Fused {
                    op,
                    a,
                    pa,
                    b,
                    pb,
                    add: None,
                });
            }
        }
    }

    /// The finished expression computing `outputs` (in order).
    pub fn finish(mut self, outputs: &[Val]) -> Expr {
        Self::fuse(&mut self.ops, outputs);
        let n = self.ops.len();
        let live = Self::live(&self.ops, outputs);
        // Last use of each value (outputs live to the end).
        let mut last = vec![0usize; n];
        for (v, op) in self.ops.iter().enumerate() {
            if live[v] {
                for r in op.reads() {
                    last[r as usize] = last[r as usize].max(v);
                }
            }
        }
        for &o in outputs {
            last[o as usize] = usize::MAX;
        }
        // Keep only the leaves that live loads use.
        let mut leaf_map = vec![u32::MAX; self.leaves.len()];
        let mut leaves = vec![];
        for (&lv, op) in live.iter().zip(&self.ops) {
            if let (true, InstOp::Load(l)) = (lv, *op) {
                if leaf_map[l as usize] == u32::MAX {
                    leaf_map[l as usize] = leaves.len() as u32;
                    leaves.push(self.leaves[l as usize].clone());
                }
            }
        }
        // Linear-scan register allocation: a register is freed after its value's last use,
        // and a destination never shares a register with an operand of its own instruction.
        let mut reg = vec![u32::MAX; n];
        let mut free: Vec<u32> = vec![];
        let mut num_regs = 0u32;
        let mut insts = vec![];
        let mut dying: Vec<Vec<usize>> = vec![vec![]; n];
        for v in 0..n {
            if live[v] && last[v] != usize::MAX && last[v] > v {
                dying[last[v]].push(v);
            }
        }
        for v in 0..n {
            if !live[v] {
                continue;
            }
            let r = free.pop().unwrap_or_else(|| {
                num_regs += 1;
                num_regs - 1
            });
            reg[v] = r;
            let op = match self.ops[v] {
                InstOp::Load(l) => InstOp::Load(leaf_map[l as usize]),
                other => other.map_regs(|a| reg[a as usize]),
            };
            insts.push(Inst { dst: r, op });
            for &d in &dying[v] {
                free.push(reg[d]);
            }
        }
        Expr {
            shape: self.shape,
            dims: self.dims,
            leaves,
            insts,
            num_regs,
            outputs: outputs.iter().map(|&o| reg[o as usize]).collect(),
            memo: Box::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contiguous(shape: &[usize]) -> Vec<i64> {
        let mut s = vec![0i64; shape.len()];
        let mut acc = 1i64;
        for k in (0..shape.len()).rev() {
            s[k] = acc;
            acc *= shape[k] as i64;
        }
        s
    }

    #[test]
    fn broadcast_add_and_register_reuse() {
        let shape = [3usize, 1000];
        let mut b = ExprBuilder::new(&shape);
        let x = b.leaf(Leaf {
            src: LeafSrc::Slot {
                slot: 0,
                kind: LeafKind::F32,
            },
            offset: 0,
            strides: contiguous(&shape),
        });
        let bias = b.leaf(Leaf {
            src: LeafSrc::Slot {
                slot: 1,
                kind: LeafKind::F32,
            },
            offset: 0,
            strides: vec![0, 1],
        });
        let s = b.bin(BinOp::Add, x, bias);
        let t = b.un(UnOp::Relu, s);
        let two = b.constant(2.0);
        let u = b.bin(BinOp::Mul, t, two);
        let e = b.finish(&[u]);
        let xs: Vec<f32> = (0..3000).map(|i| i as f32 - 1500.0).collect();
        let bs: Vec<f32> = (0..1000).map(|i| i as f32).collect();
        let srcs = [Src::F32(&xs), Src::F32(&bs)];
        e.validate(&srcs).unwrap();
        let mut out = vec![0.0; 3000];
        run_elementwise(&e, &srcs, &mut [&mut out]);
        for i in 0..3000 {
            let want = 2.0 * (xs[i] + bs[i % 1000]).max(0.0);
            assert_eq!(out[i], want, "{i}");
        }
        assert!(e.num_regs <= 3, "{e:?}");
        assert!(e.insts.iter().all(|i| !matches!(i.op, InstOp::Fused(_))));
        assert!(e.validate(&srcs[..1]).is_err());
        let short = vec![0.0; 999];
        assert!(e.validate(&[Src::F32(&xs), Src::F32(&short)]).is_err());
    }

    /// The fused loop (AVX-512, where the CPU has it) and the steps one loop each give the
    /// same bits for every pair of unary ops, every binary op, with and without the addend,
    /// at lengths that end inside a register.
    #[test]
    fn fused_loop_is_the_bits_of_its_steps() {
        let n = 1000;
        let xs: Vec<f32> = (0..n).map(|i| (i as f32 - 500.0) / 37.0).collect();
        let ys: Vec<f32> = (0..n)
            .map(|i| 1.5 - (i as f32 * 0.37).sin() * 9.0)
            .collect();
        let cs: Vec<f32> = (0..n).map(|i| (i % 7) as f32 - 3.0).collect();
        let pres = [
            None,
            Some(UnOp::Exp),
            Some(UnOp::Sigmoid),
            Some(UnOp::GeluErf),
            Some(UnOp::Silu),
            Some(UnOp::Tanh),
        ];
        assert!(pres.iter().flatten().all(|u| u.fast().is_some()));
        for op in [BinOp::Add, BinOp::Sub, BinOp::Mul, BinOp::Div] {
            for pa in pres {
                for pb in pres {
                    for add in [None, Some(2)] {
                        let f = Fused {
                            op,
                            a: 0,
                            pa,
                            b: 1,
                            pb,
                            add,
                        };
                        for len in [n, 37, 16, 5] {
                            let c = add.map(|_| &cs[..len]);
                            let (mut got, mut want) = (vec![0f32; len], vec![0f32; len]);
                            run_fused(&f, &mut got, &xs[..len], &ys[..len], c);
                            run_fused_steps(&f, &mut want, &xs[..len], &ys[..len], c);
                            for i in 0..len {
                                let one = f.apply(xs[i], ys[i], c.map(|c| c[i]));
                                assert!(
                                    got[i].to_bits() == want[i].to_bits()
                                        && (want[i].to_bits() == one.to_bits()
                                            || want[i].is_nan() && one.is_nan()),
                                    "{f:?} at {i} of {len}: {} {} {one}",
                                    got[i],
                                    want[i]
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
