//! `llaisys-nvidia`: the doctor. Explains this machine's CUDA setup for the llaisys NVIDIA
//! backend and measures it; `--help` lists the options and the exit statuses. The work lives in
//! the `llaisys_nvidia_doctor` library of this crate, where tests can call it.

fn main() {
    let status = llaisys_nvidia_doctor::cli::main(std::env::args_os().skip(1));
    std::process::exit(status);
}
