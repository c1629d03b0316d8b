//! One job per directory at a time: an exclusive `flock` on a file in it,
//! held while the job runs and released by the kernel however its process
//! ends (a kill included), with the holder's pid inside for whoever is
//! refused.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::Path;

/// A lock taken with [`take`]; released when dropped.
#[derive(Debug)]
pub struct DirLock {
    _file: nix::fcntl::Flock<File>,
}

/// Why a lock was not taken.
#[derive(Debug)]
pub enum Refused {
    /// Another process holds it (its pid, when it wrote one).
    Held {
        pid: Option<u32>,
    },
    Io(std::io::Error),
}

/// Takes the lock file `path` (created if missing) without waiting, and
/// writes this process's pid into it.
pub fn take(path: &Path) -> Result<DirLock, Refused> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(Refused::Io)?;
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(mut lock) => {
            let _ = lock.set_len(0);
            let _ = lock.rewind();
            let _ = writeln!(lock, "{}", std::process::id());
            Ok(DirLock { _file: lock })
        }
        Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => {
            let mut holder = String::new();
            let _ = Read::by_ref(&mut file).take(32).read_to_string(&mut holder);
            Err(Refused::Held { pid: holder.trim().parse().ok() })
        }
        Err((_, e)) => Err(Refused::Io(e.into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_taker_is_refused_with_the_holders_pid_until_the_first_lets_go() {
        let dir = std::env::temp_dir().join(format!("sts-dirlock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("lock");
        let first = take(&path).unwrap();
        // flock locks belong to the open file: a second open is refused
        // even in the same process.
        match take(&path) {
            Err(Refused::Held { pid }) => assert_eq!(pid, Some(std::process::id())),
            other => panic!("{other:?}"),
        }
        drop(first);
        assert!(take(&path).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
