//! A loop device for block I/O tests (biolatency, biosnoop), and its counters in /proc/diskstats.
use std::process::Command;

/// A loop device over a 200 MB file (sparse: reading it costs no disk), detached when dropped.
pub struct LoopDevice {
    pub dev: String,
    _dir: tempfile::TempDir,
}

impl LoopDevice {
    pub fn new() -> Result<LoopDevice, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let img = dir.path().join("disk.img");
        let file = std::fs::File::create(&img).map_err(|e| e.to_string())?;
        file.set_len(200 << 20).map_err(|e| e.to_string())?;
        let out = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(&img)
            .output()
            .map_err(|e| format!("losetup: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "losetup -f --show failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        Ok(LoopDevice { dev, _dir: dir })
    }

    /// `loop0`.
    pub fn name(&self) -> &str {
        self.dev.trim_start_matches("/dev/")
    }

    /// (reads + writes completed, ms spent reading + writing), fields 4, 8, 7 and 11 of /proc/diskstats.
    pub fn diskstats(&self) -> (u64, u64) {
        let text = std::fs::read_to_string("/proc/diskstats").expect("read /proc/diskstats");
        let f: Vec<u64> = text
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|f| f.get(2) == Some(&self.name()))
            .expect("the loop device is in /proc/diskstats")
            .iter()
            .skip(3)
            .map(|v| v.parse().unwrap_or(0))
            .collect();
        (f[0] + f[4], f[3] + f[7])
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
    }
}
