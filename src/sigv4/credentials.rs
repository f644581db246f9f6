//! AWS credentials for signing: the SDK's default chain (environment, shared profile,
//! web identity / IRSA, ECS and EKS Pod Identity container credentials, instance
//! metadata), behind the SDK's lazy identity cache, which refreshes them before they
//! expire. The start-up probe resolves them once and, when nothing is found, asks every
//! source on its own so the error can say why each one had none.
//!
//! The cache is the SDK's `LazyCache`; it is meant to run inside an SDK client, so the
//! runtime components it asks for are filled with inert parts: only its time source
//! and sleep are used.

use std::path::PathBuf;
use std::time::Duration;

use aws_config::ecs::EcsCredentialsProvider;
use aws_config::environment::credentials::EnvironmentVariableCredentialsProvider;
use aws_config::imds;
use aws_config::imds::credentials::ImdsCredentialsProvider;
use aws_config::profile::ProfileFileCredentialsProvider;
use aws_config::provider_config::ProviderConfig;
use aws_config::web_identity_token::WebIdentityTokenCredentialsProvider;
use aws_config::{BehaviorVersion, default_provider::credentials::DefaultCredentialsChain};
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_smithy_async::rt::sleep::{SharedAsyncSleep, TokioSleep};
use aws_smithy_async::time::SharedTimeSource;
use aws_smithy_runtime::client::auth::no_auth::{NO_AUTH_SCHEME_ID, NoAuthScheme};
use aws_smithy_runtime::client::identity::IdentityCache;
use aws_smithy_runtime::client::identity::no_auth::NoAuthIdentityResolver;
use aws_smithy_runtime::client::orchestrator::endpoints::StaticUriEndpointResolver;
use aws_smithy_runtime::client::retries::strategy::NeverRetryStrategy;
use aws_smithy_runtime_api::client::auth::static_resolver::StaticAuthSchemeOptionResolver;
use aws_smithy_runtime_api::client::identity::{
    Identity, ResolveCachedIdentity, SharedIdentityCache, SharedIdentityResolver,
};
use aws_smithy_runtime_api::client::runtime_components::{
    RuntimeComponents, RuntimeComponentsBuilder,
};
use aws_smithy_types::config_bag::ConfigBag;

/// Credentials are refreshed this long before they expire, so a signature made just
/// before never carries a token that lapses while its attempt is in flight.
const REFRESH_AHEAD: Duration = Duration::from_secs(60);

/// How long instance metadata gets per connection and per answer: a pod or laptop
/// without it must not hang the start-up.
const IMDS_TIMEOUT: Duration = Duration::from_secs(1);

/// How long the start-up probe waits for each source when it explains a failure.
const DIAGNOSE_TIMEOUT: Duration = Duration::from_secs(3);

/// Why no credentials could be had.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CredentialsError(String);

/// A cached source of credentials; cheap to share behind an `Arc`.
pub struct Credentials {
    resolver: SharedIdentityResolver,
    cache: SharedIdentityCache,
    components: RuntimeComponents,
    config: ConfigBag,
    /// What the default chain was built from, for the start-up diagnosis.
    chain: Option<ProviderConfig>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("default_chain", &self.chain.is_some())
            .finish()
    }
}

impl Credentials {
    /// The AWS default chain; `region` is where STS is asked (web identity).
    pub async fn default_chain(region: &str) -> Result<Credentials, CredentialsError> {
        let config = provider_config(region);
        let chain = DefaultCredentialsChain::builder()
            .configure(config.clone())
            .region(aws_config::Region::new(region.to_string()))
            .imds_client(imds_client(&config))
            .build()
            .await;
        Credentials::build(SharedCredentialsProvider::new(chain), Some(config))
    }

    /// A given provider (tests: static keys), cached the same way.
    pub fn from_provider(
        provider: SharedCredentialsProvider,
    ) -> Result<Credentials, CredentialsError> {
        Credentials::build(provider, None)
    }

    fn build(
        provider: SharedCredentialsProvider,
        chain: Option<ProviderConfig>,
    ) -> Result<Credentials, CredentialsError> {
        let cache = IdentityCache::lazy()
            .buffer_time(REFRESH_AHEAD)
            .time_source(SharedTimeSource::default())
            .sleep_impl(TokioSleep::new())
            .build();
        // Inert parts: the lazy cache only reads the time source and the sleep.
        let components = RuntimeComponentsBuilder::new("easeoff-sigv4")
            .with_time_source(Some(SharedTimeSource::default()))
            .with_sleep_impl(Some(SharedAsyncSleep::new(TokioSleep::new())))
            .with_identity_cache(Some(IdentityCache::no_cache()))
            .with_retry_strategy(Some(NeverRetryStrategy::new()))
            .with_auth_scheme_option_resolver(Some(StaticAuthSchemeOptionResolver::new(vec![
                NO_AUTH_SCHEME_ID,
            ])))
            .with_endpoint_resolver(Some(StaticUriEndpointResolver::uri("http://localhost")))
            .with_auth_scheme(NoAuthScheme::new())
            .with_identity_resolver(NO_AUTH_SCHEME_ID, NoAuthIdentityResolver::new())
            .build()
            .map_err(|e| CredentialsError(format!("cannot set up the credentials cache: {e}")))?;
        Ok(Credentials {
            resolver: SharedIdentityResolver::new(provider),
            cache,
            components,
            config: ConfigBag::base(),
            chain,
        })
    }

    /// Current credentials, from the cache or freshly loaded.
    pub async fn resolve(&self) -> Result<Identity, CredentialsError> {
        self.cache
            .resolve_cached_identity(self.resolver.clone(), &self.components, &self.config)
            .await
            .map_err(|e| CredentialsError(chain_text(&*e)))
    }

    /// Resolves credentials once at start-up. When none are found, every source of the
    /// default chain is asked on its own and the error lists each one's reason.
    pub async fn probe(&self) -> Result<(), CredentialsError> {
        let error = match self.resolve().await {
            Ok(_) => return Ok(()),
            Err(error) => error,
        };
        let Some(config) = &self.chain else {
            return Err(error);
        };
        let mut tried = String::new();
        for (source, provider) in sources(config) {
            let asked = tokio::time::timeout(DIAGNOSE_TIMEOUT, provider.provide_credentials());
            let reason = match asked.await {
                Ok(Ok(_)) => "found credentials when asked again (a transient failure?)".into(),
                Ok(Err(e)) => reason(&e),
                Err(_) => format!("no answer within {DIAGNOSE_TIMEOUT:?}"),
            };
            tried.push_str(&format!("\n  - {source}: {reason}"));
        }
        Err(CredentialsError(format!(
            "no AWS credentials found; sources tried, in order:{tried}"
        )))
    }
}

/// Why one source had no credentials, without the SDK's generic wording.
fn reason(error: &aws_credential_types::provider::error::CredentialsError) -> String {
    use aws_credential_types::provider::error::CredentialsError as E;
    match error {
        E::CredentialsNotLoaded(_) => match std::error::Error::source(error) {
            Some(cause) => format!("not configured ({})", chain_text(cause)),
            None => "not configured".into(),
        },
        other => chain_text(other),
    }
}

/// The chain's settings: this region for STS, the SDK's HTTP client on our rustls+ring
/// stack, the process environment and file system.
fn provider_config(region: &str) -> ProviderConfig {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
            aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https();
    ProviderConfig::default()
        .with_http_client(http)
        .with_sleep_impl(TokioSleep::new())
        .with_behavior_version(Some(BehaviorVersion::latest()))
        .with_region(Some(aws_config::Region::new(region.to_string())))
}

fn imds_client(config: &ProviderConfig) -> imds::Client {
    imds::Client::builder()
        .configure(config)
        .connect_timeout(IMDS_TIMEOUT)
        .read_timeout(IMDS_TIMEOUT)
        .max_attempts(1)
        .build()
}

/// The default chain's sources in its order, each built on its own, with a name that
/// says where it looks.
fn sources(config: &ProviderConfig) -> Vec<(String, SharedCredentialsProvider)> {
    let env = |name: &str| std::env::var_os(name).map(PathBuf::from);
    let home = env("HOME").unwrap_or_default();
    let config_file = env("AWS_CONFIG_FILE").unwrap_or_else(|| home.join(".aws/config"));
    let credentials_file =
        env("AWS_SHARED_CREDENTIALS_FILE").unwrap_or_else(|| home.join(".aws/credentials"));
    let profile = std::env::var("AWS_PROFILE").unwrap_or_else(|_| "default".into());
    vec![
        (
            "environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)".into(),
            SharedCredentialsProvider::new(EnvironmentVariableCredentialsProvider::new()),
        ),
        (
            format!(
                "profile \"{profile}\" in {} and {}",
                config_file.display(),
                credentials_file.display()
            ),
            SharedCredentialsProvider::new(
                ProfileFileCredentialsProvider::builder()
                    .configure(config)
                    .build(),
            ),
        ),
        (
            "web identity / IRSA (AWS_WEB_IDENTITY_TOKEN_FILE, AWS_ROLE_ARN)".into(),
            SharedCredentialsProvider::new(
                WebIdentityTokenCredentialsProvider::builder()
                    .configure(config)
                    .build(),
            ),
        ),
        (
            "container: ECS or EKS Pod Identity (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI, AWS_CONTAINER_CREDENTIALS_FULL_URI)".into(),
            SharedCredentialsProvider::new(EcsCredentialsProvider::builder().configure(config).build()),
        ),
        (
            "instance metadata (IMDS)".into(),
            SharedCredentialsProvider::new(
                ImdsCredentialsProvider::builder()
                    .configure(config)
                    .imds_client(imds_client(config))
                    .build(),
            ),
        ),
    ]
}

/// An error and its sources on one line, without repeats.
fn chain_text(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let part = cause.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = cause.source();
    }
    text
}
