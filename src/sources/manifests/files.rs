//! What the manifest source knows of its files: each file's objects, and for
//! each object the file whose definition wins (the first in path order, when
//! several files define it).
//!
//! At clusterset scale this is hundreds of thousands of objects, so an object
//! is stored once, in its file; the index of winners holds only the file and
//! position of each winning definition, and the files defining an object are
//! listed separately only for the rare objects several files define.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::fs;
use std::hash::BuildHasher;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use hashbrown::HashTable;
use litemap::LiteMap;
use smallvec::SmallVec;

use super::documents::{Pieces, Reusable};
use super::problem::Problem;
use crate::model::{ClusterId, Hasher, Object, ServiceKey};

/// The kinds the manifest source turns into facts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Kind {
    ServiceExport,
    Service,
    EndpointSlice,
}

impl Kind {
    /// The Kubernetes kind.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Kind::ServiceExport => "ServiceExport",
            Kind::Service => "Service",
            Kind::EndpointSlice => "EndpointSlice",
        }
    }
}

/// The Kubernetes identity of an object: what makes two definitions "the same object".
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct Ident {
    pub(super) cluster: ClusterId,
    pub(super) kind: Kind,
    pub(super) namespace: Arc<str>,
    pub(super) name: Arc<str>,
}

impl fmt::Display for Ident {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind.as_str(), self.namespace, self.name)
    }
}

/// One object as a file defines it.
#[derive(Clone, Debug)]
pub(super) struct Def {
    pub(super) object: Object,
    /// The service an EndpointSlice belongs to (a Service or ServiceExport
    /// is its own: the service of its ident).
    pub(super) service: Option<Arc<str>>,
    /// Its document's number in the file, from 1.
    pub(super) document: u32,
}

impl Def {
    /// The service this definition of `ident` belongs to.
    pub(super) fn key(&self, ident: &Ident) -> ServiceKey {
        ServiceKey::new(
            &ident.namespace,
            self.service.as_ref().unwrap_or(&ident.name),
        )
    }
}

/// What a file looked like when last read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Stamp {
    len: u64,
    mtime: Option<SystemTime>,
}

impl Stamp {
    /// The stamp of a file's metadata.
    pub(super) fn of(meta: &fs::Metadata) -> Self {
        Stamp {
            len: meta.len(),
            mtime: meta.modified().ok(),
        }
    }
}

/// A file's last read stamp, its effective objects, its own problems and
/// the pieces its objects were read from.
#[derive(Debug, Default)]
pub(super) struct FileState {
    pub(super) stamp: Option<Stamp>,
    pub(super) objects: LiteMap<Ident, Def>,
    pub(super) problems: Vec<Problem>,
    pub(super) pieces: Pieces,
}

impl FileState {
    /// The pieces whose objects a new read may keep without parsing them
    /// again: those whose documents had no problem (a problem may depend on
    /// other documents, such as a name defined twice).
    pub(super) fn reusable(&self) -> Reusable {
        let troubled: BTreeSet<usize> = self.problems.iter().filter_map(|p| p.document).collect();
        let mut first = 0;
        let mut reusable = Reusable::default();
        for piece in self.pieces.iter() {
            let documents = piece.documents as usize;
            if troubled
                .range(first + 1..=first + documents)
                .next()
                .is_none()
            {
                reusable.insert(piece.hash);
            }
            first += documents;
        }
        reusable
    }
}

/// The files defining one object, sorted (the first wins).
type Paths = SmallVec<[Arc<Path>; 2]>;

/// Where a winning definition is: a file's number and the object's position in it.
#[derive(Clone, Copy, Debug)]
struct Slot {
    file: u32,
    index: u32,
}

/// Every file's state, and which file's definition of each object wins.
#[derive(Debug, Default)]
pub(super) struct Files {
    /// By file number; `None` for a number free for reuse.
    states: Vec<Option<(Arc<Path>, FileState)>>,
    numbers: HashMap<Arc<Path>, u32, Hasher>,
    free: Vec<u32>,
    /// One slot per defined object, hashed by its ident.
    winners: HashTable<Slot>,
    hasher: Hasher,
    /// The objects several files define, with those files.
    duplicated: BTreeMap<Ident, Paths>,
}

impl Files {
    /// The state of the file at `path`.
    pub(super) fn get(&self, path: &Path) -> Option<&FileState> {
        let number = *self.numbers.get(path)?;
        self.states[number as usize]
            .as_ref()
            .map(|(_, state)| state)
    }

    /// Whether no file is known.
    pub(super) fn is_empty(&self) -> bool {
        self.numbers.is_empty()
    }

    /// Every file, in no particular order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&Arc<Path>, &FileState)> {
        self.states
            .iter()
            .flatten()
            .map(|(path, state)| (path, state))
    }

    /// The winning definition of `ident`.
    pub(super) fn winner(&self, ident: &Ident) -> Option<&Def> {
        let hash = self.hasher.hash_one(ident);
        let slot = self
            .winners
            .find(hash, |s| ident_at(&self.states, s) == ident)?;
        self.def_at(slot)
    }

    /// The objects several files define, with those files in path order.
    pub(super) fn duplicated(&self) -> impl Iterator<Item = (&Ident, &[Arc<Path>])> {
        self.duplicated
            .iter()
            .map(|(ident, paths)| (ident, &paths[..]))
    }

    /// Adds the file at `path` (not present) and its definitions.
    pub(super) fn insert(&mut self, path: &Path, state: FileState) {
        let path: Arc<Path> = Arc::from(path);
        let number = self.free.pop().unwrap_or_else(|| {
            self.states.push(None);
            u32::try_from(self.states.len() - 1).expect("fewer than 2^32 files")
        });
        self.numbers.insert(path.clone(), number);
        self.states[number as usize] = Some((path.clone(), state));

        let Files {
            states,
            winners,
            hasher,
            duplicated,
            ..
        } = self;
        let objects = &live(states, number).1.objects;
        for (index, ident) in objects.keys().enumerate() {
            let slot = Slot {
                file: number,
                index: u32::try_from(index).expect("fewer than 2^32 objects in a file"),
            };
            let hash = hasher.hash_one(ident);
            match winners.find_mut(hash, |s| ident_at(states, s) == ident) {
                None => {
                    winners.insert_unique(hash, slot, |s| hasher.hash_one(ident_at(states, s)));
                }
                Some(winner) => {
                    let paths = duplicated.entry(ident.clone()).or_insert_with(|| {
                        SmallVec::from_elem(live(states, winner.file).0.clone(), 1)
                    });
                    if let Err(at) = paths.binary_search(&path) {
                        paths.insert(at, path.clone());
                    }
                    if paths[0] == path {
                        *winner = slot;
                    }
                }
            }
        }
    }

    /// Removes the file at `path` and its definitions; another file's
    /// definition of the same object, if any, wins from now on.
    pub(super) fn remove(&mut self, path: &Path) -> Option<FileState> {
        let number = self.numbers.remove(path)?;
        let Files {
            states,
            numbers,
            winners,
            hasher,
            duplicated,
            ..
        } = self;
        let (own_path, state) = live(states, number);
        for ident in state.objects.keys() {
            let hash = hasher.hash_one(ident);
            let Ok(winner) = winners.find_entry(hash, |s| ident_at(states, s) == ident) else {
                continue;
            };
            let Some(paths) = duplicated.get_mut(ident) else {
                winner.remove();
                continue;
            };
            paths.retain(|p| p != own_path);
            if winner.get().file == number {
                let file = numbers[&paths[0]];
                let index = live(states, file)
                    .1
                    .objects
                    .find_index(ident)
                    .expect("a file listed as defining an object defines it");
                *winner.into_mut() = Slot {
                    file,
                    index: u32::try_from(index).expect("fewer than 2^32 objects in a file"),
                };
            }
            if paths.len() < 2 {
                duplicated.remove(ident);
            }
        }
        self.free.push(number);
        self.states[number as usize].take().map(|(_, state)| state)
    }

    fn def_at(&self, slot: &Slot) -> Option<&Def> {
        let (_, state) = self.states.get(slot.file as usize)?.as_ref()?;
        state
            .objects
            .get_indexed(slot.index as usize)
            .map(|(_, def)| def)
    }
}

/// The path and state of a file number in use.
fn live(states: &[Option<(Arc<Path>, FileState)>], number: u32) -> &(Arc<Path>, FileState) {
    states[number as usize]
        .as_ref()
        .expect("only numbers of present files are used")
}

/// The ident a slot points at.
fn ident_at<'a>(states: &'a [Option<(Arc<Path>, FileState)>], slot: &Slot) -> &'a Ident {
    live(states, slot.file)
        .1
        .objects
        .get_indexed(slot.index as usize)
        .map(|(ident, _)| ident)
        .expect("slots point at objects of their file")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ExportAge;

    fn ident(name: &str) -> Ident {
        Ident {
            cluster: "east".into(),
            kind: Kind::ServiceExport,
            namespace: "prod".into(),
            name: name.into(),
        }
    }

    /// A file defining `names`, each export aged by the file's `seq`.
    fn state(names: &[&str], seq: u64) -> FileState {
        let objects = names
            .iter()
            .map(|n| {
                let export = crate::model::ExportInfo {
                    age: ExportAge { created: 0, seq },
                    exported: Default::default(),
                    clusterset_ip: None,
                    pod_ips: None,
                };
                let def = Def {
                    object: Object::Export(Arc::new(export)),
                    service: None,
                    document: 1,
                };
                (ident(n), def)
            })
            .collect();
        FileState {
            objects,
            ..FileState::default()
        }
    }

    /// Which file (by seq) wins for `name`.
    fn winner(files: &Files, name: &str) -> Option<u64> {
        match &files.winner(&ident(name))?.object {
            Object::Export(e) => Some(e.age.seq),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_first_path_wins_and_the_next_takes_over_when_it_goes() {
        let mut files = Files::default();
        files.insert(Path::new("b.yaml"), state(&["x", "y"], 2));
        files.insert(Path::new("c.yaml"), state(&["x"], 3));
        files.insert(Path::new("a.yaml"), state(&["x", "z"], 1));
        assert_eq!(
            [
                winner(&files, "x"),
                winner(&files, "y"),
                winner(&files, "z")
            ],
            [Some(1), Some(2), Some(1)]
        );
        let dups: Vec<(String, Vec<String>)> = files
            .duplicated()
            .map(|(i, p)| {
                (
                    i.name.to_string(),
                    p.iter().map(|p| p.display().to_string()).collect(),
                )
            })
            .collect();
        assert_eq!(
            dups,
            [(
                "x".into(),
                vec!["a.yaml".into(), "b.yaml".into(), "c.yaml".into()]
            )]
        );

        // Removing a loser changes no winner; removing the winner hands over.
        assert!(files.remove(Path::new("c.yaml")).is_some());
        assert_eq!(winner(&files, "x"), Some(1));
        assert!(files.remove(Path::new("a.yaml")).is_some());
        assert_eq!([winner(&files, "x"), winner(&files, "z")], [Some(2), None]);
        assert_eq!(files.duplicated().count(), 0);

        // A freed file number is reused, and the index still finds everything.
        files.insert(Path::new("d.yaml"), state(&["w"], 4));
        assert_eq!(files.states.len(), 3);
        assert_eq!(
            [winner(&files, "w"), winner(&files, "y")],
            [Some(4), Some(2)]
        );
        assert!(files.get(Path::new("a.yaml")).is_none());
        assert_eq!(files.iter().count(), 2);
    }
}
