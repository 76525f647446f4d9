//! Tests of the dataset files, brute-force ground truth, recall and the synthetic generator.

use super::*;

#[test]
fn fbin_round_trip_and_limit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.fbin");
    let data: Vec<f32> = (0..12).map(|v| v as f32 * 0.5 - 1.0).collect();
    write_fbin(&path, 3, &data).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.len(), 8 + 12 * 4);
    assert_eq!(&bytes[..8], &[4, 0, 0, 0, 3, 0, 0, 0]);
    assert_eq!(&bytes[8..12], &(-1.0f32).to_le_bytes());

    let all = read_fbin(&path).unwrap();
    assert_eq!((all.n, all.dim), (4, 3));
    assert_eq!(all.data, data);
    assert_eq!(all.row(3), &[3.5, 4.0, 4.5]);
    let two = read_fbin_rows(&path, Some(2)).unwrap();
    assert_eq!((two.n, two.data.as_slice()), (2, &data[..6]));
    assert_eq!(read_fbin_rows(&path, Some(99)).unwrap().n, 4);
}

#[test]
fn fbin_rejects_truncated_and_foreign_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.fbin");
    write_fbin(&path, 2, &[1.0, 2.0, 3.0, 4.0]).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
    let message = read_fbin(&path).unwrap_err().to_string();
    assert!(
        message.contains("header says 2 x 2 but the file has 23 bytes"),
        "{message}"
    );
    std::fs::write(&path, [1u8, 2, 3]).unwrap();
    assert!(read_fbin(&path)
        .unwrap_err()
        .to_string()
        .contains("shorter than the 8-byte header"));
    std::fs::write(&path, b"this is not an fbin file at all").unwrap();
    assert_eq!(
        read_fbin(&path).unwrap_err().kind(),
        io::ErrorKind::InvalidData
    );
    assert!(read_fbin(dir.path().join("missing.fbin")).is_err());
    assert!(write_fbin(&path, 3, &[1.0, 2.0]).is_err());
}

#[test]
fn ground_truth_round_trip_with_and_without_distances() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gt.bin");
    let truth = GroundTruth {
        nq: 2,
        k: 3,
        ids: vec![5, 1, 9, 0, 2, 4],
        distances: vec![0.1, 0.2, 0.3, 1.0, 2.0, 3.0],
    };
    write_ground_truth(&path, &truth).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 8 + 2 * 6 * 4);
    assert_eq!(read_ground_truth(&path).unwrap(), truth);
    assert_eq!(truth.neighbors(1), &[0, 2, 4]);

    let ids_only = GroundTruth {
        distances: Vec::new(),
        ..truth.clone()
    };
    write_ground_truth(&path, &ids_only).unwrap();
    assert_eq!(read_ground_truth(&path).unwrap(), ids_only);

    let bad = GroundTruth {
        ids: vec![1],
        ..truth
    };
    assert!(write_ground_truth(&path, &bad).is_err());
    std::fs::write(&path, [2u8, 0, 0, 0, 3, 0, 0, 0, 1]).unwrap();
    assert!(read_ground_truth(&path)
        .unwrap_err()
        .to_string()
        .contains("truncated"));
}

#[test]
fn brute_force_finds_exact_neighbours_and_breaks_ties_by_id() {
    // Points on a line at 0,1,2,3,4 plus a duplicate of 2 at id 5.
    let base = [0.0f32, 1.0, 2.0, 3.0, 4.0, 2.0];
    let queries = [2.1f32, -5.0];
    let found = brute_force_knn(&base, 1, &queries, 3, Metric::L2, 2);
    assert_eq!(found, vec![vec![2, 5, 3], vec![0, 1, 2]]);
    let truth = brute_force_ground_truth(&base, 1, &queries, 2, Metric::L2, 1);
    assert_eq!(truth.ids, vec![2, 5, 0, 1]);
    assert!((truth.distances[0] - 0.01).abs() < 1e-5);
    assert_eq!(truth.distances[2], 25.0);
    // Inner product prefers the largest projection.
    assert_eq!(
        brute_force_knn(&base, 1, &[1.0], 2, Metric::InnerProduct, 1),
        vec![vec![4, 3]]
    );
    // k above the base size is capped.
    assert_eq!(
        brute_force_knn(&base[..2], 1, &[0.0], 5, Metric::L2, 3),
        vec![vec![0, 1]]
    );
}

#[test]
fn brute_force_is_independent_of_thread_count() {
    let data = synthetic_clustered(600, 8, 5, 3);
    let (base, queries) = data.split_at(500 * 8);
    let one = brute_force_ground_truth(base, 8, queries, 10, Metric::L2, 1);
    let four = brute_force_ground_truth(base, 8, queries, 10, Metric::L2, 4);
    assert_eq!(one, four);
    // Nearest first.
    assert!(one
        .distances
        .chunks(10)
        .all(|row| row.windows(2).all(|w| w[0] <= w[1])));
}

#[test]
fn recall_counts_hits_within_the_first_k() {
    let truth = vec![vec![1, 2, 3, 4], vec![5, 6, 7, 8]];
    let found = vec![vec![3, 9, 1, 2], vec![8, 8, 0, 0]];
    // k = 3: query 0 finds {3, 1} of {1,2,3}; query 1 finds nothing of {5,6,7}.
    assert!((recall_at_k(&found, &truth, 3) - 2.0 / 6.0).abs() < 1e-12);
    // k = 4: query 0 finds 3 of 4, query 1 finds 8 once despite the duplicate.
    assert!((recall_at_k(&found, &truth, 4) - 4.0 / 8.0).abs() < 1e-12);
    assert_eq!(recall_at_k(&found[..1], &truth, 4), 3.0 / 8.0);
    assert_eq!(recall_at_k(&truth, &truth, 4), 1.0);
    assert_eq!(recall_at_k(&[], &[], 10), 0.0);
}

#[test]
fn synthetic_data_is_deterministic_and_clustered() {
    let (n, dim) = (2000, 32);
    let a = synthetic_clustered(n, dim, 10, 42);
    assert_eq!(a.len(), n * dim);
    assert_eq!(a, synthetic_clustered(n, dim, 10, 42));
    assert_ne!(a, synthetic_clustered(n, dim, 10, 43));
    assert!(a.iter().all(|v| v.is_finite()));

    // Clustered: a row's nearest neighbour is much closer than a random other row.
    let nn = brute_force_ground_truth(&a, dim, &a[..100 * dim], 2, Metric::L2, 2);
    let nearest: f32 = nn.distances.chunks(2).map(|d| d[1]).sum::<f32>() / 100.0;
    let random: f32 = (0..100)
        .map(|i| {
            Metric::L2.search_distance(
                &a[i * dim..(i + 1) * dim],
                &a[(i + 1000) * dim..(i + 1001) * dim],
            )
        })
        .sum::<f32>()
        / 100.0;
    assert!(
        nearest * 4.0 < random,
        "nearest {nearest} vs random {random}"
    );
}
