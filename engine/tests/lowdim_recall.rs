//! Recall on data that is not a benchmark (issue 14 part 4), at the settings PostgreSQL uses
//! by default: 10,000 uniformly random 3-d vectors for L2, inner product and cosine, the same
//! (and L1, pgvector's `<+>`) after deleting half of them and consolidating and with the last 1000 rows inserted after
//! the build, and identical vectors that must all come back from an unbounded scan.
//!
//! The defaults are the PostgreSQL layer's: `src/options.rs` registers the index options that
//! `src/build.rs` maps onto [`IndexParams::default`] (max_degree 96, build_list 96, alpha 1.2,
//! pq_bytes automatic, entrance ratio 0.01 and degree 32), and `src/scan.rs` builds its
//! [`SearchParams`] from `src/guc.rs`: search list 40 (widened for lazy deletes), beam width
//! 4, 10 entry points, rerank top-K 10, `work_mem` (4 MB) as the scan memory, max_scan_tuples
//! 20,000, and a CASR window calibrated on the first 1000 scans at P99 (those scans rerank
//! every candidate, [`CasrMode::Off`]). Both CASR modes are measured here.
//!
//! `cargo test -p navis-engine --release --test lowdim_recall -- --nocapture` prints the
//! numbers. The ignored `report_low_dimension_recall` measures other shapes, set by
//! environment variables that reach only it: `PROBE_DIM`, `PROBE_N`, `PROBE_PQ` (code
//! bytes), `PROBE_SYM` (uniform in [-1, 1)), `PROBE_CLUSTERED` (clusters of
//! `synthetic_clustered`), `PROBE_LIST` (search list), `PROBE_METRIC` (1 L2, 2 IP, 3 cosine, 4 L1).

use std::collections::HashSet;

use navis_engine::dataset::{brute_force_knn, recall_at_k, synthetic_clustered};
use navis_engine::index::{build_index, Index, IndexParams};
use navis_engine::search::{CasrMode, SearchCursor, SearchParams};
use navis_engine::storage::HeapTid;
use navis_engine::update::{recover, InsertParams, LocalLocks};
use navis_engine::{Metric, VertexId};
use rand::{Rng, SeedableRng};

const N: usize = 10_000;
const NQ: usize = 200;
const DIM: usize = 3;

fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

/// What [`measure`] builds and how it searches: the asserted tests use [`Shape::TARGET`];
/// only the ignored report changes it.
#[derive(Clone, Copy)]
struct Shape {
    dim: usize,
    n: usize,
    pq_bytes: Option<usize>,
    /// Uniform in [-1, 1)^dim instead of [0, 1)^dim.
    symmetric: bool,
    /// The engine's synthetic clustered data with this many clusters instead of uniform.
    clusters: Option<usize>,
    list: usize,
}

impl Shape {
    const TARGET: Shape = Shape {
        dim: DIM,
        n: N,
        pq_bytes: None,
        symmetric: false,
        clusters: None,
        list: 40,
    };

    /// `n` rows for `role` (0 base, 1 queries, 2 warm-up): uniform in [0, 1)^dim (as
    /// `random()` fills a table) or [-1, 1)^dim, each role from its own seed; or rows of
    /// the same clusters, each role from its own stretch of one stream.
    fn rows(&self, n: usize, role: u64) -> Vec<f32> {
        if let Some(clusters) = self.clusters {
            let skip = role as usize * (self.n + 1000);
            let all = synthetic_clustered(skip + n, self.dim, clusters, 1);
            return all[skip * self.dim..].to_vec();
        }
        uniform(n, self.dim, role + 1, self.symmetric)
    }
}

fn uniform(n: usize, dim: usize, seed: u64, symmetric: bool) -> Vec<f32> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..n * dim)
        .map(|_| {
            let x = rng.gen::<f32>();
            if symmetric {
                2.0 * x - 1.0
            } else {
                x
            }
        })
        .collect()
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

/// Builds `data` with the default index options (vertex id = row).
fn build(
    data: &[f32],
    dim: usize,
    metric: Metric,
    pq_bytes: Option<usize>,
) -> (tempfile::TempDir, Index) {
    let n = data.len() / dim;
    let tids: Vec<HeapTid> = (0..n).map(tid_of).collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idx");
    let params = IndexParams {
        metric,
        pq_bytes,
        threads: 2,
        ..IndexParams::default()
    };
    build_index(&path, data, &tids, &params, &|_, _, _| {}, &|| false).unwrap();
    let index = Index::open(&path).unwrap();
    (dir, index)
}

/// What `src/scan.rs` passes at the default settings (search list 40).
fn scan_params(index: &Index, casr: CasrMode) -> SearchParams {
    scan_params_with_list(index, casr, 40)
}

fn scan_params_with_list(index: &Index, casr: CasrMode, list: usize) -> SearchParams {
    SearchParams {
        k: 10.min(list),
        list: index.widened_list(list),
        beam_width: 4,
        entry_list: 10,
        casr,
        scan_memory: 4 << 20,
        max_results: 20_000,
        ..SearchParams::default()
    }
}

/// The CASR window PostgreSQL would calibrate on the index's first 1000 scans.
fn calibrated_window(index: &Index, shape: &Shape) -> usize {
    let warm = shape.rows(1000, 2);
    let mut reader = index.reader().unwrap();
    let params = scan_params_with_list(index, CasrMode::Off, shape.list);
    index
        .warm_up(&mut reader, &warm, params, 2000)
        .unwrap()
        .expect("the warm-up calibrates a window")
}

/// The rows as the index ranks them (unit length for cosine).
fn as_indexed(rows: &[f32], dim: usize, metric: Metric) -> Vec<f32> {
    let mut v = rows.to_vec();
    if metric.needs_normalization() {
        v.chunks_exact_mut(dim).for_each(|r| {
            navis_engine::distance::normalize(r);
        });
    }
    v
}

/// Exact top-20 of each query among the rows `live` (ids are rows).
fn truth(
    base: &[f32],
    dim: usize,
    queries: &[f32],
    metric: Metric,
    live: &[usize],
) -> Vec<Vec<VertexId>> {
    let base = as_indexed(base, dim, metric);
    let queries = as_indexed(queries, dim, metric);
    let rows: Vec<f32> = live
        .iter()
        .flat_map(|&r| base[r * dim..(r + 1) * dim].iter().copied())
        .collect();
    brute_force_knn(&rows, dim, &queries, 20, metric, 2)
        .into_iter()
        .map(|l| {
            l.into_iter()
                .map(|i| live[i as usize] as VertexId)
                .collect()
        })
        .collect()
}

/// Recall@10 and @20 of the first 20 rows of one scan per query (hits mapped to rows by
/// their TIDs: inserted rows need not get their row number as vertex id).
fn recall(
    index: &Index,
    queries: &[f32],
    dim: usize,
    params: SearchParams,
    truth: &[Vec<VertexId>],
) -> (f64, f64) {
    let mut reader = index.reader().unwrap();
    let found: Vec<Vec<VertexId>> = queries
        .chunks_exact(dim)
        .map(|q| {
            let mut cursor = SearchCursor::new(&mut reader, q, params).unwrap();
            cursor
                .next_batch(20)
                .unwrap()
                .iter()
                .map(|h| row_of(h.tid) as VertexId)
                .collect()
        })
        .collect();
    (
        recall_at_k(&found, truth, 10),
        recall_at_k(&found, truth, 20),
    )
}

/// Recall at both CASR modes, fresh and after deleting every even row and consolidating;
/// returns `[(mode, fresh r@10, r@20, after r@10, r@20)]` and prints them.
fn measure(metric: Metric, shape: Shape) -> Vec<(String, f64, f64, f64, f64)> {
    let Shape { dim, n, list, .. } = shape;
    let base = shape.rows(n, 0);
    let queries = shape.rows(NQ, 1);
    let (_dir, index) = build(&base, dim, metric, shape.pq_bytes);
    let window = calibrated_window(&index, &shape);
    let modes = [
        ("casr off", CasrMode::Off),
        ("casr window", CasrMode::Window(window)),
    ];
    let all: Vec<usize> = (0..n).collect();
    let fresh_truth = truth(&base, dim, &queries, metric, &all);
    let fresh: Vec<(f64, f64)> = modes
        .iter()
        .map(|&(_, casr)| {
            recall(
                &index,
                &queries,
                dim,
                scan_params_with_list(&index, casr, list),
                &fresh_truth,
            )
        })
        .collect();
    let deleted = index
        .bulk_delete(|tid| row_of(tid).is_multiple_of(2), &|| false)
        .unwrap();
    assert_eq!(deleted.newly_deleted as usize, n.div_ceil(2));
    index
        .consolidate(&LocalLocks::default(), &|| false)
        .unwrap();
    let odd: Vec<usize> = (1..n).step_by(2).collect();
    let odd_truth = truth(&base, dim, &queries, metric, &odd);
    let mut out = Vec::new();
    for (&(name, casr), f) in modes.iter().zip(fresh) {
        let params = scan_params_with_list(&index, casr, list);
        let after = recall(&index, &queries, dim, params, &odd_truth);
        eprintln!(
            "{metric:?} {n} x {dim}-d, pq_bytes {}, list {list}, {name} (window {window}): \
             recall@10 {:.4}, @20 {:.4}; after deleting half and consolidating: @10 {:.4}, @20 {:.4}",
            shape.pq_bytes.map_or("auto".into(), |b| b.to_string()),
            f.0, f.1, after.0, after.1
        );
        out.push((name.to_string(), f.0, f.1, after.0, after.1));
    }
    out
}

fn assert_targets(metric: Metric) {
    for (mode, r10, r20, d10, d20) in measure(metric, Shape::TARGET) {
        assert!(
            r10 >= 0.99 && r20 >= 0.99,
            "{metric:?} {mode}: recall@10 {r10}, @20 {r20}"
        );
        assert!(
            d10 >= 0.95 && d20 >= 0.95,
            "{metric:?} {mode} after deletes: @10 {d10}, @20 {d20}"
        );
    }
}

#[test]
fn random_3d_l2_recall_fresh_and_after_deleting_half() {
    assert_targets(Metric::L2);
}

#[test]
fn random_3d_inner_product_recall_fresh_and_after_deleting_half() {
    assert_targets(Metric::InnerProduct);
}

#[test]
fn random_3d_cosine_recall_fresh_and_after_deleting_half() {
    assert_targets(Metric::Cosine);
}

/// Built over the first 9000 rows, the last 1000 inserted as PostgreSQL's aminsert does
/// (insert list 100; its first 1000 inserts rerank every candidate). About a tenth of
/// every query's neighbours are inserted rows. (Inserts take a few ms each here, so more
/// would make the test slow.)
fn assert_recall_after_inserts(metric: Metric) {
    const INSERTED: usize = 1000;
    let base = Shape::TARGET.rows(N, 0);
    let queries = Shape::TARGET.rows(NQ, 1);
    let (_dir, index) = build(&base[..(N - INSERTED) * DIM], DIM, metric, None);
    let locks = LocalLocks::default();
    recover(index.files(), &locks, 1).unwrap();
    let mut reader = index.reader().unwrap();
    for row in N - INSERTED..N {
        let v = &base[row * DIM..(row + 1) * DIM];
        let params = InsertParams::default();
        index
            .insert(&mut reader, &locks, v, tid_of(row), params)
            .unwrap();
    }
    drop(reader);
    let window = calibrated_window(&index, &Shape::TARGET);
    let all: Vec<usize> = (0..N).collect();
    let truth = truth(&base, DIM, &queries, metric, &all);
    for casr in [CasrMode::Off, CasrMode::Window(window)] {
        let params = scan_params(&index, casr);
        let (r10, r20) = recall(&index, &queries, DIM, params, &truth);
        eprintln!(
            "{metric:?} {} built + {INSERTED} inserted 3-d, {casr:?}: recall@10 {r10:.4}, \
             @20 {r20:.4}",
            N - INSERTED
        );
        assert!(
            r10 >= 0.99 && r20 >= 0.99,
            "{metric:?} {casr:?} after inserts: @10 {r10}, @20 {r20}"
        );
    }
}

#[test]
fn random_3d_l2_recall_after_inserts() {
    assert_recall_after_inserts(Metric::L2);
}

#[test]
fn random_3d_inner_product_recall_after_inserts() {
    assert_recall_after_inserts(Metric::InnerProduct);
}

#[test]
fn random_3d_cosine_recall_after_inserts() {
    assert_recall_after_inserts(Metric::Cosine);
}

#[test]
fn random_3d_l1_recall_fresh_and_after_deleting_half() {
    assert_targets(Metric::L1);
}

#[test]
fn random_3d_l1_recall_after_inserts() {
    assert_recall_after_inserts(Metric::L1);
}

#[test]
fn default_pq_code_has_a_subspace_per_dimension_below_twelve() {
    let p = IndexParams::default();
    let pairs = [
        (1, 1),
        (3, 3),
        (8, 8),
        (12, 12),
        (16, 12),
        (47, 12),
        (50, 12),
        (100, 25),
        (384, 96),
        (784, 128),
    ];
    for (dim, bytes) in pairs {
        assert_eq!(p.pq_bytes_for(dim), bytes, "dim {dim}");
    }
    let chosen = IndexParams {
        pq_bytes: Some(1),
        ..IndexParams::default()
    };
    assert_eq!(chosen.pq_bytes_for(3), 1);
}

/// Runs an unbounded cursor and returns the ids it yielded, checking exact order on the way.
fn exhaust(index: &Index, q: &[f32], params: SearchParams) -> Vec<VertexId> {
    let mut reader = index.reader().unwrap();
    let mut cursor = SearchCursor::new(&mut reader, q, params).unwrap();
    let mut ids = Vec::new();
    let mut last = f32::NEG_INFINITY;
    while let Some(hit) = cursor.next_hit().unwrap() {
        assert!(hit.distance >= last, "out of order");
        last = hit.distance;
        ids.push(hit.id);
    }
    ids
}

/// Builds `data` for each metric and checks that unbounded scans return every live copy of
/// `point` (rows `copies`), before and after deleting every odd row and consolidating.
/// `costs`: the sequential page costs to scan with (infinity: graph passes alone, which
/// reach copies no edge leads to only through the final round over unreached vertices).
fn check_copies(data: &[f32], point: &[f32], copies: &[usize], costs: &[f64]) {
    for metric in [Metric::L2, Metric::InnerProduct, Metric::Cosine] {
        let (_dir, index) = build(data, DIM, metric, None);
        let window = calibrated_window(&index, &Shape::TARGET);
        let mut live: HashSet<VertexId> = copies.iter().map(|&r| r as VertexId).collect();
        for round in 0..2 {
            // The copy itself (distance 0 to every copy) and a query near it.
            for q in [point.to_vec(), vec![0.26, 0.5, 0.74]] {
                for list in [1, 40] {
                    for casr in [CasrMode::Off, CasrMode::Window(window)] {
                        for &cost in costs {
                            let params = SearchParams {
                                k: 10.min(list),
                                list: index.widened_list(list),
                                sequential_page_cost: cost,
                                ..scan_params(&index, casr)
                            };
                            let ids: HashSet<VertexId> =
                                exhaust(&index, &q, params).into_iter().collect();
                            let missing = live.difference(&ids).count();
                            assert_eq!(
                                missing,
                                0,
                                "{metric:?}, {} rows, round {round}, q {q:?}, list {list}, \
                                 {casr:?}, cost {cost}: {missing} of {} copies missing",
                                data.len() / DIM,
                                live.len()
                            );
                        }
                    }
                }
            }
            if round == 0 {
                index
                    .bulk_delete(|tid| !row_of(tid).is_multiple_of(2), &|| false)
                    .unwrap();
                index
                    .consolidate(&LocalLocks::default(), &|| false)
                    .unwrap();
                live.retain(|&v| v.is_multiple_of(2));
            }
        }
    }
}

const POINT: [f32; 3] = [0.25, 0.5, 0.75];

#[test]
fn twenty_identical_3d_vectors_all_come_back_from_unbounded_scans() {
    let copies: Vec<usize> = (0..20).collect();
    check_copies(&POINT.repeat(20), &POINT, &copies, &[0.25, f64::INFINITY]);
}

#[test]
fn identical_vectors_among_random_3d_rows_all_come_back_from_unbounded_scans() {
    // Twenty copies spread over the ids of 10,000 random rows, as rows inserted over time
    // would be. At the default costs the cursor goes exhaustive after its first pass (the
    // vector file is 30 pages), so the first pass's top-K must not drop a copy out of order.
    let mut data = uniform(N, DIM, 5, false);
    let copies: Vec<usize> = (0..20).map(|c| c * 500 + 7).collect();
    for &r in &copies {
        data[r * DIM..(r + 1) * DIM].copy_from_slice(&POINT);
    }
    check_copies(&data, &POINT, &copies, &[0.25]);
}

#[test]
#[ignore]
fn report_low_dimension_recall() {
    let shape = Shape {
        dim: env("PROBE_DIM").unwrap_or(DIM),
        n: env("PROBE_N").unwrap_or(N),
        pq_bytes: env("PROBE_PQ"),
        symmetric: std::env::var("PROBE_SYM").is_ok(),
        clusters: env("PROBE_CLUSTERED"),
        list: env("PROBE_LIST").unwrap_or(40),
    };
    // PROBE_METRIC=1, 2, 3 or 4: L2, inner product, cosine or L1 only.
    let only: Option<u32> = env("PROBE_METRIC");
    for metric in [Metric::L2, Metric::InnerProduct, Metric::Cosine, Metric::L1] {
        if only.is_none_or(|m| Metric::from_code(m) == Some(metric)) {
            measure(metric, shape);
        }
    }
}
