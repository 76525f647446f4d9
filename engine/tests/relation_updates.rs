//! Inserts, VACUUM and promotions on an index that lives in its relation (RFC 0001 stage 3b):
//! the engine's own update code running on the runtime copy, every change written through
//! `StoreLog` into the relation's pages. What must hold afterwards:
//!
//! - the relation decodes strictly (`RelationImage::read`), and what it holds (entries, edge
//!   lists, vectors, codes) is exactly the runtime copy the searches used;
//! - a runtime copy built afresh from those pages (a new server lifetime) answers every
//!   query exactly as the live one did;
//! - the index is sound (`verify`) and its recall against brute force holds.

use std::sync::Arc;

use navis_engine::dataset::{brute_force_knn, recall_at_k, synthetic_clustered};
use navis_engine::index::{CasrSetting, Index, IndexParams};
use navis_engine::relation::{build_relation, open_index, RelationImage, StoreLog};
use navis_engine::search::{CasrMode, SearchParams};
use navis_engine::storage::HeapTid;
use navis_engine::store::{FileStore, PageStore};
use navis_engine::update::{recover, InsertParams, LocalLocks};
use navis_engine::{Metric, VertexId};

const BUILT: usize = 1500;
const INSERTED: usize = 1500;
const REFILL: usize = 300;
const NQ: usize = 50;
const DIM: usize = 20;

fn tid(row: usize) -> HeapTid {
    HeapTid {
        block: row as u32 / 100,
        offset: (row % 100 + 1) as u16,
    }
}

fn row_of(t: HeapTid) -> usize {
    t.block as usize * 100 + t.offset as usize - 1
}

fn params() -> IndexParams {
    IndexParams {
        metric: Metric::L2,
        max_degree: 24,
        build_list: 48,
        pq_bytes: Some(10),
        threads: 2,
        ..IndexParams::default()
    }
}

/// Rows of the top 10 of every query.
fn top_rows(index: &Index, queries: &[f32]) -> Vec<Vec<VertexId>> {
    let p = SearchParams {
        k: 10,
        list: index.widened_list(48),
        casr: CasrMode::Off,
        ..SearchParams::default()
    };
    let mut reader = index.reader().unwrap();
    queries
        .chunks_exact(DIM)
        .map(|q| {
            let (hits, _) = index.search(&mut reader, q, p, CasrSetting::Off).unwrap();
            hits.iter().map(|h| row_of(h.tid) as VertexId).collect()
        })
        .collect()
}

fn insert_rows(index: &Index, locks: &LocalLocks, data: &[f32], rows: std::ops::Range<usize>) {
    let mut reader = index.reader().unwrap();
    for row in rows {
        index
            .insert(
                &mut reader,
                locks,
                &data[row * DIM..(row + 1) * DIM],
                tid(row),
                InsertParams::default(),
            )
            .unwrap();
    }
}

#[test]
fn inserts_and_vacuum_through_store_log_persist_exactly_what_searches_saw() {
    let total = BUILT + INSERTED + REFILL;
    let data = synthetic_clustered(total + NQ, DIM, 12, 17);
    let queries = &data[total * DIM..];
    let tmp = tempfile::tempdir().unwrap();
    let fork = tmp.path().join("16500");
    let store = FileStore::create(&fork).unwrap();
    let tids: Vec<HeapTid> = (0..BUILT).map(tid).collect();
    build_relation(
        &store,
        &data[..BUILT * DIM],
        &tids,
        &params(),
        3,
        &|_, _, _| {},
        &|| false,
    )
    .unwrap();
    let blocks_built = store.nblocks().unwrap();
    let store: Arc<dyn PageStore> = Arc::new(store);

    let index = open_index(Arc::clone(&store), &fork, &tmp.path().join("runtime-1")).unwrap();
    assert!(index.set_log(Arc::new(StoreLog::open(Arc::clone(&store)).unwrap())));
    let locks = LocalLocks::new(64);
    recover(index.files(), &locks, 1).unwrap();

    // Two writers at once, each with its own reader, as two backends would.
    let half = BUILT + INSERTED / 2;
    std::thread::scope(|s| {
        s.spawn(|| insert_rows(&index, &locks, &data, BUILT..half));
        s.spawn(|| insert_rows(&index, &locks, &data, half..BUILT + INSERTED));
    });
    assert_eq!(index.len(), BUILT + INSERTED);
    assert!(
        store.nblocks().unwrap() > blocks_built,
        "the inserts grew the relation"
    );

    // VACUUM: a third of the rows die, are flagged, consolidated and their ids reused.
    let dead = |row: usize| row.is_multiple_of(3) && row < BUILT + INSERTED;
    index.bulk_delete(|t| dead(row_of(t)), &|| false).unwrap();
    let c = index.consolidate(&locks, &|| false).unwrap();
    assert!(c.vertices_freed > 0 && c.lists_repaired > 0, "{c:?}");
    insert_rows(&index, &locks, &data, BUILT + INSERTED..total);
    let verify = index.verify().unwrap();
    assert!(verify.is_clean(), "{verify:?}");

    // The relation holds exactly the runtime copy.
    let image = RelationImage::read(&*store).unwrap();
    let files = index.files();
    let table = files.indirection();
    let mut page = vec![0u8; files.edge_layout().page_size()];
    let mut published = 0;
    for v in 0..table.capacity().max(image.len()) as VertexId {
        let runtime = table.entry(v);
        let stored = image.entries.get(v as usize).copied().flatten();
        assert_eq!(stored, runtime, "entry of vertex {v}");
        let Some(entry) = runtime else {
            continue;
        };
        published += 1;
        files.read_edge_page(entry.edge.page, &mut page).unwrap();
        let list = files
            .edge_layout()
            .slot_owned_by(&page, entry.edge.slot as usize, v)
            .expect("the entry's slot holds its list")
            .to_vec();
        assert_eq!(image.adjacency[v as usize], list, "list of vertex {v}");
        let row = row_of(entry.tid);
        assert_eq!(image.vector(v), &data[row * DIM..(row + 1) * DIM]);
        assert_eq!(
            image.code(v),
            files.pq_code(v).unwrap(),
            "code of vertex {v}"
        );
    }
    assert_eq!(published, index.len());
    assert_eq!(image.allocator.published as usize, index.len());

    // A new server lifetime: a runtime copy made from the pages answers as the live one.
    let live_answers = top_rows(&index, queries);
    let reopened = open_index(Arc::clone(&store), &fork, &tmp.path().join("runtime-2")).unwrap();
    recover(reopened.files(), &locks, 2).unwrap();
    assert_eq!(reopened.len(), index.len());
    assert_eq!(reopened.entrance().ids(), index.entrance().ids());
    assert_eq!(top_rows(&reopened, queries), live_answers);
    assert!(reopened.verify().unwrap().is_clean());

    let survivors: Vec<usize> = (0..total).filter(|&r| !dead(r)).collect();
    let rows: Vec<f32> = survivors
        .iter()
        .flat_map(|&r| data[r * DIM..(r + 1) * DIM].to_vec())
        .collect();
    let truth: Vec<Vec<VertexId>> = brute_force_knn(&rows, DIM, queries, 10, Metric::L2, 2)
        .into_iter()
        .map(|l| {
            l.into_iter()
                .map(|i| survivors[i as usize] as VertexId)
                .collect()
        })
        .collect();
    let recall = recall_at_k(&live_answers, &truth, 10);
    eprintln!(
        "recall@10 {recall:.3}; relation {} -> {} blocks; {c:?}",
        blocks_built,
        store.nblocks().unwrap()
    );
    assert!(recall >= 0.9, "recall@10 {recall}");
}
