//! Changing an index after its build, from many processes at once: inserts (NAVIS position
//! seeking and out-of-place edge-list writes), lazy deletes and their consolidation, the
//! allocator and its recovery, and structural verification.
//!
//! Shared state lives in the memory-mapped side files (the indirection table, the PQ codes,
//! `state.dat`); the caller supplies the locks ([`locks::WriteLocks`]). See
//! docs/architecture.md for how the PostgreSQL layer wires them.

pub mod alloc;
pub mod back_edges;
mod compact;
pub mod insert;
pub mod locks;
pub mod log;
pub mod promote;
mod reach;
pub mod repairs;
pub mod sliced;
pub mod sliced_repair;
pub mod vacuum;
mod vectors;
pub mod verify;
pub mod write;

pub use alloc::{recover, rederive_allocator, Recovery};
pub use back_edges::{BackEdge, BackEdgeReport, BackEdgeSink};
pub use compact::{COMPACT_WHEN_OVER, MAX_ABSORBED_PAGES};
pub use insert::{InsertParams, InsertReport};
pub use locks::{AllocatorGuard, LocalLocks, WriteLocks};
pub use log::{EdgePageChange, IndexLog, PlacedList, SideFileLog, VectorChange};
pub use repairs::{RepairReport, RepairSink};
pub use sliced::{SlicedBackEdges, StepKind};
pub use sliced_repair::SlicedRepair;
pub use vacuum::{BulkDeleteReport, ConsolidateReport};
pub use verify::VerifyReport;
