//! perf's flags that rprof's commands do not take as their own, flag by flag: each with the answer rprof gives
//! (see [`super::perf_flags`]). docs/perf-users.md keeps the same decisions as a table.
use super::perf_flags::{
    Answer::{Ignored, Refused, Same},
    PerfFlag,
    Value::{Flag, Optional, Required},
};

const fn f(
    short: Option<char>,
    long: &'static str,
    value: super::perf_flags::Value,
    answer: super::perf_flags::Answer,
) -> PerfFlag {
    PerfFlag {
        short,
        long,
        value,
        answer,
    }
}

const BRANCH: &str = "rprof samples the cpu-clock and task-clock software clocks: there are no branch records (they need a hardware PMU)";
const AUX: &str = "rprof records no AUX area (Intel PT, CoreSight); it samples the software clocks";
const BPF: &str =
    "rprof uses no BPF (its probes are uprobes, kprobes and tracepoints; see rprof probe)";
const REGS: &str = "rprof records only the registers that --call-graph dwarf needs to unwind";
const ITRACE: &str = "rprof reads no instruction traces (no AUX area is recorded)";
const SAMPLES_ONLY: &str = "rprof script prints samples only: side-band records (mmap, task, switch, lost) are not printed";
const FILES: &str = "rprof records to one file (-o FILE): run rprof record again for another";
const KSYMS: &str = "rprof names kernel frames from /proc/kallsyms, or from the copy record keeps in the build-id cache";
const SYMFS: &str = "rprof finds binaries where they were recorded and debug files under --debug-dir DIR (or by build id with --debuginfod)";
const DEMANGLE: &str = "rprof always demangles C++ and Rust names";
const VERBOSE: &str = "rprof prints its errors in full without -v";
const FORCE: &str = "rprof reads any recording it can open, whoever owns it";
const NO_PMU: &str = "rprof samples the software clocks only (no hardware PMU events, hence no weights, transactions or data addresses)";
const HEADER: &str =
    "rprof report --header-only prints the recording's header (host, command line, events, sample times)";
const RAW: &str = "rprof script prints every sample: rprof script -i FILE";
const TIME: &str = "rprof reads the whole recording; record a shorter window with -d SECONDS";
const SOURCE_PREFIX: &str = "rprof annotate --source-prefix OLD=NEW reads sources built elsewhere";
const DISASM: &str =
    "rprof disassembles itself, in objdump's AT&T syntax (no objdump, no Intel syntax)";
const INLINE: &str =
    "rprof shows inlined functions as frames of their own by default (--no-inline turns that off)";
const GUEST: &str = "rprof does not profile virtual machine guests from the host";
const SELECT: &str =
    "rprof selects by --comm, --pid and --tid; the table's rows by --sort (e.g. --sort dso,sym)";
const NO_DWARF_SIZE: &str =
    "rprof keeps every frame of a stack (up to the kernel's limit, kernel.perf_event_max_stack)";

/// perf record's flags that rprof record does not define.
pub const RECORD: &[PerfFlag] = &[
    f(Some('b'), "branch-any", Flag, Refused(BRANCH)),
    f(Some('j'), "branch-filter", Required, Refused(BRANCH)),
    f(Some('B'), "no-buildid", Flag, Ignored("rprof always writes the build ids of the binaries (report uses them to find the right build)")),
    f(Some('D'), "delay", Required, Refused("rprof samples from the start; to skip a start-up, record the running program with -p PID")),
    f(Some('I'), "intr-regs", Optional, Refused(REGS)),
    f(None, "user-regs", Optional, Refused(REGS)),
    f(Some('i'), "no-inherit", Flag, Refused("rprof follows every thread and child of its target; to sample one thread give -t TID")),
    f(Some('k'), "clockid", Required, Refused("rprof's sample times are the kernel's perf clock; no other clock can be chosen")),
    f(Some('n'), "no-samples", Flag, Refused("rprof record samples; to count events use rprof probe --count")),
    f(Some('P'), "period", Flag, Ignored("rprof always records each sample's period")),
    f(Some('R'), "raw-samples", Flag, Refused("rprof samples the software clocks, whose samples have no raw fields; rprof probe 't:CAT:EVENT(FIELD,...)' prints a tracepoint's fields")),
    f(Some('r'), "realtime", Required, Refused("run rprof under chrt instead: chrt -f N rprof record ...")),
    f(Some('S'), "snapshot", Optional, Refused(AUX)),
    f(None, "aux-sample", Optional, Refused(AUX)),
    f(Some('s'), "stat", Flag, Refused("rprof report --sort pid,tid shows the samples per thread")),
    f(Some('T'), "timestamp", Flag, Ignored("rprof always records each sample's time")),
    f(Some('u'), "uid", Required, Refused("record the whole system with -a and keep a user's processes with rprof report --comm or --pid, or record a cgroup with -G")),
    f(Some('v'), "verbose", Flag, Ignored(VERBOSE)),
    f(Some('W'), "weight", Flag, Refused(NO_PMU)),
    f(None, "transaction", Flag, Refused(NO_PMU)),
    f(None, "data", Flag, Refused(NO_PMU)),
    f(None, "phys-data", Flag, Refused(NO_PMU)),
    f(None, "code-page-size", Flag, Refused(NO_PMU)),
    f(None, "data-page-size", Flag, Refused(NO_PMU)),
    f(Some('z'), "compression-level", Optional, Refused("rprof writes records uncompressed (it reads perf's compressed files); compress the file afterwards if it must travel")),
    f(None, "affinity", Required, Ignored("rprof reads the ring buffers from one thread of its own")),
    f(None, "aio", Optional, Ignored("rprof writes the file from its own thread, four times a second")),
    f(None, "mmap-flush", Required, Ignored("rprof drains the ring buffers four times a second")),
    f(None, "no-buffering", Flag, Ignored("rprof writes records to the file four times a second")),
    f(None, "all-cgroups", Flag, Refused("rprof records cgroups as targets: -G CGROUP samples a cgroup's processes")),
    f(None, "buildid-all", Flag, Ignored("rprof writes the build ids of the binaries it saw mapped")),
    f(None, "buildid-mmap", Flag, Ignored("rprof writes build ids in the file's header, as perf does by default")),
    f(None, "clang-opt", Required, Refused(BPF)),
    f(None, "clang-path", Required, Refused(BPF)),
    f(None, "no-bpf-event", Flag, Ignored("rprof records no BPF events")),
    f(None, "control", Required, Refused("stop rprof record with Ctrl-C (SIGINT), SIGTERM or -d SECONDS")),
    f(None, "debuginfod", Optional, Ignored("record needs no debug files; give --debuginfod to rprof report, script or annotate")),
    f(None, "dry-run", Flag, Refused("rprof checks its options as it starts; there is no dry run")),
    f(None, "exclude-perf", Flag, Refused("with -a rprof's own threads are sampled too: leave them out with rprof report --comm")),
    f(None, "filter", Required, Refused("rprof record samples the software clocks, which take no filter; rprof probe filters tracepoints with 'if'")),
    f(None, "group", Flag, Ignored("rprof records one event")),
    f(None, "kcore", Flag, Refused("rprof does not copy /proc/kcore; annotate reads binaries from disk")),
    f(None, "kernel-callchains", Flag, Refused("rprof's --kernel-only keeps kernel samples and stacks; --user-only the user ones")),
    f(None, "user-callchains", Flag, Refused("rprof's --user-only keeps user samples and stacks; --kernel-only the kernel ones")),
    f(None, "max-size", Required, Refused("rprof record stops after -d SECONDS, not at a size")),
    f(None, "namespaces", Flag, Refused("rprof records no namespace events; -G CGROUP records a container")),
    f(None, "num-thread-synthesize", Required, Ignored("rprof reads the processes' maps from /proc itself")),
    f(None, "overwrite", Flag, Refused("rprof has no flight-recorder mode: every record reaches the file")),
    f(None, "per-thread", Flag, Ignored("rprof chooses its ring buffers itself")),
    f(None, "proc-map-timeout", Required, Ignored("rprof reads each process's /proc/PID/maps whole, with no time limit")),
    f(None, "running-time", Flag, Refused("rprof records no counter reads")),
    f(None, "sample-cpu", Flag, Ignored("rprof always records each sample's CPU")),
    f(None, "sample-identifier", Flag, Ignored("rprof always records each sample's identifier")),
    f(None, "switch-events", Flag, Refused("rprof record --off-cpu records where threads wait, from the context switches")),
    f(None, "switch-max-files", Required, Refused(FILES)),
    f(None, "switch-output", Optional, Refused(FILES)),
    f(None, "switch-output-event", Required, Refused(FILES)),
    f(None, "timestamp-filename", Flag, Refused("name the file yourself: -o rprof-$(date +%s).data")),
    f(None, "synth", Required, Ignored("rprof always writes the processes' maps and commands")),
    f(None, "tail-synthesize", Flag, Ignored("rprof writes the processes' maps at the start and as they change")),
    f(None, "threads", Optional, Ignored("rprof reads the ring buffers from one thread")),
    f(None, "timestamp-boundary", Flag, Ignored("rprof's samples carry their times")),
    f(None, "vmlinux", Required, Ignored(KSYMS)),
];

/// perf report's flags that rprof report does not define.
pub const REPORT: &[PerfFlag] = &[
    f(Some('b'), "branch-stack", Flag, Refused(BRANCH)),
    f(None, "branch-history", Flag, Refused(BRANCH)),
    f(None, "total-cycles", Flag, Refused(BRANCH)),
    f(Some('C'), "cpu", Required, Refused("rprof report keeps no CPU filter; rprof script prints each sample's CPU")),
    f(Some('d'), "dsos", Required, Refused(SELECT)),
    f(Some('S'), "symbols", Required, Refused("rprof annotate SYMBOL shows one function; rprof report --folded | grep SYMBOL its stacks")),
    f(None, "symbol-filter", Required, Refused("rprof report --folded | grep SYMBOL shows the stacks through a function")),
    f(Some('p'), "parent", Required, Refused(SELECT)),
    f(Some('x'), "exclude-other", Flag, Refused(SELECT)),
    f(Some('D'), "dump-raw-trace", Flag, Refused(RAW)),
    f(None, "raw-trace", Flag, Refused(RAW)),
    f(Some('F'), "fields", Required, Refused("rprof report's columns are Self and Total; --sort chooses the key columns (comm, pid, tid, dso, sym)")),
    f(Some('f'), "force", Flag, Ignored(FORCE)),
    f(Some('G'), "inverted", Flag, Same("--call-graph=caller")),
    f(Some('I'), "show-info", Flag, Refused(HEADER)),
    f(None, "header", Flag, Refused(HEADER)),
    f(None, "stats", Flag, Refused(HEADER)),
    f(None, "tasks", Flag, Refused("rprof report --sort pid,tid lists the recorded threads with their samples")),
    f(None, "mmaps", Flag, Refused("rprof report prints no memory maps")),
    f(Some('k'), "vmlinux", Required, Ignored(KSYMS)),
    f(None, "kallsyms", Required, Ignored(KSYMS)),
    f(None, "ignore-vmlinux", Flag, Ignored(KSYMS)),
    f(Some('m'), "modules", Flag, Ignored(KSYMS)),
    f(Some('M'), "disassembler-style", Required, Refused(DISASM)),
    f(None, "objdump", Required, Ignored(DISASM)),
    f(None, "asm-raw", Flag, Refused(DISASM)),
    f(Some('t'), "field-separator", Required, Refused("for machine-readable output use --folded, --pprof or --firefox")),
    f(Some('T'), "threads", Flag, Refused("rprof report --sort pid,tid shows the samples per thread")),
    f(Some('U'), "hide-unresolved", Flag, Refused("rprof report names unresolved code by module and address, and its closing lines say why it has no name")),
    f(Some('v'), "verbose", Flag, Ignored(VERBOSE)),
    f(Some('w'), "column-widths", Required, Ignored("rprof report's columns fit their contents")),
    f(None, "demangle", Flag, Ignored(DEMANGLE)),
    f(None, "no-demangle", Flag, Refused(DEMANGLE)),
    f(None, "demangle-kernel", Flag, Ignored(DEMANGLE)),
    f(None, "disable-order", Flag, Ignored("rprof reads the records in time order")),
    f(None, "full-source-path", Flag, Refused("rprof report --lines appends file:line to frames")),
    f(None, "group", Flag, Ignored("rprof records one event")),
    f(None, "group-sort-idx", Required, Ignored("rprof records one event")),
    f(None, "hierarchy", Flag, Refused("rprof report -g caller --children shows the calls from the outermost caller down")),
    f(None, "ignore-callees", Required, Refused("rprof report --folded gives whole stacks to cut as you like")),
    f(None, "inline", Flag, Ignored(INLINE)),
    f(None, "itrace", Optional, Refused(ITRACE)),
    f(None, "max-stack", Required, Refused(NO_DWARF_SIZE)),
    f(None, "mem-mode", Flag, Refused(NO_PMU)),
    f(None, "ns", Flag, Ignored("rprof report shows no times")),
    f(None, "percent-type", Required, Refused("rprof's shares are of the samples kept (local period)")),
    f(None, "percentage", Required, Refused("rprof's shares are of the samples kept after --comm, --pid, --tid")),
    f(None, "prefix", Required, Refused(SOURCE_PREFIX)),
    f(None, "prefix-strip", Required, Refused(SOURCE_PREFIX)),
    f(None, "pretty", Required, Refused("rprof report has one layout (perf's normal one)")),
    f(None, "samples", Required, Ignored("rprof report has no browser to keep samples for")),
    f(None, "show-cpu-utilization", Flag, Refused("rprof report has no per-mode columns; --kernel-only or --user-only at record time splits them")),
    f(None, "show-on-off-events", Flag, Refused(SAMPLES_ONLY)),
    f(None, "show-ref-call-graph", Flag, Refused("rprof records one event")),
    f(None, "show-total-period", Flag, Refused("rprof report's columns are the Self and Total shares")),
    f(None, "skip-empty", Flag, Ignored("rprof report shows one event")),
    f(None, "socket-filter", Required, Refused(SELECT)),
    f(None, "source", Flag, Refused("rprof annotate shows source lines; rprof report --lines appends file:line")),
    f(None, "stdio-color", Required, Ignored("rprof report's table has no colours")),
    f(None, "stitch-lbr", Flag, Refused(BRANCH)),
    f(None, "switch-off", Required, Refused(TIME)),
    f(None, "switch-on", Required, Refused(TIME)),
    f(None, "time", Required, Refused(TIME)),
    f(None, "time-quantum", Required, Refused(TIME)),
    f(None, "symfs", Required, Refused(SYMFS)),
    f(None, "tui", Flag, Ignored("rprof report prints text (--stdio)")),
    f(None, "gtk", Flag, Ignored("rprof report prints text (--stdio)")),
];

/// perf script's flags that rprof script does not define.
pub const SCRIPT: &[PerfFlag] = &[
    f(
        Some('a'),
        "all-cpus",
        Flag,
        Refused("record first (rprof record -a), then rprof script -i FILE"),
    ),
    f(
        Some('C'),
        "cpu",
        Required,
        Refused("rprof script prints every CPU's samples; each line shows its CPU"),
    ),
    f(
        Some('d'),
        "debug-mode",
        Flag,
        Ignored("rprof checks the records as it reads them"),
    ),
    f(Some('D'), "dump-raw-trace", Flag, Refused(RAW)),
    f(None, "dump-unsorted-raw-trace", Flag, Refused(RAW)),
    f(Some('f'), "force", Flag, Ignored(FORCE)),
    f(
        Some('g'),
        "gen-script",
        Required,
        Refused("rprof runs no scripts: pipe rprof script into yours"),
    ),
    f(
        Some('s'),
        "script",
        Required,
        Refused("rprof runs no scripts: pipe rprof script into yours"),
    ),
    f(
        Some('l'),
        "list",
        Flag,
        Refused("rprof runs no scripts: pipe rprof script into yours"),
    ),
    f(
        Some('G'),
        "hide-call-graph",
        Flag,
        Same("--fields=-callchain"),
    ),
    f(Some('I'), "show-info", Flag, Refused(HEADER)),
    f(None, "header", Flag, Refused(HEADER)),
    f(None, "header-only", Flag, Refused(HEADER)),
    f(Some('k'), "vmlinux", Required, Ignored(KSYMS)),
    f(None, "kallsyms", Required, Ignored(KSYMS)),
    f(
        Some('L'),
        "Latency",
        Flag,
        Refused("rprof records no irq or preemption state"),
    ),
    f(
        Some('S'),
        "symbols",
        Required,
        Refused("rprof script | grep SYMBOL, or rprof annotate SYMBOL"),
    ),
    f(
        None,
        "addr-range",
        Required,
        Refused("rprof script | grep SYMBOL"),
    ),
    f(Some('v'), "verbose", Flag, Ignored(VERBOSE)),
    f(None, "call-ret-trace", Optional, Refused(ITRACE)),
    f(None, "call-trace", Optional, Refused(ITRACE)),
    f(None, "insn-trace", Optional, Refused(ITRACE)),
    f(None, "itrace", Optional, Refused(ITRACE)),
    f(None, "graph-function", Required, Refused(ITRACE)),
    f(None, "max-blocks", Required, Refused(BRANCH)),
    f(None, "stitch-lbr", Flag, Refused(BRANCH)),
    f(None, "xed", Optional, Refused(ITRACE)),
    f(
        None,
        "deltatime",
        Flag,
        Refused("rprof script prints each sample's time since boot, as perf's default"),
    ),
    f(
        None,
        "reltime",
        Flag,
        Refused("rprof script prints each sample's time since boot, as perf's default"),
    ),
    f(
        None,
        "ns",
        Flag,
        Refused("rprof script prints times in microseconds, as perf's default"),
    ),
    f(None, "demangle", Flag, Ignored(DEMANGLE)),
    f(None, "no-demangle", Flag, Refused(DEMANGLE)),
    f(None, "demangle-kernel", Flag, Ignored(DEMANGLE)),
    f(
        None,
        "dlarg",
        Required,
        Refused("rprof loads no filter libraries: rprof script | grep"),
    ),
    f(
        None,
        "dlfilter",
        Required,
        Refused("rprof loads no filter libraries: rprof script | grep"),
    ),
    f(
        None,
        "list-dlfilters",
        Flag,
        Refused("rprof loads no filter libraries: rprof script | grep"),
    ),
    f(
        None,
        "dsos",
        Required,
        Refused("rprof script prints every sample; rprof report --sort dso,sym groups by binary"),
    ),
    f(
        None,
        "full-source-path",
        Flag,
        Refused("rprof script prints no source lines; rprof report --lines does"),
    ),
    f(None, "guest-code", Flag, Refused(GUEST)),
    f(None, "guestkallsyms", Required, Refused(GUEST)),
    f(None, "guestmodules", Required, Refused(GUEST)),
    f(None, "guestmount", Required, Refused(GUEST)),
    f(None, "guestvmlinux", Required, Refused(GUEST)),
    f(None, "inline", Flag, Ignored(INLINE)),
    f(None, "max-stack", Required, Refused(NO_DWARF_SIZE)),
    f(
        None,
        "per-event-dump",
        Flag,
        Refused("rprof records one event: redirect rprof script's output"),
    ),
    f(
        None,
        "pid",
        Required,
        Refused("rprof script | grep the PID, or rprof report --pid PID"),
    ),
    f(
        None,
        "tid",
        Required,
        Refused("rprof script | grep the TID, or rprof report --tid TID"),
    ),
    f(None, "show-bpf-events", Flag, Refused(SAMPLES_ONLY)),
    f(None, "show-cgroup-events", Flag, Refused(SAMPLES_ONLY)),
    f(None, "show-kernel-path", Flag, Refused(SAMPLES_ONLY)),
    f(
        None,
        "show-lost-events",
        Flag,
        Refused("rprof script prints samples only; rprof report's closing lines count lost events"),
    ),
    f(None, "show-mmap-events", Flag, Refused(SAMPLES_ONLY)),
    f(None, "show-namespace-events", Flag, Refused(SAMPLES_ONLY)),
    f(None, "show-on-off-events", Flag, Refused(SAMPLES_ONLY)),
    f(None, "show-round-events", Flag, Refused(SAMPLES_ONLY)),
    f(None, "show-switch-events", Flag, Refused(SAMPLES_ONLY)),
    f(None, "show-task-events", Flag, Refused(SAMPLES_ONLY)),
    f(None, "show-text-poke-events", Flag, Refused(SAMPLES_ONLY)),
    f(
        None,
        "stop-bt",
        Required,
        Refused("rprof script prints whole stacks"),
    ),
    f(None, "switch-off", Required, Refused(TIME)),
    f(None, "switch-on", Required, Refused(TIME)),
    f(None, "time", Required, Refused(TIME)),
    f(None, "symfs", Required, Refused(SYMFS)),
];

/// perf annotate's flags that rprof annotate does not define.
pub const ANNOTATE: &[PerfFlag] = &[
    f(
        Some('C'),
        "cpu",
        Required,
        Refused("rprof annotate counts every CPU's samples"),
    ),
    f(Some('D'), "dump-raw-trace", Flag, Refused(RAW)),
    f(Some('f'), "force", Flag, Ignored(FORCE)),
    f(Some('k'), "vmlinux", Required, Ignored(KSYMS)),
    f(
        Some('l'),
        "print-line",
        Flag,
        Ignored("rprof annotate always prints the sorted summary of the hot source lines"),
    ),
    f(Some('M'), "disassembler-style", Required, Refused(DISASM)),
    f(None, "objdump", Required, Ignored(DISASM)),
    f(None, "asm-raw", Flag, Refused(DISASM)),
    f(Some('m'), "modules", Flag, Ignored(KSYMS)),
    f(None, "ignore-vmlinux", Flag, Ignored(KSYMS)),
    f(
        Some('P'),
        "full-paths",
        Flag,
        Ignored(
            "rprof annotate names the binary by its file name; --dso takes a path or a file name",
        ),
    ),
    f(
        Some('q'),
        "quiet",
        Flag,
        Ignored("rprof annotate prints no warnings but for a damaged recording"),
    ),
    f(Some('v'), "verbose", Flag, Ignored(VERBOSE)),
    f(None, "demangle", Flag, Ignored(DEMANGLE)),
    f(None, "no-demangle", Flag, Refused(DEMANGLE)),
    f(None, "demangle-kernel", Flag, Ignored(DEMANGLE)),
    f(None, "group", Flag, Ignored("rprof records one event")),
    f(None, "itrace", Optional, Refused(ITRACE)),
    f(
        None,
        "percent-limit",
        Required,
        Refused("rprof annotate shows the -n hottest functions (3), or those named"),
    ),
    f(
        None,
        "percent-type",
        Required,
        Refused("rprof annotate's shares are of the function's samples (local period)"),
    ),
    f(None, "prefix", Required, Refused(SOURCE_PREFIX)),
    f(None, "prefix-strip", Required, Refused(SOURCE_PREFIX)),
    f(
        None,
        "show-total-period",
        Flag,
        Refused("rprof annotate's column is each line's share of the function's samples"),
    ),
    f(
        None,
        "skip-missing",
        Flag,
        Refused("rprof annotate stops at a function whose code it cannot read, and says why"),
    ),
    f(
        None,
        "source",
        Flag,
        Ignored(
            "rprof annotate interleaves the source lines with the disassembly (--asm, --stdio2)",
        ),
    ),
    f(None, "stdio-color", Required, Same("--color")),
    f(None, "symfs", Required, Refused(SYMFS)),
    f(
        None,
        "tui",
        Flag,
        Ignored("rprof annotate prints text (--stdio)"),
    ),
    f(
        None,
        "gtk",
        Flag,
        Ignored("rprof annotate prints text (--stdio)"),
    ),
];

const PERSIST: &str = "rprof's probes live only as long as the rprof probe session that made them (removed when it ends, even after a SIGKILL, by its supervisor): there are no persistent probes to add, list or delete; give the probe and the command or -p PID in one rprof probe";

/// perf probe's flags that rprof probe does not define.
pub const PROBE: &[PerfFlag] = &[
    f(Some('D'), "definition", Required, Refused("rprof probe -l PATTERN lists the probe points a pattern would make")),
    f(None, "del", Required, Refused(PERSIST)),
    f(Some('f'), "force", Flag, Ignored("rprof names its probes per session; they never clash")),
    f(Some('k'), "vmlinux", Required, Ignored(KSYMS)),
    f(Some('L'), "line", Required, Refused("rprof probes functions, FUNC+OFF and addresses, not source lines")),
    f(Some('V'), "vars", Required, Refused("rprof probe 'FUNC(NAME, ...)' fetches parameters by their DWARF names; -l PATTERN lists the probe points")),
    f(None, "externs", Flag, Refused("rprof probe fetches parameters, not global variables")),
    f(None, "range", Flag, Refused("rprof probe fetches parameters, not variables' ranges")),
    f(Some('m'), "module", Required, Refused("rprof probes kernel functions by name, in modules too: rprof probe FUNC")),
    f(Some('n'), "dry-run", Flag, Same("--list")),
    f(Some('q'), "quiet", Flag, Ignored("rprof probe prints its one header line and the report")),
    f(Some('s'), "source", Required, Ignored("rprof probe needs no kernel source")),
    f(Some('v'), "verbose", Flag, Ignored(VERBOSE)),
    f(None, "bootconfig", Flag, Refused(PERSIST)),
    f(None, "cache", Flag, Refused(PERSIST)),
    f(None, "demangle", Flag, Ignored(DEMANGLE)),
    f(None, "no-demangle", Flag, Refused("rprof's patterns match both the mangled and the demangled names")),
    f(None, "demangle-kernel", Flag, Ignored(DEMANGLE)),
    f(None, "filter", Required, Refused("give the filter to -F itself: rprof probe -F -x BINARY 'func_*'")),
    f(None, "max-probes", Required, Ignored("rprof probes every match; -l PATTERN lists them first")),
    f(None, "no-inlines", Flag, Refused("rprof probes functions where they are called, not their inlined copies")),
    f(None, "symfs", Required, Refused(SYMFS)),
    f(None, "target-ns", Required, Refused("rprof probe -p PID probes the binary that the process maps")),
];

/// perf's flags for `sub`.
pub fn of(sub: &str) -> &'static [PerfFlag] {
    match sub {
        "record" => RECORD,
        "report" => REPORT,
        "script" => SCRIPT,
        "annotate" => ANNOTATE,
        "probe" => PROBE,
        _ => &[],
    }
}

/// The message rprof gives for `-d`/`--del` used with a group (perf's persistent probes).
pub const PERSISTENT_PROBES: &str = PERSIST;

#[cfg(test)]
mod tests {
    use super::*;

    /// The markdown table of `sub`'s flags, each with the answer the command line prints (a `|` escaped).
    fn doc_table(sub: &str) -> String {
        let mut t = String::from("| perf flag | answer |\n|---|---|\n");
        for flag in of(sub) {
            let said = match flag.answer {
                Refused(t) => format!("refused: {t}"),
                Ignored(t) => format!("no effect: {t}"),
                Same(t) => format!("same as `{t}`"),
            };
            let name = match flag.short {
                Some(c) => format!("`-{c}`, `--{}`", flag.long),
                None => format!("`--{}`", flag.long),
            };
            t.push_str(&format!("| {name} | {} |\n", said.replace('|', "\\|")));
        }
        t
    }

    /// Check that docs/perf-users.md gives every flag's answer as the command line prints it: the sentence,
    /// under its command's heading (not the name of a constant of this file). On a difference, the table it
    /// should hold is in target/perf-users-SUB.md.
    #[test]
    fn the_doc_table_says_what_the_cli_says() {
        let doc = include_str!("../../docs/perf-users.md");
        let mut wrong = Vec::new();
        for sub in ["record", "report", "script", "annotate", "probe"] {
            let want = doc_table(sub);
            if !doc.contains(&format!("### {sub}\n\n{want}")) {
                let out = format!("{}/target/perf-users-{sub}.md", env!("CARGO_MANIFEST_DIR"));
                std::fs::write(&out, &want).unwrap();
                wrong.push(out);
            }
        }
        assert!(
            wrong.is_empty(),
            "docs/perf-users.md: tables that are not the CLI's answers; they should be {wrong:?}"
        );
    }
}
