use super::*;
use crate::storage::{HeapTid, VectorLayout};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::io::Write;

struct Files {
    _dir: tempfile::TempDir,
    edges: std::path::PathBuf,
    vectors: std::path::PathBuf,
    edge_bytes: Vec<u8>,
    vector_bytes: Vec<u8>,
    layout: VectorLayout,
    slots: u32,
}

/// Random edge file of `pages` pages and a vector file with `slots` slots of `dim`.
fn files(pages: usize, dim: usize, slots: u32) -> Files {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let edge_bytes: Vec<u8> = (0..pages * PAGE_SIZE).map(|_| rng.gen()).collect();
    let edges = dir.path().join("edges.dat");
    std::fs::write(&edges, &edge_bytes).unwrap();
    let layout = VectorLayout::new(dim).unwrap();
    let mut vector_bytes = layout.encode_header();
    let mut slot = vec![0u8; layout.slot_size()];
    for s in 0..slots {
        let v: Vec<f32> = (0..dim).map(|_| rng.gen()).collect();
        layout
            .encode_slot(
                &mut slot,
                &v,
                s,
                HeapTid {
                    block: s,
                    offset: 1,
                },
            )
            .unwrap();
        vector_bytes.extend_from_slice(&slot);
    }
    vector_bytes.resize(layout.file_len(slots) as usize, 0);
    let vectors = dir.path().join("vectors.dat");
    std::fs::File::create(&vectors)
        .unwrap()
        .write_all(&vector_bytes)
        .unwrap();
    Files {
        _dir: dir,
        edges,
        vectors,
        edge_bytes,
        vector_bytes,
        layout,
        slots,
    }
}

fn reader(f: &Files, backend: BackendChoice, direct: bool, queue_depth: u32) -> PageReader {
    let options = IoOptions {
        queue_depth,
        backend,
        direct,
        probe_page_cache: false,
    };
    PageReader::open_with(&f.edges, &f.vectors, f.layout, options).unwrap()
}

fn all_configurations(f: &Files, queue_depth: u32) -> Vec<PageReader> {
    let mut readers = Vec::new();
    for backend in [BackendChoice::Auto, BackendChoice::Pread] {
        for direct in [true, false] {
            readers.push(reader(f, backend, direct, queue_depth));
        }
    }
    readers
}

#[test]
fn backend_is_chosen_and_reported() {
    let f = files(2, 4, 3);
    let forced = reader(&f, BackendChoice::Pread, true, 8);
    assert!(forced.backend_name().starts_with("pread+"));
    let auto = reader(&f, BackendChoice::Auto, true, 8);
    let ring_works = IoUring::new(8).is_ok();
    assert_eq!(
        auto.backend_name().starts_with("io_uring+"),
        ring_works,
        "{}",
        auto.backend_name()
    );
    eprintln!("auto backend: {}", auto.backend_name());
    assert!(reader(&f, BackendChoice::Auto, false, 8)
        .backend_name()
        .ends_with("+buffered"));
}

#[test]
fn environment_parsing() {
    let o = IoOptions::from_values(16, Some("pread"), None).unwrap();
    assert_eq!(
        (o.backend, o.direct, o.queue_depth),
        (BackendChoice::Pread, true, 16)
    );
    let o = IoOptions::from_values(16, None, Some("0")).unwrap();
    assert_eq!((o.backend, o.direct), (BackendChoice::Auto, false));
    assert!(IoOptions::from_values(16, Some("aio"), None).is_err());
}

#[test]
fn edge_pages_match_file_bytes_on_every_backend() {
    let f = files(40, 4, 1);
    // More pages than the queue depth, out of order, with a repeat.
    let pages: Vec<u32> = vec![39, 0, 17, 17, 5, 22, 1, 38, 9, 10, 11];
    for mut r in all_configurations(&f, 4) {
        let mut out = AlignedPage::vec(pages.len());
        r.read_edge_pages(&pages, &mut out).unwrap();
        for (&p, buf) in pages.iter().zip(&out) {
            let want = &f.edge_bytes[p as usize * PAGE_SIZE..(p as usize + 1) * PAGE_SIZE];
            assert!(buf.0 == *want, "{}: page {p}", r.backend_name());
        }
        let stats = r.stats();
        assert_eq!(stats.reads, pages.len() as u64);
        assert_eq!(stats.bytes, (pages.len() * PAGE_SIZE) as u64);
        let expected_submits = if r.backend_name().starts_with("io_uring") {
            pages.len().div_ceil(4) as u64
        } else {
            pages.len() as u64
        };
        assert_eq!(stats.submits, expected_submits, "{}", r.backend_name());
    }
}

#[test]
fn unaligned_byte_buffers_work() {
    let f = files(8, 4, 1);
    let pages = [3u32, 7, 0];
    for mut r in all_configurations(&f, 2) {
        let mut backing = vec![0u8; pages.len() * PAGE_SIZE + 1];
        let out = &mut backing[1..];
        r.read_edge_pages_into(&pages, out).unwrap();
        for (i, &p) in pages.iter().enumerate() {
            let want = &f.edge_bytes[p as usize * PAGE_SIZE..(p as usize + 1) * PAGE_SIZE];
            assert!(
                out[i * PAGE_SIZE..(i + 1) * PAGE_SIZE] == *want,
                "{}",
                r.backend_name()
            );
        }
    }
}

#[test]
fn vector_slots_match_file_bytes_including_straddling_ones() {
    // 100-d slots are 412 bytes: many straddle a 4 KiB boundary, and the last slot ends
    // inside the final, zero-padded sector.
    let f = files(1, 100, 200);
    let size = f.layout.slot_size();
    let slots: Vec<u32> = vec![0, 9, 10, 199, 57, 58, 120, 9, 1, 2, 3, 4, 5];
    for mut r in all_configurations(&f, 4) {
        let mut out = vec![0u8; slots.len() * size];
        let bytes = r.read_vectors(&slots, &mut out).unwrap();
        for (i, &s) in slots.iter().enumerate() {
            let at = f.layout.slot_offset(s) as usize;
            assert!(
                out[i * size..(i + 1) * size] == f.vector_bytes[at..at + size],
                "{} slot {s}",
                r.backend_name()
            );
            let parsed = f.layout.parse_slot(&out[i * size..(i + 1) * size]).unwrap();
            assert!(parsed.is_owned_by(s));
        }
        let expected: u64 = if r.backend_name().ends_with("O_DIRECT") {
            slots
                .iter()
                .map(|&s| SectorRange::covering(f.layout.slot_offset(s), size).len as u64)
                .sum()
        } else {
            (slots.len() * size) as u64
        };
        assert_eq!(bytes, expected, "{}", r.backend_name());
        assert_eq!(r.stats().reads, slots.len() as u64);
    }
    assert_eq!(f.slots, 200);
}

#[test]
fn vector_runs_match_file_bytes() {
    // 200 slots of 412 bytes span more than one run request (64 KiB).
    let f = files(1, 100, 200);
    let size = f.layout.slot_size();
    for mut r in all_configurations(&f, 4) {
        for (first, count) in [(0u32, 200usize), (3, 1), (150, 50), (9, 2), (7, 0)] {
            let mut out = vec![0u8; count * size];
            let bytes = r.read_vector_run(first, count, &mut out).unwrap();
            let at = f.layout.slot_offset(first) as usize;
            assert!(
                out == f.vector_bytes[at..at + count * size],
                "{} run {first}+{count}",
                r.backend_name()
            );
            let expected = if count == 0 {
                0
            } else if r.backend_name().ends_with("O_DIRECT") {
                SectorRange::covering(at as u64, count * size).len as u64
            } else {
                (count * size) as u64
            };
            assert_eq!(bytes, expected, "{} run {first}+{count}", r.backend_name());
        }
        assert!(r.read_vector_run(0, 2, &mut [0u8; 10]).is_err());
    }
}

#[test]
fn reads_past_the_end_fail_cleanly() {
    let f = files(3, 8, 5);
    for mut r in all_configurations(&f, 4) {
        let mut out = AlignedPage::vec(2);
        let err = r.read_edge_pages(&[1, 3], &mut out).unwrap_err();
        assert_eq!(
            err.kind(),
            io::ErrorKind::UnexpectedEof,
            "{}",
            r.backend_name()
        );
        let mut slot = vec![0u8; f.layout.slot_size()];
        let err = r.read_vectors(&[5000], &mut slot).unwrap_err();
        assert_eq!(
            err.kind(),
            io::ErrorKind::UnexpectedEof,
            "{}",
            r.backend_name()
        );
        // The reader stays usable after an error.
        r.read_edge_pages(&[2], &mut out).unwrap();
        assert!(out[0].0[..] == f.edge_bytes[2 * PAGE_SIZE..3 * PAGE_SIZE]);
        assert!(r.read_edge_pages(&[0, 1], &mut out[..1]).is_err());
    }
}

#[test]
fn reads_a_written_index_through_its_files() {
    use crate::placement::identity_placement;
    use crate::storage::{BuildInput, BuildParams, IndexFiles, IndexWriter};
    let dir = tempfile::tempdir().unwrap();
    let (n, dim) = (64usize, 6usize);
    let adjacency: Vec<Vec<u32>> = (0..n as u32)
        .map(|v| vec![(v + 1) % n as u32, (v + 7) % n as u32])
        .collect();
    let vectors: Vec<f32> = (0..n * dim).map(|i| i as f32).collect();
    let tids: Vec<HeapTid> = (0..n as u32)
        .map(|i| HeapTid {
            block: i,
            offset: 2,
        })
        .collect();
    let placement = identity_placement(n, 10).unwrap();
    let input = BuildInput {
        metric: crate::Metric::L2,
        dim,
        max_degree: 96,
        vectors: &vectors,
        heap_tids: &tids,
        adjacency: &adjacency,
        placement: &placement,
        pq_bytes: 2,
        pq_codebook: &[],
        pq_codes: &vec![0; n * 2],
        entrance: &[],
        params: BuildParams {
            build_list: 10,
            alpha: 1.2,
            entrance_ratio: 0.01,
            entrance_degree: 32,
        },
    };
    IndexWriter::create(dir.path(), &input).unwrap();
    let files = IndexFiles::open(dir.path()).unwrap();
    let mut r = PageReader::for_index(&files, 4).unwrap();
    let pages: Vec<u32> = (0..files.manifest().edge_pages).collect();
    let mut out = AlignedPage::vec(pages.len());
    r.read_edge_pages(&pages, &mut out).unwrap();
    let layout = files.edge_layout();
    for v in 0..n as u32 {
        let e = files.indirection().entry(v).unwrap();
        let page = &out[e.edge.page as usize].0;
        layout
            .verify(&files.edge_path(), page, e.edge.page)
            .unwrap();
        assert_eq!(
            layout
                .slot_owned_by(page, e.edge.slot as usize, v)
                .unwrap()
                .to_vec(),
            adjacency[v as usize]
        );
    }
    let slots: Vec<u32> = (0..n as u32).rev().collect();
    let size = files.vector_layout().slot_size();
    let mut bytes = vec![0u8; n * size];
    r.read_vectors(&slots, &mut bytes).unwrap();
    for (i, &s) in slots.iter().enumerate() {
        let slot = files
            .vector_layout()
            .parse_slot(&bytes[i * size..(i + 1) * size])
            .unwrap();
        assert_eq!(
            slot.vector(),
            &vectors[s as usize * dim..(s as usize + 1) * dim]
        );
        assert_eq!(slot.tid(), tids[s as usize]);
    }
}

#[test]
fn sector_ranges() {
    let r = SectorRange::covering(4096 + 4000, 200);
    assert_eq!((r.start, r.len, r.skip), (4096, 8192, 4000));
    let r = SectorRange::covering(8192, 4096);
    assert_eq!((r.start, r.len, r.skip), (8192, 4096, 0));
}
