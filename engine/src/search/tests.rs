use super::*;
use crate::casr;
use crate::storage::FLAG_LIVE;
use crate::storage::{EdgeLocation, IndirEntry, PAGE_SIZE};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rustc_hash::FxHashSet as HashSet;

/// An index held in memory: real edge-page bytes, an indirection vector, a coarse
/// "PQ" (coordinates rounded to a grid) and a brute-force entrance sample.
pub(super) struct MemorySource {
    pub(super) dim: usize,
    pub(super) layout: EdgePageLayout,
    pub(super) pages: Vec<Vec<u8>>,
    pub(super) entries: Vec<IndirEntry>,
    pub(super) vectors: Vec<f32>,
    pub(super) coarse: Vec<f32>,
    pub(super) medoid: VertexId,
    pub(super) entrance: Vec<VertexId>,
    pub(super) batches: Vec<usize>,
}

pub(super) fn clustered(n: usize, dim: usize, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let centres: Vec<f32> = (0..8 * dim).map(|_| rng.gen_range(-10.0..10.0)).collect();
    let mut out = Vec::with_capacity(n * dim);
    for _ in 0..n {
        let c = rng.gen_range(0..8);
        for j in 0..dim {
            out.push(centres[c * dim + j] + rng.gen_range(-2.0f32..2.0));
        }
    }
    out
}

pub(super) fn row(data: &[f32], dim: usize, i: usize) -> &[f32] {
    &data[i * dim..(i + 1) * dim]
}

pub(super) fn brute_force(data: &[f32], dim: usize, q: &[f32], k: usize) -> Vec<(VertexId, f32)> {
    let mut all: Vec<(VertexId, f32)> = (0..data.len() / dim)
        .map(|i| {
            (
                i as VertexId,
                Metric::L2.search_distance(q, row(data, dim, i)),
            )
        })
        .collect();
    casr::sort_by_distance(&mut all);
    all.truncate(k);
    all
}

impl MemorySource {
    /// A k-NN graph (degree 12) plus two random long edges per vertex, pages in id order.
    pub(super) fn build(n: usize, dim: usize, seed: u64) -> MemorySource {
        let vectors = clustered(n, dim, seed);
        let mut rng = ChaCha8Rng::seed_from_u64(seed + 1);
        let layout = EdgePageLayout::new(16).unwrap();
        let per_page = layout.slots_per_page();
        let mut pages = vec![vec![0u8; PAGE_SIZE]; n.div_ceil(per_page)];
        for (p, page) in pages.iter_mut().enumerate() {
            layout.init_page(page, p as u32);
        }
        let mut entries = Vec::new();
        for v in 0..n {
            let mut nbrs: Vec<VertexId> = brute_force(&vectors, dim, row(&vectors, dim, v), 13)
                .into_iter()
                .map(|(id, _)| id)
                .filter(|&id| id as usize != v)
                .take(12)
                .collect();
            while nbrs.len() < 14 {
                let r = rng.gen_range(0..n as VertexId);
                if r as usize != v && !nbrs.contains(&r) {
                    nbrs.push(r);
                }
            }
            let (page, slot) = (v / per_page, v % per_page);
            layout
                .put_slot(&mut pages[page], slot, v as VertexId, &nbrs)
                .unwrap();
            entries.push(IndirEntry {
                edge: EdgeLocation {
                    page: page as u32,
                    slot: slot as u16,
                },
                tid: HeapTid {
                    block: v as u32,
                    offset: 1,
                },
                flags: FLAG_LIVE,
            });
        }
        for page in &mut pages {
            layout.seal(page);
        }
        let coarse = vectors.iter().map(|x| x.round()).collect();
        let entrance = (0..n as VertexId).step_by(50).collect();
        MemorySource {
            dim,
            layout,
            pages,
            entries,
            vectors,
            coarse,
            medoid: 0,
            entrance,
            batches: Vec::new(),
        }
    }
}

impl MemorySource {
    /// Removes every edge into `cut`: no traversal can reach those vertices any more.
    pub(super) fn unlink(&mut self, cut: &[VertexId]) {
        let layout = self.layout;
        for page in &mut self.pages {
            for s in 0..layout.slots_per_page() {
                let slot = layout.slot(page, s);
                if slot.is_free() {
                    continue;
                }
                let owner = slot.owner();
                let kept: Vec<VertexId> = slot.neighbours().filter(|v| !cut.contains(v)).collect();
                layout.put_slot(page, s, owner, &kept).unwrap();
            }
            layout.seal(page);
        }
    }
}

impl IndexSource for MemorySource {
    type PqTable = Vec<f32>;

    fn metric(&self) -> Metric {
        Metric::L2
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn edge_layout(&self) -> EdgePageLayout {
        self.layout
    }
    fn entry(&self, v: VertexId) -> Option<IndirEntry> {
        self.entries.get(v as usize).copied()
    }
    fn pq_table(&self, query: &[f32]) -> Vec<f32> {
        query.to_vec()
    }
    fn pq_distance(&self, table: &Vec<f32>, v: VertexId) -> f32 {
        Metric::L2.search_distance(table, row(&self.coarse, self.dim, v as usize))
    }
    fn entry_points(&self, q: &[f32], list: usize, c: &mut SearchCounters) -> Vec<VertexId> {
        let mut scored: Vec<(VertexId, f32)> = self
            .entrance
            .iter()
            .map(|&v| {
                (
                    v,
                    Metric::L2.search_distance(q, row(&self.vectors, self.dim, v as usize)),
                )
            })
            .collect();
        c.entrance_distances += scored.len() as u64;
        casr::sort_by_distance(&mut scored);
        scored.into_iter().take(list).map(|p| p.0).collect()
    }
    fn medoid(&self) -> VertexId {
        self.medoid
    }
    fn id_bound(&self) -> VertexId {
        self.entries.len() as VertexId
    }
    fn read_edge_pages(&mut self, pages: &[u32], out: &mut [u8]) -> io::Result<u64> {
        self.batches.push(pages.len());
        for (i, &p) in pages.iter().enumerate() {
            out[i * PAGE_SIZE..(i + 1) * PAGE_SIZE].copy_from_slice(&self.pages[p as usize]);
        }
        Ok(0)
    }
    fn load_vectors(
        &mut self,
        ids: &[VertexId],
        vectors: &mut Vec<f32>,
        tids: &mut Vec<HeapTid>,
    ) -> io::Result<u64> {
        for &id in ids {
            vectors.extend_from_slice(row(&self.vectors, self.dim, id as usize));
            tids.push(HeapTid {
                block: id,
                offset: 1,
            });
        }
        Ok((ids.len() * PAGE_SIZE) as u64)
    }
}

pub(super) fn queries(n: usize, dim: usize) -> Vec<f32> {
    clustered(n, dim, 99)
}

fn recall(src: &mut MemorySource, params: SearchParams, nq: usize) -> (f64, SearchCounters) {
    let dim = src.dim;
    let qs = queries(nq, dim);
    let mut hit = 0;
    let mut total = SearchCounters::default();
    for qi in 0..nq {
        let q = row(&qs, dim, qi);
        let (hits, c) = search(src, q, params).unwrap();
        total.merge(&c);
        let truth: HashSet<VertexId> = brute_force(&src.vectors, dim, q, params.k)
            .iter()
            .map(|p| p.0)
            .collect();
        hit += hits.iter().filter(|h| truth.contains(&h.id)).count();
        assert!(hits.windows(2).all(|w| w[0].distance <= w[1].distance));
    }
    (hit as f64 / (nq * params.k) as f64, total)
}

#[test]
fn recall_against_brute_force_and_counters() {
    let mut src = MemorySource::build(1500, 16, 7);
    let params = SearchParams {
        list: 40,
        ..SearchParams::default()
    };
    let (r_off, off) = recall(&mut src, params, 50);
    assert!(r_off >= 0.85, "recall@10 with rerank-all {r_off}");
    assert_eq!(
        off.rerank_vector_loads, off.explored_set,
        "CASR off loads everything"
    );
    assert_eq!(off.explored_set, 50 * 40);
    assert!(src.batches.iter().all(|&b| (1..=4).contains(&b)));
    assert!(off.edge_pages_read <= off.expanded);
    assert_eq!(off.packed_vector_loads, 0);

    let casr = SearchParams {
        casr: CasrMode::Window(4),
        ..params
    };
    let (r_casr, on) = recall(&mut src, casr, 50);
    assert!(r_casr >= r_off - 0.05, "CASR {r_casr} vs off {r_off}");
    assert!(on.rerank_vector_loads < off.rerank_vector_loads);
    assert!(
        on.rerank_vector_loads >= 50 * 14,
        "at least K + w loads each"
    );
    assert_eq!(on.mean_window(), 4.0);
    // Traversal is identical: CASR only changes what reranking loads.
    assert_eq!(on.edge_pages_read, off.edge_pages_read);
    assert_eq!(on.hops, off.hops);
}

#[test]
fn ablations_give_sensible_recall() {
    let mut src = MemorySource::build(1500, 16, 8);
    let base = SearchParams {
        list: 40,
        ..SearchParams::default()
    };
    let packed = SearchParams {
        packed: true,
        ..base
    };
    let (r, c) = recall(&mut src, packed, 30);
    assert!(r >= 0.85, "packed recall {r}");
    assert_eq!(c.packed_vector_loads, c.expanded);
    assert_eq!(c.rerank_vector_loads, 0);

    let no_entrance = SearchParams {
        use_entrance: false,
        ..base
    };
    let (r_ne, c_ne) = recall(&mut src, no_entrance, 30);
    assert!(r_ne >= 0.85, "no-entrance recall {r_ne}");
    assert_eq!(c_ne.entrance_distances, 0);
    let (_, c_e) = recall(&mut src, base, 30);
    assert!(c_e.entrance_distances > 0);

    let colocated = SearchParams {
        colocated: true,
        ..base
    };
    let (r_co, c_co) = recall(&mut src, colocated, 30);
    assert!(r_co >= 0.85, "colocated recall {r_co}");
    assert!(c_co.colocated_lists_used > 0);
    assert!(c_co.edge_pages_read < c_e.edge_pages_read);
}

/// L = 40, K = 10, CASR window 4, graph passes only (on these small indexes an exhaustive
/// round would be cheaper and take over).
fn resumable_params() -> SearchParams {
    SearchParams {
        list: 40,
        k: 10,
        casr: CasrMode::Window(4),
        sequential_page_cost: f64::INFINITY,
        ..SearchParams::default()
    }
}

#[test]
fn cursor_resumes_in_distance_order_past_the_list() {
    let mut src = MemorySource::build(1200, 16, 9);
    let q = row(&queries(1, 16), 16, 0).to_vec();
    let params = resumable_params();
    let mut cursor = SearchCursor::new(&mut src, &q, params).unwrap();
    let hits = cursor.next_batch(300).unwrap();
    assert_eq!(hits.len(), 300, "resumed passes go well past L = 40");
    assert!(cursor.passes() > 3);
    assert_eq!(cursor.exhaustive_rounds(), 0);
    assert!(hits.windows(2).all(|w| w[0].distance <= w[1].distance));
    let ids: HashSet<VertexId> = hits.iter().map(|h| h.id).collect();
    assert_eq!(ids.len(), 300, "no duplicates");
    assert!(hits.iter().all(|h| h.tid.block == h.id));
    // A vertex comes back only once nothing seen can be closer: the first 300 are the true
    // first 300 but for what the first pass and the graph missed.
    let truth: HashSet<VertexId> = brute_force(&src.vectors, 16, &q, 300)
        .iter()
        .map(|p| p.0)
        .collect();
    let found = hits.iter().filter(|h| truth.contains(&h.id)).count();
    assert!(found >= 290, "only {found} of the true top-300");
}

#[test]
fn a_short_rerank_tail_is_read_with_the_batch_before_it() {
    // L = 16, K = 10, w = 5: CASR's first batch is 15 vectors; whenever the top-K changes
    // after position 10 the 16th follows alone. Reading it with the first batch saves that
    // batch and returns the same hits.
    let mut src = MemorySource::build(1500, 16, 7);
    let dim = src.dim;
    let qs = queries(40, dim);
    let with_tail = SearchParams {
        list: 16,
        k: 10,
        casr: CasrMode::Window(5),
        single_pass: true,
        ..SearchParams::default()
    };
    let without = SearchParams {
        read_rerank_tail: false,
        ..with_tail
    };
    let (mut tail_total, mut plain_total) = (SearchCounters::default(), SearchCounters::default());
    for qi in 0..40 {
        let q = row(&qs, dim, qi);
        let (a, ca) = search(&mut src, q, with_tail).unwrap();
        let (b, cb) = search(&mut src, q, without).unwrap();
        assert_eq!(
            a, b,
            "query {qi}: the tail changes which vectors are read, not the hits"
        );
        assert!(ca.read_batches <= cb.read_batches, "query {qi}");
        assert!(
            ca.rerank_vector_loads >= cb.rerank_vector_loads,
            "query {qi}"
        );
        assert!(
            ca.rerank_vector_loads <= cb.rerank_vector_loads + 2,
            "at most w / 2 more"
        );
        tail_total.merge(&ca);
        plain_total.merge(&cb);
    }
    assert!(
        tail_total.read_batches < plain_total.read_batches,
        "some query asked for the 16th alone: {} batches with the tail, {} without",
        tail_total.read_batches,
        plain_total.read_batches
    );
}

#[test]
fn queued_hits_are_the_ones_next_hit_returns() {
    let mut src = MemorySource::build(1200, 16, 9);
    let q = row(&queries(1, 16), 16, 0).to_vec();
    let params = resumable_params();
    let mut peeking = SearchCursor::new(&mut src, &q, params).unwrap();
    assert_eq!(
        peeking.queued().len(),
        0,
        "nothing runs before it is asked to"
    );
    let mut seen = Vec::new();
    let mut refills = 0;
    while seen.len() < 200 {
        peeking.fill_queue().unwrap();
        let ahead: Vec<SearchHit> = peeking.queued().copied().collect();
        assert!(
            !ahead.is_empty(),
            "a 1,200-row index is not exhausted at 200"
        );
        refills += 1;
        for expected in ahead {
            let hit = peeking.next_hit().unwrap().expect("queued");
            assert_eq!((hit.id, hit.tid), (expected.id, expected.tid));
            seen.push(hit);
        }
    }
    assert!(refills > 1, "the first pass and at least one resumed pass");
    // Peeking changes nothing: a cursor that never peeked returns the same hits.
    let mut plain = SearchCursor::new(&mut src, &q, params).unwrap();
    let direct = plain.next_batch(seen.len()).unwrap();
    let ids = |h: &[SearchHit]| h.iter().map(|h| h.id).collect::<Vec<_>>();
    assert_eq!(ids(&seen), ids(&direct));
}

#[test]
fn cursor_exhausts_a_small_index() {
    let mut src = MemorySource::build(150, 8, 10);
    let q = row(&queries(1, 8), 8, 0).to_vec();
    let params = SearchParams {
        list: 10,
        casr: CasrMode::Window(2),
        ..SearchParams::default()
    };
    let mut cursor = SearchCursor::new(&mut src, &q, params).unwrap();
    let mut hits = Vec::new();
    while let Some(hit) = cursor.next_hit().unwrap() {
        hits.push(hit);
    }
    // Every vertex is either returned or skipped for arriving after a farther one, and
    // only the first pass can skip here: the rest is one exact round.
    assert_eq!(hits.len() as u64 + cursor.order_skips(), 150);
    assert_eq!(cursor.exhaustive_rounds(), 1);
    assert!(cursor.next_hit().unwrap().is_none(), "stays exhausted");
    assert!(hits.windows(2).all(|w| w[0].distance <= w[1].distance));
    let truth = brute_force(&src.vectors, 8, &q, 150);
    let first_pass_last = hits[params.k - 1].distance;
    for t in truth.iter().filter(|t| !hits.iter().any(|h| h.id == t.0)) {
        assert!(
            t.1 < first_pass_last,
            "{} skipped after the first pass",
            t.0
        );
    }
    let expected: Vec<VertexId> = truth
        .iter()
        .map(|t| t.0)
        .filter(|id| hits.iter().any(|h| h.id == *id))
        .collect();
    assert_eq!(hits.iter().map(|h| h.id).collect::<Vec<_>>(), expected);
}

#[test]
fn calibration_sample_only_from_rerank_all() {
    let mut src = MemorySource::build(600, 8, 14);
    let q = row(&queries(1, 8), 8, 0).to_vec();
    let mut cursor = SearchCursor::new(&mut src, &q, SearchParams::default()).unwrap();
    cursor.next_batch(10).unwrap();
    let w = cursor.calibration_sample().unwrap();
    assert!((1..=40).contains(&w));
    let windowed = SearchParams {
        casr: CasrMode::Window(w),
        ..SearchParams::default()
    };
    let mut cursor = SearchCursor::new(&mut src, &q, windowed).unwrap();
    let hits_w = cursor.next_batch(10).unwrap();
    assert_eq!(cursor.calibration_sample(), None);
    let (hits_all, _) = search(&mut src, &q, SearchParams::default()).unwrap();
    // With the query's own minimal safe window CASR finds exactly the rerank-all top-K.
    assert_eq!(
        hits_w.iter().map(|h| h.id).collect::<Vec<_>>(),
        hits_all.iter().map(|h| h.id).collect::<Vec<_>>()
    );
}

#[test]
fn the_first_pass_keeps_its_best_reranked_rows_for_a_result_cache() {
    let mut src = MemorySource::build(1200, 16, 11);
    let q = row(&queries(1, 16), 16, 0).to_vec();
    let params = SearchParams {
        list: 40,
        k: 10,
        casr: CasrMode::Off,
        keep_ranked: 20,
        ..SearchParams::default()
    };
    let vectors = src.vectors.clone();
    let mut cursor = SearchCursor::new(&mut src, &q, params).unwrap();
    assert!(cursor.first_pass_rows().is_empty());
    let first = cursor.next_batch(10).unwrap();
    let kept = cursor.first_pass_rows();
    // Rerank-all scores the whole list: 20 rows, closest first, exact, and the first k are
    // the pass's own results.
    assert_eq!(kept.len(), 20);
    assert!(kept.windows(2).all(|w| w[0].2 <= w[1].2));
    for (tid, v, d) in &kept {
        assert_eq!(*v, row(&vectors, 16, tid.block as usize));
        assert_eq!(*d, Metric::L2.search_distance(&q, v));
    }
    let tids: Vec<HeapTid> = first.iter().map(|h| h.tid).collect();
    let kept_tids: Vec<HeapTid> = kept.iter().take(10).map(|r| r.0).collect();
    assert_eq!(tids, kept_tids);
}

#[test]
fn a_single_pass_cursor_explores_the_same_list_and_then_ends() {
    let mut src = MemorySource::build(1200, 16, 12);
    let qs = queries(20, 16);
    let params = SearchParams {
        list: 30,
        record_lists: true,
        ..SearchParams::default()
    };
    for qi in 0..20 {
        let q = row(&qs, 16, qi);
        let (explored, counters) = {
            let mut c = SearchCursor::new(&mut src, q, params).unwrap();
            c.run_first_pass().unwrap();
            (c.explored(), c.counters())
        };
        let single = SearchParams {
            single_pass: true,
            ..params
        };
        let mut c = SearchCursor::new(&mut src, q, single).unwrap();
        c.run_first_pass().unwrap();
        assert_eq!(c.explored(), explored, "query {qi}: same candidate list");
        assert_eq!(c.counters().hops, counters.hops);
        // The first pass's k results, then nothing: no later pass runs without the spill.
        let hits: Vec<SearchHit> = c.by_ref().map(|h| h.unwrap()).collect();
        assert_eq!(hits.len(), params.k, "query {qi}");
        assert_eq!(c.passes(), 1);
    }
}
