//! An optional trace of edge-page cache traffic, for replaying one real workload through other
//! cache policies and sizes offline (`navis-bench cache-replay`).
//!
//! Off unless the environment variable `NAVIS_CACHE_TRACE` names a directory when the process
//! first reads through a cache; each process then appends 24-byte records
//! `[u64 time ns][u64 tag][u32 page][u32 kind]` to `DIR/trace-<pid>.bin` (kind: 0 search
//! lookup, 1 insert lookup, 2 page written, 3 page dropped). Records are buffered; a process
//! that exits without flushing loses its last few thousand, which a replay can afford.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::{Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use super::{Caller, PageKey};

/// What a trace record stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceKind {
    Lookup(Caller),
    Write,
    Drop,
}

impl TraceKind {
    fn code(self) -> u32 {
        match self {
            TraceKind::Lookup(Caller::Search) => 0,
            TraceKind::Lookup(Caller::Insert) => 1,
            TraceKind::Write => 2,
            TraceKind::Drop => 3,
        }
    }

    fn from_code(code: u32) -> Option<TraceKind> {
        Some(match code {
            0 => TraceKind::Lookup(Caller::Search),
            1 => TraceKind::Lookup(Caller::Insert),
            2 => TraceKind::Write,
            3 => TraceKind::Drop,
            _ => return None,
        })
    }
}

/// One record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceRecord {
    pub time_ns: u64,
    pub key: PageKey,
    pub kind: TraceKind,
}

const RECORD: usize = 24;
const FLUSH_EVERY: usize = 4096;

struct Sink {
    out: BufWriter<File>,
    pending: usize,
}

fn sink() -> Option<&'static Mutex<Sink>> {
    static SINK: OnceLock<Option<Mutex<Sink>>> = OnceLock::new();
    SINK.get_or_init(|| {
        let dir = std::env::var_os("NAVIS_CACHE_TRACE")?;
        let path = Path::new(&dir).join(format!("trace-{}.bin", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .ok()?;
        Some(Mutex::new(Sink {
            out: BufWriter::with_capacity(RECORD * FLUSH_EVERY, file),
            pending: 0,
        }))
    })
    .as_ref()
}

/// Whether this process traces (the first call decides).
pub fn enabled() -> bool {
    sink().is_some()
}

/// Appends one record if tracing is on.
pub fn record(key: PageKey, kind: TraceKind) {
    let Some(sink) = sink() else {
        return;
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut bytes = [0u8; RECORD];
    bytes[..8].copy_from_slice(&now.to_le_bytes());
    bytes[8..16].copy_from_slice(&key.tag.to_le_bytes());
    bytes[16..20].copy_from_slice(&key.page.to_le_bytes());
    bytes[20..24].copy_from_slice(&kind.code().to_le_bytes());
    let Ok(mut s) = sink.lock() else {
        return;
    };
    // A trace is a diagnostic: write errors are ignored rather than failing a read.
    let _ = s.out.write_all(&bytes);
    s.pending += 1;
    if s.pending >= FLUSH_EVERY {
        let _ = s.out.flush();
        s.pending = 0;
    }
}

/// Every record of every `trace-*.bin` file in `dir`, in time order.
pub fn read_dir(dir: &Path) -> std::io::Result<Vec<TraceRecord>> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !(name.starts_with("trace-") && name.ends_with(".bin")) {
            continue;
        }
        let bytes = std::fs::read(&path)?;
        for r in bytes.chunks_exact(RECORD) {
            let word =
                |a: usize, b: usize| u64::from_le_bytes(r[a..b].try_into().unwrap_or([0; 8]));
            let kind = u32::from_le_bytes(r[20..24].try_into().unwrap_or([0; 4]));
            if let Some(kind) = TraceKind::from_code(kind) {
                all.push(TraceRecord {
                    time_ns: word(0, 8),
                    key: PageKey {
                        tag: word(8, 16),
                        page: u32::from_le_bytes(r[16..20].try_into().unwrap_or([0; 4])),
                    },
                    kind,
                });
            }
        }
    }
    all.sort_by_key(|r| r.time_ns);
    Ok(all)
}

/// Hit rates of one cache over a trace.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReplayResult {
    pub stats: super::CacheStats,
}

/// Replays `trace` through `cache` (admitting every missed page at once, as a reader does
/// after its read) and returns the cache's counters.
pub fn replay(cache: &super::PageCache, trace: &[TraceRecord]) -> super::CacheStats {
    replay_with(cache, trace, false)
}

/// [`replay`], optionally admitting every written page as an insert access (write-allocate)
/// instead of only refreshing a cached copy.
pub fn replay_with(
    cache: &super::PageCache,
    trace: &[TraceRecord],
    write_allocate: bool,
) -> super::CacheStats {
    // Only the traffic matters here, not the bytes: blank pages of the cache's frame size.
    let page = vec![0u8; cache.frame_size()];
    let mut out = vec![0u8; cache.frame_size()];
    for r in trace {
        match r.kind {
            TraceKind::Lookup(caller) => {
                if !cache.lookup(r.key, caller, &mut out) {
                    let ticket = cache.ticket(r.key);
                    cache.admit(r.key, caller, &page, ticket);
                }
            }
            TraceKind::Write => {
                cache.refresh(r.key, &page);
                if write_allocate {
                    let ticket = cache.ticket(r.key);
                    cache.admit(r.key, Caller::Insert, &page, ticket);
                }
            }
            TraceKind::Drop => cache.drop_page(r.key),
        }
    }
    cache.stats()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{CacheConfig, PageCache, Policy};

    #[test]
    fn replay_counts_like_the_live_cache() {
        let key = |page| PageKey { tag: 5, page };
        let mut trace = Vec::new();
        for round in 0..3u64 {
            for p in 0..4 {
                trace.push(TraceRecord {
                    time_ns: round * 10 + p as u64,
                    key: key(p),
                    kind: TraceKind::Lookup(Caller::Insert),
                });
            }
        }
        trace.push(TraceRecord {
            time_ns: 99,
            key: key(0),
            kind: TraceKind::Drop,
        });
        let cache = PageCache::new(CacheConfig {
            policy: Policy::Navis,
            ..CacheConfig::navis(8)
        })
        .unwrap();
        let s = replay(&cache, &trace);
        assert_eq!(
            (s.insert_misses, s.insert_hits_window + s.insert_hits_frozen),
            (4, 8)
        );
        assert_eq!((s.promoted, s.dropped), (4, 1));
    }
}
