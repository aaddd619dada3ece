//! The manifest-directory source: member clusters described by YAML/JSON files.
//!
//! Layout: `DIR/<cluster-id>/**/*.{yaml,yml,json}`. Each top-level folder is one
//! member cluster (its name is the cluster id); below it, files at any depth hold
//! what `kubectl get -o yaml` prints: Services, ServiceExports (`v1alpha1` or
//! `v1beta1`), EndpointSlices, Namespaces and `List`s of those. Hidden files and
//! folders, other extensions and files directly in `DIR` are skipped.

mod documents;
mod files;
mod problem;
mod read;
mod walk;
pub(crate) mod watch;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::model::intern::Interner;
use crate::model::{Change, ClusterId, Object, ObjectRef, ServiceKey};
use documents::Reusable;
use files::{FileState, Files, Ident, Stamp};
pub use problem::Problem;
pub use walk::is_valid_cluster_id;

/// Namespaces and names, shared by idents, keys and the engine.
type Strings = Interner<str>;

/// The shared copy of `s`.
fn shared(strings: &mut Strings, s: &str) -> Arc<str> {
    strings.get(s, || Arc::from(s))
}

/// The objects a rescan touched, each with its winning definition from
/// before the rescan: what the engine was told.
type Affected = BTreeMap<Ident, Option<(ServiceKey, Object)>>;

/// Reads a manifest directory and reports its objects as [`Change`]s, file by file.
#[derive(Debug)]
pub struct ManifestSource {
    dir: PathBuf,
    /// Every file's objects, and which definition of each object wins.
    files: Files,
    /// Namespaces and names, shared by idents, keys and the engine.
    strings: Strings,
    next_seq: u64,
    problems: Vec<Problem>,
    /// The latest rescan could not read a folder or a file.
    incomplete: bool,
    ignored_logged: HashSet<(PathBuf, String)>,
}

impl ManifestSource {
    /// A source for `dir`; nothing is read until [`rescan`](Self::rescan).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        ManifestSource {
            dir: dir.into(),
            files: Files::default(),
            strings: Strings::default(),
            next_seq: 0,
            problems: Vec::new(),
            incomplete: false,
            ignored_logged: HashSet::new(),
        }
    }

    /// The directory this source reads.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Problems found by the latest rescan that are still current, sorted by file.
    pub fn problems(&self) -> Vec<Problem> {
        self.problems.clone()
    }

    /// Whether the latest rescan could not read a folder or a file (too many
    /// open files, say): what it kept is the last good state, and a rescan
    /// soon may read it.
    pub fn incomplete(&self) -> bool {
        self.incomplete
    }

    /// Walks the directory, re-reads every file that is new, whose (len, mtime)
    /// changed or whose path is in `touched`, forgets files that are gone, and
    /// returns the Changes since the previous call (the first call returns everything).
    pub fn rescan(&mut self, touched: &HashSet<PathBuf>) -> Vec<Change> {
        let walk = walk::walk(&self.dir);
        self.incomplete = !walk.keep.is_empty();
        let mut affected = Affected::new();
        // Nothing was told before the first scan: every winner is new, and
        // noting each of the (many) objects as touched would only cost memory.
        let first = self.files.is_empty();

        let walked: HashSet<&Path> = walk.files.iter().map(|(p, ..)| p.as_path()).collect();
        let gone: Vec<PathBuf> = self
            .files
            .iter()
            .map(|(p, _)| p)
            .filter(|p| !walked.contains(&***p) && !walk.keep.iter().any(|k| p.starts_with(k)))
            .map(|p| p.to_path_buf())
            .collect();
        drop(walked);
        for path in gone {
            self.undefine(&path, &mut affected);
        }

        let now = unix_now();
        let to_read: Vec<(PathBuf, ClusterId, Stamp)> = walk
            .files
            .into_iter()
            .filter(|(path, _, stamp)| {
                !self
                    .files
                    .get(path)
                    .is_some_and(|s| s.stamp == Some(*stamp) && !touched.contains(path))
            })
            .collect();
        // Parse on every core, and apply each file in walk order while the
        // next ones are parsed.
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let reusable: Vec<Reusable> = to_read
            .iter()
            .map(|(path, ..)| {
                self.files
                    .get(path)
                    .map(FileState::reusable)
                    .unwrap_or_default()
            })
            .collect();
        let files: Vec<(&Path, &Reusable)> = to_read
            .iter()
            .zip(&reusable)
            .map(|((path, ..), reusable)| (path.as_path(), reusable))
            .collect();
        documents::read_in_order(&files, threads, |i, pieces| {
            let file = &to_read[i];
            let path = &file.0;
            let old = self.undefine(path, &mut affected).unwrap_or_default();
            let state = self.read_file(file, pieces, old, &affected, now);
            if !first {
                for ident in state.objects.keys() {
                    self.touch(ident, &mut affected);
                }
            }
            self.files.insert(path, state);
        });

        let changes = if first {
            self.winners()
        } else {
            self.settle(affected)
        };
        self.update_problems(walk.problems);
        changes
    }

    /// Forgets `path`'s definitions and returns its state, noting the
    /// objects it defined (and what won for them before) in `affected`.
    fn undefine(&mut self, path: &Path, affected: &mut Affected) -> Option<FileState> {
        for ident in self.files.get(path)?.objects.keys() {
            self.touch(ident, affected);
        }
        self.files.remove(path)
    }

    /// Notes `ident` in `affected` with its winning definition, unless
    /// already noted (call before its definitions change).
    fn touch(&self, ident: &Ident, affected: &mut Affected) {
        if !affected.contains_key(ident) {
            affected.insert(ident.clone(), self.winner(ident));
        }
    }

    /// The definition that wins for `ident`: the first file's.
    fn winner(&self, ident: &Ident) -> Option<(ServiceKey, Object)> {
        let def = self.files.winner(ident)?;
        Some((def.key(ident), def.object.clone()))
    }

    /// Every winning definition, as an upsert.
    fn winners(&self) -> Vec<Change> {
        let mut changes = Vec::new();
        for (_, state) in self.files.iter() {
            for (ident, def) in state.objects.iter() {
                if self
                    .files
                    .winner(ident)
                    .is_some_and(|w| std::ptr::eq(w, def))
                {
                    let object = def.object.clone();
                    changes.push(Change::Upsert(
                        ident.cluster.clone(),
                        def.key(ident),
                        object,
                    ));
                }
            }
        }
        changes.sort_by(|a, b| change_order(a).cmp(&change_order(b)));
        changes
    }

    /// Compares the winning definition of each affected object with the one
    /// before the rescan (what the engine was told).
    fn settle(&mut self, affected: Affected) -> Vec<Change> {
        let mut changes = Vec::new();
        for (ident, old) in affected {
            let new = self.winner(&ident);
            let cluster = &ident.cluster;
            match (old, &new) {
                (None, None) => {}
                (Some((key, obj)), None) => {
                    changes.push(Change::Delete(cluster.clone(), key, obj.reference()));
                }
                (None, Some((key, obj))) => {
                    changes.push(Change::Upsert(cluster.clone(), key.clone(), obj.clone()));
                }
                (Some((old_key, old_obj)), Some((key, obj))) => {
                    if old_key != *key {
                        changes.push(Change::Delete(
                            cluster.clone(),
                            old_key,
                            old_obj.reference(),
                        ));
                        changes.push(Change::Upsert(cluster.clone(), key.clone(), obj.clone()));
                    } else if old_obj != *obj {
                        changes.push(Change::Upsert(cluster.clone(), key.clone(), obj.clone()));
                    }
                }
            }
        }
        changes.sort_by(|a, b| change_order(a).cmp(&change_order(b)));
        changes
    }

    /// Gathers the current problems and warns about the new ones.
    fn update_problems(&mut self, walk_problems: Vec<Problem>) {
        let mut current = walk_problems;
        for (_, state) in self.files.iter() {
            current.extend(state.problems.iter().cloned());
        }
        for (ident, paths) in self.files.duplicated() {
            let mut paths = paths.iter();
            let Some(winner) = paths.next() else { continue };
            for path in paths {
                let document = self
                    .files
                    .get(path)
                    .and_then(|s| s.objects.get(ident))
                    .map(|d| d.document as usize);
                current.push(Problem {
                    file: path.to_path_buf(),
                    document,
                    reason: format!("{ident} also defined in {}", winner.display()),
                });
            }
        }
        current.sort();
        current.dedup();
        let before: HashSet<&Problem> = self.problems.iter().collect();
        for problem in current.iter().filter(|p| !before.contains(p)) {
            tracing::warn!("{problem}");
        }
        self.problems = current;
    }
}

/// Seconds since the Unix epoch.
fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Orders a batch by cluster, service and object, deletes before upserts.
fn change_order(change: &Change) -> (&ClusterId, &ServiceKey, ObjectRef, bool) {
    match change {
        Change::Delete(cluster, key, r) => (cluster, key, r.clone(), false),
        Change::Upsert(cluster, key, obj) => (cluster, key, obj.reference(), true),
        Change::Vips(..) | Change::Live(..) | Change::Namespace(..) => {
            unreachable!("manifests carry no VIP agreements, heartbeats or namespaces")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::fs;

    use crate::model::{ExportAge, ServiceKind};

    fn write(root: &Path, rel: &str, text: &str) -> PathBuf {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, text).unwrap();
        path
    }

    fn none() -> HashSet<PathBuf> {
        HashSet::new()
    }

    /// `U|D cluster ns/name Kind[/slice]`, one line per change.
    fn summary(changes: &[Change]) -> Vec<String> {
        let r = |r: &ObjectRef| match r {
            ObjectRef::Export => "Export".to_owned(),
            ObjectRef::Service => "Service".to_owned(),
            ObjectRef::Slice(n) => format!("Slice/{n}"),
            ObjectRef::Seen => "Seen".to_owned(),
            ObjectRef::Derived => "Derived".to_owned(),
        };
        changes
            .iter()
            .map(|c| match c {
                Change::Upsert(cl, k, o) => format!("U {cl} {k} {}", r(&o.reference())),
                Change::Delete(cl, k, o) => format!("D {cl} {k} {}", r(o)),
                Change::Vips(k, ips) => format!("V {k} {ips:?}"),
                Change::Live(cl, live) => format!("L {cl} {live}"),
                Change::Namespace(ns, exists) => format!("N {ns} {exists}"),
            })
            .collect()
    }

    fn svc(ns: &str, name: &str, ip: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: {ns}\n\
             spec:\n  clusterIP: {ip}\n  ports:\n  - port: 80\n"
        )
    }

    fn export(ns: &str, name: &str) -> String {
        format!(
            "apiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceExport\n\
             metadata:\n  name: {name}\n  namespace: {ns}\n"
        )
    }

    fn slice(ns: &str, name: &str, service: &str, ip: &str) -> String {
        format!(
            "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {name}\n  \
             namespace: {ns}\n  labels:\n    kubernetes.io/service-name: {service}\n\
             addressType: IPv4\nendpoints:\n- addresses: [\"{ip}\"]\n"
        )
    }

    fn upserted<'a>(changes: &'a [Change], cluster: &str, key: &str) -> Vec<&'a Object> {
        changes
            .iter()
            .filter_map(|c| match c {
                Change::Upsert(cl, k, o) if &**cl == cluster && k.to_string() == key => Some(o),
                _ => None,
            })
            .collect()
    }

    fn export_age(changes: &[Change], cluster: &str, key: &str) -> ExportAge {
        upserted(changes, cluster, key)
            .into_iter()
            .find_map(|o| match o {
                Object::Export(e) => Some(e.age),
                _ => None,
            })
            .expect("export upserted")
    }

    fn two_clusters(root: &Path) {
        write(
            root,
            "east/prod/web.yaml",
            &format!(
                "{}---\n{}---\n{}",
                export("prod", "web"),
                svc("prod", "web", "10.0.0.1"),
                slice("prod", "web-abc", "web", "10.1.0.1")
            ),
        );
        write(root, "east/db.yml", &svc("prod", "db", "None"));
        write(
            root,
            "west/all.yaml",
            &format!(
                "{}---\n{}",
                export("prod", "web"),
                svc("prod", "web", "10.9.0.1")
            ),
        );
    }

    #[test]
    fn first_scan_reports_everything_then_nothing() {
        let dir = tempfile::tempdir().unwrap();
        two_clusters(dir.path());
        let mut src = ManifestSource::new(dir.path());
        let changes = src.rescan(&none());
        assert_eq!(
            summary(&changes),
            vec![
                "U east prod/db Service",
                "U east prod/web Export",
                "U east prod/web Service",
                "U east prod/web Slice/web-abc",
                "U west prod/web Export",
                "U west prod/web Service",
            ]
        );
        let db = upserted(&changes, "east", "prod/db");
        assert!(matches!(db[0], Object::Service(s) if s.kind == ServiceKind::Headless));
        let west = upserted(&changes, "west", "prod/web");
        assert!(
            matches!(west[1], Object::Service(s) if s.cluster_ips[..] == ["10.9.0.1".parse::<std::net::IpAddr>().unwrap()])
        );
        assert!(src.problems().is_empty());
        assert_eq!(src.rescan(&none()), vec![]);
        // Touching a file re-reads it, but unchanged objects emit nothing.
        let touched: HashSet<PathBuf> = [dir.path().join("east/db.yml")].into();
        assert_eq!(src.rescan(&touched), vec![]);
    }

    #[test]
    fn edit_one_service_is_one_upsert_and_removal_deletes() {
        let dir = tempfile::tempdir().unwrap();
        two_clusters(dir.path());
        let mut src = ManifestSource::new(dir.path());
        src.rescan(&none());

        let path = dir.path().join("east/prod/web.yaml");
        let text = fs::read_to_string(&path)
            .unwrap()
            .replace("10.0.0.1", "10.0.0.2");
        fs::write(&path, text).unwrap();
        let changes = src.rescan(&[path.clone()].into());
        assert_eq!(summary(&changes), vec!["U east prod/web Service"]);

        fs::remove_file(&path).unwrap();
        let changes = src.rescan(&none());
        assert_eq!(
            summary(&changes),
            vec![
                "D east prod/web Export",
                "D east prod/web Service",
                "D east prod/web Slice/web-abc"
            ]
        );

        fs::remove_dir_all(dir.path().join("west")).unwrap();
        let changes = src.rescan(&none());
        assert_eq!(
            summary(&changes),
            vec!["D west prod/web Export", "D west prod/web Service"]
        );
    }

    #[test]
    fn an_edit_reads_only_the_changed_documents_again() {
        let dir = tempfile::tempdir().unwrap();
        let docs = |first_ip: &str| {
            [
                svc("prod", "a", first_ip),
                "kind: Nonsense\n".to_owned(),
                svc("prod", "b", "10.0.0.2"),
            ]
            .join("---\n")
        };
        let path = write(dir.path(), "east/prod.yaml", &docs("10.0.0.1"));
        let mut src = ManifestSource::new(dir.path());
        assert_eq!(src.rescan(&none()).len(), 2);
        let object = |src: &ManifestSource, name: &str| {
            let (ident, def) = src
                .files
                .get(&path)
                .unwrap()
                .objects
                .iter()
                .find(|(i, _)| &*i.name == name)
                .unwrap();
            let Object::Service(info) = &def.object else {
                panic!("{ident} is not a Service")
            };
            (info.clone(), def.document)
        };
        let (b_before, _) = object(&src, "b");
        let rewrite = |src: &mut ManifestSource, text: String| {
            fs::write(&path, text).unwrap();
            summary(&src.rescan(&[path.clone()].into()))
        };

        // One document edited and one added in front: only those are parsed
        // and converted; b is the very object read before, renumbered, and
        // the broken document's problem moves with it.
        let text = format!("{}---\n{}", svc("prod", "c", "10.0.0.3"), docs("10.0.0.9"));
        assert_eq!(
            rewrite(&mut src, text),
            ["U east prod/a Service", "U east prod/c Service"]
        );
        let (b_after, b_document) = object(&src, "b");
        assert!(Arc::ptr_eq(&b_before, &b_after));
        assert_eq!(b_document, 4);
        assert_eq!(object(&src, "a").0.cluster_ips[0].to_string(), "10.0.0.9");
        let problems: Vec<Option<usize>> = src.problems().iter().map(|p| p.document).collect();
        assert_eq!(problems, [Some(3)]);

        // An edited document that now defines b too wins over the unchanged
        // one, which becomes the duplicate.
        let text = format!("{}---\n{}", svc("prod", "b", "10.0.0.7"), docs("10.0.0.9"));
        assert_eq!(
            rewrite(&mut src, text),
            ["U east prod/b Service", "D east prod/c Service"]
        );
        assert_eq!(object(&src, "b").0.cluster_ips[0].to_string(), "10.0.0.7");
        let problems: Vec<String> = src.problems().iter().map(ToString::to_string).collect();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[1]
                .contains("document 4: Service prod/b is defined again (first in document 1)"),
            "{problems:?}"
        );
    }

    #[test]
    fn broken_file_is_a_problem_and_keeps_last_good_state() {
        let dir = tempfile::tempdir().unwrap();
        two_clusters(dir.path());
        let bad = write(dir.path(), "east/bad.yaml", "kind: [unclosed\n");
        let mut src = ManifestSource::new(dir.path());
        let changes = src.rescan(&none());
        assert_eq!(changes.len(), 6);
        let problems = src.problems();
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].file, bad);
        assert_eq!(problems[0].document, None);
        assert!(
            problems[0].reason.starts_with("invalid YAML"),
            "{}",
            problems[0]
        );
        assert!(problems[0].to_string().contains("bad.yaml: invalid YAML"));

        // Breaking a previously good file keeps its objects.
        let web = dir.path().join("east/prod/web.yaml");
        fs::write(&web, "apiVersion: v1\nkind: Service\nmetadata: {name: x\n").unwrap();
        assert_eq!(src.rescan(&[web.clone()].into()), vec![]);
        assert_eq!(src.problems().len(), 2);
        assert!(src.problems().iter().any(|p| p.file == web));

        // Fixing it clears its problem; an edit in the fix is reported.
        fs::write(
            &web,
            format!(
                "{}---\n{}---\n{}",
                export("prod", "web"),
                svc("prod", "web", "10.0.0.1"),
                slice("prod", "web-abc", "web", "10.1.0.7")
            ),
        )
        .unwrap();
        let changes = src.rescan(&[web.clone()].into());
        assert_eq!(summary(&changes), vec!["U east prod/web Slice/web-abc"]);
        assert_eq!(src.problems().len(), 1);
        fs::remove_file(&bad).unwrap();
        assert_eq!(src.rescan(&none()), vec![]);
        assert!(src.problems().is_empty());
    }

    #[test]
    fn invalid_document_is_skipped_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "east/f.yaml",
            &format!(
                "{}---\n{}---\n{}",
                svc("prod", "a", "10.0.0.1"),
                svc("prod", "b", "10.0.0.x"),
                svc("prod", "c", "10.0.0.3")
            ),
        );
        let mut src = ManifestSource::new(dir.path());
        let changes = src.rescan(&none());
        assert_eq!(
            summary(&changes),
            vec!["U east prod/a Service", "U east prod/c Service"]
        );
        let problems = src.problems();
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].document, Some(2));
        assert_eq!(
            problems[0].to_string(),
            format!(
                "{}: document 2: Service prod/b: clusterIP \"10.0.0.x\" is not an IP address",
                path.display()
            )
        );

        // Fix b, then break a: the previous a is kept (no Delete), c's edit applies.
        fs::write(
            &path,
            format!(
                "{}---\n{}---\n{}",
                svc("prod", "a", "10.0.0.1"),
                svc("prod", "b", "10.0.0.2"),
                svc("prod", "c", "10.0.0.3")
            ),
        )
        .unwrap();
        assert_eq!(
            summary(&src.rescan(&[path.clone()].into())),
            vec!["U east prod/b Service"]
        );
        assert!(src.problems().is_empty());
        fs::write(
            &path,
            format!(
                "{}---\n{}---\n{}",
                "apiVersion: v1\nkind: Service\nmetadata: {name: a, namespace: prod}\nspec: {ports: 80}\n",
                svc("prod", "b", "10.0.0.2"),
                svc("prod", "c", "10.0.0.4")
            ),
        )
        .unwrap();
        assert_eq!(
            summary(&src.rescan(&[path.clone()].into())),
            vec!["U east prod/c Service"]
        );
        let problems = src.problems();
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].document, Some(1));
        assert!(
            problems[0]
                .reason
                .starts_with("Service prod/a: invalid type"),
            "{}",
            problems[0]
        );

        // Removing the broken document deletes a.
        fs::write(&path, svc("prod", "c", "10.0.0.4")).unwrap();
        assert_eq!(
            summary(&src.rescan(&[path.clone()].into())),
            vec!["D east prod/a Service", "D east prod/b Service"]
        );
    }

    #[test]
    fn kinds_lists_versions_and_json() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "east/list.yaml",
            "apiVersion: v1\nkind: List\nitems:\n\
             - apiVersion: v1\n  kind: Namespace\n  metadata: {name: prod}\n\
             - apiVersion: v1\n  kind: Service\n  metadata: {name: web, namespace: prod}\n  spec: {clusterIP: 10.0.0.1}\n\
             - apiVersion: multicluster.x-k8s.io/v1alpha1\n  kind: ServiceImport\n  metadata: {name: web, namespace: prod}\n  spec: {type: ClusterSetIP}\n\
             - apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: cm}\n\
             ---\n\
             ---\n\
             apiVersion: multicluster.x-k8s.io/v1beta1\nkind: ServiceExport\nmetadata: {name: web, namespace: prod}\n\
             spec: {exportedLabels: {tier: web}}\n",
        );
        write(
            dir.path(),
            "east/s.json",
            r#"{"apiVersion": "v1", "kind": "List", "items": [
                 {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                  "metadata": {"name": "web-1", "namespace": "prod",
                               "labels": {"kubernetes.io/service-name": "web"}},
                  "addressType": "IPv4", "endpoints": [{"addresses": ["10.1.0.1"]}]}]}
               {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "api"}}"#,
        );
        write(
            dir.path(),
            "east/one.json",
            r#"{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "one"}}"#,
        );
        // Skipped: hidden files and folders, other extensions, top-level files.
        write(
            dir.path(),
            "east/.hidden.yaml",
            &svc("prod", "hidden", "10.0.0.9"),
        );
        write(
            dir.path(),
            "east/.git/x.yaml",
            &svc("prod", "hidden", "10.0.0.9"),
        );
        write(
            dir.path(),
            "east/notes.txt",
            &svc("prod", "hidden", "10.0.0.9"),
        );
        write(dir.path(), "top.yaml", &svc("prod", "hidden", "10.0.0.9"));
        write(
            dir.path(),
            ".hidden/x.yaml",
            &svc("prod", "hidden", "10.0.0.9"),
        );

        let mut src = ManifestSource::new(dir.path());
        let changes = src.rescan(&none());
        assert_eq!(
            summary(&changes),
            vec![
                "U east default/api Service",
                "U east default/one Service",
                "U east prod/web Export",
                "U east prod/web Service",
                "U east prod/web Slice/web-1",
            ]
        );
        assert!(src.problems().is_empty(), "{:?}", src.problems());
        let web = upserted(&changes, "east", "prod/web");
        let Object::Export(e) = web[0] else { panic!() };
        assert_eq!(
            e.exported.labels.get("tier").map(String::as_str),
            Some("web")
        );
        let Object::Slice(name, slice) = web[2] else {
            panic!()
        };
        let endpoints = &slice.endpoints;
        assert_eq!(
            (&**name, endpoints.len(), endpoints[0].ready),
            ("web-1", 1, true)
        );
    }

    #[test]
    fn bad_cluster_folders_and_list_items() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "East/a.yaml", &svc("prod", "a", "10.0.0.1"));
        write(dir.path(), "a.b.c/a.yaml", &svc("prod", "a", "10.0.0.1"));
        write(
            dir.path(),
            "us-east.prod/a.yaml",
            &svc("prod", "a", "10.0.0.1"),
        );
        write(
            dir.path(),
            "us-east.prod/list.yaml",
            "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Service\n  metadata: {name: b}\n\
             - apiVersion: discovery.k8s.io/v1\n  kind: EndpointSlice\n  metadata: {name: s}\n  addressType: IPv4\n\
             - 42\n",
        );
        let mut src = ManifestSource::new(dir.path());
        let changes = src.rescan(&none());
        assert_eq!(
            summary(&changes),
            vec![
                "U us-east.prod default/b Service",
                "U us-east.prod prod/a Service"
            ]
        );
        let problems: Vec<String> = src
            .problems()
            .iter()
            .map(|p| {
                p.to_string()
                    .replace(&format!("{}/", dir.path().display()), "")
            })
            .collect();
        assert_eq!(
            problems,
            vec![
                "East: folder name \"East\" is not a valid cluster id (a lower-case RFC 1123 DNS subdomain of at most 2 labels); skipped",
                "a.b.c: folder name \"a.b.c\" is not a valid cluster id (a lower-case RFC 1123 DNS subdomain of at most 2 labels); skipped",
                "us-east.prod/list.yaml: document 1: item 2: EndpointSlice default/s: missing label kubernetes.io/service-name",
                "us-east.prod/list.yaml: document 1: item 3: not a Kubernetes object (expected a mapping)",
            ]
        );
        assert!(is_valid_cluster_id("east") && is_valid_cluster_id("c-1.prod"));
        assert!(
            !is_valid_cluster_id("-x") && !is_valid_cluster_id("") && !is_valid_cluster_id("a..b")
        );
    }

    #[test]
    fn duplicates_first_file_wins_until_removed() {
        let dir = tempfile::tempdir().unwrap();
        let a = write(dir.path(), "east/a.yaml", &svc("prod", "web", "10.0.0.1"));
        let b = write(
            dir.path(),
            "east/b.yaml",
            &format!(
                "{}---\n{}",
                svc("prod", "other", "10.0.0.5"),
                svc("prod", "web", "10.0.0.2")
            ),
        );
        let mut src = ManifestSource::new(dir.path());
        let changes = src.rescan(&none());
        assert_eq!(
            summary(&changes),
            vec!["U east prod/other Service", "U east prod/web Service"]
        );
        let Object::Service(s) = upserted(&changes, "east", "prod/web")[0] else {
            panic!()
        };
        assert_eq!(s.cluster_ips[0].to_string(), "10.0.0.1");
        let problems = src.problems();
        assert_eq!(problems.len(), 1);
        assert_eq!(
            problems[0].to_string(),
            format!(
                "{}: document 2: Service prod/web also defined in {}",
                b.display(),
                a.display()
            )
        );

        fs::remove_file(&a).unwrap();
        let changes = src.rescan(&none());
        assert_eq!(summary(&changes), vec!["U east prod/web Service"]);
        let Object::Service(s) = upserted(&changes, "east", "prod/web")[0] else {
            panic!()
        };
        assert_eq!(s.cluster_ips[0].to_string(), "10.0.0.2");
        assert!(src.problems().is_empty());
    }

    #[test]
    fn slice_moving_to_another_service() {
        let dir = tempfile::tempdir().unwrap();
        let f = write(
            dir.path(),
            "east/s.yaml",
            &slice("prod", "s1", "web", "10.1.0.1"),
        );
        let mut src = ManifestSource::new(dir.path());
        assert_eq!(
            summary(&src.rescan(&none())),
            vec!["U east prod/web Slice/s1"]
        );
        fs::write(&f, slice("prod", "s1", "api", "10.1.0.1")).unwrap();
        assert_eq!(
            summary(&src.rescan(&[f].into())),
            vec!["U east prod/api Slice/s1", "D east prod/web Slice/s1"]
        );
    }

    #[test]
    fn export_age_is_stable_and_ordered_by_walk() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "east/b.yaml", &export("prod", "b"));
        let a = write(
            dir.path(),
            "east/a.yaml",
            &format!("{}---\n{}", export("prod", "a2"), export("prod", "a1")),
        );
        write(dir.path(), "west/a.yaml", &export("prod", "a1"));
        write(
            dir.path(),
            "west/ts.yaml",
            "apiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceExport\n\
             metadata: {name: ts, namespace: prod, creationTimestamp: \"2024-01-02T03:04:05Z\"}\n",
        );
        let before = unix_now();
        let mut src = ManifestSource::new(dir.path());
        let changes = src.rescan(&none());
        let age = |changes: &[Change], c: &str, k: &str| export_age(changes, c, k);
        let (a2, a1, b) = (
            age(&changes, "east", "prod/a2"),
            age(&changes, "east", "prod/a1"),
            age(&changes, "east", "prod/b"),
        );
        let (wa1, ts) = (
            age(&changes, "west", "prod/a1"),
            age(&changes, "west", "prod/ts"),
        );
        // A real creationTimestamp replaces the observed age (seq 0: ties go to cluster order).
        assert_eq!([a2.seq, a1.seq, b.seq, wa1.seq, ts.seq], [1, 2, 3, 4, 0]);
        assert!(a2.created >= before && a2.created <= unix_now());
        assert_eq!(ts.created, 1_704_164_645);

        // Rewriting the file (same objects, new order) keeps the observed ages: no change.
        fs::write(
            &a,
            format!("{}---\n{}", export("prod", "a1"), export("prod", "a2")),
        )
        .unwrap();
        assert_eq!(src.rescan(&[a.clone()].into()), vec![]);

        // Moving an export to another file keeps its age too.
        fs::write(&a, export("prod", "a2")).unwrap();
        write(dir.path(), "east/c.yaml", &export("prod", "a1"));
        assert_eq!(src.rescan(&[a.clone()].into()), vec![]);

        // An export that disappears and comes back is new.
        fs::write(&a, "").unwrap();
        assert_eq!(
            summary(&src.rescan(&[a.clone()].into())),
            vec!["D east prod/a2 Export"]
        );
        fs::write(&a, export("prod", "a2")).unwrap();
        let changes = src.rescan(&[a.clone()].into());
        assert_eq!(age(&changes, "east", "prod/a2").seq, 6);
    }
}
