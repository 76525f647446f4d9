//! CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320), the checksum of every side-file
//! header and edge page, computed by the `crc32fast` crate (carry-less multiplication where
//! the CPU has it: every edge page read is verified, so this is on the hot path). It detects
//! torn and bit-flipped pages; it is not a defence against tampering.

/// Incremental CRC-32 so that a checksum can skip the field that stores it.
#[derive(Clone, Debug, Default)]
pub struct Crc32(crc32fast::Hasher);

impl Crc32 {
    pub fn new() -> Self {
        Crc32(crc32fast::Hasher::new())
    }

    pub fn update(mut self, bytes: &[u8]) -> Self {
        self.0.update(bytes);
        self
    }

    pub fn finish(self) -> u32 {
        self.0.finalize()
    }
}

/// CRC-32 of one byte string.
pub fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_standard_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn incremental_equals_one_shot() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        let split = Crc32::new()
            .update(&data[..333])
            .update(&data[333..])
            .finish();
        assert_eq!(split, crc32(&data));
    }
}
