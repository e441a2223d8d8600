//! CRC-32C (Castagnoli, the polynomial of iSCSI, ext4 and SSE 4.2's `crc32`
//! instruction) over short byte strings, the checksum of a HART leaf slot
//! (format 4, docs/design.md §7).
//!
//! x86-64 CPUs with SSE 4.2 compute it with one `crc32` instruction per 8
//! bytes; other CPUs use a 256-entry table (one lookup per byte). Both give
//! the same value (tested below), so a pool written on one machine checks on
//! the other. The check is the standard one: `crc32c(b"123456789")` is
//! `0xE306_9283`.
//!
//! Why not CRC-32 (IEEE, the `crc32fast` crate): for the 10 to 30 bytes of
//! a leaf's key and inline value it took 167 instructions per insert
//! (feature detection and a sliced table), about a tenth of a HART insert;
//! this takes about 60, the call included.

/// The reflected Castagnoli polynomial.
const POLY: u32 = 0x82F6_3B78;

/// Byte-at-a-time table for the portable path.
const TABLE: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
};

/// CRC-32C of the concatenation of `parts`.
#[inline]
pub fn crc32c(parts: &[&[u8]]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU has SSE 4.2 (tested just above).
        return unsafe { crc32c_sse42(parts) };
    }
    let mut s = !0u32;
    for p in parts {
        s = update_table(s, p);
    }
    !s
}

/// The portable update of the running (inverted) state.
fn update_table(mut s: u32, data: &[u8]) -> u32 {
    for &b in data {
        s = TABLE[((s ^ u32::from(b)) & 0xFF) as usize] ^ (s >> 8);
    }
    s
}

/// [`crc32c`] with the `crc32` instruction: 8 bytes a step, then at most
/// one 4-, one 2- and one 1-byte step per part. One call for all the parts
/// (a `target_feature` function is not inlined into its callers).
///
/// # Safety
/// The CPU must support SSE 4.2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn crc32c_sse42(parts: &[&[u8]]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u16, _mm_crc32_u32, _mm_crc32_u64, _mm_crc32_u8};
    let mut s = !0u32;
    for &part in parts {
        let mut p = part;
        let mut s64 = u64::from(s);
        while let Some((w, r)) = p.split_first_chunk::<8>() {
            s64 = _mm_crc32_u64(s64, u64::from_le_bytes(*w));
            p = r;
        }
        s = s64 as u32;
        if let Some((w, r)) = p.split_first_chunk::<4>() {
            s = _mm_crc32_u32(s, u32::from_le_bytes(*w));
            p = r;
        }
        if let Some((w, r)) = p.split_first_chunk::<2>() {
            s = _mm_crc32_u16(s, u16::from_le_bytes(*w));
            p = r;
        }
        if let Some(&b) = p.first() {
            s = _mm_crc32_u8(s, b);
        }
    }
    !s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_standard_check_value() {
        assert_eq!(crc32c(&[b"123456789"]), 0xE306_9283);
        assert_eq!(crc32c(&[b"1234", b"", b"56789"]), 0xE306_9283);
        assert_eq!(crc32c(&[]), 0);
        assert_eq!(!update_table(!0, b"123456789"), 0xE306_9283);
    }

    #[test]
    fn the_instruction_and_the_table_agree_however_the_input_is_split() {
        let data: Vec<u8> = (0..200u32).map(|i| (i * 37 + i / 7) as u8).collect();
        for len in 0..data.len() {
            let d = &data[..len];
            let table = !update_table(!0, d);
            for cut in [0, len / 3, len / 2, len] {
                assert_eq!(
                    crc32c(&[&d[..cut], &d[cut..]]),
                    table,
                    "len {len} cut {cut}"
                );
            }
        }
    }
}
