//! A crash leaves the last written page torn at any byte, or garbage after the end: recovery
//! returns exactly the complete records, truncates there, and new appends continue.

use crate::support;

use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom, Write};

use support::{copy_dir, payload, read_all, segment_files, small_config};
use walcrypt::{KeyRing, Lsn, Mode, Wal};

/// Writes records of assorted sizes, the first half flushed one by one, the rest written out
/// by the writer's drop (as a crash during their flush would leave them), so the pages torn
/// below were all in flight in that last write (bytes that an earlier flush made durable cannot
/// be lost by a crash; losing them is corruption, tested elsewhere, and a flush or close that
/// returns vouches for them in the last page's header).
/// Returns (lsn, end, payload) for each record.
fn build_log(dir: &std::path::Path, mode: Mode, keys: &KeyRing) -> Vec<(Lsn, Lsn, Vec<u8>)> {
    let wal = Wal::open(dir, small_config(mode, keys)).unwrap();
    for i in 0..40u64 {
        let last = wal.append(1, &payload(i, (i as usize * 37) % 300)).unwrap();
        if i < 20 {
            wal.flush(last).unwrap();
        }
    }
    drop(wal);
    let reader = walcrypt::Reader::open(dir, Some(keys.clone())).unwrap();
    reader
        .records_from(Lsn::default())
        .map(|r| r.unwrap())
        .map(|r| (r.lsn, r.end_lsn, r.payload))
        .collect()
}

#[test]
fn truncating_the_last_page_at_every_byte_keeps_exactly_the_complete_records() {
    for mode in Mode::ALL {
        let original = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let records = build_log(original.path(), mode, &keys);
        let geo = walcrypt::Reader::open(original.path(), Some(keys.clone()))
            .unwrap()
            .geometry();
        let config = small_config(mode, &keys);
        let geo_page = geo.page_size;
        let seg_size = geo.segment_size;
        let end = u64::from(records.last().unwrap().1);
        let last_page = (end - 1) - (end - 1) % geo_page;
        let segment = last_page - last_page % seg_size;
        let file_name = walcrypt::inspect::segment_file_name(Lsn(segment));
        let page_start = (last_page - segment) as usize;
        let page = std::fs::read(original.path().join(&file_name)).unwrap()
            [page_start..page_start + geo_page as usize]
            .to_vec();
        for cut in 0..geo_page {
            let dir = tempfile::tempdir().unwrap();
            copy_dir(original.path(), dir.path());
            let path = dir.path().join(&file_name);
            let file = OpenOptions::new().write(true).open(&path).unwrap();
            // Bytes from `cut` on in the last page never reached the disk.
            file.set_len(last_page - segment + cut).unwrap();
            drop(file);

            // A torn page reads as zeros from the cut on, so zero bytes just after the cut
            // were not lost: a record whose last bytes are zero (a tag or ciphertext byte,
            // 1 in 256) is still complete when only those are cut off.
            let kept = cut + page[cut as usize..].iter().take_while(|&&b| b == 0).count() as u64;
            let boundary = last_page + kept;
            let header_intact = kept >= walcrypt::inspect::PAGE_HEADER_LEN as u64;
            let expected: Vec<_> = records
                .iter()
                .filter(|(_, e, _)| {
                    let e = u64::from(*e);
                    e <= last_page || (header_intact && e <= boundary)
                })
                .map(|(l, _, p)| (*l, 1u8, p.clone()))
                .collect();

            let wal = Wal::open(dir.path(), config.clone())
                .unwrap_or_else(|e| panic!("{mode} cut {cut}: open failed: {e}"));
            let lsn = wal.append(2, b"after the crash").unwrap();
            wal.flush(lsn).unwrap();
            wal.close().unwrap();
            let mut got = read_all(dir.path(), Some(keys.clone()));
            let last = got.pop().unwrap();
            assert_eq!(last.2, b"after the crash", "{mode} cut {cut}");
            let lsns = |v: &[(Lsn, u8, Vec<u8>)]| v.iter().map(|r| r.0).collect::<Vec<_>>();
            assert_eq!(
                lsns(&got),
                lsns(&expected),
                "{mode} cut {cut} (page {last_page})"
            );
            assert!(got == expected, "{mode} cut {cut}: payloads differ");
        }
    }
}

#[test]
fn garbage_after_the_end_is_cut_off() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let records = build_log(dir.path(), mode, &keys);
        let end = u64::from(records.last().unwrap().1);
        let geo = walcrypt::Reader::open(dir.path(), Some(keys.clone()))
            .unwrap()
            .geometry();
        let config = small_config(mode, &keys);
        // Random bytes from the end of the log to the end of its segment file.
        let segment = end - end % geo.segment_size;
        // (A segment prepared ahead may follow it.)
        let path = dir
            .path()
            .join(walcrypt::inspect::segment_file_name(Lsn(segment)));
        assert!(segment_files(dir.path()).contains(&path));
        let mut file = OpenOptions::new().write(true).open(&path).unwrap();
        file.seek(SeekFrom::Start(end - segment)).unwrap();
        let garbage = payload(99, (geo.segment_size - (end - segment)) as usize);
        file.write_all(&garbage).unwrap();
        drop(file);

        let expected: Vec<_> = records
            .iter()
            .map(|(l, _, p)| (*l, 1u8, p.clone()))
            .collect();
        assert_eq!(
            read_all(dir.path(), Some(keys.clone())),
            expected,
            "{mode}: reader"
        );
        let wal = Wal::open(dir.path(), config).unwrap();
        let lsn = wal.append(3, b"next").unwrap();
        // pagelevel never writes the page holding the end again: it continues on the next
        // page, after a resume record (12 B header, 8 B payload).
        let page = geo.page_start(Lsn(end)).0;
        let next = if mode == Mode::PageLevel && end > page + 48 {
            geo.skip_headers(Lsn(page + geo.page_size)).0 + 20
        } else {
            end
        };
        assert_eq!(u64::from(lsn), next, "{mode}: continues at the old end");
        wal.close().unwrap();
        let mut got = read_all(dir.path(), Some(keys));
        assert_eq!(got.pop().unwrap().2, b"next");
        assert_eq!(got, expected, "{mode}");
    }
}
