//! `grpc.health.v1.Health` on the API socket, answered from readiness itself: `Check`
//! reads readiness when it is called, so it never disagrees with `/readyz`, and `Watch`
//! sends the status at once and then each change (readiness read every 100 ms while a
//! watch is open). Known services: "" (the server) and `plegd.v1.PodLifecycle`.

use std::pin::Pin;
use std::time::Duration;

use futures_util::Stream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_server::{Health, HealthServer};

use crate::pleg::health::Readiness;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

/// How often an open `Watch` reads readiness.
const WATCH_EVERY: Duration = Duration::from_millis(100);

/// The services this health server knows.
const SERVICES: [&str; 2] = ["", "plegd.v1.PodLifecycle"];

/// The health service.
#[derive(Clone)]
pub struct ReadinessHealth {
    ready: Readiness,
    shutdown: CancellationToken,
}

impl ReadinessHealth {
    /// A health service over `ready`; open watches end at shutdown.
    pub fn server(ready: Readiness, shutdown: CancellationToken) -> HealthServer<Self> {
        HealthServer::new(Self { ready, shutdown })
    }

    fn status(&self) -> ServingStatus {
        if self.ready.check().is_ok() { ServingStatus::Serving } else { ServingStatus::NotServing }
    }
}

fn known(service: &str) -> Result<(), Status> {
    if SERVICES.contains(&service) {
        Ok(())
    } else {
        Err(super::capped(Status::not_found(format!("unknown service {service:?}"))))
    }
}

#[tonic::async_trait]
impl Health for ReadinessHealth {
    async fn check(&self, req: Request<HealthCheckRequest>) -> Result<Response<HealthCheckResponse>, Status> {
        known(&req.get_ref().service)?;
        Ok(Response::new(HealthCheckResponse { status: self.status() as i32 }))
    }

    type WatchStream = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

    async fn watch(&self, req: Request<HealthCheckRequest>) -> Result<Response<Self::WatchStream>, Status> {
        let known = SERVICES.contains(&req.get_ref().service.as_str());
        let this = self.clone();
        let stream = futures_util::stream::unfold((this, None::<ServingStatus>), move |(this, last)| async move {
            if !known {
                // The protocol: an unknown service is SERVICE_UNKNOWN, once, then
                // whatever it becomes (here: never anything else).
                if last.is_some() {
                    this.shutdown.cancelled().await;
                    return None;
                }
                let r = HealthCheckResponse { status: ServingStatus::ServiceUnknown as i32 };
                return Some((Ok(r), (this, Some(ServingStatus::ServiceUnknown))));
            }
            loop {
                let now = this.status();
                if last != Some(now) {
                    return Some((Ok(HealthCheckResponse { status: now as i32 }), (this, Some(now))));
                }
                tokio::select! {
                    _ = this.shutdown.cancelled() => return None,
                    _ = tokio::time::sleep(WATCH_EVERY) => {}
                }
            }
        });
        Ok(Response::new(Box::pin(stream)))
    }
}
