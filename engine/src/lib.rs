//! navis-engine: the PostgreSQL-free core of navis.
//!
//! Everything algorithmic lives here (distances, quantisation, graph build and search, the
//! side-file formats and I/O) so it can be tested with plain `cargo test` and benchmarked
//! with the `navis-bench` binary. The pgrx crate at the repository root only adapts
//! PostgreSQL inputs to these APIs. See `docs/architecture.md`.

pub mod cache;
pub mod casr;
pub mod counters;
pub mod dataset;
pub mod distance;
pub mod entrance;
pub mod graph;
pub mod heap;
pub mod index;
pub mod io;
pub mod io_wait;
pub mod kmeans;
pub mod lios;
pub mod memory_fit;
pub mod page_cache;
pub mod pages;
pub mod placement;
pub mod pq;
pub mod pq_training;
pub mod prefetch;
pub mod relation;
pub mod result_cache;
pub mod search;
pub mod segments;
pub mod storage;
pub mod store;
pub mod update;
pub mod vector;

pub use distance::{kernels, Kernels, Metric};
pub use vector::{validate, validate_pair, VectorError, MAX_DIM};

/// Identifier of a graph vertex (a row in the index). Dense from 0.
pub type VertexId = u32;
