//! Operation arguments and the parameter kinds of the op table.

use crate::{DType, ValueRef};

/// The value of one argument of a node, bound to a parameter of the op's schema.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    /// Absent optional value (`None` in Python).
    None,
    /// A tensor value.
    Tensor(ValueRef),
    /// A list of tensors; `None` entries are absent optional tensors (`Tensor?[]`).
    Tensors(Vec<Option<ValueRef>>),
    /// An integer (also a `Scalar` written as an int).
    Int(i64),
    /// A float (also a `Scalar` written as a float).
    Float(f64),
    /// A boolean (also a `Scalar` written as a bool).
    Bool(bool),
    /// A list of integers.
    Ints(Vec<i64>),
    /// A list of floats.
    Floats(Vec<f64>),
    /// A list of booleans.
    Bools(Vec<bool>),
    /// A string.
    Str(String),
    /// A dtype.
    DType(DType),
    /// A layout name (`strided`).
    Layout(String),
    /// A device string (`cpu`).
    Device(String),
    /// A memory format name (`contiguous_format`).
    MemoryFormat(String),
}

impl Arg {
    /// The tensor this argument names, if it is one.
    pub fn as_tensor(&self) -> Option<ValueRef> {
        match self {
            Arg::Tensor(v) => Some(*v),
            _ => None,
        }
    }

    /// Every tensor value this argument references, in order (an iterator: no allocation,
    /// walks over all nodes' arguments are hot in compiling large graphs).
    pub fn values(&self) -> Values<'_> {
        match self {
            Arg::Tensor(v) => Values::One(Some(*v)),
            Arg::Tensors(vs) => Values::List(vs.iter()),
            _ => Values::One(None),
        }
    }

    /// Short description of the argument's kind, for error messages.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Arg::None => "none",
            Arg::Tensor(_) => "tensor",
            Arg::Tensors(_) => "tensor list",
            Arg::Int(_) => "int",
            Arg::Float(_) => "float",
            Arg::Bool(_) => "bool",
            Arg::Ints(_) => "int list",
            Arg::Floats(_) => "float list",
            Arg::Bools(_) => "bool list",
            Arg::Str(_) => "string",
            Arg::DType(_) => "dtype",
            Arg::Layout(_) => "layout",
            Arg::Device(_) => "device",
            Arg::MemoryFormat(_) => "memory format",
        }
    }
}

/// The tensor values of an argument ([`Arg::values`]).
#[derive(Clone, Debug)]
pub enum Values<'a> {
    /// A tensor argument's value (or none, for other arguments).
    One(Option<ValueRef>),
    /// The present entries of a tensor list.
    List(std::slice::Iter<'a, Option<ValueRef>>),
}

impl Iterator for Values<'_> {
    type Item = ValueRef;
    fn next(&mut self) -> Option<ValueRef> {
        match self {
            Values::One(v) => v.take(),
            Values::List(it) => it.by_ref().flatten().next().copied(),
        }
    }
}

/// What a parameter of an op schema accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// `Tensor`.
    Tensor,
    /// `Tensor?`.
    OptTensor,
    /// `Tensor[]`.
    Tensors,
    /// `Tensor?[]`.
    OptTensors,
    /// `int` / `SymInt`.
    Int,
    /// `int?`.
    OptInt,
    /// `int[]`; a single int is accepted and broadcast, as in ATen's `int[2]`.
    Ints,
    /// `int[]?`.
    OptInts,
    /// `float`.
    Float,
    /// `float?`.
    OptFloat,
    /// `float[]?`.
    OptFloats,
    /// `bool`.
    Bool,
    /// `bool?`.
    OptBool,
    /// `bool[]`.
    Bools,
    /// `Scalar` (int, float or bool).
    Scalar,
    /// `Scalar?`.
    OptScalar,
    /// `str`.
    Str,
    /// `str?`.
    OptStr,
    /// `ScalarType?`.
    DType,
    /// `Layout?`.
    Layout,
    /// `Device?`.
    Device,
    /// `MemoryFormat?`.
    MemoryFormat,
}

impl ParamKind {
    /// True if `arg` is a valid value for this kind.
    pub fn accepts(self, arg: &Arg) -> bool {
        use ParamKind as K;
        let optional = matches!(
            self,
            K::OptTensor
                | K::OptInt
                | K::OptInts
                | K::OptFloat
                | K::OptFloats
                | K::OptBool
                | K::OptScalar
                | K::OptStr
                | K::DType
                | K::Layout
                | K::Device
                | K::MemoryFormat
        );
        if matches!(arg, Arg::None) {
            return optional;
        }
        match self {
            K::Tensor | K::OptTensor => matches!(arg, Arg::Tensor(_)),
            K::Tensors => matches!(arg, Arg::Tensors(v) if v.iter().all(Option::is_some)),
            K::OptTensors => matches!(arg, Arg::Tensors(_)),
            K::Int | K::OptInt => matches!(arg, Arg::Int(_)),
            K::Ints | K::OptInts => matches!(arg, Arg::Ints(_)),
            K::Float | K::OptFloat => matches!(arg, Arg::Float(_) | Arg::Int(_)),
            K::OptFloats => matches!(arg, Arg::Floats(_)),
            K::Bool | K::OptBool => matches!(arg, Arg::Bool(_)),
            K::Bools => matches!(arg, Arg::Bools(_)),
            K::Scalar | K::OptScalar => matches!(arg, Arg::Int(_) | Arg::Float(_) | Arg::Bool(_)),
            K::Str | K::OptStr => matches!(arg, Arg::Str(_)),
            K::DType => matches!(arg, Arg::DType(_)),
            K::Layout => matches!(arg, Arg::Layout(_)),
            K::Device => matches!(arg, Arg::Device(_)),
            K::MemoryFormat => matches!(arg, Arg::MemoryFormat(_)),
        }
    }

    /// True for kinds whose values are tensors (printed positionally in the IR text).
    pub fn is_tensor(self) -> bool {
        matches!(
            self,
            ParamKind::Tensor | ParamKind::OptTensor | ParamKind::Tensors | ParamKind::OptTensors
        )
    }
}

/// A parameter's default value, as declared in the op table.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Default {
    /// No default: the argument is required.
    Required,
    /// `None`.
    None,
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A boolean.
    Bool(bool),
    /// An int list.
    Ints(&'static [i64]),
    /// A string.
    Str(&'static str),
    /// A dtype.
    DType(DType),
}

impl Default {
    /// The argument value of this default, or `None` when the parameter is required.
    pub fn to_arg(self) -> Option<Arg> {
        Some(match self {
            Default::Required => return None,
            Default::None => Arg::None,
            Default::Int(n) => Arg::Int(n),
            Default::Float(x) => Arg::Float(x),
            Default::Bool(b) => Arg::Bool(b),
            Default::Ints(v) => Arg::Ints(v.to_vec()),
            Default::Str(s) => Arg::Str(s.to_string()),
            Default::DType(d) => Arg::DType(d),
        })
    }
}

/// One parameter of an op schema.
#[derive(Clone, Copy, Debug)]
pub struct Param {
    /// ATen schema name (`self`, `mat1`, `dim`, ...).
    pub name: &'static str,
    /// What it accepts.
    pub kind: ParamKind,
    /// Default value.
    pub default: Default,
}
