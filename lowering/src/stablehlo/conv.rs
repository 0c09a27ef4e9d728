//! Convolutions: forward (groups, stride, padding, dilation), transposed convolution as an
//! input-dilated convolution with a flipped kernel, `convolution_backward` and `col2im`.

use super::emitter::{ConvWindow, Em, Num, ScatterDims, V};
use super::reduce::reduce_op;
use super::{opmath, Cx, R};
use fxhlo_ir::Arg;

fn n_ints(v: Vec<i64>, n: usize) -> Vec<i64> {
    if v.len() == 1 {
        vec![v[0]; n]
    } else {
        v
    }
}

/// Kernel of a transposed convolution as a forward one: `[Cin, Cout/g, k..]` becomes
/// `[Cout, Cin/g, k..]`, spatially reversed.
fn flip_kernel(em: &mut Em, w: &V, groups: i64) -> V {
    let (ci, co_g) = (w.shape[0], w.shape[1]);
    let k = &w.shape[2..];
    let mut s = vec![groups, ci / groups, co_g];
    s.extend(k);
    let r = em.reshape(w, &s);
    let mut perm = vec![0, 2, 1];
    perm.extend(3..3 + k.len());
    let t = em.transpose(&r, &perm);
    let mut s2 = vec![groups * co_g, ci / groups];
    s2.extend(k);
    let t = em.reshape(&t, &s2);
    let dims: Vec<usize> = (2..2 + k.len()).collect();
    em.reverse(&t, &dims)
}

/// Transposed convolution of `x` with `w` (`[Cin, Cout/g, k..]`).
#[allow(clippy::too_many_arguments)]
fn conv_transposed(
    em: &mut Em,
    x: &V,
    w: &V,
    stride: &[i64],
    padding: &[i64],
    dilation: &[i64],
    output_padding: &[i64],
    groups: i64,
    out_shape: &[i64],
) -> V {
    let n = x.rank() - 2;
    let wf = flip_kernel(em, w, groups);
    let pads: Vec<(i64, i64)> = (0..n)
        .map(|i| {
            let e = dilation[i] * (w.shape[2 + i] - 1);
            (e - padding[i], e - padding[i] + output_padding[i])
        })
        .collect();
    em.convolution(
        x,
        &wf,
        &vec![1; n],
        &pads,
        stride,
        dilation,
        groups,
        out_shape,
    )
}

/// `convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)`.
pub(crate) fn convolution(cx: &mut Cx) -> R<V> {
    let x = cx.t("input")?;
    let w = cx.t("weight")?;
    let bias = cx.opt_t("bias")?;
    let n = x.rank() - 2;
    let stride = n_ints(cx.ints("stride")?, n);
    let padding = n_ints(cx.ints("padding")?, n);
    let dilation = n_ints(cx.ints("dilation")?, n);
    let output_padding = n_ints(cx.ints("output_padding")?, n);
    let transposed = cx.bool("transposed")?;
    let groups = cx.int("groups")?;
    let os = cx.out_shape(0)?;
    let em = &mut *cx.em;
    let d = x.dtype;
    let cd = opmath(d);
    let xc = em.convert(&x, cd);
    let wc = em.convert(&w, cd);
    let mut y = if transposed {
        conv_transposed(
            em,
            &xc,
            &wc,
            &stride,
            &padding,
            &dilation,
            &output_padding,
            groups,
            &os,
        )
    } else {
        let pads: Vec<(i64, i64)> = padding.iter().map(|&p| (p, p)).collect();
        em.convolution(
            &xc,
            &wc,
            &stride,
            &pads,
            &vec![1; n],
            &dilation,
            groups,
            &os,
        )
    };
    if let Some(b) = bias {
        let b = em.convert(&b, cd);
        let b = em.bcast_in_dim(&b, &os, &[1]);
        y = em.add(&y, &b);
    }
    Ok(em.convert(&y, d))
}

/// `convolution_backward`: grads of input, weight and bias (non-transposed convolutions).
pub(crate) fn convolution_backward(cx: &mut Cx) -> R<Vec<V>> {
    let g = cx.t("grad_output")?;
    let x = cx.t("input")?;
    let w = cx.t("weight")?;
    let n = x.rank() - 2;
    let stride = n_ints(cx.ints("stride")?, n);
    let padding = n_ints(cx.ints("padding")?, n);
    let dilation = n_ints(cx.ints("dilation")?, n);
    let groups = cx.int("groups")?;
    if cx.bool("transposed")? {
        return Err("convolution_backward of a transposed convolution is not lowered yet".into());
    }
    let mask = match cx.node.arg("output_mask") {
        Some(Arg::Bools(m)) => m.clone(),
        _ => return Err("output_mask must be 3 bools".into()),
    };
    let shapes = [cx.out_shape(0)?, cx.out_shape(1)?, cx.out_shape(2)?];
    let em = &mut *cx.em;
    let d = x.dtype;
    let cd = opmath(d);
    let g = em.convert(&g, cd);
    let x = em.convert(&x, cd);
    let w = em.convert(&w, cd);
    let mut outs = vec![];
    // grad input: the transposed convolution of grad_output with the weight
    if mask[0] {
        let op: Vec<i64> = (0..n)
            .map(|i| {
                let k = w.shape[2 + i];
                x.shape[2 + i]
                    - ((g.shape[2 + i] - 1) * stride[i] - 2 * padding[i]
                        + dilation[i] * (k - 1)
                        + 1)
            })
            .collect();
        outs.push(conv_transposed(
            em, &g, &w, &stride, &padding, &dilation, &op, groups, &shapes[0],
        ));
    } else {
        outs.push(em.splat(cd, &shapes[0], Num::I(0)));
    }
    // grad weight: input (channels as batch) convolved with grad_output (batch as features)
    if mask[1] {
        let sp: Vec<String> = (0..n).map(|i| i.to_string()).collect();
        let sp = sp.join(", ");
        let layout = format!("[f, b, {sp}]x[i, o, {sp}]->[f, b, {sp}]");
        let pads: Vec<(i64, i64)> = (0..n)
            .map(|i| {
                let k = w.shape[2 + i];
                let hi = (k - 1) * dilation[i] + (g.shape[2 + i] - 1) * stride[i] + 1
                    - x.shape[2 + i]
                    - padding[i];
                (padding[i], hi)
            })
            .collect();
        let win = ConvWindow {
            stride: &dilation,
            padding: &pads,
            lhs_dilation: &vec![1; n],
            rhs_dilation: &stride,
        };
        outs.push(em.convolution_general(&x, &g, &layout, &win, 1, groups, &shapes[1]));
    } else {
        outs.push(em.splat(cd, &shapes[1], Num::I(0)));
    }
    if mask[2] {
        let dims: Vec<usize> = (0..g.rank()).filter(|&i| i != 1).collect();
        outs.push(reduce_op(em, &g, &dims, "add", Num::I(0), &shapes[2]));
    } else {
        outs.push(em.splat(cd, &shapes[2], Num::I(0)));
    }
    Ok(outs.iter().map(|o| em.convert(o, d)).collect())
}

/// `col2im(self [N, C*kh*kw, L], output_size, kernel_size, dilation, padding, stride)`:
/// a scatter-add of every column entry to its image position (indices computed here).
pub(crate) fn col2im(cx: &mut Cx) -> R<V> {
    let x = cx.t("self")?;
    let os = n_ints(cx.ints("output_size")?, 2);
    let k = n_ints(cx.ints("kernel_size")?, 2);
    let dil = n_ints(cx.ints("dilation")?, 2);
    let pad = n_ints(cx.ints("padding")?, 2);
    let st = n_ints(cx.ints("stride")?, 2);
    let out_shape = cx.out_shape(0)?;
    let em = &mut *cx.em;
    let batched = x.rank() == 3;
    let x = if batched {
        x
    } else {
        let mut s = vec![1];
        s.extend(&x.shape);
        em.reshape(&x, &s)
    };
    let (nb, ck, l) = (x.shape[0], x.shape[1], x.shape[2]);
    let c = ck / (k[0] * k[1]);
    let bh = (os[0] + 2 * pad[0] - (dil[0] * (k[0] - 1) + 1)) / st[0] + 1;
    let bw = (os[1] + 2 * pad[1] - (dil[1] * (k[1] - 1) + 1)) / st[1] + 1;
    if bh * bw != l {
        return Err(format!("{l} columns do not match {bh}x{bw} blocks"));
    }
    let hw = os[0] * os[1];
    let dump = c * hw;
    let mut idx = Vec::with_capacity((ck * l) as usize);
    for ci in 0..c {
        for ki in 0..k[0] {
            for kj in 0..k[1] {
                for li in 0..l {
                    let y = (li / bw) * st[0] - pad[0] + ki * dil[0];
                    let xx = (li % bw) * st[1] - pad[1] + kj * dil[1];
                    idx.push(if y >= 0 && y < os[0] && xx >= 0 && xx < os[1] {
                        ci * hw + y * os[1] + xx
                    } else {
                        dump
                    });
                }
            }
        }
    }
    let cd = opmath(x.dtype);
    let xc = em.convert(&x, cd);
    let flat = em.reshape(&xc, &[nb, ck * l]);
    let upd = em.transpose(&flat, &[1, 0]);
    let iv = em.dense_i64(&[ck * l, 1], &idx);
    let zero = em.splat(cd, &[dump + 1, nb], Num::I(0));
    let dims = ScatterDims {
        update_window_dims: vec![1],
        inserted_window_dims: vec![0],
        scatter_dims_to_operand_dims: vec![0],
        index_vector_dim: 1,
    };
    let s = em.scatter(&zero, &iv, &upd, &dims, |em, a, b| em.add(a, b));
    let s = em.slice_dim(&s, 0, 0, dump, 1);
    let t = em.transpose(&s, &[1, 0]);
    let r = em.reshape(&t, &out_shape);
    Ok(em.convert(&r, x.dtype))
}
