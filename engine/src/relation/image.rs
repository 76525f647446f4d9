//! The decoded image of a relation: every page verified, everything the writer put there read
//! back and cross-checked. `open` will build its runtime copies on this; the writer's tests
//! use it as their oracle.
//!
//! Checks, in order: the metapage; the extent-map pages it lists and the map itself
//! (`ExtentMap::check`); that every block is the metapage, an extent-map page or in exactly
//! one run (blocks in none must be new pages); then every page of every run, by kind, with
//! its block and (on the dense arrays) its ordinal and CRC. Across kinds: each live slot of an
//! edge page belongs to the vertex whose entry points at it and each published vertex's list
//! was found; each published vertex's vector slot carries its id and heap TID; the page
//! table's live counts equal the edge pages'; the allocator's counts and free lists agree with
//! the entries and the page table; both blobs reassemble to their CRCs.
//!
//! Strict on purpose: every page of a run must be a valid page, because the writer formats
//! the unused tail of each run. A relation that later grew (a crash between extending and
//! writing leaves new pages) needs `open` to relax that for pages past the allocator's
//! counts.

use crate::pages::codes::CodePages;
use crate::pages::edge::EdgeLayout;
use crate::pages::extent::{run_len, ExtentMap};
use crate::pages::meta::Meta;
use crate::pages::page_table::{self, PageTableEntry};
use crate::pages::vector::VectorPages;
use crate::pages::{self, blob, indirection, PageError, PageKind, BLOCK_SIZE, EXTENT_BLOCKS};
use crate::storage::{HeapTid, IndirEntry, StorageError};
use crate::store::PageStore;
use crate::VertexId;
use std::path::{Path, PathBuf};

/// "No page" / "no vertex" in free-list heads and links.
const NONE: u32 = u32::MAX;

/// Everything a relation holds, decoded.
#[derive(Clone, Debug)]
pub struct RelationImage {
    pub nblocks: u32,
    pub meta: Meta,
    pub extent_map: ExtentMap,
    /// The entry of every vertex id below `meta.alloc.next_vertex`; `None` for a free id.
    pub entries: Vec<Option<IndirEntry>>,
    /// The edge list of every published vertex (empty for free ids).
    pub adjacency: Vec<Vec<VertexId>>,
    /// Row-major vectors of every id below `next_vertex` (zeros for free ids).
    pub vectors: Vec<f32>,
    /// `pq_bytes` per id below `next_vertex`.
    pub codes: Vec<u8>,
    /// Per edge page ordinal below `meta.alloc.edge_pages`.
    pub page_table: Vec<PageTableEntry>,
    pub codebook: Vec<u8>,
    pub entrance: Vec<u8>,
    /// Blocks that are neither the metapage, an extent-map page nor in a run (all new pages;
    /// a freshly written relation has none).
    pub unmapped_blocks: u32,
}

impl RelationImage {
    /// Reads and verifies the relation in `store`; errors name it `<relation>`.
    pub fn read(store: &dyn PageStore) -> Result<RelationImage, StorageError> {
        Self::read_named(store, Path::new("<relation>"))
    }

    /// [`RelationImage::read`] naming the relation `name` in errors (a file's path, or a
    /// relation's). Every corruption error names the block it was found in.
    pub fn read_named(store: &dyn PageStore, name: &Path) -> Result<RelationImage, StorageError> {
        let (mut r, mut image, geometry) = Reader::open(store, name)?;
        image.unmapped_blocks = r.check_coverage(&image.meta, &image.extent_map)?;
        let free_links = r.indirection(&mut image)?;
        let live = r.edges(&mut image, &geometry.edges)?;
        r.vectors(&mut image, &geometry.vectors)?;
        r.codes(&mut image, &geometry.codes)?;
        r.page_table(&mut image, &live)?;
        r.allocator(&image, &free_links)?;
        r.blobs(&mut image)?;
        r.other_kinds(&image.extent_map)?;
        Ok(image)
    }

    /// What opening an index needs, read and verified without the bulk pages: the metapage,
    /// the extent map, every indirection entry, every PQ code and both blobs. `adjacency`,
    /// `vectors` and `page_table` stay empty: searches read edge pages and vectors from disk
    /// as they go.
    pub fn read_hot(store: &dyn PageStore, name: &Path) -> Result<RelationImage, StorageError> {
        let (mut r, mut image, geometry) = Reader::open(store, name)?;
        r.indirection(&mut image)?;
        r.codes(&mut image, &geometry.codes)?;
        r.blobs(&mut image)?;
        Ok(image)
    }

    /// The metapage and the extent map alone, verified: what a reader of an open index
    /// re-reads when the relation grew under it.
    pub fn read_map(store: &dyn PageStore, name: &Path) -> Result<(Meta, ExtentMap), StorageError> {
        let (_, image, _) = Reader::open(store, name)?;
        Ok((image.meta, image.extent_map))
    }

    /// Ids below `next_vertex` (published or free).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn vector(&self, v: VertexId) -> &[f32] {
        let dim = self.meta.dim as usize;
        &self.vectors[v as usize * dim..(v as usize + 1) * dim]
    }

    pub fn code(&self, v: VertexId) -> &[u8] {
        let b = self.meta.pq_bytes as usize;
        &self.codes[v as usize * b..(v as usize + 1) * b]
    }

    pub fn tid(&self, v: VertexId) -> Option<HeapTid> {
        self.entries
            .get(v as usize)
            .copied()
            .flatten()
            .map(|e| e.tid)
    }
}

struct Geometry {
    edges: EdgeLayout,
    vectors: VectorPages,
    codes: CodePages,
}

impl Geometry {
    fn of(r: &Reader, meta: &Meta) -> Result<Geometry, StorageError> {
        let bad = |e: StorageError| r.corrupt(format!("metapage (block 0): {e}"));
        Ok(Geometry {
            edges: EdgeLayout::new(meta.max_degree as usize).map_err(bad)?,
            vectors: VectorPages::new(meta.dim as usize).map_err(bad)?,
            codes: CodePages::new(meta.pq_bytes as usize).map_err(bad)?,
        })
    }
}

struct Reader<'s> {
    store: &'s dyn PageStore,
    name: PathBuf,
    page: Vec<u8>,
    nblocks: u32,
}

impl<'s> Reader<'s> {
    /// Reads and verifies the metapage and the extent map: what every decode starts from.
    /// The returned image holds only those; the caller fills the kinds it needs.
    fn open(
        store: &'s dyn PageStore,
        name: &Path,
    ) -> Result<(Reader<'s>, RelationImage, Geometry), StorageError> {
        let mut r = Reader {
            store,
            name: name.to_path_buf(),
            page: vec![0u8; BLOCK_SIZE],
            nblocks: store.nblocks()?,
        };
        if r.nblocks == 0 {
            return Err(r.corrupt("the relation has no blocks, so no metapage".into()));
        }
        r.read(0)?;
        pages::verify(&r.page, PageKind::Meta, 0).map_err(|e| r.page_error(e))?;
        let meta = Meta::decode(&r.page).map_err(|e| r.page_error(e))?;
        let map = r.extent_map(&meta)?;
        let geometry = Geometry::of(&r, &meta)?;
        let image = RelationImage {
            nblocks: r.nblocks,
            meta,
            extent_map: map,
            entries: Vec::new(),
            adjacency: Vec::new(),
            vectors: Vec::new(),
            codes: Vec::new(),
            page_table: Vec::new(),
            codebook: Vec::new(),
            entrance: Vec::new(),
            unmapped_blocks: 0,
        };
        Ok((r, image, geometry))
    }

    fn corrupt(&self, detail: String) -> StorageError {
        StorageError::corrupt(&self.name, detail)
    }

    fn page_error(&self, e: PageError) -> StorageError {
        e.into_storage(&self.name)
    }

    fn read(&mut self, block: u32) -> Result<(), StorageError> {
        self.store.read_block(block, &mut self.page)
    }

    /// Reads page `ordinal` of `kind` and verifies kind, block, ordinal and CRC. Returns the
    /// block.
    fn read_ordinal(
        &mut self,
        map: &ExtentMap,
        kind: PageKind,
        ordinal: u32,
    ) -> Result<u32, StorageError> {
        let block = map.block(kind, ordinal).ok_or_else(|| {
            self.corrupt(format!(
                "{} page {ordinal} is beyond the extent map's runs",
                kind.name()
            ))
        })?;
        self.read(block)?;
        pages::verify_ordinal(&self.page, kind, block, ordinal).map_err(|e| self.page_error(e))?;
        Ok(block)
    }

    fn need(&self, map: &ExtentMap, kind: PageKind, pages: u64) -> Result<(), StorageError> {
        let capacity = map.capacity(kind);
        if u64::from(capacity) < pages {
            return Err(self.corrupt(format!(
                "the metapage's counts need {pages} {} pages; the extent map has {capacity}",
                kind.name()
            )));
        }
        Ok(())
    }

    fn extent_map(&mut self, meta: &Meta) -> Result<ExtentMap, StorageError> {
        let mut map = ExtentMap::new();
        for (i, &block) in meta.extent_map_pages.iter().enumerate() {
            if block == 0 || block >= self.nblocks {
                return Err(self.corrupt(format!(
                    "metapage (block 0): extent-map page {i} at block {block}, outside 1..{}",
                    self.nblocks
                )));
            }
            self.read(block)?;
            pages::verify_ordinal(&self.page, PageKind::ExtentMap, block, i as u32)
                .and_then(|()| map.decode_page(&self.page, block))
                .map_err(|e| self.page_error(e))?;
        }
        map.check(self.nblocks).map_err(|e| {
            self.corrupt(format!(
                "{e} (extent-map pages at blocks {:?})",
                meta.extent_map_pages
            ))
        })?;
        Ok(map)
    }

    /// Every block is the metapage, one extent-map page or in one run; others must be new.
    fn check_coverage(&mut self, meta: &Meta, map: &ExtentMap) -> Result<u32, StorageError> {
        let mut covered = vec![false; self.nblocks as usize];
        covered[0] = true;
        for kind in PageKind::ALL.into_iter().filter(|&k| k != PageKind::Meta) {
            for (run, &first) in map.runs(kind).iter().enumerate() {
                for b in first..first + run_len(run as u32) {
                    covered[b as usize] = true;
                }
            }
        }
        for &block in &meta.extent_map_pages {
            if std::mem::replace(&mut covered[block as usize], true) {
                return Err(self.corrupt(format!(
                    "extent-map page at block {block} is also the metapage, another extent-map \
                     page or inside a run"
                )));
            }
        }
        let mut unmapped = 0;
        for block in 0..self.nblocks {
            if !covered[block as usize] {
                self.read(block)?;
                if !pages::is_new(&self.page) {
                    return Err(self.corrupt(format!(
                        "block {block} is in no run of the extent map but is not a new page"
                    )));
                }
                unmapped += 1;
            }
        }
        Ok(unmapped)
    }

    /// Entries of ids below `next_vertex`; ids past it must be zero. Returns the free links.
    fn indirection(&mut self, image: &mut RelationImage) -> Result<Vec<u32>, StorageError> {
        let n = image.meta.alloc.next_vertex as usize;
        let map = &image.extent_map;
        let layout = indirection::layout();
        self.need(map, PageKind::Indirection, layout.pages_for(n as u64))?;
        let per_page = layout.per_page();
        image.entries = Vec::with_capacity(n);
        let mut links = Vec::with_capacity(n);
        for o in 0..map.capacity(PageKind::Indirection) {
            let block = self.read_ordinal(map, PageKind::Indirection, o)?;
            let first = o as usize * per_page;
            for v in first..first + per_page {
                let (edge_word, tid_word) = indirection::words(&self.page, v as VertexId);
                if v < n {
                    let entry = indirection::entry(&self.page, v as VertexId);
                    // A free id's TID word is its free-list link.
                    links.push(if entry.is_none() {
                        tid_word as u32
                    } else {
                        NONE
                    });
                    image.entries.push(entry);
                } else if (edge_word, tid_word) != (0, 0) {
                    return Err(self.corrupt(format!(
                        "indirection page {o} (block {block}): vertex {v} is past the \
                         allocator's {n} ids but its entry is not zero"
                    )));
                }
            }
        }
        Ok(links)
    }

    /// Every live slot against its owner's entry; every published vertex's list found.
    /// Returns the live count of each allocated edge page.
    fn edges(
        &mut self,
        image: &mut RelationImage,
        layout: &EdgeLayout,
    ) -> Result<Vec<u32>, StorageError> {
        let map = &image.extent_map;
        let edge_pages = image.meta.alloc.edge_pages;
        self.need(map, PageKind::Edge, edge_pages.into())?;
        let n = image.entries.len();
        image.adjacency = vec![Vec::new(); n];
        let mut found = vec![false; n];
        let mut live = Vec::with_capacity(edge_pages as usize);
        for p in 0..map.capacity(PageKind::Edge) {
            let block = map.block(PageKind::Edge, p).expect("inside the capacity");
            self.read(block)?;
            layout
                .verify(&self.page, block, p)
                .map_err(|e| self.page_error(e))?;
            let count = layout.live_count(&self.page) as u32;
            if p >= edge_pages {
                if count != 0 {
                    return Err(self.corrupt(format!(
                        "edge page {p} (block {block}) is past the allocator's {edge_pages} \
                         pages but holds {count} lists"
                    )));
                }
                continue;
            }
            live.push(count);
            for s in 0..layout.slots_per_page() {
                let slot = layout.slot(&self.page, s);
                if slot.is_free() {
                    continue;
                }
                let owner = slot.owner();
                let at = |e: &IndirEntry| e.edge.page == p && e.edge.slot as usize == s;
                match image.entries.get(owner as usize).copied().flatten() {
                    Some(e) if at(&e) => {}
                    other => {
                        return Err(self.corrupt(format!(
                            "edge page {p} (block {block}) slot {s} holds a list of vertex \
                             {owner}, whose entry is {other:?}"
                        )))
                    }
                }
                let list = slot.to_vec();
                if let Some(&bad) = list.iter().find(|&&w| w as usize >= n) {
                    return Err(self.corrupt(format!(
                        "edge page {p} (block {block}) slot {s}: vertex {owner} has neighbour \
                         {bad}, past the {n} ids"
                    )));
                }
                image.adjacency[owner as usize] = list;
                found[owner as usize] = true;
            }
        }
        if let Some(v) = (0..n).find(|&v| image.entries[v].is_some() && !found[v]) {
            return Err(self.corrupt(format!(
                "vertex {v}'s entry {:?} points at an edge slot that does not hold its list",
                image.entries[v]
            )));
        }
        Ok(live)
    }

    /// Each extent's pages at once (slots straddle pages); published slots must carry their
    /// vertex and its entry's heap TID.
    fn vectors(
        &mut self,
        image: &mut RelationImage,
        vectors: &VectorPages,
    ) -> Result<(), StorageError> {
        let map = &image.extent_map;
        let n = image.entries.len();
        self.need(map, PageKind::Vector, vectors.pages_for(n as u64))?;
        let dim = image.meta.dim as usize;
        image.vectors = vec![0.0; n * dim];
        let capacity = map.capacity(PageKind::Vector);
        let spe = vectors.slots_per_extent() as usize;
        let mut extent = Vec::new();
        let mut slot = vec![0u8; vectors.slot_size()];
        for e in 0..capacity.div_ceil(EXTENT_BLOCKS) {
            let first = e * EXTENT_BLOCKS;
            let count = (capacity - first).min(EXTENT_BLOCKS);
            extent.resize(count as usize * BLOCK_SIZE, 0);
            for k in 0..count {
                self.read_ordinal(map, PageKind::Vector, first + k)?;
                let at = k as usize * BLOCK_SIZE;
                extent[at..at + BLOCK_SIZE].copy_from_slice(&self.page);
            }
            let slots = (e as usize * spe).min(n)..((e as usize + 1) * spe).min(n);
            for v in slots {
                let Some(entry) = image.entries[v] else {
                    continue;
                };
                vectors.gather(v as u32, &extent, 0, &mut slot)?;
                let parsed = vectors.layout().parse_slot(&slot)?;
                if parsed.owner() != v as u32 || parsed.tid() != entry.tid {
                    let (page, _) = vectors.page_span(v as u32);
                    let block = map.block(PageKind::Vector, first + page).unwrap_or(0);
                    return Err(self.corrupt(format!(
                        "vector slot {v} (from block {block}) holds owner {} and TID {:?}; \
                         vertex {v}'s entry has TID {:?}",
                        parsed.owner(),
                        parsed.tid(),
                        entry.tid
                    )));
                }
                parsed.copy_vector_into(&mut image.vectors[v * dim..(v + 1) * dim]);
            }
        }
        Ok(())
    }

    fn codes(&mut self, image: &mut RelationImage, codes: &CodePages) -> Result<(), StorageError> {
        let map = &image.extent_map;
        let n = image.entries.len();
        self.need(map, PageKind::Codes, codes.pages_for(n as u64))?;
        let total = n * codes.pq_bytes();
        let per_page = codes.per_page() * codes.pq_bytes();
        image.codes = Vec::with_capacity(total);
        for o in 0..map.capacity(PageKind::Codes) {
            self.read_ordinal(map, PageKind::Codes, o)?;
            let take = (total - image.codes.len()).min(per_page);
            image
                .codes
                .extend_from_slice(&codes.codes(&self.page)[..take]);
        }
        Ok(())
    }

    /// The page table's live counts must be the edge pages' own.
    fn page_table(&mut self, image: &mut RelationImage, live: &[u32]) -> Result<(), StorageError> {
        let map = &image.extent_map;
        let layout = page_table::layout();
        self.need(
            map,
            PageKind::PageTable,
            layout.pages_for(live.len() as u64),
        )?;
        let per_page = layout.per_page();
        image.page_table = Vec::with_capacity(live.len());
        for o in 0..map.capacity(PageKind::PageTable) {
            let block = self.read_ordinal(map, PageKind::PageTable, o)?;
            let first = o as usize * per_page;
            for (e, &count) in live.iter().enumerate().skip(first).take(per_page) {
                let entry = page_table::get(&self.page, e as u32);
                if entry.live != count {
                    return Err(self.corrupt(format!(
                        "page-table page {o} (block {block}): edge page {e} has {count} lists, \
                         the entry says {}",
                        entry.live
                    )));
                }
                image.page_table.push(entry);
            }
        }
        Ok(())
    }

    /// The allocator's counts and both free lists against the entries and the page table.
    fn allocator(&self, image: &RelationImage, free_links: &[u32]) -> Result<(), StorageError> {
        let a = &image.meta.alloc;
        let bad = |detail: String| self.corrupt(format!("metapage (block 0): {detail}"));
        let published = image.entries.iter().flatten().count() as u32;
        let deleted = image
            .entries
            .iter()
            .flatten()
            .filter(|e| e.is_deleted())
            .count() as u32;
        if (published, deleted) != (a.published, a.deleted) {
            return Err(bad(format!(
                "{} published and {} deleted vertices, the entries hold {published} and {deleted}",
                a.published, a.deleted
            )));
        }
        let m = &image.meta;
        let medoid_ok = if m.build_vertices == 0 {
            m.medoid == 0
        } else {
            m.medoid < m.build_vertices
        };
        if m.build_vertices > a.next_vertex || !medoid_ok {
            return Err(bad(format!(
                "medoid {} and {} build vertices do not fit {} ids",
                m.medoid, m.build_vertices, a.next_vertex
            )));
        }
        let n = image.entries.len();
        let vertices = walk(a.free_vertex_head, n, |v| {
            (image.entries[v as usize].is_none()).then(|| free_links[v as usize])
        });
        let edge_pages = image.page_table.len();
        let pages = walk(a.free_page_head, edge_pages, |p| {
            let e = image.page_table[p as usize];
            (e.live == 0).then_some(e.next_free)
        });
        match (vertices, pages) {
            (Some(v), Some(p)) if (v, p) == (a.free_vertices, a.free_pages) => Ok(()),
            (v, p) => Err(bad(format!(
                "free lists of {} vertices from {} and {} pages from {} walk as {v:?} and {p:?}",
                a.free_vertices, a.free_vertex_head, a.free_pages, a.free_page_head
            ))),
        }
    }

    /// Both blobs, reassembled against their references; every blob page verified.
    fn blobs(&mut self, image: &mut RelationImage) -> Result<(), StorageError> {
        let map = &image.extent_map;
        let (codebook, entrance) = (image.meta.codebook, image.meta.entrance);
        let end = |b: &crate::pages::meta::BlobRef| u64::from(b.first_page) + u64::from(b.pages);
        self.need(map, PageKind::Blob, end(&codebook).max(end(&entrance)))?;
        let mut kept: Vec<(u32, u32, Vec<u8>)> = Vec::new();
        for o in 0..map.capacity(PageKind::Blob) {
            let block = self.read_ordinal(map, PageKind::Blob, o)?;
            if u64::from(o) < end(&codebook).max(end(&entrance)) {
                kept.push((o, block, self.page.clone()));
            }
        }
        let of = |b: &crate::pages::meta::BlobRef| {
            kept.iter()
                .filter(|(o, _, _)| (b.first_page..b.first_page + b.pages).contains(o))
                .map(|(_, block, page)| (*block, page.as_slice()))
                .collect::<Vec<_>>()
        };
        image.codebook = blob::reassemble(&codebook, "PQ codebook", of(&codebook))
            .map_err(|e| self.page_error(e))?;
        image.entrance = blob::reassemble(&entrance, "entrance graph", of(&entrance))
            .map_err(|e| self.page_error(e))?;
        Ok(())
    }

    /// Kinds nothing above decodes yet (promotions; extent-map runs, which a writer never
    /// makes): their pages must still verify.
    fn other_kinds(&mut self, map: &ExtentMap) -> Result<(), StorageError> {
        for kind in [PageKind::Promotions, PageKind::ExtentMap] {
            for o in 0..map.capacity(kind) {
                self.read_ordinal(map, kind, o)?;
            }
        }
        Ok(())
    }
}

/// Walks a free list from `head` through `next` (None: the element may not be on a free
/// list) over ids below `bound`. Returns its length, or None for a bad link or a cycle.
fn walk(head: u32, bound: usize, next: impl Fn(u32) -> Option<u32>) -> Option<u32> {
    let mut at = head;
    let mut count = 0u32;
    while at != NONE {
        if at as usize >= bound || count as usize >= bound {
            return None;
        }
        at = next(at)?;
        count += 1;
    }
    Some(count)
}
