//! The admin binary. Not written yet (issue 6).

fn main() {
    eprintln!("webhook-admin is not implemented yet");
    std::process::exit(2);
}
