//! The 8 bytes of a word compared at once, without SIMD intrinsics (so
//! without `unsafe`, but for [`equal16`]): how a node's key bytes are
//! searched with no branch per byte. A loop over the keys leaves at a
//! data-dependent entry, a branch the CPU mispredicts and resolves only
//! when the node's line has arrived; these leave one predictable branch
//! (found or not). Used by `hart`'s DRAM `Node4` and `Node16` and the
//! radix trees' NODE4 and NODE16 in PM.
//!
//! [`equal16`] compares 16 bytes with one SSE2 compare on x86-64, where
//! SSE2 is part of the baseline every x86-64 CPU has, and with two words
//! of the above elsewhere: `hart`'s `Node16` search, about 15 instructions
//! fewer per node (docs/design.md §7, "Node lookups without the count").

/// `0x80` in every byte of `x` that is zero, `0x00` in the others. Exact:
/// no carry crosses a byte (`(b & 0x7F) + 0x7F` is at most `0xFE`), so no
/// false positives from borrows, unlike the shorter `(x - 0x01..) & !x`.
#[inline(always)]
pub fn zero_bytes(x: u64) -> u64 {
    const LOW7: u64 = 0x7F7F_7F7F_7F7F_7F7F;
    !(((x & LOW7).wrapping_add(LOW7)) | x | LOW7)
}

/// `0x80` in every byte of `w` equal to `v`, `0x00` in the others.
#[inline(always)]
pub fn bytes_equal(w: u64, v: u8) -> u64 {
    zero_bytes(w ^ (u64::from(v) * 0x0101_0101_0101_0101))
}

/// The high bits of `m`'s bytes (as [`zero_bytes`] gives them) as an 8-bit
/// mask, byte `i` to bit `i`: the multiplier moves bit `8i` of `m >> 7` to
/// bit `56 + i`, and no two of its 64 partial products land on the same
/// bit, so nothing carries.
#[inline(always)]
pub fn byte_mask(m: u64) -> u64 {
    (m >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56
}

/// Bit `i` set for every `keys[i]` equal to `v` (a 16-bit mask).
#[inline(always)]
pub fn equal16(keys: &[u8; 16], v: u8) -> u32 {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    {
        use std::arch::x86_64::{
            __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8,
        };
        // SAFETY: SSE2 is enabled for this build (the `cfg` above; every
        // x86-64 CPU has it), and the load reads the 16 bytes of `keys`,
        // a reference, with no alignment required (`loadu`).
        unsafe {
            let k = _mm_loadu_si128(keys.as_ptr().cast::<__m128i>());
            _mm_movemask_epi8(_mm_cmpeq_epi8(k, _mm_set1_epi8(v as i8))) as u32
        }
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
    {
        equal16_words(keys, v)
    }
}

/// [`equal16`] in two words of [`bytes_equal`] (the portable form, and
/// the reference its test checks the SSE2 form against).
#[cfg_attr(
    all(target_arch = "x86_64", target_feature = "sse2", not(test)),
    allow(
        dead_code,
        reason = "the SSE2 form serves this target; tests compare the two"
    )
)]
#[inline(always)]
pub fn equal16_words(keys: &[u8; 16], v: u8) -> u32 {
    let [lo, hi] =
        [&keys[..8], &keys[8..]].map(|half| u64::from_le_bytes(half.try_into().expect("8 bytes")));
    (byte_mask(bytes_equal(lo, v)) | byte_mask(bytes_equal(hi, v)) << 8) as u32
}

/// Whether every byte of `bytes` is zero, tested a word at a time (a
/// byte-wise `all` took about 240 instructions for a new radix node's
/// three lines; docs/design.md §11, "Insert instructions").
#[inline]
pub fn all_zero(bytes: &[u8]) -> bool {
    let words = bytes.chunks_exact(8);
    let tail = words.remainder().iter().fold(0u8, |a, &b| a | b);
    let any = words.fold(0u64, |a, w| {
        a | u64::from_ne_bytes(w.try_into().expect("chunks of 8 bytes"))
    });
    any == 0 && tail == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `equal16` (SSE2 on x86-64) and `equal16_words` against a byte-wise
    /// compare: every searched byte, against keys that hold it in every
    /// place, once or several times, beside bytes at the edges of both
    /// forms (0, 0x7F, 0x80, 0xFF).
    #[test]
    fn sixteen_bytes_compared_at_once_match_one_by_one() {
        let edges = [0u8, 1, 0x7F, 0x80, 0x81, 0xFE, 0xFF];
        for v in 0..=255u8 {
            for place in 0..16 {
                for fill in 0..8u8 {
                    let mut keys = [0u8; 16];
                    for (i, k) in keys.iter_mut().enumerate() {
                        *k = edges[(i + usize::from(fill)) % edges.len()]
                            .wrapping_add(fill * 37 * u8::from(fill > 3));
                    }
                    keys[place] = v;
                    if fill % 2 == 1 {
                        keys[15 - place] = v;
                    }
                    let want: u32 = (0..16).filter(|&i| keys[i] == v).map(|i| 1 << i).sum();
                    assert_eq!(equal16(&keys, v), want, "{keys:?} {v:#x}");
                    assert_eq!(equal16_words(&keys, v), want, "{keys:?} {v:#x}");
                    let other = v.wrapping_add(1 + fill);
                    let want: u32 = (0..16).filter(|&i| keys[i] == other).map(|i| 1 << i).sum();
                    assert_eq!(equal16(&keys, other), want, "{keys:?} {other:#x}");
                    assert_eq!(equal16_words(&keys, other), want, "{keys:?} {other:#x}");
                }
            }
        }
    }

    #[test]
    fn zero_bytes_marks_exactly_the_zero_lanes() {
        assert_eq!(zero_bytes(0), 0x8080_8080_8080_8080);
        assert_eq!(zero_bytes(u64::MAX), 0);
        assert_eq!(zero_bytes(0x0100_FF80_0001_7F00), 0x0080_0000_8000_0080);
        // A zero lane next to 0x01 lanes (the borrow case of the short form).
        assert_eq!(zero_bytes(0x0101_0101_0101_0100), 0x80);
    }

    /// Every pair of byte values, in every byte position, beside bytes of
    /// other values: `bytes_equal` marks exactly the equal bytes and
    /// `byte_mask` numbers them.
    #[test]
    fn all_bytes_compared_at_once_match_one_by_one() {
        for v in 0..=255u8 {
            for b in 0..=255u8 {
                for i in 0..8 {
                    // The other bytes: a spread of values around the edges.
                    let mut w = 0x00FF_7F80_01FE_817Eu64.rotate_left(8 * (u32::from(b) % 8));
                    w = (w & !(0xFF << (8 * i))) | u64::from(b) << (8 * i);
                    let m = bytes_equal(w, v);
                    let want: u64 = (0..8)
                        .filter(|&j| (w >> (8 * j)) as u8 == v)
                        .map(|j| 1 << j)
                        .sum();
                    assert_eq!(byte_mask(m), want, "{w:#x} {v:#x}");
                    assert_eq!(m & !0x8080_8080_8080_8080, 0, "{w:#x} {v:#x}");
                }
            }
        }
    }

    /// `byte_mask` of every pattern of marked lanes, 0 to 8 of them.
    #[test]
    fn byte_mask_numbers_every_pattern_of_lanes() {
        for pattern in 0..=255u64 {
            let m: u64 = (0..8)
                .filter(|i| pattern & (1 << i) != 0)
                .map(|i| 0x80 << (8 * i))
                .sum();
            assert_eq!(byte_mask(m), pattern, "{m:#x}");
        }
    }

    #[test]
    fn all_zero_finds_any_set_bit_at_any_place() {
        for len in 0..40 {
            let mut b = vec![0u8; len];
            assert!(all_zero(&b), "len {len}");
            for i in 0..len {
                for bit in [0x01, 0x80] {
                    b[i] = bit;
                    assert!(!all_zero(&b), "len {len}, byte {i}, bit {bit:#x}");
                    b[i] = 0;
                }
            }
        }
    }
}
