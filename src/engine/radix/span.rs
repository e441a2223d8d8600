//! Units of a key: the radix trees index a key one *unit* at a time, a
//! nibble (WORT's 4-bit span, 16 children per node) or a byte (the ART
//! variants, 256 partial keys). Depths, prefix lengths and branch positions
//! are counted in units. A key of `n` bytes has `2n` nibbles, high nibble
//! first, so the order of unit sequences is the byte order of keys.

/// How many bits of the key one tree level consumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Span {
    /// 4 bits (WORT).
    Nibble,
    /// 8 bits (WOART, ART+CoW).
    Byte,
}

impl Span {
    /// Bits per unit.
    pub const fn bits(self) -> u32 {
        match self {
            Span::Nibble => 4,
            Span::Byte => 8,
        }
    }

    /// Length of `key` in units.
    #[inline]
    pub fn len(self, key: &[u8]) -> usize {
        match self {
            Span::Nibble => 2 * key.len(),
            Span::Byte => key.len(),
        }
    }

    /// Unit `i` of `key` (`i < self.len(key)`).
    #[inline]
    pub fn unit(self, key: &[u8], i: usize) -> u8 {
        match self {
            Span::Nibble => {
                let b = key[i / 2];
                if i.is_multiple_of(2) {
                    b >> 4
                } else {
                    b & 0x0F
                }
            }
            Span::Byte => key[i],
        }
    }

    /// Units `from..to` of `key`.
    pub fn units(self, key: &[u8], from: usize, to: usize) -> Vec<u8> {
        (from..to).map(|i| self.unit(key, i)).collect()
    }

    /// Number of equal units of `a` and `b` from unit `from` on (stops where
    /// either key ends).
    pub fn common(self, a: &[u8], b: &[u8], from: usize) -> usize {
        let end = self.len(a).min(self.len(b));
        let mut i = from;
        while i < end && self.unit(a, i) == self.unit(b, i) {
            i += 1;
        }
        i - from
    }

    /// Units of `key` as a sequence (for scans).
    pub fn all(self, key: &[u8]) -> Vec<u8> {
        self.units(key, 0, self.len(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nibbles_are_high_first() {
        let k = [0x12, 0xAB];
        assert_eq!(Span::Nibble.all(&k), vec![1, 2, 0xA, 0xB]);
        assert_eq!(Span::Byte.all(&k), vec![0x12, 0xAB]);
        assert_eq!(Span::Nibble.common(&[0x12, 0xAB], &[0x12, 0xAC], 0), 3);
        assert_eq!(Span::Byte.common(b"abc", b"ab", 1), 1);
    }
}
