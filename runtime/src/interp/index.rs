//! Indexing ops: embedding, gather, advanced indexing (`index.Tensor`, `index_put`),
//! `index_select`, the scatters and `masked_scatter`. Out-of-range indices are errors.

use super::elementwise::{div_floor_i, fmax_nan, fmin_nan, operand, operand_tensor, Operand};
use super::tensor::{
    broadcast_shapes, for_each_index, lanes, numel, round_float, strides, try_for_each_index,
    wrap_int, Data, Tensor, R,
};
use super::{norm_dim, Ctx};
use fxhlo_ir::DType;

fn check_index_dtype(t: &Tensor, what: &str) -> R<()> {
    if !t.dtype.is_int() {
        return Err(format!(
            "{what} has dtype {}, expected an integer dtype",
            t.dtype
        ));
    }
    Ok(())
}

/// `embedding(weight, indices)`: rows of `weight`.
pub(crate) fn embedding(cx: &Ctx) -> R<Tensor> {
    let w = cx.t("weight")?;
    let idx = cx.t("indices")?;
    check_index_dtype(idx, "indices")?;
    if w.rank() != 2 {
        return Err(format!("weight has shape {:?}, expected a matrix", w.shape));
    }
    let (rows, dim) = (w.shape[0], w.shape[1]);
    let mut map = Vec::with_capacity(idx.numel() * dim);
    for i in idx.i64s() {
        if i < 0 || i as u64 >= rows as u64 {
            return Err(format!(
                "index {i} is out of range for an embedding table of {rows} rows"
            ));
        }
        map.extend((0..dim).map(|j| i as usize * dim + j));
    }
    let mut shape = idx.shape.clone();
    shape.push(dim);
    Ok(w.take(shape, &map))
}

/// Normalizes index `i` into `0..n`, wrapping negatives when `wrap`.
fn check_index(i: i64, n: usize, wrap: bool, dim: usize) -> R<usize> {
    let j = if wrap && i < 0 { i + n as i64 } else { i };
    if j < 0 || j as u64 >= n as u64 {
        return Err(format!(
            "index {i} is out of bounds for dimension {dim} with size {n}"
        ));
    }
    Ok(j as usize)
}

/// `gather(self, dim, index)`: `out[c] = self[c with c[dim] = index[c]]`.
pub(crate) fn gather(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    let ix = cx.t("index")?;
    check_index_dtype(ix, "index")?;
    let dim = norm_dim(cx.int("dim")?, x.rank())?;
    let xs = if x.rank() == 0 {
        vec![1]
    } else {
        x.shape.clone()
    };
    let is = if ix.rank() == 0 && x.rank() <= 1 {
        vec![1]
    } else {
        ix.shape.clone()
    };
    if is.len() != xs.len() {
        return Err(format!(
            "index has rank {}, expected the rank of self ({})",
            ix.rank(),
            x.rank()
        ));
    }
    for d in 0..xs.len() {
        if d != dim && is[d] > xs[d] {
            return Err(format!(
                "index has shape {:?}, larger than self {:?} in dimension {d}",
                ix.shape, x.shape
            ));
        }
    }
    let st = strides(&xs);
    let ist = strides(&is);
    let vals = ix.i64s();
    let mut map = Vec::with_capacity(ix.numel());
    try_for_each_index(&is, |c| {
        let k: usize = c.iter().zip(&ist).map(|(a, b)| a * b).sum();
        let v = check_index(vals[k], xs[dim], false, dim)?;
        map.push(
            c.iter()
                .enumerate()
                .map(|(d, &i)| if d == dim { v } else { i } * st[d])
                .sum(),
        );
        Ok(())
    })?;
    Ok(x.take(ix.shape.clone(), &map))
}

/// Where `self[indices]` reads: the result shape and, per result element, the flat index into
/// `self`. Handles `None` entries, broadcasting index tensors, negative indices and (for
/// `index_put`) boolean masks; applies NumPy's rule for where the indexed dimensions go.
/// At most `max_elems` positions are produced (the memory limit), else an error.
fn advanced(
    x_shape: &[usize],
    indices: &[Option<&Tensor>],
    max_elems: usize,
) -> R<(Vec<usize>, Vec<usize>)> {
    // One entry per indexed dimension of self; a mask covers as many dimensions as it has.
    let mut per_dim: Vec<Option<Tensor>> = vec![];
    for t in indices {
        match t {
            None => per_dim.push(None),
            Some(t) if matches!(t.dtype, DType::Bool | DType::U8) => {
                let start = per_dim.len();
                let k = t.rank();
                if start + k > x_shape.len() || t.shape[..] != x_shape[start..start + k] {
                    return Err(format!(
                        "mask of shape {:?} does not match self's dimensions {:?} from {start}",
                        t.shape, x_shape
                    ));
                }
                let mut coords: Vec<Vec<i64>> = vec![vec![]; k];
                let mask = t.bools();
                let mut f = 0;
                for_each_index(&t.shape, |ix| {
                    if mask[f] {
                        for (d, &i) in ix.iter().enumerate() {
                            coords[d].push(i as i64);
                        }
                    }
                    f += 1;
                });
                for c in coords {
                    let n = c.len();
                    per_dim.push(Some(Tensor::from_i64s(DType::I64, vec![n], c)));
                }
            }
            Some(t) => {
                check_index_dtype(t, "an index tensor")?;
                per_dim.push(Some((*t).clone()));
            }
        }
    }
    if per_dim.len() > x_shape.len() {
        return Err(format!(
            "too many indices ({}) for a tensor of rank {}",
            per_dim.len(),
            x_shape.len()
        ));
    }
    let positions: Vec<usize> = (0..per_dim.len())
        .filter(|&d| per_dim[d].is_some())
        .collect();
    let Some(&first) = positions.first() else {
        return Err("indexing needs at least one index tensor".into());
    };
    let mut b: Vec<usize> = vec![];
    for t in per_dim.iter().flatten() {
        b = broadcast_shapes(&b, &t.shape)?;
    }
    let nb = b.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    let rest_n = (0..x_shape.len())
        .filter(|d| !positions.contains(d))
        .try_fold(1usize, |a, d| a.checked_mul(x_shape[d]));
    match (nb, rest_n) {
        (Some(n), Some(r)) if n.checked_mul(r).is_some_and(|t| t <= max_elems) => {}
        _ => {
            return Err(format!(
                "indexing with index shape {b:?} would produce more elements than the interpreter's memory limit allows"
            ))
        }
    }
    let nb = numel(&b);
    // Each index tensor broadcast to `b`, normalized and checked.
    let mut idx: Vec<Vec<usize>> = vec![vec![]; x_shape.len()];
    for &d in &positions {
        if let Some(t) = &per_dim[d] {
            let vals = t.broadcast_to(&b)?.i64s();
            idx[d] = vals
                .into_iter()
                .map(|v| check_index(v, x_shape[d], true, d))
                .collect::<R<_>>()?;
        }
    }
    let contiguous = positions.windows(2).all(|w| w[1] == w[0] + 1);
    let rest: Vec<usize> = (0..x_shape.len())
        .filter(|d| !positions.contains(d))
        .collect();
    let b_at = if contiguous { first } else { 0 };
    let mut out_shape: Vec<usize> = rest[..b_at].iter().map(|&d| x_shape[d]).collect();
    out_shape.extend(&b);
    out_shape.extend(rest[b_at..].iter().map(|&d| x_shape[d]));
    let st = strides(x_shape);
    let bst = strides(&b);
    let mut map = Vec::with_capacity(numel(&out_shape));
    if nb > 0 {
        for_each_index(&out_shape, |ix| {
            let bi: usize = ix[b_at..b_at + b.len()]
                .iter()
                .zip(&bst)
                .map(|(i, s)| i * s)
                .sum();
            let mut f: usize = positions.iter().map(|&d| idx[d][bi] * st[d]).sum();
            let rest_coords = ix[..b_at].iter().chain(&ix[b_at + b.len()..]);
            for (&d, &c) in rest.iter().zip(rest_coords) {
                f += c * st[d];
            }
            map.push(f);
        });
    }
    Ok((out_shape, map))
}

/// `index.Tensor(self, indices)`: advanced indexing.
pub(crate) fn index(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    let (shape, map) = advanced(&x.shape, &cx.tensors("indices")?, cx.max_elements())?;
    Ok(x.take(shape, &map))
}

/// Adds `src[s]` into `out[dst]` in the dtype of `out` (bool: logical or).
fn accumulate(dtype: DType, out: &mut Data, dst: usize, src: &Data, s: usize) {
    match (out, src) {
        (Data::F(o), Data::F(v)) => o[dst] = round_float(dtype, o[dst] + v[s]),
        (Data::I(o), Data::I(v)) => o[dst] = wrap_int(dtype, o[dst].wrapping_add(v[s])),
        (Data::B(o), Data::B(v)) => o[dst] |= v[s],
        // Callers cast `src` to the dtype of `out` first.
        _ => unreachable!("accumulate between buffers of different kinds"),
    }
}

/// `index_put(self, indices, values, accumulate)`: boolean masks are accepted; without
/// `accumulate`, the last write to a position wins.
pub(crate) fn index_put(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    let (shape, map) = advanced(&x.shape, &cx.tensors("indices")?, cx.max_elements())?;
    let v = cx
        .t("values")?
        .cast(x.dtype)
        .broadcast_to(&shape)
        .map_err(|_| {
            format!(
                "values of shape {:?} do not broadcast to the indexed shape {shape:?}",
                cx.t("values").map(|t| t.shape.clone()).unwrap_or_default()
            )
        })?;
    let acc = cx.bool("accumulate")?;
    let mut out = x.clone();
    for (k, &dst) in map.iter().enumerate() {
        if acc {
            accumulate(x.dtype, &mut out.data, dst, &v.data, k);
        } else {
            out.data.set_from(dst, &v.data, k);
        }
    }
    Ok(out)
}

/// `index_select(self, dim, index)`: negative indices are errors, as in PyTorch.
pub(crate) fn index_select(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    let ix = cx.t("index")?;
    check_index_dtype(ix, "index")?;
    let dim = norm_dim(cx.int("dim")?, x.rank())?;
    let vals = ix.i64s();
    let (outer, len, inner) = lanes(&x.shape, dim);
    let sel = vals
        .iter()
        .map(|&v| check_index(v, len, false, dim))
        .collect::<R<Vec<usize>>>()?;
    let mut map = Vec::with_capacity(outer * sel.len() * inner);
    for o in 0..outer {
        for &s in &sel {
            map.extend((0..inner).map(|n| (o * len + s) * inner + n));
        }
    }
    let mut shape = x.shape.clone();
    if !shape.is_empty() {
        shape[dim] = sel.len();
    } else if sel.len() != 1 {
        return Err(format!("index of {} elements for a 0-d tensor", sel.len()));
    }
    Ok(x.take(shape, &map))
}

/// The (destination, source) flat index pairs of a scatter along `dim`: every element `c` of
/// `index` sends `src[c]` to `self[c with c[dim] = index[c]]`.
fn scatter_pairs(
    x_shape: &[usize],
    dim: usize,
    index: &Tensor,
    src_shape: Option<&[usize]>,
) -> R<Vec<(usize, usize)>> {
    check_index_dtype(index, "index")?;
    let xs = if x_shape.is_empty() {
        vec![1]
    } else {
        x_shape.to_vec()
    };
    let is = if index.rank() == 0 && xs.len() == 1 {
        vec![index.numel()]
    } else {
        index.shape.clone()
    };
    if is.len() != xs.len() {
        return Err(format!(
            "index has rank {}, expected the rank of self ({})",
            index.rank(),
            x_shape.len()
        ));
    }
    let ss = match src_shape {
        Some([]) => vec![1],
        Some(s) => s.to_vec(),
        None => is.clone(),
    };
    if ss.len() != is.len() {
        return Err(format!(
            "src has rank {}, expected the rank of index ({})",
            ss.len(),
            is.len()
        ));
    }
    for d in 0..is.len() {
        if is[d] > ss[d] || (d != dim && is[d] > xs[d]) {
            return Err(format!(
                "index of shape {:?} is larger than src {ss:?} or self {xs:?} in dimension {d}",
                index.shape
            ));
        }
    }
    let (xst, sst, ist) = (strides(&xs), strides(&ss), strides(&is));
    let vals = index.i64s();
    let mut pairs = Vec::with_capacity(index.numel());
    try_for_each_index(&is, |c| {
        let k: usize = c.iter().zip(&ist).map(|(a, b)| a * b).sum();
        let v = check_index(vals[k], xs[dim], false, dim)?;
        let dst = c
            .iter()
            .enumerate()
            .map(|(d, &i)| if d == dim { v } else { i } * xst[d])
            .sum();
        let s = c.iter().zip(&sst).map(|(a, b)| a * b).sum();
        pairs.push((dst, s));
        Ok(())
    })?;
    Ok(pairs)
}

/// The `src` (or `value`) of a scatter, cast to `dtype`, with its shape.
fn scatter_src(cx: &Ctx, dtype: DType) -> R<(Tensor, Option<Vec<usize>>)> {
    let name = if cx.has("src") { "src" } else { "value" };
    match operand(cx, name)? {
        Operand::T(t) => Ok((t.cast(dtype), Some(t.shape.clone()))),
        s @ Operand::S(_) => Ok((operand_tensor(&s, dtype, &[1])?, None)),
    }
}

/// `scatter.src`, `scatter.value`, `scatter_add`.
pub(crate) fn scatter(cx: &Ctx, add: bool) -> R<Tensor> {
    let x = cx.t("self")?;
    let dim = norm_dim(cx.int("dim")?, x.rank())?;
    let (src, src_shape) = scatter_src(cx, x.dtype)?;
    let pairs = scatter_pairs(&x.shape, dim, cx.t("index")?, src_shape.as_deref())?;
    let scalar = src_shape.is_none();
    let mut out = x.clone();
    for (dst, s) in pairs {
        let s = if scalar { 0 } else { s };
        if add {
            accumulate(x.dtype, &mut out.data, dst, &src.data, s);
        } else {
            out.data.set_from(dst, &src.data, s);
        }
    }
    Ok(out)
}

/// `scatter_reduce.two(self, dim, index, src, reduce, include_self)`: sum, prod, mean, amax,
/// amin. Without `include_self`, a scattered-to position starts from its first source value;
/// an integer mean rounds down.
pub(crate) fn scatter_reduce(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    let dim = norm_dim(cx.int("dim")?, x.rank())?;
    let src = cx.t("src")?.cast(x.dtype);
    let pairs = scatter_pairs(&x.shape, dim, cx.t("index")?, Some(&src.shape))?;
    let reduce = cx.str("reduce")?;
    if !matches!(reduce, "sum" | "prod" | "mean" | "amax" | "amin") {
        return Err(format!(
            "unknown reduce '{reduce}' (expected sum, prod, mean, amax or amin)"
        ));
    }
    let include = cx.bool("include_self")?;
    let mut cnt = vec![0usize; x.numel()];
    if x.dtype.is_float() {
        let (mut res, sv) = (x.f64s(), src.f64s());
        for &(dst, s) in &pairs {
            let (a, b) = (res[dst], sv[s]);
            res[dst] = if cnt[dst] == 0 && !include {
                b
            } else {
                match reduce {
                    "prod" => a * b,
                    "amax" => fmax_nan(a, b),
                    "amin" => fmin_nan(a, b),
                    _ => a + b,
                }
            };
            cnt[dst] += 1;
        }
        if reduce == "mean" {
            for (r, &c) in res.iter_mut().zip(&cnt) {
                if c > 0 {
                    *r /= (c + include as usize) as f64;
                }
            }
        }
        Ok(Tensor::from_f64s(x.dtype, x.shape.clone(), res))
    } else {
        let (mut res, sv) = (x.i64s(), src.i64s());
        for &(dst, s) in &pairs {
            let (a, b) = (res[dst], sv[s]);
            res[dst] = if cnt[dst] == 0 && !include {
                b
            } else {
                match reduce {
                    "prod" => a.wrapping_mul(b),
                    "amax" => a.max(b),
                    "amin" => a.min(b),
                    _ => a.wrapping_add(b),
                }
            };
            cnt[dst] += 1;
        }
        if reduce == "mean" {
            for (r, &c) in res.iter_mut().zip(&cnt) {
                if c > 0 {
                    *r = div_floor_i(*r, (c + include as usize) as i64)?;
                }
            }
        }
        Ok(Tensor::from_i64s(x.dtype, x.shape.clone(), res))
    }
}

/// `masked_scatter(self, mask, source)`: the positions where `mask` is true, in row-major
/// order, take consecutive elements of `source`.
pub(crate) fn masked_scatter(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    let mask = cx.t("mask")?;
    if mask.dtype != DType::Bool {
        return Err(format!("mask has dtype {}, expected bool", mask.dtype));
    }
    let m = mask.broadcast_to(&x.shape)?.bools();
    let src = cx.t("source")?.cast(x.dtype);
    let mut out = x.clone();
    let mut k = 0;
    for (i, &b) in m.iter().enumerate() {
        if b {
            if k >= src.numel() {
                return Err(format!(
                    "the mask selects more elements than source has ({})",
                    src.numel()
                ));
            }
            out.data.set_from(i, &src.data, k);
            k += 1;
        }
    }
    Ok(out)
}

/// `searchsorted(sorted_sequence, self, out_int32, right, side, sorter)`: ATen's binary search
/// of each value in the sequence row: the first position whose entry `s` has `s >= v` (`s > v`
/// on the right side), with its midpoints, so a NaN value or NaN entries land where ATen's do.
pub(crate) fn searchsorted(cx: &Ctx) -> R<Tensor> {
    let seq = cx.t("sorted_sequence")?;
    let x = cx.t("self")?;
    let right = match cx.opt_str("side")? {
        Some("right") => true,
        Some("left") => false,
        None => cx.bool("right")?,
        Some(other) => return Err(format!("side must be left or right, found '{other}'")),
    };
    let m = *seq.shape.last().unwrap_or(&1);
    let mut rows = seq.f64s();
    let ints = (!seq.dtype.is_float() && !x.dtype.is_float()).then(|| (seq.i64s(), x.i64s()));
    if let Some(sorter) = cx.opt_t("sorter")? {
        let s = sorter.i64s();
        let mut sorted = Vec::with_capacity(rows.len());
        for (k, &j) in s.iter().enumerate() {
            let j = usize::try_from(j)
                .ok()
                .filter(|&j| j < m)
                .ok_or_else(|| format!("sorter index {j} is out of range for {m} entries"))?;
            sorted.push(rows[k / m * m + j]);
        }
        rows = sorted;
    }
    let n_last = *x.shape.last().unwrap_or(&1);
    let batched = seq.rank() > 1;
    let vals = x.f64s();
    let mut out = Vec::with_capacity(vals.len());
    for (i, &v) in vals.iter().enumerate() {
        let row = if batched { i / n_last.max(1) } else { 0 };
        let r = &rows[row * m..row * m + m];
        let c = match &ints {
            // exact comparisons of integers beyond 2^53
            Some((si, xi)) if cx.opt_t("sorter")?.is_none() => {
                let (r, v) = (&si[row * m..row * m + m], xi[i]);
                bisect(m, |k| if right { r[k] > v } else { r[k] >= v })
            }
            _ => bisect(m, |k| if right { r[k] > v } else { r[k] >= v }),
        };
        out.push(c as i64);
    }
    Ok(Tensor::from_i64s(cx.out_dtype(), x.shape.clone(), out))
}

/// ATen's `cus_lower_bound`/`cus_upper_bound`: the first of `n` positions where `found` holds,
/// by bisection (positions where it does not hold move the start past the midpoint).
fn bisect(n: usize, found: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + ((hi - lo) >> 1);
        if !found(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idx(v: &[i64]) -> Tensor {
        Tensor::from_i64s(DType::I64, vec![v.len()], v.to_vec())
    }

    #[test]
    fn advanced_index_placement() {
        // x[:, [1, 0]] on [2, 3]: indexed dims stay in place.
        let (s, m) = advanced(&[2, 3], &[None, Some(&idx(&[1, 0]))], 100).unwrap();
        assert_eq!((s, m), (vec![2, 2], vec![1, 0, 4, 3]));
        // x[[0], :, [1]] on [2, 2, 2]: separated index dims go first.
        let (s, m) =
            advanced(&[2, 2, 2], &[Some(&idx(&[0])), None, Some(&idx(&[1]))], 100).unwrap();
        assert_eq!((s, m), (vec![1, 2], vec![1, 3]));
        // negative indices wrap, out-of-range ones are errors
        assert_eq!(
            advanced(&[3], &[Some(&idx(&[-1]))], 100).unwrap().1,
            vec![2]
        );
        assert!(advanced(&[3], &[Some(&idx(&[3]))], 100).is_err());
        assert!(advanced(&[3], &[None], 100).is_err());
        let mask = Tensor::from_bools(DType::Bool, vec![3], vec![true, false, true]);
        assert_eq!(
            advanced(&[3], &[Some(&mask)], 100).unwrap(),
            (vec![2], vec![0, 2])
        );
    }
}
