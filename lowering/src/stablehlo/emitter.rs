//! The text builder: SSA naming, tensor types, constants and one method per StableHLO op.
//!
//! Every method writes one op and returns the value it defines: in the pretty syntax XLA prints,
//! or, for an [`Em::generic`] builder, in MLIR's generic syntax (`"stablehlo.add"(%a, %b) :
//! (T, T) -> T`, attributes as properties `<{...}>`), which an MLIR without the StableHLO
//! dialect can parse. Names come from one counter, so a module is a pure function of the graph
//! (deterministic).

use fxhlo_ir::DType;
use std::fmt::Write;

/// MLIR element type of a dtype (`i1` for bool, `ui8` for u8).
pub fn elem(d: DType) -> &'static str {
    match d {
        DType::F32 => "f32",
        DType::F64 => "f64",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::I64 => "i64",
        DType::I32 => "i32",
        DType::I16 => "i16",
        DType::I8 => "i8",
        DType::U8 => "ui8",
        DType::Bool => "i1",
    }
}

/// MLIR tensor type, `tensor<4x32xf32>` (`tensor<f32>` for 0-d).
pub fn tensor_ty(d: DType, shape: &[i64]) -> String {
    let mut s = String::from("tensor<");
    for x in shape {
        let _ = write!(s, "{x}x");
    }
    s.push_str(elem(d));
    s.push('>');
    s
}

/// A number to put in a constant; converted to the constant's dtype when printed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Num {
    /// An integer.
    I(i64),
    /// A float.
    F(f64),
    /// A boolean.
    B(bool),
}

impl Num {
    /// The value as f64.
    pub fn f64(self) -> f64 {
        match self {
            Num::I(n) => n as f64,
            Num::F(x) => x,
            Num::B(b) => b as u8 as f64,
        }
    }

    /// The value as i64 (floats truncate toward zero).
    pub fn i64(self) -> i64 {
        match self {
            Num::I(n) => n,
            Num::F(x) => x as i64,
            Num::B(b) => b as i64,
        }
    }
}

fn nonfinite_hex(d: DType, x: f64) -> String {
    let neg = x < 0.0;
    match (d, x.is_nan()) {
        (DType::F32, true) => "0x7FC00000".into(),
        (DType::F64, true) => "0x7FF8000000000000".into(),
        (DType::F16, true) => "0x7E00".into(),
        (DType::BF16, true) => "0x7FC0".into(),
        (DType::F32, false) => if neg { "0xFF800000" } else { "0x7F800000" }.into(),
        (DType::F64, false) => if neg {
            "0xFFF0000000000000"
        } else {
            "0x7FF0000000000000"
        }
        .into(),
        (DType::F16, false) => if neg { "0xFC00" } else { "0x7C00" }.into(),
        _ => if neg { "0xFF80" } else { "0x7F80" }.into(),
    }
}

/// Literal of `n` as an element of dtype `d` (`1.000000e+00`, `0x7F800000`, `3`, `true`).
pub fn literal(d: DType, n: Num) -> String {
    if d.is_float() {
        let mut x = n.f64();
        let max = match d {
            DType::F16 => 65504.0,
            DType::BF16 => 3.389_531_389_251_535e38,
            DType::F32 => f32::MAX as f64,
            _ => f64::MAX,
        };
        if x.is_finite() && x.abs() > max {
            // Round to the nearest representable value as a cast would (overflow gives inf).
            x = if x > 0.0 {
                f64::INFINITY
            } else {
                f64::NEG_INFINITY
            };
        }
        if x.is_finite() {
            format!("{x:.17e}")
        } else {
            nonfinite_hex(d, x)
        }
    } else if d == DType::Bool {
        (n.f64() != 0.0).to_string()
    } else {
        let v = n.i64();
        match d {
            DType::I32 => (v as i32).to_string(),
            DType::I16 => (v as i16).to_string(),
            DType::I8 => (v as i8).to_string(),
            DType::U8 => (v as u8).to_string(),
            _ => v.to_string(),
        }
    }
}

/// The comparison type of `stablehlo.compare` for a dtype.
pub fn compare_type(d: DType) -> &'static str {
    if d.is_float() {
        "FLOAT"
    } else if matches!(d, DType::Bool | DType::U8) {
        "UNSIGNED"
    } else {
        "SIGNED"
    }
}

/// A value defined in the module: its SSA name and type.
#[derive(Clone, Debug, PartialEq)]
pub struct V {
    /// SSA name including `%` (and `#i` for one result of a multi-result op).
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Static shape.
    pub shape: Vec<i64>,
}

impl V {
    /// The MLIR type.
    pub fn ty(&self) -> String {
        tensor_ty(self.dtype, &self.shape)
    }

    /// Rank.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements.
    pub fn numel(&self) -> i64 {
        self.shape.iter().product()
    }
}

fn join<T: ToString>(xs: &[T]) -> String {
    xs.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn types(vs: &[V]) -> String {
    vs.iter().map(V::ty).collect::<Vec<_>>().join(", ")
}

fn names(vs: &[V]) -> String {
    vs.iter()
        .map(|v| v.name.clone())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A generic-form op: `"name"(operands) <{props}> : (operand types) -> result`.
fn generic(name: &str, operands: &[&V], props: &str, result: &str) -> String {
    let ns: Vec<&str> = operands.iter().map(|v| v.name.as_str()).collect();
    let ts: Vec<String> = operands.iter().map(|v| v.ty()).collect();
    let props = if props.is_empty() {
        String::new()
    } else {
        format!(" <{{{props}}}>")
    };
    format!(
        "\"{name}\"({}){props} : ({}) -> {result}",
        ns.join(", "),
        ts.join(", ")
    )
}

/// Result types after `->`: one type bare, several in parentheses.
fn result_tys(tys: &[String]) -> String {
    if tys.len() == 1 {
        tys[0].clone()
    } else {
        format!("({})", tys.join(", "))
    }
}

fn arr(xs: &[i64]) -> String {
    if xs.is_empty() {
        "array<i64>".into()
    } else {
        format!("array<i64: {}>", join(xs))
    }
}

/// Shape of `a` and `b` broadcast NumPy-style.
pub fn broadcast_shape(a: &[i64], b: &[i64]) -> Vec<i64> {
    let n = a.len().max(b.len());
    (0..n)
        .map(|i| {
            let x = (i + a.len()).checked_sub(n).map_or(1, |j| a[j]);
            let y = (i + b.len()).checked_sub(n).map_or(1, |j| b[j]);
            if x == 1 {
                y
            } else {
                x
            }
        })
        .collect()
}

/// Gather dimension numbers.
pub struct GatherDims {
    /// Output dims that come from the slice.
    pub offset_dims: Vec<i64>,
    /// Operand dims of size-1 slices dropped from the output.
    pub collapsed_slice_dims: Vec<i64>,
    /// Which operand dim each index component addresses.
    pub start_index_map: Vec<i64>,
    /// The indices dim holding index vectors.
    pub index_vector_dim: i64,
}

/// Scatter dimension numbers.
pub struct ScatterDims {
    /// Update dims that are window dims.
    pub update_window_dims: Vec<i64>,
    /// Operand dims of size-1 windows not present in the updates.
    pub inserted_window_dims: Vec<i64>,
    /// Which operand dim each index component addresses.
    pub scatter_dims_to_operand_dims: Vec<i64>,
    /// The indices dim holding index vectors.
    pub index_vector_dim: i64,
}

/// Window attributes of a convolution.
pub struct ConvWindow<'a> {
    /// Window strides.
    pub stride: &'a [i64],
    /// `(low, high)` padding per spatial dim.
    pub padding: &'a [(i64, i64)],
    /// Input dilation.
    pub lhs_dilation: &'a [i64],
    /// Kernel dilation.
    pub rhs_dilation: &'a [i64],
}

/// The function body being written.
#[derive(Default)]
pub struct Em {
    out: String,
    indent: usize,
    next: usize,
    generic: bool,
}

impl Em {
    /// A new, empty body (indented for a function inside a module), in the pretty syntax.
    pub fn new() -> Em {
        Em {
            out: String::new(),
            indent: 2,
            next: 0,
            generic: false,
        }
    }

    /// A new, empty body whose ops are all written in the generic syntax.
    pub fn generic() -> Em {
        Em {
            generic: true,
            ..Em::new()
        }
    }

    /// The text written so far.
    pub fn text(&self) -> &str {
        &self.out
    }

    /// A fresh SSA name.
    pub fn fresh(&mut self) -> String {
        let n = self.next;
        self.next += 1;
        format!("%{n}")
    }

    /// Writes one line at the current indentation.
    pub fn line(&mut self, s: &str) {
        for _ in 0..self.indent {
            self.out.push_str("  ");
        }
        self.out.push_str(s);
        self.out.push('\n');
    }

    fn def(&mut self, rhs: String, dtype: DType, shape: Vec<i64>) -> V {
        let name = self.fresh();
        self.line(&format!("{name} = {rhs}"));
        V { name, dtype, shape }
    }

    fn def_multi(&mut self, rhs: String, tys: Vec<(DType, Vec<i64>)>) -> Vec<V> {
        let name = self.fresh();
        if tys.len() == 1 {
            self.line(&format!("{name} = {rhs}"));
            let (dtype, shape) = tys.into_iter().next().expect("one result");
            return vec![V { name, dtype, shape }];
        }
        self.line(&format!("{name}:{} = {rhs}", tys.len()));
        tys.into_iter()
            .enumerate()
            .map(|(i, (dtype, shape))| V {
                name: format!("{name}#{i}"),
                dtype,
                shape,
            })
            .collect()
    }

    // ------------------------------------------------------------------------------ constants

    /// A splat constant of `shape` filled with `n`.
    pub fn splat(&mut self, d: DType, shape: &[i64], n: Num) -> V {
        let lit = if shape.contains(&0) {
            String::new()
        } else {
            literal(d, n)
        };
        self.constant(&format!("dense<{lit}>"), d, shape)
    }

    /// `stablehlo.constant` of an elements attribute (`dense<...>`, without its type).
    fn constant(&mut self, value: &str, d: DType, shape: &[i64]) -> V {
        let ty = tensor_ty(d, shape);
        let text = if self.generic {
            generic(
                "stablehlo.constant",
                &[],
                &format!("value = {value} : {ty}"),
                &ty,
            )
        } else {
            format!("stablehlo.constant {value} : {ty}")
        };
        self.def(text, d, shape.to_vec())
    }

    /// A 0-d constant.
    pub fn scalar(&mut self, d: DType, n: Num) -> V {
        self.splat(d, &[], n)
    }

    /// A constant filled with `n`, of the type of `like`.
    pub fn splat_like(&mut self, like: &V, n: Num) -> V {
        self.splat(like.dtype, &like.shape.clone(), n)
    }

    /// A dense constant from raw little-endian bytes (bool: one byte per element).
    pub fn dense_bytes(&mut self, d: DType, shape: &[i64], bytes: &[u8]) -> V {
        let numel: i64 = shape.iter().product();
        if numel == 0 {
            return self.splat(d, shape, Num::I(0));
        }
        if d == DType::Bool {
            let u = self.dense_bytes(DType::U8, shape, bytes);
            let z = self.splat(DType::U8, shape, Num::I(0));
            return self.compare("NE", &u, &z);
        }
        let mut hex = String::with_capacity(bytes.len() * 2 + 4);
        hex.push_str("\"0x");
        for b in bytes {
            let _ = write!(hex, "{b:02X}");
        }
        hex.push('"');
        self.constant(&format!("dense<{hex}>"), d, shape)
    }

    /// A dense i64 constant.
    pub fn dense_i64(&mut self, shape: &[i64], vals: &[i64]) -> V {
        let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.dense_bytes(DType::I64, shape, &bytes)
    }

    /// A dense f32 constant.
    pub fn dense_f32(&mut self, shape: &[i64], vals: &[f32]) -> V {
        let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.dense_bytes(DType::F32, shape, &bytes)
    }

    // ------------------------------------------------------------------------------ elementwise

    /// `stablehlo.<op> %a : T` (same-type unary ops).
    pub fn unary(&mut self, op: &str, a: &V) -> V {
        let text = if self.generic {
            generic(&format!("stablehlo.{op}"), &[a], "", &a.ty())
        } else {
            format!("stablehlo.{op} {} : {}", a.name, a.ty())
        };
        self.def(text, a.dtype, a.shape.clone())
    }

    /// `chlo.<op> %a : T -> T` (unary ops XLA expands itself: erf, asin, ...).
    pub fn chlo(&mut self, op: &str, a: &V) -> V {
        let text = if self.generic {
            generic(&format!("chlo.{op}"), &[a], "", &a.ty())
        } else {
            format!("chlo.{op} {} : {} -> {}", a.name, a.ty(), a.ty())
        };
        self.def(text, a.dtype, a.shape.clone())
    }

    /// `chlo.<op> %a, %b : T, T -> T` (binary ops XLA expands itself: polygamma, zeta).
    pub fn chlo_binary(&mut self, op: &str, a: &V, b: &V) -> V {
        debug_assert_eq!(a.ty(), b.ty(), "{op} operands");
        let text = if self.generic {
            generic(&format!("chlo.{op}"), &[a, b], "", &a.ty())
        } else {
            format!(
                "chlo.{op} {}, {} : {}, {} -> {}",
                a.name,
                b.name,
                a.ty(),
                b.ty(),
                a.ty()
            )
        };
        self.def(text, a.dtype, a.shape.clone())
    }

    /// `stablehlo.<op> %a, %b : T` (same-type binary ops).
    pub fn binary(&mut self, op: &str, a: &V, b: &V) -> V {
        debug_assert_eq!(a.ty(), b.ty(), "{op} operands");
        let text = if self.generic {
            generic(&format!("stablehlo.{op}"), &[a, b], "", &a.ty())
        } else {
            format!("stablehlo.{op} {}, {} : {}", a.name, b.name, a.ty())
        };
        self.def(text, a.dtype, a.shape.clone())
    }

    /// `a + b`.
    pub fn add(&mut self, a: &V, b: &V) -> V {
        self.binary("add", a, b)
    }

    /// `a - b`.
    pub fn sub(&mut self, a: &V, b: &V) -> V {
        self.binary("subtract", a, b)
    }

    /// `a * b`.
    pub fn mul(&mut self, a: &V, b: &V) -> V {
        self.binary("multiply", a, b)
    }

    /// `a / b`.
    pub fn div(&mut self, a: &V, b: &V) -> V {
        self.binary("divide", a, b)
    }

    /// `max(a, b)`.
    pub fn max(&mut self, a: &V, b: &V) -> V {
        self.binary("maximum", a, b)
    }

    /// `min(a, b)`.
    pub fn min(&mut self, a: &V, b: &V) -> V {
        self.binary("minimum", a, b)
    }

    /// `a <dir> b` with the comparison type of the dtype (`EQ NE LT LE GT GE`).
    pub fn compare(&mut self, dir: &str, a: &V, b: &V) -> V {
        self.compare_as(dir, a, b, compare_type(a.dtype))
    }

    /// `a <dir> b` with an explicit comparison type (`TOTALORDER`).
    pub fn compare_as(&mut self, dir: &str, a: &V, b: &V, ct: &str) -> V {
        debug_assert_eq!(a.ty(), b.ty(), "compare operands");
        let out = tensor_ty(DType::Bool, &a.shape);
        let text = if self.generic {
            let props = format!(
                "compare_type = #stablehlo<comparison_type {ct}>, comparison_direction = #stablehlo<comparison_direction {dir}>"
            );
            generic("stablehlo.compare", &[a, b], &props, &out)
        } else {
            format!(
                "stablehlo.compare {dir}, {}, {}, {ct} : ({}, {}) -> {out}",
                a.name,
                b.name,
                a.ty(),
                b.ty(),
            )
        };
        self.def(text, DType::Bool, a.shape.clone())
    }

    /// `p ? a : b` elementwise.
    pub fn select(&mut self, p: &V, a: &V, b: &V) -> V {
        let text = if self.generic {
            generic("stablehlo.select", &[p, a, b], "", &a.ty())
        } else {
            format!(
                "stablehlo.select {}, {}, {} : {}, {}",
                p.name,
                a.name,
                b.name,
                p.ty(),
                a.ty()
            )
        };
        self.def(text, a.dtype, a.shape.clone())
    }

    /// Converts to `d` (a no-op when the dtype already matches). To bool means `!= 0`.
    pub fn convert(&mut self, a: &V, d: DType) -> V {
        if a.dtype == d {
            return a.clone();
        }
        if d == DType::Bool {
            let z = self.splat_like(a, Num::I(0));
            return self.compare("NE", a, &z);
        }
        let text = self.cast_like("convert", a, &tensor_ty(d, &a.shape));
        self.def(text, d, a.shape.clone())
    }

    /// Reinterprets the bits of `a` as dtype `d` of the same width.
    pub fn bitcast(&mut self, a: &V, d: DType) -> V {
        let text = self.cast_like("bitcast_convert", a, &tensor_ty(d, &a.shape));
        self.def(text, d, a.shape.clone())
    }

    /// `stablehlo.<op> %a : (T) -> U`, an op without attributes whose result type differs.
    fn cast_like(&self, op: &str, a: &V, out: &str) -> String {
        if self.generic {
            generic(&format!("stablehlo.{op}"), &[a], "", out)
        } else {
            format!("stablehlo.{op} {} : ({}) -> {out}", a.name, a.ty())
        }
    }

    // ------------------------------------------------------------------------------ shapes

    /// Reshape (a no-op when the shape already matches).
    pub fn reshape(&mut self, a: &V, shape: &[i64]) -> V {
        if a.shape == shape {
            return a.clone();
        }
        let text = self.cast_like("reshape", a, &tensor_ty(a.dtype, shape));
        self.def(text, a.dtype, shape.to_vec())
    }

    /// Transpose: result dim `i` is operand dim `perm[i]`.
    pub fn transpose(&mut self, a: &V, perm: &[usize]) -> V {
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return a.clone();
        }
        let shape: Vec<i64> = perm.iter().map(|&p| a.shape[p]).collect();
        let p: Vec<i64> = perm.iter().map(|&p| p as i64).collect();
        let out = tensor_ty(a.dtype, &shape);
        let text = if self.generic {
            generic(
                "stablehlo.transpose",
                &[a],
                &format!("permutation = {}", arr(&p)),
                &out,
            )
        } else {
            format!(
                "stablehlo.transpose {}, dims = [{}] : ({}) -> {out}",
                a.name,
                join(&p),
                a.ty(),
            )
        };
        self.def(text, a.dtype, shape)
    }

    /// `broadcast_in_dim`: operand dim `i` becomes result dim `dims[i]`.
    pub fn bcast_in_dim(&mut self, a: &V, shape: &[i64], dims: &[usize]) -> V {
        if a.shape == shape && dims.iter().enumerate().all(|(i, &d)| i == d) {
            return a.clone();
        }
        let d: Vec<i64> = dims.iter().map(|&x| x as i64).collect();
        let out = tensor_ty(a.dtype, shape);
        let text = if self.generic {
            let props = format!("broadcast_dimensions = {}", arr(&d));
            generic("stablehlo.broadcast_in_dim", &[a], &props, &out)
        } else {
            format!(
                "stablehlo.broadcast_in_dim {}, dims = [{}] : ({}) -> {out}",
                a.name,
                join(&d),
                a.ty(),
            )
        };
        self.def(text, a.dtype, shape.to_vec())
    }

    /// Broadcasts NumPy-style (trailing dims aligned) to `shape`.
    pub fn bcast_to(&mut self, a: &V, shape: &[i64]) -> V {
        if a.shape == shape {
            return a.clone();
        }
        let lead = shape.len() - a.rank();
        // Size-1 dims that must grow are reshaped away first.
        let keep: Vec<usize> = (0..a.rank())
            .filter(|&i| a.shape[i] == shape[lead + i])
            .collect();
        let a = if keep.len() != a.rank() {
            let s: Vec<i64> = keep.iter().map(|&i| a.shape[i]).collect();
            self.reshape(a, &s)
        } else {
            a.clone()
        };
        let dims: Vec<usize> = keep.iter().map(|&i| lead + i).collect();
        self.bcast_in_dim(&a, shape, &dims)
    }

    /// `iota` along `dim`.
    pub fn iota(&mut self, d: DType, shape: &[i64], dim: usize) -> V {
        let out = tensor_ty(d, shape);
        let text = if self.generic {
            generic(
                "stablehlo.iota",
                &[],
                &format!("iota_dimension = {dim} : i64"),
                &out,
            )
        } else {
            format!("stablehlo.iota dim = {dim} : {out}")
        };
        self.def(text, d, shape.to_vec())
    }

    /// Static slice.
    pub fn slice(&mut self, a: &V, start: &[i64], limit: &[i64], strides: &[i64]) -> V {
        if start.iter().all(|&s| s == 0) && limit == a.shape && strides.iter().all(|&s| s == 1) {
            return a.clone();
        }
        let shape: Vec<i64> = (0..a.rank())
            .map(|i| ((limit[i] - start[i]).max(0) + strides[i] - 1) / strides[i])
            .collect();
        let out = tensor_ty(a.dtype, &shape);
        let text = if self.generic {
            let props = format!(
                "limit_indices = {}, start_indices = {}, strides = {}",
                arr(limit),
                arr(start),
                arr(strides)
            );
            generic("stablehlo.slice", &[a], &props, &out)
        } else {
            let parts: Vec<String> = (0..a.rank())
                .map(|i| {
                    if strides[i] == 1 {
                        format!("{}:{}", start[i], limit[i])
                    } else {
                        format!("{}:{}:{}", start[i], limit[i], strides[i])
                    }
                })
                .collect();
            format!(
                "stablehlo.slice {} [{}] : ({}) -> {out}",
                a.name,
                parts.join(", "),
                a.ty(),
            )
        };
        self.def(text, a.dtype, shape)
    }

    /// Slice of `[start, limit)` with `step` along one dim.
    pub fn slice_dim(&mut self, a: &V, dim: usize, start: i64, limit: i64, step: i64) -> V {
        let mut s = vec![0; a.rank()];
        let mut l = a.shape.clone();
        let mut st = vec![1; a.rank()];
        s[dim] = start;
        l[dim] = limit.max(start);
        st[dim] = step;
        self.slice(a, &s, &l, &st)
    }

    /// Concatenation along `dim` (all operands have the same dtype).
    pub fn concat(&mut self, vs: &[V], dim: usize) -> V {
        if vs.len() == 1 {
            return vs[0].clone();
        }
        let mut shape = vs[0].shape.clone();
        shape[dim] = vs.iter().map(|v| v.shape[dim]).sum();
        let d = vs[0].dtype;
        let out = tensor_ty(d, &shape);
        let text = if self.generic {
            let ops: Vec<&V> = vs.iter().collect();
            generic(
                "stablehlo.concatenate",
                &ops,
                &format!("dimension = {dim} : i64"),
                &out,
            )
        } else {
            format!(
                "stablehlo.concatenate {}, dim = {dim} : ({}) -> {out}",
                names(vs),
                types(vs),
            )
        };
        self.def(text, d, shape)
    }

    /// `pad` (negative low/high crop).
    pub fn pad(&mut self, a: &V, value: &V, low: &[i64], high: &[i64], interior: &[i64]) -> V {
        let shape: Vec<i64> = (0..a.rank())
            .map(|i| {
                let n = a.shape[i];
                low[i] + high[i] + n + (n - 1).max(0) * interior[i]
            })
            .collect();
        let out = tensor_ty(a.dtype, &shape);
        let text = if self.generic {
            let props = format!(
                "edge_padding_high = {}, edge_padding_low = {}, interior_padding = {}",
                arr(high),
                arr(low),
                arr(interior)
            );
            generic("stablehlo.pad", &[a, value], &props, &out)
        } else {
            format!(
                "stablehlo.pad {}, {}, low = [{}], high = [{}], interior = [{}] : ({}, {}) -> {out}",
                a.name,
                value.name,
                join(low),
                join(high),
                join(interior),
                a.ty(),
                value.ty(),
            )
        };
        self.def(text, a.dtype, shape)
    }

    /// Reverses along `dims`.
    pub fn reverse(&mut self, a: &V, dims: &[usize]) -> V {
        if dims.is_empty() {
            return a.clone();
        }
        let text = if self.generic {
            let d: Vec<i64> = dims.iter().map(|&x| x as i64).collect();
            generic(
                "stablehlo.reverse",
                &[a],
                &format!("dimensions = {}", arr(&d)),
                &a.ty(),
            )
        } else {
            format!(
                "stablehlo.reverse {}, dims = [{}] : {}",
                a.name,
                join(dims),
                a.ty()
            )
        };
        self.def(text, a.dtype, a.shape.clone())
    }

    // ------------------------------------------------------------------------------ regions

    /// `stablehlo.return` of a region body.
    fn ret(&mut self, rets: &[V]) {
        let text = if self.generic {
            let rs: Vec<&V> = rets.iter().collect();
            generic("stablehlo.return", &rs, "", "()")
        } else {
            format!("stablehlo.return {} : {}", names(rets), types(rets))
        };
        self.line(&text);
    }

    /// Writes a region body `^bb0(args): ... stablehlo.return` for generic-form ops.
    fn region(&mut self, arg_tys: &[DType], body: impl FnOnce(&mut Em, &[V]) -> Vec<V>) {
        let args: Vec<V> = arg_tys
            .iter()
            .map(|&d| V {
                name: self.fresh(),
                dtype: d,
                shape: vec![],
            })
            .collect();
        let decl: Vec<String> = args
            .iter()
            .map(|a| format!("{}: {}", a.name, a.ty()))
            .collect();
        self.indent += 1;
        self.line(&format!("^bb0({}):", decl.join(", ")));
        self.indent += 1;
        let rets = body(self, &args);
        self.ret(&rets);
        self.indent -= 2;
    }

    /// `reduce` over `dims` with a general body; `body(acc, x)` gets the accumulators and the
    /// new elements (0-d values) and returns the new accumulators.
    pub fn reduce(
        &mut self,
        inputs: &[V],
        inits: &[V],
        dims: &[usize],
        body: impl FnOnce(&mut Em, &[V], &[V]) -> Vec<V>,
    ) -> Vec<V> {
        let out_shape: Vec<i64> = (0..inputs[0].rank())
            .filter(|d| !dims.contains(d))
            .map(|d| inputs[0].shape[d])
            .collect();
        let mut all = inputs.to_vec();
        all.extend(inits.iter().cloned());
        let outs: Vec<(DType, Vec<i64>)> = inputs
            .iter()
            .map(|x| (x.dtype, out_shape.clone()))
            .collect();
        let out_tys: Vec<String> = outs.iter().map(|(d, s)| tensor_ty(*d, s)).collect();
        let out_ty = result_tys(&out_tys);
        let n = inputs.len();
        if self.generic {
            let d: Vec<i64> = dims.iter().map(|&x| x as i64).collect();
            let res = self.def_multi(
                format!(
                    "\"stablehlo.reduce\"({}) <{{dimensions = {}}}> ({{",
                    names(&all),
                    arr(&d)
                ),
                outs,
            );
            let mut tys: Vec<DType> = inputs.iter().map(|v| v.dtype).collect();
            tys.extend(inputs.iter().map(|v| v.dtype));
            self.region(&tys, |em, args| body(em, &args[..n], &args[n..]));
            self.line(&format!("}}) : ({}) -> {out_ty}", types(&all)));
            return res;
        }
        let operands: Vec<String> = inputs
            .iter()
            .zip(inits)
            .map(|(x, i)| format!("({} init: {})", x.name, i.name))
            .collect();
        let res = self.def_multi(
            format!(
                "stablehlo.reduce{} across dimensions = [{}] : ({}) -> {}",
                operands.join(", "),
                join(dims),
                types(&all),
                out_ty
            ),
            outs,
        );
        let acc: Vec<V> = inputs
            .iter()
            .map(|x| V {
                name: self.fresh(),
                dtype: x.dtype,
                shape: vec![],
            })
            .collect();
        let new: Vec<V> = inputs
            .iter()
            .map(|x| V {
                name: self.fresh(),
                dtype: x.dtype,
                shape: vec![],
            })
            .collect();
        let groups: Vec<String> = (0..n)
            .map(|i| {
                format!(
                    "({}: {}, {}: {})",
                    acc[i].name,
                    acc[i].ty(),
                    new[i].name,
                    new[i].ty()
                )
            })
            .collect();
        self.indent += 1;
        self.line(&format!("reducer{} {{", groups.join(" ")));
        self.indent += 1;
        let rets = body(self, &acc, &new);
        self.ret(&rets);
        self.indent -= 1;
        self.line("}");
        self.indent -= 1;
        res
    }

    /// A one-op reduction: `stablehlo.reduce(...) applies stablehlo.<op>`.
    pub fn reduce1(&mut self, x: &V, init: &V, dims: &[usize], op: &str) -> V {
        let out_shape: Vec<i64> = (0..x.rank())
            .filter(|d| !dims.contains(d))
            .map(|d| x.shape[d])
            .collect();
        if self.generic {
            let (xs, inits) = (std::slice::from_ref(x), std::slice::from_ref(init));
            let body = |em: &mut Em, acc: &[V], new: &[V]| vec![em.binary(op, &acc[0], &new[0])];
            return self.reduce(xs, inits, dims, body).remove(0);
        }
        let out = tensor_ty(x.dtype, &out_shape);
        self.def(
            format!(
                "stablehlo.reduce({} init: {}) applies stablehlo.{op} across dimensions = [{}] : ({}, {}) -> {out}",
                x.name,
                init.name,
                join(dims),
                x.ty(),
                init.ty()
            ),
            x.dtype,
            out_shape,
        )
    }

    /// `reduce_window` (generic form); `padding` is `(low, high)` per dim.
    #[allow(clippy::too_many_arguments)]
    pub fn reduce_window(
        &mut self,
        inputs: &[V],
        inits: &[V],
        window: &[i64],
        strides: &[i64],
        dilations: &[i64],
        padding: &[(i64, i64)],
        body: impl FnOnce(&mut Em, &[V], &[V]) -> Vec<V>,
    ) -> Vec<V> {
        let x = &inputs[0];
        let out_shape: Vec<i64> = (0..x.rank())
            .map(|i| {
                let padded = x.shape[i] + padding[i].0 + padding[i].1;
                let eff = (window[i] - 1) * dilations[i] + 1;
                if padded < eff {
                    0
                } else {
                    (padded - eff) / strides[i] + 1
                }
            })
            .collect();
        let pad: Vec<String> = padding.iter().map(|(l, h)| format!("[{l}, {h}]")).collect();
        let mut all = inputs.to_vec();
        all.extend(inits.iter().cloned());
        let outs: Vec<(DType, Vec<i64>)> = inputs
            .iter()
            .map(|x| (x.dtype, out_shape.clone()))
            .collect();
        let out_tys: Vec<String> = outs.iter().map(|(d, s)| tensor_ty(*d, s)).collect();
        let out_ty = if outs.len() == 1 {
            out_tys[0].clone()
        } else {
            format!("({})", out_tys.join(", "))
        };
        let ones = vec![1i64; x.rank()];
        let res = self.def_multi(
            format!(
                "\"stablehlo.reduce_window\"({}) <{{base_dilations = {}, padding = dense<[{}]> : tensor<{}x2xi64>, window_dilations = {}, window_dimensions = {}, window_strides = {}}}> ({{",
                names(&all),
                arr(&ones),
                pad.join(", "),
                x.rank(),
                arr(dilations),
                arr(window),
                arr(strides),
            ),
            outs,
        );
        let n = inputs.len();
        let mut tys: Vec<DType> = inputs.iter().map(|v| v.dtype).collect();
        tys.extend(inputs.iter().map(|v| v.dtype));
        self.region(&tys, |em, args| body(em, &args[..n], &args[n..]));
        self.line(&format!("}}) : ({}) -> {out_ty}", types(&all)));
        res
    }

    /// `dot_general` with batch and contracting dims; result dims are batch, lhs free, rhs free.
    #[allow(clippy::too_many_arguments)]
    pub fn dot_general(
        &mut self,
        a: &V,
        b: &V,
        lb: &[usize],
        rb: &[usize],
        lc: &[usize],
        rc: &[usize],
    ) -> V {
        let mut shape: Vec<i64> = lb.iter().map(|&d| a.shape[d]).collect();
        shape.extend(
            (0..a.rank())
                .filter(|d| !lb.contains(d) && !lc.contains(d))
                .map(|d| a.shape[d]),
        );
        shape.extend(
            (0..b.rank())
                .filter(|d| !rb.contains(d) && !rc.contains(d))
                .map(|d| b.shape[d]),
        );
        let out = tensor_ty(a.dtype, &shape);
        let text = if self.generic {
            let batch = if lb.is_empty() {
                String::new()
            } else {
                format!(
                    "lhs_batching_dimensions = [{}], rhs_batching_dimensions = [{}], ",
                    join(lb),
                    join(rb)
                )
            };
            let props = format!(
                "dot_dimension_numbers = #stablehlo.dot<{batch}lhs_contracting_dimensions = [{}], rhs_contracting_dimensions = [{}]>, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]",
                join(lc),
                join(rc)
            );
            generic("stablehlo.dot_general", &[a, b], &props, &out)
        } else {
            let batch = if lb.is_empty() {
                String::new()
            } else {
                format!("batching_dims = [{}] x [{}], ", join(lb), join(rb))
            };
            format!(
                "stablehlo.dot_general {}, {}, {batch}contracting_dims = [{}] x [{}], precision = [DEFAULT, DEFAULT] : ({}, {}) -> {out}",
                a.name,
                b.name,
                join(lc),
                join(rc),
                a.ty(),
                b.ty(),
            )
        };
        self.def(text, a.dtype, shape)
    }

    /// `gather` (generic form) with the given dimension numbers and slice sizes.
    pub fn gather(
        &mut self,
        x: &V,
        idx: &V,
        dims: &GatherDims,
        slice_sizes: &[i64],
        out_shape: &[i64],
    ) -> V {
        self.def(
            format!(
                "\"stablehlo.gather\"({}, {}) <{{dimension_numbers = #stablehlo.gather<offset_dims = [{}], collapsed_slice_dims = [{}], start_index_map = [{}], index_vector_dim = {}>, indices_are_sorted = false, slice_sizes = {}}}> : ({}, {}) -> {}",
                x.name,
                idx.name,
                join(&dims.offset_dims),
                join(&dims.collapsed_slice_dims),
                join(&dims.start_index_map),
                dims.index_vector_dim,
                arr(slice_sizes),
                x.ty(),
                idx.ty(),
                tensor_ty(x.dtype, out_shape)
            ),
            x.dtype,
            out_shape.to_vec(),
        )
    }

    /// `scatter` (generic form); `combine(old, update)` gives the stored value.
    pub fn scatter(
        &mut self,
        x: &V,
        idx: &V,
        upd: &V,
        dims: &ScatterDims,
        combine: impl FnOnce(&mut Em, &V, &V) -> V,
    ) -> V {
        let r = self.def(
            format!(
                "\"stablehlo.scatter\"({}, {}, {}) <{{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [{}], inserted_window_dims = [{}], scatter_dims_to_operand_dims = [{}], index_vector_dim = {}>, unique_indices = false}}> ({{",
                x.name,
                idx.name,
                upd.name,
                join(&dims.update_window_dims),
                join(&dims.inserted_window_dims),
                join(&dims.scatter_dims_to_operand_dims),
                dims.index_vector_dim,
            ),
            x.dtype,
            x.shape.clone(),
        );
        self.region(&[x.dtype, x.dtype], |em, a| vec![combine(em, &a[0], &a[1])]);
        self.line(&format!(
            "}}) : ({}, {}, {}) -> {}",
            x.ty(),
            idx.ty(),
            upd.ty(),
            x.ty()
        ));
        r
    }

    /// `sort` (generic form) along `dim`; `less(lhs, rhs)` gets the pairs `(a_i, b_i)` of every
    /// operand as `[lhs0, rhs0, lhs1, rhs1, ...]` and returns an i1.
    pub fn sort(
        &mut self,
        inputs: &[V],
        dim: usize,
        less: impl FnOnce(&mut Em, &[V]) -> V,
    ) -> Vec<V> {
        let outs: Vec<(DType, Vec<i64>)> =
            inputs.iter().map(|x| (x.dtype, x.shape.clone())).collect();
        let res = self.def_multi(
            format!(
                "\"stablehlo.sort\"({}) <{{dimension = {dim} : i64, is_stable = true}}> ({{",
                names(inputs)
            ),
            outs,
        );
        let tys: Vec<DType> = inputs.iter().flat_map(|v| [v.dtype, v.dtype]).collect();
        self.region(&tys, |em, a| vec![less(em, a)]);
        let out_ty = if inputs.len() == 1 {
            inputs[0].ty()
        } else {
            format!("({})", types(inputs))
        };
        self.line(&format!("}}) : ({}) -> {out_ty}", types(inputs)));
        res
    }

    /// `convolution` in NC(spatial) / OI(spatial) / NC(spatial) layout.
    #[allow(clippy::too_many_arguments)]
    pub fn convolution(
        &mut self,
        x: &V,
        w: &V,
        stride: &[i64],
        padding: &[(i64, i64)],
        lhs_dilation: &[i64],
        rhs_dilation: &[i64],
        groups: i64,
        out_shape: &[i64],
    ) -> V {
        let n = x.rank() - 2;
        let sp: Vec<String> = (0..n).map(|i| i.to_string()).collect();
        let sp = sp.join(", ");
        let layout = format!("[b, f, {sp}]x[o, i, {sp}]->[b, f, {sp}]");
        let win = ConvWindow {
            stride,
            padding,
            lhs_dilation,
            rhs_dilation,
        };
        self.convolution_general(x, w, &layout, &win, groups, 1, out_shape)
    }

    /// `convolution` with explicit dimension numbers (`[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]`).
    #[allow(clippy::too_many_arguments)]
    pub fn convolution_general(
        &mut self,
        x: &V,
        w: &V,
        layout: &str,
        win: &ConvWindow,
        feature_groups: i64,
        batch_groups: i64,
        out_shape: &[i64],
    ) -> V {
        let pad: Vec<String> = win
            .padding
            .iter()
            .map(|(l, h)| format!("[{l}, {h}]"))
            .collect();
        let rev = vec!["false"; win.stride.len()].join(", ");
        let out = tensor_ty(x.dtype, out_shape);
        let text = if self.generic {
            let props = format!(
                "batch_group_count = {batch_groups} : i64, dimension_numbers = #stablehlo.conv<{layout}>, feature_group_count = {feature_groups} : i64, lhs_dilation = {}, padding = dense<[{}]> : tensor<{}x2xi64>, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>], rhs_dilation = {}, window_reversal = array<i1: {rev}>, window_strides = {}",
                arr(win.lhs_dilation),
                pad.join(", "),
                win.padding.len(),
                arr(win.rhs_dilation),
                arr(win.stride),
            );
            generic("stablehlo.convolution", &[x, w], &props, &out)
        } else {
            format!(
                "stablehlo.convolution({}, {}) dim_numbers = {layout}, window = {{stride = [{}], pad = [{}], lhs_dilate = [{}], rhs_dilate = [{}], reverse = [{rev}]}} {{batch_group_count = {batch_groups} : i64, feature_group_count = {feature_groups} : i64, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]}} : ({}, {}) -> {out}",
                x.name,
                w.name,
                join(win.stride),
                pad.join(", "),
                join(win.lhs_dilation),
                join(win.rhs_dilation),
                x.ty(),
                w.ty(),
            )
        };
        self.def(text, x.dtype, out_shape.to_vec())
    }

    /// `rng` with `UNIFORM` (in `[a, b)`) or `NORMAL` (mean `a`, std `b`) distribution.
    pub fn rng(&mut self, dist: &str, a: &V, b: &V, shape: &[i64]) -> V {
        let s = self.dense_i64(&[shape.len() as i64], shape);
        let out = tensor_ty(a.dtype, shape);
        let text = if self.generic {
            let props = format!("rng_distribution = #stablehlo<rng_distribution {dist}>");
            generic("stablehlo.rng", &[a, b, &s], &props, &out)
        } else {
            format!(
                "stablehlo.rng {}, {}, {}, distribution = {dist} : ({}, {}, {}) -> {out}",
                a.name,
                b.name,
                s.name,
                a.ty(),
                b.ty(),
                s.ty(),
            )
        };
        self.def(text, a.dtype, shape.to_vec())
    }
}
