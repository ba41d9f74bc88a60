//! Embeds the eBPF object built by `cargo xtask build`. Without it the tracer still builds
//! (so `cargo check`, clippy and unit tests need no nightly toolchain) and says at run time
//! how to get the programs.
use std::path::PathBuf;

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let object = std::env::var("TRACER_EBPF_OBJECT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../target/bpfel-unknown-none/release/tracer-ebpf")
        });
    println!("cargo:rerun-if-env-changed=TRACER_EBPF_OBJECT");
    println!("cargo:rerun-if-changed={}", object.display());
    let dest = out.join("tracer-ebpf.o");
    match std::fs::read(&object) {
        Ok(bytes) => std::fs::write(&dest, bytes).unwrap(),
        Err(_) => std::fs::write(&dest, b"").unwrap(),
    }
}
