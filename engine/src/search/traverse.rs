//! The traversal over edge pages: hops of `W` pages read as one batch, owner stamps checked,
//! new neighbours scored with PQ.

use rustc_hash::FxHashMap as HashMap;
use std::io;

use super::{check_loaded, check_page_number, IndexSource, SearchCursor};
use crate::storage::EdgeLocation;
use crate::VertexId;

impl<S: IndexSource> SearchCursor<'_, S> {
    /// The first pass's traversal: expands the list's closest unexpanded candidates, `W` per
    /// hop, until none is left (or the safety cap on expansions is reached).
    pub(super) fn traverse(&mut self) -> io::Result<()> {
        let cap = self.list.capacity * self.params.max_expansions_per_pass;
        let mut expansions = 0;
        let mut retries: HashMap<VertexId, u32> = HashMap::default();
        loop {
            // Checked before candidates are claimed: a claimed one counts as expanded.
            if expansions >= cap {
                return Ok(());
            }
            let mut frontier = std::mem::take(&mut self.frontier);
            self.list
                .take_frontier(self.params.beam_width, &mut frontier);
            if frontier.is_empty() {
                self.frontier = frontier;
                return Ok(());
            }
            expansions += frontier.len();
            let result = self.hop(&frontier, &mut retries);
            self.frontier = frontier;
            result?;
        }
    }

    /// Reads the pages of `frontier` as one batch and expands the vertices on them.
    pub(super) fn hop(
        &mut self,
        frontier: &[VertexId],
        retries: &mut HashMap<VertexId, u32>,
    ) -> io::Result<()> {
        let layout = self.source.edge_layout();
        let page_size = layout.page_size();
        let mut located: Vec<(VertexId, EdgeLocation)> = Vec::with_capacity(frontier.len());
        for &v in frontier {
            match self.source.entry(v) {
                Some(e) if e.is_live() => located.push((v, e.edge)),
                _ => {} // vanished vertex: nothing to expand
            }
        }
        let mut pages: Vec<u32> = located.iter().map(|(_, loc)| loc.page).collect();
        pages.sort_unstable();
        pages.dedup();
        self.counters.hops += 1;
        if !pages.is_empty() {
            self.page_buf.resize(pages.len() * page_size, 0);
            let page_cache_before = self.source.page_cache_bytes();
            let cached = self.source.read_edge_pages(&pages, &mut self.page_buf)?;
            self.counters.edge_pages_read += pages.len() as u64;
            self.counters.edge_page_cache_hits += cached;
            self.counters.edge_pages_from_page_cache +=
                (self.source.page_cache_bytes() - page_cache_before) / page_size as u64;
            self.counters.bytes_read += (pages.len() as u64 - cached) * page_size as u64;
            self.counters.read_batches += 1;
        }
        // The packed emulation is about the first pass; resumed passes load what they rerank.
        if self.params.packed && self.passes == 1 {
            self.load_packed(&located)?;
        }
        let page_buf = std::mem::take(&mut self.page_buf);
        let mut neighbours: Vec<VertexId> = Vec::new();
        for &(v, loc) in &located {
            let index = pages.binary_search(&loc.page).expect("page was requested");
            let page = &page_buf[index * page_size..(index + 1) * page_size];
            check_page_number(&layout, page, loc.page)?;
            match layout.slot_owned_by(page, loc.slot as usize, v) {
                Some(slot) => {
                    self.counters.expanded += 1;
                    neighbours.extend(slot.neighbours());
                    if self.params.record_lists {
                        self.lists.insert(v, (loc, slot.to_vec()));
                    }
                }
                None => self.stale_slot(v, loc, retries)?,
            }
        }
        if self.params.colocated {
            for (index, _) in pages.iter().enumerate() {
                let page = &page_buf[index * page_size..(index + 1) * page_size];
                for s in 0..layout.slots_per_page() {
                    let slot = layout.slot(page, s);
                    // Every candidate of the list was scored, so an owner the visited set
                    // lacks is no candidate: one hash lookup instead of a scan of the list.
                    if slot.is_free()
                        || !self.visited.contains(&slot.owner())
                        || !self.list.claim(slot.owner())
                    {
                        continue;
                    }
                    // Only trust the co-resident list if the indirection still points here.
                    let here = self
                        .source
                        .entry(slot.owner())
                        .is_some_and(|e| e.edge.page == pages[index] && e.edge.slot as usize == s);
                    if here {
                        self.counters.colocated_lists_used += 1;
                        self.counters.expanded += 1;
                        neighbours.extend(slot.neighbours());
                    } else {
                        self.list.unclaim(slot.owner());
                    }
                }
            }
        }
        self.page_buf = page_buf;
        // Unseen neighbours first, with a prefetch of each one's PQ code, then their
        // distances: the codes' cache misses (the first load of a code was 42% of the hop in
        // a perf annotate in memory) overlap instead of coming one after another.
        neighbours.retain(|&u| self.visited.insert(u));
        for &u in &neighbours {
            self.source.prefetch_pq_code(u);
        }
        for u in neighbours {
            self.score_unvisited(u);
        }
        Ok(())
    }

    /// A slot no longer owned by `v`: its list moved since we resolved it (an insert relocated
    /// it). Re-resolve; if the indirection still names the same slot the file is corrupt.
    fn stale_slot(
        &mut self,
        v: VertexId,
        loc: EdgeLocation,
        retries: &mut HashMap<VertexId, u32>,
    ) -> io::Result<()> {
        self.counters.stale_slots += 1;
        let now = self.source.entry(v).map(|e| e.edge);
        let tries = retries.entry(v).or_insert(0);
        *tries += 1;
        if now == Some(loc) && self.params.state_may_lag {
            // The slot was reused after the state's generation: the list this state knew
            // is gone from the disk, and the state does not know where it went.
            return Ok(());
        }
        if now == Some(loc) || *tries > 3 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "edge slot {} of page {} does not belong to vertex {v}, \
                     though the indirection table points there",
                    loc.slot, loc.page
                ),
            ));
        }
        self.list.unclaim(v);
        self.stale.push(v);
        Ok(())
    }

    /// Packed-layout emulation: the expanded vertices' vectors come with their pages.
    fn load_packed(&mut self, located: &[(VertexId, EdgeLocation)]) -> io::Result<()> {
        let dim = self.query.len();
        let ids: Vec<VertexId> = located
            .iter()
            .map(|&(v, _)| v)
            .filter(|v| self.loaded.get(*v, dim).is_none())
            .collect();
        if ids.is_empty() {
            return Ok(());
        }
        let mut vectors = Vec::with_capacity(ids.len() * dim);
        let mut tids = Vec::with_capacity(ids.len());
        let bytes = self.source.load_vectors(&ids, &mut vectors, &mut tids)?;
        check_loaded(&ids, dim, &vectors, &tids)?;
        self.counters.packed_vector_loads += ids.len() as u64;
        self.counters.bytes_read += bytes;
        self.loaded.insert_batch(&ids, &vectors, &tids);
        Ok(())
    }
}
