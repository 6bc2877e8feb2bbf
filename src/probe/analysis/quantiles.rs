//! Duration quantiles (P50, P90, P99) in bounded memory: exact while a function has few calls (its first
//! [`EXACT`] durations are kept), then from a log-linear histogram of [`SUB`] buckets per power of two, whose
//! bucket middles are within 1/128 (0.8%) of every value they hold. At most [`EXACT`] durations, or 59 groups
//! of [`SUB`] counters (30 KiB; a few groups in practice), are kept per function.
//!
//! A quantile is the nearest rank: the `ceil(q * n)`-th smallest duration (as HdrHistogram and bpftrace's
//! `percentile` take it).

/// Durations kept exactly per function; past this many, the histogram takes over.
pub const EXACT: usize = 512;

/// Bits of sub-bucket below each power of two: [`SUB`] buckets per power of two.
const SUB_BITS: u32 = 6;

/// Sub-buckets per power of two: each is at most 1/64 of the values it holds wide.
pub const SUB: usize = 1 << SUB_BITS;

/// Groups of [`SUB`] buckets: values below [`SUB`] (one per value), then one group per power of two up to 2^63.
const GROUPS: usize = 64 - SUB_BITS as usize + 1;

/// The durations of one function, for its quantiles.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Quantiles {
    count: u64,
    /// Every duration, while there are at most [`EXACT`] (empty once the histogram holds them).
    exact: Vec<u64>,
    /// The log-linear histogram (empty until needed), each group allocated at its first value.
    groups: Vec<Option<Box<[u64; SUB]>>>,
}

/// The group and sub-bucket of `v`.
fn bucket(v: u64) -> (usize, usize) {
    if v < SUB as u64 {
        return (0, v as usize);
    }
    let msb = 63 - v.leading_zeros();
    let shift = msb - SUB_BITS;
    ((shift + 1) as usize, ((v >> shift) as usize) - SUB)
}

/// The middle of bucket `(group, sub)` (its only value in group 0).
fn middle(group: usize, sub: usize) -> u64 {
    if group == 0 {
        return sub as u64;
    }
    let shift = group as u32 - 1;
    let low = ((SUB + sub) as u64) << shift;
    low + ((1u64 << shift) >> 1)
}

impl Quantiles {
    /// Count one duration.
    pub fn record(&mut self, v: u64) {
        self.count += 1;
        if self.groups.is_empty() {
            self.exact.push(v);
            if self.exact.len() > EXACT {
                for v in std::mem::take(&mut self.exact) {
                    self.add(v, 1);
                }
            }
        } else {
            self.add(v, 1);
        }
    }

    fn add(&mut self, v: u64, n: u64) {
        if self.groups.is_empty() {
            self.groups.resize_with(GROUPS, || None);
        }
        let (g, s) = bucket(v);
        self.groups[g].get_or_insert_with(|| Box::new([0; SUB]))[s] += n;
    }

    /// Whether the quantiles are exact (every duration is kept).
    pub fn is_exact(&self) -> bool {
        self.groups.is_empty()
    }

    /// The `q` quantile (0 < q <= 1) by nearest rank: exact while every duration is kept, else the middle of
    /// the histogram's bucket that holds it. None when empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        if self.is_exact() {
            let mut sorted = self.exact.clone();
            let (_, v, _) = sorted.select_nth_unstable((rank - 1) as usize);
            return Some(*v);
        }
        let mut seen = 0u64;
        for (g, group) in self.groups.iter().enumerate() {
            let Some(group) = group else {
                continue;
            };
            for (s, &n) in group.iter().enumerate() {
                seen += n;
                if seen >= rank {
                    return Some(middle(g, s));
                }
            }
        }
        None
    }

    /// Add another interval's durations.
    pub fn merge(&mut self, o: &Quantiles) {
        if self.is_exact() && o.is_exact() && self.exact.len() + o.exact.len() <= EXACT {
            self.exact.extend_from_slice(&o.exact);
            self.count += o.count;
            return;
        }
        for v in std::mem::take(&mut self.exact) {
            self.add(v, 1);
        }
        for &v in &o.exact {
            self.add(v, 1);
        }
        for (g, group) in o.groups.iter().enumerate() {
            for (s, &n) in group.iter().flat_map(|b| b.iter()).enumerate() {
                if n > 0 {
                    self.add(middle(g, s), n);
                }
            }
        }
        self.count += o.count;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The nearest-rank quantile of `values`.
    fn exact(values: &[u64], q: f64) -> u64 {
        let mut v = values.to_vec();
        v.sort_unstable();
        let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
        v[rank - 1]
    }

    fn of(values: &[u64]) -> Quantiles {
        let mut q = Quantiles::default();
        for &v in values {
            q.record(v);
        }
        q
    }

    /// A deterministic pseudo-random sequence in [0, 1).
    fn unit(n: usize) -> Vec<f64> {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 11) as f64 / (1u64 << 53) as f64
            })
            .collect()
    }

    /// Check that every value lies in its bucket, and the bucket's middle is within 1/128 of it.
    #[test]
    fn buckets_hold_their_values() {
        for v in (0..5000u64).chain([u64::MAX, 1 << 63, 123_456_789, 1_000_000_007]) {
            let (g, s) = bucket(v);
            assert!(g < GROUPS && s < SUB, "{v}");
            let m = middle(g, s);
            assert!(m.abs_diff(v) as f64 <= v as f64 / 128.0, "{v}: middle {m}");
        }
    }

    /// Check that the quantiles of the case are exact while few calls were made: 200 calls of 1.1 ms
    /// and five of 3, 6, 9, 12 and 15 ms give P50 1.1 ms and P99 9 ms (log2 buckets said 1.59 and 11.18).
    #[test]
    fn exact_while_few() {
        let mut values = vec![1_100_000u64; 200];
        values.extend([3, 6, 9, 12, 15].map(|ms| ms * 1_000_000));
        let q = of(&values);
        assert!(q.is_exact());
        assert_eq!(q.quantile(0.5), Some(1_100_000));
        assert_eq!(q.quantile(0.99), Some(9_000_000));
        assert_eq!(q.quantile(1.0), Some(15_000_000));
        assert_eq!(Quantiles::default().quantile(0.5), None);
    }

    /// Check that past [`EXACT`] durations the quantiles are within 1/128 of the exact ones, on spreads from
    /// 1 us to 10 ms (log-uniform), uniform, and bimodal.
    #[test]
    fn histogram_within_one_percent() {
        let u = unit(10_000);
        let spreads: [Vec<u64>; 3] = [
            u.iter().map(|x| (1e3 * 1e4f64.powf(*x)) as u64).collect(),
            u.iter().map(|x| (x * 1e7) as u64).collect(),
            u.iter()
                .enumerate()
                .map(|(i, x)| (x * 1e4) as u64 + if i % 10 == 0 { 5_000_000 } else { 50_000 })
                .collect(),
        ];
        for values in &spreads {
            let q = of(values);
            assert!(!q.is_exact());
            for p in [0.5, 0.9, 0.99, 0.999] {
                let (want, got) = (exact(values, p), q.quantile(p).unwrap());
                assert!(
                    got.abs_diff(want) as f64 <= want as f64 / 128.0,
                    "P{p}: {got} against {want}"
                );
            }
        }
    }

    /// Check that merging intervals gives the quantiles of all their durations, exact ones included.
    #[test]
    fn merge_equals_recording_all() {
        let u = unit(3000);
        let values: Vec<u64> = u.iter().map(|x| (x * 1e6) as u64).collect();
        let (a, b) = values.split_at(100);
        let mut small = of(&a[..50]);
        small.merge(&of(&a[50..]));
        assert!(small.is_exact());
        assert_eq!(small.quantile(0.5), Some(exact(a, 0.5)));
        let mut all = of(a);
        all.merge(&of(b));
        let whole = of(&values);
        assert_eq!(all.count, 3000);
        for p in [0.5, 0.9, 0.99] {
            assert_eq!(all.quantile(p), whole.quantile(p), "P{p}");
        }
    }
}
