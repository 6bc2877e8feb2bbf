//! `rprof bt`'s front end (parse and check) on real programs: every program of issue 42 and every bpftrace tool
//! in /usr/sbin parses; each checks clean, or is refused only for what this kernel lacks (kprobes, kernel
//! memory), in bpftrace's error format. Bad programs give the error text bpftrace 0.17 prints for them on this
//! machine, with bpftrace run as the peer in the same test.
mod common;

use rprof::bt::check::{Env, Kernel, TpField, TracepointFields};
use rprof::bt::{front, parser};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Tracepoint fields from the `format` files of the tracefs tree at `root` (what the plan layer will read).
struct FormatFiles(PathBuf);

impl TracepointFields for FormatFiles {
    fn fields(&self, category: &str, event: &str) -> Option<Vec<TpField>> {
        let text = std::fs::read_to_string(
            self.0
                .join("events")
                .join(category)
                .join(event)
                .join("format"),
        )
        .ok()?;
        let fields = rprof::tracefs::parse_format(&text)
            .into_iter()
            .filter(|f| !f.is_common())
            .map(|f| TpField {
                name: f.name,
                decl: f.ty,
                size: f.size,
                signed: f.signed,
            })
            .collect();
        Some(fields)
    }

    fn expand(&self, category: &str, event: &str) -> Vec<(String, String)> {
        let glob = |g: &str| globset::Glob::new(g).expect("glob").compile_matcher();
        let (c, e) = (glob(category), glob(event));
        let mut found = Vec::new();
        for cat in std::fs::read_dir(self.0.join("events"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let cname = cat.file_name().to_string_lossy().into_owned();
            if !c.is_match(&cname) || !cat.path().is_dir() {
                continue;
            }
            for ev in std::fs::read_dir(cat.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let ename = ev.file_name().to_string_lossy().into_owned();
                if e.is_match(&ename) && ev.path().join("format").exists() {
                    found.push((cname.clone(), ename));
                }
            }
        }
        found.sort();
        found
    }
}

/// The tracefs tree, mounted by rprof's own layer; None (after a skip line) when it cannot be had.
fn tracefs(test: &str) -> Option<PathBuf> {
    if !common::privileged(test) {
        return None;
    }
    match rprof::tracefs::Tracefs::find_or_mount() {
        Ok(t) => Some(t.root().to_path_buf()),
        Err(e) => {
            common::skip(test, &format!("no tracefs: {e}"));
            None
        }
    }
}

fn env<'a>(root: &Path, fields: &'a FormatFiles, params: &[&str]) -> Env<'a> {
    Env {
        kernel: Kernel::detect(root),
        tracepoints: fields,
        params: params.iter().map(|p| p.to_string()).collect(),
        has_child: false,
        unsafe_ok: false,
        strlen: 64,
    }
}

/// The programs of issue 42, as written (fuzz/bt_seeds/issue42_*.bt; offcpu's `__PID__` and `__DUR__`
/// replaced by 1234 and 5, as its text says). oncpu.bt takes `$1 $2 $3` = 1234 99 5.
fn issue_programs() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/bt_seeds");
    let mut programs: Vec<(String, String)> = std::fs::read_dir(&dir)
        .expect("fuzz/bt_seeds")
        .flatten()
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read_to_string(e.path()).unwrap(),
            )
        })
        .filter(|(name, _)| name.starts_with("issue42_"))
        .collect();
    programs.sort();
    assert_eq!(programs.len(), 5, "the five programs of issue 42");
    programs
}

/// Check that every program of the issue parses and checks clean on this machine.
#[test]
fn issue_programs_check() {
    let Some(root) = tracefs("issue_programs_check") else {
        return;
    };
    let fields = FormatFiles(root.clone());
    for (name, src) in issue_programs() {
        if let Err(text) = front(&src, &name, &env(&root, &fields, &["1234", "99", "5"])) {
            panic!("{name}\n{text}");
        }
    }
}

/// The bpftrace tools of Debian's package, or None (after a skip line) when bpftrace is not installed.
fn sbin_tools(test: &str) -> Option<Vec<PathBuf>> {
    let mut tools: Vec<PathBuf> = std::fs::read_dir("/usr/sbin")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "bt"))
        .collect();
    tools.sort();
    if tools.is_empty() {
        common::skip(
            test,
            "no /usr/sbin/*.bt (Debian's bpftrace package is not installed)",
        );
        return None;
    }
    Some(tools)
}

/// Why a tool may be refused here: what this kernel lacks, as the checker's messages name it ("table of kernel
/// constants": an enum of the kernel's BTF that rprof does not read, in tcpdrop.bt, which is refused for its
/// kernel struct casts anyway).
const LACKS: &[&str] = &[
    "needs kprobes",
    "reads kernel memory",
    "kernel's task_struct",
    "casting to 'struct",
    "need its C layout",
    "table of kernel constants",
];

/// Check that every /usr/sbin/*.bt parses, and checks clean or is refused only for what this kernel lacks.
#[test]
fn sbin_tools_parse_and_check() {
    let Some(tools) = sbin_tools("sbin_tools_parse_and_check") else {
        return;
    };
    let Some(root) = tracefs("sbin_tools_parse_and_check") else {
        return;
    };
    let fields = FormatFiles(root.clone());
    let kernel = Kernel::detect(&root);
    let (mut clean, mut refused, mut wrong) = (Vec::new(), Vec::new(), Vec::new());
    for tool in &tools {
        let src = std::fs::read_to_string(tool).unwrap();
        let name = tool.file_name().unwrap().to_string_lossy().into_owned();
        let parsed = parser::parse(&src);
        assert!(
            parsed.errors.is_empty(),
            "{name} does not parse: {:?}",
            parsed.errors
        );
        match front(&src, &name, &env(&root, &fields, &[])) {
            Ok(_) => clean.push(name),
            Err(text) => {
                let errors: Vec<&str> = text.lines().filter(|l| l.contains(": ERROR: ")).collect();
                if errors.iter().all(|e| LACKS.iter().any(|l| e.contains(l))) {
                    refused.push(name);
                } else {
                    wrong.push(format!("{name}: refused for something else:\n{text}"));
                }
            }
        }
    }
    eprintln!(
        "{} tools check clean: {}\n{} refused (kprobes: {}): {}",
        clean.len(),
        clean.join(" "),
        refused.len(),
        kernel.kprobes,
        refused.join(" ")
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // The tools the issue names as running here without kprobes or kernel memory.
    for tool in [
        "bashreadline",
        "bitesize",
        "execsnoop",
        "gethostlatency",
        "killsnoop",
        "opensnoop",
        "pidpersec",
        "setuids",
        "statsnoop",
        "syncsnoop",
        "syscount",
        "writeback",
        "runqlat",
        "cpuwalk",
    ] {
        let file = format!("{tool}.bt");
        if tools.iter().any(|t| t.ends_with(&file)) {
            assert!(clean.contains(&file), "{file} should check clean here");
        }
    }
}

/// bpftrace's error output for `program`, without the RLIMIT_MEMLOCK notice it prints on this machine.
fn bpftrace_errors(program: &str) -> Option<String> {
    let out = Command::new("timeout")
        .args(["20", "bpftrace", "-e", program])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stderr);
    Some(
        text.lines()
            .filter(|l| !l.contains("RLIMIT_MEMLOCK"))
            .map(|l| format!("{l}\n"))
            .collect(),
    )
}

/// Check that bad programs as people type them give the error text bpftrace 0.17 gives on this machine.
#[test]
fn bad_programs_match_bpftrace() {
    let Some(root) = tracefs("bad_programs_match_bpftrace") else {
        return;
    };
    if Command::new("bpftrace").arg("--version").output().is_err() {
        return common::skip(
            "bad_programs_match_bpftrace",
            "bpftrace is not installed (the peer)",
        );
    }
    let fields = FormatFiles(root.clone());
    let programs = [
        r#"BEGIN { printf("%d\n", "x"); }"#,
        r#"BEGIN { @x = 1; @x = "s"; }"#,
        r#"BEGIN { @x[1] = 1; @x["a"] = 2; }"#,
        r#"BEGIN { printf("hi" }"#,
        "BEGIN { /* abc ",
        "BEGIN { foo(1); }",
        "tracepoint:syscalls:sys_enter_nope { }",
        "tracepoint:syscalls:sys_enter_openat { print(args->nope); }",
        r#"BEGIN { $x = 1 + "a"; }"#,
        "BEGIN { @ = count(1); }",
        r#"BEGIN { @s = sum("a") }"#,
        "uprobe:/bin/bash { }",
        "BEGIN { @x = 1 } END { print(@y); }",
    ];
    // And more, one a line: type, argument, map, probe and builtin errors as people make them.
    let more = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bt_bad_programs.txt"),
    )
    .unwrap();
    for program in programs.into_iter().chain(more.lines()) {
        let Some(peer) = bpftrace_errors(program) else {
            return common::skip("bad_programs_match_bpftrace", "bpftrace did not run");
        };
        let ours = front(program, "stdin", &env(&root, &fields, &[])).expect_err(program);
        assert_eq!(ours, peer, "{program}");
    }
}

/// Check that `rprof bt` prints a bad program's errors as bpftrace does, with exit status 1, and runs a good
/// one.
#[test]
fn cli_prints_bpftrace_errors() {
    if tracefs("cli_prints_bpftrace_errors").is_none() {
        return;
    }
    let out = common::rprof()
        .args(["bt", "-e", "BEGIN { @x = 1; @x = \"s\"; }"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "stdin:1:17-19: ERROR: Type mismatch for @x: trying to assign value of type 'string[2]' when map already \
         contains a value of type 'int64\nBEGIN { @x = 1; @x = \"s\"; }\n                ~~\n"
    );
    // A good one runs: bpftrace 0.17 prints `hi`, then at exit `\n\n` and the map (`-q`: no "Attaching" line).
    let out = common::rprof()
        .args([
            "bt",
            "-q",
            "-e",
            "BEGIN { printf(\"hi\\n\"); @n = 7; exit(); }",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hi\n\n\n@n: 7\n",
        "as bpftrace -q prints it"
    );
}

/// Check that `rprof bt -l` and `-lv` list tracepoints and their fields as bpftrace 0.17 does here.
#[test]
fn list_tracepoints_as_bpftrace() {
    if tracefs("list_tracepoints_as_bpftrace").is_none() {
        return;
    }
    if Command::new("bpftrace").arg("--version").output().is_err() {
        return common::skip(
            "list_tracepoints_as_bpftrace",
            "bpftrace is not installed (the peer)",
        );
    }
    for args in [
        &["-lv", "tracepoint:syscalls:sys_enter_openat"][..],
        &["-lv", "t:sched:sched_switch"],
        &["-lv", "tracepoint:sched:sched_process_exec"],
        &["-l", "tracepoint:sched:*"],
        &["-l", "tracepoint:sched*:sched_switch"],
    ] {
        let peer = Command::new("timeout")
            .arg("20")
            .arg("bpftrace")
            .args(args)
            .output()
            .unwrap();
        let ours = common::rprof().arg("bt").args(args).output().unwrap();
        assert_eq!(ours.status.code(), Some(0), "{args:?}");
        assert_eq!(
            String::from_utf8_lossy(&ours.stdout),
            String::from_utf8_lossy(&peer.stdout),
            "{args:?}"
        );
    }
}
