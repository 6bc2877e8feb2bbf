//! Values through pointers, read in the kernel by the uprobe's fetch arguments (no syscall per event):
//! `arg0->8` (the 8 bytes at arg0+8), `req->len` and `req->name:str` (struct members by name, offsets from
//! DWARF), `argv:str[4]` (4 strings of a `char **`), `sp+8:str[4]` (the `char *` array at the stack pointer +
//! 8, as at a program's entry). Each step of `->` is one dereference, `+N` moves the address without one.
use super::fetch::{Fetch, FetchItem, FetchType, TextLayout};
use crate::symbols::params::{member_path_in, MemberPath, ParamType, Text};
use crate::symbols::DebugSources;

/// One step of a value path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step<'a> {
    /// `+N`: the address moves by N bytes.
    Add(u64),
    /// `->N`: the 8-byte value at the address + N (or, last, the value of the item's type there).
    Deref(u64),
    /// `->name`: a struct member through the pointer, by its DWARF name.
    Member(&'a str),
}

/// A value as written: a base (`argN`, a parameter, `sp`) and steps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValuePath<'a> {
    pub base: &'a str,
    pub steps: Vec<Step<'a>>,
}

fn number(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

impl<'a> ValuePath<'a> {
    /// Parse `base(->N|->member|+N)*`.
    pub fn parse(text: &'a str) -> Result<ValuePath<'a>, String> {
        let text = text.trim();
        let end = text.find(['-', '+']).unwrap_or(text.len());
        let (base, mut rest) = (text[..end].trim(), &text[end..]);
        let mut steps = Vec::new();
        while !rest.is_empty() {
            let (deref, tail) = if let Some(t) = rest.strip_prefix("->") {
                (true, t)
            } else if let Some(t) = rest.strip_prefix('+') {
                (false, t)
            } else {
                return Err(format!("`{text}`: expected `->` or `+` at `{rest}`"));
            };
            let end = tail.find(['-', '+']).unwrap_or(tail.len());
            let word = tail[..end].trim();
            rest = &tail[end..];
            let step = match (number(word), deref) {
                (Some(n), true) => Step::Deref(n),
                (Some(n), false) => Step::Add(n),
                (None, true)
                    if !word.is_empty()
                        && word.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
                {
                    Step::Member(word)
                }
                _ => {
                    return Err(format!(
                        "`{text}`: `{word}` is not an offset (8, 0x10) or a member name"
                    ))
                }
            };
            steps.push(step);
        }
        Ok(ValuePath { base, steps })
    }

    /// True when the value is read through memory or is the stack pointer (not a plain register or name).
    pub fn is_path(&self) -> bool {
        !self.steps.is_empty() || self.base == "sp"
    }
}

/// A fetch expression being built: `expr` holds an address, `pending` bytes still to add to it.
struct Addr {
    expr: String,
    pending: u64,
}

impl Addr {
    /// The 8-byte value at the address + `n`.
    fn deref(&mut self, n: u64) {
        self.expr = format!("+{}({})", self.pending + n, self.expr);
        self.pending = 0;
    }
}

/// The fetches of `item` (a path, or a `:str[N]` array) on a uprobe whose base register is `reg` (None for
/// `sp`): one fetch, or N for `str[N]` (labelled `NAME[i]`). `members` resolves DWARF member names.
pub fn path_fetches(
    item: &FetchItem,
    reg: &str,
    members: impl FnOnce(&[&str]) -> Result<MemberPath, String>,
    mut field: impl FnMut() -> String,
) -> Result<Vec<Fetch>, String> {
    let path = item.path();
    let mut at = Addr {
        expr: reg.to_string(),
        pending: 0,
    };
    let names: Vec<&str> = path
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::Member(m) => Some(*m),
            _ => None,
        })
        .collect();
    let mut ty = item.ty;
    if !names.is_empty() {
        if names.len() != path.steps.len() {
            return Err(format!(
                "`{}`: member names and numeric offsets cannot be mixed",
                item.name
            ));
        }
        ty = member_path(item, &names, members, &mut at, ty)?;
    } else {
        let last = path.steps.len().saturating_sub(1);
        for (i, s) in path.steps.iter().enumerate() {
            match s {
                Step::Add(n) => at.pending += n,
                // The last `->N` is the value read as the item's type.
                Step::Deref(n) if i == last => at.pending += n,
                Step::Deref(n) => at.deref(*n),
                Step::Member(_) => unreachable!(),
            }
        }
        let ends_deref = matches!(path.steps.last(), Some(Step::Deref(_)));
        if ends_deref {
            at.deref(0);
        }
    }
    if let Some(n) = item.array {
        // N pointers to strings from the address (`sp+8`) or the pointer value (`argv`).
        let base = at.expr.clone();
        let start = at.pending;
        return Ok((0..n as u64)
            .map(|i| {
                let elem = format!("+{}({base})", start + 8 * i);
                Fetch::text(
                    &format!("{}[{i}]", item.name),
                    field(),
                    &elem,
                    &TextLayout::Chars,
                    false,
                )
            })
            .collect());
    }
    let ty = ty.unwrap_or(FetchType::Int {
        size: 8,
        signed: true,
    });
    if at.pending > 0 {
        if ty != FetchType::Str {
            return Err(format!(
                "`{}` is an address: read what is there with `->{}` (or `:str` for text held there)",
                item.name, at.pending
            ));
        }
        // Text held at the address (a `char name[16]` member).
        let expr = format!("+{}({}):string", at.pending, at.expr);
        let mut f = Fetch::new(&item.name, field(), &at.expr, FetchType::Str, false);
        f.expr = expr;
        return Ok(vec![f]);
    }
    Ok(vec![Fetch::new(&item.name, field(), &at.expr, ty, false)])
}

/// The address of a member path (`req->next->id`) from DWARF's offsets, put into `at`, and the type it is read
/// as: `ty` if given, else the member's own.
fn member_path(
    item: &FetchItem,
    names: &[&str],
    members: impl FnOnce(&[&str]) -> Result<MemberPath, String>,
    at: &mut Addr,
    mut ty: Option<FetchType>,
) -> Result<Option<FetchType>, String> {
    let found = members(names)?;
    let (last, inner) = found.offsets.split_last().expect("one member at least");
    for o in inner {
        at.deref(*o);
    }
    at.pending = *last;
    let inline_text = found.inline_chars;
    if ty == Some(FetchType::Str) && !inline_text && found.text != Some(Text::Chars) {
        return Err(format!(
            "`{}` is {}, not a char pointer or char array: it cannot be read as a string",
            item.name, found.type_name
        ));
    }
    if !inline_text {
        // The member's own value.
        at.deref(0);
    }
    ty = ty.or(match found.ty {
        ParamType::Int { size, signed } => Some(FetchType::Int { size, signed }),
        ParamType::Pointer { .. } => Some(FetchType::Hex { size: 8 }),
        _ if inline_text => Some(FetchType::Str),
        _ => None,
    });
    if ty.is_none() && item.array.is_none() {
        return Err(format!(
            "`{}` is {}: give it a type (`:u64`, `:str`)",
            item.name, found.type_name
        ));
    }
    Ok(ty)
}

/// [`path_fetches`] for a function of `binary` at `addr`, the base resolved by `base_reg`.
pub fn user_path_fetches(
    binary: &std::path::Path,
    addr: u64,
    func: &str,
    item: &FetchItem,
    reg: &str,
    debug: &DebugSources,
    field: impl FnMut() -> String,
) -> Result<Vec<Fetch>, String> {
    let base = item.path().base.to_string();
    let members = |names: &[&str]| {
        member_path_in(binary, addr, &base, names, debug)
            .map_err(|e| format!("cannot read the types of {func}: {e}"))?
            .ok_or_else(|| format!("`{}`: no DWARF types for `{base}` of {func}; build with -g, or use offsets (`{base}->8`)", item.name))?
    };
    path_fetches(item, reg, members, field)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exprs(text: &str, members: Option<MemberPath>) -> Vec<String> {
        let item = FetchItem::parse(text).unwrap();
        let mut n = 0;
        path_fetches(
            &item,
            "%di",
            |_| members.ok_or_else(|| "no".to_string()),
            || {
                n += 1;
                format!("v{n}")
            },
        )
        .unwrap()
        .iter()
        .map(|f| f.expr.clone())
        .collect()
    }

    /// Check the fetch arguments of paths: offsets, dereferences, arrays of strings, members.
    #[test]
    fn path_expressions() {
        assert_eq!(exprs("arg0->8:u64", None), ["+8(%di):u64"]);
        assert_eq!(exprs("arg0->8->0:str", None), ["+0(+0(+8(%di))):string"]);
        assert_eq!(exprs("arg0+16:str", None), ["+16(%di):string"]);
        assert_eq!(
            exprs("argv:str[2]", None),
            ["+0(+0(%di)):string", "+0(+8(%di)):string"]
        );
        assert_eq!(
            exprs("sp+8:str[2]", None),
            ["+0(+8(%di)):string", "+0(+16(%di)):string"]
        );
        let member = |offsets: Vec<u64>, ty, text, inline_chars| MemberPath {
            offsets,
            ty,
            text,
            inline_chars,
            type_name: "t".into(),
        };
        let int = ParamType::Int {
            size: 4,
            signed: false,
        };
        assert_eq!(
            exprs("req->len", Some(member(vec![8], int, None, false))),
            ["+8(%di):u32"]
        );
        let ptr = ParamType::Pointer { to_char: true };
        assert_eq!(
            exprs(
                "req->next->name:str",
                Some(member(vec![16, 0], ptr, Some(Text::Chars), false))
            ),
            ["+0(+0(+16(%di))):string"]
        );
        let arr = ParamType::Aggregate { size: 16 };
        assert_eq!(
            exprs("req->tag:str", Some(member(vec![24], arr, None, true))),
            ["+24(%di):string"]
        );
        assert!(ValuePath::parse("a->-").is_err());
    }
}
