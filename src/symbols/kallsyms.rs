//! Kernel symbols from /proc/kallsyms.
use super::ranges::Ranges;
use std::sync::Arc;

/// How far past the very last kernel symbol an address may lie and still be attributed to it.
const LAST_SYMBOL_SPAN: u64 = 4096;

/// Kernel text symbols sorted by address, each bounded by the next symbol of any kind.
#[derive(Debug, Default)]
pub struct KernelSymbols {
    /// Text symbols with their ends.
    ranges: Ranges,
}

impl KernelSymbols {
    /// The text symbol containing `addr`, if any.
    pub fn lookup(&self, addr: u64) -> Option<&Arc<str>> {
        self.ranges.lookup(addr)
    }

    /// The number of text symbols.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// True when there are no symbols (for example kallsyms hides addresses).
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }
}

/// Parse the text of /proc/kallsyms (`ADDR TYPE NAME [\tMODULE]` lines).
///
/// Only text symbols (`t`, `T`, `w`, `W`) are kept, but every symbol bounds the one before it, so an address in
/// data after a function is not attributed to that function. When every address is zero (kallsyms hidden by
/// `kptr_restrict` for an unprivileged reader), the result is empty.
pub fn parse_kallsyms(data: &[u8]) -> KernelSymbols {
    // (addr, text name or None for a non-text symbol)
    let mut all: Vec<(u64, Option<&[u8]>)> = Vec::new();
    for line in data.split(|&b| b == b'\n') {
        let mut fields = line
            .split(|&b| b == b' ' || b == b'\t')
            .filter(|f| !f.is_empty());
        let (Some(addr), Some(kind), Some(name)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let Some(addr) = std::str::from_utf8(addr)
            .ok()
            .and_then(|a| u64::from_str_radix(a, 16).ok())
        else {
            continue;
        };
        let is_text = matches!(kind, b"t" | b"T" | b"w" | b"W");
        all.push((addr, is_text.then_some(name)));
    }
    if all.iter().all(|(addr, _)| *addr == 0) {
        return KernelSymbols::default();
    }
    all.sort_by_key(|(addr, _)| *addr);
    let mut entries: Vec<(u64, u64, Arc<str>)> = Vec::new();
    for (i, (addr, name)) in all.iter().enumerate() {
        let Some(name) = name else { continue };
        if entries.last().is_some_and(|e| e.0 == *addr) {
            continue; // An alias at the same address: keep the first name.
        }
        let end = all[i + 1..]
            .iter()
            .map(|(next, _)| *next)
            .find(|next| next > addr)
            .unwrap_or(addr.saturating_add(LAST_SYMBOL_SPAN));
        entries.push((
            *addr,
            end,
            Arc::from(String::from_utf8_lossy(name).as_ref()),
        ));
    }
    KernelSymbols {
        ranges: Ranges::new(entries),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_kallsyms;

    /// Check that text symbols are found by nearest-below lookup bounded by the next symbol of any kind.
    #[test]
    fn parses_and_looks_up() {
        let data = b"ffffffff81000000 T _stext\n\
ffffffff81000100 t helper\n\
ffffffff81000200 D some_data\n\
ffffffff81000300 T ksys_write\n\
ffffffffc0001000 t mod_fn\t[some_module]\n";
        let syms = parse_kallsyms(data);
        assert_eq!(syms.len(), 4);
        assert_eq!(
            syms.lookup(0xffffffff81000000).map(|s| &**s),
            Some("_stext")
        );
        assert_eq!(
            syms.lookup(0xffffffff810000ff).map(|s| &**s),
            Some("_stext")
        );
        assert_eq!(
            syms.lookup(0xffffffff81000150).map(|s| &**s),
            Some("helper")
        );
        assert_eq!(syms.lookup(0xffffffff81000250), None, "data is not text");
        assert_eq!(
            syms.lookup(0xffffffff81000310).map(|s| &**s),
            Some("ksys_write")
        );
        assert_eq!(
            syms.lookup(0xffffffffc0001010).map(|s| &**s),
            Some("mod_fn")
        );
        assert_eq!(
            syms.lookup(0xffffffffc0101010),
            None,
            "far past the last symbol"
        );
        assert_eq!(syms.lookup(0x1000), None, "below the first symbol");
    }

    /// Check that kallsyms with hidden (all-zero) addresses gives no symbols.
    #[test]
    fn hidden_addresses_give_nothing() {
        let data = b"0000000000000000 T _stext\n0000000000000000 T ksys_write\n";
        let syms = parse_kallsyms(data);
        assert!(syms.is_empty());
        assert_eq!(syms.lookup(0), None);
    }

    /// Check that malformed lines are skipped.
    #[test]
    fn skips_garbage() {
        let syms = parse_kallsyms(b"garbage\n\nzz T x\nffffffff81000000 T ok\n");
        assert_eq!(syms.len(), 1);
    }
}
