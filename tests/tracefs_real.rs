//! The tracefs layer on the real tracefs (needs root): create, list, id and remove uprobes on a built fixture.
mod common;
use rprof::tracefs::{ProbeDef, ProbeFile, ProbeLocation, Tracefs};
use std::process::Command;

/// Check that uprobes (several points in one event) are created, get an id and a format, and are removed.
#[test]
fn real_tracefs_roundtrip() {
    let t = match Tracefs::find_or_mount() {
        Ok(t) if nix::unistd::geteuid().is_root() && t.root().join("uprobe_events").exists() => t,
        other => {
            let why = format!(
                "needs root and tracefs with uprobe_events ({:?})",
                other.err()
            );
            common::skip("real_tracefs_roundtrip", &why);
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("fixture");
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/probe_fixture.c");
    assert!(Command::new("cc")
        .args(["-O1", "-pthread", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .unwrap()
        .success());
    // Not `rprof_<pid>`: a concurrently starting rprof would take this test's group for a dead rprof's.
    let group = format!("rproftest_{}", std::process::id());
    let defs: Vec<ProbeDef> = [0x1000u64, 0x1010]
        .iter()
        .flat_map(|&off| {
            [false, true].map(|ret| ProbeDef {
                group: group.clone(),
                event: if ret { "ur0".into() } else { "u0".into() },
                is_return: ret,
                location: ProbeLocation::User {
                    path: bin.clone(),
                    offset: off,
                    ref_ctr: None,
                },
                fetch: vec!["sp=%sp".into()],
            })
        })
        .collect();
    t.add_probes(&defs).unwrap();
    let listed: Vec<_> = t
        .list_probes(ProbeFile::Uprobe)
        .unwrap()
        .into_iter()
        .filter(|p| p.group == group)
        .collect();
    assert_eq!(listed.len(), 4);
    assert!(t.event_id(&group, "u0").unwrap() > 0);
    assert_eq!(t.field_offset(&group, "u0", "__probe_ip").unwrap(), Some(8));
    assert_eq!(
        t.field_offset(&group, "ur0", "__probe_func").unwrap(),
        Some(8)
    );
    t.remove_group(&group).unwrap();
    assert!(t
        .list_probes(ProbeFile::Uprobe)
        .unwrap()
        .iter()
        .all(|p| p.group != group));
    assert!(!t.root().join("events").join(&group).exists());
}
