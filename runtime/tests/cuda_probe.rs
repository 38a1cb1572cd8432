//! Probing for CUDA libraries: a missing one is a typed error naming where smelt looked.

use smelt_runtime::cuda::probe::{find_driver, find_include_dir, find_nvrtc, find_ptxas};
use smelt_runtime::cuda::{driver, nvrtc, CudaComponent, CudaError, FoundVia, Nvrtc, ProbeConfig};
use std::path::PathBuf;
use std::process::Command;

const CHILD_ENV: &str = "SMELT_PROBE_TEST_CHILD";

#[test]
fn explicit_nvrtc_path_that_does_not_exist_is_a_typed_error() {
    let missing = PathBuf::from("/nonexistent/smelt/libnvrtc.so.12");
    let cfg = ProbeConfig {
        nvrtc_lib: Some(missing.clone()),
        ..ProbeConfig::from_env()
    };
    let err = find_nvrtc(&cfg).unwrap_err();
    let CudaError::NotFound {
        component,
        env_var,
        ref attempts,
    } = err
    else {
        panic!("expected NotFound, got {err:?}");
    };
    assert_eq!(component, CudaComponent::Nvrtc);
    assert_eq!(env_var, "SMELT_NVRTC_LIB");
    assert_eq!(
        attempts.len(),
        1,
        "an explicit path is the only place looked at: {attempts:?}"
    );
    assert!(attempts[0]
        .tried
        .contains("/nonexistent/smelt/libnvrtc.so.12"));
    let shown = err.to_string();
    assert!(
        shown.contains("NVRTC") && shown.contains("install-cuda-tools.sh"),
        "{shown}"
    );
    // Loading goes through the same probe.
    assert!(matches!(Nvrtc::load(&cfg), Err(CudaError::NotFound { .. })));
}

#[test]
fn a_file_that_is_not_nvrtc_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("libnvrtc.so.12");
    std::fs::write(&fake, b"not an ELF file").unwrap();
    let cfg = ProbeConfig {
        nvrtc_lib: Some(fake),
        ..ProbeConfig::default()
    };
    let err = find_nvrtc(&cfg).unwrap_err();
    assert!(matches!(err, CudaError::NotFound { .. }), "{err:?}");
}

#[test]
fn nothing_to_search_lists_every_place_looked() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = ProbeConfig {
        tool_dirs: vec![dir.path().to_path_buf()],
        system: false,
        ..ProbeConfig::default()
    };
    for err in [
        find_nvrtc(&cfg).unwrap_err(),
        err_of(find_include_dir(&cfg)),
        err_of(find_ptxas(&cfg)),
    ] {
        let CudaError::NotFound { ref attempts, .. } = err else {
            panic!("expected NotFound, got {err:?}");
        };
        assert!(
            attempts
                .iter()
                .any(|a| a.tried.starts_with(&*dir.path().to_string_lossy())),
            "{err}"
        );
    }
    // No PyPI wheel ships the driver, so tool folders are not searched for it.
    assert!(matches!(
        find_driver(&cfg),
        Err(CudaError::NotFound {
            component: CudaComponent::Driver,
            ..
        })
    ));
}

fn err_of(r: Result<PathBuf, CudaError>) -> CudaError {
    match r {
        Ok(p) => panic!("unexpectedly found {}", p.display()),
        Err(e) => e,
    }
}

#[test]
fn installed_tools_are_found_in_the_tool_dir() {
    let cfg = ProbeConfig::from_env();
    match find_nvrtc(&cfg) {
        Ok(loc) => {
            println!("NVRTC: {} via {:?}", loc.path.display(), loc.via);
            if matches!(loc.via, FoundVia::ToolDir(_)) {
                assert!(
                    find_include_dir(&cfg).is_ok(),
                    "the wheels install the headers too"
                );
                assert!(find_ptxas(&cfg).is_ok(), "the wheels install ptxas too");
            }
        }
        Err(e) => println!("installed_tools_are_found_in_the_tool_dir: skipped, {e}"),
    }
}

/// A tool folder laid out as CUDA 13's PyPI wheels install themselves (`nvidia/cu13/{lib,
/// include,bin}`) is searched as well as CUDA 12's per-wheel folders. The files here are links
/// to the NVRTC, headers and ptxas this machine has (whatever their release: the probe only
/// checks that a library opens and exports `nvrtcVersion`, and that the files exist).
#[test]
fn cuda13_wheel_layout_is_found_in_a_tool_dir() {
    let cfg = ProbeConfig::from_env();
    let (nvrtc_lib, include, ptxas) =
        match (find_nvrtc(&cfg), find_include_dir(&cfg), find_ptxas(&cfg)) {
            (Ok(n), Ok(i), Ok(p)) if n.path.is_absolute() => (n.path, i, p),
            found => {
                if std::env::var_os("SMELT_REQUIRE_NVRTC").is_some() {
                    panic!(
                    "SMELT_REQUIRE_NVRTC is set but the CUDA tools are not all found: {found:?}"
                );
                }
                println!("cuda13_wheel_layout_is_found_in_a_tool_dir: skipped, {found:?}");
                return;
            }
        };
    let dir = tempfile::tempdir().unwrap();
    let cu13 = dir.path().join("nvidia/cu13");
    std::fs::create_dir_all(cu13.join("lib")).unwrap();
    std::fs::create_dir_all(cu13.join("bin")).unwrap();
    let link = |from: &std::path::Path, to: PathBuf| std::os::unix::fs::symlink(from, to).unwrap();
    link(&nvrtc_lib, cu13.join("lib/libnvrtc.so.13"));
    link(&include, cu13.join("include"));
    link(&ptxas, cu13.join("bin/ptxas"));
    let only_here = ProbeConfig {
        tool_dirs: vec![dir.path().to_path_buf()],
        system: false,
        ..ProbeConfig::default()
    };
    let loc = find_nvrtc(&only_here).unwrap();
    assert_eq!(loc.path, cu13.join("lib/libnvrtc.so.13"));
    assert_eq!(loc.via, FoundVia::ToolDir(dir.path().to_path_buf()));
    assert_eq!(find_include_dir(&only_here).unwrap(), cu13.join("include"));
    assert_eq!(find_ptxas(&only_here).unwrap(), cu13.join("bin/ptxas"));
    // NVRTC found there loads.
    let n = Nvrtc::load(&only_here).unwrap();
    assert!(n.version().0 >= 11, "{n:?}");

    // A folder with both layouts answers with CUDA 12's, for every piece alike.
    let cu12 = dir.path().join("nvidia/cuda_nvrtc/lib");
    std::fs::create_dir_all(&cu12).unwrap();
    link(&nvrtc_lib, cu12.join("libnvrtc.so.12"));
    assert_eq!(
        find_nvrtc(&only_here).unwrap().path,
        cu12.join("libnvrtc.so.12")
    );
}

#[test]
fn missing_driver_is_an_error_not_a_panic() {
    // On a machine without the NVIDIA driver this is NotFound; with one, Ok.
    match driver() {
        Ok(d) => println!(
            "driver {} at {}",
            d.version,
            d.library.location.path.display()
        ),
        Err(e) => {
            assert!(
                matches!(
                    e,
                    CudaError::NotFound {
                        component: CudaComponent::Driver,
                        ..
                    }
                ),
                "{e:?}"
            );
            println!("no driver: {e}");
        }
    }
}

/// Run as a child process with SMELT_NVRTC_LIB pointing nowhere: the process-wide probe
/// reads the variable and answers with a typed error.
#[test]
fn child_env_nvrtc_missing() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return; // only meaningful inside the child spawned below
    }
    let err = nvrtc().unwrap_err();
    assert!(
        matches!(
            err,
            CudaError::NotFound {
                component: CudaComponent::Nvrtc,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("/nonexistent/libnvrtc.so.12"),
        "{err}"
    );
}

#[test]
fn smelt_nvrtc_lib_env_var_is_honoured() {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_env_nvrtc_missing",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .env("SMELT_NVRTC_LIB", "/nonexistent/libnvrtc.so.12")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("1 passed"), "{stdout}");
}

#[test]
fn numbered_source_right_aligns_line_numbers() {
    let src: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    let numbered = smelt_runtime::cuda::numbered_source(&src);
    let lines: Vec<&str> = numbered.lines().collect();
    assert_eq!(lines[0], " 1 | line 1");
    assert_eq!(lines[9], "10 | line 10");
    assert_eq!(smelt_runtime::cuda::numbered_source(""), "");
}
