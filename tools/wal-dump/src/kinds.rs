//! Record kinds an operator can read: names and payload descriptions from a kinds file
//! (`--kinds FILE`), and the record filters that use them (`--kind` by number or name,
//! `--key-id`).
//!
//! A kinds file has one kind per line: `<number> <name> [utf8|hex|u64le]`; blank lines and
//! lines starting with `#` are skipped. The number is decimal or `0x` hex (0 to 255); a name
//! is letters, digits, `_`, `-` and `.`, not all digits, and names one kind only.

use std::collections::BTreeMap;
use std::path::Path;

use walcrypt::Mode;
use walcrypt::inspect::{Geometry, PAGE_FLAG_ENCRYPTED, RawRecord};

use crate::Args;
use crate::fail::Fail;
use crate::source::{Disk, hex};

/// Bytes of a payload a description shows before it says how many more there are.
const DESCRIBE_MAX_BYTES: usize = 64;
/// Numbers of a `u64le` payload a description shows before it says how many more there are.
const DESCRIBE_MAX_U64S: usize = 8;

/// How a kind's payload is described.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadHint {
    /// Text (invalid UTF-8 replaced, control characters escaped).
    Utf8,
    /// Lower-case hex.
    Hex,
    /// A sequence of little-endian unsigned 64-bit integers.
    U64Le,
}

#[derive(Debug, Clone)]
struct KindEntry {
    name: String,
    hint: Option<PayloadHint>,
}

/// The names and payload hints of a kinds file.
#[derive(Debug, Clone, Default)]
pub struct KindNames {
    entries: BTreeMap<u8, KindEntry>,
}

impl KindNames {
    /// Reads a kinds file; every problem names the file and line.
    pub fn load(path: &Path) -> Result<KindNames, Fail> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Fail::trouble(format!("kinds file {}: {e}", path.display())))?;
        KindNames::parse(&text)
            .map_err(|e| Fail::trouble(format!("kinds file {}: {e}", path.display())))
    }

    fn parse(text: &str) -> Result<KindNames, String> {
        let mut names = KindNames::default();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            let (Some(number), Some(name)) = (words.next(), words.next()) else {
                return Err(format!("line {}: expected `<kind> <name> [format]`", i + 1));
            };
            let kind = parse_kind_number(number)
                .ok_or_else(|| format!("line {}: `{number}` is not a kind (0 to 255)", i + 1))?;
            if !valid_name(name) {
                return Err(format!(
                    "line {}: `{name}` is not a name (letters, digits, _ - ., not all digits)",
                    i + 1
                ));
            }
            let hint = match words.next() {
                None => None,
                Some("utf8") => Some(PayloadHint::Utf8),
                Some("hex") => Some(PayloadHint::Hex),
                Some("u64le") => Some(PayloadHint::U64Le),
                Some(other) => {
                    return Err(format!(
                        "line {}: unknown payload format `{other}` (utf8, hex or u64le)",
                        i + 1
                    ));
                }
            };
            if let Some(extra) = words.next() {
                return Err(format!("line {}: unexpected `{extra}`", i + 1));
            }
            if names.entries.contains_key(&kind) {
                return Err(format!("line {}: kind {kind} is named twice", i + 1));
            }
            if names.kind_named(name).is_some() {
                return Err(format!("line {}: name `{name}` is used twice", i + 1));
            }
            let name = name.to_string();
            names.entries.insert(kind, KindEntry { name, hint });
        }
        Ok(names)
    }

    /// The name of `kind`, if the file gives one.
    pub fn name(&self, kind: u8) -> Option<&str> {
        self.entries.get(&kind).map(|e| e.name.as_str())
    }

    fn kind_named(&self, name: &str) -> Option<u8> {
        self.entries
            .iter()
            .find(|(_, e)| e.name == name)
            .map(|(kind, _)| *kind)
    }

    /// A description of a payload of `kind`, when the file gives the kind a payload format.
    pub fn describe(&self, kind: u8, payload: &[u8]) -> Option<String> {
        let hint = self.entries.get(&kind)?.hint?;
        Some(describe(hint, payload))
    }
}

fn parse_kind_number(text: &str) -> Option<u8> {
    match text.strip_prefix("0x") {
        Some(hex) => u8::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

fn valid_name(name: &str) -> bool {
    name.chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        && !name.chars().all(|c| c.is_ascii_digit())
        && !name.starts_with("0x")
}

fn describe(hint: PayloadHint, payload: &[u8]) -> String {
    let shown = &payload[..payload.len().min(DESCRIBE_MAX_BYTES)];
    let more = |shown: usize, total: usize, unit: &str| {
        if shown < total {
            format!(" ... ({total} {unit})")
        } else {
            String::new()
        }
    };
    match hint {
        PayloadHint::Utf8 => format!(
            "\"{}\"{}",
            crate::dump::escape(shown),
            more(shown.len(), payload.len(), "bytes")
        ),
        PayloadHint::Hex => format!(
            "{}{}",
            hex(shown),
            more(shown.len(), payload.len(), "bytes")
        ),
        PayloadHint::U64Le => {
            if !payload.len().is_multiple_of(8) {
                return format!("not u64le: {} bytes", payload.len());
            }
            let numbers: Vec<String> = payload
                .chunks_exact(8)
                .take(DESCRIBE_MAX_U64S)
                .map(|c| {
                    let mut bytes = [0u8; 8];
                    bytes.copy_from_slice(c);
                    u64::from_le_bytes(bytes).to_string()
                })
                .collect();
            let count = payload.len() / 8;
            format!(
                "[{}]{}",
                numbers.join(", "),
                more(numbers.len(), count, "numbers")
            )
        }
    }
}

/// Which records a listing or `--stats` shows, beyond the LSN range and the limit: `--kind`
/// (numbers or names) and `--key-id`; and the kind names to show.
pub struct Selection {
    /// Empty: every kind.
    kinds: Vec<u8>,
    /// Empty: every key id.
    key_ids: Vec<u32>,
    pub names: Option<KindNames>,
}

impl Selection {
    pub fn from_args(args: &Args) -> Result<Selection, Fail> {
        let names = args
            .kinds_file
            .as_deref()
            .map(KindNames::load)
            .transpose()?;
        let kinds = args
            .kinds
            .iter()
            .map(|k| resolve_kind(k, names.as_ref(), args.kinds_file.as_deref()))
            .collect::<Result<Vec<u8>, Fail>>()?;
        Ok(Selection {
            kinds,
            key_ids: args.key_ids.clone(),
            names,
        })
    }

    /// Whether a filter beyond the LSN range and the limit is given.
    pub fn filters(&self) -> bool {
        !self.kinds.is_empty() || !self.key_ids.is_empty()
    }

    /// Whether `rec` passes `--kind` and `--key-id`. The key id is that of the record
    /// (perrecord) or of the page where it starts (pagelevel); a plaintext record has none and
    /// passes no `--key-id`.
    pub fn admits(
        &self,
        (mode, geo): (Mode, Geometry),
        disk: &mut Disk,
        rec: &RawRecord,
    ) -> Result<bool, Fail> {
        if !(self.kinds.is_empty() || self.kinds.contains(&rec.header.kind)) {
            return Ok(false);
        }
        if self.key_ids.is_empty() {
            return Ok(true);
        }
        let id = record_key_id((mode, geo), disk, rec)?;
        Ok(id.is_some_and(|id| self.key_ids.contains(&id)))
    }

    /// The name of `kind`, with `--kinds`.
    pub fn name(&self, kind: u8) -> Option<&str> {
        self.names.as_ref().and_then(|n| n.name(kind))
    }
}

/// The key a record is encrypted under: its own (perrecord) or its page's (pagelevel).
pub fn record_key_id(
    (mode, geo): (Mode, Geometry),
    disk: &mut Disk,
    rec: &RawRecord,
) -> Result<Option<u32>, Fail> {
    Ok(match (mode, rec.header.encryption) {
        (_, Some((id, _))) => Some(id),
        (Mode::PageLevel, None) => disk
            .page_header(geo.page_start(rec.lsn).0)?
            .filter(|h| h.flags & PAGE_FLAG_ENCRYPTED != 0)
            .map(|h| h.key_id),
        _ => None,
    })
}

/// A `--kind` value: a number (decimal or `0x` hex) or a name from the kinds file.
fn resolve_kind(text: &str, names: Option<&KindNames>, file: Option<&Path>) -> Result<u8, Fail> {
    if let Some(kind) = parse_kind_number(text) {
        return Ok(kind);
    }
    if text.chars().all(|c| c.is_ascii_digit()) {
        return Err(Fail::trouble(format!("--kind {text}: kinds are 0 to 255")));
    }
    match (names, file) {
        (Some(names), Some(file)) => names.kind_named(text).ok_or_else(|| {
            Fail::trouble(format!(
                "--kind {text}: no kind of that name in the kinds file {}",
                file.display()
            ))
        }),
        _ => Err(Fail::trouble(format!(
            "--kind {text}: a name needs --kinds FILE (or give the kind's number)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kinds_file_names_kinds_and_describes_payloads() {
        let names =
            KindNames::parse("# kinds\n1 insert utf8\n0x02 commit\n\n3 page_ids u64le\n").unwrap();
        assert_eq!(names.name(1), Some("insert"));
        assert_eq!(names.name(2), Some("commit"));
        assert_eq!(names.name(4), None);
        assert_eq!(names.describe(2, b"x"), None);
        assert_eq!(names.describe(1, b"a\nb").unwrap(), "\"a\\nb\"");
        let ids: Vec<u8> = [7u64, 9].iter().flat_map(|n| n.to_le_bytes()).collect();
        assert_eq!(names.describe(3, &ids).unwrap(), "[7, 9]");
        assert_eq!(names.describe(3, b"abc").unwrap(), "not u64le: 3 bytes");
        assert!(describe(PayloadHint::Hex, &[0xab; 100]).ends_with("... (100 bytes)"));
    }

    #[test]
    fn a_bad_kinds_file_line_is_named() {
        for (text, needle) in [
            ("1", "line 1: expected"),
            ("256 big", "line 1: `256` is not a kind"),
            ("1 12", "line 1: `12` is not a name"),
            ("1 a\n1 b", "line 2: kind 1 is named twice"),
            ("1 a\n2 a", "line 2: name `a` is used twice"),
            ("1 a utf16", "line 1: unknown payload format `utf16`"),
            ("1 a hex more", "line 1: unexpected `more`"),
        ] {
            let error = KindNames::parse(text).unwrap_err();
            assert!(error.contains(needle), "{text:?}: {error}");
        }
    }
}
