//! `cache-replay`: a recorded NAVIS-Cache trace replayed through several cache configurations.

use std::path::PathBuf;

use navis_engine::cache::{CacheConfig, FrozenEviction, PageCache, Policy};

use super::{Args, Result};

/// Replays a recorded cache trace (NAVIS_CACHE_TRACE) through several cache configurations
/// of several sizes: `policy[:fifo|:random][:sN search promote hits][:iN insert promote
/// hits][:wX window share]`.
pub(super) fn cmd_cache_replay(a: &Args) -> Result<()> {
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
