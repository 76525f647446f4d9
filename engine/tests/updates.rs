//! Inserts, lazy deletes, consolidation and recovery on on-disk indexes, with several threads
//! writing and searching at once (threads here stand in for PostgreSQL backends: every piece
//! of shared state is in the mapped side files, and each "backend" opens its own `Index`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use navis_engine::dataset::{brute_force_knn, recall_at_k, synthetic_clustered};
use navis_engine::index::{build_index, Index, IndexParams};
use navis_engine::search::{CasrMode, SearchCursor, SearchParams};
use navis_engine::storage::HeapTid;
use navis_engine::update::{recover, InsertParams, LocalLocks};
use navis_engine::{Metric, VertexId};

const DIM: usize = 32;
const BASE: usize = 1500;
const INSERTED: usize = 1500;
const NQ: usize = 50;
const EPOCH: u64 = 7;

fn params() -> IndexParams {
    IndexParams {
        metric: Metric::L2,
        max_degree: 32,
        build_list: 64,
        pq_bytes: Some(8),
        threads: 2,
        ..IndexParams::default()
    }
}

fn tid_of(row: usize) -> HeapTid {
    HeapTid {
        block: row as u32 / 100,
        offset: (row % 100 + 1) as u16,
    }
}

fn row_of(tid: HeapTid) -> usize {
    tid.block as usize * 100 + tid.offset as usize - 1
}

fn search_params() -> SearchParams {
    SearchParams {
        k: 10,
        list: 64,
        casr: CasrMode::Off,
        ..SearchParams::default()
    }
}

/// Rows (not vertex ids) of the top `k` for each query.
fn top_rows(index: &Index, queries: &[f32], k: usize) -> Vec<Vec<VertexId>> {
    let mut reader = index.reader().unwrap();
    queries
        .chunks_exact(DIM)
        .map(|q| {
            let p = SearchParams {
                k,
                list: index.widened_list(16),
                ..search_params()
            };
            let mut cursor = SearchCursor::new(&mut reader, q, p).unwrap();
            cursor
                .next_batch(k)
                .unwrap()
                .iter()
                .map(|h| row_of(h.tid) as VertexId)
                .collect()
        })
        .collect()
}

#[test]
fn concurrent_inserts_and_searches_match_a_fresh_build() {
    let data = synthetic_clustered(BASE + INSERTED + NQ, DIM, 16, 11);
    let (rows, queries) = data.split_at((BASE + INSERTED) * DIM);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("idx");
    let base_tids: Vec<HeapTid> = (0..BASE).map(tid_of).collect();
    let none = |_, _, _| {};
    let never = || false;
    build_index(
        &dir,
        &rows[..BASE * DIM],
        &base_tids,
        &params(),
        &none,
        &never,
    )
    .unwrap();

    let locks = LocalLocks::new(64);
    let opened = Index::open(&dir).unwrap();
    let entrance_at_build = opened.entrance().len();
    assert!(recover(opened.files(), &locks, EPOCH).unwrap().rebuilt);
    assert!(!recover(opened.files(), &locks, EPOCH).unwrap().rebuilt);
    assert!(opened.verify().unwrap().is_clean());

    // 4 inserting "backends" and 2 searching ones, each with its own Index and reader.
    let next_row = Mutex::new(BASE);
    let inserting = AtomicBool::new(true);
    let pages_per_insert = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        let mut inserters = Vec::new();
        for _ in 0..4 {
            inserters.push(s.spawn(|| {
                let index = Index::open(&dir).unwrap();
                let mut reader = index.reader().unwrap();
                let spp = index.files().edge_layout().slots_per_page() as u64;
                loop {
                    let row = {
                        let mut next = next_row.lock().unwrap();
                        if *next == BASE + INSERTED {
                            break;
                        }
                        *next += 1;
                        *next - 1
                    };
                    let vector = &rows[row * DIM..(row + 1) * DIM];
                    let report = index
                        .insert(
                            &mut reader,
                            &locks,
                            vector,
                            tid_of(row),
                            InsertParams::default(),
                        )
                        .unwrap();
                    assert!(report.degree >= 1);
                    // Out of place, packed: one page per slots_per_page modified lists.
                    assert!(report.lists_written <= report.degree as u64 + 1);
                    assert_eq!(report.pages_written, report.lists_written.div_ceil(spp));
                    pages_per_insert
                        .lock()
                        .unwrap()
                        .push((report.pages_written, report.pages_in_place));
                }
            }));
        }
        for _ in 0..2 {
            s.spawn(|| {
                let index = Index::open(&dir).unwrap();
                let mut reader = index.reader().unwrap();
                let mut searches = 0;
                while inserting.load(Ordering::Acquire) || searches < 20 {
                    let q = &queries[(searches % NQ) * DIM..][..DIM];
                    let mut cursor = SearchCursor::new(&mut reader, q, search_params()).unwrap();
                    let hits = cursor.next_batch(10).unwrap();
                    assert_eq!(hits.len(), 10);
                    assert!(hits.windows(2).all(|w| w[0].distance <= w[1].distance));
                    searches += 1;
                }
            });
        }
        for t in inserters {
            t.join().unwrap();
        }
        inserting.store(false, Ordering::Release);
    });

    let index = Index::open(&dir).unwrap();
    assert_eq!(index.len(), BASE + INSERTED);
    // The entrance graph grew with the index (about entrance_ratio of the inserts were
    // promoted), and a process that opens the index later, or kept it open all along, sees
    // the same graph.
    let entrance: Vec<VertexId> = index.entrance().ids().to_vec();
    assert!(
        entrance.len() > entrance_at_build,
        "{} vs {entrance_at_build}",
        entrance.len()
    );
    assert!(entrance.len() as f64 >= 0.01 * (BASE + INSERTED) as f64);
    assert!(entrance.iter().any(|&v| v as usize >= BASE));
    assert_eq!(opened.entrance().ids(), &entrance[..]);
    let report = index.verify().unwrap();
    assert_eq!(report.problem_count, 0, "{report:?}");
    assert_eq!(report.dangling_edges, 0);
    // Back-edge pruning may have left a few vertices without a path from the entry points;
    // VACUUM's reconnection links them (and has nothing to do a second time).
    assert!(
        report.unreachable * 100 <= (BASE + INSERTED) as u64,
        "{report:?}"
    );
    let unreachable_before = report.unreachable;
    let linked = index.reconnect(&locks, &|| false).unwrap().unwrap();
    if unreachable_before > 0 {
        assert!(
            linked.orphans_linked > 0,
            "nothing linked, {unreachable_before} were lost"
        );
    }
    assert!(index.reconnect(&locks, &|| false).unwrap().is_none());
    let report = index.verify().unwrap();
    assert!(report.is_clean(), "{report:?}");

    // Every inserted row is found by a k = 1 search for its own vector.
    let mut reader = index.reader().unwrap();
    for row in BASE..BASE + INSERTED {
        let q = &rows[row * DIM..(row + 1) * DIM];
        let p = SearchParams {
            k: 1,
            ..search_params()
        };
        let hit = SearchCursor::new(&mut reader, q, p)
            .unwrap()
            .next_hit()
            .unwrap()
            .unwrap();
        assert!(
            hit.distance <= 1e-6,
            "row {row} found at distance {}",
            hit.distance
        );
    }

    // Recall against exact results is within a point of a fresh build over the same rows.
    let truth = brute_force_knn(rows, DIM, queries, 10, Metric::L2, 2);
    let after_inserts = recall_at_k(&top_rows(&index, queries, 10), &truth, 10);
    let fresh_dir = tmp.path().join("fresh");
    let all_tids: Vec<HeapTid> = (0..BASE + INSERTED).map(tid_of).collect();
    build_index(&fresh_dir, rows, &all_tids, &params(), &none, &never).unwrap();
    let fresh = Index::open(&fresh_dir).unwrap();
    let fresh_recall = recall_at_k(&top_rows(&fresh, queries, 10), &truth, 10);
    assert!(
        after_inserts >= fresh_recall - 0.01,
        "recall after inserts {after_inserts}, fresh build {fresh_recall}"
    );

    // Out-of-place writes touch fewer pages than in-place updates of the same lists would.
    let pages = pages_per_insert.into_inner().unwrap();
    let written: u64 = pages.iter().map(|p| p.0).sum();
    let in_place: u64 = pages.iter().map(|p| p.1).sum();
    eprintln!(
        "recall@10 after inserts {after_inserts:.3}, fresh build {fresh_recall:.3}; \
         edge pages written per insert {:.2}, in place would rewrite {:.2}",
        written as f64 / pages.len() as f64,
        in_place as f64 / pages.len() as f64
    );
    assert!(written < in_place, "written {written}, in place {in_place}");
}

#[test]
fn recovery_reclaims_what_a_crash_left_half_done() {
    let data = synthetic_clustered(600, DIM, 8, 5);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("idx");
    let tids: Vec<HeapTid> = (0..500).map(tid_of).collect();
    build_index(
        &dir,
        &data[..500 * DIM],
        &tids,
        &params(),
        &|_, _, _| {},
        &|| false,
    )
    .unwrap();
    let locks = LocalLocks::new(16);
    let index = Index::open(&dir).unwrap();
    recover(index.files(), &locks, 1).unwrap();
    let mut reader = index.reader().unwrap();
    for row in 500..550 {
        index
            .insert(
                &mut reader,
                &locks,
                &data[row * DIM..][..DIM],
                tid_of(row),
                InsertParams::default(),
            )
            .unwrap();
    }
    // A "crash" between allocation and publication: an id and a page handed out, never used.
    let leaked_vertex =
        navis_engine::update::alloc::allocate_vertex(index.files(), &locks).unwrap();
    let leaked_page = navis_engine::update::alloc::allocate_page(index.files(), &locks).unwrap();
    let before = index.verify().unwrap();
    assert!(
        !before.is_clean(),
        "the leaked page is not on the free list yet"
    );
    drop(reader);
    drop(index);

    let index = Index::open(&dir).unwrap();
    let recovery = recover(index.files(), &locks, 2).unwrap();
    assert!(recovery.rebuilt);
    assert_eq!(recovery.published, 550);
    assert_eq!(recovery.free_vertices, 1);
    let report = index.verify().unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.free_vertices, 1);
    // The leaked id is the next one handed out.
    assert_eq!(
        navis_engine::update::alloc::allocate_vertex(index.files(), &locks).unwrap(),
        leaked_vertex
    );
    let _ = leaked_page;
}

fn file_sizes(dir: &std::path::Path) -> (u64, u64, u64) {
    let len = |name: &str| std::fs::metadata(dir.join(name)).unwrap().len();
    (len("edges.dat"), len("vectors.dat"), len("indirection.dat"))
}

#[test]
fn deletes_are_never_returned_and_consolidation_frees_and_repairs() {
    let n = 2000;
    let data = synthetic_clustered(n + NQ, DIM, 16, 21);
    let (rows, queries) = data.split_at(n * DIM);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("idx");
    let tids: Vec<HeapTid> = (0..n).map(tid_of).collect();
    build_index(&dir, rows, &tids, &params(), &|_, _, _| {}, &|| false).unwrap();
    let locks = LocalLocks::new(64);
    let index = Index::open(&dir).unwrap();
    recover(index.files(), &locks, EPOCH).unwrap();

    // Delete every third row: searches skip them at once, before any consolidation.
    let dead = |row: usize| row.is_multiple_of(3);
    let report = index
        .bulk_delete(|tid| dead(row_of(tid)), &|| false)
        .unwrap();
    assert_eq!(report.newly_deleted as usize, n.div_ceil(3));
    assert_eq!(report.live as usize, n - n.div_ceil(3));
    assert_eq!(
        index.widened_list(64),
        (64.0f64 / (1.0 - index.deleted_fraction())).ceil() as usize + 10
    );
    let survivors: Vec<usize> = (0..n).filter(|&r| !dead(r)).collect();
    let live_rows: Vec<f32> = survivors
        .iter()
        .flat_map(|&r| rows[r * DIM..(r + 1) * DIM].to_vec())
        .collect();
    let truth: Vec<Vec<VertexId>> = brute_force_knn(&live_rows, DIM, queries, 10, Metric::L2, 2)
        .into_iter()
        .map(|l| {
            l.into_iter()
                .map(|i| survivors[i as usize] as VertexId)
                .collect()
        })
        .collect();
    let found = top_rows(&index, queries, 10);
    assert!(
        found.iter().flatten().all(|&r| !dead(r as usize)),
        "a deleted row was returned"
    );
    let lazy_recall = recall_at_k(&found, &truth, 10);

    // A second pass marks nothing new; cancellation stops a pass with an error.
    assert_eq!(
        index
            .bulk_delete(|tid| dead(row_of(tid)), &|| false)
            .unwrap()
            .newly_deleted,
        0
    );
    assert!(index.bulk_delete(|_| true, &|| true).is_err());
    assert_eq!(index.deleted_len(), n.div_ceil(3));

    let before = index.verify().unwrap();
    assert!(before.edges_to_deleted > 0);
    let c = index.consolidate(&locks, &|| false).unwrap();
    assert!(c.lists_repaired > 0);
    assert_eq!(c.vertices_freed + c.vertices_kept, n.div_ceil(3) as u64);
    let after = index.verify().unwrap();
    assert!(after.is_clean(), "{after:?}");
    assert_eq!(after.vertices, (n - c.vertices_freed as usize) as u64);
    assert_eq!(after.free_vertices, c.vertices_freed);
    assert_eq!(after.dangling_edges, 0);
    // Only edges to the few deleted entry points remain.
    assert!(
        after.edges_to_deleted < before.edges_to_deleted / 10,
        "{after:?}"
    );
    let found = top_rows(&index, queries, 10);
    assert!(found.iter().flatten().all(|&r| !dead(r as usize)));
    let repaired_recall = recall_at_k(&found, &truth, 10);
    eprintln!("recall@10 lazily deleted {lazy_recall:.3}, after consolidation {repaired_recall:.3}, {c:?}");
    assert!(
        repaired_recall >= lazy_recall - 0.02,
        "{repaired_recall} vs {lazy_recall}"
    );

    // Freed ids are reused by inserts, with their vector slots.
    let vectors_before = file_sizes(&dir).1;
    let mut reader = index.reader().unwrap();
    for row in 0..50 {
        let r = index
            .insert(
                &mut reader,
                &locks,
                &rows[row * DIM..][..DIM],
                tid_of(n + row),
                InsertParams::default(),
            )
            .unwrap();
        assert!((r.vertex as usize) < n, "id {} was not reused", r.vertex);
    }
    assert_eq!(file_sizes(&dir).1, vectors_before);
    assert!(index.verify().unwrap().is_clean());
}

#[test]
fn sliding_window_keeps_files_bounded_and_recall_steady() {
    let window = 1200;
    let step = 300;
    let rounds = 6;
    let total = window + step * rounds;
    let data = synthetic_clustered(total + NQ, DIM, 16, 31);
    let (rows, queries) = data.split_at(total * DIM);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("idx");
    let tids: Vec<HeapTid> = (0..window).map(tid_of).collect();
    build_index(
        &dir,
        &rows[..window * DIM],
        &tids,
        &params(),
        &|_, _, _| {},
        &|| false,
    )
    .unwrap();
    let locks = LocalLocks::new(64);
    let index = Index::open(&dir).unwrap();
    recover(index.files(), &locks, EPOCH).unwrap();
    let mut reader = index.reader().unwrap();
    let mut sizes = Vec::new();
    let mut recalls = Vec::new();
    for round in 0..rounds {
        let (lo, hi) = (window + round * step, window + (round + 1) * step);
        for row in lo..hi {
            index
                .insert(
                    &mut reader,
                    &locks,
                    &rows[row * DIM..][..DIM],
                    tid_of(row),
                    InsertParams::default(),
                )
                .unwrap();
        }
        // Delete the oldest rows so that `window` remain, then VACUUM.
        let oldest_live = hi - window;
        index
            .bulk_delete(|tid| row_of(tid) < oldest_live, &|| false)
            .unwrap();
        if index.deleted_fraction() >= 0.1 {
            index.consolidate(&locks, &|| false).unwrap();
        }
        let report = index.verify().unwrap();
        assert!(report.is_clean(), "round {round}: {report:?}");
        let present = &rows[oldest_live * DIM..hi * DIM];
        let truth: Vec<Vec<VertexId>> = brute_force_knn(present, DIM, queries, 10, Metric::L2, 2)
            .into_iter()
            .map(|l| {
                l.into_iter()
                    .map(|i| (i as usize + oldest_live) as VertexId)
                    .collect()
            })
            .collect();
        recalls.push(recall_at_k(&top_rows(&index, queries, 10), &truth, 10));
        sizes.push(file_sizes(&dir));
    }
    eprintln!("sliding window: recall {recalls:?}, sizes (edges, vectors, indirection) {sizes:?}");
    let (first, last) = (sizes[1], sizes[rounds - 1]);
    // After the first round has settled, nothing keeps growing.
    assert!(last.1 <= first.1, "vector file grew: {sizes:?}");
    assert!(last.2 <= first.2, "indirection grew: {sizes:?}");
    assert!(
        last.0 <= first.0 + first.0 / 2,
        "edge file kept growing: {sizes:?}"
    );
    let min = recalls.iter().cloned().fold(1.0, f64::min);
    assert!(min >= recalls[0] - 0.03, "recall drifted: {recalls:?}");
}

/// Every thread that asks for the entrance graph after a recovery rebuilt it (a new server
/// lifetime) gets the rebuilt one. The epoch used to be marked checked before the new file was
/// mapped, and a thread arriving in between took the old mapping, where its insert's promotion
/// then vanished from this lifetime's graph (`relation_updates.rs` caught it under load).
#[test]
fn threads_racing_after_a_recovery_all_see_the_rebuilt_entrance_graph() {
    let data = synthetic_clustered(400, DIM, 8, 3);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("idx");
    let tids: Vec<HeapTid> = (0..400).map(tid_of).collect();
    build_index(&dir, &data, &tids, &params(), &|_, _, _| {}, &|| false).unwrap();
    let locks = LocalLocks::new(16);
    let index = Index::open(&dir).unwrap();
    const THREADS: usize = 8;
    for epoch in 1..=40u64 {
        recover(index.files(), &locks, epoch).unwrap();
        let barrier = std::sync::Barrier::new(THREADS);
        let epochs: Vec<u64> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        index.entrance().epoch()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(
            epochs.iter().all(|&e| e == epoch),
            "lifetime {epoch}: threads saw the graphs of lifetimes {epochs:?}"
        );
    }
}
