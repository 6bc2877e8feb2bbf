//! DWARF unwinding on real samples: fixtures are built here, recorded with the installed `perf record
//! --call-graph dwarf`, and the recording (REGS_USER + STACK_USER samples, MMAP2, FORK, EXIT) is fed into
//! `DwarfUnwinder`. Frames are symbolized with a small nearest-symbol lookup over the ELF symbol tables.
mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use linux_perf_data::{PerfFileReader, PerfFileRecord};
use linux_perf_event_reader::constants::{PERF_REG_X86_BP, PERF_REG_X86_IP, PERF_REG_X86_SP};
use linux_perf_event_reader::EventRecord;
use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};
use rprof::process::{AddressSpaces, TaskEvent};
use rprof::unwind::dwarf::{DwarfUnwinder, UnwindOutcome, UserRegs};

/// One event of a perf recording, in file order.
enum Event {
    /// A change of a process's mappings (MMAP, MMAP2, COMM exec, FORK, EXIT).
    Task(TaskEvent),
    Sample {
        pid: u32,
        regs: UserRegs,
        stack: Vec<u8>,
        dyn_size: u64,
    },
}

/// One unwound sample.
struct Unwound {
    pid: u32,
    outcome: UnwindOutcome,
    frames: Vec<u64>,
}

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

fn run_ok(cmd: &mut Command) {
    let out = cmd.output().expect("run the compiler");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Build a C fixture without frame pointers.
fn build_c(dir: &Path, name: &str) -> PathBuf {
    let exe = dir.join(name);
    run_ok(
        Command::new("gcc")
            .args(["-O2", "-g", "-fomit-frame-pointer", "-o"])
            .arg(&exe)
            .arg(fixtures_dir().join(format!("{name}.c"))),
    );
    exe
}

/// Record `exe args` with `perf record --call-graph dwarf,SIZE`. `None` (after printing why) when perf lacks the
/// privilege and RPROF_REQUIRE_PRIVILEGED is not set.
fn record(dir: &Path, exe: &Path, args: &[&str], stack_size: u32) -> Option<Vec<Event>> {
    let data = dir.join(format!(
        "{}-{stack_size}.data",
        exe.file_name().unwrap().to_string_lossy()
    ));
    let out = Command::new("perf")
        .args(["record", "-q", "-e", "cpu-clock", "-F", "999"])
        .arg(format!("--call-graph=dwarf,{stack_size}"))
        .arg("-o")
        .arg(&data)
        .arg("--")
        .arg(exe)
        .args(args)
        .output()
        .expect("run perf (is the `perf` tool installed?)");
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let privilege = stderr.contains("perf_event_paranoid")
            || stderr.contains("Permission denied")
            || stderr.contains("Access to performance monitoring");
        if privilege {
            let why = format!(
                "perf record lacks the privilege to sample: {}",
                stderr.trim()
            );
            common::skip(&format!("unwind_dwarf on {}", exe.display()), &why);
            return None;
        }
        panic!("perf record failed: {stderr}");
    }
    Some(read_events(&data))
}

/// Read the MMAP/MMAP2/FORK/EXIT/SAMPLE events of a perf.data file.
fn read_events(path: &Path) -> Vec<Event> {
    let file = std::fs::File::open(path).expect("open perf.data");
    let PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = PerfFileReader::parse_file(std::io::BufReader::new(file)).expect("parse perf.data");
    let mut events = Vec::new();
    while let Some(record) = record_iter
        .next_record(&mut perf_file)
        .expect("read record")
    {
        let PerfFileRecord::EventRecord { record, .. } = record else {
            continue;
        };
        let record = record.parse().expect("parse record");
        if let Some(task) = TaskEvent::from_record(&record) {
            events.push(Event::Task(task));
            continue;
        }
        let EventRecord::Sample(s) = record else {
            continue;
        };
        let (Some(regs), Some((stack, dyn_size)), Some(pid)) = (s.user_regs, s.user_stack, s.pid)
        else {
            continue;
        };
        let (Some(ip), Some(sp), Some(bp)) = (
            regs.get(PERF_REG_X86_IP),
            regs.get(PERF_REG_X86_SP),
            regs.get(PERF_REG_X86_BP),
        ) else {
            continue;
        };
        events.push(Event::Sample {
            pid: pid as u32,
            regs: UserRegs { ip, sp, bp },
            stack: stack.as_slice().into_owned(),
            dyn_size,
        });
    }
    events
}

/// Feed the events into `unwinder`, as `rprof record` does online. Returns the unwound samples and the average
/// time of one unwind in microseconds.
fn replay(events: &[Event], unwinder: &mut DwarfUnwinder) -> (Vec<Unwound>, f64) {
    let mut unwound = Vec::new();
    let mut spaces = AddressSpaces::new();
    let mut spent = std::time::Duration::ZERO;
    for event in events {
        match event {
            Event::Task(task) => {
                if let TaskEvent::Exit { pid } = task {
                    unwinder.forget(*pid);
                }
                spaces.apply(task.clone());
            }
            Event::Sample {
                pid,
                regs,
                stack,
                dyn_size,
            } => {
                let mut frames = Vec::new();
                let t = Instant::now();
                let space = spaces.get(*pid);
                let outcome = unwinder.unwind(*pid, space, regs, stack, *dyn_size, &mut frames);
                spent += t.elapsed();
                unwound.push(Unwound {
                    pid: *pid,
                    outcome,
                    frames,
                });
            }
        }
    }
    let per_unwind = spent.as_secs_f64() * 1e6 / unwound.len().max(1) as f64;
    (unwound, per_unwind)
}

/// Nearest-symbol lookup over the mappings seen in a recording (test-only stand-in for the real symbolizer).
struct Symbols {
    /// pid -> (start, end, pgoff, path)
    maps: HashMap<u32, Vec<(u64, u64, u64, String)>>,
    files: HashMap<String, Option<FileSymbols>>,
}

struct FileSymbols {
    /// (file offset, size, vaddr) of PT_LOAD segments
    segments: Vec<(u64, u64, u64)>,
    /// (address, name) sorted by address
    symbols: Vec<(u64, String)>,
}

/// A symbolized frame: the file it is in and the nearest preceding symbol (demangled).
#[derive(Clone, Debug)]
struct Frame {
    path: String,
    name: String,
}

impl Symbols {
    fn new(events: &[Event]) -> Symbols {
        let mut maps: HashMap<u32, Vec<(u64, u64, u64, String)>> = HashMap::new();
        for event in events {
            match event {
                Event::Task(TaskEvent::Mmap { pid, mapping: m }) => maps
                    .entry(*pid)
                    .or_default()
                    .push((m.start, m.end, m.pgoff, m.path.to_string())),
                Event::Task(TaskEvent::Fork { parent, child }) => {
                    let inherited = maps.get(parent).cloned().unwrap_or_default();
                    maps.entry(*child).or_default().extend(inherited);
                }
                _ => {}
            }
        }
        Symbols {
            maps,
            files: HashMap::new(),
        }
    }

    fn load(path: &str) -> Option<FileSymbols> {
        let data = std::fs::read(path).ok()?;
        let obj = object::File::parse(&*data).ok()?;
        let segments = obj
            .segments()
            .map(|s| {
                let (offset, size) = s.file_range();
                (offset, size, s.address())
            })
            .collect();
        let mut symbols: Vec<(u64, String)> = obj
            .symbols()
            .chain(obj.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
            .filter_map(|s| {
                let name = s.name().ok()?;
                Some((s.address(), format!("{:#}", rustc_demangle::demangle(name))))
            })
            .collect();
        symbols.sort();
        Some(FileSymbols { segments, symbols })
    }

    /// Symbolize frame `index` of a stack (return addresses are looked up at address - 1).
    fn frame(&mut self, pid: u32, address: u64, index: usize) -> Frame {
        let lookup = if index == 0 { address } else { address - 1 };
        let unknown = |path: &str| Frame {
            path: path.to_string(),
            name: "?".to_string(),
        };
        let Some(&(start, _, pgoff, ref path)) = self
            .maps
            .get(&pid)
            .and_then(|maps| maps.iter().rev().find(|m| m.0 <= lookup && lookup < m.1))
        else {
            return unknown("?");
        };
        let path = path.clone();
        let file = self
            .files
            .entry(path.clone())
            .or_insert_with(|| Symbols::load(&path));
        let Some(file) = file else {
            return unknown(&path);
        };
        // The segment mapped at this page offset (an exact page match wins over a containing segment).
        let Some(&(offset, _, vaddr)) = file
            .segments
            .iter()
            .filter(|(off, size, _)| off & !0xfff <= pgoff && pgoff < off + size)
            .max_by_key(|(off, _, _)| (off & !0xfff == pgoff, *off))
        else {
            return unknown(&path);
        };
        let svma = lookup - start + pgoff + vaddr - offset;
        let i = file.symbols.partition_point(|(a, _)| *a <= svma);
        match i.checked_sub(1).map(|i| &file.symbols[i]) {
            Some((_, name)) => Frame {
                path,
                name: name.clone(),
            },
            None => unknown(&path),
        }
    }

    fn stack(&mut self, sample: &Unwound) -> Vec<Frame> {
        sample
            .frames
            .iter()
            .enumerate()
            .map(|(i, a)| self.frame(sample.pid, *a, i))
            .collect()
    }
}

fn show(stack: &[Frame]) -> String {
    stack
        .iter()
        .map(|f| f.name.as_str())
        .collect::<Vec<_>>()
        .join(" <- ")
}

/// Of the unwound samples whose stack `is_leaf` selects, how many `is_good` accepts, with up to 5 of the others
/// shown for the failure message.
struct Tally {
    leaf: usize,
    good: usize,
    bad: Vec<String>,
}

fn tally(
    unwound: &[Unwound],
    symbols: &mut Symbols,
    is_leaf: impl Fn(&[Frame]) -> bool,
    is_good: impl Fn(&Unwound, &[Frame]) -> bool,
) -> Tally {
    let mut t = Tally {
        leaf: 0,
        good: 0,
        bad: Vec::new(),
    };
    for sample in unwound {
        let stack = symbols.stack(sample);
        if !is_leaf(&stack) {
            continue;
        }
        t.leaf += 1;
        if is_good(sample, &stack) {
            t.good += 1;
        } else if t.bad.len() < 5 {
            t.bad
                .push(format!("{:?}: {}", sample.outcome, show(&stack)));
        }
    }
    t
}

/// True when the stack's leaf is named `name`.
fn leaf_is(stack: &[Frame], name: &str) -> bool {
    stack.first().is_some_and(|f| f.name == name)
}

/// Position of the first frame named `name` at or after `from`.
fn find(stack: &[Frame], name: &str, from: usize) -> Option<usize> {
    stack[from..]
        .iter()
        .position(|f| f.name == name)
        .map(|p| p + from)
}

/// Check that a C call tree built without frame pointers unwinds from hot_a through work_a to main (>= 95%),
/// and report how long one unwind takes.
#[test]
fn calltree_without_frame_pointers() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_c(dir.path(), "dw_calltree");
    let Some(events) = record(dir.path(), &exe, &["1000"], 16384) else {
        return;
    };
    let mut unwinder = DwarfUnwinder::new(vec![]);
    let (unwound, micros) = replay(&events, &mut unwinder);
    let mut symbols = Symbols::new(&events);
    let reaches_main = |stack: &[Frame]| {
        stack.get(1).is_some_and(|f| f.name == "work_a")
            && stack.get(2).is_some_and(|f| f.name == "main")
    };
    let Tally {
        leaf: hot_a,
        good,
        bad,
    } = tally(
        &unwound,
        &mut symbols,
        |s| leaf_is(s, "hot_a"),
        |_, s| reaches_main(s),
    );
    let complete = tally(
        &unwound,
        &mut symbols,
        |s| leaf_is(s, "hot_a"),
        |u, s| reaches_main(s) && u.outcome == UnwindOutcome::Complete,
    )
    .good;
    let hot_b = tally(&unwound, &mut symbols, |s| leaf_is(s, "hot_b"), |_, _| true).leaf;
    println!(
        "calltree: {} samples, hot_a {hot_a} (main<-work_a<-hot_a {good}, complete {complete}), hot_b {hot_b}",
        unwound.len()
    );
    // Again with the modules already cached (the first pass includes reading the unwind sections).
    let (_, warm_micros) = replay(&events, &mut unwinder);
    println!(
        "calltree: average unwind time {micros:.2} us (first pass), {warm_micros:.2} us (modules cached)"
    );
    assert!(hot_a >= 200, "too few hot_a samples: {hot_a}");
    assert!(
        good * 100 >= hot_a * 95,
        "only {good}/{hot_a} hot_a samples unwind to work_a <- main; e.g. {bad:#?}"
    );
    // The split is ~75/25 (same loop bodies, 3:1 iteration counts).
    let share = hot_a as f64 / (hot_a + hot_b) as f64;
    assert!(
        (0.65..0.85).contains(&share),
        "hot_a share {share:.2} is not ~0.75"
    );
}

/// Check that code without `.eh_frame` entries (built with `-fno-asynchronous-unwind-tables -g`) unwinds with
/// the `.debug_frame` of its separate debug file, found by build-id in a debug dir, and not without it.
#[test]
fn debug_frame_from_build_id_debug_file() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("dw_calltree_nounwind");
    run_ok(
        Command::new("gcc")
            .args([
                "-O2",
                "-g",
                "-fomit-frame-pointer",
                "-fno-asynchronous-unwind-tables",
                "-fno-unwind-tables",
                "-o",
            ])
            .arg(&exe)
            .arg(fixtures_dir().join("dw_calltree.c")),
    );
    // Split the debug info out into DEBUGDIR/.build-id/xx/rest.debug, as distributions do.
    let data = std::fs::read(&exe).unwrap();
    let build_id = object::File::parse(&*data)
        .unwrap()
        .build_id()
        .unwrap()
        .expect("gcc writes a build-id")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>();
    let debug_dir = dir.path().join("debug");
    let debug_file = debug_dir
        .join(".build-id")
        .join(&build_id[..2])
        .join(format!("{}.debug", &build_id[2..]));
    std::fs::create_dir_all(debug_file.parent().unwrap()).unwrap();
    run_ok(
        Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(&exe)
            .arg(&debug_file),
    );
    run_ok(Command::new("objcopy").arg("--strip-debug").arg(&exe));
    let stripped = std::fs::read(&exe).unwrap();
    assert!(object::File::parse(&*stripped)
        .unwrap()
        .section_by_name(".debug_frame")
        .is_none());

    let Some(events) = record(dir.path(), &exe, &["400"], 16384) else {
        return;
    };
    let mut symbols = Symbols::new(&events);
    let mut count = |debug_dirs: Vec<PathBuf>| {
        let (unwound, _) = replay(&events, &mut DwarfUnwinder::new(debug_dirs));
        let (mut leaf, mut good) = (0, 0);
        for sample in &unwound {
            let stack = symbols.stack(sample);
            if stack.first().map(|f| f.name.as_str()) == Some("hot_a") {
                leaf += 1;
                if stack.get(1).is_some_and(|f| f.name == "work_a")
                    && stack.get(2).is_some_and(|f| f.name == "main")
                {
                    good += 1;
                }
            }
        }
        (leaf, good)
    };
    let (leaf, with_debug) = count(vec![debug_dir.clone()]);
    let (_, without_debug) = count(vec![]);
    println!("debug file: hot_a {leaf}, unwound with the debug file {with_debug}, without {without_debug}");
    assert!(leaf >= 100, "too few hot_a samples: {leaf}");
    assert!(
        with_debug * 100 >= leaf * 95,
        "only {with_debug}/{leaf} hot_a samples unwind to main with the debug file"
    );
    assert!(
        without_debug * 100 <= leaf * 20,
        "{without_debug}/{leaf} unwound without the debug file: the test does not exercise it"
    );
}

/// Check that main -> qsort -> compare unwinds through glibc's frames (no frame pointers) to main (>= 90%).
#[test]
fn through_libc_qsort() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_c(dir.path(), "dw_qsort");
    let Some(events) = record(dir.path(), &exe, &["500"], 16384) else {
        return;
    };
    let mut unwinder = DwarfUnwinder::new(vec![]);
    let (unwound, micros) = replay(&events, &mut unwinder);
    let mut symbols = Symbols::new(&events);
    let Tally { leaf, good, bad } = tally(
        &unwound,
        &mut symbols,
        |s| leaf_is(s, "compare"),
        |_, stack| {
            find(stack, "main", 1).is_some_and(|m| {
                stack[1..m]
                    .iter()
                    .any(|f| f.path.contains("libc.so") || f.path.contains("libc-"))
            })
        },
    );
    println!(
        "qsort: {} samples, compare leaf {leaf}, through libc to main {good}, {micros:.2} us/unwind",
        unwound.len()
    );
    assert!(leaf >= 100, "too few compare samples: {leaf}");
    assert!(
        good * 100 >= leaf * 90,
        "only {good}/{leaf} compare samples reach main through libc; e.g. {bad:#?}"
    );
}

/// Check that a Rust release build without frame pointers unwinds from the generic hot loop to the crate's
/// main (>= 90%).
#[test]
fn rust_generics_without_frame_pointers() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("dw_generic");
    run_ok(
        Command::new("rustc")
            .args([
                "-C",
                "opt-level=2",
                "-C",
                "force-frame-pointers=no",
                "-C",
                "debuginfo=1",
                "-o",
            ])
            .arg(&exe)
            .arg(fixtures_dir().join("dw_generic.rs")),
    );
    let Some(events) = record(dir.path(), &exe, &["600"], 16384) else {
        return;
    };
    let mut unwinder = DwarfUnwinder::new(vec![]);
    let (unwound, micros) = replay(&events, &mut unwinder);
    let mut symbols = Symbols::new(&events);
    let Tally {
        leaf: hot,
        good,
        bad,
    } = tally(
        &unwound,
        &mut symbols,
        |s| {
            s.first()
                .is_some_and(|f| f.name.starts_with("dw_generic::spin"))
        },
        |_, stack| {
            let has = |prefix: &str| stack.iter().any(|f| f.name.starts_with(prefix));
            stack.iter().any(|f| f.name == "dw_generic::main")
                && has("dw_generic::inner")
                && has("dw_generic::outer")
        },
    );
    println!(
        "rust: {} samples, spin leaf {hot}, reach dw_generic::main {good}, {micros:.2} us/unwind",
        unwound.len()
    );
    assert!(hot >= 200, "too few spin samples: {hot}");
    assert!(
        good * 100 >= hot * 90,
        "only {good}/{hot} spin samples reach dw_generic::main; e.g. {bad:#?}"
    );
}

/// Check that a deep recursion recorded with a 1 KiB stack copy ends as Truncated for most samples, and that the
/// frames found before the end are right.
#[test]
fn small_stack_copy_is_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_c(dir.path(), "dw_recurse");
    let Some(events) = record(dir.path(), &exe, &["400"], 1024) else {
        return;
    };
    let mut unwinder = DwarfUnwinder::new(vec![]);
    let (unwound, _) = replay(&events, &mut unwinder);
    let mut symbols = Symbols::new(&events);
    let (mut leaf, mut truncated, mut recursing) = (0, 0, 0);
    for sample in &unwound {
        let stack = symbols.stack(sample);
        if stack.first().map(|f| f.name.as_str()) != Some("spin") {
            continue;
        }
        leaf += 1;
        if sample.outcome == UnwindOutcome::Truncated {
            truncated += 1;
        }
        if stack.len() >= 4 && stack[1..4].iter().all(|f| f.name == "recurse") {
            recursing += 1;
        }
    }
    println!("recurse: spin leaf {leaf}, truncated {truncated}, with 3 recurse frames {recursing}");
    assert!(leaf >= 100, "too few spin samples: {leaf}");
    assert!(
        truncated * 100 >= leaf * 90,
        "only {truncated}/{leaf} samples are Truncated"
    );
    assert!(
        recursing * 100 >= leaf * 90,
        "only {recursing}/{leaf} samples show spin <- recurse x3"
    );
}

/// Check that with a module cap smaller than the number of modules in use, unwinding the same samples 100 times
/// keeps the cache within the cap and gives the same stacks as an uncapped unwinder, also when modules are
/// evicted in the middle of an unwind.
#[test]
fn module_cache_stays_within_cap() {
    let dir = tempfile::tempdir().unwrap();
    let calltree = build_c(dir.path(), "dw_calltree");
    let qsort = build_c(dir.path(), "dw_qsort");
    let recurse = build_c(dir.path(), "dw_recurse");
    // Three processes: three executables and libc at three load addresses. Every process's unwinds must reach
    // libc (`__libc_start_call_main`): dw_recurse's 100 frames of about 180 bytes need more than 8 KiB of copy.
    let mut events = Vec::new();
    for (exe, arg, copy) in [
        (&calltree, "120", 8192),
        (&qsort, "100", 8192),
        (&recurse, "60", 65528),
    ] {
        let Some(recorded) = record(dir.path(), exe, &[arg], copy) else {
            return;
        };
        events.extend(recorded);
    }
    let mut reference = DwarfUnwinder::new(vec![]);
    let (expected, _) = replay(&events, &mut reference);
    let uncapped = reference.cached_modules();
    assert!(
        uncapped >= 6,
        "expected 3 executables and 3 libc modules, got {uncapped}"
    );

    const CAP: usize = 4;
    let mut capped = DwarfUnwinder::with_module_cap(vec![], CAP);
    let mut total_micros = 0.0;
    for round in 0..100 {
        let (got, micros) = replay(&events, &mut capped);
        total_micros += micros;
        assert!(capped.cached_modules() <= CAP);
        if round == 0 || round == 99 {
            assert_eq!(got.len(), expected.len());
            for (g, e) in got.iter().zip(&expected) {
                assert_eq!((&g.frames, g.outcome), (&e.frames, e.outcome));
            }
        }
    }
    println!(
        "cache: {uncapped} modules uncapped; cap {CAP}: {} cached after 100 rounds, {:.2} us/unwind",
        capped.cached_modules(),
        total_micros / 100.0
    );

    // A cap of 1 evicts on every change of module inside one unwind: stacks must stay the same.
    let mut tiny = DwarfUnwinder::with_module_cap(vec![], 1);
    let (got, _) = replay(&events, &mut tiny);
    assert!(tiny.cached_modules() <= 1);
    for (g, e) in got.iter().zip(&expected) {
        assert_eq!((&g.frames, g.outcome), (&e.frames, e.outcome));
    }
}
