//! Structural verification of an index (`navis_verify` in SQL): reads every edge page and the
//! whole indirection table and checks what readers and writers rely on. Meant for a quiescent
//! index (tests run it after concurrent phases); under concurrent writes the page counts may
//! legitimately be mid-update.

use crate::index::storage_to_io;
use crate::index::Index;
use crate::storage::state::{Field, NONE};
use crate::storage::EdgeLocation;
use crate::VertexId;
use std::collections::HashSet;
use std::sync::atomic::Ordering;

/// What [`Index::verify`] found. `problems` holds the first few descriptions; the counts are
/// complete.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VerifyReport {
    pub vertices: u64,
    pub deleted: u64,
    pub free_vertices: u64,
    pub edge_pages: u64,
    pub free_pages: u64,
    pub edges: u64,
    /// Edges to ids that are not published (an insert cut short, or a vertex freed while an
    /// insert linked to it). Harmless: readers skip them.
    pub dangling_edges: u64,
    /// Edges to lazily deleted vertices (traversable until consolidation repairs them).
    pub edges_to_deleted: u64,
    /// Live, undeleted vertices no search can reach from the entry points.
    pub unreachable: u64,
    pub problem_count: u64,
    pub problems: Vec<String>,
}

impl VerifyReport {
    pub fn is_clean(&self) -> bool {
        self.problem_count == 0 && self.unreachable == 0
    }

    fn problem(&mut self, what: String) {
        self.problem_count += 1;
        if self.problems.len() < 20 {
            self.problems.push(what);
        }
    }
}

impl Index {
    /// Checks slot stamps, indirection entries, degree bounds, page live counts, both free
    /// lists, the state's counts, and reachability of every live vertex from the entry
    /// points (entrance graph and medoid).
    pub fn verify(&self) -> std::io::Result<VerifyReport> {
        let files = self.files();
        let layout = files.edge_layout();
        let state = files.state();
        let table = files.indirection();
        let mut report = VerifyReport::default();
        let next_vertex = state.get(Field::NextVertex) as usize;
        let edge_pages = state.get(Field::EdgePages) as usize;
        report.edge_pages = edge_pages as u64;
        if next_vertex > table.capacity() {
            report.problem(format!(
                "state names {next_vertex} vertex ids but the indirection table holds {}",
                table.capacity()
            ));
        }
        let bulk = files.bulk();
        let file_pages = bulk.edge_page_count().map_err(storage_to_io)? as usize;

        // Indirection entries and the edge lists they point at.
        // Lists are checked as they are read; none is kept (a 1M-row index's lists are
        // ~230 MB in memory), reachability sweeps the pages again below.
        let mut live_per_page = vec![0u32; edge_pages.max(file_pages)];
        let mut published = 0u64;
        let mut page = vec![0u8; layout.page_size()];
        let mut loaded_page = u32::MAX;
        let ids = 0..next_vertex.min(table.capacity()) as VertexId;
        for v in ids {
            let Some(entry) = table.entry(v) else {
                continue;
            };
            published += 1;
            report.deleted += entry.is_deleted() as u64;
            let EdgeLocation { page: p, slot } = entry.edge;
            if p as usize >= file_pages || p as usize >= edge_pages {
                report.problem(format!(
                    "vertex {v} points at edge page {p}, beyond the file"
                ));
                continue;
            }
            live_per_page[p as usize] += 1;
            if loaded_page != p {
                bulk.read_edge_pages(p, 1, &mut page)
                    .map_err(storage_to_io)?;
                if let Err(e) = bulk.verify_edge_page(&layout, &page, p) {
                    report.problem(format!("edge page {p}: {e}"));
                    loaded_page = u32::MAX;
                    continue;
                }
                loaded_page = p;
            }
            if slot as usize >= layout.slots_per_page() {
                report.problem(format!("vertex {v} points at slot {slot} of page {p}"));
                continue;
            }
            match layout.slot_owned_by(&page, slot as usize, v) {
                Some(list) => {
                    if list.degree() > layout.max_degree() {
                        report.problem(format!("vertex {v} has degree {}", list.degree()));
                    }
                    for u in list.neighbours() {
                        report.edges += 1;
                        if u == v {
                            report.problem(format!("vertex {v} links to itself"));
                        }
                        match table.entry(u) {
                            None => report.dangling_edges += 1,
                            Some(e) if e.is_deleted() => report.edges_to_deleted += 1,
                            Some(_) => {}
                        }
                    }
                }
                None => report.problem(format!(
                    "slot {slot} of page {p} is stamped {} but vertex {v} points there",
                    layout.slot(&page, slot as usize).owner()
                )),
            }
        }
        report.vertices = published;

        // The state's counts and lists.
        if state.get(Field::Published) as u64 != published {
            report.problem(format!(
                "state counts {} published vertices, the table has {published}",
                state.get(Field::Published)
            ));
        }
        if state.get(Field::Deleted) as u64 != report.deleted {
            report.problem(format!(
                "state counts {} deleted vertices, the table has {}",
                state.get(Field::Deleted),
                report.deleted
            ));
        }
        for (p, &count) in live_per_page.iter().enumerate().take(edge_pages) {
            let recorded = state.page_live(p as u32).load(Ordering::Acquire);
            if recorded != count {
                report.problem(format!(
                    "edge page {p} records {recorded} live lists, {count} point at it"
                ));
            }
        }
        let mut seen = HashSet::new();
        let free_pages = state.free_pages();
        let free_set: HashSet<u32> = free_pages.iter().copied().collect();
        for (p, &count) in live_per_page.iter().enumerate().take(edge_pages) {
            if count == 0 && !free_set.contains(&(p as u32)) {
                report.problem(format!("edge page {p} is neither used nor free (leaked)"));
            }
        }
        for p in free_pages {
            report.free_pages += 1;
            if !seen.insert(p) || p as usize >= edge_pages {
                report.problem(format!("free-page list is corrupt at page {p}"));
                break;
            }
            if live_per_page[p as usize] != 0 {
                report.problem(format!("free page {p} holds current edge lists"));
            }
        }
        if report.free_pages != state.get(Field::FreePageCount) as u64 {
            report.problem(format!(
                "free-page list has {} pages, its count says {}",
                report.free_pages,
                state.get(Field::FreePageCount)
            ));
        }
        let mut seen = HashSet::new();
        let mut v = state.get(Field::FreeVertexHead);
        while v != NONE {
            report.free_vertices += 1;
            if !seen.insert(v) || v as usize >= next_vertex {
                report.problem(format!("free-vertex list is corrupt at vertex {v}"));
                break;
            }
            if table.entry(v).is_some() {
                report.problem(format!("free vertex {v} is published"));
            }
            v = table.free_link(v).unwrap_or(NONE);
        }
        if report.free_vertices != state.get(Field::FreeVertexCount) as u64 {
            report.problem(format!(
                "free-vertex list has {} ids, its count says {}",
                report.free_vertices,
                state.get(Field::FreeVertexCount)
            ));
        }

        // Reachability over current lists from every entry point a search may start from.
        let mut pages_read = 0;
        let reached = self
            .reachable(&|| false, &mut pages_read)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))?;
        report.unreachable = (0..next_vertex)
            .filter(|&v| {
                !reached.get(v).copied().unwrap_or(false) && self.is_live_undeleted(v as VertexId)
            })
            .count() as u64;
        Ok(report)
    }
}
