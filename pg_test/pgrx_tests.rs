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
        Ok(Some("navis_cosine_ops:false,navis_ip_ops:false,navis_l2_ops:true".into()))
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
    // a stripe lock can be taken and released
    let shared = crate::shmem::require("test");
    let lock = shared.vertex_lock(12345);
    unsafe {
        pg_sys::LWLockAcquire(lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        assert!(pg_sys::LWLockHeldByMe(lock));
        pg_sys::LWLockRelease(lock);
        assert!(!pg_sys::LWLockHeldByMe(lock));
    }
}

#[pg_test]
fn gucs_have_paper_defaults() {
    for (name, value) in [
        ("navis.search_list", "40"),
        ("navis.insert_list", "100"),
        ("navis.beam_width", "4"),
        ("navis.entry_points", "10"),
        ("navis.rerank_top_k", "10"),
        ("navis.casr_percentile_search", "100"),
        ("navis.casr_percentile_insert", "90"),
        ("navis.casr_warmup", "1000"),
        ("navis.casr", "on"),
        ("navis.max_scan_tuples", "20000"),
    ] {
        let got = Spi::get_one::<String>(&format!("SELECT current_setting('{name}')"));
        assert_eq!(got, Ok(Some(value.to_string())), "{name}");
    }
}

#[pg_test(error = "navis index build is not implemented yet (checked 2 rows of 3 dimensions; skipped 1 NULL and 0 zero vectors)")]
fn create_index_fails_clearly_until_the_build_exists() {
    Spi::run("CREATE TABLE t (v real[])").unwrap();
    Spi::run("INSERT INTO t VALUES ('{1,2,3}'), ('{4,5,6}'), (NULL)").unwrap();
    Spi::run("CREATE INDEX ON t USING navis (v)").unwrap();
}
