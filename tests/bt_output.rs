//! rprof's bpftrace printer (src/bt/) against bpftrace 0.17 itself, byte for byte.
//!
//! Each case is a bpftrace program whose `BEGIN` builds maps from constants and exits, and the same values fed
//! to rprof's maps and printer. The expected text is bpftrace's: in `tests/bt_golden/` (written by running
//! `RPROF_BT_GOLDEN_WRITE=1 cargo test --test bt_output`, which runs `bpftrace -e PROGRAM` and `bpftrace -f
//! json -e PROGRAM` and stores their stdout), and, when bpftrace is installed, from bpftrace run in the same
//! test (skipped with a reason without it; a failure with RPROF_REQUIRE_PRIVILEGED=1).
//!
//! Cases avoid ties between count/sum values: bpftrace's order among equal values follows its hash map's and
//! is unspecified.

mod common;

mod bt_cases;

use bt_cases::{cases, Case};
use rprof::bt::print::OutputFormat;
use std::path::PathBuf;
use std::process::Command;

fn golden(case: &Case, format: OutputFormat) -> PathBuf {
    let suffix = if format == OutputFormat::Json {
        ".json"
    } else {
        ".txt"
    };
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/bt_golden")
        .join(format!("{}{suffix}", case.name))
}

/// bpftrace's stdout for the case, or `None` when bpftrace is not installed.
fn bpftrace(case: &Case, format: OutputFormat) -> Option<String> {
    let mut cmd = Command::new("bpftrace");
    if format == OutputFormat::Json {
        cmd.args(["-f", "json"]);
    }
    cmd.args(["-e", case.program]);
    for (k, v) in case.env {
        cmd.env(k, v);
    }
    let out = cmd.output().ok()?;
    assert!(
        out.status.success(),
        "bpftrace -e '{}' failed: {}",
        case.program,
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8(out.stdout).expect("bpftrace prints UTF-8 here"))
}

fn first_difference(want: &str, got: &str) -> String {
    for (i, (w, g)) in want.lines().zip(got.lines()).enumerate() {
        if w != g {
            return format!("line {}: bpftrace {w:?}, rprof {g:?}", i + 1);
        }
    }
    format!(
        "line counts: bpftrace {}, rprof {}",
        want.lines().count(),
        got.lines().count()
    )
}

fn check(case: &Case, format: OutputFormat, want: &str, source: &str) {
    let got = (case.rprof)(format);
    assert!(
        got == want,
        "case {} ({format:?}) differs from {source}: {}\n--- bpftrace\n{want}--- rprof\n{got}",
        case.name,
        first_difference(want, &got)
    );
}

fn formats(case: &Case) -> Vec<OutputFormat> {
    if case.json {
        vec![OutputFormat::Text, OutputFormat::Json]
    } else {
        vec![OutputFormat::Text]
    }
}

/// rprof prints what bpftrace printed on this machine, kept in tests/bt_golden/.
#[test]
fn printer_matches_bpftrace_golden_outputs() {
    let write = std::env::var("RPROF_BT_GOLDEN_WRITE").as_deref() == Ok("1");
    for case in cases().into_iter().filter(|c| c.golden) {
        for format in formats(&case) {
            let path = golden(&case, format);
            if write && case.live {
                let out = bpftrace(&case, format).expect("RPROF_BT_GOLDEN_WRITE=1 needs bpftrace");
                std::fs::write(&path, out).unwrap();
            }
            let want = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            check(&case, format, &want, &path.display().to_string());
        }
    }
}

/// rprof prints what bpftrace prints, both run now on the same values.
#[test]
fn printer_matches_bpftrace_run_now() {
    let test = "printer_matches_bpftrace_run_now";
    if !common::privileged(test) {
        return;
    }
    if Command::new("bpftrace").arg("--version").output().is_err() {
        common::skip(test, "bpftrace is not installed (apt-get install bpftrace)");
        return;
    }
    for case in cases().into_iter().filter(|c| c.live) {
        for format in formats(&case) {
            let want = bpftrace(&case, format).expect("bpftrace ran for --version");
            check(&case, format, &want, "bpftrace run now");
        }
    }
}

/// `join(args->argv)` and `join(args->argv, ",")` of a real exec, against bpftrace on the same exec: the
/// arguments up to the first empty one, joined.
#[test]
fn join_matches_bpftrace_on_an_exec() {
    use rprof::bt::format::join;
    use rprof::bt::print::{MessageType, Printer, EXIT_PREAMBLE};
    use std::io::Read;
    let test = "join_matches_bpftrace_on_an_exec";
    if !common::privileged(test) {
        return;
    }
    if Command::new("bpftrace").arg("--version").output().is_err() {
        common::skip(test, "bpftrace is not installed (apt-get install bpftrace)");
        return;
    }
    let argv = ["/bin/echo", "a", "b c", "", "d"];
    let program = r#"tracepoint:syscalls:sys_enter_execve /str(args->filename) == "/bin/echo"/ { join(args->argv); join(args->argv, ","); exit(); }"#;
    for format in [OutputFormat::Text, OutputFormat::Json] {
        let mut cmd = Command::new("bpftrace");
        if format == OutputFormat::Json {
            cmd.args(["-f", "json"]);
        }
        let child = cmd
            .args(["-e", program])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut guard = common::KillOnDrop(child);
        let mut stdout = guard.0.stdout.take().unwrap();
        let attached = common::read_line(&mut stdout);
        // bpftrace prints "Attaching" before it attaches: exec until it has seen one (it exits at the first).
        let reader = std::thread::spawn(move || {
            let mut rest = String::new();
            stdout.read_to_string(&mut rest).unwrap();
            rest
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !reader.is_finished() {
            assert!(
                std::time::Instant::now() < deadline,
                "bpftrace saw no exec of {} in 60 s",
                argv[0]
            );
            let status = Command::new(argv[0])
                .args(&argv[1..])
                .stdout(std::process::Stdio::null())
                .status();
            assert!(status.unwrap().success());
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let rest = reader.join().unwrap();
        let got_bpftrace = format!("{attached}\n{rest}");

        let p = Printer::new(format);
        let args: Vec<Vec<u8>> = argv.iter().map(|a| a.as_bytes().to_vec()).collect();
        let mut want_rprof = p.attached_probes(1);
        want_rprof.push_str(&p.message(MessageType::Join, &join(&args, " "), true));
        want_rprof.push_str(&p.message(MessageType::Join, &join(&args, ","), true));
        want_rprof.push_str(EXIT_PREAMBLE);
        assert_eq!(want_rprof, got_bpftrace, "join in {format:?}");
    }
}
