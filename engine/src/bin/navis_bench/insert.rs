//! `insert`: rows inserted into a built index, what position seeking loaded, recall after.

use std::path::PathBuf;
use std::time::Instant;

use navis_engine::casr::{self, WindowCalibrator};
use navis_engine::counters::SearchCounters;
use navis_engine::dataset::{read_fbin_rows, read_ground_truth};
use navis_engine::index::{CasrSetting, Index};
use navis_engine::search::SearchParams;
use navis_engine::storage::HeapTid;

use super::search::run_queries;
use super::{parse_casr, parse_lists, Args, Result};

/// Inserts rows `from..to` of `--base` into an index built from its first rows (row i gets
/// heap block i) and reports what position seeking's CASR loaded against its explored set,
/// then, with `--queries`/`--gt` (ground truth over all rows), the recall of searches that
/// rerank everything, so two runs differing only in `--casr` compare the graphs the inserts
/// built. The index directory is changed in place: copy it first to compare settings.
/// The back-edges of `insert --defer-back-edges`, kept until the inserts are done.
#[derive(Default)]
struct DeferredEdges(std::sync::Mutex<Vec<navis_engine::update::BackEdge>>);

impl navis_engine::update::BackEdgeSink for DeferredEdges {
    fn defer(&self, edge: navis_engine::update::BackEdge) -> bool {
        self.0.lock().expect("deferred").push(edge);
        true
    }
}

pub(super) fn cmd_insert(a: &Args) -> Result<()> {
    use navis_engine::update::{recover, InsertParams, LocalLocks};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    let dir = PathBuf::from(a.str("index")?);
    let base = PathBuf::from(a.str("base")?);
    let index = Index::open(&dir).map_err(|e| e.to_string())?;
    let data = read_fbin_rows(&base, None).map_err(|e| format!("{}: {e}", base.display()))?;
    if data.dim != index.dim() {
        return Err(format!(
            "base rows have {} dims, the index {}",
            data.dim,
            index.dim()
        ));
    }
    let n = data.data.len() / data.dim;
    let from: usize = a.num("from", index.len())?;
    let to: usize = a.num("to", n)?.min(n);
    if from >= to {
        return Err(format!("nothing to insert: rows {from}..{to} of {n}"));
    }
    let casr = parse_casr(a)?;
    let percentile: f64 = a.num("casr-percentile", casr::INSERT_PERCENTILE)?;
    let warmup: usize = a.num("warmup", 1000)?;
    let threads: usize = a.num("threads", 1)?;
    // LIOS: the inserts leave all but the nearest neighbour's back-edge to a queue, run after
    // them and timed apart, which splits an insert's time into what LIOS defers and the rest.
    let defer = a.flag("defer-back-edges");
    let deferred = DeferredEdges::default();
    let params = InsertParams {
        list: a.num("insert-list", InsertParams::default().list)?,
        ..InsertParams::default()
    };
    let locks = LocalLocks::new(1024);
    recover(index.files(), &locks, 1).map_err(|e| e.to_string())?;
    let calibrator = Mutex::new(WindowCalibrator::new(warmup, percentile)?);
    let next = AtomicUsize::new(from);
    // Per insert, in order of completion: (calibrating, counters).
    let reports: Mutex<Vec<(bool, SearchCounters, u64)>> = Mutex::new(Vec::new());
    let started = Instant::now();
    std::thread::scope(|s| -> Result<()> {
        let workers: Vec<_> = (0..threads.max(1))
            .map(|_| {
                s.spawn(|| -> Result<()> {
                    let mut reader = index.reader().map_err(|e| e.to_string())?;
                    loop {
                        let row = next.fetch_add(1, Ordering::Relaxed);
                        if row >= to {
                            return Ok(());
                        }
                        let window = match casr {
                            CasrSetting::Off => None,
                            CasrSetting::Window(w) => Some(w),
                            CasrSetting::Auto => calibrator.lock().expect("calibrator").window(),
                        };
                        let tid = HeapTid {
                            block: row as u32,
                            offset: 1,
                        };
                        let v = &data.data[row * data.dim..(row + 1) * data.dim];
                        let p = InsertParams {
                            casr_window: window,
                            ..params
                        };
                        let r = if defer {
                            index.insert_deferring(&mut reader, &locks, v, tid, p, &deferred)
                        } else {
                            index.insert(&mut reader, &locks, v, tid, p)
                        }
                        .map_err(|e| format!("row {row}: {e}"))?;
                        let calibrating = matches!(casr, CasrSetting::Auto) && window.is_none();
                        if let (true, Some(w)) = (calibrating, r.calibration_sample) {
                            calibrator.lock().expect("calibrator").record_window(w);
                        }
                        reports.lock().expect("reports").push((
                            calibrating,
                            r.search,
                            r.pages_written,
                        ));
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().expect("insert thread panicked")?;
        }
        Ok(())
    })?;
    let elapsed = started.elapsed();
    if defer {
        let tasks = deferred.0.into_inner().expect("deferred");
        let ran = Instant::now();
        let report = index
            .run_back_edges(&locks, &tasks)
            .map_err(|e| e.to_string())?;
        let tasks_s = ran.elapsed().as_secs_f64();
        println!(
            "deferred back-edges: {} tasks run after the inserts in {tasks_s:.2} s ({:.0} us a task, \
             {} lists written, {} pruned); the inserts took {:.2} s: the deferred work is {:.1}% \
             of inserts + tasks\n",
            tasks.len(),
            tasks_s * 1e6 / tasks.len().max(1) as f64,
            report.lists_written,
            report.pruned,
            elapsed.as_secs_f64(),
            100.0 * tasks_s / (tasks_s + elapsed.as_secs_f64())
        );
    }
    let reports = reports.into_inner().expect("reports");
    let window = calibrator.into_inner().expect("calibrator").window();
    println!(
        "index {}: inserted rows {from}..{to} ({} inserts) with {threads} thread(s); insert list {}, rerank K {}; casr {casr:?}{}\n",
        dir.display(),
        to - from,
        params.list,
        params.rerank_k,
        match (casr, window) {
            (CasrSetting::Auto, Some(w)) => format!(", calibrated window {w} (P{percentile} of {warmup} warm-up inserts)"),
            (CasrSetting::Auto, None) => ", warm-up never completed".to_string(),
            _ => String::new(),
        }
    );
    println!("| inserts | count | rows/s | explored set / insert | vectors loaded / insert | loads / explored | edge pages read / insert | edge pages written / insert |");
    println!("|---|---|---|---|---|---|---|---|");
    // (label, which inserts: None = all, Some(calibrating)).
    let mut groups: Vec<(&str, Option<bool>)> = vec![("all", None)];
    if matches!(casr, CasrSetting::Auto) {
        groups.push(("warm-up (rerank all)", Some(true)));
        groups.push(("after warm-up", Some(false)));
    }
    for &(name, group) in &groups {
        let keep = |calibrating: bool| group.is_none_or(|g| g == calibrating);
        let chosen: Vec<&(bool, SearchCounters, u64)> =
            reports.iter().filter(|(c, _, _)| keep(*c)).collect();
        if chosen.is_empty() {
            continue;
        }
        let c = SearchCounters::sum(chosen.iter().map(|(_, c, _)| c));
        let count = chosen.len() as f64;
        let written: u64 = chosen.iter().map(|(_, _, w)| w).sum();
        println!(
            "| {name} | {} | {} | {:.1} | {:.1} | {:.1}% | {:.1} | {:.2} |",
            chosen.len(),
            if group.is_none() {
                format!("{:.0}", count / elapsed.as_secs_f64())
            } else {
                "-".to_string()
            },
            c.explored_per_rerank(),
            c.loads_per_rerank(),
            100.0 * c.rerank_load_fraction(),
            c.edge_pages_read as f64 / count,
            written as f64 / count,
        );
    }
    println!();
    if let (Some(q), Some(g)) = (a.values.get("queries"), a.values.get("gt")) {
        let queries = read_fbin_rows(PathBuf::from(q), None).map_err(|e| format!("{q}: {e}"))?;
        let gt = read_ground_truth(PathBuf::from(g)).map_err(|e| format!("{g}: {e}"))?;
        let k: usize = a.num("k", 10)?;
        println!("Searches afterwards, every explored candidate reranked (CASR off):\n");
        println!("| L | recall@{k} | edge pages / query |\n|---|---|---|");
        for list in parse_lists(a, "20,40,80")? {
            let p = SearchParams {
                k,
                list,
                ..SearchParams::default()
            };
            let row = run_queries(
                &index,
                &queries.data,
                queries.dim,
                &gt,
                p,
                CasrSetting::Off,
                1,
            )?;
            println!(
                "| {list} | {:.4} | {:.1} |",
                row.recall,
                row.c.per_query(row.c.edge_pages_read)
            );
        }
    }
    Ok(())
}
