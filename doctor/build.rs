//! Build script of the doctor: with the library's `dynamic` feature, the `llaisys-nvidia`
//! binary (and the doctor's tests) must find the shared libcudart at run time as the library's
//! own programs do. The library's build script writes that run-time path only into its own
//! package's programs, and publishes the facts (`links` metadata) for dependents like this one.

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_LLAISYS_CUDART_LINK_MODE");
    println!("cargo:rerun-if-env-changed=DEP_LLAISYS_CUDART_LIB_DIR");
    let mode = std::env::var("DEP_LLAISYS_CUDART_LINK_MODE").unwrap_or_default();
    if mode == "dynamic" {
        // Next to the binary first (how the GPU stage ships it), then the folder it was built
        // against; LD_LIBRARY_PATH still comes first (RUNPATH).
        println!("cargo:rustc-link-arg=-Wl,-rpath,$ORIGIN");
        if let Ok(dir) = std::env::var("DEP_LLAISYS_CUDART_LIB_DIR") {
            println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
        }
    }
}
