//! Points inserted next to a near-duplicate keep enough out-neighbours to be found
//! (RFC 0009's addendum). RobustPrune lets a near-duplicate twin occlude almost every other
//! candidate, so such a point was left with one or two neighbours; its back-edges come from
//! those same neighbours, so it had as few in-edges, and later re-prunes removed them: on
//! Fashion-MNIST 6 of 2,000 rows an index grew by inserts were not found by a search for
//! their own vector at L = 400 (a fresh build: 1). An insert now tops its list up to
//! 8 (at most max_degree / 4) with the nearest candidates the prune left out.
//!
//! On this small graph the degree is what tells the two apart (without the top-up most of
//! these vertices keep one or two neighbours, and searches still find them all); the
//! Fashion-MNIST measurement of the misses themselves is `grown_reach.rs`.

mod relation_common;

use navis_engine::dataset::synthetic_clustered;
use navis_engine::index::{CasrSetting, IndexParams};
use navis_engine::search::{CasrMode, SearchParams};
use navis_engine::update::InsertParams;
use navis_engine::Metric;
use relation_common::{build_relation_index, row_of, tid, OpenedRelation};

const DIM: usize = 16;
const MAX_DEGREE: usize = 32;

#[test]
fn points_inserted_beside_a_near_duplicate_keep_neighbours_and_are_found() {
    let built = 1000;
    let inserted = 1000; // one beside each built row (7 is prime to 1000)
    let data = synthetic_clustered(built, DIM, 8, 97);
    let params = IndexParams {
        metric: Metric::L2,
        max_degree: MAX_DEGREE,
        build_list: 64,
        pq_bytes: None,
        threads: 2,
        ..IndexParams::default()
    };
    let tmp = tempfile::tempdir().unwrap();
    let OpenedRelation { index, locks, .. } =
        build_relation_index(tmp.path(), "16800", &data, DIM, 0, &params, 1);

    // Each new point is a built row moved by a tiny step (a thousandth of a coordinate's
    // spread): its twin is far nearer than anything else.
    let mut all = data.clone();
    let mut reader = index.reader().unwrap();
    let mut thin = 0;
    for i in 0..inserted {
        let twin = (i * 7) % built;
        let point: Vec<f32> = data[twin * DIM..(twin + 1) * DIM]
            .iter()
            .enumerate()
            .map(|(d, x)| x + 1e-3 * (((i + d) % 5) as f32 - 2.0))
            .collect();
        let row = built + i;
        let report = index
            .insert(
                &mut reader,
                &locks,
                &point,
                tid(row),
                InsertParams::default(),
            )
            .unwrap();
        thin += usize::from(report.degree < 8);
        all.extend_from_slice(&point);
    }

    let search = SearchParams {
        k: 1,
        list: 20,
        casr: CasrMode::Off,
        ..SearchParams::default()
    };
    let missed: Vec<usize> = (built..built + inserted)
        .filter(|&row| {
            let (hits, _) = index
                .search(
                    &mut reader,
                    &all[row * DIM..(row + 1) * DIM],
                    search,
                    CasrSetting::Off,
                )
                .unwrap();
            hits.first().map(|h| row_of(h.tid)) != Some(row)
        })
        .collect();
    assert_eq!(
        thin,
        0,
        "inserted vertices with fewer than 8 out-neighbours ({} rows missed)",
        missed.len()
    );
    assert!(
        missed.is_empty(),
        "{} of {inserted} inserted rows not found by their own vector at L = 20: {missed:?}",
        missed.len()
    );
    assert!(index.verify().unwrap().is_clean());
}
