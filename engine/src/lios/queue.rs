//! The bounded queue of deferred update tasks (RFC 0004 §2), in memory every backend maps.
//!
//! An insert publishes its own vertex at once and leaves the back-edges of its other
//! neighbours as tasks; VACUUM leaves its list repairs the same way. Searches take tasks and
//! run them in their I/O stalls, a background worker drains what is left. The queue is FIFO
//! and bounded: an insert that finds it full runs its task itself, which keeps memory fixed
//! and slows inserts down only when the searches cannot keep up.
//!
//! Tasks are not durable: a crash loses them, and what they would have added is a back-edge
//! that VACUUM's reconnect restores. So the queue needs no WAL, only a lock that works across
//! processes ([`SpinLock`]): every critical section is a few loads and stores.

use crate::cache::spin::SpinLock;
use crate::update::{BackEdge, BackEdgeSink, RepairSink};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

/// What a task does to the list of `vertex`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaskKind {
    /// Add the back-edge `vertex -> to` (pruning the list if it is full).
    BackEdge { to: u32 },
    /// Drop deleted neighbours from the list and re-prune it (VACUUM's consolidation).
    Repair,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Task {
    /// The index's cache tag: a task of a dropped or rebuilt index is stale.
    pub tag: u64,
    pub vertex: u32,
    pub kind: TaskKind,
}

/// `arg` of a repair task (a back-edge's `to` is a vertex id, never this).
const REPAIR: u32 = u32::MAX;

/// The queue's shared header.
#[repr(C)]
pub struct QueueHeader {
    lock: SpinLock,
    /// Slots in use at `head..tail` (monotonic counters; slot = counter % capacity).
    head: AtomicU64,
    tail: AtomicU64,
}

/// One task as stored: tag 0 marks a slot whose task was forgotten.
#[repr(C)]
pub struct TaskSlot {
    tag: AtomicU64,
    vertex: AtomicU32,
    arg: AtomicU32,
}

impl TaskSlot {
    pub fn new() -> Self {
        TaskSlot {
            tag: AtomicU64::new(0),
            vertex: AtomicU32::new(0),
            arg: AtomicU32::new(0),
        }
    }
}

impl TaskSlot {
    /// The task stored here (under the queue lock), as the index tagged `tag`'s.
    fn task(&self, tag: u64) -> Task {
        let arg = self.arg.load(Relaxed);
        Task {
            tag,
            vertex: self.vertex.load(Relaxed),
            kind: if arg == REPAIR {
                TaskKind::Repair
            } else {
                TaskKind::BackEdge { to: arg }
            },
        }
    }
}

impl Default for TaskSlot {
    fn default() -> Self {
        Self::new()
    }
}

impl QueueHeader {
    pub fn new() -> Self {
        QueueHeader {
            lock: SpinLock::default(),
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
        }
    }
}

impl Default for QueueHeader {
    fn default() -> Self {
        Self::new()
    }
}

/// A view of a queue: its header and its slots, wherever they live.
pub struct TaskQueue<'a> {
    header: &'a QueueHeader,
    slots: &'a [TaskSlot],
}

impl<'a> TaskQueue<'a> {
    /// A queue over `slots` (at least one). Memory that may hold garbage must be `reset`.
    pub fn new(header: &'a QueueHeader, slots: &'a [TaskSlot]) -> Self {
        assert!(!slots.is_empty(), "a task queue needs a slot");
        TaskQueue { header, slots }
    }

    /// Empties the queue (at shared-memory initialisation, or after a crash re-created it).
    pub fn reset(&self) {
        self.header.lock.init();
        let _g = self.header.lock.lock();
        self.header.head.store(0, Relaxed);
        self.header.tail.store(0, Relaxed);
    }

    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Slots in use: the tasks queued, and any slot a search emptied behind the oldest task
    /// (until the head passes over it or a forget moves the tasks up).
    pub fn len(&self) -> usize {
        let _g = self.header.lock.lock();
        (self.header.tail.load(Relaxed) - self.header.head.load(Relaxed)) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn slot(&self, seq: u64) -> &TaskSlot {
        &self.slots[(seq % self.slots.len() as u64) as usize]
    }

    /// Queues `task`, or hands it back when the queue is full (the caller runs it).
    pub fn push(&self, task: Task) -> Result<(), Task> {
        debug_assert!(task.tag != 0, "tag 0 marks a forgotten task");
        let arg = match task.kind {
            TaskKind::BackEdge { to } => {
                debug_assert!(to != REPAIR);
                to
            }
            TaskKind::Repair => REPAIR,
        };
        let _g = self.header.lock.lock();
        let (head, tail) = (
            self.header.head.load(Relaxed),
            self.header.tail.load(Relaxed),
        );
        if tail - head >= self.slots.len() as u64 {
            return Err(task);
        }
        let s = self.slot(tail);
        s.tag.store(task.tag, Relaxed);
        s.vertex.store(task.vertex, Relaxed);
        s.arg.store(arg, Relaxed);
        self.header.tail.store(tail + 1, Relaxed);
        Ok(())
    }

    /// The oldest task, passing over forgotten ones.
    pub fn pop(&self) -> Option<Task> {
        let _g = self.header.lock.lock();
        loop {
            let (head, tail) = (
                self.header.head.load(Relaxed),
                self.header.tail.load(Relaxed),
            );
            if head == tail {
                return None;
            }
            let s = self.slot(head);
            self.header.head.store(head + 1, Relaxed);
            let tag = s.tag.load(Relaxed);
            if tag == 0 {
                continue;
            }
            return Some(s.task(tag));
        }
    }

    /// Takes up to `max` of the oldest tasks of the index tagged `tag` among the first `scan`
    /// queued (a search runs only its own index's tasks: it has that index open and bound).
    /// Tasks of other indexes stay where they are.
    pub fn pop_for(&self, tag: u64, max: usize, scan: usize, out: &mut Vec<Task>) {
        self.pop_matching(tag, max, scan, out, |_| true);
    }

    /// As [`Self::pop_for`], of the tasks that are repairs (`repairs`) or back-edges (not):
    /// a search takes a group of back-edges, or one repair.
    pub fn pop_kind(&self, tag: u64, repairs: bool, max: usize, scan: usize, out: &mut Vec<Task>) {
        self.pop_matching(tag, max, scan, out, |arg| (arg == REPAIR) == repairs);
    }

    fn pop_matching(
        &self,
        tag: u64,
        max: usize,
        scan: usize,
        out: &mut Vec<Task>,
        takes: impl Fn(u32) -> bool,
    ) {
        let _g = self.header.lock.lock();
        let (head, tail) = (
            self.header.head.load(Relaxed),
            self.header.tail.load(Relaxed),
        );
        let mut taken = 0;
        for seq in head..tail.min(head + scan as u64) {
            if taken == max {
                break;
            }
            let s = self.slot(seq);
            if s.tag.load(Relaxed) != tag || !takes(s.arg.load(Relaxed)) {
                continue;
            }
            out.push(s.task(tag));
            s.tag.store(0, Relaxed);
            taken += 1;
        }
        // Slots emptied at the head are free again.
        let mut head = head;
        while head < tail && self.slot(head).tag.load(Relaxed) == 0 {
            head += 1;
        }
        self.header.head.store(head, Relaxed);
    }

    /// Whether any task of the index tagged `tag` is queued (a worker's last look before it
    /// exits; scans the whole queue).
    pub fn holds(&self, tag: u64) -> bool {
        let _g = self.header.lock.lock();
        let (head, tail) = (
            self.header.head.load(Relaxed),
            self.header.tail.load(Relaxed),
        );
        (head..tail).any(|seq| self.slot(seq).tag.load(Relaxed) == tag)
    }

    /// Forgets every queued task of the index tagged `tag` (DROP, REINDEX, TRUNCATE, or a
    /// rebuild: its vertex ids mean nothing any more). Returns how many. The tasks left move
    /// up, in order, over the forgotten ones and any slot emptied before: a forgotten index
    /// may have filled the queue, and its slots are free at once (rare, so one pass over the
    /// queue under the lock is affordable).
    pub fn forget(&self, tag: u64) -> usize {
        let _g = self.header.lock.lock();
        let (head, tail) = (
            self.header.head.load(Relaxed),
            self.header.tail.load(Relaxed),
        );
        let mut forgotten = 0;
        let mut kept = head;
        for seq in head..tail {
            let from = self.slot(seq);
            let slot_tag = from.tag.load(Relaxed);
            forgotten += usize::from(slot_tag == tag);
            if slot_tag == 0 || slot_tag == tag {
                continue;
            }
            if kept != seq {
                let to = self.slot(kept);
                to.tag.store(slot_tag, Relaxed);
                to.vertex.store(from.vertex.load(Relaxed), Relaxed);
                to.arg.store(from.arg.load(Relaxed), Relaxed);
            }
            kept += 1;
        }
        self.header.tail.store(kept, Relaxed);
        forgotten
    }
}

/// One index's view of a queue as the place its inserts leave back-edges.
pub struct QueueSink<'q, 'a> {
    pub queue: &'q TaskQueue<'a>,
    pub tag: u64,
}

impl RepairSink for QueueSink<'_, '_> {
    fn defer(&self, vertex: u32) -> bool {
        let task = Task {
            tag: self.tag,
            vertex,
            kind: TaskKind::Repair,
        };
        self.queue.push(task).is_ok()
    }
}

impl BackEdgeSink for QueueSink<'_, '_> {
    fn defer(&self, edge: BackEdge) -> bool {
        let task = Task {
            tag: self.tag,
            vertex: edge.vertex,
            kind: TaskKind::BackEdge { to: edge.to },
        };
        self.queue.push(task).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn back_edge(tag: u64, vertex: u32, to: u32) -> Task {
        Task {
            tag,
            vertex,
            kind: TaskKind::BackEdge { to },
        }
    }

    fn slots(n: usize) -> Vec<TaskSlot> {
        (0..n).map(|_| TaskSlot::new()).collect()
    }

    #[test]
    fn tasks_come_out_in_order_and_a_full_queue_hands_the_task_back() {
        let (h, s) = (QueueHeader::new(), slots(4));
        let q = TaskQueue::new(&h, &s);
        q.reset();
        assert_eq!(q.pop(), None);
        for round in 0..3u32 {
            // Wrap around the ring several times.
            for i in 0..4 {
                q.push(back_edge(7, round * 10 + i, i)).unwrap();
            }
            let extra = Task {
                tag: 7,
                vertex: 99,
                kind: TaskKind::Repair,
            };
            assert_eq!(q.push(extra), Err(extra), "full");
            assert_eq!(q.len(), 4);
            for i in 0..4 {
                assert_eq!(q.pop(), Some(back_edge(7, round * 10 + i, i)));
            }
            assert!(q.is_empty());
        }
        q.push(Task {
            tag: 8,
            vertex: 1,
            kind: TaskKind::Repair,
        })
        .unwrap();
        assert_eq!(q.pop().unwrap().kind, TaskKind::Repair);
    }

    #[test]
    fn pop_kind_takes_one_kind_of_one_index_and_leaves_the_rest_in_order() {
        let (h, s) = (QueueHeader::new(), slots(8));
        let q = TaskQueue::new(&h, &s);
        let repair = |tag, vertex| Task {
            tag,
            vertex,
            kind: TaskKind::Repair,
        };
        q.push(repair(1, 10)).unwrap();
        q.push(back_edge(1, 11, 5)).unwrap();
        q.push(back_edge(2, 12, 5)).unwrap();
        q.push(repair(1, 13)).unwrap();
        q.push(back_edge(1, 14, 6)).unwrap();
        let mut out = Vec::new();
        q.pop_kind(1, false, 8, 8, &mut out);
        assert_eq!(out, vec![back_edge(1, 11, 5), back_edge(1, 14, 6)]);
        out.clear();
        q.pop_kind(1, true, 1, 8, &mut out);
        assert_eq!(out, vec![repair(1, 10)]);
        assert_eq!(q.pop(), Some(back_edge(2, 12, 5)));
        assert_eq!(q.pop(), Some(repair(1, 13)));
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn a_dropped_index_loses_its_tasks_and_no_other() {
        let (h, s) = (QueueHeader::new(), slots(8));
        let q = TaskQueue::new(&h, &s);
        for i in 0..6 {
            q.push(back_edge(if i % 2 == 0 { 1 } else { 2 }, i, 100 + i))
                .unwrap();
        }
        assert!(q.holds(1) && q.holds(2) && !q.holds(3));
        assert_eq!(q.forget(1), 3);
        assert!(!q.holds(1) && q.holds(2));
        assert_eq!(q.len(), 3, "the forgotten slots are free at once");
        let left: Vec<Task> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(
            left,
            vec![
                back_edge(2, 1, 101),
                back_edge(2, 3, 103),
                back_edge(2, 5, 105)
            ]
        );
        assert!(q.is_empty());
    }

    #[test]
    fn forgetting_frees_slots_anywhere_and_keeps_the_order() {
        let (h, s) = (QueueHeader::new(), slots(8));
        let q = TaskQueue::new(&h, &s);
        // wrap around the ring first
        for i in 0..5 {
            q.push(back_edge(3, i, 1)).unwrap();
        }
        for _ in 0..5 {
            q.pop().unwrap();
        }
        // 8 queued: index 1 at the head, 2 and 1 mixed, a hole left by a search of index 3
        for (tag, vertex) in [
            (1, 0),
            (1, 1),
            (2, 2),
            (3, 3),
            (1, 4),
            (2, 5),
            (1, 6),
            (2, 7),
        ] {
            q.push(back_edge(tag, vertex, 9)).unwrap();
        }
        let mut taken = Vec::new();
        q.pop_for(3, 1, 8, &mut taken);
        assert_eq!(taken, vec![back_edge(3, 3, 9)]);
        assert_eq!(q.len(), 8, "a hole in the middle stays counted");
        assert!(q.push(back_edge(2, 8, 9)).is_err(), "full");
        assert_eq!(q.forget(1), 4);
        assert_eq!(q.len(), 3);
        for vertex in 8..13 {
            q.push(back_edge(2, vertex, 9)).unwrap();
        }
        assert!(q.push(back_edge(2, 13, 9)).is_err(), "full again at 8");
        let left: Vec<u32> = std::iter::from_fn(|| q.pop()).map(|t| t.vertex).collect();
        assert_eq!(left, vec![2, 5, 7, 8, 9, 10, 11, 12]);
    }

    #[test]
    fn concurrent_producers_and_consumers_run_every_task_exactly_once() {
        let (h, s) = (QueueHeader::new(), slots(16));
        let q = TaskQueue::new(&h, &s);
        let ran: Vec<HashMap<Task, u32>> = std::thread::scope(|scope| {
            let producers: Vec<_> = (0..3u64)
                .map(|p| {
                    let q = &q;
                    scope.spawn(move || {
                        let mut inline = HashMap::new();
                        for i in 0..5_000u32 {
                            // A full queue: the producer runs the task itself, as an insert does.
                            if let Err(t) = q.push(back_edge(p + 1, i, i + 1)) {
                                *inline.entry(t).or_insert(0) += 1;
                            }
                        }
                        inline
                    })
                })
                .collect();
            let consumers: Vec<_> = (0..2)
                .map(|_| {
                    let q = &q;
                    scope.spawn(move || {
                        let mut ran = HashMap::new();
                        let mut idle = 0;
                        while idle < 1_000_000 {
                            match q.pop() {
                                Some(t) => {
                                    *ran.entry(t).or_insert(0) += 1;
                                    idle = 0;
                                }
                                None => idle += 1,
                            }
                        }
                        ran
                    })
                })
                .collect();
            producers
                .into_iter()
                .chain(consumers)
                .map(|h| h.join().unwrap())
                .collect()
        });
        let mut total: HashMap<Task, u32> = HashMap::new();
        for m in ran {
            for (t, n) in m {
                *total.entry(t).or_insert(0) += n;
            }
        }
        let leftover: Vec<Task> = std::iter::from_fn(|| q.pop()).collect();
        for t in leftover {
            *total.entry(t).or_insert(0) += 1;
        }
        assert_eq!(total.len(), 15_000, "every task ran");
        assert!(total.values().all(|&n| n == 1), "no task ran twice");
    }

    #[test]
    fn a_search_takes_only_its_own_index_tasks_and_the_head_moves_past_them() {
        let (h, s) = (QueueHeader::new(), slots(8));
        let q = TaskQueue::new(&h, &s);
        q.reset();
        for (i, tag) in [1, 2, 1, 1, 2, 1].into_iter().enumerate() {
            q.push(back_edge(tag, i as u32, 0)).unwrap();
        }
        let mut out = Vec::new();
        q.pop_for(1, 2, 8, &mut out);
        assert_eq!(out.iter().map(|t| t.vertex).collect::<Vec<_>>(), vec![0, 2]);
        // Slot 0 was taken, slot 1 (tag 2) still holds the head.
        assert_eq!(q.len(), 5);
        out.clear();
        q.pop_for(1, 10, 3, &mut out);
        assert_eq!(
            out.iter().map(|t| t.vertex).collect::<Vec<_>>(),
            vec![3],
            "scan limit"
        );
        out.clear();
        q.pop_for(2, 10, 8, &mut out);
        assert_eq!(out.iter().map(|t| t.vertex).collect::<Vec<_>>(), vec![1, 4]);
        // Only tag 1's last task is left, and the head moved up to it.
        assert_eq!(q.len(), 1);
        assert_eq!(q.pop(), Some(back_edge(1, 5, 0)));
        assert!(q.is_empty());
    }
}
