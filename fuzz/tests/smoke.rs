//! Every fuzz target for a few thousand inputs in the test profile (overflow checks on): the
//! fuzzer and its targets cannot rot, and a crash the long run found stays fixed.

#[test]
fn every_target_runs_a_few_thousand_inputs_without_a_crash() {
    std::panic::set_hook(Box::new(|_| {}));
    for t in orderly_fuzz::targets() {
        let s = orderly_fuzz::fuzz(&t, 3_000, 20_261_201).unwrap_or_else(|c| panic!("{c}"));
        assert_eq!(s.iterations, 3_000);
        // The seeds are valid encodings, so mutants of them are accepted now and then: a target
        // whose decoder rejects everything would be fuzzing nothing.
        assert!(s.accepted > 0, "{}: no input accepted", t.name);
    }
}
