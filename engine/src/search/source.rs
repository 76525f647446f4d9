//! [`IndexSource`]: what a search needs from an index (metadata, PQ scoring, entry points
//! and batched reads).

use std::io;

use crate::counters::SearchCounters;
use crate::distance::Metric;
use crate::storage::{EdgePageLayout, HeapTid, IndirEntry};
use crate::VertexId;

/// What a search needs from an index: metadata, PQ scoring, the entrance graph and two batched
/// read paths. One value per thread; its `&mut self` methods own that thread's I/O queue.
pub trait IndexSource {
    /// Per-query PQ lookup table.
    type PqTable;

    fn metric(&self) -> Metric;
    fn dim(&self) -> usize;
    fn edge_layout(&self) -> EdgePageLayout;
    /// Indirection entry of `v`; `None` for an id that is not (or no longer) in the index.
    fn entry(&self, v: VertexId) -> Option<IndirEntry>;
    fn pq_table(&self, query: &[f32]) -> Self::PqTable;
    fn pq_distance(&self, table: &Self::PqTable, v: VertexId) -> f32;
    /// A hint that `pq_distance` of `v` follows soon: sources with codes in memory start
    /// loading its cache lines.
    fn prefetch_pq_code(&self, _v: VertexId) {}
    /// Entry points for `query` from the entrance graph, closest first; adds the distances it
    /// computed to `counters.entrance_distances`.
    fn entry_points(
        &self,
        query: &[f32],
        list: usize,
        counters: &mut SearchCounters,
    ) -> Vec<VertexId>;
    /// The single start vertex of the no-entrance ablation.
    fn medoid(&self) -> VertexId;
    /// One past the largest vertex id the index may hold now: the exhaustive phase of a
    /// cursor reads every live vertex below it.
    fn id_bound(&self) -> VertexId;
    /// An index without vertices. Its search finds nothing for any valid query, of any
    /// dimension: an index built over an empty table may not know its column's dimension.
    fn is_empty(&self) -> bool {
        false
    }
    /// Bytes this source's reads have taken from the page cache so far (cumulative; sources
    /// that do not read files report 0). A cursor reports the difference as
    /// `page_cache_bytes`.
    fn page_cache_bytes(&self) -> u64 {
        0
    }
    /// Reads edge pages `pages` into `out` (`pages.len() * edge_layout().page_size()` bytes) as
    /// one batch.
    fn read_edge_pages(&mut self, pages: &[u32], out: &mut [u8]) -> io::Result<u64>;
    /// Loads the vectors and heap TIDs of `ids` as one batch, appending to `vectors` and
    /// `tids`; returns the bytes read from the device. A vertex that stopped being a result
    /// candidate since the search saw it (deleted, or freed by a consolidation) gets a NaN
    /// vector, which ranks it out of the results.
    fn load_vectors(
        &mut self,
        ids: &[VertexId],
        vectors: &mut Vec<f32>,
        tids: &mut Vec<HeapTid>,
    ) -> io::Result<u64>;
    /// [`IndexSource::load_vectors`] for the `count` consecutive ids from `first`, which an
    /// exhaustive round reads; an on-disk source reads them as one sequential run. Ids that
    /// are not result candidates get NaN vectors, as there.
    fn load_vector_run(
        &mut self,
        first: VertexId,
        count: usize,
        vectors: &mut Vec<f32>,
        tids: &mut Vec<HeapTid>,
    ) -> io::Result<u64> {
        let ids: Vec<VertexId> = (first..first + count as VertexId).collect();
        self.load_vectors(&ids, vectors, tids)
    }
}

/// [`IndexSource::entry_points`] for a source that holds an entrance graph: the graph's
/// nearest entrances to `query`, skipping vertices the source no longer holds live (deleted
/// or vanished since their promotion). The caller checked the query against the index's
/// dimension, which the entrance graph shares (checked at open), so the search cannot fail;
/// if it did, the search would start from no entry point rather than a wrong one.
pub(crate) fn live_entry_points<S, G>(
    source: &S,
    entrance: &G,
    query: &[f32],
    list: usize,
    counters: &mut SearchCounters,
) -> Vec<VertexId>
where
    S: IndexSource + ?Sized,
    G: crate::entrance::EntranceView + ?Sized,
{
    let live = |v: VertexId| {
        source
            .entry(v)
            .is_some_and(|e| e.is_live() && !e.is_deleted())
    };
    match crate::entrance::search_view(entrance, query, list, live) {
        Ok(((entry, _), distances)) => {
            counters.entrance_distances += distances as u64;
            entry
        }
        Err(_) => Vec::new(),
    }
}
