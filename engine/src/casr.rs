//! Windowed CASR: convergence-aware speculative reranking (NAVIS release README, digest §1.4.2).
//!
//! After traversal the explored candidates are sorted by PQ distance. Full vectors are loaded
//! in that order and the exact top-K is tracked. Reranking stops once the top-K has gone `w`
//! consecutive loads without changing. After a change at (1-based) position `p` the next `w`
//! vectors are needed whatever happens, so everything up to `p + w` that has not been issued
//! yet is read as ONE batch; a rerank therefore loads exactly `min(last_change + w, n)`
//! vectors, none wasted past convergence, in as few batches as the changes allow.
//!
//! While the top-K is still filling every load changes it, so at least `min(K + w, n)` vectors
//! are loaded.
//!
//! The window is calibrated by [`WindowCalibrator`]: warm-up reranks load every candidate and
//! record the smallest window that would not have stopped them early (the largest gap between
//! consecutive top-K change positions); the window is a percentile of those (P99 for search,
//! P90 for position seeking by default).
//!
//! I/O is the caller's: vectors come through [`VectorLoader::load_batch`], one call per batch,
//! so the caller can submit each batch as one io_uring submission.

use std::io;

use crate::distance::Metric;
use crate::VertexId;

/// Source of full-precision vectors for reranking.
pub trait VectorLoader {
    /// Appends the vectors of `ids`, in order, to `out` (`ids.len() * dim` floats).
    fn load_batch(&mut self, ids: &[VertexId], out: &mut Vec<f32>) -> io::Result<()>;
}

impl<F> VectorLoader for F
where
    F: FnMut(&[VertexId], &mut Vec<f32>) -> io::Result<()>,
{
    fn load_batch(&mut self, ids: &[VertexId], out: &mut Vec<f32>) -> io::Result<()> {
        self(ids, out)
    }
}

/// How many candidates a rerank loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RerankPolicy {
    /// Windowed CASR with window `w >= 1`.
    Window(usize),
    /// Load every candidate: the CASR-off ablation, and the warm-up reranks of calibration.
    All,
}

/// Result of one rerank.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rerank {
    /// Every loaded candidate with its exact distance, in load (PQ) order.
    pub scored: Vec<(VertexId, f32)>,
    /// Size of each batch handed to the loader, in issue order (they sum to `scored.len()`).
    pub batches: Vec<usize>,
    /// 1-based load positions at which the exact top-K set changed.
    pub change_positions: Vec<usize>,
    /// The window used; 0 for [`RerankPolicy::All`].
    pub window: usize,
}

impl Rerank {
    /// Number of full vectors loaded.
    pub fn loads(&self) -> usize {
        self.scored.len()
    }

    /// Position of the last top-K change (0 when nothing was loaded).
    pub fn last_change(&self) -> usize {
        self.change_positions.last().copied().unwrap_or(0)
    }

    /// The smallest window that would have reached this rerank's final top-K; meaningful when
    /// every candidate was loaded ([`RerankPolicy::All`]).
    pub fn min_safe_window(&self) -> usize {
        min_safe_window(&self.change_positions)
    }

    /// Loaded candidates sorted by exact distance (ties by id, so the order is deterministic).
    pub fn sorted_by_exact(&self) -> Vec<(VertexId, f32)> {
        let mut out = self.scored.clone();
        sort_by_distance(&mut out);
        out
    }
}

/// Sorts `(id, distance)` pairs by distance, then id; NaN sorts last.
pub fn sort_by_distance(pairs: &mut [(VertexId, f32)]) {
    pairs.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
}

/// The largest gap between consecutive change positions, counting from position 0; at least 1.
pub fn min_safe_window(change_positions: &[usize]) -> usize {
    let mut prev = 0;
    let mut widest = 1;
    for &p in change_positions {
        widest = widest.max(p - prev);
        prev = p;
    }
    widest
}

/// The smallest window with which a [`StopRule`] of floor `min_loads` reaches every change:
/// like [`min_safe_window`], but gaps ending inside the floor cost nothing. A gap ending past
/// the floor still counts from the previous change, because the window runs from there.
pub fn min_safe_window_with_floor(change_positions: &[usize], min_loads: usize) -> usize {
    let mut prev = 0;
    let mut widest = 1;
    for &p in change_positions {
        if p > min_loads {
            widest = widest.max(p - prev);
        }
        prev = p;
    }
    widest
}

/// Reranks `sorted` (candidates in increasing PQ distance) against `query` with exact distances.
///
/// `k` is the size of the top-K whose stability decides convergence.
pub fn rerank(
    query: &[f32],
    metric: Metric,
    sorted: &[VertexId],
    k: usize,
    policy: RerankPolicy,
    loader: &mut dyn VectorLoader,
) -> io::Result<Rerank> {
    let window = match policy {
        RerankPolicy::Window(0) => {
            return Err(invalid_input("CASR window must be at least 1"));
        }
        RerankPolicy::Window(w) => w,
        RerankPolicy::All => sorted.len().max(1),
    };
    if k == 0 {
        return Err(invalid_input("CASR top-K must be at least 1"));
    }
    let n = sorted.len();
    let dim = query.len();
    let mut out = Rerank {
        window: if policy == RerankPolicy::All {
            0
        } else {
            window
        },
        ..Rerank::default()
    };
    let mut top = TopK::new(k);
    // The first batch is K + w: while the top-K fills, every load is a change, so the rule
    // reaches position K + w whatever the distances are. Loading it at once reads exactly the
    // vectors a first batch of w would lead to, in one round trip instead of about K / w + 1
    // (with K = 10, w = 8: one device wait instead of three out of memory).
    let mut want = k.saturating_add(window).min(n);
    let mut buffer = Vec::with_capacity(want * dim);
    let mut issued = 0;
    while want > issued {
        let batch = &sorted[issued..want];
        buffer.clear();
        loader.load_batch(batch, &mut buffer)?;
        if buffer.len() != batch.len() * dim {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "vector loader returned {} floats for {} vectors of dimension {dim}",
                    buffer.len(),
                    batch.len()
                ),
            ));
        }
        out.batches.push(batch.len());
        for (&id, vector) in batch.iter().zip(buffer.chunks_exact(dim.max(1))) {
            let d = metric.search_distance(query, vector);
            out.scored.push((id, d));
            if top.offer(id, d) {
                out.change_positions.push(out.scored.len());
            }
        }
        issued = want;
        // Every vector of a batch lies within `w` of a change seen so far, so processing the
        // whole batch before deciding loses nothing against one-at-a-time processing.
        want = if policy == RerankPolicy::All {
            n
        } else {
            (out.last_change() + window).min(n)
        };
    }
    Ok(out)
}

fn invalid_input(message: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message.to_string())
}

/// The exact top-K seen so far, kept sorted (K is small: tens).
struct TopK {
    k: usize,
    items: Vec<(f32, VertexId)>,
}

impl TopK {
    fn new(k: usize) -> TopK {
        TopK {
            k,
            items: Vec::with_capacity(k + 1),
        }
    }

    /// The K-th best distance so far; infinite while the top-K is still filling.
    fn kth(&self) -> f32 {
        if self.items.len() < self.k {
            f32::INFINITY
        } else {
            self.items[self.k - 1].0
        }
    }

    /// Inserts `(id, d)` if it belongs to the top-K; returns whether the set changed.
    fn offer(&mut self, id: VertexId, d: f32) -> bool {
        if self.items.len() == self.k {
            let worst = self.items[self.k - 1].0;
            // A tie with the current worst does not displace it: the set would not improve.
            if d.total_cmp(&worst).is_ge() {
                return false;
            }
            self.items.pop();
        }
        let at = self
            .items
            .partition_point(|&(x, _)| x.total_cmp(&d).is_le());
        self.items.insert(at, (d, id));
        true
    }
}

/// Calibrates a CASR window from warm-up reranks that loaded every candidate.
#[derive(Clone, Debug)]
pub struct WindowCalibrator {
    warmup: usize,
    percentile: f64,
    samples: Vec<usize>,
    window: Option<usize>,
}

/// Default number of warm-up reranks per path (NAVIS `--warmup-queries 1000`).
pub const DEFAULT_WARMUP: usize = 1000;
/// Default percentile for search reranks. The NAVIS release uses P100; P99 is the default
/// here because the largest warm-up window is set by a handful of outlier queries: measured
/// with `navis-bench casr-sweep` (benchmarks/results/engine.md, "Target (c)"), P99 cut the
/// loads per rerank at L = 160 from 31% to 18% of the explored set on Fashion-MNIST and
/// from 37% to 26% on MiniLM, losing at most 0.10 points of recall@10 there (0.15 on
/// GloVe-50), while P98 already lost 0.21-0.22 points on MiniLM at L = 80 and 160.
pub const SEARCH_PERCENTILE: f64 = 99.0;
/// Default percentile for position-seeking reranks.
pub const INSERT_PERCENTILE: f64 = 90.0;

impl WindowCalibrator {
    /// A calibrator that fixes the window after `warmup` samples at `percentile` (0 < p <= 100).
    pub fn new(warmup: usize, percentile: f64) -> Result<WindowCalibrator, String> {
        if warmup == 0 {
            return Err("CASR warm-up needs at least one rerank".into());
        }
        if !(percentile > 0.0 && percentile <= 100.0) {
            return Err(format!(
                "CASR percentile must be in (0, 100], got {percentile}"
            ));
        }
        Ok(WindowCalibrator {
            warmup,
            percentile,
            samples: Vec::with_capacity(warmup),
            window: None,
        })
    }

    /// Search-path defaults: 1000 warm-up reranks, P99 ([`SEARCH_PERCENTILE`]).
    pub fn for_search() -> WindowCalibrator {
        WindowCalibrator::new(DEFAULT_WARMUP, SEARCH_PERCENTILE).expect("valid defaults")
    }

    /// Insert-path defaults: 1000 warm-up reranks, P90.
    pub fn for_insert() -> WindowCalibrator {
        WindowCalibrator::new(DEFAULT_WARMUP, INSERT_PERCENTILE).expect("valid defaults")
    }

    /// The calibrated window, once warm-up is complete.
    pub fn window(&self) -> Option<usize> {
        self.window
    }

    /// Warm-up samples recorded so far.
    pub fn samples(&self) -> usize {
        self.samples.len()
    }

    /// Records a full rerank (one that loaded every candidate). Reranks of an empty candidate
    /// list carry no information and are ignored. Samples after calibration are ignored too:
    /// the window is fixed once, as in the NAVIS release.
    pub fn record(&mut self, full: &Rerank) {
        if full.loads() == 0 {
            return;
        }
        self.record_window(full.min_safe_window());
    }

    /// Records one warm-up rerank's minimal safe window.
    pub fn record_window(&mut self, needed: usize) {
        if self.window.is_some() {
            return;
        }
        self.samples.push(needed.max(1));
        if self.samples.len() >= self.warmup {
            self.window = Some(percentile(&mut self.samples, self.percentile));
        }
    }
}

/// Nearest-rank percentile: the smallest sample with at least `p`% of samples at or below it.
pub fn percentile(samples: &mut [usize], p: f64) -> usize {
    if samples.is_empty() {
        return 1;
    }
    samples.sort_unstable();
    let rank = (p * samples.len() as f64 / 100.0).ceil() as usize;
    samples[rank.clamp(1, samples.len()) - 1]
}

/// A generalised CASR stopping rule, for measuring alternatives to the plain window
/// (`navis-bench casr-sweep`). A rerank over candidates in PQ order stops after `i` loads when
/// `i >= min_loads` and ANY active convergence signal says the top-K is settled:
///
/// - `window: Some(w)`: the top-K has not changed for `w` loads (the NAVIS rule of [`rerank`]);
/// - `pq_ratio: Some(c)`: the next candidate's PQ distance times `c` exceeds the current K-th
///   exact distance. Candidates come in increasing PQ distance, so once this holds it holds
///   for every later one as long as the K-th distance does not grow (it only shrinks).
///   `c` absorbs the PQ error and is calibrated by [`max_safe_pq_ratio`]. Meaningful for
///   non-negative distances (L2, cosine) only.
///
/// With neither signal every candidate is loaded. `min_loads` is a floor that lets a small
/// window or ratio be used while the first loads (where most top-K members sit) stay certain.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StopRule {
    pub window: Option<usize>,
    pub pq_ratio: Option<f32>,
    pub min_loads: usize,
}

/// Reranks like [`rerank`] under a [`StopRule`]. `pq[i]` is the PQ distance of `sorted[i]`
/// (non-decreasing). Each batch reaches the furthest position every active signal already
/// requires (for the window, `last change + w`; for the ratio, the last candidate the current
/// K-th distance admits), so loads past the stopping point are possible only for the ratio
/// signal, whose K-th distance can shrink within a batch.
pub fn rerank_rule(
    query: &[f32],
    metric: Metric,
    sorted: &[VertexId],
    pq: &[f32],
    k: usize,
    rule: StopRule,
    loader: &mut dyn VectorLoader,
) -> io::Result<Rerank> {
    if k == 0 || rule.window == Some(0) || sorted.len() != pq.len() {
        return Err(invalid_input(
            "rerank_rule needs k and window >= 1 and one PQ distance per candidate",
        ));
    }
    if rule.pq_ratio.is_some() && metric == Metric::InnerProduct {
        return Err(invalid_input(
            "the PQ-ratio signal needs non-negative distances (L2 or cosine)",
        ));
    }
    let n = sorted.len();
    let dim = query.len();
    let floor = rule.min_loads.min(n);
    let mut out = Rerank {
        window: rule.window.unwrap_or(0),
        ..Rerank::default()
    };
    let mut top = TopK::new(k);
    let mut buffer = Vec::new();
    let mut issued = 0;
    loop {
        // How far the loads must go before the rule may stop: the rule is checked at each
        // position in turn, so the nearest requirement among the OR-ed signals decides.
        // While the top-K fills every load is a change, so the window needs at least K + w
        // (as in [`rerank`], whose first batch that is).
        let window_need = rule.window.map(|w| out.last_change().max(k) + w);
        let ratio_need = rule.pq_ratio.map(|c| {
            if top.items.len() < k {
                // Still filling: the first K are needed whatever the PQ distances say.
                k
            } else {
                let kth = top.kth();
                issued + pq[issued..].partition_point(|&d| d * c <= kth)
            }
        });
        let need = match (window_need, ratio_need) {
            (None, None) => n,
            (Some(a), None) | (None, Some(a)) => a,
            (Some(a), Some(b)) => a.min(b),
        }
        .max(floor);
        let want = need.min(n);
        if want <= issued {
            break;
        }
        let batch = &sorted[issued..want];
        buffer.clear();
        loader.load_batch(batch, &mut buffer)?;
        if buffer.len() != batch.len() * dim {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "vector loader returned {} floats for {} vectors of dimension {dim}",
                    buffer.len(),
                    batch.len()
                ),
            ));
        }
        out.batches.push(batch.len());
        for (&id, vector) in batch.iter().zip(buffer.chunks_exact(dim.max(1))) {
            let d = metric.search_distance(query, vector);
            out.scored.push((id, d));
            if top.offer(id, d) {
                out.change_positions.push(out.scored.len());
            }
        }
        issued = want;
    }
    Ok(out)
}

/// The largest PQ ratio `c` with which [`StopRule`]`{ pq_ratio: Some(c), min_loads, .. }`
/// would still have reached every top-K change of `full` (a rerank that loaded all candidates
/// in PQ order, `pq[i]` the PQ distance of `full.scored[i]`); infinite when the top-K is
/// final within the floor. While the top-K fills (the first `k` loads) the rule never stops.
/// Calibrate by taking a low percentile of these over warm-up reranks ([`ratio_percentile`]).
pub fn max_safe_pq_ratio(full: &Rerank, pq: &[f32], k: usize, min_loads: usize) -> f32 {
    let last = full.last_change();
    let floor = k.max(min_loads);
    let mut top = TopK::new(k.max(1));
    let mut best = f32::INFINITY;
    for (i, &(id, d)) in full.scored.iter().enumerate() {
        // Before loading position i (0-based) the rule stops when pq[i] * c > kth; reaching
        // the last change needs pq[i] * c <= kth for every i in [floor, last).
        if i >= floor && i < last && pq[i] > 0.0 {
            best = best.min(top.kth() / pq[i]);
        }
        top.offer(id, d);
    }
    best
}

/// The largest ratio that at least `p`% of the `samples` (per-query safe ratios) allow:
/// the nearest-rank counterpart of [`percentile`] for a signal where smaller is safer.
pub fn ratio_percentile(samples: &mut [f32], p: f64) -> f32 {
    if samples.is_empty() {
        return f32::INFINITY;
    }
    samples.sort_unstable_by(f32::total_cmp);
    let keep = (p * samples.len() as f64 / 100.0).ceil() as usize;
    samples[samples.len() - keep.clamp(1, samples.len())]
}

#[cfg(test)]
mod tests;
