//! The one writer module: every byte of every side file is written from here.
//!
//! Two kinds of writes:
//! * [`IndexWriter::create`] writes a freshly built index. Each file is written under a
//!   temporary name (`<name>.tmp`), fsynced, then renamed into place with the manifest last,
//!   and the directory is fsynced. A directory without a manifest is therefore never mistaken
//!   for an index, and on any error every file this call created is removed again (plus the
//!   directory if this call created it).
//! * [`SideFileWriter`] holds the in-place primitives inserts build on: write one sealed edge
//!   page, write one vector slot, publish one indirection entry, and `sync`. They do not fsync
//!   per call; the caller decides when durability is needed (`sync`), because the WAL
//!   protocol (DESIGN.md §5) batches it. Out-of-place discipline (never overwrite a slot a
//!   reader can still reach) is the caller's job; these primitives only refuse malformed data.

use super::blob::{self, BlobKind};
use super::edge_page::EdgePageLayout;
use super::error::StorageError;
use super::files::IndexFiles;
use super::indirection::{EdgeLocation, IndirEntry, IndirectionTable, FLAG_LIVE};
use super::manifest::{BuildParams, Manifest};
use super::state::SharedState;
use super::vector_file::{HeapTid, VectorLayout};
use super::{names, PAGE_SIZE};
use crate::placement::Placement;
use crate::{Metric, VertexId};
use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Everything a build produced, borrowed.
pub struct BuildInput<'a> {
    pub metric: Metric,
    pub dim: usize,
    pub max_degree: usize,
    /// Row-major, `n * dim` values (already normalised for cosine indexes).
    pub vectors: &'a [f32],
    /// Heap TID of each vertex; its length is the vertex count `n`.
    pub heap_tids: &'a [HeapTid],
    pub adjacency: &'a [Vec<VertexId>],
    pub placement: &'a Placement,
    pub pq_bytes: usize,
    /// Opaque `ProductQuantizer::to_bytes` output.
    pub pq_codebook: &'a [u8],
    /// `n * pq_bytes` codes, vertex-major.
    pub pq_codes: &'a [u8],
    /// Opaque `EntranceGraph::to_bytes` output.
    pub entrance: &'a [u8],
    pub params: BuildParams,
}

pub struct IndexWriter;

impl IndexWriter {
    /// Writes a complete index into `dir` (created if missing; must not already hold index
    /// files) with vertex 0 as the medoid. Returns the manifest written.
    pub fn create(dir: &Path, input: &BuildInput) -> Result<Manifest, StorageError> {
        Self::create_with_medoid(dir, input, 0)
    }

    /// [`IndexWriter::create`] recording `medoid`, the start vertex of searches that have no
    /// entrance-graph entry points; it must be a vertex (0 for an empty index).
    pub fn create_with_medoid(
        dir: &Path,
        input: &BuildInput,
        medoid: VertexId,
    ) -> Result<Manifest, StorageError> {
        let mut manifest = validate(input)?;
        manifest.medoid = medoid;
        manifest.check_consistency()?;
        let created_dir = prepare_directory(dir)?;
        let mut staging = Staging::new(dir, created_dir);
        write_all_files(&mut staging, input, &manifest)?;
        staging.commit()?;
        Ok(manifest)
    }
}

fn validate(input: &BuildInput) -> Result<Manifest, StorageError> {
    let spp = EdgePageLayout::new(input.max_degree)?.slots_per_page();
    validate_with(input, spp)
}

/// Checks a build's input for edge pages of `spp` slots and derives its manifest
/// (`slots_per_page = spp`, medoid 0). Shared with the relation writer
/// (`crate::relation`), whose 8 KiB edge pages hold more slots than the side file's.
pub(crate) fn validate_with(input: &BuildInput, spp: usize) -> Result<Manifest, StorageError> {
    let n = input.heap_tids.len();
    let expect = |what: &str, got: usize, want: usize| {
        if got == want {
            Ok(())
        } else {
            Err(StorageError::invalid(format!(
                "{what} has length {got}, expected {want} for {n} vertices"
            )))
        }
    };
    expect("vectors", input.vectors.len(), n * input.dim)?;
    expect("adjacency", input.adjacency.len(), n)?;
    if input.pq_bytes == 0 {
        return Err(StorageError::invalid("pq_bytes must be at least 1"));
    }
    expect("pq_codes", input.pq_codes.len(), n * input.pq_bytes)?;
    let manifest = validate_header(input, spp)?;
    for (u, list) in input.adjacency.iter().enumerate() {
        check_list(u as VertexId, list, input.max_degree, n)?;
    }
    Ok(manifest)
}

/// One list of `n` vertices: at most `max_degree` ids, each a vertex. A streamed relation
/// write checks each list this way as it comes.
pub(crate) fn check_list(
    v: VertexId,
    list: &[VertexId],
    max_degree: usize,
    n: usize,
) -> Result<(), StorageError> {
    if list.len() > max_degree {
        return Err(StorageError::invalid(format!(
            "vertex {v} has {} neighbours, more than max_degree {max_degree}",
            list.len()
        )));
    }
    if let Some(&bad) = list.iter().find(|&&u| u as usize >= n) {
        return Err(StorageError::invalid(format!(
            "vertex {v} has neighbour {bad} >= {n}"
        )));
    }
    Ok(())
}

/// What [`validate_with`] checks apart from the vectors, lists and codes themselves: the
/// dimension, vertex count, code size and placement. A streamed relation write checks its
/// lists as they come.
pub(crate) fn validate_header(input: &BuildInput, spp: usize) -> Result<Manifest, StorageError> {
    let n = input.heap_tids.len();
    VectorLayout::new(input.dim)?;
    if n >= u32::MAX as usize {
        return Err(StorageError::invalid(format!(
            "{n} vertices exceed the u32 vertex id space"
        )));
    }
    if input.pq_bytes == 0 {
        return Err(StorageError::invalid("pq_bytes must be at least 1"));
    }
    input
        .placement
        .validate(n, spp)
        .map_err(|e| StorageError::invalid(format!("invalid placement: {e}")))?;
    let indirection_capacity = IndirectionTable::capacity_for(n);
    Ok(Manifest {
        metric: input.metric,
        dim: input.dim as u32,
        max_degree: input.max_degree as u32,
        pq_bytes: input.pq_bytes as u32,
        vertex_count: n as u32,
        slots_per_page: spp as u32,
        edge_pages: input.placement.pages,
        vector_slots: n as u32,
        indirection_capacity: indirection_capacity as u32,
        medoid: 0,
        params: input.params,
    })
}

/// Creates `dir` if needed; refuses a directory that already holds index files so that a
/// build can never clobber (or, on error, delete) another index's files.
fn prepare_directory(dir: &Path) -> Result<bool, StorageError> {
    if dir.exists() {
        for name in names::ALL {
            if dir.join(name).exists() {
                return Err(StorageError::invalid(format!(
                    "directory \"{}\" already holds index file {name}",
                    dir.display()
                )));
            }
        }
        Ok(false)
    } else {
        fs::create_dir_all(dir).map_err(|e| StorageError::io(dir, "create directory", e))?;
        Ok(true)
    }
}

/// Temporary files of an in-progress build; removes them on drop unless committed.
struct Staging {
    dir: PathBuf,
    created_dir: bool,
    written: Vec<&'static str>,
    renamed: Vec<&'static str>,
    committed: bool,
}

impl Staging {
    fn new(dir: &Path, created_dir: bool) -> Self {
        Staging {
            dir: dir.to_path_buf(),
            created_dir,
            written: Vec::new(),
            renamed: Vec::new(),
            committed: false,
        }
    }

    fn tmp_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.tmp"))
    }

    /// Creates `<name>.tmp` and records it for cleanup.
    fn create(&mut self, name: &'static str) -> Result<(File, PathBuf), StorageError> {
        let path = self.tmp_path(name);
        self.written.push(name);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| StorageError::io(&path, "create", e))?;
        Ok((file, path))
    }

    /// Renames every file into place (manifest last) and makes the renames durable.
    fn commit(mut self) -> Result<(), StorageError> {
        for name in names::ALL {
            if !self.written.contains(&name) {
                return Err(StorageError::invalid(format!(
                    "internal error: {name} was not written"
                )));
            }
            let from = self.tmp_path(name);
            let to = self.dir.join(name);
            fs::rename(&from, &to).map_err(|e| StorageError::io(&from, "rename", e))?;
            self.renamed.push(name);
        }
        sync_directory(&self.dir)?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        // Best effort: the original error is what the caller needs to see.
        for name in &self.written {
            let _ = fs::remove_file(self.tmp_path(name));
        }
        for name in &self.renamed {
            let _ = fs::remove_file(self.dir.join(name));
        }
        if self.created_dir {
            let _ = fs::remove_dir(&self.dir);
        }
    }
}

fn sync_directory(dir: &Path) -> Result<(), StorageError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StorageError::io(dir, "fsync directory", e))
}

fn finish(writer: BufWriter<File>, path: &Path) -> Result<(), StorageError> {
    let file = writer
        .into_inner()
        .map_err(|e| StorageError::io(path, "write", e.into_error()))?;
    file.sync_all()
        .map_err(|e| StorageError::io(path, "fsync", e))
}

fn write_all_files(
    staging: &mut Staging,
    input: &BuildInput,
    manifest: &Manifest,
) -> Result<(), StorageError> {
    write_edges(staging, input, manifest)?;
    write_vectors(staging, input)?;
    write_indirection(staging, input, manifest)?;
    write_bytes(
        staging,
        names::PQ_CODEBOOK,
        &blob::encode(BlobKind::PqCodebook, input.pq_codebook),
    )?;
    write_pq_codes(staging, input, manifest)?;
    write_state(staging, input, manifest)?;
    write_bytes(
        staging,
        names::ENTRANCE,
        &blob::encode(BlobKind::EntranceGraph, input.entrance),
    )?;
    write_bytes(staging, names::MANIFEST, manifest.to_text().as_bytes())
}

fn write_edges(
    staging: &mut Staging,
    input: &BuildInput,
    manifest: &Manifest,
) -> Result<(), StorageError> {
    let layout = EdgePageLayout::new(input.max_degree)?;
    let spp = layout.slots_per_page();
    let members = input.placement.members(spp);
    let (file, path) = staging.create(names::EDGES)?;
    let mut out = BufWriter::with_capacity(64 * PAGE_SIZE, file);
    let mut page = vec![0u8; PAGE_SIZE];
    for page_no in 0..manifest.edge_pages {
        layout.init_page(&mut page, page_no);
        for slot in 0..spp {
            let v = members[page_no as usize * spp + slot];
            if v != super::FREE_OWNER {
                layout.put_slot(&mut page, slot, v, &input.adjacency[v as usize])?;
            }
        }
        layout.seal(&mut page);
        out.write_all(&page)
            .map_err(|e| StorageError::io(&path, "write", e))?;
    }
    finish(out, &path)
}

fn write_vectors(staging: &mut Staging, input: &BuildInput) -> Result<(), StorageError> {
    let layout = VectorLayout::new(input.dim)?;
    let (file, path) = staging.create(names::VECTORS)?;
    let mut out = BufWriter::with_capacity(64 * PAGE_SIZE, file);
    let io = |e| StorageError::io(&path, "write", e);
    out.write_all(&layout.encode_header()).map_err(io)?;
    let mut slot = vec![0u8; layout.slot_size()];
    let n = input.heap_tids.len();
    for v in 0..n {
        let vector = &input.vectors[v * input.dim..(v + 1) * input.dim];
        layout.encode_slot(&mut slot, vector, v as VertexId, input.heap_tids[v])?;
        out.write_all(&slot).map_err(io)?;
    }
    let written = layout.slot_offset(n as u32);
    let padding = layout.file_len(n as u32) - written;
    out.write_all(&vec![0u8; padding as usize]).map_err(io)?;
    finish(out, &path)
}

fn write_indirection(
    staging: &mut Staging,
    input: &BuildInput,
    manifest: &Manifest,
) -> Result<(), StorageError> {
    let (file, path) = staging.create(names::INDIRECTION)?;
    drop(file);
    let table = IndirectionTable::create(&path, manifest.indirection_capacity as usize)?;
    let placement = input.placement;
    for v in 0..input.heap_tids.len() {
        let entry = IndirEntry {
            edge: EdgeLocation {
                page: placement.page_of[v],
                slot: placement.slot_of[v],
            },
            tid: input.heap_tids[v],
            flags: FLAG_LIVE,
        };
        table.publish(v as VertexId, entry)?;
    }
    table.flush()?;
    File::open(&path)
        .and_then(|f| f.sync_all())
        .map_err(|e| StorageError::io(&path, "fsync", e))
}

/// The codes, zero-padded to the indirection table's capacity: the file always covers every
/// id the table can hold, so growing the index extends both together (`IndexFiles`).
fn write_pq_codes(
    staging: &mut Staging,
    input: &BuildInput,
    manifest: &Manifest,
) -> Result<(), StorageError> {
    let mut bytes = input.pq_codes.to_vec();
    bytes.resize(manifest.indirection_capacity as usize * input.pq_bytes, 0);
    write_bytes(staging, names::PQ_CODES, &bytes)
}

/// The shared runtime state of a fresh index: every vertex published, each page's live
/// slots counted from the placement.
fn write_state(
    staging: &mut Staging,
    input: &BuildInput,
    manifest: &Manifest,
) -> Result<(), StorageError> {
    let (file, path) = staging.create(names::STATE)?;
    drop(file);
    let mut live = vec![0u32; manifest.edge_pages as usize];
    for &page in &input.placement.page_of {
        live[page as usize] += 1;
    }
    let state = SharedState::create(&path, manifest.vertex_count, &live)?;
    state.flush()?;
    File::open(&path)
        .and_then(|f| f.sync_all())
        .map_err(|e| StorageError::io(&path, "fsync", e))
}

fn write_bytes(
    staging: &mut Staging,
    name: &'static str,
    bytes: &[u8],
) -> Result<(), StorageError> {
    let (file, path) = staging.create(name)?;
    let mut out = BufWriter::new(file);
    out.write_all(bytes)
        .map_err(|e| StorageError::io(&path, "write", e))?;
    finish(out, &path)
}

/// In-place primitives on an open index. Borrowing [`IndexFiles`] ties the writer to the
/// layouts and the indirection table that the index was opened with.
pub struct SideFileWriter<'a> {
    files: &'a IndexFiles,
    edges: File,
    vectors: File,
}

impl<'a> SideFileWriter<'a> {
    pub fn new(files: &'a IndexFiles) -> Result<Self, StorageError> {
        let open = |path: PathBuf| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .map_err(|e| StorageError::io(&path, "open for writing", e))
        };
        Ok(SideFileWriter {
            files,
            edges: open(files.edge_path())?,
            vectors: open(files.vector_path())?,
        })
    }

    /// Writes one sealed page at `page_no` (extending the file when `page_no` is the next
    /// page). The page is verified first so that a malformed page never reaches the disk.
    pub fn write_edge_page(&self, page_no: u32, page: &[u8]) -> Result<(), StorageError> {
        let path = self.files.edge_path();
        self.files.edge_layout().verify(&path, page, page_no)?;
        self.edges
            .write_all_at(page, page_no as u64 * PAGE_SIZE as u64)
            .map_err(|e| StorageError::io(&path, "write", e))
    }

    /// Writes `vector` into vector slot `slot`, stamped with `owner` and `tid`. The slot must
    /// lie inside the file (the allocator extends it).
    pub fn write_vector_slot(
        &self,
        slot: u32,
        owner: VertexId,
        vector: &[f32],
        tid: HeapTid,
    ) -> Result<(), StorageError> {
        let layout = self.files.vector_layout();
        let path = self.files.vector_path();
        let mut bytes = vec![0u8; layout.slot_size()];
        layout.encode_slot(&mut bytes, vector, owner, tid)?;
        // Never set_len here: two writers extending from stale lengths could shrink the file
        // under a slot the other just wrote. The allocator extends the file
        // (IndexFiles::extend_vector_file); this only checks.
        let needed = layout.file_len(slot + 1);
        let len = self
            .vectors
            .metadata()
            .map_err(|e| StorageError::io(&path, "stat", e))?
            .len();
        if len < needed {
            return Err(StorageError::invalid(format!(
                "vector slot {slot} is beyond the end of {} ({len} bytes)",
                path.display()
            )));
        }
        self.vectors
            .write_all_at(&bytes, layout.slot_offset(slot))
            .map_err(|e| StorageError::io(&path, "write", e))
    }

    /// Publishes `vertex` (one atomic store of its edge word, see [`IndirectionTable`]).
    /// Call only after the slots it points at have been written.
    pub fn publish(&self, vertex: VertexId, entry: IndirEntry) -> Result<(), StorageError> {
        self.files.indirection().publish(vertex, entry)
    }

    /// Makes every write so far durable: fdatasync of both files, msync of the table.
    pub fn sync(&self) -> Result<(), StorageError> {
        self.edges
            .sync_data()
            .map_err(|e| StorageError::io(&self.files.edge_path(), "fdatasync", e))?;
        self.vectors
            .sync_data()
            .map_err(|e| StorageError::io(&self.files.vector_path(), "fdatasync", e))?;
        self.files.indirection().flush()
    }
}
