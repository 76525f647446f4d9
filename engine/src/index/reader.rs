//! The reader: [`DiskReader`] is one thread's read access to an [`Index`] (its own I/O queue
//! over the side files or the relation's segments) and implements [`IndexSource`].

use std::io;

use super::Index;
use crate::cache::{Caller, Ticket};
use crate::counters::SearchCounters;
use crate::distance::Metric;
use crate::io::{AlignedPage, PageReader};
use crate::search::IndexSource;
use crate::segments::SegmentReader;
use crate::storage::state::Field;
use crate::storage::{EdgePageLayout, HeapTid, IndirEntry, StorageError};
use crate::VertexId;

/// Per-thread read access to an [`Index`]: implements [`IndexSource`].
pub struct DiskReader<'a> {
    pub(super) index: &'a Index,
    pub(super) io: ReaderIo,
    pub(super) slot_buf: Vec<u8>,
    pub(super) miss_buf: Vec<AlignedPage>,
    pub(super) caller: Caller,
}

/// A finished [`DiskReader`]'s reusable parts, for [`Index::reader_reusing`]. Every read of
/// a reader completes before the call that issued it returns, so a spare has nothing in
/// flight.
pub struct SpareReader {
    pub(super) index: usize,
    pub(super) io: ReaderIo,
    pub(super) slot_buf: Vec<u8>,
    pub(super) miss_buf: Vec<AlignedPage>,
}

/// Reads in flight per reader: a hop reads W = 4 pages, a CASR window tens of vectors.
pub(super) const READER_QUEUE_DEPTH: u32 = 64;

/// A reader's I/O: the side files' edge and vector files, or the relation's segment files.
pub(super) enum ReaderIo {
    Side(PageReader),
    Relation(SegmentReader),
}

impl ReaderIo {
    pub(super) fn stats(&self) -> crate::io::IoStats {
        match self {
            ReaderIo::Side(io) => io.stats(),
            ReaderIo::Relation(io) => io.stats(),
        }
    }
}

impl DiskReader<'_> {
    /// Gives up the reader's files, queue and buffers for the next reader of the same index.
    pub fn into_spare(self) -> SpareReader {
        SpareReader {
            index: self.index.identity(),
            io: self.io,
            slot_buf: self.slot_buf,
            miss_buf: self.miss_buf,
        }
    }

    /// `io_uring+O_DIRECT`, `pread+buffered`, ...
    pub fn backend_name(&self) -> &'static str {
        match &self.io {
            ReaderIo::Side(io) => io.backend_name(),
            ReaderIo::Relation(io) if io.is_direct() => "segments+O_DIRECT",
            ReaderIo::Relation(_) => "segments+buffered",
        }
    }

    /// Whose reads these are, for the edge-page cache's promotion rule and statistics
    /// (searches by default; inserts set [`Caller::Insert`] for their position seeking).
    pub fn set_caller(&mut self, caller: Caller) {
        self.caller = caller;
    }

    pub fn caller(&self) -> Caller {
        self.caller
    }

    /// Checks the checksum and page number of every page read from disk; a page that fails
    /// is never handed out or cached.
    fn verify_pages(&self, pages: &[u32], bytes: &[u8]) -> io::Result<()> {
        let files = &self.index.files;
        let layout = files.edge_layout();
        for (&page_no, page) in pages.iter().zip(bytes.chunks_exact(layout.page_size())) {
            files
                .bulk()
                .verify_edge_page(&layout, page, page_no)
                .map_err(storage_to_io)?;
        }
        Ok(())
    }

    /// Reads edge pages `pages` from disk into `self.miss_buf`, back to back in the edge
    /// layout's page size, and verifies them; returns their bytes' length. Side files: 4 KiB
    /// pages of the edge file; a relation: 8 KiB blocks of its segment files, where the
    /// extent map places each ordinal.
    fn read_from_disk(&mut self, pages: &[u32]) -> io::Result<usize> {
        let page_size = self.index.files.edge_layout().page_size();
        let units = pages.len() * page_size / std::mem::size_of::<AlignedPage>();
        self.miss_buf.resize(units, AlignedPage::zeroed());
        match &mut self.io {
            ReaderIo::Side(io) => io.read_edge_pages(pages, &mut self.miss_buf[..units])?,
            ReaderIo::Relation(io) => {
                let relation = self.index.files.relation().expect("a relation index");
                let blocks: Vec<u32> = pages
                    .iter()
                    .map(|&p| {
                        relation
                            .block(crate::pages::PageKind::Edge, p)
                            .map_err(storage_to_io)?
                            .ok_or_else(|| {
                                io::Error::new(
                                    io::ErrorKind::InvalidData,
                                    format!("edge page {p} is beyond the extent map"),
                                )
                            })
                    })
                    .collect::<io::Result<_>>()?;
                io.read_blocks(&blocks, &mut self.miss_buf[..units])?;
            }
        }
        let bytes: &[u8] = bytemuck::cast_slice(&self.miss_buf[..units]);
        self.verify_pages(pages, bytes)?;
        Ok(bytes.len())
    }
}

pub(crate) fn storage_to_io(e: StorageError) -> io::Error {
    match e {
        StorageError::Io { source, .. } => source,
        other => io::Error::new(io::ErrorKind::InvalidData, other.to_string()),
    }
}

impl IndexSource for DiskReader<'_> {
    type PqTable = crate::pq::QueryTable;

    fn page_cache_bytes(&self) -> u64 {
        self.io.stats().cached_bytes
    }

    fn metric(&self) -> Metric {
        self.index.metric()
    }

    fn dim(&self) -> usize {
        self.index.dim()
    }

    fn edge_layout(&self) -> EdgePageLayout {
        self.index.files.edge_layout()
    }

    fn entry(&self, v: VertexId) -> Option<IndirEntry> {
        self.index.files.indirection().entry(v)
    }

    fn pq_table(&self, query: &[f32]) -> Self::PqTable {
        self.index.pq.query_table(query)
    }

    fn prefetch_pq_code(&self, v: VertexId) {
        if let Some(code) = self.index.files.pq_code(v) {
            crate::prefetch::bytes(code);
        }
    }

    fn pq_distance(&self, table: &Self::PqTable, v: VertexId) -> f32 {
        self.index
            .files
            .pq_code(v)
            .map_or(f32::INFINITY, |code| table.distance(code))
    }

    fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    fn entry_points(
        &self,
        query: &[f32],
        list: usize,
        counters: &mut SearchCounters,
    ) -> Vec<VertexId> {
        crate::search::live_entry_points(self, &*self.index.entrance(), query, list, counters)
    }

    fn medoid(&self) -> VertexId {
        self.index.files.manifest().medoid
    }

    fn id_bound(&self) -> VertexId {
        // Ids are handed out in order (or reused below the mark); every id below the mark has
        // its vector slot in the file.
        let files = &self.index.files;
        (files.state().get(Field::NextVertex)).min(files.indirection().capacity() as u32)
    }

    fn read_edge_pages(&mut self, pages: &[u32], out: &mut [u8]) -> io::Result<u64> {
        // The index outlives this reader: its cache binding is not a borrow of `self`.
        let index = self.index;
        let page_size = index.files.edge_layout().page_size();
        let Some(binding) = index.files.page_cache() else {
            match &mut self.io {
                // Straight into `out` (zero-copy when it is aligned).
                ReaderIo::Side(io) => {
                    io.read_edge_pages_into(pages, out)?;
                    self.verify_pages(pages, out)?;
                }
                ReaderIo::Relation(_) => {
                    let len = self.read_from_disk(pages)?;
                    out[..len].copy_from_slice(&bytemuck::cast_slice(&self.miss_buf)[..len]);
                }
            }
            return Ok(0);
        };
        let cache = &binding.cache;
        // Hits are copied straight into place; misses are read as one batch. The frames are
        // this index's edge pages (`IndexFiles::attach_cache` checks their size).
        let mut misses: Vec<(usize, u32, Ticket)> = Vec::new();
        for (i, (&page_no, page)) in pages
            .iter()
            .zip(out.chunks_exact_mut(page_size))
            .enumerate()
        {
            let key = binding.key(page_no);
            if !cache.lookup(key, self.caller, page) {
                // Taken before the read: see `PageCache::admit`.
                misses.push((i, page_no, cache.ticket(key)));
            }
        }
        let hits = (pages.len() - misses.len()) as u64;
        if misses.is_empty() {
            return Ok(hits);
        }
        let miss_pages: Vec<u32> = misses.iter().map(|m| m.1).collect();
        // Verified before anything is admitted: a page that fails is never cached.
        let len = self.read_from_disk(&miss_pages)?;
        let miss_bytes: &[u8] = &bytemuck::cast_slice(&self.miss_buf)[..len];
        for (&(i, page_no, ticket), page) in misses.iter().zip(miss_bytes.chunks_exact(page_size)) {
            out[i * page_size..(i + 1) * page_size].copy_from_slice(page);
            cache.admit(binding.key(page_no), self.caller, page, ticket);
        }
        Ok(hits)
    }

    fn load_vectors(
        &mut self,
        ids: &[VertexId],
        vectors: &mut Vec<f32>,
        tids: &mut Vec<HeapTid>,
    ) -> io::Result<u64> {
        let slot_size = self.index.files.vector_layout().slot_size();
        // The vector of vertex v is in slot v (ids are reused together with their slots).
        self.slot_buf.resize(ids.len() * slot_size, 0);
        let bytes = match &mut self.io {
            ReaderIo::Side(io) => io.read_vectors(ids, &mut self.slot_buf)?,
            ReaderIo::Relation(io) => {
                let relation = self.index.files.relation().expect("a relation index");
                let read = io.read_vector_slots(
                    &relation.map(),
                    &relation.vectors,
                    ids,
                    &mut self.slot_buf,
                );
                match read {
                    Ok(bytes) => bytes,
                    // A slot beyond this copy of the map: the relation grew since it was read.
                    Err(_) => {
                        relation.refresh().map_err(storage_to_io)?;
                        io.read_vector_slots(
                            &relation.map(),
                            &relation.vectors,
                            ids,
                            &mut self.slot_buf,
                        )?
                    }
                }
            }
        };
        self.parse_slots(ids.iter().copied(), vectors, tids)?;
        Ok(bytes)
    }

    fn load_vector_run(
        &mut self,
        first: VertexId,
        count: usize,
        vectors: &mut Vec<f32>,
        tids: &mut Vec<HeapTid>,
    ) -> io::Result<u64> {
        let io = match &mut self.io {
            ReaderIo::Side(io) => io,
            ReaderIo::Relation(_) => {
                // Slots of a relation straddle page headers: read them as slots.
                let ids: Vec<VertexId> = (first..first + count as VertexId).collect();
                return self.load_vectors(&ids, vectors, tids);
            }
        };
        let slot_size = self.index.files.vector_layout().slot_size();
        self.slot_buf.resize(count * slot_size, 0);
        let bytes = io.read_vector_run(first, count, &mut self.slot_buf)?;
        self.parse_slots(first..first + count as VertexId, vectors, tids)?;
        Ok(bytes)
    }
}

impl DiskReader<'_> {
    /// Decodes the slots of `ids` from `slot_buf`, appending to `vectors` and `tids`.
    fn parse_slots(
        &self,
        ids: impl Iterator<Item = VertexId>,
        vectors: &mut Vec<f32>,
        tids: &mut Vec<HeapTid>,
    ) -> io::Result<()> {
        let layout = self.index.files.vector_layout();
        layout.accept_loaded(ids, &self.slot_buf, |v| self.entry(v), vectors, tids)
    }
}
