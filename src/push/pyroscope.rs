//! A period's profile as a request to Pyroscope's HTTP ingest API: `POST /ingest?name=APP{LABELS}&from=&until=
//! &format=pprof&sampleRate=&spyName=rprof`, its body a multipart form with the gzipped pprof (`profile`) and
//! the `sample_type_config` that tells the store what each sample type is (units, how to aggregate; off-CPU
//! time is its own type, `off_cpu`, in nanoseconds).
use super::spool::Request;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// Characters left as they are in a query value.
const QUERY: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// The query: the application name with its labels (sorted), the period in Unix seconds, and the rate.
pub(super) fn query(
    app: &str,
    labels: &[(String, String)],
    from: u64,
    until: u64,
    rate: Option<u64>,
) -> String {
    let mut sorted = labels.to_vec();
    sorted.sort();
    let labels: Vec<String> = sorted.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let name = format!("{app}{{{}}}", labels.join(","));
    let mut q = format!(
        "name={}&from={from}&until={until}&format=pprof&spyName=rprof",
        utf8_percent_encode(&name, QUERY)
    );
    if let Some(rate) = rate {
        q.push_str(&format!("&sampleRate={rate}"));
    }
    q
}

/// The `sample_type_config` of rprof's sample types: `samples` (count), `cpu` (nanoseconds on CPU) and
/// `off_cpu` (nanoseconds blocked), each summed when profiles merge, none cumulative.
pub(super) const SAMPLE_TYPE_CONFIG: &str = concat!(
    r#"{"samples":{"units":"samples","display-name":"cpu_samples","aggregation":"sum","cumulative":false,"sampled":true},"#,
    r#""cpu":{"units":"nanoseconds","display-name":"cpu","aggregation":"sum","cumulative":false,"sampled":false},"#,
    r#""events":{"units":"samples","display-name":"events","aggregation":"sum","cumulative":false,"sampled":false},"#,
    r#""off_cpu":{"units":"nanoseconds","display-name":"off_cpu","aggregation":"sum","cumulative":false,"sampled":false}}"#
);

/// The request (query, content type) and the multipart body of one gzipped pprof.
pub(super) fn request(query: String, pprof_gz: &[u8], seed: u64) -> (Request, Vec<u8>) {
    let mut n = seed;
    let mut boundary = format!("rprof-{n:016x}");
    // A boundary must not occur in the parts.
    while memchr::memmem::find(pprof_gz, boundary.as_bytes()).is_some() {
        n = n.wrapping_mul(6364136223846793005).wrapping_add(1);
        boundary = format!("rprof-{n:016x}");
    }
    let mut body = Vec::with_capacity(pprof_gz.len() + 1024);
    let part = |body: &mut Vec<u8>, name: &str, file: &str, ctype: &str, data: &[u8]| {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{file}\"\r\n\
                 Content-Type: {ctype}\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(data);
        body.extend_from_slice(b"\r\n");
    };
    part(
        &mut body,
        "profile",
        "profile.pprof",
        "application/octet-stream",
        pprof_gz,
    );
    part(
        &mut body,
        "sample_type_config",
        "sample_type_config.json",
        "application/json",
        SAMPLE_TYPE_CONFIG.as_bytes(),
    );
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    let request = Request {
        kind: "pyroscope".into(),
        query,
        content_type: format!("multipart/form-data; boundary={boundary}"),
        to: None,
    };
    (request, body)
}

#[cfg(test)]
mod tests {
    /// Check that the application name carries its labels sorted and escaped, and the period in seconds.
    #[test]
    fn query_names_app_and_labels() {
        let labels = vec![
            ("host".to_string(), "web-1".to_string()),
            ("env".to_string(), "prod".to_string()),
        ];
        let q = super::query("shop.cpu", &labels, 100, 115, Some(19));
        assert_eq!(
            q,
            "name=shop.cpu%7Benv%3Dprod%2Chost%3Dweb-1%7D&from=100&until=115&format=pprof&spyName=rprof\
             &sampleRate=19"
        );
    }
}
