//! `meshwrap install DIR`: copy this executable into DIR as `DIR/meshwrap`.
//!
//! This is what an init container runs to put meshwrap into a shared
//! `emptyDir`, so its image can be `FROM scratch` with nothing but the binary:
//! no `cp`, no shell. The copy is atomic: written to a temporary name in DIR,
//! flushed to disk, made executable, then renamed over the destination. A
//! reader never sees a half-written binary, and a copy that is running
//! (a restarted pod reusing the volume) is replaced instead of hitting
//! "text file busy".

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
            eprintln!("meshwrap: install takes one argument, the directory: meshwrap install DIR");
            return crate::EXIT_MESHWRAP_FAILED;
        }
    };
    match install(&dir) {
        Ok(destination) => {
            println!("{}", destination.display());
            0
        }
        Err(why) => {
            eprintln!("meshwrap: cannot install into {}: {why}", dir.display());
            crate::EXIT_MESHWRAP_FAILED
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
    let temporary = dir.join(format!(".meshwrap.{}.tmp", std::process::id()));
    let result = copy_self(&temporary).and_then(|()| fs::rename(&temporary, &destination));
    if let Err(e) = result {
        let _ = fs::remove_file(&temporary);
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

fn copy_self(to: &Path) -> io::Result<()> {
    // /proc/self/exe opens the running binary even if its path has changed.
    let mut source = File::open("/proc/self/exe").or_else(|_| File::open(std::env::current_exe()?))?;
    let mut target = OpenOptions::new().write(true).create_new(true).mode(0o700).open(to)?;
    io::copy(&mut source, &mut target)?;
    target.sync_all()?;
    // Set explicitly: the mode given at creation is reduced by the umask.
    target.set_permissions(fs::Permissions::from_mode(0o755))?;
    Ok(())
}
