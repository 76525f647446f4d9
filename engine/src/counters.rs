//! Deterministic work counters for search and rerank.
//!
//! Wall-clock numbers on shared machines are noisy; these counts are not, so benchmarks and
//! the per-index stats function report them beside timings (DESIGN.md §7). One
//! [`SearchCounters`] is filled per query; [`SearchCounters::merge`] folds them into a
//! cumulative total, so a thread keeps its own total and the totals of all threads are summed
//! at the end without any shared atomics on the hot path.

use std::ops::AddAssign;

/// Counts for one query, or the sum over many (then `queries` says how many).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SearchCounters {
    /// Queries folded into this value: 1 for a single query's counters.
    pub queries: u64,
    /// Traversal hops: rounds of "pick up to beam-width unexpanded candidates, read their pages".
    pub hops: u64,
    /// Vertices whose edge lists were expanded (neighbours scored).
    pub expanded: u64,
    /// Edge pages the traversal read (from the edge-page cache or the device).
    pub edge_pages_read: u64,
    /// Of `edge_pages_read`, the pages the edge-page cache served (no device read).
    pub edge_page_cache_hits: u64,
    /// Of the edge pages read from the files (not the edge-page cache), those the kernel's
    /// page cache served ([`crate::page_cache`]): no device read either.
    pub edge_pages_from_page_cache: u64,
    /// Edge lists used from a fetched page for vertices that were *not* requested
    /// (same-page neighbours; an optimisation counted apart from the paper's behaviour).
    pub colocated_lists_used: u64,
    /// Slots whose owner stamp did not match the vertex they were read for (moved slots).
    pub stale_slots: u64,
    /// Full vectors loaded by reranking (CASR or rerank-all).
    pub rerank_vector_loads: u64,
    /// Full vectors loaded during traversal by the packed-layout emulation.
    pub packed_vector_loads: u64,
    /// Bytes read from side files (edge pages plus vector reads, at device granularity).
    pub bytes_read: u64,
    /// Of `bytes_read`, the bytes the kernel's page cache served without a device read
    /// ([`crate::page_cache`]).
    pub page_cache_bytes: u64,
    /// Read batches submitted (one per hop, one per CASR window).
    pub read_batches: u64,
    /// Distances computed from PQ codes.
    pub pq_distances: u64,
    /// Exact distances computed from full vectors.
    pub exact_distances: u64,
    /// Distances computed on the in-memory entrance graph.
    pub entrance_distances: u64,
    /// Rerank passes run (one per search pass that reranked).
    pub reranks: u64,
    /// Sum over reranks of the window `w` used (divide by `reranks` for the mean).
    pub casr_window_sum: u64,
    /// Sum over reranks of the number of candidates available to rerank (the explored set).
    pub explored_set: u64,
    /// Sum over search passes of the visited-set size (vertices whose PQ distance was computed).
    pub visited: u64,
    /// Resumptions of a cursor past its first pass.
    pub resumes: u64,
    /// Live vertices a cursor will never return because a farther result came first (misses
    /// of the approximate graph passes; see `search`'s ordering guarantee).
    pub order_skips: u64,
    /// Relaxed order: results returned after a farther one (instead of skipped).
    pub late_results: u64,
    /// Exhaustive rounds of a cursor: each reads every live vertex's vector once.
    pub exhaustive_rounds: u64,
    /// Full vectors loaded by exhaustive rounds.
    pub exhaustive_vector_loads: u64,
}

impl SearchCounters {
    /// Counters of one query, before any work.
    pub fn one_query() -> SearchCounters {
        SearchCounters {
            queries: 1,
            ..SearchCounters::default()
        }
    }

    /// Adds every field of `other` into `self`.
    pub fn merge(&mut self, other: &SearchCounters) {
        let SearchCounters {
            queries,
            hops,
            expanded,
            edge_pages_read,
            edge_page_cache_hits,
            edge_pages_from_page_cache,
            colocated_lists_used,
            stale_slots,
            rerank_vector_loads,
            packed_vector_loads,
            bytes_read,
            page_cache_bytes,
            read_batches,
            pq_distances,
            exact_distances,
            entrance_distances,
            reranks,
            casr_window_sum,
            explored_set,
            visited,
            resumes,
            order_skips,
            late_results,
            exhaustive_rounds,
            exhaustive_vector_loads,
        } = *other;
        // Destructuring above makes adding a field without merging it a compile error.
        self.queries += queries;
        self.hops += hops;
        self.expanded += expanded;
        self.edge_pages_read += edge_pages_read;
        self.edge_page_cache_hits += edge_page_cache_hits;
        self.edge_pages_from_page_cache += edge_pages_from_page_cache;
        self.colocated_lists_used += colocated_lists_used;
        self.stale_slots += stale_slots;
        self.rerank_vector_loads += rerank_vector_loads;
        self.packed_vector_loads += packed_vector_loads;
        self.bytes_read += bytes_read;
        self.page_cache_bytes += page_cache_bytes;
        self.read_batches += read_batches;
        self.pq_distances += pq_distances;
        self.exact_distances += exact_distances;
        self.entrance_distances += entrance_distances;
        self.reranks += reranks;
        self.casr_window_sum += casr_window_sum;
        self.explored_set += explored_set;
        self.visited += visited;
        self.resumes += resumes;
        self.order_skips += order_skips;
        self.late_results += late_results;
        self.exhaustive_rounds += exhaustive_rounds;
        self.exhaustive_vector_loads += exhaustive_vector_loads;
    }

    /// Sum of a sequence of counters (e.g. one total per thread).
    pub fn sum<'a>(parts: impl IntoIterator<Item = &'a SearchCounters>) -> SearchCounters {
        let mut total = SearchCounters::default();
        for part in parts {
            total.merge(part);
        }
        total
    }

    /// Edge pages that needed a device read.
    pub fn edge_page_device_reads(&self) -> u64 {
        self.edge_pages_read - self.edge_page_cache_hits
    }

    /// All full-vector loads: rerank, packed emulation and exhaustive rounds together.
    pub fn vector_loads(&self) -> u64 {
        self.rerank_vector_loads + self.packed_vector_loads + self.exhaustive_vector_loads
    }

    /// Mean of `value` per query; 0 when no query was counted.
    pub fn per_query(&self, value: u64) -> f64 {
        ratio(value, self.queries)
    }

    /// Mean full-vector loads per rerank pass.
    pub fn loads_per_rerank(&self) -> f64 {
        ratio(self.rerank_vector_loads, self.reranks)
    }

    /// Mean explored-set size per rerank pass.
    pub fn explored_per_rerank(&self) -> f64 {
        ratio(self.explored_set, self.reranks)
    }

    /// Share of the explored set that reranking loaded (the CASR target is at most 0.35).
    pub fn rerank_load_fraction(&self) -> f64 {
        ratio(self.rerank_vector_loads, self.explored_set)
    }

    /// Mean CASR window per rerank pass.
    pub fn mean_window(&self) -> f64 {
        ratio(self.casr_window_sum, self.reranks)
    }
}

impl AddAssign<&SearchCounters> for SearchCounters {
    fn add_assign(&mut self, rhs: &SearchCounters) {
        self.merge(rhs);
    }
}

fn ratio(num: u64, den: u64) -> f64 {
    if den == 0 {
        0.0
    } else {
        num as f64 / den as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(scale: u64) -> SearchCounters {
        SearchCounters {
            queries: 1,
            hops: 3 * scale,
            edge_pages_read: 12 * scale,
            rerank_vector_loads: 14 * scale,
            packed_vector_loads: scale,
            reranks: 1,
            explored_set: 40,
            casr_window_sum: 4,
            ..SearchCounters::default()
        }
    }

    #[test]
    fn merge_adds_every_field_and_sums_across_threads() {
        let totals: Vec<SearchCounters> = std::thread::scope(|s| {
            let handles: Vec<_> = (1..=4)
                .map(|t| {
                    s.spawn(move || {
                        let mut total = SearchCounters::default();
                        for _ in 0..10 {
                            total += &sample(t);
                        }
                        total
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let all = SearchCounters::sum(&totals);
        assert_eq!(all.queries, 40);
        assert_eq!(all.hops, 3 * 10 * (1 + 2 + 3 + 4));
        assert_eq!(all.edge_pages_read, 12 * 10 * 10);
        assert_eq!(all.vector_loads(), 15 * 10 * 10);
        assert_eq!(all.reranks, 40);
        assert_eq!(all.loads_per_rerank(), 14.0 * 100.0 / 40.0);
        assert_eq!(all.explored_per_rerank(), 40.0);
        assert_eq!(all.mean_window(), 4.0);
        assert_eq!(all.per_query(all.hops), 7.5);
    }

    #[test]
    fn ratios_of_empty_counters_are_zero() {
        let c = SearchCounters::default();
        assert_eq!(c.loads_per_rerank(), 0.0);
        assert_eq!(c.rerank_load_fraction(), 0.0);
        assert_eq!(c.per_query(5), 0.0);
    }
}
