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

/// `f(part)` for every part, in order: the first on the calling thread, each other on a
/// scoped thread of its own. A panic in a part is raised again on the caller.
pub(super) fn run_parts<P, R, F>(parts: Vec<P>, f: F) -> Vec<R>
where
    P: Send,
    R: Send,
    F: Fn(P) -> R + Sync,
{
    let mut parts = parts.into_iter();
    let Some(first) = parts.next() else {
        return Vec::new();
    };
    std::thread::scope(|scope| {
        let f = &f;
        let helpers: Vec<_> = parts.map(|part| scope.spawn(move || f(part))).collect();
        let mut results = vec![f(first)];
        results.extend(
            helpers
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))),
        );
        results
    })
}

/// `f(v)` for every v in `0..n`, in order, computed on up to `threads` threads.
pub(super) fn map_vertices<T, F>(n: usize, threads: usize, f: F) -> Vec<T>
where
    T: Send,
    F: Fn(usize) -> T + Sync,
{
    run_parts(vertex_chunks(n, threads), |range| {
        range.map(&f).collect::<Vec<T>>()
    })
    .into_iter()
    .flatten()
    .collect()
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
        assert_eq!(run_parts(vec![1, 2, 3], |x| x * 10), [10, 20, 30]);
        assert!(run_parts(Vec::<u8>::new(), |x| x).is_empty());
    }
}
