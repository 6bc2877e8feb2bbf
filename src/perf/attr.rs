//! `perf_event_attr` construction.
use perf_event_open_sys::bindings as sys;

/// Sample fields rprof asks for (PERF_SAMPLE_*).
pub mod sample {
    use perf_event_open_sys::bindings as sys;
    pub const IP: u64 = sys::PERF_SAMPLE_IP as u64;
    pub const TID: u64 = sys::PERF_SAMPLE_TID as u64;
    pub const TIME: u64 = sys::PERF_SAMPLE_TIME as u64;
    pub const ID: u64 = sys::PERF_SAMPLE_ID as u64;
    pub const CPU: u64 = sys::PERF_SAMPLE_CPU as u64;
    pub const PERIOD: u64 = sys::PERF_SAMPLE_PERIOD as u64;
    pub const CALLCHAIN: u64 = sys::PERF_SAMPLE_CALLCHAIN as u64;
    pub const RAW: u64 = sys::PERF_SAMPLE_RAW as u64;
    pub const REGS_USER: u64 = sys::PERF_SAMPLE_REGS_USER as u64;
    pub const REGS_INTR: u64 = sys::PERF_SAMPLE_REGS_INTR as u64;
    pub const STACK_USER: u64 = sys::PERF_SAMPLE_STACK_USER as u64;
    pub const IDENTIFIER: u64 = sys::PERF_SAMPLE_IDENTIFIER as u64;
}

/// x86_64 user register indices for `sample_regs_user` (defined with the registers, in `crate::regs`).
pub use crate::regs::index as regs;

/// The size rprof declares for its attrs (PERF_ATTR_SIZE_VER8); perf 6.1 and kernels since 6.3 know it.
pub const ATTR_SIZE: u32 = sys::PERF_ATTR_SIZE_VER8;

/// A `perf_event_attr` under construction. Every event starts disabled; callers enable it explicitly or with
/// [`Attr::enable_on_exec`].
#[derive(Clone, Copy)]
pub struct Attr {
    pub(crate) raw: sys::perf_event_attr,
}

impl std::fmt::Debug for Attr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attr")
            .field("type", &self.raw.type_)
            .field("config", &self.raw.config)
            .field("sample_type", &self.raw.sample_type)
            .finish()
    }
}

impl Attr {
    fn new(type_: u32, config: u64) -> Attr {
        let mut raw = sys::perf_event_attr {
            type_,
            size: ATTR_SIZE,
            config,
            ..Default::default()
        };
        raw.set_disabled(1);
        Attr { raw }
    }

    /// An event of any perf type (`PERF_TYPE_HARDWARE`, `PERF_TYPE_HW_CACHE`, `PERF_TYPE_RAW`, ...) and config,
    /// counting until a frequency or period is given.
    pub fn typed(type_: u32, config: u64) -> Attr {
        Attr::new(type_, config)
    }

    /// perf's event modifiers as attr bits (`:u` excludes kernel and hypervisor, `:p` asks for precision).
    pub fn modifiers(
        mut self,
        user: bool,
        kernel: bool,
        hv: bool,
        guest: bool,
        precise: u8,
    ) -> Attr {
        self.raw.set_exclude_user(user as u64);
        self.raw.set_exclude_kernel(kernel as u64);
        self.raw.set_exclude_hv(hv as u64);
        self.raw.set_exclude_guest(guest as u64);
        self.raw.set_precise_ip(u64::from(precise));
        self
    }

    /// Read the times enabled and running with the count (PERF_FORMAT_TOTAL_TIME_ENABLED|RUNNING), as perf
    /// stat counts.
    pub fn read_times(mut self) -> Attr {
        self.raw.read_format =
            (sys::PERF_FORMAT_TOTAL_TIME_ENABLED | sys::PERF_FORMAT_TOTAL_TIME_RUNNING) as u64;
        self
    }

    /// The attr's fields that `perf stat -vv` prints and event modifiers set: type, config, exclude_user,
    /// exclude_kernel, exclude_hv, exclude_guest, precise_ip.
    pub fn event_fields(&self) -> (u32, u64, [u64; 5]) {
        let r = &self.raw;
        (
            r.type_,
            r.config,
            [
                r.exclude_user(),
                r.exclude_kernel(),
                r.exclude_hv(),
                r.exclude_guest(),
                r.precise_ip(),
            ],
        )
    }

    /// Whether the attr leaves the kernel out (`:u`, `--user-only`).
    pub fn excludes_kernel(&self) -> bool {
        self.raw.exclude_kernel() != 0
    }

    /// The software `dummy` event: it counts nothing and samples nothing, and carries side-band records.
    pub fn dummy() -> Attr {
        Attr::new(sys::PERF_TYPE_SOFTWARE, sys::PERF_COUNT_SW_DUMMY as u64)
    }

    /// Timestamps from CLOCK_MONOTONIC (the tracefs `mono` clock) instead of perf's local clock.
    pub fn clock_monotonic(mut self) -> Attr {
        self.raw.set_use_clockid(1);
        self.raw.clockid = libc::CLOCK_MONOTONIC;
        self
    }

    /// A software event by its `PERF_COUNT_SW_*` config (see [`crate::perf::software`] for the names),
    /// counting until a frequency or period is given.
    pub fn software(config: u64) -> Attr {
        Attr::new(sys::PERF_TYPE_SOFTWARE, config)
    }

    /// A software clock event: `cpu-clock` (per-CPU hrtimer) or `task-clock` (per-task).
    pub fn software_clock(task_clock: bool) -> Attr {
        let config = if task_clock {
            sys::PERF_COUNT_SW_TASK_CLOCK
        } else {
            sys::PERF_COUNT_SW_CPU_CLOCK
        };
        Attr::new(sys::PERF_TYPE_SOFTWARE, config as u64)
    }

    /// The `context-switches` software event with a sample at every switch: it fires in the context of the
    /// thread leaving the CPU, so its stack is where that thread waits (off-CPU time).
    pub fn context_switches() -> Attr {
        let mut a = Attr::new(
            sys::PERF_TYPE_SOFTWARE,
            sys::PERF_COUNT_SW_CONTEXT_SWITCHES as u64,
        );
        a.raw.__bindgen_anon_1.sample_period = 1;
        a
    }

    /// Ask for PERF_RECORD_SWITCH records (SWITCH_CPU_WIDE for per-CPU events): one as each thread leaves a
    /// CPU (with `PERF_RECORD_MISC_SWITCH_OUT_PREEMPT` when it was still runnable) and one as it comes back.
    pub fn switch_records(mut self) -> Attr {
        self.raw.set_context_switch(1);
        self
    }

    /// A tracepoint (or uprobe/kprobe event) by its tracefs id; every hit is a sample (period 1).
    pub fn tracepoint(id: u64) -> Attr {
        let mut a = Attr::new(sys::PERF_TYPE_TRACEPOINT, id);
        a.raw.__bindgen_anon_1.sample_period = 1;
        a
    }

    /// An event of a dynamic PMU that takes a location in `config1`/`config2` (the uprobe PMU: the path's
    /// address and the file offset); every hit is a sample (period 1).
    pub(crate) fn pmu_probe(type_: u32, config: u64, config1: u64, config2: u64) -> Attr {
        let mut a = Attr::new(type_, config);
        a.raw.__bindgen_anon_1.sample_period = 1;
        a.raw.__bindgen_anon_3.config1 = config1;
        a.raw.__bindgen_anon_4.config2 = config2;
        a
    }

    /// Sample at `hz` samples per second.
    pub fn frequency(mut self, hz: u64) -> Attr {
        self.raw.set_freq(1);
        self.raw.__bindgen_anon_1.sample_freq = hz;
        self
    }

    /// Sample every `period` events (nanoseconds for the clock events).
    pub fn period(mut self, period: u64) -> Attr {
        self.raw.set_freq(0);
        self.raw.__bindgen_anon_1.sample_period = period;
        self
    }

    /// The PERF_SAMPLE_* fields of each sample.
    pub fn sample_type(mut self, bits: u64) -> Attr {
        self.raw.sample_type = bits;
        self
    }

    /// Capture these user registers (bit mask of [`regs`] indices) with each sample.
    pub fn regs_user(mut self, mask: u64) -> Attr {
        self.raw.sample_regs_user = mask;
        self
    }

    /// Capture these registers of the interrupted context, kernel or user (bit mask of `PERF_REG_X86_*`
    /// indices), with each sample.
    pub fn regs_intr(mut self, mask: u64) -> Attr {
        self.raw.sample_regs_intr = mask;
        self
    }

    /// Copy this many bytes of the user stack with each sample.
    pub fn stack_user(mut self, bytes: u32) -> Attr {
        self.raw.sample_stack_user = bytes;
        self
    }

    /// Ask for MMAP2, COMM (with exec), FORK/EXIT records, and sample_id_all; these describe the processes.
    pub fn side_band(mut self) -> Attr {
        self.raw.set_mmap(1);
        self.raw.set_mmap2(1);
        self.raw.set_comm(1);
        self.raw.set_comm_exec(1);
        self.raw.set_task(1);
        self
    }

    /// Append the sample_id fields (TID, TIME, CPU, ...) to non-sample records too.
    pub fn sample_id_all(mut self) -> Attr {
        self.raw.set_sample_id_all(1);
        self
    }

    /// Follow threads and processes created later by the target.
    pub fn inherit(mut self) -> Attr {
        self.raw.set_inherit(1);
        self
    }

    /// Count from the moment the event is opened (not disabled until enabled).
    pub fn start_enabled(mut self) -> Attr {
        self.raw.set_disabled(0);
        self
    }

    /// Enable the event when the target calls exec.
    pub fn enable_on_exec(mut self) -> Attr {
        self.raw.set_enable_on_exec(1);
        self
    }

    /// Count user mode only / kernel mode only.
    pub fn exclude(mut self, user: bool, kernel: bool) -> Attr {
        self.raw.set_exclude_user(user as u64);
        self.raw.set_exclude_kernel(kernel as u64);
        if kernel {
            self.raw.set_exclude_callchain_kernel(1);
        }
        if user {
            self.raw.set_exclude_callchain_user(1);
        }
        self
    }

    /// Whether the kernel walks the user stack by frame pointers for CALLCHAIN (DWARF mode turns it off).
    pub fn callchain_user(mut self, on: bool) -> Attr {
        self.raw.set_exclude_callchain_user((!on) as u64);
        self
    }

    /// Wake the reader when this many bytes are in the buffer (instead of on every event).
    pub fn wakeup_watermark(mut self, bytes: u32) -> Attr {
        self.raw.set_watermark(1);
        self.raw.__bindgen_anon_2.wakeup_watermark = bytes;
        self
    }

    /// Wake the reader after every `samples` samples (side-band records, however many, wake it only at half
    /// the buffer): the kernel counts PERF_RECORD_SAMPLE records alone towards `wakeup_events`.
    pub fn wakeup_samples(mut self, samples: u32) -> Attr {
        self.raw.set_watermark(0);
        self.raw.__bindgen_anon_2.wakeup_events = samples;
        self
    }

    /// Deepest kernel+user callchain to collect (0: the kernel default, kernel.perf_event_max_stack).
    pub fn max_stack(mut self, frames: u16) -> Attr {
        self.raw.sample_max_stack = frames;
        self
    }

    pub fn get_sample_type(&self) -> u64 {
        self.raw.sample_type
    }

    pub fn is_freq(&self) -> bool {
        self.raw.freq() != 0
    }

    /// The attr as the bytes the kernel reads (and perf.data stores): `size` bytes of the struct.
    pub fn to_bytes(&self) -> Vec<u8> {
        let size = (self.raw.size as usize).min(std::mem::size_of::<sys::perf_event_attr>());
        // SAFETY: perf_event_attr is a repr(C) plain-old-data struct of integers, unions of integers and
        // bitfield bytes, fully initialized (it was built from Default); reading `size` <= size_of bytes of it
        // as u8 is valid for its whole lifetime, which outlives this borrow.
        let bytes = unsafe {
            std::slice::from_raw_parts(&self.raw as *const sys::perf_event_attr as *const u8, size)
        };
        bytes.to_vec()
    }

    /// The parsing information for records produced by this attr (for `linux-perf-event-reader`).
    pub fn parse_info(&self) -> linux_perf_event_reader::RecordParseInfo {
        let bytes = self.to_bytes();
        let (parsed, _) =
            linux_perf_event_reader::PerfEventAttr::parse::<_, byteorder::NativeEndian>(&bytes[..])
                .expect("an attr rprof built always parses");
        linux_perf_event_reader::RecordParseInfo::new(
            &parsed,
            linux_perf_event_reader::Endianness::NATIVE,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that an attr serializes with its declared size and its fields at the kernel's offsets.
    #[test]
    fn attr_bytes_layout() {
        let a = Attr::software_clock(false)
            .frequency(99)
            .sample_type(sample::IP | sample::TID | sample::CALLCHAIN);
        let b = a.to_bytes();
        assert_eq!(b.len(), ATTR_SIZE as usize);
        assert_eq!(
            u32::from_ne_bytes(b[0..4].try_into().unwrap()),
            sys::PERF_TYPE_SOFTWARE
        );
        assert_eq!(u32::from_ne_bytes(b[4..8].try_into().unwrap()), ATTR_SIZE);
        assert_eq!(u64::from_ne_bytes(b[16..24].try_into().unwrap()), 99);
        assert_eq!(
            u64::from_ne_bytes(b[24..32].try_into().unwrap()),
            1 | 2 | 32
        );
        let info = a.parse_info();
        assert!(info
            .sample_format
            .contains(linux_perf_event_reader::SampleFormat::CALLCHAIN));
    }
}
