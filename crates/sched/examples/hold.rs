//! Keeps the collector running for a benchmark: `hold SECS TID...` starts
//! a route (`HOLD_ROUTE=bpf|tracefs`, default auto), watches the tids,
//! sleeps, then prints the stats.

use stealscope_sched::{Collector, Preference};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let secs: f64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(10.0);
    let tids: Vec<u32> = args.iter().skip(1).filter_map(|s| s.parse().ok()).collect();
    let pref = match std::env::var("HOLD_ROUTE").as_deref() {
        Ok("bpf") => Preference::Bpf,
        Ok("tracefs") => Preference::Tracefs,
        _ => Preference::Auto,
    };
    let mut c = match Collector::start(pref) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = c.watch(&tids) {
        eprintln!("{e}");
        std::process::exit(1);
    }
    println!("started route {}", c.route().as_str());
    std::thread::sleep(std::time::Duration::from_secs_f64(secs));
    match c.read() {
        Ok(s) => println!("{:?}", s.stats),
        Err(e) => eprintln!("{e}"),
    }
}
