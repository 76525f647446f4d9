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
    // First batch K + w = 5 ([0,5)); the change at 4 extends want to 7: batch [5,7); no
    // change there, so stop.
    assert_eq!(r.batches, vec![5, 2]);
    assert_eq!(f.calls, vec![vec![0, 1, 2, 3, 4], vec![5, 6]]);
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
    assert_eq!(r.batches, vec![3, 2]);

    // Top-1 settles at the first load: exactly 1 + w loads, all in the first batch.
    let dist = [1.0, 8.0, 7.0, 6.0, 5.0];
    let mut f = Fixture::new(&dist);
    let r = f.run(1, RerankPolicy::Window(2));
    assert_eq!(r.loads(), 3);
    assert_eq!(r.batches, vec![3]);
}

#[test]
fn batched_loads_equal_one_at_a_time_loads() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    for _ in 0..500 {
        let n = rng.gen_range(0..60);
        let dist: Vec<f32> = (0..n).map(|_| rng.gen_range(0.0..100.0)).collect();
        let (k, w) = (rng.gen_range(1..12), rng.gen_range(1..16));
        // Reference: one vector at a time, stopping once w loads passed without a change.
        let mut top: Vec<(f32, u32)> = Vec::new();
        let (mut loads, mut last_change) = (0, 0);
        while loads < n && loads < last_change + w {
            let d = dist[loads];
            loads += 1;
            if top.len() < k || d < top[k - 1].0 {
                top.push((d, loads as u32 - 1));
                top.sort_by(|a, b| a.0.total_cmp(&b.0));
                top.truncate(k);
                last_change = loads;
            }
        }
        let r = Fixture::new(&dist).run(k, RerankPolicy::Window(w));
        assert_eq!(r.loads(), loads, "n {n} k {k} w {w}");
        let mut ids: Vec<u32> = r.sorted_by_exact().iter().map(|p| p.0).take(k).collect();
        let mut want: Vec<u32> = top.iter().map(|t| t.1).collect();
        ids.sort_unstable();
        want.sort_unstable();
        assert_eq!(ids, want, "n {n} k {k} w {w}");
    }
}

#[test]
fn while_filling_every_load_is_a_change() {
    let dist = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
    let mut f = Fixture::new(&dist);
    let r = f.run(4, RerankPolicy::Window(2));
    // Sorted input: changes exactly at 1..=4, so K + w = 6 loads.
    assert_eq!(r.change_positions, vec![1, 2, 3, 4]);
    assert_eq!(r.loads(), 6);
    assert_eq!(r.batches, vec![6], "K + w in one batch");
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

impl Fixture {
    fn run_rule(&mut self, k: usize, pq: &[f32], rule: StopRule) -> Rerank {
        let ids: Vec<VertexId> = (0..self.vectors.len() as u32).collect();
        let vectors = self.vectors.clone();
        let calls = &mut self.calls;
        let mut loader = |batch: &[VertexId], out: &mut Vec<f32>| -> io::Result<()> {
            calls.push(batch.to_vec());
            out.extend(batch.iter().map(|&i| vectors[i as usize]));
            Ok(())
        };
        rerank_rule(&[0.0], Metric::L2, &ids, pq, k, rule, &mut loader).unwrap()
    }
}

const WINDOW_ONLY: StopRule = StopRule {
    window: None,
    pq_ratio: None,
    min_loads: 0,
};

#[test]
fn rule_with_window_only_is_the_navis_rerank() {
    let dist = [4.0, 5.0, 9.0, 1.0, 7.0, 8.0, 6.0, 9.5, 0.5, 3.0];
    let pq = [0.0; 10];
    for k in 1..4 {
        for w in 1..11 {
            let mut a = Fixture::new(&dist);
            let plain = a.run(k, RerankPolicy::Window(w));
            let mut b = Fixture::new(&dist);
            let rule = StopRule {
                window: Some(w),
                ..WINDOW_ONLY
            };
            let general = b.run_rule(k, &pq, rule);
            assert_eq!(general, plain, "k {k} w {w}");
            assert_eq!(a.calls, b.calls);
        }
    }
    // No signal at all loads everything, like RerankPolicy::All.
    let mut f = Fixture::new(&dist);
    assert_eq!(f.run_rule(2, &pq, WINDOW_ONLY).loads(), 10);
}

#[test]
fn floor_keeps_loading_and_extends_the_window_from_changes_inside_it() {
    let dist = [4.0, 5.0, 9.0, 1.0, 7.0, 8.0, 6.0, 9.5, 0.5, 3.0];
    let pq = [0.0; 10];
    let mut f = Fixture::new(&dist);
    // k = 2, w = 1: without a floor, changes at 1, 2 and nothing at 3 -> 3 loads.
    let rule = StopRule {
        window: Some(1),
        ..WINDOW_ONLY
    };
    assert_eq!(f.run_rule(2, &pq, rule).loads(), 3);
    // A floor of 4 loads the change at 4, and w = 1 then adds position 5.
    let floored = StopRule {
        min_loads: 4,
        ..rule
    };
    let r = f.run_rule(2, &pq, floored);
    assert_eq!(r.loads(), 5);
    assert_eq!(r.change_positions, vec![1, 2, 4]);
}

#[test]
fn pq_ratio_stops_once_the_next_pq_distance_is_out_of_reach() {
    // Exact distances 1, 4, 36, 2.25 (a top-2 member at position 4), 100, 144 (squares,
    // so the fixture's 1-d vectors reproduce them exactly) with PQ estimates in
    // increasing order.
    let dist = [1.0, 4.0, 36.0, 2.25, 100.0, 144.0];
    let pq = [1.0, 4.0, 6.0, 8.0, 90.0, 110.0];
    let full = Fixture::new(&dist).run(2, RerankPolicy::All);
    assert_eq!(full.change_positions, vec![1, 2, 4]);
    // Before positions 3 and 4 (0-based 2, 3) the 2nd best is 4: ratios 4/6 and 4/8.
    let safe = max_safe_pq_ratio(&full, &pq, 2, 0);
    assert_eq!(safe, 0.5);
    let mut f = Fixture::new(&dist);
    let rule = StopRule {
        pq_ratio: Some(safe),
        ..WINDOW_ONLY
    };
    let r = f.run_rule(2, &pq, rule);
    // Reaches the change at 4, then 90 * 0.5 > 2nd best 2.25: stop, the tail is never read.
    assert_eq!(r.loads(), 4);
    assert_eq!(r.sorted_by_exact()[..2], full.sorted_by_exact()[..2]);
    // The first batch is the filling K, the second everything the 2nd best admits.
    assert_eq!(r.batches, vec![2, 2]);
    // A larger ratio stops before the change at 4 and misses the 2nd true neighbour.
    let greedy = StopRule {
        pq_ratio: Some(safe * 1.05),
        ..WINDOW_ONLY
    };
    let short = Fixture::new(&dist).run_rule(2, &pq, greedy);
    assert_eq!(short.loads(), 3);
    assert_ne!(short.sorted_by_exact()[1].0, 3);
    // Within a floor that covers the last change any ratio is safe.
    assert_eq!(max_safe_pq_ratio(&full, &pq, 2, 4), f32::INFINITY);
}

#[test]
fn floored_safe_window_is_the_smallest_that_reaches_the_last_change() {
    let dist = [4.0, 5.0, 9.0, 1.0, 7.0, 8.0, 6.0, 9.5, 0.5, 3.0];
    let pq = [0.0; 10];
    let full = Fixture::new(&dist).run(2, RerankPolicy::All);
    assert_eq!(full.change_positions, vec![1, 2, 4, 9]);
    for floor in [0, 3, 4, 8, 9, 10] {
        let w = min_safe_window_with_floor(&full.change_positions, floor);
        let rule = |w| StopRule {
            window: Some(w),
            pq_ratio: None,
            min_loads: floor,
        };
        let r = Fixture::new(&dist).run_rule(2, &pq, rule(w));
        assert_eq!(r.last_change(), 9, "floor {floor} w {w}");
        if w > 1 {
            let short = Fixture::new(&dist).run_rule(2, &pq, rule(w - 1));
            assert!(
                short.last_change() < 9,
                "floor {floor}: w {w} is not the smallest"
            );
        }
    }
    // The change at 9 comes 5 after the one at 4, inside a floor of 8 or not.
    assert_eq!(min_safe_window_with_floor(&full.change_positions, 8), 5);
    assert_eq!(min_safe_window_with_floor(&full.change_positions, 9), 1);
    assert_eq!(
        min_safe_window_with_floor(&[1, 2, 9], 0),
        min_safe_window(&[1, 2, 9])
    );
}

#[test]
fn ratio_percentile_keeps_p_percent_safe() {
    let mut v = vec![0.5, 0.9, 0.7, 0.8, 0.6, 1.0, 0.95, 0.85, 0.75, 0.65];
    assert_eq!(ratio_percentile(&mut v, 100.0), 0.5);
    // 90% of 10 samples allow 0.6 or more.
    assert_eq!(ratio_percentile(&mut v, 90.0), 0.6);
    assert_eq!(ratio_percentile(&mut v, 10.0), 1.0);
    assert_eq!(ratio_percentile(&mut [], 50.0), f32::INFINITY);
}

#[test]
fn rule_rejects_bad_arguments() {
    let ids = [0u32, 1];
    let mut ok = |b: &[VertexId], out: &mut Vec<f32>| -> io::Result<()> {
        out.extend(b.iter().map(|_| 1.0));
        Ok(())
    };
    let ratio = StopRule {
        pq_ratio: Some(1.0),
        ..WINDOW_ONLY
    };
    let mut run = |metric, pq: &[f32], k, rule| {
        rerank_rule(&[0.0], metric, &ids, pq, k, rule, &mut ok)
            .map(|r| r.loads())
            .map_err(|e| e.kind())
    };
    let bad = Err(io::ErrorKind::InvalidInput);
    assert_eq!(run(Metric::InnerProduct, &[0.0, 1.0], 1, ratio), bad);
    assert_eq!(run(Metric::L2, &[0.0], 1, ratio), bad);
    assert_eq!(run(Metric::L2, &[0.0, 1.0], 0, ratio), bad);
    let no_window = StopRule {
        window: Some(0),
        ..WINDOW_ONLY
    };
    assert_eq!(run(Metric::L2, &[0.0, 1.0], 1, no_window), bad);
    assert_eq!(run(Metric::L2, &[0.0, 1.0], 1, ratio), Ok(2));
}
