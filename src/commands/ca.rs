//! `airlock ca`: the persistent certificate authority.

use std::path::PathBuf;
use std::process::ExitCode;

use airlock_proxy::CertificateAuthority;
use airlock_proxy::ca::{CA_CERT_FILE, CA_KEY_FILE};

#[derive(clap::Subcommand)]
pub(crate) enum CaCommand {
    /// Create a CA in DIR: ca.pem (give it to clients to trust) and ca-key.pem (mode 0600).
    Init {
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
    },
}

pub(crate) fn run(cmd: CaCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        CaCommand::Init { dir } => {
            CertificateAuthority::init(&dir)?;
            println!(
                "created CA in {dir}: {cert} (trust this in clients), {key} (private, mode 0600)",
                dir = dir.display(),
                cert = dir.join(CA_CERT_FILE).display(),
                key = dir.join(CA_KEY_FILE).display()
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}
