//! navis: the PostgreSQL layer.
//!
//! This crate is deliberately thin. It turns PostgreSQL things (arrays, relations, GUCs,
//! reloptions, shared memory) into calls on the `navis-engine` crate, which holds every
//! algorithm and file format. See `docs/architecture.md` for the map.

use pgrx::prelude::*;

mod am;
mod build;
mod build_rows;
mod cache;
mod cost;
mod datum;
mod drop;
mod errors;
mod guc;
mod insert;
mod io_stats;
mod lios;
mod lios_stalls;
mod lios_worker;
mod open;
mod options;
mod pglog;
mod pgstore;
mod pgvector;
mod read_ahead;
mod regrow;
mod relstore;
mod result_cache;
mod runtime;
mod scan;
mod scan_cache;
mod shmem;
mod standby;
mod stats;
#[cfg(feature = "test_functions")]
mod test_functions;
mod vacuum;
mod vector_sql;
mod wait_event;
mod wal;

::pgrx::pg_module_magic!(name, version);

/// Called when the library is loaded: by `shared_preload_libraries` in the postmaster, or on
/// first use in a backend when it was not preloaded.
#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    guc::register();
    options::register();
    shmem::request_if_preloading();
    wal::register();
    drop::register();
    wait_event::register();
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    // The PostgreSQL-facing tests live in pg_test/ next to the SQL regression suite.
    include!("../pg_test/pgrx_tests.rs");
    // Changes written through the WAL into a relation (RFC 0001 stage 3c). pgrx runs every
    // test as a function of this schema, so the file is included here, not in a module.
    include!("../pg_test/pgrx_relation_log_tests.rs");
}

/// Required by `cargo pgrx test`; must be at the crate root.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec!["shared_preload_libraries = 'navis'"]
    }
}
