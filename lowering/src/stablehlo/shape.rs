//! Shape and data-movement ops: views, permutes, slices, concatenation, padding, repeats,
//! diagonals, `as_strided` and the `*_scatter` ops that write into a slice.

use super::emitter::{Em, GatherDims, Num, V};
use super::{norm_dim, Cx, R};
use fxhlo_ir::infer::slice_bounds;
use fxhlo_ir::DType;

/// `view`, `unsqueeze`, `squeeze`: a reshape to the result shape.
pub(crate) fn view(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let s = cx.out_shape(0)?;
    Ok(cx.em.reshape(&x, &s))
}

/// `permute(self, dims)`.
pub(crate) fn permute(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let dims = cx.ints("dims")?;
    let perm = dims
        .iter()
        .map(|&d| norm_dim(d, x.rank()))
        .collect::<R<Vec<_>>>()?;
    Ok(cx.em.transpose(&x, &perm))
}

/// `expand(self, size)`.
pub(crate) fn expand(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let s = cx.out_shape(0)?;
    Ok(cx.em.bcast_to(&x, &s))
}

/// `slice(self, dim, start, end, step)`.
pub(crate) fn slice(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let d = norm_dim(cx.int("dim")?, x.rank())?;
    let step = cx.int("step")?;
    let (s, e, _) = slice_bounds(x.shape[d], cx.opt_int("start")?, cx.opt_int("end")?, step);
    Ok(cx.em.slice_dim(&x, d, s, e, step))
}

/// `select(self, dim, index)`.
pub(crate) fn select(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let d = norm_dim(cx.int("dim")?, x.rank())?;
    let mut i = cx.int("index")?;
    if i < 0 {
        i += x.shape[d];
    }
    let os = cx.out_shape(0)?;
    let s = cx.em.slice_dim(&x, d, i, i + 1, 1);
    Ok(cx.em.reshape(&s, &os))
}

/// `cat(tensors, dim)`: 1-d empty tensors are skipped, as in PyTorch.
pub(crate) fn cat(cx: &mut Cx) -> R<V> {
    let ts: Vec<V> = cx.ts("tensors")?.into_iter().flatten().collect();
    let od = cx.out_dtype(0);
    let os = cx.out_shape(0)?;
    let rank = os.len();
    let d = norm_dim(cx.int("dim")?, rank)?;
    let em = &mut *cx.em;
    let parts: Vec<V> = ts
        .iter()
        .filter(|t| !(t.rank() == 1 && t.shape[0] == 0 && rank != 1) && t.rank() == rank)
        .map(|t| em.convert(t, od))
        .collect();
    if parts.is_empty() {
        return Ok(em.splat(od, &os, Num::I(0)));
    }
    Ok(em.concat(&parts, d))
}

/// `split_with_sizes(self, split_sizes, dim)`.
pub(crate) fn split_with_sizes(cx: &mut Cx) -> R<Vec<V>> {
    let x = cx.t("self")?;
    let d = norm_dim(cx.int("dim")?, x.rank())?;
    let sizes = cx.ints("split_sizes")?;
    let mut at = 0;
    let mut out = vec![];
    for s in sizes {
        out.push(cx.em.slice_dim(&x, d, at, at + s, 1));
        at += s;
    }
    Ok(out)
}

/// `repeat(self, repeats)`: broadcast into interleaved dims, then reshape.
pub(crate) fn repeat(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let reps = cx.ints("repeats")?;
    let os = cx.out_shape(0)?;
    let em = &mut *cx.em;
    let lead = reps.len() - x.rank();
    let mut xs = vec![1; lead];
    xs.extend(&x.shape);
    let x = em.reshape(&x, &xs);
    let mut big = vec![];
    let mut dims = vec![];
    for (i, (&r, &s)) in reps.iter().zip(&xs).enumerate() {
        big.push(r);
        big.push(s);
        dims.push(2 * i + 1);
    }
    let b = em.bcast_in_dim(&x, &big, &dims);
    Ok(em.reshape(&b, &os))
}

/// `constant_pad_nd(self, pad, value)`: pairs from the last dim; negative pads crop.
pub(crate) fn constant_pad(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let pad = cx.ints("pad")?;
    let value = cx.num("value")?;
    let em = &mut *cx.em;
    let r = x.rank();
    let mut low = vec![0; r];
    let mut high = vec![0; r];
    for (i, p) in pad.chunks(2).enumerate() {
        low[r - 1 - i] = p[0];
        high[r - 1 - i] = p[1];
    }
    let v = em.scalar(x.dtype, value);
    Ok(em.pad(&x, &v, &low, &high, &vec![0; r]))
}

/// Reflection (`reflect`) or replication padding.
pub(crate) fn edge_pad(cx: &mut Cx, reflect: bool) -> R<V> {
    let x = cx.t("self")?;
    let pad = cx.ints("padding")?;
    let em = &mut *cx.em;
    let r = x.rank();
    let mut v = x;
    for (i, p) in pad.chunks(2).enumerate() {
        let d = r - 1 - i;
        let n = v.shape[d];
        let (l, h) = (p[0], p[1]);
        let mut parts = vec![];
        if l > 0 {
            let s = if reflect {
                let s = em.slice_dim(&v, d, 1, l + 1, 1);
                em.reverse(&s, &[d])
            } else {
                let s = em.slice_dim(&v, d, 0, 1, 1);
                let mut sh = s.shape.clone();
                sh[d] = l;
                em.bcast_to(&s, &sh)
            };
            parts.push(s);
        }
        let lo = (-l).max(0);
        let hi = n - (-h).max(0);
        parts.push(em.slice_dim(&v, d, lo, hi, 1));
        if h > 0 {
            let s = if reflect {
                let s = em.slice_dim(&v, d, n - 1 - h, n - 1, 1);
                em.reverse(&s, &[d])
            } else {
                let s = em.slice_dim(&v, d, n - 1, n, 1);
                let mut sh = s.shape.clone();
                sh[d] = h;
                em.bcast_to(&s, &sh)
            };
            parts.push(s);
        }
        v = em.concat(&parts, d);
    }
    Ok(v)
}

/// `diagonal(self, offset, dim1, dim2)`: move the two dims last, flatten them, strided slice.
pub(crate) fn diagonal(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let d1 = norm_dim(cx.int("dim1")?, x.rank())?;
    let d2 = norm_dim(cx.int("dim2")?, x.rank())?;
    let off = cx.int("offset")?;
    let os = cx.out_shape(0)?;
    let em = &mut *cx.em;
    let mut perm: Vec<usize> = (0..x.rank()).filter(|&d| d != d1 && d != d2).collect();
    perm.push(d1);
    perm.push(d2);
    let t = em.transpose(&x, &perm);
    let (n1, n2) = (x.shape[d1], x.shape[d2]);
    let mut flat: Vec<i64> = t.shape[..t.rank() - 2].to_vec();
    flat.push(n1 * n2);
    let f = em.reshape(&t, &flat);
    let len = *os.last().expect("diagonal has a last dim");
    let last = flat.len() - 1;
    if len == 0 {
        return Ok(em.splat(x.dtype, &os, Num::I(0)));
    }
    let start = if off >= 0 { off } else { -off * n2 };
    let stride = n2 + 1;
    Ok(em.slice_dim(&f, last, start, start + (len - 1) * stride + 1, stride))
}

/// Gathers `x_flat[idx]` for a constant index tensor of any shape.
pub(crate) fn take_flat(em: &mut Em, x: &V, idx: &[i64], shape: &[i64]) -> V {
    let n = x.numel();
    let flat = em.reshape(x, &[n]);
    let mut ishape = shape.to_vec();
    ishape.push(1);
    let iv = em.dense_i64(&ishape, idx);
    let dims = GatherDims {
        offset_dims: vec![],
        collapsed_slice_dims: vec![0],
        start_index_map: vec![0],
        index_vector_dim: shape.len() as i64,
    };
    em.gather(&flat, &iv, &dims, &[1], shape)
}

/// `as_strided(self, size, stride, storage_offset)` over the contiguous input.
pub(crate) fn as_strided(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let size = cx.ints("size")?;
    let stride = cx.ints("stride")?;
    let off = cx.opt_int("storage_offset")?.unwrap_or(0);
    let total: i64 = size.iter().product();
    let mut idx = Vec::with_capacity(total.max(0) as usize);
    for lin in 0..total {
        let mut rem = lin;
        let mut at = off;
        for d in (0..size.len()).rev() {
            at += (rem % size[d]) * stride[d];
            rem /= size[d];
        }
        if at < 0 || at >= x.numel() {
            return Err(format!(
                "as_strided reads element {at}, outside the {} elements of the input",
                x.numel()
            ));
        }
        idx.push(at);
    }
    if total == 0 {
        return Ok(cx.em.splat(x.dtype, &size, Num::I(0)));
    }
    Ok(take_flat(cx.em, &x, &idx, &size))
}

/// `flip(self, dims)`.
pub(crate) fn flip(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let mut dims = cx
        .ints("dims")?
        .iter()
        .map(|&d| norm_dim(d, x.rank()))
        .collect::<R<Vec<_>>>()?;
    dims.sort();
    dims.dedup();
    if x.rank() == 0 {
        return Ok(x);
    }
    Ok(cx.em.reverse(&x, &dims))
}

/// Writes `src` into `x` at `start, start + step, ...` along `dim` (a padded `src` and a mask).
pub(crate) fn write_slice(em: &mut Em, x: &V, src: &V, dim: usize, start: i64, step: i64) -> V {
    let len = src.shape[dim];
    if len == 0 {
        return x.clone();
    }
    let n = x.shape[dim];
    let r = x.rank();
    let src = em.convert(src, x.dtype);
    let pv = em.scalar(x.dtype, Num::I(0));
    let mut low = vec![0; r];
    let mut high = vec![0; r];
    let mut interior = vec![0; r];
    low[dim] = start;
    high[dim] = n - start - (len - 1) * step - 1;
    interior[dim] = step - 1;
    let padded = em.pad(&src, &pv, &low, &high, &interior);
    let io = em.iota(DType::I64, &x.shape, dim);
    let s = em.splat(DType::I64, &x.shape, Num::I(start));
    let e = em.splat(DType::I64, &x.shape, Num::I(start + (len - 1) * step + 1));
    let ge = em.compare("GE", &io, &s);
    let lt = em.compare("LT", &io, &e);
    let mut m = em.binary("and", &ge, &lt);
    if step > 1 {
        let rel = em.sub(&io, &s);
        let st = em.splat(DType::I64, &x.shape, Num::I(step));
        let md = em.binary("remainder", &rel, &st);
        let z = em.splat(DType::I64, &x.shape, Num::I(0));
        let on = em.compare("EQ", &md, &z);
        m = em.binary("and", &m, &on);
    }
    em.select(&m, &padded, x)
}

/// `slice_scatter(self, src, dim, start, end, step)`.
pub(crate) fn slice_scatter(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let src = cx.t("src")?;
    let d = norm_dim(cx.int("dim")?, x.rank())?;
    let step = cx.int("step")?;
    let (s, _, _) = slice_bounds(x.shape[d], cx.opt_int("start")?, cx.opt_int("end")?, step);
    Ok(write_slice(cx.em, &x, &src, d, s, step))
}

/// `select_scatter(self, src, dim, index)`.
pub(crate) fn select_scatter(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let src = cx.t("src")?;
    let d = norm_dim(cx.int("dim")?, x.rank())?;
    let mut i = cx.int("index")?;
    if i < 0 {
        i += x.shape[d];
    }
    let mut s = x.shape.clone();
    s[d] = 1;
    let src = cx.em.reshape(&src, &s);
    Ok(write_slice(cx.em, &x, &src, d, i, 1))
}

/// `unfold(self, dimension, size, step)`: one strided slice per window offset, stacked along a
/// new last dimension.
pub(crate) fn unfold(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let (size, step) = (cx.int("size")?, cx.int("step")?);
    let dim_arg = cx.int("dimension")?;
    let out = cx.out_shape(0)?;
    let em = &mut *cx.em;
    if out.contains(&0) {
        return Ok(em.splat(x.dtype, &out, Num::I(0)));
    }
    let (x, d) = if x.rank() == 0 {
        (em.reshape(&x, &[1]), 0)
    } else {
        (x.clone(), norm_dim(dim_arg, x.rank())?)
    };
    let nw = if out.len() > 1 { out[d] } else { 1 };
    let mut win_shape = x.shape.clone();
    win_shape[d] = nw;
    win_shape.push(1);
    let parts: Vec<V> = (0..size)
        .map(|j| {
            let s = em.slice_dim(&x, d, j, j + (nw - 1) * step + 1, step);
            em.reshape(&s, &win_shape)
        })
        .collect();
    let r = em.concat(&parts, win_shape.len() - 1);
    Ok(em.reshape(&r, &out))
}
