//! Index options (reloptions): the build-time parameters of a navis index.
//!
//! `CREATE INDEX ... USING navis (embedding) WITH (max_degree = 64, pq_bytes = 96)`.
//! PostgreSQL checks each value against the ranges registered here when the index is
//! created or altered, and `amoptions` then checks the combinations ([`BuildOptions::validate`]),
//! so a bad list is refused at once, on an empty table and in ALTER INDEX too;
//! [`BuildOptions::validate_for`] checks what depends on the data (dimensions) when a build
//! knows them.

use crate::errors::raise;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;
use std::ffi::CStr;
use std::sync::atomic::{AtomicU32, Ordering};

/// On-disk layout of the parsed options (a varlena built by `build_reloptions`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct RawOptions {
    vl_len_: i32,
    max_degree: i32,
    build_list: i32,
    alpha: f64,
    pq_bytes: i32,
    entrance_ratio: f64,
    entrance_degree: i32,
    consolidate_threshold: f64,
}

/// Build parameters with defaults applied.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BuildOptions {
    /// R: maximum out-degree of the graph (paper: 96).
    pub max_degree: u32,
    /// L: candidate list during graph build (NAVIS release: 128).
    pub build_list: u32,
    /// α of RobustPrune (paper: 1.2).
    pub alpha: f32,
    /// Bytes per PQ code; 0 picks a size from the dimension at build time.
    pub pq_bytes: u32,
    /// r_ent: share of vertices in the entrance graph (paper: 0.01).
    pub entrance_ratio: f64,
    /// R_ent: maximum degree inside the entrance graph (paper: 32).
    pub entrance_degree: u32,
    /// VACUUM consolidates (repairs lists, frees deleted vertices) once this share of the
    /// graph is deleted.
    pub consolidate_threshold: f64,
}

/// The build list an index gets without `build_list` in WITH (...), unless its max_degree is
/// larger (RFC 0007).
const DEFAULT_BUILD_LIST: u32 = navis_engine::index::DEFAULT_GRAPH_BUILD_LIST as u32;
/// The smallest build list accepted when one is given.
const MIN_BUILD_LIST: u32 = 10;

impl Default for BuildOptions {
    /// The defaults registered with PostgreSQL (the option tables below), used when an index
    /// was created without a WITH (...) list and so has no parsed options.
    fn default() -> Self {
        let mut raw = RawOptions {
            vl_len_: 0,
            max_degree: 0,
            build_list: 0,
            alpha: 0.0,
            pq_bytes: 0,
            entrance_ratio: 0.0,
            entrance_degree: 0,
            consolidate_threshold: 0.0,
        };
        for o in &INT_OPTIONS {
            *(o.field)(&mut raw) = o.default;
        }
        for o in &REAL_OPTIONS {
            *(o.field)(&mut raw) = o.default;
        }
        BuildOptions::from_raw(&raw)
    }
}

/// One integer option: what PostgreSQL registers and where its value lands in RawOptions.
struct IntOption {
    name: &'static CStr,
    desc: &'static CStr,
    default: i32,
    min: i32,
    max: i32,
    field: fn(&mut RawOptions) -> &mut i32,
}

/// One real option, likewise.
struct RealOption {
    name: &'static CStr,
    desc: &'static CStr,
    default: f64,
    min: f64,
    max: f64,
    field: fn(&mut RawOptions) -> &mut f64,
}

/// Byte offset of a field inside RawOptions, found through its accessor, so the parse table
/// cannot disagree with the struct.
fn offset_in_raw<T>(field: fn(&mut RawOptions) -> &mut T) -> i32 {
    let mut raw = std::mem::MaybeUninit::<RawOptions>::zeroed();
    // SAFETY: an all-zero RawOptions is a valid value (it holds integers and floats only).
    let raw = unsafe { raw.assume_init_mut() };
    let base = raw as *mut RawOptions as usize;
    let at = field(raw) as *mut T as usize;
    (at - base) as i32
}

const INT_OPTIONS: [IntOption; 4] = [
    IntOption {
        name: c"max_degree",
        desc: c"Maximum out-degree R of the navis graph",
        default: 96,
        min: 8,
        max: 256,
        field: |r| &mut r.max_degree,
    },
    IntOption {
        name: c"build_list",
        desc:
            c"Candidate list L used while building the graph (0: the larger of 96 and max_degree)",
        // 0 resolves to DEFAULT_BUILD_LIST or max_degree, whichever is larger, so that
        // WITH (max_degree = 128) alone still builds (RFC 0007).
        default: 0,
        min: 0,
        max: 2_000,
        field: |r| &mut r.build_list,
    },
    IntOption {
        name: c"pq_bytes",
        desc: c"Bytes per product-quantization code (0 = choose from the dimension)",
        default: 0,
        min: 0,
        max: 2_048,
        field: |r| &mut r.pq_bytes,
    },
    IntOption {
        name: c"entrance_degree",
        desc: c"Maximum degree inside the in-memory entrance graph",
        default: 32,
        min: 4,
        max: 128,
        field: |r| &mut r.entrance_degree,
    },
];

const REAL_OPTIONS: [RealOption; 3] = [
    RealOption {
        name: c"alpha",
        desc: c"Pruning factor alpha of RobustPrune",
        default: 1.2,
        min: 1.0,
        max: 2.0,
        field: |r| &mut r.alpha,
    },
    RealOption {
        name: c"entrance_ratio",
        desc: c"Share of vertices kept in the in-memory entrance graph",
        default: 0.01,
        min: 0.0001,
        max: 0.5,
        field: |r| &mut r.entrance_ratio,
    },
    RealOption {
        name: c"consolidate_threshold",
        desc: c"Deleted share of the graph at which VACUUM repairs edge lists and frees deleted vertices",
        default: 0.1,
        min: 0.0,
        max: 1.0,
        field: |r| &mut r.consolidate_threshold,
    },
];

/// The relopt kind PostgreSQL assigned to navis, set once in `_PG_init`.
static RELOPT_KIND: AtomicU32 = AtomicU32::new(0);

/// Registers the options. Called once from `_PG_init`.
pub fn register() {
    // SAFETY: plain calls into PostgreSQL's reloption registry during library load, with
    // static NUL-terminated names; no PostgreSQL state is borrowed across them.
    unsafe {
        let kind = pg_sys::add_reloption_kind();
        RELOPT_KIND.store(kind, Ordering::Relaxed);
        let lock = pg_sys::AccessExclusiveLock as pg_sys::LOCKMODE;
        for o in &INT_OPTIONS {
            pg_sys::add_int_reloption(
                kind,
                o.name.as_ptr(),
                o.desc.as_ptr(),
                o.default,
                o.min,
                o.max,
                lock,
            );
        }
        for o in &REAL_OPTIONS {
            pg_sys::add_real_reloption(
                kind,
                o.name.as_ptr(),
                o.desc.as_ptr(),
                o.default,
                o.min,
                o.max,
                lock,
            );
        }
    }
}

fn parse_table() -> Vec<pg_sys::relopt_parse_elt> {
    let int = INT_OPTIONS.iter().map(|o| pg_sys::relopt_parse_elt {
        optname: o.name.as_ptr(),
        opttype: pg_sys::relopt_type::RELOPT_TYPE_INT,
        offset: offset_in_raw(o.field),
    });
    let real = REAL_OPTIONS.iter().map(|o| pg_sys::relopt_parse_elt {
        optname: o.name.as_ptr(),
        opttype: pg_sys::relopt_type::RELOPT_TYPE_REAL,
        offset: offset_in_raw(o.field),
    });
    int.chain(real).collect()
}

/// `amoptions`: parses and (when `validate`) range-checks the WITH (...) list.
#[pg_guard]
pub unsafe extern "C-unwind" fn amoptions(
    reloptions: pg_sys::Datum,
    validate: bool,
) -> *mut pg_sys::bytea {
    let table = parse_table();
    // SAFETY: the parse table describes RawOptions exactly (offsets from the field accessors, types
    // matching the registered options), and build_reloptions allocates the struct itself.
    let parsed = unsafe {
        pg_sys::build_reloptions(
            reloptions,
            validate,
            RELOPT_KIND.load(Ordering::Relaxed),
            std::mem::size_of::<RawOptions>(),
            table.as_ptr(),
            table.len() as i32,
        ) as *mut pg_sys::bytea
    };
    if validate {
        // SAFETY: NULL (no options given: the defaults, which are valid) or the RawOptions
        // build_reloptions just allocated.
        if let Some(raw) = unsafe { (parsed as *const RawOptions).as_ref() } {
            BuildOptions::from_raw(raw).validate();
        }
    }
    parsed
}

impl BuildOptions {
    /// Reads the options of an open index relation, defaults where none were given.
    pub fn of_index(index: pg_sys::Relation) -> BuildOptions {
        // SAFETY: `index` is an open relation; rd_options is either NULL or the struct our
        // amoptions produced for it.
        let raw = unsafe { ((*index).rd_options as *const RawOptions).as_ref() };
        raw.map_or_else(BuildOptions::default, BuildOptions::from_raw)
    }

    fn from_raw(r: &RawOptions) -> BuildOptions {
        BuildOptions {
            max_degree: r.max_degree as u32,
            build_list: match r.build_list {
                0 => DEFAULT_BUILD_LIST.max(r.max_degree as u32),
                l => l as u32,
            },
            alpha: r.alpha as f32,
            pq_bytes: r.pq_bytes as u32,
            entrance_ratio: r.entrance_ratio,
            entrance_degree: r.entrance_degree as u32,
            consolidate_threshold: r.consolidate_threshold,
        }
    }

    /// Checks the combinations that single-option ranges cannot express and that do not
    /// depend on the data. Raises `ERROR` naming the option to change.
    pub fn validate(&self) {
        if self.build_list < MIN_BUILD_LIST {
            raise(
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                format!(
                    "build_list ({}) must be at least {MIN_BUILD_LIST}",
                    self.build_list
                ),
                Some(
                    "Leave build_list out (or 0) for the default, the larger of 96 and max_degree.",
                ),
            )
        }
        if self.build_list < self.max_degree {
            raise(
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                format!(
                    "build_list ({}) must be at least max_degree ({})",
                    self.build_list, self.max_degree
                ),
                Some("Raise build_list or lower max_degree in WITH (...)."),
            )
        }
    }

    /// [`BuildOptions::validate`] and the checks that need the vectors' `dim` dimensions
    /// (options set before this check existed are checked again at a build).
    pub fn validate_for(&self, dim: usize) {
        self.validate();
        if self.pq_bytes as usize > dim {
            raise(
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                format!(
                    "pq_bytes ({}) cannot exceed the vector dimension ({dim})",
                    self.pq_bytes
                ),
                Some("Use pq_bytes = 0 to choose automatically, or a value up to the dimension."),
            )
        }
    }
}
