//! Fetch items that read a register (`%ip`, `%sp:x64`): perf probe's spelling, checked against the kernel's
//! x86-64 register names.
use super::fetch::FetchItem;

/// The registers a fetch item `%NAME` reads (perf probe's spelling), as the kernel's x86-64 fetch arguments
/// name them (`regoffset_table`): at a uprobe `%ip` is the probed address, at a uretprobe the return address.
pub const REGISTERS: [&str; 21] = [
    "ax", "bx", "cx", "dx", "si", "di", "bp", "sp", "r8", "r9", "r10", "r11", "r12", "r13", "r14",
    "r15", "ip", "flags", "cs", "ss", "orig_ax",
];

/// Check a `%NAME` item (`name` with its `%`): a register the kernel knows, and not an array.
pub fn check_item(name: &str, array: Option<u16>) -> Result<(), String> {
    let known = name.strip_prefix('%').is_some_and(|r| REGISTERS.contains(&r));
    if !known || array.is_some() {
        return Err(format!(
            "`{name}` is no x86-64 register (use %ip, %sp, %ax... as perf probe names them)"
        ));
    }
    Ok(())
}

impl FetchItem {
    /// `%NAME`'s register (`ip`).
    pub fn register(&self) -> Option<&str> {
        self.name.strip_prefix('%')
    }
}

#[cfg(test)]
mod tests {
    use super::super::fetch::{split_spec, Fetch, FetchType};
    use super::*;

    fn item(name: &str, ty: Option<FetchType>) -> FetchItem {
        FetchItem {
            name: name.into(),
            ty,
            array: None,
        }
    }

    /// Check that `%REG` items name the kernel's x86-64 registers (perf probe's spelling) and nothing else,
    /// and fetch them as tracefs writes them.
    #[test]
    fn register_items() {
        let s = split_spec("apply(%ip, %sp:x64)").unwrap();
        assert_eq!(
            s.items,
            vec![
                item("%ip", None),
                item("%sp", Some(FetchType::Hex { size: 8 }))
            ]
        );
        assert_eq!(s.items[0].register(), Some("ip"));
        assert_eq!(
            split_spec("apply %ip").unwrap().items,
            vec![item("%ip", None)]
        );
        for bad in ["%xyz", "%fs_base", "%ip:str[2]", "%"] {
            assert!(FetchItem::parse(bad).is_err(), "{bad}");
        }
        let f = Fetch::new("%ip", "v0".into(), "%ip", FetchType::Hex { size: 8 }, false);
        assert_eq!(f.arg(), "v0=%ip:x64");
    }
}
