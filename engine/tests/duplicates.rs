//! Many copies of the same vector inserted into an index (issue 14 part 4): every copy must be
//! reachable from the entry points as soon as it is inserted, not only after a VACUUM.
//!
//! An identical vector is at distance 0 from its twin, so RobustPrune lets the twin occlude
//! it in every neighbour's list; the insert keeps its back-edge in the nearest neighbour's
//! list so that it never starts without an in-edge (`update::insert`). That holds too when
//! the other back-edges are deferred (LIOS) and have not run yet.

use std::sync::{Arc, Mutex};

use navis_engine::dataset::synthetic_clustered;
use navis_engine::index::{CasrSetting, IndexParams};
use navis_engine::relation::{build_relation, open_index, StoreLog};
use navis_engine::search::{CasrMode, SearchParams};
use navis_engine::storage::HeapTid;
use navis_engine::store::{FileStore, PageStore};
use navis_engine::update::{recover, BackEdge, BackEdgeSink, InsertParams, LocalLocks};
use navis_engine::Metric;

const DIM: usize = 3;

fn tid(row: usize) -> HeapTid {
    HeapTid {
        block: row as u32 / 100,
        offset: (row % 100 + 1) as u16,
    }
}

/// Back-edges kept until the test runs them.
#[derive(Default)]
struct Queued(Mutex<Vec<BackEdge>>);

impl BackEdgeSink for Queued {
    fn defer(&self, edge: BackEdge) -> bool {
        self.0.lock().unwrap().push(edge);
        true
    }
}

#[test]
fn every_copy_of_a_repeated_vector_is_reachable_at_once() {
    copies_are_reachable_and_found(false);
}

#[test]
fn every_copy_is_reachable_before_its_deferred_back_edges_run() {
    copies_are_reachable_and_found(true);
}

fn copies_are_reachable_and_found(defer: bool) {
    let built = 700;
    let data = synthetic_clustered(built, DIM, 5, 71);
    let tmp = tempfile::tempdir().unwrap();
    let fork = tmp.path().join("16700");
    let store = FileStore::create(&fork).unwrap();
    let tids: Vec<HeapTid> = (0..built).map(tid).collect();
    let params = IndexParams {
        metric: Metric::L2,
        max_degree: 16,
        build_list: 32,
        pq_bytes: None,
        threads: 2,
        ..IndexParams::default()
    };
    build_relation(&store, &data, &tids, &params, 11, &|_, _, _| {}, &|| false).unwrap();
    let store: Arc<dyn PageStore> = Arc::new(store);
    let index = open_index(Arc::clone(&store), &fork, &tmp.path().join("rt")).unwrap();
    assert!(index.set_log(Arc::new(StoreLog::open(Arc::clone(&store)).unwrap())));
    let locks = LocalLocks::new(64);
    recover(index.files(), &locks, 1).unwrap();

    // 100 copies each of three rows of the table: the first one's in a block, the other
    // two's interleaved.
    let twins = [3usize, 350, 699];
    let order: Vec<usize> = std::iter::repeat_n(twins[0], 100)
        .chain((0..200).map(|i| twins[1 + i % 2]))
        .collect();
    let mut reader = index.reader().unwrap();
    let queued = Queued::default();
    for (row, &t) in (built..).zip(&order) {
        let v = &data[t * DIM..(t + 1) * DIM];
        let params = InsertParams::default();
        if defer {
            index.insert_deferring(&mut reader, &locks, v, tid(row), params, &queued)
        } else {
            index.insert(&mut reader, &locks, v, tid(row), params)
        }
        .unwrap();
    }
    let tasks = queued.0.into_inner().unwrap();
    assert_eq!(
        defer,
        !tasks.is_empty(),
        "{} back-edges deferred",
        tasks.len()
    );
    // Before the deferred back-edges run, and after.
    for run_tasks in [false, defer] {
        if run_tasks {
            let ran = index.run_back_edges(&locks, &tasks).unwrap();
            assert_eq!(ran.done + ran.dropped, tasks.len() as u64, "{ran:?}");
        }
        let report = index.verify().unwrap();
        assert_eq!(report.unreachable, 0, "tasks run: {run_tasks}; {report:?}");
        assert!(report.is_clean(), "{report:?}");

        // A scan for one of them returns all 101 copies first (they are all at distance 0).
        let p = SearchParams {
            k: 101,
            list: 128,
            casr: CasrMode::Off,
            ..SearchParams::default()
        };
        let q = &data[350 * DIM..351 * DIM];
        let (hits, _) = index.search(&mut reader, q, p, CasrSetting::Off).unwrap();
        let zeros = hits.iter().filter(|h| h.distance == 0.0).count();
        assert_eq!(zeros, 101, "copies at distance 0 in the top 101");
    }
}
