//! Indirection table: vertex id -> (edge slot, vector slot, flags), 12 bytes per vertex,
//! memory-mapped `MAP_SHARED` so that every PostgreSQL backend can map the same table.
//!
//! ```text
//! header (4096 B): 0 magic "NVIT" u32 | 4 version u32 | 8 entries per block u32 (1024)
//!                  12 reserved u32 (0) | 16 capacity in entries u64 | 24 crc32 of 0..24 u32
//! block b at 4096 + b * 12288, for vertices b*1024 .. b*1024+1023:
//!                  1024 edge words u64 | 1024 vector slots u32 (meaningful once flags != 0)
//! edge word:       bits 0..32 edge page | bits 32..48 slot in page | bits 48..64 flags
//! ```
//!
//! Why this shape: a writer relocates an edge list out of place and then *publishes* the new
//! location with a single atomic store, and readers never lock (DESIGN.md §6). A 12-byte
//! array-of-structs entry would put half the u64s on unaligned addresses, so the entry is
//! split by field: an 8-byte-aligned edge word that holds the location *and* the flags (so
//! relocating and deleting never overwrite each other's bits: deletes use `fetch_or`), and a
//! separate u32 vector slot that is written once, before the vertex is first published.
//! Blocks of 1024 vertices (3 OS pages) let the table grow by appending blocks without moving
//! existing entries. A zero edge word has no flags and means "no such vertex", so a freshly
//! extended (zero-filled) file needs no initialisation.
//!
//! Memory ordering: `publish` stores the vector slot, then the edge word with `Release`;
//! `entry` loads the edge word with `Acquire` first. A reader that sees a published vertex
//! therefore sees its vector slot, and a reader that sees a relocated edge word sees the
//! contents the writer wrote to the new slot before publishing (the page write completes
//! before the publish).

use super::checksum::crc32;
use super::error::StorageError;
use super::{
    put_u32, put_u64, read_u32, read_u64, verify_header_prefix, FORMAT_VERSION, PAGE_SIZE,
};
use crate::VertexId;
use memmap2::{MmapOptions, MmapRaw};
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub const INDIRECTION_MAGIC: u32 = u32::from_le_bytes(*b"NVIT");
pub const HEADER_SIZE: usize = PAGE_SIZE;
pub const ENTRIES_PER_BLOCK: usize = 1024;
const BLOCK_SIZE: usize = ENTRIES_PER_BLOCK * 12;

/// Vertex exists (has been published).
pub const FLAG_LIVE: u16 = 1 << 0;
/// Vertex is lazily deleted: excluded from results but still traversable.
pub const FLAG_DELETED: u16 = 1 << 1;

/// Where an edge list lives: page number in the edge file and slot inside the page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EdgeLocation {
    pub page: u32,
    pub slot: u16,
}

/// A decoded indirection entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndirEntry {
    pub edge: EdgeLocation,
    pub vector_slot: u32,
    pub flags: u16,
}

impl IndirEntry {
    pub fn is_live(&self) -> bool {
        self.flags & FLAG_LIVE != 0
    }

    pub fn is_deleted(&self) -> bool {
        self.flags & FLAG_DELETED != 0
    }
}

fn encode_edge_word(edge: EdgeLocation, flags: u16) -> u64 {
    edge.page as u64 | (edge.slot as u64) << 32 | (flags as u64) << 48
}

fn decode_edge_word(word: u64) -> (EdgeLocation, u16) {
    let edge = EdgeLocation {
        page: word as u32,
        slot: (word >> 32) as u16,
    };
    (edge, (word >> 48) as u16)
}

/// The mapped table. Shared references are enough for every operation: all entry access is
/// atomic, so concurrent readers and writers (threads now, processes later) need no lock.
pub struct IndirectionTable {
    map: MmapRaw,
    capacity: usize,
    path: PathBuf,
}

impl IndirectionTable {
    /// Creates (or truncates) `path` with room for at least `capacity` vertices, all unused.
    pub fn create(path: &Path, capacity: usize) -> Result<Self, StorageError> {
        let capacity = Self::capacity_for(capacity);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(|e| StorageError::io(path, "create", e))?;
        let mut header = vec![0u8; HEADER_SIZE];
        put_u32(&mut header, 0, INDIRECTION_MAGIC);
        put_u32(&mut header, 4, FORMAT_VERSION);
        put_u32(&mut header, 8, ENTRIES_PER_BLOCK as u32);
        put_u64(&mut header, 16, capacity as u64);
        let crc = crc32(&header[..24]);
        put_u32(&mut header, 24, crc);
        use std::os::unix::fs::FileExt;
        file.write_all_at(&header, 0)
            .map_err(|e| StorageError::io(path, "write", e))?;
        file.set_len(Self::file_len(capacity))
            .map_err(|e| StorageError::io(path, "extend", e))?;
        Self::map(path, &file, capacity)
    }

    /// Opens and validates an existing table.
    pub fn open(path: &Path) -> Result<Self, StorageError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| StorageError::io(path, "open", e))?;
        let len = file
            .metadata()
            .map_err(|e| StorageError::io(path, "stat", e))?
            .len();
        let mut header = vec![0u8; HEADER_SIZE];
        use std::os::unix::fs::FileExt;
        file.read_exact_at(&mut header, 0).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                StorageError::corrupt(
                    path,
                    format!("truncated: {len} bytes, header alone is {HEADER_SIZE}"),
                )
            } else {
                StorageError::io(path, "read", e)
            }
        })?;
        let capacity = Self::verify_header(path, &header)?;
        let expected = Self::file_len(capacity);
        if len < expected {
            return Err(StorageError::corrupt(
                path,
                format!("truncated: {len} bytes, {capacity} entries need {expected}"),
            ));
        }
        Self::map(path, &file, capacity)
    }

    fn verify_header(path: &Path, header: &[u8]) -> Result<usize, StorageError> {
        verify_header_prefix(path, header, INDIRECTION_MAGIC, 24)?;
        if read_u32(header, 8) as usize != ENTRIES_PER_BLOCK {
            return Err(StorageError::corrupt(path, "unexpected entries per block"));
        }
        let capacity = read_u64(header, 16);
        if !capacity.is_multiple_of(ENTRIES_PER_BLOCK as u64) || capacity > u32::MAX as u64 {
            return Err(StorageError::corrupt(
                path,
                format!("impossible capacity {capacity}"),
            ));
        }
        Ok(capacity as usize)
    }

    fn file_len(capacity: usize) -> u64 {
        (HEADER_SIZE + capacity / ENTRIES_PER_BLOCK * BLOCK_SIZE) as u64
    }

    fn map(path: &Path, file: &File, capacity: usize) -> Result<Self, StorageError> {
        let len = Self::file_len(capacity) as usize;
        // MAP_SHARED: writes reach the file (and other processes mapping it).
        let map = MmapOptions::new()
            .len(len)
            .map_raw(file)
            .map_err(|e| StorageError::io(path, "mmap", e))?;
        Ok(IndirectionTable {
            map,
            capacity,
            path: path.to_path_buf(),
        })
    }

    /// Capacity `create` gives for `vertices` vertices: whole blocks, at least one.
    pub fn capacity_for(vertices: usize) -> usize {
        vertices.div_ceil(ENTRIES_PER_BLOCK).max(1) * ENTRIES_PER_BLOCK
    }

    /// Number of vertex entries the file holds (a multiple of 1024).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn block_base(v: VertexId) -> usize {
        HEADER_SIZE + (v as usize / ENTRIES_PER_BLOCK) * BLOCK_SIZE
    }

    fn check(&self, v: VertexId) -> Result<(), StorageError> {
        if (v as usize) < self.capacity {
            Ok(())
        } else {
            Err(StorageError::invalid(format!(
                "vertex {v} is beyond the indirection table's capacity {}",
                self.capacity
            )))
        }
    }

    fn edge_word(&self, v: VertexId) -> &AtomicU64 {
        debug_assert!((v as usize) < self.capacity);
        let offset = Self::block_base(v) + (v as usize % ENTRIES_PER_BLOCK) * 8;
        // SAFETY: callers check v < capacity, so offset + 8 <= mapping length. The mapping is
        // page-aligned and offset is a multiple of 8, so the pointer is aligned for AtomicU64,
        // which has u64's size and layout. The reference cannot outlive the mapping (it
        // borrows self), and every access to these bytes goes through atomics.
        unsafe { AtomicU64::from_ptr(self.map.as_mut_ptr().add(offset).cast()) }
    }

    fn vector_word(&self, v: VertexId) -> &AtomicU32 {
        debug_assert!((v as usize) < self.capacity);
        let offset =
            Self::block_base(v) + ENTRIES_PER_BLOCK * 8 + (v as usize % ENTRIES_PER_BLOCK) * 4;
        // SAFETY: as in edge_word: in bounds, 4-byte aligned, lives as long as self, and only
        // accessed atomically.
        unsafe { AtomicU32::from_ptr(self.map.as_mut_ptr().add(offset).cast()) }
    }

    /// The entry of `v`, or `None` when `v` is beyond the table or was never published.
    pub fn entry(&self, v: VertexId) -> Option<IndirEntry> {
        if (v as usize) >= self.capacity {
            return None;
        }
        let word = self.edge_word(v).load(Ordering::Acquire);
        let (edge, flags) = decode_edge_word(word);
        if flags == 0 {
            return None;
        }
        let vector_slot = self.vector_word(v).load(Ordering::Acquire);
        Some(IndirEntry {
            edge,
            vector_slot,
            flags,
        })
    }

    /// Publishes a vertex: its vector slot, then its edge location and flags in one atomic
    /// store. This is the moment the vertex becomes visible to readers.
    pub fn publish(&self, v: VertexId, entry: IndirEntry) -> Result<(), StorageError> {
        self.check(v)?;
        self.vector_word(v)
            .store(entry.vector_slot, Ordering::Release);
        self.edge_word(v)
            .store(encode_edge_word(entry.edge, entry.flags), Ordering::Release);
        Ok(())
    }

    /// Points `v` at a relocated edge list, keeping its flags. One atomic read-modify-write,
    /// so a concurrent `mark_deleted` is never lost. Returns the previous location.
    pub fn relocate_edges(
        &self,
        v: VertexId,
        to: EdgeLocation,
    ) -> Result<EdgeLocation, StorageError> {
        self.check(v)?;
        let word = self.edge_word(v);
        let mut current = word.load(Ordering::Acquire);
        loop {
            let (old, flags) = decode_edge_word(current);
            if flags & FLAG_LIVE == 0 {
                return Err(StorageError::invalid(format!(
                    "vertex {v} is not published"
                )));
            }
            match word.compare_exchange_weak(
                current,
                encode_edge_word(to, flags),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(old),
                Err(seen) => current = seen,
            }
        }
    }

    /// Sets the deleted flag of `v` atomically; returns whether it was already set.
    pub fn mark_deleted(&self, v: VertexId) -> Result<bool, StorageError> {
        self.check(v)?;
        let old = self
            .edge_word(v)
            .fetch_or((FLAG_DELETED as u64) << 48, Ordering::AcqRel);
        Ok(old & ((FLAG_DELETED as u64) << 48) != 0)
    }

    /// Writes dirty mapped pages back to the file and waits (msync).
    pub fn flush(&self) -> Result<(), StorageError> {
        self.map
            .flush()
            .map_err(|e| StorageError::io(&self.path, "msync", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(page: u32, slot: u16, vector_slot: u32) -> IndirEntry {
        IndirEntry {
            edge: EdgeLocation { page, slot },
            vector_slot,
            flags: FLAG_LIVE,
        }
    }

    #[test]
    fn publish_reopen_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("indirection.dat");
        let table = IndirectionTable::create(&path, 1500).unwrap();
        assert_eq!(table.capacity(), 2048);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 4096 + 2 * 12288);
        assert_eq!(table.entry(0), None);
        table.publish(0, entry(7, 3, 0)).unwrap();
        table
            .publish(1025, entry(u32::MAX - 1, 65535, 1025))
            .unwrap();
        assert!(!table.mark_deleted(1025).unwrap());
        assert!(table.mark_deleted(1025).unwrap());
        let old = table
            .relocate_edges(0, EdgeLocation { page: 9, slot: 1 })
            .unwrap();
        assert_eq!(old, EdgeLocation { page: 7, slot: 3 });
        table.flush().unwrap();
        drop(table);

        let table = IndirectionTable::open(&path).unwrap();
        assert_eq!(table.entry(0), Some(entry(9, 1, 0)));
        let e = table.entry(1025).unwrap();
        assert_eq!(
            e.edge,
            EdgeLocation {
                page: u32::MAX - 1,
                slot: 65535
            }
        );
        assert!(e.is_live() && e.is_deleted());
        assert_eq!(e.vector_slot, 1025);
        assert_eq!(table.entry(5), None);
        assert_eq!(table.entry(4096), None);
        assert!(table.publish(2048, entry(0, 0, 0)).is_err());
        assert!(table
            .relocate_edges(5, EdgeLocation { page: 1, slot: 1 })
            .is_err());
    }

    #[test]
    fn concurrent_relocate_and_delete_lose_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let table = IndirectionTable::create(&dir.path().join("ind"), 64).unwrap();
        for v in 0..64 {
            table.publish(v, entry(0, 0, v)).unwrap();
        }
        std::thread::scope(|s| {
            s.spawn(|| {
                for round in 1..=200u32 {
                    for v in 0..64 {
                        table
                            .relocate_edges(
                                v,
                                EdgeLocation {
                                    page: round,
                                    slot: v as u16,
                                },
                            )
                            .unwrap();
                    }
                }
            });
            s.spawn(|| {
                for v in (0..64).step_by(2) {
                    table.mark_deleted(v).unwrap();
                }
            });
        });
        for v in 0..64 {
            let e = table.entry(v).unwrap();
            assert_eq!(
                e.edge,
                EdgeLocation {
                    page: 200,
                    slot: v as u16
                }
            );
            assert_eq!(e.is_deleted(), v % 2 == 0, "vertex {v}");
        }
    }

    #[test]
    fn bad_files_are_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ind");
        drop(IndirectionTable::create(&path, 10).unwrap());
        let full = std::fs::read(&path).unwrap();

        std::fs::write(&path, &full[..5000]).unwrap();
        let err = IndirectionTable::open(&path).err().unwrap().to_string();
        assert!(err.contains("truncated"), "{err}");

        let mut versioned = full.clone();
        put_u32(&mut versioned, 4, 7);
        std::fs::write(&path, &versioned).unwrap();
        let err = IndirectionTable::open(&path).err().unwrap();
        assert!(err
            .to_string()
            .contains("index format version 7, this build reads 1"));

        let mut flipped = full.clone();
        flipped[17] ^= 1;
        std::fs::write(&path, &flipped).unwrap();
        assert!(IndirectionTable::open(&path)
            .err()
            .unwrap()
            .to_string()
            .contains("checksum"));
    }
}
