//! Build script: links libfake_nvml.so with `-z nodelete`. nvml-wrapper
//! dlcloses the library when an `Nvml` drops and when init fails; without
//! this the next dlopen would start from fresh statics, losing the poll
//! clock and the init attempt count that scenarios rely on being
//! process-wide.

fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo::rustc-cdylib-link-arg=-Wl,-z,nodelete");
    }
    println!("cargo::rerun-if-changed=build.rs");
}
