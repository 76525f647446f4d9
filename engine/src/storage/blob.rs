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
    let mut out = vec![0u8; BLOB_HEADER_SIZE];
    put_u32(&mut out, 0, BLOB_MAGIC);
    put_u32(&mut out, 4, FORMAT_VERSION);
    put_u32(&mut out, 8, kind as u32);
    put_u64(&mut out, 16, payload.len() as u64);
    put_u32(&mut out, 24, crc32(payload));
    let header_crc = crc32(&out[..28]);
    put_u32(&mut out, 28, header_crc);
    out.extend_from_slice(payload);
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
    verify_header_prefix(path, bytes, BLOB_MAGIC, 28)?;
    if read_u32(bytes, 8) != kind as u32 {
        return Err(StorageError::corrupt(
            path,
            format!("does not hold the {}", kind.name()),
        ));
    }
    let len = read_u64(bytes, 16);
    let payload = &bytes[BLOB_HEADER_SIZE..];
    if payload.len() as u64 != len {
        return Err(StorageError::corrupt(
            path,
            format!(
                "payload is {} bytes, header says {len} (truncated?)",
                payload.len()
            ),
        ));
    }
    if read_u32(bytes, 24) != crc32(payload) {
        return Err(StorageError::corrupt(
            path,
            format!("{} checksum mismatch", kind.name()),
        ));
    }
    Ok(payload)
}

/// Reads and checks the blob file at `path`.
pub fn read(path: &Path, kind: BlobKind) -> Result<Vec<u8>, StorageError> {
    let bytes = std::fs::read(path).map_err(|e| StorageError::io(path, "read", e))?;
    decode(path, kind, &bytes).map(<[u8]>::to_vec)
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
}
