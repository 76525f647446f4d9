//! Opening a navis index for a backend: the index's pages in its relation, its runtime copy
//! (`runtime.rs`), the engine's `Index` over both, cached per backend.
//!
//! Every access-method call finds its `OpenIndex` with [`open_index`]: block 0 (the engine's
//! metapage) names the build; the cache is keyed by relfilenode, build, server lifetime and,
//! on a hot standby, the redo generation the copy was made at. A primary's copy is kept
//! current by the backends that change the index (every change goes through [`PgLog`] first,
//! then into the copy); a standby's copy is brought forward to the generation redo has
//! reached before each use (`standby.rs`), or made again from the pages when a change cannot
//! be applied page by page. The first opener in a server lifetime materialises the copy from
//! the pages; the others map it.

use crate::errors::raise;
use crate::guc;
use crate::pglog::{PgBufStore, PgLog};
use crate::relstore;
use crate::runtime::{self, CopyKey};
use navis_engine::cache::Caller;
use navis_engine::casr::WindowCalibrator;
use navis_engine::counters::SearchCounters;
use navis_engine::index::{DiskReader, Index, SpareReader};
use navis_engine::pages::meta::Meta;
use navis_engine::search::BeamAdvisor;
use pgrx::pg_sys;
use pgrx::PgSqlErrorCode;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

/// `navis.casr_warmup` and the bits of the path's percentile setting.
type CalibrationSettings = (i32, u64);
/// A CASR window found for (warm-up, percentile bits, search list): (.., .., .., window).
type KnownWindow = (i32, u64, usize, usize);

/// An opened index and its per-backend runtime state.
pub struct OpenIndex {
    pub index: Index,
    pub build_id: u64,
    /// The runtime copy's directory.
    pub dir: PathBuf,
    /// The relation's pages, through the relation bound for the current call ([`bind`]).
    store: Arc<PgBufStore>,
    /// The last CASR window this backend found per path, with the settings (warm-up,
    /// percentile bits) and search list it was found for.
    casr_windows: Cell<[Option<KnownWindow>; 2]>,
    /// Per-backend calibration of lists the pooled one does not serve, by (path, list), with
    /// the settings (warm-up, percentile bits) each was made with.
    local_calibrators: RefCell<HashMap<(usize, usize), (CalibrationSettings, WindowCalibrator)>>,
    /// Engine counters summed over this backend's scans of the index.
    pub counters: Mutex<SearchCounters>,
    pub scans: Mutex<u64>,
    /// Where this backend's searches found the index's edge pages: the beam width of
    /// `navis.beam_width = 0` ([`crate::guc::beam_width`]).
    pub beam: BeamAdvisor,
    /// Identity of the relation (tablespace, database, relfilenode) for its allocator lock.
    pub lock_key: u64,
    /// The files, io_uring queue and buffers of this backend's last finished reader, with the
    /// `navis.direct_io` setting it was kept under, for the next scan or insert (a reader per
    /// statement would cost two opens, an io_uring setup and fresh buffers every time).
    spare_reader: RefCell<Option<(bool, SpareReader)>>,
}

/// The relation an [`OpenIndex`] is bound to for one call; restores the previous binding.
pub struct Bound<'a> {
    store: &'a PgBufStore,
    previous: pg_sys::Relation,
}

impl Drop for Bound<'_> {
    fn drop(&mut self) {
        self.store.bind(self.previous);
    }
}

impl OpenIndex {
    /// Points the index's page store and log at `rel`, this call's open relation, until the
    /// returned guard drops (a relcache entry may move between calls, so the pointer is
    /// never kept).
    pub fn bind(&self, rel: pg_sys::Relation) -> Bound<'_> {
        let previous = self.store.bind(rel);
        Bound {
            store: &self.store,
            previous,
        }
    }

    /// The CASR window of `caller`'s path with search list `list` at the current
    /// `navis.casr_warmup` and percentile, once its warm-up is complete; `None` while it is
    /// not: the rerank then loads every candidate and its minimal safe window goes to
    /// [`OpenIndex::record_casr_sample`]. The warm-up is pooled by all backends (in the shared
    /// entrance file) for the first list calibrated; other lists calibrate in this backend.
    pub fn casr_window(&self, caller: Caller, list: usize) -> Option<usize> {
        let (warmup, percentile) = casr_settings(caller);
        let slot = caller as usize;
        let mut known = self.casr_windows.get();
        if let Some((w_warmup, w_percentile, w_list, window)) = known[slot] {
            if (w_warmup, w_percentile, w_list) == (warmup, percentile.to_bits(), list) {
                return Some(window);
            }
        }
        let pooled =
            self.index
                .entrance()
                .calibration(caller, list, warmup.max(1) as usize, percentile);
        let window = match pooled {
            Some((_, window)) => window,
            None => self.local_calibration(caller, list, |c| c.window()),
        };
        if let Some(w) = window {
            known[slot] = Some((warmup, percentile.to_bits(), list, w));
            self.casr_windows.set(known);
        }
        window
    }

    /// Adds a warm-up rerank's minimal safe window to the calibration sample of its list.
    pub fn record_casr_sample(&self, caller: Caller, list: usize, needed: usize) {
        if !self
            .index
            .entrance()
            .record_calibration(caller, list, needed)
        {
            self.local_calibration(caller, list, |c| c.record_window(needed));
        }
    }

    /// Warm-up samples behind [`OpenIndex::casr_window`] so far.
    pub fn casr_samples(&self, caller: Caller, list: usize) -> u64 {
        let (warmup, percentile) = casr_settings(caller);
        match self
            .index
            .entrance()
            .calibration(caller, list, warmup.max(1) as usize, percentile)
        {
            Some((samples, _)) => samples,
            None => self.local_calibration(caller, list, |c| c.samples() as u64),
        }
    }

    /// This backend's own calibrator for a list the pooled sample does not serve, made anew
    /// when the warm-up or percentile setting changed.
    fn local_calibration<T>(
        &self,
        caller: Caller,
        list: usize,
        f: impl FnOnce(&mut WindowCalibrator) -> T,
    ) -> T {
        let (warmup, percentile) = casr_settings(caller);
        let key = (warmup, percentile.to_bits());
        let mut calibrators = self.local_calibrators.borrow_mut();
        let entry = calibrators
            .entry((caller as usize, list))
            .or_insert_with(|| (key, new_calibrator(caller, warmup, percentile)));
        if entry.0 != key {
            *entry = (key, new_calibrator(caller, warmup, percentile));
        }
        f(&mut entry.1)
    }

    /// A reader over this index, reusing the spare one when there is one.
    pub fn reader(&self) -> DiskReader<'_> {
        let direct = guc::DIRECT_IO.get();
        navis_engine::io::set_direct_io(direct);
        let spare = self.spare_reader.borrow_mut().take();
        let spare = spare.and_then(|(was_direct, s)| (was_direct == direct).then_some(s));
        match self.index.reader_reusing(spare) {
            Ok(r) => r,
            Err(e) => raise(
                PgSqlErrorCode::ERRCODE_IO_ERROR,
                format!("navis could not open a reader: {e}"),
                None,
            ),
        }
    }

    /// Keeps a finished reader for the next [`OpenIndex::reader`]. Not while unwinding: an
    /// error may have interrupted the reader's work.
    pub fn recycle(&self, reader: DiskReader<'_>) {
        if !std::thread::panicking() {
            *self.spare_reader.borrow_mut() = Some((guc::DIRECT_IO.get(), reader.into_spare()));
        }
    }

    /// The writer locks of this index (LWLocks in shared memory).
    pub fn locks(&self) -> crate::shmem::PgLocks {
        crate::shmem::PgLocks::new(crate::shmem::require("navis index writes"), self.lock_key)
    }
}

/// Opened indexes of this backend, by the copy they use.
type OpenIndexCache = HashMap<CopyKey, Rc<OpenIndex>>;

thread_local! {
    static CACHE: RefCell<OpenIndexCache> = RefCell::new(HashMap::new());
}

fn damaged(index: pg_sys::Relation, detail: String) -> ! {
    let name = runtime::relation_name(index);
    crate::errors::raise_detail(
        PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
        format!("navis index \"{name}\" cannot be opened: its pages are damaged or from another navis version"),
        detail,
        Some(&format!("Run REINDEX INDEX {name} to rebuild it from the table.")),
    )
}

/// The key of an index's pages in NAVIS-Cache. The build id alone is not enough: a copy of
/// the relation (CREATE DATABASE ... TEMPLATE, SET TABLESPACE) keeps the build id, and its
/// pages then change apart from the original's, so the relation's identity is mixed in.
pub fn cache_tag(spc: u32, db: u32, relfilenode: u32, build_id: u64) -> u64 {
    let node = (spc as u64) << 42 ^ (db as u64) << 21 ^ relfilenode as u64;
    build_id ^ node.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17)
}

/// [`cache_tag`] of an open index relation with build `build_id`: the identity NAVIS-Cache,
/// the result cache and LIOS's queue key an index by, so a REINDEX, TRUNCATE or rebuild
/// starts afresh in each.
pub fn relation_cache_tag(index: pg_sys::Relation, build_id: u64) -> u64 {
    // SAFETY: an open relation's rd_node.
    let node = unsafe { (*index).rd_node };
    cache_tag(
        node.spcNode.to_u32(),
        node.dbNode.to_u32(),
        node.relNode.to_u32(),
        build_id,
    )
}

/// The engine's metapage (block 0), read through its buffer; `None` for an empty fork or a
/// block 0 that is not a navis metapage of this layout version.
pub fn read_meta(index: pg_sys::Relation) -> Option<Meta> {
    decode_meta(index).ok()
}

/// [`read_meta`] saying why not: an empty fork, or what decoding block 0 found (another
/// layout version is named as such).
fn decode_meta(index: pg_sys::Relation) -> Result<Meta, String> {
    if relstore::nblocks(index) == 0 {
        return Err("the relation has no pages".into());
    }
    // Block 0 is buffer-managed: one buffer read, no disk read (every access-method call
    // comes here).
    let mut page = vec![0u8; relstore::BLOCK_SIZE];
    crate::pglog::read_buffered(index, 0, &mut page);
    Meta::decode(&page).map_err(|e| format!("metapage (block 0): {e}"))
}

/// The opened index behind a relation, from the cache or freshly opened, bound to `index`
/// for the caller's use.
pub fn open_index(index: pg_sys::Relation) -> Rc<OpenIndex> {
    let meta = decode_meta(index).unwrap_or_else(|detail| damaged(index, detail));
    let shared = crate::shmem::require("navis indexes");
    // SAFETY: an open relation's rd_node; RecoveryInProgress reads shared state.
    let (node, standby) = unsafe { ((*index).rd_node, pg_sys::RecoveryInProgress()) };
    let key = CopyKey {
        spc: node.spcNode.to_u32(),
        db: node.dbNode.to_u32(),
        relfilenode: node.relNode.to_u32(),
        build_id: meta.build_id,
        epoch: shared.epoch(),
        standby,
        // On a hot standby: the redo generation, read before any page. A new copy is named
        // and synced by it; an older one is brought forward to it.
        generation: if standby {
            shared.redo_changes(&node).generation()
        } else {
            0
        },
    };
    let cached = CACHE.with(|c| {
        let c = c.borrow();
        match c.get(&key) {
            Some(hit) => Some(hit.clone()),
            // a standby copy of this build made at another generation
            None if standby => c
                .iter()
                .find(|(k, _)| {
                    CopyKey {
                        generation: key.generation,
                        ..**k
                    } == key
                })
                .map(|(_, open)| open.clone()),
            None => None,
        }
    });
    let had_copy = cached.is_some();
    if let Some(open) = cached {
        if !standby || crate::standby::bring_forward(index, &open, &meta, shared, key.generation) {
            return open;
        }
    }
    // A standby backend without a copy of its own takes the newest one another backend made
    // (with its NAVIS-Cache frames and calibration) when it can bring it forward.
    let mut key = key;
    let mut open = None;
    if standby && !had_copy {
        if let Some(generation) = runtime::newest_standby_copy(&key) {
            let older = CopyKey { generation, ..key };
            // (a standby never takes the growth lock, so it always opens what it read)
            if let Some(candidate) = reopen(index, older, shared).map(Rc::new) {
                if crate::standby::bring_forward(index, &candidate, &meta, shared, key.generation) {
                    (key, open) = (older, Some(candidate));
                }
            }
        }
    }
    let open = match open {
        Some(open) => open,
        None => match reopen(index, key, shared) {
            Some(open) => Rc::new(open),
            // A rebuild switched builds since block 0 was read: open the new one.
            None => return open_index(index),
        },
    };
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        // Other builds, lifetimes and generations of this relfilenode are never used again.
        c.retain(|k, _| (k.spc, k.db, k.relfilenode) != (key.spc, key.db, key.relfilenode));
        c.insert(key, open.clone());
    });
    open
}

/// Opens the build `key` names from the relation's pages, or `None` when block 0 no longer
/// names that build (a rebuild switched it after the caller read it).
fn reopen(
    index: pg_sys::Relation,
    key: CopyKey,
    shared: &'static crate::shmem::NavisShared,
) -> Option<OpenIndex> {
    let dir = key.dir();
    if !dir.exists() {
        // Buffers PostgreSQL itself filled with bulk pages (CREATE DATABASE ... STRATEGY
        // wal_log, or its replay on a standby; see relstore::existing_buffer) may hold pages
        // the disk does not have yet, and searches read bulk pages from disk: write them out
        // once, before the first copy of this lifetime (and of each standby generation).
        // SAFETY: `index` is open and locked by the caller's access-method call.
        unsafe { pg_sys::FlushRelationBuffers(index) };
        runtime::sweep(&key);
        if let Err(e) = std::fs::create_dir_all(runtime::ROOT) {
            raise(
                PgSqlErrorCode::ERRCODE_IO_ERROR,
                format!("navis could not create \"{}\": {e}", runtime::ROOT),
                None,
            )
        }
    }
    let store = Arc::new(PgBufStore::new(index));
    let fork = relstore::segment_path(index, 0);
    // On a primary the pages are read under the relation extension lock, which every change
    // of the layout holds (growth of the extent map, a rebuild's switch of block 0): read
    // without it, a writer growing the relation between the reads of the extent map and of
    // the indirection pages made an entry name an edge page beyond the map read, and the
    // open failed as damaged (grow_from_empty_concurrently, concurrent_inserts). Inserts
    // that need no new pages do not wait; nothing here takes another heavyweight lock.
    let growth = (!key.standby).then(|| relstore::ExtensionLock::take(index));
    if !key.standby && decode_meta(index).map(|m| m.build_id) != Ok(key.build_id) {
        return None;
    }
    let opened =
        navis_engine::relation::open_index_synced(store.clone(), &fork, &dir, key.generation);
    let log = match (&opened, key.standby) {
        (Ok(_), false) => Some(PgLog::over(store.clone())),
        _ => None,
    };
    drop(growth);
    let opened = opened.unwrap_or_else(|e| damaged(index, e.to_string()));
    if let Some(log) = log {
        let log = log.unwrap_or_else(|e| damaged(index, e.to_string()));
        opened.set_log(Arc::new(log));
    }
    // Edge pages go through the shared NAVIS-Cache, keyed by this build. A hot standby's
    // copy keys them by its generation too: redo rewrote edge pages before the copy was made
    // that no backend wrote through to the cache, so a new copy starts with no frames; from
    // then on `standby::bring_forward` writes through every edge page redo changes, as a
    // primary's writers do.
    if let Some(cache) = crate::cache::shared_cache() {
        let mut tag = cache_tag(key.spc, key.db, key.relfilenode, key.build_id);
        if key.standby {
            // Never a primary's tag: after promotion the primary copy must not find frames
            // that missed the changes replayed after the standby copy's last bring-forward.
            tag ^= (key.generation ^ 0x5354_414e_4442_5900).wrapping_mul(0xD6E8_FEB8_6659_FD93);
        }
        opened
            .files()
            .attach_cache(navis_engine::cache::CacheBinding { cache, tag });
    }
    let lock_key =
        key.spc as u64 ^ (key.db as u64).rotate_left(21) ^ (key.relfilenode as u64).rotate_left(42);
    // The first opener in this server lifetime derives the allocator state (free lists, live
    // counts) from the indirection entries (RFC 0001 §10).
    let locks = crate::shmem::PgLocks::new(shared, lock_key);
    if let Err(e) = navis_engine::update::recover(opened.files(), &locks, shared.epoch()) {
        damaged(index, format!("deriving the allocator state failed: {e}"));
    }
    // Once per index per backend: the first opener in a server lifetime read the whole hot
    // image (codes, indirection) to make the runtime copy, and `recover` read and parsed the
    // entrance graph's blob (16.6 MB at 1M rows) to rebuild its shared copy; hand that memory
    // back (navis_engine::heap). Trimmed before `recover`, the blob's pages stayed with the
    // backend. For the other openers the trim finds little and costs little.
    navis_engine::heap::return_freed_memory();
    // The store is bound per call from now on.
    store.bind(std::ptr::null_mut());
    Some(OpenIndex {
        index: opened,
        build_id: key.build_id,
        dir,
        store,
        casr_windows: Cell::new([None; 2]),
        local_calibrators: RefCell::new(HashMap::new()),
        counters: Mutex::new(SearchCounters::default()),
        scans: Mutex::new(0),
        beam: BeamAdvisor::default(),
        lock_key,
        spare_reader: RefCell::new(None),
    })
}

fn new_calibrator(caller: Caller, warmup: i32, percentile: f64) -> WindowCalibrator {
    WindowCalibrator::new(warmup.max(1) as usize, percentile).unwrap_or_else(|_| match caller {
        Caller::Search => WindowCalibrator::for_search(),
        Caller::Insert => WindowCalibrator::for_insert(),
    })
}

/// `navis.casr_warmup` and the path's percentile setting.
fn casr_settings(caller: Caller) -> (i32, f64) {
    let percentile = match caller {
        Caller::Search => guc::CASR_PERCENTILE_SEARCH.get(),
        Caller::Insert => guc::CASR_PERCENTILE_INSERT.get(),
    };
    (guc::CASR_WARMUP.get(), percentile)
}
