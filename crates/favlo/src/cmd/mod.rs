//! One module per subcommand.

pub mod bench;
pub mod bench_chat;
pub mod bench_cuda;
pub mod bench_targets;
pub mod common;
pub mod complete;
pub mod lock;
pub mod models;
pub mod pull;
pub mod quantize;
pub mod selftest;
pub mod serve;
