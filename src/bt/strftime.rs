//! `time(fmt)` and `strftime(fmt, nsecs)` as bpftrace 0.17 formats them: C's `strftime` (C locale) on local
//! time, into a 64-byte buffer (a result that does not fit prints nothing for `time()`, `(?)` for
//! `strftime()`); `strftime()` first replaces every `%f` with the microseconds (6 digits). `time()`'s default
//! format is `%H:%M:%S\n`.
//!
//! Local time comes from the TZif file of `TZ` or `/etc/localtime` (its transition table; the footer's rule
//! for times after the last transition is not read: the last transition's offset holds).

/// `time()` without a format.
pub const DEFAULT_TIME_FORMAT: &str = "%H:%M:%S\n";
/// bpftrace's `STRING_SIZE`: strftime's buffer.
const BUFFER: usize = 64;

/// A time zone: transitions (UTC seconds, type) and types (offset east of UTC, abbreviation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Zone {
    transitions: Vec<(i64, usize)>,
    types: Vec<(i64, String)>,
}

fn be(bytes: &[u8], at: usize, n: usize) -> Option<i64> {
    let b = bytes.get(at..at + n)?;
    Some(match n {
        4 => i64::from(i32::from_be_bytes(b.try_into().ok()?)),
        _ => i64::from_be_bytes(b.try_into().ok()?),
    })
}

impl Zone {
    pub fn utc() -> Zone {
        Zone {
            transitions: Vec::new(),
            types: vec![(0, "UTC".to_string())],
        }
    }

    /// The local zone as the C library finds it: `TZ` (a zone name or `:path`), else `/etc/localtime`; UTC
    /// when neither reads.
    pub fn local() -> Zone {
        let path = match std::env::var("TZ") {
            Err(_) => "/etc/localtime".to_string(),
            Ok(tz) if tz.is_empty() => return Zone::utc(),
            Ok(tz) => {
                let name = tz.trim_start_matches(':');
                if name.starts_with('/') {
                    name.to_string()
                } else {
                    format!("/usr/share/zoneinfo/{name}")
                }
            }
        };
        std::fs::read(path)
            .ok()
            .and_then(|b| Zone::from_tzif(&b))
            .unwrap_or_else(Zone::utc)
    }

    /// A zone from a TZif file (RFC 8536), its 64-bit block when there is one.
    pub fn from_tzif(bytes: &[u8]) -> Option<Zone> {
        let header = |at: usize| -> Option<[usize; 6]> {
            if bytes.get(at..at + 4)? != b"TZif" {
                return None;
            }
            let mut counts = [0usize; 6];
            for (i, c) in counts.iter_mut().enumerate() {
                *c = usize::try_from(be(bytes, at + 20 + 4 * i, 4)?).ok()?;
            }
            Some(counts)
        };
        let size = |c: [usize; 6], t: usize| {
            c[3] * t + c[3] + c[4] * 6 + c[5] + c[2] * (t + 4) + c[1] + c[0]
        };
        let first = header(0)?;
        let (start, counts, t) = if *bytes.get(4)? >= b'2' {
            let at = 44 + size(first, 4);
            (at + 44, header(at)?, 8)
        } else {
            (44, first, 4)
        };
        let [_, _, _, timecnt, typecnt, charcnt] = counts;
        let idx_at = start + timecnt * t;
        let types_at = idx_at + timecnt;
        let chars_at = types_at + typecnt * 6;
        let chars = bytes.get(chars_at..chars_at + charcnt)?;
        let mut types = Vec::new();
        for i in 0..typecnt {
            let off = be(bytes, types_at + 6 * i, 4)?;
            let ai = usize::from(*bytes.get(types_at + 6 * i + 5)?);
            let abbrev = chars.get(ai..)?.split(|&b| b == 0).next()?;
            types.push((off, String::from_utf8_lossy(abbrev).into_owned()));
        }
        let mut transitions = Vec::new();
        for i in 0..timecnt {
            let ty = usize::from(*bytes.get(idx_at + i)?);
            if ty >= types.len() {
                return None;
            }
            transitions.push((be(bytes, start + i * t, t)?, ty));
        }
        (!types.is_empty()).then_some(Zone { transitions, types })
    }

    /// The offset and abbreviation in force at `t` (UTC seconds).
    fn at(&self, t: i64) -> (i64, &str) {
        let n = self.transitions.partition_point(|&(when, _)| when <= t);
        let ty = if n == 0 { 0 } else { self.transitions[n - 1].1 };
        let (off, name) = &self.types[ty];
        (*off, name)
    }
}

/// A broken-down local time (C's `struct tm`, months and weekdays from 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tm {
    pub year: i64,
    pub mon: u32,
    pub mday: u32,
    pub hour: u32,
    pub min: u32,
    pub sec: u32,
    pub wday: u32,
    pub yday: u32,
    pub gmtoff: i64,
    pub zone: String,
    pub epoch: i64,
}

/// Days since 1970-01-01 to (year, month 1-12, day), Howard Hinnant's `civil_from_days`.
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

/// C's `localtime_r` of `epoch` seconds in `zone`.
pub fn localtime(epoch: i64, zone: &Zone) -> Tm {
    let (gmtoff, name) = zone.at(epoch);
    let local = epoch + gmtoff;
    let days = local.div_euclid(86_400);
    let secs = local.rem_euclid(86_400) as u32;
    let (year, m, d) = civil(days);
    let cum = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = cum[m as usize - 1] + d - 1 + u32::from(m > 2 && leap(year));
    Tm {
        year,
        mon: m - 1,
        mday: d,
        hour: secs / 3600,
        min: secs / 60 % 60,
        sec: secs % 60,
        wday: (days + 4).rem_euclid(7) as u32,
        yday,
        gmtoff,
        zone: name.to_string(),
        epoch,
    }
}

const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// ISO 8601 week-based year and week (`%G`, `%V`).
fn iso_week(tm: &Tm) -> (i64, u32) {
    let wday = (tm.wday + 6) % 7; // Monday = 0
    let week = (tm.yday as i64 - wday as i64 + 10) / 7;
    let days_in = |y: i64| if leap(y) { 366 } else { 365 };
    if week < 1 {
        let prev = tm.year - 1;
        let pyday = tm.yday as i64 + days_in(prev);
        return (prev, ((pyday - wday as i64 + 10) / 7) as u32);
    }
    if week == 53 && (tm.yday as i64 - wday as i64) > days_in(tm.year) - 4 {
        return (tm.year + 1, 1);
    }
    (tm.year, week as u32)
}

/// One conversion; `None` for characters C's strftime does not know (written as they stand).
fn conversion(c: char, tm: &Tm) -> Option<String> {
    let h12 = if tm.hour.is_multiple_of(12) {
        12
    } else {
        tm.hour % 12
    };
    Some(match c {
        'a' => DAYS[tm.wday as usize][..3].to_string(),
        'A' => DAYS[tm.wday as usize].to_string(),
        'b' | 'h' => MONTHS[tm.mon as usize][..3].to_string(),
        'B' => MONTHS[tm.mon as usize].to_string(),
        'c' => strf("%a %b %e %H:%M:%S %Y", tm),
        'C' => format!("{:02}", tm.year.div_euclid(100)),
        'd' => format!("{:02}", tm.mday),
        'D' | 'x' => strf("%m/%d/%y", tm),
        'e' => format!("{:2}", tm.mday),
        'F' => strf("%Y-%m-%d", tm),
        'G' => iso_week(tm).0.to_string(),
        'g' => format!("{:02}", iso_week(tm).0.rem_euclid(100)),
        'H' => format!("{:02}", tm.hour),
        'I' => format!("{h12:02}"),
        'j' => format!("{:03}", tm.yday + 1),
        'k' => format!("{:2}", tm.hour),
        'l' => format!("{h12:2}"),
        'm' => format!("{:02}", tm.mon + 1),
        'M' => format!("{:02}", tm.min),
        'n' => "\n".to_string(),
        'p' => if tm.hour < 12 { "AM" } else { "PM" }.to_string(),
        'P' => if tm.hour < 12 { "am" } else { "pm" }.to_string(),
        'r' => strf("%I:%M:%S %p", tm),
        'R' => strf("%H:%M", tm),
        's' => tm.epoch.to_string(),
        'S' => format!("{:02}", tm.sec),
        't' => "\t".to_string(),
        'T' | 'X' => strf("%H:%M:%S", tm),
        'u' => (if tm.wday == 0 { 7 } else { tm.wday }).to_string(),
        'U' => format!("{:02}", (tm.yday + 7 - tm.wday) / 7),
        'V' => format!("{:02}", iso_week(tm).1),
        'w' => tm.wday.to_string(),
        'W' => format!("{:02}", (tm.yday + 7 - (tm.wday + 6) % 7) / 7),
        'y' => format!("{:02}", tm.year.rem_euclid(100)),
        'Y' => tm.year.to_string(),
        'z' => {
            let off = tm.gmtoff.abs();
            format!(
                "{}{:02}{:02}",
                if tm.gmtoff < 0 { '-' } else { '+' },
                off / 3600,
                off / 60 % 60
            )
        }
        'Z' => tm.zone.clone(),
        '%' => "%".to_string(),
        _ => return None,
    })
}

fn strf(fmt: &str, tm: &Tm) -> String {
    let mut out = String::new();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some(k) => match conversion(k, tm) {
                Some(s) => out.push_str(&s),
                None => {
                    out.push('%');
                    out.push(k);
                }
            },
            None => out.push('%'),
        }
    }
    out
}

/// C's `strftime` into bpftrace's 64-byte buffer: `None` when the result is empty or does not fit.
pub fn strftime(fmt: &str, tm: &Tm) -> Option<String> {
    let out = strf(fmt, tm);
    (!out.is_empty() && out.len() < BUFFER).then_some(out)
}

/// `time(fmt)` at `epoch` seconds: `None` where bpftrace logs "strftime returned 0" and prints nothing.
pub fn time_text(fmt: &str, epoch: i64, zone: &Zone) -> Option<String> {
    strftime(fmt, &localtime(epoch, zone))
}

/// `strftime(fmt, nsecs)`: `boot_ns` is the wall-clock time of boot (bpftrace's `boottime_`), `nsecs` the
/// nanoseconds since boot; `%f` becomes the microseconds; `(?)` where strftime fails.
pub fn strftime_text(fmt: &str, boot_ns: u64, nsecs: u64, zone: &Zone) -> String {
    let (boot_s, boot_frac) = (boot_ns / 1_000_000_000, boot_ns % 1_000_000_000);
    let t = boot_s + (boot_frac + nsecs) / 1_000_000_000;
    let us = (boot_frac + nsecs) % 1_000_000_000 / 1000;
    let fmt = fmt.replace("%f", &format!("{us:06}"));
    strftime(&fmt, &localtime(t as i64, zone)).unwrap_or_else(|| "(?)".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_conversions() {
        // 2026-12-01 21:48:19 UTC, a Tuesday (`date` on this machine).
        let tm = localtime(1_796_161_699, &Zone::utc());
        assert_eq!(
            (tm.year, tm.mon, tm.mday, tm.hour, tm.min, tm.sec, tm.wday),
            (2026, 11, 1, 21, 48, 19, 2)
        );
        assert_eq!(
            strf("%Y-%m-%d %H:%M:%S %a %A %b %B %j %Z %z %e|%k|%l|%p", &tm),
            "2026-12-01 21:48:19 Tue Tuesday Dec December 335 UTC +0000  1|21| 9|PM"
        );
        assert_eq!(
            strf("%c|%D|%T|%s|%u|%w|%%|%Q", &tm),
            "Tue Dec  1 21:48:19 2026|12/01/26|21:48:19|1796161699|2|2|%|%Q"
        );
        assert_eq!(
            time_text(DEFAULT_TIME_FORMAT, 1_796_161_699, &Zone::utc()).as_deref(),
            Some("21:48:19\n")
        );
        assert_eq!(time_text("", 0, &Zone::utc()), None);
        assert_eq!(time_text(&"x".repeat(64), 0, &Zone::utc()), None);
    }

    #[test]
    fn iso_weeks_and_week_numbers() {
        // 2021-01-01 is a Friday: ISO week 53 of 2020, %U 00, %W 00.
        let tm = localtime(1_609_459_200, &Zone::utc());
        assert_eq!(strf("%G-%V %g %U %W", &tm), "2020-53 20 00 00");
        // 2024-12-30 is a Monday: ISO week 1 of 2025.
        let tm = localtime(1_735_516_800, &Zone::utc());
        assert_eq!(strf("%G-%V %U %W", &tm), "2025-01 52 53");
    }

    #[test]
    fn strftime_microseconds_and_zone_files() {
        let s = strftime_text(
            "%H:%M:%S.%f",
            1_000_000_000_500_000_000,
            1_700_000_000,
            &Zone::utc(),
        );
        assert_eq!(s, "01:46:42.200000");
        if let Ok(b) = std::fs::read("/usr/share/zoneinfo/Europe/Paris") {
            let z = Zone::from_tzif(&b).expect("Debian's tzdata parses");
            // 2026-07-01 12:00 UTC is 14:00 CEST; 2026-01-15 12:00 UTC is 13:00 CET.
            assert_eq!(
                strf("%H %Z %z", &localtime(1_782_907_200, &z)),
                "14 CEST +0200"
            );
            assert_eq!(
                strf("%H %Z %z", &localtime(1_768_478_400, &z)),
                "13 CET +0100"
            );
        }
    }
}
