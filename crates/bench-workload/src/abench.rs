//! agentic-bench's dataset selection (`abench run --dataset-name NAME/TIER|random
//! --dataset-path PATH`), resolved the way agentic-bench 0.2.0 resolves it, so its command lines
//! read the same data.
//!
//! ```
//! use std::path::Path;
//! use bench_workload::abench::{AbenchDataset, resolve};
//!
//! assert_eq!(resolve(Some("random"), None, None).unwrap(), AbenchDataset::Random);
//! let e = resolve(Some("deepswe/mixed"), None, Some(Path::new("/nonexistent"))).unwrap_err();
//! assert!(e.to_string().contains("python3 -m abench data deepswe/mixed"));
//! ```

use std::path::{Path, PathBuf};

use crate::PlanError;

/// agentic-bench's default `--dataset-name`.
pub const DEFAULT_NAME: &str = "deepswe/mixed";

/// What `--dataset-name` and `--dataset-path` select.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AbenchDataset {
    /// `random`: the synthetic workload.
    Random,
    /// Session files: a file, a tier directory (with its `manifest.json`) or a plain directory.
    Path(PathBuf),
}

/// Splits `NAME/TIER` as agentic-bench does: a bare `NAME` is `NAME/mixed`, an empty name is
/// `deepswe`, an empty tier is `mixed`.
pub fn split_name(spec: &str) -> (String, String) {
    let spec = spec.trim();
    let (name, tier) = spec.split_once('/').unwrap_or((spec, ""));
    let or = |s: &str, d: &str| {
        if s.is_empty() {
            d.to_owned()
        } else {
            s.to_owned()
        }
    };
    (or(name, "deepswe"), or(tier, "mixed"))
}

/// agentic-bench's data root, `$HOME/abench_data` (`None` without `HOME`).
pub fn data_root() -> Option<PathBuf> {
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join("abench_data"))
}

/// Resolves `--dataset-name` (default [`DEFAULT_NAME`]) and `--dataset-path`:
///
/// * `random` is the synthetic workload (refused with a path: it reads no files);
/// * with a path: the file itself; a directory holding `manifest.json`; else
///   `PATH/NAME/TIER` when that holds `manifest.json` (a root of tiers); else the directory
///   as it is;
/// * without one: `ROOT/NAME/TIER` (`root` is [`data_root`] in the CLI), refused when missing.
pub fn resolve(
    name: Option<&str>,
    path: Option<&Path>,
    root: Option<&Path>,
) -> Result<AbenchDataset, PlanError> {
    let spec = name.unwrap_or(DEFAULT_NAME);
    if spec.trim() == "random" {
        return match path {
            Some(_) => Err(PlanError::flag(
                "--dataset-name random",
                "synthesizes sessions and reads no files: drop --dataset-path (or name a dataset)",
            )),
            None => Ok(AbenchDataset::Random),
        };
    }
    let (ds, tier) = split_name(spec);
    let Some(p) = path else {
        let Some(root) = root else {
            return Err(PlanError::flag(
                "--dataset-name",
                "HOME is not set, so ~/abench_data cannot be found: pass --dataset-path",
            ));
        };
        let dir = root.join(&ds).join(&tier);
        if !dir.is_dir() {
            return Err(PlanError::flag(
                "--dataset-name",
                format!(
                    "no dataset directory {}: run `python3 -m abench data {ds}/{tier}` first, \
                     or pass --dataset-path",
                    dir.display()
                ),
            ));
        }
        return Ok(AbenchDataset::Path(dir));
    };
    let tier_dir = p.join(&ds).join(&tier);
    Ok(AbenchDataset::Path(
        if p.is_dir()
            && !p.join("manifest.json").is_file()
            && tier_dir.join("manifest.json").is_file()
        {
            tier_dir
        } else {
            p.to_owned()
        },
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn names_split_as_agentic_bench_splits_them() {
        let s = |x: &str| split_name(x);
        assert_eq!(s("deepswe/full"), ("deepswe".into(), "full".into()));
        assert_eq!(s("lmcache"), ("lmcache".into(), "mixed".into()));
        assert_eq!(s("/full"), ("deepswe".into(), "full".into()));
        assert_eq!(s("x/"), ("x".into(), "mixed".into()));
    }

    #[test]
    fn paths_resolve_to_a_file_a_tier_or_a_root() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().to_path_buf();
        let tier = d.join("lmcache/full");
        std::fs::create_dir_all(&tier).unwrap();
        std::fs::write(tier.join("manifest.json"), "{}").unwrap();
        let path = |p: &Path| AbenchDataset::Path(p.to_owned());
        // A root of tiers: descend to NAME/TIER.
        assert_eq!(
            resolve(Some("lmcache/full"), Some(&d), None).unwrap(),
            path(&tier)
        );
        // No such tier under it: the directory itself (raw).
        assert_eq!(
            resolve(Some("lmcache/mixed"), Some(&d), None).unwrap(),
            path(&d)
        );
        // A tier directory is itself.
        assert_eq!(resolve(None, Some(&tier), None).unwrap(), path(&tier));
        // The standard layout.
        assert_eq!(
            resolve(Some("lmcache/full"), None, Some(&d)).unwrap(),
            path(&tier)
        );
        let e = resolve(Some("deepswe"), None, Some(&d)).unwrap_err();
        assert!(
            e.to_string()
                .contains("run `python3 -m abench data deepswe/mixed` first"),
            "{e}"
        );
        let e = resolve(Some("random"), Some(&d), None).unwrap_err();
        assert!(e.to_string().contains("drop --dataset-path"), "{e}");
    }
}
