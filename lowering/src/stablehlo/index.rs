//! Indexing: `embedding`, `index_select`, `gather`, `index.Tensor` as `stablehlo.gather`;
//! `index_put`, `scatter*`, `masked_scatter`, `embedding_dense_backward` as
//! `stablehlo.scatter`; `sort` and `topk` as `stablehlo.sort`.

use super::elementwise::floor_div;
use super::emitter::{broadcast_shape, Em, GatherDims, Num, ScatterDims, V};
use super::reduce::{init_max, prefix_sum};
use super::{norm_dim, Cx, R};
use fxhlo_ir::DType;

/// `x` indexed along `dim` by an integer tensor of any shape:
/// the result has shape `x[:dim] + idx.shape + x[dim+1:]`.
pub(crate) fn take(em: &mut Em, x: &V, dim: usize, idx: &V) -> V {
    let idx = em.convert(idx, DType::I64);
    let k = idx.rank();
    let mut is = idx.shape.clone();
    is.push(1);
    let iv = em.reshape(&idx, &is);
    let mut out: Vec<i64> = x.shape[..dim].to_vec();
    out.extend(&idx.shape);
    out.extend(&x.shape[dim + 1..]);
    let offset: Vec<i64> = (0..dim as i64)
        .chain((dim + k) as i64..out.len() as i64)
        .collect();
    let mut sizes = x.shape.clone();
    sizes[dim] = 1;
    let dims = GatherDims {
        offset_dims: offset,
        collapsed_slice_dims: vec![dim as i64],
        start_index_map: vec![dim as i64],
        index_vector_dim: k as i64,
    };
    em.gather(x, &iv, &dims, &sizes, &out)
}

/// Full coordinates `[S.., rank]` of every element of `idx` (shape `S`): its own position in
/// every dim but `dim`, where it is the index value.
pub(crate) fn full_coords(em: &mut Em, idx: &V, dim: usize, rank: usize) -> V {
    let idx = em.convert(idx, DType::I64);
    let mut s1 = idx.shape.clone();
    s1.push(1);
    let parts: Vec<V> = (0..rank)
        .map(|d| {
            let c = if d == dim {
                idx.clone()
            } else {
                em.iota(DType::I64, &idx.shape, d)
            };
            em.reshape(&c, &s1)
        })
        .collect();
    em.concat(&parts, idx.rank())
}

fn point_gather(em: &mut Em, x: &V, coords: &V) -> V {
    let r = x.rank();
    let out = coords.shape[..coords.rank() - 1].to_vec();
    let dims = GatherDims {
        offset_dims: vec![],
        collapsed_slice_dims: (0..r as i64).collect(),
        start_index_map: (0..r as i64).collect(),
        index_vector_dim: out.len() as i64,
    };
    em.gather(x, coords, &dims, &vec![1; r], &out)
}

fn point_scatter(em: &mut Em, x: &V, coords: &V, upd: &V, combine: &str) -> V {
    let r = x.rank();
    let dims = ScatterDims {
        update_window_dims: vec![],
        inserted_window_dims: (0..r as i64).collect(),
        scatter_dims_to_operand_dims: (0..r as i64).collect(),
        index_vector_dim: (coords.rank() - 1) as i64,
    };
    let upd = em.convert(upd, x.dtype);
    let combine = combine.to_string();
    em.scatter(x, coords, &upd, &dims, move |em, a, b| {
        match combine.as_str() {
            "sum" if a.dtype == DType::Bool => em.binary("or", a, b),
            "sum" => em.add(a, b),
            "prod" if a.dtype == DType::Bool => em.binary("and", a, b),
            "prod" => em.mul(a, b),
            "amax" => em.max(a, b),
            "amin" => em.min(a, b),
            _ => b.clone(),
        }
    })
}

/// `embedding(weight, indices)`.
pub(crate) fn embedding(cx: &mut Cx) -> R<V> {
    let w = cx.t("weight")?;
    let i = cx.t("indices")?;
    Ok(take(cx.em, &w, 0, &i))
}

/// `index_select(self, dim, index)`.
pub(crate) fn index_select(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let i = cx.t("index")?;
    let os = cx.out_shape(0)?;
    if x.rank() == 0 {
        return Ok(cx.em.reshape(&x, &os));
    }
    let d = norm_dim(cx.int("dim")?, x.rank())?;
    let r = take(cx.em, &x, d, &i);
    Ok(cx.em.reshape(&r, &os))
}

/// `gather(self, dim, index)`.
pub(crate) fn gather(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let i = cx.t("index")?;
    let os = cx.out_shape(0)?;
    let dim_arg = cx.int("dim");
    let em = &mut *cx.em;
    if x.rank() == 0 {
        return Ok(em.bcast_to(&x, &os));
    }
    let d = norm_dim(dim_arg?, x.rank())?;
    if i.numel() == 0 {
        return Ok(em.splat(x.dtype, &os, Num::I(0)));
    }
    let c = full_coords(em, &i, d, x.rank());
    Ok(point_gather(em, &x, &c))
}

/// Index vectors of advanced indexing: `[B.., k]`, the indexed dims, and the offset dims of the
/// result (NumPy placement: contiguous indexed dims stay in place, otherwise go first).
struct Advanced {
    coords: V,
    positions: Vec<usize>,
    offset_dims: Vec<i64>,
    out_shape: Vec<i64>,
}

fn advanced(em: &mut Em, x: &V, idx: &[Option<V>]) -> R<Advanced> {
    let mut positions = vec![];
    let mut b: Vec<i64> = vec![];
    for (d, i) in idx.iter().enumerate() {
        if let Some(i) = i {
            if i.dtype == DType::Bool || i.dtype == DType::U8 {
                return Err("boolean mask indices have a data-dependent shape".into());
            }
            b = broadcast_shape(&b, &i.shape);
            positions.push(d);
        }
    }
    if positions.is_empty() {
        return Err("index with no index tensors".into());
    }
    let mut s1 = b.clone();
    s1.push(1);
    let mut parts = vec![];
    for &d in &positions {
        let i = idx[d].as_ref().expect("present");
        let i = em.convert(i, DType::I64);
        // negative indices count from the end
        let z = em.splat_like(&i, Num::I(0));
        let neg = em.compare("LT", &i, &z);
        let n = em.splat_like(&i, Num::I(x.shape[d]));
        let w = em.add(&i, &n);
        let i = em.select(&neg, &w, &i);
        let i = em.bcast_to(&i, &b);
        parts.push(em.reshape(&i, &s1));
    }
    let coords = em.concat(&parts, b.len());
    let contiguous = positions.windows(2).all(|w| w[1] == w[0] + 1);
    let rest: Vec<usize> = (0..x.rank()).filter(|d| !positions.contains(d)).collect();
    let (out_shape, offset_dims) = if contiguous {
        let first = positions[0];
        let mut s: Vec<i64> = (0..first).map(|d| x.shape[d]).collect();
        s.extend(&b);
        s.extend(
            (first..x.rank())
                .filter(|d| !positions.contains(d))
                .map(|d| x.shape[d]),
        );
        let off: Vec<i64> = (0..first as i64)
            .chain((first + b.len()) as i64..s.len() as i64)
            .collect();
        (s, off)
    } else {
        let mut s = b.clone();
        s.extend(rest.iter().map(|&d| x.shape[d]));
        let off: Vec<i64> = (b.len() as i64..s.len() as i64).collect();
        (s, off)
    };
    Ok(Advanced {
        coords,
        positions,
        offset_dims,
        out_shape,
    })
}

/// `index.Tensor(self, indices)`.
pub(crate) fn index_tensor(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let idx = cx.ts("indices")?;
    let em = &mut *cx.em;
    let a = advanced(em, &x, &idx)?;
    let mut sizes = x.shape.clone();
    for &p in &a.positions {
        sizes[p] = 1;
    }
    let k = a.coords.rank() - 1;
    let dims = GatherDims {
        offset_dims: a.offset_dims.clone(),
        collapsed_slice_dims: a.positions.iter().map(|&p| p as i64).collect(),
        start_index_map: a.positions.iter().map(|&p| p as i64).collect(),
        index_vector_dim: k as i64,
    };
    if a.out_shape.contains(&0) {
        return Ok(em.splat(x.dtype, &a.out_shape, Num::I(0)));
    }
    Ok(em.gather(&x, &a.coords, &dims, &sizes, &a.out_shape))
}

/// `index_put(self, indices, values, accumulate)`.
pub(crate) fn index_put(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let idx = cx.ts("indices")?;
    let vals = cx.t("values")?;
    let acc = cx.bool("accumulate")?;
    let em = &mut *cx.em;
    let a = advanced(em, &x, &idx)?;
    if a.out_shape.contains(&0) {
        return Ok(x);
    }
    let v = em.convert(&vals, x.dtype);
    let v = em.bcast_to(&v, &a.out_shape);
    let dims = ScatterDims {
        update_window_dims: a.offset_dims.clone(),
        inserted_window_dims: a.positions.iter().map(|&p| p as i64).collect(),
        scatter_dims_to_operand_dims: a.positions.iter().map(|&p| p as i64).collect(),
        index_vector_dim: (a.coords.rank() - 1) as i64,
    };
    Ok(em.scatter(&x, &a.coords, &v, &dims, move |em, old, new| {
        if !acc {
            new.clone()
        } else if old.dtype == DType::Bool {
            em.binary("or", old, new)
        } else {
            em.add(old, new)
        }
    }))
}

/// `scatter.src`, `scatter.value`, `scatter_add`.
pub(crate) fn scatter(cx: &mut Cx, combine: &str) -> R<V> {
    let x = cx.t("self")?;
    let i = cx.t("index")?;
    let op = cx.node.op().expect("op node");
    let src = if op.param_index("src").is_some() {
        Some(cx.t("src")?)
    } else {
        None
    };
    let value = if op.param_index("value").is_some() {
        Some(cx.num("value")?)
    } else {
        None
    };
    let dim_arg = cx.int("dim");
    let em = &mut *cx.em;
    if x.rank() == 0 || i.numel() == 0 {
        return Ok(x);
    }
    let d = norm_dim(dim_arg?, x.rank())?;
    let upd = match (src, value) {
        (Some(s), _) => {
            let lim = i.shape.clone();
            em.slice(&s, &vec![0; s.rank()], &lim, &vec![1; s.rank()])
        }
        (None, Some(v)) => em.splat(x.dtype, &i.shape, v),
        _ => return Err("scatter needs src or value".into()),
    };
    let c = full_coords(em, &i, d, x.rank());
    Ok(point_scatter(em, &x, &c, &upd, combine))
}

/// `scatter_reduce.two(self, dim, index, src, reduce, include_self)`.
pub(crate) fn scatter_reduce(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let i = cx.t("index")?;
    let s = cx.t("src")?;
    let reduce = cx.opt_str("reduce")?.unwrap_or_default();
    let include_self = cx.bool("include_self")?;
    if !["sum", "prod", "mean", "amax", "amin"].contains(&reduce.as_str()) {
        return Err(format!("unknown reduce '{reduce}'"));
    }
    let dim_arg = cx.int("dim");
    let em = &mut *cx.em;
    if x.rank() == 0 || i.numel() == 0 {
        return Ok(x);
    }
    let d = norm_dim(dim_arg?, x.rank())?;
    let upd = em.slice(&s, &vec![0; s.rank()], &i.shape.clone(), &vec![1; s.rank()]);
    let upd = em.convert(&upd, x.dtype);
    let c = full_coords(em, &i, d, x.rank());
    let base = if include_self {
        x.clone()
    } else {
        let ident = match reduce.as_str() {
            "prod" => Num::I(1),
            "amax" => init_max(x.dtype, true),
            "amin" => init_max(x.dtype, false),
            _ => Num::I(0),
        };
        let iv = em.splat(x.dtype, &i.shape, ident);
        point_scatter(em, &x, &c, &iv, "replace")
    };
    let comb = if reduce == "mean" {
        "sum"
    } else {
        reduce.as_str()
    };
    let r = point_scatter(em, &base, &c, &upd, comb);
    if reduce != "mean" {
        return Ok(r);
    }
    let cnt0 = em.splat(x.dtype, &x.shape, Num::I(if include_self { 1 } else { 0 }));
    let ones = em.splat(x.dtype, &i.shape, Num::I(1));
    let cnt = point_scatter(em, &cnt0, &c, &ones, "sum");
    let one = em.splat_like(&cnt, Num::I(1));
    let cnt = em.max(&cnt, &one);
    let m = if x.dtype.is_float() {
        em.div(&r, &cnt)
    } else {
        floor_div(em, &r, &cnt)
    };
    Ok(m)
}

/// `masked_scatter(self, mask, source)`: the k-th true position takes `source.flatten()[k]`.
pub(crate) fn masked_scatter(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let m = cx.t("mask")?;
    let src = cx.t("source")?;
    let os = cx.out_shape(0)?;
    let em = &mut *cx.em;
    let n = x.numel();
    if n == 0 || src.numel() == 0 {
        return Ok(x);
    }
    let m = em.convert(&m, DType::Bool);
    let m = em.bcast_to(&m, &os);
    let mf = em.reshape(&m, &[n]);
    let xf = em.reshape(&x, &[n]);
    let mi = em.convert(&mf, DType::I64);
    let pos = prefix_sum(em, &mi, 0);
    let one = em.splat_like(&pos, Num::I(1));
    let pos = em.sub(&pos, &one);
    let z = em.splat_like(&pos, Num::I(0));
    let hi = em.splat_like(&pos, Num::I(src.numel() - 1));
    let pos = em.max(&pos, &z);
    let pos = em.min(&pos, &hi);
    let sf = em.reshape(&src, &[src.numel()]);
    let sf = em.convert(&sf, x.dtype);
    let g = take(em, &sf, 0, &pos);
    let r = em.select(&mf, &g, &xf);
    Ok(em.reshape(&r, &os))
}

/// Sorts `x` along `dim` with its indices (NaN largest, stable), as `(values, indices)`.
pub(crate) fn sort_with_indices(em: &mut Em, x: &V, dim: usize, descending: bool) -> (V, V) {
    let idx = em.iota(DType::I64, &x.shape, dim);
    let float = x.dtype.is_float();
    let r = em.sort(&[x.clone(), idx], dim, |em, a| {
        let (l, r) = (&a[0], &a[1]);
        let dir = if descending { "GT" } else { "LT" };
        if float {
            let canon = |em: &mut Em, v: &V| {
                let z = em.splat_like(v, Num::F(0.0));
                let isz = em.compare("EQ", v, &z);
                let v0 = em.select(&isz, &z, v);
                let nan = em.compare("NE", v, v);
                let qn = em.splat_like(v, Num::F(f64::NAN));
                em.select(&nan, &qn, &v0)
            };
            let l = canon(em, l);
            let r = canon(em, r);
            em.compare_as(dir, &l, &r, "TOTALORDER")
        } else {
            em.compare(dir, l, r)
        }
    });
    (r[0].clone(), r[1].clone())
}

/// `sort(self, dim, descending)`.
pub(crate) fn sort(cx: &mut Cx) -> R<Vec<V>> {
    let x = cx.t("self")?;
    let desc = cx.bool("descending")?;
    let dim_arg = cx.int("dim");
    let em = &mut *cx.em;
    if x.rank() == 0 {
        let z = em.scalar(DType::I64, Num::I(0));
        return Ok(vec![x, z]);
    }
    let d = norm_dim(dim_arg?, x.rank())?;
    let (v, i) = sort_with_indices(em, &x, d, desc);
    Ok(vec![v, i])
}

/// `topk(self, k, dim, largest, sorted)`: a full sort and a slice.
pub(crate) fn topk(cx: &mut Cx) -> R<Vec<V>> {
    let x = cx.t("self")?;
    let k = cx.int("k")?;
    let largest = cx.bool("largest")?;
    let dim_arg = cx.int("dim");
    let em = &mut *cx.em;
    if x.rank() == 0 {
        let z = em.scalar(DType::I64, Num::I(0));
        return Ok(vec![x, z]);
    }
    let d = norm_dim(dim_arg?, x.rank())?;
    let (v, i) = sort_with_indices(em, &x, d, largest);
    let v = em.slice_dim(&v, d, 0, k, 1);
    let i = em.slice_dim(&i, d, 0, k, 1);
    Ok(vec![v, i])
}

/// `embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq)`.
pub(crate) fn embedding_dense_backward(cx: &mut Cx) -> R<V> {
    let g = cx.t("grad_output")?;
    let i = cx.t("indices")?;
    let nw = cx.int("num_weights")?;
    let pad = cx.int("padding_idx")?;
    let freq = cx.bool("scale_grad_by_freq")?;
    let em = &mut *cx.em;
    let dd = *g.shape.last().ok_or("grad_output is 0-d")?;
    let m = i.numel();
    let cd = super::opmath(g.dtype);
    let gf = em.convert(&g, cd);
    let gf = em.reshape(&gf, &[m, dd]);
    let idx = em.convert(&i, DType::I64);
    let idx = em.reshape(&idx, &[m]);
    let mut gf = gf;
    if pad >= 0 {
        let p = em.splat_like(&idx, Num::I(pad));
        let is = em.compare("EQ", &idx, &p);
        let isb = em.bcast_in_dim(&is, &[m, dd], &[0]);
        let z = em.splat_like(&gf, Num::I(0));
        gf = em.select(&isb, &z, &gf);
    }
    let i2 = em.reshape(&idx, &[m, 1]);
    if freq {
        let zc = em.splat(cd, &[nw], Num::I(0));
        let ones = em.splat(cd, &[m], Num::I(1));
        let dims1 = ScatterDims {
            update_window_dims: vec![],
            inserted_window_dims: vec![0],
            scatter_dims_to_operand_dims: vec![0],
            index_vector_dim: 1,
        };
        let cnt = em.scatter(&zc, &i2, &ones, &dims1, |em, a, b| em.add(a, b));
        let per = take(em, &cnt, 0, &idx);
        let perb = em.bcast_in_dim(&per, &[m, dd], &[0]);
        gf = em.div(&gf, &perb);
    }
    let z = em.splat(cd, &[nw, dd], Num::I(0));
    let dims = ScatterDims {
        update_window_dims: vec![1],
        inserted_window_dims: vec![0],
        scatter_dims_to_operand_dims: vec![0],
        index_vector_dim: 1,
    };
    let r = em.scatter(&z, &i2, &gf, &dims, |em, a, b| em.add(a, b));
    Ok(em.convert(&r, g.dtype))
}

/// `searchsorted(sorted_sequence, self, out_int32, right, side, sorter)`: per value, the count
/// of sequence entries `s` of its row with `s < v` (`s <= v` on the right side; all of them for
/// a NaN value), compared in the promoted dtype: ATen's binary search on rows without NaN (a
/// row with NaN entries may differ, where the bisection's midpoints meet them).
pub(crate) fn searchsorted(cx: &mut Cx) -> R<V> {
    let seq = cx.t("sorted_sequence")?;
    let x = cx.t("self")?;
    let right = match cx.opt_str("side")?.as_deref() {
        Some("right") => true,
        Some("left") => false,
        None => cx.bool("right")?,
        Some(other) => return Err(format!("side must be left or right, found '{other}'")),
    };
    let sorter = match cx.node.arg("sorter") {
        Some(fxhlo_ir::Arg::Tensor(_)) => Some(cx.t("sorter")?),
        _ => None,
    };
    let od = cx.out_dtype(0);
    let em = &mut *cx.em;
    let cd = fxhlo_ir::infer::promote_tensors(&[
        &fxhlo_ir::TensorType::new(seq.dtype, &seq.shape),
        &fxhlo_ir::TensorType::new(x.dtype, &x.shape),
    ]);
    let mut seq = em.convert(&seq, cd);
    let x = em.convert(&x, cd);
    let m = *seq.shape.last().unwrap_or(&1);
    if let Some(s) = sorter {
        // seq[..., sorter[..., j]]: a gather along the last dim
        let r = seq.rank();
        let lead = seq.shape[..r - 1].to_vec();
        let rows: i64 = lead.iter().product();
        let flat = em.reshape(&seq, &[rows, m]);
        let si = em.convert(&s, DType::I64);
        let si = em.reshape(&si, &[rows, m]);
        let ri = em.iota(DType::I64, &[rows, m], 0);
        let ri = em.reshape(&ri, &[rows, m, 1]);
        let ci = em.reshape(&si, &[rows, m, 1]);
        let idx = em.concat(&[ri, ci], 2);
        let g = em.gather(
            &flat,
            &idx,
            &GatherDims {
                offset_dims: vec![],
                collapsed_slice_dims: vec![0, 1],
                start_index_map: vec![0, 1],
                index_vector_dim: 2,
            },
            &[1, 1],
            &[rows, m],
        );
        seq = em.reshape(&g, &s.shape);
    }
    let (vx, vs, red) = if seq.rank() == 1 {
        // every value against the one sequence
        let n = x.numel();
        let xf = em.reshape(&x, &[n]);
        let vx = em.bcast_in_dim(&xf, &[n, m], &[0]);
        let vs = em.bcast_in_dim(&seq, &[n, m], &[1]);
        (vx, vs, vec![n])
    } else {
        let r = x.rank();
        let mut full = x.shape.clone();
        full.push(m);
        let lead: Vec<usize> = (0..r - 1).collect();
        let mut dx = lead.clone();
        dx.push(r - 1);
        let mut ds = lead;
        ds.push(r);
        let vx = em.bcast_in_dim(&x, &full, &dx);
        let vs = em.bcast_in_dim(&seq, &full, &ds);
        (vx, vs, x.shape.clone())
    };
    let c = em.compare(if right { "LE" } else { "LT" }, &vs, &vx);
    let nan = em.compare("NE", &vx, &vx);
    let c = em.binary("or", &c, &nan);
    let c = em.convert(&c, DType::I64);
    let zero = em.scalar(DType::I64, Num::I(0));
    let last = c.rank() - 1;
    let cnt = em.reduce1(&c, &zero, &[last], "add");
    let cnt = em.reshape(&cnt, &red);
    let cnt = em.reshape(&cnt, &x.shape);
    Ok(em.convert(&cnt, od))
}
