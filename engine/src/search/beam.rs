//! How many edge pages a hop reads: the beam width, chosen from where recent hops' pages
//! came from.
//!
//! A beam of `W` pages per hop exists to overlap device reads: out of memory one query waits
//! on about `L / W` dependent batches instead of `L` (DiskANN's and the NAVIS paper's W = 4).
//! When the pages come from memory (NAVIS-Cache, or the kernel's page cache) a hop costs no
//! wait, and the wider beam only costs work: it expands candidates a best-first search would
//! never reach, each scored neighbour by neighbour. Measured on Fashion-MNIST (60K x 784,
//! relation layout, L = 16, one thread, `navis-bench search --beam-width`): W = 1 expands 17.2
//! lists per query against 18.2 and computes 382 PQ distances against 470, for 12% more
//! queries per second at the same recall (0.9703 against 0.9714).
//!
//! [`BeamAdvisor`] keeps a moving average of the share of a query's edge pages that needed a
//! device read and narrows the beam to 1 while it stays near zero. It starts wide: a backend
//! that finds its index out of memory keeps the paper's behaviour from its first query, and one
//! that finds it in memory narrows after 14 queries.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::counters::SearchCounters;

/// Narrow the beam once the moving device share falls below this...
const NARROW_BELOW: f32 = 0.02;
/// ...and widen it again once it rises above this (hysteresis: a stray device read among
/// memory hits does not flip the width back and forth).
const WIDEN_ABOVE: f32 = 0.10;
/// Weight of the newest query in the moving average: one query whose pages all came from the
/// device widens the beam at once (0.25 > WIDEN_ABOVE); from all-device, 14 queries served
/// from memory narrow it (0.75^14 < NARROW_BELOW).
const NEWEST_WEIGHT: f32 = 0.25;
/// The width searches use while their pages come from memory.
pub const IN_MEMORY_WIDTH: usize = 1;
/// The narrowest beam while pages need device reads: the NAVIS paper's and DiskANN's 4.
pub const DEVICE_WIDTH: usize = 4;
/// The widest beam [`device_width`] chooses.
const DEVICE_WIDTH_MAX: usize = 16;

/// The beam a search with list `list` reads per hop while its pages need device reads: one
/// page per 5 candidates, from [`DEVICE_WIDTH`] up to 16. The paper's 4 was chosen for lists of
/// tens; with a list of 80 a query waits on 21.5 dependent hops. Measured on 1M x 384 rows in
/// a 384 MiB group (`navis.beam_width` fixed, three alternating runs each, the same 250
/// queries, seventeenth session): at L = 80, W = 16 gave 364-427 q/s at 1 client and 546-555
/// at 2 against W = 4's 347-365 and 465-478 (+13% / +17%), in 6.3 hops instead of 21.5 and
/// with fewer edge pages (71.5 against 79.6 per query) at the same recall@10 (0.962); at
/// L = 40, W = 8 against 4 was within the runs' spread (2 clients 766-780 against 738-771).
/// Lists up to 24 (the defaults' and the benchmarks' points in memory) keep 4.
pub fn device_width(list: usize) -> usize {
    (list / 5).clamp(DEVICE_WIDTH, DEVICE_WIDTH_MAX)
}

/// The beam width for one index, learnt from the searches that ran on it. Shared by the
/// threads of one process (relaxed atomics: a stale read only delays the switch by a query).
#[derive(Debug)]
pub struct BeamAdvisor {
    /// The moving device share of edge-page reads, as `f32` bits.
    device_share: AtomicU32,
    /// 1 while the beam is narrow.
    narrow: AtomicU32,
}

impl Default for BeamAdvisor {
    fn default() -> BeamAdvisor {
        BeamAdvisor {
            device_share: AtomicU32::new(1.0f32.to_bits()),
            narrow: AtomicU32::new(0),
        }
    }
}

impl BeamAdvisor {
    /// The beam width for the next search: `wide` (the width that overlaps device reads)
    /// unless recent searches read their edge pages from memory.
    pub fn width(&self, wide: usize) -> usize {
        if self.narrow.load(Ordering::Relaxed) == 1 {
            IN_MEMORY_WIDTH.min(wide.max(1))
        } else {
            wide.max(1)
        }
    }

    /// Whether recent searches read their edge pages from the device (the beam is wide).
    pub fn from_device(&self) -> bool {
        self.narrow.load(Ordering::Relaxed) == 0
    }

    /// Folds in where one finished search's edge pages came from. A search that read no
    /// edge page from the files (or none at all) says nothing and changes nothing.
    pub fn observe(&self, counters: &SearchCounters) {
        if counters.edge_pages_read == 0 {
            return;
        }
        // Saturating: a source whose page-cache byte count ran ahead of the pages it returned
        // must not wrap this into "everything from the device".
        let device = counters
            .edge_page_device_reads()
            .saturating_sub(counters.edge_pages_from_page_cache);
        let share = device as f32 / counters.edge_pages_read as f32;
        let old = f32::from_bits(self.device_share.load(Ordering::Relaxed));
        let new = old + NEWEST_WEIGHT * (share - old);
        self.device_share.store(new.to_bits(), Ordering::Relaxed);
        if new < NARROW_BELOW {
            self.narrow.store(1, Ordering::Relaxed);
        } else if new > WIDEN_ABOVE {
            self.narrow.store(0, Ordering::Relaxed);
        }
    }

    /// The moving share of edge pages read from the device (1.0 before any search).
    pub fn device_share(&self) -> f32 {
        f32::from_bits(self.device_share.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pages: u64, cache_hits: u64, page_cache: u64) -> SearchCounters {
        SearchCounters {
            edge_pages_read: pages,
            edge_page_cache_hits: cache_hits,
            edge_pages_from_page_cache: page_cache,
            ..SearchCounters::one_query()
        }
    }

    #[test]
    fn the_device_width_grows_with_the_list_from_4_to_16() {
        assert_eq!(device_width(1), 4);
        assert_eq!(device_width(24), 4);
        assert_eq!(device_width(40), 8);
        assert_eq!(device_width(80), 16);
        assert_eq!(device_width(10_000), 16);
    }

    #[test]
    fn starts_wide_and_narrows_after_14_queries_from_memory() {
        let advisor = BeamAdvisor::default();
        assert_eq!(advisor.width(4), 4);
        assert!(advisor.from_device());
        for n in 1..=13 {
            // Half from NAVIS-Cache, half from the page cache: no device read.
            advisor.observe(&query(18, 9, 9));
            assert_eq!(advisor.width(4), 4, "still wide after {n} queries");
        }
        advisor.observe(&query(18, 9, 9));
        assert_eq!(advisor.width(4), 1);
        assert!(!advisor.from_device());
    }

    #[test]
    fn one_query_from_the_device_widens_at_once() {
        let advisor = BeamAdvisor::default();
        for _ in 0..20 {
            advisor.observe(&query(18, 18, 0));
        }
        assert_eq!(advisor.width(4), 1);
        advisor.observe(&query(18, 0, 0));
        assert_eq!(advisor.width(4), 4);
    }

    #[test]
    fn stray_device_reads_do_not_flip_the_width() {
        let advisor = BeamAdvisor::default();
        for _ in 0..20 {
            advisor.observe(&query(20, 20, 0));
        }
        // One page in 20 from the device, query after query: 5% settles between the bounds.
        for _ in 0..50 {
            advisor.observe(&query(20, 19, 0));
            assert_eq!(advisor.width(4), 1);
        }
    }

    #[test]
    fn searches_without_edge_reads_change_nothing() {
        let advisor = BeamAdvisor::default();
        for _ in 0..50 {
            advisor.observe(&query(0, 0, 0));
        }
        assert_eq!(advisor.width(4), 4);
        assert_eq!(advisor.device_share(), 1.0);
    }

    #[test]
    fn never_wider_than_asked_nor_zero() {
        let advisor = BeamAdvisor::default();
        assert_eq!(advisor.width(0), 1);
        for _ in 0..20 {
            advisor.observe(&query(10, 10, 0));
        }
        assert_eq!(advisor.width(1), 1);
        assert_eq!(advisor.width(8), 1);
    }
}
