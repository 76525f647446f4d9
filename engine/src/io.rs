//! Side-file reader: batched io_uring reads with O_DIRECT, and a `pread` fallback.
//!
//! Traversal reads the beam-width edge pages of one hop, and CASR reads one window of
//! vectors, as one batch: every read of the batch is queued, one `io_uring_enter` submits
//! them all and waits for all of them, and the completions are harvested together
//! (digest §1.8). Buffers are ordinary heap memory aligned to 4096 bytes, not registered
//! buffers: registration pins memory per ring and buys little at these batch sizes.
//!
//! The backend is chosen at run time, once per reader:
//! * io_uring when the kernel lets us create a ring, otherwise (ENOSYS, EPERM from
//!   `kernel.io_uring_disabled`, seccomp) one `pread` per request;
//! * O_DIRECT when the file system accepts it (the page cache would otherwise double-cache
//!   what the shared edge-page cache already holds), otherwise buffered reads;
//! * `NAVIS_IO=pread` forces the fallback and `NAVIS_DIRECT=0` forces buffered reads, for
//!   tests and ablations.
//!
//! [`PageReader::backend_name`] reports the choice, and [`IoStats`] counts what was done.

use crate::storage::{IndexFiles, VectorLayout, PAGE_SIZE};
use io_uring::IoUring;
use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};

/// One 4 KiB buffer aligned for O_DIRECT. `Vec<AlignedPage>` is a contiguous, aligned
/// multi-page buffer; `bytemuck::cast_slice_mut` views it as bytes.
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(4096))]
pub struct AlignedPage(pub [u8; PAGE_SIZE]);

impl AlignedPage {
    pub fn zeroed() -> Self {
        AlignedPage([0; PAGE_SIZE])
    }

    /// `n` zeroed pages.
    pub fn vec(n: usize) -> Vec<AlignedPage> {
        vec![AlignedPage::zeroed(); n]
    }
}

/// Which backend to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendChoice {
    /// io_uring if a ring can be created, else pread.
    Auto,
    /// pread only.
    Pread,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoOptions {
    /// Most reads in flight at once; larger batches are split.
    pub queue_depth: u32,
    pub backend: BackendChoice,
    /// Try O_DIRECT (falls back to buffered where the file system refuses it).
    pub direct: bool,
    /// Under O_DIRECT, first try each read from the page cache without waiting
    /// ([`crate::page_cache`]); `NAVIS_PAGE_CACHE=0` turns it off for ablations.
    pub probe_page_cache: bool,
}

/// 0: O_DIRECT as `NAVIS_DIRECT` says; 1: on; 2: off (see [`set_direct_io`]).
static DIRECT_IO_SETTING: AtomicU8 = AtomicU8::new(0);

/// Chooses O_DIRECT (`true`) or the page cache for the readers this process opens from now
/// on, over `NAVIS_DIRECT` (PostgreSQL's `navis.direct_io`).
pub fn set_direct_io(direct: bool) {
    DIRECT_IO_SETTING.store(if direct { 1 } else { 2 }, Ordering::Relaxed);
}

impl IoOptions {
    /// Defaults overridden by `NAVIS_IO` (`pread`, `io_uring` or `auto`) and `NAVIS_DIRECT`
    /// (`0` disables O_DIRECT), itself overridden by [`set_direct_io`].
    pub fn from_env(queue_depth: u32) -> io::Result<IoOptions> {
        let io_var = std::env::var("NAVIS_IO").ok();
        let probe_var = std::env::var("NAVIS_PAGE_CACHE").ok();
        let direct_var = match DIRECT_IO_SETTING.load(Ordering::Relaxed) {
            1 => Some("on".to_owned()),
            2 => Some("off".to_owned()),
            _ => std::env::var("NAVIS_DIRECT").ok(),
        };
        let mut options = Self::from_values(queue_depth, io_var.as_deref(), direct_var.as_deref())?;
        options.probe_page_cache = !matches!(probe_var.as_deref(), Some("0") | Some("off"));
        Ok(options)
    }

    fn from_values(
        queue_depth: u32,
        io_var: Option<&str>,
        direct_var: Option<&str>,
    ) -> io::Result<IoOptions> {
        let backend = match io_var {
            None | Some("") | Some("auto") | Some("io_uring") => BackendChoice::Auto,
            Some("pread") => BackendChoice::Pread,
            Some(other) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("NAVIS_IO={other:?} is not one of pread, io_uring, auto"),
                ))
            }
        };
        let direct = !matches!(direct_var, Some("0") | Some("off") | Some("false"));
        Ok(IoOptions {
            queue_depth,
            backend,
            direct,
            probe_page_cache: true,
        })
    }
}

/// Cumulative counters of one reader.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoStats {
    /// Read requests issued (one per edge page, one per vector slot).
    pub reads: u64,
    /// Bytes transferred from the files (whole sectors under O_DIRECT).
    pub bytes: u64,
    /// System calls that submitted reads: `io_uring_enter` calls, or successful `pread` calls.
    pub submits: u64,
    /// Of `reads`, those the page cache served without a device read ([`crate::page_cache`]).
    pub cached_reads: u64,
    /// Of `bytes`, those of `cached_reads`.
    pub cached_bytes: u64,
    /// Misses after which the page cache was asked to read the range back
    /// ([`crate::page_cache`]: an index that mostly fits in memory).
    pub refills: u64,
}

/// One read of a batch: `buf.len()` bytes at `offset`, of which the first `needed` must
/// arrive (the rest may lie past the end of the file).
pub(crate) struct ReadReq<'a> {
    pub(crate) file: &'a File,
    pub(crate) offset: u64,
    pub(crate) buf: &'a mut [u8],
    pub(crate) needed: usize,
}

pub(crate) enum Backend {
    // Boxed: the ring handle is a few hundred bytes and the reader is moved around.
    Uring(Box<IoUring>),
    Pread,
}

/// Per-thread reader of one index's edge and vector files.
pub struct PageReader {
    edges: File,
    vectors: File,
    direct: bool,
    backend: Backend,
    vector_layout: VectorLayout,
    queue_depth: usize,
    scratch: Vec<AlignedPage>,
    stats: IoStats,
}

impl PageReader {
    /// Opens the files with options from the environment (see [`IoOptions::from_env`]).
    pub fn open(
        edge_file: &Path,
        vector_file: &Path,
        vector_layout: VectorLayout,
        queue_depth: u32,
    ) -> io::Result<Self> {
        Self::open_with(
            edge_file,
            vector_file,
            vector_layout,
            IoOptions::from_env(queue_depth)?,
        )
    }

    /// Reader for an open index, options from the environment.
    pub fn for_index(files: &IndexFiles, queue_depth: u32) -> io::Result<Self> {
        Self::open(
            &files.edge_path(),
            &files.vector_path(),
            files.vector_layout(),
            queue_depth,
        )
    }

    pub fn open_with(
        edge_file: &Path,
        vector_file: &Path,
        vector_layout: VectorLayout,
        options: IoOptions,
    ) -> io::Result<Self> {
        let queue_depth = options.queue_depth.clamp(1, 4096);
        let (edges, edges_direct) = open_for_reading(edge_file, options.direct)?;
        let (vectors, vectors_direct) = open_for_reading(vector_file, options.direct)?;
        let (edges, vectors) = if edges_direct != vectors_direct {
            // One backend name must describe both files; keep it simple and go buffered.
            (
                open_for_reading(edge_file, false)?.0,
                open_for_reading(vector_file, false)?.0,
            )
        } else {
            (edges, vectors)
        };
        let backend = match options.backend {
            BackendChoice::Pread => Backend::Pread,
            BackendChoice::Auto => IoUring::new(queue_depth)
                .map_or(Backend::Pread, |ring| Backend::Uring(Box::new(ring))),
        };
        Ok(PageReader {
            edges,
            vectors,
            direct: edges_direct && vectors_direct,
            backend,
            vector_layout,
            queue_depth: queue_depth as usize,
            scratch: Vec::new(),
            stats: IoStats::default(),
        })
    }

    /// `io_uring+O_DIRECT`, `io_uring+buffered`, `pread+O_DIRECT` or `pread+buffered`.
    pub fn backend_name(&self) -> &'static str {
        match (&self.backend, self.direct) {
            (Backend::Uring(_), true) => "io_uring+O_DIRECT",
            (Backend::Uring(_), false) => "io_uring+buffered",
            (Backend::Pread, true) => "pread+O_DIRECT",
            (Backend::Pread, false) => "pread+buffered",
        }
    }

    pub fn stats(&self) -> IoStats {
        self.stats
    }

    /// Reads edge pages `pages[i]` into `out[i]` as one batch. Pages are returned raw;
    /// verify them with `EdgePageLayout::verify`.
    pub fn read_edge_pages(&mut self, pages: &[u32], out: &mut [AlignedPage]) -> io::Result<()> {
        if out.len() < pages.len() {
            return Err(invalid("fewer output pages than pages to read"));
        }
        let edges = &self.edges;
        let mut reqs: Vec<ReadReq> = pages
            .iter()
            .zip(out.iter_mut())
            .map(|(&page, buf)| ReadReq {
                file: edges,
                offset: page as u64 * PAGE_SIZE as u64,
                buf: &mut buf.0,
                needed: PAGE_SIZE,
            })
            .collect();
        run_batch(
            &mut self.backend,
            self.queue_depth,
            &mut self.stats,
            &mut reqs,
        )
    }

    /// Like [`PageReader::read_edge_pages`] into a byte buffer of `pages.len() * 4096` bytes.
    /// Zero-copy when `out` is 4096-aligned (e.g. a cast `Vec<AlignedPage>`) or O_DIRECT is
    /// off; otherwise reads into an internal aligned buffer and copies.
    pub fn read_edge_pages_into(&mut self, pages: &[u32], out: &mut [u8]) -> io::Result<()> {
        if out.len() != pages.len() * PAGE_SIZE {
            return Err(invalid("output buffer must hold exactly the pages read"));
        }
        if !self.direct || (out.as_ptr() as usize).is_multiple_of(PAGE_SIZE) {
            let edges = &self.edges;
            let mut reqs: Vec<ReadReq> = pages
                .iter()
                .zip(out.chunks_exact_mut(PAGE_SIZE))
                .map(|(&page, buf)| ReadReq {
                    file: edges,
                    offset: page as u64 * PAGE_SIZE as u64,
                    buf,
                    needed: PAGE_SIZE,
                })
                .collect();
            return run_batch(
                &mut self.backend,
                self.queue_depth,
                &mut self.stats,
                &mut reqs,
            );
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        if scratch.len() < pages.len() {
            scratch.resize(pages.len(), AlignedPage::zeroed());
        }
        let result = self.read_edge_pages(pages, &mut scratch);
        if result.is_ok() {
            let bytes: &[u8] = bytemuck::cast_slice(&scratch[..pages.len()]);
            out.copy_from_slice(bytes);
        }
        self.scratch = scratch;
        result
    }

    /// Reads vector slots `slots[i]` into `out[i * slot_size ..]` (raw slot bytes; decode with
    /// `VectorLayout::parse_slot`) as one batch. A slot may straddle 4 KiB sectors: under
    /// O_DIRECT the covering aligned range is read and the slot cut out of it. Returns the
    /// bytes transferred.
    pub fn read_vectors(&mut self, slots: &[u32], out: &mut [u8]) -> io::Result<u64> {
        let slot_size = self.vector_layout.slot_size();
        if out.len() != slots.len() * slot_size {
            return Err(invalid("output buffer must hold exactly the slots read"));
        }
        let before = self.stats.bytes;
        if !self.direct {
            let vectors = &self.vectors;
            let layout = self.vector_layout;
            let mut reqs: Vec<ReadReq> = slots
                .iter()
                .zip(out.chunks_exact_mut(slot_size))
                .map(|(&slot, buf)| ReadReq {
                    file: vectors,
                    offset: layout.slot_offset(slot),
                    buf,
                    needed: slot_size,
                })
                .collect();
            run_batch(
                &mut self.backend,
                self.queue_depth,
                &mut self.stats,
                &mut reqs,
            )?;
            return Ok(self.stats.bytes - before);
        }
        // Per slot: at most ceil(slot_size / 4096) + 1 sectors.
        let span_pages = slot_size.div_ceil(PAGE_SIZE) + 1;
        let chunk = self.queue_depth;
        let mut scratch = std::mem::take(&mut self.scratch);
        if scratch.len() < chunk * span_pages {
            scratch.resize(chunk * span_pages, AlignedPage::zeroed());
        }
        let mut result = Ok(());
        for (slot_chunk, out_chunk) in slots.chunks(chunk).zip(out.chunks_mut(chunk * slot_size)) {
            result = self.read_vector_chunk(slot_chunk, out_chunk, &mut scratch, span_pages);
            if result.is_err() {
                break;
            }
        }
        self.scratch = scratch;
        result.map(|()| self.stats.bytes - before)
    }

    /// Reads the consecutive slots `first..first + count` into `out` (raw slot bytes, as
    /// [`PageReader::read_vectors`]) as one sequential run: the covering byte range (whole
    /// sectors under O_DIRECT) in requests of at most [`RUN_REQUEST_BYTES`], queued as one
    /// batch. An exhaustive scan wants every slot of the file; one request per slot would read
    /// a whole sector for each. Returns the bytes transferred.
    pub fn read_vector_run(&mut self, first: u32, count: usize, out: &mut [u8]) -> io::Result<u64> {
        let slot_size = self.vector_layout.slot_size();
        if out.len() != count * slot_size {
            return Err(invalid("output buffer must hold exactly the slots read"));
        }
        if count == 0 {
            return Ok(0);
        }
        let before = self.stats.bytes;
        let start = self.vector_layout.slot_offset(first);
        let range = if self.direct {
            SectorRange::covering(start, out.len())
        } else {
            SectorRange {
                start,
                len: out.len(),
                skip: 0,
            }
        };
        let mut pages = AlignedPage::vec(range.len.div_ceil(PAGE_SIZE));
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut pages);
        let needed_end = range.skip + out.len();
        let vectors = &self.vectors;
        let mut reqs: Vec<ReadReq> = bytes[..range.len]
            .chunks_mut(RUN_REQUEST_BYTES)
            .enumerate()
            .map(|(i, buf)| {
                let at = i * RUN_REQUEST_BYTES;
                ReadReq {
                    file: vectors,
                    offset: range.start + at as u64,
                    needed: needed_end.saturating_sub(at).min(buf.len()),
                    buf,
                }
            })
            .collect();
        run_batch(
            &mut self.backend,
            self.queue_depth,
            &mut self.stats,
            &mut reqs,
        )?;
        drop(reqs);
        out.copy_from_slice(&bytes[range.skip..needed_end]);
        Ok(self.stats.bytes - before)
    }

    fn read_vector_chunk(
        &mut self,
        slots: &[u32],
        out: &mut [u8],
        scratch: &mut [AlignedPage],
        span_pages: usize,
    ) -> io::Result<()> {
        let slot_size = self.vector_layout.slot_size();
        let layout = self.vector_layout;
        let ranges: Vec<SectorRange> = slots
            .iter()
            .map(|&s| SectorRange::covering(layout.slot_offset(s), slot_size))
            .collect();
        let vectors = &self.vectors;
        let mut reqs: Vec<ReadReq> = ranges
            .iter()
            .zip(scratch.chunks_mut(span_pages))
            .map(|(range, pages)| {
                let bytes: &mut [u8] = bytemuck::cast_slice_mut(pages);
                ReadReq {
                    file: vectors,
                    offset: range.start,
                    buf: &mut bytes[..range.len],
                    needed: range.skip + slot_size,
                }
            })
            .collect();
        run_batch(
            &mut self.backend,
            self.queue_depth,
            &mut self.stats,
            &mut reqs,
        )?;
        drop(reqs);
        for ((range, pages), dst) in ranges
            .iter()
            .zip(scratch.chunks(span_pages))
            .zip(out.chunks_exact_mut(slot_size))
        {
            let bytes: &[u8] = bytemuck::cast_slice(pages);
            dst.copy_from_slice(&bytes[range.skip..range.skip + slot_size]);
        }
        Ok(())
    }
}

/// Largest request of a sequential run read ([`PageReader::read_vector_run`]).
pub const RUN_REQUEST_BYTES: usize = 64 << 10;

/// The 4 KiB-aligned byte range covering `len` bytes at `offset`.
struct SectorRange {
    start: u64,
    len: usize,
    /// Offset of the wanted bytes inside the range.
    skip: usize,
}

impl SectorRange {
    fn covering(offset: u64, len: usize) -> SectorRange {
        let sector = PAGE_SIZE as u64;
        let start = offset / sector * sector;
        let end = (offset + len as u64).div_ceil(sector) * sector;
        SectorRange {
            start,
            len: (end - start) as usize,
            skip: (offset - start) as usize,
        }
    }
}

fn invalid(message: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message.to_string())
}

mod batch;

pub(crate) use batch::{open_for_reading, run_batch};

#[cfg(test)]
mod tests;
