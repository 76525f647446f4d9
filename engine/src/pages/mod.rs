//! Page formats of the relation layout (RFC 0001 §2): every byte of an index in 8 KiB blocks
//! that are valid PostgreSQL pages. One module per page kind; this one owns what all kinds
//! share: the PostgreSQL page header, the navis special space, sealing and verification.
//!
//! Every page (little-endian, as PostgreSQL 15 lays out `PageHeaderData` on x86-64):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | `pd_lsn.xlogid`: high 32 bits of the page LSN |
//! | 4 | 4 | `pd_lsn.xrecoff`: low 32 bits of the page LSN |
//! | 8 | 2 | `pd_checksum`: PostgreSQL's page checksum (stamped by PostgreSQL, 0 here) |
//! | 10 | 2 | `pd_flags`: 0 |
//! | 12 | 2 | `pd_lower` = 8176 (see below) |
//! | 14 | 2 | `pd_upper` = 8176 |
//! | 16 | 2 | `pd_special` = 8176 |
//! | 18 | 2 | `pd_pagesize_version` = 8192 \| 4 (layout version 4) |
//! | 20 | 4 | `pd_prune_xid`: 0 |
//! | 24 | 8152 | payload, per kind |
//! | 8176 | 2 | special: magic `0x4E56` (u16, so the bytes are `56 4E`) |
//! | 8178 | 1 | special: kind ([`PageKind`]) |
//! | 8179 | 1 | special: page format ([`PAGE_FORMAT`]) |
//! | 8180 | 4 | special: the page's own block number |
//! | 8184 | 4 | special: engine CRC-32 of the page (see [`page_crc`]) |
//! | 8188 | 4 | special: `aux`, per kind |
//!
//! `aux` is the page's ordinal among the pages of its kind (edge, vector, indirection, codes,
//! blob, promotions, extent map), so that a page the extent map resolved wrongly is caught even
//! though its block number is right.
//!
//! Why `pd_lower = pd_upper = pd_special` rather than `PageInit`'s `pd_lower = 24`: PostgreSQL
//! treats the bytes between `pd_lower` and `pd_upper` as an unused hole. A full-page image of a
//! buffer registered as standard (`REGBUF_STANDARD`, `log_newpage(..., page_std = true)`)
//! leaves the hole out and redo restores it as zeros, and GenericXLog logs no change inside it:
//! with `pd_lower = 24` the whole payload would be lost. Pages without line pointers mark their
//! used data with `pd_lower` (GIN's and BRIN's metapages do the same), and navis payloads are
//! all used. The header still passes `PageIsVerifiedExtended`'s sanity check: `pd_lower >= 24`,
//! `pd_lower <= pd_upper <= pd_special <= 8192`, `pd_special` MAXALIGNed, no flag outside
//! `PD_VALID_FLAG_BITS`.
//!
//! The engine CRC covers every byte except `pd_lsn` (0..8), `pd_checksum` (8..10) and the CRC
//! field itself: the PostgreSQL layer stamps the LSN and its own checksum after the engine
//! sealed the page. The CRC is checked on every O_DIRECT read whatever `data_checksums` says.
//! An all-zero page is a *new* page (PostgreSQL's `PageIsNew`: extended, never written) and is
//! reported as [`PageError::New`], not as corruption, because a crash between extending the
//! relation and writing a page legitimately leaves one.
//!
//! Kinds never share an extent of [`EXTENT_BLOCKS`] blocks; the dense arrays (vector stream,
//! indirection, codes, promotions) are numbered by page ordinal, which [`extent_page`] splits
//! into extent and page within it.

pub mod blob;
pub mod codes;
pub mod edge;
pub mod extent;
pub mod indirection;
pub mod meta;
pub mod promotions;
pub mod vector;

use crate::storage::checksum::Crc32;
use crate::storage::StorageError;
use std::fmt;
use std::path::Path;

/// Size of a block and of a page.
pub const BLOCK_SIZE: usize = 8192;
/// Size of PostgreSQL's `PageHeaderData` (`SizeOfPageHeaderData`).
pub const PAGE_HEADER_SIZE: usize = 24;
/// Size of the navis special space at the end of every page.
pub const SPECIAL_SIZE: usize = 16;
/// `pd_special`: where the special space starts.
pub const SPECIAL_OFFSET: usize = BLOCK_SIZE - SPECIAL_SIZE;
/// Where the per-kind payload starts (8-aligned, so 8-byte words in it are aligned).
pub const PAYLOAD_OFFSET: usize = PAGE_HEADER_SIZE;
/// Bytes of payload per page: 8152.
pub const PAYLOAD_SIZE: usize = SPECIAL_OFFSET - PAYLOAD_OFFSET;
/// Blocks in one extent (1 MiB); every extent holds pages of one kind.
pub const EXTENT_BLOCKS: u32 = 128;
/// Special-space magic.
pub const PAGE_MAGIC: u16 = 0x4E56;
/// Version of the page formats in this module. Bump it whenever a byte moves.
pub const PAGE_FORMAT: u8 = 1;
/// PostgreSQL's `PG_PAGE_LAYOUT_VERSION` (8.3 and later).
pub const PG_PAGE_LAYOUT_VERSION: u16 = 4;
/// PostgreSQL's `PD_VALID_FLAG_BITS`.
pub const PD_VALID_FLAG_BITS: u16 = 0x0007;

const OFF_XLOGID: usize = 0;
const OFF_XRECOFF: usize = 4;
const OFF_CHECKSUM: usize = 8;
const OFF_FLAGS: usize = 10;
const OFF_LOWER: usize = 12;
const OFF_UPPER: usize = 14;
const OFF_SPECIAL: usize = 16;
const OFF_PAGESIZE_VERSION: usize = 18;
const OFF_MAGIC: usize = SPECIAL_OFFSET;
const OFF_KIND: usize = SPECIAL_OFFSET + 2;
const OFF_FORMAT: usize = SPECIAL_OFFSET + 3;
const OFF_BLOCK: usize = SPECIAL_OFFSET + 4;
const OFF_CRC: usize = SPECIAL_OFFSET + 8;
const OFF_AUX: usize = SPECIAL_OFFSET + 12;
/// PostgreSQL's MAXALIGN on x86-64.
const MAXIMUM_ALIGNOF: usize = 8;

/// What a page holds. Stored in the special space; values are part of the format.
/// Ordered by code (variants are declared in code order), so page references sort by kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum PageKind {
    Meta = 1,
    ExtentMap = 2,
    Blob = 3,
    Promotions = 4,
    Indirection = 5,
    Codes = 6,
    // 7 was the page table (per edge page: live lists, free link) of layout version 1. It is
    // gone because the allocator is derived from the indirection entries (RFC 0001 §10), and
    // the code stays unused so that no other kind is ever mistaken for one of those pages.
    Edge = 8,
    Vector = 9,
}

impl PageKind {
    pub const ALL: [PageKind; 8] = [
        PageKind::Meta,
        PageKind::ExtentMap,
        PageKind::Blob,
        PageKind::Promotions,
        PageKind::Indirection,
        PageKind::Codes,
        PageKind::Edge,
        PageKind::Vector,
    ];

    pub fn from_u8(code: u8) -> Option<PageKind> {
        PageKind::ALL.into_iter().find(|k| *k as u8 == code)
    }

    /// Name used in error messages.
    pub fn name(self) -> &'static str {
        match self {
            PageKind::Meta => "meta",
            PageKind::ExtentMap => "extent map",
            PageKind::Blob => "blob",
            PageKind::Promotions => "promotions",
            PageKind::Indirection => "indirection",
            PageKind::Codes => "codes",
            PageKind::Edge => "edge",
            PageKind::Vector => "vector",
        }
    }
}

/// Why a page failed [`verify`]. Every variant names the block that was asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PageError {
    /// The buffer is not [`BLOCK_SIZE`] bytes.
    WrongSize { block: u32, len: usize },
    /// All zeros: extended but never written (PostgreSQL's `PageIsNew`). Not corruption.
    New { block: u32 },
    /// The PostgreSQL header fails PostgreSQL's sanity check or is not navis's layout.
    BadHeader { block: u32, detail: String },
    /// The special space does not start with [`PAGE_MAGIC`]: not a navis page.
    BadMagic { block: u32, found: u16 },
    /// Written by another page format version.
    Format { block: u32, found: u8 },
    /// The engine CRC does not match: torn or corrupted.
    Checksum {
        block: u32,
        stored: u32,
        computed: u32,
    },
    /// A valid navis page of another kind.
    WrongKind {
        block: u32,
        expected: PageKind,
        found: u8,
    },
    /// A valid page stamped with another block number: a misdirected write or read.
    WrongBlock { block: u32, found: u32 },
    /// A valid page in the wrong place of its kind's array (`aux` ordinal mismatch).
    WrongOrdinal {
        block: u32,
        expected: u32,
        found: u32,
    },
    /// The header and checksum are fine but the per-kind content is inconsistent.
    Content { block: u32, detail: String },
}

impl PageError {
    pub fn block(&self) -> u32 {
        match *self {
            PageError::WrongSize { block, .. }
            | PageError::New { block }
            | PageError::BadHeader { block, .. }
            | PageError::BadMagic { block, .. }
            | PageError::Format { block, .. }
            | PageError::Checksum { block, .. }
            | PageError::WrongKind { block, .. }
            | PageError::WrongBlock { block, .. }
            | PageError::WrongOrdinal { block, .. }
            | PageError::Content { block, .. } => block,
        }
    }

    pub fn is_new(&self) -> bool {
        matches!(self, PageError::New { .. })
    }

    /// The storage error of this failure in the relation or file `path`: another format
    /// becomes [`StorageError::Version`] (the REINDEX hint), everything else `Corrupt`.
    pub fn into_storage(self, path: &Path) -> StorageError {
        match self {
            PageError::Format { found, .. } => StorageError::Version {
                path: path.to_path_buf(),
                found: found.into(),
                expected: PAGE_FORMAT.into(),
            },
            other => StorageError::corrupt(path, other.to_string()),
        }
    }
}

impl fmt::Display for PageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "navis page at block {}: ", self.block())?;
        match self {
            PageError::WrongSize { len, .. } => write!(f, "{len} bytes instead of {BLOCK_SIZE}"),
            PageError::New { .. } => write!(f, "page is new (all zeros)"),
            PageError::BadHeader { detail, .. } => write!(f, "bad page header: {detail}"),
            PageError::BadMagic { found, .. } => {
                write!(f, "bad magic number {found:#06x} (not a navis page)")
            }
            PageError::Format { found, .. } => write!(
                f,
                "page format {found}, this build reads {PAGE_FORMAT}: REINDEX"
            ),
            PageError::Checksum {
                stored, computed, ..
            } => write!(
                f,
                "checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
            ),
            PageError::WrongKind {
                expected, found, ..
            } => {
                let found = PageKind::from_u8(*found)
                    .map(|k| k.name().to_string())
                    .unwrap_or_else(|| format!("unknown kind {found}"));
                write!(
                    f,
                    "expected a page of kind {}, found {found}",
                    expected.name()
                )
            }
            PageError::WrongBlock { found, .. } => {
                write!(f, "page is stamped with block {found} (misdirected)")
            }
            PageError::WrongOrdinal {
                expected, found, ..
            } => write!(f, "expected page ordinal {expected}, page says {found}"),
            PageError::Content { detail, .. } => write!(f, "{detail}"),
        }
    }
}

impl std::error::Error for PageError {}

fn check_len(page: &[u8]) {
    assert_eq!(page.len(), BLOCK_SIZE, "navis pages are {BLOCK_SIZE} bytes");
}

pub(crate) fn get_u16(page: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([page[at], page[at + 1]])
}

pub(crate) fn get_u32(page: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(page[at..at + 4].try_into().expect("4-byte slice"))
}

pub(crate) fn get_u64(page: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(page[at..at + 8].try_into().expect("8-byte slice"))
}

pub(crate) fn set_u16(page: &mut [u8], at: usize, value: u16) {
    page[at..at + 2].copy_from_slice(&value.to_le_bytes());
}

pub(crate) fn set_u32(page: &mut [u8], at: usize, value: u32) {
    page[at..at + 4].copy_from_slice(&value.to_le_bytes());
}

pub(crate) fn set_u64(page: &mut [u8], at: usize, value: u64) {
    page[at..at + 8].copy_from_slice(&value.to_le_bytes());
}

/// Formats `page` as an empty page of `kind` at `block`: zero payload, `aux` 0, LSN 0. Call
/// [`seal`] (or the kind's own seal) after filling the payload.
pub fn init(page: &mut [u8], kind: PageKind, block: u32) {
    check_len(page);
    page.fill(0);
    set_u16(page, OFF_LOWER, SPECIAL_OFFSET as u16);
    set_u16(page, OFF_UPPER, SPECIAL_OFFSET as u16);
    set_u16(page, OFF_SPECIAL, SPECIAL_OFFSET as u16);
    set_u16(
        page,
        OFF_PAGESIZE_VERSION,
        BLOCK_SIZE as u16 | PG_PAGE_LAYOUT_VERSION,
    );
    set_u16(page, OFF_MAGIC, PAGE_MAGIC);
    page[OFF_KIND] = kind as u8;
    page[OFF_FORMAT] = PAGE_FORMAT;
    set_u32(page, OFF_BLOCK, block);
}

/// The page LSN (`pd_lsn`, xlogid high, xrecoff low).
pub fn lsn(page: &[u8]) -> u64 {
    (u64::from(get_u32(page, OFF_XLOGID)) << 32) | u64::from(get_u32(page, OFF_XRECOFF))
}

/// Sets `pd_lsn`. Not covered by the CRC, so it may be set after [`seal`].
pub fn set_lsn(page: &mut [u8], lsn: u64) {
    set_u32(page, OFF_XLOGID, (lsn >> 32) as u32);
    set_u32(page, OFF_XRECOFF, lsn as u32);
}

/// PostgreSQL's `pd_checksum` as stored (this module never computes it).
pub fn pg_checksum(page: &[u8]) -> u16 {
    get_u16(page, OFF_CHECKSUM)
}

/// The kind code in the special space (unchecked).
pub fn kind_code(page: &[u8]) -> u8 {
    page[OFF_KIND]
}

/// The block number stamped in the special space (unchecked).
pub fn stamped_block(page: &[u8]) -> u32 {
    get_u32(page, OFF_BLOCK)
}

pub fn aux(page: &[u8]) -> u32 {
    get_u32(page, OFF_AUX)
}

/// Sets the per-kind `aux` word; covered by the CRC, so set it before [`seal`].
pub fn set_aux(page: &mut [u8], value: u32) {
    set_u32(page, OFF_AUX, value);
}

pub fn payload(page: &[u8]) -> &[u8] {
    &page[PAYLOAD_OFFSET..SPECIAL_OFFSET]
}

pub fn payload_mut(page: &mut [u8]) -> &mut [u8] {
    &mut page[PAYLOAD_OFFSET..SPECIAL_OFFSET]
}

/// The engine CRC-32 of `page`: every byte except `pd_lsn`, `pd_checksum` and the CRC field.
pub fn page_crc(page: &[u8]) -> u32 {
    check_len(page);
    Crc32::new()
        .update(&page[OFF_FLAGS..OFF_CRC])
        .update(&page[OFF_CRC + 4..])
        .finish()
}

/// Stores the engine CRC. Must be the last change before the page is written, apart from
/// the LSN and PostgreSQL's checksum.
pub fn seal(page: &mut [u8]) {
    let crc = page_crc(page);
    set_u32(page, OFF_CRC, crc);
}

/// Whether `page` is all zeros, the only form of a new page PostgreSQL accepts
/// (`PageIsVerifiedExtended`: `pd_upper == 0` with any other byte set is invalid).
pub fn is_new(page: &[u8]) -> bool {
    page.iter().all(|&b| b == 0)
}

/// Checks that `page` is a sealed navis page of `kind` at `block`: size, not new, header,
/// magic, format (before the CRC, so another version is reported as such), CRC, kind, block.
pub fn verify(page: &[u8], kind: PageKind, block: u32) -> Result<(), PageError> {
    if page.len() != BLOCK_SIZE {
        return Err(PageError::WrongSize {
            block,
            len: page.len(),
        });
    }
    if is_new(page) {
        return Err(PageError::New { block });
    }
    check_header(page).map_err(|detail| PageError::BadHeader { block, detail })?;
    let magic = get_u16(page, OFF_MAGIC);
    if magic != PAGE_MAGIC {
        return Err(PageError::BadMagic {
            block,
            found: magic,
        });
    }
    if page[OFF_FORMAT] != PAGE_FORMAT {
        return Err(PageError::Format {
            block,
            found: page[OFF_FORMAT],
        });
    }
    let stored = get_u32(page, OFF_CRC);
    let computed = page_crc(page);
    if stored != computed {
        return Err(PageError::Checksum {
            block,
            stored,
            computed,
        });
    }
    if page[OFF_KIND] != kind as u8 {
        return Err(PageError::WrongKind {
            block,
            expected: kind,
            found: page[OFF_KIND],
        });
    }
    let found = stamped_block(page);
    if found != block {
        return Err(PageError::WrongBlock { block, found });
    }
    Ok(())
}

/// [`verify`] plus the `aux` ordinal check of the dense-array kinds.
pub fn verify_ordinal(
    page: &[u8],
    kind: PageKind,
    block: u32,
    ordinal: u32,
) -> Result<(), PageError> {
    verify(page, kind, block)?;
    let found = aux(page);
    if found != ordinal {
        return Err(PageError::WrongOrdinal {
            block,
            expected: ordinal,
            found,
        });
    }
    Ok(())
}

/// PostgreSQL's header sanity check (`PageIsVerifiedExtended`), then navis's own layout.
fn check_header(page: &[u8]) -> Result<(), String> {
    let flags = get_u16(page, OFF_FLAGS);
    let lower = get_u16(page, OFF_LOWER) as usize;
    let upper = get_u16(page, OFF_UPPER) as usize;
    let special = get_u16(page, OFF_SPECIAL) as usize;
    let pg_ok = flags & !PD_VALID_FLAG_BITS == 0
        && lower >= PAGE_HEADER_SIZE
        && lower <= upper
        && upper <= special
        && special <= BLOCK_SIZE
        && special.is_multiple_of(MAXIMUM_ALIGNOF);
    if !pg_ok {
        return Err(format!(
            "PostgreSQL would reject it (flags {flags:#06x}, lower {lower}, upper {upper}, special {special})"
        ));
    }
    let version = get_u16(page, OFF_PAGESIZE_VERSION);
    let expected = BLOCK_SIZE as u16 | PG_PAGE_LAYOUT_VERSION;
    if special != SPECIAL_OFFSET || lower != SPECIAL_OFFSET || upper != SPECIAL_OFFSET {
        return Err(format!(
            "lower {lower}, upper {upper}, special {special}; navis pages have {SPECIAL_OFFSET} for all three"
        ));
    }
    if version != expected {
        return Err(format!(
            "pd_pagesize_version {version:#06x}, expected {expected:#06x}"
        ));
    }
    Ok(())
}

/// Splits the ordinal of a page in its kind's array into (extent ordinal among that kind's
/// extents, page within the extent). The extent map gives the extent's first block.
pub fn extent_page(ordinal: u32) -> (u32, u32) {
    (ordinal / EXTENT_BLOCKS, ordinal % EXTENT_BLOCKS)
}

/// Geometry of a page kind that is a dense array of fixed-size entries (indirection, codes):
/// entry `i` is on page ordinal `i / per_page` at payload offset
/// `(i % per_page) * entry_size`. Entries never straddle pages, so each page can be read,
/// logged and loaded on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryLayout {
    entry_size: usize,
    per_page: usize,
}

impl EntryLayout {
    pub fn new(entry_size: usize) -> Result<Self, StorageError> {
        if entry_size == 0 || entry_size > PAYLOAD_SIZE {
            return Err(StorageError::invalid(format!(
                "page entries of {entry_size} bytes do not fit a {PAYLOAD_SIZE}-byte page payload"
            )));
        }
        Ok(EntryLayout {
            entry_size,
            per_page: PAYLOAD_SIZE / entry_size,
        })
    }

    pub fn entry_size(&self) -> usize {
        self.entry_size
    }

    pub fn per_page(&self) -> usize {
        self.per_page
    }

    /// (page ordinal, byte offset in the page) of entry `index`.
    pub fn locate(&self, index: u32) -> (u32, usize) {
        let per_page = self.per_page as u32;
        let slot = (index % per_page) as usize;
        (index / per_page, PAYLOAD_OFFSET + slot * self.entry_size)
    }

    /// Byte offset in its page of the entry at position `slot` of a page.
    pub fn offset(&self, slot: usize) -> usize {
        assert!(slot < self.per_page, "entry {slot} of {}", self.per_page);
        PAYLOAD_OFFSET + slot * self.entry_size
    }

    /// Pages needed for `entries` entries.
    pub fn pages_for(&self, entries: u64) -> u64 {
        entries.div_ceil(self.per_page as u64)
    }

    /// The entries area of a page: the first `per_page * entry_size` payload bytes.
    pub fn entries<'a>(&self, page: &'a [u8]) -> &'a [u8] {
        &page[PAYLOAD_OFFSET..PAYLOAD_OFFSET + self.per_page * self.entry_size]
    }

    pub fn entries_mut<'a>(&self, page: &'a mut [u8]) -> &'a mut [u8] {
        &mut page[PAYLOAD_OFFSET..PAYLOAD_OFFSET + self.per_page * self.entry_size]
    }
}

#[cfg(test)]
mod tests;
