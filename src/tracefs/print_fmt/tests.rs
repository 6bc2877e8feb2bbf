//! Print formats of real events, copied from this kernel's (6.18) `/sys/kernel/tracing/events/*/*/format`.
use super::*;

const INET_SOCK_SET_STATE: &str = r#"print fmt: "family=%s protocol=%s sport=%hu dport=%hu saddr=%pI4 daddr=%pI4 saddrv6=%pI6c daddrv6=%pI6c oldstate=%s newstate=%s", __print_symbolic(REC->family, { 2, "AF_INET" }, { 10, "AF_INET6" }), __print_symbolic(REC->protocol, { 6, "IPPROTO_TCP" }, { 132, "IPPROTO_SCTP" }, { 262, "IPPROTO_MPTCP" }), REC->sport, REC->dport, REC->saddr, REC->daddr, REC->saddr_v6, REC->daddr_v6, __print_symbolic(REC->oldstate, { 1, "TCP_ESTABLISHED" }, { 2, "TCP_SYN_SENT" }, { 3, "TCP_SYN_RECV" }, { 4, "TCP_FIN_WAIT1" }, { 5, "TCP_FIN_WAIT2" }, { 6, "TCP_TIME_WAIT" }, { 7, "TCP_CLOSE" }, { 8, "TCP_CLOSE_WAIT" }, { 9, "TCP_LAST_ACK" }, { 10, "TCP_LISTEN" }, { 11, "TCP_CLOSING" }, { 12, "TCP_NEW_SYN_RECV" }), __print_symbolic(REC->newstate, { 1, "TCP_ESTABLISHED" }, { 2, "TCP_SYN_SENT" }, { 3, "TCP_SYN_RECV" }, { 4, "TCP_FIN_WAIT1" }, { 5, "TCP_FIN_WAIT2" }, { 6, "TCP_TIME_WAIT" }, { 7, "TCP_CLOSE" }, { 8, "TCP_CLOSE_WAIT" }, { 9, "TCP_LAST_ACK" }, { 10, "TCP_LISTEN" }, { 11, "TCP_CLOSING" }, { 12, "TCP_NEW_SYN_RECV" })"#;

const SCHED_SWITCH: &str = r#"print fmt: "prev_comm=%s prev_pid=%d prev_prio=%d prev_state=%s%s ==> next_comm=%s next_pid=%d next_prio=%d", REC->prev_comm, REC->prev_pid, REC->prev_prio, (REC->prev_state & ((((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) - 1)) ? __print_flags(REC->prev_state & ((((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) - 1), "|", { 0x00000001, "S" }, { 0x00000002, "D" }, { 0x00000004, "T" }, { 0x00000008, "t" }, { 0x00000010, "X" }, { 0x00000020, "Z" }, { 0x00000040, "P" }, { 0x00000080, "I" }) : "R", REC->prev_state & (((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) ? "+" : "", REC->next_comm, REC->next_pid, REC->next_prio"#;

const SIGNAL_GENERATE: &str = r#"print fmt: "sig=%d errno=%d code=%d comm=%s pid=%d grp=%d res=%d", REC->sig, REC->errno, REC->code, REC->comm, REC->pid, REC->group, REC->result"#;

const TCP_PROBE: &str = r#"print fmt: "family=%s src=%pISpc dest=%pISpc mark=%#x data_len=%d snd_nxt=%#x snd_una=%#x snd_cwnd=%u ssthresh=%u snd_wnd=%u srtt=%u rcv_wnd=%u sock_cookie=%llx skbaddr=%p skaddr=%p", __print_symbolic(REC->family, { 2, "AF_INET" }, { 10, "AF_INET6" }), REC->saddr, REC->daddr, REC->mark, REC->data_len, REC->snd_nxt, REC->snd_una, REC->snd_cwnd, REC->ssthresh, REC->snd_wnd, REC->srtt, REC->rcv_wnd, REC->sock_cookie, REC->skbaddr, REC->skaddr"#;

const EROFS_MAP_BLOCKS_ENTER: &str = r#"print fmt: "dev = (%d,%d), nid = %llu, la %llu llen %llu flags %s", ((unsigned int) ((REC->dev) >> 20)), ((unsigned int) ((REC->dev) & ((1U << 20) - 1))), REC->nid, REC->la, REC->llen, REC->flags ? __print_flags(REC->flags, "|", { 0x0001, "FIEMAP" }, { 0x0002, "READMORE" }, { 0x0004, "FINDTAIL" }) : "NULL""#;

/// The field declarations before the print fmt do not matter to the parser; a format file as the kernel
/// writes it.
fn format(print: &str) -> String {
    format!("name: x\nID: 1\nformat:\n\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n{print}\n")
}

/// Check that inet_sock_set_state's enum fields get their names and its address fields their kinds, and that
/// the filter-facing map lists the names by value.
#[test]
fn inet_sock_set_state() {
    let d = field_displays(&format(INET_SOCK_SET_STATE));
    for f in ["saddr", "daddr"] {
        assert_eq!(d[f], FieldDisplay::Ipv4, "{f}");
    }
    for f in ["saddr_v6", "daddr_v6"] {
        assert_eq!(d[f], FieldDisplay::Ipv6, "{f}");
    }
    assert_eq!(d["newstate"].name(2).as_deref(), Some("TCP_SYN_SENT"));
    assert_eq!(d["oldstate"].name(12).as_deref(), Some("TCP_NEW_SYN_RECV"));
    assert_eq!(d["family"].name(10).as_deref(), Some("AF_INET6"));
    assert_eq!(d["protocol"].name(262).as_deref(), Some("IPPROTO_MPTCP"));
    assert_eq!(d["newstate"].name(99), None);
    assert!(!d.contains_key("sport") && !d.contains_key("skaddr"));
    let names = symbolic_names(&format(INET_SOCK_SET_STATE));
    assert_eq!(names["newstate"].len(), 12);
    assert_eq!(names["newstate"][0], (1, "TCP_ESTABLISHED".to_string()));
    assert!(!names.contains_key("saddr"));
}

/// Check that sched_switch's prev_state names its flags within the mask of its print fmt, and is `R` (the
/// ternary's other branch) when none is set, `R+` with the preemption bit above the mask (the print fmt's
/// next argument, `REC->prev_state & 0x100 ? "+" : ""`).
#[test]
fn sched_switch_prev_state() {
    let d = field_displays(&format(SCHED_SWITCH));
    let s = &d["prev_state"];
    let FieldDisplay::Flags { mask, zero, .. } = s else {
        panic!("{s:?}");
    };
    assert_eq!((*mask, zero.as_deref()), (Some(0xff), Some("R")));
    assert_eq!(s.name(0).as_deref(), Some("R"));
    assert_eq!(s.name(0x100).as_deref(), Some("R+"));
    assert_eq!(s.name(1).as_deref(), Some("S"));
    assert_eq!(s.name(2).as_deref(), Some("D"));
    assert_eq!(s.name(0x80).as_deref(), Some("I"));
    assert_eq!(s.name(0x3).as_deref(), Some("S|D"));
    assert_eq!(d.len(), 1, "{d:?}");
}

/// Check that an event printing only numbers (signal_generate) has no names, and that tcp_probe's `%pISpc`
/// fields are socket addresses.
#[test]
fn plain_and_sockaddr() {
    assert!(field_displays(&format(SIGNAL_GENERATE)).is_empty());
    let d = field_displays(&format(TCP_PROBE));
    assert_eq!(d["saddr"], FieldDisplay::Sockaddr);
    assert_eq!(d["daddr"], FieldDisplay::Sockaddr);
    assert_eq!(d["family"].name(2).as_deref(), Some("AF_INET"));
    assert!(!d.contains_key("skbaddr"));
}

/// Check flags beside plain arguments that hold casts and shifts, and a ternary's other branch as the name of
/// no flag; unnamed bits in hex after the names.
#[test]
fn flags_after_casts() {
    let d = field_displays(&format(EROFS_MAP_BLOCKS_ENTER));
    let f = &d["flags"];
    assert_eq!(f.name(0).as_deref(), Some("NULL"));
    assert_eq!(f.name(5).as_deref(), Some("FIEMAP|FINDTAIL"));
    assert_eq!(f.name(0x11).as_deref(), Some("FIEMAP|0x10"));
    assert_eq!(f.name(0x10), None);
}

/// Check the constant expressions of names' values: suffixes, casts, shifts, negatives and nesting.
#[test]
fn evaluates_constants() {
    for (text, want) in [
        ("1", 1),
        ("0x00000040", 0x40),
        ("9ULL", 9),
        ("-9ULL", 9u64.wrapping_neg()),
        ("(1u << 30)", 1 << 30),
        (
            "( unsigned long)((( gfp_t)((((1UL))) << (10))) | (( gfp_t)0))",
            1 << 10,
        ),
        ("((((0x0 | 0x1 | 0x40) + 1) << 1) - 1)", 0x83),
        ("~(( gfp_t)(1UL << 3)) & 0xff", 0xf7),
    ] {
        assert_eq!(eval(text), Some(want), "{text}");
    }
    assert_eq!(eval("REC->x"), None);
    assert_eq!(eval("(1"), None);
}

/// Check the conversions that take arguments, pointer extensions included, and literals with escapes.
#[test]
fn conversions_and_literals() {
    assert_eq!(
        conversions("a=%d %% b=%*llu c=%pI6c d=%-8s e=%pISpc f=%p"),
        ["d", "*", "u", "pI6c", "s", "pISpc", "p"]
    );
    assert_eq!(
        string_literal(r#""a\"b" "c", X"#),
        Some(("a\"bc".to_string(), ", X"))
    );
}

/// Check every format of the running kernel: none makes the parser panic, and each named field's names parse
/// (skipped without tracefs).
#[test]
fn every_format_here() {
    let Ok(groups) = std::fs::read_dir("/sys/kernel/tracing/events") else {
        eprintln!("every_format_here: skipped: no tracefs here");
        return;
    };
    let (mut events, mut named) = (0, 0);
    for g in groups.flatten() {
        for e in std::fs::read_dir(g.path()).into_iter().flatten().flatten() {
            let Ok(text) = std::fs::read_to_string(e.path().join("format")) else {
                continue;
            };
            events += 1;
            named += symbolic_names(&text).len();
        }
    }
    println!("{events} formats, {named} named fields");
}
