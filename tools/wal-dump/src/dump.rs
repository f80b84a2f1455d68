//! The default output: one line (or JSON object) per record or page, and `--follow`.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use walcrypt::inspect::{self, Geometry, PAGE_FLAG_ENCRYPTED, RawRecord};
use walcrypt::{Error, Follower, KeyRing, KeyStore, Lsn, Mode, Reader, Visibility};

use crate::fail::{EXIT_OK, Fail};
use crate::kinds::Selection;
use crate::source::{
    Disk, Target, fmt_lsn, hex, load_key_source, open_target_with_source, position,
};
use crate::{Args, OutputFormat, PayloadFormat};

/// How long `--follow` waits for a record in one call (its output is flushed whenever it has
/// caught up with the writer).
const POLL: Duration = Duration::from_millis(200);

pub fn run(args: &Args, out: &mut dyn Write) -> Result<u8, Fail> {
    let selection = Selection::from_args(args)?;
    if args.follow && no_log_yet(&args.path) {
        return follow_from_creation(args, selection, out);
    }
    let (source, target, reader) = open_target_with_source(
        args.key_file.as_deref(),
        &args.kek,
        &args.path,
        args.require_mode,
    )?;
    let keys = source.ring;
    let mut disk = Disk::new(&reader);
    let (from, to) = target.range(&reader, args.start, args.end);
    if args.pages || (reader.mode() == Mode::PageLevel && keys.is_none()) {
        if !args.pages {
            let note = "pagelevel log: page bodies are encrypted, records need --key-file; \
                        showing page headers";
            match args.format {
                OutputFormat::Text => writeln!(out, "# {note}")?,
                OutputFormat::Json => eprintln!("wal-dump: {note}"),
            }
            if args.follow {
                return Err(Fail::trouble(
                    "--follow on a pagelevel log needs --key-file to read records",
                ));
            }
        }
        list_pages(args, &reader, &mut disk, from, to, out)?;
        return Ok(EXIT_OK);
    }
    let mut lister = Lister {
        args,
        keys: keys.as_ref(),
        store: source.store,
        selection,
        shown: 0,
    };
    let begin = disk.boundary_before(from)?;
    if args.follow {
        return lister.follow(&target, begin, from, to, out);
    }
    lister.list(&reader, &mut disk, begin, from, to, out)?;
    if lister.shown == 0 {
        let filtered = lister.selection.filters();
        let note = nothing_shown(args, filtered, &target, &reader, &mut disk)?;
        match args.format {
            OutputFormat::Text => writeln!(out, "# {note}")?,
            OutputFormat::Json => eprintln!("wal-dump: {note}"),
        }
    }
    Ok(EXIT_OK)
}

/// Why a listing showed no record.
fn nothing_shown(
    args: &Args,
    selected: bool,
    target: &Target,
    reader: &Reader,
    disk: &mut Disk,
) -> Result<String, Fail> {
    let filtered = args.start.is_some() || args.end.is_some() || selected || args.limit == Some(0);
    if let Some(seg) = target.segment {
        let name = inspect::segment_file_name(seg);
        let first_page = seg + reader.geometry().page_size;
        if disk.page_header(first_page)?.is_none() {
            return Ok(format!(
                "no records: segment {name} has no written page (a segment prepared ahead of \
                 the writer, or not reached yet)"
            ));
        }
        if !filtered {
            return Ok(format!("no records start in segment {name}"));
        }
    }
    Ok(if filtered {
        "no records match --start, --end, --kind, --key-id or --limit".into()
    } else {
        "no records: the log holds none yet".into()
    })
}

/// Whether `path` is a directory (or a place for one) that holds no log yet.
fn no_log_yet(path: &Path) -> bool {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => matches!(Reader::open(path, None), Err(Error::NoLog(_))),
        Ok(_) => false,
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

/// `--follow` on a directory where no log exists yet: wait for the writer to create it.
fn follow_from_creation(
    args: &Args,
    selection: Selection,
    out: &mut dyn Write,
) -> Result<u8, Fail> {
    eprintln!(
        "wal-dump: no log in {} yet; waiting for one",
        args.path.display()
    );
    let source = load_key_source(args.key_file.as_deref(), &args.kek)?;
    let keys = source.ring;
    let target = Target {
        dir: args.path.clone(),
        segment: None,
        require_mode: args.require_mode,
    };
    let mut lister = Lister {
        args,
        keys: keys.as_ref(),
        store: source.store,
        selection,
        shown: 0,
    };
    let from = args.start.unwrap_or_default();
    let to = args.end.unwrap_or(Lsn(u64::MAX));
    lister.follow(&target, Lsn(0), from, to, out)
}

/// What to do with a record the listing reached.
enum Admit {
    Show,
    Skip,
    Stop,
}

struct Lister<'a> {
    args: &'a Args,
    keys: Option<&'a KeyRing>,
    /// The key store `keys` came from, if any: `--follow` reads it again for a key the
    /// writer added since (a data-key rotation).
    store: Option<Arc<KeyStore>>,
    selection: Selection,
    shown: u64,
}

impl Lister<'_> {
    /// Lists records from the boundary `begin`, showing those in `[from, to)`, up to the end
    /// of the log, the range or the limit.
    fn list(
        &mut self,
        reader: &Reader,
        disk: &mut Disk,
        begin: Lsn,
        from: Lsn,
        to: Lsn,
        out: &mut dyn Write,
    ) -> Result<(), Fail> {
        let layout = (reader.mode(), reader.geometry());
        for item in reader.raw_records_from(begin) {
            let rec = item.map_err(|e| Fail::from_wal_with_keys(&e, &self.key_context()))?;
            match self.admit(layout, disk, &rec, from, to)? {
                Admit::Stop => break,
                Admit::Skip => {}
                Admit::Show => self.show(layout, disk, &rec, out)?,
            }
        }
        Ok(())
    }

    /// `--follow`: lists records from `begin` with the library's follower, which picks up new
    /// pages and segments as the writer adds them, until the range or limit is exhausted or
    /// the tool is stopped. Shows what the writer has written, or with `--durable` only what
    /// it has made durable.
    fn follow(
        &mut self,
        target: &Target,
        begin: Lsn,
        from: Lsn,
        to: Lsn,
        out: &mut dyn Write,
    ) -> Result<u8, Fail> {
        let visibility = if self.args.durable {
            Visibility::Durable
        } else {
            Visibility::Written
        };
        let keys = target.key_context(self.args.key_file.as_deref(), self.keys);
        let fail = |e: walcrypt::Error| Fail::from_wal_with_keys(&e, &keys);
        // With a key store, the follower reads it again for a key the writer added since (a
        // data-key rotation), for pages and records alike.
        let follower = match &self.store {
            Some(store) => Follower::open_with_key_store(&target.dir, store.clone(), begin),
            None => Follower::open(&target.dir, self.keys.cloned(), begin),
        };
        let mut follower = follower.map_err(fail)?.visibility(visibility);
        if let Some(mode) = target.require_mode {
            follower = follower.require_mode(mode).map_err(fail)?;
        }
        let mut disk = None;
        loop {
            // Output goes out whenever the listing has caught up with the writer.
            let rec = match follower.poll_raw().map_err(fail)? {
                Some(rec) => rec,
                None => {
                    out.flush()?;
                    match follower.next_raw_timeout(POLL).map_err(fail)? {
                        Some(rec) => rec,
                        None => continue,
                    }
                }
            };
            let (Some(mode), Some(geo), Some(log_id)) =
                (follower.mode(), follower.geometry(), follower.log_id())
            else {
                continue;
            };
            let disk = match &mut disk {
                Some(d) if Disk::covers(d, follower.segments()) => d,
                slot => slot.insert(Disk::over(geo, log_id, follower.segments())),
            };
            match self.admit((mode, geo), disk, &rec, from, to)? {
                Admit::Stop => return Ok(EXIT_OK),
                Admit::Skip => {}
                Admit::Show => self.show((mode, geo), disk, &rec, out)?,
            }
            if self.args.limit.is_some_and(|l| self.shown >= l) {
                return Ok(EXIT_OK);
            }
        }
    }

    /// Whether `rec` is shown, skipped (outside `[from, to)`, of another kind or key id), or
    /// ends the listing (past `to`, or the limit reached).
    fn admit(
        &self,
        layout: (Mode, Geometry),
        disk: &mut Disk,
        rec: &RawRecord,
        from: Lsn,
        to: Lsn,
    ) -> Result<Admit, Fail> {
        let lsn = rec.lsn;
        if lsn >= to || self.args.limit.is_some_and(|l| self.shown >= l) {
            return Ok(Admit::Stop);
        }
        if lsn < from || !self.selection.admits(layout, disk, rec)? {
            return Ok(Admit::Skip);
        }
        Ok(Admit::Show)
    }

    fn key_file(&self) -> Option<&Path> {
        self.args.key_file.as_deref()
    }

    /// The log, key file and keys, to name in key errors.
    fn key_context(&self) -> crate::fail::KeyContext<'_> {
        crate::fail::KeyContext {
            log: Some(&self.args.path),
            key_file: self.key_file(),
            ring: self.keys,
        }
    }

    fn show(
        &mut self,
        layout: (Mode, Geometry),
        disk: &mut Disk,
        rec: &RawRecord,
        out: &mut dyn Write,
    ) -> Result<(), Fail> {
        let mut view = RecordView::new(layout, disk, rec)?;
        if let Some(names) = &self.selection.names {
            view.kind_name = Some(names.name(rec.header.kind).map(str::to_string));
            view.desc = rec
                .payload
                .as_ref()
                .and_then(|p| names.describe(rec.header.kind, p));
        }
        let payload = self.payload(layout, disk, rec, &view)?;
        self.shown += 1;
        match self.args.format {
            OutputFormat::Text => view.write_text(&payload, self.args.payload, out)?,
            OutputFormat::Json => view.write_json(&payload, self.args.payload, out)?,
        }
        Ok(())
    }

    /// The payload bytes to show: decrypted, as stored (`--raw`), or `Hidden` when encrypted
    /// and no key was given.
    fn payload(
        &self,
        (mode, geo): (Mode, Geometry),
        disk: &mut Disk,
        rec: &RawRecord,
        view: &RecordView,
    ) -> Result<Shown, Fail> {
        if self.args.payload == PayloadFormat::None {
            return Ok(if view.encrypted && rec.payload.is_none() {
                Shown::Hidden
            } else {
                Shown::NotAsked
            });
        }
        if self.args.raw {
            if mode == Mode::PageLevel {
                let at = geo.advance(view.lsn, rec.header.len_bytes() as u64);
                return Ok(Shown::Bytes(disk.stream(at, rec.header.len as usize)?));
            }
            return Ok(Shown::Bytes(rec.stored.clone()));
        }
        match (&rec.payload, self.keys) {
            (Some(p), _) => Ok(Shown::Bytes(p.clone())),
            (None, None) => Ok(Shown::Hidden),
            (None, Some(_)) => {
                let id = view.key_id.unwrap_or(0);
                let file = self
                    .key_file()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default();
                Err(Fail::trouble(format!(
                    "log {}, key file {file}: the log needs key id {id}, which the key ring \
                     lacks (record at {}); give the key file or store that holds it",
                    self.args.path.display(),
                    position(geo, view.lsn)
                )))
            }
        }
    }
}

/// What is shown of a payload.
enum Shown {
    NotAsked,
    Hidden,
    Bytes(Vec<u8>),
}

/// The header fields of one record as the tool shows them.
pub struct RecordView {
    pub lsn: Lsn,
    pub end_lsn: Lsn,
    pub kind: u8,
    pub len: u32,
    pub header_len: usize,
    pub encrypted: bool,
    /// `record` (perrecord), `page` (pagelevel) or `none`.
    pub encryption: &'static str,
    pub key_id: Option<u32>,
    pub iv: Option<[u8; walcrypt::IV_LEN]>,
    pub crc_ok: bool,
    /// With `--kinds`: the kind's name, if the file gives one.
    pub kind_name: Option<Option<String>>,
    /// With `--kinds`: the payload described by the kind's payload format, when it has one
    /// and the payload is readable.
    pub desc: Option<String>,
}

impl RecordView {
    pub fn new(
        (mode, geo): (Mode, Geometry),
        disk: &mut Disk,
        rec: &RawRecord,
    ) -> Result<RecordView, Fail> {
        let lsn = rec.lsn;
        let (encryption, key_id, iv) = match (mode, rec.header.encryption) {
            (_, Some((id, iv))) => ("record", Some(id), Some(iv)),
            (Mode::PageLevel, None) => {
                let page = disk.page_header(geo.page_start(lsn))?;
                let id = page
                    .filter(|h| h.flags & PAGE_FLAG_ENCRYPTED != 0)
                    .map(|h| h.key_id);
                ("page", id, None)
            }
            _ => ("none", None, None),
        };
        Ok(RecordView {
            lsn,
            end_lsn: rec.end_lsn,
            kind: rec.header.kind,
            len: rec.header.len,
            header_len: rec.header.len_bytes(),
            encrypted: encryption != "none",
            encryption,
            key_id,
            iv,
            crc_ok: crc_ok(rec),
            kind_name: None,
            desc: None,
        })
    }

    fn write_text(
        &self,
        payload: &Shown,
        how: PayloadFormat,
        out: &mut dyn Write,
    ) -> Result<(), Fail> {
        let key = self
            .key_id
            .map(|k| k.to_string())
            .unwrap_or_else(|| "-".into());
        let iv = match (self.iv, self.encryption) {
            (Some(iv), _) => hex(&iv),
            (None, "page") => "page".into(),
            _ => "-".into(),
        };
        let kind = match &self.kind_name {
            Some(Some(name)) => format!("{} ({name})", self.kind),
            _ => self.kind.to_string(),
        };
        write!(
            out,
            "lsn: {}  len: {}  kind: {}  key: {}  iv: {}  crc: {}",
            fmt_lsn(self.lsn),
            self.len,
            kind,
            key,
            iv,
            if self.crc_ok { "ok" } else { "BAD" }
        )?;
        match payload {
            Shown::NotAsked => writeln!(out)?,
            Shown::Hidden if how == PayloadFormat::None => writeln!(out, "  payload: encrypted")?,
            Shown::Hidden => {
                writeln!(out)?;
                writeln!(out, "  payload: encrypted (pass --key-file to decrypt)")?;
            }
            Shown::Bytes(bytes) => {
                writeln!(out)?;
                match how {
                    PayloadFormat::Text => writeln!(out, "  payload: \"{}\"", escape(bytes))?,
                    _ => writeln!(out, "{}", format!("  payload: {}", hex(bytes)).trim_end())?,
                }
            }
        }
        if let Some(desc) = &self.desc {
            writeln!(out, "  desc: {desc}")?;
        }
        Ok(())
    }

    fn write_json(
        &self,
        payload: &Shown,
        how: PayloadFormat,
        out: &mut dyn Write,
    ) -> Result<(), Fail> {
        let (hex_payload, text_payload) = match (payload, how) {
            (Shown::Bytes(b), PayloadFormat::Hex) => (Some(Value::String(hex(b))), None),
            (Shown::Bytes(b), PayloadFormat::Text) => (
                None,
                Some(Value::String(String::from_utf8_lossy(b).into_owned())),
            ),
            (Shown::Hidden, PayloadFormat::Hex) => (Some(Value::Null), None),
            (Shown::Hidden, PayloadFormat::Text) => (None, Some(Value::Null)),
            _ => (None, None),
        };
        let obj = JsonRecord {
            lsn: self.lsn.0,
            lsn_text: fmt_lsn(self.lsn),
            end_lsn: self.end_lsn.0,
            end_lsn_text: fmt_lsn(self.end_lsn),
            kind: self.kind,
            kind_name: self.kind_name.clone(),
            len: self.len,
            header_len: self.header_len,
            encrypted: self.encrypted,
            encryption: self.encryption,
            key_id: self.key_id,
            iv: self.iv.map(|iv| hex(&iv)),
            crc_ok: self.crc_ok,
            payload: hex_payload,
            payload_text: text_payload,
            desc: self.desc.clone(),
        };
        serde_json::to_writer(&mut *out, &obj)
            .map_err(|e| Fail::trouble(format!("write output: {e}")))?;
        writeln!(out)?;
        Ok(())
    }
}

#[derive(Serialize)]
struct JsonRecord {
    lsn: u64,
    lsn_text: String,
    end_lsn: u64,
    end_lsn_text: String,
    kind: u8,
    #[serde(skip_serializing_if = "Option::is_none")]
    kind_name: Option<Option<String>>,
    len: u32,
    header_len: usize,
    encrypted: bool,
    encryption: &'static str,
    key_id: Option<u32>,
    iv: Option<String>,
    crc_ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload_text: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    desc: Option<String>,
}

#[derive(Serialize)]
struct JsonPage {
    page_lsn: u64,
    page_lsn_text: String,
    segment: String,
    offset: u64,
    valid: bool,
    encrypted: bool,
    key_id: Option<u32>,
    iv: Option<String>,
    rem_len: Option<u32>,
    durable_hint: Option<u64>,
    durable_hint_text: Option<String>,
}

/// Lists page headers in `[from, to)`; pages never written (all zero) are skipped.
fn list_pages(
    args: &Args,
    reader: &Reader,
    disk: &mut Disk,
    from: Lsn,
    to: Lsn,
    out: &mut dyn Write,
) -> Result<(), Fail> {
    let mut shown = 0u64;
    for info in reader.page_headers()? {
        let page = info.page_lsn;
        if page < from || page >= to {
            continue;
        }
        if args.limit.is_some_and(|l| shown >= l) {
            break;
        }
        if info.header.is_none() && disk.page_header_bytes(page)?.iter().all(|&b| b == 0) {
            continue;
        }
        let h = info.header;
        let encrypted = h.is_some_and(|h| h.flags & PAGE_FLAG_ENCRYPTED != 0);
        let key_id = h.filter(|_| encrypted).map(|h| h.key_id);
        let iv = h.filter(|_| encrypted).map(|h| hex(&h.iv));
        match args.format {
            OutputFormat::Text => match h {
                Some(h) => writeln!(
                    out,
                    "page: {}  key: {}  iv: {}  rem_len: {}  durable: {}",
                    fmt_lsn(page),
                    key_id.map(|k| k.to_string()).unwrap_or_else(|| "-".into()),
                    iv.unwrap_or_else(|| "-".into()),
                    h.rem_len,
                    fmt_lsn(h.durable_hint),
                )?,
                None => writeln!(
                    out,
                    "page: {}  invalid header at {}",
                    fmt_lsn(page),
                    position(reader.geometry(), page)
                )?,
            },
            OutputFormat::Json => {
                let obj = JsonPage {
                    page_lsn: page.0,
                    page_lsn_text: fmt_lsn(page),
                    segment: inspect::segment_file_name(info.segment),
                    offset: info.offset,
                    valid: h.is_some(),
                    encrypted,
                    key_id,
                    iv,
                    rem_len: h.map(|h| h.rem_len),
                    durable_hint: h.map(|h| h.durable_hint.into()),
                    durable_hint_text: h.map(|h| fmt_lsn(h.durable_hint)),
                };
                serde_json::to_writer(&mut *out, &obj)
                    .map_err(|e| Fail::trouble(format!("write output: {e}")))?;
                writeln!(out)?;
            }
        }
        shown += 1;
    }
    Ok(())
}

/// Bytes as text: printable ASCII as is, everything else escaped.
pub fn escape(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string()
}

/// Recomputes a record's checksum over its header and stored payload (and, by the format
/// version of the segment it starts in, its LSN).
pub fn crc_ok(rec: &RawRecord) -> bool {
    let mut head = [0u8; inspect::RECORD_HEADER_ENCRYPTED];
    let n = rec.header.len_bytes();
    rec.header.encode(&mut head[..n]);
    let lsn = rec.lsn;
    inspect::record_crc(rec.format_version, lsn, &head[..n], &rec.stored) == rec.header.crc
}
