//! `rprof annotate`: which source lines and instructions of a hot function take its time.
//!
//! Each sample counts at its sampled IP (the leaf frame only, as `perf annotate` does). The recording is
//! replayed through the one [`StackResolver`] (address spaces, build ids, the kernel), which says which
//! binary and file offset each IP is; the symbolizer names the function around it, its DWARF gives the source
//! line of each instruction (the innermost inlined function's line, named as such), and iced-x86 decodes the
//! function's code from the binary ([`disasm`]). [`output`] prints perf annotate's layout.
use crate::addr::FileOffset;
use crate::elf_layout::ElfLayout;
use crate::process::AddressSpaces;
use crate::recording::{CpuMode, Event, Reader, OFF_CPU_EVENT};
use crate::replay::{resolver_for, stream_events, track, Salvaged, QUEUED_BATCHES};
use crate::resolve::{Origin, StackResolver};
use crate::symbols::{DebugSources, FunctionRange, ModuleKey, Symbolized, SymbolizerOptions};
use crate::text::thousands;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub mod disasm;
pub mod labels;
mod output;
mod source;
mod stdio2;

pub use output::write_annotation;
pub use source::SourcePrefix;

/// What to annotate and how.
#[derive(Clone, Debug, Default)]
pub struct AnnotateOptions {
    /// Functions to annotate, by exact name, demangled name or glob; empty: the hottest few.
    pub symbols: Vec<String>,
    /// Only functions of this binary (its path or file name).
    pub dso: Option<String>,
    /// How many functions to annotate without `symbols`.
    pub top: usize,
    /// Interleave the disassembly.
    pub asm: bool,
    /// perf's second text layout (`--stdio2`): the disassembly with offsets as labels and drawn branches.
    pub stdio2: bool,
    /// Source path rewrites (`--source-prefix OLD=NEW`), for builds made elsewhere.
    pub source_prefixes: Vec<SourcePrefix>,
    /// ANSI colours on the percentages.
    pub color: bool,
    /// Where separate debug files, binaries gone from disk and source files are looked for.
    pub debug: DebugSources,
}

/// Errors of `rprof annotate`.
#[derive(Debug, thiserror::Error)]
pub enum AnnotateError {
    #[error(transparent)]
    Recording(#[from] crate::recording::RecordingError),
    #[error("{0}: no CPU samples to annotate")]
    NoSamples(PathBuf),
    #[error("no sampled function matches `{pattern}`{dso} in {input} (exact, demangled or glob name); {found}")]
    NoMatch {
        pattern: String,
        dso: String,
        input: PathBuf,
        found: String,
    },
    #[error("cannot annotate the hottest code of {input}: {gone}; the hottest functions that can be annotated are: {hottest}")]
    HotBinaryGone {
        input: PathBuf,
        gone: String,
        hottest: String,
    },
    #[error("cannot annotate {name} in {path}: {reason}")]
    Code {
        name: String,
        path: PathBuf,
        reason: String,
    },
    #[error("cannot write the annotation: {0}")]
    Output(#[from] std::io::Error),
}

/// One sampled function of a binary, with its samples by instruction address.
pub struct HotFunction {
    pub module: Arc<ModuleKey>,
    pub function: FunctionRange,
    pub layout: ElfLayout,
    pub samples: u64,
    pub period: u64,
    /// ELF address of the sampled IP -> (samples, period).
    pub by_addr: BTreeMap<u64, (u64, u64)>,
}

/// Samples outside any function that can be annotated: the kernel, JIT code, unknown code.
struct Elsewhere {
    name: String,
    module: String,
    period: u64,
}

/// A sampled binary that cannot be read: gone, or changed since the recording.
struct Gone {
    path: PathBuf,
    reason: &'static str,
    samples: u64,
}

/// The leaf samples of a recording, by function.
pub struct Sampled {
    pub input: PathBuf,
    /// The sampled event's name (`cpu-clock`).
    pub event: String,
    pub functions: Vec<HotFunction>,
    elsewhere: Vec<Elsewhere>,
    gone: Vec<Gone>,
    pub samples: u64,
    pub period: u64,
    pub salvaged: Option<Salvaged>,
    resolver: StackResolver,
}

/// Read a recording's CPU samples and attribute each to the function and instruction at its IP.
pub fn load(input: &Path, debug: DebugSources) -> Result<Sampled, AnnotateError> {
    let reader = Reader::open(input)?;
    let event = reader
        .event_names()
        .iter()
        .find(|n| *n != OFF_CPU_EVENT)
        .cloned()
        .unwrap_or_else(|| "cpu-clock".into());
    let opts = SymbolizerOptions {
        debug,
        inlines: true,
        lines: true,
        demangle: true,
    };
    let mut resolver = resolver_for(&reader, opts);
    let mut spaces = AddressSpaces::new();
    // Leaf frame id -> (samples, period).
    let mut leaves: HashMap<u32, (u64, u64)> = HashMap::new();
    let mut read = 0u64;
    let salvaged = stream_events::<AnnotateError>(reader, QUEUED_BATCHES, |event| {
        track(&event, &mut spaces, &mut resolver, None);
        let Event::Sample(s) = event else {
            return Ok(());
        };
        read += 1;
        if !s.off_cpu {
            let kernel = s.cpu_mode == CpuMode::Kernel;
            let ids = resolver.resolve_addr(s.pid, spaces.get(s.pid), s.ip, kernel, true);
            let leaf = leaves.entry(ids[0]).or_default();
            leaf.0 += 1;
            leaf.1 = leaf.1.saturating_add(s.period);
        }
        Ok(())
    })?;
    resolver.finish();
    let mut sampled = Sampled {
        input: input.to_path_buf(),
        event,
        functions: Vec::new(),
        elsewhere: Vec::new(),
        gone: Vec::new(),
        samples: leaves.values().map(|c| c.0).sum(),
        period: leaves.values().map(|c| c.1).sum(),
        salvaged: salvaged.map(|error| Salvaged {
            samples: read,
            error,
        }),
        resolver,
    };
    sampled.group(leaves);
    Ok(sampled)
}

impl Sampled {
    /// Group the leaf addresses by function (and the rest by what they are).
    fn group(&mut self, leaves: HashMap<u32, (u64, u64)>) {
        let mut functions: HashMap<(PathBuf, Option<Vec<u8>>, u64), HotFunction> = HashMap::new();
        let mut gone: HashMap<PathBuf, Gone> = HashMap::new();
        let mut elsewhere: HashMap<(String, String), u64> = HashMap::new();
        for (id, (samples, period)) in leaves {
            let r = &mut self.resolver;
            if let Some((module, offset)) = r.module_of(id).map(|(m, o)| (Arc::clone(m), o)) {
                if !r.symbolizer().module_opens(&module) {
                    gone.entry(module.path.clone())
                        .or_insert_with(|| Gone {
                            path: module.path.clone(),
                            reason: why_unreadable(&module),
                            samples: 0,
                        })
                        .samples += samples;
                    continue;
                }
                if let Some((function, layout)) = r.symbolizer().function(&module, offset) {
                    let Some(addr) = layout.elf_addr(offset) else {
                        continue;
                    };
                    let key = (
                        module.path.clone(),
                        module.build_id.clone(),
                        function.start.0,
                    );
                    let hot = functions.entry(key).or_insert_with(|| HotFunction {
                        module: Arc::clone(&module),
                        function,
                        layout,
                        samples: 0,
                        period: 0,
                        by_addr: BTreeMap::new(),
                    });
                    hot.samples += samples;
                    hot.period = hot.period.saturating_add(period);
                    let at = hot.by_addr.entry(addr.0).or_default();
                    at.0 += samples;
                    at.1 = at.1.saturating_add(period);
                    continue;
                }
            }
            let frame = match r.origin(id) {
                Origin::File { frames, .. } | Origin::Kernel { frames, .. } => {
                    frames.first().copied()
                }
                Origin::Frame(frame) => Some(frame),
            };
            let (name, module) = frame.map_or(("[unknown]".into(), "[unknown]".into()), |id| {
                let f = r.frame(id);
                // Unnamed code as report's table lists it (`perl+0x196480..0x19ec13`, without the count of
                // addresses: annotate sees only the leaves); a name without the location `--lines` appends.
                let name = match f.unnamed {
                    Some(_) => f.table_name(1),
                    None => f.name.split(' ').next().unwrap_or(&f.name).to_string(),
                };
                (name, f.module.clone())
            });
            *elsewhere.entry((name, module)).or_default() += period;
        }
        self.functions = functions.into_values().collect();
        self.functions
            .sort_by(|a, b| (b.period, &a.function.name).cmp(&(a.period, &b.function.name)));
        self.gone = gone.into_values().collect();
        self.gone.sort_by_key(|g| std::cmp::Reverse(g.samples));
        self.elsewhere = elsewhere
            .into_iter()
            .map(|((name, module), period)| Elsewhere {
                name,
                module,
                period,
            })
            .collect();
        self.elsewhere.sort_by_key(|e| std::cmp::Reverse(e.period));
    }

    fn share(&self, period: u64) -> f64 {
        period as f64 * 100.0 / self.period.max(1) as f64
    }

    /// The hottest sampled functions as one line: `divide_loop (annotate_div, 97.2%), ...`; code without a name
    /// as report's table lists it: `perl+0x196480..0x19ec13 (perl, 26.4%)`.
    fn hottest(&self, n: usize) -> String {
        let mut all: Vec<(u64, String)> = self
            .functions
            .iter()
            .map(|f| {
                let module = f
                    .module
                    .path
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy();
                (f.period, format!("{} ({module}", f.function.name))
            })
            .chain(self.elsewhere.iter().map(|e| {
                let note = if e.module.contains("kernel") {
                    ", kernel: not annotated"
                } else {
                    ""
                };
                (e.period, format!("{} ({}{note}", e.name, e.module))
            }))
            .collect();
        all.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        let list: Vec<String> = all
            .iter()
            .take(n)
            .map(|(period, text)| format!("{text}, {:.1}%)", self.share(*period)))
            .collect();
        match list.is_empty() {
            true => "none".into(),
            false => list.join(", "),
        }
    }

    /// The binaries that hold samples but cannot be read, as one clause.
    fn gone_clause(&self) -> Option<String> {
        let parts: Vec<String> = self
            .gone
            .iter()
            .map(|g| {
                format!(
                    "{} {} ({} samples; its functions are unknown)",
                    g.path.display(),
                    g.reason,
                    thousands(g.samples)
                )
            })
            .collect();
        (!parts.is_empty()).then(|| parts.join(", "))
    }

    /// The functions to annotate: those matching the patterns (all of each pattern's matches), else the `top`
    /// hottest; in `dso` only when given.
    pub fn select(&self, opts: &AnnotateOptions) -> Result<Vec<&HotFunction>, AnnotateError> {
        if self.samples == 0 {
            return Err(AnnotateError::NoSamples(self.input.clone()));
        }
        let in_dso = |f: &&HotFunction| {
            opts.dso.as_deref().is_none_or(|dso| {
                f.module.path == Path::new(dso)
                    || f.module.path.file_name().is_some_and(|n| n == dso)
            })
        };
        if opts.symbols.is_empty() {
            let chosen: Vec<&HotFunction> = self
                .functions
                .iter()
                .filter(in_dso)
                .take(opts.top.max(1))
                .collect();
            // The hottest code is in a binary that is gone: annotating lesser functions would mislead.
            let hottest = chosen.first().map_or(0, |f| f.samples);
            if let Some(gone) = self.gone.first().filter(|g| g.samples > hottest) {
                return Err(AnnotateError::HotBinaryGone {
                    input: self.input.clone(),
                    gone: format!(
                        "{} {} ({:.1}% of the samples)",
                        gone.path.display(),
                        gone.reason,
                        gone.samples as f64 * 100.0 / self.samples as f64
                    ),
                    hottest: self.hottest(5),
                });
            }
            if chosen.is_empty() {
                return Err(self.no_match("*", opts));
            }
            return Ok(chosen);
        }
        let mut chosen: Vec<&HotFunction> = Vec::new();
        for pattern in &opts.symbols {
            let matcher = NameMatcher::new(pattern);
            let found: Vec<&HotFunction> = self
                .functions
                .iter()
                .filter(in_dso)
                .filter(|f| matcher.matches(&f.function))
                .collect();
            if found.is_empty() {
                return Err(self.no_match(pattern, opts));
            }
            for f in found {
                if !chosen.iter().any(|c| std::ptr::eq(*c, f)) {
                    chosen.push(f);
                }
            }
        }
        Ok(chosen)
    }

    fn no_match(&self, pattern: &str, opts: &AnnotateOptions) -> AnnotateError {
        let mut found = format!("the hottest sampled functions are: {}", self.hottest(5));
        if let Some(gone) = self.gone_clause() {
            found = format!("{found}; not searched: {gone}");
        }
        AnnotateError::NoMatch {
            pattern: pattern.to_string(),
            dso: opts
                .dso
                .as_ref()
                .map_or(String::new(), |d| format!(" in --dso {d}")),
            input: self.input.clone(),
            found,
        }
    }

    /// The frames (outermost first) at a file offset of a function's binary, with source lines.
    fn frames_at(&mut self, module: &ModuleKey, offset: FileOffset) -> Symbolized {
        self.resolver.symbolizer().user(module, offset)
    }
}

/// objdump's labels for the section of `module` that holds `start`, where function `name` starts; when the
/// binary cannot be read, the function's own name.
fn labels_of(module: &ModuleKey, start: u64, name: &str) -> labels::Labels {
    let paths = [
        module.path.clone(),
        crate::process::root_path(module.pid, &module.path),
    ];
    let file = paths
        .iter()
        .find(|p| p.is_file())
        .and_then(|p| crate::mapped::MappedFile::open(p).ok());
    match file {
        Some(file) => labels::Labels::of_elf(&file, start),
        None => labels::Labels::of_functions(&[(start, name)]),
    }
}

/// Why a sampled binary cannot be used.
fn why_unreadable(module: &ModuleKey) -> &'static str {
    let exists = module.path.is_file()
        || (module.path.is_absolute()
            && crate::process::root_path(module.pid, &module.path).is_file());
    if !exists {
        "is gone"
    } else if module.build_id.is_some() {
        "has changed since the recording (another build id)"
    } else {
        "cannot be read as an ELF file"
    }
}

/// Matches a function by its stored name or its demangled name: exactly, or as a glob when the pattern has
/// glob characters (`'rprof::report::*'`).
struct NameMatcher {
    exact: String,
    glob: Option<globset::GlobMatcher>,
}

impl NameMatcher {
    fn new(pattern: &str) -> NameMatcher {
        let glob = pattern
            .contains(['*', '?', '['])
            .then(|| globset::Glob::new(pattern).ok())
            .flatten()
            .map(|g| g.compile_matcher());
        NameMatcher {
            exact: pattern.to_string(),
            glob,
        }
    }

    fn matches(&self, f: &FunctionRange) -> bool {
        // Demangled C++ names carry their parameters: `ns::f(int)` is also `ns::f`.
        let bare = f.name.split('(').next().unwrap_or(&f.name);
        [f.name.as_str(), f.raw_name.as_str(), bare]
            .iter()
            .any(|name| match &self.glob {
                Some(glob) => glob.is_match(name),
                None => *name == self.exact,
            })
    }
}

/// Annotate the chosen functions of `input` into `out`.
pub fn annotate(
    input: &Path,
    opts: &AnnotateOptions,
    out: &mut impl std::io::Write,
) -> Result<Option<Salvaged>, AnnotateError> {
    let mut sampled = load(input, opts.debug.clone())?;
    let chosen: Vec<usize> = {
        let chosen = sampled.select(opts)?;
        chosen
            .iter()
            .map(|c| {
                sampled
                    .functions
                    .iter()
                    .position(|f| std::ptr::eq(f, *c))
                    .expect("chosen among the functions")
            })
            .collect()
    };
    for (n, index) in chosen.into_iter().enumerate() {
        if n > 0 {
            writeln!(out)?;
        }
        write_annotation(&mut sampled, index, opts, out)?;
    }
    Ok(sampled.salvaged.take())
}
