//! Keeping edge pages dense after the build.
//!
//! Every change writes the lists it changes out of place, into a fresh page, and a page goes
//! back to the free list only when its last current list has moved away. Left alone, the
//! pages that inserts write decay: an insert fills one page with the few lists it changed,
//! later inserts move those lists away one by one, and the page stays allocated for the last
//! of them. Building 1,000 rows and inserting 5,000 more left 1,454 edge pages in use where a
//! build of the 6,000 needs 200 (4 KiB pages, R = 32): four lists a page of thirty.
//!
//! Two mechanisms keep pages dense, both moving lists unchanged through the ordinary write
//! path ([`write_lists`]: a fresh page, relocations, retirements, all through the log):
//!
//! - **Absorption at insert** ([`Index::absorption_plan`], then `write_group`): the page an
//!   insert writes has room left after the lists it changes. It is filled with *all* the
//!   current lists of other pages, so that each of those pages becomes free. Candidates are
//!   the pages that position seeking read (it recorded where each list it expanded lives)
//!   and the pages the changed lists leave; each costs one load of its live count, and only
//!   a page that will be absorbed whole is read. The sparsest candidates go first, as a
//!   log-structured cleaner picks its segments. No scan, no search for room: the work is
//!   bounded by the lists position seeking recorded and by [`MAX_ABSORBED_PAGES`] reads.
//! - **Compaction at VACUUM** ([`Index::compact`]): the current lists of sparse pages move
//!   to fresh dense pages. Consolidation always runs it; the reconnect pass (a VACUUM with
//!   inserts but too few deletes to consolidate) runs it when the edge pages in use exceed
//!   [`COMPACT_WHEN_OVER`] times the fewest that could hold the lists.

use super::locks::{StripeGuard, WriteLocks};
use super::log::IndexLog;
use super::vacuum::ConsolidateReport;
use super::write::{write_lists, ListChange};
use crate::index::{Index, IndexError};
use crate::storage::state::Field;
use crate::storage::{EdgeLocation, HeapTid};
use crate::VertexId;
use std::collections::HashSet;
use std::sync::atomic::Ordering;

/// Pages an insert reads to absorb them (each one it reads becomes free).
pub const MAX_ABSORBED_PAGES: usize = 8;

/// The reconnect pass compacts when the edge pages in use exceed this multiple of
/// `ceil(lists / slots_per_page)`. Absorption keeps inserts' pages at about 80-90% full;
/// compacting at 1.15× (87% average fill) leaves such an index alone and repairs one whose
/// pages decayed (deletes that were never consolidated, a burst of inserts into a build
/// with few sparse pages to absorb).
pub const COMPACT_WHEN_OVER: f64 = 1.15;

/// Pages at most this full (in lists, out of `slots_per_page`) are compacted: moving a page
/// with a share `x` of its slots live costs writing `x` of a page and saves `1 - x`; at 3/4
/// that is three slots written per slot freed, once per VACUUM.
const COMPACT_FILL: f64 = 0.75;

/// Lists to move into the free slots of an insert's page: `(vertex, where its list is)`,
/// page by page.
pub(super) type Absorption = Vec<(VertexId, EdgeLocation)>;

/// The current lists on page `p` of vertices outside `group` (empty when the page cannot be
/// read: one being rewritten is not worth waiting for).
fn current_lists(index: &Index, group: &[VertexId], p: u32, buf: &mut [u8]) -> Absorption {
    let files = index.files();
    let layout = files.edge_layout();
    let table = files.indirection();
    let mut lists = Absorption::new();
    if files.read_edge_page(p, buf).is_err() {
        return lists;
    }
    for s in 0..layout.slots_per_page() {
        let slot = layout.slot(buf, s);
        let here = EdgeLocation {
            page: p,
            slot: s as u16,
        };
        if !slot.is_free()
            && !group.contains(&slot.owner())
            && table.entry(slot.owner()).map(|e| e.edge) == Some(here)
        {
            lists.push((slot.owner(), here));
        }
    }
    lists
}

impl Index {
    /// Chooses whole pages whose current lists fit `room` free slots of the page about to
    /// be written for `group` (whose lists leave their pages with this write). `seen` are
    /// pages position seeking read. Returns the lists to move, without holding any lock:
    /// `write_group` checks each again under its vertex's stripe.
    pub(super) fn absorption_plan(
        &self,
        group: &[VertexId],
        seen: impl Iterator<Item = u32>,
        room: usize,
    ) -> Result<Absorption, IndexError> {
        let mut plan = Absorption::new();
        if room == 0 {
            return Ok(plan);
        }
        let files = self.files();
        let state = files.state();
        let table = files.indirection();
        let pages = state.get(Field::EdgePages);
        // Lists of the group that are about to leave their pages.
        let leaving: Vec<u32> = group
            .iter()
            .filter_map(|&u| table.entry(u).map(|e| e.edge.page))
            .collect();
        let mut candidates: Vec<(usize, u32)> = Vec::new();
        let mut considered: HashSet<u32> = HashSet::new();
        for p in leaving.iter().copied().chain(seen) {
            if p >= pages || !considered.insert(p) {
                continue;
            }
            let live = state.page_live(p).load(Ordering::Acquire) as usize;
            let staying = live.saturating_sub(leaving.iter().filter(|&&q| q == p).count());
            if staying > 0 && staying <= room {
                candidates.push((staying, p));
            }
        }
        candidates.sort_unstable();
        let layout = files.edge_layout();
        let mut buf = vec![0u8; layout.page_size()];
        let mut left = room;
        let mut reads = 0;
        // The sparsest page that did not fit whole: it tops up what room remains.
        let mut top_up: Option<u32> = None;
        for (staying, p) in candidates {
            if staying > left {
                top_up = top_up.or(Some(p));
                continue;
            }
            if reads == MAX_ABSORBED_PAGES {
                break;
            }
            reads += 1;
            let lists = current_lists(self, group, p, &mut buf);
            // Only a page absorbed whole becomes free; otherwise the moves gain nothing.
            if lists.len() == staying {
                left -= lists.len();
                plan.extend(lists);
            }
            if left == 0 {
                break;
            }
        }
        // The page's free slots are written anyway: lists from the sparsest page left make
        // it sparser still, so that a later insert absorbs its rest whole, and the page
        // written now leaves full.
        if let (Some(p), true) = (top_up, left > 0 && reads < MAX_ABSORBED_PAGES) {
            let mut lists = current_lists(self, group, p, &mut buf);
            lists.truncate(left);
            plan.extend(lists);
        }
        Ok(plan)
    }

    /// Appends to `changes` the lists of `plan` that are still where the plan found them
    /// (callers hold their stripes), unchanged, up to `slots` in all. Reads each page once.
    pub(super) fn absorb(
        &self,
        plan: &Absorption,
        changes: &mut Vec<ListChange>,
        slots: usize,
        page_buf: &mut [u8],
    ) -> Result<usize, IndexError> {
        let files = self.files();
        let layout = files.edge_layout();
        let table = files.indirection();
        let mut loaded: Option<u32> = None;
        let mut absorbed = 0;
        for &(u, at) in plan {
            if changes.len() >= slots {
                break;
            }
            if table.entry(u).map(|e| e.edge) != Some(at) || changes.iter().any(|c| c.vertex == u) {
                continue; // moved since the plan was made
            }
            if loaded != Some(at.page) {
                loaded = None;
                if files.read_edge_page(at.page, page_buf).is_err() {
                    continue;
                }
                loaded = Some(at.page);
            }
            // Under u's stripe its list cannot move, so its entry names a slot it owns.
            let Some(slot) = layout.slot_owned_by(page_buf, at.slot as usize, u) else {
                continue;
            };
            changes.push(ListChange {
                vertex: u,
                list: slot.to_vec(),
                old: Some(at),
            });
            absorbed += 1;
        }
        Ok(absorbed)
    }

    /// Whether the edge pages in use exceed [`COMPACT_WHEN_OVER`] times the fewest that
    /// could hold the current lists.
    pub fn edge_pages_sparse(&self) -> bool {
        let files = self.files();
        let state = files.state();
        let in_use = state.get(Field::EdgePages) - state.get(Field::FreePageCount);
        let lists = state.get(Field::Published) as usize;
        let dense = lists.div_ceil(files.edge_layout().slots_per_page()).max(1);
        in_use as f64 > COMPACT_WHEN_OVER * dense as f64
    }

    /// Moves the current lists of pages at most [`COMPACT_FILL`] full to fresh dense pages,
    /// sparsest pages first.
    pub(super) fn compact(
        &self,
        log: &dyn IndexLog,
        locks: &dyn WriteLocks,
        cancel: &dyn Fn() -> bool,
        report: &mut ConsolidateReport,
    ) -> Result<(), IndexError> {
        let files = self.files();
        let layout = files.edge_layout();
        let spp = layout.slots_per_page();
        let state = files.state();
        let table = files.indirection();
        let pages = state.get(Field::EdgePages);
        let limit = (spp as f64 * COMPACT_FILL).floor() as usize;
        let mut sparse: Vec<(usize, u32)> = (0..pages)
            .filter_map(|p| {
                let live = state.page_live(p).load(Ordering::Acquire) as usize;
                (live > 0 && live <= limit).then_some((live, p))
            })
            .collect();
        // Moving lists off fewer than two sparse pages cannot free anything.
        if sparse.len() < 2 {
            return Ok(());
        }
        sparse.sort_unstable();
        let sparse_set: HashSet<u32> = sparse.iter().map(|&(_, p)| p).collect();
        let mut movers: Vec<VertexId> = Vec::new();
        let mut page = vec![0u8; layout.page_size()];
        for &(_, p) in &sparse {
            if files.read_edge_page(p, &mut page).is_err() {
                continue;
            }
            for s in 0..spp {
                let slot = layout.slot(&page, s);
                let here = EdgeLocation {
                    page: p,
                    slot: s as u16,
                };
                if !slot.is_free() && table.entry(slot.owner()).map(|e| e.edge) == Some(here) {
                    movers.push(slot.owner());
                }
            }
        }
        let mut page_buf = vec![0u8; layout.page_size()];
        for group in movers.chunks(spp) {
            if cancel() {
                return Err(IndexError::Cancelled);
            }
            let _stripes = StripeGuard::lock(locks, group);
            let mut changes = Vec::with_capacity(group.len());
            let mut loaded: Option<u32> = None;
            for &u in group {
                let Some(entry) = table.entry(u) else {
                    continue;
                };
                if !sparse_set.contains(&entry.edge.page) {
                    continue; // moved by an insert meanwhile
                }
                if loaded != Some(entry.edge.page) {
                    files.read_edge_page(entry.edge.page, &mut page_buf)?;
                    loaded = Some(entry.edge.page);
                }
                let Some(slot) = layout.slot_owned_by(&page_buf, entry.edge.slot as usize, u)
                else {
                    return Err(IndexError::Invalid(format!(
                        "edge slot {} of page {} does not belong to vertex {u}, though the \
                         indirection table points there",
                        entry.edge.slot, entry.edge.page
                    )));
                };
                changes.push(ListChange {
                    vertex: u,
                    list: slot.to_vec(),
                    old: Some(entry.edge),
                });
            }
            if !changes.is_empty() {
                write_lists(files, log, locks, &changes, HeapTid::default())?;
                report.pages_written += 1;
                report.lists_compacted += changes.len() as u64;
            }
        }
        Ok(())
    }
}
