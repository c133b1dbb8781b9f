//! Records the git commit the binary is built from (for benchmark rows).
use std::process::Command;

fn main() {
    let out = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let commit = out(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty =
        out(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    println!(
        "cargo:rustc-env=MHC_GIT_COMMIT={commit}{}",
        if dirty { "+dirty" } else { "" }
    );
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/index");
    // An edit that is not staged changes neither of those: without these the "+dirty" mark of a
    // rebuilt binary would be stale (rows of an edited tree recorded as the clean commit).
    for dir in ["src", "tests", "scripts"] {
        println!("cargo:rerun-if-changed={dir}");
    }
}
