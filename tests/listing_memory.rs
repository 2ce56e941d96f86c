//! What an idle relist's listing costs in memory, in a process of its own (one test, its
//! heap counted by the allocator below). The runtime is `plegd sim` in another process, so only the
//! client's allocations are counted: hashed as its HTTP/2 frames arrive, an unchanged
//! listing is never held; listed whole, it is.

use std::time::{Duration, Instant};

use plegd::cri::RuntimeService;
use plegd::cri::client::{ClientOptions, CriClient};

// The counting allocator below is the test's instrument; plegd's own code stays safe.
#[allow(unsafe_code)]
mod counting {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// The system allocator, counting the bytes live now and the most live since the
    /// last [`reset_peak`].
    pub struct Counting;

    static LIVE: AtomicUsize = AtomicUsize::new(0);
    static PEAK: AtomicUsize = AtomicUsize::new(0);

    fn grew(by: usize) {
        let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
        PEAK.fetch_max(now, Ordering::Relaxed);
    }

    // SAFETY: every call is passed on to `System` unchanged; only counters move.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            grew(layout.size());
            unsafe { System.alloc(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            unsafe { System.dealloc(ptr, layout) }
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            grew(new_size);
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }

    /// Bytes live now.
    pub fn live() -> usize {
        LIVE.load(Ordering::Relaxed)
    }

    /// The most bytes live since the last reset.
    pub fn peak() -> usize {
        PEAK.load(Ordering::Relaxed)
    }

    /// Starts a new peak from what is live now.
    pub fn reset_peak() {
        PEAK.store(live(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: counting::Counting = counting::Counting;

/// The most bytes live at once while `f` runs, above those live before it.
async fn peak_during<T>(f: impl Future<Output = T>) -> (T, usize) {
    counting::reset_peak();
    let before = counting::live();
    let out = f.await;
    (out, counting::peak().saturating_sub(before))
}

#[tokio::test(flavor = "current_thread")]
async fn an_unchanged_listing_is_hashed_as_it_arrives_and_never_held_whole() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("cri.sock");
    let endpoint = format!("unix://{}", socket.display());
    let _sim = KillOnDrop(
        std::process::Command::new(env!("CARGO_BIN_EXE_plegd"))
            .args(["sim", "--listen", &endpoint, "--pods", "1000", "--containers-per-pod", "5", "--churn-per-sec", "0"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("plegd sim"),
    );
    let opts = ClientOptions { timeout: Duration::from_secs(10), ..Default::default() };
    let client =
        CriClient::new(&endpoint, opts, plegd::cri::metrics::CriMetrics::register(&mut Default::default())).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while client.list_containers(None).await.map_or(0, |c| c.len()) < 5000 {
        assert!(Instant::now() < deadline, "plegd sim never held its 5,000 containers");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A first whole listing, which every later peak starts above.
    let listing = client.list_encoded().await.unwrap();
    let size = listing.sandboxes.len() + listing.containers.len();
    let fingerprint = listing.fingerprint(7).unwrap();
    drop(listing);

    let (unchanged, hashed_peak) = peak_during(client.list_if_changed(7, fingerprint)).await;
    assert_eq!(unchanged.unwrap(), None, "the listing did not change");
    let (whole, whole_peak) = peak_during(client.list_encoded()).await;
    assert_eq!(whole.unwrap().fingerprint(7), Some(fingerprint));
    println!("listing {size} bytes; peak above the start: hashed {hashed_peak} bytes, whole {whole_peak} bytes");
    assert!(whole_peak >= size, "the whole listing is held: {whole_peak} bytes at its peak for {size}");
    // What waits unread in the connection is bounded by its 256 KiB flow-control window,
    // however slowly this process reads (on a loaded machine, it lags).
    assert!(hashed_peak < 512 << 10, "the hashed listing held {hashed_peak} bytes at its peak for {size}");
}

/// The simulator, killed however the test ends.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        self.0.kill().ok();
        self.0.wait().ok();
    }
}
