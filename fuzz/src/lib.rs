//! The calls each fuzz target makes on its input, in one place: the targets in `fuzz_targets/` and the
//! deterministic test `tests/fuzz_symbols.rs` (which includes this file) run the same code.
//!
//! Each function returns the error messages its input produced (a result or an error is fine; a panic, an
//! abort or unbounded memory is the bug being looked for).
use rprof::addr::FileOffset;
use rprof::symbols::{
    elf_info, function_symbols, parse_kallsyms, parse_perf_map, DebugSources, ModuleKey,
    Symbolizer, SymbolizerOptions,
};
use std::path::{Path, PathBuf};

/// At most this many symbols of a file are looked up (each one, and the byte after it).
const MAX_LOOKUPS: usize = 64;

/// An ELF file at `path` through what `report` and `probe` do with one: its build id, load layout and the
/// arithmetic on it, the function symbol listing of `probe -x` (with pattern matching and uprobe offsets), and
/// symbolization of its functions' offsets with DWARF lines and inlined frames.
pub fn elf(path: &Path) -> Vec<String> {
    let mut errors = Vec::new();
    let _ = rprof::buildid::file_build_id(path);
    let info = elf_info(path).map_err(|e| errors.push(e.to_string())).ok();
    let symbols = function_symbols(path, &DebugSources::none())
        .map_err(|e| errors.push(e.to_string()))
        .unwrap_or_default();
    if let Err(e) = rprof::probe::resolve_user(path, "*", false, &DebugSources::none()) {
        errors.push(e.to_string());
    }
    let mut offsets = Vec::new();
    if let Some(layout) = info.as_ref().map(|i| &i.layout) {
        let _ = layout.code_range();
        for s in &layout.segments {
            let _ = layout.bias(0x5555_5555_4000, s.offset);
            offsets.push(FileOffset(s.offset));
            if let Some(addr) = layout.elf_addr(FileOffset(s.offset)) {
                let _ = layout.file_offset(addr);
            }
        }
        for s in symbols.iter().take(MAX_LOOKUPS) {
            if let Some(offset) = layout.file_offset(s.addr) {
                offsets.push(offset);
                offsets.push(FileOffset(offset.0.wrapping_add(1)));
            }
        }
    }
    let mut symbolizer = Symbolizer::new(SymbolizerOptions {
        debug: DebugSources::none(),
        inlines: true,
        lines: true,
        demangle: true,
    });
    let module = ModuleKey {
        path: path.to_path_buf(),
        pid: std::process::id(),
        build_id: info.and_then(|i| i.build_id),
    };
    for offset in offsets {
        let _ = symbolizer.user(&module, offset);
    }
    errors
}

/// The first blank-separated hex number of each line (the addresses a map or kallsyms text names), at most
/// [`MAX_LOOKUPS`] of them.
fn line_addresses(text: &[u8]) -> Vec<u64> {
    text.split(|&b| b == b'\n')
        .filter_map(|line| {
            let word = line
                .split(|b| b.is_ascii_whitespace())
                .find(|w| !w.is_empty())?;
            let word = std::str::from_utf8(word).ok()?;
            u64::from_str_radix(word.trim_start_matches("0x"), 16).ok()
        })
        .take(MAX_LOOKUPS)
        .collect()
}

/// A perf map (`/tmp/perf-PID.map`) parsed, and looked up at the addresses it names and around them.
pub fn perf_map(data: &[u8]) {
    let map = parse_perf_map(data);
    for addr in line_addresses(data).into_iter().chain([0, u64::MAX]) {
        for a in [addr.wrapping_sub(1), addr, addr.wrapping_add(1)] {
            let _ = map.lookup(a);
        }
    }
}

/// A kallsyms text parsed, and looked up at the addresses it names and around them.
pub fn kallsyms(data: &[u8]) {
    let symbols = parse_kallsyms(data);
    let _ = (symbols.len(), symbols.is_empty());
    let marks = symbols.marks();
    let named = [
        marks.text,
        marks.image.map(|i| i.0),
        marks.image.map(|i| i.1),
    ];
    let addresses = line_addresses(data)
        .into_iter()
        .chain(named.into_iter().flatten());
    for addr in addresses.chain([0, u64::MAX]) {
        for a in [addr.wrapping_sub(1), addr, addr.wrapping_add(1)] {
            let _ = symbols.lookup(a);
        }
    }
}

/// Write a fuzz input to `NAME` in a directory of this process's own under the temporary directory, for the
/// targets that go through paths (as `report` and `probe` do); returns the path.
pub fn input_file(name: &str, data: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rprof-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the fuzz input directory");
    let path = dir.join(name);
    std::fs::write(&path, data).expect("write the fuzz input");
    path
}

/// A recording read to its end or its first error; returns that error's message.
pub fn recording(path: &Path) -> Option<String> {
    let mut reader = match rprof::recording::Reader::open(path) {
        Ok(reader) => reader,
        Err(e) => return Some(e.to_string()),
    };
    loop {
        match reader.next_event() {
            Ok(Some(_)) => {}
            Ok(None) => return None,
            Err(e) => return Some(e.to_string()),
        }
    }
}

/// Every tracepoint has the same few fields here, so that field accesses of any program get typed.
struct AnyTracepoint;

impl rprof::bt::check::TracepointFields for AnyTracepoint {
    fn fields(&self, _category: &str, _event: &str) -> Option<Vec<rprof::bt::check::TpField>> {
        let field = |name: &str, decl: &str, size| rprof::bt::check::TpField {
            name: name.into(),
            decl: decl.into(),
            size,
            signed: true,
        };
        Some(vec![
            field("pid", "pid_t", 4),
            field("comm", "char[16]", 16),
            field("filename", "const char *", 8),
            field("name", "__data_loc char[]", 4),
        ])
    }

    fn expand(&self, category: &str, event: &str) -> Vec<(String, String)> {
        vec![(category.replace('*', "x"), event.replace('*', "x"))]
    }
}

/// Bytes as a bpftrace program: lexed, parsed, checked (with and without kprobes) and its errors rendered.
pub fn bt(data: &[u8]) {
    let source = String::from_utf8_lossy(data);
    let parsed = rprof::bt::parser::parse(&source);
    let _ = rprof::bt::diag::render_all(&parsed.errors, "stdin", &source);
    let Some(program) = parsed.program else {
        return;
    };
    for kprobes in [false, true] {
        let env = rprof::bt::check::Env {
            kernel: rprof::bt::check::Kernel {
                kprobes,
                hardware_pmu: false,
            },
            tracepoints: &AnyTracepoint,
            params: vec!["1".into(), "abc".into()],
            has_child: false,
            unsafe_ok: false,
            strlen: 64,
        };
        let checked = rprof::bt::check::check(&program, &env);
        let _ = rprof::bt::diag::render_all(&checked.diagnostics, "stdin", &source);
    }
}
