//! The page-storage seam: the engine reads and writes 8 KiB blocks ([`crate::pages`]) only
//! through [`PageStore`], so the same build, search and insert code runs on a plain file
//! (benchmarks, engine tests) and on a PostgreSQL relation.
//!
//! Implementations:
//!
//! - [`FileStore`]: one plain file of 8 KiB blocks, block `b` at byte `b * 8192`, with
//!   `pread`/`pwrite`; `extend` appends zero blocks.
//! - [`MemStore`]: blocks in memory behind a mutex, for tests.
//! - The PostgreSQL store (future `src/relstore.rs`, RFC 0001 §5): writes go through smgr
//!   (`smgrextend`/`smgrwrite`, never skipping the fsync request) after their WAL record,
//!   with the LSN, engine CRC and PostgreSQL checksum stamped in that order; bulk pages (edge,
//!   vector) are read with O_DIRECT straight from the main fork's 1 GiB segment files, never
//!   through `shared_buffers`. Block `b` is in segment file `b / 131072` (`<relfilenode>`,
//!   `<relfilenode>.1`, ...) at byte `(b % 131072) * 8192`: [`segment_of`]. An extent of 128
//!   blocks that starts at a multiple of 128 never crosses a segment (131072 = 1024 × 128);
//!   an unaligned one may, and a read covering it must then be split at the boundary.
//!
//! Why `&self` methods (and an object-safe trait): searches read blocks from many threads
//! (or backends) at once while one writer extends and writes, so implementations synchronise
//! internally, as smgr does. Block numbers are u32 like PostgreSQL's `BlockNumber`;
//! `0xFFFFFFFF` (`InvalidBlockNumber`) is never a block.

use crate::pages::BLOCK_SIZE;
use crate::segments::segment_path;
use crate::storage::StorageError;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, RwLock};

/// Blocks per segment file of a relation fork (`RELSEG_SIZE` of a default build: 1 GiB).
pub const RELSEG_BLOCKS: u32 = 131_072;
/// Largest number of blocks a store may hold: block numbers stop below `InvalidBlockNumber`.
pub const MAX_BLOCKS: u32 = u32::MAX;

/// (segment number, byte offset in that segment file) of `block`.
pub fn segment_of(block: u32) -> (u32, u64) {
    segment_of_in(block, RELSEG_BLOCKS)
}

/// [`segment_of`] for segments of `segment_blocks` blocks.
pub fn segment_of_in(block: u32, segment_blocks: u32) -> (u32, u64) {
    (
        block / segment_blocks,
        u64::from(block % segment_blocks) * BLOCK_SIZE as u64,
    )
}

/// Block storage of one index. Blocks `0..nblocks()` exist; new ones come from `extend`.
pub trait PageStore: Send + Sync {
    /// Number of blocks.
    fn nblocks(&self) -> Result<u32, StorageError>;
    /// Reads block `block` into `out` (exactly [`BLOCK_SIZE`] bytes).
    fn read_block(&self, block: u32, out: &mut [u8]) -> Result<(), StorageError>;
    /// Overwrites existing block `block` with `page` (exactly [`BLOCK_SIZE`] bytes).
    fn write_block(&self, block: u32, page: &[u8]) -> Result<(), StorageError>;
    /// Appends `blocks` zero blocks; returns the number of the first (the old `nblocks`).
    fn extend(&self, blocks: u32) -> Result<u32, StorageError>;
    /// Makes every completed write and extension durable.
    fn sync(&self) -> Result<(), StorageError>;
}

/// A borrowed store is a store, so that owners of a store (such as
/// [`crate::relation::StoreLog`]) can hold either it or a reference to it.
impl<T: PageStore + ?Sized> PageStore for &T {
    fn nblocks(&self) -> Result<u32, StorageError> {
        (**self).nblocks()
    }
    fn read_block(&self, block: u32, out: &mut [u8]) -> Result<(), StorageError> {
        (**self).read_block(block, out)
    }
    fn write_block(&self, block: u32, page: &[u8]) -> Result<(), StorageError> {
        (**self).write_block(block, page)
    }
    fn extend(&self, blocks: u32) -> Result<u32, StorageError> {
        (**self).extend(blocks)
    }
    fn sync(&self) -> Result<(), StorageError> {
        (**self).sync()
    }
}

/// A shared store is a store (see the `&T` implementation).
impl<T: PageStore + ?Sized> PageStore for std::sync::Arc<T> {
    fn nblocks(&self) -> Result<u32, StorageError> {
        (**self).nblocks()
    }
    fn read_block(&self, block: u32, out: &mut [u8]) -> Result<(), StorageError> {
        (**self).read_block(block, out)
    }
    fn write_block(&self, block: u32, page: &[u8]) -> Result<(), StorageError> {
        (**self).write_block(block, page)
    }
    fn extend(&self, blocks: u32) -> Result<u32, StorageError> {
        (**self).extend(blocks)
    }
    fn sync(&self) -> Result<(), StorageError> {
        (**self).sync()
    }
}

fn check_buffer(len: usize) -> Result<(), StorageError> {
    if len != BLOCK_SIZE {
        return Err(StorageError::invalid(format!(
            "block buffer is {len} bytes, blocks are {BLOCK_SIZE}"
        )));
    }
    Ok(())
}

fn check_block(name: &Path, block: u32, nblocks: u32) -> Result<(), StorageError> {
    if block >= nblocks {
        return Err(StorageError::invalid(format!(
            "block {block} is beyond the end of \"{}\" ({nblocks} blocks)",
            name.display()
        )));
    }
    Ok(())
}

fn extended(name: &Path, nblocks: u32, blocks: u32) -> Result<u32, StorageError> {
    // MAX_BLOCKS is u32::MAX, so overflow is the only limit.
    nblocks.checked_add(blocks).ok_or_else(|| {
        StorageError::invalid(format!(
            "\"{}\" cannot grow by {blocks} blocks beyond {nblocks}",
            name.display()
        ))
    })
}

/// A relation fork in files as PostgreSQL lays it out: 1 GiB segment files `<path>`,
/// `<path>.1`, ... ([`crate::segments::segment_path`]), so that [`crate::segments::SegmentReader`]
/// reads what this store wrote at any size (a 1M x 384 index is 2 GiB).
pub struct FileStore {
    /// Open segment files; every one but the last holds exactly `segment_blocks` blocks.
    segments: RwLock<Vec<File>>,
    path: PathBuf,
    segment_blocks: u32,
    /// Blocks that exist; advanced (Release) only after the zero blocks are written.
    nblocks: AtomicU32,
    /// Serialises extensions (the relation extension lock's role).
    extend_lock: Mutex<()>,
}

impl FileStore {
    /// Creates an empty store at `path`; fails if the file exists.
    pub fn create(path: &Path) -> Result<Self, StorageError> {
        Self::create_with_segment_blocks(path, RELSEG_BLOCKS)
    }

    /// Opens an existing store: `path` and the segment files after it.
    pub fn open(path: &Path) -> Result<Self, StorageError> {
        Self::open_with_segment_blocks(path, RELSEG_BLOCKS)
    }

    /// [`FileStore::create`] with another segment size (tests).
    pub fn create_with_segment_blocks(
        path: &Path,
        segment_blocks: u32,
    ) -> Result<Self, StorageError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| StorageError::io(path, "create", e))?;
        Ok(Self::with(vec![file], path, segment_blocks, 0))
    }

    /// [`FileStore::open`] with another segment size (tests). Every segment but the last
    /// must be full, and each a whole number of blocks, as md.c requires.
    pub fn open_with_segment_blocks(
        path: &Path,
        segment_blocks: u32,
    ) -> Result<Self, StorageError> {
        assert!(segment_blocks > 0);
        let mut files = Vec::new();
        let mut blocks: u64 = 0;
        loop {
            let seg_path = segment_path(path, files.len() as u32);
            let file = match OpenOptions::new().read(true).write(true).open(&seg_path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && !files.is_empty() => break,
                Err(e) => return Err(StorageError::io(&seg_path, "open", e)),
            };
            let len = file
                .metadata()
                .map_err(|e| StorageError::io(&seg_path, "stat", e))?
                .len();
            let seg_blocks = len / BLOCK_SIZE as u64;
            if len % BLOCK_SIZE as u64 != 0 || seg_blocks > u64::from(segment_blocks) {
                return Err(StorageError::corrupt(
                    &seg_path,
                    format!(
                        "{len} bytes is not a whole number of {BLOCK_SIZE}-byte blocks \
                         up to {segment_blocks} blocks"
                    ),
                ));
            }
            files.push(file);
            blocks += seg_blocks;
            if seg_blocks < u64::from(segment_blocks) {
                // The last segment; one after it would mean blocks went missing.
                let next = segment_path(path, files.len() as u32);
                if next.exists() {
                    return Err(StorageError::corrupt(
                        &next,
                        format!("follows {}, which is not full", seg_path.display()),
                    ));
                }
                break;
            }
        }
        if blocks > u64::from(MAX_BLOCKS) {
            return Err(StorageError::corrupt(path, format!("{blocks} blocks")));
        }
        Ok(Self::with(files, path, segment_blocks, blocks as u32))
    }

    fn with(files: Vec<File>, path: &Path, segment_blocks: u32, nblocks: u32) -> Self {
        FileStore {
            segments: RwLock::new(files),
            path: path.to_path_buf(),
            segment_blocks,
            nblocks: AtomicU32::new(nblocks),
            extend_lock: Mutex::new(()),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn current(&self) -> u32 {
        self.nblocks.load(Ordering::Acquire)
    }

    /// (segment, byte offset in it) of `block`.
    fn locate(&self, block: u32) -> (usize, u64) {
        let (segment, offset) = segment_of_in(block, self.segment_blocks);
        (segment as usize, offset)
    }

    /// Runs `f` on the file of segment `segment`, which must exist.
    fn on_segment<R>(
        &self,
        segment: usize,
        f: impl FnOnce(&File) -> std::io::Result<R>,
        what: &'static str,
    ) -> Result<R, StorageError> {
        let files = self.segments.read().unwrap_or_else(|e| e.into_inner());
        // (the path is only built for an error message)
        let seg_path = || segment_path(&self.path, segment as u32);
        let file = files.get(segment).ok_or_else(|| {
            StorageError::invalid(format!("segment \"{}\" is not open", seg_path().display()))
        })?;
        f(file).map_err(|e| StorageError::io(&seg_path(), what, e))
    }
}

impl PageStore for FileStore {
    fn nblocks(&self) -> Result<u32, StorageError> {
        Ok(self.current())
    }

    fn read_block(&self, block: u32, out: &mut [u8]) -> Result<(), StorageError> {
        check_buffer(out.len())?;
        check_block(&self.path, block, self.current())?;
        let (segment, offset) = self.locate(block);
        self.on_segment(segment, |f| f.read_exact_at(out, offset), "read")
    }

    fn write_block(&self, block: u32, page: &[u8]) -> Result<(), StorageError> {
        check_buffer(page.len())?;
        check_block(&self.path, block, self.current())?;
        let (segment, offset) = self.locate(block);
        self.on_segment(segment, |f| f.write_all_at(page, offset), "write")
    }

    fn extend(&self, blocks: u32) -> Result<u32, StorageError> {
        let _guard = lock(&self.extend_lock);
        let first = self.current();
        let total = extended(&self.path, first, blocks)?;
        // Real zero blocks, as smgrextend writes, so the space is allocated now and a later
        // write cannot fail for lack of it. At most 1 MiB of zeros per call, never across a
        // segment boundary.
        const CHUNK_BLOCKS: u32 = 128;
        let zeros = vec![0u8; CHUNK_BLOCKS.min(blocks.max(1)) as usize * BLOCK_SIZE];
        let mut at = first;
        while at < total {
            let (segment, offset) = self.locate(at);
            let segment_end = (segment as u64 + 1) * u64::from(self.segment_blocks);
            let n = (total - at)
                .min(CHUNK_BLOCKS)
                .min((segment_end - u64::from(at)) as u32);
            let opened = self
                .segments
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .len();
            if opened == segment {
                // Only extensions add segments, and they are serialised by `extend_lock`.
                let seg_path = segment_path(&self.path, segment as u32);
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(&seg_path)
                    .map_err(|e| StorageError::io(&seg_path, "create", e))?;
                self.segments
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(file);
            }
            self.on_segment(
                segment,
                |f| f.write_all_at(&zeros[..n as usize * BLOCK_SIZE], offset),
                "extend",
            )?;
            at += n;
        }
        self.nblocks.store(total, Ordering::Release);
        Ok(first)
    }

    fn sync(&self) -> Result<(), StorageError> {
        // fdatasync also persists the file length, which extensions change.
        let files = self.segments.read().unwrap_or_else(|e| e.into_inner());
        for (segment, file) in files.iter().enumerate() {
            file.sync_data().map_err(|e| {
                StorageError::io(&segment_path(&self.path, segment as u32), "fsync", e)
            })?;
        }
        Ok(())
    }
}

/// Blocks in memory, for tests.
#[derive(Default)]
pub struct MemStore {
    blocks: Mutex<Vec<Box<[u8]>>>,
}

impl MemStore {
    pub fn new() -> Self {
        Self::default()
    }

    fn name() -> &'static Path {
        Path::new("<memory>")
    }
}

/// A poisoned lock only means another thread panicked mid-operation; block contents are
/// whole-block copies, so the data is still consistent enough for tests to continue.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl PageStore for MemStore {
    fn nblocks(&self) -> Result<u32, StorageError> {
        Ok(lock(&self.blocks).len() as u32)
    }

    fn read_block(&self, block: u32, out: &mut [u8]) -> Result<(), StorageError> {
        check_buffer(out.len())?;
        let blocks = lock(&self.blocks);
        check_block(Self::name(), block, blocks.len() as u32)?;
        out.copy_from_slice(&blocks[block as usize]);
        Ok(())
    }

    fn write_block(&self, block: u32, page: &[u8]) -> Result<(), StorageError> {
        check_buffer(page.len())?;
        let mut blocks = lock(&self.blocks);
        check_block(Self::name(), block, blocks.len() as u32)?;
        blocks[block as usize].copy_from_slice(page);
        Ok(())
    }

    fn extend(&self, blocks: u32) -> Result<u32, StorageError> {
        let mut all = lock(&self.blocks);
        let first = all.len() as u32;
        let total = extended(Self::name(), first, blocks)?;
        all.resize_with(total as usize, || vec![0u8; BLOCK_SIZE].into_boxed_slice());
        Ok(first)
    }

    fn sync(&self) -> Result<(), StorageError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pages::{self, PageKind};
    use std::sync::Arc;

    fn page(kind: PageKind, block: u32, fill: u8) -> Vec<u8> {
        let mut p = vec![0u8; BLOCK_SIZE];
        pages::init(&mut p, kind, block);
        pages::payload_mut(&mut p).fill(fill);
        pages::seal(&mut p);
        p
    }

    fn exercise(store: &dyn PageStore) {
        assert_eq!(store.nblocks().unwrap(), 0);
        let mut buf = vec![0u8; BLOCK_SIZE];
        assert!(store.read_block(0, &mut buf).is_err());
        assert!(
            store.write_block(0, &buf).is_err(),
            "write needs extend first"
        );
        assert_eq!(store.extend(3).unwrap(), 0);
        assert_eq!(store.extend(0).unwrap(), 3);
        assert_eq!(store.extend(300).unwrap(), 3, "more than one zero chunk");
        assert_eq!(store.nblocks().unwrap(), 303);
        store.read_block(302, &mut buf).unwrap();
        assert!(pages::is_new(&buf), "extended blocks are zero");
        for b in [0, 1, 302] {
            store
                .write_block(b, &page(PageKind::Edge, b, b as u8))
                .unwrap();
        }
        store.write_block(1, &page(PageKind::Vector, 1, 9)).unwrap();
        store.sync().unwrap();
        store.read_block(1, &mut buf).unwrap();
        pages::verify(&buf, PageKind::Vector, 1).unwrap();
        store.read_block(302, &mut buf).unwrap();
        assert_eq!(buf, page(PageKind::Edge, 302, 46));
        store.read_block(2, &mut buf).unwrap();
        assert!(pages::verify(&buf, PageKind::Edge, 2).unwrap_err().is_new());
        let err = store.read_block(303, &mut buf).unwrap_err().to_string();
        assert!(
            err.contains("beyond the end") && err.contains("303 blocks"),
            "{err}"
        );
        assert!(store.read_block(0, &mut buf[..100]).is_err());
        assert!(store.write_block(0, &buf[..100]).is_err());
        assert!(store.extend(u32::MAX).is_err());
        assert_eq!(store.nblocks().unwrap(), 303);
    }

    #[test]
    fn mem_store() {
        exercise(&MemStore::new());
    }

    #[test]
    fn file_store_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.pages");
        exercise(&FileStore::create(&path).unwrap());
        assert!(FileStore::create(&path).is_err(), "never clobbers a file");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 303 * 8192);
        let store = FileStore::open(&path).unwrap();
        assert_eq!(store.path(), path);
        assert_eq!(store.nblocks().unwrap(), 303);
        let mut buf = vec![0u8; BLOCK_SIZE];
        store.read_block(1, &mut buf).unwrap();
        pages::verify(&buf, PageKind::Vector, 1).unwrap();
        // A torn file (not whole blocks) is refused.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all_at(&[1, 2, 3], 303 * 8192)
            .unwrap();
        let err = FileStore::open(&path).err().unwrap().to_string();
        assert!(err.contains("whole number"), "{err}");
        assert!(FileStore::open(&dir.path().join("missing")).is_err());
    }

    #[test]
    fn concurrent_extends_hand_out_distinct_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let stores: Vec<Arc<dyn PageStore>> = vec![
            Arc::new(MemStore::new()),
            Arc::new(FileStore::create(&dir.path().join("f")).unwrap()),
        ];
        for store in stores {
            let firsts: Vec<u32> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..4)
                    .map(|t| {
                        let store = &store;
                        s.spawn(move || {
                            (0..25)
                                .map(|i| {
                                    let first = store.extend(2).unwrap();
                                    let p = page(PageKind::Codes, first, (t * 25 + i) as u8);
                                    store.write_block(first, &p).unwrap();
                                    first
                                })
                                .collect::<Vec<_>>()
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .flat_map(|h| h.join().unwrap())
                    .collect()
            });
            let mut sorted = firsts.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..100).map(|i| i * 2).collect::<Vec<u32>>());
            assert_eq!(store.nblocks().unwrap(), 200);
            let mut buf = vec![0u8; BLOCK_SIZE];
            for b in firsts {
                store.read_block(b, &mut buf).unwrap();
                pages::verify(&buf, PageKind::Codes, b).unwrap();
            }
        }
    }

    #[test]
    fn a_file_store_spans_segment_files_as_postgresql_does() {
        // Segments of 4 blocks: 10 blocks are f (4), f.1 (4) and f.2 (2), and the segment
        // reader, which follows PostgreSQL's layout, reads back what the store wrote.
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("f");
        let store = FileStore::create_with_segment_blocks(&base, 4).unwrap();
        assert_eq!(store.extend(3).unwrap(), 0);
        assert_eq!(store.extend(7).unwrap(), 3);
        for b in 0..10 {
            store
                .write_block(b, &page(PageKind::Codes, b, b as u8))
                .unwrap();
        }
        store.sync().unwrap();
        let sizes: Vec<u64> = (0..3)
            .map(|s| std::fs::metadata(segment_path(&base, s)).unwrap().len())
            .collect();
        assert_eq!(sizes, vec![4 * 8192, 4 * 8192, 2 * 8192]);
        assert!(!segment_path(&base, 3).exists());
        drop(store);
        let store = FileStore::open_with_segment_blocks(&base, 4).unwrap();
        assert_eq!(store.nblocks().unwrap(), 10);
        let mut buf = vec![0u8; BLOCK_SIZE];
        for b in 0..10 {
            store.read_block(b, &mut buf).unwrap();
            assert_eq!(buf, page(PageKind::Codes, b, b as u8), "block {b}");
        }
        // Growing again continues the last segment, then opens the next.
        assert_eq!(store.extend(3).unwrap(), 10);
        assert_eq!(
            std::fs::metadata(segment_path(&base, 3)).unwrap().len(),
            8192
        );
        let options = crate::io::IoOptions {
            queue_depth: 4,
            backend: crate::io::BackendChoice::Auto,
            direct: false,
            probe_page_cache: false,
        };
        let mut reader =
            crate::segments::SegmentReader::with_segment_blocks(&base, options, 4).unwrap();
        // Two 4 KiB halves per block.
        let mut out = crate::io::AlignedPage::vec(4);
        reader.read_blocks(&[5, 9], &mut out).unwrap();
        for (i, b) in [5u32, 9].into_iter().enumerate() {
            let halves = [out[2 * i].0.as_slice(), out[2 * i + 1].0.as_slice()].concat();
            assert_eq!(halves, page(PageKind::Codes, b, b as u8), "block {b}");
        }
        // A segment that follows one that is not full is refused.
        drop(store);
        std::fs::OpenOptions::new()
            .write(true)
            .open(segment_path(&base, 1))
            .unwrap()
            .set_len(3 * 8192)
            .unwrap();
        assert!(FileStore::open_with_segment_blocks(&base, 4).is_err());
    }

    #[test]
    fn segments() {
        assert_eq!(RELSEG_BLOCKS as u64 * BLOCK_SIZE as u64, 1 << 30);
        assert_eq!(segment_of(0), (0, 0));
        assert_eq!(segment_of(1), (0, 8192));
        assert_eq!(segment_of(131_071), (0, 131_071 * 8192));
        assert_eq!(segment_of(131_072), (1, 0));
        assert_eq!(segment_of(131_072 * 3 + 5), (3, 5 * 8192));
        assert_eq!(
            segment_of(u32::MAX - 1),
            (32_767, (u32::MAX - 1 - 32_767 * 131_072) as u64 * 8192)
        );
        // An extent aligned to 128 blocks stays inside one segment.
        for first in (0..4 * RELSEG_BLOCKS).step_by(128) {
            assert_eq!(segment_of(first).0, segment_of(first + 127).0);
        }
    }
}
