//! A whole index in one relation of 8 KiB pages (RFC 0001 stage 2b, the write side): the
//! build's output written into a [`PageStore`] in the page formats of [`crate::pages`], and
//! decoded back.
//!
//! - [`RelationWriter::write`] writes a built index into an empty store;
//! - [`RelationImage::read`] verifies every page and decodes everything (the base of `open`,
//!   and the test oracle for the writer);
//! - [`build_relation`] runs the build pipeline with placement for 8 KiB pages and writes.
//!
//! A freshly written relation, in block order:
//!
//! ```text
//! block 0                      metapage (written last)
//! runs of edge pages           ordinal p = edge page p of the placement (indirection's "page")
//! runs of vector pages         the vector stream, slot v = vertex v
//! runs of indirection pages    entry v = vertex v, LIVE
//! runs of code pages           code v
//! runs of blob pages           the PQ codebook, then the entrance graph
//! extent-map pages             one block each, listed on the metapage, not in the map
//! ```
//!
//! Each kind with n pages gets the runs `extent::runs_for(n)` names, of exactly
//! `extent::run_len` blocks; the unused tail of a kind's last run holds valid, empty pages of
//! that kind (free edge slots, free vector slots, zero entries), so every block of a fresh
//! relation verifies and later growth finds formatted pages. A kind with no pages has no runs;
//! the zero-vertex index is the metapage, the blob pages and one extent-map page.
//!
//! Edge pages are addressed by ordinal, never by block: the indirection entry's edge-page
//! field counts ordinals, and the extent map turns one into a block. So compaction or growth
//! can move runs without rewriting entries.
//!
//! After the build, changes arrive as [`crate::update::IndexLog`] calls; [`apply`] holds what
//! each one does to each page it touches (the redo vocabulary), and [`StoreLog`] applies them
//! to a [`PageStore`], growing the relation by runs appended at its end (any kind, in any
//! interleaving), listed by rewritten extent-map pages (and the metapage, when the map needs
//! another page). Nothing records the allocator (free lists, live counts, high-water marks):
//! [`RelationImage`] derives it from the indirection entries and the extent map
//! ([`allocator::Allocator`]), RFC 0001 §10.

mod allocator;
pub mod apply;
pub mod changed_blocks;
mod image;
mod open;
mod race;
pub mod runtime;
pub mod standby;
mod store_log;
mod writer;

pub use image::{Allocator, RelationImage};
pub use open::{RelationIndex, RelationReader};
pub use runtime::{open_index, open_index_synced};
pub use store_log::{map_pages, StoreLog};
pub use writer::{RelationWriter, RowSource, BATCH_BLOCKS};

use crate::index::partitioned::{PartitionPlan, PartitionedBuild};
use crate::index::spool::RowSpool;
use crate::index::{build_in_memory, BuildPhase, BuildReport, Cancel, EdgePageFormat};
use crate::index::{peak_rss_bytes, IndexError, IndexParams, Progress};
use crate::pages::meta::Meta;
use crate::pages::BLOCK_SIZE;
use crate::storage::HeapTid;
use crate::store::PageStore;
use std::time::Instant;

/// Builds a complete index over `vectors` (`tids.len()` rows, row-major) into the empty
/// `store`: every phase of [`crate::index::build_index`], with placement computed for 8 KiB
/// edge pages, then [`RelationWriter::write`]. `build_id` keys caches and runtime copies
/// (random per build). The report's file sizes hold one entry, `relation`.
pub fn build_relation(
    store: &dyn PageStore,
    vectors: &[f32],
    tids: &[HeapTid],
    params: &IndexParams,
    build_id: u64,
    progress: Progress,
    cancel: Cancel,
) -> Result<(BuildReport, Meta), IndexError> {
    let mut built = build_in_memory(
        vectors,
        tids,
        params,
        EdgePageFormat::Relation,
        progress,
        cancel,
    )?;
    let mut report = std::mem::take(&mut built.report);
    let n = tids.len() as u64;
    progress(BuildPhase::Writing, 0, n);
    let started = Instant::now();
    let meta = RelationWriter::write(store, &built.input(), built.medoid, build_id)?;
    progress(BuildPhase::Writing, n, n);
    report.phases.push((BuildPhase::Writing, started.elapsed()));
    report.edge_pages = built.input().placement.pages;
    let blocks = u64::from(store.nblocks()?);
    report.file_sizes = vec![("relation".to_string(), blocks * BLOCK_SIZE as u64)];
    report.peak_rss = peak_rss_bytes();
    Ok((report, meta))
}

/// Builds an index over the rows of `spool` (every row on disk, in heap order) into the
/// empty `store` within `params.memory_budget` bytes of memory: the partitioned phases of
/// [`crate::index::partitioned`], then [`RelationWriter::write_streamed`] with the lists
/// merged as they are written and identity placement. `tids[v]` is row v's heap TID.
pub fn build_relation_partitioned(
    store: &dyn PageStore,
    spool: &RowSpool,
    tids: &[HeapTid],
    params: &IndexParams,
    build_id: u64,
    progress: Progress,
    cancel: Cancel,
) -> Result<(BuildReport, Meta, PartitionPlan), IndexError> {
    let budget = params.memory_budget.ok_or_else(|| {
        IndexError::Invalid("a memory-bounded build needs a memory budget".into())
    })?;
    if tids.len() != spool.len() {
        return Err(IndexError::Invalid(format!(
            "{} heap TIDs for {} spooled rows",
            tids.len(),
            spool.len()
        )));
    }
    let mut built = PartitionedBuild::run(spool, params, budget, progress, cancel)?;
    let mut report = std::mem::take(&mut built.report);
    let n = tids.len();
    progress(BuildPhase::Writing, 0, n as u64);
    let started = Instant::now();
    let spp = crate::pages::edge::EdgeLayout::new(params.max_degree)?.slots_per_page();
    let placement = crate::placement::identity_placement(n, spp)
        .map_err(|e| IndexError::Invalid(e.to_string()))?;
    let codebook = built.pq.to_bytes();
    let entrance = std::mem::take(&mut built.entrance);
    let input = crate::storage::BuildInput {
        metric: params.metric,
        dim: spool.dim(),
        max_degree: params.max_degree,
        vectors: &[],
        heap_tids: tids,
        adjacency: &[],
        placement: &placement,
        pq_bytes: report.pq_bytes,
        pq_codebook: &codebook,
        pq_codes: &[],
        entrance: &entrance,
        params: crate::storage::BuildParams {
            build_list: params.build_list as u32,
            alpha: params.alpha,
            entrance_ratio: params.entrance_ratio,
            entrance_degree: params.entrance_degree as u32,
        },
    };
    let mut rows = built.rows(params.max_degree);
    let meta = RelationWriter::write_streamed(store, &input, &mut rows, built.medoid, build_id)?;
    progress(BuildPhase::Writing, n as u64, n as u64);
    report.phases.push((BuildPhase::Writing, started.elapsed()));
    report.edge_pages = placement.pages;
    let blocks = u64::from(store.nblocks()?);
    report.file_sizes = vec![("relation".to_string(), blocks * BLOCK_SIZE as u64)];
    report.peak_rss = peak_rss_bytes();
    Ok((report, meta, built.plan))
}

#[cfg(test)]
mod store_log_tests;
#[cfg(test)]
mod tests;
