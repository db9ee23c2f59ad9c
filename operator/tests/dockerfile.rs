//! The repository's `Dockerfile`, read as a build graph (no Docker needed, so it runs in
//! every `cargo test`): bases pinned by digest, no architecture named outside comments (one
//! set of lines builds linux/amd64 and linux/arm64), each runtime target reaching only its own
//! build stage (so `--target operator` never compiles the collector), zlib linked statically.
//! That the runtime targets run is proven on the local stack, whose images are built from
//! this file (e2e/lib/images.sh) and run by every e2e test.

use std::collections::{BTreeMap, BTreeSet};

const DOCKERFILE: &str = include_str!("../../Dockerfile");

/// Instructions with continuation lines joined, comments dropped.
fn instructions() -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in DOCKERFILE.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(head) => {
                current.push_str(head);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                out.push(std::mem::take(&mut current));
            }
        }
    }
    out
}

/// Stage name → (base, stages it copies from, its RUN lines).
fn stages() -> BTreeMap<String, (String, Vec<String>, Vec<String>)> {
    let mut stages = BTreeMap::new();
    let mut name = String::new();
    for i in instructions() {
        let words: Vec<&str> = i.split_whitespace().collect();
        match words.first().copied() {
            Some("FROM") => {
                let base = words[1].to_owned();
                name = words
                    .iter()
                    .position(|w| w.eq_ignore_ascii_case("AS"))
                    .map(|p| words[p + 1].to_owned())
                    .expect("every stage is named");
                stages.insert(name.clone(), (base, Vec::new(), Vec::new()));
            }
            Some("COPY") => {
                if let Some(from) = words.iter().find_map(|w| w.strip_prefix("--from=")) {
                    stages.get_mut(&name).unwrap().1.push(from.to_owned());
                }
            }
            Some("RUN") => stages.get_mut(&name).unwrap().2.push(i.clone()),
            _ => {}
        }
    }
    stages
}

/// Every stage `target` needs.
fn closure(target: &str) -> BTreeSet<String> {
    let stages = stages();
    let mut seen = BTreeSet::new();
    let mut todo = vec![target.to_owned()];
    while let Some(s) = todo.pop() {
        if !seen.insert(s.clone()) {
            continue;
        }
        if let Some((base, froms, _)) = stages.get(&s) {
            todo.extend(froms.iter().cloned());
            if stages.contains_key(base) {
                todo.push(base.clone());
            }
        }
    }
    seen
}

#[test]
fn base_images_are_pinned_by_digest() {
    let args: BTreeMap<String, String> = instructions()
        .iter()
        .filter_map(|i| i.strip_prefix("ARG "))
        .filter_map(|a| a.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let stages = stages();
    for (stage, (base, _, _)) in &stages {
        if base == "scratch" || stages.contains_key(base) {
            continue;
        }
        let arg = base
            .strip_prefix("${")
            .and_then(|b| b.strip_suffix('}'))
            .unwrap_or_else(|| panic!("stage {stage}: base {base} is neither an ARG nor a stage"));
        let image = &args[arg];
        let (_, digest) = image
            .split_once("@sha256:")
            .unwrap_or_else(|| panic!("{arg}={image} is not pinned by digest"));
        assert!(
            digest.len() == 64 && digest.chars().all(|c| c.is_ascii_hexdigit()),
            "{arg}={image}"
        );
    }
}

#[test]
fn no_architecture_is_named_outside_comments() {
    for i in instructions() {
        for arch in [
            "x86_64", "x86-64", "aarch64", "amd64", "arm64", "i386", "armhf",
        ] {
            assert!(!i.contains(arch), "{arch} in: {i}");
        }
    }
}

#[test]
fn each_target_compiles_only_its_own_binary() {
    let stages = stages();
    for (target, own, other) in [
        ("collector", "tracehouse-collector", "tracehouse-operator"),
        ("operator", "tracehouse-operator", "tracehouse-collector"),
    ] {
        let needed = closure(target);
        let builds: Vec<&String> = needed
            .iter()
            .flat_map(|s| stages[s].2.iter())
            .filter(|r| r.contains("cargo build"))
            .collect();
        assert_eq!(builds.len(), 1, "{target}: {builds:?}");
        let build = builds[0];
        assert!(build.contains(&format!("-p {own}")), "{build}");
        assert!(build.contains(&format!("--bin {own}")), "{build}");
        assert!(!build.contains(other), "{target} compiles {other}: {build}");
        assert!(build.contains("--locked"), "{build}");
        // zlib in the binary: no library copied next to it.
        assert!(build.contains("rdkafka/libz-static"), "{build}");
    }
    assert!(
        !DOCKERFILE.contains("libz.so"),
        "no zlib copy in the images"
    );
}
