//! Where an open index's bulk pages live: edge pages and vector slots, the two kinds every
//! search reads from disk. Everything else an open index uses (indirection table, PQ codes,
//! `state.dat`, the entrance graph) is the runtime state in its directory, the same for both.
//!
//! - [`Bulk::Side`]: `edges.dat` (4 KiB pages, page `p` at byte `4096 p`) and `vectors.dat`
//!   in the side directory, the layout PostgreSQL used before RFC 0001.
//! - [`Bulk::Relation`]: the index's relation (RFC 0001 §2): 8 KiB PostgreSQL pages in a
//!   [`PageStore`], edge page ordinals and vector slots placed by the extent map, and the
//!   first segment file of the main fork for the O_DIRECT readers ([`crate::segments`]).
//!
//! The cold-path reads here (one page or slot, sequential scans for VACUUM and verify) go
//! through plain reads; searches read through `io::PageReader` or `SegmentReader`.

use super::edge_page::EdgePageLayout;
use super::error::StorageError;
use super::vector_file::VectorLayout;
use super::PAGE_SIZE;
use crate::pages::edge::EdgeLayout;
use crate::pages::extent::ExtentMap;
use crate::pages::vector::VectorPages;
use crate::pages::{PageKind, BLOCK_SIZE};
use crate::store::{segment_of, PageStore};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

/// The bulk pages of an open index.
pub enum Bulk {
    Side {
        edges: File,
        edge_path: PathBuf,
        vectors: File,
        vector_path: PathBuf,
        vector_layout: VectorLayout,
    },
    Relation(Box<RelationBulk>),
}

/// An index's relation, as the bulk store of an open index.
///
/// Buffer-managed pages (metapage, extent map) are read through `store`; bulk pages (edge,
/// vector) never are: PostgreSQL writes them around shared_buffers, so a buffer of one could
/// be stale. They are read from the segment files with plain reads, which see every write
/// the kernel has, O_DIRECT or not.
pub struct RelationBulk {
    pub store: Arc<dyn PageStore>,
    /// The main fork's first segment file, which names the relation in errors too.
    pub fork: PathBuf,
    /// Grows (new runs) while the index is open; readers take it shared per batch.
    pub map: RwLock<ExtentMap>,
    pub edges: EdgeLayout,
    pub vectors: VectorPages,
    /// Open segment files for the cold-path bulk reads, by segment number.
    pub segments: Mutex<Vec<Option<File>>>,
}

impl RelationBulk {
    /// Reads bulk block `block` from its segment file.
    fn read_bulk_block(&self, block: u32, out: &mut [u8]) -> Result<(), StorageError> {
        let (segment, offset) = segment_of(block);
        let path = crate::segments::segment_path(&self.fork, segment);
        let mut files = self.segments.lock().unwrap_or_else(|e| e.into_inner());
        if files.len() <= segment as usize {
            files.resize_with(segment as usize + 1, || None);
        }
        if files[segment as usize].is_none() {
            files[segment as usize] =
                Some(File::open(&path).map_err(|e| StorageError::io(&path, "open", e))?);
        }
        files[segment as usize]
            .as_ref()
            .expect("opened above")
            .read_exact_at(&mut out[..BLOCK_SIZE], offset)
            .map_err(|e| StorageError::io(&path, "read", e))
    }

    pub fn map(&self) -> RwLockReadGuard<'_, ExtentMap> {
        // A writer that panicked while holding the lock left a map that is still a valid
        // map (runs are only ever appended), so poisoning is not an error here.
        self.map.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Re-reads the extent map from the relation: another writer (a thread with its own
    /// log, or another backend) grew it since this copy was read.
    pub fn refresh(&self) -> Result<(), StorageError> {
        let (_, map) = crate::relation::RelationImage::read_layout(&*self.store, &self.fork)?;
        *self.map.write().unwrap_or_else(|e| e.into_inner()) = map;
        Ok(())
    }

    /// The block of page `ordinal` of `kind`, re-reading the map once when it lies beyond.
    ///
    /// The map read is installed only if no one holds the current one: a search holds it
    /// across a batch of reads, and LIOS tasks run inside that batch on the same thread
    /// (RFC 0004 §4), where waiting for the write lock would wait for itself. This lookup
    /// uses the map it read either way.
    pub fn block(&self, kind: PageKind, ordinal: u32) -> Result<Option<u32>, StorageError> {
        if let Some(block) = self.map().block(kind, ordinal) {
            return Ok(Some(block));
        }
        let (_, map) = crate::relation::RelationImage::read_layout(&*self.store, &self.fork)?;
        let block = map.block(kind, ordinal);
        if let Ok(mut current) = self.map.try_write() {
            *current = map;
        }
        Ok(block)
    }

    fn block_of(&self, kind: PageKind, ordinal: u32) -> Result<u32, StorageError> {
        self.block(kind, ordinal)?.ok_or_else(|| {
            StorageError::corrupt(
                &self.fork,
                format!("{} page {ordinal} is beyond the extent map", kind.name()),
            )
        })
    }
}

impl Bulk {
    pub fn relation(&self) -> Option<&RelationBulk> {
        match self {
            Bulk::Relation(r) => Some(r),
            Bulk::Side { .. } => None,
        }
    }

    /// The file that names the edge pages in errors.
    pub fn edge_path(&self) -> &Path {
        match self {
            Bulk::Side { edge_path, .. } => edge_path,
            Bulk::Relation(r) => &r.fork,
        }
    }

    /// The file that names the vector slots in errors.
    pub fn vector_path(&self) -> &Path {
        match self {
            Bulk::Side { vector_path, .. } => vector_path,
            Bulk::Relation(r) => &r.fork,
        }
    }

    /// Edge pages that exist (allocated or not): the edge file's length, or the extent
    /// map's edge capacity.
    pub fn edge_page_count(&self) -> Result<u32, StorageError> {
        match self {
            Bulk::Side {
                edges, edge_path, ..
            } => {
                let len = edges
                    .metadata()
                    .map_err(|e| StorageError::io(edge_path, "stat", e))?
                    .len();
                Ok((len / PAGE_SIZE as u64) as u32)
            }
            // The map as it is now: this copy may predate pages another writer (or this
            // one, through its log) added since, and nothing may have read them yet.
            Bulk::Relation(r) => {
                r.refresh()?;
                Ok(r.map().capacity(PageKind::Edge))
            }
        }
    }

    /// Checks a page read as edge page `page_no` (see [`Bulk::read_edge_page`]).
    pub fn verify_edge_page(
        &self,
        layout: &EdgePageLayout,
        page: &[u8],
        page_no: u32,
    ) -> Result<(), StorageError> {
        match self {
            Bulk::Side { edge_path, .. } => layout.verify(edge_path, page, page_no),
            Bulk::Relation(r) => {
                let block = r.block_of(PageKind::Edge, page_no)?;
                r.edges
                    .verify(page, block, page_no)
                    .map_err(|e| e.into_storage(&r.fork))
            }
        }
    }

    /// Reads edge pages `first..first + count` into `out` (`count` pages of the layout's
    /// size), unverified: a sequential scan may meet pages being rewritten.
    pub fn read_edge_pages(
        &self,
        first: u32,
        count: usize,
        out: &mut [u8],
    ) -> Result<(), StorageError> {
        match self {
            Bulk::Side {
                edges, edge_path, ..
            } => edges
                .read_exact_at(
                    &mut out[..count * PAGE_SIZE],
                    first as u64 * PAGE_SIZE as u64,
                )
                .map_err(|e| StorageError::io(edge_path, "read", e)),
            Bulk::Relation(r) => {
                for (i, page) in out[..count * BLOCK_SIZE]
                    .chunks_exact_mut(BLOCK_SIZE)
                    .enumerate()
                {
                    let block = r.block_of(PageKind::Edge, first + i as u32)?;
                    r.read_bulk_block(block, page)?;
                }
                Ok(())
            }
        }
    }

    /// Reads and verifies one edge page.
    pub fn read_edge_page(
        &self,
        layout: &EdgePageLayout,
        page_no: u32,
        page: &mut [u8],
    ) -> Result<(), StorageError> {
        if page.len() != layout.page_size() {
            return Err(StorageError::invalid(format!(
                "edge page buffer must be {} bytes",
                layout.page_size()
            )));
        }
        self.read_edge_pages(page_no, 1, page)?;
        self.verify_edge_page(layout, page, page_no)
    }

    /// Reads one vector slot's raw bytes (`slot_size`); decode with
    /// [`VectorLayout::parse_slot`].
    pub fn read_vector_slot(&self, slot: u32, out: &mut [u8]) -> Result<(), StorageError> {
        match self {
            Bulk::Side {
                vectors,
                vector_path,
                vector_layout,
                ..
            } => {
                if out.len() != vector_layout.slot_size() {
                    return Err(StorageError::invalid(
                        "vector slot buffer has the wrong size",
                    ));
                }
                vectors
                    .read_exact_at(out, vector_layout.slot_offset(slot))
                    .map_err(|e| StorageError::io(vector_path, "read", e))
            }
            Bulk::Relation(r) => {
                let (extent, _) = r.vectors.extent_of(slot);
                let (first, count) = r.vectors.page_span(slot);
                let mut pages = vec![0u8; count as usize * BLOCK_SIZE];
                for (k, page) in pages.chunks_exact_mut(BLOCK_SIZE).enumerate() {
                    let ordinal = extent * crate::pages::EXTENT_BLOCKS + first + k as u32;
                    let block = r.block_of(PageKind::Vector, ordinal)?;
                    r.read_bulk_block(block, page)?;
                }
                r.vectors.gather(slot, &pages, first, out)
            }
        }
    }
}
