// The engine's write seam on a PostgreSQL relation (RFC 0001 stage 3c, src/pglog.rs), inside a
// real server: an index built into a relation through PgStore, opened through its buffers,
// takes inserts, deletes and a consolidation through PgLog. The relation must then decode
// strictly and equal the engine's runtime copy; the WAL must hold the CHANGE records of every
// kind of change, each of which must round-trip through its encoding; and the WAL volume per
// insert is reported.

// (Included into the `tests` module after pgrx_tests.rs: names here must not repeat
// names there.)

const LOG_TEST_DIM: usize = 16;

fn log_test_tid(row: usize) -> navis_engine::storage::HeapTid {
    navis_engine::storage::HeapTid {
        block: row as u32 / 40,
        offset: (row % 40 + 1) as u16,
    }
}

fn navis_wal_since(start_lsn: &str) -> Vec<(String, String, i64)> {
    flush_own_wal();
    Spi::connect(|c| {
        c.select(
            &format!(
                "SELECT record_type, description, record_length::int8
                 FROM pg_get_wal_records_info('{start_lsn}', pg_current_wal_flush_lsn())
                 WHERE resource_manager = 'navis' ORDER BY start_lsn"
            ),
            None,
            &[],
        )
        .unwrap()
        .map(|r| {
            (
                r.get::<String>(1).unwrap().unwrap(),
                r.get::<String>(2).unwrap().unwrap(),
                r.get::<i64>(3).unwrap().unwrap(),
            )
        })
        .collect()
    })
}

#[pg_test]
fn pg_log_changes_reach_the_relation_and_the_wal() {
    use crate::pglog::{PgBufStore, PgLog};
    use crate::pgstore::PgStore;
    use navis_engine::dataset::synthetic_clustered;
    use navis_engine::index::IndexParams;
    use navis_engine::relation::{build_relation, open_index, RelationImage};
    use navis_engine::storage::HeapTid;
    use navis_engine::store::PageStore;
    use navis_engine::update::{recover, InsertParams, LocalLocks};
    use std::sync::Arc;
    const DIM: usize = LOG_TEST_DIM;
    let tid = log_test_tid;
    Spi::run("CREATE EXTENSION IF NOT EXISTS pg_walinspect").unwrap();
    Spi::run("CREATE TABLE scratch_log (x int)").unwrap();
    let oid = Spi::get_one::<pg_sys::Oid>("SELECT 'scratch_log'::regclass::oid").unwrap().unwrap();
    let (built, inserted) = (2000usize, 300usize);
    let data = synthetic_clustered(built + inserted, DIM, 12, 9);
    let tids: Vec<HeapTid> = (0..built).map(tid).collect();
    let params = IndexParams {
        max_degree: 16,
        build_list: 32,
        pq_bytes: Some(8),
        threads: 2,
        ..IndexParams::default()
    };
    // SAFETY: opened here and closed at the end under a lock that keeps the relation in place.
    let rel = unsafe { pg_sys::table_open(oid, pg_sys::AccessExclusiveLock as i32) };
    let store = PgStore::for_new_relation(rel).unwrap();
    build_relation(&store, &data[..built * DIM], &tids, &params, 5, &|_, _, _| {}, &|| false).unwrap();
    store.sync().unwrap();
    let blocks_built = crate::relstore::nblocks(rel);

    let start_lsn = Spi::get_one::<String>("SELECT pg_current_wal_insert_lsn()::text").unwrap().unwrap();
    let fork = crate::relstore::segment_path(rel, 0);
    let runtime = std::env::temp_dir().join(format!("navis-pglog-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&runtime);
    let reads: Arc<dyn PageStore> = Arc::new(PgBufStore::new(rel));
    let index = open_index(Arc::clone(&reads), &fork, &runtime).unwrap();
    assert!(index.set_log(Arc::new(PgLog::open(rel).unwrap())));
    let locks = LocalLocks::new(64);
    recover(index.files(), &locks, 1).unwrap();
    let mut reader = index.reader().unwrap();
    for row in built..built + inserted {
        index
            .insert(&mut reader, &locks, &data[row * DIM..(row + 1) * DIM], tid(row), InsertParams::default())
            .unwrap();
    }
    drop(reader);
    let insert_records = navis_wal_since(&start_lsn);
    let insert_bytes: i64 = insert_records.iter().filter(|r| r.0 == "CHANGE").map(|r| r.2).sum();
    let dead = |t: HeapTid| (t.block * 40 + t.offset as u32 - 1).is_multiple_of(3);
    index.bulk_delete(dead, &|| false).unwrap();
    let report = index.consolidate(&locks, &|| false).unwrap();
    assert!(report.vertices_freed > 0, "{report:?}");
    assert!(index.verify().unwrap().is_clean());

    // The relation holds exactly the runtime copy.
    let image = RelationImage::read(&*reads).unwrap();
    let table = index.files().indirection();
    for v in 0..table.capacity().max(image.len()) as u32 {
        assert_eq!(image.entries.get(v as usize).copied().flatten(), table.entry(v), "vertex {v}");
        if let Some(e) = table.entry(v) {
            let row = (e.tid.block * 40 + e.tid.offset as u32 - 1) as usize;
            assert_eq!(image.vector(v), &data[row * DIM..(row + 1) * DIM], "vector of {v}");
            assert_eq!(image.code(v), index.files().pq_code(v).unwrap(), "code of {v}");
        }
    }
    assert_eq!(image.allocator.published as usize, index.len());
    assert!(crate::relstore::nblocks(rel) > blocks_built, "the inserts grew the relation");

    // The WAL: bulk images and CHANGE records, and every kind of change was logged.
    let records = navis_wal_since(&start_lsn);
    let kinds = |prefix: &str| records.iter().filter(|r| r.0 == "CHANGE" && r.1.starts_with(prefix)).count();
    assert_eq!(kinds("VECTOR"), inserted, "{records:?}");
    assert!(kinds("EDGE_PAGE") >= inserted);
    assert!(kinds("DELETE_FLAGS") >= 1 && kinds("FREE") >= 1);
    // (pgrx runs tests in parallel in one server, so the WAL also holds other tests' records:
    // only CHANGE records, which no other test writes, are counted.)
    assert!(records.iter().any(|r| r.0 == "EXTEND"));
    pgrx::notice!(
        "PgLog: {inserted} inserts into {built} x {DIM}-d wrote {insert_bytes} navis WAL bytes ({} per insert) in {} records",
        insert_bytes / inserted as i64,
        insert_records.iter().filter(|r| r.0 == "CHANGE").count()
    );

    drop(index);
    let _ = std::fs::remove_dir_all(&runtime);
    // SAFETY: opened above.
    unsafe { pg_sys::table_close(rel, pg_sys::AccessExclusiveLock as i32) };
}

#[pg_test]
fn change_records_round_trip() {
    use navis_engine::storage::HeapTid;
    use crate::wal::change::{decode, encode};
    use navis_engine::pages::codes::CodePages;
    use navis_engine::pages::edge::EdgeLayout;
    use navis_engine::pages::vector::VectorPages;
    use navis_engine::pages::PageKind;
    use navis_engine::relation::apply::{footprint, Change, Geometry, PageRef};
    use navis_engine::storage::EdgeLocation;
    use navis_engine::update::{EdgePageChange, PlacedList, VectorChange};
    let g = Geometry {
        edges: EdgeLayout::new(16).unwrap(),
        vectors: VectorPages::new(5).unwrap(),
        codes: CodePages::new(3).unwrap(),
    };
    let lists = [
        PlacedList { vertex: 7, slot: 0, old: None },
        PlacedList { vertex: 900, slot: 1, old: Some(EdgeLocation { page: 3, slot: 9 }) },
    ];
    let edge = EdgePageChange { page: 12, image: &[], lists: &lists, tid: HeapTid { block: 4, offset: 2 } };
    let vector = VectorChange { vertex: 7, vector: &[1.0, -2.0, 3.5, 0.0, 9.0], tid: HeapTid { block: 4, offset: 2 }, code: &[1, 2, 3] };
    let ids = [1u32, 2, 600];
    let changes = [
        Change::EdgePage(&edge),
        Change::Vector(&vector),
        Change::DeleteFlags(&ids),
        Change::Free(&ids),
        Change::Promote { offset: 8000, record: &[9u8; 300] },
    ];
    for change in &changes {
        let refs: Vec<PageRef> = footprint(&g, change)
            .into_iter()
            .filter(|r| !matches!(r.kind, PageKind::Edge | PageKind::Vector))
            .collect();
        let bytes = encode(&g, change, &refs);
        let decoded = decode(&bytes).unwrap();
        assert_eq!(decoded.geometry, g);
        assert_eq!(decoded.refs, refs);
        let again = decoded.with_change(|c| encode(&g, c, &refs));
        assert_eq!(again, bytes, "{}", decoded.describe());
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
    }
}
