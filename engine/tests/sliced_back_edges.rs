//! Back-edge tasks run a slice at a time (LIOS in search stalls, RFC 0004 §2, issue 18): a
//! group stopped after every step and resumed must leave every list exactly as the same
//! tasks run whole leave it, re-prunes included; a list that changes between a group's read
//! and its commit is extended as it is at the commit; a group given up on hands its tasks
//! back untouched.

mod lios_common;
use lios_common::{copy_dir, current_list, open, small_degree_params, tid};

use navis_engine::dataset::synthetic_clustered;
use navis_engine::index::{build_index, Index};
use navis_engine::lios::{QueueHeader, QueueSink, Task, TaskKind, TaskQueue, TaskSlot};
use navis_engine::storage::state::Counter;
use navis_engine::storage::HeapTid;
use navis_engine::update::sliced::COMMIT_TRIES;
use navis_engine::update::{BackEdge, InsertParams, LocalLocks, SlicedBackEdges, WriteLocks};
use navis_engine::VertexId;

const DIM: usize = 24;
const BASE: usize = 600;
const INSERTED: usize = 300;
const TAG: u64 = 7;

fn list_of(index: &Index, v: VertexId) -> Vec<VertexId> {
    current_list(index, v).expect("published")
}

fn all_lists(index: &Index, n: usize) -> Vec<Vec<VertexId>> {
    (0..n as VertexId).map(|v| list_of(index, v)).collect()
}

struct Twins {
    _tmp: tempfile::TempDir,
    whole: Index,
    sliced: Index,
    /// The back-edges the deferring inserts left, the same on both.
    tasks: Vec<BackEdge>,
    locks: LocalLocks,
}

/// One build, copied; the same deferring inserts into both copies; their queued tasks.
fn twins() -> Twins {
    let rows = synthetic_clustered(BASE + INSERTED, DIM, 12, 3);
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("whole"), tmp.path().join("sliced"));
    let tids: Vec<HeapTid> = (0..BASE).map(tid).collect();
    build_index(
        &a,
        &rows[..BASE * DIM],
        &tids,
        &small_degree_params(),
        &|_, _, _| {},
        &|| false,
    )
    .unwrap();
    copy_dir(&a, &b);
    let locks = LocalLocks::new(64);
    let (whole, sliced) = (open(&a, &locks), open(&b, &locks));
    let mut task_lists: Vec<Vec<BackEdge>> = Vec::new();
    for index in [&whole, &sliced] {
        let header = QueueHeader::new();
        let slots: Vec<TaskSlot> = (0..INSERTED * 64).map(|_| TaskSlot::new()).collect();
        let queue = TaskQueue::new(&header, &slots);
        queue.reset();
        let sink = QueueSink {
            queue: &queue,
            tag: TAG,
        };
        let mut reader = index.reader().unwrap();
        for row in BASE..BASE + INSERTED {
            let v = &rows[row * DIM..(row + 1) * DIM];
            index
                .insert_deferring(
                    &mut reader,
                    &locks,
                    v,
                    tid(row),
                    InsertParams::default(),
                    &sink,
                )
                .unwrap();
        }
        let mut tasks = Vec::new();
        while let Some(Task { kind, vertex, .. }) = queue.pop() {
            let TaskKind::BackEdge { to } = kind else {
                panic!("only back-edges are queued here");
            };
            tasks.push(BackEdge { vertex, to });
        }
        task_lists.push(tasks);
    }
    assert_eq!(
        task_lists[0], task_lists[1],
        "the same inserts queue the same tasks"
    );
    let tasks = task_lists.pop().unwrap();
    assert!(tasks.len() > INSERTED * 3, "{} tasks", tasks.len());
    Twins {
        _tmp: tmp,
        whole,
        sliced,
        tasks,
        locks,
    }
}

/// Runs `group` to its commit, stopping it after every step; returns how many times it
/// stopped.
fn run_stopping_at_every_step(
    index: &Index,
    group: &mut SlicedBackEdges,
    locks: &LocalLocks,
) -> usize {
    let mut stops = 0;
    loop {
        let mut first = true;
        match group
            .advance(index, locks, &mut |_| std::mem::replace(&mut first, false))
            .unwrap()
        {
            Some(report) => {
                assert_eq!(
                    report.done + report.dropped,
                    group.len() as u64,
                    "{report:?}"
                );
                return stops;
            }
            None => stops += 1,
        }
    }
}

#[test]
fn sliced_groups_leave_every_list_as_whole_groups_do() {
    let t = twins();
    let per_group = SlicedBackEdges::max_tasks(&t.sliced);
    let (mut stops, mut pruned) = (0, 0);
    for chunk in t.tasks.chunks(per_group) {
        let whole = t.whole.run_back_edges(&t.locks, chunk).unwrap();
        pruned += whole.pruned;
        let mut group = SlicedBackEdges::new(&t.sliced, chunk.to_vec());
        stops += run_stopping_at_every_step(&t.sliced, &mut group, &t.locks);
        assert!(
            group.into_tasks().is_empty(),
            "a committed group has no tasks to give back"
        );
    }
    // Enough re-prunes, each stopped every PRUNE_SLICE distances, for the test to mean
    // something: the resumed prunes must give what uninterrupted ones gave.
    assert!(pruned > 100, "{pruned} re-prunes");
    assert!(
        stops > 2 * t.tasks.len(),
        "{stops} stops for {} tasks",
        t.tasks.len()
    );
    let n = BASE + INSERTED;
    assert_eq!(all_lists(&t.sliced, n), all_lists(&t.whole, n));
    let v = t.sliced.verify().unwrap();
    assert!(v.problem_count == 0 && v.dangling_edges == 0, "{v:?}");
    eprintln!(
        "{} tasks in groups of {per_group}: {pruned} re-prunes, {stops} stops",
        t.tasks.len()
    );
}

#[test]
fn a_list_changed_between_read_and_commit_is_extended_as_it_is_then() {
    let t = twins();
    let per_group = SlicedBackEdges::max_tasks(&t.sliced);
    let (group_tasks, _) = t.tasks.split_at(per_group);
    // Another writer's task for the group's first vertex, to a vertex neither its list nor
    // the group links it to.
    let u = group_tasks[0].vertex;
    let current = list_of(&t.sliced, u);
    let w = (0..(BASE + INSERTED) as VertexId)
        .find(|&w| w != u && !current.contains(&w) && !group_tasks.iter().any(|g| g.to == w))
        .unwrap();
    let other = BackEdge { vertex: u, to: w };

    // Whole: the other writer first, then the group.
    t.whole.run_back_edges(&t.locks, &[other]).unwrap();
    t.whole.run_back_edges(&t.locks, group_tasks).unwrap();

    // Sliced: the group reads u's list (its first step), the other writer commits, then the
    // group extends what it read and commits.
    let mut group = SlicedBackEdges::new(&t.sliced, group_tasks.to_vec());
    let mut first = true;
    assert!(group
        .advance(&t.sliced, &t.locks, &mut |_| std::mem::replace(
            &mut first, false
        ))
        .unwrap()
        .is_none());
    t.sliced.run_back_edges(&t.locks, &[other]).unwrap();
    assert!(group
        .advance(&t.sliced, &t.locks, &mut |_| true)
        .unwrap()
        .is_some());

    let n = BASE + INSERTED;
    assert_eq!(all_lists(&t.sliced, n), all_lists(&t.whole, n));
}

#[test]
fn every_task_of_a_group_is_counted_once_repeats_and_stale_ones_included() {
    let t = twins();
    let per_group = SlicedBackEdges::max_tasks(&t.sliced);
    let mut tasks = t.tasks[..per_group - 2].to_vec();
    tasks.push(tasks[0]); // a repeat
    tasks.push(BackEdge {
        vertex: tasks[1].vertex,
        to: tasks[1].vertex, // a self-edge: dropped
    });
    let mut group = SlicedBackEdges::new(&t.sliced, tasks.clone());
    let report = group
        .advance(&t.sliced, &t.locks, &mut |_| true)
        .unwrap()
        .unwrap();
    assert_eq!(report.dropped, 1, "{report:?}");
    assert_eq!(report.done, tasks.len() as u64 - 1, "{report:?}");
    let whole = t.whole.run_back_edges(&t.locks, &tasks).unwrap();
    assert_eq!((whole.done, whole.dropped), (report.done, report.dropped));
}

#[test]
fn a_commit_that_finds_a_stripe_taken_tries_again_later_and_then_waits() {
    let t = twins();
    let per_group = SlicedBackEdges::max_tasks(&t.sliced);
    let chunk = t.tasks[..per_group].to_vec();
    let stripe = t.locks.stripe_of(chunk[0].vertex);
    t.locks.lock_stripe(stripe);
    let mut group = SlicedBackEdges::new(&t.sliced, chunk.clone());
    // Every step but the commit runs; the commit declines while the stripe is held.
    for _ in 1..COMMIT_TRIES {
        assert!(group
            .advance(&t.sliced, &t.locks, &mut |_| true)
            .unwrap()
            .is_none());
    }
    assert!(!group.is_empty());
    // Released: the next try commits, as whole groups would.
    t.locks.unlock_stripe(stripe);
    assert!(group
        .advance(&t.sliced, &t.locks, &mut |_| true)
        .unwrap()
        .is_some());
    t.whole.run_back_edges(&t.locks, &chunk).unwrap();
    let n = BASE + INSERTED;
    assert_eq!(all_lists(&t.sliced, n), all_lists(&t.whole, n));
    // No stripe is left held by the declined tries.
    for s in 0..t.locks.stripe_count() {
        assert!(t.locks.try_lock_stripe(s), "stripe {s} left held");
        t.locks.unlock_stripe(s);
    }
}

#[test]
fn a_group_given_up_on_hands_back_its_tasks_and_writes_nothing() {
    let t = twins();
    let per_group = SlicedBackEdges::max_tasks(&t.sliced);
    let before = all_lists(&t.sliced, BASE + INSERTED);
    let written = t.sliced.files().state().counter(Counter::EdgePagesWritten);
    let chunk = t.tasks[..per_group].to_vec();
    let mut group = SlicedBackEdges::new(&t.sliced, chunk.clone());
    let mut calls = 0;
    assert!(group
        .advance(&t.sliced, &t.locks, &mut |_| {
            calls += 1;
            calls <= per_group
        })
        .unwrap()
        .is_none());
    assert_eq!(group.into_tasks(), chunk);
    assert_eq!(all_lists(&t.sliced, BASE + INSERTED), before);
    assert_eq!(
        t.sliced.files().state().counter(Counter::EdgePagesWritten),
        written
    );
}
