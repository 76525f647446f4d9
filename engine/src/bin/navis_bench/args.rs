//! `--name value` options and the parsers the commands share.

use std::collections::HashMap;

use navis_engine::index::CasrSetting;
use navis_engine::Metric;

use super::Result;

/// `--name value` pairs and bare `--flag`s.
pub(super) struct Args {
    pub(super) values: HashMap<String, String>,
}

impl Args {
    pub(super) fn parse(raw: &[String]) -> Args {
        let mut values = HashMap::new();
        let mut i = 0;
        while i < raw.len() {
            let key = raw[i].trim_start_matches("--").to_string();
            let next = raw.get(i + 1).filter(|v| !v.starts_with("--"));
            match next {
                Some(v) => {
                    values.insert(key, v.clone());
                    i += 2;
                }
                None => {
                    values.insert(key, String::new());
                    i += 1;
                }
            }
        }
        Args { values }
    }

    pub(super) fn flag(&self, key: &str) -> bool {
        self.values.contains_key(key)
    }

    pub(super) fn str(&self, key: &str) -> Result<&str> {
        self.values
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| format!("missing --{key}"))
    }

    pub(super) fn num<T: std::str::FromStr>(&self, key: &str, default: T) -> Result<T> {
        match self.values.get(key) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| format!("--{key}: not a number: {v:?}")),
        }
    }

    /// An optional number: `None` when `--key` is absent.
    pub(super) fn opt_num<T: std::str::FromStr>(&self, key: &str) -> Result<Option<T>> {
        self.values
            .get(key)
            .map(|v| {
                v.parse()
                    .map_err(|_| format!("--{key}: not a number: {v:?}"))
            })
            .transpose()
    }
}

pub(super) fn parse_metric(s: &str) -> Result<Metric> {
    match s {
        "l2" => Ok(Metric::L2),
        "cosine" => Ok(Metric::Cosine),
        "ip" => Ok(Metric::InnerProduct),
        other => Err(format!("unknown metric {other:?} (l2, cosine, ip)")),
    }
}

pub(super) fn parse_lists(a: &Args, default: &str) -> Result<Vec<usize>> {
    a.values
        .get("lists")
        .map_or(default, String::as_str)
        .split(',')
        .map(|s| {
            s.trim()
                .parse()
                .map_err(|_| format!("--lists: bad value {s:?}"))
        })
        .collect()
}

pub(super) fn parse_casr(a: &Args) -> Result<CasrSetting> {
    Ok(match a.values.get("casr").map_or("auto", String::as_str) {
        "auto" => CasrSetting::Auto,
        "off" => CasrSetting::Off,
        w => CasrSetting::Window(
            w.parse()
                .map_err(|_| format!("--casr: auto, off or a window, got {w:?}"))?,
        ),
    })
}
