//! Tests of the build, the opened index and its readers.

use std::sync::Mutex;

use super::build::entrance_sample;
use super::*;
use crate::casr::WindowCalibrator;
use crate::counters::SearchCounters;
use crate::distance::Metric;
use crate::entrance::EntranceView;
use crate::search::{IndexSource, SearchCursor, SearchHit, SearchParams};
use crate::storage::HeapTid;
use crate::VertexId;

fn none(_: BuildPhase, _: u64, _: u64) {}
fn never() -> bool {
    false
}

fn small_params(metric: Metric) -> IndexParams {
    IndexParams {
        metric,
        max_degree: 16,
        build_list: 32,
        pq_bytes: Some(2),
        threads: 2,
        ..IndexParams::default()
    }
}

fn tids(n: usize) -> Vec<HeapTid> {
    (0..n)
        .map(|i| HeapTid {
            block: 100 + i as u32,
            offset: 1,
        })
        .collect()
}

fn search_all(index: &Index, query: &[f32], params: SearchParams) -> Vec<SearchHit> {
    let mut reader = index.reader().unwrap();
    let mut cursor = SearchCursor::new(&mut reader, query, params).unwrap();
    let mut hits = Vec::new();
    while let Some(hit) = cursor.next_hit().unwrap() {
        hits.push(hit);
    }
    hits
}

#[test]
fn empty_index_opens_and_finds_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, declared, metric) in [
        ("undeclared", None, Metric::L2),
        ("declared", Some(6), Metric::Cosine),
    ] {
        let dir = tmp.path().join(name);
        let params = IndexParams {
            dim: declared,
            ..small_params(metric)
        };
        let report = build_index(&dir, &[], &[], &params, &none, &never).unwrap();
        assert_eq!((report.vertices, report.entrance_size), (0, 0));
        let index = Index::open(&dir).unwrap();
        assert!(index.is_empty());
        assert_eq!(index.dim(), declared.unwrap_or(2));
        assert_eq!(index.files().manifest().medoid, 0);
        assert!(index.entrance().is_empty());
        // Any dimension finds nothing, with and without the entrance graph.
        for query in [vec![1.0, 2.0, 3.0], vec![0.5; 6], vec![7.0]] {
            for use_entrance in [true, false] {
                let p = SearchParams {
                    use_entrance,
                    ..SearchParams::default()
                };
                assert!(search_all(&index, &query, p).is_empty());
            }
            let mut reader = index.reader().unwrap();
            let (hits, c) = index
                .search(
                    &mut reader,
                    &query,
                    SearchParams::default(),
                    CasrSetting::Auto,
                )
                .unwrap();
            assert!(hits.is_empty());
            assert_eq!((c.hops, c.pq_distances, c.entrance_distances), (0, 0, 0));
        }
        // Invalid queries are still refused.
        let mut reader = index.reader().unwrap();
        assert!(SearchCursor::new(&mut reader, &[f32::NAN], SearchParams::default()).is_err());
        assert!(SearchCursor::new(&mut reader, &[], SearchParams::default()).is_err());
    }
}

#[test]
fn spare_readers_are_reused_only_by_their_own_index() {
    let tmp = tempfile::tempdir().unwrap();
    let (n, dim) = (400, 8);
    let data = crate::dataset::synthetic_clustered(n, dim, 4, 7);
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let params = small_params(Metric::L2);
    build_index(&a, &data, &tids(n), &params, &none, &never).unwrap();
    let other = crate::dataset::synthetic_clustered(n, dim, 4, 8);
    build_index(&b, &other, &tids(n), &params, &none, &never).unwrap();
    let (a, b) = (Index::open(&a).unwrap(), Index::open(&b).unwrap());
    let query = &data[3 * dim..4 * dim];
    let expected = search_all(&a, query, SearchParams::default());
    assert_eq!(expected[0].tid, tids(n)[3], "the query is row 3");

    // A reused reader (files, queue and buffers carried over) finds the same rows with
    // the same per-query counters, and its I/O totals keep counting.
    let mut spare = None;
    let mut counters = Vec::new();
    for _ in 0..3 {
        let mut reader = a.reader_reusing(spare.take()).unwrap();
        let bytes_before = reader.io.stats().bytes;
        let mut cursor = SearchCursor::new(&mut reader, query, SearchParams::default()).unwrap();
        let mut hits = Vec::new();
        while let Some(hit) = cursor.next_hit().unwrap() {
            hits.push(hit);
        }
        counters.push(cursor.counters().rerank_vector_loads);
        drop(cursor);
        assert_eq!(hits, expected);
        assert!(reader.io.stats().bytes > bytes_before);
        spare = Some(reader.into_spare());
    }
    assert!(counters.windows(2).all(|w| w[0] == w[1]), "{counters:?}");

    // A spare of index a given to index b is not used: b's reader reads b's files.
    let spare = spare.unwrap();
    assert_eq!(spare.index, a.identity());
    let mut reader = b.reader_reusing(Some(spare)).unwrap();
    assert_eq!(reader.io.stats().bytes, 0, "a fresh reader");
    let hits = {
        let mut cursor = SearchCursor::new(&mut reader, query, SearchParams::default()).unwrap();
        let mut hits = Vec::new();
        while let Some(hit) = cursor.next_hit().unwrap() {
            hits.push(hit);
        }
        hits
    };
    assert_eq!(hits, search_all(&b, query, SearchParams::default()));
}

#[test]
fn auto_casr_warm_up_ends_for_packed_and_empty_searches() {
    let tmp = tempfile::tempdir().unwrap();
    let (n, dim) = (600, 8);
    let data = crate::dataset::synthetic_clustered(n, dim, 6, 3);
    let dir = tmp.path().join("idx");
    build_index(
        &dir,
        &data,
        &tids(n),
        &small_params(Metric::L2),
        &none,
        &never,
    )
    .unwrap();
    let index = Index::open(&dir).unwrap();
    let mut reader = index.reader().unwrap();
    let queries = &data[..20 * dim];
    let packed = SearchParams {
        packed: true,
        ..SearchParams::default()
    };
    index.set_calibrator(WindowCalibrator::new(5, 100.0).unwrap());
    // Packed searches never calibrate, so warm-up returns at once instead of spinning.
    assert_eq!(
        index.warm_up(&mut reader, queries, packed, 1000).unwrap(),
        None
    );
    for q in queries.chunks_exact(dim) {
        let (hits, c) = index
            .search(&mut reader, q, packed, CasrSetting::Auto)
            .unwrap();
        assert_eq!(hits.len(), 10);
        assert_eq!(c.packed_vector_loads, c.expanded);
    }
    assert_eq!(index.search_window(), None, "packed reranks are no samples");
    // A warm-up longer than the cap stops at the cap.
    let plain = SearchParams::default();
    index.set_calibrator(WindowCalibrator::new(1000, 100.0).unwrap());
    assert_eq!(
        index.warm_up(&mut reader, queries, plain, 30).unwrap(),
        None
    );
    assert_eq!(index.calibrator.lock().unwrap().samples(), 30);
    // An ordinary warm-up calibrates after exactly `warmup` searches.
    index.set_calibrator(WindowCalibrator::new(5, 100.0).unwrap());
    let w = index.warm_up(&mut reader, queries, plain, 1000).unwrap();
    assert!(w.is_some_and(|w| (1..=plain.list).contains(&w)), "{w:?}");
    assert_eq!(index.calibrator.lock().unwrap().samples(), 5);

    let empty = tmp.path().join("empty");
    build_index(&empty, &[], &[], &small_params(Metric::L2), &none, &never).unwrap();
    let index = Index::open(&empty).unwrap();
    let mut reader = index.reader().unwrap();
    assert_eq!(
        index
            .warm_up(&mut reader, &[1.0, 2.0], plain, 1000)
            .unwrap(),
        None
    );
}

#[test]
fn one_and_two_vector_indexes_return_every_row() {
    let tmp = tempfile::tempdir().unwrap();
    let rows: [&[f32]; 2] = [&[1.0, 0.0, 0.0, 0.0], &[0.0, 3.0, 0.0, 4.0]];
    for n in [1usize, 2] {
        for metric in [Metric::L2, Metric::Cosine, Metric::InnerProduct] {
            let dir = tmp.path().join(format!("{n}-{}", metric.code()));
            let data: Vec<f32> = rows[..n].concat();
            let report =
                build_index(&dir, &data, &tids(n), &small_params(metric), &none, &never).unwrap();
            assert_eq!((report.vertices, report.entrance_size), (n, 1));
            let index = Index::open(&dir).unwrap();
            assert_eq!(index.len(), n);
            assert!(index.files().manifest().medoid < n as u32);
            for use_entrance in [true, false] {
                let p = SearchParams {
                    use_entrance,
                    ..SearchParams::default()
                };
                // The query equal to the last row finds it first, then the other one.
                let hits = search_all(&index, rows[n - 1], p);
                let ids: Vec<VertexId> = hits.iter().map(|h| h.id).collect();
                let expected: Vec<VertexId> = (0..n as VertexId).rev().collect();
                assert_eq!(ids, expected, "n={n} {metric:?} entrance={use_entrance}");
                assert_eq!(hits[0].tid, tids(n)[n - 1]);
                let exact = metric.search_distance(rows[n - 1], rows[n - 1]);
                let d0 = if metric == Metric::Cosine { 0.0 } else { exact };
                assert!((hits[0].distance - d0).abs() < 1e-5, "{}", hits[0].distance);
            }
        }
    }
}

#[test]
fn entrance_graph_is_persisted_and_seeds_the_search() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("idx");
    let (n, dim) = (3000, 8);
    let data = crate::dataset::synthetic_clustered(n, dim, 8, 5);
    let params = IndexParams {
        entrance_ratio: 0.02,
        entrance_degree: 12,
        ..small_params(Metric::L2)
    };
    let phases = Mutex::new(Vec::new());
    let progress = |p: BuildPhase, done: u64, total: u64| {
        phases.lock().unwrap().push((p, done, total));
    };
    let report = build_index(&dir, &data, &tids(n), &params, &progress, &never).unwrap();
    assert_eq!(report.entrance_size, 60);
    assert!(phases
        .lock()
        .unwrap()
        .contains(&(BuildPhase::Entrance, 60, 60)));
    let phases = phases.into_inner().unwrap();
    for phase in [BuildPhase::GraphBuild, BuildPhase::Entrance] {
        let events: Vec<_> = phases.iter().filter(|e| e.0 == phase).collect();
        let total = events[0].2;
        assert!(
            events.iter().all(|e| e.2 == total && e.1 <= total),
            "{phase:?} keeps one total: {events:?}"
        );
        assert!(events.len() > 2, "{phase:?} reports between start and end");
    }
    let index = Index::open(&dir).unwrap();
    let entrance = index.entrance();
    assert_eq!(entrance.ids(), entrance_sample(n, 0.02, params.seed));
    assert_eq!(entrance.max_degree(), 12);
    assert!(entrance
        .ids()
        .iter()
        .all(|&v| entrance.vector(v).unwrap() == &data[v as usize * dim..][..dim]));
    let reader = index.reader().unwrap();
    let query = &data[17 * dim..18 * dim];
    let mut c = SearchCounters::default();
    let entry = reader.entry_points(query, 10, &mut c);
    assert_eq!(entry.len(), 10);
    assert!(entry.iter().all(|&v| entrance.contains(v)));
    assert!(c.entrance_distances >= 10 && c.entrance_distances <= 60);
    // The closest sampled vertex, by brute force, is the first entry point.
    let closest = entrance
        .ids()
        .iter()
        .copied()
        .min_by(|&a, &b| {
            let d = |v: VertexId| Metric::L2.search_distance(query, entrance.vector(v).unwrap());
            d(a).total_cmp(&d(b))
        })
        .unwrap();
    assert_eq!(entry[0], closest);
    // The query is vertex 17: both seeding modes find it first.
    for use_entrance in [true, false] {
        let p = SearchParams {
            use_entrance,
            ..SearchParams::default()
        };
        assert_eq!(search_all(&index, query, p)[0].id, 17);
    }
    // The start of unseeded searches is the main graph's medoid, kept in the manifest.
    let medoid = index.files().manifest().medoid;
    assert!(medoid < n as u32);
    let manifest = std::fs::read_to_string(dir.join("manifest")).unwrap();
    assert!(manifest.contains(&format!("\nmedoid={medoid}\n")));
    assert_eq!(reader.medoid(), medoid);
}

#[test]
fn bad_build_input_is_rejected_before_work() {
    let dir = tempfile::tempdir().unwrap();
    let p = IndexParams::default();
    let err = build_index(dir.path(), &[1.0], &[], &p, &none, &never).unwrap_err();
    assert!(err.to_string().contains("for zero rows"), "{err}");
    let tids = [HeapTid::default(); 3];
    let declared = IndexParams {
        dim: Some(3),
        ..IndexParams::default()
    };
    let err = build_index(dir.path(), &[1.0; 12], &tids, &declared, &none, &never).unwrap_err();
    assert!(err.to_string().contains("declared with 3"), "{err}");
    let err = build_index(dir.path(), &[0.0; 7], &tids, &p, &none, &never).unwrap_err();
    assert!(err.to_string().contains("rows of equal dimension"), "{err}");
    let mut rows = vec![1.0f32; 12];
    rows[5] = f32::NAN;
    let err = build_index(dir.path(), &rows, &tids, &p, &none, &never).unwrap_err();
    assert!(err.to_string().starts_with("row 1:"), "{err}");
    let cosine = IndexParams {
        metric: Metric::Cosine,
        ..IndexParams::default()
    };
    let zero = [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 4.0];
    let err = build_index(dir.path(), &zero, &tids, &cosine, &none, &never).unwrap_err();
    assert!(err.to_string().contains("row 1 is a zero vector"), "{err}");
    let tight = IndexParams {
        memory_budget: Some(1024),
        ..IndexParams::default()
    };
    let err = build_index(dir.path(), &[1.0; 12], &tids, &tight, &none, &never).unwrap_err();
    assert!(matches!(err, IndexError::Memory(_)), "{err}");
    let cancelled = || true;
    let err = build_index(dir.path(), &[1.0; 12], &tids, &p, &none, &cancelled).unwrap_err();
    assert!(matches!(err, IndexError::Cancelled), "{err}");
}

#[test]
fn a_cancel_during_placement_stops_the_build() {
    // Cancel answers yes only while the placement phase runs: if placement did not ask, the
    // phase would end, the check after it would hear no, and the build would succeed.
    use std::sync::atomic::{AtomicBool, Ordering};
    let placing = AtomicBool::new(false);
    let progress = |phase: BuildPhase, done: u64, total: u64| {
        if phase == BuildPhase::Placement {
            placing.store(done < total, Ordering::SeqCst);
        }
    };
    let cancel = || placing.load(Ordering::SeqCst);
    let n = 3000;
    let rows = crate::dataset::synthetic_clustered(n, 8, 10, 5);
    let dir = tempfile::tempdir().unwrap();
    let params = small_params(Metric::L2);
    let err = build_index(dir.path(), &rows, &tids(n), &params, &progress, &cancel).unwrap_err();
    assert!(matches!(err, IndexError::Cancelled), "{err}");
    // The same build with nobody cancelling finishes.
    build_index(dir.path(), &rows, &tids(n), &params, &none, &never).unwrap();
}

#[test]
fn placement_reports_progress_between_batches() {
    // pg_stat_progress_create_index shows these: a 1M-row placement takes half a minute.
    let events = Mutex::new(Vec::new());
    let progress = |phase: BuildPhase, done: u64, total: u64| {
        if phase == BuildPhase::Placement {
            events.lock().unwrap().push((done, total));
        }
    };
    let n = 3000;
    let rows = crate::dataset::synthetic_clustered(n, 8, 10, 6);
    let dir = tempfile::tempdir().unwrap();
    build_index(
        dir.path(),
        &rows,
        &tids(n),
        &small_params(Metric::L2),
        &progress,
        &never,
    )
    .unwrap();
    let events = events.into_inner().unwrap();
    let n = n as u64;
    assert!(events.iter().all(|&(_, total)| total == n), "{events:?}");
    assert!(events.windows(2).all(|w| w[0].0 <= w[1].0), "{events:?}");
    assert_eq!(events.first(), Some(&(0, n)));
    assert_eq!(events.last(), Some(&(n, n)));
    let between = events
        .iter()
        .filter(|&&(done, _)| done > 0 && done < n)
        .count();
    assert!(between >= 2, "progress inside the phase: {events:?}");
}
