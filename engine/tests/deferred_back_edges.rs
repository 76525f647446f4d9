//! LIOS's deferred back-edges (RFC 0004 §1, issue 18): an insert that leaves its neighbours'
//! back-edges to a task queue must leave, once the tasks ran, a graph as sound as inline
//! inserts leave (degree bounds, reachability) with recall within half a point; the new row
//! must be searchable before any task runs; tasks that lost their meaning are dropped.

mod lios_common;
use lios_common::{copy_dir, open, row_of, tid};

use navis_engine::dataset::{brute_force_knn, recall_at_k, synthetic_clustered};
use navis_engine::index::{build_index, Index, IndexParams};
use navis_engine::lios::{QueueHeader, QueueSink, Task, TaskKind, TaskQueue, TaskSlot};
use navis_engine::search::{CasrMode, SearchCursor, SearchParams};
use navis_engine::storage::HeapTid;
use navis_engine::update::write::read_current_list;
use navis_engine::update::{BackEdge, BackEdgeSink, InsertParams, LocalLocks};
use navis_engine::{Metric, VertexId};

const DIM: usize = 32;
const BASE: usize = 1000;
const INSERTED: usize = 2000;
const NQ: usize = 200;
const TAG: u64 = 42;

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

/// Rows of the top `k` for each query.
fn top_rows(index: &Index, queries: &[f32], k: usize, list: usize) -> Vec<Vec<VertexId>> {
    let mut reader = index.reader().unwrap();
    queries
        .chunks_exact(DIM)
        .map(|q| {
            let p = SearchParams {
                k,
                list,
                casr: CasrMode::Off,
                ..SearchParams::default()
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

fn list_of(index: &Index, v: VertexId) -> Vec<VertexId> {
    let files = index.files();
    let entry = files.indirection().entry(v).expect("published");
    let mut buf = vec![0u8; files.edge_layout().page_size()];
    read_current_list(files, v, entry.edge, &mut buf).unwrap()
}

struct Fixture {
    _tmp: tempfile::TempDir,
    inline_dir: std::path::PathBuf,
    deferred_dir: std::path::PathBuf,
    rows: Vec<f32>,
    queries: Vec<f32>,
}

fn fixture() -> Fixture {
    let data = synthetic_clustered(BASE + INSERTED + NQ, DIM, 16, 5);
    let (rows, queries) = data.split_at((BASE + INSERTED) * DIM);
    let tmp = tempfile::tempdir().unwrap();
    let inline_dir = tmp.path().join("inline");
    let base_tids: Vec<HeapTid> = (0..BASE).map(tid).collect();
    build_index(
        &inline_dir,
        &rows[..BASE * DIM],
        &base_tids,
        &params(),
        &|_, _, _| {},
        &|| false,
    )
    .unwrap();
    // One build, copied, so that both sides start from the same graph.
    let deferred_dir = tmp.path().join("deferred");
    copy_dir(&inline_dir, &deferred_dir);
    Fixture {
        _tmp: tmp,
        inline_dir,
        deferred_dir,
        rows: rows.to_vec(),
        queries: queries.to_vec(),
    }
}

/// Pops up to `n` tasks of the test's index and runs them.
fn run_queued(index: &Index, locks: &LocalLocks, queue: &TaskQueue<'_>, n: usize) -> u64 {
    let mut tasks = Vec::new();
    while tasks.len() < n {
        let Some(Task { tag, vertex, kind }) = queue.pop() else {
            break;
        };
        assert_eq!(tag, TAG);
        let TaskKind::BackEdge { to } = kind else {
            panic!("only back-edges are queued here");
        };
        tasks.push(BackEdge { vertex, to });
    }
    let report = index.run_back_edges(locks, &tasks).unwrap();
    assert_eq!(
        report.done + report.dropped,
        tasks.len() as u64,
        "{report:?}"
    );
    tasks.len() as u64
}

#[test]
fn deferred_back_edges_leave_the_structure_and_recall_of_inline_inserts() {
    let f = fixture();
    let locks = LocalLocks::new(64);
    let inline = open(&f.inline_dir, &locks);
    let deferred = open(&f.deferred_dir, &locks);

    let (header, slots) = (
        QueueHeader::new(),
        (0..256).map(|_| TaskSlot::new()).collect::<Vec<_>>(),
    );
    let queue = TaskQueue::new(&header, &slots);
    queue.reset();
    let sink = QueueSink {
        queue: &queue,
        tag: TAG,
    };
    let mut inline_reader = inline.reader().unwrap();
    let mut deferred_reader = deferred.reader().unwrap();
    let (mut inline_lists, mut deferred_lists, mut left_to_tasks, mut ran) = (0, 0, 0, 0);
    let mut found_before_tasks = 0;
    for row in BASE..BASE + INSERTED {
        let v = &f.rows[row * DIM..(row + 1) * DIM];
        let a = inline
            .insert(
                &mut inline_reader,
                &locks,
                v,
                tid(row),
                InsertParams::default(),
            )
            .unwrap();
        inline_lists += a.lists_written;
        let b = deferred
            .insert_deferring(
                &mut deferred_reader,
                &locks,
                v,
                tid(row),
                InsertParams::default(),
                &sink,
            )
            .unwrap();
        assert!(b.degree >= 1);
        deferred_lists += b.lists_written;
        left_to_tasks += b.back_edges_deferred;
        // Searchable at once: its own vector finds it before any of its tasks ran.
        if row % 10 == 0 {
            let hit = top_rows(&deferred, v, 1, 32);
            found_before_tasks += (hit[0] == [row as VertexId]) as usize;
        }
        // A worker that lags: it runs a batch when the queue is three quarters full.
        if queue.len() >= 192 {
            ran += run_queued(&deferred, &locks, &queue, 64);
        }
    }
    while !queue.is_empty() {
        ran += run_queued(&deferred, &locks, &queue, 64);
    }
    assert_eq!(ran, left_to_tasks, "every deferred back-edge became a task");
    let checked = INSERTED / 10;
    assert_eq!(
        found_before_tasks, checked,
        "rows not searchable before their tasks ran"
    );
    // The inserts themselves wrote far fewer lists: the nearest neighbour's and their own.
    assert!(left_to_tasks > INSERTED as u64 * 3, "{left_to_tasks}");
    assert!(
        deferred_lists * 3 < inline_lists,
        "{deferred_lists} lists written by deferring inserts vs {inline_lists} inline"
    );

    let (a, b) = (inline.verify().unwrap(), deferred.verify().unwrap());
    assert_eq!(b.problem_count, 0, "{b:?}");
    assert_eq!(b.dangling_edges, 0, "{b:?}");
    assert_eq!(b.vertices, a.vertices);
    assert!(
        b.unreachable <= a.unreachable + (BASE + INSERTED) as u64 / 200,
        "unreachable: {} deferred vs {} inline",
        b.unreachable,
        a.unreachable
    );
    // The same number of edges within 2%: the back-edges were not lost.
    assert!(
        (b.edges as f64 - a.edges as f64).abs() <= 0.02 * a.edges as f64,
        "edges: {} deferred vs {} inline",
        b.edges,
        a.edges
    );

    let truth = brute_force_knn(&f.rows, DIM, &f.queries, 10, Metric::L2, 2);
    let recall_inline = recall_at_k(&top_rows(&inline, &f.queries, 10, 24), &truth, 10);
    let recall_deferred = recall_at_k(&top_rows(&deferred, &f.queries, 10, 24), &truth, 10);
    eprintln!(
        "recall@10 inline {recall_inline:.4} deferred {recall_deferred:.4}; lists written by \
         inserts {inline_lists} vs {deferred_lists}; tasks {left_to_tasks}; unreachable {} vs {}; \
         edges {} vs {}",
        a.unreachable, b.unreachable, a.edges, b.edges
    );
    assert!(
        recall_deferred >= recall_inline - 0.005,
        "recall@10 {recall_deferred} deferred vs {recall_inline} inline"
    );
}

/// A sink that takes every back-edge (`Takes(true)`: and loses it, as a crash with the queue
/// full of them does) or none (`Takes(false)`: a full queue, the insert runs them itself).
struct Takes(bool);

impl BackEdgeSink for Takes {
    fn defer(&self, _: BackEdge) -> bool {
        self.0
    }
}

#[test]
fn a_full_queue_makes_the_insert_write_its_back_edges_itself() {
    let f = fixture();
    let locks = LocalLocks::new(64);
    let index = open(&f.deferred_dir, &locks);
    let mut reader = index.reader().unwrap();
    let mut lists = 0;
    for row in BASE..BASE + 300 {
        let v = &f.rows[row * DIM..(row + 1) * DIM];
        let report = index
            .insert_deferring(
                &mut reader,
                &locks,
                v,
                tid(row),
                InsertParams::default(),
                &Takes(false),
            )
            .unwrap();
        assert_eq!(report.back_edges_deferred, 0);
        lists += report.lists_written;
    }
    // About as many lists as inline inserts write: each neighbour's and the new one's.
    assert!(lists > 300 * 4, "{lists}");
    let report = index.verify().unwrap();
    assert_eq!(report.problem_count, 0, "{report:?}");
}

#[test]
fn tasks_that_lost_their_meaning_are_dropped_and_done_ones_write_nothing() {
    let f = fixture();
    let locks = LocalLocks::new(64);
    let index = open(&f.deferred_dir, &locks);
    let u: VertexId = 7;
    let current = list_of(&index, u);
    let already = current[0];
    // A vertex not in u's list, and one to delete.
    let fresh = (0..BASE as VertexId)
        .find(|&x| x != u && !current.contains(&x))
        .unwrap();
    let doomed = (0..BASE as VertexId)
        .rev()
        .find(|&x| x != u && x != fresh && !current.contains(&x))
        .unwrap();
    index
        .bulk_delete(|t| row_of(t) == doomed as usize, &|| false)
        .unwrap();

    let edge = |vertex, to| BackEdge { vertex, to };
    let report = index
        .run_back_edges(
            &locks,
            &[
                edge(u, already),
                edge(u, u),
                edge(u, doomed),
                edge(u, 999_999),
            ],
        )
        .unwrap();
    assert_eq!((report.done, report.dropped), (1, 3), "{report:?}");
    assert_eq!(report.lists_written, 0, "{report:?}");
    assert_eq!(list_of(&index, u), current);

    // Twice the same edge: one list written, the edge once.
    let report = index
        .run_back_edges(&locks, &[edge(u, fresh), edge(u, fresh)])
        .unwrap();
    assert_eq!(report.done, 2, "{report:?}");
    let after = list_of(&index, u);
    if report.pruned == 0 {
        assert_eq!(after.len(), current.len() + 1);
    }
    assert!(after.len() <= params().max_degree);
    assert!(after.iter().filter(|&&x| x == fresh).count() <= 1);
    assert!(after.contains(&fresh) || report.pruned == 1, "{report:?}");
    assert!(report.lists_written >= 1, "{report:?}");
    assert_eq!(index.verify().unwrap().problem_count, 0);
}

#[test]
fn vacuum_restores_the_back_edges_a_crash_lost() {
    let f = fixture();
    let locks = LocalLocks::new(64);
    let inline = open(&f.inline_dir, &locks);
    let crashed = open(&f.deferred_dir, &locks);
    let mut inline_reader = inline.reader().unwrap();
    let mut crashed_reader = crashed.reader().unwrap();
    for row in BASE..BASE + INSERTED {
        let v = &f.rows[row * DIM..(row + 1) * DIM];
        inline
            .insert(
                &mut inline_reader,
                &locks,
                v,
                tid(row),
                InsertParams::default(),
            )
            .unwrap();
        crashed
            .insert_deferring(
                &mut crashed_reader,
                &locks,
                v,
                tid(row),
                InsertParams::default(),
                &Takes(true),
            )
            .unwrap();
    }
    let truth = brute_force_knn(&f.rows, DIM, &f.queries, 10, Metric::L2, 2);
    let recall = |index: &Index| recall_at_k(&top_rows(index, &f.queries, 10, 24), &truth, 10);
    let lost_recall = recall(&crashed);
    let inline_edges = inline.verify().unwrap().edges;
    let lost_edges = crashed.verify().unwrap().edges;

    inline.set_restore_lost_back_edges(true);
    crashed.set_restore_lost_back_edges(true);
    let inline_vacuum = inline.reconnect(&locks, &|| false).unwrap().unwrap();
    let vacuum = crashed.reconnect(&locks, &|| false).unwrap().unwrap();
    let (a, b) = (inline.verify().unwrap(), crashed.verify().unwrap());
    let (recall_inline, recall_restored) = (recall(&inline), recall(&crashed));
    eprintln!(
        "edges inline {inline_edges} -> {}, lost {lost_edges} -> {}; restored {} back-edges \
         ({} in the inline graph); recall@10 inline {recall_inline:.4}, lost {lost_recall:.4}, \
         restored {recall_restored:.4}",
        a.edges, b.edges, vacuum.back_edges_restored, inline_vacuum.back_edges_restored
    );
    assert!(
        lost_edges < inline_edges * 3 / 4,
        "the lost tasks cost edges"
    );
    assert!(b.is_clean(), "{b:?}");
    assert!(vacuum.back_edges_restored > INSERTED as u64, "{vacuum:?}");
    // Not all of them: a vertex that later inserts linked to enough is left as it is.
    assert!(
        (b.edges as f64) >= 0.9 * a.edges as f64,
        "edges after VACUUM: {} restored vs {} inline",
        b.edges,
        a.edges
    );
    assert!(
        recall_restored >= recall_inline - 0.005,
        "recall@10 {recall_restored} after VACUUM vs {recall_inline} inline"
    );
}
