use super::body::Body;
use super::layout::*;
use super::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;

pub(super) const DIM: usize = 8;

pub(super) fn tid(i: u32) -> HeapTid {
    HeapTid {
        block: i / 100,
        offset: (i % 100 + 1) as u16,
    }
}

pub(super) fn vector(rng: &mut ChaCha8Rng) -> Vec<f32> {
    (0..DIM).map(|_| rng.gen_range(-1.0..1.0)).collect()
}

/// A small table: `n` random rows, and exact top-`m` by L2 for any query.
pub(super) struct Table {
    pub(super) rows: Vec<Vec<f32>>,
}

impl Table {
    pub(super) fn new(n: usize, seed: u64) -> Table {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        Table {
            rows: (0..n).map(|_| vector(&mut rng)).collect(),
        }
    }

    pub(super) fn top(&self, q: &[f32], m: usize) -> Vec<(HeapTid, &[f32])> {
        let mut all: Vec<(f32, usize)> = self
            .rows
            .iter()
            .enumerate()
            .map(|(i, r)| (Metric::L2.search_distance(q, r), i))
            .collect();
        all.sort_by(|a, b| a.0.total_cmp(&b.0));
        all.iter()
            .take(m)
            .map(|&(_, i)| (tid(i as u32), self.rows[i].as_slice()))
            .collect()
    }

    fn vector_of(&self, t: HeapTid) -> &[f32] {
        &self.rows[(t.block * 100 + t.offset as u32 - 1) as usize]
    }
}

pub(super) fn adaptive() -> LookupParams {
    LookupParams {
        fixed_threshold: None,
    }
}

pub(super) fn stat(region: &HeapRegion, s: Stat) -> u64 {
    let locks = LocalLocks::default();
    region.cache.stats(&locks)[0]
        .counters
        .iter()
        .find(|c| c.0 == s)
        .unwrap()
        .1
}

fn tau_of(region: &HeapRegion) -> Vec<f32> {
    region.cache.stats(&LocalLocks::default())[0]
        .thresholds
        .clone()
}

/// Every structural invariant of a body: reference counts match the row lists, free stacks
/// and used slots add up, the tables name exactly the live queries and objects.
/// Partition `p`'s body as formatted under its current claim (L2 tests), if it is.
pub(super) fn open_body(region: &HeapRegion, p: usize) -> Option<Body<'_>> {
    let claim = region
        .cache
        .slot(p)
        .claim
        .load(std::sync::atomic::Ordering::Relaxed);
    Body::open(region.cache.body(p), claim, Metric::L2)
}

pub(super) fn verify(region: &HeapRegion, p: usize) {
    let Some(b) = open_body(region, p) else {
        return;
    };
    let mut refs = vec![0u32; b.g.objects];
    let (mut reps, mut aliases) = (0, 0);
    for e in 0..b.g.entries as u32 {
        match b.state(e) {
            STATE_REPRESENTATIVE => {
                reps += 1;
                let rows: Vec<u32> = b.rows(e).collect();
                assert!(rows.len() <= b.w.get(b.e(e, E_WANT)) as usize);
                for o in rows {
                    refs[o as usize] += 1;
                }
                let hash = b.w.u64(b.e(e, E_HASH));
                assert_eq!(b.find_query(hash, b.query(e)), Some(e));
            }
            STATE_ALIAS => {
                aliases += 1;
                let rep = b.w.get(b.e(e, E_LINK));
                assert_eq!(b.state(rep), STATE_REPRESENTATIVE, "alias of a live entry");
            }
            _ => {}
        }
    }
    assert_eq!(reps, b.w.get(H_REPRESENTATIVES));
    assert_eq!(aliases, b.w.get(H_ALIASES));
    let mut used = 0;
    for o in 0..b.g.objects as u32 {
        assert_eq!(
            b.w.get(b.g.object(o) + O_REFS),
            refs[o as usize],
            "object {o}"
        );
        if refs[o as usize] > 0 {
            used += 1;
            assert_eq!(b.find_object(b.object_tid(o)), Some(o));
        }
    }
    assert_eq!(used, b.w.get(H_OBJECTS_USED));
    assert_eq!(used as usize + b.free_objects(), b.g.objects);
    assert_eq!(
        b.risk_sums(),
        b.risk_sums_by_scan(),
        "the risk model's sums"
    );
    let floor = b.w.u64(H_CHECKPOINT_FLOOR);
    for e in (0..b.g.entries as u32).filter(|&e| b.state(e) == STATE_REPRESENTATIVE) {
        assert!(
            b.w.u64(b.e(e, E_LOG_CHECKPOINT)) >= floor,
            "entry {e} below the floor"
        );
    }
    verify_filters(&b);
}

/// Each filter's counts match its nodes, its entry point is one of them, and its links
/// stay inside it (a freed slot is never linked to).
fn verify_filters(b: &Body) {
    let active = b.w.get(H_ACTIVE_EPOCH);
    let mut held = 0;
    for epoch in [active, active.wrapping_sub(1)] {
        let f = b.filter_words(epoch);
        let in_filter = |e: u32| {
            matches!(b.state(e), STATE_REPRESENTATIVE | STATE_TOMBSTONE)
                && b.w.get(b.e(e, E_EPOCH)) == epoch
        };
        let (mut live, mut tombstones) = (0, 0);
        for e in (0..b.g.entries as u32).filter(|&e| in_filter(e)) {
            match b.state(e) {
                STATE_REPRESENTATIVE => live += 1,
                _ => tombstones += 1,
            }
            let degree = b.w.get(b.e(e, E_DEGREE)) as usize;
            for i in 0..degree {
                let n = b.w.get(b.e(e, E_NEIGHBOURS) + i);
                assert!(in_filter(n), "entry {e} links to {n} outside its filter");
            }
        }
        assert_eq!((live, tombstones), (b.w.get(f + 1), b.w.get(f + 2)));
        let start = b.w.get(f);
        assert!(
            (start == NONE) == (live + tombstones == 0) && (start == NONE || in_filter(start)),
            "filter {epoch} starts at {start} with {live} + {tombstones} nodes"
        );
        held += live + tombstones;
    }
    held += b.w.get(H_ALIASES);
    assert_eq!(held as usize + b.free_entries(), b.g.entries);
}

pub(super) fn region() -> HeapRegion {
    HeapRegion::new(4 << 20, 1).unwrap()
}

pub(super) fn claim<'a>(r: &'a HeapRegion, locks: &LocalLocks) -> Partition<'a> {
    r.cache.claim(locks, 7, DIM, Metric::L2, (1, 2)).unwrap()
}

#[test]
fn an_equal_query_is_answered_in_exact_order_and_grows_its_threshold() {
    let (r, locks) = (region(), LocalLocks::default());
    let p = claim(&r, &locks);
    let t = Table::new(500, 1);
    let q = t.rows[3].iter().map(|x| x + 0.01).collect::<Vec<_>>();
    assert!(p.lookup(&locks, &q, 0, &adaptive()).is_none());
    p.admit(&locks, &q, 0, p.vacuum_ticket(), 10, &t.top(&q, 20))
        .unwrap();
    let tau0 = tau_of(&r)[0];
    let hit = p.lookup(&locks, &q, 0, &adaptive()).unwrap();
    assert_eq!(hit.kind, HitKind::Equality);
    let want: Vec<HeapTid> = t.top(&q, 20).iter().map(|r| r.0).collect();
    let got: Vec<HeapTid> = hit.rows.iter().map(|r| r.0).collect();
    assert_eq!(got, want);
    for (tid, d) in &hit.rows {
        assert_eq!(*d, Metric::L2.search_distance(&q, t.vector_of(*tid)));
    }
    let tau1 = tau_of(&r)[0];
    assert!(
        (tau1 - tau0 * ALPHA_EQUALITY).abs() < 1e-6,
        "{tau0} -> {tau1}"
    );
    // Capped at minD (four times the start): 15 more equality hits cannot pass it.
    for _ in 0..30 {
        p.lookup(&locks, &q, 0, &adaptive()).unwrap();
    }
    let min_d = super::body::euclidean(&q, t.vector_of(want[0]));
    assert!((tau_of(&r)[0] - min_d).abs() < 1e-5);
    assert_eq!(stat(&r, Stat::HitsEquality), 31);
    verify(&r, 0);
}

#[test]
fn a_near_query_hits_approximately_shrinks_the_threshold_and_links_an_alias() {
    let (r, locks) = (region(), LocalLocks::default());
    let p = claim(&r, &locks);
    let t = Table::new(500, 2);
    let q = t.rows[10].iter().map(|x| x + 0.05).collect::<Vec<_>>();
    p.admit(&locks, &q, 0, p.vacuum_ticket(), 10, &t.top(&q, 20))
        .unwrap();
    let tau0 = tau_of(&r)[0];
    let mut near = q.clone();
    near[0] += tau0 * 0.5;
    let hit = p.lookup(&locks, &near, 0, &adaptive()).unwrap();
    assert_eq!(hit.kind, HitKind::Approximate);
    // Re-ranked for the new query.
    assert!(hit.rows.windows(2).all(|w| w[0].1 <= w[1].1));
    for (tid, d) in &hit.rows {
        assert_eq!(*d, Metric::L2.search_distance(&near, t.vector_of(*tid)));
    }
    let tau1 = tau_of(&r)[0];
    assert!((tau1 - tau0 * ALPHA_APPROXIMATE).abs() < 1e-6);
    // The same near query again: the alias answers through the hash table, and shrinks the
    // representative's threshold as an approximate hit.
    let again = p.lookup(&locks, &near, 0, &adaptive()).unwrap();
    assert_eq!(again.kind, HitKind::Alias);
    assert_eq!(again.rows, hit.rows);
    assert!((tau_of(&r)[0] - tau1 * ALPHA_APPROXIMATE).abs() < 1e-7);
    // A query as far as the first one now misses: the radius shrank.
    assert!(p
        .lookup(
            &locks,
            &{
                let mut v = q.clone();
                v[1] += tau0 * 0.5;
                v
            },
            0,
            &adaptive()
        )
        .is_none());
    assert_eq!(stat(&r, Stat::AliasesLinked), 1);
    verify(&r, 0);
}

#[test]
fn a_fixed_threshold_neither_adapts_nor_links_aliases() {
    let (r, locks) = (region(), LocalLocks::default());
    let p = claim(&r, &locks);
    let t = Table::new(300, 3);
    let q = t.rows[0].clone();
    p.admit(&locks, &q, 0, p.vacuum_ticket(), 10, &t.top(&q, 10))
        .unwrap();
    let tau0 = tau_of(&r)[0];
    let fixed = LookupParams {
        fixed_threshold: Some(0.5),
    };
    let mut near = q.clone();
    near[2] += 0.3;
    for _ in 0..3 {
        assert_eq!(
            p.lookup(&locks, &near, 0, &fixed).unwrap().kind,
            HitKind::Approximate
        );
    }
    assert_eq!(tau_of(&r)[0], tau0);
    assert_eq!(stat(&r, Stat::AliasesLinked), 0);
}

#[test]
fn another_generation_never_answers() {
    let (r, locks) = (region(), LocalLocks::default());
    let p = claim(&r, &locks);
    let t = Table::new(100, 4);
    let q = t.rows[5].clone();
    p.admit(&locks, &q, 3, p.vacuum_ticket(), 10, &t.top(&q, 10))
        .unwrap();
    assert!(p.lookup(&locks, &q, 3, &adaptive()).is_some());
    assert!(p.lookup(&locks, &q, 4, &adaptive()).is_none());
    assert_eq!(stat(&r, Stat::GenerationMisses), 1);
}

#[test]
fn fifo_eviction_keeps_the_newest_entries_and_the_structure_sound() {
    let (r, locks) = (
        HeapRegion::new(256 << 10, 1).unwrap(),
        LocalLocks::default(),
    );
    let p = claim(&r, &locks);
    let t = Table::new(3_000, 8);
    let mut rng = ChaCha8Rng::seed_from_u64(80);
    let queries: Vec<Vec<f32>> = (0..600).map(|_| vector(&mut rng)).collect();
    for (i, q) in queries.iter().enumerate() {
        p.admit(&locks, q, 0, p.vacuum_ticket(), 10, &t.top(q, 20))
            .unwrap();
        if i % 50 == 0 {
            verify(&r, 0);
        }
    }
    assert!(stat(&r, Stat::Evictions) > 0);
    assert!(p.lookup(&locks, &queries[0], 0, &adaptive()).is_none());
    assert_eq!(
        p.lookup(&locks, &queries[599], 0, &adaptive())
            .unwrap()
            .kind,
        HitKind::Equality
    );
    verify(&r, 0);
}

#[test]
fn indexes_claim_partitions_and_the_least_recent_gives_way() {
    let (r, locks) = (HeapRegion::new(1 << 20, 2).unwrap(), LocalLocks::default());
    let t = Table::new(100, 9);
    let q = t.rows[0].clone();
    let a = r.cache.claim(&locks, 1, DIM, Metric::L2, (1, 10)).unwrap();
    a.admit(&locks, &q, 0, a.vacuum_ticket(), 10, &t.top(&q, 10))
        .unwrap();
    let b = r.cache.claim(&locks, 2, 3, Metric::L2, (1, 11)).unwrap();
    assert!(a.lookup(&locks, &q, 0, &adaptive()).is_some());
    // A third index takes b's partition (a was used last) and formats it for itself.
    let _c = r.cache.claim(&locks, 3, DIM, Metric::L2, (1, 12)).unwrap();
    assert!(b.lookup(&locks, &[0.0, 0.0, 0.0], 0, &adaptive()).is_none());
    assert!(r.cache.find(2, Metric::L2).is_none());
    assert!(a.lookup(&locks, &q, 0, &adaptive()).is_some());
    // The same index (same oids) under a new tag, as after REINDEX or a rebuild: its old
    // partition is freed, not left held beside the new one.
    let _a2 = r.cache.claim(&locks, 4, DIM, Metric::L2, (1, 10)).unwrap();
    assert!(a.lookup(&locks, &q, 0, &adaptive()).is_none());
    assert!(r.cache.find(1, Metric::L2).is_none());
    assert!(
        r.cache.find(3, Metric::L2).is_some(),
        "another index keeps its partition"
    );
    let held = r.cache.stats(&locks);
    assert_eq!(held.iter().filter(|s| s.rel_oid == 10).count(), 1);
    r.cache.purge(4);
    assert!(r.cache.find(4, Metric::L2).is_none());
}

#[test]
fn concurrent_lookups_admissions_inserts_and_vacuums_stay_consistent() {
    let r = HeapRegion::new(512 << 10, 1).unwrap();
    let locks = LocalLocks::default();
    let t = Table::new(3_000, 10);
    let p = claim(&r, &locks);
    let mut rng = ChaCha8Rng::seed_from_u64(100);
    let queries: Vec<Vec<f32>> = (0..200).map(|_| vector(&mut rng)).collect();
    let dead_below: std::sync::atomic::AtomicU32 = 0.into();
    std::thread::scope(|s| {
        for th in 0..4u64 {
            let (p, t, queries, locks, dead_below) = (&p, &t, &queries, &locks, &dead_below);
            s.spawn(move || {
                let mut rng = ChaCha8Rng::seed_from_u64(th);
                let vectors: HashMap<HeapTid, &[f32]> = (0..t.rows.len() as u32)
                    .map(|i| (tid(i), t.rows[i as usize].as_slice()))
                    .collect();
                for step in 0..3_000 {
                    let q = &queries[rng.gen_range(0..queries.len())];
                    let ticket = p.vacuum_ticket();
                    match p.lookup(locks, q, 0, &adaptive()) {
                        Some(hit) => {
                            // Never a torn row: each distance is that of the row's own vector.
                            for (tid, d) in &hit.rows {
                                if let Some(v) = vectors.get(tid) {
                                    assert_eq!(*d, Metric::L2.search_distance(q, v));
                                }
                                assert!(tid.block * 100 + (tid.offset as u32) > 0);
                            }
                            assert!(hit.rows.windows(2).all(|w| w[0].1 <= w[1].1));
                        }
                        None => {
                            let _ = p.admit(locks, q, 0, ticket, 10, &t.top(q, 15));
                        }
                    }
                    if th == 0 && step % 100 == 0 {
                        let below = dead_below.fetch_add(3, std::sync::atomic::Ordering::Relaxed);
                        p.begin_vacuum(locks, &mut |t| {
                            let i = t.block * 100 + t.offset as u32 - 1;
                            i < below + 3
                        });
                        p.end_vacuum(locks);
                    }
                    if th == 1 && step % 3 == 0 {
                        let v: Vec<f32> = (0..DIM).map(|_| rng.gen_range(-1.0..1.0)).collect();
                        p.record_insert(locks, tid(100_000 + step), &v);
                    }
                }
            });
        }
    });
    verify(&r, 0);
}

#[test]
fn a_full_cache_evicts_a_few_entries_per_admission_never_all_of_them() {
    // Small entries (8-d) sharing rows of a small table: the entry slots, not the objects,
    // run out first. Before tombstones gave their slots up, one admission evicted entry
    // after entry until a whole filter was dropped.
    let (r, locks) = (HeapRegion::new(1 << 20, 1).unwrap(), LocalLocks::default());
    let p = claim(&r, &locks);
    let t = Table::new(20_000, 12);
    let mut rng = ChaCha8Rng::seed_from_u64(120);
    let (mut before, mut worst, mut most, mut fewest) = (0, 0, 0, u32::MAX);
    let mut recent = Vec::new();
    for i in 0..3_000 {
        let q = vector(&mut rng);
        p.admit(&locks, &q, 0, p.vacuum_ticket(), 10, &t.top(&q, 10))
            .unwrap();
        if i >= 2_900 {
            recent.push(q);
        }
        let evictions = stat(&r, Stat::Evictions);
        worst = worst.max(evictions - before);
        before = evictions;
        let held = r.cache.stats(&locks)[0].representatives;
        most = most.max(held);
        if i >= 1_500 {
            fewest = fewest.min(held);
        }
        if i % 100 == 0 {
            verify(&r, 0);
        }
    }
    assert!(before > 0, "the cache filled");
    // Slots are freed in batches of 1/64 of them.
    let slots = open_body(&r, 0).unwrap().g.entries;
    assert!(
        worst as usize <= 2 + slots / 64,
        "one admission evicted {worst} of {slots} entries"
    );
    assert!(
        fewest * 10 >= most * 9,
        "between {fewest} and {most} entries once full"
    );
    verify(&r, 0);
    // The filters still route to the nearest cached query after the slots were recycled:
    // a query moved slightly from a recent entry's finds that entry.
    let b = open_body(&r, 0).unwrap();
    let found = recent
        .iter()
        .filter(|q| {
            let moved: Vec<f32> = q.iter().map(|x| x + 0.001).collect();
            b.nearest_representative(&moved)
                .is_some_and(|(e, _)| b.query(e) == q.as_slice())
        })
        .count();
    assert!(found >= 95, "{found} of 100 recent entries found");
}

/// Lookup and admission cost at a realistic size (run with --ignored --nocapture in release).
#[test]
#[ignore]
fn lookup_cost_at_five_thousand_entries() {
    let dim = 784;
    let r = HeapRegion::new(120 << 20, 1).unwrap();
    let locks = LocalLocks::default();
    let p = r.cache.claim(&locks, 9, dim, Metric::L2, (1, 2)).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let random =
        |rng: &mut ChaCha8Rng| -> Vec<f32> { (0..dim).map(|_| rng.gen_range(0.0..1.0)).collect() };
    let rows: Vec<Vec<f32>> = (0..20_000).map(|_| random(&mut rng)).collect();
    // Query i caches 20 consecutive rows (shared with its neighbours' entries).
    let admit = |i: u32, rng: &mut ChaCha8Rng| {
        let picked: Vec<(HeapTid, &[f32])> = (0..20)
            .map(|j| {
                let id = (i * 4 + j) % 20_000;
                (tid(id), rows[id as usize].as_slice())
            })
            .collect();
        let _ = p.admit(&locks, &random(rng), 0, p.vacuum_ticket(), 10, &picked);
    };
    let t = std::time::Instant::now();
    (0..5_000).for_each(|i| admit(i, &mut rng));
    println!("admit: {:?} each", t.elapsed() / 5_000);
    let t = std::time::Instant::now();
    for _ in 0..2_000 {
        assert!(p
            .lookup(&locks, &random(&mut rng), 0, &adaptive())
            .is_none());
    }
    println!("missed lookup: {:?} each", t.elapsed() / 2_000);
    let t = std::time::Instant::now();
    for i in 0..2_000u32 {
        p.record_insert(&locks, tid(100_000 + i), &random(&mut rng));
    }
    println!("recorded insert: {:?} each", t.elapsed() / 2_000);
    // The 20,000 rows fit the objects, so from here the entry slots run out: admissions
    // free tombstones' slots, 1/64 of the slots at a time (one pass over the filter links).
    let t = std::time::Instant::now();
    (5_000..15_000).for_each(|i| admit(i, &mut rng));
    println!("admit into a full cache: {:?} each", t.elapsed() / 10_000);
    println!("{:?}", &r.cache.stats(&locks)[0].counters[..12]);
    println!("entries held: {}", r.cache.stats(&locks)[0].representatives);
}
