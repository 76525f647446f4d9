//! Bringing a hot standby's runtime copy forward to pages redo changed (RFC 0001 §3), page by
//! page, instead of making a new copy after every replayed change.
//!
//! The caller (the PostgreSQL layer, under the index's allocator lock so that two backends
//! never write one copy with pages of different ages) reads every block
//! [`super::changed_blocks::ChangedBlocks::since`] names and hands the pages here:
//!
//! - code and indirection pages are copied into the copy: codes first, then entries, so no
//!   vertex is published before its code; an entry is written only where it differs, and the
//!   copy's counts (published, deleted, the id high-water mark) follow;
//! - promotions pages: the records after the copy's last applied one are applied to its
//!   shared entrance graph and appended to its `entrance.log`, as a primary's promotion does;
//! - edge and vector pages are read by searches from the fork, not from the copy: the caller
//!   must make sure the fork has them (write out the buffers redo left them in) before it
//!   applies the hot pages that point at them;
//! - the metapage and extent-map pages change only when the relation grows (runs are only
//!   appended): each backend's extent map re-reads itself when a page lies beyond it, so they
//!   need nothing here;
//! - blob pages (codebook, entrance graph: written by a build) mean the copy must be made
//!   again, as for a lost change.

use super::apply::Geometry;
use crate::entrance::PromotionPlan;
use crate::index::Index;
use crate::pages::{self, indirection, PageKind};
use crate::pages::{PAYLOAD_OFFSET, PAYLOAD_SIZE};
use crate::storage::{Counter, Field, IndexFiles, IndirEntry, StorageError};
use crate::VertexId;

/// What one changed page means for a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageRole {
    /// Indirection, code or promotions page: applied to the copy by [`resync`].
    Hot,
    /// Edge or vector page: the fork must hold it before the hot pages are applied.
    Bulk,
    /// Metapage or extent-map page: nothing to do (extent maps refresh themselves).
    Layout,
    /// Anything else: the copy must be made again.
    Structural,
    /// A page of no kind (a zero page): nothing to do.
    Empty,
}

/// The role of a changed page.
pub fn role(page: &[u8]) -> PageRole {
    if page.iter().all(|&b| b == 0) {
        return PageRole::Empty;
    }
    match PageKind::from_u8(pages::kind_code(page)) {
        Some(PageKind::Indirection | PageKind::Codes | PageKind::Promotions) => PageRole::Hot,
        Some(PageKind::Edge | PageKind::Vector) => PageRole::Bulk,
        Some(PageKind::Meta | PageKind::ExtentMap) => PageRole::Layout,
        _ => PageRole::Structural,
    }
}

/// What [`resync`] changed in the copy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resynced {
    pub code_pages: u32,
    pub indirection_pages: u32,
    /// Entries that differed and were written.
    pub entries: u32,
    /// Entrance-graph promotions applied.
    pub promotions: u32,
}

/// Applies the hot pages among `pages` (each a whole block, as [`role`] says `Hot`) to the
/// runtime copy of `index`. Codes go in before entries, entries before promotions (a
/// promoted vertex is published). Pages that fail their check (kind, ordinal, CRC) are
/// errors: redo wrote them whole. So is a promotion stream whose new records are not all on
/// `pages`: the caller makes a new copy.
pub fn resync(
    index: &Index,
    geometry: &Geometry,
    pages: &[&[u8]],
) -> Result<Resynced, StorageError> {
    let files = index.files();
    let mut done = Resynced::default();
    let kind_of = |page: &[u8]| PageKind::from_u8(pages::kind_code(page));
    for page in pages.iter().filter(|p| kind_of(p) == Some(PageKind::Codes)) {
        resync_codes(files, geometry, page)?;
        done.code_pages += 1;
    }
    for page in pages
        .iter()
        .filter(|p| kind_of(p) == Some(PageKind::Indirection))
    {
        done.entries += resync_entries(files, page)?;
        done.indirection_pages += 1;
    }
    let mut promotions: Vec<&[u8]> = pages
        .iter()
        .copied()
        .filter(|p| kind_of(p) == Some(PageKind::Promotions))
        .collect();
    if !promotions.is_empty() {
        promotions.sort_by_key(|p| pages::aux(p));
        done.promotions = resync_promotions(index, &promotions)?;
    }
    let state = files.state();
    state.count(Counter::StandbyResyncs, 1);
    state.count(
        Counter::StandbyPagesResynced,
        (done.code_pages + done.indirection_pages) as u64,
    );
    Ok(done)
}

fn checked(page: &[u8], kind: PageKind) -> Result<u32, StorageError> {
    let ordinal = pages::aux(page);
    let block = pages::stamped_block(page);
    pages::verify_ordinal(page, kind, block, ordinal)
        .map_err(|e| StorageError::invalid(format!("changed {} page: {e}", kind.name())))?;
    Ok(ordinal)
}

/// Vertex ids on a page of `per_page` entries numbered `ordinal`, capped at what the copy can
/// ever hold.
fn ids_of(files: &IndexFiles, ordinal: u32, per_page: usize) -> std::ops::Range<VertexId> {
    let first = ordinal as usize * per_page;
    let end = (first + per_page).min(files.max_vertices());
    first.min(end) as VertexId..end as VertexId
}

fn resync_codes(files: &IndexFiles, geometry: &Geometry, page: &[u8]) -> Result<(), StorageError> {
    let ordinal = checked(page, PageKind::Codes)?;
    let ids = ids_of(files, ordinal, geometry.codes.per_page());
    if ids.is_empty() {
        return Ok(());
    }
    files.grow_vertices(ids.end as usize)?;
    for v in ids {
        let code = geometry.codes.code(page, v);
        if files.pq_code(v) != Some(code) {
            files.write_pq_code(v, code)?;
        }
    }
    Ok(())
}

fn resync_entries(files: &IndexFiles, page: &[u8]) -> Result<u32, StorageError> {
    let ordinal = checked(page, PageKind::Indirection)?;
    let ids = ids_of(files, ordinal, indirection::ENTRIES_PER_PAGE);
    let table = files.indirection();
    let state = files.state();
    let mut written = 0;
    for v in ids {
        let new = indirection::entry(page, v);
        let old = table.entry(v);
        if new == old {
            continue;
        }
        let counts = |e: Option<IndirEntry>| match e {
            Some(e) if e.is_live() => (1i64, e.is_deleted() as i64),
            _ => (0, 0),
        };
        let (was_published, was_deleted) = counts(old);
        let (is_published, is_deleted) = counts(new);
        match new {
            Some(entry) => {
                files.grow_vertices(v as usize + 1)?;
                table.publish(v, entry)?;
                if state.get(Field::NextVertex) <= v {
                    state.set(Field::NextVertex, v + 1);
                }
            }
            None => table.release(v, crate::storage::state::NONE)?,
        }
        state.add(Field::Published, is_published - was_published);
        state.add(Field::Deleted, is_deleted - was_deleted);
        written += 1;
    }
    Ok(written)
}

/// Applies the promotion records that start at the copy's `EntranceLogBytes`: the stream
/// from there on lies on `pages` (sorted by ordinal), which must be consecutive.
fn resync_promotions(index: &Index, pages: &[&[u8]]) -> Result<u32, StorageError> {
    let files = index.files();
    let state = files.state();
    let applied = state.get(Field::EntranceLogBytes) as u64;
    let first = (applied / PAYLOAD_SIZE as u64) as u32;
    let mut stream = Vec::new();
    let mut expected = first;
    for page in pages {
        let ordinal = checked(page, PageKind::Promotions)?;
        if ordinal < first {
            continue; // an older page rewritten with the same bytes
        }
        if ordinal != expected {
            return Err(StorageError::invalid(format!(
                "promotions page {expected} did not change but records after it did"
            )));
        }
        stream.extend_from_slice(&page[PAYLOAD_OFFSET..PAYLOAD_OFFSET + PAYLOAD_SIZE]);
        expected += 1;
    }
    let skip = (applied - first as u64 * PAYLOAD_SIZE as u64) as usize;
    let new = &stream[skip.min(stream.len())..];
    let graph = index.entrance();
    let mut complete = 0;
    let mut count = 0;
    for (payload, taken) in pages::promotions::records(new) {
        let plan = PromotionPlan::from_bytes(payload)
            .map_err(|e| StorageError::invalid(format!("entrance promotion: {e}")))?;
        graph
            .apply(&plan)
            .map_err(|e| StorageError::invalid(format!("entrance promotion: {e}")))?;
        complete += taken;
        count += 1;
    }
    if complete > 0 {
        crate::update::promote::write_entrance_log(files, applied, &new[..complete])?;
        state.set(Field::EntranceLogBytes, (applied + complete as u64) as u32);
    }
    Ok(count)
}
