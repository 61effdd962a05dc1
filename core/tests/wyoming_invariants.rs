//! Property tests: random sequences of Wyoming events (whole or split, data inline or in a data
//! block), garbage bytes, engine events and timer ticks never break the `WyomingSession`
//! invariants (see `speechstream_core::wyoming::check`): answers in request order, audio cycles
//! whole, nothing after the close, every engine request answered or aborted. Failing cases
//! proptest finds are kept in `tests/wyoming_invariants.proptest-regressions`.

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use speechstream_core::wyoming::check::drive;

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 2000,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct("tests/wyoming_invariants.proptest-regressions"))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn wyoming_invariants_hold(ops in proptest::collection::vec(any::<u8>(), 0..400)) {
        if let Err(e) = drive(&ops) {
            return Err(TestCaseError::fail(e));
        }
    }
}

/// A stream whose sentences are answered while chunks still arrive, then a describe: the driver
/// itself must accept a normal session (a checker that rejects everything passes no property).
#[test]
fn a_normal_session_passes_the_checker() {
    // op, arg pairs: start, chunk "Hello world. ", engine audio, finish, stop, finish, describe.
    let ops = [3, 0, 4, 0, 8, 4, 9, 1, 5, 0, 9, 1, 0, 0];
    drive(&ops).expect("a normal session");
}

/// The committed fuzz seeds of the `wyoming` target run here too, so CI exercises its body on stable.
#[test]
fn wyoming_fuzz_seeds_replay_cleanly() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/wyoming");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("fuzz/seeds/wyoming exists") {
        let data = std::fs::read(entry.expect("seed").path()).expect("readable seed");
        drive(&data).unwrap_or_else(|e| panic!("seed failed: {e}"));
        n += 1;
    }
    assert!(n > 0, "no seeds");
}
