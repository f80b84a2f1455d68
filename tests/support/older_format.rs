//! Logs as a writer of an older format version left them.

use std::os::unix::fs::FileExt;
use std::path::Path;

use walcrypt::inspect::{
    KCV_ENTRY, SEG_NKEYS_AT, SEG_VERSION_AT, SEGMENT_HEADER_FIXED, record_crc_unbound,
    segment_file_name,
};
use walcrypt::{KeyRing, Lsn, Reader};

/// Rewrites the log in `dir` as a version-2 writer would have left it: every record's checksum
/// without the LSN, every segment header (the prepared one too) at version 2, resealed.
pub fn rewrite_as_version_2(dir: &Path, keys: &KeyRing) {
    let reader = Reader::open(dir, Some(keys.clone())).unwrap();
    let geo = reader.geometry();
    let write_stream = |lsn: u64, bytes: &[u8]| {
        let mut pos = lsn;
        for &b in bytes {
            pos = geo.skip_headers(pos);
            let segment = geo.segment_start(pos);
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(dir.join(segment_file_name(Lsn(segment))))
                .unwrap();
            file.write_all_at(&[b], pos - segment).unwrap();
            pos += 1;
        }
    };
    for r in reader.raw_records_from(Lsn::default()) {
        let r = r.unwrap();
        let mut head = vec![0u8; r.header.len_bytes()];
        r.header.encode(&mut head);
        let crc = record_crc_unbound(&head, &r.stored);
        write_stream(u64::from(r.lsn), &crc.to_le_bytes());
    }
    for seg in reader.segments() {
        let path = dir.join(segment_file_name(seg.header.start));
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[SEG_VERSION_AT..SEG_VERSION_AT + 4].copy_from_slice(&2u32.to_le_bytes());
        let nkeys = u16::from_le_bytes([bytes[SEG_NKEYS_AT], bytes[SEG_NKEYS_AT + 1]]) as usize;
        let end = SEGMENT_HEADER_FIXED + nkeys * KCV_ENTRY;
        let crc = crc32c::crc32c(&bytes[..end]);
        bytes[end..end + 4].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&path, bytes).unwrap();
    }
}
