//! A problem the manifest source found, for the log and `status`.

use std::fmt;
use std::path::PathBuf;

/// Something wrong with the directory, a file or one document of a file.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Problem {
    /// The file (or folder) at fault.
    pub file: PathBuf,
    /// The 1-based document number within the file, when one document is at fault
    /// (empty documents are not counted).
    pub document: Option<usize>,
    /// What is wrong.
    pub reason: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.document {
            Some(n) => write!(f, "{}: document {n}: {}", self.file.display(), self.reason),
            None => write!(f, "{}: {}", self.file.display(), self.reason),
        }
    }
}
