//! Vector pages of the relation layout: fixed-size vector slots laid out as one byte stream
//! over the payloads of the consecutive pages of a vector extent.
//!
//! ```text
//! slot (slot_size = 4 * dim + 12, as in storage::vector_file):
//!        0 vector, dim x f32 | 4*dim heap block u32 | 4*dim+4 heap offset u16
//!        4*dim+6 reserved u16 (0) | 4*dim+8 owner vertex u32 (u32::MAX = free)
//! extent (128 blocks): stream = payload(page 0) ++ payload(page 1) ++ ... ++ payload(page 127)
//!        (8152 bytes each; headers and special spaces are skipped)
//!        slot i of the extent at stream byte i * slot_size
//!        slots_per_extent = floor(128 * 8152 / slot_size); the rest of the stream is zero
//! vector slot v: extent v / slots_per_extent, slot v % slots_per_extent within it
//! page:  special kind 9 = vector, aux = the page's ordinal among vector pages
//!        (extent ordinal * 128 + page within the extent)
//! ```
//!
//! Why a stream and not whole slots per page: at 784 dimensions a slot is 3,148 bytes, two per
//! page would leave 1,856 bytes (23%) unused, and slots of more than 8152 bytes (dim > 2035)
//! could not be stored at all. Slots never cross an extent boundary because extents of one
//! kind need not be adjacent blocks.
//!
//! Reads are O_DIRECT in 4 KiB sectors: [`VectorPages::sectors`] gives the aligned covering
//! range of a slot, which includes any page headers and special spaces it straddles, so a
//! slot inside one half of a block still costs one 4 KiB read (as in today's flat file); reads
//! through the page cache take each [`VectorPages::pieces`] exactly. Such
//! a partial read cannot check the page CRC; like today's vector file, slots rely on the owner
//! stamp (a slot is written before its vertex is published and never rewritten in place while
//! reachable). Every u32 and f32 field is 4-aligned in the stream and the payload is a
//! multiple of 4 bytes, so no field straddles a page.

use super::{PageError, PageKind, BLOCK_SIZE, EXTENT_BLOCKS, PAYLOAD_OFFSET, PAYLOAD_SIZE};
use crate::storage::{HeapTid, StorageError, VectorLayout, FREE_OWNER};
use crate::VertexId;

/// O_DIRECT read unit.
pub const SECTOR_SIZE: usize = 4096;
const SECTORS_PER_BLOCK: u32 = (BLOCK_SIZE / SECTOR_SIZE) as u32;
/// Stream bytes of one extent.
const EXTENT_STREAM: usize = EXTENT_BLOCKS as usize * PAYLOAD_SIZE;

/// One contiguous part of a slot inside one page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotPiece {
    /// Page within the slot's extent (0..128): block = extent's first block + page.
    pub page: u32,
    /// Byte offset in that page (inside the payload).
    pub offset: usize,
    pub len: usize,
}

/// The pieces of one slot, in stream order.
#[derive(Clone, Debug)]
pub struct Pieces {
    stream: usize,
    remaining: usize,
}

impl Iterator for Pieces {
    type Item = SlotPiece;

    fn next(&mut self) -> Option<SlotPiece> {
        if self.remaining == 0 {
            return None;
        }
        let page = self.stream / PAYLOAD_SIZE;
        let within = self.stream % PAYLOAD_SIZE;
        let len = (PAYLOAD_SIZE - within).min(self.remaining);
        self.stream += len;
        self.remaining -= len;
        Some(SlotPiece {
            page: page as u32,
            offset: PAYLOAD_OFFSET + within,
            len,
        })
    }
}

/// A run of 4 KiB sectors of one extent: `count` sectors starting at sector `sector` (0 or 1)
/// of page `page`. The pages of an extent are consecutive blocks, so this is one read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SectorRange {
    pub page: u32,
    pub sector: u32,
    pub count: u32,
}

impl SectorRange {
    /// Byte offset of the range from the start of the extent's first block.
    pub fn extent_offset(&self) -> usize {
        self.page as usize * BLOCK_SIZE + self.sector as usize * SECTOR_SIZE
    }

    /// Bytes to read.
    pub fn len(&self) -> usize {
        self.count as usize * SECTOR_SIZE
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Byte offset of the range inside block `page` (0 or 4096), for a segment-file offset.
    pub fn offset_in_block(&self) -> usize {
        self.sector as usize * SECTOR_SIZE
    }

    /// Pages (within the extent) the range touches, first and last.
    pub fn pages(&self) -> (u32, u32) {
        let first = self.page * SECTORS_PER_BLOCK + self.sector;
        let last = first + self.count - 1;
        (self.page, last / SECTORS_PER_BLOCK)
    }
}

/// Geometry of the vector stream for one index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VectorPages {
    layout: VectorLayout,
    slots_per_extent: u32,
}

impl VectorPages {
    pub fn new(dim: usize) -> Result<Self, StorageError> {
        let layout = VectorLayout::new(dim)?;
        let slots_per_extent = EXTENT_STREAM / layout.slot_size();
        if slots_per_extent == 0 {
            return Err(StorageError::invalid(format!(
                "a {dim}-dimensional vector slot does not fit a vector extent"
            )));
        }
        Ok(VectorPages {
            layout,
            slots_per_extent: slots_per_extent as u32,
        })
    }

    /// The slot codec (`encode_slot`, `parse_slot`), shared with the flat vector file.
    pub fn layout(&self) -> &VectorLayout {
        &self.layout
    }

    pub fn slot_size(&self) -> usize {
        self.layout.slot_size()
    }

    pub fn slots_per_extent(&self) -> u32 {
        self.slots_per_extent
    }

    /// (vector extent ordinal, slot within the extent) of vector slot `slot`.
    pub fn extent_of(&self, slot: u32) -> (u32, u32) {
        (slot / self.slots_per_extent, slot % self.slots_per_extent)
    }

    /// Byte offset of `slot` in its extent's stream.
    fn stream_offset(&self, slot: u32) -> usize {
        (slot % self.slots_per_extent) as usize * self.slot_size()
    }

    /// Vector pages needed to hold slots `0..slots`: whole extents, then the pages the last
    /// extent's slots reach.
    pub fn pages_for(&self, slots: u64) -> u64 {
        let spe = u64::from(self.slots_per_extent);
        let (full, rest) = (slots / spe, slots % spe);
        let tail = (rest as usize * self.slot_size()).div_ceil(PAYLOAD_SIZE) as u64;
        full * u64::from(EXTENT_BLOCKS) + tail
    }

    /// Where the bytes of `slot` are, page by page, relative to its extent.
    pub fn pieces(&self, slot: u32) -> Pieces {
        Pieces {
            stream: self.stream_offset(slot),
            remaining: self.slot_size(),
        }
    }

    /// (first page within the extent, number of pages) holding `slot`.
    pub fn page_span(&self, slot: u32) -> (u32, u32) {
        let start = self.stream_offset(slot);
        let first = start / PAYLOAD_SIZE;
        let last = (start + self.slot_size() - 1) / PAYLOAD_SIZE;
        (first as u32, (last - first + 1) as u32)
    }

    /// The 4 KiB-aligned sectors covering `slot`, for one O_DIRECT read.
    pub fn sectors(&self, slot: u32) -> SectorRange {
        let start = self.stream_offset(slot);
        let end = start + self.slot_size() - 1;
        let first_byte =
            (start / PAYLOAD_SIZE) * BLOCK_SIZE + PAYLOAD_OFFSET + start % PAYLOAD_SIZE;
        let last_byte = (end / PAYLOAD_SIZE) * BLOCK_SIZE + PAYLOAD_OFFSET + end % PAYLOAD_SIZE;
        let (first, last) = (first_byte / SECTOR_SIZE, last_byte / SECTOR_SIZE);
        let first = first as u32;
        SectorRange {
            page: first / SECTORS_PER_BLOCK,
            sector: first % SECTORS_PER_BLOCK,
            count: last as u32 - first + 1,
        }
    }

    /// Formats `page` as the vector page with `ordinal` among vector pages at `block`, every
    /// slot whose owner stamp lies in it marked free. Call [`super::seal`] after writing slots.
    pub fn init_page(&self, page: &mut [u8], block: u32, ordinal: u32) {
        super::init(page, PageKind::Vector, block);
        super::set_aux(page, ordinal);
        let (_, in_extent) = super::extent_page(ordinal);
        let lo = in_extent as usize * PAYLOAD_SIZE;
        let hi = lo + PAYLOAD_SIZE;
        let size = self.slot_size();
        let last = (hi / size + 1).min(self.slots_per_extent as usize);
        for i in lo / size..last {
            let owner_at = i * size + size - 4;
            if (lo..hi).contains(&owner_at) {
                super::set_u32(page, PAYLOAD_OFFSET + owner_at - lo, FREE_OWNER);
            }
        }
    }

    /// Checks a whole vector page read through the buffer manager or in full.
    pub fn verify_page(&self, page: &[u8], block: u32, ordinal: u32) -> Result<(), PageError> {
        super::verify_ordinal(page, PageKind::Vector, block, ordinal)
    }

    /// Copies one slot's bytes (`slot_size`) into `pages`, consecutive whole pages of the
    /// slot's extent starting at page `first_page`. The touched pages must be sealed again.
    pub fn scatter(
        &self,
        slot: u32,
        bytes: &[u8],
        pages: &mut [u8],
        first_page: u32,
    ) -> Result<(), StorageError> {
        self.check_slot_len(bytes.len())?;
        let base = first_page as usize * BLOCK_SIZE;
        // Check every piece before the first copy, so a refused write changes nothing.
        for piece in self.pieces(slot) {
            self.buffer_offset(&piece, base, pages.len())?;
        }
        let mut done = 0;
        for piece in self.pieces(slot) {
            let at = self.buffer_offset(&piece, base, pages.len())?;
            pages[at..at + piece.len].copy_from_slice(&bytes[done..done + piece.len]);
            done += piece.len;
        }
        Ok(())
    }

    /// Encodes a slot and scatters it into `pages` (see [`VectorPages::scatter`]).
    pub fn write_slot(
        &self,
        slot: u32,
        vector: &[f32],
        owner: VertexId,
        tid: HeapTid,
        pages: &mut [u8],
        first_page: u32,
    ) -> Result<(), StorageError> {
        let mut bytes = vec![0u8; self.slot_size()];
        self.layout.encode_slot(&mut bytes, vector, owner, tid)?;
        self.scatter(slot, &bytes, pages, first_page)
    }

    /// Gathers one slot's bytes into `out` (`slot_size`) from `pages`, consecutive whole pages
    /// of the slot's extent starting at page `first_page`. Parse `out` with
    /// `layout().parse_slot`.
    pub fn gather(
        &self,
        slot: u32,
        pages: &[u8],
        first_page: u32,
        out: &mut [u8],
    ) -> Result<(), StorageError> {
        self.gather_from(slot, pages, first_page as usize * BLOCK_SIZE, out)
    }

    /// Gathers one slot's bytes into `out` from `sectors`, the bytes of
    /// [`VectorPages::sectors`]`(slot)` as read (a longer buffer is fine).
    pub fn gather_sectors(
        &self,
        slot: u32,
        sectors: &[u8],
        out: &mut [u8],
    ) -> Result<(), StorageError> {
        let range = self.sectors(slot);
        self.gather_from(slot, sectors, range.extent_offset(), out)
    }

    /// `buf` holds the extent's bytes from extent byte `base` on.
    fn gather_from(
        &self,
        slot: u32,
        buf: &[u8],
        base: usize,
        out: &mut [u8],
    ) -> Result<(), StorageError> {
        self.check_slot_len(out.len())?;
        let mut done = 0;
        for piece in self.pieces(slot) {
            let at = self.buffer_offset(&piece, base, buf.len())?;
            out[done..done + piece.len].copy_from_slice(&buf[at..at + piece.len]);
            done += piece.len;
        }
        Ok(())
    }

    fn check_slot_len(&self, len: usize) -> Result<(), StorageError> {
        if len != self.slot_size() {
            return Err(StorageError::invalid(format!(
                "vector slot buffer is {len} bytes, slots are {}",
                self.slot_size()
            )));
        }
        Ok(())
    }

    /// Offset of `piece` in a buffer holding the extent from byte `base`, or an error when the
    /// buffer does not cover it.
    fn buffer_offset(
        &self,
        piece: &SlotPiece,
        base: usize,
        buf_len: usize,
    ) -> Result<usize, StorageError> {
        let at = (piece.page as usize * BLOCK_SIZE + piece.offset)
            .checked_sub(base)
            .filter(|at| at + piece.len <= buf_len);
        at.ok_or_else(|| {
            StorageError::invalid(format!(
                "buffer of {buf_len} bytes at extent byte {base} does not cover vector page {} bytes {}..{}",
                piece.page,
                piece.offset,
                piece.offset + piece.len
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn vector_of(dim: usize, slot: u32) -> Vec<f32> {
        (0..dim)
            .map(|i| slot as f32 * 0.25 - i as f32 * 1.5)
            .collect()
    }

    fn tid(slot: u32) -> HeapTid {
        HeapTid {
            block: slot * 3 + 1,
            offset: (slot % 200 + 1) as u16,
        }
    }

    /// A whole extent (128 pages) at blocks 1000.., `slots` slots written and sealed.
    fn extent_with(pages: &VectorPages, extent: u32, slots: u32) -> Vec<u8> {
        let mut buf = vec![0u8; EXTENT_BLOCKS as usize * BLOCK_SIZE];
        for (p, page) in buf.chunks_exact_mut(BLOCK_SIZE).enumerate() {
            let ordinal = extent * EXTENT_BLOCKS + p as u32;
            pages.init_page(page, 1000 + p as u32, ordinal);
        }
        let first = extent * pages.slots_per_extent();
        for s in first..first + slots {
            let v = vector_of(pages.layout().dim(), s);
            pages.write_slot(s, &v, s, tid(s), &mut buf, 0).unwrap();
        }
        buf.chunks_exact_mut(BLOCK_SIZE)
            .for_each(super::super::seal);
        buf
    }

    #[test]
    fn geometry() {
        let p = VectorPages::new(784).unwrap();
        assert_eq!(p.slot_size(), 3148);
        assert_eq!(p.slots_per_extent(), 128 * 8152 / 3148);
        assert_eq!(p.extent_of(331), (1, 0));
        assert_eq!(p.extent_of(330), (0, 330));
        assert_eq!(p.page_span(0), (0, 1));
        assert_eq!(p.page_span(2), (0, 2), "bytes 6296..9444 of the stream");
        assert_eq!(p.pages_for(0), 0);
        assert_eq!(p.pages_for(1), 1);
        assert_eq!(p.pages_for(3), 2);
        assert_eq!(p.pages_for(331), 128);
        assert_eq!(p.pages_for(332), 129);
        // Slot 0: bytes 24..3172 of page 0, one sector; slot 1 crosses byte 4096.
        assert_eq!(
            p.sectors(0),
            SectorRange {
                page: 0,
                sector: 0,
                count: 1
            }
        );
        assert_eq!(p.sectors(1).count, 2);
        // dim 2036: slot 8156 > 8152 bytes, every slot straddles.
        let p = VectorPages::new(2036).unwrap();
        assert!((0..p.slots_per_extent()).all(|s| p.page_span(s).1 >= 2));
        // dim 16000: 64012 bytes, slot 0 spans 8 pages.
        let p = VectorPages::new(16000).unwrap();
        assert_eq!(p.page_span(0), (0, 8));
        assert_eq!(p.slots_per_extent(), 16);
        assert!(VectorPages::new(0).is_err());
        assert!(VectorPages::new(16001).is_err());
    }

    #[test]
    fn pieces_and_sectors_cover_each_slot_exactly() {
        for dim in [1, 3, 784, 1536, 2036, 16000] {
            let p = VectorPages::new(dim).unwrap();
            let size = p.slot_size();
            let spe = p.slots_per_extent();
            assert!(spe as usize * size <= EXTENT_STREAM);
            assert!((spe as usize + 1) * size > EXTENT_STREAM);
            let mut one_sector = 0;
            for s in 0..spe {
                let pieces: Vec<SlotPiece> = p.pieces(s).collect();
                assert_eq!(pieces.iter().map(|x| x.len).sum::<usize>(), size);
                let (first, n) = p.page_span(s);
                assert_eq!(pieces.len() as u32, n);
                let mut touched = BTreeSet::new();
                for (k, piece) in pieces.iter().enumerate() {
                    assert_eq!(piece.page, first + k as u32);
                    assert!(piece.page < EXTENT_BLOCKS);
                    assert!(piece.offset >= PAYLOAD_OFFSET);
                    assert!(piece.offset + piece.len <= super::super::SPECIAL_OFFSET);
                    if k > 0 {
                        assert_eq!(piece.offset, PAYLOAD_OFFSET, "continues at the payload");
                    }
                    let at = piece.page as usize * BLOCK_SIZE + piece.offset;
                    touched.extend(at / SECTOR_SIZE..=(at + piece.len - 1) / SECTOR_SIZE);
                }
                // The covering range is exactly the sectors the slot touches.
                let r = p.sectors(s);
                let first_sector = (r.extent_offset() / SECTOR_SIZE) as u32;
                let expected: BTreeSet<usize> = (first_sector..first_sector + r.count)
                    .map(|x| x as usize)
                    .collect();
                assert_eq!(touched, expected, "dim {dim} slot {s}");
                assert!(r.count as usize <= size.div_ceil(SECTOR_SIZE) + 1);
                assert_eq!(r.pages(), (first, first + n - 1));
                // One 4 KiB read exactly when the slot lies inside one half of a block.
                let start = pieces[0].offset;
                let in_half = n == 1 && start / SECTOR_SIZE == (start + size - 1) / SECTOR_SIZE;
                assert_eq!(r.count == 1, in_half, "dim {dim} slot {s}");
                one_sector += usize::from(r.count == 1);
            }
            if dim == 784 {
                // As in the flat file, about (4096 - 3148) / 4096 of the slots need one read.
                assert!(
                    one_sector * 100 / spe as usize >= 18,
                    "{one_sector} of {spe}"
                );
            }
        }
    }

    #[test]
    fn round_trips_through_pages_and_sectors() {
        for dim in [1, 3, 784, 1536, 2036, 16000] {
            let p = VectorPages::new(dim).unwrap();
            let spe = p.slots_per_extent();
            let extent = 2;
            let buf = extent_with(&p, extent, spe);
            for (k, page) in buf.chunks_exact(BLOCK_SIZE).enumerate() {
                p.verify_page(page, 1000 + k as u32, extent * EXTENT_BLOCKS + k as u32)
                    .unwrap();
            }
            let mut out = vec![0u8; p.slot_size()];
            let step = (spe / 97).max(1);
            for s in (extent * spe..(extent + 1) * spe).step_by(step as usize) {
                let expect_vector = vector_of(dim, s);
                // From the whole extent.
                p.gather(s, &buf, 0, &mut out).unwrap();
                let slot = p.layout().parse_slot(&out).unwrap();
                assert_eq!(slot.vector(), expect_vector, "dim {dim} slot {s}");
                assert_eq!(slot.tid(), tid(s));
                assert!(slot.is_owned_by(s));
                // From just the slot's pages.
                let (first, n) = p.page_span(s);
                let span = &buf[first as usize * BLOCK_SIZE..(first + n) as usize * BLOCK_SIZE];
                let mut again = vec![0u8; p.slot_size()];
                p.gather(s, span, first, &mut again).unwrap();
                assert_eq!(again, out);
                // From the covering sectors, as an O_DIRECT read returns them.
                let r = p.sectors(s);
                let sectors = &buf[r.extent_offset()..r.extent_offset() + r.len()];
                again.fill(0);
                p.gather_sectors(s, sectors, &mut again).unwrap();
                assert_eq!(again, out);
                // A buffer that misses the last sector is refused, not read past.
                assert!(p
                    .gather_sectors(s, &sectors[..sectors.len() - SECTOR_SIZE], &mut again)
                    .is_err());
            }
        }
    }

    #[test]
    fn fresh_pages_read_as_free_slots() {
        for dim in [3, 2036] {
            let p = VectorPages::new(dim).unwrap();
            let buf = extent_with(&p, 0, 0);
            let mut out = vec![0u8; p.slot_size()];
            for s in [0, 1, p.slots_per_extent() / 2, p.slots_per_extent() - 1] {
                p.gather(s, &buf, 0, &mut out).unwrap();
                assert_eq!(p.layout().parse_slot(&out).unwrap().owner(), FREE_OWNER);
            }
            // Nothing beyond the last slot's owner stamp was touched.
            let end = p.slots_per_extent() as usize * p.slot_size();
            let (page, within) = (end / PAYLOAD_SIZE, end % PAYLOAD_SIZE);
            if page < EXTENT_BLOCKS as usize {
                let at = page * BLOCK_SIZE + PAYLOAD_OFFSET + within;
                let stop = page * BLOCK_SIZE + super::super::SPECIAL_OFFSET;
                assert!(buf[at..stop].iter().all(|&b| b == 0));
            }
        }
    }

    #[test]
    fn rewrite_needs_reseal_and_bad_buffers_are_refused() {
        let p = VectorPages::new(2036).unwrap();
        let mut buf = extent_with(&p, 0, 3);
        let (first, n) = p.page_span(1);
        assert_eq!(n, 2);
        p.write_slot(1, &vector_of(2036, 9), 9, tid(9), &mut buf, 0)
            .unwrap();
        for k in first..first + n {
            let page = &buf[k as usize * BLOCK_SIZE..(k as usize + 1) * BLOCK_SIZE];
            assert!(matches!(
                p.verify_page(page, 1000 + k, k),
                Err(PageError::Checksum { .. })
            ));
        }
        let page0 = &buf[..BLOCK_SIZE];
        assert!(matches!(
            p.verify_page(page0, 1000, 5),
            Err(PageError::WrongOrdinal { expected: 5, .. })
        ));
        let mut small = vec![0u8; BLOCK_SIZE];
        let err = p
            .write_slot(1, &vector_of(2036, 1), 1, tid(1), &mut small, first)
            .unwrap_err();
        assert!(err.to_string().contains("does not cover"), "{err}");
        assert!(
            small.iter().all(|&b| b == 0),
            "a refused write changes nothing"
        );
        let mut short = vec![0u8; 10];
        assert!(p.gather(1, &buf, 0, &mut short).is_err());
        assert!(p.scatter(1, &short, &mut buf, 0).is_err());
        // A buffer starting after the slot's first page.
        let mut out = vec![0u8; p.slot_size()];
        assert!(p.gather(1, &buf[BLOCK_SIZE * 2..], 2, &mut out).is_err());
    }
}
