//! Redo of navis WAL records (formats in `records.rs`). Runs in the startup process of a
//! recovering server or a standby, outside any transaction: it may only touch pages and
//! shared memory, never the catalog. Every routine is idempotent.

use super::records::{self, RecordType};
use pgrx::pg_sys;
use pgrx::prelude::*;

#[pg_guard]
pub(super) unsafe extern "C-unwind" fn navis_redo(record: *mut pg_sys::XLogReaderState) {
    // SAFETY: PostgreSQL calls redo with the decoded record to replay.
    let (info, data) = unsafe { super::record_info_and_data(record) };
    match RecordType::from_info(info) {
        // SAFETY: a BULK_IMAGES record's block references all carry full images.
        Some(RecordType::BulkImages) => unsafe { redo_bulk_images(record) },
        // SAFETY: the record names the relation in its main data.
        Some(RecordType::Extend) => unsafe { redo_extend(record, data) },
        // SAFETY: a CHANGE record's block references are the buffers its data names.
        Some(RecordType::Change) => unsafe { redo_change(record, data) },
        None => pgrx::error!(
            "navis redo: unknown record type {:#04x}; this WAL was written by a newer navis",
            info & records::XLR_RMGR_INFO_MASK
        ),
    }
}

/// `BULK_IMAGES`: every page restored from its image into its buffer, as for any full-page
/// image. Redo keeps bulk pages in shared_buffers like any other page: PostgreSQL then
/// advances `minRecoveryPoint` when it writes them out, in batches, where writing each page
/// around the buffers would need a control-file update per record (RFC 0001 §5). Readers on a
/// hot standby flush the relation's buffers before they read bulk pages from disk
/// (`open.rs`), and crash recovery ends with a checkpoint.
unsafe fn redo_bulk_images(record: *mut pg_sys::XLogReaderState) {
    // SAFETY: every block reference of the record carries an image, which
    // XLogReadBufferForRedo restores into a pinned, exclusively locked buffer.
    unsafe {
        for r in super::block_refs(record) {
            let mut buf: pg_sys::Buffer = pg_sys::InvalidBuffer as pg_sys::Buffer;
            let action = pg_sys::XLogReadBufferForRedo(record, r.id, &mut buf);
            if action != pg_sys::XLogRedoAction::BLK_RESTORED
                && action != pg_sys::XLogRedoAction::BLK_DONE
            {
                pgrx::error!(
                    "navis redo: BULK_IMAGES block reference {} has no usable image",
                    r.id
                );
            }
            if buf != pg_sys::InvalidBuffer as pg_sys::Buffer {
                pg_sys::UnlockReleaseBuffer(buf);
            }
        }
    }
}

/// `EXTEND`: zero-fill the fork up to the record's last block.
unsafe fn redo_extend(record: *mut pg_sys::XLogReaderState, data: &[u8]) {
    let Some(e) = records::ExtendData::decode(data) else {
        pgrx::error!("navis redo: EXTEND record of {} bytes", data.len());
    };
    // SAFETY: an smgr handle of the named relation; only the startup process writes here.
    unsafe {
        pg_sys::XLogFlush((*record).EndRecPtr);
        let node = pg_sys::RelFileNode {
            spcNode: e.spc.into(),
            dbNode: e.db.into(),
            relNode: e.rel.into(),
        };
        let smgr = pg_sys::smgropen(node, pg_sys::InvalidBackendId);
        pg_sys::smgrcreate(smgr, pg_sys::ForkNumber::MAIN_FORKNUM, true);
        crate::relstore::zero_fill_to(smgr, e.first + e.count);
    }
}

/// `CHANGE`: the engine's page functions on every block reference that needs redo
/// (`change.rs` gives the format).
unsafe fn redo_change(record: *mut pg_sys::XLogReaderState, data: &[u8]) {
    let decoded = match super::change::decode(data) {
        Ok(d) => d,
        Err(e) => pgrx::error!("navis redo: {e}"),
    };
    let refs = super::block_refs(record);
    // A hot standby's backends bring their runtime copies forward by the blocks redo changed
    // (`standby.rs`): announced before any page changes, so a backend that reads a changed
    // page finds its block on its next look; the generation advances after the pages.
    let changes = match (crate::shmem::shared(), refs.first()) {
        (Some(shared), Some(r)) => Some(shared.redo_changes(&r.node)),
        _ => None,
    };
    if let Some(changes) = changes {
        let blocks: Vec<u32> = refs.iter().map(|r| r.block).collect();
        changes.announce(&blocks);
    }
    // SAFETY: each block reference is read (or restored from its image) into a pinned,
    // exclusively locked buffer by XLogReadBufferForRedo and released here; the page is
    // BLCKSZ bytes.
    unsafe {
        let lsn = (*record).EndRecPtr;
        for &r in &refs {
            let Some(&at) = decoded.refs.get(r.id as usize) else {
                pgrx::error!(
                    "navis redo: CHANGE block reference {} is not in its data",
                    r.id
                );
            };
            let mut buf: pg_sys::Buffer = pg_sys::InvalidBuffer as pg_sys::Buffer;
            let action = pg_sys::XLogReadBufferForRedo(record, r.id, &mut buf);
            if action == pg_sys::XLogRedoAction::BLK_NEEDS_REDO {
                let page = pg_sys::BufferGetPage(buf);
                let bytes =
                    std::slice::from_raw_parts_mut(page as *mut u8, pg_sys::BLCKSZ as usize);
                let applied = decoded.with_change(|change| {
                    navis_engine::relation::apply::apply(
                        &decoded.geometry,
                        change,
                        bytes,
                        at,
                        r.block,
                    )
                });
                if let Err(e) = applied {
                    pgrx::error!("navis redo: CHANGE on block {}: {e}", r.block);
                }
                super::page_set_lsn(page, lsn);
                pg_sys::MarkBufferDirty(buf);
            }
            if buf != pg_sys::InvalidBuffer as pg_sys::Buffer {
                pg_sys::UnlockReleaseBuffer(buf);
            }
        }
    }
    if let Some(changes) = changes {
        changes.advance();
    }
}
