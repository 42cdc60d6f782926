//! `meshwrap install DIR`: copy this executable into DIR as `DIR/meshwrap`.
//!
//! This is what an init container runs to put meshwrap into a shared
//! `emptyDir`, so its image can be `FROM scratch` with nothing but the binary:
//! no `cp`, no shell. The copy is atomic: written to a temporary name in DIR,
//! flushed to disk, made executable, then renamed over the destination. A
//! reader never sees a half-written binary, and a copy that is running
//! (a restarted pod reusing the volume) is replaced instead of hitting
//! "text file busy".
//!
//! Any number of installs may share the directory: in a container every one
//! is pid 1, so the temporary file's name is random and created with
//! O_EXCL, and only that file is ever removed. A leftover from a killed
//! install keeps its name and is never reused.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Runs `install` with the arguments after it; returns the exit code.
pub fn main(args: &[OsString]) -> u8 {
    let dir = match args {
        [dir] if !dir.is_empty() && dir != "-h" && dir != "--help" => PathBuf::from(dir),
        _ => {
            crate::log::stderr_line("meshwrap: install takes one argument, the directory: meshwrap install DIR");
            return crate::config::EXIT_MESHWRAP_FAILED;
        }
    };
    match install(&dir) {
        Ok(destination) => {
            crate::log::stdout(&format!("{}\n", destination.display()));
            0
        }
        Err(why) => {
            crate::log::stderr_line(&format!("meshwrap: cannot install into {}: {why}", dir.display()));
            crate::config::EXIT_MESHWRAP_FAILED
        }
    }
}

/// Copies the running executable to `dir/meshwrap`; returns that path.
pub fn install(dir: &Path) -> Result<PathBuf, String> {
    if dir.exists() && !dir.is_dir() {
        return Err("it is not a directory".into());
    }
    fs::create_dir_all(dir).map_err(|e| format!("cannot create it: {e}"))?;
    let destination = dir.join("meshwrap");
    let result = match create_temporary(dir) {
        Ok((temporary, file)) => {
            let copied = copy_self(file).and_then(|()| fs::rename(&temporary, &destination));
            if copied.is_err() {
                // Ours alone: it was created with O_EXCL under a name nobody else drew.
                let _ = fs::remove_file(&temporary);
            }
            copied
        }
        Err(e) => Err(e),
    };
    if let Err(e) = result {
        return Err(
            if e.kind() == io::ErrorKind::PermissionDenied || e.raw_os_error() == Some(libc::EROFS) {
                format!("it is not writable ({e})")
            } else {
                e.to_string()
            },
        );
    }
    // The rename is durable only once the directory entry is on disk.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(destination)
}

/// Creates a new temporary file in `dir` under a random name, with
/// O_EXCL: any number of installers may share the directory (in a
/// container every one of them is pid 1, so a pid-based name would
/// collide), and a leftover from a killed install is never reused, opened
/// or removed; it only takes up its name. `kubectl-meshwrap inject
/// --in-place` writes its files through it too.
pub fn create_temporary(dir: &Path) -> io::Result<(PathBuf, File)> {
    let mut last = io::Error::from(io::ErrorKind::AlreadyExists);
    for _ in 0..16 {
        let path = dir.join(format!(".meshwrap.{:016x}.tmp", random()?));
        match OpenOptions::new().write(true).create_new(true).mode(0o700).open(&path) {
            Ok(file) => return Ok((path, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

/// 64 random bits from the kernel.
fn random() -> io::Result<u64> {
    let mut bytes = [0u8; 8];
    // SAFETY: getrandom writes at most 8 bytes into the 8-byte buffer.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if n == 8 {
        Ok(u64::from_ne_bytes(bytes))
    } else {
        Err(io::Error::last_os_error())
    }
}

fn copy_self(mut target: File) -> io::Result<()> {
    // /proc/self/exe opens the running binary even if its path has changed.
    let mut source = File::open("/proc/self/exe").or_else(|_| File::open(std::env::current_exe()?))?;
    io::copy(&mut source, &mut target)?;
    target.sync_all()?;
    // Set explicitly: the mode given at creation is reduced by the umask.
    target.set_permissions(fs::Permissions::from_mode(0o755))?;
    Ok(())
}
