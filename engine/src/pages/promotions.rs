//! Promotions pages: the entrance-graph promotions made after the build, appended as one byte
//! stream over the payloads of consecutive promotions-page ordinals (as blobs are).
//!
//! ```text
//! stream byte i: ordinal i / 8152, payload offset i % 8152
//! records from byte 0, back to back:
//!        0 payload length u32 | 4 CRC-32 of the payload u32 | 8 payload (PromotionPlan bytes)
//! the stream ends at the first record of length 0, or one that is incomplete or fails its
//! CRC; a new (all-zero) page reads as zeros
//! page:  special kind 4 = promotions, aux = the page's ordinal among promotions pages
//! ```
//!
//! The record is `entrance.log`'s (`update::promote`), so the same replay applies both. No
//! length is stored anywhere (RFC 0001 §10): it is derived by walking the records, which
//! happens once per open anyway to rebuild the entrance graph. Pages are buffer-managed
//! (the PROMOTE record changes them through buffers), so a torn record cannot survive a
//! crash in PostgreSQL; on plain files the CRC stops the walk at one, as for `entrance.log`.

use super::{PageError, PageKind, PAYLOAD_OFFSET, PAYLOAD_SIZE};
use crate::storage::crc32;

/// Bytes in front of each record's payload.
pub const RECORD_HEADER: usize = 8;

/// Formats an empty promotions page of `ordinal` at `block`.
pub fn init_page(page: &mut [u8], block: u32, ordinal: u32) {
    super::init(page, PageKind::Promotions, block);
    super::set_aux(page, ordinal);
}

pub fn verify(page: &[u8], block: u32, ordinal: u32) -> Result<(), PageError> {
    super::verify_ordinal(page, PageKind::Promotions, block, ordinal)
}

/// Ordinals holding stream bytes `offset .. offset + len` (empty for `len` 0).
pub fn ordinals(offset: u64, len: usize) -> std::ops::Range<u32> {
    if len == 0 {
        return 0..0;
    }
    let first = offset / PAYLOAD_SIZE as u64;
    let last = (offset + len as u64 - 1) / PAYLOAD_SIZE as u64;
    first as u32..last as u32 + 1
}

/// Copies the part of `bytes` (stream bytes from `offset` on) that lies on page `ordinal`
/// into it. Idempotent; the page must be sealed afterwards.
pub fn write(page: &mut [u8], ordinal: u32, offset: u64, bytes: &[u8]) {
    let page_start = u64::from(ordinal) * PAYLOAD_SIZE as u64;
    let page_end = page_start + PAYLOAD_SIZE as u64;
    let from = offset.max(page_start);
    let to = (offset + bytes.len() as u64).min(page_end);
    if from >= to {
        return;
    }
    let src = (from - offset) as usize..(to - offset) as usize;
    let dst = PAYLOAD_OFFSET + (from - page_start) as usize;
    page[dst..dst + src.len()].copy_from_slice(&bytes[src]);
}

/// The records at the start of `stream` (the payload bytes of the pages, concatenated), in
/// order, up to the first that is incomplete, empty or fails its CRC: each one's payload and
/// the stream bytes it takes, header included. The one parser of the stream: the image's
/// check, a server start's replay and a hot standby's resync all walk it.
pub fn records(stream: &[u8]) -> impl Iterator<Item = (&[u8], usize)> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let header = stream.get(at..at + RECORD_HEADER)?;
        let len = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
        let payload = stream.get(at + RECORD_HEADER..at + RECORD_HEADER + len)?;
        if len == 0 || crc32(payload) != crc {
            return None;
        }
        at += RECORD_HEADER + len;
        Some((payload, RECORD_HEADER + len))
    })
}

/// The length of `stream` cut after its last complete record with a matching CRC.
pub fn complete_records(stream: &[u8]) -> usize {
    records(stream).map(|(_, taken)| taken).sum()
}

/// One record in the stream's format: header, then `payload`.
pub fn record(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(RECORD_HEADER + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32(payload).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pages::{seal, BLOCK_SIZE};

    #[test]
    fn records_straddle_pages_and_the_walk_stops_at_the_first_bad_one() {
        let records: Vec<Vec<u8>> = (0..40u8).map(|i| record(&vec![i + 1; 300])).collect();
        let total: usize = records.iter().map(Vec::len).sum();
        let pages = ordinals(0, total).end;
        assert_eq!(pages, total.div_ceil(PAYLOAD_SIZE) as u32);
        let mut store = vec![vec![0u8; BLOCK_SIZE]; pages as usize + 1];
        for (o, page) in store.iter_mut().enumerate() {
            init_page(page, 10 + o as u32, o as u32);
        }
        let mut offset = 0u64;
        for r in &records {
            for o in ordinals(offset, r.len()) {
                write(&mut store[o as usize], o, offset, r);
                write(&mut store[o as usize], o, offset, r); // idempotent
            }
            offset += r.len() as u64;
        }
        for (o, page) in store.iter_mut().enumerate() {
            seal(page);
            verify(page, 10 + o as u32, o as u32).unwrap();
        }
        let stream: Vec<u8> = store
            .iter()
            .flat_map(|p| p[PAYLOAD_OFFSET..PAYLOAD_OFFSET + PAYLOAD_SIZE].to_vec())
            .collect();
        assert_eq!(complete_records(&stream), total);
        assert_eq!(&stream[..total], records.concat().as_slice());
        let mut bad = stream.clone();
        bad[records[0].len() + 20] ^= 1;
        assert_eq!(complete_records(&bad), records[0].len());
        assert_eq!(complete_records(&stream[..total - 1]), total - 308);
        assert_eq!(ordinals(8151, 2), 0..2);
        assert_eq!(ordinals(8152, 1), 1..2);
        assert_eq!(ordinals(5, 0), 0..0);
    }
}
