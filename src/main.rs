//! The `meshwrap` binary: everything lives in the library; see its docs.

use std::process::ExitCode;

/// Small blocks are recycled instead of going back to the kernel (see `alloc`).
#[global_allocator]
static ALLOCATOR: meshwrap::alloc::SmallAlloc = meshwrap::alloc::SmallAlloc::new();

fn main() -> ExitCode {
    ExitCode::from(meshwrap::main(std::env::args_os()))
}
