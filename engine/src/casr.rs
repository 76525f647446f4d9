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
//! consecutive top-K change positions); the window is a percentile of those (P100 for search,
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
    let mut buffer = Vec::with_capacity(window.min(n) * dim);
    let mut issued = 0;
    let mut want = window.min(n);
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
/// Default percentile for search reranks.
pub const SEARCH_PERCENTILE: f64 = 100.0;
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

    /// Search-path defaults: 1000 warm-up reranks, P100.
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Candidates 0..n whose exact distance to the query [0] is `dist[i]` (1-d vectors x with
    /// x^2 = dist), with a loader that records every batch it is asked for.
    struct Fixture {
        vectors: Vec<f32>,
        calls: Vec<Vec<VertexId>>,
    }

    impl Fixture {
        fn new(dist: &[f32]) -> Fixture {
            Fixture {
                vectors: dist.iter().map(|d| d.sqrt()).collect(),
                calls: Vec::new(),
            }
        }

        fn run(&mut self, k: usize, policy: RerankPolicy) -> Rerank {
            let ids: Vec<VertexId> = (0..self.vectors.len() as u32).collect();
            let vectors = self.vectors.clone();
            let calls = &mut self.calls;
            let mut loader = |batch: &[VertexId], out: &mut Vec<f32>| -> io::Result<()> {
                calls.push(batch.to_vec());
                out.extend(batch.iter().map(|&i| vectors[i as usize]));
                Ok(())
            };
            rerank(&[0.0], Metric::L2, &ids, k, policy, &mut loader).unwrap()
        }
    }

    #[test]
    fn stops_after_w_unchanged_loads() {
        // k = 2. Changes at positions 1, 2 (filling), 4 (distance 1 beats 5). Nothing after.
        let dist = [4.0, 5.0, 9.0, 1.0, 7.0, 8.0, 6.0, 9.5, 0.5, 3.0];
        let mut f = Fixture::new(&dist);
        let r = f.run(2, RerankPolicy::Window(3));
        assert_eq!(r.change_positions, vec![1, 2, 4]);
        // last change 4 + w 3 = 7 loads; the 0.5 at position 9 is beyond convergence.
        assert_eq!(r.loads(), 7);
        // First window [0,3); after it last change is 2 -> want 5: batch [3,5); the change at 4
        // extends want to 7: batch [5,7); no change there, so stop.
        assert_eq!(r.batches, vec![3, 2, 2]);
        assert_eq!(f.calls, vec![vec![0, 1, 2], vec![3, 4], vec![5, 6]]);
        let top: Vec<VertexId> = r.sorted_by_exact().iter().take(2).map(|p| p.0).collect();
        assert_eq!(top, vec![3, 0]);
    }

    #[test]
    fn loads_min_of_last_change_plus_w_and_n() {
        // Improvements keep coming: every load changes the top-1.
        let dist = [9.0, 8.0, 7.0, 6.0, 5.0];
        let mut f = Fixture::new(&dist);
        let r = f.run(1, RerankPolicy::Window(2));
        assert_eq!(r.change_positions, vec![1, 2, 3, 4, 5]);
        assert_eq!(r.loads(), 5);
        assert_eq!(r.batches, vec![2, 2, 1]);

        // Top-1 settles at the first load: exactly 1 + w loads, the last as a batch of its own.
        let dist = [1.0, 8.0, 7.0, 6.0, 5.0];
        let mut f = Fixture::new(&dist);
        let r = f.run(1, RerankPolicy::Window(2));
        assert_eq!(r.loads(), 3);
        assert_eq!(r.batches, vec![2, 1]);
    }

    #[test]
    fn while_filling_every_load_is_a_change() {
        let dist = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
        let mut f = Fixture::new(&dist);
        let r = f.run(4, RerankPolicy::Window(2));
        // Sorted input: changes exactly at 1..=4, so K + w = 6 loads.
        assert_eq!(r.change_positions, vec![1, 2, 3, 4]);
        assert_eq!(r.loads(), 6);
        assert_eq!(r.batches, vec![2, 2, 2]);
    }

    #[test]
    fn rerank_all_loads_everything_in_one_batch() {
        let dist = [4.0, 5.0, 9.0, 1.0, 7.0, 8.0, 6.0, 9.5, 0.5, 3.0];
        let mut f = Fixture::new(&dist);
        let r = f.run(2, RerankPolicy::All);
        assert_eq!(r.loads(), 10);
        assert_eq!(r.batches, vec![10]);
        assert_eq!(r.window, 0);
        assert_eq!(r.change_positions, vec![1, 2, 4, 9]);
        // Gaps 1, 1, 2, 5: a window of 5 is the smallest that reaches position 9.
        assert_eq!(r.min_safe_window(), 5);
        let mut f = Fixture::new(&dist);
        let windowed = f.run(2, RerankPolicy::Window(5));
        assert_eq!(windowed.loads(), 10);
        let mut f = Fixture::new(&dist);
        let short = f.run(2, RerankPolicy::Window(4));
        assert_eq!(short.loads(), 8, "window 4 stops before the change at 9");
        assert_ne!(
            short.sorted_by_exact()[..2],
            windowed.sorted_by_exact()[..2]
        );
    }

    #[test]
    fn window_larger_than_candidates_and_empty_input() {
        let mut f = Fixture::new(&[3.0, 1.0]);
        let r = f.run(10, RerankPolicy::Window(64));
        assert_eq!(r.loads(), 2);
        assert_eq!(r.batches, vec![2]);
        let mut f = Fixture::new(&[]);
        let r = f.run(10, RerankPolicy::Window(4));
        assert_eq!(r.loads(), 0);
        assert!(r.batches.is_empty());
        assert_eq!(f.calls.len(), 0);
    }

    #[test]
    fn bad_arguments_and_short_loads_are_errors() {
        let ids = [0u32, 1];
        let mut ok = |b: &[VertexId], out: &mut Vec<f32>| -> io::Result<()> {
            out.extend(b.iter().map(|_| 1.0));
            Ok(())
        };
        let e = rerank(
            &[0.0],
            Metric::L2,
            &ids,
            1,
            RerankPolicy::Window(0),
            &mut ok,
        );
        assert_eq!(e.unwrap_err().kind(), io::ErrorKind::InvalidInput);
        let e = rerank(&[0.0], Metric::L2, &ids, 0, RerankPolicy::All, &mut ok);
        assert_eq!(e.unwrap_err().kind(), io::ErrorKind::InvalidInput);
        let mut short = |_: &[VertexId], out: &mut Vec<f32>| -> io::Result<()> {
            out.push(1.0);
            Ok(())
        };
        let e = rerank(&[0.0], Metric::L2, &ids, 1, RerankPolicy::All, &mut short);
        assert_eq!(e.unwrap_err().kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn min_safe_window_counts_from_zero() {
        assert_eq!(min_safe_window(&[]), 1);
        assert_eq!(min_safe_window(&[1, 2, 3]), 1);
        assert_eq!(min_safe_window(&[1, 2, 9]), 7);
        assert_eq!(min_safe_window(&[3]), 3);
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        let mut v: Vec<usize> = (1..=10).rev().collect();
        assert_eq!(percentile(&mut v, 100.0), 10);
        assert_eq!(percentile(&mut v, 90.0), 9);
        assert_eq!(percentile(&mut v, 50.0), 5);
        assert_eq!(percentile(&mut v, 1.0), 1);
        let mut v = vec![7];
        assert_eq!(percentile(&mut v, 90.0), 7);
    }

    #[test]
    fn calibrator_fixes_window_after_warmup() {
        let mut c = WindowCalibrator::new(20, 90.0).unwrap();
        // Samples 1..=20: P90 by nearest rank is the 18th smallest.
        for w in 1..=19 {
            c.record_window(w);
            assert_eq!(c.window(), None);
        }
        c.record_window(20);
        assert_eq!(c.window(), Some(18));
        c.record_window(1000);
        assert_eq!(c.window(), Some(18), "window is fixed after warm-up");

        let mut c = WindowCalibrator::new(3, 100.0).unwrap();
        let mut f = Fixture::new(&[4.0, 5.0, 9.0, 1.0, 7.0, 8.0, 6.0, 9.5, 0.5, 3.0]);
        let full = f.run(2, RerankPolicy::All);
        c.record(&full);
        c.record_window(2);
        c.record(&Rerank::default());
        assert_eq!(c.samples(), 2, "empty reranks are not samples");
        c.record_window(3);
        assert_eq!(c.window(), Some(5));
    }

    #[test]
    fn calibrator_rejects_bad_settings() {
        assert!(WindowCalibrator::new(0, 100.0).is_err());
        assert!(WindowCalibrator::new(10, 0.0).is_err());
        assert!(WindowCalibrator::new(10, 101.0).is_err());
        assert!(WindowCalibrator::new(10, f64::NAN).is_err());
        assert_eq!(WindowCalibrator::for_search().window(), None);
    }
}
