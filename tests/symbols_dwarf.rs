//! Inlined frames and lines from DWARF (gcc, LTO, split DWARF, compressed sections, libc's debug file)
//! against binutils' addr2line.
mod common;
mod symbols_common;
use rprof::symbols::{
    elf_info, function_symbols, DebugSources, FunctionSymbol, InflatedCache, ModuleKey, Symbolizer,
    SymbolizerOptions,
};
use std::path::{Path, PathBuf};
use std::process::Command;
use symbols_common::*;

/// Check that addresses inside an always_inline function give [caller, inlined callee], and that the caller's
/// first instruction gives the caller alone. Cross-checked with binutils `addr2line -i` when present. The unit
/// is looked up alone (through .debug_aranges).
#[test]
fn inlined_frames() {
    check_inlined_frames(&["-O2", "-g"]);
}

/// Check the same with link-time optimization, whose units refer into each other (DW_FORM_ref_addr): names
/// are found by following references into other units.
#[test]
fn inlined_frames_lto() {
    check_inlined_frames(&["-O2", "-g", "-flto"]);
}

/// Check the same with split DWARF: the functions and their inlined subroutines are in the `.dwo` file next
/// to the object, the line table in the binary.
#[test]
fn inlined_frames_split_dwarf() {
    check_inlined_frames(&["-O2", "-g", "-gsplit-dwarf"]);
}

fn check_inlined_frames(flags: &[&str]) {
    let tmp = tempfile::tempdir().unwrap();
    let exe = build("gcc", "sym_inline.c", flags, tmp.path(), "inline");
    let symbols = function_symbols(&exe, &DebugSources::none()).unwrap();
    assert!(
        !symbols.iter().any(|s| s.name.starts_with("inlined_callee")),
        "inlined_callee must be inlined away"
    );
    let caller = symbol(&symbols, "outer_caller");
    let key = module(&exe);
    let mut symbolizer = Symbolizer::new(with_lines());
    assert_eq!(
        names(&symbolizer.user(&key, offset_of(&exe, caller, 0))),
        ["outer_caller"]
    );
    let mut inlined_at = None;
    for delta in 0..caller.size {
        let frames = symbolizer.user(&key, offset_of(&exe, caller, delta));
        assert_eq!(frames[0].name, "outer_caller", "at +{delta}");
        assert!(!frames[0].inlined);
        if frames.len() > 1 {
            assert_eq!(
                names(&frames),
                ["outer_caller", "inlined_callee"],
                "at +{delta}"
            );
            assert!(frames[1].inlined);
            assert!(frames[1]
                .source
                .as_ref()
                .unwrap()
                .file
                .ends_with("sym_inline.c"));
            // The caller's location is the call site of the inlined function.
            assert!(frames[0]
                .source
                .as_ref()
                .unwrap()
                .file
                .ends_with("sym_inline.c"));
            inlined_at.get_or_insert(delta);
        }
    }
    let delta = inlined_at.expect("some address of outer_caller is inside inlined_callee");
    // Without inline frames: only the caller.
    let mut flat = Symbolizer::new(SymbolizerOptions {
        inlines: false,
        ..SymbolizerOptions::default()
    });
    assert_eq!(
        names(&flat.user(&key, offset_of(&exe, caller, delta))),
        ["outer_caller"]
    );
    // Cross-check with binutils addr2line (innermost first), which does not read `.dwo` files.
    let addr = format!("{:#x}", caller.addr.0 + delta);
    if flags.contains(&"-gsplit-dwarf") {
        return;
    }
    if let Ok(out) = Command::new("addr2line")
        .args(["-f", "-i", "-e"])
        .arg(&exe)
        .arg(&addr)
        .output()
    {
        let text = String::from_utf8_lossy(&out.stdout);
        let functions: Vec<&str> = text.lines().step_by(2).collect();
        assert_eq!(
            functions,
            ["inlined_callee", "outer_caller"],
            "addr2line at {addr}"
        );
    }
}

/// Check the inlined frames of a distribution debug file against binutils: 200 addresses across libc, resolved
/// through libc6-dbg's compressed DWARF (each unit looked up alone), give the same inline chains as
/// `addr2line -i`.
#[test]
fn libc_inline_chains_match_addr2line() {
    let libc = Path::new("/usr/lib/x86_64-linux-gnu/libc.so.6");
    let Some(build_id) = elf_info(libc).ok().and_then(|i| i.build_id) else {
        let why = format!("no {} with a build id", libc.display());
        common::skip("libc_inline_chains_match_addr2line", &why);
        return;
    };
    let hex: String = build_id.iter().map(|b| format!("{b:02x}")).collect();
    let debug = PathBuf::from(format!(
        "/usr/lib/debug/.build-id/{}/{}.debug",
        &hex[..2],
        &hex[2..]
    ));
    if !debug.exists() {
        let why = format!("{} is missing (apt-get install libc6-dbg)", debug.display());
        common::skip("libc_inline_chains_match_addr2line", &why);
        return;
    }
    let symbols = function_symbols(libc, &DebugSources::default()).unwrap();
    let sized: Vec<&FunctionSymbol> = symbols.iter().filter(|s| s.size >= 64).collect();
    let step = (sized.len() / 200).max(1);
    let picks: Vec<(&FunctionSymbol, u64)> = sized
        .iter()
        .step_by(step)
        .map(|s| (*s, s.size / 2))
        .collect();
    let out = Command::new("addr2line")
        .args(["-a", "-f", "-i", "-e"])
        .arg(&debug)
        .args(picks.iter().map(|(s, d)| format!("{:#x}", s.addr.0 + d)))
        .output()
        .expect("binutils addr2line");
    // Blocks of "0xADDR" then (function, file:line) pairs, innermost first.
    let text = String::from_utf8_lossy(&out.stdout);
    let mut chains: Vec<Vec<String>> = Vec::new();
    for line in text.lines() {
        if line.starts_with("0x") {
            chains.push(Vec::new());
        } else if !line.contains(':') || line.starts_with("??") {
            chains
                .last_mut()
                .expect("an address first")
                .push(line.to_string());
        }
    }
    assert_eq!(chains.len(), picks.len(), "addr2line output:\n{text}");
    let key = ModuleKey {
        path: libc.to_path_buf(),
        pid: std::process::id(),
        build_id: Some(build_id),
    };
    // Inflated at each load, then kept inflated in a build-id cache: written by the first symbolizer, mapped
    // by the next (as `--push` keeps them; see `inlined_frames_from_kept_inflated_sections`).
    let cache = tempfile::tempdir().unwrap();
    let kept = InflatedCache {
        dir: cache.path().to_path_buf(),
        bound: 1 << 30,
    };
    for (pass, inflated) in [
        ("inflated", None),
        ("written", Some(&kept)),
        ("mapped", Some(&kept)),
    ] {
        let mut options = SymbolizerOptions {
            demangle: false,
            ..SymbolizerOptions::default()
        };
        options.debug.inflated = inflated.cloned();
        let mut symbolizer = Symbolizer::new(options);
        let cpu = own_cpu();
        let mut with_inlines = 0;
        for ((sym, delta), chain) in picks.iter().zip(&chains) {
            let frames = symbolizer.user(&key, offset_of(libc, sym, *delta));
            // Our outermost frame is the symbol table's name; the inlined ones come from DWARF, outermost first.
            let ours: Vec<&str> = frames.iter().skip(1).map(|f| f.name.as_str()).collect();
            let theirs: Vec<&str> = chain.iter().rev().skip(1).map(String::as_str).collect();
            assert_eq!(ours, theirs, "{pass}: {}+{delta:#x}", sym.name);
            with_inlines += usize::from(!ours.is_empty());
        }
        eprintln!(
            "{pass}: {} addresses of libc resolved in {:.0} ms of CPU",
            picks.len(),
            (own_cpu() - cpu) * 1e3
        );
        assert!(
            with_inlines >= 10,
            "{pass}: only {with_inlines} of {} addresses are in inlined code",
            picks.len()
        );
    }
}

/// This process's CPU time (user + system), seconds.
fn own_cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    // Clock ticks of 10 ms (USER_HZ is 100 on Linux).
    ticks / 100.0
}

/// Check the same with DWARF sections compressed by the linker (`-gz`, SHF_COMPRESSED): the only sections
/// decompressed onto the heap, where the others are read in place from the mapped file.
#[test]
fn inlined_frames_compressed_dwarf() {
    check_inlined_frames(&["-O2", "-g", "-gz"]);
}

/// Check that compressed DWARF kept inflated in a build-id cache (`--push` keeps libc6-dbg's so, which it
/// inflated at each period before) names every address as inflating it does: the first symbolizer inflates
/// the sections and writes `.rprof-dwarf/<build id>/sections`, noted in the cache's ledger; a second one maps
/// that file (it is not written again), also after its DWARF was released; a file cut short is not used (the
/// sections are inflated again, and the file written whole again).
#[test]
fn inlined_frames_from_kept_inflated_sections() {
    let tmp = tempfile::tempdir().unwrap();
    let (exe, caller, key) = compressed_inline_fixture(tmp.path());
    let caller = &caller;
    let all = |s: &mut Symbolizer| -> Vec<Vec<String>> {
        (0..caller.size)
            .map(|d| {
                let frames = s.user(&key, offset_of(&exe, caller, d));
                names(&frames).iter().map(|n| n.to_string()).collect()
            })
            .collect()
    };
    let plain = all(&mut Symbolizer::new(with_lines()));
    assert!(
        plain.iter().any(|f| f.len() == 2),
        "no inlined frame: {plain:?}"
    );
    let cache = InflatedCache {
        dir: tmp.path().join("cache"),
        bound: 1 << 30,
    };
    let mut options = with_lines();
    options.debug.inflated = Some(cache.clone());
    assert_eq!(all(&mut Symbolizer::new(options.clone())), plain);
    let build_id = elf_info(&exe).unwrap().build_id.unwrap();
    let hex: String = build_id.iter().map(|b| format!("{b:02x}")).collect();
    let relative = format!(".rprof-dwarf/{hex}/sections");
    let file = cache.dir.join(&relative);
    let written = std::fs::metadata(&file).expect("the inflated sections are kept");
    let ledger = std::fs::read_to_string(cache.dir.join(".rprof-added")).unwrap();
    assert!(ledger.contains(&relative), "ledger: {ledger}");
    let mut second = Symbolizer::new(options.clone());
    assert_eq!(all(&mut second), plain);
    second.release_dwarf();
    assert_eq!(all(&mut second), plain);
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(&file).unwrap().ino(),
        written.ino(),
        "mapped, not written again"
    );
    drop(second);
    let whole = std::fs::read(&file).unwrap();
    std::fs::write(&file, &whole[..whole.len() - 1]).unwrap();
    assert_eq!(all(&mut Symbolizer::new(options)), plain);
    assert_eq!(std::fs::read(&file).unwrap(), whole, "written whole again");
}

/// sym_inline.c built with compressed DWARF (`-gz`) in `dir`: the binary, its `outer_caller` and its module.
fn compressed_inline_fixture(dir: &Path) -> (PathBuf, FunctionSymbol, ModuleKey) {
    let exe = build("gcc", "sym_inline.c", &["-O2", "-g", "-gz"], dir, "inline");
    let symbols = function_symbols(&exe, &DebugSources::none()).unwrap();
    let caller = symbol(&symbols, "outer_caller").clone();
    let key = module(&exe);
    (exe, caller, key)
}

/// Check that a symbolizer whose DWARF was dropped (report drops it once its addresses are resolved, before it
/// reads the kernel's symbols) loads it again for an address it has not looked up: compressed sections are
/// decompressed again and the inlined frames are still found.
#[test]
fn inlined_frames_after_release() {
    let tmp = tempfile::tempdir().unwrap();
    let (exe, caller, key) = compressed_inline_fixture(tmp.path());
    let caller = &caller;
    let mut symbolizer = Symbolizer::new(with_lines());
    assert_eq!(
        names(&symbolizer.user(&key, offset_of(&exe, caller, 0))),
        ["outer_caller"]
    );
    symbolizer.release_dwarf();
    let inlined = (1..caller.size)
        .filter(|&delta| {
            names(&symbolizer.user(&key, offset_of(&exe, caller, delta)))
                == ["outer_caller", "inlined_callee"]
        })
        .count();
    assert!(
        inlined > 0,
        "no address of outer_caller gave inlined_callee once the DWARF was released"
    );
}
