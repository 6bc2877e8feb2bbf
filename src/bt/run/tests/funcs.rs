//! Functions with output of their own (`system`, `cat`) and the rest of the value functions, against
//! bpftrace 0.17's output on this machine.
use super::*;

/// Check system() and cat() in order with printf, in text and json; a file that cannot be read gives
/// bpftrace's error line and an empty message (`bpftrace --unsafe [-f json] -e '...'`).
#[test]
fn system_and_cat() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("f.txt");
    std::fs::write(&file, "hello-file\n").expect("write");
    let f = file.display();
    let src =
        format!(r#"BEGIN {{ system("echo hi %d", 5); cat("{f}"); printf("after\n"); exit(); }}"#);
    assert_eq!(begin(&src), "hi 5\nhello-file\nafter\n\n\n");
    let src =
        format!(r#"BEGIN {{ system("echo hi %d", 5); cat("{f}"); cat("/nonexist"); exit(); }}"#);
    let (out, err) = run_with(&src, &[], OutputFormat::Json, &|_, _| {});
    assert_eq!(
        out,
        "{\"type\": \"syscall\", \"data\": \"hi 5\\n\"}\n{\"type\": \"cat\", \"data\": \"hello-file\\n\"}\n\
         {\"type\": \"cat\", \"data\": \"\"}\n\n\n"
    );
    assert_eq!(
        err,
        "ERROR: failed to open file '/nonexist': No such file or directory\n"
    );
}

/// Check a ternary of strings, else-if chains, `probe` in BEGIN, strftime's year, elapsed, a keyless
/// count() map printed (bpftrace printed `a`, `2`, `2026|BEGIN|1` in 2026).
#[test]
fn ternary_else_if_probe_strftime() {
    let out = begin(
        r#"BEGIN { $s = 1 ? "a" : "bb"; print($s); if (0) { print(1); } else if (1) { print(2); } else { print(3); } printf("%s|%s|%d\n", strftime("%Y", nsecs), probe, elapsed < 1000000000); @x = count(); print(@x); exit(); }"#,
    );
    let year = crate::bt::strftime::time_text(
        "%Y",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs() as i64,
        &crate::bt::strftime::Zone::local(),
    )
    .expect("year");
    assert_eq!(out, format!("a\n2\n{year}|BEGIN|1\n@x: 1\n\n\n@x: 1\n"));
}

/// Check ntop() of address bytes (IPv4, IPv6, pton's), macaddr() of bytes, strcontains().
#[test]
fn addresses_and_bytes() {
    let src = r#"tracepoint:sched:sched_wakeup { printf("%s %s %s %d %d\n", ntop(args->comm), ntop(pton("::1")), macaddr(args->comm), strcontains(args->comm, "bc"), strcontains(args->comm, "x")); }"#;
    let (out, _) = run_with(src, &[], OutputFormat::Text, &|rt, io| {
        let comm = crate::bt::value::Value::Str(vec![b'a', b'b', b'c', b'd', 1, 255]);
        let values = [(crate::bt::values::ValueRef::Field("comm".into()), comm)];
        let ev = Event {
            blocks: &[0],
            probe: "tracepoint:sched:sched_wakeup",
            func: "",
            time_ns: 1,
            pid: 1,
            tid: 1,
            cpu: 0,
            comm: b"x",
            uid: 0,
            gid: 0,
            values: &values,
            kstack: None,
            ustack: None,
            symbols: &NoSymbols,
        };
        rt.event(&ev, io);
    });
    assert_eq!(out, "97.98.99.100 ::1 61:62:63:64:01:FF 1 0\n\n\n");
}

/// Check that signal() goes to the event's process (a child `sleep` ends by SIGTERM).
#[test]
fn signal_to_the_event_process() {
    use std::os::unix::process::ExitStatusExt;
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("sleep");
    let pid = child.id();
    let src = r#"tracepoint:syscalls:sys_enter_write { signal("SIGTERM"); }"#;
    run_with(src, &[], OutputFormat::Text, &|rt, io| {
        let ev = Event {
            blocks: &[0],
            probe: "tracepoint:syscalls:sys_enter_write",
            func: "",
            time_ns: 1,
            pid,
            tid: pid,
            cpu: 0,
            comm: b"sleep",
            uid: 0,
            gid: 0,
            values: &[],
            kstack: None,
            ustack: None,
            symbols: &NoSymbols,
        };
        rt.event(&ev, io);
    });
    let status = child.wait().expect("wait");
    assert_eq!(status.signal(), Some(15));
}
