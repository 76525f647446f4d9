//! RobustPrune: choose a vertex's out-neighbours from a candidate pool (DiskANN/Vamana).
//!
//! A candidate `t` is dropped ("occluded") when an already chosen neighbour `s` stands in
//! for it: `alpha * d(s, t) <= d(p, t)`, i.e. a search that reaches `s` will find `t` at
//! least as easily as one that goes through `p`. `alpha > 1` keeps some longer edges that
//! plain occlusion (`alpha = 1`) would drop, which is what lets greedy search cross the
//! graph in few hops.
//!
//! The pool is scanned in rounds with a rising `alpha` (1, 1.2, 1.44, ... capped at the
//! configured value), as DiskANN's `occlude_list` does: the strict `alpha = 1` choices come
//! first and the longer edges only fill what degree is left.
//!
//! Distances are whatever the caller ranks by (`Metric::search_distance`: squared L2, or
//! the negative inner product). The ratio form of the rule only means something for
//! non-negative distances, so:
//!
//! * when both `d(p, t)` and `d(s, t)` are `>= 0` the alpha rule above applies;
//! * otherwise (inner product, where distances are usually negative) `alpha` is ignored
//!   and `t` is occluded exactly when `d(s, t) <= d(p, t)`, i.e. `t` is at least as similar
//!   to `s` as to `p`. Scaling a negative number by `alpha` would *tighten* the rule for
//!   larger `alpha` and flip its meaning across zero, so plain occlusion is the only
//!   reading that stays monotone. For inner-product indexes the pruned graph therefore
//!   behaves like an `alpha = 1` (HNSW-heuristic) graph.
//!
//! Because pruning by inner product lets a few long vectors occlude nearly everything, the
//! Vamana build and the entrance graph prune inner-product indexes by L2 instead
//! (`vamana::prune_metric`); the signed rule above is the fallback for callers that do pass
//! negative distances.
//!
//! The distance between two candidates comes from a caller closure, because the insert
//! path prunes with exact vectors for the candidates CASR loaded and PQ-reconstructed
//! ("deflated") vectors for the others.

use crate::VertexId;

/// How much `alpha` grows per round; DiskANN's value.
const ALPHA_STEP: f32 = 1.2;

/// Chooses at most `max_degree` neighbours for a point `p` out of `candidates`, each given
/// as `(vertex, d(p, vertex))`. Returns them closest first.
///
/// `candidates` is sorted by distance (ties by id, so the result is deterministic) and
/// de-duplicated in place; the caller must not include `p` itself. `alpha` below 1 or
/// not finite is treated as 1. `dist_between(a, b)` is called only for pairs of
/// candidates and only while the answer can still change the result.
pub fn robust_prune(
    candidates: &mut Vec<(VertexId, f32)>,
    alpha: f32,
    max_degree: usize,
    mut dist_between: impl FnMut(VertexId, VertexId) -> f32,
) -> Vec<VertexId> {
    sort_and_dedup(candidates);
    let mut progress = PruneProgress::new(candidates.len(), alpha, max_degree);
    let mut unlimited = usize::MAX;
    let finished = progress.advance(candidates, &mut unlimited, &mut dist_between);
    debug_assert!(finished, "an unlimited budget finishes");
    chosen_ids(progress.chosen, candidates)
}

/// A RobustPrune that can stop after any number of distance computations and resume
/// later with a bit-identical result (LIOS runs prunes in slices inside search I/O stalls,
/// RFC 0004). It owns its candidate pool, fixed when it starts; its checkpoint is the
/// partial result, the per-candidate occlusion state (the eliminated flags) and the two
/// cursors: the candidate being examined and, per candidate, how many chosen neighbours it
/// has been compared with.
#[derive(Clone, Debug)]
pub struct ResumablePrune {
    candidates: Vec<(VertexId, f32)>,
    progress: PruneProgress,
}

impl ResumablePrune {
    /// A prune of `candidates` (any order, duplicates allowed) as [`robust_prune`] would do it.
    pub fn new(mut candidates: Vec<(VertexId, f32)>, alpha: f32, max_degree: usize) -> Self {
        sort_and_dedup(&mut candidates);
        let progress = PruneProgress::new(candidates.len(), alpha, max_degree);
        ResumablePrune {
            candidates,
            progress,
        }
    }

    /// Runs until finished or until `budget` distance computations have been made (it is
    /// decremented by those made). True when finished.
    pub fn advance(
        &mut self,
        budget: &mut usize,
        mut dist_between: impl FnMut(VertexId, VertexId) -> f32,
    ) -> bool {
        self.progress
            .advance(&self.candidates, budget, &mut dist_between)
    }

    pub fn is_finished(&self) -> bool {
        self.progress.finished
    }

    /// The chosen neighbours, closest first: the final result once finished.
    pub fn result(&self) -> Vec<VertexId> {
        chosen_ids(self.progress.chosen.clone(), &self.candidates)
    }
}

/// The state of one prune over a sorted, de-duplicated pool the caller keeps.
#[derive(Clone, Debug)]
struct PruneProgress {
    alpha: f32,
    max_degree: usize,
    // Per candidate: the largest factor found so far against chosen neighbours, and how
    // many entries of `chosen` (in choice order) it has been compared with. Comparing
    // lazily, and stopping at the first neighbour that occludes it in the current round,
    // saves most distance computations over DiskANN's eager update of every candidate
    // after each choice; the result is the same, because a candidate's eligibility in a
    // round only depends on the chosen neighbours that precede it in distance order.
    occlusion: Vec<f32>,
    compared: Vec<u32>,
    is_chosen: Vec<bool>,
    chosen: Vec<usize>,
    round_alpha: f32,
    /// The candidate the current round examines next.
    next: usize,
    finished: bool,
}

impl PruneProgress {
    fn new(n: usize, alpha: f32, max_degree: usize) -> Self {
        let alpha = if alpha.is_finite() && alpha >= 1.0 {
            alpha
        } else {
            1.0
        };
        PruneProgress {
            alpha,
            max_degree,
            occlusion: vec![0.0; n],
            compared: vec![0; n],
            is_chosen: vec![false; n],
            chosen: Vec::with_capacity(max_degree.min(n)),
            round_alpha: 1.0,
            next: 0,
            finished: max_degree == 0 || n == 0,
        }
    }

    fn advance(
        &mut self,
        candidates: &[(VertexId, f32)],
        budget: &mut usize,
        dist_between: &mut impl FnMut(VertexId, VertexId) -> f32,
    ) -> bool {
        let n = candidates.len();
        while !self.finished {
            while self.next < n && self.chosen.len() < self.max_degree {
                let t = self.next;
                if self.is_chosen[t] || self.occlusion[t] >= self.round_alpha {
                    self.next += 1;
                    continue;
                }
                let (t_id, d_pt) = candidates[t];
                while (self.compared[t] as usize) < self.chosen.len()
                    && self.occlusion[t] < self.round_alpha
                {
                    let s = self.chosen[self.compared[t] as usize];
                    if s < t {
                        if *budget == 0 {
                            return false;
                        }
                        *budget -= 1;
                        let d_st = dist_between(candidates[s].0, t_id);
                        self.occlusion[t] = self.occlusion[t].max(occlusion_factor(d_pt, d_st));
                    }
                    self.compared[t] += 1;
                }
                if self.occlusion[t] < self.round_alpha {
                    self.is_chosen[t] = true;
                    self.chosen.push(t);
                }
                self.next += 1;
            }
            if self.round_alpha >= self.alpha || self.chosen.len() >= self.max_degree {
                self.finished = true;
            } else {
                self.round_alpha = (self.round_alpha * ALPHA_STEP).min(self.alpha);
                self.next = 0;
            }
        }
        true
    }
}

/// The chosen candidates' ids, closest first (positions in the sorted pool).
fn chosen_ids(mut chosen: Vec<usize>, candidates: &[(VertexId, f32)]) -> Vec<VertexId> {
    chosen.sort_unstable();
    chosen.into_iter().map(|i| candidates[i].0).collect()
}

/// Tops `chosen` (a prune's result) up to `min_degree` with the closest candidates of
/// `sorted` (the pool the prune sorted) it left out, closest first: occlusion keeps only what
/// the chosen neighbours do not stand in for, and a point next to a near-duplicate can lose
/// every candidate but that one. An inserted vertex's out-neighbours are also where its
/// back-edges come from, so one left with one or two of them had as few in-edges and lost
/// those to later re-prunes (RFC 0009's addendum: rows no search for their own vector
/// found). hnswlib's `keepPrunedConnections` does the same up to the full degree.
pub fn top_up(chosen: &mut Vec<VertexId>, sorted: &[(VertexId, f32)], min_degree: usize) {
    for &(id, _) in sorted {
        if chosen.len() >= min_degree {
            break;
        }
        if !chosen.contains(&id) {
            chosen.push(id);
        }
    }
}

/// The largest alpha at which `s` occludes `t`, given `d(p, t)` and `d(s, t)`: `t` is
/// occluded in a round with alpha `a` iff the factor is `>= a`. See the module comment for
/// the signed case.
pub fn occlusion_factor(d_pt: f32, d_st: f32) -> f32 {
    if d_pt >= 0.0 && d_st >= 0.0 {
        if d_st == 0.0 {
            // `t` coincides with a chosen neighbour: it adds nothing.
            f32::INFINITY
        } else {
            d_pt / d_st
        }
    } else if d_st <= d_pt {
        f32::INFINITY
    } else {
        0.0
    }
}

/// Sorts by distance then id and keeps the first (closest) entry of each id.
pub(crate) fn sort_and_dedup(candidates: &mut Vec<(VertexId, f32)>) {
    candidates.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
    candidates.dedup_by_key(|c| c.0);
    candidates.sort_unstable_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sq(a: [f32; 2], b: [f32; 2]) -> f32 {
        (a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2)
    }

    /// Prunes the points `pts[1..]` around `pts[0]` with squared L2.
    fn prune_points(pts: &[[f32; 2]], alpha: f32, r: usize) -> Vec<VertexId> {
        let mut cands: Vec<(VertexId, f32)> = (1..pts.len())
            .map(|i| (i as VertexId, sq(pts[0], pts[i])))
            .collect();
        robust_prune(&mut cands, alpha, r, |a, b| {
            sq(pts[a as usize], pts[b as usize])
        })
    }

    #[test]
    fn top_up_adds_the_nearest_candidates_the_prune_left_out() {
        // A near-duplicate at (0.01, 0) occludes every point to the right of the origin.
        let pts = [
            [0.0, 0.0],
            [0.01, 0.0],
            [1.0, 0.0],
            [2.0, 0.0],
            [3.0, 0.0],
            [4.0, 0.0],
        ];
        let mut cands: Vec<(VertexId, f32)> = (1..pts.len())
            .map(|i| (i as VertexId, sq(pts[0], pts[i])))
            .collect();
        let mut chosen = robust_prune(&mut cands, 1.0, 10, |a, b| {
            sq(pts[a as usize], pts[b as usize])
        });
        assert_eq!(chosen, vec![1]);
        top_up(&mut chosen, &cands, 3);
        assert_eq!(chosen, vec![1, 2, 3], "the next nearest, in order");
        top_up(&mut chosen, &cands, 2);
        assert_eq!(chosen, vec![1, 2, 3], "never shortens a list");
        top_up(&mut chosen, &cands, 99);
        assert_eq!(chosen, vec![1, 2, 3, 4, 5], "at most the pool");
    }

    #[test]
    fn collinear_points_keep_only_the_nearest_with_alpha_one() {
        // p at the origin, candidates on a line to the right: each is occluded by the first.
        let pts = [[0.0, 0.0], [1.0, 0.0], [2.0, 0.0], [3.0, 0.0]];
        assert_eq!(prune_points(&pts, 1.0, 10), vec![1]);
    }

    #[test]
    fn points_in_different_directions_all_survive() {
        let pts = [[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -2.0]];
        assert_eq!(prune_points(&pts, 1.0, 10), vec![1, 2, 3, 4]);
    }

    #[test]
    fn alpha_keeps_a_longer_edge_that_plain_occlusion_drops() {
        // t = (2, 1.2): d(p,t) = 5.44, d(s,t) = 2.44 with s = (1, 0); ratio 2.23.
        // u = (1.6, 1.5): d(p,u) = 4.81, d(s,u) = 2.61; ratio 1.84.
        // With alpha = 1 both are occluded by s; with alpha = 2 both survive.
        let pts = [[0.0, 0.0], [1.0, 0.0], [2.0, 1.2], [1.6, 1.5]];
        assert_eq!(prune_points(&pts, 1.0, 10), vec![1]);
        let kept = prune_points(&pts, 2.0, 10);
        assert_eq!(kept[0], 1);
        assert!(kept.contains(&3), "{kept:?}");
        // alpha 2.0 is below t's ratio 2.23 w.r.t. s, so t stays occluded.
        assert!(!kept.contains(&2), "{kept:?}");
        // Past t's ratio, t is released from s but u, right next to it, now occludes it.
        assert_eq!(prune_points(&pts, 2.5, 10), vec![1, 3]);
    }

    #[test]
    fn degree_limit_keeps_the_closest_survivors() {
        let pts = [[0.0, 0.0], [1.0, 0.0], [0.0, 1.1], [-1.2, 0.0], [0.0, -1.3]];
        assert_eq!(prune_points(&pts, 1.2, 2), vec![1, 2]);
        assert!(prune_points(&pts, 1.2, 0).is_empty());
    }

    #[test]
    fn strict_round_is_preferred_over_alpha_round() {
        // With room for only two, the alpha=1 survivor (direction -x) must beat the
        // alpha-only survivor u even though u is closer to p.
        let pts = [[0.0, 0.0], [1.0, 0.0], [1.6, 1.5], [-3.0, 0.0]];
        assert_eq!(prune_points(&pts, 2.0, 2), vec![1, 3]);
    }

    #[test]
    fn duplicates_and_coincident_points_are_removed() {
        let pts = [[0.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]];
        let mut cands = vec![(1, 1.0), (3, 1.0), (1, 1.0), (2, 1.0)];
        let kept = robust_prune(&mut cands, 1.2, 10, |a, b| {
            sq(pts[a as usize], pts[b as usize])
        });
        // 1 and 2 coincide: the tie goes to the smaller id.
        assert_eq!(kept, vec![1, 3]);
        assert_eq!(cands.len(), 3, "duplicate id removed from the pool");
    }

    #[test]
    fn empty_pool_and_bad_alpha() {
        let mut empty = Vec::new();
        assert!(robust_prune(&mut empty, 1.2, 4, |_, _| 0.0).is_empty());
        let pts = [[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]];
        // NaN alpha behaves as 1.
        assert_eq!(prune_points(&pts, f32::NAN, 10), vec![1]);
    }

    #[test]
    fn inner_product_uses_plain_occlusion() {
        // Negative dot products as distances. p = (1, 0).
        let vecs = [[1.0f32, 0.0], [0.9, 0.1], [0.8, 0.2], [0.0, 1.0]];
        let nd = |a: [f32; 2], b: [f32; 2]| -(a[0] * b[0] + a[1] * b[1]);
        let mut cands: Vec<(VertexId, f32)> = (1..4)
            .map(|i| (i as VertexId, nd(vecs[0], vecs[i])))
            .collect();
        let kept = robust_prune(&mut cands, 1.2, 10, |a, b| {
            nd(vecs[a as usize], vecs[b as usize])
        });
        // dot(1, 2) = 0.74 < dot(p, 2) = 0.8: 2 is closer to p than to 1, so it stays.
        // dot(1, 3) = 0.1 > dot(p, 3) = 0: 3 is closer to 1 than to p, so it is occluded.
        assert_eq!(kept, vec![1, 2]);
        // The result does not depend on alpha for negative distances.
        let mut again: Vec<(VertexId, f32)> = (1..4)
            .map(|i| (i as VertexId, nd(vecs[0], vecs[i])))
            .collect();
        let strict = robust_prune(&mut again, 1.0, 10, |a, b| {
            nd(vecs[a as usize], vecs[b as usize])
        });
        assert_eq!(strict, kept);
    }

    /// A random pool around a random point: `(pool, distance between two ids)`, with squared
    /// L2 or (for `signed`) negative inner products, and duplicate ids and tied distances.
    fn random_pool(seed: u64, signed: bool) -> (Vec<(VertexId, f32)>, Vec<Vec<f32>>) {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let dim = rng.gen_range(2..12);
        let n = rng.gen_range(0..120);
        let mut pts: Vec<Vec<f32>> = (0..=n)
            .map(|_| (0..dim).map(|_| rng.gen_range(-1.0..1.0)).collect())
            .collect();
        if n > 4 {
            pts[2] = pts[1].clone(); // a coincident pair
        }
        let d = |a: &[f32], b: &[f32]| -> f32 {
            if signed {
                -a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>()
            } else {
                a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
            }
        };
        let mut pool: Vec<(VertexId, f32)> = (1..=n)
            .map(|i| (i as VertexId, d(&pts[0], &pts[i])))
            .collect();
        if n > 8 {
            pool.push(pool[3]); // a duplicate id
        }
        let pairwise = (0..=n)
            .map(|a| (0..=n).map(|b| d(&pts[a], &pts[b])).collect())
            .collect();
        (pool, pairwise)
    }

    /// DiskANN's eager `occlude_list`: after each choice every remaining candidate's factor
    /// is updated. The lazy prune above must choose exactly the same neighbours.
    fn eager_prune(
        pool: &[(VertexId, f32)],
        alpha: f32,
        degree: usize,
        dist: impl Fn(VertexId, VertexId) -> f32,
    ) -> Vec<VertexId> {
        let mut c = pool.to_vec();
        sort_and_dedup(&mut c);
        let alpha = if alpha.is_finite() && alpha >= 1.0 {
            alpha
        } else {
            1.0
        };
        let mut factor = vec![0.0f32; c.len()];
        let mut chosen: Vec<usize> = Vec::new();
        let mut round = 1.0f32;
        loop {
            for t in 0..c.len() {
                if chosen.len() >= degree {
                    break;
                }
                if chosen.contains(&t) || factor[t] >= round {
                    continue;
                }
                chosen.push(t);
                for u in t + 1..c.len() {
                    let f = occlusion_factor(c[u].1, dist(c[t].0, c[u].0));
                    factor[u] = factor[u].max(f);
                }
            }
            if round >= alpha || chosen.len() >= degree {
                break;
            }
            round = (round * ALPHA_STEP).min(alpha);
        }
        chosen.sort_unstable();
        chosen.into_iter().map(|i| c[i].0).collect()
    }

    #[test]
    fn a_prune_resumed_after_any_number_of_distances_gives_the_identical_result() {
        for seed in 0..300u64 {
            let signed = seed % 5 == 0;
            let (pool, pairwise) = random_pool(seed, signed);
            let alpha = [1.0, 1.2, 1.5, 2.0][seed as usize % 4];
            let degree = [0, 1, 4, 8, 16, 32][seed as usize % 6];
            let mut calls_whole = 0;
            let whole = robust_prune(&mut pool.clone(), alpha, degree, |a, b| {
                calls_whole += 1;
                pairwise[a as usize][b as usize]
            });
            let eager = eager_prune(&pool, alpha, degree, |a, b| {
                pairwise[a as usize][b as usize]
            });
            assert_eq!(whole, eager, "seed {seed}: lazy and eager prunes agree");
            for slice in [1usize, 2, 3, 7, 64] {
                let mut prune = ResumablePrune::new(pool.clone(), alpha, degree);
                let (mut calls, mut slices) = (0, 0);
                loop {
                    let mut budget = slice;
                    let done = prune.advance(&mut budget, |a, b| {
                        calls += 1;
                        pairwise[a as usize][b as usize]
                    });
                    assert!(budget <= slice);
                    slices += 1;
                    if done {
                        break;
                    }
                    assert_eq!(budget, 0, "a prune stops early only when out of budget");
                    // The checkpoint is plain data: a copy resumes as well as the original.
                    prune = prune.clone();
                }
                assert!(prune.is_finished());
                assert_eq!(prune.result(), whole, "seed {seed}, slices of {slice}");
                assert_eq!(calls, calls_whole, "the same distances, none repeated");
                assert!(slices >= calls_whole / slice, "seed {seed}");
            }
        }
    }

    #[test]
    fn occlusion_factor_cases() {
        assert_eq!(occlusion_factor(4.0, 2.0), 2.0);
        assert_eq!(occlusion_factor(1.0, 0.0), f32::INFINITY);
        assert_eq!(occlusion_factor(0.0, 1.0), 0.0);
        assert_eq!(occlusion_factor(-0.5, -0.7), f32::INFINITY);
        assert_eq!(occlusion_factor(-0.7, -0.5), 0.0);
        assert_eq!(occlusion_factor(0.5, -0.1), f32::INFINITY);
    }
}
