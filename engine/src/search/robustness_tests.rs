//! Searches that must not trust what they read: deleted vertices, edge lists moved under a
//! reader, corrupt slots, and queries or parameters rejected before any I/O.

use super::tests::{brute_force, queries, row, MemorySource};
use super::*;
use crate::storage::FLAG_DELETED;
use crate::storage::{EdgeLocation, IndirEntry, PAGE_SIZE};

#[test]
fn deleted_vertices_are_traversed_but_not_returned() {
    let mut src = MemorySource::build(800, 8, 11);
    let q = row(&queries(1, 8), 8, 0).to_vec();
    let truth = brute_force(&src.vectors, 8, &q, 5);
    for &(id, _) in &truth {
        src.entries[id as usize].flags |= FLAG_DELETED;
    }
    let (hits, _) = search(&mut src, &q, SearchParams::default()).unwrap();
    assert_eq!(hits.len(), 10);
    assert!(hits.iter().all(|h| !truth.iter().any(|t| t.0 == h.id)));
}

#[test]
fn moved_edge_list_is_re_resolved() {
    let mut src = MemorySource::build(400, 8, 12);
    // Move every list of page 0 to a fresh page; the old slots now belong to nobody.
    let layout = src.layout;
    let old = src.pages[0].clone();
    let new_no = src.pages.len() as u32;
    let mut fresh = vec![0u8; PAGE_SIZE];
    layout.init_page(&mut fresh, new_no);
    for s in 0..layout.slots_per_page() {
        let slot = layout.slot(&old, s);
        layout
            .put_slot(&mut fresh, s, slot.owner(), &slot.to_vec())
            .unwrap();
        layout.free_slot(&mut src.pages[0], s);
        src.entries[slot.owner() as usize].edge = EdgeLocation {
            page: new_no,
            slot: s as u16,
        };
    }
    layout.seal(&mut fresh);
    layout.seal(&mut src.pages[0]);
    src.pages.push(fresh);
    // A reader that resolved before the move sees the freed slot: simulate by pointing
    // vertex 0 at the old location for its first read only.
    struct Racy {
        inner: MemorySource,
        stale_once: bool,
    }
    impl IndexSource for Racy {
        type PqTable = Vec<f32>;
        fn metric(&self) -> Metric {
            Metric::L2
        }
        fn dim(&self) -> usize {
            self.inner.dim
        }
        fn edge_layout(&self) -> EdgePageLayout {
            self.inner.layout
        }
        fn entry(&self, v: VertexId) -> Option<IndirEntry> {
            let mut e = self.inner.entry(v)?;
            if v == 0 && self.stale_once {
                e.edge = EdgeLocation { page: 0, slot: 0 };
            }
            Some(e)
        }
        fn pq_table(&self, q: &[f32]) -> Vec<f32> {
            q.to_vec()
        }
        fn pq_distance(&self, t: &Vec<f32>, v: VertexId) -> f32 {
            self.inner.pq_distance(t, v)
        }
        fn entry_points(&self, _: &[f32], _: usize, _: &mut SearchCounters) -> Vec<VertexId> {
            vec![0]
        }
        fn medoid(&self) -> VertexId {
            0
        }
        fn id_bound(&self) -> VertexId {
            self.inner.id_bound()
        }
        fn read_edge_pages(&mut self, pages: &[u32], out: &mut [u8]) -> io::Result<u64> {
            let r = self.inner.read_edge_pages(pages, out);
            self.stale_once = false;
            r
        }
        fn load_vectors(
            &mut self,
            ids: &[VertexId],
            v: &mut Vec<f32>,
            t: &mut Vec<HeapTid>,
        ) -> io::Result<u64> {
            self.inner.load_vectors(ids, v, t)
        }
    }
    let q = row(&src.vectors, 8, 0).to_vec();
    let mut racy = Racy {
        inner: src,
        stale_once: true,
    };
    let (hits, c) = search(&mut racy, &q, SearchParams::default()).unwrap();
    assert_eq!(c.stale_slots, 1);
    assert_eq!(hits[0].id, 0);
    assert_eq!(hits[0].distance, 0.0);

    // A slot that does not match although the indirection points there is corruption.
    let mut src = racy.inner;
    src.entries[5].edge = src.entries[6].edge;
    let q = row(&src.vectors, 8, 5).to_vec();
    let params = SearchParams {
        use_entrance: false,
        ..SearchParams::default()
    };
    src.medoid = 5;
    let err = search(&mut src, &q, params).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    assert!(
        err.to_string().contains("does not belong to vertex 5"),
        "{err}"
    );
}

#[test]
fn bad_queries_and_params_are_rejected() {
    let mut src = MemorySource::build(100, 8, 13);
    let err = |r: io::Result<SearchCursor<'_, MemorySource>>| r.err().unwrap().to_string();
    assert!(err(SearchCursor::new(
        &mut src,
        &[0.0; 7],
        SearchParams::default()
    ))
    .contains("7 dimensions, the index has 8"));
    let mut nan = vec![0.0; 8];
    nan[3] = f32::NAN;
    assert!(
        err(SearchCursor::new(&mut src, &nan, SearchParams::default())).contains("invalid query")
    );
    let zero_k = SearchParams {
        k: 0,
        ..SearchParams::default()
    };
    assert!(err(SearchCursor::new(&mut src, &[0.0; 8], zero_k)).contains("k must be"));
    let zero_w = SearchParams {
        casr: CasrMode::Window(0),
        ..SearchParams::default()
    };
    assert!(err(SearchCursor::new(&mut src, &[0.0; 8], zero_w)).contains("window"));
    assert!(prepare_query(Metric::Cosine, 2, &[0.0, 0.0]).is_err());
    let unit = prepare_query(Metric::Cosine, 2, &[3.0, 4.0]).unwrap();
    assert!((unit[0] - 0.6).abs() < 1e-6 && (unit[1] - 0.8).abs() < 1e-6);
}
