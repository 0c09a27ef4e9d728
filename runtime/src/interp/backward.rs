//! Backward ops: gradients of adaptive/average/max pooling, convolution, embedding, layer norm
//! and group norm. Each is written from the forward op's own geometry, so forward and backward
//! agree on which elements touch.

use super::nn::{
    adaptive_range, avg_window, channel_values, conv_geom_of, divisor_override, for_each_mac,
    group_dims, pool_geom,
};
use super::tensor::{numel, Tensor, R};
use super::{to_usize, Ctx};

fn check_grad_shape(go: &Tensor, want: &[usize]) -> R<()> {
    if go.shape != want {
        return Err(format!(
            "grad_output has shape {:?}, expected {want:?}",
            go.shape
        ));
    }
    Ok(())
}

/// `_adaptive_avg_pool2d_backward(grad_output, self)`.
pub(crate) fn adaptive_avg_pool2d_backward(cx: &Ctx) -> R<Tensor> {
    let go = cx.t("grad_output")?;
    let x = cx.t("self")?;
    if x.rank() < 3 || go.rank() != x.rank() || go.shape[..x.rank() - 2] != x.shape[..x.rank() - 2]
    {
        return Err(format!(
            "grad_output {:?} does not match self {:?}",
            go.shape, x.shape
        ));
    }
    let r = x.rank();
    let (h, w, oh, ow) = (
        x.shape[r - 2],
        x.shape[r - 1],
        go.shape[r - 2],
        go.shape[r - 1],
    );
    let planes = numel(&x.shape[..r - 2]);
    if planes * oh * ow > 0 && h * w == 0 {
        return Err("cannot pool an empty input".into());
    }
    let gv = go.f64s();
    let mut gi = vec![0.0; x.numel()];
    for p in 0..planes {
        for i in 0..oh {
            let (h0, h1) = adaptive_range(i, h, oh);
            for j in 0..ow {
                let (w0, w1) = adaptive_range(j, w, ow);
                let g = gv[(p * oh + i) * ow + j] / ((h1 - h0) * (w1 - w0)) as f64;
                for a in h0..h1 {
                    for b in w0..w1 {
                        gi[(p * h + a) * w + b] += g;
                    }
                }
            }
        }
    }
    Ok(Tensor::from_f64s(x.dtype, x.shape.clone(), gi))
}

/// `avg_pool2d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode,
/// count_include_pad, divisor_override)`.
pub(crate) fn avg_pool2d_backward(cx: &Ctx) -> R<Tensor> {
    let go = cx.t("grad_output")?;
    let x = cx.t("self")?;
    let g = pool_geom(cx, &x.shape, 2)?;
    check_grad_shape(go, &g.out_shape)?;
    let cip = cx.bool("count_include_pad")?;
    let dov = divisor_override(cx)?;
    let gv = go.f64s();
    let (xsp, ysp) = (numel(&g.xs), numel(&g.ys));
    let mut gi = vec![0.0; x.numel()];
    for pl in 0..g.planes {
        for o1 in 0..g.ys[1] {
            for o2 in 0..g.ys[2] {
                let w = avg_window(&g, [0, o1, o2], cip, dov);
                let delta = gv[pl * ysp + o1 * g.ys[2] + o2] / w.divisor;
                for i1 in w.start[1]..w.end[1] {
                    for i2 in w.start[2]..w.end[2] {
                        gi[pl * xsp + i1 * g.xs[2] + i2] += delta;
                    }
                }
            }
        }
    }
    Ok(Tensor::from_f64s(x.dtype, x.shape.clone(), gi))
}

/// `max_pool2d_with_indices_backward(grad_output, self, ..., indices)`: each gradient goes to
/// the input element its index names.
pub(crate) fn max_pool2d_with_indices_backward(cx: &Ctx) -> R<Tensor> {
    let go = cx.t("grad_output")?;
    let x = cx.t("self")?;
    let ind = cx.t("indices")?;
    let g = pool_geom(cx, &x.shape, 2)?;
    check_grad_shape(go, &g.out_shape)?;
    if ind.shape != go.shape {
        return Err(format!(
            "indices have shape {:?}, expected {:?}",
            ind.shape, go.shape
        ));
    }
    let (xsp, ysp) = (numel(&g.xs), numel(&g.ys));
    let (gv, iv) = (go.f64s(), ind.i64s());
    let mut gi = vec![0.0; x.numel()];
    for pl in 0..g.planes {
        for o in 0..ysp {
            let k = pl * ysp + o;
            let i = iv[k];
            if i < 0 || i as u64 >= xsp as u64 {
                return Err(format!(
                    "index {i} is out of range for an input plane of {xsp} elements"
                ));
            }
            gi[pl * xsp + i as usize] += gv[k];
        }
    }
    Ok(Tensor::from_f64s(x.dtype, x.shape.clone(), gi))
}

/// An empty `[0]` result (for a masked-off gradient), or `v` in the declared type of result `j`.
fn masked(cx: &Ctx, j: usize, on: bool, v: Vec<f64>) -> R<Tensor> {
    let shape = cx.out_shape_of(j);
    let d = cx.out_dtype_of(j);
    if !on || numel(&shape) == 0 {
        return Ok(Tensor::zeros(d, shape));
    }
    if numel(&shape) != v.len() {
        return Err(format!(
            "result {j} is declared with shape {shape:?}, but the gradient has {} elements",
            v.len()
        ));
    }
    Ok(Tensor::from_f64s(d, shape, v))
}

fn mask3(cx: &Ctx) -> R<[bool; 3]> {
    match cx.bools("output_mask")?[..] {
        [a, b, c] => Ok([a, b, c]),
        ref m => Err(format!("output_mask has {} entries, expected 3", m.len())),
    }
}

/// `convolution_backward(grad_output, input, weight, bias_sizes, ..., output_mask)`: grads of
/// input, weight and bias (masked-off ones are empty).
pub(crate) fn convolution_backward(cx: &Ctx) -> R<Vec<Tensor>> {
    let go = cx.t("grad_output")?;
    let x = cx.t("input")?;
    let w = cx.t("weight")?;
    let g = conv_geom_of(cx, &x.shape, &w.shape)?;
    check_grad_shape(go, &g.out_shape)?;
    let mask = mask3(cx)?;
    let (gv, xv, wv) = (go.f64s(), x.f64s(), w.f64s());
    let mut gx = vec![0.0; if mask[0] { x.numel() } else { 0 }];
    let mut gw = vec![0.0; if mask[1] { w.numel() } else { 0 }];
    if mask[0] || mask[1] {
        for_each_mac(cx, &g, |xi, wi, yi| {
            if mask[0] {
                gx[xi] += gv[yi] * wv[wi];
            }
            if mask[1] {
                gw[wi] += gv[yi] * xv[xi];
            }
        })?;
    }
    let mut gb = vec![0.0; g.cout];
    let ysp = numel(&g.ys);
    for (i, &v) in gv.iter().enumerate() {
        gb[(i / ysp.max(1)) % g.cout.max(1)] += v;
    }
    Ok(vec![
        masked(cx, 0, mask[0], gx)?,
        masked(cx, 1, mask[1], gw)?,
        masked(cx, 2, mask[2], gb)?,
    ])
}

/// `embedding_dense_backward(grad_output, indices, num_weights, padding_idx,
/// scale_grad_by_freq)`: rows summed per index; `padding_idx` gets none.
pub(crate) fn embedding_dense_backward(cx: &Ctx) -> R<Tensor> {
    let go = cx.t("grad_output")?;
    let ind = cx.t("indices")?;
    let nw = to_usize(cx.int("num_weights")?, "num_weights")?;
    let pad = cx.int("padding_idx")?;
    let scale = cx.bool("scale_grad_by_freq")?;
    let d = go.shape.last().copied().unwrap_or(0);
    let idx = ind.i64s();
    if go.numel() != idx.len() * d {
        return Err(format!(
            "grad_output {:?} does not match indices {:?}",
            go.shape, ind.shape
        ));
    }
    let mut counts = vec![0usize; nw];
    for &i in &idx {
        if pad >= 0 && i == pad {
            continue;
        }
        if i < 0 || i as u64 >= nw as u64 {
            return Err(format!(
                "index {i} is out of range for an embedding table of {nw} rows"
            ));
        }
        counts[i as usize] += 1;
    }
    let gv = go.f64s();
    let mut gw = vec![0.0; nw * d];
    for (r, &i) in idx.iter().enumerate() {
        if pad >= 0 && i == pad {
            continue;
        }
        let i = i as usize;
        let s = if scale { 1.0 / counts[i] as f64 } else { 1.0 };
        for j in 0..d {
            gw[i * d + j] += gv[r * d + j] * s;
        }
    }
    Ok(Tensor::from_f64s(cx.out_dtype(), vec![nw, d], gw))
}

/// Input gradient of a normalization over groups of `n` elements with per-group `mean`/`rstd`
/// and per-element scale `w`: `rstd * (g - mean(g) - xhat * mean(g * xhat))`, `g = dy * w`.
fn norm_input_grad(
    x: &[f64],
    dy: &[f64],
    w: impl Fn(usize) -> f64,
    mean: f64,
    rstd: f64,
) -> Vec<f64> {
    let n = x.len() as f64;
    let xhat: Vec<f64> = x.iter().map(|v| (v - mean) * rstd).collect();
    let g: Vec<f64> = dy.iter().enumerate().map(|(j, d)| d * w(j)).collect();
    let mg = g.iter().sum::<f64>() / n;
    let mgx = g.iter().zip(&xhat).map(|(a, b)| a * b).sum::<f64>() / n;
    g.iter()
        .zip(&xhat)
        .map(|(gj, xj)| rstd * (gj - mg - xj * mgx))
        .collect()
}

/// `native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias,
/// output_mask)`.
pub(crate) fn layer_norm_backward(cx: &Ctx) -> R<Vec<Tensor>> {
    let dy = cx.t("grad_out")?;
    let x = cx.t("input")?;
    let k = cx.ints("normalized_shape")?.len();
    if dy.shape != x.shape || k > x.rank() {
        return Err(format!(
            "grad_out {:?} and input {:?} must match, with {k} normalized dimensions",
            dy.shape, x.shape
        ));
    }
    let n = numel(&x.shape[x.rank() - k..]);
    let m = numel(&x.shape[..x.rank() - k]);
    let (mean, rstd) = (cx.t("mean")?.f64s(), cx.t("rstd")?.f64s());
    if mean.len() != m || rstd.len() != m {
        return Err(format!("mean and rstd must have {m} elements"));
    }
    let w = channel_values(cx.opt_t("weight")?, n, 1.0, "weight")?;
    let mask = mask3(cx)?;
    let (xv, gv) = (x.f64s(), dy.f64s());
    let mut gx = Vec::with_capacity(x.numel());
    let (mut gw, mut gb) = (vec![0.0; n], vec![0.0; n]);
    for r in 0..m {
        let (xr, dr) = (&xv[r * n..(r + 1) * n], &gv[r * n..(r + 1) * n]);
        gx.extend(norm_input_grad(xr, dr, |j| w[j], mean[r], rstd[r]));
        for j in 0..n {
            gw[j] += dr[j] * (xr[j] - mean[r]) * rstd[r];
            gb[j] += dr[j];
        }
    }
    Ok(vec![
        masked(cx, 0, mask[0], gx)?,
        masked(cx, 1, mask[1], gw)?,
        masked(cx, 2, mask[2], gb)?,
    ])
}

/// `native_group_norm_backward(grad_out, input, mean, rstd, weight, N, C, HxW, group,
/// output_mask)`.
pub(crate) fn group_norm_backward(cx: &Ctx) -> R<Vec<Tensor>> {
    let dy = cx.t("grad_out")?;
    let x = cx.t("input")?;
    let (n, c, hw, g) = group_dims(cx, x)?;
    if dy.shape != x.shape {
        return Err(format!(
            "grad_out {:?} and input {:?} differ",
            dy.shape, x.shape
        ));
    }
    let (mean, rstd) = (cx.t("mean")?.f64s(), cx.t("rstd")?.f64s());
    if mean.len() != n * g || rstd.len() != n * g {
        return Err(format!(
            "mean and rstd must have N*group = {} elements",
            n * g
        ));
    }
    let w = channel_values(cx.opt_t("weight")?, c, 1.0, "weight")?;
    let mask = mask3(cx)?;
    let (xv, gv) = (x.f64s(), dy.f64s());
    let cg = c / g;
    let mut gx = vec![0.0; x.numel()];
    let (mut gw, mut gb) = (vec![0.0; c], vec![0.0; c]);
    for ni in 0..n {
        for gi in 0..g {
            let start = (ni * c + gi * cg) * hw;
            let (xb, db) = (&xv[start..start + cg * hw], &gv[start..start + cg * hw]);
            let (mu, rs) = (mean[ni * g + gi], rstd[ni * g + gi]);
            let ch = |j: usize| gi * cg + j / hw.max(1);
            let dx = norm_input_grad(xb, db, |j| w[ch(j)], mu, rs);
            gx[start..start + cg * hw].copy_from_slice(&dx);
            for j in 0..cg * hw {
                gw[ch(j)] += db[j] * (xb[j] - mu) * rs;
                gb[ch(j)] += db[j];
            }
        }
    }
    Ok(vec![
        masked(cx, 0, mask[0], gx)?,
        masked(cx, 1, mask[1], gw)?,
        masked(cx, 2, mask[2], gb)?,
    ])
}
