//! Reading ahead the heap rows a scan returns next, and their TOASTed vectors.
//!
//! The executor fetches an index scan's rows one at a time. For the query every vector index
//! serves, `SELECT ... ORDER BY embedding <-> $1 LIMIT k`, it also evaluates the ORDER BY
//! expression again for each row it returns (the expression is in the target list), and that
//! detoasts the row's vector: a `vector` of more than about 500 dimensions does not fit in
//! the heap tuple and lives in the table's TOAST relation. So each returned row costs its heap
//! page, a TOAST index lookup and one or two TOAST pages, read with synchronous `pread`s one
//! row after another. Out of memory (Fashion-MNIST, 784 dimensions, a 256 MiB memory group)
//! those reads were 0.45 ms of a 1.1 ms query (`pg_stat_database.blk_read_time`), about 7
//! TOAST page reads per query, more than navis's own search waited for.
//!
//! The cursor knows the rows it will return before the executor asks (a pass queues a batch),
//! and so does a result-cache hit (its cached rows).
//! [`ReadAhead`] starts the reads of all of them at once with `PrefetchBuffer` (the
//! `posix_fadvise` PostgreSQL's bitmap heap scans issue): first the heap pages, then, for a
//! TOASTed column, the TOAST pages, found through the TOAST index without reading them. The
//! executor's reads then find the pages in the kernel's page cache, or wait for reads already
//! under way, instead of waiting for each in turn. Nothing is read into shared buffers but the
//! heap pages (to find each row's TOAST pointer), which the executor reads next anyway.
//!
//! `effective_io_concurrency = 0` turns it off, as it does PostgreSQL's own prefetching. The
//! TOAST step costs a heap-page visit and a TOAST index lookup per row even when everything is
//! in shared buffers, so each backend backs off from it (1, 2, 4 ... 64 scans) while its
//! probes find every TOAST page in shared buffers. SERIALIZABLE transactions skip the TOAST
//! step: visiting rows the executor may never fetch would take predicate locks on them.

use navis_engine::storage::HeapTid;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::Cell;

/// Rows read ahead of the executor at most. A first pass queues `navis.rerank_top_k` rows
/// (10 by default), all of which a `LIMIT 10` takes; a resumed pass queues up to 1,024, of
/// which a filtered scan may take few.
const ROWS_AHEAD: usize = 32;

/// Scans a backend skips the TOAST step for, at most, after probes found every TOAST page in
/// shared buffers.
const MAX_TOAST_BACKOFF: u32 = 64;

/// What one backend's read-ahead did (cumulative).
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadAheadCounters {
    pub rows: u64,
    pub heap_blocks: u64,
    pub heap_blocks_not_buffered: u64,
    pub toast_values: u64,
    pub toast_blocks: u64,
    pub toast_blocks_not_buffered: u64,
    pub toast_steps_skipped: u64,
}

thread_local! {
    static COUNTERS: Cell<ReadAheadCounters> = Cell::new(ReadAheadCounters::default());
    /// (scans left to skip the TOAST step, the current backoff)
    static TOAST_BACKOFF: Cell<(u32, u32)> = const { Cell::new((0, 0)) };
}

/// This backend's counters.
pub fn counters() -> ReadAheadCounters {
    COUNTERS.with(Cell::get)
}

fn count(f: impl FnOnce(&mut ReadAheadCounters)) {
    COUNTERS.with(|c| {
        let mut v = c.get();
        f(&mut v);
        c.set(v);
    });
}

/// One scan's read-ahead position: how many of the cursor's queued rows were read ahead.
#[derive(Default)]
pub struct ReadAhead {
    ahead: usize,
}

impl ReadAhead {
    /// Before the executor takes its next row: when less than half a window of the queued
    /// rows was read ahead, reads ahead the rest of the window.
    pub fn top_up(
        &mut self,
        scan: pg_sys::IndexScanDesc,
        queued: impl ExactSizeIterator<Item = HeapTid>,
    ) {
        // SAFETY: reading a PostgreSQL GUC variable in a backend.
        if unsafe { pg_sys::effective_io_concurrency } == 0 {
            return;
        }
        let queued_len = queued.len();
        self.ahead = self.ahead.min(queued_len);
        if self.ahead > ROWS_AHEAD / 2 || self.ahead == queued_len {
            return;
        }
        let tids: Vec<HeapTid> = queued
            .skip(self.ahead)
            .take(ROWS_AHEAD - self.ahead)
            .collect();
        self.ahead += tids.len();
        read_ahead(scan, &tids);
    }

    /// The executor took a row (or the scan passed over one).
    pub fn took_one(&mut self) {
        self.ahead = self.ahead.saturating_sub(1);
    }
}

/// Starts the reads of `tids`' heap pages and, for a TOASTed indexed column, of their TOAST
/// pages.
fn read_ahead(scan: pg_sys::IndexScanDesc, tids: &[HeapTid]) {
    // SAFETY: the scan descriptor of a running scan; heapRelation is open for the scan (NULL
    // when the scan was started without a heap, as bitmap scans are).
    let heap = unsafe { (*scan).heapRelation };
    if heap.is_null() || tids.is_empty() {
        return;
    }
    // SAFETY: an open heap relation. A TID past the end (it cannot be one the executor will
    // fetch) is left alone: ReadBuffer would raise an ERROR for it.
    let nblocks =
        unsafe { pg_sys::RelationGetNumberOfBlocksInFork(heap, pg_sys::ForkNumber::MAIN_FORKNUM) };
    let tids: Vec<HeapTid> = tids.iter().copied().filter(|t| t.block < nblocks).collect();
    let mut blocks: Vec<u32> = tids.iter().map(|t| t.block).collect();
    blocks.sort_unstable();
    blocks.dedup();
    let mut not_buffered = 0;
    for &b in &blocks {
        // SAFETY: an existing block of an open relation; PrefetchBuffer only looks it up in
        // shared buffers and, when absent, asks the kernel to read it.
        let r = unsafe { pg_sys::PrefetchBuffer(heap, pg_sys::ForkNumber::MAIN_FORKNUM, b) };
        not_buffered += r.initiated_io as u64;
    }
    count(|c| {
        c.rows += tids.len() as u64;
        c.heap_blocks += blocks.len() as u64;
        c.heap_blocks_not_buffered += not_buffered;
    });
    let Some(column) = toasted_column(scan) else {
        return;
    };
    if !toast_step_due() {
        count(|c| c.toast_steps_skipped += 1);
        return;
    }
    // SAFETY: the scan's snapshot, registered by the executor for the scan's duration.
    let snapshot = unsafe { (*scan).xs_snapshot };
    let pointers: Vec<pg_sys::varatt_external> = tids
        .iter()
        .filter_map(|&tid| toast_pointer(heap, snapshot, tid, column))
        .collect();
    let (blocks, not_buffered) = match pointers.first() {
        Some(first) => prefetch_toast(first.va_toastrelid, &pointers),
        None => (0, 0),
    };
    count(|c| {
        c.toast_values += pointers.len() as u64;
        c.toast_blocks += blocks;
        c.toast_blocks_not_buffered += not_buffered;
    });
    toast_step_done(not_buffered > 0);
}

/// Whether this scan runs the TOAST step (see the module's backoff).
fn toast_step_due() -> bool {
    TOAST_BACKOFF.with(|b| {
        let (skip, backoff) = b.get();
        if skip > 0 {
            b.set((skip - 1, backoff));
            false
        } else {
            true
        }
    })
}

/// Records a TOAST step: `paid` when it started reads. A step that found every page in
/// shared buffers, or no value stored out of line, backs off.
fn toast_step_done(paid: bool) {
    TOAST_BACKOFF.with(|b| {
        if paid {
            b.set((0, 0));
        } else {
            let backoff = (b.get().1 * 2).clamp(1, MAX_TOAST_BACKOFF);
            b.set((backoff, backoff));
        }
    });
}

/// The heap attribute number of the scan's indexed column when its values may be TOASTed:
/// a plain column (not an expression) of a variable-length type whose storage is not PLAIN,
/// in a table with a TOAST relation, outside SERIALIZABLE transactions.
fn toasted_column(scan: pg_sys::IndexScanDesc) -> Option<i16> {
    // SAFETY: the open index and heap relations of a running scan: rd_index, rd_rel and
    // rd_att are set for open relations, indkey has indnatts >= 1 entries, and the heap's
    // tuple descriptor has natts attributes.
    unsafe {
        if pg_sys::XactIsoLevel == pg_sys::XACT_SERIALIZABLE as i32 {
            return None;
        }
        let heap = (*scan).heapRelation;
        if (*(*heap).rd_rel).reltoastrelid == pg_sys::InvalidOid {
            return None;
        }
        let index = (*(*scan).indexRelation).rd_index;
        let attnum = *(*index).indkey.values.as_ptr();
        let desc = (*heap).rd_att;
        if attnum <= 0 || attnum as i32 > (*desc).natts {
            return None;
        }
        let attr = &*(*desc).attrs.as_ptr().add(attnum as usize - 1);
        (attr.attlen == -1 && attr.attstorage != pg_sys::TYPSTORAGE_PLAIN as std::ffi::c_char)
            .then_some(attnum)
    }
}

/// The TOAST pointer of `column` in the row version at `tid` visible to `snapshot`, if the
/// value is stored out of line.
fn toast_pointer(
    heap: pg_sys::Relation,
    snapshot: pg_sys::Snapshot,
    tid: HeapTid,
    column: i16,
) -> Option<pg_sys::varatt_external> {
    // SAFETY: `tid.block` exists (checked against the relation's size); the buffer is pinned
    // and share-locked while heap_hot_search_buffer follows the HOT chain and the attribute
    // is read, and the pointer is copied out before the lock is released.
    unsafe {
        let buffer = pg_sys::ReadBuffer(heap, tid.block);
        pg_sys::LockBuffer(buffer, pg_sys::BUFFER_LOCK_SHARE as i32);
        let mut at = pg_sys::ItemPointerData::default();
        pgrx::itemptr::item_pointer_set_all(&mut at, tid.block, tid.offset);
        let mut tuple = pg_sys::HeapTupleData::default();
        let mut all_dead = false;
        let page = pg_sys::BufferGetPage(buffer) as *const pg_sys::PageHeaderData;
        let max_offset = (((*page).pd_lower as usize)
            .saturating_sub(std::mem::size_of::<pg_sys::PageHeaderData>()))
            / std::mem::size_of::<pg_sys::ItemIdData>();
        let found = tid.offset >= 1
            && tid.offset as usize <= max_offset
            && pg_sys::heap_hot_search_buffer(
                &mut at,
                heap,
                buffer,
                snapshot,
                &mut tuple,
                &mut all_dead,
                true,
            );
        let mut out = None;
        if found {
            let mut isnull = false;
            let datum =
                pg_sys::heap_getattr(&mut tuple, column as i32, (*heap).rd_att, &mut isnull);
            if !isnull {
                let bytes = datum.cast_mut_ptr::<u8>();
                if is_external_on_disk(bytes) {
                    let mut pointer = pg_sys::varatt_external::default();
                    std::ptr::copy_nonoverlapping(
                        bytes.add(2),
                        (&raw mut pointer).cast::<u8>(),
                        std::mem::size_of::<pg_sys::varatt_external>(),
                    );
                    out = Some(pointer);
                }
            }
        }
        pg_sys::UnlockReleaseBuffer(buffer);
        out
    }
}

/// `VARATT_IS_EXTERNAL_ONDISK`: a one-byte external header and the on-disk tag.
///
/// # Safety
/// `bytes` points at a varlena datum of at least two bytes.
unsafe fn is_external_on_disk(bytes: *const u8) -> bool {
    let external_header: u8 = if cfg!(target_endian = "little") {
        0x01
    } else {
        0x80
    };
    // SAFETY: the caller's.
    unsafe {
        *bytes == external_header && *bytes.add(1) == pg_sys::vartag_external::VARTAG_ONDISK as u8
    }
}

/// Starts the reads of the TOAST pages holding `pointers`' chunks, found in the TOAST index
/// (chunk_id = value id) without reading the pages. Returns (pages, pages not in shared
/// buffers).
fn prefetch_toast(toast_oid: pg_sys::Oid, pointers: &[pg_sys::varatt_external]) -> (u64, u64) {
    // SAFETY: the TOAST relation of a table the query holds a lock on, opened and closed with
    // AccessShareLock as detoasting does; its index is read with SnapshotAny for TIDs only
    // (no visibility check, no predicate locks); every object is released before returning.
    unsafe {
        let toast = pg_sys::table_open(toast_oid, pg_sys::AccessShareLock as i32);
        let Some(index) = open_valid_index(toast) else {
            pg_sys::table_close(toast, pg_sys::AccessShareLock as i32);
            return (0, 0);
        };
        let scan = pg_sys::index_beginscan(toast, index, &raw mut pg_sys::SnapshotAnyData, 1, 0);
        let mut key = pg_sys::ScanKeyData::default();
        let (mut blocks, mut not_buffered) = (0, 0);
        for p in pointers.iter().filter(|p| p.va_toastrelid == toast_oid) {
            pg_sys::ScanKeyInit(
                &mut key,
                1,
                pg_sys::BTEqualStrategyNumber as u16,
                pg_sys::Oid::from(pg_sys::F_OIDEQ),
                pg_sys::Datum::from(p.va_valueid),
            );
            pg_sys::index_rescan(scan, &mut key, 1, std::ptr::null_mut(), 0);
            let mut last = pg_sys::InvalidBlockNumber;
            loop {
                let tid =
                    pg_sys::index_getnext_tid(scan, pg_sys::ScanDirection::ForwardScanDirection);
                if tid.is_null() {
                    break;
                }
                let block = pgrx::itemptr::item_pointer_get_block_number(tid);
                if block != last {
                    let r = pg_sys::PrefetchBuffer(toast, pg_sys::ForkNumber::MAIN_FORKNUM, block);
                    blocks += 1;
                    not_buffered += r.initiated_io as u64;
                    last = block;
                }
            }
        }
        pg_sys::index_endscan(scan);
        pg_sys::index_close(index, pg_sys::AccessShareLock as i32);
        pg_sys::table_close(toast, pg_sys::AccessShareLock as i32);
        (blocks, not_buffered)
    }
}

/// The TOAST relation's valid index (a TOAST table has one; a second, invalid one exists
/// while REINDEX CONCURRENTLY runs), opened with AccessShareLock.
///
/// # Safety
/// `toast` is an open relation.
unsafe fn open_valid_index(toast: pg_sys::Relation) -> Option<pg_sys::Relation> {
    // SAFETY: the caller's; RelationGetIndexList returns a palloc'd list of index OIDs.
    unsafe {
        let list = pg_sys::RelationGetIndexList(toast);
        if list.is_null() {
            return None;
        }
        for i in 0..(*list).length as usize {
            let oid = (*(*list).elements.add(i)).oid_value;
            let index = pg_sys::index_open(oid, pg_sys::AccessShareLock as i32);
            if (*(*index).rd_index).indisvalid {
                pg_sys::list_free(list);
                return Some(index);
            }
            pg_sys::index_close(index, pg_sys::AccessShareLock as i32);
        }
        pg_sys::list_free(list);
        None
    }
}

/// This session's read-ahead counters, one row each (cumulative since the session started).
#[pg_extern(volatile, parallel_safe)]
fn navis_read_ahead_stats() -> TableIterator<'static, (name!(name, String), name!(value, i64))> {
    let c = counters();
    let rows = [
        ("rows", c.rows),
        ("heap_blocks", c.heap_blocks),
        ("heap_blocks_not_buffered", c.heap_blocks_not_buffered),
        ("toast_values", c.toast_values),
        ("toast_blocks", c.toast_blocks),
        ("toast_blocks_not_buffered", c.toast_blocks_not_buffered),
        ("toast_steps_skipped", c.toast_steps_skipped),
    ];
    TableIterator::new(
        rows.into_iter()
            .map(|(name, value)| (name.to_string(), value as i64)),
    )
}

pgrx::extension_sql!(
    r#"
CREATE VIEW navis_read_ahead_stats AS SELECT s.name, s.value FROM navis_read_ahead_stats() s;
COMMENT ON VIEW navis_read_ahead_stats IS
    'This session''s read-ahead of the heap and TOAST pages of the rows navis scans return next (*_not_buffered: pages not in shared buffers, whose reads were started)';
GRANT SELECT ON navis_read_ahead_stats TO PUBLIC;
"#,
    name = "navis_read_ahead_stats_view",
    requires = [navis_read_ahead_stats]
);
