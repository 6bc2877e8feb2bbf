//! The man pages under docs/man/ are what the clap definitions generate (`rprof generate-man`, clap_mangen):
//! a change to an option's help without regenerating them fails here.
mod common;
use std::path::Path;

/// Check that `rprof generate-man` writes exactly the pages docs/man/ holds, no more and no fewer.
#[test]
fn man_pages_are_current() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    common::rprof_ok(&["generate-man", out]);
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/man");
    let names = |d: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap_or_else(|e| panic!("{}: {e}", d.display()))
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let fix = "regenerate them: cargo run -- generate-man docs/man";
    let generated = names(dir.path());
    assert!(
        generated.contains(&"rprof-probe.1".to_string()),
        "{generated:?}"
    );
    assert_eq!(
        generated,
        names(&committed),
        "docs/man/ has other pages; {fix}"
    );
    for name in &generated {
        let want = std::fs::read_to_string(dir.path().join(name)).unwrap();
        let have = std::fs::read_to_string(committed.join(name)).unwrap();
        assert!(
            want == have,
            "docs/man/{name} is not what the clap definitions generate; {fix}"
        );
    }
}
