//! Postmaster shared memory for navis.
//!
//! navis keeps cross-backend state (lock stripes for edge-list writers, allocator locks, the
//! shared-memory epoch, and NAVIS-Cache, see `cache.rs`) in shared memory, which
//! PostgreSQL only hands out to libraries loaded through `shared_preload_libraries`. When the
//! library was loaded later (first use in a backend), features that need the shared state
//! raise an ERROR that says which line to add to postgresql.conf; everything else (the
//! distance operators) works without it.

use crate::errors::raise_not_preloaded;
use navis_engine::relation::changed_blocks::ChangedBlocks;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::ffi::CStr;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

/// Striped locks for writers of one vertex's edge list (DESIGN.md §6): a vertex maps to
/// stripe `vertex % VERTEX_LOCK_STRIPES`. A power of two large enough that concurrent
/// inserts rarely share a stripe.
pub const VERTEX_LOCK_STRIPES: usize = 1024;

const SHMEM_NAME: &CStr = c"navis shared state";
const LOCK_TRANCHE: &CStr = c"navis_vertex_locks";
const ALLOCATOR_TRANCHE: &CStr = c"navis_allocator_locks";
/// Allocator locks, shared by all navis indexes by hash of their identity: each is held for
/// a few stores at a time, so a handful is plenty.
pub const ALLOCATOR_LOCKS: usize = 64;
const MAGIC: u64 = 0x4e41_5649_5353_484d; // "NAVISSHM"
const LAYOUT_VERSION: u32 = 4;
/// What redo changed, per index by hash of the relation (generation and changed blocks,
/// `ChangedBlocks`): a shared slot only makes a hot standby re-read pages it did not need or
/// replace a copy that was still current, never keep a stale one.
pub const GENERATION_SLOTS: usize = 1024;

/// The fixed-size control block at the start of navis's shared memory.
#[repr(C)]
pub struct NavisShared {
    magic: u64,
    layout_version: u32,
    lock_stripes: u32,
    /// Pointer to the first lock of the `navis_vertex_locks` tranche.
    vertex_locks: *mut pg_sys::LWLockPadded,
    /// Pointer to the first lock of the `navis_allocator_locks` tranche.
    allocator_locks: *mut pg_sys::LWLockPadded,
    /// Identifies this lifetime of shared memory (new at every start and crash-restart):
    /// the first backend to open an index in a new epoch rebuilds its allocator state from
    /// the indirection table (`navis_engine::update::recover`).
    epoch: u64,
    /// Advanced by redo of every change to an index, with the blocks it changed: a hot
    /// standby's runtime copy synced to an older generation is stale until brought forward
    /// (`standby.rs`).
    redo_changes: [ChangedBlocks; GENERATION_SLOTS],
}

/// Set in the postmaster's startup hook and inherited by every forked backend.
static SHARED: AtomicPtr<NavisShared> = AtomicPtr::new(ptr::null_mut());
static mut PREV_SHMEM_REQUEST_HOOK: pg_sys::shmem_request_hook_type = None;
static mut PREV_SHMEM_STARTUP_HOOK: pg_sys::shmem_startup_hook_type = None;

/// Installs the shared-memory hooks when called during `shared_preload_libraries`
/// processing; otherwise does nothing (see the module comment).
pub fn request_if_preloading() {
    // SAFETY: reading and chaining PostgreSQL's hook globals happens single-threaded in
    // _PG_init, which is exactly how PostgreSQL expects extensions to install hooks.
    unsafe {
        if !pg_sys::process_shared_preload_libraries_in_progress {
            return;
        }
        PREV_SHMEM_REQUEST_HOOK = pg_sys::shmem_request_hook;
        pg_sys::shmem_request_hook = Some(on_shmem_request);
        PREV_SHMEM_STARTUP_HOOK = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(on_shmem_startup);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_shmem_request() {
    // SAFETY: called by the postmaster in its shmem-request phase, the only time these
    // requests are allowed; the previous hook is chained first.
    unsafe {
        if let Some(prev) = PREV_SHMEM_REQUEST_HOOK {
            prev();
        }
        pg_sys::RequestAddinShmemSpace(std::mem::size_of::<NavisShared>());
        pg_sys::RequestAddinShmemSpace(crate::cache::region_bytes());
        crate::result_cache::request();
        crate::lios::request();
        pg_sys::RequestNamedLWLockTranche(LOCK_TRANCHE.as_ptr(), VERTEX_LOCK_STRIPES as i32);
        pg_sys::RequestNamedLWLockTranche(ALLOCATOR_TRANCHE.as_ptr(), ALLOCATOR_LOCKS as i32);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_shmem_startup() {
    // SAFETY: the startup hook runs in the postmaster (and after a crash-restart) with
    // AddinShmemInitLock serialising ShmemInitStruct, as PostgreSQL's own modules do.
    // AddinShmemInitLock is MainLWLockArray[21] in PostgreSQL 15 (lwlocknames.h).
    unsafe {
        if let Some(prev) = PREV_SHMEM_STARTUP_HOOK {
            prev();
        }
        let init_lock = &raw mut (*pg_sys::MainLWLockArray.add(21)).lock;
        pg_sys::LWLockAcquire(init_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let mut found = false;
        let shared = pg_sys::ShmemInitStruct(
            SHMEM_NAME.as_ptr(),
            std::mem::size_of::<NavisShared>(),
            &mut found,
        ) as *mut NavisShared;
        if !found {
            shared.write(NavisShared {
                magic: MAGIC,
                layout_version: LAYOUT_VERSION,
                lock_stripes: VERTEX_LOCK_STRIPES as u32,
                vertex_locks: pg_sys::GetNamedLWLockTranche(LOCK_TRANCHE.as_ptr()),
                allocator_locks: pg_sys::GetNamedLWLockTranche(ALLOCATOR_TRANCHE.as_ptr()),
                epoch: new_epoch(),
                redo_changes: [const { ChangedBlocks::new() }; GENERATION_SLOTS],
            });
        }
        // The edge-page cache (its own named block, sized by navis.cache_size).
        crate::cache::init_shared();
        // The result cache (its own named block, sized by navis.result_cache_size).
        crate::result_cache::init_shared();
        // The LIOS task queue (its own named block, sized by navis.lios_queue_size).
        crate::lios::init_shared();
        pg_sys::LWLockRelease(init_lock);
        SHARED.store(shared, Ordering::Release);
    }
}

/// The shared control block, or `None` when navis was not preloaded.
pub fn shared() -> Option<&'static NavisShared> {
    let p = SHARED.load(Ordering::Acquire);
    // SAFETY: non-null only after ShmemInitStruct returned a block that lives as long as the
    // postmaster's shared memory, i.e. longer than any backend.
    unsafe { p.as_ref() }.filter(|s| s.magic == MAGIC)
}

/// The shared control block, or `ERROR` naming the postgresql.conf line to add.
pub fn require(feature: &str) -> &'static NavisShared {
    shared().unwrap_or_else(|| raise_not_preloaded(feature))
}

/// A value no earlier lifetime of shared memory had: the start time in microseconds mixed
/// with the postmaster's pid (two restarts within one microsecond are impossible).
fn new_epoch() -> u64 {
    // SAFETY: a plain read of the clock.
    let now = unsafe { pg_sys::GetCurrentTimestamp() } as u64;
    now ^ (std::process::id() as u64).rotate_left(48)
}

impl NavisShared {
    /// The lock stripe `stripe` (of `lock_stripes`) guarding writers of edge lists.
    pub fn stripe_lock(&self, stripe: usize) -> *mut pg_sys::LWLock {
        let stripe = stripe % self.lock_stripes as usize;
        // SAFETY: the tranche holds lock_stripes padded locks starting at vertex_locks.
        unsafe { &raw mut (*self.vertex_locks.add(stripe)).lock }
    }

    pub fn stripe_count(&self) -> usize {
        self.lock_stripes as usize
    }

    /// The allocator lock for the index identified by `key`.
    pub fn allocator_lock(&self, key: u64) -> *mut pg_sys::LWLock {
        let i = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % ALLOCATOR_LOCKS;
        // SAFETY: the tranche holds ALLOCATOR_LOCKS padded locks starting at allocator_locks.
        unsafe { &raw mut (*self.allocator_locks.add(i)).lock }
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// What redo changed in the index in `node` (and in any index sharing its slot) in this
    /// server lifetime: only the startup process records into it.
    pub fn redo_changes(&self, node: &pg_sys::RelFileNode) -> &ChangedBlocks {
        let key = (node.spcNode.to_u32() as u64) << 40
            ^ (node.dbNode.to_u32() as u64) << 20
            ^ node.relNode.to_u32() as u64;
        let i = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % GENERATION_SLOTS;
        &self.redo_changes[i]
    }
}

/// The engine's writer locks for one index, as LWLocks: they are released by PostgreSQL's
/// error recovery if a backend fails while holding them, and waits show up in
/// pg_stat_activity as `navis_vertex_locks` / `navis_allocator_locks`.
pub struct PgLocks {
    shared: &'static NavisShared,
    index_key: u64,
}

impl PgLocks {
    pub fn new(shared: &'static NavisShared, index_key: u64) -> PgLocks {
        PgLocks { shared, index_key }
    }
}

// SAFETY: a backend runs navis's engine on one thread; the LWLocks themselves live in shared
// memory and are made for concurrent use by many processes.
unsafe impl Sync for PgLocks {}

fn acquire(lock: *mut pg_sys::LWLock) {
    // SAFETY: a valid LWLock in shared memory; LWLockAcquire holds off interrupts until the
    // matching release, and PostgreSQL releases it on ERROR.
    unsafe { pg_sys::LWLockAcquire(lock, pg_sys::LWLockMode::LW_EXCLUSIVE) };
}

fn release(lock: *mut pg_sys::LWLock) {
    // SAFETY: the engine releases exactly the locks it acquired through these methods.
    unsafe { pg_sys::LWLockRelease(lock) };
}

impl navis_engine::update::WriteLocks for PgLocks {
    fn stripe_count(&self) -> usize {
        self.shared.stripe_count()
    }

    fn lock_stripe(&self, stripe: usize) {
        acquire(self.shared.stripe_lock(stripe));
    }

    fn try_lock_stripe(&self, stripe: usize) -> bool {
        // SAFETY: a valid LWLock in shared memory; a conditional acquire never waits, and
        // one that succeeds is released like any other (PostgreSQL also on ERROR).
        unsafe {
            pg_sys::LWLockConditionalAcquire(
                self.shared.stripe_lock(stripe),
                pg_sys::LWLockMode::LW_EXCLUSIVE,
            )
        }
    }

    fn unlock_stripe(&self, stripe: usize) {
        release(self.shared.stripe_lock(stripe));
    }

    fn lock_allocator(&self) {
        acquire(self.shared.allocator_lock(self.index_key));
    }

    fn unlock_allocator(&self) {
        release(self.shared.allocator_lock(self.index_key));
    }
}

/// Reports whether navis's shared memory is available in this server, and its layout.
#[pg_extern]
fn navis_shared_memory() -> TableIterator<
    'static,
    (
        name!(preloaded, bool),
        name!(layout_version, i32),
        name!(vertex_lock_stripes, i32),
        name!(allocator_locks, i32),
    ),
> {
    let row = match shared() {
        Some(s) => (
            true,
            s.layout_version as i32,
            s.lock_stripes as i32,
            ALLOCATOR_LOCKS as i32,
        ),
        None => (false, 0, 0, 0),
    };
    TableIterator::once(row)
}
