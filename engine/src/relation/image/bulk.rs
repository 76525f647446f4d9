//! The [`Reader`]'s passes over the bulk kinds, edge pages and vectors, which only the full
//! [`RelationImage::read_named`] decodes.

use super::{Reader, RelationImage};
use crate::pages::edge::EdgeLayout;
use crate::pages::{self, PageKind, BLOCK_SIZE, EXTENT_BLOCKS};
use crate::relation::apply::Geometry;
use crate::storage::{IndirEntry, StorageError};

impl Reader<'_> {
    /// Every edge page verified (or new); every published vertex's current list found.
    pub(super) fn edges(
        &mut self,
        image: &mut RelationImage,
        layout: &EdgeLayout,
    ) -> Result<(), StorageError> {
        let map = &image.extent_map;
        let n = image.entries.len();
        let ids = image.allocator.vertex_capacity;
        image.adjacency = vec![Vec::new(); n];
        let mut found = vec![false; n];
        for p in 0..image.allocator.edge_pages {
            let block = self.read_maybe_new(map, PageKind::Edge, p)?;
            if pages::is_new(&self.page) {
                continue; // a published list here is reported below as not found
            }
            layout
                .verify(&self.page, block, p)
                .map_err(|e| self.page_error(e))?;
            for s in 0..layout.slots_per_page() {
                let slot = layout.slot(&self.page, s);
                let owner = slot.owner();
                let current = |e: &IndirEntry| e.edge.page == p && e.edge.slot as usize == s;
                let Some(Some(e)) = image.entries.get(owner as usize) else {
                    continue; // free, or a freed vertex's stale list
                };
                if slot.is_free() || !current(e) {
                    continue; // a list that moved away
                }
                let list = slot.to_vec();
                if let Some(&bad) = list.iter().find(|&&w| u64::from(w) >= ids) {
                    return Err(self.corrupt(format!(
                        "edge page {p} (block {block}) slot {s}: vertex {owner} has neighbour \
                         {bad}, past the {ids} ids of the indirection pages"
                    )));
                }
                image.adjacency[owner as usize] = list;
                found[owner as usize] = true;
            }
        }
        if let Some(v) = (0..n).find(|&v| image.entries[v].is_some() && !found[v]) {
            return Err(self.corrupt(format!(
                "vertex {v}'s entry {:?} points at an edge slot that does not hold its list",
                image.entries[v]
            )));
        }
        Ok(())
    }

    /// Each extent's pages at once (slots straddle pages); published slots must carry their
    /// vertex and its entry's heap TID, on written pages.
    pub(super) fn vectors(
        &mut self,
        image: &mut RelationImage,
        g: &Geometry,
    ) -> Result<(), StorageError> {
        let vectors = &g.vectors;
        let map = &image.extent_map;
        let n = image.entries.len();
        let published_end = image
            .entries
            .iter()
            .rposition(Option::is_some)
            .map_or(0, |v| v + 1);
        self.need(
            map,
            PageKind::Vector,
            vectors.pages_for(published_end as u64),
        )?;
        let dim = image.meta.dim as usize;
        image.vectors = vec![0.0; n * dim];
        let capacity = map.capacity(PageKind::Vector);
        let spe = vectors.slots_per_extent() as usize;
        let mut extent = Vec::new();
        let mut new = Vec::new();
        let mut slot = vec![0u8; vectors.slot_size()];
        for e in 0..capacity.div_ceil(EXTENT_BLOCKS) {
            let first = e * EXTENT_BLOCKS;
            let count = (capacity - first).min(EXTENT_BLOCKS);
            extent.resize(count as usize * BLOCK_SIZE, 0);
            new.clear();
            for k in 0..count {
                self.read_maybe_new(map, PageKind::Vector, first + k)?;
                let at = k as usize * BLOCK_SIZE;
                extent[at..at + BLOCK_SIZE].copy_from_slice(&self.page);
                new.push(pages::is_new(&self.page));
            }
            let slots = (e as usize * spe).min(n)..((e as usize + 1) * spe).min(n);
            for v in slots {
                let Some(entry) = image.entries[v] else {
                    continue;
                };
                let (page, pages) = vectors.page_span(v as u32);
                let block = map.block(PageKind::Vector, first + page).unwrap_or(0);
                if (page..page + pages).any(|k| new[k as usize]) {
                    return Err(self.corrupt(format!(
                        "vector slot {v} (from block {block}) of published vertex {v} is on a \
                         new page"
                    )));
                }
                vectors.gather(v as u32, &extent, 0, &mut slot)?;
                let parsed = vectors.layout().parse_slot(&slot)?;
                if parsed.owner() != v as u32 || parsed.tid() != entry.tid {
                    return Err(self.corrupt(format!(
                        "vector slot {v} (from block {block}) holds owner {} and TID {:?}; \
                         vertex {v}'s entry has TID {:?}",
                        parsed.owner(),
                        parsed.tid(),
                        entry.tid
                    )));
                }
                parsed.copy_vector_into(&mut image.vectors[v * dim..(v + 1) * dim]);
            }
        }
        Ok(())
    }
}
