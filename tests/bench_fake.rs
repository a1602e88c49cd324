//! The benchmark's own machinery without a GPU: benches/table_bench.cpp built with g++ against the
//! asynchronous stand-in cudart (tests/fixtures/fake_cudart.c with -DFAKE_ASYNC), loading our
//! cdylib and the reference backend (our baseline, benches/baseline_runtime.cpp, built as C++
//! against the stand-in) by path, as on the GPU machine. Nothing outside the checkout is read. Its figures mean nothing here; what is checked is that
//! a run ends with every data check passed (through both buffer sets of each backend), that every
//! row asked for is reported with its targets and the same-calls (A/A) line, and that the method
//! named in the report is the one used (`--no-rotate`). Also runs the benchmark's Python tools'
//! own tests (benches/test_bench_tools.py), without a driver (`support::no_driver`: those tests
//! check that the benchmarks stop with their message when there is no device). And
//! benches/weights_load.cpp on a small model shape over the same stand-in: every load checked,
//! both page cache states reported (or why cold could not be made), and a library that loses a
//! byte of a tensor caught. Dynamic build only (the stand-in is a libcudart.so.13).
#![cfg(feature = "dynamic")]

use std::path::{Path, PathBuf};
use std::process::Command;

mod support;

/// Where the programs built against the stand-in go.
fn bench_dir() -> PathBuf {
    support::tmp_dir().join("bench-fake")
}

/// (the stand-in's folder, table_bench, the reference backend), built once per test binary.
fn built() -> &'static (PathBuf, PathBuf, PathBuf) {
    static BUILT: std::sync::OnceLock<(PathBuf, PathBuf, PathBuf)> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = bench_dir();
        std::fs::create_dir_all(&dir).expect("the bench folder");
        let fake = support::fake_cudart().to_path_buf();
        let cuda_include = Path::new(llaisys_nvidia::runtime::build::CUDA_ROOT).join("include");
        let bench = dir.join("table_bench");
        let mut cmd = cxx();
        cmd.args(["-std=c++17", "-O1"])
            .arg(format!("-I{}", cuda_include.display()))
            .arg(format!("-I{}", support::csrc().display()))
            .arg(support::source_dir().join("benches/table_bench.cpp"))
            .arg("-o")
            .arg(&bench)
            .arg(format!("-L{}", fake.display()))
            .args(["-l:libcudart.so.13", "-ldl", "-pthread"]);
        support::compile(cmd);
        let baseline = dir.join("libbaseline_runtime.so");
        build_reference(&fake, &baseline_source(), &baseline);
        (fake, bench, baseline)
    })
}

/// table_bench's report and exit code with `args`, over our cdylib (both columns) and the
/// reference.
fn table_bench(args: &[&str]) -> (i32, String, String) {
    let (_, _, baseline) = built();
    let ours = support::target_dir().join("libllaisys_nvidia.so");
    table_bench_over(args, [&ours, &ours, baseline])
}

/// table_bench's report and exit code with `args` over the three libraries `columns`.
fn table_bench_over(args: &[&str], columns: [&Path; 3]) -> (i32, String, String) {
    let (fake, bench, _) = built();
    let mut cmd = Command::new(bench);
    cmd.args(["--quick", "--budget-s", "100"])
        .args(args)
        .args(columns)
        .env("LD_LIBRARY_PATH", fake);
    let out = support::child::run(&mut cmd, support::child::DEFAULT_LIMIT);
    (out.code().unwrap_or(-1), out.stdout, out.stderr)
}

#[test]
fn a_run_checks_its_data_and_reports_every_row_asked_for() {
    let rows = [
        "memcpy_async 64 B H2D pinned, enqueue only",
        "memcpy_sync D2H pinned 64 KiB",
        "memcpy_async D2D 1 MiB",
        "memcpy_sync H2D pageable 1 MiB",
        "memcpy_async D2H pageable 1 MiB",
        "tensor round trip 4 MiB (malloc, H2D+D2H pageable, free)",
    ];
    let (rc, md, err) = table_bench(&["--only", &rows.join("|")]);
    assert_eq!(rc, 0, "table_bench failed:\n{md}\n{err}");
    assert!(!md.contains("DATA CHECK FAILED"), "{md}");
    assert!(md.contains("GPU stand-in GPU (fake_cudart.c)"), "{md}");
    assert!(
        md.contains("repetition r starting at column r mod 4; copies below 1 GiB alternate"),
        "the header names the method:\n{md}"
    );
    for row in rows {
        assert!(
            md.contains(&format!("| {row} |")),
            "row {row:?} missing:\n{md}"
        );
    }
    assert_eq!(
        md.lines()
            .filter(|l| l.starts_with("| memcpy") || l.starts_with("| tensor"))
            .count(),
        rows.len(),
        "only the rows asked for:\n{md}"
    );
    assert!(md.contains("Targets (ours static): "), "{md}");
    assert!(
        md.contains("Same calls (A/A): raw makes the reference's own cudart calls")
            && md.contains("rotated column order, two buffer sets")
            && md.contains("pinned and device memory ")
            && md.contains("pageable memory "),
        "the A/A line:\n{md}"
    );
}

#[test]
fn no_rotate_and_raw_pool_are_used_and_said() {
    let (rc, md, err) = table_bench(&["--no-rotate", "--only", "memcpy_sync D2D 64 KiB"]);
    assert_eq!(rc, 0, "table_bench failed:\n{md}\n{err}");
    assert!(md.contains("| memcpy_sync D2D 64 KiB |"), "{md}");
    assert!(
        md.contains("always in column order, one buffer set (--no-rotate)")
            && md.contains("--no-rotate: fixed column order, one buffer set")
            && !md.contains("--raw-pool"),
        "{md}"
    );
    let (rc, md, err) = table_bench(&["--raw-pool", "--only", "memcpy_async D2H pinned 1 MiB"]);
    assert_eq!(rc, 0, "table_bench failed:\n{md}\n{err}");
    assert!(
        md.contains("| memcpy_async D2H pinned 1 MiB |")
            && md.contains("--raw-pool: raw's device buffers from its own pool")
            && md.contains("--raw-pool: every device buffer of the raw column comes from its pool"),
        "{md}"
    );
}

#[test]
fn getters_put_any_table_in_any_column() {
    // scripts/gpu-bench.sh --baselines: a baseline in the "ours static" column, so that "static vs
    // ref" is its ratio to the library in the reference column.
    let (_, _, baseline) = built();
    let ours = support::target_dir().join("libllaisys_nvidia.so");
    let getters = "seedGetRuntimeAPI,llaisysNvidiaGetRuntimeAPI,seedGetRuntimeAPI";
    let (rc, md, err) = table_bench_over(
        &[
            "--getters",
            getters,
            "--only",
            "memcpy_sync H2D pinned 64 KiB",
        ],
        [baseline, &ours, baseline],
    );
    assert_eq!(rc, 0, "table_bench failed:\n{md}\n{err}");
    assert!(
        md.contains("| memcpy_sync H2D pinned 64 KiB |")
            && md.contains(
                "- getters (--getters): ours static `seedGetRuntimeAPI`; ours dynamic \
                 `llaisysNvidiaGetRuntimeAPI`; reference `seedGetRuntimeAPI`"
            ),
        "{md}"
    );
    // Our cdylib has no seedGetRuntimeAPI: a wrong getter is a load failure, said as such.
    let (rc, md, err) = table_bench_over(
        &[
            "--getters",
            getters,
            "--only",
            "memcpy_sync H2D pinned 64 KiB",
        ],
        [&ours, &ours, baseline],
    );
    assert_eq!(rc, 2, "a missing getter was not refused:\n{md}\n{err}");
    assert!(err.contains("seedGetRuntimeAPI"), "{err}");
}

#[test]
fn the_benchmark_tools_pass_their_own_tests() {
    let script = support::source_dir().join("benches/test_bench_tools.py");
    let out = support::run_with(
        Path::new("python3"),
        &[script.to_str().expect("a UTF-8 path")],
        &[(
            "LLAISYS_NVIDIA_LIB",
            support::target_dir()
                .join("libllaisys_nvidia.so")
                .to_str()
                .expect("a UTF-8 path"),
        )],
    );
    assert!(
        out.success() && out.text().contains("\nOK"),
        "{}",
        out.report()
    );
}

/// The C++ compiler: $CXX, else g++.
fn cxx() -> Command {
    Command::new(std::env::var("CXX").unwrap_or_else(|_| "g++".into()))
}

/// The baseline backend's source, in the checkout (scripts/gpu-bench.sh's default reference).
fn baseline_source() -> PathBuf {
    support::source_dir().join("benches/baseline_runtime.cpp")
}

/// Builds the reference backend's `source` (baseline_runtime.cpp or a variant of it) as C++ into
/// the shared library `out`, against the stand-in cudart in `fake`; warnings are errors.
fn build_reference(fake: &Path, source: &Path, out: &Path) {
    let cuda_include = Path::new(llaisys_nvidia::runtime::build::CUDA_ROOT).join("include");
    let mut cmd = cxx();
    cmd.args([
        "-std=c++17",
        "-O1",
        "-shared",
        "-fPIC",
        "-Wall",
        "-Wextra",
        "-Werror",
    ])
    .arg(format!("-I{}", cuda_include.display()))
    .arg(format!("-I{}", support::csrc().display()))
    .args(["-x", "c++"])
    .arg(source)
    .args(["-x", "none", "-o"])
    .arg(out)
    .arg(format!("-L{}", fake.display()))
    .arg("-l:libcudart.so.13");
    support::compile(cmd);
}

/// The reference backend with `what` (found exactly once in its source) replaced by `by`, built
/// against the stand-in as `lib<name>.so` in the bench folder.
fn reference_variant(name: &str, what: &str, by: &str) -> PathBuf {
    let (fake, _, _) = built();
    let text = std::fs::read_to_string(baseline_source()).expect("the baseline's source");
    assert_eq!(
        text.matches(what).count(),
        1,
        "{what:?} in the reference's source"
    );
    let source = bench_dir().join(format!("{name}.cpp"));
    std::fs::write(&source, text.replace(what, by)).expect("write the variant's source");
    let out = bench_dir().join(format!("lib{name}.so"));
    build_reference(fake, &source, &out);
    out
}

/// The reference backend with every H2D copy of more than one byte one byte short, built once.
fn lossy_reference() -> &'static Path {
    static LOSSY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    LOSSY.get_or_init(|| {
        reference_variant(
            "baseline_lossy",
            "cudaMemcpy(dst, src, size, ",
            "cudaMemcpy(dst, src, kind == LLAISYS_MEMCPY_H2D && size > 1 ? size - 1 : size, ",
        )
    })
}

/// The benchmark `benches/{name}.cpp`, which loads runtime tables by path and needs no cudart of
/// its own, built with g++ (warnings are errors) into the bench folder.
fn table_program(name: &str) -> PathBuf {
    let root = support::source_dir();
    let exe = bench_dir().join(name);
    let mut cmd = cxx();
    cmd.args(["-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror"])
        .arg(format!("-I{}", support::csrc().display()))
        .arg(format!("-I{}", root.join("benches").display()))
        .arg(root.join(format!("benches/{name}.cpp")))
        .arg("-o")
        .arg(&exe)
        .args(["-ldl", "-pthread"]);
    support::compile(cmd);
    exe
}

/// weights_load (built with g++: it needs no cudart of its own) on a small Qwen2 shape, over our
/// cdylib and `reference`, both page cache states, two loads each.
fn weights_load(reference: &Path) -> (i32, String, String) {
    static EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let (fake, _, _) = built();
    let exe = EXE.get_or_init(|| table_program("weights_load"));
    let dir = support::tmp_dir().join("weights");
    std::fs::create_dir_all(&dir).expect("the weights folder");
    let ours = support::target_dir().join("libllaisys_nvidia.so");
    let mut cmd = Command::new(exe);
    cmd.arg("--dir")
        .arg(&dir)
        .args([
            "--reps",
            "2",
            "--layers",
            "2",
            "--hidden",
            "64",
            "--intermediate",
            "160",
        ])
        .args([
            "--vocab",
            "1000",
            "--heads",
            "4",
            "--kv-heads",
            "2",
            "--head-dim",
            "16",
        ])
        .arg(&ours)
        .arg(reference)
        .env("LD_LIBRARY_PATH", fake);
    let out = support::child::run(&mut cmd, support::child::DEFAULT_LIMIT);
    (out.code().unwrap_or(-1), out.stdout, out.stderr)
}

#[test]
fn the_weights_load_checks_every_load_and_reports_both_page_cache_states() {
    let (_, _, baseline) = built();
    let (rc, md, err) = weights_load(baseline);
    assert_eq!(rc, 0, "weights_load failed:\n{md}\n{err}");
    assert!(!md.contains("DATA CHECK FAILED"), "{md}");
    assert!(
        md.contains("in 27 bf16 tensors (hidden 64, intermediate 160, 2 layers, vocabulary 1000")
            && md.contains("| pinned link: ours memcpy_sync H2D from malloc_host, 256 MiB |"),
        "{md}"
    );
    for who in ["ours", "reference"] {
        let row = format!("| {who}: malloc_device + memcpy_sync per tensor from the mmap | hot |");
        assert!(md.contains(&row), "{row:?} missing:\n{md}");
        assert_eq!(
            err.matches(&format!("weights_load: {who} hot ")).count(),
            2,
            "{err}"
        );
        // Each load's own malloc_device calls, timed inside it: per load and as a row.
        let per_load = err
            .lines()
            .filter(|l| l.starts_with(&format!("weights_load: {who} hot ")))
            .filter(|l| l.contains(" GB/s), malloc_device ") && l.ends_with(" ms"))
            .count();
        assert_eq!(per_load, 2, "{err}");
        let row = format!("| {who}: of which its malloc_device calls | hot | ");
        assert!(md.contains(&row), "{row:?} missing:\n{md}");
    }
    // The mapping read beside each state's loads, with the loads' ratio over it.
    let mapping = md
        .lines()
        .filter(|l| {
            l.starts_with("| mapping read: ") && l.contains("copy the fresh mmap in 64 KiB pieces")
        })
        .collect::<Vec<_>>();
    assert!(mapping.iter().any(|l| l.contains("| hot |")), "{md}");
    // Hot, the same read again with the link busy, with the link's speed meanwhile.
    let busy = md
        .lines()
        .filter(|l| {
            l.starts_with("| mapping read, link busy: as the mapping read, while memcpy_async")
        })
        .collect::<Vec<_>>();
    assert_eq!(busy.len(), 1, "one such row, hot: {md}");
    assert!(busy[0].contains("| hot |"), "{md}");
    let link = busy[0]
        .split("64 MiB after 64 MiB (")
        .nth(1)
        .and_then(|r| r.split(" GB/s meanwhile)").next())
        .and_then(|g| g.parse::<f64>().ok())
        .expect("the link's GB/s in the row");
    assert!(link > 0.0, "the link moved nothing: {}", busy[0]);
    // Each library's allocations alone, timed.
    for who in ["ours", "reference"] {
        let row = format!(
            "| {who}: malloc_device per tensor alone (no copy), then device_synchronize | - | "
        );
        let line = md
            .lines()
            .find(|l| l.starts_with(&row))
            .unwrap_or_else(|| panic!("{row:?} missing:\n{md}"));
        let time = line[row.len()..].split(" |").next().unwrap_or_default();
        assert!(
            time.ends_with(" us") || time.ends_with(" ms") || time.ends_with(" s"),
            "a time: {line}"
        );
    }
    let ours_hot = md
        .lines()
        .find(|l| l.starts_with("| ours: malloc_device") && l.contains("| hot |"))
        .expect("ours hot row");
    assert_eq!(ours_hot.split('|').count(), 10, "every column: {ours_hot}");
    assert!(
        ours_hot
            .split('|')
            .nth(7)
            .is_some_and(|c| c.trim().ends_with('x')),
        "vs mapping read: {ours_hot}"
    );
    // Cold where the file system lets its pages be dropped; otherwise the report says why.
    if md.contains("cold: not measured:") {
        assert!(!md.contains("| cold |"), "{md}");
    } else {
        for row in [
            "| ours: malloc_device + memcpy_sync per tensor from the mmap | cold |",
            "| reference: malloc_device + memcpy_sync per tensor from the mmap | cold |",
            "| storage read: 1 thread, pread 16 MiB | cold |",
            "| storage read: 8 threads, pread 16 MiB | cold |",
        ] {
            assert!(md.contains(row), "{row:?} missing:\n{md}");
        }
        assert!(mapping.iter().any(|l| l.contains("| cold |")), "{md}");
    }
}

#[test]
fn a_library_that_drops_a_byte_of_a_tensor_fails_the_weights_check() {
    let (rc, md, err) = weights_load(lossy_reference());
    assert_eq!(rc, 1, "a lossy library passed:\n{md}\n{err}");
    assert!(
        md.contains(
            "DATA CHECK FAILED: reference hot load 0: tensor model.embed_tokens.weight differs"
        ),
        "{md}"
    );
    assert!(!md.contains("DATA CHECK FAILED: ours"), "{md}");
}
