//! The kernel's own queue of network work, read by the idle test of virtual
//! time (`docs/virtual-time.md`).
//!
//! A write on a loopback TCP connection is delivered into the receiving
//! socket, and its reader woken, inside the writer's own system call: the
//! loopback device queues the packet on the CPU's *backlog* and the softirq
//! run as the call leaves its critical section takes it off again. Only when
//! that softirq work runs over its budget does the kernel leave the rest in
//! the backlog for its `ksoftirqd` thread. So, once sts's writes have
//! returned, a packet is either delivered (its reader runnable) or still in
//! a backlog (`/proc/net/softnet_stat`'s queue length) or being taken off it
//! by a running `ksoftirqd`. The idle test asks this between its two looks
//! instead of waiting a quiet spell for it.

use std::os::unix::fs::FileExt;

/// The per-CPU backlogs and the `ksoftirqd` threads, kept open.
pub(crate) struct KernelQueues {
    softnet: std::fs::File,
    /// Each `ksoftirqd` thread's `/proc/PID/stat`.
    softirqd: Vec<std::fs::File>,
}

/// The `ksoftirqd` threads' ids (found once: kernel threads live as long as
/// the machine).
fn softirq_threads() -> &'static [u64] {
    static PIDS: std::sync::OnceLock<Vec<u64>> = std::sync::OnceLock::new();
    PIDS.get_or_init(|| {
        let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
        let mut pids: Vec<u64> = dir
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u64>().ok())
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.starts_with("ksoftirqd/"))
            })
            .collect();
        pids.sort_unstable();
        pids
    })
}

impl KernelQueues {
    /// Opens what the test reads; `None` where the kernel does not show it
    /// (no backlog length in `softnet_stat`, before Linux 5.10, or no
    /// `ksoftirqd` visible, as in a container with its own process ids):
    /// then the idle test keeps its quiet spell.
    pub(crate) fn open() -> Option<KernelQueues> {
        let softnet = std::fs::File::open("/proc/net/softnet_stat").ok()?;
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let softirqd: Vec<std::fs::File> =
            softirq_threads().iter().filter_map(|pid| std::fs::File::open(format!("/proc/{pid}/stat")).ok()).collect();
        if softirqd.len() < cpus {
            return None;
        }
        let mut q = KernelQueues { softnet, softirqd };
        q.backlog()?;
        Some(q)
    }

    /// Packets waiting in every CPU's backlog, `None` if the file does not
    /// say (fewer than 13 columns: no backlog length and CPU index).
    fn backlog(&mut self) -> Option<u64> {
        let mut buf = [0u8; 4096];
        let n = self.softnet.read_at(&mut buf, 0).ok()?;
        let text = std::str::from_utf8(&buf[..n]).ok()?;
        let mut total = 0;
        for line in text.lines() {
            let fields: Vec<&str> = line.split_ascii_whitespace().collect();
            if fields.len() < 13 {
                return None;
            }
            total += u64::from_str_radix(fields[11], 16).ok()?;
        }
        Some(total)
    }

    /// True when no packet waits for the kernel's softirq work: every
    /// backlog empty and no `ksoftirqd` running or runnable.
    pub(crate) fn quiet(&mut self) -> bool {
        if self.backlog() != Some(0) {
            return false;
        }
        let mut buf = [0u8; 64];
        self.softirqd.iter().all(|f| {
            let Ok(n) = f.read_at(&mut buf, 0) else { return true };
            let line = &buf[..n];
            let Some(close) = line.iter().rposition(|&b| b == b')') else { return false };
            // Sleeping (`S`, or `I` as some kernels show idle kernel threads).
            matches!(line[close + 1..].iter().find(|b| !b.is_ascii_whitespace()), Some(b'S' | b'I'))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machines_kernel_shows_its_queues_and_they_drain() {
        // The machines sts is tested on run Linux 6: it must see them.
        let mut q = KernelQueues::open().expect("softnet_stat with backlog lengths and the ksoftirqd threads");
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !q.quiet() {
            assert!(std::time::Instant::now() < until, "the kernel's network queues never drained");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}
