//! The zone's SOA serial: derived from the clock so that replicas agree
//! roughly, compared with RFC 1982 serial number arithmetic, and in
//! embedded mode kept in a file ([`SerialFile`]) so that a restart never
//! starts below a serial already served, even after a burst of changes ran
//! it ahead of the clock.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use tracing::{info, warn};

/// How far above the serial being served the file's ceiling is written: a
/// burst of commits writes the file once per this many, and a restart
/// starts at most this far above the last serial served.
pub const RESERVE: u32 = 64;

/// Seconds since the Unix epoch as a serial (fits 32 bits until 2106).
pub fn now() -> u32 {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    u32::try_from(secs).unwrap_or(u32::MAX)
}

/// The serial after a change at clock `now`: the clock, unless that is not
/// greater than `last` (several changes in one second, or a clock set back),
/// then `last + 1` (RFC 1982 §3.1 addition).
pub fn next(last: u32, now: u32) -> u32 {
    if greater(now, last) {
        now
    } else {
        last.wrapping_add(1)
    }
}

/// `a > b` in RFC 1982 §3.2 arithmetic (undefined pairs compare not greater).
pub fn greater(a: u32, b: u32) -> bool {
    a != b && a.wrapping_sub(b) < 1 << 31
}

/// A ceiling on every serial served so far, kept in a file (one decimal
/// number): a restart starts above it, so the serial never goes back
/// (RFC 1982 §3.2 order), whatever the clock says. The ceiling is written,
/// [`RESERVE`] above the serial, before a serial above it is served.
#[derive(Debug)]
pub struct SerialFile {
    path: PathBuf,
    state: Mutex<Kept>,
}

#[derive(Debug)]
struct Kept {
    /// What the file holds (None: no file yet).
    ceiling: Option<u32>,
    /// The last write failed (logged once until one succeeds).
    failing: bool,
}

impl SerialFile {
    /// Reads the ceiling kept at `path`; a missing file means none. A file
    /// that is not one serial is an error naming it.
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        Ok(Self {
            path: path.to_owned(),
            state: Mutex::new(Kept {
                ceiling: read(path)?,
                failing: false,
            }),
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The serial to start from at clock `now`: the clock, unless that is not
    /// above the kept ceiling (a restart after a burst), then the ceiling + 1.
    pub fn first(&self, now: u32) -> u32 {
        match self.lock().ceiling {
            Some(ceiling) => next(ceiling, now),
            None => now,
        }
    }

    /// Makes the file cover `serial` before it is served: when `serial` is
    /// above the ceiling, writes `serial + RESERVE` (never lowering what
    /// another writer put there). A failed write is logged (once until one
    /// succeeds) and tried again at the next serial above the ceiling.
    pub fn cover(&self, serial: u32) {
        let mut kept = self.lock();
        if kept
            .ceiling
            .is_some_and(|ceiling| !greater(serial, ceiling))
        {
            return;
        }
        let mut ceiling = serial.wrapping_add(RESERVE);
        if let Ok(Some(on_disk)) = read(&self.path) {
            if greater(on_disk, ceiling) {
                ceiling = on_disk;
            }
        }
        match write(&self.path, ceiling) {
            Ok(()) => {
                if std::mem::take(&mut kept.failing) {
                    info!(file = %self.path.display(), "SOA serial file written again");
                }
                kept.ceiling = Some(ceiling);
            }
            Err(error) => {
                if !std::mem::replace(&mut kept.failing, true) {
                    warn!(file = %self.path.display(), error = %format!("{error:#}"),
                          "cannot keep the SOA serial; a restart may start below the serial served");
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The serial kept at `path` (None: no file).
fn read(path: &Path) -> anyhow::Result<Option<u32>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(e).with_context(|| format!("reading SOA serial file {}", path.display()));
        }
    };
    text.trim().parse().map(Some).with_context(|| {
        format!(
            "SOA serial file {} does not hold a serial (one number below 2^32): delete it to start the serial from the clock",
            path.display()
        )
    })
}

/// Writes `serial` to `path` durably: a temporary file, synced, renamed
/// over `path`, and the directory synced.
fn write(path: &Path, serial: u32) -> anyhow::Result<()> {
    let write = || -> std::io::Result<()> {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        if let Some(dir) = dir {
            std::fs::create_dir_all(dir)?;
        }
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let mut file = std::fs::File::create(&tmp)?;
        writeln!(file, "{serial}")?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = dir {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    };
    write().with_context(|| format!("writing SOA serial file {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 1982 §3.2: comparison wraps around 2^32.
    #[test]
    fn rfc1982_comparison_wraps() {
        assert!(greater(2, 1));
        assert!(!greater(1, 2));
        assert!(!greater(5, 5));
        assert!(greater(0, u32::MAX), "0 follows 2^32-1");
        assert!(greater(10, u32::MAX - 10));
        assert!(
            !greater(1 << 31, 0),
            "distance 2^31 is undefined: not greater"
        );
    }

    #[test]
    fn next_follows_the_clock_and_always_increases() {
        assert_eq!(next(100, 200), 200, "the clock when it is ahead");
        assert_eq!(next(200, 200), 201, "two changes in one second");
        assert_eq!(next(300, 200), 301, "a clock set back");
        assert_eq!(next(u32::MAX, u32::MAX), 0, "wraps as RFC 1982 adds");
        assert_eq!(next(u32::MAX, 5), 5, "5 follows 2^32-1 in RFC 1982 order");
    }

    /// A restart after a burst of commits (the serial far ahead of the
    /// clock) starts above every serial served; the file is written once
    /// per [`RESERVE`] serials, not per commit.
    #[test]
    fn a_restart_never_starts_below_a_serial_served() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/vips.serial");
        let file = SerialFile::open(&path).unwrap();
        assert_eq!(file.first(1000), 1000, "no file: the clock");
        let mut serial = file.first(1000);
        let mut writes = 0;
        for _ in 0..1000 {
            serial = next(serial, 1000);
            let before = std::fs::read_to_string(&path).ok();
            file.cover(serial);
            writes += usize::from(std::fs::read_to_string(&path).ok() != before);
        }
        assert_eq!(serial, 2000, "a burst runs 1000 ahead of the clock");
        assert!(writes <= 1000 / RESERVE as usize + 1, "{writes} writes");
        let restarted = SerialFile::open(&path).unwrap();
        let first = restarted.first(1001);
        assert!(greater(first, serial), "{first} after {serial}");
        assert!(!greater(first, serial + RESERVE + 1), "not far above");
        assert_eq!(restarted.first(5000), 5000, "the clock once it is ahead");

        // Across 2^32 (RFC 1982 §3.1): the ceiling wraps, the order holds.
        let wrapping = SerialFile::open(&dir.path().join("wrap")).unwrap();
        wrapping.cover(u32::MAX - 10);
        let first = SerialFile::open(&dir.path().join("wrap")).unwrap().first(5);
        assert!(greater(first, u32::MAX - 10), "{first}");
    }

    #[test]
    fn a_file_that_is_no_serial_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vips.serial");
        std::fs::write(&path, "soon\n").unwrap();
        let error = format!("{:#}", SerialFile::open(&path).unwrap_err());
        assert!(
            error.contains("vips.serial does not hold a serial"),
            "{error}"
        );
    }

    /// Another writer's higher ceiling is kept, not lowered.
    #[test]
    fn the_ceiling_on_disk_is_never_lowered() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vips.serial");
        let file = SerialFile::open(&path).unwrap();
        std::fs::write(&path, "900000\n").unwrap();
        file.cover(100);
        assert_eq!(read(&path).unwrap(), Some(900_000));
    }
}
