//! The `meshwrap` binary: everything lives in the library; see its docs.
//!
//! No Rust `main`: std's start-up (`lang_start`) spends about a dozen system
//! calls before the first line of meshwrap runs, on things meshwrap does not
//! use: a signal stack and SIGSEGV/SIGBUS handlers to report a stack
//! overflow (meshwrap does not recurse; an overflow still kills it, by
//! SIGSEGV), and the arguments kept for `std::env::args` (meshwrap is given
//! them here). What of it meshwrap relies on is done here, as std does it:
//! descriptors 0-2 are open (on /dev/null if not), so that no socket or
//! signalfd becomes "stderr"; SIGPIPE is ignored, so a write to a closed pipe
//! fails with EPIPE (`install`, before the signal mask is set); and
//! standard output is flushed by every writer (`log::stdout`).

#![no_main]

use std::ffi::{CStr, OsString, c_char, c_int};
use std::os::unix::ffi::OsStringExt;

/// Small blocks are recycled instead of going back to the kernel (see `alloc`).
#[global_allocator]
static ALLOCATOR: meshwrap::alloc::SmallAlloc = meshwrap::alloc::SmallAlloc::new();

#[unsafe(no_mangle)]
extern "C" fn main(argc: c_int, argv: *const *const c_char) -> c_int {
    open_standard_fds();
    // SAFETY: signal takes plain integers; SIG_IGN installs no handler.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    let args = (0..usize::try_from(argc).unwrap_or(0)).map(|i| {
        // SAFETY: the C runtime passes `argc` pointers to NUL-terminated
        // strings that live as long as the process.
        let arg = unsafe { CStr::from_ptr(*argv.add(i)) };
        OsString::from_vec(arg.to_bytes().to_vec())
    });
    c_int::from(meshwrap::main(args))
}

/// Opens /dev/null on whichever of descriptors 0-2 is closed; one `poll`
/// when all are open. Aborts if it cannot, as std does.
fn open_standard_fds() {
    let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    });
    // SAFETY: `fds` is valid for reads and writes of its three entries.
    while unsafe { libc::poll(fds.as_mut_ptr(), 3, 0) } < 0 {
        if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return;
        }
    }
    for pfd in fds.iter().filter(|pfd| pfd.revents & libc::POLLNVAL != 0) {
        // SAFETY: a NUL-terminated path; open returns the lowest free
        // descriptor, which is this closed one (the lower ones are open).
        if unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) } != pfd.fd {
            std::process::abort();
        }
    }
}
