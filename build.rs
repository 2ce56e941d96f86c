//! Compiles the CRI subset and plegd's own API with protox, so no machine needs `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["runtime/v1/api.proto", "plegd/v1/plegd.proto"];
    for f in &files {
        println!("cargo:rerun-if-changed=cri-proto/{f}");
    }
    let fds = protox::compile(files, ["cri-proto"])?;
    tonic_prost_build::configure().build_client(true).build_server(true).compile_fds(fds)?;
    Ok(())
}
