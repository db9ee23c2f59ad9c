//! Decoder fuzzing on the pinned stable toolchain: seeded random mutations of real records
//! (loadgen's, in `otlp_proto` and `otlp_json`), for as long as `TRACEHOUSE_FUZZ_SECONDS`
//! says. Not coverage-guided (the libFuzzer targets of `collector/fuzz`, run by `e2e/fuzz`,
//! are; this one needs nothing but `cargo test`), but differential and stacked: every mutated
//! protobuf record the in-place reader accepts must give `prost`'s rows (`differential.rs`),
//! no input may panic either decoder, and none may take longer than a second (a hang). The
//! seed is printed, so a failure replays with `TRACEHOUSE_FUZZ_SEED`; the failing input is
//! written next to the target directory.
//!
//! `cargo test -p tracehouse-collector --lib fuzz -- --ignored --nocapture` (e2e/chaos runs
//! it as its `fuzz` case: 20 s in the quick profile, 10 min per decoder in the full one).

use std::time::{Duration, Instant};

use prost::Message;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::differential::{in_place, requests, via_prost};
use crate::decode::{self, Encoding};

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.parse().ok()
}

/// One to four stacked mutations: byte flips, interesting bytes (varint and length
/// boundaries), truncation, insertion, a duplicated or deleted range, a splice of another record.
fn mutate(rng: &mut StdRng, input: &[u8], other: &[u8]) -> Vec<u8> {
    const INTERESTING: [u8; 8] = [0x00, 0x01, 0x7f, 0x80, 0xff, b'"', b'{', b'\\'];
    let mut b = input.to_vec();
    for _ in 0..rng.random_range(1..=4) {
        if b.is_empty() {
            b.push(rng.random());
            continue;
        }
        let at = rng.random_range(0..b.len());
        match rng.random_range(0..7) {
            0 => b[at] = rng.random(),
            1 => b[at] = INTERESTING[rng.random_range(0..INTERESTING.len())],
            2 => b.truncate(at),
            3 => b.insert(at, rng.random()),
            4 => {
                let end = (at + rng.random_range(1..64)).min(b.len());
                let piece = b[at..end].to_vec();
                let to = rng.random_range(0..=b.len());
                b.splice(to..to, piece);
            }
            5 => {
                let end = (at + rng.random_range(1..64)).min(b.len());
                b.drain(at..end);
            }
            _ => {
                let from = rng.random_range(0..other.len().max(1));
                let tail = &other[from.min(other.len())..];
                b.truncate(at);
                b.extend_from_slice(&tail[..tail.len().min(4096)]);
            }
        }
    }
    b
}

/// Run `check` on `input`; a panic or a slow input is saved and fails the test.
fn guarded(what: &str, seed: u64, i: u64, input: &[u8], check: impl FnOnce(&[u8])) {
    let started = Instant::now();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(input)));
    let slow = started.elapsed() > Duration::from_secs(1);
    if outcome.is_err() || slow {
        let path = std::env::temp_dir().join(format!("tracehouse-fuzz-{what}-{seed}-{i}.bin"));
        let _ = std::fs::write(&path, input);
        panic!(
            "{what}: input {i} (seed {seed}) {}; saved to {}",
            if slow {
                "took over 1 s"
            } else {
                "panicked or disagreed with prost"
            },
            path.display()
        );
    }
}

#[test]
#[ignore = "long-running: e2e/chaos runs it (TRACEHOUSE_FUZZ_SECONDS)"]
fn decoders_survive_mutated_records_and_agree_with_prost() {
    let seconds = env_u64("TRACEHOUSE_FUZZ_SECONDS").unwrap_or(5);
    let seed = env_u64("TRACEHOUSE_FUZZ_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs())
    });
    eprintln!("fuzz: seed {seed}, {seconds} s per decoder");
    let mut rng = StdRng::seed_from_u64(seed);
    let reqs = requests(4);
    let proto: Vec<Vec<u8>> = reqs.iter().map(Message::encode_to_vec).collect();
    let json: Vec<Vec<u8>> = reqs
        .iter()
        .map(|r| tracehouse_loadgen::encode::to_otlp_json(r).into_bytes())
        .collect();

    let (mut accepted, mut declined, mut i) = (0u64, 0u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < deadline {
        let input = mutate(
            &mut rng,
            &proto[i as usize % 4],
            &proto[(i as usize + 1) % 4],
        );
        guarded("otlp_proto", seed, i, &input, |b| match in_place(b) {
            Some(fast) => {
                accepted += 1;
                assert_eq!(Some(fast), via_prost(b));
            }
            None => {
                declined += 1;
                let _ = via_prost(b);
            }
        });
        i += 1;
    }
    eprintln!(
        "fuzz: otlp_proto {i} inputs, {accepted} read in place (= prost), {declined} declined"
    );
    assert!(accepted > 0 && declined > 0, "both outcomes exercised");

    let (mut ok, mut refused, mut j) = (0u64, 0u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < deadline {
        let input = mutate(&mut rng, &json[j as usize % 4], &json[(j as usize + 1) % 4]);
        guarded("otlp_json", seed, j, &input, |b| {
            match decode::decode(b, Encoding::OtlpJson) {
                Ok(_) => ok += 1,
                Err(_) => refused += 1,
            }
        });
        j += 1;
    }
    eprintln!("fuzz: otlp_json {j} inputs, {ok} decoded, {refused} refused");
    assert!(ok > 0 && refused > 0, "both outcomes exercised");
}
