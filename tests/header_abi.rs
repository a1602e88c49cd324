//! Host-only test of the hand-written header `csrc/llaisys_runtime.h` against the Rust side:
//! every struct (size, alignment, each field's offset and size), every enum (its size and each
//! value), every `#define LLAISYS_NVIDIA_*` value (value, size, signedness) and every other
//! typedef (size, alignment). A C program and a C++ program, compiled with the compiler the `cc`
//! crate finds (CC/CFLAGS, CXX/CXXFLAGS), print what the compiler makes of the header; the test
//! compares that with `size_of` / `align_of` / `offset_of!` of the Rust `repr(C)` types and with
//! the Rust constants that interpret the values. The header is also parsed for its structs,
//! fields, enums, enumerators, typedefs and defines, and each must be in the checked lists, so
//! an item added to the header without a check here fails the test.
//!
//! Needs no GPU, no driver.

mod c_header;
mod support;

use c_header::strip_comments;

// The Rust side of the header, in one place (the library re-exports these under
// `llaisys_nvidia::ffi` in its final layout; re-point this block there).
use llaisys_nvidia::copy::MemcpyKind;
use llaisys_nvidia::event::{BLOCKING_SYNC, DISABLE_TIMING};
use llaisys_nvidia::ffi::{
    op, CommId, LlaisysNvidiaCommAPI, STATUS_NCCL, STATUS_NCCL_UNAVAILABLE, STATUS_TIMEOUT,
    UNIQUE_ID_BYTES,
};
use llaisys_nvidia::ffi::{
    AllocatorStats, DeviceProperties, ErrorHandler, LlaisysNvidiaError, LlaisysRuntimeAPI,
    LlaisysStream, OutOfMemory, PointerAttributes, Versions, LLAISYS_DEVICE_CPU,
    LLAISYS_DEVICE_NVIDIA, LLAISYS_DEVICE_TYPE_COUNT, STREAM_NON_BLOCKING, SUCCESS,
};
use llaisys_nvidia::ffi::{
    LlaisysNvidiaGraphAPI, CAPTURE_MODE_GLOBAL, CAPTURE_MODE_RELAXED, CAPTURE_MODE_THREAD_LOCAL,
    CAPTURE_STATUS_ACTIVE, CAPTURE_STATUS_INVALIDATED, CAPTURE_STATUS_NONE, STATUS_CAPTURE,
};
use llaisys_nvidia::ErrorKind;

use std::collections::BTreeMap;
use std::mem::{align_of, offset_of, size_of};
use std::os::raw::{c_int, c_void};
use std::path::PathBuf;

// ---------------------------------------------------------------------------------------------
// What the Rust side says
// ---------------------------------------------------------------------------------------------

/// A struct of the header and its Rust twin.
struct StructCheck {
    /// The C typedef name.
    c: &'static str,
    size: usize,
    align: usize,
    /// (field name, offset, size), in declaration order.
    fields: Vec<(&'static str, usize, usize)>,
}

/// An enum of the header: its C typedef name, the size of the Rust type it crosses the ABI as,
/// and each enumerator with the Rust value.
struct EnumCheck {
    c: &'static str,
    size: usize,
    values: Vec<(&'static str, i64)>,
}

/// A `#define` of the header with the Rust constant behind it.
struct DefineCheck {
    c: &'static str,
    value: i64,
    size: usize,
    unsigned: bool,
}

/// A typedef that is not a struct or an enum (pointers, function pointers), with its Rust type.
struct TypedefCheck {
    c: &'static str,
    size: usize,
    align: usize,
}

fn field_layout<T, F>(_: fn(&T) -> &F) -> (usize, usize) {
    (size_of::<F>(), align_of::<F>())
}

/// `strukt!("cName" => RustType { field, ... })`: the Rust field names are the C field names.
macro_rules! strukt {
    ($c:literal => $t:ty { $($f:ident),* $(,)? }) => {
        StructCheck {
            c: $c,
            size: size_of::<$t>(),
            align: align_of::<$t>(),
            fields: vec![$((
                stringify!($f),
                offset_of!($t, $f),
                field_layout(|s: &$t| &s.$f).0,
            )),*],
        }
    };
}

/// A Rust integer constant as the C side prints a define: value, size, unsigned.
trait AbiInt: Copy {
    fn abi(self) -> (i64, usize, bool);
}
impl AbiInt for u32 {
    fn abi(self) -> (i64, usize, bool) {
        (i64::from(self), size_of::<u32>(), true)
    }
}
impl AbiInt for i32 {
    fn abi(self) -> (i64, usize, bool) {
        (i64::from(self), size_of::<i32>(), false)
    }
}

fn define(c: &'static str, v: impl AbiInt) -> DefineCheck {
    let (value, size, unsigned) = v.abi();
    DefineCheck {
        c,
        value,
        size,
        unsigned,
    }
}

fn typedef<T>(c: &'static str) -> TypedefCheck {
    TypedefCheck {
        c,
        size: size_of::<T>(),
        align: align_of::<T>(),
    }
}

/// A typedef whose Rust type is that of a table field (the `*_api` function pointers).
fn typedef_of_field(c: &'static str, (size, align): (usize, usize)) -> TypedefCheck {
    TypedefCheck { c, size, align }
}

fn structs() -> Vec<StructCheck> {
    vec![
        strukt!("LlaisysRuntimeAPI" => LlaisysRuntimeAPI {
            get_device_count, set_device, device_synchronize, create_stream, destroy_stream,
            stream_synchronize, malloc_device, free_device, malloc_host, free_host, memcpy_sync,
            memcpy_async,
        }),
        strukt!("llaisysNvidiaError" => LlaisysNvidiaError {
            status, cuda_error, device, function, cuda_call, message,
        }),
        strukt!("llaisysNvidiaAllocatorStats" => AllocatorStats {
            in_use_bytes, peak_in_use_bytes, cached_bytes, alloc_count, free_count, cache_hits,
            cache_misses, oom_retries,
        }),
        strukt!("llaisysNvidiaOutOfMemory" => OutOfMemory {
            device, other_processes, requested_bytes, total_bytes, free_bytes, in_use_bytes,
            cached_bytes, graph_pool_bytes, largest_allocation_bytes, other_processes_bytes,
            limit_bytes,
        }),
        strukt!("llaisysNvidiaVersions" => Versions { built_cudart, runtime, driver }),
        strukt!("llaisysNvidiaDeviceProperties" => DeviceProperties {
            name, major, minor, total_memory, multiprocessors, pci_bus_id, async_engines,
            unified_addressing, memory_pools,
        }),
        strukt!("llaisysNvidiaPointerAttributes" => PointerAttributes {
            kind, device, device_pointer, host_pointer, ours,
        }),
        strukt!("llaisysNvidiaCommId" => CommId { internal }),
        strukt!("LlaisysNvidiaCommAPI" => LlaisysNvidiaCommAPI {
            get_unique_id, init_rank, init_all, destroy, abort, get_rank, get_size, allreduce,
            allgather, reduce_scatter, broadcast, send, recv, group_start, group_end, synchronize,
        }),
        strukt!("LlaisysNvidiaGraphAPI" => LlaisysNvidiaGraphAPI {
            pool_create, pool_release, begin_capture, end_capture, capture_status, instantiate,
            upload, launch, exec_update, exec_destroy, graph_destroy,
        }),
    ]
}

fn enums() -> Vec<EnumCheck> {
    let int = size_of::<c_int>();
    vec![
        // llaisys's own; the table is its runtime for LLAISYS_DEVICE_NVIDIA.
        EnumCheck {
            c: "llaisysDeviceType_t",
            size: int,
            values: vec![
                ("LLAISYS_DEVICE_CPU", LLAISYS_DEVICE_CPU.into()),
                ("LLAISYS_DEVICE_NVIDIA", LLAISYS_DEVICE_NVIDIA.into()),
                (
                    "LLAISYS_DEVICE_TYPE_COUNT",
                    LLAISYS_DEVICE_TYPE_COUNT.into(),
                ),
            ],
        },
        // Crosses the table as c_int (memcpy_sync/memcpy_async), read by MemcpyKind::from_raw.
        EnumCheck {
            c: "llaisysMemcpyKind_t",
            size: int,
            values: vec![
                ("LLAISYS_MEMCPY_H2H", MemcpyKind::H2H as i64),
                ("LLAISYS_MEMCPY_H2D", MemcpyKind::H2D as i64),
                ("LLAISYS_MEMCPY_D2H", MemcpyKind::D2H as i64),
                ("LLAISYS_MEMCPY_D2D", MemcpyKind::D2D as i64),
            ],
        },
        // Returned as c_int by every status function.
        EnumCheck {
            c: "llaisysNvidiaStatus_t",
            size: int,
            values: vec![
                ("LLAISYS_NVIDIA_SUCCESS", SUCCESS.into()),
                ("LLAISYS_NVIDIA_ERROR_CUDA", ErrorKind::Cuda as i64),
                (
                    "LLAISYS_NVIDIA_ERROR_DEFERRED_CUDA",
                    ErrorKind::DeferredCuda as i64,
                ),
                (
                    "LLAISYS_NVIDIA_ERROR_INVALID_ARGUMENT",
                    ErrorKind::InvalidArgument as i64,
                ),
                ("LLAISYS_NVIDIA_ERROR_INTERNAL", ErrorKind::Internal as i64),
            ],
        },
    ]
}

fn defines() -> Vec<DefineCheck> {
    vec![
        // llaisysNvidiaStreamCreate's flags, checked there against STREAM_NON_BLOCKING.
        define("LLAISYS_NVIDIA_STREAM_NON_BLOCKING", STREAM_NON_BLOCKING),
        // llaisysNvidiaEventCreate's flags, checked there against the event module's values.
        define("LLAISYS_NVIDIA_EVENT_BLOCKING_SYNC", BLOCKING_SYNC),
        define("LLAISYS_NVIDIA_EVENT_DISABLE_TIMING", DISABLE_TIMING),
        // The communicator's statuses, from nccl::error's mapping of its failures.
        define("LLAISYS_NVIDIA_ERROR_NCCL", STATUS_NCCL),
        define(
            "LLAISYS_NVIDIA_ERROR_NCCL_UNAVAILABLE",
            STATUS_NCCL_UNAVAILABLE,
        ),
        define("LLAISYS_NVIDIA_ERROR_TIMEOUT", STATUS_TIMEOUT),
        // Reduction ops, read by ops::comm's op mapping.
        define("LLAISYS_NVIDIA_REDUCE_SUM", op::SUM),
        define("LLAISYS_NVIDIA_REDUCE_PROD", op::PROD),
        define("LLAISYS_NVIDIA_REDUCE_MAX", op::MAX),
        define("LLAISYS_NVIDIA_REDUCE_MIN", op::MIN),
        define("LLAISYS_NVIDIA_REDUCE_AVG", op::AVG),
        define("LLAISYS_NVIDIA_COMM_ID_BYTES", UNIQUE_ID_BYTES as i32),
        // Graphs: the capture status, and the modes and statuses ops::graphs reads and writes.
        define("LLAISYS_NVIDIA_ERROR_CAPTURE", STATUS_CAPTURE),
        define("LLAISYS_NVIDIA_CAPTURE_MODE_GLOBAL", CAPTURE_MODE_GLOBAL),
        define(
            "LLAISYS_NVIDIA_CAPTURE_MODE_THREAD_LOCAL",
            CAPTURE_MODE_THREAD_LOCAL,
        ),
        define("LLAISYS_NVIDIA_CAPTURE_MODE_RELAXED", CAPTURE_MODE_RELAXED),
        define("LLAISYS_NVIDIA_CAPTURE_STATUS_NONE", CAPTURE_STATUS_NONE),
        define(
            "LLAISYS_NVIDIA_CAPTURE_STATUS_ACTIVE",
            CAPTURE_STATUS_ACTIVE,
        ),
        define(
            "LLAISYS_NVIDIA_CAPTURE_STATUS_INVALIDATED",
            CAPTURE_STATUS_INVALIDATED,
        ),
    ]
}

/// `#define LLAISYS_NVIDIA_*` that are not values, and why.
const NOT_VALUES: [(&str, &str); 2] = [
    ("LLAISYS_NVIDIA_RUNTIME_H", "the include guard"),
    (
        "LLAISYS_NVIDIA_API",
        "the visibility attribute of every declaration",
    ),
];

fn typedefs() -> Vec<TypedefCheck> {
    vec![
        typedef::<LlaisysStream>("llaisysStream_t"),
        typedef_of_field(
            "get_device_count_api",
            field_layout(|a: &LlaisysRuntimeAPI| &a.get_device_count),
        ),
        typedef_of_field(
            "set_device_api",
            field_layout(|a: &LlaisysRuntimeAPI| &a.set_device),
        ),
        typedef_of_field(
            "device_synchronize_api",
            field_layout(|a: &LlaisysRuntimeAPI| &a.device_synchronize),
        ),
        typedef_of_field(
            "create_stream_api",
            field_layout(|a: &LlaisysRuntimeAPI| &a.create_stream),
        ),
        typedef_of_field(
            "destroy_stream_api",
            field_layout(|a: &LlaisysRuntimeAPI| &a.destroy_stream),
        ),
        typedef_of_field(
            "stream_synchronize_api",
            field_layout(|a: &LlaisysRuntimeAPI| &a.stream_synchronize),
        ),
        typedef_of_field(
            "malloc_device_api",
            field_layout(|a: &LlaisysRuntimeAPI| &a.malloc_device),
        ),
        typedef_of_field(
            "free_device_api",
            field_layout(|a: &LlaisysRuntimeAPI| &a.free_device),
        ),
        typedef_of_field(
            "malloc_host_api",
            field_layout(|a: &LlaisysRuntimeAPI| &a.malloc_host),
        ),
        typedef_of_field(
            "free_host_api",
            field_layout(|a: &LlaisysRuntimeAPI| &a.free_host),
        ),
        typedef_of_field(
            "memcpy_sync_api",
            field_layout(|a: &LlaisysRuntimeAPI| &a.memcpy_sync),
        ),
        typedef_of_field(
            "memcpy_async_api",
            field_layout(|a: &LlaisysRuntimeAPI| &a.memcpy_async),
        ),
        typedef::<ErrorHandler>("llaisysNvidiaErrorHandler"),
        // The event functions take and return it as `*mut c_void`.
        typedef::<*mut c_void>("llaisysNvidiaEvent_t"),
        // The communicator functions take and return it as `capi::comm::Comm`.
        typedef::<llaisys_nvidia::ffi::Comm>("llaisysNvidiaComm_t"),
        // The graph functions take and return them as `*mut c_void` and `u64`.
        typedef::<*mut c_void>("llaisysNvidiaGraph_t"),
        typedef::<*mut c_void>("llaisysNvidiaGraphExec_t"),
        typedef::<u64>("llaisysNvidiaGraphPool_t"),
    ]
}

/// Every line the C program must print, keyed by what it describes.
fn expected() -> BTreeMap<String, String> {
    let mut e = BTreeMap::new();
    for s in structs() {
        e.insert(format!("struct {}", s.c), format!("{} {}", s.size, s.align));
        for (f, offset, size) in &s.fields {
            e.insert(format!("field {}.{f}", s.c), format!("{offset} {size}"));
        }
    }
    for en in enums() {
        e.insert(format!("enum {}", en.c), en.size.to_string());
        for (name, v) in &en.values {
            e.insert(format!("enumerator {name}"), v.to_string());
        }
    }
    for d in defines() {
        e.insert(
            format!("define {}", d.c),
            format!("{} {} {}", d.value, d.size, u8::from(d.unsigned)),
        );
    }
    for t in typedefs() {
        e.insert(
            format!("typedef {}", t.c),
            format!("{} {}", t.size, t.align),
        );
    }
    e
}

// ---------------------------------------------------------------------------------------------
// What the compiler says
// ---------------------------------------------------------------------------------------------

/// The probe: one printf per checked item, in the format of `expected()`.
fn probe_source() -> String {
    let mut body = String::new();
    let mut line = |fmt: &str, args: &str| {
        body.push_str(&format!("    printf(\"{fmt}\\n\", {args});\n"));
    };
    for s in structs() {
        line(
            &format!("struct {} %zu %zu", s.c),
            &format!("sizeof({0}), (size_t)ALIGNOF({0})", s.c),
        );
        for (f, _, _) in &s.fields {
            line(
                &format!("field {}.{f} %zu %zu", s.c),
                &format!("offsetof({0}, {f}), sizeof((({0} *)0)->{f})", s.c),
            );
        }
    }
    for en in enums() {
        line(&format!("enum {} %zu", en.c), &format!("sizeof({})", en.c));
        for (name, _) in &en.values {
            line(
                &format!("enumerator {name} %lld"),
                &format!("(long long){name}"),
            );
        }
    }
    for d in defines() {
        line(
            &format!("define {} %lld %zu %d", d.c),
            &format!(
                "(long long)({0}), sizeof({0}), (int)(({0}) - ({0}) - 1 > 0)",
                d.c
            ),
        );
    }
    for t in typedefs() {
        line(
            &format!("typedef {} %zu %zu", t.c),
            &format!("sizeof({0}), (size_t)ALIGNOF({0})", t.c),
        );
    }
    format!(
        "/* Generated by tests/header_abi.rs: what the compiler makes of the header. */\n\
         #include \"llaisys_runtime.h\"\n\
         #include <stddef.h>\n\
         #include <stdio.h>\n\
         #if defined(__cplusplus)\n\
         #define ALIGNOF(T) alignof(T)\n\
         #elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L\n\
         #define ALIGNOF(T) _Alignof(T)\n\
         #else\n\
         #define ALIGNOF(T) offsetof(struct {{ char c; T t; }}, t)\n\
         #endif\n\
         int main(void) {{\n{body}    return 0;\n}}\n"
    )
}

/// The rust triple of this machine (the crate is Linux-only).
fn host_triple() -> String {
    let env = if cfg!(target_env = "musl") {
        "musl"
    } else {
        "gnu"
    };
    format!("{}-unknown-linux-{env}", std::env::consts::ARCH)
}

fn csrc() -> PathBuf {
    support::csrc()
}

/// Compiles the probe as C (`cpp == false`) or C++ with the compiler the `cc` crate finds, runs
/// it, and returns its lines keyed as in `expected()`.
fn compiler_view(cpp: bool) -> BTreeMap<String, String> {
    let triple = host_triple();
    let compiler = cc::Build::new()
        .cargo_metadata(false)
        .target(&triple)
        .host(&triple)
        .opt_level(0)
        .cpp(cpp)
        .try_get_compiler()
        .unwrap_or_else(|e| {
            panic!(
                "the cc crate finds no C{} compiler: {e}",
                if cpp { "++" } else { "" }
            )
        });
    let dir = support::tmp_dir().join("header_abi");
    std::fs::create_dir_all(&dir).expect("scratch folder");
    let (src, exe) = if cpp {
        (dir.join("probe.cpp"), dir.join("probe-cpp"))
    } else {
        (dir.join("probe.c"), dir.join("probe-c"))
    };
    std::fs::write(&src, probe_source()).expect("write the probe");
    let mut cmd = compiler.to_command();
    cmd.arg(format!("-I{}", csrc().display()))
        .arg(&src)
        .arg("-o")
        .arg(&exe);
    // The program and its arguments (`{cmd:?}` would add the whole environment cc passes).
    let shown = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    let out = support::child::run(&mut cmd, support::child::DEFAULT_LIMIT);
    assert!(out.success(), "{shown} failed:\n{}", out.report());
    let text = support::child::run_program(&exe, &[], None).ok();
    let mut view = BTreeMap::new();
    for l in text.lines() {
        let mut words = l.splitn(3, ' ');
        let (Some(kind), Some(name), Some(rest)) = (words.next(), words.next(), words.next())
        else {
            panic!("unexpected probe line {l:?}");
        };
        let old = view.insert(format!("{kind} {name}"), rest.to_string());
        assert!(old.is_none(), "{kind} {name} printed twice");
    }
    view
}

/// Every difference between the compiler's view and Rust's, one line each.
fn differences(c: &BTreeMap<String, String>, rust: &BTreeMap<String, String>) -> Vec<String> {
    let mut diffs = Vec::new();
    for (k, v) in rust {
        match c.get(k) {
            Some(cv) if cv == v => {}
            Some(cv) => diffs.push(format!("{k}: C says {cv}, Rust says {v}")),
            None => diffs.push(format!("{k}: not printed by the C probe")),
        }
    }
    for k in c.keys().filter(|k| !rust.contains_key(*k)) {
        diffs.push(format!("{k}: printed by C but not checked"));
    }
    diffs
}

// ---------------------------------------------------------------------------------------------
// What the header declares
// ---------------------------------------------------------------------------------------------

/// The items of a header, as parsed from its text.
#[derive(Debug, Default, PartialEq)]
struct Declared {
    /// (typedef name, field names in order).
    structs: Vec<(String, Vec<String>)>,
    /// (typedef name, enumerators in order).
    enums: Vec<(String, Vec<String>)>,
    /// Other typedef names.
    typedefs: Vec<String>,
    /// `#define LLAISYS_NVIDIA_*` names.
    defines: Vec<String>,
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The declared name of one C declarator: `(*name)(...)`, `*name`, `name[N]`, `name`.
fn declarator_name(decl: &str) -> String {
    let decl = match decl.find("(*") {
        Some(at) => &decl[at + 2..],
        None => decl.split('[').next().unwrap_or(decl),
    };
    let end_of_name = if decl.contains(')') {
        // (*name)(...): the name ends at the first non-identifier character.
        let start = decl.trim_start();
        return start.chars().take_while(|c| is_ident_char(*c)).collect();
    } else {
        decl.trim_end()
    };
    end_of_name
        .chars()
        .rev()
        .take_while(|c| is_ident_char(*c))
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect()
}

/// Splits `text` at `sep` outside parentheses (a function pointer's parameter list).
fn split_top(text: &str, sep: char) -> Vec<&str> {
    let (mut parts, mut depth, mut last) = (Vec::new(), 0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            c if c == sep && depth == 0 => {
                parts.push(&text[last..i]);
                last = i + c.len_utf8();
            }
            _ => {}
        }
    }
    parts.push(&text[last..]);
    parts
}

/// Field names of a struct body (`int a, b; char name[8]; T *p; int (*f)(int, int);`).
fn field_names(body: &str) -> Vec<String> {
    let mut names = Vec::new();
    for decl in split_top(body, ';')
        .into_iter()
        .map(str::trim)
        .filter(|d| !d.is_empty())
    {
        let mut parts = split_top(decl, ',').into_iter();
        names.push(declarator_name(parts.next().unwrap_or_default()));
        names.extend(parts.map(declarator_name));
    }
    names
}

/// The text between the `{` at or after `from` and its matching `}`, and the index after it.
fn braced(text: &str, from: usize) -> (String, usize) {
    let open = from + text[from..].find('{').expect("{");
    let mut depth = 0;
    for (i, c) in text[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return (text[open + 1..open + i].to_string(), open + i + 1);
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced braces");
}

fn parse_header(text: &str) -> Declared {
    let text = strip_comments(text);
    let mut d = Declared::default();
    for line in text.lines() {
        if let Some(rest) = line.trim_start().strip_prefix("#define") {
            let name: String = rest
                .trim_start()
                .chars()
                .take_while(|c| is_ident_char(*c))
                .collect();
            if name.starts_with("LLAISYS_NVIDIA_") {
                d.defines.push(name);
            }
        }
    }
    // Declarations: everything but the preprocessor lines.
    let code: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    let mut at = 0;
    while let Some(found) = code[at..].find("typedef") {
        let start = at + found;
        let after = &code[start + "typedef".len()..];
        let word: String = after
            .trim_start()
            .chars()
            .take_while(|c| is_ident_char(*c))
            .collect();
        // `typedef struct tag *name;` declares a pointer type, not a struct.
        let defines_body = {
            let brace = code[start..].find('{');
            let semi = code[start..].find(';');
            matches!((brace, semi), (Some(b), Some(s)) if b < s)
        };
        if (word == "struct" || word == "enum") && defines_body {
            let (body, end) = braced(&code, start);
            let semi = end + code[end..].find(';').expect(";");
            let alias = code[end..semi].trim().to_string();
            if word == "struct" {
                d.structs.push((alias, field_names(&body)));
            } else {
                let names = body
                    .split(',')
                    .map(|e| e.split('=').next().unwrap_or_default().trim().to_string())
                    .filter(|e| !e.is_empty())
                    .collect();
                d.enums.push((alias, names));
            }
            at = semi + 1;
        } else {
            let semi = start + code[start..].find(';').expect(";");
            d.typedefs.push(declarator_name(&code[start..semi]));
            at = semi + 1;
        }
    }
    d
}

/// What the header declares that the checks above do not cover (or cover differently), one
/// line each.
fn uncovered(declared: &Declared) -> Vec<String> {
    let mut gaps = Vec::new();
    let structs = structs();
    for (name, fields) in &declared.structs {
        match structs.iter().find(|s| s.c == name) {
            None => gaps.push(format!("struct {name} is not checked")),
            Some(s) => {
                let checked: Vec<&str> = s.fields.iter().map(|f| f.0).collect();
                if checked != *fields {
                    gaps.push(format!(
                        "struct {name}: the header has fields {fields:?}, the check {checked:?}"
                    ));
                }
            }
        }
    }
    for s in &structs {
        if !declared.structs.iter().any(|(n, _)| n == s.c) {
            gaps.push(format!("struct {} is checked but not in the header", s.c));
        }
    }
    let enums = enums();
    for (name, values) in &declared.enums {
        match enums.iter().find(|e| e.c == name) {
            None => gaps.push(format!("enum {name} is not checked")),
            Some(e) => {
                let checked: Vec<&str> = e.values.iter().map(|v| v.0).collect();
                if checked != *values {
                    gaps.push(format!(
                        "enum {name}: the header has {values:?}, the check {checked:?}"
                    ));
                }
            }
        }
    }
    for e in &enums {
        if !declared.enums.iter().any(|(n, _)| n == e.c) {
            gaps.push(format!("enum {} is checked but not in the header", e.c));
        }
    }
    let defines = defines();
    for name in &declared.defines {
        let checked = defines.iter().any(|d| d.c == name);
        let exempt = NOT_VALUES.iter().any(|(n, _)| n == name);
        if !checked && !exempt {
            gaps.push(format!("#define {name} is not checked"));
        }
    }
    for d in defines
        .iter()
        .map(|d| d.c)
        .chain(NOT_VALUES.iter().map(|n| n.0))
    {
        if !declared.defines.iter().any(|n| n == d) {
            gaps.push(format!("#define {d} is checked but not in the header"));
        }
    }
    let typedefs = typedefs();
    for name in &declared.typedefs {
        if !typedefs.iter().any(|t| t.c == name) {
            gaps.push(format!("typedef {name} is not checked"));
        }
    }
    for t in &typedefs {
        if !declared.typedefs.iter().any(|n| n == t.c) {
            gaps.push(format!("typedef {} is checked but not in the header", t.c));
        }
    }
    gaps
}

fn header_text() -> String {
    std::fs::read_to_string(csrc().join("llaisys_runtime.h")).expect("csrc/llaisys_runtime.h")
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[test]
fn c_compiler_agrees_with_rust_on_every_header_item() {
    let rust = expected();
    let c = compiler_view(false);
    let diffs = differences(&c, &rust);
    assert!(
        diffs.is_empty(),
        "C and Rust disagree:\n{}",
        diffs.join("\n")
    );
    // Sanity: the comparison covered what it should (every struct field, every value).
    let fields: usize = structs().iter().map(|s| s.fields.len()).sum();
    assert_eq!(fields, 12 + 6 + 8 + 11 + 3 + 9 + 5 + 1 + 16 + 11);
    assert_eq!(c.len(), rust.len());
}

#[test]
fn cpp_compiler_agrees_with_rust_on_every_header_item() {
    let rust = expected();
    let diffs = differences(&compiler_view(true), &rust);
    assert!(
        diffs.is_empty(),
        "C++ and Rust disagree:\n{}",
        diffs.join("\n")
    );
}

#[test]
fn every_item_of_the_header_is_checked() {
    let declared = parse_header(&header_text());
    // The parse found the header's items (a parser that finds nothing would cover nothing).
    assert_eq!(declared.structs.len(), structs().len(), "{declared:#?}");
    assert_eq!(declared.enums.len(), enums().len(), "{declared:#?}");
    assert!(declared
        .typedefs
        .contains(&"llaisysNvidiaErrorHandler".to_string()));
    let gaps = uncovered(&declared);
    assert!(
        gaps.is_empty(),
        "csrc/llaisys_runtime.h and tests/header_abi.rs disagree; add the new items to the \
         checks (with the Rust value they must equal):\n{}",
        gaps.join("\n")
    );
}

#[test]
fn a_new_header_item_without_a_check_is_caught() {
    let additions = [
        (
            "typedef struct llaisysNvidiaNew { int a; } llaisysNvidiaNew;",
            "struct llaisysNvidiaNew is not checked",
        ),
        (
            "typedef enum { LLAISYS_NVIDIA_MODE_A = 0 } llaisysNvidiaMode_t;",
            "enum llaisysNvidiaMode_t is not checked",
        ),
        (
            "#define LLAISYS_NVIDIA_STREAM_LOW_PRIORITY 2u /* new flag */",
            "#define LLAISYS_NVIDIA_STREAM_LOW_PRIORITY is not checked",
        ),
        (
            "typedef int (*llaisysNvidiaCallback)(void *user_data);",
            "typedef llaisysNvidiaCallback is not checked",
        ),
    ];
    let header = header_text();
    for (addition, gap) in additions {
        let text = format!("{header}\n{addition}\n");
        let gaps = uncovered(&parse_header(&text));
        assert_eq!(gaps, vec![gap.to_string()], "after adding {addition}");
    }
    // A new field of a checked struct, and a new enumerator of a checked enum.
    let field = header.replace(
        "    int ours;             /* 1 inside memory of malloc_device / malloc_host */",
        "    int ours;\n    int extra_flags, more;",
    );
    assert_ne!(
        field, header,
        "the PointerAttributes line moved; update this test"
    );
    let gaps = uncovered(&parse_header(&field));
    assert_eq!(gaps.len(), 1, "{gaps:?}");
    assert!(
        gaps[0].contains("extra_flags") && gaps[0].contains("more"),
        "{gaps:?}"
    );
    let enumerator = header.replace(
        "LLAISYS_NVIDIA_ERROR_INTERNAL = 4",
        "LLAISYS_NVIDIA_ERROR_INTERNAL = 4,\n    LLAISYS_NVIDIA_ERROR_NEW = 5",
    );
    assert_ne!(enumerator, header);
    let gaps = uncovered(&parse_header(&enumerator));
    assert_eq!(gaps.len(), 1, "{gaps:?}");
    assert!(gaps[0].contains("LLAISYS_NVIDIA_ERROR_NEW"), "{gaps:?}");
}

#[test]
fn header_parser_reads_declarators_as_c_does() {
    assert_eq!(
        field_names("int major, minor; char name[256]; const char *function; void *p;"),
        ["major", "minor", "name", "function", "p"]
    );
    assert_eq!(
        declarator_name("typedef void (*h)(const int *e, void *u)"),
        "h"
    );
    assert_eq!(
        declarator_name("typedef void *llaisysStream_t"),
        "llaisysStream_t"
    );
    assert_eq!(strip_comments("a /* x // y */ b // z /* w\nc"), "a   b \nc");
}

#[test]
fn a_layout_difference_is_reported() {
    // The comparison itself: a wrong value, a missing line and an extra line are all reported.
    let rust = expected();
    let mut c = rust.clone();
    c.insert("field llaisysNvidiaError.message".into(), "0 8".into());
    c.remove("define LLAISYS_NVIDIA_EVENT_DISABLE_TIMING");
    c.insert("struct llaisysNvidiaExtra".into(), "4 4".into());
    let diffs = differences(&c, &rust);
    assert_eq!(diffs.len(), 3, "{diffs:?}");
    assert!(diffs
        .iter()
        .any(|d| d.starts_with("field llaisysNvidiaError.message: C says 0 8")));
    assert!(diffs
        .iter()
        .any(|d| d.contains("DISABLE_TIMING: not printed")));
    assert!(diffs
        .iter()
        .any(|d| d.contains("llaisysNvidiaExtra: printed by C but not checked")));
}
