use super::*;
use object::ObjectSymbol;
use std::path::PathBuf;
use std::process::Command;

/// Build a fixture with `compiler` and `flags` into `dir`.
fn build(dir: &Path, compiler: &str, source: &str, flags: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(source);
    let out = dir.join(format!("{source}{}", flags.join("")));
    let st = Command::new(compiler)
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {compiler}: {e}"));
    assert!(st.success(), "{compiler} failed on {}", src.display());
    out
}

/// The parameters of the function named `symbol` (as the symbol table has it).
fn params(bin: &Path, symbol: &str) -> Vec<Param> {
    let data = std::fs::read(bin).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let addr = file
        .symbols()
        .find(|s| s.name() == Ok(symbol))
        .unwrap_or_else(|| panic!("{symbol} in {}", bin.display()))
        .address();
    function_params(bin, addr)
        .unwrap()
        .unwrap_or_else(|| panic!("no DWARF for {symbol} in {}", bin.display()))
}

fn int(size: u8, signed: bool) -> ParamType {
    ParamType::Int { size, signed }
}

/// (name, type, type_name) of each parameter.
fn summary(params: &[Param]) -> Vec<(String, ParamType, String)> {
    params
        .iter()
        .map(|p| (p.name.clone(), p.ty.clone(), p.type_name.clone()))
        .collect()
}

fn regs(params: &[Param]) -> Vec<Result<&'static str, String>> {
    (0..params.len()).map(|i| abi_register(params, i)).collect()
}

fn expect(list: &[(&str, ParamType, &str)]) -> Vec<(String, ParamType, String)> {
    list.iter()
        .map(|(n, t, s)| (n.to_string(), t.clone(), s.to_string()))
        .collect()
}

/// Check that the C fixture's parameters, their types and their registers are read from DWARF, at -O0 and
/// -O2: floats and large structs take no integer register, a small struct is refused.
#[test]
fn c_parameters_and_registers() {
    let dir = tempfile::tempdir().unwrap();
    for opt in ["-O0", "-O2"] {
        let bin = build(dir.path(), "gcc", "params_fixture.c", &[opt, "-g"]);
        let p = params(&bin, "f_int");
        assert_eq!(
            summary(&p),
            expect(&[
                ("len", int(4, true), "int"),
                ("name", ParamType::Pointer { to_char: true }, "const char *"),
                ("scale", ParamType::Float, "double"),
                ("extra", int(8, true), "long int"),
            ]),
            "{opt}"
        );
        assert_eq!(regs(&p)[0], Ok("di"));
        assert_eq!(regs(&p)[1], Ok("si"));
        assert!(regs(&p)[2]
            .as_ref()
            .unwrap_err()
            .contains("floating-point parameter"));
        assert_eq!(
            regs(&p)[3],
            Ok("dx"),
            "{opt}: a double takes no integer register"
        );

        let p = params(&bin, "f_big");
        assert_eq!(p[0].ty, ParamType::Aggregate { size: 32 });
        assert_eq!(p[0].type_name, "struct big");
        assert!(regs(&p)[0]
            .as_ref()
            .unwrap_err()
            .contains("struct passed in memory"));
        assert_eq!(
            regs(&p)[1],
            Ok("di"),
            "{opt}: a struct in memory takes no register"
        );

        let p = params(&bin, "f_small");
        assert_eq!(p[0].ty, ParamType::Aggregate { size: 16 });
        assert!(regs(&p)[0]
            .as_ref()
            .unwrap_err()
            .contains("is a struct: not supported"));
        assert!(regs(&p)[1]
            .as_ref()
            .unwrap_err()
            .contains("follows parameter 0"));
    }
}

/// Check the C fixture's other shapes at -O0 and -O2: a large struct returned takes rdi (an artificial
/// return slot), the seventh integer is on the stack, and enums, typedefs and qualified pointers keep their
/// names and registers.
#[test]
fn c_return_slot_stack_and_kinds() {
    let dir = tempfile::tempdir().unwrap();
    for opt in ["-O0", "-O2"] {
        let bin = build(dir.path(), "gcc", "params_fixture.c", &[opt, "-g"]);
        let p = params(&bin, "f_ret");
        assert_eq!(
            summary(&p),
            expect(&[
                (
                    "<return slot>",
                    ParamType::Pointer { to_char: false },
                    "struct big *"
                ),
                ("x", int(8, true), "long int"),
                ("n", int(8, false), "size_t"),
            ]),
            "{opt}"
        );
        assert!(p[0].artificial && !p[1].artificial);
        assert_eq!(regs(&p), [Ok("di"), Ok("si"), Ok("dx")]);

        let p = params(&bin, "f_many");
        assert_eq!(
            summary(&p),
            expect(&[
                ("a", int(1, true), "char"),
                ("b", int(2, true), "short int"),
                ("c", int(4, true), "int"),
                ("d", int(8, true), "long int"),
                ("e", ParamType::Pointer { to_char: false }, "void *"),
                ("f", ParamType::Pointer { to_char: true }, "unsigned char *"),
                ("g", int(1, false), "_Bool"),
            ]),
            "{opt}"
        );
        let r = regs(&p);
        assert_eq!(
            r[..6],
            [Ok("di"), Ok("si"), Ok("dx"), Ok("cx"), Ok("r8"), Ok("r9")]
        );
        assert!(r[6]
            .as_ref()
            .unwrap_err()
            .contains("past the 6 integer argument registers (rdi, rsi, rdx, rcx, r8, r9)"));

        let p = params(&bin, "f_kinds");
        assert_eq!(
            summary(&p),
            expect(&[
                ("c", int(4, true), "enum color"),
                ("n", int(8, false), "my_size"),
                ("f", ParamType::Float, "float"),
                (
                    "u",
                    ParamType::Pointer { to_char: true },
                    "const unsigned char *"
                ),
                (
                    "p",
                    ParamType::Pointer { to_char: false },
                    "volatile int * const"
                ),
            ]),
            "{opt}"
        );
        assert_eq!(regs(&p)[3], Ok("dx"));
        assert_eq!(regs(&p)[4], Ok("cx"));
    }
}

/// Check that a C++ member function has `this` first, artificial, in rdi, and its next parameter in rsi; and
/// that a std::string passed by value (by invisible reference) is a pointer in a register.
#[test]
fn cpp_member_function() {
    let dir = tempfile::tempdir().unwrap();
    for opt in ["-O0", "-O2"] {
        let bin = build(dir.path(), "g++", "params_fixture.cpp", &[opt, "-g"]);
        let p = params(&bin, "_ZN7Counter3addEiPKc");
        assert_eq!(
            summary(&p),
            expect(&[
                (
                    "this",
                    ParamType::Pointer { to_char: false },
                    "Counter * const"
                ),
                ("n", int(4, true), "int"),
                ("tag", ParamType::Pointer { to_char: true }, "const char *"),
            ]),
            "{opt}"
        );
        assert!(p[0].artificial && !p[1].artificial);
        assert_eq!(regs(&p), [Ok("di"), Ok("si"), Ok("dx")]);
        let p = params(
            &bin,
            "_Z8by_valueNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEEi",
        );
        assert_eq!(
            p[0].ty,
            ParamType::Pointer { to_char: false },
            "{opt}: {p:?}"
        );
        assert_eq!(regs(&p), [Ok("di"), Ok("si")]);
        let p = params(&bin, "_Z7by_pair4Pairi");
        assert_eq!(p[0].ty, ParamType::Aggregate { size: 8 }, "{opt}: {p:?}");
        assert_eq!(p[0].type_name, "Pair");
        assert!(regs(&p)[0]
            .as_ref()
            .unwrap_err()
            .contains("is a struct: not supported"));
    }
}

/// Check that an address no function starts at, and a binary without DWARF, give None.
#[test]
fn no_dwarf_is_none() {
    let dir = tempfile::tempdir().unwrap();
    let bin = build(dir.path(), "gcc", "params_fixture.c", &["-O2"]);
    let data = std::fs::read(&bin).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let f_int = file.symbols().find(|s| s.name() == Ok("f_int")).unwrap();
    assert_eq!(function_params(&bin, f_int.address()).unwrap(), None);
    let with = build(dir.path(), "gcc", "params_fixture.c", &["-O0", "-g"]);
    assert_eq!(function_params(&with, 1).unwrap(), None);
    assert!(matches!(
        function_params(&dir.path().join("missing"), 0),
        Err(SymbolError::Io { .. })
    ));
}

/// Check that a stripped binary's parameters come from its separate debug file (`.gnu_debuglink`, next to it).
#[test]
fn separate_debug_file() {
    let dir = tempfile::tempdir().unwrap();
    let bin = build(dir.path(), "gcc", "params_fixture.c", &["-O2", "-g"]);
    let debug = dir.path().join("params.debug");
    let run = |args: &[&std::ffi::OsStr]| {
        let st = Command::new("objcopy").args(args).status().unwrap();
        assert!(st.success(), "objcopy {args:?}");
    };
    run(&["--only-keep-debug".as_ref(), bin.as_ref(), debug.as_ref()]);
    run(&["--strip-debug".as_ref(), bin.as_ref()]);
    let link = format!("--add-gnu-debuglink={}", debug.display());
    run(&[link.as_ref(), bin.as_ref()]);
    let p = params(&bin, "f_int");
    let names: Vec<&str> = p.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["len", "name", "scale", "extra"]);
}
