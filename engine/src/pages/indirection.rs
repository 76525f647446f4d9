//! Indirection pages: the durable form of the indirection table, 16 bytes per vertex.
//!
//! ```text
//! page ordinal v / 509, entry v % 509 at byte 24 + 16 * (v % 509):
//!        0 edge word u64 | 8 TID word u64
//! edge word: bits 0..32 edge page | bits 32..48 slot | bits 48..64 flags (LIVE, DELETED)
//!            (the edge page is an ordinal among edge pages, resolved through the extent
//!            map, never a block number)
//! TID word:  bits 0..32 heap block | bits 32..48 line pointer; while the vertex is free
//!            (edge word 0) the next id of the free-vertex list (u32, u32::MAX ends it)
//! special:   kind 5 = indirection, aux = page ordinal
//! ```
//!
//! The words are encoded exactly as in `storage::indirection` (whose encoders this module
//! uses), because the runtime copy searches read is that table's in-memory shape and is
//! loaded from these pages word by word. `floor(8152 / 16) = 509` entries per page; the
//! payload starts at byte 24, so every word is 8-aligned. An all-zero entry means "no such
//! vertex", so a freshly initialised page needs no per-entry setup.
//!
//! These are buffer-managed pages: the caller holds the buffer's exclusive lock, so the
//! helpers are plain reads and writes; the publishing atomic stores happen on the runtime
//! copy afterwards (RFC 0001 §3). The helpers take the vertex id and find its entry in the
//! page of ordinal `locate(v).0`, which the caller resolved through the extent map.

use super::{EntryLayout, PageError, PageKind, PAYLOAD_SIZE};
use crate::storage::indirection::{decode_edge_word, decode_tid, encode_edge_word, encode_tid};
use crate::storage::{EdgeLocation, HeapTid, IndirEntry, StorageError, FLAG_DELETED, FLAG_LIVE};
use crate::VertexId;

pub const ENTRY_SIZE: usize = 16;
/// Entries per indirection page: 509.
pub const ENTRIES_PER_PAGE: usize = PAYLOAD_SIZE / ENTRY_SIZE;

/// The entry geometry.
pub fn layout() -> EntryLayout {
    EntryLayout::new(ENTRY_SIZE).expect("16-byte entries fit a page")
}

/// (page ordinal, byte offset in the page) of vertex `v`'s entry.
pub fn locate(v: VertexId) -> (u32, usize) {
    layout().locate(v)
}

fn offset(page: &[u8], v: VertexId) -> usize {
    let (ordinal, at) = locate(v);
    debug_assert_eq!(
        super::aux(page),
        ordinal,
        "vertex {v} is not on this indirection page"
    );
    at
}

/// Formats an empty indirection page (no vertices) of `ordinal` at `block`.
pub fn init_page(page: &mut [u8], block: u32, ordinal: u32) {
    super::init(page, PageKind::Indirection, block);
    super::set_aux(page, ordinal);
}

pub fn verify(page: &[u8], block: u32, ordinal: u32) -> Result<(), PageError> {
    super::verify_ordinal(page, PageKind::Indirection, block, ordinal)
}

/// The raw (edge word, TID word) of `v`.
pub fn words(page: &[u8], v: VertexId) -> (u64, u64) {
    let at = offset(page, v);
    (super::get_u64(page, at), super::get_u64(page, at + 8))
}

/// Stores the raw words of `v` (redo and loading use this).
pub fn set_words(page: &mut [u8], v: VertexId, edge_word: u64, tid_word: u64) {
    let at = offset(page, v);
    super::set_u64(page, at, edge_word);
    super::set_u64(page, at + 8, tid_word);
}

/// The entry of `v`, or `None` when it was never published or is free.
pub fn entry(page: &[u8], v: VertexId) -> Option<IndirEntry> {
    let (edge_word, tid_word) = words(page, v);
    let (edge, flags) = decode_edge_word(edge_word);
    (flags != 0).then(|| IndirEntry {
        edge,
        tid: decode_tid(tid_word),
        flags,
    })
}

/// Publishes `v`: location, flags and TID.
pub fn publish(page: &mut [u8], v: VertexId, entry: IndirEntry) {
    set_words(
        page,
        v,
        encode_edge_word(entry.edge, entry.flags),
        encode_tid(entry.tid),
    );
}

/// Points a published `v` at a relocated edge list, keeping its flags; returns the old
/// location.
pub fn relocate(
    page: &mut [u8],
    v: VertexId,
    to: EdgeLocation,
) -> Result<EdgeLocation, StorageError> {
    let (edge_word, tid_word) = words(page, v);
    let (old, flags) = decode_edge_word(edge_word);
    if flags & FLAG_LIVE == 0 {
        return Err(StorageError::invalid(format!(
            "vertex {v} is not published"
        )));
    }
    set_words(page, v, encode_edge_word(to, flags), tid_word);
    Ok(old)
}

/// Sets `DELETED` on a published `v`; returns whether it was already set (a vertex that is
/// not published is left alone and reported as already deleted), as the table does.
pub fn mark_deleted(page: &mut [u8], v: VertexId) -> bool {
    let (edge_word, tid_word) = words(page, v);
    let (edge, flags) = decode_edge_word(edge_word);
    if flags & FLAG_LIVE == 0 || flags & FLAG_DELETED != 0 {
        return true;
    }
    set_words(
        page,
        v,
        encode_edge_word(edge, flags | FLAG_DELETED),
        tid_word,
    );
    false
}

/// Frees `v`'s id: edge word 0, TID word = `next_free` (the free-vertex list link).
pub fn release(page: &mut [u8], v: VertexId, next_free: u32) {
    set_words(page, v, 0, u64::from(next_free));
}

/// The free-list link stored by [`release`] (meaningless for a published vertex).
pub fn free_link(page: &[u8], v: VertexId) -> u32 {
    words(page, v).1 as u32
}

/// Stores the TID of a vertex being prepared, leaving its edge word alone.
pub fn set_tid(page: &mut [u8], v: VertexId, tid: HeapTid) {
    let (edge_word, _) = words(page, v);
    set_words(page, v, edge_word, encode_tid(tid));
}

#[cfg(test)]
mod tests {
    use super::super::{seal, BLOCK_SIZE, PAYLOAD_OFFSET};
    use super::*;

    fn live(page: u32, slot: u16, block: u32) -> IndirEntry {
        IndirEntry {
            edge: EdgeLocation { page, slot },
            tid: HeapTid { block, offset: 7 },
            flags: FLAG_LIVE,
        }
    }

    #[test]
    fn geometry() {
        assert_eq!(ENTRIES_PER_PAGE, 509);
        assert_eq!(8152 / 16, 509);
        assert_eq!(locate(0), (0, PAYLOAD_OFFSET));
        assert_eq!(locate(508), (0, PAYLOAD_OFFSET + 508 * 16));
        assert_eq!(locate(509), (1, PAYLOAD_OFFSET));
        assert_eq!(locate(1020), (2, PAYLOAD_OFFSET + 2 * 16));
        assert_eq!(
            locate(u32::MAX - 1).0,
            (u32::MAX - 1) / 509,
            "every vertex id has a page"
        );
        const { assert!(PAYLOAD_OFFSET + ENTRIES_PER_PAGE * 16 <= super::super::SPECIAL_OFFSET) };
        assert_eq!(PAYLOAD_OFFSET % 8, 0, "8-byte words are aligned");
        assert_eq!(layout().pages_for(1_000_000), 1_000_000u64.div_ceil(509));
    }

    #[test]
    fn round_trip_and_table_semantics() {
        let mut page = vec![0u8; BLOCK_SIZE];
        init_page(&mut page, 40, 2);
        let (a, b) = (2 * 509, 2 * 509 + 508);
        assert_eq!(entry(&page, a), None);
        publish(&mut page, a, live(7, 3, 11));
        publish(&mut page, b, live(u32::MAX - 1, 65535, 12));
        assert!(!mark_deleted(&mut page, b));
        assert!(mark_deleted(&mut page, b));
        assert_eq!(
            relocate(&mut page, a, EdgeLocation { page: 9, slot: 1 }).unwrap(),
            EdgeLocation { page: 7, slot: 3 }
        );
        seal(&mut page);
        verify(&page, 40, 2).unwrap();
        assert_eq!(entry(&page, a), Some(live(9, 1, 11)));
        let e = entry(&page, b).unwrap();
        assert!(e.is_live() && e.is_deleted());
        assert_eq!(e.edge.page, u32::MAX - 1);
        assert_eq!(e.tid.block, 12);
        // The words are the table's encoding: page | slot << 32 | flags << 48.
        let (edge_word, tid_word) = words(&page, a);
        assert_eq!(edge_word, 9 | 1 << 32 | (FLAG_LIVE as u64) << 48);
        assert_eq!(tid_word, 11 | 7 << 32);

        release(&mut page, a, 42);
        assert_eq!(entry(&page, a), None);
        assert_eq!(free_link(&page, a), 42);
        assert!(mark_deleted(&mut page, a), "a free vertex is never marked");
        assert!(relocate(&mut page, a, EdgeLocation { page: 1, slot: 1 }).is_err());
        set_tid(
            &mut page,
            a,
            HeapTid {
                block: 5,
                offset: 2,
            },
        );
        assert_eq!(entry(&page, a), None, "a TID alone does not publish");
        assert_eq!(words(&page, a), (0, 5 | 2 << 32));
        // Neighbouring entries are untouched.
        assert_eq!(entry(&page, a + 1), None);
        assert!(entry(&page, b).unwrap().is_deleted());
    }

    #[test]
    fn verification() {
        let mut page = vec![0u8; BLOCK_SIZE];
        init_page(&mut page, 40, 2);
        publish(&mut page, 2 * 509 + 1, live(1, 2, 3));
        seal(&mut page);
        verify(&page, 40, 2).unwrap();
        assert!(matches!(
            verify(&page, 40, 3),
            Err(PageError::WrongOrdinal {
                expected: 3,
                found: 2,
                ..
            })
        ));
        assert!(matches!(
            verify(&page, 41, 2),
            Err(PageError::WrongBlock { .. })
        ));
        page[PAYLOAD_OFFSET + 16 + 3] ^= 1;
        assert!(matches!(
            verify(&page, 40, 2),
            Err(PageError::Checksum { .. })
        ));
    }
}
