//! Steps 4 and 6 of the memory-bounded build: each partition's graph built in memory and its
//! lists appended to the list file, then read back through one cursor per partition and
//! merged row by row for the relation writer ([`MergedRows`]).

use super::{PartitionPlan, PartitionedBuild, NONE};
use crate::graph::{build_vamana, BuildControl};
use crate::index::spool::{RowSpool, SequentialRows};
use crate::index::{BuildPhase, Cancel, IndexError, IndexParams, Progress};
use crate::relation::RowSource;
use crate::storage::StorageError;
use crate::VertexId;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

/// The list file: every partition's records one after another, each record a `u32`
/// count and that many global ids, nearest first, in ascending order of the row's id.
pub(super) struct ListFile {
    path: PathBuf,
    pub(super) file: File,
    /// Byte offset of each partition's first record.
    pub(super) starts: Vec<u64>,
}

impl Drop for ListFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

pub(super) fn build_partitions(
    spool: &RowSpool,
    pairs: &[[u16; 2]],
    plan: &PartitionPlan,
    params: &IndexParams,
    progress: Progress,
    cancel: Cancel,
) -> Result<ListFile, IndexError> {
    let path = spool.path().with_extension("lists");
    let io = |e: std::io::Error| IndexError::Invalid(format!("{}: {e}", path.display()));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(io)?;
    // Owns the path from here: an error below removes the file.
    let mut lists = ListFile {
        path: path.clone(),
        file,
        starts: Vec::new(),
    };
    let mut out = BufWriter::with_capacity(1 << 20, lists.file.try_clone().map_err(io)?);
    let dim = spool.dim();
    let partitions = plan.partitions;
    let total: u64 = pairs.iter().map(|p| 1 + u64::from(p[1] != NONE)).sum();
    let vamana = params.vamana();
    let (mut offset, mut done) = (0u64, 0u64);
    let mut members = Vec::with_capacity(plan.partition_rows);
    let mut data = Vec::new();
    let mut ranked: Vec<(f32, VertexId)> = Vec::with_capacity(params.max_degree);
    for part in 0..partitions as u16 {
        lists.starts.push(offset);
        members.clear();
        members.extend(
            pairs
                .iter()
                .enumerate()
                .filter(|(_, p)| p[0] == part || p[1] == part)
                .map(|(v, _)| v as u32),
        );
        data.clear();
        spool.read_rows(&members, &mut data).map_err(io)?;
        let base = done;
        let report = |d: u64, _: u64| progress(BuildPhase::GraphBuild, base + d, total);
        let control = BuildControl {
            progress: Some(&report),
            should_stop: Some(&cancel),
        };
        let graph =
            build_vamana(&data, dim, params.metric, &vamana, &control).map_err(|e| match e {
                crate::graph::BuildError::Cancelled => IndexError::Cancelled,
                other => IndexError::Invalid(format!("partition {part}: {other}")),
            })?;
        for (i, list) in graph.adjacency.iter().enumerate() {
            let row = &data[i * dim..(i + 1) * dim];
            ranked.clear();
            ranked.extend(list.iter().map(|&j| {
                let other = &data[j as usize * dim..(j as usize + 1) * dim];
                (
                    params.metric.search_distance(row, other),
                    members[j as usize],
                )
            }));
            ranked.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
            out.write_all(&(ranked.len() as u32).to_le_bytes())
                .map_err(io)?;
            for &(_, id) in &ranked {
                out.write_all(&id.to_le_bytes()).map_err(io)?;
            }
            offset += 4 * (1 + ranked.len() as u64);
        }
        done += members.len() as u64;
        if cancel() {
            return Err(IndexError::Cancelled);
        }
    }
    out.flush().map_err(io)?;
    drop(out);
    Ok(lists)
}

/// Reads one partition's records in order from the list file.
pub(super) struct Cursor {
    next: u64,
    buf: Vec<u8>,
    buf_at: u64,
    read_bytes: usize,
}

impl Cursor {
    pub(super) fn new(start: u64, read_bytes: usize) -> Self {
        Cursor {
            next: start,
            buf: Vec::new(),
            buf_at: start,
            read_bytes,
        }
    }

    fn bytes(&mut self, file: &File, len: usize) -> std::io::Result<&[u8]> {
        let end = self.buf_at + self.buf.len() as u64;
        if self.next < self.buf_at || self.next + len as u64 > end {
            self.buf.resize(self.read_bytes.max(len), 0);
            let got = read_up_to(file, &mut self.buf, self.next)?;
            self.buf.truncate(got);
            self.buf_at = self.next;
            if got < len {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the list file ends inside a record",
                ));
            }
        }
        let at = (self.next - self.buf_at) as usize;
        self.next += len as u64;
        Ok(&self.buf[at..at + len])
    }

    fn record(&mut self, file: &File, out: &mut Vec<VertexId>) -> std::io::Result<()> {
        let count = u32::from_le_bytes(self.bytes(file, 4)?.try_into().expect("4 bytes"));
        let ids = self.bytes(file, count as usize * 4)?;
        out.clear();
        out.extend(
            ids.chunks_exact(4)
                .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes"))),
        );
        Ok(())
    }
}

fn read_up_to(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], offset + got as u64)? {
            0 => break,
            k => got += k,
        }
    }
    Ok(got)
}

/// The writer's [`RowSource`] over a partitioned build: merged lists, spooled vectors and
/// their PQ codes, each asked for in ascending vertex order.
pub struct MergedRows<'b> {
    build: &'b PartitionedBuild<'b>,
    max_degree: usize,
    cursors: Vec<Cursor>,
    vectors: SequentialRows<'b>,
    codes: SequentialRows<'b>,
    a: Vec<VertexId>,
    b: Vec<VertexId>,
    next_list: VertexId,
}

impl<'b> MergedRows<'b> {
    pub(super) fn new(build: &'b PartitionedBuild<'b>, max_degree: usize) -> Self {
        let cursors = build
            .lists
            .starts
            .iter()
            .map(|&start| Cursor::new(start, build.plan.cursor_bytes))
            .collect();
        MergedRows {
            build,
            max_degree,
            cursors,
            vectors: SequentialRows::new(build.spool),
            codes: SequentialRows::new(build.spool),
            a: Vec::new(),
            b: Vec::new(),
            next_list: 0,
        }
    }
}

fn storage(e: std::io::Error) -> StorageError {
    StorageError::invalid(format!("memory-bounded build: {e}"))
}

impl RowSource for MergedRows<'_> {
    fn list(&mut self, v: VertexId, out: &mut Vec<VertexId>) -> Result<(), StorageError> {
        if v != self.next_list {
            return Err(StorageError::invalid(format!(
                "the merged lists are read in vertex order: asked for {v}, next is {}",
                self.next_list
            )));
        }
        self.next_list += 1;
        let [first, second] = self.build.pairs[v as usize];
        let file = &self.build.lists.file;
        self.cursors[first as usize]
            .record(file, &mut self.a)
            .map_err(storage)?;
        if second == NONE {
            self.b.clear();
        } else {
            self.cursors[second as usize]
                .record(file, &mut self.b)
                .map_err(storage)?;
        }
        merge_alternately(&self.a, &self.b, self.max_degree, out);
        Ok(())
    }

    fn vector(&mut self, v: VertexId, out: &mut [f32]) -> Result<(), StorageError> {
        out.copy_from_slice(self.vectors.row(v as usize).map_err(storage)?);
        Ok(())
    }

    fn code(&mut self, v: VertexId, out: &mut [u8]) -> Result<(), StorageError> {
        let row = self.codes.row(v as usize).map_err(storage)?;
        self.build.pq.encode_into(row, out);
        Ok(())
    }
}

/// `a[0], b[0], a[1], b[1], ...` without repeats, at most `limit` ids: each partition's
/// list is already pruned and ordered nearest first, so taking them in turn keeps the
/// nearest and the long-range edges of both. Measured against merging the two by distance
/// (200K rows of the 1M set, 100 partitions): recall@10 0.901 / 0.987 / 0.998 at L = 20 /
/// 40 / 80 against 0.893 / 0.982 / 0.993; the in-memory build 0.917 / 0.986 / 1.000.
fn merge_alternately(a: &[VertexId], b: &[VertexId], limit: usize, out: &mut Vec<VertexId>) {
    out.clear();
    let mut i = 0;
    while out.len() < limit && (i < a.len() || i < b.len()) {
        for list in [a, b] {
            if let Some(&id) = list.get(i) {
                if out.len() < limit && !out.contains(&id) {
                    out.push(id);
                }
            }
        }
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_lists_alternate_without_repeats_up_to_the_limit() {
        let mut out = Vec::new();
        merge_alternately(&[1, 2, 3, 4], &[2, 5, 6], 5, &mut out);
        assert_eq!(out, [1, 2, 5, 3, 6]);
        merge_alternately(&[1, 2], &[], 5, &mut out);
        assert_eq!(out, [1, 2]);
        merge_alternately(&[], &[7, 8, 9], 2, &mut out);
        assert_eq!(out, [7, 8]);
    }
}
