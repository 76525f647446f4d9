//! Shared runtime state of an index that accepts inserts: `state.dat`, mapped `MAP_SHARED`
//! by every backend, holding the allocator (high-water marks and the heads of the free
//! lists), live/deleted counts, cumulative update counters, and one entry per edge page
//! (how many of its slots hold a current edge list, and the free-page list link).
//!
//! ```text
//! header (4096 B): 0 magic "NVST" u32 | 4 version u32 | 8 reserved u32 | 12 crc32 of 0..12
//!                  64.. atomic fields, see `Field`; 256.. cumulative counters, see `Counter`
//! page table at 4096: per edge page p, 8 bytes at 4096 + 8p: live slots u32 | next free u32
//! ```
//!
//! Everything in this file except the counters can be derived from the indirection table
//! and the length of the edge file, and it is: [`crate::update::recover`] rebuilds it when
//! the first backend opens the index after a server start or crash (the epoch differs).
//! That is what makes it safe for the kernel to write these pages back at any time, and for
//! a crash to leave an allocation half done (DESIGN.md §5). The page table grows by
//! extending the file inside a mapping reserved up front, as the indirection table does.

use super::checksum::crc32;
use super::error::StorageError;
use super::{put_u32, verify_header_prefix, FORMAT_VERSION, PAGE_SIZE};
use memmap2::{MmapOptions, MmapRaw};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub const STATE_MAGIC: u32 = u32::from_le_bytes(*b"NVST");
const CRC_AT: usize = 12;
const PAGE_TABLE_AT: usize = PAGE_SIZE;
const PAGE_ENTRY: usize = 8;
/// A u64 after the last field (`EntranceLogBytes` at 104).
const SYNCED_GENERATION_AT: usize = 112;

/// Most edge pages one index can have; the mapping reserves 16 GiB of addresses for them.
pub const MAX_EDGE_PAGES: usize = 1 << 31;

/// "No vertex"/"no page" in the free-list heads and links.
pub const NONE: u32 = u32::MAX;

/// The u32/u64 fields of the header. Their values are only meaningful under the rules the
/// `update` module follows (most change under the allocator lock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    /// Epoch of the server lifetime that last recovered this state (u64).
    Epoch,
    /// Vertex ids below this have been handed out at some time.
    NextVertex,
    /// Pages below this exist in the edge file (or are being written).
    EdgePages,
    FreeVertexHead,
    FreeVertexCount,
    FreePageHead,
    FreePageCount,
    /// Published vertices, deleted ones included.
    Published,
    /// Published vertices carrying the deleted flag.
    Deleted,
    /// Bytes of `entrance.log` that hold complete promotions (the dynamic entrance graph).
    EntranceLogBytes,
}

impl Field {
    fn offset(self) -> usize {
        match self {
            Field::Epoch => 64,
            Field::NextVertex => 72,
            Field::EdgePages => 76,
            Field::FreeVertexHead => 80,
            Field::FreeVertexCount => 84,
            Field::FreePageHead => 88,
            Field::FreePageCount => 92,
            Field::Published => 96,
            Field::Deleted => 100,
            Field::EntranceLogBytes => 104,
        }
    }
}

/// Cumulative update counters (u64, never reset by recovery), reported by the stats
/// functions and the benchmarks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    Inserts,
    /// Edge pages read by inserts: position seeking plus re-reads of lists that moved.
    InsertPagesRead,
    /// Vectors loaded by the inserts' CASR reranks.
    InsertVectorsLoaded,
    /// Edge pages written (inserts and consolidation).
    EdgePagesWritten,
    /// Edge lists written into fresh slots.
    EdgeListsWritten,
    /// Vector slots written.
    VectorsWritten,
    /// Fresh pages taken from the free-page list, and appended at the end of the file.
    PagesReused,
    PagesAppended,
    /// Vertex ids taken from the free-vertex list.
    VerticesReused,
    /// Consolidations run, vertices they freed, and lists they repaired or moved.
    Consolidations,
    VerticesFreed,
    ListsRepaired,
    ListsCompacted,
    /// Vertices that were unreachable and got linked (consolidation and reconnection).
    OrphansLinked,
    /// Distinct edge pages an in-place update of the lists inserts changed would have
    /// rewritten (the pages the lists were on, plus one for each new vertex): the baseline
    /// that out-of-place writes are measured against.
    InsertPagesInPlace,
    /// The `Inserts` count when reachability was last restored: VACUUM of a table without
    /// deletes re-checks reachability only when inserts happened since.
    InsertsAtLastReconnect,
    /// A hot standby's copy: times it was brought forward page by page, and the indirection
    /// and code pages it took (`relation::standby`).
    StandbyResyncs,
    StandbyPagesResynced,
}

impl Counter {
    pub const ALL: [Counter; 18] = [
        Counter::Inserts,
        Counter::InsertPagesRead,
        Counter::InsertVectorsLoaded,
        Counter::EdgePagesWritten,
        Counter::EdgeListsWritten,
        Counter::VectorsWritten,
        Counter::PagesReused,
        Counter::PagesAppended,
        Counter::VerticesReused,
        Counter::Consolidations,
        Counter::VerticesFreed,
        Counter::ListsRepaired,
        Counter::ListsCompacted,
        Counter::OrphansLinked,
        Counter::InsertPagesInPlace,
        Counter::InsertsAtLastReconnect,
        Counter::StandbyResyncs,
        Counter::StandbyPagesResynced,
    ];

    fn offset(self) -> usize {
        256 + 8 * Counter::ALL
            .iter()
            .position(|&c| c == self)
            .expect("listed")
    }

    pub fn name(self) -> &'static str {
        match self {
            Counter::Inserts => "inserts",
            Counter::InsertPagesRead => "insert_pages_read",
            Counter::InsertVectorsLoaded => "insert_vectors_loaded",
            Counter::EdgePagesWritten => "edge_pages_written",
            Counter::EdgeListsWritten => "edge_lists_written",
            Counter::VectorsWritten => "vectors_written",
            Counter::PagesReused => "pages_reused",
            Counter::PagesAppended => "pages_appended",
            Counter::VerticesReused => "vertices_reused",
            Counter::Consolidations => "consolidations",
            Counter::VerticesFreed => "vertices_freed",
            Counter::ListsRepaired => "lists_repaired",
            Counter::ListsCompacted => "lists_compacted",
            Counter::OrphansLinked => "orphans_linked",
            Counter::InsertPagesInPlace => "insert_pages_in_place",
            Counter::InsertsAtLastReconnect => "inserts_at_last_reconnect",
            Counter::StandbyResyncs => "standby_resyncs",
            Counter::StandbyPagesResynced => "standby_pages_resynced",
        }
    }
}

/// The mapped state file.
pub struct SharedState {
    map: MmapRaw,
    file: File,
    path: PathBuf,
}

impl SharedState {
    /// Creates `path` for an index of `vertices` vertices on `pages` edge pages whose live
    /// slot counts are `live_per_page`; pages with none go on the free-page list.
    pub fn create(path: &Path, vertices: u32, live_per_page: &[u32]) -> Result<Self, StorageError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(|e| StorageError::io(path, "create", e))?;
        let mut header = vec![0u8; PAGE_SIZE];
        put_u32(&mut header, 0, STATE_MAGIC);
        put_u32(&mut header, 4, FORMAT_VERSION);
        let crc = crc32(&header[..CRC_AT]);
        put_u32(&mut header, CRC_AT, crc);
        file.write_all_at(&header, 0)
            .map_err(|e| StorageError::io(path, "write", e))?;
        let state = Self::map(path, file)?;
        state.ensure_pages(live_per_page.len())?;
        state.set(Field::NextVertex, vertices);
        state.set(Field::Published, vertices);
        state.set(Field::EdgePages, live_per_page.len() as u32);
        state.set(Field::FreeVertexHead, NONE);
        state.set(Field::FreePageHead, NONE);
        // A build can leave a few vertices unreachable too: the first VACUUM checks.
        state.set_counter(Counter::InsertsAtLastReconnect, u64::MAX);
        for (page, &live) in live_per_page.iter().enumerate() {
            state.page_live(page as u32).store(live, Ordering::Relaxed);
            if live == 0 {
                state.push_free_page(page as u32);
            }
        }
        Ok(state)
    }

    pub fn open(path: &Path) -> Result<Self, StorageError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| StorageError::io(path, "open", e))?;
        let mut header = vec![0u8; PAGE_SIZE];
        file.read_exact_at(&mut header, 0)
            .map_err(|e| StorageError::io(path, "read", e))?;
        verify_header_prefix(path, &header, STATE_MAGIC, CRC_AT)?;
        Self::map(path, file)
    }

    fn map(path: &Path, file: File) -> Result<Self, StorageError> {
        let map = MmapOptions::new()
            .len(PAGE_TABLE_AT + MAX_EDGE_PAGES * PAGE_ENTRY)
            .map_raw(&file)
            .map_err(|e| StorageError::io(path, "mmap", e))?;
        Ok(SharedState {
            map,
            file,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn u32_at(&self, offset: usize) -> &AtomicU32 {
        debug_assert!(offset.is_multiple_of(4) && offset + 4 <= PAGE_TABLE_AT + MAX_EDGE_PAGES * 8);
        // SAFETY: every offset passed here is 4-aligned and inside the header (always in the
        // file) or inside the page table below `pages_capacity` (the file was extended first);
        // the mapping is page-aligned, the reference borrows self, and all access is atomic.
        unsafe { AtomicU32::from_ptr(self.map.as_mut_ptr().add(offset).cast()) }
    }

    fn u64_at(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset.is_multiple_of(8) && offset + 8 <= PAGE_TABLE_AT);
        // SAFETY: header offsets only (8-aligned, within the first page, always in the file);
        // as in u32_at otherwise.
        unsafe { AtomicU64::from_ptr(self.map.as_mut_ptr().add(offset).cast()) }
    }

    pub fn get(&self, field: Field) -> u32 {
        self.u32_at(field.offset()).load(Ordering::Acquire)
    }

    pub fn set(&self, field: Field, value: u32) {
        self.u32_at(field.offset()).store(value, Ordering::Release)
    }

    /// Atomically adds `delta` (wrapping) and returns the previous value.
    pub fn add(&self, field: Field, delta: i64) -> u32 {
        self.u32_at(field.offset())
            .fetch_add(delta as u32, Ordering::AcqRel)
    }

    pub fn epoch(&self) -> u64 {
        self.u64_at(Field::Epoch.offset()).load(Ordering::Acquire)
    }

    pub fn set_epoch(&self, epoch: u64) {
        self.u64_at(Field::Epoch.offset())
            .store(epoch, Ordering::Release)
    }

    /// The redo generation a hot standby's copy has been brought up to
    /// (`relation::standby`); 0 on a primary's copy.
    pub fn synced_generation(&self) -> u64 {
        self.u64_at(SYNCED_GENERATION_AT).load(Ordering::Acquire)
    }

    pub fn set_synced_generation(&self, generation: u64) {
        self.u64_at(SYNCED_GENERATION_AT)
            .store(generation, Ordering::Release)
    }

    pub fn counter(&self, c: Counter) -> u64 {
        self.u64_at(c.offset()).load(Ordering::Relaxed)
    }

    pub fn set_counter(&self, c: Counter, value: u64) {
        self.u64_at(c.offset()).store(value, Ordering::Relaxed);
    }

    pub fn count(&self, c: Counter, n: u64) {
        if n > 0 {
            self.u64_at(c.offset()).fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Pages the page table can describe now (the file's extent).
    pub fn pages_capacity(&self) -> Result<usize, StorageError> {
        let len = self
            .file
            .metadata()
            .map_err(|e| StorageError::io(&self.path, "stat", e))?
            .len() as usize;
        Ok(len.saturating_sub(PAGE_TABLE_AT) / PAGE_ENTRY)
    }

    /// Extends the page table to describe at least `pages` pages (callers serialise growth).
    pub fn ensure_pages(&self, pages: usize) -> Result<(), StorageError> {
        if pages > MAX_EDGE_PAGES {
            return Err(StorageError::invalid(format!(
                "a navis index has at most {MAX_EDGE_PAGES} edge pages"
            )));
        }
        if pages <= self.pages_capacity()? {
            return Ok(());
        }
        // Grow in steps of 512 pages' entries (one OS page) at least, doubling when large.
        let target = pages
            .max(self.pages_capacity()? * 2)
            .clamp(512, MAX_EDGE_PAGES);
        self.file
            .set_len((PAGE_TABLE_AT + target * PAGE_ENTRY) as u64)
            .map_err(|e| StorageError::io(&self.path, "extend", e))
    }

    /// Live-slot count of `page`; callers keep `page` below [`Field::EdgePages`].
    pub fn page_live(&self, page: u32) -> &AtomicU32 {
        self.u32_at(PAGE_TABLE_AT + page as usize * PAGE_ENTRY)
    }

    fn page_link(&self, page: u32) -> &AtomicU32 {
        self.u32_at(PAGE_TABLE_AT + page as usize * PAGE_ENTRY + 4)
    }

    /// Pushes `page` on the free-page list. Caller holds the allocator lock.
    pub fn push_free_page(&self, page: u32) {
        self.page_link(page)
            .store(self.get(Field::FreePageHead), Ordering::Release);
        self.set(Field::FreePageHead, page);
        self.add(Field::FreePageCount, 1);
    }

    /// Pops a page from the free-page list. Caller holds the allocator lock.
    pub fn pop_free_page(&self) -> Option<u32> {
        let head = self.get(Field::FreePageHead);
        if head == NONE {
            return None;
        }
        self.set(
            Field::FreePageHead,
            self.page_link(head).load(Ordering::Acquire),
        );
        self.add(Field::FreePageCount, -1);
        Some(head)
    }

    /// The free-page list, head first (for verification; caller holds the allocator lock).
    pub fn free_pages(&self) -> Vec<u32> {
        let mut out = Vec::new();
        let mut page = self.get(Field::FreePageHead);
        let limit = self.get(Field::EdgePages) as usize;
        while page != NONE && out.len() <= limit {
            out.push(page);
            if page as usize >= limit {
                break;
            }
            page = self.page_link(page).load(Ordering::Acquire);
        }
        out
    }

    /// Empties both free lists (recovery rebuilds them).
    pub fn clear_free_lists(&self) {
        self.set(Field::FreePageHead, NONE);
        self.set(Field::FreePageCount, 0);
        self.set(Field::FreeVertexHead, NONE);
        self.set(Field::FreeVertexCount, 0);
    }

    /// msync of the header and page table.
    pub fn flush(&self) -> Result<(), StorageError> {
        let len = PAGE_TABLE_AT + self.pages_capacity()? * PAGE_ENTRY;
        self.map
            .flush_range(0, len)
            .map_err(|e| StorageError::io(&self.path, "msync", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_reopen_free_pages_and_growth() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.dat");
        let state = SharedState::create(&path, 25, &[10, 0, 5, 0]).unwrap();
        assert_eq!(state.get(Field::NextVertex), 25);
        assert_eq!(state.get(Field::EdgePages), 4);
        assert_eq!(state.free_pages(), vec![3, 1]);
        assert_eq!(state.get(Field::FreePageCount), 2);
        state.count(Counter::Inserts, 3);

        let other = SharedState::open(&path).unwrap();
        assert_eq!(other.counter(Counter::Inserts), 3);
        assert_eq!(other.page_live(2).load(Ordering::Relaxed), 5);
        assert_eq!(other.pop_free_page(), Some(3));
        assert_eq!(state.pop_free_page(), Some(1));
        assert_eq!(state.pop_free_page(), None);
        assert_eq!(other.get(Field::FreePageCount), 0);

        other.ensure_pages(5000).unwrap();
        assert!(state.pages_capacity().unwrap() >= 5000);
        state.page_live(4999).store(7, Ordering::Relaxed);
        assert_eq!(other.page_live(4999).load(Ordering::Relaxed), 7);
        assert!(state.ensure_pages(MAX_EDGE_PAGES + 1).is_err());
        state.set_epoch(0xfeed_beef_0000_0001);
        assert_eq!(other.epoch(), 0xfeed_beef_0000_0001);
    }

    #[test]
    fn bad_header_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.dat");
        drop(SharedState::create(&path, 0, &[]).unwrap());
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[8] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let err = SharedState::open(&path).err().unwrap().to_string();
        assert!(err.contains("checksum"), "{err}");
    }
}
