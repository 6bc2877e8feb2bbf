//! Finding a library as the dynamic loader would (`c` is libc.so.6): in the target's maps, through
//! `ldconfig -p`, or in the usual directories.
use crate::probe::ProbeError;
use std::path::{Path, PathBuf};

/// Find a library as the dynamic loader would: `c` -> `libc.so.6`. A name with `/` is a path. With a pid, the
/// library the process has mapped wins; then `ldconfig -p`; then the usual directories and LD_LIBRARY_PATH.
pub fn find_library(name: &str, pid: Option<u32>) -> Result<PathBuf, ProbeError> {
    if name.contains('/') {
        return Ok(PathBuf::from(name));
    }
    let stem = if name.starts_with("lib") {
        name.to_string()
    } else {
        format!("lib{name}")
    };
    let fits = |file: &str| {
        file == format!("{stem}.so")
            || file.starts_with(&format!("{stem}.so."))
            || file.starts_with(&format!("{stem}-"))
    };
    if let Some(pid) = pid {
        if let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) {
            for line in maps.lines() {
                if let Some(p) = line.split_whitespace().nth(5) {
                    let file = Path::new(p)
                        .file_name()
                        .and_then(|f| f.to_str())
                        .unwrap_or("");
                    if p.starts_with('/') && fits(file) {
                        return Ok(crate::process::root_path(pid, Path::new(p)));
                    }
                }
            }
        }
    }
    if let Ok(out) = std::process::Command::new("ldconfig").arg("-p").output() {
        let text = String::from_utf8_lossy(&out.stdout);
        if let Some(p) = parse_ldconfig(&text, &stem) {
            return Ok(p);
        }
    }
    let mut dirs: Vec<PathBuf> = std::env::var("LD_LIBRARY_PATH")
        .unwrap_or_default()
        .split(':')
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .collect();
    for d in [
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib64",
        "/usr/lib64",
        "/lib",
        "/usr/lib",
        "/usr/local/lib",
    ] {
        dirs.push(PathBuf::from(d));
    }
    for d in dirs {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|f| fits(f))
            .collect();
        // `libc.so` may be a linker script: prefer a versioned name.
        names.sort_by_key(|f| (f == &format!("{stem}.so"), f.clone()));
        if let Some(f) = names.first() {
            return Ok(d.join(f));
        }
    }
    Err(ProbeError::NoLibrary {
        name: name.to_string(),
    })
}

/// The dynamic loader (`ld-linux-x86-64.so.2`): the one process `pid` mapped, else the system's.
pub fn dynamic_loader(pid: Option<u32>) -> Option<PathBuf> {
    if let Some(pid) = pid {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
        let found = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| {
                Path::new(p)
                    .file_name()
                    .and_then(|f| f.to_str())
                    .is_some_and(|f| f.starts_with("ld-linux"))
            });
        if let Some(p) = found {
            return Some(crate::process::root_path(pid, Path::new(p)));
        }
    }
    let system = Path::new("/lib64/ld-linux-x86-64.so.2");
    system
        .exists()
        .then(|| std::fs::canonicalize(system).unwrap_or(system.to_path_buf()))
}

/// The x86-64 library `stem.so*` in `ldconfig -p` output.
pub fn parse_ldconfig(text: &str, stem: &str) -> Option<PathBuf> {
    let mut best: Option<(bool, PathBuf)> = None;
    for line in text.lines() {
        let line = line.trim();
        let Some((left, path)) = line.split_once(" => ") else {
            continue;
        };
        let file = left.split_whitespace().next().unwrap_or("");
        if !(file.starts_with(&format!("{stem}.so.")) || file == format!("{stem}.so")) {
            continue;
        }
        let x86_64 = left.contains("x86-64");
        if best.as_ref().is_none_or(|(b, _)| !*b && x86_64) {
            best = Some((x86_64, PathBuf::from(path.trim())));
        }
    }
    best.map(|(_, p)| p)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that ldconfig output picks the x86-64 versioned library.
    #[test]
    fn ldconfig_lookup() {
        let text = "1234 libs found in cache `/etc/ld.so.cache'\n\
            \tlibcrypt.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libcrypt.so.1\n\
            \tlibc.so.6 (libc6) => /lib/i386-linux-gnu/libc.so.6\n\
            \tlibc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6\n";
        assert_eq!(
            parse_ldconfig(text, "libc"),
            Some(PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"))
        );
        assert_eq!(parse_ldconfig(text, "libz"), None);
    }
}
