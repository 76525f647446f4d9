//! An index opened from its relation (RFC 0001 stage 2c): the hot state (indirection entries,
//! PQ codes, quantizer, entrance graph) loaded once from the buffer-managed kinds through a
//! [`PageStore`], and per-thread readers that fetch edge pages and vectors straight from the
//! fork's segment files ([`SegmentReader`]) as the search goes.
//!
//! This is the read path only. The hot state is a private in-memory copy here; the PostgreSQL
//! layer will keep the same state in the shared runtime copies of RFC 0001 §3 so that writers
//! and redo can change it under running searches. The entrance graph is the build's with
//! every promotion recorded on the promotions pages applied.

use crate::counters::SearchCounters;
use crate::distance::Metric;
use crate::entrance::EntranceGraph;
use crate::io::{AlignedPage, IoOptions};
use crate::pages::edge::EdgeLayout;
use crate::pages::meta::Meta;
use crate::pages::vector::VectorPages;
use crate::pages::{PageKind, BLOCK_SIZE};
use crate::pq::ProductQuantizer;
use crate::relation::RelationImage;
use crate::search::{IndexSource, SearchCursor, SearchHit, SearchParams};
use crate::segments::SegmentReader;
use crate::storage::{EdgePageLayout, HeapTid, IndirEntry, StorageError};
use crate::store::PageStore;
use crate::VertexId;
use std::io;
use std::path::{Path, PathBuf};

/// An index opened from a relation image.
pub struct RelationIndex {
    meta: Meta,
    image: RelationImage,
    fork: PathBuf,
    layout: EdgePageLayout,
    edges: EdgeLayout,
    vectors: VectorPages,
    pq: ProductQuantizer,
    entrance: EntranceGraph,
}

fn invalid(fork: &Path, what: &str, e: impl std::fmt::Display) -> StorageError {
    StorageError::corrupt(fork, format!("{what}: {e}"))
}

impl RelationIndex {
    /// Opens the index whose buffer-managed pages `store` reads and whose main fork's first
    /// segment file is `fork` (for a [`crate::store::FileStore`], its file).
    pub fn open(store: &dyn PageStore, fork: &Path) -> Result<RelationIndex, StorageError> {
        let image = RelationImage::read_hot(store, fork)?;
        let meta = image.meta.clone();
        let pq = ProductQuantizer::from_bytes(&image.codebook)
            .map_err(|e| invalid(fork, "PQ codebook", e))?;
        let mut entrance = EntranceGraph::from_bytes(&image.entrance)
            .map_err(|e| invalid(fork, "entrance graph", e))?;
        if meta.build_vertices > 0
            && (pq.dim() != meta.dim as usize
                || entrance.dim() != meta.dim as usize
                || entrance.metric() != meta.metric
                || entrance.ids().iter().any(|&v| v >= meta.build_vertices))
        {
            return Err(invalid(
                fork,
                "metapage",
                "the codebook or entrance graph does not match it",
            ));
        }
        if meta.build_vertices > 0 {
            // As a server start replays entrance.log: up to the first record that does not
            // apply (the image already cut the stream after its last complete record).
            crate::update::promote::apply_records(&image.promotions, &mut entrance);
        }
        Ok(RelationIndex {
            layout: EdgePageLayout::for_relation(meta.max_degree as usize)?,
            edges: EdgeLayout::new(meta.max_degree as usize)?,
            vectors: VectorPages::new(meta.dim as usize)?,
            meta,
            image,
            fork: fork.to_path_buf(),
            pq,
            entrance,
        })
    }

    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    pub fn metric(&self) -> Metric {
        self.meta.metric
    }

    pub fn dim(&self) -> usize {
        self.meta.dim as usize
    }

    /// Published vertices.
    pub fn len(&self) -> usize {
        self.image.allocator.published as usize
    }

    /// Edge pages holding at least one current list.
    pub fn edge_pages(&self) -> u32 {
        let a = &self.image.allocator;
        a.edge_pages - a.free_pages.len() as u32
    }

    /// The decoded hot state, with the derived allocator (what a runtime copy starts from).
    pub fn image(&self) -> &RelationImage {
        &self.image
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A reader for one thread (its own io_uring queue and segment files).
    pub fn reader(&self, options: IoOptions) -> io::Result<RelationReader<'_>> {
        Ok(RelationReader {
            index: self,
            io: SegmentReader::open(&self.fork, options)?,
            blocks: Vec::new(),
            slot_buf: Vec::new(),
        })
    }

    /// One top-k search with `params` (CASR as `params.casr` says).
    pub fn search(
        &self,
        reader: &mut RelationReader<'_>,
        query: &[f32],
        params: SearchParams,
    ) -> io::Result<(Vec<SearchHit>, SearchCounters)> {
        let mut cursor = SearchCursor::new(reader, query, params)?;
        let hits = cursor.next_batch(params.k)?;
        Ok((hits, cursor.counters()))
    }

    fn entry(&self, v: VertexId) -> Option<IndirEntry> {
        self.image.entries.get(v as usize).copied().flatten()
    }
}

/// Per-thread read access to a [`RelationIndex`]: implements [`IndexSource`].
pub struct RelationReader<'a> {
    index: &'a RelationIndex,
    io: SegmentReader,
    blocks: Vec<AlignedPage>,
    slot_buf: Vec<u8>,
}

impl RelationReader<'_> {
    /// `io_uring`/`pread` reads with or without O_DIRECT, as the segment files allowed.
    pub fn is_direct(&self) -> bool {
        self.io.is_direct()
    }

    /// Whether O_DIRECT reads try the page cache first (on, unless the options or the file
    /// system said no).
    pub fn probes_page_cache(&self) -> bool {
        self.io.probes_page_cache()
    }
}

fn data_error(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

impl IndexSource for RelationReader<'_> {
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
        self.index.layout
    }

    fn entry(&self, v: VertexId) -> Option<IndirEntry> {
        self.index.entry(v)
    }

    fn pq_table(&self, query: &[f32]) -> Self::PqTable {
        self.index.pq.query_table(query)
    }

    fn prefetch_pq_code(&self, v: VertexId) {
        let pq_bytes = self.index.meta.pq_bytes as usize;
        if let Some(code) = self
            .index
            .image
            .codes
            .get(v as usize * pq_bytes..(v as usize + 1) * pq_bytes)
        {
            crate::prefetch::bytes(code);
        }
    }

    fn pq_distance(&self, table: &Self::PqTable, v: VertexId) -> f32 {
        let pq_bytes = self.index.meta.pq_bytes as usize;
        self.index
            .image
            .codes
            .get(v as usize * pq_bytes..(v as usize + 1) * pq_bytes)
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
        crate::search::live_entry_points(self, &self.index.entrance, query, list, counters)
    }

    fn medoid(&self) -> VertexId {
        self.index.meta.medoid
    }

    fn id_bound(&self) -> VertexId {
        self.index.image.entries.len() as VertexId
    }

    /// Edge pages are named by ordinal; each is read from the block the extent map gives it
    /// and verified (kind, block, ordinal, CRC) before the search sees it.
    fn read_edge_pages(&mut self, pages: &[u32], out: &mut [u8]) -> io::Result<u64> {
        let map = &self.index.image.extent_map;
        let blocks: Vec<u32> = pages
            .iter()
            .map(|&p| {
                map.block(PageKind::Edge, p)
                    .ok_or_else(|| data_error(format!("edge page {p} is beyond the extent map")))
            })
            .collect::<io::Result<_>>()?;
        self.blocks.resize(blocks.len() * 2, AlignedPage::zeroed());
        self.io.read_blocks(&blocks, &mut self.blocks)?;
        let bytes: &[u8] = bytemuck::cast_slice(&self.blocks[..blocks.len() * 2]);
        for (i, (&p, &b)) in pages.iter().zip(&blocks).enumerate() {
            let page = &bytes[i * BLOCK_SIZE..(i + 1) * BLOCK_SIZE];
            self.index.edges.verify(page, b, p).map_err(data_error)?;
            out[i * BLOCK_SIZE..(i + 1) * BLOCK_SIZE].copy_from_slice(page);
        }
        Ok(0)
    }

    fn load_vectors(
        &mut self,
        ids: &[VertexId],
        vectors: &mut Vec<f32>,
        tids: &mut Vec<HeapTid>,
    ) -> io::Result<u64> {
        let geometry = &self.index.vectors;
        let slot_size = geometry.slot_size();
        self.slot_buf.resize(ids.len() * slot_size, 0);
        let bytes = self.io.read_vector_slots(
            &self.index.image.extent_map,
            geometry,
            ids,
            &mut self.slot_buf,
        )?;
        let index = self.index;
        geometry.layout().accept_loaded(
            ids.iter().copied(),
            &self.slot_buf,
            |v| index.entry(v),
            vectors,
            tids,
        )?;
        Ok(bytes)
    }
}
