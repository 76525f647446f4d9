//! LIOS (RFC 0004, issue 18): update work run inside the I/O stalls of searches. This module
//! holds the PostgreSQL-free parts: the bounded task queue ([`queue`]), how long a stall may
//! be used ([`budget`]), how much of that a backend actually uses ([`tuner`]), what the
//! background workers that drain the queue share ([`workers`]), which step of a sliced task
//! group a stall may still start ([`steps`]); resumable pruning is
//! [`crate::graph::ResumablePrune`].

pub mod budget;
pub mod queue;
pub mod steps;
pub mod tuner;
pub mod workers;

pub use budget::{solve_budget, IdleBudgets};
pub use queue::{QueueHeader, QueueSink, Task, TaskKind, TaskQueue, TaskSlot};
pub use steps::{StallClock, StepCosts};
pub use tuner::{Phase, UtilisationTuner};
pub use workers::{IndexRef, Launch, Ticket, WorkerRegistry};
