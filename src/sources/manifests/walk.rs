//! Walking the manifest directory: cluster folders and their manifest files.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use walkdir::WalkDir;

use super::files::Stamp;
use super::problem::Problem;
use crate::model::ClusterId;
pub use crate::model::is_valid_cluster_id;

/// The result of walking the directory.
#[derive(Default)]
pub(super) struct Walk {
    /// Manifest files in walk order (sorted, so reads are deterministic).
    pub(super) files: Vec<(PathBuf, ClusterId, Stamp)>,
    pub(super) problems: Vec<Problem>,
    /// Paths that could not be read: known files below them are kept as they were.
    pub(super) keep: Vec<PathBuf>,
}

/// Lists the cluster folders of `dir` and their manifest files, in sorted order.
pub(super) fn walk(dir: &Path) -> Walk {
    let mut walk = Walk::default();
    let fail = |walk: &mut Walk, path: &Path, reason: String| {
        walk.problems.push(Problem {
            file: path.to_path_buf(),
            document: None,
            reason,
        });
        walk.keep.push(path.to_path_buf());
    };
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            fail(&mut walk, dir, format!("cannot read directory: {e}"));
            return walk;
        }
    };
    let mut clusters = Vec::new();
    for entry in entries {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                fail(&mut walk, dir, format!("cannot read directory: {e}"));
                continue;
            }
        };
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        match fs::metadata(&path) {
            Ok(meta) if meta.is_dir() => clusters.push((name, path)),
            Ok(_) => {
                tracing::debug!(file = %path.display(), "ignoring file outside cluster folders")
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => fail(&mut walk, &path, format!("cannot read: {e}")),
        }
    }
    clusters.sort();

    for (name, cluster_dir) in clusters {
        if !is_valid_cluster_id(&name) {
            walk.problems.push(Problem {
                file: cluster_dir,
                document: None,
                reason: format!(
                    "folder name {name:?} is not a valid cluster id \
                     (a lower-case RFC 1123 DNS subdomain of at most 2 labels); skipped"
                ),
            });
            continue;
        }
        let cluster: ClusterId = name.into();
        let walker = WalkDir::new(&cluster_dir)
            .follow_links(true)
            .sort_by_file_name()
            .min_depth(1)
            .into_iter()
            .filter_entry(|e| !e.file_name().to_string_lossy().starts_with('.'));
        for entry in walker {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    if e.io_error()
                        .is_some_and(|e| e.kind() == io::ErrorKind::NotFound)
                    {
                        continue;
                    }
                    let path = e.path().unwrap_or(&cluster_dir).to_path_buf();
                    fail(&mut walk, &path, format!("cannot read: {e}"));
                    continue;
                }
            };
            if !entry.file_type().is_file() || !is_manifest(entry.path()) {
                continue;
            }
            match entry.metadata() {
                Ok(meta) => {
                    walk.files
                        .push((entry.into_path(), cluster.clone(), Stamp::of(&meta)));
                }
                Err(e)
                    if e.io_error()
                        .is_some_and(|e| e.kind() == io::ErrorKind::NotFound) => {}
                Err(e) => fail(&mut walk, entry.path(), format!("cannot read: {e}")),
            }
        }
    }
    walk
}

/// `*.yaml`, `*.yml` or `*.json`.
fn is_manifest(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml" | "json")
    )
}
