//! rprofs that start at once each remove what dead rprofs left in tracefs (their instances `rprof_<pid>`):
//! when two find the same one, one removes it under the other, which must take that as done, not fail its
//! start. Seen in a whole-suite run: `probe_live_ring::stale_group_is_removed` failed with "cannot remove the
//! tracefs instance .../rprof_3936: No such device" (the SIGKILLed victim's instance, removed by a concurrent
//! test's rprof while this one removed it).
mod common;
use rprof::tracefs::Tracefs;

/// Check that eight threads removing the same stale instance at once all succeed, 30 times over (a dead pid's
/// instance made by hand each time).
#[test]
fn concurrent_stale_removals_all_succeed() {
    if !common::privileged("concurrent_stale_removals_all_succeed") {
        return;
    }
    let tracefs = Tracefs::find_or_mount().expect("tracefs");
    if !tracefs.instance_supported() {
        return common::skip(
            "concurrent_stale_removals_all_succeed",
            "no tracefs instances here",
        );
    }
    // A pid that no process has now: a child's, after it was reaped.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let path = tracefs.root().join(format!("instances/rprof_{dead}"));
    for round in 0..30 {
        std::fs::create_dir(&path)
            .unwrap_or_else(|e| panic!("round {round}: mkdir {}: {e}", path.display()));
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
        let results: Vec<_> = (0..8)
            .map(|_| {
                let (t, b) = (tracefs.clone(), barrier.clone());
                std::thread::spawn(move || {
                    b.wait();
                    rprof::events::group::remove_stale(&t).map_err(|e| e.to_string())
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect();
        for r in &results {
            assert!(r.is_ok(), "round {round}: {r:?}");
        }
        assert!(
            !path.exists(),
            "round {round}: the stale instance is still there"
        );
    }
}
