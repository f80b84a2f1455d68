//! Property tests: random record sequences round-trip in every mode, and random damage to a
//! valid log (bit flips, truncations, byte splices, duplicated or swapped pages, a segment
//! from another log) yields from the Reader and from Wal::open either a correct prefix of the
//! records or an error: never a wrong payload, never a panic.
//!
//! Half the cases compress payloads (LZ4) before sealing, with compressible payloads among
//! the records, so damaged compressed streams and length prefixes are covered too.
//!
//! WALCRYPT_PROPTEST_CASES sets the cases per property (default 64).

use crate::support;

use std::path::Path;

use proptest::prelude::*;
use proptest::test_runner::Config as PropConfig;
use walcrypt::{Compression, Config, KeyRing, Lsn, Mode, Reader, SyncMode, Wal};

const PAGE: u64 = 512;
const SEGMENT: u64 = 4096;

fn cases() -> u32 {
    support::env_usize("WALCRYPT_PROPTEST_CASES", 64) as u32
}

fn config(mode: Mode, keys: &KeyRing, compress: bool) -> Config {
    let compression = if compress {
        Compression::Lz4 { min_len: 32 }
    } else {
        Compression::Off
    };
    Config::new(mode)
        .keys(keys.clone())
        .sync(SyncMode::Buffered)
        .page_size(PAGE)
        .segment_size(SEGMENT)
        .buffer_size(2048)
        .compression(compression)
}

fn mode_strategy() -> impl Strategy<Value = Mode> {
    prop_oneof![
        Just(Mode::Plaintext),
        Just(Mode::PerRecord),
        Just(Mode::PageLevel),
        Just(Mode::PerRecordGcm)
    ]
}

fn records_strategy() -> impl Strategy<Value = Vec<(u8, Vec<u8>, bool)>> {
    let payload = prop_oneof![
        4 => proptest::collection::vec(any::<u8>(), 0..64),
        2 => proptest::collection::vec(any::<u8>(), 64..600),
        1 => proptest::collection::vec(any::<u8>(), 600..3000),
        // Compressible: a short random pattern repeated, with a few bytes changed.
        2 => (proptest::collection::vec(any::<u8>(), 1..24), 32usize..2000, any::<u64>())
            .prop_map(|(pattern, len, noise)| {
                let mut p: Vec<u8> = pattern.iter().copied().cycle().take(len).collect();
                for i in 0..4 {
                    let at = (noise >> (i * 16)) as usize % len;
                    p[at] ^= (noise >> (i * 8)) as u8 | 1;
                }
                p
            }),
    ];
    proptest::collection::vec((any::<u8>(), payload, any::<bool>()), 1..40)
}

type Written = Vec<(Lsn, u8, Vec<u8>)>;

fn write_log(
    dir: &Path,
    mode: Mode,
    keys: &KeyRing,
    compress: bool,
    records: &[(u8, Vec<u8>, bool)],
) -> Written {
    let wal = Wal::open(dir, config(mode, keys, compress)).unwrap();
    let mut out = Vec::new();
    for (kind, payload, flush) in records {
        let lsn = wal.append(*kind, payload).unwrap();
        if *flush {
            wal.flush(lsn).unwrap();
        }
        out.push((lsn, *kind, payload.clone()));
    }
    wal.close().unwrap();
    out
}

fn segments(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    v.sort();
    v
}

proptest! {
    #![proptest_config(PropConfig { cases: cases(), ..PropConfig::default() })]

    #[test]
    fn random_records_round_trip(
        mode in mode_strategy(),
        compress in any::<bool>(),
        records in records_strategy(),
    ) {
        let keys = KeyRing::generate().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let written = write_log(dir.path(), mode, &keys, compress, &records);
        let read: Written = support::try_read_records(dir.path(), &keys)
            .unwrap()
            .into_iter()
            .map(|r| (r.lsn, r.kind, r.payload))
            .collect();
        prop_assert!(read == written, "{} reader differs", mode);
        let mut replayed = Vec::new();
        let config = config(mode, &keys, compress);
        let wal = Wal::open_and_replay(dir.path(), config, Lsn::default(), |r| {
            replayed.push((r.lsn, r.kind, r.payload));
            Ok(())
        })
        .unwrap();
        wal.close().unwrap();
        prop_assert!(replayed == written, "{} replay differs", mode);
    }
}

#[derive(Debug, Clone)]
enum Mutation {
    FlipBit { seg: usize, at: u64, bit: u8 },
    Truncate { seg: usize, len: u64 },
    Splice { seg: usize, at: u64, bytes: Vec<u8> },
    DuplicatePage { seg: usize, from: u64, to: u64 },
    SwapPages { seg: usize, a: u64, b: u64 },
    ForeignSegment { seg: usize },
}

fn mutation_strategy() -> impl Strategy<Value = Vec<Mutation>> {
    let pages = SEGMENT / PAGE;
    let one = prop_oneof![
        3 => (any::<usize>(), 0..SEGMENT, 0u8..8)
            .prop_map(|(seg, at, bit)| Mutation::FlipBit { seg, at, bit }),
        1 => (any::<usize>(), 0..SEGMENT).prop_map(|(seg, len)| Mutation::Truncate { seg, len }),
        2 => (any::<usize>(), 0..SEGMENT, proptest::collection::vec(any::<u8>(), 1..64))
            .prop_map(|(seg, at, bytes)| Mutation::Splice { seg, at, bytes }),
        1 => (any::<usize>(), 0..pages, 0..pages)
            .prop_map(|(seg, from, to)| Mutation::DuplicatePage { seg, from, to }),
        1 => (any::<usize>(), 0..pages, 0..pages)
            .prop_map(|(seg, a, b)| Mutation::SwapPages { seg, a, b }),
        1 => any::<usize>().prop_map(|seg| Mutation::ForeignSegment { seg }),
    ];
    proptest::collection::vec(one, 1..4)
}

fn apply(dir: &Path, other: &Path, m: &Mutation) {
    let segs = segments(dir);
    let pick = |seg: usize| segs[seg % segs.len()].clone();
    match m {
        Mutation::FlipBit { seg, at, bit } => {
            let path = pick(*seg);
            let mut data = std::fs::read(&path).unwrap();
            if let Some(b) = data.get_mut(*at as usize) {
                *b ^= 1 << bit;
            }
            std::fs::write(&path, data).unwrap();
        }
        Mutation::Truncate { seg, len } => {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(pick(*seg))
                .unwrap();
            file.set_len(*len).unwrap();
        }
        Mutation::Splice { seg, at, bytes } => {
            let path = pick(*seg);
            let mut data = std::fs::read(&path).unwrap();
            for (i, b) in bytes.iter().enumerate() {
                if let Some(d) = data.get_mut(*at as usize + i) {
                    *d = *b;
                }
            }
            std::fs::write(&path, data).unwrap();
        }
        Mutation::DuplicatePage { seg, from, to } => {
            let path = pick(*seg);
            let mut data = std::fs::read(&path).unwrap();
            let (f, t, p) = ((from * PAGE) as usize, (to * PAGE) as usize, PAGE as usize);
            if data.len() >= f.max(t) + p {
                let page = data[f..f + p].to_vec();
                data[t..t + p].copy_from_slice(&page);
            }
            std::fs::write(&path, data).unwrap();
        }
        Mutation::SwapPages { seg, a, b } => {
            let path = pick(*seg);
            let mut data = std::fs::read(&path).unwrap();
            let (a, b, p) = ((a * PAGE) as usize, (b * PAGE) as usize, PAGE as usize);
            if data.len() >= a.max(b) + p && a != b {
                let pa = data[a..a + p].to_vec();
                let pb = data[b..b + p].to_vec();
                data[a..a + p].copy_from_slice(&pb);
                data[b..b + p].copy_from_slice(&pa);
            }
            std::fs::write(&path, data).unwrap();
        }
        Mutation::ForeignSegment { seg } => {
            let path = pick(*seg);
            let theirs = other.join(path.file_name().unwrap());
            if theirs.exists() {
                std::fs::copy(theirs, path).unwrap();
            }
        }
    }
}

/// Checks that `got` (records read until the first error) is a prefix of `written`.
fn check_prefix(got: &Written, written: &Written, who: &str) -> Result<(), TestCaseError> {
    prop_assert!(
        got.len() <= written.len(),
        "{}: more records than written",
        who
    );
    for (i, (g, w)) in got.iter().zip(written).enumerate() {
        prop_assert!(
            g == w,
            "{}: record {} differs from what was written",
            who,
            i
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(PropConfig { cases: cases(), ..PropConfig::default() })]

    #[test]
    fn mutated_logs_give_a_correct_prefix_or_an_error(
        mode in mode_strategy(),
        compress in any::<bool>(),
        records in records_strategy(),
        mutations in mutation_strategy(),
    ) {
        let keys = KeyRing::generate().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let written = write_log(dir.path(), mode, &keys, compress, &records);
        // Another log under the same keys and mode, for foreign segments.
        write_log(other.path(), mode, &keys, compress, &records);
        for m in &mutations {
            apply(dir.path(), other.path(), m);
        }

        // The reader: records until the first error (or the end).
        if let Ok(reader) = Reader::open(dir.path(), Some(keys.clone())) {
            let mut got = Vec::new();
            for rec in reader.records_from(Lsn::default()) {
                match rec {
                    Ok(r) => got.push((r.lsn, r.kind, r.payload)),
                    Err(_) => break,
                }
            }
            check_prefix(&got, &written, "reader")?;
        }

        // Recovery: replayed records are a prefix; after a successful open the log holds
        // exactly them and accepts new records.
        let mut replayed = Vec::new();
        let config = config(mode, &keys, compress);
        let opened = Wal::open_and_replay(dir.path(), config, Lsn::default(), |r| {
            replayed.push((r.lsn, r.kind, r.payload));
            Ok(())
        });
        check_prefix(&replayed, &written, "replay")?;
        if let Ok(wal) = opened {
            let lsn = wal.append(9, b"after damage").unwrap();
            wal.flush(lsn).unwrap();
            wal.close().unwrap();
            let after: Written = support::try_read_records(dir.path(), &keys)
                .unwrap()
                .into_iter()
                .map(|r| (r.lsn, r.kind, r.payload))
                .collect();
            let (last, rest) = after.split_last().unwrap();
            prop_assert_eq!(&last.2, b"after damage");
            prop_assert!(rest == &replayed[..], "log after recovery differs from the replay");
        }
    }
}
