fn main() {
    eprintln!("navis-bench: not yet written");
    std::process::exit(2);
}
