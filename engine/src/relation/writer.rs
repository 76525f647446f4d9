//! The relation writer: a built index written into an empty [`PageStore`], kind by kind, in
//! the order and runs the module documentation of [`crate::relation`] shows.

use crate::pages::blob::{self, BlobCut};
use crate::pages::codes::CodePages;
use crate::pages::edge::EdgeLayout;
use crate::pages::extent::{run_len, runs_for, ExtentMap};
use crate::pages::meta::{Meta, MAX_EXTENT_MAP_PAGES};
use crate::pages::vector::VectorPages;
use crate::pages::{self, indirection, PageKind, BLOCK_SIZE, EXTENT_BLOCKS};
use crate::storage::writer::{check_list, validate_header, validate_with};
use crate::storage::{BuildInput, EdgeLocation, IndirEntry, StorageError, FLAG_LIVE, FREE_OWNER};
use crate::store::PageStore;
use crate::VertexId;

/// Pages handed to the store together: consecutive blocks written back to back. The
/// PostgreSQL store logs such a batch as one `BULK_IMAGES` record (RFC 0001 §7, at most 32
/// images), so batches of consecutive blocks are what a store should expect and prefer.
pub const BATCH_BLOCKS: usize = 32;

pub struct RelationWriter;

/// Where the writer takes each vertex's edge list, vector and PQ code. Each kind is asked
/// for in one pass: lists in the order the placement puts them on pages (ascending ids for
/// an identity placement), vectors and codes in ascending vertex order. A memory-bounded
/// build streams them from its spool files this way (`crate::index::partitioned`); an
/// in-memory build's [`BuildInput`] answers from its slices.
pub trait RowSource {
    fn list(&mut self, v: VertexId, out: &mut Vec<VertexId>) -> Result<(), StorageError>;
    fn vector(&mut self, v: VertexId, out: &mut [f32]) -> Result<(), StorageError>;
    fn code(&mut self, v: VertexId, out: &mut [u8]) -> Result<(), StorageError>;
}

/// The rows of an in-memory [`BuildInput`].
struct InMemoryRows<'a, 'b>(&'a BuildInput<'b>);

impl RowSource for InMemoryRows<'_, '_> {
    fn list(&mut self, v: VertexId, out: &mut Vec<VertexId>) -> Result<(), StorageError> {
        out.clear();
        out.extend_from_slice(&self.0.adjacency[v as usize]);
        Ok(())
    }

    fn vector(&mut self, v: VertexId, out: &mut [f32]) -> Result<(), StorageError> {
        let dim = self.0.dim;
        out.copy_from_slice(&self.0.vectors[v as usize * dim..(v as usize + 1) * dim]);
        Ok(())
    }

    fn code(&mut self, v: VertexId, out: &mut [u8]) -> Result<(), StorageError> {
        let b = self.0.pq_bytes;
        out.copy_from_slice(&self.0.pq_codes[v as usize * b..(v as usize + 1) * b]);
        Ok(())
    }
}

impl RelationWriter {
    /// Writes the complete index `input` into `store`, which must be empty (`nblocks() ==
    /// 0`), with `medoid` as the start of searches without entry points (0 for an empty
    /// index) and `build_id` on the metapage. Returns the metapage written.
    ///
    /// The placement must have been computed for 8 KiB edge pages
    /// (`EdgeLayout::new(max_degree).slots_per_page()`, e.g. through
    /// [`crate::index::build_in_memory`] with `EdgePageFormat::Relation`); one for the side
    /// file's 4 KiB pages is refused, since it would leave every page half empty.
    ///
    /// Block 0 is reserved first and the metapage written into it last, after every page it
    /// points at and a [`PageStore::sync`]: until then block 0 is a new (all-zero) page, so a
    /// store the writer failed or crashed in is never mistaken for an index. The caller
    /// discards such a store (in PostgreSQL the build's relfilenode goes with its aborted
    /// transaction). Pages go to [`PageStore::write_block`] in batches of up to
    /// [`BATCH_BLOCKS`] consecutive blocks, in ascending block order. Page LSNs are left 0 and
    /// PostgreSQL checksums unset: the PostgreSQL store stamps both when it logs the pages.
    pub fn write(
        store: &dyn PageStore,
        input: &BuildInput,
        medoid: VertexId,
        build_id: u64,
    ) -> Result<Meta, StorageError> {
        let (kinds, n, manifest) = Self::check(input, medoid)?;
        Self::write_new(
            store,
            input,
            &mut InMemoryRows(input),
            medoid,
            build_id,
            &kinds,
            n,
            manifest,
        )
    }

    /// [`RelationWriter::write`] with the lists, vectors and codes taken from `rows` instead
    /// of `input`, whose `adjacency`, `vectors` and `pq_codes` must be empty: the header of
    /// a build too large to hold in memory. `input.heap_tids` gives the vertex count. Each
    /// list is checked as it is written (at most `max_degree` ids, each a vertex).
    pub fn write_streamed(
        store: &dyn PageStore,
        input: &BuildInput,
        rows: &mut dyn RowSource,
        medoid: VertexId,
        build_id: u64,
    ) -> Result<Meta, StorageError> {
        if !(input.adjacency.is_empty() && input.vectors.is_empty() && input.pq_codes.is_empty()) {
            return Err(StorageError::invalid(
                "a streamed write takes its lists, vectors and codes from its row source",
            ));
        }
        let (kinds, spp) = Self::kinds(input)?;
        let manifest = validate_header(input, spp)?;
        let n = manifest.vertex_count;
        Self::check_medoid(n, medoid)?;
        Self::write_new(store, input, rows, medoid, build_id, &kinds, n, manifest)
    }

    #[allow(clippy::too_many_arguments)]
    fn write_new(
        store: &dyn PageStore,
        input: &BuildInput,
        rows: &mut dyn RowSource,
        medoid: VertexId,
        build_id: u64,
        kinds: &Kinds,
        n: u32,
        manifest: crate::storage::Manifest,
    ) -> Result<Meta, StorageError> {
        let blocks = store.nblocks()?;
        if blocks != 0 {
            return Err(StorageError::invalid(format!(
                "a navis relation is written into an empty store; this one has {blocks} blocks"
            )));
        }
        let meta_block = store.extend(1)?;
        if meta_block != 0 {
            return Err(StorageError::invalid(format!(
                "the store grew while the build started: metapage would be block {meta_block}"
            )));
        }
        let (meta, page) = write_pages(store, input, rows, medoid, build_id, kinds, n, manifest)?;
        store.write_block(0, &page)?;
        store.sync()?;
        Ok(meta)
    }

    /// Writes the complete index `input` after the last block of `store`, which holds an
    /// earlier build of the same index that readers may still use, and returns the metapage
    /// that switches to it, without writing it: the caller replaces block 0 through its own
    /// locking and logging (in PostgreSQL, a buffer-managed page). Blocks `1..first_block` of
    /// the new metapage (every earlier build) are retired. Used by the online rebuild of a
    /// growing index (`crate::index::regrow`).
    pub fn append(
        store: &dyn PageStore,
        input: &BuildInput,
        medoid: VertexId,
        build_id: u64,
    ) -> Result<(Meta, Vec<u8>), StorageError> {
        let (kinds, n, manifest) = Self::check(input, medoid)?;
        if store.nblocks()? == 0 {
            return Err(StorageError::invalid(
                "an online rebuild appends to an index; this store is empty",
            ));
        }
        write_pages(
            store,
            input,
            &mut InMemoryRows(input),
            medoid,
            build_id,
            &kinds,
            n,
            manifest,
        )
    }

    fn check(
        input: &BuildInput,
        medoid: VertexId,
    ) -> Result<(Kinds, u32, crate::storage::Manifest), StorageError> {
        let (kinds, spp) = Self::kinds(input)?;
        let manifest = validate_with(input, spp)?;
        let n = manifest.vertex_count;
        Self::check_medoid(n, medoid)?;
        Ok((kinds, n, manifest))
    }

    /// The page formats of `input`, and the edge slots per page its placement must use.
    fn kinds(input: &BuildInput) -> Result<(Kinds, usize), StorageError> {
        let edges = EdgeLayout::new(input.max_degree)?;
        let spp = edges.slots_per_page();
        if input.placement.slots_per_page as usize != spp {
            return Err(StorageError::invalid(format!(
                "the placement was computed for {} slots per edge page; 8 KiB edge pages at \
                 max_degree {} hold {spp}",
                input.placement.slots_per_page, input.max_degree
            )));
        }
        let kinds = Kinds {
            edges,
            vectors: VectorPages::new(input.dim)?,
            codes: CodePages::new(input.pq_bytes)?,
        };
        Ok((kinds, spp))
    }

    fn check_medoid(n: u32, medoid: VertexId) -> Result<(), StorageError> {
        let medoid_ok = if n == 0 { medoid == 0 } else { medoid < n };
        if !medoid_ok {
            return Err(StorageError::invalid(format!(
                "medoid {medoid} is not one of the {n} vertices"
            )));
        }
        Ok(())
    }
}

/// Every page of `input` appended to `store` (first block: its current end), then the
/// metapage that points at them, sealed but not written.
#[allow(clippy::too_many_arguments)]
fn write_pages(
    store: &dyn PageStore,
    input: &BuildInput,
    rows: &mut dyn RowSource,
    medoid: VertexId,
    build_id: u64,
    kinds: &Kinds,
    n: u32,
    manifest: crate::storage::Manifest,
) -> Result<(Meta, Vec<u8>), StorageError> {
    let first_block = store.nblocks()?;
    let mut out = Appender::new(store);
    write_edges(&mut out, input, rows, &kinds.edges)?;
    write_vectors(&mut out, input, rows, &kinds.vectors)?;
    write_indirection(&mut out, input)?;
    write_codes(&mut out, input, rows, &kinds.codes)?;
    let codebook = blob::cut(input.pq_codebook, 0)?;
    let entrance = blob::cut(input.entrance, codebook.blob().pages)?;
    write_blobs(&mut out, &[codebook, entrance])?;
    let extent_map_pages = write_extent_map(&mut out)?;
    out.flush()?;

    let meta = Meta {
        metric: input.metric,
        dim: manifest.dim,
        max_degree: manifest.max_degree,
        pq_bytes: manifest.pq_bytes,
        params: manifest.params,
        medoid,
        build_vertices: n,
        first_block,
        build_id,
        codebook: codebook.blob(),
        entrance: entrance.blob(),
        extent_map_pages,
    };
    // Everything the metapage points at is durable before the metapage exists.
    store.sync()?;
    let mut page = vec![0u8; BLOCK_SIZE];
    pages::init(&mut page, PageKind::Meta, 0);
    meta.encode(&mut page);
    pages::seal(&mut page);
    Ok((meta, page))
}

struct Kinds {
    edges: EdgeLayout,
    vectors: VectorPages,
    codes: CodePages,
}

/// Appends runs at the end of the store, records them in the extent map, and batches pages
/// of consecutive blocks.
struct Appender<'s> {
    store: &'s dyn PageStore,
    map: ExtentMap,
    batch: Vec<u8>,
    batch_first: u32,
    batch_len: usize,
}

impl<'s> Appender<'s> {
    fn new(store: &'s dyn PageStore) -> Self {
        Appender {
            store,
            map: ExtentMap::new(),
            batch: vec![0u8; BATCH_BLOCKS * BLOCK_SIZE],
            batch_first: 0,
            batch_len: 0,
        }
    }

    /// Allocates the runs that hold `pages` ordinals of `kind` (its first runs: every kind
    /// is written once, whole) and returns the ordinals they hold.
    fn allocate(&mut self, kind: PageKind, pages: u64) -> Result<u32, StorageError> {
        assert!(
            self.map.runs(kind).is_empty(),
            "{} written twice",
            kind.name()
        );
        let pages = u32::try_from(pages).map_err(|_| {
            StorageError::invalid(format!(
                "{pages} {} pages exceed the block numbers",
                kind.name()
            ))
        })?;
        for run in 0..runs_for(pages) {
            let first = self.store.extend(run_len(run))?;
            self.map.push_run(kind, first);
        }
        Ok(self.map.capacity(kind))
    }

    fn block(&self, kind: PageKind, ordinal: u32) -> u32 {
        self.map
            .block(kind, ordinal)
            .expect("ordinal inside the allocated runs")
    }

    /// The buffer for the page at `block`, which the caller fills completely (every page
    /// format starts with `pages::init`, which clears it).
    fn page(&mut self, block: u32) -> Result<&mut [u8], StorageError> {
        let next = self.batch_first.wrapping_add(self.batch_len as u32);
        if self.batch_len == BATCH_BLOCKS || (self.batch_len > 0 && block != next) {
            self.flush()?;
        }
        if self.batch_len == 0 {
            self.batch_first = block;
        }
        let at = self.batch_len * BLOCK_SIZE;
        self.batch_len += 1;
        Ok(&mut self.batch[at..at + BLOCK_SIZE])
    }

    fn flush(&mut self) -> Result<(), StorageError> {
        for (i, page) in self.batch[..self.batch_len * BLOCK_SIZE]
            .chunks_exact(BLOCK_SIZE)
            .enumerate()
        {
            self.store.write_block(self.batch_first + i as u32, page)?;
        }
        self.batch_len = 0;
        Ok(())
    }
}

/// Edge page ordinal p holds the lists the placement puts on page p, each in its slot and
/// stamped with its owner. p is an ordinal among edge pages (what the indirection entries
/// name), not a block: the extent map gives the block.
fn write_edges(
    out: &mut Appender,
    input: &BuildInput,
    rows: &mut dyn RowSource,
    layout: &EdgeLayout,
) -> Result<(), StorageError> {
    let spp = layout.slots_per_page();
    let n = input.heap_tids.len();
    let mut list = Vec::with_capacity(input.max_degree);
    let members = input.placement.members(spp);
    let pages = input.placement.pages;
    let capacity = out.allocate(PageKind::Edge, pages.into())?;
    for p in 0..capacity {
        let block = out.block(PageKind::Edge, p);
        let page = out.page(block)?;
        layout.init_page(page, block, p);
        if p < pages {
            let cells = &members[p as usize * spp..(p as usize + 1) * spp];
            for (slot, &v) in cells.iter().enumerate() {
                if v != FREE_OWNER {
                    rows.list(v, &mut list)?;
                    check_list(v, &list, input.max_degree, n)?;
                    layout.put_slot(page, slot, v, &list)?;
                }
            }
        }
        layout.seal(page);
    }
    Ok(())
}

/// Vector slot v holds vertex v (vector, heap TID, owner v). Slots straddle pages, so each
/// extent's pages are formatted together in one buffer (at most 1 MiB) and then appended.
fn write_vectors(
    out: &mut Appender,
    input: &BuildInput,
    rows: &mut dyn RowSource,
    vectors: &VectorPages,
) -> Result<(), StorageError> {
    let n = input.heap_tids.len() as u32;
    let mut vector = vec![0f32; input.dim];
    let capacity = out.allocate(PageKind::Vector, vectors.pages_for(n.into()))?;
    let spe = vectors.slots_per_extent();
    let mut slot = vec![0u8; vectors.slot_size()];
    let mut extent = Vec::new();
    for e in 0..capacity.div_ceil(EXTENT_BLOCKS) {
        let first_ordinal = e * EXTENT_BLOCKS;
        let in_extent = (capacity - first_ordinal).min(EXTENT_BLOCKS);
        extent.resize(in_extent as usize * BLOCK_SIZE, 0);
        for (k, page) in extent.chunks_exact_mut(BLOCK_SIZE).enumerate() {
            let ordinal = first_ordinal + k as u32;
            vectors.init_page(page, out.block(PageKind::Vector, ordinal), ordinal);
        }
        let slots = e.saturating_mul(spe)..n.min(e.saturating_add(1).saturating_mul(spe));
        for v in slots {
            rows.vector(v, &mut vector)?;
            vectors
                .layout()
                .encode_slot(&mut slot, &vector, v, input.heap_tids[v as usize])?;
            vectors.scatter(v, &slot, &mut extent, 0)?;
        }
        for (k, page) in extent.chunks_exact_mut(BLOCK_SIZE).enumerate() {
            pages::seal(page);
            let block = out.block(PageKind::Vector, first_ordinal + k as u32);
            out.page(block)?.copy_from_slice(page);
        }
    }
    Ok(())
}

/// Entry v: LIVE, its edge list's (page ordinal, slot), its heap TID. Entries of ids
/// beyond the build stay zero ("no such vertex").
fn write_indirection(out: &mut Appender, input: &BuildInput) -> Result<(), StorageError> {
    let n = input.heap_tids.len();
    let layout = indirection::layout();
    let capacity = out.allocate(PageKind::Indirection, layout.pages_for(n as u64))?;
    let per_page = layout.per_page();
    let placement = input.placement;
    for o in 0..capacity {
        let block = out.block(PageKind::Indirection, o);
        let page = out.page(block)?;
        indirection::init_page(page, block, o);
        let first = o as usize * per_page;
        for v in first..n.min(first + per_page) {
            let entry = IndirEntry {
                edge: EdgeLocation {
                    page: placement.page_of[v],
                    slot: placement.slot_of[v],
                },
                tid: input.heap_tids[v],
                flags: FLAG_LIVE,
            };
            indirection::publish(page, v as VertexId, entry);
        }
        pages::seal(page);
    }
    Ok(())
}

fn write_codes(
    out: &mut Appender,
    input: &BuildInput,
    rows: &mut dyn RowSource,
    codes: &CodePages,
) -> Result<(), StorageError> {
    let n = input.heap_tids.len();
    let capacity = out.allocate(PageKind::Codes, codes.pages_for(n as u64))?;
    let (per_page, pq_bytes) = (codes.per_page(), codes.pq_bytes());
    for o in 0..capacity {
        let block = out.block(PageKind::Codes, o);
        let page = out.page(block)?;
        codes.init_page(page, block, o);
        let first = o as usize * per_page;
        let area = codes.codes_mut(page);
        for v in first..n.min(first + per_page) {
            let at = (v - first) * pq_bytes;
            rows.code(v as VertexId, &mut area[at..at + pq_bytes])?;
        }
        pages::seal(page);
    }
    Ok(())
}

/// The blobs, in the order of `blobs` (their first ordinals already follow each other).
fn write_blobs(out: &mut Appender, blobs: &[BlobCut]) -> Result<(), StorageError> {
    let total: u64 = blobs.iter().map(|b| u64::from(b.blob().pages)).sum();
    let capacity = out.allocate(PageKind::Blob, total)?;
    for o in 0..capacity {
        let block = out.block(PageKind::Blob, o);
        let page = out.page(block)?;
        let owner = blobs.iter().find(|b| {
            let r = b.blob();
            (r.first_page..r.first_page + r.pages).contains(&o)
        });
        match owner {
            Some(b) => b.write_page(o - b.blob().first_page, block, page),
            None => {
                blob::init_page(page, block, o);
                pages::seal(page);
            }
        }
    }
    Ok(())
}

/// The extent-map pages, one appended block each (not runs: the map would have to contain
/// itself). Page i has ordinal i in `aux`; the metapage lists their blocks in order.
fn write_extent_map(out: &mut Appender) -> Result<Vec<u32>, StorageError> {
    let needed = out.map.pages_needed();
    if needed > MAX_EXTENT_MAP_PAGES {
        return Err(StorageError::invalid(format!(
            "{needed} extent-map pages; the metapage lists at most {MAX_EXTENT_MAP_PAGES}"
        )));
    }
    let mut blocks = Vec::with_capacity(needed);
    for i in 0..needed {
        let block = out.store.extend(1)?;
        blocks.push(block);
        // Encoded into a scratch page: `out.page` borrows the appender, the map is in it.
        let mut page = vec![0u8; BLOCK_SIZE];
        pages::init(&mut page, PageKind::ExtentMap, block);
        pages::set_aux(&mut page, i as u32);
        out.map.encode_page(i, &mut page);
        pages::seal(&mut page);
        out.page(block)?.copy_from_slice(&page);
    }
    Ok(blocks)
}
