//! The dynamic entrance graph across processes (NAVIS-Update, Algorithm 2).
//!
//! Each process keeps its own in-memory copy of the entrance graph. An insert promotes its new
//! vertex while `|G_ent| < r_ent |G|`: under the index's allocator lock it catches its copy up,
//! plans the promotion (neighbours from the insert's explored sets, back-edges pruned to
//! R_ent), appends the plan to `entrance.log` and then advances the log length in `state.dat`.
//! Every process applies the logged plans in log order before it next reads the graph
//! (`Index::sync_entrance`), so all copies stay identical and readers never wait for the
//! writer. A crash between the append and the length update leaves a tail that nobody reads
//! and the next promotion overwrites.
//!
//! Record: `[u32 payload length][u32 CRC-32 of the payload][payload = PromotionPlan::to_bytes]`.

use super::locks::{AllocatorGuard, WriteLocks};
use crate::entrance::{EntranceGraph, PromotionPlan};
use crate::index::{Index, IndexError};
use crate::storage::names;
use crate::storage::state::Field;
use crate::storage::{crc32, StorageError};
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
    let mut at = 0usize;
    while at + 8 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().expect("4 bytes"));
        let Some(payload) = bytes.get(at + 8..at + 8 + len) else {
            break;
        };
        if crc32(payload) != crc {
            break;
        }
        let applied = PromotionPlan::from_bytes(payload)
            .ok()
            .and_then(|plan| graph.apply_promotion(plan).ok());
        if applied.is_none() {
            break;
        }
        at += 8 + len;
    }
    from + at as u64
}

impl Index {
    /// Promotes `v` (whose vector, as stored, is `vector`) into the entrance graph if the
    /// graph holds less than `entrance_ratio` of the vertices. `e_ent` are the insert's
    /// entry points and `e_pos` its explored candidates. Returns whether it promoted.
    pub fn maybe_promote(
        &self,
        locks: &dyn WriteLocks,
        v: VertexId,
        vector: &[f32],
        e_ent: &[VertexId],
        e_pos: &[VertexId],
    ) -> Result<bool, IndexError> {
        let ratio = self.files().manifest().params.entrance_ratio as f64;
        let wanted = |graph_len: usize| (graph_len as f64) < ratio * self.len() as f64;
        if !wanted(self.entrance().len()) {
            return Ok(false);
        }
        let _guard = AllocatorGuard::lock(locks);
        let plan = {
            let graph = self.entrance(); // caught up under the lock: nobody appends meanwhile
            if !wanted(graph.len()) || graph.contains(v) {
                return Ok(false);
            }
            graph
                .plan_promotion(v, vector, e_ent, e_pos)
                .map_err(|e| IndexError::Invalid(format!("entrance promotion: {e}")))?
        };
        let payload = plan.to_bytes();
        let mut record = Vec::with_capacity(payload.len() + 8);
        record.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        record.extend_from_slice(&crc32(&payload).to_le_bytes());
        record.extend_from_slice(&payload);
        let state = self.files().state();
        let offset = state.get(Field::EntranceLogBytes) as u64;
        let end = offset + record.len() as u64;
        if end > u32::MAX as u64 {
            return Ok(false); // the log is full; the graph simply stops growing
        }
        let path = self.dir().join(names::ENTRANCE_LOG);
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .and_then(|f| f.write_all_at(&record, offset))
            .map_err(|e| StorageError::io(&path, "write", e))?;
        state.set(Field::EntranceLogBytes, end as u32);
        self.sync_entrance();
        Ok(true)
    }
}
