//! The allocator's state a relation's pages imply (RFC 0001 §10): derived from which vertices
//! are published and where their lists are, never stored.

use crate::storage::IndirEntry;
use crate::VertexId;

/// The allocator's state as the runtime copy starts it (RFC 0001 §10): derived from which
/// vertices are published and where their lists are, never stored. Free lists are ascending,
/// so a runtime that pushes them highest first hands out low ids and pages first, as
/// `update::recover` does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Allocator {
    /// Ids the indirection pages' runs hold: ids below it need no growth.
    pub vertex_capacity: u64,
    /// Edge pages in the extent map's runs; each is either holding current lists or free.
    pub edge_pages: u32,
    /// Current lists (entries pointing at it) per edge page ordinal below `edge_pages`.
    pub live: Vec<u32>,
    /// Ids below `len()` that are not published.
    pub free_vertices: Vec<VertexId>,
    /// Edge pages without current lists.
    pub free_pages: Vec<u32>,
    pub published: u32,
    pub deleted: u32,
}

impl Allocator {
    /// Derives the allocator from `entries` (every id below the last published one), the
    /// indirection capacity and the edge pages' capacity; fails (with a detail) when an entry
    /// names an edge page beyond the runs or a slot beyond a page.
    pub(super) fn derive(
        entries: &[Option<IndirEntry>],
        vertex_capacity: u64,
        edge_pages: u32,
        slots_per_page: usize,
    ) -> Result<Allocator, String> {
        let mut a = Allocator {
            vertex_capacity,
            edge_pages,
            live: vec![0; edge_pages as usize],
            ..Allocator::default()
        };
        for (v, e) in entries.iter().enumerate() {
            let Some(e) = e else {
                a.free_vertices.push(v as VertexId);
                continue;
            };
            if e.edge.page >= edge_pages || e.edge.slot as usize >= slots_per_page {
                return Err(format!(
                    "vertex {v}'s list is at edge page {} slot {}, beyond the {edge_pages} \
                     edge pages of {slots_per_page} slots",
                    e.edge.page, e.edge.slot
                ));
            }
            a.live[e.edge.page as usize] += 1;
            a.published += 1;
            a.deleted += e.is_deleted() as u32;
        }
        a.free_pages = (0..edge_pages)
            .filter(|&p| a.live[p as usize] == 0)
            .collect();
        Ok(a)
    }
}
