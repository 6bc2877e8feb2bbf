//! `rprof record --push`: profiles pushed to a stand-in for Pyroscope's ingest API on 127.0.0.1
//! (tests/push_receiver/receiver.py keeps every request), read back by `go tool pprof` and by prost, and
//! checked against the local recording of the same run.
mod common;
use common::*;
use prost::Message;
use rprof::report::proto;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The receiver, running while this lives.
struct Receiver {
    dir: PathBuf,
    child: Child,
    port: u16,
}

impl Receiver {
    /// Start the receiver keeping requests in `dir`, on `port` (0: a free one).
    fn start(dir: &Path, port: u16) -> Receiver {
        Receiver::start_with(dir, port, &[])
    }

    /// [`Receiver::start`] with more arguments (a certificate and key: https).
    fn start_with(dir: &Path, port: u16, more: &[&Path]) -> Receiver {
        std::fs::create_dir_all(dir).unwrap();
        let _ = std::fs::remove_file(dir.join("port"));
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/push_receiver/receiver.py");
        let child = Command::new("python3")
            .arg(script)
            .arg(dir)
            .arg(port.to_string())
            .args(more)
            .stdout(Stdio::null())
            .spawn()
            .expect("run python3 tests/push_receiver/receiver.py");
        let started = Instant::now();
        let port = loop {
            if let Ok(p) = std::fs::read_to_string(dir.join("port")) {
                break p.trim().parse().unwrap();
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the receiver did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        Receiver {
            dir: dir.to_path_buf(),
            child,
            port,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn stop(mut self) -> u16 {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.port
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One pushed request as the receiver kept it.
struct Push {
    query: serde_json::Value,
    meta: serde_json::Value,
    pprof: PathBuf,
    profile: proto::Profile,
}

impl Push {
    fn q(&self, key: &str) -> String {
        self.query[key].as_str().unwrap_or("").to_string()
    }
    fn from(&self) -> u64 {
        self.q("from").parse().unwrap()
    }
    fn until(&self) -> u64 {
        self.q("until").parse().unwrap()
    }
    /// The sum of `samples/count` over the profile's samples.
    fn samples(&self) -> i64 {
        self.profile.sample.iter().map(|s| s.value[0]).sum()
    }
    fn string(&self, i: i64) -> &str {
        &self.profile.string_table[i as usize]
    }
}

/// Every request the receiver kept in `dir`, in period order.
fn pushes(dir: &Path) -> Vec<Push> {
    let mut out = Vec::new();
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .filter(|p| p.with_extension("pprof").exists())
        .collect();
    names.sort();
    for json in names {
        let meta: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let pprof = json.with_extension("pprof");
        let mut bytes = Vec::new();
        flate2::read::GzDecoder::new(std::fs::File::open(&pprof).unwrap())
            .read_to_end(&mut bytes)
            .expect("a gzipped pprof body");
        let profile = proto::Profile::decode(bytes.as_slice()).expect("a pprof profile");
        out.push(Push {
            query: meta["query"].clone(),
            meta,
            pprof,
            profile,
        });
    }
    out.sort_by_key(|p| p.from());
    out
}

/// Whether `go tool pprof` runs here (else the test skips, or fails under CI).
fn go_tool(test: &str) -> bool {
    let ok = Command::new("go")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        skip(
            test,
            "the go tool is not installed (apt-get install golang-go)",
        );
    }
    ok
}

/// `go tool pprof -raw FILE` reads the body; returns its text.
fn go_pprof_raw(file: &Path) -> String {
    let out = Command::new("go")
        .args(["tool", "pprof", "-raw"])
        .arg(file)
        .output()
        .expect("run go tool pprof");
    assert!(
        out.status.success(),
        "go tool pprof -raw {} failed:\n{}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The sample count of a recording, from `rprof report`'s first line (`# N samples, ...`).
fn recorded_samples(data: &Path) -> i64 {
    let out = rprof_ok(&["report", "-i", data.to_str().unwrap(), "--stdio"]);
    let line = out.lines().next().unwrap_or("");
    line.trim_start_matches("# ")
        .split_whitespace()
        .next()
        .and_then(|n| n.replace(',', "").parse().ok())
        .unwrap_or_else(|| panic!("no sample count in: {line}"))
}

/// Periods follow each other without gap or overlap, and each pprof says the period of its query.
fn assert_contiguous(pushes: &[Push]) {
    for w in pushes.windows(2) {
        assert_eq!(w[0].until(), w[1].from(), "periods are not contiguous");
    }
    for p in pushes {
        assert!(p.until() > p.from());
        assert_eq!(p.profile.time_nanos as u64, p.from() * 1_000_000_000);
        assert_eq!(
            p.profile.duration_nanos as u64,
            (p.until() - p.from()) * 1_000_000_000
        );
    }
}

fn run_rprof(args: &[&str]) -> (String, std::process::ExitStatus) {
    let out = rprof().args(args).output().expect("run rprof");
    (
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status,
    )
}

/// Check that every pushed body is a pprof that `go tool pprof` reads, with the application name and labels
/// of the command line, pid and comm labels on the samples, contiguous periods that agree with the pprof's
/// own time and duration, and that the samples of all pushes add up exactly to the `-o` recording's.
#[test]
fn pushes_add_up_to_the_recording() {
    let test = "pushes_add_up_to_the_recording";
    if !privileged(test) || !go_tool(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rcv = Receiver::start(&dir.path().join("rcv"), 0);
    let bin = build_c(dir.path(), "calltree.c", FP);
    let data = dir.path().join("push.data");
    let spool = dir.path().join("spool");
    let url = rcv.url();
    let (stderr, status) = run_rprof(&[
        "record",
        "-F",
        "199",
        "-g",
        "--push",
        &url,
        "--every",
        "1",
        "--app",
        "calltree_app",
        "--label",
        "env=test",
        "--spool",
        spool.to_str().unwrap(),
        "-o",
        data.to_str().unwrap(),
        "--",
        bin.to_str().unwrap(),
        "2500",
    ]);
    assert!(status.success(), "rprof failed:\n{stderr}");
    let pushes = pushes(&rcv.dir);
    assert!(pushes.len() >= 2, "{} pushes:\n{stderr}", pushes.len());
    assert_contiguous(&pushes);
    let mut comms = std::collections::HashSet::new();
    for p in &pushes {
        assert_eq!(p.meta["path"], "/ingest");
        assert_eq!(p.q("format"), "pprof");
        assert_eq!(p.q("sampleRate"), "199");
        let name = p.q("name");
        assert!(name.starts_with("calltree_app{"), "{name}");
        assert!(
            name.contains("env=test") && name.contains("host="),
            "{name}"
        );
        assert_eq!(p.meta["sample_type_config"]["cpu"]["units"], "nanoseconds");
        let raw = go_pprof_raw(&p.pprof);
        assert!(raw.contains("samples/count"), "{raw}");
        for s in &p.profile.sample {
            let keys: Vec<&str> = s.label.iter().map(|l| p.string(l.key)).collect();
            assert!(keys.contains(&"pid") && keys.contains(&"comm"), "{keys:?}");
            for l in &s.label {
                if p.string(l.key) == "comm" {
                    comms.insert(p.string(l.str).to_string());
                }
            }
        }
    }
    assert!(comms.contains("calltree"), "{comms:?}");
    let pushed: i64 = pushes.iter().map(Push::samples).sum();
    assert_eq!(pushed, recorded_samples(&data), "{stderr}");
    assert!(stderr.contains("still spooled 0"), "{stderr}");
}

/// Check that a receiver stopped for 3 s in the middle of a run loses nothing: every period arrives by the
/// end of the run, contiguous, and the samples add up to the recording's.
#[test]
fn receiver_outage_loses_nothing() {
    let test = "receiver_outage_loses_nothing";
    if !privileged(test) || !go_tool(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rcv_dir = dir.path().join("rcv");
    let rcv = Receiver::start(&rcv_dir, 0);
    let bin = build_c(dir.path(), "calltree.c", FP);
    let data = dir.path().join("push.data");
    let spool = dir.path().join("spool");
    let url = rcv.url();
    let child = rprof()
        .args([
            "record",
            "-F",
            "99",
            "-g",
            "--push",
            &url,
            "--every",
            "1",
            "--flush-timeout",
            "10",
            "--spool",
            spool.to_str().unwrap(),
            "-o",
            data.to_str().unwrap(),
            "--",
            bin.to_str().unwrap(),
            "6000",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let port = rcv.stop();
    std::thread::sleep(Duration::from_secs(3));
    let rcv = Receiver::start(&rcv_dir, port);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let pushes = pushes(&rcv.dir);
    assert_contiguous(&pushes);
    for p in &pushes {
        go_pprof_raw(&p.pprof);
    }
    let pushed: i64 = pushes.iter().map(Push::samples).sum();
    assert_eq!(pushed, recorded_samples(&data), "{stderr}");
    assert!(stderr.contains("still spooled 0"), "{stderr}");
    assert!(
        !stderr.contains("retried 0,"),
        "the outage made no push retry:\n{stderr}"
    );
}

/// Check that profiles spooled by an rprof killed with SIGKILL while the store is down are sent by the next
/// rprof that uses the same spool.
#[test]
fn killed_rprof_spool_is_sent_next_time() {
    let test = "killed_rprof_spool_is_sent_next_time";
    if !privileged(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rcv_dir = dir.path().join("rcv");
    // A port where nothing listens: the receiver's, once stopped.
    let port = Receiver::start(&rcv_dir, 0).stop();
    let bin = build_c(dir.path(), "calltree.c", FP);
    let spool = dir.path().join("spool");
    let url = format!("http://127.0.0.1:{port}");
    let mut child = rprof()
        .args([
            "record",
            "-F",
            "99",
            "-g",
            "--push",
            &url,
            "--every",
            "1",
            "--spool",
            spool.to_str().unwrap(),
            "--",
            bin.to_str().unwrap(),
            "20000",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait for two periods in the spool, then kill.
    let spooled = |d: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".push"))
            .collect();
        v.sort();
        v
    };
    let started = Instant::now();
    while spooled(&spool).len() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "nothing was spooled"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let left = spooled(&spool);
    // What each spooled profile will be sent as (its first line).
    let queries: Vec<String> = left
        .iter()
        .map(|n| {
            let text = std::fs::read(spool.join(n)).unwrap();
            let line = &text[..text.iter().position(|&b| b == b'\n').unwrap()];
            let v: serde_json::Value = serde_json::from_slice(line).unwrap();
            v["query"].as_str().unwrap().to_string()
        })
        .collect();
    let rcv = Receiver::start(&rcv_dir, port);
    let (stderr, status) = run_rprof(&[
        "record",
        "-F",
        "49",
        "-g",
        "--push",
        &rcv.url(),
        "--every",
        "1",
        "--spool",
        spool.to_str().unwrap(),
        "--",
        bin.to_str().unwrap(),
        "300",
    ]);
    assert!(status.success(), "{stderr}");
    let got: Vec<String> = std::fs::read_dir(&rcv.dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .collect();
    for q in &queries {
        let from = q.split("&from=").nth(1).unwrap().split('&').next().unwrap();
        assert!(
            got.iter()
                .any(|g| g.contains(&format!("\"from\": \"{from}\""))),
            "the profile from {from} left by the killed rprof was not sent:\n{stderr}"
        );
    }
    assert!(spooled(&spool).is_empty(), "{stderr}");
    assert!(
        stderr.contains(&format!("retried {}", queries.len())),
        "{stderr}"
    );
}

/// Check that basic authentication (password from the environment), a bearer token from a file and the
/// tenant header reach the store, and that https works with a CA file naming the store's certificate.
#[test]
fn auth_tenant_and_tls_reach_the_store() {
    let test = "auth_tenant_and_tls_reach_the_store";
    if !privileged(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "calltree.c", FP);
    // A CA, and the store's certificate signed by it (rustls refuses a self-signed end certificate).
    let d = dir.path();
    let (ca, cert, key) = (d.join("ca.pem"), d.join("cert.pem"), d.join("key.pem"));
    std::fs::write(
        d.join("ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    let openssl = |args: &[&str]| {
        let st = Command::new("openssl")
            .args(args)
            .current_dir(d)
            .stderr(Stdio::null())
            .status()
            .expect("run openssl");
        assert!(st.success(), "openssl {args:?}");
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=rprof test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "key.pem",
        "-out",
        "leaf.csr",
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        "ext",
        "-out",
        "cert.pem",
    ]);
    let rcv = Receiver::start_with(&dir.path().join("rcv"), 0, &[&cert, &key]);
    let https = format!("https://127.0.0.1:{}", rcv.port);
    let spool = dir.path().join("spool");
    let out = rprof()
        .args([
            "record",
            "-F",
            "49",
            "-g",
            "--push",
            &https,
            "--push-ca",
            ca.to_str().unwrap(),
        ])
        .args([
            "--push-user",
            "agent",
            "--tenant",
            "team-a",
            "--spool",
            spool.to_str().unwrap(),
        ])
        .args(["--", bin.to_str().unwrap(), "300"])
        .env("RPROF_PUSH_PASSWORD", "s3cret")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let got = pushes(&rcv.dir);
    assert!(!got.is_empty(), "{stderr}");
    for p in &got {
        let h = &p.meta["headers"];
        // base64("agent:s3cret")
        assert_eq!(h["authorization"], "Basic YWdlbnQ6czNjcmV0", "{h}");
        assert_eq!(h["x-scope-orgid"], "team-a", "{h}");
    }
    let token = dir.path().join("token");
    std::fs::write(&token, "tok-123\n").unwrap();
    let before = got.len();
    let out = rprof()
        .args([
            "record",
            "-F",
            "49",
            "-g",
            "--push",
            &https,
            "--push-ca",
            ca.to_str().unwrap(),
        ])
        .args([
            "--push-token-file",
            token.to_str().unwrap(),
            "--spool",
            spool.to_str().unwrap(),
        ])
        .args(["--", bin.to_str().unwrap(), "300"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let got = pushes(&rcv.dir);
    assert!(got.len() > before, "{stderr}");
    for p in &got[before..] {
        assert_eq!(p.meta["headers"]["authorization"], "Bearer tok-123");
    }
}

/// Check that `--push-unsymbolized` sends the fixture's frames as file offsets in a mapping with the
/// binary's path and build id and no function names, that `go tool pprof` reads it, and that the samples add
/// up to the recording's.
#[test]
fn unsymbolized_pushes_carry_build_ids_and_offsets() {
    let test = "unsymbolized_pushes_carry_build_ids_and_offsets";
    if !privileged(test) || !go_tool(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rcv = Receiver::start(&dir.path().join("rcv"), 0);
    let bin = build_c(dir.path(), "calltree.c", FP);
    let data = dir.path().join("push.data");
    let spool = dir.path().join("spool");
    let url = rcv.url();
    let (stderr, status) = run_rprof(&[
        "record",
        "-F",
        "199",
        "-g",
        "--push",
        &url,
        "--push-unsymbolized",
        "--every",
        "1",
        "--spool",
        spool.to_str().unwrap(),
        "-o",
        data.to_str().unwrap(),
        "--",
        bin.to_str().unwrap(),
        "1000",
    ]);
    assert!(status.success(), "{stderr}");
    let pushes = pushes(&rcv.dir);
    assert_contiguous(&pushes);
    let build_id = {
        let out = Command::new("readelf")
            .arg("-n")
            .arg(&bin)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines()
            .find_map(|l| l.trim().strip_prefix("Build ID: "))
            .unwrap()
            .to_string()
    };
    let mut fixture_locations = 0;
    for p in &pushes {
        go_pprof_raw(&p.pprof);
        for m in &p.profile.mapping {
            if p.string(m.filename) != bin.to_str().unwrap() {
                continue;
            }
            assert_eq!(p.string(m.build_id), build_id);
            assert!(!m.has_functions);
            for l in p.profile.location.iter().filter(|l| l.mapping_id == m.id) {
                assert!(l.line.is_empty(), "a fixture frame was symbolized");
                assert!(l.address < m.memory_limit);
                fixture_locations += 1;
            }
        }
    }
    assert!(fixture_locations > 0, "no frame of the fixture was sent");
    let pushed: i64 = pushes.iter().map(Push::samples).sum();
    assert_eq!(pushed, recorded_samples(&data), "{stderr}");
}

/// Check that `--push-otlp` beside `--push` sends each period also as an OTLP profiles request that
/// opentelemetry-proto decodes: one per Pyroscope push, at the same periods, under the application's
/// `service.name` and the host's `host.name`, their samples adding up to the recording's exactly.
#[test]
fn otlp_pushes_match_the_pyroscope_ones() {
    let test = "otlp_pushes_match_the_pyroscope_ones";
    if !privileged(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rcv = Receiver::start(&dir.path().join("rcv"), 0);
    let bin = build_c(dir.path(), "calltree.c", FP);
    let data = dir.path().join("push.data");
    let spool = dir.path().join("spool");
    let url = rcv.url();
    let (stderr, status) = run_rprof(&[
        "record",
        "-F",
        "199",
        "-g",
        "--push",
        &url,
        "--push-otlp",
        &url,
        "--every",
        "1",
        "--app",
        "calltree_app",
        "--spool",
        spool.to_str().unwrap(),
        "-o",
        data.to_str().unwrap(),
        "--",
        bin.to_str().unwrap(),
        "2000",
    ]);
    assert!(status.success(), "rprof failed:\n{stderr}");
    let pushes = pushes(&rcv.dir);
    let mut otlp: Vec<PathBuf> = std::fs::read_dir(&rcv.dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "otlp"))
        .collect();
    otlp.sort();
    assert!(pushes.len() >= 2, "{} pushes:\n{stderr}", pushes.len());
    assert_eq!(otlp.len(), pushes.len(), "{stderr}");
    let mut starts = Vec::new();
    let mut samples = 0;
    for body in &otlp {
        let Some(d) = otlp_decode(test, body) else {
            return;
        };
        assert_eq!(d["resource"]["service.name"], "calltree_app");
        assert!(d["resource"]["host.name"].is_string(), "{}", d["resource"]);
        let count = d["profiles"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["type"] == "samples")
            .expect("a samples profile");
        starts.push(count["time_unix_nano"].as_u64().unwrap());
        samples += count["total"].as_i64().unwrap();
    }
    starts.sort_unstable();
    let pyroscope: Vec<u64> = pushes.iter().map(|p| p.from() * 1_000_000_000).collect();
    assert_eq!(starts, pyroscope);
    assert_eq!(samples, recorded_samples(&data), "{stderr}");
}

/// The names of the functions a push's profile holds.
fn function_names(p: &Push) -> std::collections::HashSet<String> {
    p.profile
        .function
        .iter()
        .map(|f| p.string(f.name).to_string())
        .collect()
}

/// Check that a push keeps a copy of /proc/kallsyms in the build-id cache (`$PERF_BUILDID_DIR`) and names the
/// kernel's frames from it on the next start (a file read, not the kernel formatting every line of
/// /proc/kallsyms): the copy is rewritten with every kernel-image name prefixed, and the next push's kernel
/// frames carry the prefix. With `-N` no copy is written.
#[test]
fn kernel_frames_named_from_the_kallsyms_copy() {
    let test = "kernel_frames_named_from_the_kallsyms_copy";
    if !privileged(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "writeloop.c", FP);
    let push = |cache: &Path, rcv: &str, more: &[&str]| {
        let rcv = Receiver::start(&dir.path().join(rcv), 0);
        let url = rcv.url();
        let spool = dir.path().join("spool");
        let mut args = vec!["record", "-F", "199", "-g", "--push", &url, "--every", "1"];
        args.extend_from_slice(more);
        let (spool, bin) = (spool.to_str().unwrap(), bin.to_str().unwrap());
        args.extend_from_slice(&["--spool", spool, "--", bin, "500"]);
        let out = rprof()
            .args(&args)
            .env("PERF_BUILDID_DIR", cache)
            .output()
            .expect("run rprof");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "rprof failed:\n{stderr}");
        let names: std::collections::HashSet<String> =
            pushes(&rcv.dir).iter().flat_map(function_names).collect();
        (names, stderr)
    };
    let copies = |cache: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(cache.join("[kernel.kallsyms]"))
            .map(|d| d.flatten().map(|e| e.path().join("kallsyms")).collect())
            .unwrap_or_default()
    };

    let none = dir.path().join("cache-N");
    push(&none, "rcv-N", &["-N"]);
    assert!(copies(&none).is_empty(), "-N wrote a kallsyms copy");

    let cache = dir.path().join("cache");
    let (names, stderr) = push(&cache, "rcv1", &[]);
    assert!(names.contains("vfs_write"), "{names:?}\n{stderr}");
    let copy = copies(&cache);
    assert_eq!(copy.len(), 1, "no kallsyms copy in {}", cache.display());
    let text = std::fs::read_to_string(&copy[0]).unwrap();
    let renamed: String = text
        .lines()
        .map(|l| match l.splitn(3, ' ').collect::<Vec<_>>()[..] {
            [addr, kind, name] if !name.contains('\t') => {
                format!("{addr} {kind} rprofcopy_{name}\n")
            }
            _ => format!("{l}\n"),
        })
        .collect();
    std::fs::write(&copy[0], renamed).unwrap();

    // An address outside the kernel image (a module, a BPF program) would load /proc/kallsyms too, and name
    // later stacks from it: only the copy's names are asserted.
    let (names, stderr) = push(&cache, "rcv2", &[]);
    assert!(
        names.contains("rprofcopy_vfs_write"),
        "the kernel's frames were not named from the copy: {names:?}\n{stderr}"
    );
}

/// The names of the spooled profiles in `spool`, sorted (oldest first).
fn spool_files(spool: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(spool)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".push"))
        .collect();
    v.sort();
    v
}

/// How many requests the receiver in `dir` kept.
fn received(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
                .count()
        })
        .unwrap_or(0)
}

/// The number in the closing line's `N profiles made`.
fn made(stderr: &str) -> usize {
    let at = stderr
        .find(" profiles made (")
        .unwrap_or_else(|| panic!("no closing line:\n{stderr}"));
    let n = stderr[..at].rsplit(' ').next().unwrap();
    n.parse()
        .unwrap_or_else(|_| panic!("no count before 'profiles made':\n{stderr}"))
}

/// Check that a spooled profile goes only to the store it was made for (issue 45): profiles spooled for a
/// store that is down are not sent by a later push to another URL, nor to the same URL under another tenant
/// (each says what waits for the other store, in one line), and are sent by a later push to their own
/// store. A profile of an older rprof (no destination recorded) is never sent, said in one line, and kept.
#[test]
fn spooled_profiles_go_only_to_their_own_store() {
    let test = "spooled_profiles_go_only_to_their_own_store";
    if !privileged(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "calltree.c", FP);
    let spool = dir.path().join("spool");
    let push = |url: &str, more: &[&str], work: &str| -> String {
        let mut args = vec!["record", "-F", "49", "-g", "--push", url, "--every", "1"];
        args.extend_from_slice(more);
        let spool = spool.to_str().unwrap();
        args.extend_from_slice(&["--flush-timeout", "0.5", "--spool", spool]);
        args.extend_from_slice(&["--", bin.to_str().unwrap(), work]);
        let (stderr, status) = run_rprof(&args);
        assert!(status.success(), "rprof failed:\n{stderr}");
        stderr
    };
    // A closed port on 127.0.0.1: the first store is down.
    let down_dir = dir.path().join("rcv-own");
    let port = Receiver::start(&down_dir, 0).stop();
    let own = format!("http://127.0.0.1:{port}");
    let stderr = push(&own, &["--app", "vm"], "1500");
    let waiting = spool_files(&spool);
    assert_eq!(waiting.len(), made(&stderr), "{stderr}");
    assert!(!waiting.is_empty(), "nothing was spooled:\n{stderr}");
    // An older rprof's profile: the same content without a destination, under the old name.
    let text = std::fs::read(spool.join(&waiting[0])).unwrap();
    let nl = text.iter().position(|&b| b == b'\n').unwrap();
    let mut header: serde_json::Value = serde_json::from_slice(&text[..nl]).unwrap();
    header.as_object_mut().unwrap().remove("to");
    let mut old = serde_json::to_vec(&header).unwrap();
    old.extend_from_slice(&text[nl..]);
    let old_name = format!("{}.push", &waiting[0][..38]);
    std::fs::write(spool.join(&old_name), old).unwrap();

    // Another URL, another app: only its own profiles arrive.
    let other = Receiver::start(&dir.path().join("rcv-other"), 0);
    let stderr = push(&other.url(), &["--app", "shop"], "300");
    assert_eq!(received(&other.dir), made(&stderr), "{stderr}");
    assert!(pushes(&other.dir)
        .iter()
        .all(|p| p.q("name").starts_with("shop{")));
    let notice = format!(
        "keeps {} profiles made for other stores, not sent here ({} for {own} (pyroscope))",
        waiting.len(),
        waiting.len()
    );
    assert!(stderr.contains(&notice), "no '{notice}' in:\n{stderr}");
    assert!(
        stderr.contains(
            "holds 1 profiles of an older rprof that did not record their store: never sent"
        ),
        "{stderr}"
    );
    assert_eq!(spool_files(&spool).len(), waiting.len() + 1, "{stderr}");
    let other_got = received(&other.dir);

    // The same URL under another tenant: only that tenant's profiles arrive, with its header.
    let rcv = Receiver::start(&down_dir, port);
    let stderr = push(&own, &["--tenant", "team-b"], "300");
    let tenant_b = made(&stderr);
    assert_eq!(received(&rcv.dir), tenant_b, "{stderr}");
    for p in pushes(&rcv.dir) {
        assert_eq!(p.meta["headers"]["x-scope-orgid"], "team-b", "{stderr}");
    }
    assert!(stderr.contains(&notice), "no '{notice}' in:\n{stderr}");

    // Their own store: every waiting profile arrives, under its own app name, and the spool keeps only the
    // older rprof's profile.
    let stderr = push(&own, &["--app", "vm"], "300");
    let mine = made(&stderr);
    assert_eq!(
        received(&rcv.dir),
        tenant_b + waiting.len() + mine,
        "{stderr}"
    );
    let vm: Vec<Push> = pushes(&rcv.dir)
        .into_iter()
        .filter(|p| p.meta["headers"]["x-scope-orgid"].is_null())
        .collect();
    assert_eq!(vm.len(), waiting.len() + mine, "{stderr}");
    assert!(vm.iter().all(|p| p.q("name").starts_with("vm{")));
    assert!(
        stderr.contains(&format!("retried {}", waiting.len())),
        "{stderr}"
    );
    assert!(!stderr.contains("made for other stores"), "{stderr}");
    assert_eq!(spool_files(&spool), [old_name], "{stderr}");
    assert_eq!(received(&other.dir), other_got, "{stderr}");
}

/// `record -a -F 49 -g --push` on a host running a Python program (fixtures/py_work.py, Debian's python3.11):
/// the pushed profiles name its Python functions (`inner (py_work.py:LINE)` under `middle` and `outer`), as the
/// recording does.
#[test]
fn pushed_profiles_name_python_functions() {
    let test = "pushed_profiles_name_python_functions";
    if !privileged(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rcv = Receiver::start(&dir.path().join("rcv"), 0);
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/py_work.py");
    let mut python = Command::new("/usr/bin/python3.11")
        .arg(&fixture)
        .args(["nested", "30"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("run python3.11");
    let mut ready = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(python.stdout.take().unwrap()),
        &mut ready,
    )
    .unwrap();
    let spool = dir.path().join("spool");
    let url = rcv.url();
    let (stderr, status) = run_rprof(&[
        "record",
        "-a",
        "-F",
        "49",
        "-g",
        "--push",
        &url,
        "--every",
        "1",
        "--spool",
        spool.to_str().unwrap(),
        "--",
        "sleep",
        "3",
    ]);
    let _ = python.kill();
    let _ = python.wait();
    assert!(status.success(), "rprof failed:\n{stderr}");
    let pushes = pushes(&rcv.dir);
    let names: std::collections::HashSet<&str> = pushes
        .iter()
        .flat_map(|p| p.profile.string_table.iter().map(String::as_str))
        .collect();
    for f in [
        "inner (py_work.py:",
        "middle (py_work.py:",
        "outer (py_work.py:",
    ] {
        assert!(
            names.iter().any(|n| n.starts_with(f)),
            "no {f} in the pushes:\n{stderr}"
        );
    }
}

/// The hex build id of an ELF file (`readelf -n`).
fn readelf_build_id(bin: &Path) -> String {
    let out = Command::new("readelf").arg("-n").arg(bin).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .expect("a build id")
        .to_string()
}

/// The `rprof_unsymbolized` label values of a push's samples of process `comm`, and whether any sample of it
/// lacks the label.
fn unsymbolized_labels(p: &Push, comm: &str) -> (std::collections::HashSet<String>, bool) {
    let mut values = std::collections::HashSet::new();
    let mut without = false;
    for s in &p.profile.sample {
        let label = |key: &str| {
            s.label
                .iter()
                .find(|l| p.string(l.key) == key)
                .map(|l| p.string(l.str).to_string())
        };
        if label("comm").as_deref() != Some(comm) {
            continue;
        }
        match label("rprof_unsymbolized") {
            Some(v) => {
                values.insert(v);
            }
            None => without = true,
        }
    }
    (values, without)
}

/// Check the push's budget (issue 45): with a CPU budget of 0.01% of a core (less than any recorder takes to
/// start) the fixture's binary is not read: its frames go out as file offsets under a mapping with its build
/// id (as `readelf -n` gives it) and no functions, its samples are labelled `rprof_unsymbolized=cpu_budget`,
/// the log says so, and the samples still add up to the local recording's; a memory budget of 1 MiB (less than
/// rprof's own binary) does the same with `memory_budget`; a generous budget names `hot_a` and `work_a` with
/// no such label.
#[test]
fn push_budget_falls_back_to_unsymbolized() {
    let test = "push_budget_falls_back_to_unsymbolized";
    if !privileged(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "calltree.c", FP);
    let build_id = readelf_build_id(&bin);
    let go = go_tool(test);
    let run = |name: &str, budget: [&str; 2]| {
        let rcv = Receiver::start(&dir.path().join(name), 0);
        let (url, data) = (rcv.url(), dir.path().join(format!("{name}.data")));
        let spool = dir.path().join(format!("{name}.spool"));
        let (stderr, status) = run_rprof(&[
            "record",
            "-F",
            "199",
            "-g",
            "--push",
            &url,
            "--every",
            "1",
            "--push-cpu-budget",
            budget[0],
            "--push-mem-budget",
            budget[1],
            "--spool",
            spool.to_str().unwrap(),
            "-o",
            data.to_str().unwrap(),
            "--",
            bin.to_str().unwrap(),
            "1500",
        ]);
        assert!(status.success(), "rprof failed:\n{stderr}");
        let pushes = pushes(&rcv.dir);
        let pushed: i64 = pushes.iter().map(Push::samples).sum();
        assert_eq!(pushed, recorded_samples(&data), "{stderr}");
        if go {
            pushes.iter().for_each(|p| drop(go_pprof_raw(&p.pprof)));
        }
        (pushes, stderr)
    };
    for (name, budget, why) in [
        ("cpu", ["0.01%", "none"], "cpu_budget"),
        ("mem", ["none", "1M"], "memory_budget"),
    ] {
        let (pushes, stderr) = run(name, budget);
        let over = match why {
            "cpu_budget" => "over its CPU budget",
            _ => "over its memory budget",
        };
        assert!(stderr.contains(over), "no log line:\n{stderr}");
        // One line for a run of periods refused alike (the same binaries asked again each period); the
        // end's summary counts every period refused.
        let logged = stderr.matches(over).count() as u64;
        let periods: u64 = stderr
            .split_once(" periods over the budget pushed")
            .and_then(|(before, _)| before.rsplit(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("{name}: no summary of the periods refused:\n{stderr}"));
        assert!((1..=periods).contains(&logged), "{name}:\n{stderr}");
        let mut fixture_locations = 0;
        for p in &pushes {
            let names = function_names(p);
            assert!(!names.contains("hot_a"), "{name}: hot_a named:\n{stderr}");
            for m in &p.profile.mapping {
                if p.string(m.filename) != bin.to_str().unwrap() {
                    continue;
                }
                assert_eq!(p.string(m.build_id), build_id, "{name}");
                assert!(!m.has_functions, "{name}");
                for l in p.profile.location.iter().filter(|l| l.mapping_id == m.id) {
                    assert!(l.line.is_empty(), "{name}: a fixture frame was symbolized");
                    assert!(l.address < m.memory_limit);
                    fixture_locations += 1;
                }
            }
            let (labels, without) = unsymbolized_labels(p, "calltree");
            if !labels.is_empty() || without {
                assert_eq!(labels, [why.to_string()].into(), "{name}:\n{stderr}");
                assert!(!without, "{name}: a calltree sample without the label");
            }
        }
        assert!(
            fixture_locations > 0,
            "{name}: no frame of the fixture sent"
        );
    }
    let (pushes, stderr) = run("wide", ["100%", "1G"]);
    assert!(!stderr.contains("budget"), "{stderr}");
    let names: std::collections::HashSet<String> = pushes.iter().flat_map(function_names).collect();
    assert!(
        names.contains("hot_a") && names.contains("work_a"),
        "{names:?}\n{stderr}"
    );
    for p in &pushes {
        assert!(unsymbolized_labels(p, "calltree").0.is_empty(), "{stderr}");
    }
}
