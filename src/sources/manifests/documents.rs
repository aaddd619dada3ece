//! Reading a manifest file's documents, parsing again only the ones whose
//! text changed since the last read.
//!
//! A YAML file is cut at its document markers (lines starting with `---` and
//! a space or line end, which YAML forbids inside any scalar), so each piece
//! parses alone to the same documents as the whole file. A piece is known by
//! a hash of its text: when a file of thousands of objects changes in one
//! place, only that piece is parsed, and the objects of the others are kept.

use std::collections::BTreeMap;
use std::fs;
use std::hash::BuildHasher;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

/// A piece of a file: one YAML document's text (or, rarely, several or none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Piece {
    /// Hash of its text.
    pub hash: u64,
    /// How many documents it holds.
    pub documents: u32,
}

/// A file's pieces in order, compactly: their hashes, and their document
/// counts where not the usual one.
#[derive(Debug, Default)]
pub(super) struct Pieces {
    hashes: Vec<u64>,
    /// By position: the count of each piece holding other than one document.
    unusual: BTreeMap<u32, u32>,
}

impl Pieces {
    /// Adds the next piece.
    pub(super) fn push(&mut self, piece: Piece) {
        if piece.documents != 1 {
            let at = u32::try_from(self.hashes.len()).unwrap_or(u32::MAX);
            self.unusual.insert(at, piece.documents);
        }
        self.hashes.push(piece.hash);
    }

    /// Releases spare room once the last piece is in.
    pub(super) fn shrink_to_fit(&mut self) {
        self.hashes.shrink_to_fit();
    }

    /// The pieces in order.
    pub(super) fn iter(&self) -> impl Iterator<Item = Piece> + '_ {
        self.hashes.iter().enumerate().map(|(at, &hash)| Piece {
            hash,
            documents: u32::try_from(at)
                .ok()
                .and_then(|at| self.unusual.get(&at).copied())
                .unwrap_or(1),
        })
    }
}

/// A piece as read now: parsed, or left alone because its text is unchanged.
#[derive(Debug)]
pub(super) struct ReadPiece {
    /// Its hash and document count (for an unchanged piece, `documents` is 0:
    /// the previous read knows it).
    pub piece: Piece,
    /// Its documents, or `None` when it was not parsed.
    pub values: Option<Vec<Value>>,
}

/// Why a file's documents could not be had.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct FileError {
    /// What went wrong, for the problem list.
    pub reason: String,
    /// The file could not be read (too many open files, a permission, an
    /// I/O error): it may read fine in a moment, so it is tried again soon.
    /// False when its text is what is wrong.
    pub unreadable: bool,
}

impl FileError {
    fn invalid(reason: String) -> Self {
        Self {
            reason,
            unreadable: false,
        }
    }
}

/// What a file's pieces may reuse: hashes of unchanged pieces not to parse.
pub(super) type Reusable = std::collections::HashSet<u64, foldhash::fast::FixedState>;

/// Files a reader thread may have read before the caller takes them: the
/// parsed documents of a few files, not of the whole directory, are held.
const AHEAD: usize = 2;

/// Reads several files on `threads` threads (or, for one file, its pieces
/// on every thread) and hands each result to `apply` in the order given,
/// while the next files are read: the caller's work on one file overlaps
/// the reading of the next ones. Reader `w` reads files `w`, `w + threads`,
/// …, so the order needs no sorting and each reader is at most [`AHEAD`]
/// files ahead.
pub(super) fn read_in_order(
    files: &[(&Path, &Reusable)],
    threads: usize,
    mut apply: impl FnMut(usize, Result<Vec<ReadPiece>, FileError>),
) {
    if let [(path, reusable)] = files {
        return apply(0, read(path, reusable, threads));
    }
    let threads = threads.clamp(1, files.len().max(1));
    std::thread::scope(|scope| {
        let readers: Vec<_> = (0..threads)
            .map(|w| {
                let (tx, rx) = std::sync::mpsc::sync_channel(AHEAD);
                scope.spawn(move || {
                    for (path, reusable) in files.iter().skip(w).step_by(threads) {
                        if tx.send(read(path, reusable, 1)).is_err() {
                            return;
                        }
                    }
                });
                rx
            })
            .collect();
        for (i, reader) in (0..files.len()).zip(readers.iter().cycle()) {
            // A reader that panicked sends nothing more; the scope then
            // passes its panic on.
            let Ok(result) = reader.recv() else { break };
            apply(i, result);
        }
    });
}

/// `f` of every item, in order, the items cut into one run per thread.
fn on_threads<T: Sync, R: Send>(items: &[T], threads: usize, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let per_thread = items.len().div_ceil(threads.max(1)).max(1);
    let f = &f;
    std::thread::scope(|scope| {
        let workers: Vec<_> = items
            .chunks(per_thread)
            .map(|part| scope.spawn(move || part.iter().map(f).collect::<Vec<_>>()))
            .collect();
        workers
            .into_iter()
            .flat_map(|w| {
                w.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    })
}

/// Reads one file: JSON (one value, or several in a row, as one piece) or
/// multi-document YAML, piece by piece. YAML goes through serde_yaml_ng,
/// about three times faster than serde-saphyr on large `kubectl` dumps.
pub(super) fn read(
    path: &Path,
    reusable: &Reusable,
    threads: usize,
) -> Result<Vec<ReadPiece>, FileError> {
    let text = fs::read_to_string(path).map_err(|e| FileError {
        reason: format!("cannot read: {e}"),
        // Not UTF-8: the text is wrong, reading again will not help.
        unreadable: e.kind() != std::io::ErrorKind::InvalidData,
    })?;
    if path.extension().is_some_and(|e| e == "json") {
        let values = serde_json::Deserializer::from_str(&text)
            .into_iter::<Value>()
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| FileError::invalid(format!("invalid JSON: {e}")))?;
        return Ok(vec![parsed(&text, values)]);
    }
    let pieces = split(&text);
    let parse = |piece: &&str| -> Result<ReadPiece, String> {
        let hash = hash(piece);
        if reusable.contains(&hash) {
            return Ok(ReadPiece {
                piece: Piece { hash, documents: 0 },
                values: None,
            });
        }
        if is_blank(piece) {
            // Comments before the first marker: no document in the whole
            // file, though alone they would parse as an empty one.
            return Ok(parsed(piece, Vec::new()));
        }
        parse_yaml(piece).map(|values| parsed(piece, values))
    };
    let read: Result<Vec<ReadPiece>, String> = if threads > 1 && text.len() >= SPLIT_MIN {
        on_threads(&pieces, threads, parse).into_iter().collect()
    } else {
        pieces.iter().map(parse).collect()
    };
    // A piece that does not parse alone (a directive before the first
    // marker, or a real error): parse the whole text, whose line numbers are
    // the file's, as one piece.
    read.or_else(|_| {
        let values = parse_yaml(&text).map_err(FileError::invalid)?;
        Ok(vec![parsed(&text, values)])
    })
}

fn parsed(text: &str, values: Vec<Value>) -> ReadPiece {
    ReadPiece {
        piece: Piece {
            hash: hash(text),
            documents: u32::try_from(values.len()).unwrap_or(u32::MAX),
        },
        values: Some(values),
    }
}

fn hash(text: &str) -> u64 {
    foldhash::fast::FixedState::with_seed(0x6373_646e_735f_646f).hash_one(text)
}

fn parse_yaml(text: &str) -> Result<Vec<Value>, String> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(Value::deserialize)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("invalid YAML: {e}"))
}

/// Below this size a YAML file is parsed on one thread.
const SPLIT_MIN: usize = 256 << 10;

/// Whether `piece` holds only blank lines and comments (and no marker).
fn is_blank(piece: &str) -> bool {
    piece.lines().all(|l| {
        let l = l.trim_start();
        l.is_empty() || l.starts_with('#')
    })
}

/// `text` cut before every document marker.
fn split(text: &str) -> Vec<&str> {
    let bytes = text.as_bytes();
    let is_marker = |at: usize| {
        let rest = &bytes[at..];
        rest.starts_with(b"---") && rest.get(3).is_none_or(|c| c.is_ascii_whitespace())
    };
    let mut pieces = Vec::new();
    let mut start = 0;
    for (i, _) in text.match_indices('\n') {
        let at = i + 1;
        if at < text.len() && at > start && is_marker(at) {
            pieces.push(&text[start..at]);
            start = at;
        }
    }
    pieces.push(&text[start..]);
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none() -> Reusable {
        Reusable::default()
    }

    /// A file `f.yaml` holding `text`, in a directory kept while the guard lives.
    fn file(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.yaml");
        fs::write(&path, text).unwrap();
        (dir, path)
    }

    fn values(pieces: &[ReadPiece]) -> Vec<Value> {
        pieces
            .iter()
            .flat_map(|p| p.values.clone().unwrap_or_default())
            .collect()
    }

    #[test]
    fn pieces_parse_to_the_whole_files_documents() {
        // Block scalars and a `----` line look like markers but are not.
        let doc = |i: usize| {
            format!(
                "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: s{i}\n  annotations:\n    note: |\n      ---\n      ----\n"
            )
        };
        let text: String = format!(
            "# leading comment\n{}",
            (0..4000).map(doc).collect::<String>()
        );
        assert!(text.len() > SPLIT_MIN);
        let pieces = split(&text);
        assert_eq!(pieces.len(), 4001);
        assert_eq!(pieces.concat(), text);
        let whole = parse_yaml(&text).unwrap();
        assert_eq!(whole.len(), 4000);
        assert_eq!(
            whole[3999]["metadata"]["annotations"]["note"],
            "---\n----\n"
        );

        let (dir, path) = file(&text);
        for threads in [1, 2] {
            let read = read(&path, &none(), threads).unwrap();
            assert_eq!(values(&read), whole);
            let counts: Vec<u32> = read.iter().map(|p| p.piece.documents).collect();
            assert_eq!(
                counts[..2],
                [0, 1],
                "the comment is a piece without documents"
            );
        }

        // A syntax error is reported with the whole file's line number.
        fs::write(&path, format!("{text}---\nkind: [unclosed\n")).unwrap();
        let error = read(&path, &none(), 2).unwrap_err();
        assert!(
            error.reason.contains(&format!("line {}", 1 + 4000 * 9 + 2)) && !error.unreadable,
            "{error:?}"
        );
        // A file that is not there (any more) may be readable later.
        let missing = read(&dir.path().join("gone.yaml"), &none(), 1).unwrap_err();
        assert!(missing.unreadable, "{missing:?}");
    }

    /// Every file's result reaches the caller once, in the order given,
    /// a bad file's error in its place, on any number of reader threads.
    #[test]
    fn files_are_applied_in_order_while_others_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let paths: Vec<_> = (0..23)
            .map(|i| {
                let path = dir.path().join(format!("f{i}.yaml"));
                let text = if i == 7 {
                    "a: [".to_owned()
                } else {
                    format!("n: {i}\n")
                };
                fs::write(&path, text).unwrap();
                path
            })
            .collect();
        let reusable = none();
        let files: Vec<_> = paths.iter().map(|p| (p.as_path(), &reusable)).collect();
        for threads in [1, 2, 3, 8, 40] {
            let mut seen = Vec::new();
            read_in_order(&files, threads, |i, result| {
                let value = result.map(|pieces| pieces[0].values.clone().unwrap()[0]["n"].clone());
                seen.push((i, value.map_err(|e| e.unreadable)));
            });
            let expected: Vec<_> = (0..23)
                .map(|i| {
                    (
                        i,
                        if i == 7 {
                            Err(false)
                        } else {
                            Ok(Value::from(i))
                        },
                    )
                })
                .collect();
            assert_eq!(seen, expected, "{threads} threads");
        }
    }

    #[test]
    fn unchanged_pieces_are_not_parsed_again() {
        let (_dir, path) = file("a: 1\n---\nb: 2\n---\nc: 3\n");
        let first = read(&path, &none(), 1).unwrap();
        assert_eq!(first.len(), 3);
        let reusable: Reusable = first.iter().map(|p| p.piece.hash).collect();

        fs::write(&path, "a: 1\n---\nb: 20\n---\nc: 3\n").unwrap();
        let second = read(&path, &reusable, 1).unwrap();
        let parsed: Vec<Option<Vec<Value>>> = second.iter().map(|p| p.values.clone()).collect();
        assert_eq!(
            parsed,
            [None, Some(vec![serde_json::json!({"b": 20})]), None]
        );
        assert_eq!(second[0].piece.hash, first[0].piece.hash);
        assert_ne!(second[1].piece.hash, first[1].piece.hash);
    }

    #[test]
    fn a_directive_falls_back_to_one_piece() {
        let (_dir, path) = file("%YAML 1.2\n---\na: 1\n---\nb: 2\n");
        let read = read(&path, &none(), 1).unwrap();
        assert_eq!(read.len(), 1);
        assert_eq!(read[0].piece.documents, 2);
        assert_eq!(
            values(&read),
            [serde_json::json!({"a": 1}), serde_json::json!({"b": 2})]
        );
    }
}
