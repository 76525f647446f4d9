//! Opening an existing index directory: validate the manifest and every file against it, map
//! the indirection table, the shared state and the PQ codes, load the small blobs.
//!
//! The PQ codes file is headerless: `capacity * pq_bytes` bytes, vertex-major, so that code
//! `v` is at byte `v * pq_bytes` of the mapping with no arithmetic beyond that. It always
//! covers every id the indirection table can hold: growth extends the codes first, then the
//! table ([`IndexFiles::grow_vertices`]). Like the table, it is mapped `MAP_SHARED` over an
//! address range reserved up front, so growing never remaps.

use super::blob::{self, BlobKind};
use super::bulk::{Bulk, RelationBulk};
use super::edge_page::EdgePageLayout;
use super::error::StorageError;
use super::indirection::IndirectionTable;
use super::manifest::Manifest;
use super::state::SharedState;
use super::vector_file::{VectorLayout, VECTOR_FILE_HEADER_SIZE};
use super::{names, PAGE_SIZE};
use crate::cache::Caller;
use crate::VertexId;
use memmap2::{MmapOptions, MmapRaw};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// An open, validated index directory.
pub struct IndexFiles {
    dir: PathBuf,
    manifest: Manifest,
    edge_layout: EdgePageLayout,
    vector_layout: VectorLayout,
    indirection: IndirectionTable,
    state: SharedState,
    pq_codes: MmapRaw,
    pq_file: File,
    pq_codebook: Vec<u8>,
    bulk: Bulk,
    /// The edge-page cache this process reads and writes through, once attached.
    page_cache: std::sync::OnceLock<crate::cache::CacheBinding>,
}

impl IndexFiles {
    /// Opens a side directory: runtime state and bulk files together.
    pub fn open(dir: &Path) -> Result<IndexFiles, StorageError> {
        let manifest = Manifest::read(&dir.join(names::MANIFEST))?;
        let edge_layout = manifest.edge_layout()?;
        let vector_layout = manifest.vector_layout()?;

        let edge_path = dir.join(names::EDGES);
        let edges = open_read(&edge_path)?;
        check_edge_file_len(&edge_path, &edges, &manifest)?;

        let vector_path = dir.join(names::VECTORS);
        let vectors = open_read(&vector_path)?;
        check_vector_file(&vector_path, &vectors, &vector_layout, &manifest)?;
        let bulk = Bulk::Side {
            edges,
            edge_path,
            vectors,
            vector_path,
            vector_layout,
        };
        Self::open_runtime(dir, manifest, edge_layout, bulk)
    }

    /// Opens the runtime directory `dir` of an index whose bulk pages are in its relation
    /// (`relation::runtime` materialises the directory from the relation, and derives
    /// `manifest` from its metapage; the directory holds no manifest of its own).
    pub fn open_relation(
        dir: &Path,
        manifest: Manifest,
        relation: RelationBulk,
    ) -> Result<IndexFiles, StorageError> {
        let edge_layout = EdgePageLayout::for_relation(manifest.max_degree as usize)?;
        if edge_layout.slots_per_page() != manifest.slots_per_page as usize {
            return Err(StorageError::corrupt(
                &relation.fork,
                format!(
                    "{} slots per edge page, the relation's pages hold {}",
                    manifest.slots_per_page,
                    edge_layout.slots_per_page()
                ),
            ));
        }
        Self::open_runtime(
            dir,
            manifest,
            edge_layout,
            Bulk::Relation(Box::new(relation)),
        )
    }

    fn open_runtime(
        dir: &Path,
        manifest: Manifest,
        edge_layout: EdgePageLayout,
        bulk: Bulk,
    ) -> Result<IndexFiles, StorageError> {
        let vector_layout = manifest.vector_layout()?;
        let indirection = IndirectionTable::open(&dir.join(names::INDIRECTION))?;
        if indirection.capacity() < manifest.vertex_count as usize {
            return Err(StorageError::corrupt(
                indirection.path(),
                format!(
                    "{} entries but the manifest has {} vertices",
                    indirection.capacity(),
                    manifest.vertex_count
                ),
            ));
        }

        let state = SharedState::open(&dir.join(names::STATE))?;
        let (pq_file, pq_codes) = map_pq_codes(
            &dir.join(names::PQ_CODES),
            &manifest,
            indirection.capacity(),
        )?;
        let pq_codebook = blob::read(&dir.join(names::PQ_CODEBOOK), BlobKind::PqCodebook)?;
        // Checked here, loaded only when needed: every backend opens the index, and at 1M
        // vectors the graph is 16 MB that each would otherwise hold for its lifetime.
        blob::check_shape(&dir.join(names::ENTRANCE), BlobKind::EntranceGraph)?;
        Ok(IndexFiles {
            dir: dir.to_path_buf(),
            manifest,
            edge_layout,
            vector_layout,
            indirection,
            state,
            pq_codes,
            pq_file,
            pq_codebook,
            bulk,
            page_cache: std::sync::OnceLock::new(),
        })
    }

    /// The bulk pages: side files or the relation.
    pub fn bulk(&self) -> &Bulk {
        &self.bulk
    }

    /// The relation, when the bulk pages live in one.
    pub fn relation(&self) -> Option<&RelationBulk> {
        self.bulk.relation()
    }

    /// Routes this index's edge-page reads through `binding` and its page writes and frees
    /// through to it. Once per open; a second call is ignored (returns false). A frame holds
    /// one whole edge page, so the cache's frames must be this index's edge pages: 4 KiB for
    /// side files, 8 KiB for a relation. On a mismatch nothing is attached (returns false)
    /// and the index reads from disk alone.
    pub fn attach_cache(&self, binding: crate::cache::CacheBinding) -> bool {
        binding.cache.frame_size() == self.edge_layout.page_size()
            && self.page_cache.set(binding).is_ok()
    }

    /// The attached edge-page cache, if any.
    pub fn page_cache(&self) -> Option<&crate::cache::CacheBinding> {
        self.page_cache.get()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    pub fn edge_layout(&self) -> EdgePageLayout {
        self.edge_layout
    }

    pub fn vector_layout(&self) -> VectorLayout {
        self.vector_layout
    }

    pub fn indirection(&self) -> &IndirectionTable {
        &self.indirection
    }

    /// The edge file, or the relation's first segment file.
    pub fn edge_path(&self) -> PathBuf {
        self.bulk.edge_path().to_path_buf()
    }

    /// The vector file, or the relation's first segment file.
    pub fn vector_path(&self) -> PathBuf {
        self.bulk.vector_path().to_path_buf()
    }

    /// The shared runtime state (`state.dat`).
    pub fn state(&self) -> &SharedState {
        &self.state
    }

    /// Most vertices this index can ever hold (its address reservations).
    pub fn max_vertices(&self) -> usize {
        max_vertices(self.manifest.pq_bytes as usize)
    }

    /// PQ code of one vertex; `None` beyond the table's capacity.
    pub fn pq_code(&self, v: VertexId) -> Option<&[u8]> {
        let m = self.manifest.pq_bytes as usize;
        if v as usize >= self.indirection.capacity() {
            return None;
        }
        // SAFETY: v < capacity, and the codes file always covers capacity * m bytes (it is
        // extended before the capacity grows), all inside the reservation. Codes of published
        // vertices are written once before their vertex is first reachable; the only
        // concurrent writes are to ids that are being (re)allocated, which a reader reaches
        // only through a stale edge, and a torn code there only perturbs a PQ estimate that
        // reranking replaces with the exact distance.
        Some(unsafe { std::slice::from_raw_parts(self.pq_codes.as_ptr().add(v as usize * m), m) })
    }

    /// Writes the PQ code of `v`, which must be allocated to the caller and not yet published.
    pub fn write_pq_code(&self, v: VertexId, code: &[u8]) -> Result<(), StorageError> {
        let m = self.manifest.pq_bytes as usize;
        if code.len() != m || v as usize >= self.indirection.capacity() {
            return Err(StorageError::invalid(format!(
                "PQ code of {} bytes for vertex {v} (code size {m}, capacity {})",
                code.len(),
                self.indirection.capacity()
            )));
        }
        // SAFETY: in bounds as in pq_code; the caller owns v (see pq_code for readers).
        unsafe {
            std::ptr::copy_nonoverlapping(
                code.as_ptr(),
                self.pq_codes.as_mut_ptr().add(v as usize * m),
                m,
            )
        };
        Ok(())
    }

    /// Makes room for vertex ids below `vertices`: extends the PQ codes, then the
    /// indirection table. Callers serialise growth (the allocator lock).
    pub fn grow_vertices(&self, vertices: usize) -> Result<(), StorageError> {
        if vertices <= self.indirection.capacity() {
            return Ok(());
        }
        if vertices > self.max_vertices() {
            return Err(StorageError::invalid(format!(
                "navis index is full: it holds at most {} vertices with {}-byte PQ codes",
                self.max_vertices(),
                self.manifest.pq_bytes
            )));
        }
        // Grow by an eighth at least, so that growth is rare and its cost amortised while
        // the unused capacity (vector slots, codes, entries) stays within 12.5% of the index.
        let current = self.indirection.capacity();
        let target = IndirectionTable::capacity_for(vertices.max(current + current / 8))
            .min(self.max_vertices());
        let path = self.dir.join(names::PQ_CODES);
        self.pq_file
            .set_len((target * self.manifest.pq_bytes as usize) as u64)
            .map_err(|e| StorageError::io(&path, "extend", e))?;
        self.extend_vector_file(target)?;
        self.indirection.grow_to(target)
    }

    /// Makes the vector file hold at least `slots` slots. Only growth under the allocator
    /// lock changes the file's length, so concurrent slot writes never race an extension
    /// (an extension computed from a stale length could otherwise cut off a slot another
    /// backend just wrote).
    pub fn extend_vector_file(&self, slots: usize) -> Result<(), StorageError> {
        // A relation grows when a slot beyond its runs is written (the log's job).
        let Bulk::Side {
            vectors,
            vector_path,
            ..
        } = &self.bulk
        else {
            return Ok(());
        };
        let needed = self.vector_layout.file_len(slots as u32);
        if file_len(vector_path, vectors)? >= needed {
            return Ok(());
        }
        std::fs::OpenOptions::new()
            .write(true)
            .open(vector_path)
            .and_then(|f| f.set_len(needed))
            .map_err(|e| StorageError::io(vector_path, "extend", e))
    }

    /// The payload written from `ProductQuantizer::to_bytes`.
    pub fn pq_codebook(&self) -> &[u8] {
        &self.pq_codebook
    }

    /// The payload written from `EntranceGraph::to_bytes`: the build's entrance graph, read
    /// from its file on each call (an open needs it only when no backend has put the graph in
    /// shared memory yet; searches use [`crate::Index::entrance`]).
    pub fn read_entrance(&self) -> Result<Vec<u8>, StorageError> {
        blob::read(&self.dir.join(names::ENTRANCE), BlobKind::EntranceGraph)
    }

    /// A sealed edge page numbered `page_no` holding `lists` (owner, neighbours) in slots
    /// `0..lists.len()`, every other slot free: a side-file page, or a relation page. A
    /// relation page is stamped with the block the extent map gives the ordinal now (0 when
    /// it lies beyond the runs): the log rebuilds the page it writes from the listed slots
    /// at the block it places it in (`relation::apply::edge_page_image`).
    pub fn format_edge_page(
        &self,
        page_no: u32,
        lists: &[(crate::VertexId, &[crate::VertexId])],
    ) -> Result<Vec<u8>, StorageError> {
        let layout = self.edge_layout;
        let mut page = vec![0u8; layout.page_size()];
        match &self.bulk {
            Bulk::Side { .. } => {
                layout.init_page(&mut page, page_no);
                for (slot, (owner, list)) in lists.iter().enumerate() {
                    layout.put_slot(&mut page, slot, *owner, list)?;
                }
                layout.seal(&mut page);
            }
            Bulk::Relation(r) => {
                let block = r.map().block(crate::pages::PageKind::Edge, page_no);
                r.edges.init_page(&mut page, block.unwrap_or(0), page_no);
                for (slot, (owner, list)) in lists.iter().enumerate() {
                    r.edges.put_slot(&mut page, slot, *owner, list)?;
                }
                r.edges.seal(&mut page);
            }
        }
        Ok(page)
    }

    /// The edge page readers find on disk once `change` went through this index's log: what
    /// the edge-page cache must hold for `change.page` (write-through). For side files that
    /// is the image itself. A relation's log rebuilds the page from the listed slots at the
    /// block the extent map gives the ordinal (`relation::apply::edge_page_image`), which may
    /// differ from the block [`IndexFiles::format_edge_page`] stamped (the log may have grown
    /// the relation to place the page), so the page is rebuilt here the same way at the block
    /// the map gives now: the map only ever grows, so that block is final. (PostgreSQL's log
    /// will also set `pd_lsn` and `pd_checksum`, which neither the engine CRC nor a reader's
    /// checks cover.)
    pub fn edge_page_as_logged<'c>(
        &self,
        change: &crate::update::EdgePageChange<'c>,
    ) -> Result<std::borrow::Cow<'c, [u8]>, StorageError> {
        let Bulk::Relation(r) = &self.bulk else {
            return Ok(std::borrow::Cow::Borrowed(change.image));
        };
        let block = r
            .block(crate::pages::PageKind::Edge, change.page)?
            .ok_or_else(|| {
                StorageError::corrupt(
                    &r.fork,
                    format!(
                        "edge page {} was logged but is beyond the extent map",
                        change.page
                    ),
                )
            })?;
        let mut page = vec![0u8; crate::pages::BLOCK_SIZE];
        crate::relation::apply::edge_page_with(&r.edges, change, block, &mut page)?;
        Ok(std::borrow::Cow::Owned(page))
    }

    /// Reads and verifies one edge page (4 KiB in side files, 8 KiB in a relation): from
    /// NAVIS-Cache when it holds the page, else with a plain read (not admitted). Writers
    /// read lists this way (inserts' re-reads, absorption, LIOS tasks, VACUUM); traversal
    /// reads in batches. A cached frame equals the page on disk: every write goes through
    /// to the cache before anything points at it (`update::write`).
    pub fn read_edge_page(&self, page_no: u32, page: &mut [u8]) -> Result<(), StorageError> {
        if let Some(binding) = self.page_cache() {
            if binding.cache.frame_size() == page.len()
                && binding
                    .cache
                    .lookup(binding.key(page_no), Caller::Insert, page)
            {
                return Ok(());
            }
        }
        self.bulk.read_edge_page(&self.edge_layout, page_no, page)
    }

    /// Reads one vector slot's raw bytes (`slot_size`) with a plain read; decode with
    /// [`VectorLayout::parse_slot`].
    pub fn read_vector_slot(&self, slot: u32, out: &mut [u8]) -> Result<(), StorageError> {
        self.bulk.read_vector_slot(slot, out)
    }
}

fn open_read(path: &Path) -> Result<File, StorageError> {
    File::open(path).map_err(|e| StorageError::io(path, "open", e))
}

fn file_len(path: &Path, file: &File) -> Result<u64, StorageError> {
    Ok(file
        .metadata()
        .map_err(|e| StorageError::io(path, "stat", e))?
        .len())
}

fn check_edge_file_len(path: &Path, file: &File, manifest: &Manifest) -> Result<(), StorageError> {
    let len = file_len(path, file)?;
    let expected = manifest.edge_pages as u64 * PAGE_SIZE as u64;
    if len % PAGE_SIZE as u64 != 0 || len < expected {
        return Err(StorageError::corrupt(
            path,
            format!(
                "{len} bytes, expected {} whole pages ({expected} bytes)",
                manifest.edge_pages
            ),
        ));
    }
    Ok(())
}

fn check_vector_file(
    path: &Path,
    file: &File,
    layout: &VectorLayout,
    manifest: &Manifest,
) -> Result<(), StorageError> {
    let len = file_len(path, file)?;
    let mut header = vec![0u8; VECTOR_FILE_HEADER_SIZE];
    if len < VECTOR_FILE_HEADER_SIZE as u64 {
        return Err(StorageError::corrupt(
            path,
            format!("truncated: {len} bytes"),
        ));
    }
    file.read_exact_at(&mut header, 0)
        .map_err(|e| StorageError::io(path, "read", e))?;
    layout.verify_header(path, &header)?;
    if layout.slots_in(len) < manifest.vector_slots as u64 {
        return Err(StorageError::corrupt(
            path,
            format!(
                "truncated: {len} bytes hold {} slots, manifest says {}",
                layout.slots_in(len),
                manifest.vector_slots
            ),
        ));
    }
    Ok(())
}

/// Address space reserved for PQ codes per index (1 TiB), which bounds the vertex count at
/// large code sizes.
const PQ_RESERVATION: usize = 1 << 40;

fn max_vertices(pq_bytes: usize) -> usize {
    super::indirection::MAX_VERTICES.min(PQ_RESERVATION / pq_bytes.max(1))
}

fn map_pq_codes(
    path: &Path,
    manifest: &Manifest,
    capacity: usize,
) -> Result<(File, MmapRaw), StorageError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| StorageError::io(path, "open", e))?;
    let len = file_len(path, &file)?;
    let m = manifest.pq_bytes as u64;
    let expected = capacity as u64 * m;
    if len < expected {
        return Err(StorageError::corrupt(
            path,
            format!("truncated: {len} bytes, {capacity} codes of {m} bytes need {expected}"),
        ));
    }
    // MAP_SHARED over the whole reservation, as the indirection table: inserts in any backend
    // write codes that every other backend reads; bytes beyond the file are never touched
    // (see pq_code). Side files are only truncated by DROP/REINDEX, after every backend has
    // closed the index.
    let map = MmapOptions::new()
        .len(max_vertices(m as usize) * m as usize)
        .map_raw(&file)
        .map_err(|e| StorageError::io(path, "mmap", e))?;
    Ok((file, map))
}
