//! Waits announced: how sts learns, the moment it happens, that a controller
//! thread entered a wait (and so the run may have become idle), instead of
//! looking for it on a timer.
//!
//! The shim bumps the clock page's waits-entered counter as a thread enters
//! any wait it follows and, while sts listens, wakes the futex on it
//! (`sts_clockpage::Page::announce_wait`). One thread per clock page sleeps
//! on that futex here and passes each wake-up on to the run's loop through a
//! [`tokio::sync::Notify`], which keeps one permit: an announcement made
//! while the loop is busy is seen by its next wait, never lost.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use sts_clockpage::Page;

/// A clock page mapped in sts, shared by the [`crate::clock::VirtualTime`]
/// that made it and the listening thread (which may outlive it by a wake-up).
pub(crate) struct Mapping {
    pub(crate) fd: OwnedFd,
    ptr: *mut u8,
}

// SAFETY: the mapping is shared memory only ever accessed through atomics.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl Mapping {
    /// A fresh memfd of the page's size, mapped shared.
    pub(crate) fn create() -> std::io::Result<Mapping> {
        use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
        use nix::sys::mman::{mmap, MapFlags, ProtFlags};
        let fd = memfd_create(c"sts-clock", MemFdCreateFlag::MFD_CLOEXEC)?;
        nix::unistd::ftruncate(&fd, sts_clockpage::BYTES as i64)?;
        let len = std::num::NonZeroUsize::new(sts_clockpage::BYTES).expect("non-zero");
        // SAFETY: a fresh shared mapping of a file we own, unmapped only on drop.
        let ptr =
            unsafe { mmap(None, len, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE, MapFlags::MAP_SHARED, &fd, 0)? };
        Ok(Mapping { fd, ptr: ptr.as_ptr().cast() })
    }

    /// The page.
    pub(crate) fn page(&self) -> Page<'_> {
        // SAFETY: `ptr` is a live mapping of BYTES bytes for self's lifetime,
        // accessed only atomically.
        unsafe { Page::from_ptr(self.ptr) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if let Some(p) = std::ptr::NonNull::new(self.ptr.cast()) {
            // SAFETY: the mapping made in `create`, no longer used by anyone.
            unsafe {
                let _ = nix::sys::mman::munmap(p, sts_clockpage::BYTES);
            }
        }
    }
}

struct Shared {
    map: Arc<Mapping>,
    notify: tokio::sync::Notify,
    stop: AtomicBool,
}

/// The listening thread of one clock page; it ends when this is dropped.
pub(crate) struct Listener {
    shared: Arc<Shared>,
}

/// How long the listener sleeps at most before it looks whether it should
/// end (a wake-up from [`Listener`]'s drop ends it at once).
const STOP_CHECK: std::time::Duration = std::time::Duration::from_millis(200);

impl Listener {
    /// Starts listening on `map`'s page; `None` if no thread can be started
    /// (then the idle test falls back on its timer).
    pub(crate) fn start(map: Arc<Mapping>) -> Option<Listener> {
        let shared = Arc::new(Shared { map, notify: tokio::sync::Notify::new(), stop: AtomicBool::new(false) });
        let s = shared.clone();
        std::thread::Builder::new().name("sts-clock-listen".into()).spawn(move || listen(&s)).ok()?;
        Some(Listener { shared })
    }

    /// Completes after the next wait entered (at once if one was entered
    /// since the last call completed).
    pub(crate) fn announced(&self) -> tokio::sync::futures::Notified<'_> {
        self.shared.notify.notified()
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        futex_wake(self.shared.map.page().waits_futex());
    }
}

fn listen(s: &Shared) {
    let page = s.map.page();
    let mut seen = page.listen(true) as u32;
    while !s.stop.load(Ordering::SeqCst) {
        futex_wait(page.waits_futex(), seen, STOP_CHECK);
        let now = page.waits_entered() as u32;
        if now != seen {
            seen = now;
            s.notify.notify_one();
        }
    }
    page.listen(false);
}

/// Sleeps while `*word == expected`, at most `max` (a shared futex: the
/// word is in memory other processes map).
fn futex_wait(word: *const u32, expected: u32, max: std::time::Duration) {
    let ts = libc::timespec { tv_sec: max.as_secs() as libc::time_t, tv_nsec: max.subsec_nanos() as libc::c_long };
    // SAFETY: FUTEX_WAIT on a word of a live shared mapping, with a timeout
    // of ours; it only reads the word.
    unsafe { libc::syscall(libc::SYS_futex, word, libc::FUTEX_WAIT, expected, &ts as *const libc::timespec) };
}

fn futex_wake(word: *const u32) {
    // SAFETY: FUTEX_WAKE on a word of a live shared mapping.
    unsafe { libc::syscall(libc::SYS_futex, word, libc::FUTEX_WAKE, i32::MAX) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_entered_in_the_page_wakes_the_listener() {
        let map = Arc::new(Mapping::create().unwrap());
        map.page().init();
        let listener = Listener::start(map.clone()).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            // Nothing entered: no announcement within 50 ms.
            let quiet = tokio::time::timeout(std::time::Duration::from_millis(50), listener.announced()).await;
            assert!(quiet.is_err(), "announced with no wait entered");
            // What the shim does as a thread enters a wait (from another thread).
            let m = map.clone();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(20));
                // Wait until the listener listens, as a shim would find it.
                while !m.page().announce_wait() {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                futex_wake(m.page().waits_futex());
            });
            let heard = tokio::time::timeout(std::time::Duration::from_secs(5), listener.announced()).await;
            assert!(heard.is_ok(), "the wait entered was not announced");
        });
        drop(listener);
    }
}
