//! navis's WAL resource manager (RFC 0001 §4–§5): registration, the records the primary
//! writes, and their redo. Record formats are documented in [`records`]; redo is in
//! [`redo`]. Records are inserted here and by the page stores that log what they write
//! (`relstore` for bulk pages, `pglog` for the changes of an open index).
//!
//! The resource manager exists only when navis is in `shared_preload_libraries`
//! (`RegisterCustomRmgr` is allowed only then). Every server that replays navis WAL (crash
//! recovery, a standby, a PITR restore) must preload navis; PostgreSQL stops replay with
//! "resource manager with ID 128 not registered" otherwise. The writes that need the rmgr
//! (CREATE INDEX and everything after it) already refuse to run without the preload.

pub mod change;
pub mod records;
mod redo;

use pgrx::pg_sys;
use pgrx::prelude::*;
use records::RecordType;

/// The custom resource-manager id. 128 is PostgreSQL's `RM_EXPERIMENTAL_ID`; a registered id
/// from the wiki's "CustomWALResourceManagers" page replaces it before the first release
/// (RFC 0001 §8), which changes nothing else here.
pub const RM_NAVIS_ID: u8 = 128;

/// `InvalidSubTransactionId`, which the bindings do not export.
const INVALID_SUBXACT: pg_sys::SubTransactionId = 0;

// SAFETY (for the static): PostgreSQL keeps the pointer and only reads the table; nothing
// writes it after initialisation.
static mut NAVIS_RMGR: pg_sys::RmgrData = pg_sys::RmgrData {
    rm_name: c"navis".as_ptr(),
    rm_redo: Some(redo::navis_redo),
    rm_desc: Some(navis_desc),
    rm_identify: Some(navis_identify),
    rm_startup: None,
    rm_cleanup: None,
    rm_mask: None,
    rm_decode: None,
};

/// Registers the resource manager. Called from `_PG_init`; does nothing unless the library
/// is being preloaded, the only time PostgreSQL accepts a custom rmgr.
pub fn register() {
    // SAFETY: `_PG_init` runs single-threaded; RegisterCustomRmgr copies nothing and keeps
    // the pointer to the static table, which lives as long as the library.
    unsafe {
        if !pg_sys::process_shared_preload_libraries_in_progress {
            return;
        }
        pg_sys::RegisterCustomRmgr(RM_NAVIS_ID, std::ptr::addr_of_mut!(NAVIS_RMGR));
    }
}

/// `RelationNeedsWAL`: a permanent relation, unless `wal_level = minimal` and the relfilenode
/// is new in this transaction (PostgreSQL then fsyncs it at commit instead).
pub fn relation_needs_wal(rel: pg_sys::Relation) -> bool {
    // SAFETY: `rel` is an open relation; the fields read are plain relcache data.
    unsafe {
        let permanent = (*(*rel).rd_rel).relpersistence == pg_sys::RELPERSISTENCE_PERMANENT as i8;
        let wal_needed = pg_sys::wal_level >= pg_sys::WalLevel::WAL_LEVEL_REPLICA as i32;
        permanent
            && (wal_needed
                || ((*rel).rd_createSubid == INVALID_SUBXACT
                    && (*rel).rd_firstRelfilenodeSubid == INVALID_SUBXACT))
    }
}

/// Sets `pd_lsn` (PostgreSQL's `PageSetLSN`).
///
/// # Safety
/// `page` must point at a page PostgreSQL laid out (a locked buffer's page).
pub unsafe fn page_set_lsn(page: pg_sys::Page, lsn: pg_sys::XLogRecPtr) {
    // SAFETY: per the function's contract the page starts with a PageHeaderData.
    unsafe {
        let header = page as *mut pg_sys::PageHeaderData;
        (*header).pd_lsn.xlogid = (lsn >> 32) as u32;
        (*header).pd_lsn.xrecoff = lsn as u32;
    }
}

/// The record's `xl_info` byte and main data.
///
/// # Safety
/// `record` must be the reader state PostgreSQL passes to an rmgr callback, positioned on a
/// decoded record.
pub(crate) unsafe fn record_info_and_data<'a>(
    record: *mut pg_sys::XLogReaderState,
) -> (u8, &'a [u8]) {
    // SAFETY: XLogRecGetInfo / XLogRecGetData / XLogRecGetDataLen, spelled out: the decoded
    // record stays valid for the duration of the callback that borrows it.
    unsafe {
        let decoded = (*record).record;
        let info = (*decoded).header.xl_info;
        let len = (*decoded).main_data_len as usize;
        let data = if len == 0 {
            &[][..]
        } else {
            std::slice::from_raw_parts((*decoded).main_data as *const u8, len)
        };
        (info, data)
    }
}

/// One block reference of a record: its relation, fork and block.
#[derive(Clone, Copy)]
pub(crate) struct BlockRef {
    pub id: u8,
    pub node: pg_sys::RelFileNode,
    pub fork: pg_sys::ForkNumber::Type,
    pub block: pg_sys::BlockNumber,
}

/// The record's block references in id order.
///
/// # Safety
/// As for [`record_info_and_data`].
pub(crate) unsafe fn block_refs(record: *mut pg_sys::XLogReaderState) -> Vec<BlockRef> {
    // SAFETY: XLogRecMaxBlockId and XLogRecGetBlockTagExtended on the decoded record; ids
    // that are not in use return false and are skipped.
    unsafe {
        let max = (*(*record).record).max_block_id;
        let mut refs = Vec::new();
        for id in 0..=max.max(-1) {
            let mut r = BlockRef {
                id: id as u8,
                node: pg_sys::RelFileNode::default(),
                fork: pg_sys::ForkNumber::MAIN_FORKNUM,
                block: 0,
            };
            if pg_sys::XLogRecGetBlockTagExtended(
                record,
                id as u8,
                &mut r.node,
                &mut r.fork,
                &mut r.block,
                std::ptr::null_mut(),
            ) {
                refs.push(r);
            }
        }
        refs
    }
}

/// (first block, count) when the references are consecutive blocks of one fork.
fn consecutive_blocks(refs: &[BlockRef]) -> Option<(u32, usize)> {
    let first = refs.first()?;
    refs.iter()
        .enumerate()
        .all(|(i, r)| r.block == first.block + i as u32 && r.fork == first.fork)
        .then_some((first.block, refs.len()))
}

#[pg_guard]
unsafe extern "C-unwind" fn navis_desc(
    buf: pg_sys::StringInfo,
    record: *mut pg_sys::XLogReaderState,
) {
    // SAFETY: PostgreSQL passes a valid StringInfo and the decoded record being described.
    unsafe {
        let (info, data) = record_info_and_data(record);
        let blocks = consecutive_blocks(&block_refs(record));
        let text = records::describe(info, data, blocks);
        let text = std::ffi::CString::new(text).unwrap_or_default();
        pg_sys::appendStringInfoString(buf, text.as_ptr());
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn navis_identify(info: u8) -> *const std::ffi::c_char {
    match RecordType::from_info(info) {
        Some(t) => t.identify().as_ptr(),
        None => std::ptr::null(),
    }
}
