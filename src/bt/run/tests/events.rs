//! The issue's programs (`fuzz/bt_seeds/issue42_*.bt`) fed tracepoint, profile and interval events built by
//! hand. The expected texts follow bpftrace 0.17's rules as the BEGIN programs of `super` and `ints` show
//! them (maps at exit in name order, count/sum maps by value, histograms, stacks as keys).
use super::*;
use crate::bt::value::{Frame, IntType, Value};
use crate::bt::values::ValueRef;

/// One hit of `probe` by process `pid` named `comm` at `time_ns`, with the fetched `values`.
fn hit<'a>(
    blocks: &'a [usize],
    probe: &'a str,
    time_ns: u64,
    pid: u32,
    comm: &'a [u8],
    values: &'a [(ValueRef, Value)],
) -> Event<'a> {
    Event {
        blocks,
        probe,
        func: "",
        time_ns,
        pid,
        tid: pid,
        cpu: 1,
        comm,
        uid: 0,
        gid: 0,
        values,
        kstack: None,
        ustack: None,
        symbols: &NoSymbols,
    }
}

fn field(name: &str, v: Value) -> (ValueRef, Value) {
    (ValueRef::Field(name.to_string()), v)
}

fn comm16(s: &str) -> Value {
    Value::Str(s.as_bytes().to_vec())
}

const I32: IntType = IntType {
    bits: 32,
    signed: true,
};

/// A histogram's line: the label, the count, its bar of `@` (52 wide at the largest count).
fn bar(label: &str, count: u64, max: u64) -> String {
    let n = (count * 52 / max) as usize;
    format!(
        "{label:<16}{count:>8} |{}{}|\n",
        "@".repeat(n),
        " ".repeat(52 - n)
    )
}

/// Check issue 42's write counter: count() and sum() keyed by comm, sum of an unsigned field.
#[test]
fn writes_by_comm() {
    let src = "tracepoint:syscalls:sys_enter_write { @write_counts[comm] = count(); @write_bytes[comm] = sum(args->count); }";
    let (out, err) = run_with(src, &[], OutputFormat::Text, &|rt, io| {
        let probe = "tracepoint:syscalls:sys_enter_write";
        for (comm, n) in [("bash", 100u64), ("sshd", 4), ("sshd", 6)] {
            let values = [field("count", Value::uint(n))];
            let ev = hit(&[0], probe, 5, 42, comm.as_bytes(), &values);
            assert_eq!(rt.event(&ev, io), Flow::Continue);
        }
    });
    assert_eq!(
        out,
        "\n\n@write_bytes[sshd]: 10\n@write_bytes[bash]: 100\n@write_counts[bash]: 1\n@write_counts[sshd]: 2\n"
    );
    assert_eq!(err, "");
}

/// Check opensnoop's printf with `str(args->filename)`, and `str(args->filename, 10)` keeping 10 bytes.
#[test]
fn opensnoop_strings() {
    let src = r#"tracepoint:syscalls:sys_enter_openat { printf("PID %d: %s is opening: %s\n", pid, comm, str(args->filename)); printf("%s\n", str(args->filename, 10)); }"#;
    let (out, _) = run_with(src, &[], OutputFormat::Text, &|rt, io| {
        let path = b"/lib/x86_64-linux-gnu/libc.so.6".to_vec();
        let values = [(ValueRef::FieldStr("filename".into()), Value::Str(path))];
        let ev = hit(
            &[0],
            "tracepoint:syscalls:sys_enter_openat",
            5,
            311,
            b"cat",
            &values,
        );
        rt.event(&ev, io);
    });
    assert_eq!(
        out,
        "PID 311: cat is opening: /lib/x86_64-linux-gnu/libc.so.6\n/lib/x86_6\n\n\n"
    );
}

/// Check the sched-latency program: @ts by pid, delete, hist, the printf above the threshold, END's print.
#[test]
fn sched_latency() {
    let src = std::fs::read_to_string("fuzz/bt_seeds/issue42_schedlat.bt").expect("seed");
    let (out, _) = run_with(&src, &[], OutputFormat::Text, &|rt, io| {
        let wake = "tracepoint:sched:sched_wakeup";
        let switch = "tracepoint:sched:sched_switch";
        let woken = |pid: i64| {
            [
                field("comm", comm16("fusion_thread")),
                field("pid", Value::typed(pid, I32)),
            ]
        };
        let switched = |pid: i64, next: &str| {
            [
                field("next_comm", comm16(next)),
                field("next_pid", Value::typed(pid, I32)),
                field("prev_comm", comm16("swapper/0")),
            ]
        };
        let (w, s) = (woken(77), switched(77, "fusion_thread"));
        rt.event(&hit(&[1], wake, 1_000_000, 0, b"swapper/0", &w), io);
        rt.event(&hit(&[2], switch, 3_500_000, 0, b"swapper/0", &s), io);
        // Another thread's switch, then a short latency below the threshold.
        let other = switched(78, "bash");
        rt.event(&hit(&[2], switch, 3_600_000, 0, b"swapper/0", &other), io);
        rt.event(&hit(&[1], wake, 4_000_000, 0, b"swapper/0", &w), io);
        rt.event(&hit(&[2], switch, 4_200_000, 0, b"swapper/0", &s), io);
    });
    let mut hist = String::from("@hist: \n");
    hist += &bar("[128, 256)", 1, 1);
    for label in ["[256, 512)", "[512, 1K)", "[1K, 2K)"] {
        hist += &bar(label, 0, 1);
    }
    hist += &bar("[2K, 4K)", 1, 1);
    hist += "\n";
    let want = format!(
        "sched latency: comm=fusion_thread thr=1000 us\ndelay(us)=2500 pid=77 prev=swapper/0\n{hist}\n\n{hist}@threshold: 1000\n\n"
    );
    assert_eq!(out, want);
}

fn kframes() -> Vec<Frame> {
    vec![
        Frame::named(0xffffffff81000010, "schedule", 42, None),
        Frame::named(0xffffffff81000100, "do_nanosleep", 10, None),
    ]
}

fn uframes() -> Vec<Frame> {
    vec![
        Frame::named(
            0x7f0000001000,
            "clock_nanosleep",
            5,
            Some("/usr/lib/libc.so.6"),
        ),
        Frame::unresolved(0x55550000),
    ]
}

/// Check offcpu.bt: stacks stored in maps at switch-out, used as keys at switch-in, deleted; the interval
/// block prints and exits.
#[test]
fn offcpu_stacks() {
    let src = std::fs::read_to_string("fuzz/bt_seeds/issue42_offcpu.bt").expect("seed");
    let (out, _) = run_with(&src, &[], OutputFormat::Text, &|rt, io| {
        let switch = "tracepoint:sched:sched_switch";
        let (k, u) = (kframes(), uframes());
        let out_values = [
            field("prev_pid", Value::typed(1234, I32)),
            field("next_pid", Value::typed(0, I32)),
        ];
        let mut ev = hit(&[0, 1], switch, 10_000_000, 1234, b"app", &out_values);
        ev.kstack = Some(&k);
        ev.ustack = Some(&u);
        rt.event(&ev, io);
        let in_values = [
            field("prev_pid", Value::typed(0, I32)),
            field("next_pid", Value::typed(1234, I32)),
        ];
        rt.event(
            &hit(&[0, 1], switch, 15_000_000, 0, b"swapper/1", &in_values),
            io,
        );
        let (block, period) = rt.interval_blocks()[0];
        assert_eq!(period, 5_000_000_000);
        assert_eq!(rt.run_block(block, 20_000_000, io), Flow::Exit);
    });
    let off = format!("@off: \n{}\n", bar("[4K, 8K)", 1, 1));
    let k = "@k[\n    schedule+42\n    do_nanosleep+10\n]: 1\n";
    let u = "@u[\n    clock_nanosleep+5\n    0x55550000\n]: 1\n";
    // At exit: @k, @off, @ts, @u, @uk, @uu (the deleted ones as empty lines).
    let want = format!("{off}{k}{u}\n\n{k}{off}\n{u}\n\n");
    assert_eq!(out, want);
}

/// Check oncpu.bt: parameters in BEGIN, stacks as count() keys at profile hits, print and clear and exit
/// in the interval block (the cleared maps print as empty lines at exit).
#[test]
fn oncpu_stacks() {
    let src = std::fs::read_to_string("fuzz/bt_seeds/issue42_oncpu.bt").expect("seed");
    let params = ["1234", "99", "5"];
    let (out, _) = run_with(&src, &params, OutputFormat::Text, &|rt, io| {
        let (k, u) = (kframes(), uframes());
        for (t, pid) in [(1, 1234), (2, 1234), (3, 999)] {
            let mut ev = hit(&[1], "profile:hz:99", t, pid, b"app", &[]);
            ev.kstack = Some(&k);
            ev.ustack = Some(&u);
            rt.event(&ev, io);
        }
        assert_eq!(rt.run_block(2, 10, io), Flow::Exit);
    });
    let k = "@k[\n    schedule+42\n    do_nanosleep+10\n]: 2\n";
    let u = "@u[\n    clock_nanosleep+5\n    0x55550000\n]: 2\n";
    let want = format!(
        "oncpu.bt: pid=1234 hz=99 dur=5\n\n-- kernel stacks --\n{k}\n-- user stacks --\n{u}\n\n\n\n"
    );
    assert_eq!(out, want);
}

/// Check `-f json` of an event program: printf, a stack-keyed map and the exit maps.
#[test]
fn json_of_events() {
    let src = r#"tracepoint:syscalls:sys_enter_openat { printf("%s\n", str(args->filename)); @[comm] = count(); @k[kstack(1)] = count(); }"#;
    let (out, _) = run_with(src, &[], OutputFormat::Json, &|rt, io| {
        let values = [(
            ValueRef::FieldStr("filename".into()),
            Value::str("/etc/passwd"),
        )];
        let k = kframes();
        let mut ev = hit(
            &[0],
            "tracepoint:syscalls:sys_enter_openat",
            5,
            7,
            b"cat",
            &values,
        );
        ev.kstack = Some(&k);
        rt.event(&ev, io);
    });
    let want = "{\"type\": \"printf\", \"data\": \"/etc/passwd\\n\"}\n\n\n\
                {\"type\": \"map\", \"data\": {\"@\": {\"cat\": 1}}}\n\
                {\"type\": \"map\", \"data\": {\"@k\": {\"\\n    schedule+42\\n\": 1}}}\n";
    assert_eq!(out, want);
}

/// Check that after exit() the other blocks of the event still update maps, their messages dropped until
/// END (bpftrace's reader ignores messages once exit() is seen).
#[test]
fn messages_after_exit_are_dropped() {
    let src = r#"tracepoint:syscalls:sys_enter_write { exit(); } tracepoint:syscalls:sys_enter_write { printf("late\n"); @n = count(); } END { printf("end\n"); }"#;
    let (out, _) = run_with(src, &[], OutputFormat::Text, &|rt, io| {
        let ev = hit(
            &[0, 1],
            "tracepoint:syscalls:sys_enter_write",
            5,
            7,
            b"cat",
            &[],
        );
        assert_eq!(rt.event(&ev, io), Flow::Exit);
    });
    assert_eq!(out, "end\n\n\n@n: 1\n");
}

/// Kernel symbols `k_ADDR` for every address, user symbols for none.
struct FakeSymbols;

impl Symbols for FakeSymbols {
    fn user(&self, _pid: u32, _addr: u64) -> Option<(String, u64)> {
        None
    }
    fn kernel(&self, addr: u64) -> Option<(String, u64)> {
        Some((format!("k_{addr:x}"), 3))
    }
}

/// Check that stack frames the session left unresolved are named through the event's symbols, and ksym()
/// of a field names its address without offset; `kstack(perf, 1)` keeps one frame in perf's layout.
#[test]
fn symbols_of_frames_and_ksym() {
    let src = r#"tracepoint:sched:sched_switch { printf("%s\n", ksym(args->prev_state)); @[kstack] = count(); @p[kstack(perf, 1)] = count(); }"#;
    let (out, _) = run_with(src, &[], OutputFormat::Text, &|rt, io| {
        let k = vec![Frame::unresolved(0xffff0010), Frame::unresolved(0xffff0020)];
        let values = [field("prev_state", Value::typed(0xabc, IntType::I64))];
        let mut ev = hit(
            &[0],
            "tracepoint:sched:sched_switch",
            1,
            0,
            b"swapper/0",
            &values,
        );
        ev.kstack = Some(&k);
        ev.symbols = &FakeSymbols;
        rt.event(&ev, io);
    });
    assert_eq!(
        out,
        "k_abc\n\n\n@[\n    k_ffff0010+3\n    k_ffff0020+3\n]: 1\n@p[\n\tffff0010 k_ffff0010+3\n]: 1\n"
    );
}
