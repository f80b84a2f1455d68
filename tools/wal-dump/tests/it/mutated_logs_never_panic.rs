//! Damaged logs through wal-dump: bit flips, truncations, spliced bytes, pages copied over
//! other pages, segments removed or replaced by garbage. Whatever the damage, wal-dump exits
//! 0, 1 or 2, never panics, says what went wrong in one line on stderr when it fails, and never
//! lists a record whose payload differs from what was appended at that LSN.
//!
//! `WALCRYPT_DUMP_MUTATIONS` sets the mutations per mode (default 40), `WALCRYPT_DUMP_SEED`
//! the seed (printed on failure).

use crate::support;

use std::collections::HashMap;
use std::path::Path;

use support::{PAGE, SEGMENT, make_log, stderr, stdout, wal_dump};
use walcrypt::Mode;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

fn segments(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "wal"))
        .collect();
    files.sort();
    files
}

/// Damages the log in `dir` one way; returns what was done, for the failure message.
fn mutate(dir: &Path, rng: &mut Rng) -> String {
    let files = segments(dir);
    let file = &files[rng.below(files.len() as u64) as usize];
    let mut bytes = std::fs::read(file).unwrap();
    let len = bytes.len() as u64;
    let what = match rng.below(6) {
        0 => {
            let at = rng.below(len) as usize;
            bytes[at] ^= 1 << rng.below(8);
            format!("flip a bit at {at}")
        }
        1 => {
            let at = rng.below(len) as usize;
            bytes.truncate(at);
            format!("truncate at {at}")
        }
        2 => {
            let at = rng.below(len) as usize;
            let n = (1 + rng.below(600) as usize).min(bytes.len() - at);
            for b in &mut bytes[at..at + n] {
                *b = rng.next() as u8;
            }
            format!("splice {n} random bytes at {at}")
        }
        3 => {
            let pages = len / PAGE;
            let (from, to) = (rng.below(pages) * PAGE, rng.below(pages) * PAGE);
            let page: Vec<u8> = bytes[from as usize..(from + PAGE) as usize].to_vec();
            bytes[to as usize..(to + PAGE) as usize].copy_from_slice(&page);
            format!("copy page at {from} over page at {to}")
        }
        4 => {
            std::fs::remove_file(file).unwrap();
            return format!("remove {}", file.display());
        }
        _ => {
            let n = rng.below(SEGMENT) as usize;
            bytes = (0..n).map(|_| rng.next() as u8).collect();
            format!("replace with {n} random bytes")
        }
    };
    std::fs::write(file, bytes).unwrap();
    format!("{} of {}", what, file.display())
}

#[test]
fn damaged_logs_never_panic_or_list_a_wrong_payload() {
    let per_mode: usize = std::env::var("WALCRYPT_DUMP_MUTATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let seed: u64 = std::env::var("WALCRYPT_DUMP_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed_0fda_4a6e);
    let mut rng = Rng(seed | 1);
    let mut runs = 0;
    for mode in Mode::ALL {
        let tmp = tempfile::tempdir().unwrap();
        let (log, keys, _, appended) = make_log(tmp.path(), mode, 300);
        let by_lsn: HashMap<u64, Vec<u8>> = appended
            .iter()
            .map(|a| (u64::from(a.lsn), a.payload.clone()))
            .collect();
        for i in 0..per_mode {
            let dir = tmp.path().join(format!("damaged-{i}"));
            copy_dir(&log, &dir);
            let what = mutate(&dir, &mut rng);
            let context = format!("{mode}, mutation {i} ({what}), WALCRYPT_DUMP_SEED={seed}");
            let json = wal_dump(&[
                &"--format",
                &"json",
                &"--payload",
                &"hex",
                &"--key-file",
                &keys,
                &dir,
            ]);
            let outputs = [
                wal_dump(&[&dir]),
                wal_dump(&[&"--verify", &"--key-file", &keys, &dir]),
                wal_dump(&[&"--stats", &"--key-file", &keys, &dir]),
                json,
            ];
            for (n, out) in outputs.iter().enumerate() {
                runs += 1;
                let err = stderr(out);
                let code = out.status.code();
                assert!(
                    matches!(code, Some(0..=2)),
                    "{context}: run {n}: exit {code:?}, stderr {err}"
                );
                assert!(
                    !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
                    "{context}: {err}"
                );
                if n == 1 && code == Some(1) {
                    // --verify prints every problem it found on stdout, with its position.
                    assert!(
                        !stdout(out).trim().is_empty(),
                        "{context}: --verify failed silently"
                    );
                    assert!(err.trim_end().lines().count() <= 1, "{context}: {err}");
                } else if code != Some(0) {
                    assert_eq!(
                        err.trim_end().lines().count(),
                        1,
                        "{context}: run {n}: one line expected: {err}"
                    );
                }
            }
            // Whatever it lists, it lists right.
            for line in stdout(&outputs[3]).lines() {
                let Ok(record) = serde_json::from_str::<serde_json::Value>(line) else {
                    continue;
                };
                let (Some(lsn), Some(hex)) = (record["lsn"].as_u64(), record["payload"].as_str())
                else {
                    continue;
                };
                let expected = by_lsn.get(&lsn).unwrap_or_else(|| {
                    panic!("{context}: listed a record at {lsn} that was never appended")
                });
                assert_eq!(
                    hex,
                    support::hex(expected),
                    "{context}: wrong payload at {lsn}"
                );
            }
        }
    }
    println!(
        "{runs} wal-dump runs over {} damaged logs, seed {seed}",
        3 * per_mode
    );
}
