//! Tests of tracepoint field rendering, on the formats of kernel 6.18's tracefs.
use super::*;

const SCHED_SWITCH: &str = r#"
name: sched_switch
ID: 372
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:unsigned char common_flags;	offset:2;	size:1;	signed:0;
	field:unsigned char common_preempt_count;	offset:3;	size:1;	signed:0;
	field:int common_pid;	offset:4;	size:4;	signed:1;

	field:char prev_comm[16];	offset:8;	size:16;	signed:0;
	field:pid_t prev_pid;	offset:24;	size:4;	signed:1;
	field:int prev_prio;	offset:28;	size:4;	signed:1;
	field:long prev_state;	offset:32;	size:8;	signed:1;
	field:char next_comm[16];	offset:40;	size:16;	signed:0;
	field:pid_t next_pid;	offset:56;	size:4;	signed:1;
	field:int next_prio;	offset:60;	size:4;	signed:1;

print fmt: "prev_comm=%s prev_pid=%d prev_prio=%d prev_state=%s%s ==> next_comm=%s next_pid=%d next_prio=%d", REC->prev_comm, REC->prev_pid, REC->prev_prio, (REC->prev_state & ((((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) - 1)) ? __print_flags(REC->prev_state & ((((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) - 1), "|", { 0x00000001, "S" }, { 0x00000002, "D" }, { 0x00000004, "T" }, { 0x00000008, "t" }, { 0x00000010, "X" }, { 0x00000020, "Z" }, { 0x00000040, "P" }, { 0x00000080, "I" }) : "R", REC->prev_state & (((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) ? "+" : "", REC->next_comm, REC->next_pid, REC->next_prio
"#;

const OPENAT: &str = r#"
name: sys_enter_openat
ID: 782
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:unsigned char common_flags;	offset:2;	size:1;	signed:0;
	field:unsigned char common_preempt_count;	offset:3;	size:1;	signed:0;
	field:int common_pid;	offset:4;	size:4;	signed:1;

	field:int __syscall_nr;	offset:8;	size:4;	signed:1;
	field:int dfd;	offset:16;	size:8;	signed:0;
	field:const char * filename;	offset:24;	size:8;	signed:0;
	field:int flags;	offset:32;	size:8;	signed:0;
	field:umode_t mode;	offset:40;	size:8;	signed:0;

print fmt: "dfd: 0x%08lx, filename: 0x%08lx, flags: 0x%08lx, mode: 0x%08lx", ((unsigned long)(REC->dfd)), ((unsigned long)(REC->filename)), ((unsigned long)(REC->flags)), ((unsigned long)(REC->mode))
"#;

const EXEC: &str = r#"
name: sched_process_exec
ID: 365
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:unsigned char common_flags;	offset:2;	size:1;	signed:0;
	field:unsigned char common_preempt_count;	offset:3;	size:1;	signed:0;
	field:int common_pid;	offset:4;	size:4;	signed:1;

	field:__data_loc char[] filename;	offset:8;	size:4;	signed:0;
	field:pid_t pid;	offset:12;	size:4;	signed:1;
	field:pid_t old_pid;	offset:16;	size:4;	signed:1;

print fmt: "filename=%s pid=%d old_pid=%d", __get_str(filename), REC->pid, REC->old_pid
"#;

/// A record of `size` bytes with `(offset, bytes)` written in.
fn record(size: usize, parts: &[(usize, &[u8])]) -> Vec<u8> {
    let mut raw = vec![0u8; size];
    for (at, bytes) in parts {
        raw[*at..*at + bytes.len()].copy_from_slice(bytes);
    }
    raw
}

/// Check sched_switch as perf prints it: comms, pids, and prev_state's letters with `R` for none and the
/// `+` of a preempted task.
#[test]
fn sched_switch_as_perf() {
    let p = EventPrinter::new(SCHED_SWITCH);
    assert!(p.pieces.is_some());
    let raw = |state: u64| {
        record(
            64,
            &[
                (8, b"rprof"),
                (24, &12721i32.to_le_bytes()),
                (28, &120i32.to_le_bytes()),
                (32, &state.to_le_bytes()),
                (40, b"tail"),
                (56, &12722i32.to_le_bytes()),
                (60, &120i32.to_le_bytes()),
            ],
        )
    };
    let line = |state: &str| {
        format!(
            "prev_comm=rprof prev_pid=12721 prev_prio=120 prev_state={state} ==> next_comm=tail \
             next_pid=12722 next_prio=120"
        )
    };
    assert_eq!(p.render(&raw(0)), line("R"));
    assert_eq!(p.render(&raw(0x100)), line("R+"));
    assert_eq!(p.render(&raw(1)), line("S"));
    assert_eq!(p.render(&raw(2)), line("D"));
    assert_eq!(p.render(&raw(0x80)), line("I"));
}

/// Check a syscall's entry: `((unsigned long)(REC->dfd))` in `0x%08lx`, as perf prints AT_FDCWD (the
/// register's 32 bits).
#[test]
fn openat_as_perf() {
    let p = EventPrinter::new(OPENAT);
    let raw = record(
        48,
        &[
            (16, &0xffff_ff9cu64.to_le_bytes()),
            (24, &0x7ffa_d66d_30b1u64.to_le_bytes()),
            (32, &0x80000u64.to_le_bytes()),
        ],
    );
    assert_eq!(
        p.render(&raw),
        "dfd: 0xffffff9c, filename: 0x7ffad66d30b1, flags: 0x00080000, mode: 0x00000000"
    );
}

/// Check `__get_str` of a `__data_loc` string.
#[test]
fn exec_filename_from_data_loc() {
    let p = EventPrinter::new(EXEC);
    let loc = (10u32 << 16 | 20).to_le_bytes();
    let raw = record(
        30,
        &[
            (8, &loc),
            (12, &77i32.to_le_bytes()),
            (16, &77i32.to_le_bytes()),
            (20, b"/bin/true\0"),
        ],
    );
    assert_eq!(p.render(&raw), "filename=/bin/true pid=77 old_pid=77");
}

/// Check the fallback: a `print fmt` with a helper not rendered gives `field=value` pairs, and so does a
/// negative 4-byte field printed with `%ld` (its high bits are not known); a record too short never panics.
#[test]
fn falls_back_to_pairs() {
    let fmt = "name: x\nID: 9\nformat:\n\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\
               \tfield:int a;\toffset:8;\tsize:4;\tsigned:1;\n\tfield:char c[4];\toffset:12;\tsize:4;\tsigned:0;\n\
               \tfield:unsigned long p;\toffset:16;\tsize:8;\tsigned:0;\n\n";
    let raw = record(
        24,
        &[
            (8, &(-5i32).to_le_bytes()),
            (12, b"ab"),
            (16, &255u64.to_le_bytes()),
        ],
    );
    let helper = format!("{fmt}print fmt: \"%s\", __print_hex(REC->c, 4)\n");
    let p = EventPrinter::new(&helper);
    assert!(p.pieces.is_none());
    assert_eq!(p.render(&raw), "a=-5 c=ab p=0xff");
    let wide = EventPrinter::new(&format!("{fmt}print fmt: \"a=%ld\", REC->a\n"));
    assert!(wide.pieces.is_some());
    assert_eq!(wide.render(&raw), "a=-5 c=ab p=0xff");
    let narrow = EventPrinter::new(&format!("{fmt}print fmt: \"a=%d p=%lu\", REC->a, REC->p\n"));
    assert_eq!(narrow.render(&raw), "a=-5 p=255");
    assert_eq!(narrow.render(&raw[..10]), "a=? c=? p=?");
}

/// Check printf's flags, widths, precisions and lengths.
#[test]
fn conversions_as_printf() {
    let show = |fmt: &str, val: Val| {
        let mut chars = fmt.chars().peekable();
        convert(&spec(&mut chars).unwrap(), &val).unwrap()
    };
    let n = |v: u64, bits| Val::Num {
        v,
        bits,
        signed: false,
    };
    assert_eq!(show("08lx", n(0x80000, 64)), "00080000");
    assert_eq!(show("x", n(0xffff_ffff_ffff_ff9c, 64)), "ffffff9c");
    assert_eq!(show("d", n(0xffff_ff9c, 32)), "-100");
    assert_eq!(show("03d", n(1, 32)), "001");
    assert_eq!(show("-5u|", n(42, 32)), "42   ");
    assert_eq!(show("#x", n(255, 32)), "0xff");
    assert_eq!(show("llu", n(u64::MAX, 64)), u64::MAX.to_string());
    assert_eq!(show("hhd", n(0xff, 8)), "-1");
    assert_eq!(show("c", n(65, 8)), "A");
    assert_eq!(show("p", n(0x1000, 64)), "0x1000");
    assert_eq!(show("6s", Val::Str("ab".into())), "    ab");
    assert_eq!(show(".1s", Val::Str("ab".into())), "a");
    let mut chars = "pS".chars().peekable();
    assert!(spec(&mut chars).is_none());
}
