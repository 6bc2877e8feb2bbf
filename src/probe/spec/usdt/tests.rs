use super::arg::parse_arg;
use super::*;

fn no_symbols(_: &str) -> Option<u64> {
    None
}

/// (spec, fetch, fetch_string): Ok(the expression) or Err(part of the message).
type Want = Result<&'static str, &'static str>;

/// Check that each spec of `table` gives the tracefs fetch expressions (or the errors, which name the spec)
/// expected; the symbol `counter` is at 0x4010.
fn check_specs(table: &[(&str, Want, Want)]) {
    let mut symbols = |name: &str| (name == "counter").then_some(0x4010u64);
    for (spec, fetch, string) in table {
        let arg = parse_arg(spec, &mut symbols);
        assert_eq!(&arg.spec, spec);
        for (what, got, want) in [
            ("fetch", arg.fetch(), fetch),
            ("fetch_string", arg.fetch_string(), string),
        ] {
            match (got, want) {
                (Ok(got), Ok(want)) => assert_eq!(&got, want, "{what} of {spec}"),
                (Err(got), Err(want)) => {
                    assert!(
                        got.contains(want),
                        "{what} of {spec}: {got:?} lacks {want:?}"
                    );
                    assert!(
                        got.contains(spec),
                        "{what} of {spec}: {got:?} names the spec"
                    );
                }
                (got, want) => panic!("{what} of {spec}: got {got:?}, want {want:?}"),
            }
        }
    }
}

/// Check that argument specs of every operand kind give the tracefs fetch expressions expected.
#[test]
fn arg_specs_to_fetch_strings() {
    check_specs(&[
        ("8@%rax", Ok("%ax:u64"), Ok("+0(%ax):string")),
        ("-4@%edx", Ok("%dx:s32"), Err("4-byte value, not a pointer")),
        ("-4@%eax", Ok("%ax:s32"), Err("not a pointer")),
        ("2@%ax", Ok("%ax:u16"), Err("not a pointer")),
        ("1@%al", Ok("%ax:u8"), Err("not a pointer")),
        ("-1@%sil", Ok("%si:s8"), Err("not a pointer")),
        ("1@%dil", Ok("%di:u8"), Err("not a pointer")),
        ("4@%r8d", Ok("%r8:u32"), Err("not a pointer")),
        ("2@%r8w", Ok("%r8:u16"), Err("not a pointer")),
        ("1@%r8b", Ok("%r8:u8"), Err("not a pointer")),
        ("-8@%r12", Ok("%r12:s64"), Ok("+0(%r12):string")),
        ("8@%r15", Ok("%r15:u64"), Ok("+0(%r15):string")),
        ("-4@%ebp", Ok("%bp:s32"), Err("not a pointer")),
        ("8@%rsp", Ok("%sp:u64"), Ok("+0(%sp):string")),
        ("-4@-20(%rbp)", Ok("-20(%bp):s32"), Err("not a pointer")),
        ("8@-20(%rbp)", Ok("-20(%bp):u64"), Ok("+0(-20(%bp)):string")),
        ("-4@112(%rsp)", Ok("+112(%sp):s32"), Err("not a pointer")),
        ("8@(%rdi)", Ok("+0(%di):u64"), Ok("+0(+0(%di)):string")),
        (
            "8@0x10(%rbx)",
            Ok("+16(%bx):u64"),
            Ok("+0(+16(%bx)):string"),
        ),
        ("-4@$5", Ok("\\5:s32"), Err("is a constant")),
        ("-4@$-3", Ok("\\-3:s32"), Err("is a constant")),
        ("8@%rip", Ok("%ip:u64"), Ok("+0(%ip):string")),
        // Symbol-relative: the symbol's `@+` value plus the displacement.
        (
            "-8@counter(%rip)",
            Ok("@+0x4010:s64"),
            Ok("+0(@+0x4010):string"),
        ),
        (
            "4@counter+8(%rip)",
            Ok("@+0x4018:u32"),
            Err("not a pointer"),
        ),
        (
            "4@counter-16(%rip)",
            Ok("@+0x4000:u32"),
            Err("not a pointer"),
        ),
        ("8@counter", Ok("@+0x4010:u64"), Ok("+0(@+0x4010):string")),
        // No `N@`: 8 bytes, unsigned.
        ("%rdi", Ok("%di:u64"), Ok("+0(%di):string")),
    ]);
}

/// Check that the operands rprof cannot fetch give errors that say why.
#[test]
fn arg_specs_that_cannot_be_fetched() {
    check_specs(&[
        (
            "8@8(%rbx,%rax,8)",
            Err("indexed addressing"),
            Err("indexed addressing"),
        ),
        ("8@(,%rax,8)", Err("indexed addressing"), Err("indexed")),
        ("1@%ah", Err("bits 8-15"), Err("bits 8-15")),
        ("8@%xmm0", Err("floating-point or vector"), Err("vector")),
        ("8f@%xmm0", Err("floating-point arguments"), Err("floating")),
        ("3@%rax", Err("3-byte arguments"), Err("3-byte")),
        ("x@%rax", Err("not an argument size"), Err("size")),
        (
            "8@missing(%rip)",
            Err("symbol `missing` is not"),
            Err("stripped"),
        ),
        ("8@0x1000", Err("address without a symbol"), Err("without")),
        ("8@8(%rip)", Err("address without a symbol"), Err("without")),
        (
            "8@%foo",
            Err("not an x86-64 general-purpose register"),
            Err("%foo"),
        ),
        ("8@$abc", Err("not a constant"), Err("constant")),
        ("8@sym(%rbx)", Err("other than %rip"), Err("other than")),
    ]);
}

/// Check that sizes and signs come from `N@`, and every register alias maps to its tracefs base name.
#[test]
fn sizes_and_register_aliases() {
    let arg = parse_arg("-2@%r9w", &mut no_symbols);
    assert_eq!((arg.size, arg.signed), (2, true));
    assert_eq!(arg.location, ArgLocation::Reg("r9".into()));
    for (names, base) in [
        (["rax", "eax", "ax", "al"], "ax"),
        (["rbx", "ebx", "bx", "bl"], "bx"),
        (["rcx", "ecx", "cx", "cl"], "cx"),
        (["rdx", "edx", "dx", "dl"], "dx"),
        (["rsi", "esi", "si", "sil"], "si"),
        (["rdi", "edi", "di", "dil"], "di"),
        (["rbp", "ebp", "bp", "bpl"], "bp"),
        (["rsp", "esp", "sp", "spl"], "sp"),
        (["r10", "r10d", "r10w", "r10b"], "r10"),
        (["r13", "r13d", "r13w", "r13b"], "r13"),
    ] {
        for name in names {
            assert_eq!(arg::register(name), Ok(base), "%{name}");
        }
    }
}

/// Check that the prelink adjustment moves addresses by how far `.stapsdt.base` moved, and leaves a zero
/// semaphore and files without the section alone.
#[test]
fn prelink_adjustment() {
    assert_eq!(prelink_adjust(0x1234, 0x8000, Some(0x9000)), 0x2234);
    assert_eq!(prelink_adjust(0x1234, 0x9000, Some(0x8000)), 0x0234);
    assert_eq!(prelink_adjust(0, 0x8000, Some(0x9000)), 0);
    assert_eq!(prelink_adjust(0x1234, 0x8000, None), 0x1234);
    assert_eq!(prelink_adjust(0x1234, 0x8000, Some(0x8000)), 0x1234);
}

/// One note's bytes: header, padded owner, description (three little-endian 64-bit words and the strings).
fn note_bytes(owner: &str, kind: u32, words: [u64; 3], strings: &[&str]) -> Vec<u8> {
    let mut desc: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    for s in strings {
        desc.extend_from_slice(s.as_bytes());
        desc.push(0);
    }
    let mut name = owner.as_bytes().to_vec();
    name.push(0);
    let mut out = Vec::new();
    out.extend_from_slice(&(name.len() as u32).to_le_bytes());
    out.extend_from_slice(&(desc.len() as u32).to_le_bytes());
    out.extend_from_slice(&kind.to_le_bytes());
    name.resize(name.len().div_ceil(4) * 4, 0);
    out.extend_from_slice(&name);
    let desc_len = desc.len();
    desc.resize(desc_len.div_ceil(4) * 4, 0);
    out.extend_from_slice(&desc);
    out
}

/// Check that notes are parsed from bytes, other owners and types are skipped, and truncation is an error.
#[test]
fn notes_from_bytes() {
    let layout = NoteLayout {
        little_endian: true,
        addr_size: 8,
        align: 4,
    };
    let mut bytes = note_bytes("GNU", 3, [1, 2, 3], &["x", "y", ""]);
    bytes.extend(note_bytes(
        "stapsdt",
        3,
        [0x11d1, 0x2028, 0x4020],
        &["prov", "name", "-4@%edi 8@%rax"],
    ));
    bytes.extend(note_bytes("stapsdt", 1, [1, 2, 3], &["old", "kind", ""]));
    bytes.extend(note_bytes("stapsdt", 3, [0x10, 0x20, 0], &["p", "noargs"]));
    let notes = parse_notes(&bytes, layout).unwrap();
    assert_eq!(
        notes,
        vec![
            RawNote {
                pc: 0x11d1,
                base: 0x2028,
                semaphore: 0x4020,
                provider: "prov".into(),
                name: "name".into(),
                args: "-4@%edi 8@%rax".into(),
            },
            RawNote {
                pc: 0x10,
                base: 0x20,
                semaphore: 0,
                provider: "p".into(),
                name: "noargs".into(),
                args: String::new(),
            },
        ]
    );
    let cut = &bytes[..bytes.len() - 8];
    assert!(parse_notes(cut, layout)
        .unwrap_err()
        .contains("past the section's end"));
}

fn probe(provider: &str, name: &str) -> UsdtProbe {
    UsdtProbe {
        provider: provider.into(),
        name: name.into(),
        offset: 0x100,
        semaphore: None,
        args: vec![],
    }
}

/// Check that globs select probes, and that errors list the providers, or the probes, the file has.
#[test]
fn matching_and_errors() {
    let probes = vec![
        probe("python", "gc__start"),
        probe("python", "gc__done"),
        probe("python", "line"),
        probe("libc", "setjmp"),
    ];
    let names = |v: Vec<&UsdtProbe>| v.iter().map(|p| p.name.clone()).collect::<Vec<_>>();
    assert_eq!(
        names(matching(&probes, "python", "gc__*")),
        ["gc__start", "gc__done"]
    );
    assert_eq!(names(matching(&probes, "*", "setjmp")), ["setjmp"]);
    assert_eq!(matching(&probes, "py", "*").len(), 0);
    let path = Path::new("/usr/bin/python3.11");
    let e = select(path, &probes, "nope", "*").unwrap_err();
    assert_eq!(
        e.to_string(),
        "/usr/bin/python3.11 has no USDT provider `nope` (it has: libc, python)"
    );
    let e = select(path, &probes, "python", "zz").unwrap_err();
    assert_eq!(
        e.to_string(),
        "/usr/bin/python3.11 has no USDT probe `python:zz` (it has: python:gc__done, python:gc__start, python:line)"
    );
    assert_eq!(select(path, &probes, "p*", "line").unwrap().len(), 1);
    let mut many = probe("p", "x");
    many.args = vec![
        parse_arg("8@%rax", &mut no_symbols),
        parse_arg("8@(%rax,%rbx,8)", &mut no_symbols),
    ];
    many.semaphore = Some(0x683272);
    assert_eq!(
        many.list_line(),
        "usdt:p:x  (offset 0x100, semaphore offset 0x683272)  args: arg0=8@%rax arg1=8@(%rax,%rbx,8) (unsupported)"
    );
}

/// Check that Debian's python3.11 has its USDT probes, with offsets and semaphore offsets computed through
/// its segments (the values `readelf -n` and the PT_LOAD headers give), and the import probe's argument.
#[test]
fn python_notes() {
    let path = Path::new("/usr/bin/python3.11");
    if !path.exists() {
        println!("skipped: {} is absent", path.display());
        return;
    }
    let probes = read_probes(path).unwrap();
    let p = probes
        .iter()
        .find(|p| p.provider == "python" && p.name == "import__find__load__start")
        .expect("import__find__load__start");
    assert_eq!(p.args.len(), 1);
    assert_eq!(p.args[0].spec, "8@%rax");
    assert_eq!(p.args[0].fetch_string().unwrap(), "+0(%ax):string");
    assert!(p.semaphore.is_some());
    // Every probe is in the code, every semaphore in .probes (the file offsets, not the ELF addresses).
    let data = std::fs::read(path).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let probes_section = file.section_by_name(".probes").unwrap();
    let (sem_start, sem_size) = probes_section.file_range().unwrap();
    let text = file.section_by_name(".text").unwrap().file_range().unwrap();
    for p in &probes {
        assert!((text.0..text.0 + text.1).contains(&p.offset), "{p:?}");
        let s = p.semaphore.unwrap();
        assert!((sem_start..sem_start + sem_size).contains(&s), "{p:?}");
        // The probe site is a nop.
        assert_eq!(data[p.offset as usize], 0x90, "{p:?}");
    }
    let done = probes.iter().find(|p| p.name == "import__find__load__done");
    let done: Vec<String> = done
        .unwrap()
        .args
        .iter()
        .map(|a| a.fetch().unwrap())
        .collect();
    assert_eq!(done, ["%ax:u64", "%dx:s32"]);
}

/// Check that a file without notes says so, and a non-ELF file too.
#[test]
fn no_notes_and_not_elf() {
    let exe = std::env::current_exe().unwrap();
    let e = read_probes(&exe).unwrap_err();
    assert!(matches!(e, UsdtError::NoNotes { .. }), "{e}");
    assert!(e.to_string().contains("has no USDT probes (.note.stapsdt)"));
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("text");
    std::fs::write(&text, "not an ELF file at all").unwrap();
    assert!(matches!(read_probes(&text), Err(UsdtError::NotElf { .. })));
    assert!(matches!(
        read_probes(&dir.path().join("missing")),
        Err(UsdtError::Read { .. })
    ));
}

/// Check that the fixture built with gcc -O2 has its three probes: `work` with a semaphore in `.probes`,
/// `tick` and `done` without, and `done`'s global read as `@+` its ELF address (a PIE's code has offset ==
/// address, so that is what the kernel adds to the load base; its .bss has no file offset at all).
#[test]
fn fixture_probes() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("usdt_fixture");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/usdt_fixture.c");
    let built = std::process::Command::new("gcc")
        .args(["-O2", "-o"])
        .arg(&bin)
        .arg(&src)
        .status();
    if !matches!(built, Ok(s) if s.success()) {
        panic!(
            "gcc cannot build {}: install gcc and systemtap-sdt-dev",
            src.display()
        );
    }
    let probes = read_probes(&bin).unwrap();
    let names: Vec<&str> = probes.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["tick", "work", "done"]);
    assert!(probes.iter().all(|p| p.provider == "rprof_test"));
    let data = std::fs::read(&bin).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let sem = file
        .section_by_name(".probes")
        .unwrap()
        .file_range()
        .unwrap()
        .0;
    let by = |n: &str| probes.iter().find(|p| p.name == n).unwrap();
    assert_eq!(by("work").semaphore, Some(sem));
    assert_eq!(by("tick").semaphore, None);
    assert_eq!(by("done").semaphore, None);
    for p in &probes {
        assert_eq!(data[p.offset as usize], 0x90, "{p:?} is at a nop");
    }
    let work = &by("work").args;
    assert_eq!((work[0].size, work[0].signed), (4, true));
    assert!(work[0].fetch().unwrap().ends_with(":s32"));
    assert!(work[1].fetch_string().unwrap().ends_with(":string"));
    let total = file
        .symbols()
        .find(|s| s.name() == Ok("total"))
        .unwrap()
        .address();
    let done = &by("done").args;
    assert_eq!(done[0].location, ArgLocation::FileOffset(total));
    assert_eq!(done[0].fetch().unwrap(), format!("@+{total:#x}:s64"));
}
