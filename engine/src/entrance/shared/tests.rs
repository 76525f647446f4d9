use super::*;
use crate::entrance::{EntranceParams, DEFAULT_SEARCH_LIST};
use crate::graph::testutil::clustered;
use crate::graph::BuildControl;

fn graph(n: usize, dim: usize) -> (Vec<f32>, EntranceGraph) {
    let data = clustered(n, dim, 6, 3);
    let params = EntranceParams {
        ratio: 0.05,
        min_size: 8,
        ..EntranceParams::default()
    };
    let g =
        EntranceGraph::build(&data, dim, Metric::L2, &params, &BuildControl::default()).unwrap();
    (data, g)
}

#[test]
fn calibration_is_pooled_across_mappings_and_matches_the_percentile_of_the_samples() {
    let (_, g) = graph(500, 8);
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("entrance.shm");
    SharedEntrance::create(&path, &g, 1).unwrap();
    // Two mappings stand for two backends.
    let (a, b) = (
        SharedEntrance::open(&path).unwrap(),
        SharedEntrance::open(&path).unwrap(),
    );
    let search = |e: &SharedEntrance, warmup, p| e.calibration(Caller::Search, 40, warmup, p);
    assert_eq!(search(&a, 1, 99.0), Some((0, None)));
    let samples: Vec<usize> = (0..200).map(|i| 1 + (i * 37) % 60).collect();
    for (i, &w) in samples.iter().enumerate() {
        let (by, other) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        assert!(by.record_calibration(Caller::Search, 40, w));
        let (total, window) = search(other, 200, 99.0).unwrap();
        assert_eq!(
            total,
            i as u64 + 1,
            "each increment is seen by the other mapping"
        );
        assert_eq!(
            window.is_some(),
            i == 199,
            "no window before the warm-up is complete"
        );
    }
    for p in [50.0, 90.0, 99.0, 100.0] {
        let expected = crate::casr::percentile(&mut samples.clone(), p);
        assert_eq!(search(&a, 200, p), Some((200, Some(expected))), "P{p}");
    }
    // A smaller warm-up setting already has its window.
    assert!(search(&b, 10, 90.0).unwrap().1.is_some());
    // Another search list neither reads nor adds to this sample.
    assert_eq!(a.calibration(Caller::Search, 80, 1, 99.0), None);
    assert!(!b.record_calibration(Caller::Search, 80, 7));
    assert_eq!(search(&a, 200, 100.0).unwrap().0, 200);
    // The insert path is separate; windows beyond the last bucket are counted in it, zero
    // counts as one.
    assert_eq!(a.calibration(Caller::Insert, 100, 1, 90.0), Some((0, None)));
    assert!(b.record_calibration(Caller::Insert, 100, 5000));
    assert_eq!(
        a.calibration(Caller::Insert, 100, 1, 100.0),
        Some((1, Some(CALIBRATION_BUCKETS - 1)))
    );
    assert!(b.record_calibration(Caller::Insert, 100, 0));
    assert_eq!(
        a.calibration(Caller::Insert, 100, 2, 50.0),
        Some((2, Some(1)))
    );
    // The members are untouched by calibration.
    assert_eq!(a.ids(), g.ids());
    // A rebuilt file starts a new sample.
    SharedEntrance::create(&path, &g, 2).unwrap();
    let c = SharedEntrance::open(&path).unwrap();
    assert_eq!(c.calibration(Caller::Search, 80, 1, 99.0), Some((0, None)));
}

#[test]
fn shared_file_searches_like_the_graph_it_was_made_from() {
    let (data, g) = graph(2000, 16);
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("entrance.shm");
    SharedEntrance::create(&path, &g, 42).unwrap();
    let shared = SharedEntrance::open(&path).unwrap();
    assert_eq!((shared.epoch(), shared.len()), (42, g.len()));
    assert_eq!(shared.ids(), g.ids());
    for q in data.chunks_exact(16).step_by(97) {
        let a = g
            .search_live_counted(q, DEFAULT_SEARCH_LIST, |_| true)
            .unwrap();
        let b = shared
            .search_live_counted(q, DEFAULT_SEARCH_LIST, |_| true)
            .unwrap();
        assert_eq!(a, b);
    }
    assert!(SharedEntrance::open(&tmp.path().join("missing")).is_err());
    std::fs::write(tmp.path().join("junk"), vec![7u8; 8192]).unwrap();
    assert!(SharedEntrance::open(&tmp.path().join("junk")).is_err());
}

#[test]
fn promotions_applied_through_one_mapping_are_seen_through_another() {
    let (data, mut g) = graph(2000, 16);
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("entrance.shm");
    SharedEntrance::create(&path, &g, 1).unwrap();
    let writer = SharedEntrance::open(&path).unwrap();
    let reader = SharedEntrance::open(&path).unwrap();
    // Promote 1200 vertices (the file grows past its first allocation) into the shared
    // graph and, with the same plans, into a private copy: they must stay identical.
    let candidates: Vec<VertexId> = (0..2000).filter(|v| !g.contains(*v)).take(1200).collect();
    for &v in &candidates {
        let vec = &data[v as usize * 16..][..16];
        let ((e_ent, _), _) = reader.search_live_counted(vec, 10, |_| true).unwrap();
        let plan = super::super::plan_view(&writer, v, vec, &e_ent, &[]).unwrap();
        assert_eq!(plan, g.plan_promotion(v, vec, &e_ent, &[]).unwrap());
        writer.apply(&plan).unwrap();
        g.apply_promotion(plan).unwrap();
    }
    assert_eq!(reader.len(), g.len());
    assert_eq!(reader.ids(), g.ids());
    for &v in candidates.iter().step_by(50) {
        assert!(reader.contains(v));
        assert_eq!(reader.neighbors(v), g.neighbors(v));
    }
    // A stale plan is refused.
    let v = candidates[0];
    let plan = g.plan_promotion(4000, &data[..16], &[v], &[]).unwrap();
    let mut other = g.clone();
    other.apply_promotion(plan.clone()).unwrap();
    writer.apply(&plan).unwrap();
    assert!(writer.apply(&plan).is_err(), "already a member");
}

#[test]
fn readers_search_while_a_writer_promotes() {
    let (data, g) = graph(3000, 16);
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("entrance.shm");
    SharedEntrance::create(&path, &g, 1).unwrap();
    let writer = SharedEntrance::open(&path).unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        for t in 0..2 {
            let (path, data, done) = (&path, &data, &done);
            s.spawn(move || {
                let reader = SharedEntrance::open(path).unwrap();
                let mut i = t;
                while !done.load(Ordering::Relaxed) {
                    let q = &data[(i % 3000) * 16..][..16];
                    let ((entry, explored), _) =
                        reader.search_live_counted(q, 10, |_| true).unwrap();
                    assert!(!entry.is_empty() && entry.len() <= 10);
                    assert!(explored.windows(2).all(|w| w[0].1 <= w[1].1));
                    i += 7;
                }
            });
        }
        for v in (0..3000u32).filter(|v| !g.contains(*v)).take(800) {
            let vec = &data[v as usize * 16..][..16];
            let ((e_ent, _), _) = writer.search_live_counted(vec, 10, |_| true).unwrap();
            let plan = super::super::plan_view(&writer, v, vec, &e_ent, &[]).unwrap();
            writer.apply(&plan).unwrap();
        }
        done.store(true, Ordering::Relaxed);
    });
    assert_eq!(writer.len(), g.len() + 800);
}
