//! The scavenger's premise and its effect, in a process of their own (a test binary
//! with one test, so no other test's allocations blur the resident size).

use plegd::memory;

#[test]
fn heap_a_burst_freed_goes_back_to_the_kernel_when_trimmed() {
    if !memory::SUPPORTED {
        eprintln!("SKIPPED: this build does not use glibc's malloc; there is nothing to trim");
        return;
    }
    // A burst: 64 MiB in blocks of 4,000 bytes, each written, and every 64th followed by
    // a small block that outlives the burst, as a node's long-lived records do. Freed,
    // the burst leaves 256 KiB holes that malloc keeps, resident, below those blocks.
    const BLOCKS: usize = 16 << 10;
    let mut kept = Vec::new();
    let mut burst = Vec::with_capacity(BLOCKS);
    for i in 0..BLOCKS {
        burst.push(vec![1u8; 4000]);
        if i % 64 == 63 {
            kept.push(vec![2u8; 32]);
        }
    }
    let at_peak = plegd::process::rss_bytes();
    drop(burst);
    let freed = plegd::process::rss_bytes();
    let t = memory::trim();
    let after = plegd::process::rss_bytes();
    let mib = |b: f64| b / 1048576.0;
    println!(
        "resident: {:.1} MiB at the burst's peak, {:.1} MiB once it was freed, {:.1} MiB after the trim ({:.1} MiB returned in {:?})",
        mib(at_peak),
        mib(freed),
        mib(after),
        mib(t.returned as f64),
        t.took
    );
    assert!(t.returned >= 32 << 20, "a trim gives back most of a freed 64 MiB burst: {t:?}");
    assert!(after < freed - (32 << 20) as f64, "and the resident size says so: {freed} → {after}");
    assert_eq!(kept.len(), BLOCKS / 64, "the long-lived blocks are still there");
}
