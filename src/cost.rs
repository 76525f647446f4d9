//! The planner's cost of a navis index scan (`amcostestimate`).
//!
//! A scan has two ways to produce rows, and the engine takes the cheaper (`engine/src/search`):
//!
//! - the **graph**: a first pass reads about one edge page per search-list entry
//!   (`navis.search_list` = L, at most the index's size) and ranks PQ distances; every further
//!   row costs about one more random read (the edge page of a vertex the next graph pass
//!   expands, or the vector it reranks);
//! - an **exhaustive round**: one sequential read of every vector, an exact distance each.
//!
//! So the startup cost is the first pass or, on a small or low-dimensional index, the whole
//! sequential read, whichever is cheaper; and the cost of all rows grows with the index
//! (`tuples`) up to the sequential read. The planner itself then adds the heap fetches of
//! every row the scan returns (`cost_index`, with selectivity 1 and no correlation) and, for
//! `LIMIT k` under a filter that keeps a fraction `s` of the rows, charges `k / s` rows of the
//! run: a selective filter makes the index expensive, so the planner prefers another index
//! or a sequential scan with a sort, while a partial index whose predicate matches the filter
//! is small and cheap. Paths without an ORDER BY the index serves are disabled.

use crate::guc;
use pgrx::pg_sys;
use pgrx::prelude::*;

/// Bytes of a vector slot beside its floats: heap TID and owner stamp.
const SLOT_OVERHEAD: f64 = 12.0;
/// PQ distances per edge page read in the first pass (a list of neighbours, each looked up
/// in the search's distance table).
const DISTANCES_PER_READ: f64 = 32.0;

/// The numbers a scan's cost depends on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScanShape {
    /// Rows in the index.
    pub tuples: f64,
    /// Vector dimensions (0 when unknown: the vector file's size is then underestimated).
    pub dim: f64,
    /// The search list L.
    pub list: f64,
}

/// PostgreSQL's cost settings that matter here.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostUnits {
    pub random_page: f64,
    pub seq_page: f64,
    pub operator: f64,
    pub index_tuple: f64,
}

/// (startup cost, total cost, index pages read at startup) of a scan that returns every row.
pub fn scan_cost(shape: ScanShape, c: CostUnits) -> (f64, f64, f64) {
    let tuples = shape.tuples.max(1.0);
    let vector_pages = (tuples * (4.0 * shape.dim + SLOT_OVERHEAD) / pg_sys::BLCKSZ as f64).ceil();
    // One exact distance costs about one operator per 8 dimensions with the SIMD kernels.
    let distance = c.operator * (1.0 + shape.dim / 8.0);
    let exhaustive = vector_pages * c.seq_page + tuples * (distance + c.index_tuple);
    let reads = shape.list.max(1.0).min(tuples);
    let first_pass = reads * (c.random_page + DISTANCES_PER_READ * c.operator);
    if exhaustive <= first_pass {
        return (exhaustive, exhaustive, vector_pages);
    }
    let graph = tuples * (c.random_page + c.index_tuple);
    (first_pass, first_pass + graph.min(exhaustive), reads)
}

#[pg_guard]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C-unwind" fn amcostestimate(
    _root: *mut pg_sys::PlannerInfo,
    path: *mut pg_sys::IndexPath,
    _loop_count: f64,
    startup: *mut pg_sys::Cost,
    total: *mut pg_sys::Cost,
    selectivity: *mut pg_sys::Selectivity,
    correlation: *mut f64,
    pages: *mut f64,
) {
    const DISABLE_COST: f64 = 1.0e10;
    // SAFETY: the planner passes valid pointers for every output and a valid path whose
    // index it has opened and locked (get_relation_info), so opening it with NoLock is safe.
    unsafe {
        *selectivity = 1.0;
        *correlation = 0.0;
        if (*path).indexorderbys.is_null() {
            *startup = DISABLE_COST;
            *total = DISABLE_COST;
            *pages = 1.0;
            return;
        }
        let info = (*path).indexinfo;
        let index = pg_sys::index_open((*info).indexoid, pg_sys::NoLock as i32);
        let dim = crate::open::read_meta(index).map_or(0.0, |m| m.dim as f64);
        pg_sys::index_close(index, pg_sys::NoLock as i32);
        let shape = ScanShape {
            tuples: (*info).tuples,
            dim,
            list: guc::SEARCH_LIST.get() as f64,
        };
        let units = CostUnits {
            random_page: pg_sys::random_page_cost,
            seq_page: pg_sys::seq_page_cost,
            operator: pg_sys::cpu_operator_cost,
            index_tuple: pg_sys::cpu_index_tuple_cost,
        };
        (*startup, *total, *pages) = scan_cost(shape, units);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNITS: CostUnits = CostUnits {
        random_page: 4.0,
        seq_page: 1.0,
        operator: 0.0025,
        index_tuple: 0.005,
    };

    fn shape(tuples: f64, dim: f64) -> ScanShape {
        ScanShape {
            tuples,
            dim,
            list: 40.0,
        }
    }

    #[test]
    fn small_or_low_dimensional_indexes_cost_one_sequential_read() {
        let (startup, total, _) = scan_cost(shape(2000.0, 16.0), UNITS);
        assert_eq!(startup, total);
        assert!(startup < 40.0 * UNITS.random_page);
    }

    #[test]
    fn large_indexes_start_with_the_first_pass_and_grow_with_the_table() {
        let (s1, t1, pages) = scan_cost(shape(100_000.0, 784.0), UNITS);
        let (s2, t2, _) = scan_cost(shape(1_000_000.0, 784.0), UNITS);
        assert_eq!(pages, 40.0);
        assert_eq!(s1, s2, "the first pass does not depend on the table");
        assert!(t2 > 5.0 * t1, "{t1} -> {t2}");
        // All rows never cost more than reading every vector once after the first pass.
        let vector_pages = (100_000.0 * (4.0 * 784.0 + 12.0) / 8192.0f64).ceil();
        assert!(t1 - s1 <= vector_pages + 100_000.0 * (0.0025 * 99.0 + 0.005) + 1e-6);
    }
}
