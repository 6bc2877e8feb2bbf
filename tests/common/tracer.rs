//! Tracers running in the background while a test runs a workload (rprof system-wide, bpftrace), their output
//! gathered until they are stopped.
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A tracer running in the background (rprof system-wide, bpftrace), its output gathered until it is stopped.
pub struct Tracer {
    child: Child,
    out: Arc<Mutex<String>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Tracer {
    /// Start `cmd` and wait until a line of its stdout or stderr contains `ready` (at most 30 s).
    pub fn start(cmd: &mut Command, ready: &str) -> Tracer {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the tracer");
        let out = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let streams: Vec<Box<dyn Read + Send>> = vec![
            Box::new(child.stdout.take().unwrap()),
            Box::new(child.stderr.take().unwrap()),
        ];
        let threads = streams
            .into_iter()
            .map(|s| {
                let (out, tx, ready) = (Arc::clone(&out), tx.clone(), ready.to_string());
                std::thread::spawn(move || {
                    for line in BufReader::new(s).lines().map_while(Result::ok) {
                        if line.contains(&ready) {
                            let _ = tx.send(());
                        }
                        let mut o = out.lock().unwrap();
                        o.push_str(&line);
                        o.push('\n');
                    }
                })
            })
            .collect();
        if rx.recv_timeout(Duration::from_secs(30)).is_err() {
            let _ = child.kill();
            panic!("the tracer never said `{ready}`:\n{}", out.lock().unwrap());
        }
        Tracer {
            child,
            out,
            threads,
        }
    }

    /// End it with SIGINT (as Ctrl-C) and return everything it printed. A tracer still running 10 s later
    /// gets SIGTERM (bpftrace once ignored a SIGINT here and the test waited for it for minutes), then SIGKILL.
    pub fn stop(mut self) -> String {
        use nix::sys::signal::Signal;
        std::thread::sleep(Duration::from_millis(500));
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        for signal in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGKILL] {
            let _ = nix::sys::signal::kill(pid, signal);
            let since = std::time::Instant::now();
            while self.child.try_wait().ok().flatten().is_none()
                && since.elapsed() < Duration::from_secs(10)
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            if self.child.try_wait().ok().flatten().is_some() {
                break;
            }
        }
        let _ = self.child.wait();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let out = self.out.lock().unwrap().clone();
        out
    }
}

/// A bpftrace program, in the background, once its probes are attached: bpftrace says `Attaching N probes`
/// before it attaches them (an exec right after that line was missed), and runs BEGIN after.
pub fn bpftrace_bg(program: &str) -> Tracer {
    let program = format!("BEGIN {{ printf(\"rprof-test: attached\\n\"); }} {program}");
    Tracer::start(
        Command::new("bpftrace").args(["-e", &program]),
        "rprof-test: attached",
    )
}
