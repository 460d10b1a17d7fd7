//! Media jobs: the job table and the on-disk media store.
//!
//! Key design choice: the table holds state, the store holds files, and
//! neither runs anything: the scheduler's device worker drives jobs through
//! the table and saves their output through the store.

pub mod jobs;
pub mod store;

pub use jobs::{CancelError, JobRecord, JobStatus, Jobs};
pub use store::{MediaStore, StoreError};
