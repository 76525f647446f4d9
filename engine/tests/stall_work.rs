//! Work in read stalls (LIOS, RFC 0004 §4): a search with stall work installed calls it once
//! per io_uring batch with the reads in flight, returns the same rows as without it, and a
//! work that panics unwinds out of the search only after the batch's reads completed.

use navis_engine::dataset::synthetic_clustered;
use navis_engine::index::{build_index, Index, IndexParams};
use navis_engine::io_wait::{with_stall_work, StallWork};
use navis_engine::search::{SearchCursor, SearchParams};
use navis_engine::storage::HeapTid;
use navis_engine::Metric;
use std::time::Duration;

const DIM: usize = 16;

#[derive(Default)]
struct Counting {
    stalls: usize,
    reads_in_flight: usize,
    completions: usize,
    panic_at: Option<usize>,
}

impl StallWork for Counting {
    fn stalled(&mut self, in_flight: usize) {
        self.stalls += 1;
        self.reads_in_flight += in_flight;
        if Some(self.stalls) == self.panic_at {
            panic!("work failed in a stall");
        }
    }

    fn completed(&mut self, in_flight: usize, _since_submit: Duration, worked: Duration) {
        assert!(in_flight > 0);
        assert!(worked > Duration::ZERO || self.stalls == 0);
        self.completions += 1;
    }
}

#[test]
fn stall_work_runs_between_submit_and_wait_without_changing_results() {
    let n = 2000;
    let data = synthetic_clustered(n + 20, DIM, 8, 3);
    let (rows, queries) = data.split_at(n * DIM);
    let tids: Vec<HeapTid> = (0..n as u32)
        .map(|i| HeapTid {
            block: i,
            offset: 1,
        })
        .collect();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("idx");
    let params = IndexParams {
        metric: Metric::L2,
        max_degree: 16,
        build_list: 32,
        pq_bytes: Some(4),
        threads: 2,
        ..IndexParams::default()
    };
    build_index(&dir, rows, &tids, &params, &|_, _, _| {}, &|| false).unwrap();
    let index = Index::open(&dir).unwrap();
    let mut reader = index.reader().unwrap();
    let uring = reader.backend_name().starts_with("io_uring");
    let search = |reader: &mut _, q: &[f32]| -> Vec<HeapTid> {
        let p = SearchParams {
            k: 10,
            list: 32,
            ..SearchParams::default()
        };
        let mut cursor = SearchCursor::new(reader, q, p).unwrap();
        cursor
            .next_batch(10)
            .unwrap()
            .iter()
            .map(|h| h.tid)
            .collect()
    };

    let mut work = Counting::default();
    for q in queries.chunks_exact(DIM) {
        let plain = search(&mut reader, q);
        let with_work = with_stall_work(&mut work, || search(&mut reader, q));
        assert_eq!(plain, with_work);
    }
    eprintln!(
        "backend {}: {} stalls, {} reads in flight, {} completions",
        reader.backend_name(),
        work.stalls,
        work.reads_in_flight,
        work.completions
    );
    if !uring {
        assert_eq!(work.stalls, 0, "a pread batch has no stall");
        return;
    }
    assert!(work.stalls >= 20, "{}", work.stalls);
    assert_eq!(work.completions, work.stalls);
    assert!(work.reads_in_flight >= work.stalls);
    // Uninstalled when the call returned.
    let before = work.stalls;
    search(&mut reader, &queries[..DIM]);
    assert_eq!(work.stalls, before);

    // A failing work: the panic leaves the search, and the reader still reads correctly.
    let mut failing = Counting {
        panic_at: Some(2),
        ..Counting::default()
    };
    let q = &queries[..DIM];
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        with_stall_work(&mut failing, || search(&mut reader, q))
    }));
    assert!(outcome.is_err());
    let mut reader = index.reader().unwrap();
    assert_eq!(search(&mut reader, q).len(), 10);
}
