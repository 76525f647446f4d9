//! Page-table pages: 8 bytes of bookkeeping per edge page, indexed by edge-page ordinal.
//!
//! ```text
//! page ordinal e / 1019, entry of edge page e at byte 24 + 8 * (e % 1019):
//!        0 live lists u32 (slots of the edge page holding a vertex's current list)
//!        4 free-page link u32 (next edge page of the free list; u32::MAX ends it)
//! special: kind 7 = page table, aux = page ordinal
//! ```
//!
//! The same two words per page as `state.dat`'s page table today. The link is meaningful only
//! while the edge page is on the free list; an initialised page holds zeros (no live lists).
//! A page returns to the free list when its live count drops to zero, and the allocator hands
//! out whole pages, so this is all the allocator needs per edge page.

use super::{EntryLayout, PageError, PageKind, PAYLOAD_SIZE};

pub const ENTRY_SIZE: usize = 8;
/// Entries per page-table page: 1019.
pub const ENTRIES_PER_PAGE: usize = PAYLOAD_SIZE / ENTRY_SIZE;

/// The bookkeeping of one edge page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageTableEntry {
    pub live: u32,
    pub next_free: u32,
}

pub fn layout() -> EntryLayout {
    EntryLayout::new(ENTRY_SIZE).expect("8-byte entries fit a page")
}

/// (page ordinal, byte offset in the page) of edge page `edge_page`'s entry.
pub fn locate(edge_page: u32) -> (u32, usize) {
    layout().locate(edge_page)
}

fn offset(page: &[u8], edge_page: u32) -> usize {
    let (ordinal, at) = locate(edge_page);
    debug_assert_eq!(
        super::aux(page),
        ordinal,
        "edge page {edge_page} is not on this page-table page"
    );
    at
}

/// Formats an empty page-table page of `ordinal` at `block`.
pub fn init_page(page: &mut [u8], block: u32, ordinal: u32) {
    super::init(page, PageKind::PageTable, block);
    super::set_aux(page, ordinal);
}

pub fn verify(page: &[u8], block: u32, ordinal: u32) -> Result<(), PageError> {
    super::verify_ordinal(page, PageKind::PageTable, block, ordinal)
}

pub fn get(page: &[u8], edge_page: u32) -> PageTableEntry {
    let at = offset(page, edge_page);
    PageTableEntry {
        live: super::get_u32(page, at),
        next_free: super::get_u32(page, at + 4),
    }
}

pub fn set(page: &mut [u8], edge_page: u32, entry: PageTableEntry) {
    let at = offset(page, edge_page);
    super::set_u32(page, at, entry.live);
    super::set_u32(page, at + 4, entry.next_free);
}

pub fn set_live(page: &mut [u8], edge_page: u32, live: u32) {
    let at = offset(page, edge_page);
    super::set_u32(page, at, live);
}

pub fn set_next_free(page: &mut [u8], edge_page: u32, next_free: u32) {
    let at = offset(page, edge_page);
    super::set_u32(page, at + 4, next_free);
}

#[cfg(test)]
mod tests {
    use super::super::{seal, BLOCK_SIZE, PAYLOAD_OFFSET, SPECIAL_OFFSET};
    use super::*;

    #[test]
    fn geometry() {
        assert_eq!(ENTRIES_PER_PAGE, 1019);
        assert_eq!(locate(0), (0, PAYLOAD_OFFSET));
        assert_eq!(locate(1018), (0, PAYLOAD_OFFSET + 1018 * 8));
        const { assert!(PAYLOAD_OFFSET + ENTRIES_PER_PAGE * 8 <= SPECIAL_OFFSET) };
        assert_eq!(locate(1019), (1, PAYLOAD_OFFSET));
        assert_eq!(locate(5000), (4, PAYLOAD_OFFSET + (5000 - 4 * 1019) * 8));
    }

    #[test]
    fn round_trip() {
        let mut page = vec![0u8; BLOCK_SIZE];
        init_page(&mut page, 17, 1);
        let first = 1019;
        assert_eq!(get(&page, first), PageTableEntry::default());
        for e in first..first + 1019 {
            set(
                &mut page,
                e,
                PageTableEntry {
                    live: e % 21,
                    next_free: e.wrapping_mul(31),
                },
            );
        }
        set_live(&mut page, first + 3, 0);
        set_next_free(&mut page, first + 3, u32::MAX);
        seal(&mut page);
        verify(&page, 17, 1).unwrap();
        for e in first..first + 1019 {
            let want = if e == first + 3 {
                PageTableEntry {
                    live: 0,
                    next_free: u32::MAX,
                }
            } else {
                PageTableEntry {
                    live: e % 21,
                    next_free: e.wrapping_mul(31),
                }
            };
            assert_eq!(get(&page, e), want, "edge page {e}");
        }
        assert!(matches!(
            verify(&page, 17, 0),
            Err(PageError::WrongOrdinal { .. })
        ));
        page[PAYLOAD_OFFSET + 8 * 100] ^= 4;
        assert!(matches!(
            verify(&page, 17, 1),
            Err(PageError::Checksum { .. })
        ));
    }
}
