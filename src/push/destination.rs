//! Where a profile goes: the identity of a store, recorded with every spooled profile so that a profile is
//! only ever sent to the store it was made for.
//!
//! A destination is the protocol (Pyroscope's ingest API or OTLP), the endpoint's URL without credentials,
//! the tenant (`X-Scope-OrgID`) and the basic-auth user (in Grafana Cloud the user names the stack, and one
//! URL serves a whole region). Not part of it: the password and the bearer token (secrets, and rotated: a
//! rotated token must still send what waits), and the application name and labels, which every profile
//! carries itself (the ingest query, the OTLP resource) and keeps wherever it goes.
use serde::{Deserialize, Serialize};

/// A store a profile is made for.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Destination {
    /// `pyroscope` (POST URL/ingest?QUERY) or `otlp` (POST URL).
    pub kind: String,
    /// The URL without user or password, without a trailing `/`.
    pub url: String,
    /// The `X-Scope-OrgID` header.
    pub tenant: Option<String>,
    /// The basic-auth user (from --push-user, else the URL's user part).
    pub user: Option<String>,
}

impl Destination {
    /// The destination of `kind` at `url` (credentials in the URL are left out, its user kept as `user`
    /// unless one is given).
    pub fn new(kind: &str, url: &str, tenant: Option<&str>, user: Option<&str>) -> Destination {
        let (url, url_user) = without_credentials(url);
        Destination {
            kind: kind.to_string(),
            url: url.trim_end_matches('/').to_string(),
            tenant: tenant.map(str::to_string),
            user: user.map(str::to_string).or(url_user),
        }
    }

    /// A stable key of the destination (FNV-1a, 64 bits, over its fields): the spool's file names carry it,
    /// so that the sender lists its own profiles without reading the others. Stable across builds and
    /// versions, unlike std's hasher.
    pub fn key(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let fields = [
            Some(self.kind.as_str()),
            Some(self.url.as_str()),
            self.tenant.as_deref(),
            self.user.as_deref(),
        ];
        for field in fields {
            // A field's presence and its end are part of the key: (Some(""), None) differs from (None, Some("")).
            let bytes = field.map_or(&[0xff_u8][..], str::as_bytes);
            for &b in bytes.iter().chain(&[0u8]) {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
        h
    }
}

impl std::fmt::Display for Destination {
    /// `URL (KIND[, tenant T][, user U])`: no secret, the URL's credentials already left out.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}", self.url, self.kind)?;
        if let Some(t) = &self.tenant {
            write!(f, ", tenant {t}")?;
        }
        if let Some(u) = &self.user {
            write!(f, ", user {u}")?;
        }
        write!(f, ")")
    }
}

/// The URL without its `user:password@` part, and the user of that part.
pub(super) fn without_credentials(url: &str) -> (String, Option<String>) {
    let Some((scheme, rest)) = url.split_once("://") else {
        return (url.to_string(), None);
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().filter(|u| !u.is_empty());
            (format!("{scheme}://{host}{path}"), user.map(str::to_string))
        }
        None => (url.to_string(), None),
    }
}

#[cfg(test)]
mod tests {
    use super::Destination;

    /// Check that credentials in the URL are left out (the user kept), and a trailing slash does not make
    /// another destination.
    #[test]
    fn url_credentials_left_out() {
        let d = Destination::new("pyroscope", "https://u1:s3cret@store:4040/", None, None);
        assert_eq!(d.url, "https://store:4040");
        assert_eq!(d.user.as_deref(), Some("u1"));
        assert!(!d.to_string().contains("s3cret"));
        let plain = Destination::new("pyroscope", "https://store:4040", None, Some("u1"));
        assert_eq!(d, plain);
        assert_eq!(d.key(), plain.key());
    }

    /// Check that the kind, URL, tenant and user each make another key, and that the key is the same from
    /// version to version (spool file names carry it).
    #[test]
    fn every_field_makes_another_key() {
        let base = Destination::new("pyroscope", "http://127.0.0.1:9", Some("a"), None);
        let others = [
            Destination::new("otlp", "http://127.0.0.1:9", Some("a"), None),
            Destination::new("pyroscope", "http://127.0.0.1:10", Some("a"), None),
            Destination::new("pyroscope", "http://127.0.0.1:9", Some("b"), None),
            Destination::new("pyroscope", "http://127.0.0.1:9", None, None),
            Destination::new("pyroscope", "http://127.0.0.1:9", Some("a"), Some("u")),
            Destination::new("pyroscope", "http://127.0.0.1:9", Some(""), None),
        ];
        for o in &others {
            assert_ne!(base.key(), o.key(), "{o}");
        }
        assert_eq!(
            base.key(),
            0xd66a_e438_295a_9c19,
            "the key changed: old spools would be orphaned"
        );
    }
}
