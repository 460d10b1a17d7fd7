//! One module per subcommand.

pub mod models;
pub mod pull;
pub mod quantize;
