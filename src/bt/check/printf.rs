//! printf's format checks (bpftrace 0.17's `validate_format_string`): as many arguments as conversions, and
//! each argument of the kind its conversion prints.
use crate::bt::types::Ty;
use regex::Regex;
use std::sync::OnceLock;

/// The conversions printf takes and the kind of value each prints (`printf_format_types`): `%s`, `%r`
/// buffers, `%c`, and the integer conversions with C's length modifiers.
fn conversion_kind(conv: &str) -> Option<&'static str> {
    match conv {
        "s" => Some("string"),
        "r" | "rx" | "rh" => Some("buffer"),
        "c" => Some("integer"),
        _ => {
            let spec = conv.chars().last()?;
            let length = &conv[..conv.len() - 1];
            let ok = "duoxXp".contains(spec)
                && ["", "hh", "h", "l", "ll", "j", "z", "t"].contains(&length);
            ok.then_some("integer")
        }
    }
}

/// bpftrace's conversion pattern: `%`, an optional `-`, a width, a precision, then a conversion (longest
/// first, where bpftrace's alternation order is that of a hash map).
fn pattern() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        let mut convs = vec!["s", "rx", "rh", "r", "c"]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>();
        for length in ["hh", "ll", "h", "l", "j", "z", "t", ""] {
            for spec in ["d", "u", "o", "x", "X", "p"] {
                convs.push(format!("{length}{spec}"));
            }
        }
        Regex::new(&format!(r"%-?[0-9]*(\.[0-9]+)?({})", convs.join("|")))
            .expect("the pattern is valid")
    })
}

/// Check `fmt` against the argument types `args` of `func` (printf, system, cat, debugf).
pub(super) fn validate(fmt: &str, args: &[Ty], func: &str) -> Result<(), String> {
    let convs: Vec<&str> = pattern()
        .captures_iter(fmt)
        .map(|c| c.get(2).map_or("", |m| m.as_str()))
        .collect();
    let (given, wanted) = (args.len(), convs.len());
    if given < wanted {
        return Err(format!(
            "{func}: Not enough arguments for format string ({given} supplied, {wanted} expected)"
        ));
    }
    if given > wanted {
        return Err(format!(
            "{func}: Too many arguments for format string ({given} supplied, {wanted} expected)"
        ));
    }
    if func == "debugf" && given > 3 {
        return Err(format!(
            "{func}: Cannot use more than 3 conversion specifiers"
        ));
    }
    for (ty, conv) in args.iter().zip(convs) {
        let Some(want) = conversion_kind(conv) else {
            return Err(format!("{func}: Unknown format string token: %{conv}"));
        };
        let got = ty.printf_kind();
        if *ty != Ty::None && got != want {
            return Err(format!(
                "{func}: %{conv} specifier expects a value of type {want} ({got} supplied)"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check counts and kinds with bpftrace's messages.
    #[test]
    fn formats() {
        assert_eq!(
            validate("%d\n", &[Ty::Str(2)], "printf"),
            Err("printf: %d specifier expects a value of type integer (string supplied)".into())
        );
        assert_eq!(
            validate("%s %d\n", &[Ty::Str(16)], "printf"),
            Err("printf: Not enough arguments for format string (1 supplied, 2 expected)".into())
        );
        assert_eq!(
            validate(
                "%-16s %6llu %5.2d %s\n",
                &[Ty::Str(16), Ty::UINT64, Ty::INT64, Ty::KSym],
                "printf"
            ),
            Ok(())
        );
        assert!(validate("%d", &[Ty::INT64, Ty::INT64], "printf")
            .unwrap_err()
            .contains("Too many"));
    }
}
