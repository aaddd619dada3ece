//! Keeps VIP allocations in a JSON file so a restart gives every live import
//! the VIP it had.

use std::net::IpAddr;
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::model::ServiceKey;

#[derive(Debug, Default, Serialize, Deserialize)]
struct StateFile<V> {
    vips: V,
}

#[derive(Debug, Serialize, Deserialize)]
struct Entry<S> {
    namespace: S,
    name: S,
    ip: IpAddr,
}

/// Allocations serialized as entries as they are written, without a copy.
struct Entries<'a>(&'a [(ServiceKey, IpAddr)]);

impl Serialize for Entries<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|(key, ip)| Entry {
            namespace: key.namespace(),
            name: key.name(),
            ip: *ip,
        }))
    }
}

/// Reads saved allocations; a missing file means none.
pub(crate) fn load(path: &Path) -> anyhow::Result<Vec<(ServiceKey, IpAddr)>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading VIP state {}", path.display())),
    };
    let state: StateFile<Vec<Entry<String>>> = serde_json::from_str(&text)
        .with_context(|| format!("VIP state {} is not valid", path.display()))?;
    Ok(state
        .vips
        .into_iter()
        .map(|e| (ServiceKey::new(&e.namespace, &e.name), e.ip))
        .collect())
}

/// Writes allocations atomically (temporary file, then rename).
pub(crate) fn save(path: &Path, allocations: &[(ServiceKey, IpAddr)]) -> anyhow::Result<()> {
    let state = StateFile {
        vips: Entries(allocations),
    };
    let write = || -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = path.with_extension("json.tmp");
        let mut out = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
        serde_json::to_writer_pretty(&mut out, &state)?;
        out.into_inner()
            .map_err(std::io::IntoInnerError::into_error)?;
        std::fs::rename(&tmp, path)
    };
    write().with_context(|| format!("writing VIP state {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/vips.json");
        assert!(load(&path).unwrap().is_empty());
        let saved = vec![
            (ServiceKey::new("a", "web"), "243.0.0.7".parse().unwrap()),
            (ServiceKey::new("a", "web"), "fd00:c5e7::7".parse().unwrap()),
        ];
        save(&path, &saved).unwrap();
        assert_eq!(load(&path).unwrap(), saved);
        std::fs::write(&path, "{not json").unwrap();
        let err = load(&path).unwrap_err();
        assert!(
            format!("{err:#}").contains("vips.json is not valid"),
            "{err:#}"
        );
    }
}
