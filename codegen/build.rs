//! Records the full LLVM version (e.g. `14.0.6`) for kernel cache keys: LLVM 14's C API has no
//! version query, so it is read from the `llvm-config` that `llvm-sys` found (the `links`
//! metadata `DEP_LLVM_14_CONFIG_PATH`, present only with the `llvm` feature).

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
}
