//! Reads the kernel's page cache can serve at once, taken before a batch goes to the device
//! with O_DIRECT (issue 15).
//!
//! PostgreSQL writes every index page through smgr, which is buffered: a page written since the
//! kernel last evicted it is in the page cache. An O_DIRECT read of it still goes to the
//! device, so an index that fits in memory (where most users start) paid about 36 device round
//! trips per Fashion-MNIST query that the page cache could have answered. Reading everything
//! buffered instead would make an index larger than memory fill the page cache with pages
//! NAVIS-Cache already holds, and evict the heap's.
//!
//! So each request first asks the kernel, with `cachestat(2)` on a buffered descriptor of the
//! same file, whether every page of its range is cached. If so, `preadv2(RWF_NOWAIT)` copies it
//! from there; if not, the request goes on to the O_DIRECT batch and the page cache is left as
//! it was. (`RWF_NOWAIT` alone is not enough: on a miss it returns `EAGAIN` but, measured on
//! this project's 6.18 kernel, still starts reading the missing page into the page cache, so
//! every miss would cost a second device read and fill the page cache out of memory.) The
//! choice is made per read by what the kernel holds, not by a setting.
//!
//! When probes keep missing (an index larger than memory), only one request in
//! [`SPARSE_EVERY`] is tried, so the cost stays negligible while the reader keeps learning;
//! a window with hits again turns probing back on for every request.
//!
//! When nearly every probe hits (the index fits in memory), a miss is a hole the kernel made
//! in a cached index: memory pressure from elsewhere, or proactive reclaim (measured on this
//! project's VMs: DAMON's `pageout` scheme drops page-cache regions untouched for a while,
//! 2 MiB at a time, with 22 GiB free). O_DIRECT misses never bring pages back, so such a hole
//! would cost a device read on every later visit, for good. So in a window where at least
//! [`REFILL_FROM_HITS`] of [`WINDOW`] probes hit, each miss also asks the kernel to read its
//! range into the page cache in the background (`POSIX_FADV_WILLNEED`, which does not wait
//! for the I/O); the O_DIRECT read still serves the request. Out of memory the hit rate is
//! far below that, and misses leave the page cache alone as before.
//!
//! The hit rate cannot see an index that fits but whose pages the kernel has already dropped:
//! proactive reclaim emptied the page cache of whole indexes on this project's VMs, after which
//! the hit rate stayed near zero and an in-memory index read 41 edge pages per insert from the
//! device. So the reader also tells the probe whether the index fits in memory (its files take
//! at most half of what `crate::memory_fit` finds available, cgroup limits included). When it
//! does, a miss is read through the page cache instead of with O_DIRECT (the same batch, with
//! the buffered descriptor: one device read that leaves the pages cached for the next visit),
//! and probing never turns sparse. Nor does it ask `cachestat(2)` first: a miss may then start
//! reading into the page cache, where it is read next anyway, and each read costs one system
//! call instead of two.

use crate::io::{IoStats, ReadReq};
use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;

/// Probes per decision window.
const WINDOW: u32 = 64;
/// A window with fewer hits than this switches to sparse probing.
const SPARSE_BELOW_HITS: u32 = 4;
/// In sparse mode, one request in this many is probed.
pub const SPARSE_EVERY: u32 = 16;
/// A window with at least this many hits makes the next window's misses refill the page
/// cache (3/4 of the probes: an index that mostly fits in memory).
const REFILL_FROM_HITS: u32 = WINDOW * 3 / 4;

/// Per-reader state of the page-cache probe.
#[derive(Debug)]
pub(crate) struct PageCacheProbe {
    enabled: bool,
    sparse: bool,
    /// Misses ask the kernel to read their range into the page cache (module documentation).
    refill: bool,
    /// The index fits in memory: misses are read through the page cache.
    fits: bool,
    window_tries: u32,
    window_hits: u32,
    countdown: u32,
}

/// What one probe found.
enum Probe {
    /// Every needed byte was copied from the page cache.
    Hit(usize),
    /// Not (all) cached: the device must be read.
    Miss,
    /// The file system cannot read without waiting: stop probing.
    Unsupported,
}

impl PageCacheProbe {
    pub(crate) fn new(enabled: bool) -> PageCacheProbe {
        PageCacheProbe {
            enabled,
            sparse: false,
            refill: false,
            fits: false,
            window_tries: 0,
            window_hits: 0,
            countdown: 0,
        }
    }

    pub(crate) fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Whether misses are read through the page cache: the index fits in memory and probing
    /// is on.
    pub(crate) fn fits(&self) -> bool {
        self.enabled && self.fits
    }

    /// Whether the index this probe reads fits in memory (module documentation).
    pub(crate) fn set_fits(&mut self, fits: bool) {
        self.fits = fits;
        if fits {
            self.sparse = false;
        }
    }

    /// Whether the next request should be probed.
    fn should_try(&mut self) -> bool {
        if !self.enabled {
            return false;
        }
        if !self.sparse {
            return true;
        }
        if self.countdown == 0 {
            self.countdown = SPARSE_EVERY - 1;
            true
        } else {
            self.countdown -= 1;
            false
        }
    }

    fn record(&mut self, hit: bool) {
        self.window_tries += 1;
        self.window_hits += u32::from(hit);
        if self.window_tries == WINDOW {
            self.sparse = !self.fits && self.window_hits < SPARSE_BELOW_HITS;
            self.refill = self.window_hits >= REFILL_FROM_HITS;
            self.window_tries = 0;
            self.window_hits = 0;
        }
    }

    /// [`PageCacheProbe::serve`] for reads of segment files: `reqs[i]` reads segment
    /// `segments[i]`, whose buffered descriptor is `buffered[segments[i]]`.
    pub(crate) fn serve_from<'a>(
        &mut self,
        buffered: &'a [Option<File>],
        segments: &[usize],
        reqs: &mut Vec<ReadReq<'a>>,
        stats: &mut IoStats,
    ) {
        if !self.enabled {
            return;
        }
        let mut twins: Vec<&File> = segments
            .iter()
            .map(|&s| buffered[s].as_ref().expect("opened with its segment"))
            .collect();
        self.serve(reqs, &mut twins, stats);
    }

    /// Serves what it can of `reqs` from the page cache, through `buffered[i]` (a buffered
    /// descriptor of `reqs[i].file`), and removes the served requests from both vectors; the
    /// rest are for the device (through `buffered[i]` when the index fits in memory).
    /// Served reads count in `stats.reads`/`bytes` as any read, and in
    /// `stats.cached_reads`/`cached_bytes`.
    pub(crate) fn serve<'a>(
        &mut self,
        reqs: &mut Vec<ReadReq<'a>>,
        buffered: &mut Vec<&'a File>,
        stats: &mut IoStats,
    ) {
        debug_assert_eq!(reqs.len(), buffered.len());
        let mut i = 0;
        while i < reqs.len() {
            if !self.should_try() {
                i += 1;
                continue;
            }
            let req = &mut reqs[i];
            match read_nowait(buffered[i], req.buf, req.offset, req.needed, !self.fits) {
                Probe::Hit(n) => {
                    self.record(true);
                    stats.reads += 1;
                    stats.bytes += n as u64;
                    stats.cached_reads += 1;
                    stats.cached_bytes += n as u64;
                    reqs.swap_remove(i);
                    buffered.swap_remove(i);
                }
                Probe::Miss => {
                    if self.fits {
                        req.file = buffered[i];
                        stats.refills += 1;
                    } else if self.refill {
                        refill(buffered[i], req.offset, req.buf.len());
                        stats.refills += 1;
                    }
                    self.record(false);
                    i += 1;
                }
                Probe::Unsupported => {
                    self.enabled = false;
                    return;
                }
            }
        }
    }
}

/// Starts reading `len` bytes at `offset` of `file` into the page cache without waiting for
/// them. Advice only: an error changes nothing the caller relies on, so it is ignored.
fn refill(file: &File, offset: u64, len: usize) {
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    // SAFETY: a plain system call on a live descriptor; it touches no memory of ours.
    unsafe { libc::posix_fadvise(file.as_raw_fd(), offset, len, libc::POSIX_FADV_WILLNEED) };
}

/// Asks the kernel to drop the clean cached pages of the file at `path` (dirty ones stay until
/// written back): a cold page cache for tests and benchmarks of reads it does not serve.
pub fn evict(path: &std::path::Path) -> io::Result<()> {
    let file = File::open(path)?;
    // SAFETY: a plain system call on a descriptor this function owns; it touches no memory.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

/// `cachestat(2)` (Linux 6.5): one number on every architecture; the libc crate does not
/// name it for x86_64 glibc yet.
const SYS_CACHESTAT: libc::c_long = 451;
/// The kernel's page size, in which `cachestat` counts (4 KiB on the machines navis runs on;
/// a larger page only makes a range look less cached, never more).
const KERNEL_PAGE: u64 = 4096;

#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// Whether every page of `len` bytes at `offset` of `file` is in the page cache; `None` when
/// the kernel cannot say (no `cachestat`).
fn all_cached(file: &File, offset: u64, len: usize) -> Option<bool> {
    let range = CachestatRange {
        off: offset,
        len: len as u64,
    };
    let mut stat = Cachestat::default();
    // SAFETY: `range` and `stat` are live, properly laid out (the kernel's struct
    // cachestat_range and struct cachestat) and exclusively borrowed for the call; the call
    // is synchronous and reads only the descriptor's page-cache state.
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_raw_fd(),
            &range as *const CachestatRange,
            &mut stat as *mut Cachestat,
            0u32,
        )
    };
    if rc != 0 {
        return match io::Error::last_os_error().raw_os_error() {
            Some(libc::ENOSYS)
            | Some(libc::EOPNOTSUPP)
            | Some(libc::EINVAL)
            | Some(libc::EPERM) => None,
            // Anything else (EINTR, ...): treat as not cached; the device read decides.
            _ => Some(false),
        };
    }
    let pages = (offset + len as u64).div_ceil(KERNEL_PAGE) - offset / KERNEL_PAGE;
    Some(stat.nr_cache >= pages)
}

/// Reads `buf.len()` bytes at `offset` (of which `needed` must arrive) from the page cache if
/// every page of the range is there; with `check_first`, without starting any I/O otherwise.
/// `check_first`: ask `cachestat(2)` before reading, so that a miss does not start a read
/// into the page cache. An index that fits in memory skips it: its misses are read through
/// the page cache anyway, and the check was one of the two system calls of each of an
/// in-memory query's CASR vector reads.
fn read_nowait(
    file: &File,
    buf: &mut [u8],
    offset: u64,
    needed: usize,
    check_first: bool,
) -> Probe {
    let Ok(offset) = i64::try_from(offset) else {
        return Probe::Unsupported;
    };
    if check_first {
        match all_cached(file, offset as u64, buf.len()) {
            None => return Probe::Unsupported,
            Some(false) => return Probe::Miss,
            Some(true) => {}
        }
    }
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: `iov` describes `buf`, which is valid for writes of `buf.len()` bytes and
    // borrowed mutably for the whole call; the call is synchronous, so the kernel is done with
    // the buffer when it returns.
    let n = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, offset, libc::RWF_NOWAIT) };
    if n >= 0 {
        // A short read means part of the range is not cached (or lies past the end of the
        // file): the device read that follows overwrites the buffer whole.
        return if n as usize >= needed {
            Probe::Hit(n as usize)
        } else {
            Probe::Miss
        };
    }
    match io::Error::last_os_error().raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EINTR) => Probe::Miss,
        // EOPNOTSUPP: the file system has no non-blocking buffered reads; ENOSYS/EINVAL: the
        // kernel has no preadv2 flags. Anything else is left to the device read to report.
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) | Some(libc::EINVAL) => Probe::Unsupported,
        _ => Probe::Miss,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file_with(bytes: &[u8]) -> (tempfile::NamedTempFile, File) {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(bytes).unwrap();
        f.flush().unwrap();
        let reopened = File::open(f.path()).unwrap();
        (f, reopened)
    }

    #[test]
    fn cached_pages_are_served_and_counted() {
        serves_cached_pages(false);
    }

    #[test]
    fn a_fitting_index_serves_cached_pages_without_asking_first() {
        serves_cached_pages(true);
    }

    fn serves_cached_pages(fits: bool) {
        let data: Vec<u8> = (0..16384u32).map(|i| (i % 251) as u8).collect();
        // Just written through the page cache, so cached.
        let (_keep, file) = file_with(&data);
        let mut a = vec![0u8; 4096];
        let mut b = vec![0u8; 100];
        let mut reqs = vec![
            ReadReq {
                file: &file,
                offset: 4096,
                buf: &mut a,
                needed: 4096,
            },
            ReadReq {
                file: &file,
                offset: 10_000,
                buf: &mut b,
                needed: 100,
            },
        ];
        let mut twins = vec![&file, &file];
        let mut stats = IoStats::default();
        let mut probe = PageCacheProbe::new(true);
        probe.set_fits(fits);
        probe.serve(&mut reqs, &mut twins, &mut stats);
        if !probe.is_enabled() {
            // This file system has no RWF_NOWAIT buffered reads: nothing served, nothing lost.
            assert_eq!(reqs.len(), 2);
            return;
        }
        assert!(reqs.is_empty(), "both ranges are cached");
        assert_eq!((stats.reads, stats.cached_reads), (2, 2));
        assert_eq!(stats.cached_bytes, 4196);
        assert_eq!(a, data[4096..8192]);
        assert_eq!(b, data[10_000..10_100]);
    }

    #[test]
    fn evicted_pages_are_left_for_the_device() {
        let (keep, file) = file_with(&[9u8; 8192]);
        file.sync_all().unwrap();
        evict(keep.path()).unwrap();
        let mut buf = vec![0u8; 4096];
        let mut reqs = vec![ReadReq {
            file: &file,
            offset: 0,
            buf: &mut buf,
            needed: 4096,
        }];
        let mut twins = vec![&file];
        let mut stats = IoStats::default();
        let mut probe = PageCacheProbe::new(true);
        probe.serve(&mut reqs, &mut twins, &mut stats);
        if probe.is_enabled() {
            assert_eq!(
                reqs.len(),
                1,
                "an evicted page is not served from the page cache"
            );
            assert_eq!(stats.cached_reads, 0);
            // ... and the miss started no read of it (RWF_NOWAIT alone would have).
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert_eq!(all_cached(&file, 0, 4096), Some(false));
        }
    }

    #[test]
    fn a_hole_in_a_cached_file_is_refilled_in_the_background() {
        let pages = WINDOW as usize + 1;
        let (keep, file) = file_with(&vec![5u8; pages * 4096]);
        file.sync_all().unwrap();
        let hole = (pages as u64 - 1) * 4096;
        // SAFETY: a plain system call on a live descriptor.
        let rc = unsafe {
            libc::posix_fadvise(
                file.as_raw_fd(),
                hole as i64,
                4096,
                libc::POSIX_FADV_DONTNEED,
            )
        };
        assert_eq!(rc, 0);
        let mut probe = PageCacheProbe::new(true);
        let mut stats = IoStats::default();
        let mut buf = vec![0u8; 4096];
        // A window of hits: the file is cached but for its last page.
        for page in 0..WINDOW as u64 {
            let mut reqs = vec![ReadReq {
                file: &file,
                offset: page * 4096,
                buf: &mut buf,
                needed: 4096,
            }];
            probe.serve(&mut reqs, &mut vec![&file], &mut stats);
            if !probe.is_enabled() || all_cached(&file, hole, 4096) != Some(false) {
                return; // no probing here, or the kernel did not drop the page: nothing to test
            }
        }
        assert_eq!(stats.cached_reads, WINDOW as u64);
        let mut reqs = vec![ReadReq {
            file: &file,
            offset: hole,
            buf: &mut buf,
            needed: 4096,
        }];
        probe.serve(&mut reqs, &mut vec![&file], &mut stats);
        assert_eq!(reqs.len(), 1, "the miss is still read from the device");
        assert_eq!(stats.refills, 1);
        let refilled = (0..200).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            all_cached(&file, hole, 4096) == Some(true)
        });
        assert!(refilled, "the hole is back in the page cache");
        drop(keep);
    }

    #[test]
    fn a_fitting_index_reads_its_misses_through_the_page_cache() {
        let (keep, direct) = file_with(&[7u8; 8192]);
        let twin = File::open(keep.path()).unwrap();
        direct.sync_all().unwrap();
        crate::page_cache::evict(keep.path()).unwrap();
        let mut probe = PageCacheProbe::new(true);
        probe.set_fits(true);
        let mut stats = IoStats::default();
        let mut buf = vec![0u8; 4096];
        let mut reqs = vec![ReadReq {
            file: &direct,
            offset: 4096,
            buf: &mut buf,
            needed: 4096,
        }];
        probe.serve(&mut reqs, &mut vec![&twin], &mut stats);
        if !probe.is_enabled() || reqs.is_empty() {
            return; // no probing here, or the kernel kept the page: nothing to test
        }
        assert!(
            std::ptr::eq(reqs[0].file, &twin),
            "the miss goes to the device through the buffered descriptor"
        );
        assert_eq!(stats.refills, 1);
        // A window of misses leaves probing on every request while the index fits...
        for _ in 0..WINDOW {
            probe.record(false);
        }
        assert!(!probe.sparse);
        // ... and not once it no longer does.
        probe.set_fits(false);
        for _ in 0..WINDOW {
            probe.record(false);
        }
        assert!(probe.sparse);
        let mut reqs = vec![ReadReq {
            file: &direct,
            offset: 0,
            buf: &mut buf,
            needed: 4096,
        }];
        probe.countdown = 0;
        probe.serve(&mut reqs, &mut vec![&twin], &mut stats);
        if let Some(r) = reqs.first() {
            assert!(
                std::ptr::eq(r.file, &direct),
                "not fitting: O_DIRECT as before"
            );
        }
    }

    #[test]
    fn only_windows_of_mostly_hits_refill() {
        let mut probe = PageCacheProbe::new(true);
        assert!(!probe.refill, "a new reader has seen no hits yet");
        for i in 0..WINDOW {
            probe.record(i < REFILL_FROM_HITS);
        }
        assert!(probe.refill);
        for i in 0..WINDOW {
            probe.record(i < REFILL_FROM_HITS - 1);
        }
        assert!(!probe.refill, "one hit short of the threshold");
        assert!(!probe.sparse);
    }

    #[test]
    fn a_range_past_the_end_is_left_for_the_device() {
        let (_keep, file) = file_with(&[7u8; 4096]);
        let mut buf = vec![0u8; 4096];
        let mut reqs = vec![ReadReq {
            file: &file,
            offset: 4096,
            buf: &mut buf,
            needed: 4096,
        }];
        let mut twins = vec![&file];
        let mut stats = IoStats::default();
        PageCacheProbe::new(true).serve(&mut reqs, &mut twins, &mut stats);
        assert_eq!(reqs.len(), 1);
        assert_eq!(stats.cached_reads, 0);
    }

    #[test]
    fn misses_make_probing_sparse_and_hits_restore_it() {
        let mut probe = PageCacheProbe::new(true);
        for _ in 0..WINDOW {
            assert!(probe.should_try());
            probe.record(false);
        }
        let tried = (0..SPARSE_EVERY * 4).filter(|_| probe.should_try()).count();
        assert_eq!(tried, 4, "one in SPARSE_EVERY once a window missed");
        for _ in 0..WINDOW {
            probe.record(true);
        }
        assert!(
            (0..10).all(|_| probe.should_try()),
            "dense again after a window of hits"
        );
    }

    #[test]
    fn disabled_probe_serves_nothing() {
        let (_keep, file) = file_with(&[1u8; 4096]);
        let mut buf = vec![0u8; 4096];
        let mut reqs = vec![ReadReq {
            file: &file,
            offset: 0,
            buf: &mut buf,
            needed: 4096,
        }];
        let mut twins = vec![&file];
        let mut stats = IoStats::default();
        PageCacheProbe::new(false).serve(&mut reqs, &mut twins, &mut stats);
        assert_eq!((reqs.len(), stats.reads), (1, 0));
    }
}
