//! Pooling and resampling: max pooling with indices (a two-operand `reduce_window`), average
//! pooling (`reduce_window` sum and PyTorch's divisors), adaptive average pooling and
//! upsampling (separable weight matrices applied with `dot_general`), their backward ops, and
//! `grid_sampler_2d` (gathers of the corner pixels).

use super::emitter::{Em, GatherDims, Num, V};
use super::index::full_coords;
use super::{opmath, Cx, R};
use fxhlo_ir::{Arg, DType};

struct Pool {
    n: usize,
    lead: usize,
    k: Vec<i64>,
    s: Vec<i64>,
    p: Vec<i64>,
    d: Vec<i64>,
}

fn n_ints(v: Vec<i64>, n: usize) -> Vec<i64> {
    if v.len() == 1 {
        vec![v[0]; n]
    } else {
        v
    }
}

fn pool_params(cx: &Cx, x: &V) -> R<Pool> {
    let op = cx.node.op().expect("op node");
    let n = if op.aten().contains("3d") { 3 } else { 2 };
    let k = n_ints(cx.ints("kernel_size")?, n);
    let s = cx.ints("stride")?;
    let s = if s.is_empty() {
        k.clone()
    } else {
        n_ints(s, n)
    };
    let p = n_ints(cx.ints("padding")?, n);
    let d = if op.param_index("dilation").is_some() {
        n_ints(cx.ints("dilation")?, n)
    } else {
        vec![1; n]
    };
    Ok(Pool {
        n,
        lead: x.rank() - n,
        k,
        s,
        p,
        d,
    })
}

/// Window padding so that the output has `out` positions: `(p, high)` with `high >= 0`.
fn window_pads(x: &V, pl: &Pool, out: &[i64]) -> Vec<(i64, i64)> {
    let mut pads = vec![(0, 0); pl.lead];
    for i in 0..pl.n {
        let eff = pl.d[i] * (pl.k[i] - 1) + 1;
        let need = (out[pl.lead + i] - 1) * pl.s[i] + eff;
        let hi = (need - x.shape[pl.lead + i] - pl.p[i]).max(0);
        pads.push((pl.p[i], hi));
    }
    pads
}

fn full_window(pl: &Pool, v: &[i64], one: i64) -> Vec<i64> {
    let mut w = vec![one; pl.lead];
    w.extend(v);
    w
}

fn crop(em: &mut Em, v: &V, out: &[i64]) -> V {
    if v.shape == out {
        return v.clone();
    }
    em.slice(v, &vec![0; v.rank()], out, &vec![1; v.rank()])
}

/// `max_pool{2,3}d_with_indices`: values and flat indices into each input plane.
pub(crate) fn max_pool(cx: &mut Cx) -> R<Vec<V>> {
    let x = cx.t("self")?;
    let pl = pool_params(cx, &x)?;
    let os = cx.out_shape(0)?;
    let em = &mut *cx.em;
    // flat spatial index of every input element
    let mut idx: Option<V> = None;
    let mut mult = 1;
    for i in (0..pl.n).rev() {
        let io = em.iota(DType::I64, &x.shape, pl.lead + i);
        let t = if mult == 1 {
            io
        } else {
            let m = em.splat_like(&io, Num::I(mult));
            em.mul(&io, &m)
        };
        idx = Some(match idx {
            None => t,
            Some(a) => em.add(&a, &t),
        });
        mult *= x.shape[pl.lead + i];
    }
    let idx = idx.expect("pooling has spatial dims");
    let pads = window_pads(&x, &pl, &os);
    let iv = em.scalar(x.dtype, super::reduce::init_max(x.dtype, true));
    let ii = em.scalar(DType::I64, Num::I(i64::MAX));
    let float = x.dtype.is_float();
    let r = em.reduce_window(
        &[x.clone(), idx],
        &[iv, ii],
        &full_window(&pl, &pl.k, 1),
        &full_window(&pl, &pl.s, 1),
        &full_window(&pl, &pl.d, 1),
        &pads,
        |em, acc, new| {
            let (a, ai, b, bi) = (&acc[0], &acc[1], &new[0], &new[1]);
            let mut pick_a = em.compare("GT", a, b);
            if float {
                let nan = em.compare("NE", a, a);
                pick_a = em.binary("or", &pick_a, &nan);
            }
            let eq = em.compare("EQ", a, b);
            let lt = em.compare("LT", ai, bi);
            let tie = em.binary("and", &eq, &lt);
            let pick_i = em.binary("or", &pick_a, &tie);
            let v = em.select(&pick_a, a, b);
            let i = em.select(&pick_i, ai, bi);
            vec![v, i]
        },
    );
    let v = crop(em, &r[0], &os);
    let i = crop(em, &r[1], &os);
    Ok(vec![v, i])
}

/// `max_pool2d_with_indices_backward`: grads scatter-added to the recorded indices.
pub(crate) fn max_pool_backward(cx: &mut Cx) -> R<V> {
    let g = cx.t("grad_output")?;
    let x = cx.t("self")?;
    let idx = cx.t("indices")?;
    let em = &mut *cx.em;
    let n = 2;
    let lead = x.rank() - n;
    let l: i64 = x.shape[..lead].iter().product();
    let plane: i64 = x.shape[lead..].iter().product();
    let p: i64 = g.shape[lead..].iter().product();
    let cd = opmath(x.dtype);
    let gf = em.convert(&g, cd);
    let gf = em.reshape(&gf, &[l, p]);
    let i2 = em.reshape(&idx, &[l, p]);
    let c = full_coords(em, &i2, 1, 2);
    let z = em.splat(cd, &[l, plane], Num::I(0));
    let dims = super::emitter::ScatterDims {
        update_window_dims: vec![],
        inserted_window_dims: vec![0, 1],
        scatter_dims_to_operand_dims: vec![0, 1],
        index_vector_dim: 2,
    };
    let r = em.scatter(&z, &c, &gf, &dims, |em, a, b| em.add(a, b));
    let r = em.reshape(&r, &x.shape);
    Ok(em.convert(&r, x.dtype))
}

/// Per-dim divisor factors of average pooling, as PyTorch computes them.
fn avg_factors(
    input: i64,
    out: i64,
    k: i64,
    s: i64,
    p: i64,
    include_pad: bool,
) -> Vec<(i64, i64, i64)> {
    (0..out)
        .map(|o| {
            let start = o * s - p;
            let end = (start + k).min(input + p);
            let size = end - start;
            let (a, b) = (start.max(0), end.min(input));
            (a, b, if include_pad { size } else { b - a })
        })
        .collect()
}

struct AvgArgs {
    pl: Pool,
    include_pad: bool,
    divisor: Option<i64>,
}

fn avg_args(cx: &Cx, x: &V) -> R<AvgArgs> {
    Ok(AvgArgs {
        pl: pool_params(cx, x)?,
        include_pad: cx.bool("count_include_pad")?,
        divisor: cx.opt_int("divisor_override")?,
    })
}

/// The divisor of every output position (spatial dims only), as a constant.
fn divisors(a: &AvgArgs, in_sp: &[i64], out_sp: &[i64]) -> Vec<f32> {
    let f: Vec<Vec<(i64, i64, i64)>> = (0..a.pl.n)
        .map(|i| {
            avg_factors(
                in_sp[i],
                out_sp[i],
                a.pl.k[i],
                a.pl.s[i],
                a.pl.p[i],
                a.include_pad,
            )
        })
        .collect();
    let total: i64 = out_sp.iter().product();
    (0..total)
        .map(|lin| {
            if let Some(d) = a.divisor {
                return d as f32;
            }
            let mut rem = lin;
            let mut prod = 1i64;
            for i in (0..a.pl.n).rev() {
                prod *= f[i][(rem % out_sp[i]) as usize].2;
                rem /= out_sp[i];
            }
            prod as f32
        })
        .collect()
}

/// `avg_pool{2,3}d`.
pub(crate) fn avg_pool(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let a = avg_args(cx, &x)?;
    let os = cx.out_shape(0)?;
    let em = &mut *cx.em;
    let pl = &a.pl;
    let cd = opmath(x.dtype);
    let xc = em.convert(&x, cd);
    let pads = window_pads(&xc, pl, &os);
    let init = em.scalar(cd, Num::I(0));
    let r = em.reduce_window(
        std::slice::from_ref(&xc),
        &[init],
        &full_window(pl, &pl.k, 1),
        &full_window(pl, &pl.s, 1),
        &vec![1; xc.rank()],
        &pads,
        |em, acc, new| vec![em.add(&acc[0], &new[0])],
    );
    let sum = crop(em, &r[0], &os);
    let out_sp = &os[pl.lead..];
    let div = divisors(&a, &x.shape[pl.lead..], out_sp);
    let dv = em.dense_f32(out_sp, &div);
    let dv = em.convert(&dv, cd);
    let dims: Vec<usize> = (pl.lead..os.len()).collect();
    let dv = em.bcast_in_dim(&dv, &os, &dims);
    let q = em.div(&sum, &dv);
    Ok(em.convert(&q, x.dtype))
}

/// Applies the matrix `m` (`[out, in]`, row-major) along dim `dim` of `x`.
fn apply_matrix(em: &mut Em, x: &V, dim: usize, m: &[f32], out: i64) -> V {
    let inn = x.shape[dim];
    let mv = em.dense_f32(&[out, inn], m);
    let mv = em.convert(&mv, x.dtype);
    let r = em.dot_general(x, &mv, &[], &[], &[dim], &[1]);
    // result: x's other dims, then `out`; move it back to `dim`
    let rank = x.rank();
    let mut perm: Vec<usize> = (0..rank - 1).collect();
    perm.insert(dim, rank - 1);
    em.transpose(&r, &perm)
}

fn transpose_matrix(m: &[f32], out: i64, inn: i64) -> Vec<f32> {
    let mut t = vec![0f32; m.len()];
    for o in 0..out {
        for i in 0..inn {
            t[(i * out + o) as usize] = m[(o * inn + i) as usize];
        }
    }
    t
}

/// `avg_pool2d_backward`: the transpose of the (separable) pooling map.
pub(crate) fn avg_pool_backward(cx: &mut Cx) -> R<V> {
    let g = cx.t("grad_output")?;
    let x = cx.t("self")?;
    let a = avg_args(cx, &x)?;
    let em = &mut *cx.em;
    let pl = &a.pl;
    let cd = opmath(x.dtype);
    let gc = em.convert(&g, cd);
    let out_sp = g.shape[pl.lead..].to_vec();
    let in_sp = x.shape[pl.lead..].to_vec();
    let div = divisors(&a, &in_sp, &out_sp);
    let dv = em.dense_f32(&out_sp, &div);
    let dv = em.convert(&dv, cd);
    let dims: Vec<usize> = (pl.lead..g.rank()).collect();
    let dv = em.bcast_in_dim(&dv, &g.shape, &dims);
    let mut v = em.div(&gc, &dv);
    for i in 0..pl.n {
        let f = avg_factors(
            in_sp[i],
            out_sp[i],
            pl.k[i],
            pl.s[i],
            pl.p[i],
            a.include_pad,
        );
        let mut m = vec![0f32; (out_sp[i] * in_sp[i]) as usize];
        for (o, &(s, e, _)) in f.iter().enumerate() {
            for j in s..e {
                m[(o as i64 * in_sp[i] + j) as usize] = 1.0;
            }
        }
        let t = transpose_matrix(&m, out_sp[i], in_sp[i]);
        v = apply_matrix(em, &v, pl.lead + i, &t, in_sp[i]);
    }
    Ok(em.convert(&v, x.dtype))
}

fn adaptive_matrix(inn: i64, out: i64) -> R<Vec<f32>> {
    // The matrix is held in memory and then printed as a constant (each element as text, up
    // to ~16 bytes): both are checked against the allocation budget before anything is
    // allocated ([2^31, 2] asked for 32 GiB).
    let n = inn
        .checked_mul(out)
        .filter(|_| inn >= 0 && out >= 0)
        .ok_or_else(|| format!("adaptive pooling matrix {out} x {inn}: the size overflows"))?;
    fxhlo_ir::budget::check_elems(n as u64, 4 + 16, || {
        format!("the adaptive pooling matrix of {out} x {inn} elements")
    })
    .map_err(|e| e.to_string())?;
    let mut m = vec![0f32; n as usize];
    for o in 0..out {
        let s = (o * inn) / out;
        let e = ((o + 1) * inn + out - 1) / out;
        for j in s..e {
            m[(o * inn + j) as usize] = 1.0 / (e - s) as f32;
        }
    }
    Ok(m)
}

/// `_adaptive_avg_pool{2,3}d`.
pub(crate) fn adaptive_avg_pool(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let os = cx.out_shape(0)?;
    let n = cx.ints("output_size")?.len();
    let em = &mut *cx.em;
    let lead = x.rank() - n;
    let mut v = em.convert(&x, opmath(x.dtype));
    for i in 0..n {
        let m = adaptive_matrix(x.shape[lead + i], os[lead + i])?;
        v = apply_matrix(em, &v, lead + i, &m, os[lead + i]);
    }
    Ok(em.convert(&v, x.dtype))
}

/// `_adaptive_avg_pool2d_backward`.
pub(crate) fn adaptive_avg_pool_backward(cx: &mut Cx) -> R<V> {
    let g = cx.t("grad_output")?;
    let x = cx.t("self")?;
    let em = &mut *cx.em;
    let n = 2;
    let lead = x.rank() - n;
    let mut v = em.convert(&g, opmath(x.dtype));
    for i in 0..n {
        let (inn, out) = (x.shape[lead + i], g.shape[lead + i]);
        let m = adaptive_matrix(inn, out)?;
        let t = transpose_matrix(&m, out, inn);
        v = apply_matrix(em, &v, lead + i, &t, inn);
    }
    Ok(em.convert(&v, x.dtype))
}

/// `upsample_{nearest,bilinear}2d.vec`: separable interpolation matrices.
pub(crate) fn upsample(cx: &mut Cx, bilinear: bool) -> R<V> {
    let x = cx.t("input")?;
    let os = cx.out_shape(0)?;
    let align = if bilinear {
        cx.bool("align_corners")?
    } else {
        false
    };
    let scales: Option<Vec<f64>> = match cx.node.arg("scale_factors") {
        Some(Arg::Floats(f)) => Some(f.clone()),
        _ => None,
    };
    let given_size = !matches!(cx.node.arg("output_size"), Some(Arg::None) | None);
    let em = &mut *cx.em;
    let mut v = em.convert(&x, opmath(x.dtype));
    for i in 0..2 {
        let (inn, out) = (x.shape[2 + i], os[2 + i]);
        let scale_f32: f32 = match (&scales, given_size) {
            (Some(s), false) => (1.0 / s[i]) as f32,
            _ => inn as f32 / out as f32,
        };
        let mut m = vec![0f32; (out * inn) as usize];
        for o in 0..out {
            if bilinear {
                let src = if align {
                    if out > 1 {
                        o as f32 * ((inn - 1) as f32 / (out - 1) as f32)
                    } else {
                        0.0
                    }
                } else {
                    (scale_f32 * (o as f32 + 0.5) - 0.5).max(0.0)
                };
                let i0 = (src.floor() as i64).min(inn - 1);
                let i1 = if i0 < inn - 1 { i0 + 1 } else { i0 };
                let l1 = src - i0 as f32;
                let l0 = 1.0 - l1;
                m[(o * inn + i0) as usize] += l0;
                m[(o * inn + i1) as usize] += l1;
            } else {
                let src = if out == inn {
                    o
                } else {
                    ((o as f32 * scale_f32).floor() as i64).min(inn - 1)
                };
                m[(o * inn + src) as usize] = 1.0;
            }
        }
        v = apply_matrix(em, &v, 2 + i, &m, out);
    }
    Ok(em.convert(&v, x.dtype))
}

/// `grid_sampler_2d(input, grid, interpolation_mode, padding_mode, align_corners)`:
/// bilinear or nearest, with zeros or border padding.
pub(crate) fn grid_sampler_2d(cx: &mut Cx) -> R<V> {
    let x = cx.t("input")?;
    let grid = cx.t("grid")?;
    let mode = cx.int("interpolation_mode")?;
    let pad = cx.int("padding_mode")?;
    let align = cx.bool("align_corners")?;
    if mode > 1 {
        return Err("bicubic grid sampling is not lowered (only bilinear and nearest)".into());
    }
    if pad > 1 {
        return Err(
            "reflection padding of grid_sampler_2d is not lowered (only zeros and border)".into(),
        );
    }
    let os = cx.out_shape(0)?;
    let em = &mut *cx.em;
    let d = x.dtype;
    let cd = opmath(d);
    let xc = em.convert(&x, cd);
    let gc = em.convert(&grid, cd);
    let (n, c, h, w) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
    let (ho, wo) = (grid.shape[1], grid.shape[2]);
    let gs = [n, ho, wo];
    // unnormalized coordinates
    let coord = |em: &mut Em, comp: i64, size: i64| -> V {
        let s = em.slice_dim(&gc, 3, comp, comp + 1, 1);
        let s = em.reshape(&s, &gs);
        let one = em.splat_like(&s, Num::F(1.0));
        let p1 = em.add(&s, &one);
        let r = if align {
            let k = em.splat_like(&s, Num::F((size - 1) as f64 / 2.0));
            em.mul(&p1, &k)
        } else {
            let k = em.splat_like(&s, Num::F(size as f64));
            let a = em.mul(&p1, &k);
            let a = em.sub(&a, &one);
            let half = em.splat_like(&s, Num::F(0.5));
            em.mul(&a, &half)
        };
        if pad == 1 {
            let z = em.splat_like(&r, Num::F(0.0));
            let hi = em.splat_like(&r, Num::F((size - 1) as f64));
            let r = em.max(&r, &z);
            em.min(&r, &hi)
        } else {
            r
        }
    };
    let ix = coord(em, 0, w);
    let iy = coord(em, 1, h);
    // [N, H, W, C] so that a gather of (n, y, x) yields C values
    let xt = em.transpose(&xc, &[0, 2, 3, 1]);
    let bi = em.iota(DType::I64, &gs, 0);
    let sample = |em: &mut Em, yy: &V, xx: &V, wgt: Option<V>| -> V {
        let yi = em.convert(yy, DType::I64);
        let xi = em.convert(xx, DType::I64);
        let z = em.splat_like(&yi, Num::I(0));
        let hm = em.splat_like(&yi, Num::I(h - 1));
        let wm = em.splat_like(&xi, Num::I(w - 1));
        let v1 = em.compare("GE", &yi, &z);
        let v2 = em.compare("LE", &yi, &hm);
        let v3 = em.compare("GE", &xi, &z);
        let v4 = em.compare("LE", &xi, &wm);
        let a = em.binary("and", &v1, &v2);
        let b = em.binary("and", &v3, &v4);
        let valid = em.binary("and", &a, &b);
        let yc = em.max(&yi, &z);
        let yc = em.min(&yc, &hm);
        let xc2 = em.max(&xi, &z);
        let xc2 = em.min(&xc2, &wm);
        let mut s1 = gs.to_vec();
        s1.push(1);
        let parts = [
            em.reshape(&bi, &s1),
            em.reshape(&yc, &s1),
            em.reshape(&xc2, &s1),
        ];
        let coords = em.concat(&parts, 3);
        let dims = GatherDims {
            offset_dims: vec![3],
            collapsed_slice_dims: vec![0, 1, 2],
            start_index_map: vec![0, 1, 2],
            index_vector_dim: 3,
        };
        let g = em.gather(&xt, &coords, &dims, &[1, 1, 1, c], &[n, ho, wo, c]);
        let vf = em.convert(&valid, cd);
        let wv = match wgt {
            Some(wg) => em.mul(&vf, &wg),
            None => vf,
        };
        let wb = em.bcast_in_dim(&wv, &[n, ho, wo, c], &[0, 1, 2]);
        em.mul(&g, &wb)
    };
    let out = if mode == 1 {
        let rx = em.unary("round_nearest_even", &ix);
        let ry = em.unary("round_nearest_even", &iy);
        sample(em, &ry, &rx, None)
    } else {
        let x0 = em.unary("floor", &ix);
        let y0 = em.unary("floor", &iy);
        let one = em.splat_like(&x0, Num::F(1.0));
        let x1 = em.add(&x0, &one);
        let y1 = em.add(&y0, &one);
        let wx1 = em.sub(&ix, &x0);
        let wx0 = em.sub(&x1, &ix);
        let wy1 = em.sub(&iy, &y0);
        let wy0 = em.sub(&y1, &iy);
        let w00 = em.mul(&wy0, &wx0);
        let w01 = em.mul(&wy0, &wx1);
        let w10 = em.mul(&wy1, &wx0);
        let w11 = em.mul(&wy1, &wx1);
        let a = sample(em, &y0, &x0, Some(w00));
        let b = sample(em, &y0, &x1, Some(w01));
        let c2 = sample(em, &y1, &x0, Some(w10));
        let d2 = sample(em, &y1, &x1, Some(w11));
        let s = em.add(&a, &b);
        let s = em.add(&s, &c2);
        em.add(&s, &d2)
    };
    let r = em.transpose(&out, &[0, 3, 1, 2]);
    debug_assert_eq!(r.shape, os);
    Ok(em.convert(&r, d))
}
