//! The rooms and who may import whom (docs/architecture.md), checked by
//! scanning the sources: the engine (`guard`, `sidecar`, `supervise`) and
//! the resolved `config` never reach up into the command line, and
//! `sidecar` and `supervise` never import each other. A `use` that breaks a
//! rule fails here with the file and the line.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files
}

/// The room's files: `src/NAME.rs` and everything under `src/NAME/`.
fn room(name: &str) -> Vec<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let dir = src.join(name);
    let mut files = if dir.is_dir() { sources(&dir) } else { Vec::new() };
    let single = src.join(format!("{name}.rs"));
    if single.exists() {
        files.push(single);
    }
    assert!(!files.is_empty(), "no sources for the room {name}");
    files
}

/// Lines of the room that name one of the forbidden rooms as a path
/// (`crate::cli`, `crate::cli::x`, `use crate::{cli, ...}` and the like).
fn violations(name: &str, forbidden: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for file in room(name) {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for other in forbidden {
                let as_path = [
                    format!("crate::{other}"),
                    format!("super::{other}"),
                    format!("meshwrap::{other}"),
                ];
                let in_group = code
                    .split_once("crate::{")
                    .is_some_and(|(_, group)| group.split([',', '}', ' ']).any(|item| item == *other));
                if as_path.iter().any(|p| code.contains(p.as_str())) || in_group {
                    found.push(format!(
                        "{}:{}: {} imports {other}: {}",
                        file.display(),
                        n + 1,
                        name,
                        line.trim()
                    ));
                }
            }
        }
    }
    found
}

#[test]
fn the_engine_and_the_config_never_import_the_command_line() {
    let mut found = Vec::new();
    for name in ["guard", "sidecar", "supervise", "config"] {
        found.extend(violations(name, &["cli"]));
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn sidecar_and_supervise_never_import_each_other() {
    let mut found = violations("sidecar", &["supervise"]);
    found.extend(violations("supervise", &["sidecar"]));
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_scan_sees_a_violation() {
    // The scan itself: a room that does import what it is checked against.
    assert!(!violations("cli", &["config"]).is_empty());
}

#[test]
fn the_mesh_facts_table_imports_nothing_of_either_program() {
    // src/meshes.rs is data and pure functions, read by meshwrap's engine
    // and by kubectl-meshwrap alike.
    let found = violations("meshes", &["cli", "config", "sidecar", "supervise", "guard", "log"]);
    assert!(found.is_empty(), "{}", found.join("\n"));
}
