//! `:str` by the parameter's DWARF type: C++ strings read through their data pointer and length, and a
//! parameter that is not text refused with its type named.
mod common;
use common::{build_c, privileged, rprof};

/// Check that `NAME:str` prints the text of a `const std::string&` (the issue's `shop::Cart::add`, short and
/// long strings), a std::string by value and by pointer, a std::string_view by value (two registers) and by
/// reference (cut at their length, not at the next NUL), and a `const char *`, at -O0 and -O2.
#[test]
fn cxx_strings_print_their_text() {
    if !privileged("cxx_strings_print_their_text") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for opt in ["-O0", "-O2"] {
        let bin = build_c(dir.path(), "probe_strings.cpp", &[opt, "-g", "-std=c++17"]);
        let out = rprof()
            .args(["probe", "--trace", "-x"])
            .arg(&bin)
            .args([
                "shop::Cart::add(item:str, qty)",
                "by_value(s:str)",
                "by_pointer(s:str)",
                "view(v:str, n)",
                "view_ref(v:str)",
                "chars(s:str)",
                "--",
            ])
            .arg(&bin)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{opt}: {stderr}");
        for call in [
            r#"shop::Cart::add(item="apple", qty=2)"#,
            r#"shop::Cart::add(item="a basket of thirty-two green figs", qty=1)"#,
            r#"by_value(s="short")"#,
            r#"by_value(s="a string too long for the buffer")"#,
            r#"by_pointer(s="a basket of thirty-two green figs")"#,
            r#"view(v="banana", n=3)"#,
            r#"view_ref(v="split")"#,
            r#"chars(s="plain")"#,
        ] {
            assert!(text.contains(call), "{opt}: want {call}:\n{text}\n{stderr}");
        }
    }
}

/// Check that `:str` on an `int` parameter is an error that names its type, and probes nothing.
#[test]
fn str_on_an_int_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(
        dir.path(),
        "probe_strings.cpp",
        &["-O2", "-g", "-std=c++17"],
    );
    let out = rprof()
        .args(["probe", "-l", "-x"])
        .arg(&bin)
        .arg("number(n:str)")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("`n` is an int, not a pointer"),
        "want the type named: {stderr}"
    );
}
