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

/// The per-CPU backlogs and the `ksoftirqd` threads, kept open: those of
/// the CPUs sts may run on (its controllers inherit them), since a packet
/// waits in the backlog of the CPU its writer ran on.
pub(crate) struct KernelQueues {
    softnet: std::fs::File,
    /// The CPUs looked at.
    cpus: Vec<usize>,
    /// Each of their `ksoftirqd` threads' `/proc/PID/stat`.
    softirqd: Vec<std::fs::File>,
    /// `softnet_stat`'s text, read again at every look.
    text: Vec<u8>,
}

/// The `ksoftirqd` threads: (CPU, thread id), found once (kernel threads
/// live as long as the machine).
fn softirq_threads() -> &'static [(usize, u64)] {
    static THREADS: std::sync::OnceLock<Vec<(usize, u64)>> = std::sync::OnceLock::new();
    THREADS.get_or_init(|| {
        let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
        let mut found: Vec<(usize, u64)> = dir
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u64>().ok())
            .filter_map(|pid| {
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
                Some((comm.trim().strip_prefix("ksoftirqd/")?.parse().ok()?, pid))
            })
            .collect();
        found.sort_unstable();
        found
    })
}

/// The CPUs this process may run on.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set, and sched_getaffinity
    // writes at most its size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } == 0;
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: CPU_ISSET reads the set within its size.
    (0..max).filter(|&c| !ok || unsafe { libc::CPU_ISSET(c, &set) }).collect()
}

impl KernelQueues {
    /// Opens what the test reads; `None` where the kernel does not show it
    /// (no backlog length in `softnet_stat`, before Linux 5.10, or no
    /// `ksoftirqd` visible, as in a container with its own process ids):
    /// then the idle test keeps its quiet spell.
    pub(crate) fn open() -> Option<KernelQueues> {
        let softnet = std::fs::File::open("/proc/net/softnet_stat").ok()?;
        let threads = softirq_threads();
        // Every allowed CPU that is online (has a ksoftirqd) is looked at.
        let cpus: Vec<usize> = allowed_cpus().into_iter().filter(|c| threads.iter().any(|t| t.0 == *c)).collect();
        let softirqd: Vec<std::fs::File> = threads
            .iter()
            .filter(|(cpu, _)| cpus.contains(cpu))
            .filter_map(|(_, pid)| std::fs::File::open(format!("/proc/{pid}/stat")).ok())
            .collect();
        if cpus.is_empty() || softirqd.len() < cpus.len() {
            return None;
        }
        let mut q = KernelQueues { softnet, cpus, softirqd, text: Vec::with_capacity(4096) };
        q.backlog()?;
        Some(q)
    }

    /// Packets waiting in the backlogs of the CPUs looked at, `None` if the
    /// file does not say (fewer than 13 columns: no backlog length and CPU
    /// index).
    fn backlog(&mut self) -> Option<u64> {
        self.text.clear();
        let mut chunk = [0u8; 16384];
        loop {
            let n = self.softnet.read_at(&mut chunk, self.text.len() as u64).ok()?;
            self.text.extend_from_slice(&chunk[..n]);
            // A proc file fills what it can with whole lines (of about 140
            // bytes here): a read that left room for another was its end.
            if n + 512 < chunk.len() {
                break;
            }
        }
        let text = std::str::from_utf8(&self.text).ok()?;
        let mut total = 0;
        for line in text.lines() {
            let fields: Vec<&str> = line.split_ascii_whitespace().collect();
            if fields.len() < 13 {
                return None;
            }
            let cpu = usize::from_str_radix(fields[12], 16).ok()?;
            if self.cpus.contains(&cpu) {
                total += u64::from_str_radix(fields[11], 16).ok()?;
            }
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
