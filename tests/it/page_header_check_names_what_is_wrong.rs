//! `inspect::check_page_header`, the one page-header check the reader and wal-dump share,
//! accepts a page as written and names what is wrong with one that is not: a broken header, a
//! page at another address, an encryption flag that does not fit the log's mode.

use crate::support;

use support::small_config;
use walcrypt::inspect::{PAGE_HEADER_LEN, check_page_header, segment_file_name};
use walcrypt::{CorruptionKind, KeyRing, Lsn, Mode, Reader, Wal};

#[test]
fn page_headers_are_accepted_as_written_and_refused_with_a_reason() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let wal = Wal::open(dir.path(), small_config(mode, &keys)).unwrap();
        for i in 0..20u8 {
            wal.append(1, &[i; 100]).unwrap();
        }
        wal.close().unwrap();
        let reader = Reader::open(dir.path(), Some(keys)).unwrap();
        let (log_id, page_size) = (reader.log_id(), reader.geometry().page_size);
        let segment = std::fs::read(dir.path().join(segment_file_name(Lsn(0)))).unwrap();
        // Page 0 holds the segment header; page 1 is the first page of records.
        let page = &segment[page_size as usize..][..PAGE_HEADER_LEN];

        let header = check_page_header(log_id, mode, Lsn(page_size), page)
            .unwrap_or_else(|kind| panic!("{mode}: a page as written: {kind}"));
        assert_eq!(header.page_lsn, Lsn(page_size), "{mode}");

        assert_eq!(
            check_page_header(log_id, mode, Lsn(2 * page_size), page).unwrap_err(),
            CorruptionKind::PageAddress {
                expected: Lsn(2 * page_size),
                got: Lsn(page_size)
            },
            "{mode}: a page read at another address"
        );
        assert_eq!(
            check_page_header(log_id ^ 1, mode, Lsn(page_size), page).unwrap_err(),
            CorruptionKind::BadPageHeader,
            "{mode}: another log's page (its checksum is seeded with the log id)"
        );
        let mut broken = page.to_vec();
        broken[0] ^= 0xFF;
        assert_eq!(
            check_page_header(log_id, mode, Lsn(page_size), &broken).unwrap_err(),
            CorruptionKind::BadPageHeader,
            "{mode}: a broken magic"
        );
        let other = if mode == Mode::PageLevel {
            Mode::Plaintext
        } else {
            Mode::PageLevel
        };
        assert_eq!(
            check_page_header(log_id, other, Lsn(page_size), page).unwrap_err(),
            CorruptionKind::BadPageHeader,
            "{mode}: read as a {other} log, the encryption flag does not fit"
        );
    }
}
