//! The fields of `rprof script` (`-F`, perf script's names and rules).

/// Which fields each sample shows (`-F`, perf script's names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fields {
    pub comm: bool,
    pub tid: bool,
    pub pid: bool,
    pub time: bool,
    /// `[CPU]`, for recordings whose samples hold the CPU.
    pub cpu: bool,
    pub period: bool,
    pub event: bool,
    /// The address of each frame.
    pub ip: bool,
    pub sym: bool,
    /// `+0xOFF` after the symbol.
    pub symoff: bool,
    pub dso: bool,
    /// Every frame of the stack (else the sampled IP alone, on the header line).
    pub callchain: bool,
    /// A tracepoint sample's fields, as its event's `print fmt` shows them.
    pub trace: bool,
}

impl Default for Fields {
    /// perf script's default for sampled events: `comm,tid,time,period,event,ip,sym,symoff,dso` with the
    /// callchain, and the CPU when the samples have it.
    fn default() -> Self {
        Fields {
            comm: true,
            tid: true,
            pid: false,
            time: true,
            cpu: true,
            period: true,
            event: true,
            ip: true,
            sym: true,
            symoff: true,
            dso: true,
            callchain: true,
            trace: true,
        }
    }
}

/// The field names `-F` takes.
pub const FIELD_NAMES: &[&str] = &[
    "comm",
    "tid",
    "pid",
    "time",
    "cpu",
    "period",
    "event",
    "ip",
    "sym",
    "symoff",
    "dso",
    "callchain",
    "trace",
];

impl Fields {
    fn none() -> Fields {
        Fields {
            comm: false,
            tid: false,
            pid: false,
            time: false,
            cpu: false,
            period: false,
            event: false,
            ip: false,
            sym: false,
            symoff: false,
            dso: false,
            callchain: false,
            trace: false,
        }
    }

    fn flag(&mut self, name: &str) -> Option<&mut bool> {
        Some(match name {
            "comm" => &mut self.comm,
            "tid" => &mut self.tid,
            "pid" => &mut self.pid,
            "time" => &mut self.time,
            "cpu" => &mut self.cpu,
            "period" => &mut self.period,
            "event" => &mut self.event,
            "ip" => &mut self.ip,
            "sym" => &mut self.sym,
            "symoff" => &mut self.symoff,
            "dso" => &mut self.dso,
            "callchain" => &mut self.callchain,
            "trace" => &mut self.trace,
            _ => return None,
        })
    }

    /// Parse perf script's `-F` list: `comm,tid,time,ip,sym` sets exactly those fields (as in perf, `ip`
    /// with a recorded callchain shows it whole); `+period,-dso` adds to and removes from the default.
    pub fn parse(spec: &str) -> Result<Fields, String> {
        let relative = spec.trim_start().starts_with(['+', '-']);
        let mut fields = if relative {
            Fields::default()
        } else {
            Fields::none()
        };
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (on, name) = match item.as_bytes()[0] {
                b'+' | b'-' if !relative => {
                    return Err(format!(
                        "`{item}`: mix no plain names with +/- ones in -F (perf's rule)"
                    ))
                }
                b'+' => (true, &item[1..]),
                b'-' => (false, &item[1..]),
                _ if relative => {
                    return Err(format!(
                        "`{item}`: mix no plain names with +/- ones in -F (perf's rule)"
                    ))
                }
                _ => (true, item),
            };
            let Some(flag) = fields.flag(name) else {
                return Err(format!(
                    "unknown field `{name}` in -F; the fields are {}",
                    FIELD_NAMES.join(",")
                ));
            };
            *flag = on;
            if !relative && name == "ip" {
                fields.callchain = true;
            }
        }
        Ok(fields)
    }

    pub(super) fn frames(&self) -> bool {
        self.ip || self.sym || self.dso
    }

    /// perf script's default for a tracepoint sample (when `-F` was not given): `comm,tid,cpu,time,event,
    /// trace`, and the frames when the sample has a callchain.
    pub(super) fn tracepoint_default(has_chain: bool) -> Fields {
        Fields {
            period: false,
            ip: has_chain,
            sym: has_chain,
            symoff: has_chain,
            dso: has_chain,
            ..Fields::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that -F lists set exactly their fields (`ip` bringing the callchain, as in perf), that +/-
    /// lists edit the default, and that unknown names are refused with the list of names.
    #[test]
    fn field_lists() {
        let f = Fields::parse("comm,tid,time,event,ip,sym,dso").unwrap();
        assert!(f.comm && f.tid && f.time && f.event && f.ip && f.sym && f.dso && f.callchain);
        assert!(!f.period && !f.pid && !f.symoff && !f.cpu);
        let f = Fields::parse("comm,sym").unwrap();
        assert!(!f.callchain && !f.ip);
        let f = Fields::parse("-period,+pid").unwrap();
        assert_eq!(
            f,
            Fields {
                period: false,
                pid: true,
                ..Fields::default()
            }
        );
        let e = Fields::parse("comm,bogus").unwrap_err();
        assert!(e.contains("bogus") && e.contains("callchain"), "{e}");
        assert!(Fields::parse("comm,+tid").is_err());
    }
}
