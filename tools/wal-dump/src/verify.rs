//! `--verify`: read the whole log and report every problem with its position.
//!
//! Checks: segment continuity and file sizes, every page header (magic, checksum, address,
//! encryption flag, listed key id), record checksums, authentication tags (perrecord-gcm, with
//! a key file) and LSN continuity, key check values of a
//! given key file against the segment headers, the clean end of the log, and that no counter
//! block is used twice under one key (record IVs in perrecord, page IVs in pagelevel).
//! The reader stops at the first damage; verify then resumes at the next page where a record
//! starts, so one damaged record does not hide the next.

use std::io::Write;

use walcrypt::inspect::{self, PAGE_FLAG_ENCRYPTED, PAGE_HEADER_LEN, SegmentInfo};
use walcrypt::{CorruptionKind, IV_LEN, KeyRing, Lsn, Mode, Reader};

use serde::Serialize;

use crate::dump::crc_ok;
use crate::fail::{
    EXIT_DAMAGE, EXIT_OK, EXIT_TROUBLE, EXIT_UNCHECKED, Fail, fingerprint, key_identity, one_line,
};
use crate::output::write_json;
use crate::source::{Disk, Target, fmt_lsn, hex, load_keys, position, purged_since, segment_gone};
use crate::{Args, OutputFormat};

/// One use of a keystream: `blocks` counter blocks from `iv` under `key_id`.
struct IvUse {
    key_id: u32,
    iv: [u8; IV_LEN],
    blocks: u128,
    /// Where: the page or record start.
    at: Lsn,
    page: bool,
}

impl IvUse {
    fn describe(&self, geo: inspect::Geometry) -> String {
        let what = if self.page { "page" } else { "record" };
        format!("{what} at {}", position(geo, self.at))
    }
}

#[derive(Default)]
struct Findings {
    damage: Vec<String>,
    keys: Vec<String>,
    /// Each key of the key file that a segment lists, and whether it matched everywhere.
    checked_keys: Vec<CheckedKey>,
    notes: Vec<String>,
    /// What could not be checked, and why.
    unchecked: Vec<String>,
    records: u64,
    pages: u64,
    /// Where the oldest segment left starts, once segment files the first listing named were
    /// found purged (a writer removing old segments while the log was verified).
    purged: Option<Lsn>,
}

struct Verify<'a> {
    reader: Reader,
    disk: Disk,
    ring: Option<&'a KeyRing>,
    from: Lsn,
    to: Lsn,
    found: Findings,
    ivs: Vec<IvUse>,
    /// Pages whose header area holds anything but zeros, but for a reused file's pages of its
    /// earlier life past the last page the log wrote in it.
    written_pages: Vec<Lsn>,
    /// Those pages of an earlier life.
    earlier_life_pages: u64,
    /// The end of the last segment the first listing of the files found: records past it lie
    /// in segments a live writer made after that listing, which the page and key checks (made
    /// on that listing) did not see, so the records pass stops there.
    listed_end: Lsn,
    /// The log and the keys the records pass read it with, to open a fresh reader that tells
    /// a live writer's next records from a torn tail; `None` until that pass starts.
    reopen: Option<(Target, Option<&'a KeyRing>)>,
    /// Called between the page checks' two reads of a segment's page headers (see [`Seams`]).
    between_page_passes: Box<dyn FnMut(Lsn) + 'a>,
}

/// Points between the steps of `--verify` where a test has a live writer act (purge, reuse
/// the purged files, append), because nothing can be placed between the steps of a running
/// binary. The tool runs with [`Seams::none`].
pub(crate) struct Seams<'s> {
    /// Once the records pass has listed the files for its own reader, before it reads them.
    pub(crate) before_records: Box<dyn FnOnce() + 's>,
    /// Once the page checks have read the page headers of the segment starting at the given
    /// LSN a first time, through the file they opened for it, before they read them again.
    pub(crate) between_page_passes: Box<dyn FnMut(Lsn) + 's>,
}

impl Seams<'_> {
    /// Nothing between the steps.
    pub(crate) fn none() -> Seams<'static> {
        Seams {
            before_records: Box::new(|| {}),
            between_page_passes: Box::new(|_| {}),
        }
    }
}

/// How far the page checks' findings had got before a segment: what they go back to when the
/// segment's file turns out to have become another segment while it was read.
struct PagesMark {
    damage: usize,
    pages: u64,
    written_pages: usize,
    ivs: usize,
    earlier_life_pages: u64,
}

/// Whether the header bytes of `page` are a valid page header of this log for the same offset
/// of an earlier segment in the same 4 GiB window of LSNs: a page a reused segment file kept
/// from its earlier life.
fn earlier_life(geo: inspect::Geometry, log_id: u64, page: Lsn, bytes: &[u8]) -> bool {
    inspect::PageHeader::decode(log_id, bytes).is_some_and(|h| {
        let was = h.page_lsn;
        was < page
            && (page - was).is_multiple_of(geo.segment_size)
            && inspect::same_lsn_window(was, page)
    })
}

pub fn run(args: &Args, out: &mut dyn Write) -> Result<u8, Fail> {
    let ring = load_keys(args.key_file.as_deref(), &args.kek)?;
    let mut target = Target::resolve(&args.path)?;
    target.require_mode = args.require_mode;
    let reader = match target.open(None, None) {
        Ok(r) => r,
        Err(fail) if fail.code == EXIT_DAMAGE => {
            if args.format == OutputFormat::Json {
                let damage = [fail.message];
                let report = JsonReport {
                    result: "damage",
                    exit_code: EXIT_DAMAGE,
                    mode: "unknown",
                    segments: 0,
                    pages: 0,
                    records: 0,
                    damage: &damage,
                    key_problems: &[],
                    keys_checked: &[],
                    not_checked: &["the log could not be opened".to_string()],
                    notes: &[],
                };
                write_json(out, &report)?;
            } else {
                writeln!(out, "damage: {}", fail.message)?;
                writeln!(out, "verify: 1 problem (the log could not be opened)")?;
            }
            return Ok(EXIT_DAMAGE);
        }
        Err(fail) => return Err(fail),
    };
    verify_listed(args, target, reader, ring.as_ref(), out, Seams::none())
}

/// `--verify` of the log `reader` listed (opened without keys), with the keys `ring`; `seams`
/// run between its steps (where a test has a live writer act).
pub(crate) fn verify_listed<'a>(
    args: &Args,
    target: Target,
    reader: Reader,
    ring: Option<&'a KeyRing>,
    out: &mut dyn Write,
    seams: Seams<'a>,
) -> Result<u8, Fail> {
    let range = target.range(&reader, args.start, args.end);
    let mut v = Verify::new(reader, ring, range);
    v.between_page_passes = seams.between_page_passes;
    // Said, so that "clean" is never read as a verdict on the whole log.
    let skipped = match (args.start, args.end) {
        (Some(s), Some(e)) => Some(format!("before {} and from {} on", fmt_lsn(s), fmt_lsn(e))),
        (Some(s), None) => Some(format!("before {}", fmt_lsn(s))),
        (None, Some(e)) => Some(format!("from {} on", fmt_lsn(e))),
        (None, None) => None,
    };
    if let Some(skipped) = skipped {
        v.found
            .unchecked
            .push(format!("records {skipped}: outside --start/--end"));
    }
    let keys_match = v.check_key_values(args);
    v.check_segments()?;
    v.check_pages()?;
    v.check_records(target, keys_match, args, seams.before_records)?;
    v.check_iv_reuse();
    v.note_purge();
    v.report(out, args.format)
}

/// What `--verify` finds wrong in the page headers of the segments holding `[from, to)`, as
/// its damage lines (no key needed): for `--stats` on a pagelevel log it has no key for, whose
/// records it cannot count, so that damage there is not passed over.
pub fn page_damage(reader: Reader, range: (Lsn, Lsn)) -> Result<Vec<String>, Fail> {
    let mut v = Verify::new(reader, None, range);
    v.check_pages()?;
    Ok(v.found.damage)
}

impl<'a> Verify<'a> {
    fn new(reader: Reader, ring: Option<&'a KeyRing>, (from, to): (Lsn, Lsn)) -> Verify<'a> {
        let geo = reader.geometry();
        let listed_end = reader.segments().last().map_or(Lsn(u64::MAX), |s| {
            s.header.start.saturating_add(geo.segment_size)
        });
        Verify {
            disk: Disk::new(&reader),
            listed_end,
            reopen: None,
            reader,
            ring,
            from,
            to,
            found: Findings::default(),
            ivs: Vec::new(),
            written_pages: Vec::new(),
            earlier_life_pages: 0,
            between_page_passes: Box::new(|_| {}),
        }
    }
}

impl Verify<'_> {
    fn geo(&self) -> inspect::Geometry {
        self.reader.geometry()
    }

    /// Compares each key of the key file with the check value every segment records for its
    /// id. Returns true when nothing disagrees.
    fn check_key_values(&mut self, args: &Args) -> bool {
        let Some(ring) = self.ring else {
            if self.reader.mode().is_encrypted() {
                self.found
                    .unchecked
                    .push("key check values not compared: no --key-file".into());
            }
            return true;
        };
        let file = args
            .key_file
            .as_deref()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let mut ok = true;
        let mut checked: std::collections::BTreeMap<u32, bool> = Default::default();
        for seg in self.reader.segments() {
            for (i, (id, kcv)) in seg.header.key_checks.iter().enumerate() {
                let name = inspect::segment_file_name(seg.header.start);
                let offset = inspect::kcv_entry_at(i);
                match ring.get(*id) {
                    Some(key) if key.log_check_value(seg.header.log_id, *id) != *kcv => {
                        ok = false;
                        checked.insert(*id, false);
                        self.found.keys.push(format!(
                            "segment {name} offset {offset}: {} in key file {file} is the \
                             wrong key: it does not match the key the log {} was written with \
                             (the log's check value there is {}, this key's would be {}); check \
                             that the key file or store is this log's",
                            key_identity(*id, key),
                            args.path.display(),
                            hex(kcv),
                            hex(&key.log_check_value(seg.header.log_id, *id))
                        ));
                    }
                    Some(_) => {
                        checked.entry(*id).or_insert(true);
                    }
                    None => self.found.notes.push(format!(
                        "segment {name} lists key id {id}, which key file {file} lacks"
                    )),
                }
            }
        }
        self.found.checked_keys = checked
            .into_iter()
            .filter_map(|(id, matched)| {
                let key = ring.get(id)?;
                Some(CheckedKey {
                    id,
                    fingerprint: fingerprint(key),
                    result: if matched { "match" } else { "wrong_key" },
                })
            })
            .collect();
        ok
    }

    /// Segment files form a run without gaps and have their full size.
    fn check_segments(&mut self) -> Result<(), Fail> {
        let geo = self.geo();
        let segs: Vec<(Lsn, std::path::PathBuf)> = self
            .reader
            .segments()
            .iter()
            .map(|s| (s.header.start, s.path.clone()))
            .collect();
        for pair in segs.windows(2) {
            let (a, b) = (pair[0].0, pair[1].0);
            if b != a + geo.segment_size {
                self.found.damage.push(format!(
                    "segment files missing between {} and {} (expected {} next)",
                    inspect::segment_file_name(a),
                    inspect::segment_file_name(b),
                    inspect::segment_file_name(a + geo.segment_size)
                ));
            }
        }
        for (start, path) in &segs {
            if !self.in_range_segment(*start) {
                continue;
            }
            let Some(len) = self.segment_len(*start, path)? else {
                continue;
            };
            if len < geo.segment_size {
                self.found.damage.push(format!(
                    "segment {} is {len} bytes, expected {}: truncated at offset {len}",
                    inspect::segment_file_name(*start),
                    geo.segment_size
                ));
            }
        }
        Ok(())
    }

    /// The length of the segment file at `path` (starting at `start`), or `None` when a purge
    /// removed it after the files were listed (kept for the note).
    fn segment_len(&mut self, start: Lsn, path: &std::path::Path) -> Result<Option<u64>, Fail> {
        match std::fs::metadata(path) {
            Ok(meta) => Ok(Some(meta.len())),
            Err(e) => self.unless_purged(segment_gone(path, start, start, "stat", &e)),
        }
    }

    /// `Ok(None)` for a failure that is a purge (the oldest segment left is kept for the
    /// note), else the failure.
    fn unless_purged<T>(&mut self, fail: Fail) -> Result<Option<T>, Fail> {
        match fail.purged {
            Some(oldest) => {
                self.found.purged = self.found.purged.max(Some(oldest));
                Ok(None)
            }
            None => Err(fail),
        }
    }

    /// A note that segment files were purged while the log was verified, if any were.
    fn note_purge(&mut self) {
        if let Some(oldest) = self.found.purged {
            self.found.notes.push(format!(
                "segment files before {} were purged while the log was verified (a writer \
                 removed old segments): they are no longer part of the log, and what they held \
                 was checked only as far as it was read before they went",
                inspect::segment_file_name(oldest)
            ));
        }
    }

    fn in_range_segment(&self, start: Lsn) -> bool {
        start + self.geo().segment_size > self.from && start < self.to
    }

    /// Every page header: valid, at its own address, flagged for the log's mode, naming a key
    /// its segment lists; never-written pages only after the last written one.
    fn check_pages(&mut self) -> Result<(), Fail> {
        let segs: Vec<SegmentInfo> = self.reader.segments().to_vec();
        let (first, last) = crate::progress::span(&self.reader);
        let mut progress = crate::progress::Progress::new("verify: pages", first, last);
        for seg in segs {
            let (start, path) = (seg.header.start, &seg.path);
            if !self.in_range_segment(start) {
                continue;
            }
            let listed: Vec<u32> = seg.header.key_checks.iter().map(|(id, _)| *id).collect();
            let mark = self.pages_mark();
            // A segment a purge removed after the listing is no longer part of the log.
            if let Err(fail) = self.check_segment_pages(start, &listed, path, &mut progress) {
                self.unless_purged::<()>(fail)?;
                continue;
            }
            // Nor is one whose file a purge took and reuse made into a later segment while its
            // pages were read: what was read may be that segment's pages, at other addresses.
            let still_holds = match self.disk.still_holds(&seg.header) {
                Ok(holds) => holds,
                Err(fail) => self.unless_purged(fail)?.unwrap_or(false),
            };
            if !still_holds {
                self.back_to(mark);
                self.reused_under_reader(start, path);
            }
        }
        if self.earlier_life_pages > 0 {
            self.found.notes.push(format!(
                "{} pages past the end of the log in reused segment files are those of the \
                 files' earlier life (not part of the log)",
                self.earlier_life_pages
            ));
        }
        Ok(())
    }

    /// Where the page checks' findings stand now.
    fn pages_mark(&self) -> PagesMark {
        PagesMark {
            damage: self.found.damage.len(),
            pages: self.found.pages,
            written_pages: self.written_pages.len(),
            ivs: self.ivs.len(),
            earlier_life_pages: self.earlier_life_pages,
        }
    }

    /// Forgets the page checks' findings made since `mark`.
    fn back_to(&mut self, mark: PagesMark) {
        self.found.damage.truncate(mark.damage);
        self.found.pages = mark.pages;
        self.written_pages.truncate(mark.written_pages);
        self.ivs.truncate(mark.ivs);
        self.earlier_life_pages = mark.earlier_life_pages;
    }

    /// The segment starting at `start`, whose file (listed at `path`) stopped holding it while
    /// its pages were read: purged (and its file reused) when every segment file left starts
    /// after it, kept for the note like any purge. Otherwise nothing the writer does explains
    /// it (a purge takes the oldest segments, and reuse renames a file before it rewrites it),
    /// and it is damage.
    fn reused_under_reader(&mut self, start: Lsn, path: &std::path::Path) {
        match purged_since(path, start) {
            Some(oldest) => self.found.purged = self.found.purged.max(Some(oldest)),
            None => self.found.damage.push(format!(
                "segment {}: its header changed while its pages were read, though no purge \
                 removed the segment (a segment file at or before it is still there): its \
                 pages were not checked",
                inspect::segment_file_name(start)
            )),
        }
    }

    /// The page headers of the segment starting at `start` (listing the key ids `listed`), in
    /// the file at `path`.
    fn check_segment_pages(
        &mut self,
        start: Lsn,
        listed: &[u32],
        path: &std::path::Path,
        progress: &mut crate::progress::Progress,
    ) -> Result<(), Fail> {
        let geo = self.geo();
        let mode = self.reader.mode();
        let log_id = self.reader.log_id();
        // Pages at or past the end of the file read as zeros and were never written, and
        // no written page follows them: the walk stops at the file's end (a short file is
        // reported by `check_segment_files`). The segment size comes from a header anyone
        // can rewrite; walking it whole, a 4 KiB file claiming 1 TiB segments made 2^31
        // header reads.
        let Some(len) = self.segment_len(start, path)? else {
            return Ok(());
        };
        let pages = (start + geo.page_size).0..(start + geo.segment_size.min(len)).0;
        let pages = pages.step_by(geo.page_size as usize).map(Lsn);
        // A reused segment file is not wiped: past the last page the log wrote in it, its
        // pages may still be those of its earlier life (each header naming the same offset
        // of an earlier segment), which readers reject by their address. Not the log's,
        // and not damage; before a page the log wrote, such a page is a lost write. Found
        // by a first pass over the headers, so that none is kept: memory does not grow
        // with the segment's size.
        let mut last_written = start;
        for page in pages.clone() {
            let bytes = self.disk.page_header_bytes(page)?;
            if bytes.iter().any(|&b| b != 0) && !earlier_life(geo, log_id, page, &bytes) {
                last_written = page;
            }
        }
        (self.between_page_passes)(start);
        let mut hole: Option<Lsn> = None;
        for page in pages {
            progress.at(page);
            let bytes = self.disk.page_header_bytes(page)?;
            if bytes.iter().all(|&b| b == 0) {
                hole.get_or_insert(page);
                continue;
            }
            if page > last_written && earlier_life(geo, log_id, page, &bytes) {
                self.earlier_life_pages += 1;
                continue;
            }
            self.found.pages += 1;
            self.written_pages.push(page);
            if let Some(h) = hole.take() {
                self.found.damage.push(format!(
                    "{}: page never written, but later pages of the segment were",
                    position(geo, h)
                ));
            }
            self.check_page(page, &bytes, log_id, mode, listed);
        }
        Ok(())
    }

    fn check_page(&mut self, page: Lsn, bytes: &[u8], log_id: u64, mode: Mode, listed: &[u32]) {
        let geo = self.geo();
        let at = position(geo, page);
        let h = match inspect::check_page_header(log_id, mode, page, bytes) {
            Ok(h) => h,
            Err(kind @ CorruptionKind::BadPageHeader) => {
                self.found
                    .damage
                    .push(format!("{at}: {kind} (bad magic, flags or checksum)"));
                return;
            }
            Err(kind) => {
                self.found.damage.push(format!("{at}: {kind}"));
                return;
            }
        };
        let encrypted = h.flags & PAGE_FLAG_ENCRYPTED != 0;
        if encrypted {
            if !listed.contains(&h.key_id) {
                let kind = CorruptionKind::UnlistedKey { key_id: h.key_id };
                self.found.damage.push(format!("{at}: page {kind}"));
            }
            self.ivs.push(IvUse {
                key_id: h.key_id,
                iv: h.iv,
                blocks: ((geo.page_size as usize - PAGE_HEADER_LEN) / 16) as u128,
                at: page,
                page: true,
            });
        }
    }

    /// Reads every record; after damage, resumes at the next page where a record starts.
    fn check_records(
        &mut self,
        target: Target,
        keys_match: bool,
        args: &Args,
        before_records: Box<dyn FnOnce() + '_>,
    ) -> Result<(), Fail> {
        let mode = self.reader.mode();
        let usable = self.ring.filter(|_| keys_match);
        let why = if self.ring.is_some() {
            "the key file does not match"
        } else {
            "no --key-file"
        };
        if mode == Mode::PageLevel && usable.is_none() {
            self.found.unchecked.push(format!(
                "pages' payloads not decrypted: {why}; records, record checksums and LSN \
                 continuity not checked"
            ));
            return Ok(());
        }
        if mode.is_per_record() && usable.is_none() {
            let tags = if mode.is_authenticated() {
                "; authentication tags not checked"
            } else {
                ""
            };
            self.found.unchecked.push(format!(
                "payloads not decrypted: {why} (record headers and checksums, which are \
                 plaintext, were checked){tags}"
            ));
        }
        let reader = target.open(usable, args.key_file.as_deref())?;
        before_records();
        self.reopen = Some((target.clone(), usable));
        let (first, last) = crate::progress::span(&reader);
        let mut progress = crate::progress::Progress::new("verify: records", first, last);
        // From the start of the log when the segment to start in was purged since the listing:
        // the reader then says where the oldest segment left starts.
        let mut begin = match self.disk.boundary_before(self.from) {
            Ok(begin) => begin,
            Err(fail) => self.unless_purged(fail)?.unwrap_or_default(),
        };
        let mut prev_end: Option<Lsn> = None;
        // Key ids records use that the key file lacks: their payloads (and perrecord-gcm tags)
        // could not be checked, so the log cannot be judged clean.
        let mut lacking = std::collections::BTreeSet::new();
        loop {
            let mut records = reader.raw_records_from(begin);
            let mut damage_at = None;
            let mut purged_to = None;
            for item in records.by_ref() {
                match item {
                    Ok(rec) => {
                        let lsn = rec.lsn;
                        progress.at(lsn);
                        if lsn >= self.to {
                            return Ok(());
                        }
                        if lsn >= self.listed_end {
                            self.found.notes.push(format!(
                                "the log grew while it was verified (a writer is appending): \
                                 records from {} on lie in segments made since the files were \
                                 listed, and were not checked",
                                fmt_lsn(lsn)
                            ));
                            return Ok(());
                        }
                        if lsn >= self.from {
                            self.check_record(&rec, prev_end);
                            if usable.is_some()
                                && rec.payload.is_none()
                                && let Some((id, _)) = rec.header.encryption
                                && lacking.insert(id)
                            {
                                self.found.keys.push(lacks_key(rec.lsn, id, mode, args));
                            }
                        }
                        prev_end = Some(rec.end_lsn);
                    }
                    Err(e @ walcrypt::Error::Corrupt { .. }) => {
                        if let walcrypt::Error::Corrupt { at, .. } = &e {
                            damage_at = Some((at.segment + at.offset).max(at.lsn));
                        }
                        self.found.damage.push(one_line(&e.to_string()));
                        break;
                    }
                    Err(e @ walcrypt::Error::AuthenticationFailed { .. }) => {
                        if let walcrypt::Error::AuthenticationFailed { at, .. } = &e {
                            damage_at = Some(at.lsn);
                        }
                        self.found.damage.push(one_line(&e.to_string()));
                        break;
                    }
                    // Segments purged since the files were listed are no longer part of the log:
                    // reading goes on at the first record of the oldest segment left.
                    Err(walcrypt::Error::Purged { oldest, .. }) => {
                        self.found.purged = self.found.purged.max(Some(oldest));
                        purged_to = Some(oldest);
                        break;
                    }
                    Err(e @ walcrypt::Error::Io { .. }) => return Err(Fail::from_wal(&e)),
                    Err(e) => {
                        let keys = target.key_context(args.key_file.as_deref(), usable);
                        let f = Fail::from_wal_with_keys(&e, &keys);
                        self.found.keys.push(f.message);
                        return Ok(());
                    }
                }
            }
            if let Some(oldest) = purged_to {
                match self.disk.first_record_in_segment(oldest)? {
                    Some(next) if next > begin && oldest < self.listed_end => {
                        begin = next;
                        prev_end = None;
                        continue;
                    }
                    _ => return Ok(()),
                }
            }
            match damage_at {
                Some(at) => match self.resume_after(at)? {
                    Some(next) if next > begin => {
                        self.found.notes.push(format!(
                            "resumed reading records at {} after the damage",
                            fmt_lsn(next)
                        ));
                        begin = next;
                        prev_end = None;
                    }
                    _ => return Ok(()),
                },
                None => {
                    if let Some(end) = records.end_lsn() {
                        self.check_tail(end)?;
                    }
                    return Ok(());
                }
            }
        }
    }

    /// Length of a segment-switch record starting at `lsn`: sealed (header with key id and IV,
    /// then a tag) in a perrecord-gcm segment of format version 4 or later, else 12 bytes.
    fn switch_len(&self, lsn: Lsn) -> u64 {
        let seg = self.geo().segment_start(lsn);
        let version = self
            .reader
            .segments()
            .iter()
            .find(|s| s.header.start == seg)
            .map_or(inspect::FORMAT_VERSION, |s| s.header.version);
        if self.reader.mode().is_authenticated()
            && version >= inspect::AUTHENTICATED_CONTROL_VERSION
        {
            (inspect::RECORD_HEADER_ENCRYPTED + inspect::TAG_LEN) as u64
        } else {
            inspect::RECORD_HEADER_PLAIN as u64
        }
    }

    fn check_record(&mut self, rec: &walcrypt::inspect::RawRecord, prev_end: Option<Lsn>) {
        let geo = self.geo();
        let lsn = rec.lsn;
        let at = position(geo, lsn);
        self.found.records += 1;
        if !crc_ok(rec) {
            self.found
                .damage
                .push(format!("{at}: record checksum mismatch"));
        }
        if let Some(pe) = prev_end {
            let next = geo.skip_headers(pe);
            // A segment-switch record at `next` (the cursor hands out none) sends the log to
            // the segment after the one holding its last byte, which may be the next segment.
            let after_switch = geo.skip_headers(geo.after_switch(next, self.switch_len(next)));
            // A pagelevel writer that reopened the log left the rest of the page unused and
            // resumed after a resume record at the start of the next page's body.
            let after_resume = geo.skip_headers(geo.page_start(pe) + geo.page_size)
                + (inspect::RECORD_HEADER_PLAIN + inspect::RESUME_PAYLOAD_LEN) as u64;
            if lsn != next && lsn != after_switch && lsn != after_resume {
                self.found.damage.push(format!(
                    "{at}: record does not follow the previous one, which ended at {}",
                    fmt_lsn(pe)
                ));
            }
        }
        if let Some((key_id, iv)) = rec.header.encryption {
            let seg = geo.segment_start(lsn);
            let listed = self
                .reader
                .segments()
                .iter()
                .find(|s| s.header.start == seg)
                .is_some_and(|s| s.header.lists_key(key_id));
            if !listed {
                self.found.damage.push(format!(
                    "{at}: record uses key id {key_id}, which its segment header does not list"
                ));
            }
            self.ivs.push(IvUse {
                key_id,
                iv,
                blocks: (rec.header.len as u128).div_ceil(16).max(1),
                at: lsn,
                page: false,
            });
        }
    }

    /// The first record boundary on a page after the one holding `at`.
    fn resume_after(&mut self, at: Lsn) -> Result<Option<Lsn>, Fail> {
        let geo = self.geo();
        for &page in self.written_pages.clone().iter() {
            if page <= geo.page_start(at) {
                continue;
            }
            if let Some(h) = self.disk.page_header(page)? {
                let b = geo.advance(geo.skip_headers(page), h.rem_len as u64);
                if b < page + geo.page_size {
                    return Ok(Some(b));
                }
            }
        }
        Ok(None)
    }

    /// After the end of the valid log nothing may follow: the rest of the tail page is zero
    /// (decrypted, in pagelevel) and no later page was written.
    fn check_tail(&mut self, end: Lsn) -> Result<(), Fail> {
        if end >= self.to || end >= self.listed_end {
            return Ok(());
        }
        let geo = self.geo();
        let tail_page = geo.page_start(end);
        let mut leftover = 0usize;
        // Past the last record the page holds zeros as written, in every mode: pagelevel
        // encrypts only the filled part of a body.
        if !end.0.is_multiple_of(geo.page_size) && self.disk.page_header(tail_page)?.is_some() {
            let mut page = vec![0u8; geo.page_size as usize];
            let n = self.disk.read(tail_page, &mut page)?;
            page.truncate(n);
            let from = ((end - tail_page) as usize).min(page.len());
            leftover = page[from..].iter().filter(|&&b| b != 0).count();
        }
        let later = self
            .written_pages
            .iter()
            .filter(|&&p| p > tail_page || (p == tail_page && end.0.is_multiple_of(geo.page_size)))
            .count();
        if (leftover > 0 || later > 0) && self.grows_at(end) {
            self.found.notes.push(format!(
                "the log grew while it was verified (a writer is appending): checked through {}",
                fmt_lsn(end)
            ));
            return Ok(());
        }
        if leftover > 0 || later > 0 {
            self.found.damage.push(format!(
                "{}: the valid log ends here, but {leftover} non-zero bytes follow in its page \
                 and {later} later pages were written (a torn tail not yet recovered, or damage \
                 to the last records)",
                position(geo, end)
            ));
        }
        Ok(())
    }

    /// Whether a record now starts at `end`, where the records pass found the valid log to
    /// end: a writer appended there while the log was read (bytes after the end of a live
    /// log are its next records, being written), not a torn tail. Looked at a few times over
    /// 100 ms, since a write-out may be under way at the first look; a crash's torn tail never
    /// turns into a record.
    fn grows_at(&self, end: Lsn) -> bool {
        let Some((target, keys)) = &self.reopen else {
            return false;
        };
        for _ in 0..5 {
            // A fresh reader, as the records pass opened its own (keys, required mode): the
            // record may run into a segment made since the files were listed.
            if let Ok(reader) = target.open(*keys, None)
                && let Some(Ok(rec)) = reader.raw_records_from(end).next()
                && rec.lsn >= end
            {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        false
    }

    /// Under one key, no counter block may serve two records (or two page writes).
    fn check_iv_reuse(&mut self) {
        let mut uses: Vec<(u32, u128, u128, usize)> = self
            .ivs
            .iter()
            .enumerate()
            .map(|(i, u)| {
                let start = u128::from_be_bytes(u.iv);
                (u.key_id, start, start.saturating_add(u.blocks), i)
            })
            .collect();
        uses.sort();
        let mut holder: Option<(u32, u128, usize)> = None;
        for &(key, start, end, i) in &uses {
            if let Some((hkey, hend, h)) = holder
                && hkey == key
                && start < hend
            {
                let (a, b) = (&self.ivs[h], &self.ivs[i]);
                let what = if a.iv == b.iv {
                    format!("IV {} reused under key id {key}", hex(&b.iv))
                } else {
                    format!(
                        "counter blocks overlap under key id {key} (IVs {} and {})",
                        hex(&a.iv),
                        hex(&b.iv)
                    )
                };
                let geo = self.geo();
                self.found.damage.push(format!(
                    "{what}: {} and {}",
                    a.describe(geo),
                    b.describe(geo)
                ));
            }
            if holder.is_none_or(|(hkey, hend, _)| hkey != key || end > hend) {
                holder = Some((key, end, i));
            }
        }
    }

    fn report(self, out: &mut dyn Write, format: OutputFormat) -> Result<u8, Fail> {
        let f = &self.found;
        let problems = f.damage.len() + f.keys.len();
        // Page headers alone do not make a log clean: when pages hold records that could not
        // be read, nothing the log's user cares about was checked.
        let (code, result) = if !f.damage.is_empty() {
            (EXIT_DAMAGE, "damage")
        } else if !f.keys.is_empty() {
            (EXIT_TROUBLE, "key_problem")
        } else if f.records == 0 && f.pages > 0 && !f.unchecked.is_empty() {
            (EXIT_UNCHECKED, "not_checked")
        } else {
            (EXIT_OK, "clean")
        };
        if format == OutputFormat::Json {
            let report = JsonReport {
                result,
                exit_code: code,
                mode: self.reader.mode().name(),
                segments: self.reader.segments().len(),
                pages: f.pages,
                records: f.records,
                damage: &f.damage,
                key_problems: &f.keys,
                keys_checked: &f.checked_keys,
                not_checked: &f.unchecked,
                notes: &f.notes,
            };
            write_json(out, &report)?;
        } else {
            writeln!(out, "mode: {}", self.reader.mode())?;
            for k in &f.checked_keys {
                let result = if k.result == "match" {
                    "matches the log's check values"
                } else {
                    "does not match the log (wrong key)"
                };
                writeln!(
                    out,
                    "key checked: key id {}, fingerprint {}: {result}",
                    k.id, k.fingerprint
                )?;
            }
            for d in &f.damage {
                writeln!(out, "damage: {d}")?;
            }
            for k in &f.keys {
                writeln!(out, "key: {k}")?;
            }
            for u in &f.unchecked {
                writeln!(out, "not checked: {u}")?;
            }
            for n in &f.notes {
                writeln!(out, "note: {n}")?;
            }
            let summary = format!(
                "verify: {} segments, {} pages, {} records checked",
                self.reader.segments().len(),
                f.pages,
                f.records
            );
            let plural = if problems == 1 { "" } else { "s" };
            let partly = if f.unchecked.is_empty() {
                ""
            } else {
                " as far as checked (see \"not checked\")"
            };
            match code {
                EXIT_OK => writeln!(out, "{summary}: clean{partly}")?,
                EXIT_UNCHECKED => writeln!(
                    out,
                    "{summary}: not verified, only page headers could be checked (see \"not checked\")"
                )?,
                _ => writeln!(out, "{summary}: {problems} problem{plural}")?,
            }
        }
        if code == EXIT_TROUBLE {
            out.flush()?;
            return Err(Fail::trouble(format!("verify: {}", f.keys[0])));
        }
        Ok(code)
    }
}

/// `--verify --format json`: one object; the field names are stable (docs/WAL-DUMP.md).
#[derive(Serialize)]
struct JsonReport<'a> {
    result: &'static str,
    exit_code: u8,
    mode: &'static str,
    segments: usize,
    pages: u64,
    records: u64,
    damage: &'a [String],
    key_problems: &'a [String],
    keys_checked: &'a [CheckedKey],
    not_checked: &'a [String],
    notes: &'a [String],
}

/// A key of the key file that a segment lists: its identity, and whether it matched the log's
/// check value in every segment that lists it.
#[derive(Serialize)]
struct CheckedKey {
    id: u32,
    fingerprint: String,
    /// `match` or `wrong_key`.
    result: &'static str,
}

/// The `key:` finding for the first record at `lsn` under key id `id`, which the key file
/// lacks.
fn lacks_key(lsn: Lsn, id: u32, mode: Mode, args: &Args) -> String {
    let file = args
        .key_file
        .as_deref()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let tags = if mode.is_authenticated() {
        " and their authentication tags"
    } else {
        ""
    };
    format!(
        "record at {} uses key id {id}, which key file {file} lacks: the payloads under it{tags} \
         were not checked; give the key file or store that holds it",
        fmt_lsn(lsn)
    )
}
