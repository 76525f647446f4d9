//! An index that starts empty and grows by inserts rebuilds itself from its own rows at the
//! thresholds of `index::regrow` (RFC 0002), the new build appended after the old one and
//! switched to by its metapage. What must hold:
//!
//! - the grown index answers like a fresh build of the same rows (recall within a point);
//! - the relation verifies, with the earlier builds' blocks retired, and a runtime copy made
//!   afresh from the pages answers as the live one;
//! - `rows_changed_since` sees every row inserted and deleted after a snapshot and names them
//!   exactly; the snapshot the PostgreSQL layer takes again when it sees any holds exactly the
//!   surviving rows, and a build of it finds every one of them and no deleted one.

use std::path::Path;
use std::sync::Arc;

use navis_engine::dataset::{brute_force_knn, recall_at_k, synthetic_clustered};
use navis_engine::index::regrow::{regrow_threshold, RowSnapshot};
use navis_engine::index::{build_in_memory, CasrSetting, EdgePageFormat, Index, IndexParams};
use navis_engine::relation::{build_relation, open_index, RelationImage, RelationWriter, StoreLog};
use navis_engine::search::{CasrMode, SearchParams};
use navis_engine::storage::HeapTid;
use navis_engine::store::{FileStore, PageStore};
use navis_engine::update::{recover, InsertParams, LocalLocks};
use navis_engine::{Metric, VertexId};

const DIM: usize = 16;
const ROWS: usize = 3000;
const NQ: usize = 100;

fn tid(row: usize) -> HeapTid {
    HeapTid {
        block: row as u32 / 100,
        offset: (row % 100 + 1) as u16,
    }
}

fn row_of(t: HeapTid) -> usize {
    t.block as usize * 100 + t.offset as usize - 1
}

fn params(dim: Option<usize>) -> IndexParams {
    IndexParams {
        metric: Metric::L2,
        dim,
        max_degree: 24,
        build_list: 48,
        pq_bytes: Some(8),
        threads: 2,
        ..IndexParams::default()
    }
}

struct Grown {
    store: Arc<dyn PageStore>,
    fork: std::path::PathBuf,
    runtime: tempfile::TempDir,
    copies: usize,
    locks: LocalLocks,
}

impl Grown {
    /// Opens whatever build block 0 names, in a fresh runtime copy.
    fn open(&mut self) -> Index {
        self.copies += 1;
        let dir = self.runtime.path().join(format!("copy-{}", self.copies));
        let index = open_index(Arc::clone(&self.store), &self.fork, &dir).unwrap();
        assert!(index.set_log(Arc::new(StoreLog::open(Arc::clone(&self.store)).unwrap())));
        recover(index.files(), &self.locks, self.copies as u64).unwrap();
        index
    }

    /// Rebuilds from `snapshot` (plus `extra` rows), appended, and switches block 0.
    fn rebuild(&mut self, snapshot: &RowSnapshot, extra: &[(Vec<f32>, HeapTid)]) -> Index {
        let mut vectors = snapshot.vectors.clone();
        let mut tids = snapshot.tids.clone();
        for (v, t) in extra {
            vectors.extend_from_slice(v);
            tids.push(*t);
        }
        // As src/regrow.rs does: build in memory, append after the build in use, and switch
        // block 0 to the new metapage last.
        let built = build_in_memory(
            &vectors,
            &tids,
            &params(Some(DIM)),
            EdgePageFormat::Relation,
            &|_, _, _| {},
            &|| false,
        )
        .unwrap();
        let (meta, page) = RelationWriter::append(
            &*self.store,
            &built.input(),
            built.medoid,
            7 + self.copies as u64,
        )
        .unwrap();
        assert_eq!(meta.build_vertices as usize, tids.len());
        self.store.write_block(0, &page).unwrap();
        self.store.sync().unwrap();

        self.open()
    }
}

fn insert(index: &Index, locks: &LocalLocks, v: &[f32], t: HeapTid) {
    let mut reader = index.reader().unwrap();
    index
        .insert(&mut reader, locks, v, t, InsertParams::default())
        .unwrap();
}

fn top_rows(index: &Index, queries: &[f32]) -> Vec<Vec<VertexId>> {
    let p = SearchParams {
        k: 10,
        list: 64,
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

fn empty_relation(fork: &Path) -> FileStore {
    let store = FileStore::create(fork).unwrap();
    build_relation(&store, &[], &[], &params(None), 1, &|_, _, _| {}, &|| false).unwrap();
    store
}

#[test]
fn an_index_grown_from_empty_answers_like_a_fresh_build() {
    let data = synthetic_clustered(ROWS + NQ, DIM, 12, 41);
    let queries = &data[ROWS * DIM..];
    let tmp = tempfile::tempdir().unwrap();
    let fork = tmp.path().join("16600");
    let store: Arc<dyn PageStore> = Arc::new(empty_relation(&fork));
    let mut grown = Grown {
        store,
        fork,
        runtime: tempfile::tempdir().unwrap(),
        copies: 0,
        locks: LocalLocks::new(64),
    };
    let mut index = grown.open();
    assert!(index.is_empty() && !index.accepts_inserts());
    let mut rebuilds = 0;
    for row in 0..ROWS {
        let v = &data[row * DIM..(row + 1) * DIM];
        let built = grown_built(&grown);
        if regrow_threshold(built).is_some_and(|t| index.live_len() + 1 >= t) {
            let mut reader = index.reader().unwrap();
            let snapshot = index.snapshot_rows(&mut reader).unwrap();
            drop(reader);
            assert_eq!(
                snapshot.ids.len(),
                row,
                "the snapshot holds every row so far"
            );
            index = grown.rebuild(&snapshot, &[(v.to_vec(), tid(row))]);
            rebuilds += 1;
        } else {
            insert(&index, &grown.locks, v, tid(row));
        }
    }
    // 1, 16, 256 and 2048 rows: four builds, the next one at 16384.
    assert_eq!(rebuilds, 4);
    assert_eq!(index.live_len(), ROWS);
    assert!(index.verify().unwrap().is_clean());

    let image = RelationImage::read(&*grown.store).unwrap();
    assert_eq!(image.meta.build_vertices, 2048);
    assert!(image.meta.first_block > 1, "earlier builds are retired");
    // Right after a rebuild the retired build (grown by inserts to the threshold) is about
    // as large as the new one; it stays that size while the index grows eightfold.
    let retired = image.meta.first_block as f64 / grown.store.nblocks().unwrap() as f64;
    eprintln!("retired share of the relation: {retired:.3}");
    assert!(retired < 0.6, "retired {retired}");

    let fresh_tmp = tempfile::tempdir().unwrap();
    let fresh_fork = fresh_tmp.path().join("fresh");
    let fresh_store: Arc<dyn PageStore> = Arc::new(FileStore::create(&fresh_fork).unwrap());
    let tids: Vec<HeapTid> = (0..ROWS).map(tid).collect();
    build_relation(
        &*fresh_store,
        &data[..ROWS * DIM],
        &tids,
        &params(Some(DIM)),
        99,
        &|_, _, _| {},
        &|| false,
    )
    .unwrap();
    let fresh = open_index(fresh_store, &fresh_fork, &fresh_tmp.path().join("rt")).unwrap();

    let truth = brute_force_knn(&data[..ROWS * DIM], DIM, queries, 10, Metric::L2, 2);
    let answers = top_rows(&index, queries);
    let r_grown = recall_at_k(&answers, &truth, 10);
    let r_fresh = recall_at_k(&top_rows(&fresh, queries), &truth, 10);
    eprintln!("recall@10: grown from empty {r_grown:.4}, fresh build {r_fresh:.4}");
    assert!(
        r_grown >= r_fresh - 0.01,
        "grown {r_grown} vs fresh {r_fresh}"
    );

    // A new lifetime's copy, made from the pages, answers the same.
    let again = grown.open();
    assert_eq!(top_rows(&again, queries), answers);
}

fn grown_built(grown: &Grown) -> usize {
    let mut page = vec![0u8; navis_engine::pages::BLOCK_SIZE];
    grown.store.read_block(0, &mut page).unwrap();
    navis_engine::pages::meta::Meta::decode(&page)
        .unwrap()
        .build_vertices as usize
}

#[test]
fn rows_changed_since_a_snapshot_are_named_and_a_new_snapshot_holds_them() {
    let n = 600;
    let data = synthetic_clustered(n, DIM, 6, 43);
    let tmp = tempfile::tempdir().unwrap();
    let fork = tmp.path().join("16601");
    let store = FileStore::create(&fork).unwrap();
    let tids: Vec<HeapTid> = (0..400).map(tid).collect();
    build_relation(
        &store,
        &data[..400 * DIM],
        &tids,
        &params(Some(DIM)),
        5,
        &|_, _, _| {},
        &|| false,
    )
    .unwrap();
    let mut grown = Grown {
        store: Arc::new(store),
        fork,
        runtime: tempfile::tempdir().unwrap(),
        copies: 0,
        locks: LocalLocks::new(64),
    };
    let old = grown.open();
    let mut reader = old.reader().unwrap();
    let snapshot = old.snapshot_rows(&mut reader).unwrap();
    assert_eq!(snapshot.ids.len(), 400);
    // While the rebuild "runs": 200 inserts, 50 deletes (a VACUUM), 20 of them consolidated
    // away and their ids reused.
    for row in 400..n {
        insert(
            &old,
            &grown.locks,
            &data[row * DIM..(row + 1) * DIM],
            tid(row),
        );
    }
    let dead = |row: usize| row.is_multiple_of(12);
    old.bulk_delete(|t| dead(row_of(t)), &|| false).unwrap();
    old.consolidate(&grown.locks, &|| false).unwrap();
    let changes = old.rows_changed_since(&snapshot);
    let gone: Vec<usize> = changes.gone.iter().map(|&t| row_of(t)).collect();
    assert!(gone.iter().all(|&r| dead(r)));
    assert_eq!(gone.len(), (0..400).filter(|&r| dead(r)).count());
    assert_eq!(changes.added.len(), (400..n).filter(|&r| !dead(r)).count());
    // What src/regrow.rs does on seeing changes: snapshot again and build from that. The new
    // snapshot is the old one without the gone rows and with the added ones, and an index
    // nobody changed since reports no change.
    let again = old.snapshot_rows(&mut reader).unwrap();
    drop(reader);
    assert!(old.rows_changed_since(&again).is_empty());
    let mut expected: Vec<HeapTid> = snapshot
        .tids
        .iter()
        .filter(|t| !changes.gone.contains(t))
        .copied()
        .chain(changes.added.iter().map(|&v| {
            let at = again
                .ids
                .iter()
                .position(|&w| w == v)
                .expect("added vertex in snapshot");
            again.tids[at]
        }))
        .collect();
    let mut got = again.tids.clone();
    expected.sort_unstable_by_key(|t| (t.block, t.offset));
    got.sort_unstable_by_key(|t| (t.block, t.offset));
    assert_eq!(got, expected);

    let new = grown.rebuild(&again, &[]);
    let survivors: Vec<usize> = (0..n).filter(|&r| !dead(r)).collect();
    assert_eq!(new.live_len(), survivors.len());
    let p = SearchParams {
        k: 1,
        list: 64,
        casr: CasrMode::Off,
        ..SearchParams::default()
    };
    let mut reader = new.reader().unwrap();
    for &row in &survivors {
        let q = &data[row * DIM..(row + 1) * DIM];
        let (hits, _) = new.search(&mut reader, q, p, CasrSetting::Off).unwrap();
        assert_eq!(row_of(hits[0].tid), row, "row {row} finds itself");
    }
    for row in (0..n).filter(|&r| dead(r)) {
        let q = &data[row * DIM..(row + 1) * DIM];
        let (hits, _) = new.search(&mut reader, q, p, CasrSetting::Off).unwrap();
        assert_ne!(
            row_of(hits[0].tid),
            row,
            "deleted row {row} is not returned"
        );
    }
}
