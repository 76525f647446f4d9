//! The entrance graph in shared memory: one copy per index that every backend maps
//! (`entrance.shm` in the side directory, `MAP_SHARED`), read by all searches and inserts
//! and changed in place by promotions, with no reader ever waiting.
//!
//! PostgreSQL's main shared memory is sized once at server start, and an index's entrance
//! graph grows with the index, so the graph lives in a file mapping of its own — the same
//! mechanism as PostgreSQL's own `dynamic_shared_memory_type = mmap`. The file is volatile:
//! the first backend to open the index after a server start or crash-restart rebuilds it from
//! the durable files (`entrance.bin` from the build plus the promotions in `entrance.log`),
//! under the allocator lock (`update::recover`).
//!
//! ```text
//! header (4096 bytes, u32 words): 0-1 magic "NAVISESH" | 2 version | 3 metric code | 4 dim
//!   5 max_degree | 6 record words | 7 zero | 8-9 epoch u64 | 10-11 ratio f64 | 12 alpha f32
//!   13 count (published members) | 14 start (local id) | 15 zero
//!   16 search list of the search CASR calibration | 17-399 its histogram
//!   400 insert list of the insert CASR calibration | 401-783 its histogram
//! record i at 4096 + i * record bytes, u32 words:
//!   0 seq (even when the list is stable) | 1 list length | 2 global vertex id | 3 zero
//!   4.. max_degree neighbour local ids | then dim f32 vector
//! ```
//!
//! Concurrency: the only writer is a promotion under the index's allocator lock. A new member's
//! record is written completely before `count` publishes it (release), and its vector never
//! changes afterwards. Neighbour lists are replaced under a per-record sequence lock: readers
//! retry a list they saw change. Readers skip neighbour ids at or beyond the `count` they read.
//!
//! CASR calibration is pooled here too, so that a backend does not spend its first
//! `navis.casr_warmup` searches or inserts reranking every candidate when others have already
//! calibrated the same index (PostgreSQL backends are often short-lived). Each histogram
//! counts warm-up reranks by their minimal safe window (bucket `w`, windows above the last
//! bucket in the last); every backend adds its warm-up samples with an atomic increment and
//! reads the window at its own percentile once the index-wide count reaches its warm-up. The
//! window grows with the search list, so a histogram serves only the list it was first
//! recorded with (word 0 of each histogram); other lists calibrate per backend. Like
//! the rest of the file it is volatile: after a restart the first warm-up reranks fill it again.

use super::{EntranceError, EntranceGraph, EntranceView, EntrySearch, PromotionPlan, NEW_VERTEX};
use crate::cache::Caller;
use crate::distance::Metric;
use crate::VertexId;
use memmap2::{MmapOptions, MmapRaw};
use rustc_hash::FxHashMap;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::sync::Mutex;

const MAGIC: [u8; 8] = *b"NAVISESH";
const VERSION: u32 = 1;
const HEADER_BYTES: usize = 4096;
const W_COUNT: usize = 13;
const W_START: usize = 14;
/// First word of the search calibration histogram; the insert histogram follows it.
const W_CALIBRATION: usize = 16;
/// Buckets per calibration histogram: windows 1..=382 exactly, 383 for anything larger.
pub const CALIBRATION_BUCKETS: usize = 384;
const _: () = assert!((W_CALIBRATION + 2 * CALIBRATION_BUCKETS) * 4 <= HEADER_BYTES);
/// Words before the list in a record.
const R_LIST: usize = 4;
/// Address space reserved per mapping; the file grows inside it.
const RESERVATION_BYTES: usize = 8 << 30;
/// The file grows by this many records at a time.
const GROWTH_RECORDS: usize = 1024;

/// One index's entrance graph, mapped. `Sync`: every field is read with atomics or is
/// immutable once published.
pub struct SharedEntrance {
    path: PathBuf,
    file: File,
    map: MmapRaw,
    metric: Metric,
    dim: usize,
    max_degree: usize,
    alpha: f32,
    ratio: f64,
    epoch: u64,
    record_words: usize,
    capacity: usize,
    /// This process's global -> local id map, caught up from the records on demand.
    local: Mutex<(u32, FxHashMap<VertexId, u32>)>,
}

impl std::fmt::Debug for SharedEntrance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedEntrance")
            .field("path", &self.path)
            .field("len", &self.len())
            .field("epoch", &self.epoch)
            .finish()
    }
}

fn record_words(dim: usize, max_degree: usize) -> usize {
    R_LIST + max_degree + dim
}

fn io_err(path: &Path, what: &str, e: std::io::Error) -> EntranceError {
    EntranceError::Invalid(format!("{what} {}: {e}", path.display()))
}

impl SharedEntrance {
    /// Writes `graph` as a fresh shared file at `path` (via a temporary file and a rename, so
    /// that a process still mapping an older file keeps a consistent view) stamped `epoch`.
    pub fn create(path: &Path, graph: &EntranceGraph, epoch: u64) -> Result<(), EntranceError> {
        let (dim, r) = (graph.dim, graph.max_degree);
        let words = record_words(dim, r);
        let mut header = vec![0u8; HEADER_BYTES];
        let mut put = |word: usize, value: u32| {
            header[word * 4..word * 4 + 4].copy_from_slice(&value.to_le_bytes())
        };
        put(2, VERSION);
        put(3, graph.metric.code());
        put(4, dim as u32);
        put(5, r as u32);
        put(6, words as u32);
        put(8, epoch as u32);
        put(9, (epoch >> 32) as u32);
        let ratio = graph.ratio.to_bits();
        put(10, ratio as u32);
        put(11, (ratio >> 32) as u32);
        put(12, graph.alpha.to_bits());
        put(W_COUNT, graph.ids.len() as u32);
        put(W_START, graph.start);
        header[..8].copy_from_slice(&MAGIC);
        let tmp = path.with_extension(format!("shm.{}.tmp", std::process::id()));
        let mut out =
            std::io::BufWriter::new(File::create(&tmp).map_err(|e| io_err(&tmp, "create", e))?);
        let mut body = || -> std::io::Result<()> {
            out.write_all(&header)?;
            let mut record = vec![0u32; words];
            for (l, &global) in graph.ids.iter().enumerate() {
                record.fill(0);
                let list = &graph.adjacency[l];
                record[1] = list.len() as u32;
                record[2] = global;
                record[R_LIST..R_LIST + list.len()].copy_from_slice(list);
                for (slot, x) in record[R_LIST + r..]
                    .iter_mut()
                    .zip(graph.local_vector(l as u32))
                {
                    *slot = x.to_bits();
                }
                out.write_all(bytemuck::cast_slice(&record))?;
            }
            out.flush()
        };
        body().map_err(|e| io_err(&tmp, "write", e))?;
        drop(out);
        std::fs::rename(&tmp, path).map_err(|e| io_err(path, "rename", e))
    }

    /// Maps the shared file at `path`.
    pub fn open(path: &Path) -> Result<SharedEntrance, EntranceError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| io_err(path, "open", e))?;
        let mut header = vec![0u8; 64];
        file.read_exact_at(&mut header, 0)
            .map_err(|e| io_err(path, "read", e))?;
        let word = |i: usize| u32::from_le_bytes(header[i * 4..i * 4 + 4].try_into().unwrap());
        let bad = |m: String| EntranceError::Format(format!("{}: {m}", path.display()));
        if header[..8] != MAGIC || word(2) != VERSION {
            return Err(bad("not a shared entrance graph of this version".into()));
        }
        let metric = Metric::from_code(word(3)).ok_or_else(|| bad("metric".into()))?;
        let (dim, max_degree, words) = (word(4) as usize, word(5) as usize, word(6) as usize);
        if dim == 0
            || dim > crate::MAX_DIM
            || max_degree == 0
            || max_degree > crate::graph::vamana::MAX_DEGREE
            || words != record_words(dim, max_degree)
        {
            return Err(bad(format!(
                "dim {dim}, degree {max_degree}, record words {words}"
            )));
        }
        let epoch = word(8) as u64 | (word(9) as u64) << 32;
        let ratio = f64::from_bits(word(10) as u64 | (word(11) as u64) << 32);
        let alpha = f32::from_bits(word(12));
        let capacity = (RESERVATION_BYTES - HEADER_BYTES) / (words * 4);
        let len = file.metadata().map_err(|e| io_err(path, "stat", e))?.len() as usize;
        let count = word(W_COUNT) as usize;
        if count > capacity || len < HEADER_BYTES + count * words * 4 {
            return Err(bad(format!("{count} members do not fit {len} bytes")));
        }
        // MAP_SHARED over the whole reservation; only bytes inside the file are touched
        // (records below `count`, and records the writer extended the file for).
        let map = MmapOptions::new()
            .len(RESERVATION_BYTES)
            .map_raw(&file)
            .map_err(|e| io_err(path, "mmap", e))?;
        Ok(SharedEntrance {
            path: path.to_path_buf(),
            file,
            map,
            metric,
            dim,
            max_degree,
            alpha,
            ratio,
            epoch,
            record_words: words,
            capacity,
            local: Mutex::new((0, FxHashMap::default())),
        })
    }

    /// Published members.
    pub fn len(&self) -> usize {
        self.word(W_COUNT).load(Ordering::Acquire) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The server lifetime that built this file.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn ratio(&self) -> f64 {
        self.ratio
    }

    fn histogram_word(caller: Caller, bucket: usize) -> usize {
        let first = match caller {
            Caller::Search => W_CALIBRATION,
            Caller::Insert => W_CALIBRATION + CALIBRATION_BUCKETS,
        };
        first + bucket.min(CALIBRATION_BUCKETS - 1)
    }

    /// Adds one warm-up rerank of `caller`'s path with search list `list`, whose minimal safe
    /// window was `needed`, to the index-wide calibration sample. The window depends on the
    /// list, so the sample belongs to the first list that records into it (kept in bucket 0,
    /// which no window uses); for any other list nothing is recorded and `false` returned.
    pub fn record_calibration(&self, caller: Caller, list: usize, needed: usize) -> bool {
        let list = list.clamp(1, u32::MAX as usize) as u32;
        let owner = self.word(Self::histogram_word(caller, 0));
        match owner.compare_exchange(0, list, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {}
            Err(current) if current == list => {}
            Err(_) => return false,
        }
        self.word(Self::histogram_word(caller, needed.max(1)))
            .fetch_add(1, Ordering::Relaxed);
        true
    }

    /// For `caller`'s path with search list `list`: `None` when the index-wide sample belongs
    /// to another list; else its warm-up samples and, once there are at least `warmup` of
    /// them, the window at `percentile` (the nearest-rank percentile, as
    /// [`crate::casr::percentile`] computes it over the same samples).
    pub fn calibration(
        &self,
        caller: Caller,
        list: usize,
        warmup: usize,
        percentile: f64,
    ) -> Option<(u64, Option<usize>)> {
        let owner = self
            .word(Self::histogram_word(caller, 0))
            .load(Ordering::Acquire) as usize;
        if owner == 0 {
            return Some((0, None));
        }
        if owner != list {
            return None;
        }
        // One snapshot of the counts (others may be adding), on the stack: this runs for every
        // search while its list is calibrating.
        let mut counts = [0u32; CALIBRATION_BUCKETS];
        for (b, count) in counts.iter_mut().enumerate().skip(1) {
            *count = self
                .word(Self::histogram_word(caller, b))
                .load(Ordering::Relaxed);
        }
        let total: u64 = counts.iter().map(|&c| c as u64).sum();
        if total == 0 || total < warmup.max(1) as u64 {
            return Some((total, None));
        }
        let rank = ((percentile * total as f64 / 100.0).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (bucket, &count) in counts.iter().enumerate().skip(1) {
            seen += count as u64;
            if seen >= rank {
                return Some((total, Some(bucket)));
            }
        }
        Some((total, Some(CALIBRATION_BUCKETS - 1)))
    }

    fn word(&self, index: usize) -> &AtomicU32 {
        debug_assert!(index * 4 + 4 <= RESERVATION_BYTES);
        // SAFETY: `index` lies inside the reservation and, for every index used, inside the
        // file (header, records below count, or records the writer extended the file for);
        // the map is 4096-aligned, so u32 words are aligned; AtomicU32 has no invalid values.
        unsafe { &*(self.map.as_ptr().add(index * 4) as *const AtomicU32) }
    }

    fn record_word(&self, local: u32, word: usize) -> &AtomicU32 {
        self.word(HEADER_BYTES / 4 + local as usize * self.record_words + word)
    }

    /// Global ids of all published members, in local-id order.
    pub fn ids(&self) -> Vec<VertexId> {
        (0..self.len() as u32).map(|l| self.global_id(l)).collect()
    }

    /// Global member `v`'s full vector.
    pub fn vector(&self, v: VertexId) -> Option<&[f32]> {
        self.local_id(v).map(|l| self.local_vector(l))
    }

    pub fn contains(&self, v: VertexId) -> bool {
        self.local_id(v).is_some()
    }

    /// Global neighbours of global member `v`.
    pub fn neighbors(&self, v: VertexId) -> Option<Vec<VertexId>> {
        let l = self.local_id(v)?;
        let mut list = Vec::new();
        self.local_list(l, &mut list);
        let n = self.len() as u32;
        Some(
            list.into_iter()
                .filter(|&u| u < n)
                .map(|u| self.global_id(u))
                .collect(),
        )
    }

    /// Entry points (see [`super::search_view`]).
    pub fn search_live_counted(
        &self,
        query: &[f32],
        list: usize,
        is_live: impl Fn(VertexId) -> bool,
    ) -> Result<(EntrySearch, usize), EntranceError> {
        super::search_view(self, query, list, is_live)
    }

    /// Installs a plan made by [`super::plan_view`] on this graph. The caller holds the
    /// index's allocator lock (the only writer) and made the plan under it.
    pub fn apply(&self, plan: &PromotionPlan) -> Result<(), EntranceError> {
        super::check_new_vertex(self, plan.vertex, &plan.vector)?;
        let n = self.len() as u32;
        let in_range = |l: &u32| *l < n || *l == NEW_VERTEX;
        if !plan.neighbors.iter().all(|l| *l < n)
            || !plan.updates.iter().all(|(p, list)| {
                *p < n && list.len() <= self.max_degree && list.iter().all(in_range)
            })
            || plan.neighbors.len() > self.max_degree
        {
            return Err(EntranceError::Invalid(
                "promotion plan was made for another graph".into(),
            ));
        }
        if n as usize + 1 > self.capacity {
            return Err(EntranceError::Invalid(
                "the shared entrance graph is full".into(),
            ));
        }
        self.ensure_records(n as usize + 1)?;
        // The new record is beyond `count`: nobody reads it until it is published.
        let r = self.max_degree;
        self.record_word(n, 0).store(0, Ordering::Relaxed);
        self.record_word(n, 1)
            .store(plan.neighbors.len() as u32, Ordering::Relaxed);
        self.record_word(n, 2).store(plan.vertex, Ordering::Relaxed);
        for (i, &l) in plan.neighbors.iter().enumerate() {
            self.record_word(n, R_LIST + i).store(l, Ordering::Relaxed);
        }
        for (i, x) in plan.vector.iter().enumerate() {
            self.record_word(n, R_LIST + r + i)
                .store(x.to_bits(), Ordering::Relaxed);
        }
        if n == 0 {
            self.word(W_START).store(0, Ordering::Relaxed);
        }
        self.word(W_COUNT).store(n + 1, Ordering::Release);
        for (p, list) in &plan.updates {
            let seq = self.record_word(*p, 0);
            let s = seq.load(Ordering::Relaxed);
            seq.store(s.wrapping_add(1), Ordering::Relaxed);
            fence(Ordering::Release);
            for (i, &l) in list.iter().enumerate() {
                let l = if l == NEW_VERTEX { n } else { l };
                self.record_word(*p, R_LIST + i).store(l, Ordering::Relaxed);
            }
            self.record_word(*p, 1)
                .store(list.len() as u32, Ordering::Relaxed);
            seq.store(s.wrapping_add(2), Ordering::Release);
        }
        let mut local = self.local.lock().expect("entrance map lock");
        self.catch_up(&mut local);
        Ok(())
    }

    /// Makes the file hold at least `records` records (writer only).
    fn ensure_records(&self, records: usize) -> Result<(), EntranceError> {
        let needed = (HEADER_BYTES + records * self.record_words * 4) as u64;
        let len = self
            .file
            .metadata()
            .map_err(|e| io_err(&self.path, "stat", e))?
            .len();
        if len >= needed {
            return Ok(());
        }
        let target =
            HEADER_BYTES + (records + GROWTH_RECORDS).min(self.capacity) * self.record_words * 4;
        self.file
            .set_len(target as u64)
            .map_err(|e| io_err(&self.path, "extend", e))
    }

    fn catch_up(&self, local: &mut (u32, FxHashMap<VertexId, u32>)) {
        let n = self.len() as u32;
        for l in local.0..n {
            local.1.insert(self.global_id(l), l);
        }
        local.0 = local.0.max(n);
    }
}

impl EntranceView for SharedEntrance {
    fn metric(&self) -> Metric {
        self.metric
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn max_degree(&self) -> usize {
        self.max_degree
    }
    fn alpha(&self) -> f32 {
        self.alpha
    }
    fn len(&self) -> usize {
        SharedEntrance::len(self)
    }
    fn start(&self) -> u32 {
        self.word(W_START).load(Ordering::Relaxed)
    }
    fn global_id(&self, local: u32) -> VertexId {
        self.record_word(local, 2).load(Ordering::Relaxed)
    }
    fn local_id(&self, global: VertexId) -> Option<u32> {
        let mut local = self.local.lock().expect("entrance map lock");
        if let Some(&l) = local.1.get(&global) {
            return Some(l);
        }
        self.catch_up(&mut local);
        local.1.get(&global).copied()
    }
    fn local_vector(&self, local: u32) -> &[f32] {
        let at = HEADER_BYTES + (local as usize * self.record_words + R_LIST + self.max_degree) * 4;
        // SAFETY: `local` is a published member (callers take ids below `len()`), whose
        // vector lies inside the file and was written before `count` published it and never
        // changes afterwards; f32 has no invalid bit patterns and the address is 4-aligned.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(at) as *const f32, self.dim) }
    }
    fn local_list(&self, local: u32, out: &mut Vec<u32>) {
        let at = out.len();
        let seq = self.record_word(local, 0);
        loop {
            let before = seq.load(Ordering::Acquire);
            if before % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let len =
                (self.record_word(local, 1).load(Ordering::Relaxed) as usize).min(self.max_degree);
            out.extend(
                (0..len).map(|i| self.record_word(local, R_LIST + i).load(Ordering::Relaxed)),
            );
            fence(Ordering::Acquire);
            if seq.load(Ordering::Relaxed) == before {
                return;
            }
            out.truncate(at);
        }
    }
}

#[cfg(test)]
mod tests;
