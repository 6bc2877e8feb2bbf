//! tracefs on a host that has not mounted it (this one at boot): rprofs starting at once all find it.
//! A binary of its own: it unmounts tracefs, which no other test may be using meanwhile.
mod common;
use rprof::tracefs::Tracefs;

/// Check that eight callers of `find_or_mount` racing on an unmounted tracefs all get it: the kernel answers
/// all but the first mount with EBUSY, which is another's mount, not a failure.
#[test]
fn concurrent_starts_all_find_tracefs() {
    if !common::privileged("concurrent_starts_all_find_tracefs") {
        return;
    }
    let root = "/sys/kernel/tracing";
    // Unmount every tracefs stacked there (a mount may hide another), so the premise holds.
    for _ in 0..8 {
        if nix::mount::umount(root).is_err() {
            break;
        }
    }
    if Tracefs::at(root).is_mounted() {
        return common::skip(
            "concurrent_starts_all_find_tracefs",
            "tracefs at /sys/kernel/tracing is in use and cannot be unmounted for the test",
        );
    }
    let found: Vec<_> = (0..8)
        .map(|_| std::thread::spawn(Tracefs::find_or_mount))
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    for r in &found {
        match r {
            Ok(t) => assert!(
                t.is_mounted(),
                "{} found but not mounted",
                t.root().display()
            ),
            Err(e) => panic!("a concurrent start failed: {e}"),
        }
    }
}
