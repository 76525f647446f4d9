use super::*;
use crate::io::IoOptions;
use crate::pages::edge::EdgeLayout;
use crate::pages::extent::run_len;
use crate::pages::{init, seal, verify, EXTENT_BLOCKS};
use crate::storage::HeapTid;
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;

fn options(direct: bool) -> IoOptions {
    IoOptions {
        queue_depth: 16,
        backend: BackendChoice::Auto,
        direct,
        probe_page_cache: false,
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("navis-segments-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes `pages` (block -> bytes) into segment files of `segment_blocks` blocks at `base`.
fn write_segments(base: &Path, segment_blocks: u32, pages: &[(u32, Vec<u8>)]) {
    for (block, page) in pages {
        let seg = block / segment_blocks;
        let path = if seg == 0 {
            base.to_path_buf()
        } else {
            PathBuf::from(format!("{}.{seg}", base.display()))
        };
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .unwrap();
        file.write_all_at(page, (block % segment_blocks) as u64 * BLOCK_SIZE as u64)
            .unwrap();
    }
}

/// An extent map, the vector geometry, the pages to write (block, bytes) and the vectors.
type Scattered = (ExtentMap, VectorPages, Vec<(u32, Vec<u8>)>, Vec<Vec<f32>>);

/// Vector pages of kind `Vector` interleaved with edge runs, so that the vector kind's first
/// extent is scattered over non-consecutive blocks.
fn scattered_vectors(dim: usize, slots: u32) -> Scattered {
    let geometry = VectorPages::new(dim).unwrap();
    let pages_needed = geometry.pages_for(slots as u64) as u32;
    let mut map = ExtentMap::new();
    let mut end = 1u32;
    let mut run = 0;
    while map.capacity(PageKind::Vector) < pages_needed {
        map.push_run(PageKind::Vector, end);
        end += run_len(run);
        map.push_run(PageKind::Edge, end); // an edge run between every two vector runs
        end += run_len(run);
        run += 1;
    }
    let extents = pages_needed.div_ceil(EXTENT_BLOCKS);
    let mut buffers: Vec<Vec<u8>> = (0..extents)
        .map(|_| vec![0u8; EXTENT_BLOCKS as usize * BLOCK_SIZE])
        .collect();
    for (e, buf) in buffers.iter_mut().enumerate() {
        for p in 0..EXTENT_BLOCKS {
            let ordinal = e as u32 * EXTENT_BLOCKS + p;
            let block = map.block(PageKind::Vector, ordinal).unwrap_or(u32::MAX);
            geometry.init_page(
                &mut buf[p as usize * BLOCK_SIZE..(p as usize + 1) * BLOCK_SIZE],
                block,
                ordinal,
            );
        }
    }
    let mut vectors = Vec::new();
    for v in 0..slots {
        let vector: Vec<f32> = (0..dim).map(|i| (v as f32) * 0.5 + i as f32).collect();
        let (extent, _) = geometry.extent_of(v);
        let tid = HeapTid {
            block: v,
            offset: (v % 200 + 1) as u16,
        };
        geometry
            .write_slot(v, &vector, v, tid, &mut buffers[extent as usize], 0)
            .unwrap();
        vectors.push(vector);
    }
    let mut pages = Vec::new();
    for (e, buf) in buffers.iter_mut().enumerate() {
        for p in 0..EXTENT_BLOCKS {
            let ordinal = e as u32 * EXTENT_BLOCKS + p;
            if ordinal >= pages_needed {
                break;
            }
            let page = &mut buf[p as usize * BLOCK_SIZE..(p as usize + 1) * BLOCK_SIZE];
            seal(page);
            pages.push((map.block(PageKind::Vector, ordinal).unwrap(), page.to_vec()));
        }
    }
    (map, geometry, pages, vectors)
}

fn check_vector_reads(dim: usize, slots: u32, direct: bool, segment_blocks: u32) {
    let dir = temp_dir(&format!("vec{dim}-{direct}-{segment_blocks}"));
    let base = dir.join("16390");
    let (map, geometry, pages, vectors) = scattered_vectors(dim, slots);
    write_segments(&base, segment_blocks, &pages);
    let mut reader =
        SegmentReader::with_segment_blocks(&base, options(direct), segment_blocks).unwrap();
    // every slot, in a shuffled order, in batches of 7
    let mut ids: Vec<u32> = (0..slots).collect();
    ids.reverse();
    ids.rotate_left(slots as usize / 3);
    let slot_size = geometry.slot_size();
    for batch in ids.chunks(7) {
        let mut out = vec![0u8; batch.len() * slot_size];
        reader
            .read_vector_slots(&map, &geometry, batch, &mut out)
            .unwrap();
        for (&v, raw) in batch.iter().zip(out.chunks_exact(slot_size)) {
            let slot = geometry.layout().parse_slot(raw).unwrap();
            assert!(
                slot.is_owned_by(v),
                "dim {dim} slot {v} owner {}",
                slot.owner()
            );
            assert_eq!(
                slot.tid(),
                HeapTid {
                    block: v,
                    offset: (v % 200 + 1) as u16
                }
            );
            let mut back = vec![0f32; dim];
            slot.copy_vector_into(&mut back);
            assert_eq!(back, vectors[v as usize], "dim {dim} slot {v}");
        }
    }
    let stats = reader.stats();
    assert!(
        stats.reads >= slots as u64,
        "one read per slot at least: {stats:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn vector_slots_come_back_from_scattered_runs_and_segments() {
    for direct in [false, true] {
        check_vector_reads(3, 3000, direct, RELSEG_BLOCKS);
        check_vector_reads(784, 600, direct, RELSEG_BLOCKS);
        check_vector_reads(2036, 40, direct, RELSEG_BLOCKS); // every slot straddles pages
        check_vector_reads(784, 600, direct, 5); // segments of 5 blocks: reads cross files
    }
    check_vector_reads(16_000, 20, true, 3); // a slot spans 8 pages and several segments
}

#[test]
fn a_784_d_slot_inside_half_a_block_costs_one_4k_read() {
    let dir = temp_dir("halfblock");
    let base = dir.join("16390");
    let (map, geometry, pages, _) = scattered_vectors(784, 300);
    write_segments(&base, RELSEG_BLOCKS, &pages);
    let mut reader = SegmentReader::open(&base, options(true)).unwrap();
    let slot_size = geometry.slot_size();
    let mut one_sector = 0;
    for v in 0..300u32 {
        let r = geometry.sectors(v);
        let before = reader.stats();
        let mut out = vec![0u8; slot_size];
        reader
            .read_vector_slots(&map, &geometry, &[v], &mut out)
            .unwrap();
        let after = reader.stats();
        assert_eq!(
            after.bytes - before.bytes,
            r.len() as u64,
            "slot {v}: bytes read = its sectors"
        );
        if r.count == 1 {
            one_sector += 1;
            assert_eq!(after.reads - before.reads, 1);
        }
    }
    assert!(one_sector > 0, "some 784-d slots fit one sector");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn blocks_are_read_across_segments_and_verify() {
    let dir = temp_dir("blocks");
    let base = dir.join("16390");
    let layout = EdgeLayout::new(32).unwrap();
    let mut pages = Vec::new();
    for block in 1..40u32 {
        let mut page = vec![0u8; BLOCK_SIZE];
        layout.init_page(&mut page, block, block - 1);
        layout
            .put_slot(&mut page, 0, block * 10, &[block, block + 1])
            .unwrap();
        layout.seal(&mut page);
        pages.push((block, page));
    }
    let mut meta = vec![0u8; BLOCK_SIZE];
    init(&mut meta, PageKind::Meta, 0);
    seal(&mut meta);
    pages.push((0, meta));
    write_segments(&base, 8, &pages);
    for direct in [false, true] {
        let mut reader = SegmentReader::with_segment_blocks(&base, options(direct), 8).unwrap();
        let wanted: Vec<u32> = vec![39, 1, 8, 7, 16, 0, 23, 24, 31];
        let mut out = AlignedPage::vec(wanted.len() * 2);
        reader.read_blocks(&wanted, &mut out).unwrap();
        let bytes: &[u8] = bytemuck::cast_slice(&out);
        for (&b, page) in wanted.iter().zip(bytes.chunks_exact(BLOCK_SIZE)) {
            if b == 0 {
                verify(page, PageKind::Meta, 0).unwrap();
            } else {
                layout.verify(page, b, b - 1).unwrap();
                assert_eq!(layout.slot(page, 0).owner(), b * 10);
            }
        }
        assert_eq!(reader.stats().reads, wanted.len() as u64);
        // a block past the end of its segment file is an error, not zeros
        let mut one = AlignedPage::vec(2);
        assert!(reader.read_blocks(&[41], &mut one).is_err());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// With O_DIRECT and the probe, the fork fits in memory (a few kilobytes); without O_DIRECT
/// (tmpfs) every read is buffered: either way the reads go through the page cache.
#[test]
fn reads_through_the_page_cache_take_each_slots_own_bytes() {
    let dir = temp_dir("exact");
    let base = dir.join("16390");
    let (map, geometry, pages, vectors) = scattered_vectors(784, 300);
    write_segments(&base, RELSEG_BLOCKS, &pages);
    let probing = IoOptions {
        probe_page_cache: true,
        ..options(true)
    };
    let mut reader = SegmentReader::open(&base, probing).unwrap();
    assert!(!reader.is_direct() || reader.probes_page_cache());
    let slot_size = geometry.slot_size();
    let ids: Vec<u32> = (0..300).rev().collect();
    let mut out = vec![0u8; ids.len() * slot_size];
    let bytes = reader
        .read_vector_slots(&map, &geometry, &ids, &mut out)
        .unwrap();
    assert_eq!(bytes, (ids.len() * slot_size) as u64, "no sector padding");
    let pieces: usize = ids.iter().map(|&v| geometry.pieces(v).count()).sum();
    assert_eq!(reader.stats().reads, pieces as u64, "one read per piece");
    assert!(pieces > ids.len(), "some 784-d slots straddle two pages");
    for (&v, raw) in ids.iter().zip(out.chunks_exact(slot_size)) {
        let slot = geometry.layout().parse_slot(raw).unwrap();
        assert!(slot.is_owned_by(v));
        let mut back = vec![0f32; 784];
        slot.copy_vector_into(&mut back);
        assert_eq!(back, vectors[v as usize], "slot {v}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
