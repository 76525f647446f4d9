//! Edge-page file: 4 KiB pages, each holding `slots_per_page` fixed-size edge-list slots.
//!
//! ```text
//! page:  0 magic "NVEP" u32 | 4 version u16 | 6 live slots u16 | 8 page number u32 | 12 crc32 u32
//!        16 slot 0 | 16 + slot_size slot 1 | ... | zero padding to 4096
//! slot:  0 owner vertex u32 (u32::MAX = free) | 4 degree u16 | 6 reserved u16 (0)
//!        8 neighbour ids, max_degree x u32 (unused entries u32::MAX)
//! ```
//!
//! Slots are fixed-size so that an edge list can move to any free slot of any page (inserts
//! write edge lists out of place, DESIGN.md §1). The owner stamp lets a lock-free reader that
//! resolved vertex -> slot through the indirection table notice that the slot has since been
//! freed or reused and re-resolve. The page number in the header catches a page written to
//! or read from the wrong offset; the checksum catches torn and corrupted pages. The checksum
//! covers the whole page except its own four bytes.

use super::checksum::Crc32;
use super::error::StorageError;
use super::{put_u16, put_u32, read_u16, read_u32, FORMAT_VERSION, FREE_OWNER, PAGE_SIZE};
use crate::VertexId;
use std::path::Path;

pub const PAGE_MAGIC: u32 = u32::from_le_bytes(*b"NVEP");
pub const PAGE_HEADER_SIZE: usize = 16;
pub const SLOT_HEADER_SIZE: usize = 8;

const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = 4;
const OFF_LIVE: usize = 6;
const OFF_PAGE_NO: usize = 8;
const OFF_CRC: usize = 12;

/// Geometry of edge pages for one index, derived from its `max_degree`: the 4 KiB side-file
/// pages described above, or the 8 KiB relation pages of `crate::pages::edge`
/// ([`EdgePageLayout::for_relation`]). Searches read both through this one type (slot views,
/// owner stamps, page names); the write-side methods (`init_page`, `put_slot`, `free_slot`,
/// `seal`, `verify`, `live_count`) are for side-file pages only, relation pages are written and
/// verified with `crate::pages::edge::EdgeLayout`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EdgePageLayout {
    max_degree: usize,
    slot_size: usize,
    slots_per_page: usize,
    relation: bool,
}

impl EdgePageLayout {
    /// Layout for lists of at most `max_degree` neighbours. Fails when not even one slot fits
    /// a page (max_degree > 1018) or when `max_degree` is zero.
    pub fn new(max_degree: usize) -> Result<Self, StorageError> {
        Self::with_payload(max_degree, PAGE_SIZE, PAGE_SIZE - PAGE_HEADER_SIZE, false)
    }

    /// Slots of `8 + 4 * max_degree` bytes in `payload` bytes of a `page_size`-byte page.
    fn with_payload(
        max_degree: usize,
        page_size: usize,
        payload: usize,
        relation: bool,
    ) -> Result<Self, StorageError> {
        if max_degree == 0 {
            return Err(StorageError::invalid("max_degree must be at least 1"));
        }
        let slot_size = max_degree
            .checked_mul(4)
            .and_then(|b| b.checked_add(SLOT_HEADER_SIZE))
            .ok_or_else(|| StorageError::invalid("max_degree is too large"))?;
        let slots_per_page = payload / slot_size;
        if slots_per_page == 0 {
            return Err(StorageError::invalid(format!(
                "max_degree {max_degree} does not fit a {page_size}-byte edge page (at most {})",
                (payload - SLOT_HEADER_SIZE) / 4
            )));
        }
        Ok(EdgePageLayout {
            max_degree,
            slot_size,
            slots_per_page,
            relation,
        })
    }

    /// The layout of 8 KiB relation edge pages (RFC 0001 §2) with the same slots.
    pub fn for_relation(max_degree: usize) -> Result<Self, StorageError> {
        Self::with_payload(
            max_degree,
            crate::pages::BLOCK_SIZE,
            crate::pages::PAYLOAD_SIZE,
            true,
        )
    }

    /// Bytes per edge page: 4096 in side files, 8192 in the relation.
    pub fn page_size(&self) -> usize {
        if self.relation {
            crate::pages::BLOCK_SIZE
        } else {
            PAGE_SIZE
        }
    }

    fn assert_side_file(&self) {
        assert!(
            !self.relation,
            "relation edge pages are written and verified with pages::edge::EdgeLayout"
        );
    }

    /// Largest max_degree for which one slot still fits a page.
    pub const fn max_supported_degree() -> usize {
        (PAGE_SIZE - PAGE_HEADER_SIZE - SLOT_HEADER_SIZE) / 4
    }

    pub fn max_degree(&self) -> usize {
        self.max_degree
    }

    pub fn slot_size(&self) -> usize {
        self.slot_size
    }

    pub fn slots_per_page(&self) -> usize {
        self.slots_per_page
    }

    /// Byte offset of `slot` in the page.
    pub fn slot_offset(&self, slot: usize) -> usize {
        let header = if self.relation {
            crate::pages::PAYLOAD_OFFSET
        } else {
            PAGE_HEADER_SIZE
        };
        header + slot * self.slot_size
    }

    /// Formats `page` as an empty page (every slot free) with number `page_no`. Call
    /// [`EdgePageLayout::seal`] after filling slots.
    pub fn init_page(&self, page: &mut [u8], page_no: u32) {
        self.assert_side_file();
        assert_eq!(page.len(), PAGE_SIZE, "edge pages are {PAGE_SIZE} bytes");
        page.fill(0);
        put_u32(page, OFF_MAGIC, PAGE_MAGIC);
        put_u16(page, OFF_VERSION, FORMAT_VERSION as u16);
        put_u32(page, OFF_PAGE_NO, page_no);
        for slot in 0..self.slots_per_page {
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
        if slot >= self.slots_per_page {
            return Err(StorageError::invalid(format!(
                "edge slot {slot} out of range: a page holds {} slots",
                self.slots_per_page
            )));
        }
        let at = self.slot_offset(slot);
        write_slot(&mut page[at..at + self.slot_size], owner, neighbours)
    }

    /// Marks `slot` free. The old neighbour ids are overwritten so a freed slot carries no
    /// stale list that a buggy reader could mistake for live data.
    pub fn free_slot(&self, page: &mut [u8], slot: usize) {
        let at = self.slot_offset(slot);
        clear_slot(&mut page[at..at + self.slot_size]);
    }

    /// Recomputes the live-slot count and the checksum. Must be the last change before the
    /// page is written.
    pub fn seal(&self, page: &mut [u8]) {
        self.assert_side_file();
        let live = (0..self.slots_per_page)
            .filter(|&s| read_u32(page, self.slot_offset(s)) != FREE_OWNER)
            .count();
        put_u16(page, OFF_LIVE, live as u16);
        put_u32(page, OFF_CRC, page_checksum(page));
    }

    /// Checks magic, version, page number, checksum, live count and every slot's degree, so
    /// that [`EdgePageLayout::slot`] can trust the page afterwards. `path` only names the file
    /// in errors.
    pub fn verify(&self, path: &Path, page: &[u8], page_no: u32) -> Result<(), StorageError> {
        self.assert_side_file();
        let bad =
            |detail: String| StorageError::corrupt(path, format!("edge page {page_no}: {detail}"));
        if page.len() != PAGE_SIZE {
            return Err(bad(format!("{} bytes instead of {PAGE_SIZE}", page.len())));
        }
        if read_u32(page, OFF_MAGIC) != PAGE_MAGIC {
            return Err(bad("bad magic number".into()));
        }
        let version = read_u16(page, OFF_VERSION) as u32;
        if version != FORMAT_VERSION {
            return Err(StorageError::Version {
                path: path.to_path_buf(),
                found: version,
                expected: FORMAT_VERSION,
            });
        }
        let stored = read_u32(page, OFF_CRC);
        let actual = page_checksum(page);
        if stored != actual {
            return Err(bad(format!(
                "checksum {stored:#010x}, computed {actual:#010x}"
            )));
        }
        let stamped = read_u32(page, OFF_PAGE_NO);
        if stamped != page_no {
            return Err(bad(format!("header says page {stamped}")));
        }
        let mut live = 0;
        for s in 0..self.slots_per_page {
            let slot = self.slot(page, s);
            if slot.degree() > self.max_degree {
                return Err(bad(format!(
                    "slot {s} has degree {} > max_degree",
                    slot.degree()
                )));
            }
            live += usize::from(!slot.is_free());
        }
        if live != self.live_count(page) {
            return Err(bad(format!(
                "live count {} but {live} live slots",
                self.live_count(page)
            )));
        }
        Ok(())
    }

    /// Number of occupied slots as recorded in the header.
    pub fn live_count(&self, page: &[u8]) -> usize {
        self.assert_side_file();
        read_u16(page, OFF_LIVE) as usize
    }

    /// The page number stamped in the header (side files), or the edge-page ordinal in the
    /// special space (relation): the name the indirection table gives the page.
    pub fn page_number(&self, page: &[u8]) -> u32 {
        if self.relation {
            crate::pages::aux(page)
        } else {
            read_u32(page, OFF_PAGE_NO)
        }
    }

    /// View of one slot. The degree is clamped to max_degree so an unverified page cannot
    /// make the view read outside the slot.
    pub fn slot<'a>(&self, page: &'a [u8], slot: usize) -> EdgeSlotRef<'a> {
        let at = self.slot_offset(slot);
        read_slot(&page[at..at + self.slot_size])
    }

    /// The slot's edge list if `expected` still owns it; `None` means the list moved or the
    /// slot was reused since the caller resolved it, and the caller must re-resolve.
    pub fn slot_owned_by<'a>(
        &self,
        page: &'a [u8],
        slot: usize,
        expected: VertexId,
    ) -> Option<EdgeSlotRef<'a>> {
        if slot >= self.slots_per_page {
            return None;
        }
        let view = self.slot(page, slot);
        (view.owner == expected).then_some(view)
    }
}

// The slot codec, on exactly one slot's bytes (`8 + 4 * max_degree`, so max_degree is implied
// by the length). Shared with `pages::edge`, whose 8 KiB pages hold the same slots.

/// Stores `neighbours` as `owner`'s edge list in `slot`.
pub(crate) fn write_slot(
    slot: &mut [u8],
    owner: VertexId,
    neighbours: &[VertexId],
) -> Result<(), StorageError> {
    let max_degree = (slot.len() - SLOT_HEADER_SIZE) / 4;
    if owner == FREE_OWNER {
        return Err(StorageError::invalid(
            "vertex id u32::MAX is reserved for free slots",
        ));
    }
    if neighbours.len() > max_degree {
        return Err(StorageError::invalid(format!(
            "vertex {owner} has {} neighbours, more than max_degree {max_degree}",
            neighbours.len(),
        )));
    }
    put_u32(slot, 0, owner);
    put_u16(slot, 4, neighbours.len() as u16);
    put_u16(slot, 6, 0);
    for (i, chunk) in slot[SLOT_HEADER_SIZE..].chunks_exact_mut(4).enumerate() {
        let id = neighbours.get(i).copied().unwrap_or(u32::MAX);
        chunk.copy_from_slice(&id.to_le_bytes());
    }
    Ok(())
}

/// Marks `slot` free and overwrites its old neighbour ids.
pub(crate) fn clear_slot(slot: &mut [u8]) {
    put_u32(slot, 0, FREE_OWNER);
    put_u16(slot, 4, 0);
    put_u16(slot, 6, 0);
    slot[SLOT_HEADER_SIZE..].fill(0xFF);
}

/// View of `slot`, its degree clamped to the slot's capacity so that an unverified page
/// cannot make the view read outside the slot.
pub(crate) fn read_slot(slot: &[u8]) -> EdgeSlotRef<'_> {
    let max_degree = (slot.len() - SLOT_HEADER_SIZE) / 4;
    let degree = read_u16(slot, 4) as usize;
    EdgeSlotRef {
        owner: read_u32(slot, 0),
        degree,
        ids: &slot[SLOT_HEADER_SIZE..SLOT_HEADER_SIZE + degree.min(max_degree) * 4],
    }
}

fn page_checksum(page: &[u8]) -> u32 {
    Crc32::new()
        .update(&page[..OFF_CRC])
        .update(&page[OFF_CRC + 4..])
        .finish()
}

/// One edge list inside a page buffer.
#[derive(Clone, Copy, Debug)]
pub struct EdgeSlotRef<'a> {
    owner: u32,
    degree: usize,
    ids: &'a [u8],
}

impl<'a> EdgeSlotRef<'a> {
    pub fn owner(&self) -> u32 {
        self.owner
    }

    pub fn is_free(&self) -> bool {
        self.owner == FREE_OWNER
    }

    /// Degree as stored (verified pages guarantee it is at most max_degree).
    pub fn degree(&self) -> usize {
        self.degree
    }

    pub fn neighbours(&self) -> impl Iterator<Item = VertexId> + 'a {
        self.ids
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
    }

    pub fn to_vec(&self) -> Vec<VertexId> {
        self.neighbours().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page_with(layout: &EdgePageLayout, page_no: u32, lists: &[(u32, Vec<u32>)]) -> Vec<u8> {
        let mut page = vec![0u8; PAGE_SIZE];
        layout.init_page(&mut page, page_no);
        for (slot, (owner, ids)) in lists.iter().enumerate() {
            layout.put_slot(&mut page, slot, *owner, ids).unwrap();
        }
        layout.seal(&mut page);
        page
    }

    #[test]
    fn geometry_matches_the_paper_and_limits() {
        assert_eq!(EdgePageLayout::new(96).unwrap().slots_per_page(), 10);
        assert_eq!(EdgePageLayout::new(96).unwrap().slot_size(), 392);
        assert_eq!(EdgePageLayout::new(128).unwrap().slots_per_page(), 7);
        assert_eq!(EdgePageLayout::new(64).unwrap().slots_per_page(), 15);
        assert_eq!(EdgePageLayout::max_supported_degree(), 1018);
        assert_eq!(EdgePageLayout::new(1018).unwrap().slots_per_page(), 1);
        let err = EdgePageLayout::new(1019).unwrap_err().to_string();
        assert!(err.contains("does not fit"), "{err}");
        assert!(EdgePageLayout::new(0).is_err());
    }

    #[test]
    fn page_round_trip() {
        let layout = EdgePageLayout::new(96).unwrap();
        let full: Vec<u32> = (1000..1096).collect();
        let lists = vec![(7, vec![1, 2, 3]), (9, vec![]), (11, full.clone())];
        let page = page_with(&layout, 42, &lists);
        layout.verify(Path::new("edges"), &page, 42).unwrap();
        assert_eq!(layout.live_count(&page), 3);
        assert_eq!(layout.page_number(&page), 42);
        assert_eq!(layout.slot(&page, 0).to_vec(), vec![1, 2, 3]);
        assert_eq!(layout.slot(&page, 1).degree(), 0);
        assert_eq!(layout.slot(&page, 1).owner(), 9);
        assert_eq!(layout.slot(&page, 2).to_vec(), full);
        assert!(layout.slot(&page, 3).is_free());
        assert!(layout.slot(&page, 9).is_free());
    }

    #[test]
    fn owner_stamp_detects_moved_and_reused_slots() {
        let layout = EdgePageLayout::new(32).unwrap();
        let mut page = page_with(&layout, 0, &[(5, vec![6, 7]), (8, vec![9])]);
        assert_eq!(
            layout.slot_owned_by(&page, 0, 5).unwrap().to_vec(),
            vec![6, 7]
        );
        // Vertex 5's list moved elsewhere and vertex 12 took the slot.
        layout.put_slot(&mut page, 0, 12, &[1]).unwrap();
        layout.seal(&mut page);
        assert!(layout.slot_owned_by(&page, 0, 5).is_none());
        // Freed slot: nobody owns it.
        layout.free_slot(&mut page, 1);
        layout.seal(&mut page);
        assert!(layout.slot_owned_by(&page, 1, 8).is_none());
        assert_eq!(layout.live_count(&page), 1);
        layout.verify(Path::new("edges"), &page, 0).unwrap();
    }

    #[test]
    fn corruption_and_misplacement_are_detected() {
        let layout = EdgePageLayout::new(16).unwrap();
        let page = page_with(&layout, 3, &[(1, vec![2])]);
        let mut flipped = page.clone();
        flipped[PAGE_HEADER_SIZE + 9] ^= 0x40;
        let err = layout
            .verify(Path::new("edges"), &flipped, 3)
            .unwrap_err()
            .to_string();
        assert!(err.contains("checksum"), "{err}");
        let err = layout
            .verify(Path::new("edges"), &page, 4)
            .unwrap_err()
            .to_string();
        assert!(err.contains("header says page 3"), "{err}");
        let err = layout
            .verify(Path::new("edges"), &page[..100], 3)
            .unwrap_err()
            .to_string();
        assert!(err.contains("100 bytes"), "{err}");
        let mut versioned = page.clone();
        put_u16(&mut versioned, OFF_VERSION, 9);
        let err = layout
            .verify(Path::new("edges"), &versioned, 3)
            .unwrap_err();
        assert!(matches!(err, StorageError::Version { found: 9, .. }));
        assert!(err
            .to_string()
            .contains("index format version 9, this build reads 2: REINDEX"));
    }

    #[test]
    fn bad_slot_input_is_rejected() {
        let layout = EdgePageLayout::new(4).unwrap();
        let mut page = vec![0u8; PAGE_SIZE];
        layout.init_page(&mut page, 0);
        assert!(layout.put_slot(&mut page, 0, 1, &[1, 2, 3, 4, 5]).is_err());
        assert!(layout
            .put_slot(&mut page, layout.slots_per_page(), 1, &[])
            .is_err());
        assert!(layout.put_slot(&mut page, 0, FREE_OWNER, &[]).is_err());
    }
}
