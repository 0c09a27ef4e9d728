//! 2-D `f32` pooling over the last two dimensions: max (with torch's flat indices), average
//! (padding, `count_include_pad`, `divisor_override`, `ceil_mode` through the given output
//! size) and adaptive average. Planes run in parallel; each output is computed alone, so the
//! result does not depend on the thread count.

use super::math;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// What a pooling window computes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PoolKind {
    /// The maximum; padding counts as `-inf`, the first maximum wins and any NaN wins over
    /// numbers (a later NaN over an earlier one), as torch's CPU kernel. The optional indices
    /// are flat positions `iy * w + ix` in the input plane.
    Max,
    /// The mean, as torch's CPU `avg_pool2d`: the window is clipped to the padded input, and
    /// the divisor is `divisor_override`, else the clipped window size (`count_include_pad`),
    /// else the number of input elements in it; an empty window gives 0.
    Avg {
        /// Count padding positions in the divisor.
        count_include_pad: bool,
        /// A fixed divisor (never 0).
        divisor_override: Option<i64>,
    },
    /// `_adaptive_avg_pool2d`: window `[floor(o * in / out), ceil((o + 1) * in / out))` per
    /// dimension; kernel, stride, padding and dilation are ignored.
    AdaptiveAvg,
}

/// The geometry of one 2-D pooling: input `[planes, h, w]`, output `[planes, oh, ow]`, both
/// contiguous (`planes` is the product of the leading dimensions, e.g. `N * C`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolSpec {
    /// The window's reduction.
    pub kind: PoolKind,
    /// Independent planes.
    pub planes: usize,
    /// Input height.
    pub h: usize,
    /// Input width.
    pub w: usize,
    /// Output height (from torch's output-size rule, so `ceil_mode` is already in it).
    pub oh: usize,
    /// Output width.
    pub ow: usize,
    /// Window size (height, width).
    pub kernel: [usize; 2],
    /// Stride (height, width).
    pub stride: [usize; 2],
    /// Implicit padding on both sides (height, width).
    pub padding: [usize; 2],
    /// Dilation (height, width); max pooling only, 1 otherwise.
    pub dilation: [usize; 2],
}

/// Sizes beyond this are refused (keeps index arithmetic far from overflow).
const MAX_DIM: usize = 1 << 31;

/// torch's `pooling_output_shape`.
fn pool_out(n: usize, k: usize, s: usize, p: usize, d: usize, ceil: bool) -> Result<usize, String> {
    let (n, k, s, p, d) = (n as i64, k as i64, s as i64, p as i64, d as i64);
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
    Ok(out as usize)
}

impl PoolSpec {
    /// A max or average pooling with torch's output-size rule (`ceil_mode` included) and its
    /// argument checks; `Err` when the window does not fit.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        kind: PoolKind,
        planes: usize,
        hw: [usize; 2],
        kernel: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        ceil_mode: bool,
    ) -> Result<Self, String> {
        if kind == PoolKind::AdaptiveAvg {
            return Err("use PoolSpec::adaptive for adaptive pooling".into());
        }
        let all = [kernel, stride, padding, dilation, hw].concat();
        if all.iter().any(|&v| v > MAX_DIM) {
            return Err("pooling parameter beyond 2^31".into());
        }
        let mut o = [0; 2];
        for d in 0..2 {
            if kernel[d] == 0 || stride[d] == 0 || dilation[d] == 0 {
                return Err(format!(
                    "kernel {kernel:?}, stride {stride:?} and dilation {dilation:?} must be positive"
                ));
            }
            let span = dilation[d] * (kernel[d] - 1) + 1;
            if padding[d] > span / 2 {
                return Err(format!(
                    "padding {} must be at most half the kernel size {}",
                    padding[d], kernel[d]
                ));
            }
            o[d] = pool_out(
                hw[d],
                kernel[d],
                stride[d],
                padding[d],
                dilation[d],
                ceil_mode,
            )?;
        }
        let spec = PoolSpec {
            kind,
            planes,
            h: hw[0],
            w: hw[1],
            oh: o[0],
            ow: o[1],
            kernel,
            stride,
            padding,
            dilation,
        };
        spec.check()?;
        Ok(spec)
    }

    /// `_adaptive_avg_pool2d` from `[planes, h, w]` to `[planes, out[0], out[1]]`.
    pub fn adaptive(planes: usize, hw: [usize; 2], out: [usize; 2]) -> Result<Self, String> {
        let spec = PoolSpec {
            kind: PoolKind::AdaptiveAvg,
            planes,
            h: hw[0],
            w: hw[1],
            oh: out[0],
            ow: out[1],
            kernel: [1, 1],
            stride: [1, 1],
            padding: [0, 0],
            dilation: [1, 1],
        };
        spec.check()?;
        Ok(spec)
    }

    /// Elements of the input.
    pub fn input_len(&self) -> usize {
        self.planes * self.h * self.w
    }

    /// Elements of the output (and of the indices).
    pub fn output_len(&self) -> usize {
        self.planes * self.oh * self.ow
    }

    fn check(&self) -> Result<(), String> {
        let all = [
            [self.h, self.w, self.oh, self.ow],
            [
                self.kernel[0],
                self.kernel[1],
                self.stride[0],
                self.stride[1],
            ],
            [
                self.padding[0],
                self.padding[1],
                self.dilation[0],
                self.dilation[1],
            ],
        ]
        .concat();
        if all.iter().any(|&v| v > MAX_DIM) {
            return Err(format!("pooling {self:?} has a size beyond 2^31"));
        }
        let prod = |v: &[usize]| v.iter().try_fold(1usize, |a, &b| a.checked_mul(b));
        if prod(&[self.planes, self.h, self.w, 8]).is_none()
            || prod(&[self.planes, self.oh, self.ow, 8]).is_none()
        {
            return Err(format!("pooling {self:?} is too large"));
        }
        match &self.kind {
            PoolKind::AdaptiveAvg => {
                if self.planes > 0 && self.oh * self.ow > 0 && self.h * self.w == 0 {
                    return Err("cannot adaptively pool an empty input".into());
                }
            }
            kind => {
                if self.kernel.contains(&0)
                    || self.stride.contains(&0)
                    || self.dilation.contains(&0)
                {
                    return Err("kernel, stride and dilation must be positive".into());
                }
                if let PoolKind::Avg {
                    divisor_override: Some(0),
                    ..
                } = kind
                {
                    return Err("divisor_override must not be zero".into());
                }
                // Every window must start inside the padded input (torch's output-size rule
                // guarantees it; a corrupted spec might not).
                for (d, o) in [self.oh, self.ow].into_iter().enumerate() {
                    let size = [self.h, self.w][d];
                    if o > 0 && (o - 1) * self.stride[d] > size + 2 * self.padding[d] {
                        return Err(format!(
                            "output size {o} in spatial dimension {d} does not fit input size {size}"
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Checks the spec and that the buffers have the sizes it implies.
    pub fn validate(
        &self,
        x_len: usize,
        out_len: usize,
        indices_len: Option<usize>,
    ) -> Result<(), String> {
        self.check()?;
        if x_len != self.input_len() {
            return Err(format!(
                "pooling input has {x_len} elements, expected {}",
                self.input_len()
            ));
        }
        if out_len != self.output_len() {
            return Err(format!(
                "pooling output has {out_len} elements, expected {}",
                self.output_len()
            ));
        }
        if let Some(n) = indices_len {
            if self.kind != PoolKind::Max {
                return Err("only max pooling has indices".into());
            }
            if n != self.output_len() {
                return Err(format!(
                    "pooling indices have {n} elements, expected {}",
                    self.output_len()
                ));
            }
        }
        Ok(())
    }
}

/// The window of output `o` in one dimension for max pooling: first valid tap, end (exclusive
/// bound on the input index), dilation.
fn max_range(o: usize, s: usize, p: usize, k: usize, d: usize, n: usize) -> (usize, usize) {
    let start = (o * s) as i64 - p as i64;
    let end = (start + ((k - 1) * d) as i64 + 1).min(n as i64);
    let mut st = start;
    if st < 0 {
        st += ((-st) as usize).div_ceil(d) as i64 * d as i64;
    }
    (st as usize, end.max(0) as usize)
}

super::simd::multiversion! {
    /// Max pooling of one plane without indices: whole rows of taps at a time, so the loop
    /// over output columns vectorizes (strided loads; with column stride 2 on AVX-512,
    /// [`avx512::stride2_row`]); the columns whose window crosses the padding go one by one.
    /// Each output takes its taps in the same order on every path (rows, then columns), so
    /// the values are the indexed path's (NaN wins, as in PyTorch).
    fn max_plane(spec: &PoolSpec, xp: &[f32], o: &mut [f32]) => max_plane_body
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    /// `math::max_nan(v, t)` on 16 lanes, bitwise.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn max_nan(v: __m512, t: __m512) -> __m512 {
        let m = _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_GT_OQ>(v, t), t, v);
        let m = _mm512_mask_mov_ps(m, _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(t, t), t);
        _mm512_mask_mov_ps(m, _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v), v)
    }

    /// One input row's taps into a run of outputs whose windows lie inside the row, for
    /// column stride 2 and dilation 1: `out[j] = max_nan(out[j], row[first + 2j + kx])` for
    /// `kx` in `0..kw`, in that order (the portable loop's, so the same bits). Sixteen outputs
    /// take one permute of two loads per tap (`vpermt2ps` picking the even elements), instead
    /// of strided loads the compiler makes element by element.
    ///
    /// # Safety
    /// The CPU must have AVX-512F; `first + 2 * (out.len() - 1) + kw - 1 < row.len()`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn stride2_row(out: &mut [f32], row: &[f32], first: usize, kw: usize) {
        let n = out.len();
        let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let (rp, op) = (row.as_ptr(), out.as_mut_ptr());
        // Row elements `at..at + 16` under a mask of those inside the row (others load 0,
        // and only feed lanes past the outputs').
        let load = |at: usize| {
            let k = row.len().saturating_sub(at).min(16);
            let mask = if k == 16 {
                !0
            } else {
                ((1u32 << k) - 1) as __mmask16
            };
            // SAFETY: the masked lanes lie inside `row`.
            unsafe { _mm512_maskz_loadu_ps(mask, rp.add(at.min(row.len()))) }
        };
        let mut j = 0;
        while j < n {
            let k = (n - j).min(16);
            let mask: __mmask16 = if k == 16 { !0 } else { (1u16 << k) - 1 };
            // SAFETY: `j + k <= n` outputs.
            let mut v = unsafe { _mm512_maskz_loadu_ps(mask, op.add(j)) };
            for kx in 0..kw {
                let at = first + 2 * j + kx;
                let t = _mm512_permutex2var_ps(load(at), even, load(at + 16));
                v = max_nan(v, t);
            }
            // SAFETY: as above.
            unsafe { _mm512_mask_storeu_ps(op.add(j), mask, v) };
            j += 16;
        }
    }
}

#[inline(always)]
fn max_plane_body(spec: &PoolSpec, xp: &[f32], o: &mut [f32]) {
    let (ih, iw, oh, ow) = (spec.h, spec.w, spec.oh, spec.ow);
    let [kh, kw] = spec.kernel;
    let [sh, sw] = spec.stride;
    let [ph, pw] = spec.padding;
    let [dh, dw] = spec.dilation;
    // Output columns whose whole window is inside the row: ox*sw >= pw and
    // ox*sw - pw + (kw-1)*dw < iw.
    let lo = pw.div_ceil(sw).min(ow);
    let span = (kw - 1) * dw;
    let hi = if iw + pw > span {
        ((iw + pw - span - 1) / sw + 1).clamp(lo, ow)
    } else {
        lo
    };
    for (oy, orow) in o.chunks_exact_mut(ow).enumerate().take(oh) {
        let (y0, y1) = max_range(oy, sh, ph, kh, dh, ih);
        orow.fill(f32::NEG_INFINITY);
        let mut y = y0;
        while y < y1 {
            let row = &xp[y * iw..(y + 1) * iw];
            #[cfg(target_arch = "x86_64")]
            if hi > lo && sw == 2 && dw == 1 && super::simd::has_avx512() {
                // SAFETY: the CPU has AVX-512F; the windows of outputs `lo..hi` lie inside
                // the row, so the last tap `(hi - 1) * 2 - pw + kw - 1` is in it.
                unsafe { avx512::stride2_row(&mut orow[lo..hi], row, lo * 2 - pw, kw) };
                edge_columns(orow, row, (lo, hi), spec);
                y += dh;
                continue;
            }
            if hi > lo && kw == 2 && sw == 2 && dw == 1 {
                // The usual 2x2/2 window: both taps of each column from one pair of floats
                // (contiguous loads the compiler deinterleaves).
                let first = lo * 2 - pw;
                let pairs = row[first..first + 2 * (hi - lo)].chunks_exact(2);
                for (v, t) in orow[lo..hi].iter_mut().zip(pairs) {
                    *v = math::max_nan(math::max_nan(*v, t[0]), t[1]);
                }
            } else {
                for kx in (0..kw).filter(|_| hi > lo) {
                    let first = lo * sw + kx * dw - pw;
                    let taps = row[first..].iter().step_by(sw);
                    for (v, &t) in orow[lo..hi].iter_mut().zip(taps) {
                        *v = math::max_nan(*v, t);
                    }
                }
            }
            edge_columns(orow, row, (lo, hi), spec);
            y += dh;
        }
    }
}

/// One input row's taps into the outputs outside `lo..hi` (whose windows cross the padding),
/// one by one.
#[inline(always)]
fn edge_columns(orow: &mut [f32], row: &[f32], (lo, hi): (usize, usize), spec: &PoolSpec) {
    let (sw, pw, kw, dw) = (
        spec.stride[1],
        spec.padding[1],
        spec.kernel[1],
        spec.dilation[1],
    );
    for ox in (0..lo).chain(hi..orow.len()) {
        let (x0, x1) = max_range(ox, sw, pw, kw, dw, spec.w);
        let mut xx = x0;
        while xx < x1 {
            orow[ox] = math::max_nan(orow[ox], row[xx]);
            xx += dw;
        }
    }
}

/// `out = pool(x)` (and, for max pooling, the flat argmax `indices`).
///
/// # Panics
/// If [`PoolSpec::validate`] fails for these buffers: callers validate first.
pub fn pool2d(spec: &PoolSpec, x: &[f32], out: &mut [f32], indices: Option<&mut [i64]>) {
    if let Err(e) = spec.validate(x.len(), out.len(), indices.as_ref().map(|i| i.len())) {
        panic!("invalid pooling: {e}");
    }
    let (ih, iw, oh, ow) = (spec.h, spec.w, spec.oh, spec.ow);
    let (ip, op) = (ih * iw, oh * ow);
    if out.is_empty() {
        return;
    }
    // Planes per job: about 64K outputs each.
    let per = (65536 / op.max(1)).max(1);
    let plane = |pl: usize| &x[pl * ip..(pl + 1) * ip];
    match &spec.kind {
        PoolKind::Max => {
            let [kh, kw] = spec.kernel;
            let [sh, sw] = spec.stride;
            let [ph, pw] = spec.padding;
            let [dh, dw] = spec.dilation;
            let cols: Vec<(usize, usize)> = (0..ow)
                .map(|ox| max_range(ox, sw, pw, kw, dw, iw))
                .collect();
            let one = |pl: usize, o: &mut [f32], mut idx: Option<&mut [i64]>| {
                let xp = plane(pl);
                for oy in 0..oh {
                    let (y0, y1) = max_range(oy, sh, ph, kh, dh, ih);
                    for (ox, &(x0, x1)) in cols.iter().enumerate() {
                        let mut best = (y0 * iw + x0) as i64;
                        let mut m = f32::NEG_INFINITY;
                        let mut y = y0;
                        while y < y1 {
                            let row = &xp[y * iw..(y + 1) * iw];
                            let mut xx = x0;
                            while xx < x1 {
                                let v = row[xx];
                                if v > m || v.is_nan() {
                                    m = v;
                                    best = (y * iw + xx) as i64;
                                }
                                xx += dw;
                            }
                            y += dh;
                        }
                        o[oy * ow + ox] = m;
                        if let Some(ix) = idx.as_deref_mut() {
                            ix[oy * ow + ox] = best;
                        }
                    }
                }
            };
            match indices {
                Some(ind) => out
                    .par_chunks_mut(per * op)
                    .zip(ind.par_chunks_mut(per * op))
                    .enumerate()
                    .for_each(|(j, (o, ix))| {
                        for (q, (o, ix)) in o.chunks_mut(op).zip(ix.chunks_mut(op)).enumerate() {
                            one(j * per + q, o, Some(ix));
                        }
                    }),
                None => out.par_chunks_mut(per * op).enumerate().for_each(|(j, o)| {
                    for (q, o) in o.chunks_mut(op).enumerate() {
                        max_plane(spec, plane(j * per + q), o);
                    }
                }),
            }
        }
        PoolKind::Avg {
            count_include_pad,
            divisor_override,
        } => {
            let (cip, dov) = (*count_include_pad, *divisor_override);
            // Per dimension: clipped [start, end), window size clipped to the padded input.
            let ranges = |o: usize, d: usize, n: usize| {
                let s = (o * spec.stride[d]) as i64 - spec.padding[d] as i64;
                let e = (s + spec.kernel[d] as i64).min((n + spec.padding[d]) as i64);
                let size = e - s;
                let (a, b) = (s.max(0), e.min(n as i64));
                (a as usize, b.max(a) as usize, size)
            };
            let rows: Vec<_> = (0..oh).map(|o| ranges(o, 0, ih)).collect();
            let cols: Vec<_> = (0..ow).map(|o| ranges(o, 1, iw)).collect();
            out.par_chunks_mut(per * op).enumerate().for_each(|(j, o)| {
                for (q, o) in o.chunks_mut(op).enumerate() {
                    let xp = plane(j * per + q);
                    for (oy, &(y0, y1, sy)) in rows.iter().enumerate() {
                        for (ox, &(x0, x1, sx)) in cols.iter().enumerate() {
                            let mut sum = 0.0f32;
                            for y in y0..y1 {
                                for v in &xp[y * iw + x0..y * iw + x1] {
                                    sum += v;
                                }
                            }
                            let count = (y1 - y0) * (x1 - x0);
                            let div = match dov {
                                Some(d) => d as f32,
                                None if cip => (sy * sx) as f32,
                                None => count as f32,
                            };
                            o[oy * ow + ox] = if count == 0 { 0.0 } else { sum / div };
                        }
                    }
                }
            });
        }
        PoolKind::AdaptiveAvg => {
            let range = |i: usize, n: usize, o: usize| ((i * n) / o, ((i + 1) * n).div_ceil(o));
            let rows: Vec<_> = (0..oh).map(|o| range(o, ih, oh)).collect();
            let cols: Vec<_> = (0..ow).map(|o| range(o, iw, ow)).collect();
            out.par_chunks_mut(per * op).enumerate().for_each(|(j, o)| {
                for (q, o) in o.chunks_mut(op).enumerate() {
                    let xp = plane(j * per + q);
                    for (oy, &(y0, y1)) in rows.iter().enumerate() {
                        for (ox, &(x0, x1)) in cols.iter().enumerate() {
                            let mut sum = 0.0f32;
                            for y in y0..y1 {
                                for v in &xp[y * iw + x0..y * iw + x1] {
                                    sum += v;
                                }
                            }
                            o[oy * ow + ox] = sum / ((y1 - y0) * (x1 - x0)) as f32;
                        }
                    }
                }
            });
        }
    }
}
