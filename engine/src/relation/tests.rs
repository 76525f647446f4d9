//! The writer against its oracle, [`RelationImage`], on indexes built by the engine's own
//! pipeline.

use super::*;
use crate::dataset::synthetic_clustered;
use crate::index::{BuildPhase, BuiltIndex, IndexParams};
use crate::pages::extent::run_len;
use crate::pages::PageKind;
use crate::storage::{EdgeLocation, StorageError};
use crate::store::{FileStore, MemStore};
use crate::Metric;
use std::sync::Mutex;

fn none(_: BuildPhase, _: u64, _: u64) {}
fn never() -> bool {
    false
}

/// Rows and heap TIDs for `n` clustered `dim`-dimensional vectors.
fn rows(n: usize, dim: usize) -> (Vec<f32>, Vec<HeapTid>) {
    let tids = (0..n as u32)
        .map(|i| HeapTid {
            block: i / 50 + 7,
            offset: (i % 50 + 1) as u16,
        })
        .collect();
    (synthetic_clustered(n, dim, 8, 11 + dim as u64), tids)
}

fn params(dim: usize, max_degree: usize, pq_bytes: usize) -> IndexParams {
    IndexParams {
        metric: Metric::L2,
        dim: Some(dim),
        max_degree,
        build_list: 2 * max_degree,
        pq_bytes: Some(pq_bytes),
        threads: 2,
        ..IndexParams::default()
    }
}

fn built<'a>(vectors: &'a [f32], tids: &'a [HeapTid], p: &IndexParams) -> BuiltIndex<'a> {
    let format = crate::index::EdgePageFormat::Relation;
    crate::index::build_in_memory(vectors, tids, p, format, &none, &never).unwrap()
}

/// Blocks the runs of `kind` take.
fn run_blocks(image: &RelationImage, kind: PageKind) -> u32 {
    (0..image.extent_map.runs(kind).len() as u32)
        .map(run_len)
        .sum()
}

/// The write order of the kinds, each one's runs physically consecutive.
const ORDER: [PageKind; 5] = [
    PageKind::Edge,
    PageKind::Vector,
    PageKind::Indirection,
    PageKind::Codes,
    PageKind::Blob,
];

/// Reads `store` back and checks it against the build, field by field.
fn check(store: &dyn PageStore, b: &BuiltIndex, meta: &Meta) -> RelationImage {
    let image = RelationImage::read(store).unwrap();
    assert_eq!(&image.meta, meta);
    let n = b.tids.len();
    assert_eq!(image.len(), n);
    // The derived allocator: every built vertex published, no free id, every edge page of
    // the placement used, the tail of the last edge run free.
    let a = &image.allocator;
    assert_eq!(a.published as usize, n);
    assert_eq!(a.deleted, 0);
    assert!(a.free_vertices.is_empty());
    assert_eq!(a.edge_pages, image.extent_map.capacity(PageKind::Edge));
    let used = b.placement.pages;
    assert_eq!(a.free_pages, (used..a.edge_pages).collect::<Vec<_>>());
    for p in 0..used {
        let lists = b.placement.page_of.iter().filter(|&&q| q == p).count() as u32;
        assert_eq!(a.live[p as usize], lists, "edge page {p}");
    }
    assert!(image.promotions.is_empty());
    for v in 0..n {
        let e = image.entries[v].expect("every built vertex is published");
        assert!(e.is_live() && !e.is_deleted());
        let at = EdgeLocation {
            page: b.placement.page_of[v],
            slot: b.placement.slot_of[v],
        };
        assert_eq!(e.edge, at, "vertex {v}");
        assert_eq!(image.tid(v as u32), Some(b.tids[v]));
        assert_eq!(image.adjacency[v], b.adjacency[v], "vertex {v}");
        assert_eq!(
            image.vector(v as u32),
            &b.vectors[v * b.dim..(v + 1) * b.dim]
        );
        assert_eq!(
            image.code(v as u32),
            &b.codes[v * b.pq_bytes..(v + 1) * b.pq_bytes]
        );
    }
    assert_eq!(image.codebook, b.codebook);
    assert_eq!(image.entrance, b.entrance_bytes);
    assert_eq!(image.unmapped_blocks, 0);

    // nblocks = metapage + runs + extent-map pages, the kinds in write order, each kind's
    // runs back to back, the extent-map pages last.
    let runs: u32 = ORDER.iter().map(|&k| run_blocks(&image, k)).sum();
    let map_pages = image.meta.extent_map_pages.len() as u32;
    assert_eq!(image.nblocks, 1 + runs + map_pages);
    let mut next = 1;
    for kind in ORDER {
        for (r, &first) in image.extent_map.runs(kind).iter().enumerate() {
            assert_eq!(first, next, "{} run {r}", kind.name());
            next += run_len(r as u32);
        }
    }
    let tail: Vec<u32> = (next..next + map_pages).collect();
    assert_eq!(image.meta.extent_map_pages, tail);
    assert_eq!(image.nblocks, next + map_pages);
    image
}

fn write_mem(b: &BuiltIndex) -> (MemStore, Meta) {
    let store = MemStore::new();
    let meta = RelationWriter::write(&store, &b.input(), b.medoid, 0xB0B).unwrap();
    (store, meta)
}

fn blocks_of(store: &dyn PageStore) -> Vec<Vec<u8>> {
    let mut page = vec![0u8; BLOCK_SIZE];
    (0..store.nblocks().unwrap())
        .map(|b| {
            store.read_block(b, &mut page).unwrap();
            page.clone()
        })
        .collect()
}

#[test]
fn real_build_round_trips_through_memory_and_a_file() {
    let (vectors, tids) = rows(3000, 32);
    let b = built(&vectors, &tids, &params(32, 32, 8));
    assert_eq!(b.placement.slots_per_page, 59, "8 KiB pages at R = 32");
    let (mem, meta) = write_mem(&b);
    let image = check(&mem, &b, &meta);
    assert_eq!(meta.build_id, 0xB0B);
    assert_eq!(meta.medoid, b.medoid);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("relation");
    let file = FileStore::create(&path).unwrap();
    assert_eq!(
        RelationWriter::write(&file, &b.input(), b.medoid, 0xB0B).unwrap(),
        meta
    );
    let nblocks = file.nblocks().unwrap();
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        u64::from(nblocks) * BLOCK_SIZE as u64
    );
    drop(file);
    let reopened = FileStore::open(&path).unwrap();
    check(&reopened, &b, &meta);
    assert_eq!(
        blocks_of(&reopened),
        blocks_of(&mem),
        "the writer is deterministic"
    );
    let named = RelationImage::read_named(&reopened, &path).unwrap();
    assert_eq!(named.nblocks, nblocks);
    eprintln!(
        "3000 x 32-d, R = 32: {nblocks} blocks ({} KiB); runs: {}",
        u64::from(nblocks) * 8,
        ORDER
            .iter()
            .map(|&k| format!("{} {}", k.name(), run_blocks(&image, k)))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

#[test]
fn one_and_zero_vertex_indexes() {
    // One vertex: one page (one block) of every kind, two blob pages (codebook, entrance).
    let (vectors, tids) = rows(1, 8);
    let phases = Mutex::new(Vec::new());
    let progress = |p: BuildPhase, done: u64, total: u64| {
        if done == total {
            phases.lock().unwrap().push(p);
        }
    };
    let store = MemStore::new();
    let (report, meta) = build_relation(
        &store,
        &vectors,
        &tids,
        &params(8, 32, 2),
        1,
        &progress,
        &never,
    )
    .unwrap();
    assert!(phases.lock().unwrap().contains(&BuildPhase::Writing));
    let image = RelationImage::read(&store).unwrap();
    assert_eq!(image.meta, meta);
    assert_eq!(image.len(), 1);
    assert_eq!(image.adjacency[0], Vec::<u32>::new());
    assert_eq!(image.vector(0), &vectors[..]);
    assert_eq!(image.tid(0), Some(tids[0]));
    for kind in &ORDER[..4] {
        assert_eq!(run_blocks(&image, *kind), 1, "{}", kind.name());
    }
    let blob_pages = meta.codebook.pages + meta.entrance.pages;
    assert_eq!((meta.codebook.pages, meta.entrance.pages), (1, 1));
    assert_eq!(run_blocks(&image, PageKind::Blob), blob_pages);
    assert_eq!(image.nblocks, 1 + 4 + blob_pages + 1);
    assert_eq!(report.file_sizes, vec![("relation".to_string(), 8 * 8192)]);
    eprintln!(
        "1 row: {} blocks ({} KiB)",
        image.nblocks,
        image.nblocks * 8
    );

    // Zero vertices: the metapage, the blob pages and one extent-map page; nothing else.
    let (vectors, tids) = rows(0, 8);
    let b = built(&vectors, &tids, &params(8, 96, 2));
    let (store, meta) = write_mem(&b);
    let image = check(&store, &b, &meta);
    assert!(image.is_empty());
    for kind in &ORDER[..4] {
        assert!(image.extent_map.runs(*kind).is_empty(), "{}", kind.name());
    }
    assert_eq!(image.allocator, Allocator::default());
    assert_eq!(meta.medoid, 0);
    let blobs = run_blocks(&image, PageKind::Blob);
    assert_eq!(image.nblocks, 1 + blobs + 1);
    eprintln!("0 rows: {} blocks", image.nblocks);
}

#[test]
fn three_and_1536_dimensional_vectors() {
    let (vectors, tids) = rows(2000, 3);
    let b = built(&vectors, &tids, &params(3, 16, 1));
    let (store, meta) = write_mem(&b);
    check(&store, &b, &meta);

    // 6156-byte slots: most straddle two pages, and 400 of them fill three vector extents.
    let (vectors, tids) = rows(400, 1536);
    let b = built(&vectors, &tids, &params(1536, 16, 16));
    let (store, meta) = write_mem(&b);
    let image = check(&store, &b, &meta);
    let pages = crate::pages::vector::VectorPages::new(1536).unwrap();
    assert!(
        pages.page_span(1).1 == 2,
        "slot 1 straddles a page boundary"
    );
    assert!(pages.pages_for(400) > 2 * u64::from(crate::pages::EXTENT_BLOCKS));
    assert!(image.extent_map.runs(PageKind::Vector).len() > 9);
}

#[test]
fn a_flipped_byte_in_any_block_is_found_and_named() {
    let (vectors, tids) = rows(700, 16);
    let b = built(&vectors, &tids, &params(16, 16, 4));
    let (store, _) = write_mem(&b);
    let nblocks = store.nblocks().unwrap();
    let mut page = vec![0u8; BLOCK_SIZE];
    for block in 0..nblocks {
        store.read_block(block, &mut page).unwrap();
        let original = page.clone();
        // Header flags, payload (a different spot per block), magic, block stamp, CRC, aux.
        let spot = 24 + (block as usize * 997) % 8152;
        for at in [10, 13, spot, 8176, 8180, 8186, 8191] {
            page[at] ^= 0x20;
            store.write_block(block, &page).unwrap();
            let err = RelationImage::read(&store).unwrap_err().to_string();
            assert!(
                err.contains(&format!("at block {block}:")),
                "byte {at} of block {block}: {err}"
            );
            page.copy_from_slice(&original);
        }
        // pd_lsn and pd_checksum are PostgreSQL's, outside the engine CRC.
        page[3] ^= 1;
        page[9] ^= 1;
        store.write_block(block, &page).unwrap();
        RelationImage::read(&store).unwrap();
        store.write_block(block, &original).unwrap();
    }
}

#[test]
fn damaged_relations_are_refused() {
    let (vectors, tids) = rows(300, 16);
    let b = built(&vectors, &tids, &params(16, 16, 4));
    let (store, _) = write_mem(&b);
    let blocks = blocks_of(&store);
    let copy = |n: usize| {
        let s = MemStore::new();
        s.extend(n as u32).unwrap();
        for (i, p) in blocks.iter().take(n).enumerate() {
            s.write_block(i as u32, p).unwrap();
        }
        s
    };
    // A torn tail: the last extent-map page is missing.
    let err = RelationImage::read(&copy(blocks.len() - 1))
        .unwrap_err()
        .to_string();
    assert!(err.contains("outside"), "{err}");
    // No metapage yet: what a failed or unfinished write leaves.
    let unfinished = copy(blocks.len());
    unfinished.write_block(0, &vec![0u8; BLOCK_SIZE]).unwrap();
    let err = RelationImage::read(&unfinished).unwrap_err().to_string();
    assert!(err.contains("at block 0: page is new"), "{err}");
    assert!(RelationImage::read(&MemStore::new()).is_err());
    // A new block past the map is tolerated and counted; a page there is not.
    let grown = copy(blocks.len());
    grown.extend(1).unwrap();
    assert_eq!(RelationImage::read(&grown).unwrap().unmapped_blocks, 1);
    grown.write_block(blocks.len() as u32, &blocks[1]).unwrap();
    let err = RelationImage::read(&grown).unwrap_err().to_string();
    assert!(err.contains("in no run"), "{err}");
}

#[test]
fn the_writer_refuses_what_it_cannot_write() {
    let (vectors, tids) = rows(50, 16);
    let b = built(&vectors, &tids, &params(16, 96, 4));
    let (store, _) = write_mem(&b);
    let err = RelationWriter::write(&store, &b.input(), b.medoid, 1).unwrap_err();
    assert!(err.to_string().contains("empty store"), "{err}");

    // A placement for 4 KiB side-file pages (10 slots at R = 96 instead of 20).
    let side = crate::placement::greedy_placement(&b.adjacency, 10).unwrap();
    let mut input = b.input();
    input.placement = &side;
    let fresh = MemStore::new();
    let err = RelationWriter::write(&fresh, &input, b.medoid, 1).unwrap_err();
    assert!(err.to_string().contains("computed for 10 slots"), "{err}");
    assert_eq!(
        fresh.nblocks().unwrap(),
        0,
        "refused before anything is written"
    );

    // The storage layer's own validation, shared with the side-file writer.
    let mut input = b.input();
    input.pq_codes = &b.codes[1..];
    let err = RelationWriter::write(&fresh, &input, b.medoid, 1).unwrap_err();
    assert!(err.to_string().contains("pq_codes has length"), "{err}");
    let err = RelationWriter::write(&fresh, &b.input(), 50, 1).unwrap_err();
    assert!(err.to_string().contains("medoid 50"), "{err}");
    assert!(matches!(err, StorageError::InvalidInput(_)));
}

/// Records the order of writes and syncs.
struct Recording {
    inner: MemStore,
    log: Mutex<Vec<Option<u32>>>,
}

impl PageStore for Recording {
    fn nblocks(&self) -> Result<u32, StorageError> {
        self.inner.nblocks()
    }
    fn read_block(&self, block: u32, out: &mut [u8]) -> Result<(), StorageError> {
        self.inner.read_block(block, out)
    }
    fn write_block(&self, block: u32, page: &[u8]) -> Result<(), StorageError> {
        self.log.lock().unwrap().push(Some(block));
        self.inner.write_block(block, page)
    }
    fn extend(&self, blocks: u32) -> Result<u32, StorageError> {
        self.inner.extend(blocks)
    }
    fn sync(&self) -> Result<(), StorageError> {
        self.log.lock().unwrap().push(None);
        self.inner.sync()
    }
}

#[test]
fn every_block_is_written_once_in_order_and_the_metapage_last() {
    let (vectors, tids) = rows(1500, 16);
    let b = built(&vectors, &tids, &params(16, 32, 4));
    let store = Recording {
        inner: MemStore::new(),
        log: Mutex::new(Vec::new()),
    };
    RelationWriter::write(&store, &b.input(), b.medoid, 3).unwrap();
    let log = store.log.into_inner().unwrap();
    let n = store.inner.nblocks().unwrap();
    let expected: Vec<Option<u32>> = (1..n).map(Some).chain([None, Some(0), None]).collect();
    assert_eq!(log, expected, "ascending, then sync, metapage, sync");
}

/// Reports the relation one block short for its first `short_reads` length reads, as a
/// reader sees a relation another process grows between its read of the length and of the
/// extent map.
struct Growing {
    inner: MemStore,
    short_reads: std::sync::atomic::AtomicU32,
}

impl PageStore for Growing {
    fn nblocks(&self) -> Result<u32, StorageError> {
        let n = self.inner.nblocks()?;
        let short = self
            .short_reads
            .fetch_update(
                std::sync::atomic::Ordering::Relaxed,
                std::sync::atomic::Ordering::Relaxed,
                |s| s.checked_sub(1),
            )
            .is_ok();
        Ok(if short { n - 1 } else { n })
    }
    fn read_block(&self, block: u32, out: &mut [u8]) -> Result<(), StorageError> {
        self.inner.read_block(block, out)
    }
    fn write_block(&self, block: u32, page: &[u8]) -> Result<(), StorageError> {
        self.inner.write_block(block, page)
    }
    fn extend(&self, blocks: u32) -> Result<u32, StorageError> {
        self.inner.extend(blocks)
    }
    fn sync(&self) -> Result<(), StorageError> {
        self.inner.sync()
    }
}

#[test]
fn a_layout_read_racing_growth_is_tried_again_and_real_damage_still_fails() {
    let (vectors, tids) = rows(300, 8);
    let p = params(8, 16, 4);
    let b = built(&vectors, &tids, &p);
    let (store, _) = write_mem(&b);
    let name = std::path::Path::new("growing");
    let (meta, map) = RelationImage::read_layout(&store, name).unwrap();
    let racing = Growing {
        inner: store,
        short_reads: 2.into(),
    };
    let (meta_again, map_again) = RelationImage::read_layout(&racing, name).unwrap();
    assert_eq!(
        (meta_again, map_again),
        (meta, map),
        "the third read is whole"
    );
    // Short on every read: the tries run out and the damage is reported.
    racing
        .short_reads
        .store(u32::MAX, std::sync::atomic::Ordering::Relaxed);
    assert!(RelationImage::read_layout(&racing, name).is_err());
}
