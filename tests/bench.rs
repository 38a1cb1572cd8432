//! The benchmark harness (`smelt bench`, `smelt::bench`): the case list is issue 6's, the
//! figures are computed from the right bytes, every case computes what the reference
//! interpreter computes, and the CLI writes every field the issue asks for. Timings are never
//! asserted (the machine is shared and noisy), only their presence.

use serde_json::Value;
use smelt::bench::cases::{self, Size};
use smelt::{compile_with, Device, Options};
use std::process::{Command, Output};

fn smelt(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_smelt"))
        .args(args)
        .output()
        .expect("the smelt binary runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn case_list_is_the_issues() {
    let got: Vec<(&str, &[usize])> = cases::all().iter().map(|c| (c.name, c.full)).collect();
    let want: Vec<(&str, &[usize])> = vec![
        ("elementwise-chain", &[1 << 24]),
        ("bias-gelu-residual-128x3072", &[128, 3072]),
        ("bias-gelu-residual-65536x768", &[65536, 768]),
        ("add-layernorm-128x768", &[128, 768]),
        ("add-layernorm-65536x768", &[65536, 768]),
        ("softmax-1536x128", &[1536, 128]),
        ("softmax-65536x768", &[65536, 768]),
        ("attention", &[12, 128, 64]),
        ("mlp", &[128, 768, 3072]),
        ("bert-encoder-layer", &[128, 768, 12, 3072]),
        ("permute-add", &[64, 128, 12, 64]),
        ("max-min-65536x768", &[65536, 768]),
    ];
    assert_eq!(got, want);
    // The 8-op chain has 8 ops besides its input, the encoder is BERT-base's (seq 128).
    let chain = cases::all()[0].build(Size::Quick).unwrap();
    let ops = chain
        .nodes()
        .iter()
        .filter(|n| {
            !matches!(
                n.op,
                smelt::ir::Op::Input { .. }
                    | smelt::ir::Op::Param { .. }
                    | smelt::ir::Op::Constant(_)
            )
        })
        .count();
    assert_eq!(ops, 8, "{}", smelt::ir::text::print(&chain));
    assert_eq!(
        cases::select(&["bert-encoder-layer".into()]).unwrap()[0].shape(Size::Full),
        "128x768x12x3072 (seq x hidden x heads x ffn)"
    );
}

/// A copy reference too small to measure memory is refused before anything runs, naming the
/// flag and the bound.
#[test]
fn a_tiny_copy_reference_is_refused() {
    for bytes in ["0", "4096", "1048575"] {
        let out = smelt(&["bench", "--quick", "--stream-bytes", bytes]);
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "--stream-bytes {bytes} was accepted");
        assert!(
            stderr.contains("--stream-bytes") && stderr.contains("1048576"),
            "{stderr}"
        );
        assert!(text(&out.stdout).is_empty(), "{}", text(&out.stdout));
    }
}

#[test]
fn minimal_bytes_by_hand() {
    let get = |name: &str| {
        let c = cases::select(&[name.to_string()]).unwrap()[0];
        cases::min_bytes(&c.build(Size::Quick).unwrap())
    };
    // x and r [8, 96] read, b [96] read, y [8, 96] written; f32.
    assert_eq!(get("bias-gelu-residual-128x3072"), 4 * (3 * 8 * 96 + 96));
    // x and r [8, 48], w and b [48], y [8, 48].
    assert_eq!(get("add-layernorm-128x768"), 4 * (3 * 8 * 48 + 2 * 48));
    // x [4096] read once although the chain uses it three times, y written.
    assert_eq!(get("elementwise-chain"), 4 * 2 * 4096);
    // q, k, v [2, 8, 16] and y [2, 8, 16].
    assert_eq!(get("attention"), 4 * 4 * 2 * 8 * 16);
    // At full size the chain moves 16M floats in and out.
    let c = cases::select(&["elementwise-chain".into()]).unwrap()[0];
    assert_eq!(
        cases::min_bytes(&c.build(Size::Full).unwrap()),
        2 * 4 * (1 << 24)
    );
}

#[test]
fn selection_by_substring_and_unknown_names() {
    let names = |p: &[&str]| -> Vec<&str> {
        let p: Vec<String> = p.iter().map(|s| s.to_string()).collect();
        cases::select(&p).unwrap().iter().map(|c| c.name).collect()
    };
    assert_eq!(
        names(&["softmax"]),
        ["softmax-1536x128", "softmax-65536x768"]
    );
    assert_eq!(names(&["mlp", "mlp"]), ["mlp"]);
    assert_eq!(names(&[]).len(), cases::all().len());
    let err = cases::select(&["nope".into()]).unwrap_err().to_string();
    assert!(err.contains("nope") && err.contains("permute-add"), "{err}");
}

/// torch.testing's f32 tolerance for elementwise cases; for cases with GEMMs or long
/// reductions (summation order differs), the reduction tolerance of `smelt demo`.
fn tolerance(name: &str) -> (f64, f64) {
    match name {
        "attention" | "mlp" | "bert-encoder-layer" => (1e-3, 1e-4),
        _ => (1e-4, 1e-5),
    }
}

#[test]
fn every_case_matches_the_reference_at_quick_shapes() {
    if Device::Cpu.resolve().is_err() {
        eprintln!("skipped: the CPU backend is not built in");
        return;
    }
    for case in cases::all() {
        let graph = case.build(Size::Quick).unwrap();
        let (inputs, params) = cases::data(&graph, 7).unwrap();
        let compile = |device, no_fuse| {
            compile_with(
                &graph,
                Options {
                    device,
                    no_fuse,
                    params: params.clone(),
                    ..Options::default()
                },
            )
            .unwrap_or_else(|e| panic!("{}: {e}", case.name))
        };
        let fused = compile(Device::Cpu, false).run(&inputs).unwrap();
        let want = compile(Device::Reference, true).run(&inputs).unwrap();
        let (rtol, atol) = tolerance(case.name);
        for ((name, got), (_, want)) in fused.iter().zip(want.iter()) {
            assert_eq!(got.shape(), want.shape(), "{} {name}", case.name);
            for i in 0..got.numel() {
                let (g, w) = (got.data().get_f64(i), want.data().get_f64(i));
                assert!(
                    (g - w).abs() <= atol + rtol * w.abs(),
                    "{} {name}[{i}]: fused {g}, reference {w}",
                    case.name
                );
            }
        }
    }
}

#[test]
fn cli_writes_json_and_chart() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let chart = dir.path().join("bench.svg");
    let out = smelt(&[
        "bench",
        "--quick",
        "--case",
        "softmax",
        "--json",
        json.to_str().unwrap(),
        "--chart",
        chart.to_str().unwrap(),
        "--stream-bytes",
        "1048576",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    // Progress on stderr, tables on stdout.
    assert!(stderr.contains("[1/2] softmax-1536x128"), "{stderr}");
    for needle in [
        "run_into",
        "fresh outputs (run)",
        "copy bandwidth",
        "speedup",
        "fused alone",
    ] {
        assert!(stdout.contains(needle), "{needle}: {stdout}");
    }

    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for key in ["date", "command", "device", "smelt_version"] {
        assert!(report[key].is_string(), "{key}: {report}");
    }
    assert_eq!(report["math"], "polynomial");
    assert_eq!(report["prefetch_bytes"], 2048);
    assert_eq!(report["interleave_vectors"], 4);
    // The machine scheduler's direction, as the host target chose it (none without LLVM).
    match smelt_codegen::llvm::host_target() {
        Ok(host) => {
            assert_eq!(report["machine_schedule"], host.schedule.to_string());
            assert!(
                stdout.contains(&format!(
                    "cpu kernels' instructions scheduled {}",
                    host.schedule
                )),
                "{stdout}"
            );
            // Loop fission and constant loads as this CPU's default has them (AMD Zen 3).
            let zen3 = smelt_codegen::llvm::zen3(&host.cpu, &host.features);
            assert_eq!(report["loop_fission"], zen3, "{report}");
            assert_eq!(report["constant_loads"], zen3, "{report}");
            let line = if zen3 {
                "with tanh/erf: two loops per 256-element block; constants of kernels with \
                 exp/tanh/erf: loaded once"
            } else {
                "with tanh/erf: one loop; constants of kernels with exp/tanh/erf: LLVM constants"
            };
            assert!(stdout.contains(line), "{stdout}");
        }
        Err(_) => {
            assert!(report["machine_schedule"].is_null(), "{report}");
            assert!(report["loop_fission"].is_null(), "{report}");
        }
    }
    assert!(
        stdout.contains("store loops and split reductions: 4 vectors per iteration"),
        "{stdout}"
    );
    assert_eq!(report["streaming_stores_min_bytes"], 16 << 20);
    assert!(
        stdout.contains("streaming stores: in kernels whose outputs are all >= 16 MiB"),
        "{stdout}"
    );
    // The default row prefetch goes by the CPU (`RowPrefetch::for_cpu`).
    let rows = smelt::Options::default().host_row_prefetch();
    assert_eq!(report["row_prefetch"], rows.to_string());
    let said = match rows {
        smelt::RowPrefetch::Rows => {
            "software prefetch: 2048 bytes ahead, row kernels two rows ahead"
        }
        smelt::RowPrefetch::Off => "software prefetch: 2048 bytes ahead, row kernels none",
        other => panic!("the default row prefetch resolved to {other}"),
    };
    assert!(stdout.contains(said), "{stdout}");
    // The tool's global allocator is `LargeAligned`: large tensors start on cache lines.
    let align = report["tensor_alignment"].as_u64().unwrap();
    assert!(align >= 64 && align.is_power_of_two(), "{report}");
    assert!(
        stdout.contains(&format!(
            "tensors of >= 4 KiB start on {align}-byte boundaries\n"
        )),
        "{stdout}"
    );
    // It asks for huge pages for tensors of >= 32 MiB (Linux, where the kernel has them; the
    // line is left out where the kernel does not say).
    if smelt_runtime::alloc::thp_mode().is_some() {
        let h = &report["huge_pages"];
        assert_eq!(h["asked"], true, "{report}");
        let share = h["share"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&share), "{report}");
        assert!(
            stdout.contains(&format!(
                "huge pages: {:.0}% of a fresh 64 MiB tensor on them",
                share * 100.0
            )) && stdout.contains("smelt asks for them"),
            "{stdout}"
        );
    }
    assert!(report["machine"]["cpu"].is_string());
    assert!(report["machine"]["threads"].is_u64());
    let stream = &report["stream"];
    for key in ["before", "after"] {
        let m = &stream[key];
        assert!(m["gbps"].is_f64(), "{key}: {stream}");
        // The reference is the faster of memcpy and (x86-64) the streaming-store copy.
        let memcpy = m["memcpy_gbps"].as_f64().unwrap();
        let streaming = m["streaming_gbps"].as_f64();
        assert_eq!(
            streaming.is_some(),
            cfg!(target_arch = "x86_64"),
            "{key}: {stream}"
        );
        assert_eq!(
            m["gbps"].as_f64(),
            Some(memcpy.max(streaming.unwrap_or(0.0)))
        );
    }
    assert!(stdout.contains("copy by memcpy"), "{stdout}");
    assert!(stream["flagged"].is_boolean() && stream["change"].is_f64());
    assert_eq!(stream["plan"]["array_bytes"], 1048576);
    assert!(stream["plan"]["threads"].is_u64());
    assert!(stream["plan"]["capped"].is_boolean());

    let cases = report["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 2);
    assert_eq!(cases[0]["name"], "softmax-1536x128");
    assert_eq!(cases[0]["shape"], "12x16 (rows x cols)");
    for c in cases {
        assert!(c["kernels_unfused"].as_u64().unwrap() >= c["kernels_fused"].as_u64().unwrap());
        assert!(c["kernels_fused"].as_u64().unwrap() >= 1);
        assert!(c["min_bytes"].as_u64().unwrap() > 0);
        assert!(c["graph_nodes"].as_u64().unwrap() > 0);
        assert_eq!(c["graph"], "y = torch.softmax(x, -1)");
        for plan in ["unfused", "fused", "fused_alone"] {
            for series in ["run_into", "run"] {
                let t = &c[plan][series];
                for key in ["median_ms", "min_ms", "gbps", "pct_of_copy"] {
                    assert!(t[key].is_f64(), "{plan}.{series}.{key}: {c}");
                }
                assert!(t["iterations"].as_u64().unwrap() >= 3);
            }
        }
        // GPU time (CUDA events) only where there is a GPU.
        assert!(c["fused_gpu"].is_null(), "{c}");
        assert!(c["speedup_run_into"].is_f64() && c["speedup_run"].is_f64());
        for key in [
            "fused_cold_ms",
            "fused_cached_ms",
            "unfused_cold_ms",
            "unfused_cached_ms",
        ] {
            assert!(c["compile"][key].is_f64(), "{key}: {c}");
        }
        // The CPU backend's kernels also compile from a disk cache (no such column on a GPU).
        assert_eq!(
            c["compile"]["fused_from_disk_ms"].is_f64(),
            report["device"] == "cpu",
            "{c}"
        );
        for stage in ["egraph_simplify", "egraph_fusion"] {
            assert!(c[stage]["nodes"].as_u64().unwrap() > 0);
            assert!(c[stage]["stop_reason"].is_string());
        }
    }

    let svg = std::fs::read_to_string(&chart).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches("<g class=\"case\"").count(), 2);
    assert_eq!(svg.matches("<g ").count(), svg.matches("</g>").count());
    // One unfused and one fused bar per case, plus one of each in the legend.
    assert_eq!(svg.matches("<rect class=\"fused\"").count(), 3);
    assert_eq!(svg.matches("<rect class=\"unfused\"").count(), 3);
    assert!(svg.contains("softmax-65536x768"));
}

/// `--libm-math`, `--no-prefetch`, `--no-streaming-stores`, `--no-interleave-vectors` and
/// `--no-huge-pages` are recorded in the output and the JSON.
#[test]
fn cli_libm_math_no_prefetch_and_no_streaming_stores_are_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let out = smelt(&[
        "bench",
        "--quick",
        "--no-stream",
        "--case",
        "chain",
        "--libm-math",
        "--no-prefetch",
        "--no-streaming-stores",
        "--no-row-prefetch",
        "--no-interleave-vectors",
        "--no-huge-pages",
        "--json",
        json.to_str().unwrap(),
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        stdout.contains("f32 exp/tanh/erf: libm; software prefetch: off"),
        "{stdout}"
    );
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["math"], "libm");
    assert!(report["prefetch_bytes"].is_null(), "{report}");
    assert!(report["interleave_vectors"].is_null(), "{report}");
    assert!(
        stdout.contains("store loops and split reductions: as the vectoriser interleaves"),
        "{stdout}"
    );
    assert!(report["streaming_stores_min_bytes"].is_null(), "{report}");
    assert!(stdout.contains("streaming stores: off"), "{stdout}");
    assert_eq!(report["row_prefetch"], "module");
    if cfg!(target_os = "linux") {
        assert_eq!(report["huge_pages"]["asked"], false, "{report}");
        assert!(stdout.contains("smelt does not ask for them"), "{stdout}");
    }
    assert_eq!(report["cases"].as_array().unwrap().len(), 1);
}

/// `--row-prefetch MODE` is recorded in the output and the JSON as given (`auto`, the
/// default, as the CPU resolves it, see `cli_writes_json_and_chart`), conflicts with
/// `--no-row-prefetch`, and an unknown mode is refused with the ones there are.
#[test]
fn cli_row_prefetch_modes_are_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    for (mode, said) in [
        (
            "rows",
            "software prefetch: 2048 bytes ahead, row kernels two rows ahead",
        ),
        ("module", "software prefetch: 2048 bytes ahead;"),
        (
            "off",
            "software prefetch: 2048 bytes ahead, row kernels none",
        ),
    ] {
        let out = smelt(&[
            "bench",
            "--quick",
            "--no-stream",
            "--case",
            "softmax-1536",
            "--row-prefetch",
            mode,
            "--json",
            json.to_str().unwrap(),
        ]);
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{mode}: {}", text(&out.stderr));
        assert!(stdout.contains(said), "{mode}: {stdout}");
        let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(report["row_prefetch"], mode);
    }
    let out = smelt(&["bench", "--quick", "--row-prefetch", "sideways"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("sideways") && stderr.contains("auto, rows, module, off"),
        "{stderr}"
    );
    let out = smelt(&[
        "bench",
        "--quick",
        "--row-prefetch",
        "rows",
        "--no-row-prefetch",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("cannot be used with"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn cli_unknown_case_lists_the_cases() {
    let out = smelt(&["bench", "--quick", "--no-stream", "--case", "no-such-case"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("no-such-case") && stderr.contains("elementwise-chain"),
        "{stderr}"
    );
}

/// `--compare KNOB` times each case's fused plan under the options given (A) and with the
/// knob flipped (B), alternately, and says whether the outputs have the same bits: the
/// polynomial and C-library math differ in the last bits, prefetching changes none.
#[test]
fn cli_compare_flips_one_knob() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("ab.json");
    let chart = dir.path().join("ab.svg");
    for (knob, a, b, identical) in [
        ("libm-math", "polynomial math", "libm math", false),
        ("prefetch", "prefetch 2048 B", "no prefetch", true),
        (
            "interleave-vectors",
            "4 vectors per iteration",
            "the vectoriser's interleaving",
            true,
        ),
    ] {
        let out = smelt(&[
            "bench",
            "--quick",
            "--no-stream",
            "--case",
            "chain",
            "--case",
            "gelu",
            "--compare",
            knob,
            "--json",
            json.to_str().unwrap(),
            "--chart",
            chart.to_str().unwrap(),
        ]);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{stderr}");
        assert!(
            stdout.contains(&format!("--compare {knob}: A = {a}, B = {b}")),
            "{stdout}"
        );
        assert!(stderr.contains("run_into, A and B alternately"), "{stderr}");
        let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(report["cases"].as_array().unwrap().len(), 0, "{report}");
        let c = &report["comparison"];
        assert_eq!(c["knob"], knob);
        assert_eq!((c["a"].as_str(), c["b"].as_str()), (Some(a), Some(b)));
        let cases = c["cases"].as_array().unwrap();
        let names: Vec<&str> = cases.iter().map(|r| r["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                "elementwise-chain",
                "bias-gelu-residual-128x3072",
                "bias-gelu-residual-65536x768"
            ]
        );
        for r in cases {
            assert_eq!(r["identical"], identical, "{knob}: {r}");
            let diff = r["max_abs_diff"].as_f64().unwrap();
            if identical {
                assert_eq!(diff, 0.0, "{r}");
            } else {
                // A few ulps of values of order 1 (tanh and erf within 1.5 ulp of libm's).
                assert!(diff > 0.0 && diff < 1e-5, "{r}");
            }
            for plan in ["a", "b"] {
                for series in ["run_into", "run"] {
                    assert!(r[plan][series]["iterations"].as_u64().unwrap() >= 3, "{r}");
                }
            }
            let ratio = r["a_over_b_run_into"].as_f64().unwrap();
            let (ta, tb) = (
                r["a"]["run_into"]["median_ms"].as_f64().unwrap(),
                r["b"]["run_into"]["median_ms"].as_f64().unwrap(),
            );
            assert!((ratio - ta / tb).abs() < 1e-9 * ratio, "{r}");
            assert!(r["compile_a_ms"].as_f64().unwrap() > 0.0);
        }
        let svg = std::fs::read_to_string(&chart).unwrap();
        // One A and one B bar per case, plus one of each in the legend.
        assert_eq!(svg.matches("<rect class=\"a\"").count(), 4);
        assert_eq!(svg.matches("<rect class=\"b\"").count(), 4);
        assert!(svg.contains(&format!("B: {b}")), "{svg}");
    }
}

/// A knob of the CPU code generator on another device is a usage error, not a run that
/// measures nothing; an unknown knob lists the knobs.
#[test]
fn cli_compare_refuses_what_it_cannot_measure() {
    let out = smelt(&[
        "bench",
        "--quick",
        "--no-stream",
        "--device",
        "reference",
        "--compare",
        "streaming-stores",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("streaming-stores") && stderr.contains("--device cpu"),
        "{stderr}"
    );
    let out = smelt(&["bench", "--compare", "stores"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("\"stores\"") && stderr.contains("prefetch, libm-math, fast-math"),
        "{stderr}"
    );
}
