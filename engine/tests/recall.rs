//! End-to-end: build an index on disk from clustered synthetic vectors, open it, and search
//! it against brute force, with every ablation and both I/O back ends.

use std::collections::HashSet;
use std::path::Path;

use navis_engine::counters::SearchCounters;
use navis_engine::dataset::{brute_force_knn, synthetic_clustered};
use navis_engine::index::{build_index, BuildPhase, CasrSetting, Index, IndexParams};
use navis_engine::search::{CasrMode, SearchCursor, SearchHit, SearchParams};
use navis_engine::storage::HeapTid;
use navis_engine::{Metric, VertexId};

const N: usize = 3000;
const NQ: usize = 60;
const DIM: usize = 32;

struct Fixture {
    _dir: tempfile::TempDir,
    index: Index,
    queries: Vec<f32>,
    truth: Vec<Vec<VertexId>>,
}

fn params(metric: Metric) -> IndexParams {
    IndexParams {
        metric,
        max_degree: 32,
        build_list: 64,
        pq_bytes: Some(8),
        threads: 2,
        ..IndexParams::default()
    }
}

fn build(metric: Metric) -> Fixture {
    let all = synthetic_clustered(N + NQ, DIM, 16, 42);
    let (base, queries) = all.split_at(N * DIM);
    let tids: Vec<HeapTid> = (0..N as u32)
        .map(|i| HeapTid {
            block: i / 100,
            offset: (i % 100 + 1) as u16,
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idx");
    let phases = std::sync::Mutex::new(Vec::new());
    let progress = |p: BuildPhase, done: u64, total: u64| {
        if done == total {
            phases.lock().unwrap().push(p);
        }
    };
    let report = build_index(&path, base, &tids, &params(metric), &progress, &|| false).unwrap();
    assert_eq!(report.vertices, N);
    assert!(report.overlap_greedy > report.overlap_identity);
    assert!(report.memory_estimate > (N * DIM * 4) as u64);
    let phases = phases.into_inner().unwrap();
    // PQ training runs inside the placement phase (beside it, then after it), not as a
    // phase of its own.
    assert!(!phases.contains(&BuildPhase::PqTraining));
    for p in [
        BuildPhase::Sampling,
        BuildPhase::GraphBuild,
        BuildPhase::Placement,
        BuildPhase::Entrance,
        BuildPhase::Writing,
    ] {
        assert!(phases.contains(&p), "phase {p:?} never finished");
    }
    let index = Index::open(&path).unwrap();
    let truth = exact_truth(base, queries, metric);
    Fixture {
        _dir: dir,
        index,
        queries: queries.to_vec(),
        truth,
    }
}

fn exact_truth(base: &[f32], queries: &[f32], metric: Metric) -> Vec<Vec<VertexId>> {
    let norm = |rows: &[f32]| -> Vec<f32> {
        let mut v = rows.to_vec();
        if metric.needs_normalization() {
            v.chunks_exact_mut(DIM).for_each(|r| {
                navis_engine::distance::normalize(r);
            });
        }
        v
    };
    brute_force_knn(&norm(base), DIM, &norm(queries), 10, metric, 2)
}

fn run(f: &Fixture, p: SearchParams) -> (f64, SearchCounters, Vec<Vec<SearchHit>>) {
    let mut reader = f.index.reader().unwrap();
    let mut total = SearchCounters::default();
    let mut found = 0;
    let mut all = Vec::new();
    for (qi, q) in f.queries.chunks_exact(DIM).enumerate() {
        let casr = match p.casr {
            CasrMode::Off => CasrSetting::Off,
            CasrMode::Window(w) => CasrSetting::Window(w),
        };
        let (hits, c) = f.index.search(&mut reader, q, p, casr).unwrap();
        assert!(hits.windows(2).all(|w| w[0].distance <= w[1].distance));
        let truth: HashSet<VertexId> = f.truth[qi].iter().copied().collect();
        found += hits.iter().filter(|h| truth.contains(&h.id)).count();
        total.merge(&c);
        all.push(hits);
    }
    (found as f64 / (NQ * 10) as f64, total, all)
}

fn list(l: usize, casr: CasrMode) -> SearchParams {
    SearchParams {
        list: l,
        casr,
        ..SearchParams::default()
    }
}

#[test]
fn recall_ablations_and_cursor_on_disk() {
    let f = build(Metric::L2);
    let (r40, c40, _) = run(&f, list(40, CasrMode::Window(8)));
    let (r80, c80, _) = run(&f, list(80, CasrMode::Window(8)));
    eprintln!("recall@10 L=40 {r40:.3} L=80 {r80:.3}");
    assert!(r40 >= 0.85, "recall@10 at L=40: {r40}");
    assert!(r80 >= 0.92, "recall@10 at L=80: {r80}");
    assert!(r80 >= r40);
    assert!(c80.edge_pages_read > c40.edge_pages_read);
    assert_eq!(c40.packed_vector_loads, 0);
    assert!(c40.rerank_vector_loads < c40.explored_set);

    let (r_off, off, _) = run(&f, list(40, CasrMode::Off));
    assert_eq!(off.rerank_vector_loads, off.explored_set);
    assert!(
        r_off >= r40 - 0.02,
        "CASR lost recall: {r40} vs off {r_off}"
    );

    let packed = SearchParams {
        packed: true,
        ..list(40, CasrMode::Off)
    };
    let (r_packed, pc, _) = run(&f, packed);
    assert!(r_packed >= 0.85, "packed recall {r_packed}");
    assert_eq!(pc.packed_vector_loads, pc.expanded);

    let no_ent = SearchParams {
        use_entrance: false,
        ..list(40, CasrMode::Window(8))
    };
    let (r_ne, ne, _) = run(&f, no_ent);
    assert!(r_ne >= 0.8, "no-entrance recall {r_ne}");
    assert_eq!(ne.entrance_distances, 0);
    assert!(
        ne.hops >= c40.hops,
        "medoid start should not need fewer hops"
    );

    // Resumable cursor: far more results than L, in non-decreasing distance, no repeats.
    let mut reader = f.index.reader().unwrap();
    let q = &f.queries[..DIM];
    let mut cursor = SearchCursor::new(&mut reader, q, list(40, CasrMode::Window(8))).unwrap();
    let hits = cursor.next_batch(200).unwrap();
    assert_eq!(hits.len(), 200);
    assert!(cursor.passes() > 1);
    assert!(hits.windows(2).all(|w| w[0].distance <= w[1].distance));
    assert_eq!(hits.iter().map(|h| h.id).collect::<HashSet<_>>().len(), 200);
    assert!(hits
        .iter()
        .all(|h| h.tid.block == h.id / 100 && h.tid.offset as u32 == h.id % 100 + 1));
}

#[test]
fn auto_calibration_fixes_a_window() {
    let f = build(Metric::Cosine);
    f.index
        .set_calibrator(navis_engine::casr::WindowCalibrator::new(20, 100.0).unwrap());
    let mut reader = f.index.reader().unwrap();
    let mut found = 0;
    for (qi, q) in f.queries.chunks_exact(DIM).enumerate() {
        let (hits, c) = f
            .index
            .search(&mut reader, q, SearchParams::default(), CasrSetting::Auto)
            .unwrap();
        if qi < 20 {
            assert_eq!(c.rerank_vector_loads, c.explored_set, "warm-up loads all");
        } else {
            assert_eq!(c.casr_window_sum as usize, f.index.search_window().unwrap());
        }
        let truth: HashSet<VertexId> = f.truth[qi].iter().copied().collect();
        found += hits.iter().filter(|h| truth.contains(&h.id)).count();
    }
    let w = f.index.search_window().unwrap();
    assert!((1..=40).contains(&w));
    let recall = found as f64 / (NQ * 10) as f64;
    assert!(recall >= 0.85, "cosine recall {recall}");
}

#[test]
fn io_backends_agree() {
    let f = build(Metric::L2);
    let p = list(40, CasrMode::Window(8));
    let (_, c_default, hits_default) = run(&f, p);
    // Set once, read by every reader opened after it; no other test in this file opens a
    // reader concurrently with a different expectation, as all must give identical results.
    std::env::set_var("NAVIS_IO", "pread");
    let backend = f.index.reader().unwrap().backend_name();
    let (_, c_pread, hits_pread) = run(&f, p);
    std::env::remove_var("NAVIS_IO");
    assert!(backend.starts_with("pread"), "{backend}");
    assert_eq!(hits_default, hits_pread);
    assert_eq!(c_default, c_pread);
}

#[test]
fn open_rejects_a_missing_index() {
    let dir = tempfile::tempdir().unwrap();
    let err = Index::open(&dir.path().join("nope"))
        .err()
        .unwrap()
        .to_string();
    assert!(!err.is_empty());
    assert!(!Path::new(&dir.path().join("nope")).exists());
}
