//! [`StoreLog`] and the page-apply functions against a model: a built relation takes a
//! sequence of changes like inserts and VACUUM make them (every change applied twice), and
//! [`RelationImage`] must decode exactly the state the model tracked, with the allocator it
//! derives, after every kind grew past the build's runs.

use super::apply::{footprint, Change};
use super::*;
use crate::dataset::synthetic_clustered;
use crate::entrance::EntranceGraph;
use crate::index::IndexParams;
use crate::pages::edge::EdgeLayout;
use crate::pages::extent::ExtentMap;
use crate::pages::{promotions, PageKind};
use crate::pq::ProductQuantizer;
use crate::search::{CasrMode, SearchParams};
use crate::storage::{
    EdgeLocation, EdgePageLayout, IndirEntry, FLAG_DELETED, FLAG_LIVE, PAGE_SIZE,
};
use crate::store::{FileStore, MemStore};
use crate::update::{EdgePageChange, IndexLog, PlacedList, VectorChange};
use crate::{Metric, VertexId};
use std::collections::BTreeSet;

const DIM: usize = 32;
const R: usize = 16;
/// 920 vertices fill 16 vector pages (931 slots), 2 indirection pages (1018 ids) and one code
/// page of 8-byte codes (1019), so a few hundred more ids grow every kind.
const N: usize = 920;

fn params() -> IndexParams {
    IndexParams {
        metric: Metric::L2,
        dim: Some(DIM),
        max_degree: R,
        build_list: 32,
        pq_bytes: Some(8),
        threads: 2,
        ..IndexParams::default()
    }
}

fn tid(i: u32) -> HeapTid {
    HeapTid {
        block: i / 40 + 3,
        offset: (i % 40 + 1) as u16,
    }
}

fn build(store: &dyn PageStore, rows: &[f32]) -> RelationImage {
    let tids: Vec<HeapTid> = (0..N as u32).map(tid).collect();
    let none = |_: crate::index::BuildPhase, _: u64, _: u64| {};
    build_relation(store, &rows[..N * DIM], &tids, &params(), 9, &none, &|| {
        false
    })
    .unwrap();
    RelationImage::read(store).unwrap()
}

fn blocks(store: &dyn PageStore, map: &ExtentMap, g: &apply::Geometry, c: &Change) -> Vec<u8> {
    let mut out = Vec::new();
    let mut page = vec![0u8; BLOCK_SIZE];
    for at in footprint(g, c) {
        store
            .read_block(map.block(at.kind, at.ordinal).unwrap(), &mut page)
            .unwrap();
        out.extend_from_slice(&page);
    }
    out
}

/// Applies `c` through its `IndexLog` method, then again through `StoreLog::apply`: the
/// second application must change no byte of its footprint.
fn twice<S: PageStore>(log: &StoreLog<S>, c: Change) {
    match c {
        Change::EdgePage(e) => log.edge_page(e),
        Change::Vector(v) => log.vector(v),
        Change::DeleteFlags(ids) => log.delete_flags(ids),
        Change::Free(ids) => log.free_vertices(ids),
        Change::Promote { offset, record } => log.promote(offset, record),
    }
    .unwrap();
    let (map, g) = (log.extent_map(), log.geometry());
    let once = blocks(log.store(), &map, g, &c);
    log.apply(&c).unwrap();
    assert_eq!(
        once,
        blocks(log.store(), &map, g, &c),
        "{c:?} is idempotent"
    );
}

/// The state the changes should leave.
struct Model {
    entries: Vec<Option<IndirEntry>>,
    adjacency: Vec<Vec<VertexId>>,
    vectors: Vec<Vec<f32>>,
    codes: Vec<Vec<u8>>,
    free_ids: BTreeSet<VertexId>,
    next_page: u32,
    promotions: Vec<u8>,
    pages_written: u32,
}

impl Model {
    fn of(image: &RelationImage) -> Model {
        let n = image.len();
        Model {
            entries: image.entries.clone(),
            adjacency: image.adjacency.clone(),
            vectors: (0..n as u32).map(|v| image.vector(v).to_vec()).collect(),
            codes: (0..n as u32).map(|v| image.code(v).to_vec()).collect(),
            free_ids: BTreeSet::new(),
            next_page: image.allocator.edge_pages - image.allocator.free_pages.len() as u32,
            promotions: Vec::new(),
            pages_written: 0,
        }
    }

    fn live(&self) -> Vec<u32> {
        let mut live = vec![0u32; self.next_page as usize];
        for e in self.entries.iter().flatten() {
            live[e.edge.page as usize] += 1;
        }
        live
    }

    /// The lowest page without current lists (an emptied page is reused, stale lists and
    /// all), else the next new one.
    fn page(&mut self) -> u32 {
        match self.live().iter().position(|&l| l == 0) {
            Some(p) => p as u32,
            None => {
                self.next_page += 1;
                self.next_page - 1
            }
        }
    }

    fn id(&mut self) -> VertexId {
        if let Some(v) = self.free_ids.pop_first() {
            return v;
        }
        self.entries.push(None);
        self.adjacency.push(Vec::new());
        self.vectors.push(Vec::new());
        self.codes.push(Vec::new());
        self.entries.len() as VertexId - 1
    }

    fn published(&self) -> impl Iterator<Item = VertexId> + '_ {
        (0..self.entries.len() as VertexId).filter(|&v| self.entries[v as usize].is_some())
    }

    /// Writes `lists` to one fresh page (side-file or relation format) through `log`, then
    /// applies the change to the model.
    fn write<S: PageStore>(
        &mut self,
        log: &StoreLog<S>,
        lists: &[(VertexId, Vec<VertexId>)],
        t: HeapTid,
    ) {
        let page = self.page();
        self.pages_written += 1;
        let side = self.pages_written.is_multiple_of(2) && lists.len() <= 50;
        let image = if side {
            let layout = EdgePageLayout::new(R).unwrap();
            let mut image = vec![0u8; PAGE_SIZE];
            layout.init_page(&mut image, page);
            for (s, (v, list)) in lists.iter().enumerate() {
                layout.put_slot(&mut image, s, *v, list).unwrap();
            }
            layout.seal(&mut image);
            image
        } else {
            let layout = EdgeLayout::new(R).unwrap();
            let mut image = vec![0u8; BLOCK_SIZE];
            layout.init_page(&mut image, 0, page);
            for (s, (v, list)) in lists.iter().enumerate() {
                layout.put_slot(&mut image, s, *v, list).unwrap();
            }
            image
        };
        let placed: Vec<PlacedList> = lists
            .iter()
            .enumerate()
            .map(|(s, (v, _))| PlacedList {
                vertex: *v,
                slot: s as u16,
                old: self.entries[*v as usize].map(|e| e.edge),
            })
            .collect();
        let change = EdgePageChange {
            page,
            image: &image,
            lists: &placed,
            tid: t,
        };
        twice(log, Change::EdgePage(&change));
        for (l, (v, list)) in placed.iter().zip(lists) {
            let edge = EdgeLocation { page, slot: l.slot };
            let e = &mut self.entries[*v as usize];
            *e = Some(match *e {
                Some(old) => IndirEntry { edge, ..old },
                None => IndirEntry {
                    edge,
                    tid: t,
                    flags: FLAG_LIVE,
                },
            });
            self.adjacency[*v as usize] = list.clone();
        }
    }

    /// An insert: vector and code, then one page with the new list and three back-edges.
    fn insert<S: PageStore>(
        &mut self,
        log: &StoreLog<S>,
        pq: &ProductQuantizer,
        vector: &[f32],
        t: HeapTid,
    ) -> VertexId {
        let v = self.id();
        let code = pq.encode(vector);
        let change = VectorChange {
            vertex: v,
            vector,
            tid: t,
            code: &code,
        };
        twice(log, Change::Vector(&change));
        self.vectors[v as usize] = vector.to_vec();
        self.codes[v as usize] = code;
        let mut near: Vec<(f32, VertexId)> = self
            .published()
            .filter(|&u| !self.entries[u as usize].unwrap().is_deleted())
            .map(|u| {
                (
                    Metric::L2.search_distance(vector, &self.vectors[u as usize]),
                    u,
                )
            })
            .collect();
        near.sort_by(|a, b| a.0.total_cmp(&b.0));
        let list: Vec<VertexId> = near.iter().take(8).map(|&(_, u)| u).collect();
        let mut lists = vec![(v, list.clone())];
        for &u in &list[..3] {
            let mut back = self.adjacency[u as usize].clone();
            back.truncate(R - 1);
            back.push(v);
            lists.push((u, back));
        }
        self.write(log, &lists, t);
        v
    }
}

/// Checks the image of `store` against `model`; returns it.
fn check(store: &dyn PageStore, model: &Model) -> RelationImage {
    let image = RelationImage::read(store).unwrap();
    let len = model.published().last().map_or(0, |v| v as usize + 1);
    assert_eq!(image.len(), len);
    assert_eq!(image.unmapped_blocks, 0);
    for v in 0..len {
        assert_eq!(image.entries[v], model.entries[v], "vertex {v}");
        if image.entries[v].is_some() {
            assert_eq!(image.adjacency[v], model.adjacency[v], "vertex {v}");
            assert_eq!(image.vector(v as u32), model.vectors[v].as_slice());
            assert_eq!(image.code(v as u32), model.codes[v].as_slice());
        }
    }
    let a = &image.allocator;
    let capacity = image.extent_map.capacity(PageKind::Edge);
    assert_eq!(a.edge_pages, capacity);
    let mut live = model.live();
    live.resize(capacity as usize, 0);
    assert_eq!(a.live, live);
    let free: Vec<u32> = (0..capacity).filter(|&p| live[p as usize] == 0).collect();
    assert_eq!(a.free_pages, free);
    let free_ids: Vec<VertexId> = (0..len as u32)
        .filter(|&v| model.entries[v as usize].is_none())
        .collect();
    assert_eq!(a.free_vertices, free_ids);
    assert_eq!(a.published as usize, model.published().count());
    let deleted = model
        .entries
        .iter()
        .flatten()
        .filter(|e| e.flags & FLAG_DELETED != 0);
    assert_eq!(a.deleted as usize, deleted.count());
    assert_eq!(image.promotions, model.promotions);
    image
}

#[test]
fn inserts_and_vacuum_through_store_log_grow_every_kind_and_decode_as_tracked() {
    let rows = synthetic_clustered(N + 200, DIM, 8, 21);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("16400");
    let store = FileStore::create(&path).unwrap();
    let built = build(&store, &rows);
    let pq = ProductQuantizer::from_bytes(&built.codebook).unwrap();
    let mut graph = EntranceGraph::from_bytes(&built.entrance).unwrap();
    let log = StoreLog::open(&store).unwrap();
    let mut model = Model::of(&built);
    let mut inserted = Vec::new();
    let insert = |model: &mut Model, i: usize, graph: &mut EntranceGraph| {
        let vector = &rows[(N + i) * DIM..(N + i + 1) * DIM];
        let v = model.insert(&log, &pq, vector, tid(50_000 + i as u32));
        if i.is_multiple_of(2) && !graph.contains(v) {
            let (entry, _) = graph.search(vector, 16).unwrap();
            if let Ok(plan) = graph.plan_promotion(v, vector, &entry, &[]) {
                let record = promotions::record(&plan.to_bytes());
                let offset = model.promotions.len() as u64;
                twice(
                    &log,
                    Change::Promote {
                        offset,
                        record: &record,
                    },
                );
                model.promotions.extend_from_slice(&record);
                graph.apply_promotion(plan).unwrap();
            }
        }
        v
    };
    for i in 0..60 {
        inserted.push(insert(&mut model, i, &mut graph));
    }
    check(&store, &model);

    // VACUUM: flag 40 vertices (20 built, 20 new; none in the entrance graph), repair every
    // list that names one, in pages of relocations, then free them.
    let built_victims = (0..N as u32).step_by(41).filter(|&v| !graph.contains(v));
    let new_victims = inserted.iter().copied().filter(|&v| !graph.contains(v));
    let victims: Vec<VertexId> = built_victims.take(20).chain(new_victims.take(20)).collect();
    assert_eq!(victims.len(), 40);
    twice(&log, Change::DeleteFlags(&victims));
    for &v in &victims {
        model.entries[v as usize].as_mut().unwrap().flags |= FLAG_DELETED;
    }
    let dead: BTreeSet<VertexId> = victims.iter().copied().collect();
    let repairs: Vec<(VertexId, Vec<VertexId>)> = model
        .published()
        .filter(|u| !dead.contains(u))
        .filter(|&u| model.adjacency[u as usize].iter().any(|w| dead.contains(w)))
        .map(|u| {
            let kept = model.adjacency[u as usize]
                .iter()
                .filter(|w| !dead.contains(w));
            (u, kept.copied().collect())
        })
        .collect();
    let spp = log.geometry().edges.slots_per_page();
    for batch in repairs.chunks(spp) {
        model.write(&log, batch, HeapTid::default());
    }
    twice(&log, Change::Free(&victims));
    for &v in &victims {
        model.entries[v as usize] = None;
        model.adjacency[v as usize].clear();
        model.free_ids.insert(v);
    }
    let after_vacuum = check(&store, &model);
    assert!(!after_vacuum.allocator.free_vertices.is_empty());
    assert!(!after_vacuum.allocator.free_pages.is_empty());

    // More inserts: the freed ids first, then new ones past every kind's runs.
    for i in 60..200 {
        inserted.push(insert(&mut model, i, &mut graph));
    }
    assert!(model.free_ids.is_empty(), "freed ids were reused");
    let image = check(&store, &model);
    for kind in [
        PageKind::Edge,
        PageKind::Vector,
        PageKind::Indirection,
        PageKind::Codes,
        PageKind::Promotions,
    ] {
        let (before, after) = (
            built.extent_map.runs(kind).len(),
            image.extent_map.runs(kind).len(),
        );
        assert!(
            after > before,
            "{} grew: {before} -> {after} runs",
            kind.name()
        );
    }
    assert!(promotions::ordinals(0, model.promotions.len()).end > 1);
    // Every recorded promotion replays onto the build's graph, as open does.
    let mut replayed = EntranceGraph::from_bytes(&built.entrance).unwrap();
    let applied = crate::update::promote::apply_records(&image.promotions, &mut replayed);
    assert_eq!(applied, image.promotions.len());
    assert_eq!(replayed.ids(), graph.ids());
    assert_eq!(log.meta(), image.meta);

    // Opened and searched: each live new vertex's own vector finds it first.
    let index = RelationIndex::open(&store, &path).unwrap();
    assert_eq!(index.len(), image.allocator.published as usize);
    let mut reader = index
        .reader(crate::io::IoOptions::from_env(32).unwrap())
        .unwrap();
    let p = SearchParams {
        k: 5,
        list: 40,
        casr: CasrMode::Off,
        ..SearchParams::default()
    };
    let live: Vec<VertexId> = inserted
        .iter()
        .copied()
        .filter(|&v| model.entries[v as usize].is_some_and(|e| !e.is_deleted()))
        .collect();
    for &v in live.iter().step_by(7) {
        let (hits, _) = index
            .search(&mut reader, &model.vectors[v as usize], p)
            .unwrap();
        assert_eq!(hits[0].id, v, "vertex {v}");
        assert_eq!(Some(hits[0].tid), model.entries[v as usize].map(|e| e.tid));
    }
}

#[test]
fn new_pages_read_as_empty_unless_published_data_needs_them() {
    let rows = synthetic_clustered(N + 20, DIM, 8, 5);
    let store = MemStore::new();
    let built = build(&store, &rows);
    let pq = ProductQuantizer::from_bytes(&built.codebook).unwrap();
    let log = StoreLog::open(&store).unwrap();
    let mut model = Model::of(&built);
    for i in 0..20 {
        let vector = &rows[(N + i) * DIM..(N + i + 1) * DIM];
        model.insert(&log, &pq, vector, tid(9000 + i as u32));
    }
    // A VECTOR whose EDGE_PAGE never came (a crash between them), far beyond the ids: its
    // TID word and slot are written, its id is free; the indirection, code and vector runs
    // grow past it. And a list relocated far beyond the edge pages.
    let far: VertexId = 2100;
    let code = vec![7u8; 8];
    let stray = VectorChange {
        vertex: far,
        vector: &rows[..DIM],
        tid: tid(far),
        code: &code,
    };
    twice(&log, Change::Vector(&stray));
    let last = model.published().last().unwrap();
    let layout = EdgeLayout::new(R).unwrap();
    let mut image = vec![0u8; BLOCK_SIZE];
    layout.init_page(&mut image, 0, 100);
    layout
        .put_slot(&mut image, 0, last, &model.adjacency[last as usize])
        .unwrap();
    let moved = [PlacedList {
        vertex: last,
        slot: 0,
        old: model.entries[last as usize].map(|e| e.edge),
    }];
    let change = EdgePageChange {
        page: 100,
        image: &image,
        lists: &moved,
        tid: HeapTid::default(),
    };
    twice(&log, Change::EdgePage(&change));
    model.entries[last as usize].as_mut().unwrap().edge = EdgeLocation { page: 100, slot: 0 };
    model.next_page = 101;
    let image = check(&store, &model);
    assert!(image.len() < far as usize);
    let map = &image.extent_map;
    let zero = vec![0u8; BLOCK_SIZE];
    // What a crash can leave: pages of grown runs never written (EXTEND zeros). The last
    // page of each kind's runs holds nothing published: zeroing it changes nothing.
    let mut page = vec![0u8; BLOCK_SIZE];
    for kind in [
        PageKind::Edge,
        PageKind::Vector,
        PageKind::Indirection,
        PageKind::Codes,
    ] {
        let block = map.block(kind, map.capacity(kind) - 1).unwrap();
        store.read_block(block, &mut page).unwrap();
        store.write_block(block, &zero).unwrap();
        let again = RelationImage::read(&store).unwrap();
        assert_eq!(again.entries, image.entries, "{}", kind.name());
        assert_eq!(again.allocator, image.allocator, "{}", kind.name());
        store.write_block(block, &page).unwrap();
    }
    // A new page where a published list, vector or code must be is corruption.
    let e = model.entries[last as usize].unwrap();
    let g = log.geometry();
    let vector_ordinal = {
        let (extent, _) = g.vectors.extent_of(last);
        extent * crate::pages::EXTENT_BLOCKS + g.vectors.page_span(last).0
    };
    for (kind, ordinal) in [
        (PageKind::Edge, e.edge.page),
        (PageKind::Vector, vector_ordinal),
        (PageKind::Codes, g.codes.locate(last).0),
    ] {
        let block = map.block(kind, ordinal).unwrap();
        store.read_block(block, &mut page).unwrap();
        store.write_block(block, &zero).unwrap();
        let err = RelationImage::read(&store).unwrap_err().to_string();
        let named = err.contains("new") || err.contains("does not hold its list");
        assert!(named, "{}: {err}", kind.name());
        store.write_block(block, &page).unwrap();
    }
    check(&store, &model);
}

#[test]
fn concurrent_writers_through_one_store_log() {
    let rows = synthetic_clustered(N + 240, DIM, 8, 9);
    let store = MemStore::new();
    let built = build(&store, &rows);
    let log = StoreLog::open(&store).unwrap();
    let first_page = built.allocator.edge_pages;
    // Four threads, each its own ids and pages (as the engine's allocator hands them out):
    // vector, code and a page with the new vertex's list, 60 each, all kinds growing at once.
    std::thread::scope(|s| {
        for t in 0..4u32 {
            let (log, rows) = (&log, &rows);
            s.spawn(move || {
                for i in 0..60u32 {
                    let v = N as u32 + i * 4 + t;
                    let vector = &rows[v as usize * DIM..(v as usize + 1) * DIM];
                    let code = vec![v as u8; 8];
                    let change = VectorChange {
                        vertex: v,
                        vector,
                        tid: tid(v),
                        code: &code,
                    };
                    log.vector(&change).unwrap();
                    let layout = EdgeLayout::new(R).unwrap();
                    let mut image = vec![0u8; BLOCK_SIZE];
                    let page = first_page + i * 4 + t;
                    layout.init_page(&mut image, 0, page);
                    layout.put_slot(&mut image, 0, v, &[0, 1, v - 1]).unwrap();
                    let lists = [PlacedList {
                        vertex: v,
                        slot: 0,
                        old: None,
                    }];
                    log.edge_page(&EdgePageChange {
                        page,
                        image: &image,
                        lists: &lists,
                        tid: tid(v),
                    })
                    .unwrap();
                }
            });
        }
    });
    let image = RelationImage::read(&store).unwrap();
    assert_eq!(image.len(), N + 240);
    assert_eq!(image.allocator.published as usize, N + 240);
    for v in N as u32..N as u32 + 240 {
        assert_eq!(image.adjacency[v as usize], vec![0, 1, v - 1]);
        assert_eq!(
            image.vector(v),
            &rows[v as usize * DIM..(v as usize + 1) * DIM]
        );
        assert_eq!(image.code(v), &[v as u8; 8]);
        assert_eq!(image.tid(v), Some(tid(v)));
    }
}
