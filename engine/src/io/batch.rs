//! One batch of reads, submitted and completed together: io_uring with a `pread` fallback, and
//! opening the files they read (O_DIRECT when accepted).

use super::{AlignedPage, Backend, IoStats, ReadReq};
use io_uring::{opcode, types, IoUring};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// Opens `path` read-only, with O_DIRECT when asked and accepted. O_DIRECT can be refused at
/// open (EINVAL) or only at the first read, so an accepted open is probed with one aligned
/// read.
pub(crate) fn open_for_reading(path: &Path, direct: bool) -> io::Result<(File, bool)> {
    let buffered = || File::open(path).map(|f| (f, false));
    if !direct {
        return buffered();
    }
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return buffered(),
        Err(e) => return Err(e),
    };
    let mut probe = AlignedPage::zeroed();
    match file.read_at(&mut probe.0, 0) {
        Ok(_) => Ok((file, true)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => buffered(),
        Err(e) => Err(e),
    }
}

pub(crate) fn run_batch(
    backend: &mut Backend,
    queue_depth: usize,
    stats: &mut IoStats,
    reqs: &mut [ReadReq],
) -> io::Result<()> {
    let _waiting = crate::io_wait::Waiting::begin();
    for chunk in reqs.chunks_mut(queue_depth) {
        match backend {
            Backend::Uring(ring) => match uring_batch(ring, stats, chunk) {
                Ok(()) => {}
                Err(BatchError::Read(e)) => return Err(e),
                Err(BatchError::RingUnusable) => {
                    // Nothing of this chunk is in flight; finish with pread from now on.
                    *backend = Backend::Pread;
                    pread_batch(stats, chunk)?;
                }
            },
            Backend::Pread => pread_batch(stats, chunk)?,
        }
    }
    Ok(())
}

fn pread_batch(stats: &mut IoStats, reqs: &mut [ReadReq]) -> io::Result<()> {
    for req in reqs.iter_mut() {
        stats.reads += 1;
        let mut done = 0;
        while done < req.buf.len() {
            match req
                .file
                .read_at(&mut req.buf[done..], req.offset + done as u64)
            {
                Ok(0) => break,
                Ok(n) => {
                    done += n;
                    stats.submits += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        stats.bytes += done as u64;
        check_length(req, done)?;
    }
    Ok(())
}

fn check_length(req: &ReadReq, got: usize) -> io::Result<()> {
    if got < req.needed {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "read of {} bytes at offset {} returned {got}: beyond the end of the file",
                req.needed, req.offset
            ),
        ));
    }
    Ok(())
}

enum BatchError {
    /// A read failed; the ring is fine.
    Read(io::Error),
    /// `io_uring_enter` failed before anything was submitted.
    RingUnusable,
}

fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)
    )
}

/// Queues every read of `reqs` (at most the ring size), submits them with one
/// `submit_and_wait`, and harvests every completion before returning, so that no buffer is
/// released while the kernel may still write into it.
fn uring_batch(
    ring: &mut IoUring,
    stats: &mut IoStats,
    reqs: &mut [ReadReq],
) -> Result<(), BatchError> {
    for (i, req) in reqs.iter_mut().enumerate() {
        let entry = opcode::Read::new(
            types::Fd(req.file.as_raw_fd()),
            req.buf.as_mut_ptr(),
            req.buf.len() as u32,
        )
        .offset(req.offset)
        .build()
        .user_data(i as u64);
        // SAFETY: the buffer is borrowed mutably from `reqs` for this whole function, and the
        // function does not return (on any path) until the kernel has posted this request's
        // completion, so the kernel never writes into memory we no longer own. The file
        // descriptor stays open for the same reason (`req.file` borrows it).
        if unsafe { ring.submission().push(&entry) }.is_err() {
            // Cannot happen with chunks no larger than the ring. The caller drops the ring,
            // and with it the entries queued so far, none of which was submitted.
            return Err(BatchError::RingUnusable);
        }
    }
    let mut pending = reqs.len();
    let mut submitted = false;
    let mut first_error = None;
    // LIOS: with stall work installed, submit alone, run the work while the reads are in
    // flight, then wait (RFC 0004 §4).
    let mut stall = crate::io_wait::StallSlot::take();
    let started = std::time::Instant::now();
    let mut worked = std::time::Duration::ZERO;
    if stall.is_set() {
        match ring.submit() {
            Ok(_) => {
                stats.submits += 1;
                submitted = true;
                let in_flight = reqs.len();
                let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    stall.with(|work| work.stalled(in_flight))
                }));
                worked = started.elapsed();
                if let Err(panic) = ran {
                    // The kernel still writes into `reqs`: wait for every read before the
                    // unwinding frees them.
                    drain(ring, pending);
                    std::panic::resume_unwind(panic);
                }
            }
            Err(e) if is_transient(&e) => {}
            Err(_) => return Err(BatchError::RingUnusable),
        }
    }
    while pending > 0 {
        match ring.submit_and_wait(pending) {
            Ok(_) => {
                if !submitted {
                    stats.submits += 1;
                    submitted = true;
                }
            }
            Err(e) if is_transient(&e) => continue,
            // Nothing submitted: the caller drops the ring with its queued entries.
            Err(_) if !submitted => return Err(BatchError::RingUnusable),
            Err(e) => {
                // Reads are in flight into our buffers: returning now would be unsound, and
                // waiting cannot succeed. This is a kernel failure, not bad input.
                eprintln!("navis: io_uring wait failed with reads in flight: {e}");
                std::process::abort();
            }
        }
        for cqe in ring.completion() {
            pending -= 1;
            let req = &reqs[cqe.user_data() as usize];
            let result = cqe.result();
            let outcome = if result < 0 {
                Err(io::Error::from_raw_os_error(-result))
            } else {
                check_length(req, result as usize)
            };
            stats.reads += 1;
            stats.bytes += result.max(0) as u64;
            if let (Err(e), None) = (outcome, &first_error) {
                first_error = Some(e);
            }
        }
    }
    let in_flight = reqs.len();
    stall.with(|work| work.completed(in_flight, started.elapsed(), worked));
    first_error.map_or(Ok(()), |e| Err(BatchError::Read(e)))
}

/// Waits for `pending` completions and discards them (a batch given up while its reads are
/// in flight).
fn drain(ring: &mut IoUring, mut pending: usize) {
    while pending > 0 {
        match ring.submit_and_wait(pending) {
            Ok(_) => {}
            Err(e) if is_transient(&e) => continue,
            Err(e) => {
                eprintln!("navis: io_uring wait failed with reads in flight: {e}");
                std::process::abort();
            }
        }
        pending -= ring.completion().count();
    }
}
