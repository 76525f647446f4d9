//! `casr-sweep`: every CASR stopping rule replayed offline on rerank-all explored sets.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use navis_engine::casr::{
    max_safe_pq_ratio, min_safe_window_with_floor, percentile, ratio_percentile, rerank_rule,
    Rerank, StopRule,
};
use navis_engine::counters::SearchCounters;
use navis_engine::dataset::{read_fbin_rows, read_ground_truth};
use navis_engine::index::{DiskReader, Index};
use navis_engine::search::{prepare_query, CasrMode, IndexSource, SearchCursor, SearchParams};
use navis_engine::storage::{EdgePageLayout, HeapTid, IndirEntry};
use navis_engine::{Metric, VertexId};

use super::{Args, Result};

/// A [`DiskReader`] that remembers every vector batch it loads: with CASR off the one rerank
/// batch of a first pass is the whole explored set in PQ order, which `casr-sweep` replays
/// offline under many stopping rules.
struct Recorder<'a> {
    inner: DiskReader<'a>,
    loads: Vec<(Vec<VertexId>, Vec<f32>)>,
}

impl IndexSource for Recorder<'_> {
    type PqTable = <DiskReader<'static> as IndexSource>::PqTable;

    fn metric(&self) -> Metric {
        self.inner.metric()
    }
    fn dim(&self) -> usize {
        self.inner.dim()
    }
    fn edge_layout(&self) -> EdgePageLayout {
        self.inner.edge_layout()
    }
    fn entry(&self, v: VertexId) -> Option<IndirEntry> {
        self.inner.entry(v)
    }
    fn pq_table(&self, query: &[f32]) -> Self::PqTable {
        self.inner.pq_table(query)
    }
    fn pq_distance(&self, table: &Self::PqTable, v: VertexId) -> f32 {
        self.inner.pq_distance(table, v)
    }
    fn entry_points(
        &self,
        query: &[f32],
        list: usize,
        counters: &mut SearchCounters,
    ) -> Vec<VertexId> {
        self.inner.entry_points(query, list, counters)
    }
    fn medoid(&self) -> VertexId {
        self.inner.medoid()
    }
    fn id_bound(&self) -> VertexId {
        self.inner.id_bound()
    }
    fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }
    fn read_edge_pages(&mut self, pages: &[u32], out: &mut [u8]) -> std::io::Result<u64> {
        self.inner.read_edge_pages(pages, out)
    }
    fn load_vectors(
        &mut self,
        ids: &[VertexId],
        vectors: &mut Vec<f32>,
        tids: &mut Vec<HeapTid>,
    ) -> std::io::Result<u64> {
        let start = vectors.len();
        let bytes = self.inner.load_vectors(ids, vectors, tids)?;
        self.loads.push((ids.to_vec(), vectors[start..].to_vec()));
        Ok(bytes)
    }
}

/// One query's explored set in PQ order with its vectors and PQ distances.
struct Explored {
    query: Vec<f32>,
    ids: Vec<VertexId>,
    vectors: Vec<f32>,
    pq: Vec<f32>,
}

impl Explored {
    /// Replays a rerank of this query under `rule` (all candidates with no signal).
    fn replay(&self, metric: Metric, k: usize, rule: StopRule) -> Result<Rerank> {
        let dim = self.query.len();
        let pos: HashMap<VertexId, usize> =
            self.ids.iter().enumerate().map(|(i, &v)| (v, i)).collect();
        let mut loader = |ids: &[VertexId], out: &mut Vec<f32>| -> std::io::Result<()> {
            for id in ids {
                let i = pos[id];
                out.extend_from_slice(&self.vectors[i * dim..(i + 1) * dim]);
            }
            Ok(())
        };
        rerank_rule(
            &self.query,
            metric,
            &self.ids,
            &self.pq,
            k.min(self.ids.len()).max(1),
            rule,
            &mut loader,
        )
        .map_err(|e| e.to_string())
    }
}

/// Every CASR stopping rule measured against rerank-all on the same explored sets: each query
/// is searched once per L with CASR off (traversal does not depend on CASR), and the rerank is
/// replayed offline through `casr::rerank_rule`, so loads and recall are exactly what a search
/// with that rule would give. Rules are calibrated on the first `--warmup` queries, as
/// `Index::warm_up` does, and evaluated on all queries (the warm-up ones included, as in
/// `search`).
pub(super) fn cmd_casr_sweep(a: &Args) -> Result<()> {
    let dir = PathBuf::from(a.str("index")?);
    let qpath = PathBuf::from(a.str("queries")?);
    let gpath = PathBuf::from(a.str("gt")?);
    let k: usize = a.num("k", 10)?;
    let warmup: usize = a.num("warmup", 1000)?;
    let parse_list = |key: &str, default: &str| -> Result<Vec<f64>> {
        a.values
            .get(key)
            .map_or(default, String::as_str)
            .split(',')
            .map(|s| {
                s.trim()
                    .parse()
                    .map_err(|_| format!("--{key}: bad value {s:?}"))
            })
            .collect()
    };
    let lists: Vec<usize> = parse_list("lists", "40,80,160")?
        .into_iter()
        .map(|l| l as usize)
        .collect();
    let percentiles = parse_list("percentiles", "100,99,95,90,80")?;
    let floors: Vec<usize> = parse_list("floors", "0,15,20")?
        .into_iter()
        .map(|f| f as usize)
        .collect();
    let limit_q = a.opt_num::<usize>("limit-queries")?;
    let queries =
        read_fbin_rows(&qpath, limit_q).map_err(|e| format!("{}: {e}", qpath.display()))?;
    let gt = read_ground_truth(&gpath).map_err(|e| format!("{}: {e}", gpath.display()))?;
    let index = Index::open(&dir).map_err(|e| e.to_string())?;
    let metric = index.metric();
    let dim = index.dim();
    let nq = queries.data.len() / queries.dim;
    let warm = warmup.clamp(1, nq);
    println!(
        "index {} ({} vertices, {dim}-d); {nq} queries, warm-up on the first {warm}; k={k}\n",
        dir.display(),
        index.len()
    );
    println!("| L | rule | setting | mean loads | explored | loads/explored | batches/q | recall@{k} | Δ vs off (pt) |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for &list in &lists {
        let t0 = Instant::now();
        let mut rec = Recorder {
            inner: index.reader().map_err(|e| e.to_string())?,
            loads: Vec::new(),
        };
        let params = SearchParams {
            k,
            list,
            casr: CasrMode::Off,
            ..SearchParams::default()
        };
        let mut explored = Vec::with_capacity(nq);
        for q in queries.data.chunks_exact(dim) {
            rec.loads.clear();
            let hits = {
                let mut cursor =
                    SearchCursor::new(&mut rec, q, params).map_err(|e| e.to_string())?;
                cursor.next_batch(k).map_err(|e| e.to_string())?
            };
            if rec.loads.len() > 1 {
                return Err(format!(
                    "a CASR-off first pass loaded {} batches, expected one",
                    rec.loads.len()
                ));
            }
            let (ids, vectors) = rec.loads.pop().unwrap_or_default();
            let query = prepare_query(metric, dim, q).map_err(|e| e.to_string())?;
            let table = rec.pq_table(&query);
            let pq: Vec<f32> = ids.iter().map(|&v| rec.pq_distance(&table, v)).collect();
            let e = Explored {
                query,
                ids,
                vectors,
                pq,
            };
            // The replayed rerank-all must reproduce the search's own answer.
            let all = e.replay(
                metric,
                k,
                StopRule {
                    window: None,
                    pq_ratio: None,
                    min_loads: 0,
                },
            )?;
            let mine: Vec<VertexId> = all.sorted_by_exact().iter().take(k).map(|p| p.0).collect();
            let theirs: Vec<VertexId> = hits.iter().map(|h| h.id).collect();
            if mine != theirs {
                return Err(format!(
                    "replay differs from the search: {mine:?} vs {theirs:?}"
                ));
            }
            explored.push((e, all));
        }
        eprintln!(
            "L={list}: {nq} CASR-off searches recorded in {:.1} s",
            t0.elapsed().as_secs_f64()
        );
        let recall_of = |qi: usize, r: &Rerank| -> usize {
            let truth = gt.neighbors(qi);
            let truth = &truth[..k.min(truth.len())];
            r.sorted_by_exact()
                .iter()
                .take(k)
                .filter(|p| truth.contains(&p.0))
                .count()
        };
        let total_explored: usize = explored.iter().map(|(e, _)| e.ids.len()).sum();
        let off_hits: usize = explored
            .iter()
            .enumerate()
            .map(|(qi, (_, all))| recall_of(qi, all))
            .sum();
        let off_recall = off_hits as f64 / (nq * k) as f64;
        let row = |rule: &str, setting: String, runs: &[Rerank]| {
            let loads: usize = runs.iter().map(Rerank::loads).sum();
            let batches: usize = runs.iter().map(|r| r.batches.len()).sum();
            let hits: usize = runs
                .iter()
                .enumerate()
                .map(|(qi, r)| recall_of(qi, r))
                .sum();
            let recall = hits as f64 / (nq * k) as f64;
            println!(
                "| {list} | {rule} | {setting} | {:.1} | {:.1} | {:.3} | {:.2} | {recall:.4} | {:+.2} |",
                loads as f64 / nq as f64,
                total_explored as f64 / nq as f64,
                loads as f64 / total_explored.max(1) as f64,
                batches as f64 / nq as f64,
                (recall - off_recall) * 100.0,
            );
        };
        println!(
            "| {list} | CASR off | - | {:.1} | {:.1} | 1.000 | 1.00 | {off_recall:.4} | 0 |",
            total_explored as f64 / nq as f64,
            total_explored as f64 / nq as f64
        );
        // Lower bound for any rule that loads a PQ-order prefix: stop right at the last change.
        let oracle: usize = explored.iter().map(|(_, all)| all.last_change()).sum();
        println!(
            "| {list} | oracle (stop at last change) | - | {:.1} | {:.1} | {:.3} | - | {off_recall:.4} | 0 |",
            oracle as f64 / nq as f64,
            total_explored as f64 / nq as f64,
            oracle as f64 / total_explored.max(1) as f64
        );
        for &floor in &floors {
            let mut windows: Vec<usize> = explored[..warm]
                .iter()
                .filter(|(_, all)| all.loads() > 0)
                .map(|(_, all)| min_safe_window_with_floor(&all.change_positions, floor))
                .collect();
            let mut ratios: Vec<f32> = explored[..warm]
                .iter()
                .filter(|(_, all)| all.loads() > 0)
                .map(|(e, all)| max_safe_pq_ratio(all, &e.pq, k, floor))
                .collect();
            for &p in &percentiles {
                let w = percentile(&mut windows, p);
                let rule = StopRule {
                    window: Some(w),
                    pq_ratio: None,
                    min_loads: floor,
                };
                let runs: Vec<Rerank> = explored
                    .iter()
                    .map(|(e, _)| e.replay(metric, k, rule))
                    .collect::<Result<_>>()?;
                row("window", format!("P{p} w={w} floor={floor}"), &runs);
            }
            if metric != Metric::InnerProduct {
                for &p in &percentiles {
                    let c = ratio_percentile(&mut ratios, p);
                    let rule = StopRule {
                        window: None,
                        pq_ratio: Some(c),
                        min_loads: floor,
                    };
                    let runs: Vec<Rerank> = explored
                        .iter()
                        .map(|(e, _)| e.replay(metric, k, rule))
                        .collect::<Result<_>>()?;
                    row("PQ ratio", format!("P{p} c={c:.3} floor={floor}"), &runs);
                }
            }
        }
    }
    Ok(())
}
