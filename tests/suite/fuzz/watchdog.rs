//! A hang is a failure too: a case that runs past [`LIMIT`] is printed and the process exits,
//! so a run reports the case instead of running into CI's own time limit (a replicate padding
//! of 2^40 around an empty batch once looped for an hour inside NdArray's `repeat_dim`).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// How long one case may run. The longest honest cases take seconds (lavapipe compiling a new
/// shape's kernels in the unoptimized CI build, beside other tests): minutes are a hang.
const LIMIT: Duration = Duration::from_secs(300);

/// The case now running, with when it started; a thread checks it every second.
pub struct Watchdog {
    running: Arc<Mutex<Option<(Instant, String)>>>,
    finished: Arc<AtomicBool>,
}

impl Watchdog {
    /// Watch the cases of the property `name`.
    pub fn new(name: &str) -> Self {
        let running = Arc::new(Mutex::new(None::<(Instant, String)>));
        let finished = Arc::new(AtomicBool::new(false));
        let (watched, done, name) = (running.clone(), finished.clone(), name.to_string());
        thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                thread::sleep(Duration::from_secs(1));
                let running = watched
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                if let Some((started, case)) = running.as_ref()
                    && started.elapsed() > LIMIT
                {
                    // Past the test harness's capture, which the exit would discard.
                    let _ = writeln!(
                        std::io::stderr(),
                        "{name}: a case ran past {LIMIT:?}, a hang: {case}"
                    );
                    std::process::exit(101);
                }
            }
        });
        Self { running, finished }
    }

    /// Run the case `shown` (its debug form) under watch.
    pub fn watch<T>(&self, shown: String, run: impl FnOnce() -> T) -> T {
        self.set(Some((Instant::now(), shown)));
        let result = run();
        self.set(None);
        result
    }

    fn set(&self, running: Option<(Instant, String)>) {
        *self
            .running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = running;
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.finished.store(true, Ordering::Relaxed);
    }
}
