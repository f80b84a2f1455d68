//! Fifty open/append/close cycles in perrecord and pagelevel mode: no IV is ever used twice.
//! Every write the log makes is captured, so page IVs overwritten on disk by later rewrites of
//! the same page are counted too.

mod support;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use walcrypt::format::{PAGE_HEADER_LEN, PageHeader};
use walcrypt::storage::{FsStorage, Storage, StorageFile};
use walcrypt::{KeyRing, Lsn, Mode, Reader, Wal};

/// Records the bytes of every write.
#[derive(Default)]
struct Recorder {
    writes: Mutex<Vec<(u64, Vec<u8>)>>,
}

struct RecordingStorage(Arc<Recorder>);
struct RecordingFile(Box<dyn StorageFile>, Arc<Recorder>);

impl StorageFile for RecordingFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        self.0.read_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.1.writes.lock().unwrap().push((offset, buf.to_vec()));
        self.0.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.0.sync_data()
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.0.set_len(len)
    }
    fn file_len(&self) -> std::io::Result<u64> {
        self.0.file_len()
    }
}

impl Storage for RecordingStorage {
    fn list(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        FsStorage.list(dir)
    }
    fn open(&self, path: &Path, write: bool) -> std::io::Result<Box<dyn StorageFile>> {
        Ok(Box::new(RecordingFile(
            FsStorage.open(path, write)?,
            self.0.clone(),
        )))
    }
    fn create_new(&self, path: &Path) -> std::io::Result<Box<dyn StorageFile>> {
        Ok(Box::new(RecordingFile(
            FsStorage.create_new(path)?,
            self.0.clone(),
        )))
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        FsStorage.rename(from, to)
    }
    fn remove(&self, path: &Path) -> std::io::Result<()> {
        FsStorage.remove(path)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        FsStorage.sync_dir(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        FsStorage.create_dir_all(dir)
    }
    fn lock_dir(&self, dir: &Path) -> std::io::Result<Option<Box<dyn Send + Sync>>> {
        FsStorage.lock_dir(dir)
    }
}

#[test]
fn no_iv_repeats_over_fifty_reopens() {
    for mode in [Mode::PerRecord, Mode::PageLevel] {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let recorder = Arc::new(Recorder::default());
        let config = support::small_config(mode, &keys)
            .storage(Arc::new(RecordingStorage(recorder.clone())));
        for cycle in 0..50u64 {
            let wal = Wal::open(dir.path(), config.clone()).unwrap();
            // A few records per cycle, each flushed: the tail page is rewritten every time.
            for i in 0..6 {
                let lsn = wal
                    .append(1, &support::payload(cycle * 10 + i, 40))
                    .unwrap();
                wal.flush(lsn).unwrap();
            }
            wal.close().unwrap();
        }
        let reader = Reader::open(dir.path(), Some(keys)).unwrap();
        let log_id = reader.log_id();
        let mut seen: HashMap<[u8; 16], String> = HashMap::new();
        let mut count = 0;
        let mut note = |iv: [u8; 16], at: String| {
            count += 1;
            if let Some(first) = seen.insert(iv, at.clone()) {
                panic!("{mode}: IV {iv:02x?} used at {first} and again at {at}");
            }
        };
        match mode {
            Mode::PerRecord => {
                for r in reader.raw_records_from(Lsn::default()) {
                    let r = r.unwrap();
                    let (_, iv) = r
                        .header
                        .encryption
                        .expect("perrecord records are encrypted");
                    note(iv, format!("record {}", r.lsn));
                }
                assert_eq!(count, 300);
            }
            _ => {
                let page = 512usize;
                for (offset, bytes) in recorder.writes.lock().unwrap().iter() {
                    for (i, image) in bytes.chunks(page).enumerate() {
                        if let Some(h) = PageHeader::decode(log_id, &image[..PAGE_HEADER_LEN]) {
                            note(
                                h.iv,
                                format!("write at offset {}", offset + (i * page) as u64),
                            );
                        }
                    }
                }
                assert!(
                    count >= 300,
                    "every flush writes at least one page ({count})"
                );
            }
        }
    }
}
