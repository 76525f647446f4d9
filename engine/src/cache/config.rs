//! What a cache is configured with: replacement policy, frozen-region eviction, who is reading,
//! and the checks a configuration must pass.

use super::{CacheError, FRAME_SIZES, NO_FRAME};

/// Which replacement policy the frames follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Admission window plus mostly-frozen region.
    Navis,
    /// One CLOCK pool over all frames (the ablation).
    Lru,
    /// No caching: every lookup misses, nothing is admitted.
    Off,
}

impl Policy {
    pub(super) fn code(self) -> u32 {
        match self {
            Policy::Navis => 0,
            Policy::Lru => 1,
            Policy::Off => 2,
        }
    }

    pub(super) fn from_code(code: u32) -> Policy {
        match code {
            0 => Policy::Navis,
            1 => Policy::Lru,
            _ => Policy::Off,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Policy::Navis => "navis",
            Policy::Lru => "lru",
            Policy::Off => "off",
        }
    }

    pub fn parse(s: &str) -> Option<Policy> {
        match s {
            "navis" => Some(Policy::Navis),
            "lru" => Some(Policy::Lru),
            "off" => Some(Policy::Off),
            _ => None,
        }
    }
}

/// How the frozen region makes room when it is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrozenEviction {
    /// The earliest-promoted page (NAVIS README).
    Fifo,
    /// A random frozen page (NAVIS paper).
    Random,
    /// The earliest-promoted page not hit since it was last passed over (second chance): a
    /// frozen page still in use goes to the back of the queue.
    Clock,
}

impl FrozenEviction {
    pub fn name(self) -> &'static str {
        match self {
            FrozenEviction::Fifo => "fifo",
            FrozenEviction::Random => "random",
            FrozenEviction::Clock => "clock",
        }
    }

    pub fn parse(s: &str) -> Option<FrozenEviction> {
        match s {
            "fifo" => Some(FrozenEviction::Fifo),
            "random" => Some(FrozenEviction::Random),
            "clock" => Some(FrozenEviction::Clock),
            _ => None,
        }
    }
}

/// Who is reading: promotion thresholds and statistics differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caller {
    /// A user search.
    Search,
    /// An insert's position seeking.
    Insert,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CacheConfig {
    pub frames: usize,
    /// Bytes per frame, one of [`FRAME_SIZES`]: the edge-page size of the indexes that will
    /// use the cache.
    pub frame_size: usize,
    pub policy: Policy,
    /// Share of the frames kept for the admission window (the rest may be frozen).
    pub window_share: f64,
    /// Accesses while in the window (the admitting one included) that promote a page when
    /// they come from inserts ...
    pub insert_promote_hits: u32,
    /// ... and from user searches.
    pub search_promote_hits: u32,
    pub frozen_eviction: FrozenEviction,
}

impl CacheConfig {
    /// The paper's defaults over `frames` frames of 4 KiB (side-file edge pages).
    pub fn navis(frames: usize) -> CacheConfig {
        CacheConfig {
            frames,
            frame_size: crate::storage::PAGE_SIZE,
            policy: Policy::Navis,
            window_share: 0.10,
            insert_promote_hits: 2,
            search_promote_hits: DEFAULT_SEARCH_PROMOTE_HITS,
            frozen_eviction: FrozenEviction::Fifo,
        }
    }

    pub(super) fn frozen_capacity(&self) -> usize {
        match self.policy {
            Policy::Navis => ((self.frames as f64) * (1.0 - self.window_share)).floor() as usize,
            Policy::Lru | Policy::Off => 0,
        }
    }
}

/// The paper only says "much higher" than the insert path's 2.
pub const DEFAULT_SEARCH_PROMOTE_HITS: u32 = 8;

pub(super) fn validate(config: &CacheConfig) -> Result<(), CacheError> {
    if !FRAME_SIZES.contains(&config.frame_size) {
        return Err(CacheError(format!(
            "cache frames are {FRAME_SIZES:?} bytes, not {}",
            config.frame_size
        )));
    }
    if config.frames == 0 || config.frames >= NO_FRAME as usize / 2 {
        return Err(CacheError(format!(
            "a cache needs between 1 and {} frames, got {}",
            NO_FRAME / 2 - 1,
            config.frames
        )));
    }
    if !(config.window_share > 0.0 && config.window_share <= 1.0) {
        return Err(CacheError(format!(
            "the window share must be in (0, 1], got {}",
            config.window_share
        )));
    }
    if config.insert_promote_hits == 0 || config.search_promote_hits == 0 {
        return Err(CacheError("promotion hit counts must be at least 1".into()));
    }
    Ok(())
}
