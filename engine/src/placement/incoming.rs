//! Every vertex's in-neighbours, which page refinement weighs as much as its out-neighbours.

use super::parallel::{map_vertices, vertex_chunks};
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

/// The edge `u -> v` is half of a mutual pair counted through the out-slots: both lists are
/// free of duplicates and v lists u. The test is symmetric in u and v, so both halves are
/// marked or neither.
fn mutual(adjacency: &[Vec<VertexId>], repeats: &[bool], u: usize, v: VertexId) -> bool {
    v as usize != u
        && !repeats[u]
        && !repeats[v as usize]
        && adjacency[v as usize].contains(&(u as VertexId))
}

/// The reciprocal bit of every out-slot, found on `threads` threads. Each thread marks the
/// slots of a range of vertices into words of its own; ranges meet inside a word at most at
/// their ends, so OR-ing the threads' words together gives the serial result. Looking up
/// whether v lists u is a cache miss per edge: this is most of building [`Incoming`].
fn reciprocal_bits(
    adjacency: &[Vec<VertexId>],
    repeats: &[bool],
    out_offsets: &[usize],
    threads: usize,
) -> Vec<u64> {
    let n = adjacency.len();
    let mut bits = vec![0u64; out_offsets[n].div_ceil(64)];
    let mark = |range: std::ops::Range<usize>| {
        let first_word = out_offsets[range.start] / 64;
        let mut words = vec![0u64; out_offsets[range.end].div_ceil(64) - first_word];
        for u in range {
            for (i, &v) in adjacency[u].iter().enumerate() {
                if mutual(adjacency, repeats, u, v) {
                    let bit = out_offsets[u] + i - first_word * 64;
                    words[bit / 64] |= 1 << (bit % 64);
                }
            }
        }
        (first_word, words)
    };
    let chunks = vertex_chunks(n, threads);
    let marked: Vec<(usize, Vec<u64>)> = if chunks.len() <= 1 {
        chunks.into_iter().map(mark).collect()
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = chunks
                .into_iter()
                .map(|range| scope.spawn(|| mark(range)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                .collect()
        })
    };
    for (first_word, words) in marked {
        for (at, w) in words.into_iter().enumerate() {
            bits[first_word + at] |= w;
        }
    }
    bits
}

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
    let reciprocal = reciprocal_bits(adjacency, &repeats, &out_offsets, threads);
    let is_marked = |bit: usize| reciprocal[bit / 64] >> (bit % 64) & 1 == 1;
    let mut offsets = vec![0usize; n + 1];
    for (u, list) in adjacency.iter().enumerate() {
        for (i, &v) in list.iter().enumerate() {
            if !is_marked(out_offsets[u] + i) {
                offsets[v as usize + 1] += 1;
            }
        }
    }
    for v in 0..n {
        offsets[v + 1] += offsets[v];
    }
    let edges = offsets[n];
    let mut ids = vec![0; edges];
    // Filling each list from its end, sources in decreasing order, leaves every list sorted
    // and turns `offsets[v + 1]` into v's start without a second cursor array.
    for (u, list) in adjacency.iter().enumerate().rev() {
        for (i, &v) in list.iter().enumerate() {
            if !is_marked(out_offsets[u] + i) {
                offsets[v as usize + 1] -= 1;
                ids[offsets[v as usize + 1]] = u as VertexId;
            }
        }
    }
    offsets.rotate_left(1);
    offsets[n] = edges;
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
