//! Distance kernels.
//!
//! Every distance navis computes goes through this module: the SQL operators, PQ training,
//! graph build, traversal and reranking. The kernels come in two implementations with the
//! same contract:
//!
//! * [`scalar`]: portable Rust, the reference;
//! * `avx2`: AVX2 + FMA, eight lanes with two accumulators, chosen at run time when the CPU
//!   has both features.
//!
//! [`kernels()`] picks the implementation once per process. The two differ only in
//! floating-point summation order, so results agree to a relative error of about 1e-6,
//! which the tests check on random data.
//!
//! Semantics follow pgvector so that SQL queries port unchanged: `<->` is the Euclidean
//! distance, `<#>` the *negative* inner product (smaller is closer), `<=>` one minus the
//! cosine similarity, clamped to `[0, 2]`; the cosine distance involving a zero vector is
//! NaN, as in pgvector.

use std::sync::OnceLock;

/// The three distance functions navis indexes and orders by.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Metric {
    /// Euclidean distance (`<->`). Internally the engine ranks by the squared distance.
    L2,
    /// Negative inner product (`<#>`).
    InnerProduct,
    /// Cosine distance (`<=>`), `1 - cos(a, b)`.
    Cosine,
    /// Manhattan (taxicab) distance (`<+>`, pgvector's `l1_distance`): the sum of `|a_i - b_i|`.
    L1,
}

impl Metric {
    /// The SQL operator that orders by this metric.
    pub fn operator(self) -> &'static str {
        match self {
            Metric::L2 => "<->",
            Metric::InnerProduct => "<#>",
            Metric::Cosine => "<=>",
            Metric::L1 => "<+>",
        }
    }

    /// Stable numeric code used in on-disk manifests.
    pub fn code(self) -> u32 {
        match self {
            Metric::L2 => 1,
            Metric::InnerProduct => 2,
            Metric::Cosine => 3,
            Metric::L1 => 4,
        }
    }

    /// Inverse of [`Metric::code`].
    pub fn from_code(code: u32) -> Option<Metric> {
        match code {
            1 => Some(Metric::L2),
            2 => Some(Metric::InnerProduct),
            3 => Some(Metric::Cosine),
            4 => Some(Metric::L1),
            _ => None,
        }
    }

    /// The distance the engine ranks by inside the index (smaller is closer): squared L2 for
    /// `L2`; squared L2 as well for `Cosine`, because the index stores unit vectors (see
    /// [`normalize`]) and for those `|a-b|^2 = 2 - 2 cos(a, b)` gives the same order; the
    /// negative inner product for `InnerProduct`; the L1 distance itself for `L1`. Saves the
    /// square root on the hot path.
    #[inline]
    pub fn search_distance(self, a: &[f32], b: &[f32]) -> f32 {
        let k = kernels();
        match self {
            Metric::L2 | Metric::Cosine => k.l2_squared(a, b),
            Metric::InnerProduct => -k.dot(a, b),
            Metric::L1 => l1(a, b),
        }
    }

    /// Whether vectors must be scaled to unit length before they enter the index.
    pub fn needs_normalization(self) -> bool {
        self == Metric::Cosine
    }

    /// The distance the SQL operator returns, computed in `f64` at the end as pgvector does.
    pub fn sql_distance(self, a: &[f32], b: &[f32]) -> f64 {
        let k = kernels();
        match self {
            Metric::L2 => (k.l2_squared(a, b) as f64).sqrt(),
            Metric::InnerProduct => -(k.dot(a, b) as f64),
            Metric::Cosine => cosine_distance_from_parts(k.cosine_parts(a, b)),
            Metric::L1 => l1(a, b) as f64,
        }
    }
}

/// `sum |a_i - b_i|`, accumulated in single precision as pgvector does, in eight independent
/// lanes so that the compiler can vectorise it (one ordered sum could not be reordered).
/// Panics if the lengths differ (callers validate first).
pub fn l1(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "vectors of different lengths");
    let mut lanes = [0.0f32; 8];
    let chunks = a.len() / 8;
    for (ca, cb) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        for k in 0..8 {
            lanes[k] += (ca[k] - cb[k]).abs();
        }
    }
    let mut sum: f32 = lanes.iter().sum();
    for i in chunks * 8..a.len() {
        sum += (a[i] - b[i]).abs();
    }
    sum
}

/// `1 - dot / sqrt(|a|^2 |b|^2)`, clamped like pgvector; NaN when either norm is zero.
pub fn cosine_distance_from_parts((dot, norm_a, norm_b): (f32, f32, f32)) -> f64 {
    let similarity = dot as f64 / ((norm_a as f64) * (norm_b as f64)).sqrt();
    if similarity.is_nan() {
        return f64::NAN;
    }
    1.0 - similarity.clamp(-1.0, 1.0)
}

/// Scales `v` to unit length in place; returns false (and leaves `v` alone) for a zero vector,
/// whose cosine distance to anything is undefined.
pub fn normalize(v: &mut [f32]) -> bool {
    let norm = kernels().dot(v, v).sqrt();
    if norm == 0.0 || !norm.is_finite() {
        return false;
    }
    v.iter_mut().for_each(|x| *x /= norm);
    true
}

/// Which kernel implementation is in use.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum KernelKind {
    Scalar,
    Avx2Fma,
}

impl KernelKind {
    pub fn name(self) -> &'static str {
        match self {
            KernelKind::Scalar => "scalar",
            KernelKind::Avx2Fma => "avx2+fma",
        }
    }
}

/// A set of kernels: function pointers chosen once, so hot loops pay no feature checks.
#[derive(Copy, Clone)]
pub struct Kernels {
    pub kind: KernelKind,
    l2_squared: fn(&[f32], &[f32]) -> f32,
    dot: fn(&[f32], &[f32]) -> f32,
    cosine_parts: CosinePartsFn,
}

/// `(a, b) -> (a·b, |a|², |b|²)`.
type CosinePartsFn = fn(&[f32], &[f32]) -> (f32, f32, f32);

impl Kernels {
    /// Squared Euclidean distance. Panics if the lengths differ (callers validate first).
    #[inline]
    pub fn l2_squared(&self, a: &[f32], b: &[f32]) -> f32 {
        assert_eq!(
            a.len(),
            b.len(),
            "distance between vectors of different lengths"
        );
        (self.l2_squared)(a, b)
    }

    /// Inner product.
    #[inline]
    pub fn dot(&self, a: &[f32], b: &[f32]) -> f32 {
        assert_eq!(
            a.len(),
            b.len(),
            "distance between vectors of different lengths"
        );
        (self.dot)(a, b)
    }

    /// `(a·b, |a|², |b|²)` in one pass.
    #[inline]
    pub fn cosine_parts(&self, a: &[f32], b: &[f32]) -> (f32, f32, f32) {
        assert_eq!(
            a.len(),
            b.len(),
            "distance between vectors of different lengths"
        );
        (self.cosine_parts)(a, b)
    }

    /// The portable implementation.
    pub fn scalar() -> Kernels {
        Kernels {
            kind: KernelKind::Scalar,
            l2_squared: scalar::l2_squared,
            dot: scalar::dot,
            cosine_parts: scalar::cosine_parts,
        }
    }

    /// The AVX2+FMA implementation, if this CPU supports it.
    pub fn avx2() -> Option<Kernels> {
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                return Some(Kernels {
                    kind: KernelKind::Avx2Fma,
                    l2_squared: avx2::l2_squared,
                    dot: avx2::dot,
                    cosine_parts: avx2::cosine_parts,
                });
            }
        }
        None
    }
}

/// The best kernels for this CPU, detected once per process.
/// Setting the environment variable `NAVIS_FORCE_SCALAR=1` selects the scalar ones (for
/// benchmarks and for checking a result on a machine without AVX2).
pub fn kernels() -> &'static Kernels {
    static KERNELS: OnceLock<Kernels> = OnceLock::new();
    KERNELS.get_or_init(|| {
        let forced = std::env::var_os("NAVIS_FORCE_SCALAR").is_some_and(|v| v == "1");
        if forced {
            Kernels::scalar()
        } else {
            Kernels::avx2().unwrap_or_else(Kernels::scalar)
        }
    })
}

/// Reference implementations: plain loops the compiler may auto-vectorise for the baseline
/// target (SSE2 on x86_64), but not reassociate, so their result is the sequential sum.
pub mod scalar {
    pub fn l2_squared(a: &[f32], b: &[f32]) -> f32 {
        let mut sum = 0.0f32;
        for (x, y) in a.iter().zip(b) {
            let d = x - y;
            sum += d * d;
        }
        sum
    }

    pub fn dot(a: &[f32], b: &[f32]) -> f32 {
        let mut sum = 0.0f32;
        for (x, y) in a.iter().zip(b) {
            sum += x * y;
        }
        sum
    }

    pub fn cosine_parts(a: &[f32], b: &[f32]) -> (f32, f32, f32) {
        let (mut dot, mut na, mut nb) = (0.0f32, 0.0f32, 0.0f32);
        for (x, y) in a.iter().zip(b) {
            dot += x * y;
            na += x * x;
            nb += y * y;
        }
        (dot, na, nb)
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    // The safe wrappers are only ever installed in `Kernels` after `is_x86_feature_detected!`
    // confirmed AVX2 and FMA, which is what the `target_feature` functions require.

    pub fn l2_squared(a: &[f32], b: &[f32]) -> f32 {
        // SAFETY: installed only when AVX2 and FMA are present (see `Kernels::avx2`).
        unsafe { l2_squared_impl(a, b) }
    }

    pub fn dot(a: &[f32], b: &[f32]) -> f32 {
        // SAFETY: installed only when AVX2 and FMA are present (see `Kernels::avx2`).
        unsafe { dot_impl(a, b) }
    }

    pub fn cosine_parts(a: &[f32], b: &[f32]) -> (f32, f32, f32) {
        // SAFETY: installed only when AVX2 and FMA are present (see `Kernels::avx2`).
        unsafe { cosine_parts_impl(a, b) }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn horizontal_sum(v: __m256) -> f32 {
        let lo = _mm256_castps256_ps128(v);
        let hi = _mm256_extractf128_ps(v, 1);
        let s = _mm_add_ps(lo, hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0x55));
        _mm_cvtss_f32(s)
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn l2_squared_impl(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut acc0 = _mm256_setzero_ps();
        let mut acc1 = _mm256_setzero_ps();
        let mut i = 0;
        // SAFETY (loads below): i + 16 <= n, resp. i + 8 <= n, so every load is in bounds.
        while i + 16 <= n {
            let d0 = _mm256_sub_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)));
            let d1 = _mm256_sub_ps(
                _mm256_loadu_ps(pa.add(i + 8)),
                _mm256_loadu_ps(pb.add(i + 8)),
            );
            acc0 = _mm256_fmadd_ps(d0, d0, acc0);
            acc1 = _mm256_fmadd_ps(d1, d1, acc1);
            i += 16;
        }
        if i + 8 <= n {
            let d0 = _mm256_sub_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)));
            acc0 = _mm256_fmadd_ps(d0, d0, acc0);
            i += 8;
        }
        let mut sum = horizontal_sum(_mm256_add_ps(acc0, acc1));
        while i < n {
            let d = a[i] - b[i];
            sum += d * d;
            i += 1;
        }
        sum
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn dot_impl(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut acc0 = _mm256_setzero_ps();
        let mut acc1 = _mm256_setzero_ps();
        let mut i = 0;
        while i + 16 <= n {
            acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), acc0);
            acc1 = _mm256_fmadd_ps(
                _mm256_loadu_ps(pa.add(i + 8)),
                _mm256_loadu_ps(pb.add(i + 8)),
                acc1,
            );
            i += 16;
        }
        if i + 8 <= n {
            acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), acc0);
            i += 8;
        }
        let mut sum = horizontal_sum(_mm256_add_ps(acc0, acc1));
        while i < n {
            sum += a[i] * b[i];
            i += 1;
        }
        sum
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn cosine_parts_impl(a: &[f32], b: &[f32]) -> (f32, f32, f32) {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut dot = _mm256_setzero_ps();
        let mut na = _mm256_setzero_ps();
        let mut nb = _mm256_setzero_ps();
        let mut i = 0;
        while i + 8 <= n {
            let x = _mm256_loadu_ps(pa.add(i));
            let y = _mm256_loadu_ps(pb.add(i));
            dot = _mm256_fmadd_ps(x, y, dot);
            na = _mm256_fmadd_ps(x, x, na);
            nb = _mm256_fmadd_ps(y, y, nb);
            i += 8;
        }
        let (mut d, mut sa, mut sb) = (horizontal_sum(dot), horizontal_sum(na), horizontal_sum(nb));
        while i < n {
            d += a[i] * b[i];
            sa += a[i] * a[i];
            sb += b[i] * b[i];
            i += 1;
        }
        (d, sa, sb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn l1_matches_a_plain_sum_at_every_length() {
        for n in 0..40usize {
            let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
            let b: Vec<f32> = (0..n).map(|i| (i as f32 * 1.13).cos()).collect();
            let plain: f64 = a.iter().zip(&b).map(|(x, y)| (x - y).abs() as f64).sum();
            assert!((l1(&a, &b) as f64 - plain).abs() < 1e-4, "n = {n}");
            assert_eq!(Metric::L1.search_distance(&a, &b), l1(&a, &b));
            assert_eq!(Metric::L1.sql_distance(&a, &b), l1(&a, &b) as f64);
        }
        assert_eq!(Metric::from_code(Metric::L1.code()), Some(Metric::L1));
        assert_eq!(Metric::L1.operator(), "<+>");
    }

    /// Small deterministic generator so the test needs no dependencies.
    fn random_vectors(seed: u64, count: usize, dim: usize) -> Vec<Vec<f32>> {
        let mut state = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        };
        (0..count)
            .map(|_| (0..dim).map(|_| next() * 10.0).collect())
            .collect()
    }

    fn close(a: f32, b: f32) -> bool {
        (a - b).abs() <= 1e-5 * a.abs().max(b.abs()).max(1.0)
    }

    #[test]
    fn known_values() {
        let a = [1.0f32, 2.0, 3.0];
        let b = [4.0f32, 6.0, 8.0];
        assert_eq!(
            Metric::L2.sql_distance(&a, &b),
            (9.0f64 + 16.0 + 25.0).sqrt()
        );
        assert_eq!(
            Metric::InnerProduct.sql_distance(&a, &b),
            -(4.0 + 12.0 + 24.0)
        );
        let cos = 40.0 / (14.0f64 * 116.0).sqrt();
        assert!((Metric::Cosine.sql_distance(&a, &b) - (1.0 - cos)).abs() < 1e-7);
        // identical and opposite directions hit the clamp ends exactly
        assert_eq!(Metric::Cosine.sql_distance(&a, &a), 0.0);
        let neg: Vec<f32> = a.iter().map(|x| -x).collect();
        assert_eq!(Metric::Cosine.sql_distance(&a, &neg), 2.0);
    }

    #[test]
    fn cosine_with_zero_vector_is_nan_like_pgvector() {
        assert!(Metric::Cosine
            .sql_distance(&[0.0, 0.0], &[1.0, 2.0])
            .is_nan());
        assert!(Metric::Cosine
            .sql_distance(&[0.0, 0.0], &[0.0, 0.0])
            .is_nan());
    }

    #[test]
    fn simd_matches_scalar_on_random_data() {
        let Some(simd) = Kernels::avx2() else {
            eprintln!("AVX2+FMA not available: only the scalar kernels are in use here");
            return;
        };
        let scalar = Kernels::scalar();
        // every length from 1 to 70 exercises the 16-, 8- and 1-wide tails; then real sizes
        let dims: Vec<usize> = (1..=70).chain([128, 384, 784, 1536, 4096]).collect();
        for (seed, &dim) in dims.iter().enumerate() {
            let v = random_vectors(seed as u64 + 1, 2, dim);
            let (a, b) = (&v[0], &v[1]);
            assert!(
                close(simd.l2_squared(a, b), scalar.l2_squared(a, b)),
                "l2 dim {dim}"
            );
            assert!(close(simd.dot(a, b), scalar.dot(a, b)), "dot dim {dim}");
            let (s, r) = (simd.cosine_parts(a, b), scalar.cosine_parts(a, b));
            assert!(
                close(s.0, r.0) && close(s.1, r.1) && close(s.2, r.2),
                "cos dim {dim}"
            );
        }
    }

    #[test]
    fn kernels_against_f64_reference() {
        let k = kernels();
        for (seed, dim) in [(7u64, 3usize), (8, 17), (9, 384), (10, 1000)] {
            let v = random_vectors(seed, 2, dim);
            let (a, b) = (&v[0], &v[1]);
            let l2: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
            let dot: f64 = a
                .iter()
                .zip(b)
                .map(|(x, y)| (*x as f64) * (*y as f64))
                .sum();
            assert!((k.l2_squared(a, b) as f64 - l2).abs() <= 1e-4 * l2.max(1.0));
            assert!((k.dot(a, b) as f64 - dot).abs() <= 1e-3 * dot.abs().max(1.0));
        }
    }

    #[test]
    fn metric_codes_round_trip() {
        for m in [Metric::L2, Metric::InnerProduct, Metric::Cosine] {
            assert_eq!(Metric::from_code(m.code()), Some(m));
        }
        assert_eq!(Metric::from_code(0), None);
    }
}
