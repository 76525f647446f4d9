//! NAVIS-Cache for an index in its relation (RFC 0001): 8 KiB frames holding the relation's
//! 8 KiB edge pages. Searches through the cache return exactly what a cache-less index over
//! the same pages returns, and hit it on repeated queries; inserts write through it and
//! VACUUM drops the pages it frees, and afterwards every frame the cache holds is the page
//! on disk, byte for byte (readers never re-verify a hit). A cache only serves indexes whose
//! edge pages are its frames.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use navis_engine::cache::{CacheBinding, CacheConfig, Caller, PageCache, PageKey};
use navis_engine::dataset::synthetic_clustered;
use navis_engine::index::{build_index, Index, IndexParams};
use navis_engine::io::AlignedPage;
use navis_engine::pages::{PageKind, BLOCK_SIZE};
use navis_engine::relation::{build_relation, open_index, StoreLog};
use navis_engine::search::{CasrMode, SearchCursor, SearchParams};
use navis_engine::storage::state::Field;
use navis_engine::storage::{HeapTid, PAGE_SIZE};
use navis_engine::store::{FileStore, PageStore};
use navis_engine::update::{recover, InsertParams, LocalLocks};
use navis_engine::Metric;

const DIM: usize = 20;
const BUILT: usize = 2000;
const INSERTED: usize = 800;
const NQ: usize = 40;
const TAG: u64 = 0x8c;

fn params() -> IndexParams {
    IndexParams {
        metric: Metric::L2,
        max_degree: 24,
        build_list: 48,
        pq_bytes: Some(10),
        threads: 2,
        ..IndexParams::default()
    }
}

fn tid(row: usize) -> HeapTid {
    HeapTid {
        block: row as u32 / 100,
        offset: (row % 100 + 1) as u16,
    }
}

fn row_of(t: HeapTid) -> usize {
    t.block as usize * 100 + t.offset as usize - 1
}

/// The top `k` as (row, distance), and the edge pages the search read and found cached.
fn search(index: &Index, q: &[f32], k: usize) -> (Vec<(usize, f32)>, u64, u64) {
    let mut reader = index.reader().unwrap();
    let p = SearchParams {
        k,
        list: index.widened_list(32),
        casr: CasrMode::Off,
        ..SearchParams::default()
    };
    let mut cursor = SearchCursor::new(&mut reader, q, p).unwrap();
    let hits = cursor.next_batch(k).unwrap();
    let c = cursor.counters();
    (
        hits.iter().map(|h| (row_of(h.tid), h.distance)).collect(),
        c.edge_pages_read,
        c.edge_page_cache_hits,
    )
}

fn cache_of(frames: usize) -> Arc<PageCache> {
    Arc::new(
        PageCache::new(CacheConfig {
            frame_size: BLOCK_SIZE,
            ..CacheConfig::navis(frames)
        })
        .unwrap(),
    )
}

fn binding(cache: &Arc<PageCache>) -> CacheBinding {
    CacheBinding {
        cache: Arc::clone(cache),
        tag: TAG,
    }
}

fn key(page: u32) -> PageKey {
    PageKey { tag: TAG, page }
}

/// Edge page `ordinal` as the relation holds it.
fn disk_page(index: &Index, store: &dyn PageStore, ordinal: u32) -> Vec<u8> {
    let relation = index.files().relation().unwrap();
    let block = relation.block(PageKind::Edge, ordinal).unwrap().unwrap();
    let mut page = vec![0u8; BLOCK_SIZE];
    store.read_block(block, &mut page).unwrap();
    page
}

/// Edge-page ordinals the relation has now (its extent map re-read).
fn edge_capacity(index: &Index) -> u32 {
    let relation = index.files().relation().unwrap();
    relation.refresh().unwrap();
    relation.map().capacity(PageKind::Edge)
}

/// Every frame `cache` holds for an edge page of the relation is that page on disk, byte
/// for byte. Returns the cached ordinals.
fn assert_cache_matches_disk(cache: &PageCache, index: &Index, store: &dyn PageStore) -> Vec<u32> {
    let mut frame = vec![0u8; BLOCK_SIZE];
    let mut resident = Vec::new();
    for ordinal in 0..edge_capacity(index) {
        if cache.lookup(key(ordinal), Caller::Insert, &mut frame) {
            resident.push(ordinal);
            assert!(
                frame == disk_page(index, store, ordinal),
                "cached edge page {ordinal} differs from the relation's page"
            );
        }
    }
    resident
}

fn same_answers(plain: &Index, cached: &Index, queries: &[f32]) {
    for q in queries.chunks_exact(DIM) {
        assert_eq!(search(plain, q, 10).0, search(cached, q, 10).0);
    }
}

#[test]
fn relation_index_searches_inserts_and_vacuum_through_an_8k_cache() {
    let total = BUILT + INSERTED;
    let data = synthetic_clustered(total + NQ, DIM, 12, 23);
    let (rows, queries) = data.split_at(total * DIM);
    let tmp = tempfile::tempdir().unwrap();
    let fork = tmp.path().join("16600");
    let store = FileStore::create(&fork).unwrap();
    let tids: Vec<HeapTid> = (0..BUILT).map(tid).collect();
    build_relation(
        &store,
        &rows[..BUILT * DIM],
        &tids,
        &params(),
        3,
        &|_, _, _| {},
        &|| false,
    )
    .unwrap();
    let store: Arc<dyn PageStore> = Arc::new(store);
    let runtime = tmp.path().join("runtime");
    let open = || open_index(Arc::clone(&store), &fork, &runtime).unwrap();

    // The writer (with the log) recovers first, as the first backend of a server lifetime;
    // `plain` shares the runtime copy and reads the same pages without a cache.
    let writer = open();
    assert!(writer.set_log(Arc::new(StoreLog::open(Arc::clone(&store)).unwrap())));
    let locks = LocalLocks::new(64);
    recover(writer.files(), &locks, 1).unwrap();
    let plain = open();
    // Recovery counts every page of the runs; the build filled only some of them.
    let state = writer.files().state();
    let used = (0..state.get(Field::EdgePages))
        .filter(|&p| state.page_live(p).load(Ordering::Acquire) > 0)
        .count();

    // 1. Searches through a cache of a quarter of the pages: identical answers, and the
    // second round is served partly from the cache.
    let small = cache_of((used / 4).max(8));
    let searcher = open();
    assert!(searcher.files().attach_cache(binding(&small)));
    let (mut pages, mut hits) = ([0u64; 2], [0u64; 2]);
    for round in 0..2 {
        for q in queries.chunks_exact(DIM) {
            let (a, _, _) = search(&plain, q, 10);
            let (b, read, hit) = search(&searcher, q, 10);
            assert_eq!(a, b, "the cache changed a result");
            pages[round] += read;
            hits[round] += hit;
        }
    }
    assert_eq!(pages[0], pages[1], "same traversal");
    // Queries share pages, so even the first round hits; the second still hits a good share
    // of a cache a quarter of the pages' size.
    assert!(
        hits[0] > 0 && hits[1] > pages[1] / 4,
        "hits {hits:?} of {pages:?}"
    );
    let s = small.stats();
    assert_eq!(
        s.search_hits_frozen + s.search_hits_window,
        hits[0] + hits[1]
    );
    assert!(s.admitted > 0 && s.insert_lookups() == 0, "{s:?}");
    assert_cache_matches_disk(&small, &searcher, &*store);

    // 2. Inserts write through a cache that holds every edge page there is, and frames for
    // the ordinals beyond the runs the inserts will grow into (as a read racing with a
    // page's earlier life could leave one): every page write then refreshes a cached frame,
    // and a page the log placed in a new run must be cached as stamped at its new block.
    let capacity = edge_capacity(&writer);
    // An insert writes about one page (its own list with the back-edges it adds), and few
    // pages empty out meanwhile, so twice the inserts is room enough.
    let beyond = 2 * INSERTED as u32;
    let roomy = cache_of((capacity + beyond) as usize + 64);
    assert!(writer.files().attach_cache(binding(&roomy)));
    for ordinal in 0..capacity + beyond {
        let page = if ordinal < capacity {
            disk_page(&writer, &*store, ordinal)
        } else {
            vec![0u8; BLOCK_SIZE]
        };
        let ticket = roomy.ticket(key(ordinal));
        roomy.admit(key(ordinal), Caller::Insert, &page, ticket);
    }
    assert_eq!(roomy.stats().admitted, (capacity + beyond) as u64);
    let half = BUILT + INSERTED / 2;
    let insert = |range: std::ops::Range<usize>| {
        let mut reader = writer.reader().unwrap();
        for row in range {
            let v = &rows[row * DIM..(row + 1) * DIM];
            writer
                .insert(&mut reader, &locks, v, tid(row), InsertParams::default())
                .unwrap();
        }
    };
    std::thread::scope(|s| {
        s.spawn(|| insert(BUILT..half));
        s.spawn(|| insert(half..total));
        // A third thread searches through the same cache meanwhile.
        s.spawn(|| {
            for q in queries.chunks_exact(DIM) {
                assert_eq!(search(&writer, q, 10).0.len(), 10);
            }
        });
    });
    let appended = state.get(Field::EdgePages);
    eprintln!("edge pages: {used} used of {capacity} after the build, {appended} after inserts");
    assert!(
        appended > capacity && appended < capacity + beyond,
        "the inserts grew the edge pages from {capacity} to {appended}"
    );
    let s = roomy.stats();
    assert!(s.refreshed >= (appended - capacity) as u64, "{s:?}");
    assert!(s.insert_hits_frozen + s.insert_hits_window > 0, "{s:?}");
    // The planted frames no insert wrote are not pages; everything else must be the disk.
    for ordinal in appended..capacity + beyond {
        roomy.drop_page(key(ordinal));
    }
    let resident = assert_cache_matches_disk(&roomy, &writer, &*store);
    assert!(
        resident.iter().any(|&p| p >= capacity),
        "grown pages cached"
    );
    same_answers(&plain, &writer, queries);
    let found = (BUILT..total)
        .filter(|&r| search(&writer, &rows[r * DIM..(r + 1) * DIM], 1).0[0].0 == r)
        .count();
    assert!(
        found >= INSERTED * 99 / 100,
        "{found} of {INSERTED} inserted rows found"
    );

    // 3. VACUUM: a fifth of the rows die and are consolidated; every page consolidation
    // frees was cached and must be dropped.
    let pages_now = state.get(Field::EdgePages);
    let live_before: Vec<u32> = (0..pages_now)
        .map(|p| state.page_live(p).load(Ordering::Acquire))
        .collect();
    let before = roomy.stats();
    writer
        .bulk_delete(|t| row_of(t).is_multiple_of(5), &|| false)
        .unwrap();
    let c = writer.consolidate(&locks, &|| false).unwrap();
    assert!(c.vertices_freed > 0, "{c:?}");
    let after = roomy.stats().since(&before);
    assert!(after.dropped > 0, "{after:?}");
    let resident = assert_cache_matches_disk(&roomy, &writer, &*store);
    let freed: Vec<u32> = (0..pages_now)
        .filter(|&p| live_before[p as usize] > 0 && state.page_live(p).load(Ordering::Acquire) == 0)
        .collect();
    assert!(!freed.is_empty(), "consolidation freed pages");
    assert!(
        freed.iter().all(|p| !resident.contains(p)),
        "a page consolidation freed is still cached"
    );
    assert!(writer.verify().unwrap().is_clean());
    for q in queries.chunks_exact(DIM) {
        let (b, _, _) = search(&writer, q, 10);
        assert_eq!(search(&plain, q, 10).0, b);
        assert!(b.iter().all(|(r, _)| r % 5 != 0), "a deleted row came back");
    }

    // 4. A new server lifetime's recovery drops every page no list lives on.
    recover(writer.files(), &locks, 2).unwrap();
    for page in assert_cache_matches_disk(&roomy, &writer, &*store) {
        assert!(
            state.page_live(page).load(Ordering::Acquire) > 0,
            "free edge page {page} is still cached after recovery"
        );
    }
    same_answers(&plain, &writer, queries);
}

/// A cache serves only indexes whose edge pages are its frames; a region formatted in one
/// "process" is attached in another with the frame size its header records.
#[test]
fn frame_size_must_match_the_edge_pages_and_attach_reads_it() {
    let data = synthetic_clustered(600 + NQ, DIM, 6, 31);
    let (rows, queries) = data.split_at(600 * DIM);
    let tids: Vec<HeapTid> = (0..600).map(tid).collect();
    let tmp = tempfile::tempdir().unwrap();
    let four = Arc::new(PageCache::new(CacheConfig::navis(64)).unwrap());
    assert_eq!(four.frame_size(), PAGE_SIZE);

    let side_dir = tmp.path().join("side");
    build_index(&side_dir, rows, &tids, &params(), &|_, _, _| {}, &|| false).unwrap();
    let side = Index::open(&side_dir).unwrap();
    assert!(
        !side.files().attach_cache(binding(&cache_of(64))),
        "8 KiB frames, 4 KiB pages"
    );
    assert!(side.files().page_cache().is_none());
    assert!(side.files().attach_cache(binding(&four)));

    let fork = tmp.path().join("16601");
    let store = FileStore::create(&fork).unwrap();
    build_relation(&store, rows, &tids, &params(), 3, &|_, _, _| {}, &|| false).unwrap();
    let store: Arc<dyn PageStore> = Arc::new(store);
    let relation = open_index(Arc::clone(&store), &fork, &tmp.path().join("rt")).unwrap();
    assert_eq!(relation.files().edge_layout().page_size(), BLOCK_SIZE);
    assert!(
        !relation.files().attach_cache(binding(&four)),
        "4 KiB frames, 8 KiB pages"
    );
    assert!(relation.files().page_cache().is_none());

    // The region as PostgreSQL would hold it: formatted once, attached by each backend.
    let config = CacheConfig {
        frame_size: BLOCK_SIZE,
        ..CacheConfig::navis(128)
    };
    let len = PageCache::region_size_with(BLOCK_SIZE, 128);
    let mut memory = AlignedPage::vec(len.div_ceil(PAGE_SIZE));
    let base = memory.as_mut_ptr().cast::<u8>();
    // SAFETY: `memory` outlives every view of it (dropped at the end of the test, after
    // `relation`, which holds the last view, is dropped) and is used only through them.
    let attached = unsafe {
        drop(PageCache::init_at(base, len, config).unwrap());
        PageCache::attach(base, len).unwrap()
    };
    assert_eq!(attached.frame_size(), BLOCK_SIZE);
    let attached = Arc::new(attached);
    assert!(relation.files().attach_cache(binding(&attached)));
    let plain = open_index(Arc::clone(&store), &fork, &tmp.path().join("rt")).unwrap();
    let mut hits = 0;
    for _ in 0..2 {
        for q in queries.chunks_exact(DIM) {
            let (b, _, h) = search(&relation, q, 10);
            assert_eq!(search(&plain, q, 10).0, b);
            hits += h;
        }
    }
    assert!(hits > 0 && attached.stats().admitted > 0);
    assert_cache_matches_disk(&attached, &relation, &*store);
    drop((relation, attached));
    drop(memory);
}
