//! Redo of navis WAL records (formats in `records.rs`). Runs in the startup process of a
//! recovering server or a standby, outside any transaction: it may only touch pages and
//! shared memory, never the catalog. Every routine is idempotent.

use super::records::{self, RecordType};
use navis_engine::pages::PageKind;
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

/// `BULK_IMAGES`: write every page image around the buffer manager, as the primary did
/// (records.rs gives the steps and why they are safe).
unsafe fn redo_bulk_images(record: *mut pg_sys::XLogReaderState) {
    let mut page = crate::relstore::AlignedBlock::zeroed();
    // SAFETY: each reference is restored into our own aligned block and written through an
    // smgr handle of the referenced relation; the startup process is the only writer.
    unsafe {
        let lsn = (*record).EndRecPtr;
        // Advance minRecoveryPoint before any page newer than it reaches disk.
        pg_sys::XLogFlush(lsn);
        for r in super::block_refs(record) {
            if !pg_sys::RestoreBlockImage(record, r.id, page.as_mut_ptr()) {
                pgrx::error!(
                    "navis redo: BULK_IMAGES block reference {} has no usable image",
                    r.id
                );
            }
            super::page_set_lsn(page.as_mut_ptr().cast(), lsn);
            let smgr = pg_sys::smgropen(r.node, pg_sys::InvalidBackendId);
            pg_sys::smgrcreate(smgr, r.fork, true);
            crate::relstore::write_block_at(smgr, r.fork, r.block, page.as_mut_ptr());
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
            if matches!(at.kind, PageKind::Edge | PageKind::Vector) {
                redo_bulk_block(record, r, at, &decoded, lsn);
                continue;
            }
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
    // A hot standby's runtime copies of this index no longer match its pages: the next scan
    // makes a new one (`open.rs`). After the pages, so a copy made from them counts as stale
    // until it includes this change.
    if let (Some(shared), Some(r)) = (crate::shmem::shared(), refs.first()) {
        shared.bump_index_generation(&r.node);
    }
}

/// A bulk page of a `CHANGE` record, never in shared_buffers: its image when the record has
/// one (always for an edge page: the page after the change), else the page on disk with the
/// change applied unless its LSN says it has it; then stamped, flushed past (advancing
/// `minRecoveryPoint`, as for `BULK_IMAGES`) and written with smgr.
///
/// # Safety
/// `record` is the record being replayed and `r` one of its block references.
unsafe fn redo_bulk_block(
    record: *mut pg_sys::XLogReaderState,
    r: super::BlockRef,
    at: navis_engine::relation::apply::PageRef,
    decoded: &super::change::Decoded,
    lsn: pg_sys::XLogRecPtr,
) {
    let mut page = crate::relstore::AlignedBlock::zeroed();
    // SAFETY: the decoded record outlives this call; the block is read into and written
    // from our own aligned block through an smgr handle of the referenced relation, and the
    // startup process is the only writer.
    unsafe {
        let blocks = (*(*record).record).blocks.as_ptr();
        let has_image = (*blocks.add(r.id as usize)).has_image;
        let smgr = pg_sys::smgropen(r.node, pg_sys::InvalidBackendId);
        pg_sys::smgrcreate(smgr, r.fork, true);
        if has_image {
            if !pg_sys::RestoreBlockImage(record, r.id, page.as_mut_ptr()) {
                pgrx::error!(
                    "navis redo: CHANGE block reference {} has no usable image",
                    r.id
                );
            }
        } else {
            if r.block < pg_sys::smgrnblocks(smgr, r.fork) {
                crate::relstore::read_bulk_block(smgr, r.fork, r.block, page.as_mut_ptr());
            }
            let bytes = page.bytes_mut();
            if !navis_engine::pages::is_new(bytes) && navis_engine::pages::lsn(bytes) >= lsn {
                return; // the page has this change already
            }
            let applied = decoded.with_change(|change| {
                navis_engine::relation::apply::apply(&decoded.geometry, change, bytes, at, r.block)
            });
            if let Err(e) = applied {
                pgrx::error!("navis redo: CHANGE on bulk block {}: {e}", r.block);
            }
        }
        super::page_set_lsn(page.as_mut_ptr().cast(), lsn);
        pg_sys::XLogFlush(lsn);
        crate::relstore::write_block_at(smgr, r.fork, r.block, page.as_mut_ptr());
    }
}
