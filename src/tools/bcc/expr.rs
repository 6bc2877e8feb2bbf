//! bcc's C expressions (trace's values and filters, argdist's expressions) as the names `rprof probe` fetches:
//! 1-based `arg1` as `arg0`, a signature's parameter names as their positions, `retval` as `ret`,
//! `args->field` of a tracepoint as `field`, members of a few structs the ABI fixes as offsets.

/// A parameter of a C signature (`struct timespec *req`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Param {
    pub name: String,
    pub ctype: String,
}

/// What names mean in an expression: the signature's parameters, and whether `arg1..arg6` are bcc's 1-based
/// aliases (trace's; argdist has none).
#[derive(Clone, Debug, Default)]
pub struct Names {
    pub params: Vec<Param>,
    pub one_based_args: bool,
}

/// Members of structs whose layout the x86-64 ABI fixes (so no DWARF or BTF is needed): (struct, member,
/// offset, type).
const KNOWN_MEMBERS: &[(&str, &str, u32, &str)] = &[
    ("timespec", "tv_sec", 0, "s64"),
    ("timespec", "tv_nsec", 8, "s64"),
    ("timeval", "tv_sec", 0, "s64"),
    ("timeval", "tv_usec", 8, "s64"),
];

/// Parse a C signature's parameter list (`struct sock *sk, size_t size`); `void` or nothing is no parameter.
pub fn signature(sig: &str) -> Result<Vec<Param>, String> {
    let sig = sig.trim();
    if sig.is_empty() || sig == "void" {
        return Ok(Vec::new());
    }
    sig.split(',')
        .map(|p| {
            let p = p.trim();
            let at = p
                .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(0, |i| i + 1);
            let (ctype, name) = p.split_at(at);
            match name.is_empty() || ctype.trim().is_empty() {
                true => Err(format!("`{p}` in the signature is not `TYPE NAME`")),
                false => Ok(Param {
                    name: name.to_string(),
                    ctype: ctype.trim().to_string(),
                }),
            }
        })
        .collect()
}

impl Names {
    /// The position of parameter or alias `name` (0-based), if it is one.
    fn position(&self, name: &str) -> Option<usize> {
        if let Some(i) = self.params.iter().position(|p| p.name == name) {
            return Some(i);
        }
        let n: usize = name.strip_prefix("arg")?.parse().ok()?;
        match self.one_based_args {
            true => (1..=6).contains(&n).then(|| n - 1),
            false => None,
        }
    }

    /// One value: `arg2`, `req->tv_sec`, `retval`, `args->filename`, `$pid`, as a name `rprof probe` fetches
    /// (`arg1`, `arg0->0`, `ret`, `filename`, `tid`), with the type the ABI gives a known member.
    pub fn value(&self, expr: &str) -> Result<(String, Option<&'static str>), String> {
        let e: String = expr.chars().filter(|c| !c.is_whitespace()).collect();
        match e.as_str() {
            "retval" | "$retval" => return Ok(("ret".into(), None)),
            "$pid" => return Ok(("tid".into(), None)),
            "$tgid" => return Ok(("pid".into(), None)),
            "$cpu" => return Ok(("cpu".into(), None)),
            _ => {}
        }
        let mut steps = e.split("->");
        let head = steps.next().unwrap_or_default();
        let rest: Vec<&str> = steps.collect();
        let plain =
            |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !plain(head) || !rest.iter().all(|s| plain(s)) {
            return Err(format!(
                "`{expr}`: rprof fetches arguments, return values and members (`arg1`, `req->tv_sec`), it does \
                 not compute C expressions"
            ));
        }
        if head == "args" && rest.len() == 1 {
            return Ok((rest[0].to_string(), None));
        }
        let Some(i) = self.position(head) else {
            return Err(format!(
                "`{expr}`: `{head}` is no parameter of the signature{}",
                if self.one_based_args {
                    " nor arg1..arg6"
                } else {
                    ""
                }
            ));
        };
        let struct_name = self.params.get(i).and_then(|p| pointed_struct(&p.ctype));
        match (rest.as_slice(), struct_name) {
            ([], _) => Ok((format!("arg{i}"), None)),
            ([member], Some(s)) => {
                match KNOWN_MEMBERS.iter().find(|k| k.0 == s && k.1 == *member) {
                    Some(&(_, _, off, ty)) => Ok((format!("arg{i}->{off}"), Some(ty))),
                    None => Ok((format!("arg{i}->{member}"), None)),
                }
            }
            _ => Ok((format!("arg{i}->{}", rest.join("->")), None)),
        }
    }

    /// A filter (`(arg2 > 100 && STRCMP("bash", arg1))`) in the probe's filter syntax, with the values it reads
    /// as strings (`STRCMP`'s).
    pub fn filter(&self, expr: &str) -> Result<(String, Vec<String>), String> {
        let strcmp = regex::Regex::new(r#"STRCMP\(\s*"([^"]*)"\s*,\s*([A-Za-z0-9_$>-]+)\s*\)"#)
            .map_err(|e| e.to_string())?;
        let mut strings = Vec::new();
        let mut err = None;
        let text = strcmp.replace_all(expr, |c: &regex::Captures| match self.value(&c[2]) {
            Ok((name, _)) => {
                strings.push(name.clone());
                format!("{name} == \"{}\"", &c[1])
            }
            Err(e) => {
                err = Some(e);
                String::new()
            }
        });
        let operand =
            regex::Regex::new(r#"("[^"]*")|(\$?[A-Za-z_][A-Za-z0-9_]*(?:->[A-Za-z0-9_]+)*)"#)
                .map_err(|e| e.to_string())?;
        let text = operand.replace_all(&text, |c: &regex::Captures| {
            if c.get(1).is_some() || strings.iter().any(|s| s == &c[0]) {
                return c[0].to_string();
            }
            match self.value(&c[0]) {
                Ok((name, _)) => name,
                Err(e) => {
                    err.get_or_insert(e);
                    c[0].to_string()
                }
            }
        });
        match err {
            Some(e) => Err(e),
            None => Ok((text.trim().to_string(), strings)),
        }
    }
}

/// `S` of a `struct S *` type.
fn pointed_struct(ctype: &str) -> Option<&str> {
    let t = ctype.trim().strip_prefix("const ").unwrap_or(ctype.trim());
    let t = t.strip_prefix("struct ")?.trim().strip_suffix('*')?.trim();
    Some(t)
}

/// The probe's type for a C type of argdist (`int`, `u32`, `size_t`, `char*`).
pub fn c_type(t: &str) -> Result<&'static str, String> {
    let t: String = t.split_whitespace().collect::<Vec<_>>().join(" ");
    Ok(match t.as_str() {
        "char*" | "char *" | "const char*" | "const char *" => "str",
        "int" | "s32" | "pid_t" | "int32_t" => "s32",
        "u32" | "unsigned" | "unsigned int" | "uint32_t" => "u32",
        "u64" | "unsigned long" | "size_t" | "unsigned long long" | "uint64_t" => "u64",
        "s64" | "long" | "ssize_t" | "long long" | "int64_t" | "off_t" => "s64",
        "u16" | "unsigned short" | "uint16_t" => "u16",
        "s16" | "short" | "int16_t" => "s16",
        "u8" | "unsigned char" | "uint8_t" => "u8",
        "s8" | "char" | "int8_t" => "s8",
        other => {
            return Err(format!(
                "type `{other}`: rprof takes integer types and char*"
            ))
        }
    })
}

/// The probe's type for a printf conversion of bcc's trace (`d` int, `lu` unsigned long, `x` hex, `s` string).
pub fn printf_type(conv: &str) -> Result<&'static str, String> {
    Ok(match conv {
        "d" => "s32",
        "u" => "u32",
        "hd" => "s16",
        "hu" => "u16",
        "ld" | "lld" => "s64",
        "lu" | "llu" => "u64",
        "x" => "x32",
        "lx" | "llx" => "x64",
        "s" => "str",
        "c" => "u8",
        other => {
            return Err(format!(
                "`%{other}` is not supported (rprof prints integers, hex and strings; not %K/%U symbols)"
            ))
        }
    })
}
