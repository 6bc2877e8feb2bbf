//! Values through pointers, fetched by the uprobe in the kernel: struct members by DWARF name
//! (`req->len`, `req->name:str`, `req->tag:str`, `req->next->id`), offsets (`arg0->4:u32`), string arrays
//! (`words:str[4]`, cut at the array's NULL); and execsnoop's argv from ld.so's `_dl_start`, whose argument
//! is the new program's initial stack pointer (argc, then argv[0..]).
mod common;
use common::{build_c, privileged, rprof_ok};
use std::path::Path;

/// Check every value of the fixture's three calls exactly.
#[test]
fn members_offsets_and_string_arrays() {
    if !privileged("members_offsets_and_string_arrays") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "ptr_values.c", &["-g", "-O1"]);
    let b = bin.to_str().unwrap();
    let spec = "handle(req->id, req->len, req->name:str, req->tag:str, req->next->id, arg0->4:u32, words:str[4])";
    let out = rprof_ok(&["probe", "--trace", "-x", b, spec, "--", b]);
    let calls: Vec<&str> = out
        .lines()
        .filter_map(|l| l.split_once("handle(").map(|(_, c)| c))
        .collect();
    assert_eq!(calls.len(), 3, "{out}");
    let names = ["first", "second", "third"];
    for (i, call) in calls.iter().enumerate() {
        let want = format!(
            "req->id={i}, req->len={}, req->name=\"{}\", req->tag=\"tag{i}\", req->next->id=99, arg0->4={}, \
             words[0]=\"alpha\", words[1]=\"beta\", words[2]=\"gamma\")",
            100 + i,
            names[i],
            100 + i
        );
        assert!(call.starts_with(&want), "call {i}: {call}\nwanted {want}");
    }
    // The offsets come from DWARF, and the fetch arguments read through them.
    let list = rprof_ok(&["probe", "-l", "-x", b, spec]);
    assert!(
        list.contains("+4(%di):u32") && list.contains("+0(+8(%di)):string"),
        "{list}"
    );
    // A member that is not there names the struct's members.
    let out = common::rprof()
        .args(["probe", "-l", "-x", b, "handle(req->size)"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("no member `size`") && err.contains("len"),
        "{err}"
    );
}

/// Check that ld.so's `_dl_start(arg0->0:u64, arg0+8:str[8])` gives each exec'd dynamically linked program's
/// argc and whole argv, under the new program's name, as the test ran them.
#[test]
fn argv_of_execed_programs_from_ld_so() {
    if !privileged("argv_of_execed_programs_from_ld_so") {
        return;
    }
    let ld = "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2";
    if !Path::new(ld).exists() {
        return common::skip("argv_of_execed_programs_from_ld_so", "no x86-64 ld.so");
    }
    // The command runs the programs; rprof follows it and its children.
    let script = "/bin/echo one two three >/dev/null; /usr/bin/env -i /bin/true 'with space' x; /bin/ls -d / >/dev/null";
    let out = rprof_ok(&[
        "probe",
        "--trace",
        "-x",
        ld,
        "_dl_start(arg0->0:u64, arg0+8:str[8])",
        "--",
        "/bin/sh",
        "-c",
        script,
    ]);
    let line = |comm: &str| {
        out.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(comm) && l.contains("_dl_start("))
            .unwrap_or_else(|| panic!("no exec of {comm}:\n{out}"))
    };
    assert!(line("echo").contains("_dl_start(arg0->0=4, arg0+8[0]=\"/bin/echo\", arg0+8[1]=\"one\", arg0+8[2]=\"two\", arg0+8[3]=\"three\")"), "{out}");
    assert!(line("true").contains("_dl_start(arg0->0=3, arg0+8[0]=\"/bin/true\", arg0+8[1]=\"with space\", arg0+8[2]=\"x\")"), "{out}");
    assert!(
        line("ls").contains(
            "_dl_start(arg0->0=3, arg0+8[0]=\"/bin/ls\", arg0+8[1]=\"-d\", arg0+8[2]=\"/\")"
        ),
        "{out}"
    );
}
