//! [`CentroidTable`]: centroids in panels of 64 and the one-row-against-all-centroids
//! kernels, compiled for the baseline target and for AVX2+FMA and chosen at run time.

/// Centroids are processed in panels of this many, one accumulator register set per panel:
/// 64 lanes are eight AVX2 registers, enough independent sums to hide the add latency.
pub const PANEL: usize = GROUPS * GROUP;
/// A panel is kept as four 16-lane groups, each its own local array: the compiler keeps
/// such small arrays in registers, where one 64-lane array would live on the stack.
const GROUP: usize = 16;
const GROUPS: usize = 4;
type Lanes = [f32; GROUP];
type Panel = [Lanes; GROUPS];

/// `k` centroids of `width` values laid out for fast one-row-against-all-centroids kernels:
/// panel `p` holds centroids `64p..64p+64` column by column (`width` groups of 64 values).
/// The last panel is padded; padded centroids have an infinite norm so they never win
/// [`CentroidTable::nearest`], and the table kernels never write them out.
#[derive(Clone, Debug)]
pub struct CentroidTable {
    k: usize,
    width: usize,
    panels: Vec<Panel>,
    norms: Vec<Panel>,
    pub(super) avx2: bool,
}

impl CentroidTable {
    /// Builds the table from `k` row-major centroids of `width` values. Panics if
    /// `centroids.len() != k * width` (the callers construct both).
    pub fn new(centroids: &[f32], k: usize, width: usize) -> Self {
        assert_eq!(
            centroids.len(),
            k * width,
            "centroid table of the wrong size"
        );
        let panel_count = k.div_ceil(PANEL);
        let mut panels = vec![[[0f32; GROUP]; GROUPS]; panel_count * width];
        let mut norms = vec![[[f32::INFINITY; GROUP]; GROUPS]; panel_count];
        for (c, centroid) in centroids.chunks_exact(width).enumerate() {
            let (p, g, lane) = (c / PANEL, c % PANEL / GROUP, c % GROUP);
            for (j, &v) in centroid.iter().enumerate() {
                panels[p * width + j][g][lane] = v;
            }
            norms[p][g][lane] = centroid.iter().map(|v| v * v).sum();
        }
        CentroidTable {
            k,
            width,
            panels,
            norms,
            avx2: avx2_available(),
        }
    }

    pub fn k(&self) -> usize {
        self.k
    }

    pub fn width(&self) -> usize {
        self.width
    }

    /// The nearest centroid to `x` (smallest index among ties) and its squared distance.
    /// Scores are `|c|² - 2x·c`, which ranks like `|x - c|²` at half the arithmetic; the
    /// returned distance adds `|x|²` back (clamped at 0 against cancellation).
    #[inline]
    pub fn nearest(&self, x: &[f32]) -> (u32, f32) {
        assert_eq!(
            x.len(),
            self.width,
            "vector width does not match the centroid table"
        );
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            // SAFETY: `avx2` is true only if the CPU reported AVX2 and FMA at construction.
            let (label, score) = unsafe { nearest_avx2(&self.panels, &self.norms, x) };
            return (label, (score + squared_norm(x)).max(0.0));
        }
        let (label, score) = nearest_body::<false>(&self.panels, &self.norms, x);
        (label, (score + squared_norm(x)).max(0.0))
    }

    /// `out[c] = |x - c|²` for every centroid; `out` must hold at least `k` values.
    #[inline]
    pub fn squared_distances(&self, x: &[f32], out: &mut [f32]) {
        self.fill_table::<true>(x, out);
    }

    /// `out[c] = -(x·c)` for every centroid; `out` must hold at least `k` values.
    #[inline]
    pub fn negative_dots(&self, x: &[f32], out: &mut [f32]) {
        self.fill_table::<false>(x, out);
    }

    /// The two tables above: squared distances when `L2`, negative dots otherwise.
    #[inline]
    fn fill_table<const L2: bool>(&self, x: &[f32], out: &mut [f32]) {
        self.check_table_args(x, out);
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            // SAFETY: `avx2` is true only if the CPU reported AVX2 and FMA at construction.
            unsafe { table_avx2::<L2>(&self.panels, x, &mut out[..self.k]) };
            return;
        }
        table_body::<L2, false>(&self.panels, x, &mut out[..self.k]);
    }

    fn check_table_args(&self, x: &[f32], out: &[f32]) {
        assert_eq!(
            x.len(),
            self.width,
            "vector width does not match the centroid table"
        );
        assert!(
            out.len() >= self.k,
            "output holds {} values, the table has {}",
            out.len(),
            self.k
        );
    }
}

fn squared_norm(x: &[f32]) -> f32 {
    x.iter().map(|v| v * v).sum()
}

fn avx2_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Smallest `|c|² - 2x·c` over all centroids, as (centroid index, score).
#[inline(always)]
fn nearest_body<const FMA: bool>(panels: &[Panel], norms: &[Panel], x: &[f32]) -> (u32, f32) {
    // The running minimum is kept per lane of a 16-wide group. Group numbers are f32 (exact
    // below 2^24) so that the bookkeeping is float compares and selects only, which
    // vectorise; a u32 select does not.
    let mut best = [f32::INFINITY; GROUP];
    let mut best_group = [0f32; GROUP];
    for (p, (panel, norm)) in panels.chunks_exact(x.len()).zip(norms).enumerate() {
        let [mut a0, mut a1, mut a2, mut a3] = *norm;
        for (&xj, column) in x.iter().zip(panel) {
            let m = -2.0 * xj;
            add_scaled::<FMA>(&mut a0, m, &column[0]);
            add_scaled::<FMA>(&mut a1, m, &column[1]);
            add_scaled::<FMA>(&mut a2, m, &column[2]);
            add_scaled::<FMA>(&mut a3, m, &column[3]);
        }
        for (g, scores) in [a0, a1, a2, a3].iter().enumerate() {
            let group_number = (p * GROUPS + g) as f32;
            for lane in 0..GROUP {
                let better = scores[lane] < best[lane];
                best_group[lane] = if better {
                    group_number
                } else {
                    best_group[lane]
                };
                best[lane] = if better { scores[lane] } else { best[lane] };
            }
        }
    }
    let mut winner = (0u32, f32::INFINITY);
    for lane in 0..GROUP {
        let index = best_group[lane] as u32 * GROUP as u32 + lane as u32;
        if best[lane] < winner.1 || (best[lane] == winner.1 && index < winner.0) {
            winner = (index, best[lane]);
        }
    }
    winner
}

/// `acc += m · column`, fused when `FMA` (only instantiated where the CPU has FMA: elsewhere
/// `mul_add` is a slow library call).
#[inline(always)]
fn add_scaled<const FMA: bool>(acc: &mut Lanes, m: f32, column: &Lanes) {
    for lane in 0..GROUP {
        acc[lane] = if FMA {
            column[lane].mul_add(m, acc[lane])
        } else {
            acc[lane] + m * column[lane]
        };
    }
}

/// `acc += (x - column)²`, fused when `FMA`.
#[inline(always)]
fn add_squared_difference<const FMA: bool>(acc: &mut Lanes, x: f32, column: &Lanes) {
    for lane in 0..GROUP {
        let d = x - column[lane];
        acc[lane] = if FMA {
            d.mul_add(d, acc[lane])
        } else {
            acc[lane] + d * d
        };
    }
}

/// `out[c] = Σ (x_j - c_j)²` when `L2`, else `out[c] = Σ (-x_j)·c_j`.
#[inline(always)]
fn table_body<const L2: bool, const FMA: bool>(panels: &[Panel], x: &[f32], out: &mut [f32]) {
    for (panel, out) in panels.chunks_exact(x.len()).zip(out.chunks_mut(PANEL)) {
        let [mut a0, mut a1, mut a2, mut a3] = [[0f32; GROUP]; GROUPS];
        for (&xj, column) in x.iter().zip(panel) {
            if L2 {
                add_squared_difference::<FMA>(&mut a0, xj, &column[0]);
                add_squared_difference::<FMA>(&mut a1, xj, &column[1]);
                add_squared_difference::<FMA>(&mut a2, xj, &column[2]);
                add_squared_difference::<FMA>(&mut a3, xj, &column[3]);
            } else {
                add_scaled::<FMA>(&mut a0, -xj, &column[0]);
                add_scaled::<FMA>(&mut a1, -xj, &column[1]);
                add_scaled::<FMA>(&mut a2, -xj, &column[2]);
                add_scaled::<FMA>(&mut a3, -xj, &column[3]);
            }
        }
        let scores: Panel = [a0, a1, a2, a3];
        match <&mut [f32; PANEL]>::try_from(&mut *out) {
            // A fixed-size store; a variable-length copy would be a memcpy call per panel.
            Ok(full) => *full = bytemuck::cast(scores),
            Err(_) => out.copy_from_slice(&scores.as_flattened()[..out.len()]),
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn nearest_avx2(panels: &[Panel], norms: &[Panel], x: &[f32]) -> (u32, f32) {
    nearest_body::<true>(panels, norms, x)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn table_avx2<const L2: bool>(panels: &[Panel], x: &[f32], out: &mut [f32]) {
    table_body::<L2, true>(panels, x, out)
}
