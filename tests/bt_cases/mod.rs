//! The cases of tests/bt_output.rs: a bpftrace program of constants and the same values through rprof's maps
//! and printer (as `rprof bt` will run them).

use rprof::bt::format::{Arg, FormatString};
use rprof::bt::maps::{Key, Linear, Map, MapKind, DEFAULT_MAP_KEYS_MAX};
use rprof::bt::print::{MessageType, OutputFormat, Printer, EXIT_PREAMBLE};
use rprof::bt::strftime::{strftime_text, time_text, Zone};
use rprof::bt::value::{Frame, Int, IntType, Stack, StackKind, StackMode, Sym, Timestamp, Value};
use std::collections::BTreeMap;

pub struct Case {
    pub name: &'static str,
    pub program: &'static str,
    pub env: &'static [(&'static str, &'static str)],
    /// Whether a live bpftrace gives the same text (not for stacks: their addresses change every run).
    pub live: bool,
    /// Whether the case runs with `-f json` too.
    pub json: bool,
    /// Whether tests/bt_golden/ holds its output (not for the date and time, which change).
    pub golden: bool,
    pub rprof: fn(OutputFormat) -> String,
}

/// A BEGIN block's effects: maps by name and the output so far.
pub struct Run {
    pub printer: Printer,
    pub maps: BTreeMap<String, Map>,
    pub out: String,
    max: usize,
}

pub fn s(v: &str) -> Value {
    Value::str(v)
}

pub fn i(v: i64) -> Value {
    Value::int(v)
}

fn int(v: i64) -> Int {
    Int::i64(v)
}

impl Run {
    pub fn new(format: OutputFormat) -> Run {
        Run::with_limit(format, DEFAULT_MAP_KEYS_MAX)
    }

    pub fn with_limit(format: OutputFormat, max: usize) -> Run {
        let printer = Printer::new(format);
        Run {
            printer,
            maps: BTreeMap::new(),
            out: printer.attached_probes(1),
            max,
        }
    }

    pub fn map(&mut self, name: &str, kind: MapKind, key: &Key) -> &mut Map {
        let max = self.max;
        self.maps
            .entry(name.to_string())
            .or_insert_with(|| Map::new(name, kind, !key.is_empty(), max))
    }

    pub fn count(&mut self, name: &str, key: Key) {
        self.map(name, MapKind::Count, &key).count(&key).unwrap();
    }

    pub fn sum(&mut self, name: &str, key: Key, v: i64) {
        self.map(name, MapKind::Sum { signed: true }, &key)
            .sum(&key, int(v))
            .unwrap();
    }

    pub fn agg(&mut self, name: &str, kind: MapKind, key: Key, v: i64) {
        let m = self.map(name, kind, &key);
        match kind {
            MapKind::Min => m.min(&key, int(v)),
            MapKind::Max => m.max(&key, int(v)),
            MapKind::Avg | MapKind::Stats => m.avg(&key, int(v)),
            MapKind::Hist => m.hist(&key, int(v)),
            MapKind::Lhist(_) => m.lhist(&key, int(v)),
            _ => unreachable!("agg() is for min, max, avg, stats, hist and lhist"),
        }
        .unwrap();
    }

    pub fn set(&mut self, name: &str, key: Key, v: Value) {
        self.map(name, MapKind::Plain, &key).set(&key, v).unwrap();
    }

    pub fn print(&mut self, name: &str, top: u32, div: u32) {
        let text = self.printer.map(&self.maps[name], top, div);
        self.out.push_str(&text);
    }

    pub fn printf(&mut self, fmt: &str, args: &[Arg]) {
        let text = FormatString::parse(fmt).format(args);
        self.out
            .push_str(&self.printer.message(MessageType::Printf, &text, false));
    }

    /// `exit()`: bpftrace's `\n\n`, then every map.
    pub fn exit(mut self) -> String {
        self.out.push_str(EXIT_PREAMBLE);
        self.out
            .push_str(&self.printer.maps_at_exit(self.maps.values()));
        self.out
    }
}

fn counts_and_sums(f: OutputFormat) -> String {
    let mut r = Run::new(f);
    for (k, n) in [("a", 1), ("b", 3), ("zz", 2)] {
        for _ in 0..n {
            r.count("@c", vec![s(k)]);
        }
    }
    r.count("@n", vec![]);
    r.count("@n", vec![]);
    r.sum("@s", vec![i(1), s("x")], 5);
    r.sum("@s", vec![i(2), s("y")], -3);
    r.sum("@s", vec![i(-7), s("z")], 100);
    r.sum("@s", vec![i(-7), s("z")], 1);
    for (k, n) in [(5, 4), (-1, 1), (1000, 2)] {
        for _ in 0..n {
            r.count("@i", vec![i(k)]);
        }
    }
    r.count("@", vec![s("anon")]);
    r.exit()
}

fn averages_and_extremes(f: OutputFormat) -> String {
    let mut r = Run::new(f);
    r.agg("@a", MapKind::Avg, vec![i(1), s("b")], 10);
    r.agg("@a", MapKind::Avg, vec![i(1), s("b")], 3);
    r.agg("@a", MapKind::Avg, vec![i(2), s("a")], -7);
    r.agg("@a", MapKind::Avg, vec![i(3), s("c")], 100);
    r.agg("@st", MapKind::Stats, vec![], 7);
    r.agg("@st", MapKind::Stats, vec![], 2);
    r.agg("@sk", MapKind::Stats, vec![s("k")], -5);
    r.agg("@sk", MapKind::Stats, vec![s("k")], -2);
    r.agg("@sk", MapKind::Stats, vec![s("j")], 40);
    r.agg("@mn", MapKind::Min, vec![], 5);
    r.agg("@mn", MapKind::Min, vec![], -2);
    r.agg("@mn", MapKind::Min, vec![], 9);
    r.agg("@mk", MapKind::Min, vec![s("x")], 50);
    r.agg("@mk", MapKind::Min, vec![s("y")], 3);
    r.agg("@mx", MapKind::Max, vec![], -5);
    r.agg("@mx2", MapKind::Max, vec![], 9);
    r.agg("@mx2", MapKind::Max, vec![], 3);
    r.agg("@mxk", MapKind::Max, vec![i(1)], 70);
    r.agg("@mxk", MapKind::Max, vec![i(2)], 8);
    r.exit()
}

fn histograms(f: OutputFormat) -> String {
    let mut r = Run::new(f);
    for v in [
        -1,
        0,
        0,
        1,
        2,
        3,
        1024,
        1_048_576,
        2_147_483_647,
        2_147_483_648,
        5_000_000_000,
        1_099_511_627_776,
    ] {
        r.agg("@h", MapKind::Hist, vec![], v);
    }
    r.agg("@hk", MapKind::Hist, vec![s("a")], 5);
    r.agg("@hk", MapKind::Hist, vec![s("b")], 5);
    r.agg("@hk", MapKind::Hist, vec![s("b")], 6);
    r.agg("@hk", MapKind::Hist, vec![s("c")], 100);
    r.agg("@hi", MapKind::Hist, vec![i(256), s("")], 1);
    r.agg("@hi", MapKind::Hist, vec![i(1), s("")], 1);
    r.agg("@hi", MapKind::Hist, vec![i(2), s("t")], 7);
    let lin = |min, max, step| MapKind::Lhist(Linear { min, max, step });
    for v in [-5, 0, 55, 100, 1000, 1000] {
        r.agg("@l", lin(0, 100, 10), vec![], v);
    }
    r.agg("@l2", lin(0, 10, 3), vec![], 9);
    r.agg("@l2", lin(0, 10, 3), vec![], 4);
    r.agg("@l3", lin(1024, 4096, 1024), vec![], 3072);
    r.agg("@l3", lin(1024, 4096, 1024), vec![], 10);
    r.agg("@l4", lin(0, 2_097_152, 1_048_576), vec![s("m")], 1_500_000);
    r.exit()
}

fn empty_and_cleared(f: OutputFormat) -> String {
    let mut r = Run::new(f);
    r.count("@c", vec![i(1)]);
    r.maps.get_mut("@c").unwrap().delete(&[i(1)]);
    r.agg("@mx", MapKind::Max, vec![], -5);
    r.agg("@z", MapKind::Hist, vec![], 3);
    r.maps.get_mut("@z").unwrap().zero();
    r.agg(
        "@zl",
        MapKind::Lhist(Linear {
            min: 0,
            max: 10,
            step: 1,
        }),
        vec![],
        3,
    );
    r.maps.get_mut("@zl").unwrap().zero();
    r.agg("@zs", MapKind::Stats, vec![], 3);
    r.maps.get_mut("@zs").unwrap().zero();
    r.count("@zc", vec![i(1)]);
    r.maps.get_mut("@zc").unwrap().zero();
    r.count("@cl", vec![i(1)]);
    r.maps.get_mut("@cl").unwrap().clear();
    r.count("@n", vec![]);
    r.maps.get_mut("@n").unwrap().clear();
    r.exit()
}

fn plain_values(f: OutputFormat) -> String {
    let mut r = Run::new(f);
    r.set("@i", vec![i(-1)], i(5));
    r.set("@i", vec![i(2)], i(1));
    r.set("@i", vec![i(0)], i(7));
    r.set("@t", vec![], Value::Tuple(vec![i(1), s("two"), i(-3)]));
    r.set("@tk", vec![s("a")], Value::Tuple(vec![i(1), s("x")]));
    r.set("@s", vec![], s("str"));
    r.set("@ks", vec![i(-5), s("b")], s("v1"));
    r.set("@ks", vec![i(3), s("a")], s("v2"));
    r.set("@ks", vec![i(-5), s("a")], s("v3"));
    r.set(
        "@w8",
        vec![],
        Value::typed(
            -3,
            IntType {
                bits: 8,
                signed: true,
            },
        ),
    );
    r.set(
        "@u8",
        vec![],
        Value::typed(
            250,
            IntType {
                bits: 8,
                signed: false,
            },
        ),
    );
    r.set("@u32", vec![], Value::typed(4_000_000_000, IntType::U32));
    r.set("@neg", vec![], i(-9));
    r.set("@esc", vec![s("q\"uo\\te")], s("tab\there"));
    for (k, a) in [(1u64, 1u64), (2, 2)] {
        let sym = Value::Sym(Sym {
            kind: StackKind::Kernel,
            addr: a,
            pid: 0,
            name: None,
        });
        r.set("@ks2", vec![Value::int(k as i64)], sym);
    }
    for (k, ip) in [(1, "127.0.0.1"), (2, "127.0.0.2")] {
        r.set("@in", vec![i(k)], Value::Inet(ip.parse().unwrap()));
    }
    r.exit()
}

fn print_top_div(f: OutputFormat) -> String {
    let mut r = Run::new(f);
    for (k, n) in [(1, 1), (2, 2), (3, 3)] {
        for _ in 0..n {
            r.count("@c", vec![i(k)]);
        }
    }
    r.print("@c", 2, 0);
    r.print("@c", 0, 2);
    r.print("@c", 1, 2);
    for v in [3, 3, 9] {
        r.agg("@h", MapKind::Hist, vec![], v);
    }
    r.print("@h", 0, 2);
    r.agg("@av", MapKind::Avg, vec![s("k")], 3);
    r.agg("@av", MapKind::Avg, vec![s("j")], 100);
    r.print("@av", 1, 2);
    let t = Value::Tuple(vec![i(1), s("a")]);
    r.out.push_str(&r.printer.value(&t));
    r.out.push_str(&r.printer.value(&i(5)));
    r.out.push_str(&r.printer.value(&s("s")));
    r.printf("x=%d\ty\n", &[Arg::Int(Int::i64(5))]);
    r.exit()
}

fn printf_conversions(f: OutputFormat) -> String {
    let mut r = Run::new(f);
    let n = |v: i64| Arg::Int(Int::i64(v));
    let st = |v: &str| Arg::Str(v.as_bytes().to_vec());
    r.printf(
        "[%d] [%u] [%x] [%X] [%o] [%c] [%s] [%-10s] [%10s] [%5d] [%-5d] [%05d] [%.3s] [%.5d] [%ld] [%lu] [%llx] \
         [%hhd] [%hd] [%p] [%p] [%lld] [%zu] 100%%\n",
        &[
            n(-5),
            n(-5),
            n(-5),
            n(255),
            n(8),
            n(65),
            st("abc"),
            st("ab"),
            st("ab"),
            n(42),
            n(42),
            n(42),
            st("abcdef"),
            n(42),
            n(-5),
            n(-5),
            n(-1),
            n(300),
            n(70000),
            n(0),
            n(4096),
            n(5_000_000_000),
            n(5_000_000_000),
        ],
    );
    r.printf("no args 100%%\n", &[]);
    r.printf("%d%%\n", &[n(3)]);
    r.printf("%5.1d|%-3c|\n", &[n(7), n(66)]);
    r.printf("a%%d b %d\n", &[n(1), n(2)]);
    let u32v = Arg::Int(Int::new(4_000_000_000, IntType::U32));
    r.printf("%u %d\n", &[u32v.clone(), u32v]);
    r.printf("%ld\n", &[Arg::Int(Int::new(-7, IntType::I32))]);
    r.printf(
        "%lu\n",
        &[Arg::Int(Int::new(
            -1,
            IntType {
                bits: 8,
                signed: true,
            },
        ))],
    );
    r.printf("[%05s][%-05d]\n", &[st("ab"), n(3)]);
    r.exit()
}

fn full_maps(f: OutputFormat) -> String {
    let mut r = Run::with_limit(f, 3);
    for k in [1, 2, 2, 3, 3, 3, 4, 3] {
        r.count("@c", vec![i(k)]);
    }
    for (k, v) in [(1, 1), (2, 2), (3, 3), (4, 4), (1, 10)] {
        r.set("@v", vec![i(k)], i(v));
    }
    for v in [1, 2, 4, 8, 1] {
        r.agg("@h", MapKind::Hist, vec![], v);
    }
    for (k, v) in [(1, 1), (2, 5), (3, 7)] {
        r.agg("@a", MapKind::Avg, vec![i(k)], v);
    }
    r.exit()
}

/// Stacks as bpftrace 0.17 printed them here (tests/bt_golden/stacks.txt holds that run's lines, cut from
/// a run of the same statements with others; its addresses change from run to run, so no live comparison).
fn stacks(f: OutputFormat) -> String {
    let frames = vec![
        Frame::named(
            0x7f9055b1f829,
            "syscall",
            25,
            Some("/usr/lib/x86_64-linux-gnu/libc.so.6"),
        ),
        Frame::unresolved(0x7ffc3f5e1ea8),
        Frame::unresolved(0x5555fef33a60),
    ];
    let user = |mode, limit| {
        Value::Stack(Stack::new(
            StackKind::User,
            mode,
            limit,
            24149,
            frames.clone(),
        ))
    };
    let mut r = Run::new(f);
    r.out
        .push_str(&r.printer.value(&user(StackMode::Bpftrace, 2)));
    r.set("@u", vec![], user(StackMode::Bpftrace, 2));
    r.count("@", vec![user(StackMode::Bpftrace, 3)]);
    r.count("@p", vec![user(StackMode::Perf, 3)]);
    r.set(
        "@uu",
        vec![user(StackMode::Bpftrace, 2)],
        user(StackMode::Bpftrace, 2),
    );
    r.exit()
}

/// `time()` and `strftime()` now, in the local zone (only the year and month: the run takes under a second).
fn time_and_strftime(f: OutputFormat) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let zone = Zone::local();
    let ts = |fmt: &str| {
        let text = strftime_text(fmt, now.as_nanos() as u64, 0, &zone);
        Value::Timestamp(Timestamp { nsecs: 0, text })
    };
    let mut r = Run::new(f);
    r.set("@ts", vec![], ts("%Y"));
    if let Value::Timestamp(t) = ts("%Y-%m") {
        r.printf("%s|\n", &[Arg::Str(t.text.into_bytes())]);
    }
    r.count("@k", vec![ts("%Y")]);
    let text = time_text("%Y-%m\n", now.as_secs() as i64, &zone).unwrap();
    r.out
        .push_str(&r.printer.message(MessageType::Time, &text, false));
    r.exit()
}

pub fn cases() -> Vec<Case> {
    let case = |name, program, rprof| Case {
        name,
        program,
        env: &[],
        live: true,
        json: true,
        golden: true,
        rprof,
    };
    vec![
        case(
            "counts_and_sums",
            r#"BEGIN { @c["a"] = count(); @c["b"] = count(); @c["b"] = count(); @c["b"] = count(); @c["zz"] = count(); @c["zz"] = count(); @n = count(); @n = count(); @s[1, "x"] = sum(5); @s[2, "y"] = sum(-3); @s[-7, "z"] = sum(100); @s[-7, "z"] = sum(1); @i[5] = count(); @i[5] = count(); @i[5] = count(); @i[5] = count(); @i[-1] = count(); @i[1000] = count(); @i[1000] = count(); @["anon"] = count(); exit(); }"#,
            counts_and_sums,
        ),
        case(
            "averages_and_extremes",
            r#"BEGIN { @a[1, "b"] = avg(10); @a[1, "b"] = avg(3); @a[2, "a"] = avg(-7); @a[3, "c"] = avg(100); @st = stats(7); @st = stats(2); @sk["k"] = stats(-5); @sk["k"] = stats(-2); @sk["j"] = stats(40); @mn = min(5); @mn = min(-2); @mn = min(9); @mk["x"] = min(50); @mk["y"] = min(3); @mx = max(-5); @mx2 = max(9); @mx2 = max(3); @mxk[1] = max(70); @mxk[2] = max(8); exit(); }"#,
            averages_and_extremes,
        ),
        case(
            "histograms",
            r#"BEGIN { @h = hist(-1); @h = hist(0); @h = hist(0); @h = hist(1); @h = hist(2); @h = hist(3); @h = hist(1024); @h = hist(1048576); @h = hist(2147483647); @h = hist(2147483648); @h = hist(5000000000); @h = hist(1099511627776); @hk["a"] = hist(5); @hk["b"] = hist(5); @hk["b"] = hist(6); @hk["c"] = hist(100); @hi[256, ""] = hist(1); @hi[1, ""] = hist(1); @hi[2, "t"] = hist(7); @l = lhist(-5, 0, 100, 10); @l = lhist(0, 0, 100, 10); @l = lhist(55, 0, 100, 10); @l = lhist(100, 0, 100, 10); @l = lhist(1000, 0, 100, 10); @l = lhist(1000, 0, 100, 10); @l2 = lhist(9, 0, 10, 3); @l2 = lhist(4, 0, 10, 3); @l3 = lhist(3072, 1024, 4096, 1024); @l3 = lhist(10, 1024, 4096, 1024); @l4["m"] = lhist(1500000, 0, 2097152, 1048576); exit(); }"#,
            histograms,
        ),
        case(
            "empty_and_cleared",
            r#"BEGIN { @c[1] = count(); delete(@c[1]); @mx = max(-5); @z = hist(3); zero(@z); @zl = lhist(3, 0, 10, 1); zero(@zl); @zs = stats(3); zero(@zs); @zc[1] = count(); zero(@zc); @cl[1] = count(); clear(@cl); @n = count(); clear(@n); exit(); }"#,
            empty_and_cleared,
        ),
        case(
            "plain_values",
            r#"BEGIN { @i[-1] = 5; @i[2] = 1; @i[0] = 7; @t = (1, "two", -3); @tk["a"] = (1, "x"); @s = "str"; @ks[-5, "b"] = "v1"; @ks[3, "a"] = "v2"; @ks[-5, "a"] = "v3"; @w8 = (int8)-3; @u8 = (uint8)250; @u32 = (uint32)4000000000; @neg = -9; @esc["q\"uo\\te"] = "tab\there"; @ks2[1] = ksym(1); @ks2[2] = ksym(2); @in[1] = ntop(0x0100007f); @in[2] = ntop(0x0200007f); exit(); }"#,
            plain_values,
        ),
        case(
            "print_top_div",
            r#"BEGIN { @c[1] = count(); @c[2] = count(); @c[2] = count(); @c[3] = count(); @c[3] = count(); @c[3] = count(); print(@c, 2); print(@c, 0, 2); print(@c, 1, 2); @h = hist(3); @h = hist(3); @h = hist(9); print(@h, 0, 2); @av["k"] = avg(3); @av["j"] = avg(100); print(@av, 1, 2); print((1, "a")); print(5); print("s"); printf("x=%d\ty\n", 5); exit(); }"#,
            print_top_div,
        ),
        Case {
            json: false,
            ..case(
                "printf_conversions",
                r#"BEGIN { printf("[%d] [%u] [%x] [%X] [%o] [%c] [%s] [%-10s] [%10s] [%5d] [%-5d] [%05d] [%.3s] [%.5d] [%ld] [%lu] [%llx] [%hhd] [%hd] [%p] [%p] [%lld] [%zu] 100%%\n", -5, -5, -5, 255, 8, 65, "abc", "ab", "ab", 42, 42, 42, "abcdef", 42, -5, -5, -1, 300, 70000, 0, 4096, 5000000000, 5000000000); printf("no args 100%%\n"); printf("%d%%\n", 3); printf("%5.1d|%-3c|\n", 7, 66); printf("a%%d b %d\n", 1, 2); printf("%u %d\n", (uint32)4000000000, (uint32)4000000000); printf("%ld\n", (int32)-7); printf("%lu\n", (int8)-1); printf("[%05s][%-05d]\n", "ab", 3); exit(); }"#,
                printf_conversions,
            )
        },
        Case {
            env: &[("BPFTRACE_MAP_KEYS_MAX", "3")],
            ..case(
                "full_maps",
                r#"BEGIN { @c[1] = count(); @c[2] = count(); @c[2] = count(); @c[3] = count(); @c[3] = count(); @c[3] = count(); @c[4] = count(); @c[3] = count(); @v[1] = 1; @v[2] = 2; @v[3] = 3; @v[4] = 4; @v[1] = 10; @h = hist(1); @h = hist(2); @h = hist(4); @h = hist(8); @h = hist(1); @a[1] = avg(1); @a[2] = avg(5); @a[3] = avg(7); exit(); }"#,
                full_maps,
            )
        },
        Case {
            golden: false,
            ..case(
                "time_and_strftime",
                r#"BEGIN { @ts = strftime("%Y", nsecs); printf("%s|\n", strftime("%Y-%m", nsecs)); @k[strftime("%Y", nsecs)] = count(); time("%Y-%m\n"); exit(); }"#,
                time_and_strftime,
            )
        },
        Case {
            live: false,
            json: false,
            ..case(
                "stacks",
                r#"BEGIN { print(ustack(2)); @u = ustack(2); @[ustack(3)] = count(); @p[ustack(perf, 3)] = count(); @uu[ustack(2)] = ustack(2); exit(); }"#,
                stacks,
            )
        },
    ]
}
