//! 10,000 mutated recordings (byte flips, truncations, huge size and count fields) through the recording
//! reader, and one in forty through all of `rprof report`'s loading (address spaces, symbols): every input gives
//! events or an error naming the file, never a panic, and the process's peak RSS stays under 200 MB (a corrupt
//! size field must not allocate gigabytes). The seeds: a finished rprof recording, the same recording cut
//! short as a killed recorder leaves it, and (with perf and root) a `perf record -g` file. Deterministic: a
//! failure prints the seed and index that reproduce it. `cargo-fuzz` targets for the same readers are in
//! `fuzz/`.
mod recording_common;

use recording_common::*;
use rprof::report::{self, Filter};
use rprof::symbols::SymbolizerOptions;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::Instant;

const MUTATIONS: usize = 10_000;
/// One input in this many also goes through `report::load`.
const REPORT_EVERY: usize = 40;
const PEAK_RSS_LIMIT_KIB: i64 = 200 * 1024;

/// A deterministic xorshift64 generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Values a corrupt size or count field takes.
const HUGE: [u64; 8] = [
    u64::MAX,
    1 << 63,
    1 << 40,
    0xffff_ffff,
    0x7fff_ffff,
    0x1000_0000,
    0xffff,
    0,
];

/// The file offsets of the record headers in the data section of `bytes` (a well-formed seed).
fn record_offsets(bytes: &[u8]) -> Vec<usize> {
    let word = |i: usize| u64::from_le_bytes(bytes[8 + 8 * i..16 + 8 * i].try_into().unwrap());
    let (start, size) = (word(4) as usize, word(5) as usize);
    let end = if size == 0 { bytes.len() } else { start + size };
    let mut at = start;
    let mut out = Vec::new();
    while at + 8 <= end.min(bytes.len()) {
        out.push(at);
        let len = u16::from_le_bytes([bytes[at + 6], bytes[at + 7]]) as usize;
        if len < 8 {
            break;
        }
        at += len;
    }
    out
}

/// One mutation of `bytes` in place (or a truncation). `records` are the seed's record offsets; `data_end`
/// the seed's end of the data section.
fn mutate(bytes: &mut Vec<u8>, records: &[usize], data_end: usize, rng: &mut Rng) {
    let len = bytes.len();
    // Record offsets that are still inside the (maybe already truncated) file.
    let records: Vec<usize> = records.iter().copied().filter(|&r| r + 16 <= len).collect();
    match rng.below(6) {
        // Flip one to eight bytes anywhere.
        0 => {
            for _ in 0..1 + rng.below(8) {
                let at = rng.below(len);
                bytes[at] ^= (rng.next() % 255 + 1) as u8;
            }
        }
        // Cut the file short.
        1 => bytes.truncate(rng.below(len)),
        // A record's size field (u16 at +6).
        2 if !records.is_empty() => {
            let at = records[rng.below(records.len())] + 6;
            let v = HUGE[rng.below(HUGE.len())] as u16;
            bytes[at..at + 2].copy_from_slice(&v.to_le_bytes());
        }
        // A u32 inside a record body (callchain counts, string and stack sizes, pids).
        3 if !records.is_empty() => {
            let rec = records[rng.below(records.len())];
            let at = (rec + 8 + 4 * rng.below(16)).min(len.saturating_sub(4));
            let v = HUGE[rng.below(HUGE.len())] as u32;
            bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
        }
        // A u64 inside a record body (callchain lengths, stack dump sizes, addresses).
        4 if !records.is_empty() => {
            let rec = records[rng.below(records.len())];
            let at = (rec + 8 + 8 * rng.below(12)).min(len.saturating_sub(8));
            let v = HUGE[rng.below(HUGE.len())];
            bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
        // A u64 of the header, the ids, the attrs or the feature sections (offsets, sizes, counts).
        _ => {
            let meta_len = records.first().copied().unwrap_or(len).min(len);
            let tail = len.saturating_sub(data_end.min(len));
            let r = rng.below(meta_len + tail);
            let at = if r < meta_len {
                r
            } else {
                data_end + r - meta_len
            };
            let at = (at & !7).min(len.saturating_sub(8));
            let v = HUGE[rng.below(HUGE.len())];
            bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
    }
}

/// Peak RSS of this process so far, in KiB.
fn peak_rss_kib() -> i64 {
    nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
        .map(|u| u.max_rss())
        .unwrap_or(0)
}

/// Check every mutated input: no panic, errors name the file.
fn run_seed(name: &str, seed_bytes: &[u8], dir: &Path, seed: u64, count: usize) -> usize {
    let records = record_offsets(seed_bytes);
    let data_end = records.last().map_or(seed_bytes.len(), |&r| {
        r + u16::from_le_bytes([seed_bytes[r + 6], seed_bytes[r + 7]]) as usize
    });
    let mut rng = Rng(seed);
    let path = dir.join(format!("{name}.data"));
    let mut errors = 0;
    for i in 0..count {
        let mut bytes = seed_bytes.to_vec();
        for _ in 0..1 + rng.below(3) {
            if bytes.len() < 104 {
                break;
            }
            mutate(&mut bytes, &records, data_end, &mut rng);
        }
        std::fs::write(&path, &bytes).unwrap();
        let what = format!("{name} input {i} (seed {seed:#x})");
        let (_, err) = catch_unwind(AssertUnwindSafe(|| read_all(&path)))
            .unwrap_or_else(|_| panic!("the reader panicked on {what}"));
        if let Some(e) = err {
            errors += 1;
            let msg = e.to_string();
            assert!(
                msg.contains(&path.display().to_string()) && !msg.contains('\n'),
                "{what}: the error must name the file on one line: {msg}"
            );
        }
        if i % REPORT_EVERY == 0 {
            let opts = SymbolizerOptions::default();
            catch_unwind(AssertUnwindSafe(|| {
                let _ = report::load(&path, &Filter::default(), opts);
            }))
            .unwrap_or_else(|_| panic!("report::load panicked on {what}"));
        }
    }
    errors
}

/// Check 10,000 mutated recordings from three seeds: no panic, errors name the file on one line, peak RSS
/// under 200 MB.
#[test]
fn mutated_recordings_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let binary = build_spin(dir.path());
    let finished = dir.path().join("seed.data");
    write_spin_recording(&finished, &binary, 40).unwrap();
    let finished = std::fs::read(&finished).unwrap();
    // As a killed recorder leaves it: data size 0, no feature bits, no feature sections.
    let mut unfinished = finished.clone();
    let data_end = {
        let w = |i: usize| u64::from_le_bytes(finished[8 + 8 * i..16 + 8 * i].try_into().unwrap());
        (w(4) + w(5)) as usize
    };
    unfinished.truncate(data_end);
    unfinished[48..56].fill(0);
    unfinished[72..104].fill(0);
    let mut seeds = vec![("finished", finished), ("unfinished", unfinished)];
    let perf_seed = dir.path().join("perf.data");
    if require_privileged() || nix::unistd::geteuid().is_root() {
        if perf_available("mutated_recordings_never_panic (perf seed)") {
            perf_record_spin(&binary, &perf_seed, 60);
            seeds.push(("perf", std::fs::read(&perf_seed).unwrap()));
        }
    } else {
        eprintln!("mutated_recordings_never_panic: no perf seed (needs root)");
    }
    let start = Instant::now();
    let per_seed = MUTATIONS / seeds.len();
    let mut errors = 0;
    for (n, (name, bytes)) in seeds.iter().enumerate() {
        let count = if n + 1 == seeds.len() {
            MUTATIONS - per_seed * n
        } else {
            per_seed
        };
        errors += run_seed(name, bytes, dir.path(), 0x5eed_0000 + n as u64, count);
    }
    let peak = peak_rss_kib();
    eprintln!(
        "{MUTATIONS} mutated recordings ({} seeds) in {:.1?}: {errors} gave an error; peak RSS {} MiB",
        seeds.len(),
        start.elapsed(),
        peak / 1024
    );
    assert!(
        peak < PEAK_RSS_LIMIT_KIB,
        "peak RSS {} MiB, over 200 MiB",
        peak / 1024
    );
}
