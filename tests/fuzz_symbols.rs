//! Deterministic fuzzing of the symbol readers: mutated ELF files (built from a `gcc -g -O1` fixture), perf maps
//! and kallsyms texts go through the calls of the fuzz targets (`fuzz/src/lib.rs`, included below). Each gives
//! a result or a one-line error naming the file, never a panic, and memory stays bounded.
//!
//! A failing input prints its seed and index; `RPROF_FUZZ_SEED=SEED RPROF_FUZZ_INDEX=INDEX cargo test --test
//! fuzz_symbols` runs that one input alone. This file holds one test, so that the peak RSS is its own.
mod common;

#[allow(dead_code)]
#[path = "../fuzz/src/lib.rs"]
mod calls;

use object::{Object, ObjectSection};
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Instant;

/// The default seed of the PRNG.
const SEED: u64 = 0x5eed_f022_e1f0_2025;
/// How many mutated ELF files, perf maps and kallsyms texts.
const ELF_INPUTS: usize = 1000;
const TEXT_INPUTS: usize = 300;
/// The peak RSS allowed, in bytes.
const RSS_LIMIT: u64 = 200 << 20;
/// How much the peak virtual size may grow while the inputs run, in bytes: reserving what a corrupt size
/// field says (gigabytes) shows there even when the pages are never touched. Each thread's malloc arena
/// reserves 64 MB, and glibc makes up to 8 per core.
const VM_GROWTH_LIMIT: u64 = 1536 << 20;

/// xorshift64: small, seeded, and the same on every machine.
struct Rng(u64);

impl Rng {
    /// The generator of input `index` under `seed` (each input reproduces on its own).
    fn for_input(seed: u64, index: usize) -> Rng {
        let mut rng = Rng((seed ^ (index as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1);
        rng.next();
        rng
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A number in `0..n` (n > 0).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Values that corrupt size, offset and count fields the most.
const HUGE: [u64; 9] = [
    0xffff_ffff_ffff_ffff,
    0x7fff_ffff_ffff_ffff,
    0x8000_0000_0000_0000,
    0xffff_ffff,
    0x7fff_ffff,
    0x8000_0000,
    0xffff,
    0x1_0000_0000,
    0,
];

/// Where mutations aim in a seed ELF file.
struct Shape {
    /// Parts of the file with weights: the ELF header, the program and section header tables, the `.debug_*`
    /// sections (and their first bytes apart), the symbol and string tables, and the whole file.
    regions: Vec<(Range<usize>, usize)>,
    /// Groups of fields (offset, width) that hold sizes, offsets, addresses and counts: the ELF header's, each
    /// program header's, each section header's, each symbol's, and the first unit header or compression
    /// header of each `.debug_*` section.
    fields: Vec<Vec<(usize, usize)>>,
}

impl Shape {
    fn of(data: &[u8]) -> Shape {
        let file = object::File::parse(data).expect("the seed is ELF");
        let u16_at = |at: usize| usize::from(u16::from_le_bytes([data[at], data[at + 1]]));
        let u64_at = |at: usize| u64::from_le_bytes(data[at..at + 8].try_into().unwrap()) as usize;
        let (phoff, shoff) = (u64_at(0x20), u64_at(0x28));
        let (phentsize, phnum) = (u16_at(0x36), u16_at(0x38));
        let (shentsize, shnum) = (u16_at(0x3a), u16_at(0x3c));
        let entries = |table: usize, size: usize, count: usize, fields: &[(usize, usize)]| {
            let fields = fields.iter().copied();
            (0..count)
                .flat_map(|i| {
                    fields
                        .clone()
                        .map(move |(at, w)| (table + i * size + at, w))
                })
                .collect::<Vec<_>>()
        };
        let header = vec![
            (0x20, 8),
            (0x28, 8),
            (0x36, 2),
            (0x38, 2),
            (0x3a, 2),
            (0x3c, 2),
            (0x3e, 2),
        ];
        // p_type, p_flags, p_offset, p_vaddr, p_filesz, p_memsz, p_align
        let phdr = [(0, 4), (4, 4), (8, 8), (16, 8), (32, 8), (40, 8), (48, 8)];
        // sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size, sh_link, sh_info, sh_entsize
        let shdr = [
            (0, 4),
            (4, 4),
            (8, 8),
            (16, 8),
            (24, 8),
            (32, 8),
            (40, 4),
            (44, 4),
            (56, 8),
        ];
        let mut fields = vec![
            header,
            entries(phoff, phentsize, phnum, &phdr),
            entries(shoff, shentsize, shnum, &shdr),
        ];
        let mut regions = vec![
            (0..64, 3),
            (phoff..phoff + phentsize * phnum, 2),
            (shoff..shoff + shentsize * shnum, 4),
            (0..data.len(), 1),
        ];
        let mut debug_heads = Vec::new();
        for section in file.sections() {
            let Some((start, size)) = section.file_range() else {
                continue;
            };
            let name = section.name().unwrap_or("");
            let (start, size) = (start as usize, size as usize);
            let weight = if name.starts_with(".debug_") {
                // A compression header (ch_size at 8), or the first unit's length.
                debug_heads.extend([(start, 4), (start + 8, 8)]);
                regions.push((start..start + size.min(24), 2));
                2
            } else if matches!(
                name,
                ".symtab" | ".strtab" | ".dynsym" | ".dynstr" | ".note.gnu.build-id" | ".rela.plt"
            ) {
                if name == ".symtab" {
                    // st_name, st_value, st_size
                    fields.push(entries(start, 24, size / 24, &[(0, 4), (8, 8), (16, 8)]));
                }
                1
            } else {
                continue;
            };
            regions.push((start..start + size, weight));
        }
        fields.push(debug_heads);
        regions.retain(|(r, _)| r.start < r.end && r.end <= data.len());
        for group in &mut fields {
            group.retain(|&(at, width)| at + width <= data.len());
        }
        fields.retain(|group| !group.is_empty());
        Shape { regions, fields }
    }

    /// A position in one of the regions, chosen by weight.
    fn position(&self, rng: &mut Rng) -> usize {
        let total: usize = self.regions.iter().map(|(_, w)| w).sum();
        let mut n = rng.below(total);
        for (range, weight) in &self.regions {
            if n < *weight {
                return range.start + rng.below(range.len());
            }
            n -= weight;
        }
        unreachable!()
    }
}

/// A mutated copy of `seed`: one to four byte flips, huge values at aligned places or in known fields (all
/// bits set a third of the time there), and one time in eight a truncation.
fn mutate_elf(rng: &mut Rng, seed: &[u8], shape: &Shape) -> Vec<u8> {
    let mut data = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        let (at, width, value) = match rng.below(3) {
            0 => {
                let at = shape.position(rng);
                data[at] ^= 1 << rng.below(8);
                continue;
            }
            1 => {
                // A 2-, 4- or 8-byte field at a 2-, 4- or 8-aligned place.
                let width = *rng.pick(&[2, 4, 8, 8]);
                let at = (shape.position(rng) & !(width - 1)).min(data.len() - width);
                (at, width, *rng.pick(&HUGE))
            }
            _ => {
                let group = rng.pick(&shape.fields);
                let &(at, width) = rng.pick(group);
                let value = if rng.below(3) == 0 {
                    u64::MAX
                } else {
                    *rng.pick(&HUGE)
                };
                (at, width, value)
            }
        };
        data[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
    }
    if rng.below(8) == 0 {
        data.truncate(rng.below(data.len()));
    }
    data
}

/// A mutated copy of a text: byte flips, inserted tokens, cut or repeated pieces.
fn mutate_text(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    const TOKENS: [&[u8]; 12] = [
        b"\n",
        b" ",
        b"\t",
        b"0x",
        b"ffffffffffffffff",
        b"10000000000000000",
        b"0000000000000000 T zero\n",
        b"\t[module]",
        b"\xff\xfe",
        b"",
        b"ffffffffffffffff ffffffffffffffff x\n",
        b"T",
    ];
    let mut data = seed.to_vec();
    for _ in 0..1 + rng.below(6) {
        let at = rng.below(data.len() + 1);
        match rng.below(4) {
            0 if at < data.len() => data[at] = rng.next() as u8,
            1 => {
                let token = rng.pick(&TOKENS);
                data.splice(at..at, token.iter().copied());
            }
            2 => {
                let end = (at + rng.below(64)).min(data.len());
                data.drain(at..end);
            }
            _ => {
                let end = (at + rng.below(256)).min(data.len());
                let piece = data[at..end].to_vec();
                let to = rng.below(data.len() + 1);
                data.splice(to..to, piece);
            }
        }
    }
    data
}

/// A kallsyms excerpt: core text and data, per-CPU zero addresses, aliases, a module and a BPF program.
const KALLSYMS: &str = "0000000000000000 A fixed_percpu_data
0000000000001000 A cpu_debug_store
ffffffff81000000 T _stext
ffffffff81000000 T _text
ffffffff81000040 T startup_64
ffffffff81000100 t verify_cpu
ffffffff81001000 T do_one_initcall
ffffffff81001200 t __pi___x86_indirect_thunk_rax
ffffffff81001200 T __x86_indirect_thunk_rax
ffffffff81002000 D some_data
ffffffff81003000 T ksys_write
ffffffff81003400 W weak_fn
ffffffff82000000 T _etext
ffffffffc0001000 t mod_fn\t[some_module]
ffffffffc0001100 T mod_init\t[some_module]
ffffffffc0002000 t bpf_prog_6deef7357e7b4530\t[bpf]
";

/// A perf map as JITs write it.
const PERF_MAP: &str = "7f0000001000 100 LazyCompile:*foo bar.js:1
0x7f0000002000 0x20 stub
7f0000001000 80 newer
7f0000003000 1000 _ZN4core3fmt5write17h0123456789abcdefE
7f0000004000 40 Interpreter
ffffffffffffff00 ff last
";

/// The seed ELF files, each with where mutations aim in it: `sym_inline.c` built with `gcc -g -O1`, the same
/// with compressed DWARF (SHF_COMPRESSED sections, whose headers give a size to allocate), and its debug file
/// (`objcopy --only-keep-debug`), which is read through `.gnu_debuglink` for `stripped`.
struct Seeds {
    plain: (Vec<u8>, Shape),
    compressed: (Vec<u8>, Shape),
    debug: (Vec<u8>, Shape),
    /// Where the (mutated) debug file goes, next to the stripped binary that links to it.
    debug_path: PathBuf,
    stripped: PathBuf,
}

impl Seeds {
    fn build(dir: &Path) -> Seeds {
        let build = |name: &str, extra: &[&str]| {
            let out = dir.join(name);
            std::fs::create_dir(&out).unwrap();
            let mut flags = vec!["-g", "-O1"];
            flags.extend_from_slice(extra);
            common::build_c(&out, "sym_inline.c", &flags)
        };
        let with_shape = |path: &Path| {
            let data = std::fs::read(path).unwrap();
            let shape = Shape::of(&data);
            (data, shape)
        };
        let plain = build("plain", &[]);
        let compressed = build("gz", &["-gz=zlib"]);
        let stripped = build("debug", &[]);
        let debug_path = dir.join("debug/sym_inline.debug");
        let tool = |args: &[&OsStr]| {
            let st = Command::new(args[0]).args(&args[1..]).status().unwrap();
            assert!(st.success(), "{args:?}");
        };
        let debug_os = debug_path.as_os_str();
        tool(&[
            "objcopy".as_ref(),
            "--only-keep-debug".as_ref(),
            stripped.as_ref(),
            debug_os,
        ]);
        tool(&["strip".as_ref(), stripped.as_ref()]);
        let link = format!("--add-gnu-debuglink={}", debug_path.display());
        tool(&["objcopy".as_ref(), link.as_ref(), stripped.as_ref()]);
        Seeds {
            plain: with_shape(&plain),
            compressed: with_shape(&compressed),
            debug: with_shape(&debug_path),
            debug_path,
            stripped,
        }
    }
}

/// Panics seen by the hook, on any thread (binaries are opened on threads of the symbolizer's own).
static PANICS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Run one input; record a panic on this thread or another.
fn run(failures: &mut Vec<String>, what: &str, seed: u64, index: usize, input: impl FnOnce()) {
    let before = PANICS.lock().unwrap().len();
    let caught = catch_unwind(AssertUnwindSafe(input)).is_err();
    let panics = PANICS.lock().unwrap();
    if caught || panics.len() > before {
        failures.push(format!(
            "{what} input: seed {seed:#x} index {index}: {}",
            panics[before..].join(" | ")
        ));
    }
}

/// The seed and, with `RPROF_FUZZ_INDEX`, the one input to run.
fn seed_and_only() -> (u64, Option<usize>) {
    let seed = std::env::var("RPROF_FUZZ_SEED")
        .ok()
        .map(|s| {
            u64::from_str_radix(s.trim_start_matches("0x"), 16).expect("RPROF_FUZZ_SEED in hex")
        })
        .unwrap_or(SEED);
    let only = std::env::var("RPROF_FUZZ_INDEX")
        .ok()
        .map(|s| s.parse().expect("RPROF_FUZZ_INDEX"));
    (seed, only)
}

/// Check that 1,000 mutated ELF files and a few hundred mutated perf maps and kallsyms texts each give a result
/// or a one-line error naming the file, never a panic, with a peak RSS under 200 MB.
#[test]
fn mutated_inputs_never_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().canonicalize().unwrap();
    let seeds = Seeds::build(&dir);
    let (seed, only) = seed_and_only();
    let wanted = |index: usize| only.is_none_or(|o| o == index);

    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(info.to_string());
        default_hook(info);
    }));

    let vm_before = vm_peak();
    let started = Instant::now();
    let mut failures = Vec::new();
    // Kinds of error message (the message without the file's path and the details in parentheses): how many
    // inputs gave one, and an example.
    let mut kinds: BTreeMap<String, (usize, String)> = BTreeMap::new();
    let mut bad_messages = Vec::new();
    let (mut count, mut clean) = (0, 0);
    for index in (0..ELF_INPUTS).filter(|&i| wanted(i)) {
        let mut rng = Rng::for_input(seed, index);
        // Half from the plain seed, two in ten from the compressed one, three in ten as a debug file.
        let (data, written, path) = match rng.below(10) {
            0..5 => (&seeds.plain, dir.join(format!("bin-{index}")), None),
            5..7 => (&seeds.compressed, dir.join(format!("bin-{index}")), None),
            _ => (
                &seeds.debug,
                seeds.debug_path.clone(),
                Some(&seeds.stripped),
            ),
        };
        let data = mutate_elf(&mut rng, &data.0, &data.1);
        // A new file each time (never rewrite a file a symbolizer may have mapped).
        let _ = std::fs::remove_file(&written);
        std::fs::write(&written, &data).unwrap();
        let path = path.unwrap_or(&written);
        run(&mut failures, "ELF", seed, index, || {
            let mut messages = calls::elf(path);
            clean += usize::from(messages.is_empty());
            messages.dedup();
            for message in messages {
                check_message(&message, path, index, &mut bad_messages);
                let example = message.replace(path.to_str().unwrap(), "BIN");
                let kind = example.split(" (").next().unwrap_or_default().to_string();
                kinds.entry(kind).or_insert((0, example)).0 += 1;
            }
        });
        std::fs::remove_file(&written).unwrap();
        count += 1;
    }
    let elf_time = started.elapsed();
    let elf_count = count;
    for index in (0..TEXT_INPUTS).filter(|&i| wanted(ELF_INPUTS + i)) {
        let mut rng = Rng::for_input(seed, ELF_INPUTS + index);
        let map = mutate_text(&mut rng, PERF_MAP.as_bytes());
        run(&mut failures, "perf map", seed, ELF_INPUTS + index, || {
            calls::perf_map(&map)
        });
        let kallsyms = mutate_text(&mut rng, KALLSYMS.as_bytes());
        run(&mut failures, "kallsyms", seed, ELF_INPUTS + index, || {
            calls::kallsyms(&kallsyms)
        });
        count += 2;
    }
    let elapsed = started.elapsed();
    let rusage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF).unwrap();
    let peak = rusage.max_rss() as u64 * 1024;
    let vm_growth = vm_peak() - vm_before;

    let mut by_count: Vec<_> = kinds.into_values().collect();
    by_count.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    println!(
        "{clean} of {elf_count} mutated ELF files read without error; {} kinds of error, the most frequent:",
        by_count.len()
    );
    for (n, example) in by_count.iter().take(12) {
        println!("  {n:4} x {example}");
    }
    println!(
        "{count} inputs (ELF {:.1} s) in {:.1} s, seed {seed:#x}, peak RSS {} MB, peak virtual size +{} MB",
        elf_time.as_secs_f64(),
        elapsed.as_secs_f64(),
        peak >> 20,
        vm_growth >> 20
    );
    assert!(
        failures.is_empty(),
        "{} inputs panicked:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        bad_messages.is_empty(),
        "errors that do not name the file on one line:\n{}",
        bad_messages.join("\n")
    );
    assert!(
        peak < RSS_LIMIT,
        "peak RSS {} MB, over {} MB",
        peak >> 20,
        RSS_LIMIT >> 20
    );
    assert!(
        vm_growth < VM_GROWTH_LIMIT,
        "the peak virtual size grew by {} MB: something reserved what a corrupt size said",
        vm_growth >> 20
    );
}

/// This process's peak virtual size (VmPeak), in bytes.
fn vm_peak() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmPeak:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// An error must name the file and fit on one line.
fn check_message(message: &str, path: &Path, index: usize, bad: &mut Vec<String>) {
    if !message.contains(path.to_str().unwrap()) || message.contains('\n') {
        bad.push(format!("index {index}: {message:?}"));
    }
}
