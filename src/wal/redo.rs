//! Redo of navis WAL records (formats in `records.rs`). Runs in the startup process of a
//! recovering server or a standby, outside any transaction: it may only touch pages and
//! shared memory, never the catalog. Every routine is idempotent.

use super::records::{self, RecordType};
use pgrx::pg_sys;
use pgrx::prelude::*;

/// Lays out a metapage: `PageInit`, the contents behind the header, `pd_lower` after them.
///
/// # Safety
/// `page` must be an exclusively locked buffer's page.
pub(super) unsafe fn fill_metapage(page: pg_sys::Page, contents: &[u8]) {
    // SAFETY: the page is BLCKSZ bytes and the contents (96 bytes) fit behind the header.
    unsafe {
        pg_sys::PageInit(page, pg_sys::BLCKSZ as usize, 0);
        let header_len = std::mem::size_of::<pg_sys::PageHeaderData>();
        let dst = (page as *mut u8).add(header_len);
        std::ptr::copy_nonoverlapping(contents.as_ptr(), dst, contents.len());
        let header = page as *mut pg_sys::PageHeaderData;
        (*header).pd_lower = (header_len + contents.len()) as u16;
    }
}

#[pg_guard]
pub(super) unsafe extern "C-unwind" fn navis_redo(record: *mut pg_sys::XLogReaderState) {
    // SAFETY: PostgreSQL calls redo with the decoded record to replay.
    let (info, data) = unsafe { super::record_info_and_data(record) };
    match RecordType::from_info(info) {
        // SAFETY: a META record always carries block reference 0, the metapage.
        Some(RecordType::Meta) => unsafe { redo_meta(record, data) },
        None => pgrx::error!(
            "navis redo: unknown record type {:#04x}; this WAL was written by a newer navis",
            info & records::XLR_RMGR_INFO_MASK
        ),
    }
}

/// `META`: rebuild block 0 from the record (registered `REGBUF_WILL_INIT`, so the page is
/// zeroed and locked for us whatever its state on disk).
unsafe fn redo_meta(record: *mut pg_sys::XLogReaderState, data: &[u8]) {
    if data.len() != records::META_IMAGE_LEN {
        pgrx::error!(
            "navis redo: META record of {} bytes, expected {}",
            data.len(),
            records::META_IMAGE_LEN
        );
    }
    // SAFETY: XLogInitBufferForRedo returns block 0 zeroed, pinned and exclusively locked;
    // it is released below after the page is stamped with the record's end LSN.
    unsafe {
        let buf = pg_sys::XLogInitBufferForRedo(record, 0);
        let page = pg_sys::BufferGetPage(buf);
        fill_metapage(page, data);
        super::page_set_lsn(page, (*record).EndRecPtr);
        pg_sys::MarkBufferDirty(buf);
        pg_sys::UnlockReleaseBuffer(buf);
    }
}
