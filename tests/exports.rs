//! `rprof report --pprof`, `--firefox` and `--diff`: the files are read by their real consumer (`go tool pprof`) or
//! checked against the structure the Firefox Profiler needs, on recordings of fixtures with known behaviour.
mod common;
use common::*;
use prost::Message;
use rprof::report::proto;
use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::Path;
use std::process::Command;

/// Whether `go` runs here. Without it the test skips, unless RPROF_REQUIRE_PRIVILEGED=1 or CI is set.
fn go_tool(test: &str) -> bool {
    let ok = Command::new("go")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        let why = "the go tool is not installed (apt-get install golang-go)";
        if std::env::var_os("CI").is_some() {
            panic!("{test}: cannot run: {why}, and CI is set");
        }
        skip(test, why);
    }
    ok
}

/// `go tool pprof ARGS FILE`, asserting success; returns stdout.
fn pprof(args: &[&str], file: &Path) -> String {
    let out = Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .arg(file)
        .output()
        .expect("run go tool pprof");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "go tool pprof {args:?} failed:\n{stderr}"
    );
    // The names are in the file: pprof must not look for the binaries (which the tests delete).
    assert!(
        !stderr.contains("symboliz"),
        "go tool pprof tried to symbolize:\n{stderr}"
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The rows of `go tool pprof -top`: (name, flat %), in its order.
fn pprof_top(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .filter_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            if fields.len() < 6 {
                return None;
            }
            let flat = fields[1].trim_end_matches('%').parse().ok()?;
            let name = fields[5..].join(" ");
            Some((name.trim_end_matches(" (inline)").to_string(), flat))
        })
        .collect()
}

/// The rows of rprof's table (without off-CPU columns): (symbol, self %), in its order.
fn table_rows(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            let self_pct = fields.first()?.trim_end_matches('%').parse().ok()?;
            let at = fields.iter().position(|f| *f == "[.]" || *f == "[k]")?;
            // An inlined function's row says what it was inlined into; pprof names the function alone.
            let name = fields[at + 1..].join(" ");
            let name = name.split(" (inlined into ").next().unwrap_or_default();
            Some((name.to_string(), self_pct))
        })
        .collect()
}

/// Check that `go tool pprof -top` (columns `flat`) shows the functions at the top of rprof's table (self),
/// in the same order for those clearly apart, with shares within 2 points.
fn assert_same_top(top: &[(String, f64)], table: &[(String, f64)], what: &str) {
    let big: Vec<&(String, f64)> = table.iter().filter(|r| r.1 >= 5.0).collect();
    assert!(
        !big.is_empty(),
        "{what}: no function has 5% self\n{table:?}"
    );
    for (i, (name, share)) in big.iter().enumerate() {
        let Some((at, (_, flat))) = top.iter().enumerate().find(|(_, r)| &r.0 == name) else {
            panic!("{what}: {name} ({share}%) missing from pprof -top\n{top:?}");
        };
        assert!(
            (flat - share).abs() <= 2.0,
            "{what}: {name} is {flat}% in pprof, {share}% in rprof"
        );
        // Rows more than 2 points apart keep their order.
        if big
            .iter()
            .all(|r| &r.0 == name || (r.1 - share).abs() > 2.0)
        {
            assert_eq!(
                at, i,
                "{what}: {name} is row {at} in pprof, {i} in rprof\n{top:?}"
            );
        }
    }
}

/// Read a gzipped pprof file into its message.
fn decode(file: &Path) -> proto::Profile {
    let bytes = std::fs::read(file).unwrap();
    assert_eq!(&bytes[..2], &[0x1f, 0x8b], "not gzip");
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(&bytes[..])
        .read_to_end(&mut raw)
        .unwrap();
    proto::Profile::decode(&raw[..]).expect("a perftools.profiles.Profile")
}

/// Check profile.proto's rules on a decoded profile: "" first, ids non-zero, unique and resolving, one value
/// per sample type, the types in order, hex build ids, and the pid/tid/comm labels on every sample.
fn assert_valid(p: &proto::Profile) {
    let strings = p.string_table.len() as i64;
    let s = |i: i64| {
        assert!((0..strings).contains(&i), "string {i} out of range");
        p.string_table[i as usize].as_str()
    };
    assert_eq!(p.string_table[0], "");
    let types: Vec<_> = p
        .sample_type
        .iter()
        .map(|t| (s(t.r#type), s(t.unit)))
        .collect();
    assert_eq!(types[..2], [("samples", "count"), ("cpu", "nanoseconds")]);
    let ids = |ids: Vec<u64>, what: &str| -> HashSet<u64> {
        let set: HashSet<u64> = ids.iter().copied().collect();
        assert_eq!(set.len(), ids.len(), "{what} ids repeat");
        assert!(!set.contains(&0), "a {what} id is 0");
        set
    };
    let mappings = ids(p.mapping.iter().map(|m| m.id).collect(), "mapping");
    let locations = ids(p.location.iter().map(|l| l.id).collect(), "location");
    let functions = ids(p.function.iter().map(|f| f.id).collect(), "function");
    for m in &p.mapping {
        let build_id = s(m.build_id);
        assert!(
            build_id.len() % 2 == 0 && build_id.chars().all(|c| c.is_ascii_hexdigit()),
            "build id {build_id:?} is not hex"
        );
        assert!(m.memory_start < m.memory_limit && m.has_functions);
        s(m.filename);
    }
    for l in &p.location {
        // 0: a frame without a mapping (JIT code).
        assert!(l.mapping_id == 0 || mappings.contains(&l.mapping_id));
        assert!(!l.line.is_empty());
        for line in &l.line {
            assert!(functions.contains(&line.function_id));
        }
    }
    for f in &p.function {
        assert!(!s(f.name).is_empty());
        s(f.system_name);
        s(f.filename);
    }
    assert!(!p.sample.is_empty());
    for sample in &p.sample {
        assert_eq!(sample.value.len(), p.sample_type.len());
        assert!(!sample.location_id.is_empty());
        for l in &sample.location_id {
            assert!(locations.contains(l), "sample refers to location {l}");
        }
        let keys: Vec<&str> = sample.label.iter().map(|l| s(l.key)).collect();
        for key in ["pid", "tid", "comm"] {
            assert!(keys.contains(&key), "sample without label {key}: {keys:?}");
        }
        for l in &sample.label {
            s(l.str);
        }
    }
    s(p.period_type.as_ref().unwrap().r#type);
    s(p.default_sample_type);
}

/// The names of a location's functions, innermost first.
fn location_names<'a>(p: &'a proto::Profile, l: &proto::Location) -> Vec<&'a str> {
    let functions: HashMap<u64, &proto::Function> = p.function.iter().map(|f| (f.id, f)).collect();
    l.line
        .iter()
        .map(|line| p.string_table[functions[&line.function_id].name as usize].as_str())
        .collect()
}

/// Check that `go tool pprof -top` reads the pprof file of the call tree (with its binary deleted) and shows
/// the top functions of `rprof report --no-inline` with their shares, and that the file follows
/// profile.proto's rules: period from -F, mapping 1 the fixture with its build id, labels of the process.
#[test]
fn pprof_read_by_go_tool_pprof() {
    if !privileged("pprof_read_by_go_tool_pprof") || !go_tool("pprof_read_by_go_tool_pprof") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = record_calltree(dir.path(), "c.data", "500");
    let file = dir.path().join("c.pb.gz");
    let (_, stderr) = rprof_ok_stderr(&["report", "-i", &data, "--pprof", file.to_str().unwrap()]);
    assert!(stderr.contains("wrote"), "{stderr}");
    let table = rprof_ok(&["report", "-i", &data, "--no-inline"]);
    // Self-contained: the names come from the file.
    std::fs::remove_file(dir.path().join("calltree")).unwrap();
    let top = pprof(&["-top"], &file);
    eprintln!("{top}\n{table}");
    let (top, rows) = (pprof_top(&top), table_rows(&table));
    assert_eq!(rows[0].0, "hot_a", "{table}");
    assert_eq!(rows[1].0, "hot_b", "{table}");
    assert_same_top(&top, &rows, "calltree");

    let p = decode(&file);
    assert_valid(&p);
    let s = |i: i64| p.string_table[i as usize].as_str();
    assert_eq!(s(p.period_type.as_ref().unwrap().unit), "nanoseconds");
    assert_eq!(p.period, 1_000_000_000 / 999);
    assert_eq!(p.sample_type.len(), 2, "no off-CPU samples were recorded");
    assert!(s(p.mapping[0].filename).ends_with("/calltree"));
    assert!(!s(p.mapping[0].build_id).is_empty(), "gcc writes build ids");
    let comm = p.sample[0]
        .label
        .iter()
        .find(|l| s(l.key) == "comm")
        .unwrap();
    assert_eq!(s(comm.str), "calltree");
    let samples: i64 = p.sample.iter().map(|x| x.value[0]).sum();
    assert!(samples >= 100, "{samples} samples");
    // The leaf comes first: most samples end in hot_a.
    let leaf_hot_a: i64 = p
        .sample
        .iter()
        .filter(|x| {
            let leaf = p
                .location
                .iter()
                .find(|l| l.id == x.location_id[0])
                .unwrap();
            location_names(&p, leaf) == ["hot_a"]
        })
        .map(|x| x.value[0])
        .sum();
    assert!(leaf_hot_a * 2 > samples, "{leaf_hot_a} of {samples}");
}

/// Check that a location of an inlined function lists it before the function it was inlined into, that
/// `go tool pprof -top` attributes the time to the inlined function as `rprof report` does (and to its
/// caller with `-noinlines`, as `rprof report --no-inline` does), and that C++ functions keep their mangled
/// names as system names.
#[test]
fn pprof_inlined_and_mangled() {
    if !privileged("pprof_inlined_and_mangled") || !go_tool("pprof_inlined_and_mangled") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(
        dir.path(),
        "inline_hot.c",
        &["-O2", "-g", "-fno-omit-frame-pointer"],
    );
    let data = record_to(
        dir.path(),
        "i.data",
        &["-F", "999", "-g", "--", bin.to_str().unwrap(), "500"],
    );
    let file = dir.path().join("i.pb.gz");
    rprof_ok(&["report", "-i", &data, "--pprof", file.to_str().unwrap()]);
    let inline_table = rprof_ok(&["report", "-i", &data]);
    let outer_table = rprof_ok(&["report", "-i", &data, "--no-inline"]);
    std::fs::remove_file(&bin).unwrap();
    let rows = table_rows(&inline_table);
    assert_eq!(rows[0].0, "inlined_hot", "{inline_table}");
    assert_same_top(&pprof_top(&pprof(&["-top"], &file)), &rows, "inline");
    let rows = table_rows(&outer_table);
    assert_eq!(rows[0].0, "outer_caller", "{outer_table}");
    let top = pprof(&["-top", "-noinlines"], &file);
    assert_same_top(&pprof_top(&top), &rows, "no inline");

    let p = decode(&file);
    assert_valid(&p);
    let inlined = p
        .location
        .iter()
        .filter(|l| location_names(&p, l) == ["inlined_hot", "outer_caller"])
        .count();
    assert!(inlined > 0, "no location of inlined_hot in outer_caller");
    let main = &p.mapping[0];
    assert!(main.has_inline_frames);
    assert!(p.string_table[main.filename as usize].ends_with("/inline_hot"));

    let cpp = build_c(dir.path(), "klass.cpp", FP);
    let data = record_to(
        dir.path(),
        "k.data",
        &["-F", "499", "-g", "--", cpp.to_str().unwrap(), "300"],
    );
    let file = dir.path().join("k.pb.gz");
    rprof_ok(&["report", "-i", &data, "--pprof", file.to_str().unwrap()]);
    let p = decode(&file);
    assert_valid(&p);
    let s = |i: i64| p.string_table[i as usize].as_str();
    let method = p
        .function
        .iter()
        .find(|f| s(f.name).starts_with("ns::Klass::method("))
        .expect("ns::Klass::method in the functions");
    assert_eq!(s(method.system_name), "_ZN2ns5Klass6methodEm");
    let top = pprof_top(&pprof(&["-top"], &file));
    assert!(top[0].0.starts_with("ns::Klass::method("), "{top:?}");
}

/// The parsed JSON of a Firefox profile file, gunzipped when its name ends in .gz.
fn read_json(file: &Path) -> serde_json::Value {
    let bytes = std::fs::read(file).unwrap();
    let text = if file.extension().is_some_and(|e| e == "gz") {
        assert_eq!(&bytes[..2], &[0x1f, 0x8b], "not gzip");
        let mut text = Vec::new();
        flate2::read::GzDecoder::new(&bytes[..])
            .read_to_end(&mut text)
            .unwrap();
        text
    } else {
        bytes
    };
    serde_json::from_slice(&text).expect("JSON")
}

fn array<'a>(v: &'a serde_json::Value, key: &str) -> &'a Vec<serde_json::Value> {
    v[key]
        .as_array()
        .unwrap_or_else(|| panic!("{key} is not an array"))
}

/// Check what the Firefox Profiler needs of a processed profile: meta (version, interval, categories),
/// threads with pid, tid and name, sample times in order, and tables whose indices stay in range. Returns the
/// names (funcs) and the samples of each thread: (thread, [(stack's leaf category, leaf func name)]).
fn check_firefox(d: &serde_json::Value) -> Vec<(serde_json::Value, Vec<(usize, String)>)> {
    let meta = &d["meta"];
    assert!(meta["version"].as_u64().is_some());
    assert!(meta["preprocessedProfileVersion"].as_u64().is_some());
    assert!(meta["interval"].as_f64().unwrap() > 0.0);
    assert_eq!(meta["symbolicated"], true);
    let categories = array(meta, "categories").len();
    let libs = array(d, "libs").len();
    let mut out = Vec::new();
    for t in array(d, "threads") {
        assert!(t["pid"].as_str().is_some() && t["tid"].as_str().is_some());
        assert!(!t["name"].as_str().unwrap().is_empty());
        let strings = array(t, "stringArray");
        let funcs = &t["funcTable"];
        let frames = &t["frameTable"];
        let stacks = &t["stackTable"];
        let resources = &t["resourceTable"];
        let len = |v: &serde_json::Value| v["length"].as_u64().unwrap() as usize;
        let index = |v: &serde_json::Value| v.as_u64().map(|x| x as usize);
        for name in array(funcs, "name") {
            assert!(index(name).unwrap() < strings.len());
        }
        for r in array(funcs, "resource") {
            assert!(r.as_i64().unwrap() < len(resources) as i64);
        }
        for l in array(resources, "lib") {
            assert!(index(l).unwrap() < libs);
        }
        for (f, c) in array(frames, "func").iter().zip(array(frames, "category")) {
            assert!(index(f).unwrap() < len(funcs));
            assert!(index(c).unwrap() < categories);
        }
        assert_eq!(array(frames, "func").len(), len(frames));
        for (i, (prefix, frame)) in array(stacks, "prefix")
            .iter()
            .zip(array(stacks, "frame"))
            .enumerate()
        {
            assert!(prefix.is_null() || index(prefix).unwrap() < i);
            assert!(index(frame).unwrap() < len(frames));
        }
        let samples = &t["samples"];
        let deltas = array(samples, "timeDeltas");
        assert_eq!(deltas.len(), len(samples));
        assert!(
            deltas.iter().skip(1).all(|d| d.as_f64().unwrap() >= 0.0),
            "sample times go back"
        );
        let mut leaves = Vec::new();
        for stack in array(samples, "stack") {
            let stack = index(stack).unwrap();
            assert!(stack < len(stacks));
            let frame = index(&stacks["frame"][stack]).unwrap();
            let func = index(&frames["func"][frame]).unwrap();
            let category = index(&frames["category"][frame]).unwrap();
            let name = strings[index(&funcs["name"][func]).unwrap()]
                .as_str()
                .unwrap();
            leaves.push((category, name.to_string()));
        }
        out.push((t.clone(), leaves));
    }
    out
}

/// Check that `--firefox` writes the call tree's profile (plain and gzipped) as the Firefox Profiler needs it:
/// one thread named after the command with its pid, its samples in time order, leaves named hot_a and hot_b
/// in the split the fixture makes, the fixture as a library with its build id.
#[test]
fn firefox_profile() {
    if !privileged("firefox_profile") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = record_calltree(dir.path(), "c.data", "500");
    for name in ["c.json", "c.json.gz"] {
        let file = dir.path().join(name);
        rprof_ok(&["report", "-i", &data, "--firefox", file.to_str().unwrap()]);
        let d = read_json(&file);
        assert!((d["meta"]["interval"].as_f64().unwrap() - 1.001).abs() < 0.001);
        let threads = check_firefox(&d);
        assert_eq!(threads.len(), 1, "one thread");
        let (t, leaves) = &threads[0];
        assert_eq!(t["name"], "calltree");
        assert_eq!(t["processName"], "calltree");
        assert_eq!(t["pid"], t["tid"]);
        assert_eq!(t["isMainThread"], true);
        let count = |f: &str| leaves.iter().filter(|l| l.1 == f).count() as f64;
        let share = count("hot_a") / leaves.len() as f64;
        assert!(
            (0.70..=0.80).contains(&share),
            "hot_a leaves {share:.2} of {}",
            leaves.len()
        );
        assert!(count("hot_b") / leaves.len() as f64 >= 0.2);
        let strings = array(t, "stringArray");
        for f in ["main", "work_a", "work_b", "hot_a", "hot_b"] {
            assert!(
                strings.iter().any(|s| s == f),
                "{f} missing from the strings"
            );
        }
        let lib = array(&d, "libs")
            .iter()
            .find(|l| l["name"] == "calltree")
            .expect("the fixture is a library");
        // The build id, and the Breakpad id made from it as samply makes it (first three GUID fields swapped).
        let code = lib["codeId"].as_str().unwrap();
        assert!(code.len() >= 32, "{code}");
        let swap = |hex: &str| -> String {
            let bytes: Vec<&str> = (0..hex.len()).step_by(2).map(|i| &hex[i..i + 2]).collect();
            bytes.iter().rev().copied().collect()
        };
        let expected = format!(
            "{}{}{}{}0",
            swap(&code[..8]),
            swap(&code[8..12]),
            swap(&code[12..16]),
            &code[16..32]
        )
        .to_uppercase();
        assert_eq!(lib["breakpadId"], expected.as_str());
    }
}

/// Check that the off-CPU samples of a program that sleeps come out in the Firefox profile under the
/// "Off-CPU" category, as `[off-cpu]` leaves, and in the pprof file as `off_cpu/nanoseconds`
/// values that `go tool pprof -sample_index=off_cpu` reads.
#[test]
fn off_cpu_exports() {
    if !privileged("off_cpu_exports") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "spin_sleep.c", FP);
    let data = record_to(
        dir.path(),
        "s.data",
        &[
            "-F",
            "999",
            "-g",
            "--off-cpu",
            "--",
            bin.to_str().unwrap(),
            "20",
        ],
    );
    let file = dir.path().join("s.json");
    rprof_ok(&["report", "-i", &data, "--firefox", file.to_str().unwrap()]);
    let d = read_json(&file);
    let categories: Vec<&str> = array(&d["meta"], "categories")
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    let off = categories
        .iter()
        .position(|c| *c == "Off-CPU")
        .expect("an Off-CPU category");
    let threads = check_firefox(&d);
    let (_, leaves) = &threads[0];
    let off_leaves: Vec<_> = leaves.iter().filter(|l| l.0 == off).collect();
    assert!(
        off_leaves.len() >= 10,
        "{} off-CPU samples for 20 naps",
        off_leaves.len()
    );
    assert!(off_leaves.iter().all(|l| l.1 == "[off-cpu]"));
    assert!(leaves.iter().any(|l| l.1 == "burn" && l.0 != off));
    let strings = array(&threads[0].0, "stringArray");
    assert!(strings.iter().any(|s| s == "clock_nanosleep"));

    let file = dir.path().join("s.pb.gz");
    rprof_ok(&["report", "-i", &data, "--pprof", file.to_str().unwrap()]);
    let p = decode(&file);
    assert_valid(&p);
    let s = |i: i64| p.string_table[i as usize].as_str();
    assert_eq!(s(p.sample_type[2].r#type), "off_cpu");
    let off_ns: i64 = p.sample.iter().map(|x| x.value[2]).sum();
    // 20 naps of 10 ms.
    assert!(off_ns >= 150_000_000, "{off_ns} ns off CPU");
    if go_tool("off_cpu_exports") {
        let top = pprof(&["-top", "-sample_index=off_cpu", "-cum"], &file);
        assert!(top.contains("clock_nanosleep"), "{top}");
    }
}

/// Check `--diff`: two runs of the call tree give differential folded stacks (`STACK BASE NEW`) with the base
/// scaled to the new run's total, the hot stack present on both sides, and a differential flame graph.
#[test]
fn diff_of_two_runs() {
    if !privileged("diff_of_two_runs") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let base = record_calltree(dir.path(), "base.data", "500");
    let new = record_calltree(dir.path(), "new.data", "1000");
    let diff = rprof_ok(&["report", "-i", &new, "--diff", &base, "--folded"]);
    let lines: Vec<(String, u64, u64)> = diff
        .lines()
        .map(|l| {
            let mut parts = l.rsplitn(3, ' ');
            let after = parts.next().unwrap().parse().unwrap();
            let before = parts.next().unwrap().parse().unwrap();
            (parts.next().unwrap().to_string(), before, after)
        })
        .collect();
    let new_total: u64 = lines.iter().map(|l| l.2).sum();
    let base_total: u64 = lines.iter().map(|l| l.1).sum();
    let hot = lines
        .iter()
        .find(|l| l.0.ends_with("main;work_a;hot_a"))
        .unwrap_or_else(|| panic!("no hot_a stack\n{diff}"));
    assert!(hot.1 > 0 && hot.2 > 0, "{diff}");
    // Normalized: the base's total matches the new one's up to rounding down per line.
    assert!(
        base_total <= new_total && base_total + lines.len() as u64 >= new_total,
        "{base_total} vs {new_total}\n{diff}"
    );
    let svg = dir.path().join("diff.svg");
    rprof_ok(&[
        "report",
        "-i",
        &new,
        "--diff",
        &base,
        "--flamegraph",
        svg.to_str().unwrap(),
    ]);
    let svg = std::fs::read_to_string(svg).unwrap();
    assert!(svg.contains("hot_a") && svg.contains("<svg"));
    // Without --folded or --flamegraph, a table of the difference (issue 41): hot_a in both recordings.
    let table = rprof_ok(&["report", "-i", &new, "--diff", &base]);
    assert!(table.contains("Baseline      New  Delta Abs"), "{table}");
    let row = table
        .lines()
        .find(|l| l.ends_with("[.] hot_a"))
        .unwrap_or_else(|| panic!("no hot_a row\n{table}"));
    assert_eq!(row.matches('%').count(), 3, "{table}");
}

/// Check that unnamed code of two binaries (a stripped fixture and Debian's stripped perl, in one recording)
/// stays apart in pprof as in the table: no function is named `[unknown]`, each unnamed row of the table is a
/// pprof function of the same name with the same flat share (the leaf CPU time, to the table's rounding),
/// `go tool pprof -top` ranks the big ones as the table does and neither `-top` nor `-traces` shows
/// `[unknown]`; and the Firefox profile names the same code the same way.
#[test]
fn pprof_unnamed_code_per_binary() {
    let test = "pprof_unnamed_code_per_binary";
    if !privileged(test) || !go_tool(test) {
        return;
    }
    let perl = Path::new("/usr/bin/perl");
    if !perl.exists() {
        return skip(test, "no /usr/bin/perl (apt-get install perl)");
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(
        dir.path(),
        "unnamed.c",
        &["-O2", "-g", "-fno-omit-frame-pointer"],
    );
    let st = Command::new("strip").arg(&bin).status().unwrap();
    assert!(st.success());
    // Perl's regex engine for 0.6 s of its own CPU time.
    let script = dir.path().join("loop.pl");
    std::fs::write(
        &script,
        "my $s = join q(), map { chr(97 + $_ % 3) } 1 .. 2000; my $n = 0;\n\
         while ((times)[0] < 0.6) { $n++ while $s =~ /(?:a|b)+?c/g } print qq($n\\n);\n",
    )
    .unwrap();
    let shell = format!(
        "'{}' 800 && {} '{}'",
        bin.display(),
        perl.display(),
        script.display()
    );
    let data = record_to(
        dir.path(),
        "two.data",
        &["-F", "999", "-g", "--", "sh", "-c", &shell],
    );
    let file = dir.path().join("two.pb.gz");
    rprof_ok(&["report", "-i", &data, "--pprof", file.to_str().unwrap()]);
    let table = rprof_ok(&["report", "-i", &data, "-q"]);
    let rows = table_rows(&table);
    let unnamed = |module: &str| -> Vec<(String, f64)> {
        let prefix = format!("{module}+0x");
        rows.iter()
            .filter(|r| r.0.starts_with(&prefix))
            .cloned()
            .collect()
    };
    let (fixture_rows, perl_rows) = (unnamed("unnamed"), unnamed("perl"));
    let sum = |rows: &[(String, f64)]| rows.iter().map(|r| r.1).sum::<f64>();
    eprintln!(
        "{} fixture rows ({:.1}%), {} perl rows ({:.1}%)\n{table}",
        fixture_rows.len(),
        sum(&fixture_rows),
        perl_rows.len(),
        sum(&perl_rows)
    );
    assert!(sum(&fixture_rows) >= 20.0, "{table}");
    assert!(sum(&perl_rows) >= 2.0, "{table}");

    let p = decode(&file);
    assert_valid(&p);
    let s = |i: i64| p.string_table[i as usize].as_str();
    let names: HashMap<u64, &str> = p.function.iter().map(|f| (f.id, s(f.name))).collect();
    let unknown: Vec<&&str> = names.values().filter(|n| n.contains("[unknown]")).collect();
    assert!(unknown.is_empty(), "{unknown:?}");
    // Flat CPU time by function: each sample's leaf location's innermost function.
    let locations: HashMap<u64, &proto::Location> = p.location.iter().map(|l| (l.id, l)).collect();
    let mut flat: HashMap<&str, i64> = HashMap::new();
    let mut total = 0i64;
    for sample in &p.sample {
        let leaf = locations[&sample.location_id[0]];
        *flat.entry(names[&leaf.line[0].function_id]).or_default() += sample.value[1];
        total += sample.value[1];
    }
    for (name, share) in fixture_rows.iter().chain(&perl_rows) {
        let got = flat.get(name.as_str()).copied().unwrap_or(0) as f64 * 100.0 / total as f64;
        assert!(
            (got - share).abs() < 0.006,
            "{name}: {got:.3}% in pprof, {share}% in the table"
        );
    }
    let top = pprof(&["-top"], &file);
    eprintln!("{top}");
    let top_rows = pprof_top(&top);
    assert!(!top_rows.iter().any(|r| r.0.contains("[unknown]")), "{top}");
    assert_same_top(&top_rows, &rows, "two binaries");
    let traces = pprof(&["-traces"], &file);
    assert!(!traces.contains("[unknown]"), "{traces}");
    assert!(
        traces.contains("unnamed+0x") && traces.contains("perl+0x"),
        "{traces}"
    );

    let firefox = dir.path().join("two.json");
    rprof_ok(&[
        "report",
        "-i",
        &data,
        "--firefox",
        firefox.to_str().unwrap(),
    ]);
    let leaves: Vec<String> = check_firefox(&read_json(&firefox))
        .into_iter()
        .flat_map(|(_, leaves)| leaves.into_iter().map(|l| l.1))
        .collect();
    assert!(!leaves.iter().any(|n| n.contains("[unknown]")));
    for (name, _) in fixture_rows.iter().chain(&perl_rows).take(3) {
        assert!(leaves.contains(name), "{name} in the Firefox profile");
    }
}
