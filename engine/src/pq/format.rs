//! The serialised codebook: [`ProductQuantizer::to_bytes`] and [`ProductQuantizer::from_bytes`].

use super::{check_shape, PqError, ProductQuantizer, MAX_CENTROIDS};
use crate::Metric;

// Serialised codebook: a 32-byte header, the codebook, and a checksum.
//
//   0  [u8; 8]  magic "NAVISPQ\0"
//   8  u32      format version (1)
//  12  u32      metric code (Metric::code)
//  16  u32      dim
//  20  u32      pq_bytes
//  24  u32      centroids per subspace
//  28  u32      reserved, 0
//  32  f32 × (centroids · dim)   codebook, layout of ProductQuantizer::codebook
//  ..  u64      FNV-1a of all preceding bytes
//
// All little-endian. The subspace split is derived from (dim, pq_bytes); a change to that
// rule needs a new version.
const MAGIC: [u8; 8] = *b"NAVISPQ\0";
const FORMAT_VERSION: u32 = 1;
const HEADER_BYTES: usize = 32;

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

impl ProductQuantizer {
    /// The codebook in the format [`ProductQuantizer::from_bytes`] reads.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_BYTES + 4 * self.codebook.len() + 8);
        out.extend_from_slice(&MAGIC);
        for field in [
            FORMAT_VERSION,
            self.metric.code(),
            self.dim as u32,
            self.pq_bytes() as u32,
            self.k as u32,
            0,
        ] {
            out.extend_from_slice(&field.to_le_bytes());
        }
        for v in &self.codebook {
            out.extend_from_slice(&v.to_le_bytes());
        }
        let checksum = fnv1a(&out);
        out.extend_from_slice(&checksum.to_le_bytes());
        out
    }

    /// Reads a codebook written by [`ProductQuantizer::to_bytes`], rejecting anything else.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, PqError> {
        let bad = |m: String| Err(PqError::BadCodebook(m));
        if bytes.len() < MAGIC.len() || bytes[..MAGIC.len()] != MAGIC {
            return bad("not a navis PQ codebook (bad magic)".into());
        }
        if bytes.len() < HEADER_BYTES {
            return bad(format!(
                "PQ codebook truncated: {} bytes, header needs {HEADER_BYTES}",
                bytes.len()
            ));
        }
        let version = read_u32(bytes, 8);
        if version != FORMAT_VERSION {
            return bad(format!(
                "PQ codebook format version {version} is not supported (expected {FORMAT_VERSION})"
            ));
        }
        let Some(metric) = Metric::from_code(read_u32(bytes, 12)) else {
            return bad(format!(
                "PQ codebook has unknown metric code {}",
                read_u32(bytes, 12)
            ));
        };
        let (dim, m, k) = (
            read_u32(bytes, 16) as usize,
            read_u32(bytes, 20) as usize,
            read_u32(bytes, 24) as usize,
        );
        check_shape(dim, m)
            .map_err(|e| PqError::BadCodebook(format!("PQ codebook header: {e}")))?;
        if k == 0 || k > MAX_CENTROIDS {
            return bad(format!("PQ codebook header: {k} centroids per subspace"));
        }
        let expected = HEADER_BYTES + 4 * k * dim + 8;
        if bytes.len() != expected {
            return bad(format!(
                "PQ codebook has {} bytes, expected {expected} for {k} centroids of {dim} dimensions (truncated or trailing data)",
                bytes.len()
            ));
        }
        let body = expected - 8;
        let stored = u64::from_le_bytes(bytes[body..].try_into().expect("8 bytes"));
        if stored != fnv1a(&bytes[..body]) {
            return bad("PQ codebook checksum mismatch (corrupt file)".into());
        }
        let codebook = bytes[HEADER_BYTES..body]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        Self::from_codebook(metric, dim, m, k, codebook)
    }
}
