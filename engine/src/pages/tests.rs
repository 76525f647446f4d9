//! Tests of the common page header, special space, sealing and verification.

use super::*;

fn sealed(kind: PageKind, block: u32) -> Vec<u8> {
    let mut page = vec![0u8; BLOCK_SIZE];
    init(&mut page, kind, block);
    for (i, b) in payload_mut(&mut page).iter_mut().enumerate() {
        *b = (i * 31 % 251) as u8;
    }
    set_aux(&mut page, 0xA1B2_C3D4);
    seal(&mut page);
    page
}

/// PostgreSQL 15's `PageIsVerifiedExtended` header test, transcribed from bufpage.c.
fn postgres_accepts(page: &[u8]) -> bool {
    let flags = get_u16(page, 10);
    let (lower, upper, special) = (
        get_u16(page, 12) as usize,
        get_u16(page, 14) as usize,
        get_u16(page, 16) as usize,
    );
    if upper != 0 {
        flags & !PD_VALID_FLAG_BITS == 0
            && lower <= upper
            && upper <= special
            && special <= BLOCK_SIZE
            && special.is_multiple_of(8) // special == MAXALIGN(special)
            && lower >= PAGE_HEADER_SIZE
    } else {
        page.iter().all(|&b| b == 0)
    }
}

#[test]
fn constants() {
    assert_eq!(SPECIAL_OFFSET, 8176);
    assert_eq!(PAYLOAD_SIZE, 8152);
    assert_eq!(PAYLOAD_OFFSET % 8, 0);
    assert_eq!(EXTENT_BLOCKS as usize * BLOCK_SIZE, 1 << 20);
    for kind in PageKind::ALL {
        assert_eq!(PageKind::from_u8(kind as u8), Some(kind));
    }
    assert_eq!(PageKind::from_u8(0), None);
    assert_eq!(PageKind::from_u8(10), None);
    assert_eq!(PageKind::Vector as u8, 9);
    assert_eq!(extent_page(0), (0, 0));
    assert_eq!(extent_page(127), (0, 127));
    assert_eq!(extent_page(128), (1, 0));
    assert_eq!(extent_page(1000), (7, 104));
}

#[test]
fn header_layout_is_postgres_page_header_data() {
    let mut page = vec![0xEEu8; BLOCK_SIZE];
    init(&mut page, PageKind::Edge, 0x0102_0304);
    assert_eq!(&page[0..12], &[0u8; 12], "lsn, checksum, flags");
    assert_eq!(get_u16(&page, 12), 8176, "pd_lower");
    assert_eq!(get_u16(&page, 14), 8176, "pd_upper");
    assert_eq!(get_u16(&page, 16), 8176, "pd_special");
    assert_eq!(get_u16(&page, 18), 0x2004, "pd_pagesize_version = 8192 | 4");
    assert_eq!(get_u32(&page, 20), 0, "pd_prune_xid");
    assert!(payload(&page).iter().all(|&b| b == 0));
    assert_eq!(&page[8176..8180], &[0x56, 0x4E, 8, PAGE_FORMAT]);
    assert_eq!(&page[8180..8184], &[4, 3, 2, 1], "block, little-endian");
    assert_eq!(stamped_block(&page), 0x0102_0304);
    assert_eq!(kind_code(&page), 8);
    assert_eq!(aux(&page), 0);
    assert!(postgres_accepts(&page));
    assert!(postgres_accepts(&vec![0u8; BLOCK_SIZE]));
    seal(&mut page);
    verify(&page, PageKind::Edge, 0x0102_0304).unwrap();
}

#[test]
fn lsn_and_postgres_checksum_are_outside_the_crc() {
    let mut page = sealed(PageKind::Indirection, 9);
    set_lsn(&mut page, 0x0000_0012_3456_789A);
    assert_eq!(lsn(&page), 0x0000_0012_3456_789A);
    assert_eq!(get_u32(&page, 0), 0x12, "xlogid: high 32 bits");
    assert_eq!(get_u32(&page, 4), 0x3456_789A, "xrecoff: low 32 bits");
    set_u16(&mut page, 8, 0xBEEF);
    assert_eq!(pg_checksum(&page), 0xBEEF);
    verify(&page, PageKind::Indirection, 9).unwrap();
    assert!(postgres_accepts(&page));
    set_lsn(&mut page, u64::MAX);
    assert_eq!(lsn(&page), u64::MAX);
    verify(&page, PageKind::Indirection, 9).unwrap();
}

#[test]
fn every_other_byte_is_protected() {
    let page = sealed(PageKind::Codes, 77);
    let mut copy = page.clone();
    for at in 10..BLOCK_SIZE {
        if (8184..8188).contains(&at) {
            continue;
        }
        copy[at] ^= 0x01;
        assert!(
            verify(&copy, PageKind::Codes, 77).is_err(),
            "flip at byte {at} not detected"
        );
        copy[at] = page[at];
    }
    // The CRC field itself.
    copy[8186] ^= 0x80;
    assert!(matches!(
        verify(&copy, PageKind::Codes, 77),
        Err(PageError::Checksum { .. })
    ));
}

#[test]
fn errors_are_distinct_and_clear() {
    let page = sealed(PageKind::Vector, 5);
    verify(&page, PageKind::Vector, 5).unwrap();

    let zero = vec![0u8; BLOCK_SIZE];
    let err = verify(&zero, PageKind::Vector, 5).unwrap_err();
    assert_eq!(err, PageError::New { block: 5 });
    assert!(err.is_new() && is_new(&zero) && !is_new(&page));
    assert!(err.to_string().contains("new"), "{err}");

    let err = verify(&page[..4096], PageKind::Vector, 5).unwrap_err();
    assert_eq!(
        err,
        PageError::WrongSize {
            block: 5,
            len: 4096
        }
    );

    let err = verify(&page, PageKind::Edge, 5).unwrap_err();
    assert!(matches!(
        err,
        PageError::WrongKind {
            expected: PageKind::Edge,
            found: 9,
            ..
        }
    ));
    assert!(
        err.to_string()
            .contains("expected a page of kind edge, found vector"),
        "{err}"
    );

    let err = verify(&page, PageKind::Vector, 6).unwrap_err();
    assert_eq!(err, PageError::WrongBlock { block: 6, found: 5 });
    assert!(err.to_string().contains("misdirected"), "{err}");

    let mut other = page.clone();
    set_u16(&mut other, SPECIAL_OFFSET, 0x1234);
    assert!(matches!(
        verify(&other, PageKind::Vector, 5),
        Err(PageError::BadMagic { found: 0x1234, .. })
    ));

    // Another format is reported as such even though its CRC is of no concern here.
    let mut newer = page.clone();
    newer[SPECIAL_OFFSET + 3] = PAGE_FORMAT + 1;
    let err = verify(&newer, PageKind::Vector, 5).unwrap_err();
    assert_eq!(
        err,
        PageError::Format {
            block: 5,
            found: PAGE_FORMAT + 1
        }
    );
    let storage = err.into_storage(Path::new("base/5/16384"));
    assert!(matches!(
        storage,
        StorageError::Version {
            found: 2,
            expected: 1,
            ..
        }
    ));
    assert!(storage.to_string().contains("REINDEX"), "{storage}");

    let mut corrupt = page.clone();
    corrupt[4000] ^= 0xFF;
    let err = verify(&corrupt, PageKind::Vector, 5).unwrap_err();
    assert!(matches!(err, PageError::Checksum { block: 5, .. }));
    let storage = err.into_storage(Path::new("base/5/16384"));
    assert!(matches!(storage, StorageError::Corrupt { .. }));
    assert!(
        storage.to_string().contains("block 5: checksum mismatch"),
        "{storage}"
    );

    // A page PostgreSQL itself would reject is never taken for navis data.
    let mut headless = page.clone();
    set_u16(&mut headless, 14, 0);
    assert!(!postgres_accepts(&headless));
    assert!(matches!(
        verify(&headless, PageKind::Vector, 5),
        Err(PageError::BadHeader { .. })
    ));
    let mut flagged = page.clone();
    set_u16(&mut flagged, 10, 0x0008);
    assert!(!postgres_accepts(&flagged));
    assert!(matches!(
        verify(&flagged, PageKind::Vector, 5),
        Err(PageError::BadHeader { .. })
    ));
    // PageInit's pd_lower = 24 is valid for PostgreSQL but would let a standard full-page
    // image drop the payload: refused.
    let mut holed = page.clone();
    set_u16(&mut holed, 12, 24);
    assert!(postgres_accepts(&holed));
    let err = verify(&holed, PageKind::Vector, 5).unwrap_err();
    assert!(matches!(err, PageError::BadHeader { .. }), "{err}");
}

#[test]
fn ordinal_check() {
    let mut page = vec![0u8; BLOCK_SIZE];
    init(&mut page, PageKind::Codes, 300);
    set_aux(&mut page, 12);
    seal(&mut page);
    verify_ordinal(&page, PageKind::Codes, 300, 12).unwrap();
    let err = verify_ordinal(&page, PageKind::Codes, 300, 13).unwrap_err();
    assert_eq!(
        err,
        PageError::WrongOrdinal {
            block: 300,
            expected: 13,
            found: 12
        }
    );
}

#[test]
fn entry_layout() {
    let l = EntryLayout::new(16).unwrap();
    assert_eq!(l.per_page(), 509);
    assert_eq!(l.locate(510), (1, PAYLOAD_OFFSET + 16));
    assert_eq!(l.offset(508), PAYLOAD_OFFSET + 508 * 16);
    assert_eq!(l.pages_for(0), 0);
    assert_eq!(l.pages_for(509), 1);
    assert_eq!(l.pages_for(510), 2);
    assert_eq!(l.entries(&vec![0u8; BLOCK_SIZE]).len(), 509 * 16);
    assert_eq!(EntryLayout::new(PAYLOAD_SIZE).unwrap().per_page(), 1);
    assert!(EntryLayout::new(0).is_err());
    assert!(EntryLayout::new(PAYLOAD_SIZE + 1).is_err());
}
