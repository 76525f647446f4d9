//! What a partition counts, and what the statistics view reads.

use super::layout::STATS;

/// Statistics counters of a partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stat {
    HitsEquality,
    HitsApproximate,
    HitsAlias,
    Misses,
    FallThroughs,
    Admitted,
    RefusedDuplicate,
    RefusedVacuum,
    RefusedNoSpace,
    Evictions,
    InvalidatedByDelete,
    InvalidatedByLogWrap,
    RefreshFast,
    RefreshSlow,
    RefreshSlowRows,
    LogAppends,
    RowsRemovedByVacuum,
    AliasesLinked,
    Claims,
    GenerationMisses,
}

impl Stat {
    pub const ALL: [Stat; STATS] = [
        Stat::HitsEquality,
        Stat::HitsApproximate,
        Stat::HitsAlias,
        Stat::Misses,
        Stat::FallThroughs,
        Stat::Admitted,
        Stat::RefusedDuplicate,
        Stat::RefusedVacuum,
        Stat::RefusedNoSpace,
        Stat::Evictions,
        Stat::InvalidatedByDelete,
        Stat::InvalidatedByLogWrap,
        Stat::RefreshFast,
        Stat::RefreshSlow,
        Stat::RefreshSlowRows,
        Stat::LogAppends,
        Stat::RowsRemovedByVacuum,
        Stat::AliasesLinked,
        Stat::Claims,
        Stat::GenerationMisses,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Stat::HitsEquality => "hits_equality",
            Stat::HitsApproximate => "hits_approximate",
            Stat::HitsAlias => "hits_alias",
            Stat::Misses => "misses",
            Stat::FallThroughs => "fall_throughs",
            Stat::Admitted => "entries_admitted",
            Stat::RefusedDuplicate => "admissions_refused_duplicate",
            Stat::RefusedVacuum => "admissions_refused_vacuum",
            Stat::RefusedNoSpace => "admissions_refused_no_space",
            Stat::Evictions => "evictions",
            Stat::InvalidatedByDelete => "invalidated_by_delete",
            Stat::InvalidatedByLogWrap => "invalidated_by_log_wrap",
            Stat::RefreshFast => "refresh_fast",
            Stat::RefreshSlow => "refresh_slow",
            Stat::RefreshSlowRows => "refresh_slow_rows",
            Stat::LogAppends => "insert_log_appends",
            Stat::RowsRemovedByVacuum => "rows_removed_by_vacuum",
            Stat::AliasesLinked => "aliases_linked",
            Stat::Claims => "claims",
            Stat::GenerationMisses => "stale_generation_misses",
        }
    }
}

/// A partition's gauges and counters, read for the statistics view.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PartitionStats {
    pub partition: usize,
    pub db_oid: u32,
    pub rel_oid: u32,
    pub dim: usize,
    pub representatives: u32,
    pub aliases: u32,
    pub objects: u32,
    pub object_capacity: usize,
    pub entry_capacity: usize,
    pub log_capacity: usize,
    pub log_length: u64,
    pub bytes: usize,
    /// τ_q of every live representative, ascending.
    pub thresholds: Vec<f32>,
    pub counters: Vec<(Stat, u64)>,
}
