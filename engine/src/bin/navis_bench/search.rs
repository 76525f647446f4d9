//! `search`: a query set at each search list against ground truth, optionally through a cache.

use std::path::PathBuf;

use navis_engine::cache::{CacheBinding, CacheConfig, PageCache, Policy};
use navis_engine::casr::{self, WindowCalibrator};
use navis_engine::index::{CasrSetting, Index};
use navis_engine::search::SearchParams;

use super::queries::{print_io_table, print_search_table, run_queries_with, Row, SearchInputs};
use super::relation::Layout;
use super::{parse_casr, relation, Args, Result};

pub(super) fn cmd_search(a: &Args) -> Result<()> {
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

/// `--cache-mb N`: an edge-page cache of N MiB for this run, `--cache-policy`,
/// `--cache-search-promote` as the navis.cache_* settings.
pub(super) fn attach_cache(a: &Args, index: &Index) -> Result<Option<std::sync::Arc<PageCache>>> {
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

pub(super) fn run_queries(
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
