//! Whether, and how, each member makes its imports' VIPs route: a derived
//! Service per ClusterSetIP import that the member's own kube-proxy (or CNI)
//! programs (ARCHITECTURE.md, "Derived Services").

use std::fmt;
use std::str::FromStr;

/// What `--derived-services` asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DerivedServices {
    /// None: the names answer VIPs that no data plane of ours routes.
    #[default]
    Off,
    /// A derived Service with a ClusterIP from the member's own range, which
    /// the member answers and lists in its ServiceImport.
    PerCluster,
    /// A derived Service pinned to the clusterset VIPs (inside a
    /// ServiceCIDR for the VIP pool): one VIP that routes in every member.
    Clusterset,
}

impl DerivedServices {
    /// The flag's values, as written.
    pub const VALUES: [&'static str; 3] = ["none", "per-cluster", "clusterset"];
}

impl FromStr for DerivedServices {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(Self::Off),
            "per-cluster" => Ok(Self::PerCluster),
            "clusterset" => Ok(Self::Clusterset),
            _ => Err(format!("{s:?} is not one of {}", Self::VALUES.join(", "))),
        }
    }
}

impl fmt::Display for DerivedServices {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = match self {
            Self::Off => 0,
            Self::PerCluster => 1,
            Self::Clusterset => 2,
        };
        f.write_str(Self::VALUES[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_reads_back_as_written() {
        for value in DerivedServices::VALUES {
            assert_eq!(value.parse::<DerivedServices>().unwrap().to_string(), value);
        }
        let error = "on".parse::<DerivedServices>().unwrap_err();
        assert_eq!(error, "\"on\" is not one of none, per-cluster, clusterset");
    }
}
