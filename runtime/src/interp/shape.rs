//! Shape and data-movement ops: views, permutes, slices, concatenation, padding, copies and the
//! `*_scatter` ops that write a slice back.
//!
//! Graphs are functional, so every "view" op returns a fresh contiguous tensor.

use super::tensor::{for_each_index, lanes, numel, permute_map, strides, Scalar, Tensor, R};
use super::{ints_n, norm_dim, to_usize, Ctx};

/// `view(self, size)`: one `-1` is inferred.
pub(crate) fn view(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    let sizes = cx.ints("size")?;
    let mut shape = Vec::with_capacity(sizes.len());
    let mut infer_at = None;
    let mut known = 1usize;
    for (i, &s) in sizes.iter().enumerate() {
        if s == -1 && infer_at.is_none() {
            infer_at = Some(i);
            shape.push(0);
        } else {
            let s = to_usize(s, "a view size")?;
            known = known.checked_mul(s).ok_or("view sizes overflow")?;
            shape.push(s);
        }
    }
    if let Some(i) = infer_at {
        if known == 0 || x.numel() % known != 0 {
            return Err(format!(
                "shape {sizes:?} is invalid for an input of {} elements",
                x.numel()
            ));
        }
        shape[i] = x.numel() / known;
    } else if known != x.numel() {
        return Err(format!(
            "shape {sizes:?} is invalid for an input of {} elements",
            x.numel()
        ));
    }
    Ok(x.clone().reshape(shape))
}

/// `permute(self, dims)`.
pub(crate) fn permute(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    let dims = cx.ints("dims")?;
    if dims.len() != x.rank() {
        return Err(format!("dims {dims:?} do not match rank {}", x.rank()));
    }
    let mut perm = Vec::with_capacity(dims.len());
    for &d in &dims {
        let d = norm_dim(d, x.rank())?;
        if perm.contains(&d) {
            return Err(format!("dims {dims:?} repeat dimension {d}"));
        }
        perm.push(d);
    }
    let shape = perm.iter().map(|&p| x.shape[p]).collect();
    Ok(x.take(shape, &permute_map(&x.shape, &perm)))
}

/// `expand(self, size)`: `-1` keeps a dimension; new leading dimensions may be added.
pub(crate) fn expand(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    let sizes = cx.ints("size")?;
    if sizes.len() < x.rank() {
        return Err(format!(
            "size {sizes:?} has fewer dimensions than the input {:?}",
            x.shape
        ));
    }
    let lead = sizes.len() - x.rank();
    let mut shape = Vec::with_capacity(sizes.len());
    for (i, &s) in sizes.iter().enumerate() {
        shape.push(if s == -1 && i >= lead {
            x.shape[i - lead]
        } else {
            to_usize(s, "an expanded size")?
        });
    }
    x.broadcast_to(&shape)
}

/// `unsqueeze(self, dim)`.
pub(crate) fn unsqueeze(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    let d = norm_dim(cx.int("dim")?, x.rank() + 1)?;
    let mut shape = x.shape.clone();
    shape.insert(d, 1);
    Ok(x.clone().reshape(shape))
}

/// `squeeze.dim`, `squeeze.dims`: dimensions of size other than 1 are kept.
pub(crate) fn squeeze(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    let dims = cx.ints("dim")?;
    let mut drop = vec![false; x.rank()];
    for &d in &dims {
        let d = norm_dim(d, x.rank())?;
        if x.rank() > 0 && x.shape[d] == 1 {
            drop[d] = true;
        }
    }
    let shape = x
        .shape
        .iter()
        .zip(&drop)
        .filter(|(_, &dr)| !dr)
        .map(|(&s, _)| s)
        .collect();
    Ok(x.clone().reshape(shape))
}

/// PyTorch's slice bounds: negative values count from the end, everything is clamped.
pub(crate) fn slice_range(
    size: usize,
    start: Option<i64>,
    end: Option<i64>,
    step: i64,
) -> R<(usize, usize, usize)> {
    if step <= 0 {
        return Err(format!("slice step must be positive, found {step}"));
    }
    let n = size as i128;
    let clamp = |v: i64| {
        let v = v as i128;
        let v = if v < 0 { v + n } else { v };
        v.clamp(0, n) as usize
    };
    let s = start.map_or(0, clamp);
    let e = end.map_or(size, clamp).max(s);
    let step = step as usize;
    let len = (e - s).div_ceil(step);
    Ok((s, len, step))
}

/// Flat source indices of `x[.., start::step (len), ..]` along `dim`.
fn slice_map(
    shape: &[usize],
    dim: usize,
    start: usize,
    len: usize,
    step: usize,
) -> (Vec<usize>, Vec<usize>) {
    let mut out_shape = shape.to_vec();
    out_shape[dim] = len;
    let st = strides(shape);
    let mut map = Vec::with_capacity(numel(&out_shape));
    for_each_index(&out_shape, |ix| {
        let mut f = 0;
        for (k, &i) in ix.iter().enumerate() {
            f += if k == dim { start + i * step } else { i } * st[k];
        }
        map.push(f);
    });
    (out_shape, map)
}

fn slice_args(cx: &Ctx, x: &Tensor) -> R<(usize, usize, usize, usize)> {
    if x.rank() == 0 {
        return Err("cannot slice a 0-d tensor".into());
    }
    let dim = norm_dim(cx.int("dim")?, x.rank())?;
    let (s, len, step) = slice_range(
        x.shape[dim],
        cx.opt_int("start")?,
        cx.opt_int("end")?,
        cx.int("step")?,
    )?;
    Ok((dim, s, len, step))
}

/// `slice(self, dim, start, end, step)`.
pub(crate) fn slice(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    let (dim, s, len, step) = slice_args(cx, x)?;
    let (shape, map) = slice_map(&x.shape, dim, s, len, step);
    Ok(x.take(shape, &map))
}

/// `slice_scatter(self, src, dim, start, end, step)`: `self` with the slice replaced by `src`.
pub(crate) fn slice_scatter(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    let (dim, s, len, step) = slice_args(cx, x)?;
    let (shape, map) = slice_map(&x.shape, dim, s, len, step);
    let src = cx.t("src")?.cast(x.dtype);
    if src.shape != shape {
        return Err(format!(
            "src has shape {:?}, expected the slice's shape {shape:?}",
            src.shape
        ));
    }
    let mut out = x.clone();
    for (k, &dst) in map.iter().enumerate() {
        out.data.set_from(dst, &src.data, k);
    }
    Ok(out)
}

fn select_args(cx: &Ctx, x: &Tensor) -> R<(usize, usize)> {
    if x.rank() == 0 {
        return Err("cannot select from a 0-d tensor".into());
    }
    let dim = norm_dim(cx.int("dim")?, x.rank())?;
    let n = x.shape[dim] as i64;
    let i = cx.int("index")?;
    let j = if i < 0 { i + n } else { i };
    if j < 0 || j >= n {
        return Err(format!(
            "index {i} is out of range for dimension {dim} of size {n}"
        ));
    }
    Ok((dim, j as usize))
}

/// `select(self, dim, index)`.
pub(crate) fn select(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    let (dim, i) = select_args(cx, x)?;
    let (mut shape, map) = slice_map(&x.shape, dim, i, 1, 1);
    shape.remove(dim);
    Ok(x.take(shape, &map))
}

/// `select_scatter(self, src, dim, index)`.
pub(crate) fn select_scatter(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    let (dim, i) = select_args(cx, x)?;
    let (mut shape, map) = slice_map(&x.shape, dim, i, 1, 1);
    shape.remove(dim);
    let src = cx.t("src")?.cast(x.dtype);
    if src.shape != shape {
        return Err(format!("src has shape {:?}, expected {shape:?}", src.shape));
    }
    let mut out = x.clone();
    for (k, &dst) in map.iter().enumerate() {
        out.data.set_from(dst, &src.data, k);
    }
    Ok(out)
}

/// `cat(tensors, dim)`: 1-d empty tensors are skipped; inputs are cast to the result dtype.
pub(crate) fn cat(cx: &Ctx) -> R<Tensor> {
    let d = cx.out_dtype();
    let ts: Vec<Tensor> = cx
        .tensors("tensors")?
        .into_iter()
        .flatten()
        .filter(|t| !(t.rank() == 1 && t.shape[0] == 0))
        .map(|t| t.cast(d))
        .collect();
    let Some(first) = ts.first() else {
        return Ok(Tensor::zeros(d, cx.out_shape()));
    };
    let dim = norm_dim(cx.int("dim")?, first.rank())?;
    let mut shape = first.shape.clone();
    shape[dim] = 0;
    for t in &ts {
        let mut s = t.shape.clone();
        if s.len() != shape.len() {
            return Err(format!(
                "cannot concatenate shapes {:?} and {:?}",
                first.shape, t.shape
            ));
        }
        s[dim] = 0;
        if s != {
            let mut f = first.shape.clone();
            f[dim] = 0;
            f
        } {
            return Err(format!(
                "cannot concatenate shapes {:?} and {:?} along dimension {dim}",
                first.shape, t.shape
            ));
        }
        shape[dim] += t.shape[dim];
    }
    let (outer, _, inner) = lanes(&shape, dim);
    let mut data = first.data.empty_like(numel(&shape));
    for o in 0..outer {
        for t in &ts {
            let block = t.shape[dim] * inner;
            data.extend_range(&t.data, o * block, (o + 1) * block);
        }
    }
    Ok(Tensor::from_data(d, shape, data))
}

/// `split_with_sizes(self, split_sizes, dim)`.
pub(crate) fn split_with_sizes(cx: &Ctx) -> R<Vec<Tensor>> {
    let x = cx.t("self")?;
    if x.rank() == 0 {
        return Err("cannot split a 0-d tensor".into());
    }
    let dim = norm_dim(cx.int("dim")?, x.rank())?;
    let sizes = cx.ints("split_sizes")?;
    let mut total = 0usize;
    let mut out = vec![];
    for &s in &sizes {
        let s = to_usize(s, "a split size")?;
        if total + s > x.shape[dim] {
            return Err(format!(
                "split_sizes {sizes:?} exceed dimension {dim} of size {}",
                x.shape[dim]
            ));
        }
        let (shape, map) = slice_map(&x.shape, dim, total, s, 1);
        out.push(x.take(shape, &map));
        total += s;
    }
    if total != x.shape[dim] {
        return Err(format!(
            "split_sizes {sizes:?} sum to {total}, but dimension {dim} has size {}",
            x.shape[dim]
        ));
    }
    Ok(out)
}

/// `repeat(self, repeats)`: tiles the tensor; extra leading repeats add dimensions.
pub(crate) fn repeat(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    let reps = cx.ints("repeats")?;
    if reps.len() < x.rank() {
        return Err(format!(
            "repeats {reps:?} has fewer entries than the rank {}",
            x.rank()
        ));
    }
    let lead = reps.len() - x.rank();
    let mut in_shape = vec![1; lead];
    in_shape.extend(&x.shape);
    let mut shape = vec![];
    for (r, &s) in reps.iter().zip(&in_shape) {
        shape.push(
            to_usize(*r, "a repeat count")?
                .checked_mul(s)
                .ok_or("repeat overflows")?,
        );
    }
    cx.check_size(numel(&shape), "the repeated tensor")?;
    let st = strides(&in_shape);
    let mut map = Vec::with_capacity(numel(&shape));
    for_each_index(&shape, |ix| {
        map.push(
            ix.iter()
                .zip(&in_shape)
                .zip(&st)
                .map(|((i, n), s)| (i % n) * s)
                .sum(),
        );
    });
    Ok(x.take(shape, &map))
}

/// `flip(self, dims)`.
pub(crate) fn flip(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    let mut rev = vec![false; x.rank()];
    for d in cx.ints("dims")? {
        let d = norm_dim(d, x.rank())?;
        if x.rank() > 0 {
            rev[d] = true;
        }
    }
    let st = strides(&x.shape);
    let mut map = Vec::with_capacity(x.numel());
    for_each_index(&x.shape, |ix| {
        let mut f = 0;
        for k in 0..ix.len() {
            f += if rev[k] {
                x.shape[k] - 1 - ix[k]
            } else {
                ix[k]
            } * st[k];
        }
        map.push(f);
    });
    Ok(x.take(x.shape.clone(), &map))
}

/// `diagonal(self, offset, dim1, dim2)`: the diagonal becomes the last dimension.
pub(crate) fn diagonal(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    let d1 = norm_dim(cx.int("dim1")?, x.rank())?;
    let d2 = norm_dim(cx.int("dim2")?, x.rank())?;
    if d1 == d2 || x.rank() < 2 {
        return Err("diagonal needs two distinct dimensions".into());
    }
    let off = cx.int("offset")?;
    let (n1, n2) = (x.shape[d1] as i64, x.shape[d2] as i64);
    let len = if off >= 0 {
        n1.min(n2 - off)
    } else {
        (n1 + off).min(n2)
    }
    .max(0) as usize;
    // Only used when the diagonal is non-empty, where the offset is smaller than a dimension.
    let (s1, s2) = if off >= 0 {
        (0, off as usize)
    } else {
        (off.unsigned_abs() as usize, 0)
    };
    let rest: Vec<usize> = (0..x.rank()).filter(|&k| k != d1 && k != d2).collect();
    let mut shape: Vec<usize> = rest.iter().map(|&k| x.shape[k]).collect();
    shape.push(len);
    let st = strides(&x.shape);
    let mut map = Vec::with_capacity(numel(&shape));
    for_each_index(&shape, |ix| {
        let i = ix[ix.len() - 1];
        let mut f = (s1 + i) * st[d1] + (s2 + i) * st[d2];
        for (j, &k) in rest.iter().enumerate() {
            f += ix[j] * st[k];
        }
        map.push(f);
    });
    Ok(x.take(shape, &map))
}

/// `as_strided(self, size, stride, storage_offset)`, on the contiguous buffer of `self`.
pub(crate) fn as_strided(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    let size = cx.ints("size")?;
    let stride = cx.ints("stride")?;
    if size.len() != stride.len() {
        return Err(format!(
            "size {size:?} and stride {stride:?} differ in length"
        ));
    }
    let off = cx.opt_int("storage_offset")?.unwrap_or(0);
    if off < 0 || stride.iter().any(|&s| s < 0) {
        return Err("negative strides and offsets are not supported".into());
    }
    let shape = size
        .iter()
        .map(|&s| to_usize(s, "a size"))
        .collect::<R<Vec<usize>>>()?;
    if numel(&shape) > 0 {
        // The largest offset reached, computed without overflow.
        let max: i128 = off as i128
            + size
                .iter()
                .zip(&stride)
                .map(|(&n, &s)| (n as i128 - 1) * s as i128)
                .sum::<i128>();
        if max >= x.numel() as i128 {
            return Err(format!(
                "size {size:?}, stride {stride:?} and offset {off} reach element {max}, but the input has {} elements",
                x.numel()
            ));
        }
    }
    let mut map = Vec::with_capacity(numel(&shape));
    for_each_index(&shape, |ix| {
        map.push(
            off as usize
                + ix.iter()
                    .zip(&stride)
                    .map(|(&i, &s)| i * s as usize)
                    .sum::<usize>(),
        );
    });
    Ok(x.take(shape, &map))
}

/// Pad pairs `(before, after)` per dimension, from the `pad` list that starts at the last
/// dimension.
fn pad_pairs(rank: usize, pad: &[i64]) -> R<Vec<(i64, i64)>> {
    if !pad.len().is_multiple_of(2) || pad.len() / 2 > rank {
        return Err(format!(
            "pad {pad:?} must have an even length of at most twice the rank {rank}"
        ));
    }
    let mut pairs = vec![(0, 0); rank];
    for (i, p) in pad.chunks(2).enumerate() {
        pairs[rank - 1 - i] = (p[0], p[1]);
    }
    Ok(pairs)
}

/// Output shape of padding `shape` by `pairs`.
fn padded_shape(shape: &[usize], pairs: &[(i64, i64)]) -> R<Vec<usize>> {
    shape
        .iter()
        .zip(pairs)
        .map(|(&n, &(a, b))| {
            let s = n as i128 + a as i128 + b as i128;
            usize::try_from(s).map_err(|_| format!("padding {pairs:?} makes a dimension negative"))
        })
        .collect()
}

/// Builds a padded tensor: `src(dim, coord)` maps an output coordinate minus the leading pad to
/// an input coordinate, or `None` for the fill value.
fn pad_with(
    cx: &Ctx,
    x: &Tensor,
    pairs: &[(i64, i64)],
    fill: Option<Scalar>,
    src: impl Fn(usize, i128) -> Option<usize>,
) -> R<Tensor> {
    let shape = padded_shape(&x.shape, pairs)?;
    cx.check_size(numel(&shape), "the padded tensor")?;
    let st = strides(&x.shape);
    let n = x.numel();
    let mut map = Vec::with_capacity(numel(&shape));
    for_each_index(&shape, |ix| {
        let mut f = Some(0);
        for k in 0..ix.len() {
            f = match (f, src(k, ix[k] as i128 - pairs[k].0 as i128)) {
                (Some(f), Some(c)) => Some(f + c * st[k]),
                _ => None,
            };
        }
        map.push(f.unwrap_or(n));
    });
    // Index `n` is the fill value appended after the input's elements.
    let mut data = x.data.clone();
    let fill = Tensor::full(x.dtype, vec![1], fill.unwrap_or(Scalar::Int(0)));
    data.extend_range(&fill.data, 0, 1);
    Ok(Tensor::from_data(x.dtype, shape, data.take(&map)))
}

/// `constant_pad_nd(self, pad, value)`: negative pads crop.
pub(crate) fn constant_pad_nd(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    let pairs = pad_pairs(x.rank(), &cx.ints("pad")?)?;
    let value = cx.scalar("value")?;
    let shape = x.shape.clone();
    pad_with(cx, x, &pairs, Some(value), |k, c| {
        (c >= 0 && c < shape[k] as i128).then_some(c as usize)
    })
}

/// `reflection_pad{1,2,3}d(self, padding)`: mirror without repeating the edge.
pub(crate) fn reflection_pad(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    let pairs = pad_pairs(x.rank(), &cx.ints("padding")?)?;
    for (k, &(a, b)) in pairs.iter().enumerate() {
        if (a != 0 || b != 0)
            && (a >= x.shape[k] as i64 || b >= x.shape[k] as i64 || a < 0 || b < 0)
        {
            return Err(format!(
                "reflection padding ({a}, {b}) must be non-negative and less than the dimension size {}",
                x.shape[k]
            ));
        }
    }
    let shape = x.shape.clone();
    pad_with(cx, x, &pairs, None, |k, c| {
        let n = shape[k] as i128;
        let c = if c < 0 { -c } else { c };
        let c = if c >= n { 2 * (n - 1) - c } else { c };
        Some(c.clamp(0, (n - 1).max(0)) as usize)
    })
}

/// `replication_pad{2,3}d(self, padding)`: repeats the edge; a negative pad crops (output
/// index `o` reads input index `o - pad_before` clamped to the dimension, as ATen's kernel).
pub(crate) fn replication_pad(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    let pairs = pad_pairs(x.rank(), &cx.ints("padding")?)?;
    for (k, &(a, b)) in pairs.iter().enumerate() {
        if (a != 0 || b != 0) && x.shape[k] == 0 {
            return Err("cannot replication-pad an empty dimension".into());
        }
    }
    let shape = x.shape.clone();
    pad_with(cx, x, &pairs, None, |k, c| {
        Some(c.clamp(0, (shape[k] as i128 - 1).max(0)) as usize)
    })
}

/// `alias`, `clone`.
pub(crate) fn clone(cx: &Ctx) -> R<Tensor> {
    Ok(cx.t("self")?.clone())
}

/// `copy(self, src)`: `src` cast to `self`'s dtype and broadcast to its shape.
pub(crate) fn copy(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    cx.t("src")?.cast(x.dtype).broadcast_to(&x.shape)
}

/// `_to_copy(self, dtype)`: a cast (floats to integers truncate toward zero).
pub(crate) fn to_copy(cx: &Ctx) -> R<Tensor> {
    Ok(cx.t("self")?.cast(cx.out_dtype()))
}

/// `unfold(self, dimension, size, step)`: windows along `dimension` as a new last dimension.
pub(crate) fn unfold(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    let shape = cx.out_shape();
    let (size, step) = (
        to_usize(cx.int("size")?, "size")?,
        to_usize(cx.int("step")?, "step")?,
    );
    if x.rank() == 0 {
        return Ok(x.take(shape, &vec![0; size]));
    }
    let d = norm_dim(cx.int("dimension")?, x.rank())?;
    let st = strides(&x.shape);
    let mut idx = Vec::with_capacity(numel(&shape));
    for_each_index(&shape, |ix| {
        let (win, j) = (&ix[..ix.len() - 1], ix[ix.len() - 1]);
        let mut flat = 0;
        for (k, (&w, &s)) in win.iter().zip(&st).enumerate() {
            flat += if k == d { w * step + j } else { w } * s;
        }
        idx.push(flat);
    });
    Ok(x.take(shape, &idx))
}

/// Spatial geometry helper shared with nn ops: `ints_n` on a named argument.
pub(crate) fn ints_arg(cx: &Ctx, name: &str, n: usize) -> R<Vec<i64>> {
    ints_n(&cx.ints(name)?, n, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slice_bounds_clamp_like_torch() {
        assert_eq!(slice_range(10, Some(2), Some(i64::MAX), 3), Ok((2, 3, 3)));
        assert_eq!(slice_range(10, Some(-3), None, 1), Ok((7, 3, 1)));
        assert_eq!(slice_range(10, Some(8), Some(2), 1), Ok((8, 0, 1)));
        assert_eq!(slice_range(10, Some(i64::MIN), Some(-20), 1), Ok((0, 0, 1)));
        assert_eq!(slice_range(0, None, None, 5), Ok((0, 0, 5)));
        assert!(slice_range(10, None, None, 0).is_err());
    }

    #[test]
    fn pads_are_paired_from_the_last_dimension() {
        assert_eq!(
            pad_pairs(3, &[1, 2, 3, 4]),
            Ok(vec![(0, 0), (3, 4), (1, 2)])
        );
        assert!(pad_pairs(1, &[1, 2, 3, 4]).is_err());
        assert!(pad_pairs(2, &[1]).is_err());
        assert_eq!(padded_shape(&[2, 3], &[(0, 0), (-1, 2)]), Ok(vec![2, 4]));
        assert!(padded_shape(&[2], &[(-2, -1)]).is_err());
    }
}
