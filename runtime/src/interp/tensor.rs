//! The interpreter's tensor value: a dtype, a shape and the elements widened to `f64`, `i64` or
//! `bool`, each already rounded (or wrapped) to the dtype.

use fxhlo_ir::{DType, HostTensor, TensorType};
use half::{bf16, f16};

/// Result type of op implementations: errors are plain messages that the driver prefixes with the
/// node.
pub(crate) type R<T> = Result<T, String>;

/// The elements of a tensor, widened: floats as `f64`, integers as `i64`, booleans as `bool`.
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    /// Floating-point elements (each exactly representable in the tensor's dtype).
    F(Vec<f64>),
    /// Integer elements (each within the range of the tensor's dtype).
    I(Vec<i64>),
    /// Boolean elements.
    B(Vec<bool>),
}

impl Data {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Data::F(v) => v.len(),
            Data::I(v) => v.len(),
            Data::B(v) => v.len(),
        }
    }

    /// True if there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// An empty buffer of the same kind, with room for `cap` elements.
    pub(crate) fn empty_like(&self, cap: usize) -> Data {
        match self {
            Data::F(_) => Data::F(Vec::with_capacity(cap)),
            Data::I(_) => Data::I(Vec::with_capacity(cap)),
            Data::B(_) => Data::B(Vec::with_capacity(cap)),
        }
    }

    /// Elements at `idx`, in order. Every index must be in range (callers compute them from the
    /// tensor's own shape).
    pub(crate) fn take(&self, idx: &[usize]) -> Data {
        match self {
            Data::F(v) => Data::F(idx.iter().map(|&i| v[i]).collect()),
            Data::I(v) => Data::I(idx.iter().map(|&i| v[i]).collect()),
            Data::B(v) => Data::B(idx.iter().map(|&i| v[i]).collect()),
        }
    }

    /// Appends `src[start..end]`; `src` must be of the same kind (callers cast first).
    pub(crate) fn extend_range(&mut self, src: &Data, start: usize, end: usize) {
        match (self, src) {
            (Data::F(d), Data::F(s)) => d.extend_from_slice(&s[start..end]),
            (Data::I(d), Data::I(s)) => d.extend_from_slice(&s[start..end]),
            (Data::B(d), Data::B(s)) => d.extend_from_slice(&s[start..end]),
            // Callers cast both sides to one dtype first, so kinds always agree.
            _ => unreachable!("extend_range between buffers of different kinds"),
        }
    }

    /// Sets element `dst` to `src[s]`; `src` must be of the same kind (callers cast first).
    pub(crate) fn set_from(&mut self, dst: usize, src: &Data, s: usize) {
        match (self, src) {
            (Data::F(d), Data::F(v)) => d[dst] = v[s],
            (Data::I(d), Data::I(v)) => d[dst] = v[s],
            (Data::B(d), Data::B(v)) => d[dst] = v[s],
            // Callers cast both sides to one dtype first, so kinds always agree.
            _ => unreachable!("set_from between buffers of different kinds"),
        }
    }
}

/// A Python number as ATen passes it (`Scalar`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A boolean.
    Bool(bool),
}

impl Scalar {
    /// The value as a float.
    pub fn f64(self) -> f64 {
        match self {
            Scalar::Int(n) => n as f64,
            Scalar::Float(x) => x,
            Scalar::Bool(b) => b as i64 as f64,
        }
    }

    /// The value as an integer (floats truncate toward zero).
    pub fn i64(self) -> i64 {
        match self {
            Scalar::Int(n) => n,
            Scalar::Float(x) => float_to_int(DType::I64, x),
            Scalar::Bool(b) => b as i64,
        }
    }

    /// True if the value is a float.
    pub fn is_float(self) -> bool {
        matches!(self, Scalar::Float(_))
    }

    /// Promotion category: 0 bool, 1 integer, 2 float.
    pub fn category(self) -> u8 {
        match self {
            Scalar::Bool(_) => 0,
            Scalar::Int(_) => 1,
            Scalar::Float(_) => 2,
        }
    }
}

/// Rounds a float to the nearest value of float dtype `d` (round half to even).
pub fn round_float(d: DType, x: f64) -> f64 {
    match d {
        DType::F32 => x as f32 as f64,
        DType::F16 => f16::from_f64(x).to_f64(),
        DType::BF16 => bf16::from_f64(x).to_f64(),
        _ => x,
    }
}

/// Wraps an integer to the width of integer dtype `d` (two's complement), as C casts do.
pub fn wrap_int(d: DType, x: i64) -> i64 {
    match d {
        DType::I32 => x as i32 as i64,
        DType::I16 => x as i16 as i64,
        DType::I8 => x as i8 as i64,
        DType::U8 => x as u8 as i64,
        _ => x,
    }
}

/// Converts an integer to float dtype `d` with one rounding (i64 to f32 directly, not via f64).
pub fn int_to_float(d: DType, x: i64) -> f64 {
    match d {
        DType::F32 => x as f32 as f64,
        DType::F16 => f16::from_f32(x as f32).to_f64(),
        DType::BF16 => bf16::from_f32(x as f32).to_f64(),
        _ => x as f64,
    }
}

/// Converts a float to integer dtype `d`: truncation toward zero, then wrapping to the width.
/// Out-of-range values and NaN give what x86 gives for C's cast: the most negative value of
/// `i64` (for i64) or of `i32` (for narrower types, converted through `i32` like torch does).
pub fn float_to_int(d: DType, x: f64) -> i64 {
    let t = x.trunc();
    if d == DType::I64 {
        if (-(2f64.powi(63))..2f64.powi(63)).contains(&t) {
            t as i64
        } else {
            i64::MIN
        }
    } else {
        let v = if (-2_147_483_648.0..2_147_483_648.0).contains(&t) {
            t as i64
        } else {
            i32::MIN as i64
        };
        wrap_int(d, v)
    }
}

/// Number of elements of a shape (callers check sizes against the memory limit first, so the
/// product is known not to overflow).
pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Row-major strides of a contiguous tensor of `shape`.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Calls `f` with every multi-index of `shape` in row-major order.
pub fn for_each_index(shape: &[usize], mut f: impl FnMut(&[usize])) {
    if shape.contains(&0) {
        return;
    }
    let mut idx = vec![0usize; shape.len()];
    loop {
        f(&idx);
        let mut d = shape.len();
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// Like [`for_each_index`], stopping at the first error.
pub fn try_for_each_index(shape: &[usize], mut f: impl FnMut(&[usize]) -> R<()>) -> R<()> {
    let mut err = None;
    let mut failed = false;
    for_each_index(shape, |ix| {
        if !failed {
            if let Err(e) = f(ix) {
                err = Some(e);
                failed = true;
            }
        }
    });
    err.map_or(Ok(()), Err)
}

/// NumPy broadcast of two shapes.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> R<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for (i, o) in out.iter_mut().enumerate() {
        let da = (i + a.len()).checked_sub(n).map_or(1, |j| a[j]);
        let db = (i + b.len()).checked_sub(n).map_or(1, |j| b[j]);
        *o = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(format!("shapes {a:?} and {b:?} do not broadcast"));
        };
    }
    Ok(out)
}

/// For each element of `out_shape` (row-major), the flat index of the element of a tensor of
/// `in_shape` that broadcasting maps to it.
pub fn broadcast_map(in_shape: &[usize], out_shape: &[usize]) -> R<Vec<usize>> {
    if in_shape.len() > out_shape.len() {
        return Err(format!(
            "cannot broadcast shape {in_shape:?} to {out_shape:?}"
        ));
    }
    let lead = out_shape.len() - in_shape.len();
    let st = strides(in_shape);
    let mut bst = vec![0usize; out_shape.len()];
    for (j, &s) in in_shape.iter().enumerate() {
        if s == out_shape[lead + j] {
            bst[lead + j] = st[j];
        } else if s != 1 {
            return Err(format!(
                "cannot broadcast shape {in_shape:?} to {out_shape:?}"
            ));
        }
    }
    let mut map = Vec::with_capacity(numel(out_shape));
    for_each_index(out_shape, |ix| {
        map.push(ix.iter().zip(&bst).map(|(i, s)| i * s).sum());
    });
    Ok(map)
}

/// For each element of the permuted shape `[shape[perm[0]], ...]` (row-major), the flat index
/// of the element of a contiguous tensor of `shape` it comes from. `perm` must be a permutation.
pub fn permute_map(shape: &[usize], perm: &[usize]) -> Vec<usize> {
    let st = strides(shape);
    let new_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let pst: Vec<usize> = perm.iter().map(|&p| st[p]).collect();
    let mut map = Vec::with_capacity(numel(shape));
    for_each_index(&new_shape, |ix| {
        map.push(ix.iter().zip(&pst).map(|(i, s)| i * s).sum());
    });
    map
}

/// Splits `shape` around dimension `dim` into (outer, len, inner) sizes; element `i` of lane
/// `(o, n)` is at flat index `(o * len + i) * inner + n`. A 0-d shape is one lane of one element.
pub fn lanes(shape: &[usize], dim: usize) -> (usize, usize, usize) {
    if shape.is_empty() {
        return (1, 1, 1);
    }
    (numel(&shape[..dim]), shape[dim], numel(&shape[dim + 1..]))
}

/// A dense tensor value of the interpreter.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    /// Element type.
    pub dtype: DType,
    /// Shape, outermost first.
    pub shape: Vec<usize>,
    /// Elements, row-major; the variant follows the dtype (`F` floats, `I` integers, `B` bool).
    pub data: Data,
}

impl Tensor {
    /// A tensor of dtype `dtype` from float values, rounded (or converted) to the dtype.
    pub fn from_f64s(dtype: DType, shape: Vec<usize>, v: Vec<f64>) -> Tensor {
        debug_assert_eq!(numel(&shape), v.len());
        let data = if dtype.is_float() {
            Data::F(v.into_iter().map(|x| round_float(dtype, x)).collect())
        } else if dtype == DType::Bool {
            Data::B(v.into_iter().map(|x| x != 0.0).collect())
        } else {
            Data::I(v.into_iter().map(|x| float_to_int(dtype, x)).collect())
        };
        Tensor { dtype, shape, data }
    }

    /// A tensor of dtype `dtype` from integer values, wrapped (or converted) to the dtype.
    pub fn from_i64s(dtype: DType, shape: Vec<usize>, v: Vec<i64>) -> Tensor {
        debug_assert_eq!(numel(&shape), v.len());
        let data = if dtype.is_float() {
            Data::F(v.into_iter().map(|x| int_to_float(dtype, x)).collect())
        } else if dtype == DType::Bool {
            Data::B(v.into_iter().map(|x| x != 0).collect())
        } else {
            Data::I(v.into_iter().map(|x| wrap_int(dtype, x)).collect())
        };
        Tensor { dtype, shape, data }
    }

    /// A tensor of dtype `dtype` from booleans (converted to 0/1 for numeric dtypes).
    pub fn from_bools(dtype: DType, shape: Vec<usize>, v: Vec<bool>) -> Tensor {
        debug_assert_eq!(numel(&shape), v.len());
        match dtype {
            DType::Bool => Tensor {
                dtype,
                shape,
                data: Data::B(v),
            },
            _ => Tensor::from_i64s(dtype, shape, v.into_iter().map(i64::from).collect()),
        }
    }

    /// A tensor with every element `value`, converted to `dtype`.
    pub fn full(dtype: DType, shape: Vec<usize>, value: Scalar) -> Tensor {
        let n = numel(&shape);
        match value {
            Scalar::Float(x) => Tensor::from_f64s(dtype, shape, vec![x; n]),
            Scalar::Int(x) => Tensor::from_i64s(dtype, shape, vec![x; n]),
            Scalar::Bool(b) => Tensor::from_bools(dtype, shape, vec![b; n]),
        }
    }

    /// A tensor of zeros.
    pub fn zeros(dtype: DType, shape: Vec<usize>) -> Tensor {
        Tensor::full(dtype, shape, Scalar::Int(0))
    }

    /// A tensor from `data`, which must be of the kind that `dtype` uses and already within its
    /// range (as produced by taking elements of a tensor of that dtype).
    pub(crate) fn from_data(dtype: DType, shape: Vec<usize>, data: Data) -> Tensor {
        debug_assert_eq!(numel(&shape), data.len());
        Tensor { dtype, shape, data }
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.data.len()
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The tensor's type.
    pub fn ty(&self) -> TensorType {
        let shape: Vec<i64> = self.shape.iter().map(|&d| d as i64).collect();
        TensorType::new(self.dtype, &shape)
    }

    /// Elements as floats (booleans as 0/1).
    pub fn f64s(&self) -> Vec<f64> {
        match &self.data {
            Data::F(v) => v.clone(),
            Data::I(v) => v.iter().map(|&x| x as f64).collect(),
            Data::B(v) => v.iter().map(|&b| b as i64 as f64).collect(),
        }
    }

    /// Elements as integers (floats truncate toward zero, booleans as 0/1).
    pub fn i64s(&self) -> Vec<i64> {
        match &self.data {
            Data::F(v) => v.iter().map(|&x| float_to_int(DType::I64, x)).collect(),
            Data::I(v) => v.clone(),
            Data::B(v) => v.iter().map(|&b| b as i64).collect(),
        }
    }

    /// Elements as booleans (nonzero is true; NaN is true).
    pub fn bools(&self) -> Vec<bool> {
        match &self.data {
            Data::F(v) => v.iter().map(|&x| x != 0.0).collect(),
            Data::I(v) => v.iter().map(|&x| x != 0).collect(),
            Data::B(v) => v.clone(),
        }
    }

    /// The tensor converted to `dtype` with PyTorch's casting rules (floats to integers truncate).
    pub fn cast(&self, dtype: DType) -> Tensor {
        if dtype == self.dtype {
            return self.clone();
        }
        let shape = self.shape.clone();
        match &self.data {
            Data::F(v) => Tensor::from_f64s(dtype, shape, v.clone()),
            Data::I(v) => Tensor::from_i64s(dtype, shape, v.clone()),
            Data::B(v) => Tensor::from_bools(dtype, shape, v.clone()),
        }
    }

    /// The same elements with another shape of the same element count.
    pub fn reshape(mut self, shape: Vec<usize>) -> Tensor {
        debug_assert_eq!(numel(&shape), self.numel());
        self.shape = shape;
        self
    }

    /// A tensor of `shape` whose elements are this tensor's elements at flat indices `idx`
    /// (which the caller computed from this tensor's shape, so they are in range).
    pub(crate) fn take(&self, shape: Vec<usize>, idx: &[usize]) -> Tensor {
        Tensor::from_data(self.dtype, shape, self.data.take(idx))
    }

    /// The tensor broadcast to `shape`.
    pub fn broadcast_to(&self, shape: &[usize]) -> R<Tensor> {
        if self.shape == shape {
            return Ok(self.clone());
        }
        let map = broadcast_map(&self.shape, shape)?;
        Ok(self.take(shape.to_vec(), &map))
    }

    /// A tensor from a host tensor's little-endian bytes.
    pub fn from_host(h: &HostTensor) -> R<Tensor> {
        let n = h
            .shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| format!("shape {:?} has too many elements", h.shape))?;
        let size = h.dtype.size_bytes();
        if n.checked_mul(size) != Some(h.bytes.len()) {
            return Err(format!(
                "has {} bytes, but shape {:?} of {} needs {}",
                h.bytes.len(),
                h.shape,
                h.dtype,
                n.saturating_mul(size)
            ));
        }
        let chunks = h.bytes.chunks_exact(size);
        // `chunks_exact(size)` yields slices of exactly `size` bytes, so the conversions hold.
        let arr = |c: &[u8]| -> [u8; 8] {
            let mut a = [0u8; 8];
            a[..c.len()].copy_from_slice(c);
            a
        };
        let shape = h.shape.clone();
        let t = match h.dtype {
            DType::F64 => Tensor::from_f64s(
                h.dtype,
                shape,
                chunks.map(|c| f64::from_le_bytes(arr(c))).collect(),
            ),
            DType::F32 => {
                let v = chunks
                    .map(|c| {
                        let a = arr(c);
                        f32::from_le_bytes([a[0], a[1], a[2], a[3]]) as f64
                    })
                    .collect();
                Tensor::from_f64s(h.dtype, shape, v)
            }
            DType::F16 => {
                let v = chunks
                    .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f64())
                    .collect();
                Tensor::from_f64s(h.dtype, shape, v)
            }
            DType::BF16 => {
                let v = chunks
                    .map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f64())
                    .collect();
                Tensor::from_f64s(h.dtype, shape, v)
            }
            DType::I64 => Tensor::from_i64s(
                h.dtype,
                shape,
                chunks.map(|c| i64::from_le_bytes(arr(c))).collect(),
            ),
            DType::I32 => Tensor::from_i64s(
                h.dtype,
                shape,
                chunks
                    .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64)
                    .collect(),
            ),
            DType::I16 => Tensor::from_i64s(
                h.dtype,
                shape,
                chunks
                    .map(|c| i16::from_le_bytes([c[0], c[1]]) as i64)
                    .collect(),
            ),
            DType::I8 => {
                Tensor::from_i64s(h.dtype, shape, chunks.map(|c| c[0] as i8 as i64).collect())
            }
            DType::U8 => Tensor::from_i64s(h.dtype, shape, chunks.map(|c| c[0] as i64).collect()),
            DType::Bool => Tensor::from_bools(h.dtype, shape, chunks.map(|c| c[0] != 0).collect()),
        };
        Ok(t)
    }

    /// The tensor as a host tensor (little-endian bytes).
    pub fn to_host(&self) -> HostTensor {
        let mut bytes = Vec::with_capacity(self.numel() * self.dtype.size_bytes());
        match &self.data {
            Data::F(v) => {
                for &x in v {
                    match self.dtype {
                        DType::F32 => bytes.extend_from_slice(&(x as f32).to_le_bytes()),
                        DType::F16 => bytes.extend_from_slice(&f16::from_f64(x).to_le_bytes()),
                        DType::BF16 => bytes.extend_from_slice(&bf16::from_f64(x).to_le_bytes()),
                        _ => bytes.extend_from_slice(&x.to_le_bytes()),
                    }
                }
            }
            Data::I(v) => {
                for &x in v {
                    match self.dtype {
                        DType::I32 => bytes.extend_from_slice(&(x as i32).to_le_bytes()),
                        DType::I16 => bytes.extend_from_slice(&(x as i16).to_le_bytes()),
                        DType::I8 => bytes.push(x as i8 as u8),
                        DType::U8 => bytes.push(x as u8),
                        _ => bytes.extend_from_slice(&x.to_le_bytes()),
                    }
                }
            }
            Data::B(v) => bytes.extend(v.iter().map(|&b| b as u8)),
        }
        HostTensor {
            dtype: self.dtype,
            shape: self.shape.clone(),
            bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_round_trip_every_dtype() {
        for d in DType::ALL {
            let t = Tensor::from_f64s(d, vec![2, 2], vec![1.0, -2.0, 0.0, 3.0]);
            let h = t.to_host();
            assert_eq!(h.bytes.len(), 4 * d.size_bytes());
            assert_eq!(Tensor::from_host(&h).unwrap(), t, "{d}");
        }
    }

    #[test]
    fn bad_byte_count_is_an_error() {
        let h = HostTensor {
            dtype: DType::F32,
            shape: vec![3],
            bytes: vec![0; 5],
        };
        assert!(Tensor::from_host(&h).is_err());
        let h = HostTensor {
            dtype: DType::F32,
            shape: vec![usize::MAX, 4],
            bytes: vec![],
        };
        assert!(Tensor::from_host(&h).is_err());
    }

    #[test]
    fn casts_follow_torch() {
        let t = Tensor::from_f64s(DType::F32, vec![4], vec![300.0, -1.5, f64::NAN, 2.9]);
        assert_eq!(t.cast(DType::U8).i64s(), vec![44, 255, 0, 2]);
        assert_eq!(t.cast(DType::I64).i64s(), vec![300, -1, i64::MIN, 2]);
        assert_eq!(t.cast(DType::Bool).bools(), vec![true, true, true, true]);
        let big = Tensor::from_f64s(DType::F64, vec![1], vec![1e20]);
        assert_eq!(big.cast(DType::I32).i64s(), vec![i32::MIN as i64]);
        let i = Tensor::from_i64s(DType::I32, vec![2], vec![i32::MAX as i64 + 1, 255]);
        assert_eq!(i.i64s(), vec![i32::MIN as i64, 255]);
        assert_eq!(i.cast(DType::I8).i64s(), vec![0, -1]);
        let r = Tensor::from_f64s(DType::F32, vec![1], vec![0.1]);
        assert_eq!(r.f64s(), vec![0.1f32 as f64]);
        let h = Tensor::from_f64s(DType::F16, vec![1], vec![70000.0]);
        assert_eq!(h.f64s(), vec![f64::INFINITY]);
    }

    #[test]
    fn broadcast_helpers() {
        assert_eq!(broadcast_shapes(&[4, 1], &[3]).unwrap(), vec![4, 3]);
        assert!(broadcast_shapes(&[4, 2], &[3]).is_err());
        assert_eq!(
            broadcast_map(&[2, 1], &[2, 3]).unwrap(),
            vec![0, 0, 0, 1, 1, 1]
        );
        assert_eq!(
            broadcast_map(&[3], &[2, 3]).unwrap(),
            vec![0, 1, 2, 0, 1, 2]
        );
        assert_eq!(broadcast_map(&[], &[0, 3]).unwrap(), Vec::<usize>::new());
        assert_eq!(strides(&[2, 3, 4]), vec![12, 4, 1]);
        let mut n = 0;
        for_each_index(&[], |_| n += 1);
        assert_eq!(n, 1);
    }
}
