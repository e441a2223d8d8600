//! Key comparisons that read no byte outside the two keys.
//!
//! A HART leaf's key ends its leaf's first cache line (bytes 40..64 for a
//! key of up to 24 bytes), and the next line is another leaf. The C
//! library's vector `memcmp` compares up to 32 bytes with one masked load,
//! which reaches past the key into that next line, and on the AMD EPYC of
//! our measurements a load that crosses a line waits for both lines even
//! where its mask drops the bytes. A scan that had prefetched its leaves'
//! lines then waited for a miss per key on lines it never uses
//! (docs/design.md §7, "Ordered scans"). These functions compare 8 bytes
//! at a time with loads inside the slices, and the last bytes one at a
//! time. (A single search fetches both lines at once, so it gains nothing
//! from them, and its `memcmp`, with fewer branches on the missing data,
//! measured faster there.)

use std::cmp::Ordering;

/// The first 8 bytes of `s` (at least 8 long) as a big-endian number:
/// numbers compare as the bytes do.
#[inline(always)]
fn word(s: &[u8]) -> u64 {
    u64::from_be_bytes(s[..8].try_into().expect("8 bytes"))
}

/// `a == b`, for slices whose lengths are usually equal: two loads from
/// each for up to 16 bytes, the first and the last 8 (or 4, or 2) bytes,
/// overlapping where the slices are shorter, and one more per 8 bytes
/// beyond. A branch on the length only, which a search knows
/// from its own key before the stored key arrives, and none on the bytes
/// but the answer's; every load within the slices.
#[inline(always)]
pub fn eq_same_len(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if n >= 8 {
        // Native order: only equality counts here.
        let w = |s: &[u8], at: usize| u64::from_ne_bytes(s[at..at + 8].try_into().expect("8"));
        let mut i = 0;
        while i + 16 < n {
            if w(a, i) != w(b, i) {
                return false;
            }
            i += 8;
        }
        (w(a, i) ^ w(b, i)) | (w(a, n - 8) ^ w(b, n - 8)) == 0
    } else if n >= 4 {
        let w = |s: &[u8], at: usize| u32::from_ne_bytes(s[at..at + 4].try_into().expect("4"));
        (w(a, 0) ^ w(b, 0)) | (w(a, n - 4) ^ w(b, n - 4)) == 0
    } else if n >= 2 {
        let w = |s: &[u8], at: usize| u16::from_ne_bytes(s[at..at + 2].try_into().expect("2"));
        (w(a, 0) ^ w(b, 0)) | (w(a, n - 2) ^ w(b, n - 2)) == 0
    } else {
        n == 0 || a[0] == b[0]
    }
}

/// `a == b`.
#[inline]
pub fn eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && cmp(a, b).is_eq()
}

/// `a.cmp(b)`: byte-wise lexicographic order, a key before its extensions.
#[inline]
pub fn cmp(a: &[u8], b: &[u8]) -> Ordering {
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + 8 <= n {
        let (x, y) = (word(&a[i..]), word(&b[i..]));
        if x != y {
            return x.cmp(&y);
        }
        i += 8;
    }
    while i < n {
        if a[i] != b[i] {
            return a[i].cmp(&b[i]);
        }
        i += 1;
    }
    a.len().cmp(&b.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eq_same_len_finds_a_difference_at_every_place_of_every_length() {
        let base: Vec<u8> = (0..40u8).map(|i| i.wrapping_mul(37) ^ 0x5A).collect();
        for n in 0..=40 {
            let a = &base[..n];
            let copy = a.to_vec();
            assert!(eq_same_len(a, &copy), "equal, {n} bytes");
            for at in 0..n {
                for bit in [0x01, 0x80] {
                    let mut b = a.to_vec();
                    b[at] ^= bit;
                    assert!(!eq_same_len(a, &b), "{n} bytes, byte {at} ^ {bit:#x}");
                }
            }
            if n > 0 {
                assert!(!eq_same_len(a, &base[..n - 1]), "lengths {n} and {}", n - 1);
            }
        }
    }

    #[test]
    fn agrees_with_slice_order_on_every_pair_of_short_keys() {
        // Every key of 0 to 3 bytes over {0, 1, 255}, and longer keys that
        // differ in each position of their first and second words.
        let alphabet = [0u8, 1, 255];
        let mut keys: Vec<Vec<u8>> = vec![vec![]];
        for len in 1..=3 {
            let mut next = Vec::new();
            for k in keys.iter().filter(|k| k.len() == len - 1) {
                for &c in &alphabet {
                    let mut k = k.clone();
                    k.push(c);
                    next.push(k);
                }
            }
            keys.extend(next);
        }
        let base: Vec<u8> = (0..20).map(|i| i * 11).collect();
        for len in [7, 8, 9, 15, 16, 17, 20] {
            for at in 0..len {
                let mut k = base[..len].to_vec();
                keys.push(k.clone());
                k[at] ^= 0x80;
                keys.push(k);
            }
        }
        for a in &keys {
            for b in &keys {
                assert_eq!(cmp(a, b), a.as_slice().cmp(b.as_slice()), "{a:?} {b:?}");
                assert_eq!(eq(a, b), a == b, "{a:?} {b:?}");
            }
        }
    }
}
