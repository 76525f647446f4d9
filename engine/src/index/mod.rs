//! Build pipeline and the searchable, opened index.
//!
//! [`build_index`] runs the phases of a NAVIS build in order and reports each through a
//! callback (for `pg_stat_progress_create_index`):
//!
//! 1. **Sampling**: validate every row, normalise for cosine, choose the entrance sample.
//! 2. **PQ training** on a seeded sample, then encoding of every row.
//! 3. **Graph build**: two-pass Vamana (RobustPrune with alpha).
//! 4. **Placement**: Starling-style greedy page placement; its overlap ratio is reported
//!    against identity placement.
//! 5. **Entrance graph**: an in-memory Vamana graph
//!    ([`EntranceGraph`](crate::entrance::EntranceGraph), R_ent from the parameters, build
//!    list 64) over the seeded sample of about `entrance_ratio` of the vertices, holding
//!    their full vectors.
//! 6. **Writing** every side file through [`IndexWriter`](crate::storage::IndexWriter); the
//!    main graph's medoid goes into the manifest as the start of searches without entry
//!    points. (A build into the relation layout runs phases 1-5 through
//!    [`build_in_memory`], placing lists for 8 KiB pages, and writes with
//!    `crate::relation::build_relation`.)
//!
//! An index over zero rows is valid (PostgreSQL builds one for `CREATE INDEX` on an empty
//! table): it has a placeholder PQ codebook, an empty entrance graph, and every search of
//! it finds nothing, whatever the query's dimension. Its dimension is
//! [`IndexParams::dim`], or a placeholder when the caller does not know one.
//!
//! The memory estimate is computed and checked against the caller's budget *before* any
//! allocation that scales with the input beyond the input itself.
//!
//! [`Index::open`] maps an existing directory; [`Index::reader`] gives a per-thread
//! [`DiskReader`] (it owns that thread's I/O queue) that implements
//! [`crate::search::IndexSource`], and [`Index::search`] runs one query with CASR
//! calibrated automatically on the first queries.
//!
//! The module's files, one job each: `build` (the phases and their report), `opened`
//! ([`Index`]: an opened index and its search entry points), `reader` ([`DiskReader`]: one
//! thread's reads of the index's files), `error` ([`IndexError`]), `regrow` (when an index
//! rebuilds itself from its own rows, and the snapshot and changes such a rebuild uses),
//! `partitioned` (the memory-bounded build: overlapping partitions built one at a time and
//! merged) and `spool` (its rows on disk).

mod build;
mod error;
mod opened;
mod params;
pub mod partitioned;
mod reader;
pub mod regrow;
pub mod spool;
#[cfg(test)]
mod tests;

pub use build::{
    build_in_memory, build_index, peak_rss_bytes, BuildPhase, BuildReport, BuiltIndex, Cancel,
    EdgePageFormat, Progress,
};
pub use error::IndexError;
pub use opened::{index_paths, CasrSetting, Index};
pub use params::{IndexParams, DEFAULT_GRAPH_BUILD_LIST, MIN_PQ_SUBSPACES};
pub(crate) use reader::storage_to_io;
pub use reader::{DiskReader, SpareReader};
