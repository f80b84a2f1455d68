//! `--stats`: records per kind, where the log's bytes go, and what encryption costs in headers.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;

use walcrypt::inspect::{
    self, PAGE_FLAG_ENCRYPTED, PAGE_HEADER_LEN, RECORD_HEADER_ENCRYPTED, RECORD_HEADER_PLAIN,
};
use walcrypt::{KeyRing, Lsn, Mode, Reader};

use serde::Serialize;
use serde_json::{Value, json};

use crate::fail::{EXIT_DAMAGE, EXIT_OK, Fail, fingerprint, key_identity};
use crate::kinds::Selection;
use crate::output::write_json;
use crate::source::{Disk, Target, fmt_lsn, open_target};
use crate::{Args, OutputFormat};

#[derive(Default, Clone, Copy, Serialize)]
struct KindStats {
    count: u64,
    #[serde(rename = "payload_bytes")]
    payload: u64,
    #[serde(rename = "header_bytes")]
    header: u64,
}

/// Records counted, up to the end or the first damage.
#[derive(Default)]
struct Counted {
    kinds: BTreeMap<u8, KindStats>,
    record_keys: BTreeSet<u32>,
    first: Option<Lsn>,
    last_end: Lsn,
    records: u64,
    /// The damage that ended the count, with where it is.
    damage: Option<String>,
}

pub fn run(args: &Args, out: &mut dyn Write) -> Result<u8, Fail> {
    let selection = Selection::from_args(args)?;
    let (keys, target, reader) = open_target(
        args.key_file.as_deref(),
        &args.kek,
        &args.path,
        args.require_mode,
    )?;
    stats_listed(args, selection, keys, target, reader, out)
}

/// `--stats` of the log `reader` listed, with the keys `keys`.
pub(crate) fn stats_listed(
    args: &Args,
    selection: Selection,
    keys: Option<KeyRing>,
    target: Target,
    reader: Reader,
    out: &mut dyn Write,
) -> Result<u8, Fail> {
    let mut disk = Disk::new(&reader);
    let (from, to) = target.range(&reader, args.start, args.end);
    let json = args.format == OutputFormat::Json;
    let mut doc = serde_json::Map::new();
    if json {
        overview_json(&reader, &target, &mut doc);
    } else {
        write_overview(&reader, &target, out)?;
    }
    if reader.mode() == Mode::PageLevel && keys.is_none() {
        // No record can be counted, but the page headers are plaintext: damage to them is
        // reported as `--verify` reports it (the first problem; `--verify` lists them all).
        let ids = page_key_ids(&reader, from, to)?;
        let problems = crate::verify::page_damage(reader, (from, to))?;
        let damage = problems.first().map(|first| match problems.len() {
            1 => first.clone(),
            n => format!("{first} (and {} more; --verify lists them)", n - 1),
        });
        if json {
            doc.insert("records".into(), Value::Null);
            doc.insert(
                "not_counted".into(),
                "pagelevel pages are encrypted; pass --key-file to count records".into(),
            );
            doc.insert("key_ids_in_pages".into(), json!(ids));
            return finish_json(doc, damage, out);
        }
        writeln!(
            out,
            "records:            pagelevel pages are encrypted; pass --key-file to count records"
        )?;
        writeln!(out, "key ids in pages:   {}", join(&ids))?;
        if let Some(d) = &damage {
            writeln!(out)?;
            writeln!(out, "damage: {d}")?;
        }
        return damage_exit(damage.as_deref());
    }
    let counted = count(&reader, &mut disk, args, &selection, (from, to))?;
    let Some(first) = counted.first else {
        if json {
            doc.insert("records".into(), json!(0));
            return finish_json(doc, counted.damage, out);
        }
        writeln!(out, "records:            0")?;
        write_damage(counted.damage.as_deref(), out)?;
        return damage_exit(counted.damage.as_deref());
    };
    let used_keys = match reader.mode() {
        Mode::PerRecord | Mode::PerRecordGcm => counted.record_keys.iter().copied().collect(),
        Mode::PageLevel => page_key_ids(&reader, first, counted.last_end)?,
        // Plaintext, and a mode this build of the tool does not know: no key use counted.
        _ => Vec::new(),
    };
    let total = totals(&counted.kinds);
    let breakdown = Breakdown::of(&reader, first, counted.last_end, total);
    if json {
        doc.insert("records".into(), json!(counted.records));
        doc.insert("first_lsn".into(), json!(first.0));
        doc.insert("first_lsn_text".into(), json!(fmt_lsn(first)));
        doc.insert("end_lsn".into(), json!(counted.last_end.0));
        doc.insert("end_lsn_text".into(), json!(fmt_lsn(counted.last_end)));
        doc.insert("key_ids_in_use".into(), json!(used_keys));
        if let Some(ring) = keys.as_ref() {
            let identities: Vec<Value> = used_keys
                .iter()
                .map(|id| json!({"id": id, "fingerprint": ring.get(*id).map(fingerprint)}))
                .collect();
            doc.insert("keys_in_use".into(), json!(identities));
        }
        let kinds: Vec<Value> = counted
            .kinds
            .iter()
            .map(|(kind, k)| {
                let mut item = json!({"kind": kind, "count": k.count,
                    "payload_bytes": k.payload, "header_bytes": k.header});
                if selection.names.is_some() {
                    item["name"] = json!(selection.name(*kind));
                }
                item
            })
            .collect();
        doc.insert("kinds".into(), json!(kinds));
        doc.insert("total".into(), json!(total));
        doc.insert("bytes".into(), breakdown.json());
        return finish_json(doc, counted.damage, out);
    }
    writeln!(
        out,
        "lsn range:          {} .. {} (first record .. end of the last)",
        fmt_lsn(first),
        fmt_lsn(counted.last_end)
    )?;
    writeln!(out, "key ids in use:     {}", join(&used_keys))?;
    if let Some(ring) = keys.as_ref() {
        let identities: Vec<String> = used_keys
            .iter()
            .map(|id| match ring.get(*id) {
                Some(key) => key_identity(*id, key),
                None => format!("key id {id}, not in the key file"),
            })
            .collect();
        writeln!(out, "keys in use:        {}", identities.join("; "))?;
    }
    writeln!(out, "records:            {}", counted.records)?;
    writeln!(out)?;
    write_kind_table(&counted.kinds, total, &selection, out)?;
    writeln!(out)?;
    breakdown.write(out)?;
    write_damage(counted.damage.as_deref(), out)?;
    damage_exit(counted.damage.as_deref())
}

/// Exit 0, or for damage that ended the count, exit 1 with the damage also on stderr (after
/// what was counted on stdout).
fn damage_exit(damage: Option<&str>) -> Result<u8, Fail> {
    match damage {
        Some(d) => Err(Fail::damage(d)),
        None => Ok(EXIT_OK),
    }
}

/// Counts the records in `[from, to)` that the filters select, up to the end of the log or
/// its first damage.
fn count(
    reader: &Reader,
    disk: &mut Disk,
    args: &Args,
    selection: &Selection,
    (from, to): (Lsn, Lsn),
) -> Result<Counted, Fail> {
    let layout = (reader.mode(), reader.geometry());
    let mut c = Counted::default();
    let begin = disk.boundary_before(from)?;
    let (first, last) = crate::progress::span(reader);
    let mut progress = crate::progress::Progress::new("stats", first, last);
    for item in reader.raw_records_from(begin) {
        let rec = match item {
            Ok(rec) => rec,
            Err(e) => {
                let keys = crate::fail::KeyContext {
                    log: Some(&args.path),
                    key_file: args.key_file.as_deref(),
                    ring: None,
                };
                let fail = Fail::from_wal_with_keys(&e, &keys);
                if fail.code != EXIT_DAMAGE {
                    return Err(fail);
                }
                c.damage = Some(fail.message);
                break;
            }
        };
        let lsn = rec.lsn;
        progress.at(lsn);
        if lsn >= to || args.limit.is_some_and(|l| c.records >= l) {
            break;
        }
        if lsn < from || !selection.admits(layout, disk, &rec)? {
            continue;
        }
        let k = c.kinds.entry(rec.header.kind).or_default();
        k.count += 1;
        k.payload += rec.header.len as u64;
        k.header += rec.header.len_bytes() as u64;
        if let Some((id, _)) = rec.header.encryption {
            c.record_keys.insert(id);
        }
        c.first.get_or_insert(lsn);
        c.last_end = rec.end_lsn;
        c.records += 1;
    }
    Ok(c)
}

/// The damage that ended the count: what was counted is the log before it.
fn write_damage(damage: Option<&str>, out: &mut dyn Write) -> Result<(), Fail> {
    if let Some(d) = damage {
        writeln!(out)?;
        writeln!(out, "damage: {d}")?;
        writeln!(
            out,
            "counted: the records before the damage only; --verify reports the rest"
        )?;
    }
    Ok(())
}

fn finish_json(
    mut doc: serde_json::Map<String, Value>,
    damage: Option<String>,
    out: &mut dyn Write,
) -> Result<u8, Fail> {
    doc.insert("damage".into(), json!(damage));
    write_json(out, &Value::Object(doc))?;
    damage_exit(damage.as_deref())
}

fn overview_json(reader: &Reader, target: &Target, doc: &mut serde_json::Map<String, Value>) {
    let geo = reader.geometry();
    let segs = reader.segments();
    let name =
        |s: Option<&inspect::SegmentInfo>| s.map(|s| inspect::segment_file_name(s.header.start));
    doc.insert("mode".into(), json!(reader.mode().to_string()));
    doc.insert("segments".into(), json!(segs.len()));
    doc.insert("first_segment".into(), json!(name(segs.first())));
    doc.insert("last_segment".into(), json!(name(segs.last())));
    doc.insert(
        "selected_segment".into(),
        json!(target.segment.map(inspect::segment_file_name)),
    );
    doc.insert("page_size".into(), json!(geo.page_size));
    doc.insert("segment_size".into(), json!(geo.segment_size));
    let mut versions: BTreeMap<u32, usize> = BTreeMap::new();
    for s in segs {
        *versions.entry(s.header.version).or_default() += 1;
    }
    let versions: Vec<Value> = versions
        .iter()
        .map(|(v, n)| json!({"version": v, "segments": n}))
        .collect();
    doc.insert("format_versions".into(), json!(versions));
    let listed: BTreeSet<u32> = segs
        .iter()
        .flat_map(|s| s.header.key_checks.iter().map(|(id, _)| *id))
        .collect();
    doc.insert("key_ids_listed".into(), json!(listed));
}

fn write_overview(reader: &Reader, target: &Target, out: &mut dyn Write) -> Result<(), Fail> {
    let geo = reader.geometry();
    let segs = reader.segments();
    writeln!(out, "mode:               {}", reader.mode())?;
    let names = |s: &walcrypt::inspect::SegmentInfo| inspect::segment_file_name(s.header.start);
    match (target.segment, segs.first(), segs.last()) {
        (Some(start), _, _) => writeln!(
            out,
            "segments:           1 selected ({}) of {}",
            inspect::segment_file_name(start),
            segs.len()
        )?,
        (None, Some(a), Some(b)) => writeln!(
            out,
            "segments:           {} ({} .. {})",
            segs.len(),
            names(a),
            names(b)
        )?,
        _ => writeln!(out, "segments:           0")?,
    }
    writeln!(
        out,
        "geometry:           page {} B, segment {} B",
        geo.page_size, geo.segment_size
    )?;
    // After an upgrade a log holds segments of an older format version, then of the current.
    let mut versions: BTreeMap<u32, usize> = BTreeMap::new();
    for s in segs {
        *versions.entry(s.header.version).or_default() += 1;
    }
    let versions: Vec<String> = versions
        .iter()
        .map(|(v, n)| format!("{v} ({n} segment{})", if *n == 1 { "" } else { "s" }))
        .collect();
    writeln!(out, "format versions:    {}", versions.join(", "))?;
    let listed: BTreeSet<u32> = segs
        .iter()
        .flat_map(|s| s.header.key_checks.iter().map(|(id, _)| *id))
        .collect();
    writeln!(
        out,
        "key ids listed:     {} (check values in segment headers)",
        join(&listed.into_iter().collect::<Vec<_>>())
    )?;
    Ok(())
}

/// Key ids of the encrypted page headers in `[from, to)`.
fn page_key_ids(reader: &Reader, from: Lsn, to: Lsn) -> Result<Vec<u32>, Fail> {
    let first_page = reader.geometry().page_start(from);
    let ids: BTreeSet<u32> = reader
        .page_headers()?
        .into_iter()
        .filter(|p| (first_page..to).contains(&p.page_lsn))
        .filter_map(|p| p.header)
        .filter(|h| h.flags & PAGE_FLAG_ENCRYPTED != 0)
        .map(|h| h.key_id)
        .collect();
    Ok(ids.into_iter().collect())
}

fn totals(kinds: &BTreeMap<u8, KindStats>) -> KindStats {
    let mut total = KindStats::default();
    for k in kinds.values() {
        total.count += k.count;
        total.payload += k.payload;
        total.header += k.header;
    }
    total
}

/// The table of kinds; with `--kinds`, a column of names after the numbers.
fn write_kind_table(
    kinds: &BTreeMap<u8, KindStats>,
    total: KindStats,
    selection: &Selection,
    out: &mut dyn Write,
) -> Result<(), Fail> {
    let all = (total.payload + total.header).max(1) as f64;
    let width = selection.names.as_ref().map(|_| {
        kinds
            .keys()
            .map(|k| selection.name(*k).map_or(1, str::len))
            .chain([4])
            .max()
            .unwrap_or(4)
    });
    let name_cell = |name: &str| width.map_or(String::new(), |w| format!(" {name:<w$}"));
    writeln!(
        out,
        "{:>5}{} {:>10} {:>14} {:>12} {:>8}",
        "kind",
        name_cell("name"),
        "count",
        "payload B",
        "header B",
        "share"
    )?;
    for (kind, k) in kinds {
        writeln!(
            out,
            "{:>5}{} {:>10} {:>14} {:>12} {:>7.2}%",
            kind,
            name_cell(selection.name(*kind).unwrap_or("-")),
            k.count,
            k.payload,
            k.header,
            100.0 * (k.payload + k.header) as f64 / all
        )?;
    }
    writeln!(
        out,
        "{:>5}{} {:>10} {:>14} {:>12} {:>7.2}%",
        "total",
        name_cell(""),
        total.count,
        total.payload,
        total.header,
        100.0
    )?;
    Ok(())
}

/// Where the bytes between the start of the first record's segment and the end of the last
/// record go, and the part of them that encryption adds to headers.
struct Breakdown {
    span_start: Lsn,
    end: Lsn,
    log_bytes: u64,
    total: KindStats,
    pages: u64,
    header_pages: u64,
    page_headers: u64,
    segment_headers: u64,
    other: u64,
    page_size: u64,
    overhead: u64,
    why: String,
}

impl Breakdown {
    fn of(reader: &Reader, first: Lsn, end: Lsn, total: KindStats) -> Breakdown {
        let geo = reader.geometry();
        let span_start = geo.segment_start(first);
        let log_bytes = end - span_start;
        let pages = log_bytes.div_ceil(geo.page_size);
        let header_pages = (geo
            .segment_start(end.checked_sub(1).unwrap_or_default().max(span_start))
            - span_start)
            / geo.segment_size
            + 1;
        let page_headers = (pages.saturating_sub(header_pages)) * PAGE_HEADER_LEN as u64;
        let segment_headers = header_pages * geo.page_size;
        let other =
            log_bytes.saturating_sub(total.payload + total.header + page_headers + segment_headers);
        let (overhead, why) = overhead(reader.mode(), total.count);
        Breakdown {
            span_start,
            end,
            log_bytes,
            total,
            pages,
            header_pages,
            page_headers,
            segment_headers,
            other,
            page_size: geo.page_size,
            overhead,
            why,
        }
    }

    fn pct(&self, n: u64) -> f64 {
        100.0 * n as f64 / self.log_bytes.max(1) as f64
    }

    fn json(&self) -> Value {
        json!({
            "log_bytes": self.log_bytes,
            "from": self.span_start.0,
            "from_text": fmt_lsn(self.span_start),
            "to": self.end.0,
            "to_text": fmt_lsn(self.end),
            "payload": self.total.payload,
            "record_headers": self.total.header,
            "page_headers": self.page_headers,
            "segment_headers": self.segment_headers,
            "other": self.other,
            "encryption_header_overhead": self.overhead,
        })
    }

    fn write(&self, out: &mut dyn Write) -> Result<(), Fail> {
        writeln!(
            out,
            "log bytes:          {} ({} .. {})",
            self.log_bytes,
            fmt_lsn(self.span_start),
            fmt_lsn(self.end)
        )?;
        let rows = [
            ("payload", self.total.payload, String::new()),
            (
                "record headers",
                self.total.header,
                format!("{} records", self.total.count),
            ),
            (
                "page headers",
                self.page_headers,
                format!(
                    "{} pages x {PAGE_HEADER_LEN} B",
                    self.pages - self.header_pages
                ),
            ),
            (
                "segment headers",
                self.segment_headers,
                format!("{} header pages x {} B", self.header_pages, self.page_size),
            ),
            (
                "other",
                self.other,
                "unused page tails, segment switches, filtered records".to_string(),
            ),
        ];
        for (what, n, note) in rows {
            let line = format!("  {what:<17} {n:>12} {:>7.2}%  {note}", self.pct(n));
            writeln!(out, "{}", line.trim_end())?;
        }
        writeln!(
            out,
            "encryption header overhead: {} B = {:.2}% of the log ({})",
            self.overhead,
            self.pct(self.overhead),
            self.why
        )?;
        Ok(())
    }
}

/// Header bytes encryption adds to `records` records in `mode`, and why.
fn overhead(mode: Mode, records: u64) -> (u64, String) {
    let extra = (RECORD_HEADER_ENCRYPTED - RECORD_HEADER_PLAIN) as u64;
    match mode {
        Mode::PerRecordGcm => (
            records * (extra + walcrypt::inspect::TAG_LEN as u64),
            format!(
                "{extra} B more per record header ({RECORD_HEADER_ENCRYPTED} B instead of \
                 {RECORD_HEADER_PLAIN} B) and a {} B tag per record",
                walcrypt::inspect::TAG_LEN
            ),
        ),
        Mode::PerRecord => (
            records * extra,
            format!(
                "{extra} B more per record header ({RECORD_HEADER_ENCRYPTED} B instead of \
                 {RECORD_HEADER_PLAIN} B)"
            ),
        ),
        Mode::PageLevel => (
            0,
            format!(
                "key id and IV live in the {PAGE_HEADER_LEN} B page header, the same size \
                 in every mode"
            ),
        ),
        Mode::Plaintext => (0, "not encrypted".to_string()),
        _ => (0, "unknown for this mode".to_string()),
    }
}

fn join(ids: &[u32]) -> String {
    if ids.is_empty() {
        return "none".into();
    }
    ids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
