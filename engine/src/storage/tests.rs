//! End-to-end tests of the side files: write a whole index, reopen it, damage it.

use super::*;
use crate::placement::{greedy_placement, identity_placement, Placement};
use crate::{Metric, VertexId};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::Path;

struct Fixture {
    dim: usize,
    max_degree: usize,
    pq_bytes: usize,
    vectors: Vec<f32>,
    tids: Vec<HeapTid>,
    adjacency: Vec<Vec<VertexId>>,
    placement: Placement,
    codes: Vec<u8>,
    codebook: Vec<u8>,
    entrance: Vec<u8>,
}

fn fixture(n: usize, dim: usize, max_degree: usize, seed: u64) -> Fixture {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let pq_bytes = 4;
    let adjacency: Vec<Vec<VertexId>> = (0..n)
        .map(|_| {
            let degree = rng.gen_range(0..=max_degree);
            (0..degree).map(|_| rng.gen_range(0..n as u32)).collect()
        })
        .collect();
    let spp = EdgePageLayout::new(max_degree).unwrap().slots_per_page();
    Fixture {
        dim,
        max_degree,
        pq_bytes,
        vectors: (0..n * dim).map(|_| rng.gen_range(-1.0..1.0)).collect(),
        tids: (0..n)
            .map(|i| HeapTid {
                block: i as u32 / 7,
                offset: (i % 7) as u16 + 1,
            })
            .collect(),
        placement: greedy_placement(&adjacency, spp).unwrap(),
        adjacency,
        codes: (0..n * pq_bytes).map(|_| rng.gen()).collect(),
        codebook: (0..1000).map(|i| (i % 251) as u8).collect(),
        entrance: b"entrance graph bytes".to_vec(),
    }
}

fn input(f: &Fixture) -> BuildInput<'_> {
    BuildInput {
        metric: Metric::L2,
        dim: f.dim,
        max_degree: f.max_degree,
        vectors: &f.vectors,
        heap_tids: &f.tids,
        adjacency: &f.adjacency,
        placement: &f.placement,
        pq_bytes: f.pq_bytes,
        pq_codebook: &f.codebook,
        pq_codes: &f.codes,
        entrance: &f.entrance,
        params: BuildParams {
            build_list: 64,
            alpha: 1.2,
            entrance_ratio: 0.01,
            entrance_degree: 32,
        },
    }
}

/// Reads every vertex back through the indirection table and compares with the fixture.
fn assert_index_matches(files: &IndexFiles, f: &Fixture) {
    let n = f.tids.len();
    let layout = files.edge_layout();
    let vlayout = files.vector_layout();
    let mut page = vec![0u8; PAGE_SIZE];
    let mut slot = vec![0u8; vlayout.slot_size()];
    for v in 0..n as VertexId {
        let entry = files.indirection().entry(v).expect("published");
        assert!(entry.is_live() && !entry.is_deleted());
        files.read_edge_page(entry.edge.page, &mut page).unwrap();
        let list = layout
            .slot_owned_by(&page, entry.edge.slot as usize, v)
            .expect("slot owned by its vertex");
        assert_eq!(list.to_vec(), f.adjacency[v as usize], "vertex {v}");
        files.read_vector_slot(v, &mut slot).unwrap();
        let parsed = vlayout.parse_slot(&slot).unwrap();
        assert!(parsed.is_owned_by(v));
        assert_eq!(parsed.tid(), f.tids[v as usize]);
        assert_eq!(
            parsed.vector(),
            &f.vectors[v as usize * f.dim..(v as usize + 1) * f.dim]
        );
        let code = &f.codes[v as usize * f.pq_bytes..(v as usize + 1) * f.pq_bytes];
        assert_eq!(files.pq_code(v).unwrap(), code);
    }
    assert_eq!(files.indirection().entry(n as VertexId), None);
    assert_eq!(files.pq_codebook(), &f.codebook[..]);
    assert_eq!(files.read_entrance().unwrap(), f.entrance);
}

#[test]
fn build_and_reopen_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("idx");
    let f = fixture(1500, 24, 96, 1);
    let written = IndexWriter::create(&dir, &input(&f)).unwrap();
    assert_eq!(written.slots_per_page, 10);
    assert_eq!(written.edge_pages, 150);
    let files = IndexFiles::open(&dir).unwrap();
    assert_eq!(files.manifest(), &written);
    assert_eq!(
        std::fs::metadata(dir.join(names::EDGES)).unwrap().len(),
        150 * 4096
    );
    let vector_len = std::fs::metadata(dir.join(names::VECTORS)).unwrap().len();
    assert_eq!(vector_len % 4096, 0);
    assert_eq!(vector_len, files.vector_layout().file_len(1500));
    assert_index_matches(&files, &f);
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn empty_index_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let f = Fixture {
        placement: identity_placement(0, 10).unwrap(),
        ..fixture(0, 3, 96, 2)
    };
    IndexWriter::create(tmp.path(), &input(&f)).unwrap();
    let files = IndexFiles::open(tmp.path()).unwrap();
    assert_eq!(files.manifest().vertex_count, 0);
    assert_eq!(files.state().get(crate::storage::Field::NextVertex), 0);
    assert_eq!(files.indirection().entry(0), None);
}

#[test]
fn corrupted_page_is_reported_on_read() {
    let tmp = tempfile::tempdir().unwrap();
    let f = fixture(200, 8, 32, 3);
    IndexWriter::create(tmp.path(), &input(&f)).unwrap();
    let path = tmp.path().join(names::EDGES);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[3 * PAGE_SIZE + 100] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    let files = IndexFiles::open(tmp.path()).unwrap();
    let mut page = vec![0u8; PAGE_SIZE];
    files.read_edge_page(2, &mut page).unwrap();
    let err = files.read_edge_page(3, &mut page).unwrap_err().to_string();
    assert!(
        err.contains("edge page 3") && err.contains("checksum"),
        "{err}"
    );
}

fn damaged_open_error(damage: impl FnOnce(&Path)) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let f = fixture(300, 8, 16, 4);
    IndexWriter::create(tmp.path(), &input(&f)).unwrap();
    damage(tmp.path());
    match IndexFiles::open(tmp.path()) {
        Ok(_) => panic!("damaged index opened"),
        Err(e) => e.to_string(),
    }
}

fn truncate(path: &Path, by: u64) {
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let len = file.metadata().unwrap().len();
    file.set_len(len - by).unwrap();
}

#[test]
fn truncated_files_are_rejected_at_open() {
    let err = damaged_open_error(|d| truncate(&d.join(names::EDGES), PAGE_SIZE as u64));
    assert!(
        err.contains("edges.dat") && err.contains("whole pages"),
        "{err}"
    );
    let err = damaged_open_error(|d| truncate(&d.join(names::VECTORS), 8192));
    assert!(
        err.contains("vectors.dat") && err.contains("truncated"),
        "{err}"
    );
    let err = damaged_open_error(|d| truncate(&d.join(names::PQ_CODES), 1));
    assert!(
        err.contains("pq_codes.dat") && err.contains("truncated"),
        "{err}"
    );
    let err = damaged_open_error(|d| truncate(&d.join(names::INDIRECTION), 1));
    assert!(
        err.contains("indirection.dat") && err.contains("truncated"),
        "{err}"
    );
    let err = damaged_open_error(|d| truncate(&d.join(names::ENTRANCE), 1));
    assert!(
        err.contains("entrance.bin") && err.contains("truncated"),
        "{err}"
    );
    let err = damaged_open_error(|d| std::fs::remove_file(d.join(names::MANIFEST)).unwrap());
    assert!(err.contains("manifest"), "{err}");
}

#[test]
fn wrong_version_asks_for_reindex() {
    let err = damaged_open_error(|d| {
        let path = d.join(names::MANIFEST);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("format_version=2", "format_version=0")).unwrap();
    });
    assert!(
        err.starts_with("index format version 0, this build reads 2: REINDEX"),
        "{err}"
    );
}

#[test]
fn medoid_is_recorded_and_must_be_a_vertex() {
    let tmp = tempfile::tempdir().unwrap();
    let f = fixture(50, 4, 8, 6);
    let dir = tmp.path().join("bad");
    let err = IndexWriter::create_with_medoid(&dir, &input(&f), 50)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("medoid 50 is not one of the 50 vertices"),
        "{err}"
    );
    assert!(!dir.exists());
    let dir = tmp.path().join("good");
    let written = IndexWriter::create_with_medoid(&dir, &input(&f), 49).unwrap();
    assert_eq!(written.medoid, 49);
    assert_eq!(IndexFiles::open(&dir).unwrap().manifest().medoid, 49);
}

#[test]
fn invalid_input_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("idx");
    let mut f = fixture(50, 4, 8, 5);
    f.adjacency[7] = vec![1, 2, 50];
    let err = IndexWriter::create(&dir, &input(&f))
        .unwrap_err()
        .to_string();
    assert!(err.contains("vertex 7 has neighbour 50"), "{err}");
    assert!(!dir.exists());
    let mut f = fixture(50, 4, 8, 5);
    f.codes.pop();
    assert!(IndexWriter::create(&dir, &input(&f)).is_err());
    let mut f = fixture(50, 4, 8, 5);
    f.placement.slot_of[3] = f.placement.slot_of[4];
    f.placement.page_of[3] = f.placement.page_of[4];
    let err = IndexWriter::create(&dir, &input(&f))
        .unwrap_err()
        .to_string();
    assert!(err.contains("invalid placement"), "{err}");
    assert!(!dir.exists());
}

#[test]
fn failed_write_removes_partial_files() {
    let tmp = tempfile::tempdir().unwrap();
    // A directory squatting on a temporary name makes the PQ codes write fail after the
    // edge, vector and indirection files have been written.
    std::fs::create_dir(tmp.path().join(format!("{}.tmp", names::PQ_CODES))).unwrap();
    let f = fixture(100, 4, 8, 6);
    assert!(IndexWriter::create(tmp.path(), &input(&f)).is_err());
    let remaining: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(remaining, vec![format!("{}.tmp", names::PQ_CODES)]);
}

#[test]
fn refuses_to_overwrite_an_index() {
    let tmp = tempfile::tempdir().unwrap();
    let f = fixture(100, 4, 8, 7);
    IndexWriter::create(tmp.path(), &input(&f)).unwrap();
    let err = IndexWriter::create(tmp.path(), &input(&f))
        .unwrap_err()
        .to_string();
    assert!(err.contains("already holds index file"), "{err}");
    // The failed second build must not have removed the first index.
    assert_index_matches(&IndexFiles::open(tmp.path()).unwrap(), &f);
}

#[test]
fn in_place_primitives_and_owner_stamps() {
    let tmp = tempfile::tempdir().unwrap();
    let n = 120;
    let f = fixture(n, 4, 8, 8);
    let manifest = IndexWriter::create(tmp.path(), &input(&f)).unwrap();
    let files = IndexFiles::open(tmp.path()).unwrap();
    let writer = SideFileWriter::new(&files).unwrap();
    let layout = files.edge_layout();

    // A reader resolved vertex 5 before the move.
    let before = files.indirection().entry(5).unwrap();

    // Insert vertex n and move vertex 5's list onto a fresh page, out of place.
    let new_page = manifest.edge_pages;
    let mut page = vec![0u8; PAGE_SIZE];
    layout.init_page(&mut page, new_page);
    layout
        .put_slot(&mut page, 0, n as VertexId, &[5, 6])
        .unwrap();
    layout.put_slot(&mut page, 1, 5, &[n as VertexId]).unwrap();
    layout.seal(&mut page);
    writer.write_edge_page(new_page, &page).unwrap();
    let v_new = vec![0.5, -0.5, 1.5, 2.0];
    let tid = HeapTid {
        block: 99,
        offset: 3,
    };
    writer
        .write_vector_slot(n as u32, n as VertexId, &v_new, tid)
        .unwrap();
    writer
        .publish(
            n as VertexId,
            IndirEntry {
                edge: EdgeLocation {
                    page: new_page,
                    slot: 0,
                },
                tid,
                flags: FLAG_LIVE,
            },
        )
        .unwrap();
    files
        .indirection()
        .relocate_edges(
            5,
            EdgeLocation {
                page: new_page,
                slot: 1,
            },
        )
        .unwrap();

    // Free vertex 5's old slot and hand it to vertex n.
    files.read_edge_page(before.edge.page, &mut page).unwrap();
    layout
        .put_slot(&mut page, before.edge.slot as usize, n as VertexId, &[1])
        .unwrap();
    layout.seal(&mut page);
    writer.write_edge_page(before.edge.page, &page).unwrap();
    writer.sync().unwrap();

    // The stale reader detects that its slot changed owner.
    files.read_edge_page(before.edge.page, &mut page).unwrap();
    assert!(layout
        .slot_owned_by(&page, before.edge.slot as usize, 5)
        .is_none());

    // A malformed page is refused before it reaches the disk.
    page[200] ^= 1;
    assert!(writer.write_edge_page(before.edge.page, &page).is_err());
    drop(writer);
    drop(files);

    // Everything is visible after reopening.
    let files = IndexFiles::open(tmp.path()).unwrap();
    let entry = files.indirection().entry(5).unwrap();
    assert_eq!(
        entry.edge,
        EdgeLocation {
            page: new_page,
            slot: 1
        }
    );
    files.read_edge_page(new_page, &mut page).unwrap();
    assert_eq!(
        layout.slot_owned_by(&page, 1, 5).unwrap().to_vec(),
        vec![n as VertexId]
    );
    let new_entry = files.indirection().entry(n as VertexId).unwrap();
    assert_eq!(new_entry.tid, tid);
    let mut slot = vec![0u8; files.vector_layout().slot_size()];
    files.read_vector_slot(n as u32, &mut slot).unwrap();
    let parsed = files.vector_layout().parse_slot(&slot).unwrap();
    assert_eq!(
        (parsed.vector(), parsed.tid(), parsed.owner()),
        (v_new, tid, n as u32)
    );
    assert_eq!(
        std::fs::metadata(files.vector_path()).unwrap().len() % 4096,
        0
    );
}
