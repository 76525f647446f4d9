//! Opening an existing index directory: validate the manifest and every file against it, map
//! the indirection table and the PQ codes, load the small blobs.
//!
//! The PQ codes file is headerless: `vertex_count * pq_bytes` bytes, vertex-major, so that
//! code `v` is at byte `v * pq_bytes` of the mapping with no arithmetic beyond that. Its
//! geometry comes from the manifest.

use super::blob::{self, BlobKind};
use super::edge_page::EdgePageLayout;
use super::error::StorageError;
use super::indirection::IndirectionTable;
use super::manifest::Manifest;
use super::vector_file::{VectorLayout, VECTOR_FILE_HEADER_SIZE};
use super::{names, PAGE_SIZE};
use crate::VertexId;
use memmap2::Mmap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// An open, validated index directory.
pub struct IndexFiles {
    dir: PathBuf,
    manifest: Manifest,
    edge_layout: EdgePageLayout,
    vector_layout: VectorLayout,
    indirection: IndirectionTable,
    pq_codes: Mmap,
    pq_codebook: Vec<u8>,
    entrance: Vec<u8>,
    edges: File,
    vectors: File,
}

impl IndexFiles {
    pub fn open(dir: &Path) -> Result<IndexFiles, StorageError> {
        let manifest = Manifest::read(&dir.join(names::MANIFEST))?;
        let edge_layout = manifest.edge_layout()?;
        let vector_layout = manifest.vector_layout()?;

        let edge_path = dir.join(names::EDGES);
        let edges = open_read(&edge_path)?;
        check_edge_file_len(&edge_path, &edges, &manifest)?;

        let vector_path = dir.join(names::VECTORS);
        let vectors = open_read(&vector_path)?;
        check_vector_file(&vector_path, &vectors, &vector_layout, &manifest)?;

        let indirection = IndirectionTable::open(&dir.join(names::INDIRECTION))?;
        if indirection.capacity() < manifest.vertex_count as usize {
            return Err(StorageError::corrupt(
                indirection.path(),
                format!(
                    "{} entries but the manifest has {} vertices",
                    indirection.capacity(),
                    manifest.vertex_count
                ),
            ));
        }

        let pq_codes = map_pq_codes(&dir.join(names::PQ_CODES), &manifest)?;
        let pq_codebook = blob::read(&dir.join(names::PQ_CODEBOOK), BlobKind::PqCodebook)?;
        let entrance = blob::read(&dir.join(names::ENTRANCE), BlobKind::EntranceGraph)?;
        Ok(IndexFiles {
            dir: dir.to_path_buf(),
            manifest,
            edge_layout,
            vector_layout,
            indirection,
            pq_codes,
            pq_codebook,
            entrance,
            edges,
            vectors,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    pub fn edge_layout(&self) -> EdgePageLayout {
        self.edge_layout
    }

    pub fn vector_layout(&self) -> VectorLayout {
        self.vector_layout
    }

    pub fn indirection(&self) -> &IndirectionTable {
        &self.indirection
    }

    pub fn edge_path(&self) -> PathBuf {
        self.dir.join(names::EDGES)
    }

    pub fn vector_path(&self) -> PathBuf {
        self.dir.join(names::VECTORS)
    }

    /// All PQ codes, `vertex_count * pq_bytes` bytes.
    pub fn pq_codes(&self) -> &[u8] {
        &self.pq_codes[..self.manifest.vertex_count as usize * self.manifest.pq_bytes as usize]
    }

    /// PQ code of one vertex.
    pub fn pq_code(&self, v: VertexId) -> Option<&[u8]> {
        let m = self.manifest.pq_bytes as usize;
        let start = v as usize * m;
        self.pq_codes().get(start..start + m)
    }

    /// The payload written from `ProductQuantizer::to_bytes`.
    pub fn pq_codebook(&self) -> &[u8] {
        &self.pq_codebook
    }

    /// The payload written from `EntranceGraph::to_bytes`.
    pub fn entrance(&self) -> &[u8] {
        &self.entrance
    }

    /// Reads and verifies one edge page with a plain `pread`. For tools, tests and cold
    /// paths; traversal reads through `io::PageReader`.
    pub fn read_edge_page(&self, page_no: u32, page: &mut [u8]) -> Result<(), StorageError> {
        let path = self.edge_path();
        if page.len() != PAGE_SIZE {
            return Err(StorageError::invalid("edge page buffer must be 4096 bytes"));
        }
        self.edges
            .read_exact_at(page, page_no as u64 * PAGE_SIZE as u64)
            .map_err(|e| StorageError::io(&path, "read", e))?;
        self.edge_layout.verify(&path, page, page_no)
    }

    /// Reads one vector slot's raw bytes (`slot_size`) with a plain `pread`; decode with
    /// [`VectorLayout::parse_slot`].
    pub fn read_vector_slot(&self, slot: u32, out: &mut [u8]) -> Result<(), StorageError> {
        let path = self.vector_path();
        if out.len() != self.vector_layout.slot_size() {
            return Err(StorageError::invalid(
                "vector slot buffer has the wrong size",
            ));
        }
        self.vectors
            .read_exact_at(out, self.vector_layout.slot_offset(slot))
            .map_err(|e| StorageError::io(&path, "read", e))
    }
}

fn open_read(path: &Path) -> Result<File, StorageError> {
    File::open(path).map_err(|e| StorageError::io(path, "open", e))
}

fn file_len(path: &Path, file: &File) -> Result<u64, StorageError> {
    Ok(file
        .metadata()
        .map_err(|e| StorageError::io(path, "stat", e))?
        .len())
}

fn check_edge_file_len(path: &Path, file: &File, manifest: &Manifest) -> Result<(), StorageError> {
    let len = file_len(path, file)?;
    let expected = manifest.edge_pages as u64 * PAGE_SIZE as u64;
    if len % PAGE_SIZE as u64 != 0 || len < expected {
        return Err(StorageError::corrupt(
            path,
            format!(
                "{len} bytes, expected {} whole pages ({expected} bytes)",
                manifest.edge_pages
            ),
        ));
    }
    Ok(())
}

fn check_vector_file(
    path: &Path,
    file: &File,
    layout: &VectorLayout,
    manifest: &Manifest,
) -> Result<(), StorageError> {
    let len = file_len(path, file)?;
    let mut header = vec![0u8; VECTOR_FILE_HEADER_SIZE];
    if len < VECTOR_FILE_HEADER_SIZE as u64 {
        return Err(StorageError::corrupt(
            path,
            format!("truncated: {len} bytes"),
        ));
    }
    file.read_exact_at(&mut header, 0)
        .map_err(|e| StorageError::io(path, "read", e))?;
    layout.verify_header(path, &header)?;
    if layout.slots_in(len) < manifest.vector_slots as u64 {
        return Err(StorageError::corrupt(
            path,
            format!(
                "truncated: {len} bytes hold {} slots, manifest says {}",
                layout.slots_in(len),
                manifest.vector_slots
            ),
        ));
    }
    Ok(())
}

fn map_pq_codes(path: &Path, manifest: &Manifest) -> Result<Mmap, StorageError> {
    let file = open_read(path)?;
    let len = file_len(path, &file)?;
    let expected = manifest.vertex_count as u64 * manifest.pq_bytes as u64;
    if len < expected {
        return Err(StorageError::corrupt(
            path,
            format!(
                "truncated: {len} bytes, {} codes of {} bytes need {expected}",
                manifest.vertex_count, manifest.pq_bytes
            ),
        ));
    }
    // SAFETY: the mapping is read-only and private to this struct. Another process could
    // truncate the file underneath it (SIGBUS on access); side files are only ever truncated
    // by DROP/REINDEX, which first wait for every backend to close the index.
    unsafe { Mmap::map(&file) }.map_err(|e| StorageError::io(path, "mmap", e))
}
