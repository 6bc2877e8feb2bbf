//! What the user should do about what a run measured: text for the terminal, kept out of the library.
use rprof::unwind::dwarf::DwarfStats;

/// One line on how DWARF unwinds ended, with advice when many were truncated or failed.
pub fn dwarf_summary(s: &DwarfStats) -> String {
    let pct = |n: u64| n as f64 * 100.0 / s.unwound.max(1) as f64;
    let mut line = format!(
        "DWARF-unwound {} user stacks: {:.1}% truncated at the {}-byte stack copy, {:.1}% stopped at a frame \
         without unwind info",
        s.unwound,
        pct(s.truncated),
        s.copy_size,
        pct(s.failed)
    );
    if s.truncated * 20 > s.unwound {
        if s.copy_size < u64::from(super::parse::MAX_STACK_COPY) {
            line.push_str("; record with --call-graph dwarf,65528 for deeper stacks");
        } else {
            line.push_str(
                "; 65528 bytes is the kernel's largest copy: use -g on a build with frame pointers",
            );
        }
    }
    if s.failed * 20 > s.unwound {
        line.push_str(
            "; install debug symbols (.debug_frame) or build with -fasynchronous-unwind-tables",
        );
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advice_follows_the_numbers() {
        let deep = DwarfStats {
            unwound: 100,
            truncated: 30,
            failed: 0,
            copy_size: 8192,
        };
        let line = dwarf_summary(&deep);
        assert!(line.starts_with("DWARF-unwound 100 user stacks: 30.0% truncated at the 8192-byte"));
        assert!(line.contains("--call-graph dwarf,65528"), "{line}");
        let fine = DwarfStats {
            unwound: 100,
            truncated: 1,
            failed: 1,
            copy_size: 16384,
        };
        assert!(!dwarf_summary(&fine).contains(';'));
    }
}
