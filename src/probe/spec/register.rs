//! Fetch items that read a register (`%ip`, `%sp:x64`, `%ax@ret`): perf probe's spelling, checked against the
//! kernel's x86-64 register names; and the registers a software event's samples carry for them.
//!
//! Where a register is read: at a uprobe, kprobe or USDT probe, where it fires (`%ip`: the probed address); with
//! `@ret`, at the function's return (`%ip@ret`: the return address, `%ax@ret`: the return value); at a
//! `profile:`/`software:` event, in the context it interrupted (kernel or user), from the sample.
use super::fetch::{Fetch, FetchItem, FetchSource};
use crate::probe::value::{FieldLoc, Value, ValueKind};

/// The registers a fetch item `%NAME` reads (perf probe's spelling), as the kernel's x86-64 fetch arguments
/// name them (`regoffset_table`): at a uprobe `%ip` is the probed address, at a uretprobe the return address.
pub const REGISTERS: [&str; 21] = [
    "ax", "bx", "cx", "dx", "si", "di", "bp", "sp", "r8", "r9", "r10", "r11", "r12", "r13", "r14",
    "r15", "ip", "flags", "cs", "ss", "orig_ax",
];

/// The suffix of a register read at the function's return (`%ax@ret`).
pub const AT_RETURN: &str = "@ret";

/// Check a `%NAME` item (`name` with its `%`): a register the kernel knows, and not an array.
pub fn check_item(name: &str, array: Option<u16>) -> Result<(), String> {
    let reg = name
        .strip_prefix('%')
        .map(|r| r.strip_suffix(AT_RETURN).unwrap_or(r));
    let known = reg.is_some_and(|r| REGISTERS.contains(&r));
    if !known || array.is_some() {
        return Err(format!(
            "`{name}` is no x86-64 register (use %ip, %sp, %ax... as perf probe names them, `%ax@ret` at the \
             return)"
        ));
    }
    Ok(())
}

impl FetchItem {
    /// `%NAME`'s register (`ip`), without `@ret`.
    pub fn register(&self) -> Option<&str> {
        let reg = self.name.strip_prefix('%')?;
        Some(reg.strip_suffix(AT_RETURN).unwrap_or(reg))
    }

    /// `%NAME@ret`: the register at the function's return.
    pub fn register_at_return(&self) -> bool {
        self.register().is_some() && self.name.ends_with(AT_RETURN)
    }
}

/// The index of a register in a sample's registers (`PERF_REG_X86_*`, arch/x86/include/uapi/asm/perf_regs.h);
/// None for `orig_ax`, which samples do not carry.
pub fn perf_index(reg: &str) -> Option<u8> {
    const PERF: [&str; 24] = [
        "ax", "bx", "cx", "dx", "si", "di", "bp", "sp", "ip", "flags", "cs", "ss", "ds", "es",
        "fs", "gs", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15",
    ];
    PERF.iter().position(|r| *r == reg).map(|i| i as u8)
}

/// How many registers one software event's samples carry for its fetches.
pub const MAX_SAMPLED: usize = 8;

/// The registers a software event's samples carry (PERF_SAMPLE_REGS_INTR) for its target's fetches: the fetch's
/// index, its register's perf index, and its kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampledRegs {
    regs: [Option<(u8, u8, ValueKind)>; MAX_SAMPLED],
}

impl SampledRegs {
    /// The sampled registers of `fetches` ([`FetchSource::Register`]; at most [`MAX_SAMPLED`], which the spec
    /// checks).
    pub fn of(fetches: &[Fetch]) -> SampledRegs {
        let mut out = SampledRegs::default();
        let sampled = fetches
            .iter()
            .enumerate()
            .filter(|(_, f)| f.source == FetchSource::Register)
            .filter_map(|(i, f)| Some((i as u8, perf_index(f.expr.strip_prefix('%')?)?, f.kind)));
        for (slot, r) in out.regs.iter_mut().zip(sampled) {
            *slot = Some(r);
        }
        out
    }

    /// The `sample_regs_intr` mask (0: none).
    pub fn mask(&self) -> u64 {
        self.regs
            .iter()
            .flatten()
            .fold(0, |m, (_, r, _)| m | 1 << r)
    }

    /// The fetches' values from a sample's registers (`get`: a register by its perf index).
    pub fn values(&self, get: impl Fn(u64) -> Option<u64>) -> Vec<(usize, Value)> {
        self.regs
            .iter()
            .flatten()
            .filter_map(|&(i, r, kind)| {
                let bytes = get(u64::from(r))?.to_le_bytes();
                let loc = FieldLoc {
                    offset: 0,
                    kind,
                    len: None,
                    names: None,
                };
                Some((usize::from(i), loc.read(&bytes)?))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::fetch::tests::item;
    use super::super::fetch::{split_spec, Fetch, FetchType};
    use super::*;

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
        for bad in ["%xyz", "%fs_base", "%ip:str[2]", "%", "%ip@", "%ip@entry"] {
            assert!(FetchItem::parse(bad).is_err(), "{bad}");
        }
        let at_ret = FetchItem::parse("%ax@ret:s32").unwrap();
        assert_eq!(
            (at_ret.register(), at_ret.register_at_return()),
            (Some("ax"), true)
        );
        assert!(!FetchItem::parse("%ax").unwrap().register_at_return());
        let f = Fetch::new("%ip", "v0".into(), "%ip", FetchType::Hex { size: 8 }, false);
        assert_eq!(f.arg(), "v0=%ip:x64");
    }

    /// Check that a software event samples the perf registers its fetches name, and reads them back by kind.
    #[test]
    fn sampled_registers() {
        let u64t = FetchType::Int {
            size: 8,
            signed: false,
        };
        let fetches = [
            Fetch::sampled_register("%ip", "v0".into(), "ip", u64t),
            Fetch::sampled_register(
                "%r8",
                "v1".into(),
                "r8",
                FetchType::Int {
                    size: 4,
                    signed: true,
                },
            ),
        ];
        let regs = SampledRegs::of(&fetches);
        assert_eq!(regs.mask(), 1 << 8 | 1 << 16);
        let values = regs.values(|r| match r {
            8 => Some(0x40_1000),
            16 => Some(u64::MAX),
            _ => None,
        });
        assert_eq!(
            values,
            vec![(0, Value::UInt(0x40_1000)), (1, Value::Int(-1))]
        );
        assert_eq!((perf_index("orig_ax"), perf_index("sp")), (None, Some(7)));
    }
}
