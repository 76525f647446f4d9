//! `--layout relation`: the index as one relation file of 8 KiB PostgreSQL pages (RFC 0001),
//! built by [`build_relation`] into a [`FileStore`] and searched through [`RelationIndex`],
//! whose readers fetch edge pages and vector slots straight from the file (O_DIRECT unless
//! `NAVIS_DIRECT=0`, io_uring unless `NAVIS_IO=pread`, as for the side files).
//!
//! `RelationIndex` has no CASR calibration, so a relation search takes a fixed window
//! (`--casr W`, the same for every list) or `--casr off`; to compare with the side files,
//! give the side-file search the same `--casr`.

use std::path::{Path, PathBuf};

use navis_engine::index::{BuildReport, CasrSetting, IndexParams, Progress};
use navis_engine::io::{BackendChoice, IoOptions};
use navis_engine::relation::{build_relation, RelationIndex};
use navis_engine::search::{CasrMode, IndexSource, SearchParams};
use navis_engine::storage::HeapTid;
use navis_engine::store::FileStore;

use super::queries::{print_io_table, print_search_table, run_queries_with, SearchInputs};
use super::{parse_casr, Args, Result};

/// Which on-disk layout `build` writes and `search` reads (`--layout`, default `side`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Today's side directory of 4 KiB-page engine files.
    Side,
    /// One relation file of 8 KiB pages (RFC 0001).
    Relation,
}

impl Layout {
    pub fn parse(a: &Args) -> Result<Layout> {
        match a.values.get("layout").map_or("side", String::as_str) {
            "side" => Ok(Layout::Side),
            "relation" => Ok(Layout::Relation),
            other => Err(format!("--layout: side or relation, got {other:?}")),
        }
    }
}

/// Reads in flight per reader, as the side-file reader's.
const QUEUE_DEPTH: u32 = 64;

/// Builds the relation file `out` (which must not exist; its directory is created).
pub fn build(
    out: &Path,
    vectors: &[f32],
    tids: &[HeapTid],
    params: &IndexParams,
    progress: Progress,
) -> Result<BuildReport> {
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    if out.exists() {
        return Err(format!(
            "{}: exists; --layout relation writes a new file",
            out.display()
        ));
    }
    let store = FileStore::create(out).map_err(|e| e.to_string())?;
    let build_id = rand::random::<u64>();
    let (report, _meta) =
        build_relation(&store, vectors, tids, params, build_id, progress, &|| false)
            .map_err(|e| e.to_string())?;
    Ok(report)
}

/// `search --layout relation --index FILE`: the side-file search's table at each list, with
/// a fixed CASR window.
pub fn cmd_search(a: &Args) -> Result<()> {
    let path = PathBuf::from(a.str("index")?);
    let inputs = SearchInputs::parse(a)?;
    let casr = parse_casr(a)?;
    let mode = match casr {
        CasrSetting::Window(w) => CasrMode::Window(w),
        CasrSetting::Off => CasrMode::Off,
        CasrSetting::Auto => {
            return Err(
                "--layout relation: RelationIndex has no CASR window calibration; \
                 pass --casr W (a fixed window, the same as the side-file run's) or --casr off"
                    .into(),
            )
        }
    };
    if a.values.contains_key("cache-mb") {
        return Err("--layout relation: --cache-mb is not supported".into());
    }
    let store = FileStore::open(&path).map_err(|e| e.to_string())?;
    let index = RelationIndex::open(&store, &path).map_err(|e| e.to_string())?;
    let (queries, dim, nq, k) = (&inputs.queries, inputs.queries.dim, inputs.nq(), inputs.k);
    if dim != index.dim() {
        return Err(format!(
            "queries have {dim} dims, the index {}",
            index.dim()
        ));
    }
    let options = IoOptions::from_env(QUEUE_DEPTH).map_err(|e| e.to_string())?;
    let probe = index.reader(options).map_err(|e| e.to_string())?;
    let layout = probe.edge_layout();
    // The reader says whether O_DIRECT was accepted; the backend is chosen the same way it
    // chooses it (io_uring when a ring can be created).
    let uring = options.backend == BackendChoice::Auto
        && io_uring::IoUring::new(options.queue_depth).is_ok();
    let backend = format!(
        "{}+{}",
        if uring { "io_uring" } else { "pread" },
        if probe.is_direct() {
            "O_DIRECT"
        } else {
            "buffered"
        }
    );
    drop(probe);
    let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
    let base = SearchParams {
        k,
        packed: a.flag("packed"),
        use_entrance: !a.flag("no-entrance"),
        colocated: a.flag("colocated"),
        beam_width: a.num("beam-width", SearchParams::default().beam_width)?,
        // The packed-layout emulation reranks what it loaded: no window, as for side files.
        casr: if a.flag("packed") {
            CasrMode::Off
        } else {
            mode
        },
        ..SearchParams::default()
    };
    println!(
        "relation {} ({} vertices, {}-d, {:?}; {} edge pages of {} KiB, {} lists each; {} bytes); \
         {nq} queries; k={k}; backend {backend}; casr {}{}{}{}; threads {}\n",
        path.display(),
        index.len(),
        index.dim(),
        index.metric(),
        index.edge_pages(),
        layout.page_size() / 1024,
        layout.slots_per_page(),
        bytes,
        match casr {
            CasrSetting::Window(w) => format!(
                "fixed window {w} at every L (RelationIndex has no calibration; \
                 compare with a side-file run at --casr {w})"
            ),
            _ => "off (every explored candidate reranked)".to_string(),
        },
        if base.packed {
            "; packed-layout emulation"
        } else {
            ""
        },
        if base.use_entrance {
            ""
        } else {
            "; no entrance graph"
        },
        if base.colocated {
            "; co-located lists used"
        } else {
            ""
        },
        inputs.threads,
    );
    let mut rows = Vec::new();
    for &list in &inputs.lists {
        let params = SearchParams { list, ..base };
        let index = &index;
        let mut row = run_queries_with(
            &queries.data,
            dim,
            &inputs.gt,
            params,
            inputs.threads,
            || {
                let mut reader = index.reader(options).map_err(|e| e.to_string())?;
                Ok(move |q: &[f32]| {
                    index
                        .search(&mut reader, q, params)
                        .map_err(|e| e.to_string())
                })
            },
        )?;
        if let CasrMode::Window(w) = params.casr {
            row.window = Some(w);
        }
        rows.push(row);
    }
    print_search_table(&rows, k, casr, base.packed);
    if a.flag("io-detail") {
        print_io_table(&rows, layout.page_size());
    }
    Ok(())
}
