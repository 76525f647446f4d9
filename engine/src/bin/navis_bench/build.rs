//! `build`: an index over a `.fbin` file, side files or one relation file, with its phase timings.

use std::path::PathBuf;

use navis_engine::dataset::read_fbin_rows;
use navis_engine::graph::memory::human_bytes;
use navis_engine::index::{build_index, BuildPhase, IndexParams};
use navis_engine::storage::HeapTid;

use super::args::parse_metric;
use super::relation::Layout;
use super::{relation, Args, Result};

pub(super) fn cmd_build(a: &Args) -> Result<()> {
    let base = PathBuf::from(a.str("base")?);
    let out = PathBuf::from(a.str("out")?);
    let layout = Layout::parse(a)?;
    let limit = a.opt_num::<usize>("limit")?;
    let data = read_fbin_rows(&base, limit).map_err(|e| format!("{}: {e}", base.display()))?;
    let defaults = IndexParams::default();
    let params = IndexParams {
        metric: parse_metric(a.values.get("metric").map_or("l2", String::as_str))?,
        max_degree: a.num("max-degree", defaults.max_degree)?,
        build_list: a.num("build-list", defaults.build_list)?,
        alpha: a.num("alpha", defaults.alpha)?,
        pq_bytes: a.opt_num("pq-bytes")?,
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
