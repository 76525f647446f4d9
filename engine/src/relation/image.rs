//! The decoded image of a relation: every page verified, everything the writer and the
//! page-apply functions put there read back and cross-checked, and the allocator derived.
//! `open` builds its runtime copies on this; the writer's and `StoreLog`'s tests use it as
//! their oracle.
//!
//! Checks, in order: the metapage; the extent-map pages it lists and the map itself
//! (`ExtentMap::check`); that every block is the metapage, an extent-map page or in exactly
//! one run (blocks in none must be new pages); then every page of every run, by kind, with
//! its block and (on the dense arrays) its ordinal and CRC. Across kinds: each current edge
//! list (the slot a published vertex's entry names) holds that vertex's list, and is found;
//! each published vertex's vector slot carries its id and heap TID and its code is on a
//! written page; both blobs reassemble to their CRCs; the promotion records are walked to
//! the last complete one.
//!
//! The allocator is derived, not read (RFC 0001 §10, [`Allocator`]): a vertex is published
//! iff its entry has `LIVE`; `len()` is one more than the highest published id; every edge
//! page of the extent map's runs exists and holds as many current lists as entries point at
//! it; ids below `len()` that are not published and pages without current lists are free.
//!
//! What a crash can leave, and so what is accepted (RFC 0001 §5): runs are reserved by
//! `EXTEND` as zero blocks and formatted when first written, and allocation is concurrent,
//! so an edge page, a vector page, an indirection page, a code page or a promotions page may
//! be *new* (all zeros) anywhere in its kind's runs, not only after the last used one
//! (page 10 handed to a writer that died, page 11 written by another). A new page reads as
//! empty; it is corruption only when published data must be on it. Slots that no entry names
//! (a list that moved away, a freed vertex's list) are stale, not errors: out-of-place writes
//! never clear them. An entry that is not published must have a zero edge word; its TID word
//! may hold a TID (a `VECTOR` whose `EDGE_PAGE` never came).

pub use super::allocator::Allocator;
use super::apply::Geometry;
use super::race::retry_racing_growth;
use crate::pages::edge::EdgeLayout;
use crate::pages::extent::{run_len, ExtentMap};
use crate::pages::meta::Meta;
use crate::pages::{self, blob, indirection, promotions, PageError, PageKind};
use crate::pages::{BLOCK_SIZE, PAYLOAD_OFFSET, PAYLOAD_SIZE};
use crate::storage::indirection::decode_edge_word;
use crate::storage::{HeapTid, IndirEntry, StorageError, FLAG_LIVE};
use crate::store::PageStore;
use crate::VertexId;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Everything a relation holds, decoded.
#[derive(Clone, Debug)]
pub struct RelationImage {
    pub nblocks: u32,
    pub meta: Meta,
    pub extent_map: ExtentMap,
    /// The entry of every vertex id below `len()` (one more than the highest published id);
    /// `None` for a free id.
    pub entries: Vec<Option<IndirEntry>>,
    /// The current edge list of every published vertex (empty for free ids).
    pub adjacency: Vec<Vec<VertexId>>,
    /// Row-major vectors of every id below `len()` (zeros for free ids).
    pub vectors: Vec<f32>,
    /// `pq_bytes` per id below `len()` (zeros on new pages).
    pub codes: Vec<u8>,
    /// The allocator, derived from the entries and the extent map.
    pub allocator: Allocator,
    pub codebook: Vec<u8>,
    pub entrance: Vec<u8>,
    /// The promotion records (`pages::promotions`), up to the last complete one.
    pub promotions: Vec<u8>,
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
        r.indirection(&mut image, &geometry.edges)?;
        r.edges(&mut image, &geometry.edges)?;
        r.vectors(&mut image, &geometry)?;
        r.codes(&mut image, &geometry, &mut CodeSink::Image)?;
        r.blobs(&mut image)?;
        r.promotions(&mut image)?;
        r.other_kinds(&image.extent_map)?;
        Ok(image)
    }

    /// What opening an index needs, read and verified without the bulk pages: the metapage,
    /// the extent map, every indirection entry (and the allocator derived from them), every
    /// PQ code, both blobs and the promotions. `adjacency` and `vectors` stay empty: searches
    /// read edge pages and vectors from disk as they go.
    pub fn read_hot(store: &dyn PageStore, name: &Path) -> Result<RelationImage, StorageError> {
        Self::read_hot_into(store, name, CodeSink::Image)
    }

    /// [`RelationImage::read_hot`] with the PQ codes of ids below `len()` written to `out` in
    /// id order (`len() * pq_bytes` bytes, zeros for ids on new pages) instead of kept:
    /// `codes` stays empty. The runtime copy is made this way, so that no backend holds
    /// every code at once (96 MB at 1M rows of 96-byte codes). A write error names `path`.
    pub fn read_hot_writing_codes(
        store: &dyn PageStore,
        name: &Path,
        path: &Path,
        out: &mut dyn Write,
    ) -> Result<RelationImage, StorageError> {
        Self::read_hot_into(store, name, CodeSink::Write { path, out })
    }

    fn read_hot_into(
        store: &dyn PageStore,
        name: &Path,
        mut codes: CodeSink,
    ) -> Result<RelationImage, StorageError> {
        let (mut r, mut image, geometry) = Reader::open(store, name)?;
        r.indirection(&mut image, &geometry.edges)?;
        r.codes(&mut image, &geometry, &mut codes)?;
        r.blobs(&mut image)?;
        r.promotions(&mut image)?;
        Ok(image)
    }

    /// The metapage and the extent map only: what a writer of changes starts from, and what
    /// a reader re-reads when a page lies beyond its copy of the map. A read that races the
    /// relation's growth is tried again (`relation/race.rs`); real damage fails every try.
    /// Seen as a spurious "runs reach block 115 but the relation has 111 blocks" once in
    /// 480 runs of `engine/tests/relation_updates.rs` before it was.
    pub fn read_layout(
        store: &dyn PageStore,
        name: &Path,
    ) -> Result<(Meta, ExtentMap), StorageError> {
        retry_racing_growth(|| Self::read_layout_once(store, name))
    }

    /// [`RelationImage::read_layout`] without the retries, for a caller that retries a
    /// larger read around it.
    pub(crate) fn read_layout_once(
        store: &dyn PageStore,
        name: &Path,
    ) -> Result<(Meta, ExtentMap), StorageError> {
        let (_, image, _) = Reader::open(store, name)?;
        Ok((image.meta, image.extent_map))
    }

    /// Ids below one more than the highest published id (published or free).
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

/// Where [`Reader::codes`] puts the codes it reads.
enum CodeSink<'w> {
    /// Into [`RelationImage::codes`].
    Image,
    /// Written out in id order; `path` names the destination in errors.
    Write {
        path: &'w Path,
        out: &'w mut dyn Write,
    },
}

impl CodeSink<'_> {
    /// Writes `bytes`, or `zeros` zero bytes when `bytes` is `None` (ids on a new page).
    fn write(&mut self, bytes: Option<&[u8]>, zeros: usize) -> Result<(), StorageError> {
        let CodeSink::Write { path, out } = self else {
            return Ok(());
        };
        let written = match bytes {
            Some(bytes) => out.write_all(bytes),
            None => std::io::copy(&mut std::io::repeat(0).take(zeros as u64), out).map(|_| ()),
        };
        written.map_err(|e| StorageError::io(path, "write", e))
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
        let geometry =
            Geometry::of(&meta).map_err(|e| r.corrupt(format!("metapage (block 0): {e}")))?;
        let image = RelationImage {
            nblocks: r.nblocks,
            meta,
            extent_map: map,
            entries: Vec::new(),
            adjacency: Vec::new(),
            vectors: Vec::new(),
            codes: Vec::new(),
            allocator: Allocator::default(),
            codebook: Vec::new(),
            entrance: Vec::new(),
            promotions: Vec::new(),
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
        let block = self.read_maybe_new(map, kind, ordinal)?;
        if pages::is_new(&self.page) {
            return Err(self.page_error(PageError::New { block }));
        }
        Ok(block)
    }

    /// [`Reader::read_ordinal`] accepting a new page (check with `pages::is_new`): the kinds
    /// that grow after the build.
    fn read_maybe_new(
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
        if !pages::is_new(&self.page) {
            pages::verify_ordinal(&self.page, kind, block, ordinal)
                .map_err(|e| self.page_error(e))?;
        }
        Ok(block)
    }

    fn need(&self, map: &ExtentMap, kind: PageKind, pages: u64) -> Result<(), StorageError> {
        let capacity = map.capacity(kind);
        if u64::from(capacity) < pages {
            return Err(self.corrupt(format!(
                "the published vertices need {pages} {} pages; the extent map has {capacity}",
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

    /// Every block is the metapage, one extent-map page, in one run, or retired by an online
    /// rebuild (below the build's first block); others must be new.
    fn check_coverage(&mut self, meta: &Meta, map: &ExtentMap) -> Result<u32, StorageError> {
        let mut covered = vec![false; self.nblocks as usize];
        let retired = (meta.first_block as usize).min(covered.len());
        covered[..retired].fill(true);
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
                // A page written for this very block by a rebuild that never switched the
                // metapage (an ERROR or crash between its pages and the switch) is dead
                // space, like a new page; anything else here is damage.
                let orphan = PageKind::ALL
                    .iter()
                    .any(|&k| pages::verify(&self.page, k, block).is_ok());
                if !pages::is_new(&self.page) && !orphan {
                    return Err(self.corrupt(format!(
                        "block {block} is in no run of the extent map but is not a new page"
                    )));
                }
                unmapped += 1;
            }
        }
        Ok(unmapped)
    }

    /// Every entry of the indirection runs (a new page holds none); then the allocator.
    fn indirection(
        &mut self,
        image: &mut RelationImage,
        edges: &EdgeLayout,
    ) -> Result<(), StorageError> {
        let map = &image.extent_map;
        let per_page = indirection::ENTRIES_PER_PAGE;
        let capacity = map.capacity(PageKind::Indirection);
        // Reserved whole: grown by doubling, the entries of 1M ids (24 bytes each) took 25 MB
        // and 37 MB while the last doubling copied them.
        let mut entries = Vec::with_capacity(capacity as usize * per_page);
        let mut end = 0; // one past the highest published id
        for o in 0..capacity {
            let block = self.read_maybe_new(map, PageKind::Indirection, o)?;
            if pages::is_new(&self.page) {
                entries.resize(entries.len() + per_page, None);
                continue;
            }
            for v in (o as usize * per_page..(o as usize + 1) * per_page).map(|v| v as VertexId) {
                let (edge_word, _) = indirection::words(&self.page, v);
                let (_, flags) = decode_edge_word(edge_word);
                if flags & FLAG_LIVE == 0 && edge_word != 0 {
                    return Err(self.corrupt(format!(
                        "indirection page {o} (block {block}): vertex {v} is not published but \
                         its edge word is {edge_word:#x}"
                    )));
                }
                let entry = indirection::entry(&self.page, v);
                if entry.is_some() {
                    end = v as usize + 1;
                }
                entries.push(entry);
            }
        }
        entries.truncate(end);
        entries.shrink_to_fit();
        let vertex_capacity = u64::from(capacity) * per_page as u64;
        let edge_pages = map.capacity(PageKind::Edge);
        image.allocator = Allocator::derive(
            &entries,
            vertex_capacity,
            edge_pages,
            edges.slots_per_page(),
        )
        .map_err(|e| self.corrupt(e))?;
        image.entries = entries;
        let m = &image.meta;
        let medoid_ok = if m.build_vertices == 0 {
            m.medoid == 0
        } else {
            m.medoid < m.build_vertices
        };
        if u64::from(m.build_vertices) > vertex_capacity || !medoid_ok {
            return Err(self.corrupt(format!(
                "metapage (block 0): medoid {} and {} build vertices do not fit {} ids",
                m.medoid, m.build_vertices, vertex_capacity
            )));
        }
        Ok(())
    }

    /// Codes of every id below `len()`; a published vertex's code must be on a written page.
    fn codes(
        &mut self,
        image: &mut RelationImage,
        g: &Geometry,
        sink: &mut CodeSink,
    ) -> Result<(), StorageError> {
        let codes = &g.codes;
        let map = &image.extent_map;
        let n = image.entries.len();
        self.need(map, PageKind::Codes, codes.pages_for(n as u64))?;
        let per_page = codes.per_page();
        if let CodeSink::Image = sink {
            image.codes = vec![0; n * codes.pq_bytes()];
        }
        for o in 0..map.capacity(PageKind::Codes) {
            // Every page is verified; only ids below len() are kept (the rest are free).
            let ids = (o as usize * per_page).min(n)..((o as usize + 1) * per_page).min(n);
            let block = self.read_maybe_new(map, PageKind::Codes, o)?;
            if pages::is_new(&self.page) {
                if let Some(v) = ids.clone().find(|&v| image.entries[v].is_some()) {
                    return Err(self.corrupt(format!(
                        "code page {o} (block {block}) is new but holds published vertex {v}'s code"
                    )));
                }
                sink.write(None, ids.len() * codes.pq_bytes())?;
                continue;
            }
            let bytes = ids.start * codes.pq_bytes()..ids.end * codes.pq_bytes();
            let take = bytes.len();
            let page_codes = &codes.codes(&self.page)[..take];
            match sink {
                CodeSink::Image => image.codes[bytes].copy_from_slice(page_codes),
                CodeSink::Write { .. } => sink.write(Some(page_codes), 0)?,
            }
        }
        Ok(())
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

    /// The promotion stream, every page verified (or new), cut after its last complete record.
    fn promotions(&mut self, image: &mut RelationImage) -> Result<(), StorageError> {
        let map = &image.extent_map;
        let mut stream = Vec::new();
        for o in 0..map.capacity(PageKind::Promotions) {
            self.read_maybe_new(map, PageKind::Promotions, o)?;
            stream.extend_from_slice(&self.page[PAYLOAD_OFFSET..PAYLOAD_OFFSET + PAYLOAD_SIZE]);
        }
        stream.truncate(promotions::complete_records(&stream));
        image.promotions = stream;
        Ok(())
    }

    /// Extent-map runs, which no writer makes: their pages must still verify.
    fn other_kinds(&mut self, map: &ExtentMap) -> Result<(), StorageError> {
        for o in 0..map.capacity(PageKind::ExtentMap) {
            self.read_ordinal(map, PageKind::ExtentMap, o)?;
        }
        Ok(())
    }
}

mod bulk;
