//! The `--config` file: any bytes as the YAML file of `serve`, `status` or
//! `check` (the first byte picks), read and turned into flags that clap
//! parses. No panic: every bad file is a clap error naming the key.
#![no_main]

use std::path::PathBuf;
use std::sync::LazyLock;

use clusterset_dns::cli::config_file;
use libfuzzer_sys::fuzz_target;

/// Where each run writes the file.
static FILE: LazyLock<(tempfile::TempDir, PathBuf)> = LazyLock::new(|| {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    (dir, file)
});

fuzz_target!(|data: &[u8]| {
    let Some((&first, text)) = data.split_first() else {
        return;
    };
    let (_dir, file) = &*FILE;
    std::fs::write(file, text).unwrap();
    let command = ["serve", "status", "check"][usize::from(first % 3)];
    let argv = ["clusterset-dns", command, "--config", file.to_str().unwrap()];
    if let Err(error) = config_file::parse(argv) {
        // Rendering the error must not panic either.
        let _ = error.render().to_string();
    }
});
