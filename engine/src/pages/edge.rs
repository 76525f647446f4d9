//! Edge pages of the relation layout: 8 KiB blocks whose payload holds `slots_per_page`
//! fixed-size edge-list slots, in the slot format of today's `storage::edge_page`.
//!
//! ```text
//! page:  0 PostgreSQL header (24 B) | 24 slot 0 | 24 + slot_size slot 1 | ...
//!        | zero padding to 8176 | 8176 special (kind 8 = edge, aux = live slots)
//! slot:  0 owner vertex u32 (u32::MAX = free) | 4 degree u16 | 6 reserved u16 (0)
//!        8 neighbour ids, max_degree x u32 (unused entries u32::MAX)
//! slot_size = 8 + 4 * max_degree; slots_per_page = floor(8152 / slot_size)
//! ```
//!
//! | max_degree | slot_size | slots_per_page | unused payload bytes |
//! |---|---|---|---|
//! | 32 | 136 | 59 | 128 |
//! | 64 | 264 | 30 | 232 |
//! | 96 | 392 | 20 | 312 |
//! | 128 | 520 | 15 | 352 |
//! | 2036 (maximum) | 8152 | 1 | 0 |
//!
//! Why the slots are unchanged: fixed-size owner-stamped slots are what lets inserts move a
//! list to any free slot and lock-free readers detect a moved or reused slot (see
//! `storage::edge_page`). Why 8 KiB instead of 4 KiB halves: the engine CRC covers the whole
//! block, so two 4 KiB pages per block would make every out-of-place write a
//! read-modify-write of its sibling (RFC 0001 §2). `aux` holds the page's ordinal, the name the
//! indirection table and the search use; live counts are recounted from the slots. The slot
//! code itself is `storage::EdgePageLayout::for_relation`'s, which the search reads with.

use super::{PageError, PageKind, PAYLOAD_SIZE};
use crate::storage::{EdgePageLayout, EdgeSlotRef, StorageError, FREE_OWNER, SLOT_HEADER_SIZE};
use crate::VertexId;

/// Geometry of 8 KiB edge pages for one index, derived from its `max_degree`: the slot
/// layout the search reads ([`EdgePageLayout::for_relation`]) plus what writing and verifying
/// a relation page needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EdgeLayout {
    slots: EdgePageLayout,
}

impl EdgeLayout {
    /// Layout for lists of at most `max_degree` neighbours. Fails when `max_degree` is zero
    /// or not even one slot fits a page (`max_degree` > 2036).
    pub fn new(max_degree: usize) -> Result<Self, StorageError> {
        Ok(EdgeLayout {
            slots: EdgePageLayout::for_relation(max_degree)?,
        })
    }

    /// Largest max_degree for which one slot still fits a page.
    pub const fn max_supported_degree() -> usize {
        (PAYLOAD_SIZE - SLOT_HEADER_SIZE) / 4
    }

    pub fn max_degree(&self) -> usize {
        self.slots.max_degree()
    }

    pub fn slot_size(&self) -> usize {
        self.slots.slot_size()
    }

    pub fn slots_per_page(&self) -> usize {
        self.slots.slots_per_page()
    }

    /// Byte offset of `slot` in the page.
    pub fn slot_offset(&self, slot: usize) -> usize {
        self.slots.slot_offset(slot)
    }

    fn check_slot(&self, slot: usize) {
        assert!(
            slot < self.slots_per_page(),
            "edge slot {slot} out of range: a page holds {} slots",
            self.slots_per_page()
        );
    }

    /// Formats `page` as an empty edge page (every slot free) at `block`, edge page `ordinal`
    /// of the index (`aux`). Call [`EdgeLayout::seal`] after filling slots.
    ///
    /// Why the ordinal and not a stored live count: the indirection table and the search name
    /// edge pages by ordinal, so a reader checks the page it got is the one it asked for, as the
    /// 4 KiB format's page number allowed; the live count is cheap to recount.
    pub fn init_page(&self, page: &mut [u8], block: u32, ordinal: u32) {
        super::init(page, PageKind::Edge, block);
        super::set_aux(page, ordinal);
        for slot in 0..self.slots_per_page() {
            self.free_slot(page, slot);
        }
    }

    /// Stores `neighbours` as `owner`'s edge list in `slot`.
    pub fn put_slot(
        &self,
        page: &mut [u8],
        slot: usize,
        owner: VertexId,
        neighbours: &[VertexId],
    ) -> Result<(), StorageError> {
        self.slots.put_slot(page, slot, owner, neighbours)
    }

    /// Marks `slot` free, overwriting its old list. Panics when `slot` is out of range.
    pub fn free_slot(&self, page: &mut [u8], slot: usize) {
        self.check_slot(slot);
        self.slots.free_slot(page, slot);
    }

    /// Stores the CRC. Must be the last change before the page is written (apart from the LSN
    /// and PostgreSQL's checksum).
    pub fn seal(&self, page: &mut [u8]) {
        super::seal(page);
    }

    fn count_live(&self, page: &[u8]) -> usize {
        (0..self.slots_per_page())
            .filter(|&s| !self.slot(page, s).is_free())
            .count()
    }

    /// Checks the common page fields (kind edge, `block`, `ordinal`, CRC) and every slot's
    /// degree, so that [`EdgeLayout::slot`] can trust the page afterwards.
    pub fn verify(&self, page: &[u8], block: u32, ordinal: u32) -> Result<(), PageError> {
        super::verify_ordinal(page, PageKind::Edge, block, ordinal)?;
        let bad = |detail: String| PageError::Content { block, detail };
        for s in 0..self.slots_per_page() {
            let at = self.slot_offset(s);
            let degree = super::get_u16(page, at + 4) as usize;
            if degree > self.max_degree() {
                return Err(bad(format!(
                    "edge slot {s} has degree {degree} > max_degree {}",
                    self.max_degree()
                )));
            }
        }
        Ok(())
    }

    /// Number of occupied slots.
    pub fn live_count(&self, page: &[u8]) -> usize {
        self.count_live(page)
    }

    /// The edge-page ordinal the page was written as (`aux`).
    pub fn page_ordinal(&self, page: &[u8]) -> u32 {
        super::aux(page)
    }

    /// View of one slot (degree clamped to max_degree, so an unverified page cannot make the
    /// view read outside the slot). Panics when `slot` is out of range.
    pub fn slot<'a>(&self, page: &'a [u8], slot: usize) -> EdgeSlotRef<'a> {
        self.check_slot(slot);
        self.slots.slot(page, slot)
    }

    /// The slot's edge list if `expected` still owns it; `None` means the list moved or the
    /// slot was reused (or `slot` is out of range) and the caller must re-resolve.
    pub fn slot_owned_by<'a>(
        &self,
        page: &'a [u8],
        slot: usize,
        expected: VertexId,
    ) -> Option<EdgeSlotRef<'a>> {
        if expected == FREE_OWNER {
            return None;
        }
        self.slots.slot_owned_by(page, slot, expected)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pages::BLOCK_SIZE;

    /// Edge page ordinal `block + 1000` at `block`.
    fn page_with(layout: &EdgeLayout, block: u32, lists: &[(u32, Vec<u32>)]) -> Vec<u8> {
        let mut page = vec![0u8; BLOCK_SIZE];
        layout.init_page(&mut page, block, block + 1000);
        for (slot, (owner, ids)) in lists.iter().enumerate() {
            layout.put_slot(&mut page, slot, *owner, ids).unwrap();
        }
        layout.seal(&mut page);
        page
    }

    #[test]
    fn geometry() {
        for (r, slots) in [(32, 59), (64, 30), (96, 20), (128, 15)] {
            let layout = EdgeLayout::new(r).unwrap();
            assert_eq!(layout.slot_size(), 8 + 4 * r);
            assert_eq!(layout.slots_per_page(), slots, "R = {r}");
            assert!(layout.slot_offset(slots) <= super::super::SPECIAL_OFFSET);
        }
        assert_eq!(EdgeLayout::max_supported_degree(), 2036);
        assert_eq!(EdgeLayout::new(2036).unwrap().slots_per_page(), 1);
        let err = EdgeLayout::new(2037).unwrap_err().to_string();
        assert!(
            err.contains("does not fit") && err.contains("2036"),
            "{err}"
        );
        assert!(EdgeLayout::new(0).is_err());
        assert!(EdgeLayout::new(usize::MAX).is_err());
    }

    #[test]
    fn round_trip_every_slot() {
        for r in [32, 96, 2036] {
            let layout = EdgeLayout::new(r).unwrap();
            let lists: Vec<(u32, Vec<u32>)> = (0..layout.slots_per_page())
                .map(|s| {
                    let degree = (s * 7) % (r + 1);
                    (
                        s as u32 * 3 + 1,
                        (0..degree as u32).map(|i| i * 11).collect(),
                    )
                })
                .collect();
            let page = page_with(&layout, 77, &lists);
            layout.verify(&page, 77, 1077).unwrap();
            assert_eq!(layout.live_count(&page), lists.len());
            for (s, (owner, ids)) in lists.iter().enumerate() {
                let view = layout.slot(&page, s);
                assert_eq!(view.owner(), *owner);
                assert_eq!(view.degree(), ids.len());
                assert_eq!(&view.to_vec(), ids);
                // Unused neighbour entries are u32::MAX, as in the 4 KiB format.
                let at = layout.slot_offset(s) + 8 + 4 * ids.len();
                let end = layout.slot_offset(s) + layout.slot_size();
                assert!(page[at..end].iter().all(|&b| b == 0xFF));
            }
        }
    }

    #[test]
    fn free_reuse_and_owner_stamps() {
        let layout = EdgeLayout::new(32).unwrap();
        let mut page = page_with(&layout, 5, &[(5, vec![6, 7]), (8, vec![9])]);
        assert!(layout.slot(&page, 2).is_free());
        assert_eq!(
            layout.slot_owned_by(&page, 0, 5).unwrap().to_vec(),
            vec![6, 7]
        );
        layout.put_slot(&mut page, 0, 12, &[1]).unwrap();
        layout.free_slot(&mut page, 1);
        layout.seal(&mut page);
        layout.verify(&page, 5, 1005).unwrap();
        assert!(layout.slot_owned_by(&page, 0, 5).is_none());
        assert!(layout.slot_owned_by(&page, 1, 8).is_none());
        assert!(layout.slot_owned_by(&page, 1, FREE_OWNER).is_none());
        assert!(layout.slot_owned_by(&page, 59, 12).is_none());
        assert_eq!(layout.live_count(&page), 1);
        assert_eq!(layout.slot(&page, 1).degree(), 0);
    }

    #[test]
    fn corruption_misdirection_and_stale_seal_are_detected() {
        let layout = EdgeLayout::new(96).unwrap();
        let page = page_with(&layout, 3, &[(1, vec![2, 3])]);
        let mut flipped = page.clone();
        flipped[layout.slot_offset(0) + 9] ^= 0x40;
        assert!(matches!(
            layout.verify(&flipped, 3, 1003),
            Err(PageError::Checksum { block: 3, .. })
        ));
        assert_eq!(
            layout.verify(&page, 4, 1003),
            Err(PageError::WrongBlock { block: 4, found: 3 })
        );
        assert_eq!(
            layout.verify(&page, 3, 1004),
            Err(PageError::WrongOrdinal {
                block: 3,
                expected: 1004,
                found: 1003
            })
        );
        assert_eq!(layout.page_ordinal(&page), 1003);
        // A slot changed without resealing fails the CRC.
        let mut unsealed = page.clone();
        layout.put_slot(&mut unsealed, 1, 9, &[]).unwrap();
        assert!(matches!(
            layout.verify(&unsealed, 3, 1003),
            Err(PageError::Checksum { .. })
        ));
        // A degree beyond max_degree in a correctly sealed page is caught by content checks.
        let mut wild = page.clone();
        super::super::set_u16(&mut wild, layout.slot_offset(0) + 4, 97);
        super::super::seal(&mut wild);
        let err = layout.verify(&wild, 3, 1003).unwrap_err();
        assert!(err.to_string().contains("degree 97"), "{err}");
        // ... and the view stays inside the slot anyway.
        assert_eq!(layout.slot(&wild, 0).to_vec().len(), 96);
        // A vector page is not an edge page.
        let mut other = vec![0u8; BLOCK_SIZE];
        super::super::init(&mut other, PageKind::Vector, 3);
        super::super::seal(&mut other);
        assert!(matches!(
            layout.verify(&other, 3, 1003),
            Err(PageError::WrongKind { .. })
        ));
        assert!(layout
            .verify(&vec![0u8; BLOCK_SIZE], 3, 1003)
            .unwrap_err()
            .is_new());
    }

    #[test]
    fn bad_slot_input_is_rejected() {
        let layout = EdgeLayout::new(4).unwrap();
        let mut page = vec![0u8; BLOCK_SIZE];
        layout.init_page(&mut page, 0, 0);
        let err = layout
            .put_slot(&mut page, 0, 1, &[1, 2, 3, 4, 5])
            .unwrap_err();
        assert!(err.to_string().contains("more than max_degree 4"), "{err}");
        assert!(layout
            .put_slot(&mut page, layout.slots_per_page(), 1, &[])
            .is_err());
        assert!(layout.put_slot(&mut page, 0, FREE_OWNER, &[]).is_err());
    }
}
