//! A hot standby's runtime copy brought forward page by page (`relation::standby`, RFC 0001
//! §3) answers exactly as the primary's copy does, after every batch of inserts, deletes and
//! consolidation.
//!
//! The primary writes through `StoreLog` into a file fork, as PostgreSQL's redo would leave
//! the standby's pages. After each batch the test finds the blocks that changed (what the
//! shared-memory ring gives a backend), as redo would report them, and resyncs the hot pages
//! (entries, codes, promotions) into its existing copy; its extent map follows the relation's
//! growth by itself. Then its entries and codes must
//! equal the primary's and its searches return the same rows.

use std::sync::Arc;

use navis_engine::dataset::synthetic_clustered;
use navis_engine::index::{CasrSetting, Index, IndexParams};
use navis_engine::pages::meta::Meta;
use navis_engine::relation::apply::Geometry;
use navis_engine::relation::standby::{resync, role, PageRole};
use navis_engine::relation::{build_relation, open_index, open_index_synced, StoreLog};
use navis_engine::search::{CasrMode, SearchParams};
use navis_engine::storage::{Field, HeapTid};
use navis_engine::store::{FileStore, PageStore};
use navis_engine::update::{recover, InsertParams, LocalLocks};
use navis_engine::{Metric, VertexId};

const DIM: usize = 12;
const BUILT: usize = 1200;
const BATCH: usize = 40;
const BATCHES: usize = 12;

fn tid(row: usize) -> HeapTid {
    HeapTid {
        block: row as u32 / 100,
        offset: (row % 100 + 1) as u16,
    }
}

fn params() -> IndexParams {
    IndexParams {
        metric: Metric::L2,
        max_degree: 16,
        build_list: 32,
        pq_bytes: Some(6),
        threads: 2,
        ..IndexParams::default()
    }
}

fn blocks(store: &dyn PageStore) -> Vec<Vec<u8>> {
    (0..store.nblocks().unwrap())
        .map(|b| {
            let mut page = vec![0u8; 8192];
            store.read_block(b, &mut page).unwrap();
            page
        })
        .collect()
}

/// Top-10 TIDs of every query, CASR off so both copies do the same work.
fn answers(index: &Index, queries: &[f32]) -> Vec<Vec<HeapTid>> {
    let p = SearchParams {
        k: 10,
        list: 40,
        casr: CasrMode::Off,
        ..SearchParams::default()
    };
    let mut reader = index.reader().unwrap();
    queries
        .chunks_exact(DIM)
        .map(|q| {
            let (hits, _) = index.search(&mut reader, q, p, CasrSetting::Off).unwrap();
            hits.iter().map(|h| h.tid).collect()
        })
        .collect()
}

#[test]
fn a_resynced_standby_copy_answers_as_the_primary() {
    let total = BUILT + BATCH * BATCHES;
    let data = synthetic_clustered(total + 30, DIM, 8, 5);
    let queries = &data[total * DIM..];
    let tmp = tempfile::tempdir().unwrap();
    let fork = tmp.path().join("16600");
    let store = FileStore::create(&fork).unwrap();
    let tids: Vec<HeapTid> = (0..BUILT).map(tid).collect();
    build_relation(
        &store,
        &data[..BUILT * DIM],
        &tids,
        &params(),
        2,
        &|_, _, _| {},
        &|| false,
    )
    .unwrap();
    let store: Arc<dyn PageStore> = Arc::new(store);
    let locks = LocalLocks::new(64);
    let primary = open_index(Arc::clone(&store), &fork, &tmp.path().join("p")).unwrap();
    assert!(primary.set_log(Arc::new(StoreLog::open(Arc::clone(&store)).unwrap())));
    recover(primary.files(), &locks, 1).unwrap();

    let mut generation = 0u64;
    let mut copies = 0;
    let open_standby = |generation: u64, copies: &mut u32| {
        *copies += 1;
        let dir = tmp.path().join(format!("s{generation}"));
        let copy = open_index_synced(Arc::clone(&store), &fork, &dir, generation).unwrap();
        recover(copy.files(), &LocalLocks::new(64), 7).unwrap();
        assert_eq!(copy.files().state().synced_generation(), generation);
        copy
    };
    let mut standby = open_standby(generation, &mut copies);
    let meta = Meta::decode(&blocks(&*store)[0]).unwrap();
    let geometry = Geometry::of(&meta).unwrap();
    let (mut resyncs, mut entries_written, mut promotions) = (0, 0, 0);

    let mut reader = primary.reader().unwrap();
    let mut before = blocks(&*store);
    for batch in 0..BATCHES {
        let rows = BUILT + batch * BATCH..BUILT + (batch + 1) * BATCH;
        for row in rows.clone() {
            let v = &data[row * DIM..(row + 1) * DIM];
            primary
                .insert(&mut reader, &locks, v, tid(row), InsertParams::default())
                .unwrap();
        }
        if batch % 4 == 3 {
            // VACUUM of every fifth row so far: delete flags, frees, repaired lists
            primary
                .bulk_delete(
                    |t| (t.block * 100 + t.offset as u32).is_multiple_of(5),
                    &|| false,
                )
                .unwrap();
            primary.consolidate(&locks, &|| false).unwrap();
        }
        generation += 1;
        let after = blocks(&*store);
        let changed: Vec<&[u8]> = after
            .iter()
            .enumerate()
            .filter(|&(b, page)| before.get(b) != Some(page))
            .map(|(_, page)| page.as_slice())
            .collect();
        assert!(!changed.is_empty(), "batch {batch} changed no page");
        if changed.iter().any(|p| role(p) == PageRole::Structural) {
            standby = open_standby(generation, &mut copies);
        } else {
            let hot: Vec<&[u8]> = changed
                .iter()
                .copied()
                .filter(|p| role(p) == PageRole::Hot)
                .collect();
            let done = resync(&standby, &geometry, &hot).unwrap();
            // applying the same pages again changes nothing (redo may report a block twice)
            assert_eq!(resync(&standby, &geometry, &hot).unwrap().entries, 0);
            standby.files().state().set_synced_generation(generation);
            resyncs += 1;
            entries_written += done.entries;
            promotions += done.promotions;
        }
        before = after;

        let (p, s) = (primary.files(), standby.files());
        // The standby's id mark covers every published id (the primary's also counts ids it
        // handed out and freed again).
        let bound = p.state().get(Field::NextVertex);
        let standby_bound = s.state().get(Field::NextVertex);
        for v in 0..bound.max(standby_bound) as VertexId {
            if p.indirection().entry(v).is_some() {
                assert!(v < standby_bound, "vertex {v} beyond the standby's mark");
            }
            assert_eq!(
                s.indirection().entry(v),
                p.indirection().entry(v),
                "vertex {v}"
            );
            if p.indirection().entry(v).is_some() {
                assert_eq!(s.pq_code(v), p.pq_code(v), "code of vertex {v}");
            }
        }
        assert_eq!(
            (standby.len(), s.state().get(Field::Deleted)),
            (primary.len(), p.state().get(Field::Deleted)),
            "batch {batch}"
        );
        assert_eq!(
            answers(&standby, queries),
            answers(&primary, queries),
            "batch {batch}"
        );
    }
    eprintln!(
        "{BATCHES} batches: {resyncs} resyncs ({entries_written} entries, {promotions} \
         promotions), {copies} copies"
    );
    // growth of the relation and of the entrance graph are absorbed too: no batch needed a
    // new copy (only a build's blob pages do)
    assert_eq!(resyncs, BATCHES, "{resyncs} resyncs, {copies} copies");
    assert!(promotions > 0, "no promotion was resynced");
    assert!(entries_written as usize >= resyncs * BATCH / 2);
}
