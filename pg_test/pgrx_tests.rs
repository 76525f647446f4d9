// PostgreSQL-facing tests run by `cargo pgrx test` inside a real PostgreSQL 15 server
// (started by pgrx as the unprivileged user `postgres`, with navis preloaded). Included from
// src/lib.rs because pgrx needs #[pg_test] functions inside the extension crate.
// SQL-level behaviour with exact expected output (errors, operators) lives in
// pg_test/sql/*.sql and pg_test/expected/*.out and runs through pg_test/run_sql_tests.sh.

use pgrx::prelude::*;

fn one_f64(sql: &str) -> f64 {
    Spi::get_one::<f64>(sql).expect("query failed").expect("NULL result")
}

#[pg_test]
fn operators_match_known_values() {
    assert_eq!(one_f64("SELECT ARRAY[1,2,3]::real[] <-> ARRAY[4,6,8]::real[]"), 50f64.sqrt());
    assert_eq!(one_f64("SELECT ARRAY[1,2,3]::real[] <#> ARRAY[4,6,8]::real[]"), -40.0);
    assert_eq!(one_f64("SELECT inner_product(ARRAY[1,2,3]::real[], ARRAY[4,6,8]::real[])"), 40.0);
    let cos = 1.0 - 40.0 / (14.0f64 * 116.0).sqrt();
    assert!((one_f64("SELECT ARRAY[1,2,3]::real[] <=> ARRAY[4,6,8]::real[]") - cos).abs() < 1e-7);
}

#[pg_test]
fn operators_match_a_scalar_reference_on_random_data() {
    // 200 random pairs of 1..300 dimensions, computed by the SQL operators and by a plain
    // f64 loop over the same values.
    Spi::run(
        "CREATE TEMP TABLE pairs AS
         SELECT i, a, b FROM (
           SELECT i, d,
                  (SELECT array_agg((random()*20-10)::real) FROM generate_series(1, d) WHERE i > -1) a,
                  (SELECT array_agg((random()*20-10)::real) FROM generate_series(1, d) WHERE i > -1) b
           FROM (SELECT i, 1 + (i * 37) % 300 AS d FROM generate_series(1, 200) i) s) t",
    )
    .unwrap();
    Spi::connect(|client| {
        let rows = client
            .select("SELECT a, b, a <-> b, a <#> b, a <=> b FROM pairs", None, &[])
            .unwrap();
        let mut checked = 0;
        for row in rows {
            let a: Vec<f32> = row.get::<Vec<f32>>(1).unwrap().unwrap();
            let b: Vec<f32> = row.get::<Vec<f32>>(2).unwrap().unwrap();
            let (l2, nip, cos) = (
                row.get::<f64>(3).unwrap().unwrap(),
                row.get::<f64>(4).unwrap().unwrap(),
                row.get::<f64>(5).unwrap().unwrap(),
            );
            let dot: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
            let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum();
            let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum();
            let l2_ref: f64 = a.iter().zip(&b).map(|(x, y)| (*x as f64 - *y as f64).powi(2)).sum::<f64>().sqrt();
            let cos_ref = 1.0 - (dot / (na * nb).sqrt()).clamp(-1.0, 1.0);
            assert!((l2 - l2_ref).abs() <= 1e-4 * l2_ref.max(1.0), "l2 {l2} vs {l2_ref}");
            assert!((nip + dot).abs() <= 1e-3 * dot.abs().max(1.0), "ip {nip} vs {}", -dot);
            assert!((cos - cos_ref).abs() <= 1e-5, "cos {cos} vs {cos_ref}");
            checked += 1;
        }
        assert_eq!(checked, 200);
    });
}

#[pg_test]
fn order_by_distance_without_an_index() {
    Spi::run("CREATE TABLE items (id int, v real[])").unwrap();
    Spi::run("INSERT INTO items VALUES (1, '{0,0}'), (2, '{3,4}'), (3, '{1,1}'), (4, NULL)").unwrap();
    let ids = Spi::get_one::<Vec<i32>>(
        "SELECT array_agg(id ORDER BY v <-> '{0,0}', id) FROM items WHERE v IS NOT NULL",
    );
    assert_eq!(ids, Ok(Some(vec![1, 3, 2])));
}

#[pg_test]
fn access_method_and_opclasses_are_registered() {
    let n = Spi::get_one::<i64>("SELECT count(*) FROM pg_am WHERE amname = 'navis' AND amtype = 'i'");
    assert_eq!(n, Ok(Some(1)));
    let classes = Spi::get_one::<String>(
        "SELECT string_agg(opcname || ':' || opcdefault, ',' ORDER BY opcname)
         FROM pg_opclass WHERE opcmethod = (SELECT oid FROM pg_am WHERE amname = 'navis')",
    );
    assert_eq!(
        classes,
        Ok(Some(
            "navis_cosine_ops:false,navis_ip_ops:false,navis_l1_ops:false,navis_l2_ops:true".into()
        ))
    );
    // amvalidate accepts every navis opclass
    let valid = Spi::get_one::<bool>(
        "SELECT bool_and(amvalidate(oid)) FROM pg_opclass
         WHERE opcmethod = (SELECT oid FROM pg_am WHERE amname = 'navis')",
    );
    assert_eq!(valid, Ok(Some(true)));
}

#[pg_test]
fn shared_memory_is_ready_when_preloaded() {
    let row = Spi::get_two::<bool, i32>("SELECT preloaded, vertex_lock_stripes FROM navis_shared_memory()");
    assert_eq!(row, Ok((Some(true), Some(crate::shmem::VERTEX_LOCK_STRIPES as i32))));
    // the engine's writer locks are LWLocks: a vertex stripe and an allocator lock can be
    // taken and released through the WriteLocks trait
    use navis_engine::update::WriteLocks;
    let shared = crate::shmem::require("test");
    let locks = crate::shmem::PgLocks::new(shared, 42);
    let stripe = locks.stripe_of(12345);
    locks.lock_stripe(stripe);
    locks.lock_allocator();
    // SAFETY: the locks live in shared memory for the server's lifetime.
    unsafe {
        assert!(pg_sys::LWLockHeldByMe(shared.stripe_lock(stripe)));
        assert!(pg_sys::LWLockHeldByMe(shared.allocator_lock(42)));
    }
    locks.unlock_allocator();
    locks.unlock_stripe(stripe);
    // SAFETY: as above.
    unsafe {
        assert!(!pg_sys::LWLockHeldByMe(shared.stripe_lock(stripe)));
        assert!(!pg_sys::LWLockHeldByMe(shared.allocator_lock(42)));
    }
}

#[pg_test]
fn gucs_have_their_documented_defaults() {
    for (name, value) in [
        ("navis.search_list", "40"),
        ("navis.insert_list", "64"),
        ("navis.beam_width", "0"),
        ("navis.entry_points", "10"),
        ("navis.rerank_top_k", "10"),
        ("navis.casr_percentile_search", "99"),
        ("navis.casr_percentile_insert", "90"),
        ("navis.casr_warmup", "1000"),
        ("navis.casr", "on"),
        ("navis.direct_io", "on"),
        ("navis.max_scan_tuples", "20000"),
        // NAVIS-Cache (postmaster settings, present because the test server preloads navis)
        ("navis.cache_size", "64MB"),
        ("navis.cache_policy", "navis"),
        ("navis.cache_frozen_eviction", "fifo"),
        ("navis.cache_search_promote_hits", "8"),
    ] {
        let got = Spi::get_one::<String>(&format!("SELECT current_setting('{name}')"));
        assert_eq!(got, Ok(Some(value.to_string())), "{name}");
    }
}

/// Clustered data (40 centres in 16 dimensions, seeded): the index's top-10 for 30 queries must
/// match an exact sequential scan at recall >= 0.95, in distance order; the index is all in its
/// relation (its size holds the vectors) and its runtime copy is under base/pgsql_tmp.
#[pg_test]
fn index_scan_matches_exact_search_from_the_relation() {
    // Seeded so the data (and the recall it gives) is the same on every run; within-cluster
    // spread large enough that neighbours are not near-ties PQ cannot order.
    Spi::run("SELECT setseed(0.42)").unwrap();
    Spi::run(
        "CREATE TABLE pts AS SELECT i AS id,
           (SELECT array_agg((c.x[(i % 40) * 16 + j] + (random() - 0.5) * 2.0)::real)
              FROM generate_series(1, 16) j) AS v
         FROM generate_series(1, 3000) i,
              (SELECT array_agg(random() * 10) AS x FROM generate_series(1, 41 * 16)) c",
    )
    .unwrap();
    Spi::run("CREATE INDEX pts_idx ON pts USING navis (v)").unwrap();
    let holds_vectors = Spi::get_one::<bool>(
        "SELECT pg_relation_size('pts_idx') > 3000 * 16 * 4 AND pg_relation_size('pts_idx') = relation_bytes
           AND runtime_directory LIKE 'base/pgsql_tmp/pgsql_tmp_navis/%'
         FROM navis_index_stats('pts_idx')",
    )
    .unwrap();
    assert_eq!(holds_vectors, Some(true));
    let vertices = Spi::get_one::<i64>("SELECT vertices FROM navis_index_stats('pts_idx')").unwrap();
    assert_eq!(vertices, Some(3000));
    let knn = |exact: bool| -> Vec<(i32, i32)> {
        Spi::run(if exact { "SET enable_indexscan = off" } else { "SET enable_seqscan = off" }).unwrap();
        Spi::run(if exact { "SET enable_seqscan = on" } else { "SET enable_indexscan = on" }).unwrap();
        // EXPLAIN returns one row per plan line; keep them all.
        let plan = Spi::connect(|c| {
            c.select(
                "EXPLAIN (COSTS OFF) SELECT id FROM pts ORDER BY v <-> (SELECT v FROM pts WHERE id = 1) LIMIT 10",
                None,
                &[],
            )
            .unwrap()
            .map(|r| r.get::<String>(1).unwrap().unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n")
        });
        let rows = Spi::connect(|c| {
            c.select(
                "SELECT q.id, n.id FROM pts q CROSS JOIN LATERAL
                   (SELECT p.id FROM pts p ORDER BY p.v <-> q.v LIMIT 10) n WHERE q.id <= 30",
                None,
                &[],
            )
            .unwrap()
            .map(|r| (r.get::<i32>(1).unwrap().unwrap(), r.get::<i32>(2).unwrap().unwrap()))
            .collect::<Vec<_>>()
        });
        // The comparison is only meaningful if each side really used its access path.
        if exact {
            assert!(!plan.contains("pts_idx"), "exact side used the index: {plan}");
        } else {
            assert!(plan.contains("Index Scan using pts_idx"), "index not used: {plan}");
        }
        rows
    };
    let exact = knn(true);
    let approx = knn(false);
    assert_eq!(exact.len(), 300);
    assert_eq!(approx.len(), 300);
    let hits = approx.iter().filter(|p| exact.contains(p)).count();
    assert!(hits as f64 / 300.0 >= 0.95, "recall@10 {}", hits as f64 / 300.0);
    let ordered = Spi::get_one::<bool>(
        "SELECT bool_and(d >= prev) FROM (SELECT d, lag(d, 1, 0::float8) OVER (ORDER BY rn) prev FROM
           (SELECT v <-> (SELECT v FROM pts WHERE id = 7) d, row_number() OVER () rn FROM
             (SELECT v FROM pts ORDER BY v <-> (SELECT v FROM pts WHERE id = 7) LIMIT 200) s) t) u",
    )
    .unwrap();
    assert_eq!(ordered, Some(true));
}

/// RFC 0001 §5: bulk pages go into the index's own fork around the buffer manager, each in a
/// BULK_IMAGES record with one full-image block reference per page, stamped with that
/// record's LSN and a valid checksum, and an O_DIRECT read of the segment file returns them.
#[pg_test]
fn bulk_pages_are_logged_and_read_back_with_o_direct() {
    use crate::relstore::{self, BLOCK_SIZE};
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    Spi::run("CREATE EXTENSION IF NOT EXISTS pg_walinspect").unwrap();
    Spi::run("CREATE TABLE bp (v real[])").unwrap();
    Spi::run("INSERT INTO bp SELECT ARRAY[i, i % 7, i % 13]::real[] FROM generate_series(1, 300) i").unwrap();
    Spi::run("CREATE INDEX bp_v ON bp USING navis (v)").unwrap();
    let start_lsn = Spi::get_one::<String>("SELECT pg_current_wal_insert_lsn()::text").unwrap().unwrap();
    let oid = Spi::get_one::<pg_sys::Oid>("SELECT 'bp_v'::regclass::oid").unwrap().unwrap();

    const PAGES: usize = 40;
    const USED: usize = 1000; // payload bytes per page; the rest is the hole the images omit
    let mut pages = vec![0u8; PAGES * BLOCK_SIZE];
    for (i, page) in pages.chunks_mut(BLOCK_SIZE).enumerate() {
        let special = (BLOCK_SIZE - 16) as u16;
        page[12..14].copy_from_slice(&(24 + USED as u16).to_le_bytes()); // pd_lower
        page[14..16].copy_from_slice(&special.to_le_bytes()); // pd_upper
        page[16..18].copy_from_slice(&special.to_le_bytes()); // pd_special
        page[18..20].copy_from_slice(&(BLOCK_SIZE as u16 | 4).to_le_bytes());
        for (j, b) in page[24..24 + USED].iter_mut().enumerate() {
            *b = (i * 31 + j) as u8;
        }
        page[special as usize..].copy_from_slice(&[0xAB; 16]);
    }
    // SAFETY: the index is opened and closed here with a lock that keeps it in place.
    let (before, first, after, path) = unsafe {
        let rel = pg_sys::index_open(oid, pg_sys::RowExclusiveLock as i32);
        let before = relstore::nblocks(rel);
        let first = relstore::append_bulk_pages(rel, &mut pages);
        let after = relstore::nblocks(rel);
        let path = relstore::segment_path(rel, 0);
        pg_sys::index_close(rel, pg_sys::RowExclusiveLock as i32);
        (before, first, after, path)
    };
    assert_eq!(first, before);
    assert_eq!(after, before + PAGES as u32);
    let size = Spi::get_one::<i64>("SELECT pg_relation_size('bp_v')").unwrap().unwrap();
    assert_eq!(size, after as i64 * BLOCK_SIZE as i64);

    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(pg_sys::PG_O_DIRECT as i32)
        .open(&path)
        .expect("open the segment with O_DIRECT");
    let mut block = relstore::AlignedBlock::zeroed();
    let start: u64 = {
        let s = start_lsn.split('/').map(|h| u64::from_str_radix(h, 16).unwrap()).collect::<Vec<_>>();
        (s[0] << 32) | s[1]
    };
    for i in 0..PAGES {
        let blkno = first + i as u32;
        let (segment, offset) = relstore::block_location(blkno);
        assert_eq!(segment, 0);
        let buf = block.bytes_mut();
        file.read_exact_at(buf, offset).expect("O_DIRECT read");
        assert_eq!(buf, &pages[i * BLOCK_SIZE..(i + 1) * BLOCK_SIZE], "block {blkno} on disk");
        let lsn = (u32::from_le_bytes(buf[0..4].try_into().unwrap()) as u64) << 32
            | u32::from_le_bytes(buf[4..8].try_into().unwrap()) as u64;
        assert!(lsn > start, "block {blkno} stamped with LSN {lsn:#x}, before the write at {start:#x}");
        assert_eq!(buf[24 + 5], (i * 31 + 5) as u8);
        // SAFETY: a BLCKSZ page buffer; verification only reads it.
        let ok = unsafe { pg_sys::PageIsVerifiedExtended(block.as_mut_ptr().cast(), blkno, 0) };
        assert!(ok, "block {blkno} fails PostgreSQL's page verification");
    }

    // pg_walinspect reads only flushed WAL, and this transaction has not committed. pgrx runs
    // tests in parallel, so the window holds other tests' records too: only this
    // transaction's count (the build assigned it an xid).
    flush_own_wal();
    let records: Vec<(String, String)> = Spi::connect(|c| {
        c.select(
            &format!(
                "SELECT record_type, description || ' | ' || block_ref FROM pg_get_wal_records_info('{start_lsn}', pg_current_wal_flush_lsn())
                 WHERE resource_manager = 'navis' AND record_type <> 'CHANGE' AND xid = pg_current_xact_id()::xid ORDER BY start_lsn"
            ),
            None,
            &[],
        )
        .unwrap()
        .map(|r| (r.get::<String>(1).unwrap().unwrap(), r.get::<String>(2).unwrap().unwrap()))
        .collect()
    });
    assert_eq!(records.len(), 2, "{records:?}");
    assert!(records.iter().all(|(t, _)| t == "BULK_IMAGES"), "{records:?}");
    assert!(records[0].1.starts_with(&format!("32 pages: blocks {}..{} | ", first, first + 31)), "{records:?}");
    assert!(records[1].1.starts_with(&format!("8 pages: blocks {}..{} | ", first + 32, first + 39)), "{records:?}");
    // Full images without the unused tail between pd_lower (24 + 1000) and the special space.
    let image = format!("fork main blk {first} (FPW); hole: offset: 1024, length: 7152");
    assert!(records[0].1.contains(&image), "{records:?}");
}

/// The engine's PageStore over a relation this transaction created: reserved blocks, writes
/// gathered into BULK_IMAGES records, gaps and unwritten reservations zero-filled with EXTEND
/// records, reads that bypass shared_buffers, refusals for unreserved blocks and for calls
/// from another thread.
#[pg_test]
fn page_store_writes_a_private_relation_through_wal() {
    use crate::pgstore::PgStore;
    use navis_engine::pages::{self, PageKind, BLOCK_SIZE};
    use navis_engine::store::PageStore;
    Spi::run("CREATE EXTENSION IF NOT EXISTS pg_walinspect").unwrap();
    Spi::run("CREATE TABLE scratch_store (x int)").unwrap();
    let start_lsn = Spi::get_one::<String>("SELECT pg_current_wal_insert_lsn()::text").unwrap().unwrap();
    let oid = Spi::get_one::<pg_sys::Oid>("SELECT 'scratch_store'::regclass::oid").unwrap().unwrap();
    let page = |kind: PageKind, block: u32| {
        let mut p = vec![0u8; BLOCK_SIZE];
        pages::init(&mut p, kind, block);
        p[100] = block as u8 ^ 0x5A;
        pages::seal(&mut p);
        p
    };
    // SAFETY: the relation is opened and closed here under a lock that keeps it in place.
    let rel = unsafe { pg_sys::table_open(oid, pg_sys::AccessExclusiveLock as i32) };
    let store = PgStore::for_new_relation(rel).unwrap();
    assert_eq!(store.extend(1).unwrap(), 0);
    assert_eq!(store.extend(10).unwrap(), 1);
    for b in 1..=7 {
        store.write_block(b, &page(PageKind::Edge, b)).unwrap();
    }
    store.write_block(0, &page(PageKind::Meta, 0)).unwrap();
    let far = store.write_block(20, &page(PageKind::Edge, 20)).unwrap_err().to_string();
    assert!(far.contains("never extended into"), "{far}");
    let off_thread = std::thread::scope(|s| s.spawn(|| store.nblocks().map(|_| ())).join().unwrap());
    assert!(off_thread.unwrap_err().to_string().contains("compute thread"));
    store.sync().unwrap();
    assert_eq!(store.nblocks().unwrap(), 11);
    assert_eq!(crate::relstore::nblocks(rel), 11);
    let mut buf = vec![0u8; BLOCK_SIZE];
    for b in 0..11u32 {
        store.read_block(b, &mut buf).unwrap();
        match b {
            0 => pages::verify(&buf, PageKind::Meta, 0).unwrap(),
            1..=7 => {
                pages::verify(&buf, PageKind::Edge, b).unwrap();
                assert_eq!(buf[100], b as u8 ^ 0x5A);
            }
            _ => assert!(pages::is_new(&buf), "block {b} should be a zero page"),
        }
    }
    // SAFETY: opened above.
    unsafe { pg_sys::table_close(rel, pg_sys::AccessExclusiveLock as i32) };
    flush_own_wal();
    let records: Vec<String> = Spi::connect(|c| {
        c.select(
            &format!(
                "SELECT record_type || ': ' || description FROM pg_get_wal_records_info('{start_lsn}', pg_current_wal_flush_lsn())
                 WHERE resource_manager = 'navis' AND record_type <> 'CHANGE' AND xid = pg_current_xact_id()::xid ORDER BY start_lsn"
            ),
            None,
            &[],
        )
        .unwrap()
        .map(|r| r.get::<String>(1).unwrap().unwrap())
        .collect()
    });
    let descs: Vec<String> = records
        .iter()
        .map(|r| r.split_once("; zero").map_or(r.clone(), |(_, tail)| format!("EXTEND: zero{tail}")))
        .collect();
    assert_eq!(
        descs,
        vec![
            "EXTEND: zero blocks 0..0".to_string(),
            "BULK_IMAGES: 7 pages: blocks 1..7".to_string(),
            "BULK_IMAGES: 1 page: block 0".to_string(),
            "EXTEND: zero blocks 8..10".to_string(),
        ],
        "{records:?}"
    );
}

/// Flushes the WAL this backend has written, so that pg_walinspect (which reads only flushed
/// WAL) sees this transaction's records before it commits. Not `GetXLogInsertRecPtr()`: when
/// the insert position sits on a WAL page boundary it names the byte after that page's header,
/// which no record has reached yet, and `XLogFlush` fails with "xlog flush request ... is not
/// satisfied" (seen once in a full test run). The end of this backend's last record is always
/// a position that was written.
fn flush_own_wal() {
    // SAFETY: XactLastRecEnd is this backend's own global, read on its only thread; flushing
    // up to the end of a record this backend inserted is always allowed (0 flushes nothing).
    unsafe { pg_sys::XLogFlush(pg_sys::XactLastRecEnd) };
}

/// The engine's relation build through PgStore inside a real server (RFC 0001 stage 2 on the
/// PostgreSQL side): every page lands in the fork as a BULK_IMAGES record, the image decodes
/// and cross-checks, the fork's size is its block count, and the build's WAL is about the
/// relation's size (images without their holes), which is what CREATE INDEX will write.
#[pg_test]
fn relation_build_through_pg_store_and_its_wal_volume() {
    use crate::pgstore::PgStore;
    use navis_engine::dataset::synthetic_clustered;
    use navis_engine::index::IndexParams;
    use navis_engine::pages::BLOCK_SIZE;
    use navis_engine::relation::{build_relation, RelationImage};
    use navis_engine::storage::HeapTid;
    use navis_engine::store::PageStore;
    Spi::run("CREATE EXTENSION IF NOT EXISTS pg_walinspect").unwrap();
    Spi::run("CREATE TABLE scratch_build (x int)").unwrap();
    let oid = Spi::get_one::<pg_sys::Oid>("SELECT 'scratch_build'::regclass::oid").unwrap().unwrap();
    let start_lsn = Spi::get_one::<String>("SELECT pg_current_wal_insert_lsn()::text").unwrap().unwrap();
    let (n, dim) = (3000usize, 32usize);
    let vectors = synthetic_clustered(n, dim, 16, 5);
    let tids: Vec<HeapTid> = (0..n as u32).map(|i| HeapTid { block: i / 40, offset: (i % 40 + 1) as u16 }).collect();
    let params = IndexParams {
        max_degree: 32,
        build_list: 64,
        pq_bytes: Some(8),
        threads: 2,
        ..IndexParams::default()
    };
    // SAFETY: opened and closed here under a lock that keeps the relation in place.
    let rel = unsafe { pg_sys::table_open(oid, pg_sys::AccessExclusiveLock as i32) };
    let store = PgStore::for_new_relation(rel).unwrap();
    let (_, meta) = build_relation(&store, &vectors, &tids, &params, 77, &|_, _, _| {}, &|| false).unwrap();
    let blocks = store.nblocks().unwrap();
    assert_eq!(crate::relstore::nblocks(rel), blocks);
    let image = RelationImage::read(&store).unwrap();
    assert_eq!(image.meta, meta);
    assert_eq!(image.len(), n);
    for v in (0..n).step_by(97) {
        assert_eq!(image.vector(v as u32), &vectors[v * dim..(v + 1) * dim]);
        assert_eq!(image.tid(v as u32), Some(tids[v]));
    }
    // SAFETY: opened above.
    unsafe { pg_sys::table_close(rel, pg_sys::AccessExclusiveLock as i32) };
    let size = Spi::get_one::<i64>("SELECT pg_relation_size('scratch_build')").unwrap().unwrap();
    assert_eq!(size, blocks as i64 * BLOCK_SIZE as i64);
    flush_own_wal();
    let (records, wal_bytes) = Spi::connect(|c| {
        let row = c
            .select(
                &format!(
                    "SELECT count(*)::int8, sum(record_length)::int8 FROM pg_get_wal_records_info('{start_lsn}', pg_current_wal_flush_lsn())
                     WHERE resource_manager = 'navis' AND record_type <> 'CHANGE' AND xid = pg_current_xact_id()::xid"
                ),
                None,
                &[],
            )
            .unwrap()
            .first();
        (row.get::<i64>(1).unwrap().unwrap(), row.get::<i64>(2).unwrap().unwrap())
    });
    let ratio = wal_bytes as f64 / size as f64;
    pgrx::notice!(
        "relation build: {n} x {dim}-d, {blocks} blocks ({size} bytes), {records} navis WAL records, {wal_bytes} WAL bytes = {ratio:.3} x the relation"
    );
    assert!(records as u32 >= blocks.div_ceil(32), "{records} records for {blocks} blocks");
    // Whole-page images without holes and unused run tails compress below the relation size;
    // record headers add a little. Anything far outside means pages went missing or twice.
    assert!((0.2..=1.05).contains(&ratio), "WAL {wal_bytes} bytes for a {size}-byte relation");
}

/// Rewrites the layout version on `index`'s metapage (through its buffer, as an older or newer
/// navis would have left it).
fn set_layout_version(index: &str, version: u32) {
    let oid = Spi::get_one::<pg_sys::Oid>(&format!("SELECT '{index}'::regclass::oid"))
        .unwrap()
        .unwrap();
    // SAFETY: the index is open under AccessExclusiveLock; its block 0 is pinned and
    // exclusively locked while four payload bytes change; the change is not WAL-logged, which
    // is fine in a test that aborts.
    unsafe {
        let rel = pg_sys::index_open(oid, pg_sys::AccessExclusiveLock as i32);
        let buf = pg_sys::ReadBuffer(rel, 0);
        pg_sys::LockBuffer(buf, pg_sys::BUFFER_LOCK_EXCLUSIVE as i32);
        let page = pg_sys::BufferGetPage(buf) as *mut u8;
        let at = page.add(navis_engine::pages::PAYLOAD_OFFSET) as *mut u32;
        at.write_unaligned(version);
        pg_sys::MarkBufferDirty(buf);
        pg_sys::UnlockReleaseBuffer(buf);
        pg_sys::index_close(rel, pg_sys::AccessExclusiveLock as i32);
    }
}

#[pg_test(
    error = "navis index \"old_v\" cannot be opened: its pages are damaged or from another navis version"
)]
fn an_index_of_another_layout_version_is_refused_with_a_reindex_hint() {
    Spi::run("CREATE TABLE old (v real[])").unwrap();
    Spi::run("INSERT INTO old SELECT ARRAY[i, i % 7, 1]::real[] FROM generate_series(1, 300) i")
        .unwrap();
    Spi::run("CREATE INDEX old_v ON old USING navis (v)").unwrap();
    set_layout_version("old_v", 1);
    Spi::run("SET enable_seqscan = off").unwrap();
    // Never read as if it were this version: the scan fails (the ERROR's DETAIL says "layout
    // version 1, this build reads 2", its HINT "Run REINDEX INDEX old_v").
    let _ = Spi::get_one::<i64>("SELECT count(*) FROM (SELECT 1 FROM old ORDER BY v <-> '{1,2,3}' LIMIT 5) s");
}
