//! Splitting per-vertex work of placement over scoped threads.

use std::ops::Range;

/// `0..n` cut into at most `threads` contiguous, non-empty ranges of near-equal length.
pub(super) fn vertex_chunks(n: usize, threads: usize) -> Vec<Range<usize>> {
    let parts = threads.clamp(1, n.max(1));
    let step = n.div_ceil(parts);
    (0..parts)
        .map(|i| (i * step).min(n)..((i + 1) * step).min(n))
        .filter(|r| !r.is_empty())
        .collect()
}

/// `f(v)` for every v in `0..n`, in order, computed on up to `threads` threads.
pub(super) fn map_vertices<T, F>(n: usize, threads: usize, f: F) -> Vec<T>
where
    T: Send,
    F: Fn(usize) -> T + Sync,
{
    let chunks = vertex_chunks(n, threads);
    if chunks.len() <= 1 {
        return (0..n).map(f).collect();
    }
    let parts: Vec<Vec<T>> = std::thread::scope(|scope| {
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|range| scope.spawn(|| range.map(&f).collect::<Vec<T>>()))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    parts.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_every_vertex_once() {
        for (n, threads) in [(0, 4), (1, 4), (5, 2), (10, 3), (10, 10), (7, 0)] {
            let chunks = vertex_chunks(n, threads);
            let flat: Vec<usize> = chunks.iter().cloned().flatten().collect();
            assert_eq!(flat, (0..n).collect::<Vec<_>>(), "n {n} threads {threads}");
            assert!(chunks.len() <= threads.max(1));
        }
        assert_eq!(map_vertices(1000, 3, |v| v * 2)[999], 1998);
        assert_eq!(map_vertices(1000, 3, |v| v).len(), 1000);
    }
}
