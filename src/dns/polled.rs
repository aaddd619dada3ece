//! Files read again when they change, for what the DNS side keeps in memory
//! from files an operator or a Kubernetes Secret replaces: the TLS pair and
//! the TSIG key. cert-manager and kubelet rotate them by replacing the files
//! (or the symlinks to them), so their contents are polled rather than
//! watched. A changed set that parses replaces the value in use; one that
//! does not keeps the previous value in use.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use anyhow::Context;
use tokio_util::sync::CancellationToken;

/// How often the files are read to see whether they changed.
const RELOAD_INTERVAL: Duration = Duration::from_secs(2);

/// Turns the files' bytes (in the order given) into the value, or an error
/// naming the file at fault.
type Parse<T> = Box<dyn Fn(&[Vec<u8>]) -> anyhow::Result<T> + Send + Sync>;

/// A value read from files, and the files' bytes it was read from.
pub(crate) struct Polled<T> {
    /// Each file and what it holds, for errors ("TLS certificate").
    files: Vec<(PathBuf, &'static str)>,
    parse: Parse<T>,
    current: RwLock<Arc<T>>,
    /// The files as loaded, for [`Polled::follow`] to compare with.
    loaded: Mutex<Option<Vec<Vec<u8>>>>,
}

impl<T> Polled<T> {
    /// Reads and parses `files`; an error names the file at fault.
    pub(crate) fn load(
        files: Vec<(PathBuf, &'static str)>,
        parse: impl Fn(&[Vec<u8>]) -> anyhow::Result<T> + Send + Sync + 'static,
    ) -> anyhow::Result<Self> {
        let contents = read(&files)?;
        let current = parse(&contents)?;
        Ok(Self {
            files,
            parse: Box::new(parse),
            current: RwLock::new(Arc::new(current)),
            loaded: Mutex::new(Some(contents)),
        })
    }

    /// The value in use.
    pub(crate) fn current(&self) -> Arc<T> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The first file, to name in logs.
    pub(crate) fn file(&self) -> &Path {
        &self.files[0].0
    }

    /// Reads the files every [`RELOAD_INTERVAL`] until `shutdown`; when
    /// their bytes changed, puts the new value in use if it parses, and
    /// tells `changed` either way (once per change: the same bad bytes are
    /// not reported again).
    pub(crate) async fn follow(
        &self,
        shutdown: CancellationToken,
        mut changed: impl FnMut(Result<&T, &anyhow::Error>),
    ) {
        let mut seen = self.loaded.lock().unwrap_or_else(|e| e.into_inner()).take();
        loop {
            tokio::select! {
                () = tokio::time::sleep(RELOAD_INTERVAL) => {}
                () = shutdown.cancelled() => return,
            }
            let now = read(&self.files);
            if now.as_ref().ok() == seen.as_ref() {
                continue;
            }
            seen = now.as_ref().ok().cloned();
            match now.and_then(|contents| (self.parse)(&contents)) {
                Ok(value) => {
                    let value = Arc::new(value);
                    *self.current.write().unwrap_or_else(|e| e.into_inner()) = value.clone();
                    changed(Ok(&value));
                }
                Err(error) => changed(Err(&error)),
            }
        }
    }
}

fn read(files: &[(PathBuf, &'static str)]) -> anyhow::Result<Vec<Vec<u8>>> {
    files
        .iter()
        .map(|(path, what)| {
            std::fs::read(path)
                .with_context(|| format!("cannot read the {what} {}", path.display()))
        })
        .collect()
}
