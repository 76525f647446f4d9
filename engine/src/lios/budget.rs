//! Overrun-bounded time budgets (LIOS §4.3, RFC 0004 §4).
//!
//! A search that has submitted a hop's reads is idle until they complete. Update work run in
//! that window delays the search by however much it overruns the idle time. LIOS picks the
//! largest budget τ whose mean overrun is at most θ times the mean idle time:
//!
//! ```text
//! (1/N) Σ max(0, τ − idle_i)  ≤  θ · (1/N) Σ idle_i
//! ```
//!
//! over recent idle-time samples. The left side is piecewise linear and non-decreasing in τ,
//! so instead of the paper's binary search the solver finds the exact crossing on the sorted
//! samples. The number of reads in flight changes the idle time a lot (one read against a
//! batch of eight), so samples are kept per bucket of in-flight reads, each with its own τ.

/// Samples a bucket keeps (the most recent ones): enough for a stable estimate of a
/// distribution the paper found stable over short windows, few enough to follow a change.
pub const HISTORY: usize = 256;
/// Buckets by reads in flight: 1, 2, ..., BUCKETS (and more counts in the last one).
pub const BUCKETS: usize = 8;
/// New samples after which a bucket solves its budget again.
const RESOLVE_EVERY: u32 = 32;
/// Samples a bucket needs before it grants any budget.
const MIN_SAMPLES: usize = 32;

/// The largest τ with mean(max(0, τ − s)) ≤ θ · mean(s), in the samples' unit; 0 with no
/// samples, a non-positive θ or no idle time at all.
pub fn solve_budget(samples: &[f64], theta: f64) -> f64 {
    if samples.is_empty() || theta <= 0.0 || !theta.is_finite() {
        return 0.0;
    }
    let mut sorted: Vec<f64> = samples
        .iter()
        .map(|s| if s.is_finite() { s.max(0.0) } else { 0.0 })
        .collect();
    sorted.sort_unstable_by(f64::total_cmp);
    let n = sorted.len() as f64;
    // Compare sums, not means: N · target.
    let allowed = theta * sorted.iter().sum::<f64>();
    if allowed <= 0.0 {
        return 0.0;
    }
    // For τ between sorted[k] and sorted[k + 1] the overrun sum is (k + 1) τ − prefix(k).
    let mut prefix = 0.0;
    for (k, &s) in sorted.iter().enumerate() {
        prefix += s;
        let below = (k + 1) as f64;
        let crossing = (allowed + prefix) / below;
        let next = sorted.get(k + 1).copied().unwrap_or(f64::INFINITY);
        if crossing <= next {
            return crossing;
        }
    }
    // Unreachable: the last segment extends to infinity.
    (allowed + prefix) / n
}

/// The recent idle times of one bucket and the budget solved from them.
#[derive(Clone, Debug)]
struct Bucket {
    samples: Vec<f64>,
    /// Where the next sample goes once the history is full.
    next: usize,
    since_solve: u32,
    budget: f64,
}

impl Bucket {
    fn new() -> Self {
        Bucket {
            samples: Vec::with_capacity(HISTORY),
            next: 0,
            since_solve: 0,
            budget: 0.0,
        }
    }

    fn record(&mut self, idle: f64, theta: f64) {
        if self.samples.len() < HISTORY {
            self.samples.push(idle);
        } else {
            self.samples[self.next] = idle;
            self.next = (self.next + 1) % HISTORY;
        }
        self.since_solve += 1;
        if self.samples.len() >= MIN_SAMPLES && self.since_solve >= RESOLVE_EVERY {
            self.budget = solve_budget(&self.samples, theta);
            self.since_solve = 0;
        }
    }
}

/// Per-bucket idle histories and budgets for one backend. Times are in microseconds.
#[derive(Clone, Debug)]
pub struct IdleBudgets {
    theta: f64,
    buckets: Vec<Bucket>,
}

impl IdleBudgets {
    pub fn new(theta: f64) -> Self {
        IdleBudgets {
            theta,
            buckets: (0..BUCKETS).map(|_| Bucket::new()).collect(),
        }
    }

    fn bucket(in_flight: usize) -> usize {
        in_flight.clamp(1, BUCKETS) - 1
    }

    /// Records how long a search waited on `in_flight` reads (with no update work run).
    pub fn record(&mut self, in_flight: usize, idle_us: f64) {
        let theta = self.theta;
        self.buckets[Self::bucket(in_flight)].record(idle_us, theta);
    }

    /// The budget τ_est for a wait on `in_flight` reads; 0 until the bucket has samples.
    pub fn budget(&self, in_flight: usize) -> f64 {
        self.buckets[Self::bucket(in_flight)].budget
    }

    /// A new θ: every bucket solves again from its samples.
    pub fn set_theta(&mut self, theta: f64) {
        self.theta = theta;
        for b in &mut self.buckets {
            b.budget = if b.samples.len() >= MIN_SAMPLES {
                solve_budget(&b.samples, theta)
            } else {
                0.0
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn mean_overrun(samples: &[f64], tau: f64) -> f64 {
        samples.iter().map(|s| (tau - s).max(0.0)).sum::<f64>() / samples.len() as f64
    }

    fn mean(samples: &[f64]) -> f64 {
        samples.iter().sum::<f64>() / samples.len() as f64
    }

    /// The paper's binary search, as the reference.
    fn bisect(samples: &[f64], theta: f64) -> f64 {
        let target = theta * mean(samples);
        let (mut lo, mut hi) = (0.0, samples.iter().cloned().fold(0.0, f64::max) * 2.0 + 1.0);
        for _ in 0..200 {
            let mid = (lo + hi) / 2.0;
            if mean_overrun(samples, mid) <= target {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo
    }

    #[test]
    fn the_budget_is_the_largest_whose_mean_overrun_stays_within_theta() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        for case in 0..500 {
            let n = rng.gen_range(1..300);
            // Right-skewed idle times as the paper saw: mostly short, a long tail.
            let samples: Vec<f64> = (0..n)
                .map(|_| {
                    let u: f64 = rng.gen_range(0.0..1.0);
                    if case % 7 == 0 {
                        5.0 // all equal
                    } else {
                        -200.0 * (1.0 - u).ln()
                    }
                })
                .collect();
            let theta = [0.02, 0.05, 0.1, 0.5][case % 4];
            let tau = solve_budget(&samples, theta);
            let target = theta * mean(&samples);
            assert!(
                mean_overrun(&samples, tau) <= target * (1.0 + 1e-9) + 1e-9,
                "case {case}: overrun above θ"
            );
            assert!(
                mean_overrun(&samples, tau * 1.001 + 1e-6) > target,
                "case {case}: a larger budget would also do"
            );
            let reference = bisect(&samples, theta);
            assert!(
                (tau - reference).abs() <= 1e-6 * reference.max(1.0),
                "case {case}"
            );
        }
    }

    #[test]
    fn worked_example_and_degenerate_inputs() {
        // Idle times 10, 20, 30, θ = 0.1: allowed overrun sum 6, so τ = 16 (only the 10
        // overruns, by 6).
        assert!((solve_budget(&[30.0, 10.0, 20.0], 0.1) - 16.0).abs() < 1e-12);
        assert_eq!(solve_budget(&[], 0.05), 0.0);
        assert_eq!(solve_budget(&[0.0, 0.0], 0.05), 0.0);
        assert_eq!(solve_budget(&[10.0], 0.0), 0.0);
        // A sample that is not a number counts as no idle time: [0, 10], allowed 1, τ = 1.
        assert_eq!(solve_budget(&[10.0, f64::NAN], 0.1), 1.0);
    }

    #[test]
    fn buckets_keep_separate_histories_and_follow_a_change() {
        let mut b = IdleBudgets::new(0.05);
        assert_eq!(b.budget(1), 0.0, "no budget before samples");
        for _ in 0..HISTORY {
            b.record(1, 50.0);
            b.record(8, 400.0);
            b.record(20, 400.0); // counts past the last bucket share it
        }
        assert!((b.budget(1) - 52.5).abs() < 1e-9, "{}", b.budget(1));
        assert!((b.budget(12) - 420.0).abs() < 1e-9, "{}", b.budget(12));
        // The idle time of one read halves: after a history's worth of samples, so does τ.
        for _ in 0..HISTORY {
            b.record(1, 25.0);
        }
        assert!((b.budget(1) - 26.25).abs() < 1e-9, "{}", b.budget(1));
        b.set_theta(0.1);
        assert!((b.budget(1) - 27.5).abs() < 1e-9);
    }
}
