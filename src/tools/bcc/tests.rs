//! Every bcc line of docs/tools.md's multi-tools section, translated: the `rprof probe` line `--recipe` prints.
use super::*;

/// The `rprof probe` line for bcc's `words` of tool `name` (as `--recipe` prints it, without `rprof `).
fn line(name: &str, words: &[&str]) -> String {
    let words: Vec<String> = words.iter().map(|w| w.to_string()).collect();
    let r = find(name).unwrap().recipe(&words).unwrap();
    let mut all = vec!["probe".to_string()];
    all.extend(r.recipe.args);
    crate::tools::shell_line(&all)
}

/// The error for bcc's `words`.
fn error(name: &str, words: &[&str]) -> String {
    let words: Vec<String> = words.iter().map(|w| w.to_string()).collect();
    find(name).unwrap().recipe(&words).unwrap_err().to_string()
}

const COLS: &str = "{pid:<7|PID} {tid:<7|TID} {comm:<15|COMM} {event:<16|FUNC}";

/// Check funccount's lines: kernel globs, a library's, a PID, an interval, a tracepoint, a USDT probe, -r.
#[test]
fn funccount_lines() {
    assert_eq!(
        line("funccount", &["-i", "1", "tcp_send*"]),
        "probe --count 'kprobe:tcp_send*' -i 1"
    );
    assert_eq!(
        line("funccount", &["-p", "185", "vfs_*"]),
        "probe --count 'kprobe:vfs_*' -p 185"
    );
    assert_eq!(line("funccount", &["c:str*"]), "probe --count 'c:str*'");
    assert_eq!(
        line("funccount", &["p:c:str*", "-d", "5", "-T"]),
        "probe --count 'c:str*' -d 5 -T"
    );
    assert_eq!(
        line("funccount", &["t:sched:sched_switch"]),
        "probe --count t:sched:sched_switch"
    );
    assert_eq!(
        line("funccount", &["-r", "c:str.*"]),
        "probe --count 'c:^str.*' -r"
    );
    assert!(error("funccount", &["-r", "c:str(len|cmp)"]).contains("cannot group"));
    assert_eq!(
        line("funccount", &["p:/bin/bash:readline"]),
        "probe --count uprobe:/bin/bash:readline"
    );
    let r = find("funccount")
        .unwrap()
        .recipe(&["u:pthread:pthread_create".into()])
        .unwrap();
    assert_eq!(r.recipe.args, ["--count", "usdt:pthread:*:pthread_create"]);
    assert_eq!(r.fallbacks[0].instead, "c:pthread_create");
    assert!(error("funccount", &["-c", "1", "vfs_*"]).contains("-c is not supported"));
    assert!(error("funccount", &["a", "b"]).contains("one PATTERN"));
    assert!(error("funccount", &["-p", "x", "a"]).contains("not a number"));
}

/// Check funclatency's lines: units, a PID, -F, tracepoints refused.
#[test]
fn funclatency_lines() {
    assert_eq!(
        line("funclatency", &["-p", "181", "-u", "vfs_read"]),
        "probe kprobe:vfs_read --hist --hist-only --hist-unit us -p 181"
    );
    assert_eq!(
        line("funclatency", &["-u", "c:getaddrinfo"]),
        "probe c:getaddrinfo --hist --hist-only --hist-unit us"
    );
    assert_eq!(
        line("funclatency", &["-m", "-F", "-i", "2", "c:read"]),
        "probe c:read --hist --hist-only --hist-unit ms -i 2"
    );
    assert!(error("funclatency", &["t:a:b"]).contains("no return"));
    assert!(error("funclatency", &["-u", "-m", "f"]).contains("exclude"));
}

/// Check stackcount's lines: counted with stacks, folded, a tracepoint; -P refused.
#[test]
fn stackcount_lines() {
    assert_eq!(
        line("stackcount", &["submit_bio"]),
        "probe --count -g kprobe:submit_bio"
    );
    assert_eq!(
        line("stackcount", &["t:block:block_rq_insert"]),
        "probe --count -g t:block:block_rq_insert"
    );
    assert_eq!(
        line("stackcount", &["-f", "-p", "7", "-D", "3", "c:malloc"]),
        "probe --count -g c:malloc --folded -p 7 -d 3"
    );
    assert!(error("stackcount", &["-P", "c:malloc"]).contains("per process"));
}

/// Check trace's lines: 1-based args, retval, stacks, a signature's names and struct members, USDT.
#[test]
fn trace_lines() {
    assert_eq!(
        line("trace", &["do_sys_open \"%s\", arg2"]),
        format!(
            "probe --count 'kprobe:do_sys_open(arg1:str)' --trace-format '{COLS} {{arg1|arg2}}'"
        )
    );
    assert_eq!(
        line("trace", &["r::do_sys_open \"ret: %d\", retval"]),
        format!("probe 'kprobe:do_sys_open ret' --trace-format '{COLS} ret: {{ret|retval}}'")
    );
    assert_eq!(
        line("trace", &["-K", "do_nanosleep \"mode: %d\", arg2"]),
        format!("probe --count 'kprobe:do_nanosleep(arg1:s32)' -g --trace-format '{COLS} mode: {{arg1|arg2}}'")
    );
    assert_eq!(
        line(
            "trace",
            &["p:c:nanosleep(struct timespec *req) \"%d sec %d nsec\", req->tv_sec, req->tv_nsec"]
        ),
        format!(
            "probe --count 'c:nanosleep(arg0->0:s32, arg0->8:s32)' --trace-format '{COLS} \
             {{arg0->0|req->tv_sec}} sec {{arg0->8|req->tv_nsec}} nsec'"
        )
    );
    let r = find("trace")
        .unwrap()
        .recipe(&["u:pthread:pthread_create \"%x\", arg1".into()])
        .unwrap();
    assert_eq!(r.recipe.args[1], "usdt:pthread:*:pthread_create(arg0:x32)");
    assert_eq!(r.fallbacks[0].instead, "c:pthread_create(arg0:x32)");
    assert_eq!(
        line(
            "trace",
            &[
                "-T",
                "-p",
                "5",
                "c:open (STRCMP(\"/etc/x\", arg1) && arg2 > 0) \"%s\", arg1"
            ]
        ),
        "probe --count 'c:open(arg0:str) if arg0 == \"/etc/x\" && arg1 > 0' -p 5 --trace-format \
         '{clock:<8|TIME} {pid:<7|PID} {tid:<7|TID} {comm:<15|COMM} {event:<16|FUNC} {arg0|arg1}'"
    );
    assert!(error("trace", &["-M", "5", "c:open"]).contains("-M is not supported"));
    assert!(error("trace", &["c:open \"%d\", arg1 + 1"]).contains("does not compute"));
    assert!(error("trace", &["c:open \"%d\", retval"]).contains("use r:"));
    assert!(error("trace", &["c:open \"%d\"", "c:read \"x%d\", arg1"]).contains("conversions"));
}

/// Check argdist's lines: -C and -H on a kernel function's named parameter, a PID, a return value, a filter.
#[test]
fn argdist_lines() {
    let sig = "p::tcp_sendmsg(struct sock *sk, struct msghdr *msg, size_t size):u32:size";
    assert_eq!(
        line("argdist", &["-C", sig]),
        "probe --count 'kprobe:tcp_sendmsg(arg2:u32)' --by arg2"
    );
    assert_eq!(
        line("argdist", &["-H", sig]),
        "probe --count 'kprobe:tcp_sendmsg(arg2:u32)' --hist=arg2 --hist-only"
    );
    assert_eq!(
        line("argdist", &["-p", "181", "-C", "p:c:write(int fd):int:fd"]),
        "probe --count 'c:write(arg0:s32)' --by arg0 -p 181"
    );
    assert_eq!(
        line(
            "argdist",
            &["-C", "r:c:read():int:$retval:$retval < 0#errors", "-n", "3"]
        ),
        "probe 'c:read ret:s32 if ret < 0' --by ret -i 1 -d 3"
    );
    assert_eq!(
        line("argdist", &["-H", "r::vfs_read():u64:$latency"]),
        "probe kprobe:vfs_read --hist --hist-only"
    );
    assert_eq!(
        line("argdist", &["-C", "p:c:malloc"]),
        "probe --count c:malloc"
    );
    assert!(error(
        "argdist",
        &["-C", "p:c:write(int fd, size_t n):int,u64:fd,n"]
    )
    .contains("several"));
    assert!(error("argdist", &["-C", "p:c:a", "-H", "p:c:b"]).contains("one -C or -H"));
    assert!(error("argdist", &["-c", "-C", "p:c:a"]).contains("-c is not supported"));
}

/// Check a signature's parsing and the members the ABI fixes.
#[test]
fn signatures_and_members() {
    let p = expr::signature("struct timespec *req, const char *name, int n").unwrap();
    assert_eq!(p[0].name, "req");
    assert_eq!(p[1].ctype, "const char *");
    let names = expr::Names {
        params: p,
        one_based_args: true,
    };
    assert_eq!(
        names.value("req->tv_nsec").unwrap(),
        ("arg0->8".to_string(), Some("s64"))
    );
    assert_eq!(names.value("n").unwrap().0, "arg2");
    assert_eq!(names.value("arg6").unwrap().0, "arg5");
    assert_eq!(names.value("args->filename").unwrap().0, "filename");
    assert!(names.value("arg7").is_err());
    assert_eq!(
        names.filter("n > 3 && $tgid == 7").unwrap().0,
        "arg2 > 3 && pid == 7"
    );
}
