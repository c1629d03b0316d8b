//! The report of a copy forked before it had any listener (a zygote parked at
//! its first `pthread_create`, `before_first_thread` in `lib.rs`).
//!
//! Such a copy binds its listeners itself, after the fork, on the ports its
//! command line names: every copy the same ones. So until it listens on the
//! OpenFlow port sts awaits, every TCP bind of the copy to a fixed port is
//! made to a free port instead (as `fresh_listener` moves an inherited
//! listener), and reported as `port OLD NEW`; the report ends with `ok` once
//! the OpenFlow listener listens, so sts connects its switches only then.

use std::ffi::c_int;
use std::fs::File;
use std::io::Write;
use std::sync::Mutex;

/// The copy's report, while it is open: the pipe, the port that ends it, and
/// the descriptor bound to that port (once bound).
struct Open {
    report: File,
    port: u16,
    bound: Option<c_int>,
}

static OPEN: Mutex<Option<Open>> = Mutex::new(None);

fn open() -> std::sync::MutexGuard<'static, Option<Open>> {
    // A poisoned lock only means a panic elsewhere; the state is still usable.
    OPEN.lock().unwrap_or_else(|e| e.into_inner())
}

/// Keeps `report` open until the copy listens on `port`.
pub fn start(report: File, port: u16) {
    *open() = Some(Open { report, port, bound: None });
}

/// The port of an IP socket address of `len` bytes at `addr`, if it is an
/// IPv4 or IPv6 address with a fixed (non-zero) port.
///
/// # Safety
///
/// `addr` points to `len` readable bytes (bind's contract).
unsafe fn fixed_port(addr: *const libc::sockaddr, len: libc::socklen_t) -> Option<u16> {
    if addr.is_null() || (len as usize) < std::mem::size_of::<libc::sockaddr_in>() {
        return None;
    }
    // SAFETY: at least a sockaddr_in's bytes (checked), read unaligned.
    let family = unsafe { std::ptr::read_unaligned(addr.cast::<libc::sa_family_t>()) } as c_int;
    if family != libc::AF_INET && family != libc::AF_INET6 {
        return None;
    }
    // sin_port and sin6_port sit at the same offset, after the family.
    // SAFETY: as above; the port follows the two-byte family.
    let port = u16::from_be(unsafe { std::ptr::read_unaligned(addr.cast::<u8>().add(2).cast::<u16>()) });
    (port != 0).then_some(port)
}

fn is_stream(fd: c_int) -> bool {
    let mut kind: c_int = 0;
    let mut len = std::mem::size_of::<c_int>() as libc::socklen_t;
    // SAFETY: getsockopt into our own int, with its true size.
    let r =
        unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_TYPE, (&mut kind as *mut c_int).cast(), &mut len) };
    r == 0 && kind == libc::SOCK_STREAM
}

#[no_mangle]
pub unsafe extern "C" fn bind(fd: c_int, addr: *const libc::sockaddr, len: libc::socklen_t) -> c_int {
    type Bind = unsafe extern "C" fn(c_int, *const libc::sockaddr, libc::socklen_t) -> c_int;
    let real = real!("bind", Bind);
    let mut open = open();
    // SAFETY: the caller's address (bind's contract).
    let old = unsafe { fixed_port(addr, len) };
    let (Some(state), Some(old)) = (open.as_mut(), old) else {
        drop(open);
        // SAFETY: libc's bind with the caller's arguments.
        return unsafe { real(fd, addr, len) };
    };
    if !is_stream(fd) || len as usize > std::mem::size_of::<libc::sockaddr_storage>() {
        drop(open);
        // SAFETY: libc's bind with the caller's arguments.
        return unsafe { real(fd, addr, len) };
    }
    // The same address on a free port.
    // SAFETY: sockaddr_storage is a plain C struct, valid all zero.
    let mut free: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    // SAFETY: `len` bytes of the caller's address into our larger storage
    // (checked above), then the port (at offset 2 for both families) zeroed.
    unsafe {
        std::ptr::copy_nonoverlapping(
            addr.cast::<u8>(),
            (&mut free as *mut libc::sockaddr_storage).cast::<u8>(),
            len as usize,
        );
        std::ptr::write_unaligned((&mut free as *mut libc::sockaddr_storage).cast::<u8>().add(2).cast::<u16>(), 0);
    }
    // SAFETY: libc's bind with our copy of the address, `len` bytes of it.
    let r = unsafe { real(fd, (&free as *const libc::sockaddr_storage).cast(), len) };
    if r == 0 {
        let new = crate::socket_port(fd, false).unwrap_or(0);
        let _ = writeln!(state.report, "port {old} {new}");
        if old == state.port {
            state.bound = Some(fd);
        }
    }
    r
}

/// `fd` listens: if it is the awaited port's, the report ends.
pub fn listening(fd: c_int) {
    let mut open = open();
    if open.as_ref().is_some_and(|s| s.bound == Some(fd)) {
        if let Some(mut state) = open.take() {
            let _ = writeln!(state.report, "ok");
        }
    }
}
