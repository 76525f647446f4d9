//! The edge-page cache over real index files: cached searches return exactly what uncached
//! ones return, inserts and consolidation write through it while other "backends" (threads,
//! each with its own `Index`, all sharing one cache) search, and the counters show the cache
//! being filled and hit, and no cached page ever older than the disk.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use navis_engine::cache::{CacheBinding, CacheConfig, Caller, PageCache, PageKey, Policy};
use navis_engine::dataset::synthetic_clustered;
use navis_engine::index::{build_index, Index, IndexParams};
use navis_engine::search::{CasrMode, SearchCursor, SearchHit, SearchParams};
use navis_engine::storage::HeapTid;
use navis_engine::update::{recover, InsertParams, LocalLocks};
use navis_engine::Metric;

const DIM: usize = 32;
const BASE: usize = 3000;
const INSERTED: usize = 800;
const NQ: usize = 40;
const TAG: u64 = 0x5eed;

fn params() -> IndexParams {
    IndexParams {
        metric: Metric::L2,
        max_degree: 24,
        build_list: 48,
        pq_bytes: Some(8),
        threads: 2,
        ..IndexParams::default()
    }
}

fn tid_of(row: usize) -> HeapTid {
    HeapTid {
        block: row as u32 / 100,
        offset: (row % 100 + 1) as u16,
    }
}

fn row_of(tid: HeapTid) -> usize {
    tid.block as usize * 100 + tid.offset as usize - 1
}

fn search(index: &Index, q: &[f32], k: usize) -> (Vec<(usize, f32)>, u64, u64) {
    let mut reader = index.reader().unwrap();
    let p = SearchParams {
        k,
        list: index.widened_list(32),
        casr: CasrMode::Off,
        ..SearchParams::default()
    };
    let mut cursor = SearchCursor::new(&mut reader, q, p).unwrap();
    let hits: Vec<SearchHit> = cursor.next_batch(k).unwrap();
    let c = cursor.counters();
    (
        hits.iter().map(|h| (row_of(h.tid), h.distance)).collect(),
        c.edge_pages_read,
        c.edge_page_cache_hits,
    )
}

fn open_cached(dir: &std::path::Path, cache: &Arc<PageCache>) -> Index {
    let index = Index::open(dir).unwrap();
    assert!(index.files().attach_cache(CacheBinding {
        cache: Arc::clone(cache),
        tag: TAG,
    }));
    index
}

const PAGE: usize = navis_engine::storage::PAGE_SIZE;

fn edge_file_pages(dir: &std::path::Path) -> u64 {
    let path = dir.join(navis_engine::storage::names::EDGES);
    std::fs::metadata(path).unwrap().len() / PAGE as u64
}

/// Every page the cache holds for this index is byte-for-byte the page on disk. Returns the
/// cached page numbers.
fn assert_cache_matches_disk(cache: &PageCache, dir: &std::path::Path) -> Vec<u32> {
    let edges = std::fs::read(dir.join(navis_engine::storage::names::EDGES)).unwrap();
    let mut cached = vec![0u8; PAGE];
    let mut resident = Vec::new();
    for (page, on_disk) in edges.chunks_exact(PAGE).enumerate() {
        let key = PageKey {
            tag: TAG,
            page: page as u32,
        };
        if cache.lookup(key, Caller::Insert, &mut cached) {
            resident.push(page as u32);
            assert!(
                cached == on_disk,
                "cached edge page {page} differs from the disk"
            );
        }
    }
    resident
}

#[test]
fn cached_reads_match_uncached_under_inserts_and_consolidation() {
    let data = synthetic_clustered(BASE + INSERTED + NQ, DIM, 16, 5);
    let (rows, queries) = data.split_at((BASE + INSERTED) * DIM);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("idx");
    let tids: Vec<HeapTid> = (0..BASE).map(tid_of).collect();
    build_index(
        &dir,
        &rows[..BASE * DIM],
        &tids,
        &params(),
        &|_, _, _| {},
        &|| false,
    )
    .unwrap();
    let locks = LocalLocks::new(64);
    let plain = Index::open(&dir).unwrap();
    recover(plain.files(), &locks, 1).unwrap();
    let edge_pages = plain
        .files()
        .state()
        .get(navis_engine::storage::state::Field::EdgePages);
    // A quarter of the edge file.
    let frames = (edge_pages as usize / 4).max(8);
    let cache = Arc::new(PageCache::new(CacheConfig::navis(frames)).unwrap());

    // 1. Searches: identical results, the second round served partly from the cache.
    let cached = open_cached(&dir, &cache);
    let mut pages = [0u64; 2];
    let mut hits = [0u64; 2];
    for round in 0..2 {
        for q in queries.chunks_exact(DIM) {
            let (a, _, _) = search(&plain, q, 10);
            let (b, read, hit) = search(&cached, q, 10);
            assert_eq!(a, b, "cache changed a result");
            pages[round] += read;
            hits[round] += hit;
        }
    }
    assert_eq!(pages[0], pages[1], "same traversal");
    assert!(hits[1] > pages[1] / 4, "hits {hits:?} of {pages:?}");
    let s = cache.stats();
    assert!(s.admitted > 0 && s.search_hits_window + s.search_hits_frozen == hits[0] + hits[1]);
    assert_eq!(s.insert_lookups(), 0);

    // 2. Two inserting and two searching backends share the cache.
    let next = Mutex::new(BASE);
    let inserting = AtomicBool::new(true);
    std::thread::scope(|s| {
        let mut inserters = Vec::new();
        for _ in 0..2 {
            inserters.push(s.spawn(|| {
                let index = open_cached(&dir, &cache);
                let mut reader = index.reader().unwrap();
                loop {
                    let row = {
                        let mut n = next.lock().unwrap();
                        if *n == BASE + INSERTED {
                            break;
                        }
                        *n += 1;
                        *n - 1
                    };
                    let v = &rows[row * DIM..(row + 1) * DIM];
                    index
                        .insert(&mut reader, &locks, v, tid_of(row), InsertParams::default())
                        .unwrap();
                }
            }));
        }
        for _ in 0..2 {
            s.spawn(|| {
                let index = open_cached(&dir, &cache);
                let mut n = 0;
                while inserting.load(Ordering::Acquire) || n < 10 {
                    let (hits, _, _) = search(&index, &queries[(n % NQ) * DIM..][..DIM], 10);
                    assert_eq!(hits.len(), 10);
                    n += 1;
                }
            });
        }
        for t in inserters {
            t.join().unwrap();
        }
        inserting.store(false, Ordering::Release);
    });
    let s = cache.stats();
    assert!(
        s.insert_lookups() > 0 && s.insert_hits_frozen + s.insert_hits_window > 0,
        "{s:?}"
    );
    assert!(s.promoted > 0, "position seeking promotes: {s:?}");
    // Which pages the inserts freed or rewrote while cached depends on the threads'
    // interleaving, so the write-through is checked by its effect: no page the cache holds is
    // older than the disk.
    let resident = assert_cache_matches_disk(&cache, &dir);
    assert!(!resident.is_empty(), "the cache holds pages of the index");
    // Every inserted row is its own nearest neighbour through the cache, and the cached and
    // uncached views of the index agree on every query.
    let cached = open_cached(&dir, &cache);
    let found = (BASE..BASE + INSERTED)
        .filter(|&r| search(&cached, &rows[r * DIM..(r + 1) * DIM], 1).0[0].0 == r)
        .count();
    assert!(
        found >= INSERTED * 99 / 100,
        "{found} of {INSERTED} inserted rows found"
    );
    let plain = Index::open(&dir).unwrap();
    for q in queries.chunks_exact(DIM) {
        assert_eq!(search(&plain, q, 10).0, search(&cached, q, 10).0);
    }

    // 3. Delete a fifth and consolidate through a cache that holds every page of the file
    // (its admission window alone is larger than the file), so every page consolidation frees
    // is cached when it is freed and must be dropped; cached and uncached searches still agree.
    let file_pages = edge_file_pages(&dir);
    let roomy = Arc::new(PageCache::new(CacheConfig::navis(file_pages as usize * 20)).unwrap());
    let cached = open_cached(&dir, &roomy);
    let edges = std::fs::read(dir.join(navis_engine::storage::names::EDGES)).unwrap();
    for (page, bytes) in edges.chunks_exact(PAGE).enumerate() {
        let key = PageKey {
            tag: TAG,
            page: page as u32,
        };
        let ticket = roomy.ticket(key);
        roomy.admit(key, Caller::Insert, bytes, ticket);
    }
    let before = roomy.stats();
    assert_eq!(
        before.admitted, file_pages,
        "every page admitted: {before:?}"
    );
    cached
        .bulk_delete(|tid| row_of(tid).is_multiple_of(5), &|| false)
        .unwrap();
    cached.consolidate(&locks, &|| false).unwrap();
    let after = roomy.stats().since(&before);
    assert!(after.dropped > 0, "freed pages were dropped: {after:?}");
    // Nothing else touched the index, so no page the allocator freed may still be cached.
    let state = cached.files().state();
    for page in assert_cache_matches_disk(&roomy, &dir) {
        let live = state.page_live(page).load(Ordering::Acquire);
        assert!(live > 0, "free edge page {page} is still cached");
    }
    assert!(cached.verify().unwrap().is_clean());
    for q in queries.chunks_exact(DIM) {
        let (b, _, _) = search(&cached, q, 10);
        assert_eq!(search(&plain, q, 10).0, b);
        assert!(b.iter().all(|(r, _)| r % 5 != 0), "a deleted row came back");
    }
}

#[test]
fn lru_and_off_return_the_same_results() {
    let data = synthetic_clustered(1500 + NQ, DIM, 8, 9);
    let (rows, queries) = data.split_at(1500 * DIM);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("idx");
    let tids: Vec<HeapTid> = (0..1500).map(tid_of).collect();
    build_index(&dir, rows, &tids, &params(), &|_, _, _| {}, &|| false).unwrap();
    let plain = Index::open(&dir).unwrap();
    for policy in [Policy::Lru, Policy::Off] {
        let cache = Arc::new(
            PageCache::new(CacheConfig {
                policy,
                ..CacheConfig::navis(32)
            })
            .unwrap(),
        );
        let cached = open_cached(&dir, &cache);
        let mut hits = 0;
        for _ in 0..2 {
            for q in queries.chunks_exact(DIM) {
                let (b, _, h) = search(&cached, q, 10);
                assert_eq!(search(&plain, q, 10).0, b);
                hits += h;
            }
        }
        match policy {
            Policy::Off => assert_eq!(hits, 0),
            _ => assert!(hits > 0),
        }
    }
}
