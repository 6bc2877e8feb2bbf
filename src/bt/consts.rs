//! Constants that bpftrace programs take from kernel headers (`#include <linux/sched.h>` for `TASK_RUNNING`),
//! for machines with neither kernel headers nor a way to read `#define`s from BTF (BTF holds types, not macros).
//! Each value is the kernel's (6.x, x86-64), with the header it comes from; a program's own `#define` wins.

/// (name, value, header).
pub const CONSTANTS: &[(&str, i64, &str)] = &[
    // include/linux/sched.h: task states (task_struct.__state, sched_switch's prev_state).
    ("TASK_RUNNING", 0x0000, "linux/sched.h"),
    ("TASK_INTERRUPTIBLE", 0x0001, "linux/sched.h"),
    ("TASK_UNINTERRUPTIBLE", 0x0002, "linux/sched.h"),
    ("__TASK_STOPPED", 0x0004, "linux/sched.h"),
    ("__TASK_TRACED", 0x0008, "linux/sched.h"),
    ("EXIT_DEAD", 0x0010, "linux/sched.h"),
    ("EXIT_ZOMBIE", 0x0020, "linux/sched.h"),
    ("TASK_PARKED", 0x0040, "linux/sched.h"),
    ("TASK_DEAD", 0x0080, "linux/sched.h"),
    ("TASK_WAKEKILL", 0x0100, "linux/sched.h"),
    ("TASK_WAKING", 0x0200, "linux/sched.h"),
    ("TASK_NOLOAD", 0x0400, "linux/sched.h"),
    ("TASK_NEW", 0x0800, "linux/sched.h"),
    ("TASK_KILLABLE", 0x0102, "linux/sched.h"),
    ("TASK_STOPPED", 0x0104, "linux/sched.h"),
    ("TASK_TRACED", 0x0008, "linux/sched.h"),
    ("TASK_IDLE", 0x0402, "linux/sched.h"),
    // include/linux/socket.h: address families.
    ("AF_UNSPEC", 0, "linux/socket.h"),
    ("AF_UNIX", 1, "linux/socket.h"),
    ("AF_INET", 2, "linux/socket.h"),
    ("AF_INET6", 10, "linux/socket.h"),
    ("AF_NETLINK", 16, "linux/socket.h"),
    ("AF_PACKET", 17, "linux/socket.h"),
    // include/net/tcp_states.h.
    ("TCP_ESTABLISHED", 1, "net/tcp_states.h"),
    ("TCP_SYN_SENT", 2, "net/tcp_states.h"),
    ("TCP_SYN_RECV", 3, "net/tcp_states.h"),
    ("TCP_FIN_WAIT1", 4, "net/tcp_states.h"),
    ("TCP_FIN_WAIT2", 5, "net/tcp_states.h"),
    ("TCP_TIME_WAIT", 6, "net/tcp_states.h"),
    ("TCP_CLOSE", 7, "net/tcp_states.h"),
    ("TCP_CLOSE_WAIT", 8, "net/tcp_states.h"),
    ("TCP_LAST_ACK", 9, "net/tcp_states.h"),
    ("TCP_LISTEN", 10, "net/tcp_states.h"),
    ("TCP_CLOSING", 11, "net/tcp_states.h"),
    ("TCP_NEW_SYN_RECV", 12, "net/tcp_states.h"),
    // include/uapi/asm-generic/fcntl.h: open flags (octal in the header).
    ("O_RDONLY", 0o0, "asm-generic/fcntl.h"),
    ("O_WRONLY", 0o1, "asm-generic/fcntl.h"),
    ("O_RDWR", 0o2, "asm-generic/fcntl.h"),
    ("O_CREAT", 0o100, "asm-generic/fcntl.h"),
    ("O_EXCL", 0o200, "asm-generic/fcntl.h"),
    ("O_TRUNC", 0o1000, "asm-generic/fcntl.h"),
    ("O_APPEND", 0o2000, "asm-generic/fcntl.h"),
    ("O_NONBLOCK", 0o4000, "asm-generic/fcntl.h"),
    ("O_DIRECTORY", 0o200000, "asm-generic/fcntl.h"),
    ("O_CLOEXEC", 0o2000000, "asm-generic/fcntl.h"),
    // include/linux/blk_types.h: request operations (REQ_OP_MASK bits of cmd_flags).
    ("REQ_OP_READ", 0, "linux/blk_types.h"),
    ("REQ_OP_WRITE", 1, "linux/blk_types.h"),
    ("REQ_OP_FLUSH", 2, "linux/blk_types.h"),
    ("REQ_OP_DISCARD", 3, "linux/blk_types.h"),
    // include/uapi/linux/ptrace.h and signal numbers programs compare against.
    ("SIGKILL", 9, "asm/signal.h"),
    ("SIGTERM", 15, "asm/signal.h"),
    ("SIGSTOP", 19, "asm/signal.h"),
];

/// The value of the kernel constant `name`, with the header that defines it.
pub fn lookup(name: &str) -> Option<(i64, &'static str)> {
    CONSTANTS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, v, h)| (*v, *h))
}

#[cfg(test)]
mod tests {
    /// Check that runqlat.bt's constant is there and names are unique.
    #[test]
    fn table() {
        assert_eq!(super::lookup("TASK_RUNNING"), Some((0, "linux/sched.h")));
        let mut names: Vec<&str> = super::CONSTANTS.iter().map(|c| c.0).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(names.len(), before);
    }
}
