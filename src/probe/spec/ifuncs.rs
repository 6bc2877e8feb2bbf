//! IFUNC names in user patterns: `c:strlen` is probed at the implementation the dynamic linker picks for this
//! CPU (`__strlen_evex`), named `strlen`; names that resolve to one implementation share its row
//! (`memcpy/memmove`); the resolvers themselves (`strlen_ifunc`) match only when named exactly.
use super::pattern::NameMatcher;
use crate::symbols::ifunc::{ifunc_symbols, resolve_ifuncs, Ifunc};
use std::collections::{BTreeMap, HashSet};
use std::path::Path;

/// A file's IFUNCs as far as they could be resolved.
#[derive(Debug, Default)]
pub struct Ifuncs {
    pub list: Vec<Ifunc>,
    /// Why they could not be resolved (an executable cannot be loaded by the helper).
    pub error: Option<String>,
}

impl Ifuncs {
    /// The IFUNCs of `path` (a library or executable), resolved by the helper when there are any.
    pub fn of(path: &Path) -> Ifuncs {
        let mut list = ifunc_symbols(path).unwrap_or_default();
        let error = resolve_ifuncs(Path::new("/proc/self/exe"), path, &mut list)
            .err()
            .map(|e| e.to_string());
        Ifuncs { list, error }
    }

    /// The resolvers' addresses (the IFUNC symbols' own).
    pub fn resolvers(&self) -> HashSet<u64> {
        self.list.iter().map(|f| f.resolver.0).collect()
    }

    /// The IFUNC names by the address they resolve to, each list plainest first.
    pub fn names_by_target(&self) -> BTreeMap<u64, Vec<String>> {
        let mut out: BTreeMap<u64, Vec<String>> = BTreeMap::new();
        for f in &self.list {
            if let Some(t) = f.target {
                out.entry(t.0).or_default().push(f.name.clone());
            }
        }
        for names in out.values_mut() {
            names.sort_by_key(|n| plainness(n));
        }
        out
    }

    /// The error for a pattern that matched no function but matched IFUNCs that resolve nowhere in the file
    /// (`time` and `gettimeofday` resolve into the vDSO) or could not be resolved at all.
    pub fn unresolved_match(&self, matcher: &NameMatcher) -> Option<String> {
        let names: Vec<&str> = self
            .list
            .iter()
            .filter(|f| f.target.is_none() && matcher.is_match(&f.name))
            .map(|f| f.name.as_str())
            .collect();
        if names.is_empty() {
            return None;
        }
        Some(match &self.error {
            Some(e) => format!("{} ({e})", names.join(", ")),
            None => format!(
                "{} (IFUNCs that resolve outside the file on this machine, e.g. into the vDSO)",
                names.join(", ")
            ),
        })
    }
}

/// Sort key: fewest leading underscores, then shortest, then by name.
pub fn plainness(n: &str) -> (usize, usize, String) {
    (
        n.len() - n.trim_start_matches('_').len(),
        n.len(),
        n.to_string(),
    )
}

/// True when `pattern` names one symbol exactly (no glob characters, not a regex).
pub fn is_literal(pattern: &str, regex: bool) -> bool {
    !regex && !pattern.contains(['*', '?', '[', '{', '\\'])
}

/// The row name of IFUNC names sharing an implementation: the matched ones first, without `__x` where `x` is
/// also there (`mempcpy`, not `mempcpy/__mempcpy`), joined by `/` (`memcpy/memmove`, `strchr/index`).
pub fn row_name(names: &[String], matcher: &NameMatcher) -> String {
    let mut kept: Vec<&String> = names
        .iter()
        .filter(|n| {
            let bare = n.trim_start_matches('_');
            bare == n.as_str() || !names.iter().any(|m| m == bare)
        })
        .collect();
    kept.sort_by_key(|n| (!matcher.is_match(n), plainness(n)));
    kept.iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check the row name of names sharing an implementation: matched first, `__x` beside `x` dropped.
    #[test]
    fn row_names() {
        let m = NameMatcher::new("str*", false).unwrap();
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(row_name(&names(&["index", "strchr"]), &m), "strchr/index");
        let m = NameMatcher::new("memmove", false).unwrap();
        assert_eq!(
            row_name(&names(&["memcpy", "memmove"]), &m),
            "memmove/memcpy"
        );
        assert_eq!(row_name(&names(&["mempcpy", "__mempcpy"]), &m), "mempcpy");
        assert_eq!(
            row_name(&names(&["__memcpy_chk", "__memmove_chk"]), &m),
            "__memcpy_chk/__memmove_chk"
        );
        assert!(is_literal("strlen", false) && !is_literal("str*", false));
    }
}
