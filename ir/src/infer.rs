//! Type-inference rules of the op table: given the argument values and the types of the tensor
//! arguments, compute the result types, or say what is wrong.

use crate::arg::Arg;
use crate::dtype::promote;
use crate::types::{shape_string, Dim, TensorType};
use crate::{DType, Op};

/// A type-inference rule.
pub type InferFn = fn(&InferCx) -> Result<Vec<TensorType>, String>;

/// Types of one argument: not a tensor, a tensor, or a list of optional tensors.
#[derive(Clone, Debug, PartialEq)]
pub enum ArgType {
    /// A non-tensor argument (or an absent optional tensor).
    NotTensor,
    /// A tensor.
    One(TensorType),
    /// A tensor list; `None` for absent entries.
    List(Vec<Option<TensorType>>),
}

/// What a rule sees: the op, its bound arguments and the types of its tensor arguments.
pub struct InferCx<'a> {
    /// The op being typed.
    pub op: Op,
    /// Arguments, one per schema parameter.
    pub args: &'a [Arg],
    /// Types, parallel to `args`.
    pub types: &'a [ArgType],
}

type R<T> = Result<T, String>;

impl InferCx<'_> {
    fn idx(&self, name: &str) -> usize {
        // Rules only name parameters of their own rows; a wrong name is a bug in the table.
        self.op
            .param_index(name)
            .unwrap_or_else(|| panic!("{}: rule asks for unknown parameter `{name}`", self.op))
    }

    /// The argument bound to parameter `name`.
    pub fn arg(&self, name: &str) -> &Arg {
        &self.args[self.idx(name)]
    }

    /// The type of tensor parameter `name`.
    pub fn t(&self, name: &str) -> R<&TensorType> {
        match &self.types[self.idx(name)] {
            ArgType::One(t) => Ok(t),
            _ => Err(format!("argument `{name}` must be a tensor")),
        }
    }

    /// The type of optional tensor parameter `name`, if present.
    pub fn opt_t(&self, name: &str) -> Option<&TensorType> {
        match &self.types[self.idx(name)] {
            ArgType::One(t) => Some(t),
            _ => None,
        }
    }

    /// The types of tensor-list parameter `name`.
    pub fn list(&self, name: &str) -> R<&[Option<TensorType>]> {
        match &self.types[self.idx(name)] {
            ArgType::List(v) => Ok(v),
            _ => Err(format!("argument `{name}` must be a tensor list")),
        }
    }

    /// Integer parameter `name`.
    pub fn int(&self, name: &str) -> R<i64> {
        match self.arg(name) {
            Arg::Int(n) => Ok(*n),
            a => Err(format!(
                "argument `{name}` must be an int, found {}",
                a.kind_name()
            )),
        }
    }

    /// Optional integer parameter `name`.
    pub fn opt_int(&self, name: &str) -> R<Option<i64>> {
        match self.arg(name) {
            Arg::None => Ok(None),
            _ => self.int(name).map(Some),
        }
    }

    /// Int-list parameter `name` (a single int is read as a one-element list).
    pub fn ints(&self, name: &str) -> R<Vec<i64>> {
        match self.arg(name) {
            Arg::Ints(v) => Ok(v.clone()),
            Arg::Int(n) => Ok(vec![*n]),
            a => Err(format!(
                "argument `{name}` must be an int list, found {}",
                a.kind_name()
            )),
        }
    }

    /// Optional int-list parameter `name`.
    pub fn opt_ints(&self, name: &str) -> R<Option<Vec<i64>>> {
        match self.arg(name) {
            Arg::None => Ok(None),
            _ => self.ints(name).map(Some),
        }
    }

    /// Boolean parameter `name`.
    pub fn bool(&self, name: &str) -> R<bool> {
        match self.arg(name) {
            Arg::Bool(b) => Ok(*b),
            a => Err(format!(
                "argument `{name}` must be a bool, found {}",
                a.kind_name()
            )),
        }
    }

    /// Optional dtype parameter `name`.
    pub fn dtype(&self, name: &str) -> Option<DType> {
        match self.arg(name) {
            Arg::DType(d) => Some(*d),
            _ => None,
        }
    }

    /// Promotion category of a scalar parameter (0 bool, 1 int, 2 float), if present.
    pub fn scalar_category(&self, name: &str) -> Option<u8> {
        match self.arg(name) {
            Arg::Bool(_) => Some(0),
            Arg::Int(_) => Some(1),
            Arg::Float(_) => Some(2),
            _ => None,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// helpers

/// Normalizes a possibly negative dimension index against `rank`.
pub fn norm_dim(dim: i64, rank: usize) -> R<usize> {
    let r = rank.max(1) as i64;
    let d = if dim < 0 { dim + r } else { dim };
    if d < 0 || d >= r {
        return Err(format!(
            "dimension {dim} is out of range for a tensor of rank {rank}"
        ));
    }
    Ok(d as usize)
}

fn static_shape(t: &TensorType, what: &str) -> R<Vec<i64>> {
    t.static_shape().ok_or_else(|| {
        format!(
            "{what} has symbolic shape {}; this op needs static dimensions",
            shape_string(&t.shape)
        )
    })
}

fn tt(dtype: DType, shape: Vec<Dim>) -> TensorType {
    TensorType { dtype, shape }
}

fn st(dtype: DType, shape: &[i64]) -> TensorType {
    TensorType::new(dtype, shape)
}

/// Broadcasts two shapes with NumPy rules.
pub fn broadcast(a: &[Dim], b: &[Dim]) -> R<Vec<Dim>> {
    let n = a.len().max(b.len());
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let da = (i + a.len()).checked_sub(n).map(|j| &a[j]);
        let db = (i + b.len()).checked_sub(n).map(|j| &b[j]);
        out.push(match (da, db) {
            (Some(x), None) | (None, Some(x)) => x.clone(),
            (Some(x), Some(y)) if x == y => x.clone(),
            (Some(Dim::Static(1)), Some(y)) => y.clone(),
            (Some(x), Some(Dim::Static(1))) => x.clone(),
            _ => {
                return Err(format!(
                    "shapes {} and {} do not broadcast",
                    shape_string(a),
                    shape_string(b)
                ))
            }
        });
    }
    Ok(out)
}

/// Result dtype of tensors combined elementwise (dimensioned tensors take priority over 0-d).
pub fn promote_tensors(ts: &[&TensorType]) -> DType {
    let fold = |zero: bool| {
        ts.iter()
            .filter(|t| (t.rank() == 0) == zero)
            .map(|t| t.dtype)
            .reduce(promote)
    };
    match (fold(false), fold(true)) {
        (Some(a), Some(b)) if b.category() > a.category() => b,
        (Some(a), _) => a,
        (None, Some(b)) => b,
        (None, None) => DType::F32,
    }
}

/// Result dtype of a tensor of dtype `d` combined with a Python scalar of `category`.
pub fn promote_scalar(d: DType, category: Option<u8>) -> DType {
    match category {
        Some(c) if c > d.category() => match c {
            2 => DType::F32,
            _ => DType::I64,
        },
        _ => d,
    }
}

fn to_float(d: DType) -> DType {
    if d.is_float() {
        d
    } else {
        DType::F32
    }
}

fn reduce_shape(t: &TensorType, dims: &Option<Vec<i64>>, keepdim: bool) -> R<Vec<Dim>> {
    let all = dims.as_ref().is_none_or(|d| d.is_empty());
    let mut mask = vec![all; t.rank()];
    if !all {
        for &d in dims.iter().flatten() {
            let d = norm_dim(d, t.rank())?;
            if t.rank() > 0 {
                mask[d] = true;
            }
        }
    }
    if t.rank() == 0 {
        return Ok(vec![]);
    }
    Ok(t.shape
        .iter()
        .zip(&mask)
        .filter_map(|(d, &m)| match (m, keepdim) {
            (false, _) => Some(d.clone()),
            (true, true) => Some(Dim::Static(1)),
            (true, false) => None,
        })
        .collect())
}

fn ints_n(v: &[i64], n: usize, what: &str) -> R<Vec<i64>> {
    match v.len() {
        1 => Ok(vec![v[0]; n]),
        l if l == n => Ok(v.to_vec()),
        l => Err(format!("`{what}` has {l} entries, expected 1 or {n}")),
    }
}

fn check_non_negative(sizes: &[i64], what: &str) -> R<()> {
    if let Some(d) = sizes.iter().find(|&&d| d < 0) {
        return Err(format!("`{what}` has negative size {d}"));
    }
    Ok(())
}

fn creation_dtype(cx: &InferCx, fallback: DType) -> DType {
    cx.dtype("dtype").unwrap_or(fallback)
}

// ---------------------------------------------------------------------------------------------
// elementwise

/// Same type as `self`.
pub fn same(cx: &InferCx) -> R<Vec<TensorType>> {
    Ok(vec![cx.t("self")?.clone()])
}

/// Floating unary ops: integer and bool inputs give f32.
pub fn float_unary(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    Ok(vec![t.with_dtype(to_float(t.dtype))])
}

/// [`float_unary`] of an operand named `x` (some `special_*` ops).
pub fn float_unary_x(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("x")?;
    Ok(vec![t.with_dtype(to_float(t.dtype))])
}

/// `special_*_polynomial_*(x, n)`: broadcast, promoted, floating.
pub fn polynomial(cx: &InferCx) -> R<Vec<TensorType>> {
    let (a, b) = (cx.t("x")?, cx.t("n")?);
    let shape = broadcast(&a.shape, &b.shape)?;
    Ok(vec![tt(to_float(promote_tensors(&[a, b])), shape)])
}

/// Predicates: bool result of the same shape.
pub fn bool_unary(cx: &InferCx) -> R<Vec<TensorType>> {
    Ok(vec![cx.t("self")?.with_dtype(DType::Bool)])
}

fn binary_type(cx: &InferCx, other: &str) -> R<TensorType> {
    let a = cx.t("self")?;
    let b = cx.t(other)?;
    let shape = broadcast(&a.shape, &b.shape)?;
    Ok(tt(promote_tensors(&[a, b]), shape))
}

fn other_name(cx: &InferCx) -> &'static str {
    if cx.op.param_index("exponent").is_some() {
        "exponent"
    } else {
        "other"
    }
}

/// Broadcasting binary op with type promotion; `div` without a rounding mode is true division.
pub fn binary(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = binary_type(cx, other_name(cx))?;
    Ok(vec![if true_division(cx) {
        t.with_dtype(to_float(t.dtype))
    } else {
        t
    }])
}

fn true_division(cx: &InferCx) -> bool {
    cx.op.param_index("rounding_mode").is_some() && matches!(cx.arg("rounding_mode"), Arg::None)
}

/// Tensor-scalar op with type promotion.
pub fn binary_scalar(cx: &InferCx) -> R<Vec<TensorType>> {
    let a = cx.t("self")?;
    let d = promote_scalar(a.dtype, cx.scalar_category(other_name(cx)));
    Ok(vec![a.with_dtype(if true_division(cx) {
        to_float(d)
    } else {
        d
    })])
}

/// True division and the like: the promoted type, made floating.
pub fn binary_float(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = binary_type(cx, "other")?;
    Ok(vec![t.with_dtype(to_float(t.dtype))])
}

/// Tensor-scalar true division.
pub fn binary_scalar_float(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = binary_scalar(cx)?.remove(0);
    Ok(vec![t.with_dtype(to_float(t.dtype))])
}

/// Comparisons and logical ops: broadcast shape, bool.
pub fn compare(cx: &InferCx) -> R<Vec<TensorType>> {
    Ok(vec![binary_type(cx, "other")?.with_dtype(DType::Bool)])
}

/// Tensor-scalar comparison.
pub fn compare_scalar(cx: &InferCx) -> R<Vec<TensorType>> {
    Ok(vec![cx.t("self")?.with_dtype(DType::Bool)])
}

/// `pow.Scalar`: scalar base, tensor exponent.
pub fn pow_scalar_base(cx: &InferCx) -> R<Vec<TensorType>> {
    let e = cx.t("exponent")?;
    Ok(vec![e.with_dtype(promote_scalar(
        e.dtype,
        cx.scalar_category("self"),
    ))])
}

/// `where(condition, self, other)`.
pub fn where_self(cx: &InferCx) -> R<Vec<TensorType>> {
    let c = cx.t("condition")?;
    if c.dtype != DType::Bool {
        return Err(format!("condition has dtype {}, expected bool", c.dtype));
    }
    let v = binary_type(cx, "other")?;
    Ok(vec![tt(v.dtype, broadcast(&c.shape, &v.shape)?)])
}

/// `clamp(self, min, max)` with scalar bounds.
pub fn clamp(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    let cat = cx.scalar_category("min").max(cx.scalar_category("max"));
    Ok(vec![t.with_dtype(promote_scalar(t.dtype, cat))])
}

/// `clamp(self, min, max)` with tensor bounds.
pub fn clamp_tensor(cx: &InferCx) -> R<Vec<TensorType>> {
    let mut ts = vec![cx.t("self")?];
    ts.extend(cx.opt_t("min"));
    ts.extend(cx.opt_t("max"));
    let mut shape = ts[0].shape.clone();
    for t in &ts[1..] {
        shape = broadcast(&shape, &t.shape)?;
    }
    Ok(vec![tt(promote_tensors(&ts), shape)])
}

// ---------------------------------------------------------------------------------------------
// matmul

fn check_same_dtype(a: &TensorType, b: &TensorType) -> R<()> {
    if a.dtype != b.dtype {
        return Err(format!(
            "operands have dtypes {} and {}, expected the same",
            a.dtype, b.dtype
        ));
    }
    Ok(())
}

fn check_dim(found: &Dim, expected: &Dim, what: &str) -> R<()> {
    if found != expected {
        return Err(format!("{what} is {found}, expected {expected}"));
    }
    Ok(())
}

/// `mm(self [m, k], mat2 [k, n]) -> [m, n]`.
pub fn mm(cx: &InferCx) -> R<Vec<TensorType>> {
    let (a, b) = (cx.t("self")?, cx.t("mat2")?);
    if a.rank() != 2 || b.rank() != 2 {
        return Err(format!(
            "operands have shapes {} and {}, expected two matrices",
            shape_string(&a.shape),
            shape_string(&b.shape)
        ));
    }
    check_same_dtype(a, b)?;
    if a.shape[1] != b.shape[0] {
        return Err(format!(
            "operand 1 has shape {}, expected [{}, _]",
            shape_string(&b.shape),
            a.shape[1]
        ));
    }
    Ok(vec![tt(
        a.dtype,
        vec![a.shape[0].clone(), b.shape[1].clone()],
    )])
}

/// `bmm(self [b, m, k], mat2 [b, k, n]) -> [b, m, n]`.
pub fn bmm(cx: &InferCx) -> R<Vec<TensorType>> {
    let (a, b) = (cx.t("self")?, cx.t("mat2")?);
    if a.rank() != 3 || b.rank() != 3 {
        return Err(format!(
            "operands have shapes {} and {}, expected two 3-d tensors",
            shape_string(&a.shape),
            shape_string(&b.shape)
        ));
    }
    check_same_dtype(a, b)?;
    check_dim(&b.shape[0], &a.shape[0], "batch size of operand 1")?;
    if a.shape[2] != b.shape[1] {
        return Err(format!(
            "operand 1 has shape {}, expected [{}, {}, _]",
            shape_string(&b.shape),
            a.shape[0],
            a.shape[2]
        ));
    }
    Ok(vec![tt(
        a.dtype,
        vec![a.shape[0].clone(), a.shape[1].clone(), b.shape[2].clone()],
    )])
}

/// `addmm(self, mat1, mat2) = beta * self + alpha * mat1 @ mat2`.
pub fn addmm(cx: &InferCx) -> R<Vec<TensorType>> {
    let (a, b) = (cx.t("mat1")?, cx.t("mat2")?);
    if a.rank() != 2 || b.rank() != 2 {
        return Err(format!(
            "mat1 and mat2 have shapes {} and {}, expected two matrices",
            shape_string(&a.shape),
            shape_string(&b.shape)
        ));
    }
    check_same_dtype(a, b)?;
    if a.shape[1] != b.shape[0] {
        return Err(format!(
            "mat2 has shape {}, expected [{}, _]",
            shape_string(&b.shape),
            a.shape[1]
        ));
    }
    let out = vec![a.shape[0].clone(), b.shape[1].clone()];
    let bias = cx.t("self")?;
    check_same_dtype(bias, a)?;
    if broadcast(&bias.shape, &out)? != out {
        return Err(format!(
            "self has shape {}, which does not broadcast to {}",
            shape_string(&bias.shape),
            shape_string(&out)
        ));
    }
    Ok(vec![tt(a.dtype, out)])
}

// ---------------------------------------------------------------------------------------------
// reductions

fn dims_arg(cx: &InferCx) -> R<Option<Vec<i64>>> {
    match cx.arg("dim") {
        Arg::None => Ok(None),
        Arg::Int(d) => Ok(Some(vec![*d])),
        _ => cx.opt_ints("dim"),
    }
}

/// `sum`: integer and bool inputs accumulate in i64 unless `dtype` says otherwise.
pub fn reduce_sum(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    let d = cx.dtype("dtype").unwrap_or(if t.dtype.is_float() {
        t.dtype
    } else {
        DType::I64
    });
    Ok(vec![tt(
        d,
        reduce_shape(t, &dims_arg(cx)?, cx.bool("keepdim")?)?,
    )])
}

/// `prod`: like `sum`.
pub fn reduce_prod(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    let d = cx.dtype("dtype").unwrap_or(if t.dtype.is_float() {
        t.dtype
    } else {
        DType::I64
    });
    let keep = match cx.op.param_index("keepdim") {
        Some(_) => cx.bool("keepdim")?,
        None => false,
    };
    let dims = match cx.op.param_index("dim") {
        Some(_) => dims_arg(cx)?,
        None => None,
    };
    Ok(vec![tt(d, reduce_shape(t, &dims, keep)?)])
}

fn float_input<'a>(cx: &'a InferCx) -> R<&'a TensorType> {
    let t = cx.t("self")?;
    let d = cx.dtype("dtype").unwrap_or(t.dtype);
    if !d.is_float() {
        return Err(format!(
            "input has dtype {d}; this op needs a floating dtype (pass dtype=)"
        ));
    }
    Ok(t)
}

/// `mean.dim`.
pub fn reduce_mean(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = float_input(cx)?;
    let d = cx.dtype("dtype").unwrap_or(t.dtype);
    Ok(vec![tt(
        d,
        reduce_shape(t, &dims_arg(cx)?, cx.bool("keepdim")?)?,
    )])
}

/// `mean.default`: a 0-d result.
pub fn reduce_mean_all(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = float_input(cx)?;
    Ok(vec![tt(cx.dtype("dtype").unwrap_or(t.dtype), vec![])])
}

/// `amax`/`amin`: same dtype.
pub fn reduce_same(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    Ok(vec![tt(
        t.dtype,
        reduce_shape(t, &dims_arg(cx)?, cx.bool("keepdim")?)?,
    )])
}

/// `any`: bool result.
pub fn reduce_any(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    let (dims, keep) = match cx.op.param_index("dim") {
        Some(_) => (dims_arg(cx)?, cx.bool("keepdim")?),
        None => (None, false),
    };
    Ok(vec![tt(DType::Bool, reduce_shape(t, &dims, keep)?)])
}

/// `argmax`/`argmin`: i64 indices; no `dim` means over the flattened tensor.
pub fn reduce_arg(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    let keep = cx.bool("keepdim")?;
    let shape = match cx.opt_int("dim")? {
        Some(d) => reduce_shape(t, &Some(vec![d]), keep)?,
        None if keep => vec![Dim::Static(1); t.rank()],
        None => vec![],
    };
    Ok(vec![tt(DType::I64, shape)])
}

/// `var`: floating result.
pub fn reduce_var(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    if !t.dtype.is_float() {
        return Err(format!(
            "input has dtype {}, expected a floating dtype",
            t.dtype
        ));
    }
    Ok(vec![tt(
        t.dtype,
        reduce_shape(t, &dims_arg(cx)?, cx.bool("keepdim")?)?,
    )])
}

/// `max.dim`/`min.dim`: values and i64 indices.
pub fn reduce_values_indices(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    let shape = reduce_shape(t, &Some(vec![cx.int("dim")?]), cx.bool("keepdim")?)?;
    Ok(vec![tt(t.dtype, shape.clone()), tt(DType::I64, shape)])
}

/// `cummax`/`cummin(self, dim)`: running values and their i64 indices.
pub fn cumulative_values_indices(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    norm_dim(cx.int("dim")?, t.rank())?;
    Ok(vec![t.clone(), t.with_dtype(DType::I64)])
}

/// `cumsum`: integer inputs accumulate in i64.
pub fn cumsum(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    norm_dim(cx.int("dim")?, t.rank())?;
    let d = cx.dtype("dtype").unwrap_or(if t.dtype.is_float() {
        t.dtype
    } else {
        DType::I64
    });
    Ok(vec![t.with_dtype(d)])
}

// ---------------------------------------------------------------------------------------------
// shapes and data movement

/// Resolves a `view`/`reshape` size list (one `-1` allowed) against `numel`.
pub fn resolve_view(t: &TensorType, sizes: &[i64]) -> R<Vec<i64>> {
    let numel = static_shape(t, "input")?
        .iter()
        .try_fold(1i64, |a, &d| a.checked_mul(d))
        .ok_or("input has more elements than fit in i64")?;
    let mut infer_at = None;
    let mut known = 1i64;
    for (i, &s) in sizes.iter().enumerate() {
        if s == -1 {
            if infer_at.replace(i).is_some() {
                return Err("only one dimension can be -1".into());
            }
        } else if s < 0 {
            return Err(format!("invalid size {s}"));
        } else {
            known = known.checked_mul(s).ok_or("size product overflows i64")?;
        }
    }
    let mut out = sizes.to_vec();
    if let Some(i) = infer_at {
        if known == 0 || numel % known != 0 {
            return Err(format!(
                "shape {sizes:?} is invalid for an input of {numel} elements"
            ));
        }
        out[i] = numel / known;
    } else if known != numel {
        return Err(format!(
            "shape {sizes:?} is invalid for an input of {numel} elements"
        ));
    }
    Ok(out)
}

/// `view(self, size)`.
pub fn view(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    Ok(vec![st(t.dtype, &resolve_view(t, &cx.ints("size")?)?)])
}

/// `permute(self, dims)`.
pub fn permute(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    let dims = cx.ints("dims")?;
    if dims.len() != t.rank() {
        return Err(format!(
            "dims {dims:?} has {} entries for a tensor of rank {}",
            dims.len(),
            t.rank()
        ));
    }
    let mut seen = vec![false; t.rank()];
    let mut shape = vec![];
    for &d in &dims {
        let d = norm_dim(d, t.rank())?;
        if std::mem::replace(&mut seen[d], true) {
            return Err(format!("dims {dims:?} repeats dimension {d}"));
        }
        shape.push(t.shape[d].clone());
    }
    Ok(vec![tt(t.dtype, shape)])
}

/// `expand(self, size)`: `-1` keeps a dimension; new dimensions are prepended.
pub fn expand(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    let sizes = cx.ints("size")?;
    if sizes.len() < t.rank() {
        return Err(format!(
            "size {sizes:?} has fewer dimensions than the input {}",
            shape_string(&t.shape)
        ));
    }
    let lead = sizes.len() - t.rank();
    let mut shape = vec![];
    for (i, &s) in sizes.iter().enumerate() {
        let cur = i.checked_sub(lead).map(|j| &t.shape[j]);
        shape.push(match (cur, s) {
            (Some(c), -1) => c.clone(),
            (None, -1) => {
                return Err(format!(
                    "size {sizes:?}: -1 is not allowed for a new dimension"
                ))
            }
            (_, s) if s < 0 => return Err(format!("size {sizes:?} has negative entry {s}")),
            (Some(c), s) if *c == Dim::Static(s) || *c == Dim::Static(1) => Dim::Static(s),
            (Some(Dim::Sym(_)), s) => Dim::Static(s),
            (Some(c), s) => {
                return Err(format!(
                    "cannot expand dimension {i} of size {c} to {s} (input shape {})",
                    shape_string(&t.shape)
                ))
            }
            (None, s) => Dim::Static(s),
        });
    }
    Ok(vec![tt(t.dtype, shape)])
}

/// `unsqueeze(self, dim)`.
pub fn unsqueeze(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    let d = norm_dim(cx.int("dim")?, t.rank() + 1)?;
    let mut shape = t.shape.clone();
    shape.insert(d, Dim::Static(1));
    Ok(vec![tt(t.dtype, shape)])
}

fn squeeze_impl(t: &TensorType, dims: &[i64]) -> R<Vec<TensorType>> {
    let mut drop = vec![false; t.rank()];
    for &d in dims {
        if t.rank() == 0 {
            norm_dim(d, 0)?;
            continue;
        }
        let d = norm_dim(d, t.rank())?;
        drop[d] = t.shape[d] == Dim::Static(1);
    }
    let shape = t
        .shape
        .iter()
        .zip(&drop)
        .filter(|(_, &x)| !x)
        .map(|(d, _)| d.clone())
        .collect();
    Ok(vec![tt(t.dtype, shape)])
}

/// `squeeze.dim`.
pub fn squeeze_dim(cx: &InferCx) -> R<Vec<TensorType>> {
    squeeze_impl(cx.t("self")?, &[cx.int("dim")?])
}

/// `squeeze.dims`.
pub fn squeeze_dims(cx: &InferCx) -> R<Vec<TensorType>> {
    squeeze_impl(cx.t("self")?, &cx.ints("dim")?)
}

/// Clamps slice bounds the way PyTorch does; returns (start, end, len).
pub fn slice_bounds(size: i64, start: Option<i64>, end: Option<i64>, step: i64) -> (i64, i64, i64) {
    let clamp = |v: i64| {
        let v = if v < 0 { v + size } else { v };
        v.clamp(0, size)
    };
    let s = start.map(clamp).unwrap_or(0);
    let e = end.map(clamp).unwrap_or(size).max(s);
    // (e - s) is at most `size`; divide first so a huge step cannot overflow.
    let span = e - s;
    let len = span / step + i64::from(span % step != 0);
    (s, e, len)
}

/// `slice(self, dim, start, end, step)`.
pub fn slice(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    let d = norm_dim(cx.int("dim")?, t.rank())?;
    let step = cx.int("step")?;
    if step <= 0 {
        return Err(format!("slice step must be positive, found {step}"));
    }
    let mut shape = t.shape.clone();
    let size = shape
        .get(d)
        .and_then(Dim::as_static)
        .ok_or("slice of a symbolic or 0-d dimension is not supported yet")?;
    let (_, _, len) = slice_bounds(size, cx.opt_int("start")?, cx.opt_int("end")?, step);
    shape[d] = Dim::Static(len);
    Ok(vec![tt(t.dtype, shape)])
}

/// `select(self, dim, index)`.
pub fn select(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    if t.rank() == 0 {
        return Err("select on a 0-d tensor".into());
    }
    let d = norm_dim(cx.int("dim")?, t.rank())?;
    let i = cx.int("index")?;
    if let Some(n) = t.shape[d].as_static() {
        if i < -n || i >= n {
            return Err(format!(
                "index {i} is out of range for dimension {d} of size {n}"
            ));
        }
    }
    let mut shape = t.shape.clone();
    shape.remove(d);
    Ok(vec![tt(t.dtype, shape)])
}

/// `cat(tensors, dim)`; 1-d empty tensors are skipped, as in PyTorch.
pub fn cat(cx: &InferCx) -> R<Vec<TensorType>> {
    let list = cx.list("tensors")?;
    let ts: Vec<&TensorType> = list.iter().flatten().collect();
    let first = ts
        .iter()
        .find(|t| !(t.rank() == 1 && t.shape[0] == Dim::Static(0)))
        .or(ts.first())
        .ok_or("cat of an empty list")?;
    let d = norm_dim(cx.int("dim")?, first.rank())?;
    let mut total = 0i64;
    for (i, t) in ts.iter().enumerate() {
        if t.rank() == 1 && t.shape[0] == Dim::Static(0) {
            continue;
        }
        if t.rank() != first.rank() {
            return Err(format!(
                "tensor {i} has shape {}, expected rank {}",
                shape_string(&t.shape),
                first.rank()
            ));
        }
        for (j, (a, b)) in t.shape.iter().zip(&first.shape).enumerate() {
            if j != d && a != b {
                return Err(format!(
                    "tensor {i} has shape {}, expected {} outside dimension {d}",
                    shape_string(&t.shape),
                    shape_string(&first.shape)
                ));
            }
        }
        total += t.shape[d]
            .as_static()
            .ok_or("cat along a symbolic dimension is not supported yet")?;
    }
    let mut shape = first.shape.clone();
    shape[d] = Dim::Static(total);
    Ok(vec![tt(promote_tensors(&ts), shape)])
}

/// `split_with_sizes(self, split_sizes, dim)`.
pub fn split_with_sizes(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    let d = norm_dim(cx.int("dim")?, t.rank())?;
    let sizes = cx.ints("split_sizes")?;
    check_non_negative(&sizes, "split_sizes")?;
    let total = sizes
        .iter()
        .try_fold(0i64, |a, &b| a.checked_add(b))
        .ok_or_else(|| format!("split_sizes {sizes:?} overflow"))?;
    if t.shape[d] != Dim::Static(total) {
        return Err(format!(
            "split_sizes {sizes:?} sum to {total}, but dimension {d} has size {}",
            t.shape[d]
        ));
    }
    Ok(sizes
        .iter()
        .map(|&s| {
            let mut shape = t.shape.clone();
            shape[d] = Dim::Static(s);
            tt(t.dtype, shape)
        })
        .collect())
}

/// `repeat(self, repeats)`.
pub fn repeat(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    let reps = cx.ints("repeats")?;
    check_non_negative(&reps, "repeats")?;
    if reps.len() < t.rank() {
        return Err(format!(
            "repeats {reps:?} has fewer entries than the input's rank {}",
            t.rank()
        ));
    }
    let shape = static_shape(t, "input")?;
    let lead = reps.len() - shape.len();
    let out: Vec<i64> = reps
        .iter()
        .enumerate()
        .map(|(i, &r)| r.checked_mul(if i < lead { 1 } else { shape[i - lead] }))
        .collect::<Option<_>>()
        .ok_or_else(|| format!("repeats {reps:?} overflow the size of the result"))?;
    Ok(vec![st(t.dtype, &out)])
}

/// `constant_pad_nd(self, pad, value)`: pad pairs start from the last dimension; negative pads crop.
pub fn constant_pad_nd(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    let pad = cx.ints("pad")?;
    pad_shape(t, &pad)
}

fn pad_shape(t: &TensorType, pad: &[i64]) -> R<Vec<TensorType>> {
    if !pad.len().is_multiple_of(2) || pad.len() / 2 > t.rank() {
        return Err(format!(
            "pad {pad:?} must have an even length of at most twice the rank {}",
            t.rank()
        ));
    }
    let mut shape = static_shape(t, "input")?;
    let r = shape.len();
    for (i, pair) in pad.chunks(2).enumerate() {
        let d = r - 1 - i;
        shape[d] = shape[d]
            .checked_add(pair[0])
            .and_then(|x| x.checked_add(pair[1]))
            .ok_or_else(|| format!("pad {pad:?} overflows dimension {d}"))?;
        if shape[d] < 0 {
            return Err(format!("pad {pad:?} makes dimension {d} negative"));
        }
    }
    Ok(vec![st(t.dtype, &shape)])
}

/// Reflection and replication pads.
pub fn pad_nd(cx: &InferCx) -> R<Vec<TensorType>> {
    pad_shape(cx.t("self")?, &cx.ints("padding")?)
}

/// `diagonal(self, offset, dim1, dim2)`.
pub fn diagonal(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    let shape = static_shape(t, "input")?;
    let d1 = norm_dim(cx.int("dim1")?, t.rank())?;
    let d2 = norm_dim(cx.int("dim2")?, t.rank())?;
    if d1 == d2 {
        return Err("dim1 and dim2 must differ".into());
    }
    let off = cx.int("offset")?;
    let len = if off >= 0 {
        shape[d1].min(shape[d2] - off)
    } else {
        (shape[d1] + off).min(shape[d2])
    }
    .max(0);
    let mut out: Vec<i64> = shape
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != d1 && *i != d2)
        .map(|(_, &d)| d)
        .collect();
    out.push(len);
    Ok(vec![st(t.dtype, &out)])
}

/// `as_strided(self, size, stride, storage_offset)`.
pub fn as_strided(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    let size = cx.ints("size")?;
    let stride = cx.ints("stride")?;
    check_non_negative(&size, "size")?;
    if size.len() != stride.len() {
        return Err(format!(
            "size {size:?} and stride {stride:?} differ in length"
        ));
    }
    Ok(vec![st(t.dtype, &size)])
}

/// `_to_copy(self, dtype=...)`.
pub fn to_copy(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    Ok(vec![t.with_dtype(cx.dtype("dtype").unwrap_or(t.dtype))])
}

// ---------------------------------------------------------------------------------------------
// neural-network ops

fn window_out(input: i64, k: i64, s: i64, p: i64, d: i64, ceil: bool) -> R<i64> {
    if s <= 0 || k <= 0 || d <= 0 {
        return Err(format!(
            "kernel {k}, stride {s} and dilation {d} must be positive"
        ));
    }
    let big = |x: i128| i64::try_from(x).map_err(|_| "window arithmetic overflows".to_string());
    let eff = big(d as i128 * (k as i128 - 1) + 1)?;
    let span = big(input as i128 + 2 * p as i128 - eff as i128)?;
    if span < 0 {
        return Err(format!(
            "window of {eff} (padding {p}) is larger than the input size {input}"
        ));
    }
    let mut out = if ceil { (span + s - 1) / s } else { span / s } + 1;
    if ceil && (out - 1) * s >= input + p {
        out -= 1;
    }
    Ok(out)
}

/// `convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)`.
pub fn convolution(cx: &InferCx) -> R<Vec<TensorType>> {
    let x = cx.t("input")?;
    let w = cx.t("weight")?;
    check_same_dtype(x, w)?;
    let xs = static_shape(x, "input")?;
    let ws = static_shape(w, "weight")?;
    if xs.len() < 3 || ws.len() != xs.len() {
        return Err(format!(
            "input {:?} and weight {:?} must both be (N, C, spatial...) of the same rank",
            xs, ws
        ));
    }
    let n = xs.len() - 2;
    let stride = ints_n(&cx.ints("stride")?, n, "stride")?;
    let padding = ints_n(&cx.ints("padding")?, n, "padding")?;
    let dilation = ints_n(&cx.ints("dilation")?, n, "dilation")?;
    let groups = cx.int("groups")?;
    if groups <= 0 {
        return Err(format!("groups must be positive, found {groups}"));
    }
    let transposed = cx.bool("transposed")?;
    let cout;
    let mut out = vec![xs[0]];
    if !transposed {
        if xs[1] != ws[1] * groups {
            return Err(format!(
                "input has {} channels, but weight {:?} with groups={groups} expects {}",
                xs[1],
                ws,
                ws[1] * groups
            ));
        }
        if ws[0] % groups != 0 {
            return Err(format!(
                "weight {:?}: out channels not divisible by groups={groups}",
                ws
            ));
        }
        cout = ws[0];
        out.push(cout);
        for i in 0..n {
            out.push(window_out(
                xs[2 + i],
                ws[2 + i],
                stride[i],
                padding[i],
                dilation[i],
                false,
            )?);
        }
    } else {
        let op = ints_n(&cx.ints("output_padding")?, n, "output_padding")?;
        if xs[1] != ws[0] {
            return Err(format!(
                "input has {} channels, but transposed weight {:?} expects {}",
                xs[1], ws, ws[0]
            ));
        }
        cout = ws[1] * groups;
        out.push(cout);
        for i in 0..n {
            // In i128: no i64 input can overflow it.
            let size = (xs[2 + i] as i128 - 1) * stride[i] as i128 - 2 * padding[i] as i128
                + dilation[i] as i128 * (ws[2 + i] as i128 - 1)
                + op[i] as i128
                + 1;
            if !(0..=i64::MAX as i128).contains(&size) {
                return Err(format!(
                    "transposed convolution output size {size} is invalid"
                ));
            }
            out.push(size as i64);
        }
    }
    if let Some(b) = cx.opt_t("bias") {
        if b.shape != [Dim::Static(cout)] {
            return Err(format!(
                "bias has shape {}, expected [{cout}]",
                shape_string(&b.shape)
            ));
        }
    }
    Ok(vec![st(x.dtype, &out)])
}

fn pool_dims(cx: &InferCx, with_dilation: bool) -> R<(Vec<i64>, Vec<i64>)> {
    let t = cx.t("self")?;
    let xs = static_shape(t, "input")?;
    let n = if cx.op.aten().contains("3d") { 3 } else { 2 };
    if xs.len() != n + 1 && xs.len() != n + 2 {
        return Err(format!(
            "input has shape {xs:?}, expected {} or {} dimensions",
            n + 1,
            n + 2
        ));
    }
    let k = ints_n(&cx.ints("kernel_size")?, n, "kernel_size")?;
    let s = cx.ints("stride")?;
    let s = if s.is_empty() {
        k.clone()
    } else {
        ints_n(&s, n, "stride")?
    };
    let p = ints_n(&cx.ints("padding")?, n, "padding")?;
    let d = if with_dilation {
        ints_n(&cx.ints("dilation")?, n, "dilation")?
    } else {
        vec![1; n]
    };
    let ceil = cx.bool("ceil_mode")?;
    let lead = xs.len() - n;
    let mut out = xs[..lead].to_vec();
    for i in 0..n {
        if p[i] * 2 > k[i] {
            return Err(format!(
                "padding {} must be at most half the kernel size {}",
                p[i], k[i]
            ));
        }
        out.push(window_out(xs[lead + i], k[i], s[i], p[i], d[i], ceil)?);
    }
    Ok((xs, out))
}

/// `max_pool{2,3}d_with_indices`: values and i64 indices.
pub fn max_pool_with_indices(cx: &InferCx) -> R<Vec<TensorType>> {
    let (_, out) = pool_dims(cx, true)?;
    let d = cx.t("self")?.dtype;
    Ok(vec![st(d, &out), st(DType::I64, &out)])
}

/// `avg_pool{2,3}d`.
pub fn avg_pool(cx: &InferCx) -> R<Vec<TensorType>> {
    let (_, out) = pool_dims(cx, false)?;
    Ok(vec![st(cx.t("self")?.dtype, &out)])
}

/// `_adaptive_avg_pool{2,3}d`.
pub fn adaptive_avg_pool(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    let os = cx.ints("output_size")?;
    check_non_negative(&os, "output_size")?;
    if t.rank() < os.len() + 1 {
        return Err(format!(
            "input {} has too few dimensions for output_size {os:?}",
            shape_string(&t.shape)
        ));
    }
    let mut shape: Vec<Dim> = t.shape[..t.rank() - os.len()].to_vec();
    shape.extend(os.iter().map(|&d| Dim::Static(d)));
    Ok(vec![tt(t.dtype, shape)])
}

fn channel_param(cx: &InferCx, name: &str, c: &Dim) -> R<()> {
    if let Some(p) = cx.opt_t(name) {
        if p.shape != [c.clone()] {
            return Err(format!(
                "{name} has shape {}, expected [{c}]",
                shape_string(&p.shape)
            ));
        }
    }
    Ok(())
}

/// `_native_batch_norm_legit*`: output, saved mean, saved inverse std.
pub fn batch_norm(cx: &InferCx) -> R<Vec<TensorType>> {
    let x = cx.t("input")?;
    if x.rank() < 2 {
        return Err(format!(
            "input has shape {}, expected (N, C, ...)",
            shape_string(&x.shape)
        ));
    }
    let c = x.shape[1].clone();
    for p in ["weight", "bias", "running_mean", "running_var"] {
        if cx.op.param_index(p).is_some() {
            channel_param(cx, p, &c)?;
        }
    }
    // Eval mode saves no statistics: torch returns empty tensors for them.
    let training = match cx.op {
        Op::NativeBatchNormLegitNoTraining => false,
        _ => cx.bool("training")?,
    };
    let stat = if training { c } else { Dim::Static(0) };
    Ok(vec![
        x.clone(),
        tt(x.dtype, vec![stat.clone()]),
        tt(x.dtype, vec![stat]),
    ])
}

/// `native_layer_norm(input, normalized_shape, weight, bias, eps)`: output, mean, rstd.
pub fn layer_norm(cx: &InferCx) -> R<Vec<TensorType>> {
    let x = cx.t("input")?;
    let ns = cx.ints("normalized_shape")?;
    let k = ns.len();
    let tail: Vec<Dim> = ns.iter().map(|&d| Dim::Static(d)).collect();
    if k > x.rank() || x.shape[x.rank() - k..] != tail[..] {
        return Err(format!(
            "normalized_shape {ns:?} does not match the trailing dimensions of input {}",
            shape_string(&x.shape)
        ));
    }
    for p in ["weight", "bias"] {
        if let Some(t) = cx.opt_t(p) {
            if t.shape != tail {
                return Err(format!(
                    "{p} has shape {}, expected {ns:?}",
                    shape_string(&t.shape)
                ));
            }
        }
    }
    let mut stat = x.shape[..x.rank() - k].to_vec();
    stat.extend(std::iter::repeat_n(Dim::Static(1), k));
    Ok(vec![
        x.clone(),
        tt(x.dtype, stat.clone()),
        tt(x.dtype, stat),
    ])
}

/// `native_group_norm(input, weight, bias, N, C, HxW, group, eps)`: output, mean [N, G], rstd.
pub fn group_norm(cx: &InferCx) -> R<Vec<TensorType>> {
    let x = cx.t("input")?;
    let (n, c, g) = (cx.int("N")?, cx.int("C")?, cx.int("group")?);
    if g <= 0 || c % g != 0 {
        return Err(format!("C={c} is not divisible by group={g}"));
    }
    channel_param(cx, "weight", &Dim::Static(c))?;
    channel_param(cx, "bias", &Dim::Static(c))?;
    Ok(vec![x.clone(), st(x.dtype, &[n, g]), st(x.dtype, &[n, g])])
}

/// `_softmax`/`_log_softmax(self, dim, half_to_float)`.
pub fn softmax(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    if !t.dtype.is_float() {
        return Err(format!(
            "input has dtype {}, expected a floating dtype",
            t.dtype
        ));
    }
    norm_dim(cx.int("dim")?, t.rank())?;
    let d = if cx.bool("half_to_float")? {
        DType::F32
    } else {
        t.dtype
    };
    Ok(vec![t.with_dtype(d)])
}

fn check_index_dtype(t: &TensorType, what: &str) -> R<()> {
    if !matches!(t.dtype, DType::I64 | DType::I32) {
        return Err(format!("{what} has dtype {}, expected i64 or i32", t.dtype));
    }
    Ok(())
}

/// `embedding(weight, indices)`: `indices.shape + [dim]`.
pub fn embedding(cx: &InferCx) -> R<Vec<TensorType>> {
    let w = cx.t("weight")?;
    let i = cx.t("indices")?;
    check_index_dtype(i, "indices")?;
    if w.rank() != 2 {
        return Err(format!(
            "weight has shape {}, expected a matrix",
            shape_string(&w.shape)
        ));
    }
    let mut shape = i.shape.clone();
    shape.push(w.shape[1].clone());
    Ok(vec![tt(w.dtype, shape)])
}

/// `gather(self, dim, index)`: the index's shape.
pub fn gather(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    let i = cx.t("index")?;
    check_index_dtype(i, "index")?;
    if i.rank() != t.rank() && !(t.rank() == 0 && i.rank() <= 1) {
        return Err(format!(
            "index has rank {}, expected the rank of self ({})",
            i.rank(),
            t.rank()
        ));
    }
    let dim = norm_dim(cx.int("dim")?, t.rank())?;
    for (d, (a, b)) in i.shape.iter().zip(&t.shape).enumerate() {
        if let (Some(a), Some(b)) = (a.as_static(), b.as_static()) {
            if d != dim && a > b {
                return Err(format!(
                    "index has shape {}, larger than self {} outside dimension {dim}",
                    shape_string(&i.shape),
                    shape_string(&t.shape)
                ));
            }
        }
    }
    Ok(vec![tt(t.dtype, i.shape.clone())])
}

/// `index.Tensor(self, indices)`: advanced indexing with NumPy placement rules.
pub fn index(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    let idx = cx.list("indices")?;
    if idx.len() > t.rank() {
        return Err(format!(
            "{} indices for a tensor of rank {}",
            idx.len(),
            t.rank()
        ));
    }
    let mut bshape: Option<Vec<Dim>> = None;
    let mut positions = vec![];
    for (d, i) in idx.iter().enumerate() {
        if let Some(i) = i {
            if i.dtype == DType::Bool || i.dtype == DType::U8 {
                return Err(
                    "boolean mask indices have a data-dependent shape; not supported".into(),
                );
            }
            check_index_dtype(i, &format!("index {d}"))?;
            bshape = Some(match bshape {
                None => i.shape.clone(),
                Some(s) => broadcast(&s, &i.shape)?,
            });
            positions.push(d);
        }
    }
    let bshape = bshape.ok_or("index with no index tensors")?;
    let contiguous = positions.windows(2).all(|w| w[1] == w[0] + 1);
    let rest = |r: std::ops::Range<usize>| -> Vec<Dim> {
        r.filter(|d| !positions.contains(d))
            .map(|d| t.shape[d].clone())
            .collect()
    };
    let shape = if contiguous {
        let first = positions[0];
        let mut s = rest(0..first);
        s.extend(bshape);
        s.extend(rest(first..t.rank()));
        s
    } else {
        let mut s = bshape;
        s.extend(rest(0..t.rank()));
        s
    };
    Ok(vec![tt(t.dtype, shape)])
}

/// `index_select(self, dim, index)`.
pub fn index_select(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    let i = cx.t("index")?;
    check_index_dtype(i, "index")?;
    if i.rank() > 1 {
        return Err(format!("index has rank {}, expected 0 or 1", i.rank()));
    }
    let mut shape = t.shape.clone();
    if t.rank() > 0 {
        let d = norm_dim(cx.int("dim")?, t.rank())?;
        shape[d] = i.shape.first().cloned().unwrap_or(Dim::Static(1));
    }
    Ok(vec![tt(t.dtype, shape)])
}

/// `sort(self, dim, descending)`: values and i64 indices.
pub fn sort(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    norm_dim(cx.int("dim")?, t.rank())?;
    Ok(vec![t.clone(), t.with_dtype(DType::I64)])
}

/// `searchsorted(sorted_sequence, self, out_int32, right, side, sorter)`: an index per element
/// of `self` (i32 with `out_int32`); the sequence is 1-D or has `self`'s leading dims.
pub fn searchsorted(cx: &InferCx) -> R<Vec<TensorType>> {
    let seq = cx.t("sorted_sequence")?;
    let t = cx.t("self")?;
    if seq.rank() == 0 {
        return Err("sorted_sequence must have at least one dimension".into());
    }
    if seq.rank() > 1 && seq.shape[..seq.rank() - 1] != t.shape[..t.rank().saturating_sub(1)] {
        return Err(format!(
            "sorted_sequence {} and self {} must have the same leading dimensions",
            shape_string(&seq.shape),
            shape_string(&t.shape)
        ));
    }
    if let Some(s) = cx.opt_t("sorter") {
        if s.shape != seq.shape {
            return Err(format!(
                "sorter {} must have the shape of sorted_sequence {}",
                shape_string(&s.shape),
                shape_string(&seq.shape)
            ));
        }
    }
    let d = if cx.bool("out_int32")? {
        DType::I32
    } else {
        DType::I64
    };
    Ok(vec![t.with_dtype(d)])
}

/// `histc(self, bins, min, max)`: `bins` counts in the input's (floating) dtype.
pub fn histc(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    if !t.dtype.is_float() {
        return Err(format!("histc needs a floating input, found {}", t.dtype));
    }
    let bins = cx.int("bins")?;
    if bins <= 0 {
        return Err(format!("bins must be positive, found {bins}"));
    }
    Ok(vec![st(t.dtype, &[bins])])
}

/// `unfold(self, dimension, size, step)`: windows of `size` along `dimension`, every `step`,
/// as a new last dimension.
pub fn unfold(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    let (size, step) = (cx.int("size")?, cx.int("step")?);
    if step <= 0 || size < 0 {
        return Err(format!(
            "size must be non-negative and step positive, found size {size}, step {step}"
        ));
    }
    let d = norm_dim(cx.int("dimension")?, t.rank())?;
    let mut shape = t.shape.clone();
    let n = if t.rank() == 0 {
        1
    } else {
        static_shape(t, "self")?[d]
    };
    if size > n {
        return Err(format!(
            "size {size} is larger than dimension {d} of size {n}"
        ));
    }
    if t.rank() > 0 {
        shape[d] = Dim::Static((n - size) / step + 1);
    }
    shape.push(Dim::Static(size));
    Ok(vec![tt(t.dtype, shape)])
}

/// `topk(self, k, dim)`: values and i64 indices.
pub fn topk(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    let k = cx.int("k")?;
    let mut shape = t.shape.clone();
    if t.rank() > 0 {
        let d = norm_dim(cx.int("dim")?, t.rank())?;
        if let Some(n) = shape[d].as_static() {
            if k < 0 || k > n {
                return Err(format!(
                    "k={k} is out of range for dimension {d} of size {n}"
                ));
            }
        }
        shape[d] = Dim::Static(k);
    }
    Ok(vec![tt(t.dtype, shape.clone()), tt(DType::I64, shape)])
}

/// `upsample_{nearest,bilinear}2d.vec(input, output_size, ..., scale_factors)`.
pub fn upsample(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("input")?;
    let xs = static_shape(t, "input")?;
    if xs.len() != 4 {
        return Err(format!("input has shape {xs:?}, expected (N, C, H, W)"));
    }
    let size = match (cx.opt_ints("output_size")?, cx.arg("scale_factors")) {
        (Some(s), _) => ints_n(&s, 2, "output_size")?,
        (None, Arg::Floats(f)) if f.len() == 2 => vec![
            (xs[2] as f64 * f[0]).floor() as i64,
            (xs[3] as f64 * f[1]).floor() as i64,
        ],
        _ => return Err("one of output_size or scale_factors (2 floats) is required".into()),
    };
    Ok(vec![st(t.dtype, &[xs[0], xs[1], size[0], size[1]])])
}

/// `native_dropout(input, p, train)`: output and a bool mask.
pub fn native_dropout(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("input")?;
    Ok(vec![t.clone(), t.with_dtype(DType::Bool)])
}

// ---------------------------------------------------------------------------------------------
// creation

fn sizes(cx: &InferCx) -> R<Vec<i64>> {
    let s = cx.ints("size")?;
    check_non_negative(&s, "size")?;
    Ok(s)
}

/// `full(size, fill_value, dtype=...)`: dtype defaults from the fill value.
pub fn full(cx: &InferCx) -> R<Vec<TensorType>> {
    let fallback = match cx.scalar_category("fill_value") {
        Some(0) => DType::Bool,
        Some(1) => DType::I64,
        _ => DType::F32,
    };
    Ok(vec![st(creation_dtype(cx, fallback), &sizes(cx)?)])
}

/// `full_like(self, fill_value, dtype=...)`.
pub fn full_like(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    Ok(vec![t.with_dtype(creation_dtype(cx, t.dtype))])
}

/// `empty`/`empty_strided(size, ...)`.
pub fn empty(cx: &InferCx) -> R<Vec<TensorType>> {
    Ok(vec![st(creation_dtype(cx, DType::F32), &sizes(cx)?)])
}

/// `rand`/`randn(size, ...)`.
pub fn random(cx: &InferCx) -> R<Vec<TensorType>> {
    let d = creation_dtype(cx, DType::F32);
    if !d.is_float() {
        return Err(format!("dtype {d} is not floating"));
    }
    Ok(vec![st(d, &sizes(cx)?)])
}

/// `randperm(n)`.
pub fn randperm(cx: &InferCx) -> R<Vec<TensorType>> {
    let n = cx.int("n")?;
    check_non_negative(&[n], "n")?;
    Ok(vec![st(creation_dtype(cx, DType::I64), &[n])])
}

/// The number of entries of `tril_indices(row, col, offset)` (`lower`) or `triu_indices`.
pub fn tri_count(row: i64, col: i64, offset: i64, lower: bool) -> i64 {
    (0..row.max(0))
        .map(|i| {
            if lower {
                (i + offset + 1).clamp(0, col)
            } else {
                col - (i + offset).clamp(0, col)
            }
        })
        .sum()
}

/// The entries of `tril_indices(row, col, offset)` (`lower`) or `triu_indices`: the row
/// coordinates of the triangle row by row, then its column coordinates (the `[2, count]`
/// result, flattened). The interpreter and the StableHLO lowering both write these.
pub fn tri_coordinates(row: i64, col: i64, offset: i64, lower: bool) -> Vec<i64> {
    let (mut rows, mut cols) = (vec![], vec![]);
    for i in 0..row.max(0) {
        let (lo, hi) = if lower {
            (0, (i + offset + 1).clamp(0, col))
        } else {
            ((i + offset).clamp(0, col), col)
        };
        for j in lo..hi {
            rows.push(i);
            cols.push(j);
        }
    }
    rows.extend(cols);
    rows
}

/// `tril_indices`/`triu_indices(row, col, offset)`: a `[2, count]` index tensor.
pub fn tri_indices(cx: &InferCx) -> R<Vec<TensorType>> {
    let (row, col) = (cx.int("row")?, cx.int("col")?);
    check_non_negative(&[row, col], "row and col")?;
    let d = creation_dtype(cx, DType::I64);
    if d != DType::I64 && d != DType::I32 {
        return Err(format!("dtype must be int64 or int32, found {d}"));
    }
    let lower = cx.op == Op::TrilIndices;
    Ok(vec![st(
        d,
        &[2, tri_count(row, col, cx.int("offset")?, lower)],
    )])
}

/// `scalar_tensor(s, dtype=...)`: 0-d.
pub fn scalar_tensor(cx: &InferCx) -> R<Vec<TensorType>> {
    Ok(vec![st(creation_dtype(cx, DType::F32), &[])])
}

fn scalar_f64(a: &Arg) -> Option<f64> {
    match a {
        Arg::Int(n) => Some(*n as f64),
        Arg::Float(x) => Some(*x),
        _ => None,
    }
}

/// `arange(start, end, step)`: length `ceil((end - start) / step)`.
pub fn arange(cx: &InferCx) -> R<Vec<TensorType>> {
    let (s, e, st_) = (cx.arg("start"), cx.arg("end"), cx.arg("step"));
    let all_int = [s, e, st_].iter().all(|a| matches!(a, Arg::Int(_)));
    let (s, e, step) = match (scalar_f64(s), scalar_f64(e), scalar_f64(st_)) {
        (Some(s), Some(e), Some(t)) => (s, e, t),
        _ => return Err("start, end and step must be numbers".into()),
    };
    if step == 0.0 || ((e - s) / step) < 0.0 {
        return Err(format!("arange({s}, {e}, {step}) has an invalid step"));
    }
    let n = ((e - s) / step).ceil();
    if !n.is_finite() || n > i64::MAX as f64 {
        return Err("arange length is not finite".into());
    }
    let fallback = if all_int { DType::I64 } else { DType::F32 };
    Ok(vec![st(creation_dtype(cx, fallback), &[n as i64])])
}

// ---------------------------------------------------------------------------------------------
// backward ops and the rest

/// Gradient ops whose result has the type of `self`.
pub fn grad_like_self(cx: &InferCx) -> R<Vec<TensorType>> {
    Ok(vec![cx.t("self")?.clone()])
}

/// `convolution_backward`: grad input, grad weight, grad bias; masked-off results are `[0]`.
pub fn convolution_backward(cx: &InferCx) -> R<Vec<TensorType>> {
    let x = cx.t("input")?;
    let w = cx.t("weight")?;
    let mask = match cx.arg("output_mask") {
        Arg::Bools(m) if m.len() == 3 => m.clone(),
        _ => return Err("output_mask must be 3 bools".into()),
    };
    let empty = st(x.dtype, &[0]);
    let bias = match cx.opt_ints("bias_sizes")? {
        Some(b) => st(x.dtype, &b),
        None => {
            let groups = cx.int("groups")?;
            let cout = if cx.bool("transposed")? {
                w.shape
                    .get(1)
                    .and_then(Dim::as_static)
                    .unwrap_or(0)
                    .saturating_mul(groups)
            } else {
                w.shape.first().and_then(Dim::as_static).unwrap_or(0)
            };
            st(x.dtype, &[cout])
        }
    };
    let pick = |on: bool, t: TensorType| if on { t } else { empty.clone() };
    Ok(vec![
        pick(mask[0], x.clone()),
        pick(mask[1], w.clone()),
        pick(mask[2], bias),
    ])
}

/// `embedding_dense_backward`: `[num_weights, dim]`.
pub fn embedding_dense_backward(cx: &InferCx) -> R<Vec<TensorType>> {
    let g = cx.t("grad_output")?;
    let n = cx.int("num_weights")?;
    let d = g.shape.last().cloned().ok_or("grad_output is 0-d")?;
    Ok(vec![tt(g.dtype, vec![Dim::Static(n), d])])
}

/// `native_layer_norm_backward`: grads of input, weight and bias.
pub fn layer_norm_backward(cx: &InferCx) -> R<Vec<TensorType>> {
    let x = cx.t("input")?;
    let ns = cx.ints("normalized_shape")?;
    let mask = match cx.arg("output_mask") {
        Arg::Bools(m) if m.len() == 3 => m.clone(),
        _ => return Err("output_mask must be 3 bools".into()),
    };
    let param = st(x.dtype, &ns);
    let empty = st(x.dtype, &[0]);
    let pick = |on: bool, t: TensorType| if on { t } else { empty.clone() };
    Ok(vec![
        pick(mask[0], x.clone()),
        pick(mask[1] && cx.opt_t("weight").is_some(), param.clone()),
        pick(mask[2] && cx.opt_t("bias").is_some(), param),
    ])
}

/// `native_group_norm_backward`: grads of input, weight and bias.
pub fn group_norm_backward(cx: &InferCx) -> R<Vec<TensorType>> {
    let x = cx.t("input")?;
    let c = cx.int("C")?;
    let mask = match cx.arg("output_mask") {
        Arg::Bools(m) if m.len() == 3 => m.clone(),
        _ => return Err("output_mask must be 3 bools".into()),
    };
    let empty = st(x.dtype, &[0]);
    let pick = |on: bool, t: TensorType| if on { t } else { empty.clone() };
    Ok(vec![
        pick(mask[0], x.clone()),
        pick(mask[1], st(x.dtype, &[c])),
        pick(mask[2], st(x.dtype, &[c])),
    ])
}

/// `grid_sampler_2d(input [N,C,H,W], grid [N,Ho,Wo,2])`: `[N, C, Ho, Wo]`.
pub fn grid_sampler_2d(cx: &InferCx) -> R<Vec<TensorType>> {
    let x = cx.t("input")?;
    let g = cx.t("grid")?;
    if x.rank() != 4 || g.rank() != 4 || g.shape[3] != Dim::Static(2) {
        return Err(format!(
            "input {} and grid {} must be (N,C,H,W) and (N,H,W,2)",
            shape_string(&x.shape),
            shape_string(&g.shape)
        ));
    }
    Ok(vec![tt(
        x.dtype,
        vec![
            x.shape[0].clone(),
            x.shape[1].clone(),
            g.shape[1].clone(),
            g.shape[2].clone(),
        ],
    )])
}

/// `col2im(self [N, C*kh*kw, L], output_size, kernel_size, ...)`: `[N, C, H, W]`.
pub fn col2im(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    let xs = static_shape(t, "input")?;
    let os = ints_n(&cx.ints("output_size")?, 2, "output_size")?;
    let k = ints_n(&cx.ints("kernel_size")?, 2, "kernel_size")?;
    let (lead, ck) = match xs.len() {
        2 => (vec![], xs[0]),
        3 => (vec![xs[0]], xs[1]),
        _ => {
            return Err(format!(
                "input has shape {xs:?}, expected 2 or 3 dimensions"
            ))
        }
    };
    if k[0] * k[1] == 0 || ck % (k[0] * k[1]) != 0 {
        return Err(format!(
            "{ck} columns are not divisible by the kernel size {k:?}"
        ));
    }
    let mut out = lead;
    out.extend([ck / (k[0] * k[1]), os[0], os[1]]);
    Ok(vec![st(t.dtype, &out)])
}

/// `_cdist_forward(x1 [.., P, M], x2 [.., R, M])`: `[.., P, R]`.
pub fn cdist(cx: &InferCx) -> R<Vec<TensorType>> {
    let a = cx.t("x1")?;
    let b = cx.t("x2")?;
    if a.rank() < 2 || b.rank() < 2 || a.shape[a.rank() - 1] != b.shape[b.rank() - 1] {
        return Err(format!(
            "x1 {} and x2 {} must end in the same feature size",
            shape_string(&a.shape),
            shape_string(&b.shape)
        ));
    }
    let batch = broadcast(&a.shape[..a.rank() - 2], &b.shape[..b.rank() - 2])?;
    let mut shape = batch;
    shape.push(a.shape[a.rank() - 2].clone());
    shape.push(b.shape[b.rank() - 2].clone());
    Ok(vec![tt(a.dtype, shape)])
}

/// `_pdist_forward(self [N, M])`: `[N (N - 1) / 2]`.
pub fn pdist(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    let xs = static_shape(t, "input")?;
    if xs.len() != 2 {
        return Err(format!("input has shape {xs:?}, expected a matrix"));
    }
    Ok(vec![st(t.dtype, &[xs[0] * (xs[0] - 1) / 2])])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(v: &[i64]) -> Vec<Dim> {
        v.iter().map(|&x| Dim::Static(x)).collect()
    }

    #[test]
    fn broadcast_rules() {
        assert_eq!(broadcast(&d(&[4, 1]), &d(&[3])).unwrap(), d(&[4, 3]));
        assert!(broadcast(&d(&[4, 2]), &d(&[3])).is_err());
        let s = vec![Dim::Sym("s0".into()), Dim::Static(1)];
        assert_eq!(
            broadcast(&s, &d(&[5])).unwrap(),
            vec![Dim::Sym("s0".into()), Dim::Static(5)]
        );
    }

    #[test]
    fn view_resolves_minus_one() {
        let t = TensorType::new(DType::F32, &[2, 3, 4]);
        assert_eq!(resolve_view(&t, &[-1, 4]).unwrap(), vec![6, 4]);
        assert!(resolve_view(&t, &[5, -1]).is_err());
        assert!(resolve_view(&t, &[-1, -1]).is_err());
    }

    #[test]
    fn window_sizes_match_torch() {
        // max_pool2d(k=3, s=2, p=1, ceil_mode=True) on 4 -> 3 (checked with torch)
        assert_eq!(window_out(4, 3, 2, 1, 1, true).unwrap(), 3);
        assert_eq!(window_out(64, 7, 2, 3, 1, false).unwrap(), 32);
        assert!(window_out(2, 5, 1, 0, 1, false).is_err());
    }

    #[test]
    fn slice_clamps() {
        assert_eq!(slice_bounds(10, Some(2), Some(i64::MAX), 3), (2, 10, 3));
        assert_eq!(slice_bounds(10, Some(-3), None, 1), (7, 10, 3));
        assert_eq!(slice_bounds(10, Some(8), Some(2), 1), (8, 8, 0));
    }
}

/// `index_put(self, indices, values, accumulate)`: the type of `self`; indices are integer or
/// boolean masks, and `values` has `self`'s dtype.
pub fn index_put(cx: &InferCx) -> R<Vec<TensorType>> {
    let t = cx.t("self")?;
    for (d, i) in cx.list("indices")?.iter().enumerate() {
        if let Some(i) = i {
            if !matches!(i.dtype, DType::I64 | DType::I32 | DType::Bool | DType::U8) {
                return Err(format!(
                    "index {d} has dtype {}, expected an integer or bool",
                    i.dtype
                ));
            }
        }
    }
    let v = cx.t("values")?;
    if v.dtype != t.dtype {
        return Err(format!(
            "values have dtype {}, expected {} (the dtype of self)",
            v.dtype, t.dtype
        ));
    }
    Ok(vec![t.clone()])
}

// ---------------------------------------------------------------------------------------------
// linear algebra (matrices are the last two dimensions; the others are batch dimensions)

/// A floating tensor of rank >= 2 with static matrix dimensions: (batch dims, rows, columns).
fn matrix(t: &TensorType, what: &str) -> R<(Vec<Dim>, i64, i64)> {
    if !t.dtype.is_float() {
        return Err(format!(
            "{what} has dtype {}, expected a floating dtype",
            t.dtype
        ));
    }
    if t.rank() < 2 {
        return Err(format!(
            "{what} has shape {}, expected a matrix or a batch of matrices",
            shape_string(&t.shape)
        ));
    }
    let r = t.rank();
    let dims = static_shape(
        &TensorType {
            dtype: t.dtype,
            shape: t.shape[r - 2..].to_vec(),
        },
        what,
    )?;
    Ok((t.shape[..r - 2].to_vec(), dims[0], dims[1]))
}

/// [`matrix`], square.
fn square(t: &TensorType, what: &str) -> R<(Vec<Dim>, i64)> {
    let (b, m, n) = matrix(t, what)?;
    if m != n {
        return Err(format!(
            "{what} has shape {}, expected square matrices",
            shape_string(&t.shape)
        ));
    }
    Ok((b, n))
}

/// `batch` followed by static dimensions.
fn batched(dtype: DType, batch: &[Dim], dims: &[i64]) -> TensorType {
    let mut shape = batch.to_vec();
    shape.extend(dims.iter().map(|&d| Dim::Static(d)));
    tt(dtype, shape)
}

fn str_arg<'a>(cx: &'a InferCx, name: &str) -> R<&'a str> {
    match cx.arg(name) {
        Arg::Str(s) => Ok(s),
        a => Err(format!(
            "argument `{name}` must be a string, found {}",
            a.kind_name()
        )),
    }
}

/// `linalg_matrix_exp(self)`: square matrices, same type.
pub fn linalg_matrix_exp(cx: &InferCx) -> R<Vec<TensorType>> {
    let a = cx.t("self")?;
    square(a, "self")?;
    Ok(vec![a.clone()])
}

/// `linalg_ldl_factor_ex(self, hermitian, check_errors)`: LD, i32 pivots `[.., n]`, i32 info.
pub fn linalg_ldl_factor(cx: &InferCx) -> R<Vec<TensorType>> {
    let a = cx.t("self")?;
    let (b, n) = square(a, "self")?;
    Ok(vec![
        a.clone(),
        batched(DType::I32, &b, &[n]),
        batched(DType::I32, &b, &[]),
    ])
}

/// Checks the operands of a solve from a factorization (`linalg_lu_solve`, `linalg_ldl_solve`):
/// the factor `fac` square, `pivots` integer `[.., n]`, `B` of the factor's dtype; returns the
/// factor's batch dims and size.
fn factor_pivots_rhs(
    fac: &TensorType,
    name: &str,
    piv: &TensorType,
    bt: &TensorType,
) -> R<(Vec<Dim>, i64)> {
    let (lb, n) = square(fac, name)?;
    if !matches!(piv.dtype, DType::I32 | DType::I64) {
        return Err(format!(
            "pivots have dtype {}, expected an integer dtype",
            piv.dtype
        ));
    }
    let mut want = lb.clone();
    want.push(Dim::Static(n));
    if piv.shape != want {
        return Err(format!(
            "pivots have shape {}, expected {}",
            shape_string(&piv.shape),
            shape_string(&want)
        ));
    }
    if bt.dtype != fac.dtype {
        return Err(format!(
            "B has dtype {}, expected {} ({name}'s)",
            bt.dtype, fac.dtype
        ));
    }
    Ok((lb, n))
}

/// `linalg_ldl_solve(LD, pivots, B, hermitian)`: as [`linalg_lu_solve`] with left = true.
pub fn linalg_ldl_solve(cx: &InferCx) -> R<Vec<TensorType>> {
    let (ld, piv, bt) = (cx.t("LD")?, cx.t("pivots")?, cx.t("B")?);
    let (lb, n) = factor_pivots_rhs(ld, "LD", piv, bt)?;
    let (bb, m, k) = matrix(bt, "B")?;
    if m != n {
        return Err(format!("B has {m} rows, LD is {n}x{n}"));
    }
    Ok(vec![broadcast_batch(&lb, &bb, &[m, k], ld.dtype)?])
}

/// `linalg_lu_factor_ex(A, pivot, check_errors)`: LU, i32 pivots `[.., min(m, n)]`, i32 info.
pub fn linalg_lu_factor(cx: &InferCx) -> R<Vec<TensorType>> {
    let a = cx.t("A")?;
    let (b, m, n) = matrix(a, "A")?;
    Ok(vec![
        a.clone(),
        batched(DType::I32, &b, &[m.min(n)]),
        batched(DType::I32, &b, &[]),
    ])
}

/// `linalg_lu(A, pivot)`: P `[.., m, m]` (`[0]` without pivoting), L `[.., m, k]`, U `[.., k, n]`.
pub fn linalg_lu(cx: &InferCx) -> R<Vec<TensorType>> {
    let a = cx.t("A")?;
    let (b, m, n) = matrix(a, "A")?;
    let k = m.min(n);
    let p = if cx.bool("pivot")? {
        batched(a.dtype, &b, &[m, m])
    } else {
        st(a.dtype, &[0])
    };
    Ok(vec![
        p,
        batched(a.dtype, &b, &[m, k]),
        batched(a.dtype, &b, &[k, n]),
    ])
}

/// `lu_unpack(LU_data, LU_pivots, unpack_data, unpack_pivots)`: P, L, U as [`linalg_lu`]
/// (`[0]` for the parts not unpacked).
pub fn lu_unpack(cx: &InferCx) -> R<Vec<TensorType>> {
    let a = cx.t("LU_data")?;
    let (b, m, n) = matrix(a, "LU_data")?;
    let k = m.min(n);
    let piv = cx.t("LU_pivots")?;
    if !matches!(piv.dtype, DType::I32 | DType::I64) {
        return Err(format!(
            "LU_pivots has dtype {}, expected an integer dtype",
            piv.dtype
        ));
    }
    let mut want = b.clone();
    want.push(Dim::Static(k));
    if piv.shape != want {
        return Err(format!(
            "LU_pivots has shape {}, expected {}",
            shape_string(&piv.shape),
            shape_string(&want)
        ));
    }
    let empty = st(a.dtype, &[0]);
    let p = if cx.bool("unpack_pivots")? {
        batched(a.dtype, &b, &[m, m])
    } else {
        empty.clone()
    };
    let (l, u) = if cx.bool("unpack_data")? {
        (batched(a.dtype, &b, &[m, k]), batched(a.dtype, &b, &[k, n]))
    } else {
        (empty.clone(), empty)
    };
    Ok(vec![p, l, u])
}

/// `linalg_cholesky_ex(self, upper, check_errors)`: the factor and i32 info.
pub fn linalg_cholesky(cx: &InferCx) -> R<Vec<TensorType>> {
    let a = cx.t("self")?;
    let (b, _) = square(a, "self")?;
    Ok(vec![a.clone(), batched(DType::I32, &b, &[])])
}

/// `linalg_inv_ex(A, check_errors)`: the inverse and i32 info.
pub fn linalg_inv(cx: &InferCx) -> R<Vec<TensorType>> {
    let a = cx.t("A")?;
    let (b, _) = square(a, "A")?;
    Ok(vec![a.clone(), batched(DType::I32, &b, &[])])
}

/// `_linalg_det(A)`: det `[..]`, LU, i32 pivots.
pub fn linalg_det(cx: &InferCx) -> R<Vec<TensorType>> {
    let a = cx.t("A")?;
    let (b, n) = square(a, "A")?;
    Ok(vec![
        batched(a.dtype, &b, &[]),
        a.clone(),
        batched(DType::I32, &b, &[n]),
    ])
}

/// `_linalg_slogdet(A)`: sign `[..]`, log|det| `[..]`, LU, i32 pivots.
pub fn linalg_slogdet(cx: &InferCx) -> R<Vec<TensorType>> {
    let a = cx.t("A")?;
    let (b, n) = square(a, "A")?;
    let s = batched(a.dtype, &b, &[]);
    Ok(vec![s.clone(), s, a.clone(), batched(DType::I32, &b, &[n])])
}

/// Whether `B` of `_linalg_solve_ex(A, B)` is a (batch of) vector(s), as ATen decides:
/// `B` is 1-D, or has `A`'s shape less its last dimension.
pub fn solve_is_vector_rhs(a: &TensorType, b: &TensorType) -> bool {
    b.rank() == 1 || (a.rank() == b.rank() + 1 && b.shape[..] == a.shape[..a.rank() - 1])
}

/// Batch dims of two operands broadcast; the result shape `batch + trailing`.
fn broadcast_batch(a: &[Dim], b: &[Dim], trailing: &[i64], dtype: DType) -> R<TensorType> {
    let batch = broadcast(a, b)?;
    Ok(batched(dtype, &batch, trailing))
}

/// `_linalg_solve_ex(A, B, left, check_errors)`: the solution (batch dims broadcast), A's LU,
/// i32 pivots and info.
pub fn linalg_solve(cx: &InferCx) -> R<Vec<TensorType>> {
    let (a, bt) = (cx.t("A")?, cx.t("B")?);
    let (ab, n) = square(a, "A")?;
    if bt.dtype != a.dtype {
        return Err(format!(
            "B has dtype {}, expected {} (A's)",
            bt.dtype, a.dtype
        ));
    }
    let left = cx.bool("left")?;
    let x = if solve_is_vector_rhs(a, bt) {
        let r = bt.rank();
        let len = static_shape(bt, "B")?[r - 1];
        if len != n {
            return Err(format!("B has {len} rows, A is {n}x{n}"));
        }
        broadcast_batch(&ab, &bt.shape[..r - 1], &[n], a.dtype)?
    } else {
        let (bb, m, k) = matrix(bt, "B")?;
        if (if left { m } else { k }) != n {
            return Err(format!(
                "B has shape {}, which does not fit A {n}x{n}{}",
                shape_string(&bt.shape),
                if left { "" } else { " (left=False)" }
            ));
        }
        broadcast_batch(&ab, &bb, &[m, k], a.dtype)?
    };
    Ok(vec![
        x,
        a.clone(),
        batched(DType::I32, &ab, &[n]),
        batched(DType::I32, &ab, &[]),
    ])
}

/// `linalg_lu_solve(LU, pivots, B, left, adjoint)`: the solution, batch dims broadcast.
pub fn linalg_lu_solve(cx: &InferCx) -> R<Vec<TensorType>> {
    let (lu, piv, bt) = (cx.t("LU")?, cx.t("pivots")?, cx.t("B")?);
    let (lb, n) = factor_pivots_rhs(lu, "LU", piv, bt)?;
    let (bb, m, k) = matrix(bt, "B")?;
    let left = cx.bool("left")?;
    if (if left { m } else { k }) != n {
        return Err(format!(
            "B has shape {}, which does not fit LU {n}x{n}",
            shape_string(&bt.shape)
        ));
    }
    Ok(vec![broadcast_batch(&lb, &bb, &[m, k], lu.dtype)?])
}

/// `_linalg_eigh(A, UPLO, compute_v)`: ascending eigenvalues `[.., n]` and eigenvectors
/// `[.., n, n]` (`[0]` without `compute_v`).
pub fn linalg_eigh(cx: &InferCx) -> R<Vec<TensorType>> {
    let a = cx.t("A")?;
    let (b, n) = square(a, "A")?;
    let uplo = str_arg(cx, "UPLO")?;
    if uplo != "L" && uplo != "U" {
        return Err(format!("UPLO must be \"L\" or \"U\", found {uplo:?}"));
    }
    let v = if cx.bool("compute_v")? {
        a.clone()
    } else {
        st(a.dtype, &[0])
    };
    Ok(vec![batched(a.dtype, &b, &[n]), v])
}

/// `_linalg_svd(A, full_matrices, compute_uv, driver)`: U, descending S `[.., k]`, Vh (U and
/// Vh `[0]` without `compute_uv`).
pub fn linalg_svd(cx: &InferCx) -> R<Vec<TensorType>> {
    let a = cx.t("A")?;
    let (b, m, n) = matrix(a, "A")?;
    let k = m.min(n);
    let s = batched(a.dtype, &b, &[k]);
    if !cx.bool("compute_uv")? {
        return Ok(vec![st(a.dtype, &[0]), s, st(a.dtype, &[0])]);
    }
    let (uc, vr) = if cx.bool("full_matrices")? {
        (m, n)
    } else {
        (k, k)
    };
    Ok(vec![
        batched(a.dtype, &b, &[m, uc]),
        s,
        batched(a.dtype, &b, &[vr, n]),
    ])
}

/// `linalg_qr(A, mode)`: Q and R for mode `reduced`, `complete` or `r` (Q `[0]`).
pub fn linalg_qr(cx: &InferCx) -> R<Vec<TensorType>> {
    let a = cx.t("A")?;
    let (b, m, n) = matrix(a, "A")?;
    let k = m.min(n);
    match str_arg(cx, "mode")? {
        "reduced" => Ok(vec![
            batched(a.dtype, &b, &[m, k]),
            batched(a.dtype, &b, &[k, n]),
        ]),
        "complete" => Ok(vec![
            batched(a.dtype, &b, &[m, m]),
            batched(a.dtype, &b, &[m, n]),
        ]),
        "r" => Ok(vec![st(a.dtype, &[0]), batched(a.dtype, &b, &[k, n])]),
        other => Err(format!(
            "mode must be \"reduced\", \"complete\" or \"r\", found {other:?}"
        )),
    }
}

/// `geqrf(self)`: the reflectors and R in one matrix, and tau `[.., min(m, n)]`.
pub fn geqrf(cx: &InferCx) -> R<Vec<TensorType>> {
    let a = cx.t("self")?;
    let (b, m, n) = matrix(a, "self")?;
    Ok(vec![a.clone(), batched(a.dtype, &b, &[m.min(n)])])
}

fn check_tau(tau: &TensorType, batch: &[Dim], max: i64, dtype: DType) -> R<i64> {
    if tau.dtype != dtype {
        return Err(format!("tau has dtype {}, expected {dtype}", tau.dtype));
    }
    let r = tau.rank();
    if r == 0 || tau.shape[..r - 1] != *batch {
        return Err(format!(
            "tau has shape {}, expected the batch dimensions {} and one more",
            shape_string(&tau.shape),
            shape_string(batch)
        ));
    }
    let k = static_shape(tau, "tau")?[r - 1];
    if k > max {
        return Err(format!("tau has {k} reflectors, at most {max} fit"));
    }
    Ok(k)
}

/// `linalg_householder_product(input [.., m, n], tau [.., k])`: the first n columns of the
/// product of the k reflectors (`m >= n >= k`).
pub fn householder_product(cx: &InferCx) -> R<Vec<TensorType>> {
    let a = cx.t("input")?;
    let (b, m, n) = matrix(a, "input")?;
    if m < n {
        return Err(format!(
            "input is {m}x{n}, expected at least as many rows as columns"
        ));
    }
    check_tau(cx.t("tau")?, &b, n, a.dtype)?;
    Ok(vec![a.clone()])
}

/// `ormqr(self, input2 = tau, input3 = C, left, transpose)`: C multiplied by the product of
/// the reflectors of `self` (as `geqrf` writes them).
pub fn ormqr(cx: &InferCx) -> R<Vec<TensorType>> {
    let a = cx.t("self")?;
    let (b, m, n) = matrix(a, "self")?;
    check_tau(cx.t("input2")?, &b, n.min(m), a.dtype)?;
    let c = cx.t("input3")?;
    let (cb, cm, cn) = matrix(c, "input3")?;
    if c.dtype != a.dtype || cb != b {
        return Err(format!(
            "input3 is {}{}, expected {} with self's batch dimensions",
            c.dtype,
            shape_string(&c.shape),
            a.dtype
        ));
    }
    let order = if cx.bool("left")? { cm } else { cn };
    if order != m {
        return Err(format!(
            "input3 has shape {}, whose {} must be self's {m} rows",
            shape_string(&c.shape),
            if cx.bool("left")? { "rows" } else { "columns" }
        ));
    }
    Ok(vec![c.clone()])
}

#[cfg(test)]
mod rule_tests {
    use crate::text::parse_graph;

    fn err_of(body: &str) -> String {
        match parse_graph(&format!("graph {{\n{body}\n}}\n")) {
            Ok(_) => String::new(),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn edge_cases_are_errors_not_panics() {
        // 0-d reduction with an explicit dim is valid.
        assert_eq!(
            err_of(
                "  %x: f32[] = input\n  %s: f32[] = aten.sum.dim_IntList(%x, dim=[0])\n  return %s"
            ),
            ""
        );
        // huge step: one element
        assert_eq!(err_of("  %x: f32[5] = input\n  %s: f32[1] = aten.slice.Tensor(%x, step=9223372036854775807)\n  return %s"), "");
        let e = err_of("  %x: f32[4] = input\n  %r: f32[4] = aten.repeat.default(%x, repeats=[4611686018427387904])\n  return %r");
        assert!(e.contains("overflow"), "{e}");
        let e = err_of("  %x: f32[4] = input\n  %r: f32[4] = aten.constant_pad_nd.default(%x, pad=[9223372036854775807, 9223372036854775807])\n  return %r");
        assert!(e.contains("overflows"), "{e}");
        let e = err_of("  %x: f32[1, 1, 4] = input\n  %r: f32[1, 1, 1] = aten.max_pool2d_with_indices.default(%x, kernel_size=[9223372036854775807, 1])\n  return %r");
        assert!(e.contains("overflow") || e.contains("larger"), "{e}");
    }

    #[test]
    fn division_without_rounding_is_true_division() {
        assert_eq!(err_of("  %a: i64[3] = input\n  %b: i64[3] = input\n  %d: f32[3] = aten.div.Tensor_mode(%a, %b, rounding_mode=none)\n  return %d"), "");
        assert_eq!(err_of("  %a: i64[3] = input\n  %b: i64[3] = input\n  %d: i64[3] = aten.div.Tensor_mode(%a, %b, rounding_mode=\"floor\")\n  return %d"), "");
    }

    #[test]
    fn linalg_shapes_and_errors() {
        // a vector right-hand side, batch dims broadcast; LU and pivots of A
        assert_eq!(err_of("  %a: f32[2, 1, 4, 4] = input\n  %b: f32[2, 1, 4] = input\n  s: %x: f32[2, 1, 4], %lu: f32[2, 1, 4, 4], %p: i32[2, 1, 4], %i: i32[2, 1] = aten._linalg_solve_ex.default(%a, %b)\n  return %x"), "");
        assert_eq!(err_of("  %a: f32[3, 5] = input\n  s: %u: f32[3, 3], %s: f32[3], %v: f32[5, 5] = aten._linalg_svd.default(%a, full_matrices=true)\n  return %s"), "");
        assert_eq!(err_of("  %a: f32[5, 3] = input\n  q: %q: f32[0], %r: f32[3, 3] = aten.linalg_qr.default(%a, mode=\"r\")\n  return %r"), "");
        let e = err_of("  %a: f32[2, 3] = input\n  i: %x: f32[2, 3], %i: i32[] = aten.linalg_inv_ex.default(%a)\n  return %x");
        assert!(e.contains("square"), "{e}");
        let e = err_of("  %a: f32[3, 3] = input\n  q: %q: f32[3, 3], %r: f32[3, 3] = aten.linalg_qr.default(%a, mode=\"full\")\n  return %r");
        assert!(e.contains("mode"), "{e}");
        let e = err_of("  %a: i64[3, 3] = input\n  d: %d: i64[], %lu: i64[3, 3], %p: i32[3] = aten._linalg_det.default(%a)\n  return %d");
        assert!(e.contains("floating"), "{e}");
    }

    #[test]
    fn gather_index_may_not_exceed_self() {
        let e = err_of("  %x: f32[2, 3] = input\n  %i: i64[4, 1] = input\n  %g: f32[4, 1] = aten.gather.default(%x, %i, dim=1)\n  return %g");
        assert!(e.contains("larger than self"), "{e}");
    }
}
