//! Tensor creation (`arange`, `full`, `empty`, `scalar_tensor`, `fill`) and the random ops
//! (`rand`, `randn`, `randperm`, `native_dropout`).
//!
//! Random values come from a small seeded generator (SplitMix64), one stream per node: they are
//! deterministic for a given seed but differ from torch's generator, so only their shape, range
//! and distribution can be compared with PyTorch.

use super::tensor::{numel, Tensor, R};
use super::{to_usize, Ctx};
use fxhlo_ir::DType;

/// SplitMix64: a tiny, good-quality, seedable generator.
pub(crate) struct Rng(u64);

impl Rng {
    /// The stream for node `stream` under `seed`.
    pub fn new(seed: u64, stream: u64) -> Rng {
        let mut r = Rng(seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03));
        r.next_u64();
        r
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform value in `[0, 1)` with `bits` bits of precision (so it is exact in a float
    /// type with that many significand bits and never rounds up to 1).
    pub fn uniform(&mut self, bits: u32) -> f64 {
        (self.next_u64() >> (64 - bits)) as f64 / (1u64 << bits) as f64
    }

    /// A standard normal value (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform(53);
        let u2 = self.uniform(53);
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    /// A uniform integer in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

fn significand_bits(d: DType) -> u32 {
    match d {
        DType::F32 => 24,
        DType::F16 => 11,
        DType::BF16 => 8,
        _ => 53,
    }
}

/// `arange.start_step(start, end, step, dtype)`: `start + i * step`.
pub(crate) fn arange(cx: &Ctx) -> R<Tensor> {
    let (s, e, st) = (cx.scalar("start")?, cx.scalar("end")?, cx.scalar("step")?);
    let d = cx.out_dtype();
    let (sf, ef, stf) = (s.f64(), e.f64(), st.f64());
    let steps = (ef - sf) / stf;
    if stf == 0.0 || steps.is_nan() || steps < 0.0 {
        return Err(format!("arange({sf}, {ef}, {stf}) has an invalid step"));
    }
    let len = ((ef - sf) / stf).ceil();
    let n = cx.out_shape().first().copied().unwrap_or(0);
    if len != n as f64 {
        return Err(format!(
            "arange has {len} elements, but type inference says {n}"
        ));
    }
    let all_int = !s.is_float() && !e.is_float() && !st.is_float();
    if all_int && !d.is_float() {
        let (a, b) = (s.i64(), st.i64());
        let v = (0..n as i64)
            .map(|i| a.wrapping_add(i.wrapping_mul(b)))
            .collect();
        Ok(Tensor::from_i64s(d, vec![n], v))
    } else {
        let v = (0..n).map(|i| sf + i as f64 * stf).collect();
        Ok(Tensor::from_f64s(d, vec![n], v))
    }
}

/// `full(size, fill_value, dtype)`.
pub(crate) fn full(cx: &Ctx) -> R<Tensor> {
    Ok(Tensor::full(
        cx.out_dtype(),
        cx.out_shape(),
        cx.scalar("fill_value")?,
    ))
}

/// `full_like(self, fill_value, dtype)`.
pub(crate) fn full_like(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    Ok(Tensor::full(
        cx.out_dtype(),
        x.shape.clone(),
        cx.scalar("fill_value")?,
    ))
}

/// `empty.memory_format`, `empty_strided`: zeros (any value is allowed).
pub(crate) fn empty(cx: &Ctx) -> R<Tensor> {
    let shape = cx
        .ints("size")?
        .into_iter()
        .map(|s| to_usize(s, "a size"))
        .collect::<R<Vec<_>>>()?;
    Ok(Tensor::zeros(cx.out_dtype(), shape))
}

/// `tril_indices`/`triu_indices(row, col, offset)` (`lower`): the coordinates of the lower
/// (upper) triangle, row by row.
pub(crate) fn tri_indices(cx: &Ctx, lower: bool) -> R<Tensor> {
    let (row, col, offset) = (cx.int("row")?, cx.int("col")?, cx.int("offset")?);
    let coords = fxhlo_ir::infer::tri_coordinates(row, col, offset, lower);
    let n = coords.len() / 2;
    Ok(Tensor::from_i64s(cx.out_dtype(), vec![2, n], coords))
}

/// `scalar_tensor(s, dtype)`: a 0-d tensor.
pub(crate) fn scalar_tensor(cx: &Ctx) -> R<Tensor> {
    Ok(Tensor::full(cx.out_dtype(), vec![], cx.scalar("s")?))
}

/// `fill.Scalar(self, value)`.
pub(crate) fn fill(cx: &Ctx) -> R<Tensor> {
    let x = cx.t("self")?;
    Ok(Tensor::full(x.dtype, x.shape.clone(), cx.scalar("value")?))
}

/// `rand` (uniform in `[0, 1)`) and `randn` (standard normal).
pub(crate) fn rand(cx: &Ctx, normal: bool) -> R<Tensor> {
    let d = cx.out_dtype();
    let shape = cx.out_shape();
    let mut rng = cx.rng();
    let bits = significand_bits(d);
    let v = (0..numel(&shape))
        .map(|_| {
            if normal {
                rng.normal()
            } else {
                rng.uniform(bits)
            }
        })
        .collect();
    Ok(Tensor::from_f64s(d, shape, v))
}

/// `randperm(n, dtype)`: a uniformly random permutation of `0..n` (Fisher-Yates).
pub(crate) fn randperm(cx: &Ctx) -> R<Tensor> {
    let n = to_usize(cx.int("n")?, "n")?;
    let mut v: Vec<i64> = (0..n as i64).collect();
    let mut rng = cx.rng();
    for i in (1..n).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        v.swap(i, j);
    }
    Ok(Tensor::from_i64s(cx.out_dtype(), vec![n], v))
}

/// `native_dropout(input, p, train)`: with `train` false (or an empty input) the identity and
/// an all-true mask; otherwise each element is kept with probability `1 - p` and scaled by
/// `1 / (1 - p)`.
pub(crate) fn native_dropout(cx: &Ctx) -> R<Vec<Tensor>> {
    let x = cx.t("input")?;
    let p = cx.float("p")?;
    let train = cx.opt_bool("train")?.unwrap_or(true);
    if !train || x.numel() == 0 {
        let mask = Tensor::from_bools(DType::Bool, x.shape.clone(), vec![true; x.numel()]);
        return Ok(vec![x.clone(), mask]);
    }
    if !(0.0..=1.0).contains(&p) {
        return Err(format!("dropout probability must be in [0, 1], found {p}"));
    }
    let keep = 1.0 - p;
    let scale = if keep == 0.0 { 0.0 } else { 1.0 / keep };
    let mut rng = cx.rng();
    let mask: Vec<bool> = (0..x.numel()).map(|_| rng.uniform(53) < keep).collect();
    let v = x
        .f64s()
        .into_iter()
        .zip(&mask)
        .map(|(a, &m)| if m { a * scale } else { 0.0 })
        .collect();
    Ok(vec![
        Tensor::from_f64s(x.dtype, x.shape.clone(), v),
        Tensor::from_bools(DType::Bool, x.shape.clone(), mask),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_deterministic_and_in_range() {
        let mut a = Rng::new(7, 3);
        let mut b = Rng::new(7, 3);
        let mut c = Rng::new(7, 4);
        let xa: Vec<u64> = (0..4).map(|_| a.next_u64()).collect();
        let xb: Vec<u64> = (0..4).map(|_| b.next_u64()).collect();
        let xc: Vec<u64> = (0..4).map(|_| c.next_u64()).collect();
        assert_eq!(xa, xb);
        assert_ne!(xa, xc);
        let mut r = Rng::new(1, 1);
        let mut mean = 0.0;
        for _ in 0..10_000 {
            let u = r.uniform(24);
            assert!((0.0..1.0).contains(&u));
            mean += u / 10_000.0;
            assert!(r.below(5) < 5);
        }
        assert!((mean - 0.5).abs() < 0.02, "{mean}");
    }
}
