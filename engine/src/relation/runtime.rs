//! The runtime copy of a relation index (RFC 0001 §3): the state every search and insert
//! reads without touching a page (indirection entries, PQ codes, allocator and live counts,
//! the entrance graph), materialised from the relation's buffer-managed pages into a
//! directory of memory-mapped files that every process of one server lifetime shares. The
//! bulk pages (edge lists, vectors) stay in the relation and are read from it as searches go.
//!
//! The copy is never the durable truth: it is rebuilt from the pages whenever its directory
//! is missing (a new server lifetime names a new directory), and `update::recover` derives
//! the free lists and live counts from its entries (RFC 0001 §10). The directory holds the
//! files `IndexFiles` maps (`indirection.dat`, `pq_codes.dat`, `state.dat`, the two blobs,
//! `entrance.shm`), but no manifest: the manifest is derived from the metapage at each open.
//!
//! Creation is atomic: a process writes a private directory and renames it into place; one
//! that loses the race to another drops its own and opens the winner's.

use super::race::retry_racing_growth;
use super::RelationImage;
use crate::entrance::shared::SharedEntrance;
use crate::entrance::EntranceGraph;
use crate::index::{Index, IndexError};
use crate::pages::edge::EdgeLayout;
use crate::pages::extent::ExtentMap;
use crate::pages::meta::Meta;
use crate::pages::vector::VectorPages;
use crate::pages::PageKind;
use crate::storage::blob::{self, BlobKind};
use crate::storage::{
    names, Field, IndexFiles, IndirectionTable, Manifest, RelationBulk, SharedState, StorageError,
};
use crate::store::PageStore;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// Opens the index in `store` (whose main fork's first segment file is `fork`), with its
/// runtime copy in `runtime_dir`: materialised from the pages if the directory does not
/// exist yet, shared as it is otherwise. The caller runs `update::recover` with its server
/// lifetime's epoch before writing, as for a side directory.
pub fn open_index(
    store: Arc<dyn PageStore>,
    fork: &Path,
    runtime_dir: &Path,
) -> Result<Index, IndexError> {
    open_index_synced(store, fork, runtime_dir, 0)
}

/// [`open_index`] for a hot standby: a copy made here records that it is synced to redo
/// generation `generation` (read before any page; see [`super::standby`]).
pub fn open_index_synced(
    store: Arc<dyn PageStore>,
    fork: &Path,
    runtime_dir: &Path,
    generation: u64,
) -> Result<Index, IndexError> {
    let (meta, extent_map, ids) = read_or_make_copy(&*store, fork, runtime_dir, generation)?;
    let manifest = manifest_of(&meta, &extent_map, ids, fork)?;
    let relation = RelationBulk {
        store,
        fork: fork.to_path_buf(),
        edges: EdgeLayout::new(meta.max_degree as usize)?,
        vectors: VectorPages::new(meta.dim as usize)?,
        map: RwLock::new(extent_map),
        segments: Default::default(),
    };
    Index::from_files(IndexFiles::open_relation(runtime_dir, manifest, relation)?)
}

/// The layout (metapage, extent map) and id count an open starts from. With a copy in
/// `runtime_dir` already, only the layout is read: the copy's files are current (its writers
/// keep them so), and reading the hot pages would race with those writers, whose growth can
/// land between the read of the extent map and of the entries (an entry then names an edge
/// page beyond the map read). Without one, the hot pages are read and the copy made from
/// them. Either read can race the relation's growth and is tried again ([`super::race`]),
/// taking the layout path as soon as another backend has placed a copy; real damage fails
/// every try. A PostgreSQL primary calls this under the relation extension lock, which
/// every layout change holds, so there the first read is consistent; the retries serve a
/// hot standby, whose redo changes pages without that lock, and stores with no lock at all.
fn read_or_make_copy(
    store: &dyn PageStore,
    fork: &Path,
    runtime_dir: &Path,
    generation: u64,
) -> Result<(Meta, ExtentMap, usize), StorageError> {
    retry_racing_growth(|| {
        if runtime_dir.join(names::STATE).exists() {
            // Not `read_layout`, which retries by itself: the tries would multiply.
            let (meta, map) = RelationImage::read_layout_once(store, fork)?;
            let ids = meta.build_vertices as usize;
            Ok((meta, map, ids))
        } else {
            make_copy(store, fork, runtime_dir, generation)
        }
    })
}

/// The side-file manifest an open relation index presents to the engine: geometry and
/// build parameters from the metapage, edge pages from the extent map, `ids` vertex ids
/// (the decoded entries when the copy is made here; the build's vertices when an existing
/// copy is mapped, whose own files hold the current count: the relation layout reads
/// neither field after the open).
fn manifest_of(
    meta: &Meta,
    extent_map: &ExtentMap,
    ids: usize,
    fork: &Path,
) -> Result<Manifest, StorageError> {
    let edges = EdgeLayout::new(meta.max_degree as usize)?;
    if ids >= crate::storage::indirection::MAX_VERTICES {
        return Err(StorageError::corrupt(
            fork,
            format!("{ids} vertex ids exceed what one index can hold"),
        ));
    }
    Ok(Manifest {
        metric: meta.metric,
        dim: meta.dim,
        max_degree: meta.max_degree,
        pq_bytes: meta.pq_bytes,
        vertex_count: meta.build_vertices,
        slots_per_page: edges.slots_per_page() as u32,
        edge_pages: extent_map.capacity(PageKind::Edge),
        vector_slots: ids as u32,
        indirection_capacity: IndirectionTable::capacity_for(ids) as u32,
        medoid: meta.medoid,
        params: meta.params,
    })
}

/// Reads the hot pages and writes the runtime copy from them into a private directory beside
/// `dir`, then renames it to `dir`; losing the rename to another process is success. Returns
/// the layout and id count the copy was made from.
fn make_copy(
    store: &dyn PageStore,
    fork: &Path,
    dir: &Path,
    generation: u64,
) -> Result<(Meta, ExtentMap, usize), StorageError> {
    let private = private_name(dir);
    std::fs::create_dir_all(&private)
        .map_err(|e| StorageError::io(&private, "create directory", e))?;
    let written = write_copy(store, fork, &private, generation);
    let placed = written.and_then(|layout| {
        match std::fs::rename(&private, dir) {
            Ok(()) => Ok(layout),
            // Another process placed its copy first; both were made from the same pages.
            Err(_) if dir.join(names::STATE).exists() => Ok(layout),
            Err(e) => Err(StorageError::io(dir, "rename runtime directory", e)),
        }
    });
    if private.exists() {
        let _ = std::fs::remove_dir_all(&private);
    }
    placed
}

/// The runtime files, in `dir`. The PQ codes go from their pages straight into
/// `pq_codes.dat`: held whole, they and the copy padded to the indirection's capacity were
/// 192 MB of the opening backend's heap at 1M rows, and at 320 MiB of memory the kernel
/// killed that backend, restarting the server (RFC 0011).
fn write_copy(
    store: &dyn PageStore,
    fork: &Path,
    dir: &Path,
    generation: u64,
) -> Result<(Meta, ExtentMap, usize), StorageError> {
    let codes_path = dir.join(names::PQ_CODES);
    let file = std::fs::File::create(&codes_path)
        .map_err(|e| StorageError::io(&codes_path, "create", e))?;
    let mut codes = std::io::BufWriter::with_capacity(1 << 16, file);
    let image = RelationImage::read_hot_writing_codes(store, fork, &codes_path, &mut codes)?;
    let ids = image.entries.len();
    let manifest = manifest_of(&image.meta, &image.extent_map, ids, fork)?;
    // Ids up to the indirection's capacity get zero codes, as they would from a writer.
    let pad =
        (manifest.indirection_capacity as usize).saturating_sub(ids) * manifest.pq_bytes as usize;
    std::io::copy(&mut std::io::repeat(0).take(pad as u64), &mut codes)
        .and_then(|_| codes.flush())
        .map_err(|e| StorageError::io(&codes_path, "write", e))?;
    drop(codes);
    write_runtime_files(&image, &manifest, dir, generation)?;
    let RelationImage {
        meta, extent_map, ..
    } = image;
    Ok((meta, extent_map, ids))
}

fn private_name(dir: &Path) -> PathBuf {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    dir.with_file_name(format!(
        "{name}.tmp.{}.{:x}",
        std::process::id(),
        rand::random::<u64>()
    ))
}

/// Every runtime file but the PQ codes, which [`write_copy`] streams.
fn write_runtime_files(
    image: &RelationImage,
    manifest: &Manifest,
    dir: &Path,
    generation: u64,
) -> Result<(), StorageError> {
    let capacity = manifest.indirection_capacity as usize;
    let table = IndirectionTable::create(&dir.join(names::INDIRECTION), capacity)?;
    for (v, entry) in image.entries.iter().enumerate() {
        if let Some(entry) = *entry {
            table.publish(v as u32, entry)?;
        }
    }

    // Every id below the high-water mark counts as handed out; recovery puts the unpublished
    // ones on the free list and counts the rest.
    // The lists per edge page the image's allocator counted (and checked against the runs).
    let live = &image.allocator.live;
    let state = SharedState::create(&dir.join(names::STATE), manifest.vector_slots, live)?;
    // The promotions, as the runtime log every rebuild of the shared graph replays.
    write_file(&dir.join(names::ENTRANCE_LOG), &image.promotions)?;
    let promotion_bytes = u32::try_from(image.promotions.len()).map_err(|_| {
        StorageError::corrupt(table.path(), "more than 4 GiB of entrance-graph promotions")
    })?;
    state.set(Field::EntranceLogBytes, promotion_bytes);
    state.set_synced_generation(generation);

    blob::write(
        &dir.join(names::PQ_CODEBOOK),
        BlobKind::PqCodebook,
        &image.codebook,
    )?;
    blob::write(
        &dir.join(names::ENTRANCE),
        BlobKind::EntranceGraph,
        &image.entrance,
    )?;
    let mut graph = EntranceGraph::from_bytes(&image.entrance)
        .map_err(|e| StorageError::corrupt(&dir.join(names::ENTRANCE), e.to_string()))?;
    crate::update::promote::apply_records(&image.promotions, &mut graph);
    SharedEntrance::create(&dir.join(names::ENTRANCE_SHM), &graph, 0)
        .map_err(|e| StorageError::corrupt(&dir.join(names::ENTRANCE_SHM), e.to_string()))
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), StorageError> {
    std::fs::write(path, bytes).map_err(|e| StorageError::io(path, "write", e))
}
