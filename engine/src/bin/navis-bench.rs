//! navis-bench: build and search NAVIS indexes over `.fbin` files, printing markdown tables.
//!
//! ```text
//! navis-bench build --base X.fbin --out DIR|FILE [--layout side|relation] [--max-degree 96]
//!                   [--build-list 96] [--alpha 1.2] [--pq-bytes N] [--metric l2|cosine|ip]
//!                   [--threads N] [--limit N]
//! navis-bench search --index DIR|FILE --queries Q.fbin --gt GT.bin [--layout side|relation]
//!                    [--k 10] [--lists 20,40,80,160] [--casr auto|off|W] [--casr-percentile 99]
//!                    [--warmup N] [--packed] [--no-entrance] [--colocated] [--io-detail]
//!                    [--threads N] [--limit-queries N] [--beam-width 4]
//!                    [--cache-mb N [--cache-policy navis|lru|off] [--cache-search-promote N]]
//! navis-bench casr-sweep --index DIR --queries Q.fbin --gt GT.bin [--k 10] [--lists 40,80,160]
//!                        [--percentiles 100,99,95,90,80] [--floors 0,15,20] [--warmup 1000]
//!                        [--limit-queries N]
//! navis-bench insert --index DIR --base X.fbin [--from N] [--to M] [--casr auto|off|W]
//!                    [--casr-percentile 90] [--warmup 1000] [--insert-list 100] [--threads N]
//!                    [--defer-back-edges] [--queries Q.fbin --gt GT.bin [--k 10] [--lists 20,40,80]]
//! navis-bench cache-replay --trace DIR --cache-mb N[,N...] [--configs navis,lru,navis:random,navis:s4:w0.2]
//! navis-bench distances [--iters N]
//! ```
//!
//! Counters are deterministic (DESIGN.md §7) and printed beside wall-clock numbers.
//! `--layout side` (the default) is the side directory of 4 KiB-page files; `--layout relation`
//! is one relation file of 8 KiB pages (RFC 0001, `navis_bench/relation.rs`), searched with a
//! fixed CASR window (`--casr W` or `off`). `--io-detail` adds edge/vector bytes and read
//! batches per query.

#[path = "navis_bench/queries.rs"]
mod queries;
#[path = "navis_bench/relation.rs"]
mod relation;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use navis_engine::cache::{CacheBinding, CacheConfig, FrozenEviction, PageCache, Policy};
use navis_engine::casr::{
    self, max_safe_pq_ratio, min_safe_window_with_floor, percentile, ratio_percentile, rerank_rule,
    Rerank, StopRule, WindowCalibrator,
};
use navis_engine::counters::SearchCounters;
use navis_engine::dataset::{read_fbin_rows, read_ground_truth};
use navis_engine::graph::memory::human_bytes;
use navis_engine::index::{
    build_index, peak_rss_bytes, BuildPhase, CasrSetting, DiskReader, Index, IndexParams,
};
use navis_engine::search::{prepare_query, CasrMode, IndexSource, SearchCursor, SearchParams};
use navis_engine::storage::{EdgePageLayout, HeapTid, IndirEntry};
use navis_engine::{Kernels, Metric, VertexId};
use queries::{print_io_table, print_search_table, run_queries_with, Row, SearchInputs};
use relation::Layout;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("build") => cmd_build(&Args::parse(&args[1..])),
        Some("search") => cmd_search(&Args::parse(&args[1..])),
        Some("distances") => cmd_distances(&Args::parse(&args[1..])),
        Some("casr-sweep") => cmd_casr_sweep(&Args::parse(&args[1..])),
        Some("cache-replay") => cmd_cache_replay(&Args::parse(&args[1..])),
        Some("insert") => cmd_insert(&Args::parse(&args[1..])),
        _ => Err("usage: navis-bench build|search|insert|casr-sweep|cache-replay|distances [options] (see source header)".into()),
    };
    if let Err(e) = result {
        eprintln!("navis-bench: {e}");
        std::process::exit(1);
    }
}

type Result<T> = std::result::Result<T, String>;

/// `--name value` pairs and bare `--flag`s.
struct Args {
    values: HashMap<String, String>,
}

impl Args {
    fn parse(raw: &[String]) -> Args {
        let mut values = HashMap::new();
        let mut i = 0;
        while i < raw.len() {
            let key = raw[i].trim_start_matches("--").to_string();
            let next = raw.get(i + 1).filter(|v| !v.starts_with("--"));
            match next {
                Some(v) => {
                    values.insert(key, v.clone());
                    i += 2;
                }
                None => {
                    values.insert(key, String::new());
                    i += 1;
                }
            }
        }
        Args { values }
    }

    fn flag(&self, key: &str) -> bool {
        self.values.contains_key(key)
    }

    fn str(&self, key: &str) -> Result<&str> {
        self.values
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| format!("missing --{key}"))
    }

    fn num<T: std::str::FromStr>(&self, key: &str, default: T) -> Result<T> {
        match self.values.get(key) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| format!("--{key}: not a number: {v:?}")),
        }
    }
}

fn parse_metric(s: &str) -> Result<Metric> {
    match s {
        "l2" => Ok(Metric::L2),
        "cosine" => Ok(Metric::Cosine),
        "ip" => Ok(Metric::InnerProduct),
        other => Err(format!("unknown metric {other:?} (l2, cosine, ip)")),
    }
}

fn parse_lists(a: &Args, default: &str) -> Result<Vec<usize>> {
    a.values
        .get("lists")
        .map_or(default, String::as_str)
        .split(',')
        .map(|s| {
            s.trim()
                .parse()
                .map_err(|_| format!("--lists: bad value {s:?}"))
        })
        .collect()
}

fn parse_casr(a: &Args) -> Result<CasrSetting> {
    Ok(match a.values.get("casr").map_or("auto", String::as_str) {
        "auto" => CasrSetting::Auto,
        "off" => CasrSetting::Off,
        w => CasrSetting::Window(
            w.parse()
                .map_err(|_| format!("--casr: auto, off or a window, got {w:?}"))?,
        ),
    })
}

fn cmd_build(a: &Args) -> Result<()> {
    let base = PathBuf::from(a.str("base")?);
    let out = PathBuf::from(a.str("out")?);
    let layout = Layout::parse(a)?;
    let limit = a
        .values
        .get("limit")
        .map(|v| v.parse::<usize>())
        .transpose();
    let limit = limit.map_err(|_| "--limit: not a number".to_string())?;
    let data = read_fbin_rows(&base, limit).map_err(|e| format!("{}: {e}", base.display()))?;
    let defaults = IndexParams::default();
    let params = IndexParams {
        metric: parse_metric(a.values.get("metric").map_or("l2", String::as_str))?,
        max_degree: a.num("max-degree", defaults.max_degree)?,
        build_list: a.num("build-list", defaults.build_list)?,
        alpha: a.num("alpha", defaults.alpha)?,
        pq_bytes: a
            .values
            .get("pq-bytes")
            .map(|v| v.parse())
            .transpose()
            .map_err(|_| "--pq-bytes: not a number")?,
        threads: a.num("threads", defaults.threads)?,
        ..defaults
    };
    let n = data.data.len() / data.dim;
    let tids: Vec<HeapTid> = (0..n as u32)
        .map(|i| HeapTid {
            block: i,
            offset: 1,
        })
        .collect();
    eprintln!(
        "building {} rows of {} dims from {} into {}{} (R={} L={} alpha={} threads={})",
        n,
        data.dim,
        base.display(),
        out.display(),
        if layout == Layout::Relation {
            " (relation layout, 8 KiB pages)"
        } else {
            ""
        },
        params.max_degree,
        params.build_list,
        params.alpha,
        params.threads
    );
    // Phases with their own sub-progress report their start and end twice; print each once.
    let last_line = std::sync::Mutex::new(String::new());
    let progress = |phase: BuildPhase, done: u64, total: u64| {
        let line = if done == 0 {
            format!("  {} ...", phase.name())
        } else if done == total {
            format!("  {} done", phase.name())
        } else {
            return;
        };
        let mut last = last_line.lock().expect("progress lock");
        if *last != line {
            eprintln!("{line}");
            *last = line;
        }
    };
    let report = match layout {
        Layout::Side => build_index(&out, &data.data, &tids, &params, &progress, &|| false)
            .map_err(|e| e.to_string())?,
        Layout::Relation => relation::build(&out, &data.data, &tids, &params, &progress)?,
    };
    let raw = (n * data.dim * 4) as u64;
    println!("| phase | seconds |\n|---|---|");
    for (phase, t) in &report.phases {
        println!("| {} | {:.2} |", phase.name(), t.as_secs_f64());
    }
    println!(
        "| **total** | **{:.2}** |",
        report.total_time().as_secs_f64()
    );
    for (phase, t) in &report.parts {
        println!(
            "| (of which {} alone) | {:.2} |",
            phase.name(),
            t.as_secs_f64()
        );
    }
    println!();
    println!("| measure | value |\n|---|---|");
    println!("| vertices × dim | {n} × {} |", data.dim);
    println!(
        "| R / L / alpha / pq_bytes | {} / {} / {} / {} |",
        params.max_degree, params.build_list, params.alpha, report.pq_bytes
    );
    println!("| raw vectors | {} |", human_bytes(raw));
    println!(
        "| memory estimate (stated before build) | {} |",
        human_bytes(report.memory_estimate)
    );
    let peak = report.peak_rss.unwrap_or(0);
    println!(
        "| peak RSS (VmHWM, includes the loaded input) | {} ({:.2}× estimate) |",
        human_bytes(peak),
        peak as f64 / report.memory_estimate.max(1) as f64
    );
    println!(
        "| overlap ratio greedy / identity | {:.3} / {:.3} |",
        report.overlap_greedy, report.overlap_identity
    );
    println!("| edge pages | {} |", report.edge_pages);
    println!("| entrance graph vertices | {} |", report.entrance_size);
    for (name, len) in &report.file_sizes {
        println!("| file {name} | {} |", human_bytes(*len));
    }
    Ok(())
}

fn cmd_search(a: &Args) -> Result<()> {
    if Layout::parse(a)? == Layout::Relation {
        return relation::cmd_search(a);
    }
    let dir = PathBuf::from(a.str("index")?);
    let inputs = SearchInputs::parse(a)?;
    let (queries, gt, k, threads) = (&inputs.queries, &inputs.gt, inputs.k, inputs.threads);
    let casr = parse_casr(a)?;
    let warmup: usize = a.num("warmup", 1000)?;
    // Percentile of the warm-up minimal safe windows (navis.casr_percentile_search).
    let casr_percentile: f64 = a.num("casr-percentile", casr::SEARCH_PERCENTILE)?;
    let index = Index::open(&dir).map_err(|e| e.to_string())?;
    let cache = attach_cache(a, &index)?;
    let nq = inputs.nq();
    if queries.dim != index.dim() {
        return Err(format!(
            "queries have {} dims, the index {}",
            queries.dim,
            index.dim()
        ));
    }
    let backend = index.reader().map_err(|e| e.to_string())?.backend_name();
    let base = SearchParams {
        k,
        packed: a.flag("packed"),
        use_entrance: !a.flag("no-entrance"),
        colocated: a.flag("colocated"),
        beam_width: a.num("beam-width", SearchParams::default().beam_width)?,
        ..SearchParams::default()
    };
    println!(
        "index {} ({} vertices, {}-d, {:?}); {} queries; k={k}; backend {backend}; casr {:?}{}{}{}; threads {threads}\n",
        dir.display(),
        index.len(),
        index.dim(),
        index.metric(),
        nq,
        casr,
        if base.packed { "; packed-layout emulation" } else { "" },
        if base.use_entrance { "" } else { "; no entrance graph" },
        if base.colocated { "; co-located lists used" } else { "" },
    );
    if let Some(c) = &cache {
        println!(
            "edge-page cache: {} frames ({} MiB) for {} edge pages, policy {}, frozen capacity {}\n",
            c.frames(),
            (c.frames() * 4096) >> 20,
            index.files().state().get(navis_engine::storage::state::Field::EdgePages),
            c.policy().name(),
            c.frozen_capacity()
        );
    }
    let mut rows = Vec::new();
    for &list in &inputs.lists {
        // Each list calibrates its own window (warm-up queries rerank everything and are
        // excluded from the timing and counters below).
        index.set_calibrator(
            WindowCalibrator::new(warmup.max(1), casr_percentile).map_err(|e| e.to_string())?,
        );
        let params = SearchParams { list, ..base };
        if casr == CasrSetting::Auto && !base.packed {
            let mut reader = index.reader().map_err(|e| e.to_string())?;
            // Every query with candidates yields one sample; the cap only guards against a
            // query set that yields none, which would otherwise spin forever.
            let cap = warmup.max(1).saturating_mul(2);
            let window = index
                .warm_up(&mut reader, &queries.data, params, cap)
                .map_err(|e| e.to_string())?;
            if window.is_none() {
                println!("L={list}: CASR not calibrated after {cap} warm-up queries; reranking everything");
            }
        }
        let cache_before = cache.as_ref().map(|c| c.stats());
        rows.push(run_queries(
            &index,
            &queries.data,
            queries.dim,
            gt,
            params,
            casr,
            threads,
        )?);
        let row = rows.last_mut().unwrap();
        row.window = index.search_window();
        if let (Some(c), Some(before)) = (&cache, cache_before) {
            row.cache = Some(c.stats().since(&before));
        }
    }
    print_search_table(&rows, k, casr, base.packed);
    if a.flag("io-detail") {
        print_io_table(&rows, index.files().edge_layout().page_size());
    }
    if cache.is_some() {
        println!("\n| L | cache hit rate | frozen hits | window hits | edge-page device reads/q | promoted | frozen evictions |");
        println!("|---|---|---|---|---|---|---|");
        for r in &rows {
            let s = r.cache.unwrap_or_default();
            println!(
                "| {} | {:.3} | {} | {} | {:.1} | {} | {} |",
                r.list,
                s.search_hit_rate(),
                s.search_hits_frozen,
                s.search_hits_window,
                r.c.per_query(r.c.edge_page_device_reads()),
                s.promoted,
                s.frozen_evictions
            );
        }
    }
    Ok(())
}

/// Replays a recorded cache trace (NAVIS_CACHE_TRACE) through several cache configurations
/// of several sizes: `policy[:fifo|:random][:sN search promote hits][:iN insert promote
/// hits][:wX window share]`.
fn cmd_cache_replay(a: &Args) -> Result<()> {
    let dir = PathBuf::from(a.str("trace")?);
    let trace = navis_engine::cache::trace::read_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    let sizes: Vec<usize> = a
        .values
        .get("cache-mb")
        .map_or("16", String::as_str)
        .split(',')
        .map(|v| {
            v.trim()
                .parse()
                .map_err(|_| format!("--cache-mb: bad value {v:?}"))
        })
        .collect::<Result<_>>()?;
    let configs: Vec<String> = a
        .values
        .get("configs")
        .map_or("navis,navis:random,lru", String::as_str)
        .split(',')
        .map(str::to_string)
        .collect();
    let lookups = trace
        .iter()
        .filter(|r| matches!(r.kind, navis_engine::cache::trace::TraceKind::Lookup(_)))
        .count();
    let pages: std::collections::HashSet<(u64, u32)> =
        trace.iter().map(|r| (r.key.tag, r.key.page)).collect();
    println!(
        "trace {}: {} records, {lookups} lookups of {} distinct pages\n",
        dir.display(),
        trace.len(),
        pages.len()
    );
    println!("| cache MiB | frames | config | hit rate | search | insert | promoted | frozen evictions | window evictions |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for &mb in &sizes {
        for spec in &configs {
            let mut parts = spec.split(':');
            let policy = parts.next().unwrap_or("navis");
            let mut config = CacheConfig {
                policy: Policy::parse(policy).ok_or(format!("unknown policy {policy:?}"))?,
                ..CacheConfig::navis(PageCache::frames_for_bytes(mb << 20).max(1))
            };
            let mut write_allocate = false;
            for opt in parts {
                let bad = || format!("bad option {opt:?} in {spec:?}");
                match opt {
                    "wa" => write_allocate = true,
                    "fifo" => config.frozen_eviction = FrozenEviction::Fifo,
                    "random" => config.frozen_eviction = FrozenEviction::Random,
                    "clock" => config.frozen_eviction = FrozenEviction::Clock,
                    o if o.starts_with('s') => {
                        config.search_promote_hits = o[1..].parse().map_err(|_| bad())?
                    }
                    o if o.starts_with('i') => {
                        config.insert_promote_hits = o[1..].parse().map_err(|_| bad())?
                    }
                    o if o.starts_with('w') => {
                        config.window_share = o[1..].parse().map_err(|_| bad())?
                    }
                    _ => return Err(bad()),
                }
            }
            let cache = PageCache::new(config).map_err(|e| e.to_string())?;
            let s = navis_engine::cache::trace::replay_with(&cache, &trace, write_allocate);
            println!(
                "| {mb} | {} | {spec} | {:.3} | {:.3} | {:.3} | {} | {} | {} |",
                cache.frames(),
                s.hit_rate(),
                s.search_hit_rate(),
                s.insert_hit_rate(),
                s.promoted,
                s.frozen_evictions,
                s.window_evictions
            );
        }
    }
    Ok(())
}

/// `--cache-mb N`: an edge-page cache of N MiB for this run, `--cache-policy`,
/// `--cache-search-promote` as the navis.cache_* settings.
fn attach_cache(a: &Args, index: &Index) -> Result<Option<std::sync::Arc<PageCache>>> {
    let Some(mb) = a.values.get("cache-mb") else {
        return Ok(None);
    };
    let mb: usize = mb
        .parse()
        .map_err(|_| format!("--cache-mb: not a number: {mb:?}"))?;
    let policy = a.values.get("cache-policy").map_or("navis", String::as_str);
    let policy = Policy::parse(policy)
        .ok_or(format!("--cache-policy: navis, lru or off, got {policy:?}"))?;
    // Frames of the index's edge-page size: attach_cache refuses any other.
    let frame_size = index.files().edge_layout().page_size();
    let mut config = CacheConfig {
        policy,
        frame_size,
        ..CacheConfig::navis(PageCache::frames_for_bytes_with(frame_size, mb << 20).max(1))
    };
    config.search_promote_hits = a.num("cache-search-promote", config.search_promote_hits)?;
    let cache = std::sync::Arc::new(PageCache::new(config).map_err(|e| e.to_string())?);
    index.files().attach_cache(CacheBinding {
        cache: cache.clone(),
        tag: 1,
    });
    Ok(Some(cache))
}

fn run_queries(
    index: &Index,
    queries: &[f32],
    dim: usize,
    gt: &navis_engine::dataset::GroundTruth,
    params: SearchParams,
    casr: CasrSetting,
    threads: usize,
) -> Result<Row> {
    run_queries_with(queries, dim, gt, params, threads, || {
        let mut reader = index.reader().map_err(|e| e.to_string())?;
        Ok(move |q: &[f32]| {
            index
                .search(&mut reader, q, params, casr)
                .map_err(|e| e.to_string())
        })
    })
}

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

fn cmd_insert(a: &Args) -> Result<()> {
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

fn cmd_distances(a: &Args) -> Result<()> {
    let iters: usize = a.num("iters", 50_000)?;
    let scalar = Kernels::scalar();
    let simd = Kernels::avx2();
    println!(
        "| dim | scalar l2 ns | {} l2 ns | speedup | scalar dot ns | {} dot ns | speedup |",
        simd.map_or("simd", |k| k.kind.name()),
        simd.map_or("simd", |k| k.kind.name())
    );
    println!("|---|---|---|---|---|---|---|");
    for dim in [128usize, 384, 768, 1536] {
        let a: Vec<f32> = (0..dim).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..dim).map(|i| (i as f32 * 0.11).cos()).collect();
        let n = (iters * 128 / dim).max(1000);
        // Best of 7 rounds: the machine is shared, and the minimum is the least disturbed run.
        let time = |f: &dyn Fn(&[f32], &[f32]) -> f32| -> f64 {
            (0..7)
                .map(|_| {
                    let mut acc = 0.0f32;
                    let t0 = Instant::now();
                    for _ in 0..n {
                        acc += f(std::hint::black_box(&a), std::hint::black_box(&b));
                    }
                    std::hint::black_box(acc);
                    t0.elapsed().as_secs_f64() * 1e9 / n as f64
                })
                .fold(f64::INFINITY, f64::min)
        };
        let sl2 = time(&|x, y| scalar.l2_squared(x, y));
        let sdot = time(&|x, y| scalar.dot(x, y));
        match simd {
            Some(k) => {
                let vl2 = time(&|x, y| k.l2_squared(x, y));
                let vdot = time(&|x, y| k.dot(x, y));
                println!(
                    "| {dim} | {sl2:.1} | {vl2:.1} | {:.2}× | {sdot:.1} | {vdot:.1} | {:.2}× |",
                    sl2 / vl2,
                    sdot / vdot
                );
            }
            None => println!("| {dim} | {sl2:.1} | n/a | n/a | {sdot:.1} | n/a | n/a |"),
        }
    }
    let _ = peak_rss_bytes();
    Ok(())
}

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
fn cmd_casr_sweep(a: &Args) -> Result<()> {
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
    let limit_q = a
        .values
        .get("limit-queries")
        .map(|v| v.parse::<usize>())
        .transpose()
        .map_err(|_| "--limit-queries: not a number".to_string())?;
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
