//! navis's own reads in PostgreSQL's buffer counters, so that `EXPLAIN (ANALYZE, BUFFERS)`,
//! `pg_stat_statements` and `pg_statio_user_indexes` show them (issue 16).
//!
//! Edge and vector pages are read around shared_buffers (O_DIRECT, io_uring), and edge pages
//! may come from NAVIS-Cache instead. The mapping, documented in the README:
//!
//! - an edge page served by NAVIS-Cache is a shared hit (`shared_blks_hit`, `idx_blks_hit`);
//! - the bytes read from the device, in 8 KiB blocks rounded up per report, are shared reads
//!   (`shared_blks_read`, `idx_blks_read`).
//!
//! The metapage read by every call goes through shared_buffers and PostgreSQL counts it
//! itself; the runtime copy's memory-mapped indirection and codes are not reads.

use navis_engine::counters::SearchCounters;
use pgrx::pg_sys;

const BLOCK: u64 = pg_sys::BLCKSZ as u64;

/// What one scan or insert has reported so far, to report only the difference next time.
#[derive(Clone, Copy, Default)]
pub struct Reported {
    bytes_read: u64,
    hits: u64,
}

/// Adds the reads in `counters` since `reported` to this backend's buffer usage and to
/// `index`'s statistics.
pub fn report(index: pg_sys::Relation, counters: &SearchCounters, reported: &mut Reported) {
    let read_blocks = counters.bytes_read.div_ceil(BLOCK) - reported.bytes_read.div_ceil(BLOCK);
    let hits = counters.edge_page_cache_hits - reported.hits;
    *reported = Reported {
        bytes_read: counters.bytes_read,
        hits: counters.edge_page_cache_hits,
    };
    if read_blocks == 0 && hits == 0 {
        return;
    }
    // SAFETY: pgBufferUsage is this backend's counter block (what ReadBuffer increments);
    // `index` is open, and its pgstat_info is set up as pgstat_count_buffer_read does.
    unsafe {
        let usage = &raw mut pg_sys::pgBufferUsage;
        (*usage).shared_blks_read += read_blocks as i64;
        (*usage).shared_blks_hit += hits as i64;
        if (*index).pgstat_info.is_null() && (*index).pgstat_enabled {
            pg_sys::pgstat_assoc_relation(index);
        }
        let info = (*index).pgstat_info;
        if !info.is_null() {
            (*info).t_counts.t_blocks_fetched += (read_blocks + hits) as i64;
            (*info).t_counts.t_blocks_hit += hits as i64;
        }
    }
}
