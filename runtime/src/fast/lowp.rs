//! bf16 and f16 values in the fast runtime.
//!
//! The kernels compute in `f32`. A value of type bf16 or f16 is *stored widened*: in an `f32`
//! buffer (of the arena, a constant, a converted input), each element exactly a value of its
//! type. Reading one is then plain `f32` code, and every step that writes one rounds each
//! stored element once, to nearest with ties to even (as PyTorch's conversions do), after
//! computing it in `f32` ([`round_slice`]); values inside a fused step stay in `f32`, as in
//! XLA and Inductor. Inputs and constants are widened once ([`widen`]), results narrowed to
//! their bytes ([`narrow`]) when they leave the program (exact: the values are already of
//! the type).

use fxhlo_ir::DType;

/// Whether `d` is a reduced-precision float the fast runtime stores widened in `f32`.
pub fn is_lowp(d: DType) -> bool {
    matches!(d, DType::BF16 | DType::F16)
}

/// `x` rounded to the nearest bf16 (ties to even), as an `f32`. A NaN stays a (quiet) NaN of
/// the same sign; values beyond bf16's largest finite round to infinity, as in PyTorch.
#[inline(always)]
pub fn round_bf16(x: f32) -> f32 {
    let b = x.to_bits();
    // Round to nearest even on the 16 dropped bits; a carry into the exponent gives the next
    // binade or infinity. NaN: keep the sign and top payload bits, set the quiet bit.
    let r = b.wrapping_add(0x7fff + ((b >> 16) & 1)) & 0xffff_0000;
    let nan = (b & 0xffff_0000) | 0x0040_0000;
    f32::from_bits(if x.is_nan() { nan } else { r })
}

/// `x` rounded to the nearest f16 (ties to even), as an `f32`.
#[inline(always)]
pub fn round_f16(x: f32) -> f32 {
    half::f16::from_f32(x).to_f32()
}

#[inline(always)]
fn round_bf16_loop(x: &mut [f32]) {
    for v in x.iter_mut() {
        *v = round_bf16(*v);
    }
}

super::simd::multiversion! {
    /// [`round_bf16`] over a slice, in the best vector copy for this CPU.
    fn round_bf16_slice(x: &mut [f32]) => round_bf16_loop
}

/// Rounds every element of `x` to `d` in place (no change for other types). Work splits into
/// parallel chunks of 64 Ki elements on the current pool; the results do not depend on it.
pub fn round_slice(d: DType, x: &mut [f32]) {
    const CHUNK: usize = 1 << 16;
    match d {
        DType::BF16 => super::par_jobs(x, CHUNK, |_, c| round_bf16_slice(c)),
        DType::F16 => super::par_jobs(x, CHUNK, |_, c| {
            c.iter_mut().for_each(|v| *v = round_f16(*v))
        }),
        _ => {}
    }
}

/// The little-endian bytes of a bf16 or f16 tensor widened to `f32` values (exact).
pub fn widen(d: DType, bytes: &[u8]) -> Option<Vec<f32>> {
    let halves = bytes
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]));
    match d {
        DType::BF16 => Some(halves.map(|h| f32::from_bits((h as u32) << 16)).collect()),
        DType::F16 => Some(halves.map(|h| half::f16::from_bits(h).to_f32()).collect()),
        _ => None,
    }
}

/// Writes `x` as little-endian bf16 or f16 bytes into `out` (2 bytes per element), each value
/// rounded to the type (exact for values already of it). False for other types.
pub fn narrow(d: DType, x: &[f32], out: &mut [u8]) -> bool {
    let bits: fn(f32) -> u16 = match d {
        DType::BF16 => |v| (round_bf16(v).to_bits() >> 16) as u16,
        DType::F16 => |v| half::f16::from_f32(v).to_bits(),
        _ => return false,
    };
    for (o, &v) in out.chunks_exact_mut(2).zip(x) {
        o.copy_from_slice(&bits(v).to_le_bytes());
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `round_bf16` is the `half` crate's conversion (round to nearest even) on a sweep of bit
    /// patterns, ties, the largest finite values, subnormals, infinities and NaNs.
    #[test]
    fn round_bf16_matches_half() {
        let mut xs: Vec<f32> = (0..1u32 << 20)
            .map(|i| f32::from_bits(i.wrapping_mul(4099).wrapping_add(i << 12)))
            .collect();
        xs.extend([
            0.0,
            -0.0,
            1.0,
            f32::from_bits(0x3f80_8000), // a tie between 1 and the next: to even (1)
            f32::from_bits(0x3f81_8000), // a tie to the even neighbour above
            f32::from_bits(0x3f80_8001),
            f32::MAX,
            f32::from_bits(0x7f7f_7fff),
            f32::from_bits(0x7f7f_8000), // rounds to infinity
            f32::MIN_POSITIVE,
            f32::from_bits(1),
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            f32::from_bits(0x7f80_0001), // a signalling NaN with only low payload bits
        ]);
        for &x in &xs {
            let want = half::bf16::from_f32(x).to_f32();
            let got = round_bf16(x);
            if want.is_nan() {
                assert!(got.is_nan(), "{x:e} ({:#x})", x.to_bits());
                assert_eq!(got.is_sign_negative(), x.is_sign_negative());
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "{x:e} ({:#x})", x.to_bits());
            }
        }
        let mut v = xs.clone();
        round_slice(DType::BF16, &mut v);
        for (a, &x) in v.iter().zip(&xs) {
            assert!(a.to_bits() == round_bf16(x).to_bits() || a.is_nan() && x.is_nan());
        }
    }

    /// Widening then narrowing gives the bytes back, for every bf16 and f16 bit pattern.
    #[test]
    fn widen_narrow_round_trip() {
        let bytes: Vec<u8> = (0..=u16::MAX).flat_map(|h| h.to_le_bytes()).collect();
        for d in [DType::BF16, DType::F16] {
            let w = widen(d, &bytes).unwrap();
            let mut out = vec![0u8; bytes.len()];
            assert!(narrow(d, &w, &mut out));
            for (k, (a, b)) in out.chunks(2).zip(bytes.chunks(2)).enumerate() {
                let (a, b) = (
                    u16::from_le_bytes([a[0], a[1]]),
                    u16::from_le_bytes([b[0], b[1]]),
                );
                let nan = |h: u16| match d {
                    DType::BF16 => half::bf16::from_bits(h).is_nan(),
                    _ => half::f16::from_bits(h).is_nan(),
                };
                assert!(a == b || nan(a) && nan(b), "{d} {k}: {a:#x} != {b:#x}");
            }
            // Values of the type are fixed points of the rounding.
            let mut r = w.clone();
            round_slice(d, &mut r);
            assert!(r
                .iter()
                .zip(&w)
                .all(|(a, b)| a.to_bits() == b.to_bits() || a.is_nan()));
        }
        assert!(widen(DType::F32, &bytes).is_none());
        assert!(!narrow(DType::I64, &[1.0], &mut [0, 0]));
    }
}
