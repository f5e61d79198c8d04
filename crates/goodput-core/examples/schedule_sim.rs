//! Simulates the agent's scheduler on a full mesh in virtual time and
//! prints the non-start rate, occupancy, fairness and scheduling work.
//!
//!   cargo run --release -p goodput-core --example schedule_sim -- HOSTS EVERY_S DURATION_S SLIP_S DAYS

use goodput_core::schedule::simulate_mesh;

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("numbers: HOSTS EVERY_S DURATION_S SLIP_S DAYS"))
        .collect();
    let [hosts, every, duration, slip, days] = args[..] else {
        eprintln!("usage: schedule_sim HOSTS EVERY_S DURATION_S SLIP_S DAYS");
        std::process::exit(2);
    };
    let started = std::time::Instant::now();
    let r = simulate_mesh(hosts as usize, every * 1000, duration * 1000, slip * 1000, days);
    let took = started.elapsed();
    println!(
        "hosts {} | every {} s, {} s tests, slip {} s, {} day(s) | demand {:.1}% | runs {} | non-starts {} ({:.2}%) | occupancy {:.1}% | fairness {:.4} | background streams {} | look-ups per host per day {:.0} | {:.2} s of CPU, {:.1} µs per host per day",
        r.hosts,
        every,
        duration,
        slip,
        days,
        100.0 * 2.0 * (hosts - 1) as f64 * duration as f64 / every as f64,
        r.runs,
        r.non_starts,
        100.0 * r.non_starts as f64 / r.runs.max(1) as f64,
        100.0 * r.occupancy,
        r.fairness,
        r.background_runs,
        r.lookups_per_host_day,
        took.as_secs_f64(),
        took.as_secs_f64() * 1e6 / hosts as f64 / days as f64
    );
}
