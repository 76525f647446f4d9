//! The memory-bounded build (`index::partitioned`): rows spooled to disk, overlapping
//! partitions built one at a time within the budget, lists merged as the relation is
//! written. Checked against the in-memory build of the same rows: every page verifies, every
//! row is there with its TID, and recall@10 is within a point or two of the in-memory
//! build's.

use std::collections::HashSet;

use navis_engine::dataset::{brute_force_knn, synthetic_clustered};
use navis_engine::index::partitioned::PartitionPlan;
use navis_engine::index::spool::RowSpool;
use navis_engine::index::{IndexError, IndexParams};
use navis_engine::io::{BackendChoice, IoOptions};
use navis_engine::relation::{
    build_relation, build_relation_partitioned, RelationImage, RelationIndex,
};
use navis_engine::search::{CasrMode, SearchHit, SearchParams};
use navis_engine::storage::HeapTid;
use navis_engine::store::FileStore;
use navis_engine::{Metric, VertexId};

const N: usize = 8000;
const NQ: usize = 100;
const DIM: usize = 32;

fn params(metric: Metric) -> IndexParams {
    IndexParams {
        metric,
        max_degree: 32,
        build_list: 64,
        pq_bytes: Some(16),
        threads: 1,
        ..IndexParams::default()
    }
}

fn tids(n: usize) -> Vec<HeapTid> {
    (0..n as u32)
        .map(|i| HeapTid {
            block: i / 40 + 3,
            offset: (i % 40 + 1) as u16,
        })
        .collect()
}

fn recall(hits: &[Vec<SearchHit>], truth: &[Vec<VertexId>]) -> f64 {
    let found: usize = hits
        .iter()
        .zip(truth)
        .map(|(h, t)| {
            let t: HashSet<VertexId> = t.iter().copied().collect();
            h.iter().take(10).filter(|x| t.contains(&x.id)).count()
        })
        .sum();
    found as f64 / (truth.len() * 10) as f64
}

fn search_all(rel: &RelationIndex, queries: &[f32], list: usize) -> Vec<Vec<SearchHit>> {
    let p = SearchParams {
        list,
        casr: CasrMode::Off,
        ..SearchParams::default()
    };
    let options = IoOptions {
        queue_depth: 64,
        backend: BackendChoice::Auto,
        direct: false,
        probe_page_cache: true,
    };
    let mut reader = rel.reader(options).unwrap();
    queries
        .chunks_exact(DIM)
        .map(|q| rel.search(&mut reader, q, p).unwrap().0)
        .collect()
}

/// Builds `base` both ways under `metric`; returns (in-memory, partitioned) recall@10 at
/// search lists 12 and 40, and the plan.
fn both_builds(
    metric: Metric,
    base: &[f32],
    queries: &[f32],
) -> ([f64; 2], [f64; 2], PartitionPlan) {
    let n = base.len() / DIM;
    let tids = tids(n);
    let p = params(metric);
    let truth_rows: Vec<f32> = if metric == Metric::Cosine {
        base.chunks_exact(DIM).flat_map(normalised).collect()
    } else {
        base.to_vec()
    };
    let truth = brute_force_knn(&truth_rows, DIM, queries, 10, metric, 2);
    let dir = tempfile::tempdir().unwrap();

    let fork = dir.path().join("in-memory");
    let store = FileStore::create(&fork).unwrap();
    build_relation(&store, base, &tids, &p, 1, &|_, _, _| {}, &|| false).unwrap();
    let in_memory = RelationIndex::open(&store, &fork).unwrap();

    let spool_dir = dir.path().join("spool");
    let mut spool = RowSpool::create(&spool_dir, "rows", DIM, metric).unwrap();
    for row in base.chunks_exact(DIM) {
        spool.push(row).unwrap();
    }
    spool.finish().unwrap();
    // Twice the floor: partitions of a few thousand rows, so several of them.
    let budget = 2 * PartitionPlan::floor(n, DIM, &p);
    let p = IndexParams {
        memory_budget: Some(budget),
        ..p
    };
    let fork = dir.path().join("partitioned");
    let store = FileStore::create(&fork).unwrap();
    let (report, _, plan) =
        build_relation_partitioned(&store, &spool, &tids, &p, 2, &|_, _, _| {}, &|| false).unwrap();
    assert!(plan.partitions >= 3, "{plan:?}");
    assert_eq!(report.vertices, n);
    drop(spool);
    assert_eq!(
        std::fs::read_dir(&spool_dir).unwrap().count(),
        0,
        "the spool and list files are removed"
    );

    // Every page verifies and decodes; every row is a live vertex with its own TID and a
    // list within the degree bound.
    let image = RelationImage::read(&store).unwrap();
    assert_eq!(image.len(), n);
    for v in 0..n as VertexId {
        assert_eq!(image.tid(v), Some(tids[v as usize]));
    }
    let partitioned = RelationIndex::open(&store, &fork).unwrap();
    assert_eq!(partitioned.len(), n);

    let mut mem = [0.0; 2];
    let mut part = [0.0; 2];
    for (i, list) in [12, 40].into_iter().enumerate() {
        mem[i] = recall(&search_all(&in_memory, queries, list), &truth);
        let hits = search_all(&partitioned, queries, list);
        for h in &hits {
            assert!(h.windows(2).all(|w| w[0].distance <= w[1].distance));
            for hit in h {
                assert_eq!(hit.tid, tids[hit.id as usize]);
            }
        }
        part[i] = recall(&hits, &truth);
        eprintln!(
            "{metric:?} L={list}: recall@10 in memory {:.4}, partitioned ({} partitions of at most {} rows) {:.4}",
            mem[i], plan.partitions, plan.partition_rows, part[i]
        );
    }
    (mem, part, plan)
}

fn normalised(row: &[f32]) -> Vec<f32> {
    let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt();
    row.iter().map(|x| x / norm).collect()
}

#[test]
fn partitioned_build_recall_is_within_a_point_or_two_of_the_in_memory_build() {
    let all = synthetic_clustered(N + NQ, DIM, 4, 5);
    let (base, queries) = all.split_at(N * DIM);
    for metric in [Metric::L2, Metric::Cosine, Metric::InnerProduct] {
        let (mem, part, _) = both_builds(metric, base, queries);
        assert!(
            part[1] >= 0.9,
            "{metric:?}: recall@10 at L = 40 {}",
            part[1]
        );
        for i in 0..2 {
            assert!(
                part[i] >= mem[i] - 0.02,
                "{metric:?}: partitioned {} against in-memory {}",
                part[i],
                mem[i]
            );
        }
    }
}

#[test]
fn a_budget_below_the_floor_is_refused_with_the_floor_named() {
    let p = params(Metric::L2);
    let floor = PartitionPlan::floor(N, DIM, &p);
    let dir = tempfile::tempdir().unwrap();
    let mut spool = RowSpool::create(dir.path(), "rows", DIM, Metric::L2).unwrap();
    for row in synthetic_clustered(N, DIM, 4, 1).chunks_exact(DIM) {
        spool.push(row).unwrap();
    }
    spool.finish().unwrap();
    let store = FileStore::create(&dir.path().join("fork")).unwrap();
    let below = IndexParams {
        memory_budget: Some(floor / 2),
        ..p
    };
    let err =
        build_relation_partitioned(&store, &spool, &tids(N), &below, 1, &|_, _, _| {}, &|| {
            false
        })
        .unwrap_err();
    match err {
        IndexError::Memory(m) => assert!(m.contains("needs at least"), "{m}"),
        other => panic!("expected a memory error, got {other}"),
    }
    let above = IndexParams {
        memory_budget: Some(floor * 2),
        ..p
    };
    let cancelled =
        build_relation_partitioned(&store, &spool, &tids(N), &above, 1, &|_, _, _| {}, &|| true);
    assert!(matches!(cancelled, Err(IndexError::Cancelled)));
}

/// Recall of both builds on a dataset, at the index defaults (R = 96, L = 96), for RFC 0005's
/// measurements:
///
/// `NAVIS_FBIN_DIR=$PWD/benchmarks/data/synthetic-1m NAVIS_ROWS=200000 NAVIS_BUDGET_MB=20
///  cargo test -p navis-engine --release --test partitioned_build report -- --ignored --nocapture`
///
/// Without NAVIS_FBIN_DIR it uses the chain-shaped rows of the RFC's "Known weakness" and also
/// counts the query rows' true neighbours in their own lists. NAVIS_QUERIES (200),
/// NAVIS_ENTRANCE (the entrance ratio, 0.01) and NAVIS_SKIP_IN_MEMORY=1 adjust it.
#[test]
#[ignore]
fn report_partitioned_recall_on_a_dataset() {
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let rows = env("NAVIS_ROWS", 200_000);
    let nq = env("NAVIS_QUERIES", 200);
    let (base, queries) = match std::env::var("NAVIS_FBIN_DIR") {
        Ok(dir) => {
            let dir = std::path::PathBuf::from(dir);
            let read = navis_engine::dataset::read_fbin_rows;
            (
                read(dir.join("base.fbin"), Some(rows)).unwrap(),
                read(dir.join("query.fbin"), Some(nq)).unwrap(),
            )
        }
        // pg_test/cluster_build.sh's rows: near-duplicate chains (row i and i + 17 differ a
        // little), queried by rows of the table.
        Err(_) => {
            let dim = 64;
            let data: Vec<f32> = (1..=rows)
                .flat_map(|i| {
                    (1..=dim)
                        .map(move |j| ((i * j) as f64 * 0.37).sin() as f32 + (i % 17) as f32 / 4.0)
                })
                .collect();
            let queries: Vec<f32> = data
                .chunks_exact(dim)
                .step_by(97)
                .take(nq)
                .flatten()
                .copied()
                .collect();
            let ds = |data: Vec<f32>| navis_engine::dataset::Dataset {
                n: data.len() / dim,
                dim,
                data,
            };
            (ds(data), ds(queries))
        }
    };
    let (n, dim) = (base.n, base.dim);
    let truth = brute_force_knn(&base.data, dim, &queries.data, 10, Metric::L2, 2);
    let tids = tids(n);
    let budget = (env("NAVIS_BUDGET_MB", 24) as u64) << 20;
    let p = IndexParams {
        metric: Metric::L2,
        threads: 2,
        memory_budget: Some(budget),
        entrance_ratio: std::env::var("NAVIS_ENTRANCE")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.01),
        ..IndexParams::default()
    };
    let tmp = tempfile::tempdir().unwrap();
    let options = IoOptions {
        queue_depth: 64,
        backend: BackendChoice::Auto,
        direct: false,
        probe_page_cache: true,
    };
    let measure = |rel: &RelationIndex, label: &str| {
        for list in [20, 40, 80] {
            let sp = SearchParams {
                list,
                casr: CasrMode::Off,
                ..SearchParams::default()
            };
            let mut reader = rel.reader(options).unwrap();
            let hits: Vec<Vec<SearchHit>> = queries
                .data
                .chunks_exact(dim)
                .map(|q| rel.search(&mut reader, q, sp).unwrap().0)
                .collect();
            eprintln!("{label} L={list}: recall@10 {:.4}", recall(&hits, &truth));
        }
    };
    if std::env::var("NAVIS_SKIP_IN_MEMORY").is_err() {
        let fork = tmp.path().join("mem");
        let store = FileStore::create(&fork).unwrap();
        let t = std::time::Instant::now();
        let unbounded = IndexParams {
            memory_budget: None,
            ..p
        };
        build_relation(
            &store,
            &base.data,
            &tids,
            &unbounded,
            1,
            &|_, _, _| {},
            &|| false,
        )
        .unwrap();
        eprintln!("in-memory build {:.1} s", t.elapsed().as_secs_f64());
        if std::env::var("NAVIS_FBIN_DIR").is_err() {
            let image = RelationImage::read(&store).unwrap();
            let mut inlist = 0;
            for (qi, t) in truth.iter().enumerate() {
                inlist += t
                    .iter()
                    .filter(|&&x| image.adjacency[qi * 97].contains(&x))
                    .count();
            }
            eprintln!("in memory: true neighbours in the query row's own list: {inlist}");
        }
        measure(&RelationIndex::open(&store, &fork).unwrap(), "in memory");
    }
    let mut spool = RowSpool::create(tmp.path(), "spool", dim, Metric::L2).unwrap();
    for row in base.data.chunks_exact(dim) {
        spool.push(row).unwrap();
    }
    spool.finish().unwrap();
    let fork = tmp.path().join("part");
    let store = FileStore::create(&fork).unwrap();
    let t = std::time::Instant::now();
    let (_, _, plan) =
        build_relation_partitioned(&store, &spool, &tids, &p, 2, &|_, _, _| {}, &|| false).unwrap();
    eprintln!(
        "partitioned build {:.1} s, {plan:?}",
        t.elapsed().as_secs_f64()
    );
    measure(&RelationIndex::open(&store, &fork).unwrap(), "partitioned");
    if std::env::var("NAVIS_FBIN_DIR").is_err() {
        // Queries are rows 0, 97, ...: how many of each one's true 10 are in its own list.
        let image = RelationImage::read(&store).unwrap();
        let mut inlist = 0;
        for (qi, t) in truth.iter().enumerate() {
            let q = qi * 97;
            inlist += t
                .iter()
                .filter(|&&x| image.adjacency[q].contains(&x))
                .count();
        }
        eprintln!(
            "true neighbours in the query row's own list: {inlist} of {}",
            truth.len() * 10
        );
    }
}
