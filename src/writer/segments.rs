//! Segment management: the writer's handles of segment files (opened, created when missing,
//! retired as the writer moves on), the header a new segment gets, purging whole segments,
//! and the records that move the log on to a new segment (switch) or a fresh page (resume).
//! Segments made ahead of time are in `prepare`; writing pages into them is in `flush`.

use std::sync::Arc;

use super::recycle::{MadeSegment, free_file_name, make_segment};
use super::{Wal, WriteState};
use crate::Lsn;
use crate::config::Mode;
use crate::crypto::Keys;
use crate::error::{Error, Result};
use crate::format::{self, Geometry, RECORD_FLAG_RESUME, RECORD_FLAG_SWITCH, SegmentHeader};
use crate::seal::{At, RecordSeal, SealKey};
use crate::storage::StorageFile;

impl Wal {
    /// The open file of the segment starting at `segment`, creating the segment if needed.
    ///
    /// The writer keeps the handles of the segment it writes and the one before (a flush may
    /// end in one and sync both); older handles are closed as it moves on, in every sync mode.
    /// A segment written since its last fdatasync stays on the dirty list (durable.rs) until a
    /// round of fdatasyncs takes it, and one whose handle is closed by then is opened again to
    /// be synced, so no fdatasync is skipped and a Buffered writer holds two handles, not one
    /// per segment since its last sync.
    pub(super) fn file_for(
        &self,
        w: &mut WriteState,
        segment: Lsn,
    ) -> Result<Arc<dyn StorageFile>> {
        if let Some((_, file)) = w.files.iter().find(|(s, _)| *s == segment) {
            return Ok(file.clone());
        }
        while w.files.len() >= 2 {
            w.files.remove(0);
        }
        let made = match self.take_prepared(segment)? {
            Some(made) => made,
            None => self.open_or_create(segment)?,
        };
        let file: Arc<dyn StorageFile> = Arc::from(made.file);
        w.files.push((segment, file.clone()));
        w.reused.retain(|s| w.files.iter().any(|(f, _)| f == s));
        if made.reused {
            w.reused.push(segment);
        }
        self.want_prepared(segment + self.geo.segment_size);
        Ok(file)
    }

    /// Opens the segment at `segment`, creating it here if it does not exist. One that exists
    /// is the tail segment recovery zeroed after the end, or a rotation's replacement (made
    /// new): not a reused file.
    fn open_or_create(&self, segment: Lsn) -> Result<MadeSegment> {
        let path = self.dir.join(format::segment_file_name(segment));
        match self.storage.open(&path, true) {
            Ok(file) => Ok(MadeSegment {
                file,
                reused: false,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => make_segment(
                self.storage.as_ref(),
                &self.dir,
                &self.segment_header(segment),
                self.recycle > 0,
            )
            .map_err(|e| self.poison_error(e)),
            Err(e) => Err(self.poison("open segment", segment, e)),
        }
    }

    pub(super) fn segment_header(&self, start: Lsn) -> SegmentHeader {
        new_segment_header(self.mode, self.geo, self.log_id, start, &self.keys.load())
    }

    /// Removes whole segment files that lie entirely before `lsn`, before the flushed end, before
    /// the last checkpoint ([`Wal::checkpoint`]) and before every retention hold in force
    /// ([`Wal::hold`]), oldest first. Call it after the engine's checkpoint no longer needs them. The segment
    /// the log ends in is always kept, also when the log ends exactly at its end and the next
    /// segment does not exist yet. Returns how many segments were removed.
    ///
    /// Up to [`crate::Config::recycle_segments`] of them (the newest that qualify) are not
    /// unlinked but renamed `<segment name>.free`, for a later segment to reuse; free files that
    /// can no longer be reused (the data key was rotated since) are unlinked here.
    ///
    /// The write lock is held only to drop the writer's handles of those segments; listing,
    /// unlinking and the directory syncs happen outside it, so commits do not wait for them.
    /// The directory is synced before the first removal and after each segment removed, oldest
    /// first (also after one another purge removed first), so that a crash during a purge
    /// leaves the log's segments without a gap, also after an earlier purge failed in its
    /// directory sync.
    /// With a key store ([`crate::Config::key_store`]), the removals are made durable first, then
    /// every decrypt-only data key that no remaining segment lists is retired from the store;
    /// an error there (after the files are gone) is returned, and the next purge retries.
    pub fn purge_before(&self, lsn: Lsn) -> Result<usize> {
        self.check_poison()?;
        self.check_process()?;
        // Nothing is removed unless everything up to the limit is durable: the oldest segment
        // left must be one recovery can start from after a power cut, and a record continued
        // from a removed segment must be durable where it goes on. In `Buffered` mode the
        // flushed end may not be synced yet, so the purge syncs first (a checkpoint's purge
        // pays one fdatasync); in `Durable` mode it already is.
        // The last checkpoint and the retention holds in force keep what they need.
        // Counted as under way until this returns: holds and checkpoints made meanwhile are
        // refused in the segments it may remove.
        let (lsn, _purging) = self.purge_limit(lsn)?;
        let wanted = lsn.min(self.positions.flushed());
        if self.positions.synced() < wanted {
            self.sync_all()?;
        }
        let flushed = self.positions.flushed();
        let limit = lsn.min(self.positions.synced());
        let holding = self.segment_holding_end(flushed);
        let doomed: Vec<Lsn> = crate::reader::list_segments(self.storage.as_ref(), &self.dir)?
            .into_iter()
            .take_while(|&start| {
                start
                    .checked_add(self.geo.segment_size)
                    .is_some_and(|end| end <= limit)
                    && start < holding
            })
            .collect();
        if doomed.is_empty() {
            return Ok(0);
        }
        {
            let turn = self.syncs.turn();
            let mut w = self.write.lock();
            // The segments stay on the list of files to fdatasync until they are gone: a
            // purge that fails halfway leaves some of them, and a later `sync` must still
            // cover them. Below the synced end they are clean already; should one not be,
            // it is synced now, while it still has its name.
            if self.syncs.any_dirty(&doomed) {
                self.sync_locked(&mut w, &turn)?;
            }
            w.files.retain(|(s, _)| !doomed.contains(s));
        }
        let keep = self.keep_for_reuse(&doomed)?;
        // Whatever an earlier purge removed is made durable before this one removes more: a
        // purge whose directory sync failed (or whose process ended before it) may have left
        // its last removal unsynced, and a crash could keep a newer removal without it, a
        // log with a segment missing in the middle, which does not open.
        self.storage
            .sync_dir(&self.dir)
            .map_err(|e| Error::io("sync directory before removing segments", &self.dir, e))?;
        let mut removed = 0;
        for start in doomed {
            let path = self.dir.join(format::segment_file_name(start));
            let (op, done) = if keep.contains(&start) {
                let free = self.dir.join(free_file_name(start));
                (
                    "keep segment file for reuse",
                    self.storage.rename(&path, &free),
                )
            } else {
                ("remove segment", self.storage.remove(&path))
            };
            match done {
                Ok(()) => removed += 1,
                // A purge running beside this one removed it first, perhaps not durably yet:
                // the sync below makes it durable before this purge removes the next.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(op, &path, e)),
            }
            // Each removal is durable before the next, whichever purge made it: a crash never
            // brings back an older segment without the newer ones (a log missing a segment in
            // the middle does not open).
            self.storage
                .sync_dir(&self.dir)
                .map_err(|e| Error::io("sync directory", &self.dir, e))?;
        }
        // Only now, with the removals durable, may keys no remaining segment lists leave.
        self.retire_unused_keys()?;
        Ok(removed)
    }

    /// The start of the segment holding the last byte of the log that ends at `end`. A log
    /// that ends exactly at a segment's end (or at the first record position of the next one,
    /// which may not exist yet) ends in that segment: were it purged, no segment would be left,
    /// and the next open would start a new log at LSN 0.
    pub(super) fn segment_holding_end(&self, end: Lsn) -> Lsn {
        let start = self.geo.segment_start(end);
        if end == self.geo.skip_headers(start) || end == start {
            start.checked_sub(self.geo.segment_size).unwrap_or(Lsn(0))
        } else {
            start
        }
    }

    /// Writes a segment-switch record: the rest of the current segment stays unused and the
    /// next record starts in a new segment, whose header lists the active key.
    pub(crate) fn switch_segment(&self) -> Result<()> {
        self.switch_segment_installing(None, false).map(|_| ())
    }

    /// [`Wal::switch_segment`], installing `keys` (a new active key) once the next segment is
    /// the insert position, before any lock is released: every insertion reserved before the
    /// switch has finished under the old key, every later one loads the new key after its
    /// reservation, and the next segment's header lists the new key.
    /// With `claim`, the next segment is then claimed for a replacement the rotation staged
    /// (`Preparer::claim_for_swap`). Returns the start of the next segment.
    pub(super) fn switch_segment_installing(
        &self,
        keys: Option<std::sync::Arc<crate::crypto::Keys>>,
        claim: bool,
    ) -> Result<Lsn> {
        // The insert lock is held throughout (insert, then write: the documented order), so no
        // record and no flush can see the positions between the switch and the next segment
        // before they are skipped.
        let same = self.check_process()?;
        // Nothing new is reserved from here on, and everything reserved is in the buffer
        // (sealed under the keys its insertion loaded, which this segment's header lists).
        let mut ins = self.reservations.exclusive();
        let lsn = self.geo.skip_headers(ins.pos());
        let sealed = self.switch_record(lsn)?;
        // Once the switch record is being copied in, any failure poisons the log, as in
        // `insert`: the buffer (and perhaps the files) hold part of a record that the
        // insert position does not count, and the next record would be copied over it in a
        // page that may never be written again.
        let (start, mut end) = self
            .copy_in(ins.pos(), &sealed)
            .map_err(|e| self.poison_error(e))?;
        // The record may straddle a segment boundary: the segment holding its last byte is the
        // one it ends (`Geometry::after_switch`, which the readers follow), and the log leaves
        // the rest of that segment unused too. A second switch record right after the tail
        // makes that segment say so itself: a reader starting there (its oldest segment, once
        // a purge removed the one before) finds a switch record first, not the unused rest.
        // It fits: the tail is shorter than a switch record, and a page body is longer than two.
        if self.geo.segment_start(end - 1) != self.geo.segment_start(start) {
            let lsn = self.geo.skip_headers(end);
            // Sealed afresh, never the first record again: two tags under one nonce would
            // give away the hash key.
            let sealed = self.switch_record(lsn).map_err(|e| self.poison_error(e))?;
            end = self
                .copy_in(end, &sealed)
                .map_err(|e| self.poison_error(e))?
                .1;
        }
        let segment = self.geo.segment_start(end - 1);
        let next = segment + self.geo.segment_size;
        // The switch must be durable before anything lands in the next segment.
        let turn = self.syncs.turn();
        let mut w = self.write.lock();
        if self.mode == Mode::PageLevel {
            // The pages rewritten here belong to a segment whose header does not list the
            // active key: encrypt them under a key it does list.
            w.segment_key = self
                .listed_key(&w, segment)
                .map_err(|e| self.poison_error(e))?
                .map(|key_id| (segment, key_id));
        }
        self.write_locked(&mut w, end, same)
            .map_err(|e| self.poison_error(e))?;
        self.sync_locked(&mut w, &turn)
            .map_err(|e| self.poison_error(e))?;
        // Nothing is in flight: `sync_locked` waited for every reserved range to land.
        self.jump_unused(&w, next)?;
        // The end of the log first (still closed to appenders until `ins` drops), then the
        // flushed and synced positions: `flushed_lsn() <= end_lsn()` at every instant, so a
        // position read from either is accepted by `hold` and `checkpoint`, which compare with
        // the end. Raised first, they ran ahead of the end for the hint refresh's write (an
        // outside probe saw `hold(flushed_lsn())` refused during rotations).
        ins.move_to(next);
        w.reserved_to = next;
        // The last page of the segment left (the switch record's) says so in its header: a
        // follower of the files learns what is durable only from page headers, and the records
        // this fdatasync made durable (appended before a rotation, say, and flushed only by
        // it) would otherwise stay out of its sight while the writer is idle, since a flush
        // after the switch finds nothing left to write or sync. In pagelevel the page is
        // encrypted under the key set above, which its segment lists. Then the flushed and
        // synced positions move.
        self.acknowledge_synced(&mut w, next)?;
        // `Positions::check_order` leaves the end out while it is closed, as it is here.
        debug_assert!(
            self.positions.flushed() <= ins.pos(),
            "the switch raised flushed to {} past the end {}",
            self.positions.flushed(),
            ins.pos()
        );
        if let Some(keys) = keys {
            self.keys.store(keys);
            if claim && self.preparable(next) {
                self.preparer.claim_for_swap(next);
            }
        }
        Ok(next)
    }

    /// The segment-switch record to place at `lsn`, finished (checksum, and tag when sealed).
    /// In a perrecord-gcm segment of format version 4 or later it is sealed like a data
    /// record: a GCM tag over no payload, under a key the segment's header lists, with the LSN
    /// in the associated data, so that no one without the key can end a segment early. Made
    /// under the insert lock because the segment it lands in decides its form and its key; a
    /// switch holds that lock across an fdatasync anyway, and the seal is a few AES blocks.
    fn switch_record(&self, lsn: Lsn) -> Result<Vec<u8>> {
        let at = At {
            lsn,
            version: self.version_at(lsn),
        };
        let keys = self.keys.load();
        let sealed = self.seal.record_seal(at.version, RECORD_FLAG_SWITCH) != RecordSeal::Plain;
        let key_id = if !sealed {
            0
        } else {
            // Under the insert lock the caller holds, then the write lock: the documented order.
            let w = self.write.lock();
            match self.listed_key(&w, self.geo.segment_start(lsn))? {
                Some(key_id) => key_id,
                None => keys.active().unwrap_or(0),
            }
        };
        let iv = if sealed {
            Some(self.ivs.next_iv()?)
        } else {
            None
        };
        let key = SealKey {
            keys: &keys,
            key_id,
            iv,
        };
        let mut record = vec![0u8; self.seal.stored_len(at.version, 0, RECORD_FLAG_SWITCH)];
        self.seal
            .seal_record_at(&key, (0, RECORD_FLAG_SWITCH), &[], at, &mut record)?;
        Ok(record)
    }

    /// Continues a reopened pagelevel log on a fresh page: writes a resume record at the start
    /// of the next page's body, naming the end of the log, and never writes the page holding
    /// the end again. Called once, right after [`Wal::start`], when the log ends inside a page
    /// body.
    ///
    /// Rewriting that page is unsafe either way: under a fresh IV a torn rewrite would mix two
    /// keystreams over records that were durable, and under its old IV new records would meet
    /// keystream that may already have encrypted the bytes recovery cut away (a torn or lost
    /// write of the previous open, perhaps copied by a snapshot): two plaintexts under one
    /// counter block. The rest of the page stays unused.
    pub(crate) fn resume_on_fresh_page(&self) -> Result<()> {
        let end = self.reservations.end();
        let payload = end.0.to_le_bytes();
        let resume = super::Pending {
            kind: 0,
            flags: RECORD_FLAG_RESUME,
            stored: &payload,
        };
        let mut ins = self.reservations.exclusive();
        let page_end = self.geo.page_start(ins.pos()) + self.geo.page_size;
        {
            // At open: nothing is in flight.
            let mut w = self.write.lock();
            self.jump_unused(&w, page_end)?;
            w.reserved_to = page_end;
        }
        let lsn = self.geo.skip_headers(page_end);
        let mut sealed = Vec::new();
        self.seal_at(&self.keys.load(), lsn, None, &resume, &mut sealed)?;
        let (_, resumed) = self.copy_in(page_end, &sealed)?;
        ins.move_to(resumed);
        Ok(())
    }

    /// Moves the landed position over a part of the log left unused, up to `to`. Under the
    /// write lock, with nothing in flight; a range still in flight is a broken invariant and
    /// poisons the log.
    fn jump_unused(&self, w: &WriteState, to: Lsn) -> Result<()> {
        if self.inflight.jump(&w.inflight, to) {
            return Ok(());
        }
        let error = self.broken_invariant(
            "skip unused log",
            to,
            "a write-out was still in flight".into(),
        );
        Err(self.poison_error(error))
    }

    /// The newest key of the ring that the header of the segment at `segment` lists; `None`
    /// when the segment's file does not exist yet (its pages are all still in the buffer), or
    /// when the file under its name is one the writer will remove when it takes the segment
    /// (`Wal::prepared_stale`): either way the segment will be made listing the active key.
    ///
    /// Before that second case was told apart, the file's header was read: after a rotation
    /// whose replacement could not be staged or placed, the segment prepared under the old key
    /// was still under the name, a second rotation sealed its switch record under that key,
    /// the writer then made the segment anew listing only the active key, and the log no
    /// longer opened. `w` (the write lock) says whether the writer has taken the segment.
    fn listed_key(&self, w: &WriteState, segment: Lsn) -> Result<Option<u32>> {
        if !w.files.iter().any(|(s, _)| *s == segment) && self.prepared_stale(segment) {
            return Ok(None);
        }
        let path = self.dir.join(format::segment_file_name(segment));
        let header = match crate::reader::read_segment_header(self.storage.as_ref(), &path, segment)
        {
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
            .ok_or_else(|| Error::MissingSegmentKey {
                key_id: header.key_checks.first().map_or(0, |(id, _)| *id),
                segment,
            })
    }
}

/// The header of a new segment of log `log_id` starting at `start`. In the encrypted modes it
/// lists only the active key of `keys`: the segment's records and pages use no other.
pub(super) fn new_segment_header(
    mode: Mode,
    geometry: Geometry,
    log_id: u64,
    start: Lsn,
    keys: &Keys,
) -> SegmentHeader {
    SegmentHeader {
        version: format::FORMAT_VERSION,
        mode,
        geometry,
        log_id,
        start,
        key_checks: if mode.is_encrypted() {
            keys.active_check_values()
        } else {
            Vec::new()
        },
    }
}
