//! The pool header: page 0 of every pool file.
//!
//! Bytes `0..128` are written once, when the pool is created, and are covered
//! by a CRC-32 stored in `checksum`. Bytes `128..192` are the root slots: eight
//! 8-byte words that engines update with failure-atomic stores at run time,
//! so they are outside the checksum (a checksum cannot be updated atomically
//! with them). Engines validate what they read from their roots. Bytes
//! `192..200` are the allocator's heap frontier (format version 2), also
//! mutable: see [`crate::pm::alloc`].
//!
//! [`FIELDS`] is the one source of truth for the layout; `docs/design.md`
//! carries the table that [`layout_table`] prints, and a test checks that the
//! two agree.
//!
//! Creation protocol: every field but `magic` is written and persisted, then
//! `magic` is written and persisted. A file whose magic is all zero is a pool
//! whose creation never finished.

use std::mem::{offset_of, size_of};

use crate::error::{Error, Result};

/// `magic`: the first 8 bytes of every pool.
pub const MAGIC: [u8; 8] = *b"PMINDEX\0";
/// The format version this build writes (and the newest it reads).
pub const FORMAT_VERSION: u32 = 2;
/// The oldest format version this build reads. Version 1 has no heap
/// frontier: every chunk of a version-1 pool counts as written, and the pool
/// stays version 1.
pub const OLDEST_FORMAT_VERSION: u32 = 1;
/// Bytes of the header that [`RawHeader`] covers.
pub const HEADER_BYTES: usize = 200;
/// The header occupies one 4 KiB page.
pub const HEADER_SIZE: u64 = 4096;
/// Number of root slots.
pub const ROOT_SLOTS: usize = 8;
/// Longest engine id.
pub const ENGINE_ID_LEN: usize = 16;

/// The header as stored, little-endian, `#[repr(C)]` so that `offset_of!`
/// gives the file offsets.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawHeader {
    /// [`MAGIC`].
    pub magic: [u8; 8],
    /// [`FORMAT_VERSION`].
    pub version: u32,
    /// [`HEADER_SIZE`].
    pub header_size: u32,
    /// Engine id, ASCII, NUL padded.
    pub engine: [u8; ENGINE_ID_LEN],
    /// Size of the pool in bytes (the file's length).
    pub pool_size: u64,
    /// Random id of this pool.
    pub uuid: [u8; 16],
    /// Creation time, ns since the Unix epoch.
    pub created_unix_ns: u64,
    /// Offset of the allocator's lane records.
    pub lanes_offset: u64,
    /// Number of lane records.
    pub lane_count: u64,
    /// Offset of the chunk descriptor array.
    pub desc_offset: u64,
    /// Offset of the chunk bitmap array.
    pub bitmap_offset: u64,
    /// Offset of the first heap chunk.
    pub heap_offset: u64,
    /// Number of heap chunks.
    pub chunk_count: u64,
    /// Size of one heap chunk.
    pub chunk_size: u64,
    /// CRC-32 (IEEE) of bytes `0..120`, zero-extended.
    pub checksum: u64,
    /// Root slots, owned by the engine; not checksummed.
    pub roots: [u64; ROOT_SLOTS],
    /// Heap chunks from this index on have never been handed out, so they
    /// hold the zeros the pool was created with (version 2). Mutable, not
    /// checksummed; only ever raised.
    pub heap_frontier: u64,
}

const _: () = assert!(size_of::<RawHeader>() == HEADER_BYTES);
const _: () = assert!(offset_of!(RawHeader, heap_frontier) == FRONTIER_OFFSET as usize);
const _: () = assert!(offset_of!(RawHeader, checksum) == CHECKSUM_OFFSET as usize);
const _: () = assert!(offset_of!(RawHeader, roots) == ROOTS_OFFSET as usize);

/// Offset of `checksum`; the CRC covers `0..CHECKSUM_OFFSET`.
pub const CHECKSUM_OFFSET: u64 = 120;
/// Offset of the first root slot.
pub const ROOTS_OFFSET: u64 = 128;
/// Offset of `heap_frontier`.
pub const FRONTIER_OFFSET: u64 = 192;

/// One row of the layout table: name, offset, size, meaning.
pub struct Field {
    /// Field name.
    pub name: &'static str,
    /// Byte offset in the pool file.
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
    /// What it holds.
    pub meaning: &'static str,
}

macro_rules! field {
    ($name:ident, $ty:ty, $meaning:expr) => {
        Field {
            name: stringify!($name),
            offset: offset_of!(RawHeader, $name),
            size: size_of::<$ty>(),
            meaning: $meaning,
        }
    };
}

/// The header layout, in file order.
pub const FIELDS: &[Field] = &[
    field!(magic, [u8; 8], "`PMINDEX\\0`; written last at creation"),
    field!(
        version,
        u32,
        "format version (2; version 1, without `heap_frontier`, is still read)"
    ),
    field!(header_size, u32, "4096"),
    field!(engine, [u8; ENGINE_ID_LEN], "engine id, ASCII, NUL padded"),
    field!(pool_size, u64, "pool size in bytes = file length"),
    field!(uuid, [u8; 16], "random pool id"),
    field!(
        created_unix_ns,
        u64,
        "creation time, ns since the Unix epoch"
    ),
    field!(lanes_offset, u64, "offset of the allocator lane records"),
    field!(lane_count, u64, "number of lane records (64 B each)"),
    field!(
        desc_offset,
        u64,
        "offset of the chunk descriptors (8 B each)"
    ),
    field!(
        bitmap_offset,
        u64,
        "offset of the chunk bitmaps (128 B each)"
    ),
    field!(heap_offset, u64, "offset of heap chunk 0"),
    field!(chunk_count, u64, "number of heap chunks"),
    field!(chunk_size, u64, "bytes per heap chunk (65536)"),
    field!(checksum, u64, "CRC-32 of bytes 0..120, zero-extended"),
    field!(
        roots,
        [u64; ROOT_SLOTS],
        "8 engine root slots; mutable, not checksummed"
    ),
    field!(
        heap_frontier,
        u64,
        "heap chunks from this index on were never handed out (all zero); mutable, not checksummed, only raised"
    ),
];

/// The layout as a Markdown table (the one in `docs/design.md`).
pub fn layout_table() -> String {
    let mut s = String::from("| offset | size | field | meaning |\n|---:|---:|---|---|\n");
    for f in FIELDS {
        s.push_str(&format!(
            "| {} | {} | `{}` | {} |\n",
            f.offset, f.size, f.name, f.meaning
        ));
    }
    s
}

impl RawHeader {
    /// Encodes the header as stored (little-endian).
    pub fn to_bytes(&self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[0..8].copy_from_slice(&self.magic);
        b[8..12].copy_from_slice(&self.version.to_le_bytes());
        b[12..16].copy_from_slice(&self.header_size.to_le_bytes());
        b[16..32].copy_from_slice(&self.engine);
        let words = [
            (32, self.pool_size),
            (56, self.created_unix_ns),
            (64, self.lanes_offset),
            (72, self.lane_count),
            (80, self.desc_offset),
            (88, self.bitmap_offset),
            (96, self.heap_offset),
            (104, self.chunk_count),
            (112, self.chunk_size),
            (120, self.checksum),
            (FRONTIER_OFFSET as usize, self.heap_frontier),
        ];
        for (o, v) in words {
            b[o..o + 8].copy_from_slice(&v.to_le_bytes());
        }
        b[40..56].copy_from_slice(&self.uuid);
        for (i, r) in self.roots.iter().enumerate() {
            let o = ROOTS_OFFSET as usize + 8 * i;
            b[o..o + 8].copy_from_slice(&r.to_le_bytes());
        }
        b
    }

    /// Decodes a header; does not validate it.
    pub fn from_bytes(b: &[u8; HEADER_BYTES]) -> RawHeader {
        let u64_at = |o: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(w)
        };
        let u32_at = |o: usize| {
            let mut w = [0u8; 4];
            w.copy_from_slice(&b[o..o + 4]);
            u32::from_le_bytes(w)
        };
        let mut h = RawHeader {
            magic: [0; 8],
            version: u32_at(8),
            header_size: u32_at(12),
            engine: [0; ENGINE_ID_LEN],
            pool_size: u64_at(32),
            uuid: [0; 16],
            created_unix_ns: u64_at(56),
            lanes_offset: u64_at(64),
            lane_count: u64_at(72),
            desc_offset: u64_at(80),
            bitmap_offset: u64_at(88),
            heap_offset: u64_at(96),
            chunk_count: u64_at(104),
            chunk_size: u64_at(112),
            checksum: u64_at(120),
            roots: [0; ROOT_SLOTS],
            heap_frontier: u64_at(FRONTIER_OFFSET as usize),
        };
        h.magic.copy_from_slice(&b[0..8]);
        h.engine.copy_from_slice(&b[16..32]);
        h.uuid.copy_from_slice(&b[40..56]);
        for i in 0..ROOT_SLOTS {
            h.roots[i] = u64_at(ROOTS_OFFSET as usize + 8 * i);
        }
        h
    }

    /// The CRC of the immutable part, as stored in `checksum`.
    pub fn compute_checksum(&self) -> u64 {
        let b = self.to_bytes();
        u64::from(crc32fast::hash(&b[..CHECKSUM_OFFSET as usize]))
    }

    /// The engine id as a string (up to the first NUL).
    pub fn engine_id(&self) -> String {
        let end = self
            .engine
            .iter()
            .position(|&c| c == 0)
            .unwrap_or(ENGINE_ID_LEN);
        String::from_utf8_lossy(&self.engine[..end]).into_owned()
    }

    /// The UUID in the usual 8-4-4-4-12 hex form.
    pub fn uuid_string(&self) -> String {
        let h: String = self.uuid.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    }
}

/// Encodes an engine id into the header field.
pub fn encode_engine_id(id: &str) -> Result<[u8; ENGINE_ID_LEN]> {
    if id.is_empty() || id.len() > ENGINE_ID_LEN || !id.bytes().all(|c| c.is_ascii_graphic()) {
        return Err(Error::InvalidArgument(format!(
            "engine id `{id}` must be 1 to {ENGINE_ID_LEN} printable ASCII characters"
        )));
    }
    let mut e = [0u8; ENGINE_ID_LEN];
    e[..id.len()].copy_from_slice(id.as_bytes());
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_contiguous_and_cover_the_struct() {
        let mut next = 0;
        for f in FIELDS {
            assert_eq!(f.offset, next, "gap or overlap before `{}`", f.name);
            next = f.offset + f.size;
        }
        assert_eq!(next, size_of::<RawHeader>());
    }

    #[test]
    fn design_doc_has_the_current_layout_table() {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/design.md"))
            .expect("docs/design.md exists");
        let table = layout_table();
        assert!(
            doc.contains(&table),
            "docs/design.md does not contain the header table; paste this:\n{table}"
        );
    }

    #[test]
    fn bytes_round_trip() {
        let h = RawHeader {
            magic: MAGIC,
            version: FORMAT_VERSION,
            header_size: 4096,
            engine: encode_engine_id("pmlog").unwrap(),
            pool_size: 1 << 30,
            uuid: [7; 16],
            created_unix_ns: 42,
            lanes_offset: 4096,
            lane_count: 64,
            desc_offset: 8192,
            bitmap_offset: 9000,
            heap_offset: 65536,
            chunk_count: 3,
            chunk_size: 65536,
            checksum: 5,
            roots: [1, 2, 3, 4, 5, 6, 7, 8],
            heap_frontier: 9,
        };
        assert_eq!(RawHeader::from_bytes(&h.to_bytes()), h);
        assert_eq!(h.engine_id(), "pmlog");
    }
}
