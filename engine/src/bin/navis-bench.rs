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

#[path = "navis_bench/args.rs"]
mod args;
#[path = "navis_bench/build.rs"]
mod build;
#[path = "navis_bench/cache_replay.rs"]
mod cache_replay;
#[path = "navis_bench/casr_sweep.rs"]
mod casr_sweep;
#[path = "navis_bench/distances.rs"]
mod distances;
#[path = "navis_bench/insert.rs"]
mod insert;
#[path = "navis_bench/queries.rs"]
mod queries;
#[path = "navis_bench/relation.rs"]
mod relation;
#[path = "navis_bench/search.rs"]
mod search;

use args::{parse_casr, parse_lists, Args};
use build::cmd_build;
use cache_replay::cmd_cache_replay;
use casr_sweep::cmd_casr_sweep;
use distances::cmd_distances;
use insert::cmd_insert;
use search::cmd_search;

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
