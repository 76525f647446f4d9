//! The extent map: where the pages of each kind live in the relation (RFC 0001 §2).
//!
//! Every kind except the metapage is a dense array of pages numbered by *ordinal* (0, 1, ...),
//! split into extents of [`EXTENT_BLOCKS`] ordinals (so vector slots and placement see 1 MiB
//! units, `super::extent_page`). An extent is stored as one or more *runs* of consecutive
//! blocks. A kind's first extent is stored in eight geometric runs of 1, 1, 2, 4, 8, 16, 32 and
//! 64 blocks, every later extent in one run of 128 blocks:
//!
//! | run r | ordinals | blocks |
//! |---|---|---|
//! | 0 | 0 | 1 |
//! | 1 ≤ r ≤ 7 | 2^(r-1) .. 2^r − 1 | 2^(r-1) |
//! | r ≥ 8 | 128·(r−7) .. 128·(r−6) − 1 | 128 |
//!
//! Why: a one-row index then takes one block per kind instead of a megabyte per kind, while a
//! large one still gets 1 MiB contiguous runs (edge pages placed for locality stay together,
//! and each kind's pages are read sequentially by VACUUM and open). A run never crosses an
//! extent boundary; a vector slot inside the first extent may straddle two runs, so a reader
//! splits its read where the blocks stop being consecutive ([`ExtentMap::contiguous_from`]).
//! Runs are appended at the end of the relation as a kind grows, in any interleaving of
//! kinds; the map records each run's first block, in run order, per kind.
//!
//! Extent-map pages (kind [`PageKind::ExtentMap`]) hold the runs in allocation order as
//! 8-byte entries: `u8 kind, u8 0, u16 0, u32 first block`; payload word 0 is the number of
//! entries on the page (u32) followed by a u32 zero, then the entries (1018 per page). The
//! order of a kind's entries is its run order.

use super::{PageError, PageKind, EXTENT_BLOCKS, PAYLOAD_OFFSET, PAYLOAD_SIZE};
use crate::storage::StorageError;

/// Runs in a kind's first extent.
pub const FIRST_EXTENT_RUNS: u32 = 8;
/// Bytes of one extent-map entry.
pub const ENTRY_SIZE: usize = 8;
/// Bytes before the entries on an extent-map page (entry count and padding).
const PAGE_HEADER: usize = 8;
/// Extent-map entries per page.
pub const ENTRIES_PER_PAGE: usize = (PAYLOAD_SIZE - PAGE_HEADER) / ENTRY_SIZE;

/// The run holding `ordinal` and the ordinal's offset in it.
pub fn run_of(ordinal: u32) -> (u32, u32) {
    if ordinal >= EXTENT_BLOCKS {
        (
            FIRST_EXTENT_RUNS - 1 + ordinal / EXTENT_BLOCKS,
            ordinal % EXTENT_BLOCKS,
        )
    } else if ordinal == 0 {
        (0, 0)
    } else {
        let r = 32 - ordinal.leading_zeros(); // floor(log2(ordinal)) + 1
        (r, ordinal - (1 << (r - 1)))
    }
}

/// Blocks in run `run`.
pub fn run_len(run: u32) -> u32 {
    match run {
        0 => 1,
        r if r < FIRST_EXTENT_RUNS => 1 << (r - 1),
        _ => EXTENT_BLOCKS,
    }
}

/// The first ordinal of run `run`.
pub fn run_first_ordinal(run: u32) -> u32 {
    match run {
        0 => 0,
        r if r < FIRST_EXTENT_RUNS => 1 << (r - 1),
        r => (r - (FIRST_EXTENT_RUNS - 1)) * EXTENT_BLOCKS,
    }
}

/// Runs needed to hold `pages` ordinals.
pub fn runs_for(pages: u32) -> u32 {
    if pages == 0 {
        0
    } else {
        run_of(pages - 1).0 + 1
    }
}

/// Slots for the kinds the extent map places, by code − 1 (everything but the metapage; the
/// retired code 7 keeps its empty slot).
const MAPPED_KINDS: usize = 9;

fn kind_slot(kind: PageKind) -> usize {
    kind as usize - 1
}

/// The in-memory extent map: per kind, the first block of each run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExtentMap {
    runs: [Vec<u32>; MAPPED_KINDS],
    /// Every run in allocation order, as stored on the extent-map pages.
    log: Vec<(PageKind, u32)>,
}

impl ExtentMap {
    pub fn new() -> ExtentMap {
        ExtentMap::default()
    }

    /// Records that `kind`'s next run starts at `first_block`. Returns the run number.
    pub fn push_run(&mut self, kind: PageKind, first_block: u32) -> u32 {
        assert!(kind != PageKind::Meta, "the metapage is not mapped");
        let runs = &mut self.runs[kind_slot(kind)];
        runs.push(first_block);
        self.log.push((kind, first_block));
        runs.len() as u32 - 1
    }

    /// Runs of `kind` so far.
    pub fn runs(&self, kind: PageKind) -> &[u32] {
        &self.runs[kind_slot(kind)]
    }

    /// Ordinals of `kind` the allocated runs can hold.
    pub fn capacity(&self, kind: PageKind) -> u32 {
        let n = self.runs(kind).len() as u32;
        if n == 0 {
            0
        } else {
            run_first_ordinal(n - 1) + run_len(n - 1)
        }
    }

    /// Block of page `ordinal` of `kind`, `None` beyond the allocated runs.
    pub fn block(&self, kind: PageKind, ordinal: u32) -> Option<u32> {
        let (run, offset) = run_of(ordinal);
        self.runs(kind)
            .get(run as usize)
            .map(|first| first + offset)
    }

    /// How many ordinals from `ordinal` on (at most `wanted`) lie in consecutive blocks: the
    /// longest single read that starts there.
    pub fn contiguous_from(&self, kind: PageKind, ordinal: u32, wanted: u32) -> u32 {
        let (run, offset) = run_of(ordinal);
        if self.runs(kind).get(run as usize).is_none() {
            return 0;
        }
        (run_len(run) - offset).min(wanted)
    }

    /// All runs in allocation order.
    pub fn allocation_log(&self) -> &[(PageKind, u32)] {
        &self.log
    }

    /// Extent-map pages needed to store every run.
    pub fn pages_needed(&self) -> usize {
        self.log.len().div_ceil(ENTRIES_PER_PAGE).max(1)
    }

    /// Writes extent-map page `index` (entries `index * ENTRIES_PER_PAGE ..`) into the payload
    /// of `page`, which the caller initialised as an extent-map page.
    pub fn encode_page(&self, index: usize, page: &mut [u8]) {
        let entries = self
            .log
            .iter()
            .skip(index * ENTRIES_PER_PAGE)
            .take(ENTRIES_PER_PAGE);
        let payload = &mut page[PAYLOAD_OFFSET..PAYLOAD_OFFSET + PAYLOAD_SIZE];
        payload.fill(0);
        let mut count = 0u32;
        for (i, &(kind, first)) in entries.enumerate() {
            let at = PAGE_HEADER + i * ENTRY_SIZE;
            payload[at] = kind as u8;
            payload[at + 4..at + 8].copy_from_slice(&first.to_le_bytes());
            count += 1;
        }
        payload[0..4].copy_from_slice(&count.to_le_bytes());
    }

    /// Appends the runs of one extent-map page (pages are decoded in order).
    pub fn decode_page(&mut self, page: &[u8], block: u32) -> Result<(), PageError> {
        let payload = &page[PAYLOAD_OFFSET..PAYLOAD_OFFSET + PAYLOAD_SIZE];
        let count = u32::from_le_bytes(payload[0..4].try_into().unwrap()) as usize;
        if count > ENTRIES_PER_PAGE {
            return Err(PageError::Content {
                block,
                detail: format!("extent-map page claims {count} entries"),
            });
        }
        for i in 0..count {
            let at = PAGE_HEADER + i * ENTRY_SIZE;
            let kind = PageKind::from_u8(payload[at])
                .filter(|&k| k != PageKind::Meta)
                .ok_or_else(|| PageError::Content {
                    block,
                    detail: format!("extent-map entry {i} names page kind {}", payload[at]),
                })?;
            let first = u32::from_le_bytes(payload[at + 4..at + 8].try_into().unwrap());
            self.push_run(kind, first);
        }
        Ok(())
    }

    /// Checks that no two runs overlap and that every run lies inside `nblocks` blocks and
    /// after the metapage: a corrupt map must never send a writer into another kind's pages.
    pub fn check(&self, nblocks: u32) -> Result<(), StorageError> {
        let mut spans: Vec<(u32, u32)> = Vec::with_capacity(self.log.len());
        for k in 0..MAPPED_KINDS {
            for (r, &first) in self.runs[k].iter().enumerate() {
                let end = first.checked_add(run_len(r as u32)).ok_or_else(|| {
                    StorageError::invalid(format!("extent map: a run at block {first} overflows"))
                })?;
                spans.push((first, end));
            }
        }
        spans.sort_unstable();
        for w in spans.windows(2) {
            if w[0].1 > w[1].0 {
                return Err(StorageError::invalid(format!(
                    "extent map: runs at blocks {} and {} overlap",
                    w[0].0, w[1].0
                )));
            }
        }
        if let Some(&(first, _)) = spans.first() {
            if first == 0 {
                return Err(StorageError::invalid(
                    "extent map: a run covers the metapage",
                ));
            }
        }
        if let Some(&(_, end)) = spans.last() {
            if end > nblocks {
                return Err(StorageError::invalid(format!(
                    "extent map: runs reach block {end} but the relation has {nblocks} blocks"
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pages::{init, BLOCK_SIZE};

    #[test]
    fn runs_cover_every_ordinal_once_and_never_cross_an_extent() {
        let mut next = 0u32;
        for run in 0..20 {
            assert_eq!(run_first_ordinal(run), next, "run {run}");
            let len = run_len(run);
            let extent = run_first_ordinal(run) / EXTENT_BLOCKS;
            assert_eq!((run_first_ordinal(run) + len - 1) / EXTENT_BLOCKS, extent);
            for o in next..next + len {
                assert_eq!(run_of(o), (run, o - next), "ordinal {o}");
            }
            next += len;
        }
        assert_eq!(run_first_ordinal(FIRST_EXTENT_RUNS), EXTENT_BLOCKS);
        assert_eq!(runs_for(0), 0);
        assert_eq!(runs_for(1), 1);
        assert_eq!(runs_for(2), 2);
        assert_eq!(runs_for(128), 8);
        assert_eq!(runs_for(129), 9);
        assert_eq!(runs_for(1000), 15);
    }

    #[test]
    fn blocks_and_contiguity_follow_the_runs() {
        let mut map = ExtentMap::new();
        let mut end = 1u32; // block 0 is the metapage
        for r in 0..10 {
            // interleave two kinds, as inserts growing both would
            map.push_run(PageKind::Edge, end);
            end += run_len(r);
            map.push_run(PageKind::Vector, end);
            end += run_len(r);
        }
        map.check(end).unwrap();
        assert_eq!(map.capacity(PageKind::Edge), 128 * 3);
        assert_eq!(map.block(PageKind::Edge, 0), Some(1));
        assert_eq!(map.block(PageKind::Vector, 0), Some(2));
        assert_eq!(map.block(PageKind::Edge, 1), Some(3));
        assert_eq!(map.block(PageKind::Edge, 128 * 3), None);
        assert_eq!(map.block(PageKind::Codes, 0), None);
        // ordinal 2 starts run 2 (2 blocks): 2 consecutive at most
        assert_eq!(map.contiguous_from(PageKind::Edge, 2, 10), 2);
        assert_eq!(map.contiguous_from(PageKind::Edge, 130, 500), 126);
        assert_eq!(map.contiguous_from(PageKind::Edge, 130, 5), 5);
        let b = map.block(PageKind::Edge, 200).unwrap();
        assert_eq!(map.block(PageKind::Edge, 201), Some(b + 1));
    }

    #[test]
    fn map_round_trips_through_pages_and_catches_overlaps() {
        let mut map = ExtentMap::new();
        let mut end = 1u32;
        for i in 0..(ENTRIES_PER_PAGE as u32 + 300) {
            let kind = [PageKind::Edge, PageKind::Vector, PageKind::Codes][i as usize % 3];
            let run = map.runs(kind).len() as u32;
            map.push_run(kind, end);
            end += run_len(run);
        }
        assert_eq!(map.pages_needed(), 2);
        let mut back = ExtentMap::new();
        for p in 0..map.pages_needed() {
            let mut page = vec![0u8; BLOCK_SIZE];
            init(&mut page, PageKind::ExtentMap, 7 + p as u32);
            map.encode_page(p, &mut page);
            back.decode_page(&page, 7 + p as u32).unwrap();
        }
        assert_eq!(back, map);
        back.check(end).unwrap();
        assert!(
            back.check(end - 1).is_err(),
            "a run past the end is refused"
        );

        let mut bad = ExtentMap::new();
        bad.push_run(PageKind::Edge, 1);
        bad.push_run(PageKind::Edge, 2); // run 1: block 2
        bad.push_run(PageKind::Vector, 2); // overlaps it
        assert!(bad.check(10).is_err());
        let mut meta = ExtentMap::new();
        meta.push_run(PageKind::Edge, 0);
        assert!(
            meta.check(10).is_err(),
            "a run over the metapage is refused"
        );
    }
}
