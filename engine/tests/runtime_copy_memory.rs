//! Making the runtime copy must not hold the PQ codes whole (RFC 0011): at 1M rows of 96-byte
//! codes the opening backend held them and a padded copy, 192 MB of heap, and in a 320 MiB
//! memory group the kernel killed it, which restarts the whole server. This binary counts
//! the heap with its own global allocator (one test, so no other test allocates meanwhile)
//! and checks the copy's codes file against the codes the pages hold.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use navis_engine::dataset::synthetic_clustered;
use navis_engine::index::IndexParams;
use navis_engine::relation::{build_relation, open_index, RelationImage};
use navis_engine::storage::HeapTid;
use navis_engine::store::{FileStore, PageStore};
use navis_engine::Metric;

/// The system allocator, counting the bytes live and the most that were live at once.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed to the system allocator unchanged; the counters only watch.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `alloc`'s contract, which `System.alloc` shares.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` above with this layout (the caller's contract).
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const N: usize = 50_000;
const DIM: usize = 128;
const PQ_BYTES: usize = 128;

#[test]
fn the_runtime_copy_streams_the_codes_instead_of_holding_them() {
    let vectors = synthetic_clustered(N, DIM, 16, 7);
    let tids: Vec<HeapTid> = (0..N as u32)
        .map(|i| HeapTid {
            block: i / 50,
            offset: (i % 50 + 1) as u16,
        })
        .collect();
    let params = IndexParams {
        metric: Metric::L2,
        max_degree: 16,
        build_list: 32,
        pq_bytes: Some(PQ_BYTES),
        threads: 2,
        ..IndexParams::default()
    };
    let tmp = tempfile::tempdir().unwrap();
    let fork = tmp.path().join("16500");
    let store = FileStore::create(&fork).unwrap();
    build_relation(&store, &vectors, &tids, &params, 3, &|_, _, _| {}, &|| {
        false
    })
    .unwrap();
    drop((vectors, tids));
    let store: Arc<dyn PageStore> = Arc::new(store);
    let runtime = tmp.path().join("runtime-16500");

    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let index = open_index(Arc::clone(&store), &fork, &runtime).unwrap();
    let peak = PEAK.load(Ordering::Relaxed) - before;
    let codes_bytes = N * PQ_BYTES;
    // Held whole, the codes alone are `codes_bytes` and the padded copy as much again. What
    // an open holds besides (entries, 20 bytes a vertex; the entrance graph, 1% of rows with
    // their vectors, read as pages, reassembled and parsed) stays below half of that here.
    assert!(
        peak < codes_bytes / 2,
        "making the runtime copy held {peak} bytes of heap at once; the codes are {codes_bytes}"
    );
    assert_eq!(index.len(), N);

    // The file holds every code the pages hold, then zeros up to the indirection's capacity.
    let image = RelationImage::read_hot(&*store, &fork).unwrap();
    let file = std::fs::read(runtime.join("pq_codes.dat")).unwrap();
    assert_eq!(image.codes.len(), codes_bytes);
    assert!(file.len() >= codes_bytes && file.len().is_multiple_of(PQ_BYTES));
    assert_eq!(&file[..codes_bytes], &image.codes[..]);
    assert!(file[codes_bytes..].iter().all(|&b| b == 0));
}
