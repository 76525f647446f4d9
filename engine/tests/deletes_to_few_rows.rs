//! Deletes down to a handful of rows (issue 14 part 5): after DELETE of all but `k` rows,
//! VACUUM's bulk delete and consolidation, every remaining row must still be reachable from
//! the entry points and returned by a search, and the index must verify clean.
//!
//! The hard case is k = 1: every vertex near the survivor is gone, so a search for its vector
//! finds no reachable live vertex to link it from, and the entry points themselves are
//! deleted (kept only to route).

use navis_engine::dataset::synthetic_clustered;
use navis_engine::index::{build_index, Index, IndexParams};
use navis_engine::search::{CasrMode, SearchCursor, SearchParams};
use navis_engine::storage::HeapTid;
use navis_engine::update::{recover, InsertParams, LocalLocks};
use navis_engine::Metric;

const DIM: usize = 16;
const ROWS: usize = 2000;

fn tid_of(row: usize) -> HeapTid {
    HeapTid {
        block: row as u32 / 100,
        offset: (row % 100 + 1) as u16,
    }
}

fn row_of(tid: HeapTid) -> usize {
    tid.block as usize * 100 + tid.offset as usize - 1
}

fn params(metric: Metric) -> IndexParams {
    IndexParams {
        metric,
        max_degree: 24,
        build_list: 48,
        pq_bytes: Some(8),
        threads: 2,
        ..IndexParams::default()
    }
}

/// Rows a top-`k` search for `query` returns through the graph (no exhaustive fallback: the
/// first pass only), so an unreachable survivor shows.
fn graph_rows(index: &Index, query: &[f32], k: usize) -> Vec<usize> {
    let mut reader = index.reader().unwrap();
    let p = SearchParams {
        k,
        list: index.widened_list(40),
        casr: CasrMode::Off,
        ..SearchParams::default()
    };
    let mut cursor = SearchCursor::new(&mut reader, query, p).unwrap();
    cursor.run_first_pass().unwrap();
    let mut rows: Vec<usize> = cursor
        .next_batch(k)
        .unwrap()
        .iter()
        .map(|h| row_of(h.tid))
        .collect();
    rows.sort_unstable();
    rows
}

fn shrink_to(keep: &[usize], metric: Metric) {
    let data = synthetic_clustered(ROWS, DIM, 8, 5);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("idx");
    let tids: Vec<HeapTid> = (0..ROWS).map(tid_of).collect();
    build_index(&dir, &data, &tids, &params(metric), &|_, _, _| {}, &|| {
        false
    })
    .unwrap();
    let locks = LocalLocks::new(64);
    let index = Index::open(&dir).unwrap();
    recover(index.files(), &locks, 1).unwrap();

    let report = index
        .bulk_delete(|tid| !keep.contains(&row_of(tid)), &|| false)
        .unwrap();
    assert_eq!(report.live as usize, keep.len());
    index.consolidate(&locks, &|| false).unwrap();
    let verify = index.verify().unwrap();
    assert!(
        verify.is_clean(),
        "{} of {ROWS} rows kept, {metric:?}: {verify:?}",
        keep.len()
    );
    for &row in keep {
        let query = &data[row * DIM..(row + 1) * DIM];
        assert_eq!(
            graph_rows(&index, query, keep.len() + 5),
            keep.to_vec(),
            "searching for kept row {row} ({metric:?})"
        );
    }

    // The shrunken index still takes inserts, and finds them.
    let mut reader = index.reader().unwrap();
    let new_row = ROWS + 1;
    let vector = &data[..DIM];
    index
        .insert(
            &mut reader,
            &locks,
            vector,
            tid_of(new_row),
            InsertParams::default(),
        )
        .unwrap();
    assert!(graph_rows(&index, vector, keep.len() + 5).contains(&new_row));
    let verify = index.verify().unwrap();
    assert!(verify.is_clean(), "after an insert, {metric:?}: {verify:?}");
}

#[test]
fn one_row_left_is_found() {
    shrink_to(&[1234], Metric::L2);
    shrink_to(&[7], Metric::Cosine);
}

#[test]
fn a_few_rows_left_are_all_found() {
    shrink_to(&[3, 999, 1500], Metric::L2);
    shrink_to(&[10, 11, 12, 13, 14], Metric::InnerProduct);
}
