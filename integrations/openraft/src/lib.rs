//! An openraft log store on walcrypt's encrypted write-ahead log.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod error;
mod flusher;
pub mod kv;
pub mod record;
mod state;
mod store;

pub use error::Error;
pub use store::WalLogStore;
