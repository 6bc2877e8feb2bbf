//! Symbolization of real programs built from `fixtures/sym_*` with gcc, g++ and rustc.
mod common;
mod symbols_common;
use rprof::addr::FileOffset;
use rprof::symbols::{
    demangle, elf_info, function_symbols, DebugSources, FunctionSymbol, ModuleKey, SymbolError,
    Symbolizer, SymbolizerOptions,
};
use std::path::{Path, PathBuf};
use std::process::Command;
use symbols_common::*;

/// Check that each known function of a `-O0 -g` C program resolves back to its own name, with a line.
#[test]
fn c_functions_resolve_by_file_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let exe = build("gcc", "sym_basic.c", &["-O0", "-g"], tmp.path(), "basic");
    let symbols = function_symbols(&exe, &DebugSources::none()).unwrap();
    let key = module(&exe);
    let mut symbolizer = Symbolizer::new(with_lines());
    for name in ["alpha", "beta", "gamma_fn", "main"] {
        let sym = symbol(&symbols, name);
        assert!(sym.size > 4, "{name} has a size");
        for delta in [0, 1, sym.size - 1] {
            let frames = symbolizer.user(&key, offset_of(&exe, sym, delta));
            assert_eq!(names(&frames), [name], "at {name}+{delta}");
            assert!(!frames[0].inlined);
            let location = frames[0]
                .source
                .as_ref()
                .expect("a location with lines = true")
                .to_string();
            assert!(location.contains("sym_basic.c:"), "{location}");
        }
    }
    // Cached: the same answer again.
    let alpha = symbol(&symbols, "alpha");
    assert_eq!(
        names(&symbolizer.user(&key, offset_of(&exe, alpha, 0))),
        ["alpha"]
    );
    // Without lines, no location.
    let mut plain = Symbolizer::new(SymbolizerOptions::default());
    assert_eq!(plain.user(&key, offset_of(&exe, alpha, 0))[0].source, None);
}

/// Check that a module whose recorded build id differs from the file's is not symbolized.
#[test]
fn build_id_mismatch_gives_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let exe = build("gcc", "sym_basic.c", &["-O0", "-g"], tmp.path(), "basic");
    let symbols = function_symbols(&exe, &DebugSources::none()).unwrap();
    let mut key = module(&exe);
    assert!(key.build_id.is_some(), "gcc writes a build id");
    key.build_id = Some(vec![0xde, 0xad, 0xbe, 0xef]);
    let mut symbolizer = Symbolizer::new(SymbolizerOptions::default());
    assert!(symbolizer
        .user(&key, offset_of(&exe, symbol(&symbols, "alpha"), 0))
        .is_empty());
}

/// Check that a C++ method in a namespace comes out demangled, in `function_symbols` and the symbolizer.
#[test]
fn cpp_names_demangle() {
    let tmp = tempfile::tempdir().unwrap();
    let exe = build("g++", "sym_cpp.cpp", &["-O1", "-g"], tmp.path(), "cpp");
    let symbols = function_symbols(&exe, &DebugSources::none()).unwrap();
    let method = symbols
        .iter()
        .find(|s| s.demangled.contains("ns::Klass::method"))
        .expect("ns::Klass::method");
    assert_eq!(method.name, "_ZN2ns5Klass6methodEv");
    assert_eq!(method.demangled, "ns::Klass::method()");
    let mut symbolizer = Symbolizer::new(SymbolizerOptions::default());
    let frames = symbolizer.user(&module(&exe), offset_of(&exe, method, 1));
    assert_eq!(names(&frames), ["ns::Klass::method()"]);
    let mut mangled = Symbolizer::new(SymbolizerOptions {
        demangle: false,
        ..SymbolizerOptions::default()
    });
    assert_eq!(
        names(&mangled.user(&module(&exe), offset_of(&exe, method, 1))),
        ["_ZN2ns5Klass6methodEv"]
    );
}

/// Check that a Rust function in a module demangles to `crate::module::function`, with legacy and v0 mangling.
#[test]
fn rust_names_demangle() {
    let tmp = tempfile::tempdir().unwrap();
    // Stable rustc mangles with the legacy scheme by default; `legacy` itself is not a stable flag value.
    for (mangling, flags, prefix) in [
        ("legacy", &[][..], "_ZN"),
        ("v0", &["-Csymbol-mangling-version=v0"][..], "_R"),
    ] {
        let out = tmp.path().join(format!("rust_{mangling}"));
        run(Command::new("rustc")
            .args(["-C", "opt-level=0", "-g", "--crate-name", "sym_rust"])
            .args(flags)
            .arg("-o")
            .arg(&out)
            .arg(fixture("sym_rust.rs")));
        let symbols = function_symbols(&out, &DebugSources::none()).unwrap();
        let function = symbol(&symbols, "sym_rust::module::function");
        assert!(
            function.name.starts_with(prefix),
            "{mangling}: {}",
            function.name
        );
        assert_eq!(demangle(&function.name), "sym_rust::module::function");
        let mut symbolizer = Symbolizer::new(SymbolizerOptions::default());
        let frames = symbolizer.user(&module(&out), offset_of(&out, function, 2));
        assert_eq!(names(&frames), ["sym_rust::module::function"], "{mangling}");
    }
}

/// Strip a `-g` binary after saving its debug info with `objcopy --only-keep-debug`.
fn stripped_with_debug(dir: &Path, flags: &[&str]) -> (PathBuf, PathBuf, Vec<FunctionSymbol>) {
    let exe = build("gcc", "sym_basic.c", flags, dir, "basic");
    let symbols = function_symbols(&exe, &DebugSources::none()).unwrap();
    let debug = dir.join("basic.debug");
    run(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&exe)
        .arg(&debug));
    run(Command::new("strip").arg("--strip-all").arg(&exe));
    (exe, debug, symbols)
}

/// Check that a stripped binary resolves through its build-id debug file, and resolves to nothing without it.
#[test]
fn stripped_binary_uses_build_id_debug_file() {
    let tmp = tempfile::tempdir().unwrap();
    let (exe, debug, symbols) = stripped_with_debug(tmp.path(), &["-O0", "-g"]);
    let key = module(&exe);
    let id: String = key
        .build_id
        .as_ref()
        .unwrap()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let debug_root = tmp.path().join("debug");
    let dir = debug_root.join(".build-id").join(&id[..2]);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::rename(&debug, dir.join(format!("{}.debug", &id[2..]))).unwrap();

    assert!(matches!(
        function_symbols(&exe, &DebugSources::none()),
        Err(SymbolError::NoSymbols { .. })
    ));
    let mut blind = Symbolizer::new(SymbolizerOptions {
        debug: DebugSources::none(),
        ..SymbolizerOptions::default()
    });
    let dirs = vec![debug_root.clone()];
    let mut symbolizer = Symbolizer::new(SymbolizerOptions {
        debug: DebugSources::local(dirs.clone()),
        ..with_lines()
    });
    for name in ["alpha", "beta", "gamma_fn", "main"] {
        let offset = offset_of(&exe, symbol(&symbols, name), 1);
        assert!(
            blind.user(&key, offset).is_empty(),
            "{name} without debug file"
        );
        let frames = symbolizer.user(&key, offset);
        assert_eq!(names(&frames), [name]);
        assert!(frames[0]
            .source
            .as_ref()
            .unwrap()
            .file
            .ends_with("sym_basic.c"));
    }
    let from_debug = function_symbols(&exe, &DebugSources::local(dirs)).unwrap();
    symbol(&from_debug, "gamma_fn");
}

/// Check that a stripped binary resolves through `.gnu_debuglink` (next to it and in `.debug/`), and that a
/// debug file with the wrong CRC is not used. Built without a build id, so the CRC is the only check.
#[test]
fn stripped_binary_uses_debuglink() {
    let tmp = tempfile::tempdir().unwrap();
    let flags = ["-O0", "-g", "-Wl,--build-id=none"];
    let (exe, debug, symbols) = stripped_with_debug(tmp.path(), &flags);
    assert_eq!(elf_info(&exe).unwrap().build_id, None);
    let offset = offset_of(&exe, symbol(&symbols, "beta"), 1);
    let opts = SymbolizerOptions {
        debug: DebugSources::none(),
        ..SymbolizerOptions::default()
    };
    let key = module(&exe);
    assert!(
        Symbolizer::new(opts.clone()).user(&key, offset).is_empty(),
        "no debuglink yet"
    );

    let link = format!("--add-gnu-debuglink={}", debug.display());
    run(Command::new("objcopy").arg(link).arg(&exe));
    let frames = Symbolizer::new(opts.clone()).user(&key, offset);
    assert_eq!(names(&frames), ["beta"], "next to the binary");

    let dot_debug = tmp.path().join(".debug");
    std::fs::create_dir(&dot_debug).unwrap();
    std::fs::rename(&debug, dot_debug.join("basic.debug")).unwrap();
    let frames = Symbolizer::new(opts.clone()).user(&key, offset);
    assert_eq!(names(&frames), ["beta"], "in .debug/");

    // A different file under the linked name: the CRC does not match.
    let other = build("gcc", "sym_inline.c", &flags, tmp.path(), "other");
    std::fs::rename(&other, dot_debug.join("basic.debug")).unwrap();
    assert!(Symbolizer::new(opts).user(&key, offset).is_empty());
}

/// Check that offsets with no function (padding after a sized symbol, the ELF header, past the file) resolve
/// to nothing.
#[test]
fn unknown_offsets_are_empty() {
    let tmp = tempfile::tempdir().unwrap();
    let exe = build("gcc", "sym_inline.c", &["-O2", "-g"], tmp.path(), "inline");
    let symbols = function_symbols(&exe, &DebugSources::none()).unwrap();
    let key = module(&exe);
    let mut symbolizer = Symbolizer::new(SymbolizerOptions::default());
    // Padding: the first byte after a sized symbol that no other symbol covers.
    let gaps: Vec<&FunctionSymbol> = symbols
        .iter()
        .filter(|s| s.size > 0)
        .filter(|s| {
            let end = s.addr.0 + s.size;
            !symbols
                .iter()
                .any(|o| o.addr.0 <= end && end < o.addr.0 + o.size.max(1))
        })
        .collect();
    assert!(!gaps.is_empty(), "some function is followed by padding");
    for s in gaps {
        let frames = symbolizer.user(&key, offset_of(&exe, s, s.size));
        assert!(
            frames.is_empty(),
            "after {} got {:?}",
            s.name,
            names(&frames)
        );
    }
    assert!(
        symbolizer.user(&key, FileOffset(0)).is_empty(),
        "ELF header"
    );
    assert!(
        symbolizer.user(&key, FileOffset(1 << 40)).is_empty(),
        "past the file"
    );
    let missing = ModuleKey {
        path: tmp.path().join("missing"),
        pid: std::process::id(),
        build_id: None,
    };
    assert!(
        symbolizer.user(&missing, FileOffset(0x1000)).is_empty(),
        "missing file"
    );
}

/// Check the errors of `function_symbols` and `elf_info`: missing file, non-ELF file, truncated ELF file.
#[test]
fn errors_name_the_problem() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("missing");
    assert!(matches!(
        function_symbols(&missing, &DebugSources::none()),
        Err(SymbolError::Io { .. })
    ));
    assert!(matches!(elf_info(&missing), Err(SymbolError::Io { .. })));
    let text = tmp.path().join("text");
    std::fs::write(&text, "not an ELF file").unwrap();
    assert!(matches!(
        function_symbols(&text, &DebugSources::none()),
        Err(SymbolError::NotElf { .. })
    ));
    assert!(matches!(elf_info(&text), Err(SymbolError::NotElf { .. })));
    let exe = build("gcc", "sym_basic.c", &["-O0"], tmp.path(), "basic");
    let info = elf_info(&exe).unwrap();
    assert!(!info.is_go);
    assert!(info.layout.segments.iter().any(|s| s.executable));
    assert_eq!(
        info.build_id.as_ref().map(Vec::len),
        Some(20),
        "gcc's default sha1 build id"
    );
    // Cut short, it is a corrupt ELF file, and the message says where its header puts the lost table.
    let cut = tmp.path().join("cut");
    std::fs::write(&cut, &std::fs::read(&exe).unwrap()[..2000]).unwrap();
    let err = function_symbols(&cut, &DebugSources::none()).unwrap_err();
    assert!(matches!(err, SymbolError::CorruptElf { .. }), "{err}");
    let message = err.to_string();
    assert!(
        message.starts_with(&format!("{}: corrupt ELF file: ", cut.display()))
            && message.contains("section header table")
            && message.contains("the file has 2000 bytes")
            && !message.contains('\n'),
        "{message}"
    );
}

/// The x86-64 sections holding PLT entries.
const PLT_SECTIONS: [&str; 3] = [".plt", ".plt.sec", ".plt.got"];

/// objdump's `<name@plt>:` labels in the PLT sections: (address, name), sorted by address.
fn objdump_plt_labels(exe: &Path) -> Vec<(u64, String)> {
    let mut cmd = Command::new("objdump");
    cmd.arg("-d").arg(exe);
    for section in PLT_SECTIONS {
        cmd.arg(format!("--section={section}"));
    }
    let out = cmd.output().expect("binutils objdump (installed with gcc)");
    assert!(out.status.success(), "objdump -d {}", exe.display());
    let mut labels: Vec<(u64, String)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let (addr, rest) = line.split_once(" <")?;
            let name = rest.strip_suffix(">:")?;
            let addr = u64::from_str_radix(addr, 16).ok()?;
            name.ends_with("@plt").then(|| (addr, name.to_string()))
        })
        .collect();
    labels.sort();
    labels.dedup();
    labels
}

/// The address ranges of the PLT sections of `exe`.
fn plt_ranges(exe: &Path) -> Vec<(String, std::ops::Range<u64>)> {
    use object::{Object, ObjectSection};
    let data = std::fs::read(exe).unwrap();
    let file = object::File::parse(&*data).unwrap();
    PLT_SECTIONS
        .iter()
        .filter_map(|name| {
            let s = file.section_by_name(name)?;
            Some((name.to_string(), s.address()..s.address() + s.size()))
        })
        .collect()
}

/// Resolve every byte of the PLT sections of `exe` and check it against objdump's labels: a byte inside a
/// labelled entry (up to the next label or the section end) gives that name, any other byte (the `.plt`
/// header, IBT lazy-binding stubs) gives nothing. `same` decides whether rprof's name matches objdump's.
/// Returns the names seen.
fn check_plt_against_objdump(exe: &Path, mut same: impl FnMut(&str, &str) -> bool) -> Vec<String> {
    let labels = objdump_plt_labels(exe);
    let ranges = plt_ranges(exe);
    let info = elf_info(exe).unwrap();
    let key = module(exe);
    let mut symbolizer = Symbolizer::new(with_lines());
    let mut seen = Vec::new();
    for (section, range) in &ranges {
        let in_section: Vec<&(u64, String)> =
            labels.iter().filter(|(a, _)| range.contains(a)).collect();
        for addr in range.clone() {
            let i = in_section.partition_point(|(a, _)| *a <= addr);
            let expected = i.checked_sub(1).map(|i| in_section[i].1.as_str());
            let offset = info
                .layout
                .file_offset(rprof::addr::ElfAddr(addr))
                .expect("PLT inside a PT_LOAD segment");
            let frames = symbolizer.user(&key, offset);
            match expected {
                Some(want) => {
                    assert_eq!(frames.len(), 1, "{section} {addr:#x}: {frames:?}");
                    let got = &frames[0].name;
                    assert!(
                        same(got, want),
                        "{section} {addr:#x}: {got} vs objdump {want}"
                    );
                    assert_eq!(frames[0].source, None);
                    seen.push(got.clone());
                }
                None => assert!(frames.is_empty(), "{section} {addr:#x}: {frames:?}"),
            }
        }
    }
    seen.dedup();
    seen
}

/// Check that PLT entries of a gcc-built program resolve to `<target>@plt` exactly where objdump puts its
/// `<target@plt>` labels (every byte of `.plt`, `.plt.sec` and `.plt.got`), for the default PIE build, IBT
/// (`.plt.sec`, which Debian's gcc only emits with `-z ibtplt` as its crt files lack the IBT property),
/// `-z now`, non-PIE and `-fno-plt`; and that `function_symbols` (the probe list) has no `@plt` name.
#[test]
fn plt_entries_named_like_objdump() {
    let tmp = tempfile::tempdir().unwrap();
    let builds: [(&str, &[&str]); 5] = [
        ("default", &[]),
        ("ibt", &["-fcf-protection", "-Wl,-z,ibtplt"]),
        ("now", &["-Wl,-z,now"]),
        ("nopie", &["-no-pie"]),
        ("noplt", &["-fno-plt"]),
    ];
    for (name, extra) in builds {
        let mut flags = vec!["-O0", "-g"];
        flags.extend_from_slice(extra);
        let exe = build("gcc", "sym_plt.c", &flags, tmp.path(), name);
        let sections: Vec<String> = plt_ranges(&exe).into_iter().map(|(s, _)| s).collect();
        if name == "ibt" {
            assert!(sections.contains(&".plt.sec".to_string()), "{sections:?}");
        }
        let seen = check_plt_against_objdump(&exe, |a, b| a == b);
        eprintln!("{name}: {sections:?} {seen:?}");
        for function in ["puts@plt", "write@plt", "rand_r@plt", "atol@plt"] {
            assert_eq!(
                seen.iter().any(|s| s == function),
                name != "noplt",
                "{name}: {function} in {seen:?}"
            );
        }
        if name != "nopie" {
            assert!(
                seen.iter().any(|s| s == "__cxa_finalize@plt"),
                "{name}: .plt.got"
            );
        }
        let symbols = function_symbols(&exe, &DebugSources::none()).unwrap();
        assert!(
            symbols.iter().all(|s| !s.name.contains("@plt")),
            "{name}: function_symbols has PLT names"
        );
        assert!(symbols.iter().any(|s| s.name == "call_rand_r"));
    }
}

/// Check libc's PLT against objdump: `JUMP_SLOT` entries (`calloc@plt`) have the same name, and `IRELATIVE`
/// ones, which objdump calls `*ABS*+0xADDR@plt`, are named after the IFUNC at ADDR (`strnlen@plt`).
#[test]
fn libc_plt_entries() {
    let libc = Path::new("/usr/lib/x86_64-linux-gnu/libc.so.6");
    if !libc.exists() {
        common::skip("libc_plt_entries", &format!("no {}", libc.display()));
        return;
    }
    let symbols = function_symbols(libc, &DebugSources::default()).unwrap();
    assert!(symbols.iter().all(|s| !s.name.contains("@plt")));
    // (address, name) of .dynsym, IFUNCs included.
    let dynamic: Vec<(u64, String)> = {
        use object::{Object, ObjectSymbol};
        let data = std::fs::read(libc).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let names = file
            .dynamic_symbols()
            .filter_map(|s| Some((s.address(), s.name().ok()?.to_string())))
            .collect();
        names
    };
    let mut irelative = 0;
    let seen = check_plt_against_objdump(libc, |ours, objdump| {
        let Some(addr) = objdump
            .strip_prefix("*ABS*+0x")
            .and_then(|s| s.strip_suffix("@plt"))
        else {
            return ours == objdump;
        };
        irelative += 1;
        let addr = u64::from_str_radix(addr, 16).unwrap();
        let target = ours.strip_suffix("@plt").unwrap_or("");
        let exported = dynamic.iter().any(|(a, name)| *a == addr && name == target);
        exported || symbols.iter().any(|s| s.addr.0 == addr && s.name == target)
    });
    assert!(irelative > 0, "libc's PLT has IRELATIVE entries");
    assert!(seen.iter().any(|s| s == "calloc@plt"), "{seen:?}");
    assert!(seen.iter().all(|s| !s.starts_with("*ABS*")), "{seen:?}");
}

/// Check that a binary replaced after the symbolizer opened it (a new file renamed over its path, as
/// installers and linkers do) keeps resolving from the file that was opened: the mapped inode stays intact.
#[test]
fn binary_renamed_over_keeps_resolving() {
    let tmp = tempfile::tempdir().unwrap();
    let exe = build("gcc", "sym_basic.c", &["-O0", "-g"], tmp.path(), "basic");
    let symbols = function_symbols(&exe, &DebugSources::none()).unwrap();
    let key = module(&exe);
    let alpha = offset_of(&exe, symbol(&symbols, "alpha"), 0);
    let beta = offset_of(&exe, symbol(&symbols, "beta"), 1);
    let mut symbolizer = Symbolizer::new(SymbolizerOptions::default());
    assert_eq!(names(&symbolizer.user(&key, alpha)), ["alpha"]);
    // Another program at the same path: `inline` has other functions at other addresses.
    let other = build("gcc", "sym_inline.c", &["-O2", "-g"], tmp.path(), "other");
    std::fs::rename(&other, &exe).unwrap();
    assert_eq!(names(&symbolizer.user(&key, beta)), ["beta"]);
    // A new symbolizer opens the new file, whose build id is not the recorded one.
    let mut fresh = Symbolizer::new(SymbolizerOptions::default());
    assert!(fresh.user(&key, beta).is_empty());
}
