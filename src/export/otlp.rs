//! OTLP's logs service as plegd speaks it: the messages of
//! `opentelemetry.proto.collector.logs.v1` (and the common, resource and logs types
//! they carry) with the OTLP specification's field numbers, the one `Export` call, and
//! how an answer is classified (accepted, partly rejected, retry after a delay, or
//! dropped) per the specification's rules for gRPC.

use std::time::Duration;

use prost::Message;
use tonic::transport::Channel;

/// `opentelemetry.proto.common.v1.AnyValue`.
#[derive(Clone, PartialEq, Message)]
pub struct AnyValue {
    /// The value.
    #[prost(oneof = "any_value::Value", tags = "1, 2, 3, 4, 5, 6, 7")]
    pub value: Option<any_value::Value>,
}

/// `AnyValue`'s variants.
pub mod any_value {
    /// One value.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Value {
        /// A string.
        #[prost(string, tag = "1")]
        StringValue(String),
        /// A boolean.
        #[prost(bool, tag = "2")]
        BoolValue(bool),
        /// An integer.
        #[prost(int64, tag = "3")]
        IntValue(i64),
        /// A float.
        #[prost(double, tag = "4")]
        DoubleValue(f64),
        /// A list.
        #[prost(message, tag = "5")]
        ArrayValue(super::ArrayValue),
        /// A map.
        #[prost(message, tag = "6")]
        KvlistValue(super::KeyValueList),
        /// Bytes.
        #[prost(bytes, tag = "7")]
        BytesValue(Vec<u8>),
    }
}

/// `ArrayValue`.
#[derive(Clone, PartialEq, Message)]
pub struct ArrayValue {
    /// Values.
    #[prost(message, repeated, tag = "1")]
    pub values: Vec<AnyValue>,
}

/// `KeyValueList`.
#[derive(Clone, PartialEq, Message)]
pub struct KeyValueList {
    /// Pairs.
    #[prost(message, repeated, tag = "1")]
    pub values: Vec<KeyValue>,
}

/// `KeyValue`.
#[derive(Clone, PartialEq, Message)]
pub struct KeyValue {
    /// Key.
    #[prost(string, tag = "1")]
    pub key: String,
    /// Value.
    #[prost(message, optional, tag = "2")]
    pub value: Option<AnyValue>,
}

/// `InstrumentationScope`.
#[derive(Clone, PartialEq, Message)]
pub struct InstrumentationScope {
    /// Name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Version.
    #[prost(string, tag = "2")]
    pub version: String,
}

/// `opentelemetry.proto.resource.v1.Resource`.
#[derive(Clone, PartialEq, Message)]
pub struct Resource {
    /// Attributes.
    #[prost(message, repeated, tag = "1")]
    pub attributes: Vec<KeyValue>,
}

/// `opentelemetry.proto.logs.v1.LogRecord`.
#[derive(Clone, PartialEq, Message)]
pub struct LogRecord {
    /// When the event happened.
    #[prost(fixed64, tag = "1")]
    pub time_unix_nano: u64,
    /// When it was observed.
    #[prost(fixed64, tag = "11")]
    pub observed_time_unix_nano: u64,
    /// Severity number (9: INFO, 13: WARN).
    #[prost(int32, tag = "2")]
    pub severity_number: i32,
    /// Severity text.
    #[prost(string, tag = "3")]
    pub severity_text: String,
    /// Body.
    #[prost(message, optional, tag = "5")]
    pub body: Option<AnyValue>,
    /// Attributes.
    #[prost(message, repeated, tag = "6")]
    pub attributes: Vec<KeyValue>,
    /// Makes the record an event.
    #[prost(string, tag = "12")]
    pub event_name: String,
}

/// `ScopeLogs`.
#[derive(Clone, PartialEq, Message)]
pub struct ScopeLogs {
    /// The scope.
    #[prost(message, optional, tag = "1")]
    pub scope: Option<InstrumentationScope>,
    /// Records.
    #[prost(message, repeated, tag = "2")]
    pub log_records: Vec<LogRecord>,
}

/// `ResourceLogs`.
#[derive(Clone, PartialEq, Message)]
pub struct ResourceLogs {
    /// The resource.
    #[prost(message, optional, tag = "1")]
    pub resource: Option<Resource>,
    /// Scopes.
    #[prost(message, repeated, tag = "2")]
    pub scope_logs: Vec<ScopeLogs>,
}

/// `ExportLogsServiceRequest`.
#[derive(Clone, PartialEq, Message)]
pub struct ExportLogsServiceRequest {
    /// Resources.
    #[prost(message, repeated, tag = "1")]
    pub resource_logs: Vec<ResourceLogs>,
}

/// `ExportLogsPartialSuccess`.
#[derive(Clone, PartialEq, Message)]
pub struct ExportLogsPartialSuccess {
    /// Records the collector rejected.
    #[prost(int64, tag = "1")]
    pub rejected_log_records: i64,
    /// Why.
    #[prost(string, tag = "2")]
    pub error_message: String,
}

/// `ExportLogsServiceResponse`.
#[derive(Clone, PartialEq, Message)]
pub struct ExportLogsServiceResponse {
    /// Set when part of the request was rejected.
    #[prost(message, optional, tag = "1")]
    pub partial_success: Option<ExportLogsPartialSuccess>,
}

/// `google.rpc.Status`, as `grpc-status-details-bin` carries it.
#[derive(Clone, PartialEq, Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<prost_types::Any>,
}

/// `google.rpc.RetryInfo`.
#[derive(Clone, PartialEq, Message)]
struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    retry_delay: Option<prost_types::Duration>,
}

/// The method's path.
pub const EXPORT_PATH: &str = "/opentelemetry.proto.collector.logs.v1.LogsService/Export";

/// How an export ended.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    /// Every record was accepted.
    Accepted,
    /// Accepted except `rejected` records (not retried, per the specification).
    Partial {
        /// Records rejected.
        rejected: i64,
        /// The collector's words.
        message: String,
    },
    /// Retry the same request, after `after` if the collector said (`RetryInfo`).
    Retry {
        /// The collector's delay, if it gave one.
        after: Option<Duration>,
        /// What failed.
        error: String,
    },
    /// Not retryable: the batch is dropped (and counted).
    Dropped {
        /// What failed.
        error: String,
    },
}

/// A status carrying a `google.rpc.RetryInfo` of `delay`: how a collector asks a client
/// to come back later (throttling with `RESOURCE_EXHAUSTED`).
pub fn with_retry_info(code: tonic::Code, message: &str, delay: Duration) -> tonic::Status {
    let info = RetryInfo {
        retry_delay: Some(prost_types::Duration {
            seconds: delay.as_secs() as i64,
            nanos: delay.subsec_nanos() as i32,
        }),
    };
    let rpc = RpcStatus {
        code: code as i32,
        message: message.into(),
        details: vec![prost_types::Any {
            type_url: "type.googleapis.com/google.rpc.RetryInfo".into(),
            value: info.encode_to_vec(),
        }],
    };
    tonic::Status::with_details(code, message, rpc.encode_to_vec().into())
}

/// The delay a status's `RetryInfo` asks for.
pub fn retry_delay(status: &tonic::Status) -> Option<Duration> {
    let rpc = RpcStatus::decode(status.details()).ok()?;
    rpc.details.iter().filter(|a| a.type_url.ends_with("/google.rpc.RetryInfo")).find_map(|a| {
        let d = RetryInfo::decode(a.value.as_slice()).ok()?.retry_delay?;
        (d.seconds >= 0 && d.nanos >= 0).then(|| Duration::new(d.seconds as u64, d.nanos as u32))
    })
}

/// The specification's table: which gRPC codes are retried.
pub fn classify(status: &tonic::Status) -> Outcome {
    use tonic::Code::*;
    let delay = retry_delay(status);
    let error = format!("{:?}: {}", status.code(), status.message());
    match status.code() {
        Cancelled | DeadlineExceeded | Aborted | OutOfRange | Unavailable | DataLoss => {
            Outcome::Retry { after: delay, error }
        }
        // Throttling: retried only when the server says when.
        ResourceExhausted if delay.is_some() => Outcome::Retry { after: delay, error },
        _ => Outcome::Dropped { error },
    }
}

/// Sends one request on `channel` with `headers`, within `timeout`.
pub async fn export(
    channel: Channel,
    headers: &[(tonic::metadata::AsciiMetadataKey, tonic::metadata::AsciiMetadataValue)],
    req: ExportLogsServiceRequest,
    timeout: Duration,
) -> Outcome {
    let mut grpc = tonic::client::Grpc::new(channel);
    if let Err(e) = grpc.ready().await {
        return Outcome::Retry { after: None, error: format!("collector not reachable: {e}") };
    }
    let mut request = tonic::Request::new(req);
    request.set_timeout(timeout);
    for (k, v) in headers {
        request.metadata_mut().insert(k.clone(), v.clone());
    }
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(EXPORT_PATH);
    let codec = tonic_prost::ProstCodec::<ExportLogsServiceRequest, ExportLogsServiceResponse>::default();
    match grpc.unary(request, path, codec).await {
        Ok(resp) => match resp.into_inner().partial_success {
            Some(p) if p.rejected_log_records > 0 || !p.error_message.is_empty() => {
                Outcome::Partial { rejected: p.rejected_log_records, message: p.error_message }
            }
            _ => Outcome::Accepted,
        },
        // A status the client made from a broken connection (the collector killed
        // mid-request) carries its cause; the server's own statuses do not.
        Err(status)
            if matches!(status.code(), tonic::Code::Unknown | tonic::Code::Internal)
                && std::error::Error::source(&status).is_some() =>
        {
            Outcome::Retry { after: None, error: format!("transport: {status}") }
        }
        Err(status) => classify(&status),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_retry_info(code: tonic::Code, secs: u64) -> tonic::Status {
        super::with_retry_info(code, "slow down", Duration::from_secs(secs))
    }

    #[test]
    fn retryable_codes_are_retried_and_the_rest_dropped_as_the_specification_says() {
        use tonic::Code::*;
        for code in [Cancelled, DeadlineExceeded, Aborted, OutOfRange, Unavailable, DataLoss] {
            assert!(matches!(classify(&tonic::Status::new(code, "x")), Outcome::Retry { after: None, .. }), "{code:?}");
        }
        for code in [InvalidArgument, Unauthenticated, PermissionDenied, Unimplemented, Internal, ResourceExhausted] {
            assert!(matches!(classify(&tonic::Status::new(code, "x")), Outcome::Dropped { .. }), "{code:?}");
        }
    }

    #[test]
    fn retry_info_sets_the_delay_and_makes_throttling_retryable() {
        let s = with_retry_info(tonic::Code::ResourceExhausted, 7);
        assert_eq!(retry_delay(&s), Some(Duration::from_secs(7)));
        assert_eq!(
            classify(&s),
            Outcome::Retry { after: Some(Duration::from_secs(7)), error: "ResourceExhausted: slow down".into() }
        );
        let u = with_retry_info(tonic::Code::Unavailable, 2);
        assert!(matches!(classify(&u), Outcome::Retry { after: Some(d), .. } if d == Duration::from_secs(2)));
    }

    #[test]
    fn an_event_name_and_the_times_use_the_specifications_field_numbers() {
        let r =
            LogRecord { time_unix_nano: 1, observed_time_unix_nano: 2, event_name: "e".into(), ..Default::default() };
        let bytes = r.encode_to_vec();
        // time_unix_nano: field 1, fixed64 (tag 0x09); observed: field 11 (0x59); event_name: field 12 (0x62).
        assert_eq!(bytes[0], 0x09);
        assert!(bytes.windows(2).any(|w| w == [0x62, 1]));
        assert!(bytes.contains(&0x59));
    }
}
