//! Admitting one new neighbour into a full, pruned list in O(R) distances.
//!
//! When an insert adds the back-edge `p -> t` to a list already at the degree bound, a full
//! RobustPrune of the list plus `t` costs up to R²/2 candidate-to-candidate distances (about
//! 3,500 at R = 96 on 384-d MiniLM, measured: a third of an insert's CPU). But a pruned list
//! already satisfies the prune's final-round rule: no member is occluded (at `alpha`) by a
//! closer member. Adding `t` changes that rule for two sets only, and both are checked
//! against `t` alone:
//!
//! * `t` itself, which is occluded when a closer member stands in for it; then the list
//!   stays as it is (and need not be written at all);
//! * the members farther than `t`, which `t` may now occlude; those leave the list.
//!
//! The members closer than `t` are untouched, and the farthest are cut if the list is still
//! over the bound. For a list that is a fixed point of the final round this is exactly the
//! final round of RobustPrune over the list plus `t`; a list that grew by plain appends
//! (back-edges while it had room) keeps its occluded members until `t` or a later admission
//! occludes them. It costs at most one distance per member.
//!
//! Distances follow [`super::prune::occlusion_factor`], so the signed (inner product) reading
//! is the same as RobustPrune's.

use super::prune::occlusion_factor;
use crate::VertexId;

/// What [`admit`] did with the new candidate.
#[derive(Clone, Debug, PartialEq)]
pub enum Admission {
    /// A closer member occludes it; the list is unchanged.
    Occluded,
    /// It is in the list now; `removed` are the members that left it (occluded by it, or cut
    /// at the degree bound), in the order they were removed.
    Admitted { removed: Vec<VertexId> },
}

/// Admits `new = (t, d(p, t))` into `list`, p's neighbours each with its distance from `p`,
/// sorted closest first (ties by id) with no duplicate ids, keeping at most `max_degree`.
/// `dist_between(a, b)` is asked only for pairs with `t`. `alpha` below 1 or not finite is
/// treated as 1, as in RobustPrune. A `t` already in the list is reported `Admitted` with
/// nothing removed.
pub fn admit(
    list: &mut Vec<(VertexId, f32)>,
    new: (VertexId, f32),
    alpha: f32,
    max_degree: usize,
    mut dist_between: impl FnMut(VertexId, VertexId) -> f32,
) -> Admission {
    let alpha = if alpha.is_finite() && alpha >= 1.0 {
        alpha
    } else {
        1.0
    };
    let (t, d_pt) = new;
    if list.iter().any(|&(id, _)| id == t) {
        return Admission::Admitted {
            removed: Vec::new(),
        };
    }
    let at = position(list, new);
    if at >= max_degree {
        // Every place is taken by a closer member: the final round would stop before `t`.
        return Admission::Occluded;
    }
    for &(s, _) in &list[..at] {
        if occlusion_factor(d_pt, dist_between(s, t)) >= alpha {
            return Admission::Occluded;
        }
    }
    let mut removed = Vec::new();
    let mut farther = list.split_off(at);
    farther.retain(|&(w, d_pw)| {
        let occluded = occlusion_factor(d_pw, dist_between(t, w)) >= alpha;
        if occluded {
            removed.push(w);
        }
        !occluded
    });
    list.push(new);
    list.append(&mut farther);
    while list.len() > max_degree {
        let (cut, _) = list.pop().expect("over the bound");
        removed.push(cut);
    }
    Admission::Admitted { removed }
}

/// Inserts `new` into `list` (sorted as [`admit`] wants it) at its place, without an occlusion
/// check or a bound: a list with room takes a back-edge as an append would. A `t` already in the
/// list is left as it is.
pub fn place(list: &mut Vec<(VertexId, f32)>, new: (VertexId, f32)) {
    if !list.iter().any(|&(id, _)| id == new.0) {
        let at = position(list, new);
        list.insert(at, new);
    }
}

/// Where `new` goes in a list sorted by distance, then id.
fn position(list: &[(VertexId, f32)], (t, d_t): (VertexId, f32)) -> usize {
    list.partition_point(|&(id, d)| d.total_cmp(&d_t).then(id.cmp(&t)).is_lt())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::prune::robust_prune;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    fn sq(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
    }

    /// A fixed point of RobustPrune's final round: no member occluded at `alpha` by a closer
    /// one. (RobustPrune's result is one whenever it stops below the degree bound.)
    fn is_closed(
        list: &[(VertexId, f32)],
        alpha: f32,
        d: impl Fn(VertexId, VertexId) -> f32,
    ) -> bool {
        list.iter().enumerate().all(|(i, &(t, d_pt))| {
            list[..i]
                .iter()
                .all(|&(s, _)| occlusion_factor(d_pt, d(s, t)) < alpha)
        })
    }

    fn sorted_pool(p: &[f32], ids: &[VertexId], pts: &[Vec<f32>]) -> Vec<(VertexId, f32)> {
        let mut pool: Vec<(VertexId, f32)> =
            ids.iter().map(|&i| (i, sq(p, &pts[i as usize]))).collect();
        pool.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        pool
    }

    #[test]
    fn on_a_closed_list_it_matches_the_final_round_of_a_full_prune() {
        // RobustPrune with alpha = 1 has a single round, so on a list it returned (below the
        // bound, i.e. closed), admitting t must give RobustPrune(list + t).
        let mut rng = StdRng::seed_from_u64(7);
        for trial in 0..200 {
            let dim = [2, 3, 8, 32][trial % 4];
            let pts: Vec<Vec<f32>> = (0..60)
                .map(|_| (0..dim).map(|_| rng.gen_range(-1.0f32..1.0)).collect())
                .collect();
            let d = |a: VertexId, b: VertexId| sq(&pts[a as usize], &pts[b as usize]);
            let p = &pts[0];
            let ids: Vec<VertexId> = (1..59).collect();
            let mut pool = sorted_pool(p, &ids, &pts);
            let chosen = robust_prune(&mut pool, 1.0, 1000, d);
            let mut list = sorted_pool(p, &chosen, &pts);
            assert!(is_closed(&list, 1.0, d));
            let t = 59;
            let new = (t, sq(p, &pts[t as usize]));
            let mut everything = list.clone();
            everything.push(new);
            let expected = robust_prune(&mut everything, 1.0, 1000, d);
            let outcome = admit(&mut list, new, 1.0, 1000, d);
            let got: Vec<VertexId> = list.iter().map(|&(id, _)| id).collect();
            assert_eq!(got, expected, "trial {trial}");
            assert_eq!(outcome == Admission::Occluded, !expected.contains(&t));
            assert!(is_closed(&list, 1.0, d));
        }
    }

    #[test]
    fn admitted_lists_stay_sorted_bounded_and_closed_at_alpha() {
        let mut rng = StdRng::seed_from_u64(11);
        let pts: Vec<Vec<f32>> = (0..400)
            .map(|_| (0..16).map(|_| rng.gen_range(-1.0f32..1.0)).collect())
            .collect();
        let d = |a: VertexId, b: VertexId| sq(&pts[a as usize], &pts[b as usize]);
        let p = &pts[0];
        let mut list: Vec<(VertexId, f32)> = Vec::new();
        let (mut occluded, mut admitted) = (0, 0);
        for t in 1..400u32 {
            let before: Vec<VertexId> = list.iter().map(|&(id, _)| id).collect();
            match admit(&mut list, (t, sq(p, &pts[t as usize])), 1.2, 12, d) {
                Admission::Occluded => {
                    occluded += 1;
                    let after: Vec<VertexId> = list.iter().map(|&(id, _)| id).collect();
                    assert_eq!(after, before, "an occluded candidate changes nothing");
                }
                Admission::Admitted { removed } => {
                    admitted += 1;
                    assert!(list.iter().any(|&(id, _)| id == t));
                    for r in &removed {
                        assert!(before.contains(r) && !list.iter().any(|&(id, _)| id == *r));
                    }
                    assert_eq!(before.len() + 1 - removed.len(), list.len());
                }
            }
            assert!(list.len() <= 12);
            assert!(list.windows(2).all(|w| w[0].1 <= w[1].1));
            assert!(is_closed(&list, 1.2, d), "after admitting {t}");
        }
        assert!(
            occluded > 0 && admitted > 12,
            "{occluded} occluded, {admitted} admitted"
        );
    }

    #[test]
    fn a_member_or_a_candidate_beyond_the_bound_changes_nothing() {
        let mut list = vec![(1, 1.0), (2, 2.0)];
        let far = |_: VertexId, _: VertexId| 100.0;
        assert_eq!(
            admit(&mut list, (2, 2.0), 1.2, 2, far),
            Admission::Admitted { removed: vec![] }
        );
        assert_eq!(admit(&mut list, (3, 3.0), 1.2, 2, far), Admission::Occluded);
        assert_eq!(list, vec![(1, 1.0), (2, 2.0)]);
        // A closer candidate that nothing occludes pushes the farthest out.
        assert_eq!(
            admit(&mut list, (4, 0.5), 1.2, 2, far),
            Admission::Admitted { removed: vec![2] }
        );
        assert_eq!(list, vec![(4, 0.5), (1, 1.0)]);
        assert_eq!(
            admit(&mut Vec::new(), (5, 1.0), 1.2, 0, far),
            Admission::Occluded
        );
    }

    #[test]
    fn place_keeps_the_order_and_ignores_members() {
        let mut list = vec![(1, 1.0), (3, 3.0)];
        place(&mut list, (2, 2.0));
        place(&mut list, (0, 3.0)); // same distance as 3: the smaller id first
        place(&mut list, (1, 9.0)); // already a member
        assert_eq!(list, vec![(1, 1.0), (2, 2.0), (0, 3.0), (3, 3.0)]);
    }

    #[test]
    fn a_duplicate_of_a_closer_member_is_occluded() {
        // d(s, t) = 0 occludes at any alpha, as in RobustPrune.
        let mut list = vec![(1, 1.0)];
        let same = |_: VertexId, _: VertexId| 0.0;
        assert_eq!(
            admit(&mut list, (2, 1.0), 1.2, 4, same),
            Admission::Occluded
        );
    }
}
