//! Running a query set with one or more threads and printing the search tables, the same for
//! both layouts (`--layout side`, `--layout relation`).

use std::time::{Duration, Instant};

use navis_engine::cache::CacheStats;
use navis_engine::counters::SearchCounters;
use navis_engine::dataset::{read_fbin_rows, read_ground_truth, Dataset, GroundTruth};
use navis_engine::index::CasrSetting;
use navis_engine::search::{SearchHit, SearchParams};
use navis_engine::VertexId;

use super::{parse_lists, Args, Result};

/// What `search` reads for either layout: queries (`--queries`, `--limit-queries`), ground
/// truth (`--gt`), `--k`, `--lists` and `--threads`.
pub struct SearchInputs {
    pub queries: Dataset,
    pub gt: GroundTruth,
    pub k: usize,
    pub lists: Vec<usize>,
    pub threads: usize,
}

impl SearchInputs {
    pub fn parse(a: &Args) -> Result<SearchInputs> {
        let qpath = a.str("queries")?;
        let gpath = a.str("gt")?;
        let limit_q = a.opt_num::<usize>("limit-queries")?;
        Ok(SearchInputs {
            queries: read_fbin_rows(qpath, limit_q).map_err(|e| format!("{qpath}: {e}"))?,
            gt: read_ground_truth(gpath).map_err(|e| format!("{gpath}: {e}"))?,
            k: a.num("k", 10)?,
            lists: parse_lists(a, "20,40,80,160")?,
            threads: a.num("threads", 1)?,
        })
    }

    pub fn nq(&self) -> usize {
        self.queries.data.len() / self.queries.dim
    }
}

/// One search thread's (query, ids, latency) triples and its counters.
type ThreadResult = (Vec<(usize, Vec<VertexId>, Duration)>, SearchCounters);

/// One search list's results.
pub struct Row {
    pub list: usize,
    pub recall: f64,
    pub qps: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub c: SearchCounters,
    pub window: Option<usize>,
    /// Edge-page cache counters of this row's queries, when a cache is attached.
    pub cache: Option<CacheStats>,
}

/// Searches every query with `threads` threads (query `i` on thread `i % threads`). `make`
/// runs once on each thread and returns that thread's search function (which owns its
/// reader); recall@k is against `gt`, by heap TID block (navis-bench builds and inserts row
/// `i` with heap block `i`, so the TID names the ground-truth row also after inserts and id
/// reuse).
pub fn run_queries_with<M, S>(
    queries: &[f32],
    dim: usize,
    gt: &GroundTruth,
    params: SearchParams,
    threads: usize,
    make: M,
) -> Result<Row>
where
    M: Fn() -> Result<S> + Sync,
    S: FnMut(&[f32]) -> Result<(Vec<SearchHit>, SearchCounters)>,
{
    let nq = queries.len() / dim;
    let threads = threads.clamp(1, nq.max(1));
    let make = &make;
    let started = Instant::now();
    let parts: Vec<Result<ThreadResult>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let mut search = make()?;
                    let mut total = SearchCounters::default();
                    let mut out = Vec::new();
                    for qi in (t..nq).step_by(threads) {
                        let q = &queries[qi * dim..(qi + 1) * dim];
                        let t0 = Instant::now();
                        let (hits, c) = search(q)?;
                        let rows = hits.iter().map(|h| h.tid.block as VertexId).collect();
                        out.push((qi, rows, t0.elapsed()));
                        total.merge(&c);
                    }
                    Ok((out, total))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("search thread panicked"))
            .collect()
    });
    let elapsed = started.elapsed();
    let mut found = vec![Vec::new(); nq];
    let mut latencies = Vec::with_capacity(nq);
    let mut total = SearchCounters::default();
    for part in parts {
        let (out, c) = part?;
        total.merge(&c);
        for (qi, ids, t) in out {
            found[qi] = ids;
            latencies.push(t);
        }
    }
    let k = params.k;
    let mut hit = 0;
    for (qi, ids) in found.iter().enumerate() {
        let truth = gt.neighbors(qi);
        let truth = &truth[..k.min(truth.len())];
        hit += ids.iter().take(k).filter(|id| truth.contains(id)).count();
    }
    latencies.sort();
    let pct = |p: f64| {
        latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)].as_secs_f64()
            * 1e6
    };
    Ok(Row {
        list: params.list,
        recall: hit as f64 / (nq * k) as f64,
        qps: nq as f64 / elapsed.as_secs_f64(),
        p50_us: pct(0.5),
        p99_us: pct(0.99),
        c: total,
        window: None,
        cache: None,
    })
}

/// The search table: recall, QPS, latency and the per-query counters of every list.
pub fn print_search_table(rows: &[Row], k: usize, casr: CasrSetting, packed: bool) {
    println!("| L | recall@{k} | QPS | p50 µs | p99 µs | hops | edge pages/q | vector loads/q | CASR w | loads/rerank | explored | loads/explored | bytes/q | PQ dists/q |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let c = &r.c;
        println!(
            "| {} | {:.4} | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} | {:.1} | {} | {:.1} | {:.1} | {:.3} | {:.0} | {:.0} |",
            r.list,
            r.recall,
            r.qps,
            r.p50_us,
            r.p99_us,
            c.per_query(c.hops),
            c.per_query(c.edge_pages_read),
            c.per_query(c.vector_loads()),
            match (casr, packed) {
                (_, true) => "-".to_string(),
                (CasrSetting::Off, _) => "off".to_string(),
                (CasrSetting::Window(w), _) => w.to_string(),
                (CasrSetting::Auto, _) => r.window.map_or("?".into(), |w| w.to_string()),
            },
            c.loads_per_rerank(),
            c.explored_per_rerank(),
            c.rerank_load_fraction(),
            c.per_query(c.bytes_read),
            c.per_query(c.pq_distances),
        );
    }
}

/// `--io-detail`: bytes per query split into edge pages (`page_size` bytes each, cache hits
/// excluded) and vector slots, and the read batches the search issued. A batch is one
/// `io_uring_enter` when it holds at most the reader's queue depth (64) of reads, and one
/// `pread` per read on the fallback; neither reader exposes its own submit count.
pub fn print_io_table(rows: &[Row], page_size: usize) {
    println!("\n| L | edge page size | edge pages/q | edge bytes/q | vector loads/q | vector bytes/q | bytes/vector load | bytes/q | read batches/q |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let c = &r.c;
        let edge_bytes = c.edge_page_device_reads() * page_size as u64;
        let vector_bytes = c.bytes_read.saturating_sub(edge_bytes);
        println!(
            "| {} | {} KiB | {:.1} | {:.0} | {:.1} | {:.0} | {:.0} | {:.0} | {:.1} |",
            r.list,
            page_size / 1024,
            c.per_query(c.edge_pages_read),
            c.per_query(edge_bytes),
            c.per_query(c.vector_loads()),
            c.per_query(vector_bytes),
            vector_bytes as f64 / c.vector_loads().max(1) as f64,
            c.per_query(c.bytes_read),
            c.per_query(c.read_batches),
        );
    }
}
