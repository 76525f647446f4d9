//! A memory-bounded build's rows on disk: every row's vector, validated and normalised for
//! cosine as the index will store it, appended to one temporary file in arrival order, so
//! that vertex `v` is row `v` of the file. The build reads it back in three ways: a seeded
//! sample, the members of one partition (ascending ids, read in runs), and a sequential
//! pass. The file lives in a directory the caller chooses (PostgreSQL: its temporary-file
//! area, which a restart clears) and is removed when the spool is dropped.
//!
//! Reads go through the OS page cache (`pread`); nothing here is held in memory but a
//! write buffer and the caller's read buffers.

use crate::distance::normalize;
use crate::Metric;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Rows read per `pread` in sequential passes.
const PASS_ROWS: usize = 256;

#[derive(Debug)]
pub struct RowSpool {
    path: PathBuf,
    writer: Option<BufWriter<File>>,
    reader: File,
    dim: usize,
    metric: Metric,
    rows: usize,
}

impl RowSpool {
    /// A new empty spool file `name` in `dir` (created if missing) for `dim`-dimensional rows
    /// of a `metric` index. Fails if the file exists.
    pub fn create(dir: &Path, name: &str, dim: usize, metric: Metric) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(name);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        let reader = file.try_clone()?;
        Ok(RowSpool {
            path,
            writer: Some(BufWriter::with_capacity(1 << 20, file)),
            reader,
            dim,
            metric,
            rows: 0,
        })
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    pub fn len(&self) -> usize {
        self.rows
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one row: checked as every indexed vector is, normalised for cosine. Returns
    /// the row's vertex id.
    pub fn push(&mut self, row: &[f32]) -> Result<u32, String> {
        if row.len() != self.dim {
            return Err(format!(
                "row {} has {} dimensions, the spool holds {}",
                self.rows,
                row.len(),
                self.dim
            ));
        }
        crate::vector::validate(row).map_err(|e| format!("row {}: {e}", self.rows))?;
        let mut copy;
        let row = if self.metric.needs_normalization() {
            copy = row.to_vec();
            if !normalize(&mut copy) {
                return Err(format!(
                    "row {} is a zero vector, which has no cosine distance",
                    self.rows
                ));
            }
            &copy[..]
        } else {
            row
        };
        let writer = self.writer.as_mut().ok_or("the spool is finished")?;
        writer
            .write_all(bytemuck::cast_slice(row))
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
        self.rows += 1;
        Ok((self.rows - 1) as u32)
    }

    /// Flushes the appended rows; reads see every row from here on. Idempotent.
    pub fn finish(&mut self) -> std::io::Result<()> {
        if let Some(mut w) = self.writer.take() {
            w.flush()?;
        }
        Ok(())
    }

    fn row_bytes(&self) -> usize {
        self.dim * 4
    }

    /// Reads rows `first..first + out.len() / dim` into `out`.
    pub fn read_run(&self, first: usize, out: &mut [f32]) -> std::io::Result<()> {
        debug_assert!(self.writer.is_none(), "read before finish");
        let offset = (first * self.row_bytes()) as u64;
        self.reader
            .read_exact_at(bytemuck::cast_slice_mut(out), offset)
    }

    /// The rows `ids` (ascending) appended to `out`, consecutive ids read together.
    pub fn read_rows(&self, ids: &[u32], out: &mut Vec<f32>) -> std::io::Result<()> {
        let dim = self.dim;
        let mut i = 0;
        while i < ids.len() {
            let mut j = i + 1;
            while j < ids.len() && ids[j] == ids[j - 1] + 1 && j - i < PASS_ROWS {
                j += 1;
            }
            let at = out.len();
            out.resize(at + (j - i) * dim, 0.0);
            self.read_run(ids[i] as usize, &mut out[at..])?;
            i = j;
        }
        Ok(())
    }

    /// Calls `f(v, row)` for every row in order, reading `PASS_ROWS` rows at a time.
    pub fn for_each(&self, mut f: impl FnMut(u32, &[f32])) -> std::io::Result<()> {
        let mut buf = vec![0f32; PASS_ROWS * self.dim];
        let mut first = 0;
        while first < self.rows {
            let count = PASS_ROWS.min(self.rows - first);
            let chunk = &mut buf[..count * self.dim];
            self.read_run(first, chunk)?;
            for (k, row) in chunk.chunks_exact(self.dim).enumerate() {
                f((first + k) as u32, row);
            }
            first += count;
        }
        Ok(())
    }
}

impl Drop for RowSpool {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Reads rows in ascending order one at a time through a buffer of [`PASS_ROWS`] rows: the
/// writer's vector and code passes.
pub struct SequentialRows<'a> {
    spool: &'a RowSpool,
    buf: Vec<f32>,
    first: usize,
    count: usize,
}

impl<'a> SequentialRows<'a> {
    pub fn new(spool: &'a RowSpool) -> Self {
        SequentialRows {
            spool,
            buf: vec![0f32; PASS_ROWS * spool.dim],
            first: 0,
            count: 0,
        }
    }

    /// Row `v`; `v` must not be below the previous call's.
    pub fn row(&mut self, v: usize) -> std::io::Result<&[f32]> {
        let dim = self.spool.dim;
        if v < self.first || v >= self.first + self.count {
            if v >= self.spool.rows {
                return Err(std::io::Error::other(format!(
                    "row {v} is beyond the {} spooled rows",
                    self.spool.rows
                )));
            }
            self.first = v;
            self.count = PASS_ROWS.min(self.spool.rows - v);
            let chunk = &mut self.buf[..self.count * dim];
            self.spool.read_run(v, chunk)?;
        }
        let k = v - self.first;
        Ok(&self.buf[k * dim..(k + 1) * dim])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_come_back_as_written_in_every_read_mode() {
        let dir = std::env::temp_dir().join(format!("navis-spool-{}", std::process::id()));
        let mut spool = RowSpool::create(&dir, "rows", 3, Metric::L2).unwrap();
        for i in 0..1000u32 {
            let v = [i as f32, -(i as f32), 0.5];
            assert_eq!(spool.push(&v).unwrap(), i);
        }
        assert!(spool.push(&[1.0, 2.0]).is_err());
        assert!(spool.push(&[f32::NAN, 0.0, 0.0]).is_err());
        spool.finish().unwrap();
        assert!(
            spool.push(&[1.0, 2.0, 3.0]).is_err(),
            "finished spools take no rows"
        );
        let mut out = Vec::new();
        spool.read_rows(&[3, 4, 5, 700, 999], &mut out).unwrap();
        assert_eq!(out.len(), 15);
        assert_eq!(out[9..12], [700.0, -700.0, 0.5]);
        let mut seen = 0;
        spool
            .for_each(|v, row| {
                assert_eq!(row[0], v as f32);
                seen += 1;
            })
            .unwrap();
        assert_eq!(seen, 1000);
        let mut seq = SequentialRows::new(&spool);
        for v in [0, 1, 255, 256, 257, 998, 999] {
            assert_eq!(seq.row(v).unwrap()[1], -(v as f32));
        }
        assert!(seq.row(1000).is_err());
        let path = spool.path().to_path_buf();
        drop(spool);
        assert!(!path.exists(), "a dropped spool removes its file");
        let _ = std::fs::remove_dir(&dir);
    }

    #[test]
    fn cosine_rows_are_normalised_and_zero_rows_refused() {
        let dir = std::env::temp_dir().join(format!("navis-spool-cos-{}", std::process::id()));
        let mut spool = RowSpool::create(&dir, "rows", 2, Metric::Cosine).unwrap();
        spool.push(&[3.0, 4.0]).unwrap();
        assert!(spool.push(&[0.0, 0.0]).unwrap_err().contains("zero vector"));
        spool.finish().unwrap();
        let mut out = vec![0.0; 2];
        spool.read_run(0, &mut out).unwrap();
        assert!((out[0] - 0.6).abs() < 1e-6 && (out[1] - 0.8).abs() < 1e-6);
        drop(spool);
        let _ = std::fs::remove_dir(&dir);
    }
}
