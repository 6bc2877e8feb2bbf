//! The debuginfod client against the real server (elfutils' `debuginfod -F`): a stripped fixture's debug file,
//! its executable and its source (which exists only in the server's mount namespace) come from the server by
//! build id; without DEBUGINFOD_URLS the code stays unnamed, with its cause; the cache serves runs without a
//! server; and a server that never answers costs one warning and a timeout, not a hang.
mod common;
use common::*;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Where the fixture's DWARF says its source is: a directory that exists only in the server's namespace.
const SOURCE_DIR: &str = "/mnt/rprof-debuginfod-src";

/// A stripped fixture, its build id, and a directory holding its debug file and executable for the server.
struct Fixture {
    dir: tempfile::TempDir,
    bin: PathBuf,
    build_id: String,
}

impl Fixture {
    /// Build `fixtures/unnamed.c` (-O2 -g, its source path rewritten to [`SOURCE_DIR`]), keep its debug file
    /// and a copy of the stripped executable under `srv/`, and strip it.
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::copy(fixtures().join("unnamed.c"), src.join("unnamed.c")).unwrap();
        let bin = dir.path().join("unnamed");
        run(Command::new("gcc")
            .args(["-O2", "-g", "-fno-omit-frame-pointer"])
            .arg(format!("-fdebug-prefix-map={}={SOURCE_DIR}", src.display()))
            .arg(src.join("unnamed.c"))
            .arg("-o")
            .arg(&bin));
        let srv = dir.path().join("srv");
        std::fs::create_dir_all(&srv).unwrap();
        run(Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(&bin)
            .arg(srv.join("unnamed.debug")));
        run(Command::new("strip").arg(&bin));
        std::fs::copy(&bin, srv.join("unnamed.exe")).unwrap();
        let info = rprof::symbols::elf_info(&bin).unwrap();
        let build_id = info
            .build_id
            .unwrap()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        Fixture { dir, bin, build_id }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Record the stripped fixture (-F 999 -g; -N: no copy of it in the build-id cache) running for `cpu_ms`
    /// of its own CPU time.
    fn record(&self, cpu_ms: &str) -> String {
        let bin = self.bin.to_str().unwrap();
        record_to(
            self.dir.path(),
            "stripped.data",
            &["-N", "-F", "999", "-g", "--", bin, cpu_ms],
        )
    }
}

fn run(cmd: &mut Command) {
    let st = cmd.status().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(st.success(), "{cmd:?} failed");
}

/// A debuginfod server on 127.0.0.1 serving `fixture`'s `srv/`, with the source in its own mount namespace
/// (a tmpfs on /mnt), ready (its scan is asynchronous: polled until it serves the debug file).
fn start_server(fixture: &Fixture) -> (KillOnDrop, String) {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let script = format!(
        "mount -t tmpfs none /mnt && mkdir -p {SOURCE_DIR} && cp '{}' {SOURCE_DIR}/ && \
         exec debuginfod -F -p {port} -d :memory: '{}'",
        fixture.path("src/unnamed.c").display(),
        fixture.path("srv").display()
    );
    let server = Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run unshare");
    let server = KillOnDrop(server);
    let url = format!("http://127.0.0.1:{port}");
    let probe = format!("{url}/buildid/{}/debuginfo", fixture.build_id);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let served = ureq::get(&probe).call().is_ok_and(|r| r.status() == 200);
        if served {
            return (server, url);
        }
        assert!(
            Instant::now() < deadline,
            "debuginfod did not serve {probe} in 60 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether this test can run: root (mount namespace), debuginfod, unshare and a /mnt free of our directory.
fn can_run(test: &str) -> bool {
    if !privileged(test) {
        return false;
    }
    let ok = |tool: &str| Command::new(tool).arg("--version").output().is_ok();
    if !ok("debuginfod") {
        skip(test, "no debuginfod (apt-get install debuginfod)");
        return false;
    }
    if !ok("unshare") || Path::new(SOURCE_DIR).exists() {
        skip(
            test,
            "no unshare, or /mnt/rprof-debuginfod-src exists on this machine",
        );
        return false;
    }
    true
}

/// rprof with `args` and the debuginfod environment `urls` (None: unset) and `cache`; (stdout, stderr).
fn rprof_env(urls: Option<&str>, cache: &Path, args: &[&str]) -> (String, String) {
    let mut cmd = rprof();
    // An empty build-id cache: the recorded build comes from the server or nowhere.
    cmd.env_remove("DEBUGINFOD_URLS")
        .env("DEBUGINFOD_CACHE_PATH", cache)
        .env("PERF_BUILDID_DIR", cache.join("no-buildid-cache"))
        .args(args);
    if let Some(urls) = urls {
        cmd.env("DEBUGINFOD_URLS", urls);
    }
    let out = cmd.output().expect("run rprof");
    assert_success(&out, args);
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The share (0..1) of samples whose stack has a frame for which `name` holds.
fn share_with(folded: &str, name: impl Fn(&str) -> bool) -> f64 {
    let stacks = parse_folded(folded);
    share_of(&stacks, |_| true, |f| f.iter().any(|n| name(n))).0
}

/// Check the whole client against the real server: without DEBUGINFOD_URLS the stripped fixture is unnamed
/// and the verdict says to set it; with it, report names the static functions and the inlined function, its
/// folded stacks exactly those of the same debug file given with `--debug-dir` (the debug file is fetched once
/// into rprof's cache); annotate shows the source only the server has
/// (`--debuginfod=URL`); the cache answers after the server is gone; a binary gone from disk is fetched as
/// an executable; probe finds the static function and its parameter's name.
#[test]
fn debuginfod_names_stripped_code() {
    if !can_run("debuginfod_names_stripped_code") {
        return;
    }
    let fx = Fixture::new();
    let data = fx.record("1200");
    let cache = fx.path("cache");
    let (server, url) = start_server(&fx);
    let (folded, stderr) = rprof_env(None, &cache, &["report", "-i", &data, "--folded"]);
    assert!(share_with(&folded, |n| n == "[unnamed]") >= 0.8, "{folded}");
    assert!(stderr.contains(
        "stripped and no debug file was found; install its debug package, or set DEBUGINFOD_URLS"
    ));
    let (folded, stderr) = rprof_env(Some(&url), &cache, &["report", "-i", &data, "--folded"]);
    eprintln!("{folded}\n{stderr}");
    let hot = share_with(&folded, |n| {
        n.starts_with("unnamed_hot_a") || n.starts_with("unnamed_hot_b")
    });
    assert!(
        hot >= 0.8,
        "the static functions are named: {hot}\n{folded}"
    );
    // What debuginfod is for: the fetched debug file names every frame exactly as the same file given locally
    // does (the stacks and their counts equal, line for line), the inlined function included. Where samples
    // land between the loop and the function inlined into it depends on the CPU and the compiler, so no share
    // of it is asserted: only that it is named. (/usr/lib/debug, the default, stays for libc's frames.)
    let local = fx.path("debug");
    let id = &fx.build_id;
    let link = local.join(format!(".build-id/{}/{}.debug", &id[..2], &id[2..]));
    std::fs::create_dir_all(link.parent().unwrap()).unwrap();
    std::fs::copy(fx.path("srv/unnamed.debug"), &link).unwrap();
    let dir = local.to_str().unwrap();
    let (by_file, _) = rprof_env(
        None,
        &fx.path("cache-unused"),
        &[
            "report",
            "-i",
            &data,
            "--folded",
            "--debug-dir",
            "/usr/lib/debug",
            "--debug-dir",
            dir,
        ],
    );
    let sorted = |text: &str| {
        let mut lines: Vec<&str> = text.lines().collect();
        lines.sort_unstable();
        lines.join("\n")
    };
    assert_eq!(
        sorted(&folded),
        sorted(&by_file),
        "debuginfod's stacks are those of the local debug file"
    );
    assert!(
        share_with(&folded, |n| n == "unnamed_mix") > 0.0,
        "and the inlined one is named\n{folded}"
    );
    assert!(stderr.contains("debuginfod: fetched 1 file,"), "{stderr}");
    let cached = cache.join("rprof").join(&fx.build_id).join("debuginfo");
    assert!(cached.is_file(), "{} is cached", cached.display());
    // annotate: the source file exists only where the server runs.
    let flag = format!("--debuginfod={url}");
    let (text, _) = rprof_env(None, &cache, &["annotate", "-i", &data, "-n", "1", &flag]);
    assert!(
        text.contains("x = x * 6364136223846793005UL + i;"),
        "{text}"
    );
    assert!(!text.contains("was not found"), "{text}");
    // probe: the static function (its name from the debug file) and its parameter's name (its DWARF).
    let bin = fx.bin.to_str().unwrap();
    let (listed, _) = rprof_env(
        Some(&url),
        &cache,
        &["probe", "-x", bin, "-l", "unnamed_hot_a*(n)"],
    );
    assert!(
        listed.contains("unnamed_hot_a") && listed.contains("n=%di"),
        "{listed}"
    );
    // A binary gone from disk: its executable comes from the server.
    std::fs::remove_file(&fx.bin).unwrap();
    let fresh = fx.path("cache2");
    let (folded, _) = rprof_env(Some(&url), &fresh, &["report", "-i", &data, "--folded"]);
    assert!(
        share_with(&folded, |n| n.starts_with("unnamed_hot_a")) >= 0.4,
        "{folded}"
    );
    assert!(fresh
        .join("rprof")
        .join(&fx.build_id)
        .join("executable")
        .is_file());
    // Without the server, the cache answers.
    drop(server);
    let (folded, stderr) = rprof_env(Some(&url), &fresh, &["report", "-i", &data, "--folded"]);
    assert!(
        share_with(&folded, |n| n.starts_with("unnamed_hot_a")) >= 0.4,
        "{folded}"
    );
    assert!(!stderr.contains("warning"), "{stderr}");
}

/// Check that a server that accepts connections but never answers costs one warning and DEBUGINFOD_TIMEOUT,
/// not a hang: the report ends, its code unnamed.
#[test]
fn debuginfod_silent_server_times_out() {
    if !can_run("debuginfod_silent_server_times_out") {
        return;
    }
    let fx = Fixture::new();
    let data = fx.record("300");
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    // Accept and hold the connections, answering nothing.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in silent.incoming() {
            held.push(stream);
        }
    });
    let started = Instant::now();
    let out = rprof()
        .env("DEBUGINFOD_URLS", &url)
        .env("DEBUGINFOD_TIMEOUT", "2")
        .env("DEBUGINFOD_CACHE_PATH", fx.path("cache"))
        .args(["report", "-i", &data, "--folded"])
        .output()
        .unwrap();
    let took = started.elapsed();
    assert_success(&out, &["report"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let folded = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stderr.matches("warning: debuginfod server").count(),
        1,
        "{stderr}"
    );
    assert!(share_with(&folded, |n| n == "[unnamed]") >= 0.8, "{folded}");
    // One timeout per module that asked (the fixture and at most a few libraries), never unbounded.
    assert!(took < Duration::from_secs(30), "took {took:?}");
}

/// rprof with the server `url` in DEBUGINFOD_URLS, the cache `cache` and the extra environment `env`:
/// (stdout, stderr, how long it took).
fn rprof_limited(
    url: &str,
    cache: &Path,
    env: &[(&str, &str)],
    args: &[&str],
) -> (String, String, Duration) {
    let mut cmd = rprof();
    cmd.env("DEBUGINFOD_URLS", url)
        .env("DEBUGINFOD_CACHE_PATH", cache)
        .env_remove("DEBUGINFOD_MAXSIZE")
        .env_remove("DEBUGINFOD_MAXTIME")
        .envs(env.iter().copied())
        .args(args);
    let started = Instant::now();
    let out = cmd.output().expect("run rprof");
    let took = started.elapsed();
    assert_success(&out, args);
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        took,
    )
}

/// Check DEBUGINFOD_MAXSIZE against the real server: a debug file larger than the bound is not fetched (one
/// warning names the variable and the file, the code stays unnamed, nothing is cached or marked missing),
/// and a bound above its size fetches it.
#[test]
fn debuginfod_max_size() {
    if !can_run("debuginfod_max_size") {
        return;
    }
    let fx = Fixture::new();
    let data = fx.record("300");
    let cache = fx.path("cache");
    let (_server, url) = start_server(&fx);
    let size = std::fs::metadata(fx.path("srv/unnamed.debug"))
        .unwrap()
        .len();
    assert!(size > 1000, "the debug file is {size} bytes");
    let args = ["report", "-i", &data, "--folded"];
    let (folded, stderr, _) = rprof_limited(&url, &cache, &[("DEBUGINFOD_MAXSIZE", "1000")], &args);
    eprintln!("{stderr}");
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("DEBUGINFOD_MAXSIZE"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].contains(&format!(
            "warning: debuginfod: the debug file of build id {} was not fetched",
            fx.build_id
        )) && warnings[0].contains("larger")
            && warnings[0].contains("DEBUGINFOD_MAXSIZE=1000 bytes"),
        "{stderr}"
    );
    assert!(share_with(&folded, |n| n == "[unnamed]") >= 0.8, "{folded}");
    let entry = cache.join("rprof").join(&fx.build_id);
    assert!(!entry.join("debuginfo").exists() && !entry.join("debuginfo.none").exists());
    let bound = (size * 2).to_string();
    let (folded, stderr, _) = rprof_limited(&url, &cache, &[("DEBUGINFOD_MAXSIZE", &bound)], &args);
    assert!(
        stderr.contains("debuginfod: fetched 1 file,") && !stderr.contains("warning"),
        "{stderr}"
    );
    assert!(
        share_with(&folded, |n| n.starts_with("unnamed_hot_a")) >= 0.3,
        "{folded}"
    );
}

/// Check DEBUGINFOD_MAXTIME against a server that trickles the fixture's debug file (10 bytes every 100 ms:
/// hours for its size): the download is stopped at the bound (the server sees the connection closed 2 to 4 s
/// after the request), with one warning naming the variable, and the report goes on without the file.
#[test]
fn debuginfod_max_time() {
    if !can_run("debuginfod_max_time") {
        return;
    }
    let fx = Fixture::new();
    let data = fx.record("300");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let wanted = format!("/buildid/{}/debuginfo", fx.build_id);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let (wanted, tx) = (wanted.clone(), tx.clone());
            std::thread::spawn(move || trickle(&mut stream, &wanted, &tx));
        }
    });
    let args = ["report", "-i", &data, "--folded"];
    let (folded, stderr, took) = rprof_limited(
        &url,
        &fx.path("cache"),
        &[("DEBUGINFOD_MAXTIME", "2")],
        &args,
    );
    eprintln!("took {took:?}\n{stderr}");
    let warnings = stderr
        .lines()
        .filter(|l| l.contains("DEBUGINFOD_MAXTIME"))
        .count();
    assert_eq!(warnings, 1, "{stderr}");
    assert!(
        stderr.contains("did not end within DEBUGINFOD_MAXTIME=2 seconds"),
        "{stderr}"
    );
    assert!(share_with(&folded, |n| n == "[unnamed]") >= 0.8, "{folded}");
    let held = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the server saw the download end");
    assert!(
        (Duration::from_secs(2)..Duration::from_secs(4)).contains(&held),
        "the download lasted {held:?}"
    );
    assert!(took < Duration::from_secs(30), "took {took:?}");
}

/// Answer one HTTP request: 404 unless it asks for `wanted`, which is trickled (a 1 MB Content-Length, 10
/// bytes every 100 ms) until the client closes the connection; then send how long it was held.
fn trickle(stream: &mut std::net::TcpStream, wanted: &str, tx: &std::sync::mpsc::Sender<Duration>) {
    use std::io::{BufRead, BufReader, Write};
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request = String::new();
    if reader.read_line(&mut request).is_err() {
        return;
    }
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).map_or(true, |n| n == 0) || line.trim().is_empty() {
            break;
        }
    }
    if !request.contains(wanted) {
        let _ = stream
            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        return;
    }
    let started = Instant::now();
    let _ = stream
        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\nConnection: close\r\n\r\n");
    while stream.write_all(&[0u8; 10]).is_ok() && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = tx.send(started.elapsed());
}
