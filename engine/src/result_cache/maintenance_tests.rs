//! Cached entries while their table changes: VACUUM removing rows and blocking overlapping
//! admissions, inserts through the fast and slow refresh paths, and the log wrapping.

use super::tests::{adaptive, claim, open_body, region, stat, tid, vector, verify, Table, DIM};
use super::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[test]
fn vacuum_removes_dead_rows_promotes_reserves_and_blocks_overlapping_admissions() {
    let (r, locks) = (region(), LocalLocks::default());
    let p = claim(&r, &locks);
    let t = Table::new(500, 5);
    let q = t.rows[7].clone();
    let rows = t.top(&q, 12);
    let ticket = p.vacuum_ticket();
    p.admit(&locks, &q, 0, ticket, 10, &rows).unwrap();
    // Two dead rows: the reserve moves up, 10 remain, the entry still answers.
    let dead: Vec<HeapTid> = vec![rows[0].0, rows[4].0];
    p.begin_vacuum(&locks, &mut |t| dead.contains(&t));
    // A search that started before the VACUUM may have seen a row the VACUUM removes.
    let q2 = t.rows[8].clone();
    assert_eq!(
        p.admit(&locks, &q2, 0, ticket, 10, &t.top(&q2, 12)),
        Err(Refusal::Vacuum)
    );
    let during = p.vacuum_ticket();
    assert_eq!(
        p.admit(&locks, &q2, 0, during, 10, &t.top(&q2, 12)),
        Err(Refusal::Vacuum)
    );
    p.end_vacuum(&locks);
    let hit = p.lookup(&locks, &q, 0, &adaptive()).unwrap();
    let got: Vec<HeapTid> = hit.rows.iter().map(|r| r.0).collect();
    let want: Vec<HeapTid> = rows
        .iter()
        .map(|r| r.0)
        .filter(|t| !dead.contains(t))
        .collect();
    assert_eq!(got, want);
    verify(&r, 0);
    // One more dead row leaves 9 < k: the entry stops answering.
    let dead2 = rows[1].0;
    p.begin_vacuum(&locks, &mut |t| t == dead2);
    p.end_vacuum(&locks);
    assert!(p.lookup(&locks, &q, 0, &adaptive()).is_none());
    assert_eq!(stat(&r, Stat::InvalidatedByDelete), 1);
    assert_eq!(stat(&r, Stat::RowsRemovedByVacuum), 3);
    verify(&r, 0);
    // A search started after the VACUUM is admitted.
    p.admit(&locks, &q2, 0, p.vacuum_ticket(), 10, &t.top(&q2, 12))
        .unwrap();
}

#[test]
fn an_inserted_row_enters_the_nearest_entry_through_the_fast_path() {
    let (r, locks) = (region(), LocalLocks::default());
    let p = claim(&r, &locks);
    let t = Table::new(500, 6);
    let q = t.rows[9].iter().map(|x| x + 0.02).collect::<Vec<_>>();
    p.admit(&locks, &q, 0, p.vacuum_ticket(), 10, &t.top(&q, 20))
        .unwrap();
    let new_tid = tid(9_000);
    let new_row = q.clone(); // the query itself: the closest row there can be
    let out = p.record_insert(&locks, new_tid, &new_row);
    assert!(out.fast);
    let hit = p.lookup(&locks, &q, 0, &adaptive()).unwrap();
    assert_eq!(hit.rows[0], (new_tid, 0.0));
    assert_eq!(hit.rows.len(), 20, "the farthest row made way");
    verify(&r, 0);
}

#[test]
fn the_slow_path_refreshes_entries_the_fast_path_missed() {
    let (r, locks) = (region(), LocalLocks::default());
    let p = claim(&r, &locks);
    let t = Table::new(2_000, 7);
    let mut rng = ChaCha8Rng::seed_from_u64(70);
    let queries: Vec<Vec<f32>> = (0..40).map(|_| vector(&mut rng)).collect();
    for q in &queries {
        p.admit(&locks, q, 0, p.vacuum_ticket(), 10, &t.top(q, 10))
            .unwrap();
    }
    // Rows near every cached query, inserted far from... each: the fast path only reaches the
    // nearest representative, the slow path walks the others.
    let mut inserted = Vec::new();
    for (i, q) in queries.iter().enumerate() {
        let row: Vec<f32> = q.iter().map(|x| x + 1e-4).collect();
        inserted.push((tid(10_000 + i as u32), row));
    }
    for (tid, row) in &inserted {
        p.record_insert(&locks, *tid, row);
    }
    // Enough further inserts (far away) for the risk model to walk every entry.
    for i in 0..2_000u32 {
        let far: Vec<f32> = (0..DIM).map(|_| 50.0 + rng.gen::<f32>()).collect();
        p.record_insert(&locks, tid(20_000 + i), &far);
    }
    assert!(stat(&r, Stat::RefreshSlow) > 0);
    let mut found = 0;
    for (q, (tid, _)) in queries.iter().zip(&inserted) {
        if let Some(hit) = p.lookup(&locks, q, 0, &adaptive()) {
            found += (hit.rows[0].0 == *tid) as usize;
        }
    }
    // Every entry that still answers knows its new nearest row.
    assert!(found >= 30, "{found} of 40 entries saw their inserted row");
    verify(&r, 0);
}

#[test]
fn entries_the_refresh_cannot_keep_up_with_stop_answering_when_the_log_wraps() {
    // 60 entries, but one slow-path step checks 16 records of one entry per insert: the
    // refresh falls behind, and entries whose unchecked records the log overwrites are
    // evicted (they could miss an inserted row for ever). The others keep answering.
    let (r, locks) = (HeapRegion::new(1 << 20, 1).unwrap(), LocalLocks::default());
    let p = claim(&r, &locks);
    let t = Table::new(2_000, 8);
    let mut rng = ChaCha8Rng::seed_from_u64(80);
    let queries: Vec<Vec<f32>> = (0..60).map(|_| vector(&mut rng)).collect();
    for q in &queries {
        p.admit(&locks, q, 0, p.vacuum_ticket(), 10, &t.top(q, 10))
            .unwrap();
    }
    let log = open_body(&r, 0).unwrap().g.log as u32;
    for i in 0..3 * log {
        let far: Vec<f32> = (0..DIM).map(|_| 50.0 + rng.gen::<f32>()).collect();
        p.record_insert(&locks, tid(20_000 + i), &far);
        if i % 97 == 0 {
            verify(&r, 0);
        }
    }
    let wrapped = stat(&r, Stat::InvalidatedByLogWrap);
    let left = r.cache.stats(&locks)[0].representatives as u64;
    assert!(wrapped > 0, "no entry fell behind the log");
    assert_eq!(wrapped + left, 60, "every entry is either evicted or kept");
    let answering = queries
        .iter()
        .filter(|q| p.lookup(&locks, q, 0, &adaptive()).is_some())
        .count() as u64;
    assert_eq!(
        answering, left,
        "the kept entries answer, the evicted ones do not"
    );
    verify(&r, 0);
}
