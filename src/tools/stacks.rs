//! bcc's profile and offcputime as faces over `rprof record`: their flags become a recording (cpu-clock
//! samples with stacks, or `--off-cpu`'s waits), and the recording's stacks are printed as bcc prints them
//! (stacks leaf first with `-    COMM (PID)` and the count, or folded `COMM;frames count`). This module is
//! the pure part: the flags, the `record` arguments, and the output from a loaded [`Profile`].
use super::ToolError;
use crate::report::Profile;
use std::collections::{HashMap, HashSet};

/// Which tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackTool {
    /// Sampled CPU stacks, counted.
    Profile,
    /// Blocked time by stack, in microseconds.
    OffCpu,
}

impl StackTool {
    pub fn name(self) -> &'static str {
        match self {
            StackTool::Profile => "profile",
            StackTool::OffCpu => "offcputime",
        }
    }

    pub fn usage(self) -> &'static str {
        match self {
            StackTool::Profile => {
                "  -F HZ           sampling frequency (49)\n  -p PID[,PID]    these processes only\n  \
                 -L TID[,TID]    these threads only\n  -U / -K         user / kernel stacks only\n  \
                 -f              folded output (COMM;frames count)\n  -a              kernel frames marked _[k]\n  \
                 -d              a - between kernel and user stacks\n  -I              include the idle task\n  \
                 [duration]      seconds (else until Ctrl-C)\n  -- COMMAND      run and profile a command"
            }
            StackTool::OffCpu => {
                "  -p PID          this process only\n  -t TID          this thread only\n  \
                 -u / -k         user threads / kernel threads only\n  -U / -K         user / kernel stacks only\n  \
                 -f              folded output (COMM;frames microseconds)\n  -d              a - between kernel and user stacks\n  \
                 -m MIN_US       stacks with at least this much blocked time (1)\n  \
                 -M MAX_US       stacks with at most this much blocked time\n  \
                 [duration]      seconds (else until Ctrl-C)\n  -- COMMAND      run and trace a command"
            }
        }
    }
}

/// The flags of profile or offcputime, bcc's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackArgs {
    pub tool: StackTool,
    pub pids: Vec<u32>,
    pub tids: Vec<u32>,
    pub freq: u64,
    pub user_stacks_only: bool,
    pub kernel_stacks_only: bool,
    pub folded: bool,
    pub delimited: bool,
    pub annotations: bool,
    pub include_idle: bool,
    pub user_threads_only: bool,
    pub kernel_threads_only: bool,
    pub min_us: u64,
    pub max_us: u64,
    pub duration: Option<u64>,
    pub command: Vec<String>,
}

impl StackArgs {
    /// bcc's arguments of `tool`.
    pub fn parse(tool: StackTool, words: &[String]) -> Result<StackArgs, ToolError> {
        let bad = |reason: String| ToolError::Flag {
            tool: tool.name().into(),
            reason,
        };
        let number = |flag: &str, v: Option<&String>| -> Result<u64, ToolError> {
            v.and_then(|v| v.parse().ok())
                .ok_or_else(|| bad(format!("{flag} takes a number")))
        };
        let list = |flag: &str, v: Option<&String>| -> Result<Vec<u32>, ToolError> {
            let v = v.ok_or_else(|| bad(format!("{flag} takes a list of ids")))?;
            v.split(',')
                .map(|s| {
                    s.trim()
                        .parse()
                        .map_err(|_| bad(format!("{flag}: '{s}' is not an id")))
                })
                .collect()
        };
        let mut a = StackArgs {
            tool,
            pids: Vec::new(),
            tids: Vec::new(),
            freq: 49,
            user_stacks_only: false,
            kernel_stacks_only: false,
            folded: false,
            delimited: false,
            annotations: false,
            include_idle: false,
            user_threads_only: false,
            kernel_threads_only: false,
            min_us: 1,
            max_us: u64::MAX,
            duration: None,
            command: Vec::new(),
        };
        let profile = tool == StackTool::Profile;
        let mut it = words.iter();
        while let Some(w) = it.next() {
            match w.as_str() {
                "--" => a.command = it.by_ref().cloned().collect(),
                "-p" | "--pid" => a.pids = list("-p", it.next())?,
                "-L" | "--tid" if profile => a.tids = list("-L", it.next())?,
                "-t" | "--tid" if !profile => a.tids = list("-t", it.next())?,
                "-F" | "--frequency" if profile => a.freq = number("-F", it.next())?.max(1),
                "-U" | "--user-stacks-only" => a.user_stacks_only = true,
                "-K" | "--kernel-stacks-only" => a.kernel_stacks_only = true,
                "-f" | "--folded" => a.folded = true,
                "-d" | "--delimited" => a.delimited = true,
                "-a" | "--annotations" if profile => a.annotations = true,
                "-I" | "--include-idle" if profile => a.include_idle = true,
                "-u" | "--user-threads-only" if !profile => a.user_threads_only = true,
                "-k" | "--kernel-threads-only" if !profile => a.kernel_threads_only = true,
                "-m" | "--min-block-time" if !profile => a.min_us = number("-m", it.next())?,
                "-M" | "--max-block-time" if !profile => a.max_us = number("-M", it.next())?,
                f if f.starts_with('-') => {
                    return Err(bad(format!("unknown or unsupported flag '{f}'")))
                }
                _ if a.duration.is_none() => a.duration = Some(number("duration", Some(w))?),
                _ => return Err(bad(format!("one duration only, not '{w}'"))),
            }
        }
        let exclusive = [
            (!a.pids.is_empty(), "-p"),
            (!a.tids.is_empty(), if profile { "-L" } else { "-t" }),
            (a.user_threads_only, "-u"),
            (a.kernel_threads_only, "-k"),
        ];
        if exclusive.iter().filter(|(set, _)| *set).count() > 1 {
            return Err(bad("one of -p, -L/-t, -u, -k (bcc's thread group)".into()));
        }
        if a.user_stacks_only && a.kernel_stacks_only {
            return Err(bad("-U and -K exclude each other".into()));
        }
        Ok(a)
    }

    /// The `rprof record` arguments (without `-o`): frame-pointer stacks of the chosen tasks.
    pub fn record_args(&self) -> Vec<String> {
        let mut args: Vec<String> = vec!["-g".into(), "-q".into()];
        match self.tool {
            StackTool::Profile => args.extend(["-F".into(), self.freq.to_string()]),
            // The CPU samples are not shown: as few as can be.
            StackTool::OffCpu => args.extend(["--off-cpu".into(), "-F".into(), "1".into()]),
        }
        let ids = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        if !self.pids.is_empty() {
            args.extend(["-p".into(), ids(&self.pids)]);
        } else if !self.tids.is_empty() {
            args.extend(["-t".into(), ids(&self.tids)]);
        } else if self.command.is_empty() {
            args.push("-a".into());
        }
        if self.tool == StackTool::Profile && self.user_stacks_only {
            args.push("--user-only".into());
        }
        if self.tool == StackTool::Profile && self.kernel_stacks_only {
            args.push("--kernel-only".into());
        }
        if let Some(d) = self.duration {
            args.extend(["-d".into(), d.to_string()]);
        }
        if !self.command.is_empty() {
            args.push("--".into());
            args.extend(self.command.iter().cloned());
        }
        args
    }

    /// bcc's first line (not with `-f`).
    pub fn header(&self) -> Option<String> {
        if self.folded {
            return None;
        }
        let ids = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        let threads = if !self.pids.is_empty() {
            format!("PID {}", ids(&self.pids))
        } else if !self.tids.is_empty() {
            format!("TID {}", ids(&self.tids))
        } else if self.user_threads_only {
            "user threads".into()
        } else if self.kernel_threads_only {
            "kernel threads".into()
        } else {
            "all threads".into()
        };
        let stacks = match (self.user_stacks_only, self.kernel_stacks_only) {
            (true, _) => "user",
            (_, true) => "kernel",
            _ => "user + kernel",
        };
        let what = match self.tool {
            StackTool::Profile => format!("Sampling at {} Hertz of", self.freq),
            StackTool::OffCpu => "Tracing off-CPU time (us) of".into(),
        };
        let end = match self.duration {
            Some(d) => format!(" for {d} secs."),
            None => "... Hit Ctrl-C to end.".into(),
        };
        Some(format!("{what} {threads} by {stacks} stack{end}"))
    }
}

/// One stack as bcc keys it: the process (profile) or thread (offcputime), the command, kernel and user
/// frames each outermost first.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BccStack {
    pub id: u32,
    pub comm: String,
    pub user: Vec<String>,
    pub kernel: Vec<String>,
}

/// The stacks of a loaded recording as bcc counts them: samples (profile) or microseconds blocked
/// (offcputime), after the tool's filters; fewest first, as bcc prints them.
pub fn bcc_stacks(profile: &Profile, a: &StackArgs) -> Vec<(BccStack, u64)> {
    let Some(threads) = &profile.thread_stacks else {
        return Vec::new();
    };
    let is_user = |f: &u32| profile.frames.get(*f as usize).is_some_and(|i| !i.kernel);
    // A thread whose stacks never reach user code is a kernel thread (bcc reads PF_KTHREAD).
    let user_threads: HashSet<u32> = threads
        .keys()
        .filter(|(_, _, _, frames)| frames.iter().any(is_user))
        .map(|(_, tid, _, _)| *tid)
        .collect();
    let mut sums: HashMap<BccStack, u64> = HashMap::new();
    for ((pid, tid, comm, frames), count) in threads {
        let value = match a.tool {
            StackTool::Profile => count.samples,
            StackTool::OffCpu => count.off_period / 1000,
        };
        let kernel_thread = !user_threads.contains(tid);
        if value == 0
            || (a.tool == StackTool::Profile && *pid == 0 && !a.include_idle)
            || (a.user_threads_only && kernel_thread)
            || (a.kernel_threads_only && !kernel_thread)
        {
            continue;
        }
        let name = |f: &u32| {
            profile
                .frames
                .get(*f as usize)
                .map_or("[unknown]".to_string(), |i| i.name.clone())
        };
        let key = BccStack {
            id: if a.tool == StackTool::Profile {
                *pid
            } else {
                *tid
            },
            comm: profile
                .comms
                .get(*comm as usize)
                .cloned()
                .unwrap_or_default(),
            user: match a.kernel_stacks_only {
                true => Vec::new(),
                false => frames.iter().filter(|f| is_user(f)).map(name).collect(),
            },
            kernel: match a.user_stacks_only {
                true => Vec::new(),
                false => frames.iter().filter(|f| !is_user(f)).map(name).collect(),
            },
        };
        *sums.entry(key).or_default() += value;
    }
    let mut stacks: Vec<(BccStack, u64)> = sums
        .into_iter()
        .filter(|(_, v)| a.tool == StackTool::Profile || (*v >= a.min_us && *v <= a.max_us))
        .collect();
    stacks.sort_by(|x, y| (x.1, &x.0).cmp(&(y.1, &y.0)));
    stacks
}

/// Write the stacks as bcc does: folded lines with `-f`, else each stack leaf first (kernel, then user), a
/// `-                COMM (ID)` line and the value.
pub fn write_stacks(
    out: &mut dyn std::io::Write,
    stacks: &[(BccStack, u64)],
    a: &StackArgs,
) -> std::io::Result<()> {
    let delimit = |s: &BccStack| a.delimited && !s.user.is_empty() && !s.kernel.is_empty();
    let kernel_name = |n: &String| match a.annotations {
        true => format!("{n}_[k]"),
        false => n.clone(),
    };
    if a.folded {
        for (s, v) in stacks {
            let mut line = vec![s.comm.clone()];
            line.extend(s.user.iter().cloned());
            if delimit(s) {
                line.push("-".into());
            }
            line.extend(s.kernel.iter().map(kernel_name));
            writeln!(out, "{} {v}", line.join(";"))?;
        }
        return Ok(());
    }
    for (s, v) in stacks {
        for f in s.kernel.iter().rev() {
            writeln!(out, "    {f}")?;
        }
        if delimit(s) {
            writeln!(out, "    --")?;
        }
        for f in s.user.iter().rev() {
            writeln!(out, "    {f}")?;
        }
        writeln!(out, "    {:<16} {} ({})", "-", s.comm, s.id)?;
        writeln!(out, "        {v}\n")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    /// Check the lines and the record arguments they make.
    #[test]
    fn flags_to_record() {
        let a = StackArgs::parse(StackTool::Profile, &words("-F 99 -L 123 -f 5")).unwrap();
        assert_eq!(a.record_args(), words("-g -q -F 99 -t 123 -d 5"));
        assert!(a.header().is_none());
        let a = StackArgs::parse(StackTool::OffCpu, &words("-f -p 7 3")).unwrap();
        assert_eq!(a.record_args(), words("-g -q --off-cpu -F 1 -p 7 -d 3"));
        let a = StackArgs::parse(StackTool::OffCpu, &words("-m 1000")).unwrap();
        assert_eq!(a.min_us, 1000);
        assert_eq!(
            a.header().unwrap(),
            "Tracing off-CPU time (us) of all threads by user + kernel stack... Hit Ctrl-C to end."
        );
        let a = StackArgs::parse(StackTool::Profile, &words("-U 2")).unwrap();
        assert_eq!(
            a.header().unwrap(),
            "Sampling at 49 Hertz of all threads by user stack for 2 secs."
        );
        assert!(StackArgs::parse(StackTool::Profile, &words("-p 1 -L 2")).is_err());
        assert!(StackArgs::parse(StackTool::OffCpu, &words("-L 2")).is_err());
        assert!(StackArgs::parse(StackTool::Profile, &words("-U -K")).is_err());
    }

    /// Check bcc's two layouts.
    #[test]
    fn layouts() {
        let s = BccStack {
            id: 42,
            comm: "spin".into(),
            user: vec!["main".into(), "work".into()],
            kernel: vec!["asm_sysvec".into(), "irq".into()],
        };
        let mut a = StackArgs::parse(StackTool::Profile, &words("-f -a -d")).unwrap();
        let mut out = Vec::new();
        write_stacks(&mut out, &[(s.clone(), 7)], &a).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "spin;main;work;-;asm_sysvec_[k];irq_[k] 7\n"
        );
        a.folded = false;
        a.annotations = false;
        let mut out = Vec::new();
        write_stacks(&mut out, &[(s, 7)], &a).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "    irq\n    asm_sysvec\n    --\n    work\n    main\n    -                spin (42)\n        7\n\n"
        );
    }
}
