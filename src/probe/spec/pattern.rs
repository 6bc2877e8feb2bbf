//! Probe patterns: what a command-line pattern names (user functions, a library's functions, syscalls,
//! tracepoints, kernel functions) and how names are matched (glob or regex, on mangled and demangled names).
use globset::{GlobBuilder, GlobMatcher};
use regex::Regex;
use std::collections::{HashMap, HashSet};

/// What one command-line pattern asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Spec {
    /// Functions of the `-x` binary, or of `library` (`lib:PATTERN`, e.g. `c:malloc`).
    User {
        library: Option<String>,
        pattern: String,
    },
    /// `syscall:GLOB`: pairs `syscalls:sys_enter_NAME` with `sys_exit_NAME`.
    Syscall { pattern: String },
    /// `t:CATEGORY:EVENT`: counts tracepoint hits.
    Tracepoint { category: String, event: String },
    /// A bare pattern without `-x`: kernel functions (kprobe + kretprobe).
    Kernel { pattern: String },
    /// `usdt:PROVIDER:NAME` (globs) in the `-x` binary, or `usdt:LIB:PROVIDER:NAME` in a library.
    Usdt {
        library: Option<String>,
        provider: String,
        name: String,
    },
    /// `profile:hz:99`, `software:page-faults:100`: a perf software event, sampled (see [`super::software`]).
    Software {
        event: &'static crate::perf::software::SoftwareEvent,
        sample: crate::perf::software::Sample,
        /// The target's name: `profile:hz:99`, `software:page-faults:100` (perf's name, the count given).
        name: String,
    },
}

/// Errors in a pattern itself.
#[derive(Debug, thiserror::Error)]
pub enum PatternError {
    #[error("bad pattern `{pattern}`: {reason}")]
    Bad { pattern: String, reason: String },
}

/// Classify one pattern. `has_binary` is true when `-x BINARY` was given.
pub fn parse_spec(text: &str, has_binary: bool) -> Result<Spec, PatternError> {
    let bad = |reason: &str| PatternError::Bad {
        pattern: text.to_string(),
        reason: reason.to_string(),
    };
    if let Some(spec) = bpftrace_spec(text) {
        return spec.map_err(|reason| bad(&reason));
    }
    if let Some(rest) = text.strip_prefix("syscall:") {
        if rest.is_empty() {
            return Err(bad(
                "expected syscall:NAME, e.g. syscall:write or syscall:read*",
            ));
        }
        return Ok(Spec::Syscall {
            pattern: rest.to_string(),
        });
    }
    if let Some(rest) = text.strip_prefix("usdt:") {
        let parts: Vec<&str> = rest.split(':').collect();
        return match parts.as_slice() {
            // `usdt:PROVIDER` (`usdt:*`: all of them): every probe of the provider.
            [p] if !p.is_empty() => Ok(Spec::Usdt {
                library: None,
                provider: p.to_string(),
                name: "*".to_string(),
            }),
            [p, n] if !p.is_empty() && !n.is_empty() => Ok(Spec::Usdt {
                library: None,
                provider: p.to_string(),
                name: n.to_string(),
            }),
            [l, p, n] if !l.is_empty() && !p.is_empty() && !n.is_empty() => Ok(Spec::Usdt {
                library: Some(l.to_string()),
                provider: p.to_string(),
                name: n.to_string(),
            }),
            _ => Err(bad(
                "expected usdt:PROVIDER[:NAME] (in -x BINARY) or usdt:LIB:PROVIDER:NAME, e.g. usdt:python:import__*",
            )),
        };
    }
    if let Some(rest) = text.strip_prefix("t:") {
        return match rest.split_once(':') {
            Some((c, e)) if !c.is_empty() && !e.is_empty() => Ok(Spec::Tracepoint {
                category: c.to_string(),
                event: e.to_string(),
            }),
            _ => Err(bad("expected t:CATEGORY:EVENT, e.g. t:sched:sched_switch")),
        };
    }
    // `lib:PATTERN`: a single ':' (C++ names hold "::"), with a library name before it.
    if let Some(i) = text.find(':') {
        let (lib, rest) = (&text[..i], &text[i + 1..]);
        if !rest.starts_with(':') && !lib.is_empty() && !lib.contains(['*', '?', '[', '(']) {
            if rest.is_empty() {
                return Err(bad("expected LIBRARY:PATTERN, e.g. c:malloc"));
            }
            return Ok(Spec::User {
                library: Some(lib.to_string()),
                pattern: rest.to_string(),
            });
        }
    }
    if text.is_empty() {
        return Err(bad("empty pattern"));
    }
    if has_binary {
        Ok(Spec::User {
            library: None,
            pattern: text.to_string(),
        })
    } else {
        Ok(Spec::Kernel {
            pattern: text.to_string(),
        })
    }
}

/// bpftrace's probe names as the patterns they mean (rprof times functions with both probes, so `uretprobe`
/// is `uprobe`): `uprobe:PATH:FUNC`, `uretprobe:PATH:FUNC` and their short forms `u:`, `ur:` (PATH may be a
/// library name, as `LIB:`), `tracepoint:CAT:EVENT`, `kprobe:FUNC`, `kretprobe:FUNC`. None for other
/// patterns. (`k:FUNC` would be rprof's `LIB:PATTERN` for a library `k`, so only the long kprobe names are
/// taken.) `profile:` and `software:` are [`super::software`]'s.
fn bpftrace_spec(text: &str) -> Option<Result<Spec, String>> {
    let (kind, rest) = text.split_once(':')?;
    if let Some(spec) = super::software::parse(kind, rest) {
        return Some(spec);
    }
    let two = |what: &str| match rest.split_once(':') {
        Some((a, b)) if !a.is_empty() && !b.is_empty() && !b.starts_with(':') => {
            Ok((a.to_string(), b.to_string()))
        }
        _ => Err(format!("expected {kind}:{what}")),
    };
    Some(match kind {
        "uprobe" | "uretprobe" | "u" | "ur" => {
            // `u:LIB:PATTERN` only: `u:malloc` is rprof's LIB:PATTERN (a library `u`).
            if matches!(kind, "u" | "ur") && two("").is_err() {
                return None;
            }
            two("PATH:FUNCTION, e.g. uprobe:/bin/bash:readline").map(|(library, pattern)| {
                Spec::User {
                    library: Some(library),
                    pattern,
                }
            })
        }
        "tracepoint" => two("CATEGORY:EVENT, e.g. tracepoint:sched:sched_switch")
            .map(|(category, event)| Spec::Tracepoint { category, event }),
        "kprobe" | "kretprobe" if !rest.is_empty() && !rest.contains(':') => Ok(Spec::Kernel {
            pattern: rest.to_string(),
        }),
        "kprobe" | "kretprobe" => Err(format!("expected {kind}:FUNCTION, e.g. kprobe:vfs_read")),
        _ => return None,
    })
}

/// Matches one pattern against names: a glob (`*` also crosses `/` and `.`) or, with `-r`, a regex (searched
/// anywhere in the name; anchor it with `^...$`).
#[derive(Clone, Debug)]
pub enum NameMatcher {
    Glob(GlobMatcher),
    Regex(Regex),
}

impl NameMatcher {
    /// Compile `pattern` as a glob, or as a regex when `regex` is set.
    pub fn new(pattern: &str, regex: bool) -> Result<NameMatcher, PatternError> {
        let bad = |reason: String| PatternError::Bad {
            pattern: pattern.to_string(),
            reason,
        };
        if regex {
            return Regex::new(pattern)
                .map(NameMatcher::Regex)
                .map_err(|e| bad(e.to_string()));
        }
        let glob = GlobBuilder::new(pattern)
            .literal_separator(false)
            .backslash_escape(true)
            .build()
            .map_err(|e| bad(e.to_string()))?;
        Ok(NameMatcher::Glob(glob.compile_matcher()))
    }

    /// True when `name` matches.
    pub fn is_match(&self, name: &str) -> bool {
        match self {
            NameMatcher::Glob(g) => g.is_match(name),
            NameMatcher::Regex(r) => r.is_match(name),
        }
    }

    /// True when the symbol matches by its mangled name, its demangled name, or the demangled name without the
    /// Rust hash (`::h0123456789abcdef`) or the C++ parameter list.
    pub fn matches_symbol(&self, mangled: &str, demangled: &str) -> bool {
        if self.is_match(mangled) || self.is_match(demangled) {
            return true;
        }
        let short = short_name(mangled, demangled);
        short != demangled && self.is_match(short)
    }
}

/// The demangled name without a Rust legacy hash suffix, and for C++ (`_Z...`) without its parameter list.
pub fn short_name<'a>(mangled: &str, demangled: &'a str) -> &'a str {
    let s = strip_rust_hash(demangled);
    if mangled.starts_with("_Z") {
        strip_cpp_params(s)
    } else {
        s
    }
}

/// The short names ([`short_name`]) that functions at different addresses share under different full names:
/// C++ overloads (`K<int>::f(int)`, `K<int>::f(double)`) and clones (`f(int) [clone .constprop.0]`), which
/// probe names apart by their full names, parameters included, as gdb does. A cold part (`f(int) [clone
/// .cold]`) is a piece of its function, not another function: it makes no name shared. `symbols`: (mangled,
/// demangled, address).
pub fn shared_short_names<'a>(
    symbols: impl IntoIterator<Item = (&'a str, &'a str, u64)>,
) -> HashSet<&'a str> {
    let mut first: HashMap<&str, (&str, u64)> = HashMap::new();
    let mut shared = HashSet::new();
    for (mangled, demangled, addr) in symbols {
        if is_cold_part(demangled) {
            continue;
        }
        let (short, long) = (short_name(mangled, demangled), strip_rust_hash(demangled));
        let (seen, at) = *first.entry(short).or_insert((long, addr));
        if seen != long && at != addr {
            shared.insert(short);
        }
    }
    shared
}

/// GCC's cold part of a C++ function, demangled: `f(int) [clone .cold]`, `f(int) [clone .cold.3]`.
fn is_cold_part(demangled: &str) -> bool {
    demangled
        .rsplit_once(" [clone .cold")
        .is_some_and(|(_, rest)| rest == "]" || rest.starts_with('.') && rest.ends_with(']'))
}

/// `a::b::h0123456789abcdef` -> `a::b`.
pub fn strip_rust_hash(name: &str) -> &str {
    if let Some(i) = name.rfind("::h") {
        let hash = &name[i + 3..];
        if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return &name[..i];
        }
    }
    name
}

/// `ns::K::f(int, char) const` -> `ns::K::f`: cut at the first `(` outside template brackets.
fn strip_cpp_params(name: &str) -> &str {
    let mut depth = 0i32;
    for (i, c) in name.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            '(' if depth == 0 && i > 0 => {
                // `operator()` keeps its own parentheses.
                if name[..i].ends_with("operator") {
                    continue;
                }
                return &name[..i];
            }
            _ => {}
        }
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(lib: Option<&str>, p: &str) -> Spec {
        Spec::User {
            library: lib.map(str::to_string),
            pattern: p.to_string(),
        }
    }

    /// Check that each pattern form is classified, C++ `::` names included.
    #[test]
    fn classifies_patterns() {
        assert_eq!(parse_spec("func_*", true).unwrap(), user(None, "func_*"));
        assert_eq!(
            parse_spec("vfs_*", false).unwrap(),
            Spec::Kernel {
                pattern: "vfs_*".into()
            }
        );
        assert_eq!(
            parse_spec("c:malloc", false).unwrap(),
            user(Some("c"), "malloc")
        );
        assert_eq!(
            parse_spec("ns::Klass::*", true).unwrap(),
            user(None, "ns::Klass::*")
        );
        assert_eq!(
            parse_spec("syscall:write", false).unwrap(),
            Spec::Syscall {
                pattern: "write".into()
            }
        );
        assert_eq!(
            parse_spec("t:sched:sched_*", false).unwrap(),
            Spec::Tracepoint {
                category: "sched".into(),
                event: "sched_*".into()
            }
        );
        assert!(parse_spec("t:sched", false).is_err());
        assert!(parse_spec("syscall:", false).is_err());
    }

    /// Check that bpftrace's probe names mean the patterns they name in bpftrace, and that short forms that
    /// would be a library's name stay rprof's `LIB:PATTERN`.
    #[test]
    fn takes_bpftrace_probe_names() {
        for p in [
            "uprobe:./fn:func_*",
            "uretprobe:./fn:func_*",
            "u:./fn:func_*",
            "ur:./fn:func_*",
        ] {
            assert_eq!(
                parse_spec(p, false).unwrap(),
                user(Some("./fn"), "func_*"),
                "{p}"
            );
        }
        assert_eq!(
            parse_spec("uprobe:c:malloc", false).unwrap(),
            user(Some("c"), "malloc")
        );
        assert_eq!(
            parse_spec("uprobe:/bin/app:ns::Klass::*", true).unwrap(),
            user(Some("/bin/app"), "ns::Klass::*")
        );
        assert_eq!(
            parse_spec("u:malloc", false).unwrap(),
            user(Some("u"), "malloc")
        );
        assert_eq!(
            parse_spec("tracepoint:sched:sched_switch", false).unwrap(),
            Spec::Tracepoint {
                category: "sched".into(),
                event: "sched_switch".into()
            }
        );
        for p in ["kprobe:vfs_read", "kretprobe:vfs_read"] {
            let want = Spec::Kernel {
                pattern: "vfs_read".into(),
            };
            assert_eq!(parse_spec(p, true).unwrap(), want, "{p}");
        }
        for bad in [
            "uprobe:./fn",
            "uprobe:malloc",
            "tracepoint:sched",
            "kprobe:",
            "kprobe:a:b",
        ] {
            let e = parse_spec(bad, false).unwrap_err().to_string();
            assert!(e.contains("expected"), "{bad}: {e}");
        }
    }

    /// Check that globs match mangled and demangled Rust, C++ and Go names.
    #[test]
    fn matches_all_name_forms() {
        let m = NameMatcher::new("myapp::db::*", false).unwrap();
        assert!(m.matches_symbol("_ZN5myapp2db5query17h0123456789abcdefE", "myapp::db::query"));
        assert!(m.matches_symbol("_RNvNtCs1234_5myapp2db5query", "myapp::db::query"));
        assert!(!m.matches_symbol("_ZN5other5queryE", "other::query"));
        let exact = NameMatcher::new("myapp::db::query", false).unwrap();
        assert!(exact.matches_symbol(
            "_ZN5myapp2db5query17h0123456789abcdefE",
            "myapp::db::query::h0123456789abcdef"
        ));
        let cpp = NameMatcher::new("ns::Klass::work", false).unwrap();
        assert!(cpp.matches_symbol("_ZN2ns5Klass4workEi", "ns::Klass::work(int)"));
        let go = NameMatcher::new("main.(*T).*", false).unwrap();
        assert!(go.matches_symbol("main.(*T).Run", "main.(*T).Run"));
        let path = NameMatcher::new("github.com/x/*", false).unwrap();
        assert!(path.matches_symbol("github.com/x/y.F", "github.com/x/y.F"));
        let re = NameMatcher::new("^func_[ab]$", true).unwrap();
        assert!(re.is_match("func_a") && !re.is_match("func_c") && !re.is_match("xfunc_a"));
    }

    /// Check that overloads and clones share their short name, and that aliases, cold parts, C names and
    /// Rust's monomorphized copies (one name at many addresses) do not.
    #[test]
    fn finds_shared_short_names() {
        let syms = [
            ("_ZN1KIiE1fEi", "K<int>::f(int)", 0x10),
            ("_ZN1KIiE1fEd", "K<int>::f(double)", 0x20),
            ("_ZN1KIiE1fEd.cold", "K<int>::f(double) [clone .cold]", 0x90),
            ("_ZN1AC1Ei", "A::A(int)", 0x30),
            ("_ZN1AC2Ei", "A::A(int)", 0x30),
            ("_ZN1gEi", "g(int)", 0x40),
            ("_ZN1gEi.cold", "g(int) [clone .cold]", 0x98),
            ("_ZL1hi.constprop.0", "h(int) [clone .constprop.0]", 0x50),
            ("_ZL1hi", "h(int)", 0x58),
            (
                "_ZN4core3ptr13drop_in_place17h0123456789abcdefE",
                "core::ptr::drop_in_place",
                0x60,
            ),
            (
                "_ZN4core3ptr13drop_in_place17hfedcba9876543210E",
                "core::ptr::drop_in_place",
                0x68,
            ),
            ("local", "local", 0x70),
            ("local", "local", 0x78),
        ];
        let shared = shared_short_names(syms.iter().map(|&(m, d, a)| (m, d, a)));
        let mut shared: Vec<&str> = shared.into_iter().collect();
        shared.sort_unstable();
        assert_eq!(shared, ["K<int>::f", "h"]);
    }

    /// Check that Rust hashes and C++ parameter lists are stripped for display and matching.
    #[test]
    fn strips_hash_and_params() {
        assert_eq!(strip_rust_hash("a::b::h0123456789abcdef"), "a::b");
        assert_eq!(strip_rust_hash("a::b::hello"), "a::b::hello");
        assert_eq!(
            short_name("_ZN1x", "std::vector<int>::push_back(int const&)"),
            "std::vector<int>::push_back"
        );
        assert_eq!(
            short_name("_ZN1x", "Foo::operator()(int)"),
            "Foo::operator()"
        );
        assert_eq!(
            short_name("main.(*T).Run", "main.(*T).Run"),
            "main.(*T).Run"
        );
    }
}
