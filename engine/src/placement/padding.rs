//! BNP, block neighbour padding: the first, greedy fill of edge pages.

use super::UNASSIGNED;
use crate::VertexId;
use std::collections::VecDeque;

/// BNP: each page is filled breadth-first from its own seed, so it holds a compact ball
/// around the seed. The seed is taken from the previous page's unexplored frontier (so
/// consecutive pages border each other), else the lowest unassigned id (a new component).
/// Each page restarts its breadth-first queue: one global BFS would cut pages out of a
/// single BFS layer, whose vertices are mutually non-adjacent (on a grid, a diagonal line).
pub(super) fn neighbour_padding(adjacency: &[Vec<VertexId>], slots_per_page: usize) -> Vec<u32> {
    let n = adjacency.len();
    let mut page_of = vec![UNASSIGNED; n];
    let mut seeds: VecDeque<VertexId> = VecDeque::new();
    let mut queue: VecDeque<VertexId> = VecDeque::new();
    let mut next_unassigned = 0usize;
    let mut page = 0u32;
    let mut filled = 0usize;
    for _ in 0..n {
        let v = match pop_unassigned(&mut queue, &page_of)
            .or_else(|| pop_unassigned(&mut seeds, &page_of))
        {
            Some(v) => v,
            None => {
                while page_of[next_unassigned] != UNASSIGNED {
                    next_unassigned += 1;
                }
                next_unassigned as VertexId
            }
        };
        page_of[v as usize] = page;
        queue.extend(
            adjacency[v as usize]
                .iter()
                .filter(|&&w| page_of[w as usize] == UNASSIGNED),
        );
        filled += 1;
        if filled == slots_per_page {
            page += 1;
            filled = 0;
            std::mem::swap(&mut seeds, &mut queue);
            queue.clear();
        }
    }
    page_of
}

fn pop_unassigned(frontier: &mut VecDeque<VertexId>, page_of: &[u32]) -> Option<VertexId> {
    while let Some(v) = frontier.pop_front() {
        if page_of[v as usize] == UNASSIGNED {
            return Some(v);
        }
    }
    None
}
