//! PQ code pages: the durable form of the PQ codes, vertex-major, whole codes per page.
//!
//! ```text
//! per_page = floor(8152 / pq_bytes)
//! page ordinal v / per_page, code of v at byte 24 + (v % per_page) * pq_bytes, pq_bytes long
//! special: kind 6 = codes, aux = page ordinal
//! ```
//!
//! Codes do not straddle pages so that each page can be loaded into (and logged for) the
//! runtime copy on its own; the runtime copy is the flat `capacity * pq_bytes` array the
//! engine uses today, so a page's codes are one contiguous copy ([`CodePages::codes`]).

use super::{EntryLayout, PageError, PageKind};
use crate::storage::StorageError;
use crate::VertexId;

/// Geometry of code pages for one index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodePages {
    entries: EntryLayout,
}

impl CodePages {
    /// Pages for codes of `pq_bytes` bytes (1..=8152).
    pub fn new(pq_bytes: usize) -> Result<Self, StorageError> {
        Ok(CodePages {
            entries: EntryLayout::new(pq_bytes)?,
        })
    }

    pub fn pq_bytes(&self) -> usize {
        self.entries.entry_size()
    }

    pub fn per_page(&self) -> usize {
        self.entries.per_page()
    }

    /// (page ordinal, byte offset in the page) of `v`'s code.
    pub fn locate(&self, v: VertexId) -> (u32, usize) {
        self.entries.locate(v)
    }

    /// Pages needed for `vertices` codes.
    pub fn pages_for(&self, vertices: u64) -> u64 {
        self.entries.pages_for(vertices)
    }

    fn offset(&self, page: &[u8], v: VertexId) -> usize {
        let (ordinal, at) = self.locate(v);
        debug_assert_eq!(
            super::aux(page),
            ordinal,
            "vertex {v} is not on this code page"
        );
        at
    }

    /// Formats an empty (all-zero codes) page of `ordinal` at `block`.
    pub fn init_page(&self, page: &mut [u8], block: u32, ordinal: u32) {
        super::init(page, PageKind::Codes, block);
        super::set_aux(page, ordinal);
    }

    pub fn verify(&self, page: &[u8], block: u32, ordinal: u32) -> Result<(), PageError> {
        super::verify_ordinal(page, PageKind::Codes, block, ordinal)
    }

    /// The code of `v`.
    pub fn code<'a>(&self, page: &'a [u8], v: VertexId) -> &'a [u8] {
        let at = self.offset(page, v);
        &page[at..at + self.pq_bytes()]
    }

    pub fn set_code(&self, page: &mut [u8], v: VertexId, code: &[u8]) -> Result<(), StorageError> {
        if code.len() != self.pq_bytes() {
            return Err(StorageError::invalid(format!(
                "PQ code is {} bytes, the index's codes are {}",
                code.len(),
                self.pq_bytes()
            )));
        }
        let at = self.offset(page, v);
        page[at..at + code.len()].copy_from_slice(code);
        Ok(())
    }

    /// All codes of the page (of vertices `ordinal * per_page ..`), contiguous.
    pub fn codes<'a>(&self, page: &'a [u8]) -> &'a [u8] {
        self.entries.entries(page)
    }

    pub fn codes_mut<'a>(&self, page: &'a mut [u8]) -> &'a mut [u8] {
        self.entries.entries_mut(page)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{seal, BLOCK_SIZE, PAYLOAD_OFFSET, PAYLOAD_SIZE, SPECIAL_OFFSET};
    use super::*;

    #[test]
    fn geometry() {
        for pq_bytes in [1, 7, 8, 16, 32, 48, 64, 96, 192, 8151, 8152] {
            let c = CodePages::new(pq_bytes).unwrap();
            assert_eq!(c.per_page(), 8152 / pq_bytes, "pq_bytes {pq_bytes}");
            let last = c.per_page() as u32 - 1;
            let (ordinal, at) = c.locate(last);
            assert_eq!(ordinal, 0);
            assert!(at + pq_bytes <= SPECIAL_OFFSET);
            assert_eq!(c.locate(last + 1), (1, PAYLOAD_OFFSET));
            assert_eq!(
                c.codes(&vec![0u8; BLOCK_SIZE]).len(),
                c.per_page() * pq_bytes
            );
        }
        assert_eq!(CodePages::new(32).unwrap().per_page(), 254);
        assert_eq!(CodePages::new(32).unwrap().pages_for(255), 2);
        assert!(CodePages::new(0).is_err());
        assert!(CodePages::new(PAYLOAD_SIZE + 1).is_err());
    }

    #[test]
    fn round_trip() {
        let c = CodePages::new(48).unwrap();
        let ordinal = 3;
        let first = ordinal * c.per_page() as u32;
        let mut page = vec![0u8; BLOCK_SIZE];
        c.init_page(&mut page, 900, ordinal);
        let code_of = |v: u32| -> Vec<u8> { (0..48).map(|i| (v as u8).wrapping_mul(i)).collect() };
        for v in first..first + c.per_page() as u32 {
            c.set_code(&mut page, v, &code_of(v)).unwrap();
        }
        seal(&mut page);
        c.verify(&page, 900, ordinal).unwrap();
        for v in first..first + c.per_page() as u32 {
            assert_eq!(c.code(&page, v), code_of(v).as_slice());
        }
        // The page's codes are the flat array's slice for these vertices.
        let flat: Vec<u8> = (first..first + c.per_page() as u32)
            .flat_map(code_of)
            .collect();
        assert_eq!(c.codes(&page), flat.as_slice());
        assert!(c.set_code(&mut page, first, &[1, 2]).is_err());
        assert!(matches!(
            c.verify(&page, 900, 4),
            Err(PageError::WrongOrdinal { .. })
        ));
        c.codes_mut(&mut page)[5] ^= 0x10;
        assert!(matches!(
            c.verify(&page, 900, ordinal),
            Err(PageError::Checksum { .. })
        ));
    }
}
