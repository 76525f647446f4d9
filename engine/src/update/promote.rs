//! The dynamic entrance graph across processes (NAVIS-Update, Algorithm 2).
//!
//! Every process maps the same entrance graph (`entrance::shared`, file `entrance.shm`). An
//! insert promotes its new vertex while `|G_ent| < r_ent |G|`: under the index's allocator lock
//! (the paper's `Lock(G_ent)`) it plans the promotion on the shared graph (neighbours from the
//! insert's explored sets, back-edges pruned to R_ent), appends the plan to `entrance.log`,
//! applies it to the shared graph in place, and then advances the log length in `state.dat`.
//! Readers never wait: new members are published with one atomic store and changed lists are
//! sequence-locked.
//!
//! The shared file is volatile. The log is what makes promotions durable: at each server start
//! the first backend to open the index rebuilds `entrance.shm` from `entrance.bin` plus the
//! logged plans ([`rebuild_shared_entrance`], from `recover`). A failure or crash after the
//! append and before the length update leaves a tail that nobody replays and the next
//! promotion overwrites.
//!
//! Record: `[u32 payload length][u32 CRC-32 of the payload][payload = PromotionPlan::to_bytes]`.

use super::locks::{AllocatorGuard, WriteLocks};
use super::log::IndexLog;
use crate::entrance::shared::SharedEntrance;
use crate::entrance::{plan_view, EntranceGraph, PromotionPlan};
use crate::index::{Index, IndexError};
use crate::storage::names;
use crate::storage::state::Field;
use crate::storage::{IndexFiles, StorageError};
use crate::VertexId;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Applies the records of `log` between byte `from` and byte `to` to `graph`; returns the
/// offset after the last record applied.
pub fn apply_log(log: &Path, from: u64, to: u64, graph: &mut EntranceGraph) -> u64 {
    let Ok(file) = std::fs::File::open(log) else {
        return from;
    };
    let mut bytes = vec![0u8; (to - from) as usize];
    if file.read_exact_at(&mut bytes, from).is_err() {
        return from;
    }
    from + apply_records(&bytes, graph) as u64
}

/// Applies the promotion records in `bytes` (the format above; `entrance.log` or the
/// relation's promotions pages) to `graph` in order, up to the first that is incomplete,
/// fails its CRC or cannot be applied. Returns the bytes applied.
pub fn apply_records(bytes: &[u8], graph: &mut EntranceGraph) -> usize {
    let mut at = 0usize;
    for (payload, taken) in crate::pages::promotions::records(bytes) {
        let applied = PromotionPlan::from_bytes(payload)
            .ok()
            .and_then(|plan| graph.apply_promotion(plan).ok());
        if applied.is_none() {
            break;
        }
        at += taken;
    }
    at
}

impl Index {
    /// Promotes `v` (whose vector, as stored, is `vector`) into the entrance graph if the
    /// graph holds less than `entrance_ratio` of the vertices. `e_ent` are the insert's
    /// entry points and `e_pos` its explored candidates. Returns whether it promoted.
    pub fn maybe_promote(
        &self,
        log: &dyn IndexLog,
        locks: &dyn WriteLocks,
        v: VertexId,
        vector: &[f32],
        e_ent: &[VertexId],
        e_pos: &[VertexId],
    ) -> Result<bool, IndexError> {
        let ratio = self.files().manifest().params.entrance_ratio as f64;
        let wanted = |graph_len: usize| (graph_len as f64) < ratio * self.len() as f64;
        if !self.entrance_is_shared() || !wanted(self.entrance().len()) {
            return Ok(false);
        }
        let _guard = AllocatorGuard::lock(locks);
        // Taken under the lock: the plan is made on, and applied to, the current graph.
        let graph = self.entrance();
        // Under the lock nobody else promotes: the graph cannot change before the apply.
        if !wanted(graph.len()) || graph.contains(v) {
            return Ok(false);
        }
        let plan = plan_view(&*graph, v, vector, e_ent, e_pos)
            .map_err(|e| IndexError::Invalid(format!("entrance promotion: {e}")))?;
        let record = crate::pages::promotions::record(&plan.to_bytes());
        let state = self.files().state();
        let offset = state.get(Field::EntranceLogBytes) as u64;
        let end = offset + record.len() as u64;
        if end > u32::MAX as u64 {
            return Ok(false); // the log is full; the graph simply stops growing
        }
        log.promote(offset, &record)?;
        write_entrance_log(self.files(), offset, &record)?;
        // Applied before the log length counts the record: a failed apply leaves the record
        // uncounted, so a rebuild replays exactly what the shared graph holds.
        graph
            .apply(&plan)
            .map_err(|e| IndexError::Invalid(format!("entrance promotion: {e}")))?;
        state.set(Field::EntranceLogBytes, end as u32);
        Ok(true)
    }
}

/// Writes promotion records at byte `offset` of the copy's `entrance.log`: the runtime copy
/// of the promotions, which every rebuild of the shared graph in this server lifetime
/// replays (for a side directory it is the durable log too).
pub fn write_entrance_log(
    files: &IndexFiles,
    offset: u64,
    records: &[u8],
) -> Result<(), StorageError> {
    let path = files.dir().join(names::ENTRANCE_LOG);
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .and_then(|f| f.write_all_at(records, offset))
        .map_err(|e| StorageError::io(&path, "write", e))
}

/// Rebuilds `entrance.shm` from the durable files for server lifetime `epoch`: the build's
/// graph plus every logged promotion. The caller holds the allocator lock (`recover`). A log
/// record that cannot be applied ends the replay, and the log length is cut back to it.
pub fn rebuild_shared_entrance(files: &IndexFiles, epoch: u64) -> Result<usize, StorageError> {
    let dir = files.dir();
    let corrupt = |e: crate::entrance::EntranceError| {
        StorageError::corrupt(&dir.join(names::ENTRANCE), e.to_string())
    };
    let mut graph = EntranceGraph::from_bytes(&files.read_entrance()?).map_err(corrupt)?;
    let state = files.state();
    let logged = state.get(Field::EntranceLogBytes) as u64;
    let replayed = apply_log(&dir.join(names::ENTRANCE_LOG), 0, logged, &mut graph);
    if replayed < logged {
        state.set(Field::EntranceLogBytes, replayed as u32);
    }
    SharedEntrance::create(&dir.join(names::ENTRANCE_SHM), &graph, epoch).map_err(corrupt)?;
    Ok(graph.len())
}
