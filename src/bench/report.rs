//! What `smelt bench` prints, and its JSON form.

use super::compare::{AbResult, Comparison};
use super::run::{CaseResult, EgraphStats, Timing};
use super::{Machine, Report, STREAM_TOLERANCE};
use crate::{Error, Result};
use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

/// The report as pretty-printed JSON.
pub fn to_json(report: &Report) -> Result<String> {
    serde_json::to_string_pretty(report)
        .map_err(|e| Error::Usage(format!("cannot serialise the benchmark report: {e}")))
}

/// The report as text tables: the copy reference, then per case run_into (preallocated
/// outputs) and run (fresh outputs) medians (alternating unfused and fused, and the fused plan
/// alone), then compile times and e-graphs.
pub fn tables(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "smelt {} bench on {} ({}, {} threads), {}{}",
        r.smelt_version,
        r.device,
        r.machine.cpu,
        r.machine.threads,
        r.date,
        if r.quick { ", --quick shapes" } else { "" }
    );
    let _ = writeln!(s, "command: {}", r.command);
    if let Some(g) = &r.gpu {
        let _ = writeln!(s, "gpu: {g}");
    }
    let _ = writeln!(
        s,
        "cpu kernels' f32 exp/tanh/erf: {}; software prefetch: {}; row kernels: {}; store loops and split reductions: {}",
        r.math,
        match (r.prefetch_bytes, r.row_prefetch.as_str()) {
            (Some(n), "rows") => format!("{n} bytes ahead, row kernels two rows ahead"),
            (Some(n), "off") => format!("{n} bytes ahead, row kernels none"),
            (Some(n), _) => format!("{n} bytes ahead"),
            (None, _) => "off".to_string(),
        },
        if r.interleave_rows {
            "two rows interleaved"
        } else {
            "one row at a time"
        },
        match r.interleave_vectors {
            Some(n) => format!(
                "{n} vectors per iteration ({} for long store loops with few constants on \
                 AVX-512)",
                2 * n
            ),
            None => "as the vectoriser interleaves".to_string(),
        }
    );
    if let Some(schedule) = &r.machine_schedule {
        let _ = writeln!(s, "cpu kernels' instructions scheduled {schedule}");
    }
    if let (Some(fission), Some(loads)) = (r.loop_fission, r.constant_loads) {
        let _ = writeln!(
            s,
            "cpu elementwise kernels with tanh/erf: {}; constants of kernels with exp/tanh/erf: {}",
            if fission {
                "two loops per 256-element block"
            } else {
                "one loop"
            },
            if loads {
                "loaded once"
            } else {
                "LLVM constants"
            }
        );
    }
    let _ = writeln!(
        s,
        "tensors of >= {} KiB start on {}-byte boundaries{}",
        smelt_runtime::alloc::LARGE >> 10,
        r.tensor_alignment,
        if r.tensor_alignment >= 64 {
            ""
        } else {
            ": this process's global allocator is not smelt::LargeAligned, and memory-bound \
             kernels run slower on them"
        }
    );
    if let Some(h) = &r.huge_pages {
        let _ = writeln!(
            s,
            "huge pages: {:.0}% of a fresh 64 MiB tensor on them (transparent huge pages: {}; {})",
            h.share * 100.0,
            h.mode.as_deref().unwrap_or("mode unknown"),
            if h.asked {
                "smelt asks for them"
            } else {
                "smelt does not ask for them"
            }
        );
    }
    if r.tensor_alignment >= 64 {
        let _ = match r.block_cache_bytes {
            0 => writeln!(s, "freed tensors of >= 32 MiB: unmapped at once"),
            n => writeln!(
                s,
                "freed tensors of >= 32 MiB: up to {} MiB kept for the next allocation of \
                 their size (the fresh outputs of run reuse them)",
                n >> 20
            ),
        };
    }
    let _ = match r.streaming_stores_min_bytes {
        Some(n) => writeln!(
            s,
            "streaming stores: in kernels whose outputs are all >= {} MiB (plain stores into \
             outputs on pages not yet touched)",
            n >> 20
        ),
        None => writeln!(s, "streaming stores: off"),
    };
    match &r.stream {
        Some(st) => {
            let _ = writeln!(
                s,
                "copy bandwidth (read + write, {} threads, 2 x {:.0} MB arrays): {:.2} GB/s \
                 before, {:.2} GB/s after ({:.1}% apart); percentages below are of {:.2} GB/s",
                st.plan.threads,
                st.plan.array_bytes as f64 / 1e6,
                st.before.gbps,
                st.after.gbps,
                st.change * 100.0,
                st.reference_gbps
            );
            if let (Some(m0), Some(m1)) = (st.before.memcpy_gbps, st.after.memcpy_gbps) {
                let streaming = match (st.before.streaming_gbps, st.after.streaming_gbps) {
                    (Some(s0), Some(s1)) => format!(", streaming stores {s0:.2} / {s1:.2}"),
                    _ => String::new(),
                };
                let _ = writeln!(
                    s,
                    "  copy by memcpy {m0:.2} / {m1:.2} GB/s{streaming} (before / after): the \
                     reference is the faster"
                );
            }
            if let Some(note) = &st.plan.note {
                let _ = writeln!(s, "  note: {note}");
            }
            if st.flagged {
                let _ = writeln!(
                    s,
                    "  FLAGGED: the copy bandwidth changed by more than {:.0}% during the run; \
                     the machine was busy or throttled, treat these figures as noisy",
                    STREAM_TOLERANCE * 100.0
                );
            }
        }
        None => {
            let _ = writeln!(s, "copy bandwidth: not measured (--no-stream)");
        }
    }
    let _ = writeln!(
        s,
        "time: median of >= {} calls and >= {:.0} ms per series; GB/s: minimal bytes \
         (inputs and params read once, outputs written once) / median",
        r.min_iters, r.min_time_ms
    );
    let gpu = r.device.starts_with("cuda");
    if let Some(c) = &r.comparison {
        comparison_tables(&mut s, c, gpu);
        return s;
    }
    let _ = writeln!(
        s,
        "unfused and fused are called alternately (their ratio is side by side); \
         'fused alone' is the fused plan called back to back"
    );

    let mut rows = vec![row(&[
        "case",
        "shape",
        "kernels",
        "min MB",
        "unfused",
        "fused",
        "speedup",
        "GB/s unf",
        "GB/s fused",
        "% copy",
        "fused alone",
    ])];
    for c in &r.cases {
        rows.push(vec![
            c.name.clone(),
            c.shape.clone(),
            format!("{} -> {}", c.kernels_unfused, c.kernels_fused),
            format!("{:.1}", c.min_bytes as f64 / 1e6),
            ms(c.unfused.run_into.median_ms),
            ms(c.fused.run_into.median_ms),
            format!("{:.2}x", c.speedup_run_into),
            format!("{:.1}", c.unfused.run_into.gbps),
            format!("{:.1}", c.fused.run_into.gbps),
            pct(&c.fused.run_into),
            ms(c.fused_alone.run_into.median_ms),
        ]);
    }
    let _ = writeln!(s, "\npreallocated outputs ({}):", series(gpu).0);
    table(&mut s, &rows, 2);

    if r.cases.iter().any(|c| c.fused_gpu.is_some()) {
        let mut rows = vec![row(&[
            "case",
            "fused wall",
            "fused GPU",
            "wall - GPU",
            "GB/s GPU",
            "% copy GPU",
        ])];
        for c in &r.cases {
            let Some(g) = &c.fused_gpu else { continue };
            rows.push(vec![
                c.name.clone(),
                ms(c.fused_alone.run_into.median_ms),
                ms(g.median_ms),
                ms(c.fused_alone.run_into.median_ms - g.median_ms),
                format!("{:.1}", g.gbps),
                pct(g),
            ]);
        }
        let _ = writeln!(
            s,
            "\nGPU time of the fused run_device_into, called back to back (CUDA events around \
             the run's work; the wall times above add the host's launch and synchronisation \
             latency):"
        );
        table(&mut s, &rows, 1);
    }

    let mut rows = vec![row(&[
        "case",
        "unfused",
        "fused",
        "speedup",
        "GB/s fused",
        "% copy",
        "fused alone",
    ])];
    for c in &r.cases {
        rows.push(vec![
            c.name.clone(),
            ms(c.unfused.run.median_ms),
            ms(c.fused.run.median_ms),
            format!("{:.2}x", c.speedup_run),
            format!("{:.1}", c.fused.run.gbps),
            pct(&c.fused.run),
            ms(c.fused_alone.run.median_ms),
        ]);
    }
    let _ = writeln!(s, "\nfresh outputs ({}):", series(gpu).1);
    table(&mut s, &rows, 1);

    let eg = |e: &EgraphStats| format!("{} nodes, {} it, {}", e.nodes, e.iterations, e.stop_reason);
    let mut rows = vec![row(&[
        "case",
        "nodes",
        "compile cold",
        "from cache",
        "from disk",
        "unfused cold",
        "simplify e-graph",
        "fusion e-graph",
        "max |f-u|",
    ])];
    for c in &r.cases {
        rows.push(vec![
            c.name.clone(),
            c.graph_nodes.to_string(),
            ms(c.compile.fused_cold_ms),
            ms(c.compile.fused_cached_ms),
            c.compile
                .fused_from_disk_ms
                .map_or_else(|| "-".to_string(), ms),
            ms(c.compile.unfused_cold_ms),
            eg(&c.egraph_simplify),
            eg(&c.egraph_fusion),
            format!("{:.1e}", c.max_abs_diff_fused_vs_unfused),
        ]);
    }
    let _ = writeln!(
        s,
        "\ncompile (fused plan unless marked; cold: no cache; from cache: the in-process one; \
         from disk: a new process's, kernels from the disk cache) and e-graphs:"
    );
    table(&mut s, &rows, 1);
    s
}

/// A `--compare` run's tables: per case A and B `run_into`, then `run`, with their ratio
/// (`run_device_into` and `run_device` on a GPU).
fn comparison_tables(s: &mut String, c: &Comparison, gpu: bool) {
    let _ = writeln!(
        s,
        "--compare {}: A = {}, B = {}; both fused, called alternately (their ratio is side \
         by side); A/B above 1: B is faster",
        c.knob, c.a, c.b
    );
    let mut rows = vec![row(&[
        "case", "shape", "kernels", "min MB", "A", "B", "A/B", "GB/s A", "GB/s B", "% copy A",
        "% copy B",
    ])];
    for r in &c.cases {
        rows.push(vec![
            r.name.clone(),
            r.shape.clone(),
            if r.kernels_a == r.kernels_b {
                r.kernels_a.to_string()
            } else {
                format!("{} / {}", r.kernels_a, r.kernels_b)
            },
            format!("{:.1}", r.min_bytes as f64 / 1e6),
            ms(r.a.run_into.median_ms),
            ms(r.b.run_into.median_ms),
            format!("{:.3}", r.a_over_b_run_into),
            format!("{:.1}", r.a.run_into.gbps),
            format!("{:.1}", r.b.run_into.gbps),
            pct(&r.a.run_into),
            pct(&r.b.run_into),
        ]);
    }
    let _ = writeln!(s, "\npreallocated outputs ({}):", series(gpu).0);
    table(s, &rows, 2);

    let mut rows = vec![row(&[
        "case",
        "A",
        "B",
        "A/B",
        "compile A",
        "compile B",
        "outputs",
    ])];
    for r in &c.cases {
        rows.push(vec![
            r.name.clone(),
            ms(r.a.run.median_ms),
            ms(r.b.run.median_ms),
            format!("{:.3}", r.a_over_b_run),
            ms(r.compile_a_ms),
            ms(r.compile_b_ms),
            if r.identical {
                "same bits".to_string()
            } else {
                format!("max |A-B| {:.1e}", r.max_abs_diff)
            },
        ]);
    }
    let _ = writeln!(
        s,
        "\nfresh outputs ({}), cold compile times, A against B:",
        series(gpu).1
    );
    table(s, &rows, 1);
}

/// What the preallocated and the fresh-output series time: on a GPU, the device-tensor runs.
fn series(gpu: bool) -> (&'static str, &'static str) {
    if gpu {
        (
            "run_device_into: device tensors",
            "run_device: device tensors",
        )
    } else {
        ("run_into", "run")
    }
}

fn pct(t: &Timing) -> String {
    t.pct_of_copy.map_or("-".into(), |p| format!("{p:.0}%"))
}

fn row(cells: &[&str]) -> Vec<String> {
    cells.iter().map(|c| c.to_string()).collect()
}

fn ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0} ms")
    } else if v >= 1.0 {
        format!("{v:.2} ms")
    } else {
        format!("{:.1} us", v * 1e3)
    }
}

/// Aligned columns: the first `left` columns left-aligned, the rest right-aligned.
fn table(s: &mut String, rows: &[Vec<String>], left: usize) {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let width: Vec<usize> = (0..cols)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for r in rows {
        let mut line = String::new();
        for (i, cell) in r.iter().enumerate() {
            let w = width[i];
            if i > 0 {
                line.push_str("  ");
            }
            if i < left {
                let _ = write!(line, "{cell:<w$}");
            } else {
                let _ = write!(line, "{cell:>w$}");
            }
        }
        let _ = writeln!(s, "{}", line.trim_end());
    }
}

/// The current time, UTC, as `2026-11-29T23:59:00Z`.
pub fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    utc(secs)
}

/// Seconds since the Unix epoch as an ISO 8601 UTC time (proleptic Gregorian calendar).
pub fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The CPU model, thread count, memory and OS of this machine (what the OS reports).
pub fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or_else(
            || std::env::consts::ARCH.to_string(),
            |(_, v)| v.trim().to_string(),
        );
    let memory_bytes = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            let line = m.lines().find(|l| l.starts_with("MemTotal:"))?.to_string();
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map(|kb| kb * 1024);
    Machine {
        cpu,
        threads: super::stream::threads(),
        memory_bytes,
        os: std::env::consts::OS.to_string(),
    }
}

/// One `--compare` case's headline figures, for progress lines.
pub fn ab_summary(c: &Comparison, r: &AbResult) -> String {
    format!(
        "{}: {} {}, {} {} (A/B {:.3}){}",
        r.name,
        c.a,
        ms(r.a.run_into.median_ms),
        c.b,
        ms(r.b.run_into.median_ms),
        r.a_over_b_run_into,
        if r.identical { ", same bits" } else { "" }
    )
}

/// One case's headline figures, for progress lines.
pub fn summary(c: &CaseResult) -> String {
    format!(
        "{}: {} -> {} kernels, unfused {} fused {} ({:.2}x, {:.1} GB/s)",
        c.name,
        c.kernels_unfused,
        c.kernels_fused,
        ms(c.unfused.run_into.median_ms),
        ms(c.fused.run_into.median_ms),
        c.speedup_run_into,
        c.fused.run_into.gbps
    )
}

#[cfg(test)]
mod tests {
    use super::utc;

    #[test]
    fn dates() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc(1_798_761_599), "2026-12-31T23:59:59Z");
    }
}
