//! The `favlo` command (being written).
fn main() {}
