//! Page-locality placement of edge lists (Starling-style "block shuffling", digest §1.3.2).
//!
//! Traversal reads whole 4 KiB edge pages, so a page read is worth more when the other edge
//! lists on it belong to vertices the traversal is about to expand: the neighbours of the
//! vertex it came for. The quality measure is Starling's *overlap ratio*: the mean over
//! vertices u of |N(u) ∩ Page(u)| / (slots_per_page − 1).
//!
//! Two heuristics, both deterministic:
//! * **BNP** (block neighbour padding): open a page with a seed vertex and fill it with
//!   unassigned vertices in breadth-first order from the seed, so the seed's neighbours come
//!   first. The next page is seeded from the previous page's unexplored frontier (it borders
//!   what was just placed), falling back to the lowest unassigned id for a new component.
//! * **BNF** (block neighbour frequency): move each vertex to the page holding most of its
//!   neighbours (out- and in-neighbours, since u on v's page helps v's overlap as much as
//!   u's) if that page has room. BNP leaves every page but the last full, so a plain move
//!   rarely applies; the vertex then swaps with the member of the target page whose exchange
//!   gains most (a light form of Starling's swap refinement, BNS). Moves and swaps are made
//!   only when they strictly increase the number of edges inside pages, so refinement never
//!   lowers the overlap ratio and terminates.
//!
//! The edge file gets the minimum number of pages, ceil(n / slots_per_page); BNP fills every
//! page but the last, and BNF only moves vertices into pages with room or swaps them.
//!
//! BNF and the in-neighbour lists it needs run on several threads (`refine.rs` says how the
//! result stays independent of their number); BNP is one thread's quick walk.

mod incoming;
mod padding;
mod parallel;
mod refine;

pub use refine::RefineOptions;

use crate::VertexId;
use std::fmt;

const UNASSIGNED: u32 = u32::MAX;

/// Default number of BNF refinement passes.
pub const DEFAULT_REFINE_PASSES: usize = 4;

/// Default vertices per refinement batch (see `refine.rs`).
pub const DEFAULT_REFINE_BATCH: usize = 1024;

impl RefineOptions {
    /// The default passes and regions, refined on `threads` threads.
    pub fn with_threads(threads: usize) -> Self {
        RefineOptions {
            passes: DEFAULT_REFINE_PASSES,
            batch: DEFAULT_REFINE_BATCH,
            threads,
        }
    }
}

/// Vertex -> (edge page, slot in page).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub page_of: Vec<u32>,
    pub slot_of: Vec<u16>,
    pub pages: u32,
    /// The page capacity the placement was computed for. Recorded because a placement packs
    /// neighbours per page: one computed for 4 KiB side-file pages fits 8 KiB relation pages
    /// slot for slot but fills only half of each, so a writer must be able to refuse it.
    pub slots_per_page: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacementError(pub String);

impl fmt::Display for PlacementError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PlacementError {}

impl Placement {
    /// Checks that every one of `vertices` vertices has a distinct in-range (page, slot).
    pub fn validate(&self, vertices: usize, slots_per_page: usize) -> Result<(), PlacementError> {
        let err = |m: String| Err(PlacementError(m));
        if self.page_of.len() != vertices || self.slot_of.len() != vertices {
            return err(format!(
                "placement covers {} / {} vertices, the graph has {vertices}",
                self.page_of.len(),
                self.slot_of.len()
            ));
        }
        let mut taken = vec![false; self.pages as usize * slots_per_page];
        for v in 0..vertices {
            let (page, slot) = (self.page_of[v] as usize, self.slot_of[v] as usize);
            if page >= self.pages as usize || slot >= slots_per_page {
                return err(format!(
                    "vertex {v} placed at page {page} slot {slot}, outside the file"
                ));
            }
            let cell = &mut taken[page * slots_per_page + slot];
            if *cell {
                return err(format!(
                    "vertex {v} shares page {page} slot {slot} with another vertex"
                ));
            }
            *cell = true;
        }
        Ok(())
    }

    /// Vertex in each (page, slot) cell, indexed `page * slots_per_page + slot`; `u32::MAX`
    /// marks an empty slot. Assumes a validated placement.
    pub fn members(&self, slots_per_page: usize) -> Vec<VertexId> {
        let mut cells = vec![UNASSIGNED; self.pages as usize * slots_per_page];
        for (v, (&page, &slot)) in self.page_of.iter().zip(&self.slot_of).enumerate() {
            cells[page as usize * slots_per_page + slot as usize] = v as VertexId;
        }
        cells
    }
}

fn check_slots_per_page(slots_per_page: usize) -> Result<(), PlacementError> {
    if slots_per_page == 0 || slots_per_page > u16::MAX as usize {
        return Err(PlacementError(format!(
            "slots_per_page {slots_per_page} is outside 1..={}",
            u16::MAX
        )));
    }
    Ok(())
}

/// Vertex i at page i / slots_per_page, slot i % slots_per_page: the baseline placement.
pub fn identity_placement(
    vertices: usize,
    slots_per_page: usize,
) -> Result<Placement, PlacementError> {
    check_slots_per_page(slots_per_page)?;
    Ok(Placement {
        page_of: (0..vertices).map(|v| (v / slots_per_page) as u32).collect(),
        slot_of: (0..vertices).map(|v| (v % slots_per_page) as u16).collect(),
        pages: vertices.div_ceil(slots_per_page) as u32,
        slots_per_page: slots_per_page as u32,
    })
}

/// BNP greedy fill followed by the default BNF refinement on one thread.
pub fn greedy_placement(
    adjacency: &[Vec<VertexId>],
    slots_per_page: usize,
) -> Result<Placement, PlacementError> {
    greedy_placement_with(adjacency, slots_per_page, &RefineOptions::with_threads(1))
}

/// BNP greedy fill followed by BNF refinement as `refine` says.
pub fn greedy_placement_with(
    adjacency: &[Vec<VertexId>],
    slots_per_page: usize,
    refine: &RefineOptions,
) -> Result<Placement, PlacementError> {
    greedy_placement_until(adjacency, slots_per_page, refine, &|_, _| false)
        .map(|placed| placed.expect("a placement that is never stopped finishes"))
}

/// [`greedy_placement_with`], calling `between_batches(done, most)` on the calling thread
/// before each batch of the refinement (about a millisecond apart), with the vertices refined
/// so far over all passes and the most there can be; `None` when it returned true (stop).
/// A 1M-row refinement takes half a minute: long enough to show progress, too long for a
/// cancelled CREATE INDEX to wait out.
pub fn greedy_placement_until(
    adjacency: &[Vec<VertexId>],
    slots_per_page: usize,
    refine: &RefineOptions,
    between_batches: &dyn Fn(u64, u64) -> bool,
) -> Result<Option<Placement>, PlacementError> {
    check_slots_per_page(slots_per_page)?;
    check_neighbour_ids(adjacency)?;
    let mut page_of = padding::neighbour_padding(adjacency, slots_per_page);
    let pages = adjacency.len().div_ceil(slots_per_page);
    if refine.passes > 0 {
        let incoming = incoming::reverse_adjacency(adjacency, refine.threads);
        let refined = refine::refine(
            adjacency,
            &incoming,
            page_of,
            pages,
            slots_per_page,
            refine,
            between_batches,
        );
        match refined {
            Some(refined) => page_of = refined,
            None => return Ok(None),
        }
    }
    Ok(Some(assign_slots(page_of, pages, slots_per_page)))
}

fn check_neighbour_ids(adjacency: &[Vec<VertexId>]) -> Result<(), PlacementError> {
    let n = adjacency.len();
    for (u, list) in adjacency.iter().enumerate() {
        if let Some(&bad) = list.iter().find(|&&v| v as usize >= n) {
            return Err(PlacementError(format!(
                "vertex {u} has neighbour {bad}, but the graph has {n} vertices"
            )));
        }
    }
    Ok(())
}

fn assign_slots(page_of: Vec<u32>, pages: usize, slots_per_page: usize) -> Placement {
    let mut next_slot = vec![0u16; pages];
    let slot_of = page_of
        .iter()
        .map(|&p| {
            let s = next_slot[p as usize];
            next_slot[p as usize] += 1;
            s
        })
        .collect();
    Placement {
        page_of,
        slot_of,
        pages: pages as u32,
        slots_per_page: slots_per_page as u32,
    }
}

fn overlap_of_pages(adjacency: &[Vec<VertexId>], page_of: &[u32], slots_per_page: usize) -> f64 {
    if adjacency.is_empty() || slots_per_page < 2 {
        return 0.0;
    }
    let total: f64 = adjacency
        .iter()
        .enumerate()
        .map(|(u, list)| {
            let same = list
                .iter()
                .filter(|&&v| v as usize != u && page_of[v as usize] == page_of[u])
                .count();
            same as f64 / (slots_per_page - 1) as f64
        })
        .sum();
    total / adjacency.len() as f64
}

/// Starling's overlap ratio: mean over vertices u of |N(u) ∩ Page(u)| / (slots_per_page − 1).
/// 0 for an empty graph or one slot per page.
pub fn overlap_ratio(
    adjacency: &[Vec<VertexId>],
    placement: &Placement,
    slots_per_page: usize,
) -> f64 {
    overlap_of_pages(adjacency, &placement.page_of, slots_per_page)
}

#[cfg(test)]
mod tests;
