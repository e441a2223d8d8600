//! Request distributions: which key an operation picks, and how long a
//! scan is.
//!
//! - **uniform**: every loaded or inserted key alike (the HART paper's
//!   mixes, §IV-C; DPTree's YCSB runs, §4.4).
//! - **zipfian(θ)**: YCSB's scrambled Zipfian over the loaded keys: rank `r`
//!   is drawn with probability ∝ `1 / (r + 1)^θ` by the method of Gray et
//!   al. ("Quickly generating billion-record synthetic databases", SIGMOD
//!   1994), as YCSB's `ZipfianGenerator` does (exact for the two hottest
//!   ranks, an approximation after them), then scattered over the key
//!   set by a hash (YCSB's `ScrambledZipfianGenerator`), so the hot keys
//!   are not neighbours. Keys inserted during the run are not chosen, as in
//!   YCSB. θ is in (0, 1); YCSB's default is 0.99.
//! - **latest(θ)**: YCSB's `SkewedLatestGenerator`: the newest key is the
//!   most popular, rank `r` back from it drawn from a Zipfian over every key
//!   loaded or inserted so far (YCSB workload D).
//!
//! Every generator draws from a caller-supplied random generator, so a
//! thread with its own seeded generator gets a reproducible stream.

use std::fmt;
use std::str::FromStr;

use rand::Rng;

use super::workload::mix64;

/// YCSB's default Zipfian constant.
pub const DEFAULT_ZIPF_THETA: f64 = 0.99;

/// How operations choose their key.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Distribution {
    /// Every key alike.
    Uniform,
    /// YCSB's scrambled Zipfian over the loaded keys.
    Zipfian {
        /// Skew, in (0, 1).
        theta: f64,
    },
    /// YCSB's skewed-latest: the newest keys are the hottest.
    Latest {
        /// Skew, in (0, 1).
        theta: f64,
    },
}

impl fmt::Display for Distribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Distribution::Uniform => f.write_str("uniform"),
            Distribution::Zipfian { theta } => write!(f, "zipfian:{theta}"),
            Distribution::Latest { theta } => write!(f, "latest:{theta}"),
        }
    }
}

impl FromStr for Distribution {
    type Err = String;
    /// `uniform`, `zipfian`, `zipfian:0.8`, `latest`, `latest:0.9`.
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim().to_ascii_lowercase();
        let (name, theta) = match t.split_once([':', '=']) {
            Some((n, th)) => {
                let theta: f64 = th.trim().parse().map_err(|_| {
                    format!(
                        "bad skew `{th}` in `{s}`: expected a number in (0, 1), e.g. zipfian:0.99"
                    )
                })?;
                if !(theta > 0.0 && theta < 1.0) {
                    return Err(format!(
                        "skew {theta} in `{s}` is out of range: the Zipfian generator \
                         (Gray et al., as in YCSB) takes a skew in (0, 1)"
                    ));
                }
                (n.trim().to_string(), Some(theta))
            }
            None => (t.clone(), None),
        };
        let theta = theta.unwrap_or(DEFAULT_ZIPF_THETA);
        match name.as_str() {
            "uniform" if t.contains([':', '=']) => {
                Err(format!("`{s}`: the uniform distribution takes no skew"))
            }
            "uniform" => Ok(Distribution::Uniform),
            "zipfian" | "zipf" => Ok(Distribution::Zipfian { theta }),
            "latest" => Ok(Distribution::Latest { theta }),
            _ => Err(format!(
                "unknown distribution `{s}` (uniform, zipfian[:SKEW], latest[:SKEW])"
            )),
        }
    }
}

/// `sum_{i=1..n} 1 / i^theta`, from `from` (with `acc` its value at `from`).
fn zeta(from: u64, to: u64, theta: f64, acc: f64) -> f64 {
    let mut z = acc;
    for i in from + 1..=to {
        z += 1.0 / (i as f64).powf(theta);
    }
    z
}

/// Zipfian ranks over `0..n` (rank 0 the most popular), by Gray et al.'s
/// method; `n` can grow.
#[derive(Debug, Clone)]
pub struct Zipf {
    theta: f64,
    n: u64,
    zetan: f64,
    zeta2: f64,
    alpha: f64,
    eta: f64,
}

impl Zipf {
    /// Ranks over `0..n` (`n` at least 1) with skew `theta` in (0, 1).
    /// Costs `n` powers (about a second for 10^8).
    pub fn new(n: u64, theta: f64) -> Zipf {
        let n = n.max(1);
        let zeta2 = zeta(0, 2, theta, 0.0);
        let mut z = Zipf {
            theta,
            n,
            zetan: zeta(0, n, theta, 0.0),
            zeta2,
            alpha: 1.0 / (1.0 - theta),
            eta: 0.0,
        };
        z.update_eta();
        z
    }

    fn update_eta(&mut self) {
        let n = self.n as f64;
        self.eta = (1.0 - (2.0 / n).powf(1.0 - self.theta)) / (1.0 - self.zeta2 / self.zetan);
    }

    /// The number of ranks.
    pub fn n(&self) -> u64 {
        self.n
    }

    /// Extends the ranks to `0..n` (no-op if `n` is not larger).
    pub fn grow_to(&mut self, n: u64) {
        if n > self.n {
            self.zetan = zeta(self.n, n, self.theta, self.zetan);
            self.n = n;
            self.update_eta();
        }
    }

    /// A rank in `0..n`.
    pub fn sample(&self, rng: &mut impl Rng) -> u64 {
        let u: f64 = rng.gen();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1.min(self.n - 1);
        }
        let r = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        r.min(self.n - 1)
    }
}

/// Picks key indices for one thread.
#[derive(Debug, Clone)]
pub struct KeyChooser {
    dist: Distribution,
    zipf: Option<Zipf>,
    /// Keys loaded before the phase (the Zipfian's range).
    loaded: u64,
    salt: u64,
}

impl KeyChooser {
    /// A chooser for `dist` over `loaded` keys loaded before the phase.
    /// Clone it for each thread (the Zipfian's set-up is the costly part).
    pub fn new(dist: Distribution, loaded: u64, salt: u64) -> KeyChooser {
        let zipf = match dist {
            Distribution::Uniform => None,
            Distribution::Zipfian { theta } | Distribution::Latest { theta } => {
                Some(Zipf::new(loaded.max(1), theta))
            }
        };
        KeyChooser {
            dist,
            zipf,
            loaded: loaded.max(1),
            salt,
        }
    }

    /// A key index, given that keys `0..count` have been inserted (`count`
    /// at least 1).
    #[inline]
    pub fn next(&mut self, rng: &mut impl Rng, count: u64) -> u64 {
        let count = count.max(1);
        match (&self.dist, &mut self.zipf) {
            (Distribution::Uniform, _) | (_, None) => rng.gen_range(0..count),
            (Distribution::Zipfian { .. }, Some(z)) => {
                let rank = z.sample(rng);
                mix64(rank ^ self.salt) % self.loaded
            }
            (Distribution::Latest { .. }, Some(z)) => {
                z.grow_to(count);
                let back = z.sample(rng);
                count - 1 - back.min(count - 1)
            }
        }
    }
}

/// How many records a scan reads.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ScanLen {
    /// Always this many.
    Fixed {
        /// Records per scan.
        len: u64,
    },
    /// Uniform in `1..=max` (YCSB workload E).
    Uniform {
        /// Longest scan.
        max: u64,
    },
    /// Normal, rounded, at least 1 (DPTree §4.4: selectivity 0.001% ±
    /// 0.0006% of the records).
    Normal {
        /// Mean records per scan.
        mean: f64,
        /// Standard deviation.
        sd: f64,
    },
}

impl ScanLen {
    /// A scan length (at least 1).
    pub fn sample(&self, rng: &mut impl Rng) -> u64 {
        match *self {
            ScanLen::Fixed { len } => len.max(1),
            ScanLen::Uniform { max } => rng.gen_range(1..=max.max(1)),
            ScanLen::Normal { mean, sd } => {
                // Box-Muller.
                let u1: f64 = rng.gen_range(f64::MIN_POSITIVE..1.0);
                let u2: f64 = rng.gen();
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                (mean + sd * z).round().max(1.0) as u64
            }
        }
    }

    /// The mean length, for reports.
    pub fn mean(&self) -> f64 {
        match *self {
            ScanLen::Fixed { len } => len.max(1) as f64,
            ScanLen::Uniform { max } => (max.max(1) as f64 + 1.0) / 2.0,
            ScanLen::Normal { mean, .. } => mean.max(1.0),
        }
    }
}

impl fmt::Display for ScanLen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ScanLen::Fixed { len } => write!(f, "{len}"),
            ScanLen::Uniform { max } => write!(f, "1..={max}"),
            ScanLen::Normal { mean, sd } => write!(f, "{mean:.0}±{sd:.0}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn zipfian_frequencies_follow_the_power_law() {
        let n = 1000;
        let theta = 0.99;
        let z = Zipf::new(n, theta);
        let mut rng = SmallRng::seed_from_u64(1);
        let draws = 400_000;
        let mut hist = vec![0u64; n as usize];
        for _ in 0..draws {
            hist[z.sample(&mut rng) as usize] += 1;
        }
        let zetan = zeta(0, n, theta, 0.0);
        // Rank r has probability 1 / ((r + 1)^θ ζ(n)). Gray et al.'s method
        // is exact for ranks 0 and 1 and an approximation after them (about
        // 18% high at rank 2 for θ = 0.99, within a few % from rank 9 on),
        // as in YCSB.
        for (r, tolerance) in [(0usize, 0.05), (1, 0.05), (2, 0.25), (9, 0.1), (99, 0.15)] {
            let expected = draws as f64 / ((r + 1) as f64).powf(theta) / zetan;
            let got = hist[r] as f64;
            assert!(
                (got - expected).abs() < tolerance * expected,
                "rank {r}: {got} draws, expected about {expected:.0}"
            );
        }
        // Skewed: the top 1% of ranks take a large share, the bottom half little.
        let top: u64 = hist[..10].iter().sum();
        let bottom: u64 = hist[500..].iter().sum();
        assert!(top as f64 > 0.35 * draws as f64, "top 10 ranks: {top}");
        assert!(
            (bottom as f64) < 0.15 * draws as f64,
            "bottom half: {bottom}"
        );
        assert!(hist.windows(2).take(20).all(|w| w[0] + 200 >= w[1]));
    }

    #[test]
    fn zipfian_grows_like_a_fresh_one() {
        let mut a = Zipf::new(100, 0.8);
        a.grow_to(5000);
        let b = Zipf::new(5000, 0.8);
        assert!((a.zetan - b.zetan).abs() < 1e-9);
        assert!((a.eta - b.eta).abs() < 1e-12);
        assert_eq!(Zipf::new(1, 0.5).sample(&mut SmallRng::seed_from_u64(0)), 0);
        let two = Zipf::new(2, 0.5);
        let mut rng = SmallRng::seed_from_u64(0);
        assert!((0..100).all(|_| two.sample(&mut rng) < 2));
    }

    #[test]
    fn choosers_stay_in_range_and_skew() {
        let mut rng = SmallRng::seed_from_u64(2);
        for dist in [
            Distribution::Uniform,
            Distribution::Zipfian { theta: 0.99 },
            Distribution::Latest { theta: 0.99 },
        ] {
            let mut c = KeyChooser::new(dist, 1000, 7);
            for count in [1000, 1500] {
                for _ in 0..10_000 {
                    assert!(c.next(&mut rng, count) < count, "{dist}");
                }
            }
        }
        // Latest favours the newest keys.
        let mut c = KeyChooser::new(Distribution::Latest { theta: 0.99 }, 1000, 7);
        let recent = (0..10_000)
            .filter(|_| c.next(&mut rng, 1000) >= 990)
            .count();
        assert!(recent > 3000, "{recent}");
        // Scrambled Zipfian: the hottest key is not key 0.
        let mut c = KeyChooser::new(Distribution::Zipfian { theta: 0.99 }, 1000, 7);
        let mut hist = vec![0u32; 1000];
        for _ in 0..50_000 {
            hist[c.next(&mut rng, 1000) as usize] += 1;
        }
        let hottest = (0..1000).max_by_key(|&i| hist[i]).unwrap();
        assert!(hist[hottest] > 5000);
    }

    #[test]
    fn same_seed_same_stream() {
        let draw = |seed| {
            let mut rng = SmallRng::seed_from_u64(seed);
            let mut c = KeyChooser::new(Distribution::Zipfian { theta: 0.9 }, 10_000, 3);
            (0..100)
                .map(|_| c.next(&mut rng, 10_000))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(5), draw(5));
        assert_ne!(draw(5), draw(6));
    }

    #[test]
    fn distributions_parse() {
        assert_eq!("uniform".parse::<Distribution>(), Ok(Distribution::Uniform));
        assert_eq!(
            "zipfian".parse::<Distribution>(),
            Ok(Distribution::Zipfian { theta: 0.99 })
        );
        assert_eq!(
            "zipfian:0.5".parse::<Distribution>(),
            Ok(Distribution::Zipfian { theta: 0.5 })
        );
        assert_eq!(
            "latest=0.8".parse::<Distribution>(),
            Ok(Distribution::Latest { theta: 0.8 })
        );
        for bad in [
            "zipfian:1",
            "zipfian:0",
            "zipfian:x",
            "uniform:3",
            "pareto",
            "",
        ] {
            assert!(bad.parse::<Distribution>().is_err(), "{bad}");
        }
        let d = Distribution::Zipfian { theta: 0.7 };
        assert_eq!(d.to_string().parse::<Distribution>(), Ok(d));
    }

    #[test]
    fn scan_lengths() {
        let mut rng = SmallRng::seed_from_u64(4);
        assert_eq!(ScanLen::Fixed { len: 0 }.sample(&mut rng), 1);
        let u = ScanLen::Uniform { max: 100 };
        assert!((0..1000).all(|_| (1..=100).contains(&u.sample(&mut rng))));
        let n = ScanLen::Normal {
            mean: 500.0,
            sd: 300.0,
        };
        let draws: Vec<u64> = (0..20_000).map(|_| n.sample(&mut rng)).collect();
        let mean = draws.iter().sum::<u64>() as f64 / draws.len() as f64;
        assert!(draws.iter().all(|&d| d >= 1));
        assert!((mean - 500.0).abs() < 20.0, "{mean}");
    }
}
