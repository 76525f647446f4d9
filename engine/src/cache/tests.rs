use super::*;
use crate::pages::BLOCK_SIZE;
use crate::storage::PAGE_SIZE;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

const TAG: u64 = 0xabcd;

fn key(page: u32) -> PageKey {
    PageKey { tag: TAG, page }
}

/// A page whose every 8-byte word is `page << 32 | version`: a torn copy shows.
fn page_bytes(page: u32, version: u32) -> Vec<u8> {
    page_bytes_of(PAGE_SIZE, page, version)
}

/// `page_bytes` for a page of `size` bytes.
fn page_bytes_of(size: usize, page: u32, version: u32) -> Vec<u8> {
    let word = ((page as u64) << 32) | version as u64;
    word.to_le_bytes().repeat(size / 8)
}

/// `(page, version)` of a page made by `page_bytes`; panics on a torn page.
fn decode(bytes: &[u8]) -> (u32, u32) {
    let first = &bytes[..8];
    assert!(
        bytes.chunks_exact(8).all(|w| w == first),
        "torn page: words differ"
    );
    let word = u64::from_le_bytes(first.try_into().unwrap());
    ((word >> 32) as u32, word as u32)
}

fn read_through(cache: &PageCache, page: u32, version: u32, caller: Caller) -> bool {
    let mut out = vec![0u8; PAGE_SIZE];
    if cache.lookup(key(page), caller, &mut out) {
        assert_eq!(decode(&out), (page, version));
        return true;
    }
    let ticket = cache.ticket(key(page));
    cache.admit(key(page), caller, &page_bytes(page, version), ticket);
    false
}

fn small(frames: usize, policy: Policy) -> PageCache {
    PageCache::new(CacheConfig {
        policy,
        ..CacheConfig::navis(frames)
    })
    .unwrap()
}

#[test]
fn miss_then_admit_then_hit() {
    let cache = small(8, Policy::Navis);
    assert!(!read_through(&cache, 3, 0, Caller::Search));
    assert!(read_through(&cache, 3, 0, Caller::Search));
    let other_index = PageKey { tag: 7, page: 3 };
    let mut out = vec![0u8; PAGE_SIZE];
    assert!(
        !cache.lookup(other_index, Caller::Search, &mut out),
        "tags keep indexes apart"
    );
    let s = cache.stats();
    assert_eq!(
        (s.search_misses, s.search_hits_window, s.admitted),
        (2, 1, 1)
    );
    assert_eq!((s.frames, s.window_frames, s.free_frames), (8, 1, 7));
}

#[test]
fn inserts_promote_after_two_accesses_searches_need_more() {
    let cache = small(20, Policy::Navis);
    assert_eq!(cache.frozen_capacity(), 18);
    // Insert path: admission counts as the first access, one hit promotes.
    read_through(&cache, 1, 0, Caller::Insert);
    read_through(&cache, 1, 0, Caller::Insert);
    assert_eq!(cache.stats().promoted, 1);
    assert_eq!(cache.resident(TAG), (1, 0));
    // Search path: promoted only at the search threshold.
    read_through(&cache, 2, 0, Caller::Search);
    for _ in 1..DEFAULT_SEARCH_PROMOTE_HITS - 1 {
        read_through(&cache, 2, 0, Caller::Search);
    }
    assert_eq!(cache.resident(TAG), (1, 1), "still in the window");
    read_through(&cache, 2, 0, Caller::Search);
    assert_eq!(cache.resident(TAG), (2, 0));
    let s = cache.stats();
    assert_eq!(s.search_hits_frozen, 0);
    read_through(&cache, 2, 0, Caller::Search);
    assert_eq!(cache.stats().search_hits_frozen, 1);
}

#[test]
fn frozen_region_evicts_the_earliest_promoted() {
    // 10 frames: 9 may be frozen, 1 is window.
    let cache = small(10, Policy::Navis);
    for p in 0..9 {
        read_through(&cache, p, 0, Caller::Insert);
        read_through(&cache, p, 0, Caller::Insert);
    }
    assert_eq!(cache.resident(TAG), (9, 0));
    // Promote a tenth page: page 0, promoted first, leaves.
    read_through(&cache, 100, 0, Caller::Insert);
    read_through(&cache, 100, 0, Caller::Insert);
    let s = cache.stats();
    assert_eq!((s.promoted, s.frozen_evictions), (10, 1));
    assert!(
        !read_through(&cache, 0, 0, Caller::Search),
        "page 0 was evicted"
    );
    for p in 1..9 {
        assert!(
            read_through(&cache, p, 0, Caller::Search),
            "page {p} stays frozen"
        );
    }
}

#[test]
fn clock_frozen_eviction_spares_pages_hit_since_promotion() {
    let cache = PageCache::new(CacheConfig {
        frozen_eviction: FrozenEviction::Clock,
        ..CacheConfig::navis(10)
    })
    .unwrap();
    for p in 0..9 {
        read_through(&cache, p, 0, Caller::Insert);
        read_through(&cache, p, 0, Caller::Insert);
    }
    // Promotion left the reference bits set: clear them by one eviction round, then hit
    // page 1 (the second promoted) again.
    read_through(&cache, 100, 0, Caller::Insert);
    read_through(&cache, 100, 0, Caller::Insert);
    assert!(read_through(&cache, 1, 0, Caller::Search));
    read_through(&cache, 101, 0, Caller::Insert);
    read_through(&cache, 101, 0, Caller::Insert);
    assert!(
        read_through(&cache, 1, 0, Caller::Search),
        "page 1 was hit: passed over"
    );
    assert_eq!(cache.stats().frozen_evictions, 2);
    assert_eq!(cache.frozen_eviction(), FrozenEviction::Clock);
}

#[test]
fn random_frozen_eviction_keeps_the_region_full() {
    let cache = PageCache::new(CacheConfig {
        frozen_eviction: FrozenEviction::Random,
        ..CacheConfig::navis(10)
    })
    .unwrap();
    for p in 0..30 {
        read_through(&cache, p, 0, Caller::Insert);
        read_through(&cache, p, 0, Caller::Insert);
    }
    let s = cache.stats();
    assert_eq!(s.promoted, 30);
    assert_eq!(s.frozen_evictions, 21);
    assert_eq!(s.frozen_frames, 9);
    let cached = (0..30)
        .filter(|&p| read_through(&cache, p, 0, Caller::Search))
        .count();
    assert!(
        cached >= 9,
        "{cached} of the promoted pages are still cached"
    );
}

#[test]
fn window_is_clock_and_protects_referenced_pages() {
    let cache = small(4, Policy::Lru);
    for p in 0..4 {
        read_through(&cache, p, 0, Caller::Search);
    }
    assert_eq!(cache.stats().free_frames, 0);
    // Reference page 2; admitting two more pages evicts two others but not page 2.
    assert!(read_through(&cache, 2, 0, Caller::Search));
    read_through(&cache, 10, 0, Caller::Search);
    read_through(&cache, 11, 0, Caller::Search);
    assert!(read_through(&cache, 2, 0, Caller::Search));
    let s = cache.stats();
    assert_eq!(s.window_evictions, 2);
    assert_eq!(s.promoted, 0, "LRU never promotes");
}

#[test]
fn lru_uses_every_frame_for_recency() {
    let cache = small(16, Policy::Lru);
    assert_eq!(cache.frozen_capacity(), 0);
    for p in 0..16 {
        read_through(&cache, p, 0, Caller::Insert);
        read_through(&cache, p, 0, Caller::Insert);
    }
    let s = cache.stats();
    assert_eq!((s.window_frames, s.frozen_frames, s.promoted), (16, 0, 0));
}

#[test]
fn off_never_hits_and_counts_misses() {
    let cache = small(4, Policy::Off);
    assert!(!read_through(&cache, 1, 0, Caller::Search));
    assert!(!read_through(&cache, 1, 0, Caller::Search));
    let s = cache.stats();
    assert_eq!((s.search_misses, s.admitted, s.window_frames), (2, 0, 0));
}

#[test]
fn refresh_overwrites_in_place_and_drop_frees() {
    let cache = small(8, Policy::Navis);
    read_through(&cache, 5, 0, Caller::Search);
    cache.refresh(key(5), &page_bytes(5, 1));
    assert!(
        read_through(&cache, 5, 1, Caller::Search),
        "refreshed copy served"
    );
    // A refresh of an uncached page caches nothing.
    cache.refresh(key(6), &page_bytes(6, 1));
    assert!(!read_through(&cache, 6, 1, Caller::Search));
    cache.drop_page(key(5));
    let s = cache.stats();
    assert_eq!((s.refreshed, s.dropped), (1, 1));
    let mut out = vec![0u8; PAGE_SIZE];
    assert!(!cache.lookup(key(5), Caller::Search, &mut out));
    assert_eq!(
        cache.stats().free_frames,
        7,
        "page 6 cached, page 5's frame free again"
    );
}

#[test]
fn purge_frees_one_builds_frames_only() {
    let cache = small(16, Policy::Navis);
    for p in 0..5 {
        read_through(&cache, p, 0, Caller::Insert);
        read_through(&cache, p, 0, Caller::Insert); // some frozen
    }
    let other = PageKey { tag: 99, page: 1 };
    let t = cache.ticket(other);
    cache.admit(other, Caller::Search, &page_bytes(1, 0), t);
    assert_eq!(cache.purge(TAG), 5);
    let s = cache.stats();
    assert_eq!(
        (s.frozen_frames, s.window_frames, s.free_frames),
        (0, 1, 15)
    );
    let mut out = vec![0u8; PAGE_SIZE];
    assert!(cache.lookup(other, Caller::Search, &mut out));
    assert!(!cache.lookup(key(0), Caller::Search, &mut out));
}

#[test]
fn a_read_that_raced_with_a_write_is_not_admitted() {
    let cache = small(8, Policy::Navis);
    let ticket = cache.ticket(key(9));
    // The reader's disk read returned version 0; meanwhile a writer wrote version 1.
    cache.refresh(key(9), &page_bytes(9, 1));
    cache.admit(key(9), Caller::Search, &page_bytes(9, 0), ticket);
    let mut out = vec![0u8; PAGE_SIZE];
    assert!(!cache.lookup(key(9), Caller::Search, &mut out));
    assert_eq!(
        (cache.stats().admit_skipped, cache.stats().admit_raced),
        (1, 1)
    );
    // Same for a drop (the page was freed while it was being read).
    let ticket = cache.ticket(key(9));
    cache.drop_page(key(9));
    cache.admit(key(9), Caller::Search, &page_bytes(9, 0), ticket);
    assert!(!cache.lookup(key(9), Caller::Search, &mut out));
}

#[test]
fn map_removal_keeps_probe_runs_intact() {
    // Many pages through a small cache: every eviction removes a map entry; all resident
    // pages must stay findable and the frame counts must add up.
    let cache = small(64, Policy::Lru);
    for round in 0..20u32 {
        for p in 0..200u32 {
            let page = p * 7 + round % 3;
            read_through(&cache, page, 0, Caller::Search);
        }
    }
    let s = cache.stats();
    assert_eq!(s.window_frames + s.free_frames + s.frozen_frames, 64);
    let mut out = vec![0u8; PAGE_SIZE];
    let resident = (0..1500u32)
        .filter(|&p| cache.lookup(key(p), Caller::Search, &mut out))
        .count();
    assert_eq!(
        resident as u64, s.window_frames,
        "every frame in use is reachable"
    );
}

#[test]
fn attach_sees_the_same_cache_and_rejects_garbage() {
    let config = CacheConfig::navis(16);
    let size = PageCache::region_size(16);
    let mut memory = crate::io::AlignedPage::vec(size.div_ceil(PAGE_SIZE));
    let base = memory.as_mut_ptr().cast::<u8>();
    // SAFETY: `memory` outlives both views and is only used through them.
    let (a, b) = unsafe {
        let a = PageCache::init_at(base, size, config).unwrap();
        let b = PageCache::attach(base, size).unwrap();
        (a, b)
    };
    read_through(&a, 1, 4, Caller::Search);
    assert!(
        read_through(&b, 1, 4, Caller::Search),
        "a second view shares the frames"
    );
    assert_eq!(b.stats().search_hits_window, 1);
    assert_eq!(b.policy(), Policy::Navis);
    drop((a, b));
    let mut zeroed = crate::io::AlignedPage::vec(4);
    // SAFETY: as above.
    let err = unsafe { PageCache::attach(zeroed.as_mut_ptr().cast(), 4 * PAGE_SIZE) };
    assert!(err.is_err());
    // SAFETY: as above; the region is too small for 16 frames.
    let err = unsafe { PageCache::init_at(zeroed.as_mut_ptr().cast(), 4 * PAGE_SIZE, config) };
    assert!(err.unwrap_err().to_string().contains("smaller than"));
}

#[test]
fn frames_for_bytes_fits() {
    for bytes in [100_000usize, 1 << 20, 64 << 20] {
        let n = PageCache::frames_for_bytes(bytes);
        assert!(n > 0 && PageCache::region_size(n) <= bytes);
        assert!(PageCache::region_size(n + 1) > bytes || n + 1 > bytes / PAGE_SIZE);
    }
    assert_eq!(PageCache::frames_for_bytes(1000), 0);
    assert!(PageCache::new(CacheConfig::navis(0)).is_err());
}

/// Several threads read through the cache while writers rewrite pages: no torn page is ever
/// returned, and once a writer's refresh returned, no lookup returns an older version.
#[test]
fn concurrent_readers_and_writers_never_see_stale_or_torn_pages() {
    const PAGES: u32 = 96;
    for policy in [Policy::Navis, Policy::Lru] {
        let cache = Arc::new(
            PageCache::new(CacheConfig {
                policy,
                search_promote_hits: 3,
                ..CacheConfig::navis(32)
            })
            .unwrap(),
        );
        // The "disk": the current version of each page, written under its mutex.
        let disk: Arc<Vec<Mutex<u32>>> = Arc::new((0..PAGES).map(|_| Mutex::new(0)).collect());
        // Versions whose refresh has returned (what a reader following the indirection
        // table could have seen published).
        let published: Arc<Vec<AtomicU32>> =
            Arc::new((0..PAGES).map(|_| AtomicU32::new(0)).collect());
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for w in 0..2u32 {
            let (cache, disk, published, stop) =
                (cache.clone(), disk.clone(), published.clone(), stop.clone());
            threads.push(std::thread::spawn(move || {
                let mut x = 0x1234_5678u64 + w as u64;
                let mut writes = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let page = (x % PAGES as u64) as u32;
                    // One writer per page at a time, as a freshly allocated page has (the
                    // mutex). As write_lists: the disk write returned, then the refresh,
                    // then the new version is published.
                    let mut d = disk[page as usize].lock().unwrap();
                    *d += 1;
                    let version = *d;
                    cache.refresh(key(page), &page_bytes(page, version));
                    published[page as usize].store(version, Ordering::Release);
                    drop(d);
                    if x.is_multiple_of(11) {
                        cache.drop_page(key((page + 1) % PAGES));
                    }
                    writes += 1;
                }
                writes
            }));
        }
        for r in 0..4u32 {
            let (cache, disk, published, stop) =
                (cache.clone(), disk.clone(), published.clone(), stop.clone());
            threads.push(std::thread::spawn(move || {
                let mut x = 0x9876_5431u64 + r as u64;
                let mut out = vec![0u8; PAGE_SIZE];
                let mut reads = 0u64;
                let caller = if r % 2 == 0 {
                    Caller::Search
                } else {
                    Caller::Insert
                };
                while !stop.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // Skewed: low pages are hot.
                    let page = ((x % PAGES as u64) * (x % 7 + 1) / 7) as u32 % PAGES;
                    let floor = published[page as usize].load(Ordering::Acquire);
                    if cache.lookup(key(page), caller, &mut out) {
                        let (p, v) = decode(&out);
                        assert_eq!(p, page);
                        assert!(
                            v >= floor,
                            "{policy:?}: page {page} v{v} older than v{floor}"
                        );
                    } else {
                        let ticket = cache.ticket(key(page));
                        let version = *disk[page as usize].lock().unwrap();
                        std::thread::yield_now(); // widen the race window
                        cache.admit(key(page), caller, &page_bytes(page, version), ticket);
                    }
                    reads += 1;
                }
                reads
            }));
        }
        std::thread::sleep(std::time::Duration::from_millis(400));
        stop.store(true, Ordering::Relaxed);
        let work: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert!(work > 1000);
        let s = cache.stats();
        assert!(s.hits() > 0 && s.admitted > 0, "{s:?}");
        assert_eq!(s.window_frames + s.frozen_frames + s.free_frames, 32);
        // After the run, every cached page equals the disk.
        let mut out = vec![0u8; PAGE_SIZE];
        for page in 0..PAGES {
            if cache.lookup(key(page), Caller::Search, &mut out) {
                assert_eq!(decode(&out), (page, *disk[page as usize].lock().unwrap()));
            }
        }
    }
}

/// A region of 8 KiB frames (relation edge pages): whole 8 KiB pages go in and come out,
/// write-through and drops work as with 4 KiB frames, and a process that attaches learns the
/// frame size from the header.
#[test]
fn eight_kib_frames_hold_whole_relation_pages_and_attach_reads_their_size() {
    let config = CacheConfig {
        frame_size: BLOCK_SIZE,
        ..CacheConfig::navis(16)
    };
    let size = PageCache::region_size_with(BLOCK_SIZE, 16);
    assert!(size >= PageCache::region_size(16) + 16 * (BLOCK_SIZE - PAGE_SIZE));
    let mut memory = crate::io::AlignedPage::vec(size.div_ceil(PAGE_SIZE));
    let base = memory.as_mut_ptr().cast::<u8>();
    // SAFETY: `memory` outlives both views and is only used through them.
    let (a, b) = unsafe {
        let a = PageCache::init_at(base, size, config).unwrap();
        let b = PageCache::attach(base, size).unwrap();
        (a, b)
    };
    assert_eq!((a.frame_size(), b.frame_size()), (BLOCK_SIZE, BLOCK_SIZE));
    let mut out = vec![0u8; BLOCK_SIZE];
    for page in 0..20u32 {
        let k = key(page);
        assert!(!a.lookup(k, Caller::Search, &mut out));
        let ticket = a.ticket(k);
        a.admit(
            k,
            Caller::Search,
            &page_bytes_of(BLOCK_SIZE, page, 1),
            ticket,
        );
    }
    // 16 frames for 20 pages: the last ones are cached, and whole through the other view.
    assert!(b.lookup(key(19), Caller::Search, &mut out));
    assert_eq!(decode(&out), (19, 1));
    b.refresh(key(19), &page_bytes_of(BLOCK_SIZE, 19, 2));
    assert!(a.lookup(key(19), Caller::Search, &mut out));
    assert_eq!(decode(&out), (19, 2), "the refresh replaced all 8 KiB");
    a.drop_page(key(19));
    assert!(!b.lookup(key(19), Caller::Search, &mut out));
    let s = b.stats();
    assert_eq!((s.refreshed, s.dropped, s.frames), (1, 1, 16));

    // A header whose frame size is not one a cache can have is refused, as is a region
    // too short for the frames its header declares (8 KiB frames in a 4 KiB-sized region).
    a.header().frame_size.store(3000, Ordering::Relaxed);
    // SAFETY: as above.
    let err = unsafe { PageCache::attach(base, size) }.unwrap_err();
    assert!(err.to_string().contains("3000"), "{err}");
    a.header()
        .frame_size
        .store(BLOCK_SIZE as u32, Ordering::Relaxed);
    // SAFETY: as above.
    let err = unsafe { PageCache::attach(base, PageCache::region_size(16)) }.unwrap_err();
    assert!(err.to_string().contains("smaller than"), "{err}");
}

#[test]
fn sizing_follows_the_frame_size_and_other_sizes_are_refused() {
    for bytes in [100_000usize, 1 << 20, 64 << 20] {
        assert_eq!(
            PageCache::frames_for_bytes(bytes),
            PageCache::frames_for_bytes_with(PAGE_SIZE, bytes)
        );
        let n = PageCache::frames_for_bytes_with(BLOCK_SIZE, bytes);
        assert!(n > 0 && PageCache::region_size_with(BLOCK_SIZE, n) <= bytes);
        assert!(PageCache::region_size_with(BLOCK_SIZE, n + 1) > bytes);
        // At least half the frames of the 4 KiB sizing (the per-frame bookkeeping weighs
        // less next to an 8 KiB frame), and never more bytes of frames than the region.
        let small = PageCache::frames_for_bytes(bytes);
        assert!(small / 2 <= n && n < small, "{n} vs {small}");
        assert!(n * BLOCK_SIZE <= bytes);
    }
    assert_eq!(
        PageCache::region_size(7),
        PageCache::region_size_with(PAGE_SIZE, 7)
    );
    for frame_size in [0, 2048, 4095, 16384] {
        let err = PageCache::new(CacheConfig {
            frame_size,
            ..CacheConfig::navis(4)
        })
        .unwrap_err();
        assert!(err.to_string().contains("frames are"), "{err}");
    }
    let cache = PageCache::new(CacheConfig {
        frame_size: BLOCK_SIZE,
        ..CacheConfig::navis(4)
    })
    .unwrap();
    assert_eq!(cache.frame_size(), BLOCK_SIZE);
}
