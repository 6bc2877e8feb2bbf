//! bcc's probe specifiers (`[p|r|t|u]:[lib]:func`, and funccount's `func`, `lib:func`) as `rprof probe`
//! patterns.

/// What a bcc probe specifier names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    /// A kernel function (a kprobe: not on kernels without CONFIG_KPROBE_EVENTS).
    Kernel(String),
    /// A function of a library (`c`) or binary (a path).
    User {
        lib: String,
        func: String,
    },
    Tracepoint {
        category: String,
        event: String,
    },
    /// A USDT probe of a library or binary; bcc's provider is optional.
    Usdt {
        lib: String,
        provider: Option<String>,
        name: String,
    },
}

/// A probe specifier: its kind (`p` entry, `r` return, `t` tracepoint, `u` USDT) and place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    pub kind: char,
    pub place: Place,
}

/// Parse bcc's specifier: `func` (a kernel function), `lib:func`, `p::func`, `r:lib:func`, `t:cat:event`,
/// `u:lib:[provider:]name`.
pub fn parse(text: &str) -> Result<Spec, String> {
    let parts: Vec<&str> = text.split(':').collect();
    let (kind, rest): (char, Vec<&str>) = match parts.as_slice() {
        [func] => ('p', vec!["", func]),
        [lib, func] => ('p', vec![lib, func]),
        [k, rest @ ..] => match *k {
            "" | "p" => ('p', rest.to_vec()),
            "r" | "t" | "u" => (k.chars().next().unwrap_or('p'), rest.to_vec()),
            other => {
                return Err(format!(
                    "`{text}`: the probe type must be p, r, t or u, not `{other}`"
                ))
            }
        },
        [] => return Err("an empty probe specifier".into()),
    };
    let empty = |s: &str, what: &str| match s.is_empty() {
        true => Err(format!("`{text}` names no {what}")),
        false => Ok(s.to_string()),
    };
    let place = match (kind, rest.as_slice()) {
        ('t', [cat, ev]) => Place::Tracepoint {
            category: empty(cat, "tracepoint category")?,
            event: empty(ev, "tracepoint")?,
        },
        ('u', [lib, name]) => Place::Usdt {
            lib: empty(lib, "library")?,
            provider: None,
            name: empty(name, "USDT probe")?,
        },
        ('u', [lib, provider, name]) => Place::Usdt {
            lib: empty(lib, "library")?,
            provider: Some(provider.to_string()),
            name: empty(name, "USDT probe")?,
        },
        ('p' | 'r', [lib @ .., func]) if lib.concat().is_empty() => {
            Place::Kernel(empty(func, "function")?)
        }
        ('p' | 'r', [lib @ .., func]) => Place::User {
            lib: lib.join(":"),
            func: empty(func, "function")?,
        },
        _ => return Err(format!("`{text}` is not [p|r|t|u]:[lib]:name")),
    };
    Ok(Spec { kind, place })
}

impl Spec {
    /// The `rprof probe` pattern, with `fetches` (`arg0:str, ret`: already in probe's syntax) in parentheses.
    pub fn pattern(&self, fetches: &[String]) -> String {
        let values = match fetches.is_empty() {
            true => String::new(),
            false => format!("({})", fetches.join(", ")),
        };
        match &self.place {
            Place::Kernel(f) => format!("kprobe:{f}{values}"),
            Place::User { lib, func } if lib.contains('/') => {
                format!("uprobe:{lib}:{func}{values}")
            }
            Place::User { lib, func } => format!("{lib}:{func}{values}"),
            Place::Tracepoint { category, event } => format!("t:{category}:{event}{values}"),
            Place::Usdt {
                lib,
                provider,
                name,
            } => format!(
                "usdt:{lib}:{}:{name}{values}",
                provider.as_deref().unwrap_or("*")
            ),
        }
    }

    /// Where a USDT probe may be missing (Debian's glibc has no SystemTap notes), the function of the same
    /// name, whose arguments the probe passes along in bcc's examples (`u:pthread:pthread_create`): in libc
    /// for libpthread, librt and libdl, merged into libc since glibc 2.34.
    pub fn usdt_fallback(&self, fetches: &[String]) -> Option<Spec> {
        let Place::Usdt { lib, name, .. } = &self.place else {
            return None;
        };
        let lib = match lib.as_str() {
            "pthread" | "rt" | "dl" => "c",
            l => l,
        };
        Some(Spec {
            kind: 'p',
            place: Place::User {
                lib: lib.to_string(),
                func: name.clone(),
            },
        })
        .filter(|_| fetches.iter().all(|f| !f.starts_with("ret")))
    }
}

/// A pattern as a regular expression anchored where bcc anchors its (`re.match`: at the start). rprof's
/// patterns take `(` for the values to fetch, so a regular expression cannot group.
pub fn anchored(re: &str) -> Result<String, String> {
    if re.contains('(') {
        return Err(format!(
            "`{re}`: rprof's patterns take `(` for values to fetch, so a regular expression cannot group; \
             write the alternatives as separate runs or a glob"
        ));
    }
    Ok(match re.starts_with('^') {
        true => re.to_string(),
        false => format!("^{re}"),
    })
}

/// Apply `-r` to a pattern's name part (`c:^str.*`): `LIB:` and `t:CAT:` stay as they are.
pub fn with_regex(spec: &mut Spec) -> Result<(), String> {
    match &mut spec.place {
        Place::Kernel(f) | Place::User { func: f, .. } => *f = anchored(f)?,
        Place::Tracepoint { event, .. } => *event = anchored(event)?,
        Place::Usdt { name, .. } => *name = anchored(name)?,
    }
    Ok(())
}
