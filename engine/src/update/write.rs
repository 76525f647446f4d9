//! The one way an edge list changes after the build: written into a slot of a freshly
//! allocated page together with the other lists of the same writer, then published (a new
//! vertex) or relocated (an existing one) through the indirection table, and the slot it left
//! retired. Callers hold the stripes of every vertex in the batch.

use super::alloc::{allocate_page, retire_slot};
use super::locks::WriteLocks;
use super::log::{EdgePageChange, IndexLog, PlacedList};
use crate::index::IndexError;
use crate::storage::state::{Counter, Field};
use crate::storage::{EdgeLocation, HeapTid, IndexFiles, IndirEntry, FLAG_LIVE};
use crate::VertexId;
use std::sync::atomic::Ordering;

/// One list to write: the vertex, its new neighbours, and where its current list is (`None`
/// for a vertex being published now).
#[derive(Clone, Debug, PartialEq)]
pub struct ListChange {
    pub vertex: VertexId,
    pub list: Vec<VertexId>,
    pub old: Option<EdgeLocation>,
}

/// Writes `changes` (at most `slots_per_page` of them) to one fresh page and makes them
/// current; a vertex without `old` is published with `tid`. The page and everything that
/// now points into it go through `log` as one change before readers can see any of it
/// (`log` module). Returns the page number.
pub fn write_lists(
    files: &IndexFiles,
    log: &dyn IndexLog,
    locks: &dyn WriteLocks,
    changes: &[ListChange],
    tid: HeapTid,
) -> Result<u32, IndexError> {
    let layout = files.edge_layout();
    if changes.is_empty() || changes.len() > layout.slots_per_page() {
        return Err(IndexError::Invalid(format!(
            "{} edge lists do not fit one page of {} slots",
            changes.len(),
            layout.slots_per_page()
        )));
    }
    let page_no = allocate_page(files, locks)?;
    let lists: Vec<(VertexId, &[VertexId])> = changes
        .iter()
        .map(|c| (c.vertex, c.list.as_slice()))
        .collect();
    let page = files.format_edge_page(page_no, &lists)?;
    let placed: Vec<PlacedList> = changes
        .iter()
        .enumerate()
        .map(|(slot, change)| PlacedList {
            vertex: change.vertex,
            slot: slot as u16,
            old: change.old,
        })
        .collect();
    let state = files.state();
    // Counted live before anything points here, so that no relocation away from this page
    // can see its count below the truth.
    state
        .page_live(page_no)
        .store(changes.len() as u32, Ordering::Release);
    let change = EdgePageChange {
        page: page_no,
        image: &page,
        lists: &placed,
        tid,
    };
    if let Err(e) = log.edge_page(&change) {
        // Nothing points at the page: retiring its counted lists hands it back.
        for _ in changes {
            let _ = retire_slot(files, locks, page_no);
        }
        return Err(e.into());
    }
    // Write-through before anything points at the page, so that a reader who follows the
    // new location never finds an older copy in the cache. The cached bytes are the page as
    // the log wrote it (a relation's log re-stamps it at its final block), since cache hits
    // are not verified again and a frame must equal the disk.
    if let Some(cache) = files.page_cache() {
        let key = cache.key(page_no);
        match files.edge_page_as_logged(&change) {
            Ok(written) => cache.cache.refresh(key, &written),
            // The page is durable and about to be published, so the write stands; the cache
            // just must not keep (or admit from a read in flight) an older copy of it.
            Err(_) => cache.cache.drop_page(key),
        }
    }
    state.count(Counter::EdgePagesWritten, 1);
    state.count(Counter::EdgeListsWritten, changes.len() as u64);
    for list in &placed {
        let to = EdgeLocation {
            page: page_no,
            slot: list.slot,
        };
        match list.old {
            None => {
                files.indirection().publish(
                    list.vertex,
                    IndirEntry {
                        edge: to,
                        tid,
                        flags: FLAG_LIVE,
                    },
                )?;
                state.add(Field::Published, 1);
            }
            Some(_) => {
                let previous = files.indirection().relocate_edges(list.vertex, to)?;
                retire_slot(files, locks, previous.page)?;
            }
        }
    }
    Ok(page_no)
}

/// The current edge list of `v`, which the indirection table places at `at`, read with one
/// page read into `buf`. Under `v`'s stripe the list cannot move, so a wrong owner stamp
/// means corruption.
pub fn read_current_list(
    files: &IndexFiles,
    v: VertexId,
    at: EdgeLocation,
    buf: &mut [u8],
) -> Result<Vec<VertexId>, IndexError> {
    files.read_edge_page(at.page, buf)?;
    match files.edge_layout().slot_owned_by(buf, at.slot as usize, v) {
        Some(slot) => Ok(slot.to_vec()),
        None => Err(IndexError::Invalid(format!(
            "edge slot {} of page {} does not belong to vertex {v}, though the indirection \
             table points there",
            at.slot, at.page
        ))),
    }
}
