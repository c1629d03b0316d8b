//! The OpenAPI description served at `/openapi.json`, generated from the
//! routes' annotations and the wire types of `sts-client`.

use utoipa::OpenApi;

use crate::api;

/// The API's description.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "sts serve",
        description = "Jobs (fuzz, replay, minimize, campaign) and OpenFlow proxies for sts, a troubleshooting system for SDN controllers. See docs/api.md."
    ),
    paths(
        api::version,
        api::openapi,
        api::list_jobs,
        api::submit,
        api::get_job,
        api::cancel_job,
        api::delete_job,
        api::job_log,
        api::job_events,
        api::experiment_tarball,
        api::report_html,
        api::trace_pcap,
        api::junit_xml,
        api::summary_md,
        api::reset,
        api::list_proxies,
        api::create_proxy,
        api::populate_proxies,
        api::get_proxy,
        api::add_proxy_rule,
        api::get_proxy_rule,
        api::replace_proxy_rule,
        api::delete_proxy_rule,
        api::set_proxy_policy,
        api::release_proxy,
        api::delete_proxy,
        api::proxy_recording,
    ),
    components(schemas(sts_client::Job, sts_client::JobRequest, sts_client::ApiError, sts_client::Version))
)]
pub struct ApiDoc;
