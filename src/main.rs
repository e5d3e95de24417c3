//! The `switchyard` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cli;

#[derive(Parser)]
#[command(
    name = "switchyard",
    version,
    about = "A language server between your editor and the models that write code"
)]
struct Cli {
    /// Configuration file (default: config.toml in the platform config directory, or $SWITCHYARD_CONFIG).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// Log file (default: switchyard.log in the platform state directory).
    #[arg(long, global = true)]
    log_file: Option<PathBuf>,
    /// Also log to stderr.
    #[arg(long, global = true)]
    log_stderr: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the language server on stdin/stdout (the default).
    Serve,
    /// Complete at FILE:LINE:COL (1-based) through the same path the editor uses.
    Complete {
        location: String,
        /// Print a JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// Skip the warm-up an editor does after opening a file, and measure a cold request.
        #[arg(long)]
        cold: bool,
    },
    /// Manage local models.
    Models {
        #[command(subcommand)]
        action: cli::models::ModelsAction,
    },
    /// Show who serves each task now, breakers, quota headroom and parked tasks,
    /// as every switchyard process sharing this state sees them.
    Status {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Show what was sent to remote providers: every request's time, task,
    /// provider and size, never its text (the outbound audit log).
    Audit {
        /// How far back: 90s, 15m, 1h, 7d.
        #[arg(long, default_value = "1h")]
        since: String,
        /// Print the records as JSON lines instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Show whether completions are worth having: shown, accepted (whole or
    /// in part), ignored, latency, and empty or late answers, by editor,
    /// language and model (kept on this machine, never the text).
    Stats {
        /// How far back: 90s, 15m, 1h, 7d.
        #[arg(long, default_value = "7d")]
        since: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Serve an OpenAI-compatible API over the same routing, breakers and quota.
    Gateway {
        /// Address to listen on; beyond loopback needs --allow-remote and a token.
        #[arg(long, default_value = "127.0.0.1:8787")]
        listen: std::net::SocketAddr,
        #[arg(long)]
        allow_remote: bool,
    },
    /// Send a known prompt to each configured provider/model (or, with --local,
    /// check the local model) and record the latency; exits 1 when one is
    /// unhealthy and 2 when the configuration cannot be probed. Made for cron.
    Probe(cli::probe::ProbeArgs),
    /// Check that this machine is ready: configuration, model and its digest,
    /// disk, state directory, log, local-only mode, provider keys and the
    /// engine; exits 1, naming each fix, when something is not.
    Doctor {
        /// Print one JSON object instead of text (what the editors read).
        #[arg(long)]
        json: bool,
        /// Leave out loading the model to measure the engine.
        #[arg(long)]
        no_engine: bool,
    },
    /// Check configuration.
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
}

#[derive(Subcommand)]
enum ConfigAction {
    /// Validate a config file (default: the one switchyard would read) and print the effective configuration.
    Check { file: Option<PathBuf> },
}

fn main() -> ExitCode {
    switchyard_base::openmp::bound_spinning();
    // Before any thread starts: the local UTC offset can only be read then.
    switchyard_config::local_first::capture_local_offset();
    let cli = Cli::parse();
    let log_file = cli
        .log_file
        .clone()
        .unwrap_or_else(switchyard::logging::default_log_file);
    if let Err(e) = switchyard::logging::init(&log_file, cli.log_stderr) {
        eprintln!(
            "switchyard: cannot open log file {}: {e}; logging disabled",
            log_file.display()
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let config_file = cli
        .config
        .clone()
        .or_else(switchyard_config::default_file_path);
    let code = runtime.block_on(async move {
        match cli.command.unwrap_or(Command::Serve) {
            Command::Serve => cli::serve(config_file).await,
            Command::Complete {
                location,
                json,
                cold,
            } => cli::complete::run(config_file, &location, json, cold).await,
            Command::Models { action } => cli::models::run(action).await,
            Command::Status { json } => cli::status::run(config_file, json).await,
            Command::Audit { since, json } => cli::audit::run(&since, json),
            Command::Stats { since, json } => cli::stats::run(&since, json),
            Command::Gateway {
                listen,
                allow_remote,
            } => cli::gateway::run(config_file, listen, allow_remote).await,
            Command::Probe(args) => cli::probe::run(config_file, args).await,
            Command::Doctor { json, no_engine } => {
                cli::doctor::run(config_file, &log_file, json, no_engine).await
            }
            Command::Config {
                action: ConfigAction::Check { file },
            } => cli::check_config(file.or(config_file)),
        }
    });
    // Don't wait on blocked stdin readers: after `exit` the client may keep stdin open.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    code
}
