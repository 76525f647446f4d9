//! Every vertex's in-neighbours, which page refinement weighs as much as its out-neighbours.

use super::parallel::{map_vertices, run_parts, vertex_chunks};
use crate::VertexId;

/// Every vertex's in-neighbours in one CSR array: two allocations instead of a `Vec` per
/// vertex, which at low dimensions outweighed the vectors (see `graph::memory`).
///
/// A mutual pair (u lists v once and v lists u once) is not stored as in-edges at all: the
/// out-slot is marked reciprocal instead and counts twice, which gives the same multiset of
/// neighbours in a bit per edge rather than four bytes. Vamana graphs have many such pairs.
pub(super) struct Incoming {
    /// `ids[offsets[v]..offsets[v + 1]]` are v's non-reciprocal in-neighbours, increasing.
    offsets: Vec<usize>,
    ids: Vec<VertexId>,
    /// `out_offsets[v] + i` indexes `reciprocal`'s bit for `adjacency[v][i]`.
    out_offsets: Vec<usize>,
    reciprocal: Vec<u64>,
}

impl Incoming {
    pub(super) fn of(&self, v: usize) -> &[VertexId] {
        &self.ids[self.offsets[v]..self.offsets[v + 1]]
    }

    fn is_reciprocal(&self, v: usize, i: usize) -> bool {
        let bit = self.out_offsets[v] + i;
        self.reciprocal[bit / 64] >> (bit % 64) & 1 == 1
    }

    /// v's out- and in-neighbours with multiplicities: a mutual neighbour once, weighted 2.
    pub(super) fn weighted<'a>(
        &'a self,
        adjacency: &'a [Vec<VertexId>],
        v: usize,
    ) -> impl Iterator<Item = (VertexId, i32)> + 'a {
        let base = self.out_offsets[v];
        let bits = &self.reciprocal;
        let out = adjacency[v].iter().enumerate().map(move |(i, &w)| {
            let bit = base + i;
            (w, 1 + (bits[bit / 64] >> (bit % 64) & 1) as i32)
        });
        out.chain(self.of(v).iter().map(|&w| (w, 1)))
    }

    /// Sum of the weights of [`Incoming::weighted`].
    pub(super) fn degree(&self, adjacency: &[Vec<VertexId>], v: usize) -> usize {
        let mutual = (0..adjacency[v].len())
            .filter(|&i| self.is_reciprocal(v, i))
            .count();
        adjacency[v].len() + mutual + self.of(v).len()
    }
}

/// Whether `list` names some vertex twice (Vamana lists never do, but `place` accepts any).
fn has_duplicates(list: &[VertexId], sorted: &mut Vec<VertexId>) -> bool {
    sorted.clear();
    sorted.extend_from_slice(list);
    sorted.sort_unstable();
    sorted.windows(2).any(|w| w[0] == w[1])
}

/// Every in-edge of every vertex in one CSR array, each list in increasing source order:
/// counts, then a fill from the end with sources in decreasing order, which leaves every
/// list sorted and turns `offsets[v + 1]` into v's start without a second cursor array.
fn all_in_edges(adjacency: &[Vec<VertexId>]) -> (Vec<usize>, Vec<VertexId>) {
    let n = adjacency.len();
    let mut offsets = vec![0usize; n + 1];
    for list in adjacency {
        for &v in list {
            offsets[v as usize + 1] += 1;
        }
    }
    for v in 0..n {
        offsets[v + 1] += offsets[v];
    }
    let mut ids = vec![0; offsets[n]];
    for (u, list) in adjacency.iter().enumerate().rev() {
        for &v in list {
            offsets[v as usize + 1] -= 1;
            ids[offsets[v as usize + 1]] = u as VertexId;
        }
    }
    offsets.rotate_left(1);
    offsets[n] = ids.len();
    (offsets, ids)
}

/// Marks the mutual pairs of the vertices `range`, whose in-lists are `in_ids` (starting at
/// `in_offsets[range.start]`): their out-slots' bits, returned as words from the word
/// holding the range's first slot, and their entries in the in-lists, set to
/// [`REMOVED`]. An edge `u -> v` is half of a mutual pair when neither list names a vertex
/// twice and v lists u; the test is symmetric, so both halves are marked or neither. Whether
/// v lists u is a binary search of u's own sorted in-list, and whether an in-neighbour w of
/// u is listed back a scan of u's out-list: no other vertex's list is read.
fn mark_mutual_pairs(
    adjacency: &[Vec<VertexId>],
    repeats: &[bool],
    out_offsets: &[usize],
    in_offsets: &[usize],
    range: std::ops::Range<usize>,
    in_ids: &mut [VertexId],
) -> (usize, Vec<u64>) {
    let first_word = out_offsets[range.start] / 64;
    let mut words = vec![0u64; out_offsets[range.end].div_ceil(64) - first_word];
    let base = in_offsets[range.start];
    for u in range.filter(|&u| !repeats[u]) {
        let (start, end) = (in_offsets[u] - base, in_offsets[u + 1] - base);
        let listed_by = &mut in_ids[start..end];
        let paired = |v: VertexId| v as usize != u && !repeats[v as usize];
        for (i, &v) in adjacency[u].iter().enumerate() {
            if paired(v) && listed_by.binary_search(&v).is_ok() {
                let bit = out_offsets[u] + i - first_word * 64;
                words[bit / 64] |= 1 << (bit % 64);
            }
        }
        for w in listed_by.iter_mut() {
            if paired(*w) && adjacency[u].contains(w) {
                *w = REMOVED;
            }
        }
    }
    (first_word, words)
}

/// An in-list entry that a mutual pair's bit stands for, dropped when the lists are packed.
const REMOVED: VertexId = VertexId::MAX;

pub(super) fn reverse_adjacency(adjacency: &[Vec<VertexId>], threads: usize) -> Incoming {
    let n = adjacency.len();
    let mut out_offsets = Vec::with_capacity(n + 1);
    out_offsets.push(0);
    for list in adjacency {
        out_offsets.push(out_offsets.last().unwrap_or(&0) + list.len());
    }
    let repeats = map_vertices(n, threads, |u| {
        has_duplicates(&adjacency[u], &mut Vec::new())
    });
    let (mut offsets, mut ids) = all_in_edges(adjacency);
    // Each thread marks a range of vertices: their in-lists are one contiguous part of `ids`,
    // and their out-slots' bits go into words of its own (ranges meet inside a word at most
    // at their ends, so OR-ing the words together gives the serial result).
    let mut parts: Vec<(std::ops::Range<usize>, &mut [VertexId])> = Vec::new();
    let mut rest = ids.as_mut_slice();
    for range in vertex_chunks(n, threads) {
        let (head, tail) = rest.split_at_mut(offsets[range.end] - offsets[range.start]);
        parts.push((range, head));
        rest = tail;
    }
    let marked = run_parts(parts, |(range, in_ids)| {
        mark_mutual_pairs(adjacency, &repeats, &out_offsets, &offsets, range, in_ids)
    });
    let mut reciprocal = vec![0u64; out_offsets[n].div_ceil(64)];
    for (first_word, words) in marked {
        for (at, w) in words.into_iter().enumerate() {
            reciprocal[first_word + at] |= w;
        }
    }
    // Pack the in-lists, dropping the entries mutual pairs' bits stand for.
    let mut kept = 0;
    for v in 0..n {
        let (start, end) = (offsets[v], offsets[v + 1]);
        offsets[v] = kept;
        for at in start..end {
            if ids[at] != REMOVED {
                ids[kept] = ids[at];
                kept += 1;
            }
        }
    }
    offsets[n] = kept;
    ids.truncate(kept);
    ids.shrink_to_fit();
    Incoming {
        offsets,
        ids,
        out_offsets,
        reciprocal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reverse_adjacency_lists_sorted_in_neighbours() {
        // 0<->2 and 1<->2 are mutual; 3 lists 4 twice, so 3<->4 is not a single pair.
        let adjacency = vec![vec![1, 2], vec![2], vec![0, 1], vec![4, 4], vec![2, 0, 3]];
        for threads in [1, 2, 3, 8] {
            let incoming = reverse_adjacency(&adjacency, threads);
            let lists: Vec<&[VertexId]> = (0..5).map(|v| incoming.of(v)).collect();
            assert_eq!(lists, [&[4][..], &[0], &[4], &[4], &[3, 3]]);
            assert_eq!(incoming.offsets, [0, 1, 2, 3, 4, 6]);
            // The neighbour multisets equal out-lists plus all in-lists.
            for v in 0..5 {
                let weighted = incoming.weighted(&adjacency, v);
                let mut got: Vec<VertexId> = weighted
                    .flat_map(|(w, k)| std::iter::repeat_n(w, k as usize))
                    .collect();
                let mut want = adjacency[v].clone();
                for (u, list) in adjacency.iter().enumerate() {
                    want.extend(
                        list.iter()
                            .filter(|&&x| x as usize == v)
                            .map(|_| u as VertexId),
                    );
                }
                got.sort_unstable();
                want.sort_unstable();
                assert_eq!(got, want, "vertex {v}, {threads} threads");
                assert_eq!(incoming.degree(&adjacency, v), want.len());
            }
        }
    }

    /// The definition, edge by edge: a mutual pair's edges are bits, every other edge is an
    /// in-list entry.
    fn reference(adjacency: &[Vec<VertexId>]) -> (Vec<Vec<VertexId>>, Vec<bool>) {
        let repeats: Vec<bool> = adjacency
            .iter()
            .map(|l| has_duplicates(l, &mut Vec::new()))
            .collect();
        let mutual = |u: usize, v: VertexId| {
            v as usize != u
                && !repeats[u]
                && !repeats[v as usize]
                && adjacency[v as usize].contains(&(u as VertexId))
        };
        let mut lists = vec![Vec::new(); adjacency.len()];
        let mut bits = Vec::new();
        for (u, list) in adjacency.iter().enumerate() {
            for &v in list {
                bits.push(mutual(u, v));
                if !mutual(u, v) {
                    lists[v as usize].push(u as VertexId);
                }
            }
        }
        (lists, bits)
    }

    #[test]
    fn in_lists_and_bits_match_the_definition_on_random_graphs() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        for n in [1usize, 2, 17, 200, 1000] {
            // Lists drawn from a small neighbourhood, so that mutual pairs, repeats and self
            // loops all occur.
            let adjacency: Vec<Vec<VertexId>> = (0..n)
                .map(|u| {
                    let len = rng.gen_range(0..12);
                    (0..len)
                        .map(|_| ((u + rng.gen_range(0..8)) % n) as VertexId)
                        .collect()
                })
                .collect();
            let (lists, bits) = reference(&adjacency);
            for threads in [1, 2, 5] {
                let incoming = reverse_adjacency(&adjacency, threads);
                for (v, list) in lists.iter().enumerate() {
                    assert_eq!(incoming.of(v), list, "n {n} threads {threads} vertex {v}");
                }
                let mut bit = 0;
                for (u, list) in adjacency.iter().enumerate() {
                    for i in 0..list.len() {
                        assert_eq!(incoming.is_reciprocal(u, i), bits[bit], "edge {u}[{i}]");
                        bit += 1;
                    }
                }
            }
        }
    }

    #[test]
    fn reciprocal_bits_do_not_depend_on_threads() {
        // 300 vertices with lists of 7 (a ring's two mutual links, then five scattered ones,
        // some of them repeats): the threads' ranges end inside 64-bit words.
        let n = 300u32;
        let adjacency: Vec<Vec<VertexId>> = (0..n)
            .map(|u| {
                let scattered = (1..=5).map(|d| (u * 31 + d * d * 17) % n);
                [(u + 1) % n, (u + n - 1) % n]
                    .into_iter()
                    .chain(scattered)
                    .collect()
            })
            .collect();
        let serial = reverse_adjacency(&adjacency, 1);
        assert!(
            serial.reciprocal.iter().any(|&w| w != 0),
            "some mutual pairs"
        );
        for threads in [2, 3, 7] {
            let parallel = reverse_adjacency(&adjacency, threads);
            assert_eq!(parallel.reciprocal, serial.reciprocal, "{threads} threads");
            assert_eq!(parallel.ids, serial.ids);
            assert_eq!(parallel.offsets, serial.offsets);
        }
    }
}
