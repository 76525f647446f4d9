//! The engine's `PageStore` over the main fork of an index that its own transaction is
//! building (RFC 0001 §7): what `ambuild` hands the engine's relation writer.
//!
//! Every page, the metapage included, is written around shared_buffers as a `BULK_IMAGES`
//! record (`relstore::write_bulk_pages`). That is safe only while no other backend can reach
//! the relation and no buffer of it exists, which holds for a relfilenode created by this
//! transaction before its commit; afterwards the buffer-managed kinds are changed only
//! through the buffer manager. Consecutive writes are gathered into records of up to 32
//! pages; `extend` only reserves block numbers (a gap is filled with zero pages when a later
//! block is written, as redo does).
//!
//! The engine may run compute threads, but PostgreSQL may only be called from the backend's
//! own thread: every method refuses to run on another thread.

use crate::relstore::{self, BLOCK_SIZE};
use navis_engine::storage::StorageError;
use navis_engine::store::PageStore;
use pgrx::pg_sys;
use std::sync::Mutex;
use std::thread::ThreadId;

/// Pages waiting to be written: consecutive blocks from `first`.
#[derive(Default)]
struct Pending {
    first: u32,
    pages: Vec<u8>,
    /// Blocks handed out by `extend` (written or not).
    reserved: u32,
}

pub struct PgStore {
    rel: pg_sys::Relation,
    /// Blocks below this belong to a build other backends may be reading: never written.
    floor: u32,
    owner: ThreadId,
    pending: Mutex<Pending>,
}

// SAFETY: the relation pointer is only dereferenced by methods that first check they run on
// the thread that created the store (the backend's own thread), so sharing the value with
// compute threads cannot make PostgreSQL run off that thread.
unsafe impl Send for PgStore {}
// SAFETY: as above; the mutable state is behind a Mutex.
unsafe impl Sync for PgStore {}

impl PgStore {
    /// A store over `rel`'s main fork, which must be empty and new in this transaction.
    pub fn for_new_relation(rel: pg_sys::Relation) -> Result<PgStore, StorageError> {
        let blocks = relstore::nblocks(rel);
        if blocks != 0 {
            return Err(StorageError::invalid(format!(
                "a navis build writes into an empty relation, this one has {blocks} blocks"
            )));
        }
        Ok(PgStore {
            rel,
            floor: 0,
            owner: std::thread::current().id(),
            pending: Mutex::new(Pending::default()),
        })
    }

    /// A store that appends a new build after the index already in `rel` (an online
    /// rebuild, `regrow.rs`): it never writes the existing blocks, and the caller excludes
    /// every other writer of the relation while it writes. The new blocks are beyond
    /// anything other backends read until the caller switches the metapage, so no buffer of
    /// them exists and writing them around shared_buffers is safe, as for a new relation.
    pub fn appending(rel: pg_sys::Relation) -> PgStore {
        let floor = relstore::nblocks(rel);
        PgStore {
            rel,
            floor,
            owner: std::thread::current().id(),
            pending: Mutex::new(Pending {
                first: floor,
                pages: Vec::new(),
                reserved: floor,
            }),
        }
    }

    fn check_thread(&self) -> Result<(), StorageError> {
        if std::thread::current().id() == self.owner {
            Ok(())
        } else {
            Err(StorageError::invalid(
                "the PostgreSQL page store was used from a compute thread",
            ))
        }
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Pending>, StorageError> {
        self.check_thread()?;
        self.pending.lock().map_err(|_| {
            StorageError::invalid("the PostgreSQL page store was poisoned by an earlier error")
        })
    }

    /// Writes the gathered pages, zero-filling any gap before them.
    fn flush(&self, p: &mut Pending) {
        if p.pages.is_empty() {
            return;
        }
        relstore::extend_zeroed(self.rel, p.first);
        relstore::write_bulk_pages(self.rel, p.first, &mut p.pages);
        p.pages.clear();
    }
}

impl PageStore for PgStore {
    fn nblocks(&self) -> Result<u32, StorageError> {
        let p = self.lock()?;
        let written = p.first + (p.pages.len() / BLOCK_SIZE) as u32;
        Ok(relstore::nblocks(self.rel).max(p.reserved).max(written))
    }

    fn read_block(&self, block: u32, out: &mut [u8]) -> Result<(), StorageError> {
        let mut p = self.lock()?;
        if out.len() != BLOCK_SIZE {
            return Err(StorageError::invalid("block buffer of the wrong size"));
        }
        self.flush(&mut p);
        if block >= relstore::nblocks(self.rel) {
            if block < p.reserved {
                out.fill(0); // reserved, never written: a new page
                return Ok(());
            }
            return Err(StorageError::invalid(format!(
                "block {block} is beyond the relation"
            )));
        }
        relstore::read_block(self.rel, block, out);
        Ok(())
    }

    fn write_block(&self, block: u32, page: &[u8]) -> Result<(), StorageError> {
        let mut p = self.lock()?;
        if page.len() != BLOCK_SIZE {
            return Err(StorageError::invalid("page of the wrong size"));
        }
        if block < self.floor {
            return Err(StorageError::invalid(format!(
                "block {block} belongs to the build in use; a rebuild writes from block {}",
                self.floor
            )));
        }
        if block >= p.reserved.max(relstore::nblocks(self.rel)) {
            return Err(StorageError::invalid(format!(
                "block {block} was never extended into"
            )));
        }
        let next = p.first + (p.pages.len() / BLOCK_SIZE) as u32;
        let full = p.pages.len() >= BLOCK_SIZE * relstore::PAGES_PER_RECORD;
        if p.pages.is_empty() || block != next || full {
            self.flush(&mut p);
            p.first = block;
        }
        p.pages.extend_from_slice(page);
        Ok(())
    }

    fn extend(&self, blocks: u32) -> Result<u32, StorageError> {
        let mut p = self.lock()?;
        let written = p.first + (p.pages.len() / BLOCK_SIZE) as u32;
        let first = relstore::nblocks(self.rel).max(p.reserved).max(written);
        p.reserved = first
            .checked_add(blocks)
            .ok_or_else(|| StorageError::invalid("a navis index cannot grow beyond 2^32 blocks"))?;
        Ok(first)
    }

    fn sync(&self) -> Result<(), StorageError> {
        let mut p = self.lock()?;
        self.flush(&mut p);
        // Reserved blocks nobody wrote still belong to their extent-map runs.
        relstore::extend_zeroed(self.rel, p.reserved);
        // Durability comes from WAL and the fsync requests smgr handed the checkpointer.
        Ok(())
    }
}
