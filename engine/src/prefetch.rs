//! Software prefetch hints: the build's neighbour vectors and a search's PQ codes are read at
//! random across memory far larger than the caches, so their loads are started ahead of use.

/// Hints that `values` will be read soon: one prefetch per 64-byte cache line.
#[inline]
pub fn bytes(values: &[u8]) {
    lines(values.as_ptr() as usize, values.len());
}

/// [`bytes`] for a float row.
#[inline]
pub fn floats(values: &[f32]) {
    lines(values.as_ptr() as usize, std::mem::size_of_val(values));
}

/// [`bytes`] for one value.
#[inline]
pub fn value<T>(value: &T) {
    lines(value as *const T as usize, std::mem::size_of::<T>());
}

#[inline]
fn lines(start: usize, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        const LINE: usize = 64;
        let end = start + len;
        let mut line = start & !(LINE - 1);
        while line < end {
            // SAFETY: a prefetch is only a hint; it never faults, even on an invalid address,
            // and these lines belong to `values` anyway.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(line as *const i8) };
            line += LINE;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (start, len);
}
