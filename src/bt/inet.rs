//! `ntop()` values: addresses spelled as glibc's `inet_ntop` spells them (bpftrace 0.17's `resolve_inet`).

use std::net::{IpAddr, Ipv6Addr};

/// `inet_ntop` as glibc spells addresses: IPv6 with the longest run of two or more zero groups as `::`, and
/// `::a.b.c.d` / `::ffff:a.b.c.d` for IPv4-compatible and -mapped addresses.
pub fn ntop(addr: &IpAddr) -> String {
    match addr {
        IpAddr::V4(a) => a.to_string(),
        IpAddr::V6(a) => ntop6(a),
    }
}

fn ntop6(a: &Ipv6Addr) -> String {
    let w = a.segments();
    let o = a.octets();
    // glibc: the longest run of zero words (first one on ties), only if two or more long.
    let (mut best, mut cur) = ((0usize, 0usize), None::<(usize, usize)>);
    for (i, &word) in w.iter().enumerate() {
        if word == 0 {
            let c = cur.get_or_insert((i, 0));
            c.1 += 1;
            if c.1 > best.1 {
                best = *c;
            }
        } else {
            cur = None;
        }
    }
    if best.1 < 2 {
        best = (usize::MAX, 0);
    }
    let dotted =
        |out: &mut String| out.push_str(&format!("{}.{}.{}.{}", o[12], o[13], o[14], o[15]));
    let mut out = String::new();
    let mut i = 0;
    while i < 8 {
        if i == best.0 {
            out.push(':');
            i += best.1;
            if i == 8 {
                out.push(':');
            }
            continue;
        }
        if i > 0 {
            out.push(':');
        }
        if i == 6 && best.0 == 0 && (best.1 == 6 || (best.1 == 5 && w[5] == 0xffff)) {
            dotted(&mut out);
            break;
        }
        out.push_str(&format!("{:x}", w[i]));
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inet_as_glibc_ntop() {
        let cases = [
            ("127.0.0.1", "127.0.0.1"),
            ("::1", "::1"),
            ("::", "::"),
            ("fe80::1:0:0:2", "fe80::1:0:0:2"),
            ("1:0:2:0:0:3:0:4", "1:0:2::3:0:4"),
            ("1:0:0:2:0:0:3:4", "1::2:0:0:3:4"),
            ("::ffff:10.1.2.3", "::ffff:10.1.2.3"),
            ("::10.1.2.3", "::10.1.2.3"),
            ("2001:db8::", "2001:db8::"),
            ("1:0:3:4:5:6:7:8", "1:0:3:4:5:6:7:8"),
        ];
        for (input, want) in cases {
            let a: IpAddr = input.parse().unwrap();
            assert_eq!(ntop(&a), want, "{input}");
        }
    }
}
