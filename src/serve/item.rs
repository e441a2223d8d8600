//! How `pmindex serve` keeps a memcached item in one value of the index.
//!
//! Layout (all integers little-endian), written whole by one `Db::put`, so
//! an item is replaced atomically with its metadata (the engine's own
//! persist order makes the put durable and failure-atomic):
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 4 | magic `b"pmc2"` |
//! | 4 | 4 | flags: the client's opaque 32 bits |
//! | 8 | 8 | expiration: Unix time in seconds, 0 for never |
//! | 16 | 8 | CAS value, never 0 |
//! | 24 | 4 | check: CRC-32C of bytes 0..24 and the data's length (u64) |
//! | 28 | 4 | zero |
//! | 32 | n | the data |
//!
//! A value is an item only if its magic, check and zero word all agree
//! (about one chance in 2^64 for other bytes): a value put there by
//! `pmindex put` or the library is served as an item with flags 0, no
//! expiration and CAS value 0, its whole value as the data, even if it
//! starts with the magic. Such pools stay readable over the protocol.
//!
//! Before 2026-12-02 items had a 24-byte header with magic `b"pmc1"` and no
//! check, so a value of one's own that began with `pmc1` was read as an
//! item (a review found that). Such old items are still read as items
//! where their header is one `serve` could have written, a CAS value other
//! than 0 and an expiration of 0 or between
//! [`RELATIVE_EXPTIME_LIMIT`](super::protocol::RELATIVE_EXPTIME_LIMIT) (a
//! relative time turned absolute, or an absolute one) and 2^40 (bytes of
//! text there are 2^56 or more); anything else is data. Items are written
//! in the new layout only.

/// The bytes before an item's data.
pub const HEADER_LEN: usize = 32;
/// The first four bytes of every value `serve` writes.
pub const MAGIC: [u8; 4] = *b"pmc2";
/// The magic of the items of builds before 2026-12-02 (24-byte header, no check).
const MAGIC_1: [u8; 4] = *b"pmc1";
const HEADER_LEN_1: usize = 24;
/// Past the last expiration read from a `pmc1` header: Unix time 2^40, in
/// the year 36812. Bytes of text there are 2^56 or more.
const LAST_EXPIRES_1: u64 = 1 << 40;

const FLAGS: usize = 4;
const EXPIRES: usize = 8;
const CAS: usize = 16;
const CHECK: usize = 24;
const ZERO: usize = 28;
const _: () = assert!(CAS + 8 == CHECK && ZERO + 4 == HEADER_LEN && CHECK == HEADER_LEN_1);

/// An item's metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    /// The client's flags.
    pub flags: u32,
    /// Unix time in seconds after which the item is gone; 0: never.
    pub expires: u64,
    /// The item's CAS value (0 for a value not written by `serve`).
    pub cas: u64,
}

impl Meta {
    /// Whether the item is gone at Unix time `now`.
    pub fn expired(&self, now: u64) -> bool {
        self.expires != 0 && self.expires <= now
    }
}

/// The check word of a header whose first 24 bytes are `head`, over
/// `data_len` bytes of data.
fn check(head: &[u8], data_len: usize) -> u32 {
    crate::checksum::crc32c(&[head, &(data_len as u64).to_le_bytes()])
}

fn u32_at(value: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(value[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(value: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(value[at..at + 8].try_into().expect("8 bytes"))
}

/// The metadata in the first 24 bytes of `value` (both layouts agree there).
fn meta_of(value: &[u8]) -> Meta {
    Meta {
        flags: u32_at(value, FLAGS),
        expires: u64_at(value, EXPIRES),
        cas: u64_at(value, CAS),
    }
}

/// Splits a stored value into its metadata and data.
pub fn decode(value: &[u8]) -> (Meta, &[u8]) {
    if value.len() >= HEADER_LEN
        && value[..4] == MAGIC
        && u32_at(value, ZERO) == 0
        && u32_at(value, CHECK) == check(&value[..CHECK], value.len() - HEADER_LEN)
    {
        return (meta_of(value), &value[HEADER_LEN..]);
    }
    if value.len() >= HEADER_LEN_1 && value[..4] == MAGIC_1 {
        let meta = meta_of(value);
        let limit = super::protocol::RELATIVE_EXPTIME_LIMIT as u64;
        if meta.cas != 0
            && (meta.expires == 0 || (limit + 1..LAST_EXPIRES_1).contains(&meta.expires))
        {
            return (meta, &value[HEADER_LEN_1..]);
        }
    }
    let meta = Meta {
        flags: 0,
        expires: 0,
        cas: 0,
    };
    (meta, value)
}

/// The stored value of an item: the header, then `parts` one after another
/// (append and prepend give two).
pub fn encode(meta: &Meta, parts: &[&[u8]]) -> Vec<u8> {
    let data_len = parts.iter().map(|p| p.len()).sum::<usize>();
    let mut v = Vec::with_capacity(HEADER_LEN + data_len);
    v.extend_from_slice(&MAGIC);
    v.extend_from_slice(&meta.flags.to_le_bytes());
    v.extend_from_slice(&meta.expires.to_le_bytes());
    v.extend_from_slice(&meta.cas.to_le_bytes());
    let check = check(&v, data_len);
    v.extend_from_slice(&check.to_le_bytes());
    v.extend_from_slice(&0u32.to_le_bytes());
    for p in parts {
        v.extend_from_slice(p);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_item_round_trips() {
        let meta = Meta {
            flags: 0xdead_beef,
            expires: 1_900_000_000,
            cas: u64::MAX - 1,
        };
        let v = encode(&meta, &[b"ab", b"", b"cd"]);
        assert_eq!(v.len(), HEADER_LEN + 4);
        assert_eq!(decode(&v), (meta, &b"abcd"[..]));
    }

    #[test]
    fn values_written_without_serve_are_items_with_no_metadata() {
        for raw in [&b""[..], b"hello", &[0u8; 40]] {
            let (meta, data) = decode(raw);
            assert_eq!((meta.flags, meta.expires, meta.cas), (0, 0, 0));
            assert_eq!(data, raw);
        }
    }

    /// A value of one's own that starts with either magic is data (from
    /// a review: `pmc1` followed by an expiration of 1 was served as an
    /// expired item, and `add` then overwrote it).
    #[test]
    fn values_that_start_with_a_magic_are_data_unless_their_header_checks() {
        let mut old_expired = b"pmc1".to_vec();
        old_expired.extend_from_slice(&[0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]);
        old_expired.extend_from_slice(&[0; 8]);
        old_expired.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        let text = b"pmc1 looks like a header but is user text";
        let new_unchecked = b"pmc2 looks like a header but has no check word";
        let mut zero_word = encode(
            &Meta {
                flags: 1,
                expires: 0,
                cas: 7,
            },
            &[b"data"],
        );
        zero_word[ZERO] = 1;
        for raw in [&old_expired[..], text, new_unchecked, &zero_word] {
            let (meta, data) = decode(raw);
            assert_eq!((meta.flags, meta.expires, meta.cas), (0, 0, 0), "{raw:?}");
            assert_eq!(data, raw);
        }
    }

    /// Any change to an item's metadata, magic or length fails its check.
    #[test]
    fn a_changed_header_or_length_fails_the_check() {
        let meta = Meta {
            flags: 3,
            expires: 1_900_000_000,
            cas: 42,
        };
        let v = encode(&meta, &[b"some data"]);
        for i in 0..HEADER_LEN {
            for bit in 0..8 {
                let mut w = v.clone();
                w[i] ^= 1 << bit;
                assert_eq!(decode(&w).0.cas, 0, "byte {i} bit {bit}");
            }
        }
        let mut longer = v.clone();
        longer.push(b'!');
        assert_eq!(decode(&longer).0.cas, 0);
        assert_eq!(decode(&v[..v.len() - 1]).0.cas, 0);
        // The data itself is the engine's to keep intact: not checked.
        let mut w = v.clone();
        *w.last_mut().unwrap() ^= 1;
        assert_eq!(decode(&w).0, meta);
    }

    /// Items of the first layout (`pmc1`, 24 bytes, no check) written by
    /// earlier builds are still items where `serve` could have written them.
    #[test]
    fn items_of_the_first_layout_are_still_read() {
        let old = |flags: u32, expires: u64, cas: u64, data: &[u8]| {
            let mut v = b"pmc1".to_vec();
            v.extend_from_slice(&flags.to_le_bytes());
            v.extend_from_slice(&expires.to_le_bytes());
            v.extend_from_slice(&cas.to_le_bytes());
            v.extend_from_slice(data);
            v
        };
        for (expires, cas) in [(0, 1), (1_900_000_000, u64::MAX), (2_592_001, 5)] {
            let v = old(9, expires, cas, b"abc");
            let meta = Meta {
                flags: 9,
                expires,
                cas,
            };
            assert_eq!(decode(&v), (meta, &b"abc"[..]));
        }
        // No CAS value, or an expiration `serve` never stores: data.
        for (expires, cas) in [(0, 0), (1, 5), (2_592_000, 5), (1 << 40, 5)] {
            let v = old(9, expires, cas, b"abc");
            assert_eq!(decode(&v).1, &v[..]);
        }
    }

    #[test]
    fn expiry_is_inclusive_and_zero_is_never() {
        let m = |expires| Meta {
            flags: 0,
            expires,
            cas: 1,
        };
        assert!(!m(0).expired(u64::MAX));
        assert!(!m(100).expired(99));
        assert!(m(100).expired(100));
    }
}
