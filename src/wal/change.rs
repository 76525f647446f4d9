//! The `CHANGE` record (0x30): the buffer-managed part of one change of the engine's write
//! seam (`navis_engine::update::IndexLog`, RFC 0001 §10), replayed by the engine's own page
//! functions (`navis_engine::relation::apply`), so the primary, plain-file stores and redo
//! cannot disagree about what a change does to a page.
//!
//! One record holds the whole change, so it is atomic: its block references are every page
//! of the change's footprint, in footprint order. Buffer-managed pages (indirection, codes,
//! promotions) are registered `REGBUF_STANDARD`. Bulk pages, which never enter
//! shared_buffers, are registered with `XLogRegisterBlock`: a fresh edge page with
//! `REGBUF_FORCE_IMAGE` (redo writes it whole, which also repairs a torn write), a vector page
//! `REGBUF_STANDARD` (an image on its first change after a checkpoint, otherwise only the
//! slot, which the main data carries). Main data, little-endian:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 1 | variant: 1 edge page, 2 vector, 3 delete flags, 4 free, 5 promote |
//! | 1 | 1 | n, the block references |
//! | 2 | 2 | 0 |
//! | 4 | 12 | geometry: max degree, dimension, PQ code bytes (u32 each) |
//! | 16 | 8 n | per block reference: page kind (u8), 3 zero bytes, ordinal (u32) |
//! | 16 + 8 n | … | the variant's body |
//!
//! Bodies:
//!
//! - edge page: ordinal (u32), heap TID of published vertices (block u32, offset u16), list
//!   count (u16), then per list 16 bytes: vertex (u32), slot (u16), 1 if relocated else 0
//!   (u16), old page (u32), old slot (u16), 0 (u16);
//! - vector: vertex (u32), TID (block u32, offset u16), 0 (u16), the vector (dim × f32), the
//!   PQ code (code bytes);
//! - delete flags, free: count (u32), vertex ids (u32 each);
//! - promote: stream offset (u64), length (u32), the record's bytes.
//!
//! Redo, per block reference, bulk pages included: `XLogReadBufferForRedo` (which restores an
//! image when the record has one) and, when it says `BLK_NEEDS_REDO`, `apply::apply` on the
//! page (formatting it first if it is new). Bulk pages thus go through shared_buffers in redo
//! (RFC 0001 §5: PostgreSQL then advances `minRecoveryPoint` in batches as it writes them).
//! Idempotent like every `apply`.

use navis_engine::pages::edge::EdgeLayout;
use navis_engine::pages::PageKind;
use navis_engine::relation::apply::{Change, Geometry, PageRef};
use navis_engine::storage::{EdgeLocation, HeapTid, StorageError};
use navis_engine::update::{EdgePageChange, PlacedList, VectorChange};
use navis_engine::VertexId;

/// `xl_info` high nibble of a change record.
pub const XLOG_NAVIS_CHANGE: u8 = 0x30;

const EDGE_PAGE: u8 = 1;
const VECTOR: u8 = 2;
const DELETE_FLAGS: u8 = 3;
const FREE: u8 = 4;
const PROMOTE: u8 = 5;
const LIST: usize = 16;

/// Encodes `change` whose buffer-managed pages are `refs` (the block references, in order).
pub fn encode(g: &Geometry, change: &Change<'_>, refs: &[PageRef]) -> Vec<u8> {
    let variant = match change {
        Change::EdgePage(_) => EDGE_PAGE,
        Change::Vector(_) => VECTOR,
        Change::DeleteFlags(_) => DELETE_FLAGS,
        Change::Free(_) => FREE,
        Change::Promote { .. } => PROMOTE,
    };
    let mut out = vec![variant, refs.len() as u8, 0, 0];
    for v in [
        g.edges.max_degree() as u32,
        g.vectors.layout().dim() as u32,
        g.codes.pq_bytes() as u32,
    ] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    for r in refs {
        out.extend_from_slice(&[r.kind as u8, 0, 0, 0]);
        out.extend_from_slice(&r.ordinal.to_le_bytes());
    }
    let tid = |out: &mut Vec<u8>, t: HeapTid| {
        out.extend_from_slice(&t.block.to_le_bytes());
        out.extend_from_slice(&t.offset.to_le_bytes());
    };
    match change {
        Change::EdgePage(c) => {
            out.extend_from_slice(&c.page.to_le_bytes());
            tid(&mut out, c.tid);
            out.extend_from_slice(&(c.lists.len() as u16).to_le_bytes());
            for l in c.lists {
                let old = l.old.unwrap_or(EdgeLocation { page: 0, slot: 0 });
                out.extend_from_slice(&l.vertex.to_le_bytes());
                out.extend_from_slice(&l.slot.to_le_bytes());
                out.extend_from_slice(&u16::from(l.old.is_some()).to_le_bytes());
                out.extend_from_slice(&old.page.to_le_bytes());
                out.extend_from_slice(&old.slot.to_le_bytes());
                out.extend_from_slice(&[0, 0]);
            }
        }
        Change::Vector(c) => {
            out.extend_from_slice(&c.vertex.to_le_bytes());
            tid(&mut out, c.tid);
            out.extend_from_slice(&[0, 0]);
            for x in c.vector {
                out.extend_from_slice(&x.to_le_bytes());
            }
            out.extend_from_slice(c.code);
        }
        Change::DeleteFlags(ids) | Change::Free(ids) => {
            out.extend_from_slice(&(ids.len() as u32).to_le_bytes());
            for v in *ids {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        Change::Promote { offset, record } => {
            out.extend_from_slice(&offset.to_le_bytes());
            out.extend_from_slice(&(record.len() as u32).to_le_bytes());
            out.extend_from_slice(record);
        }
    }
    out
}

/// A decoded record: owns what a [`Change`] borrows.
#[derive(Debug, PartialEq)]
pub struct Decoded {
    pub geometry: Geometry,
    pub refs: Vec<PageRef>,
    body: Body,
}

#[derive(Debug, PartialEq)]
enum Body {
    EdgePage {
        page: u32,
        tid: HeapTid,
        lists: Vec<PlacedList>,
    },
    Vector {
        vertex: VertexId,
        tid: HeapTid,
        vector: Vec<f32>,
        code: Vec<u8>,
    },
    DeleteFlags(Vec<VertexId>),
    Free(Vec<VertexId>),
    Promote {
        offset: u64,
        record: Vec<u8>,
    },
}

/// Reads little-endian fields off the front of a byte slice.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], StorageError> {
        if self.0.len() < n {
            return Err(StorageError::invalid("navis CHANGE record is truncated"));
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }
    fn u16(&mut self) -> Result<u16, StorageError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().unwrap()))
    }
    fn u32(&mut self) -> Result<u32, StorageError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64, StorageError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn tid(&mut self) -> Result<HeapTid, StorageError> {
        Ok(HeapTid {
            block: self.u32()?,
            offset: self.u16()?,
        })
    }
    fn ids(&mut self) -> Result<Vec<VertexId>, StorageError> {
        let n = self.u32()? as usize;
        (0..n).map(|_| self.u32()).collect()
    }
}

pub fn decode(data: &[u8]) -> Result<Decoded, StorageError> {
    let mut c = Cursor(data);
    let head = c.take(4)?;
    let (variant, n) = (head[0], head[1] as usize);
    let (max_degree, dim, pq_bytes) = (c.u32()?, c.u32()?, c.u32()?);
    let geometry = Geometry {
        edges: EdgeLayout::new(max_degree as usize)?,
        vectors: navis_engine::pages::vector::VectorPages::new(dim as usize)?,
        codes: navis_engine::pages::codes::CodePages::new(pq_bytes as usize)?,
    };
    let mut refs = Vec::with_capacity(n);
    for _ in 0..n {
        let kind = c.take(4)?[0];
        let kind = PageKind::from_u8(kind)
            .ok_or_else(|| StorageError::invalid(format!("unknown page kind {kind}")))?;
        refs.push(PageRef {
            kind,
            ordinal: c.u32()?,
        });
    }
    let body = match variant {
        EDGE_PAGE => {
            let page = c.u32()?;
            let tid = c.tid()?;
            let count = c.u16()? as usize;
            let mut lists = Vec::with_capacity(count);
            for _ in 0..count {
                let list = c.take(LIST)?;
                let mut l = Cursor(list);
                let (vertex, slot, relocated) = (l.u32()?, l.u16()?, l.u16()?);
                let old = EdgeLocation {
                    page: l.u32()?,
                    slot: l.u16()?,
                };
                lists.push(PlacedList {
                    vertex,
                    slot,
                    old: (relocated != 0).then_some(old),
                });
            }
            Body::EdgePage { page, tid, lists }
        }
        VECTOR => {
            let vertex = c.u32()?;
            let tid = c.tid()?;
            c.take(2)?;
            let vector = c
                .take(4 * dim as usize)?
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                .collect();
            let code = c.take(pq_bytes as usize)?.to_vec();
            Body::Vector {
                vertex,
                tid,
                vector,
                code,
            }
        }
        DELETE_FLAGS => Body::DeleteFlags(c.ids()?),
        FREE => Body::Free(c.ids()?),
        PROMOTE => {
            let offset = c.u64()?;
            let len = c.u32()? as usize;
            Body::Promote {
                offset,
                record: c.take(len)?.to_vec(),
            }
        }
        other => {
            return Err(StorageError::invalid(format!(
                "unknown navis CHANGE variant {other}"
            )))
        }
    };
    if !c.0.is_empty() {
        return Err(StorageError::invalid(format!(
            "navis CHANGE record has {} bytes past its body",
            c.0.len()
        )));
    }
    Ok(Decoded {
        geometry,
        refs,
        body,
    })
}

impl Decoded {
    /// Calls `f` with the change as the engine's value (the edge page's image is not in the
    /// record: only its bulk page needs it, and that was logged as an image).
    pub fn with_change<R>(&self, f: impl FnOnce(&Change<'_>) -> R) -> R {
        match &self.body {
            Body::EdgePage { page, tid, lists } => {
                let c = EdgePageChange {
                    page: *page,
                    image: &[],
                    lists,
                    tid: *tid,
                };
                f(&Change::EdgePage(&c))
            }
            Body::Vector {
                vertex,
                tid,
                vector,
                code,
            } => {
                let c = VectorChange {
                    vertex: *vertex,
                    vector,
                    tid: *tid,
                    code,
                };
                f(&Change::Vector(&c))
            }
            Body::DeleteFlags(ids) => f(&Change::DeleteFlags(ids)),
            Body::Free(ids) => f(&Change::Free(ids)),
            Body::Promote { offset, record } => f(&Change::Promote {
                offset: *offset,
                record,
            }),
        }
    }

    /// `rm_desc`'s text.
    pub fn describe(&self) -> String {
        let what = match &self.body {
            Body::EdgePage { page, lists, .. } => {
                let published = lists.iter().filter(|l| l.old.is_none()).count();
                format!(
                    "EDGE_PAGE {page}: {} lists ({published} published, {} relocated)",
                    lists.len(),
                    lists.len() - published
                )
            }
            Body::Vector { vertex, tid, .. } => {
                format!(
                    "VECTOR vertex {vertex}, heap ({}, {})",
                    tid.block, tid.offset
                )
            }
            Body::DeleteFlags(ids) => format!("DELETE_FLAGS {} vertices", ids.len()),
            Body::Free(ids) => format!("FREE {} vertices", ids.len()),
            Body::Promote { offset, record } => {
                format!("PROMOTE {} bytes at {offset}", record.len())
            }
        };
        format!("{what}; {} pages", self.refs.len())
    }
}
