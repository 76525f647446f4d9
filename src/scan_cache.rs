//! Ordered scans and the Aker result cache (`navis.result_cache = on`).
//!
//! At rescan the query is looked up. On a hit the scan returns the entry's rows in exact
//! distance order to the new query without reading the index; if the executor wants more
//! (a WHERE clause dropped some, a row was dead), it falls through to a real search that
//! skips the rows already returned and any row closer than the last one (as a strict-order
//! scan skips a row found after a farther one). On a miss the search keeps its first pass's
//! top-(k + Δ) reranked rows and admits them as a new entry once that pass is done.

use crate::guc;
use crate::result_cache::{self, PgCacheLocks};
use navis_engine::index::DiskReader;
use navis_engine::result_cache::{LookupParams, Partition};
use navis_engine::search::{prepare_query, SearchCursor};
use navis_engine::storage::HeapTid;
use navis_engine::Metric;
use pgrx::pg_sys;
use std::cell::Cell;
use std::collections::HashSet;

/// The rows of a hit, being returned.
pub struct ServedRows {
    rows: Vec<(HeapTid, f32)>,
    next: usize,
    returned: HashSet<HeapTid>,
    last: f32,
    /// `navis.iterative_scan = relaxed_order`: a closer row found later is returned late,
    /// not skipped.
    relaxed: bool,
    partition: Partition<'static>,
}

impl ServedRows {
    /// The next cached row, closest first.
    pub fn next_cached(&mut self) -> Option<(HeapTid, f32)> {
        let row = *self.rows.get(self.next)?;
        self.next += 1;
        self.returned.insert(row.0);
        self.last = row.1;
        Some(row)
    }

    /// The heap TIDs of the cached rows not returned yet, in the order they will be.
    pub fn upcoming(&self) -> impl ExactSizeIterator<Item = HeapTid> + '_ {
        self.rows[self.next..].iter().map(|r| r.0)
    }

    /// Rows returned from the cache so far.
    pub fn returned(&self) -> u64 {
        self.next as u64
    }

    pub fn count_fall_through(&self) {
        self.partition.count_fall_through();
    }

    /// Whether a row the fall-through search found may follow the cached rows: never one
    /// they returned; in strict order, none closer than the last of them.
    pub fn admits(&self, tid: HeapTid, distance: f32) -> bool {
        !self.returned.contains(&tid) && (self.relaxed || distance >= self.last)
    }
}

/// A missed lookup's right to admit the search's result.
pub struct Admission {
    partition: Partition<'static>,
    ticket: u32,
    generation: u64,
    k: usize,
    keep: usize,
}

impl Admission {
    /// Rows the search's first pass must keep for this admission.
    pub fn keep(&self) -> usize {
        self.keep
    }

    /// Admits the first pass's kept rows under the query as the search normalised it.
    pub fn admit(self, cursor: &SearchCursor<'_, DiskReader<'_>>) {
        let rows: Vec<(HeapTid, &[f32])> = cursor
            .first_pass_rows()
            .into_iter()
            .map(|(tid, v, _)| (tid, v))
            .collect();
        // A refusal (a VACUUM overlapped, another backend was first, no room) only means
        // this result is not cached; it is counted in the statistics.
        let _ = self.partition.admit(
            &PgCacheLocks,
            cursor.query(),
            self.generation,
            self.ticket,
            self.k,
            &rows,
        );
    }
}

pub enum Lookup {
    Hit(ServedRows),
    /// Not answered from the cache; `Some` when the search's result should be admitted.
    Miss(Option<Admission>),
}

fn warn_once_without_region() {
    thread_local! {
        static WARNED: Cell<bool> = const { Cell::new(false) };
    }
    if !WARNED.replace(true) {
        pgrx::warning!(
            "navis.result_cache is on but no result cache is allocated; set \
             navis.result_cache_size (and preload navis) and restart the server"
        );
    }
}

/// Looks the scan's query up in the cache, if this session uses it.
pub fn lookup(
    index: pg_sys::Relation,
    open: &crate::open::OpenIndex,
    metric: Metric,
    query: &[f32],
) -> Lookup {
    if !guc::RESULT_CACHE.get() || open.index.is_empty() {
        return Lookup::Miss(None);
    }
    let Some(cache) = result_cache::shared() else {
        warn_once_without_region();
        return Lookup::Miss(None);
    };
    let dim = open.index.dim();
    let Ok(prepared) = prepare_query(metric, dim, query) else {
        return Lookup::Miss(None); // the search reports the bad query
    };
    // SAFETY: an open relation's rd_node and rd_id.
    let oids = unsafe { ((*index).rd_node.dbNode.to_u32(), (*index).rd_id.to_u32()) };
    let tag = crate::open::relation_cache_tag(index, open.build_id);
    let Some(partition) = cache.claim(&PgCacheLocks, tag, dim, metric, oids) else {
        return Lookup::Miss(None);
    };
    let generation = result_cache::generation_of(index);
    let ticket = partition.vacuum_ticket();
    let fixed = guc::RESULT_CACHE_FIXED_THRESHOLD.get();
    let params = LookupParams {
        fixed_threshold: (fixed > 0.0).then_some(fixed as f32),
    };
    match partition.lookup(&PgCacheLocks, &prepared, generation, &params) {
        Some(hit) => Lookup::Hit(ServedRows {
            rows: hit.rows,
            next: 0,
            returned: HashSet::new(),
            last: f32::NEG_INFINITY,
            relaxed: guc::ITERATIVE_SCAN.get() == guc::IterativeScan::RelaxedOrder,
            partition,
        }),
        None => {
            let k = guc::RERANK_TOP_K.get().max(1) as usize;
            let keep = k + guc::RESULT_CACHE_RESERVE.get().max(0) as usize;
            Lookup::Miss(Some(Admission {
                partition,
                ticket,
                generation,
                k,
                keep: keep.min(navis_engine::result_cache::NRL_CAPACITY),
            }))
        }
    }
}
