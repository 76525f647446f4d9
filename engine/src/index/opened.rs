//! The opened index: [`Index`] maps an index's files, hands out per-thread readers and runs
//! searches with the CASR window it calibrates.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use super::reader::{DiskReader, ReaderIo, SpareReader, READER_QUEUE_DEPTH};
use super::IndexError;
use crate::cache::Caller;
use crate::casr::WindowCalibrator;
use crate::counters::SearchCounters;
use crate::distance::Metric;
use crate::entrance::shared::SharedEntrance;
use crate::entrance::{EntranceError, EntranceGraph, EntranceView};
use crate::io::{IoOptions, PageReader};
use crate::pq::ProductQuantizer;
use crate::search::{CasrMode, SearchCursor, SearchHit, SearchParams};
use crate::segments::SegmentReader;
use crate::storage::state::Field;
use crate::storage::{names, IndexFiles, StorageError};
use crate::update::{IndexLog, SideFileLog};
use crate::VertexId;

/// CASR window for searches: fixed, off, or calibrated on the index's first queries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CasrSetting {
    /// Calibrate on the first `warmup` queries (they rerank everything), then use the window.
    Auto,
    Window(usize),
    Off,
}

/// An opened index.
pub struct Index {
    pub(super) files: IndexFiles,
    pub(super) pq: ProductQuantizer,
    /// The shared entrance graph (`entrance.shm`), mapped; or, when that file cannot be
    /// used, a private copy built from the durable files (then nothing is promoted).
    entrance: RwLock<Arc<SharedEntrance>>,
    entrance_is_shared: AtomicBool,
    /// The state epoch at which `entrance` was last (re)opened.
    entrance_checked: AtomicU64,
    pub(super) calibrator: Mutex<WindowCalibrator>,
    /// The log of a relation index (`Index::log`).
    log: std::sync::OnceLock<Arc<dyn IndexLog>>,
    /// VACUUM's reconnect pass restores back-edges lost with LIOS's queue
    /// ([`Index::set_restore_lost_back_edges`]).
    restore_lost_back_edges: AtomicBool,
}

impl Index {
    /// Opens and validates an index directory.
    pub fn open(dir: &Path) -> Result<Index, IndexError> {
        Self::from_files(IndexFiles::open(dir)?)
    }

    /// The index whose files (side directory, or runtime directory and relation) are open.
    pub fn from_files(files: IndexFiles) -> Result<Index, IndexError> {
        let dir = files.dir().to_path_buf();
        let dir = dir.as_path();
        let pq = ProductQuantizer::from_bytes(files.pq_codebook())
            .map_err(|e| IndexError::Invalid(format!("{}: bad PQ codebook: {e}", dir.display())))?;
        let m = files.manifest();
        if pq.dim() != m.dim as usize {
            return Err(IndexError::Invalid(format!(
                "{}: PQ codebook disagrees with the manifest's dimension {}",
                dir.display(),
                m.dim
            )));
        }
        let epoch = files.state().epoch();
        let (shared, is_shared) = match open_shared_entrance(&files) {
            Some(shared) => (shared, true),
            None => (private_entrance(&files, build_entrance(&files)?)?, false),
        };
        Ok(Index {
            files,
            pq,
            entrance: RwLock::new(Arc::new(shared)),
            entrance_is_shared: AtomicBool::new(is_shared),
            entrance_checked: AtomicU64::new(epoch),
            calibrator: Mutex::new(WindowCalibrator::for_search()),
            log: std::sync::OnceLock::new(),
            restore_lost_back_edges: AtomicBool::new(false),
        })
    }

    pub fn dir(&self) -> &Path {
        self.files.dir()
    }

    /// Where this index's changes become durable (`update::log`): the side files
    /// themselves, or for a relation index the log its opener set ([`Index::set_log`]).
    pub fn log(&self) -> Result<Box<dyn IndexLog + '_>, StorageError> {
        match (self.files.relation(), self.log.get()) {
            (None, _) => Ok(Box::new(SideFileLog::new(&self.files)?)),
            (Some(_), Some(log)) => Ok(Box::new(Arc::clone(log))),
            (Some(relation), None) => Err(StorageError::invalid(format!(
                "the index in {} was opened read-only: it has no log to write through",
                relation.fork.display()
            ))),
        }
    }

    /// Sets the log a relation index writes through (once; false if one was set already).
    pub fn set_log(&self, log: Arc<dyn IndexLog>) -> bool {
        self.log.set(log).is_ok()
    }

    pub fn files(&self) -> &IndexFiles {
        &self.files
    }

    pub fn metric(&self) -> Metric {
        self.files.manifest().metric
    }

    pub fn dim(&self) -> usize {
        self.files.manifest().dim as usize
    }

    /// Vertices in the graph: published, lazily deleted ones included.
    pub fn len(&self) -> usize {
        self.files.state().get(Field::Published) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Lazily deleted vertices (still in the graph, never in results).
    pub fn deleted_len(&self) -> usize {
        (self.files.state().get(Field::Deleted) as usize).min(self.len())
    }

    /// Vertices a search can return.
    pub fn live_len(&self) -> usize {
        self.len() - self.deleted_len()
    }

    /// The share of the graph that is lazily deleted.
    pub fn deleted_fraction(&self) -> f64 {
        if self.is_empty() {
            0.0
        } else {
            self.deleted_len() as f64 / self.len() as f64
        }
    }

    /// A search list widened for lazily deleted vertices, as NAVIS does:
    /// `ceil(L / (1 - d)) + 10` with `d` the deleted fraction; `L` when nothing is deleted.
    pub fn widened_list(&self, list: usize) -> usize {
        let d = self.deleted_fraction();
        if d <= 0.0 {
            return list;
        }
        let widened = (list as f64 / (1.0 - d).max(0.01)).ceil() as usize + 10;
        widened.min(list.saturating_mul(100).max(list))
    }

    /// Whether inserts are possible: an index built over an empty table has a placeholder
    /// quantizer (and maybe no dimension), so it cannot place or encode vectors.
    pub fn accepts_inserts(&self) -> bool {
        self.files.manifest().vertex_count > 0
    }

    /// Whether VACUUM's reconnect and consolidation first give vertices left with few
    /// in-edges their back-edges again (`update::back_edges`): for indexes whose inserts
    /// deferred back-edges (LIOS), whose queued tasks a shutdown or crash loses. Off by
    /// default: on an index whose inserts wrote their back-edges the pass finds little to
    /// gain and rewrites pages for it.
    pub fn set_restore_lost_back_edges(&self, on: bool) {
        self.restore_lost_back_edges.store(on, Ordering::Relaxed);
    }

    pub(crate) fn restores_lost_back_edges(&self) -> bool {
        self.restore_lost_back_edges.load(Ordering::Relaxed)
    }

    /// Published and not lazily deleted.
    pub fn is_live_undeleted(&self, v: VertexId) -> bool {
        self.files.indirection().is_live_undeleted(v)
    }

    pub(crate) fn pq(&self) -> &ProductQuantizer {
        &self.pq
    }

    /// The entrance graph every process shares (see `entrance::shared`). After a recovery
    /// rebuilt the shared file (a new server lifetime), the new file is mapped.
    ///
    /// The epoch is marked checked only after the new mapping is in place, and read before
    /// the mapping: a thread that sees the mark sees the graph the check installed. Marking
    /// it first let a second thread take the old mapping as current, and an insert's
    /// promotion then went to the old file: logged, so in the graph of every later server
    /// lifetime, but missing from this one's (`engine/tests/relation_updates.rs` caught it
    /// about once in 240 runs under load).
    pub fn entrance(&self) -> Arc<SharedEntrance> {
        let epoch = self.files.state().epoch();
        if self.entrance_checked.load(Ordering::Acquire) == epoch {
            return Arc::clone(&self.entrance.read().expect("entrance lock"));
        }
        let mut current = self.entrance.write().expect("entrance lock");
        if self.entrance_checked.load(Ordering::Acquire) == epoch {
            return Arc::clone(&current); // another thread mapped it while this one waited
        }
        let graph = match open_shared_entrance(&self.files) {
            Some(fresh) if fresh.epoch() == epoch || !self.entrance_is_shared() => {
                let fresh = Arc::new(fresh);
                *current = Arc::clone(&fresh);
                self.entrance_is_shared.store(true, Ordering::Release);
                fresh
            }
            _ => Arc::clone(&current),
        };
        self.entrance_checked.store(epoch, Ordering::Release);
        graph
    }

    /// Whether [`Index::entrance`] is the shared graph (false: a private copy, because the
    /// shared file could not be opened; promotions are then skipped).
    pub fn entrance_is_shared(&self) -> bool {
        self.entrance_is_shared.load(Ordering::Acquire)
    }

    /// Replaces the search-window calibrator (e.g. to change the warm-up count).
    pub fn set_calibrator(&self, calibrator: WindowCalibrator) {
        *self.calibrator.lock().expect("calibrator lock") = calibrator;
    }

    /// The calibrated search window, once warm-up is done.
    pub fn search_window(&self) -> Option<usize> {
        self.calibrator.lock().expect("calibrator lock").window()
    }

    /// A reader for one thread: it owns an io_uring queue (or the pread fallback, chosen at
    /// run time; `NAVIS_IO=pread` forces it) over the edge and vector files.
    pub fn reader(&self) -> io::Result<DiskReader<'_>> {
        self.reader_reusing(None)
    }

    /// A reader that takes over what an earlier reader of this index left
    /// ([`DiskReader::into_spare`]): its open files, io_uring queue and buffers. PostgreSQL
    /// starts a reader per index scan; reusing one saves two `open`s, an `io_uring_setup`
    /// and freshly faulted buffers on every query. A spare from another index is dropped and
    /// a new reader opened.
    pub fn reader_reusing(&self, spare: Option<SpareReader>) -> io::Result<DiskReader<'_>> {
        match spare {
            Some(s) if s.index == self.identity() => Ok(DiskReader {
                index: self,
                io: s.io,
                slot_buf: s.slot_buf,
                miss_buf: s.miss_buf,
                caller: Caller::Search,
            }),
            _ => Ok(DiskReader {
                index: self,
                io: match self.files.relation() {
                    None => ReaderIo::Side(PageReader::for_index(&self.files, READER_QUEUE_DEPTH)?),
                    Some(relation) => ReaderIo::Relation(SegmentReader::open(
                        &relation.fork,
                        IoOptions::from_env(READER_QUEUE_DEPTH)?,
                    )?),
                },
                slot_buf: Vec::new(),
                miss_buf: Vec::new(),
                caller: Caller::Search,
            }),
        }
    }

    /// Tells this index's spare readers from another's while both are alive.
    pub(super) fn identity(&self) -> usize {
        self as *const Index as usize
    }

    /// One top-k search. With [`CasrSetting::Auto`] the first queries rerank everything and
    /// feed the calibrator; later ones use the calibrated window.
    pub fn search(
        &self,
        reader: &mut DiskReader<'_>,
        query: &[f32],
        mut params: SearchParams,
        casr: CasrSetting,
    ) -> io::Result<(Vec<SearchHit>, SearchCounters)> {
        let calibrating = match casr {
            // The packed-layout emulation reranks every vector it loaded while expanding, so
            // there is no window to apply and its reranks yield no calibration sample.
            _ if params.packed => {
                params.casr = CasrMode::Off;
                false
            }
            CasrSetting::Auto => match self.search_window() {
                Some(w) => {
                    params.casr = CasrMode::Window(w);
                    false
                }
                None => {
                    params.casr = CasrMode::Off;
                    true
                }
            },
            CasrSetting::Window(w) => {
                params.casr = CasrMode::Window(w);
                false
            }
            CasrSetting::Off => {
                params.casr = CasrMode::Off;
                false
            }
        };
        let mut cursor = SearchCursor::new(reader, query, params)?;
        let hits = cursor.next_batch(params.k)?;
        if let (true, Some(w)) = (calibrating, cursor.calibration_sample()) {
            self.calibrator
                .lock()
                .expect("calibrator lock")
                .record_window(w);
        }
        Ok((hits, cursor.counters()))
    }
}

impl Index {
    /// Runs [`CasrSetting::Auto`] searches over `queries` (row-major, cycled) until the CASR
    /// window is calibrated, and returns it. Gives up (returning `None`, after which `Auto`
    /// searches keep reranking everything) when no query can feed the calibrator: packed
    /// searches, an index or query set with nothing to rerank, or `max_queries` searches
    /// without completing the warm-up.
    pub fn warm_up(
        &self,
        reader: &mut DiskReader<'_>,
        queries: &[f32],
        params: SearchParams,
        max_queries: usize,
    ) -> io::Result<Option<usize>> {
        let dim = self.dim();
        if params.packed || self.is_empty() || queries.len() < dim {
            return Ok(self.search_window());
        }
        let rows: Vec<&[f32]> = queries.chunks_exact(dim).collect();
        for q in rows.iter().cycle().take(max_queries) {
            if let Some(w) = self.search_window() {
                return Ok(Some(w));
            }
            self.search(reader, q, params, CasrSetting::Auto)?;
        }
        Ok(self.search_window())
    }
}

/// Maps `entrance.shm` if it exists and matches the manifest.
fn open_shared_entrance(files: &IndexFiles) -> Option<SharedEntrance> {
    let shared = SharedEntrance::open(&files.dir().join(names::ENTRANCE_SHM)).ok()?;
    let m = files.manifest();
    (shared.dim() == m.dim as usize && shared.metric() == m.metric).then_some(shared)
}

/// The build's entrance graph from its blob, checked against the manifest.
fn build_entrance(files: &IndexFiles) -> Result<EntranceGraph, IndexError> {
    let dir = files.dir();
    let invalid = |e: String| IndexError::Invalid(format!("{}: {e}", dir.display()));
    let bytes = files.read_entrance()?;
    let entrance = EntranceGraph::from_bytes(&bytes).map_err(|e| invalid(e.to_string()))?;
    let m = files.manifest();
    if entrance.dim() != m.dim as usize
        || entrance.metric() != m.metric
        || entrance.ids().iter().any(|&v| v >= m.vertex_count)
    {
        return Err(invalid(format!(
            "entrance graph does not match the manifest's dimension {}, metric or {} vertices",
            m.dim, m.vertex_count
        )));
    }
    Ok(entrance)
}

/// A private entrance graph (build plus logged promotions) in an unlinked temporary file,
/// for when the shared one cannot be opened.
fn private_entrance(
    files: &IndexFiles,
    mut graph: EntranceGraph,
) -> Result<SharedEntrance, IndexError> {
    let logged = files.state().get(Field::EntranceLogBytes) as u64;
    crate::update::promote::apply_log(
        &files.dir().join(names::ENTRANCE_LOG),
        0,
        logged,
        &mut graph,
    );
    let path = std::env::temp_dir().join(format!(
        "navis-entrance-{}-{:x}.shm",
        std::process::id(),
        rand::random::<u64>()
    ));
    let invalid = |e: EntranceError| IndexError::Invalid(format!("{}: {e}", files.dir().display()));
    SharedEntrance::create(&path, &graph, u64::MAX).map_err(invalid)?;
    let opened = SharedEntrance::open(&path).map_err(invalid);
    let _ = std::fs::remove_file(&path);
    opened
}

/// Convenience for tests and tools: the directory's files, named.
pub fn index_paths(dir: &Path) -> Vec<PathBuf> {
    crate::storage::names::ALL
        .iter()
        .map(|n| dir.join(n))
        .collect()
}
