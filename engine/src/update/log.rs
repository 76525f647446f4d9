//! The write seam (RFC 0001 §10): every change the update code makes after the build becomes
//! durable through one call of [`IndexLog`], whose argument is the *whole* change, so that a
//! PostgreSQL implementation can write it as one WAL record (redo then needs nothing else)
//! and a file implementation can simply write it out.
//!
//! The protocol every caller follows:
//!
//! 1. prepare the change (allocate ids and pages in the runtime state, build the page);
//! 2. call the [`IndexLog`] method: when it returns, the change is as durable as the
//!    storage makes it (a WAL record inserted and the bulk page written after it);
//! 3. only then apply the change to the runtime state that readers see (the indirection
//!    table's publishing stores, the live counts, the free lists).
//!
//! So a reader can never follow a pointer to a page or slot whose change a crash could undo,
//! and redo of the record reproduces exactly what step 3 made visible.
//!
//! What is *not* in a change: the allocator's free lists and live counts. Both follow from
//! the indirection table (which vertex is published, which page holds its list), and are
//! rebuilt from it whenever an index is opened in a new server lifetime
//! ([`crate::update::recover`] for side files, [`crate::relation::Allocator`] for a
//! relation); logging them too would only add WAL and ways to disagree.
//!
//! Implementations: [`SideFileLog`] (side files) and [`crate::relation::StoreLog`] (a relation
//! in a `PageStore`, through the page-apply functions of [`crate::relation::apply`], which
//! PostgreSQL's redo will call too).

use crate::storage::{EdgeLocation, HeapTid, IndexFiles, SideFileWriter, StorageError};
use crate::VertexId;

/// One edge list written into a fresh page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlacedList {
    pub vertex: VertexId,
    /// Slot of the new page that holds the list.
    pub slot: u16,
    /// Where the vertex's list was; `None` publishes the vertex now, with the change's TID.
    pub old: Option<EdgeLocation>,
}

/// A freshly written edge page and what now points into it.
#[derive(Clone, Copy, Debug)]
pub struct EdgePageChange<'a> {
    /// Ordinal of the page (the name the indirection table uses).
    pub page: u32,
    /// The sealed page as the layout formats it.
    pub image: &'a [u8],
    /// Every list on the page, each published or relocated by this change.
    pub lists: &'a [PlacedList],
    /// Heap TID of the vertices this change publishes.
    pub tid: HeapTid,
}

/// A new vertex's vector slot and PQ code, written before anything points at the vertex.
#[derive(Clone, Copy, Debug)]
pub struct VectorChange<'a> {
    pub vertex: VertexId,
    pub vector: &'a [f32],
    pub tid: HeapTid,
    pub code: &'a [u8],
}

/// Durable storage of the changes made after the build. Implementations synchronise
/// internally: inserts in many threads or backends call it at once.
pub trait IndexLog: Send + Sync {
    /// Makes a freshly written edge page and its publishes and relocations durable.
    fn edge_page(&self, change: &EdgePageChange<'_>) -> Result<(), StorageError>;
    /// Makes a new vertex's vector, TID and PQ code durable.
    fn vector(&self, change: &VectorChange<'_>) -> Result<(), StorageError>;
    /// Makes the deleted flag of published vertices durable (VACUUM's bulk delete).
    fn delete_flags(&self, vertices: &[VertexId]) -> Result<(), StorageError>;
    /// Makes the freeing of deleted vertices durable (consolidation): their ids, vector slots
    /// and edge slots may be reused once this returns.
    fn free_vertices(&self, vertices: &[VertexId]) -> Result<(), StorageError>;
    /// Appends one serialised entrance-graph promotion plan at byte `offset` of the
    /// promotion log.
    fn promote(&self, offset: u64, record: &[u8]) -> Result<(), StorageError>;
}

/// A shared log (the one an index holds, see `Index::set_log`) is a log.
impl<T: IndexLog + ?Sized> IndexLog for std::sync::Arc<T> {
    fn edge_page(&self, change: &EdgePageChange<'_>) -> Result<(), StorageError> {
        (**self).edge_page(change)
    }

    fn vector(&self, change: &VectorChange<'_>) -> Result<(), StorageError> {
        (**self).vector(change)
    }

    fn delete_flags(&self, vertices: &[VertexId]) -> Result<(), StorageError> {
        (**self).delete_flags(vertices)
    }

    fn free_vertices(&self, vertices: &[VertexId]) -> Result<(), StorageError> {
        (**self).free_vertices(vertices)
    }

    fn promote(&self, offset: u64, record: &[u8]) -> Result<(), StorageError> {
        (**self).promote(offset, record)
    }
}

/// The side-file store (`<relfilenode>.navis/`): edge pages and vector slots are written
/// with `pwrite`; the indirection table, PQ codes and `state.dat` are the memory-mapped
/// runtime state itself, so the flags, TIDs, codes and `entrance.log` need nothing more
/// here.
pub struct SideFileLog<'a> {
    writer: SideFileWriter<'a>,
}

impl<'a> SideFileLog<'a> {
    pub fn new(files: &'a IndexFiles) -> Result<Self, StorageError> {
        Ok(SideFileLog {
            writer: SideFileWriter::new(files)?,
        })
    }
}

impl IndexLog for SideFileLog<'_> {
    fn edge_page(&self, change: &EdgePageChange<'_>) -> Result<(), StorageError> {
        self.writer.write_edge_page(change.page, change.image)
    }

    fn vector(&self, change: &VectorChange<'_>) -> Result<(), StorageError> {
        // The code and the TID go into the mapped runtime state, which is the store here;
        // the caller writes them there after this returns.
        self.writer
            .write_vector_slot(change.vertex, change.vertex, change.vector, change.tid)
    }

    fn delete_flags(&self, _vertices: &[VertexId]) -> Result<(), StorageError> {
        Ok(())
    }

    fn free_vertices(&self, _vertices: &[VertexId]) -> Result<(), StorageError> {
        Ok(())
    }

    fn promote(&self, _offset: u64, _record: &[u8]) -> Result<(), StorageError> {
        // `entrance.log` in the side directory is the store and the runtime copy at once:
        // `maybe_promote` writes it after this returns, as it does for every store.
        Ok(())
    }
}
