//! An index opened from its relation through its runtime copy (RFC 0001 §3): the same
//! `Index` (searches, verify, recovery) the side directory gives, with the bulk pages read
//! from the relation's segment files. The results must equal the read-only `RelationIndex`
//! over the same pages, and several openers share one runtime directory.

use std::sync::Arc;

use navis_engine::dataset::{brute_force_knn, recall_at_k, synthetic_clustered};
use navis_engine::index::{CasrSetting, Index, IndexParams};
use navis_engine::io::{BackendChoice, IoOptions};
use navis_engine::relation::{build_relation, open_index, RelationIndex};
use navis_engine::search::{CasrMode, SearchCursor, SearchParams};
use navis_engine::storage::HeapTid;
use navis_engine::store::{FileStore, PageStore};
use navis_engine::update::{recover, LocalLocks};
use navis_engine::{Metric, VertexId};

const N: usize = 3000;
const NQ: usize = 60;
const DIM: usize = 24;

fn params(metric: Metric) -> IndexParams {
    IndexParams {
        metric,
        max_degree: 32,
        build_list: 64,
        pq_bytes: Some(8),
        threads: 2,
        ..IndexParams::default()
    }
}

fn tid(i: usize) -> HeapTid {
    HeapTid {
        block: i as u32 / 50,
        offset: (i % 50 + 1) as u16,
    }
}

fn search_ids(index: &Index, queries: &[f32], p: SearchParams) -> Vec<Vec<VertexId>> {
    let mut reader = index.reader().unwrap();
    queries
        .chunks_exact(DIM)
        .map(|q| {
            let (hits, _) = index.search(&mut reader, q, p, CasrSetting::Off).unwrap();
            hits.iter().map(|h| h.id).collect()
        })
        .collect()
}

#[test]
fn runtime_copy_searches_like_the_relation_and_is_shared() {
    for metric in [Metric::L2, Metric::Cosine] {
        let all = synthetic_clustered(N + NQ, DIM, 12, 3);
        let (base, queries) = all.split_at(N * DIM);
        let tids: Vec<HeapTid> = (0..N).map(tid).collect();
        let tmp = tempfile::tempdir().unwrap();
        let fork = tmp.path().join("16400");
        let store = FileStore::create(&fork).unwrap();
        build_relation(
            &store,
            base,
            &tids,
            &params(metric),
            9,
            &|_, _, _| {},
            &|| false,
        )
        .unwrap();
        let store: Arc<dyn PageStore> = Arc::new(store);
        let runtime = tmp.path().join("runtime-16400");

        let index = open_index(Arc::clone(&store), &fork, &runtime).unwrap();
        assert!(runtime.join("indirection.dat").exists());
        assert_eq!(index.len(), N);
        let locks = LocalLocks::new(64);
        let recovered = recover(index.files(), &locks, 5).unwrap();
        assert!(recovered.rebuilt);
        assert_eq!(recovered.published as usize, N);
        let verify = index.verify().unwrap();
        assert!(verify.is_clean(), "{metric:?}: {verify:?}");
        assert_eq!(verify.vertices as usize, N);

        let p = SearchParams {
            k: 10,
            list: 48,
            casr: CasrMode::Off,
            ..SearchParams::default()
        };
        let found = search_ids(&index, queries, p);
        let rel = RelationIndex::open(&*store, &fork).unwrap();
        let options = IoOptions {
            queue_depth: 64,
            backend: BackendChoice::Auto,
            direct: true,
            probe_page_cache: true,
        };
        let mut rel_reader = rel.reader(options).unwrap();
        let expected: Vec<Vec<VertexId>> = queries
            .chunks_exact(DIM)
            .map(|q| {
                let (hits, _) = rel.search(&mut rel_reader, q, p).unwrap();
                hits.iter().map(|h| h.id).collect()
            })
            .collect();
        assert_eq!(
            found, expected,
            "{metric:?}: the runtime copy searches differently"
        );
        // Ground truth over the vectors as the index ranks them (unit length for cosine).
        let unit = |rows: &[f32]| {
            let mut v = rows.to_vec();
            if metric.needs_normalization() {
                v.chunks_exact_mut(DIM).for_each(|r| {
                    navis_engine::distance::normalize(r);
                });
            }
            v
        };
        let truth = brute_force_knn(&unit(base), DIM, &unit(queries), 10, metric, 2);
        let recall = recall_at_k(&found, &truth, 10);
        eprintln!("{metric:?}: recall@10 {recall:.3} at L = 48");
        // A sanity bound: the property under test is the equality with `RelationIndex` above.
        assert!(recall >= 0.95, "{metric:?}: recall@10 {recall}");

        // A second opener (another backend) shares the directory and sees the same state.
        let again = open_index(Arc::clone(&store), &fork, &runtime).unwrap();
        assert!(!recover(again.files(), &locks, 5).unwrap().rebuilt);
        assert_eq!(
            search_ids(&again, &queries[..5 * DIM], p),
            found[..5].to_vec()
        );

        // An unbounded scan returns every row once, in order (exhaustive rounds read slots
        // that straddle page headers).
        let mut reader = index.reader().unwrap();
        let unbounded = SearchParams {
            k: 10,
            list: 16,
            casr: CasrMode::Off,
            ..SearchParams::default()
        };
        let mut cursor = SearchCursor::new(&mut reader, &queries[..DIM], unbounded).unwrap();
        let mut seen = vec![false; N];
        let mut last = f32::NEG_INFINITY;
        while let Some(hit) = cursor.next_hit().unwrap() {
            assert!(!seen[hit.id as usize], "{} returned twice", hit.id);
            seen[hit.id as usize] = true;
            assert!(hit.distance >= last);
            last = hit.distance;
            assert_eq!(hit.tid, tid(hit.id as usize));
        }
        let missing = seen.iter().filter(|s| !**s).count();
        assert!(
            missing <= cursor.order_skips() as usize,
            "{missing} rows never returned"
        );

        // Without a log the index refuses writes with an error, never a wrong write.
        let err = index.bulk_delete(|_| true, &|| false).unwrap_err();
        assert!(err.to_string().contains("no log"), "{err}");
        assert_eq!(index.deleted_len(), 0);
    }
}
