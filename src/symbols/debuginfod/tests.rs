//! The client's limits against a one-connection HTTP server on 127.0.0.1 written here (the real server is in
//! tests/debuginfod.rs): a Content-Length over DEBUGINFOD_MAXSIZE, a body without one that grows past it, the
//! 406 of elfutils' server, and a body that trickles past DEBUGINFOD_MAXTIME.
use super::*;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A server on 127.0.0.1 that answers one request with `head` then `body` (in `pieces` writes, `pause`
/// apart), and hands back the request's header lines.
fn serve(
    head: String,
    body: Vec<u8>,
    pieces: usize,
    pause: Duration,
) -> (String, std::thread::JoinHandle<Vec<String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut headers = Vec::new();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if line.trim().is_empty() {
                break;
            }
            headers.push(line.trim().to_string());
        }
        let _ = stream.write_all(head.as_bytes());
        for piece in body.chunks(body.len().div_ceil(pieces.max(1)).max(1)) {
            if stream.write_all(piece).is_err() {
                break;
            }
            std::thread::sleep(pause);
        }
        headers
    });
    (url, server)
}

/// A client of `url` with `limits`, and the number of refusals its events said.
fn client(url: &str, cache: &Path, limits: Limits) -> (Debuginfod, Arc<AtomicUsize>) {
    let refused = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&refused);
    let events: Events = Arc::new(move |e| {
        if let Event::Refused { .. } = e {
            count.fetch_add(1, Ordering::Relaxed);
        }
    });
    let config = DebuginfodConfig {
        urls: vec![url.to_string()],
        cache: cache.to_path_buf(),
        timeout: Duration::from_secs(10),
        limits,
    };
    (Debuginfod::new(config, events), refused)
}

const BUILD_ID: [u8; 4] = [0xab, 0xcd, 0x01, 0x02];

/// Check that a file over max_size is refused by its Content-Length (before its body) and by the bytes read
/// when the server sends none, that the request says the bound, and that a refusal is neither cached nor
/// marked missing.
#[test]
fn max_size_by_length_and_by_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits {
        max_size: Some(1000),
        max_time: None,
    };
    let head = "HTTP/1.1 200 OK\r\nContent-Length: 5000\r\nConnection: close\r\n\r\n".to_string();
    let (url, server) = serve(head, vec![b'x'; 5000], 1, Duration::ZERO);
    let (c, refused) = client(&url, dir.path(), limits);
    assert_eq!(c.debuginfo(&BUILD_ID), None);
    assert_eq!(refused.load(Ordering::Relaxed), 1);
    let headers = server.join().unwrap();
    assert!(
        headers
            .iter()
            .any(|h| h.eq_ignore_ascii_case("x-debuginfod-maxsize: 1000")),
        "{headers:?}"
    );
    let path = c.cache.path("abcd0102", Kind::Debuginfo).unwrap();
    assert!(c.cache.get(&path).is_none() && !c.cache.known_missing(&path));
    assert!(!c.has_failed(&url), "a refusal is no failure of the server");

    // No Content-Length: the body ends with the connection, and is cut at the bound.
    let head = "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n".to_string();
    let (url, server) = serve(head, vec![b'x'; 5000], 5, Duration::from_millis(20));
    let (c, refused) = client(&url, dir.path(), limits);
    assert_eq!(c.executable(&BUILD_ID), None);
    assert_eq!(refused.load(Ordering::Relaxed), 1);
    server.join().unwrap();

    // elfutils' server answers 406 to a file over X-DEBUGINFOD-MAXSIZE.
    let head = "HTTP/1.1 406 Not Acceptable\r\nContent-Length: 0\r\n\r\n".to_string();
    let (url, server) = serve(head, Vec::new(), 1, Duration::ZERO);
    let (c, refused) = client(&url, dir.path(), limits);
    assert_eq!(c.debuginfo(&BUILD_ID), None);
    assert_eq!(refused.load(Ordering::Relaxed), 1);
    assert!(!c.has_failed(&url));
    server.join().unwrap();
}

/// Check that a body trickling for longer than max_time is stopped at the bound, not read to its end.
#[test]
fn max_time_stops_a_trickle() {
    let dir = tempfile::tempdir().unwrap();
    let head = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: close\r\n\r\n".to_string();
    // 100 bytes over 10 s.
    let (url, _server) = serve(head, vec![b'x'; 100], 100, Duration::from_millis(100));
    let limits = Limits {
        max_size: None,
        max_time: Some(Duration::from_secs(1)),
    };
    let (c, refused) = client(&url, dir.path(), limits);
    let started = Instant::now();
    assert_eq!(c.debuginfo(&BUILD_ID), None);
    let took = started.elapsed();
    assert_eq!(refused.load(Ordering::Relaxed), 1);
    assert!(
        (Duration::from_secs(1)..Duration::from_secs(3)).contains(&took),
        "took {took:?}"
    );
}
