//! The one place an integration test compares a measured time with a bound.
//!
//! Tests through the binary assert outcomes and order; promises about time
//! are checked on tokio's paused clock in `src/` (see ARCHITECTURE.md,
//! "Testing"). Where a wall-clock bound is still the point of a test here, it
//! goes through this module: an upper bound is scaled by how much slower this
//! machine is, now, than the idle machine the nominal bounds were written on;
//! a lower bound is never scaled (a slower machine does not make a wait
//! shorter). `tests/tidy.rs` rejects a time compared in an assertion anywhere
//! else under `tests/`.
//!
//! The calibration is measured once per test binary, on first use, by a fixed
//! piece of work (CPU, thread hand-offs and a loopback round trip, the kinds of
//! work a routed request does) timed against the same work on the reference
//! machine. `SWITCHYARD_TEST_SLOWDOWN=F` sets the factor instead of measuring it.

use std::fmt::Display;
use std::io::{Read, Write};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The calibration work's median on the reference machine (a 2-vCPU AMD EPYC
/// VM, idle; measured 3 700-4 050 there, idle and with one core busy), in
/// microseconds.
const REFERENCE_MICROS: f64 = 3_800.0;
/// Samples of the calibration work; the median is taken.
const SAMPLES: usize = 7;
/// No calibration scales a bound by more than this: a machine this much
/// slower than the reference gets a failure that names the factor.
const MOST: f64 = 20.0;

/// How much slower this machine is than the reference: at least 1.
pub fn slowdown() -> f64 {
    static FACTOR: OnceLock<f64> = OnceLock::new();
    *FACTOR.get_or_init(|| {
        let factor = match std::env::var("SWITCHYARD_TEST_SLOWDOWN") {
            Ok(set) => set
                .parse::<f64>()
                .unwrap_or_else(|_| panic!("SWITCHYARD_TEST_SLOWDOWN={set:?} is not a number")),
            Err(_) => measure() / REFERENCE_MICROS,
        }
        .clamp(1.0, MOST);
        eprintln!("timing: this machine is {factor:.2}x the reference (bounds scaled by it)");
        factor
    })
}

/// `nominal` as this machine needs it.
pub fn scaled(nominal: Duration) -> Duration {
    nominal.mul_f64(slowdown())
}

/// Asserts that `measured` is within `nominal`, scaled to this machine.
#[track_caller]
pub fn assert_within(what: &str, measured: Duration, nominal: Duration) {
    let bound = scaled(nominal);
    assert!(
        measured <= bound,
        "{what}: took {measured:?}, over {nominal:?} (x{:.2} here: {bound:?})",
        slowdown()
    );
}

/// Asserts that `measured` is at least `bound`: a promise not to act early,
/// which no machine's speed excuses.
#[track_caller]
pub fn assert_at_least(what: &str, measured: Duration, bound: Duration) {
    assert!(
        measured >= bound,
        "{what}: after {measured:?}, before {bound:?}"
    );
}

/// Asserts that every gap is at least `bound`.
#[track_caller]
pub fn assert_gaps_at_least(what: &str, gaps: &[Duration], bound: Duration) {
    assert!(
        gaps.iter().all(|gap| *gap >= bound),
        "{what}: closer than {bound:?}: {gaps:?}"
    );
}

/// Asserts that `later` did not come before `earlier`: the order of two
/// recorded events, which no machine's speed changes.
#[track_caller]
pub fn assert_in_order<T: PartialOrd + std::fmt::Debug>(what: &str, earlier: T, later: T) {
    assert!(
        later >= earlier,
        "{what}: {later:?} came before {earlier:?}"
    );
}

/// A point by which something must have happened, `nominal` from now scaled
/// to this machine: the patience of a loop that polls for an effect.
pub struct Deadline {
    at: tokio::time::Instant,
    nominal: Duration,
}

impl Deadline {
    pub fn after(nominal: Duration) -> Deadline {
        Deadline {
            at: tokio::time::Instant::now() + scaled(nominal),
            nominal,
        }
    }

    pub fn passed(&self) -> bool {
        tokio::time::Instant::now() >= self.at
    }

    /// Fails with `what` once the deadline has passed.
    #[track_caller]
    pub fn assert_not_passed(&self, what: impl Display) {
        assert!(
            !self.passed(),
            "{what} (waited {:?}, scaled x{:.2} here)",
            self.nominal,
            slowdown()
        );
    }
}

/// The median of [`SAMPLES`] runs of the calibration work, in microseconds.
fn measure() -> f64 {
    let mut samples: Vec<f64> = (0..SAMPLES)
        .map(|_| {
            let start = Instant::now();
            calibration_work();
            start.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[SAMPLES / 2]
}

/// CPU (hashing), thread hand-offs and a loopback TCP round trip.
fn calibration_work() {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for i in 0..500_000u64 {
        hash = (hash ^ i).wrapping_mul(0x0100_0000_01b3);
    }
    std::hint::black_box(hash);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let echo = std::thread::spawn(move || {
        let (mut socket, _) = listener.accept().unwrap();
        let mut buf = [0u8; 64];
        for _ in 0..20 {
            let n = socket.read(&mut buf).unwrap();
            socket.write_all(&buf[..n]).unwrap();
        }
    });
    let mut client = std::net::TcpStream::connect(addr).unwrap();
    client.set_nodelay(true).unwrap();
    let mut buf = [0u8; 64];
    for _ in 0..20 {
        client.write_all(b"ping").unwrap();
        client.read_exact(&mut buf[..4]).unwrap();
    }
    echo.join().unwrap();
}
