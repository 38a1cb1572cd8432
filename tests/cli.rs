//! The `smelt` binary: exit codes and what it prints.

use smelt::ir::{HostTensor, TensorData};
use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output};

fn smelt(args: &[&str]) -> Output {
    smelt_env(args, &[])
}

/// `smelt ARGS…` with the environment variables `env` set.
fn smelt_env(args: &[&str], env: &[(&str, &OsStr)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_smelt"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("the smelt binary runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const MLP: &str = "%x = input \"x\" : f32[2, 3]\n\
                   %w = param \"w\" : f32[3, 2]\n\
                   %0 = matmul %x, %w\n\
                   %1 = relu %0\n\
                   output \"y\" = %1\n";

/// `smelt run FILE --inputs INPUTS --out OUT EXTRA…`.
fn smelt_run(file: &str, inputs: &Path, out: &Path, extra: &[&str]) -> Output {
    smelt(&run_args(file, inputs, out, extra))
}

/// The arguments of [`smelt_run`].
fn run_args<'a>(file: &'a str, inputs: &'a Path, out: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "run",
        file,
        "--inputs",
        inputs.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    args
}

fn write(dir: &Path, name: &str, contents: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, contents).unwrap();
    p.to_string_lossy().into_owned()
}

#[test]
fn check_prints_every_value_type() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "mlp.smelt", MLP);
    let out = smelt(&["check", &file]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("matmul") && stdout.contains("f32[2, 2]"),
        "{stdout}"
    );
    assert!(stdout.contains("relu"), "{stdout}");
    assert!(stdout.contains("ok: 4 values"), "{stdout}");
}

#[test]
fn check_reports_parse_errors_with_position() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "bad.smelt",
        "%x = input \"x\" : f32[2]\n%0 = add %x\n",
    );
    let out = smelt(&["check", &file]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("bad.smelt") && stderr.contains("line 2"),
        "{stderr}"
    );
}

#[test]
fn run_reads_and_writes_safetensors() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "mlp.smelt", MLP);
    let x = HostTensor::from_f32([2, 3], vec![1.0, 2.0, 3.0, -1.0, -2.0, -3.0]).unwrap();
    let w = HostTensor::from_f32([3, 2], vec![1.0, 0.0, 0.0, 1.0, 1.0, 1.0]).unwrap();
    let inp = dir.path().join("in.safetensors");
    smelt::io::save_safetensors(&inp, [("x", &x), ("w", &w)]).unwrap();
    let outp = dir.path().join("out.safetensors");
    let out = smelt_run(&file, &inp, &outp, &["--device", "reference"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let y = &smelt::io::load_safetensors(&outp).unwrap()["y"];
    // x·w by hand: rows [1+3, 2+3] and [-1-3, -2-3], then relu.
    assert_eq!(y.to_f32_vec(), vec![4.0, 5.0, 0.0, 0.0]);

    // The fused CPU backend, fused and unfused, and the CUDA kernels on the emulator give the
    // same (exact: small integers).
    for extra in [
        &["--device", "cpu"][..],
        &["--device", "cpu", "--no-fuse"][..],
        &["--device", "cuda-emulated"][..],
    ] {
        let out = smelt_run(&file, &inp, &outp, extra);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(
            text(&out.stdout).contains(&format!("on {}", extra[1])),
            "{}",
            text(&out.stdout)
        );
        let y = &smelt::io::load_safetensors(&outp).unwrap()["y"];
        assert_eq!(y.shape().dims(), &[2, 2]);
        assert_eq!(y.to_f32_vec(), vec![4.0, 5.0, 0.0, 0.0], "{extra:?}");
    }
}

/// `SMELT_MACHINE_SCHEDULE` orders the CPU kernels' instructions: top down and bottom up give
/// different code for a long chain (`tanh`, `erf`) and the same bits out; a value it does not
/// take (or bytes that are not UTF-8) is an error naming the variable and the values it takes,
/// not a panic.
#[cfg(feature = "llvm")]
#[test]
fn machine_schedules_give_the_same_bits_and_a_bad_one_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "chain.smelt",
        "%x = input \"x\" : f32[4096]\n\
         %a = mul %x, %x\n\
         %t = tanh %a\n\
         %e = erf %x\n\
         %y = add %t, %e\n\
         output \"y\" = %y\n",
    );
    let xs: Vec<f32> = (0..4096).map(|i| (i as f32 - 2048.0) * 0.0021).collect();
    let inp = dir.path().join("in.safetensors");
    let x = HostTensor::from_f32([4096], xs).unwrap();
    smelt::io::save_safetensors(&inp, [("x", &x)]).unwrap();
    let cache = dir.path().join("cache");
    let with = |schedule: &str, args: &[&str]| {
        let env = [
            ("SMELT_MACHINE_SCHEDULE", OsStr::new(schedule)),
            ("SMELT_CACHE_DIR", cache.as_os_str()),
        ];
        smelt_env(args, &env)
    };
    let mut asm = vec![];
    let mut ys = vec![];
    for schedule in ["bottom-up", "top-down"] {
        let emitted = dir.path().join(schedule);
        let args = ["explain", &file, "--emit", "asm", "--emit-dir"];
        let out = with(
            schedule,
            &[&args[..], &[emitted.to_str().unwrap()]].concat(),
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        asm.push(std::fs::read_to_string(emitted.join("kernels.s")).unwrap());
        let outp = dir.path().join(format!("{schedule}.safetensors"));
        let out = with(
            schedule,
            &run_args(&file, &inp, &outp, &["--device", "cpu"]),
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        let y = smelt::io::load_safetensors(&outp).unwrap()["y"].to_f32_vec();
        ys.push(y.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
    }
    assert_ne!(
        asm[0], asm[1],
        "the schedule changed no instruction's place"
    );
    assert_eq!(ys[0], ys[1]);

    let out = with("sideways", &["explain", &file, "--emit", "asm"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("SMELT_MACHINE_SCHEDULE=\"sideways\"")
            && stderr.contains("bottom-up, top-down, auto")
            && !stderr.contains("panicked"),
        "{stderr}"
    );
    // Bytes that are not UTF-8: an error too, not the host's choice.
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let env = [
            ("SMELT_MACHINE_SCHEDULE", OsStr::from_bytes(b"top\xffdown")),
            ("SMELT_CACHE_DIR", cache.as_os_str()),
        ];
        let out = smelt_env(&["explain", &file, "--emit", "asm"], &env);
        assert!(!out.status.success());
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains("SMELT_MACHINE_SCHEDULE=\"top\u{fffd}down\"")
                && stderr.contains("not valid UTF-8")
                && !stderr.contains("panicked"),
            "{stderr}"
        );
    }
}

/// `smelt run --libm-math` computes `exp`/`tanh`/`erf` as the C library does: bit for bit the
/// reference interpreter's results. Without it the CPU's polynomials stay within 1.25 ulp.
#[test]
fn run_with_libm_math_matches_the_interpreter_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "t.smelt",
        "%x = input \"x\" : f32[4096]\n\
         %0 = tanh %x\n\
         %1 = exp %x\n\
         output \"t\" = %0\n\
         output \"e\" = %1\n",
    );
    let xs: Vec<f32> = (0..4096).map(|i| (i as f32 - 2048.0) * 0.0173).collect();
    let x = HostTensor::from_f32([4096], xs).unwrap();
    let inp = dir.path().join("in.safetensors");
    smelt::io::save_safetensors(&inp, [("x", &x)]).unwrap();
    let run = |tag: &str, extra: &[&str]| {
        let outp = dir.path().join(format!("{tag}.safetensors"));
        let out = smelt_run(&file, &inp, &outp, extra);
        assert!(out.status.success(), "{}", text(&out.stderr));
        smelt::io::load_safetensors(&outp).unwrap()
    };
    let want = run("reference", &["--device", "reference"]);
    let libm = run("libm", &["--device", "cpu", "--libm-math"]);
    let poly = run("poly", &["--device", "cpu"]);
    for name in ["t", "e"] {
        let (w, l, p) = (
            want[name].to_f32_vec(),
            libm[name].to_f32_vec(),
            poly[name].to_f32_vec(),
        );
        for i in 0..w.len() {
            assert_eq!(l[i].to_bits(), w[i].to_bits(), "{name}[{i}]");
            assert!((p[i] - w[i]).abs() <= 2.5e-7 * w[i].abs(), "{name}[{i}]");
        }
    }
}

#[test]
fn run_with_missing_input_lists_expectations() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "mlp.smelt", MLP);
    let w = HostTensor::new([3, 2], TensorData::F32(vec![0.0; 6])).unwrap();
    let inp = dir.path().join("in.safetensors");
    smelt::io::save_safetensors(&inp, [("w", &w)]).unwrap();
    let outp = dir.path().join("out.safetensors");
    let out = smelt_run(&file, &inp, &outp, &[]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("missing input \"x\" (f32[2, 3])"),
        "{stderr}"
    );
    assert!(stderr.contains("param \"w\": f32[3, 2]"), "{stderr}");
    assert!(!outp.exists());
}

#[test]
fn run_on_unbuilt_device_says_not_available() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "mlp.smelt", MLP);
    let outp = dir.path().join("out.safetensors");
    // Device 64 exists on no machine (plain `cuda` is device 0, which a GPU machine has).
    let gpu = smelt::Device::Cuda(0).resolve().is_ok();
    let devices: &[&str] = if gpu {
        &["cuda:64"]
    } else {
        &["cuda", "cuda:64"]
    };
    for &device in devices {
        let out = smelt(&[
            "run",
            &file,
            "--out",
            outp.to_str().unwrap(),
            "--device",
            device,
        ]);
        assert_eq!(out.status.code(), Some(1));
        let stderr = text(&out.stderr);
        assert!(stderr.contains("not available"), "{stderr}");
    }
}

#[test]
fn demo_runs_and_reports() {
    let out = smelt(&["demo", "--seq", "8"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("encoder"), "{stdout}");
    assert!(stdout.contains("device:  cpu"), "{stdout}");
    assert!(
        stdout.contains("fused output matches the reference"),
        "{stdout}"
    );
}

/// `smelt demo --device cuda-emulated` runs the encoder layer's CUDA kernels on the CPU
/// emulator, checks them against the interpreter and says its times are not a GPU's; `smelt
/// bench` refuses the emulator.
#[test]
fn demo_runs_the_cuda_kernels_on_the_emulator() {
    let out = smelt(&["demo", "--seq", "4", "--device", "cuda-emulated"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("device:  cuda-emulated"), "{stdout}");
    assert!(stdout.contains("say nothing about a GPU"), "{stdout}");
    assert!(
        stdout.contains("fused output matches the reference"),
        "{stdout}"
    );
    let out = smelt(&["bench", "--device", "cuda-emulated", "--quick"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("benchmark --device cpu or cuda"),
        "{}",
        text(&out.stderr)
    );
}

/// On a CUDA device (a GPU, or the fake driver `scripts/test.sh` sets up with
/// `scripts/build-fake-cuda.sh`): `smelt demo --device cuda` names the device and matches the
/// interpreter, and `smelt bench --device cuda --quick` times every case on device tensors
/// next to the device copy reference. Skipped without a device unless `SMELT_REQUIRE_GPU=1`.
#[test]
fn demo_and_bench_run_on_a_cuda_device() {
    let info = match smelt::Device::Cuda(0)
        .resolve()
        .map_err(|e| e.to_string())
        .and_then(|_| smelt_runtime::cuda::cuda_device(0).map_err(|e| e.to_string()))
    {
        Ok(info) => info,
        Err(e) if std::env::var_os("SMELT_REQUIRE_GPU").is_some_and(|v| v == "1") => {
            panic!("SMELT_REQUIRE_GPU=1 but no usable GPU: {e}")
        }
        Err(e) => {
            println!("demo_and_bench_run_on_a_cuda_device: skipped, no usable GPU: {e}");
            return;
        }
    };
    let out = smelt(&["demo", "--seq", "8", "--device", "cuda"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(&format!("device:  cuda:0, {} ({})", info.name, info.arch)),
        "{stdout}"
    );
    assert_eq!(
        stdout.contains("say nothing about a GPU"),
        info.is_fake(),
        "{stdout}"
    );
    assert!(
        stdout.contains("fused output matches the reference"),
        "{stdout}"
    );
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let out = smelt(&[
        "bench",
        "--device",
        "cuda",
        "--quick",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(
        report["gpu"]
            .as_str()
            .is_some_and(|g| g.contains(&info.name)),
        "{report}"
    );
    assert!(report["stream"]["before"]["gbps"].as_f64().unwrap() > 0.0);
    let cases = report["cases"].as_array().unwrap();
    assert_eq!(cases.len(), smelt::bench::cases::all().len());
    for c in cases {
        assert!(c["kernels_fused"].as_u64().unwrap() >= 1, "{c}");
        let diff = c["max_abs_diff_fused_vs_unfused"].as_f64().unwrap();
        assert!(
            diff < 1e-3,
            "{}: fused and unfused differ by {diff}",
            c["name"]
        );
        // The fused plan's GPU time from CUDA events, next to its wall time.
        assert!(c["fused_gpu"]["median_ms"].as_f64().unwrap() > 0.0, "{c}");
        assert!(c["fused_gpu"]["iterations"].as_u64().unwrap() >= 1, "{c}");
    }
}

#[test]
fn every_example_checks() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "smelt") {
            let out = smelt(&["check", path.to_str().unwrap()]);
            assert!(
                out.status.success(),
                "{}: {}",
                path.display(),
                text(&out.stderr)
            );
            n += 1;
        }
    }
    assert!(n >= 3, "expected at least three examples, found {n}");
}

#[test]
fn cache_stats_and_clear() {
    use smelt_runtime::cache::{CacheKey, CacheTarget, KernelCache};
    let dir = tempfile::tempdir().unwrap();
    let cache = KernelCache::open(dir.path());
    let target = CacheTarget::new("sm_90").expect("a valid target name");
    let key = CacheKey::new(target, b"__global__ void k() {}", &[], "nvrtc-test");
    cache.insert(&key, b"cubin bytes");
    let run = |action: &str| {
        smelt_env(
            &["cache", action],
            &[("SMELT_CACHE_DIR", dir.path().as_os_str())],
        )
    };
    let stats = run("stats");
    assert!(stats.status.success(), "{}", text(&stats.stderr));
    let out = text(&stats.stdout);
    assert!(out.contains("entries: 1") && out.contains("sm_90"), "{out}");
    let clear = run("clear");
    assert!(
        text(&clear.stdout).contains("removed 1 files"),
        "{}",
        text(&clear.stdout)
    );
    let out = text(&run("stats").stdout);
    assert!(out.contains("entries: 0"), "{out}");
}

#[test]
fn cache_prune_keeps_the_most_recently_used_within_the_size_given() {
    use smelt_runtime::cache::{CacheKey, CacheTarget, KernelCache};
    let dir = tempfile::tempdir().unwrap();
    let cache = KernelCache::open(dir.path()).with_max_bytes(None);
    let key = |s: &str| {
        let target = CacheTarget::new("sm_90").expect("a valid target name");
        CacheKey::new(target, s.as_bytes(), &[], "nvrtc-test")
    };
    let (old, new) = (key("old"), key("new"));
    cache.insert(&old, &[0; 4000]);
    cache.insert(&new, &[1; 4000]);
    let old_path = cache.entry_path(&old).unwrap();
    let two_hours_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&old_path)
        .unwrap();
    f.set_modified(two_hours_ago).unwrap();
    let run = |args: &[&str]| {
        let env = [
            ("SMELT_CACHE_DIR", dir.path().as_os_str()),
            ("SMELT_CACHE_MAX_SIZE", OsStr::new("1G")),
        ];
        smelt_env(&[&["cache"], args].concat(), &env)
    };
    let stats = text(&run(&["stats"]).stdout);
    assert!(stats.contains("size limit: 1073741824 bytes"), "{stats}");
    let bad = run(&["prune", "--max-size", "12parsecs"]);
    assert!(!bad.status.success());
    let err = text(&bad.stderr);
    assert!(
        err.contains("--max-size") && err.contains("12parsecs"),
        "{err}"
    );
    let pruned = run(&["prune", "--max-size", "6k"]);
    assert!(pruned.status.success(), "{}", text(&pruned.stderr));
    let out = text(&pruned.stdout);
    assert!(
        out.contains("removed 1 entries") && out.contains("kept 1 entries"),
        "{out}"
    );
    assert!(!old_path.exists(), "the least recently used entry goes");
    assert!(cache.entry_path(&new).unwrap().exists());
}

#[test]
fn explain_shows_the_plan_bytes_and_stop_reasons() {
    let dir = tempfile::tempdir().unwrap();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/softmax.smelt");
    let dot = dir.path().join("plan.dot");
    let out = smelt(&[
        "explain",
        example.to_str().unwrap(),
        "--dot",
        dot.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    // softmax written out in primitives becomes one row kernel.
    assert!(stdout.contains("-> 1 kernels"), "{stdout}");
    assert!(stdout.contains("bytes moved (modelled)"), "{stdout}");
    assert!(stdout.contains("stopped: saturated"), "{stdout}");
    assert!(stdout.contains("k0 reduction"), "{stdout}");
    assert!(std::fs::read_to_string(&dot)
        .unwrap()
        .starts_with("digraph plan"));

    // One kernel: nothing is kept apart.
    assert!(!stdout.contains("kept apart"), "{stdout}");

    let unfused = text(&smelt(&["explain", example.to_str().unwrap(), "--no-fuse"]).stdout);
    assert!(!unfused.contains("-> 1 kernels"), "{unfused}");
    assert!(unfused.contains("1.00x less"), "{unfused}");
    assert!(
        unfused.contains("rule `elementwise-chain` would merge"),
        "{unfused}"
    );
}

/// `smelt explain` says what the CPU code generator does with each kernel beyond plain loops:
/// an add of a transposed operand computes tiles; softmax over 65536 rows of 768 streams its
/// stores and prefetches rows ahead (or, on AMD Zen, leaves them to the hardware); a small
/// product with none of these gets no line.
#[test]
fn explain_says_how_cpu_kernels_are_generated() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.smelt");
    std::fs::write(
        &file,
        "%x = input \"x\" : f32[64, 48]\n\
         %y = input \"y\" : f32[48, 64]\n\
         %t = permute %y perm=[1, 0] : f32[64, 48]\n\
         %z = add %x, %t : f32[64, 48]\n\
         output \"z\" = %z\n",
    )
    .unwrap();
    let out = smelt(&["explain", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let wanted = "cpu code generation:\n  k0_elementwise_add: 16 x 16 tiles, %1 read transposed";
    if cfg!(feature = "llvm") {
        assert!(stdout.contains(wanted), "{stdout}");
    }
    let explain = |source: &str| {
        std::fs::write(&file, source).unwrap();
        text(&smelt(&["explain", file.to_str().unwrap()]).stdout)
    };
    let softmax = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/softmax.smelt"),
    )
    .unwrap()
    .replace("f32[4, 10]", "f32[65536, 768]")
    .replace("f32[4, 1]", "f32[65536, 1]");
    let stdout = explain(&softmax);
    if cfg!(feature = "llvm") {
        // Rows ahead, or none on CPUs whose hardware prefetchers do better (`RowPrefetch`).
        let prefetch = match smelt::Options::default().host_row_prefetch() {
            smelt::RowPrefetch::Off => {
                "no software prefetch (rows left to the hardware prefetchers)"
            }
            _ => "prefetches 6144 bytes ahead (2 rows)",
        };
        let wanted = format!("streaming stores (plain stores into fresh outputs); {prefetch}");
        assert!(stdout.contains(&wanted), "{stdout}");
    }
    let stdout =
        explain("%x = input \"x\" : f32[4, 8]\n%y = mul %x, %x : f32[4, 8]\noutput \"y\" = %y\n");
    assert!(stdout.contains("k0 elementwise"), "{stdout}");
    assert!(!stdout.contains("cpu code generation"), "{stdout}");
}

/// LLVM's remarks and warnings stay off the terminal: a gather whose output streams (at least
/// 16 MiB) has a masked loop whose body branches (the index's range check), which the
/// vectoriser cannot widen as asked, and LLVM used to print `remark: loop not vectorized` and
/// a warning to stderr at every compile.
#[cfg(feature = "llvm")]
#[test]
fn llvm_remarks_are_not_printed() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gather.smelt");
    std::fs::write(
        &file,
        "%t = input \"table\" : f32[30000, 768]\n\
         %i = input \"idx\" : i64[6000]\n\
         %e = index_select %t, %i axis=0 : f32[6000, 768]\n\
         %c = const f32[] 2.0\n\
         %y = mul %e, %c : f32[6000, 768]\n\
         output \"y\" = %y\n",
    )
    .unwrap();
    let out = smelt(&["explain", file.to_str().unwrap(), "--emit", "llvm-ir"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    // The kernel does stream (the masked loop is there), and LLVM said nothing.
    assert!(stdout.contains("!nontemporal"), "{stdout}");
    assert!(!stderr.contains("remark"), "{stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");
}

#[test]
fn explain_says_why_kernels_stay_apart() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/mlp.smelt");
    let out = smelt(&["explain", example.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    // matmul -> bias+relu -> matmul -> bias: three values between four kernels.
    let (_, apart) = stdout
        .split_once("kept apart: 3 values written by one kernel and read by another\n")
        .unwrap_or_else(|| panic!("{stdout}"));
    let lines: Vec<&str> = apart.lines().collect();
    assert_eq!(lines.len(), 3, "{apart}");
    assert!(
        lines[0].starts_with("  %5 k0 -> k1: k0 is a matmul"),
        "{apart}"
    );
    assert!(lines[0].contains("GEMM epilogues are not fused"), "{apart}");
    assert!(
        lines[1].starts_with("  %7 k1 -> k2: k2 is a matmul"),
        "{apart}"
    );
    assert!(lines[1].contains("%7 relu f32[8, 32]"), "{apart}");
    assert!(
        lines[2].starts_with("  %8 k2 -> k3: k2 is a matmul"),
        "{apart}"
    );
}

/// The entry points a kernel IR listing (`--emit kernels`) names, from its `kernel NAME (…`
/// lines.
fn listed_kernels(listing: &str) -> Vec<String> {
    listing
        .lines()
        .filter_map(|l| l.strip_prefix("kernel "))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect()
}

#[test]
fn explain_emits_the_generated_code_of_every_kernel() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/layer_norm.smelt");
    let example = example.to_str().unwrap();
    let out = smelt(&["explain", example, "--emit", "kernels", "--emit", "cuda"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let (plan, rest) = stdout.split_once("=== --emit kernels ===\n").unwrap();
    let (kernels, cuda) = rest.split_once("=== --emit cuda ===\n").unwrap();
    let names = listed_kernels(kernels);
    assert!(!names.is_empty(), "{kernels}");
    for name in &names {
        // The plan above names the kernel, the CUDA C defines it with a header saying which
        // graph ops it came from.
        let plan_name = name.split('_').next().unwrap();
        assert!(plan.contains(&format!("{plan_name} ")), "{plan}");
        let entry = format!("void __launch_bounds__(256) {name}(");
        let at = cuda
            .find(&entry)
            .unwrap_or_else(|| panic!("no {entry} in\n{cuda}"));
        let header = cuda[..at].rsplit("// kernel ").next().unwrap();
        assert!(header.contains("// from: %"), "{header}");
    }

    // Every level into a directory; the kernel IR file is what stdout showed.
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec![
        "explain",
        example,
        "--emit-dir",
        dir.path().to_str().unwrap(),
    ];
    let levels = ["kernels", "cuda", "llvm-ir", "asm", "ptx"];
    let in_build = if cfg!(feature = "llvm") { 5 } else { 2 };
    for level in &levels[..in_build] {
        args.extend(["--emit", level]);
    }
    let out = smelt(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let read = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap();
    assert_eq!(read("kernels.txt").trim_end(), kernels.trim_end());
    assert_eq!(read("kernels.cu").trim_end(), cuda.trim_end());
    if cfg!(feature = "llvm") {
        let (ir, asm, ptx) = (read("kernels.ll"), read("kernels.s"), read("kernels.ptx"));
        for name in &names {
            assert!(ir.contains(&format!("define void @{name}(")), "{ir}");
            assert!(asm.lines().any(|l| l == format!("{name}:")), "{asm}");
            assert!(ptx.contains(&format!(".entry {name}(")), "{ptx}");
        }
        // sm_90 is newer than LLVM 14 knows: PTX for sm_86, which ptxas takes for sm_90.
        assert!(ptx.contains(".target sm_86"), "{ptx}");
        assemble_emitted(&read("kernels.cu"), &ptx);
    } else {
        let out = smelt(&["explain", example, "--emit", "asm"]);
        assert!(!out.status.success());
        assert!(
            text(&out.stderr).contains("--emit asm: the CPU backend (LLVM JIT) is not compiled in")
        );
    }

    // What cannot be emitted says why.
    let out = smelt(&["explain", example, "--emit", "sass"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("kernels, llvm-ir, asm, cuda, ptx"),
        "{stderr}"
    );
    if cfg!(feature = "llvm") {
        let out = smelt(&["explain", example, "--emit", "ptx", "--arch", "sm_35"]);
        assert!(!out.status.success());
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains("--emit ptx") && stderr.contains("sm_35"),
            "{stderr}"
        );
    }
}

/// The emitted CUDA C compiles with NVRTC for sm_90 and the emitted PTX assembles with ptxas
/// for sm_90, where both are installed (CI installs them and sets `SMELT_REQUIRE_NVRTC`).
fn assemble_emitted(cuda: &str, ptx: &str) {
    use smelt_runtime::cuda::{assemble_ptx, nvrtc, ptxas_path, Arch, CompileOptions};
    let required = std::env::var_os("SMELT_REQUIRE_NVRTC").is_some();
    let nvrtc = match (nvrtc(), ptxas_path()) {
        (Ok(n), Ok(_)) => n,
        (n, p) => {
            let why = format!("NVRTC: {:?}, ptxas: {:?}", n.err(), p.err());
            assert!(!required, "SMELT_REQUIRE_NVRTC is set: {why}");
            println!("emitted code not compiled: {why}");
            return;
        }
    };
    let arch = Arch::parse("sm_90").unwrap();
    nvrtc
        .compile(cuda, "kernels.cu", arch, &CompileOptions::default())
        .unwrap_or_else(|e| panic!("the emitted CUDA C does not compile: {e}"));
    let cubin = assemble_ptx(ptx, arch).unwrap_or_else(|e| panic!("the emitted PTX: {e}"));
    assert_eq!(&cubin[..4], b"\x7fELF");
}
