//! navis WAL record formats (RFC 0001 §4). Each record type is documented here, beside the
//! code that encodes and decodes it, as nbtree's `nbtxlog.h` does for its records.
//!
//! The record type is the high nibble of `xl_info` (the low nibble belongs to the WAL
//! machinery, `XLR_INFO_MASK`). All integers are little-endian; formats never change in
//! place: a new layout gets a new record type.
//!
//! Type 0x00 is retired (the metapage of the side-file layout, before RFC 0001 stage 3):
//! the metapage is now an engine page like the others, written by the build's `BULK_IMAGES`.
//!
//! ## `EXTEND` (0x10): zero pages at the end of the main fork
//!
//! Written by `relstore::extend_zeroed` when blocks are reserved (an extent-map run) but not
//! all written, so that every server's fork has the blocks the extent map names. No block
//! references. Main data ([`ExtendData`], 20 bytes): tablespace, database and relfilenode
//! (u32 each), first block, block count. Redo: `smgrextend` zero pages until the fork has
//! `first + count` blocks (idempotent: blocks that exist are left alone).
//!
//! ## `BULK_IMAGES` (0x20): whole bulk pages, written around the buffer manager
//!
//! Written by `relstore::append_bulk_pages` for pages that are never in shared_buffers (edge
//! and vector pages, RFC 0001 §2). No main data. Block references 0..n-1 (n ≤ 32), one per
//! page, each registered with `XLogRegisterBlock(..., REGBUF_FORCE_IMAGE | REGBUF_STANDARD)`:
//! a full-page image without the hole between `pd_lower` and `pd_upper` (the unused tail of the
//! payload), so `pg_waldump` shows the relation and block of every page, `wal_compression`
//! applies and `pg_rewind` sees the changed blocks.
//!
//! Redo, for each reference: `XLogReadBufferForRedo` restores the image into its buffer, as for
//! any full-page image (`redo.rs` says why bulk pages stay in shared_buffers during redo, and
//! how hot-standby readers, which read bulk pages from the fork, get them written out first).
//! Applied unconditionally: the image is the whole page, so replay repairs a torn write.

/// `xl_info` high nibble of a zero-extension record.
pub const XLOG_NAVIS_EXTEND: u8 = 0x10;
/// `xl_info` high nibble of a bulk-page record.
pub const XLOG_NAVIS_BULK_IMAGES: u8 = 0x20;

/// `xl_info` high nibble of a change record (`change.rs` documents it).
pub use super::change::XLOG_NAVIS_CHANGE;

/// The bits of `xl_info` that belong to the resource manager.
pub const XLR_RMGR_INFO_MASK: u8 = 0xF0;

/// The record types this build writes and replays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordType {
    Extend,
    BulkImages,
    Change,
}

impl RecordType {
    /// The record type of an `xl_info` byte, `None` for a type this build does not know.
    pub fn from_info(info: u8) -> Option<RecordType> {
        match info & XLR_RMGR_INFO_MASK {
            XLOG_NAVIS_EXTEND => Some(RecordType::Extend),
            XLOG_NAVIS_BULK_IMAGES => Some(RecordType::BulkImages),
            XLOG_NAVIS_CHANGE => Some(RecordType::Change),
            _ => None,
        }
    }

    /// Name shown by `pg_walinspect` (`record_type`) and `pg_waldump` when it knows the
    /// rmgr; a NUL-terminated static for `rm_identify`.
    pub fn identify(self) -> &'static std::ffi::CStr {
        match self {
            RecordType::Extend => c"EXTEND",
            RecordType::BulkImages => c"BULK_IMAGES",
            RecordType::Change => c"CHANGE",
        }
    }
}

/// Main data of an `EXTEND` record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtendData {
    pub spc: u32,
    pub db: u32,
    pub rel: u32,
    pub first: u32,
    pub count: u32,
}

impl ExtendData {
    pub const LEN: usize = 20;

    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        for (i, v) in [self.spc, self.db, self.rel, self.first, self.count]
            .iter()
            .enumerate()
        {
            out[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
        }
        out
    }

    pub fn decode(data: &[u8]) -> Option<ExtendData> {
        if data.len() != Self::LEN {
            return None;
        }
        let w = |i: usize| u32::from_le_bytes(data[4 * i..4 * i + 4].try_into().unwrap());
        Some(ExtendData {
            spc: w(0),
            db: w(1),
            rel: w(2),
            first: w(3),
            count: w(4),
        })
    }
}

/// `rm_desc`'s text for a record: what a DBA reading `pg_walinspect` needs to recognise it.
/// `blocks` is the record's block references as (first block, count) when they are
/// consecutive, which is how bulk records are written.
pub fn describe(info: u8, data: &[u8], blocks: Option<(u32, usize)>) -> String {
    match RecordType::from_info(info) {
        Some(RecordType::Extend) => match ExtendData::decode(data) {
            Some(e) => format!(
                "rel {}/{}/{}; zero blocks {}..{}",
                e.spc,
                e.db,
                e.rel,
                e.first,
                e.first as u64 + e.count as u64 - 1
            ),
            None => format!("malformed EXTEND record of {} bytes", data.len()),
        },
        Some(RecordType::BulkImages) => match blocks {
            Some((first, 1)) => format!("1 page: block {first}"),
            Some((first, n)) => {
                format!("{n} pages: blocks {first}..{}", first as u64 + n as u64 - 1)
            }
            None => "pages at non-consecutive blocks".to_string(),
        },
        Some(RecordType::Change) => match super::change::decode(data) {
            Ok(c) => c.describe(),
            Err(e) => format!("malformed CHANGE record: {e}"),
        },
        None => format!(
            "unknown navis record type {:#04x}",
            info & XLR_RMGR_INFO_MASK
        ),
    }
}
