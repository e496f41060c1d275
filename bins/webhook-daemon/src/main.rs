//! The daemon binary. Not written yet (issue 5).

fn main() {
    eprintln!("webhook-daemon is not implemented yet");
    std::process::exit(2);
}
