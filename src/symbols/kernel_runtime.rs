//! The kernel's run-time symbols (the part of /proc/kallsyms outside the kernel image: modules, BPF programs,
//! trampolines) kept on disk for the boot. The first kernel frame outside the image made each rprof read all of
//! /proc/kallsyms, where the kernel formats some 120,000 lines (~45 ms of system time here, a tenth of a
//! 60 s push's CPU on a busy host). The part outside the image is written beside the build-id cache's copy of
//! kallsyms (`[kernel.kallsyms]/<build id>/runtime`), under a key of what it depends on: the boot
//! (`/proc/sys/kernel/random/boot_id`), the modules loaded and where (`/proc/modules`: name, size, address),
//! and the ids of the BPF programs loaded. A later rprof with the same key reads the file instead.
//!
//! Staleness: run-time symbols that change without a module or BPF program coming or going (ftrace and kprobe
//! trampolines, a BPF dispatcher's image) are as they were when the file was written; where the BPF
//! programs cannot be listed (no CAP_SYS_ADMIN), nothing is kept.
use super::kallsyms::{parse_kallsyms, KernelSymbols};
use std::path::{Path, PathBuf};

/// The first line of a kept file: this, then the key.
const HEADER: &str = "# rprof run-time kallsyms, key ";

/// The file of kernel `build_id`'s run-time symbols in the build-id cache `dir`.
pub(crate) fn path(dir: &Path, build_id: &[u8]) -> PathBuf {
    crate::buildid::cached_kallsyms_path(dir, build_id).with_file_name("runtime")
}

/// The run-time symbols of the running kernel: from the file kept under `keep` (a build-id cache) when its key
/// is the one now, else from /proc/kallsyms (then written there).
pub(crate) fn outside_image(keep: Option<(&Path, &[u8])>) -> KernelSymbols {
    // The key is taken before /proc/kallsyms is read: a program loaded meanwhile makes the next key differ.
    let kept = keep.and_then(|(dir, id)| Some((path(dir, id), key()?)));
    if let Some((file, key)) = &kept {
        if let Some(symbols) = read_kept(file, key) {
            return symbols;
        }
    }
    let symbols = super::kernel::read_kallsyms(Path::new("/proc/kallsyms"))
        .unwrap_or_default()
        .outside_image();
    if let Some((file, key)) = kept {
        // A cache: a file that cannot be written costs the next rprof the read it would have saved.
        let _ = write_kept(&file, &key, &symbols);
    }
    symbols
}

/// The key of the run-time symbols now; None when the BPF programs cannot be listed.
fn key() -> Option<String> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let modules = std::fs::read_to_string("/proc/modules").unwrap_or_default();
    // Name, size and address: the use count and state change without the symbols changing.
    let modules: Vec<String> = modules
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            format!(
                "{} {} {}",
                f[0],
                f.get(1).unwrap_or(&""),
                f.last().unwrap_or(&"")
            )
        })
        .collect();
    let bpf = crate::perf::bpf_ids::bpf_prog_ids()?;
    let text = format!("{}\n{}\n{bpf:?}", boot.trim(), modules.join("\n"));
    Some(format!("{:016x}", fnv1a(text.as_bytes())))
}

/// FNV-1a, 64 bits: stable across rprof builds (the key is written to disk).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn read_kept(file: &Path, key: &str) -> Option<KernelSymbols> {
    let text = std::fs::read(file).ok()?;
    let first = text.split(|&b| b == b'\n').next()?;
    (first == format!("{HEADER}{key}").as_bytes()).then(|| parse_kallsyms(&text))
}

/// Write through a temporary file and a rename: a concurrent reader sees the old file or the new one.
fn write_kept(file: &Path, key: &str, symbols: &KernelSymbols) -> std::io::Result<()> {
    let dir = file.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".runtime.{}", std::process::id()));
    std::fs::write(&tmp, format!("{HEADER}{key}\n{}", symbols.to_text()))?;
    std::fs::rename(&tmp, file)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that run-time symbols written and read back name the same addresses, and that a file of another
    /// key is not read.
    #[test]
    fn kept_symbols_read_back() {
        let text = b"ffffffff81000000 T _text\n\
ffffffff81000100 T vfs_write\n\
ffffffff81000300 T _etext\n\
ffffffffc0001000 t mod_fn\t[some_module]\n\
ffffffffc0001080 d mod_data\t[some_module]\n\
ffffffffc0002000 t bpf_prog_1234_handler\t[bpf]\n";
        let symbols = parse_kallsyms(text).outside_image();
        let dir = tempfile::tempdir().unwrap();
        let file = path(dir.path(), &[0xab, 0xcd]);
        write_kept(&file, "k1", &symbols).unwrap();
        assert!(read_kept(&file, "k2").is_none(), "another key");
        let back = read_kept(&file, "k1").unwrap();
        for addr in [
            0xffffffffc0001000u64,
            0xffffffffc000107f,
            0xffffffffc0001080,
            0xffffffffc0002000,
            0xffffffffc0002fff,
            0xffffffffc0003000,
            0xffffffff81000100,
        ] {
            assert_eq!(back.lookup_at(addr), symbols.lookup_at(addr), "{addr:x}");
        }
        assert_eq!(back.lookup(0xffffffffc0001010).as_deref(), Some("mod_fn"));
    }

    /// Check that the key of this host is stable while nothing loads (when it can be taken at all).
    #[test]
    fn key_is_hex() {
        if let Some(k) = key() {
            assert_eq!(k.len(), 16);
            assert!(k.bytes().all(|b| b.is_ascii_hexdigit()));
        }
    }
}
