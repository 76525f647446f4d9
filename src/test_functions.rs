//! SQL functions for the cluster tests only (cargo feature `test_functions`; never in a
//! release build): they drive the engine's write seam on a PostgreSQL relation (`PgLog`) in
//! a committed transaction, which the access method does not do yet (RFC 0001 stage 3c), so
//! that crash recovery and a standby can be checked to replay the `CHANGE`, `BULK_IMAGES`
//! and `EXTEND` records into the same pages. The relation is a heap table's main fork used
//! as raw storage: the caller creates the table in the same transaction, with autovacuum off,
//! and never reads it as a table.

use crate::pglog::{PgBufStore, PgLog};
use crate::pgstore::PgStore;
use navis_engine::dataset::synthetic_clustered;
use navis_engine::index::IndexParams;
use navis_engine::relation::{build_relation, open_index, RelationImage};
use navis_engine::storage::{crc32, HeapTid};
use navis_engine::store::PageStore;
use navis_engine::update::{recover, InsertParams, LocalLocks};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::sync::Arc;

const DIM: usize = 16;

fn tid(row: usize) -> HeapTid {
    HeapTid {
        block: row as u32 / 40,
        offset: (row % 40 + 1) as u16,
    }
}

fn fail(e: impl std::fmt::Display) -> ! {
    pgrx::error!("navis test function: {e}")
}

/// What the relation in `rel` holds, as one line: counts and a CRC over every entry, list,
/// vector and code, decoded strictly (`RelationImage::read`).
fn digest(rel: pg_sys::Relation) -> String {
    let store = PgBufStore::new(rel);
    let image = RelationImage::read(&store).unwrap_or_else(|e| fail(e));
    let mut bytes = Vec::new();
    for (v, entry) in image.entries.iter().enumerate() {
        let Some(e) = entry else { continue };
        bytes.extend_from_slice(&(v as u32).to_le_bytes());
        bytes.extend_from_slice(format!("{e:?}").as_bytes());
        for w in &image.adjacency[v] {
            bytes.extend_from_slice(&w.to_le_bytes());
        }
        for x in image.vector(v as u32) {
            bytes.extend_from_slice(&x.to_le_bytes());
        }
        bytes.extend_from_slice(image.code(v as u32));
    }
    format!(
        "published={} deleted={} blocks={} crc={:08x}",
        image.allocator.published,
        image.allocator.deleted,
        store.nblocks().unwrap_or(0),
        crc32(&bytes)
    )
}

/// Builds an index of `built` synthetic rows into the main fork of `table` (created in this
/// transaction, still empty), then inserts `inserted` more, deletes every third row and
/// consolidates, all through `PgLog`. Returns the relation's digest.
#[pg_extern]
fn navis_test_relation_changes(table: pg_sys::Oid, built: i32, inserted: i32) -> String {
    let (built, inserted) = (built.max(1) as usize, inserted.max(0) as usize);
    let data = synthetic_clustered(built + inserted, DIM, 12, 9);
    let tids: Vec<HeapTid> = (0..built).map(tid).collect();
    let params = IndexParams {
        max_degree: 16,
        build_list: 32,
        pq_bytes: Some(8),
        threads: 1,
        ..IndexParams::default()
    };
    // SAFETY: opened here and closed below; the lock keeps the relation in place.
    let rel = unsafe { pg_sys::table_open(table, pg_sys::AccessExclusiveLock as i32) };
    let store = PgStore::for_new_relation(rel).unwrap_or_else(|e| fail(e));
    build_relation(
        &store,
        &data[..built * DIM],
        &tids,
        &params,
        11,
        &|_, _, _| {},
        &|| false,
    )
    .unwrap_or_else(|e| fail(e));
    store.sync().unwrap_or_else(|e| fail(e));
    let fork = crate::relstore::segment_path(rel, 0);
    let runtime = std::env::temp_dir().join(format!("navis-test-functions-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&runtime);
    let reads: Arc<dyn PageStore> = Arc::new(PgBufStore::new(rel));
    let index = open_index(reads, &fork, &runtime).unwrap_or_else(|e| fail(e));
    index.set_log(Arc::new(PgLog::open(rel).unwrap_or_else(|e| fail(e))));
    let locks = LocalLocks::new(64);
    recover(index.files(), &locks, 1).unwrap_or_else(|e| fail(e));
    let mut reader = index.reader().unwrap_or_else(|e| fail(e));
    for row in built..built + inserted {
        index
            .insert(
                &mut reader,
                &locks,
                &data[row * DIM..(row + 1) * DIM],
                tid(row),
                InsertParams::default(),
            )
            .unwrap_or_else(|e| fail(e));
    }
    drop(reader);
    let dead = |t: HeapTid| (t.block * 40 + t.offset as u32 - 1).is_multiple_of(3);
    index
        .bulk_delete(dead, &|| false)
        .unwrap_or_else(|e| fail(e));
    index
        .consolidate(&locks, &|| false)
        .unwrap_or_else(|e| fail(e));
    drop(index);
    let _ = std::fs::remove_dir_all(&runtime);
    let d = digest(rel);
    // SAFETY: opened above.
    unsafe { pg_sys::table_close(rel, pg_sys::AccessExclusiveLock as i32) };
    d
}

/// The digest of the relation in `table`'s main fork (on a primary or a hot standby).
#[pg_extern]
fn navis_test_relation_digest(table: pg_sys::Oid) -> String {
    // SAFETY: opened and closed here under a lock that keeps the relation in place.
    let rel = unsafe { pg_sys::table_open(table, pg_sys::AccessShareLock as i32) };
    let d = digest(rel);
    // SAFETY: opened above.
    unsafe { pg_sys::table_close(rel, pg_sys::AccessShareLock as i32) };
    d
}

/// Drops the page-cache copy of every segment file of `index`'s main fork (the caller runs
/// CHECKPOINT first, so that no page is dirty): a cold cache as after a reboot, for the tests
/// of reads that the page cache does not serve (RFC 0006). Returns the files advised.
#[pg_extern]
fn navis_test_drop_page_cache(index: pg_sys::Oid) -> i32 {
    // SAFETY: opened and closed here under a lock that keeps the relation in place.
    let rel = unsafe { pg_sys::index_open(index, pg_sys::AccessShareLock as i32) };
    let mut files = 0;
    for segment in 0.. {
        let path = crate::relstore::segment_path(rel, segment);
        if !path.exists() {
            break;
        }
        navis_engine::page_cache::evict(&path).unwrap_or_else(|e| fail(e));
        files += 1;
    }
    // SAFETY: opened above.
    unsafe { pg_sys::index_close(rel, pg_sys::AccessShareLock as i32) };
    files
}
