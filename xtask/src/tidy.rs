//! Tidy checks of the repository itself, run by `cargo test` (as rust-analyzer's tidy tests
//! are): the docs name only paths that exist, and the `bench` binary stays wiring.

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::path::{Path, PathBuf};

    fn root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    /// Every file under `dir` (recursively), `target/` and hidden folders left out.
    fn files(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || name == "target" || name == "node_modules" {
                continue;
            }
            if p.is_dir() {
                files(&p, out);
            } else {
                out.push(p);
            }
        }
    }

    /// `bench-cli/src` is the binary's wiring: dispatch, rendering, signals and exit codes; the
    /// flags are `bench-args`, the logic the libraries (issue #31: under 2,000 lines).
    const MAX_CLI_LINES: usize = 2_000;

    #[test]
    fn the_cli_stays_wiring() {
        let mut all = Vec::new();
        files(&root().join("crates/bench-cli/src"), &mut all);
        let lines: usize = all
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "rs"))
            .map(|p| {
                std::fs::read_to_string(p)
                    .unwrap_or_default()
                    .lines()
                    .count()
            })
            .sum();
        assert!(
            lines < MAX_CLI_LINES,
            "crates/bench-cli/src has {lines} lines, not under {MAX_CLI_LINES}: move logic into a \
             library (bench-run, bench-report) and flags into bench-args instead of growing the \
             binary"
        );
    }

    /// Clap is the command line's alone: no library of logic declares flags (a library takes
    /// specs; `bench-args` turns flags into them).
    #[test]
    fn only_the_command_line_depends_on_clap() {
        let allowed = ["bench-args", "bench-cli"];
        let mut offenders = Vec::new();
        for e in std::fs::read_dir(root().join("crates")).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let manifest = std::fs::read_to_string(e.path().join("Cargo.toml")).unwrap_or_default();
            let deps: toml::Table = toml::from_str(&manifest).unwrap();
            let uses_clap = ["dependencies", "dev-dependencies", "build-dependencies"]
                .iter()
                .filter_map(|t| deps.get(*t).and_then(|v| v.as_table()))
                .any(|t| t.contains_key("clap"));
            if uses_clap && !allowed.contains(&name.as_str()) {
                offenders.push(name);
            }
        }
        assert!(
            offenders.is_empty(),
            "{offenders:?} depend on clap: flags belong in bench-args, libraries take specs"
        );
    }

    /// The paths ARCHITECTURE.md names in backticks exist: at the root, or under a crate (or
    /// its `src/`) or `xtask` for the ones its crate sections name relative to the crate; a
    /// bare `name.rs` somewhere in the sources.
    #[test]
    fn every_path_architecture_names_exists() {
        let root = root();
        let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
        let mut bases = vec![root.clone(), root.join("xtask"), root.join("xtask/src")];
        for e in std::fs::read_dir(root.join("crates")).unwrap().flatten() {
            bases.push(e.path());
            bases.push(e.path().join("src"));
        }
        let mut every = Vec::new();
        files(&root.join("crates"), &mut every);
        files(&root.join("xtask"), &mut every);
        let exts = [
            ".rs", ".md", ".json", ".toml", ".py", ".sh", ".zst", ".jsonl", ".mjs",
        ];
        let mut missing = Vec::new();
        for (i, token) in text.split('`').enumerate() {
            // Odd pieces are inside backticks.
            if i % 2 == 0 || token.contains(' ') || token.starts_with('/') {
                continue;
            }
            let t = token.trim_end_matches(['.', ',', ':']);
            // A bare name is a source file (`plan.rs`); others (`result.json`) name run
            // directory files, not the repository's.
            let pathy = if t.contains('/') {
                t.ends_with('/') && t.len() > 1 || exts.iter().any(|e| t.ends_with(e))
            } else {
                t.ends_with(".rs")
            };
            if !pathy || t.starts_with("target/") || t.contains('*') || t.contains('<') {
                continue;
            }
            let found = bases.iter().any(|b| b.join(t).exists())
                || (!t.contains('/') && every.iter().any(|p| p.ends_with(t)));
            if !found {
                missing.push(t.to_owned());
            }
        }
        missing.sort();
        missing.dedup();
        assert!(
            missing.is_empty(),
            "ARCHITECTURE.md names paths that do not exist: {missing:?}"
        );
    }

    /// Relative links in the README, ARCHITECTURE.md and docs/ point at files that exist.
    #[test]
    fn every_relative_link_in_the_docs_resolves() {
        let root = root();
        let mut docs = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
        files(&root.join("docs"), &mut docs);
        let mut broken = Vec::new();
        for doc in docs
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "md"))
        {
            let text = std::fs::read_to_string(doc).unwrap();
            let dir = doc.parent().unwrap();
            for piece in text.split("](").skip(1) {
                let Some(end) = piece.find(')') else { continue };
                let link = &piece[..end];
                if link.contains("://") || link.starts_with('#') || link.starts_with("mailto:") {
                    continue;
                }
                let path = link.split('#').next().unwrap_or_default();
                if !path.is_empty() && !dir.join(path).exists() {
                    let doc = doc.strip_prefix(&root).unwrap_or(doc).display().to_string();
                    broken.push(format!("{doc}: {link}"));
                }
            }
        }
        assert!(broken.is_empty(), "broken links: {broken:#?}");
    }
}
