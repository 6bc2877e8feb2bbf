//! bpftrace's maps, held in user space: plain values and the aggregations `count`, `sum`, `min`, `max`, `avg`,
//! `stats`, `hist` and `lhist`, keyed by any tuple of values; `delete`, `clear`, `zero`; the entry limit.
//!
//! The arithmetic and the limit are bpftrace 0.17's (`src/ast/passes/codegen_llvm.cpp`, `src/imap.cpp`,
//! `src/bpftrace.cpp`), checked against bpftrace on this machine:
//! - `hist`, `lhist`, `avg` and `stats` keep one BPF map entry per (key, bucket): `avg`/`stats` use bucket 0 for
//!   the count and bucket 1 for the total. `BPFTRACE_MAP_KEYS_MAX` (4096) bounds those entries, not keys.
//! - A full map drops new entries silently (the kernel's `-E2BIG`, shown only with `-k`); existing entries still
//!   update. With 3 entries, `@a[1]=avg(1); @a[2]=avg(5); @a[3]=avg(7)` prints `@a[2]: 0` and `@a[1]: 1`.
//! - `min` stores `0xffffffff - v` and updates when that is >= the stored value (0 when absent); `max` updates
//!   when `v` >= the stored value (0 when absent): so `max(-5)` alone leaves the map empty, `min` of values above
//!   `0xffffffff` too, and `min` prints 0 when the stored value is 0.
//! - `hist`'s bucket is bpftrace's `log2()`: 0 for negatives, 1 for 0, then `2 + floor(log2(v))`, but computed
//!   with five shift steps that stop at 31, so every value from 2^31 up lands in `[2G, 4G)`.
//! - `lhist`'s bucket: 0 below `min`, `1 + (max - min) / step` above `max`, else `1 + (v - min) / step` (so `max`
//!   itself falls in the `[max, ...)` bucket).
//! - A `count()` map without keys is a per-CPU array in bpftrace: it always has its one value (printing 0 if
//!   never counted), `delete` and `clear` zero it.

use super::value::{Int, IntType, Value};
use std::collections::{BTreeMap, HashMap};

/// bpftrace's default `BPFTRACE_MAP_KEYS_MAX`.
pub const DEFAULT_MAP_KEYS_MAX: usize = 4096;

/// A map's key: the values between the brackets (empty for `@x`).
pub type Key = Vec<Value>;

/// `lhist(v, min, max, step)`'s constant arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Linear {
    pub min: i64,
    pub max: i64,
    pub step: i64,
}

/// What a map holds, fixed by the first assignment the checker sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapKind {
    /// `@x[k] = expr`.
    Plain,
    Count,
    /// `sum(v)`, signed or not as `v`'s type.
    Sum {
        signed: bool,
    },
    Min,
    Max,
    Avg,
    Stats,
    Hist,
    Lhist(Linear),
}

/// One key's content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cell {
    Value(Value),
    Count(u64),
    /// Two's-complement total (shown signed or not by the map's kind).
    Sum(i64),
    /// `0xffffffff - min`, as bpftrace stores it.
    MinInverted(i64),
    Max(i64),
    /// Bucket index to count (for `avg`/`stats`: 0 = count, 1 = total).
    Buckets(BTreeMap<u64, i64>),
}

/// What bpftrace prints (as a warning at the assignment, `FILE:LINE:COL-COL: WARNING: ...`) for an update a
/// full map dropped, with `-k` only: `BPFTRACE_MAP_KEYS_MAX=3 bpftrace -k -e 'BEGIN { @c[1]=count();
/// @c[2]=count(); @c[3]=count(); @c[4]=count(); }'` printed it at `@c[4]=count()`.
pub const FULL_WARNING: &str = "Failed to map_update_elem: Argument list too long (-7)";

/// Whether an update was stored, or dropped because the map was full (bpftrace's silent `-E2BIG`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Update {
    Stored,
    Full,
}

/// An operation the map's kind does not take (the checker refuses these first).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("map {map}: {op}() on a map of {kind:?}; a map keeps the kind of its first assignment")]
pub struct KindError {
    pub map: String,
    pub op: &'static str,
    pub kind: MapKind,
}

#[derive(Clone, Debug)]
struct Entry {
    seq: u64,
    cell: Cell,
}

/// One named map (`@`, `@x`), its entries in user space.
#[derive(Clone, Debug)]
pub struct Map {
    name: String,
    kind: MapKind,
    keyed: bool,
    max_entries: usize,
    /// aHash: a key is hashed at every update (SipHash took a tenth of `@[comm] = count()`'s time per event).
    entries: HashMap<Key, Entry, ahash::RandomState>,
    used: usize,
    next_seq: u64,
}

impl Map {
    /// A map named `name` (with its `@`), of `kind`, with keys or not, bounded to `max_entries` entries.
    pub fn new(name: &str, kind: MapKind, keyed: bool, max_entries: usize) -> Map {
        let mut map = Map {
            name: name.to_string(),
            kind,
            keyed,
            max_entries,
            entries: HashMap::default(),
            used: 0,
            next_seq: 0,
        };
        if map.is_array() {
            map.entries.insert(
                Vec::new(),
                Entry {
                    seq: 0,
                    cell: Cell::Count(0),
                },
            );
        }
        map
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn kind(&self) -> MapKind {
        self.kind
    }

    /// Whether the map has keys (`@x[k]`) or not (`@x`).
    pub fn keyed(&self) -> bool {
        self.keyed
    }

    /// bpftrace's per-CPU array: `count()` without keys.
    fn is_array(&self) -> bool {
        self.kind == MapKind::Count && !self.keyed
    }

    /// The entries in the order they were first stored (bpftrace's hash order is unspecified; printing sorts).
    pub fn entries(&self) -> Vec<(&Key, &Cell)> {
        let mut all: Vec<(&Key, &Entry)> = self.entries.iter().collect();
        all.sort_by_key(|(_, e)| e.seq);
        all.into_iter().map(|(k, e)| (k, &e.cell)).collect()
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn check(&self, op: &'static str, ok: bool) -> Result<(), KindError> {
        if ok {
            Ok(())
        } else {
            Err(KindError {
                map: self.name.clone(),
                op,
                kind: self.kind,
            })
        }
    }

    /// Apply `f` to the cell of `key` (of a map with one entry per key), created with `init` if there is room.
    /// Looked up by the key's values as they are (no key is built for an update of a key that exists: the
    /// common case), the key copied in only when it is new.
    fn update(&mut self, key: &[Value], init: Cell, f: impl FnOnce(&mut Cell)) -> Update {
        if let Some(e) = self.entries.get_mut(key) {
            f(&mut e.cell);
            return Update::Stored;
        }
        if self.used >= self.max_entries {
            return Update::Full;
        }
        self.used += 1;
        let seq = self.next_seq;
        self.next_seq += 1;
        let mut cell = init;
        f(&mut cell);
        self.entries.insert(key.to_vec(), Entry { seq, cell });
        Update::Stored
    }

    /// `@x[key] = v`.
    pub fn set(&mut self, key: &[Value], v: Value) -> Result<Update, KindError> {
        self.check("assignment", self.kind == MapKind::Plain)?;
        Ok(self.update(key, Cell::Count(0), |c| *c = Cell::Value(v)))
    }

    /// `@x[key] = count()`.
    pub fn count(&mut self, key: &[Value]) -> Result<Update, KindError> {
        self.check("count", self.kind == MapKind::Count)?;
        Ok(self.update(key, Cell::Count(0), |c| {
            if let Cell::Count(n) = c {
                *n = n.wrapping_add(1);
            }
        }))
    }

    /// `@x[key] = sum(v)`.
    pub fn sum(&mut self, key: &[Value], v: Int) -> Result<Update, KindError> {
        self.check("sum", matches!(self.kind, MapKind::Sum { .. }))?;
        Ok(self.update(key, Cell::Sum(0), |c| {
            if let Cell::Sum(t) = c {
                *t = t.wrapping_add(v.as_i64());
            }
        }))
    }

    /// `@x[key] = min(v)`: bpftrace's inverted store (see the module's notes).
    pub fn min(&mut self, key: &[Value], v: Int) -> Result<Update, KindError> {
        self.check("min", self.kind == MapKind::Min)?;
        let inverted = 0xffff_ffff_i64.wrapping_sub(v.as_i64());
        let old = match self.entries.get(key) {
            Some(Entry {
                cell: Cell::MinInverted(old),
                ..
            }) => *old,
            _ => 0,
        };
        if inverted < old {
            return Ok(Update::Stored);
        }
        Ok(self.update(key, Cell::MinInverted(0), |c| {
            *c = Cell::MinInverted(inverted)
        }))
    }

    /// `@x[key] = max(v)`: stored when `v` >= the stored value, 0 when absent.
    pub fn max(&mut self, key: &[Value], v: Int) -> Result<Update, KindError> {
        self.check("max", self.kind == MapKind::Max)?;
        let v = v.as_i64();
        let old = match self.entries.get(key) {
            Some(Entry {
                cell: Cell::Max(old),
                ..
            }) => *old,
            _ => 0,
        };
        if v < old {
            return Ok(Update::Stored);
        }
        Ok(self.update(key, Cell::Max(0), |c| *c = Cell::Max(v)))
    }

    /// Adds `add` to bucket `bucket` of `key`, a new (key, bucket) entry taking one of the map's entries.
    fn bucket_add(&mut self, key: &[Value], bucket: u64, add: i64) -> Update {
        let room = self.used < self.max_entries;
        match self.entries.get_mut(key) {
            Some(Entry {
                cell: Cell::Buckets(buckets),
                ..
            }) => {
                if !buckets.contains_key(&bucket) {
                    if !room {
                        return Update::Full;
                    }
                    self.used += 1;
                }
                let slot = buckets.entry(bucket).or_insert(0);
                *slot = slot.wrapping_add(add);
                Update::Stored
            }
            Some(_) => Update::Full,
            None if !room => Update::Full,
            None => {
                self.used += 1;
                let seq = self.next_seq;
                self.next_seq += 1;
                let cell = Cell::Buckets(BTreeMap::from([(bucket, add)]));
                self.entries.insert(key.to_vec(), Entry { seq, cell });
                Update::Stored
            }
        }
    }

    /// `@x[key] = avg(v)` and `stats(v)`: the count (bucket 0) first, then the total (bucket 1), each an entry.
    pub fn avg(&mut self, key: &[Value], v: Int) -> Result<Update, KindError> {
        self.check("avg", matches!(self.kind, MapKind::Avg | MapKind::Stats))?;
        let first = self.bucket_add(key, 0, 1);
        let second = self.bucket_add(key, 1, v.as_i64());
        Ok(if first == Update::Stored && second == Update::Stored {
            Update::Stored
        } else {
            Update::Full
        })
    }

    /// `@x[key] = hist(v)`.
    pub fn hist(&mut self, key: &[Value], v: Int) -> Result<Update, KindError> {
        self.check("hist", self.kind == MapKind::Hist)?;
        Ok(self.bucket_add(key, log2_bucket(v.as_i64()), 1))
    }

    /// `@x[key] = lhist(v, min, max, step)`.
    pub fn lhist(&mut self, key: &[Value], v: Int) -> Result<Update, KindError> {
        let MapKind::Lhist(lin) = self.kind else {
            return Err(KindError {
                map: self.name.clone(),
                op: "lhist",
                kind: self.kind,
            });
        };
        Ok(self.bucket_add(key, linear_bucket(v.as_i64(), lin), 1))
    }

    /// `@x[key]` read in a program: the value, or `None` when absent (the program reads 0 then). Histograms
    /// and averages are not readable as one value.
    pub fn get(&self, key: &[Value]) -> Option<Value> {
        match &self.entries.get(key)?.cell {
            Cell::Value(v) => Some(v.clone()),
            Cell::Count(n) => Some(Value::uint(*n)),
            Cell::Sum(t) => Some(match self.kind {
                MapKind::Sum { signed: false } => Value::uint(*t as u64),
                _ => Value::int(*t),
            }),
            Cell::MinInverted(m) => Some(Value::int(min_shown(*m))),
            Cell::Max(m) => Some(Value::int(*m)),
            Cell::Buckets(_) => None,
        }
    }

    /// `delete(@x[key])`; a keyless `count()` map is zeroed instead (bpftrace's array).
    pub fn delete(&mut self, key: &[Value]) {
        if self.is_array() {
            self.zero();
            return;
        }
        if let Some(e) = self.entries.remove(key) {
            self.used -= match e.cell {
                Cell::Buckets(b) => b.len(),
                _ => 1,
            };
        }
    }

    /// `clear(@x)`: every key removed (a keyless `count()` map is zeroed).
    pub fn clear(&mut self) {
        if self.is_array() {
            self.zero();
            return;
        }
        self.entries.clear();
        self.used = 0;
    }

    /// `zero(@x)`: every value set to 0, the keys (and histogram buckets) kept.
    pub fn zero(&mut self) {
        for e in self.entries.values_mut() {
            match &mut e.cell {
                Cell::Value(Value::Int(i)) => *i = Int::new(0, i.ty),
                Cell::Value(_) => {}
                Cell::Count(n) => *n = 0,
                Cell::Sum(t) | Cell::MinInverted(t) | Cell::Max(t) => *t = 0,
                Cell::Buckets(b) => b.values_mut().for_each(|c| *c = 0),
            }
        }
    }
}

/// The value `min()` prints for a stored `0xffffffff - v` (bpftrace's `min_value`: 0 stays 0).
pub fn min_shown(stored: i64) -> i64 {
    if stored == 0 {
        0
    } else {
        0xffff_ffff_i64.wrapping_sub(stored)
    }
}

/// bpftrace 0.17's `log2()` bucket of `hist()`.
pub fn log2_bucket(v: i64) -> u64 {
    if v < 0 {
        return 0;
    }
    if v == 0 {
        return 1;
    }
    let mut n = v as u64;
    let mut result = 2;
    for i in (0..=4).rev() {
        let shift = u64::from(n as i64 >= 1i64 << (1 << i)) << i;
        n >>= shift;
        result += shift;
    }
    result
}

/// bpftrace 0.17's `linear()` bucket of `lhist()`.
pub fn linear_bucket(v: i64, lin: Linear) -> u64 {
    let step = (lin.step as u64).max(1);
    if v < lin.min {
        0
    } else if v > lin.max {
        1 + (lin.max.wrapping_sub(lin.min) as u64) / step
    } else {
        1 + (v.wrapping_sub(lin.min) as u64) / step
    }
}

/// The integer type `sum()`'s total has in a map of `kind` (for printing).
pub fn sum_type(kind: MapKind) -> IntType {
    match kind {
        MapKind::Sum { signed: false } => IntType::U64,
        _ => IntType::I64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(v: i64) -> Key {
        vec![Value::int(v)]
    }

    #[test]
    fn log2_buckets_as_bpftrace() {
        assert_eq!(log2_bucket(-1), 0);
        assert_eq!(log2_bucket(0), 1);
        assert_eq!(log2_bucket(1), 2);
        assert_eq!(log2_bucket(2), 3);
        assert_eq!(log2_bucket(3), 3);
        assert_eq!(log2_bucket(1024), 12);
        assert_eq!(log2_bucket((1 << 31) - 1), 32);
        // bpftrace's five shift steps stop at 31: everything from 2^31 up is one bucket, `[2G, 4G)`.
        assert_eq!(log2_bucket(1 << 31), 33);
        assert_eq!(log2_bucket(5_000_000_000), 33);
        assert_eq!(log2_bucket(i64::MAX), 33);
    }

    #[test]
    fn linear_buckets_as_bpftrace() {
        let lin = Linear {
            min: 0,
            max: 100,
            step: 10,
        };
        assert_eq!(linear_bucket(-5, lin), 0);
        assert_eq!(linear_bucket(0, lin), 1);
        assert_eq!(linear_bucket(55, lin), 6);
        assert_eq!(linear_bucket(100, lin), 11);
        assert_eq!(linear_bucket(1000, lin), 11);
        let odd = Linear {
            min: 0,
            max: 10,
            step: 3,
        };
        assert_eq!(linear_bucket(9, odd), 4);
        assert_eq!(linear_bucket(4, odd), 2);
    }

    #[test]
    fn full_map_drops_new_entries_silently() {
        // BPFTRACE_MAP_KEYS_MAX=3 bpftrace -e 'BEGIN { @c[1]=count(); @c[2]=count(); @c[3]=count();
        //   @c[4]=count(); @c[1]=count(); ... }' printed @c[2]: 1, @c[3]: 1, @c[1]: 2.
        let mut c = Map::new("@c", MapKind::Count, true, 3);
        for i in [1, 2, 3] {
            assert_eq!(c.count(&k(i)).unwrap(), Update::Stored);
        }
        assert_eq!(c.count(&k(4)).unwrap(), Update::Full);
        assert_eq!(c.count(&k(1)).unwrap(), Update::Stored);
        assert_eq!(c.get(&k(1)), Some(Value::uint(2)));
        assert_eq!(c.get(&k(4)), None);
        // Histogram buckets are entries: hist(1), hist(2), hist(4) fill 3; hist(8) is dropped, hist(1) counts.
        let mut h = Map::new("@h", MapKind::Hist, false, 3);
        for v in [1, 2, 4, 8, 1] {
            h.hist(&[], Int::i64(v)).unwrap();
        }
        let (_, Cell::Buckets(b)) = h.entries()[0] else {
            panic!()
        };
        assert_eq!(
            b.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>(),
            vec![(2, 2), (3, 1), (4, 1)]
        );
        // avg takes two entries per key: @a[2] keeps its count but not its total.
        let mut a = Map::new("@a", MapKind::Avg, true, 3);
        for (key, v) in [(1, 1), (2, 5), (3, 7)] {
            a.avg(&k(key), Int::i64(v)).unwrap();
        }
        assert_eq!(a.len(), 2);
        let (_, Cell::Buckets(b2)) = a.entries()[1] else {
            panic!()
        };
        assert_eq!(b2.len(), 1);
        // Deleting frees the entries.
        a.delete(&k(1));
        assert_eq!(a.avg(&k(3), Int::i64(7)).unwrap(), Update::Stored);
    }

    #[test]
    fn min_and_max_keep_bpftrace_quirks() {
        let mut mx = Map::new("@mx", MapKind::Max, false, 10);
        mx.max(&[], Int::i64(-5)).unwrap();
        assert!(
            mx.is_empty(),
            "max(-5) alone stores nothing in bpftrace 0.17"
        );
        mx.max(&[], Int::i64(9)).unwrap();
        mx.max(&[], Int::i64(3)).unwrap();
        assert_eq!(mx.get(&[]), Some(Value::int(9)));
        let mut mn = Map::new("@mn", MapKind::Min, false, 10);
        mn.min(&[], Int::i64(5)).unwrap();
        mn.min(&[], Int::i64(-2)).unwrap();
        mn.min(&[], Int::i64(7)).unwrap();
        assert_eq!(mn.get(&[]), Some(Value::int(-2)));
        let mut big = Map::new("@b", MapKind::Min, false, 10);
        big.min(&[], Int::i64(0x1_0000_0000)).unwrap();
        assert!(big.is_empty());
        assert_eq!(min_shown(0), 0);
    }

    #[test]
    fn keyless_count_is_an_array() {
        let mut c = Map::new("@n", MapKind::Count, false, 4096);
        assert_eq!(c.get(&[]), Some(Value::uint(0)));
        c.count(&[]).unwrap();
        c.delete(&[]);
        assert_eq!(c.get(&[]), Some(Value::uint(0)));
        c.count(&[]).unwrap();
        c.clear();
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn zero_clear_and_kinds() {
        let mut s = Map::new("@s", MapKind::Sum { signed: true }, true, 10);
        s.sum(&k(1), Int::i64(-3)).unwrap();
        s.sum(&k(1), Int::i64(10)).unwrap();
        assert_eq!(s.get(&k(1)), Some(Value::int(7)));
        s.zero();
        assert_eq!(s.get(&k(1)), Some(Value::int(0)));
        s.clear();
        assert!(s.is_empty());
        assert!(s.count(&k(1)).is_err());
        let mut p = Map::new("@p", MapKind::Plain, true, 10);
        p.set(&k(2), Value::str("x")).unwrap();
        p.set(&k(1), Value::str("y")).unwrap();
        p.set(&k(2), Value::str("z")).unwrap();
        let keys: Vec<_> = p
            .entries()
            .into_iter()
            .map(|(key, _)| key.clone())
            .collect();
        assert_eq!(keys, vec![k(2), k(1)]);
        assert_eq!(p.get(&k(2)), Some(Value::str("z")));
    }
}
