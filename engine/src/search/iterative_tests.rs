//! The cursor past its first pass on in-memory indexes: graph passes, unreached vertices,
//! exhaustive rounds under a small memory budget, ties, deletes and the result cap.

use super::tests::{brute_force, queries, row, MemorySource};
use super::*;
use crate::storage::FLAG_DELETED;

/// Every hit of a cursor run to its end.
fn drain(cursor: &mut SearchCursor<'_, MemorySource>) -> Vec<SearchHit> {
    let mut hits = Vec::new();
    while let Some(hit) = cursor.next_hit().unwrap() {
        hits.push(hit);
    }
    assert!(cursor.next_hit().unwrap().is_none(), "stays exhausted");
    hits
}

/// Checks the contract: no vertex twice, non-decreasing exact distances, every live vertex
/// returned or counted as skipped, and every skipped one closer than a vertex returned.
fn check_contract(src: &MemorySource, q: &[f32], hits: &[SearchHit], skips: u64) {
    let dim = src.dim;
    let live: Vec<VertexId> = (0..src.entries.len() as VertexId)
        .filter(|&v| src.entries[v as usize].flags & FLAG_DELETED == 0)
        .collect();
    let mut seen = HashSet::default();
    for h in hits {
        assert!(seen.insert(h.id), "vertex {} returned twice", h.id);
        assert!(live.contains(&h.id), "vertex {} is deleted", h.id);
        let exact = Metric::L2.search_distance(q, row(&src.vectors, dim, h.id as usize));
        assert_eq!(h.distance, exact, "distance of {}", h.id);
    }
    assert!(hits.windows(2).all(|w| w[0].distance <= w[1].distance));
    assert_eq!(hits.len() as u64 + skips, live.len() as u64);
    let last = hits.last().map_or(f32::INFINITY, |h| h.distance);
    for &v in live.iter().filter(|v| !seen.contains(v)) {
        let d = Metric::L2.search_distance(q, row(&src.vectors, dim, v as usize));
        assert!(d < last, "vertex {v} neither returned nor skipped");
    }
}

fn graph_only() -> SearchParams {
    SearchParams {
        list: 20,
        casr: CasrMode::Window(4),
        sequential_page_cost: f64::INFINITY,
        ..SearchParams::default()
    }
}

#[test]
fn graph_passes_exhaust_the_index_then_find_the_unreached() {
    let mut src = MemorySource::build(1000, 8, 21);
    let q = row(&queries(1, 8), 8, 0).to_vec();
    // Nothing links to these: only the round over unreached vertices can find them, after
    // the graph passes returned everything else. The far ones come back; the near one is
    // closer than what the graph returned first, so strict order must skip it.
    let by_distance = brute_force(&src.vectors, 8, &q, 1000);
    let far: Vec<VertexId> = by_distance[990..].iter().map(|p| p.0).collect();
    let near = by_distance[30].0;
    let mut islands = far.clone();
    islands.push(near);
    src.unlink(&islands);
    src.entrance.retain(|v| !islands.contains(v));
    let mut cursor = SearchCursor::new(&mut src, &q, graph_only()).unwrap();
    let hits = drain(&mut cursor);
    let (skips, c) = (cursor.order_skips(), cursor.counters());
    drop(cursor);
    check_contract(&src, &q, &hits, skips);
    assert_eq!(c.exhaustive_rounds, 1);
    assert_eq!(
        c.exhaustive_vector_loads,
        islands.len() as u64,
        "only the unreached"
    );
    assert_eq!(
        c.expanded as usize,
        1000 - islands.len(),
        "the graph is swept whole"
    );
    assert!(skips <= 10, "{skips} skips");
    for id in far {
        assert!(hits.iter().any(|h| h.id == id), "far island {id} missing");
    }
    assert!(
        !hits.iter().any(|h| h.id == near),
        "the near island came out of order"
    );
}

#[test]
fn small_scan_memory_runs_many_exact_rounds_through_ties() {
    let mut src = MemorySource::build(300, 8, 22);
    // Forty copies of one vector: ties that straddle the rounds' boundaries.
    let dim = src.dim;
    let copy = row(&src.vectors, dim, 7).to_vec();
    for v in 100..140 {
        src.vectors[v * dim..(v + 1) * dim].copy_from_slice(&copy);
    }
    let q = row(&queries(1, 8), 8, 0).to_vec();
    let params = SearchParams {
        list: 20,
        casr: CasrMode::Window(4),
        // 16 results per round, and the graph passes leave at once: over budget.
        scan_memory: 16 * super::exhaustive::BYTES_PER_RESULT,
        sequential_page_cost: f64::INFINITY,
        ..SearchParams::default()
    };
    let mut cursor = SearchCursor::new(&mut src, &q, params).unwrap();
    let hits = drain(&mut cursor);
    let (skips, rounds) = (cursor.order_skips(), cursor.exhaustive_rounds());
    drop(cursor);
    check_contract(&src, &q, &hits, skips);
    assert!(rounds >= (300 - 10) / 16, "{rounds} rounds");
    assert!(skips <= 3, "{skips} skips");
    let copies = hits.iter().filter(|h| (100..140).contains(&h.id)).count();
    assert_eq!(copies, 40, "every copy comes back");
}

#[test]
fn deleted_vertices_never_come_back() {
    let mut src = MemorySource::build(500, 8, 23);
    for v in (0..500).step_by(3) {
        src.entries[v].flags |= FLAG_DELETED;
    }
    let q = row(&queries(1, 8), 8, 0).to_vec();
    for params in [graph_only(), SearchParams::default()] {
        let mut cursor = SearchCursor::new(&mut src, &q, params).unwrap();
        let hits = drain(&mut cursor);
        let skips = cursor.order_skips();
        drop(cursor);
        check_contract(&src, &q, &hits, skips);
    }
}

/// Scans expand co-located lists while their pages come from the device: the first pass and
/// the graph passes then expand candidates out of order, and the cursor's contract must hold
/// all the same, with and without deleted vertices.
#[test]
fn co_located_expansion_keeps_the_cursor_contract() {
    let mut src = MemorySource::build(1000, 8, 29);
    let q = row(&queries(1, 8), 8, 0).to_vec();
    let colocated = SearchParams {
        colocated: true,
        ..graph_only()
    };
    for deleted_every in [0, 4] {
        if deleted_every > 0 {
            for v in (0..1000).step_by(deleted_every) {
                src.entries[v].flags |= FLAG_DELETED;
            }
        }
        let mut cursor = SearchCursor::new(&mut src, &q, colocated).unwrap();
        let hits = drain(&mut cursor);
        let (skips, c) = (cursor.order_skips(), cursor.counters());
        drop(cursor);
        check_contract(&src, &q, &hits, skips);
        assert!(c.colocated_lists_used > 0, "co-located lists were used");
        assert!(skips <= 10, "{skips} skips");
    }
}

#[test]
fn identical_vectors_all_come_back_at_any_list() {
    let mut src = MemorySource::build(20, 4, 24);
    let copy = row(&src.vectors, 4, 0).to_vec();
    for v in 0..20 {
        src.vectors[v * 4..(v + 1) * 4].copy_from_slice(&copy);
    }
    src.unlink(&[5, 6, 7]); // as a prune among equals would
    let q = row(&queries(1, 4), 4, 0).to_vec();
    for list in [1, 40] {
        for sequential_page_cost in [0.25, f64::INFINITY] {
            let params = SearchParams {
                k: 10.min(list),
                list,
                sequential_page_cost,
                ..SearchParams::default()
            };
            let mut cursor = SearchCursor::new(&mut src, &q, params).unwrap();
            let hits = drain(&mut cursor);
            assert_eq!(hits.len(), 20, "list {list}, cost {sequential_page_cost}");
            assert_eq!(cursor.order_skips(), 0);
        }
    }
}

#[test]
fn max_results_ends_the_cursor() {
    let mut src = MemorySource::build(400, 8, 25);
    let q = row(&queries(1, 8), 8, 0).to_vec();
    for sequential_page_cost in [0.25, f64::INFINITY] {
        let params = SearchParams {
            max_results: 55,
            sequential_page_cost,
            ..SearchParams::default()
        };
        let mut cursor = SearchCursor::new(&mut src, &q, params).unwrap();
        let hits = drain(&mut cursor);
        assert!(
            (55..55 + 1024).contains(&hits.len()),
            "{} hits, cost {sequential_page_cost}",
            hits.len()
        );
        if sequential_page_cost < 1.0 {
            // One exact round sized to what is left of the cap.
            assert_eq!(hits.len(), 55);
            assert_eq!(cursor.exhaustive_rounds(), 1);
        }
    }
}

#[test]
fn the_cost_rule_goes_exhaustive_only_when_cheaper() {
    let mut src = MemorySource::build(1000, 8, 26);
    let q = row(&queries(1, 8), 8, 0).to_vec();
    // 1000 vectors of 8 dimensions are 8 pages: one round costs 2 random reads.
    let mut cursor = SearchCursor::new(&mut src, &q, SearchParams::default()).unwrap();
    cursor.next_batch(11).unwrap();
    assert_eq!(cursor.exhaustive_rounds(), 1);
    drop(cursor);
    // At 1000 times that, the graph passes are the cheaper way to the next batches.
    let costly = SearchParams {
        sequential_page_cost: 250.0,
        ..SearchParams::default()
    };
    let mut cursor = SearchCursor::new(&mut src, &q, costly).unwrap();
    let hits = cursor.next_batch(200).unwrap();
    assert_eq!(hits.len(), 200);
    assert_eq!(cursor.exhaustive_rounds(), 0);
    let brute = brute_force(&src.vectors, 8, &q, 200);
    let found = hits
        .iter()
        .filter(|h| brute.iter().any(|b| b.0 == h.id))
        .count();
    assert!(found >= 195, "{found} of the true top-200");
}

#[test]
fn relaxed_order_returns_every_row_once_including_late_finds() {
    let mut src = MemorySource::build(1000, 8, 21);
    let q = row(&queries(1, 8), 8, 0).to_vec();
    // The islands of the strict test above: the near one, which strict order skips, must come
    // back late; the small memory budget makes several exhaustive rounds run after it.
    let by_distance = brute_force(&src.vectors, 8, &q, 1000);
    let near = by_distance[30].0;
    let mut islands: Vec<VertexId> = by_distance[990..].iter().map(|p| p.0).collect();
    islands.push(near);
    src.unlink(&islands);
    src.entrance.retain(|v| !islands.contains(v));
    for scan_memory in [4 << 20, 64 * super::exhaustive::BYTES_PER_RESULT] {
        let params = SearchParams {
            relaxed_order: true,
            scan_memory,
            ..graph_only()
        };
        let mut cursor = SearchCursor::new(&mut src, &q, params).unwrap();
        let hits = drain(&mut cursor);
        let c = cursor.counters();
        drop(cursor);
        let mut seen = HashSet::default();
        for h in &hits {
            assert!(seen.insert(h.id), "vertex {} returned twice", h.id);
            let exact = Metric::L2.search_distance(&q, row(&src.vectors, 8, h.id as usize));
            assert_eq!(h.distance, exact);
        }
        assert_eq!(hits.len(), 1000, "every row, scan_memory {scan_memory}");
        assert_eq!(c.order_skips, 0);
        assert!(c.late_results >= 1, "the near island came late: {c:?}");
        let out_of_order = hits
            .windows(2)
            .filter(|w| w[0].distance > w[1].distance)
            .count();
        assert!(out_of_order <= c.late_results as usize);
    }
}
