//! Blob files: an opaque payload produced by another module (`ProductQuantizer::to_bytes`,
//! `EntranceGraph::to_bytes`) behind a 32-byte header that identifies it and checks it.
//!
//! ```text
//! 0 magic "NVBL" u32 | 4 version u32 | 8 kind u32 | 12 reserved u32 (0)
//! 16 payload length u64 | 24 crc32 of payload u32 | 28 crc32 of bytes 0..28 u32 | 32 payload
//! ```
//!
//! The payload's own format belongs to its producer; this layer only guarantees that what is
//! read back is exactly what was written, and that a codebook is never mistaken for an
//! entrance graph.

use super::checksum::crc32;
use super::error::StorageError;
use super::{put_u32, put_u64, read_u32, read_u64, verify_header_prefix, FORMAT_VERSION};
use std::path::Path;

pub const BLOB_MAGIC: u32 = u32::from_le_bytes(*b"NVBL");
pub const BLOB_HEADER_SIZE: usize = 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlobKind {
    PqCodebook = 1,
    EntranceGraph = 2,
}

impl BlobKind {
    fn name(self) -> &'static str {
        match self {
            BlobKind::PqCodebook => "PQ codebook",
            BlobKind::EntranceGraph => "entrance graph",
        }
    }
}

/// Header plus payload, ready to write.
pub fn encode(kind: BlobKind, payload: &[u8]) -> Vec<u8> {
    let mut out = header(kind, payload).to_vec();
    out.extend_from_slice(payload);
    out
}

/// Writes the blob file at `path` (header, then payload) without concatenating them in
/// memory: the entrance graph of a large index is tens of MB.
pub fn write(path: &Path, kind: BlobKind, payload: &[u8]) -> Result<(), StorageError> {
    use std::io::Write;
    let mut file = std::fs::File::create(path).map_err(|e| StorageError::io(path, "create", e))?;
    file.write_all(&header(kind, payload))
        .and_then(|()| file.write_all(payload))
        .map_err(|e| StorageError::io(path, "write", e))
}

fn header(kind: BlobKind, payload: &[u8]) -> [u8; BLOB_HEADER_SIZE] {
    let mut out = [0u8; BLOB_HEADER_SIZE];
    put_u32(&mut out, 0, BLOB_MAGIC);
    put_u32(&mut out, 4, FORMAT_VERSION);
    put_u32(&mut out, 8, kind as u32);
    put_u64(&mut out, 16, payload.len() as u64);
    put_u32(&mut out, 24, crc32(payload));
    let header_crc = crc32(&out[..28]);
    put_u32(&mut out, 28, header_crc);
    out
}

/// Checks `bytes` (a whole blob file) and returns its payload.
pub fn decode<'a>(path: &Path, kind: BlobKind, bytes: &'a [u8]) -> Result<&'a [u8], StorageError> {
    if bytes.len() < BLOB_HEADER_SIZE {
        return Err(StorageError::corrupt(
            path,
            format!("truncated: {} bytes", bytes.len()),
        ));
    }
    let payload = &bytes[BLOB_HEADER_SIZE..];
    check_header(path, kind, bytes, payload.len() as u64)?;
    if read_u32(bytes, 24) != crc32(payload) {
        return Err(StorageError::corrupt(
            path,
            format!("{} checksum mismatch", kind.name()),
        ));
    }
    Ok(payload)
}

/// Reads and checks the blob file at `path`, and returns its payload (in the buffer the file
/// was read into: a large entrance graph is not held twice).
pub fn read(path: &Path, kind: BlobKind) -> Result<Vec<u8>, StorageError> {
    let mut bytes = std::fs::read(path).map_err(|e| StorageError::io(path, "read", e))?;
    decode(path, kind, &bytes)?;
    bytes.drain(..BLOB_HEADER_SIZE);
    Ok(bytes)
}

/// Checks the blob file at `path` without reading its payload: the header, the kind, and
/// that the file is as long as the header says. The payload's checksum is checked when
/// [`read`] loads it. For blobs an open must find whole but need not load (the entrance
/// graph, which every backend finds in shared memory once one has built it).
pub fn check_shape(path: &Path, kind: BlobKind) -> Result<(), StorageError> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).map_err(|e| StorageError::io(path, "open", e))?;
    let len = file
        .metadata()
        .map_err(|e| StorageError::io(path, "stat", e))?
        .len();
    let mut header = vec![0u8; BLOB_HEADER_SIZE.min(len as usize)];
    file.read_exact(&mut header)
        .map_err(|e| StorageError::io(path, "read", e))?;
    if header.len() < BLOB_HEADER_SIZE {
        return Err(StorageError::corrupt(
            path,
            format!("truncated: {len} bytes"),
        ));
    }
    check_header(path, kind, &header, len - BLOB_HEADER_SIZE as u64)
}

/// The header checks [`decode`] and [`check_shape`] share; `payload_len` is what follows it.
fn check_header(
    path: &Path,
    kind: BlobKind,
    header: &[u8],
    payload_len: u64,
) -> Result<(), StorageError> {
    verify_header_prefix(path, header, BLOB_MAGIC, 28)?;
    if read_u32(header, 8) != kind as u32 {
        return Err(StorageError::corrupt(
            path,
            format!("does not hold the {}", kind.name()),
        ));
    }
    let len = read_u64(header, 16);
    if payload_len != len {
        return Err(StorageError::corrupt(
            path,
            format!("payload is {payload_len} bytes, header says {len} (truncated?)"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        let p = Path::new("blob");
        let payload: Vec<u8> = (0..300u32).map(|i| (i * 31) as u8).collect();
        let file = encode(BlobKind::PqCodebook, &payload);
        assert_eq!(
            decode(p, BlobKind::PqCodebook, &file).unwrap(),
            &payload[..]
        );
        assert_eq!(
            decode(p, BlobKind::PqCodebook, &encode(BlobKind::PqCodebook, &[])).unwrap(),
            b""
        );

        let err = decode(p, BlobKind::EntranceGraph, &file)
            .unwrap_err()
            .to_string();
        assert!(err.contains("does not hold the entrance graph"), "{err}");
        let err = decode(p, BlobKind::PqCodebook, &file[..file.len() - 1])
            .unwrap_err()
            .to_string();
        assert!(err.contains("truncated"), "{err}");
        let mut flipped = file.clone();
        flipped[BLOB_HEADER_SIZE + 5] ^= 0x10;
        let err = decode(p, BlobKind::PqCodebook, &flipped)
            .unwrap_err()
            .to_string();
        assert!(err.contains("PQ codebook checksum"), "{err}");
        let mut versioned = file.clone();
        put_u32(&mut versioned, 4, 3);
        assert!(matches!(
            decode(p, BlobKind::PqCodebook, &versioned),
            Err(StorageError::Version { found: 3, .. })
        ));
    }

    #[test]
    fn files_are_read_whole_or_checked_by_shape() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("entrance.bin");
        let payload: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
        let file = encode(BlobKind::EntranceGraph, &payload);
        std::fs::write(&path, &file).unwrap();
        assert_eq!(read(&path, BlobKind::EntranceGraph).unwrap(), payload);
        check_shape(&path, BlobKind::EntranceGraph).unwrap();
        let err = check_shape(&path, BlobKind::PqCodebook)
            .unwrap_err()
            .to_string();
        assert!(err.contains("does not hold the PQ codebook"), "{err}");

        // A flipped payload byte passes the shape check (it reads no payload) but not a read.
        let mut flipped = file.clone();
        flipped[BLOB_HEADER_SIZE + 100] ^= 1;
        std::fs::write(&path, &flipped).unwrap();
        check_shape(&path, BlobKind::EntranceGraph).unwrap();
        let err = read(&path, BlobKind::EntranceGraph)
            .unwrap_err()
            .to_string();
        assert!(err.contains("checksum"), "{err}");

        for cut in [1, payload.len(), file.len() - 10] {
            std::fs::write(&path, &file[..file.len() - cut]).unwrap();
            let err = check_shape(&path, BlobKind::EntranceGraph)
                .unwrap_err()
                .to_string();
            assert!(err.contains("truncated"), "cut {cut}: {err}");
        }
    }
}
