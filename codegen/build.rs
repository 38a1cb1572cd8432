//! Records, for kernel cache keys:
//! - the full LLVM version (e.g. `14.0.6`): LLVM 14's C API has no version query, so it is read
//!   from the `llvm-config` that `llvm-sys` found (the `links` metadata
//!   `DEP_LLVM_14_CONFIG_PATH`, present only with the `llvm` feature);
//! - a hash of this crate's sources (`SMELT_CODEGEN_SOURCE_HASH`): machine code cached on disk
//!   is keyed by the kernel IR it was generated from, and a change to the code generator must
//!   not find the old code (the crate version does not change with every commit).

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_LLVM_14_CONFIG_PATH");
    let version = std::env::var("DEP_LLVM_14_CONFIG_PATH")
        .ok()
        .and_then(|config| Command::new(config).arg("--version").output().ok())
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "14.unknown".to_string());
    println!("cargo:rustc-env=SMELT_LLVM_VERSION={version}");

    println!("cargo:rerun-if-changed=src");
    let mut files = Vec::new();
    collect(Path::new("src"), &mut files);
    files.sort();
    let mut h = Sha256::new();
    for f in &files {
        h.update(f.to_string_lossy().as_bytes());
        h.update([0]);
        h.update(std::fs::read(f).unwrap_or_default());
        h.update([0]);
    }
    let digest: String = h.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    println!("cargo:rustc-env=SMELT_CODEGEN_SOURCE_HASH={digest}");
}

/// Every file under `dir`, recursively.
fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(&p, out);
        } else {
            out.push(p);
        }
    }
}
