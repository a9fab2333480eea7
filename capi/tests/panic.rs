//! A panic inside the engine becomes a status and a message, never an unwinding into the caller (which
//! aborts the process): the test-only trigger (`DCGM_OTEL_TEST_PANIC`, compiled into debug builds only)
//! panics in the second collect call; the third collects again. Its own test binary: the trigger is read
//! from the environment.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly on purpose
#![allow(unsafe_code)] // the tests play the C caller: raw pointers into and out of the entry points

mod common;

#[test]
fn a_panic_in_the_engine_is_an_error_and_the_engine_goes_on() {
    std::env::set_var("DCGM_OTEL_TEST_PANIC", "collect@2");
    let engine = common::start(&["--simulate", "-c", "100"]).unwrap();
    assert!(common::collect(engine, 10_000).is_ok());
    let (rc, message) = common::collect(engine, 10_000).err().unwrap();
    assert_eq!(rc, 4);
    assert_eq!(
        message.unwrap(),
        "panic in the dcgm-otel engine (a bug; please report it): deliberate panic in collect call 2 (DCGM_OTEL_TEST_PANIC)"
    );
    let next = common::collect(engine, 10_000).unwrap();
    assert!(next.data_points > 0);
    assert_eq!(common::stop(engine, 5_000), (0, None));
    common::free(engine);
}
