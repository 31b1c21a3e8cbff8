//! The boxed future returned by the object-safe traits that tie the service
//! together: the scheduler's [`Runner`](crate::scheduler::Runner) and the
//! HTTP endpoints' [`App`](crate::http::App). Neither owns the other, so
//! the alias lives below both.

#![warn(missing_docs)]

use std::future::Future;
use std::pin::Pin;

/// A heap-allocated future that can move between threads, for traits that
/// are used as `dyn` (where `async fn` is not allowed).
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;
