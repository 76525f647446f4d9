//! The manifest: one small text file of `key=value` lines describing the whole index.
//!
//! ```text
//! navis-index-manifest
//! format_version=2
//! metric=1
//! dim=128
//! ...
//! checksum=1a2b3c4d
//! ```
//!
//! Text because an operator can read it with `cat` when something is wrong, and it is read
//! once per open. The first two lines are frozen across all future versions so that any
//! build can tell which version wrote a directory; the version is checked before the
//! checksum so that a newer file gets the REINDEX message, not a corruption complaint. The
//! checksum is the CRC-32 of every byte before the `checksum=` line, in lowercase hex.

use super::checksum::crc32;
use super::edge_page::EdgePageLayout;
use super::error::StorageError;
use super::vector_file::VectorLayout;
use super::FORMAT_VERSION;
use crate::Metric;
use std::collections::BTreeMap;
use std::path::Path;

pub const MANIFEST_MAGIC: &str = "navis-index-manifest";

/// Parameters the index was built with, kept so that inserts and rebuilds use the same ones.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BuildParams {
    /// Vamana build list size L.
    pub build_list: u32,
    /// RobustPrune alpha.
    pub alpha: f32,
    /// Target entrance-graph size as a fraction of the vertices (r_ent).
    pub entrance_ratio: f32,
    /// Entrance-graph max degree (R_ent).
    pub entrance_degree: u32,
}

/// Everything needed to interpret the other side files.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Manifest {
    pub metric: Metric,
    pub dim: u32,
    pub max_degree: u32,
    pub pq_bytes: u32,
    /// Vertices written by the build (ids 0..vertex_count).
    pub vertex_count: u32,
    pub slots_per_page: u32,
    /// Pages in the edge file.
    pub edge_pages: u32,
    /// Slots in the vector file.
    pub vector_slots: u32,
    /// Entries in the indirection table.
    pub indirection_capacity: u32,
    /// Where a search without entrance-graph entry points starts (the graph's medoid); 0 in
    /// an empty index.
    pub medoid: u32,
    pub params: BuildParams,
}

const KEYS: [&str; 15] = [
    "format_version",
    "metric",
    "dim",
    "max_degree",
    "pq_bytes",
    "vertex_count",
    "slots_per_page",
    "edge_pages",
    "vector_slots",
    "indirection_capacity",
    "build_list",
    "alpha",
    "entrance_ratio",
    "entrance_degree",
    "medoid",
];

impl Manifest {
    /// Layouts the manifest implies; fails when its numbers are inconsistent.
    pub fn edge_layout(&self) -> Result<EdgePageLayout, StorageError> {
        EdgePageLayout::new(self.max_degree as usize)
    }

    pub fn vector_layout(&self) -> Result<VectorLayout, StorageError> {
        VectorLayout::new(self.dim as usize)
    }

    pub fn to_text(&self) -> String {
        let p = &self.params;
        let values: [String; 15] = [
            FORMAT_VERSION.to_string(),
            self.metric.code().to_string(),
            self.dim.to_string(),
            self.max_degree.to_string(),
            self.pq_bytes.to_string(),
            self.vertex_count.to_string(),
            self.slots_per_page.to_string(),
            self.edge_pages.to_string(),
            self.vector_slots.to_string(),
            self.indirection_capacity.to_string(),
            p.build_list.to_string(),
            p.alpha.to_string(),
            p.entrance_ratio.to_string(),
            p.entrance_degree.to_string(),
            self.medoid.to_string(),
        ];
        let mut text = format!("{MANIFEST_MAGIC}\n");
        for (key, value) in KEYS.iter().zip(values) {
            text.push_str(&format!("{key}={value}\n"));
        }
        let crc = crc32(text.as_bytes());
        text.push_str(&format!("checksum={crc:08x}\n"));
        text
    }

    /// Reads and validates the manifest at `path`.
    pub fn read(path: &Path) -> Result<Manifest, StorageError> {
        let bytes = std::fs::read(path).map_err(|e| StorageError::io(path, "read", e))?;
        let text =
            String::from_utf8(bytes).map_err(|_| StorageError::corrupt(path, "not UTF-8 text"))?;
        Self::parse(path, &text)
    }

    /// Parses manifest text; `path` only names the file in errors.
    pub fn parse(path: &Path, text: &str) -> Result<Manifest, StorageError> {
        let bad = |detail: String| StorageError::corrupt(path, detail);
        let mut lines = text.lines();
        if lines.next() != Some(MANIFEST_MAGIC) {
            return Err(bad("not a navis manifest (bad first line)".into()));
        }
        let version_line = lines.next().unwrap_or("");
        let version = version_line
            .strip_prefix("format_version=")
            .and_then(|v| v.parse::<u32>().ok())
            .ok_or_else(|| {
                bad(format!(
                    "second line is {version_line:?}, expected format_version=N"
                ))
            })?;
        if version != FORMAT_VERSION {
            return Err(StorageError::Version {
                path: path.to_path_buf(),
                found: version,
                expected: FORMAT_VERSION,
            });
        }
        let checksum_at = text
            .find("\nchecksum=")
            .ok_or_else(|| bad("missing checksum line (truncated?)".into()))?
            + 1;
        let stored = text[checksum_at + "checksum=".len()..]
            .trim_end()
            .to_string();
        let computed = format!("{:08x}", crc32(&text.as_bytes()[..checksum_at]));
        if stored != computed {
            return Err(bad(format!("checksum {stored}, computed {computed}")));
        }
        let fields = parse_fields(&text[..checksum_at]).map_err(bad)?;
        let manifest = Self::from_fields(&fields).map_err(bad)?;
        manifest
            .check_consistency()
            .map_err(|e| bad(e.to_string()))?;
        Ok(manifest)
    }

    fn from_fields(f: &BTreeMap<&str, &str>) -> Result<Manifest, String> {
        let metric_code: u32 = field(f, "metric")?;
        let metric = Metric::from_code(metric_code)
            .ok_or_else(|| format!("unknown metric code {metric_code}"))?;
        Ok(Manifest {
            metric,
            dim: field(f, "dim")?,
            max_degree: field(f, "max_degree")?,
            pq_bytes: field(f, "pq_bytes")?,
            vertex_count: field(f, "vertex_count")?,
            slots_per_page: field(f, "slots_per_page")?,
            edge_pages: field(f, "edge_pages")?,
            vector_slots: field(f, "vector_slots")?,
            indirection_capacity: field(f, "indirection_capacity")?,
            // Manifests written before the key existed started searches at vertex 0.
            medoid: optional_field(f, "medoid")?.unwrap_or(0),
            params: BuildParams {
                build_list: field(f, "build_list")?,
                alpha: field(f, "alpha")?,
                entrance_ratio: field(f, "entrance_ratio")?,
                entrance_degree: field(f, "entrance_degree")?,
            },
        })
    }

    /// Cross-checks derived numbers so a hand-edited or mis-written manifest is caught
    /// before any file is interpreted with the wrong geometry.
    pub fn check_consistency(&self) -> Result<(), StorageError> {
        let layout = self.edge_layout()?;
        self.vector_layout()?;
        if layout.slots_per_page() != self.slots_per_page as usize {
            return Err(StorageError::invalid(format!(
                "slots_per_page {} does not match max_degree {} ({} slots)",
                self.slots_per_page,
                self.max_degree,
                layout.slots_per_page()
            )));
        }
        let min_pages = (self.vertex_count as u64).div_ceil(self.slots_per_page as u64);
        if (self.edge_pages as u64) < min_pages {
            return Err(StorageError::invalid(format!(
                "{} edge pages cannot hold {} vertices",
                self.edge_pages, self.vertex_count
            )));
        }
        if self.vector_slots < self.vertex_count || self.indirection_capacity < self.vertex_count {
            return Err(StorageError::invalid(
                "vector slots or indirection capacity below vertex count",
            ));
        }
        if self.pq_bytes == 0 {
            return Err(StorageError::invalid("pq_bytes must be at least 1"));
        }
        let medoid_ok = if self.vertex_count == 0 {
            self.medoid == 0
        } else {
            self.medoid < self.vertex_count
        };
        if !medoid_ok {
            return Err(StorageError::invalid(format!(
                "medoid {} is not one of the {} vertices",
                self.medoid, self.vertex_count
            )));
        }
        Ok(())
    }
}

fn parse_fields(text: &str) -> Result<BTreeMap<&str, &str>, String> {
    let mut fields = BTreeMap::new();
    for line in text.lines().skip(1) {
        let (key, value) = line
            .split_once('=')
            .ok_or_else(|| format!("line {line:?} is not key=value"))?;
        if !KEYS.contains(&key) {
            return Err(format!("unknown key {key:?}"));
        }
        if fields.insert(key, value).is_some() {
            return Err(format!("key {key:?} appears twice"));
        }
    }
    Ok(fields)
}

fn field<T: std::str::FromStr>(fields: &BTreeMap<&str, &str>, key: &str) -> Result<T, String> {
    optional_field(fields, key)?.ok_or_else(|| format!("missing key {key:?}"))
}

fn optional_field<T: std::str::FromStr>(
    fields: &BTreeMap<&str, &str>,
    key: &str,
) -> Result<Option<T>, String> {
    fields
        .get(key)
        .map(|raw| {
            raw.parse()
                .map_err(|_| format!("key {key:?} has unparsable value {raw:?}"))
        })
        .transpose()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sample() -> Manifest {
        Manifest {
            metric: Metric::Cosine,
            dim: 384,
            max_degree: 96,
            pq_bytes: 48,
            vertex_count: 1000,
            slots_per_page: 10,
            edge_pages: 100,
            vector_slots: 1000,
            indirection_capacity: 1024,
            medoid: 417,
            params: BuildParams {
                build_list: 128,
                alpha: 1.2,
                entrance_ratio: 0.01,
                entrance_degree: 32,
            },
        }
    }

    #[test]
    fn text_round_trip() {
        let m = sample();
        let text = m.to_text();
        assert!(text.starts_with("navis-index-manifest\nformat_version=2\nmetric=3\n"));
        assert_eq!(Manifest::parse(Path::new("manifest"), &text).unwrap(), m);
    }

    #[test]
    fn wrong_version_asks_for_reindex() {
        let text = sample()
            .to_text()
            .replace("format_version=2", "format_version=3");
        let err = Manifest::parse(Path::new("manifest"), &text).unwrap_err();
        assert!(matches!(
            err,
            StorageError::Version {
                found: 3,
                expected: 2,
                ..
            }
        ));
        assert!(err
            .to_string()
            .starts_with("index format version 3, this build reads 2: REINDEX"));
    }

    #[test]
    fn corruption_is_detected() {
        let p = Path::new("manifest");
        let text = sample().to_text();
        let edited = text.replace("dim=384", "dim=385");
        assert!(Manifest::parse(p, &edited)
            .unwrap_err()
            .to_string()
            .contains("checksum"));
        let truncated = &text[..text.len() - 20];
        assert!(Manifest::parse(p, truncated).is_err());
        assert!(Manifest::parse(p, "hello\n")
            .unwrap_err()
            .to_string()
            .contains("not a navis manifest"));
    }

    #[test]
    fn inconsistent_geometry_is_rejected() {
        let mut m = sample();
        m.slots_per_page = 11;
        let err = Manifest::parse(Path::new("manifest"), &m.to_text())
            .unwrap_err()
            .to_string();
        assert!(err.contains("slots_per_page 11"), "{err}");
        let mut m = sample();
        m.edge_pages = 99;
        assert!(Manifest::parse(Path::new("manifest"), &m.to_text()).is_err());
        let mut m = sample();
        m.medoid = 1000;
        let err = Manifest::parse(Path::new("manifest"), &m.to_text())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("medoid 1000 is not one of the 1000 vertices"),
            "{err}"
        );
        m.vertex_count = 0;
        m.medoid = 0;
        assert_eq!(
            Manifest::parse(Path::new("manifest"), &m.to_text()).unwrap(),
            m
        );
    }

    #[test]
    fn medoid_round_trips_and_defaults_to_zero_when_absent() {
        let text = sample().to_text();
        assert!(text.contains("\nmedoid=417\n"));
        assert_eq!(Manifest::parse(Path::new("m"), &text).unwrap().medoid, 417);
        // A manifest written before the medoid key existed: drop the line, re-checksum.
        let body: String = text
            .lines()
            .filter(|l| !l.starts_with("medoid=") && !l.starts_with("checksum="))
            .map(|l| format!("{l}\n"))
            .collect();
        let old = format!("{body}checksum={:08x}\n", crc32(body.as_bytes()));
        let parsed = Manifest::parse(Path::new("m"), &old).unwrap();
        assert_eq!(parsed.medoid, 0);
        assert_eq!(parsed.dim, 384);
    }
}
