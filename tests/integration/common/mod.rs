//! The harness every integration test starts things with: `pathprobe serve`
//! ([`serve::Serve`], in process [`serve::InProcess`]), an in-process
//! responder ([`responder::start`]), the lab of network namespaces
//! ([`lab::Lab`]), one HTTP client ([`http`]), one reader of metric values
//! ([`metrics`]), promtool ([`promtool`]), the PromQL name reader
//! ([`promql`]), the dashboards' queries ([`dashboards`]), a serve that runs
//! the request/response kinds ([`rr`]), and which tests may run side by
//! side ([`turn`]).

pub mod browser;
pub mod dashboards;
pub mod http;
pub mod lab;
pub mod metrics;
pub mod promql;
pub mod promtool;
pub mod responder;
pub mod rr;
pub mod serve;
pub mod turn;
