//! Giving memory freed by large one-off operations back to the operating system.
//!
//! A PostgreSQL backend lives as long as its connection. The allocator keeps memory freed
//! inside its heap for later use, so an operation that once needed hundreds of megabytes
//! (making the runtime copy of a 1M-vector index, VACUUM's reachability pass, a build) leaves
//! its backend that large for the rest of the connection. Inside a memory-limited server that
//! memory competes with the PQ codes every search needs (measured in
//! benchmarks/results/compare.md, "1M rows out of memory with inserts").

/// Returns the allocator's free memory to the operating system where the allocator supports
/// it (glibc's `malloc_trim`); a no-op elsewhere. Costs a walk over the heap's free chunks:
/// call it after an operation that allocated a lot, not per query.
pub fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory; it takes the allocator's own locks and
    // touches no memory the program holds.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn freed_heap_memory_leaves_the_process() {
        // Many medium allocations land in the heap (below the mmap threshold); freeing all
        // but the last keeps the heap's top in use, so only a trim can return the rest.
        fn rss_kib() -> u64 {
            let status = std::fs::read_to_string("/proc/self/status").unwrap();
            let line = status.lines().find(|l| l.starts_with("RssAnon:")).unwrap();
            line.split_whitespace().nth(1).unwrap().parse().unwrap()
        }
        let mut blocks: Vec<Vec<u8>> = (0..2000).map(|i| vec![i as u8; 64 * 1024]).collect();
        let keep = blocks.pop().unwrap();
        let before = rss_kib();
        drop(blocks);
        let freed_untrimmed = rss_kib();
        super::return_freed_memory();
        let after = rss_kib();
        assert_eq!(keep[0], (1999 % 256) as u8);
        // 2000 x 64 KiB = 125 MiB was touched; the trim must give most of it back. (Other
        // tests' threads allocate too, so the bound is loose.)
        assert!(
            after + 64 * 1024 < before,
            "RssAnon {before} KiB before freeing, {freed_untrimmed} after, {after} after the trim"
        );
    }
}
