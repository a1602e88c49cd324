//! `llaisys-nvidia`: reports the CUDA runtime and driver versions and the device count, or why
//! there is none.
use llaisys_nvidia::runtime;

fn main() {
    println!(
        "llaisys-nvidia {} ({} cudart, built against CUDA {})",
        runtime::build::CRATE_VERSION,
        runtime::build::LINK_MODE,
        runtime::version_string(runtime::build::cudart_version())
    );
    match runtime::runtime_version() {
        Ok(v) => println!("runtime version: {}", runtime::version_string(v)),
        Err(e) => println!("runtime version: unknown ({e})"),
    }
    match runtime::driver_version() {
        Ok(0) => println!("driver version: none (no NVIDIA driver installed)"),
        Ok(v) => println!(
            "driver version: supports CUDA {}",
            runtime::version_string(v)
        ),
        Err(e) => println!("driver version: unknown ({e})"),
    }
    match runtime::device_count() {
        Ok(n) => println!("devices: {n}"),
        Err(e) => println!("devices: 0 ({e})"),
    }
}
