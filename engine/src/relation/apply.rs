//! The page-apply functions: what each change of the write seam
//! ([`crate::update::IndexLog`], RFC 0001 §10) does to each page of the relation it touches.
//! This is the redo vocabulary: PostgreSQL's redo of a navis record calls exactly these on the
//! buffer (or restored bulk page) of each block reference, and [`super::StoreLog`] calls them
//! on pages it reads and writes back. So they work on one `&mut [u8]` page given to them,
//! never on a store, and every one is idempotent: applying a change twice leaves the page as
//! applying it once (redo may meet a page that already has the change, and full-page images
//! make that the normal case).
//!
//! A change names pages by (kind, ordinal) ([`PageRef`]); the extent map turns an ordinal into
//! a block. [`footprint`] lists the pages of a change, [`apply`] applies it to one of them:
//! a page that is new (all zeros: extended, never written) is formatted first, any other must
//! verify as that page (kind, block, ordinal, CRC), and the page is sealed (engine CRC) last.
//! The LSN and PostgreSQL's checksum are the caller's. Footprints, in the style of
//! `nbtxlog.h` (what each record's block references are):
//!
//! ```text
//! EDGE_PAGE (IndexLog::edge_page, EdgePageChange)
//!   edge page `page`        whole page: the lists of `lists`, each in its slot, stamped with
//!                           its vertex; every other slot free (edge_page_image). A bulk page:
//!                           written whole, never read or verified first (so a torn page is
//!                           repaired).
//!   indirection pages       of each listed vertex: `old = None` publishes it (LIVE, the
//!                           change's TID, its new location); `old = Some` relocates it (flags
//!                           and TID kept). The old slot's page is NOT touched: out-of-place
//!                           writes leave stale lists, which owner stamps and the entries
//!                           make harmless.
//! VECTOR (IndexLog::vector, VectorChange)
//!   vector pages            the 1..3 pages the vertex's slot spans (slot v = vertex v): the
//!                           slot's bytes on each (vector, TID, owner v)
//!   indirection page        the vertex's TID word (edge word kept: not yet published)
//!   code page               the vertex's PQ code
//! DELETE_FLAGS (IndexLog::delete_flags, ids)
//!   indirection pages       DELETED set on each published id on the page
//! FREE (IndexLog::free_vertices, ids)
//!   indirection pages       each id's entry zeroed (the allocator is derived, so a free id
//!                           is just a zero entry; no free-list link is stored)
//! PROMOTE (IndexLog::promote, offset, record)
//!   promotions pages        the 1..n pages holding stream bytes offset..offset+len: the
//!                           record's bytes on each (pages::promotions)
//! ```

use crate::pages::codes::CodePages;
use crate::pages::edge::EdgeLayout;
use crate::pages::meta::Meta;
use crate::pages::vector::VectorPages;
use crate::pages::{self, indirection, promotions, PageKind, BLOCK_SIZE, EXTENT_BLOCKS};
use crate::storage::{
    EdgeLocation, EdgePageLayout, IndirEntry, StorageError, FLAG_LIVE, PAGE_SIZE,
};
use crate::update::{EdgePageChange, VectorChange};
use crate::VertexId;

/// The page geometry of one index, from its metapage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub edges: EdgeLayout,
    pub vectors: VectorPages,
    pub codes: CodePages,
}

impl Geometry {
    pub fn of(meta: &Meta) -> Result<Geometry, StorageError> {
        Ok(Geometry {
            edges: EdgeLayout::new(meta.max_degree as usize)?,
            vectors: VectorPages::new(meta.dim as usize)?,
            codes: CodePages::new(meta.pq_bytes as usize)?,
        })
    }
}

/// One page of the relation, named as changes name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PageRef {
    pub kind: PageKind,
    pub ordinal: u32,
}

/// One change of the write seam, as a value.
#[derive(Clone, Copy, Debug)]
pub enum Change<'a> {
    EdgePage(&'a EdgePageChange<'a>),
    Vector(&'a VectorChange<'a>),
    DeleteFlags(&'a [VertexId]),
    Free(&'a [VertexId]),
    Promote { offset: u64, record: &'a [u8] },
}

fn indirection_page(v: VertexId) -> PageRef {
    PageRef {
        kind: PageKind::Indirection,
        ordinal: indirection::locate(v).0,
    }
}

/// The vector-page ordinals holding slot `v`.
fn vector_ordinals(g: &Geometry, v: VertexId) -> std::ops::Range<u32> {
    let (extent, _) = g.vectors.extent_of(v);
    let (first, count) = g.vectors.page_span(v);
    let base = extent * EXTENT_BLOCKS + first;
    base..base + count
}

/// The pages `change` touches, in the order [`super::StoreLog`] writes them: bulk pages
/// first, then the buffer-managed pages that make them reachable (RFC 0001 §10: nothing may
/// point at a page before it is written). Sorted and without duplicates within each group.
pub fn footprint(g: &Geometry, change: &Change<'_>) -> Vec<PageRef> {
    let mut tail: Vec<PageRef> = match change {
        Change::EdgePage(c) => c.lists.iter().map(|l| indirection_page(l.vertex)).collect(),
        Change::Vector(c) => vec![
            PageRef {
                kind: PageKind::Codes,
                ordinal: g.codes.locate(c.vertex).0,
            },
            indirection_page(c.vertex),
        ],
        Change::DeleteFlags(ids) | Change::Free(ids) => {
            ids.iter().map(|&v| indirection_page(v)).collect()
        }
        Change::Promote { offset, record } => promotions::ordinals(*offset, record.len())
            .map(|ordinal| PageRef {
                kind: PageKind::Promotions,
                ordinal,
            })
            .collect(),
    };
    tail.sort_unstable();
    tail.dedup();
    let head: Vec<PageRef> = match change {
        Change::EdgePage(c) => vec![PageRef {
            kind: PageKind::Edge,
            ordinal: c.page,
        }],
        Change::Vector(c) => vector_ordinals(g, c.vertex)
            .map(|ordinal| PageRef {
                kind: PageKind::Vector,
                ordinal,
            })
            .collect(),
        _ => Vec::new(),
    };
    head.into_iter().chain(tail).collect()
}

/// Formats `page` as an empty page of `at` at `block`.
pub fn init_page(g: &Geometry, page: &mut [u8], at: PageRef, block: u32) {
    match at.kind {
        PageKind::Edge => g.edges.init_page(page, block, at.ordinal),
        PageKind::Vector => g.vectors.init_page(page, block, at.ordinal),
        PageKind::Indirection => indirection::init_page(page, block, at.ordinal),
        PageKind::Codes => g.codes.init_page(page, block, at.ordinal),
        PageKind::Promotions => promotions::init_page(page, block, at.ordinal),
        other => {
            pages::init(page, other, block);
            pages::set_aux(page, at.ordinal);
        }
    }
}

/// Applies `change` to `page`, page `at` of its footprint at `block`, and seals it. A new
/// page is formatted first; any other must verify as `at` at `block`.
pub fn apply(
    g: &Geometry,
    change: &Change<'_>,
    page: &mut [u8],
    at: PageRef,
    block: u32,
) -> Result<(), StorageError> {
    if let (Change::EdgePage(c), PageKind::Edge) = (change, at.kind) {
        // Written whole, so whatever the page held (a torn write included) is not read:
        // this is how redo repairs a torn bulk page.
        if c.page != at.ordinal {
            return Err(not_in_footprint(change, at));
        }
        return edge_page_image(g, c, block, page);
    }
    if pages::is_new(page) {
        init_page(g, page, at, block);
    } else {
        pages::verify_ordinal(page, at.kind, block, at.ordinal)
            .map_err(|e| e.into_storage(std::path::Path::new("<page>")))?;
    }
    let on_page = |v: VertexId| indirection_page(v) == at;
    match (change, at.kind) {
        (Change::EdgePage(c), PageKind::Indirection) => {
            for l in c.lists.iter().filter(|l| on_page(l.vertex)) {
                let to = EdgeLocation {
                    page: c.page,
                    slot: l.slot,
                };
                match l.old {
                    None => indirection::publish(
                        page,
                        l.vertex,
                        IndirEntry {
                            edge: to,
                            tid: c.tid,
                            flags: FLAG_LIVE,
                        },
                    ),
                    Some(old) => relocate(page, l.vertex, old, to)?,
                }
            }
        }
        (Change::Vector(c), PageKind::Vector)
            if vector_ordinals(g, c.vertex).contains(&at.ordinal) =>
        {
            let mut slot = vec![0u8; g.vectors.slot_size()];
            g.vectors
                .layout()
                .encode_slot(&mut slot, c.vector, c.vertex, c.tid)?;
            // The slot's pieces are numbered within its extent; copy the ones on this page.
            let in_extent = at.ordinal % EXTENT_BLOCKS;
            let mut done = 0;
            for piece in g.vectors.pieces(c.vertex) {
                if piece.page == in_extent {
                    page[piece.offset..piece.offset + piece.len]
                        .copy_from_slice(&slot[done..done + piece.len]);
                }
                done += piece.len;
            }
        }
        (Change::Vector(c), PageKind::Codes) if g.codes.locate(c.vertex).0 == at.ordinal => {
            g.codes.set_code(page, c.vertex, c.code)?;
        }
        (Change::Vector(c), PageKind::Indirection) if on_page(c.vertex) => {
            indirection::set_tid(page, c.vertex, c.tid);
        }
        (Change::DeleteFlags(ids), PageKind::Indirection) => {
            for &v in ids.iter().filter(|&&v| on_page(v)) {
                indirection::mark_deleted(page, v);
            }
        }
        (Change::Free(ids), PageKind::Indirection) => {
            for &v in ids.iter().filter(|&&v| on_page(v)) {
                indirection::set_words(page, v, 0, 0);
            }
        }
        (Change::Promote { offset, record }, PageKind::Promotions)
            if promotions::ordinals(*offset, record.len()).contains(&at.ordinal) =>
        {
            promotions::write(page, at.ordinal, *offset, record);
        }
        _ => return Err(not_in_footprint(change, at)),
    }
    pages::seal(page);
    Ok(())
}

fn not_in_footprint(change: &Change<'_>, at: PageRef) -> StorageError {
    let what = match change {
        Change::EdgePage(c) => format!("the edge-page change of page {}", c.page),
        Change::Vector(c) => format!("the vector change of vertex {}", c.vertex),
        Change::DeleteFlags(ids) => format!("delete flags of {} vertices", ids.len()),
        Change::Free(ids) => format!("the freeing of {} vertices", ids.len()),
        Change::Promote { offset, record } => {
            format!("the promotion of {} bytes at {offset}", record.len())
        }
    };
    StorageError::invalid(format!(
        "{} page {} is not touched by {what}",
        at.kind.name(),
        at.ordinal
    ))
}

/// Relocates `v` from `old` to `to`; already at `to` is the change applied before. Anything
/// else means the change does not follow the page's history: refused.
fn relocate(
    page: &mut [u8],
    v: VertexId,
    old: EdgeLocation,
    to: EdgeLocation,
) -> Result<(), StorageError> {
    match indirection::entry(page, v) {
        Some(e) if e.is_live() && (e.edge == old || e.edge == to) => {
            indirection::relocate(page, v, to).map(|_| ())
        }
        other => Err(StorageError::invalid(format!(
            "relocating vertex {v} from {old:?} to {to:?}, but its entry is {other:?}"
        ))),
    }
}

/// Writes the relation edge page of `change` at `block` into `out` (8 KiB): edge page
/// `change.page`, the lists of `change.lists` in their slots, every other slot free, sealed.
///
/// `change.image` is the page the update code built, in either format: a 4 KiB side-file
/// page (`storage::EdgePageLayout::new`, what `update::write_lists` builds today) or an 8 KiB
/// relation page (`pages::edge`). Only the slots `change.lists` names are taken from it, each
/// checked to be stamped with its vertex, so the relation page holds exactly the lists the
/// change publishes or relocates, whatever else the image carried.
pub fn edge_page_image(
    g: &Geometry,
    change: &EdgePageChange<'_>,
    block: u32,
    out: &mut [u8],
) -> Result<(), StorageError> {
    edge_page_with(&g.edges, change, block, out)
}

/// [`edge_page_image`] given only the edge-page layout, which is all it uses: an open index
/// rebuilds the page its log wrote this way to cache exactly that page
/// (`IndexFiles::edge_page_as_logged`).
pub fn edge_page_with(
    edges: &EdgeLayout,
    change: &EdgePageChange<'_>,
    block: u32,
    out: &mut [u8],
) -> Result<(), StorageError> {
    let max_degree = edges.max_degree();
    let read: Box<dyn Fn(usize) -> (VertexId, Vec<VertexId>)> = match change.image.len() {
        BLOCK_SIZE => Box::new(|s| {
            let slot = edges.slot(change.image, s);
            (slot.owner(), slot.to_vec())
        }),
        PAGE_SIZE => {
            let side = EdgePageLayout::new(max_degree)?;
            if change
                .lists
                .iter()
                .any(|l| l.slot as usize >= side.slots_per_page())
            {
                return Err(StorageError::invalid(
                    "edge list slot beyond the side-file page",
                ));
            }
            Box::new(move |s| {
                let slot = side.slot(change.image, s);
                (slot.owner(), slot.to_vec())
            })
        }
        len => {
            return Err(StorageError::invalid(format!(
                "an edge page image of {len} bytes is neither a side-file nor a relation page"
            )))
        }
    };
    let mut slots: Vec<u16> = change.lists.iter().map(|l| l.slot).collect();
    slots.sort_unstable();
    if slots.windows(2).any(|w| w[0] == w[1]) {
        return Err(StorageError::invalid(format!(
            "edge page {}: two lists of the change share a slot",
            change.page
        )));
    }
    edges.init_page(out, block, change.page);
    for l in change.lists {
        if l.slot as usize >= edges.slots_per_page() {
            return Err(StorageError::invalid(format!(
                "edge slot {} beyond the {} of a relation page",
                l.slot,
                edges.slots_per_page()
            )));
        }
        let (owner, list) = read(l.slot as usize);
        if owner != l.vertex {
            return Err(StorageError::invalid(format!(
                "edge page {} slot {} of the image holds vertex {owner}, the change says {}",
                change.page, l.slot, l.vertex
            )));
        }
        edges.put_slot(out, l.slot as usize, l.vertex, &list)?;
    }
    edges.seal(out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{HeapTid, FLAG_DELETED};
    use crate::update::PlacedList;

    fn geometry(dim: u32, max_degree: u32, pq_bytes: u32) -> Geometry {
        Geometry {
            edges: EdgeLayout::new(max_degree as usize).unwrap(),
            vectors: VectorPages::new(dim as usize).unwrap(),
            codes: CodePages::new(pq_bytes as usize).unwrap(),
        }
    }

    fn tid(block: u32) -> HeapTid {
        HeapTid { block, offset: 3 }
    }

    #[test]
    fn a_vector_slot_is_applied_page_by_page_to_the_pages_it_spans() {
        let g = geometry(1536, 16, 16);
        let v = 1; // 6156-byte slots: slot 1 straddles pages 0 and 1
        let vector: Vec<f32> = (0..1536).map(|i| i as f32 * 0.5).collect();
        let code = vec![9u8; 16];
        let change = VectorChange {
            vertex: v,
            vector: &vector,
            tid: tid(77),
            code: &code,
        };
        let c = Change::Vector(&change);
        let at = footprint(&g, &c);
        let kinds: Vec<PageKind> = at.iter().map(|p| p.kind).collect();
        use PageKind::*;
        assert_eq!(kinds, [Vector, Vector, Indirection, Codes]);
        let mut pages = vec![0u8; 2 * BLOCK_SIZE];
        for (i, page) in pages.chunks_exact_mut(BLOCK_SIZE).enumerate().rev() {
            apply(&g, &c, page, at[i], 40 + i as u32).unwrap();
            let once = page.to_vec();
            apply(&g, &c, page, at[i], 40 + i as u32).unwrap();
            assert_eq!(page, &once[..], "idempotent");
            g.vectors
                .verify_page(page, 40 + i as u32, i as u32)
                .unwrap();
        }
        let mut slot = vec![0u8; g.vectors.slot_size()];
        g.vectors.gather(v, &pages, 0, &mut slot).unwrap();
        let parsed = g.vectors.layout().parse_slot(&slot).unwrap();
        assert_eq!((parsed.owner(), parsed.tid()), (v, tid(77)));
        let mut back = vec![0f32; 1536];
        parsed.copy_vector_into(&mut back);
        assert_eq!(back, vector);
        // Slot 0 on page 0 is still free; the code and the TID land on their pages.
        g.vectors.gather(0, &pages, 0, &mut slot).unwrap();
        assert!(g.vectors.layout().parse_slot(&slot).unwrap().owner() == u32::MAX);
        let mut page = vec![0u8; BLOCK_SIZE];
        apply(&g, &c, &mut page, at[3], 9).unwrap();
        assert_eq!(g.codes.code(&page, v), &code[..]);
        let mut page = vec![0u8; BLOCK_SIZE];
        apply(&g, &c, &mut page, at[2], 8).unwrap();
        assert_eq!(
            indirection::entry(&page, v),
            None,
            "a TID alone does not publish"
        );
        assert_eq!(indirection::words(&page, v).1 as u32, 77);
        // A page outside the footprint, or another block's page, is refused.
        let other = PageRef {
            kind: Codes,
            ordinal: 5,
        };
        assert!(apply(&g, &c, &mut page, other, 8).is_err());
        assert!(apply(&g, &c, &mut page, at[2], 9).is_err());
    }

    #[test]
    fn edge_pages_are_rebuilt_from_either_image_and_entries_follow_their_history() {
        let g = geometry(8, 16, 4);
        let side = EdgePageLayout::new(16).unwrap();
        let mut image = vec![0u8; PAGE_SIZE];
        side.init_page(&mut image, 5);
        side.put_slot(&mut image, 0, 600, &[1, 2, 3]).unwrap();
        side.put_slot(&mut image, 1, 7, &[600]).unwrap();
        side.put_slot(&mut image, 2, 8, &[9]).unwrap(); // not in the change: not copied
        side.seal(&mut image);
        let old = EdgeLocation { page: 0, slot: 4 };
        let lists = [
            PlacedList {
                vertex: 600,
                slot: 0,
                old: None,
            },
            PlacedList {
                vertex: 7,
                slot: 1,
                old: Some(old),
            },
        ];
        let change = EdgePageChange {
            page: 5,
            image: &image,
            lists: &lists,
            tid: tid(12),
        };
        let c = Change::EdgePage(&change);
        let at = footprint(&g, &c);
        assert_eq!(at.len(), 3, "the edge page and two indirection pages");
        // A torn page is simply overwritten.
        let mut page = vec![0xA5u8; BLOCK_SIZE];
        apply(&g, &c, &mut page, at[0], 300).unwrap();
        g.edges.verify(&page, 300, 5).unwrap();
        assert_eq!(g.edges.slot(&page, 0).to_vec(), [1, 2, 3]);
        assert_eq!(g.edges.slot(&page, 1).owner(), 7);
        assert!(g.edges.slot(&page, 2).is_free());
        // Vertex 7 was published at `old`; 600 is published now.
        let mut entries = vec![0u8; BLOCK_SIZE];
        indirection::init_page(&mut entries, 20, 0);
        let e7 = IndirEntry {
            edge: old,
            tid: tid(1),
            flags: FLAG_LIVE | FLAG_DELETED,
        };
        indirection::publish(&mut entries, 7, e7);
        pages::seal(&mut entries);
        for _ in 0..2 {
            apply(&g, &c, &mut entries, at[1], 20).unwrap();
        }
        let moved = indirection::entry(&entries, 7).unwrap();
        assert_eq!(
            (moved.edge, moved.tid, moved.flags),
            (EdgeLocation { page: 5, slot: 1 }, tid(1), e7.flags)
        );
        let mut second = vec![0u8; BLOCK_SIZE];
        apply(&g, &c, &mut second, at[2], 21).unwrap();
        let e600 = indirection::entry(&second, 600).unwrap();
        assert_eq!(
            (e600.edge.slot, e600.tid, e600.flags),
            (0, tid(12), FLAG_LIVE)
        );
        // Deleted, then freed: the entry is zero again, twice or once.
        let ids = [600, 601];
        for c in [Change::DeleteFlags(&ids), Change::DeleteFlags(&ids)] {
            apply(&g, &c, &mut second, at[2], 21).unwrap();
        }
        assert!(indirection::entry(&second, 600).unwrap().is_deleted());
        assert_eq!(
            indirection::entry(&second, 601),
            None,
            "unpublished: left alone"
        );
        for c in [Change::Free(&ids), Change::Free(&ids)] {
            apply(&g, &c, &mut second, at[2], 21).unwrap();
        }
        assert_eq!(indirection::words(&second, 600), (0, 0));
        // A relocation that does not follow the entry's history is refused.
        indirection::relocate(&mut entries, 7, EdgeLocation { page: 9, slot: 9 }).unwrap();
        pages::seal(&mut entries);
        assert!(apply(&g, &c, &mut entries, at[1], 20).is_err());
        // An image whose slot holds another vertex, or two lists in one slot, is refused.
        let mut bad = lists;
        bad[1].vertex = 8;
        let change = EdgePageChange {
            lists: &bad,
            ..change
        };
        assert!(edge_page_image(&g, &change, 300, &mut page).is_err());
        let shared = [
            lists[0],
            PlacedList {
                slot: 0,
                ..lists[0]
            },
        ];
        let change = EdgePageChange {
            lists: &shared,
            ..change
        };
        let err = edge_page_image(&g, &change, 300, &mut page).unwrap_err();
        assert!(err.to_string().contains("share a slot"), "{err}");
    }

    #[test]
    fn a_promotion_spans_the_pages_of_its_bytes() {
        let g = geometry(8, 16, 4);
        let record = promotions::record(&[5u8; 9000]);
        let c = Change::Promote {
            offset: 8000,
            record: &record,
        };
        let at = footprint(&g, &c);
        let ordinals: Vec<u32> = at.iter().map(|p| p.ordinal).collect();
        assert_eq!(ordinals, [0, 1, 2]);
        let mut stream = Vec::new();
        for (i, &p) in at.iter().enumerate() {
            let mut page = vec![0u8; BLOCK_SIZE];
            apply(&g, &c, &mut page, p, 50 + i as u32).unwrap();
            promotions::verify(&page, 50 + i as u32, i as u32).unwrap();
            stream.extend_from_slice(pages::payload(&page));
        }
        assert_eq!(&stream[8000..8000 + record.len()], &record[..]);
        assert!(stream[..8000].iter().all(|&b| b == 0));
    }
}
