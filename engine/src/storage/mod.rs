//! Side-file formats of a navis index and the one writer through which they change.
//!
//! A navis index is a directory of side files (DESIGN.md §4; byte layouts in
//! `docs/formats.md`):
//!
//! | file | module | contents |
//! |---|---|---|
//! | `manifest` | [`manifest`] | format version, metric, dimensions, build parameters, checksum |
//! | `edges.dat` | [`edge_page`] | 4 KiB pages of fixed-size edge-list slots, owner-stamped |
//! | `vectors.dat` | [`vector_file`] | dense fixed-size slots: full vector, owner stamp, heap TID |
//! | `indirection.dat` | [`indirection`] | vertex -> (edge slot, vector slot, flags), memory-mapped |
//! | `pq_codebook.bin`, `entrance.bin` | [`blob`] | opaque blobs with a checksummed header |
//! | `pq_codes.dat` | [`files`] | `capacity * pq_bytes` bytes, memory-mapped |
//! | `state.dat` | [`state`] | allocator, free lists, counters, per-page live counts, memory-mapped |
//!
//! Every mutation goes through [`writer`]: the bulk write of a freshly built index and the
//! in-place primitives (write one edge page, write one vector slot, publish one indirection
//! entry) that inserts use. [`files::IndexFiles`] opens and validates an existing directory.
//!
//! All integers are little-endian. All files carry the same [`FORMAT_VERSION`]; a reader
//! rejects any other version and asks for a REINDEX rather than guessing.

pub mod blob;
pub mod bulk;
pub mod checksum;
pub mod edge_page;
pub mod error;
pub mod files;
pub mod indirection;
pub mod manifest;
pub mod state;
pub mod vector_file;
pub mod writer;

pub use blob::{BlobKind, BLOB_HEADER_SIZE};
pub use bulk::{Bulk, RelationBulk};
pub use checksum::crc32;
pub use edge_page::{EdgePageLayout, EdgeSlotRef, PAGE_HEADER_SIZE, SLOT_HEADER_SIZE};
pub use error::StorageError;
pub use files::IndexFiles;
pub use indirection::{EdgeLocation, IndirEntry, IndirectionTable, FLAG_DELETED, FLAG_LIVE};
pub use manifest::{BuildParams, Manifest};
pub use state::{Counter, Field, SharedState};
pub use vector_file::{HeapTid, VectorLayout, VectorSlotRef, VECTOR_FILE_HEADER_SIZE};
pub use writer::{BuildInput, IndexWriter, SideFileWriter};

/// Size of an edge page and the alignment unit of every O_DIRECT read.
pub const PAGE_SIZE: usize = 4096;

/// Version of every side-file format in this module. Bump it whenever a byte moves.
pub const FORMAT_VERSION: u32 = 2;

/// Owner stamp of a free slot (edge or vector). Vertex ids never reach this value.
pub const FREE_OWNER: u32 = u32::MAX;

/// File names inside an index directory.
pub mod names {
    pub const MANIFEST: &str = "manifest";
    pub const EDGES: &str = "edges.dat";
    pub const VECTORS: &str = "vectors.dat";
    pub const INDIRECTION: &str = "indirection.dat";
    pub const PQ_CODEBOOK: &str = "pq_codebook.bin";
    pub const PQ_CODES: &str = "pq_codes.dat";
    pub const ENTRANCE: &str = "entrance.bin";
    pub const STATE: &str = "state.dat";
    /// Promotions into the entrance graph after the build, appended by inserts (created by
    /// the first one; not part of a freshly built directory).
    pub const ENTRANCE_LOG: &str = "entrance.log";
    /// The entrance graph every process maps and promotions change in place; volatile,
    /// rebuilt from `entrance.bin` and `entrance.log` at each server start
    /// (`entrance::shared`). Written by the build and by recovery.
    pub const ENTRANCE_SHM: &str = "entrance.shm";

    /// Every file a complete index directory holds, the manifest last because its presence
    /// marks the index complete.
    pub const ALL: [&str; 8] = [
        EDGES,
        STATE,
        VECTORS,
        INDIRECTION,
        PQ_CODEBOOK,
        PQ_CODES,
        ENTRANCE,
        MANIFEST,
    ];
}

/// Checks the common start of a side-file header: magic at byte 0, format version at byte 4
/// (checked before the checksum, so a file from another version is reported as such), and a
/// CRC-32 at `crc_at` over every byte before it.
pub(crate) fn verify_header_prefix(
    path: &std::path::Path,
    header: &[u8],
    magic: u32,
    crc_at: usize,
) -> Result<(), StorageError> {
    if read_u32(header, 0) != magic {
        return Err(StorageError::corrupt(path, "bad magic number"));
    }
    let version = read_u32(header, 4);
    if version != FORMAT_VERSION {
        return Err(StorageError::Version {
            path: path.to_path_buf(),
            found: version,
            expected: FORMAT_VERSION,
        });
    }
    if read_u32(header, crc_at) != checksum::crc32(&header[..crc_at]) {
        return Err(StorageError::corrupt(path, "header checksum mismatch"));
    }
    Ok(())
}

pub(crate) fn read_u16(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

pub(crate) fn read_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4-byte slice"))
}

pub(crate) fn read_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8-byte slice"))
}

pub(crate) fn put_u16(bytes: &mut [u8], at: usize, value: u16) {
    bytes[at..at + 2].copy_from_slice(&value.to_le_bytes());
}

pub(crate) fn put_u32(bytes: &mut [u8], at: usize, value: u32) {
    bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
}

pub(crate) fn put_u64(bytes: &mut [u8], at: usize, value: u64) {
    bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
}

#[cfg(test)]
mod tests;
