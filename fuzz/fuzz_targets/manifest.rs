//! The manifest reader: any bytes as one manifest file of a member cluster
//! (YAML, one or more documents, or a `kubectl` List), read, converted into
//! facts and reconciled by the engine as `status` would. No panic; a bad
//! document is a problem, not a crash.
#![no_main]

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::LazyLock;

use clusterset_dns::cli::ServeArgs;
use clusterset_dns::engine::{Engine, EngineSettings};
use clusterset_dns::runtime::assembly::engine_settings;
use clusterset_dns::sources::manifests::ManifestSource;
use libfuzzer_sys::fuzz_target;

/// A manifest directory with one cluster, `east`, whose one file each run rewrites.
static DIR: LazyLock<(tempfile::TempDir, PathBuf)> = LazyLock::new(|| {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("east")).unwrap();
    let file = dir.path().join("east/fuzz.yaml");
    (dir, file)
});

/// The default engine settings, parsed once from an empty command line.
static SETTINGS: LazyLock<EngineSettings> =
    LazyLock::new(|| engine_settings(&ServeArgs::default().clusterset));

fuzz_target!(|data: &[u8]| {
    let (dir, file) = &*DIR;
    std::fs::write(file, data).unwrap();
    // A new source each time: nothing is reused from the last run.
    let mut source = ManifestSource::new(dir.path());
    let changes = source.rescan(&HashSet::new());
    let _ = source.problems();
    let mut engine = Engine::new(SETTINGS.clone());
    let _ = engine.apply(changes);
    let _ = engine.stats();
});
