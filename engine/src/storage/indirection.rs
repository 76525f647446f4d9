//! Indirection table: vertex id -> (edge slot, flags, heap TID), 16 bytes per vertex,
//! memory-mapped `MAP_SHARED` so that every PostgreSQL backend maps the same table.
//!
//! ```text
//! header (4096 B): 0 magic "NVIT" u32 | 4 version u32 | 8 entries per block u32 (1024)
//!                  12 crc32 of 0..12 u32 | 16 capacity in entries u64 (grows; not checksummed)
//! block b at 4096 + b * 16384, for vertices b*1024 .. b*1024+1023:
//!                  1024 edge words u64 | 1024 TID words u64
//! edge word:       bits 0..32 edge page | bits 32..48 slot in page | bits 48..64 flags
//! TID word:        bits 0..32 heap block | bits 32..48 line pointer; while the vertex is free
//!                  (edge word 0) it links the free-vertex list instead (u32, see `update`)
//! ```
//!
//! Why this shape: a writer relocates an edge list out of place and then *publishes* the new
//! location with a single atomic store, and readers never lock (DESIGN.md §6). The edge word
//! holds the location *and* the flags, so relocating and deleting never overwrite each
//! other's bits (deletes use `fetch_or`). The vector of vertex `v` always lives in vector
//! slot `v` (freed vertex ids are reused together with their slots), so no slot number is
//! stored; the heap TID is, so that VACUUM can find dead vertices by scanning this table
//! instead of the much larger vector file. Blocks of 1024 vertices (4 OS pages) let the table
//! grow by extending the file without moving entries; a zero edge word has no flags and
//! means "no such vertex", so a freshly extended (zero-filled) file needs no initialisation.
//!
//! Growth: the mapping reserves address space for [`MAX_VERTICES`] entries up front, so
//! growing is `ftruncate` plus a store of the new capacity, and no backend ever remaps (a
//! remap would invalidate references other code holds). Entries beyond the file's current
//! end are never touched: every access checks the shared capacity first.
//!
//! Memory ordering: `publish` stores the TID, then the edge word with `Release`; `entry`
//! loads the edge word with `Acquire` first. A reader that sees a published vertex therefore
//! sees its TID, and a reader that sees a relocated edge word sees the contents the writer
//! wrote to the new slot before publishing (the page write completes before the publish).

use super::checksum::crc32;
use super::error::StorageError;
use super::vector_file::HeapTid;
use super::{
    put_u32, put_u64, read_u32, read_u64, verify_header_prefix, FORMAT_VERSION, PAGE_SIZE,
};
use crate::VertexId;
use memmap2::{MmapOptions, MmapRaw};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

pub const INDIRECTION_MAGIC: u32 = u32::from_le_bytes(*b"NVIT");
pub const HEADER_SIZE: usize = PAGE_SIZE;
pub const ENTRIES_PER_BLOCK: usize = 1024;
const BLOCK_SIZE: usize = ENTRIES_PER_BLOCK * 16;
const CRC_AT: usize = 12;
const CAPACITY_AT: usize = 16;

/// Most vertices one index can hold. The mapping reserves address space for this many
/// entries (16 GiB of virtual addresses, backed by the file only as far as it is extended).
pub const MAX_VERTICES: usize = 1 << 30;

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

/// A decoded indirection entry. The vertex's vector is in vector slot `v`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndirEntry {
    pub edge: EdgeLocation,
    pub tid: HeapTid,
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

fn live_undeleted(flags: u16) -> bool {
    flags & FLAG_LIVE != 0 && flags & FLAG_DELETED == 0
}

pub(crate) fn encode_edge_word(edge: EdgeLocation, flags: u16) -> u64 {
    edge.page as u64 | (edge.slot as u64) << 32 | (flags as u64) << 48
}

pub(crate) fn decode_edge_word(word: u64) -> (EdgeLocation, u16) {
    let edge = EdgeLocation {
        page: word as u32,
        slot: (word >> 32) as u16,
    };
    (edge, (word >> 48) as u16)
}

pub(crate) fn encode_tid(tid: HeapTid) -> u64 {
    tid.block as u64 | (tid.offset as u64) << 32
}

pub(crate) fn decode_tid(word: u64) -> HeapTid {
    HeapTid {
        block: word as u32,
        offset: (word >> 32) as u16,
    }
}

/// The mapped table. Shared references are enough for every operation: all entry access is
/// atomic, so concurrent readers and writers (threads or processes) need no lock.
pub struct IndirectionTable {
    map: MmapRaw,
    file: File,
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
        let crc = crc32(&header[..CRC_AT]);
        put_u32(&mut header, CRC_AT, crc);
        put_u64(&mut header, CAPACITY_AT, capacity as u64);
        file.write_all_at(&header, 0)
            .map_err(|e| StorageError::io(path, "write", e))?;
        file.set_len(Self::file_len(capacity))
            .map_err(|e| StorageError::io(path, "extend", e))?;
        Self::map(path, file)
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
        Self::map(path, file)
    }

    fn verify_header(path: &Path, header: &[u8]) -> Result<usize, StorageError> {
        verify_header_prefix(path, header, INDIRECTION_MAGIC, CRC_AT)?;
        if read_u32(header, 8) as usize != ENTRIES_PER_BLOCK {
            return Err(StorageError::corrupt(path, "unexpected entries per block"));
        }
        let capacity = read_u64(header, CAPACITY_AT);
        if !capacity.is_multiple_of(ENTRIES_PER_BLOCK as u64) || capacity > MAX_VERTICES as u64 {
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

    fn map(path: &Path, file: File) -> Result<Self, StorageError> {
        // MAP_SHARED over the whole reservation: writes reach the file (and every other
        // process mapping it); pages beyond the file's end exist only as address space.
        let map = MmapOptions::new()
            .len(Self::file_len(MAX_VERTICES) as usize)
            .map_raw(&file)
            .map_err(|e| StorageError::io(path, "mmap", e))?;
        Ok(IndirectionTable {
            map,
            file,
            path: path.to_path_buf(),
        })
    }

    /// Capacity `create` gives for `vertices` vertices: whole blocks, at least one.
    pub fn capacity_for(vertices: usize) -> usize {
        vertices.div_ceil(ENTRIES_PER_BLOCK).max(1) * ENTRIES_PER_BLOCK
    }

    fn capacity_word(&self) -> &AtomicU64 {
        // SAFETY: CAPACITY_AT + 8 <= HEADER_SIZE, which every file holds (checked at open);
        // the offset is 8-aligned in a page-aligned mapping; the reference borrows self, and
        // every access to these bytes after open is atomic.
        unsafe { AtomicU64::from_ptr(self.map.as_mut_ptr().add(CAPACITY_AT).cast()) }
    }

    /// Number of vertex entries the file holds now (a multiple of 1024). Grows, never
    /// shrinks, possibly through another process.
    pub fn capacity(&self) -> usize {
        self.capacity_word().load(Ordering::Acquire) as usize
    }

    /// Extends the file to hold at least `vertices` entries. Callers serialise growth (the
    /// allocator lock); readers never see an entry beyond the file because the capacity is
    /// stored only after the file was extended.
    pub fn grow_to(&self, vertices: usize) -> Result<(), StorageError> {
        if vertices <= self.capacity() {
            return Ok(());
        }
        if vertices > MAX_VERTICES {
            return Err(StorageError::invalid(format!(
                "a navis index holds at most {MAX_VERTICES} vertices"
            )));
        }
        let capacity = Self::capacity_for(vertices);
        self.file
            .set_len(Self::file_len(capacity))
            .map_err(|e| StorageError::io(&self.path, "extend", e))?;
        self.capacity_word()
            .store(capacity as u64, Ordering::Release);
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn block_base(v: VertexId) -> usize {
        HEADER_SIZE + (v as usize / ENTRIES_PER_BLOCK) * BLOCK_SIZE
    }

    fn check(&self, v: VertexId) -> Result<(), StorageError> {
        if (v as usize) < self.capacity() {
            Ok(())
        } else {
            Err(StorageError::invalid(format!(
                "vertex {v} is beyond the indirection table's capacity {}",
                self.capacity()
            )))
        }
    }

    fn word(&self, v: VertexId, array: usize) -> &AtomicU64 {
        debug_assert!((v as usize) < MAX_VERTICES);
        let offset = Self::block_base(v)
            + array * ENTRIES_PER_BLOCK * 8
            + (v as usize % ENTRIES_PER_BLOCK) * 8;
        // SAFETY: callers check v < capacity, so the word lies inside the file and inside
        // the reservation. The mapping is page-aligned and offset is a multiple of 8, so the
        // pointer is aligned for AtomicU64 (u64's size and layout). The reference borrows
        // self, so it cannot outlive the mapping, and every access to these bytes is atomic.
        unsafe { AtomicU64::from_ptr(self.map.as_mut_ptr().add(offset).cast()) }
    }

    fn edge_word(&self, v: VertexId) -> &AtomicU64 {
        self.word(v, 0)
    }

    fn tid_word(&self, v: VertexId) -> &AtomicU64 {
        self.word(v, 1)
    }

    /// The entry of `v`, or `None` when `v` is beyond the table or was never published.
    pub fn entry(&self, v: VertexId) -> Option<IndirEntry> {
        if (v as usize) >= self.capacity() {
            return None;
        }
        let word = self.edge_word(v).load(Ordering::Acquire);
        let (edge, flags) = decode_edge_word(word);
        if flags == 0 {
            return None;
        }
        let tid = decode_tid(self.tid_word(v).load(Ordering::Acquire));
        Some(IndirEntry { edge, tid, flags })
    }

    /// Whether `v` is published and not lazily deleted (false for a free or out-of-range id):
    /// [`IndirEntry::is_live`] and not [`IndirEntry::is_deleted`] from the edge word alone, one
    /// load where [`Self::entry`] takes two (each is a cache miss when the ids are scattered, as
    /// a list's members are).
    pub fn is_live_undeleted(&self, v: VertexId) -> bool {
        (v as usize) < self.capacity()
            && live_undeleted(decode_edge_word(self.edge_word(v).load(Ordering::Acquire)).1)
    }

    /// Starts loading `v`'s edge word (location and flags) into the CPU cache.
    pub fn prefetch(&self, v: VertexId) {
        if (v as usize) < self.capacity() {
            crate::prefetch::value(self.edge_word(v));
        }
    }

    /// Publishes a vertex: its TID, then its edge location and flags in one atomic store.
    /// This is the moment the vertex becomes visible to readers.
    pub fn publish(&self, v: VertexId, entry: IndirEntry) -> Result<(), StorageError> {
        self.check(v)?;
        self.tid_word(v)
            .store(encode_tid(entry.tid), Ordering::Release);
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

    /// Sets the deleted flag of a published `v` atomically; returns whether it was already
    /// set. A vertex that is not published is left alone (and reported as already deleted).
    pub fn mark_deleted(&self, v: VertexId) -> Result<bool, StorageError> {
        self.check(v)?;
        let word = self.edge_word(v);
        let mut current = word.load(Ordering::Acquire);
        loop {
            if !live_undeleted(decode_edge_word(current).1) {
                return Ok(true);
            }
            match word.compare_exchange_weak(
                current,
                current | (FLAG_DELETED as u64) << 48,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(false),
                Err(seen) => current = seen,
            }
        }
    }

    /// Unpublishes `v` (its id becomes free) and stores `next_free` in its TID word, which
    /// links the free-vertex list while the vertex is free. Callers hold the allocator lock.
    pub fn release(&self, v: VertexId, next_free: u32) -> Result<(), StorageError> {
        self.check(v)?;
        self.edge_word(v).store(0, Ordering::Release);
        self.tid_word(v).store(next_free as u64, Ordering::Release);
        Ok(())
    }

    /// The free-list link stored by [`IndirectionTable::release`] (meaningless for a
    /// published vertex).
    pub fn free_link(&self, v: VertexId) -> Result<u32, StorageError> {
        self.check(v)?;
        Ok(self.tid_word(v).load(Ordering::Acquire) as u32)
    }

    /// Stores the TID of a vertex that is being prepared (not yet published).
    pub fn set_tid(&self, v: VertexId, tid: HeapTid) -> Result<(), StorageError> {
        self.check(v)?;
        self.tid_word(v).store(encode_tid(tid), Ordering::Release);
        Ok(())
    }

    /// Writes dirty mapped pages back to the file and waits (msync).
    pub fn flush(&self) -> Result<(), StorageError> {
        let len = Self::file_len(self.capacity()) as usize;
        self.map
            .flush_range(0, len)
            .map_err(|e| StorageError::io(&self.path, "msync", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(page: u32, slot: u16, block: u32) -> IndirEntry {
        IndirEntry {
            edge: EdgeLocation { page, slot },
            tid: HeapTid { block, offset: 7 },
            flags: FLAG_LIVE,
        }
    }

    #[test]
    fn publish_reopen_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("indirection.dat");
        let table = IndirectionTable::create(&path, 1500).unwrap();
        assert_eq!(table.capacity(), 2048);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 4096 + 2 * 16384);
        assert_eq!(table.entry(0), None);
        table.publish(0, entry(7, 3, 0)).unwrap();
        table
            .publish(1025, entry(u32::MAX - 1, 65535, 1025))
            .unwrap();
        assert!(table.is_live_undeleted(0) && table.is_live_undeleted(1025));
        assert!(!table.is_live_undeleted(5), "never published");
        assert!(!table.is_live_undeleted(4096), "beyond the capacity");
        assert!(!table.mark_deleted(1025).unwrap());
        assert!(table.mark_deleted(1025).unwrap());
        assert!(!table.is_live_undeleted(1025), "lazily deleted");
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
        assert_eq!(
            e.tid,
            HeapTid {
                block: 1025,
                offset: 7
            }
        );
        assert_eq!(table.entry(5), None);
        assert_eq!(table.entry(4096), None);
        assert!(table.publish(2048, entry(0, 0, 0)).is_err());

        // Growth is visible through a second mapping of the same file (another backend).
        let other = IndirectionTable::open(&path).unwrap();
        table.grow_to(3000).unwrap();
        assert_eq!(other.capacity(), 3072);
        table.publish(3000, entry(1, 2, 3)).unwrap();
        assert_eq!(other.entry(3000), Some(entry(1, 2, 3)));
        assert!(table.grow_to(MAX_VERTICES + 1).is_err());

        // Releasing frees the id and keeps the free-list link in the TID word.
        table.release(3000, 42).unwrap();
        assert_eq!(other.entry(3000), None);
        assert!(!other.is_live_undeleted(3000), "released");
        assert_eq!(other.free_link(3000).unwrap(), 42);
        assert!(
            table.mark_deleted(3000).unwrap(),
            "a free vertex is never marked"
        );
        assert_eq!(other.entry(3000), None);
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
            .contains("index format version 7, this build reads 2"));

        let mut flipped = full.clone();
        flipped[9] ^= 1;
        std::fs::write(&path, &flipped).unwrap();
        assert!(IndirectionTable::open(&path)
            .err()
            .unwrap()
            .to_string()
            .contains("checksum"));
    }
}
