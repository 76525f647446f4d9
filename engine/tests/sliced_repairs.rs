//! Repair tasks run a slice at a time (LIOS in search stalls, RFC 0004, issue 18): a repair
//! stopped after every step and resumed must leave every list exactly as the same repairs
//! run whole leave it; a repaired list whose vertex was deleted between the prune and the
//! commit is computed again; a commit that finds the stripe taken declines, then commits.

mod lios_common;
use lios_common::{copy_dir, current_list, open, row_of, small_degree_params, tid};

use navis_engine::dataset::synthetic_clustered;
use navis_engine::index::{build_index, Index};
use navis_engine::storage::HeapTid;
use navis_engine::update::sliced::COMMIT_TRIES;
use navis_engine::update::{LocalLocks, RepairSink, SlicedRepair, StepKind, WriteLocks};
use navis_engine::VertexId;
use std::cell::RefCell;

const DIM: usize = 24;
const ROWS: usize = 1500;

/// Every third row is deleted: lists lose several neighbours each, and their pools overflow.
fn dead(row: usize) -> bool {
    row % 3 == 1
}

/// Takes every repair.
#[derive(Default)]
struct Collect(RefCell<Vec<VertexId>>);

impl RepairSink for Collect {
    fn defer(&self, vertex: VertexId) -> bool {
        self.0.borrow_mut().push(vertex);
        true
    }
}

/// The current lists of every vertex with an entry (`None` for the others).
fn all_lists(index: &Index) -> Vec<Option<Vec<VertexId>>> {
    (0..ROWS as VertexId)
        .map(|v| current_list(index, v))
        .collect()
}

struct Twins {
    _tmp: tempfile::TempDir,
    whole: Index,
    sliced: Index,
    /// A third copy, for looking ahead.
    probe: Index,
    /// The repairs the consolidations handed out.
    tasks: Vec<VertexId>,
    locks: LocalLocks,
}

/// One build with a third of its rows deleted, copied; every copy consolidates handing all
/// its repairs out (the same ones).
fn twins() -> Twins {
    let rows = synthetic_clustered(ROWS, DIM, 12, 5);
    let tmp = tempfile::tempdir().unwrap();
    let (a, b, c) = (
        tmp.path().join("whole"),
        tmp.path().join("sliced"),
        tmp.path().join("probe"),
    );
    let tids: Vec<HeapTid> = (0..ROWS).map(tid).collect();
    build_index(
        &a,
        &rows,
        &tids,
        &small_degree_params(),
        &|_, _, _| {},
        &|| false,
    )
    .unwrap();
    copy_dir(&a, &b);
    copy_dir(&a, &c);
    let locks = LocalLocks::new(64);
    let (whole, sliced, probe) = (open(&a, &locks), open(&b, &locks), open(&c, &locks));
    let mut handed: Vec<Vec<VertexId>> = Vec::new();
    for index in [&whole, &sliced, &probe] {
        index.bulk_delete(|t| dead(row_of(t)), &|| false).unwrap();
        let sink = Collect::default();
        index
            .consolidate_handing_out(&locks, &|| false, &sink)
            .unwrap();
        handed.push(sink.0.into_inner());
    }
    assert!(
        handed.windows(2).all(|w| w[0] == w[1]),
        "the same consolidation hands out the same repairs"
    );
    let tasks = handed.pop().unwrap();
    assert!(tasks.len() > ROWS / 3, "{} repairs", tasks.len());
    Twins {
        _tmp: tmp,
        whole,
        sliced,
        probe,
        tasks,
        locks,
    }
}

/// Runs `repair` to its commit, stopping after every step; the kinds of the steps it ran.
fn run_stopping_at_every_step(
    index: &Index,
    repair: &mut SlicedRepair,
    locks: &LocalLocks,
) -> Vec<StepKind> {
    let mut kinds = Vec::new();
    loop {
        let mut first = true;
        let done = repair
            .advance(index, locks, &mut |kind| {
                if std::mem::replace(&mut first, false) {
                    kinds.push(kind);
                    true
                } else {
                    false
                }
            })
            .unwrap();
        if let Some(report) = done {
            assert_eq!(report.done + report.dropped, 1);
            return kinds;
        }
    }
}

#[test]
fn repairs_stopped_after_every_step_leave_the_lists_of_whole_repairs() {
    let t = twins();
    let whole = t.whole.run_repairs(&t.locks, &t.tasks).unwrap();
    assert_eq!(whole.done as usize, t.tasks.len());
    let mut kinds: Vec<StepKind> = Vec::new();
    for &u in &t.tasks {
        let mut repair = SlicedRepair::new(&t.sliced, u);
        kinds.extend(run_stopping_at_every_step(&t.sliced, &mut repair, &t.locks));
    }
    let count = |k: StepKind| kinds.iter().filter(|&&x| x == k).count();
    // Each repair read its list and its doomed neighbours', one step each, and committed;
    // pools over the degree were pruned in slices.
    assert!(count(StepKind::Read) > 2 * t.tasks.len(), "{kinds:?}");
    assert_eq!(count(StepKind::Commit), t.tasks.len());
    assert!(count(StepKind::RepairPool) > t.tasks.len() / 2);
    assert!(
        count(StepKind::PruneSlice) > t.tasks.len(),
        "{} slices",
        count(StepKind::PruneSlice)
    );
    assert_eq!(all_lists(&t.sliced), all_lists(&t.whole));
    let v = t.sliced.verify().unwrap();
    assert_eq!(v.problem_count, 0, "{:?}", v.problems);
    assert_eq!(v.dangling_edges, 0);
    eprintln!(
        "{} repairs, {} steps ({} reads, {} prune slices)",
        t.tasks.len(),
        kinds.len(),
        count(StepKind::Read),
        count(StepKind::PruneSlice)
    );
}

#[test]
fn a_vertex_deleted_between_the_prune_and_the_commit_is_left_out() {
    let t = twins();
    // The first repair whose list comes out of a prune and keeps a vertex that came from a
    // doomed neighbour's list (not from its own: deleting one of those would change which of
    // its neighbours are doomed, which the commit also checks).
    let (u, victim, mut repair) = t
        .tasks
        .iter()
        .find_map(|&u| {
            let current = all_lists(&t.sliced)[u as usize].clone().unwrap();
            let mut repair = SlicedRepair::new(&t.sliced, u);
            let mut pruned = false;
            // every step up to (not including) the commit
            let done = repair
                .advance(&t.sliced, &t.locks, &mut |kind| {
                    pruned |= kind == StepKind::PruneSlice;
                    kind != StepKind::Commit
                })
                .unwrap();
            assert!(done.is_none(), "stopped before its commit");
            // What the repair computed: the whole repair's list, on the probe copy.
            t.probe.run_repairs(&t.locks, &[u]).unwrap();
            let computed = all_lists(&t.probe)[u as usize].clone().unwrap();
            let victim = computed.into_iter().find(|w| !current.contains(w))?;
            pruned.then_some((u, victim, repair))
        })
        .expect("a pruned repair that keeps a neighbour's neighbour");
    for index in [&t.whole, &t.sliced] {
        index
            .bulk_delete(|tid| row_of(tid) == victim as usize, &|| false)
            .unwrap();
    }
    let report = repair
        .advance(&t.sliced, &t.locks, &mut |_| true)
        .unwrap()
        .expect("committed");
    assert_eq!(report.lists_written, 1);
    let written = all_lists(&t.sliced)[u as usize].clone().unwrap();
    assert!(
        !written.contains(&victim),
        "the stale list was written: {written:?} keeps {victim}"
    );
    // It equals a whole repair run now.
    t.whole.run_repairs(&t.locks, &[u]).unwrap();
    assert_eq!(Some(written), all_lists(&t.whole)[u as usize]);
}

#[test]
fn a_commit_that_finds_the_stripe_taken_declines_then_commits() {
    let t = twins();
    let u = t.tasks[0];
    let stripe = t.locks.stripe_of(u);
    t.locks.lock_stripe(stripe);
    let mut repair = SlicedRepair::new(&t.sliced, u);
    for _ in 1..COMMIT_TRIES {
        assert!(repair
            .advance(&t.sliced, &t.locks, &mut |_| true)
            .unwrap()
            .is_none());
    }
    t.locks.unlock_stripe(stripe);
    let report = repair
        .advance(&t.sliced, &t.locks, &mut |_| true)
        .unwrap()
        .expect("committed");
    assert_eq!(report.done, 1);
    t.whole.run_repairs(&t.locks, &[u]).unwrap();
    assert_eq!(
        all_lists(&t.sliced)[u as usize],
        all_lists(&t.whole)[u as usize]
    );
    for s in 0..t.locks.stripe_count() {
        assert!(t.locks.try_lock_stripe(s), "stripe {s} left held");
        t.locks.unlock_stripe(s);
    }
}
