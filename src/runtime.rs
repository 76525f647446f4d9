//! Where the runtime copies of navis indexes live (RFC 0001 §3): one directory per index,
//! build, server lifetime and copy generation under `base/pgsql_tmp/pgsql_tmp_navis/`.
//!
//! A runtime copy is never durable data: the relation's pages are. The directory is inside
//! PostgreSQL's temporary-file area for three reasons: PostgreSQL removes it at every start
//! and after a crash (`RemovePgTempFiles`), `pg_basebackup` and `pg_rewind` skip it, and
//! nothing that copies relation files (`CREATE DATABASE`, `SET TABLESPACE`, `pg_upgrade`)
//! needs to know about it. A copy is named by everything that decides its contents:
//!
//! ```text
//! <tablespace>_<database>_<relfilenode>_<build id>_<epoch>_<p|s><generation>
//! ```
//!
//! `p` copies are the primary's, kept current by the backends that write the index; `s`
//! copies are a hot standby's, made from the pages as redo left them and replaced when redo
//! changed the index since (the generation, `shmem::index_generation`).

use pgrx::pg_sys;
use std::ffi::CStr;
use std::fs;
use std::path::{Path, PathBuf};

/// The directory holding every runtime copy of this server.
pub const ROOT: &str = "base/pgsql_tmp/pgsql_tmp_navis";

/// What names one runtime copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CopyKey {
    pub spc: u32,
    pub db: u32,
    pub relfilenode: u32,
    pub build_id: u64,
    pub epoch: u64,
    /// Made during recovery (a hot standby's copy, read-only).
    pub standby: bool,
    pub generation: u64,
}

impl CopyKey {
    pub fn dir(&self) -> PathBuf {
        Path::new(ROOT).join(format!(
            "{}_{}_{}_{:016x}_{:016x}_{}{}",
            self.spc,
            self.db,
            self.relfilenode,
            self.build_id,
            self.epoch,
            if self.standby { 's' } else { 'p' },
            self.generation
        ))
    }
}

/// The copy's relation and epoch from a directory name, `None` for anything else.
fn parse(name: &str) -> Option<(u32, u32, u32, u64)> {
    let mut parts = name.split('_');
    let spc = parts.next()?.parse().ok()?;
    let db = parts.next()?.parse().ok()?;
    let rel = parts.next()?.parse().ok()?;
    let _build = parts.next()?;
    let epoch = u64::from_str_radix(parts.next()?, 16).ok()?;
    Some((spc, db, rel, epoch))
}

/// The generation of the newest hot-standby copy of `key`'s relation, build and lifetime that
/// exists (made by any backend) and is not newer than `key`'s, if there is one.
pub fn newest_standby_copy(key: &CopyKey) -> Option<u64> {
    let prefix = format!(
        "{}_{}_{}_{:016x}_{:016x}_s",
        key.spc, key.db, key.relfilenode, key.build_id, key.epoch
    );
    fs::read_dir(ROOT)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_prefix(&prefix)?.parse::<u64>().ok()
        })
        .filter(|&g| g <= key.generation)
        .max()
}

/// Path of a relation's main fork, relative to the data directory.
fn main_fork(spc: u32, db: u32, rel: u32) -> PathBuf {
    // SAFETY: GetRelationPath formats a path from plain OIDs into a palloc'd string, which is
    // copied and freed.
    unsafe {
        let p = pg_sys::GetRelationPath(
            db.into(),
            spc.into(),
            rel.into(),
            pg_sys::InvalidBackendId,
            pg_sys::ForkNumber::MAIN_FORKNUM,
        );
        let path = PathBuf::from(CStr::from_ptr(p).to_string_lossy().into_owned());
        pg_sys::pfree(p.cast());
        path
    }
}

/// A copy of the same relation that `current` replaces (a hot standby's older generation,
/// another build of a reused relfilenode, the standby copy after promotion) is removed only
/// once it is this old: a backend that read the older generation a moment ago may still be
/// opening it, and once open, its mapped files outlive the unlink. (A backend that took
/// longer than this between reading the generation and opening the copy would get an ERROR
/// for that one scan; not seen, not tested.)
const SUPERSEDED_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Removes the copies that nothing can use again: of relations whose main fork is gone or
/// empty (dropped, or rewritten under a new relfilenode that committed), of earlier server
/// lifetimes (left when `remove_temp_files_after_crash` is off), and copies of `current`'s
/// relation that it supersedes (after [`SUPERSEDED_GRACE`]): without the last rule a hot
/// standby would keep one copy per replayed change that a scan saw. Called before `current`
/// is made. A backend that still maps files of a removed copy keeps them until it lets go
/// (the files are unlinked, not truncated).
pub fn sweep(current: &CopyKey) -> usize {
    let Ok(entries) = fs::read_dir(ROOT) else {
        return 0;
    };
    let current_name = current.dir();
    let current_name = current_name.file_name().unwrap_or_default();
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some((spc, db, rel, copy_epoch)) = parse(&name) else {
            continue; // not ours
        };
        if name.contains(".tmp.") {
            continue; // a copy being made
        }
        // A dropped relfilenode's first segment is truncated at commit and unlinked after
        // the next checkpoint: empty or missing, it is gone.
        let gone = || fs::metadata(main_fork(spc, db, rel)).map_or(true, |m| m.len() == 0);
        let superseded = || {
            (spc, db, rel) == (current.spc, current.db, current.relfilenode)
                && e.file_name() != current_name
                && e.metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > SUPERSEDED_GRACE))
        };
        let dead = copy_epoch != current.epoch || gone() || superseded();
        if dead && fs::remove_dir_all(e.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Bytes of the files in a directory (a runtime copy's footprint).
pub fn dir_bytes(dir: &Path) -> u64 {
    fs::read_dir(dir)
        .map(|es| {
            es.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// The name of an open relation, for messages.
pub fn relation_name(rel: pg_sys::Relation) -> String {
    // SAFETY: rd_rel->relname is a NUL-terminated NameData of an open relation.
    unsafe {
        CStr::from_ptr((*(*rel).rd_rel).relname.data.as_ptr())
            .to_string_lossy()
            .into_owned()
    }
}
