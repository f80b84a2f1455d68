//! The write side of the log: writing pages out (and, in pagelevel mode, encrypting them) under
//! the write lock, group-commit flushes, fdatasync, segment creation, switch and purge.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::{Wal, WriteState};
use crate::Lsn;
use crate::config::{Mode, SyncMode};
use crate::error::{Error, Result};
use crate::format::{
    self, PAGE_FLAG_ENCRYPTED, PAGE_HEADER_LEN, PageHeader, RECORD_FLAG_SWITCH, SegmentHeader,
};
use crate::storage::{Storage, StorageFile};

#[derive(Default)]
pub(super) struct GroupCommit {
    leading: bool,
    generation: u64,
}

/// Ends a group-commit round when dropped: wakes every waiter to check its record.
struct RoundEnd<'a>(&'a Wal);

impl Drop for RoundEnd<'_> {
    fn drop(&mut self) {
        let mut round = self.0.group.lock();
        round.leading = false;
        round.generation += 1;
        drop(round);
        self.0.group_done.notify_all();
    }
}

impl Wal {
    /// Takes the write lock and writes everything before `target`.
    pub(super) fn write_out(&self, target: u64) -> Result<()> {
        let mut w = self.write.lock();
        let held_since = Instant::now();
        w.acquisitions += 1;
        let result = self.write_locked(&mut w, target);
        w.hold_ns += held_since.elapsed().as_nanos() as u64;
        result
    }

    /// Writes the buffer's pages from the last written position up to `target` (which must be
    /// copied already). Partly filled pages are written whole and rewritten later.
    pub(super) fn write_locked(&self, w: &mut WriteState, target: u64) -> Result<()> {
        self.check_poison()?;
        self.check_process()?;
        if target <= w.written_to {
            return Ok(());
        }
        let ps = self.geo.page_size;
        let hint = self.synced_to.load(Ordering::Acquire);
        let mut page = self.geo.page_start(w.written_to);
        while page < target {
            if self.geo.is_header_page(page) {
                page += ps;
                continue;
            }
            let segment = self.geo.segment_start(page);
            let run_start = page;
            let mut scratch = std::mem::take(&mut w.scratch);
            scratch.clear();
            while page < target && self.geo.segment_start(page) == segment {
                let at = scratch.len();
                scratch.resize(at + ps as usize, 0);
                let valid = (target.min(page + ps) - page).max(PAGE_HEADER_LEN as u64);
                self.page_image(w, page, valid as usize, hint, &mut scratch[at..])?;
                page += ps;
            }
            let written = self.file_for(w, segment).and_then(|file| {
                file.write_all_at(&scratch, run_start - segment)
                    .map_err(|e| self.poison("write segment", segment, e))
            });
            w.pages_written += scratch.len() as u64 / ps;
            w.scratch = scratch;
            written?;
            if !w.dirty.contains(&segment) {
                w.dirty.push(segment);
            }
        }
        w.written_to = target;
        self.written_to.store(target, Ordering::Release);
        Ok(())
    }

    /// Builds the on-disk image of `page` into `out`: header, the first `valid` bytes of the
    /// page from the buffer and zeros after them, and (pagelevel) the body encrypted under a
    /// fresh IV.
    fn page_image(
        &self,
        w: &mut WriteState,
        page: u64,
        valid: usize,
        hint: u64,
        out: &mut [u8],
    ) -> Result<()> {
        let rem_len = {
            let slot = self.slots[self.slot_index(page)].lock();
            debug_assert_eq!(slot.page, page, "writing a page that is not in the buffer");
            out[PAGE_HEADER_LEN..valid].copy_from_slice(&slot.data[PAGE_HEADER_LEN..valid]);
            slot.rem_len
        };
        out[valid..].fill(0);
        let mut header = PageHeader {
            flags: 0,
            key_id: 0,
            page_lsn: Lsn(page),
            rem_len,
            durable_hint: Lsn(hint),
            iv: [0; 16],
        };
        if self.mode == Mode::PageLevel {
            let started = Instant::now();
            let keys = self.keys.load();
            let key_id = match w.segment_key {
                Some((segment, key_id)) if segment == self.geo.segment_start(page) => key_id,
                _ => keys.active().unwrap_or(0),
            };
            let iv = self.ivs.next_iv()?;
            keys.apply_keystream(key_id, &iv, &mut out[PAGE_HEADER_LEN..])?;
            w.encrypt_ns += started.elapsed().as_nanos() as u64;
            header.flags = PAGE_FLAG_ENCRYPTED;
            header.key_id = key_id;
            header.iv = iv;
        }
        header.encode(self.log_id, &mut out[..PAGE_HEADER_LEN]);
        Ok(())
    }

    /// The open file of the segment starting at `segment`, creating the segment if needed.
    fn file_for<'w>(&self, w: &'w mut WriteState, segment: u64) -> Result<&'w dyn StorageFile> {
        if let Some(i) = w.files.iter().position(|(s, _)| *s == segment) {
            return Ok(w.files[i].1.as_ref());
        }
        let path = self.dir.join(format::segment_file_name(Lsn(segment)));
        let file = match self.storage.open(&path, true) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => create_segment(
                self.storage.as_ref(),
                &self.dir,
                &self.segment_header(segment),
            )
            .map_err(|e| self.poison_error(e))?,
            Err(e) => return Err(self.poison("open segment", segment, e)),
        };
        // Keep the handles of segments still being written or awaiting fdatasync.
        let dirty = w.dirty.clone();
        w.files.retain(|(s, _)| dirty.contains(s));
        w.files.push((segment, file));
        Ok(w.files
            .last()
            .map(|(_, f)| f.as_ref())
            .expect("pushed just above"))
    }

    fn segment_header(&self, start: u64) -> SegmentHeader {
        SegmentHeader {
            mode: self.mode,
            geometry: self.geo,
            log_id: self.log_id,
            start: Lsn(start),
            // Only the active key: a segment's records and pages use no other.
            key_checks: if self.mode.is_encrypted() {
                self.keys.load().active_check_values()
            } else {
                Vec::new()
            },
        }
    }

    /// fdatasyncs every segment written since the last sync.
    pub(super) fn sync_locked(&self, w: &mut WriteState) -> Result<()> {
        let dirty = std::mem::take(&mut w.dirty);
        for segment in &dirty {
            let Some((_, file)) = w.files.iter().find(|(s, _)| s == segment) else {
                continue;
            };
            let started = Instant::now();
            let synced = file.sync_data();
            w.fsync_ns += started.elapsed().as_nanos() as u64;
            w.fsyncs += 1;
            synced.map_err(|e| self.poison("fdatasync segment", *segment, e))?;
        }
        Ok(())
    }

    /// Makes every record up to and including the one at `lsn` durable, as the configured
    /// [`SyncMode`] defines it.
    ///
    /// Group commit (`SyncMode::Durable`): one caller at a time is the leader; it writes and
    /// fdatasyncs everything appended so far. The others do not queue for the write lock behind it (a leader that
    /// returns and commits again would win that race on a busy machine); they wait for the
    /// leader to finish, return at once if it covered their record, and otherwise one of them
    /// leads the next round for all the rest.
    pub fn flush(&self, lsn: Lsn) -> Result<()> {
        let lsn = u64::from(lsn);
        loop {
            self.check_poison()?;
            if self.flushed_to.load(Ordering::Acquire) > lsn {
                return Ok(());
            }
            if self.complete_to.load(Ordering::Acquire) <= lsn {
                return Err(Error::LsnNotAvailable(Lsn(lsn)));
            }
            if self.sync == SyncMode::Buffered {
                // Without fdatasync a flush is a short write; queueing on the write lock is
                // cheaper than rounds (measured: rounds cost 15-30% of oltp throughput at 2-8
                // threads with sync none on the 2-core development machine).
                return self.lead_flush(lsn);
            }
            let mut round = self.group.lock();
            if round.leading {
                let current = round.generation;
                while round.generation == current {
                    self.group_done.wait(&mut round);
                }
                continue;
            }
            round.leading = true;
            drop(round);
            // Ends the round even if the flush unwinds, so waiters never wait forever.
            let _round = RoundEnd(self);
            return self.lead_flush(lsn);
        }
    }

    /// One group-commit round: takes the write lock and flushes everything appended so far.
    fn lead_flush(&self, lsn: u64) -> Result<()> {
        let mut w = self.write.lock();
        let held_since = Instant::now();
        w.acquisitions += 1;
        let result = self.flush_locked(&mut w, lsn);
        w.hold_ns += held_since.elapsed().as_nanos() as u64;
        result
    }

    fn flush_locked(&self, w: &mut WriteState, lsn: u64) -> Result<()> {
        if self.flushed_to.load(Ordering::Acquire) > lsn {
            return Ok(());
        }
        let target = self.complete_to.load(Ordering::Acquire);
        self.write_locked(w, target)?;
        if self.sync == SyncMode::Durable {
            self.sync_locked(w)?;
            self.synced_to.store(target, Ordering::Release);
        }
        self.flushed_to.store(target, Ordering::Release);
        Ok(())
    }

    /// Flushes every appended record and fdatasyncs (in every sync mode), then closes the log.
    pub fn close(self) -> Result<()> {
        self.check_poison()?;
        let mut w = self.write.lock();
        let target = self.complete_to.load(Ordering::Acquire);
        self.write_locked(&mut w, target)?;
        self.sync_locked(&mut w)?;
        self.synced_to.store(target, Ordering::Release);
        self.flushed_to.store(target, Ordering::Release);
        Ok(())
    }

    /// Removes whole segment files that lie entirely before `lsn` and before the flushed end,
    /// oldest first. Call it after the engine's checkpoint no longer needs them. The segment
    /// the log ends in is always kept. Returns how many files were removed.
    ///
    /// With a key store ([`crate::Config::key_store`]), the removals are made durable first, then
    /// every decrypt-only data key that no remaining segment lists is retired from the store;
    /// an error there (after the files are gone) is returned, and the next purge retries.
    pub fn purge_before(&self, lsn: Lsn) -> Result<usize> {
        self.check_poison()?;
        self.check_process()?;
        let limit = u64::from(lsn).min(self.flushed_to.load(Ordering::Acquire));
        let mut w = self.write.lock();
        let starts = crate::reader::list_segments(self.storage.as_ref(), &self.dir)?;
        let mut removed = 0;
        for start in starts {
            let start = u64::from(start);
            if start + self.geo.segment_size >= limit {
                break;
            }
            let path = self.dir.join(format::segment_file_name(Lsn(start)));
            self.storage
                .remove(&path)
                .map_err(|e| Error::io("remove segment", &path, e))?;
            w.files.retain(|(s, _)| *s != start);
            w.dirty.retain(|s| *s != start);
            removed += 1;
        }
        if removed > 0 {
            self.storage
                .sync_dir(&self.dir)
                .map_err(|e| Error::io("sync directory", &self.dir, e))?;
        }
        drop(w);
        // Only now, with the removals durable, may keys no remaining segment lists leave.
        self.retire_unused_keys()?;
        Ok(removed)
    }

    /// Writes a segment-switch record: the rest of the current segment stays unused and the
    /// next record starts in a new segment, whose header lists the active key.
    pub(crate) fn switch_segment(&self) -> Result<()> {
        self.switch_segment_installing(None)
    }

    /// [`Wal::switch_segment`], installing `keys` (a new active key) once the next segment is
    /// the insert position, before any lock is released: records sealed under the old key that
    /// have not been placed yet are sealed again, and the next segment's header lists the new key.
    pub(super) fn switch_segment_installing(
        &self,
        keys: Option<std::sync::Arc<crate::crypto::Keys>>,
    ) -> Result<()> {
        let mut sealed = Vec::new();
        self.seal(0, RECORD_FLAG_SWITCH, &[], &mut sealed)?;
        // The insert lock is held throughout (insert, then write: the documented order), so no
        // record and no flush can see the positions between the switch and the next segment
        // before they are skipped.
        let mut ins = self.insert.lock();
        let (_, end) = self.copy_in(&mut ins, &sealed)?;
        let segment = self.geo.segment_start(end - 1);
        let next = segment + self.geo.segment_size;
        // The switch must be durable before anything lands in the next segment.
        let mut w = self.write.lock();
        if self.mode == Mode::PageLevel {
            // The pages rewritten here belong to a segment whose header does not list the
            // active key: encrypt them under a key it does list.
            w.segment_key = self.listed_key(segment)?.map(|key_id| (segment, key_id));
        }
        self.write_locked(&mut w, end)?;
        self.sync_locked(&mut w)?;
        w.written_to = next;
        self.written_to.store(next, Ordering::Release);
        self.synced_to.store(next, Ordering::Release);
        self.flushed_to.store(next, Ordering::Release);
        ins.pos = next;
        self.complete_to.store(next, Ordering::Release);
        if let Some(keys) = keys {
            self.keys.store(keys);
            self.key_epoch.fetch_add(1, Ordering::AcqRel);
        }
        Ok(())
    }

    /// The newest key of the ring that the header of the segment at `segment` lists; `None`
    /// when the segment's file does not exist yet (its pages are all still in the buffer): it
    /// will be created listing the active key.
    fn listed_key(&self, segment: u64) -> Result<Option<u32>> {
        let path = self.dir.join(format::segment_file_name(Lsn(segment)));
        let header =
            match crate::reader::read_segment_header(self.storage.as_ref(), &path, Lsn(segment)) {
                Ok(header) => header,
                Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                    return Ok(None);
                }
                Err(e) => return Err(e),
            };
        header
            .key_checks
            .iter()
            .rev()
            .find(|(id, kcv)| self.keys.load().check_value(*id) == Some(*kcv))
            .map(|(id, _)| Some(*id))
            .ok_or_else(|| {
                Error::MissingKey(header.key_checks.first().map(|(id, _)| *id).unwrap_or(0))
            })
    }
}

/// Creates a segment file: header page written and fdatasync'ed under a temporary name, the
/// file extended to its full size (zeros), then renamed into place and the directory synced,
/// so a crash never leaves a half-made segment under a segment name.
pub(crate) fn create_segment(
    storage: &dyn Storage,
    dir: &Path,
    header: &SegmentHeader,
) -> Result<Box<dyn StorageFile>> {
    let name = format::segment_file_name(header.start);
    let path = dir.join(&name);
    let tmp = dir.join(format!("{name}{TMP_SUFFIX}"));
    let mut page = vec![0u8; header.geometry.page_size as usize];
    header.encode(&mut page);
    let made = (|| -> std::io::Result<Box<dyn StorageFile>> {
        let file = storage.create_new(&tmp)?;
        file.write_all_at(&page, 0)?;
        file.set_len(header.geometry.segment_size)?;
        file.sync_data()?;
        storage.rename(&tmp, &path)?;
        storage.sync_dir(dir)?;
        Ok(file)
    })();
    made.map_err(|e| {
        let _ = storage.remove(&tmp);
        Error::io("create segment", &path, e)
    })
}

/// Suffix of a segment file still being created.
pub(crate) const TMP_SUFFIX: &str = ".tmp";
