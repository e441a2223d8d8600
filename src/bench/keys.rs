//! The key sets of the papers' workloads, generated from a seed.
//!
//! | kind | keys | source |
//! |---|---|---|
//! | `dictionary` | the words of a word list, one per line (default `/usr/share/dict/words`) | HART §IV-A ("Dictionary", 466,544 English words) |
//! | `seq-string` | sequential strings over `[0-9A-Za-z]`, at least 5 characters | HART §IV-A ("Sequential") |
//! | `rand-string` | random strings of 5 to 16 characters over `[0-9A-Za-z]` | HART §IV-A ("Random") |
//! | `dense` | the 8-byte integers `1..=n` | WORT §4 ("Dense", Figure 6) |
//! | `sparse` | uniformly distributed 8-byte integers | WORT §4 ("Sparse") |
//! | `clustered` | runs of 64 consecutive 8-byte integers, the runs spread uniformly | WORT §4 ("Clustered"); art-bplus §3.1 (聚簇分布) |
//! | `random-u64` | uniformly distributed 64-bit integers | DPTree §4.2 |
//!
//! Integers are stored big-endian, so byte order is numeric order.
//! `sparse` and `random-u64` are the same distribution drawn with different
//! seeds: the two papers name it differently.
//!
//! # Insertion order
//! Key `i` of a [`KeySet`] is the `i`-th key inserted. The first `records`
//! keys are the ones loaded; the keys after them are the ones that mixes
//! insert later (`extra`). For `seq-string` the load order is the sequence
//! itself (HART's Sequential workload); every other kind is loaded in a
//! random order (WORT §4: "the keys are inserted in random order"; the
//! art-bplus paper §3.1 shuffles too; a word list is sorted, so it is
//! shuffled as well). Extra keys continue the sequence where there is one
//! (`dense` goes on with `records + 1, ...`, `seq-string` with the next
//! strings, `clustered` with new runs), so YCSB's "latest" distribution
//! finds the newest keys at the end.
//!
//! # Distinctness
//! Every generator yields distinct keys without a set of the keys themselves:
//! the integer kinds go through bijections ([`mix64`], [`permute_bits`]);
//! sequential strings count; random strings are checked against a set of
//! 64-bit hashes (a hash collision only makes the generator draw again);
//! words are deduplicated.

use std::collections::HashSet;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::str::FromStr;

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::workload::{key_u64, mix64, shuffled_order};
use super::{BenchError, BenchResult};
use crate::engine::MAX_KEY_LEN;
use crate::error::Error;

/// The word list read by the `dictionary` key set unless told otherwise.
pub const DEFAULT_DICTIONARY: &str = "/usr/share/dict/words";

/// The characters of HART's string keys, in byte order (so that a
/// sequential string sorts where its number does).
pub const STRING_ALPHABET: &[u8; 62] =
    b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Shortest and longest random string key (HART §IV-A: 5 to 16 bytes).
pub const RAND_STRING_LEN: (usize, usize) = (5, 16);
/// Shortest sequential string key.
pub const SEQ_STRING_MIN_LEN: usize = 5;
/// Keys per run of the `clustered` kind (WORT §4: 64 sequential keys).
pub const CLUSTER_RUN: u64 = 64;

/// A kind of key set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeyKind {
    /// Words of a word list (HART's Dictionary).
    Dictionary,
    /// Sequential strings (HART's Sequential).
    SeqString,
    /// Random strings of 5 to 16 characters (HART's Random).
    RandString,
    /// `1..=n` as 8-byte integers (WORT's Dense).
    Dense,
    /// Uniform 8-byte integers (WORT's Sparse).
    Sparse,
    /// Runs of 64 consecutive 8-byte integers (WORT's Clustered).
    Clustered,
    /// Uniform 64-bit integers (DPTree's random keys).
    RandomU64,
}

impl KeyKind {
    /// Every kind, in the order of the table above.
    pub const ALL: [KeyKind; 7] = [
        KeyKind::Dictionary,
        KeyKind::SeqString,
        KeyKind::RandString,
        KeyKind::Dense,
        KeyKind::Sparse,
        KeyKind::Clustered,
        KeyKind::RandomU64,
    ];

    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            KeyKind::Dictionary => "dictionary",
            KeyKind::SeqString => "seq-string",
            KeyKind::RandString => "rand-string",
            KeyKind::Dense => "dense",
            KeyKind::Sparse => "sparse",
            KeyKind::Clustered => "clustered",
            KeyKind::RandomU64 => "random-u64",
        }
    }

    /// The name the papers use.
    pub fn label(self) -> &'static str {
        match self {
            KeyKind::Dictionary => "Dictionary",
            KeyKind::SeqString => "Sequential",
            KeyKind::RandString => "Random",
            KeyKind::Dense => "Dense",
            KeyKind::Sparse => "Sparse",
            KeyKind::Clustered => "Clustered",
            KeyKind::RandomU64 => "Random u64",
        }
    }

    /// The longest key of this kind (for sizing pools).
    pub fn max_key_len(self) -> usize {
        match self {
            KeyKind::Dictionary => MAX_KEY_LEN,
            KeyKind::SeqString | KeyKind::RandString => RAND_STRING_LEN.1,
            _ => 8,
        }
    }

    /// Whether the keys are 8-byte integers.
    pub fn is_integer(self) -> bool {
        self.max_key_len() == 8 && !matches!(self, KeyKind::Dictionary)
    }
}

impl fmt::Display for KeyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for KeyKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim().to_ascii_lowercase();
        Ok(match t.as_str() {
            "dictionary" | "dict" | "words" => KeyKind::Dictionary,
            "seq-string" | "sequential" | "seq" => KeyKind::SeqString,
            "rand-string" | "random" | "random-string" => KeyKind::RandString,
            "dense" => KeyKind::Dense,
            "sparse" => KeyKind::Sparse,
            "clustered" => KeyKind::Clustered,
            "random-u64" | "u64" | "random-int" => KeyKind::RandomU64,
            _ => {
                return Err(format!(
                    "unknown key set `{s}` (one of: {})",
                    KeyKind::ALL.map(KeyKind::name).join(", ")
                ))
            }
        })
    }
}

/// Keys, stored back to back in one buffer.
#[derive(Clone)]
pub struct KeySet {
    kind: KeyKind,
    data: Vec<u8>,
    layout: Layout,
    records: usize,
}

#[derive(Clone)]
enum Layout {
    /// Every key is this many bytes.
    Fixed(usize),
    /// Key `i` ends at `ends[i]` and starts where key `i - 1` ends.
    Var(Vec<u32>),
}

impl fmt::Debug for KeySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeySet")
            .field("kind", &self.kind)
            .field("len", &self.len())
            .field("records", &self.records)
            .finish()
    }
}

impl KeySet {
    /// `records` keys to load and `extra` keys to insert later, of `kind`,
    /// drawn from `seed`. `dictionary` is the word list of
    /// [`KeyKind::Dictionary`].
    pub fn generate(
        kind: KeyKind,
        records: u64,
        extra: u64,
        seed: u64,
        dictionary: &Path,
    ) -> BenchResult<KeySet> {
        let total = records
            .checked_add(extra)
            .filter(|&t| t <= u64::from(u32::MAX))
            .ok_or_else(|| {
                BenchError::Config(format!(
                    "{records} records plus {extra} inserted keys is more than this \
                     benchmark supports ({})",
                    u32::MAX
                ))
            })?;
        // Refused before the allocation, which would otherwise abort the
        // process ("memory allocation of 16000000000 bytes failed", a review
        // with 2,000,000,000 records under a memory limit).
        let per_key = kind.max_key_len().min(16) as u64 + 4;
        check_key_memory(total, per_key, available_memory())?;
        let (records, extra) = (records as usize, extra as usize);
        let mut set = match kind {
            KeyKind::Dictionary => words(dictionary, records, extra, seed)?,
            KeyKind::SeqString => seq_strings(total as usize),
            KeyKind::RandString => rand_strings(total as usize, seed),
            KeyKind::Dense => integers(records, extra, Some(seed), |i| i + 1),
            // Random already: no shuffle needed.
            KeyKind::Sparse => integers(records, extra, None, |i| key_u64(seed, i)),
            KeyKind::Clustered => {
                let salt = mix64(seed ^ 0x0063_6c75_7374_6572);
                integers(records, extra, Some(seed), move |i| {
                    (permute_bits(i / CLUSTER_RUN, 58, salt) << 6) | (i % CLUSTER_RUN)
                })
            }
            KeyKind::RandomU64 => {
                let s = mix64(seed ^ 0x0075_3634);
                integers(records, extra, None, move |i| key_u64(s, i))
            }
        };
        set.kind = kind;
        set.records = records;
        debug_assert_eq!(set.len(), records + extra);
        Ok(set)
    }

    /// The kind of keys.
    pub fn kind(&self) -> KeyKind {
        self.kind
    }

    /// Number of keys (loaded and extra).
    pub fn len(&self) -> usize {
        match &self.layout {
            Layout::Fixed(w) => self.data.len() / w,
            Layout::Var(ends) => ends.len(),
        }
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of keys to load (the rest are for later inserts).
    pub fn records(&self) -> usize {
        self.records
    }

    /// Key `i`, or `None` past the last key.
    #[inline]
    pub fn try_get(&self, i: usize) -> Option<&[u8]> {
        match &self.layout {
            Layout::Fixed(w) => self.data.get(i * w..(i + 1) * w),
            Layout::Var(ends) => {
                let start = match i {
                    0 => 0,
                    _ => *ends.get(i - 1)? as usize,
                };
                self.data.get(start..*ends.get(i)? as usize)
            }
        }
    }

    /// Key `i`.
    #[inline]
    pub fn get(&self, i: usize) -> &[u8] {
        match &self.layout {
            Layout::Fixed(w) => &self.data[i * w..(i + 1) * w],
            Layout::Var(ends) => {
                let start = if i == 0 { 0 } else { ends[i - 1] as usize };
                &self.data[start..ends[i] as usize]
            }
        }
    }

    /// Mean key length in bytes.
    pub fn mean_len(&self) -> f64 {
        if self.is_empty() {
            0.0
        } else {
            self.data.len() as f64 / self.len() as f64
        }
    }

    /// The longest key.
    pub fn max_len(&self) -> usize {
        match &self.layout {
            Layout::Fixed(w) => *w,
            Layout::Var(_) => (0..self.len())
                .map(|i| self.get(i).len())
                .max()
                .unwrap_or(0),
        }
    }

    /// Bytes of DRAM the key set itself holds.
    pub fn heap_bytes(&self) -> usize {
        self.data.capacity()
            + match &self.layout {
                Layout::Fixed(_) => 0,
                Layout::Var(ends) => ends.capacity() * 4,
            }
    }
}

/// Variable-length keys pushed one by one.
struct VarBuilder {
    data: Vec<u8>,
    ends: Vec<u32>,
}

impl VarBuilder {
    fn with_capacity(keys: usize, bytes: usize) -> Self {
        VarBuilder {
            data: Vec::with_capacity(bytes),
            ends: Vec::with_capacity(keys),
        }
    }

    fn push(&mut self, key: &[u8]) {
        self.data.extend_from_slice(key);
        self.ends.push(
            u32::try_from(self.data.len()).expect("key sets are limited to 4 GiB of key bytes"),
        );
    }

    fn finish(self, kind: KeyKind) -> KeySet {
        KeySet {
            kind,
            data: self.data,
            layout: Layout::Var(self.ends),
            records: 0,
        }
    }
}

/// 8-byte keys `f(0) .. f(records + extra - 1)`: the first `records` in an
/// order shuffled from `shuffle` (or in index order if `None`), the extra
/// ones in index order. `f` must be injective.
fn integers(records: usize, extra: usize, shuffle: Option<u64>, f: impl Fn(u64) -> u64) -> KeySet {
    let mut data = Vec::with_capacity((records + extra) * 8);
    match shuffle {
        Some(seed) => {
            for &i in &shuffled_order(seed, 0x6b65_7973, records) {
                data.extend_from_slice(&f(u64::from(i)).to_be_bytes());
            }
        }
        None => {
            for i in 0..records as u64 {
                data.extend_from_slice(&f(i).to_be_bytes());
            }
        }
    }
    for i in records..records + extra {
        data.extend_from_slice(&f(i as u64).to_be_bytes());
    }
    KeySet {
        kind: KeyKind::Sparse,
        data,
        layout: Layout::Fixed(8),
        records,
    }
}

/// A bijection on `0..2^bits` (for `bits` in 2..=64), keyed by `salt`: an
/// add, then xorshift-multiply rounds, each step invertible modulo `2^bits`.
pub fn permute_bits(x: u64, bits: u32, salt: u64) -> u64 {
    debug_assert!((2..=64).contains(&bits));
    let mask = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let half = bits / 2;
    let mut z = x.wrapping_add(salt) & mask;
    z = (z ^ (z >> half)).wrapping_mul(0xBF58_476D_1CE4_E5B9) & mask;
    z = (z ^ (z >> (half + 1).min(bits - 1))).wrapping_mul(0x94D0_49BB_1331_11EB) & mask;
    z ^ (z >> half)
}

/// The `i`-th sequential string of width `width` (base 62, most
/// significant character first).
fn seq_string(mut i: u64, width: usize, out: &mut [u8; 16]) -> usize {
    for c in out[..width].iter_mut().rev() {
        *c = STRING_ALPHABET[(i % 62) as usize];
        i /= 62;
    }
    width
}

fn seq_strings(total: usize) -> KeySet {
    // Wide enough for every index, and at least SEQ_STRING_MIN_LEN, so the
    // strings all have one width and sort in sequence order.
    let mut width = SEQ_STRING_MIN_LEN;
    while 62f64.powi(width as i32) < total as f64 {
        width += 1;
    }
    let mut b = VarBuilder::with_capacity(total, total * width);
    let mut buf = [0u8; 16];
    for i in 0..total as u64 {
        let n = seq_string(i, width, &mut buf);
        b.push(&buf[..n]);
    }
    b.finish(KeyKind::SeqString)
}

/// A 64-bit hash of a key, the same in every run (SipHash with fixed keys).
fn hash64(key: &[u8]) -> u64 {
    #[allow(deprecated, reason = "SipHasher is the stable keyed hash in std")]
    let mut h = std::hash::SipHasher::new();
    key.hash(&mut h);
    h.finish()
}

fn rand_strings(total: usize, seed: u64) -> KeySet {
    let mut rng = SmallRng::seed_from_u64(mix64(seed ^ 0x7374_7269_6e67));
    let mut seen: HashSet<u64> = HashSet::with_capacity(total);
    let mut b = VarBuilder::with_capacity(total, total * 11);
    let mut buf = [0u8; 16];
    while b.ends.len() < total {
        let len = rng.gen_range(RAND_STRING_LEN.0..=RAND_STRING_LEN.1);
        for c in &mut buf[..len] {
            *c = STRING_ALPHABET[rng.gen_range(0..62)];
        }
        if seen.insert(hash64(&buf[..len])) {
            b.push(&buf[..len]);
        }
    }
    b.finish(KeyKind::RandString)
}

/// The message for a missing word list.
pub fn missing_dictionary_message(path: &Path) -> String {
    format!(
        "{}: no such word list. The `dictionary` key set reads a word list, one word \
         per line (the HART paper's Dictionary workload). On Debian or Ubuntu, \
         `apt-get install wamerican-insane` installs /usr/share/dict/words with about \
         650,000 words; or pass another file with --dict FILE",
        path.display()
    )
}

/// Whether the word list at `path` can be read.
pub fn dictionary_available(path: &Path) -> bool {
    std::fs::File::open(path).is_ok()
}

/// The word list at `path`, read whole.
fn read_dictionary(path: &Path) -> BenchResult<Vec<u8>> {
    std::fs::read(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            BenchError::Config(missing_dictionary_message(path))
        } else {
            BenchError::failed(
                "dictionary key set",
                Error::io(format!("read {}", path.display()), e),
            )
        }
    })
}

/// The distinct words of `text` (one per line, `\r\n` or `\n`) that are
/// valid keys (1 to [`MAX_KEY_LEN`] bytes), in file order.
fn distinct_words(text: &[u8]) -> Vec<&[u8]> {
    let mut seen: HashSet<&[u8]> = HashSet::new();
    let mut list: Vec<&[u8]> = Vec::new();
    for line in text.split(|&b| b == b'\n') {
        let w = line.strip_suffix(b"\r").unwrap_or(line);
        if !w.is_empty() && w.len() <= MAX_KEY_LEN && seen.insert(w) {
            list.push(w);
        }
    }
    list
}

/// How many distinct keys the word list at `path` gives: the most that one
/// experiment on the `dictionary` key set can load and insert. A benchmark
/// checks this for every experiment before it runs the first.
pub fn dictionary_capacity(path: &Path) -> BenchResult<usize> {
    Ok(distinct_words(&read_dictionary(path)?).len())
}

/// Fails when `keys` keys of about `per_key` bytes each (the key, at most 16
/// bytes counted, and its offset) cannot fit in `available` bytes of memory
/// (`None`: unknown, not checked). The engines and the pool need more on
/// top; this refuses only what cannot work at all.
fn check_key_memory(keys: u64, per_key: u64, available: Option<u64>) -> BenchResult<()> {
    let need = keys.saturating_mul(per_key);
    match available {
        Some(have) if need > have => Err(BenchError::Config(format!(
            "{keys} keys need about {:.1} GiB of memory for the keys alone, and {:.1} GiB \
             is available (MemAvailable, or `ulimit -v` where lower); use fewer --records",
            need as f64 / f64::from(1u32 << 30),
            have as f64 / f64::from(1u32 << 30)
        ))),
        _ => Ok(()),
    }
}

/// The memory this process may still allocate, as far as is known: the
/// kernel's `MemAvailable`, and no more than the address-space limit
/// (`ulimit -v`) where one is set; `None` where neither says.
fn available_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            kib.checked_mul(1024)
        });
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` only writes the struct it is given, which lives
    // on this stack frame.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) };
    let address_space =
        (rc == 0 && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur);
    match (meminfo, address_space) {
        (Some(m), Some(a)) => Some(m.min(a)),
        (m, a) => m.or(a),
    }
}

/// Fails with the advice to lower `--records` when a word list of `have`
/// distinct words cannot give `records + extra` keys.
pub fn check_dictionary_size(
    path: &Path,
    have: usize,
    records: usize,
    extra: usize,
) -> BenchResult<()> {
    let need = records.saturating_add(extra);
    if have < need {
        // The advice names a --records that works, if there is one (a
        // review found "use --records 0 or fewer" for an empty list, and 0
        // is refused).
        let most = have.saturating_sub(extra);
        let advice = if most > 0 {
            format!("use --records {most} or fewer")
        } else {
            format!("give --dict a word list of more than {extra} distinct words")
        };
        return Err(BenchError::Config(format!(
            "{}: {have} distinct words, but the experiment needs {need} keys \
             ({records} to load, {extra} to insert later); {advice}",
            path.display(),
        )));
    }
    Ok(())
}

fn words(path: &Path, records: usize, extra: usize, seed: u64) -> BenchResult<KeySet> {
    let text = read_dictionary(path)?;
    let mut list = distinct_words(&text);
    check_dictionary_size(path, list.len(), records, extra)?;
    let need = records + extra;
    list.shuffle(&mut SmallRng::seed_from_u64(mix64(seed ^ 0x0077_6f72_6473)));
    list.truncate(need);
    let bytes = list.iter().map(|w| w.len()).sum();
    let mut b = VarBuilder::with_capacity(need, bytes);
    for w in list {
        b.push(w);
    }
    Ok(b.finish(KeyKind::Dictionary))
}

/// The first 8 bytes of every value: the key itself for 8-byte keys, else a
/// hash of it. A value read back under the wrong key does not carry its tag.
#[inline]
pub fn key_tag(key: &[u8]) -> [u8; 8] {
    match <[u8; 8]>::try_from(key) {
        Ok(k) => k,
        Err(_) => {
            // FNV-1a, finished with the SplitMix64 finaliser.
            mix64(crate::fnv::fnv1a(key)).to_be_bytes()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn all(set: &KeySet) -> Vec<Vec<u8>> {
        (0..set.len()).map(|i| set.get(i).to_vec()).collect()
    }

    fn gen(kind: KeyKind, records: u64, extra: u64, seed: u64) -> KeySet {
        KeySet::generate(kind, records, extra, seed, Path::new("/nonexistent")).unwrap()
    }

    #[test]
    fn every_generated_kind_is_distinct_and_reproducible() {
        for kind in KeyKind::ALL {
            if kind == KeyKind::Dictionary {
                continue;
            }
            let a = gen(kind, 5000, 300, 9);
            assert_eq!((a.len(), a.records()), (5300, 5000), "{kind}");
            let keys = all(&a);
            let set: BTreeSet<_> = keys.iter().collect();
            assert_eq!(set.len(), keys.len(), "{kind}: duplicates");
            assert_eq!(
                keys,
                all(&gen(kind, 5000, 300, 9)),
                "{kind}: not reproducible"
            );
            if kind != KeyKind::SeqString && kind != KeyKind::Dense {
                assert_ne!(keys, all(&gen(kind, 5000, 300, 10)), "{kind}: seed ignored");
            }
        }
    }

    #[test]
    fn dense_is_one_to_n_in_random_order_then_appends() {
        let s = gen(KeyKind::Dense, 1000, 10, 1);
        let loaded: Vec<u64> = (0..1000)
            .map(|i| u64::from_be_bytes(s.get(i).try_into().unwrap()))
            .collect();
        let mut sorted = loaded.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (1..=1000).collect::<Vec<u64>>());
        assert_ne!(loaded, sorted, "loaded in random order");
        let extra: Vec<u64> = (1000..1010)
            .map(|i| u64::from_be_bytes(s.get(i).try_into().unwrap()))
            .collect();
        assert_eq!(extra, (1001..=1010).collect::<Vec<u64>>());
    }

    #[test]
    fn clustered_keys_come_in_runs_of_64() {
        let n = 64 * 50;
        let s = gen(KeyKind::Clustered, n, 0, 3);
        let mut keys: Vec<u64> = (0..n as usize)
            .map(|i| u64::from_be_bytes(s.get(i).try_into().unwrap()))
            .collect();
        keys.sort_unstable();
        let mut runs = 0;
        for run in keys.chunks(64) {
            // 64 consecutive integers starting at a multiple of 64.
            assert_eq!(run[0] % 64, 0);
            assert!(run.windows(2).all(|w| w[1] == w[0] + 1));
            runs += 1;
        }
        assert_eq!(runs, 50);
        // The runs are spread over the key space, not packed together.
        let span = keys[keys.len() - 1] - keys[0];
        assert!(span > 1 << 50, "runs should be spread out, span {span}");
    }

    #[test]
    fn sequential_strings_sort_in_sequence_order() {
        let s = gen(KeyKind::SeqString, 4000, 0, 1);
        let keys = all(&s);
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(keys[0], b"00000");
        assert_eq!(keys[63], b"00011");
        assert!(keys
            .iter()
            .all(|k| k.len() == 5 && k.iter().all(|c| c.is_ascii_alphanumeric())));
    }

    #[test]
    fn random_strings_have_hart_lengths_and_alphabet() {
        let s = gen(KeyKind::RandString, 20_000, 0, 5);
        let mut lens = [0u32; 17];
        for i in 0..s.len() {
            let k = s.get(i);
            assert!(k.iter().all(|c| STRING_ALPHABET.contains(c)));
            lens[k.len()] += 1;
        }
        assert!(lens[..5].iter().all(|&n| n == 0));
        assert!(lens[5..=16].iter().all(|&n| n > 1000), "{lens:?}");
        assert_eq!(s.max_len(), 16);
    }

    #[test]
    fn permutation_of_bits_is_a_bijection() {
        for bits in [6, 10] {
            let n = 1u64 << bits;
            let mut seen: Vec<u64> = (0..n).map(|x| permute_bits(x, bits, 12345)).collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..n).collect::<Vec<u64>>());
        }
    }

    #[test]
    fn keys_that_cannot_fit_in_memory_are_refused_before_they_are_made() {
        let gib = 1u64 << 30;
        assert!(check_key_memory(1_000_000, 12, Some(gib)).is_ok());
        assert!(check_key_memory(u64::MAX, 12, None).is_ok());
        let e = check_key_memory(2_000_000_000, 12, Some(8 * gib))
            .unwrap_err()
            .to_string();
        assert!(e.contains("22.4 GiB") && e.contains("8.0 GiB"), "{e}");
        assert!(available_memory().is_some_and(|m| m > 0));
    }

    #[test]
    fn a_short_word_list_is_refused_with_advice_that_works() {
        let msg = |have, records, extra| {
            check_dictionary_size(Path::new("w"), have, records, extra)
                .unwrap_err()
                .to_string()
        };
        assert!(msg(100, 200, 10).contains("use --records 90 or fewer"));
        for (have, extra) in [(0, 0), (0, 10), (10, 10)] {
            let m = msg(have, 5, extra);
            assert!(!m.contains("--records 0"), "{m}");
            assert!(
                m.contains(&format!("more than {extra} distinct words")),
                "{m}"
            );
        }
        assert!(check_dictionary_size(Path::new("w"), 100, 90, 10).is_ok());
    }

    #[test]
    fn dictionary_reads_dedups_and_explains_a_missing_file() {
        let e = KeySet::generate(
            KeyKind::Dictionary,
            10,
            0,
            1,
            Path::new("/nonexistent/words"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("wamerican-insane") && e.contains("--dict"),
            "{e}"
        );

        let dir = std::env::temp_dir().join(format!("pmindex-words-{}", std::process::id()));
        std::fs::write(&dir, "apple\nbanana\r\napple\n\ncherry\ndate\n").unwrap();
        let s = KeySet::generate(KeyKind::Dictionary, 3, 1, 1, &dir).unwrap();
        let mut keys = all(&s);
        keys.sort();
        assert_eq!(keys, [&b"apple"[..], b"banana", b"cherry", b"date"]);
        let too_many = KeySet::generate(KeyKind::Dictionary, 5, 0, 1, &dir).unwrap_err();
        assert!(
            too_many.to_string().contains("4 distinct words"),
            "{too_many}"
        );
        std::fs::remove_file(&dir).unwrap();
    }

    #[test]
    fn tags_tell_keys_apart() {
        assert_eq!(key_tag(&7u64.to_be_bytes()), 7u64.to_be_bytes());
        assert_ne!(key_tag(b"hello"), key_tag(b"hellp"));
        assert_eq!(key_tag(b"hello"), key_tag(b"hello"));
    }

    #[test]
    fn names_parse() {
        for k in KeyKind::ALL {
            assert_eq!(k.name().parse::<KeyKind>().unwrap(), k);
        }
        assert_eq!("Random".parse::<KeyKind>().unwrap(), KeyKind::RandString);
        assert!("nope".parse::<KeyKind>().unwrap_err().contains("dense"));
    }
}
