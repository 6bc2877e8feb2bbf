//! Syscall numbers by the names the kernel's syscall tracepoints use (`syscalls:sys_enter_NAME`), for reading
//! many syscalls from `raw_syscalls`, whose events carry the number.
use std::str::FromStr;

/// The number of the syscall whose tracepoints are `sys_enter_NAME`/`sys_exit_NAME`, on x86-64. The
/// tracepoints take the name of the kernel's `SYSCALL_DEFINE`, which differs from the syscall table's for a
/// few: `newstat` is `stat`, `umount` is `umount2`.
pub fn syscall_number(name: &str) -> Option<u64> {
    let table_name = crate::events::syscalls::table_name(name);
    let nr = syscalls::Sysno::from_str(table_name).ok()?.id();
    u64::try_from(nr).ok()
}

/// The syscall of a tracepoint of `syscalls` (`sys_enter_NAME`, `sys_exit_NAME`): its name, and whether the
/// tracepoint is its exit.
pub fn tracepoint_syscall<'a>(category: &str, event: &'a str) -> Option<(&'a str, bool)> {
    if category != "syscalls" {
        return None;
    }
    match event.strip_prefix("sys_enter_") {
        Some(name) => Some((name, false)),
        None => Some((event.strip_prefix("sys_exit_")?, true)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that names map to x86-64's numbers, tracepoint spellings included, and unknown names to none.
    #[test]
    fn numbers_of_tracepoint_names() {
        assert_eq!(syscall_number("read"), Some(0));
        assert_eq!(syscall_number("execve"), Some(59));
        assert_eq!(syscall_number("newfstat"), Some(5));
        assert_eq!(syscall_number("umount"), Some(166));
        assert_eq!(syscall_number("newfstatat"), Some(262));
        assert_eq!(syscall_number("no_such_call"), None);
        assert_eq!(
            tracepoint_syscall("syscalls", "sys_exit_read"),
            Some(("read", true))
        );
        assert_eq!(
            tracepoint_syscall("syscalls", "sys_enter_openat"),
            Some(("openat", false))
        );
        assert_eq!(tracepoint_syscall("sched", "sys_enter_x"), None);
    }

    /// Check that every syscall tracepoint of the running kernel has a number, each its own.
    #[test]
    fn every_tracepoint_has_a_number() {
        let Ok(dir) = std::fs::read_dir("/sys/kernel/tracing/events/syscalls") else {
            eprintln!("every_tracepoint_has_a_number: skipped: no tracefs syscall events here");
            return;
        };
        let mut seen = std::collections::HashMap::new();
        for e in dir.flatten() {
            let file = e.file_name().to_string_lossy().into_owned();
            let Some(name) = file.strip_prefix("sys_enter_") else {
                continue;
            };
            let nr = syscall_number(name).unwrap_or_else(|| panic!("no number for {name}"));
            if let Some(other) = seen.insert(nr, name.to_string()) {
                panic!("{name} and {other} both have number {nr}");
            }
        }
    }
}
