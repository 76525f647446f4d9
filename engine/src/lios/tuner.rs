//! The adaptive utilisation ratio (LIOS §4.4, RFC 0004 §4): how much of each budget τ_est a
//! search actually gives to update work, tuned so that mean search latency stays within
//! (1 + θ) of a no-update baseline. Per-hop budgets cannot see everything update work costs a
//! search (cache pollution, a task that starts a hop late), so this loop measures the end
//! result instead.
//!
//! The paper's state machine:
//! 1. **Recording**: updates suspended; a window of searches gives the baseline latency.
//! 2. **Probing**: a binary search for a ratio whose window keeps latency within (1 + θ)
//!    of the baseline; if not even a small one does, co-execution stays off for a while.
//! 3. **Steady**: after each window, raise the ratio a step if latency is within bound,
//!    lower it a step if not. Every so often the baseline is measured again (back to 1,
//!    then straight back to 3 with the same ratio).
//! 4. **Rebaseline**: three violations in a row (or a failed search) start over at 1.
//!
//! The paper leaves the window, step and refresh period open; the values here are this
//! implementation's (RFC 0004).

/// Searches per decision window.
pub const WINDOW: u32 = 64;
/// How much the ratio moves per steady window.
pub const STEP: f64 = 0.05;
/// Probes of the initial binary search (the ratio is then known to 1/32).
const PROBES: u32 = 5;
/// Steady windows between two baseline refreshes, and windows co-execution stays off when
/// no ratio is feasible.
pub const REFRESH_WINDOWS: u32 = 50;
/// Consecutive violating windows that trigger a full rebaseline.
const VIOLATIONS: u32 = 3;

const STEADY_START: Phase = Phase::Steady {
    windows: 0,
    violations: 0,
};

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Phase {
    /// Measuring the baseline; `then_steady` when it is a periodic refresh.
    Recording {
        then_steady: bool,
    },
    /// Binary search between a feasible `lo` and an infeasible `hi`; probing `ratio`.
    Probing {
        lo: f64,
        hi: f64,
        left: u32,
    },
    Steady {
        windows: u32,
        violations: u32,
    },
    /// No ratio kept latency within bound: off for `windows` more windows.
    Disabled {
        windows: u32,
    },
}

#[derive(Clone, Debug)]
pub struct UtilisationTuner {
    theta: f64,
    baseline: f64,
    ratio: f64,
    phase: Phase,
    window_sum: f64,
    window_len: u32,
}

impl UtilisationTuner {
    pub fn new(theta: f64) -> Self {
        UtilisationTuner {
            theta: theta.max(0.0),
            baseline: 0.0,
            ratio: 0.0,
            phase: Phase::Recording { then_steady: false },
            window_sum: 0.0,
            window_len: 0,
        }
    }

    /// The share of τ_est to give update work now (0 while recording or disabled).
    pub fn ratio(&self) -> f64 {
        match self.phase {
            Phase::Recording { .. } | Phase::Disabled { .. } => 0.0,
            _ => self.ratio,
        }
    }

    /// Searches must run no update work now (the baseline is being measured).
    pub fn updates_suspended(&self) -> bool {
        matches!(self.phase, Phase::Recording { .. })
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The no-update mean latency last measured (0 before the first window).
    pub fn baseline(&self) -> f64 {
        self.baseline
    }

    fn within_bound(&self, mean: f64) -> bool {
        mean <= (1.0 + self.theta) * self.baseline
    }

    /// A search finished in `latency` (any unit, the same every time).
    pub fn record_search(&mut self, latency: f64) {
        if !latency.is_finite() || latency < 0.0 {
            return;
        }
        self.window_sum += latency;
        self.window_len += 1;
        if self.window_len < WINDOW {
            return;
        }
        let mean = self.window_sum / self.window_len as f64;
        self.window_sum = 0.0;
        self.window_len = 0;
        self.end_window(mean);
    }

    /// A search failed (an ERROR while update work ran in it): start over.
    pub fn search_failed(&mut self) {
        self.restart(false);
    }

    fn restart(&mut self, then_steady: bool) {
        self.phase = Phase::Recording { then_steady };
        self.window_sum = 0.0;
        self.window_len = 0;
    }

    fn end_window(&mut self, mean: f64) {
        self.phase = match self.phase {
            Phase::Recording { then_steady } => {
                self.baseline = mean;
                if then_steady {
                    STEADY_START
                } else {
                    self.ratio = 1.0;
                    Phase::Probing {
                        lo: 0.0,
                        hi: 1.0,
                        left: PROBES,
                    }
                }
            }
            Phase::Probing { lo, hi, left } => {
                let (lo, hi) = if self.within_bound(mean) {
                    (self.ratio, hi)
                } else {
                    (lo, self.ratio)
                };
                // Steady at the best feasible ratio once the full one passed or the probes
                // are spent; off for a while if none passed.
                if lo >= 1.0 || (left <= 1 && lo > 0.0) {
                    self.ratio = lo;
                    STEADY_START
                } else if left <= 1 {
                    self.ratio = 0.0;
                    Phase::Disabled {
                        windows: REFRESH_WINDOWS,
                    }
                } else {
                    self.ratio = (lo + hi) / 2.0;
                    Phase::Probing {
                        lo,
                        hi,
                        left: left - 1,
                    }
                }
            }
            Phase::Steady {
                windows,
                violations,
            } => {
                let violations = if self.within_bound(mean) {
                    self.ratio = (self.ratio + STEP).min(1.0);
                    0
                } else {
                    self.ratio = (self.ratio - STEP).max(0.0);
                    violations + 1
                };
                if violations >= VIOLATIONS {
                    self.restart(false);
                    return;
                }
                if windows + 1 >= REFRESH_WINDOWS {
                    self.restart(true);
                    return;
                }
                Phase::Steady {
                    windows: windows + 1,
                    violations,
                }
            }
            Phase::Disabled { windows } => {
                if windows <= 1 {
                    self.restart(false);
                    return;
                }
                Phase::Disabled {
                    windows: windows - 1,
                }
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// A simulated backend: a search takes `base · (1 + cost(ratio))`, ±2% noise, and runs
    /// no update work while the tuner records.
    fn run(
        tuner: &mut UtilisationTuner,
        searches: u32,
        base: f64,
        cost: impl Fn(f64) -> f64,
        rng: &mut rand_chacha::ChaCha8Rng,
    ) -> Vec<(f64, f64)> {
        (0..searches)
            .map(|_| {
                let ratio = tuner.ratio();
                let latency = base * (1.0 + cost(ratio)) * rng.gen_range(0.98..1.02);
                tuner.record_search(latency);
                (ratio, latency)
            })
            .collect()
    }

    fn mean(xs: impl Iterator<Item = f64>) -> f64 {
        let v: Vec<f64> = xs.collect();
        v.iter().sum::<f64>() / v.len() as f64
    }

    #[test]
    fn the_ratio_settles_where_latency_meets_the_bound() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        // Update work costs a search 10% per unit of ratio: θ = 5% allows about half.
        let mut t = UtilisationTuner::new(0.05);
        let trace = run(&mut t, 64 * 400, 1000.0, |r| 0.1 * r, &mut rng);
        let late = &trace[trace.len() / 2..];
        let ratio = mean(late.iter().map(|x| x.0));
        let latency = mean(late.iter().map(|x| x.1));
        assert!((0.3..=0.65).contains(&ratio), "mean ratio {ratio}");
        assert!(latency <= 1000.0 * 1.05 * 1.005, "mean latency {latency}");
        assert!(
            (t.baseline() - 1000.0).abs() < 20.0,
            "baseline {}",
            t.baseline()
        );
        // Free update work: the ratio goes to 1 and stays there.
        let mut t = UtilisationTuner::new(0.05);
        let trace = run(&mut t, 64 * 100, 1000.0, |_| 0.0, &mut rng);
        assert_eq!(trace.last().unwrap().0, 1.0);
    }

    #[test]
    fn no_feasible_ratio_turns_co_execution_off_for_a_while() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2);
        let mut t = UtilisationTuner::new(0.05);
        // Any update work at all costs 20%.
        let cost = |r: f64| if r > 0.0 { 0.2 } else { 0.0 };
        run(&mut t, 64 * (1 + PROBES), 1000.0, cost, &mut rng);
        assert!(
            matches!(t.phase(), Phase::Disabled { .. }),
            "{:?}",
            t.phase()
        );
        assert_eq!(t.ratio(), 0.0);
        let trace = run(&mut t, 64 * 200, 1000.0, cost, &mut rng);
        let off = trace.iter().filter(|x| x.0 == 0.0).count();
        assert!(off * 10 >= trace.len() * 8, "off {off} of {}", trace.len());
    }

    #[test]
    fn three_violations_rebaseline_and_the_baseline_is_refreshed() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let mut t = UtilisationTuner::new(0.05);
        run(&mut t, 64 * 40, 1000.0, |r| 0.1 * r, &mut rng);
        assert!(matches!(t.phase(), Phase::Steady { .. }));
        // The workload changes: every search now takes twice as long. At most three
        // windows over the bound (fewer if the last steady ones violated already) send the
        // tuner back to recording, and the new baseline is measured.
        let mut windows = 0;
        while !t.updates_suspended() {
            run(&mut t, 64, 2000.0, |r| 0.1 * r, &mut rng);
            windows += 1;
            assert!(windows <= VIOLATIONS, "{:?}", t.phase());
        }
        run(&mut t, 64, 2000.0, |r| 0.1 * r, &mut rng);
        assert!(
            (t.baseline() - 2000.0).abs() < 40.0,
            "baseline {}",
            t.baseline()
        );
        // Periodic refresh: within REFRESH_WINDOWS steady windows the baseline is measured
        // again without updates, then the tuner returns to steady at the ratio it had.
        let mut recorded_again = false;
        for _ in 0..(REFRESH_WINDOWS + 2 * PROBES + 4) {
            run(&mut t, 64, 2000.0, |r| 0.1 * r, &mut rng);
            recorded_again |= matches!(t.phase(), Phase::Recording { then_steady: true });
        }
        assert!(recorded_again);
        t.search_failed();
        assert!(t.updates_suspended());
    }
}
