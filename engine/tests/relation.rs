//! End-to-end through the public API: build an index into a relation file, reopen it, decode
//! it, and compare it with the rows and with a side-file build of the same rows.

use navis_engine::dataset::synthetic_clustered;
use navis_engine::entrance::EntranceGraph;
use navis_engine::index::{build_index, IndexParams};
use navis_engine::pages::BLOCK_SIZE;
use navis_engine::pq::ProductQuantizer;
use navis_engine::relation::{build_relation, RelationImage};
use navis_engine::storage::HeapTid;
use navis_engine::store::{FileStore, PageStore};
use navis_engine::Metric;

fn rows(n: usize, dim: usize) -> (Vec<f32>, Vec<HeapTid>) {
    let tids = (0..n as u32)
        .map(|i| HeapTid {
            block: i / 100,
            offset: (i % 100 + 1) as u16,
        })
        .collect();
    (synthetic_clustered(n, dim, 16, 42), tids)
}

fn params(max_degree: usize, pq_bytes: usize) -> IndexParams {
    IndexParams {
        metric: Metric::L2,
        max_degree,
        build_list: 64,
        pq_bytes: Some(pq_bytes),
        threads: 2,
        ..IndexParams::default()
    }
}

/// Builds `rows` both ways; returns (relation bytes, side-file bytes).
fn build_both(n: usize, dim: usize, p: &IndexParams) -> (u64, u64) {
    let (vectors, tids) = rows(n, dim);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("relation");
    let store = FileStore::create(&path).unwrap();
    let (report, meta) =
        build_relation(&store, &vectors, &tids, p, 42, &|_, _, _| {}, &|| false).unwrap();
    let nblocks = store.nblocks().unwrap();
    drop(store);
    let file_len = std::fs::metadata(&path).unwrap().len();
    assert_eq!(file_len, u64::from(nblocks) * BLOCK_SIZE as u64);
    assert_eq!(report.file_sizes, vec![("relation".to_string(), file_len)]);

    let image = RelationImage::read_named(&FileStore::open(&path).unwrap(), &path).unwrap();
    assert_eq!(image.meta, meta);
    assert_eq!(image.len(), n);
    for v in 0..n {
        assert_eq!(image.tid(v as u32), Some(tids[v]));
        assert_eq!(image.vector(v as u32), &vectors[v * dim..(v + 1) * dim]);
        assert!(
            !image.adjacency[v].is_empty(),
            "vertex {v} has no neighbours"
        );
    }
    let pq = ProductQuantizer::from_bytes(&image.codebook).unwrap();
    assert_eq!(pq.encode(image.vector(5)), image.code(5));
    let entrance = EntranceGraph::from_bytes(&image.entrance).unwrap();
    assert_eq!(entrance.len(), report.entrance_size);

    let side = build_index(
        &dir.path().join("side"),
        &vectors,
        &tids,
        p,
        &|_, _, _| {},
        &|| false,
    )
    .unwrap();
    let side_bytes: u64 = side.file_sizes.iter().map(|(_, len)| len).sum();
    eprintln!(
        "{n} x {dim}-d, R = {}: relation {nblocks} blocks = {} KiB, side files {} KiB ({:?})",
        p.max_degree,
        file_len / 1024,
        side_bytes / 1024,
        side.file_sizes
    );
    (file_len, side_bytes)
}

#[test]
fn relation_builds_reopen_and_decode() {
    let (relation, side) = build_both(3000, 32, &params(32, 8));
    // Runs round a small index's kinds up to powers of two; never more than twice the files.
    assert!(relation < 2 * side, "{relation} vs {side}");
    let (relation, side) = build_both(2000, 784, &params(96, 32));
    assert!(relation < 2 * side, "{relation} vs {side}");
}
