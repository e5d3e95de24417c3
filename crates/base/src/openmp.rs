//! llama.cpp's OpenMP threads, set up for a machine that other work shares.

/// How long an OpenMP thread of llama.cpp spins at a barrier before it sleeps.
/// libgomp's default spins for a long time; when another process holds a core
/// (a build, an indexer), the spinning thread burns its time slice waiting for
/// a sibling that is not running: prompt speed under a CPU hog on every core
/// fell to 11 tokens/s, against 40-48 with this bound (19 with 100,000). The
/// price on an idle machine is ~15 % per generated token, where threads now
/// sleep and wake between steps (BENCHMARKS.md, completion latency).
const OPENMP_SPIN_COUNT: &str = "10000";

/// libgomp reads its settings when the process loads, before `main`: so set
/// the spin bound and start this program again, unless the user chose one.
#[cfg(unix)]
pub fn bound_spinning() {
    use std::os::unix::process::CommandExt;
    if std::env::var_os("GOMP_SPINCOUNT").is_some() || std::env::var_os("OMP_WAIT_POLICY").is_some()
    {
        return;
    }
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let mut args = std::env::args_os();
    let mut again = std::process::Command::new(exe);
    if let Some(arg0) = args.next() {
        again.arg0(arg0);
    }
    // `exec` returns only when it failed; then run on with the default.
    let error = again
        .args(args)
        .env("GOMP_SPINCOUNT", OPENMP_SPIN_COUNT)
        .exec();
    eprintln!("switchyard: could not restart with GOMP_SPINCOUNT set: {error}");
}

#[cfg(not(unix))]
pub fn bound_spinning() {}
