//! Helpers for the tampering scenarios: read and rewrite a record's bytes in place and
//! recompute its CRC32C, as someone with write access to the files (but not the key) can.

use std::os::unix::fs::FileExt;
use std::path::Path;

use walcrypt::inspect::{
    FORMAT_VERSION, REC_CRC_AT, REC_LEN_AT, RECORD_HEADER_ENCRYPTED, RECORD_HEADER_PLAIN,
    RecordHeader, SegmentHeader, parse_segment_file_name, record_crc, segment_file_name,
};
use walcrypt::{Lsn, Reader};

/// A record as it sits in the files: its position and stored bytes (header and payload).
#[derive(Clone, Debug)]
pub struct OnDisk {
    pub lsn: u64,
    pub bytes: Vec<u8>,
}

/// Every record of the log that lies inside one page, with its stored bytes.
pub fn single_page_records(dir: &Path) -> Vec<OnDisk> {
    let reader = Reader::open(dir, None).expect("open reader");
    let page = reader.geometry().page_size;
    let mut out = Vec::new();
    for rec in reader.raw_records_from(Lsn::default()) {
        let rec = rec.expect("raw record");
        let lsn = u64::from(rec.lsn);
        let len = rec.header.len_bytes() + rec.stored.len();
        if lsn / page == (lsn + len as u64 - 1) / page {
            out.push(OnDisk {
                lsn,
                bytes: read_at(dir, &reader, lsn, len),
            });
        }
    }
    out
}

fn file_and_offset(reader: &Reader, dir: &Path, lsn: u64) -> (std::path::PathBuf, u64) {
    let seg = reader.geometry().segment_start(Lsn(lsn)).0;
    (dir.join(segment_file_name(Lsn(seg))), lsn - seg)
}

fn read_at(dir: &Path, reader: &Reader, lsn: u64, len: usize) -> Vec<u8> {
    let (path, offset) = file_and_offset(reader, dir, lsn);
    let file = std::fs::File::open(path).expect("open segment");
    let mut bytes = vec![0u8; len];
    file.read_exact_at(&mut bytes, offset).expect("read record");
    bytes
}

/// Writes `bytes` at log position `lsn` (inside one page).
pub fn write_at(dir: &Path, lsn: u64, bytes: &[u8]) {
    let reader = Reader::open(dir, None).expect("open reader");
    let (path, offset) = file_and_offset(&reader, dir, lsn);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open segment for writing");
    file.write_all_at(bytes, offset).expect("write record");
}

/// Flips the bits of `mask` in the byte at log position `lsn`.
pub fn flip_bits_at(dir: &Path, lsn: u64, mask: u8) {
    let reader = Reader::open(dir, None).expect("open reader");
    let (path, offset) = file_and_offset(&reader, dir, lsn);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open segment for writing");
    let mut b = [0u8; 1];
    file.read_exact_at(&mut b, offset).expect("read byte");
    b[0] ^= mask;
    file.write_all_at(&b, offset).expect("write byte");
}

/// Recomputes the CRC32C of a stored perrecord record (32-byte header, then the payload) that
/// starts at `lsn` in a segment of the current format version.
pub fn fix_crc(record: &mut [u8], lsn: u64) {
    let (header, payload) = record.split_at(RECORD_HEADER_ENCRYPTED);
    let crc = record_crc(FORMAT_VERSION, Lsn(lsn), header, payload);
    record[REC_CRC_AT..REC_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
}

/// The length field of a stored record's header.
pub fn stored_len(record: &[u8]) -> u32 {
    u32::from_le_bytes(record[REC_LEN_AT..REC_LEN_AT + 4].try_into().unwrap())
}

/// Overwrites the length field of a stored record's header (the CRC is left as it was).
pub fn set_stored_len(record: &mut [u8], len: u32) {
    record[REC_LEN_AT..REC_LEN_AT + 4].copy_from_slice(&len.to_le_bytes());
}

/// A control record as someone without the key can write it: a 12-byte header with `flags`
/// (switch or resume), its length field counting `stored`, then `stored`, with the checksum
/// recomputed for a record at `lsn` in a segment of the current format version.
pub fn forged_control(lsn: u64, flags: u8, stored: &[u8]) -> Vec<u8> {
    let header = RecordHeader {
        crc: 0,
        len: stored.len() as u32,
        kind: 0,
        flags,
        encryption: None,
    };
    let mut record = vec![0u8; RECORD_HEADER_PLAIN];
    header.encode(&mut record);
    let crc = record_crc(FORMAT_VERSION, Lsn(lsn), &record, stored);
    record[REC_CRC_AT..REC_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    record.extend_from_slice(stored);
    record
}

/// Rewrites the header of every segment of the log in `dir` with `edit` applied, its
/// checksum recomputed: what relabelling a log takes.
pub fn rewrite_segment_headers(dir: &Path, mut edit: impl FnMut(&mut SegmentHeader)) {
    for (_, path) in segment_paths(dir) {
        let mut page = std::fs::read(&path).expect("read segment");
        let mut header = SegmentHeader::decode(&page).expect("segment header");
        edit(&mut header);
        page[..header.encoded_len()].fill(0);
        header.encode(&mut page);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open segment for writing");
        file.write_all_at(&page[..header.encoded_len()], 0)
            .expect("write segment header");
    }
}

/// The segment files of `dir` with their starts, oldest first.
fn segment_paths(dir: &Path) -> Vec<(u64, std::path::PathBuf)> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .expect("read dir")
        .filter_map(|e| {
            let path = e.expect("dir entry").path();
            let name = path.file_name()?.to_str()?.to_owned();
            parse_segment_file_name(&name).map(|start| (u64::from(start), path))
        })
        .collect();
    out.sort();
    out
}
