use super::*;

fn squared_l2(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

fn three_blobs() -> Vec<f32> {
    // Three tight 2-d blobs around (0,0), (10,0) and (0,10), 50 rows each.
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let centres = [(0.0f32, 0.0f32), (10.0, 0.0), (0.0, 10.0)];
    let mut data = Vec::new();
    for &(cx, cy) in &centres {
        for _ in 0..50 {
            data.push(cx + rng.gen_range(-0.5..0.5));
            data.push(cy + rng.gen_range(-0.5..0.5));
        }
    }
    data
}

fn brute_nearest(centroids: &[f32], width: usize, x: &[f32]) -> (u32, f32) {
    let mut best = (0u32, f32::INFINITY);
    for (c, centroid) in centroids.chunks_exact(width).enumerate() {
        let d = squared_l2(x, centroid);
        if d < best.1 {
            best = (c as u32, d);
        }
    }
    best
}

#[test]
fn finds_well_separated_clusters() {
    let data = three_blobs();
    let view = RowsView::full(&data, 2).unwrap();
    let result = train(&view, &KMeansConfig::new(3, 7)).unwrap();
    let mut found: Vec<(i32, i32)> = result
        .centroids
        .chunks_exact(2)
        .map(|c| (c[0].round() as i32, c[1].round() as i32))
        .collect();
    found.sort();
    assert_eq!(found, vec![(0, 0), (0, 10), (10, 0)]);
    // 150 rows within ±0.5 per coordinate of their centre: inertia is at most 150 · 0.5.
    assert!(result.inertia < 75.0, "inertia {}", result.inertia);
}

#[test]
fn view_reads_only_its_columns() {
    let data: Vec<f32> = (0..12).map(|v| v as f32).collect(); // 3 rows of 4
    let view = RowsView::new(&data, 4, 1, 2).unwrap();
    assert_eq!(view.rows(), 3);
    assert_eq!(view.row(2), &[9.0, 10.0]);
    assert!(RowsView::new(&data, 4, 3, 2).is_err());
    assert!(RowsView::new(&data, 5, 0, 2).is_err());
    assert!(RowsView::new(&data, 0, 0, 1).is_err());
}

#[test]
fn subspace_training_matches_training_on_a_copy() {
    let data = three_blobs();
    // Interleave an unrelated column so the view has to skip it.
    let padded: Vec<f32> = data
        .chunks_exact(2)
        .flat_map(|r| [99.0, r[0], r[1]])
        .collect();
    let config = KMeansConfig::new(3, 3);
    let direct = train(&RowsView::full(&data, 2).unwrap(), &config).unwrap();
    let viewed = train(&RowsView::new(&padded, 3, 1, 2).unwrap(), &config).unwrap();
    assert_eq!(direct.centroids, viewed.centroids);
}

#[test]
fn lloyd_iterations_lower_the_inertia_until_converged() {
    // Uniform data has no natural clusters, so Lloyd keeps improving for a while.
    let mut rng = ChaCha8Rng::seed_from_u64(8);
    let data: Vec<f32> = (0..2000 * 4).map(|_| rng.gen_range(0.0..1.0)).collect();
    let view = RowsView::full(&data, 4).unwrap();
    let run = |iters: usize| {
        let mut config = KMeansConfig::new(32, 1);
        config.max_iters = iters;
        config.tolerance = 0.0;
        train(&view, &config).unwrap()
    };
    let (one, five, many) = (run(1), run(5), run(100));
    assert_eq!((one.iterations, five.iterations), (1, 5));
    assert!(
        five.inertia < 0.97 * one.inertia,
        "{} vs {}",
        five.inertia,
        one.inertia
    );
    // With zero tolerance it stops only when no row changes cluster, before 100.
    assert!(
        many.iterations > 5 && many.iterations < 100,
        "{}",
        many.iterations
    );
    assert!(many.inertia <= five.inertia);
    // The default tolerance does not stop it after the first iteration either.
    assert!(train(&view, &KMeansConfig::new(32, 1)).unwrap().iterations >= 5);
}

#[test]
fn same_result_for_any_thread_count() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let data: Vec<f32> = (0..1500 * 6).map(|_| rng.gen_range(-1.0..1.0)).collect();
    let view = RowsView::full(&data, 6).unwrap();
    let mut config = KMeansConfig::new(40, 11);
    let one = train(&view, &config).unwrap();
    config.threads = 3;
    let three = train(&view, &config).unwrap();
    assert_eq!(one.centroids, three.centroids);
    assert_eq!(one.iterations, three.iterations);
}

#[test]
fn empty_clusters_are_reseeded_from_the_largest() {
    // 20 rows on two points; k-means++ may pick duplicates, and any empty cluster must be
    // refilled, so every centroid ends up on or between the two points and none is NaN.
    let data: Vec<f32> = (0..20)
        .flat_map(|i| if i < 15 { [0.0, 0.0] } else { [4.0, 4.0] })
        .collect();
    let view = RowsView::full(&data, 2).unwrap();
    let result = train(&view, &KMeansConfig::new(4, 2)).unwrap();
    assert!(result
        .centroids
        .iter()
        .all(|v| v.is_finite() && (0.0..=4.0).contains(v)));
    assert_eq!(result.inertia, 0.0);

    // Directly: cluster 1 is empty and cluster 0 is the largest, farthest row is row 2.
    let rows = [0.0f32, 0.0, 1.0, 0.0, 4.0, 0.0];
    let view = RowsView::full(&rows, 2).unwrap();
    let mut centroids = vec![5.0 / 3.0, 0.0, 100.0, 100.0];
    let distances = vec![25.0 / 9.0, 4.0 / 9.0, 49.0 / 9.0];
    let reseeded =
        split_for_empty_clusters(&view, &[0, 0, 0], &distances, vec![3, 0], &mut centroids);
    assert_eq!(reseeded, 1);
    assert!((centroids[2] - (5.0 / 3.0 + 0.5 * (4.0 - 5.0 / 3.0))).abs() < 1e-6);
    assert_eq!(centroids[3], 0.0);
}

#[test]
fn identical_rows_converge_without_futile_splits() {
    // Fewer distinct rows than clusters: the surplus clusters stay empty (splitting a
    // cluster of identical rows cannot help), so training stops after the iteration
    // in which nothing changed instead of running to max_iters.
    let data: Vec<f32> = (0..300).flat_map(|i| [(i % 3) as f32, 1.0]).collect();
    let view = RowsView::full(&data, 2).unwrap();
    let result = train(&view, &KMeansConfig::new(8, 4)).unwrap();
    assert_eq!(result.inertia, 0.0);
    assert!(result.iterations <= 3, "{} iterations", result.iterations);
    let mut distinct: Vec<(i32, i32)> = result
        .centroids
        .chunks_exact(2)
        .map(|c| (c[0] as i32, c[1] as i32))
        .collect();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct, vec![(0, 1), (1, 1), (2, 1)]);

    // Directly: the only non-empty cluster holds identical rows, so nothing is split.
    let rows = [1.0f32, 1.0, 1.0, 1.0];
    let view = RowsView::full(&rows, 2).unwrap();
    let mut centroids = vec![1.0, 1.0, 7.0, 7.0];
    let split = split_for_empty_clusters(&view, &[0, 0], &[0.0, 0.0], vec![2, 0], &mut centroids);
    assert_eq!(split, 0);
    assert_eq!(centroids, vec![1.0, 1.0, 7.0, 7.0]);
}

#[test]
fn nearest_and_tables_match_brute_force() {
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    for &(k, width) in &[(1usize, 1usize), (5, 3), (16, 8), (37, 7), (256, 8)] {
        let centroids: Vec<f32> = (0..k * width).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let table = CentroidTable::new(&centroids, k, width);
        let mut out = vec![0f32; k];
        for _ in 0..20 {
            let x: Vec<f32> = (0..width).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let (label, d) = table.nearest(&x);
            let (want_label, want_d) = brute_nearest(&centroids, width, &x);
            // The expanded score may break a near-tie differently; the distance may not differ.
            let chosen = &centroids[label as usize * width..(label as usize + 1) * width];
            assert!(
                (squared_l2(&x, chosen) - want_d).abs() < 1e-5,
                "k={k} w={width}"
            );
            assert!(
                (d - want_d).abs() < 1e-4,
                "k={k} w={width}: {d} vs {want_d}"
            );
            let _ = want_label;
            table.squared_distances(&x, &mut out);
            for (c, centroid) in centroids.chunks_exact(width).enumerate() {
                assert!((out[c] - squared_l2(&x, centroid)).abs() < 1e-5);
            }
            table.negative_dots(&x, &mut out);
            for (c, centroid) in centroids.chunks_exact(width).enumerate() {
                let dot: f32 = x.iter().zip(centroid).map(|(a, b)| a * b).sum();
                assert!((out[c] + dot).abs() < 1e-5);
            }
        }
    }
}

#[test]
fn portable_and_avx2_kernels_agree() {
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let (k, width) = (200, 12);
    let centroids: Vec<f32> = (0..k * width).map(|_| rng.gen_range(-3.0..3.0)).collect();
    let mut table = CentroidTable::new(&centroids, k, width);
    let mut outputs = Vec::new();
    for avx2 in [table.avx2, false] {
        table.avx2 = avx2;
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mut results = Vec::new();
        for _ in 0..50 {
            let x: Vec<f32> = (0..width).map(|_| rng.gen_range(-3.0..3.0)).collect();
            let (_, nearest) = table.nearest(&x);
            let mut l2 = vec![0f32; k];
            let mut dots = vec![0f32; k];
            table.squared_distances(&x, &mut l2);
            table.negative_dots(&x, &mut dots);
            results.push((nearest, l2, dots));
        }
        outputs.push(results);
    }
    // FMA rounds once per step where the portable code rounds twice: close, not equal.
    let close = |a: f32, b: f32| (a - b).abs() <= 1e-4 * a.abs().max(b.abs()).max(1.0);
    for ((n1, l1, d1), (n2, l2, d2)) in outputs[0].iter().zip(&outputs[1]) {
        assert!(close(*n1, *n2), "{n1} vs {n2}");
        assert!(l1.iter().zip(l2).all(|(a, b)| close(*a, *b)));
        assert!(d1.iter().zip(d2).all(|(a, b)| close(*a, *b)));
    }
}

#[test]
fn rejects_bad_parameters() {
    let data = [1.0f32, 2.0, 3.0, 4.0];
    let view = RowsView::full(&data, 2).unwrap();
    assert_eq!(
        train(&view, &KMeansConfig::new(3, 0)).unwrap_err(),
        KMeansError::TooFewRows { rows: 2, k: 3 }
    );
    assert!(matches!(
        train(&view, &KMeansConfig::new(0, 0)),
        Err(KMeansError::BadParameter(_))
    ));
    let mut config = KMeansConfig::new(1, 0);
    config.max_iters = 0;
    assert!(train(&view, &config).is_err());
    let message = train(&view, &KMeansConfig::new(3, 0))
        .unwrap_err()
        .to_string();
    assert_eq!(
        message,
        "k-means: 3 clusters requested but only 2 rows to train on"
    );
}
