//! Parsers for command-line values: sizes, hex strings, flush modes, PM
//! latencies. Each returns a message (not a panic) on bad input; clap turns
//! the message into a usage error.

use pmindex::pm::{FlushKind, PmLatency};

/// Parses a byte size: a whole number with an optional binary suffix `K`,
/// `M`, `G` or `T` (case-insensitive, optionally followed by `B` or `iB`),
/// or a plain `B`: `4096`, `64K`, `256M`, `1GiB`, `512b`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, suffix) = t.split_at(digits_end);
    if digits.is_empty() {
        return Err(format!(
            "bad size `{s}`: expected a whole number of bytes with an optional K, M, G or T suffix (e.g. 256M)"
        ));
    }
    let shift = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => {
            return Err(format!(
            "bad size `{s}`: unknown suffix `{suffix}` (use K, M, G or T, binary: 1K = 1024 bytes)"
        ))
        }
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("bad size `{s}`: the number is too large"))?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("bad size `{s}`: too large"))
}

/// Parses a count: a whole number, `_` allowed as a separator (`50_000_000`).
pub fn parse_count(s: &str) -> Result<u64, String> {
    let digits: String = s.trim().chars().filter(|&c| c != '_').collect();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("bad count `{s}`: expected a whole number"));
    }
    digits
        .parse()
        .map_err(|_| format!("bad count `{s}`: too large"))
}

/// Decodes hex (`00ff`, `0x00FF`; an empty string is zero bytes).
pub fn parse_hex(s: &str) -> Result<Vec<u8>, String> {
    let t = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    if !t.len().is_multiple_of(2) {
        return Err(format!(
            "bad hex `{s}`: odd number of digits ({}); every byte takes two",
            t.len()
        ));
    }
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    t.as_bytes()
        .chunks_exact(2)
        .enumerate()
        .map(|(i, pair)| match (nibble(pair[0]), nibble(pair[1])) {
            (Some(h), Some(l)) => Ok(h << 4 | l),
            _ => Err(format!(
                "bad hex `{s}`: `{}` at byte {i} is not a hex digit pair",
                String::from_utf8_lossy(pair)
            )),
        })
        .collect()
}

/// Encodes bytes as lowercase hex.
pub fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// Parses a flush mode with [`FlushKind`]'s `FromStr` (`auto` detects).
pub fn parse_flush(s: &str) -> Result<FlushKind, String> {
    s.parse::<FlushKind>().map_err(message)
}

/// Parses `WRITE/READ` ns with [`PmLatency`]'s `FromStr`.
pub fn parse_latency(s: &str) -> Result<PmLatency, String> {
    s.parse::<PmLatency>().map_err(message)
}

/// The message of a parse error, without the `invalid argument:` prefix
/// (clap already says the value is invalid).
fn message(e: pmindex::Error) -> String {
    match e {
        pmindex::Error::InvalidArgument(m) => m,
        e => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_with_and_without_suffixes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("256M"), Ok(256 << 20));
        assert_eq!(parse_size("256MiB"), Ok(256 << 20));
        assert_eq!(parse_size("256mb"), Ok(256 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        assert_eq!(parse_size("512B"), Ok(512));
        assert_eq!(parse_size(" 8M "), Ok(8 << 20));
    }

    #[test]
    fn bad_sizes_are_errors() {
        for bad in [
            "",
            "M",
            "-1",
            "1.5G",
            "12Q",
            "10 M",
            "0x100",
            "1MM",
            "abc",
            "99999999999999999999",
            "17179869184G",
        ] {
            assert!(parse_size(bad).is_err(), "`{bad}` should be refused");
        }
        assert!(parse_size("12Q").unwrap_err().contains("suffix"));
    }

    #[test]
    fn counts() {
        assert_eq!(parse_count("50_000_000"), Ok(50_000_000));
        assert_eq!(parse_count("7"), Ok(7));
        assert!(parse_count("").is_err());
        assert!(parse_count("5M").is_err());
        assert!(parse_count("-3").is_err());
        assert!(parse_count("99999999999999999999999").is_err());
    }

    #[test]
    fn hex_round_trips() {
        assert_eq!(parse_hex("00ff7f"), Ok(vec![0, 255, 127]));
        assert_eq!(parse_hex("0xDEADbeef"), Ok(vec![0xde, 0xad, 0xbe, 0xef]));
        assert_eq!(parse_hex("0X01"), Ok(vec![1]));
        assert_eq!(parse_hex(""), Ok(vec![]));
        assert_eq!(parse_hex("0x"), Ok(vec![]));
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(parse_hex(&to_hex(&all)), Ok(all));
        assert_eq!(to_hex(&[0x0a, 0xb0]), "0ab0");
    }

    #[test]
    fn bad_hex_is_an_error() {
        assert!(parse_hex("abc").unwrap_err().contains("odd"));
        assert!(parse_hex("zz").unwrap_err().contains("`zz`"));
        assert!(parse_hex("0g").is_err());
        assert!(parse_hex("é1").is_err());
        assert!(parse_hex("+1").is_err());
        assert!(parse_hex(" 01").is_err());
    }

    #[test]
    fn flush_and_latency() {
        assert_eq!(parse_flush("clflush"), Ok(FlushKind::Clflush));
        assert_eq!(parse_flush("eadr"), Ok(FlushKind::Eadr));
        assert!(parse_flush("auto").is_ok());
        assert!(parse_flush("bogus").is_err());
        let l = parse_latency("300/100").unwrap();
        assert_eq!((l.write_ns, l.read_ns), (300, 100));
        assert!(parse_latency("300").is_err());
    }
}
