//! Compiles the CRI subset and plegd's own API with protox, so no machine needs `protoc`.
//!
//! - CRI `runtime.v1`: messages, client (plegd) and server (the simulated runtime).
//! - the kubelet's Pods API `v1alpha1`: client (plegd) and server (the simulated
//!   kubelet); `plegd.kubelet`: the parts of a pod plegd decodes.
//! - `plegd.v1`: messages and client.
//! - `plegd.v1`'s server alone, into `served/`, with the messages above except
//!   `WatchEvent`, which the server sends as `grpc::wire::WatchFrame` (a published
//!   event's shared encoding, byte for byte a `WatchEvent`) through `grpc::wire::Codec`.
//! - `plegd.v1`'s descriptors (with what they import) for server reflection.
//!
//! It also names the revision being built, as `PLEGD_REVISION` (`plegd --version`, the
//! `plegd_build_info` metric and the image's labels say the same): `$PLEGD_REVISION`
//! when set (an image built from a tarball), else the checkout's commit, else `unknown`.

/// The revision being built.
fn revision() -> String {
    println!("cargo:rerun-if-env-changed=PLEGD_REVISION");
    if let Ok(r) = std::env::var("PLEGD_REVISION")
        && !r.is_empty()
    {
        return r;
    }
    // A new commit or a checkout: read again.
    for path in [".git/HEAD", ".git/refs/heads", ".git/packed-refs"] {
        if std::path::Path::new(path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    git(&["rev-parse", "--short=12", "HEAD"]).filter(|r| !r.is_empty()).unwrap_or_else(|| "unknown".into())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rustc-env=PLEGD_REVISION={}", revision());
    let (cri, plegd) = ("runtime/v1/api.proto", "plegd/v1/plegd.proto");
    let (pods, view) = ("kubelet/pods/v1alpha1/api.proto", "kubelet/pod_view.proto");
    for f in [cri, plegd, pods, view] {
        println!("cargo:rerun-if-changed=cri-proto/{f}");
    }
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(protox::compile([cri], ["cri-proto"])?)?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(protox::compile([pods, view], ["cri-proto"])?)?;
    let plegd_fds = protox::compile([plegd], ["cri-proto"])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("plegd_descriptor.bin"), prost::Message::encode_to_vec(&plegd_fds))?;
    tonic_prost_build::configure().build_client(true).build_server(false).compile_fds(plegd_fds)?;
    let served = std::path::PathBuf::from(std::env::var("OUT_DIR")?).join("served");
    std::fs::create_dir_all(&served)?;
    tonic_prost_build::configure()
        .out_dir(&served)
        .build_client(false)
        .build_server(true)
        .extern_path(".plegd.v1.WatchEvent", "crate::grpc::wire::WatchFrame")
        .extern_path(".plegd.v1", "crate::proto::plegd")
        .codec_path("crate::grpc::wire::Codec")
        .compile_fds(protox::compile([plegd], ["cri-proto"])?)?;
    Ok(())
}
