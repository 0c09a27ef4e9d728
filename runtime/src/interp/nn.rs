//! Neural-network ops: convolution, pooling, normalization, upsampling, `grid_sampler_2d`,
//! `col2im`. Spatial ops work on up to three spatial dimensions (1-d and 2-d problems get unit
//! leading spatial dimensions) and compute in `f64`.

use super::shape::ints_arg;
use super::tensor::{lanes, numel, Tensor, R};
use super::{to_usize, Ctx};
use fxhlo_ir::{DType, Op};

/// Geometry of a convolution (or transposed convolution), spatial dims padded to three.
pub(crate) struct ConvGeom {
    pub n: usize,
    pub groups: usize,
    /// Channels of the op's input.
    pub cin: usize,
    /// Channels of the op's output.
    pub cout: usize,
    pub xs: [usize; 3],
    pub ys: [usize; 3],
    pub ks: [usize; 3],
    pub stride: [i64; 3],
    pub pad: [i64; 3],
    pub dil: [i64; 3],
    pub transposed: bool,
    /// Output shape as the op gives it (N, C, spatial...).
    pub out_shape: Vec<usize>,
}

fn pad3<T: Copy>(v: &[T], fill: T) -> [T; 3] {
    let mut a = [fill; 3];
    let off = 3 - v.len();
    a[off..].copy_from_slice(v);
    a
}

/// Fails if any window parameter is beyond 2^31 in magnitude (no real model comes close, and
/// the bound keeps every later index computation far from overflow).
pub(crate) fn check_window_params(groups: &[&[i64]]) -> R<()> {
    for g in groups {
        if let Some(v) = g.iter().find(|v| v.unsigned_abs() > 1 << 31) {
            return Err(format!("window parameter {v} is too large"));
        }
    }
    Ok(())
}

/// Validates and computes the geometry of `convolution(input, weight, ...)`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv_geom(
    x: &[usize],
    w: &[usize],
    stride: &[i64],
    padding: &[i64],
    dilation: &[i64],
    transposed: bool,
    output_padding: &[i64],
    groups: i64,
) -> R<ConvGeom> {
    if x.len() < 3 || x.len() > 5 || w.len() != x.len() {
        return Err(format!(
            "input {x:?} and weight {w:?} must both be (N, C, spatial...) with 1 to 3 spatial dimensions"
        ));
    }
    let ns = x.len() - 2;
    let sx = |v: &[i64], what: &str| super::ints_n(v, ns, what);
    let (stride, padding, dilation) = (
        sx(stride, "stride")?,
        sx(padding, "padding")?,
        sx(dilation, "dilation")?,
    );
    let op = if transposed {
        sx(output_padding, "output_padding")?
    } else {
        vec![0; ns]
    };
    check_window_params(&[&stride, &padding, &dilation, &op])?;
    if stride.iter().any(|&s| s <= 0) || dilation.iter().any(|&d| d <= 0) {
        return Err(format!(
            "stride {stride:?} and dilation {dilation:?} must be positive"
        ));
    }
    if padding.iter().any(|&p| p < 0) || op.iter().any(|&p| p < 0) {
        return Err(format!(
            "padding {padding:?} and output_padding {op:?} must be non-negative"
        ));
    }
    let g = to_usize(groups, "groups")?;
    if g == 0 {
        return Err("groups must be positive".into());
    }
    let (cin, cout) = if transposed {
        if x[1] != w[0] || !x[1].is_multiple_of(g) {
            return Err(format!(
                "input has {} channels, but transposed weight {w:?} with groups={g} expects {}",
                x[1], w[0]
            ));
        }
        (x[1], w[1] * g)
    } else {
        if x[1] != w[1] * g || !w[0].is_multiple_of(g) {
            return Err(format!(
                "input has {} channels, but weight {w:?} with groups={g} expects {}",
                x[1],
                w[1] * g
            ));
        }
        (x[1], w[0])
    };
    let mut ys = vec![];
    for i in 0..ns {
        let (n, k) = (x[2 + i] as i64, w[2 + i] as i64);
        let span = dilation[i] * (k - 1);
        let o = if transposed {
            (n - 1) * stride[i] - 2 * padding[i] + span + op[i] + 1
        } else {
            let e = n + 2 * padding[i] - span - 1;
            if e < 0 {
                return Err(format!(
                    "kernel of size {} (dilated {}) is larger than the padded input size {}",
                    k,
                    span + 1,
                    n + 2 * padding[i]
                ));
            }
            e / stride[i] + 1
        };
        ys.push(to_usize(o, "an output size")?);
    }
    let mut out_shape = vec![x[0], cout];
    out_shape.extend(&ys);
    Ok(ConvGeom {
        n: x[0],
        groups: g,
        cin,
        cout,
        xs: pad3(&x[2..], 1),
        ys: pad3(&ys, 1),
        ks: pad3(&w[2..], 1),
        stride: pad3(&stride, 1),
        pad: pad3(&padding, 0),
        dil: pad3(&dilation, 1),
        transposed,
        out_shape,
    })
}

/// Spatial taps `(small, kernel, big)` of flat spatial indices: the "small" side is iterated
/// (the output of a convolution, the input of a transposed one) and the "big" position is
/// `small * stride - pad + k * dilation`, kept when in range.
fn spatial_taps(g: &ConvGeom) -> Vec<(usize, usize, usize)> {
    let (small, big) = if g.transposed {
        (g.xs, g.ys)
    } else {
        (g.ys, g.xs)
    };
    let k = g.ks;
    let mut taps = vec![];
    let pos = |a: usize, kk: usize, j: usize| -> Option<usize> {
        let b = a as i64 * g.stride[j] - g.pad[j] + kk as i64 * g.dil[j];
        (b >= 0 && (b as usize) < big[j]).then_some(b as usize)
    };
    for a0 in 0..small[0] {
        for k0 in 0..k[0] {
            let Some(b0) = pos(a0, k0, 0) else { continue };
            for a1 in 0..small[1] {
                for k1 in 0..k[1] {
                    let Some(b1) = pos(a1, k1, 1) else { continue };
                    for a2 in 0..small[2] {
                        for k2 in 0..k[2] {
                            let Some(b2) = pos(a2, k2, 2) else { continue };
                            taps.push((
                                (a0 * small[1] + a1) * small[2] + a2,
                                (k0 * k[1] + k1) * k[2] + k2,
                                (b0 * big[1] + b1) * big[2] + b2,
                            ));
                        }
                    }
                }
            }
        }
    }
    taps
}

/// Calls `f(x_index, w_index, y_index)` for every multiply-accumulate of the convolution
/// `y[y_index] += x[x_index] * w[w_index]`; forward and backward ops all derive from this.
pub(crate) fn for_each_mac(
    cx: &Ctx,
    g: &ConvGeom,
    mut f: impl FnMut(usize, usize, usize),
) -> R<()> {
    let small = if g.transposed { g.xs } else { g.ys };
    cx.check_size(
        numel(&small).saturating_mul(numel(&g.ks)),
        "the convolution's tap list",
    )?;
    let taps = spatial_taps(g);
    let (xsp, ysp, ksp) = (numel(&g.xs), numel(&g.ys), numel(&g.ks));
    let (cin_g, cout_g) = (g.cin / g.groups, g.cout / g.groups);
    for n in 0..g.n {
        for grp in 0..g.groups {
            for ci in 0..cin_g {
                for co in 0..cout_g {
                    let (c, oc) = (grp * cin_g + ci, grp * cout_g + co);
                    let xb = (n * g.cin + c) * xsp;
                    let yb = (n * g.cout + oc) * ysp;
                    let wb = if g.transposed {
                        (c * cout_g + co) * ksp
                    } else {
                        (oc * cin_g + ci) * ksp
                    };
                    for &(a, k, b) in &taps {
                        if g.transposed {
                            f(xb + a, wb + k, yb + b);
                        } else {
                            f(xb + b, wb + k, yb + a);
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// The geometry of a convolution-like node from its arguments.
pub(crate) fn conv_geom_of(cx: &Ctx, x: &[usize], w: &[usize]) -> R<ConvGeom> {
    conv_geom(
        x,
        w,
        &cx.ints("stride")?,
        &cx.ints("padding")?,
        &cx.ints("dilation")?,
        cx.bool("transposed")?,
        &cx.ints("output_padding")?,
        cx.int("groups")?,
    )
}

/// `convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,
/// groups)`: N-d, grouped, dilated, optionally transposed.
pub(crate) fn convolution(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("input")?;
    let w = cx.t("weight")?;
    let g = conv_geom_of(cx, &x.shape, &w.shape)?;
    let (xv, wv) = (x.f64s(), w.f64s());
    let mut y = vec![0.0; numel(&g.out_shape)];
    for_each_mac(cx, &g, |xi, wi, yi| y[yi] += xv[xi] * wv[wi])?;
    if let Some(b) = cx.opt_t("bias")? {
        if b.shape != [g.cout] {
            return Err(format!(
                "bias has shape {:?}, expected [{}]",
                b.shape, g.cout
            ));
        }
        let bv = b.f64s();
        let ysp = numel(&g.ys);
        for (i, v) in y.iter_mut().enumerate() {
            *v += bv[(i / ysp) % g.cout];
        }
    }
    Ok(Tensor::from_f64s(cx.out_dtype(), g.out_shape, y))
}

/// Geometry of a pooling op over the last 2 or 3 dimensions.
pub(crate) struct PoolGeom {
    /// Number of independent planes (product of the leading dimensions).
    pub planes: usize,
    pub xs: [usize; 3],
    pub ys: [usize; 3],
    pub k: [i64; 3],
    pub s: [i64; 3],
    pub p: [i64; 3],
    pub d: [i64; 3],
    pub out_shape: Vec<usize>,
}

/// PyTorch's `pooling_output_shape`.
fn pool_out(n: i64, k: i64, s: i64, p: i64, d: i64, ceil: bool) -> R<i64> {
    let num = n + 2 * p - d * (k - 1) - 1 + if ceil { s - 1 } else { 0 };
    let mut out = num.div_euclid(s) + 1;
    if ceil && (out - 1) * s >= n + p {
        out -= 1;
    }
    if out < 1 {
        return Err(format!(
            "pooling window {k} (dilation {d}, padding {p}) does not fit the input size {n}"
        ));
    }
    Ok(out)
}

/// Validates pooling arguments (`kernel_size`, `stride` (empty: the kernel), `padding`, and
/// `dilation` when the op has it) against input shape `x`.
pub(crate) fn pool_geom(cx: &Ctx, x: &[usize], ns: usize) -> R<PoolGeom> {
    if x.len() != ns + 1 && x.len() != ns + 2 {
        return Err(format!(
            "input has shape {x:?}, expected {} or {} dimensions",
            ns + 1,
            ns + 2
        ));
    }
    let k = ints_arg(cx, "kernel_size", ns)?;
    let s = cx.ints("stride")?;
    let s = if s.is_empty() {
        k.clone()
    } else {
        super::ints_n(&s, ns, "stride")?
    };
    let p = ints_arg(cx, "padding", ns)?;
    let d = if cx.has("dilation") {
        ints_arg(cx, "dilation", ns)?
    } else {
        vec![1; ns]
    };
    let ceil = cx.bool("ceil_mode")?;
    check_window_params(&[&k, &s, &p, &d])?;
    let lead = x.len() - ns;
    let mut out_shape = x[..lead].to_vec();
    let mut ys = vec![];
    for i in 0..ns {
        if k[i] <= 0 || s[i] <= 0 || d[i] <= 0 || p[i] < 0 {
            return Err(format!(
                "kernel {k:?}, stride {s:?} and dilation {d:?} must be positive and padding {p:?} non-negative"
            ));
        }
        if p[i] > (d[i] * (k[i] - 1) + 1) / 2 {
            return Err(format!(
                "padding {} must be at most half the kernel size {}",
                p[i], k[i]
            ));
        }
        let o = pool_out(x[lead + i] as i64, k[i], s[i], p[i], d[i], ceil)?;
        ys.push(o as usize);
    }
    out_shape.extend(&ys);
    Ok(PoolGeom {
        planes: numel(&x[..lead]),
        xs: pad3(&x[lead..], 1),
        ys: pad3(&ys, 1),
        k: pad3(&k, 1),
        s: pad3(&s, 1),
        p: pad3(&p, 0),
        d: pad3(&d, 1),
        out_shape,
    })
}

fn spatial_dims(op: Op) -> usize {
    match op {
        Op::MaxPool3dWithIndices | Op::AvgPool3d | Op::AdaptiveAvgPool3d => 3,
        _ => 2,
    }
}

/// For each plane and output position, the flat in-plane index of the maximum (as torch's CPU
/// kernel: padding counts as -inf, the first maximum wins, and any NaN wins over numbers).
pub(crate) fn max_pool_argmax(g: &PoolGeom, v: &[f64]) -> (Vec<f64>, Vec<i64>) {
    let (xsp, ysp) = (numel(&g.xs), numel(&g.ys));
    let mut vals = Vec::with_capacity(g.planes * ysp);
    let mut idx = Vec::with_capacity(g.planes * ysp);
    for pl in 0..g.planes {
        let base = pl * xsp;
        for o0 in 0..g.ys[0] {
            for o1 in 0..g.ys[1] {
                for o2 in 0..g.ys[2] {
                    let o = [o0, o1, o2];
                    let mut start = [0i64; 3];
                    let mut end = [0i64; 3];
                    for j in 0..3 {
                        let s = o[j] as i64 * g.s[j] - g.p[j];
                        end[j] = (s + (g.k[j] - 1) * g.d[j] + 1).min(g.xs[j] as i64);
                        let mut s = s;
                        while s < 0 {
                            s += g.d[j];
                        }
                        start[j] = s;
                    }
                    let flat = |i: [i64; 3]| (i[0] * g.xs[1] as i64 + i[1]) * g.xs[2] as i64 + i[2];
                    let mut best = flat(start);
                    let mut m = f64::NEG_INFINITY;
                    let mut i0 = start[0];
                    while i0 < end[0] {
                        let mut i1 = start[1];
                        while i1 < end[1] {
                            let mut i2 = start[2];
                            while i2 < end[2] {
                                let f = flat([i0, i1, i2]);
                                let val = v[base + f as usize];
                                if val > m || val.is_nan() {
                                    m = val;
                                    best = f;
                                }
                                i2 += g.d[2];
                            }
                            i1 += g.d[1];
                        }
                        i0 += g.d[0];
                    }
                    vals.push(m);
                    idx.push(best);
                }
            }
        }
    }
    (vals, idx)
}

/// `max_pool{2,3}d_with_indices`: values and flat indices into each input plane.
pub(crate) fn max_pool_with_indices(cx: &Ctx) -> R<Vec<Tensor>> {
    let x = cx.t("self")?;
    let g = pool_geom(cx, &x.shape, spatial_dims(cx.op()))?;
    let (vals, idx) = max_pool_argmax(&g, &x.f64s());
    Ok(vec![
        Tensor::from_f64s(x.dtype, g.out_shape.clone(), vals),
        Tensor::from_i64s(DType::I64, g.out_shape, idx),
    ])
}

/// One average-pooling window: the clipped `[start, end)` per dimension and the divisor.
pub(crate) struct AvgWindow {
    pub start: [usize; 3],
    pub end: [usize; 3],
    pub divisor: f64,
}

/// The window of output position `o`, as torch's CPU `avg_pool{2,3}d`.
pub(crate) fn avg_window(
    g: &PoolGeom,
    o: [usize; 3],
    count_include_pad: bool,
    divisor_override: Option<i64>,
) -> AvgWindow {
    let mut start = [0usize; 3];
    let mut end = [0usize; 3];
    let mut pool_size = 1i64;
    let mut count = 1i64;
    for j in 0..3 {
        let s = o[j] as i64 * g.s[j] - g.p[j];
        let e = (s + g.k[j]).min(g.xs[j] as i64 + g.p[j]);
        pool_size *= e - s;
        let (s, e) = (s.max(0), e.min(g.xs[j] as i64));
        count *= (e - s).max(0);
        start[j] = s as usize;
        end[j] = e.max(s) as usize;
    }
    let divisor = match divisor_override {
        Some(d) => d as f64,
        None if count_include_pad => pool_size as f64,
        None => count as f64,
    };
    AvgWindow {
        start,
        end,
        divisor,
    }
}

/// `divisor_override`, refusing zero.
pub(crate) fn divisor_override(cx: &Ctx) -> R<Option<i64>> {
    let d = cx.opt_int("divisor_override")?;
    if d == Some(0) {
        return Err("divisor_override must not be zero".into());
    }
    Ok(d)
}

/// `avg_pool{2,3}d(self, kernel_size, stride, padding, ceil_mode, count_include_pad,
/// divisor_override)`.
pub(crate) fn avg_pool(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    let g = pool_geom(cx, &x.shape, spatial_dims(cx.op()))?;
    let cip = cx.bool("count_include_pad")?;
    let dov = divisor_override(cx)?;
    let v = x.f64s();
    let xsp = numel(&g.xs);
    let mut out = Vec::with_capacity(numel(&g.out_shape));
    for pl in 0..g.planes {
        for o0 in 0..g.ys[0] {
            for o1 in 0..g.ys[1] {
                for o2 in 0..g.ys[2] {
                    let w = avg_window(&g, [o0, o1, o2], cip, dov);
                    let mut sum = 0.0;
                    let mut any = false;
                    for i0 in w.start[0]..w.end[0] {
                        for i1 in w.start[1]..w.end[1] {
                            for i2 in w.start[2]..w.end[2] {
                                sum += v[pl * xsp + (i0 * g.xs[1] + i1) * g.xs[2] + i2];
                                any = true;
                            }
                        }
                    }
                    out.push(if any { sum / w.divisor } else { 0.0 });
                }
            }
        }
    }
    Ok(Tensor::from_f64s(x.dtype, g.out_shape, out))
}

/// Adaptive pooling window `[floor(i * n / o), ceil((i + 1) * n / o))`.
pub(crate) fn adaptive_range(i: usize, n: usize, o: usize) -> (usize, usize) {
    ((i * n) / o, ((i + 1) * n).div_ceil(o))
}

/// `_adaptive_avg_pool{2,3}d(self, output_size)`.
pub(crate) fn adaptive_avg_pool(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    let ns = spatial_dims(cx.op());
    let os = ints_arg(cx, "output_size", ns)?;
    if x.rank() != ns + 1 && x.rank() != ns + 2 {
        return Err(format!(
            "input has shape {:?}, expected {} or {} dimensions",
            x.shape,
            ns + 1,
            ns + 2
        ));
    }
    let os = os
        .iter()
        .map(|&o| to_usize(o, "an output size"))
        .collect::<R<Vec<_>>>()?;
    let lead = x.rank() - ns;
    let (xs, ys) = (pad3(&x.shape[lead..], 1), pad3(&os, 1));
    if numel(&x.shape[..lead]) > 0 && numel(&ys) > 0 && xs.contains(&0) {
        return Err(format!(
            "cannot adaptively pool an empty input {:?}",
            x.shape
        ));
    }
    let mut shape = x.shape[..lead].to_vec();
    shape.extend(&os);
    let v = x.f64s();
    let xsp = numel(&xs);
    let mut out = Vec::with_capacity(numel(&shape));
    for pl in 0..numel(&x.shape[..lead]) {
        for o0 in 0..ys[0] {
            let r0 = adaptive_range(o0, xs[0], ys[0]);
            for o1 in 0..ys[1] {
                let r1 = adaptive_range(o1, xs[1], ys[1]);
                for o2 in 0..ys[2] {
                    let r2 = adaptive_range(o2, xs[2], ys[2]);
                    let mut sum = 0.0;
                    for i0 in r0.0..r0.1 {
                        for i1 in r1.0..r1.1 {
                            for i2 in r2.0..r2.1 {
                                sum += v[pl * xsp + (i0 * xs[1] + i1) * xs[2] + i2];
                            }
                        }
                    }
                    let cnt = (r0.1 - r0.0) * (r1.1 - r1.0) * (r2.1 - r2.0);
                    out.push(sum / cnt as f64);
                }
            }
        }
    }
    Ok(Tensor::from_f64s(x.dtype, shape, out))
}

/// Values of an optional per-channel parameter (`default` when absent), checked to have `c`.
pub(crate) fn channel_values(
    t: Option<&Tensor>,
    c: usize,
    default: f64,
    what: &str,
) -> R<Vec<f64>> {
    match t {
        None => Ok(vec![default; c]),
        Some(t) if t.numel() == c => Ok(t.f64s()),
        Some(t) => Err(format!(
            "{what} has shape {:?}, expected {c} elements",
            t.shape
        )),
    }
}

/// Mean and biased variance of `v`.
fn mean_var(v: impl Iterator<Item = f64> + Clone) -> (f64, f64) {
    let n = v.clone().count() as f64;
    let m = v.clone().sum::<f64>() / n;
    let var = v.map(|x| (x - m) * (x - m)).sum::<f64>() / n;
    (m, var)
}

/// `_native_batch_norm_legit{,.no_stats,_no_training}`: output, saved mean and saved inverse
/// standard deviation. In evaluation mode the running statistics are used and the saved
/// statistics are empty (or, where the declared type says `[C]`, the running ones).
pub(crate) fn batch_norm(cx: &Ctx) -> R<Vec<Tensor>> {
    let x = cx.t("input")?;
    if x.rank() < 2 {
        return Err(format!(
            "input has shape {:?}, expected (N, C, ...)",
            x.shape
        ));
    }
    let (outer, c, inner) = lanes(&x.shape, 1);
    let eps = cx.float("eps")?;
    let w = channel_values(cx.opt_t("weight")?, c, 1.0, "weight")?;
    let b = channel_values(cx.opt_t("bias")?, c, 0.0, "bias")?;
    let training = match cx.op() {
        Op::NativeBatchNormLegitNoTraining => false,
        Op::NativeBatchNormLegit => cx.bool("training")?,
        _ => {
            if !cx.bool("training")? {
                return Err("running_mean must be defined in evaluation mode".into());
            }
            true
        }
    };
    let v = x.f64s();
    let at = |o: usize, ch: usize, n: usize| (o * c + ch) * inner + n;
    let (mean, var): (Vec<f64>, Vec<f64>) = if training {
        (0..c)
            .map(|ch| {
                mean_var(
                    (0..outer)
                        .flat_map(move |o| (0..inner).map(move |n| at(o, ch, n)))
                        .map(|i| v[i]),
                )
            })
            .unzip()
    } else {
        (
            channel_values(Some(cx.t("running_mean")?), c, 0.0, "running_mean")?,
            channel_values(Some(cx.t("running_var")?), c, 1.0, "running_var")?,
        )
    };
    let rstd: Vec<f64> = var.iter().map(|&s| 1.0 / (s + eps).sqrt()).collect();
    let mut out = vec![0.0; v.len()];
    for o in 0..outer {
        for ch in 0..c {
            for n in 0..inner {
                let i = at(o, ch, n);
                out[i] = (v[i] - mean[ch]) * rstd[ch] * w[ch] + b[ch];
            }
        }
    }
    let stat = |vals: Vec<f64>, j: usize| {
        let shape = cx.out_shape_of(j);
        let vals = if numel(&shape) == 0 { vec![] } else { vals };
        Tensor::from_f64s(cx.out_dtype_of(j), shape, vals)
    };
    Ok(vec![
        Tensor::from_f64s(x.dtype, x.shape.clone(), out),
        stat(mean, 1),
        stat(rstd, 2),
    ])
}

/// `native_layer_norm(input, normalized_shape, weight, bias, eps)`: output, mean and rstd
/// (shaped like the input with the normalized dimensions set to 1).
pub(crate) fn layer_norm(cx: &Ctx) -> R<Vec<Tensor>> {
    let x = cx.t("input")?;
    let ns = cx.ints("normalized_shape")?;
    let k = ns.len();
    let tail: Vec<i64> = x.shape[x.rank().saturating_sub(k)..]
        .iter()
        .map(|&d| d as i64)
        .collect();
    if k > x.rank() || tail != ns {
        return Err(format!(
            "normalized_shape {ns:?} does not match the trailing dimensions of input {:?}",
            x.shape
        ));
    }
    let n = numel(&x.shape[x.rank() - k..]);
    let m = numel(&x.shape[..x.rank() - k]);
    let w = channel_values(cx.opt_t("weight")?, n, 1.0, "weight")?;
    let b = channel_values(cx.opt_t("bias")?, n, 0.0, "bias")?;
    let eps = cx.float("eps")?;
    let v = x.f64s();
    let mut out = vec![0.0; v.len()];
    let (mut means, mut rstds) = (vec![], vec![]);
    for r in 0..m {
        let row = &v[r * n..(r + 1) * n];
        let (mean, var) = mean_var(row.iter().copied());
        let rstd = 1.0 / (var + eps).sqrt();
        for j in 0..n {
            out[r * n + j] = (row[j] - mean) * rstd * w[j] + b[j];
        }
        means.push(mean);
        rstds.push(rstd);
    }
    let mut sshape = x.shape[..x.rank() - k].to_vec();
    sshape.extend(std::iter::repeat_n(1, k));
    Ok(vec![
        Tensor::from_f64s(x.dtype, x.shape.clone(), out),
        Tensor::from_f64s(x.dtype, sshape.clone(), means),
        Tensor::from_f64s(x.dtype, sshape, rstds),
    ])
}

/// Checked `(N, C, HxW, group)` of the group-norm ops.
pub(crate) fn group_dims(cx: &Ctx, x: &Tensor) -> R<(usize, usize, usize, usize)> {
    let n = to_usize(cx.int("N")?, "N")?;
    let c = to_usize(cx.int("C")?, "C")?;
    let hw = to_usize(cx.int("HxW")?, "HxW")?;
    let g = to_usize(cx.int("group")?, "group")?;
    if g == 0 || c % g != 0 {
        return Err(format!("C={c} is not divisible by group={g}"));
    }
    if n.checked_mul(c).and_then(|p| p.checked_mul(hw)) != Some(x.numel()) {
        return Err(format!(
            "N={n}, C={c}, HxW={hw} do not match the input's {} elements",
            x.numel()
        ));
    }
    Ok((n, c, hw, g))
}

/// `native_group_norm(input, weight, bias, N, C, HxW, group, eps)`: output, mean `[N, G]`,
/// rstd `[N, G]`.
pub(crate) fn group_norm(cx: &Ctx) -> R<Vec<Tensor>> {
    let x = cx.t("input")?;
    let (n, c, hw, g) = group_dims(cx, x)?;
    let w = channel_values(cx.opt_t("weight")?, c, 1.0, "weight")?;
    let b = channel_values(cx.opt_t("bias")?, c, 0.0, "bias")?;
    let eps = cx.float("eps")?;
    let v = x.f64s();
    let cg = c / g;
    let mut out = vec![0.0; v.len()];
    let (mut means, mut rstds) = (vec![], vec![]);
    for ni in 0..n {
        for gi in 0..g {
            let start = (ni * c + gi * cg) * hw;
            let block = &v[start..start + cg * hw];
            let (mean, var) = mean_var(block.iter().copied());
            let rstd = 1.0 / (var + eps).sqrt();
            for (j, &a) in block.iter().enumerate() {
                let ch = gi * cg + j / hw.max(1);
                out[start + j] = (a - mean) * rstd * w[ch] + b[ch];
            }
            means.push(mean);
            rstds.push(rstd);
        }
    }
    Ok(vec![
        Tensor::from_f64s(x.dtype, x.shape.clone(), out),
        Tensor::from_f64s(x.dtype, vec![n, g], means),
        Tensor::from_f64s(x.dtype, vec![n, g], rstds),
    ])
}

/// Output size and per-dimension scale factors of the `upsample_*.vec` ops.
fn upsample_sizes(cx: &Ctx, x: &Tensor) -> R<([usize; 2], [Option<f64>; 2])> {
    if x.rank() != 4 {
        return Err(format!(
            "input has shape {:?}, expected (N, C, H, W)",
            x.shape
        ));
    }
    let (h, w) = (x.shape[2], x.shape[3]);
    match (cx.opt_ints("output_size")?, cx.opt_floats("scale_factors")?) {
        (Some(s), _) => {
            let s = super::ints_n(&s, 2, "output_size")?;
            Ok((
                [
                    to_usize(s[0], "an output size")?,
                    to_usize(s[1], "an output size")?,
                ],
                [None, None],
            ))
        }
        (None, Some(f)) if f.len() == 2 => {
            let size = |n: usize, s: f64| -> R<usize> {
                let o = (n as f64 * s).floor();
                if !(0.0..9.0e15).contains(&o) {
                    return Err(format!("scale factor {s} gives an invalid output size"));
                }
                Ok(o as usize)
            };
            Ok(([size(h, f[0])?, size(w, f[1])?], [Some(f[0]), Some(f[1])]))
        }
        _ => Err("one of output_size or scale_factors (2 floats) is required".into()),
    }
}

/// torch's `compute_scales_value`: `1 / scale` when a positive scale was given, else `in / out`.
fn scales_value(scale: Option<f64>, n: usize, o: usize) -> f64 {
    match scale {
        Some(s) if s > 0.0 => 1.0 / s,
        _ => n as f64 / o as f64,
    }
}

/// torch's `nearest_idx` (computed in `f32`, as torch does).
fn nearest_idx(o: usize, n: usize, out: usize, scale: Option<f64>) -> usize {
    if out == n {
        o
    } else if out == 2 * n {
        o >> 1
    } else {
        let s = scales_value(scale, n, out) as f32;
        ((o as f32 * s).floor() as usize).min(n.saturating_sub(1))
    }
}

/// `upsample_nearest2d.vec(input, output_size, scale_factors)`.
pub(crate) fn upsample_nearest2d(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("input")?;
    let ([oh, ow], [sh, sw]) = upsample_sizes(cx, x)?;
    let (planes, h, w) = (x.shape[0] * x.shape[1], x.shape[2], x.shape[3]);
    if (h == 0 || w == 0) && planes * oh * ow > 0 {
        return Err("cannot upsample an empty input".into());
    }
    let mut map = Vec::with_capacity(planes * oh * ow);
    for p in 0..planes {
        for i in 0..oh {
            let si = nearest_idx(i, h, oh, sh);
            for j in 0..ow {
                map.push((p * h + si) * w + nearest_idx(j, w, ow, sw));
            }
        }
    }
    Ok(x.take(vec![x.shape[0], x.shape[1], oh, ow], &map))
}

/// Source indices and weights of linear interpolation for output index `o`, as torch's CPU
/// `compute_source_index_and_lambda`.
fn linear_src(
    o: usize,
    n: usize,
    out: usize,
    align: bool,
    scale: Option<f64>,
) -> (usize, usize, f64, f64) {
    if out == n {
        return (o, o, 1.0, 0.0);
    }
    let ratio = if align {
        if out > 1 {
            (n as f64 - 1.0) / (out as f64 - 1.0)
        } else {
            0.0
        }
    } else {
        scales_value(scale, n, out)
    };
    let src = if align {
        ratio * o as f64
    } else {
        (ratio * (o as f64 + 0.5) - 0.5).max(0.0)
    };
    let i0 = (src.floor() as usize).min(n - 1);
    let l1 = (src - i0 as f64).clamp(0.0, 1.0);
    let i1 = if i0 < n - 1 { i0 + 1 } else { i0 };
    (i0, i1, 1.0 - l1, l1)
}

/// `upsample_bilinear2d.vec(input, output_size, align_corners, scale_factors)`.
pub(crate) fn upsample_bilinear2d(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("input")?;
    let ([oh, ow], [sh, sw]) = upsample_sizes(cx, x)?;
    let align = cx.bool("align_corners")?;
    let (planes, h, w) = (x.shape[0] * x.shape[1], x.shape[2], x.shape[3]);
    if (h == 0 || w == 0) && planes * oh * ow > 0 {
        return Err("cannot upsample an empty input".into());
    }
    let v = x.f64s();
    let mut out = Vec::with_capacity(planes * oh * ow);
    for p in 0..planes {
        let at = |i: usize, j: usize| v[(p * h + i) * w + j];
        for i in 0..oh {
            let (h0, h1, a0, a1) = linear_src(i, h, oh, align, sh);
            for j in 0..ow {
                let (w0, w1, b0, b1) = linear_src(j, w, ow, align, sw);
                out.push(
                    a0 * (b0 * at(h0, w0) + b1 * at(h0, w1))
                        + a1 * (b0 * at(h1, w0) + b1 * at(h1, w1)),
                );
            }
        }
    }
    Ok(Tensor::from_f64s(
        x.dtype,
        vec![x.shape[0], x.shape[1], oh, ow],
        out,
    ))
}

/// Grid-sample coordinate transforms, as ATen's `GridSampler.h`.
mod grid {
    pub fn unnormalize(c: f64, size: usize, align: bool) -> f64 {
        let s = size as f64;
        if align {
            (c + 1.0) / 2.0 * (s - 1.0)
        } else {
            ((c + 1.0) * s - 1.0) / 2.0
        }
    }

    fn clip(c: f64, size: usize) -> f64 {
        (size as f64 - 1.0).min(c.max(0.0))
    }

    fn reflect(c: f64, twice_low: f64, twice_high: f64) -> f64 {
        if twice_low == twice_high {
            return 0.0;
        }
        let min = twice_low / 2.0;
        let span = (twice_high - twice_low) / 2.0;
        let c = (c - min).abs();
        let extra = c % span;
        let flips = (c / span).floor();
        if flips % 2.0 == 0.0 {
            extra + min
        } else {
            span - extra + min
        }
    }

    /// Applies the padding mode (0 zeros, 1 border, 2 reflection) to an unnormalized coordinate.
    pub fn pad(c: f64, size: usize, mode: i64, align: bool) -> f64 {
        let c = match mode {
            1 => clip(c, size),
            2 => {
                let s = size as f64;
                let r = if align {
                    reflect(c, 0.0, 2.0 * (s - 1.0))
                } else {
                    reflect(c, -1.0, 2.0 * s - 1.0)
                };
                clip(r, size)
            }
            _ => c,
        };
        if !c.is_finite() || c > (i32::MAX - 1) as f64 || c < i32::MIN as f64 {
            -100.0
        } else {
            c
        }
    }

    pub fn cubic1(x: f64, a: f64) -> f64 {
        ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    }

    pub fn cubic2(x: f64, a: f64) -> f64 {
        ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
    }
}

/// `grid_sampler_2d(input, grid, interpolation_mode, padding_mode, align_corners)`:
/// interpolation 0 bilinear, 1 nearest, 2 bicubic; padding 0 zeros, 1 border, 2 reflection.
pub(crate) fn grid_sampler_2d(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("input")?;
    let gr = cx.t("grid")?;
    if x.rank() != 4 || gr.rank() != 4 || gr.shape[3] != 2 || gr.shape[0] != x.shape[0] {
        return Err(format!(
            "input {:?} and grid {:?} must be (N, C, H, W) and (N, Ho, Wo, 2)",
            x.shape, gr.shape
        ));
    }
    let interp = cx.int("interpolation_mode")?;
    let pmode = cx.int("padding_mode")?;
    if !(0..=2).contains(&interp) || !(0..=2).contains(&pmode) {
        return Err(format!(
            "interpolation_mode {interp} and padding_mode {pmode} must be 0, 1 or 2"
        ));
    }
    let align = cx.bool("align_corners")?;
    let (n, c, h, w) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
    let (ho, wo) = (gr.shape[1], gr.shape[2]);
    let v = x.f64s();
    let gv = gr.f64s();
    let mut out = vec![0.0; n * c * ho * wo];
    for ni in 0..n {
        for i in 0..ho {
            for j in 0..wo {
                let gi = ((ni * ho + i) * wo + j) * 2;
                let (gx, gy) = (gv[gi], gv[gi + 1]);
                let (ux, uy) = (
                    grid::unnormalize(gx, w, align),
                    grid::unnormalize(gy, h, align),
                );
                for ci in 0..c {
                    let at = |yy: i64, xx: i64| -> f64 {
                        if yy >= 0 && xx >= 0 && (yy as usize) < h && (xx as usize) < w {
                            v[((ni * c + ci) * h + yy as usize) * w + xx as usize]
                        } else {
                            0.0
                        }
                    };
                    let val = match interp {
                        0 => {
                            // With zeros padding torch uses the raw coordinate, so a NaN or
                            // infinite one gives NaN weights (and a NaN result).
                            let (ix, iy) = if pmode == 0 {
                                (ux, uy)
                            } else {
                                (
                                    grid::pad(ux, w, pmode, align),
                                    grid::pad(uy, h, pmode, align),
                                )
                            };
                            let (x0, y0) = (ix.floor(), iy.floor());
                            let (x1, y1) = (x0 + 1.0, y0 + 1.0);
                            let (xi, yi) = (x0 as i64, y0 as i64);
                            let (xj, yj) = (xi.saturating_add(1), yi.saturating_add(1));
                            at(yi, xi) * (x1 - ix) * (y1 - iy)
                                + at(yi, xj) * (ix - x0) * (y1 - iy)
                                + at(yj, xi) * (x1 - ix) * (iy - y0)
                                + at(yj, xj) * (ix - x0) * (iy - y0)
                        }
                        1 => {
                            let ix = grid::pad(ux, w, pmode, align).round_ties_even();
                            let iy = grid::pad(uy, h, pmode, align).round_ties_even();
                            at(iy as i64, ix as i64)
                        }
                        _ => {
                            let (x0, y0) = (ux.floor(), uy.floor());
                            let (tx, ty) = (ux - x0, uy - y0);
                            let a = -0.75;
                            let coeffs = |t: f64| {
                                [
                                    grid::cubic2(t + 1.0, a),
                                    grid::cubic1(t, a),
                                    grid::cubic1(1.0 - t, a),
                                    grid::cubic2(2.0 - t, a),
                                ]
                            };
                            let (cxs, cys) = (coeffs(tx), coeffs(ty));
                            let bounded = |yy: f64, xx: f64| {
                                let px = grid::pad(xx, w, pmode, align);
                                let py = grid::pad(yy, h, pmode, align);
                                at(py as i64, px as i64)
                            };
                            let mut acc = 0.0;
                            for (r, cyv) in cys.iter().enumerate() {
                                let yy = y0 - 1.0 + r as f64;
                                let row: f64 = cxs
                                    .iter()
                                    .enumerate()
                                    .map(|(q, cxv)| cxv * bounded(yy, x0 - 1.0 + q as f64))
                                    .sum();
                                acc += cyv * row;
                            }
                            acc
                        }
                    };
                    out[((ni * c + ci) * ho + i) * wo + j] = val;
                }
            }
        }
    }
    Ok(Tensor::from_f64s(x.dtype, vec![n, c, ho, wo], out))
}

/// `col2im(self [N?, C*kh*kw, L], output_size, kernel_size, dilation, padding, stride)`: sums
/// sliding-window columns back into an image `[N?, C, H, W]`.
pub(crate) fn col2im(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    let os = ints_arg(cx, "output_size", 2)?;
    let k = ints_arg(cx, "kernel_size", 2)?;
    let d = ints_arg(cx, "dilation", 2)?;
    let p = ints_arg(cx, "padding", 2)?;
    let s = ints_arg(cx, "stride", 2)?;
    check_window_params(&[&os, &k, &d, &p, &s])?;
    if k.iter().chain(&d).chain(&s).any(|&v| v <= 0) || p.iter().chain(&os).any(|&v| v < 0) {
        return Err("kernel_size, dilation and stride must be positive; padding and output_size non-negative".into());
    }
    let (batch, ck, l) = match x.rank() {
        2 => (1, x.shape[0], x.shape[1]),
        3 => (x.shape[0], x.shape[1], x.shape[2]),
        _ => {
            return Err(format!(
                "input has shape {:?}, expected 2 or 3 dimensions",
                x.shape
            ))
        }
    };
    let kk = (k[0] * k[1]) as usize;
    if ck % kk != 0 {
        return Err(format!(
            "{ck} columns are not divisible by the kernel size {k:?}"
        ));
    }
    let c = ck / kk;
    let blocks =
        |i: usize| -> i64 { (os[i] + 2 * p[i] - d[i] * (k[i] - 1) - 1).div_euclid(s[i]) + 1 };
    let (bh, bw) = (blocks(0).max(0) as usize, blocks(1).max(0) as usize);
    if bh * bw != l {
        return Err(format!(
            "input has {l} blocks, but output_size {os:?} with this kernel, padding and stride gives {bh} x {bw}"
        ));
    }
    let (oh, ow) = (os[0] as usize, os[1] as usize);
    let v = x.f64s();
    let mut out = vec![0.0; batch * c * oh * ow];
    for b in 0..batch {
        for ci in 0..c {
            for ki in 0..k[0] {
                for kj in 0..k[1] {
                    let row = (ci * kk) + (ki * k[1] + kj) as usize;
                    for by in 0..bh {
                        let iy = by as i64 * s[0] - p[0] + ki * d[0];
                        if iy < 0 || iy >= os[0] {
                            continue;
                        }
                        for bx in 0..bw {
                            let ix = bx as i64 * s[1] - p[1] + kj * d[1];
                            if ix < 0 || ix >= os[1] {
                                continue;
                            }
                            out[((b * c + ci) * oh + iy as usize) * ow + ix as usize] +=
                                v[(b * ck + row) * l + by * bw + bx];
                        }
                    }
                }
            }
        }
    }
    let mut shape = if x.rank() == 3 { vec![batch] } else { vec![] };
    shape.extend([c, oh, ow]);
    Ok(Tensor::from_f64s(x.dtype, shape, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooling_output_sizes_match_torch() {
        // max_pool2d(k=3, s=2, p=1, ceil_mode=True) on 4 -> 3 (checked with torch)
        assert_eq!(pool_out(4, 3, 2, 1, 1, true), Ok(3));
        assert_eq!(pool_out(64, 7, 2, 3, 1, false), Ok(32));
        assert_eq!(pool_out(5, 2, 2, 0, 1, true), Ok(3));
        assert!(pool_out(2, 5, 1, 0, 1, false).is_err());
    }

    #[test]
    fn adaptive_windows_cover_the_input() {
        let w: Vec<_> = (0..3).map(|i| adaptive_range(i, 5, 3)).collect();
        assert_eq!(w, vec![(0, 2), (1, 4), (3, 5)]);
        assert_eq!(adaptive_range(0, 4, 1), (0, 4));
    }

    #[test]
    fn convolution_geometry() {
        let g = conv_geom(
            &[1, 4, 5, 5],
            &[6, 2, 3, 3],
            &[2],
            &[1],
            &[1],
            false,
            &[0],
            2,
        )
        .unwrap();
        assert_eq!(g.out_shape, vec![1, 6, 3, 3]);
        assert_eq!((g.xs, g.ks), ([1, 5, 5], [1, 3, 3]));
        let g = conv_geom(
            &[1, 4, 3, 3],
            &[4, 3, 3, 2],
            &[2, 3],
            &[1, 0],
            &[1],
            true,
            &[1, 2],
            2,
        )
        .unwrap();
        assert_eq!(g.out_shape, vec![1, 6, 6, 10]);
        assert!(conv_geom(&[1, 3, 5], &[2, 2, 3], &[1], &[0], &[1], false, &[0], 1).is_err());
        assert!(conv_geom(&[1, 2, 2], &[2, 2, 5], &[1], &[0], &[1], false, &[0], 1).is_err());
        assert!(conv_geom(&[1, 2, 2], &[2, 2, 1], &[0], &[0], &[1], false, &[0], 1).is_err());
    }

    #[test]
    fn nearest_and_linear_source_indices() {
        assert_eq!(nearest_idx(3, 4, 8, None), 1);
        assert_eq!(nearest_idx(4, 3, 5, None), 2);
        assert_eq!(nearest_idx(4, 4, 6, Some(1.5)), 2);
        assert_eq!(linear_src(0, 4, 8, false, None), (0, 1, 1.0, 0.0));
        let (i0, i1, l0, l1) = linear_src(1, 4, 8, false, None);
        assert_eq!((i0, i1), (0, 1));
        assert!((l0 - 0.75).abs() < 1e-12 && (l1 - 0.25).abs() < 1e-12);
        assert_eq!(linear_src(2, 3, 3, true, None), (2, 2, 1.0, 0.0));
    }
}
