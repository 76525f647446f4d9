//! What the background workers that drain the task queue share (RFC 0004 §2): which indexes
//! have tasks queued and in which database, one worker slot per database, and when a search
//! last ran.
//!
//! A PostgreSQL background worker connects to one database for its whole life, and a task only
//! names its index by cache tag (a hash). So an insert that queues a task notes its index here
//! (tag, database, relation), and starts a worker for its database when none serves it; the
//! worker opens the indexes of its database noted here and runs their tasks while no search
//! runs. Everything is atomics in memory every backend maps, read without a lock on the insert
//! path; changes take one [`SpinLock`] and are a few stores.

use crate::cache::spin::SpinLock;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};

/// Indexes the directory remembers (more with tasks queued at once run only in searches,
/// inserts and VACUUM).
pub const DIRECTORY_SIZE: usize = 64;
/// Retired tags remembered (the most recent ones).
pub const RETIRED_SIZE: usize = 16;
/// Databases served by a worker at once.
pub const WORKER_SLOTS: usize = 8;
/// A worker slot claimed for a launch that has not started for this long may be claimed
/// again (the launch failed, or the worker died before it said so).
pub const LAUNCH_PATIENCE_US: i64 = 10_000_000;
/// A running worker that has not beaten its heartbeat for this long is presumed gone.
pub const HEARTBEAT_PATIENCE_US: i64 = 30_000_000;

/// An index with tasks queued, as a worker needs it to open the index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexRef {
    /// The index's cache tag, as its tasks carry it.
    pub tag: u64,
    pub database: u32,
    pub relation: u32,
}

#[repr(C)]
struct DirectoryEntry {
    /// 0: empty; otherwise the index's tag (written last, under the lock).
    tag: AtomicU64,
    database: AtomicU32,
    relation: AtomicU32,
}

const FREE: u32 = 0;
const STARTING: u32 = 1;
const RUNNING: u32 = 2;

#[repr(C)]
struct WorkerSlot {
    database: AtomicU32,
    state: AtomicU32,
    /// Counts claims, so that a worker presumed gone cannot release or beat for its
    /// successor.
    generation: AtomicU32,
    /// When the slot was claimed (STARTING) or last beat its heartbeat (RUNNING), in the
    /// caller's microseconds.
    since_us: AtomicI64,
}

/// The shared block. Zeroed memory is a valid empty one.
#[repr(C)]
pub struct WorkerRegistry {
    lock: SpinLock,
    last_search_us: AtomicI64,
    indexes: [DirectoryEntry; DIRECTORY_SIZE],
    workers: [WorkerSlot; WORKER_SLOTS],
    /// Tags of builds no longer in use (an index dropped or rebuilt), a ring of the latest:
    /// tasks a backend held out of the queue while their build was retired are dropped, not
    /// queued again.
    retired: [AtomicU64; RETIRED_SIZE],
    retired_next: AtomicU32,
}

/// One claim of a worker slot: what a worker is started with, and shows to beat and release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket {
    pub database: u32,
    slot: u8,
    /// The slot's generation, 24 bits of it.
    generation: u32,
}

impl Ticket {
    /// The ticket as one 64-bit word (a background worker's argument).
    pub fn to_word(self) -> u64 {
        (u64::from(self.database) << 32) | (u64::from(self.generation) << 8) | u64::from(self.slot)
    }

    /// A ticket from [`Ticket::to_word`]; `None` for a word that cannot be one.
    pub fn from_word(word: u64) -> Option<Ticket> {
        let slot = (word & 0xff) as u8;
        (usize::from(slot) < WORKER_SLOTS).then_some(Ticket {
            database: (word >> 32) as u32,
            slot,
            generation: ((word >> 8) & 0xff_ffff) as u32,
        })
    }
}

/// What [`WorkerRegistry::note_insert`] asks of the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launch {
    /// A worker serves the database, or is starting.
    NotNeeded,
    /// The caller claimed a worker slot for the database and must start a worker with the
    /// ticket (or [`WorkerRegistry::release`] it if that fails).
    Start(Ticket),
    /// Every worker slot serves another database (searches, inserts and VACUUM still run
    /// the tasks).
    NoSlot,
}

impl WorkerRegistry {
    pub fn new() -> Self {
        WorkerRegistry {
            lock: SpinLock::default(),
            last_search_us: AtomicI64::new(0),
            indexes: std::array::from_fn(|_| DirectoryEntry {
                tag: AtomicU64::new(0),
                database: AtomicU32::new(0),
                relation: AtomicU32::new(0),
            }),
            workers: std::array::from_fn(|_| WorkerSlot {
                database: AtomicU32::new(0),
                state: AtomicU32::new(FREE),
                generation: AtomicU32::new(0),
                since_us: AtomicI64::new(0),
            }),
            retired: std::array::from_fn(|_| AtomicU64::new(0)),
            retired_next: AtomicU32::new(0),
        }
    }

    /// Whether any worker is starting or running (only then does a search's time matter).
    pub fn workers_active(&self) -> bool {
        self.workers
            .iter()
            .any(|w| w.state.load(Ordering::Relaxed) != FREE)
    }

    /// A search ran at `now_us` (stored only when it moves the mark by a millisecond, so
    /// that concurrent searches do not all write the same cache line).
    pub fn note_search(&self, now_us: i64) {
        if now_us - self.last_search_us.load(Ordering::Relaxed) >= 1_000 {
            self.last_search_us.store(now_us, Ordering::Relaxed);
        }
    }

    /// Whether no search ran in the `quiet_us` before `now_us`.
    pub fn searches_quiet(&self, now_us: i64, quiet_us: i64) -> bool {
        now_us - self.last_search_us.load(Ordering::Relaxed) >= quiet_us
    }

    /// An insert queued tasks of `index` at `now_us`: notes the index for the workers and,
    /// if `launch_allowed`, says whether the caller must start one for its database.
    pub fn note_insert(&self, index: IndexRef, now_us: i64, launch_allowed: bool) -> Launch {
        debug_assert!(index.tag != 0);
        if !self.knows(index.tag) {
            let _g = self.lock.lock();
            if !self.knows(index.tag) {
                if let Some(e) = self
                    .indexes
                    .iter()
                    .find(|e| e.tag.load(Ordering::Relaxed) == 0)
                {
                    e.database.store(index.database, Ordering::Relaxed);
                    e.relation.store(index.relation, Ordering::Relaxed);
                    e.tag.store(index.tag, Ordering::Release);
                }
            }
        }
        if !launch_allowed || self.served(index.database, now_us) {
            return Launch::NotNeeded;
        }
        let _g = self.lock.lock();
        if self.served(index.database, now_us) {
            return Launch::NotNeeded;
        }
        // The database's own stale slot first, so that one database never holds two.
        let slot = self
            .workers
            .iter()
            .position(|w| {
                w.state.load(Ordering::Relaxed) != FREE
                    && w.database.load(Ordering::Relaxed) == index.database
            })
            .or_else(|| {
                self.workers
                    .iter()
                    .position(|w| w.state.load(Ordering::Relaxed) == FREE)
            });
        let Some(slot) = slot else {
            return Launch::NoSlot;
        };
        let w = &self.workers[slot];
        let generation = w.generation.load(Ordering::Relaxed).wrapping_add(1) & 0xff_ffff;
        w.generation.store(generation, Ordering::Relaxed);
        w.database.store(index.database, Ordering::Relaxed);
        w.since_us.store(now_us, Ordering::Relaxed);
        w.state.store(STARTING, Ordering::Release);
        Launch::Start(Ticket {
            database: index.database,
            slot: slot as u8,
            generation,
        })
    }

    /// Whether `ticket` is the slot's current claim.
    fn holds(&self, ticket: Ticket) -> bool {
        let w = &self.workers[usize::from(ticket.slot)];
        w.state.load(Ordering::Relaxed) != FREE
            && w.generation.load(Ordering::Relaxed) == ticket.generation
            && w.database.load(Ordering::Relaxed) == ticket.database
    }

    fn knows(&self, tag: u64) -> bool {
        self.indexes
            .iter()
            .any(|e| e.tag.load(Ordering::Acquire) == tag)
    }

    /// Whether a live worker serves `database`, or one is starting.
    fn served(&self, database: u32, now_us: i64) -> bool {
        self.workers.iter().any(|w| {
            let state = w.state.load(Ordering::Acquire);
            let patience = match state {
                STARTING => LAUNCH_PATIENCE_US,
                RUNNING => HEARTBEAT_PATIENCE_US,
                _ => return false,
            };
            w.database.load(Ordering::Relaxed) == database
                && now_us - w.since_us.load(Ordering::Relaxed) < patience
        })
    }

    /// The worker started with `ticket` runs (or beats its heartbeat). `false`: the slot
    /// was claimed again meanwhile (this worker was presumed gone), so it must exit.
    pub fn beat(&self, ticket: Ticket, now_us: i64) -> bool {
        let _g = self.lock.lock();
        if !self.holds(ticket) {
            return false;
        }
        let w = &self.workers[usize::from(ticket.slot)];
        w.since_us.store(now_us, Ordering::Relaxed);
        w.state.store(RUNNING, Ordering::Release);
        true
    }

    /// Gives the ticket's slot up (its worker exits, or the launch failed), unless it was
    /// claimed again meanwhile.
    pub fn release(&self, ticket: Ticket) {
        let _g = self.lock.lock();
        if self.holds(ticket) {
            self.workers[usize::from(ticket.slot)]
                .state
                .store(FREE, Ordering::Release);
        }
    }

    /// The noted indexes of `database`.
    pub fn indexes_of(&self, database: u32) -> Vec<IndexRef> {
        let _g = self.lock.lock();
        self.indexes
            .iter()
            .filter_map(|e| {
                let tag = e.tag.load(Ordering::Relaxed);
                (tag != 0 && e.database.load(Ordering::Relaxed) == database).then(|| IndexRef {
                    tag,
                    database,
                    relation: e.relation.load(Ordering::Relaxed),
                })
            })
            .collect()
    }

    /// Forgets the index tagged `tag` (without tasks, or retired).
    pub fn forget(&self, tag: u64) {
        let _g = self.lock.lock();
        self.forget_locked(tag);
    }

    fn forget_locked(&self, tag: u64) {
        for e in &self.indexes {
            if e.tag.load(Ordering::Relaxed) == tag {
                e.tag.store(0, Ordering::Release);
            }
        }
    }

    /// The build tagged `tag` is gone (its index was dropped or rebuilt): forgets its entry
    /// and remembers the tag among the retired.
    pub fn retire(&self, tag: u64) {
        let _g = self.lock.lock();
        self.retire_locked(tag);
    }

    fn retire_locked(&self, tag: u64) {
        self.forget_locked(tag);
        if tag == 0 || self.is_retired(tag) {
            return;
        }
        let next = self.retired_next.fetch_add(1, Ordering::Relaxed) as usize % RETIRED_SIZE;
        self.retired[next].store(tag, Ordering::Release);
    }

    /// Index `relation` of `database` has a new build, tagged `current` (REINDEX, TRUNCATE
    /// and VACUUM FULL build anew under the same relation): retires every other tag noted
    /// for it and returns them, so that the caller drops their queued tasks.
    pub fn retire_superseded(&self, database: u32, relation: u32, current: u64) -> Vec<u64> {
        let _g = self.lock.lock();
        let superseded: Vec<u64> = self
            .indexes
            .iter()
            .filter(|e| {
                e.database.load(Ordering::Relaxed) == database
                    && e.relation.load(Ordering::Relaxed) == relation
            })
            .map(|e| e.tag.load(Ordering::Relaxed))
            .filter(|&tag| tag != 0 && tag != current)
            .collect();
        for &tag in &superseded {
            self.retire_locked(tag);
        }
        superseded
    }

    /// Whether the build tagged `tag` was retired (among the last [`RETIRED_SIZE`]).
    pub fn is_retired(&self, tag: u64) -> bool {
        tag != 0
            && self
                .retired
                .iter()
                .any(|t| t.load(Ordering::Acquire) == tag)
    }
}

impl Default for WorkerRegistry {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(tag: u64, database: u32) -> IndexRef {
        IndexRef {
            tag,
            database,
            relation: 16_000 + tag as u32,
        }
    }

    fn started(launch: Launch) -> Ticket {
        match launch {
            Launch::Start(ticket) => ticket,
            other => panic!("expected a launch, got {other:?}"),
        }
    }

    #[test]
    fn one_worker_per_database_until_it_exits() {
        let r = WorkerRegistry::new();
        assert!(!r.workers_active());
        let first = started(r.note_insert(index(7, 5), 0, true));
        assert_eq!(first.database, 5);
        assert!(r.workers_active(), "a starting worker counts");
        // starting: later inserts of the database and of its other indexes launch nothing
        assert_eq!(r.note_insert(index(7, 5), 10, true), Launch::NotNeeded);
        assert_eq!(r.note_insert(index(8, 5), 20, true), Launch::NotNeeded);
        // another database gets its own slot
        let other = started(r.note_insert(index(9, 6), 30, true));
        assert_ne!(other.slot, first.slot);
        assert!(r.beat(first, 40));
        assert_eq!(r.note_insert(index(7, 5), 50, true), Launch::NotNeeded);
        assert_eq!(r.indexes_of(5), vec![index(7, 5), index(8, 5)]);
        assert_eq!(r.indexes_of(6), vec![index(9, 6)]);
        r.release(first);
        assert!(!r.beat(first, 60), "a released ticket is void");
        r.release(other);
        assert!(!r.workers_active());
        let again = started(r.note_insert(index(7, 5), 70, true));
        assert_eq!(Ticket::from_word(again.to_word()), Some(again));
    }

    #[test]
    fn a_launch_that_never_started_or_a_silent_worker_is_replaced() {
        let r = WorkerRegistry::new();
        let first = started(r.note_insert(index(7, 5), 0, true));
        assert_eq!(
            r.note_insert(index(7, 5), LAUNCH_PATIENCE_US - 1, true),
            Launch::NotNeeded
        );
        // never started: claimed again, in the same slot, with a new ticket
        let t = LAUNCH_PATIENCE_US;
        let second = started(r.note_insert(index(7, 5), t, true));
        assert_eq!(second.slot, first.slot);
        assert_ne!(second, first);
        // the first worker, late, can neither beat nor release for the second
        assert!(!r.beat(first, t + 1));
        r.release(first);
        assert!(r.beat(second, t + 2));
        assert_eq!(
            r.note_insert(index(7, 5), t + 2 + HEARTBEAT_PATIENCE_US - 1, true),
            Launch::NotNeeded
        );
        // silent for too long: presumed gone, replaced
        let third = started(r.note_insert(index(7, 5), t + 2 + HEARTBEAT_PATIENCE_US, true));
        assert!(!r.beat(second, t + 3 + HEARTBEAT_PATIENCE_US));
        assert!(r.beat(third, t + 3 + HEARTBEAT_PATIENCE_US));
    }

    #[test]
    fn full_slots_and_directory() {
        let r = WorkerRegistry::new();
        for db in 0..WORKER_SLOTS as u32 {
            started(r.note_insert(index(100 + db as u64, db + 1), 0, true));
        }
        assert_eq!(r.note_insert(index(999, 99), 0, true), Launch::NoSlot);
        // noted without a launch when launches are off
        assert_eq!(r.note_insert(index(998, 98), 0, false), Launch::NotNeeded);
        assert_eq!(r.indexes_of(98), vec![index(998, 98)]);
        for tag in 1000..1000 + DIRECTORY_SIZE as u64 {
            r.note_insert(index(tag, 1), 0, true);
        }
        // the directory holds DIRECTORY_SIZE indexes: the 8 first ones and 56 of these
        let noted: usize = (1..=WORKER_SLOTS as u32 + 1)
            .chain([98, 99])
            .map(|db| r.indexes_of(db).len())
            .sum();
        assert_eq!(noted, DIRECTORY_SIZE);
        r.forget(1000);
        r.note_insert(index(2000, 1), 0, true);
        assert!(r.indexes_of(1).contains(&index(2000, 1)));
        assert!(!r.indexes_of(1).contains(&index(1000, 1)));
    }

    #[test]
    fn a_rebuild_retires_the_tags_noted_for_its_relation() {
        let r = WorkerRegistry::new();
        let reindexed = |tag| IndexRef {
            tag,
            database: 5,
            relation: 16_384,
        };
        r.note_insert(reindexed(7), 0, false);
        r.note_insert(reindexed(8), 0, false); // an older build still noted
        r.note_insert(index(9, 5), 0, false); // another index of the database
        r.note_insert(
            IndexRef {
                database: 6,
                ..reindexed(10)
            },
            0,
            false,
        ); // same OID elsewhere
        let mut superseded = r.retire_superseded(5, 16_384, 11);
        superseded.sort_unstable();
        assert_eq!(superseded, vec![7, 8]);
        assert!(r.is_retired(7) && r.is_retired(8));
        assert!(!r.is_retired(9) && !r.is_retired(10) && !r.is_retired(11));
        assert_eq!(r.indexes_of(5), vec![index(9, 5)]);
        assert_eq!(r.indexes_of(6).len(), 1);
        // the current build's own tag is never retired by its own rebuild
        r.note_insert(reindexed(11), 0, false);
        assert!(r.retire_superseded(5, 16_384, 11).is_empty());
        assert!(!r.is_retired(11));
        // a drop retires directly; the ring keeps the last RETIRED_SIZE tags
        r.retire(9);
        assert!(r.is_retired(9) && r.indexes_of(5).len() == 1);
        for tag in 100..100 + RETIRED_SIZE as u64 {
            r.retire(tag);
            r.retire(tag); // twice: one slot
        }
        assert!(!r.is_retired(9), "pushed out by RETIRED_SIZE newer tags");
        assert!((100..100 + RETIRED_SIZE as u64).all(|t| r.is_retired(t)));
        assert!(!r.is_retired(0));
    }

    #[test]
    fn searches_quiet_after_the_gap() {
        let r = WorkerRegistry::new();
        r.note_search(5_000);
        assert!(!r.searches_quiet(5_000 + 49_999, 50_000));
        assert!(r.searches_quiet(5_000 + 50_000, 50_000));
        // moves by less than a millisecond are not stored
        r.note_search(5_500);
        assert!(r.searches_quiet(5_000 + 50_000, 50_000));
    }
}
