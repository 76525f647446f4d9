//! Whether a file of a given size fits comfortably in the memory this process may use: the
//! kernel's `MemAvailable`, and the memory limits of the process's cgroup and its ancestors
//! (v1 and v2).
//!
//! The page-cache probe ([`crate::page_cache`]) uses it to tell an index that fits in memory,
//! whose pages the page cache should hold, from one that does not, whose misses must leave
//! the page cache alone. The probe's hit rate alone cannot tell them apart once the kernel
//! has dropped a fitting index's pages (proactive reclaim did that to whole indexes on this
//! project's VMs, with 18 GiB free): O_DIRECT misses never bring pages back, so the hit rate
//! stays low for good.

use std::path::{Path, PathBuf};

/// A file fits when it takes at most this share (1 / FIT_SHARE) of the memory available.
pub const FIT_SHARE: u64 = 2;

/// The memory this process can count on, in bytes: the smallest of `MemAvailable` and every
/// cgroup memory limit above it. `None` when none can be read.
pub fn memory_available() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok();
    let available = meminfo.as_deref().and_then(parse_mem_available);
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let limit = cgroup_limit_files(&cgroups, Path::new("/sys/fs/cgroup"))
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .filter_map(|s| parse_limit(&s))
        .min();
    match (available, limit) {
        (Some(a), Some(l)) => Some(a.min(l)),
        (a, l) => a.or(l),
    }
}

/// Whether `bytes` take at most 1 / [`FIT_SHARE`] of `available`; unknown memory counts as
/// not fitting (the page cache is then left alone, as before this check existed).
pub fn fits(bytes: u64, available: Option<u64>) -> bool {
    match (available, bytes.checked_mul(FIT_SHARE)) {
        (Some(a), Some(needed)) => needed <= a,
        _ => false,
    }
}

/// `MemAvailable` of `/proc/meminfo`, in bytes.
fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let mut words = line.split_whitespace().skip(1);
    let value: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => Some(value * 1024),
        None => Some(value),
        Some(_) => None,
    }
}

/// A limit file's value in bytes; `None` for "max" (v2) and for v1's "no limit", a number
/// near 2^63 rounded to pages.
fn parse_limit(text: &str) -> Option<u64> {
    let value: u64 = text.trim().parse().ok()?;
    (value < 1 << 62).then_some(value)
}

/// The limit files that apply to this process, from `/proc/self/cgroup`'s text, under
/// `root` (`/sys/fs/cgroup`): its own group's and every ancestor's, v2 (`memory.max`) and v1
/// (`memory/…/memory.limit_in_bytes`).
fn cgroup_limit_files(proc_self_cgroup: &str, root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for line in proc_self_cgroup.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        // v2 is mounted at the root, or at `unified` beside the v1 hierarchies (hybrid).
        let (dirs, file) = if controllers.is_empty() {
            (vec![root.to_path_buf(), root.join("unified")], "memory.max")
        } else if controllers.split(',').any(|c| c == "memory") {
            (vec![root.join("memory")], "memory.limit_in_bytes")
        } else {
            continue;
        };
        for dir in dirs {
            let mut group = Path::new(path.trim_start_matches('/'));
            loop {
                files.push(dir.join(group).join(file));
                match group.parent() {
                    Some(parent) => group = parent,
                    None => break,
                }
            }
        }
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_available_is_read_in_bytes() {
        let meminfo =
            "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   18874368 kB\n";
        assert_eq!(parse_mem_available(meminfo), Some(18874368 * 1024));
        assert_eq!(parse_mem_available("MemTotal: 5 kB\n"), None);
        assert_eq!(parse_mem_available("MemAvailable: lots kB\n"), None);
    }

    #[test]
    fn unlimited_groups_have_no_limit() {
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(parse_limit("9223372036854771712\n"), None);
        assert_eq!(parse_limit("402653184\n"), Some(402653184));
    }

    #[test]
    fn limit_files_cover_the_group_and_its_ancestors() {
        let root = Path::new("/cg");
        let v2 = cgroup_limit_files("0::/system.slice/pg.service\n", root);
        assert_eq!(
            v2,
            vec![
                PathBuf::from("/cg/system.slice/pg.service/memory.max"),
                PathBuf::from("/cg/system.slice/memory.max"),
                PathBuf::from("/cg/memory.max"),
                PathBuf::from("/cg/unified/system.slice/pg.service/memory.max"),
                PathBuf::from("/cg/unified/system.slice/memory.max"),
                PathBuf::from("/cg/unified/memory.max"),
            ]
        );
        let v1 = cgroup_limit_files("12:cpu,cpuacct:/x\n7:memory:/navis_b\n0::/\n", root);
        assert_eq!(
            v1,
            vec![
                PathBuf::from("/cg/memory/navis_b/memory.limit_in_bytes"),
                PathBuf::from("/cg/memory/memory.limit_in_bytes"),
                PathBuf::from("/cg/memory.max"),
                PathBuf::from("/cg/unified/memory.max"),
            ]
        );
        assert!(cgroup_limit_files("garbage\n", root).is_empty());
    }

    #[test]
    fn a_file_fits_in_half_of_what_is_available() {
        assert!(fits(100, Some(200)));
        assert!(!fits(101, Some(200)));
        assert!(!fits(1, None));
        assert!(!fits(u64::MAX, Some(u64::MAX)));
        // This machine can read its own memory.
        assert!(memory_available().is_some_and(|m| m > 0));
    }
}
