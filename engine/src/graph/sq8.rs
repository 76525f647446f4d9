//! 8-bit scalar quantization of the build's vectors, so the Vamana build reads a quarter of
//! the bytes per distance.
//!
//! The build is bound by memory traffic (see `vamana`): at 100K MiniLM rows each insert's
//! greedy search computed about 2,460 distances, each reading a random 1.5 KB vector. With
//! one byte per dimension a vector is 384 bytes and the whole set (38 MB instead of 146 MB)
//! has a chance to stay in the last-level cache.
//!
//! One scale for all dimensions (`x ≈ min + scale * code`), not one per dimension: the
//! squared L2 distance of two codes is then `scale² * Σ (a_i - b_i)²`, an integer sum that
//! AVX2 computes 32 dimensions at a time without converting to floats. Data that already
//! is 8-bit (Fashion-MNIST's pixels 0..=255) is encoded losslessly. For unit-length text
//! embeddings (MiniLM, components within about ±0.3) the step is about 0.0025, and the
//! relative error of a squared distance between neighbours is well under 1%.
//!
//! Only L2 (and cosine, which the build runs as L2 over unit vectors) has this form; the
//! build keeps exact distances for inner product.

use crate::VertexId;

/// Codes of `n` vectors, one byte per dimension, row-major.
#[derive(Clone, Debug)]
pub struct Sq8 {
    codes: Vec<u8>,
    dim: usize,
    min: f32,
    scale: f32,
}

impl Sq8 {
    /// Encodes `data` (`n` rows of `dim` finite floats) with one range for all values.
    pub fn encode(data: &[f32], dim: usize) -> Sq8 {
        let (mut lo, mut hi) = (f32::INFINITY, f32::NEG_INFINITY);
        for &x in data {
            lo = lo.min(x);
            hi = hi.max(x);
        }
        if data.is_empty() {
            (lo, hi) = (0.0, 0.0);
        }
        // A constant data set still needs a non-zero step; every code is then 0.
        let scale = if hi > lo { (hi - lo) / 255.0 } else { 1.0 };
        let inv = 1.0 / scale;
        let codes = data
            .iter()
            .map(|&x| ((x - lo) * inv).round().clamp(0.0, 255.0) as u8)
            .collect();
        Sq8 {
            codes,
            dim,
            min: lo,
            scale,
        }
    }

    /// The code of vertex `v`.
    #[inline]
    pub fn row(&self, v: VertexId) -> &[u8] {
        let start = v as usize * self.dim;
        &self.codes[start..start + self.dim]
    }

    /// Approximate squared L2 distance between vertices `a` and `b`.
    #[inline(always)]
    pub fn l2_squared(&self, a: VertexId, b: VertexId) -> f32 {
        let sum = code_l2(self.row(a), self.row(b));
        sum as f32 * self.scale * self.scale
    }

    /// The value code `c` stands for.
    pub fn decode(&self, c: u8) -> f32 {
        self.min + self.scale * c as f32
    }

    /// Heap bytes held (the memory estimate's `build_codes`).
    pub fn heap_bytes(&self) -> usize {
        self.codes.capacity()
    }
}

/// `Σ (a_i - b_i)²` over two codes of equal length.
#[inline]
pub fn code_l2(a: &[u8], b: &[u8]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        match simd_level() {
            // SAFETY: `simd_level` saw AVX-512F and AVX-512BW on this CPU.
            SimdLevel::Avx512 => return unsafe { code_l2_avx512(a, b) },
            // SAFETY: `simd_level` saw AVX2 on this CPU.
            SimdLevel::Avx2 if a.len() >= 32 => return unsafe { code_l2_avx2(a, b) },
            _ => {}
        }
    }
    code_l2_scalar(a, b)
}

fn code_l2_scalar(a: &[u8], b: &[u8]) -> u64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| {
            let d = x as i32 - y as i32;
            (d * d) as u64
        })
        .sum()
}

/// The widest instruction set [`code_l2`] may use on this CPU.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SimdLevel {
    Scalar = 1,
    Avx2 = 2,
    Avx512 = 3,
}

#[cfg(target_arch = "x86_64")]
fn simd_level() -> SimdLevel {
    use std::sync::atomic::{AtomicU8, Ordering};
    // 0 = not yet known; the detection macro is cheap but not free, and this runs once per
    // distance.
    static LEVEL: AtomicU8 = AtomicU8::new(0);
    match LEVEL.load(Ordering::Relaxed) {
        3 => SimdLevel::Avx512,
        2 => SimdLevel::Avx2,
        1 => SimdLevel::Scalar,
        _ => {
            let level = if std::is_x86_feature_detected!("avx512f")
                && std::is_x86_feature_detected!("avx512bw")
            {
                SimdLevel::Avx512
            } else if std::is_x86_feature_detected!("avx2") {
                SimdLevel::Avx2
            } else {
                SimdLevel::Scalar
            };
            LEVEL.store(level as u8, Ordering::Relaxed);
            level
        }
    }
}

/// [`code_l2_avx2`] 64 dimensions per step, with a masked last step instead of a scalar
/// tail (784-d Fashion-MNIST ends in 16 bytes). Half the instructions per dimension and half
/// the loads per row: at 384 dimensions 1.6x as fast as AVX2 with both rows in cache and
/// 1.9x with random rows of a 200K-row set (more cache lines in flight per instruction).
/// Overflow: as in AVX2, a lane gains at most 4 * 255² per step.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn code_l2_avx512(a: &[u8], b: &[u8]) -> u64 {
    use std::arch::x86_64::*;
    let n = a.len().min(b.len());
    let zero = _mm512_setzero_si512();
    let mut acc = _mm512_setzero_si512();
    let step = |acc: __m512i, x: __m512i, y: __m512i| {
        let d = _mm512_sub_epi8(_mm512_max_epu8(x, y), _mm512_min_epu8(x, y));
        let lo = _mm512_unpacklo_epi8(d, zero);
        let hi = _mm512_unpackhi_epi8(d, zero);
        let acc = _mm512_add_epi32(acc, _mm512_madd_epi16(lo, lo));
        _mm512_add_epi32(acc, _mm512_madd_epi16(hi, hi))
    };
    let mut i = 0;
    while i + 64 <= n {
        // SAFETY: i + 64 <= n, so both 64-byte loads are inside the slices.
        let (x, y) = unsafe {
            (
                _mm512_loadu_si512(a.as_ptr().add(i) as *const _),
                _mm512_loadu_si512(b.as_ptr().add(i) as *const _),
            )
        };
        acc = step(acc, x, y);
        i += 64;
    }
    if i < n {
        // Fewer than 64 bytes remain; the mask keeps the loads inside the slices (masked-off
        // bytes are not read and count as 0 in both rows).
        let mask: __mmask64 = (1u64 << (n - i)) - 1;
        // SAFETY: only the n - i bytes the mask selects are read, all inside the slices.
        let (x, y) = unsafe {
            (
                _mm512_maskz_loadu_epi8(mask, a.as_ptr().add(i) as *const i8),
                _mm512_maskz_loadu_epi8(mask, b.as_ptr().add(i) as *const i8),
            )
        };
        acc = step(acc, x, y);
    }
    _mm512_reduce_add_epi32(acc) as u32 as u64
}

/// 32 dimensions per step: |a - b| as bytes (max - min, no overflow), widened to 16 bits
/// and squared-and-paired into 32-bit lanes by `madd`. A lane gains at most
/// 4 * 255² = 260,100 per step, so it cannot overflow below 8,000 steps (256,000
/// dimensions, far beyond `MAX_DIM`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn code_l2_avx2(a: &[u8], b: &[u8]) -> u64 {
    use std::arch::x86_64::*;
    let n = a.len().min(b.len());
    let chunks = n / 32;
    let zero = _mm256_setzero_si256();
    let mut acc = _mm256_setzero_si256();
    for i in 0..chunks {
        // SAFETY: i * 32 + 32 <= n, so both 32-byte loads are inside the slices.
        let (x, y) = unsafe {
            (
                _mm256_loadu_si256(a.as_ptr().add(i * 32) as *const __m256i),
                _mm256_loadu_si256(b.as_ptr().add(i * 32) as *const __m256i),
            )
        };
        let d = _mm256_sub_epi8(_mm256_max_epu8(x, y), _mm256_min_epu8(x, y));
        let lo = _mm256_unpacklo_epi8(d, zero);
        let hi = _mm256_unpackhi_epi8(d, zero);
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(lo, lo));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(hi, hi));
    }
    // Horizontal sum: 8 lanes -> 4 -> 2 -> 1 (each lane is far below 2^31, see above, and
    // so are the pairwise sums at any supported dimension).
    let four = _mm_add_epi32(
        _mm256_castsi256_si128(acc),
        _mm256_extracti128_si256::<1>(acc),
    );
    let two = _mm_add_epi32(four, _mm_unpackhi_epi64(four, four));
    let one = _mm_add_epi32(two, _mm_shuffle_epi32::<0b01>(two));
    let head = _mm_cvtsi128_si32(one) as u32 as u64;
    if chunks * 32 == n {
        return head;
    }
    head + code_l2_scalar(&a[chunks * 32..n], &b[chunks * 32..n])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_data_is_lossless_and_distances_exact() {
        // Values 0..=255 in steps of 1: the range maps onto the codes one to one.
        let dim = 70;
        let data: Vec<f32> = (0..3 * dim).map(|i| ((i * 37) % 256) as f32).collect();
        let mut full = data.clone();
        full[0] = 0.0;
        full[1] = 255.0;
        let q = Sq8::encode(&full, dim);
        for (i, &x) in full.iter().enumerate() {
            assert_eq!(q.decode(q.codes[i]), x);
        }
        let exact = |a: usize, b: usize| -> f32 {
            (0..dim)
                .map(|j| (full[a * dim + j] - full[b * dim + j]).powi(2))
                .sum()
        };
        assert_eq!(q.l2_squared(0, 1), exact(0, 1));
        assert_eq!(q.l2_squared(1, 2), exact(1, 2));
        assert_eq!(q.l2_squared(2, 2), 0.0);
    }

    #[test]
    fn simd_and_scalar_sums_agree_on_every_length() {
        // Lengths around the 32-byte step, and extreme bytes (255 - 0 squared).
        for len in [0, 1, 31, 32, 33, 63, 64, 65, 95, 127, 128, 384, 784, 785] {
            let a: Vec<u8> = (0..len).map(|i| (i * 91 % 256) as u8).collect();
            let mut b: Vec<u8> = (0..len).map(|i| (i * 13 % 256) as u8).collect();
            if len > 0 {
                b[0] = if a[0] > 127 { 0 } else { 255 };
            }
            assert_eq!(code_l2(&a, &b), code_l2_scalar(&a, &b), "len {len}");
            #[cfg(target_arch = "x86_64")]
            {
                if std::is_x86_feature_detected!("avx2") && len >= 32 {
                    // SAFETY: AVX2 support was just checked.
                    let avx2 = unsafe { code_l2_avx2(&a, &b) };
                    assert_eq!(avx2, code_l2_scalar(&a, &b), "avx2, len {len}");
                }
                if simd_level() == SimdLevel::Avx512 {
                    // SAFETY: `simd_level` saw AVX-512F and AVX-512BW.
                    let avx512 = unsafe { code_l2_avx512(&a, &b) };
                    assert_eq!(avx512, code_l2_scalar(&a, &b), "avx512, len {len}");
                }
            }
        }
        let ones = vec![255u8; 4096];
        let zeros = vec![0u8; 4096];
        assert_eq!(code_l2(&ones, &zeros), 4096 * 255 * 255);
    }

    #[test]
    fn real_valued_error_is_within_half_a_step_per_dimension() {
        let dim = 48;
        let data: Vec<f32> = (0..10 * dim)
            .map(|i| ((i as f32) * 0.7).sin() * 0.3)
            .collect();
        let q = Sq8::encode(&data, dim);
        let step = q.scale;
        assert!((step - 0.6 / 255.0).abs() < 1e-4, "{step}");
        for (i, &x) in data.iter().enumerate() {
            assert!((q.decode(q.codes[i]) - x).abs() <= step / 2.0 + 1e-6);
        }
        // Distances agree to within the error the half-step bound allows.
        for (a, b) in [(0u32, 1u32), (3, 7), (2, 9)] {
            let exact: f32 = (0..dim)
                .map(|j| (data[a as usize * dim + j] - data[b as usize * dim + j]).powi(2))
                .sum();
            let approx = q.l2_squared(a, b);
            let bound = 2.0 * exact.sqrt() * step * (dim as f32).sqrt() + dim as f32 * step * step;
            assert!((approx - exact).abs() <= bound, "{approx} vs {exact}");
        }
        // A constant set still encodes.
        let flat = Sq8::encode(&[2.0; 8], 4);
        assert_eq!(flat.l2_squared(0, 1), 0.0);
    }
}
