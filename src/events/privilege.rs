//! What this user may open, from `kernel.perf_event_paranoid` and the process's capabilities, and the one line
//! that says what rprof does about it (perf's fallback to user space only, `:u`).
//!
//! The kernel's rules (Documentation/admin-guide/perf-security.rst): without `CAP_PERFMON` (or
//! `CAP_SYS_ADMIN`), paranoid >= 2 forbids kernel-mode counting and sampling (only `exclude_kernel` events
//! of one's own processes open), >= 1 forbids per-CPU (system-wide) events, and Debian's 3 forbids
//! perf_event_open altogether.

/// `CAP_PERFMON`'s and `CAP_SYS_ADMIN`'s bits in /proc/self/status's CapEff.
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;

/// What this process may open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Everything (root, CAP_PERFMON, or paranoid <= 1 for a task's events).
    Full,
    /// Its own processes' user space only (paranoid 2 without capabilities).
    UserOnly { paranoid: i32 },
    /// Nothing (paranoid 3 and above, Debian's patch, without capabilities).
    Nothing { paranoid: i32 },
}

/// `kernel.perf_event_paranoid`, None when unreadable.
pub fn paranoid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Whether this process has CAP_PERFMON or CAP_SYS_ADMIN in its effective set.
pub fn has_perfmon() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    eff & (1 << CAP_PERFMON | 1 << CAP_SYS_ADMIN) != 0
}

/// What this process may open on tasks (per-CPU events need more: see [`system_wide_refusal`]).
pub fn access() -> Access {
    if has_perfmon() {
        return Access::Full;
    }
    match paranoid() {
        Some(p) if p >= 3 => Access::Nothing { paranoid: p },
        Some(p) if p >= 2 => Access::UserOnly { paranoid: p },
        _ => Access::Full,
    }
}

/// The line `command` prints when it falls back to user space only (`rprof ` comes before it).
pub fn user_only_line(command: &str, paranoid: i32) -> String {
    format!(
        "{command}: kernel.perf_event_paranoid={paranoid} and no CAP_PERFMON: counting and sampling \
         user space only (perf's :u; kernel-side events such as context-switches count 0); run as root or \
         with CAP_PERFMON, or `sysctl kernel.perf_event_paranoid=1`, for the kernel too"
    )
}

/// Why this process cannot open anything, naming the sysctl (an error: `rprof: ` comes before it).
pub fn nothing_line(command: &str, paranoid: i32) -> String {
    format!(
        "{command}: kernel.perf_event_paranoid={paranoid} forbids perf_event_open to users without \
         CAP_PERFMON; run as root, grant CAP_PERFMON (setcap cap_perfmon+ep on rprof), or allow user-space \
         profiling with `sysctl kernel.perf_event_paranoid=2`"
    )
}

/// Why per-CPU (system-wide, `-a`, `-C`) events are refused here, if they are (an error, as above).
pub fn system_wide_refusal(command: &str) -> Option<String> {
    if has_perfmon() {
        return None;
    }
    let p = paranoid()?;
    (p >= 1).then(|| {
        format!(
            "{command}: counting or sampling the whole system (-a, -C, -G) needs CAP_PERFMON or \
             kernel.perf_event_paranoid <= 0 (it is {p}); run as root, grant CAP_PERFMON, or count your own \
             command or processes instead (drop -a)"
        )
    })
}

/// What a command opens, for [`fallback`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// Per-CPU events (`-a`, `-C`, a cgroup, top's default).
    pub system_wide: bool,
    /// Kernel-side events that a `:u` fallback cannot serve, and what they are for the message
    /// (`--kernel-only`; trace's syscalls and tracepoints, which happen in the kernel).
    pub kernel: Option<&'static str>,
}

/// What `command` may do here, decided in one place for record, stat, top and trace: everything (`Ok(None)`),
/// its own processes' user space only (`Ok(Some(line))`: perf's `:u` fallback, and the one line to print
/// before starting), or nothing (`Err`: the line that names the setting and the fix; `rprof: ` comes before it).
pub fn fallback(command: &str, needs: Needs) -> Result<Option<String>, String> {
    if needs.system_wide {
        if let Some(line) = system_wide_refusal(command) {
            return Err(line);
        }
    }
    match access() {
        Access::Full => Ok(None),
        Access::Nothing { paranoid } => Err(nothing_line(command, paranoid)),
        Access::UserOnly { paranoid } => match needs.kernel {
            Some(what) => Err(kernel_line(command, what, paranoid)),
            None => Ok(Some(user_only_line(command, paranoid))),
        },
    }
}

/// Why kernel-side events (`what`) are refused at `paranoid` >= 2 without capabilities.
pub fn kernel_line(command: &str, what: &str, paranoid: i32) -> String {
    format!(
        "{command}: {what} needs CAP_PERFMON or kernel.perf_event_paranoid <= 1 (it is {paranoid}); run as \
         root, grant CAP_PERFMON (setcap cap_perfmon+ep on rprof), or `sysctl kernel.perf_event_paranoid=1`"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that each refusal names the setting, its value and the fix.
    #[test]
    fn lines_name_the_setting_and_the_fix() {
        let k = kernel_line("trace", "tracing syscalls and tracepoints", 2);
        assert!(k.starts_with("trace: tracing syscalls and tracepoints needs CAP_PERFMON"));
        assert!(k.contains("(it is 2)") && k.contains("sysctl kernel.perf_event_paranoid=1"));
        let n = nothing_line("stat", 3);
        assert!(n.contains("kernel.perf_event_paranoid=3") && n.contains("CAP_PERFMON"));
        assert!(user_only_line("top", 2).contains("user space only"));
    }
}
