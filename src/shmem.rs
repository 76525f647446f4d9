//! Postmaster shared memory for navis.
//!
//! navis keeps cross-backend state (lock stripes for edge-list writers now; the edge-page
//! cache, entrance graphs and allocator state in later stages) in shared memory, which
//! PostgreSQL only hands out to libraries loaded through `shared_preload_libraries`. When the
//! library was loaded later (first use in a backend), features that need the shared state
//! raise an ERROR that says which line to add to postgresql.conf; everything else (the
//! distance operators) works without it.

use crate::errors::raise_not_preloaded;
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
const MAGIC: u64 = 0x4e41_5649_5353_484d; // "NAVISSHM"
const LAYOUT_VERSION: u32 = 1;

/// The fixed-size control block at the start of navis's shared memory.
#[repr(C)]
pub struct NavisShared {
    magic: u64,
    layout_version: u32,
    lock_stripes: u32,
    /// Pointer to the first lock of the `navis_vertex_locks` tranche.
    vertex_locks: *mut pg_sys::LWLockPadded,
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
        pg_sys::RequestNamedLWLockTranche(LOCK_TRANCHE.as_ptr(), VERTEX_LOCK_STRIPES as i32);
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
            });
        }
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

impl NavisShared {
    /// The lock stripe guarding writers of `vertex`'s edge list.
    #[allow(dead_code)] // used by the concurrent-insert path (issue 5)
    pub fn vertex_lock(&self, vertex: u32) -> *mut pg_sys::LWLock {
        let stripe = vertex as usize % self.lock_stripes as usize;
        // SAFETY: the tranche holds lock_stripes padded locks starting at vertex_locks.
        unsafe { &raw mut (*self.vertex_locks.add(stripe)).lock }
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
    ),
> {
    let row = match shared() {
        Some(s) => (true, s.layout_version as i32, s.lock_stripes as i32),
        None => (false, 0, 0),
    };
    TableIterator::once(row)
}
