//! BNF, block neighbour frequency: refining pages after the greedy fill, on several threads.
//!
//! A pass moves each vertex to the page holding most of its out- and in-neighbours, or swaps
//! it with the member of that (full) page whose exchange gains most. Every move or swap
//! strictly increases the number of edges inside pages, so passes converge.
//!
//! At a million rows a pass is a cache miss per neighbour, and the refinement was a fifth of
//! CREATE INDEX on one thread. Most of that is *finding* a move: tallying a vertex's
//! neighbours by page and, when the target page is full, judging every member of it as a
//! swap partner. So a pass takes the vertices in batches of ids (1,024 by default): threads propose a
//! move for each vertex of the batch against the pages as the batch found them, then one
//! thread commits the proposals in id order, each after checking that it still gains on the
//! pages as they are by then (an earlier commit may have moved one of the pair or filled the
//! page). Proposals depend only on the pages and commits are serial, so the result does not
//! depend on the number of threads or their timing. With a batch of one vertex this is the
//! serial BNF exactly; a larger batch loses the moves that a commit earlier in the same batch
//! would have changed.

use super::incoming::Incoming;
use super::parallel::{map_vertices, run_parts, vertex_chunks};
use crate::VertexId;

/// How the refinement runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RefineOptions {
    /// At most this many passes; fewer when a pass changes almost nothing.
    pub passes: usize,
    /// Vertices proposed for against one state of the pages (module comment).
    pub batch: usize,
    pub threads: usize,
}

/// Refines `page_of` (every page but the last full, as BNP leaves it) and returns it, or
/// `None` as soon as `between_batches` (called before each batch with the vertices refined
/// so far and the most there can be) returns true.
pub(super) fn refine(
    adjacency: &[Vec<VertexId>],
    incoming: &Incoming,
    page_of: Vec<u32>,
    pages: usize,
    slots_per_page: usize,
    options: &RefineOptions,
    between_batches: &dyn Fn(u64, u64) -> bool,
) -> Option<Vec<u32>> {
    let n = adjacency.len();
    let threads = options.threads.max(1);
    let mut state = PageState::new(adjacency, incoming, page_of, pages, slots_per_page, threads);
    let mut scratch: Vec<Scratch> = (0..threads.min(n.max(1)))
        .map(|_| Scratch::new(n, pages))
        .collect();
    let mut proposals = Vec::new();
    let most = (options.passes * n) as u64;
    let batch_len = options.batch.max(1);
    for pass in 0..options.passes {
        let mut changes = 0;
        for first in (0..n).step_by(batch_len) {
            if between_batches((pass * n + first) as u64, most) {
                return None;
            }
            let batch = first..(first + batch_len).min(n);
            state.propose(batch, &mut scratch, &mut proposals);
            changes += proposals.iter().filter(|p| state.commit(p)).count();
        }
        // A pass that changes almost nothing is not worth repeating: each costs a scan of
        // every neighbour list.
        if changes <= n / 1000 {
            break;
        }
    }
    Some(state.page_of)
}

/// A change that gained when it was proposed.
#[derive(Clone, Copy, Debug)]
enum Proposal {
    /// `u` moves from `home` to `target`, which had room.
    Move { u: VertexId, home: u32, target: u32 },
    /// `u` on `home` and `w` on `target` trade pages.
    Swap {
        u: VertexId,
        home: u32,
        target: u32,
        w: VertexId,
    },
}

/// The pages as refinement goes.
struct PageState<'g> {
    adjacency: &'g [Vec<VertexId>],
    incoming: &'g Incoming,
    page_of: Vec<u32>,
    members: Vec<Vec<VertexId>>,
    /// How many of v's out- and in-neighbours share its page, so that judging a swap costs
    /// one neighbour scan per candidate instead of two.
    internal: Vec<i32>,
    /// Each vertex's weighted degree ([`Incoming::degree`]); the graph does not change while
    /// pages are refined, and a swap search asks for it once per member of the target page.
    degree: Vec<i32>,
    slots_per_page: usize,
}

/// One proposing thread's scratch.
struct Scratch {
    /// Links of one vertex to each page, 0 between uses, and the pages that have some.
    page_count: Vec<u32>,
    touched: Vec<u32>,
    /// The weight of u's link to each vertex, 0 for non-neighbours: filled from u's links
    /// before a swap search and cleared after it, so finding the weight of the link between
    /// u and a candidate costs one load instead of a scan of u's links.
    link_weight: Vec<u32>,
    proposals: Vec<Proposal>,
}

impl Scratch {
    fn new(vertices: usize, pages: usize) -> Self {
        Scratch {
            page_count: vec![0; pages],
            touched: Vec::new(),
            link_weight: vec![0; vertices],
            proposals: Vec::new(),
        }
    }
}

impl<'g> PageState<'g> {
    fn new(
        adjacency: &'g [Vec<VertexId>],
        incoming: &'g Incoming,
        page_of: Vec<u32>,
        pages: usize,
        slots_per_page: usize,
        threads: usize,
    ) -> Self {
        let n = adjacency.len();
        let mut members = vec![Vec::with_capacity(slots_per_page); pages];
        for (v, &p) in page_of.iter().enumerate() {
            members[p as usize].push(v as VertexId);
        }
        let internal = map_vertices(n, threads, |v| {
            links_to_page(v, page_of[v], adjacency, incoming, &page_of)
        });
        let degree = map_vertices(n, threads, |v| incoming.degree(adjacency, v) as i32);
        PageState {
            adjacency,
            incoming,
            page_of,
            members,
            internal,
            degree,
            slots_per_page,
        }
    }

    /// The proposals for the vertices of `batch`, in id order, into `out`; each thread of
    /// `scratch` takes a contiguous share.
    fn propose(
        &self,
        batch: std::ops::Range<usize>,
        scratch: &mut [Scratch],
        out: &mut Vec<Proposal>,
    ) {
        out.clear();
        let shares = vertex_chunks(batch.len(), scratch.len());
        let parts: Vec<_> = shares.into_iter().zip(scratch.iter_mut()).collect();
        run_parts(parts, |(share, scratch)| {
            scratch.proposals.clear();
            for u in batch.start + share.start..batch.start + share.end {
                if let Some(p) = self.proposal_for(u, scratch) {
                    scratch.proposals.push(p);
                }
            }
        });
        for s in scratch.iter() {
            out.extend_from_slice(&s.proposals);
        }
    }

    /// The page of `u`'s neighbours that gains most, and how: a move when it has room, else
    /// a swap with its best partner.
    fn proposal_for(&self, u: usize, scratch: &mut Scratch) -> Option<Proposal> {
        let home = self.page_of[u];
        let (target, at_target) = self.best_other_page(u, home, scratch)?;
        let gain_u = at_target as i32 - self.internal[u];
        if gain_u <= 0 {
            return None;
        }
        let u = u as VertexId;
        if self.members[target as usize].len() < self.slots_per_page {
            return Some(Proposal::Move { u, home, target });
        }
        let w = self.best_swap_partner(u as usize, gain_u, home, target, scratch)?;
        Some(Proposal::Swap { u, home, target, w })
    }

    /// Makes `proposal` if it still gains on the pages as they are now. Returns whether it
    /// did.
    fn commit(&mut self, proposal: &Proposal) -> bool {
        match *proposal {
            Proposal::Move { u, home, target } => {
                let ui = u as usize;
                if self.page_of[ui] != home
                    || self.members[target as usize].len() >= self.slots_per_page
                    || self.links(ui, target) <= self.internal[ui]
                {
                    return false;
                }
                self.move_vertex(u, target);
            }
            Proposal::Swap { u, home, target, w } => {
                let (ui, wi) = (u as usize, w as usize);
                if self.page_of[ui] != home || self.page_of[wi] != target {
                    return false;
                }
                let gain_u = self.links(ui, target) - self.internal[ui];
                let gain_w = self.links(wi, home) - self.internal[wi];
                let between: i32 = self
                    .incoming
                    .weighted(self.adjacency, ui)
                    .filter(|&(v, _)| v == w)
                    .map(|(_, weight)| weight)
                    .sum();
                if gain_u + gain_w - 2 * between <= 0 {
                    return false;
                }
                self.move_vertex(u, target);
                self.move_vertex(w, home);
            }
        }
        true
    }

    /// Out- plus in-neighbours of `u` on `page`.
    fn links(&self, u: usize, page: u32) -> i32 {
        links_to_page(u, page, self.adjacency, self.incoming, &self.page_of)
    }

    /// The page other than `home` holding most of `u`'s out- and in-neighbours (self
    /// excluded; the lowest page number among equals), with their count. Counting into a
    /// page-indexed array, rather than sorting the neighbours' pages, is one store per link.
    fn best_other_page(&self, u: usize, home: u32, scratch: &mut Scratch) -> Option<(u32, u32)> {
        let (count, touched) = (&mut scratch.page_count, &mut scratch.touched);
        touched.clear();
        for (v, weight) in self.incoming.weighted(self.adjacency, u) {
            if v as usize != u {
                let page = self.page_of[v as usize];
                if count[page as usize] == 0 {
                    touched.push(page);
                }
                count[page as usize] += weight as u32;
            }
        }
        let mut best: Option<(u32, u32)> = None;
        for &page in touched.iter() {
            let c = std::mem::take(&mut count[page as usize]);
            if page != home && best.is_none_or(|(p, b)| c > b || (c == b && page < p)) {
                best = Some((page, c));
            }
        }
        best
    }

    /// The member of `target` whose exchange with `u` (moving to `target` from `home`, gaining
    /// `gain_u`) gains most, if any exchange gains at all.
    fn best_swap_partner(
        &self,
        u: usize,
        gain_u: i32,
        home: u32,
        target: u32,
        scratch: &mut Scratch,
    ) -> Option<VertexId> {
        // u's links to itself never count (as in `links_to_page`), so they are not marked.
        // A sum counts every occurrence of v in u's out- and in-lists, as the scan it replaces
        // did (Vamana lists hold each id once; `place` accepts repeats).
        let link_weight = &mut scratch.link_weight;
        for (v, weight) in self.incoming.weighted(self.adjacency, u) {
            if v as usize != u {
                link_weight[v as usize] += weight as u32;
            }
        }
        let mut best: Option<(i32, VertexId)> = None;
        for &w in &self.members[target as usize] {
            let wi = w as usize;
            // Upper bound on w's gain: all its outside links would have to point at `home`.
            if gain_u + self.degree[wi] - 2 * self.internal[wi] <= 0 {
                continue;
            }
            let gain_w = self.links(wi, home) - self.internal[wi];
            if gain_u + gain_w <= 0 {
                continue;
            }
            let between = link_weight[wi] as i32;
            let gain = gain_u + gain_w - 2 * between;
            if gain > 0 && best.is_none_or(|(g, b)| gain > g || (gain == g && w < b)) {
                best = Some((gain, w));
            }
        }
        for (v, _) in self.incoming.weighted(self.adjacency, u) {
            link_weight[v as usize] = 0;
        }
        best.map(|(_, w)| w)
    }

    /// Moves `v` to page `to`, keeping `members` and the `internal` counts of v and of its
    /// neighbours on the two pages exact.
    fn move_vertex(&mut self, v: VertexId, to: u32) {
        let vi = v as usize;
        let from = self.page_of[vi];
        for (y, weight) in self.incoming.weighted(self.adjacency, vi) {
            let yi = y as usize;
            if yi == vi {
                continue;
            }
            if self.page_of[yi] == from {
                self.internal[yi] -= weight;
            } else if self.page_of[yi] == to {
                self.internal[yi] += weight;
            }
        }
        let list = &mut self.members[from as usize];
        if let Some(at) = list.iter().position(|&x| x == v) {
            list.swap_remove(at);
        }
        self.members[to as usize].push(v);
        self.page_of[vi] = to;
        self.internal[vi] = self.links(vi, to);
    }
}

/// Out- plus in-neighbours of `u` on page `page`.
fn links_to_page(
    u: usize,
    page: u32,
    adjacency: &[Vec<VertexId>],
    incoming: &Incoming,
    page_of: &[u32],
) -> i32 {
    incoming
        .weighted(adjacency, u)
        .filter(|&(v, _)| v as usize != u && page_of[v as usize] == page)
        .map(|(_, weight)| weight)
        .sum()
}
