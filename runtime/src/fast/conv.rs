//! 2-D `f32` convolution, NCHW, grouped (incl. depthwise), strided, padded and dilated.
//!
//! Per image and group the convolution is the product `out[g] = W[g] @ cols`, with `W[g]` the
//! `cout/groups x (cin/groups * KH * KW)` weights and `cols` the im2col matrix of the input.
//! The output positions are cut into column tiles of a size that depends on the shape only;
//! each tile's im2col slice is built in a per-worker scratch buffer small enough to stay in L2,
//! multiplied by the packed GEMM ([`super::sgemm`]) straight into the output, and gets its bias
//! and the caller's epilogue while hot. A
//! 1x1 stride-1 unpadded convolution reads the input directly (no im2col). Convolutions with
//! one input channel per group (depthwise) use a direct kernel instead, and 3x3 stride-1 ones
//! on AVX-512 CPUs run as Winograd `F(2x2, 3x3)` ([`super::winograd`]). No reduction is
//! split, so results are bitwise the same for any thread count.

use super::gemm::Tile;
use super::memory::LineVec;
use super::sgemm::{self, Mat, PackedA, PackedB, Problem};
use super::SendPtr;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// The geometry of one 2-D convolution. Input `[n, cin, h, w]`, weight
/// `[cout, cin / groups, kh, kw]`, optional bias `[cout]`, output `[n, cout, oh, ow]`, all
/// contiguous.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConvSpec {
    /// Images in the batch.
    pub n: usize,
    /// Input channels.
    pub cin: usize,
    /// Input height.
    pub h: usize,
    /// Input width.
    pub w: usize,
    /// Output channels.
    pub cout: usize,
    /// Kernel height.
    pub kh: usize,
    /// Kernel width.
    pub kw: usize,
    /// Output height.
    pub oh: usize,
    /// Output width.
    pub ow: usize,
    /// Stride (height, width).
    pub stride: [usize; 2],
    /// Zero padding on both sides (height, width).
    pub padding: [usize; 2],
    /// Dilation (height, width).
    pub dilation: [usize; 2],
    /// Channel groups: `cin` and `cout` are both multiples of it (depthwise: `groups == cin`).
    pub groups: usize,
}

/// Sizes beyond this are refused by [`ConvSpec::validate`] (keeps index arithmetic far from
/// overflow).
const MAX_DIM: usize = 1 << 31;

impl ConvSpec {
    /// The geometry of a convolution of input `x = [n, cin, h, w]` with weight
    /// `w = [cout, cin / groups, kh, kw]`; `Err` if they do not fit.
    pub fn new(
        x: [usize; 4],
        w: [usize; 4],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        groups: usize,
    ) -> Result<Self, String> {
        if groups == 0 || x[1] != w[1] * groups || !w[0].is_multiple_of(groups) {
            return Err(format!(
                "input {x:?} and weight {w:?} do not fit groups={groups}"
            ));
        }
        if stride.contains(&0) || dilation.contains(&0) {
            return Err(format!(
                "stride {stride:?} and dilation {dilation:?} must be positive"
            ));
        }
        let params = [x, w].concat();
        let params = params
            .iter()
            .chain(&stride)
            .chain(&padding)
            .chain(&dilation);
        if params.copied().any(|v| v > MAX_DIM) {
            return Err("convolution parameter beyond 2^31".into());
        }
        let mut o = [0usize; 2];
        for d in 0..2 {
            let (size, k) = (x[2 + d], w[2 + d]);
            let span = dilation[d]
                .checked_mul(k.saturating_sub(1))
                .and_then(|s| s.checked_add(1))
                .ok_or("convolution window overflows")?;
            let padded = size
                .checked_add(2 * padding[d])
                .ok_or("convolution padding overflows")?;
            if k == 0 || padded < span {
                return Err(format!(
                    "kernel of size {k} (dilated {span}) does not fit the padded input size {padded}"
                ));
            }
            o[d] = (padded - span) / stride[d] + 1;
        }
        let spec = ConvSpec {
            n: x[0],
            cin: x[1],
            h: x[2],
            w: x[3],
            cout: w[0],
            kh: w[2],
            kw: w[3],
            oh: o[0],
            ow: o[1],
            stride,
            padding,
            dilation,
            groups,
        };
        spec.check_geometry()?;
        Ok(spec)
    }

    /// Elements of the input.
    pub fn input_len(&self) -> usize {
        self.n * self.cin * self.h * self.w
    }

    /// Elements of the weight.
    pub fn weight_len(&self) -> usize {
        self.cout * (self.cin / self.groups.max(1)) * self.kh * self.kw
    }

    /// Elements of the output.
    pub fn output_len(&self) -> usize {
        self.n * self.cout * self.oh * self.ow
    }

    /// Multiply-adds times two.
    pub fn flops(&self) -> usize {
        2 * self.output_len() * (self.cin / self.groups.max(1)) * self.kh * self.kw
    }

    fn check_geometry(&self) -> Result<(), String> {
        let dims = [
            self.n,
            self.cin,
            self.h,
            self.w,
            self.cout,
            self.kh,
            self.kw,
            self.oh,
            self.ow,
            self.stride[0],
            self.stride[1],
            self.padding[0],
            self.padding[1],
            self.dilation[0],
            self.dilation[1],
            self.groups,
        ];
        if dims.iter().any(|&d| d > MAX_DIM) {
            return Err(format!("convolution {self:?} has a size beyond 2^31"));
        }
        let g = self.groups;
        if g == 0 || !self.cin.is_multiple_of(g) || !self.cout.is_multiple_of(g) {
            return Err(format!(
                "groups={g} must divide cin={} and cout={}",
                self.cin, self.cout
            ));
        }
        if self.stride.contains(&0) || self.dilation.contains(&0) || self.kh == 0 || self.kw == 0 {
            return Err("stride, dilation and kernel size must be positive".into());
        }
        // Sizes must fit in memory-sized products.
        let prod = |v: &[usize]| v.iter().try_fold(1usize, |a, &b| a.checked_mul(b));
        let fits = prod(&[self.n, self.cin, self.h, self.w]).is_some()
            && prod(&[self.n, self.cout, self.oh, self.ow]).is_some()
            && prod(&[self.cout, self.cin / g, self.kh, self.kw]).is_some()
            && prod(&[self.cin / g, self.kh, self.kw, self.oh, self.ow, 4]).is_some();
        if !fits {
            return Err(format!("convolution {self:?} is too large"));
        }
        // The output size must be the one the window gives (a larger one would read outside the
        // padded input).
        for (d, (size, k, o)) in [(self.h, self.kh, self.oh), (self.w, self.kw, self.ow)]
            .into_iter()
            .enumerate()
        {
            let span = self.dilation[d] * (k - 1) + 1;
            let padded = size + 2 * self.padding[d];
            if padded < span || o != (padded - span) / self.stride[d] + 1 {
                return Err(format!(
                    "output size {o} in spatial dimension {d} does not match the window \
                     (input {size}, kernel {k}, stride {}, padding {}, dilation {})",
                    self.stride[d], self.padding[d], self.dilation[d]
                ));
            }
        }
        Ok(())
    }

    /// Checks the geometry and that the buffers have exactly the sizes it implies (a bias, when
    /// given, has `cout` elements).
    pub fn validate(
        &self,
        x_len: usize,
        w_len: usize,
        bias_len: Option<usize>,
        out_len: usize,
    ) -> Result<(), String> {
        self.check_geometry()?;
        for (what, got, want) in [
            ("input", x_len, self.input_len()),
            ("weight", w_len, self.weight_len()),
            ("output", out_len, self.output_len()),
        ] {
            if got != want {
                return Err(format!(
                    "convolution {what} has {got} elements, expected {want}"
                ));
            }
        }
        if let Some(b) = bias_len {
            if b != self.cout {
                return Err(format!(
                    "convolution bias has {b} elements, expected {}",
                    self.cout
                ));
            }
        }
        Ok(())
    }

    /// Output positions per column tile: the im2col slice (`cin/groups * kh * kw` rows) is kept
    /// near 256 KiB. Depends on the shape only.
    pub fn tile_cols(&self) -> usize {
        let k = (self.cin / self.groups) * self.kh * self.kw;
        let p = self.oh * self.ow;
        let t = (65536 / k.max(1)).clamp(64, 2048).next_multiple_of(32);
        t.min(p.max(1))
    }

    /// Whether the image runs as an implicit GEMM reading a zero-padded input (stride 1 or 2,
    /// rows of whole 16-position micro-panels, on a CPU with that kernel), not im2col tiles.
    fn implicit_ok(&self) -> bool {
        let cin_g = self.cin / self.groups.max(1);
        self.stride.iter().all(|&s| s <= 2)
            && !self.is_pointwise()
            && cin_g > 1
            && self.ow.is_multiple_of(16)
            && self.oh * self.ow > SMALL_OUTPUT
            && sgemm::has_indirect()
    }

    /// Whether the convolution runs as Winograd `F(2x2, 3x3)` (see [`super::winograd`]).
    fn winograd(&self) -> bool {
        #[cfg(target_arch = "x86_64")]
        return super::winograd::applies(self);
        #[cfg(not(target_arch = "x86_64"))]
        false
    }

    fn is_pointwise(&self) -> bool {
        self.kh == 1 && self.kw == 1 && self.stride == [1, 1] && self.padding == [0, 0]
    }
}

thread_local! {
    static SCRATCH: RefCell<LineVec<f32>> = RefCell::new(LineVec::new(64));
}

/// The convolution `out = conv(x, w) + bias`.
///
/// `epilogue(tile)` is called on each finished tile of the output, viewed as the matrix
/// `[n * cout, oh * ow]` (bias applied), from the worker that computed it while the tile is in
/// cache; the tiles cover the output exactly once.
///
/// # Errors
/// When its scratch memory cannot be allocated (near the process's memory limit); the output
/// is then partly written.
///
/// # Panics
/// If [`ConvSpec::validate`] fails for these buffers: callers validate first.
pub fn conv2d(
    spec: &ConvSpec,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
    epilogue: &(dyn Fn(&mut Tile) + Sync),
) -> Result<(), String> {
    conv2d_prepacked(spec, x, w, None, Post { bias, relu: false }, out, epilogue)
}

/// What a convolution applies itself to its output, in this order, before the epilogue: the
/// bias per output channel, then a ReLU (fused into the GEMM's store where it can).
#[derive(Clone, Copy, Debug, Default)]
pub struct Post<'a> {
    /// `cout` values.
    pub bias: Option<&'a [f32]>,
    /// `max(x, 0)`, NaN propagating.
    pub relu: bool,
}

/// Weights packed once for the GEMMs of a convolution (constant weights).
pub struct ConvPacked {
    /// Per group, the `cout/groups x k` weights as the left operand.
    a: Vec<PackedA>,
    /// Per group, their transpose as the right operand, for outputs of at most
    /// [`SMALL_OUTPUT`] positions: those run as `out^T = cols^T @ W^T`, so the few positions
    /// pad the micro-kernel's short side instead of its 32-wide one.
    wt: Option<Vec<PackedB>>,
    /// The Winograd transforms of the weights, where [`super::winograd::applies`].
    #[cfg(target_arch = "x86_64")]
    wino: Option<super::winograd::WinogradWeights>,
}

/// Multiply-adds (times two) of a convolution's product from which it is split over the pool
/// when the convolution has few products (one image of a late layer). On 2 threads of a Zen 4
/// (`fxhlo bench`, 3x3 convolutions of one image, alternating runs): 4.7 MFLOP products ran
/// as fast split (64 channels, 8x8) or 1.2-1.6x slower (128 and 256 channels over 4x4 and 2x2,
/// run transposed); 19 MFLOP ones 1.03-1.23x faster, 58-75 MFLOP ones 1.5x; the resnet18
/// testdata model, all of whose products are below 1.2 MFLOP, 0.524 -> 0.461 ms unsplit.
const SPLIT_FLOPS: f64 = 8e6;

/// Output elements from which a convolution of fewer than [`SPLIT_FLOPS`] is split over the
/// pool all the same: where few multiply-adds make each output (depthwise convolutions, a
/// 3-channel stem) the stores and the fused epilogue are the work. mobilenet_v3_small on 2
/// threads (`fxhlo bench`, fastest of 40 runs on a loaded machine, two alternating runs): 3.8
/// and 3.6 ms splitting by multiply-adds alone, 3.1 and 3.3 ms with this.
const SPLIT_OUTPUTS: usize = 50_000;

/// Runs `f(j)` for the jobs `j` in `0..n` of a convolution: on the pool, or in order on this
/// thread when the whole convolution is below [`SPLIT_FLOPS`] and [`SPLIT_OUTPUTS`], where
/// waking another worker costs more than it saves (resnet18's 7x7 stem of 16 channels, 4.8 MFLOP, took 0.052 ms on
/// one thread and 0.061 split over two). Each job computes its outputs alone, so the bits do
/// not depend on the choice. The first error of a job (its scratch could not be allocated) is
/// returned, and the jobs not yet started are skipped.
pub(super) fn try_for_jobs(
    spec: &ConvSpec,
    n: usize,
    f: impl Fn(usize) -> Result<(), String> + Send + Sync,
) -> Result<(), String> {
    let first = Mutex::new(None);
    let failed = AtomicBool::new(false);
    let run = |j: usize| {
        if failed.load(Ordering::Relaxed) {
            return;
        }
        if let Err(e) = f(j) {
            failed.store(true, Ordering::Relaxed);
            first
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get_or_insert(e);
        }
    };
    let small = (spec.flops() as f64) < SPLIT_FLOPS && spec.output_len() < SPLIT_OUTPUTS;
    if small || n < 2 {
        (0..n).for_each(run);
    } else {
        (0..n).into_par_iter().for_each(run);
    }
    match first
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
    {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The first `len` floats of the scratch `v` (grown zeroed as needed, 64-byte aligned), or
/// an error naming the size if the allocation fails.
pub(super) fn try_aligned(v: &mut LineVec<f32>, len: usize) -> Result<&mut [f32], String> {
    super::memory::try_grow_zeroed(v, len).map_err(|e| format!("convolution scratch: {e}"))?;
    Ok(&mut v[..len])
}

/// `n` zeros, or an error naming the size if the allocation fails.
fn try_vec<T: Clone>(n: usize, zero: T, what: &str) -> Result<Vec<T>, String> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|e| {
        format!(
            "convolution {what}: cannot allocate {n} elements of {} bytes: {e}",
            std::mem::size_of::<T>()
        )
    })?;
    v.resize(n, zero);
    Ok(v)
}

/// Output positions per image up to which a convolution runs transposed (see [`ConvPacked`]).
const SMALL_OUTPUT: usize = 16;

/// Packs the weights of each group for the GEMM once (constant weights), where the
/// convolution runs as GEMMs (not depthwise). `w` must pass [`ConvSpec::validate`].
pub fn prepack_weights(spec: &ConvSpec, w: &[f32]) -> Option<ConvPacked> {
    let g = spec.groups;
    let (cin_g, cout_g) = (spec.cin / g, spec.cout / g);
    let kdim = cin_g * spec.kh * spec.kw;
    if cin_g == 1 || kdim == 0 || cout_g == 0 || w.len() != spec.weight_len() {
        return None;
    }
    let block = |grp: usize| &w[grp * cout_g * kdim..(grp + 1) * cout_g * kdim];
    // SAFETY: each block is the `cout_g x kdim` weight block of a group.
    let a = (0..g)
        .map(|grp| unsafe {
            PackedA::new(
                &Mat::new(block(grp).as_ptr(), kdim as isize, 1),
                cout_g,
                kdim,
            )
        })
        .collect();
    let small = spec.oh * spec.ow <= SMALL_OUTPUT.min(sgemm::arch().nr);
    // SAFETY: as above; element (l, co) of the transpose is `block[co * kdim + l]`.
    let wt = small.then(|| {
        (0..g)
            .map(|grp| unsafe {
                PackedB::new(
                    &Mat::new(block(grp).as_ptr(), 1, kdim as isize),
                    kdim,
                    cout_g,
                )
            })
            .collect()
    });
    Some(ConvPacked {
        a,
        wt,
        #[cfg(target_arch = "x86_64")]
        wino: super::winograd::transform_weights(spec, w),
    })
}

/// [`conv2d`] with the weights packed by [`prepack_weights`] (then `w` is only checked), and
/// the bias and a ReLU as `post`.
///
/// # Errors
/// As [`conv2d`].
///
/// # Panics
/// If [`ConvSpec::validate`] fails for these buffers, or `packed` does not fit the spec.
pub fn conv2d_prepacked(
    spec: &ConvSpec,
    x: &[f32],
    w: &[f32],
    packed: Option<&ConvPacked>,
    post: Post<'_>,
    out: &mut [f32],
    epilogue: &(dyn Fn(&mut Tile) + Sync),
) -> Result<(), String> {
    let bias = post.bias;
    if let Some(pk) = packed {
        let (cout_g, kdim) = (
            spec.cout / spec.groups.max(1),
            (spec.cin / spec.groups.max(1)) * spec.kh * spec.kw,
        );
        let fits = pk.a.len() == spec.groups
            && pk.a.iter().all(|a| a.m == cout_g && a.k == kdim)
            && pk.wt.as_ref().is_none_or(|wt| {
                wt.len() == spec.groups && wt.iter().all(|b| b.k == kdim && b.n == cout_g)
            });
        assert!(fits, "prepacked weights do not fit the convolution");
    }
    if let Err(e) = spec.validate(x.len(), w.len(), bias.map(|b| b.len()), out.len()) {
        panic!("invalid convolution: {e}");
    }
    if out.is_empty() {
        return Ok(());
    }
    let img_in = spec.cin * spec.h * spec.w;
    let cin_g = spec.cin / spec.groups;
    let optr = SendPtr(out.as_mut_ptr());
    // The implicit GEMM needs packed weights: pack them for this call if they were not.
    let packed_now = match packed {
        None if spec.implicit_ok() || spec.winograd() => prepack_weights(spec, w),
        _ => None,
    };
    let packed = packed.or(packed_now.as_ref());
    try_for_jobs(spec, spec.n, |i| {
        let ximg = &x[i * img_in..(i + 1) * img_in];
        if cin_g == 1 {
            depthwise_image(spec, i, ximg, w, post, optr, epilogue)
        } else {
            gemm_image(spec, i, ximg, (w, packed), post, optr, epilogue)
        }
    })
}

/// Image `img` by im2col tiles and GEMM; `out` is the whole output.
fn gemm_image(
    spec: &ConvSpec,
    img: usize,
    x: &[f32],
    (w, packed): (&[f32], Option<&ConvPacked>),
    post: Post<'_>,
    out: SendPtr,
    epilogue: &(dyn Fn(&mut Tile) + Sync),
) -> Result<(), String> {
    #[cfg(target_arch = "x86_64")]
    if let Some(ww) = packed.and_then(|pk| pk.wino.as_ref()) {
        return super::winograd::image(spec, img, x, ww, post, out, epilogue);
    }
    if let (true, Some(pk)) = (spec.implicit_ok(), packed) {
        return implicit_image(spec, img, x, pk, post, out, epilogue);
    }
    let g = spec.groups;
    let (cin_g, cout_g) = (spec.cin / g, spec.cout / g);
    let kdim = cin_g * spec.kh * spec.kw;
    let p = spec.oh * spec.ow;
    let hw = spec.h * spec.w;
    let tile = spec.tile_cols();
    let tiles = p.div_ceil(tile);
    let pointwise = spec.is_pointwise();
    // Few jobs in all (e.g. one image of a late, small-spatial layer) of enough work: split
    // each product over the pool as well (the GEMM never splits `k`, so the bits stay the
    // same). Below `SPLIT_FLOPS` waking the other workers costs more than it saves.
    let flops = 2.0 * cout_g as f64 * tile as f64 * kdim as f64;
    let inner = spec.n * g * tiles < 4 && flops >= SPLIT_FLOPS;
    try_for_jobs(spec, g * tiles, |job| {
        let (grp, t) = (job / tiles, job % tiles);
        let p0 = t * tile;
        let nt = tile.min(p - p0);
        let wg = &w[grp * cout_g * kdim..(grp + 1) * cout_g * kdim];
        let xg = &x[grp * cin_g * hw..(grp + 1) * cin_g * hw];
        let row0 = img * spec.cout + grp * cout_g;
        // SAFETY: the job writes rows `row0..row0+cout_g`, columns `p0..p0+nt` of the output
        // viewed as `[n * cout, p]`; jobs own disjoint (image, group, tile) rectangles.
        let dst = unsafe { out.get().add(row0 * p + p0) };
        let prepacked_w = packed;
        let run = |b: &[f32], b_rs: usize, packed: bool| {
            let mut prob = Problem::new(
                cout_g,
                nt,
                kdim,
                Mat::new(wg.as_ptr(), kdim as isize, 1),
                Mat::new(b.as_ptr(), b_rs as isize, 1),
                dst,
                p,
            );
            if packed {
                prob.packed_b = b.as_ptr();
            }
            if let Some(pw) = prepacked_w {
                prob.packed_a = pw.a[grp].as_ptr();
            }
            // SAFETY: `b` holds `kdim` rows of `nt` columns at row stride `b_rs`, or their
            // packed layout; `wg` is `cout_g x kdim`; `dst` as above, disjoint from both.
            unsafe { multiply(&prob, inner) }
        };
        // Few positions with the weights' transpose packed: `out^T = cols^T @ W^T` into a
        // scratch tile, then transposed into place.
        let wt = packed
            .and_then(|pk| pk.wt.as_ref())
            .filter(|_| nt <= SMALL_OUTPUT);
        let transposed = |cols: Mat| -> Result<(), String> {
            let wt = wt.expect("checked by the caller");
            let mut ct = try_vec(nt * cout_g, 0f32, "transposed tile")?;
            let mut prob = Problem::new(nt, cout_g, kdim, cols, cols, ct.as_mut_ptr(), cout_g);
            prob.packed_b = wt[grp].as_ptr();
            // SAFETY: `cols` reads `nt x kdim` elements of the job's own input or scratch;
            // the transposed weights are `kdim x cout_g`; `ct` is the `nt x cout_g` result.
            unsafe { multiply(&prob, inner) }?;
            for (q, row) in ct.chunks_exact(cout_g).enumerate() {
                for (co, &v) in row.iter().enumerate() {
                    // SAFETY: inside this job's rectangle (see `dst`).
                    unsafe { *dst.add(co * p + q) = v };
                }
            }
            Ok(())
        };
        if pointwise && wt.is_some() {
            transposed(Mat::new(xg[p0..].as_ptr(), 1, hw as isize))?;
        } else if pointwise {
            run(&xg[p0..], hw, false)?;
        } else if wt.is_some() && gathers_rows(spec) {
            // Few positions: row `l` of the im2col matrix as `nt` values at `l * nt` (the
            // transposed product's `A`), no zero columns up to the panel width.
            let mut cols =
                SCRATCH.with(|s| std::mem::replace(&mut *s.borrow_mut(), LineVec::new(64)));
            let res = try_aligned(&mut cols, kdim * nt).and_then(|data| {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `gathers_rows` checked the CPU; `data` holds `kdim` rows of `nt`.
                unsafe {
                    im2col_gather(spec, xg, cin_g, p0, nt, Dest::Rows(&mut *data))?
                };
                transposed(Mat::new(data.as_ptr(), 1, nt as isize))
            });
            SCRATCH.with(|s| *s.borrow_mut() = cols);
            res?;
        } else {
            // im2col straight into the GEMM's packed layout.
            let len = PackedB::len_for(kdim, nt);
            let mut cols =
                SCRATCH.with(|s| std::mem::replace(&mut *s.borrow_mut(), LineVec::new(64)));
            let res = try_aligned(&mut cols, len).and_then(|data| {
                im2col(
                    spec,
                    xg,
                    cin_g,
                    p0,
                    nt,
                    &mut Packed::new(&mut *data, kdim, nt),
                )?;
                if wt.is_some() {
                    // One panel of `nr >= nt` columns: row `l` of the im2col matrix is at
                    // `l * nr`.
                    transposed(Mat::new(data.as_ptr(), 1, sgemm::arch().nr as isize))
                } else {
                    run(data, nt, true)
                }
            });
            SCRATCH.with(|s| *s.borrow_mut() = cols);
            res?;
        }
        // SAFETY: this job's rectangle, as above.
        let mut tile = unsafe { Tile::new(out.get(), p, row0..row0 + cout_g, p0..p0 + nt) };
        for co in 0..cout_g {
            let bv = post.bias.map(|b| b[grp * cout_g + co]);
            apply_post(tile.row(row0 + co), bv, post.relu);
        }
        epilogue(&mut tile);
        Ok(())
    })
}

/// Bytes of zero-padded input per band of [`implicit_image`]: about a quarter of L2, so that
/// the band stays there while its tiles read it.
const BAND_BYTES: usize = 512 << 10;

/// Image `img` as an implicit GEMM (see [`sgemm::gemm_indirect`]), in bands of whole output
/// rows: each band's input rows (with the rows above and below that its taps reach) are
/// copied zero-padded into a buffer of about [`BAND_BYTES`], which the band's tiles then read
/// their taps from while it is in L2. (A whole padded image, 2 MiB for 32 channels of 128 x
/// 128, left L2 before its tiles read it.) The bias and a ReLU are applied in the micro-kernel
/// as each tile is stored.
///
/// With strides `sh x sw`, each channel's padded input is split into `sh * sw` phase planes:
/// phase `(py, px)` holds the padded elements `(Y, X)` with `Y % sh == py` and `X % sw ==
/// px`, at `(Y / sh, X / sw)`. Output position `(oy, ox)` reads its tap `(ky, kx)` at `(oy *
/// sh + ky * dh, ox * sw + kx * dw)`, which is element `(oy + ky * dh / sh, ox + kx * dw /
/// sw)` of one phase plane, the same for every position: 16 positions of an output row read
/// 16 consecutive elements of it, as with stride 1 (one phase plane, the padded input).
fn implicit_image(
    spec: &ConvSpec,
    img: usize,
    x: &[f32],
    pk: &ConvPacked,
    post: Post<'_>,
    out: SendPtr,
    epilogue: &(dyn Fn(&mut Tile) + Sync),
) -> Result<(), String> {
    let g = spec.groups;
    let (cin_g, cout_g) = (spec.cin / g, spec.cout / g);
    let [_, pw] = spec.padding;
    let [dh, dw] = spec.dilation;
    let [sh, sw] = spec.stride;
    let (h, w, ow) = (spec.h, spec.w, spec.ow);
    let p = spec.oh * ow;
    // Columns of a phase plane: every `X` of the padded rows (`w + 2 pw` of them).
    let wq = (w + 2 * pw).div_ceil(sw);
    // Rows of a phase plane past a band's output rows, which the taps reach.
    let halo = (spec.kh - 1) * dh / sh;
    let phases = sh * sw;
    // Jobs of whole output rows (each row is whole 16-position micro-panels), bands of whole
    // jobs.
    let tile_rows = (spec.tile_cols() / ow).max(1);
    let fit = (BAND_BYTES / (4 * spec.cin * phases * wq).max(1)).saturating_sub(halo);
    let band_rows = (fit / tile_rows).max(1) * tile_rows;
    let pplane = (band_rows.min(spec.oh) + halo) * wq;
    let plane = phases * pplane;
    let mut offs = Vec::new();
    offs.try_reserve_exact(cin_g * spec.kh * spec.kw)
        .map_err(|e| format!("convolution tap offsets: {e}"))?;
    // The phases some tap reads (all four of stride 2 but for a 1x1 kernel, or a dilation of
    // 2); the others are not filled.
    let mut used = try_vec(phases, false, "phases")?;
    for ci in 0..cin_g {
        for ky in 0..spec.kh {
            for kx in 0..spec.kw {
                let (y, x) = (ky * dh, kx * dw);
                let phase = (y % sh) * sw + x % sw;
                used[phase] = true;
                offs.push(ci * plane + phase * pplane + (y / sh) * wq + x / sw);
            }
        }
    }
    // The implicit GEMM's tile: `mr` rows, `cols_per` columns (see `sgemm::gemm_indirect`).
    let (mr, cols_per) = {
        let arch = sgemm::arch_for(cout_g);
        (arch.mr, arch.nr)
    };
    // The bands, in this thread's scratch `data` (put back whatever the outcome).
    let bands = |data: &mut Vec<f32>| -> Result<(), String> {
        let n = spec.cin * plane;
        data.try_reserve(n.saturating_sub(data.len()))
            .map_err(|e| format!("convolution padded input of {n} floats: {e}"))?;
        data.resize(n, 0.0);
        for y0 in (0..spec.oh).step_by(band_rows) {
            let y1 = (y0 + band_rows).min(spec.oh);
            // Row `r` of phase `(py, px)` of each channel is padded row `Y = (y0 + r) * sh + py`,
            // input row `Y - ph` (zeros outside the image); its column `q` is input column `q *
            // sw + px - pw`.
            for (ci, pl) in data.chunks_exact_mut(plane).enumerate() {
                for (phase, pp) in pl.chunks_exact_mut(pplane).enumerate() {
                    if !used[phase] {
                        continue;
                    }
                    let rows = y1 - y0 + halo;
                    let channel = &x[ci * h * w..(ci + 1) * h * w];
                    fill_phase::<super::simd::PlainMoves>(spec, channel, pp, phase, wq, rows, y0);
                }
            }
            let data = &data[..];
            let offs = &offs[..];
            let jobs = (y1 - y0).div_ceil(tile_rows);
            try_for_jobs(spec, g * jobs, |job| {
                let (grp, t) = (job / jobs, job % jobs);
                let r0 = y0 + t * tile_rows;
                let r1 = (r0 + tile_rows).min(y1);
                let (p0, nt) = (r0 * ow, (r1 - r0) * ow);
                let row0 = img * spec.cout + grp * cout_g;
                let pg = &data[grp * cin_g * plane..(grp + 1) * cin_g * plane];
                let mut bases: Vec<*const f32> = Vec::new();
                bases
                    .try_reserve_exact(nt / 16)
                    .map_err(|e| format!("convolution tile bases: {e}"))?;
                bases.extend((0..nt / 16).map(|jb| {
                    let q = p0 + 16 * jb;
                    pg[(q / ow - y0) * wq + q % ow..].as_ptr()
                }));
                let fused = sgemm::Post {
                    bias: post
                        .bias
                        .map_or(std::ptr::null(), |b| b[grp * cout_g..].as_ptr()),
                    relu: post.relu,
                };
                // SAFETY: every tap of these positions is inside the band (rows `r0 - y0 .. r1 -
                // y0 + halo` and columns up to `ow - 1 + (kw - 1) * dw / sw < wq` of a phase
                // plane: `(ow - 1) * sw + (kw - 1) * dw` is at most the last padded column), the
                // weights are packed for `cout_g x kdim`, the job writes
                // rows `row0..row0 + cout_g`, columns `p0..p0 + nt` of the output viewed as
                // `[n * cout, p]` (jobs own disjoint rectangles), and the bias holds this group's
                // `cout_g` rows.
                let dst = out.get().wrapping_add(row0 * p + p0);
                let done = unsafe {
                    sgemm::gemm_indirect(&pk.a[grp], &bases, offs, dst, p, fused, &mut |jg, qi| {
                        // The output lines of the same rows one group of bases ahead, for
                        // writing: a tile's stores would otherwise each wait for memory.
                        let c0 = (jg + 1) * cols_per;
                        if c0 < nt {
                            let cols = cols_per.min(nt - c0);
                            for r in qi * mr..((qi + 1) * mr).min(cout_g) {
                                super::simd::prefetch_write(dst.wrapping_add(r * p + c0), cols);
                            }
                        }
                    })
                };
                assert!(done, "implicit_ok checked the kernel");
                // SAFETY: this job's rectangle, as above.
                let mut tile = unsafe { Tile::new(out.get(), p, row0..row0 + cout_g, p0..p0 + nt) };
                epilogue(&mut tile);
                Ok(())
            })?;
        }
        Ok(())
    };
    let mut data = PADDED.with(|b| std::mem::take(&mut *b.borrow_mut()));
    let res = bands(&mut data);
    PADDED.with(|b| *b.borrow_mut() = data);
    res
}

/// One product of a convolution's job: split over the pool with `split` (see `SPLIT_FLOPS`),
/// else on the calling thread alone. Its packing scratch is allocated fallibly.
///
/// # Safety
/// As for [`sgemm::gemm`].
unsafe fn multiply(prob: &Problem, split: bool) -> Result<(), String> {
    // SAFETY: the caller's.
    unsafe {
        if split {
            sgemm::try_gemm(std::slice::from_ref(prob), &|_, _, _| {})
        } else {
            sgemm::try_gemm_serial(prob)
        }
    }
    .map_err(|e| e.to_string())
}

/// Adds `bias` to each element of `row`, then applies the ReLU if `relu`.
fn apply_post(row: &mut [f32], bias: Option<f32>, relu: bool) {
    if let Some(b) = bias {
        for v in row.iter_mut() {
            *v += b;
        }
    }
    if relu {
        for v in row.iter_mut() {
            *v = super::math::max_nan(*v, 0.0);
        }
    }
}

thread_local! {
    /// Each thread's buffer for the padded bands of [`implicit_image`], kept across calls.
    static PADDED: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// For kernel column `kx`: the output columns `lo..hi` whose tap lies inside an input row of
/// `w` (`0 <= ox * sw + kx * dw - pw < w`), and the tap's offset `kx * dw - pw`.
fn valid_cols(kx: usize, dw: usize, pw: usize, sw: usize, w: usize) -> (usize, usize, isize) {
    let off = (kx * dw) as isize - pw as isize;
    let lo = if off >= 0 {
        0
    } else {
        ((-off) as usize).div_ceil(sw)
    };
    let hi = if (w as isize) <= off {
        0
    } else {
        ((w as isize - off) as usize).div_ceil(sw)
    };
    (lo, hi, off)
}

/// The `kdim x nt` matrix in the GEMM's packed layout for `B` ([`PackedB::index`]), so the
/// product reads it without another packing pass.
struct Packed<'a> {
    data: &'a mut [f32],
    k: usize,
    n: usize,
    /// Panel width (a power of two) and its log.
    nr: usize,
    shift: u32,
    /// Where the current row starts, and the distance between its panels.
    row_base: usize,
    panel_stride: usize,
}

impl<'a> Packed<'a> {
    fn new(data: &'a mut [f32], k: usize, n: usize) -> Packed<'a> {
        let nr = sgemm::arch().nr;
        debug_assert!(nr.is_power_of_two());
        Packed {
            data,
            k,
            n,
            nr,
            shift: nr.trailing_zeros(),
            row_base: 0,
            panel_stride: 0,
        }
    }

    /// Makes `r` the current row.
    #[inline(always)]
    fn row(&mut self, r: usize) {
        let (i, _) = PackedB::index(self.k, self.n, r, 0);
        self.row_base = i;
        let kb = sgemm::kc_for(self.k);
        let b0 = r - r % kb;
        self.panel_stride = self.nr * kb.min(self.k - b0);
    }
}

/// Where [`im2col_gather`] writes the im2col matrix.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
enum Dest<'a, 'b> {
    /// The GEMM's packed layout (panels of `nr` columns, zero past `nt`).
    Packed(&'a mut Packed<'b>),
    /// Row `l` as the `nt <= 16` values at `l * nt`.
    Rows(&'a mut [f32]),
}

/// Whether [`im2col_gather`] builds this convolution's im2col matrix: output rows shorter
/// than 16 positions, on an AVX-512 CPU.
fn gathers_rows(spec: &ConvSpec) -> bool {
    #[cfg(target_arch = "x86_64")]
    return spec.ow < 16 && super::simd::has_avx512();
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = spec;
        false
    }
}

/// The im2col slice of output positions `p0..p0 + nt` for one group: row
/// `(ci * kh + ky) * kw + kx`, column `q`, is the input at the tap of output position `p0 + q`,
/// or 0 in the padding.
fn im2col(
    spec: &ConvSpec,
    xg: &[f32],
    cin_g: usize,
    p0: usize,
    nt: usize,
    dst: &mut Packed<'_>,
) -> Result<(), String> {
    #[cfg(target_arch = "x86_64")]
    {
        if super::simd::has_avx512() {
            // SAFETY: the CPU has these features (checked just above).
            return unsafe {
                if gathers_rows(spec) && dst.nr.is_multiple_of(16) {
                    im2col_gather(spec, xg, cin_g, p0, nt, Dest::Packed(dst))
                } else {
                    im2col_avx512(spec, xg, cin_g, p0, nt, dst)
                }
            };
        }
        if super::simd::has_avx2() {
            // SAFETY: as above.
            return unsafe { im2col_avx2(spec, xg, cin_g, p0, nt, dst) };
        }
    }
    im2col_body::<super::simd::PlainMoves>(spec, xg, cin_g, p0, nt, dst)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2")]
unsafe fn im2col_avx512(
    spec: &ConvSpec,
    xg: &[f32],
    cin_g: usize,
    p0: usize,
    nt: usize,
    dst: &mut Packed<'_>,
) -> Result<(), String> {
    im2col_body::<super::simd::Avx512Moves>(spec, xg, cin_g, p0, nt, dst)
}

/// [`im2col`] on AVX-512 for output rows shorter than 16 positions, where copying by runs
/// spends its time on each run's bookkeeping (a 3x3 convolution of 128 channels over a 2x2
/// output has 2304 runs of two values, 29% of the resnet18 testdata model's time): each row of
/// the matrix is one operation per 16 columns, from index vectors made once per tile for each
/// kernel tap `(ky, kx)`: a permute of the channel's plane where it fits four registers (64
/// values), else a masked gather from it. A lane whose tap lies in the padding, or past `nt`,
/// is masked off and written as zero. Into the GEMM's packed layout, or (at most 16 positions)
/// as rows of `nt` values ([`Dest`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn im2col_gather(
    spec: &ConvSpec,
    xg: &[f32],
    cin_g: usize,
    p0: usize,
    nt: usize,
    dst: Dest<'_, '_>,
) -> Result<(), String> {
    use std::arch::x86_64::*;
    let (h, w, ow) = (spec.h, spec.w, spec.ow);
    let [sh, sw] = spec.stride;
    let [ph, pw] = spec.padding;
    let [dh, dw] = spec.dilation;
    let k = cin_g * spec.kh * spec.kw;
    let (nr, rows_mask) = match &dst {
        Dest::Packed(p) => (p.nr, !0),
        Dest::Rows(r) => {
            assert!(nt <= 16 && r.len() >= k * nt, "rows of {nt} positions");
            (16, ((1u32 << nt) - 1) as __mmask16)
        }
    };
    let np = nt.next_multiple_of(nr);
    let groups = np / 16;
    // Per tap and group of 16 columns: the taps' offsets in a channel's plane, and which lie
    // inside it.
    let taps = spec.kh * spec.kw;
    let mut index = try_vec(taps * groups, [0i32; 16], "gather indices")?;
    let mut valid = try_vec(taps * groups, 0u16, "gather masks")?;
    for ky in 0..spec.kh {
        for kx in 0..spec.kw {
            let t = ky * spec.kw + kx;
            for q in 0..nt {
                let pos = p0 + q;
                let (oy, ox) = (pos / ow, pos % ow);
                let iy = (oy * sh + ky * dh) as isize - ph as isize;
                let ix = (ox * sw + kx * dw) as isize - pw as isize;
                if (0..h as isize).contains(&iy) && (0..w as isize).contains(&ix) {
                    let (g, lane) = (t * groups + q / 16, q % 16);
                    // Below `h * w`, which `ConvSpec::validate` keeps within `i32`.
                    index[g][lane] = (iy * w as isize + ix) as i32;
                    valid[g] |= 1 << lane;
                }
            }
        }
    }
    let kb = sgemm::kc_for(k);
    let (data, packed) = match dst {
        Dest::Packed(p) => (p.data.as_mut_ptr(), true),
        Dest::Rows(r) => (r.as_mut_ptr(), false),
    };
    let (mut b0, mut lb) = (0, 0);
    // A plane of at most 64 values (a late layer's input of 8x8 or less) is held in up to
    // four registers, which each row permutes instead of gathering from memory.
    let hw = h * w;
    let small = hw <= 64;
    for ci in 0..cin_g {
        let plane = xg[ci * hw..(ci + 1) * hw].as_ptr();
        let mut pv = [_mm512_setzero_ps(); 4];
        if small {
            for (j, v) in pv.iter_mut().enumerate().take(hw.div_ceil(16)) {
                let lanes = (hw - 16 * j).min(16);
                // SAFETY: these lanes lie inside the plane; the others are not read.
                *v = unsafe {
                    _mm512_maskz_loadu_ps(((1u32 << lanes) - 1) as __mmask16, plane.add(16 * j))
                };
            }
        }
        for t in 0..taps {
            // Row `b0 + lb` of the packed layout (see `PackedB::index`): panels of `nr`
            // columns, `nr * kcb` apart.
            let kcb = kb.min(k - b0);
            let row = b0 * np + lb * nr;
            for g in 0..groups {
                let (c0, m) = (16 * g, valid[t * groups + g]);
                let at = if packed {
                    row + (c0 / nr) * nr * kcb + c0 % nr
                } else {
                    (ci * taps + t) * nt
                };
                // SAFETY: the set lanes' offsets lie inside the plane (checked above); `at +
                // 16` is within the row's panel, inside the `k * np` packed elements.
                unsafe {
                    let idx = _mm512_loadu_si512(index[t * groups + g].as_ptr().cast());
                    let v = if m == 0 {
                        _mm512_setzero_ps()
                    } else if small {
                        // Lane `i` of the first (or only) pair holds value `i` (or `i - 32` of
                        // the second pair, picked where bit 5 of the index is set).
                        let lo = _mm512_permutex2var_ps(pv[0], idx, pv[1]);
                        let v = if hw > 32 {
                            let hi = _mm512_permutex2var_ps(pv[2], idx, pv[3]);
                            let upper = _mm512_test_epi32_mask(idx, _mm512_set1_epi32(32));
                            _mm512_mask_blend_ps(upper, lo, hi)
                        } else {
                            lo
                        };
                        _mm512_maskz_mov_ps(m, v)
                    } else {
                        _mm512_mask_i32gather_ps::<4>(_mm512_setzero_ps(), m, idx, plane)
                    };
                    _mm512_mask_storeu_ps(data.add(at), rows_mask, v);
                }
            }
            lb += 1;
            if lb == kb {
                (b0, lb) = (b0 + kb, 0);
            }
        }
    }
    Ok(())
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn im2col_avx2(
    spec: &ConvSpec,
    xg: &[f32],
    cin_g: usize,
    p0: usize,
    nt: usize,
    dst: &mut Packed<'_>,
) -> Result<(), String> {
    im2col_body::<super::simd::Avx2Moves>(spec, xg, cin_g, p0, nt, dst)
}

#[inline(always)]
fn im2col_body<M: super::simd::Moves>(
    spec: &ConvSpec,
    xg: &[f32],
    cin_g: usize,
    p0: usize,
    nt: usize,
    dst: &mut Packed<'_>,
) -> Result<(), String> {
    // The columns past `nt` in the last panel of each row are zero.
    if !nt.is_multiple_of(sgemm::arch().nr) {
        for r in 0..dst.k {
            let (i, left) = PackedB::index(dst.k, dst.n, r, nt);
            M::zero(&mut dst.data[i..i + left]);
        }
    }
    let (h, w, ow) = (spec.h, spec.w, spec.ow);
    let [sh, sw] = spec.stride;
    let [ph, pw] = spec.padding;
    let [dh, dw] = spec.dilation;
    // The tile's runs of positions within one output row and one packed panel: the same for
    // every row of the matrix, so the divisions are done once per tile, not once per row.
    let mut segs = Vec::new();
    segs.try_reserve_exact(nt / dst.nr + nt / ow.max(1) + 2)
        .map_err(|e| format!("convolution im2col runs: {e}"))?;
    let mut q = 0;
    while q < nt {
        let pos = p0 + q;
        let (oy, ox0) = (pos / ow, pos % ow);
        let (panel, off) = (q >> dst.shift, q & (dst.nr - 1));
        let len = (dst.nr - off).min(ow - ox0).min(nt - q);
        segs.push(Seg {
            oy,
            ox0,
            at: panel,
            off,
            len,
        });
        q += len;
    }
    let mut r = 0;
    for ci in 0..cin_g {
        let plane = &xg[ci * h * w..(ci + 1) * h * w];
        for ky in 0..spec.kh {
            for kx in 0..spec.kw {
                let (lo, hi, off) = valid_cols(kx, dw, pw, sw, w);
                dst.row(r);
                for sg in &segs {
                    let i = dst.row_base + sg.at * dst.panel_stride + sg.off;
                    let d = &mut dst.data[i..i + sg.len];
                    let iy = (sg.oy * sh + ky * dh) as isize - ph as isize;
                    if iy < 0 || iy >= h as isize {
                        M::zero(d);
                        continue;
                    }
                    let xrow = &plane[iy as usize * w..(iy as usize + 1) * w];
                    let (a, b) = (lo.max(sg.ox0), hi.min(sg.ox0 + sg.len));
                    if a >= b {
                        M::zero(d);
                        continue;
                    }
                    if a > sg.ox0 {
                        M::zero(&mut d[..a - sg.ox0]);
                    }
                    if b < sg.ox0 + sg.len {
                        M::zero(&mut d[b - sg.ox0..]);
                    }
                    let ix0 = (a as isize * sw as isize + off) as usize;
                    let d = &mut d[a - sg.ox0..b - sg.ox0];
                    if sw == 1 {
                        M::copy(d, &xrow[ix0..ix0 + (b - a)]);
                    } else if sw == 2 {
                        M::copy_every2(d, &xrow[ix0..ix0 + 2 * (b - a) - 1]);
                    } else {
                        for (j, v) in d.iter_mut().enumerate() {
                            *v = xrow[ix0 + j * sw];
                        }
                    }
                }
                r += 1;
            }
        }
    }
    Ok(())
}

/// A run of an im2col tile's positions inside one output row and one packed panel.
struct Seg {
    /// Output row and column of the run's first position.
    oy: usize,
    ox0: usize,
    /// Its panel and offset in the panel.
    at: usize,
    off: usize,
    /// Positions in the run.
    len: usize,
}

thread_local! {
    /// Each thread's buffer for [`depthwise_image`]: one input channel's phase planes, then
    /// the wide output rows of a channel.
    static DEPTHWISE: RefCell<LineVec<f32>> = RefCell::new(LineVec::new(64));
}

/// Output positions per block of the depthwise kernel: four AVX-512 vectors of accumulators,
/// each tap one load and one FMA per vector.
const DW_BLOCK: usize = 64;

/// The blocks after the last whole [`DW_BLOCK`]: one AVX-512 vector (a 7x7 layer's 77 wide
/// outputs are one block and one of these, not two blocks).
const DW_TAIL: usize = 16;

/// Output elements per job of [`depthwise_image`] (whole channels, at least one): enough that
/// a job's epilogue pass and its start cost little beside its taps (mobilenet_v3_small's
/// 14x14 and 7x7 layers ran one channel per job before, a fifth of their time in the
/// per-channel epilogue calls).
const DW_JOB: usize = 4096;

/// The geometry of [`depthwise_image`]: like [`implicit_image`], each input channel is copied
/// zero-padded into `sh * sw` phase planes (phase `(py, px)` holds padded element `(Y, X)`
/// with `Y % sh == py`, `X % sw == px` at `(Y / sh, X / sw)`), rows of `rs` elements. Output
/// `(oy, ox)` reads tap `(ky, kx)` at `(oy + ky * dh / sh, ox + kx * dw / sw)` of one plane,
/// so with the output laid out in rows of `rs` too ("wide", the last `rs - ow` columns of
/// each row thrown away), output `i = oy * rs + ox` reads element `i + off(ky, kx)` of the
/// planes: every tap is one unit-stride run over the whole channel.
struct DwPlan {
    /// Row length of the planes and of the wide output.
    rs: usize,
    /// Rows of a phase plane that taps read.
    rows: usize,
    /// Wide output elements, a multiple of [`DW_TAIL`].
    wide: usize,
    /// Elements per phase plane (the last blocks' reads past the rows included).
    plane: usize,
    /// Per tap `(ky, kx)` in order, its offset in the planes.
    offs: Vec<usize>,
    /// Which phase planes some tap reads (the others are not filled).
    used: Vec<bool>,
}

impl DwPlan {
    fn new(spec: &ConvSpec) -> Result<DwPlan, String> {
        let [sh, sw] = spec.stride;
        let [dh, dw] = spec.dilation;
        let (kh, kw) = (spec.kh, spec.kw);
        let rs = spec.ow + (kw - 1) * dw / sw;
        let rows = spec.oh + (kh - 1) * dh / sh;
        let wide = (spec.oh * rs).next_multiple_of(DW_TAIL);
        let plane = wide + (rows - spec.oh) * rs + (rs - spec.ow);
        let mut offs = Vec::new();
        offs.try_reserve_exact(kh * kw)
            .map_err(|e| format!("depthwise taps: {e}"))?;
        let mut used = Vec::new();
        used.try_reserve_exact(sh * sw)
            .map_err(|e| format!("depthwise phases: {e}"))?;
        used.resize(sh * sw, false);
        for ky in 0..kh {
            for kx in 0..kw {
                let (y, x) = (ky * dh, kx * dw);
                let phase = (y % sh) * sw + x % sw;
                used[phase] = true;
                offs.push(phase * plane + (y / sh) * rs + x / sw);
            }
        }
        Ok(DwPlan {
            rs,
            rows,
            wide,
            plane,
            offs,
            used,
        })
    }

    /// Floats of scratch per thread: the planes, then the wide output.
    fn scratch(&self, spec: &ConvSpec) -> usize {
        spec.stride[0] * spec.stride[1] * self.plane + self.wide
    }

    /// Copies input channel `x` (`h x w`) into its phase planes, with the best moves for this
    /// CPU.
    fn fill(&self, spec: &ConvSpec, x: &[f32], planes: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        {
            #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2")]
            unsafe fn avx512(plan: &DwPlan, spec: &ConvSpec, x: &[f32], planes: &mut [f32]) {
                plan.fill_body::<super::simd::Avx512Moves>(spec, x, planes)
            }
            #[target_feature(enable = "avx2")]
            unsafe fn avx2(plan: &DwPlan, spec: &ConvSpec, x: &[f32], planes: &mut [f32]) {
                plan.fill_body::<super::simd::Avx2Moves>(spec, x, planes)
            }
            if super::simd::has_avx512() {
                // SAFETY: the CPU has these features (checked just now).
                return unsafe { avx512(self, spec, x, planes) };
            }
            if super::simd::has_avx2() {
                // SAFETY: as above.
                return unsafe { avx2(self, spec, x, planes) };
            }
        }
        self.fill_body::<super::simd::PlainMoves>(spec, x, planes)
    }

    #[inline(always)]
    fn fill_body<M: super::simd::Moves>(&self, spec: &ConvSpec, x: &[f32], planes: &mut [f32]) {
        for (phase, pp) in planes.chunks_exact_mut(self.plane).enumerate() {
            if !self.used[phase] {
                continue;
            }
            fill_phase::<M>(spec, x, pp, phase, self.rs, self.rows, 0);
        }
    }
}

/// Fills phase plane `pp` (`rows` rows of `rs` values) of one input channel `x` (`h x w`):
/// its row `r` is padded input row `Y = (y0 + r) * sh + py` (input row `Y - ph`), its column
/// `q` input column `q * sw + px - pw`, zero outside the image; phase `(py, px)` is
/// `(phase / sw, phase % sw)`. Shared by the implicit GEMM's bands and the depthwise planes.
#[inline(always)]
fn fill_phase<M: super::simd::Moves>(
    spec: &ConvSpec,
    x: &[f32],
    pp: &mut [f32],
    phase: usize,
    rs: usize,
    rows: usize,
    y0: usize,
) {
    let (h, w) = (spec.h, spec.w);
    let [sh, sw] = spec.stride;
    let [ph, pw] = spec.padding;
    let (py, px) = (phase / sw, phase % sw);
    // Columns `lo..hi` of every row lie inside the input row, from input column `ix0` on
    // (`ix0 >= 0` where `lo < hi`: `lo` is the first column inside).
    let (lo, hi, off) = valid_cols(px, 1, pw, sw, w);
    let hi = hi.min(rs);
    let lo = lo.min(hi);
    let ix0 = ((lo * sw) as isize + off).max(0) as usize;
    for (r, row) in pp.chunks_exact_mut(rs).take(rows).enumerate() {
        let iy = ((y0 + r) * sh + py).checked_sub(ph).filter(|&iy| iy < h);
        let Some(iy) = iy else {
            M::zero(row);
            continue;
        };
        let src = &x[iy * w..(iy + 1) * w];
        M::zero(&mut row[..lo]);
        M::zero(&mut row[hi..]);
        let row = &mut row[lo..hi];
        if row.is_empty() {
            continue;
        }
        if sw == 1 {
            M::copy(row, &src[ix0..ix0 + row.len()]);
        } else if sw == 2 {
            M::copy_every2(row, &src[ix0..ix0 + 2 * row.len() - 1]);
        } else {
            for (j, v) in row.iter_mut().enumerate() {
                *v = src[ix0 + j * sw];
            }
        }
    }
}

super::simd::multiversion! {
    /// [`depthwise_taps_body`] in the best compiled copy for this CPU.
    fn depthwise_taps<'a>(
        planes: &'a [f32],
        offs: &'a [usize],
        wk: &'a [f32],
        bias: f32,
        wide: &'a mut [f32],
    ) => depthwise_taps_body
}

/// `wide[i] = bias + sum_t wk[t] * planes[i + offs[t]]` for every `i` of `wide` (a multiple
/// of [`DW_TAIL`] long), the taps added in order, each with one rounding (FMA): blocks of
/// [`DW_BLOCK`], then of [`DW_TAIL`].
#[inline(always)]
fn depthwise_taps_body(planes: &[f32], offs: &[usize], wk: &[f32], bias: f32, wide: &mut [f32]) {
    let main = wide.len() - wide.len() % DW_BLOCK;
    let (head, tail) = wide.split_at_mut(main);
    for (blk, o) in head.chunks_exact_mut(DW_BLOCK).enumerate() {
        taps_block::<DW_BLOCK>(planes, offs, wk, bias, blk * DW_BLOCK, o);
    }
    for (blk, o) in tail.chunks_exact_mut(DW_TAIL).enumerate() {
        taps_block::<DW_TAIL>(planes, offs, wk, bias, main + blk * DW_TAIL, o);
    }
}

/// One block of [`depthwise_taps_body`]: outputs `i0..i0 + B` into `o`.
#[inline(always)]
fn taps_block<const B: usize>(
    planes: &[f32],
    offs: &[usize],
    wk: &[f32],
    bias: f32,
    i0: usize,
    o: &mut [f32],
) {
    let mut acc = [bias; B];
    for (&off, &wv) in offs.iter().zip(wk) {
        let src: &[f32; B] = planes[i0 + off..i0 + off + B].try_into().expect("a block");
        for (a, &v) in acc.iter_mut().zip(src) {
            *a = super::math::fma(wv, v, *a);
        }
    }
    o.copy_from_slice(&acc);
}

/// One image of a convolution with one input channel per group, directly (see [`DwPlan`]):
/// output channel `oc` reads input channel `oc / (cout / groups)`. Jobs of whole channels;
/// each output is its bias plus the taps in order, so the bits do not depend on the jobs.
fn depthwise_image(
    spec: &ConvSpec,
    img: usize,
    x: &[f32],
    w: &[f32],
    post: Post<'_>,
    out: SendPtr,
    epilogue: &(dyn Fn(&mut Tile) + Sync),
) -> Result<(), String> {
    let (h, wd, oh, ow) = (spec.h, spec.w, spec.oh, spec.ow);
    let taps = spec.kh * spec.kw;
    let cout_g = spec.cout / spec.groups;
    let p = oh * ow;
    let plan = DwPlan::new(spec)?;
    let need = plan.scratch(spec);
    let per_job = (DW_JOB / p.max(1)).clamp(1, spec.cout);
    let jobs = spec.cout.div_ceil(per_job);
    try_for_jobs(spec, jobs, |job| {
        let (c0, c1) = (job * per_job, ((job + 1) * per_job).min(spec.cout));
        let mut buf = DEPTHWISE.with(|b| std::mem::replace(&mut *b.borrow_mut(), LineVec::new(64)));
        let res = try_aligned(&mut buf, need).map(|scratch| {
            let (planes, wide) = scratch.split_at_mut(need - plan.wide);
            let mut filled = None;
            for oc in c0..c1 {
                let ci = oc / cout_g;
                if filled != Some(ci) {
                    plan.fill(spec, &x[ci * h * wd..(ci + 1) * h * wd], planes);
                    filled = Some(ci);
                }
                let wk = &w[oc * taps..(oc + 1) * taps];
                let b0 = post.bias.map_or(0.0, |b| b[oc]);
                depthwise_taps(planes, &plan.offs, wk, b0, wide);
                let row = img * spec.cout + oc;
                // SAFETY: plane `oc` of image `img`, written by this job alone.
                let oplane = unsafe { std::slice::from_raw_parts_mut(out.get().add(row * p), p) };
                for (o, src) in oplane.chunks_exact_mut(ow).zip(wide.chunks(plan.rs)) {
                    o.copy_from_slice(&src[..ow]);
                }
                if post.relu {
                    apply_post(oplane, None, true);
                }
            }
        });
        DEPTHWISE.with(|b| *b.borrow_mut() = buf);
        res?;
        let rows = img * spec.cout + c0..img * spec.cout + c1;
        // SAFETY: planes `c0..c1` of image `img`, written by this job alone.
        let mut tile = unsafe { Tile::new(out.get(), p, rows, 0..p) };
        epilogue(&mut tile);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Small-output im2col on AVX-512 (permutes of a plane held in registers, or gathers)
    /// writes the packed matrix of the portable copy by runs, bit for bit: planes of up to 16,
    /// 32 and 64 values and larger, strides, padding, dilation, several `k` blocks, and tiles
    /// that start inside the output or end inside a panel.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn gathered_im2col_is_the_copied_one() {
        if !crate::fast::simd::has_avx512() {
            return;
        }
        let cases = [
            // (input [cin, h, w], kernel, stride, padding, dilation)
            ([128, 2, 2], [3, 3], 1, 1, 1),
            ([64, 4, 4], [3, 3], 1, 1, 1),
            ([64, 4, 4], [3, 3], 2, 1, 1),
            ([32, 8, 8], [3, 3], 1, 1, 1),
            ([16, 6, 5], [3, 3], 1, 2, 1),
            ([8, 8, 8], [1, 1], 2, 0, 1),
            ([16, 16, 16], [3, 3], 2, 1, 1),
            ([5, 9, 11], [3, 3], 1, 1, 2),
            ([4, 7, 28], [5, 3], 2, 2, 1),
        ];
        for ([cin, h, w], [kh, kw], st, pad, dil) in cases {
            let spec = ConvSpec::new(
                [1, cin, h, w],
                [4, cin, kh, kw],
                [st, st],
                [pad, pad],
                [dil, dil],
                1,
            )
            .unwrap();
            assert!(spec.ow < 16, "{spec:?}");
            let x: Vec<f32> = (0..cin * h * w).map(|i| i as f32 + 0.5).collect();
            let kdim = cin * kh * kw;
            let p = spec.oh * spec.ow;
            for (p0, nt) in [(0, p), (p / 3, p - p / 3), (1, p.min(17) - 1)] {
                if nt == 0 {
                    continue;
                }
                let len = sgemm::PackedB::len_for(kdim, nt);
                let (mut want, mut got) = (vec![f32::NAN; len], vec![f32::NAN; len]);
                let plain = &mut Packed::new(&mut want, kdim, nt);
                im2col_body::<crate::fast::simd::PlainMoves>(&spec, &x, cin, p0, nt, plain)
                    .unwrap();
                // SAFETY: the CPU has AVX-512 (checked above).
                unsafe {
                    im2col_gather(
                        &spec,
                        &x,
                        cin,
                        p0,
                        nt,
                        Dest::Packed(&mut Packed::new(&mut got, kdim, nt)),
                    )
                    .unwrap()
                };
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{spec:?} positions {p0}+{nt}");
                if nt <= 16 {
                    // As rows of `nt` values: the packed matrix's first `nt` columns (one
                    // panel of `nr >= 16`: row `l` at `l * nr`).
                    let nr = sgemm::arch().nr;
                    let mut rows = vec![f32::NAN; kdim * nt + 3];
                    // SAFETY: as above.
                    unsafe {
                        im2col_gather(&spec, &x, cin, p0, nt, Dest::Rows(&mut rows)).unwrap()
                    };
                    let want_rows: Vec<f32> = (0..kdim)
                        .flat_map(|l| want[l * nr..l * nr + nt].iter().copied())
                        .collect();
                    assert_eq!(bits(&rows[..kdim * nt]), bits(&want_rows), "{spec:?} rows");
                    assert!(
                        rows[kdim * nt..].iter().all(|v| v.is_nan()),
                        "{spec:?} past"
                    );
                }
            }
        }
    }

    /// Scratch that cannot be allocated is an error naming its size, not an abort, and the
    /// first job's error is the convolution's, with the jobs after it skipped.
    #[test]
    fn scratch_failure_is_an_error() {
        let mut v = LineVec::new(64);
        let e = try_aligned(&mut v, usize::MAX / 8).unwrap_err();
        assert!(e.contains("convolution scratch"), "{e}");
        assert!(try_vec(usize::MAX / 8, 0f32, "tile").is_err());
        let spec = ConvSpec::new([1, 4, 8, 8], [4, 1, 3, 3], [1, 1], [1, 1], [1, 1], 4).unwrap();
        let ran = std::sync::atomic::AtomicUsize::new(0);
        let r = try_for_jobs(&spec, 5, |j| {
            ran.fetch_add(1, Ordering::Relaxed);
            if j >= 1 {
                Err(format!("job {j}"))
            } else {
                Ok(())
            }
        });
        assert_eq!(r.unwrap_err(), "job 1");
        assert_eq!(
            ran.into_inner(),
            2,
            "in order on one thread: jobs after 1 are skipped"
        );
    }

    #[test]
    fn new_computes_output_size() {
        let s = ConvSpec::new([1, 3, 224, 224], [64, 3, 7, 7], [2, 2], [3, 3], [1, 1], 1).unwrap();
        assert_eq!((s.oh, s.ow), (112, 112));
        assert!(ConvSpec::new([1, 3, 2, 2], [4, 3, 3, 3], [1, 1], [0, 0], [1, 1], 1).is_err());
        assert!(ConvSpec::new([1, 4, 5, 5], [4, 3, 3, 3], [1, 1], [0, 0], [1, 1], 1).is_err());
    }
}
