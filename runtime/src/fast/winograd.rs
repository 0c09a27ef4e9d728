//! Winograd `F(2x2, 3x3)` for 3x3, stride-1, undilated, ungrouped convolutions.
//!
//! Each 2x2 block of outputs ("tile") of one output channel is `Aᵀ [Σ_ci U[co, ci] ⊙ V[ci]] A`,
//! where `V = Bᵀ d B` is the transform of the tile's 4x4 input patch of channel `ci` and
//! `U = G g Gᵀ` that of the 3x3 kernel (Lavin and Gray, "Fast Algorithms for Convolutional
//! Neural Networks", 2015). The sum over input channels is, for each of the 16 transform
//! positions `ξ`, a product `M[ξ] = U[ξ] @ V[ξ]` of a `cout x cin` matrix and a `cin x tiles`
//! one, run by the implicit GEMM ([`sgemm::gemm_indirect`]) straight from the transformed
//! input. That is 16 multiply-adds per tile and channel pair where the direct convolution
//! does 36 (2.25x fewer); the transforms add only additions, subtractions and halvings (the
//! halvings are folded into `U`, computed once in `f64` when the weights are packed).
//!
//! Work goes by jobs of whole tile rows of one image, sized so that the transformed input and
//! the products (`16 * (cin + cout) * tiles` floats) stay in L2: the input rows each job
//! reads are split into even and odd columns (zero-padded), so every transform reads
//! contiguous runs and the loops over a tile row vectorize; the output transform adds the
//! bias, applies the ReLU and writes both output rows of the tile row. Every output is the
//! same sequence of operations for any thread count.
//!
//! While a job's 16 products run, it prefetches its own output rows (for writing) and the
//! input rows the next job adds: both are runs of a few cache lines per channel, too short for
//! the hardware prefetcher, and without this the transforms waited on memory for as long as
//! the products took (workload e, two threads: 22.8 ms median without the prefetches, 18.0
//! with them; the direct convolution took 22.8 too).
//!
//! The numbers differ from a direct convolution's by rounding only (the transforms add one
//! rounding per addition): on workload e the largest difference from eager PyTorch is 2.1e-7
//! (the direct convolution's: 2.7e-7). `runtime/tests/fast_dense.rs` checks odd sizes,
//! paddings and channel counts against the reference interpreter. Runs only on AVX-512 CPUs
//! (the transforms are written for them); `FXHLO_NO_WINOGRAD=1` turns it off.

use super::conv::{try_aligned, ConvSpec, Post};
use super::gemm::Tile;
use super::memory::LineVec;
use super::sgemm::{self, Mat, PackedA};
use super::SendPtr;
use std::cell::RefCell;

/// Lanes of the implicit GEMM's micro-panels: tile rows are padded to a multiple of this.
const LANES: usize = 16;

/// Bytes of transformed input and products per job: about a quarter of L2.
const JOB_BYTES: usize = 512 << 10;

/// The 16 transformed weight matrices `U[ξ]` (`cout x cin` each), packed for the GEMM.
pub struct WinogradWeights {
    u: Vec<PackedA>,
}

/// Whether `FXHLO_NO_WINOGRAD` is set (for comparisons with the direct convolution).
fn disabled() -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OFF.get_or_init(|| std::env::var_os("FXHLO_NO_WINOGRAD").is_some())
}

/// Tiles per tile row (`ceil(ow / 2)`) and that padded to whole micro-panels.
fn tile_cols(spec: &ConvSpec) -> (usize, usize) {
    let tw = spec.ow.div_ceil(2);
    (tw, tw.next_multiple_of(LANES))
}

/// Whether the convolution runs this way: 3x3, stride 1, no dilation, one group, at least
/// four input and output channels, padding at most 2, rows of tiles that pad to micro-panels
/// with at most a quarter of waste (so not for outputs narrower than 24), on an AVX-512 CPU
/// (the transforms are written for it; elsewhere the direct convolution runs).
pub fn applies(spec: &ConvSpec) -> bool {
    let (tw, tw16) = tile_cols(spec);
    spec.kh == 3
        && spec.kw == 3
        && spec.stride == [1, 1]
        && spec.dilation == [1, 1]
        && spec.groups == 1
        && spec.cin >= 4
        && spec.cout >= 4
        && spec.padding[0] <= 2
        && spec.padding[1] <= 2
        && spec.oh >= 2
        && spec.ow >= 24
        && 4 * tw16 <= 5 * tw
        && super::simd::has_avx512()
        && sgemm::has_indirect()
        && !disabled()
}

/// `G g Gᵀ` of one 3x3 kernel (row-major), in `f64`, rounded once.
fn transform_kernel(g: &[f32]) -> [f32; 16] {
    let g = |i: usize, j: usize| g[3 * i + j] as f64;
    // Gg: 4 x 3, by columns.
    let col = |j: usize| {
        let (a, b, c) = (g(0, j), g(1, j), g(2, j));
        [a, 0.5 * (a + b + c), 0.5 * (a - b + c), c]
    };
    let cols = [col(0), col(1), col(2)];
    let mut u = [0f32; 16];
    for i in 0..4 {
        let r = [cols[0][i], cols[1][i], cols[2][i]];
        u[4 * i] = r[0] as f32;
        u[4 * i + 1] = (0.5 * (r[0] + r[1] + r[2])) as f32;
        u[4 * i + 2] = (0.5 * (r[0] - r[1] + r[2])) as f32;
        u[4 * i + 3] = r[2] as f32;
    }
    u
}

/// Transforms and packs the weights `[cout, cin, 3, 3]` (for a spec that [`applies`]).
pub fn transform_weights(spec: &ConvSpec, w: &[f32]) -> Option<WinogradWeights> {
    let (cin, cout) = (spec.cin, spec.cout);
    if !applies(spec) || w.len() != cout * cin * 9 {
        return None;
    }
    // u[ξ] is `cout x cin`, row-major.
    let mut u = vec![vec![0f32; cout * cin]; 16];
    for (q, kern) in w.chunks_exact(9).enumerate() {
        for (xi, &v) in transform_kernel(kern).iter().enumerate() {
            u[xi][q] = v;
        }
    }
    let u = u
        .iter()
        // SAFETY: each matrix is `cout x cin`, row-major.
        .map(|m| unsafe { PackedA::new(&Mat::new(m.as_ptr(), cin as isize, 1), cout, cin) })
        .collect();
    Some(WinogradWeights { u })
}

thread_local! {
    /// Each thread's buffers: the split input rows, the transformed input, the products.
    static BUFS: RefCell<[LineVec<f32>; 3]> = RefCell::new([LineVec::new(64), LineVec::new(64), LineVec::new(64)]);
}

/// Image `img` (`x` is its input, `[cin, h, w]`) into `out` (the whole output), bias and ReLU
/// from `post`, then `epilogue` on each job's rows of the output viewed as
/// `[n * cout, oh * ow]`. `Err` when a job's scratch cannot be allocated.
pub(crate) fn image(
    spec: &ConvSpec,
    img: usize,
    x: &[f32],
    ww: &WinogradWeights,
    post: Post<'_>,
    out: SendPtr,
    epilogue: &(dyn Fn(&mut Tile) + Sync),
) -> Result<(), String> {
    let im = Image {
        spec,
        img,
        x,
        ww,
        post,
        out,
    };
    let (_, tw16) = tile_cols(spec);
    let th = spec.oh.div_ceil(2);
    let per_row = 16 * (spec.cin + spec.cout) * tw16 * 4;
    let rows = (JOB_BYTES / per_row).clamp(1, th);
    let jobs = th.div_ceil(rows);
    super::conv::try_for_jobs(spec, jobs, |j| {
        let ty0 = j * rows;
        let ty1 = (ty0 + rows).min(th);
        BUFS.with(|b| {
            let mut b = b.borrow_mut();
            let [split, v, m] = &mut *b;
            job(&im, (ty0, ty1), [split, v, m])
        })?;
        let oy0 = 2 * ty0;
        let oy1 = (2 * ty1).min(spec.oh);
        let row0 = img * spec.cout;
        let p = spec.oh * spec.ow;
        // SAFETY: this job wrote output rows `oy0..oy1` of every channel of image `img`, and
        // no other job touches them.
        let mut tile = unsafe {
            Tile::new(
                out.get(),
                p,
                row0..row0 + spec.cout,
                oy0 * spec.ow..oy1 * spec.ow,
            )
        };
        epilogue(&mut tile);
        Ok(())
    })
}

/// What the jobs of one image share: the convolution, the image's index and input, the
/// transformed weights, the bias and ReLU, and the whole output.
struct Image<'a> {
    spec: &'a ConvSpec,
    img: usize,
    x: &'a [f32],
    ww: &'a WinogradWeights,
    post: Post<'a>,
    out: SendPtr,
}

/// Tile rows `ty0..ty1` of an image: split rows, input transform, 16 products, output
/// transform. `Err` when its scratch cannot be allocated.
fn job(
    im: &Image<'_>,
    (ty0, ty1): (usize, usize),
    [split, v, m]: [&mut LineVec<f32>; 3],
) -> Result<(), String> {
    let Image {
        spec,
        img,
        x,
        ww,
        out,
        ..
    } = *im;
    let (cin, cout) = (spec.cin, spec.cout);
    let (_, tw16) = tile_cols(spec);
    let nty = ty1 - ty0;
    let t = nty * tw16;
    // Input rows 2 ty0 - ph .. 2 ty1 - ph + 2, each as even and odd columns of the padded row.
    let half = tw16 + 1;
    let nrows = 2 * nty + 2;
    let split = try_aligned(split, cin * nrows * 2 * half)?;
    split_rows(spec, x, 2 * ty0, nrows, half, split);
    // The 16 planes of V and of M, each a line longer than its matrix: planes a power of
    // two apart would map the 16 loads or stores of a tile to one set of L1.
    let (vplane, mplane) = (cin * t + LANES, cout * t + LANES);
    let v = try_aligned(v, 16 * vplane)?;
    input_transform(split, cin, nrows, half, tw16, nty, vplane, v);
    let m = try_aligned(m, 16 * mplane)?;
    let mut offs: Vec<usize> = Vec::new();
    offs.try_reserve_exact(cin)
        .map_err(|e| format!("winograd offsets: {e}"))?;
    offs.extend((0..cin).map(|l| l * t));
    // While the products run: this job's output rows (for writing) and the input rows that
    // the next job adds, so that neither the output transform nor the next split waits on
    // memory (runs of a few lines each, too short for the hardware prefetcher).
    let mut ahead = Ahead::default();
    ahead
        .runs
        .try_reserve_exact(cout + cin)
        .map_err(|e| format!("winograd prefetch runs: {e}"))?;
    let (oh, ow, h, w) = (spec.oh, spec.ow, spec.h, spec.w);
    let (oy0, oy1) = (2 * ty0, (2 * ty1).min(oh));
    for co in 0..cout {
        let at = ((img * cout + co) * oh + oy0) * ow;
        ahead.push(out.get().wrapping_add(at), (oy1 - oy0) * ow, true);
    }
    let th = oh.div_ceil(2);
    let ty2 = (ty1 + nty).min(th);
    let ph = spec.padding[0];
    let (iy0, iy1) = (
        (2 * ty1 + 2).saturating_sub(ph).min(h),
        (2 * ty2 + 2).saturating_sub(ph).min(h),
    );
    if ty2 > ty1 {
        for ci in 0..cin {
            ahead.push(x[(ci * h + iy0) * w..].as_ptr(), (iy1 - iy0) * w, false);
        }
    }
    // Over the first three quarters of the products' micro-tiles (each preceded by one step,
    // see `sgemm::gemm_indirect`), so the last lines arrive before the output transform.
    let arch = sgemm::arch_for(cout);
    let tiles = 16 * (t / LANES).div_ceil(arch.nr / LANES) * cout.div_ceil(arch.mr);
    ahead.spread(tiles * 3 / 4);
    let mut bases: Vec<*const f32> = Vec::new();
    bases
        .try_reserve_exact(t / LANES)
        .map_err(|e| format!("winograd tile bases: {e}"))?;
    for (xi, u) in ww.u.iter().enumerate() {
        let vx = &v[xi * vplane..xi * vplane + cin * t];
        bases.clear();
        bases.extend((0..t / LANES).map(|jb| vx[LANES * jb..].as_ptr()));
        let mx = &mut m[xi * mplane..xi * mplane + cout * t];
        // SAFETY: `u` is packed `cout x cin`; B's element (l, q) is `vx[l * t + q]`, inside
        // `vx` for l < cin and q < t; C is `mx`, `cout` rows of `t`, disjoint from `vx`.
        let done = unsafe {
            sgemm::gemm_indirect(
                u,
                &bases,
                &offs,
                mx.as_mut_ptr(),
                t,
                sgemm::Post::NONE,
                &mut |_, _| ahead.step(),
            )
        };
        assert!(done, "applies() checked the kernel");
    }
    ahead.finish();
    output_transform(im, (ty0, ty1), tw16, mplane, m);
    Ok(())
}

/// Cache lines to prefetch a few at a time: runs of floats, each for reading or writing.
#[derive(Default)]
struct Ahead {
    runs: Vec<(*const f32, usize, bool)>,
    run: usize,
    line: usize,
    per: usize,
}

impl Ahead {
    /// The lines of the `n` floats at `p`, for writing if `write`.
    fn push(&mut self, p: *const f32, n: usize, write: bool) {
        if n > 0 {
            self.runs.push((p, n.div_ceil(16), write));
        }
    }

    /// Spreads the lines over about `steps` calls of [`Ahead::step`].
    fn spread(&mut self, steps: usize) {
        let lines: usize = self.runs.iter().map(|r| r.1).sum();
        self.per = lines.div_ceil(steps.max(1));
    }

    /// Prefetches the next few lines.
    fn step(&mut self) {
        self.advance(self.per);
    }

    /// Prefetches the lines left.
    fn finish(&mut self) {
        self.advance(usize::MAX);
    }

    fn advance(&mut self, mut n: usize) {
        while n > 0 && self.run < self.runs.len() {
            let (p, lines, write) = self.runs[self.run];
            let q = p.wrapping_add(16 * self.line);
            if write {
                super::simd::prefetch_write(q, 1);
            } else {
                super::simd::prefetch(q, 1);
            }
            n -= 1;
            self.line += 1;
            if self.line == lines {
                (self.run, self.line) = (self.run + 1, 0);
            }
        }
    }
}

/// `dst[(ci * nrows + r) * 2 * half ..]` gets input row `y0 - ph + r` of channel `ci`, zero-
/// padded by `pw` on the left and split into its even columns (`half` floats) then its odd
/// ones; rows outside the image are zeros.
fn split_rows(spec: &ConvSpec, x: &[f32], y0: usize, nrows: usize, half: usize, dst: &mut [f32]) {
    let (h, w) = (spec.h, spec.w);
    let [ph, pw] = spec.padding;
    for (q, row) in dst.chunks_exact_mut(2 * half).enumerate() {
        let (ci, r) = (q / nrows, q % nrows);
        let (even, odd) = row.split_at_mut(half);
        match (y0 + r).checked_sub(ph).filter(|&iy| iy < h) {
            Some(iy) => split_row(&x[(ci * h + iy) * w..][..w], pw, even, odd),
            None => {
                even.fill(0.0);
                odd.fill(0.0);
            }
        }
    }
}

/// `even[k] = p[2k]`, `odd[k] = p[2k + 1]` for the row `src` padded by `pw` zeros on the
/// left (and zeros past its end).
fn split_row(src: &[f32], pw: usize, even: &mut [f32], odd: &mut [f32]) {
    let at = |c: usize| {
        c.checked_sub(pw)
            .and_then(|i| src.get(i))
            .copied()
            .unwrap_or(0.0)
    };
    let n = even.len().min(odd.len());
    // Pairs whose both columns lie inside `src`: 2k - pw >= 0 and 2k + 1 - pw < len.
    let lo = pw.div_ceil(2).min(n);
    let hi = ((src.len() + pw) / 2).clamp(lo, n);
    for k in (0..lo).chain(hi..n) {
        even[k] = at(2 * k);
        odd[k] = at(2 * k + 1);
    }
    let s = &src[2 * lo - pw..2 * hi - pw];
    let (even, odd) = (&mut even[lo..hi], &mut odd[lo..hi]);
    let len = even.len();
    let blocks = len / LANES;
    // SAFETY: applies() checked AVX-512; block `b` reads `s[32 b .. 32 b + 32]` and writes
    // `even`/`odd[16 b .. 16 b + 16]`, all inside the slices (`s` has `2 * len`); a last,
    // partial block is done again as the whole block that ends at `len` (same values).
    unsafe {
        avx512::deinterleave(s.as_ptr(), even.as_mut_ptr(), odd.as_mut_ptr(), blocks);
        if blocks > 0 && len % LANES != 0 {
            let k = len - LANES;
            let (e, o) = (even.as_mut_ptr().add(k), odd.as_mut_ptr().add(k));
            avx512::deinterleave(s.as_ptr().add(2 * k), e, o, 1);
        }
    }
    for k in if blocks > 0 { len } else { 0 }..len {
        even[k] = s[2 * k];
        odd[k] = s[2 * k + 1];
    }
}

/// `V = Bᵀ d B` of every tile: `v[ξ * plane + ci * t + ty * tw16 + tx]`.
#[allow(clippy::too_many_arguments)]
fn input_transform(
    split: &[f32],
    cin: usize,
    nrows: usize,
    half: usize,
    tw16: usize,
    nty: usize,
    plane: usize,
    v: &mut [f32],
) {
    let t = nty * tw16;
    assert!(plane >= cin * t);
    assert!(split.len() >= cin * nrows * 2 * half && v.len() >= 16 * plane && half > tw16);
    assert!(nrows >= 2 * nty + 2);
    for ci in 0..cin {
        for ty in 0..nty {
            let rows: [*const f32; 4] =
                std::array::from_fn(|i| split[((ci * nrows) + 2 * ty + i) * 2 * half..].as_ptr());
            let at = ci * t + ty * tw16;
            for tx in (0..tw16).step_by(LANES) {
                // SAFETY: AVX-512 (applies()); each row holds `2 * half` floats, of which
                // `tx + 1 .. tx + 17 <= half` and `half + tx + 1 .. half + tx + 17` are read
                // (asserted above); the stores go to `v[ξ * plane + at + tx ..][..16]`, inside
                // `v`.
                unsafe { avx512::input_tile(rows, half, tx, v.as_mut_ptr().add(at + tx), plane) };
            }
        }
    }
}

/// `Y = Aᵀ M A` of every tile (`M[ξ]` at `m[ξ * plane ..]`), plus the bias, then the ReLU,
/// into output rows `2 ty0 ..`.
fn output_transform(
    im: &Image<'_>,
    (ty0, ty1): (usize, usize),
    tw16: usize,
    plane: usize,
    m: &[f32],
) {
    let Image {
        spec,
        img,
        post,
        out,
        ..
    } = *im;
    let (oh, ow, cout) = (spec.oh, spec.ow, spec.cout);
    let nty = ty1 - ty0;
    let t = nty * tw16;
    assert!(plane >= cout * t && m.len() >= 16 * plane);
    let tw = ow.div_ceil(2);
    let full = ow / (2 * LANES) * LANES;
    for co in 0..cout {
        let bias = post.bias.map_or(0.0, |b| b[co]);
        for ty in 0..nty {
            let oy = 2 * (ty0 + ty);
            let two = oy + 1 < oh;
            let base = (img * cout + co) * oh * ow + oy * ow;
            let len = if two { 2 * ow } else { ow };
            // SAFETY: output rows `oy` (and `oy + 1` when inside) of channel `co` of image
            // `img` belong to this job alone.
            let rows = unsafe { std::slice::from_raw_parts_mut(out.get().add(base), len) };
            let (r0, r1) = rows.split_at_mut(ow);
            let m0 = m[co * t + ty * tw16..].as_ptr();
            let mut tail = [[0f32; 2 * LANES]; 2];
            for tx in (0..tw).step_by(LANES) {
                let whole = tx < full;
                // Where 32 floats of output row `r` go: the row itself for whole tiles, else
                // the tail buffer (copied after); none for a second row past the output.
                let [t0, t1] = &mut tail;
                let dst = |r: &mut [f32], t: &mut [f32; 2 * LANES]| match whole {
                    true => r[2 * tx..][..2 * LANES].as_mut_ptr(),
                    false => t.as_mut_ptr(),
                };
                let d0 = dst(r0, t0);
                let d1 = if two {
                    dst(r1, t1)
                } else {
                    std::ptr::null_mut()
                };
                // SAFETY: AVX-512 (applies()); `m0 + ξ * plane + tx .. + 16` lies in `m`
                // (tile rows are padded to whole blocks); `d0`/`d1` hold 32 floats each (an
                // output run of whole tiles, or the tail buffer).
                unsafe { avx512::output_tile(m0.add(tx), plane, bias, post.relu, d0, d1) };
                if !whole {
                    let n = ow - 2 * tx;
                    r0[2 * tx..].copy_from_slice(&tail[0][..n]);
                    if two {
                        r1[2 * tx..].copy_from_slice(&tail[1][..n]);
                    }
                }
            }
        }
    }
}

/// The AVX-512 transforms.
mod avx512 {
    use std::arch::x86_64::*;

    /// Lane indices that interleave or split two registers.
    const fn idx(f: [i32; 16]) -> [i32; 16] {
        f
    }
    const EVEN: [i32; 16] = idx([0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30]);
    const ODD: [i32; 16] = idx([1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31]);
    const LO: [i32; 16] = idx([0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23]);
    const HI: [i32; 16] = idx([8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31]);

    #[inline(always)]
    unsafe fn index(i: [i32; 16]) -> __m512i {
        _mm512_loadu_si512(i.as_ptr() as *const _)
    }

    /// `blocks` blocks of 32 floats from `s` split into 16 even and 16 odd ones.
    ///
    /// # Safety
    /// AVX-512F; `s` readable for `32 * blocks` floats, `e` and `o` writable for `16 * blocks`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn deinterleave(s: *const f32, e: *mut f32, o: *mut f32, blocks: usize) {
        let (ie, io) = (index(EVEN), index(ODD));
        for b in 0..blocks {
            let lo = _mm512_loadu_ps(s.add(32 * b));
            let hi = _mm512_loadu_ps(s.add(32 * b + 16));
            _mm512_storeu_ps(e.add(16 * b), _mm512_permutex2var_ps(lo, ie, hi));
            _mm512_storeu_ps(o.add(16 * b), _mm512_permutex2var_ps(lo, io, hi));
        }
    }

    /// The 1-D input transform `Bᵀ x`.
    #[inline(always)]
    unsafe fn bt(x: [__m512; 4]) -> [__m512; 4] {
        [
            _mm512_sub_ps(x[0], x[2]),
            _mm512_add_ps(x[1], x[2]),
            _mm512_sub_ps(x[2], x[1]),
            _mm512_sub_ps(x[1], x[3]),
        ]
    }

    /// The 1-D output transform `Aᵀ x`.
    #[inline(always)]
    unsafe fn at(x: [__m512; 4]) -> [__m512; 2] {
        [
            _mm512_add_ps(_mm512_add_ps(x[0], x[1]), x[2]),
            _mm512_sub_ps(_mm512_sub_ps(x[1], x[2]), x[3]),
        ]
    }

    /// The input transforms of 16 tiles from column block `tx`: row `i` of their patches is
    /// split row `rows[i]` (even columns, then odd ones from `half`); `V[ξ]` goes to
    /// `v + ξ * plane`.
    ///
    /// # Safety
    /// AVX-512F; the reads and writes as described stay inside their buffers.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn input_tile(
        rows: [*const f32; 4],
        half: usize,
        tx: usize,
        v: *mut f32,
        plane: usize,
    ) {
        let ld = |p: *const f32| _mm512_loadu_ps(p);
        let d: [[__m512; 4]; 4] = [0, 1, 2, 3].map(|i| {
            let (e, o) = (rows[i].add(tx), rows[i].add(half + tx));
            [ld(e), ld(o), ld(e.add(1)), ld(o.add(1))]
        });
        // Bᵀ d (down each column j), then (Bᵀ d) B (along each row i).
        let c: [[__m512; 4]; 4] = [0, 1, 2, 3].map(|j| bt([d[0][j], d[1][j], d[2][j], d[3][j]]));
        for i in 0..4 {
            let s = bt(c.map(|cj| cj[i]));
            for (j, &q) in s.iter().enumerate() {
                _mm512_storeu_ps(v.add((4 * i + j) * plane), q);
            }
        }
    }

    /// The output transforms of 16 tiles: `M[ξ]` at `m + ξ * stride`; bias, then the ReLU
    /// (NaN propagating) if `relu`; output row 0 (32 floats, the tiles' two columns
    /// interleaved) to `d0`, row 1 to `d1` unless null.
    ///
    /// # Safety
    /// AVX-512F; `m + ξ * stride .. + 16` readable for every ξ < 16, `d0` (and `d1`) writable
    /// for 32 floats.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn output_tile(
        m: *const f32,
        stride: usize,
        bias: f32,
        relu: bool,
        d0: *mut f32,
        d1: *mut f32,
    ) {
        let mm = |xi: usize| _mm512_loadu_ps(m.add(xi * stride));
        // Aᵀ M (down each column j), then (Aᵀ M) A (along each row r).
        let c: [[__m512; 2]; 4] =
            [0, 1, 2, 3].map(|j| at([mm(j), mm(4 + j), mm(8 + j), mm(12 + j)]));
        let b = _mm512_set1_ps(bias);
        let (lo, hi) = (index(LO), index(HI));
        for (r, d) in [d0, d1].into_iter().enumerate() {
            if d.is_null() {
                continue;
            }
            let mut y = at([c[0][r], c[1][r], c[2][r], c[3][r]]);
            for v in &mut y {
                *v = _mm512_add_ps(*v, b);
                if relu {
                    let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(*v, *v);
                    *v = _mm512_mask_mov_ps(_mm512_max_ps(*v, _mm512_setzero_ps()), nan, *v);
                }
            }
            let (a, b) = (
                _mm512_permutex2var_ps(y[0], lo, y[1]),
                _mm512_permutex2var_ps(y[0], hi, y[1]),
            );
            _mm512_storeu_ps(d, a);
            _mm512_storeu_ps(d.add(16), b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One tile through the textbook formula `Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A` (in `f64`, with the
    /// `U` of [`transform_kernel`]) equals the direct correlation of the patch.
    #[test]
    fn tile_formula_matches_direct() {
        let d: Vec<f32> = (0..16)
            .map(|i| ((i * 7 + 3) % 11) as f32 / 11.0 - 0.4)
            .collect();
        let g: Vec<f32> = (0..9)
            .map(|i| ((i * 5 + 1) % 7) as f32 / 7.0 - 0.3)
            .collect();
        let u = transform_kernel(&g);
        // V = Bᵀ d B.
        let bt = [
            [1., 0., -1., 0.],
            [0., 1., 1., 0.],
            [0., -1., 1., 0.],
            [0., 1., 0., -1.],
        ];
        let mut v = [[0f64; 4]; 4];
        for i in 0..4 {
            for j in 0..4 {
                for a in 0..4 {
                    for b in 0..4 {
                        v[i][j] += bt[i][a] * d[4 * a + b] as f64 * bt[j][b];
                    }
                }
            }
        }
        let at = [[1., 1., 1., 0.], [0., 1., -1., -1.]];
        for r in 0..2 {
            for c in 0..2 {
                let mut y = 0f64;
                for i in 0..4 {
                    for j in 0..4 {
                        y += at[r][i] * u[4 * i + j] as f64 * v[i][j] * at[c][j];
                    }
                }
                let mut direct = 0f64;
                for ky in 0..3 {
                    for kx in 0..3 {
                        direct += d[4 * (r + ky) + c + kx] as f64 * g[3 * ky + kx] as f64;
                    }
                }
                assert!((y - direct).abs() < 1e-6, "({r},{c}): {y} vs {direct}");
            }
        }
    }
}
