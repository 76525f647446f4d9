//! Aker: an approximate result cache for ordered scans, in one shared region (RFC 0003).
//!
//! A past query's top-(k + Δ) rows are kept with the query vector. A new query equal to a
//! cached one (hash table) or within the nearest cached query's own threshold τ_q (query
//! filter graph) is answered from those rows, re-ranked by exact distance, without reading
//! the index. τ_q starts at minD/4 and adapts: × α_L on equality hits (capped at minD),
//! × α_T on approximate and alias hits. Deletes reach the cache eagerly through VACUUM,
//! inserts lazily through the insert log (`refresh.rs`).
//!
//! The region is split into equal partitions, each claimed by one index at a time (the
//! least recently used index gives its partition up when all are taken) and formatted for
//! that index's dimension (`layout.rs`). Everything is a fixed array of atomic words, so
//! the region may be PostgreSQL shared memory mapped by many processes or a heap buffer in
//! tests. Locking is the caller's, per partition, through [`PartitionLocks`]: lookups hold
//! it shared (the threshold update is a compare-and-swap), changes hold it exclusive, and
//! an approximate hit links its alias only if the exclusive lock is free at once.

mod body;
mod filter;
mod layout;
mod local;
mod refresh;
mod stats;
mod table;
mod words;

#[cfg(test)]
mod maintenance_tests;
#[cfg(test)]
mod tests;

pub use body::Refusal;
pub use layout::NRL_CAPACITY;
pub use local::{HeapRegion, LocalLocks};
pub use refresh::{InsertRefresh, RISK_THRESHOLD, SLOW_PATH_BATCH};
pub use stats::{PartitionStats, Stat};

use crate::storage::HeapTid;
use crate::Metric;
use body::Body;
use layout::*;
use std::sync::atomic::{AtomicU32, Ordering};
use words::Words;

/// τ_q × α_L on an equality hit.
pub const ALPHA_EQUALITY: f32 = 1.1;
/// τ_q × α_T on an approximate (or alias) hit.
pub const ALPHA_APPROXIMATE: f32 = 0.25;
/// Most partitions a region may have.
pub const MAX_PARTITIONS: usize = 64;

/// The per-partition locks, supplied by the caller (LWLocks in PostgreSQL). Each closure runs
/// with the lock held and releases it when it returns.
pub trait PartitionLocks {
    fn shared(&self, partition: usize, f: &mut dyn FnMut());
    fn exclusive(&self, partition: usize, f: &mut dyn FnMut());
    /// Runs `f` only if the exclusive lock is free right now; false if it was not.
    fn try_exclusive(&self, partition: usize, f: &mut dyn FnMut()) -> bool;
}

fn with<R>(run: impl FnOnce(&mut dyn FnMut()), f: impl FnOnce() -> R) -> R {
    let mut f = Some(f);
    let mut out = None;
    run(&mut || out = Some((f.take().expect("the lock runs its closure once"))()));
    out.expect("the lock ran its closure")
}

/// How a lookup answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HitKind {
    /// The same query vector was cached as a representative.
    Equality,
    /// A cached query lies within its threshold of this one.
    Approximate,
    /// The same query vector was cached as an alias of a representative.
    Alias,
}

/// A cache answer: the entry's rows in exact index-metric distance order to the query.
#[derive(Clone, Debug, PartialEq)]
pub struct Hit {
    pub kind: HitKind,
    pub rows: Vec<(HeapTid, f32)>,
}

/// How lookups decide.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LookupParams {
    /// `Some(τ)`: one global threshold (the paper's Proximity+ baseline), thresholds never
    /// adapt and no aliases are linked. `None`: Aker.
    pub fixed_threshold: Option<f32>,
}

/// The cache over one region.
pub struct ResultCache {
    base: *const u8,
    partitions: usize,
    body_words: usize,
}

// SAFETY: the region is only accessed through atomics, and lives (PostgreSQL shared memory
// or a test's leaked buffer) longer than any ResultCache that views it.
unsafe impl Send for ResultCache {}
unsafe impl Sync for ResultCache {}

fn header_bytes(partitions: usize) -> usize {
    let h = std::mem::size_of::<RegionHeader>().next_multiple_of(64);
    h + partitions * std::mem::size_of::<Slot>()
}

impl ResultCache {
    /// Bytes a region of `partitions` partitions takes out of `bytes` (the rest is rounded
    /// away); `None` when `bytes` cannot hold the partitions' slots.
    pub fn layout(bytes: usize, partitions: usize) -> Option<(usize, usize)> {
        let partitions = partitions.clamp(1, MAX_PARTITIONS);
        let body = bytes.checked_sub(header_bytes(partitions))? / partitions / 64 * 64;
        (body >= 64).then_some((partitions, body / 4))
    }

    /// Formats a region of `len` bytes at `base` with `partitions` partitions.
    ///
    /// # Safety
    /// `base` is 64-byte aligned, valid for `len` bytes for as long as any view of it lives,
    /// and nobody else uses it during the call.
    pub unsafe fn init_at(base: *mut u8, len: usize, partitions: usize) -> Option<ResultCache> {
        let (partitions, body_words) = Self::layout(len, partitions)?;
        // SAFETY: the caller gives us `len` exclusive bytes; zero is a valid value of every
        // atomic and lock in the region.
        unsafe { std::ptr::write_bytes(base, 0, header_bytes(partitions)) };
        let cache = ResultCache {
            base,
            partitions,
            body_words,
        };
        let h = cache.header();
        h.version.store(VERSION, Ordering::Relaxed);
        h.partitions.store(partitions as u32, Ordering::Relaxed);
        h.body_words.store(body_words as u64, Ordering::Relaxed);
        for p in 0..partitions {
            cache.body(p).set(H_DIM, 0);
        }
        h.magic.store(MAGIC, Ordering::Release);
        Some(cache)
    }

    /// Views a region formatted by [`ResultCache::init_at`].
    ///
    /// # Safety
    /// As for `init_at`, except that other processes may use the region concurrently.
    pub unsafe fn attach(base: *const u8) -> Option<ResultCache> {
        // SAFETY: the caller vouches for the header's memory.
        let h = unsafe { &*(base as *const RegionHeader) };
        if h.magic.load(Ordering::Acquire) != MAGIC || h.version.load(Ordering::Relaxed) != VERSION
        {
            return None;
        }
        Some(ResultCache {
            base,
            partitions: h.partitions.load(Ordering::Relaxed) as usize,
            body_words: h.body_words.load(Ordering::Relaxed) as usize,
        })
    }

    fn header(&self) -> &RegionHeader {
        // SAFETY: the region starts with its header (init_at / attach).
        unsafe { &*(self.base as *const RegionHeader) }
    }

    fn slot(&self, p: usize) -> &Slot {
        let at = std::mem::size_of::<RegionHeader>().next_multiple_of(64);
        // SAFETY: `partitions` slots follow the header inside the region.
        unsafe { &*(self.base.add(at) as *const Slot).add(p) }
    }

    fn body(&self, p: usize) -> Words<'_> {
        let at = header_bytes(self.partitions) + p * self.body_words * 4;
        // SAFETY: body `p` is `body_words` atomic words inside the region, 4-byte aligned.
        Words(unsafe {
            std::slice::from_raw_parts(self.base.add(at) as *const AtomicU32, self.body_words)
        })
    }

    pub fn partitions(&self) -> usize {
        self.partitions
    }

    pub fn partition_bytes(&self) -> usize {
        self.body_words * 4
    }

    fn tick(&self) -> u64 {
        self.header().clock.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The partition of the index tagged `tag`, if it holds one (inserts and VACUUM: an
    /// index nobody looked up has nothing cached to keep true).
    pub fn find(&self, tag: u64, metric: Metric) -> Option<Partition<'_>> {
        let tag = table::key(tag);
        let _dir = self.header().directory.lock();
        (0..self.partitions)
            .find(|&p| self.slot(p).tag.load(Ordering::Relaxed) == tag)
            .map(|p| Partition {
                cache: self,
                index: p,
                claim: self.slot(p).claim.load(Ordering::Relaxed),
                metric,
            })
    }

    /// The partition of the index tagged `tag`, claimed (and formatted for `dim`) if it has
    /// none: a free partition, or the least recently used index's.
    pub fn claim(
        &self,
        locks: &dyn PartitionLocks,
        tag: u64,
        dim: usize,
        metric: Metric,
        oids: (u32, u32),
    ) -> Option<Partition<'_>> {
        let key = table::key(tag);
        let (p, claim, fresh) = {
            let _dir = self.header().directory.lock();
            match (0..self.partitions).find(|&p| self.slot(p).tag.load(Ordering::Relaxed) == key) {
                Some(p) => (p, self.slot(p).claim.load(Ordering::Relaxed), false),
                None => {
                    // The same index under an older tag (REINDEX, TRUNCATE, a rebuild of a
                    // growing index): those entries are obsolete, so their partition is freed
                    // rather than left held until least-recent use pushes it out.
                    for p in 0..self.partitions {
                        let s = self.slot(p);
                        if s.tag.load(Ordering::Relaxed) != 0
                            && (
                                s.db_oid.load(Ordering::Relaxed),
                                s.rel_oid.load(Ordering::Relaxed),
                            ) == oids
                        {
                            s.release();
                        }
                    }
                    let p = (0..self.partitions)
                        .min_by_key(|&p| {
                            let s = self.slot(p);
                            (
                                s.tag.load(Ordering::Relaxed) != 0,
                                s.last_use.load(Ordering::Relaxed),
                            )
                        })
                        .expect("at least one partition");
                    let s = self.slot(p);
                    s.tag.store(key, Ordering::Relaxed);
                    let claim = s.claim.fetch_add(1, Ordering::Relaxed) + 1;
                    s.db_oid.store(oids.0, Ordering::Relaxed);
                    s.rel_oid.store(oids.1, Ordering::Relaxed);
                    s.stats.iter().for_each(|c| c.store(0, Ordering::Relaxed));
                    s.stats[Stat::Claims as usize].store(1, Ordering::Relaxed);
                    (p, claim, true)
                }
            }
        };
        self.slot(p).last_use.store(self.tick(), Ordering::Relaxed);
        let part = Partition {
            cache: self,
            index: p,
            claim,
            metric,
        };
        let formatted =
            |words: Words| Body::open(words, claim, metric).is_some_and(|b| b.g.dim == dim);
        if !fresh && formatted(self.body(p)) {
            return Some(part);
        }
        let ok = with(
            |f| locks.exclusive(p, f),
            || {
                let words = self.body(p);
                formatted(words) || Body::format(words, claim, dim, metric).is_some()
            },
        );
        ok.then_some(part)
    }

    /// Forgets the index tagged `tag` (DROP INDEX): its partition becomes free.
    pub fn purge(&self, tag: u64) {
        let key = table::key(tag);
        let _dir = self.header().directory.lock();
        for p in 0..self.partitions {
            let s = self.slot(p);
            if s.tag.load(Ordering::Relaxed) == key {
                s.release();
            }
        }
    }

    /// Forgets every index (`navis_result_cache_reset()`).
    pub fn purge_all(&self) {
        let _dir = self.header().directory.lock();
        for p in 0..self.partitions {
            self.slot(p).release();
        }
    }

    /// Gauges and counters of every claimed partition.
    pub fn stats(&self, locks: &dyn PartitionLocks) -> Vec<PartitionStats> {
        let mut out = Vec::new();
        for p in 0..self.partitions {
            let s = self.slot(p);
            if s.tag.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let claim = s.claim.load(Ordering::Relaxed);
            let mut st = PartitionStats {
                partition: p,
                db_oid: s.db_oid.load(Ordering::Relaxed),
                rel_oid: s.rel_oid.load(Ordering::Relaxed),
                counters: Stat::ALL
                    .iter()
                    .map(|&c| (c, s.stats[c as usize].load(Ordering::Relaxed)))
                    .collect(),
                ..Default::default()
            };
            with(
                |f| locks.shared(p, f),
                || {
                    let Some(b) = Body::open(self.body(p), claim, Metric::L2) else {
                        return;
                    };
                    st.dim = b.g.dim;
                    st.representatives = b.w.get(H_REPRESENTATIVES);
                    st.aliases = b.w.get(H_ALIASES);
                    st.objects = b.w.get(H_OBJECTS_USED);
                    st.object_capacity = b.g.objects;
                    st.entry_capacity = b.g.entries;
                    st.log_capacity = b.g.log;
                    st.log_length = b.w.u64(H_LOG_TAIL) - b.w.u64(H_LOG_HEAD);
                    let entries = (b.g.entries - b.free_entries()) * b.g.bytes_per_entry();
                    st.bytes = entries + st.objects as usize * b.g.bytes_per_object();
                    st.thresholds = (0..b.g.entries as u32)
                        .filter(|&e| b.state(e) == STATE_REPRESENTATIVE)
                        .map(|e| b.w.f32(b.e(e, E_TAU)))
                        .collect();
                },
            );
            st.thresholds.sort_by(f32::total_cmp);
            out.push(st);
        }
        out
    }
}

/// A hash of a query vector's bits (the equality path).
pub fn query_hash(query: &[f32]) -> u64 {
    let mut h = rustc_hash::FxHasher::default();
    use std::hash::Hasher;
    for x in query {
        h.write_u32(x.to_bits());
    }
    h.write_usize(query.len());
    h.finish()
}

/// One index's partition as claimed at some moment; every operation checks, under the lock,
/// that the claim still holds (otherwise it is a miss or does nothing).
pub struct Partition<'a> {
    cache: &'a ResultCache,
    index: usize,
    claim: u64,
    metric: Metric,
}

impl Partition<'_> {
    fn count(&self, stat: Stat, n: u64) {
        if n > 0 {
            self.cache.slot(self.index).stats[stat as usize].fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Counts a scan that wanted more rows than its hit held (it went on with a search).
    pub fn count_fall_through(&self) {
        self.count(Stat::FallThroughs, 1);
    }

    fn body(&self) -> Option<Body<'_>> {
        // Purged or claimed by another index since this claim: nothing here is ours.
        if self.cache.slot(self.index).claim.load(Ordering::Relaxed) != self.claim {
            return None;
        }
        Body::open(self.cache.body(self.index), self.claim, self.metric)
    }

    fn shared<R>(&self, locks: &dyn PartitionLocks, f: impl FnOnce() -> R) -> R {
        with(|g| locks.shared(self.index, g), f)
    }

    fn exclusive<R>(&self, locks: &dyn PartitionLocks, f: impl FnOnce() -> R) -> R {
        with(|g| locks.exclusive(self.index, g), f)
    }

    /// What a scan records before its search, to be handed to [`Partition::admit`]: entries
    /// are admitted only if no VACUUM of the index started or ran in between.
    pub fn vacuum_ticket(&self) -> u32 {
        self.cache.body(self.index).get(H_VACUUM)
    }

    /// Looks `query` up (as the index searches it: unit length for cosine). `generation` is
    /// the index's redo generation (entries of another generation never answer).
    pub fn lookup(
        &self,
        locks: &dyn PartitionLocks,
        query: &[f32],
        generation: u64,
        params: &LookupParams,
    ) -> Option<Hit> {
        self.cache
            .slot(self.index)
            .last_use
            .store(self.cache.tick(), Ordering::Relaxed);
        let hash = query_hash(query);
        let mut link_alias = None;
        let hit = self.shared(locks, || {
            let b = self.body()?;
            if b.g.dim != query.len() {
                return None;
            }
            let (rep, kind) = match b.find_query(hash, query) {
                Some(e) => {
                    let rep = b.representative_of(e);
                    let kind = if rep == e {
                        HitKind::Equality
                    } else {
                        HitKind::Alias
                    };
                    (rep, kind)
                }
                None => {
                    let (rep, d) = b.nearest_representative(query)?;
                    let tau = params
                        .fixed_threshold
                        .unwrap_or_else(|| b.w.f32(b.e(rep, E_TAU)));
                    if d >= tau {
                        return None;
                    }
                    (rep, HitKind::Approximate)
                }
            };
            if !b.valid(rep, generation) {
                if b.state(rep) == STATE_REPRESENTATIVE
                    && b.w.u64(b.e(rep, E_GENERATION)) != generation
                {
                    self.count(Stat::GenerationMisses, 1);
                }
                return None;
            }
            if params.fixed_threshold.is_none() {
                let min_d = b.w.f32(b.e(rep, E_MIN_D));
                b.w.update_f32(b.e(rep, E_TAU), |tau| match kind {
                    HitKind::Equality => (tau * ALPHA_EQUALITY).min(min_d),
                    _ => tau * ALPHA_APPROXIMATE,
                });
                if kind == HitKind::Approximate {
                    link_alias = Some((rep, b.w.u64(b.e(rep, E_FIFO))));
                }
            }
            let mut rows: Vec<(HeapTid, f32)> = b
                .rows(rep)
                .map(|o| {
                    (
                        b.object_tid(o),
                        self.metric.search_distance(query, b.object(o)),
                    )
                })
                .collect();
            rows.sort_by(|a, b| a.1.total_cmp(&b.1));
            Some(Hit { kind, rows })
        });
        match &hit {
            None => self.count(Stat::Misses, 1),
            Some(h) => self.count(
                match h.kind {
                    HitKind::Equality => Stat::HitsEquality,
                    HitKind::Approximate => Stat::HitsApproximate,
                    HitKind::Alias => Stat::HitsAlias,
                },
                1,
            ),
        }
        if let Some((rep, fifo)) = link_alias {
            // Entry linking: a repeat of this query then hits through the hash table. Only
            // if the exclusive lock is free now: a hit never waits.
            let mut linked = false;
            locks.try_exclusive(self.index, &mut || {
                if let Some(b) = self.body() {
                    if b.state(rep) == STATE_REPRESENTATIVE && b.w.u64(b.e(rep, E_FIFO)) == fifo {
                        linked = b.add_alias(rep, query, hash);
                    }
                }
            });
            self.count(Stat::AliasesLinked, linked as u64);
        }
        hit
    }

    /// Admits the result of a missed lookup: `rows` (heap TID and vector as the index stores
    /// it), closest first, of which the first `k` must stay valid.
    pub fn admit(
        &self,
        locks: &dyn PartitionLocks,
        query: &[f32],
        generation: u64,
        vacuum_ticket: u32,
        k: usize,
        rows: &[(HeapTid, &[f32])],
    ) -> Result<(), Refusal> {
        let mut evictions = 0;
        let out = self.exclusive(locks, || {
            let b = self.body().ok_or(Refusal::NoSpace)?;
            let vacuum = b.w.get(H_VACUUM);
            if vacuum % 2 == 1 || vacuum != vacuum_ticket {
                return Err(Refusal::Vacuum);
            }
            b.admit(
                query,
                query_hash(query),
                generation,
                k,
                rows,
                &mut evictions,
            )
            .map(|_| ())
        });
        self.count(Stat::Evictions, evictions);
        self.count(
            match out {
                Ok(()) => Stat::Admitted,
                Err(Refusal::Duplicate) => Stat::RefusedDuplicate,
                Err(Refusal::Vacuum) => Stat::RefusedVacuum,
                Err(Refusal::NoSpace | Refusal::NoRows) => Stat::RefusedNoSpace,
            },
            1,
        );
        out
    }

    /// An inserted row (`vector` as the index stores it): logged, fast path, and a slow-path
    /// step when the risk model asks for one.
    pub fn record_insert(
        &self,
        locks: &dyn PartitionLocks,
        tid: HeapTid,
        vector: &[f32],
    ) -> InsertRefresh {
        let mut evictions = 0;
        let out = self.exclusive(locks, || match self.body() {
            Some(b) if b.g.dim == vector.len() => b.record_insert(tid, vector, &mut evictions),
            _ => InsertRefresh::default(),
        });
        self.count(Stat::Evictions, evictions);
        self.count(Stat::LogAppends, 1);
        self.count(Stat::RefreshFast, out.fast as u64);
        self.count(Stat::RefreshSlow, out.slow as u64);
        self.count(Stat::RefreshSlowRows, out.slow_rows as u64);
        self.count(Stat::InvalidatedByLogWrap, out.log_wrapped as u64);
        out
    }

    /// VACUUM starts: no entry whose search overlaps it will be admitted, and every cached
    /// row `is_dead` names is removed now (before the heap may reuse its TID).
    pub fn begin_vacuum(
        &self,
        locks: &dyn PartitionLocks,
        is_dead: &mut dyn FnMut(HeapTid) -> bool,
    ) {
        let mut evictions = 0;
        let (removed, invalidated) = self.exclusive(locks, || {
            let Some(b) = self.body() else {
                return (0, 0);
            };
            let v = b.w.get(H_VACUUM);
            b.w.set(H_VACUUM, if v % 2 == 0 { v + 1 } else { v + 2 });
            b.remove_dead(is_dead, &mut evictions)
        });
        self.count(Stat::RowsRemovedByVacuum, removed);
        self.count(Stat::InvalidatedByDelete, invalidated);
        self.count(Stat::Evictions, evictions);
    }

    /// VACUUM of the index is done: admissions may resume (for searches that start now).
    pub fn end_vacuum(&self, locks: &dyn PartitionLocks) {
        self.exclusive(locks, || {
            if let Some(b) = self.body() {
                let v = b.w.get(H_VACUUM);
                if v % 2 == 1 {
                    b.w.set(H_VACUUM, v + 1);
                }
            }
        });
    }
}
