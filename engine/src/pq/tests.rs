use super::*;
use crate::dataset::{brute_force_knn, recall_at_k, synthetic_clustered};
use crate::distance::normalize;

/// Training with fewer iterations: the tests run unoptimised, where full training of a
/// few thousand rows takes many seconds.
fn quick_train(data: &[f32], dim: usize, m: usize, metric: Metric, seed: u64) -> ProductQuantizer {
    let mut config = PqTrainConfig::new(seed, 2);
    config.max_iters = 6;
    ProductQuantizer::train_with(data, dim, data.len() / dim, m, metric, &config).unwrap()
}

fn relative_close(a: f32, b: f32, tolerance: f32) -> bool {
    (a - b).abs() <= tolerance * a.abs().max(b.abs()).max(1.0)
}

fn mean_squared_distance_to_mean(data: &[f32], dim: usize) -> f64 {
    let n = data.len() / dim;
    let mut mean = vec![0f64; dim];
    data.chunks_exact(dim)
        .for_each(|r| r.iter().zip(&mut mean).for_each(|(v, m)| *m += *v as f64));
    mean.iter_mut().for_each(|m| *m /= n as f64);
    data.chunks_exact(dim)
        .map(|r| {
            r.iter()
                .zip(&mean)
                .map(|(v, m)| (*v as f64 - m).powi(2))
                .sum::<f64>()
        })
        .sum::<f64>()
        / n as f64
}

#[test]
fn reconstruction_error_is_far_below_the_data_variance() {
    let (n, dim) = (1500, 32);
    let data = synthetic_clustered(n, dim, 20, 1);
    let pq = quick_train(&data, dim, 8, Metric::L2, 7);
    assert_eq!((pq.pq_bytes(), pq.centroids_per_subspace()), (8, 256));
    let codes = pq.encode_batch(&data, 2);
    let error: f64 = codes
        .chunks_exact(8)
        .zip(data.chunks_exact(dim))
        .map(|(c, v)| Metric::L2.search_distance(&pq.reconstruct(c), v) as f64)
        .sum::<f64>()
        / n as f64;
    let variance = mean_squared_distance_to_mean(&data, dim);
    assert!(
        error < 0.05 * variance,
        "reconstruction error {error} vs variance {variance}"
    );
}

#[test]
fn adc_distance_equals_distance_to_reconstruction() {
    let (n, dim) = (600, 24);
    let mut data = synthetic_clustered(n + 20, dim, 10, 2);
    for metric in [Metric::L2, Metric::InnerProduct, Metric::Cosine] {
        if metric == Metric::Cosine {
            data.chunks_exact_mut(dim)
                .for_each(|r| assert!(normalize(r)));
        }
        let (base, queries) = data.split_at(n * dim);
        let pq = quick_train(base, dim, 6, metric, 3);
        for q in queries.chunks_exact(dim) {
            let table = pq.query_table(q);
            for v in base.chunks_exact(dim).step_by(37) {
                let code = pq.encode(v);
                let adc = table.distance(&code);
                let exact = metric.search_distance(q, &pq.reconstruct(&code));
                assert!(
                    relative_close(adc, exact, 1e-3),
                    "{metric:?}: ADC {adc} vs {exact}"
                );
            }
        }
    }
}

fn pq_candidates_recall(metric: Metric) -> f64 {
    let (n, nq, dim, m) = (2000, 30, 32, 8);
    let data = synthetic_clustered(n + nq, dim, 30, 5);
    let (base, queries) = data.split_at(n * dim);
    let pq = quick_train(base, dim, m, metric, 11);
    let codes = pq.encode_batch(base, 2);
    let truth = brute_force_knn(base, dim, queries, 10, metric, 2);
    let mut distances = vec![0f32; n];
    let found: Vec<Vec<u32>> = queries
        .chunks_exact(dim)
        .map(|q| {
            pq.query_table(q).distances(&codes, &mut distances);
            let mut order: Vec<u32> = (0..n as u32).collect();
            order.sort_by(|&a, &b| distances[a as usize].total_cmp(&distances[b as usize]));
            order.truncate(100);
            order
        })
        .collect();
    // recall_at_k compares equal-length prefixes, so count top-10 hits within 100 by hand.
    let hits: usize = truth
        .iter()
        .zip(&found)
        .map(|(t, f)| t.iter().filter(|id| f.contains(id)).count())
        .sum();
    let recall = hits as f64 / (10 * nq) as f64;
    assert!(recall_at_k(&found, &truth, 10) <= recall);
    recall
}

#[test]
fn pq_ordering_keeps_the_true_neighbours_near_the_front() {
    let l2 = pq_candidates_recall(Metric::L2);
    assert!(
        l2 >= 0.97,
        "L2 recall of top-10 within 100 PQ candidates: {l2}"
    );
    let ip = pq_candidates_recall(Metric::InnerProduct);
    assert!(
        ip >= 0.9,
        "inner-product recall of top-10 within 100 PQ candidates: {ip}"
    );
}

#[test]
fn same_seed_same_codebook_for_any_thread_count() {
    let (n, dim) = (500, 20);
    let data = synthetic_clustered(n, dim, 8, 4);
    let a = ProductQuantizer::train(&data, dim, n, 5, Metric::L2, 9, 1).unwrap();
    let b = ProductQuantizer::train(&data, dim, n, 5, Metric::L2, 9, 3).unwrap();
    let c = ProductQuantizer::train(&data, dim, n, 5, Metric::L2, 10, 1).unwrap();
    assert_eq!(a.to_bytes(), b.to_bytes());
    assert_ne!(a.codebook(), c.codebook());
    assert_eq!(a.encode_batch(&data, 1), b.encode_batch(&data, 4));
}

#[test]
fn uneven_dimension_split() {
    let (n, dim) = (600, 10);
    let data = synthetic_clustered(n, dim, 4, 6);
    let pq = ProductQuantizer::train(&data, dim, n, 3, Metric::L2, 1, 2).unwrap();
    assert_eq!(
        (pq.subspace(0), pq.subspace(1), pq.subspace(2)),
        (0..4, 4..7, 7..10)
    );
    assert_eq!(pq.codebook().len(), 256 * 10);
    assert_eq!(pq.centroid(1, 255).len(), 3);
    let v = &data[..dim];
    let code = pq.encode(v);
    assert_eq!(code.len(), 3);
    // Each byte is the nearest centroid of its own subspace.
    for s in 0..3 {
        let sub = &v[pq.subspace(s)];
        let best = (0..256)
            .min_by(|&a, &b| {
                let da = Metric::L2.search_distance(sub, pq.centroid(s, a));
                let db = Metric::L2.search_distance(sub, pq.centroid(s, b));
                da.total_cmp(&db)
            })
            .unwrap();
        let chosen = Metric::L2.search_distance(sub, pq.centroid(s, code[s] as usize));
        assert!(chosen <= Metric::L2.search_distance(sub, pq.centroid(s, best)) + 1e-5);
    }
    assert_eq!(subspace_bounds(7, 7), vec![0, 1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(
        subspace_bounds(384, 48)
            .windows(2)
            .map(|b| b[1] - b[0])
            .max(),
        Some(8)
    );
}

#[test]
fn small_samples_and_sampling() {
    let dim = 8;
    let data = synthetic_clustered(100, dim, 3, 8);
    let pq = ProductQuantizer::train(&data, dim, 100, 4, Metric::L2, 1, 1).unwrap();
    assert_eq!(pq.centroids_per_subspace(), 100);
    assert!(pq.encode_batch(&data, 2).iter().all(|&c| c < 100));
    // Every row is a training row and 100 centroids for 100 rows: near-exact codes.
    let code = pq.encode(&data[..dim]);
    assert!(Metric::L2.search_distance(&pq.reconstruct(&code), &data[..dim]) < 1e-3);

    let big = synthetic_clustered(3000, dim, 3, 8);
    let mut config = PqTrainConfig::new(1, 2);
    config.max_sample = 300;
    let sampled = ProductQuantizer::train_with(&big, dim, 3000, 4, Metric::L2, &config).unwrap();
    assert_eq!(sampled.centroids_per_subspace(), 256);
}

#[test]
fn rejects_bad_parameters_and_input() {
    let data = vec![0.5f32; 40];
    let err = |r: Result<ProductQuantizer, PqError>| r.unwrap_err();
    assert_eq!(
        err(ProductQuantizer::train(&data, 4, 10, 0, Metric::L2, 0, 1)).to_string(),
        "pq_bytes must be between 1 and the dimension 4, got 0"
    );
    assert!(matches!(
        err(ProductQuantizer::train(&data, 4, 10, 5, Metric::L2, 0, 1)),
        PqError::BadParameter(_)
    ));
    assert!(matches!(
        err(ProductQuantizer::train(&data, 0, 10, 1, Metric::L2, 0, 1)),
        PqError::BadParameter(_)
    ));
    assert!(
        err(ProductQuantizer::train(&data, 4, 9, 2, Metric::L2, 0, 1))
            .to_string()
            .contains("do not form 9 rows")
    );
    assert!(matches!(
        err(ProductQuantizer::train(&[], 4, 0, 2, Metric::L2, 0, 1)),
        PqError::BadInput(_)
    ));
    let mut bad = data.clone();
    bad[6] = f32::NAN;
    assert_eq!(
        err(ProductQuantizer::train(&bad, 4, 10, 2, Metric::L2, 0, 1)).to_string(),
        "PQ training row 1, element 3 is NaN; NaN and infinity are not allowed"
    );
    assert!(ProductQuantizer::from_codebook(Metric::L2, 4, 2, 3, vec![0.0; 11]).is_err());
    assert!(ProductQuantizer::from_codebook(Metric::L2, 4, 2, 257, vec![0.0; 257 * 4]).is_err());
}

#[test]
fn identical_rows_train_without_error() {
    let data = vec![1.25f32; 300 * 6];
    let pq = ProductQuantizer::train(&data, 6, 300, 3, Metric::L2, 0, 2).unwrap();
    let code = pq.encode(&data[..6]);
    assert_eq!(pq.reconstruct(&code), vec![1.25; 6]);
}

#[test]
fn codebook_bytes_round_trip_and_reject_damage() {
    let (n, dim) = (500, 12);
    let data = synthetic_clustered(n, dim, 5, 3);
    let pq = ProductQuantizer::train(&data, dim, n, 5, Metric::InnerProduct, 2, 2).unwrap();
    let bytes = pq.to_bytes();
    assert_eq!(bytes.len(), 32 + 4 * 256 * 12 + 8);
    let back = ProductQuantizer::from_bytes(&bytes).unwrap();
    assert_eq!(back.codebook(), pq.codebook());
    assert_eq!(
        (back.metric(), back.dim(), back.pq_bytes()),
        (Metric::InnerProduct, dim, 5)
    );
    assert_eq!(back.encode_batch(&data, 1), pq.encode_batch(&data, 1));

    let message = |b: &[u8]| ProductQuantizer::from_bytes(b).unwrap_err().to_string();
    assert_eq!(
        message(b"PK\x03\x04 not a codebook"),
        "not a navis PQ codebook (bad magic)"
    );
    assert!(message(&bytes[..20]).contains("truncated"));
    assert!(message(&bytes[..bytes.len() - 1]).contains("truncated or trailing"));
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(message(&longer).contains("trailing"));
    let mut flipped = bytes.clone();
    flipped[1000] ^= 1;
    assert!(message(&flipped).contains("checksum"));
    let mut version = bytes.clone();
    version[8] = 9;
    assert!(message(&version).contains("version 9 is not supported"));
    let mut metric = bytes.clone();
    metric[12] = 7;
    assert!(message(&metric).contains("unknown metric code 7"));
    let mut shape = bytes.clone();
    shape[20] = 13; // pq_bytes 13 > dim 12
    assert!(message(&shape).contains("pq_bytes must be between 1 and the dimension 12"));
    for cut in [0, 7, 8, 31, 32, bytes.len() / 2] {
        assert!(
            ProductQuantizer::from_bytes(&bytes[..cut]).is_err(),
            "prefix of {cut} bytes accepted"
        );
    }
}

#[test]
fn table_reuse_and_batch_distances() {
    let (n, dim) = (400, 16);
    let data = synthetic_clustered(n, dim, 4, 12);
    // 5 subspaces exercise the unrolled loop's remainder.
    let pq = ProductQuantizer::train(&data, dim, n, 5, Metric::L2, 1, 1).unwrap();
    let codes = pq.encode_batch(&data, 1);
    let mut table = QueryTable::new();
    pq.query_table_into(&data[dim..2 * dim], &mut table);
    assert_eq!(table.pq_bytes(), 5);
    let mut out = vec![0f32; n];
    table.distances(&codes, &mut out);
    for (i, code) in codes.chunks_exact(5).enumerate() {
        let reference: f32 = code
            .iter()
            .enumerate()
            .map(|(s, &c)| table.rows[s][c as usize])
            .sum();
        assert!(relative_close(out[i], reference, 1e-5));
    }
    // The query's own row has the smallest reconstruction distance among near-duplicates.
    let own = out[1];
    assert!(out.iter().filter(|&&d| d < own).count() < 5);
}

#[test]
fn a_reused_table_is_overwritten_in_full() {
    // A table of 8 subspaces and 256 centroids is dropped on this thread; the next table, of
    // 4 subspaces and 100 centroids, takes its rows with their stale values.
    let (n, dim) = (400, 16);
    let data = synthetic_clustered(n, dim, 4, 3);
    let big = ProductQuantizer::train(&data, dim, n, 8, Metric::L2, 1, 1).unwrap();
    let small = ProductQuantizer::train(&data[..100 * dim], dim, 100, 4, Metric::L2, 1, 1).unwrap();
    assert_eq!(big.centroids_per_subspace(), 256);
    assert_eq!(small.centroids_per_subspace(), 100);

    let stale = big.query_table(&data[..dim]);
    let stale_rows = stale.rows.as_ptr();
    drop(stale);
    let q = &data[5 * dim..6 * dim];
    let table = small.query_table(q);
    assert_eq!(
        table.rows.as_ptr(),
        stale_rows,
        "the dropped rows were not reused"
    );
    assert_eq!(table.pq_bytes(), 4);
    for s in 0..4 {
        let sub = &q[small.bounds[s]..small.bounds[s + 1]];
        for c in 0..MAX_CENTROIDS {
            let got = table.rows[s][c];
            if c < 100 {
                let want = Metric::L2.search_distance(sub, small.centroid(s, c));
                assert!(
                    relative_close(got, want, 1e-5),
                    "[{s}][{c}]: {got} != {want}"
                );
            } else {
                assert_eq!(got, f32::INFINITY, "[{s}][{c}] is past k but holds {got}");
            }
        }
    }
    // A fresh table and the reused one score every code the same.
    let codes = small.encode_batch(&data, 1);
    let (mut reused, mut fresh) = (vec![0f32; n], vec![0f32; n]);
    table.distances(&codes, &mut reused);
    drop(table);
    let mut new_rows = QueryTable {
        rows: Vec::with_capacity(4),
    };
    small.query_table_into(q, &mut new_rows);
    new_rows.distances(&codes, &mut fresh);
    assert_eq!(reused, fresh);
}
