//! The metapage, block 0 (RFC 0001 §2): everything needed to interpret the other pages, what
//! the build decided (medoid, build vertices, build id), where the blobs are, and the blocks
//! of the extent-map pages. Buffer-managed in PostgreSQL (changed under its exclusive lock,
//! WAL-logged); after the build it changes only when the extent map needs another page, or
//! when an online rebuild (`crate::index::regrow`) replaces it with its own.
//!
//! Payload (little-endian; offsets from the start of the payload):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | layout version ([`LAYOUT_VERSION`]) |
//! | 4 | 4 | metric code (1 L2, 2 inner product, 3 cosine) |
//! | 8 | 4 | dimension |
//! | 12 | 4 | max degree R |
//! | 16 | 4 | PQ code bytes |
//! | 20 | 4 | build list L |
//! | 24 | 4 | alpha (f32) |
//! | 28 | 4 | entrance ratio (f32) |
//! | 32 | 4 | entrance degree |
//! | 36 | 4 | medoid |
//! | 40 | 4 | vertices written by the build |
//! | 44 | 4 | first block of this build (blocks 1.. below it hold earlier builds; 0 reads as 1) |
//! | 48 | 8 | build id (random; keys NAVIS-Cache frames and the runtime copies) |
//! | 56 | 24 | PQ codebook blob ([`BlobRef`]) |
//! | 80 | 24 | entrance-graph blob ([`BlobRef`]) |
//! | 104 | 4 | extent-map pages |
//! | 108 | 4 × n | their blocks, in order |
//!
//! No allocator state (RFC 0001 §10, "the allocator is derived, not logged"): the free-vertex
//! and free-page lists, live counts, high-water marks and the promotion log's length all
//! follow from the indirection entries, the extent map and the promotions pages, and are
//! derived when an index is opened ([`crate::relation::RelationImage`]). Keeping them here
//! would put this one page under an exclusive lock and into a WAL record on every insert of
//! every backend. Layout version 1 had them (offsets 56..104 and 152); its indexes are refused.

use super::{PageError, PAYLOAD_OFFSET, PAYLOAD_SIZE};
use crate::distance::Metric;
use crate::storage::BuildParams;

/// Version of the metapage and of the relation layout it describes. Bump it when any page
/// format changes; an index of another version is refused with a REINDEX hint.
pub const LAYOUT_VERSION: u32 = 2;
/// Offset of the extent-map page list.
const EXTENT_PAGES_AT: usize = 104;
/// Extent-map pages the metapage can list (each maps 1018 runs of up to 1 MiB).
pub const MAX_EXTENT_MAP_PAGES: usize = (PAYLOAD_SIZE - EXTENT_PAGES_AT - 4) / 4;

/// A blob (PQ codebook, entrance graph) stored in consecutive ordinals of the blob pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlobRef {
    /// First blob-page ordinal.
    pub first_page: u32,
    /// Pages it occupies.
    pub pages: u32,
    /// Bytes of payload.
    pub len: u64,
    /// CRC-32 of the payload.
    pub crc: u32,
}

/// The decoded metapage.
#[derive(Clone, Debug, PartialEq)]
pub struct Meta {
    pub metric: Metric,
    pub dim: u32,
    pub max_degree: u32,
    pub pq_bytes: u32,
    pub params: BuildParams,
    pub medoid: u32,
    pub build_vertices: u32,
    /// The lowest block this build's pages may use. An index rebuilt online from its own rows
    /// (`crate::index::regrow`) writes the new build after the old one and retires blocks
    /// `1..first_block`; a build into an empty relation starts at 1.
    pub first_block: u32,
    pub build_id: u64,
    pub codebook: BlobRef,
    pub entrance: BlobRef,
    pub extent_map_pages: Vec<u32>,
}

fn put32(p: &mut [u8], at: usize, v: u32) {
    p[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn put64(p: &mut [u8], at: usize, v: u64) {
    p[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
fn get32(p: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(p[at..at + 4].try_into().unwrap())
}
fn get64(p: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(p[at..at + 8].try_into().unwrap())
}

fn put_blob(p: &mut [u8], at: usize, b: &BlobRef) {
    put32(p, at, b.first_page);
    put32(p, at + 4, b.pages);
    put64(p, at + 8, b.len);
    put32(p, at + 16, b.crc);
    put32(p, at + 20, 0);
}

fn get_blob(p: &[u8], at: usize) -> BlobRef {
    BlobRef {
        first_page: get32(p, at),
        pages: get32(p, at + 4),
        len: get64(p, at + 8),
        crc: get32(p, at + 16),
    }
}

impl Meta {
    /// Writes the payload of `page`, which the caller initialised as a metapage.
    pub fn encode(&self, page: &mut [u8]) {
        assert!(
            self.extent_map_pages.len() <= MAX_EXTENT_MAP_PAGES,
            "more extent-map pages than the metapage can list"
        );
        let p = &mut page[PAYLOAD_OFFSET..PAYLOAD_OFFSET + PAYLOAD_SIZE];
        p.fill(0);
        put32(p, 0, LAYOUT_VERSION);
        put32(p, 4, self.metric.code());
        put32(p, 8, self.dim);
        put32(p, 12, self.max_degree);
        put32(p, 16, self.pq_bytes);
        put32(p, 20, self.params.build_list);
        put32(p, 24, self.params.alpha.to_bits());
        put32(p, 28, self.params.entrance_ratio.to_bits());
        put32(p, 32, self.params.entrance_degree);
        put32(p, 36, self.medoid);
        put32(p, 40, self.build_vertices);
        put32(p, 44, self.first_block);
        put64(p, 48, self.build_id);
        put_blob(p, 56, &self.codebook);
        put_blob(p, 80, &self.entrance);
        put32(p, EXTENT_PAGES_AT, self.extent_map_pages.len() as u32);
        for (i, &b) in self.extent_map_pages.iter().enumerate() {
            put32(p, EXTENT_PAGES_AT + 4 + 4 * i, b);
        }
    }

    /// Decodes the payload of a verified metapage.
    pub fn decode(page: &[u8]) -> Result<Meta, PageError> {
        let p = &page[PAYLOAD_OFFSET..PAYLOAD_OFFSET + PAYLOAD_SIZE];
        let bad = |detail: String| PageError::Content { block: 0, detail };
        let version = get32(p, 0);
        if version != LAYOUT_VERSION {
            return Err(bad(format!(
                "layout version {version}, this build reads {LAYOUT_VERSION}"
            )));
        }
        let metric = Metric::from_code(get32(p, 4))
            .ok_or_else(|| bad(format!("unknown metric code {}", get32(p, 4))))?;
        let n_extent = get32(p, EXTENT_PAGES_AT) as usize;
        if n_extent > MAX_EXTENT_MAP_PAGES {
            return Err(bad(format!("{n_extent} extent-map pages")));
        }
        Ok(Meta {
            metric,
            dim: get32(p, 8),
            max_degree: get32(p, 12),
            pq_bytes: get32(p, 16),
            params: BuildParams {
                build_list: get32(p, 20),
                alpha: f32::from_bits(get32(p, 24)),
                entrance_ratio: f32::from_bits(get32(p, 28)),
                entrance_degree: get32(p, 32),
            },
            medoid: get32(p, 36),
            build_vertices: get32(p, 40),
            first_block: get32(p, 44).max(1),
            build_id: get64(p, 48),
            codebook: get_blob(p, 56),
            entrance: get_blob(p, 80),
            extent_map_pages: (0..n_extent)
                .map(|i| get32(p, EXTENT_PAGES_AT + 4 + 4 * i))
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pages::{init, seal, verify, PageKind, BLOCK_SIZE};

    fn sample() -> Meta {
        Meta {
            metric: Metric::Cosine,
            dim: 784,
            max_degree: 96,
            pq_bytes: 98,
            params: BuildParams {
                build_list: 128,
                alpha: 1.2,
                entrance_ratio: 0.01,
                entrance_degree: 32,
            },
            medoid: 4711,
            build_vertices: 60_000,
            first_block: 1,
            build_id: 0xDEAD_BEEF_0123_4567,
            codebook: BlobRef {
                first_page: 0,
                pages: 40,
                len: 320_000,
                crc: 7,
            },
            entrance: BlobRef {
                first_page: 40,
                pages: 30,
                len: 240_000,
                crc: 9,
            },
            extent_map_pages: vec![1, 900, 77_000],
        }
    }

    #[test]
    fn metapage_round_trips_and_is_a_valid_page() {
        let meta = sample();
        let mut page = vec![0u8; BLOCK_SIZE];
        init(&mut page, PageKind::Meta, 0);
        meta.encode(&mut page);
        seal(&mut page);
        verify(&page, PageKind::Meta, 0).unwrap();
        assert_eq!(Meta::decode(&page).unwrap(), meta);
    }

    #[test]
    fn other_layout_versions_and_metrics_are_refused() {
        let mut page = vec![0u8; BLOCK_SIZE];
        init(&mut page, PageKind::Meta, 0);
        sample().encode(&mut page);
        page[PAYLOAD_OFFSET] = 1;
        let e = Meta::decode(&page).unwrap_err().to_string();
        assert!(e.contains("layout version 1"), "{e}");
        sample().encode(&mut page);
        page[PAYLOAD_OFFSET + 4] = 9;
        assert!(Meta::decode(&page).is_err());
    }
}
