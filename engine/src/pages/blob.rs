//! Blob pages: opaque byte strings (the PQ codebook, the build's entrance graph) stored as one
//! byte stream over consecutive ordinals of the blob pages.
//!
//! ```text
//! blob of len bytes at blob-page ordinals first_page .. first_page + pages:
//!        pages = ceil(len / 8152); byte i on ordinal first_page + i / 8152 at payload
//!        offset i % 8152; the rest of the last page's payload is zero
//! page:  special kind 3 = blob, aux = the page's ordinal among blob pages
//! ```
//!
//! The metapage describes each blob with a [`BlobRef`] (first ordinal, pages, length, CRC-32 of
//! the bytes). The codebook and the entrance graph share one kind: both are written once by
//! the build and read once per open, so separate extents would only cost blocks. Their
//! producers own the byte formats; this module only guarantees that what is read back is
//! exactly what was written. The side-file blob header (`storage::blob`) is not repeated:
//! its magic, kind and version are the page special space and the metapage's job here.
//! An empty blob has no pages (`pages = 0`, `first_page` = the next free ordinal).

use super::meta::BlobRef;
use super::{PageError, PageKind, BLOCK_SIZE, PAYLOAD_OFFSET, PAYLOAD_SIZE};
use crate::storage::checksum::crc32;
use crate::storage::StorageError;

/// Blob pages needed for `len` bytes.
pub fn pages_for(len: u64) -> u64 {
    len.div_ceil(PAYLOAD_SIZE as u64)
}

/// A blob cut into pages, ready to be written page by page.
#[derive(Clone, Copy, Debug)]
pub struct BlobCut<'a> {
    bytes: &'a [u8],
    blob: BlobRef,
}

/// Cuts `bytes` into blob pages starting at blob-page ordinal `first_page`. Fails when the
/// pages would run past the largest ordinal.
pub fn cut(bytes: &[u8], first_page: u32) -> Result<BlobCut<'_>, StorageError> {
    let pages = pages_for(bytes.len() as u64);
    let fits = u32::try_from(pages)
        .ok()
        .filter(|&p| first_page.checked_add(p).is_some());
    let pages = fits.ok_or_else(|| {
        StorageError::invalid(format!(
            "a blob of {} bytes at blob page {first_page} exceeds the page ordinals",
            bytes.len()
        ))
    })?;
    Ok(BlobCut {
        bytes,
        blob: BlobRef {
            first_page,
            pages,
            len: bytes.len() as u64,
            crc: crc32(bytes),
        },
    })
}

impl BlobCut<'_> {
    /// The reference the metapage stores.
    pub fn blob(&self) -> BlobRef {
        self.blob
    }

    /// Formats and seals page `index` (0..pages) of the blob, blob-page ordinal
    /// `first_page + index`, as block `block`.
    pub fn write_page(&self, index: u32, block: u32, page: &mut [u8]) {
        assert!(
            index < self.blob.pages,
            "blob page {index} of {}",
            self.blob.pages
        );
        let from = index as usize * PAYLOAD_SIZE;
        let chunk = &self.bytes[from..(from + PAYLOAD_SIZE).min(self.bytes.len())];
        init_page(page, block, self.blob.first_page + index);
        page[PAYLOAD_OFFSET..PAYLOAD_OFFSET + chunk.len()].copy_from_slice(chunk);
        super::seal(page);
    }
}

/// Formats an empty blob page (zero payload) of `ordinal` at `block`: the unused tail of the
/// kind's last run. Call [`super::seal`] afterwards.
pub fn init_page(page: &mut [u8], block: u32, ordinal: u32) {
    super::init(page, PageKind::Blob, block);
    super::set_aux(page, ordinal);
}

pub fn verify(page: &[u8], block: u32, ordinal: u32) -> Result<(), PageError> {
    super::verify_ordinal(page, PageKind::Blob, block, ordinal)
}

/// Reassembles blob `blob` (named `what` in errors, e.g. "PQ codebook") from its pages,
/// given as (block, page) in ordinal order from `blob.first_page`. Every page is verified
/// (kind, block, ordinal, CRC), then the length, the zero padding and the blob's CRC-32.
/// A reference inconsistent in itself is reported at block 0, the metapage that holds it;
/// a CRC mismatch of the bytes at the blob's first block.
pub fn reassemble<'p>(
    blob: &BlobRef,
    what: &str,
    pages: impl IntoIterator<Item = (u32, &'p [u8])>,
) -> Result<Vec<u8>, PageError> {
    if pages_for(blob.len) != u64::from(blob.pages) {
        return Err(PageError::Content {
            block: 0,
            detail: format!(
                "the {what} reference says {} bytes on {} blob pages; {} bytes need {}",
                blob.len,
                blob.pages,
                blob.len,
                pages_for(blob.len)
            ),
        });
    }
    // Not preallocated from `blob.len`: the reference is not trusted until the CRC matches.
    let mut out = Vec::new();
    let mut first_block = None;
    let mut seen = 0u32;
    for (block, page) in pages {
        if seen == blob.pages {
            return Err(PageError::Content {
                block,
                detail: format!("{what}: more than its {} blob pages given", blob.pages),
            });
        }
        if page.len() != BLOCK_SIZE {
            return Err(PageError::WrongSize {
                block,
                len: page.len(),
            });
        }
        verify(page, block, blob.first_page + seen)?;
        first_block.get_or_insert(block);
        let take = (blob.len as usize - out.len()).min(PAYLOAD_SIZE);
        let payload = super::payload(page);
        out.extend_from_slice(&payload[..take]);
        if payload[take..].iter().any(|&b| b != 0) {
            return Err(PageError::Content {
                block,
                detail: format!("{what}: bytes after the blob's end on its last page are not zero"),
            });
        }
        seen += 1;
    }
    if seen != blob.pages {
        return Err(PageError::Content {
            block: first_block.unwrap_or(0),
            detail: format!("{what}: {seen} of its {} blob pages given", blob.pages),
        });
    }
    let computed = crc32(&out);
    if computed != blob.crc {
        let block = first_block.unwrap_or(0);
        return Err(PageError::Content {
            block,
            detail: format!(
                "{what} blob ({} bytes on {} pages from block {block}): CRC-32 {computed:#010x}, \
                 the metapage says {:#010x}",
                blob.len, blob.pages, blob.crc
            ),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pages of `bytes` cut at `first_page`, written at blocks 100 + ordinal.
    fn pages_of(bytes: &[u8], first_page: u32) -> (BlobRef, Vec<(u32, Vec<u8>)>) {
        let cut = cut(bytes, first_page).unwrap();
        let pages = (0..cut.blob().pages)
            .map(|i| {
                let block = 100 + first_page + i;
                let mut page = vec![0u8; BLOCK_SIZE];
                cut.write_page(i, block, &mut page);
                (block, page)
            })
            .collect();
        (cut.blob(), pages)
    }

    fn borrowed(pages: &[(u32, Vec<u8>)]) -> impl Iterator<Item = (u32, &[u8])> {
        pages.iter().map(|(b, p)| (*b, p.as_slice()))
    }

    fn bytes(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 131 + i / 7) as u8).collect()
    }

    #[test]
    fn round_trips_at_every_page_boundary() {
        for len in [0, 1, 8151, 8152, 8153, 3 * 8152, 3 * 8152 + 17, 100_000] {
            let data = bytes(len);
            let (blob, pages) = pages_of(&data, 5);
            assert_eq!(blob.first_page, 5);
            assert_eq!(blob.pages as usize, len.div_ceil(PAYLOAD_SIZE), "len {len}");
            assert_eq!(blob.len, len as u64);
            assert_eq!(blob.crc, crc32(&data));
            for (k, (block, page)) in pages.iter().enumerate() {
                verify(page, *block, 5 + k as u32).unwrap();
            }
            let back = reassemble(&blob, "test blob", borrowed(&pages)).unwrap();
            assert_eq!(back, data, "len {len}");
        }
    }

    #[test]
    fn mismatches_are_named() {
        let data = bytes(20_000);
        let (blob, pages) = pages_of(&data, 0);
        assert_eq!(blob.pages, 3);

        // A flipped payload byte fails that page's CRC.
        let mut flipped = pages.clone();
        flipped[1].1[PAYLOAD_OFFSET + 9] ^= 1;
        let err = reassemble(&blob, "PQ codebook", borrowed(&flipped)).unwrap_err();
        assert!(
            matches!(err, PageError::Checksum { block: 101, .. }),
            "{err}"
        );

        // Pages intact but the metapage's CRC is wrong: the blob check names it.
        let wrong = BlobRef {
            crc: blob.crc ^ 1,
            ..blob
        };
        let err = reassemble(&wrong, "PQ codebook", borrowed(&pages))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("block 100") && err.contains("PQ codebook blob") && err.contains("CRC"),
            "{err}"
        );

        // A length that disagrees with the page count is the reference's fault (block 0).
        let short = BlobRef { len: 100, ..blob };
        let err = reassemble(&short, "entrance graph", borrowed(&pages)).unwrap_err();
        assert_eq!(err.block(), 0);
        assert!(
            err.to_string().contains("entrance graph reference"),
            "{err}"
        );

        // A shorter length that still needs 3 pages leaves non-zero bytes after the end.
        let shorter = BlobRef {
            len: 20_000 - 10,
            ..blob
        };
        let err = reassemble(&shorter, "x", borrowed(&pages))
            .unwrap_err()
            .to_string();
        assert!(err.contains("not zero"), "{err}");

        // Missing, extra, misplaced and wrong-kind pages.
        let err = reassemble(&blob, "x", borrowed(&pages[..2])).unwrap_err();
        assert!(err.to_string().contains("2 of its 3"), "{err}");
        let mut extra = pages.clone();
        extra.push(pages[0].clone());
        assert!(reassemble(&blob, "x", borrowed(&extra)).is_err());
        let swapped = vec![pages[1].clone(), pages[0].clone(), pages[2].clone()];
        assert!(matches!(
            reassemble(&blob, "x", borrowed(&swapped)),
            Err(PageError::WrongOrdinal { block: 101, .. })
        ));
        let mut other = vec![0u8; BLOCK_SIZE];
        super::super::init(&mut other, PageKind::Codes, 100);
        super::super::set_aux(&mut other, 0);
        super::super::seal(&mut other);
        let mut kinds = pages.clone();
        kinds[0].1 = other;
        assert!(matches!(
            reassemble(&blob, "x", borrowed(&kinds)),
            Err(PageError::WrongKind { .. })
        ));
    }

    #[test]
    fn empty_pages_and_limits() {
        let mut page = vec![0u8; BLOCK_SIZE];
        init_page(&mut page, 9, 4);
        super::super::seal(&mut page);
        verify(&page, 9, 4).unwrap();
        assert!(super::super::payload(&page).iter().all(|&b| b == 0));
        // An empty blob needs no pages.
        let empty = cut(&[], 7).unwrap().blob();
        assert_eq!((empty.first_page, empty.pages, empty.len), (7, 0, 0));
        assert_eq!(reassemble(&empty, "x", std::iter::empty()).unwrap(), b"");
        assert!(cut(&[1, 2, 3], u32::MAX).is_err());
        assert!(cut(&[], u32::MAX).is_ok());
    }
}
