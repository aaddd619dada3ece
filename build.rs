//! Records the git revision being built (`git rev-parse --short HEAD`) as
//! `CLUSTERSET_DNS_REVISION`, for `/metrics` and the start-up log line;
//! "unknown" outside a git checkout (the Docker build copies no `.git`).

use std::process::Command;

fn main() {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
    };
    let revision = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=CLUSTERSET_DNS_REVISION={revision}");
    // Build again when HEAD moves (a commit, a checkout); in a worktree the
    // git dir is not `.git`.
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        if let Some(reference) = git(&["symbolic-ref", "-q", "HEAD"]) {
            let common = git(&["rev-parse", "--git-common-dir"]).unwrap_or(dir);
            println!("cargo:rerun-if-changed={common}/{reference}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
