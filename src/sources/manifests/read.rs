//! Reading one manifest file: its documents routed by kind, converted to
//! facts, and the objects of unchanged pieces kept from the previous read.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use litemap::LiteMap;
use serde_json::{Map, Value};

use super::documents::{FileError, Pieces, ReadPiece};
use super::files::{Def, FileState, Ident, Kind, Stamp};
use super::{Affected, ManifestSource, Problem, Strings, shared};
use crate::k8s::convert;
use crate::k8s::crd;
use crate::model::{ClusterId, ExportAge, Object, ServiceKey};

/// The per-file bookkeeping while one file's documents are handled.
struct FileCtx<'a> {
    path: &'a Path,
    cluster: ClusterId,
    old: &'a LiteMap<Ident, Def>,
    /// The winning definitions from before the rescan.
    before: &'a Affected,
    objects: BTreeMap<Ident, Def>,
    problems: Vec<Problem>,
}

impl FileCtx<'_> {
    /// Adds an object the file defines; `Err` says why not: an earlier
    /// document of the file already defines it.
    fn define(&mut self, ident: Ident, def: Def) -> Result<(), String> {
        if let Some(first) = self.objects.get(&ident) {
            return Err(format!(
                "{ident} is defined again (first in document {})",
                first.document
            ));
        }
        self.objects.insert(ident, def);
        Ok(())
    }

    /// Notes a problem with document `document`.
    fn problem(&mut self, document: usize, reason: String) {
        self.problems.push(Problem {
            file: self.path.to_path_buf(),
            document: Some(document),
            reason,
        });
    }
}

/// What converting one typed document gave.
enum Converted {
    Object(ServiceKey, Object),
    /// A valid object this source deliberately skips (named for the log).
    Skipped(&'static str),
}

impl ManifestSource {
    /// Takes in one file's pieces: parses the new ones' documents and keeps
    /// the objects of the unchanged ones; on a file-level failure keeps `old`.
    pub(super) fn read_file(
        &mut self,
        (path, cluster, stamp): &(PathBuf, ClusterId, Stamp),
        pieces: Result<Vec<ReadPiece>, FileError>,
        old: FileState,
        before: &Affected,
        now: i64,
    ) -> FileState {
        let pieces = match pieces {
            Ok(pieces) => pieces,
            Err(error) => {
                // An unreadable file keeps its old stamp, so that the next
                // rescan reads it again even if nothing about it changes.
                self.incomplete |= error.unreadable;
                return FileState {
                    stamp: if error.unreadable {
                        old.stamp
                    } else {
                        Some(*stamp)
                    },
                    problems: vec![Problem {
                        file: path.to_path_buf(),
                        document: None,
                        reason: error.reason,
                    }],
                    ..old
                };
            }
        };
        // Where each old piece's documents were, and the objects of each document.
        let mut old_pieces: HashMap<u64, (usize, u32)> = HashMap::new();
        let mut first = 0;
        for piece in old.pieces.iter() {
            old_pieces
                .entry(piece.hash)
                .or_insert((first, piece.documents));
            first += piece.documents as usize;
        }
        let mut by_document: BTreeMap<usize, Vec<(&Ident, &Def)>> = BTreeMap::new();
        for (ident, def) in old.objects.iter() {
            by_document
                .entry(def.document as usize)
                .or_default()
                .push((ident, def));
        }

        let mut ctx = FileCtx {
            path,
            cluster: cluster.clone(),
            old: &old.objects,
            before,
            objects: BTreeMap::new(),
            problems: Vec::new(),
        };
        let mut kept = Pieces::default();
        let mut doc = 0;
        for ReadPiece { mut piece, values } in pieces {
            match values {
                Some(values) => {
                    for value in values {
                        doc += 1;
                        self.document(&mut ctx, value, doc, None, now);
                    }
                }
                None => {
                    let (at, documents) = old_pieces[&piece.hash];
                    piece.documents = documents;
                    for (was, defs) in by_document.range(at + 1..=at + documents as usize) {
                        for (ident, def) in defs {
                            let document = doc + was - at;
                            let def = Def {
                                document: doc_number(document),
                                ..(*def).clone()
                            };
                            if let Err(reason) = ctx.define((*ident).clone(), def) {
                                ctx.problem(document, reason);
                            }
                        }
                    }
                    doc += documents as usize;
                }
            }
            kept.push(piece);
        }
        kept.shrink_to_fit();
        FileState {
            stamp: Some(*stamp),
            // Built as a tree (documents come in any order), kept as a sorted vector.
            objects: ctx.objects.into_iter().collect(),
            problems: ctx.problems,
            pieces: kept,
        }
    }

    /// Handles one document (or one item of a `List` document).
    fn document(
        &mut self,
        ctx: &mut FileCtx<'_>,
        value: Value,
        doc: usize,
        item: Option<usize>,
        now: i64,
    ) {
        let problem = |ctx: &mut FileCtx<'_>, reason: String| {
            let reason = match item {
                Some(i) => format!("item {i}: {reason}"),
                None => reason,
            };
            ctx.problem(doc, reason);
        };
        if value.is_null() {
            return;
        }
        let Some(map) = value.as_object() else {
            problem(ctx, "not a Kubernetes object (expected a mapping)".into());
            return;
        };
        let api_version = map.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind_name = map.get("kind").and_then(Value::as_str).unwrap_or("");
        if api_version.is_empty() || kind_name.is_empty() {
            problem(ctx, "missing apiVersion or kind".into());
            return;
        }
        let kind = match (api_version, kind_name) {
            ("v1", "List") => {
                let Some(items) = map.get("items").and_then(Value::as_array) else {
                    if !map.get("items").is_none_or(Value::is_null) {
                        problem(ctx, "List items is not a sequence".into());
                    }
                    return;
                };
                for (i, item_value) in items.clone().into_iter().enumerate() {
                    // Items of nested lists are numbered within their own list.
                    self.document(ctx, item_value, doc, Some(i + 1), now);
                }
                return;
            }
            ("v1", "Namespace") => return,
            ("v1", "Service") => Kind::Service,
            ("discovery.k8s.io/v1", "EndpointSlice") => Kind::EndpointSlice,
            (v, "ServiceExport") if crd::McsVersion::of_api_version(v).is_some() => {
                Kind::ServiceExport
            }
            _ => {
                let label = format!("{api_version} {kind_name}");
                self.log_ignored(ctx.path, label);
                return;
            }
        };
        let ident = read_ident(&ctx.cluster, kind, map, &mut self.strings);
        match self.convert(kind, value, ident.as_ref(), ctx, now) {
            Ok(Converted::Object(key, object)) => {
                let service =
                    (kind == Kind::EndpointSlice).then(|| shared(&mut self.strings, key.name()));
                let Some(ident) = ident else {
                    // Conversion requires a name, so this does not happen.
                    problem(ctx, format!("{} without a name", kind.as_str()));
                    return;
                };
                let def = Def {
                    object,
                    service,
                    document: doc_number(doc),
                };
                if let Err(reason) = ctx.define(ident, def) {
                    problem(ctx, reason);
                }
            }
            Ok(Converted::Skipped(label)) => self.log_ignored(ctx.path, label.to_owned()),
            Err(reason) => {
                problem(ctx, reason);
                if let Some(ident) = ident
                    && !ctx.objects.contains_key(&ident)
                    && let Some(prev) = ctx.old.get(&ident)
                {
                    let mut prev = prev.clone();
                    prev.document = doc_number(doc);
                    ctx.objects.insert(ident, prev);
                }
            }
        }
    }

    /// Deserializes a document into its typed object and converts it.
    fn convert(
        &mut self,
        kind: Kind,
        value: Value,
        ident: Option<&Ident>,
        ctx: &FileCtx<'_>,
        now: i64,
    ) -> Result<Converted, String> {
        let typed_err = |e: serde_json::Error| match ident {
            Some(ident) => format!("{ident}: {e}"),
            None => format!("{}: {e}", kind.as_str()),
        };
        let converted = match kind {
            Kind::Service => {
                let svc: Service = serde_json::from_value(value).map_err(typed_err)?;
                convert::service(&svc)
            }
            Kind::EndpointSlice => {
                let slice: EndpointSlice = serde_json::from_value(value).map_err(typed_err)?;
                if convert::is_imported_slice(&slice) {
                    return Ok(Converted::Skipped("EndpointSlice of a multicluster import"));
                }
                convert::endpoint_slice(&slice)
            }
            Kind::ServiceExport => {
                let export: crd::ServiceExport =
                    serde_json::from_value(value).map_err(typed_err)?;
                let observed = self.export_age(ctx, ident, now);
                convert::service_export(&export, observed)
            }
        };
        converted
            .map(|(key, object)| Converted::Object(key, object))
            .map_err(|e| e.to_string())
    }

    /// The age of an export: the one it had before (in this file's previous
    /// read, or where it won before the rescan or still wins), else a new one.
    fn export_age(&mut self, ctx: &FileCtx<'_>, ident: Option<&Ident>, now: i64) -> ExportAge {
        let Some(ident) = ident else {
            return ExportAge {
                created: now,
                seq: 0,
            };
        };
        let before = ctx
            .old
            .get(ident)
            .map(|d| &d.object)
            .or_else(|| ctx.before.get(ident)?.as_ref().map(|(_, o)| o))
            .or_else(|| self.files.winner(ident).map(|d| &d.object));
        if let Some(Object::Export(export)) = before {
            return export.age;
        }
        self.next_seq += 1;
        ExportAge {
            created: now,
            seq: self.next_seq,
        }
    }

    /// Logs one line per file and ignored kind.
    fn log_ignored(&mut self, path: &Path, label: String) {
        let key = (path.to_path_buf(), label);
        if !self.ignored_logged.contains(&key) {
            tracing::info!(file = %path.display(), "ignoring {} objects", key.1);
            self.ignored_logged.insert(key);
        }
    }
}

/// Reads the identity of an object from its raw document, when it is readable.
fn read_ident(
    cluster: &ClusterId,
    kind: Kind,
    map: &Map<String, Value>,
    strings: &mut Strings,
) -> Option<Ident> {
    let meta = map.get("metadata")?;
    let name = meta.get("name")?.as_str().filter(|n| !n.is_empty())?;
    let namespace = match meta.get("namespace") {
        None | Some(Value::Null) => convert::DEFAULT_NAMESPACE,
        Some(ns) => match ns.as_str()? {
            "" => convert::DEFAULT_NAMESPACE,
            ns => ns,
        },
    };
    Some(Ident {
        cluster: cluster.clone(),
        kind,
        namespace: shared(strings, namespace),
        name: shared(strings, name),
    })
}

/// A document number as a definition keeps it.
fn doc_number(doc: usize) -> u32 {
    u32::try_from(doc).unwrap_or(u32::MAX)
}
