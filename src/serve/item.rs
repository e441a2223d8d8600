//! How `pmindex serve` keeps a memcached item in one value of the index.
//!
//! Layout (all integers little-endian), written whole by one `Db::put`, so
//! an item is replaced atomically with its metadata (the engine's own
//! persist order makes the put durable and failure-atomic):
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 4 | magic `b"pmc1"` |
//! | 4 | 4 | flags: the client's opaque 32 bits |
//! | 8 | 8 | expiration: Unix time in seconds, 0 for never |
//! | 16 | 8 | CAS value, never 0 |
//! | 24 | n | the data |
//!
//! A value without the magic (put there by `pmindex put` or the library)
//! is served as an item with flags 0, no expiration and CAS value 0, its
//! whole value as the data: such pools stay readable over the protocol.

/// The bytes before an item's data.
pub const HEADER_LEN: usize = 24;
/// The first four bytes of every value `serve` writes.
pub const MAGIC: [u8; 4] = *b"pmc1";

const FLAGS: usize = 4;
const EXPIRES: usize = 8;
const CAS: usize = 16;
const _: () = assert!(CAS + 8 == HEADER_LEN);

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

/// Splits a stored value into its metadata and data.
pub fn decode(value: &[u8]) -> (Meta, &[u8]) {
    if value.len() >= HEADER_LEN && value[..4] == MAGIC {
        let word = |at: usize| u64::from_le_bytes(value[at..at + 8].try_into().expect("8 bytes"));
        let flags = u32::from_le_bytes(value[FLAGS..FLAGS + 4].try_into().expect("4 bytes"));
        let meta = Meta {
            flags,
            expires: word(EXPIRES),
            cas: word(CAS),
        };
        (meta, &value[HEADER_LEN..])
    } else {
        let meta = Meta {
            flags: 0,
            expires: 0,
            cas: 0,
        };
        (meta, value)
    }
}

/// The stored value of an item: the header, then `parts` one after another
/// (append and prepend give two).
pub fn encode(meta: &Meta, parts: &[&[u8]]) -> Vec<u8> {
    let len = HEADER_LEN + parts.iter().map(|p| p.len()).sum::<usize>();
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(&MAGIC);
    v.extend_from_slice(&meta.flags.to_le_bytes());
    v.extend_from_slice(&meta.expires.to_le_bytes());
    v.extend_from_slice(&meta.cas.to_le_bytes());
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
