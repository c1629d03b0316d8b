//! Space kept back so that a job's end can be recorded on a full disk.
//!
//! A job that ran to its end on a disk that filled meanwhile cannot commit
//! its end to the store: it would stay `running`, and a restart would run it
//! again. So the server keeps a file of [`RESERVE_BYTES`] in the data
//! directory (`DATA/reserve`); when recording an end fails for want of
//! space, the file is deleted and the record tried again. Until the file can
//! be made again, new submissions are refused (507), so the space freed goes
//! to the ends of the jobs already running.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// The space kept back: far more than recording a few jobs' ends takes.
pub const RESERVE_BYTES: usize = 8 << 20;

/// The reserve file of a data directory.
pub struct Reserve {
    path: PathBuf,
    /// True while the file is in place, whole.
    held: AtomicBool,
}

impl Reserve {
    /// The reserve of `data`; made at once if it can be.
    pub fn new(data: &Path) -> Reserve {
        let r = Reserve { path: data.join("reserve"), held: AtomicBool::new(false) };
        r.ensure();
        r
    }

    /// Makes the file if it is not in place; true when it is (now).
    pub fn ensure(&self) -> bool {
        if self.held.load(Ordering::SeqCst) {
            return true;
        }
        // Left whole by an earlier start: nothing to write again.
        if std::fs::metadata(&self.path).is_ok_and(|m| m.len() == RESERVE_BYTES as u64) {
            self.held.store(true, Ordering::SeqCst);
            return true;
        }
        let tmp = self.path.with_extension("tmp");
        let made = (|| -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            // Written, not sparse: the blocks must really be taken.
            let chunk = vec![0u8; 1 << 20];
            for _ in 0..RESERVE_BYTES / chunk.len() {
                f.write_all(&chunk)?;
            }
            f.sync_all()?;
            std::fs::rename(&tmp, &self.path)
        })();
        match made {
            Ok(()) => {
                self.held.store(true, Ordering::SeqCst);
                true
            }
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                tracing::warn!("cannot keep {} MiB in reserve at {}: {e}", RESERVE_BYTES >> 20, self.path.display());
                false
            }
        }
    }

    /// Deletes the file, freeing its space; true when there was one.
    pub fn release(&self) -> bool {
        let was = self.held.swap(false, Ordering::SeqCst);
        was && std::fs::remove_file(&self.path).is_ok()
    }
}

/// Whether an error's text says the disk (or a quota) is full.
pub fn is_full(error: &str) -> bool {
    let e = error.to_ascii_lowercase();
    e.contains("database or disk is full") || e.contains("no space left") || e.contains("quota exceeded")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_is_made_released_and_made_again() {
        let dir = std::env::temp_dir().join(format!("sts-reserve-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let r = Reserve::new(&dir);
        assert_eq!(std::fs::metadata(dir.join("reserve")).unwrap().len(), RESERVE_BYTES as u64);
        assert!(r.release());
        assert!(!dir.join("reserve").exists());
        assert!(!r.release(), "released once");
        assert!(r.ensure());
        assert!(dir.join("reserve").exists());
        assert!(is_full("database or disk is full") && is_full("No space left on device (os error 28)"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
