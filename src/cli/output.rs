//! Output: text for people, JSON (`--json`) for programs, and the byte
//! formats of keys and values.
//!
//! # Keys and values
//! - With `--hex`, keys and values are printed as lowercase hex.
//! - Otherwise, in text, they are printed as text with `\\`, `\t`, `\n`,
//!   `\r`, other control characters and invalid UTF-8 bytes escaped (`\x07`),
//!   so one pair is always one line.
//! - In JSON without `--hex`, a key or value that is valid UTF-8 is a string
//!   under `key` / `value`; one that is not is hex under `key_hex` /
//!   `value_hex`.

use std::fmt::Write as _;
use std::io::Write;

use serde_json::{Map, Value};

use super::error::CliError;
use super::parse::to_hex;

/// Output settings shared by every command.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    /// Print JSON.
    pub json: bool,
    /// Keys and values are hex.
    pub hex: bool,
}

impl Output {
    /// `bytes` for a text line.
    pub fn text(&self, bytes: &[u8]) -> String {
        if self.hex {
            to_hex(bytes)
        } else {
            escape(bytes)
        }
    }

    /// Adds `bytes` to a JSON object under `name` (or `name_hex`).
    pub fn put_json(&self, obj: &mut Map<String, Value>, name: &str, bytes: &[u8]) {
        if self.hex {
            obj.insert(name.to_string(), Value::String(to_hex(bytes)));
            return;
        }
        match std::str::from_utf8(bytes) {
            Ok(s) => obj.insert(name.to_string(), Value::String(s.to_string())),
            Err(_) => obj.insert(format!("{name}_hex"), Value::String(to_hex(bytes))),
        };
    }

    /// A JSON object `{key, value}` (either may be absent).
    pub fn pair_json(&self, key: &[u8], value: Option<&[u8]>) -> Value {
        let mut obj = Map::new();
        self.put_json(&mut obj, "key", key);
        if let Some(v) = value {
            self.put_json(&mut obj, "value", v);
        }
        Value::Object(obj)
    }
}

/// Bytes as one line of text: printable UTF-8 as is, the rest escaped.
pub fn escape(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => s.push_str("\\\\"),
                '\t' => s.push_str("\\t"),
                '\n' => s.push_str("\\n"),
                '\r' => s.push_str("\\r"),
                c if c.is_control() => {
                    let _ = write!(s, "\\u{{{:x}}}", u32::from(c));
                }
                c => s.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(s, "\\x{b:02x}");
        }
    }
    s
}

/// Writes `value` as pretty JSON and a newline to standard output.
pub fn print_json(value: &impl serde::Serialize) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value).map_err(std::io::Error::from)?;
    writeln!(out)?;
    out.flush()?;
    Ok(())
}

/// Writes `text` to standard output.
pub fn print_text(text: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// A Unix time in ns as UTC ISO 8601 (`2024-05-01T12:34:56.789Z`).
pub fn fmt_unix_ns(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let millis = (ns % 1_000_000_000) / 1_000_000;
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_keep_one_pair_per_line() {
        assert_eq!(escape(b"plain text"), "plain text");
        assert_eq!(escape("héllo".as_bytes()), "héllo");
        assert_eq!(escape(b"a\tb\nc\\d\r"), "a\\tb\\nc\\\\d\\r");
        assert_eq!(escape(b"\x07"), "\\u{7}");
        assert_eq!(escape(b"\xff\x00k"), "\\xff\\u{0}k");
    }

    #[test]
    fn json_bytes_choose_string_or_hex() {
        let text = Output {
            json: true,
            hex: false,
        };
        assert_eq!(
            text.pair_json(b"k", Some(b"\xff")),
            serde_json::json!({"key": "k", "value_hex": "ff"})
        );
        let hex = Output {
            json: true,
            hex: true,
        };
        assert_eq!(hex.pair_json(b"k", None), serde_json::json!({"key": "6b"}));
        assert_eq!(
            hex.pair_json(b"\xff", Some(b"v")),
            serde_json::json!({"key": "ff", "value": "76"})
        );
        assert_eq!(hex.text(b"\x01\xab"), "01ab");
    }

    #[test]
    fn timestamps() {
        assert_eq!(fmt_unix_ns(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            fmt_unix_ns(951_782_400_000_000_000 + 1_500_000_000),
            "2000-02-29T00:00:01.500Z"
        );
        assert_eq!(
            fmt_unix_ns(1_700_000_000_123_456_789),
            "2023-11-14T22:13:20.123Z"
        );
    }
}
