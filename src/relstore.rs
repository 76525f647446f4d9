//! The index's main fork as navis's page store (RFC 0001 §2 and §5): bulk pages written
//! through smgr with WAL, never through shared_buffers, and the paths of the fork's 1 GiB
//! segment files that the engine reads them from with O_DIRECT.
//!
//! Why not the buffer manager: edge and vector pages are read with O_DIRECT and io_uring in
//! batches per search hop, with NAVIS-Cache in front. A copy in shared_buffers would double
//! the caching and, worse, could be written back over a newer smgr write. So a bulk block is
//! never read into shared_buffers, and navis does for it what `bufmgr` does for a buffer:
//! WAL first, `pd_lsn` set to the record, checksum, write with an fsync request, all inside
//! `DELAY_CHKPT_START` so no checkpoint can complete between the record and the write.

use crate::wal;
use pgrx::pg_sys;
use std::path::PathBuf;

/// Bytes per block (PostgreSQL's BLCKSZ).
pub const BLOCK_SIZE: usize = pg_sys::BLCKSZ as usize;
/// Blocks per segment file (PostgreSQL's RELSEG_SIZE: 1 GiB of 8 KiB blocks).
pub const SEGMENT_BLOCKS: u32 = pg_sys::RELSEG_SIZE;
/// Pages per bulk record: `XLR_MAX_BLOCK_ID + 1` block references, as `log_newpage_range`.
pub const PAGES_PER_RECORD: usize = 32;

/// Path of segment `segment` of the main fork, relative to the data directory (the backend's
/// working directory): `base/16384/16390`, then `base/16384/16390.1`, ...
pub fn segment_path(rel: pg_sys::Relation, segment: u32) -> PathBuf {
    // SAFETY: `rel` is an open relation; GetRelationPath returns a palloc'd C string that is
    // copied before being freed.
    let base = unsafe {
        let node = (*rel).rd_node;
        let p = pg_sys::GetRelationPath(
            node.dbNode,
            node.spcNode,
            node.relNode,
            (*rel).rd_backend,
            pg_sys::ForkNumber::MAIN_FORKNUM,
        );
        let s = std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned();
        pg_sys::pfree(p.cast());
        s
    };
    if segment == 0 {
        PathBuf::from(base)
    } else {
        PathBuf::from(format!("{base}.{segment}"))
    }
}

// The engine lays out pages and segments for exactly this server build.
const _: () = assert!(BLOCK_SIZE == navis_engine::pages::BLOCK_SIZE);
const _: () = assert!(SEGMENT_BLOCKS == navis_engine::store::RELSEG_BLOCKS);

/// The segment file holding `block` and the byte offset of the block in it.
#[cfg_attr(not(any(test, feature = "pg_test")), allow(dead_code))]
pub fn block_location(block: u32) -> (u32, u64) {
    navis_engine::store::segment_of(block)
}

/// Blocks in the main fork.
/// The relation extension lock of an index, held until dropped: it serialises every change
/// of the layout (appends, extent-map growth, a rebuild's switch of block 0) and the opens
/// that read the layout (open.rs). On ERROR the transaction's lock cleanup releases it
/// instead (the guard does not call PostgreSQL while unwinding).
pub struct ExtensionLock(pg_sys::Relation);

impl ExtensionLock {
    pub fn take(rel: pg_sys::Relation) -> ExtensionLock {
        // SAFETY: an open relation; the extension lock is a heavyweight lock that
        // transaction abort releases.
        unsafe { pg_sys::LockRelationForExtension(rel, pg_sys::ExclusiveLock as i32) };
        ExtensionLock(rel)
    }
}

impl Drop for ExtensionLock {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            // SAFETY: taken in `take` by this backend and not released since.
            unsafe { pg_sys::UnlockRelationForExtension(self.0, pg_sys::ExclusiveLock as i32) };
        }
    }
}

pub fn nblocks(rel: pg_sys::Relation) -> u32 {
    // SAFETY: `rel` is open; smgrnblocks asks the storage manager (cached per relation).
    unsafe {
        pg_sys::smgrnblocks(
            pg_sys::RelationGetSmgr(rel),
            pg_sys::ForkNumber::MAIN_FORKNUM,
        )
    }
}

/// Appends `pages` (each `BLOCK_SIZE` bytes, laid out as PostgreSQL pages with `pd_lower`
/// marking the end of their data) at the end of the main fork, WAL-logged as `BULK_IMAGES`
/// records of up to [`PAGES_PER_RECORD`] pages, and returns the first new block. The pages
/// are stamped with their record's LSN and checksum in place.
#[cfg_attr(not(any(test, feature = "pg_test")), allow(dead_code))]
pub fn append_bulk_pages(rel: pg_sys::Relation, pages: &mut [u8]) -> u32 {
    // The extension lock serialises appends with every other extender of this fork.
    let _extension = ExtensionLock::take(rel);
    let first = nblocks(rel);
    write_bulk_pages(rel, first, pages);
    first
}

/// Writes `pages` as the consecutive blocks from `first` (existing blocks are overwritten, the
/// rest appended; `first` must not lie beyond the end), WAL-logged as `BULK_IMAGES` records of
/// up to [`PAGES_PER_RECORD`] pages, stamping each page's LSN and checksum in place. Only for
/// blocks no other backend can reach and that are never read into shared_buffers: a build's
/// pages, or bulk pages handed out by the allocator (RFC 0001 §5).
pub fn write_bulk_pages(rel: pg_sys::Relation, first: u32, pages: &mut [u8]) {
    assert_eq!(pages.len() % BLOCK_SIZE, 0, "bulk pages are whole blocks");
    assert!(
        first <= nblocks(rel),
        "bulk write at block {first} leaves a gap"
    );
    let needs_wal = wal::relation_needs_wal(rel);
    for (chunk_no, chunk) in pages.chunks_mut(BLOCK_SIZE * PAGES_PER_RECORD).enumerate() {
        let chunk_first = first + (chunk_no * PAGES_PER_RECORD) as u32;
        // SAFETY: see write_logged; the caller owns the blocks.
        unsafe { write_logged(rel, chunk_first, chunk, needs_wal) };
    }
}

/// Logs `pages` (consecutive blocks from `first`) in one `BULK_IMAGES` record and writes
/// them (RFC 0001 §5): flag the checkpoint delay, insert the record, stamp LSN and checksum,
/// write or extend through smgr with an fsync request, clear the flag.
///
/// # Safety
/// `rel` must be open with the blocks reserved to the caller (extension lock, or a slot the
/// allocator handed out); at most [`PAGES_PER_RECORD`] pages.
unsafe fn write_logged(rel: pg_sys::Relation, first: u32, pages: &mut [u8], needs_wal: bool) {
    let n = pages.len() / BLOCK_SIZE;
    debug_assert!((1..=PAGES_PER_RECORD).contains(&n));
    // SAFETY: XLogEnsureRecordSpace must run outside a critical section; the rest follows
    // PostgreSQL's own protocol for non-buffered writes (log_newpage + smgr, as a sorted
    // nbtree build does) with DELAY_CHKPT_START covering the window between the record and
    // the write. MyProc is this backend's PGPROC.
    unsafe {
        let smgr = pg_sys::RelationGetSmgr(rel);
        if needs_wal {
            pg_sys::XLogEnsureRecordSpace(PAGES_PER_RECORD as i32 - 1, 0);
            (*pg_sys::MyProc).delayChkptFlags |= pg_sys::DELAY_CHKPT_START as i32;
        }
        // An ERROR between here and the write (an I/O error) must not leave the flag set, or
        // every later checkpoint would wait for this backend forever.
        let pages = std::panic::AssertUnwindSafe(pages);
        pgrx::PgTryBuilder::new(move || {
            let pages = pages;
            let pages: &mut [u8] = pages.0;
            log_and_write(rel, smgr, first, n, pages, needs_wal)
        })
        .finally(|| {
            if needs_wal {
                (*pg_sys::MyProc).delayChkptFlags &= !(pg_sys::DELAY_CHKPT_START as i32);
            }
        })
        .execute();
    }
}

/// The body of [`write_logged`] inside its checkpoint-delay window.
///
/// # Safety
/// As for [`write_logged`]; called only from it.
unsafe fn log_and_write(
    rel: pg_sys::Relation,
    smgr: pg_sys::SMgrRelation,
    first: u32,
    n: usize,
    pages: &mut [u8],
    needs_wal: bool,
) {
    // SAFETY: see write_logged.
    unsafe {
        if needs_wal {
            pg_sys::XLogBeginInsert();
            let mut node = (*rel).rd_node;
            for i in 0..n {
                let page = pages[i * BLOCK_SIZE..].as_mut_ptr();
                pg_sys::XLogRegisterBlock(
                    i as u8,
                    &mut node,
                    pg_sys::ForkNumber::MAIN_FORKNUM,
                    first + i as u32,
                    page.cast(),
                    (pg_sys::REGBUF_FORCE_IMAGE | pg_sys::REGBUF_STANDARD) as u8,
                );
            }
            let lsn = pg_sys::XLogInsert(wal::RM_NAVIS_ID, wal::records::XLOG_NAVIS_BULK_IMAGES);
            for i in 0..n {
                wal::page_set_lsn(pages[i * BLOCK_SIZE..].as_mut_ptr().cast(), lsn);
            }
        }
        let end = pg_sys::smgrnblocks(smgr, pg_sys::ForkNumber::MAIN_FORKNUM);
        for i in 0..n {
            let block = first + i as u32;
            let page = pages[i * BLOCK_SIZE..].as_mut_ptr();
            pg_sys::PageSetChecksumInplace(page.cast(), block);
            if block < end {
                pg_sys::smgrwrite(
                    smgr,
                    pg_sys::ForkNumber::MAIN_FORKNUM,
                    block,
                    page.cast(),
                    false,
                );
            } else {
                pg_sys::smgrextend(
                    smgr,
                    pg_sys::ForkNumber::MAIN_FORKNUM,
                    block,
                    page.cast(),
                    false,
                );
            }
        }
    }
}

/// One block-aligned page buffer (O_DIRECT needs the alignment; smgr does not mind it).
#[repr(C, align(4096))]
pub struct AlignedBlock([u8; BLOCK_SIZE]);

impl AlignedBlock {
    pub fn zeroed() -> Box<AlignedBlock> {
        Box::new(AlignedBlock([0; BLOCK_SIZE]))
    }

    pub fn as_mut_ptr(&mut self) -> *mut std::ffi::c_char {
        self.0.as_mut_ptr().cast()
    }

    #[cfg_attr(not(any(test, feature = "pg_test")), allow(dead_code))]
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

/// Stamps the checksum and writes `page` as `block`, extending the fork with zero pages up
/// to it when it lies beyond the end (as `XLogReadBufferExtended` does in redo).
///
/// # Safety
/// `smgr` must be an open smgr relation whose `fork` exists; `page` is `BLOCK_SIZE` bytes.
pub unsafe fn write_block_at(
    smgr: pg_sys::SMgrRelation,
    fork: pg_sys::ForkNumber::Type,
    block: u32,
    page: *mut std::ffi::c_char,
) {
    // SAFETY: per the contract; zero pages are valid "new" pages to PostgreSQL. A buffer of
    // the block (see existing_buffer) gets the same bytes under its exclusive lock, held
    // across the write so that no flush of its older bytes can follow ours.
    unsafe {
        pg_sys::PageSetChecksumInplace(page.cast(), block);
        let mut end = pg_sys::smgrnblocks(smgr, fork);
        if block < end {
            let buffered = existing_buffer((*smgr).smgr_rnode.node, fork, block);
            if let Some(buf) = buffered {
                pg_sys::LockBuffer(buf, pg_sys::BUFFER_LOCK_EXCLUSIVE as i32);
                let dst = pg_sys::BufferGetPage(buf) as *mut u8;
                std::ptr::copy_nonoverlapping(page as *const u8, dst, BLOCK_SIZE);
                pg_sys::MarkBufferDirty(buf);
            }
            pg_sys::smgrwrite(smgr, fork, block, page, false);
            if let Some(buf) = buffered {
                pg_sys::UnlockReleaseBuffer(buf);
            }
            return;
        }
        let mut zero = AlignedBlock::zeroed();
        while end < block {
            pg_sys::smgrextend(smgr, fork, end, zero.as_mut_ptr(), false);
            end += 1;
        }
        pg_sys::smgrextend(smgr, fork, block, page, false);
    }
}

/// Extends `smgr`'s main fork with zero pages until it has `blocks` blocks.
///
/// # Safety
/// `smgr` must be an open smgr relation whose main fork exists.
pub unsafe fn zero_fill_to(smgr: pg_sys::SMgrRelation, blocks: u32) {
    // SAFETY: per the contract; zero pages are valid new pages.
    unsafe {
        let fork = pg_sys::ForkNumber::MAIN_FORKNUM;
        let mut end = pg_sys::smgrnblocks(smgr, fork);
        let mut zero = AlignedBlock::zeroed();
        while end < blocks {
            pg_sys::smgrextend(smgr, fork, end, zero.as_mut_ptr(), false);
            end += 1;
        }
    }
}

/// Extends `rel`'s main fork with zero pages up to `blocks` blocks, WAL-logged as one
/// `EXTEND` record first (inside the checkpoint delay, as bulk writes are), so that every
/// server replaying the WAL has the blocks too.
pub fn extend_zeroed(rel: pg_sys::Relation, blocks: u32) {
    let end = nblocks(rel);
    if blocks <= end {
        return;
    }
    let needs_wal = wal::relation_needs_wal(rel);
    // SAFETY: the caller owns the blocks past the end (a build's private relation, or the
    // extension lock); the flag is cleared whatever happens.
    unsafe {
        let smgr = pg_sys::RelationGetSmgr(rel);
        if !needs_wal {
            zero_fill_to(smgr, blocks);
            return;
        }
        let node = (*rel).rd_node;
        let data = wal::records::ExtendData {
            spc: node.spcNode.into(),
            db: node.dbNode.into(),
            rel: node.relNode.into(),
            first: end,
            count: blocks - end,
        }
        .encode();
        (*pg_sys::MyProc).delayChkptFlags |= pg_sys::DELAY_CHKPT_START as i32;
        pgrx::PgTryBuilder::new(|| {
            pg_sys::XLogBeginInsert();
            pg_sys::XLogRegisterData(data.as_ptr() as *mut std::ffi::c_char, data.len() as i32);
            pg_sys::XLogInsert(wal::RM_NAVIS_ID, wal::records::XLOG_NAVIS_EXTEND);
            zero_fill_to(smgr, blocks);
        })
        .finally(|| {
            (*pg_sys::MyProc).delayChkptFlags &= !(pg_sys::DELAY_CHKPT_START as i32);
        })
        .execute();
    }
}

/// Reads block `block` of the main fork for a bulk page: with `smgrread`, around
/// shared_buffers, unless a buffer holds the block (see [`existing_buffer`]), whose copy is
/// then the newest.
pub fn read_block(rel: pg_sys::Relation, block: u32, out: &mut [u8]) {
    assert_eq!(out.len(), BLOCK_SIZE);
    // SAFETY: `rel` is open; `out` is BLCKSZ bytes; smgrread raises an ERROR for a block past
    // the end; a found buffer is pinned and share-locked while it is copied.
    unsafe {
        let smgr = pg_sys::RelationGetSmgr(rel);
        read_bulk_block(
            smgr,
            pg_sys::ForkNumber::MAIN_FORKNUM,
            block,
            out.as_mut_ptr().cast(),
        );
    }
}

/// Writes `block`'s shared buffer out if one holds it and it is dirty, so that reads of the
/// fork around shared_buffers (searches on a hot standby, where redo leaves bulk pages in
/// buffers) see it. `FlushOneBuffer` flushes WAL (on a standby: advances
/// `minRecoveryPoint`) first, as any buffer write does.
pub fn flush_block(rel: pg_sys::Relation, block: u32) {
    // SAFETY: `rel` is open; a found buffer is pinned by existing_buffer and share-locked
    // while it is written, as FlushOneBuffer requires.
    unsafe {
        let node = (*rel).rd_node;
        if let Some(buf) = existing_buffer(node, pg_sys::ForkNumber::MAIN_FORKNUM, block) {
            pg_sys::LockBuffer(buf, pg_sys::BUFFER_LOCK_SHARE as i32);
            pg_sys::FlushOneBuffer(buf);
            pg_sys::UnlockReleaseBuffer(buf);
        }
    }
}

/// [`read_block`] on an smgr relation (redo has no relcache entry).
///
/// # Safety
/// `smgr` must be open and `out` point at `BLOCK_SIZE` writable bytes.
pub unsafe fn read_bulk_block(
    smgr: pg_sys::SMgrRelation,
    fork: pg_sys::ForkNumber::Type,
    block: u32,
    out: *mut std::ffi::c_char,
) {
    // SAFETY: per the contract; the buffer, if any, is pinned by existing_buffer.
    unsafe {
        match existing_buffer((*smgr).smgr_rnode.node, fork, block) {
            Some(buf) => {
                pg_sys::LockBuffer(buf, pg_sys::BUFFER_LOCK_SHARE as i32);
                let page = pg_sys::BufferGetPage(buf) as *const u8;
                std::ptr::copy_nonoverlapping(page, out.cast(), BLOCK_SIZE);
                pg_sys::UnlockReleaseBuffer(buf);
            }
            None => pg_sys::smgrread(smgr, fork, block, out),
        }
    }
}

/// The shared buffer holding `block`, pinned, if there is one. navis never reads bulk pages
/// into shared_buffers, but PostgreSQL may: `CREATE DATABASE ... STRATEGY wal_log` copies
/// every page through buffers (and a standby replays that copy's full-page images into
/// buffers), and at `wal_level = minimal` the commit of a new relfilenode may log its pages
/// from buffers. Such a buffer can be dirty, so it must see every later write of its block
/// (or its flush would undo that write) and is the newest copy to read.
fn existing_buffer(
    node: pg_sys::RelFileNode,
    fork: pg_sys::ForkNumber::Type,
    block: u32,
) -> Option<pg_sys::Buffer> {
    let mut tag = pg_sys::BufferTag {
        rnode: node,
        forkNum: fork,
        blockNum: block,
    };
    // SAFETY: the buffer mapping table is looked up under its partition lock in shared mode,
    // as bufmgr does; ReadRecentBuffer then pins the buffer only if it still holds the tag.
    unsafe {
        let hash = pg_sys::BufTableHashCode(&mut tag);
        let partition = pg_sys::BUFFER_MAPPING_LWLOCK_OFFSET as usize
            + (hash % pg_sys::NUM_BUFFER_PARTITIONS) as usize;
        let lock = &raw mut (*pg_sys::MainLWLockArray.add(partition)).lock;
        pg_sys::LWLockAcquire(lock, pg_sys::LWLockMode::LW_SHARED);
        let id = pg_sys::BufTableLookup(&mut tag, hash);
        pg_sys::LWLockRelease(lock);
        if id < 0 {
            return None;
        }
        let buf = id + 1;
        pg_sys::ReadRecentBuffer(node, fork, block, buf).then_some(buf)
    }
}
