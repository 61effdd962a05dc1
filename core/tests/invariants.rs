//! Property tests: random sequences of client frames, engine events and timer ticks
//! never break the Session invariants (see `speechstream_core::check`). Failing
//! cases proptest finds are kept in `tests/invariants.proptest-regressions` and replayed
//! first; those found while writing the checker are in `fuzz/seeds/session/regression-*`.

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use speechstream_core::check::drive;

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 2000,
        // Integration tests have no src/ beside them: name the file failures are kept in.
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct("tests/invariants.proptest-regressions"))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn session_invariants_hold(ops in proptest::collection::vec(any::<u8>(), 0..400)) {
        if let Err(e) = drive(&ops) {
            return Err(TestCaseError::fail(e));
        }
    }
}

/// The committed fuzz corpus runs here too, so CI exercises the fuzz bodies on stable.
#[test]
fn fuzz_corpus_replays_cleanly() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/session");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("fuzz/seeds/session exists") {
        let data = std::fs::read(entry.expect("corpus entry").path()).expect("readable corpus file");
        drive(&data).unwrap_or_else(|e| panic!("corpus case failed: {e}"));
        n += 1;
    }
    assert!(n > 0, "empty corpus");
}

#[test]
fn parser_fuzz_corpus_replays_cleanly() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/parser");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("fuzz/seeds/parser exists") {
        speechstream_core::check::parse_any(&std::fs::read(entry.expect("corpus entry").path()).expect("readable"));
        n += 1;
    }
    assert!(n > 0, "empty corpus");
}
