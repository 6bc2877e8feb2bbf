//! USDT argument specs (`sys/sdt.h` on x86-64: `SIZE@OPERAND`, the operand in AT&T syntax) and the tracefs
//! fetch expressions that read them.
//!
//! `SIZE` is the byte size, negative for signed values (`-4@%edx`); a spec without `SIZE@` (older sdt.h) is
//! an 8-byte unsigned value.

/// Where a USDT argument's value lives at the probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArgLocation {
    /// In a register, by its tracefs name (`ax`, `si`, `r8`…): whatever alias the spec used (`%eax`, `%r8d`).
    Reg(String),
    /// In memory at `offset` from a register (tracefs name): `-20(%rbp)`.
    Mem { offset: i64, base: String },
    /// A constant (`$5`).
    Const(i64),
    /// In memory of the probed file, `symbol(%rip)`: the value of tracefs's `@+OFFSET`, which the kernel adds
    /// to the runtime address of file offset 0 *as the probed code maps it*. It is the symbol's ELF address
    /// minus (probe ELF address - probe file offset): the file offset when data and code share their
    /// address-offset delta, not in general (a PIE's data segment lies 0x1000 past its file offset).
    FileOffset(u64),
    /// Not expressible as a tracefs fetch argument; says why.
    Unsupported(String),
}

/// One argument of a USDT probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsdtArg {
    /// Size in bytes: 1, 2, 4 or 8.
    pub size: u8,
    pub signed: bool,
    pub location: ArgLocation,
    /// The spec as the note has it (`-4@-20(%rbp)`).
    pub spec: String,
}

impl UsdtArg {
    /// The tracefs type of the value: `s32`, `u64`…
    fn type_name(&self) -> String {
        format!("{}{}", if self.signed { 's' } else { 'u' }, self.size * 8)
    }

    /// The tracefs fetch expression of the value (without `NAME=`): `%ax:s32`, `-20(%bp):s32`,
    /// `+112(%sp):u64`, `\5:s32`, `@+0x2010:u32`. Err says why the argument cannot be fetched.
    pub fn fetch(&self) -> Result<String, String> {
        let place = match &self.location {
            ArgLocation::Reg(r) => format!("%{r}"),
            ArgLocation::Mem { offset, base } => deref(*offset, &format!("%{base}")),
            ArgLocation::Const(v) => format!("\\{v}"),
            ArgLocation::FileOffset(o) => format!("@+{o:#x}"),
            ArgLocation::Unsupported(why) => return Err(self.unsupported(why)),
        };
        Ok(format!("{place}:{}", self.type_name()))
    }

    /// The fetch expression of the NUL-terminated string the argument points to: `+0(%ax):string`,
    /// `+0(-20(%bp)):string`. Err for constants, values smaller than a pointer and unsupported arguments.
    pub fn fetch_string(&self) -> Result<String, String> {
        let pointer = match &self.location {
            ArgLocation::Reg(r) => format!("%{r}"),
            ArgLocation::Mem { offset, base } => deref(*offset, &format!("%{base}")),
            ArgLocation::FileOffset(o) => format!("@+{o:#x}"),
            ArgLocation::Const(_) => {
                return Err(format!(
                    "USDT argument `{}` is a constant, not a pointer to a string",
                    self.spec
                ))
            }
            ArgLocation::Unsupported(why) => return Err(self.unsupported(why)),
        };
        if self.size != 8 {
            return Err(format!(
                "USDT argument `{}` is a {}-byte value, not a pointer to a string",
                self.spec, self.size
            ));
        }
        Ok(format!("+0({pointer}):string"))
    }

    fn unsupported(&self, why: &str) -> String {
        format!("USDT argument `{}` cannot be read: {why}", self.spec)
    }
}

/// `+OFF(INNER)` or `-OFF(INNER)`: tracefs memory dereference.
fn deref(offset: i64, inner: &str) -> String {
    let sign = if offset < 0 { '-' } else { '+' };
    format!("{sign}{}({inner})", offset.unsigned_abs())
}

/// Parse the argument string of a note (`8@%rax -4@%edx`). `symbol` gives the `@+` value of a symbol (see
/// [`ArgLocation::FileOffset`]), None when the file has no such symbol.
pub fn parse_args(text: &str, symbol: &mut dyn FnMut(&str) -> Option<u64>) -> Vec<UsdtArg> {
    text.split_ascii_whitespace()
        .map(|spec| parse_arg(spec, symbol))
        .collect()
}

/// Parse one x86-64 argument spec.
pub fn parse_arg(spec: &str, symbol: &mut dyn FnMut(&str) -> Option<u64>) -> UsdtArg {
    let (size, signed, operand) = match split_size(spec) {
        Ok(v) => v,
        Err(why) => {
            return UsdtArg {
                size: 8,
                signed: false,
                location: ArgLocation::Unsupported(why),
                spec: spec.to_string(),
            }
        }
    };
    let location = parse_operand(operand, symbol).unwrap_or_else(ArgLocation::Unsupported);
    UsdtArg {
        size,
        signed,
        location,
        spec: spec.to_string(),
    }
}

/// `-4@OPERAND` -> (4, signed, OPERAND). No `@`: 8 bytes, unsigned.
fn split_size(spec: &str) -> Result<(u8, bool, &str), String> {
    let Some((size, operand)) = spec.split_once('@') else {
        return Ok((8, false, spec));
    };
    if size.ends_with('f') {
        return Err("floating-point arguments are not supported".into());
    }
    let n: i32 = size
        .parse()
        .map_err(|_| format!("`{size}` is not an argument size"))?;
    match n.unsigned_abs() {
        1 | 2 | 4 | 8 => Ok((n.unsigned_abs() as u8, n < 0, operand)),
        other => Err(format!("{other}-byte arguments are not supported")),
    }
}

fn parse_operand(
    op: &str,
    symbol: &mut dyn FnMut(&str) -> Option<u64>,
) -> Result<ArgLocation, String> {
    if let Some(reg) = op.strip_prefix('%') {
        return register(reg).map(|r| ArgLocation::Reg(r.to_string()));
    }
    if let Some(imm) = op.strip_prefix('$') {
        return parse_int(imm)
            .map(ArgLocation::Const)
            .ok_or_else(|| format!("`{imm}` is not a constant the probe can store"));
    }
    let Some(open) = op.find('(') else {
        // An absolute memory operand (non-PIC code): a symbol, maybe with a displacement.
        return symbol_location(op, symbol);
    };
    let (disp, rest) = op.split_at(open);
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("`{op}` is not a memory operand"))?;
    if inner.contains(',') {
        return Err("indexed addressing is not supported by tracefs fetch arguments".into());
    }
    let base = inner
        .strip_prefix('%')
        .ok_or_else(|| format!("`{inner}` is not a register"))?;
    if base == "rip" {
        return symbol_location(disp, symbol);
    }
    let base = register(base)?;
    let offset = if disp.is_empty() {
        0
    } else {
        parse_int(disp).ok_or_else(|| {
            format!("`{disp}` is a symbol-relative displacement from a register other than %rip")
        })?
    };
    Ok(ArgLocation::Mem {
        offset,
        base: base.to_string(),
    })
}

/// `sym`, `sym+8`, `sym-8` -> `@+` of the symbol plus the displacement.
fn symbol_location(
    text: &str,
    symbol: &mut dyn FnMut(&str) -> Option<u64>,
) -> Result<ArgLocation, String> {
    let split = text[1.min(text.len())..]
        .find(['+', '-'])
        .map(|i| i + 1)
        .unwrap_or(text.len());
    let (name, disp) = text.split_at(split);
    if name.is_empty() || parse_int(name).is_some() {
        return Err(format!(
            "`{text}` is an address without a symbol, which a probe cannot place in the process"
        ));
    }
    let disp = if disp.is_empty() {
        0
    } else {
        parse_int(disp).ok_or_else(|| format!("`{disp}` is not a displacement"))?
    };
    let addr = symbol(name).ok_or_else(|| {
        format!("symbol `{name}` is not in the file's symbol tables (is the file stripped?)")
    })?;
    addr.checked_add_signed(disp)
        .map(ArgLocation::FileOffset)
        .ok_or_else(|| format!("`{text}` lies before the probed file's start"))
}

/// A decimal or `0x` hexadecimal integer, with an optional sign.
fn parse_int(text: &str) -> Option<i64> {
    let (negative, digits) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let magnitude = match digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        Some(hex) => u64::from_str_radix(hex, 16).ok()?,
        None => digits.parse::<u64>().ok()?,
    };
    if negative {
        0i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    }
}

/// The tracefs name of an x86-64 general-purpose register, by any of its 64/32/16/8-bit names.
pub fn register(name: &str) -> Result<&'static str, String> {
    const LEGACY: [(&str, [&str; 4]); 8] = [
        ("ax", ["rax", "eax", "ax", "al"]),
        ("bx", ["rbx", "ebx", "bx", "bl"]),
        ("cx", ["rcx", "ecx", "cx", "cl"]),
        ("dx", ["rdx", "edx", "dx", "dl"]),
        ("si", ["rsi", "esi", "si", "sil"]),
        ("di", ["rdi", "edi", "di", "dil"]),
        ("bp", ["rbp", "ebp", "bp", "bpl"]),
        ("sp", ["rsp", "esp", "sp", "spl"]),
    ];
    const NUMBERED: [&str; 8] = ["r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15"];
    if let Some((tracefs, _)) = LEGACY.iter().find(|(_, names)| names.contains(&name)) {
        return Ok(tracefs);
    }
    if let Some(n) = NUMBERED.iter().find(|n| {
        name.strip_prefix(**n)
            .is_some_and(|suffix| ["", "d", "w", "b", "l"].contains(&suffix))
    }) {
        return Ok(n);
    }
    if matches!(name, "ah" | "bh" | "ch" | "dh") {
        return Err(format!(
            "%{name} (bits 8-15 of a register) cannot be fetched by tracefs"
        ));
    }
    if name == "rip" {
        return Ok("ip");
    }
    if name.starts_with("xmm") || name.starts_with("ymm") || name.starts_with("st") {
        return Err(format!(
            "%{name} is a floating-point or vector register, which tracefs cannot fetch"
        ));
    }
    Err(format!("%{name} is not an x86-64 general-purpose register"))
}
