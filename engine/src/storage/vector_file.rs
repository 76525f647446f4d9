//! Vector file: a 4 KiB header, then dense fixed-size slots, one per stored vector.
//!
//! ```text
//! header (4096 B): 0 magic "NVVF" u32 | 4 version u32 | 8 dim u32 | 12 slot size u32
//!                  16 crc32 of bytes 0..16 u32 | zero padding to 4096
//! slot i at 4096 + i * slot_size:
//!                  0 vector, dim x f32 | 4*dim heap block u32 | 4*dim+4 heap offset u16
//!                  4*dim+6 reserved u16 (0) | 4*dim+8 owner vertex u32 (u32::MAX = free)
//! slot_size = 4 * dim + 12
//! ```
//!
//! Slots are *not* padded to 4 KiB: at 768 dimensions a slot is 3,084 bytes, and padding
//! would cost a third more space and no fewer reads on average (the paper stores vectors
//! densely too, digest §1.3.1). A slot therefore straddles at most two 4 KiB sectors when
//! `slot_size <= 4096`; the reader fetches the aligned covering range. Slot sizes are a
//! multiple of 4 and the slot area starts at 4096, so every f32 and u32 is 4-byte aligned in
//! a 4096-aligned read buffer. The 4 KiB header keeps the slot area sector-aligned and lets a
//! reader check the dimension before trusting any slot. The owner stamp plays the same role
//! as in edge slots: a reader notices a slot that was freed or reused.

use super::checksum::crc32;
use super::error::StorageError;
use super::{
    put_u16, put_u32, read_u16, read_u32, verify_header_prefix, FORMAT_VERSION, FREE_OWNER,
    PAGE_SIZE,
};
use crate::VertexId;
use std::path::Path;

pub const VECTOR_MAGIC: u32 = u32::from_le_bytes(*b"NVVF");
pub const VECTOR_FILE_HEADER_SIZE: usize = PAGE_SIZE;
const SLOT_TRAILER_SIZE: usize = 12;

/// Heap tuple identifier as PostgreSQL's ItemPointer: block number and 1-based line pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct HeapTid {
    pub block: u32,
    pub offset: u16,
}

/// Geometry of vector slots for one index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VectorLayout {
    dim: usize,
    slot_size: usize,
}

impl VectorLayout {
    pub fn new(dim: usize) -> Result<Self, StorageError> {
        if dim == 0 || dim > crate::MAX_DIM {
            return Err(StorageError::invalid(format!(
                "vector dimension {dim} is outside 1..={}",
                crate::MAX_DIM
            )));
        }
        Ok(VectorLayout {
            dim,
            slot_size: dim * 4 + SLOT_TRAILER_SIZE,
        })
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    pub fn slot_size(&self) -> usize {
        self.slot_size
    }

    /// Byte offset of `slot` in the file.
    pub fn slot_offset(&self, slot: u32) -> u64 {
        VECTOR_FILE_HEADER_SIZE as u64 + slot as u64 * self.slot_size as u64
    }

    /// File length needed to hold `slots` slots, rounded up to whole 4 KiB sectors so that an
    /// O_DIRECT read of the last slot's covering range never runs past the end of the file.
    pub fn file_len(&self, slots: u32) -> u64 {
        let end = self.slot_offset(slots);
        end.div_ceil(PAGE_SIZE as u64) * PAGE_SIZE as u64
    }

    /// Number of whole slots a file of `len` bytes holds.
    pub fn slots_in(&self, len: u64) -> u64 {
        len.saturating_sub(VECTOR_FILE_HEADER_SIZE as u64) / self.slot_size as u64
    }

    pub fn encode_header(&self) -> Vec<u8> {
        let mut header = vec![0u8; VECTOR_FILE_HEADER_SIZE];
        put_u32(&mut header, 0, VECTOR_MAGIC);
        put_u32(&mut header, 4, FORMAT_VERSION);
        put_u32(&mut header, 8, self.dim as u32);
        put_u32(&mut header, 12, self.slot_size as u32);
        let crc = crc32(&header[..16]);
        put_u32(&mut header, 16, crc);
        header
    }

    /// Checks a header read from `path` against this layout.
    pub fn verify_header(&self, path: &Path, header: &[u8]) -> Result<(), StorageError> {
        if header.len() < 20 {
            return Err(StorageError::corrupt(path, "truncated header"));
        }
        verify_header_prefix(path, header, VECTOR_MAGIC, 16)?;
        let (dim, slot_size) = (read_u32(header, 8) as usize, read_u32(header, 12) as usize);
        if dim != self.dim || slot_size != self.slot_size {
            return Err(StorageError::corrupt(
                path,
                format!(
                    "header says dim {dim}, slot size {slot_size}; manifest says dim {}, slot size {}",
                    self.dim, self.slot_size
                ),
            ));
        }
        Ok(())
    }

    /// Writes one slot into `out` (exactly `slot_size` bytes).
    pub fn encode_slot(
        &self,
        out: &mut [u8],
        vector: &[f32],
        owner: VertexId,
        tid: HeapTid,
    ) -> Result<(), StorageError> {
        if vector.len() != self.dim {
            return Err(StorageError::invalid(format!(
                "vector has {} dimensions, index has {}",
                vector.len(),
                self.dim
            )));
        }
        if out.len() != self.slot_size {
            return Err(StorageError::invalid(format!(
                "vector slot buffer is {} bytes, slots are {}",
                out.len(),
                self.slot_size
            )));
        }
        if owner == FREE_OWNER {
            return Err(StorageError::invalid(
                "vertex id u32::MAX is reserved for free slots",
            ));
        }
        let (values, trailer) = out.split_at_mut(self.dim * 4);
        for (chunk, v) in values.chunks_exact_mut(4).zip(vector) {
            chunk.copy_from_slice(&v.to_le_bytes());
        }
        put_u32(trailer, 0, tid.block);
        put_u16(trailer, 4, tid.offset);
        put_u16(trailer, 6, 0);
        put_u32(trailer, 8, owner);
        Ok(())
    }

    /// Appends the vectors and TIDs of the raw slots `raw` (one `slot_size` each, in the order
    /// of `ids`) as a search loads them, checked after the read: the vertex must still be a
    /// result candidate (`entry` live, not deleted) and the slot must hold the row its entry
    /// names. Otherwise the vertex was deleted, or freed (and maybe reused) by a consolidation
    /// since the search saw it: it is reported as vanished (a NaN vector, which ranks it out),
    /// never as someone else's row. A current entry whose slot another vertex owns is corrupt.
    pub fn accept_loaded(
        &self,
        ids: impl Iterator<Item = VertexId>,
        raw: &[u8],
        entry: impl Fn(VertexId) -> Option<super::IndirEntry>,
        vectors: &mut Vec<f32>,
        tids: &mut Vec<HeapTid>,
    ) -> std::io::Result<()> {
        let data_error = |e: String| std::io::Error::new(std::io::ErrorKind::InvalidData, e);
        for (id, bytes) in ids.zip(raw.chunks_exact(self.slot_size())) {
            let slot = self
                .parse_slot(bytes)
                .map_err(|e| data_error(e.to_string()))?;
            let at = vectors.len();
            vectors.resize(at + self.dim(), 0.0);
            let current =
                entry(id).is_some_and(|e| e.is_live() && !e.is_deleted() && e.tid == slot.tid());
            if current && slot.is_owned_by(id) {
                slot.copy_vector_into(&mut vectors[at..]);
                tids.push(slot.tid());
            } else if current {
                return Err(data_error(format!(
                    "vector slot {id} belongs to vertex {}",
                    slot.owner()
                )));
            } else {
                vectors[at..].fill(f32::NAN);
                tids.push(HeapTid::default());
            }
        }
        Ok(())
    }

    /// Parses one slot's bytes (exactly `slot_size`).
    pub fn parse_slot<'a>(&self, bytes: &'a [u8]) -> Result<VectorSlotRef<'a>, StorageError> {
        if bytes.len() != self.slot_size {
            return Err(StorageError::invalid(format!(
                "vector slot is {} bytes, expected {}",
                bytes.len(),
                self.slot_size
            )));
        }
        let (values, trailer) = bytes.split_at(self.dim * 4);
        Ok(VectorSlotRef {
            values,
            tid: HeapTid {
                block: read_u32(trailer, 0),
                offset: read_u16(trailer, 4),
            },
            owner: read_u32(trailer, 8),
        })
    }
}

/// One decoded vector slot, borrowing the read buffer.
#[derive(Clone, Copy, Debug)]
pub struct VectorSlotRef<'a> {
    values: &'a [u8],
    tid: HeapTid,
    owner: u32,
}

impl VectorSlotRef<'_> {
    pub fn owner(&self) -> u32 {
        self.owner
    }

    pub fn tid(&self) -> HeapTid {
        self.tid
    }

    /// Whether `vertex` still owns this slot (false for a freed or reused slot).
    pub fn is_owned_by(&self, vertex: VertexId) -> bool {
        self.owner == vertex
    }

    /// Decodes the vector into `out` (length dim).
    pub fn copy_vector_into(&self, out: &mut [f32]) {
        for (o, c) in out.iter_mut().zip(self.values.chunks_exact(4)) {
            *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        }
    }

    pub fn vector(&self) -> Vec<f32> {
        let mut v = vec![0.0; self.values.len() / 4];
        self.copy_vector_into(&mut v);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_round_trip_and_geometry() {
        let layout = VectorLayout::new(768).unwrap();
        assert_eq!(layout.slot_size(), 3084);
        assert_eq!(layout.slot_offset(2), 4096 + 2 * 3084);
        assert_eq!(layout.file_len(3), 16384);
        let v: Vec<f32> = (0..768).map(|i| i as f32 * 0.5 - 7.25).collect();
        let tid = HeapTid {
            block: 123_456,
            offset: 17,
        };
        let mut buf = vec![0u8; layout.slot_size()];
        layout.encode_slot(&mut buf, &v, 99, tid).unwrap();
        let slot = layout.parse_slot(&buf).unwrap();
        assert_eq!(slot.vector(), v);
        assert_eq!(slot.tid(), tid);
        assert!(slot.is_owned_by(99));
        assert!(!slot.is_owned_by(98));
    }

    #[test]
    fn header_checks() {
        let layout = VectorLayout::new(8).unwrap();
        let header = layout.encode_header();
        let p = Path::new("vectors.dat");
        layout.verify_header(p, &header).unwrap();
        let other = VectorLayout::new(9).unwrap();
        assert!(other
            .verify_header(p, &header)
            .unwrap_err()
            .to_string()
            .contains("dim 8"));
        let mut bad = header.clone();
        bad[8] ^= 1;
        assert!(layout
            .verify_header(p, &bad)
            .unwrap_err()
            .to_string()
            .contains("checksum"));
        let mut newer = header.clone();
        put_u32(&mut newer, 4, 3);
        assert!(matches!(
            layout.verify_header(p, &newer),
            Err(StorageError::Version {
                found: 3,
                expected: 2,
                ..
            })
        ));
    }

    #[test]
    fn bad_input_is_rejected() {
        assert!(VectorLayout::new(0).is_err());
        let layout = VectorLayout::new(4).unwrap();
        let mut buf = vec![0u8; layout.slot_size()];
        assert!(layout
            .encode_slot(&mut buf, &[1.0; 3], 0, HeapTid::default())
            .is_err());
        assert!(layout
            .encode_slot(&mut buf[..10], &[1.0; 4], 0, HeapTid::default())
            .is_err());
        assert!(layout.parse_slot(&buf[1..]).is_err());
    }
}
