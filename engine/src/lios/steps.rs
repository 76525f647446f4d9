//! Which step of a sliced task group a stall may still start (RFC 0004, "Sliced tasks").
//!
//! A stall has a budget (τ_est times the utilisation ratio). Checking the clock only after
//! a step lets a long step (a commit, a re-prune's pool) start with a few microseconds left
//! and overrun the reads by its whole length. So each backend keeps the mean cost of each
//! kind of step, measured as the steps run, and a stall starts a step only while the time
//! left covers that step's mean cost. The first step of a stall always starts: a step whose
//! mean exceeds every budget (a commit, on a slow device) must still run somewhere, and at
//! the start of a stall it overlaps the most of the reads.

use crate::update::StepKind;
use std::time::Instant;

/// Weight of a new sample in a step kind's running mean.
const WEIGHT: f64 = 0.1;

/// The running mean cost of each kind of step, in microseconds (0 until first measured).
#[derive(Clone, Debug, Default)]
pub struct StepCosts {
    mean_us: [f64; StepKind::ALL.len()],
}

impl StepCosts {
    pub fn record(&mut self, kind: StepKind, us: f64) {
        let m = &mut self.mean_us[kind.index()];
        *m = if *m == 0.0 {
            us
        } else {
            (1.0 - WEIGHT) * *m + WEIGHT * us
        };
    }

    pub fn mean_us(&self, kind: StepKind) -> f64 {
        self.mean_us[kind.index()]
    }
}

/// One stall's clock: answers whether the next step may start, and times the steps.
pub struct StallClock<'c> {
    costs: &'c mut StepCosts,
    started: Instant,
    budget_us: f64,
    /// The step running, and when (µs into the stall) it started.
    running: Option<(StepKind, f64)>,
    steps: usize,
}

impl<'c> StallClock<'c> {
    pub fn new(costs: &'c mut StepCosts, budget_us: f64) -> Self {
        StallClock {
            costs,
            started: Instant::now(),
            budget_us,
            running: None,
            steps: 0,
        }
    }

    fn now_us(&self) -> f64 {
        self.started.elapsed().as_secs_f64() * 1e6
    }

    /// Asked before a step of `kind`; the step asked about last has ended.
    pub fn may_start(&mut self, kind: StepKind) -> bool {
        let now = self.now_us();
        self.step_ended(now);
        self.admits(kind, now)
    }

    /// The decision, at `now` µs into the stall (split out for tests).
    fn admits(&mut self, kind: StepKind, now: f64) -> bool {
        let fits = self.steps == 0 || now + self.costs.mean_us(kind) <= self.budget_us;
        if fits {
            self.running = Some((kind, now));
            self.steps += 1;
        }
        fits
    }

    fn step_ended(&mut self, now: f64) {
        if let Some((kind, at)) = self.running.take() {
            self.costs.record(kind, now - at);
        }
    }

    /// The stall's work is over (times the step that ran last).
    pub fn finish(&mut self) {
        let now = self.now_us();
        self.step_ended(now);
    }

    /// Whether any step started.
    pub fn worked(&self) -> bool {
        self.steps > 0
    }

    /// Whether the budget is spent.
    pub fn out_of_time(&self) -> bool {
        self.now_us() >= self.budget_us
    }

    pub fn elapsed_us(&self) -> f64 {
        self.now_us()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_starts_only_if_its_mean_cost_fits_what_is_left_except_the_first() {
        let mut costs = StepCosts::default();
        costs.record(StepKind::Commit, 80.0);
        costs.record(StepKind::Read, 5.0);
        let mut clock = StallClock::new(&mut costs, 60.0);
        // The first step of a stall starts even when its mean exceeds the budget.
        assert!(clock.admits(StepKind::Commit, 0.0));
        let mut clock = StallClock::new(&mut costs, 60.0);
        assert!(clock.admits(StepKind::Read, 0.0));
        assert!(clock.admits(StepKind::Read, 50.0), "50 + 5 <= 60");
        assert!(!clock.admits(StepKind::Read, 56.0), "56 + 5 > 60");
        assert!(!clock.admits(StepKind::Commit, 10.0), "10 + 80 > 60");
        // Never measured: mean 0, starts while there is time left.
        assert!(clock.admits(StepKind::Pool, 59.0));
        assert!(clock.worked());
    }

    #[test]
    fn step_costs_are_running_means_per_kind() {
        let mut costs = StepCosts::default();
        costs.record(StepKind::PruneSlice, 4.0);
        assert_eq!(costs.mean_us(StepKind::PruneSlice), 4.0);
        costs.record(StepKind::PruneSlice, 14.0);
        assert!((costs.mean_us(StepKind::PruneSlice) - 5.0).abs() < 1e-9);
        assert_eq!(costs.mean_us(StepKind::Commit), 0.0);
        // A clock times the step that ran until the next question or finish.
        let mut clock = StallClock::new(&mut costs, 1e9);
        assert!(clock.may_start(StepKind::Commit));
        std::thread::sleep(std::time::Duration::from_millis(2));
        clock.finish();
        assert!(costs.mean_us(StepKind::Commit) >= 2000.0);
    }
}
