//! Where a navis index keeps its side files, the metapage that points at them, and the
//! lifecycle that keeps the two in step.
//!
//! Layout (DESIGN.md §4): the side directory sits beside the index's main fork in the same
//! tablespace database directory and is named from it: `base/16384/16390` → `16390.navis`.
//! A build writes into `16390.navis.tmp.<pid>` and renames it when complete. The directory
//! holds the engine's files plus `navis_build`, written here, with the random 64-bit build id
//! that is also in the metapage (block 0 of the main fork, WAL-logged), the index OID and the
//! relfilenode. Opening an index checks both ids, so an index never reads another build's files.
//!
//! Lifecycle (no orphan directories):
//! - a directory created by a transaction that aborts is removed at ABORT (or sub-abort);
//! - `DROP INDEX`/`DROP TABLE` (object_access_hook, OAT_DROP) schedule the directory for
//!   removal at COMMIT; ABORT forgets the request;
//! - REINDEX, TRUNCATE, VACUUM FULL and CLUSTER give the index a new relfilenode and run the
//!   build again: the build finds the previous directories of the same index OID (any
//!   tablespace) and schedules them for removal at COMMIT;
//! - `DROP DATABASE` removes the database directories, side directories included;
//! - `ALTER INDEX ... SET TABLESPACE` copies only the main fork, so it is refused with a hint
//!   to use `REINDEX INDEX ... TABLESPACE` (ProcessUtility_hook);
//! - after a crash, [`sweep`] (run by every build and by `navis_cleanup()`) removes
//!   `*.navis` directories whose main fork is gone or empty and temporary directories whose
//!   building process no longer exists.

use crate::errors::raise;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;
use std::cell::RefCell;
use std::ffi::CStr;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Suffix of a side directory; a temporary one adds `.tmp.<pid>`.
pub const SUFFIX: &str = ".navis";
const TMP_INFIX: &str = ".navis.tmp.";
/// The file navis writes into each side directory (not an engine file).
pub const BUILD_FILE: &str = "navis_build";

const META_MAGIC: u32 = 0x4e41_5649; // "NAVI"
pub const META_VERSION: u32 = 1;

/// Block 0 of the main fork.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MetaPage {
    pub magic: u32,
    pub version: u32,
    pub build_id: u64,
    pub dim: u32,
    pub metric: u32,
    pub vertices: u64,
    /// NUL-padded name of the side directory, relative to the main fork's directory.
    pub dir_name: [u8; 64],
}

// The META WAL record carries exactly these bytes (src/wal/records.rs documents them).
const _: () = assert!(std::mem::size_of::<MetaPage>() == crate::wal::records::META_IMAGE_LEN);

impl MetaPage {
    pub fn dir_name(&self) -> String {
        let end = self
            .dir_name
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.dir_name.len());
        String::from_utf8_lossy(&self.dir_name[..end]).into_owned()
    }
}

/// Path of the main fork of an open relation, relative to the data directory (the backend's
/// working directory), e.g. `base/16384/16390` or `pg_tblspc/16400/PG_15_.../16384/16390`.
pub fn main_fork_path(rel: pg_sys::Relation) -> PathBuf {
    // SAFETY: `rel` is an open relation; GetRelationPath returns a palloc'd C string.
    unsafe {
        let node = (*rel).rd_node;
        let p = pg_sys::GetRelationPath(
            node.dbNode,
            node.spcNode,
            node.relNode,
            (*rel).rd_backend,
            pg_sys::ForkNumber::MAIN_FORKNUM,
        );
        PathBuf::from(CStr::from_ptr(p).to_string_lossy().into_owned())
    }
}

/// The side directory of an open index's current relfilenode.
pub fn side_dir(rel: pg_sys::Relation) -> PathBuf {
    let main = main_fork_path(rel);
    let name = format!("{}{SUFFIX}", main.file_name().unwrap().to_string_lossy());
    main.with_file_name(name)
}

pub fn tmp_dir(rel: pg_sys::Relation) -> PathBuf {
    let main = main_fork_path(rel);
    let name = format!(
        "{}{TMP_INFIX}{}",
        main.file_name().unwrap().to_string_lossy(),
        std::process::id()
    );
    main.with_file_name(name)
}

/// A fresh random build id (never 0).
pub fn new_build_id() -> u64 {
    let mut id = 0u64;
    // SAFETY: pg_strong_random fills exactly 8 bytes of a local.
    let ok = unsafe { pg_sys::pg_strong_random(&mut id as *mut u64 as *mut std::ffi::c_void, 8) };
    if !ok || id == 0 {
        id = std::process::id() as u64
            ^ 0x9e37_79b9_7f4a_7c15
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64);
    }
    id
}

/// What `navis_build` records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildFile {
    pub build_id: u64,
    pub index_oid: u32,
    pub relfilenode: u32,
}

pub fn write_build_file(dir: &Path, b: &BuildFile) -> std::io::Result<()> {
    let path = dir.join(BUILD_FILE);
    let mut f = fs::File::create(&path)?;
    write!(
        f,
        "build_id={:016x}\nindex_oid={}\nrelfilenode={}\n",
        b.build_id, b.index_oid, b.relfilenode
    )?;
    f.sync_all()
}

pub fn read_build_file(dir: &Path) -> Option<BuildFile> {
    let text = fs::read_to_string(dir.join(BUILD_FILE)).ok()?;
    let get = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
            .map(str::to_owned)
    };
    Some(BuildFile {
        build_id: u64::from_str_radix(&get("build_id")?, 16).ok()?,
        index_oid: get("index_oid")?.parse().ok()?,
        relfilenode: get("relfilenode")?.parse().ok()?,
    })
}

/// fsyncs a directory so a rename inside it is durable.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

/// Writes the metapage as block 0 of the (empty) main fork, WAL-logged as a navis `META`
/// record (`wal::log_metapage`, RFC 0001 §4).
pub fn write_metapage(index: pg_sys::Relation, meta: &MetaPage) {
    // SAFETY: standard buffer-manager protocol on the index being built: extend the fork by
    // one page (P_NEW), lock it, fill and log it, release it.
    unsafe {
        let buf = pg_sys::ReadBufferExtended(
            index,
            pg_sys::ForkNumber::MAIN_FORKNUM,
            pg_sys::InvalidBlockNumber, // P_NEW
            pg_sys::ReadBufferMode::RBM_NORMAL,
            std::ptr::null_mut(),
        );
        pg_sys::LockBuffer(buf, pg_sys::BUFFER_LOCK_EXCLUSIVE as i32);
        let block = pg_sys::BufferGetBlockNumber(buf);
        if block != 0 {
            pg_sys::UnlockReleaseBuffer(buf);
            raise(
                PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                format!("navis metapage would be block {block}, expected block 0"),
                None,
            );
        }
        let bytes = std::slice::from_raw_parts(
            meta as *const MetaPage as *const u8,
            std::mem::size_of::<MetaPage>(),
        );
        crate::wal::log_metapage(index, buf, bytes);
        pg_sys::UnlockReleaseBuffer(buf);
    }
}

/// Reads block 0; `None` when the fork is empty or the page is not a navis metapage.
pub fn read_metapage(index: pg_sys::Relation) -> Option<MetaPage> {
    // SAFETY: reads block 0 under a share lock and copies the struct out before releasing.
    unsafe {
        let blocks =
            pg_sys::RelationGetNumberOfBlocksInFork(index, pg_sys::ForkNumber::MAIN_FORKNUM);
        if blocks == 0 {
            return None;
        }
        let buf = pg_sys::ReadBuffer(index, 0);
        pg_sys::LockBuffer(buf, pg_sys::BUFFER_LOCK_SHARE as i32);
        let page = pg_sys::BufferGetPage(buf);
        let contents = (page as *const u8).add(std::mem::size_of::<pg_sys::PageHeaderData>());
        let meta = std::ptr::read_unaligned(contents as *const MetaPage);
        pg_sys::UnlockReleaseBuffer(buf);
        (meta.magic == META_MAGIC).then_some(meta)
    }
}

pub fn new_metapage(
    build_id: u64,
    dim: u32,
    metric: u32,
    vertices: u64,
    dir_name: &str,
) -> MetaPage {
    let mut name = [0u8; 64];
    let bytes = dir_name.as_bytes();
    assert!(bytes.len() < name.len(), "side directory name too long");
    name[..bytes.len()].copy_from_slice(bytes);
    MetaPage {
        magic: META_MAGIC,
        version: META_VERSION,
        build_id,
        dim,
        metric,
        vertices,
        dir_name: name,
    }
}

// ---------------------------------------------------------------------------------------
// Transaction-scoped creation and removal
// ---------------------------------------------------------------------------------------

#[derive(Default)]
struct Pending {
    /// Directories this transaction created: removed if it aborts.
    created: Vec<(PathBuf, pg_sys::SubTransactionId)>,
    /// Directories to remove when this transaction commits.
    drops: Vec<(PathBuf, pg_sys::SubTransactionId)>,
}

thread_local! {
    static PENDING: RefCell<Pending> = RefCell::new(Pending::default());
}

fn current_subxact() -> pg_sys::SubTransactionId {
    // SAFETY: plain getter of the backend's transaction state.
    unsafe { pg_sys::GetCurrentSubTransactionId() }
}

/// Remembers a directory the current transaction created (removed if it aborts).
pub fn note_created(dir: &Path) {
    let sub = current_subxact();
    PENDING.with(|p| p.borrow_mut().created.push((dir.to_path_buf(), sub)));
}

/// A directory renamed: follows the rename in the creation list.
pub fn note_renamed(from: &Path, to: &Path) {
    PENDING.with(|p| {
        for (d, _) in p.borrow_mut().created.iter_mut() {
            if d == from {
                *d = to.to_path_buf();
            }
        }
    });
}

/// Forgets a directory already removed by its creator.
pub fn forget_created(dir: &Path) {
    PENDING.with(|p| p.borrow_mut().created.retain(|(d, _)| d != dir));
}

/// Schedules a directory for removal when the current transaction commits.
pub fn drop_at_commit(dir: &Path) {
    let sub = current_subxact();
    PENDING.with(|p| p.borrow_mut().drops.push((dir.to_path_buf(), sub)));
}

fn remove_dir(dir: &Path) {
    crate::scan::evict_dir(dir);
    // The build's pages would otherwise sit in NAVIS-Cache until evicted (the frozen region
    // evicts slowly by design).
    if let (Some(build), Some(cache)) = (read_build_file(dir), crate::cache::shared_cache()) {
        cache.purge(build.build_id);
    }
    match fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => pgrx::warning!("navis could not remove \"{}\": {e}", dir.display()),
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_xact(event: pg_sys::XactEvent::Type, _arg: *mut std::ffi::c_void) {
    use pg_sys::XactEvent::*;
    match event {
        XACT_EVENT_COMMIT | XACT_EVENT_PARALLEL_COMMIT | XACT_EVENT_PREPARE => {
            let drops = PENDING.with(|p| {
                let mut p = p.borrow_mut();
                p.created.clear();
                std::mem::take(&mut p.drops)
            });
            for (d, _) in drops {
                remove_dir(&d);
            }
        }
        XACT_EVENT_ABORT | XACT_EVENT_PARALLEL_ABORT => {
            let created = PENDING.with(|p| {
                let mut p = p.borrow_mut();
                p.drops.clear();
                std::mem::take(&mut p.created)
            });
            for (d, _) in created {
                remove_dir(&d);
            }
        }
        _ => {}
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_subxact(
    event: pg_sys::SubXactEvent::Type,
    my_subid: pg_sys::SubTransactionId,
    parent_subid: pg_sys::SubTransactionId,
    _arg: *mut std::ffi::c_void,
) {
    use pg_sys::SubXactEvent::*;
    match event {
        SUBXACT_EVENT_ABORT_SUB => {
            let created = PENDING.with(|p| {
                let mut p = p.borrow_mut();
                p.drops.retain(|(_, s)| *s != my_subid);
                let (gone, keep): (Vec<_>, Vec<_>) =
                    p.created.drain(..).partition(|(_, s)| *s == my_subid);
                p.created = keep;
                gone
            });
            for (d, _) in created {
                remove_dir(&d);
            }
        }
        SUBXACT_EVENT_COMMIT_SUB => PENDING.with(|p| {
            let mut p = p.borrow_mut();
            let p = &mut *p;
            for (_, s) in p.created.iter_mut().chain(p.drops.iter_mut()) {
                if *s == my_subid {
                    *s = parent_subid;
                }
            }
        }),
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------
// Hooks: DROP (object access) and SET TABLESPACE (utility)
// ---------------------------------------------------------------------------------------

static mut PREV_OBJECT_ACCESS: pg_sys::object_access_hook_type = None;
static mut PREV_PROCESS_UTILITY: pg_sys::ProcessUtility_hook_type = None;

/// Installs the hooks and transaction callbacks. Called from `_PG_init` in every process
/// that loads navis.
pub fn register() {
    // SAFETY: hook chaining in _PG_init, single-threaded, as PostgreSQL expects.
    unsafe {
        PREV_OBJECT_ACCESS = pg_sys::object_access_hook;
        pg_sys::object_access_hook = Some(on_object_access);
        PREV_PROCESS_UTILITY = pg_sys::ProcessUtility_hook;
        pg_sys::ProcessUtility_hook = Some(on_process_utility);
        pg_sys::RegisterXactCallback(Some(on_xact), std::ptr::null_mut());
        pg_sys::RegisterSubXactCallback(Some(on_subxact), std::ptr::null_mut());
    }
}

/// OID of the navis access method, if the extension is installed in this database.
fn navis_am_oid() -> Option<pg_sys::Oid> {
    // SAFETY: catalog lookup by name; missing_ok = true.
    let oid = unsafe { pg_sys::get_am_oid(c"navis".as_ptr(), true) };
    (oid != pg_sys::InvalidOid).then_some(oid)
}

/// The open relation `oid` if it is a navis index (opened with NoLock: callers hold a lock).
fn with_navis_index<R>(oid: pg_sys::Oid, f: impl FnOnce(pg_sys::Relation) -> R) -> Option<R> {
    let am = navis_am_oid()?;
    // SAFETY: RelationIdGetRelation returns NULL or a relcache entry we close again.
    unsafe {
        let rel = pg_sys::RelationIdGetRelation(oid);
        if rel.is_null() {
            return None;
        }
        let is_navis =
            (*(*rel).rd_rel).relkind == pg_sys::RELKIND_INDEX as i8 && (*(*rel).rd_rel).relam == am;
        let r = if is_navis { Some(f(rel)) } else { None };
        pg_sys::RelationClose(rel);
        r
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_object_access(
    access: pg_sys::ObjectAccessType::Type,
    class_id: pg_sys::Oid,
    object_id: pg_sys::Oid,
    sub_id: std::ffi::c_int,
    arg: *mut std::ffi::c_void,
) {
    // SAFETY: chaining to the previous hook with the arguments we were given.
    unsafe {
        if let Some(prev) = PREV_OBJECT_ACCESS {
            prev(access, class_id, object_id, sub_id, arg);
        }
    }
    if access == pg_sys::ObjectAccessType::OAT_DROP
        && class_id == pg_sys::RelationRelationId
        && sub_id == 0
        // SAFETY: reading the backend's transaction state.
        && unsafe { pg_sys::IsTransactionState() }
    {
        with_navis_index(object_id, |rel| drop_at_commit(&side_dir(rel)));
    }
}

#[pg_guard]
#[allow(clippy::too_many_arguments)]
unsafe extern "C-unwind" fn on_process_utility(
    pstmt: *mut pg_sys::PlannedStmt,
    query: *const std::ffi::c_char,
    read_only_tree: bool,
    context: pg_sys::ProcessUtilityContext::Type,
    params: pg_sys::ParamListInfo,
    env: *mut pg_sys::QueryEnvironment,
    dest: *mut pg_sys::DestReceiver,
    qc: *mut pg_sys::QueryCompletion,
) {
    // SAFETY: pstmt is the statement being executed; we only read its node tree.
    unsafe { refuse_set_tablespace((*pstmt).utilityStmt) };
    // SAFETY: chaining with the same arguments.
    unsafe {
        match PREV_PROCESS_UTILITY {
            Some(prev) => prev(pstmt, query, read_only_tree, context, params, env, dest, qc),
            None => pg_sys::standard_ProcessUtility(
                pstmt,
                query,
                read_only_tree,
                context,
                params,
                env,
                dest,
                qc,
            ),
        }
    }
}

/// `ALTER INDEX navis_idx SET TABLESPACE ts` (and `ALTER INDEX ALL IN TABLESPACE` over
/// navis indexes) would copy the main fork only: refuse it with the command that works.
unsafe fn refuse_set_tablespace(stmt: *mut pg_sys::Node) {
    if stmt.is_null() {
        return;
    }
    // SAFETY: node tags identify the struct behind the pointer.
    unsafe {
        if (*stmt).type_ == pg_sys::NodeTag::T_AlterTableStmt {
            let alter = stmt as *mut pg_sys::AlterTableStmt;
            let mut sets_tablespace = false;
            let list = (*alter).cmds;
            if !list.is_null() {
                for i in 0..(*list).length {
                    let cmd = pg_sys::list_nth(list, i) as *mut pg_sys::AlterTableCmd;
                    if (*cmd).subtype == pg_sys::AlterTableType::AT_SetTableSpace {
                        sets_tablespace = true;
                    }
                }
            }
            if !sets_tablespace || navis_am_oid().is_none() {
                return;
            }
            let oid = pg_sys::RangeVarGetRelidExtended(
                (*alter).relation,
                pg_sys::NoLock as i32,
                pg_sys::RVROption::RVR_MISSING_OK,
                None,
                std::ptr::null_mut(),
            );
            if oid == pg_sys::InvalidOid {
                return;
            }
            if let Some(name) = with_navis_index(oid, relation_name) {
                raise(
                    PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                    format!("cannot move navis index \"{name}\" with SET TABLESPACE"),
                    Some(&format!(
                        "SET TABLESPACE copies only the index's main fork, not its side files. Use REINDEX INDEX {name} TABLESPACE <tablespace> instead."
                    )),
                );
            }
        } else if (*stmt).type_ == pg_sys::NodeTag::T_AlterTableMoveAllStmt {
            let m = stmt as *mut pg_sys::AlterTableMoveAllStmt;
            if (*m).objtype == pg_sys::ObjectType::OBJECT_INDEX && navis_am_oid().is_some() {
                raise(
                    PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                    "ALTER INDEX ALL IN TABLESPACE is not supported while the navis extension is installed".into(),
                    Some("Move navis indexes with REINDEX INDEX ... TABLESPACE and other indexes one by one with ALTER INDEX ... SET TABLESPACE."),
                );
            }
        }
    }
}

pub fn relation_name(rel: pg_sys::Relation) -> String {
    // SAFETY: rd_rel->relname is a NUL-terminated NameData of an open relation.
    unsafe {
        CStr::from_ptr((*(*rel).rd_rel).relname.data.as_ptr())
            .to_string_lossy()
            .into_owned()
    }
}

// ---------------------------------------------------------------------------------------
// Finding side directories; the sweep
// ---------------------------------------------------------------------------------------

/// The directories of the current database in every tablespace (default and pg_tblspc/*).
pub fn database_dirs() -> Vec<PathBuf> {
    // SAFETY: MyDatabaseId is set in a backend connected to a database; GetDatabasePath
    // returns a palloc'd string.
    let db = unsafe { pg_sys::MyDatabaseId };
    let path = |spc: pg_sys::Oid| unsafe {
        PathBuf::from(
            CStr::from_ptr(pg_sys::GetDatabasePath(db, spc))
                .to_string_lossy()
                .into_owned(),
        )
    };
    let mut dirs = vec![path(pg_sys::DEFAULTTABLESPACE_OID)];
    if let Ok(entries) = fs::read_dir("pg_tblspc") {
        for e in entries.flatten() {
            if let Some(oid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) {
                dirs.push(path(pg_sys::Oid::from(oid)));
            }
        }
    }
    dirs.into_iter().filter(|d| d.is_dir()).collect()
}

/// A side directory found on disk.
#[derive(Clone, Debug)]
pub struct Found {
    pub path: PathBuf,
    /// Main fork beside it (for a temporary directory: its future main fork).
    pub main_fork: PathBuf,
    /// PID of the building process, for a temporary directory.
    pub tmp_pid: Option<i32>,
}

pub fn list_side_dirs() -> Vec<Found> {
    let mut out = Vec::new();
    for db in database_dirs() {
        let Ok(entries) = fs::read_dir(&db) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some((base, pid)) = name.split_once(TMP_INFIX) {
                out.push(Found {
                    path: e.path(),
                    main_fork: db.join(base),
                    tmp_pid: pid.parse().ok(),
                });
            } else if let Some(base) = name.strip_suffix(SUFFIX) {
                out.push(Found {
                    path: e.path(),
                    main_fork: db.join(base),
                    tmp_pid: None,
                });
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

fn process_alive(pid: i32) -> bool {
    // SAFETY: kill with signal 0 only checks for existence and permission.
    let r = unsafe { libc_kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(1) // EPERM: exists
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// Whether a found directory is an orphan: a temporary directory of a process that is gone,
/// or a side directory whose main fork is absent or empty (dropped, or replaced by a new
/// relfilenode whose transaction committed).
pub fn is_orphan(f: &Found) -> bool {
    match f.tmp_pid {
        Some(pid) => pid as u32 != std::process::id() && !process_alive(pid),
        None => fs::metadata(&f.main_fork).map_or(true, |m| m.len() == 0),
    }
}

/// Removes orphan side directories of the current database; returns their paths.
pub fn sweep() -> Vec<PathBuf> {
    let mut removed = Vec::new();
    for f in list_side_dirs() {
        if is_orphan(&f) {
            remove_dir(&f.path);
            removed.push(f.path);
        }
    }
    removed
}

/// Size in bytes of the files in a directory.
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
