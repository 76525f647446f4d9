//! Whole-index passes over the current edge lists without holding the graph in memory:
//! reachability from the entry points (VACUUM's reconnect, `navis_verify`) and the in-degree
//! census behind the restoration of lost back-edges.
//!
//! Both used to load every current list into a `Vec<Vec<VertexId>>`: about 230 bytes a
//! vertex, 231 MB at 1M rows, outside any PostgreSQL memory budget. In a 384 MiB memory group
//! the kernel's OOM killer ended such a VACUUM and with it the server (benchmarks/results/
//! compare.md). What is held now is one byte per vertex plus what the work itself names.
//!
//! Reachability is computed by sweeps: each sequential pass over the edge pages expands the
//! lists of the vertices reached so far, in page order, so a vertex reached at a page the pass
//! has not come to yet is expanded in the same pass. Those reached behind the pass (their list
//! lies on a page already read) are pending; when few remain they are expanded by reading
//! their own pages (a walk from them), otherwise another pass runs. Graphs a
//! search can traverse are shallow (the entrance graph starts it close to everything), so a
//! few passes suffice; a chain laid out against page order costs passes, bounded by the walk.

use super::vacuum::interrupted;
use crate::index::{Index, IndexError};
use crate::storage::state::Field;
use crate::storage::EdgeLocation;
use crate::VertexId;
use std::sync::atomic::Ordering;

/// Pages per read of a sweep.
pub(super) const SCAN_PAGES: usize = 256;

/// A random page read costs about this many pages of a sequential sweep: pending vertices
/// are walked by their own pages while fewer than the sweep's pages over this.
const RANDOM_READ_COST: usize = 8;

impl Index {
    /// The vertex ids a whole-index pass covers: those the state has handed out and the
    /// indirection table holds.
    pub(super) fn id_bound(&self) -> usize {
        let files = self.files();
        (files.state().get(Field::NextVertex) as usize).min(files.indirection().capacity())
    }

    /// Reads the edge pages sequentially, `SCAN_PAGES` at a time, and calls `visit` with
    /// every list that is its owner's current one (the indirection table points at its slot)
    /// and the page it lies on. Free pages and pages that fail their checksum (being rewritten
    /// by an insert right now, so holding no list that is current yet) are skipped; `cancel`
    /// is checked per read, `pages_read` counts the pages read.
    pub(super) fn for_each_current_list(
        &self,
        cancel: &dyn Fn() -> bool,
        pages_read: &mut u64,
        mut visit: impl FnMut(VertexId, &[VertexId], u32),
    ) -> Result<(), IndexError> {
        let files = self.files();
        let layout = files.edge_layout();
        let page_size = layout.page_size();
        let table = files.indirection();
        let bulk = files.bulk();
        let last =
            (files.state().get(Field::EdgePages) as usize).min(bulk.edge_page_count()? as usize);
        let mut buf = vec![0u8; SCAN_PAGES * page_size];
        let mut list = Vec::with_capacity(layout.max_degree());
        let mut first = 0;
        while first < last {
            if cancel() {
                return Err(interrupted());
            }
            let count = SCAN_PAGES.min(last - first);
            let chunk = &mut buf[..count * page_size];
            bulk.read_edge_pages(first as u32, count, chunk)?;
            *pages_read += count as u64;
            for (i, page) in chunk.chunks_exact(page_size).enumerate() {
                let page_no = (first + i) as u32;
                if files.state().page_live(page_no).load(Ordering::Acquire) == 0
                    || bulk.verify_edge_page(&layout, page, page_no).is_err()
                {
                    continue;
                }
                for s in 0..layout.slots_per_page() {
                    let slot = layout.slot(page, s);
                    let here = EdgeLocation {
                        page: page_no,
                        slot: s as u16,
                    };
                    if slot.is_free() || table.entry(slot.owner()).map(|e| e.edge) != Some(here) {
                        continue; // free, or a stale copy of a list that has moved
                    }
                    list.clear();
                    list.extend(slot.neighbours());
                    visit(slot.owner(), &list, page_no);
                }
            }
            first += count;
        }
        Ok(())
    }

    /// Where a search starts: the entrance graph's vertices and the medoid, those published.
    pub(super) fn search_starts(&self, bound: usize) -> Vec<VertexId> {
        let files = self.files();
        let table = files.indirection();
        self.entrance()
            .ids()
            .iter()
            .copied()
            .chain(std::iter::once(files.manifest().medoid))
            .filter(|&s| (s as usize) < bound && table.entry(s).is_some())
            .collect()
    }

    /// `reached[v]` for every published vertex below [`Index::id_bound`] that a search can
    /// reach from [`Index::search_starts`] over current lists.
    pub(super) fn reachable(
        &self,
        cancel: &dyn Fn() -> bool,
        pages_read: &mut u64,
    ) -> Result<Vec<bool>, IndexError> {
        let sweep_pages = self.files().state().get(Field::EdgePages) as usize;
        self.reachable_walking_below(sweep_pages / RANDOM_READ_COST, cancel, pages_read)
    }

    /// [`Index::reachable`], walking the vertices a sweep left behind by their own pages once
    /// at most `walk_below` remain (tests force pure sweeps with 0 and one sweep with MAX).
    fn reachable_walking_below(
        &self,
        walk_below: usize,
        cancel: &dyn Fn() -> bool,
        pages_read: &mut u64,
    ) -> Result<Vec<bool>, IndexError> {
        let bound = self.id_bound();
        let table = self.files().indirection();
        let mut reached = vec![false; bound];
        for s in self.search_starts(bound) {
            reached[s as usize] = true;
        }
        loop {
            let mut behind: Vec<VertexId> = Vec::new();
            self.for_each_current_list(cancel, pages_read, |owner, list, page| {
                // (an insert running alongside may publish ids at or past `bound`)
                if !reached.get(owner as usize).copied().unwrap_or(false) {
                    return;
                }
                for &w in list {
                    let Some(entry) = table.entry(w).filter(|_| (w as usize) < bound) else {
                        continue;
                    };
                    if !reached[w as usize] {
                        reached[w as usize] = true;
                        if entry.edge.page <= page {
                            behind.push(w); // its page is read already (or is this one)
                        }
                    }
                }
            })?;
            if behind.len() <= walk_below {
                self.reach_further(&behind, &mut reached, cancel, pages_read)?;
                return Ok(reached);
            }
        }
    }

    /// Marks in `reached` what `from` (already marked) leads to, reading each newly reached
    /// vertex's list from its own page: a depth-first walk that stops at marked vertices.
    pub(super) fn reach_further(
        &self,
        from: &[VertexId],
        reached: &mut [bool],
        cancel: &dyn Fn() -> bool,
        pages_read: &mut u64,
    ) -> Result<(), IndexError> {
        let files = self.files();
        let table = files.indirection();
        let layout = files.edge_layout();
        let mut page = vec![0u8; layout.page_size()];
        let mut queue: Vec<VertexId> = from.to_vec();
        let mut walked = 0usize;
        while let Some(u) = queue.pop() {
            walked += 1;
            if walked.is_multiple_of(1024) && cancel() {
                return Err(interrupted());
            }
            let Some(entry) = table.entry(u) else {
                continue;
            };
            files.read_edge_page(entry.edge.page, &mut page)?;
            *pages_read += 1;
            // A list an insert moved since the entry was read is skipped, as a sweep skips
            // pages being rewritten: at worst a reachable vertex is linked once more.
            let Some(list) = layout.slot_owned_by(&page, entry.edge.slot as usize, u) else {
                continue;
            };
            for w in list.neighbours() {
                if (w as usize) < reached.len() && !reached[w as usize] && table.entry(w).is_some()
                {
                    reached[w as usize] = true;
                    queue.push(w);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::index::{build_index, BuildPhase, Index, IndexParams};
    use crate::storage::HeapTid;
    use crate::VertexId;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// Reachability by a walk over every current list held in memory: what the sweeps
    /// replace, as the reference.
    fn reference(index: &Index) -> Vec<bool> {
        let bound = index.id_bound();
        let mut lists = vec![Vec::new(); bound];
        index
            .for_each_current_list(&|| false, &mut 0, |owner, list, _| {
                lists[owner as usize] = list.to_vec();
            })
            .unwrap();
        let table = index.files().indirection();
        let mut reached = vec![false; bound];
        let mut queue = index.search_starts(bound);
        for &s in &queue {
            reached[s as usize] = true;
        }
        while let Some(u) = queue.pop() {
            for &w in &lists[u as usize] {
                if (w as usize) < bound && !reached[w as usize] && table.entry(w).is_some() {
                    reached[w as usize] = true;
                    queue.push(w);
                }
            }
        }
        reached
    }

    #[test]
    fn sweeps_and_walks_reach_what_a_walk_over_the_whole_graph_reaches() {
        // Clustered points and a small degree: clusters hang off few edges, so the graph has
        // depth and some vertices are reached only late.
        let (n, dim) = (3000, 8);
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let centres: Vec<f32> = (0..20 * dim).map(|_| rng.gen_range(-50.0..50.0)).collect();
        let data: Vec<f32> = (0..n)
            .flat_map(|i| {
                let c = (i * 7919) % 20;
                let centre = centres[c * dim..(c + 1) * dim].to_vec();
                centre
                    .into_iter()
                    .map(|x| x + rng.gen_range(-1.0..1.0))
                    .collect::<Vec<f32>>()
            })
            .collect();
        let tids: Vec<HeapTid> = (0..n as u32)
            .map(|i| HeapTid {
                block: i,
                offset: 1,
            })
            .collect();
        let tmp = tempfile::tempdir().unwrap();
        let params = IndexParams {
            max_degree: 4,
            build_list: 8,
            pq_bytes: Some(4),
            threads: 1,
            ..IndexParams::default()
        };
        build_index(
            tmp.path(),
            &data,
            &tids,
            &params,
            &|_: BuildPhase, _, _| {},
            &|| false,
        )
        .unwrap();
        let index = Index::open(tmp.path()).unwrap();
        let table = index.files().indirection();
        let expected = reference(&index);
        assert!(expected.iter().filter(|&&r| r).count() > n / 2);
        let pages = index
            .files()
            .state()
            .get(crate::storage::state::Field::EdgePages) as u64;

        let mut swept = 0;
        let pure_sweeps = index
            .reachable_walking_below(0, &|| false, &mut swept)
            .unwrap();
        assert_eq!(pure_sweeps, expected, "sweeps until none is left behind");
        assert!(swept > pages, "{swept} pages read: more than one sweep");

        let mut walked = 0;
        let one_sweep = index
            .reachable_walking_below(usize::MAX, &|| false, &mut walked)
            .unwrap();
        assert_eq!(one_sweep, expected, "one sweep, then walks");
        assert!(walked > pages, "the walk read pages of its own ({walked})");

        let mut read = 0;
        assert_eq!(index.reachable(&|| false, &mut read).unwrap(), expected);

        // A walk from a marked vertex marks exactly what it leads to that was not marked.
        let bound = index.id_bound();
        let start = (0..bound as VertexId)
            .find(|&v| table.entry(v).is_some())
            .unwrap();
        let mut alone = vec![false; bound];
        alone[start as usize] = true;
        index
            .reach_further(&[start], &mut alone, &|| false, &mut read)
            .unwrap();
        assert!(alone.iter().filter(|&&r| r).count() > 1);
        assert!(index
            .reachable_walking_below(0, &|| true, &mut read)
            .is_err_and(|e| matches!(e, crate::index::IndexError::Cancelled)));
    }
}
