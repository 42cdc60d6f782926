//! The `meshwrap` binary: everything lives in the library; see its docs.

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(meshwrap::main(std::env::args_os()))
}
