//! The serialised forms: a promotion plan as every process sharing an index applies it, and
//! the whole graph.

use std::collections::HashMap;

use crate::distance::Metric;
use crate::VertexId;

use super::{EntranceError, EntranceGraph, PromotionPlan, HEADER_SIZE, MAGIC, VERSION};

impl PromotionPlan {
    /// Serialises the plan (little-endian u32s and f32s), so that every process sharing an
    /// index can apply the same promotion to its copy of the graph (`update::promote`).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut put = |x: u32| out.extend_from_slice(&x.to_le_bytes());
        put(self.vertex);
        put(self.vector.len() as u32);
        put(self.neighbors.len() as u32);
        put(self.updates.len() as u32);
        for x in &self.vector {
            put(x.to_bits());
        }
        for &l in &self.neighbors {
            put(l);
        }
        for (p, list) in &self.updates {
            put(*p);
            put(list.len() as u32);
            for &l in list {
                put(l);
            }
        }
        out
    }

    /// Reads a plan written by [`PromotionPlan::to_bytes`].
    pub fn from_bytes(bytes: &[u8]) -> Result<PromotionPlan, EntranceError> {
        let mut r = Reader { bytes, pos: 0 };
        let vertex = r.u32()?;
        let (dim, neighbors, updates) = (r.u32()? as usize, r.u32()? as usize, r.u32()? as usize);
        if dim > crate::MAX_DIM || neighbors > bytes.len() || updates > bytes.len() {
            return Err(format_err("promotion plan with impossible sizes"));
        }
        let vector = (0..dim)
            .map(|_| r.u32().map(f32::from_bits))
            .collect::<Result<Vec<f32>, _>>()?;
        let neighbors = (0..neighbors)
            .map(|_| r.u32())
            .collect::<Result<Vec<u32>, _>>()?;
        let mut lists = Vec::with_capacity(updates);
        for _ in 0..updates {
            let p = r.u32()?;
            let len = r.u32()? as usize;
            if len > bytes.len() {
                return Err(format_err("promotion plan with an impossible list"));
            }
            let list = (0..len).map(|_| r.u32()).collect::<Result<Vec<u32>, _>>()?;
            lists.push((p, list));
        }
        Ok(PromotionPlan {
            vertex,
            vector,
            neighbors,
            updates: lists,
        })
    }
}

impl EntranceGraph {
    /// Serialises the graph (little-endian):
    ///
    /// ```text
    /// 0 magic "NAVISENT" | 8 version u32 | 12 metric code u32 | 16 dim u32 | 20 count u32
    /// 24 max_degree u32 | 28 start (local id) u32 | 32 ratio f64 | 40 alpha f32 | 44 zero u32
    /// 48 global ids: count x u32 | vectors: count x dim x f32
    ///    lists: count x (degree u32, degree x local id u32)
    /// ```
    pub fn to_bytes(&self) -> Vec<u8> {
        let edges: usize = self.adjacency.iter().map(Vec::len).sum();
        let mut out =
            Vec::with_capacity(HEADER_SIZE + 4 * (self.ids.len() * (2 + self.dim) + edges));
        out.extend_from_slice(&MAGIC);
        for v in [
            VERSION,
            self.metric.code(),
            self.dim as u32,
            self.ids.len() as u32,
            self.max_degree as u32,
            self.start,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.ratio.to_le_bytes());
        out.extend_from_slice(&self.alpha.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        self.ids
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        self.vectors
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        for list in &self.adjacency {
            out.extend_from_slice(&(list.len() as u32).to_le_bytes());
            list.iter()
                .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        }
        out
    }

    /// Parses [`to_bytes`](Self::to_bytes) output, checking every field.
    pub fn from_bytes(bytes: &[u8]) -> Result<EntranceGraph, EntranceError> {
        let mut r = Reader { bytes, pos: 0 };
        if r.take(8)? != MAGIC {
            return Err(format_err("bad magic; not an entrance graph"));
        }
        let version = r.u32()?;
        if version != VERSION {
            return Err(format_err(&format!(
                "version {version}, this build reads {VERSION}"
            )));
        }
        let code = r.u32()?;
        let metric =
            Metric::from_code(code).ok_or_else(|| format_err(&format!("metric code {code}")))?;
        let dim = r.u32()? as usize;
        let count = r.u32()? as usize;
        let max_degree = r.u32()? as usize;
        let start = r.u32()?;
        let ratio = f64::from_le_bytes(r.take(8)?.try_into().expect("8 bytes"));
        let alpha = r.f32()?;
        let _reserved = r.u32()?;
        check_header(dim, count, max_degree, start, ratio, alpha)?;
        // Every later field is at least 4 bytes per id, which bounds count before allocating.
        if count.saturating_mul(4 * (2 + dim)) > bytes.len() - HEADER_SIZE {
            return Err(format_err(&format!(
                "{count} vertices cannot fit in {} bytes",
                bytes.len()
            )));
        }
        let ids: Vec<VertexId> = (0..count).map(|_| r.u32()).collect::<Result<_, _>>()?;
        let mut local = HashMap::with_capacity(count);
        for (i, &g) in ids.iter().enumerate() {
            if local.insert(g, i as u32).is_some() {
                return Err(format_err(&format!("vertex {g} listed twice")));
            }
        }
        let vectors: Vec<f32> = (0..count * dim)
            .map(|_| r.f32())
            .collect::<Result<_, _>>()?;
        if let Some(bad) = vectors.iter().position(|x| !x.is_finite()) {
            return Err(format_err(&format!("vector value {bad} is not finite")));
        }
        let adjacency = (0..count)
            .map(|v| read_list(&mut r, v, count, max_degree))
            .collect::<Result<Vec<_>, _>>()?;
        if r.pos != bytes.len() {
            return Err(format_err(&format!(
                "{} trailing bytes",
                bytes.len() - r.pos
            )));
        }
        Ok(EntranceGraph {
            metric,
            dim,
            max_degree,
            alpha,
            ratio,
            ids,
            local,
            vectors,
            adjacency,
            start,
        })
    }
}

fn check_header(
    dim: usize,
    count: usize,
    max_degree: usize,
    start: u32,
    ratio: f64,
    alpha: f32,
) -> Result<(), EntranceError> {
    if dim == 0 || dim > crate::vector::MAX_DIM {
        return Err(format_err(&format!("dimension {dim}")));
    }
    if max_degree == 0 || max_degree > crate::graph::vamana::MAX_DEGREE {
        return Err(format_err(&format!("max degree {max_degree}")));
    }
    if count > 0 && start as usize >= count {
        return Err(format_err(&format!(
            "start {start} outside {count} vertices"
        )));
    }
    let ratio_ok = ratio > 0.0 && ratio <= 1.0;
    let alpha_ok = alpha.is_finite() && alpha >= 1.0;
    if !(ratio_ok && alpha_ok) {
        return Err(format_err(&format!(
            "ratio {ratio} or alpha {alpha} out of range"
        )));
    }
    Ok(())
}

fn read_list(
    r: &mut Reader,
    v: usize,
    count: usize,
    max_degree: usize,
) -> Result<Vec<u32>, EntranceError> {
    let degree = r.u32()? as usize;
    if degree > max_degree {
        return Err(format_err(&format!(
            "vertex {v} has degree {degree} over {max_degree}"
        )));
    }
    let list: Vec<u32> = (0..degree).map(|_| r.u32()).collect::<Result<_, _>>()?;
    if let Some(bad) = list
        .iter()
        .find(|&&u| u as usize >= count || u as usize == v)
    {
        return Err(format_err(&format!(
            "vertex {v} has invalid neighbour {bad}"
        )));
    }
    Ok(list)
}

fn format_err(m: &str) -> EntranceError {
    EntranceError::Format(m.to_string())
}

/// Bounds-checked little-endian reads.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], EntranceError> {
        let end = self.pos.checked_add(len).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| format_err(&format!("truncated at byte {}", self.pos)))?;
        let slice = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(slice)
    }

    fn u32(&mut self) -> Result<u32, EntranceError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn f32(&mut self) -> Result<f32, EntranceError> {
        Ok(f32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
}
