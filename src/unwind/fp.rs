//! Frame-pointer callchains come unwound from the kernel (PERF_SAMPLE_CALLCHAIN); this module only splits them.
