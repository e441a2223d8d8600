//! The memcached text protocol: one command line parsed into a [`Command`].
//!
//! The grammar is memcached's `doc/protocol.txt` (1.6): tokens separated by
//! spaces, a line ended by `\r\n` (a bare `\n` is accepted, as memcached
//! does). Storage commands are followed by a data block of the announced
//! length and its own `\r\n`; reading that block is the server's job
//! ([`super::server`]), not the parser's.
//!
//! Parse errors map to memcached's answers: an unknown command word is
//! `ERROR`, a known command with bad arguments is `CLIENT_ERROR <reason>`.

use std::fmt;

/// The longest key memcached accepts (and [`crate::engine::MAX_KEY_LEN`]).
pub const MAX_KEY_LEN: usize = 250;

/// memcached's cut-off between relative and absolute expiration times: a
/// time above 30 days in seconds is a Unix time.
pub const RELATIVE_EXPTIME_LIMIT: i64 = 60 * 60 * 24 * 30;

/// A storage command's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreOp {
    /// Store unconditionally.
    Set,
    /// Store only if the key holds no item.
    Add,
    /// Store only if the key holds an item.
    Replace,
    /// Add the data after the item's data.
    Append,
    /// Add the data before the item's data.
    Prepend,
    /// Store only if the item's CAS value is the one given.
    Cas(u64),
}

impl StoreOp {
    /// The command word.
    pub fn name(self) -> &'static str {
        match self {
            StoreOp::Set => "set",
            StoreOp::Add => "add",
            StoreOp::Replace => "replace",
            StoreOp::Append => "append",
            StoreOp::Prepend => "prepend",
            StoreOp::Cas(_) => "cas",
        }
    }
}

/// One parsed command line. Keys borrow from the line.
#[derive(Debug, PartialEq, Eq)]
pub enum Command<'a> {
    /// `set|add|replace|append|prepend <key> <flags> <exptime> <bytes>
    /// [noreply]`, `cas <key> <flags> <exptime> <bytes> <cas> [noreply]`;
    /// `bytes` of data follow.
    Store {
        op: StoreOp,
        key: &'a [u8],
        flags: u32,
        exptime: i64,
        bytes: usize,
        noreply: bool,
    },
    /// `get|gets <key>*`, `gat|gats <exptime> <key>*`.
    Get {
        keys: Vec<&'a [u8]>,
        /// `gets`/`gats`: each item's CAS value is shown.
        with_cas: bool,
        /// `gat`/`gats`: each item found gets this expiration time.
        touch: Option<i64>,
    },
    /// `delete <key> [0] [noreply]`.
    Delete { key: &'a [u8], noreply: bool },
    /// `incr|decr <key> <delta> [noreply]`.
    Arith {
        key: &'a [u8],
        delta: u64,
        incr: bool,
        noreply: bool,
    },
    /// `touch <key> <exptime> [noreply]`.
    Touch {
        key: &'a [u8],
        exptime: i64,
        noreply: bool,
    },
    /// `flush_all [delay] [noreply]`.
    FlushAll { delay: i64, noreply: bool },
    /// `stats [group]`.
    Stats { group: Option<&'a [u8]> },
    /// `version`.
    Version,
    /// `verbosity <level> [noreply]`.
    Verbosity { noreply: bool },
    /// `quit`.
    Quit,
    /// `shutdown [graceful]`; `mode_ok` is false for another word there
    /// (answered `CLIENT_ERROR invalid shutdown mode` where shutdown is
    /// allowed).
    Shutdown { mode_ok: bool },
}

/// Why a line is not a command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// Not a command this server knows: answered `ERROR`.
    UnknownCommand,
    /// A known command with bad arguments: answered `CLIENT_ERROR <reason>`.
    BadFormat(&'static str),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::UnknownCommand => f.write_str("ERROR"),
            ParseError::BadFormat(why) => write!(f, "CLIENT_ERROR {why}"),
        }
    }
}

const BAD_LINE: ParseError = ParseError::BadFormat("bad command line format");

/// Parses one command line, without its line end (a trailing `\r` is
/// dropped here). As memcached's `process_command_ascii`, a command is
/// known by its word and its count of tokens: a wrong count is `ERROR`,
/// like an unknown word; a bad number or key is `CLIENT_ERROR`. A
/// storage command takes one token more than its arguments, `noreply`
/// or anything else (memcached ignores any other word there).
pub fn parse(line: &[u8]) -> Result<Command<'_>, ParseError> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut tokens = line.split(|&b| b == b' ').filter(|t| !t.is_empty());
    let Some(word) = tokens.next() else {
        return Err(ParseError::UnknownCommand);
    };
    let args: Vec<&[u8]> = tokens.collect();
    let is_noreply = |t: &[u8]| t == b"noreply";
    match (word, args.len()) {
        (b"set", 4 | 5) => store(StoreOp::Set, &args),
        (b"add", 4 | 5) => store(StoreOp::Add, &args),
        (b"replace", 4 | 5) => store(StoreOp::Replace, &args),
        (b"append", 4 | 5) => store(StoreOp::Append, &args),
        (b"prepend", 4 | 5) => store(StoreOp::Prepend, &args),
        (b"cas", 5 | 6) => {
            // The CAS value sits between <bytes> and [noreply].
            let cas = number::<u64>(args[4])?;
            let mut rest = args[..4].to_vec();
            rest.extend_from_slice(&args[5..]);
            store(StoreOp::Cas(cas), &rest)
        }
        (b"get" | b"gets", 1..) => Ok(Command::Get {
            keys: keys(&args)?,
            with_cas: word == b"gets",
            touch: None,
        }),
        (b"gat" | b"gats", 1..) => Ok(Command::Get {
            touch: Some(exptime(args[0])?),
            keys: keys(&args[1..])?,
            with_cas: word == b"gats",
        }),
        // `delete <key> [0] [noreply]`: memcached still takes a time of 0
        // (old clients send it), and a lone `noreply` is a key.
        (b"delete", 1..=3) => {
            let noreply = args.len() > 1 && is_noreply(args[args.len() - 1]);
            let rest = &args[1..args.len() - usize::from(noreply)];
            match rest {
                [] | [b"0"] => Ok(Command::Delete {
                    key: key_arg(args[0])?,
                    noreply,
                }),
                _ => Err(ParseError::BadFormat(
                    "bad command line format.  Usage: delete <key> [noreply]",
                )),
            }
        }
        (b"incr" | b"decr", 2 | 3) => Ok(Command::Arith {
            key: key_arg(args[0])?,
            delta: number::<u64>(args[1])
                .map_err(|_| ParseError::BadFormat("invalid numeric delta argument"))?,
            incr: word == b"incr",
            noreply: args.len() == 3 && is_noreply(args[2]),
        }),
        (b"touch", 2 | 3) => Ok(Command::Touch {
            key: key_arg(args[0])?,
            exptime: exptime(args[1])?,
            noreply: args.len() == 3 && is_noreply(args[2]),
        }),
        // `flush_all [delay] [noreply]`: a first token other than a
        // lone `noreply` is the delay (`flush_all noreply x` is a bad
        // time, not a flush).
        (b"flush_all", 0..=2) => {
            let noreply = args.last().is_some_and(|t| is_noreply(t));
            let delay = if args.len() == usize::from(noreply) {
                0
            } else {
                exptime(args[0])?
            };
            Ok(Command::FlushAll { delay, noreply })
        }
        (b"stats", 0) => Ok(Command::Stats { group: None }),
        (b"stats", 1) => Ok(Command::Stats {
            group: Some(args[0]),
        }),
        // The level must be a number, as memcached's `safe_strtoul` wants
        // (`verbosity noreply` is then a bad level, unanswered).
        (b"verbosity", 1 | 2) => {
            number::<u32>(args[0])?;
            Ok(Command::Verbosity {
                noreply: args.last().is_some_and(|t| is_noreply(t)),
            })
        }
        // memcached ignores what follows these two words.
        (b"version", _) => Ok(Command::Version),
        (b"quit", _) => Ok(Command::Quit),
        (b"shutdown", _) => Ok(Command::Shutdown {
            mode_ok: matches!(args[..], [] | [b"graceful"]),
        }),
        _ => Err(ParseError::UnknownCommand),
    }
}

/// Whether the errors of `line`'s command after its token count is
/// checked (a bad number or key, a bad data block) go unanswered: the
/// line is a command that takes `noreply`, and ends with it (memcached's
/// `set_noreply_maybe`). Retrievals never take it, and an unknown word or
/// a wrong count of tokens is always answered `ERROR`.
pub fn errors_unanswered(line: &[u8]) -> bool {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut tokens = line.split(|&b| b == b' ').filter(|t| !t.is_empty());
    let takes_noreply = matches!(
        tokens.next(),
        Some(
            b"set"
                | b"add"
                | b"replace"
                | b"append"
                | b"prepend"
                | b"cas"
                | b"delete"
                | b"incr"
                | b"decr"
                | b"touch"
                | b"flush_all"
                | b"verbosity"
        )
    );
    takes_noreply && tokens.next_back() == Some(b"noreply")
}

/// An expiration time token.
fn exptime(token: &[u8]) -> Result<i64, ParseError> {
    number::<i64>(token).map_err(|_| ParseError::BadFormat("invalid exptime argument"))
}

/// `<key> <flags> <exptime> <bytes> [noreply]`.
fn store<'a>(op: StoreOp, args: &[&'a [u8]]) -> Result<Command<'a>, ParseError> {
    let noreply = args.get(4).is_some_and(|&t| t == b"noreply");
    let [key, flags, exptime, bytes] = args[..4] else {
        return Err(BAD_LINE);
    };
    Ok(Command::Store {
        op,
        key: key_arg(key)?,
        flags: number::<u32>(flags)?,
        exptime: number::<i64>(exptime)?,
        bytes: number::<usize>(bytes)?,
        noreply,
    })
}

fn keys<'a>(args: &[&'a [u8]]) -> Result<Vec<&'a [u8]>, ParseError> {
    args.iter().map(|k| key_arg(k)).collect()
}

/// A key token: at most [`MAX_KEY_LEN`] bytes, no control characters
/// (spaces cannot occur: they split tokens).
fn key_arg(key: &[u8]) -> Result<&[u8], ParseError> {
    if key.len() > MAX_KEY_LEN || key.iter().any(|&b| b < 0x20 || b == 0x7f) {
        return Err(BAD_LINE);
    }
    Ok(key)
}

/// A decimal number token, with an optional `+` (a `-` only where `T` is
/// signed).
fn number<T: std::str::FromStr>(token: &[u8]) -> Result<T, ParseError> {
    std::str::from_utf8(token)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(BAD_LINE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_commands_parse_with_and_without_noreply() {
        assert_eq!(
            parse(b"set k 5 0 3\r"),
            Ok(Command::Store {
                op: StoreOp::Set,
                key: b"k",
                flags: 5,
                exptime: 0,
                bytes: 3,
                noreply: false
            })
        );
        assert_eq!(
            parse(b"cas k 0 -1 10 77 noreply"),
            Ok(Command::Store {
                op: StoreOp::Cas(77),
                key: b"k",
                flags: 0,
                exptime: -1,
                bytes: 10,
                noreply: true
            })
        );
        for op in ["add", "replace", "append", "prepend"] {
            let line = format!("{op} key 1 2 3");
            assert!(matches!(parse(line.as_bytes()), Ok(Command::Store { .. })));
        }
    }

    #[test]
    fn bad_arguments_are_client_errors_and_unknown_words_errors() {
        for line in [
            &b"set k x 0 1"[..],
            b"set k 0 0 -1",
            b"set k 4294967296 0 1",
            b"cas k 0 0 1 x",
        ] {
            assert_eq!(
                parse(line),
                Err(BAD_LINE),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
        assert!(
            matches!(parse(b"delete k 5"), Err(ParseError::BadFormat(m)) if m.contains("Usage"))
        );
        for line in [&b"gat x k"[..], b"touch k x", b"flush_all x"] {
            assert_eq!(
                parse(line),
                Err(ParseError::BadFormat("invalid exptime argument"))
            );
        }
        assert_eq!(
            parse(b"incr k -1"),
            Err(ParseError::BadFormat("invalid numeric delta argument"))
        );
        // A known word with a wrong count of tokens is unknown (memcached).
        for line in [
            &b""[..],
            b"   ",
            b"SET k 0 0 1",
            b"mg k v",
            b"bogus",
            b"set k 0 0",
            b"set k 0 0 1 noreply x",
            b"cas k 0 0 1",
            b"get",
            b"incr k",
            b"touch k",
            b"delete",
            b"delete k 0 noreply x",
            b"verbosity",
            b"stats a b",
        ] {
            assert_eq!(
                parse(line),
                Err(ParseError::UnknownCommand),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn what_memcached_lets_through_parses() {
        // Any fifth token of a storage command; `+` signs.
        for line in [&b"set k 0 0 1 2"[..], b"set k +1 0 +1 NOREPLY"] {
            assert!(matches!(
                parse(line),
                Ok(Command::Store { noreply: false, .. })
            ));
        }
        assert_eq!(parse(b"version now"), Ok(Command::Version));
        assert_eq!(parse(b"quit now"), Ok(Command::Quit));
        assert_eq!(
            parse(b"shutdown graceful"),
            Ok(Command::Shutdown { mode_ok: true })
        );
        assert_eq!(
            parse(b"shutdown now"),
            Ok(Command::Shutdown { mode_ok: false })
        );
        assert_eq!(parse(b"flush_all 1 2 3"), Err(ParseError::UnknownCommand));
        for line in [&b"flush_all noreply x"[..], b"flush_all noreply noreply"] {
            assert_eq!(
                parse(line),
                Err(ParseError::BadFormat("invalid exptime argument"))
            );
        }
        assert_eq!(
            parse(b"flush_all noreply"),
            Ok(Command::FlushAll {
                delay: 0,
                noreply: true
            })
        );
        assert_eq!(
            parse(b"gat 10"),
            Ok(Command::Get {
                keys: vec![],
                with_cas: false,
                touch: Some(10)
            })
        );
        assert_eq!(
            parse(b"delete noreply"),
            Ok(Command::Delete {
                key: b"noreply",
                noreply: false
            })
        );
        assert!(errors_unanswered(b"incr k abc noreply\r"));
        assert!(!errors_unanswered(b"delete noreply x"));
        assert!(!errors_unanswered(b"get a\x01b noreply"));
        assert!(!errors_unanswered(b"bogus noreply"));
    }

    #[test]
    fn keys_are_checked() {
        let long = format!("get {}", "k".repeat(MAX_KEY_LEN + 1));
        assert_eq!(parse(long.as_bytes()), Err(BAD_LINE));
        let max = format!("get {}", "k".repeat(MAX_KEY_LEN));
        assert!(parse(max.as_bytes()).is_ok());
        assert_eq!(parse(b"get a\x01b"), Err(BAD_LINE));
        assert_eq!(
            parse(b"gets a  b   c"),
            Ok(Command::Get {
                keys: vec![b"a", b"b", b"c"],
                with_cas: true,
                touch: None
            })
        );
        assert_eq!(
            parse(b"gat -5 a"),
            Ok(Command::Get {
                keys: vec![b"a"],
                with_cas: false,
                touch: Some(-5)
            })
        );
    }

    #[test]
    fn the_other_commands_parse() {
        assert_eq!(
            parse(b"delete k 0 noreply"),
            Ok(Command::Delete {
                key: b"k",
                noreply: true
            })
        );
        assert_eq!(
            parse(b"decr k 18446744073709551615"),
            Ok(Command::Arith {
                key: b"k",
                delta: u64::MAX,
                incr: false,
                noreply: false
            })
        );
        assert_eq!(
            parse(b"flush_all 10 noreply"),
            Ok(Command::FlushAll {
                delay: 10,
                noreply: true
            })
        );
        assert_eq!(
            parse(b"stats items"),
            Ok(Command::Stats {
                group: Some(b"items")
            })
        );
        assert_eq!(parse(b"version"), Ok(Command::Version));
        assert_eq!(parse(b"quit\r"), Ok(Command::Quit));
        assert_eq!(parse(b"shutdown"), Ok(Command::Shutdown { mode_ok: true }));
        assert_eq!(
            parse(b"verbosity 1 noreply"),
            Ok(Command::Verbosity { noreply: true })
        );
        // A level that is not a number, as memcached 1.6.18 answers it
        // (found by a byte-for-byte comparison with it; this said `OK`).
        for line in [&b"verbosity abc"[..], b"verbosity -1", b"verbosity noreply"] {
            assert_eq!(
                parse(line),
                Err(BAD_LINE),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
        assert!(errors_unanswered(b"verbosity noreply"));
    }
}
